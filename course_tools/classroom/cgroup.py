"""Control groups: limits on memory, on the number of processes and on
the CPU for all the processes of one kernel together, and a way to kill
them all.

cgroup v2 where the grader's own group can hand the ``memory`` and
``pids`` controllers down to a child group (and ``cpu`` where it has
it); otherwise the cgroup v1 ``memory`` and ``pids`` hierarchies (and
``cpu`` and ``cpuacct`` where they are mounted); otherwise none (the
sandbox then falls back to per-process and per-user rlimits, and the
grader says so). A group is created under the grader's own group in
each hierarchy.

The CPU: a kernel's group may use at most ``cpus`` CPUs in each period
(``cpu.max``, v1 ``cpu.cfs_quota_us``) and weighs as one task against
the others (``cpu.weight``, v1 ``cpu.shares``), however many processes
and sessions it starts; a process inside can neither leave its group
(its root has no ``/sys``, it has no capability) nor change the limits
(root's files). :func:`usage` and :func:`throttled` read what it used.
"""

import os
import signal
import time

CONTROLLERS = ("memory", "pids")  # required
CPU = ("cpu", "cpuacct")  # where there are: limits and accounting
PERIOD_US = 100_000  # the CPU quota's period
WEIGHT = {"cpu.weight": 100, "cpu.shares": 1024}  # the default: one task


def _mounts():
    """``{"unified" or a v1 controller: mount point}``."""
    found = {}
    with open("/proc/self/mountinfo") as handle:
        for line in handle:
            left, _, right = line.partition(" - ")
            point = left.split()[4].replace("\\040", " ")
            kind, _, options = (right.split() + ["", "", ""])[:3]
            if kind == "cgroup2":
                found.setdefault("unified", point)
            elif kind == "cgroup":
                for option in options.split(","):
                    if option in CONTROLLERS + CPU:
                        found.setdefault(option, point)
    return found


def _own():
    """``{"unified" or a v1 controller: this process's group path}``."""
    found = {}
    with open("/proc/self/cgroup") as handle:
        for line in handle:
            number, controllers, path = line.rstrip("\n").split(":", 2)
            if number == "0" and not controllers:
                found["unified"] = path
            for name in controllers.split(","):
                if name in CONTROLLERS + CPU:
                    found[name] = path
    return found


def _read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return ""


def _write(path, text):
    with open(path, "w") as handle:
        handle.write(text)


def _parent(mount, path):
    folder = os.path.join(mount, path.lstrip("/"))
    return folder if os.path.isdir(folder) else mount


def _v2_parent(mounts, own):
    """The grader's v2 group if it can hand both controllers down (and
    the cpu controller too, where it has it)."""
    if "unified" not in mounts or "unified" not in own:
        return None
    parent = _parent(mounts["unified"], own["unified"])
    available = set(_read(os.path.join(parent,
                                       "cgroup.controllers")).split())
    if not set(CONTROLLERS) <= available:
        return None
    wanted = set(CONTROLLERS) | ({"cpu"} & available)
    control = os.path.join(parent, "cgroup.subtree_control")
    for names in (wanted, set(CONTROLLERS)):
        if names <= set(_read(control).split()):
            return parent
        try:  # fails (EBUSY) while processes live in the group itself
            _write(control, " ".join(f"+{c}" for c in sorted(names)))
            return parent
        except OSError:
            continue
    return None


def plan(name):
    """``(kind, folders)`` for a group called ``name``: kind is "v2",
    "v1" or "none"; folders has one folder per hierarchy."""
    try:
        mounts, own = _mounts(), _own()
    except OSError:
        return "none", []
    parent = _v2_parent(mounts, own)
    if parent:
        return "v2", [os.path.join(parent, name)]
    folders = [os.path.join(_parent(mounts[c], own.get(c, "/")), name)
               for c in CONTROLLERS if c in mounts]
    if len(folders) == len(CONTROLLERS) and all(
            os.access(os.path.dirname(f), os.W_OK) for f in folders):
        for c in CPU:  # a hierarchy of its own, or mounted with another
            folder = os.path.join(_parent(mounts[c], own.get(c, "/")),
                                  name) if c in mounts else None
            if folder and folder not in folders and os.access(
                    os.path.dirname(folder), os.W_OK):
                folders.append(folder)
        return "v1", folders
    return "none", []


def cpu_limited(folders):
    """Whether groups made at ``folders`` get a CPU quota."""
    for folder in folders:
        parent = os.path.dirname(folder)
        control = os.path.join(parent, "cgroup.subtree_control")
        if os.path.exists(control):  # v2: handed down, or not
            if "cpu" in _read(control).split():
                return True
        elif os.path.exists(os.path.join(parent, "cpu.cfs_quota_us")):
            return True
    return False


