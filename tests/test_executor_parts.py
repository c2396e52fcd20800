"""The parts of the process pool and of Ray's executor that whole studies reach only by timing or by a failure of
the machine: a worker told to stop (SIGTERM) while it starts or runs, the parent's relay of worker log records, the
runs counted after a stop (each once), Ctrl-C held back while workers spawn, the memory check of the workers' copies,
and, against a fake Ray, its workers dying and the folder, token and network of a local instance."""

from __future__ import annotations

import functools
import json
import logging
import os
import queue
import shutil
import signal
import sys
import tempfile
import threading
from concurrent import futures
from pathlib import Path
from types import SimpleNamespace

import pytest

from dpmed import executors
from dpmed.errors import ConfigError
from dpmed.folders import StudyFolder
from dpmed.memory import Headroom
from dpmed.run import RunContext


def test_a_worker_told_to_stop_while_starting_runs_nothing_and_once_started_ends_its_run(monkeypatch):
    monkeypatch.setattr(executors, "_STOPPING", False)
    monkeypatch.setattr(executors, "_STARTED", False)
    monkeypatch.setattr(executors, "_WORKER_CONTEXT", object())
    monkeypatch.setattr(executors, "_TAKEN", taken := [0, 0])
    monkeypatch.setattr(executors, "_execute", lambda task, context: "ran")
    assert executors._execute_in_worker("task", 0) == "ran"
    assert taken == [1, 0]                                           # the parent sees which runs were taken up
    executors._stop_worker(signal.SIGTERM, None)                    # while starting: only remembered
    with pytest.raises(SystemExit) as stop:
        executors._execute_in_worker("task", 1)
    assert stop.value.code == 128 + signal.SIGTERM
    assert taken == [1, 0]                                           # told to stop: never taken up
    monkeypatch.setattr(executors, "_STARTED", True)
    with pytest.raises(SystemExit):                                  # started: the run in progress ends now
        executors._stop_worker(signal.SIGTERM, None)


def test_a_run_its_worker_was_told_to_stop_during_is_marked_stopped_not_taken_up(monkeypatch):
    """Where a dead worker broke the pool, the parent tells the run whose worker died (failed) from the runs the pool
    stopped in the other workers (left to continue) by this mark."""
    monkeypatch.setattr(executors, "_STOPPING", False)
    monkeypatch.setattr(executors, "_WORKER_CONTEXT", object())
    monkeypatch.setattr(executors, "_TAKEN", taken := [0, 0])

    def stopped(task, context):
        raise SystemExit(128 + signal.SIGTERM)                       # SIGTERM in the middle of the run

    monkeypatch.setattr(executors, "_execute", stopped)
    with pytest.raises(SystemExit):
        executors._execute_in_worker("task", 1)
    assert taken == [0, executors.STOPPED]


def test_worker_records_reach_their_own_logger_at_its_own_level_and_the_relay_ends():
    records = queue.Queue()
    named = logging.getLogger("dpmed.test.relay")
    named.setLevel(logging.WARNING)
    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    handler = Keep()
    named.addHandler(handler)
    try:
        for level, text in ((logging.INFO, "below its level"), (logging.WARNING, "at its level")):
            records.put(logging.LogRecord("dpmed.test.relay", level, __file__, 1, text, None, None))
        records.put(None)
        relay = threading.Thread(target=executors._forward, args=(records,), daemon=True)
        relay.start()
        relay.join(5)
        assert not relay.is_alive() and seen == ["at its level"]
    finally:
        named.removeHandler(handler)
        named.setLevel(logging.NOTSET)


def test_a_worker_s_accountant_warning_is_not_printed_where_the_caller_configured_no_logging(monkeypatch, capsys):
    """In one process, dp_accounting's "failed to converge" (logged through absl) is dropped where the root logger
    has no handler (`dpmed.accounting.epsilon`); relayed from a worker (workers=2), Python's last-resort handler
    printed it, against README's "without [logging configured], nothing is printed". dpmed's own warnings show."""
    monkeypatch.setattr(logging.root, "handlers", [])
    records = queue.Queue()
    for name, text in (("absl", "_compute_log_a_frac failed to converge"), ("dpmed.study", "a run FAILED")):
        records.put(logging.LogRecord(name, logging.WARNING, __file__, 1, text, None, None))
    records.put(None)
    executors._forward(records)
    assert capsys.readouterr().err == "a run FAILED\n"


