"""LMS downloads into ``submitted/``: each download is one student's.

``--collect FOLDER`` reads ``FOLDER/<assignment>/archive/`` (subfolders
too). A file whose path matches the regex (named groups ``student_id``
and, optionally, ``file_id``) is that student's submission of that
assignment, whatever it holds: a notebook (or any other file) is copied
to ``submitted/<student>/<assignment>/<file_id>``; a zip archive is
unpacked there, flattened (its folders dropped), under the limits below.
Nothing inside an archive chooses a student, an assignment or a place to
write. One download counts per student and assignment: the newest.

What went wrong becomes a reason of that student (a rejected download
leaves an empty folder, graded 0 like a missing notebook) or, for a file
of nobody, a line of the report; nothing stops the batch.
``submitted/.collected.json`` remembers the download each folder came
from and its reasons: collecting again changes nothing, a folder is
replaced only by a newer download, and the grader reads the reasons.
"""

import hashlib
import io
import json
import os
import re
import shutil
import stat
import struct
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from course_lib.classroom import course as C

# Matched against each download's absolute path, e.g.
# "downloads/<assignment>/archive/<student>_<notebook>.ipynb" or ".zip".
DEFAULT_REGEX = (r".*/(?P<student_id>[^/_]+)_"
                 r"(?P<file_id>[^/]+\.(?:ipynb|zip))$")
MANIFEST = ".collected.json"
MB = 2**20
MAX_DOWNLOAD = 64 * MB  # bytes of one downloaded file
MAX_MEMBERS = 1000  # entries of one archive, folders included
MAX_DIRECTORY = MB  # bytes of its table of contents, read before parsing
MAX_MEMBER = 64 * MB  # bytes of one unpacked file
MAX_TOTAL = 128 * MB  # bytes unpacked from one archive
MAX_RATIO = 200  # unpacked / packed bytes of one member ...
RATIO_FLOOR = MB  # ... once it is past this size
CHUNK = 2**16
ARCHIVES = (".zip", ".tar", ".gz", ".tgz", ".bz2", ".xz", ".7z", ".rar")
MAGIC = (b"PK\x03\x04", b"\x1f\x8b", b"BZh", b"\xfd7zXZ", b"7z\xbc\xaf",
         b"Rar!")
JUNK = {"__MACOSX", "__pycache__", "Thumbs.db"}  # and names with a dot


class Rejected(Exception):
    """A download that is not collected at all."""


class Skipped(Exception):
    """A member of an archive that is not collected."""


@dataclass
class Download:
    assignment: str
    student: str
    path: Path
    name: str  # relative to the downloads folder, for messages
    file_id: str
    mtime: float
    size: int


@dataclass
class Report:
    # (assignment, student) -> reasons of that student's submission
    reasons: dict = field(default_factory=dict)
    lines: list = field(default_factory=list)  # files of nobody


def collect(course, names, folder, regex=DEFAULT_REGEX):
    """Collect ``folder/<name>/archive/`` for each assignment ``name``
    into ``submitted/``; return a :class:`Report`."""
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
        found = _find(folder, assignment, pattern, report)
        for student, downloads in sorted(found.items()):
            kept, notes = _choose(downloads)
            try:
                reasons = _place(course, kept, notes, manifest, report)
            except OSError as error:  # e.g. a full disk: say so, go on
                reasons = notes + [f"{kept.name} could not be collected: "
                                   f"{error}"]
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


