"""What a student's notebook commonly does beyond the chapters' own code,
run inside a graded kernel: threads and processes, subprocesses and the
shell, files, timers and signals, local sockets, asyncio, the standard
library's formats, the ``os`` and ``select`` modules, NumPy, SciPy,
PyTorch (a ``DataLoader`` with worker
processes included), Matplotlib and Pillow.

``scripts/record_syscalls.py`` records the system calls of this workload
beside every chapter's, and ``tests/test_confinement.py`` runs it in the
sandbox: each part must work under the kernel's seccomp profile. Run as
a script, it prints ``ok NAME`` or ``failed NAME: error`` per part and
ends with ``FAILED = [...]``.
"""

import asyncio
import concurrent.futures
import csv
import ctypes
import ctypes.util
import fcntl
import gzip
import hashlib
import io
import json
import mmap
import multiprocessing
import os
import pickle
import platform
import queue
import random
import resource
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import uuid
import zipfile
from pathlib import Path


def _square(x):
    return x * x


def threads():
    results = queue.Queue()
    workers = [threading.Thread(target=lambda i=i: results.put(i * i))
               for i in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        assert list(pool.map(_square, range(4))) == [0, 1, 4, 9]
    assert sorted(results.queue) == [0, 1, 4, 9]


def processes():
    with multiprocessing.get_context("fork").Pool(2) as pool:
        assert pool.map(_square, range(4)) == [0, 1, 4, 9]
    with concurrent.futures.ProcessPoolExecutor(
            2, mp_context=multiprocessing.get_context("fork")) as pool:
        assert list(pool.map(_square, range(3))) == [0, 1, 4]
    child = os.fork()
    if child == 0:
        os._exit(7)
    assert os.waitpid(child, 0)[1] >> 8 == 7


def the_shell():
    out = subprocess.run([sys.executable, "-c", "print(6 * 7)"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "42"
    listing = subprocess.run(["ls", "-la"], capture_output=True,
                             text=True, check=True)
    assert listing.stdout
    piped = subprocess.run("echo hello | wc -c", shell=True,
                           capture_output=True, text=True, check=True)
    assert piped.stdout.strip() == "6"
    assert os.system("true") == 0


def files():
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "a").mkdir()
        (root / "a" / "x.txt").write_text("text")
        shutil.copytree(root / "a", root / "b")
        os.rename(root / "b" / "x.txt", root / "b" / "y.txt")
        os.symlink(root / "b" / "y.txt", root / "link")
        os.chmod(root / "link", 0o600)
        os.utime(root / "a" / "x.txt", (0, 0))
        assert sorted(p.name for p in root.rglob("*.txt")) == [
            "x.txt", "y.txt"]
        assert [e.name for e in os.scandir(root / "a")] == ["x.txt"]
        with open(root / "new", "x+b") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            handle.write(b"\0" * 4096)
            handle.flush()
            with mmap.mmap(handle.fileno(), 4096) as mapped:
                mapped[:4] = b"abcd"
            os.truncate(handle.name, 2)
        assert (root / "new").read_bytes() == b"ab"
        shutil.move(root / "b", root / "c")
        shutil.rmtree(root / "c")
        os.statvfs(folder)


def timers_and_signals():
    fired = []
    signal.signal(signal.SIGALRM, lambda *_: fired.append(1))
    signal.setitimer(signal.ITIMER_REAL, 0.01)
    time.sleep(0.05)
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    assert fired
    start, cpu = time.perf_counter(), time.process_time()
    sum(range(10_000))
    assert time.perf_counter() >= start and time.process_time() >= cpu
    time.monotonic_ns()
    time.localtime()


def local_sockets():
    left, right = socket.socketpair()
    with left, right:
        left.sendall(b"ping")
        assert right.recv(4) == b"ping"
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "s")
        with socket.socket(socket.AF_UNIX) as server:
            server.bind(path)
            server.listen(1)
            with socket.socket(socket.AF_UNIX) as client:
                client.connect(path)
                peer, _ = server.accept()
                with peer:
                    client.sendall(b"x")
                    assert peer.recv(1) == b"x"


def the_event_loop():
    async def main():
        await asyncio.sleep(0.001)
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "print(1)",
            stdout=asyncio.subprocess.PIPE)
        out, _ = await process.communicate()
        return out.strip()

    # in a thread of its own: a notebook's kernel runs a loop already
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        assert pool.submit(asyncio.run, main()).result() == b"1"