def create(folders, *, memory_mb, pids, cpus=1.0):
    """Make the groups with their limits (``cpus``: the CPUs the group
    may use at most, 0 for no quota); return what could not be set."""
    missing = []
    quota = int(cpus * PERIOD_US) if cpus else 0
    for folder in folders:
        if os.path.isdir(folder):
            kill(folder)
            os.rmdir(folder)
        os.mkdir(folder, 0o755)
        limits = {"memory.max": memory_mb * 2**20,
                  "memory.swap.max": 0,
                  "memory.limit_in_bytes": memory_mb * 2**20,
                  "memory.memsw.limit_in_bytes": memory_mb * 2**20,
                  "pids.max": pids,
                  "cpu.max": quota and f"{quota} {PERIOD_US}",
                  "cpu.cfs_period_us": quota and PERIOD_US,
                  "cpu.cfs_quota_us": quota, **WEIGHT}
        for name, value in limits.items():
            path = os.path.join(folder, name)
            if os.path.exists(path) and value != 0:
                try:
                    _write(path, str(value))
                except OSError as error:
                    missing.append(f"{name}: {error.strerror}")
    return missing


def join(folders, pid=0):
    """Move process ``pid`` (0: this one) into the groups."""
    for folder in folders:
        _write(os.path.join(folder, "cgroup.procs"), str(pid))


def members(folders):
    found = set()
    for folder in folders:
        found |= {int(p) for p in _read(
            os.path.join(folder, "cgroup.procs")).split()}
    return found


def kill(*folders, seconds=5.0):
    """SIGKILL every process in the groups until none is left; return
    whether they are empty."""
    for folder in folders:
        path = os.path.join(folder, "cgroup.kill")
        if os.path.exists(path):
            try:
                _write(path, "1")
            except OSError:
                pass
    end = time.monotonic() + seconds
    while True:
        left = members(folders)
        if not left:
            return True
        if time.monotonic() > end:
            return False
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.02)


def events(folders):
    """What the limits stopped: ``{"oom_kill": n, "pids_max": n}``."""
    found = {"oom_kill": 0, "pids_max": 0}
    for folder in folders:
        for name in ("memory.events", "memory.oom_control"):
            for line in _read(os.path.join(folder, name)).splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    found["oom_kill"] += int(value)
        for line in _read(os.path.join(folder, "pids.events")).splitlines():
            key, _, value = line.partition(" ")
            if key == "max":
                found["pids_max"] += int(value)
    return found


def usage(folders):
    """CPU seconds the groups' processes used, or None where no group
    accounts for them."""
    for folder in folders:
        for line in _read(os.path.join(folder, "cpu.stat")).splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) / 1e6
        found = _read(os.path.join(folder, "cpuacct.usage")).strip()
        if found:
            return int(found) / 1e9
    return None


def throttled(folders):
    """Seconds the groups spent stopped at their CPU quota."""
    total = 0.0
    for folder in folders:
        for line in _read(os.path.join(folder, "cpu.stat")).splitlines():
            key, _, value = line.partition(" ")
            if key == "throttled_usec":
                total += int(value) / 1e6
            elif key == "throttled_time":
                total += int(value) / 1e9
    return total


def sweep(prefix, gone, *, older_s=60.0):
    """Remove the empty groups ``prefix`` + a number whose owner is gone
    (``gone(number)`` true) and that are older than ``older_s``: what
    a grader killed mid-run left. A group with a process in it is never
    touched. Return the folders removed."""
    removed = []
    parents = {os.path.dirname(f) for f in plan(prefix + "0")[1]}
    for parent in sorted(parents):
        try:
            names = os.listdir(parent)
        except OSError:
            continue
        for name in names:
            number = name.removeprefix(prefix)
            folder = os.path.join(parent, name)
            if not name.startswith(prefix) or not number.isdigit() or \
                    not gone(int(number)) or members([folder]):
                continue
            try:
                if time.time() - os.stat(folder).st_mtime < older_s:
                    continue
                os.rmdir(folder)
                removed.append(folder)
            except OSError:
                continue
    return removed


def remove(folders):
    """Kill what is left and remove the groups."""
    for folder in folders:
        if not os.path.isdir(folder):
            continue
        kill(folder)
        for _ in range(50):
            try:
                os.rmdir(folder)
                break
            except OSError:
                time.sleep(0.02)