def _task(run_id, finished=False, discarded=None):
    """A task whose folder notes in ``discarded`` that its privacy key and checkpoint were deleted."""
    forget = (discarded if discarded is not None else []).append
    return SimpleNamespace(plan=SimpleNamespace(run_id=run_id),
                           folder=SimpleNamespace(is_finished=finished, record=f"{run_id}/run.json",
                                                  discard_secrets=lambda: forget(run_id)))


def test_after_a_stop_each_run_that_ended_is_counted_once_and_the_others_not(monkeypatch):
    monkeypatch.setattr(executors, "read_record", lambda path: f"record of {path}")
    reported, ended, raced, stopped, never = (futures.Future() for _ in range(5))
    reported.set_result("told already")
    ended.set_result("ended before the stop")
    raced.set_exception(SystemExit(143))                              # stopped just after writing run.json
    stopped.set_exception(SystemExit(143))
    never.cancel()
    discarded = []
    pending = {reported: _task("a"), ended: _task("b"), raced: _task("c", finished=True, discarded=discarded),
               stopped: _task("d"), never: _task("e")}
    out = [(task.plan.run_id, outcome) for task, outcome in executors._ended_before_the_stop(pending, {reported})]
    assert out == [("b", "ended before the stop"), ("c", "record of c/run.json")]
    assert discarded == ["c"]       # read back, its key is deleted as its stopped worker would have


class _RayErrors:
    """The exceptions of Ray the stop path tells apart, for the fakes below."""

    class RayError(Exception):
        pass

    class GetTimeoutError(RayError):
        pass

    class TaskCancelledError(RayError):
        pass


def test_ray_s_stop_waits_one_grace_for_all_runs_and_counts_those_that_finished(monkeypatch):
    """The grace was waited run by run: a failed study with N runs still going waited N x 30 s before killing them,
    and as long again after. One deadline covers them all now, on a clock that moves only as ``get`` waits."""
    monkeypatch.setattr(executors, "read_record", lambda path: f"record of {path}")
    now = [0.0]
    monkeypatch.setattr(executors, "time", SimpleNamespace(monotonic=lambda: now[0]))

    class Fake:
        exceptions = _RayErrors

        def __init__(self):
            self.timeouts = []

        def cancel(self, ref, force=False):
            pass

        def get(self, ref, timeout=None):
            self.timeouts.append(timeout)
            if ref.startswith("slow"):
                now[0] += timeout                   # waits out its timeout
                raise self.exceptions.GetTimeoutError(ref)
            now[0] += 5.0                           # ends 5 s into the wait
            return f"outcome of {ref}"

    ray = Fake()
    executor = executors.RayExecutor.__new__(executors.RayExecutor)
    executor.ray = ray
    discarded = []
    out = list(executor._ended_before_the_stop({"quick": _task("q"),
                                                "slow": _task("s", finished=True, discarded=discarded),
                                                "slow too": _task("t"), "slowest": _task("u")}))
    assert [(t.plan.run_id, o) for t, o in out] == [("q", "outcome of quick"), ("s", "record of s/run.json")]
    assert discarded == ["s"]
    assert ray.timeouts == [30.0, 25.0, 0.0, 0.0, 30.0, 0.0, 0.0]   # the slow ones' again once killed
    assert now[0] == 60.0


def test_a_ray_run_still_going_after_the_grace_is_ended_and_read_back_if_it_finished(monkeypatch):
    """A run that a plain cancellation had not stopped within the grace went on unseen: it could write its run.json
    and be killed by Ray's shutdown (or the driver's exit) before deleting its privacy key and checkpoint, which then
    stayed in private/ after a study that counted it nowhere. It is now killed and waited for; finished by then, it
    is read back (its key deleted) and counted."""
    monkeypatch.setattr(executors, "read_record", lambda path: f"record of {path}")
    discarded = []
    slow, going = _task("s", discarded=discarded), _task("g", discarded=discarded)

    class Fake:
        exceptions = _RayErrors

        def __init__(self):
            self.killed = []

        def cancel(self, ref, force=False):
            self.killed.append((ref, force))
            if ref == "slow":               # wrote its run.json, then was killed before deleting its key
                slow.folder.is_finished = True

        def get(self, ref, timeout=None):
            if (ref, True) in self.killed:
                raise self.exceptions.TaskCancelledError(ref)
            raise self.exceptions.GetTimeoutError(ref)

    ray = Fake()
    executor = executors.RayExecutor.__new__(executors.RayExecutor)
    executor.ray = ray
    out = list(executor._ended_before_the_stop({"slow": slow, "going": going}))
    assert ray.killed == [("slow", True), ("going", True)]
    assert [(t.plan.run_id, o) for t, o in out] == [("s", "record of s/run.json")]
    assert discarded == ["s"]