def formats():
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        with sqlite3.connect(root / "db.sqlite") as db:
            db.execute("create table t (x)")
            db.executemany("insert into t values (?)", [(1,), (2,)])
            assert db.execute("select sum(x) from t").fetchone() == (3,)
        sqlite3.connect(":memory:").close()
        (root / "p.pkl").write_bytes(pickle.dumps({"a": [1, 2]}))
        (root / "j.json").write_text(json.dumps({"b": 1}))
        with open(root / "c.csv", "w", newline="") as handle:
            csv.writer(handle).writerows([[1, 2], [3, 4]])
        with gzip.open(root / "g.gz", "wt") as handle:
            handle.write("zip")
        with zipfile.ZipFile(root / "z.zip", "w") as archive:
            archive.write(root / "j.json", "j.json")
        with tarfile.open(root / "t.tar.gz", "w:gz") as archive:
            archive.add(root / "c.csv", "c.csv")
    hashlib.sha256(b"x").hexdigest()
    uuid.uuid4()
    random.SystemRandom().random()
    os.urandom(16)


def the_machine():
    platform.uname()
    os.cpu_count()
    os.sched_getaffinity(0)
    resource.getrusage(resource.RUSAGE_SELF)
    resource.getrlimit(resource.RLIMIT_NOFILE)
    os.getloadavg()
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    assert libc.getpid() == os.getpid()
    ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")


def the_os_module():
    import select

    with tempfile.TemporaryDirectory() as folder:
        here = os.getcwd()
        os.chdir(folder)
        try:
            Path("f").write_text("x")
            os.lstat("f")
            os.access("f", os.R_OK)
            os.symlink("f", "l")
            assert os.readlink("l") == "f"
            with open("f", "r+b") as handle:
                os.fchmod(handle.fileno(), 0o644)
                os.fsync(handle.fileno())
                with mmap.mmap(handle.fileno(), 1) as mapped:
                    mapped.flush()
            shutil.copy2("f", "g")
            os.replace("g", "h")
            os.makedirs("d/e", exist_ok=True)
            os.removedirs("d/e")
        finally:
            os.chdir(here)
    read, write = os.pipe()
    os.dup2(read, 100, inheritable=False)
    os.close(100)
    os.write(write, b"x")
    assert select.select([read], [], [], 1)[0] == [read]
    poller = select.poll()
    poller.register(read, select.POLLIN)
    assert poller.poll(100)
    with select.epoll() as epoll:
        epoll.register(read, select.EPOLLIN)
        assert epoll.poll(0.1)
    os.close(read)
    os.close(write)
    os.times()
    os.getpgid(0)
    os.getpriority(os.PRIO_PROCESS, 0)
    os.sched_yield()
    signal.getitimer(signal.ITIMER_REAL)
    subprocess.run(["true"], start_new_session=True, check=True)
    grown = bytearray(2**20)
    for _ in range(6):  # a large block grows in place (mremap)
        grown += bytes(len(grown))
    time.sleep(0.001)


def numpy_and_scipy():
    import numpy as np
    from scipy import optimize, sparse, spatial

    generator = np.random.default_rng(0)
    matrix = generator.normal(size=(64, 64))
    np.linalg.svd(matrix)
    np.fft.rfft(matrix[0])
    with tempfile.TemporaryDirectory() as folder:
        np.save(os.path.join(folder, "m.npy"), matrix)
        loaded = np.load(os.path.join(folder, "m.npy"), mmap_mode="r")
        assert loaded.shape == (64, 64)
    optimize.minimize(lambda v: ((v - 1) ** 2).sum(), np.zeros(3))
    spatial.ConvexHull(generator.normal(size=(20, 2)))
    sparse.random(10, 10, density=0.1, random_state=0).tocsr()


def pytorch():
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    torch.set_num_threads(2)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    for workers in (0, 2):
        for x, y in DataLoader(data, batch_size=16, num_workers=workers):
            loss = torch.nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    model.load_state_dict(torch.load(buffer))
    with tempfile.TemporaryDirectory() as folder:
        torch.save(model, os.path.join(folder, "m.pt"))


def plots_and_images():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from PIL import Image

    figure, axes = plt.subplots()
    axes.plot([0, 1], [1, 0], label="line")
    axes.legend()
    axes.set_title("$x^2$ and text")
    with tempfile.TemporaryDirectory() as folder:
        for kind in ("png", "svg", "pdf"):
            figure.savefig(os.path.join(folder, f"f.{kind}"))
        Image.new("RGB", (8, 8)).save(os.path.join(folder, "i.png"))
        assert Image.open(os.path.join(folder, "i.png")).size == (8, 8)
    plt.close(figure)


PARTS = [threads, processes, the_shell, files, timers_and_signals,
         local_sockets, the_event_loop, formats, the_machine,
         the_os_module, numpy_and_scipy, pytorch, plots_and_images]


def run():
    """Run every part; return what failed (name: error)."""
    failed = []
    for part in PARTS:
        try:
            part()
            print(f"ok {part.__name__}", flush=True)
        except Exception as error:  # noqa: BLE001 - reported, then on
            failed.append(f"{part.__name__}: {type(error).__name__}: "
                          f"{error}"[:300])
            print(f"failed {failed[-1]}", flush=True)
    return failed


if __name__ == "__main__":
    FAILED = run()
    print(f"FAILED = {FAILED!r}", flush=True)
