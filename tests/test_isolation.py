"""Student kernels against a determined student (``make grade``).

One batch grades, beside an honest right and an honest wrong answer,
one attacker per kind of attack a security review found. Each attacker
answers right, so that whatever its attack gains or costs shows in its
score; each must get exactly 3 points, with reasons that name what
happened, and the honest students their usual grades. Afterwards the
course (but for what the grader writes), the repository's package and
solutions are as they were, and no process of any kernel is left.
"""

import hashlib
import json
import os
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from course_tools.classroom import box, cgroup, files, grade
from course_tools.classroom.grade import Options, grade_class, summary
from tests.nbgrading import ROOT
from tests.test_classroom import (
    ASSIGNMENT,
    NAME,
    RIGHT,
    WRONG,
    _answer,
    _options,
    _scores,
    _tiny_source,
)

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="kernels get users of their own as root")

DISK_MB = 64
TIMEOUT = 40  # seconds per cell: four children fill 4 GB, slowly
# What the grader writes into the course; a kernel may change nothing.
GRADER_WRITES = {"gradebook.db", "gradebook.db-journal", "grades.csv",
                 "grades-wide.csv",
                 "grading_state.json", ".grading.lock", "autograded",
                 ".grading-templates",
                 "feedback"}
STDLIB = ("argparse", "json", "ctypes", "shutil", "resource")
# A module named like the standard library's, next to the notebook:
# whoever imports it (as root, formerly the launcher) marks the course
# and overwrites the gradebook, then hands over to the real module.
IMPOSTOR = """import os, sys
for path, text in (("{course}/PWNED-{name}", "x"),
                   ("{course}/gradebook.db", "pwned"),
                   ("{course}/grades.csv", "pwned")):
    try:
        with open(path, "w") as handle:
            handle.write(text)
    except OSError:
        pass
here = os.path.dirname(os.path.abspath(__file__))
del sys.modules[__name__]
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
import importlib
sys.modules[__name__] = importlib.import_module(__name__)
"""
# Reads what it must not, and tries the network: any success costs the
# student its points and is written down for the test.
SNOOP = RIGHT + """
import glob, json, os, socket, time
leaks = []
for pattern in {patterns!r}:
    for path in glob.glob(pattern, recursive=True):
        try:
            with open(path, "rb") as handle:
                handle.read(1)
            leaks.append(path)
        except OSError:
            pass
visible = []
for pid in os.listdir("/proc"):
    try:
        with open(f"/proc/{{pid}}/cmdline", "rb") as handle:
            visible.append(handle.read().decode(errors="replace"))
    except OSError:
        pass
network = []
for address in [("127.0.0.1", {port}), ("1.1.1.1", 53), ("8.8.8.8", 53)]:
    probe = socket.socket()
    probe.settimeout(5)
    start = time.monotonic()
    try:
        probe.connect(address)
        network.append([address[0], "connected", 0])
    except OSError as error:
        network.append([address[0], str(error),
                        time.monotonic() - start])
    probe.close()
with open("report.json", "w") as handle:
    json.dump({{"leaks": leaks, "network": network,
               "processes": visible}}, handle)
if leaks or any(n[1] == "connected" for n in network):
    softmax = None
"""
# Stops and kills its parents and every process it sees, then leaves a
# double-forked daemon in a session of its own (and a sleeping setsid
# child) that hunts for later kernels' connection files to rewrite
# their softmax, and signals every process it finds.
DAEMON = """import glob, os, signal, sys, time
own = int(sys.argv[1])
if os.fork():
    os._exit(0)
os.setsid()
if os.fork():
    os._exit(0)


def attack(path):
    try:
        from jupyter_client import BlockingKernelClient
        client = BlockingKernelClient(connection_file=path)
        client.load_connection_file()
        client.start_channels()
        client.execute("def softmax(x, dim=-1):\\n    return x * 0\\n")
        client.stop_channels()
    except Exception:
        pass


end = time.time() + 600
while time.time() < end:
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in (own, os.getpid(), 1):
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as handle:
                argv = handle.read().split(b"\\0")
        except OSError:
            continue
        if b"-f" in argv[:-1]:
            attack(argv[argv.index(b"-f") + 1].decode())
        try:
            os.kill(int(name), signal.SIGSTOP)
        except OSError:
            pass
    for path in glob.glob("/tmp/**/*.json", recursive=True):
        attack(path)
    time.sleep(0.5)
"""
PROCESSES = RIGHT + """
import os, signal, subprocess, sys
me = os.getpid()
chain, parent = [], os.getppid()
while parent > 1 and len(chain) < 20:
    chain.append(parent)
    try:
        with open(f"/proc/{parent}/stat") as handle:
            parent = int(handle.read().rsplit(")", 1)[1].split()[1])
    except OSError:
        break
every = [int(n) for n in os.listdir("/proc") if n.isdigit()]
for sig in (signal.SIGSTOP, signal.SIGKILL):
    for pid in chain + every:
        if pid != me:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
with open("daemon.py", "w") as handle:
    handle.write(DAEMON)
subprocess.Popen([sys.executable, "daemon.py", str(me)],
                 start_new_session=True)
subprocess.Popen(["sleep", "600"], start_new_session=True)
"""
# Four children of 1 GB each (a 3 GB cap for the whole submission), then
# floods of display updates and of widget comms.
MEMORY_AND_FLOODS = RIGHT + """
import os, time
children = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        try:
            blocks = [b"x" * 2**27 for _ in range(8)]
            time.sleep(2)
        finally:
            os._exit(0)
    children.append(pid)
for pid in children:
    os.waitpid(pid, 0)
from IPython.display import display
handle = display("start", display_id=True)
for _ in range(700):
    handle.update("u" * 10_000)
from ipykernel.comm import Comm
for _ in range(700):
    Comm(target_name="jupyter.widget",
         data={"state": {"v": "c" * 10_000}, "buffer_paths": []})
"""
# Links out of the working folder, 1200 nested folders, then more files
# than the submission may write.
LINKS_AND_DISK = RIGHT + """
import os
for name, target in {links!r}:
    os.symlink(target, name)
here = os.getcwd()
for _ in range(1200):
    os.mkdir("n")
    os.chdir("n")
os.chdir(here)
chunk = bytes(2**20)
for folder in (".", "/tmp", "/dev/shm"):
    try:
        for i in range(200):
            with open(f"{{folder}}/fill{{i}}.bin", "wb") as handle:
                handle.write(chunk)
    except OSError:
        pass
"""
# student -> (test_softmax score, reasons that must appear); the attacks
# are grouped in two submissions that do not get in each other's way.
# a_processes_files answers right and keeps its points only if nothing
# it snoops for is readable or reachable; the daemon it leaves behind
# attacks the kernels graded after it.
EXPECTED = {
    "a_processes_files": (3, []),
    "b_resources": (3, ["symbolic link skipped",
                        "folders nested deeper than 8 levels skipped",
                        f"filled its {DISK_MB} MB of disk",
                        "ran out of memory",
                        "printed over 5 MB of output: the rest was "
                        "dropped"]),
    "right": (3, []),
    "wrong": (0, []),
}


