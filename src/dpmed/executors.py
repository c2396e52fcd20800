"""Where the runs of a study execute: in this process, in a local process pool, or as Ray tasks on a cluster.

Every executor runs `dpmed.run.run_one` on each task and reports each outcome as it arrives: the run's record, or a
`RunFailure` whose traceback is also written to ``private/runs/<id>/error.json``. A failed run does not stop others
unless ``fail_fast``, which stops the runs in progress as Ctrl-C does; a finished run is never touched again (its
run.json is written atomically by run_one), so a crash, Ctrl-C or fail-fast stop loses at most the runs in progress,
and those continue from their checkpoints next time. A run's earlier error.json is deleted when it starts again, so
that `dpmed status` shows what happened last (an interruption after an old failure is an interruption).

What runs log reaches the caller's logging in this process and in a process pool: the pool's workers send their
records to this process, which hands each to the logger it was made by (so the caller's handlers, levels and filters
apply). Ray tasks' logs do not: Ray is started with ``log_to_driver=False`` (so that its workers' lines do not
interleave with the caller's), and they stay in Ray's own log files (``/tmp/ray/session_latest/logs`` on each node by
default; the cluster's log folder where it is set); their outcomes still come back. A worker ignores Ctrl-C: the
interrupt is this process's to handle, and it stops the workers (quietly) and re-raises. A worker told to stop
(SIGTERM, from this process or from outside: `kill`, SLURM's scancel) ends its run where it is, and this process
takes that as an interrupt of the study.
"""

from __future__ import annotations

import concurrent.futures as futures
import contextlib
import importlib.util
import ipaddress
import logging
import logging.handlers
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import tempfile
import threading
import time
import traceback
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence, Union

from pydantic_core import PydanticSerializationError   # installed with pydantic (its pinned core), not re-exported

from dpmed import memory
from dpmed.config import RunPlan
from dpmed.data import Dataset
from dpmed.errors import ConfigError
from dpmed.folders import RunFolder, write_json_atomic
from dpmed.interruption import check as check_interrupt
from dpmed.lock import holder_gone, write_holder
from dpmed.numbers import bytes_text
from dpmed.records import RunRecord, read_record
from dpmed.run import RunContext, run_one

