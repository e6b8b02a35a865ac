"""Student answers the grader must judge right: correct alternatives
(full marks), named misconceptions (lose points, with the message that
names them) and cheats (no points).

Each entry is source code for the exercise's solution cell, so the same
catalogue drives the unit tests of ``course_lib.grading`` and the
end-to-end tests that autograde whole notebooks with nbgrader. Every module
of this package contributes, with the same names:

- ``CHAPTER_OF``: exercise -> chapter folder;
- ``CORRECT``: exercise -> [(label, source)];
- ``WRONG``: exercise -> [(the misconception's name, source)], the name
  being what the grader's message must contain;
- ``CHEATS``: [(label, exercise, source, what the message must say)];
- ``NOTEBOOK_CHEATS``: [(label, exercise, source)], judged end to end.
"""

import importlib
import pkgutil

CHAPTER_OF, CORRECT, WRONG = {}, {}, {}
CHEATS, NOTEBOOK_CHEATS = [], []

for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    _module = importlib.import_module(f"{__name__}.{_info.name}")
    CHAPTER_OF.update(_module.CHAPTER_OF)
    # a module may add answers to another module's exercises
    for _name, _items in _module.CORRECT.items():
        CORRECT.setdefault(_name, []).extend(_items)
    for _name, _items in _module.WRONG.items():
        WRONG.setdefault(_name, []).extend(_items)
    CHEATS.extend(getattr(_module, "CHEATS", []))
    NOTEBOOK_CHEATS.extend(getattr(_module, "NOTEBOOK_CHEATS", []))