def _digest(*folders, skip=()):
    """Names, modes and bytes of every file under ``folders``."""
    found = {}
    for folder in folders:
        for path in sorted(Path(folder).rglob("*")):
            relative = path.relative_to(folder)
            if relative.parts[0] in skip or "__pycache__" in path.parts:
                continue
            info = path.lstat()
            data = path.read_bytes() if stat.S_ISREG(info.st_mode) else b""
            found[str(path)] = (stat.S_IMODE(info.st_mode),
                                hashlib.sha256(data).hexdigest())
    return found


def _alive(pid):
    return Path(f"/proc/{pid}").exists()


def _kernel_processes():
    """Processes of a kernel uid (``box.UID_BASE`` + the pid of the grading
    process that started it) whose grading process is gone: what a run
    left behind (another run's kernels, like the test batch graded in the
    background, belong to grading processes that still run)."""
    found = []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/status") as handle:
                uid = next(int(line.split()[1]) for line in handle
                           if line.startswith("Uid:"))
        except (OSError, StopIteration, ValueError):
            continue
        if uid >= box.UID_BASE and not _alive(uid - box.UID_BASE):
            found.append((int(name), uid))
    return found


def _write(course, student, source, extra=None):
    released = nbformat.read(course / "chapters" / ASSIGNMENT
                             / f"{NAME}.ipynb", 4)
    folder = course / "submitted" / student / ASSIGNMENT
    folder.mkdir(parents=True)
    nbformat.write(_answer(released, source), folder / f"{NAME}.ipynb")
    for name, text in (extra or {}).items():
        (folder / name).write_text(text)


