"""Grading on Dask: submissions out to the workers, results back.

The grader's side (``Starting``, ``check_isolation``, ``run``) opens a
``dask.distributed`` client, in a thread while the grader builds the
templates: on an embedded ``LocalCluster`` of ``jobs`` workers, threads
of this process (each drives a grading process of its own, so nothing is
gained by a Dask worker process around it), or on an existing cluster
(``--scheduler tcp://HOST:PORT``, or Dask's ``DASK_SCHEDULER_ADDRESS``)
whose workers have the course's environment installed. Every
submission travels as data (:mod:`.parcel`) with its assignment's
template (sent with each submission, so that no worker's death can
lose it); ``run`` keeps a bounded number of them in flight and
yields each result as it arrives, from any worker.

A worker that dies costs a retry of its submissions on another worker
(the scheduler's ``allowed-failures``); past that bound the submission
comes back ``ungraded`` and the grader records nothing for it, so that
the next run grades it.

The worker's side (``grade_submission``): each worker thread keeps a
grading process of its own (:mod:`.worker`, the same one for every
submission of a batch), started from the worker's own installation, with
a scratch folder of its own under /tmp. The thread refuses to grade when
its machine cannot isolate the students' kernels (unless the batch says
``isolate: False``), stops the grading process past the submission's time
limit, and reports that, or a grading process that died, as a submission
not graded (``ungraded``: nothing is recorded, the next run grades it).
"""

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import uuid
from pathlib import Path

from course_tools.classroom import parcel

ALLOWED_FAILURES = 2  # worker deaths one submission may cost, embedded
RETRIES = 1  # retries of a submission whose task raised (a refusal)
IN_FLIGHT = 4  # submissions queued per worker thread
CONNECT_S = 30  # seconds to reach a scheduler and see a worker
# An embedded cluster serves its dashboard (half a second of CPU to
# start) for a batch long enough to watch.
DASHBOARD_FROM = 50
# The environment variables a grading process gets (and LC_*, JUPYTER_*).
WORKER_ENVIRONMENT = ("PATH", "HOME", "USER", "LOGNAME", "LANG",
                      "LANGUAGE", "TZ", "TMPDIR", "MPLBACKEND")


# The grader's side.

def connect(address, jobs, dashboard=True):
    """``(client, cluster, lines)``: a client of the scheduler at
    ``address`` (``cluster`` None), or of an embedded ``LocalCluster``
    of ``jobs`` processes, with a dashboard when ``dashboard``; ``lines``
    say where it grades."""
    import dask
    from distributed import Client, LocalCluster

    address = address or dask.config.get("scheduler-address", None)
    if address:
        try:
            client = Client(address, timeout=f"{CONNECT_S}s")
            client.wait_for_workers(1, timeout=CONNECT_S)
        except (OSError, TimeoutError) as error:
            raise RuntimeError(f"no Dask cluster to grade on at {address}"
                               f" ({error})") from None
        cluster = None
    else:
        # In-process workers: the grading happens in their grading
        # processes (benchmarks/grade_dask.py measures both kinds). All
        # of it listens on this machine only.
        # Its workers only wait on their grading processes: no profiler
        # sampling them every 10 ms.
        with dask.config.set({"distributed.scheduler.allowed-failures":
                              ALLOWED_FAILURES,
                              "distributed.worker.profile.enabled": False,
                              "distributed.admin.system-monitor.interval":
                              "2s"}):
            cluster = LocalCluster(
                n_workers=jobs, threads_per_worker=1, processes=False,
                protocol="tcp://", host="127.0.0.1",
                dashboard_address="127.0.0.1:0" if dashboard else None,
                memory_limit=0,
                silence_logs=40)
            client = Client(cluster)
    workers = client.scheduler_info()["workers"]
    threads = sum(w["nthreads"] for w in workers.values())
    where = address or "an embedded LocalCluster"
    lines = [f"grading on {where}: {len(workers)} workers, {threads} "
             "threads"]
    try:  # the scheduler serves its HTTP routes without bokeh too
        shown = client.run_on_scheduler(_serves_dashboard)
    except Exception:  # a scheduler that runs nothing it is sent
        shown = False
    if shown and (address or dashboard):
        lines.append(f"Dask dashboard: {client.dashboard_link}")
    elif address or dashboard:
        lines.append("no Dask dashboard (its scheduler has no bokeh)")
    else:
        lines.append(f"no Dask dashboard (a batch of fewer than "
                     f"{DASHBOARD_FROM} submissions)")
    return client, cluster, lines


