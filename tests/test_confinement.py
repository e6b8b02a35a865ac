"""What a grading kernel holds and can do: no power over the machine's
kernel (the seccomp profile, ``course_tools/classroom/seccomp.py``), no
file of the grader's as its output (``output.py``), and nothing of
another kernel's request (``zygote.py``)."""

import errno
import json
import os
import platform
import resource
import secrets
import shutil
import socket
import stat
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from course_tools.classroom import grade, launch, output, seccomp
from course_tools.classroom.grade import Options, grade_class, summary
from tests.nbgrading import ROOT
from tests.test_classroom import ASSIGNMENT, NAME, RIGHT, _tiny_source
from tests.test_isolation import _launch, _write

root_only = pytest.mark.skipif(
    os.geteuid() != 0, reason="kernels get users of their own as root")
TIMEOUT = 40
# system call numbers: what a kernel's child tries, and what it gets
CALLS = {
    "x86_64": {"unshare": 272, "clone": 56, "clone3": 435, "mount": 165,
               "bpf": 321, "keyctl": 250, "add_key": 248,
               "setns": 308, "perf_event_open": 298,
               "io_uring_setup": 425, "inotify_init1": 294,
               "fanotify_init": 300},
    "aarch64": {"unshare": 97, "clone": 220, "clone3": 435, "mount": 40,
                "bpf": 280, "keyctl": 219, "add_key": 217,
                "setns": 268, "perf_event_open": 241,
                "io_uring_setup": 425, "inotify_init1": 26,
                "fanotify_init": 262},
}
CLONE_NEWUSER, CLONE_NEWNET, CLONE_NEWNS = 0x10000000, 0x40000000, 0x20000
SIGCHLD = 17
EXPECTED = {"unshare user": "EPERM", "unshare net": "EPERM",
            "unshare mount": "EPERM", "clone user": "EPERM",
            "clone3": "ENOSYS", "mount": "EPERM", "bpf": "EPERM",
            "keyctl": "EPERM", "add_key": "EPERM",
            "setns": "EPERM", "perf_event_open": "EPERM",
            "io_uring_setup": "EPERM", "inotify_init1": "EPERM",
            "fanotify_init": "EPERM", "os.unshare": "EPERM"}
# A child of the kernel (a new Python, as a student's subprocess would
# be) tries each call; the kernel writes down what each returned.
CHILD = """
import ctypes, errno, json, os, sys
n, flag = json.loads(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
def call(*args):
    result = libc.syscall(*args)
    return "done" if result >= 0 else errno.errorcode[ctypes.get_errno()]
buffer = ctypes.create_string_buffer(256)
found = {
    "unshare user": call(n["unshare"], flag["user"]),
    "unshare net": call(n["unshare"], flag["net"]),
    "unshare mount": call(n["unshare"], flag["mount"]),
    "clone user": call(n["clone"], flag["user"] | flag["sigchld"], 0, 0,
                       0, 0),
    "clone3": call(n["clone3"], buffer, 88),
    "mount": call(n["mount"], b"none", b"/tmp", b"tmpfs", 0, 0),
    "bpf": call(n["bpf"], 0, buffer, 64),
    "keyctl": call(n["keyctl"], 0, -4, 0),
    "add_key": call(n["add_key"], b"user", b"k", b"v", 1, -4),
    "setns": call(n["setns"], os.open("/proc/self/ns/net", os.O_RDONLY),
                  0),
    "perf_event_open": call(n["perf_event_open"], buffer, 0, -1, -1, 0),
    "io_uring_setup": call(n["io_uring_setup"], 8, buffer),
    "inotify_init1": call(n["inotify_init1"], 0),
    "fanotify_init": call(n["fanotify_init"], 0, 0),
}
try:
    os.unshare(os.CLONE_NEWUSER)
    found["os.unshare"] = "done"
except AttributeError:
    found["os.unshare"] = "EPERM"  # Python < 3.12 has no os.unshare
except OSError as error:
    found["os.unshare"] = errno.errorcode[error.errno]
print(json.dumps(found))
"""
FLAGS = {"user": CLONE_NEWUSER, "net": CLONE_NEWNET, "mount": CLONE_NEWNS,
         "sigchld": SIGCHLD}