def _make_course(course, port):
    from course_tools import release

    source = course / "solutions" / ASSIGNMENT
    source.mkdir(parents=True)
    nbformat.write(_tiny_source(), source / f"{NAME}.ipynb")
    (source / "secret.txt").write_text("the instructor's notes")
    os.chmod(source / "secret.txt", 0o600)
    (course / "nbgrader_config.py").write_text(
        (ROOT / "nbgrader_config.py").read_text())
    for folder in ("_build_solutions", "course_tools", ".git"):
        (course / folder).mkdir()
        (course / folder / "hidden.txt").write_text("hidden cases")
    release.generate(ASSIGNMENT, root=course,
                     destination=course / "chapters" / ASSIGNMENT)
    patterns = [f"{course}/{p}" for p in (
        "_build_solutions/**", "solutions/**", "course_tools/**",
        ".git/**", "gradebook.db", "grades.csv", "submitted/**",
        "nbgrader_config.py")]
    patterns += [f"{ROOT}/{p}" for p in (
        "solutions/**", ".git/*", "course_tools/**", "_build_solutions/**",
        "nbgrader_config.py", "tests/*.py")]
    patterns += ["/tmp/grade-class-*/**", "/root/.bashrc", "/etc/shadow",
                 "/proc/1/root/etc/shadow", "/sys/fs/cgroup/**/tasks"]
    links = [("gradebook", f"{course}/gradebook.db"),
             ("solutions", f"{course}/solutions"),
             ("others", f"{course}/submitted"), ("root", "/"),
             ("repository", str(ROOT))]
    _write(course, "right", RIGHT)
    _write(course, "wrong", WRONG)
    processes = PROCESSES.replace("handle.write(DAEMON)",
                                  f"handle.write({DAEMON!r})")
    snoop = SNOOP.format(patterns=patterns, port=port)
    _write(course, "a_processes_files", snoop + processes[len(RIGHT):],
           {f"{n}.py": IMPOSTOR.format(course=course, name=n)
            for n in STDLIB})
    resources = LINKS_AND_DISK.format(links=links)
    _write(course, "b_resources",
           resources + MEMORY_AND_FLOODS[len(RIGHT):])


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    course = tmp_path_factory.mktemp("isolation") / "course"
    course.mkdir()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    try:
        _make_course(course, listener.getsockname()[1])
        before = _digest(course, skip=GRADER_WRITES)
        package = _digest(ROOT / "course_lib", ROOT / "solutions")
        start = time.monotonic()
        outcomes = grade_class(Options(root=course, jobs=2, timeout=TIMEOUT,
                                       disk_mb=DISK_MB, progress=False))
        seconds = time.monotonic() - start
    finally:
        listener.close()
    print(summary(outcomes), f"\n{seconds:.0f} s")
    return {"course": course, "before": before, "package": package,
            "outcomes": {o.student: o for o in outcomes},
            "left": _kernel_processes()}


