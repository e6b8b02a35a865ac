"""Copying folders that a student wrote, without trusting them.

The grader runs as root and a student controls what is in a submission
and what a kernel leaves in its working folder. So a copy takes regular
files only and never follows a symbolic link: every folder and file is
opened relative to its parent's descriptor with ``O_NOFOLLOW`` and
checked with ``fstat`` once open, and the walk is bounded (depth, count,
bytes). What was left out comes back as reasons, one line per kind.
"""

import os
import stat

OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
OPEN_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
SHOWN = 3  # names quoted per kind of reason


class _Tally:
    def __init__(self, max_files, max_bytes):
        self.files, self.bytes, self.folders = 0, 0, 0
        self.max_files, self.max_bytes = max_files, max_bytes
        self.skipped = {}  # reason -> relative paths

    def full(self):
        """Whether ``max_files`` entries (files and folders) are in."""
        return self.files + self.folders >= self.max_files

    def skip(self, why, path):
        self.skipped.setdefault(why, []).append(path)

    def reasons(self):
        lines = []
        for why, paths in self.skipped.items():
            shown = ", ".join(paths[:SHOWN])
            more = len(paths) - SHOWN
            lines.append(f"{why}: {shown}" + (f" (and {more} more)"
                                               if more > 0 else ""))
        return lines


def _size(count):
    return f"{count // 2**20} MB" if count >= 2**20 else f"{count} bytes"


def copy_tree(source, target, *, max_depth=8, max_files=1000,
              max_bytes=512 * 2**20, ignore=(), overwrite=True,
              owner=None):
    """Copy the regular files of folder ``source`` into ``target``.

    Symbolic links, devices, sockets and pipes are skipped; so are
    folders deeper than ``max_depth``, entries (files and folders, every
    kind counts) past ``max_files`` and bytes past ``max_bytes`` in all,
    and top-level names in ``ignore``. With
    ``overwrite=False`` a file already in ``target`` is kept as it is.
    ``owner``: a ``(uid, gid)`` given to everything created. ``source``
    may be an open folder's descriptor. Return the reasons for what was
    skipped (empty when everything was copied).
    """
    tally = _Tally(max_files, max_bytes)
    try:
        top = os.dup(source) if isinstance(source, int) else \
            os.open(source, OPEN_DIR)
    except OSError as error:
        return [f"could not read {os.path.basename(source)}: "
                f"{error.strerror}"]
    try:
        _make_folder(target, owner)
        _copy_folder(top, str(target), "", 0, max_depth, tally,
                     set(ignore), overwrite, owner)
    finally:
        os.close(top)
    return tally.reasons()


def _make_folder(path, owner):
    os.makedirs(path, mode=0o755, exist_ok=True)
    if owner:
        os.chown(path, *owner, follow_symlinks=False)


def _copy_folder(fd, target, relative, depth, max_depth, tally, ignore,
                 overwrite, owner):
    names = []
    with os.scandir(fd) as entries:
        for entry in entries:  # no more names than could be copied
            names.append(entry.name)
            if len(names) > 2 * tally.max_files:
                tally.skip(f"more than {tally.max_files} entries: skipped",
                           f"{relative}...")
                break
    for name in sorted(names):
        path = f"{relative}{name}"
        if not relative and name in ignore:
            continue
        try:
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISLNK(info.st_mode):
            tally.skip("symbolic link skipped", path)
        elif stat.S_ISDIR(info.st_mode):
            if depth + 1 > max_depth:
                tally.skip(f"folders nested deeper than {max_depth} "
                           "levels skipped", path)
                continue
            if tally.full():
                tally.skip(f"more than {tally.max_files} entries: skipped",
                           path)
                continue
            tally.folders += 1
            try:
                child = os.open(name, OPEN_DIR, dir_fd=fd)
            except OSError:
                tally.skip("unreadable folder skipped", path)
                continue
            try:
                _make_folder(os.path.join(target, name), owner)
                _copy_folder(child, os.path.join(target, name), path + "/",
                             depth + 1, max_depth, tally, ignore, overwrite,
                             owner)
            finally:
                os.close(child)
        elif stat.S_ISREG(info.st_mode):
            _copy_file(fd, name, os.path.join(target, name), path, tally,
                       overwrite, owner)
        else:
            tally.skip("special file skipped", path)


def _copy_file(fd, name, destination, path, tally, overwrite, owner):
    if tally.full():
        tally.skip(f"more than {tally.max_files} entries: skipped", path)
        return
    if not overwrite and os.path.lexists(destination):
        return
    try:
        source = os.open(name, OPEN_FILE, dir_fd=fd)
    except OSError:
        tally.skip("unreadable file skipped", path)
        return
    try:
        info = os.fstat(source)
        if not stat.S_ISREG(info.st_mode):
            tally.skip("special file skipped", path)
            return
        if tally.bytes + info.st_size > tally.max_bytes:
            tally.skip(f"files past {_size(tally.max_bytes)} in all "
                       "skipped", path)
            return
        if os.path.lexists(destination):
            os.unlink(destination)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        out = os.open(destination, flags | os.O_CLOEXEC, 0o644)
        try:
            left = tally.max_bytes - tally.bytes
            while left > 0:
                chunk = os.read(source, min(2**20, left))
                if not chunk:
                    break
                os.write(out, chunk)
                left -= len(chunk)
                tally.bytes += len(chunk)
            if owner:
                os.fchown(out, *owner)
        finally:
            os.close(out)
        tally.files += 1
    finally:
        os.close(source)


def chmod_files(folder, mode, *, max_depth=8):
    """``chmod`` the regular files under ``folder`` (a bounded walk that
    follows no link): what nbgrader's ``set_permissions`` does, safely."""
    try:
        top = os.open(folder, OPEN_DIR)
    except OSError:
        return
    try:
        _chmod_folder(top, mode, 0, max_depth)
    finally:
        os.close(top)


def _chmod_folder(fd, mode, depth, max_depth):
    with os.scandir(fd) as entries:
        names = [e.name for e in entries]
    for name in names:
        try:
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISREG(info.st_mode):
                handle = os.open(name, OPEN_FILE, dir_fd=fd)
                try:
                    if stat.S_ISREG(os.fstat(handle).st_mode):
                        os.fchmod(handle, mode)
                finally:
                    os.close(handle)
            elif stat.S_ISDIR(info.st_mode) and depth < max_depth:
                child = os.open(name, OPEN_DIR, dir_fd=fd)
                try:
                    _chmod_folder(child, mode, depth + 1, max_depth)
                finally:
                    os.close(child)
        except OSError:
            continue
