"""The grading kernel's ``course_lib`` holds no answer to the assignment
it grades (``course_tools.classroom.strip``), checked per exercise by
every path a student found: the module's name, a private core, pickle,
``pkgutil.resolve_name``, ``string.Formatter``, a star import, a class
held by another module, the exercise specifications; and in the files
themselves (no source line of a removed definition, no compiled file).
"""

import ast
import importlib
import inspect
import json
import subprocess
import sys
from functools import cache
from pathlib import Path

import nbformat
import pytest

import course_lib
from course_lib.grading import CHAPTER_OF, exercise
from course_tools.classroom import strip
from tests.nbgrading import ROOT

PACKAGE = Path(course_lib.__file__).resolve().parent
CHAPTERS = sorted(p.name for p in (ROOT / "chapters").glob("[0-9][0-9]_*"))

# The exercises whose course version stays in their own chapter's kernel,
# because another exercise there builds on it (``builds_on``) and it has
# no stand-in (``course_tools/classroom/standins.py``).
BUILT_ON = {"FeedForward", "apply_rotary"}
# What later chapters build on, present in the kernel of a chapter.
KEPT = {"03_multi_head_attention": (
    "from course_lib.attention import scaled_dot_product_attention as f\n"
    "Q = torch.randn(2, 3, 4)\nassert f(Q, Q, Q)[0].shape == (2, 3, 4)"),
    "07_vision_transformer": (
    "from course_lib.layers import TransformerEncoder as E\n"
    "m = E(n_layers=1, d_model=8, n_heads=2, d_ff=16)\n"
    "assert m(torch.randn(2, 5, 8)).shape == (2, 5, 8)")}


def _released(chapter):
    return [nbformat.read(p, 4) for p in
            sorted((ROOT / "chapters" / chapter).glob("*.ipynb"))]


@cache
def assignment_of():
    """``{exercise: chapter folder}`` from the released notebooks."""
    return {name: chapter for chapter in CHAPTERS
            for name in strip.exercises_of(_released(chapter))}


@cache
def built(chapter, folder):
    names = strip.exercises_of(_released(chapter))
    target = Path(folder) / chapter / "course_lib"
    return target, strip.build(PACKAGE, names, target, assignment=chapter)


# Run in a fresh Python whose course_lib is the stripped copy: every path
# to each removed object, and what each one gave.
PROBE = '''
import importlib, json, pickle, pkgutil, string, sys
sys.path.insert(0, sys.argv[1])
import course_lib
assert course_lib.__file__.startswith(sys.argv[1]), course_lib.__file__
found = {}

def attempt(label, thunk):
    try:
        value = thunk()
        if callable(value):
            value()
        found[label] = "reached"
    except Exception as error:
        found[label] = type(error).__name__ + ": " + str(error)[:200]

for module, names in json.loads(sys.argv[2]).items():
    for name in names:
        path = f"{module}:{name}"
        attempt(path + " by import", lambda: getattr(
            importlib.import_module(module), name))
        attempt(path + " by resolve_name",
                lambda: pkgutil.resolve_name(path))
        attempt(path + " by pickle", lambda: pickle.loads(pickle.dumps(
            getattr(importlib.import_module(module), name))))
        attempt(path + " by Formatter", lambda: string.Formatter(
            ).get_field("0." + name, [importlib.import_module(module)],
                        {})[0])
        space = {}
        attempt(path + " by star import", lambda: exec(
            f"from {module} import *", space) or space.get(
                name, getattr(importlib.import_module(module), name)))
        attempt(path + " by subclassing", lambda: type(
            "Mine", (getattr(importlib.import_module(module), name),),
            {}) if isinstance(getattr(importlib.import_module(module),
                                      name), type) else
            getattr(importlib.import_module(module), name))
for spec in sys.argv[4:]:
    attempt(spec + " (the specification)",
            lambda: importlib.import_module(spec))
# Every other module imports, and what later chapters build on works.
for info in pkgutil.walk_packages(course_lib.__path__, "course_lib."):
    if not info.name.startswith("course_lib.grading.chapter"):
        importlib.import_module(info.name)
import torch
exec(sys.argv[3])
print(json.dumps(found))
'''


def probed(chapter, folder):
    """:func:`probe_chapter` of ``chapter``; every chapter's probe runs at
    once, on the first call."""
    return all_probed(folder)[chapter]


@cache
def all_probed(folder):
    from concurrent.futures import ThreadPoolExecutor

    for chapter in CHAPTERS:  # ast.parse is not safe in threads (3.11)
        built(chapter, folder)
    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip(CHAPTERS, pool.map(
            lambda c: probe_chapter(c, folder), CHAPTERS), strict=True))


