"""A warm template of the students' kernels: a zygote, as Android starts
its apps.

Starting a kernel used to mean starting a Python that imports torch,
IPython and ipykernel: seconds of CPU for every submission, when the
exercise cells of a chapter need a fraction of one. The grading process
(:mod:`.worker`) now imports those libraries once (``PRELOAD``), before it
has read any submission, case or answer, and forks the zygote: a process
that holds nothing but those libraries and forks one kernel per request.

Each request comes from the kernel's launcher (:mod:`.launch`, with
``--zygote PATH ... -- python -m ipykernel_launcher -f FILE``, the
command nbgrader starts), which reads
what the kernel needs on the grader's side (its connection file, its
cases file: :func:`course_tools.classroom.launch.plan`) and sends it
over the zygote's Unix socket with its standard streams. For each
connection the zygote forks a *keeper*, which reads the request (the
zygote reads none: no kernel's cases or keys are ever in the template),
joins the kernel's control groups, creates the kernel's namespaces and
forks the kernel, its standard streams a pipe the keeper drains and caps
(:mod:`.output`), never the grader's log: process 1
of the new PID namespace, which builds its new root, drops to the box's
uid exactly as the sandbox always did, then closes every file descriptor
it inherited, forgets the grader's modules, reseeds its random number
generators and runs ipykernel in process. Nothing of a kernel returns to
the zygote: each kernel is a copy of the template, never of another
kernel, so no file and no memory written by one submission's kernel can
be read by the next one's.

The keeper relays the launcher's signals to the kernel (an interrupt at
a cell's time limit), kills the kernel when the launcher dies (the
kernel manager killed it), and reports the kernel's exit status and CPU
time, which the launcher exits with and writes to ``--usage-file``.

The zygote dies with its grading process (parent-death signal), its
keepers with it, and each kernel with its keeper.
"""

import base64
import gc
import json
import os
import random
import select
import signal
import socket
import sys
import types

from course_tools.classroom import box, cgroup, output, sandbox, seccomp
from course_tools.classroom.launch import HEADER

# What a kernel imports on its own (ipykernel, its debugger) and what the
# chapters import (chapter 1's convex hulls, chapter 5's FLOP counter),
# imported once. Nothing of course_lib: the kernel's course_lib is the
# assignment's, without its answers (strip.py), bound over the package
# in the kernel's new root.
PRELOAD = ("numpy", "torch", "torch.nn.functional",
           "torch.utils.flop_counter", "scipy.spatial", "matplotlib",
           "matplotlib.pyplot", "matplotlib_inline.backend_inline",
           "regex",  # course_lib.bpe (chapter 11)
           "IPython", "ipykernel.kernelapp", "ipykernel.ipkernel",
           "ipykernel.zmqshell", "ipykernel.debugger",
           # what ipykernel imports as it starts (its shell's debugger,
           # history, completion, extensions)
           "IPython.core.completerlib", "IPython.core.debugger",
           "IPython.core.oinspect", "IPython.extensions.storemagic",
           "IPython.utils.wildcard", "faulthandler", "pdb", "sqlite3",
           "tornado.platform.asyncio")
INLINE = "module://matplotlib_inline.backend_inline"
MAX_REQUEST = 2**28  # bytes of one request (a kernel's cases file)
PR_SET_PDEATHSIG, PR_SET_DUMPABLE = 1, 4


def prepare_environment():
    """The environment the libraries are imported under: one thread per
    kernel (read when torch loads its thread pool) and the inline
    plotting backend ipykernel would choose."""
    for name in sandbox.THREAD_VARIABLES:
        os.environ[name] = "1"
    os.environ.setdefault("MPLBACKEND", INLINE)


def preload():
    """Import ``PRELOAD``; call before anything secret is read."""
    import importlib

    prepare_environment()
    for name in PRELOAD:
        importlib.import_module(name)


