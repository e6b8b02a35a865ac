"""The student's kernel, started through this launcher, as root::

    python -I -m course_tools.classroom.sandbox --uid UID --box DIR \\
        --memory-mb 3072 --cgroup DIR ... --read-only DIR ... \\
        -- python -m ipykernel_launcher -f CONNECTION_FILE

``-I`` (isolated mode): nothing is imported from the working folder,
which a student controls, and no ``PYTHON*`` variable is read. The
launcher reads what the kernel needs (its connection file, the files
named by ``KEEP_VARIABLES``), joins the kernel's control groups, then
creates new mount, PID, network, IPC and UTS namespaces. Its child is
process 1 of the new PID namespace: it builds a new root on a small
tmpfs (the system's ``/usr`` and a few files of ``/etc``, the
``--read-only`` folders, all read-only, with each ``--bind`` folder on
top of the one it replaces; the box's ``work/`` as its
working folder ``/home/student``, its ``tmp/`` as ``/tmp``, its ``ipc/``
as ``/ipc``; a fresh ``/proc``; a minimal ``/dev``), switches to it,
drops to ``--uid`` with no capabilities and no way to gain any, loads
the seccomp profile of :mod:`.seccomp` (Docker's default: no namespace,
mount, BPF, key or trace calls), and becomes the kernel, its standard
streams a pipe that the parent drains and caps (:mod:`.output`). When
it dies, every process of the namespace dies.
The parent waits for it and exits with its status. The network
namespace has no interface up: the kernel talks to the grader through
Unix sockets in ``/ipc`` (ZMQ ``ipc`` transport).

``--probe`` does all of this with no kernel and prints ``isolated``, or
``not isolated: WHY``. ``--no-isolation`` only sets the rlimits.
"""

import argparse
import json
import os
import platform
import resource
import shutil
import signal
import socket
import sys

from course_tools.classroom import box, cgroup, files, launch, output, seccomp
from course_tools.classroom.launch import KEEP_VARIABLES, Refused

ENV_PASSED = ("LANG", "LANGUAGE", "TZ", "MPLBACKEND")
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS",
                    "OPENBLAS_NUM_THREADS")
NAMESPACES = 0x00020000 | 0x20000000 | 0x40000000 | 0x08000000 | \
    0x04000000  # mount, PID, network, IPC, UTS
CLONE_NEWUSER = 0x10000000
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}  # system call numbers
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_CAPBSET_DROP = 1, 38, 24
# The kernel's keyrings outlive its processes and belong to its uid, a
# channel from one submission to the next: the key system calls fail
# with EPERM (seccomp.py). (audit arch, add_key, request_key, keyctl)
# per machine, for the probes.
KEY_CALLS = {"x86_64": (0xC000003E, 248, 249, 250),
             "aarch64": (0xC00000B7, 217, 218, 219)}
ETC = ("passwd", "group", "hosts", "nsswitch.conf", "localtime",
       "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "ssl", "alternatives",
       "fonts", "mime.types")
DEVICES = ("null", "zero", "full", "random", "urandom")
HOME, WORK = "/tmp/home", "/home/student"
READ_ONLY = box.MS_BIND | box.MS_REMOUNT | box.MS_RDONLY | box.MS_NOSUID \
    | box.MS_NODEV


def limit(*, memory_mb, file_mb=256, pids=0):
    """Per-process limits: address space, file size, no core dumps and,
    for a uid of its own, processes."""
    if memory_mb:
        size = int(memory_mb) * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (size, size))
    size = int(file_mb) * 2**20
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if pids:
        resource.setrlimit(resource.RLIMIT_NPROC, (pids, pids))
    for name in THREAD_VARIABLES:
        os.environ[name] = "1"


def _outermost(paths):
    """The existing paths not inside another of them."""
    paths = sorted({os.path.normpath(p) for p in paths if os.path.exists(p)})
    return [p for p in paths
            if not any(p.startswith(q.rstrip("/") + "/") for q in paths
                       if q != p)]


