"""The launcher of a kernel forked from a zygote, as lean as it can be.

nbgrader starts a process per kernel, as its kernelspec says; with a
zygote (:mod:`.zygote`) that process only reads what the kernel needs on
the grader's side (the plan: its connection file and the files named by
``KEEP_VARIABLES``), hands it to the zygote with its standard streams,
relays interrupts and waits. Python without ``site`` and this module,
which imports nothing but the standard library, do that in half the CPU
of :mod:`.sandbox` (argparse, ctypes.util, the site packages' import
hooks)::

    python -I -S -c "import sys; sys.path.append(ROOT); from
        course_tools.classroom.launch import main; sys.exit(main())" \\
        --zygote=SOCKET --uid=UID --box=DIR [--usage-file=FILE] ... \\
        -- python -m ipykernel_launcher -f CONNECTION_FILE

(``command_line(root)`` builds the part before the options.) Any other
use (no zygote, no uid, ``--probe``, ``--no-isolation``) and a zygote
that is gone are :mod:`.sandbox`'s, which isolates the kernel itself.
"""

import base64
import ctypes
import json
import os
import signal
import socket
import struct
import sys

KEEP_VARIABLES = ("COURSE_GRADING_CASES",)
# The kernel deletes these once read; the grader's copy goes too.
READ_ONCE = ("COURSE_GRADING_CASES",)
HEADER = struct.Struct("!I")  # the size of a request to the zygote
PR_SET_PDEATHSIG = 1
FAST = ("zygote", "uid", "box", "usage-file", "memory-mb", "file-mb",
        "disk-mb", "pids", "cgroup", "hide", "read-only", "bind")


class Refused(Exception):
    """Isolation cannot be set up here."""


class Unreachable(Exception):
    """The zygote took no request (it is gone): nothing was started."""


def command_line(root):
    """The launcher's command before its options: ``root`` holds the
    ``course_tools`` package."""
    # appended: the standard library comes first, whatever lies in root
    code = (f"import sys; sys.path.append({str(root)!r}); from "
            "course_tools.classroom.launch import main; sys.exit(main())")
    return [sys.executable, "-I", "-S", "-c", code]


def plan(uid, box, command):
    """Everything read on the grader's side before the namespaces, as
    the kernel's uid ``uid`` with its box ``box`` (or None)."""
    if os.geteuid() != 0:
        raise Refused("the grader is not root, so kernels cannot run as "
                      "users of their own")
    found = {"uid": uid, "keep": {}, "command": command,
             "connection": None}
    for name in KEEP_VARIABLES:
        path = os.environ.get(name)
        if path and os.path.isfile(path):
            with open(path, "rb") as handle:
                found["keep"][name] = (path, handle.read())
            if name in READ_ONCE:
                os.unlink(path)
    if command and "-f" in command:
        index = command.index("-f") + 1
        with open(command[index]) as handle:
            info = json.load(handle)
        if info.get("transport") != "ipc":
            raise Refused("expected the kernel's connection to use the "
                          f"ipc transport, got {info.get('transport')}")
        if box and os.path.dirname(info["ip"]) != os.path.join(
                os.path.realpath(box), "ipc"):
            raise Refused(f"expected the ipc sockets in {box}/ipc, "
                          f"got {info['ip']}")
        info["ip"] = "/ipc/" + os.path.basename(info["ip"])
        found["connection"] = (index, info)
    return found


def encode_plan(found):
    """``plan``'s dictionary as JSON data."""
    keep = {name: [path, base64.b64encode(data).decode()]
            for name, (path, data) in found["keep"].items()}
    return dict(found, keep=keep)


def request(path, argv, found, *, usage_file=None):
    """Ask the zygote at ``path`` for a kernel with the plan ``found``;
    relay this launcher's interrupts to it; return its exit status."""
    payload = json.dumps({"argv": argv,
                          "plan": encode_plan(found)}).encode()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
        socket.send_fds(conn, [HEADER.pack(len(payload))], [0, 1, 2])
        conn.sendall(payload)
    except OSError as error:  # nothing has started: start it anew
        conn.close()
        raise Unreachable(str(error)) from None

    def relay(number, _frame):
        try:
            conn.sendall(b"INT\n" if number == signal.SIGINT
                         else b"KILL\n")
        except OSError:
            pass

    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, relay)
    answer = b""
    while not answer.endswith(b"\n"):
        chunk = conn.recv(256)
        if not chunk:
            print("not isolated: the zygote ended the kernel's "
                  "connection", flush=True)
            return 70
        answer += chunk
    _, code, cpu = answer.decode().split()
    if usage_file:
        with open(usage_file, "a") as handle:
            handle.write(f"{cpu}\n")
    return int(code)


def _options(argv):
    """``({name: [value, ...]}, command)`` when every option before
    ``--`` is ``--name=value`` with a name of ``FAST``, else None."""
    if "--" not in argv:
        return None
    split = argv.index("--")
    given = {}
    for option in argv[:split]:
        name, equals, value = option[2:].partition("=")
        if not option.startswith("--") or not equals or name not in FAST:
            return None
        given.setdefault(name, []).append(value)
    return given, argv[split + 1:]


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    parsed = _options(argv)
    if parsed is None or not {"zygote", "uid"} <= set(parsed[0]) or \
            not parsed[0]["uid"][-1].isdigit() or \
            int(parsed[0]["uid"][-1]) == 0:  # the sandbox's own uid
        from course_tools.classroom import sandbox

        return sandbox.main(argv)
    given, command = parsed
    ctypes.CDLL(None, use_errno=True).prctl(
        PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    try:
        box = given.get("box", [None])[-1]
        found = plan(int(given["uid"][-1]), box, command)
        try:
            return request(given["zygote"][-1], argv, found,
                           usage_file=given.get("usage-file", [None])[-1])
        except Unreachable as error:  # slower, as safe
            print(f"the zygote is unreachable ({error}): the kernel "
                  "starts anew", file=sys.stderr, flush=True)
            from course_tools.classroom import sandbox

            args, command = sandbox.parse(argv)
            return sandbox.isolate(args, command, found)
    except (Refused, OSError) as error:
        print(f"not isolated: {error}", flush=True)
        return 70