@pytest.mark.e2e
@pytest.mark.alone
def test_every_attacker_gets_what_its_answer_deserves(attacked):
    course, outcomes = attacked["course"], attacked["outcomes"]
    assert sorted(outcomes) == sorted(EXPECTED)
    scores = _scores(f"sqlite:///{course / 'gradebook.db'}")
    for student, (score, reasons) in EXPECTED.items():
        outcome = outcomes[student]
        text = "; ".join(outcome.reasons)
        assert outcome.status == "graded", (student, text)
        assert scores[student]["test_softmax"] == score, (student, text)
        for reason in reasons:
            assert reason in text, (student, reason, text)
        if student in ("right", "wrong", "a_processes_files"):
            assert not outcome.reasons, (student, text)


@pytest.mark.e2e
@pytest.mark.alone
def test_nothing_outside_the_kernels_box_changed(attacked):
    course = attacked["course"]
    assert _digest(course, skip=GRADER_WRITES) == attacked["before"]
    assert _digest(ROOT / "course_lib", ROOT / "solutions") == \
        attacked["package"]
    assert not list(course.glob("PWNED-*"))
    mode = (course / "gradebook.db").stat().st_mode
    assert mode & stat.S_IWUSR, oct(mode)  # not chmod-ed through a link
    rows = (course / "grades.csv").read_text().splitlines()
    assert rows[0].startswith("assignment,") and len(rows) == 5


@pytest.mark.e2e
@pytest.mark.alone
def test_no_process_of_any_kernel_is_left(attacked):
    assert attacked["left"] == []
    mounts = Path("/proc/self/mountinfo").read_text()
    assert "/boxes/" not in mounts
    for folder in cgroup.plan("course-kernel-none")[1]:
        left = [g for g in Path(folder).parent.glob("course-kernel-*")
                if not g.name.removeprefix("course-kernel-").isdigit()
                or not _alive(int(g.name.removeprefix("course-kernel-"))
                              - box.UID_BASE)]
        assert not left, left


@pytest.mark.e2e
@pytest.mark.alone
def test_kernels_see_nothing_and_reach_no_network(attacked):
    graded = attacked["course"] / "autograded" / "a_processes_files" / \
        ASSIGNMENT
    report = json.loads((graded / "report.json").read_text())
    assert report["leaks"] == []
    assert report["processes"] and not [
        p for p in report["processes"] if "ipykernel" not in p], report
    for address, error, seconds in report["network"]:
        assert error != "connected" and seconds < 1, (address, error)


@pytest.mark.e2e
@pytest.mark.alone
def test_links_and_deep_folders_stay_in_the_box(attacked):
    graded = attacked["course"] / "autograded" / "b_resources" / ASSIGNMENT
    found = list(graded.rglob("*"))
    assert not [p for p in found if p.is_symlink()]
    assert max(len(p.relative_to(graded).parts) for p in found) <= 9
    size = sum(p.stat().st_size for p in found if p.is_file())
    assert size <= box.COPY_BACK["max_bytes"] + 2**20


@pytest.mark.e2e
def test_the_launcher_imports_nothing_from_the_working_folder(tmp_path):
    """Standard-library names next to the notebook: the launcher (root)
    runs in isolated mode, so none of them is imported; the kernel's
    copy of the folder still has them."""
    for name in STDLIB + ("course_lib",):
        (tmp_path / f"{name}.py").write_text(
            f"open({str(tmp_path / ('PWNED-' + name))!r}, 'w').close()\n")
    result = _launch(tmp_path, ["/bin/sh", "-c", "ls; id -u"])
    assert not list(tmp_path.glob("PWNED-*")), result
    names, uid = result.stdout.split()[:-1], int(result.stdout.split()[-1])
    assert "argparse.py" in names and uid >= box.UID_BASE, result