def probe_chapter(chapter, folder):
    """What each path to each removed object gave, in a fresh Python
    whose course_lib is the chapter's stripped copy (``-B``: no compiled
    file written into it), after it imported every module and ran what
    the chapter's answers may build on (``KEPT``)."""
    target, table = built(chapter, folder)
    specs = sorted({f"course_lib.grading.{CHAPTER_OF[n]}" for n in
                    strip.exercises_of(_released(chapter))})
    result = subprocess.run(
        [sys.executable, "-I", "-B", "-c", PROBE, str(target.parent),
         json.dumps(table), KEPT.get(chapter, ""), *specs],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])


@pytest.mark.parametrize("name", sorted(CHAPTER_OF))
def test_no_path_reaches_the_answer(name, tmp_path_factory):
    chapter = assignment_of().get(name)
    assert chapter, f"{name} is checked by no released notebook"
    folder = str(tmp_path_factory.getbasetemp())
    _, table = built(chapter, folder)
    reference = exercise(name).reference
    module, top = reference.__module__, reference.__qualname__.split(".")[0]
    names = strip.exercises_of(_released(chapter))
    if top in strip.plan(names)[1].get(module, ()):
        # a stand-in on an operation the rule forbids: see
        # test_each_stand_in_is_a_forbidden_call
        return
    kept = strip.kept(names)
    if top in kept.get(module, ()):
        # another exercise of the chapter builds on it: it stays, and the
        # rules alone guard this exercise (see strip's docstring)
        assert top in BUILT_ON, (name, kept)
        return
    assert top in table.get(module, []), (name, table)
    found = probed(chapter, folder)
    mine = [path for path in found if path.startswith(f"{module}:{top} ")
            or path.startswith(f"course_lib.grading.{CHAPTER_OF[name]} ")]
    assert len(mine) >= 6, found
    for path in mine:
        outcome = found[path]
        assert outcome != "reached", path
        assert ("is not available in this exercise" in outcome
                or "is not available in the kernel" in outcome), (
            path, outcome)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_removed_helper_is_out_of_reach(chapter, tmp_path_factory):
    found = probed(chapter, str(tmp_path_factory.getbasetemp()))
    reached = [path for path, outcome in found.items()
               if "is not available" not in outcome]
    assert not reached, {p: found[p] for p in reached}


def _body(node):
    """A definition's code, docstring left out, as ``ast.unparse``."""
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(
            body[0].value, ast.Constant):
        body = body[1:]
    return "\n".join(ast.unparse(statement) for statement in body)


@pytest.mark.parametrize("name", sorted(CHAPTER_OF))
def test_the_answer_is_not_in_the_files(name, tmp_path_factory):
    """Each removed definition is a stub that raises, and its code is in
    no file of the copy; no compiled file is there."""
    chapter = assignment_of()[name]
    target, table = built(chapter, str(tmp_path_factory.getbasetemp()))
    assert not list(target.rglob("__pycache__"))
    assert not list(target.rglob("*.pyc"))
    everything = "\n".join(ast.unparse(ast.parse(p.read_text()))
                           for p in target.rglob("*.py"))
    for module, names in table.items():
        original = ast.parse(inspect.getsource(
            importlib.import_module(module)))
        defs = {n.name: n for n in original.body if hasattr(n, "name")}
        path = target / Path(*module.split(".")[1:]).with_suffix(".py")
        stripped = {n.name: n for n in ast.parse(path.read_text()).body
                    if hasattr(n, "name")}
        for top in names:
            assert _body(defs[top]) not in everything, (module, top)
            if module.startswith("course_lib.grading.chapter"):
                assert "raise ImportError" in path.read_text()
                continue
            stub = _body(stripped[top])
            assert "_NotAvailableError" in stub and len(
                stub.splitlines()) <= 4, (module, top, stub)




def _earns(spec, obj):
    """Whether ``obj``, run as the answer to ``spec`` on its visible
    cases, earns any point."""
    from course_lib.grading.engine import run_each
    from course_lib.grading.families import tally

    try:
        judged, _ = run_each(spec, obj, spec.visible())
    except Exception:  # noqa: BLE001 - a candidate that cannot even run
        return False
    return any(r.earned > 0 for r in tally(spec, judged, points=1))


def _caught(spec, node, namespace):
    """The rules' findings on definition ``node`` as ``spec``'s answer."""
    from course_lib.grading import forbidden, rules

    tree = rules.parse(ast.unparse(node))
    names = rules.aliases_of(namespace)
    names.update(rules.aliases([tree]))
    return rules.uses(tree, **forbidden(spec), aliases=names)