def start(path, *, log_fd=2):
    """Fork the zygote, listening on the Unix socket ``path``; return
    its pid. Call from a process with one thread, before it has read
    anything a kernel must not see (the zygote is its copy)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if os.path.exists(path):
        os.unlink(path)
    listener.bind(path)
    os.chmod(path, 0o600)
    listener.listen(16)
    pid = os.fork()
    if pid:
        listener.close()
        return pid
    try:
        box.LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        keep = {0, 1, 2, listener.fileno()}
        for fd in _open_fds():
            if fd not in keep:
                _close(fd)
        _scrub_image()
        seccomp.program()  # compiled once, loaded by each kernel
        # What the template holds is kept for good: no collection in a
        # kernel walks (and so copies) its hundreds of thousands of
        # objects again.
        gc.collect()
        gc.freeze()
        _serve(listener)
    finally:
        os._exit(0)


def _open_fds():
    return sorted(int(name) for name in os.listdir("/proc/self/fd"))


def _close(fd):
    try:
        os.close(fd)
    except OSError:
        pass


def _serve(listener):
    """Fork a keeper per connection. The zygote reads nothing of a
    request: the keeper does, so no kernel's request (its cases, its
    connection's key) is ever in the template that later kernels copy."""
    signal.signal(signal.SIGTERM, _end)
    while True:
        _reap()
        try:
            conn, _ = listener.accept()
        except InterruptedError:
            continue
        if os.fork() == 0:
            listener.close()
            try:
                _keeper(conn)
            finally:
                os._exit(70)
        conn.close()


def _end(*_):
    """Stop at the grading process's request, once the keepers that
    are ending have been waited for (so their CPU time is counted)."""
    import time

    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            time.sleep(0.01)
    os._exit(0)


def _reap():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _receive(conn):
    head, fds, _, _ = socket.recv_fds(conn, HEADER.size, 3)
    if len(head) != HEADER.size or len(fds) != 3:
        raise ValueError("expected a length and three descriptors")
    (size,) = HEADER.unpack(head)
    if size > MAX_REQUEST:
        raise ValueError(f"a request of {size} bytes")
    data = bytearray()
    while len(data) < size:
        chunk = conn.recv(min(2**20, size - len(data)))
        if not chunk:
            raise ValueError("the request ended early")
        data += chunk
    return json.loads(data), fds


# ------------------------------------------------------------ the keeper


def _keeper(conn):
    """Read the launcher's request, create the kernel's namespaces, fork
    the kernel, drain its output, relay signals, report its end."""
    os.setsid()
    box.LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the zygote's
    try:
        request, fds = _receive(conn)
    except (OSError, ValueError) as error:
        print(f"zygote: a bad request ({error})", file=sys.stderr)
        return
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        _close(fd)
    args, command = sandbox.parse(request["argv"])
    plan = decode_plan(request["plan"])
    try:
        cgroup.join(args.cgroup)
        box.check(box.LIBC.unshare(sandbox.NAMESPACES), "unshare")
        read, write = output.pipe()
        kernel = os.fork()
    except OSError as error:
        print(f"not isolated: {error}", flush=True)
        _report(conn, 70, 0.0)
        return
    if kernel == 0:
        try:
            output.take(read, write)
            sandbox.child(plan, args,
                          start=lambda cmd, env: _kernel(conn, cmd, env),
                          prepare=_set_image)
        except BaseException as error:  # noqa: BLE001 - report, then die
            print(f"not isolated: {error}", flush=True)
        os._exit(70)
    os.close(write)
    drain = output.Drain(read)
    code, cpu = _supervise(conn, kernel, drain)
    drain.close()
    _report(conn, code, cpu)


def _supervise(conn, kernel, drain):
    """Relay the launcher's signals and drain the kernel's output until
    the kernel ends; kill it when the launcher goes. Return its exit
    status and CPU seconds."""
    ended = os.pidfd_open(kernel)
    buffered = b""
    watched = [conn, ended, drain]
    while True:
        ready, _, _ = select.select(watched, [], [])
        if ended in ready:
            break
        if drain in ready:
            if not drain.read():  # every writer is gone
                watched.remove(drain)
            continue
        try:
            chunk = conn.recv(64)
        except OSError:
            chunk = b""
        if not chunk:  # the launcher died: so does the kernel
            os.kill(kernel, signal.SIGKILL)
            break
        buffered += chunk
        while b"\n" in buffered:
            line, buffered = buffered.split(b"\n", 1)
            number = signal.SIGINT if line == b"INT" else signal.SIGKILL
            try:
                os.kill(kernel, number)
            except ProcessLookupError:
                pass
    _, status, usage = os.wait4(kernel, 0)
    os.close(ended)
    code = os.waitstatus_to_exitcode(status)
    return (code if code >= 0 else 128 - code,
            usage.ru_utime + usage.ru_stime)


