"""Write chapter 10's corpus, ``course_lib/data/course_prose.txt``: the
prose the course itself wrote (the markdown cells of the solution
notebooks of chapters 1 to 8, without the model answers of the written
questions), reduced to printable ASCII and newlines.

The course may ship its own text (nothing to license from anyone else),
nothing is downloaded, and the text is technical English with a vocabulary
of its own: a character model has something to learn beyond pairs of
letters. Run from the repository's root: ``python scripts/make_corpus.py``.
"""

import json
import re
import string
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = [f"{n:02d}_" for n in range(1, 9)]
KEEP = set(string.printable) - set("\t\r\x0b\x0c")


def prose():
    parts = []
    for notebook in sorted((ROOT / "solutions").glob("*/*.ipynb")):
        if not notebook.parent.name.startswith(tuple(CHAPTERS)):
            continue
        for cell in json.loads(notebook.read_text())["cells"]:
            text = "".join(cell["source"])
            if cell["cell_type"] != "markdown" or "BEGIN SOLUTION" in text:
                continue
            text = "".join(c for c in text if c in KEEP)
            parts.append(re.sub(r"\n{3,}", "\n\n", text).strip())
    return "\n\n".join(parts) + "\n"


if __name__ == "__main__":
    out = ROOT / "course_lib" / "data" / "course_prose.txt"
    text = prose()
    out.write_text(text, encoding="ascii")
    print(f"{out.relative_to(ROOT)}: {len(text)} characters, "
          f"{len(set(text))} distinct")