__all__ = ["RunTask", "RunFailure", "Outcome", "make_executor", "check_executor_options", "EXECUTORS"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunTask:
    plan: RunPlan
    folder: RunFolder


@dataclass(frozen=True)
class RunFailure:
    """A run that raised: its id, ``Type: message``, and the file holding the whole traceback (None where that file
    could not be written, e.g. on a full disk: the failure is reported all the same)."""

    run_id: str
    error: str
    error_file: Path | None

    @property
    def traceback_note(self) -> str:
        """Where the traceback is, for the messages that report the failure."""
        if self.error_file is None:
            return "no traceback kept: its error file could not be written"
        return f"traceback in {self.error_file}"


Outcome = Union[RunRecord, RunFailure]
OnOutcome = Callable[[RunTask, Outcome], None]


def _failure(task: RunTask, error: str, details: str) -> RunFailure:
    """The run's failure, written to its error.json (``details``: the traceback, or what is known instead). Where
    that cannot be written (a full disk: often the very cause of the failure) the failure is still reported, and
    the other runs go on; what to do about the disk is told when the study writes its outputs. The run's shareable
    folder goes where the run left it empty: the report already lists the run as not finished."""
    with contextlib.suppress(OSError):     # absent, not empty, or not removable: left as it is
        task.folder.public.rmdir()
    try:
        task.folder.make_private()
        write_json_atomic(task.folder.error, {"run_id": task.plan.run_id, "error": error, "traceback": details},
                          owner_only=True)
    except OSError as exc:
        _log.warning("%s: could not write its error file %s (%s); the run failed with %s", task.plan.run_id,
                     task.folder.error, exc, error)
        return RunFailure(task.plan.run_id, error, None)
    return RunFailure(task.plan.run_id, error, task.folder.error)


def _is_interrupt(exc: Exception) -> bool:
    """Whether ``exc`` is a Ctrl-C in disguise. pydantic-core turns a KeyboardInterrupt raised inside a serialiser
    (a record being written when the signal lands) into a PydanticSerializationError that names it only in its
    message, with no __cause__ or __context__; left alone, an interrupted run would be recorded as a failed one."""
    if isinstance(exc, PydanticSerializationError) and "KeyboardInterrupt" in str(exc):
        return True
    return isinstance(exc.__cause__ or exc.__context__, KeyboardInterrupt)


def _execute(task: RunTask, context: RunContext) -> Outcome:
    """run_one, with any exception but an interrupt turned into a recorded failure, except after the run wrote its
    run.json (then its model is released, and the study's results count it: read back). An error.json of an earlier
    attempt is deleted first: left beside this attempt's checkpoint, it would make an interrupted run look failed.
    A run already finished is read back, not trained again: Ray retries a task whose worker died, also after it
    wrote its run.json, and a retrained run would be a second release of its images, with a new key where its
    worker had deleted the first."""
    if task.folder.is_finished:
        return _read_back(task)
    _log.info("%s: started", task.plan.run_id)
    task.folder.error.unlink(missing_ok=True)
    try:
        record = run_one(task.plan, context, task.folder)
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as exc:  # noqa: BLE001 - recorded in error.json and reported; the study goes on
        stop = exc.__cause__ or exc.__context__
        if isinstance(stop, SystemExit):   # a worker told to stop, inside a library's clean-up (torch.save's
            raise stop from None          # zip writer then raises "unexpected pos"): a stop, not a failed run
        if _is_interrupt(exc):
            raise KeyboardInterrupt from exc
        if task.folder.is_finished:     # failed after its run.json (deleting its key): released, so finished
            _log.warning("%s: %s: %s, after its run.json was written: the run is finished", task.plan.run_id,
                         type(exc).__name__, exc)
            return _read_back(task)
        return _failure(task, f"{type(exc).__name__}: {exc}", traceback.format_exc())
    return record


# A worker killed from outside (the out-of-memory killer, kill -9) breaks the whole pool: its run fails with this
# (the runs the pool then stopped in the other workers, and those no worker had taken up, are left unfinished), and
# the next `dpmed run` continues each from its checkpoint. So does every run where the workers could not start: each
# imports the script that called run_study, which, unguarded, calls it again.
WORKER_DIED = ("a worker process died (killed from outside: out of memory, kill -9) before this run finished; run "
               "the study again: unfinished runs continue from their checkpoints (with fewer --workers, or a smaller "
               "training.physical_batch_size, if memory ran out). From a Python script, call run_study with "
               "workers > 1 under `if __name__ == \"__main__\":`, or each worker fails as it starts")
# A worker killed while it held no unfinished run (still starting, or between runs) breaks the pool all the same: no
# run fails for it, and the runs the pool stopped or never started are left unfinished; this says why.
WORKER_DIED_IDLE = ("a worker process died (killed from outside: out of memory, kill -9) while it held no unfinished "
                    "run, and the pool stopped the other workers; run the study again: unfinished runs continue from "
                    "their checkpoints (with fewer --workers, or a smaller training.physical_batch_size, if memory ran "
                    "out)")


class InProcessExecutor:
    """One run after another in this process (the default; progress bars work)."""

    def map(self, tasks: Sequence[RunTask], context: RunContext, on_outcome: OnOutcome, *, fail_fast: bool) -> None:
        for task in tasks:
            outcome = _execute(task, context)
            on_outcome(task, outcome)
            if fail_fast and isinstance(outcome, RunFailure):
                return


_WORKER_CONTEXT: RunContext | None = None  # set once per worker process by _start_worker
_TAKEN: Any = None                          # likewise: the parent's flags of the runs a worker took up
TAKEN_UP, STOPPED = 1, 2                    # the flags: a worker took the run up; it stopped the run when told to


def _start_worker(contexts: Any, records: Any, level: int, setup: Callable[[], None] | None, taken: Any) -> None:
    """Runs in each fresh worker process: leave Ctrl-C to the parent; take SIGTERM as the order to stop
    (`_stop_worker`; one that comes while this runs is remembered, and the worker then runs nothing); send every log
    record at ``level`` or above to the parent through ``records`` (the parent decides what to show); run the
    caller's ``setup``; then take the study's context (the dataset) from ``contexts``, once per worker; mark in
    ``taken`` (shared memory, one byte per run) each run as it takes it up, and as stopped where the worker is
    told to stop during it (`_execute_in_worker`). The context comes through a queue rather than the start-up
    arguments so that starting a worker does not wait for it to read the whole dataset. Each run sets its own thread
    count (``training.threads``), so its numbers do not depend on the executor."""
    global _WORKER_CONTEXT, _STARTED, _TAKEN
    _TAKEN = taken
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _stop_worker)
    if hasattr(signal, "pthread_sigmask"):   # started with SIGINT blocked: a Ctrl-C pending since is dropped now
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=_end_with_parent, args=(parent.sentinel,), name="dpmed-parent-watch",
                         daemon=True).start()
    root = logging.getLogger()
    root.handlers[:] = [logging.handlers.QueueHandler(records)]
    root.setLevel(level)
    if setup is not None:
        setup()
    _WORKER_CONTEXT = contexts.get()
    _STARTED = True