@pytest.mark.parametrize("error", [
    ValueError("Ray Client requires pip package `ray[client]`. If you installed the minimal Ray (e.g. `pip install "
               "ray`), please reinstall by executing `pip install ray[client]`."),
    ConnectionError("Could not find any running Ray instance. Please specify the one to connect to by setting "
                    "`--address` flag or `RAY_ADDRESS` environment variable.")], ids=["no-client", "no-cluster"])
def test_a_ray_cluster_that_cannot_be_reached_is_named_not_an_internal_error(error):
    """`--executor ray --address ray://head:10001`, as the README shows it, ended in "internal error: ValueError ...
    Please report this" where Ray lacked its client, as the minimal Ray does, and so did an address with no cluster."""
    class Fake:
        def is_initialized(self):
            return False

        def init(self, **options):
            raise error

    executor = executors.RayExecutor.__new__(executors.RayExecutor)
    executor.ray, executor.address = Fake(), "ray://head:10001"
    with pytest.raises(ConfigError) as refused:
        executor.map([], None, lambda task, outcome: None, fail_fast=False)
    message = str(refused.value)
    assert message.startswith("--executor ray --address ray://head:10001: Ray could not connect")
    assert str(error) in message
    assert "pip install 'dpmed[ray]'" in message


def test_a_lost_interrupt_is_raised_while_the_pool_waits(monkeypatch):
    def lost():
        raise KeyboardInterrupt

    monkeypatch.setattr(executors, "check_interrupt", lost)
    done = futures.Future()
    done.set_result("a run's outcome")                               # even with a run ended, the stop comes first
    with pytest.raises(KeyboardInterrupt):
        next(executors._as_completed_interruptibly([done]))


@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="POSIX signal masks")
def test_ctrl_c_is_held_back_while_workers_spawn_and_only_then():
    with executors._interrupts_held_while_spawning():
        assert signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])


def test_the_workers_copies_are_counted_for_the_workers_that_start(monkeypatch):
    """Three copies of 3000 bytes with room for two: --workers 2 is what fits; a pool of 8 workers for 2 runs starts
    2 workers, and only their copies are checked."""
    monkeypatch.setattr(executors.memory, "headroom", lambda: Headroom(ram=6000, swap=0))
    with pytest.raises(ConfigError, match="use --workers 2, or set a smaller data.image_size"):
        executors._check_room_for_copies(SimpleNamespace(image_bytes=3000), 3)
    checked = []

    class Stop(Exception):
        pass

    def check(dataset, copies):
        checked.append(copies)
        raise Stop

    monkeypatch.setattr(executors, "_check_room_for_copies", check)
    with pytest.raises(Stop):
        executors.ProcessPoolExecutor(8).map([_task("a"), _task("b")], SimpleNamespace(dataset=None),
                                             lambda task, outcome: None, fail_fast=False)
    assert checked == [2]


def test_a_ray_executor_keeps_the_gpus_asked_for_each_run():
    pytest.importorskip("ray")
    assert executors.make_executor("ray", gpus_per_run=0.5).gpus_per_run == 0.5