def _serves_dashboard(dask_scheduler=None):
    return "bokeh" in sys.modules


class Starting:
    """``connect`` in a thread: the workers start while the grader does
    something else. ``result()`` waits for ``(client, cluster, lines)``;
    ``close(settings)`` stops what was started (:func:`close`)."""

    def __init__(self, address, jobs, settings=None, dashboard=True):
        self._found = {}
        self._thread = threading.Thread(
            target=self._connect, args=(address, jobs, settings, dashboard),
            daemon=True)
        self._thread.start()

    def _connect(self, address, jobs, settings, dashboard):
        try:
            self._found["value"] = connect(address, jobs, dashboard)
        except BaseException as error:  # raised again by result()
            self._found["error"] = error
            return
        if settings is not None:  # kept, or Dask would cancel them
            client = self._found["value"][0]
            self._found["warming"] = [
                client.submit(warm_up, settings, pure=False,
                              workers=[address], allow_other_workers=False)
                for address in client.scheduler_info()["workers"]]

    def result(self):
        self._thread.join()
        if "error" in self._found:
            raise self._found["error"]
        return self._found["value"]

    def close(self, settings):
        self._thread.join()
        if "value" in self._found:
            client, cluster, _ = self._found.pop("value")
            close(client, cluster, settings)


def check_isolation(client, settings):
    """``(line, fallbacks)`` for the whole cluster: ``isolated`` when
    every worker isolates kernels, else ``not isolated: WHY`` naming the
    first worker that cannot, and the weaker limits any falls back to."""
    found = client.run(probed, settings)
    fallbacks = sorted({f for _, more in found.values() for f in more})
    for address, (line, _) in sorted(found.items()):
        if line != "isolated":
            return f"{line} (on worker {address})", fallbacks
    return "isolated", fallbacks


def sources_hash():
    """SHA-256 of the sources this process grades with: ``course_lib``
    (the checks and the references) and ``course_tools`` (the verdicts
    and the hidden cases)."""
    import course_tools
    from course_tools.classroom.course import hash_folder

    return hash_folder(installation() / "course_lib",
                       Path(course_tools.__file__).resolve().parent)


def check_sources(client):
    """Refuse a cluster with a worker whose grading sources differ from
    this grader's (a stale checkout, another course_lib on its path)."""
    mine = sources_hash()
    found = client.run(sources_hash)
    for address, theirs in sorted(found.items()):
        if theirs != mine:
            raise RuntimeError(
                f"worker {address} grades with other sources than this "
                f"grader (course_lib and course_tools hash {theirs[:12]}, "
                f"expected {mine[:12]}): install the course's version "
                "there; nothing was graded")


def run_on_every_worker(client, jobs, *, settings, limit_s):
    """Grade each ``(task, template)`` of ``jobs`` once on every worker,
    all at once: ``[{address: result}, ...]`` in the order of ``jobs``."""
    workers = sorted(client.scheduler_info()["workers"])
    batch = uuid.uuid4().hex[:8]
    futures = []
    for k, (task, template) in enumerate(jobs):
        submission = parcel.pack_submission(
            task["submission"], max_notebook=_max_notebook(),
            max_file=_max_file())
        wire = {key: value for key, value in task.items()
                if key not in ("submission", "template", "template_db",
                               "work", "collected")}
        futures.append({address: client.submit(
            grade_submission, wire, submission, template, settings,
            limit_s, key=f"canary-{batch}-{k}-{w}", pure=False,
            workers=[address], allow_other_workers=False)
            for w, address in enumerate(workers)})
    found = []
    for (task, _), each in zip(jobs, futures, strict=True):
        results = {}
        for address, future in each.items():
            try:
                results[address] = future.result()
            except Exception as error:  # the worker died, or refused
                results[address] = failed(task, _why_lost(error))
        found.append(results)
    return found