POWER = RIGHT + """
import json as _json, platform as _platform, subprocess as _subprocess
import sys as _sys
_calls = [{calls!r}[_platform.machine()], {flags!r}]
_child = _subprocess.run([_sys.executable, "-c", {child!r},
                          _json.dumps(_calls)], capture_output=True,
                         text=True, timeout=60)
with open("report.json", "w") as _handle:
    _handle.write(_child.stdout or _child.stderr)
"""
# One kernel writes a marked line and 200 MB to its standard streams;
# the next one looks for the line where it could be.
WRITE = RIGHT + """
import os as _os, sys as _sys
# ipykernel sends what fds 1 and 2 get to the grader as messages; the
# streams the kernel was started with are kept as these copies
_fds = [getattr(_s, "_original_stdstream_copy", None) or _n
        for _s, _n in ((_sys.stdout, 1), (_sys.stderr, 2))]
_os.write(_fds[0], b"course-marker-one-kernel-to-the-next\\n")
_block = b"y" * 2**20
for _ in range(100):
    for _fd in _fds:
        _os.write(_fd, _block)
"""
READ = RIGHT + """
import json as _json, os as _os, sys as _sys
_fds = [0] + [getattr(_s, "_original_stdstream_copy", None) or _n
              for _s, _n in ((_sys.stdout, 1), (_sys.stderr, 2))]
_streams = [_os.readlink(f"/proc/self/fd/{_fd}") for _fd in _fds]
_seen = b""
for _fd in _fds[1:]:  # a pipe's end reopened for reading: the same pipe
    try:
        _copy = _os.open(f"/proc/self/fd/{_fd}",
                         _os.O_RDONLY | _os.O_NONBLOCK)
        _seen += _os.read(_copy, 2**20)
    except OSError:
        pass
with open("report.json", "w") as _handle:
    _json.dump({"streams": _streams,
                "seen": b"course-marker" in _seen}, _handle)
"""
# What a kernel's memory holds of connection keys (jupyter_client's
# new_id: 8 and 24 hexadecimal digits): its own, none of another's.
KEYS = RIGHT + """
import json as _json, re as _re
_uuid = _re.compile(rb"[0-9a-f]{8}-[0-9a-f]{24}")
_found = set()
with open("/proc/self/maps") as _maps:
    _regions = [_line.split() for _line in _maps]
with open("/proc/self/mem", "rb", buffering=0) as _mem:
    for _region in _regions:
        _named = len(_region) > 5 and not _region[5].startswith("[")
        if _region[1][0] != "r" or _named or \\
                _region[-1] in ("[vvar]", "[vsyscall]", "[vvar_vclock]"):
            continue
        _start, _end = (int(_x, 16) for _x in _region[0].split("-"))
        while _start < _end:
            _size = min(2**26, _end - _start)
            try:
                _mem.seek(_start)
                _data = _mem.read(_size)
            except (OSError, OverflowError, ValueError):
                break
            _found.update(_m.decode() for _m in _uuid.findall(_data))
            _start += _size
_key = get_ipython().kernel.session.key.decode()
with open("report.json", "w") as _handle:
    _json.dump({"key": _key, "found": sorted(_found)}, _handle)
"""


def test_the_profile_allows_no_namespace_mount_bpf_or_key_call():
    """Read for a process with no capability, Docker's profile names
    none of the calls that gain or reach a power, and allows ``clone``
    only without a namespace flag."""
    for machine in seccomp.ARCHES:
        default, rules = seccomp.rules(machine=machine)
        assert default == seccomp.errno_action(errno.EPERM)
        allowed = {n for names, action, args in rules
                   if action == seccomp.ALLOW and not args for n in names}
        assert allowed and not allowed & {
            "unshare", "setns", "mount", "umount2", "pivot_root", "bpf",
            "keyctl", "add_key", "request_key", "clone", "clone3",
            "perf_event_open", "io_uring_setup", "userfaultfd", "chroot",
            "open_tree", "move_mount", "fsopen", "init_module", "mbind",
            "inotify_init", "inotify_init1", "inotify_add_watch",
            "fanotify_init", "fanotify_mark"}
        clone = [args for names, action, args in rules if "clone" in names]
        flags = 0x7E020000  # every CLONE_NEW* flag
        assert clone == [((0, 7, flags, 0),)], clone
        clone3 = [action for names, action, args in rules
                  if "clone3" in names]
        assert clone3 == [seccomp.errno_action(errno.ENOSYS)]


