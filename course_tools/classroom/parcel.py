"""Submissions, templates and graded folders as data.

A Dask worker may run on another machine than the grader: what it needs
(a submission, the assignment's template course) travels to it as bytes
through the scheduler, and what it made (the autograded folder) comes
back the same way. Nothing assumes a folder both machines see.

A submission is read the way :mod:`.worker` reads it: the regular files
at the top of the student's folder, never through a symbolic link (those
travel as names, so that the worker still says they were skipped).
"""

import hashlib
import io
import os
import stat
import tarfile
from pathlib import Path

from course_tools.classroom import files


def pack_submission(folder, *, max_notebook, max_file):
    """``{"files": {name: bytes}, "links": [name]}`` of ``folder``: its
    top-level regular files, a notebook cut at ``max_notebook + 1`` bytes
    (the worker then refuses it as too big), another file left out past
    ``max_file`` bytes (the worker would skip it)."""
    parcel = {"files": {}, "links": []}
    top = os.open(folder, files.OPEN_DIR)
    try:
        for name in sorted(os.listdir(top)):
            info = os.stat(name, dir_fd=top, follow_symlinks=False)
            if stat.S_ISLNK(info.st_mode):
                parcel["links"].append(name)
                continue
            notebook = name.endswith(".ipynb")
            if not stat.S_ISREG(info.st_mode) or (
                    not notebook and info.st_size > max_file):
                continue
            fd = os.open(name, files.OPEN_FILE, dir_fd=top)
            with os.fdopen(fd, "rb") as handle:
                if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                    continue
                limit = max_notebook + 1 if notebook else max_file
                parcel["files"][name] = handle.read(limit)
    finally:
        os.close(top)
    return parcel


def digest(parcel, *extra):
    """SHA-256 of a parcel of :func:`pack_submission` (names, bytes and
    links) and of ``extra`` texts: the hash of exactly what is graded."""
    found = hashlib.sha256()
    for text in extra:
        found.update(b"extra\0" + str(text).encode("utf-8",
                                                    "surrogateescape"))
    for name, data in sorted(parcel["files"].items()):
        found.update(b"file\0" + name.encode("utf-8", "surrogateescape")
                     + b"\0" + str(len(data)).encode() + b"\0" + data)
    for name in sorted(parcel["links"]):
        found.update(b"link\0" + name.encode("utf-8", "surrogateescape"))
    return found.hexdigest()


def unpack_submission(parcel, folder):
    """Write a parcel of :func:`pack_submission` into the new ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True)
    for name, data in parcel["files"].items():
        (folder / _plain(name)).write_bytes(data)
    for name in parcel["links"]:
        (folder / _plain(name)).symlink_to("/nonexistent")


def _plain(name):
    if not isinstance(name, str) or "/" in name or "\0" in name or \
            name in ("", ".", ".."):
        raise ValueError(f"expected a plain file name, got {name!r}")
    return name


def pack_tree(folder):
    """The regular files and folders under ``folder`` as gzipped tar
    bytes (links and special files are left out)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as tar:
        tar.add(str(folder), arcname=".", filter=lambda member: member
                if member.isreg() or member.isdir() else None)
    return buffer.getvalue()


def unpack_tree(data, folder):
    """Unpack :func:`pack_tree` bytes into ``folder`` (tarfile's ``data``
    filter: no absolute paths, nothing outside ``folder``, no links)."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(str(folder), filter="data")