@pytest.mark.e2e
def test_the_cases_file_reaches_the_kernel(tmp_path, monkeypatch):
    cases = tmp_path / "cases.json"
    cases.write_text('{"hidden": [1, 2, 3]}')
    monkeypatch.setenv("COURSE_GRADING_CASES", str(cases))
    result = _launch(tmp_path, ["/bin/sh", "-c",
                                'cat "$COURSE_GRADING_CASES"'])
    assert result.stdout == '{"hidden": [1, 2, 3]}', result


@pytest.mark.e2e
@pytest.mark.parametrize("lean", [False, True], ids=["sandbox", "launch"])
def test_a_launcher_whose_zygote_is_gone_starts_the_kernel_anew(
        tmp_path, lean):
    """No zygote at the socket (it died): the launcher (the sandbox's, or
    the lean one the kernelspecs name) isolates a new process itself, as
    before zygotes, with the same cases file."""
    from course_tools.classroom import launch

    cases = tmp_path / "cases.json"
    cases.write_text('{"hidden": [4]}')
    work = tmp_path / "work"
    work.mkdir()
    env = dict(os.environ, COURSE_GRADING_CASES=str(cases))
    uid = box.UID_BASE + os.getpid()
    options = [f"--read-only={sys.prefix}", f"--read-only={sys.base_prefix}",
               f"--zygote={tmp_path / 'gone.sock'}", "--", "/bin/sh", "-c",
               'cat "$COURSE_GRADING_CASES"; id -u']
    argv = launch.command_line(ROOT) if lean else [
        sys.executable, "-I", "-m", "course_tools.classroom.sandbox"]
    argv.append(f"--uid={uid}")
    probe = _launch(work, ["true"])  # skips where nothing is isolated
    assert probe.returncode == 0, probe
    result = subprocess.run(argv + options, cwd=work, capture_output=True,
                            text=True, timeout=60, env=env)
    assert "the zygote is unreachable" in result.stderr, result
    found, seen = result.stdout.rsplit("}", 1)
    assert found + "}" == '{"hidden": [4]}', result
    assert int(seen) == uid, result
    assert not cases.exists()  # read once, as the sandbox reads it


def test_the_lean_launcher_imports_the_standard_library_first(tmp_path):
    """A module named like one of the standard library's beside
    ``course_tools`` (the launcher runs as root) is never imported."""
    from course_tools.classroom import launch

    (tmp_path / "course_tools").symlink_to(ROOT / "course_tools")
    marker = tmp_path / "shadowed"
    for name in ("json", "socket", "struct", "base64", "argparse"):
        (tmp_path / f"{name}.py").write_text(
            f"open({str(marker)!r}, 'a').write({name!r})\n")
    result = subprocess.run(launch.command_line(tmp_path) + ["--probe"],
                            cwd=tmp_path, capture_output=True, text=True,
                            timeout=60)
    assert "isolated" in result.stdout, result
    assert not marker.exists(), marker.read_text()


def test_the_lean_launcher_leaves_anything_else_to_the_sandbox(
        monkeypatch):
    """Only ``--name=value`` options it knows, with a zygote and a uid of
    the box's, take the lean path; a flag (``--probe``,
    ``--no-isolation``), an unknown option, no uid or uid 0 go to the
    sandbox's ``main`` unchanged."""
    from course_tools.classroom import launch, sandbox

    handed = []
    monkeypatch.setattr(sandbox, "main", lambda argv: handed.append(argv)
                        or 7)
    for options in (["--probe"], ["--no-isolation"], ["--zygote=z"],
                    ["--zygote=z", "--uid=0"], ["--zygote=z", "--uid=x"],
                    ["--zygote=z", "--uid=5", "--other=1"],
                    ["--zygote", "z", "--uid=5"]):
        argv = [*options, "--", "true"]
        assert launch.main(argv) == 7
        assert handed[-1] == argv
    assert launch._options(["--zygote=z", "--uid=5", "--cgroup=a",
                            "--cgroup=b", "--", "x", "--y=1"]) == (
        {"zygote": ["z"], "uid": ["5"], "cgroup": ["a", "b"]},
        ["x", "--y=1"])