def _executed(path, module):
    """The namespace of the kernel's own source ``path`` of ``module``,
    executed (as a student may: ``exec(open(path).read())``) with its
    imports from this process's ``course_lib``."""
    import types

    error = sys.modules.setdefault(strip.ERROR_MODULE, types.ModuleType(
        strip.ERROR_MODULE))
    exec(strip.ERROR_SOURCE, vars(error))
    space = {"__name__": f"kernel_copy.{module}"}
    exec(compile(path.read_text(), str(path), "exec"), space)
    return space


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_executing_the_kernels_own_source_earns_nothing(
        chapter, tmp_path_factory):
    """Every function and class of the kernel's copy of a module that
    holds an answer or what an answer builds on, executed from its source
    and run as the answer to each exercise of the chapter: none earns a
    point unless the exercise's rules catch it (a stand-in on PyTorch's
    own operation, a building block the rules name)."""
    names = strip.exercises_of(_released(chapter))
    target, _ = built(chapter, str(tmp_path_factory.getbasetemp()))
    modules = set(strip.answers(names)) | set(strip.kept(names))
    modules = sorted(m for m in modules
                     if not m.startswith("course_lib.grading"))
    earned = []
    for module in modules:
        path = target / Path(*module.split(".")[1:]).with_suffix(".py")
        space = _executed(path, module)
        defs = strip._definitions(ast.parse(path.read_text()))
        for name, node in defs.items():
            obj = space.get(name)
            for exercise_name in names:
                spec = exercise(exercise_name)
                if callable(obj) and _earns(spec, obj) and not _caught(
                        spec, node, space):
                    earned.append((exercise_name, module, name))
    # what an exercise of the chapter builds on, with no stand-in yet:
    # guarded by the rules alone (BUILT_ON)
    assert {e for e, m, n in earned} <= BUILT_ON, earned
    assert all(e == n for e, m, n in earned), earned


def test_kv_attention_steps_answer_leaves_as_the_reference_alone():
    """The KV cache runs through each module's own ``forward``: no
    private function of ``course_lib.generation`` computes the cached
    attention step beside ``kv_attention_step`` any more, so the
    exercise's answer is its stub and nothing needs a stand-in."""
    found = strip.answers(["kv_attention_step"])
    assert set(found["course_lib.generation"]) == {"kv_attention_step"}
    removed, replaced = strip.plan(["kv_attention_step"])
    assert "kv_attention_step" in removed["course_lib.generation"]
    assert "course_lib.generation" not in replaced


@pytest.mark.parametrize("name", sorted(CHAPTER_OF))
def test_every_answer_is_removed_replaced_or_built_on(name):
    """Per exercise: each definition that computes its answer
    (:func:`strip.answers`) is a stub, a stand-in, or stays because an
    exercise of the chapter builds on it (and then it is one of
    ``BUILT_ON``'s or a private helper of one)."""
    names = strip.exercises_of(_released(assignment_of()[name]))
    removed, replaced = strip.plan(names)
    kept = strip.kept(names)
    for module, found in strip.answers([name]).items():
        for top in found:
            where = [top in removed.get(module, ()),
                     top in replaced.get(module, ()),
                     top in kept.get(module, ())]
            assert sum(where) == 1, (name, module, top, where)


def _standin_object(module, name):
    from course_tools.classroom.standins import standin

    space = dict(vars(importlib.import_module(module)))
    exec(standin(module, name), space)
    return space[name], space


def test_each_stand_in_computes_what_the_original_does():
    import torch

    from course_lib.layers import LayerNorm

    torch.manual_seed(0)
    standin, _ = _standin_object("course_lib.layers", "LayerNorm")
    original, mine = LayerNorm(d_model=8), standin(d_model=8)
    with torch.no_grad():
        original.weight.normal_()
        original.bias.normal_()
    mine.load_state_dict(original.state_dict())
    x = torch.randn(2, 5, 8)
    torch.testing.assert_close(mine(x), original(x))
    assert list(mine.state_dict()) == list(original.state_dict())

    from course_lib.vit import PatchEmbedding, patchify

    cut, _ = _standin_object("course_lib.vit", "patchify")
    images = torch.randn(2, 3, 8, 6, dtype=torch.float64)
    assert torch.equal(cut(images, 2), patchify(images, 2))
    embed, _ = _standin_object("course_lib.vit", "PatchEmbedding")
    kwargs = {"image_size": 8, "patch_size": 4, "in_channels": 3,
              "d_model": 16}
    original, mine = PatchEmbedding(**kwargs), embed(**kwargs)
    mine.load_state_dict(original.state_dict())
    images = torch.randn(2, 3, 8, 8)
    torch.testing.assert_close(mine(images), original(images))


@pytest.mark.parametrize("entry", sorted(
    __import__("course_tools.classroom.standins",
               fromlist=["STANDINS"]).STANDINS))
def test_each_stand_in_is_a_forbidden_call(entry):
    """Executed as a student's answer, each stand-in is caught by the
    rules of every exercise whose answer it stands in for."""
    module, name = entry
    _, space = _standin_object(module, name)
    node = strip._definitions(ast.parse(
        __import__("course_tools.classroom.standins", fromlist=["x"]
                   ).standin(module, name)))[name]
    owners = [n for n in sorted(CHAPTER_OF)
              if name in strip.answers([n]).get(module, ())]
    assert owners, entry
    for owner in owners:
        assert _caught(exercise(owner), node, space), (entry, owner)
