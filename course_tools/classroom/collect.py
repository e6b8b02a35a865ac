"""LMS downloads into ``submitted/``: each download is one student's.

``--collect FOLDER`` reads ``FOLDER/<assignment>/archive/`` (subfolders
too). A file whose path matches the regex (named groups ``student_id``
and, optionally, ``file_id``) is that student's submission of that
assignment, whatever it holds: a notebook (or any other file) is copied
to ``submitted/<student>/<assignment>/<file_id>``; a zip archive is
unpacked there, flattened (its folders dropped), by :mod:`.archive`.
Nothing inside an archive chooses a student, an assignment or a place to
write. A student id is letters, digits, ".", "_" and "-"
(:data:`course.STUDENT_ID`): a download that names anything else (a
comma that would be a CSV column, a formula, a letter not in ASCII) is
not collected, and the report says why. File names are bytes, shown
escaped. One download counts per student and assignment: the newest.

What went wrong becomes a reason of that student (a rejected download
leaves an empty folder, graded 0 like a missing notebook; any error in
bringing it in is a line of the report naming the student) or, for a
file of nobody, a line of the report; nothing stops the batch.
``submitted/.collected.json`` remembers the download each folder came
from and its reasons: collecting again changes nothing, a folder is
replaced only by a newer download, and the grader reads the reasons.

Each collected folder gets nbgrader's ``timestamp.txt``: the submission
time, which decides lateness. It is the time the LMS wrote into the
download's name, when the regex has a group ``timestamp`` that matches
(:func:`.late.parse_stamp`: ISO 8601, or year, month, day, hour, minute
and second with any separators, in the course's time zone unless it
says otherwise), else the download file's modification time (which LMS
downloads carry as the upload time when unzipped with their dates).
"""

import hashlib
import json
import os
import re
import shutil
import stat
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from course_tools.classroom import course as C
from course_tools.classroom import late
from course_tools.classroom.archive import (
    MB,
    RESERVED,
    Rejected,
    Skipped,
    junk,
    over,
    safe,
    show,
    unpack,
    write,
)

# Matched against each download's absolute path, e.g.
# "downloads/<assignment>/archive/<student>_<notebook>.ipynb" or ".zip".
DEFAULT_REGEX = (r".*/(?P<student_id>[^/_]+)_"
                 r"(?P<file_id>[^/]+\.(?:ipynb|zip))$")
MANIFEST = ".collected.json"
MAX_DOWNLOAD = 64 * MB  # bytes of one downloaded file


@dataclass
class Download:
    assignment: str
    student: str
    path: Path
    name: str  # relative to the downloads folder, for messages
    file_id: str
    mtime: float
    size: int
    stamp: object = None  # the submission time, naive UTC


@dataclass
class Report:
    # (assignment, student) -> reasons of that student's submission
    reasons: dict = field(default_factory=dict)
    lines: list = field(default_factory=list)  # files of nobody