_STOPPING = False   # set in a worker by _stop_worker
_STARTED = False    # set in a worker once _start_worker is done
_IDLE = threading.Event()   # set in a worker while it runs no run
_IDLE.set()


def _end_with_parent(sentinel: Any) -> None:
    """In each worker, on a thread of its own: once the parent is gone (killed with kill -9 or by the
    out-of-memory killer: it could not stop its workers), stop as on SIGTERM (the run in progress ends where it is,
    its checkpoint stays) and exit once no run is in progress. Left alone, the worker would go on to train the runs
    already queued for it, unseen, beside the next `dpmed run` of the folder (which takes over the dead parent's
    lock), and then wait for work for ever, holding its copy of the dataset."""
    global _STOPPING
    multiprocessing.connection.wait([sentinel])
    _STOPPING = True
    os.kill(os.getpid(), signal.SIGTERM)
    _IDLE.wait()
    os._exit(128 + signal.SIGTERM)


def _stop_worker(signum: int, frame: Any) -> None:
    """SIGTERM in a worker (the parent stops the study, or `kill` or SLURM's scancel stops the worker): end the
    run in progress (its checkpoint stays), start no other, and exit the normal way, so that what the worker holds
    (named semaphores, queues) is cleaned up instead of reported as leaked. While the worker starts, only remember
    it: an exception raised in the pool's initializer would be logged with its traceback."""
    global _STOPPING
    _STOPPING = True
    if _STARTED:
        raise SystemExit(128 + signum)


def _execute_in_worker(task: RunTask, index: int) -> Outcome:
    assert _WORKER_CONTEXT is not None
    if _STOPPING:
        raise SystemExit(128 + signal.SIGTERM)
    _TAKEN[index] = TAKEN_UP
    _IDLE.clear()
    try:
        return _execute(task, _WORKER_CONTEXT)
    except SystemExit:   # told to stop: so that the parent, where the pool broke, tells it from the run that was killed
        _TAKEN[index] = STOPPED
        raise
    finally:
        _IDLE.set()


def _forward(records: Any) -> None:
    """In the parent: hand each worker record to the logger that made it, as if it had been logged here. As here,
    dp_accounting's absl warnings are dropped where the root logger has no handler (`dpmed.accounting.epsilon`): a
    worker's root always has one (the queue to here), and Python's last resort would print them."""
    while True:
        record = records.get()
        if record is None:
            return
        logger = logging.getLogger(record.name)
        if logger.isEnabledFor(record.levelno) and (logging.root.handlers or record.name != "absl"):
            logger.handle(record)


