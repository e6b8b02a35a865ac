"""A throw-away local PostgreSQL server for the tests.

Uses the server binaries of Debian's ``postgresql`` package (``make
system-packages`` installs it). The server listens on 127.0.0.1 only,
with its data in a temporary folder; as root it runs as the
``postgres`` user, since PostgreSQL refuses to run as root.
"""

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path


def _bindir():
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def find_or_install():
    """The folder of ``initdb`` and ``pg_ctl``, or ``(None, reason)``.

    ``make system-packages`` (run by ``make test``) installs Debian's
    ``postgresql`` where it is missing; this only looks for it."""
    bindir = _bindir()
    if bindir:
        return bindir, None
    return None, ("no PostgreSQL server binaries: `make system-packages` "
                  "installs Debian's postgresql (as root)")


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def server(bindir):
    """Start a server; yield a SQLAlchemy URL to a fresh database."""
    as_root = os.geteuid() == 0
    prefix = ["runuser", "-u", "postgres", "--"] if as_root else []
    home = Path(tempfile.mkdtemp(prefix="pg-"))
    data = home / "data"
    if as_root:
        shutil.chown(home, "postgres")
        os.chmod(home, 0o700)
    port = _free_port()

    def run(*args):
        result = subprocess.run([*prefix, *map(str, args)],
                                capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise RuntimeError(f"{args[0]} failed: {result.stderr}")

    run(bindir / "initdb", "-D", data, "-U", "postgres", "--auth=trust",
        "-E", "UTF8")
    run(bindir / "pg_ctl", "-D", data, "-l", home / "log", "-w", "-o",
        f"-p {port} -c listen_addresses=127.0.0.1 -k {home}", "start")
    try:
        run(bindir / "createdb", "-h", "127.0.0.1", "-p", port,
            "-U", "postgres", "gradebook")
        yield f"postgresql://postgres@127.0.0.1:{port}/gradebook"
    finally:
        run(bindir / "pg_ctl", "-D", data, "-m", "immediate", "stop")
        shutil.rmtree(home, ignore_errors=True)
