"""What `dpmed run` shows while it works: a log in the study's private folder, a progress line over the whole study
with the time left, no carriage-return bars where stderr is not a terminal, none of dp_accounting's known harmless
warnings from worker processes, and a quiet Ctrl-C with --workers."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dpmed import accounting
from dpmed.cli import main


def _study(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return path


def test_the_log_is_written_in_the_private_folder(tiny_study):
    log = tiny_study / "private" / "dpmed.log"
    text = log.read_text(encoding="utf-8")
    for line in ("training 2 runs with executor 'local'", "base_seed0: started", "dp_eps8_C1_seed0: evaluated in",
                 "study: 2 of 2 runs done"):
        assert line in text, line
    assert re.search(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ MainProcess dpmed\.study INFO: ", text, re.M)
    assert [p.name for p in tiny_study.rglob("*.log")] == ["dpmed.log"]     # nowhere outside private/


def test_run_and_its_report_write_the_image_shape_as_plan_does(tiny_study):
    """Before: `dpmed plan` wrote 1x16x16 and `dpmed run` (and the report's summary) (1, 16, 16)."""
    log = (tiny_study / "private" / "dpmed.log").read_text(encoding="utf-8")
    assert "train/val/test images of shape 1x16x16, task" in log and "(1, 16, 16)" not in log
    report = " ".join((tiny_study / "report.html").read_text(encoding="utf-8").split())
    assert "images of shape 1x16x16, task" in report and "(1, 16, 16)" not in report


def test_without_a_terminal_there_are_no_bars_but_a_study_progress_line_with_time_left(tiny_text, tmp_path, capsys):
    study = _study(tmp_path, tiny_text.replace("epochs: 3", "epochs: 1"))
    assert main(["run", str(study), "--out", str(tmp_path / "out")]) == 0      # bars not switched off by hand
    err = capsys.readouterr().err
    assert "\r" not in err and "step/s" not in err and "it/s" not in err
    assert re.search(r"^study: 1 of 2 runs done, \d+:\d\d elapsed, about \d+:\d\d left$", err, re.M), err
    assert re.search(r"^study: 2 of 2 runs done, \d+:\d\d elapsed$", err, re.M), err
    assert re.search(r"^base_seed0: trained in \d+ s; evaluating on \d+ validation and \d+ test images$", err, re.M)
    assert max(map(len, err.splitlines())) < 1000


def test_known_harmless_rdp_warnings_of_worker_processes_do_not_reach_the_terminal(tiny_text, tmp_path, caplog):
    """sigma 0.5 with the RDP accountant: dp_accounting logs "failed to converge" for low orders when a run's card
    is computed, which with --workers happens in a worker process. A single run goes to a spawned worker all the same,
    so the DP-SGD arm alone, for one epoch, shows it."""
    absl = logging.getLogger("absl")
    filters, absl.filters = absl.filters, []         # main() in this process may have installed the command's filter
    try:
        with caplog.at_level(logging.WARNING, logger="absl"):
            accounting.dp_sgd_epsilon(noise_multiplier=0.5, sample_rate=16 / 96, steps=6, delta=1e-5,
                                      accountant="rdp")
    finally:
        absl.filters = filters
    assert any("failed to converge" in r.getMessage() for r in caplog.records)   # the warning this test hides
    study = _study(tmp_path, tiny_text.replace("epochs: 3", "epochs: 1")
                   .replace("  - {name: base, mechanism: none}\n", "")
                   .replace("target_epsilon: 8}", "noise_multiplier: 0.5, accountant: rdp}"))
    done = subprocess.run([sys.executable, "-m", "dpmed.cli", "run", str(study), "--out", str(tmp_path / "out"),
                           "--workers", "2"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "1 worker (one per run; 2 asked for)" in done.stderr, done.stderr
    assert "RDP accountant" in done.stderr                     # the DP-SGD run's card came back from its worker
    assert "converge" not in done.stderr and "Renyi" not in done.stderr, done.stderr
    assert "absl" not in done.stderr and "warning" not in done.stderr.lower(), done.stderr


def _workers(pid: int) -> list[int]:
    """The spawned worker processes of ``pid`` (Linux /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            if ppid == pid and b"spawn_main" in (stat.parent / "cmdline").read_bytes():
                found.append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    return found


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the worker processes in /proc")
@pytest.mark.parametrize("moment", ["while the workers start", "while they train"])
def test_ctrl_c_with_workers_stops_quietly_and_keeps_the_folder_usable(tiny_text, tmp_path, moment):
    """Ctrl-C reaches every process of the terminal's foreground group: the command and its workers, which may be
    still importing torch or already training."""
    out = tmp_path / "out"
    # long enough that no run can end between the moment below and the signal, on any machine
    study = _study(tmp_path, tiny_text.replace("epochs: 3", "epochs: 500"))
    # A terminal starts its commands with Ctrl-C at its default action; a test runner started in the background by a
    # shell (`cmd &`) ignores SIGINT, and an ignored SIGINT is inherited through exec, so the child gets it back here.
    proc = subprocess.Popen([sys.executable, "-m", "dpmed.cli", "run", str(study), "--out", str(out), "--workers",
                             "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen = []
    for line in proc.stderr:                   # the line logged just before the workers are started
        seen.append(line)
        if line.startswith("training 2 runs"):
            break
    deadline = time.monotonic() + 240
    if moment == "while the workers start":    # two worker processes exist and are importing dpmed and torch
        while proc.poll() is None and time.monotonic() < deadline and len(_workers(proc.pid)) < 2:
            time.sleep(0.05)
        time.sleep(1)
    else:                                      # both runs have saved a checkpoint: they are training
        saved = [out / "tiny" / "private" / "runs" / run_id / "checkpoint.pt" for run_id in ("base_seed0",
                                                                                            "dp_eps8_C1_seed0")]
        while proc.poll() is None and time.monotonic() < deadline and not all(p.is_file() for p in saved):
            time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)
    try:
        _, rest = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError("dpmed run did not end within 120 s of Ctrl-C") from None
    stderr = "".join(seen) + rest
    assert proc.returncode == -signal.SIGINT, stderr     # what a shell shows as 130: `dpmed.cli.command`
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    assert "interrupted: finished runs are kept" in stderr and "run the same command to continue" in stderr
    assert not (out / "tiny" / "private" / "lock").exists()
    assert not list((out / "tiny" / "runs").glob("*/run.json"))          # both runs were stopped, none finished


@pytest.mark.skipif(sys.platform == "win32", reason="a process killed by a signal is POSIX's")
@pytest.mark.parametrize("raised", ["raise KeyboardInterrupt", "exec('raise KeyboardInterrupt')"],
                         ids=["in dpmed's code", "inside exec() of a string, as when a dataclass is imported"])
def test_an_interrupted_command_ends_killed_by_sigint_wherever_the_interrupt_landed(tiny_text, tmp_path, raised):
    """Before: `sys.exit(130)` after the clean-up, which CPython turns into death by SIGINT when the KeyboardInterrupt
    was raised inside exec() of a string, caught or not: the same Ctrl-C ended `dpmed run` with status 130 or killed
    by SIGINT, depending on what it interrupted (a test that expected 130 saw -2 once in many runs). Now always killed
    by SIGINT, as CPython ends after an uncaught Ctrl-C: a shell shows 130, and a script that runs dpmed stops."""
    script = (f"import dpmed.study\ndef interrupted(*args, **kwargs):\n    {raised}\n"
              "dpmed.study.run_study = interrupted\nfrom dpmed.cli import command\ncommand()\n")
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-c", script, "run", str(_study(tmp_path, tiny_text)), "--out", str(out),
                           "--no-progress"], capture_output=True, text=True, timeout=300)
    assert done.returncode == -signal.SIGINT, done.stderr
    assert "interrupted: finished runs are kept" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr, done.stderr


def test_a_bug_in_dpmed_reaches_the_user_as_one_line_with_its_traceback_in_a_private_file(tmp_path, monkeypatch,
                                                                                          capsys):
    """No traceback reaches a user: a failure that is dpmed's own (here the report stage raising) is told in one
    line naming a file, readable by the user only, that holds the traceback to report."""
    import dpmed.cli
    import dpmed.privacy_commands

    def broken(args):
        raise ValueError("'yerr' must not contain negative values")

    monkeypatch.setattr(dpmed.cli, "_report", broken)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", None)             # read TMPDIR again
    assert main(["report", str(tmp_path / "study")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("dpmed: internal error: ValueError: 'yerr' must not")
    assert "Traceback" not in err and "Finished runs are kept" in err
    path = Path(err.split("traceback in ")[1].split(" (read it first")[0])
    assert err.endswith("(read it first: as this line, it may quote a file name or value of your data)")
    assert path.parent == tmp_path and path.stat().st_mode & 0o777 == 0o600
    assert "Traceback" in path.read_text() and "in broken" in path.read_text()
    monkeypatch.setattr(dpmed.privacy_commands, "privacy_command", broken)   # keeps no runs, so promises none
    assert main(["privacy", "epsilon", "--noise-multiplier", "1", "--sample-rate", "0.1", "--steps", "1"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("dpmed: internal error: ValueError") and "Finished runs" not in err
    assert "Please report this with the traceback in " in err


def test_a_reader_that_goes_away_ends_the_command_quietly_with_status_zero():
    """`dpmed status DIR | head`: the reader closing its end is no failure of dpmed's, so it is neither an internal
    error (status 1, a traceback file) nor a traceback: the rest of the output is dropped and the status is 0."""
    script = ("import sys\nimport dpmed.cli\ndef closed(args):\n    raise BrokenPipeError(32, 'Broken pipe')\n"
              "dpmed.cli._status = closed\nsys.exit(dpmed.cli.main(['status', 'anywhere']))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr


@pytest.mark.parametrize(("seed", "warned"), [(0, True), (2, False)])
def test_a_dp_count_no_larger_than_the_batch_is_told_as_q_equal_to_one(tmp_path, capsys, seed, warned):
    """Planned from a DP count at or below the expected batch, DP-SGD takes every unit in every step (q = 1): the
    batch the study states is then not what trains, which was silent. 96 training patients, batch 96; with
    reproducible randomness the count is 95 for seed 0 and 97 for seed 2 (size_epsilon 1)."""
    study = _study(tmp_path, "name: tiny\nprivacy_randomness: reproducible\nsize_epsilon: 1\n"
                             f"seeds: [{seed}]\ndata: {{source: phantom, n_images: 160, image_size: 16}}\n"
                             "training: {epochs: 3, batch_size: 96, threads: 1}\n"
                             "arms:\n  - {name: dp, mechanism: dp_sgd, target_epsilon: 8}\n")
    assert main(["plan", str(study), "--out", str(tmp_path / "out"), "--no-estimate"]) == 0
    captured = capsys.readouterr()
    told = f"dp_eps8_C1_seed{seed}: q = 1: the DP count of the training patients is no more than the expected batch"
    assert (told in captured.err) is warned
    assert ("about 95 patients" if warned else "about 97 patients") in captured.out


# ------------------------------------------------------------------------------------------------------- SIGTERM


def test_sigterm_during_run_is_taken_as_ctrl_c_and_the_handler_before_comes_back(tiny_text, tmp_path, monkeypatch,
                                                                                 capsys):
    """`timeout`, SLURM and `docker stop` end a command with SIGTERM: while `dpmed run` works it goes the way of
    Ctrl-C (and only then: the handler that was there before comes back)."""
    import dpmed.executors

    class Unhandled(Exception):
        """Stands for SIGTERM's default action here, which would end the test runner."""

    def before(signum, frame):
        raise Unhandled

    def terminated(plan, context, folder):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)

    monkeypatch.setattr(dpmed.executors, "run_one", terminated)
    out = tmp_path / "out"
    previous = signal.signal(signal.SIGTERM, before)
    try:
        assert main(["run", str(_study(tmp_path, tiny_text)), "--out", str(out), "--no-progress"]) == 130
        assert signal.getsignal(signal.SIGTERM) is before
    finally:
        signal.signal(signal.SIGTERM, previous)
    err = capsys.readouterr().err
    assert f"interrupted (SIGTERM; exit status 130, as for Ctrl-C): finished runs are kept in {out / 'tiny'}" in err
    assert not (out / "tiny" / "private" / "lock").exists()


@pytest.mark.skipif(not hasattr(os, "killpg"), reason="sends SIGTERM to a process group")
@pytest.mark.parametrize("workers, to", [(1, "dpmed"), (2, "dpmed"), (2, "every process")],
                         ids=["in process, like timeout", "workers, like docker stop", "workers, like SLURM"])
def test_sigterm_mid_run_cleans_up_as_ctrl_c_does(tiny_text, tmp_path, workers, to):
    """Before: dpmed ended at once with status -15 and no message, left its lock, and left the shareable files with
    their real times, which tell how long DP-SGD runs trained (`dpmed.folders.RELEASE_TIME`). SIGTERM goes to dpmed
    alone (`timeout`, `docker stop`), or to dpmed and its workers (SLURM's scancel)."""
    from dpmed.folders import RELEASE_TIME, StudyFolder

    out = tmp_path / "out"
    folder = StudyFolder(out / "tiny")
    study = _study(tmp_path, tiny_text.replace("epochs: 3", "epochs: 500"))
    proc = subprocess.Popen([sys.executable, "-m", "dpmed.cli", "run", str(study), "--out", str(out), "--no-progress",
                             "--workers", str(workers)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    saved = [folder.run(run_id).checkpoint for run_id in ("base_seed0", "dp_eps8_C1_seed0")][:workers]
    deadline = time.monotonic() + 240
    while proc.poll() is None and time.monotonic() < deadline and not all(p.is_file() for p in saved):
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()[1]
    (os.kill if to == "dpmed" else os.killpg)(proc.pid, signal.SIGTERM)
    try:
        _, stderr = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError("dpmed run did not end within 120 s of SIGTERM") from None
    assert proc.returncode == -signal.SIGINT, stderr     # as after Ctrl-C; a shell shows 130
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    assert "interrupted (SIGTERM; exit status 130, as for Ctrl-C): finished runs are kept" in stderr, stderr
    assert not folder.lock.exists()
    assert not list(folder.root.glob("**/run.json")) and not list(folder.root.glob("**/error.json"))
    shareable = [folder.root, folder.resolved_study, folder.runs, *folder.runs.rglob("*")]
    assert folder.resolved_study.is_file() and len(shareable) > 3        # a run's folder is there too
    assert {path: path.stat().st_mtime for path in shareable} == {path: RELEASE_TIME for path in shareable}


def test_a_setting_another_setting_turns_off_is_told_on_the_terminal_and_in_the_private_log(tmp_path, capsys):
    """Told while the study file is read, before the log file's folder is known, and so it reached the terminal only;
    in the log it comes first, before the run's own first line."""
    study = _study(tmp_path, "name: s\ndata: {source: phantom, n_images: 160, image_size: 16, preprocessing: "
                             "{aspect: crop}}\ntraining: {epochs: 1, batch_size: 16, threads: 1}\n"
                             "evaluation: {bootstrap_resamples: 20}\narms: [{name: base, mechanism: none}]\n")
    assert main(["run", str(study), "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    said = "data.preprocessing.aspect changes nothing, as source 'phantom' generates square images"
    assert capsys.readouterr().err.count(said) == 1
    log = (tmp_path / "out" / "s" / "private" / "dpmed.log").read_text(encoding="utf-8").splitlines()
    assert sum(said in line for line in log) == 1 and "dpmed.config.loading WARNING: study file" in log[0], log
    assert "dpmed.study INFO: data: phantom" in log[1], log


def test_what_reading_the_study_file_told_waits_for_the_log_s_first_line(tmp_path, capsys):
    """Written to the log at once, it ended a command whose output folder cannot be made in an internal error, and
    went into the log of the run that held the folder: a command refused before it logs leaves no log."""
    import threading

    from dpmed.folders import StudyFolder
    from dpmed.lock import FolderLock

    study = _study(tmp_path, "name: s\ndata: {source: phantom, preprocessing: {aspect: crop}}\n"
                             "arms: [{name: base, mechanism: none}]\n")
    said = "data.preprocessing.aspect changes nothing"
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the output folder should be\n")
    assert main(["run", str(study), "--out", str(blocker), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count(said) == 1 and "dpmed: error: cannot write to the output folder" in err, err
    folder = StudyFolder(tmp_path / "out" / "s")
    held, done = threading.Event(), threading.Event()

    def hold() -> None:     # another thread of this process is refused as another process is
        with FolderLock(folder.lock, what=str(folder.root)):
            held.set()
            done.wait(120)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(60)
        assert main(["run", str(study), "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    finally:
        done.set()
        holder.join()
    err = capsys.readouterr().err
    assert err.count(said) == 1 and f"dpmed: error: {folder.root} is in use by another" in err, err
    assert not folder.log.exists()
