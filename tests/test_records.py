"""The benchmarks' records name the code they were computed from, and
that code is today's (``course_tools/records.py``)."""

import json
import re
import shutil
from pathlib import Path

import pytest

from course_tools import records

ROOT = Path(__file__).resolve().parents[1]
LATEST = sorted((ROOT / "benchmarks").glob("*.latest.json"))
SHIPPED = sorted((ROOT / "course_lib" / "data").glob("*.json"))

# Records measured before records carried their sources, each with what
# re-measures it; a record leaves this list when its benchmark is re-run
# (the test below fails once it carries a stamp). Each costs the whole
# course's grading or test suite, more than a shared 2-core machine gives.
AWAITING_STAMP = {}  # none left (2026-11-29)
# chapter_times.py stamps each chapter it runs (--only NN); a chapter
# measured before the stamps existed waits here for its re-run
CHAPTERS_AWAITING_STAMP = set()


def parts(path, record):
    """The parts of a record that must each carry a stamp."""
    if path.name == "chapter_times.latest.json":
        return {name: figures for name, figures in
                record["chapters"].items()
                if name not in CHAPTERS_AWAITING_STAMP}
    if path.name in ("language_model.latest.json", "language_model.json"):
        return {"text": record["text"], "induction": record["induction"]}
    return {"the record": record}


@pytest.mark.parametrize("path", LATEST + SHIPPED,
                         ids=lambda p: p.relative_to(ROOT).as_posix())
def test_record_names_todays_sources(path):
    record = json.loads(path.read_text())
    if path.name in AWAITING_STAMP:
        assert not list(records.stamps(record)), (
            f"{path.name} carries its sources now: remove it from "
            "AWAITING_STAMP")
        return
    for where, part in parts(path, record).items():
        assert records.KEY in part, (
            f"{path.relative_to(ROOT)}: {where} names no sources; re-run "
            "its benchmark (it stamps the record with course_tools.records)")
    problems = records.stale(record)
    assert not problems, (
        f"{path.relative_to(ROOT)} was computed from code that has changed "
        f"since: {problems}; re-run its benchmark (see its docstring)")


def test_chapters_awaiting_a_stamp_lack_one():
    chapters = json.loads((ROOT / "benchmarks" /
                           "chapter_times.latest.json").read_text())
    for name in CHAPTERS_AWAITING_STAMP:
        assert records.KEY not in chapters["chapters"][name], (
            f"{name} carries its sources now: remove it from "
            "CHAPTERS_AWAITING_STAMP")


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_record_is_its_benchmarks_latest(path):
    latest = ROOT / "benchmarks" / f"{path.stem}.latest.json"
    assert latest.exists(), f"no benchmark wrote {path.name}"
    assert path.read_text() == latest.read_text(), (
        f"course_lib/data/{path.name} differs from {latest.name}: the "
        "benchmark writes both")


CODE = '''"""A module."""


def f(x):  # the comment
    """What f does."""
    return g(x, 1)
'''


@pytest.mark.parametrize("edit, same", [
    (("# the comment", "# another"), True),
    (('"""What f does."""', '"""What f does,\n    at length."""'), True),
    (('"""A module."""', '"""Another."""'), True),
    (("g(x, 1)", "g(x,\n             1)"), True),
    (("g(x, 1)", "g(x, 2)"), False),
    (("g(x, 1)", "g(x, '1')"), False),
    (("    return", "    y = f'{x}'\n    return"), False),
])
def test_a_digest_is_of_the_code_not_its_prose(tmp_path, edit, same):
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text(CODE)
    b.write_text(CODE.replace(*edit))
    assert b.read_text() != CODE
    assert (records.digest(a) == records.digest(b)) is same