def test_a_failure_whose_error_file_cannot_be_written_is_reported_and_the_next_run_still_runs(tmp_path, monkeypatch,
                                                                                              caplog):
    """A full disk is often what failed the run: its error.json cannot be written either. The failure is reported all
    the same, saying no traceback was kept, and the study goes on to its next run (unless fail-fast)."""
    def run_one(plan, context, folder):
        if plan.run_id == "a":
            raise RuntimeError("broke")
        return f"record of {plan.run_id}"

    def full(path, data, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(executors, "run_one", run_one)
    monkeypatch.setattr(executors, "write_json_atomic", full)
    folder = StudyFolder(tmp_path / "study")
    tasks = [executors.RunTask(SimpleNamespace(run_id=run_id), folder.run(run_id)) for run_id in ("a", "b")]
    for fail_fast, ran in ((False, ["a", "b"]), (True, ["a"])):
        seen = []
        executors.InProcessExecutor().map(tasks, None, lambda task, outcome: seen.append((task.plan.run_id, outcome)),
                                          fail_fast=fail_fast)
        assert [run_id for run_id, _ in seen] == ran
        failure = seen[0][1]
        assert isinstance(failure, executors.RunFailure) and failure.error == "RuntimeError: broke"
        assert failure.error_file is None
        assert failure.traceback_note == "no traceback kept: its error file could not be written"
        assert seen[1:] == [("b", "record of b")][:len(ran) - 1]
    assert f"a: could not write its error file {folder.run('a').error}" in caplog.text


def test_a_run_that_fails_after_writing_its_run_json_is_reported_finished(tmp_path, monkeypatch, caplog):
    """Its model and run.json are released: reported failed, the study's results and report left out a model anyone
    holding the folder has, and an error.json lay beside its run.json. Its secrets are deleted as the run would have
    (here the run's own deletion failed)."""
    def run_one(plan, context, folder):
        folder.make()
        folder.record.write_text("{}")
        raise PermissionError(13, "Permission denied", str(folder.privacy_key))   # deleting its key

    monkeypatch.setattr(executors, "run_one", run_one)
    monkeypatch.setattr(executors, "read_record", lambda path: f"record of {path.parent.name}")
    folder = StudyFolder(tmp_path / "study")
    task = executors.RunTask(SimpleNamespace(run_id="a"), folder.run("a"))
    folder.run("a").make_private()
    folder.run("a").privacy_key.write_text("key")
    assert executors._execute(task, None) == "record of a"
    assert not folder.run("a").error.exists() and not folder.run("a").privacy_key.exists()
    assert "a: PermissionError" in caplog.text and "after its run.json was written" in caplog.text


def test_runs_that_train_at_once_are_marked_not_alone_and_one_at_a_time_alone():
    """Runs beside others take as long as the others' load makes them, a DP-SGD run's included: each run's context
    says whether it trains alone (`Timing.alone`), so that its seconds stay private where it does not."""
    context = RunContext(dataset=None, evaluation=None)
    assert context.alone and context.progress
    assert executors._worker_context(context, 1) == RunContext(dataset=None, evaluation=None, progress=False)
    assert not executors._worker_context(context, 2).alone and not executors._worker_context(context, 2).progress
    assert executors._worker_context(context, 3).at_once == 3     # they share the memory (`fixed_features`)


def test_a_worker_whose_parent_died_ends_its_run_and_exits_instead_of_taking_the_next(monkeypatch):
    # the parent killed (kill -9, out of memory): its worker would otherwise train the runs queued for it, unseen,
    # beside the next `dpmed run` of the folder, and then wait for work for ever
    import multiprocessing

    monkeypatch.setattr(executors, "_STOPPING", False)
    monkeypatch.setattr(executors, "_STARTED", True)
    monkeypatch.setattr(executors, "_WORKER_CONTEXT", object())
    monkeypatch.setattr(executors, "_TAKEN", [0])
    in_run, stop_sent, exited = threading.Event(), threading.Event(), threading.Event()
    events: list[str] = []

    def run(task, context):
        in_run.set()
        assert stop_sent.wait(10)
        events.append("run ended")
        return "ended"

    def kill(pid, signum):
        events.append(f"signal {signum}")
        stop_sent.set()

    def exit_now(code):
        events.append("exit")
        exited.set()

    monkeypatch.setattr(executors, "_execute", run)
    monkeypatch.setattr(executors.os, "kill", kill)
    monkeypatch.setattr(executors.os, "_exit", exit_now)
    reader, writer = multiprocessing.Pipe(duplex=False)
    watcher = threading.Thread(target=executors._end_with_parent, args=(reader,), daemon=True)
    watcher.start()
    worker = threading.Thread(target=executors._execute_in_worker, args=("task", 0), daemon=True)
    worker.start()
    assert in_run.wait(10)
    writer.close()                                          # the parent is gone
    assert exited.wait(10)
    worker.join(10)
    assert events == [f"signal {signal.SIGTERM}", "run ended", "exit"]
    assert executors._STOPPING


def _run_folder(study, run_id, make_record, *, finished):
    """A run's folder as a worker leaves it when stopped or killed: its privacy key and checkpoint kept, and, where
    ``finished``, its run.json written (a real record, read back by the real reader)."""
    folder = study.run(run_id)
    folder.make()
    for secret in (folder.privacy_key, folder.checkpoint):
        secret.write_text("regenerates the run's noise")
    if finished:
        make_record(run_id, "arm").write(folder.record)
    return executors.RunTask(SimpleNamespace(run_id=run_id), folder)


class _FakeRay:
    """What RayExecutor uses of Ray: tasks come back in the order they were sent; ``outcomes[ref]`` is a task's result,
    or an exception of Ray's that ``get`` raises (as for a task cancelled, or one whose worker died)."""

    class exceptions(_RayErrors):
        class WorkerCrashedError(_RayErrors.RayError):
            pass

        class RayTaskError(_RayErrors.RayError):
            def __init__(self, cause):
                super().__init__(f"the task raised {cause!r}")
                self.cause = cause

    util = SimpleNamespace(get_node_ip_address=lambda: "127.0.0.1")

    def __init__(self, outcomes):
        self.outcomes, self.cancelled = outcomes, []

    def is_initialized(self):
        return True

    def put(self, value):
        return value

    def remote(self, **resources):
        return lambda function: SimpleNamespace(remote=lambda task, context: task.plan.run_id)

    def wait(self, refs, num_returns):
        return refs[:num_returns], refs[num_returns:]

    def cancel(self, ref, force=False):
        self.cancelled.append(ref)

    def get(self, ref, timeout=None):
        if isinstance(self.outcomes[ref], Exception):
            raise self.outcomes[ref]
        return self.outcomes[ref]


def _ray_map(ray, tasks, *, fail_fast):
    executor = executors.RayExecutor.__new__(executors.RayExecutor)
    executor.ray, executor.cpus_per_run, executor.gpus_per_run = ray, 1.0, 0.0
    outcomes = {}
    executor.map(tasks, RunContext(dataset=None, evaluation=None, progress=False),
                 lambda task, outcome: outcomes.setdefault(task.plan.run_id, outcome), fail_fast=fail_fast)
    return outcomes


def test_a_ray_fail_fast_stop_counts_a_cancelled_run_only_where_it_wrote_its_run_json(tmp_path, make_record):
    """Read back, a cancelled run that had not finished would be counted in the study's results as a model it never
    released (or, its record unreadable, failed as though its worker had died), and its key and checkpoint, which
    continue it next time, deleted. Only the one that wrote its run.json as it was stopped is counted."""
    study = StudyFolder(tmp_path)
    tasks = [_run_folder(study, "a", make_record, finished=False), _run_folder(study, "b", make_record, finished=False),
             _run_folder(study, "c", make_record, finished=True)]
    failure = executors.RunFailure("a", "RuntimeError: simulated", None)
    ray = _FakeRay({"a": failure, "b": _RayErrors.TaskCancelledError("b"), "c": _RayErrors.TaskCancelledError("c")})
    outcomes = _ray_map(ray, tasks, fail_fast=True)
    assert sorted(ray.cancelled) == ["b", "c"]
    assert outcomes.keys() == {"a", "c"} and outcomes["a"] is failure and outcomes["c"].run_id == "c"
    unfinished, finished = tasks[1].folder, tasks[2].folder
    assert unfinished.privacy_key.exists() and unfinished.checkpoint.exists() and not unfinished.error.exists()
    assert not finished.privacy_key.exists() and not finished.checkpoint.exists()


def test_a_run_whose_ray_worker_died_after_its_run_json_is_read_back_not_failed_or_trained_again(tmp_path,
                                                                                                 make_record,
                                                                                                 monkeypatch):
    """Its model and run.json are released. Failed, it was left out of the study's results, with an error.json
    beside its run.json; trained again (Ray retries a task whose worker died), it was a second release of its images
    under a new key that its eps does not count. Either way its key and checkpoint, which regenerate its noise,
    stayed in private/. A run whose worker died before its run.json fails with the reason."""
    study = StudyFolder(tmp_path)
    died, done = _run_folder(study, "a", make_record, finished=False), _run_folder(study, "b", make_record,
                                                                                   finished=True)
    crash = _FakeRay.exceptions.WorkerCrashedError("The worker died unexpectedly while executing this task.")
    outcomes = _ray_map(_FakeRay({"a": crash, "b": crash}), [died, done], fail_fast=False)
    assert isinstance(outcomes["a"], executors.RunFailure) and outcomes["a"].error == executors.RAY_WORKER_DIED
    assert outcomes["b"].run_id == "b" and not done.folder.error.exists()
    assert not done.folder.privacy_key.exists() and not done.folder.checkpoint.exists()
    # Ray's retry of the finished run's task, in a fresh worker
    monkeypatch.setattr(executors, "run_one", lambda *args: pytest.fail("a finished run was trained again"))
    done.folder.privacy_key.write_text("left by the worker that died")
    model = done.folder.model
    model.write_text("the released model")
    assert executors._execute(done, None).run_id == "b"
    assert model.read_text() == "the released model" and not done.folder.privacy_key.exists()


def test_fail_fast_on_ray_counts_the_runs_that_finished_before_the_cancellation(monkeypatch):
    """Before: after the failure the other tasks were cancelled and the study returned at once, so a run that had
    finished meanwhile (its run.json written) was not counted. Now each is asked for its outcome; a cancelled one
    counts only where its run.json was written as it was stopped."""
    failure = executors.RunFailure("a", "RuntimeError: simulated", None)
    ray = _FakeRay({"a": failure, "b": "record of b", "c": _RayErrors.TaskCancelledError("c"),
                    "d": _RayErrors.TaskCancelledError("d")})
    discarded = []
    tasks = [_task(name, finished=name in "bd", discarded=discarded) for name in "abcd"]
    monkeypatch.setattr(executors, "read_record", lambda path: f"record read from {path}")
    outcomes = _ray_map(ray, tasks, fail_fast=True)
    assert sorted(ray.cancelled) == ["b", "c", "d"]
    assert outcomes == {"a": failure, "b": "record of b", "d": "record read from d/run.json"}
    assert discarded == ["d"]       # its worker, stopped, did not: its key would regenerate its noise


def test_a_ray_worker_that_died_fails_its_run_with_the_reason_and_the_others_go_on(tmp_path, monkeypatch):
    """Ray raises on ``get`` where a task's worker died after its retries (out of memory, kill -9, a lost node):
    that error stopped the study as an "internal error" to be reported, leaving the runs still training unreported
    and results.csv unwritten. Now the run fails with the reason, in its error.json, and the others are counted; one
    that wrote its run.json before its worker died is finished."""
    study = StudyFolder(tmp_path)
    tasks = [executors.RunTask(SimpleNamespace(run_id=name), study.run(name)) for name in "abcd"]
    tasks[2].folder.make()
    tasks[2].folder.record.write_text("{}")
    for secret in (tasks[2].folder.privacy_key, tasks[2].folder.checkpoint):    # its worker died before deleting
        secret.write_text("secret")
    errors = _FakeRay.exceptions

    def crash():
        return errors.WorkerCrashedError("The worker died unexpectedly while executing this task.")
    unimportable = RuntimeError("The remote function failed to import on the worker")    # a node without dpmed
    ray = _FakeRay({"a": crash(), "b": "record of b", "c": crash(), "d": errors.RayTaskError(unimportable)})
    monkeypatch.setattr(executors, "read_record", lambda path: f"record read from {path.parent.name}")
    outcomes = _ray_map(ray, tasks, fail_fast=False)
    assert outcomes["b"] == "record of b" and outcomes["c"] == "record read from c"
    assert not tasks[2].folder.privacy_key.exists() and not tasks[2].folder.checkpoint.exists()
    assert isinstance(outcomes["a"], executors.RunFailure) and outcomes["a"].error == executors.RAY_WORKER_DIED
    kept = json.loads(outcomes["a"].error_file.read_text())
    assert kept["error"].startswith("its Ray worker died")
    assert "WorkerCrashedError: The worker died" in kept["traceback"]
    # a task that raised, its worker alive, is not said to have died: running the study again ends the same way
    assert outcomes["d"].error == "RuntimeError: The remote function failed to import on the worker"
    assert "RayTaskError" in json.loads(outcomes["d"].error_file.read_text())["traceback"]


def test_a_key_the_driver_cannot_delete_is_told_and_the_study_goes_on(tmp_path, monkeypatch, caplog):
    """A run read back after its Ray worker died, on a cluster folder the driver may read but not change (mounted
    read-only there, or private/ of the nodes' user): the OSError of deleting its key stopped the study as an
    internal error, with the other runs unreported and results.csv unwritten."""
    study = StudyFolder(tmp_path)
    tasks = [executors.RunTask(SimpleNamespace(run_id=name), study.run(name)) for name in "ab"]
    tasks[0].folder.make()
    tasks[0].folder.record.write_text("{}")

    def refused():
        raise PermissionError(13, "Permission denied", str(tasks[0].folder.privacy_key))
    object.__setattr__(tasks[0], "folder", SimpleNamespace(is_finished=True, record=tasks[0].folder.record,
                                                           privacy_key=tasks[0].folder.privacy_key,
                                                           checkpoint=tasks[0].folder.checkpoint,
                                                           discard_secrets=refused))
    ray = _FakeRay({"a": _RayErrors.RayError("The worker died unexpectedly while executing this task."),
                    "b": "record of b"})
    monkeypatch.setattr(executors, "read_record", lambda path: f"record read from {path.parent.name}")
    with caplog.at_level(logging.WARNING, logger="dpmed"):
        outcomes = _ray_map(ray, tasks, fail_fast=False)
    assert outcomes == {"a": "record read from a", "b": "record of b"}
    assert str(tasks[0].folder.privacy_key) in caplog.text and "Permission denied" in caplog.text


def test_a_local_ray_keeps_its_files_in_a_folder_of_this_users_alone_and_an_open_token_is_told(
        monkeypatch, caplog, request):
    """Ray's own temp folder (/tmp/ray) is world-writable and its spilled objects, which hold the decoded dataset,
    and logs, which tell its size, were readable by every local user; its token file, which lets a node join and be
    sent runs, is written 0644."""
    seen = {}

    class Starting(_FakeRay):
        started = False

        def is_initialized(self):
            return self.started

        def init(self, **options):
            folder = Path(options["_temp_dir"]).parent
            seen.update(options, mode=folder.stat().st_mode & 0o777)
            self.started = True

        def shutdown(self):
            pass

    home = Path(tempfile.mkdtemp())          # pytest's tmp_path is 0700, which no other user enters
    request.addfinalizer(functools.partial(shutil.rmtree, home, ignore_errors=True))
    home.chmod(0o711)
    token = home / "auth_token"
    token.write_text("secret")
    token.chmod(0o644)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(token))
    executor = executors.RayExecutor.__new__(executors.RayExecutor)
    executor.ray, executor.address, executor.cpus_per_run, executor.gpus_per_run = Starting({}), None, 1.0, 0.0
    with caplog.at_level(logging.WARNING, logger="dpmed.executors"):
        executor.map([], RunContext(dataset=None, evaluation=None, progress=False), lambda task, outcome: None,
                     fail_fast=False)
    assert seen["mode"] == 0o700 and Path(seen["_temp_dir"]).name == "ray"
    assert not Path(seen["_temp_dir"]).parent.exists()                 # deleted after the shutdown
    assert f"{token}, the token that lets a node join this Ray cluster, is readable by other users" in caplog.text
    token.chmod(0o600)
    caplog.clear()
    executors._warn_open_token()
    assert not caplog.records
    token.chmod(0o640)                                   # the group's members are other users too
    executors._warn_open_token()
    assert "(mode 640)" in caplog.text
    caplog.clear()
    home.chmod(0o700)                   # a home folder no other user enters: Ray's 0644 there is read by no one else
    executors._warn_open_token()
    assert not caplog.records
    shutil.rmtree(home)