def test_the_kernels_output_is_capped_and_escaped():
    read, write = output.pipe()
    target_read, target_write = os.pipe()
    drain = output.Drain(read, target=target_write, cap=16)
    os.write(write, b"\x1b[2Jabcdefghijklmnopqrstuvwxyz")
    os.close(write)
    drain.until_end()
    drain.close()
    os.close(target_write)
    text = os.read(target_read, 4096).decode()
    os.close(target_read)
    assert text.startswith("\\x1b[2Jabcdefghijk"), text
    assert "wrote 14 more bytes" in text and "xyz" not in text, text


@root_only
def test_a_sandboxed_process_cannot_unshare_and_its_output_is_capped(
        tmp_path):
    """Without the zygote: the same profile, the same pipe."""
    if platform.machine() not in CALLS:
        pytest.skip(f"no system call numbers for {platform.machine()}")
    flood = ("import os\nos.write(1, b'z' * 2**20)\n"
             "os.write(2, b'z' * 2**20)\n")
    calls = json.dumps([CALLS[platform.machine()], FLAGS])
    result = _launch(tmp_path, ["python", "-c", CHILD, calls])
    assert json.loads(result.stdout.splitlines()[0]) == EXPECTED, result
    result = _launch(tmp_path, ["python", "-c", flood])
    assert len(result.stdout) < output.KEPT + 200, len(result.stdout)
    assert "more bytes to its standard streams: dropped" in result.stdout


def _course(tmp_path):
    from course_tools import release

    course = tmp_path / "course"
    source = course / "solutions" / ASSIGNMENT
    source.mkdir(parents=True)
    nbformat.write(_tiny_source(), source / f"{NAME}.ipynb")
    (course / "nbgrader_config.py").write_text(
        (ROOT / "nbgrader_config.py").read_text())
    release.generate(ASSIGNMENT, root=course,
                     destination=course / "chapters" / ASSIGNMENT)
    return course


def _report(course, student):
    return json.loads((course / "autograded" / student / ASSIGNMENT
                       / "report.json").read_text())


@root_only
@pytest.mark.e2e
def test_a_kernels_child_gains_no_power_and_honest_answers_grade_fully(
        tmp_path):
    if platform.machine() not in CALLS:
        pytest.skip(f"no system call numbers for {platform.machine()}")
    course = _course(tmp_path)
    _write(course, "power",
           POWER.format(calls=CALLS, child=CHILD, flags=FLAGS))
    _write(course, "honest", RIGHT)
    outcomes = grade_class(Options(root=course, jobs=1, timeout=TIMEOUT,
                                   progress=False))
    assert [o.score for o in outcomes] == [3, 3], summary(outcomes)
    assert _report(course, "power") == EXPECTED


@root_only
@pytest.mark.e2e
def test_one_kernels_output_reaches_no_later_kernel_nor_the_disk(
        tmp_path, monkeypatch):
    """A kernel writes 200 MB and a marked line to its standard streams:
    the next kernel of the same grading process finds its own streams a
    pipe and the line nowhere; the grading process's log (0600) keeps
    at most ``output.KEPT`` bytes of it."""
    course = _course(tmp_path)
    _write(course, "a_writer", WRITE)
    _write(course, "b_reader", READ)
    logs = {}
    remove = shutil.rmtree

    def keep_logs(path, *args, **kwargs):  # before the scratch goes
        for log in Path(path).glob("**/worker.log"):
            logs[log] = (log.stat(), log.read_bytes())
        return remove(path, *args, **kwargs)

    monkeypatch.setattr(grade.shutil, "rmtree", keep_logs)
    outcomes = grade_class(Options(root=course, jobs=1, timeout=TIMEOUT,
                                   progress=False))
    assert [o.score for o in outcomes] == [3, 3], summary(outcomes)
    report = _report(course, "b_reader")
    # /dev/null, opened before the kernel's root replaced the machine's
    assert report["streams"][0].endswith("/null"), report
    assert all(s.startswith("pipe:") for s in report["streams"][1:]), \
        report
    assert not report["seen"], report
    assert logs, "no worker.log was found"
    for found, data in logs.values():
        assert stat.S_IMODE(found.st_mode) == 0o600, oct(found.st_mode)
        assert data.count(b"y") < 2 * output.KEPT, len(data)
        assert b"more bytes to its standard streams: dropped" in data