def test_a_record_goes_stale_when_a_source_changes(tmp_path):
    root = tmp_path / "course"
    (root / "pkg").mkdir(parents=True)
    shutil.copy(ROOT / "course_lib" / "layers.py", root / "pkg" / "m.py")
    (root / "data.txt").write_text("corpus")
    record = {"figure": 1.5, "part": records.stamp(
        {"x": 2}, [root / "pkg" / "m.py", root / "data.txt"], root=root)}
    assert records.stale(record, root=root) == []
    source = (root / "pkg" / "m.py").read_text()
    (root / "pkg" / "m.py").write_text(source + "\n# a comment\n\n")
    assert records.stale(record, root=root) == []   # layout only
    (root / "pkg" / "m.py").write_text(source + "\nX = 1\n")
    (root / "data.txt").write_text("corpus!")
    assert records.stale(record, root=root) == [
        "part: data.txt changed", "part: pkg/m.py changed"]
    (root / "data.txt").unlink()
    assert "part: data.txt is gone" in records.stale(record, root=root)


def test_write_and_stamp_refuse_what_names_no_source(tmp_path):
    with pytest.raises(ValueError, match="sources"):
        records.write({"figure": 1}, tmp_path / "r.json")
    with pytest.raises(ValueError, match="at least one source"):
        records.stamp({"figure": 1}, [])
    with pytest.raises(ValueError, match="must lie in the course"):
        records.stamp({"figure": 1}, [tmp_path / "x.py"])


def test_loaded_sources_are_the_imported_modules_of_the_package():
    import course_lib.layers  # noqa: F401

    found = {p.resolve().relative_to(ROOT).as_posix()
             for p in records.loaded_sources(__file__)}
    assert {"course_lib/__init__.py", "course_lib/layers.py",
            "tests/test_records.py"} <= found
    assert all(name.startswith(("course_lib/", "tests/"))
               for name in found)


def _chapter_times():
    return json.loads((ROOT / "benchmarks" /
                       "chapter_times.latest.json").read_text())["chapters"]


def test_every_chapter_states_the_run_time_chapter_times_measured():
    """Each chapter's overview states "benchmarks/chapter_times.py ...
    measured N s of CPU", N the record's CPU seconds, rounded."""
    times = _chapter_times()
    notebooks = sorted(ROOT.glob("solutions/[0-9][0-9]_*/*.ipynb"))
    assert notebooks
    for path in notebooks:
        cells = json.loads(path.read_text())["cells"]
        overview = "".join(cells[0]["source"])
        stated = re.search(r"measured\s+(\d+)\s+s\s+of\s+CPU", overview)
        assert "chapter_times.py" in overview and stated, (
            f"{path.name}: the overview states no run time measured by "
            "benchmarks/chapter_times.py (\"... measured N s of CPU\")")
        cpu = times[path.parent.name]["cpu_seconds"]
        assert int(stated[1]) == round(cpu), (
            f"{path.name} states {stated[1]} s of CPU; "
            f"chapter_times.latest.json measured {cpu}")


@pytest.mark.parametrize("page", ["README.md", "intro.md"])
def test_the_range_of_chapter_times_is_the_records(page):
    """The README and the introduction quote the record's range of CPU
    seconds per chapter (and the README its total and range of wall
    seconds)."""
    times = _chapter_times().values()
    cpu = [t["cpu_seconds"] for t in times]
    wall = [t["wall_seconds"] for t in times]
    text = " ".join((ROOT / page).read_text().split())
    stated = re.search(r"(\d+) to (\d+) s (?:of CPU time per chapter, "
                       r"(\d+) s for all|measured)", text)
    assert stated, f"{page} quotes no range of chapter times"
    assert (int(stated[1]), int(stated[2])) == (
        round(min(cpu)), round(max(cpu))), (
        f"{page} states {stated[1]} to {stated[2]} s of CPU per chapter; "
        f"chapter_times.latest.json measured {min(cpu)} to {max(cpu)}")
    if page == "README.md":
        assert int(stated[3]) == round(sum(cpu)), (
            f"README.md states {stated[3]} s of CPU in all; the record "
            f"sums to {sum(cpu):.1f}")
        walls = re.search(r"(\d+) to (\d+) s per chapter on", text)
        assert walls and (int(walls[1]), int(walls[2])) == (
            round(min(wall)), round(max(wall))), (
            f"README.md's wall-clock range differs from the record's "
            f"{min(wall)} to {max(wall)} s")