# A key stored in the kernel's user keyring, then looked for by a later
# kernel of the same uid: the keyrings outlive processes.
KEYS = """import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
if sys.argv[1] == "write":
    n = libc.syscall({add_key}, b"user", b"course-secret", b"answer", 6,
                     ctypes.c_int(-4))
else:
    n = libc.syscall({keyctl}, 10, ctypes.c_int(-4), b"user",
                     b"course-secret", 0)
print(n, os.strerror(ctypes.get_errno()) if n < 0 else "found")
"""


@pytest.mark.e2e
def test_no_keyring_carries_anything_to_the_next_kernel(tmp_path):
    import platform

    from course_tools.classroom import sandbox

    _, add_key, _, keyctl = sandbox.KEY_CALLS[platform.machine()]
    script = KEYS.format(add_key=add_key, keyctl=keyctl)
    uid = f"--uid={box.UID_BASE + 7}"
    writer = _launch(tmp_path, ["python", "-c", script, "write"], uid)
    reader = _launch(tmp_path, ["python", "-c", script, "read"], uid)
    assert writer.stdout.startswith("-1 Operation not permitted"), writer
    assert "found" not in reader.stdout and reader.stdout.startswith(
        "-1"), reader


# Each kernel leaves what it can where the next kernel forked from the
# same zygote could look (a library's attributes, loaded modules, the
# environment, files, shared memory) and reports what it found of the
# other's, with its first random numbers.
LEAVE_AND_LOOK = RIGHT + """
import gc as _gc, json as _json, os as _os, random as _random, sys as _sys
import numpy as _numpy
found = [what for what, there in (
    ("a torch attribute", hasattr(torch, "course_left")),
    ("a numpy attribute", hasattr(_numpy, "course_left")),
    ("a module", "course_left" in _sys.modules),
    ("a variable", "COURSE_LEFT" in _os.environ),
    ("a file in /tmp", _os.path.exists("/tmp/course_left")),
    ("shared memory", _os.path.exists("/dev/shm/course_left")))
    if there]
torch.course_left = _numpy.course_left = "left"
_sys.modules["course_left"] = _sys
_os.environ["COURSE_LEFT"] = "left"
for _path in ("/tmp/course_left", "/dev/shm/course_left"):
    with open(_path, "w") as _handle:
        _handle.write("left")
with open("report.json", "w") as _handle:
    _json.dump({"found": found, "zygote": _sys.flags.isolated == 1,
                "cmdline": open("/proc/self/cmdline").read(),
                "environ": open("/proc/self/environ").read(),
                "random": [_random.random(), _numpy.random.rand()],
                "frozen": _gc.get_freeze_count()},
               _handle)
"""


@pytest.mark.e2e
def test_a_kernel_forked_from_the_zygote_holds_nothing_of_the_last(
        tmp_path):
    """Two submissions graded one after the other by one grading
    process: both kernels are forked from its zygote, and neither finds
    anything the other left, in memory or in files."""
    from course_tools import release

    course = tmp_path / "course"
    source = course / "solutions" / ASSIGNMENT
    source.mkdir(parents=True)
    nbformat.write(_tiny_source(), source / f"{NAME}.ipynb")
    (course / "nbgrader_config.py").write_text(
        (ROOT / "nbgrader_config.py").read_text())
    release.generate(ASSIGNMENT, root=course,
                     destination=course / "chapters" / ASSIGNMENT)
    for student in ("first", "second"):
        _write(course, student, LEAVE_AND_LOOK)
    outcomes = grade_class(Options(root=course, jobs=1, timeout=TIMEOUT,
                                   progress=False))
    assert [o.score for o in outcomes] == [3, 3], summary(outcomes)
    reports = [json.loads((course / "autograded" / student / ASSIGNMENT
                           / "report.json").read_text())
               for student in ("first", "second")]
    for report in reports:
        assert report["zygote"] and report["found"] == [], report
        assert report["cmdline"].split("\0")[1:3] == [
            "-m", "ipykernel_launcher"], report
        assert "COURSE_CASES_DIR" not in report["environ"], report
        # the template's objects (PyTorch, IPython) are frozen: no
        # collection in the kernel walks them
        assert report["frozen"] > 100_000, report
    assert reports[0]["random"][0] != reports[1]["random"][0]
    assert reports[0]["random"][1] != reports[1]["random"][1]


