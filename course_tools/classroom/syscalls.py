"""The system calls kernels make, recorded: what the kernel's seccomp
allow-list (``seccomp-kernel.json``, read by :mod:`.seccomp`) is
derived from.

With ``trace`` in a worker's settings (``scripts/record_syscalls.py``
sets it), every kernel runs under ``strace``: attached to the zygote
that forks the kernels (:func:`attach`), or in front of the kernel's
launcher where there is no zygote (:func:`tracer_argv`). ``strace -ff``
writes one file per process and thread. What counts is what the kernel
asks for once it is confined (:func:`confined_calls`): in the process
that loads the filter, the calls after it; in every process and thread
that such a process starts afterwards, all of them. The set-up before
(namespaces, mounts, the drop to the box's uid) is the grader's, as
root, and is not counted.
"""

import os
import re
import subprocess
import time
from collections import Counter
from pathlib import Path

PREFIX = "trace"  # strace -ff writes PREFIX.<pid>
STRACE = ["strace", "-f", "-ff", "-s", "0", "--decode-pids=pidns"]
ATTACH_S = 30  # seconds to wait for strace to attach to the zygote
# a line of strace's: "name(arguments) = result"
CALL = re.compile(r"([a-z][a-z0-9_]*)\(")
# the filter loaded, as strace shows it, and succeeding
LOADED = re.compile(r"(prctl\(PR_SET_SECCOMP, SECCOMP_MODE_FILTER"
                    r"|seccomp\(SECCOMP_SET_MODE_FILTER).*\)\s+= 0\s*$")
# a process or thread started: its pid as the tracer sees it (the
# second figure where the caller is in another PID namespace)
STARTED = re.compile(r"(?:clone3?|fork|vfork)\(.*\)\s+= (\d+)"
                     r"(?: /\* (\d+) in strace's PID NS \*/)?\s*$")


def tracer_argv(folder):
    """``strace`` in front of a kernel's launcher, writing into
    ``folder``."""
    Path(folder).mkdir(parents=True, exist_ok=True)
    return STRACE + ["-o", os.path.join(folder, PREFIX), "--"]


def attach(pid, folder):
    """Trace process ``pid`` (the zygote) and every process it starts
    from now on, into ``folder``; return the tracer's ``Popen`` once it
    is attached."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / f"strace-{pid}.log"
    with open(log, "wb") as handle:
        tracer = subprocess.Popen(
            STRACE + ["-o", str(folder / PREFIX), "-p", str(pid)],
            stdout=subprocess.DEVNULL, stderr=handle)
    end = time.monotonic() + ATTACH_S
    while b"attached" not in log.read_bytes():
        if tracer.poll() is not None or time.monotonic() > end:
            tracer.kill()
            raise RuntimeError(f"strace did not attach to {pid}: "
                               f"{log.read_text(errors='replace')}")
        time.sleep(0.05)
    return tracer


def _calls(lines):
    for line in lines:
        match = CALL.match(line)
        if match:
            yield match.group(1)


def confined_calls(folder):
    """``Counter`` of the system calls that confined processes made, by
    name, over every trace file in ``folder``."""
    files = {}
    for path in Path(folder).glob(f"{PREFIX}.*"):
        pid = path.name.rsplit(".", 1)[1]
        if pid.isdigit():
            files[int(pid)] = path.read_text(errors="replace").splitlines()
    # (pid, the first line that counts)
    todo = []
    for pid, lines in files.items():
        for number, line in enumerate(lines):
            if LOADED.match(line):
                todo.append((pid, number + 1))
                break
    counted, calls = set(), Counter()
    while todo:
        pid, start = todo.pop()
        if pid in counted or pid not in files:
            continue
        counted.add(pid)
        lines = files[pid][start:]
        calls.update(_calls(lines))
        for line in lines:
            match = STARTED.match(line)
            if match:
                todo.append((int(match.group(2) or match.group(1)), 0))
    return calls