@contextlib.contextmanager
def _interrupts_held_while_spawning() -> Iterator[None]:
    """Hold back Ctrl-C (block SIGINT, not ignore it) in this thread while worker processes start: they inherit the
    blocked signal from their first instruction on, so a Ctrl-C during their start-up cannot print a traceback in
    each, and they ignore it for good once started (`_start_worker`). Here the interrupt is only delayed: it
    arrives as soon as the workers have started. SIGTERM is not held back: a worker still importing (it holds
    nothing yet) is best ended at once, so that stopping the study is quick."""
    if not hasattr(signal, "pthread_sigmask"):   # pragma: no cover - Windows
        yield
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _stop_workers(pool: futures.ProcessPoolExecutor, *, grace: float = 30.0) -> None:
    """Stop the pool's workers now (after Ctrl-C, SIGTERM or a fail-fast failure): each ends its run where it is (the
    run continues from its last checkpoint next time) and exits cleanly; one that has not exited after ``grace``
    seconds is killed. Runs already handed to a worker cannot be cancelled, only stopped this way."""
    processes = list(getattr(pool, "_processes", {}).values())
    for process in processes:
        if process.is_alive():
            process.terminate()
    pool.shutdown(wait=False, cancel_futures=True)   # the workers get their end-of-work signal
    deadline = time.monotonic() + grace
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()


def _check_room_for_copies(dataset: Dataset, copies: int) -> None:
    """Each worker of a process pool holds its own copy of the dataset (spawned processes share no memory), and
    the kernel kills a pool that outgrows the memory run by run. Refuse ``copies`` that cannot fit even with swap
    before any is sent, saying how many workers fit; warn where they fit only with swap (`dpmed.memory`)."""
    size = dataset.image_bytes
    need, room = copies * size, memory.headroom()
    if room is None or need <= room.ram:
        return
    fit = room.ram // max(size, 1)
    fewer = f"use --workers {fit}" if fit >= 2 else "run without --workers (this process holds the dataset already)"
    what = (f"each of the {copies} worker processes holds its own copy of the dataset's {bytes_text(size)} of images, "
            f"{bytes_text(need)} in all")
    if need > room.ram + room.swap:
        raise ConfigError(f"{what}, and {room.describe()}: {fewer}, or set a smaller "
                          "data.image_size; each run needs memory besides")
    _log.warning("%s, more than the %s free: the machine will swap, which is slow (%s)", what, bytes_text(room.ram),
                 fewer)


def _worker_context(context: RunContext, at_once: int) -> RunContext:
    """The context of runs in workers: no progress bars (several would interleave), and up to ``at_once`` runs that
    train at the same time: with 2 or more, not ``alone`` (each run's seconds carry the others' load, a DP-SGD run's
    too, and are private: `dpmed.records.Timing`), and each run's fixed features get its share of the free memory
    (`dpmed.training.fixed_features`), which every run reads as it starts."""
    return replace(context, progress=False, at_once=max(context.at_once, at_once))