@root_only
@pytest.mark.e2e
def test_no_kernel_holds_another_kernels_request(tmp_path):
    """Two kernels forked one after the other from one zygote: the
    second's memory holds its own connection key, never the first's
    (the zygote never reads a request; each keeper reads its own)."""
    course = _course(tmp_path)
    for student in ("first", "second"):
        _write(course, student, KEYS)
    outcomes = grade_class(Options(root=course, jobs=1, timeout=TIMEOUT,
                                   progress=False))
    assert [o.score for o in outcomes] == [3, 3], summary(outcomes)
    first, second = (_report(course, s) for s in ("first", "second"))
    assert second["key"] in second["found"], "the scan finds no key"
    assert first["key"] not in second["found"], second["found"]
    assert second["key"] not in first["found"]


def _memory(pid):
    """What process ``pid``'s readable memory holds, region by region."""
    with open(f"/proc/{pid}/maps") as maps:
        regions = [line.split() for line in maps]
    with open(f"/proc/{pid}/mem", "rb", buffering=0) as memory:
        for region in regions:
            if region[1][0] != "r" or region[-1] in ("[vvar]",
                                                     "[vsyscall]"):
                continue
            start, end = (int(x, 16) for x in region[0].split("-"))
            try:
                memory.seek(start)
                yield memory.read(end - start)
            except (OSError, OverflowError, ValueError):
                continue


