"""The parts of the process pool and of Ray's fail-fast stop that whole studies reach only by timing: a worker told
to stop (SIGTERM) while it starts or runs, the parent's relay of worker log records, the runs counted after a stop
(each once), Ctrl-C held back while workers spawn, and the memory check of the workers' copies."""

from __future__ import annotations

import json
import logging
import queue
import signal
import threading
from concurrent import futures
from types import SimpleNamespace

import pytest

from dpmed import executors
from dpmed.errors import ConfigError
from dpmed.memory import Headroom


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
    from dpmed.folders import StudyFolder

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
    from dpmed.folders import StudyFolder

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
    from dpmed.run import RunContext

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


class _FailFastRay:
    """What RayExecutor.map uses of Ray: tasks come back in order; ``outcomes[ref]`` is a task's result, or an
    exception of Ray's that ``get`` raises (as for a task cancelled, or one whose worker died)."""

    class exceptions(_RayErrors):
        class WorkerCrashedError(_RayErrors.RayError):
            pass

        class RayTaskError(_RayErrors.RayError):
            pass

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
    from dpmed.run import RunContext

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
    from dpmed.folders import StudyFolder

    study = StudyFolder(tmp_path)
    tasks = [_run_folder(study, "a", make_record, finished=False), _run_folder(study, "b", make_record, finished=False),
             _run_folder(study, "c", make_record, finished=True)]
    failure = executors.RunFailure("a", "RuntimeError: simulated", None)
    ray = _FailFastRay({"a": failure, "b": _RayErrors.TaskCancelledError("b"), "c": _RayErrors.TaskCancelledError("c")})
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
    from dpmed.folders import StudyFolder

    study = StudyFolder(tmp_path)
    died, done = _run_folder(study, "a", make_record, finished=False), _run_folder(study, "b", make_record,
                                                                                   finished=True)
    crash = _FailFastRay.exceptions.WorkerCrashedError("The worker died unexpectedly while executing this task.")
    outcomes = _ray_map(_FailFastRay({"a": crash, "b": crash}), [died, done], fail_fast=False)
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
    from dpmed.folders import StudyFolder

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