def test_a_local_ray_listens_on_loopback_alone_and_a_users_cluster_is_left_alone(monkeypatch, caplog):
    """Ray 2.60 on Linux started a local instance's servers (GCS, raylet, workers) on every network interface, as
    `ss -ltn` showed: a cluster that runs code, with the training images, offered to whoever reaches the machine.
    Ray keeps them on 127.0.0.1 where its switch, read as it is imported, says no other node joins."""
    class Local(_FakeRay):
        def __init__(self, node):
            super().__init__({})
            self.util = SimpleNamespace(get_node_ip_address=lambda: node)

        def is_initialized(self):
            return False

        def init(self, **options):
            pass

        def shutdown(self):
            pass

    loopback = executors.RAY_LOOPBACK
    context = RunContext(dataset=None, evaluation=None, progress=False)
    for environment, address in (({}, "ray://head:10001"), ({"RAY_ADDRESS": "auto"}, None),
                                 ({loopback: "1"}, None)):          # a cluster of the user's, or their own choice
        monkeypatch.setattr(os, "environ", dict(environment))
        monkeypatch.setitem(sys.modules, "ray", Local("127.0.0.1"))
        executors.RayExecutor(address=address)
        assert os.environ == environment
    monkeypatch.setattr(os, "environ", {"RAY_AUTH_TOKEN_PATH": "absent"})
    executors.RayExecutor(address=None)
    assert os.environ[loopback] == "0"
    for node, told in (("127.0.0.1", False), ("192.0.2.2", True)):     # Ray imported before dpmed could set it
        monkeypatch.setitem(sys.modules, "ray", Local(node))
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="dpmed.executors"):
            executors.RayExecutor(address=None).map([], context, lambda task, outcome: None, fail_fast=False)
        assert ("listens on every network interface (its node address is 192.0.2.2)" in caplog.text) == told


