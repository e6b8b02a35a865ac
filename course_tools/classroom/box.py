"""A kernel's box: the one place where a student's kernel may write, as
the grader sees it.

A box is a folder with a size-capped tmpfs mounted on it (in the
worker's private mount namespace), holding ``work/`` (the kernel's
working folder, the submission copied in), ``tmp/``, ``shm/`` and
``ipc/`` (the kernel's ZMQ sockets), all owned by the kernel's own uid.
Each worker has its own uid (``UID_BASE`` + its pid), so no two living
kernels share one, and no process of it survives from one kernel to the
next: closing a box kills every process of that uid and of the kernel's
control groups, copies back the files the kernel created (regular files
only, bounded, no link followed), and unmounts the box.

While a box is open its kernel's control groups hold it to ``cpus``
CPUs (:mod:`.cgroup`) and a watcher holds it to a budget of ``cpu_s``
CPU seconds in all: past it, every process of the kernel is killed.
"""

import ctypes
import ctypes.util
import os
import signal
import threading
import time
from pathlib import Path

from course_tools.classroom import cgroup, files

UID_BASE = 1_500_000_000  # uids of kernels: UID_BASE + a grader pid
LAYOUT = {"work": 0o755, "tmp": 0o1777, "shm": 0o1777, "ipc": 0o700}
CLONE_NEWNS = 0x00020000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
COPY_BACK = {"max_depth": 8, "max_files": 200, "max_bytes": 16 * 2**20}
CPUS = 1.0  # CPUs one kernel may use at once (kernels run one thread)
CPU_S = 600  # CPU seconds one kernel may use in all
WATCH_S = 0.5  # seconds between two readings of a kernel's CPU time
# Reported, not decided on: whose fault a slow cell is, is measured per
# cell (:mod:`.stall`); these describe a kernel that crowded its group
THROTTLED_S = 2.0
CROWD = 16


def _libc():
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong,
                                                    ctypes.c_char_p]
    libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    return libc


LIBC = _libc()


def check(result, what):
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def mount(source, target, kind, flags, data=None):
    check(LIBC.mount(source and os.fsencode(source), os.fsencode(target),
                     kind and kind.encode(), flags,
                     data and data.encode()), f"mount {target}")


def umount(target):
    check(LIBC.umount2(os.fsencode(target), MNT_DETACH), f"umount {target}")