def _plan(args, command):
    """Everything read from the grader's side before the namespaces."""
    return launch.plan(args.uid or box.UID_BASE + os.getpid(), args.box,
                       command)


def _hold(plan, args):
    """Open what the new root binds (in the new mount namespace: a mount
    of another namespace cannot be bound), before ``/tmp`` is covered."""
    held = os.O_PATH | os.O_CLOEXEC
    plan["sources"] = {p: os.open(p, held)
                       for p in _outermost(args.read_only + ["/usr"])}
    plan["binds"] = []
    for pair in args.bind:
        source, _, target = pair.partition(":")
        if not target.startswith("/"):
            raise Refused(f"expected --bind SOURCE:/TARGET, got {pair}")
        plan["binds"].append((os.open(source, held), target))
    plan["etc"] = {n: os.open(f"/etc/{n}", held)
                   for n in ETC if os.path.exists(f"/etc/{n}")}
    plan["hide"] = [p for p in args.hide if os.path.exists(p) and any(
        p == s or p.startswith(s + "/") for s in plan["sources"])]
    if args.box:
        plan["box"] = os.open(args.box, held)
    else:
        plan["here"] = os.open(".", os.O_RDONLY | os.O_CLOEXEC)


def _bind(source, target, *, read_only=True):
    if os.path.isdir(source):
        os.makedirs(target, mode=0o755, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        open(target, "a").close()
    box.mount(source, target, None, box.MS_BIND)
    if read_only:
        box.mount(None, target, None, READ_ONLY)


def _root(plan, args):
    """Build the kernel's root on a new tmpfs and switch to it."""
    box.mount(None, "/", None, box.MS_REC | box.MS_PRIVATE)
    _hold(plan, args)
    new = "/tmp"  # only in this mount namespace; sources are held open
    box.mount("tmpfs", new, "tmpfs", box.MS_NOSUID | box.MS_NODEV,
              "size=1m,mode=0755")
    if "box" in plan:
        folder = f"/proc/self/fd/{plan['box']}"
    else:  # launched by hand: a box of our own, the working folder in it
        folder = os.path.join(new, "box")
        box.mount_tmpfs(folder, args.disk_mb)
        box.layout(folder, plan["uid"])
        files.copy_tree(plan["here"], f"{folder}/work",
                        owner=(plan["uid"],) * 2)
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        if os.path.islink(f"/{name}"):
            os.symlink(os.readlink(f"/{name}"), f"{new}/{name}")
        elif os.path.isdir(f"/{name}"):
            _bind(f"/{name}", f"{new}/{name}")
    # The box first: read-only folders under /tmp go on top of its /tmp.
    for name, target in (("work", WORK), ("tmp", "/tmp"),
                         ("shm", "/dev/shm"), ("ipc", "/ipc")):
        _bind(f"{folder}/{name}", new + target, read_only=False)
    for path, fd in plan["sources"].items():
        _bind(f"/proc/self/fd/{fd}", new + path)
    # What replaces a read-only folder (the grading kernel's course_lib,
    # without the assignment's answers) goes on top of it.
    for fd, target in plan["binds"]:
        _bind(f"/proc/self/fd/{fd}", new + target)
    for name, fd in plan["etc"].items():
        _bind(f"/proc/self/fd/{fd}", f"{new}/etc/{name}")
    for path in plan["hide"]:
        if os.path.isdir(new + path):
            box.mount("tmpfs", new + path, "tmpfs", box.MS_RDONLY |
                      box.MS_NOSUID | box.MS_NODEV | box.MS_NOEXEC,
                      "size=4k,mode=0555")
        else:
            box.mount("/dev/null", new + path, None, box.MS_BIND)
    os.makedirs(f"{new}/dev", mode=0o755, exist_ok=True)
    for name in DEVICES:
        _bind(f"/dev/{name}", f"{new}/dev/{name}", read_only=False)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "fd/0"),
                         ("stdout", "fd/1"), ("stderr", "fd/2")):
        os.symlink(target, f"{new}/dev/{name}")
    os.makedirs(f"{new}/proc", mode=0o555)
    box.mount("proc", f"{new}/proc", "proc",
              box.MS_NOSUID | box.MS_NODEV | box.MS_NOEXEC)
    if "box" not in plan:
        box.umount(folder)
    os.makedirs(f"{new}/old", mode=0o700)
    os.chdir(new)
    box.check(box.LIBC.syscall(PIVOT_ROOT[platform.machine()], b".",
                               b"old"), "pivot_root")
    os.chdir("/")
    box.umount("/old")
    os.rmdir("/old")
    if "box" not in plan:
        os.rmdir("/box")
    box.mount(None, "/", None, READ_ONLY)


