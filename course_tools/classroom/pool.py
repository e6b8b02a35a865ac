"""Worker processes fed from a queue: one thread per worker slot sends a
task, waits for its answer (at most ``limit_s``), and replaces a worker
that died or ran too long, reporting that submission as failed."""

import json
import os
import queue
import resource
import signal
import subprocess
import sys
import threading
from pathlib import Path


def run_workers(tasks, *, jobs, settings, limit_s):
    """Yield ``(task, result)`` as workers finish them, in any order."""
    pending, done = queue.Queue(), queue.Queue()
    for task in tasks:
        pending.put(task)
    jobs = max(1, min(jobs, len(tasks)))
    threads = [threading.Thread(target=_slot, daemon=True,
                                args=(k, pending, done, settings, limit_s))
               for k in range(jobs)]
    for thread in threads:
        thread.start()
    for _ in tasks:
        yield done.get()
    for thread in threads:
        thread.join()


def _spawn(k, settings):
    log = open(Path(settings["scratch"]) / f"worker-{k}.log", "ab")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    # The worker's own memory is capped too (its kernels get less).
    limit = max(8192, 2 * settings["memory_mb"]) * 2**20

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    process = subprocess.Popen(
        [sys.executable, "-I", "-u", "-m", "course_tools.classroom.worker",
         json.dumps(settings)], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=log, text=True, env=env,
        start_new_session=True, preexec_fn=cap)
    log.close()
    return process


def _kill(process):
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()
    _stop_kernels(process.pid)


def _stop_kernels(pid):
    """Kill whatever the kernels of worker ``pid`` left (their launchers
    die with the worker; a kernel that cleared its parent-death signal
    would not)."""
    from course_tools.classroom import box, cgroup

    uid = box.UID_BASE + pid
    box.kill_user(uid)
    cgroup.remove(cgroup.plan(f"course-kernel-{uid}")[1])


def _slot(k, pending, done, settings, limit_s):
    process = None
    while True:
        try:
            task = pending.get_nowait()
        except queue.Empty:
            break
        if process is None:
            process = _spawn(k, settings)
        killed = threading.Event()

        def stop(process=process, killed=killed):
            killed.set()
            _kill(process)

        timer = threading.Timer(limit_s, stop)
        timer.start()
        try:
            process.stdin.write(json.dumps(task) + "\n")
            process.stdin.flush()
            line = process.stdout.readline()
        except OSError:
            line = ""
        timer.cancel()
        if line:
            done.put((task, json.loads(line)))
            continue
        why = (f"grading took more than {limit_s} s: stopped"
               if killed.is_set() else "the grading process died ("
               f"{_last_line(settings, k)})")
        _kill(process)
        process = None
        done.put((task, failed(task, why)))
    if process is not None:
        process.stdin.close()
        try:
            process.wait(timeout=60)
            _stop_kernels(process.pid)
        except subprocess.TimeoutExpired:
            _kill(process)


def _last_line(settings, k):
    """The last line the worker logged, to say why it died."""
    path = Path(settings["scratch"]) / f"worker-{k}.log"
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        lines = []
    return lines[-1][:300] if lines else "no log"


def failed(task, reason):
    return {"assignment": task["assignment"], "student": task["student"],
            "status": "failed", "notebooks": {}, "messages": {},
            "passed": {}, "timestamp": None, "work": task["work"],
            "reasons": [reason]}