def collect(course, names, folder, regex=DEFAULT_REGEX, zone="UTC"):
    """Collect ``folder/<name>/archive/`` for each assignment ``name``
    into ``submitted/``; return a :class:`Report`. ``zone``: the course's
    time zone, for a time in a download's name without one."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"expected a folder of downloads, got {folder}")
    try:
        pattern = re.compile(regex)
    except re.error as error:
        raise ValueError(f"--collect-regex {regex!r}: {error}") from None
    if "student_id" not in pattern.groupindex:
        raise ValueError(f"expected --collect-regex with a named group "
                         f"(?P<student_id>...), got {regex!r}")
    report = Report()
    manifest = _load(course)
    for assignment in names:
        found = _find(folder, assignment, pattern, report, zone)
        for student, downloads in sorted(found.items()):
            kept, notes = _choose(downloads)
            try:
                reasons = _place(course, kept, notes, manifest, report)
            except Exception as error:  # noqa: BLE001 - say so, go on
                # a full disk, a file that cannot be read: this student's
                report.lines.append(f"{assignment}/{student}: "
                                    f"{show(kept.name)} could not be "
                                    f"collected: {type(error).__name__}: "
                                    f"{show(str(error))}")
                continue
            if reasons:
                report.reasons[(assignment, student)] = reasons
            _save(course, manifest)
    return report


def reasons(course):
    """``{(assignment, student): [reasons]}`` of the collected folders
    that are as they were collected."""
    found = {}
    for key, entry in _load(course).items():
        assignment, _, student = key.partition("/")
        folder = course.path("submitted", student, assignment)
        if (entry.get("reasons") and folder.is_dir()
                and C.hash_folder(folder) == entry.get("hash")):
            found[(assignment, student)] = list(entry["reasons"])
    return found


def _find(folder, assignment, pattern, report, zone="UTC"):
    """``{student: [Download]}`` under ``folder/assignment/archive``."""
    top = folder / assignment / "archive"
    if not top.is_dir():
        if (folder / assignment).is_dir():
            report.lines.append(f"{assignment}: no archive/ folder in "
                                f"{folder / assignment}: nothing collected")
        return {}
    found = {}
    for root, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if not junk(d))
        for file in sorted(f for f in files if not junk(f)):
            path = Path(root) / file
            name = str(path.relative_to(folder))
            try:
                info = path.lstat()
            except OSError as error:
                report.lines.append(f"{assignment}: not collected: "
                                    f"{show(name)}: {error.strerror}")
                continue
            match = pattern.match(os.path.abspath(path))
            student = (match and match.group("student_id")) or ""
            why = None
            if not stat.S_ISREG(info.st_mode):
                why = "not a regular file"
            elif not match:
                why = "its name does not match --collect-regex"
            elif C.id_problem(student):
                why = f"student id {show(student)!r}: {C.ID_RULE}"
            if why:
                report.lines.append(f"{assignment}: not collected: "
                                    f"{show(name)}: {why}")
                continue
            file_id = (match.groupdict().get("file_id") or file)
            stamp = None
            if match.groupdict().get("timestamp"):
                stamp = late.parse_stamp(match.group("timestamp"), zone)
            if stamp is None:
                stamp = datetime.fromtimestamp(
                    info.st_mtime, UTC).replace(tzinfo=None)
            found.setdefault(student, []).append(Download(
                assignment, student, path, name, file_id,
                info.st_mtime, info.st_size, stamp))
    return found


def _choose(downloads):
    """The newest download (the LMS's modification time; on a tie the
    last name in sorted order) and a note naming the others."""
    ordered = sorted(downloads, key=lambda d: (d.mtime, d.name))
    kept, others = ordered[-1], ordered[:-1]
    if not others:
        return kept, []
    tie = any(d.mtime == kept.mtime for d in others)
    return kept, [f"{len(ordered)} downloads for this assignment: "
                  f"collected the newest, {show(kept.name)}"
                  + (" (same time: the last name)" if tie else "")
                  + "; not collected: "
                  + ", ".join(show(d.name) for d in others[-5:])
                  + (f" and {len(others) - 5} more" if len(others) > 5
                     else "")]


def _place(course, download, notes, manifest, report):
    """Bring one download into its student's folder (unless that folder
    holds the same or a newer one); return the student's reasons."""
    d = download
    key = f"{d.assignment}/{d.student}"
    folder = course.path("submitted", d.student, d.assignment)
    digest = _sha256(d.path) if d.size <= MAX_DOWNLOAD else f"{d.size} B"
    entry = manifest.get(key)
    if entry and folder.is_dir() and C.hash_folder(folder) == entry["hash"]:
        if (entry["sha256"], entry["download"]) == (digest, d.name):
            entry["reasons"] = notes + entry["notes"]
            return entry["reasons"]
        if (entry["mtime"], entry["download"]) > (d.mtime, d.name):
            report.lines.append(
                f"{key}: kept the newer download collected before, "
                f"{show(entry['download'])}; not collected: "
                f"{show(d.name)}")
            return entry["reasons"]
    elif folder.is_symlink() or folder.exists():
        newest = folder.lstat().st_mtime
        if folder.is_dir() and not folder.is_symlink():
            newest = max([newest] + [p.lstat().st_mtime
                                     for p in folder.rglob("*")])
        if newest >= d.mtime or folder.is_symlink():
            report.lines.append(
                f"{key}: kept submitted/{d.student}/{d.assignment}, not "
                "collected from these "
                f"downloads and newer; not collected: {show(d.name)}")
            return []
    staging = folder.parent / f".{d.assignment}.new"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        if d.path.suffix.lower() == ".zip":
            _check_size(d)
            extra = [f"{show(d.name)}: {note}"
                     for note in unpack(d.path, staging)]
        else:
            extra = _copy(d, staging)
    except Rejected as error:
        shutil.rmtree(staging)
        staging.mkdir()
        extra = [f"{show(d.name)} was not collected: {error}"]
    # nbgrader's submission time (no member of a download may be called
    # so: archive.RESERVED)
    (staging / "timestamp.txt").write_text(late.stamp_text(d.stamp))
    old = folder.parent / f".{d.assignment}.old"
    shutil.rmtree(old, ignore_errors=True)  # left by an interrupted run
    if folder.exists() or folder.is_symlink():
        os.replace(folder, old)
    os.replace(staging, folder)
    if old.is_symlink() or old.is_file():
        old.unlink()
    else:
        shutil.rmtree(old, ignore_errors=True)
    manifest[key] = {"download": d.name, "mtime": d.mtime,
                     "sha256": digest, "hash": C.hash_folder(folder),
                     "notes": extra, "reasons": notes + extra,
                     "timestamp": late.stamp_text(d.stamp)}
    return notes + extra


def _copy(download, target):
    """A plain download, copied as its ``file_id``."""
    _check_size(download)
    name = re.split(r"[/\\]", download.file_id)[-1]
    if not safe(name) or junk(name):
        name = download.path.name
    if name in RESERVED:
        raise Rejected(f"{name} is the grader's own file (the submission "
                       "time)")
    try:
        with open(download.path, "rb") as source:
            write(source, target / name, MAX_DOWNLOAD)
    except Skipped as error:
        raise Rejected(str(error)) from None
    return []


def _check_size(download):
    if download.size > MAX_DOWNLOAD:
        raise Rejected(f"{download.size / MB:.1f} MB, "
                       + over(MAX_DOWNLOAD, "a download"))


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as source:
        for block in iter(lambda: source.read(MB), b""):
            digest.update(block)
    return digest.hexdigest()


def _load(course):
    """The manifest; an entry that is not as written is left out."""
    try:
        found = json.loads(course.path("submitted", MANIFEST).read_text())
    except (OSError, ValueError):
        return {}
    keys = {"download", "mtime", "sha256", "hash", "notes", "reasons"}
    return {k: v for k, v in found.items()
            if "/" in k and isinstance(v, dict) and keys <= set(v)
            } if isinstance(found, dict) else {}


def _save(course, manifest):
    path = course.path("submitted", MANIFEST)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True))
    tmp.replace(path)