def private_mounts():
    """Move this process into a mount namespace of its own, so that the
    boxes it mounts are seen by it and its children only."""
    check(LIBC.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    mount(None, "/", None, MS_REC | MS_PRIVATE)


def layout(folder, uid):
    """Make the box's sub-folders, owned by ``uid``."""
    for name, mode in LAYOUT.items():
        path = os.path.join(folder, name)
        os.mkdir(path)
        os.chown(path, uid, uid)
        os.chmod(path, mode)


def mount_tmpfs(folder, disk_mb):
    os.makedirs(folder, mode=0o700, exist_ok=True)
    mount("tmpfs", folder, "tmpfs", MS_NOSUID | MS_NODEV,
          f"size={int(disk_mb)}m,mode=0755")


def processes_of(uid):
    """The pids of processes whose real or effective uid is ``uid``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as handle:
                for line in handle:
                    if line.startswith("Uid:"):
                        if str(uid) in line.split()[1:3]:
                            found.append(int(name))
                        break
        except OSError:
            continue
    return found


def kill_user(uid, seconds=5.0):
    """SIGKILL every process of ``uid`` until none is left."""
    end = time.monotonic() + seconds
    while True:
        left = processes_of(uid)
        if not left or time.monotonic() > end:
            return not left
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.02)


def _grader_gone(uid):
    """Whether the grading process of kernel uid ``uid`` has ended."""
    pid = uid - UID_BASE
    return pid > 0 and not os.path.exists(f"/proc/{pid}")


class Box:
    """One worker's box, opened before each kernel and closed after."""

    def __init__(self, folder, *, uid, disk_mb, memory_mb, pids,
                 cpus=CPUS, cpu_s=CPU_S):
        self.folder = Path(folder)
        self.uid, self.disk_mb = uid, disk_mb
        self.memory_mb, self.pids = memory_mb, pids
        self.cpus, self.cpu_s = cpus, cpu_s
        self.kind, self.groups = cgroup.plan(f"course-kernel-{uid}")
        # the groups of graders killed mid-run (no close), when empty
        cgroup.sweep("course-kernel-", _grader_gone)
        self.mounted = False
        self.watch = None
        # of the last kernel: whether it spent its CPU budget, the
        # seconds it was stopped at its CPU quota, the CPU seconds its
        # processes used (None: not counted), the most processes it ran
        # at once (as seen every WATCH_S)
        self.spent, self.throttled, self.used = False, 0.0, None
        self.crowd = 0

    @property
    def ipc_prefix(self):
        """The ``ip`` of the kernel's connection (``ipc`` transport)."""
        return str(self.folder / "ipc" / "kernel")

    def open(self, source):
        """Mount a fresh box and copy folder ``source`` into ``work/``;
        return reasons for what was left out."""
        kill_user(self.uid)
        if self.groups:
            cgroup.remove(self.groups)
        mount_tmpfs(self.folder, self.disk_mb)
        self.mounted = True
        layout(self.folder, self.uid)
        self.spent, self.throttled, self.used = False, 0.0, None
        self.crowd = 0
        if self.groups:
            cgroup.create(self.groups, memory_mb=self.memory_mb,
                          pids=self.pids, cpus=self.cpus)
            self.watch = _Watch(self.groups, self.cpu_s)
            self.watch.start()
        return files.copy_tree(source, self.folder / "work",
                               owner=(self.uid, self.uid), max_files=1000,
                               max_bytes=self.disk_mb * 2**20)

    def close(self, target):
        """Stop every process of the kernel, copy the files it created
        back into ``target``, unmount; return what happened."""
        if not self.mounted:
            return []
        notes = []
        if self.watch is not None:
            self.watch.stop.set()
            self.watch.join()
            self.spent, self.crowd = self.watch.spent, self.watch.crowd
            self.watch = None
        if self.spent:
            notes.append(f"the submission used its {self.cpu_s:g} s of "
                         "CPU time: every process of its kernel was "
                         "stopped")
        if self.groups:
            self.throttled = cgroup.throttled(self.groups)
            self.used = cgroup.usage(self.groups)
            cgroup.kill(*self.groups)
        if not kill_user(self.uid):
            notes.append("processes of the kernel could not be stopped")
        if self.groups:
            found = cgroup.events(self.groups)
            if found["oom_kill"]:
                notes.append(
                    f"a process ran out of memory (the submission's "
                    f"{self.memory_mb} MB in all) and was killed")
            if found["pids_max"]:
                notes.append(f"the submission hit its limit of "
                             f"{self.pids} processes")
        disk = os.statvfs(self.folder)
        if disk.f_bavail * disk.f_frsize < 2**20:
            notes.append(f"the submission filled its {self.disk_mb} MB "
                         "of disk")
        try:
            notes += [f"files the kernel wrote: {line}" for line in
                      files.copy_tree(self.folder / "work", target,
                                      overwrite=False, **COPY_BACK)]
        finally:
            try:
                umount(self.folder)
                self.mounted = False
            finally:
                if self.groups:
                    cgroup.remove(self.groups)
        return notes


class _Watch(threading.Thread):
    """Every ``WATCH_S``: count the kernel's processes (``crowd``, the
    most at once) and, past ``cpu_s`` CPU seconds in all, kill them
    (``spent``): no control group counts CPU time against a limit."""

    def __init__(self, groups, cpu_s):
        super().__init__(daemon=True, name="kernel-watch")
        self.groups, self.cpu_s = groups, cpu_s
        self.stop, self.spent, self.crowd = threading.Event(), False, 0

    def run(self):
        while not self.stop.wait(WATCH_S):
            self.crowd = max(self.crowd, len(cgroup.members(self.groups)))
            if self.cpu_s and (cgroup.usage(self.groups) or 0.0) > \
                    self.cpu_s:
                self.spent = True
                cgroup.kill(*self.groups)
                return