@pytest.mark.skipif(os.name == "nt", reason="Windows keeps no Unix permissions")
def test_a_ray_cluster_named_by_ray_address_gets_no_local_folder_and_a_failed_start_leaves_none(tmp_path,
                                                                                              monkeypatch):
    """RAY_ADDRESS names an existing cluster as --address does: its nodes keep their own folders. A local start that
    fails is not shut down (nothing started) and its folder is deleted all the same."""
    calls = []

    class Cluster(_FakeRay):
        def is_initialized(self):
            return False

        def init(self, **options):
            calls.append(("init", options))
            if "_temp_dir" in options:
                raise RuntimeError("no room for the object store")

        def shutdown(self):
            calls.append(("shutdown", {}))

    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "absent"))
    executor = executors.RayExecutor.__new__(executors.RayExecutor)
    executor.ray, executor.address, executor.cpus_per_run, executor.gpus_per_run = Cluster({}), None, 1.0, 0.0
    context = RunContext(dataset=None, evaluation=None, progress=False)
    monkeypatch.setenv("RAY_ADDRESS", "ray://head:10001")
    executor.map([], context, lambda task, outcome: None, fail_fast=False)
    assert calls == [("init", {"address": None, "include_dashboard": False, "log_to_driver": False})]
    monkeypatch.delenv("RAY_ADDRESS")
    calls.clear()
    with pytest.raises(RuntimeError, match="no room"):
        executor.map([], context, lambda task, outcome: None, fail_fast=False)
    assert [name for name, _ in calls] == ["init"]
    assert not Path(calls[0][1]["_temp_dir"]).parent.exists()