def _find(folder, assignment, pattern, report):
    """``{student: [Download]}`` under ``folder/assignment/archive``."""
    top = folder / assignment / "archive"
    if not top.is_dir():
        if (folder / assignment).is_dir():
            report.lines.append(f"{assignment}: no archive/ folder in "
                                f"{folder / assignment}: nothing collected")
        return {}
    found = {}
    for root, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if not _junk(d))
        for file in sorted(f for f in files if not _junk(f)):
            path = Path(root) / file
            name = str(path.relative_to(folder))
            info = path.lstat()
            match = pattern.match(os.path.abspath(path))
            student = (match and match.group("student_id")) or ""
            why = None
            if not stat.S_ISREG(info.st_mode):
                why = "not a regular file"
            elif not match:
                why = "its name does not match --collect-regex"
            elif not _safe(student):
                why = f"student id {_show(student)!r} is not a folder name"
            if why:
                report.lines.append(f"{assignment}: not collected: "
                                    f"{_show(name)}: {why}")
                continue
            file_id = (match.groupdict().get("file_id") or file)
            found.setdefault(student, []).append(Download(
                assignment, student, path, name, file_id,
                info.st_mtime, info.st_size))
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
                  f"collected the newest, {_show(kept.name)}"
                  + (" (same time: the last name)" if tie else "")
                  + "; not collected: "
                  + ", ".join(_show(d.name) for d in others)]


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
                f"{_show(entry['download'])}; not collected: "
                f"{_show(d.name)}")
            return entry["reasons"]
    elif folder.is_symlink() or folder.exists():
        newest = folder.lstat().st_mtime
        if folder.is_dir() and not folder.is_symlink():
            newest = max([newest] + [p.lstat().st_mtime
                                     for p in folder.rglob("*")])
        if newest >= d.mtime or folder.is_symlink():
            report.lines.append(
                f"{key}: kept submitted/{key}, not collected from these "
                f"downloads and newer; not collected: {_show(d.name)}")
            return []
    staging = folder.parent / f".{d.assignment}.new"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        if d.path.suffix.lower() == ".zip":
            extra = _unpack(d, staging)
        else:
            extra = _copy(d, staging)
    except Rejected as error:
        shutil.rmtree(staging)
        staging.mkdir()
        extra = [f"{_show(d.name)} was not collected: {error}"]
    old = folder.parent / f".{d.assignment}.old"
    if folder.exists() or folder.is_symlink():
        os.replace(folder, old)
    os.replace(staging, folder)
    if old.is_symlink() or old.is_file():
        old.unlink()
    else:
        shutil.rmtree(old, ignore_errors=True)
    manifest[key] = {"download": d.name, "mtime": d.mtime,
                     "sha256": digest, "hash": C.hash_folder(folder),
                     "notes": extra, "reasons": notes + extra}
    return notes + extra


def _copy(download, target):
    """A plain download, copied as its ``file_id``."""
    _check_size(download)
    name = re.split(r"[/\\]", download.file_id)[-1]
    if not _safe(name) or _junk(name):
        name = download.path.name
    try:
        with open(download.path, "rb") as source:
            _write(source, target / name, MAX_DOWNLOAD)
    except Skipped as error:
        raise Rejected(str(error)) from None
    return []


def _check_size(download):
    if download.size > MAX_DOWNLOAD:
        raise Rejected(f"{download.size / MB:.1f} MB, "
                       + _over(MAX_DOWNLOAD, "a download"))


def _unpack(download, target):
    """Unpack a zip archive, flattened, into ``target``; return notes
    about skipped members, or raise :class:`Rejected`."""
    _check_size(download)
    notes, written = [], {}
    try:
        _check_directory(download.path)
        with _Counted(download.path) as raw, \
                zipfile.ZipFile(raw) as archive:
            budget = {"raw": raw, "total": 0}
            members = archive.infolist()
            if len(members) > MAX_MEMBERS:
                raise Rejected(f"{len(members)} entries in the archive, "
                               f"over the limit of {MAX_MEMBERS}")
            for info in members:
                _declared(info)
            for info in members:
                try:
                    name = _member_name(info)
                    if name and name in written:
                        raise Skipped(f"the same file name as "
                                      f"{_show(written[name])}")
                    if name:
                        _extract(archive, info, target / name, budget)
                        written[name] = info.filename
                except (Skipped, NotImplementedError) as error:
                    notes.append(f"{_show(download.name)}: "
                                 f"{_show(info.filename)} skipped: {error}")
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError,
            RuntimeError, struct.error) as error:
        raise Rejected(f"not a readable zip archive ({error})") from None
    if notes:
        notes.append("only the other files of your archive were collected")
    return notes


def _check_directory(path):
    """Refuse an archive whose table of contents is too large to parse,
    from its end record (zip64 included), before ``zipfile`` reads it."""
    size = path.stat().st_size
    with open(path, "rb") as source:
        source.seek(max(0, size - 65_557))
        tail = source.read()
        at = tail.rfind(b"PK\x05\x06")
        if at < 0 or len(tail) < at + 22:
            raise Rejected("not a zip archive (no end record)")
        count, length = struct.unpack("<HI", tail[at + 10:at + 16])
        if at >= 20 and tail[at - 20:at - 16] == b"PK\x06\x07":
            (where,) = struct.unpack("<Q", tail[at - 12:at - 4])
            source.seek(where)
            record = source.read(56)
            if len(record) < 56 or record[:4] != b"PK\x06\x06":
                raise Rejected("not a readable zip archive (zip64)")
            count, length = struct.unpack("<QQ", record[32:48])
    if count > MAX_MEMBERS or length > MAX_DIRECTORY:
        raise Rejected(f"{count} entries in the archive ({length} bytes of "
                       f"contents), over the limit of {MAX_MEMBERS} "
                       f"entries ({MAX_DIRECTORY} bytes)")


