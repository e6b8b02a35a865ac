"""The student's kernel, started through this launcher::

    python -m course_lib.classroom.sandbox --memory-mb 3072 \\
        --hide DIR ... --read-only DIR ... -- python -m ipykernel_launcher

Always: resource limits (address space, file size, no core dumps) and one
thread for the maths libraries. Where the grader may create a mount
namespace (as root, or through a user namespace), the kernel also gets a
private ``/tmp``, the ``--hide`` paths covered by empty read-only folders
(or ``/dev/null`` for files), the ``--read-only`` paths read-only, and,
as root, no capabilities left, so that it cannot undo any of this. Its
working directory stays its own.
"""

import argparse
import ctypes
import ctypes.util
import os
import resource
import shutil
import sys

KEY_VARIABLE = "COURSE_GRADING_CASES"  # the grader's cases file
CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_CAPBSET_DROP = 1, 38, 24
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS",
                    "OPENBLAS_NUM_THREADS")


def _libc():
    return ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def _call(result, what):
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def limit(*, memory_mb, file_mb=256):
    """Cap the address space and the size of any file written."""
    if memory_mb:
        size = int(memory_mb) * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (size, size))
    size = int(file_mb) * 2**20
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for name in THREAD_VARIABLES:
        os.environ[name] = "1"


def _write(path, text):
    with open(path, "w") as handle:
        handle.write(text)


def _enter_namespace(libc):
    """A private mount namespace; as a user, inside a user namespace."""
    if os.geteuid() == 0:
        _call(libc.unshare(CLONE_NEWNS), "unshare")
        return True
    uid, gid = os.geteuid(), os.getegid()
    _call(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS), "unshare")
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")
    return False


def _outermost(paths):
    """The paths not inside another of them."""
    paths = sorted({os.path.normpath(p) for p in paths})
    return [p for p in paths
            if not any(p.startswith(q + os.sep) for q in paths)]


def isolate(*, hide, read_only, keep):
    """Mount-namespace isolation; return a line saying what was done.

    ``keep``: files whose bytes must reappear at the same path after
    ``/tmp`` is replaced (the connection file, the grader's cases).
    """
    libc = _libc()
    libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong,
                                                    ctypes.c_char_p]
    saved = {}
    for path in keep:
        if path and os.path.isfile(path):
            with open(path, "rb") as handle:
                saved[path] = handle.read()
    try:
        root = _enter_namespace(libc)
    except OSError as error:
        return f"no isolation of files ({error})"

    def mount(source, target, kind, flags, data=None):
        _call(libc.mount(source and source.encode(), target.encode(),
                         kind and kind.encode(), flags,
                         data and data.encode()), f"mount {target}")

    mount(None, "/", None, MS_REC | MS_PRIVATE)
    here = os.open(".", os.O_RDONLY)  # in the new namespace
    for path in read_only:
        if os.path.exists(path):
            mount(path, path, None, MS_BIND | MS_REC)
            mount(None, path, None,
                  MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID)
    for path in hide:
        if os.path.isdir(path):
            mount("tmpfs", path, "tmpfs",
                  MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                  "size=4k,mode=0555")
        elif os.path.exists(path):
            mount("/dev/null", path, None, MS_BIND)
    # Read-only folders that live under /tmp (a course, a clone of the
    # course with its .venv) would vanish with the old /tmp: hold them
    # open, then bind them back, read-only, at the same paths.
    under_tmp = _outermost(p for p in read_only
                           if p.startswith("/tmp/") and os.path.isdir(p))
    held = {path: os.open(path, os.O_RDONLY) for path in under_tmp}
    mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV,
          "size=512m,mode=1777")
    for path, fd in held.items():
        os.makedirs(path, exist_ok=True)
        mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        mount(None, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID)
        os.close(fd)
    for path, data in saved.items():
        if path.startswith("/tmp/"):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as handle:
                handle.write(data)
            os.chmod(path, 0o600)
    # The working folder, bound alone into the private /tmp: ".." from it
    # leads nowhere else.
    os.makedirs("/tmp/work")
    mount(f"/proc/self/fd/{here}", "/tmp/work", None, MS_BIND)
    os.close(here)
    os.chdir("/tmp/work")
    if root:
        libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        for cap in range(64):
            libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    return "isolated"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="course_lib.classroom.sandbox")
    parser.add_argument("--memory-mb", type=int, default=0)
    parser.add_argument("--file-mb", type=int, default=256)
    parser.add_argument("--hide", action="append", default=[])
    parser.add_argument("--read-only", action="append", default=[])
    parser.add_argument("--no-isolation", action="store_true")
    parser.add_argument("--probe", action="store_true",
                        help="print what isolation is possible and exit")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else \
        args.command
    if not command and not args.probe:
        parser.error("expected the kernel's command after --")
    keep = [os.environ.get(KEY_VARIABLE, "")]
    if "-f" in command:
        keep.append(command[command.index("-f") + 1])
    _libc().prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0)  # dies with the grader
    state = "no isolation of files (--no-isolation)"
    if not args.no_isolation:
        state = isolate(hide=args.hide, read_only=args.read_only,
                        keep=keep)
    limit(memory_mb=args.memory_mb, file_mb=args.file_mb)
    if state == "isolated":
        os.environ["HOME"] = "/tmp/home"
        os.makedirs("/tmp/home", exist_ok=True)
    if args.probe:
        print(state)
        return
    binary = shutil.which(command[0]) or command[0]
    os.execv(binary, command)


if __name__ == "__main__":
    sys.exit(main())
