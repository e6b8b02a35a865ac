"""A zip archive unpacked into one folder, flattened, under limits.

What an archive declares (its sizes) is not believed: the bytes are
counted as they come, both those unpacked and those the member consumed
of the archive. Members are written by their file name alone, as new
files (never through a link), so nothing lands outside the folder.
Used by :mod:`.collect` for a student's download.
"""

import io
import os
import re
import stat
import struct
import zipfile
import zlib

MB = 2**20
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
MAX_NOTES = 10  # skipped members named; the rest are counted
# nbgrader reads the submission time from it: not the student's to set
RESERVED = {"timestamp.txt"}


class Rejected(Exception):
    """An archive (or a download) that is not collected at all."""


class Skipped(Exception):
    """A member of an archive that is not collected."""


def unpack(path, target):
    """Unpack the zip archive at ``path``, flattened, into the empty
    folder ``target``; return notes about skipped members, or raise
    :class:`Rejected` (then ``target`` may hold a part of it)."""
    notes, written = [], {}
    try:
        _check_directory(path)
        with _Counted(path) as raw, \
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
                                      f"{show(written[name])}")
                    if name:
                        _extract(archive, info, target / name, budget)
                        written[name] = info.filename
                except (Skipped, NotImplementedError) as error:
                    notes.append(f"{show(info.filename)} skipped: "
                                 f"{error}")
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError,
            RuntimeError, struct.error) as error:
        raise Rejected(f"not a readable zip archive ({show(str(error))})"
                       ) from None
    if len(notes) > MAX_NOTES:
        notes[MAX_NOTES:] = [f"{len(notes) - MAX_NOTES} more members "
                             "skipped"]
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
        raise Rejected(f"a zip bomb: {show(info.filename)} would expand "
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
    if any(junk(p) for p in parts):
        return None
    name = parts[-1]
    if name.lower().endswith(ARCHIVES):
        raise Skipped("an archive inside the archive (not unpacked)")
    if not safe(name):
        raise Skipped("a file name that cannot be used")
    if name in RESERVED:
        raise Skipped("the grader's own file (the submission time)")
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
        write(stream, path, MAX_MEMBER, budget, first)


def write(stream, path, limit, budget=None, data=None):
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
                    raise Rejected(over(MAX_TOTAL, "an archive, unpacked"))
                packed = budget["raw"].consumed - budget["start"]
                if count > RATIO_FLOOR and count > MAX_RATIO * packed:
                    raise Rejected(f"a zip bomb: {show(budget['name'])} "
                                   f"expands over {MAX_RATIO} times")
            if count > limit:
                break
            out.write(data)
            data = stream.read(CHUNK)
    if count > limit:
        path.unlink()
        raise Skipped(over(limit, "a file"))


def over(limit, what):
    return f"over the {limit // MB} MB limit for {what}"


def safe(name):
    """A usable file or folder name: one printable path component."""
    return (0 < len(name.encode("utf-8", "replace")) <= 255
            and name.isprintable() and name == name.strip()
            and not name.startswith(".") and "/" not in name
            and "\\" not in name)


def junk(name):
    return name.startswith(".") or name in JUNK


def show(text):
    """``text`` safe to print: non-printable characters escaped, cut."""
    text = text if text.isprintable() else ascii(text)[1:-1]
    return text if len(text) <= 100 else text[:97] + "..."
