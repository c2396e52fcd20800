"""Studies that survive failures and kills, and run in parallel: in-process, a process pool, and Ray.

Results are compared across executors in reproducible mode (privacy randomness derived from the seed), number for
number: each run sets its own thread count (training.threads), so the executor changes nothing. In the default secure
mode no two runs share randomness, and a killed run resumes from the key in its private folder."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import torch

import dpmed.executors
import dpmed.run
import dpmed.study
from dpmed.cli import main
from dpmed.config import load_study
from dpmed.errors import ConfigError
from dpmed.executors import WORKER_DIED, ProcessPoolExecutor, RunFailure, RunTask, make_executor
from dpmed.folders import StudyFolder
from dpmed.lock import Holder, holder_gone
from dpmed.records import read_timing
from dpmed.run import RunContext
from dpmed.study import prepare_study


@pytest.fixture(scope="module")
def reference(tiny_study, results_table) -> pd.DataFrame:
    """The tiny study run in one go, in-process."""
    return results_table(tiny_study)


def test_a_failed_run_is_recorded_and_does_not_stop_the_others(tmp_path, monkeypatch, capsys, tiny_text):
    (tmp_path / "s.yaml").write_text(tiny_text)
    real = dpmed.executors.run_one

    def flaky(spec, context, folder):
        if spec.arm == "base":
            folder.make()                       # as run_one does first
            raise RuntimeError("disk full (simulated)")
        return real(spec, context, folder)
    monkeypatch.setattr(dpmed.executors, "run_one", flaky)
    out = tmp_path / "out"
    assert main(["run", str(tmp_path / "s.yaml"), "--out", str(out), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "FAILED base_seed0: RuntimeError: disk full (simulated)" in err
    runs = out / "tiny" / "runs"
    assert (runs / "dp_eps8_C1_seed0" / "run.json").is_file()
    error = out / "tiny" / "private" / "runs" / "base_seed0" / "error.json"
    assert "disk full" in error.read_text() and (os.name == "nt" or error.stat().st_mode & 0o777 == 0o600)
    assert not (runs / "base_seed0" / "error.json").exists()     # a message may carry a training-set statistic
    assert not (runs / "base_seed0").exists()         # nor is an empty folder left among the shareable runs
    assert main(["status", str(out / "tiny")]) == 0
    status = capsys.readouterr().out
    assert "base_seed0" in status and "failed: RuntimeError" in status and "1 finished, 1 failed" in status
    report = (out / "tiny" / "report.html").read_text()    # before: the arm listed, its run missing, unsaid
    assert "⚠ 1 of the 2 runs this study plans are not in this report" in report and "base_seed0" in report

    monkeypatch.setattr(dpmed.executors, "run_one", real)       # the cause is fixed: run again
    assert main(["run", str(tmp_path / "s.yaml"), "--out", str(out), "--no-progress"]) == 0
    assert "runs this study plans are not in this report" not in (out / "tiny" / "report.html").read_text()
    assert not (out / "tiny" / "private" / "runs" / "base_seed0" / "error.json").exists()
    assert "1 finished earlier" in capsys.readouterr().out


def test_a_ctrl_c_while_a_record_is_serialised_interrupts_the_study_instead_of_failing_the_run(tmp_path, monkeypatch,
                                                                                                 tiny_text):
    """pydantic-core hides a KeyboardInterrupt raised in a serialiser inside a PydanticSerializationError; the
    interrupt must still stop the study (exit 130 from the CLI) and leave no error.json calling the run failed."""
    from pydantic import BaseModel, field_serializer

    class Record(BaseModel):
        value: int

        @field_serializer("value")
        def _signal_lands_here(self, value):
            raise KeyboardInterrupt

    monkeypatch.setattr(dpmed.executors, "run_one", lambda spec, context, folder: Record(value=1).model_dump_json())
    (tmp_path / "s.yaml").write_text(tiny_text)
    out = tmp_path / "out"
    assert main(["run", str(tmp_path / "s.yaml"), "--out", str(out), "--no-progress"]) == 130
    assert not list((out / "tiny").glob("**/error.json"))


def test_a_worker_stop_that_lands_inside_a_checkpoint_write_is_a_stop_not_a_failure(tmp_path, tiny_text,
                                                                                     monkeypatch):
    """SIGTERM in a worker raises SystemExit wherever it lands; inside torch.save the zip writer's clean-up then
    raised RuntimeError("unexpected pos ..."), and the run was recorded as failed (error.json) though it was stopped
    (seen in the SIGTERM tests, now and then)."""
    (tmp_path / "s.yaml").write_text(tiny_text)
    prepared = prepare_study(load_study(tmp_path / "s.yaml"), out=tmp_path / "out")
    task = RunTask(prepared.plans[0], prepared.folder.run(prepared.plans[0].run_id))

    def stopped_mid_save(plan, context, folder):
        try:
            raise SystemExit(143)
        except SystemExit:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 271296 vs 271184")

    monkeypatch.setattr(dpmed.executors, "run_one", stopped_mid_save)
    with pytest.raises(SystemExit):
        dpmed.executors._execute(task, RunContext(dataset=prepared.dataset, evaluation=prepared.study.evaluation,
                                                  progress=False))
    assert not task.folder.error.exists()


def test_an_error_raised_while_a_ctrl_c_unwinds_still_interrupts_the_study(tmp_path, monkeypatch, tiny_text):
    """Clean-up that fails while a KeyboardInterrupt unwinds (a file closed on the way out) raises another
    exception whose __context__ is the interrupt: that is still an interrupt, not a failed run."""
    def interrupted(spec, context, folder):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise OSError("closing the checkpoint failed (simulated)")

    monkeypatch.setattr(dpmed.executors, "run_one", interrupted)
    (tmp_path / "s.yaml").write_text(tiny_text)
    out = tmp_path / "out"
    assert main(["run", str(tmp_path / "s.yaml"), "--out", str(out), "--no-progress"]) == 130
    assert not list((out / "tiny").glob("**/error.json"))


def test_fail_fast_stops_at_the_first_failure(tmp_path, monkeypatch, capsys, tiny_text):
    (tmp_path / "s.yaml").write_text(tiny_text)
    monkeypatch.setattr(dpmed.executors, "run_one", lambda spec, context, folder: 1 / 0)
    assert main(["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "out"), "--no-progress",
                 "--fail-fast"]) == 1
    assert "1 run(s) failed, 1 not finished (--fail-fast stopped the study" in capsys.readouterr().err


@pytest.mark.parametrize("fail_fast", [[], ["--fail-fast"]])
@pytest.mark.parametrize("failed", [["base_seed0"], []])
def test_runs_left_unstarted_by_a_dead_worker_are_not_blamed_on_fail_fast(tmp_path, monkeypatch, capsys, tiny_text,
                                                                          fail_fast, failed):
    """The runs a broken process pool stopped or never started (above) were summed up as "not finished (--fail-fast
    stopped the study ...)": an option the user did not give, or, given, not what stopped them (a dead worker's
    run is no failure the pool loop stops at: the pool had broken already). So too where the worker that died held
    no unfinished run (killed as it started, or between runs), and no run failed at all."""
    (tmp_path / "s.yaml").write_text(tiny_text)
    study = load_study(tmp_path / "s.yaml")
    died = [RunFailure(run_id, WORKER_DIED, None) for run_id in failed]
    monkeypatch.setattr(dpmed.study, "run_study", lambda *args, **kwargs: dpmed.study.StudyResult(
        study=study, out_dir=tmp_path / "out" / "tiny", records=[], resumed=[], seconds=1.0, failures=died,
        pending=["dp_eps8_C1_seed0"]))
    assert main(["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "out"), "--no-progress", *fail_fast]) == 1
    err = capsys.readouterr().err
    assert (f"{len(failed)} run(s) failed, 1 not finished (a worker process died, and the pool stopped the others: a "
            "run stopped mid-way continues from its checkpoint, one not started trains)") in err, err
    assert "--fail-fast stopped" not in err


def test_runs_left_unfinished_beside_a_run_s_own_failure_are_not_blamed_on_fail_fast_not_given(tmp_path, monkeypatch,
                                                                                                capsys, tiny_text):
    """Without --fail-fast a run's own failure stops no other run: those left unfinished beside it were stopped by a
    worker that died holding none, which the summary says, not the option the user did not give."""
    (tmp_path / "s.yaml").write_text(tiny_text)
    study = load_study(tmp_path / "s.yaml")
    monkeypatch.setattr(dpmed.study, "run_study", lambda *args, **kwargs: dpmed.study.StudyResult(
        study=study, out_dir=tmp_path / "out" / "tiny", records=[], resumed=[], seconds=1.0,
        failures=[RunFailure("base_seed0", "ZeroDivisionError: division by zero", None)],
        pending=["dp_eps8_C1_seed0"]))
    assert main(["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "out"), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "1 run(s) failed, 1 not finished (a worker process died, and the pool stopped the others" in err, err
    assert "--fail-fast stopped" not in err


# Run in each worker process of the fail-fast test below (as its ``setup``): replaces run_one there by a stand-in
# that plays the role the test gives each run. A module of its own, so that the spawned workers can import it.
_FAKE_RUNS = '''
import time

import dpmed.executors
import dpmed.run
import dpmed.study


def install(roles, slow_seconds):
    def fake(plan, context, folder):
        folder.make()
        role = roles[plan.run_id]
        (folder.public / "started").touch()
        if role == "fail":
            (folder.public / "failing").touch()
            raise RuntimeError("simulated failure")
        if role == "finish":                  # ends after the failure, before the study has taken it in
            while not list(folder.public.parent.glob("*/failing")):
                time.sleep(0.05)
            time.sleep(0.5)
        else:                                 # a long run, handed to a worker before the failure came
            time.sleep(slow_seconds)
        (folder.public / "finished").touch()
        return "record of " + plan.run_id
    dpmed.executors.run_one = fake
'''


def test_fail_fast_with_workers_stops_the_runs_in_progress_and_counts_those_that_finished(tmp_path, monkeypatch,
                                                                                          tiny_text):
    """Before: after the failure the pool waited for every run already handed to a worker (they cannot be
    cancelled): they trained to their end, wrote run.json, and were never counted ("0 runs ... 3 not started").
    Now the workers are stopped as at Ctrl-C, and a run that finished before the stop is reported."""
    (tmp_path / "fake_runs.py").write_text(_FAKE_RUNS)
    monkeypatch.syspath_prepend(str(tmp_path))       # spawned workers start with this process's sys.path
    import fake_runs

    (tmp_path / "s.yaml").write_text(tiny_text.replace("privacy_randomness", "seeds: [0, 1]\nprivacy_randomness"))
    prepared = prepare_study(load_study(tmp_path / "s.yaml"), out=tmp_path / "out")
    tasks = [RunTask(plan, prepared.folder.run(plan.run_id)) for plan in prepared.plans]
    assert len(tasks) == 4
    roles = dict(zip([t.plan.run_id for t in tasks], ["fail", "finish", "slow", "slow"], strict=True))
    submitted = []      # the pool's futures, in the tasks' order
    as_completed = dpmed.executors._as_completed_interruptibly
    monkeypatch.setattr(dpmed.executors, "_as_completed_interruptibly",
                        lambda pending: submitted.extend(pending) or as_completed(pending))
    outcomes = {}

    def on_outcome(task, outcome):
        outcomes[task.plan.run_id] = outcome
        if isinstance(outcome, RunFailure):    # the study takes its time with the failure: the next run ends meanwhile
            deadline = time.monotonic() + 120   # and its result reaches this process (a fixed wait flaked under load)
            while not submitted[1].done() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert submitted[1].done(), "the finishing run's result did not come back within 120 s"

    ProcessPoolExecutor(2, setup=functools.partial(fake_runs.install, roles, 60)).map(
        tasks, RunContext(dataset=prepared.dataset, evaluation=prepared.study.evaluation, progress=False),
        on_outcome, fail_fast=True)
    assert isinstance(outcomes.pop(tasks[0].plan.run_id), RunFailure)
    assert outcomes == {tasks[1].plan.run_id: f"record of {tasks[1].plan.run_id}"}
    for task in tasks[2:]:     # not stopped, the pool would have waited for them to sleep out their 60 s and finish
        assert not (task.folder.public / "finished").exists()


@pytest.mark.skipif(os.name == "nt", reason="Windows keeps no Unix permissions")
def test_a_local_ray_folder_left_by_a_killed_study_is_deleted_by_the_next_and_a_live_one_is_kept(tmp_path,
                                                                                                  monkeypatch):
    """kill -9 skips the deletion after Ray's shutdown: the owner-only folder, with Ray's logs (which tell the
    dataset's size) and any objects it spilled (the decoded images), stayed in the temp folder for good."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    here = Holder.current()
    owners = {"stale": replace(here, pid=int(gone.stdout), process_start=None), "live": here,
              "elsewhere": replace(here, pid=int(gone.stdout), host=here.host + "-other"), "older": None}
    for name, owner in owners.items():
        (tmp_path / f"dpmed-ray-{name}" / "ray").mkdir(parents=True)
        if owner is not None:
            (tmp_path / f"dpmed-ray-{name}" / "owner").write_text(json.dumps(asdict(owner)))
    own = Path(dpmed.executors._own_ray_folder())
    assert not (tmp_path / "dpmed-ray-stale").exists()
    # in use (another study of this user), on another host sharing the temp folder, or of an unknown owner
    assert all((tmp_path / f"dpmed-ray-{name}").exists() for name in ("live", "elsewhere", "older"))
    assert own.parent == tmp_path and own.stat().st_mode & 0o777 == 0o700
    assert json.loads((own / "owner").read_text())["pid"] == os.getpid()
    assert not holder_gone(own / "owner")


def test_a_failed_run_that_is_run_again_and_interrupted_shows_as_interrupted(tmp_path, monkeypatch, capsys,
                                                                           tiny_text):
    """Before: the old error.json stayed until the run finished, so `dpmed status` showed the old failure instead of
    the interruption (and the checkpoint it continues from)."""
    (tmp_path / "s.yaml").write_text(tiny_text.replace("  - {name: dp, mechanism: dp_sgd, target_epsilon: 8}\n", ""))
    out = tmp_path / "out"
    command = ["run", str(tmp_path / "s.yaml"), "--out", str(out), "--no-progress"]
    monkeypatch.setattr(dpmed.executors, "run_one", lambda plan, context, folder: 1 / 0)
    assert main(command) == 1
    error = StudyFolder(out / "tiny").run("base_seed0").error
    assert error.is_file()

    def interrupted(plan, context, folder):
        folder.make()
        dpmed.run._privacy_randomness(plan, context, folder)      # its key, written before anything is trained
        torch.save({"progress": {"steps": 3, "of": 8}}, folder.checkpoint)     # as the second attempt left it
        raise KeyboardInterrupt
    monkeypatch.setattr(dpmed.executors, "run_one", interrupted)
    assert main(command) == 130
    assert not error.exists()
    capsys.readouterr()
    assert main(["status", str(out / "tiny")]) == 0
    status = capsys.readouterr().out
    assert re.search(r"^base_seed0 +interrupted: continues from its checkpoint at step 3 of 8", status, re.M), status
    assert status.strip().endswith("1 interrupted")


def _kill_mid_dp_run(study: Path, out: Path) -> list[str]:
    """Start the study in a subprocess, SIGKILL it once the DP-SGD run wrote its first checkpoint; the command."""
    cmd = [sys.executable, "-m", "dpmed.cli", "run", str(study), "--out", str(out), "--no-progress"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    checkpoint = StudyFolder(out / "tiny").run("dp_eps8_C1_seed0").checkpoint
    deadline = time.monotonic() + 240
    while not checkpoint.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert (out / "tiny" / "runs" / "base_seed0" / "run.json").is_file()
    assert not (out / "tiny" / "runs" / "dp_eps8_C1_seed0" / "run.json").exists(), "killed too late to test resume"
    return cmd


def test_a_killed_study_resumes_to_the_same_results_table(tmp_path, reference, tiny_text, results_table):
    """SIGKILL the process while the DP-SGD run is mid-way (after its first checkpoint), then run again."""
    (tmp_path / "s.yaml").write_text(tiny_text)
    out = tmp_path / "out"
    done = subprocess.run(_kill_mid_dp_run(tmp_path / "s.yaml", out), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    pd.testing.assert_frame_equal(results_table(out / "tiny"), reference)


def test_a_killed_secure_run_resumes_with_its_own_key_and_then_forgets_it(tmp_path, tiny_text, capsys):
    """Secure mode: the key of an unfinished run waits in its private folder (owner-only), the resumed run continues
    from the checkpoint (same plan, same ledger), and once finished no file can regenerate its noise."""
    (tmp_path / "s.yaml").write_text(tiny_text.replace("privacy_randomness: reproducible\n", ""))
    out = tmp_path / "out"
    cmd = _kill_mid_dp_run(tmp_path / "s.yaml", out)
    run = StudyFolder(out / "tiny").run("dp_eps8_C1_seed0")
    for secret in (run.privacy_key, run.checkpoint):      # the checkpoint holds the streams' keys too
        assert secret.is_file() and oct(secret.stat().st_mode & 0o777) == "0o600", secret
    root = json.loads(run.privacy_key.read_text())["root"]
    assert main(["status", str(out / "tiny")]) == 0
    shown = re.search(r"dp_eps8_C1_seed0 +interrupted: continues from its checkpoint at step (\d+) of (\d+) \(saved "
                      r"(under a minute|\d+ min) ago\)", capsys.readouterr().out)
    assert shown, "status does not say how far the interrupted run got"
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    record = json.loads(run.record.read_text())
    assert record["timing"]["resumed_from"] is None    # how far it came when stopped depends on its private times
    resumed_from = read_timing(run.timing).resumed_from
    assert resumed_from > 0
    assert record["ledger"]["events"][0]["steps"] == record["plan"]["privacy"]["steps"]
    assert int(shown.group(1)) == resumed_from and int(shown.group(2)) == record["ledger"]["events"][0]["steps"]
    assert not run.privacy_key.exists() and not run.checkpoint.exists()
    assert record["privacy"]["is_dp"] and "OS entropy" in record["privacy"]["randomness"]
    shareable = [p for p in out.rglob("*") if p.is_file() and "private" not in p.relative_to(out).parts]
    assert shareable and run.record in shareable
    for path in shareable:                                # the key, as text or bytes, is in no file outside private/
        data = path.read_bytes()
        assert root.encode() not in data.lower() and bytes.fromhex(root) not in data, path
    assert root not in done.stdout + done.stderr


def test_a_killed_run_is_not_continued_on_other_data_of_the_same_shape(tmp_path, tiny_text):
    """The attempt's key covers the training images' content, not only their number and shape: a run killed
    mid-way and started again on other pixels (here min-max stretched) trains afresh rather than continuing from a
    checkpoint that learnt the other images."""
    study = tmp_path / "s.yaml"
    study.write_text(tiny_text.replace("  - {name: dp, mechanism: dp_sgd, target_epsilon: 8}\n", "")
                     .replace("epochs: 3", "epochs: 30"))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "dpmed.cli", "run", str(study), "--out", str(out), "--no-progress"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run = StudyFolder(out / "tiny").run("base_seed0")
    deadline = time.monotonic() + 240
    while not run.checkpoint.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert run.checkpoint.exists() and not run.is_finished, "killed too early or too late"
    assert main([*cmd[3:], "--set", "data.preprocessing.minmax=true"]) == 0     # only the pixels differ
    assert read_timing(run.timing).resumed_from in (None, 0)


def test_a_worker_killed_from_outside_fails_its_runs_with_a_reason_not_a_traceback(tmp_path, tiny_text):
    """A worker that dies (here at start-up, as the out-of-memory killer would end it) breaks the process pool: each
    unfinished run fails with the reason and what to do, in its error.json, and the study is not aborted."""
    (tmp_path / "s.yaml").write_text(tiny_text)
    prepared = prepare_study(load_study(tmp_path / "s.yaml"), out=tmp_path / "out")
    tasks = [RunTask(plan, prepared.folder.run(plan.run_id)) for plan in prepared.plans]
    outcomes = []
    ProcessPoolExecutor(2, setup=functools.partial(os._exit, 9)).map(
        tasks, RunContext(dataset=prepared.dataset, evaluation=prepared.study.evaluation, progress=False),
        lambda task, outcome: outcomes.append(outcome), fail_fast=False)
    assert sorted(o.run_id for o in outcomes) == sorted(t.plan.run_id for t in tasks)
    for outcome in outcomes:
        assert isinstance(outcome, RunFailure) and outcome.error == WORKER_DIED
        assert json.loads(outcome.error_file.read_text())["error"] == WORKER_DIED


def test_a_process_pool_gives_the_same_table(tmp_path, reference, tiny_text, results_table, tiny_study):
    """And no run's seconds are public: the runs trained at the same time, each carrying the other's load (the
    DP-SGD run's too), so each keeps its seconds in its private folder, as the serial study keeps only a DP-SGD
    run's there."""
    (tmp_path / "s.yaml").write_text(tiny_text)
    assert main(["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "out"), "--workers", "2"]) == 0
    pd.testing.assert_frame_equal(results_table(tmp_path / "out" / "tiny"), reference, check_exact=True)
    folder, serial = StudyFolder(tmp_path / "out" / "tiny"), StudyFolder(tiny_study)
    assert pd.read_csv(folder.results).train_seconds.isna().all()
    assert pd.read_csv(serial.results).set_index("run_id").train_seconds.notna().to_dict() == {
        "base_seed0": True, "dp_eps8_C1_seed0": False}
    for run in map(folder.run, ("base_seed0", "dp_eps8_C1_seed0")):
        timing = json.loads(run.record.read_text())["timing"]
        assert (timing["train_seconds"], timing["total_seconds"], timing["alone"]) == (None, None, False)
        assert read_timing(run.timing).train_seconds > 0 and not read_timing(run.timing).alone


def test_ray_runs_a_two_run_study_on_a_local_instance(tmp_path, reference, tiny_text, results_table):
    pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'dpmed[ray]'")
    (tmp_path / "s.yaml").write_text(tiny_text)
    assert main(["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "out"), "--executor", "ray"]) == 0
    pd.testing.assert_frame_equal(results_table(tmp_path / "out" / "tiny"), reference, check_exact=True)


@pytest.mark.parametrize("name, options, flag", [("local", dict(address="ray://h:1"), "--address"),
                                                 ("ray", dict(workers=2), "--workers")])
def test_an_executor_refuses_the_other_executor_s_option(name, options, flag):
    """The Python API's run_study(executor=..., workers=..., address=...) reaches here: neither option is ignored."""
    with pytest.raises(ConfigError, match=f"^{flag} .*--executor ray"):
        make_executor(name, **options)


def test_the_pool_s_wait_wakes_every_second_and_yields_each_run_once(monkeypatch):
    """On Windows before Python 3.14 a wait without a timeout cannot be interrupted: Ctrl-C with --workers waited for
    the next run to end. The wait now wakes every second, and still hands on every run exactly once."""
    import threading
    from concurrent import futures

    timeouts = []
    real_wait = futures.wait

    def recording_wait(fs, timeout=None, return_when=futures.ALL_COMPLETED):
        timeouts.append(timeout)
        return real_wait(fs, timeout=timeout, return_when=return_when)
    monkeypatch.setattr(dpmed.executors.futures, "wait", recording_wait)
    release = threading.Event()
    with futures.ThreadPoolExecutor(2) as pool:
        quick = [pool.submit(lambda i=i: i) for i in range(3)]
        slow = pool.submit(release.wait, 30)
        seen = []
        for done in dpmed.executors._as_completed_interruptibly([*quick, slow]):
            seen.append(done)
            if len(seen) == 3:
                release.set()
    assert sorted(map(id, seen)) == sorted(map(id, [*quick, slow])) and seen[-1] is slow
    assert timeouts and set(timeouts) == {1.0}


def test_workers_whose_copies_of_the_dataset_cannot_fit_are_refused_before_any_is_sent(tmp_path, monkeypatch,
                                                                                      capsys, tiny_text):
    """Before: each spawned worker unpickled its own copy of the dataset until the kernel killed the pool, and every
    run failed with WORKER_DIED."""
    from dpmed.memory import Headroom

    # no room for the workers' copies alone: the data source's own check, before the images are made, still passes
    monkeypatch.setattr(dpmed.executors, "memory", SimpleNamespace(headroom=lambda: Headroom(ram=0, swap=0)))
    (tmp_path / "s.yaml").write_text(tiny_text)
    assert main(["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "out"), "--workers", "2",
                 "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert re.search(r"\ndpmed: error: each of the 2 worker processes holds its own copy of the dataset's [0-9.]+ kB "
                     r"of images, [0-9.]+ kB in all, and only 0 bytes is free here: run without --workers \(this "
                     r"process holds the dataset already\), or set a smaller data.image_size; each run needs memory "
                     r"besides\n$", err), err
    assert list((tmp_path / "out").rglob("run.json")) == []


def test_how_many_workers_fit_is_said_and_swap_only_warns(caplog):
    dataset = SimpleNamespace(image_bytes=3000)
    from dpmed.memory import Headroom

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dpmed.executors.memory, "headroom", lambda: Headroom(ram=9500, swap=0))
        with pytest.raises(ConfigError, match=r"^each of the 4 worker processes holds its own copy of the dataset's "
                           r"3 kB of images, 12 kB in all, and only 10 kB is free here: use --workers 3, or set"):
            dpmed.executors._check_room_for_copies(dataset, 4)
        dpmed.executors._check_room_for_copies(dataset, 3)                              # 9 kB: fits, quietly
        patch.setattr(dpmed.executors.memory, "headroom", lambda: Headroom(ram=6000, swap=0))
        dpmed.executors._check_room_for_copies(dataset, 2)                              # exactly fills: fits
        assert caplog.text == ""
        patch.setattr(dpmed.executors.memory, "headroom", lambda: Headroom(ram=4000, swap=0))
        with pytest.raises(ConfigError, match=r"only 4 kB is free here: run without --workers \(this process"):
            dpmed.executors._check_room_for_copies(dataset, 2)                          # one copy fits: no pool
        patch.setattr(dpmed.executors.memory, "headroom", lambda: Headroom(ram=9500, swap=0))
        patch.setattr(dpmed.executors.memory, "headroom", lambda: Headroom(ram=9500, swap=2500))
        dpmed.executors._check_room_for_copies(dataset, 4)
        assert "12 kB in all, more than the 10 kB free: the machine will swap, which is slow (use --workers 3)" \
            in caplog.text


_KILLED_AFTER_RECORD = '''
import os
import shutil
import signal

import dpmed.executors
import dpmed.run
import dpmed.study


def install(record):
    def fake(plan, context, folder):
        folder.make()
        folder.privacy_key.write_text("secret")   # as a secure run keeps them until its run.json is written
        folder.checkpoint.write_text("secret")
        shutil.copy(record, folder.record)        # the run is finished: its run.json is written
        os.kill(os.getpid(), signal.SIGKILL)      # and its worker is killed before it returns (out of memory)
    dpmed.executors.run_one = fake
'''


def test_a_run_whose_worker_dies_after_its_record_is_written_is_finished_not_failed(tmp_path, monkeypatch,
                                                                                    tiny_text, tiny_study):
    """A worker killed between run.json and returning (the out-of-memory killer, or the pool stopping the other
    workers once one died) broke the pool, and its run was reported failed: an error.json beside its run.json that
    no later run deletes, and the run left out of this study's results and report."""
    (tmp_path / "killed_runs.py").write_text(_KILLED_AFTER_RECORD)
    monkeypatch.syspath_prepend(str(tmp_path))       # spawned workers start with this process's sys.path
    import killed_runs

    (tmp_path / "s.yaml").write_text(tiny_text)
    prepared = prepare_study(load_study(tmp_path / "s.yaml"), out=tmp_path / "out")
    task = RunTask(prepared.plans[0], prepared.folder.run(prepared.plans[0].run_id))
    record = tiny_study / "runs" / task.plan.run_id / "run.json"
    outcomes = {}
    ProcessPoolExecutor(2, setup=functools.partial(killed_runs.install, record)).map(
        [task], RunContext(dataset=prepared.dataset, evaluation=prepared.study.evaluation, progress=False),
        lambda t, outcome: outcomes.setdefault(t.plan.run_id, outcome), fail_fast=False)
    assert not isinstance(outcomes[task.plan.run_id], RunFailure), outcomes
    assert outcomes[task.plan.run_id].run_id == task.plan.run_id
    assert not task.folder.error.exists()
    # its worker died before deleting them, and after a study that ends well nothing else would: the key
    # regenerates the run's noise
    assert not task.folder.privacy_key.exists() and not task.folder.checkpoint.exists()


_KILLED_WHILE_ANOTHER_RUNS = '''
import os
import signal
import time
from pathlib import Path

import dpmed.executors
import dpmed.run


def install(marks, first):
    def fake(plan, context, folder):
        Path(marks, plan.run_id).touch()
        if plan.run_id != first:
            time.sleep(120)                       # a run in progress, until the broken pool ends its worker
        deadline = time.monotonic() + 240   # the second worker may start late under load
        while len(os.listdir(marks)) < 2 and time.monotonic() < deadline:   # both workers have taken a run: the
            time.sleep(0.05)                                                 # third waits in the queue
        os.kill(os.getpid(), signal.SIGKILL)      # the out-of-memory killer
    dpmed.executors.run_one = fake
'''


def test_only_the_run_whose_worker_died_fails_and_the_others_are_left_to_run(tmp_path, monkeypatch, caplog,
                                                                            tiny_text):
    """A worker killed mid-run breaks the pool, which stops the other workers. Only the killed worker's run fails
    with the reason. A run that no worker had taken up was reported failed too, "killed ... before this run
    finished", though it never started; and the run another worker was training, stopped by the pool, was reported
    with the same words, so that nothing told which run's process had died. Both are left unfinished (the study
    counts them as not finished, and the next `dpmed run` trains the one and continues the other)."""
    (tmp_path / "killed_pool.py").write_text(_KILLED_WHILE_ANOTHER_RUNS)
    monkeypatch.syspath_prepend(str(tmp_path))       # spawned workers start with this process's sys.path
    import killed_pool

    (tmp_path / "s.yaml").write_text(tiny_text + "  - {name: dp4, mechanism: dp_sgd, target_epsilon: 4}\n")
    prepared = prepare_study(load_study(tmp_path / "s.yaml"), out=tmp_path / "out")
    tasks = [RunTask(plan, prepared.folder.run(plan.run_id)) for plan in prepared.plans]
    (tmp_path / "marks").mkdir()
    outcomes = {}
    with caplog.at_level(logging.WARNING, logger="dpmed.executors"):
        ProcessPoolExecutor(2, setup=functools.partial(killed_pool.install, str(tmp_path / "marks"),
                                                       tasks[0].plan.run_id)).map(
            tasks, RunContext(dataset=prepared.dataset, evaluation=prepared.study.evaluation, progress=False),
            lambda t, outcome: outcomes.setdefault(t.plan.run_id, outcome), fail_fast=False)
    started = sorted(os.listdir(tmp_path / "marks"))
    assert started == sorted(t.plan.run_id for t in tasks[:2])
    assert list(outcomes) == [tasks[0].plan.run_id]
    killed = outcomes[tasks[0].plan.run_id]
    assert isinstance(killed, RunFailure) and killed.error == WORKER_DIED
    assert json.loads(killed.error_file.read_text())["error"] == WORKER_DIED
    assert not tasks[1].folder.error.exists() and not tasks[2].folder.error.exists()
    assert "while it held no unfinished run" not in caplog.text, caplog.text    # the failed run names the death


_KILLED_WITHOUT_A_RUN = '''
import os
import signal
import time
from pathlib import Path

import dpmed.executors


def install(marks):
    try:                                          # the first worker to start claims the death
        os.close(os.open(os.path.join(marks, "dying"), os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        def fake(plan, context, folder):
            Path(marks, plan.run_id).touch()
            time.sleep(120)                       # a run in progress, until the broken pool ends its worker
        dpmed.executors.run_one = fake
        return
    deadline = time.monotonic() + 240             # the other worker may start late under load
    while len(os.listdir(marks)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(os.getpid(), signal.SIGKILL)          # killed as it starts, holding no run (out of memory, kill -9)
'''


def test_a_worker_that_dies_holding_no_run_is_told(tmp_path, monkeypatch, caplog, tiny_text):
    """A worker killed before it took a run up (still starting, or between runs) breaks the pool as well, which
    stops the run the other worker trains: no run failed, every run was left unfinished, and nothing said why (the
    command's summary blamed --fail-fast, given or not)."""
    (tmp_path / "killed_idle.py").write_text(_KILLED_WITHOUT_A_RUN)
    monkeypatch.syspath_prepend(str(tmp_path))       # spawned workers start with this process's sys.path
    import killed_idle

    (tmp_path / "s.yaml").write_text(tiny_text)
    prepared = prepare_study(load_study(tmp_path / "s.yaml"), out=tmp_path / "out")
    tasks = [RunTask(plan, prepared.folder.run(plan.run_id)) for plan in prepared.plans]
    (tmp_path / "marks").mkdir()
    outcomes = {}
    with caplog.at_level(logging.WARNING, logger="dpmed.executors"):
        ProcessPoolExecutor(2, setup=functools.partial(killed_idle.install, str(tmp_path / "marks"))).map(
            tasks, RunContext(dataset=prepared.dataset, evaluation=prepared.study.evaluation, progress=False),
            lambda t, outcome: outcomes.setdefault(t.plan.run_id, outcome), fail_fast=False)
    # "dying" and at least one run taken up; under load a worker started in the dead one's place may take up the
    # other run, and its stand-in run may even return (None) before the pool is seen broken: no run failed either way
    assert len(os.listdir(tmp_path / "marks")) >= 2, "the living worker took up no run"
    assert not any(isinstance(outcome, RunFailure) for outcome in outcomes.values()), outcomes
    assert not any(task.folder.error.exists() for task in tasks)
    assert "a worker process died (killed from outside: out of memory, kill -9) while it held no unfinished run, " \
           "and the pool stopped the other workers" in caplog.text, caplog.text


def test_a_dead_worker_s_run_json_that_cannot_be_read_makes_the_run_failed_not_the_study_stop(tmp_path, tiny_text):
    """Its record is read back where the worker wrote it; where that record cannot be read, the ConfigError went up
    through the pool loop and the other runs' outcomes were lost for that invocation. The run is failed instead."""
    import dpmed.executors

    (tmp_path / "s.yaml").write_text(tiny_text)
    prepared = prepare_study(load_study(tmp_path / "s.yaml"), out=tmp_path / "out")
    task = RunTask(prepared.plans[0], prepared.folder.run(prepared.plans[0].run_id))
    task.folder.make()
    task.folder.record.write_text("{not json")
    outcome = dpmed.executors._broken_off(task)
    assert isinstance(outcome, RunFailure), outcome
    assert "the process was killed, and its run.json" in outcome.error_file.read_text()


def _workers_of(pid: int) -> list[int]:
    """The pool workers (spawned processes) among the children of ``pid``, read from /proc."""
    children = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        children += [int(c) for c in (task / "children").read_text().split()]
    return [c for c in children if b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes()]


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (exited but not yet reaped by whoever adopted it counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="finds the workers in /proc (Linux)")
def test_the_workers_of_a_killed_study_exit_instead_of_training_on(tmp_path, tiny_text):
    """kill -9 of `dpmed run --workers 2` mid-run: its workers end their runs and exit, rather than train the runs
    queued for them, unseen, beside the next `dpmed run` of the folder, and then wait for work for ever."""
    (tmp_path / "s.yaml").write_text(tiny_text.replace("epochs: 3", "epochs: 200"))
    cmd = [sys.executable, "-m", "dpmed.cli", "run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "out"),
           "--no-progress", "--workers", "2"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers: list[int] = []
    try:
        runs = tmp_path / "out" / "tiny" / "runs"
        deadline = time.monotonic() + 120
        while not (runs.is_dir() and any(runs.iterdir())) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, "the study ended before any run started"
        workers = _workers_of(proc.pid)
        assert workers
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 30
        while any(map(_alive, workers)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [w for w in workers if _alive(w)]
    finally:
        for worker in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker, signal.SIGKILL)


def test_more_workers_than_runs_are_told_as_the_workers_that_start(tmp_path, tiny_text, monkeypatch, caplog):
    """--workers 1000 on two runs starts two processes: the log said "1000 workers"."""
    (tmp_path / "s.yaml").write_text(tiny_text)
    monkeypatch.setattr(dpmed.study, "make_executor", lambda *a, **k: dpmed.executors.InProcessExecutor())
    with caplog.at_level(logging.INFO, logger="dpmed"):
        dpmed.study.run_study(tmp_path / "s.yaml", out=tmp_path / "out", progress=False, workers=1000)
    assert "training 2 runs with executor 'local', 2 workers (one per run; 1000 asked for)" in caplog.text
