"""An exercise that a cell above already solves teaches nothing: no
solution may appear, up to renaming, in an earlier code cell of its
chapter.

Measure: the solution's body (between ``### BEGIN SOLUTION`` and ``###
END SOLUTION``) and each earlier narrative code cell become token
sequences in which every name and number is ``N`` except attribute
names (so
``torch.exp(x)`` and ``torch.exp(logits)`` are the same, and
``x.softmax`` differs from ``x.sum``); the *coverage* of the solution by
a cell is the fraction of the solution's tokens that the cell matches,
in order, in runs of at least 4 tokens (difflib's matching blocks). A
cell that holds the solution line for line covers it almost entirely
(chapter 1's old cell 47 covered ``attention_coefficients`` at 0.96);
cells that only share the vocabulary of the topic cover short runs
(``torch.exp(...)``, ``.sum(dim=-1, keepdim=True)``). The reviewer's
examples of transcription measured 0.43 (chapter 8's kernel_average) to
0.96, so the threshold is
0.4, for solutions of at least 20 tokens (a shorter one, a single
expression, is alike to anything that uses the same function).
"""

import difflib
import io
import keyword
import re
import tokenize

import nbformat
import pytest

from tests.nbgrading import ROOT, notebook_path

THRESHOLD = 0.4
MIN_TOKENS = 20
CHAPTERS = sorted(p.name for p in (ROOT / "solutions").iterdir()
                  if p.is_dir() and p.name[:2].isdigit())
# Exercises whose chapter shows code close to the solution in an earlier
# cell on purpose (13 copies when this test was written, all rewritten
# since): a debugging exercise shows the broken code in a cell
# that runs the checks it fails. Exercise -> the name of the broken
# version, which the covering cell must define.
# debugging exercises: the broken code the student repairs is shown
# above the exercise on purpose (a class or a function of this name)
KNOWN_COPIES = {"DecoderBlock": "BrokenDecoderLayer",
                "adamw_step": "buggy_adamw_step"}


def tokens(source):
    """Names and numbers as ``N`` (attribute names kept), operators."""
    out, previous = [], None
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.NAME and not keyword.iskeyword(
                    token.string):
                out.append(token.string if previous == "." else "N")
            elif token.type == tokenize.NUMBER:
                out.append("N")  # a constant is renamed like a variable
            elif token.type in (tokenize.OP, tokenize.NAME):
                out.append(token.string)
            if token.type not in (tokenize.NL, tokenize.NEWLINE,
                                  tokenize.INDENT, tokenize.DEDENT,
                                  tokenize.COMMENT):
                previous = token.string
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return out


def solution_body(source):
    found = re.search(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", source,
                      re.S)
    body = found.group(1) if found else source
    lines = body.splitlines()
    indent = min((len(line) - len(line.lstrip()) for line in lines
                  if line.strip()), default=0)
    return "\n".join(line[indent:] for line in lines)


def coverage(solution, cell):
    """The fraction of ``solution``'s tokens that ``cell`` matches, in
    order, in runs of at least 4 tokens."""
    if not solution:
        return 0.0
    matcher = difflib.SequenceMatcher(None, solution, cell, autojunk=False)
    return sum(block.size for block in matcher.get_matching_blocks()
               if block.size >= 4) / len(solution)


def measure(chapter):
    """``{exercise: (coverage, cell index)}``: the earlier cell that
    covers each solution most."""
    notebook = nbformat.read(notebook_path(chapter), 4)
    earlier, found = [], {}
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code":
            continue
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution"):
            solution = tokens(solution_body(cell.source))
            if len(solution) < MIN_TOKENS:
                continue
            found[meta["grade_id"]] = max(
                ((coverage(solution, t), i) for i, t in earlier),
                default=(0.0, None))
        elif not meta:
            earlier.append((index, tokens(cell.source)))
    return found


def test_the_measure_finds_a_copy():
    solution = tokens("e = torch.exp(x - x.amax(dim, keepdim=True))\n"
                      "return e / e.sum(dim, keepdim=True)\n" * 2)
    copy = tokens("z = torch.randn(5)\n"
                  "w = torch.exp(z - z.amax(-1, keepdim=True))\n"
                  "w = w / w.sum(-1, keepdim=True)\n" * 2)
    other = tokens("plt.plot(xs, ys)\nplt.show()\n")
    assert coverage(solution, copy) > THRESHOLD + 0.1
    assert coverage(solution, other) < 0.1


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_no_solution_is_in_an_earlier_cell(chapter):
    for exercise, (value, cell) in measure(chapter).items():
        if exercise in KNOWN_COPIES:
            source = nbformat.read(notebook_path(chapter), 4).cells[cell]
            broken = KNOWN_COPIES[exercise]
            assert (f"class {broken}(" in source.source
                    or f"def {broken}(" in source.source), (
                f"{chapter}: cell {cell} covers the solution of {exercise}"
                f" but is not the broken {KNOWN_COPIES[exercise]}")
            continue
        assert value < THRESHOLD, (
            f"{chapter}: cell {cell} covers the solution of {exercise} "
            f"at {value:.2f} (threshold {THRESHOLD}): show the "
            "mathematics or use the reference as a black box instead")


def test_known_copies_are_still_copies():
    """An entry of KNOWN_COPIES that no longer is one must go."""
    measured = {}
    for chapter in CHAPTERS:
        measured.update(measure(chapter))
    stale = sorted(e for e in KNOWN_COPIES
                   if e in measured and measured[e][0] < THRESHOLD)
    assert not stale, f"remove from KNOWN_COPIES: {stale}"