def run(client, tasks, *, templates, settings, limit_s):
    """Yield ``(task, result)`` for every task, as results arrive.

    ``templates``: ``{assignment: bytes}`` (``parcel.pack_tree`` of the
    template's folder). A result whose submission could not be graded by
    any worker has status ``ungraded``."""
    from distributed import as_completed

    threads = sum(w["nthreads"] for w in
                  client.scheduler_info()["workers"].values())
    batch = uuid.uuid4().hex[:8]
    queued = iter(enumerate(tasks))
    futures = {}
    unread = []  # (task, result) of submissions that could not be read

    def submit(k, task):
        try:
            submission = parcel.pack_submission(
                task["submission"], max_notebook=_max_notebook(),
                max_file=_max_file())
        except (OSError, ValueError) as error:  # this one alone
            unread.append((task, ungraded(
                task, f"not graded: its folder could not be read "
                f"({error}); the next run tries again")))
            return None
        # read once: what is graded is what is hashed and recorded,
        # whatever the folder held when the batch was sorted
        task["hash"] = parcel.digest(submission,
                                     *task.get("collected", []))
        wire = {key: value for key, value in task.items()
                if key not in ("submission", "template", "template_db",
                               "work", "collected")}
        future = client.submit(
            grade_submission, wire, submission, templates[task["assignment"]],
            settings, limit_s, key=f"grade-{batch}-{k}", pure=False,
            retries=RETRIES)
        futures[future] = task
        return future

    def start(count):
        """Up to ``count`` more futures, past the unreadable ones."""
        started = []
        while len(started) < count:
            more = next(queued, None)
            if more is None:
                break
            future = submit(*more)
            if future is not None:
                started.append(future)
        return started

    def drain():
        while unread:
            yield unread.pop(0)

    first = start(max(1, IN_FLIGHT * threads))
    yield from drain()
    if not first:  # every one unreadable
        return
    pending = as_completed(first)
    for future in pending:
        task = futures.pop(future)
        try:
            result = future.result()
        except Exception as error:  # KilledWorker, a refusal
            result = ungraded(task, _why_lost(error))
        future.release()
        for more in start(1):
            pending.add(more)
        yield task, result
        yield from drain()


def _max_notebook():
    from course_tools.classroom.repair import MAX_BYTES

    return MAX_BYTES


def _max_file():
    from course_tools.classroom.worker import MAX_EXTRA_FILE

    return MAX_EXTRA_FILE


def _why_lost(error):
    name = type(error).__name__
    if name == "KilledWorker":
        return ("not graded: the workers grading it died (more than "
                "the scheduler's allowed failures); run again")
    return f"not graded: {name}: {str(error)[:300]}; run again"


def close(client, cluster, settings):
    """Stop the workers' grading processes of this batch (``settings``),
    then the client and the embedded cluster."""
    try:
        client.run(close_slots, settings)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def ungraded(task, reason):
    return {"assignment": task["assignment"], "student": task["student"],
            "status": "ungraded", "notebooks": {}, "messages": {},
            "passed": {}, "timestamp": None, "reasons": [reason]}


def failed(task, reason):
    return dict(ungraded(task, reason), status="failed")


# The worker's side.

_SLOTS = {}  # (thread, settings) -> _Slot
_SLOTS_LOCK = threading.Lock()
_PROBED = {}  # settings -> what probe found on this machine


def grade_submission(task, submission, template, settings, limit_s):
    """Grade one submission on this worker; return the result, with the
    autograded folder as ``autograded`` bytes (``parcel.pack_tree``)."""
    return _slot(settings).grade(task, submission, template, limit_s)


def warm_up(settings):
    """Start this worker thread's grading process for the batch
    ``settings`` now: it imports for seconds (PyTorch, nbgrader, what the
    kernels' zygote holds) while the grader builds the templates."""
    _slot(settings).start()
    return True


