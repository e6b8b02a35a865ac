"""Whose fault a cell's timeout is, measured: the kernel's or the
machine's.

A cell that runs past its limit is the submission's, unless the grader
measured that the kernel (or this grading process) was kept waiting for
a CPU. Linux counts, per thread, the time it ran and the time it was
runnable but waited for a CPU (``/proc/<pid>/task/<tid>/schedstat``:
nanoseconds on a CPU, nanoseconds waiting on a run queue, time slices).
A sleeping kernel, or one blocked on its own output, waits for nothing;
a kernel starved by other work on the machine waits. The time a kernel's
control group spent stopped at its own CPU quota (its own threads
competing) is its own, and is taken off the wait.

:class:`Reading` is one look at a set of processes; :func:`judge`
compares two looks over one cell and returns a :class:`Verdict` whose
``reason`` names the measurement, both ways.
"""

import os
from dataclasses import dataclass

from course_tools.classroom.cgroup import _read  # "" when unreadable

# A cell was starved when the kernel's processes ran less than
# STARVED_SHARE of the cell's time (half of the one CPU they may use)
# and its most-waiting thread (of the kernel or of this grading process)
# waited for a CPU at least STARVED_S seconds and STARVED_SHARE of it.
STARVED_S = 2.0
STARVED_SHARE = 0.5
TICK = 1e9  # schedstat counts nanoseconds


def _descendants(pids):
    """``pids`` and every process below them (``/proc/.../children``)."""
    found, todo = set(), list(pids)
    while todo:
        pid = todo.pop()
        if pid in found:
            continue
        found.add(pid)
        for tid in os.listdir(f"/proc/{pid}/task") if os.path.isdir(
                f"/proc/{pid}/task") else ():
            todo += [int(c) for c in _read(
                f"/proc/{pid}/task/{tid}/children").split()]
    return found


def threads(pids):
    """``{tid: (seconds on a CPU, seconds waiting for one)}`` of every
    thread of ``pids`` and of the processes below them."""
    found = {}
    for pid in _descendants(pids):
        folder = f"/proc/{pid}/task"
        try:
            tids = os.listdir(folder)
        except OSError:
            continue
        for tid in tids:
            fields = _read(f"{folder}/{tid}/schedstat").split()
            if len(fields) >= 2:
                found[int(tid)] = (int(fields[0]) / TICK,
                                   int(fields[1]) / TICK)
    return found


@dataclass
class Reading:
    """One look at the kernel's and this process's threads, and the
    seconds the kernel's control groups were stopped at their quota."""
    kernel: dict
    grader: dict
    throttled: float = 0.0

    @classmethod
    def take(cls, kernel_pids, throttled=0.0):
        return cls(threads(kernel_pids), threads([os.getpid()]),
                   throttled)


@dataclass
class Verdict:
    starved: bool
    ran_s: float  # CPU seconds the kernel's threads ran in the cell
    waited_s: float  # the most one thread waited for a CPU (quota off)
    grader_waited_s: float  # the most one grader thread waited
    seconds: float  # the cell's wall time until the measurement
    measured: bool  # whether any kernel thread was seen

    @property
    def reason(self):
        if not self.measured:
            return ("no thread of its kernel could be measured, and this "
                    "grading process waited "
                    f"{self.grader_waited_s:.1f} s for a CPU in "
                    f"{self.seconds:.0f} s"
                    + (": the machine was busy" if self.starved else
                       ": the machine was not busy"))
        said = (f"in {self.seconds:.0f} s its kernel ran "
                f"{self.ran_s:.1f} s of CPU and waited at most "
                f"{self.waited_s:.1f} s for one; this grading process "
                f"waited {self.grader_waited_s:.1f} s (measured from "
                "/proc/<pid>/schedstat)")
        if self.starved:
            return said + ": starved by other work on the machine"
        return said + ": not starved, so the time was the submission's"


def _delta(before, after):
    """``(CPU seconds in all, the most one thread waited)`` between two
    looks; a thread born in between counts from zero."""
    ran = waited = 0.0
    for tid, (run, wait) in after.items():
        run0, wait0 = before.get(tid, (0.0, 0.0))
        ran += max(0.0, run - run0)
        waited = max(waited, wait - wait0)
    return ran, waited


def judge(before, after, seconds):
    """Whether a cell that ran ``seconds`` between readings ``before``
    and ``after`` was starved by the machine."""
    ran, waited = _delta(before.kernel, after.kernel)
    waited = max(0.0, waited - max(0.0, after.throttled
                                   - before.throttled))
    _, grader = _delta(before.grader, after.grader)
    limit = max(STARVED_S, STARVED_SHARE * seconds)
    measured = bool(after.kernel)
    # a kernel that used half a CPU (its quota is one) was not starved,
    # whatever its own crowd of processes waited for each other
    starved = (not measured or ran < STARVED_SHARE * seconds) and \
        max(waited if measured else 0.0, grader) >= limit
    return Verdict(starved, ran, waited, grader, seconds, measured)