class ProcessPoolExecutor:
    """``workers`` runs at a time in spawned processes (each run with its own ``training.threads``).

    The dataset is sent to each worker once. Progress bars are off (several would interleave); the workers' log
    records come back to this process; ``setup`` runs in each worker after that (e.g. the command line's filter of
    known harmless messages)."""

    def __init__(self, workers: int, *, setup: Callable[[], None] | None = None) -> None:
        self.workers = workers
        self.setup = setup

    def map(self, tasks: Sequence[RunTask], context: RunContext, on_outcome: OnOutcome, *, fail_fast: bool) -> None:
        _check_room_for_copies(context.dataset, min(self.workers, len(tasks)))
        spawn = multiprocessing.get_context("spawn")
        contexts, records = spawn.Queue(), spawn.Queue()
        # one byte per run, set by the worker that takes it up; no lock, which a killed worker could leave held
        taken = spawn.RawArray("b", len(tasks))
        for _ in range(min(self.workers, len(tasks))):
            contexts.put(_worker_context(context, min(self.workers, len(tasks))))
        listener = threading.Thread(target=_forward, args=(records,), name="dpmed-worker-logs", daemon=True)
        listener.start()
        level = min(logging.getLogger().getEffectiveLevel(), logging.getLogger("dpmed").getEffectiveLevel())
        pool = futures.ProcessPoolExecutor(max_workers=min(self.workers, len(tasks)) or 1, mp_context=spawn,
                                           initializer=_start_worker,
                                           initargs=(contexts, records, level, self.setup, taken))
        reported: set[futures.Future] = set()
        broken: list[futures.Future] = []   # told once every worker has exited: each run's flag is then final
        stopped = False
        try:
            with _interrupts_held_while_spawning():
                pending = {pool.submit(_execute_in_worker, task, i): task for i, task in enumerate(tasks)}
            index = {future: i for i, future in enumerate(pending)}
            for done in _as_completed_interruptibly(pending):
                try:
                    outcome = done.result()
                except BrokenProcessPool:
                    broken.append(done)
                    continue
                except SystemExit:   # the worker was told to stop from outside (SIGTERM): the study is stopped
                    raise KeyboardInterrupt from None
                reported.add(done)
                on_outcome(pending[done], outcome)
                if fail_fast and isinstance(outcome, RunFailure):
                    stopped = True
                    _stop_workers(pool)   # runs already handed to a worker would go on, unseen, to their end
                    break
        except KeyboardInterrupt:
            _stop_workers(pool)
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            # Every worker has exited. A context no worker took (Ctrl-C while they started) is never read: waiting
            # for it to be flushed into the pipe would wait for ever.
            contexts.cancel_join_thread()
            records.put(None)
            listener.join(timeout=10)
            if listener.is_alive():   # pragma: no cover - a worker's record that cannot be unpickled
                records.cancel_join_thread()
            for queue in (contexts, records):
                queue.close()
                queue.join_thread()
        anyone_started = any(taken)
        blamed = False      # a run failed for the death, naming it
        for done in broken:
            outcome = _broken_off(pending[done], taken[index[done]], anyone_started=anyone_started)
            if outcome is not None:
                reported.add(done)
                on_outcome(pending[done], outcome)
                blamed = blamed or isinstance(outcome, RunFailure)
        if broken and not blamed:
            _log.warning("%s", WORKER_DIED_IDLE)
        if stopped:
            for task, outcome in _ended_before_the_stop(pending, reported):
                on_outcome(task, outcome)


def _broken_off(task: RunTask, flag: int = TAKEN_UP, *, anyone_started: bool = True) -> Outcome | None:
    """The outcome of a run in a pool that a dead worker broke, once every worker has exited (``flag``: the run's
    byte in ``taken``): finished where it wrote its run.json before (its record read back, `_read_back`, as after a
    fail-fast stop); None (left unfinished) where the pool stopped its worker (`STOPPED`) or no worker took it up
    while others did; failed otherwise: its own worker died, or none could start. Reported failed, a finished run
    was left out of the study's results and kept an error.json beside its run.json for good; a run stopped or never
    started said "a worker process died before this run finished", as the run whose worker did, so that nothing told
    which one that was, and it kept an error.json for a run that had failed in nothing."""
    if task.folder.is_finished:
        return _read_back(task)
    if flag == STOPPED or (flag == 0 and anyone_started):
        return None
    return _failure(task, WORKER_DIED, "no traceback: the process was killed")


def _read_back(task: RunTask) -> Outcome:
    """The record of a run that wrote its run.json before its worker was killed or stopped; failed where that record
    cannot be read: not this run's to stop the pool loop over, where the others' outcomes still count. Its privacy
    key and checkpoint are deleted here, as its worker would have done next (`RunFolder.discard_secrets`): kept,
    they regenerate the run's noise, and after a study that ends well nothing else would delete them."""
    try:
        record = read_record(task.folder.record)
    except ConfigError as exc:
        return _failure(task, WORKER_DIED, f"no traceback: the process was killed, and its run.json {exc}")
    try:
        task.folder.discard_secrets()
    except OSError as exc:      # a cluster's folder this process may read but not change: the study goes on
        _log.warning("%s: could not delete its privacy key and checkpoint (%s); delete %s and %s yourself: they "
                     "regenerate the run's noise", task.plan.run_id, exc, task.folder.privacy_key,
                     task.folder.checkpoint)
    return record