def _keep(plan):
    """The connection file and the kept files, given to the kernel."""
    uid = plan["uid"]
    for name, (path, data) in plan["keep"].items():
        inside = f"/tmp/.course/{os.path.basename(path)}"
        os.makedirs(os.path.dirname(inside), mode=0o755, exist_ok=True)
        with open(inside, "wb") as handle:
            handle.write(data)
        os.chown(inside, uid, uid)
        os.chmod(inside, 0o600)
        os.environ[name] = inside
    if plan["connection"]:
        index, info = plan["connection"]
        path = "/ipc/connection.json"
        with open(path, "w") as handle:
            json.dump(info, handle)
        os.chown(path, uid, uid)
        os.chmod(path, 0o400)
        plan["command"][index] = path


def _drop(uid):
    """Become ``uid``, with no capability and no way to regain one."""
    libc = box.LIBC
    for cap in range(64):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    box.check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    try:
        seccomp.apply()
    except seccomp.Unavailable as error:
        raise Refused(str(error)) from None
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getuid() != uid or os.geteuid() != uid:
        raise Refused(f"expected to run as uid {uid}")


def _environment(uid):
    env = {name: os.environ[name] for name in ENV_PASSED + KEEP_VARIABLES
           if name in os.environ}
    env.update({name: "1" for name in THREAD_VARIABLES})
    python = os.path.dirname(sys.executable)
    env.update(PATH=f"{python}:/usr/local/bin:/usr/bin:/bin",
               HOME=HOME, USER="student", LOGNAME="student",
               TMPDIR="/tmp", SHELL="/bin/sh")
    return env


def child(plan, args, start=None, prepare=None):
    """Process 1 of the new PID namespace: build, drop, become the
    kernel (or, for ``--probe``, check and print). ``start(command,
    env)``, when given, becomes the kernel in this process (the zygote's
    way) instead of executing ``command``; ``prepare(command, env)`` runs
    just before the drop, as root."""
    _root(plan, args)
    socket.sethostname("sandbox")
    _keep(plan)
    os.makedirs(HOME, mode=0o700)
    os.chown(HOME, plan["uid"], plan["uid"])
    os.chdir(WORK)
    # with control groups, memory is the memory group's alone: what the
    # kernel's processes use, in all (RLIMIT_AS would count the address
    # space a forked kernel shares with its template)
    limit(memory_mb=0 if args.cgroup else args.memory_mb,
          file_mb=args.file_mb, pids=args.pids)
    env = _environment(plan["uid"])
    command = plan["command"]
    if prepare is not None:
        prepare(command, env)
    _drop(plan["uid"])
    if args.probe:
        _probe_inside()
        print("isolated", flush=True)
        os._exit(0)
    if start is not None:
        start(command, env)
    binary = shutil.which(command[0], path=env["PATH"]) or command[0]
    os.execve(binary, command, env)