def _declared(info):
    """Refuse a zip bomb from what the archive declares (it is counted
    again while unpacking, since declarations can lie)."""
    if (info.file_size > RATIO_FLOOR
            and info.file_size > MAX_RATIO * max(info.compress_size, 1)):
        raise Rejected(f"a zip bomb: {_show(info.filename)} would expand "
                       f"{info.file_size // max(info.compress_size, 1)} "
                       f"times, over the limit of {MAX_RATIO}")


def _member_name(info):
    """The flattened file name of a member, ``None`` for a folder or a
    junk file; raise :class:`Skipped` for a member that is skipped."""
    path = info.filename.replace("\\", "/")
    kind = stat.S_IFMT(info.external_attr >> 16)
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if path.startswith("/") or re.match(r"[A-Za-z]:", path):
        raise Skipped("an absolute path")
    if ".." in parts:
        raise Skipped("a path that leads out of the archive (..)")
    if kind == stat.S_IFLNK:
        raise Skipped("a symbolic link")
    if info.is_dir() or kind == stat.S_IFDIR or not parts:
        return None
    if kind not in (0, stat.S_IFREG):
        raise Skipped("not a regular file (a device, pipe or socket)")
    if any(_junk(p) for p in parts):
        return None
    name = parts[-1]
    if name.lower().endswith(ARCHIVES):
        raise Skipped("an archive inside the archive (not unpacked)")
    if not _safe(name):
        raise Skipped("a file name that cannot be used")
    if info.flag_bits & 0x1:
        raise Skipped("encrypted")
    return name


class _Counted(io.FileIO):
    """A file that counts the bytes read from it: what a member really
    consumed of the archive, whatever its header says."""

    consumed = 0

    def read(self, size=-1):
        data = super().read(size)
        self.consumed += len(data)
        return data


def _extract(archive, info, path, budget):
    """Unpack one member to ``path``, counting bytes as they come."""
    budget["start"] = budget["raw"].consumed
    budget["name"] = info.filename
    with archive.open(info) as stream:
        first = stream.read(CHUNK)
        if first.startswith(MAGIC):
            raise Skipped("an archive inside the archive (not unpacked)")
        _write(stream, path, MAX_MEMBER, budget, first)


def _write(stream, path, limit, budget=None, data=None):
    """Copy ``stream`` into a new file at ``path`` (never through a
    link), counting bytes: past ``limit``, the file is removed and
    :class:`Skipped` raised. For an archive member, ``budget`` counts
    what the archive gave and consumed: past its limits,
    :class:`Rejected`."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    count = 0
    data = stream.read(CHUNK) if data is None else data
    with os.fdopen(os.open(path, flags, 0o644), "wb") as out:
        while data:
            count += len(data)
            if budget:
                budget["total"] += len(data)
                if budget["total"] > MAX_TOTAL:
                    raise Rejected(_over(MAX_TOTAL, "an archive, unpacked"))
                packed = budget["raw"].consumed - budget["start"]
                if count > RATIO_FLOOR and count > MAX_RATIO * packed:
                    raise Rejected(f"a zip bomb: {_show(budget['name'])} "
                                   f"expands over {MAX_RATIO} times")
            if count > limit:
                break
            out.write(data)
            data = stream.read(CHUNK)
    if count > limit:
        path.unlink()
        raise Skipped(_over(limit, "a file"))


def _over(limit, what):
    return f"over the {limit // MB} MB limit for {what}"


def _safe(name):
    """A usable file or folder name: one printable path component."""
    return (0 < len(name.encode("utf-8", "replace")) <= 255
            and name.isprintable() and name == name.strip()
            and not name.startswith(".") and "/" not in name
            and "\\" not in name)


def _junk(name):
    return name.startswith(".") or name in JUNK


def _show(text):
    """``text`` safe to print: non-printable characters escaped, cut."""
    text = text if text.isprintable() else ascii(text)[1:-1]
    return text if len(text) <= 100 else text[:97] + "..."


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as source:
        for block in iter(lambda: source.read(MB), b""):
            digest.update(block)
    return digest.hexdigest()


def _load(course):
    try:
        found = json.loads(course.path("submitted", MANIFEST).read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _save(course, manifest):
    path = course.path("submitted", MANIFEST)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True))
    tmp.replace(path)