@root_only
def test_the_zygote_reads_no_request(tmp_path):
    """A request (its cases, its connection key) reaches the keeper
    forked for it, never the template that later kernels are copies
    of: after serving one, the zygote's memory holds nothing of it."""
    path = tmp_path / "zygote.sock"
    code = ("import sys\nfrom course_tools.classroom import zygote\n"
            "print(zygote.start(sys.argv[1]), flush=True)\n"
            "sys.stdin.read()\n")
    helper = subprocess.Popen([sys.executable, "-c", code, str(path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              cwd=ROOT, text=True)
    try:
        pid = int(helper.stdout.readline())
        marker = f"course-request-{secrets.token_hex(16)}".encode()
        payload = json.dumps({"argv": ["--no-such-option"],
                              "plan": {"cases": marker.decode() * 64}})
        with open(os.devnull, "wb") as null, socket.socket(
                socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(str(path))
            socket.send_fds(conn, [launch.HEADER.pack(len(payload))],
                            [null.fileno()] * 3)
            conn.sendall(payload.encode())
            while conn.recv(256):  # the keeper refuses it and ends
                pass
        assert not any(marker in region for region in _memory(pid))
    finally:
        helper.stdin.close()
        helper.wait(timeout=30)


MEMORY = """
import resource
print(resource.getrlimit(resource.RLIMIT_AS)[0], flush=True)
blocks = []
for _ in range({blocks}):
    blocks.append(bytearray(64 * 2**20))  # touched: zero-filled
    print(len(blocks) * 64, flush=True)
"""


@root_only
def test_memory_is_the_control_groups_not_the_address_space(tmp_path):
    """With control groups, ``--memory-mb`` is what the kernel's
    processes use in all: no address-space limit, 192 MB of 256 used,
    and killed past 256 MB (the memory group's kill counted)."""
    from course_tools.classroom import cgroup

    kind, folders = cgroup.plan(f"course-kernel-m{os.getpid()}")
    if kind == "none":
        pytest.skip("no control group can be made here")
    assert cgroup.create(folders, memory_mb=256, pids=64, cpus=0) == []
    options = [f"--cgroup={f}" for f in folders] + ["--memory-mb=256"]
    try:
        fits = _launch(tmp_path, ["python", "-c", MEMORY.format(blocks=3)],
                       *options)
        lines = fits.stdout.split()
        assert lines[0] == str(resource.RLIM_INFINITY), fits
        assert lines[-1] == "192", fits
        over = _launch(tmp_path, ["python", "-c", MEMORY.format(blocks=8)],
                       *options)
        assert over.returncode != 0 and "512" not in over.stdout.split(), \
            over
        assert cgroup.events(folders)["oom_kill"] >= 1
    finally:
        cgroup.remove(folders)


@root_only
def test_a_killed_graders_empty_groups_are_swept():
    """A grader killed mid-run leaves its kernel's groups; the next box
    removes the empty groups of ended graders, and leaves a living
    grader's groups and any group with a process in it."""
    from course_tools.classroom import box, cgroup

    def ended_pid(start):
        pid = start
        while Path(f"/proc/{pid}").exists():
            pid += 7919
        return pid

    child = subprocess.Popen(["sleep", "60"])
    dead = ended_pid(child.pid + 1)
    uids = {"ended": dead, "alive": os.getpid(),
            "busy": ended_pid(dead + 1)}
    groups = {k: cgroup.plan(f"course-kernel-{box.UID_BASE + pid}")[1]
              for k, pid in uids.items()}
    try:
        if not groups["ended"]:
            pytest.skip("no control group can be made here")
        for folders in groups.values():
            cgroup.create(folders, memory_mb=64, pids=8, cpus=0)
        for folder in groups["busy"]:
            with open(os.path.join(folder, "cgroup.procs"), "w") as f:
                f.write(str(child.pid))
        removed = cgroup.sweep("course-kernel-", box._grader_gone,
                               older_s=0)
        # (and any other ended grader's empty groups on this machine)
        assert set(groups["ended"]) <= set(removed)
        assert all(os.path.isdir(f)
                   for f in groups["alive"] + groups["busy"])
    finally:
        child.kill()
        child.wait()
        for folders in groups.values():
            cgroup.remove(folders)


@root_only
def test_what_students_usually_do_works_in_a_kernel(tmp_path):
    """Threads, processes, the shell, files, signals, local sockets,
    asyncio, the usual formats, NumPy, SciPy, PyTorch's DataLoader with
    workers, Matplotlib and Pillow all work under the kernel's system
    call profile (``course_tools/classroom/usual_libraries.py``)."""
    from course_tools.classroom import usual_libraries

    source = Path(usual_libraries.__file__).read_text()
    result = _launch(tmp_path, ["python", "-c", source],
                     "--memory-mb=3072")
    assert "FAILED = []" in result.stdout, result.stdout + result.stderr


# One kernel holds locks on a file of the shared, read-only Python
# installation; a second kernel, graded at the same time, looks.
HOLD = """
import fcntl, os, struct, sys, time
handle = open(os.__file__, "rb")
fcntl.flock(handle, fcntl.LOCK_SH)
fcntl.lockf(handle, fcntl.LOCK_SH)
print("held", flush=True)
time.sleep(20)
"""
LOOK = """
import fcntl, os, struct
handle = open(os.__file__, "rb")
seen = {}
try:
    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    seen["flock"] = False
except BlockingIOError:
    seen["flock"] = True
query = struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 0, 0)
kind = struct.unpack("hhqqi", fcntl.fcntl(handle, fcntl.F_GETLK, query))[0]
seen["fcntl"] = kind != fcntl.F_UNLCK
print(sorted(k for k, v in seen.items() if v))
"""


@root_only
def test_what_one_kernel_can_observe_of_another(tmp_path):
    """What ``guarantees.md`` says one concurrent kernel can still see of
    another through the shared read-only installation, measured: the
    advisory locks it holds on a file both can open (``flock`` and
    ``fcntl`` locks need no write access), a channel between two
    cooperating kernels only; the grader takes no lock there."""
    argv = [sys.executable, "-I", "-m", "course_tools.classroom.sandbox",
            f"--read-only={sys.prefix}", f"--read-only={sys.base_prefix}",
            "--uid=%d", "--"]
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    from course_tools.classroom import box

    holder = subprocess.Popen(
        [a.replace("%d", str(box.UID_BASE + 11)) for a in argv]
        + ["python", "-c", HOLD], cwd=first, stdout=subprocess.PIPE,
        text=True)
    try:
        line = holder.stdout.readline()
        if line.startswith("not isolated"):
            pytest.skip(line)
        assert line.strip() == "held", line
        looked = _launch(second, ["python", "-c", LOOK],
                         f"--uid={box.UID_BASE + 12}")
        assert looked.stdout.strip() == "['fcntl', 'flock']", looked
    finally:
        holder.kill()
        holder.wait()


# A kernel's child calls each system call by number with bad arguments:
# refused by the filter, it fails with EPERM; let through, with what the
# machine's kernel says of the arguments.
BY_NUMBER = """
import ctypes, json, sys
libc = ctypes.CDLL(None, use_errno=True)
found = {}
for name, number in json.loads(sys.argv[1]).items():
    ctypes.set_errno(0)
    libc.syscall(number, -1, 0, 0, 0, 0, 0)
    found[name] = ctypes.get_errno()
print(json.dumps(found))
"""


@root_only
def test_a_kernel_gets_only_the_calls_kernels_were_recorded_making(
        tmp_path):
    """Calls Docker's profile allows but no kernel made when recorded
    (``scripts/record_syscalls.py``) fail with EPERM in a kernel; calls
    kernels made go through."""
    recorded = seccomp.recorded()
    if recorded is None:
        pytest.skip(f"no recording for {platform.machine()}")
    docker = {n for names, action, _ in
              seccomp.rules(allowed=None)[1]
              if action == seccomp.ALLOW for n in names}
    lib = seccomp._library()
    number = {n: lib.seccomp_syscall_resolve_name(n.encode())
              for n in docker}
    refused = sorted(n for n in docker - recorded
                     if n in ("mknodat", "splice", "tee", "memfd_create",
                              "getcpu", "mincore", "msgget", "semget"))
    allowed = ["getppid", "sched_getaffinity", "dup"]
    assert refused and set(allowed) <= recorded
    calls = {n: number[n] for n in refused + allowed}
    result = _launch(tmp_path, ["python", "-c", BY_NUMBER,
                                json.dumps(calls)])
    got = json.loads(result.stdout.strip().splitlines()[-1])
    assert {n: got[n] == errno.EPERM for n in calls} == {
        n: n in refused for n in calls}, got


def test_what_a_confined_process_called_is_read_from_the_traces(tmp_path):
    """``syscalls.confined_calls`` counts, in the process that loaded
    the filter, the calls after it, and every call of the processes and
    threads it started afterwards (their pids as the tracer sees them,
    across a PID namespace); nothing of the set-up before, nor of a
    process started before the filter."""
    from course_tools.classroom import syscalls

    traces = {
        10: ["unshare(CLONE_NEWPID) = 0",
             "clone(child_stack=NULL, flags=SIGCHLD) = 11",
             "mount(NULL, \"/\", NULL, MS_REC, NULL) = 0",
             "prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, {len=411, "
             "filter=0x55}) = 0",
             "openat(AT_FDCWD, \"x\", O_RDONLY) = 3",
             "vfork()                                 = 2 /* 12 in "
             "strace's PID NS */",
             "clone3({flags=CLONE_VM|CLONE_THREAD, ...}, 88) = -1 ENOSYS",
             "clone(child_stack=0x7f, flags=CLONE_VM|CLONE_THREAD) = 13",
             "+++ exited with 0 +++"],
        11: ["setsid() = 11", "pivot_root(\".\", \"old\") = 0"],
        12: ["execve(\"/usr/bin/true\", [...], 0x5 /* 3 vars */) = 0",
             "exit_group(0) = ?"],
        13: ["futex(0x7f, FUTEX_WAIT, 0, NULL) = 0",
             "--- SIGINT {si_signo=SIGINT} ---",
             "restart_syscall(<... resuming interrupted read ...>) = 0"],
    }
    for pid, lines in traces.items():
        (tmp_path / f"{syscalls.PREFIX}.{pid}").write_text(
            "\n".join(lines) + "\n")
    calls = syscalls.confined_calls(tmp_path)
    assert calls == {"openat": 1, "vfork": 1, "clone3": 1, "clone": 1,
                     "execve": 1, "exit_group": 1, "futex": 1,
                     "restart_syscall": 1}, calls