@pytest.mark.parametrize("flag, anyone_started, kept", [
    (executors.STOPPED, True, True),            # stopped by the pool in its worker: continues next time
    (0, True, True),                            # no worker took it up: trains next time
    (executors.TAKEN_UP, True, False),          # its own worker died: failed
    (0, False, False)])                         # no worker could start: failed
def test_a_broken_pool_reads_back_only_the_runs_that_wrote_their_run_json(tmp_path, make_record, flag,
                                                                          anyone_started, kept):
    """A dead worker breaks the whole pool. Read back as finished, a run without its run.json was failed as if its
    record were unreadable, or (read by a reader that took any file) counted as a release that never happened, and
    its key and checkpoint were deleted, so that it could not continue. Only a run that wrote its run.json is
    finished, whatever became of its worker; the others are left to continue, or failed where their own worker
    died."""
    study = StudyFolder(tmp_path)
    done, cut = _run_folder(study, "a", make_record, finished=True), _run_folder(study, "b", make_record,
                                                                                 finished=False)
    outcome = executors._broken_off(done, flag, anyone_started=anyone_started)
    assert outcome.run_id == "a" and not isinstance(outcome, executors.RunFailure)
    assert not done.folder.privacy_key.exists() and not done.folder.checkpoint.exists()
    outcome = executors._broken_off(cut, flag, anyone_started=anyone_started)
    assert cut.folder.privacy_key.exists() and cut.folder.checkpoint.exists()     # it continues from them
    if kept:
        assert outcome is None and not cut.folder.error.exists()
    else:
        assert isinstance(outcome, executors.RunFailure) and outcome.error == executors.WORKER_DIED
        assert json.loads(cut.folder.error.read_text())["traceback"] == "no traceback: the process was killed"