def _as_completed_interruptibly(fs: Iterable[futures.Future]) -> Iterator[futures.Future]:
    """``futures.as_completed(fs)``, waking every second: on Windows, before Python 3.14, a wait on a lock without a
    timeout cannot be interrupted, so Ctrl-C would have waited for the next run to end (CPython issue 74157); and a
    Ctrl-C that Python lost is raised again (`dpmed.interruption`)."""
    remaining = set(fs)
    while remaining:
        check_interrupt()
        done, remaining = futures.wait(remaining, timeout=1.0, return_when=futures.FIRST_COMPLETED)
        yield from done


def _ended_before_the_stop(pending: dict[futures.Future, RunTask],
                           reported: set[futures.Future]) -> Iterator[tuple[RunTask, Outcome]]:
    """After a fail-fast stop, once the pool is shut down: the runs that ended before their workers were stopped but
    were not reported yet, with their outcomes, so that the study counts them. A run that wrote its run.json just
    as it was stopped is finished (its record is read back); the others were stopped, or never started."""
    for future, task in pending.items():
        if future in reported:
            continue
        if future.done() and not future.cancelled() and future.exception() is None:
            yield task, future.result()
        elif task.folder.is_finished:
            yield task, _read_back(task)


RAY_WORKER_DIED = ("its Ray worker died (killed from outside: out of memory, kill -9, or its node lost) before this "
                   "run finished, and Ray's retries did too; run the study again: unfinished runs continue from their "
                   "checkpoints (with a smaller training.physical_batch_size if memory ran out)")
RAY_MISSING = "--executor ray needs Ray, which is not installed: pip install 'dpmed[ray]'"
# Ray's switch for a machine that no other node joins (its default on macOS and Windows): the node's address is then
# 127.0.0.1, and its servers (GCS, raylet, workers) listen there. Read as Ray is imported.
RAY_LOOPBACK = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


