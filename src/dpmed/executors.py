"""Where the runs of a study execute: in this process, in a local process pool, or as Ray tasks on a cluster.

Every executor runs `dpmed.run.run_one` on each task and reports each outcome as it arrives: the run's record, or a
`RunFailure` whose traceback is also written to ``runs/<id>/error.json``. A failed run does not stop the others
unless ``fail_fast``; a finished run is never touched again (its run.json is written atomically by run_one), so a
crash or Ctrl-C loses at most the runs in progress, and those continue from their checkpoints next time.
"""

from __future__ import annotations

import concurrent.futures as futures
import multiprocessing
import traceback
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence, Union

from dpmed.config import RunPlan
from dpmed.errors import ConfigError
from dpmed.folders import RunFolder, write_json_atomic
from dpmed.records import RunRecord
from dpmed.run import RunContext, run_one

__all__ = ["RunTask", "RunFailure", "Outcome", "make_executor", "EXECUTORS"]


@dataclass(frozen=True)
class RunTask:
    plan: RunPlan
    folder: RunFolder


@dataclass(frozen=True)
class RunFailure:
    """A run that raised: its id, ``Type: message``, and the file holding the whole traceback."""

    run_id: str
    error: str
    error_file: Path


Outcome = Union[RunRecord, RunFailure]
OnOutcome = Callable[[RunTask, Outcome], None]


def _execute(task: RunTask, context: RunContext) -> Outcome:
    """run_one, with any exception but an interrupt turned into a recorded failure."""
    error_file = task.folder.error
    try:
        record = run_one(task.plan, context, task.folder)
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as exc:  # noqa: BLE001 - recorded in error.json and reported; the study goes on
        task.folder.public.mkdir(parents=True, exist_ok=True)
        write_json_atomic(error_file, {"run_id": task.plan.run_id, "error": f"{type(exc).__name__}: {exc}",
                                       "traceback": traceback.format_exc()})
        return RunFailure(task.plan.run_id, f"{type(exc).__name__}: {exc}", error_file)
    error_file.unlink(missing_ok=True)  # an earlier failure of this run is history now
    return record


class InProcessExecutor:
    """One run after another in this process (the default; progress bars work)."""

    def map(self, tasks: Sequence[RunTask], context: RunContext, on_outcome: OnOutcome, *, fail_fast: bool) -> None:
        for task in tasks:
            outcome = _execute(task, context)
            on_outcome(task, outcome)
            if fail_fast and isinstance(outcome, RunFailure):
                return


_WORKER_CONTEXT: RunContext | None = None  # set once per worker process by _start_worker


def _start_worker(context: RunContext) -> None:
    """Runs in each fresh worker process: keep the dataset once per worker. Each run sets its own thread count
    (``training.threads``), so its numbers do not depend on the executor."""
    global _WORKER_CONTEXT
    _WORKER_CONTEXT = context


def _execute_in_worker(task: RunTask) -> Outcome:
    assert _WORKER_CONTEXT is not None
    return _execute(task, _WORKER_CONTEXT)


class ProcessPoolExecutor:
    """``workers`` runs at a time in spawned processes (each run with its own ``training.threads``).

    The dataset is sent to each worker once. Progress bars are off (several would interleave); outcomes are logged
    as runs finish."""

    def __init__(self, workers: int) -> None:
        self.workers = workers

    def map(self, tasks: Sequence[RunTask], context: RunContext, on_outcome: OnOutcome, *, fail_fast: bool) -> None:
        quiet = replace(context, progress=False)
        pool = futures.ProcessPoolExecutor(max_workers=self.workers, mp_context=multiprocessing.get_context("spawn"),
                                           initializer=_start_worker, initargs=(quiet,))
        try:
            pending = {pool.submit(_execute_in_worker, task): task for task in tasks}
            for done in futures.as_completed(pending):
                outcome = done.result()
                on_outcome(pending[done], outcome)
                if fail_fast and isinstance(outcome, RunFailure):
                    break
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


class RayExecutor:
    """Each run as a Ray task with its CPU and GPU needs (pip install 'dpmed[ray]'); same folders, same resume.

    ``address``: an existing cluster (e.g. "ray://head:10001" or "auto"); None starts a local instance. The output
    folder must be reachable at the same path from every node (a shared filesystem)."""

    def __init__(self, *, address: str | None, cpus_per_run: float = 1.0, gpus_per_run: float = 0.0) -> None:
        try:
            import ray
        except ImportError:
            raise ConfigError("--executor ray needs Ray: pip install 'dpmed[ray]'") from None
        self.ray = ray
        self.address = address
        self.cpus_per_run = cpus_per_run
        self.gpus_per_run = gpus_per_run

    def map(self, tasks: Sequence[RunTask], context: RunContext, on_outcome: OnOutcome, *, fail_fast: bool) -> None:
        ray = self.ray
        started_here = not ray.is_initialized()
        if started_here:
            ray.init(address=self.address, include_dashboard=False, log_to_driver=False)
        try:
            shared = ray.put(replace(context, progress=False))
            remote = ray.remote(num_cpus=self.cpus_per_run, num_gpus=self.gpus_per_run)(_execute)
            pending = {remote.remote(task, shared): task for task in tasks}
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                task = pending.pop(ready[0])
                outcome = ray.get(ready[0])
                on_outcome(task, outcome)
                if fail_fast and isinstance(outcome, RunFailure):
                    for ref in pending:
                        ray.cancel(ref)
                    return
        finally:
            if started_here:
                ray.shutdown()


def make_executor(name: str, *, workers: int = 1, address: str | None = None,
                  gpus_per_run: float = 0.0) -> Any:
    """The executor called ``name`` ("local" or "ray"); local with workers > 1 is a process pool."""
    if name not in EXECUTORS:
        raise ConfigError(f"unknown executor {name!r}; use one of {', '.join(EXECUTORS)}")
    if workers < 1:
        raise ConfigError(f"--workers must be at least 1, got {workers}")
    if name == "ray":
        return RayExecutor(address=address, gpus_per_run=gpus_per_run)
    return InProcessExecutor() if workers == 1 else ProcessPoolExecutor(workers)


EXECUTORS = ("local", "ray")
