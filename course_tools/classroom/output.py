"""A kernel's own standard output and error: a pipe, drained and capped.

A kernel never holds a file of the grader's as its standard streams (the
grading process's log was one: a kernel could write there what a later
kernel read, or fill the host's disk past its own disk limit). Its
parent (the sandbox's first process, or the zygote's keeper) makes a
pipe (:func:`pipe`), the kernel takes its write end as its standard
output and error and ``/dev/null`` as its input (:func:`take`), and the
parent reads the other end as long as the kernel lives (:class:`Drain`):
the first ``KEPT`` bytes go on to the parent's own standard output (the
grader's log, where ipykernel's warnings and the sandbox's ``not
isolated: ...`` belong) as printable text, the rest is read and counted,
never written. What the student's code prints in a cell does not come
this way: ipykernel sends it to the grader as messages, which the grader
caps on its own side (``worker.capped_execute``).
"""

import os
import select

# imported now: the parent's root becomes the kernel's (pivot_root moves
# every process of the mount namespace), where course_tools is not
from course_tools.classroom.text import safe

KEPT = 64 * 2**10  # bytes of a kernel's own output kept in the log


def pipe():
    """``(read, write)``: the kernel's streams, the reader non-blocking."""
    read, write = os.pipe2(os.O_CLOEXEC)
    os.set_blocking(read, False)
    return read, write


def take(read, write):
    """In the kernel's process: the pipe's write end as standard output
    and error, ``/dev/null`` as standard input."""
    null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    os.dup2(null, 0)
    os.dup2(write, 1)
    os.dup2(write, 2)
    for fd in {null, read, write} - {0, 1, 2}:
        os.close(fd)


class Drain:
    """The parent's end of the pipe: keeps ``cap`` bytes of what the
    kernel writes, copied as printable text to ``target`` (a descriptor),
    and reads the rest so that the kernel never blocks on it."""

    def __init__(self, fd, *, target=1, cap=KEPT):
        self.fd, self.target, self.cap = fd, target, cap
        self.kept = self.dropped = 0

    def fileno(self):
        return self.fd

    def read(self):
        """Take what is there now; False once every writer is gone."""
        while True:
            try:
                chunk = os.read(self.fd, 2**16)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not chunk:
                return False
            self._keep(chunk)

    def until_end(self):
        """Take everything until every writer is gone."""
        while self.read():
            try:
                select.select([self.fd], [], [])
            except InterruptedError:
                pass

    def close(self):
        """Take what is left, say what was dropped, close the pipe."""
        self.read()
        os.close(self.fd)
        if self.dropped:
            self._write(f"\n[the kernel wrote {self.dropped} more bytes to "
                        "its standard streams: dropped]\n")

    def _keep(self, chunk):
        room = max(0, self.cap - self.kept)
        if room:
            part = chunk[:room]
            self.kept += len(part)
            self._write(safe(part.decode("utf-8", "replace"),
                             limit=len(part)))
        self.dropped += len(chunk) - min(room, len(chunk))

    def _write(self, text):
        data = text.encode("utf-8", "replace")
        try:
            while data:
                data = data[os.write(self.target, data):]
        except OSError:  # the log is gone: nothing else to do
            pass
