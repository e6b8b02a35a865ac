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
AWAITING_STAMP = {
    "grade_class.latest.json": "benchmarks/grade_class.py",
    "grade_cost.latest.json": "benchmarks/grade_cost.py",
    "grade_dask.latest.json": "benchmarks/grade_dask.py",
    "test_suite.latest.json": "benchmarks/test_suite.py",
}
# chapter_times.py stamps each chapter it runs (--only NN)
CHAPTERS_AWAITING_STAMP = {
    "01_attention_coefficients", "02_self_attention",
    "03_multi_head_attention", "04_transformer_layers", "05_complexity",
    "06_positional_encoding", "07_vision_transformer",
    "08_linear_attention",
}


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


def test_a_chapter_states_the_run_time_chapter_times_measured():
    """An overview that states "benchmarks/chapter_times.py ... measured N
    s of CPU" states the record's CPU seconds, rounded."""
    times = json.loads((ROOT / "benchmarks" /
                        "chapter_times.latest.json").read_text())["chapters"]
    quoted = 0
    for path in sorted(ROOT.glob("solutions/[0-9][0-9]_*/*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        overview = "".join(cells[0]["source"])
        stated = re.search(r"measured\s+(\d+)\s+s\s+of\s+CPU", overview)
        if "chapter_times.py" not in overview or not stated:
            continue
        cpu = times[path.parent.name]["cpu_seconds"]
        assert int(stated[1]) == round(cpu), (
            f"{path.name} states {stated[1]} s of CPU; "
            f"chapter_times.latest.json measured {cpu}")
        quoted += 1
    assert quoted >= 2