def _launch(folder, command, *options):
    argv = [sys.executable, "-I", "-m", "course_tools.classroom.sandbox",
            f"--read-only={sys.prefix}", f"--read-only={sys.base_prefix}",
            *options, "--"] + command
    result = subprocess.run(argv, cwd=folder, capture_output=True,
                            text=True, timeout=60)
    if result.stdout.startswith("not isolated"):
        pytest.skip(result.stdout)
    return result


@pytest.mark.e2e
def test_grading_refuses_where_kernels_cannot_be_isolated(tmp_path,
                                                          monkeypatch):
    course = tmp_path / "course"
    course.mkdir()
    (course / "nbgrader_config.py").write_text(
        (ROOT / "nbgrader_config.py").read_text())
    source = course / "solutions" / ASSIGNMENT
    source.mkdir(parents=True)
    nbformat.write(_tiny_source(), source / f"{NAME}.ipynb")
    folder = course / "submitted" / "right" / ASSIGNMENT
    folder.mkdir(parents=True)
    nbformat.write(_tiny_source(), folder / f"{NAME}.ipynb")
    monkeypatch.setattr(grade, "probe", lambda settings, scratch: (
        "not isolated: no PID namespace (a test)", []))
    with pytest.raises(RuntimeError, match="--no-isolation"):
        grade_class(_options(course, jobs=1))
    assert not (course / "autograded").exists()


def test_copies_skip_links_and_stop_at_their_bounds(tmp_path):
    source, target = tmp_path / "source", tmp_path / "target"
    deep = source / "/".join(["d"] * 12)
    deep.mkdir(parents=True)
    (source / "a.txt").write_text("a")
    (source / "d" / "b.txt").write_text("b")
    (deep / "c.txt").write_text("c")
    (source / "out").symlink_to("/")
    (source / "pwd").symlink_to("/etc/passwd")
    os.mkfifo(source / "pipe")
    for k in range(5):
        (source / f"many{k}.txt").write_text("x" * 100)
    # Seven entries: a.txt, d/, d/b.txt, d/d/, d/d/d/, d/d/d/d/, many0.txt
    reasons = files.copy_tree(source, target, max_depth=4, max_files=7)
    copied = sorted(str(p.relative_to(target)) for p in target.rglob("*")
                    if p.is_file())
    assert copied == ["a.txt", "d/b.txt", "many0.txt"]
    assert not [p for p in target.rglob("*") if p.is_symlink()]
    text = "; ".join(reasons)
    for reason in ("symbolic link skipped: out, pwd",
                   "folders nested deeper than 4 levels skipped: d/d/d/d/d",
                   "special file skipped: pipe",
                   "more than 7 entries: skipped: many1.txt, many2.txt, "
                   "many3.txt (and 1 more)"):
        assert reason in text, text
    reasons = files.copy_tree(source, tmp_path / "again", max_bytes=150)
    assert "files past 150 bytes in all skipped: many1.txt" in \
        "; ".join(reasons)


def test_every_kind_of_entry_counts_against_the_cap(tmp_path):
    """40,000 empty folders once filled autograded/: folders count."""
    source = tmp_path / "source"
    for k in range(3000):
        (source / f"f{k:04d}" / "inner").mkdir(parents=True)
    reasons = files.copy_tree(source, tmp_path / "target", max_files=100)
    made = list((tmp_path / "target").rglob("*"))
    assert len(made) <= 100, len(made)
    assert "more than 100 entries: skipped" in "; ".join(reasons)