class RayExecutor:
    """Each run as a Ray task with its CPU and GPU needs (pip install 'dpmed[ray]'); same folders, same resume.

    ``address``: an existing cluster (e.g. "ray://head:10001" or "auto"); None starts a local instance. The output
    folder must be reachable at the same path from every node (a shared filesystem).

    Every task carries the decoded dataset through Ray's object store, which may spill it to disk, and runs on any
    node that joins the cluster with its token. A local instance therefore keeps its files (spilled objects, logs
    that tell object sizes, the port files) in a folder of this user's alone, deleted afterwards (Ray makes its own
    temp folder world-writable, so it goes one level down); and a token file other users can read is warned of.
    Its servers listen on 127.0.0.1 (`RAY_LOOPBACK`): on Linux Ray's own default is every network interface, which
    offers a cluster that runs code, with the training images, to whoever reaches the machine."""

    def __init__(self, *, address: str | None, cpus_per_run: float = 1.0, gpus_per_run: float = 0.0) -> None:
        if address is None and not os.environ.get("RAY_ADDRESS"):    # a local instance; a user's own setting stays
            os.environ.setdefault(RAY_LOOPBACK, "0")
        try:
            import ray
        except ImportError:
            raise ConfigError(RAY_MISSING) from None
        self.ray = ray
        self.address = address
        self.cpus_per_run = cpus_per_run
        self.gpus_per_run = gpus_per_run

    def map(self, tasks: Sequence[RunTask], context: RunContext, on_outcome: OnOutcome, *, fail_fast: bool) -> None:
        ray = self.ray
        started_here = not ray.is_initialized()
        local = started_here and self.address is None and not os.environ.get("RAY_ADDRESS")   # a new instance
        own = _own_ray_folder() if local else None
        try:
            if started_here:
                options = {} if own is None else {"_temp_dir": str(Path(own) / "ray")}
                try:
                    ray.init(address=self.address, include_dashboard=False, log_to_driver=False, **options)
                except (ValueError, ConnectionError) as exc:   # no client for ray://, no cluster at the address
                    where = f" --address {self.address}" if self.address else ""
                    raise ConfigError(
                        f"--executor ray{where}: Ray could not connect ({exc}); check that the cluster runs there, "
                        "or leave --address out to start a local instance (a ray:// address needs Ray's client, "
                        "which pip install 'dpmed[ray]' installs)") from None
            if local:
                _warn_reachable(ray.util.get_node_ip_address())
            _warn_open_token()
            shared = ray.put(_worker_context(context, len(tasks)))   # at most all at once, on one node
            remote = ray.remote(num_cpus=self.cpus_per_run, num_gpus=self.gpus_per_run)(_execute)
            pending = {remote.remote(task, shared): task for task in tasks}
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                task = pending.pop(ready[0])
                outcome = self._outcome(ready[0], task)
                on_outcome(task, outcome)
                if fail_fast and isinstance(outcome, RunFailure):
                    for ref in pending:
                        ray.cancel(ref)
                    for task, outcome in self._ended_before_the_stop(pending):
                        on_outcome(task, outcome)
                    return
        finally:
            if started_here and ray.is_initialized():
                ray.shutdown()
            if own is not None:
                shutil.rmtree(own, ignore_errors=True)

    def _outcome(self, ref: Any, task: RunTask) -> Outcome:
        """The task's outcome; where Ray lost it (its worker killed, by Ray's memory monitor, the kernel's or kill -9,
        or its node gone, after Ray's retries), the run failed with the reason, as in a process pool, and the other
        runs go on: raised, Ray's error stopped the study as a dpmed "internal error" to be reported. A run that
        wrote its run.json before its worker died is finished all the same. A task that raised, its worker alive (a
        node without dpmed: "The remote function failed to import on the worker"), fails with its own error: told
        that its worker died of memory or kill -9, its user would have run the same study again to the same end."""
        try:
            return self.ray.get(ref)
        except self.ray.exceptions.RayError as exc:
            if task.folder.is_finished:
                return _read_back(task)
            if isinstance(exc, self.ray.exceptions.RayTaskError):
                cause = exc.cause
                return _failure(task, f"{type(cause).__name__}: {cause}", f"{type(exc).__name__}: {exc}")
            return _failure(task, RAY_WORKER_DIED, f"{type(exc).__name__}: {exc}")

    def _ended_before_the_stop(self, pending: dict[Any, RunTask], *,
                               grace: float = 30.0) -> Iterator[tuple[RunTask, Outcome]]:
        """After a fail-fast stop: the runs that ended before their cancellation reached them, with their outcomes,
        so that the study counts them (as `_ended_before_the_stop` does for the process pool). A cancelled run raises
        on ``get``; one that wrote its run.json just as it was stopped is finished all the same. Those still going
        after ``grace`` seconds, one deadline for them all (waited run by run, N runs kept a failed study for N times
        the grace), are killed (``force``) and waited for as long again: left going, one could write its run.json
        and be killed by Ray's shutdown, or the driver's exit, before deleting its privacy key and checkpoint, which
        regenerate its noise and then stayed in private/ after a study that counted it nowhere."""
        going = {}
        deadline = time.monotonic() + grace
        for ref, task in pending.items():
            try:
                yield task, self.ray.get(ref, timeout=max(0.0, deadline - time.monotonic()))
            except self.ray.exceptions.GetTimeoutError:
                going[ref] = task
            except self.ray.exceptions.RayError:
                if task.folder.is_finished:
                    yield task, _read_back(task)
        for ref in going:
            self.ray.cancel(ref, force=True)
        deadline = time.monotonic() + grace
        for ref, task in going.items():
            try:
                yield task, self.ray.get(ref, timeout=max(0.0, deadline - time.monotonic()))
            except self.ray.exceptions.RayError:
                if task.folder.is_finished:
                    yield task, _read_back(task)


def _own_ray_folder() -> str:
    """A new folder of this user's alone (0700) for a local Ray instance, naming this process as its owner (as a lock
    file does: PID, host, start time). First, this user's such folders whose owner is gone are deleted: a study
    killed with kill -9 skips the deletion after Ray's shutdown, and its folder kept Ray's logs, which tell the
    dataset's size, and any objects Ray spilled (the decoded images) for good. A folder whose owner still runs
    (another study), runs on another host (a temp folder shared over the network) or is not named (an older
    dpmed's) is left alone."""
    for folder in Path(tempfile.gettempdir()).glob("dpmed-ray-*"):
        with contextlib.suppress(OSError):
            if folder.stat().st_uid == getattr(os, "getuid", lambda: None)() and holder_gone(folder / "owner"):
                shutil.rmtree(folder, ignore_errors=True)
    own = tempfile.mkdtemp(prefix="dpmed-ray-")
    write_holder(Path(own) / "owner")
    return own