def _slot(settings):
    key = (threading.get_ident(), _batch(settings))
    with _SLOTS_LOCK:
        slot = _SLOTS.get(key)
    if slot is None:
        slot = _Slot(settings)  # raises when it cannot isolate
        with _SLOTS_LOCK:
            _SLOTS[key] = slot
    return slot


def _batch(settings):
    return json.dumps(settings, sort_keys=True)


def close_slots(settings):
    """Stop this worker's grading processes of the batch ``settings``
    and remove their scratch; return how many there were."""
    with _SLOTS_LOCK:
        keys = [k for k in _SLOTS if k[1] == _batch(settings)]
        slots = [_SLOTS.pop(k) for k in keys]
    for slot in slots:
        slot.close()
    return len(slots)


def probe(settings):
    """What isolation this machine achieves: ``(line, fallbacks)``, line
    ``isolated`` or ``not isolated: WHY``, and what falls back to weaker
    limits."""
    from course_tools.classroom import cgroup

    folder = Path(tempfile.mkdtemp(prefix="grade-probe-", dir="/tmp"))
    try:
        argv = [sys.executable, "-I", "-m",
                "course_tools.classroom.sandbox", "--probe"]
        argv += [f"--hide={p}" for p in _hide(settings, folder)]
        argv += [f"--read-only={p}" for p in read_only()]
        result = subprocess.run(argv, cwd=folder, capture_output=True,
                                text=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    lines = (result.stdout + result.stderr).strip().splitlines()
    line = lines[-1] if lines else "the sandbox printed nothing"
    kind, folders = cgroup.plan("course-kernel-probe")
    fallbacks = [] if kind != "none" else [
        "kernel limits per process only (no memory and pids control "
        "groups can be written here): memory is an address-space cap per "
        "process, processes a per-user cap"]
    if not cgroup.cpu_limited(folders):
        fallbacks.append(
            "no CPU control group can be written here: a kernel's "
            "processes share the CPU with everything else, and no CPU "
            "budget holds them")
    _PROBED[_batch(settings)] = line, fallbacks
    return line, fallbacks


def probed(settings):
    """``probe(settings)``, or what it found on this worker in this run
    (when a grading process was started early, ``warm_up``)."""
    return _PROBED.get(_batch(settings)) or probe(settings)


def installation():
    """The folder that holds the ``course_lib`` package the kernels use."""
    import course_lib

    return Path(course_lib.__file__).resolve().parent.parent


def read_only():
    """What the kernel sees, read-only: the Python installation and the
    ``course_lib`` package alone (not the repository around it)."""
    return sorted({str(installation() / "course_lib"), sys.prefix,
                   sys.base_prefix})


def _hide(settings, scratch):
    """The grader's list (its course folder, when this machine has it)
    and this machine's own: the scratch and what lies beside course_lib."""
    package = installation()
    return list(settings.get("hide", [])) + [
        str(package / n) for n in ("solutions", ".git", "course_tools",
                                   "_build_solutions")] + [str(scratch)]


class _Slot:
    """One worker thread's grading process and its scratch folder."""

    def __init__(self, settings):
        if settings.get("isolate", True):
            line, _ = _PROBED.get(_batch(settings)) or probe(settings)
            if line != "isolated":
                raise RuntimeError(
                    f"this worker cannot isolate the students' kernels "
                    f"({line}): it refuses to grade")
        self.scratch = Path(tempfile.mkdtemp(prefix="grade-class-",
                                             dir="/tmp"))
        self.settings = dict(settings, scratch=str(self.scratch),
                             hide=_hide(settings, self.scratch),
                             read_only=read_only())
        self.process, self.templates, self.count = None, {}, 0

    def grade(self, task, submission, template, limit_s):
        self.count += 1
        inbox = self.scratch / "in" / str(self.count)
        work = self.scratch / "work" / str(self.count)
        try:
            parcel.unpack_submission(submission, inbox)
            task = dict(task, submission=str(inbox), work=str(work),
                        **self._template(task["assignment"], template))
            result = self._ask(task, limit_s)
            graded = (work / "course" / task["autograded_dir"]
                      / task["student"] / task["assignment"])
            if graded.is_dir():
                result["autograded"] = parcel.pack_tree(graded)
        finally:
            shutil.rmtree(inbox, ignore_errors=True)
            shutil.rmtree(work, ignore_errors=True)
        result.pop("work", None)
        return result

    def _template(self, assignment, data):
        import hashlib

        digest = hashlib.sha256(data).hexdigest()[:16]
        home = self.scratch / "templates" / digest
        if digest not in self.templates:
            parcel.unpack_tree(data, home)
            self.templates[digest] = True
        return {"template": str(home / "course"),
                "template_db": str(home / "gradebook.db")}

    def start(self):
        if self.process is None:
            self.process = _spawn(self.settings)

    def _ask(self, task, limit_s):
        self.start()
        killed = threading.Event()

        def stop(process=self.process):
            killed.set()
            _kill(process)

        timer = threading.Timer(limit_s, stop)
        timer.start()
        try:
            self.process.stdin.write(json.dumps(task) + "\n")
            self.process.stdin.flush()
            line = self.process.stdout.readline()
        except OSError:
            line = ""
        timer.cancel()
        if line:
            return json.loads(line)
        why = (f"grading took more than {limit_s} s: stopped"
               if killed.is_set() else "the grading process died ("
               f"{_last_line(self.scratch)})")
        _kill(self.process)
        self.process = None
        # the grader's or the machine's failure: a kernel's own slowness
        # is stopped by its CPU budget and a cell's time limit first
        return ungraded(task, f"not graded: {why}; the next run grades "
                        "it")

    def close(self):
        if self.process is not None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=60)
                _stop_kernels(self.process.pid)
            except subprocess.TimeoutExpired:
                _kill(self.process)
        shutil.rmtree(self.scratch, ignore_errors=True)