def _probe_inside():
    """What a kernel must not be able to do, checked from inside."""
    if os.getpid() != 1 or os.getuid() == 0:
        raise Refused("expected process 1 of a PID namespace, not root")
    number = KEY_CALLS[platform.machine()][1]
    if box.LIBC.syscall(number, b"user", b"probe", b"x", 1, -4) != -1:
        raise Refused("the kernel can store keys in a keyring")
    if box.LIBC.unshare(CLONE_NEWUSER) == 0:
        raise Refused("the kernel can create a user namespace")
    for address in (("127.0.0.1", 22), ("192.0.2.1", 80)):
        with socket.socket() as probe:
            probe.settimeout(1)
            if probe.connect_ex(address) == 0:
                raise Refused(f"the network is reachable ({address[0]})")


def _parent(child, drain):
    """Drain process 1 of the namespace's output until it and every
    process of the namespace are gone; exit with its status."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # it reaches the kernel

    def stop(*_):
        os.kill(child, signal.SIGKILL)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    drain.until_end()
    drain.close()
    _, status = os.waitpid(child, 0)
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


def isolate(args, command, plan=None):
    """Namespaces, limits and a new root; return an exit status.
    ``plan``: what ``_plan`` read already, when it did."""
    plan = plan or _plan(args, command)
    seccomp.program()  # compiled here: the profile is not in the new root
    cgroup.join(args.cgroup)
    box.check(box.LIBC.unshare(NAMESPACES), "unshare")
    read, write = output.pipe()
    kernel = os.fork()
    if kernel == 0:
        try:
            output.take(read, write)
            child(plan, args)
        except BaseException as error:  # noqa: BLE001 - report, then die
            print(f"not isolated: {error}", flush=True)
            os._exit(70)
    os.close(write)
    return _parent(kernel, output.Drain(read))


def parse(argv):
    parser = argparse.ArgumentParser(prog="course_tools.classroom.sandbox")
    parser.add_argument("--uid", type=int, default=0,
                        help="the kernel's uid (default: one of its own)")
    parser.add_argument("--box", help="the kernel's box (default: a tmpfs "
                        "of its own with the working folder copied in)")
    parser.add_argument("--memory-mb", type=int, default=0)
    parser.add_argument("--file-mb", type=int, default=256)
    parser.add_argument("--disk-mb", type=int, default=512)
    parser.add_argument("--pids", type=int, default=512)
    parser.add_argument("--cgroup", action="append", default=[])
    parser.add_argument("--hide", action="append", default=[])
    parser.add_argument("--read-only", action="append", default=[])
    parser.add_argument("--bind", action="append", default=[],
                        help="SOURCE:TARGET, read-only, over a read-only "
                        "folder (the kernel's course_lib)")
    parser.add_argument("--zygote", help="the Unix socket of a zygote "
                        "(course_tools.classroom.zygote) that forks the "
                        "kernel from its warm template")
    parser.add_argument("--usage-file", help="where to append the "
                        "kernel's CPU seconds (with --zygote)")
    parser.add_argument("--no-isolation", action="store_true")
    parser.add_argument("--probe", action="store_true",
                        help="print what isolation is possible and exit")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else \
        args.command
    if not command and not args.probe:
        parser.error("expected the kernel's command after --")
    return args, command


def main(argv=None):
    args, command = parse(argv)
    box.LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if args.no_isolation:
        limit(memory_mb=args.memory_mb, file_mb=args.file_mb)
        if args.probe:
            print("not isolated: --no-isolation")
            return 0
        os.execv(shutil.which(command[0]) or command[0], command)
    try:
        if args.zygote and not args.probe:
            plan = _plan(args, command)
            try:
                return launch.request(args.zygote, list(
                    sys.argv[1:] if argv is None else argv), plan,
                    usage_file=args.usage_file)
            except launch.Unreachable as error:  # slower, as safe
                print(f"the zygote is unreachable ({error}): the kernel "
                      "starts anew", file=sys.stderr, flush=True)
                return isolate(args, command, plan)
        return isolate(args, command)
    except (Refused, OSError) as error:
        print(f"not isolated: {error}", flush=True)
        return 70


if __name__ == "__main__":
    sys.exit(main())