def _warn_reachable(node: str) -> None:
    """Warn where a local instance's node address is not loopback (Ray imported before dpmed set `RAY_LOOPBACK`, or
    that set to "1"): its servers then listen on every network interface."""
    with contextlib.suppress(ValueError):      # a host name, not an address: nothing to tell from
        if ipaddress.ip_address(node).is_loopback:
            return
    if node != "localhost":
        _log.warning("the local Ray instance listens on every network interface (its node address is %s), so whoever "
                     "reaches this machine can reach it: import ray only after dpmed starts it, or set %s=0 before "
                     "Python starts", node, RAY_LOOPBACK)


def _warn_open_token() -> None:
    """Warn where Ray's token file (token authentication, on by default in recent Ray) is readable by other users:
    Ray writes it 0644, and in a home folder others can enter, whoever reads it can join the cluster as a node and
    be sent runs, with the training images. A file in a folder that no other user can enter (a home folder of 0700,
    as Ray 2.60 left ~/.ray/auth_token 0644 in one) is not readable by them: warned of on every run, it taught users
    to read past the warning."""
    path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
    try:
        mode = path.stat().st_mode & 0o777
        shut = any(not folder.stat().st_mode & 0o011 for folder in path.resolve().parents)
    except OSError:
        return
    if mode & 0o044 and not shut:
        _log.warning("%s, the token that lets a node join this Ray cluster, is readable by other users (mode %o): "
                     "whoever can read it can join and be sent runs, with the training images; run chmod 600 %s",
                     path, mode, path)


def check_executor_options(name: str, *, workers: int | None, address: str | None) -> None:
    """ConfigError where one executor's own option is given to the other, so that neither is ignored: ``address``
    is Ray's only, ``workers`` (None: not given) local's only; and where Ray is asked for and not installed, the
    executor is unknown, or ``workers`` is no whole number (a float pool size failed only as the pool started, after
    the data were read) or below 1. `dpmed run` and `run_study` check before the data are read."""
    if name not in EXECUTORS:
        raise ConfigError(f"unknown executor {name!r}; use one of {', '.join(EXECUTORS)}")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)):   # a Python caller's slip
        raise ConfigError(f"workers (--workers) must be a whole number, got {workers!r} ({type(workers).__name__})")
    if workers is not None and workers < 1:
        raise ConfigError(f"workers (--workers) must be at least 1, got {workers}")
    if name == "ray" and importlib.util.find_spec("ray") is None:
        raise ConfigError(RAY_MISSING)
    if name != "ray" and address is not None:
        raise ConfigError(f"--address {address} names a Ray cluster and applies only with --executor ray; add "
                          "--executor ray to train there, or leave --address out to train here")
    if name == "ray" and workers is not None:
        raise ConfigError(f"--workers {workers} counts local processes and does not apply with --executor ray "
                          "(Ray runs each run as a task of its own); leave --workers out, or use --executor local")


def make_executor(name: str, *, workers: int = 1, address: str | None = None, gpus_per_run: float = 0.0,
                  worker_setup: Callable[[], None] | None = None) -> Any:
    """The executor called ``name`` ("local" or "ray"); local with workers > 1 is a process pool, whose workers run
    ``worker_setup`` (a module-level function) once at start. ``address`` is Ray's only and ``workers`` local's
    only: given to the other executor, either is refused."""
    check_executor_options(name, workers=None if workers == 1 else workers, address=address)
    if name == "ray":
        return RayExecutor(address=address, gpus_per_run=gpus_per_run)
    return InProcessExecutor() if workers == 1 else ProcessPoolExecutor(workers, setup=worker_setup)


EXECUTORS = ("local", "ray")