def _spawn(settings):
    # the grader's alone (0600): no kernel holds it or may read it
    log = open(os.open(Path(settings["scratch"]) / "worker.log",
                       os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab")
    os.fchmod(log.fileno(), 0o600)
    # Only what grading needs: the zygote that forks the kernels is a
    # copy of the grading process, so nothing else of this environment
    # (an instructor's tokens, a database password) may be in its memory.
    env = {name: value for name, value in os.environ.items()
           if name in WORKER_ENVIRONMENT
           or name.startswith(("LC_", "JUPYTER_"))}
    env["PYTHONUNBUFFERED"] = "1"
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    process = subprocess.Popen(
        [sys.executable, "-I", "-u", "-m", "course_tools.classroom.worker",
         json.dumps(settings)], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=log, text=True, env=env,
        start_new_session=True,
        # not the grader's working folder: nbgrader changes it for a while
        # as it builds templates, in another thread, and a process whose
        # working folder is gone cannot load PyTorch (MKL's loader)
        cwd=settings["scratch"])
    log.close()
    # The grading process's own memory is capped too (kernels get less);
    # set from outside, as a preexec_fn is unsafe beside other threads.
    limit = max(8192, 2 * settings["memory_mb"]) * 2**20
    resource.prlimit(process.pid, resource.RLIMIT_AS, (limit, limit))
    return process


def _kill(process):
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()
    _stop_kernels(process.pid)


def _stop_kernels(pid):
    """Kill whatever the kernels of grading process ``pid`` left (their
    launchers die with it; a kernel that cleared its parent-death signal
    would not)."""
    from course_tools.classroom import box, cgroup

    uid = box.UID_BASE + pid
    box.kill_user(uid)
    cgroup.remove(cgroup.plan(f"course-kernel-{uid}")[1])


def _last_line(scratch):
    """The last line the grading process logged, to say why it died."""
    try:
        text = (Path(scratch) / "worker.log").read_text(errors="replace")
    except OSError:
        text = ""
    lines = text.strip().splitlines()
    return lines[-1][:300] if lines else "no log"