def _report(conn, code, cpu):
    try:
        conn.sendall(f"EXIT {code} {cpu:.6f}\n".encode())
    except OSError:
        pass


# ------------------------------------------------------ the process image

PR_SET_MM, PR_SET_MM_MAP = 35, 14
_IMAGE = []  # the kernel's command line and environment, kept alive


def _stat_fields():
    """``/proc/self/stat``'s fields, numbered from 1 as in proc(5)."""
    with open("/proc/self/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return {number: int(value) if value.lstrip("-").isdigit() else value
            for number, value in enumerate(fields, start=3)}


def _scrub_image():
    """Zero the grading process's command line and environment strings
    this copy of it holds (its settings; its environment is already an
    allow-list, cluster.WORKER_ENVIRONMENT)."""
    import ctypes

    stat = _stat_fields()
    for start, end in ((stat[48], stat[49]), (stat[50], stat[51])):
        if 0 < start < end:
            ctypes.memset(start, 0, end - start)


def _set_image(command, env):
    """Point ``/proc/self/cmdline`` and ``environ`` at the kernel's own
    command and environment, as ``execve`` would have
    (``PR_SET_MM_MAP``, which needs no capability)."""
    import ctypes

    class MemoryMap(ctypes.Structure):
        _fields_ = [(name, ctypes.c_uint64) for name in (
            "start_code", "end_code", "start_data", "end_data",
            "start_brk", "brk", "start_stack", "arg_start", "arg_end",
            "env_start", "env_end")] + [
            ("auxv", ctypes.c_void_p), ("auxv_size", ctypes.c_uint32),
            ("exe_fd", ctypes.c_uint32)]

    cmdline = b"\0".join(a.encode() for a in command) + b"\0"
    environ = b"\0".join(f"{k}={v}".encode() for k, v in env.items()) + \
        b"\0"
    buffers = [ctypes.create_string_buffer(cmdline, len(cmdline)),
               ctypes.create_string_buffer(environ, len(environ))]
    _IMAGE.extend(buffers)
    box.LIBC.sbrk.restype = ctypes.c_void_p
    stat = _stat_fields()
    where = [ctypes.addressof(b) for b in buffers]
    image = MemoryMap(
        start_code=stat[26], end_code=stat[27], start_data=stat[45],
        end_data=stat[46], start_brk=stat[47],
        brk=box.LIBC.sbrk(ctypes.c_long(0)), start_stack=stat[28],
        arg_start=where[0], arg_end=where[0] + len(cmdline),
        env_start=where[1], env_end=where[1] + len(environ),
        auxv=None, auxv_size=0, exe_fd=0xFFFFFFFF)
    box.check(box.LIBC.prctl(PR_SET_MM, PR_SET_MM_MAP,
                             ctypes.byref(image),
                             ctypes.sizeof(image), 0), "prctl(PR_SET_MM)")


# ------------------------------------------------------------ the kernel


def _kernel(conn, command, env):
    """Become the kernel: ``command`` is ``[python, -m,
    ipykernel_launcher, -f, FILE]``."""
    if command[1:3] != ["-m", "ipykernel_launcher"]:
        raise sandbox.Refused(f"expected python -m ipykernel_launcher, "
                              f"got {command[:3]}")
    conn.close()
    # A change of uid makes a process undumpable (its /proc files the
    # root's); execve would have made the kernel dumpable again.
    box.LIBC.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
    for fd in _open_fds():  # the grader's, held for the new root
        if fd > 2:
            _close(fd)
    os.environ.clear()
    os.environ.update(env)
    os.environ.setdefault("MPLBACKEND", INLINE)
    for name in [n for n in sys.modules if n == "__main__"
                 or n.split(".")[0] == "course_tools"]:
        del sys.modules[name]
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    # as a new Python would: fresh seeds (torch's default is fixed)
    random.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    sys.argv = ["ipykernel_launcher", *command[3:]]
    from ipykernel import kernelapp

    code = 0
    try:
        kernelapp.launch_new_instance()
    except SystemExit as end:
        code = end.code if isinstance(end.code, int) else 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


# ------------------------------------------------ the launcher's request


def decode_plan(data):
    """The plan a launcher sent (``launch.encode_plan``)."""
    keep = {name: (path, base64.b64decode(text))
            for name, (path, text) in data["keep"].items()}
    connection = data.get("connection")
    return dict(data, keep=keep,
                connection=tuple(connection) if connection else None)
