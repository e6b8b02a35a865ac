"""Quote ``benchmarks/chapter_times.latest.json`` where the course states
it: each chapter's overview ("... measured N s of CPU"), the README (the
range and total of CPU seconds, the range of wall seconds) and the
introduction (the range). Run it after ``benchmarks/chapter_times.py``;
``tests/test_records.py`` fails while a statement differs from the
record. Only the numbers are replaced; the sentences stay as written.

    .venv/bin/python scripts/quote_chapter_times.py
"""

import json
import re
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
WORDS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six",
         7: "seven", 8: "eight", 9: "nine", 10: "ten", 11: "eleven",
         12: "twelve", 13: "thirteen", 14: "fourteen", 15: "fifteen"}


def _sub(pattern, replace, text, where):
    new, count = re.subn(pattern, replace, text, count=1)
    if not count:
        raise SystemExit(f"{where}: no statement matches {pattern!r}")
    return new


def main():
    record = json.loads((ROOT / "benchmarks" /
                         "chapter_times.latest.json").read_text())
    chapters = record["chapters"]
    for path in sorted(ROOT.glob("solutions/[0-9][0-9]_*/*.ipynb")):
        cpu = round(chapters[path.parent.name]["cpu_seconds"])
        notebook = nbformat.read(path, as_version=4)
        cell = notebook.cells[0]
        cell.source = _sub(r"(measured\s+)\d+(\s+s\s+of\s+CPU)",
                           rf"\g<1>{cpu}\g<2>", cell.source, path.name)
        nbformat.write(notebook, path)
    cpu = [c["cpu_seconds"] for c in chapters.values()]
    wall = [c["wall_seconds"] for c in chapters.values()]
    low, high = round(min(cpu)), round(max(cpu))
    readme = ROOT / "README.md"
    text = readme.read_text()
    count = WORDS.get(len(cpu), str(len(cpu)))
    text = _sub(r"\d+(\s+to\s+)\d+(\s+s\s+of\s+CPU\s+time\s+per\s+"
                r"chapter,\s+)\d+(\s+s\s+for\s+all\s+)\w+",
                rf"{low}\g<1>{high}\g<2>{round(sum(cpu))}\g<3>{count}",
                text, "README.md")
    text = _sub(r"\d+(\s+to\s+)\d+(\s+s\s+per\s+chapter\s+on)",
                rf"{round(min(wall))}\g<1>{round(max(wall))}\g<2>",
                text, "README.md")
    readme.write_text(text)
    intro = ROOT / "intro.md"
    text = intro.read_text()
    text = _sub(r"\(\d+(\s+to\s+)\d+(\s+s\s)", rf"({low}\g<1>{high}\g<2>",
                text, "intro.md")
    intro.write_text(text)
    print(f"quoted: {low} to {high} s of CPU per chapter, "
          f"{round(sum(cpu))} s in all")


if __name__ == "__main__":
    main()
