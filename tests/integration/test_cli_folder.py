"""The output folder: one `dpmed run` at a time (a second one refuses, naming the first; a lock left by a process
that is gone is taken over), and a folder that cannot be written ends in one line, not an OSError traceback."""

from __future__ import annotations

import json
import os
import shutil
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dpmed.cli import main
from dpmed.folders import RETRAIN_NOTE, StudyFolder, temporary_beside
from dpmed.lock import FolderLock


def _study(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return path


def _secure_dp_study(tmp_path: Path, text: str) -> Path:
    """The tiny study in secure mode, its DP-SGD arm alone for one epoch: the DP count of the training set is drawn
    for the DP arm alone and does not depend on how long it trains, so the arm without privacy and further epochs
    would only add training time."""
    return _study(tmp_path, text.replace("privacy_randomness: reproducible", "privacy_randomness: secure")
                  .replace("  - {name: base, mechanism: none}\n", "").replace("epochs: 3", "epochs: 1"))


def _one_line_error(err: str) -> str:
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dpmed: error: "), err
    return lines[0]


def test_a_second_run_on_the_same_folder_refuses_naming_the_first(tiny_text, tmp_path, capsys):
    # Long enough that the first run still holds the folder however fast the machine (the tiny study's three epochs
    # could end before the second command got to the lock); it is interrupted below.
    long_text = tiny_text.replace("epochs: 3,", "epochs: 1000,")
    assert long_text != tiny_text
    study = _study(tmp_path, long_text)
    out = tmp_path / "out"
    # Ctrl-C at its default action in the child: a test runner started in the background by a shell (`cmd &`)
    # ignores SIGINT, and an ignored SIGINT is inherited through exec, so the SIGINT below would go unheard.
    first = subprocess.Popen([sys.executable, "-m", "dpmed.cli", "run", str(study), "--out", str(out),
                              "--no-progress"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        resolved = out / "tiny" / "study.yaml"        # written once the first run holds the folder, before training
        deadline = time.monotonic() + 180
        while not resolved.exists() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert resolved.exists() and first.poll() is None, "the first run ended before the test could start"
        assert main(["run", str(study), "--out", str(out), "--no-progress"]) == 2
        line = _one_line_error(capsys.readouterr().err)
        assert f"is in use by another dpmed run (PID {first.pid} on host {socket.gethostname()}" in line
        assert "--out" in line
        assert main(["plan", str(study), "--out", str(out), "--no-estimate"]) == 0     # readers may look meanwhile
        assert f"a dpmed run is working in that folder now (PID {first.pid}" in capsys.readouterr().out
    finally:
        first.send_signal(signal.SIGINT)
        _, err = first.communicate(timeout=120)
    assert first.returncode in (0, -signal.SIGINT), err
    assert not (out / "tiny" / "private" / "lock").exists()          # released when the first run ended


def test_the_lock_of_a_process_that_is_gone_is_taken_over(tiny_study, tiny_text, tmp_path, capsys):
    out = tmp_path / "out"
    shutil.copytree(tiny_study, out / "tiny")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()                                               # its PID now names no process
    lock = out / "tiny" / "private" / "lock"
    lock.write_text(json.dumps({"pid": gone.pid, "host": socket.gethostname(), "started": "2026-01-01 00:00:00",
                                "token": "0123456789abcdef", "process_start": 1}))
    assert main(["run", str(_study(tmp_path, tiny_text)), "--out", str(out), "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert "2 finished earlier" in captured.out
    assert f"took over the lock of a dpmed run that is gone (PID {gone.pid} on host" in captured.err
    assert not lock.exists()                                  # taken over, then released at the end


# ------------------------------------------------------------------------------------------- unwritable folders


def test_run_into_an_output_folder_that_cannot_be_made_ends_in_one_line(tiny_text, tmp_path, capsys):
    blocker = tmp_path / "results"
    blocker.write_text("a file where the output folder should be\n")
    assert main(["run", str(_study(tmp_path, tiny_text)), "--out", str(blocker), "--no-progress"]) == 2
    line = _one_line_error(capsys.readouterr().err)
    assert line == (f"dpmed: error: cannot write to the output folder {blocker / 'tiny'}: {blocker} is a file, not a "
                    "folder; move or rename that file, or choose another output folder (--out)")


def test_plan_into_an_output_folder_that_cannot_be_made_ends_in_one_line_and_makes_private_owner_only(
        tiny_text, tmp_path, capsys):
    """`dpmed plan` writes the DP counts DP-SGD plans from (private/released_sizes.json), so it meets the same
    folder problems as `dpmed run` and must answer them as it does; the private folder it makes is 0700."""
    blocker = tmp_path / "results"
    blocker.write_text("a file where the output folder should be\n")
    study = _study(tmp_path, tiny_text)
    assert main(["plan", str(study), "--out", str(blocker), "--no-estimate"]) == 2
    line = _one_line_error(capsys.readouterr().err)
    assert line.startswith(f"dpmed: error: cannot write to the output folder {blocker / 'tiny'}: {blocker} is a "
                           "file, not a folder")
    assert main(["plan", str(study), "--out", str(tmp_path / "out"), "--no-estimate"]) == 0
    assert (tmp_path / "out" / "tiny" / "private").stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize("how", ["a folder in the way", "read-only"])
def test_report_into_a_folder_that_cannot_be_written_ends_in_one_line(tiny_study, tmp_path, capsys, how):
    folder = tmp_path / "tiny"
    shutil.copytree(tiny_study, folder)
    if how == "read-only":
        if os.geteuid() == 0:
            pytest.skip("root writes into read-only folders; the other case covers the message")
        os.chmod(folder, 0o555)
    else:
        temporary_beside(folder / "comparisons.json").mkdir()   # where the report's first file is written
    try:
        assert main(["report", str(folder)]) == 2
    finally:
        os.chmod(folder, 0o755)
    line = _one_line_error(capsys.readouterr().err)
    assert line.startswith(f"dpmed: error: cannot write to the output folder {folder}: ")
    assert "writable" in line


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_run_into_a_read_only_folder_ends_in_one_line(tiny_text, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    os.chmod(out, 0o555)
    try:
        assert main(["run", str(_study(tmp_path, tiny_text)), "--out", str(out), "--no-progress"]) == 2
    finally:
        os.chmod(out, 0o755)
    line = _one_line_error(capsys.readouterr().err)
    assert line.startswith(f"dpmed: error: cannot write to the output folder {out / 'tiny'}: Permission denied")


@pytest.mark.parametrize("setting", ["evaluation.bootstrap_resamples=1000000000000",
                                     "training.augmentation.crop_padding=64"])
def test_a_study_refused_while_planning_leaves_the_output_folder_as_it_found_it(tmp_path, capsys, monkeypatch,
                                                                               setting):
    """Redraws no memory holds, a crop padding as large as the images: refused before anything is written. Before, an
    empty private/ (and the DP count drawn for the quickstart's DP-SGD arms in it) was left in a folder the study
    never ran in; a folder or file that was there before stays."""
    from dpmed import memory

    monkeypatch.setattr(memory, "headroom", lambda: memory.Headroom(ram=2**30, swap=0))
    out = tmp_path / "new" / "out"
    assert main(["run", "--out", str(out), "--set", setting, "--no-progress"]) == 2
    _one_line_error(capsys.readouterr().err)
    assert not (tmp_path / "new").exists()
    kept = tmp_path / "kept"
    (kept / "quickstart").mkdir(parents=True)
    (kept / "notes.txt").write_text("the user's\n")
    assert main(["run", "--out", str(kept), "--set", setting, "--no-progress"]) == 2
    _one_line_error(capsys.readouterr().err)
    assert sorted(p.relative_to(kept).as_posix() for p in kept.rglob("*")) == ["notes.txt", "quickstart"]

# ---------------------------------------------------------------------------------- report and status: which folder


def test_report_and_status_of_a_folder_without_study_yaml_say_what_is_missing_and_what_to_do(tiny_study, tiny_text,
                                                                                             tmp_path, capsys):
    """Before: "X holds no study.yaml" for every case, a folder that does not exist included, and nothing on how to
    get study.yaml back when it was deleted beside finished runs."""
    out = tmp_path / "out"
    folder = out / "tiny"
    shutil.copytree(tiny_study, folder)
    (folder / "study.yaml").unlink()
    for command in ("report", "status"):
        assert main([command, str(folder)]) == 2
        assert _one_line_error(capsys.readouterr().err) == (
            f"dpmed: error: {folder / 'study.yaml'} is missing: {folder} holds runs/ but not the study.yaml `dpmed "
            f"run` writes beside it; rerun the study file that made them (name: tiny) with `dpmed run STUDY --out "
            f"{out}`: it rewrites study.yaml and keeps the finished runs")
        assert main([command, str(tmp_path / "nowhere")]) == 2
        assert _one_line_error(capsys.readouterr().err) == (
            f"dpmed: error: no such folder {tmp_path / 'nowhere'}; pass the folder `dpmed run` wrote for the study "
            "(OUT/<study name>, by default results/<study name>)")
    (tmp_path / "empty").mkdir()
    assert main(["report", str(tmp_path / "empty")]) == 2
    assert _one_line_error(capsys.readouterr().err).startswith(
        f"dpmed: error: {tmp_path / 'empty'} is not a dpmed study folder: it holds no study.yaml (nor runs/); pass the "
        "folder `dpmed run` wrote")
    refused = tmp_path / "refused"                 # `dpmed run` stopped before training: only its private log
    (refused / "private").mkdir(parents=True)
    (refused / "private" / "dpmed.log").write_text("dpmed: error: the test split holds one class\n")
    for command in ("report", "status"):
        assert main([command, str(refused)]) == 2
        assert _one_line_error(capsys.readouterr().err) == (
            f"dpmed: error: {refused} holds no run yet: `dpmed run` stopped before it wrote study.yaml; its log "
            f"{refused / 'private' / 'dpmed.log'} (private) says why. Fix that and run the study again with `--out "
            f"{tmp_path}`")
    # what the message says to do works: the finished runs are kept, and the folder reports again
    assert main(["run", str(_study(tmp_path, tiny_text)), "--out", str(out), "--no-progress"]) == 0
    assert "2 runs (2 finished earlier)" in capsys.readouterr().out
    assert main(["report", str(folder)]) == 0
    capsys.readouterr()
    assert main(["report", str(out)]) == 2                      # the output root, not the study's folder in it
    assert _one_line_error(capsys.readouterr().err) == (
        f"dpmed: error: {out} holds no study.yaml but 1 study folder(s) do: {folder}; pass one of them")


def test_report_of_a_folder_whose_runs_were_all_interrupted_says_to_continue_them(tiny_study, tmp_path, capsys):
    """Before: "run the study first", as if nothing had been done."""
    folder = StudyFolder(tmp_path / "tiny")
    shutil.copytree(tiny_study, folder.root)
    for record in folder.runs.glob("*/run.json"):
        record.unlink()
    run_id, other = sorted(p.name for p in folder.runs.iterdir())
    for path in folder.runs.glob("*/*"):     # stopped while training: nothing released yet
        path.unlink()
    folder.run(run_id).make()
    folder.run(run_id).checkpoint.write_bytes(b"an unreadable checkpoint still continues its run")
    assert main(["report", str(folder.root)]) == 2
    line = _one_line_error(capsys.readouterr().err)
    assert line.endswith("has no finished run (no runs/*/run.json); 1 run(s) were interrupted: run the same "
                         "`dpmed run` again to continue them")
    folder.run(other).model.write_text("a model released just before its run.json was to be written")
    assert main(["report", str(folder.root)]) == 2
    line = _one_line_error(capsys.readouterr().err)
    assert line.endswith("2 run(s) were interrupted (1 of them as their models and outputs were moved into runs/: "
                         "these lie there without a run.json, and no eps covers them: do not share them; that "
                         "`dpmed run` deletes them first): run the same `dpmed run` again to continue them")
    # while a dpmed run works in the folder its runs are not interrupted: they are in progress (found by a user)
    with FolderLock(folder.lock, what=str(folder.root)):
        assert main(["report", str(folder.root)]) == 2
    line = _one_line_error(capsys.readouterr().err)
    assert re.search(r"has no finished run \(no runs/\*/run.json\); a dpmed run \(PID \d+.*\) is working in it now: "
                     r"run `dpmed report` again once a run has finished$", line), line


@pytest.mark.parametrize("noise", [-200, 3])
def test_a_study_whose_counts_file_was_deleted_beside_finished_runs_takes_their_count_back(
        tiny_study, tiny_study_file, tiny_text, tmp_path, capsys, monkeypatch, noise):
    """The finished runs were planned from the DP count in private/released_sizes.json; with the file gone, a new
    draw beside them would be a second release of the count that the study's total could not tell from the first.
    Their records hold the count, released already: the study plans from it again and can be extended (before, it
    was refused and the folder could not grow). A count below the batch (noise -200) is what the record's
    released_units holds, not its N. In reproducible mode (the tiny study's) the public seed draws the same count
    again."""
    from dpmed import released_size

    monkeypatch.setattr(released_size, "discrete_laplace", lambda scale, source: noise)
    secure = _secure_dp_study(tmp_path, tiny_text)
    out = tmp_path / "out"
    assert main(["run", str(secure), "--out", str(out), "--no-progress"]) == 0
    counts = out / "tiny" / "private" / "released_sizes.json"
    drawn = [(d["key"], d["count"]) for d in json.loads(counts.read_text())["draws"]]
    counts.unlink()
    monkeypatch.setattr(released_size, "discrete_laplace", lambda scale, source: noise + 1)   # a draw would show
    assert main(["run", str(secure), "--out", str(out), "--no-progress", "--set", "seeds=[0, 1]"]) == 0
    assert [(d["key"], d["count"]) for d in json.loads(counts.read_text())["draws"]] == drawn
    plans = [json.loads((out / "tiny" / "runs" / f"dp_eps8_C1_seed{s}" / "run.json").read_text())["plan"]["privacy"]
             for s in (0, 1)]
    assert [[p[k] for k in ("n_units", "released_units", "sample_rate")] for p in plans] == [
        [plans[0][k] for k in ("n_units", "released_units", "sample_rate")]] * 2
    assert (plans[0]["released_units"] is not None) == (noise < 0)
    monkeypatch.undo()                       # the reproducible draw below is the real one from its public seed
    seeded = tmp_path / "seeded"
    shutil.copytree(tiny_study, seeded / "tiny")
    (seeded / "tiny" / "private" / "released_sizes.json").unlink()
    assert main(["plan", str(tiny_study_file), "--out", str(seeded), "--no-estimate"]) == 0


def test_a_reproducible_runs_count_is_never_taken_back_into_a_secure_study(tiny_study, tiny_text, tmp_path,
                                                                          monkeypatch):
    """A reproducible run's count is the exact size plus noise from a public seed: taken back as a secure study's DP
    count, it would give the exact size to whoever holds the run's record. The secure study draws its own."""
    from dpmed import released_size

    out = tmp_path / "out"
    shutil.copytree(tiny_study, out / "tiny")
    (out / "tiny" / "private" / "released_sizes.json").unlink()
    secure = _study(tmp_path, tiny_text.replace("privacy_randomness: reproducible", "privacy_randomness: secure"))
    sources = []
    real = released_size.discrete_laplace

    def spy(scale, source):
        sources.append(source)
        return real(scale, source)
    monkeypatch.setattr(released_size, "discrete_laplace", spy)
    assert main(["plan", str(secure), "--out", str(out), "--no-estimate", "--set", "seeds=[1]"]) == 0
    assert len(sources) == 1 and sources[0].__name__ == "randbelow"
    draws = json.loads((out / "tiny" / "private" / "released_sizes.json").read_text())["draws"]
    assert [d["mode"] for d in draws] == ["secure"] and "from" not in draws[0]


def test_a_count_taken_back_is_not_kept_where_the_study_then_refuses_the_runs(tiny_text, tmp_path, capsys):
    """Runs made on other data are refused; the count taken back from them must not stay in the file as the new
    data's, where the study would plan from it once those runs are deleted."""
    secure = _secure_dp_study(tmp_path, tiny_text)
    out = tmp_path / "out"
    assert main(["run", str(secure), "--out", str(out), "--no-progress"]) == 0
    (out / "tiny" / "private" / "released_sizes.json").unlink()
    capsys.readouterr()
    assert main(["plan", str(secure), "--out", str(out), "--no-estimate", "--set", "data.seed=5"]) == 2
    assert "other" in capsys.readouterr().err
    draws = json.loads((out / "tiny" / "private" / "released_sizes.json").read_text())["draws"]
    assert len(draws) == 1 and "from" not in draws[0]              # the new data's own draw, none taken back


def test_a_study_stopped_before_any_run_finished_takes_back_the_count_its_study_yaml_shows(tiny_text, tmp_path,
                                                                                            monkeypatch, capsys):
    """study.yaml, shareable, shows the DP count before the first run trains: a study stopped then has released it.
    With the counts file deleted, a fresh draw would be a second release; the count is taken back from study.yaml.
    With private/ deleted as a whole, whether the runs and study.yaml counted these data cannot be told: refused."""
    import yaml

    from dpmed import released_size

    secure = _secure_dp_study(tmp_path, tiny_text)
    out = tmp_path / "out"
    assert main(["run", str(secure), "--out", str(out), "--no-progress"]) == 0
    shown = yaml.safe_load((out / "tiny" / "study.yaml").read_text())["dataset"]["released_sizes"]
    shutil.rmtree(out / "tiny" / "runs")                                     # as if stopped before any finished
    (out / "tiny" / "private" / "released_sizes.json").unlink()

    def no_draw(scale, source):
        raise AssertionError("a count was drawn again")
    monkeypatch.setattr(released_size, "discrete_laplace", no_draw)
    assert main(["plan", str(secure), "--out", str(out), "--no-estimate"]) == 0
    draws = json.loads((out / "tiny" / "private" / "released_sizes.json").read_text())["draws"]
    assert {d["key"]: d["count"] for d in draws} == shown and len(shown) == 1
    # a study.yaml this version cannot read as a whole (another version's) shows the count all the same: before, it
    # was passed over, a count drawn again and the file overwritten, two releases of which the cards named one
    written = out / "tiny" / "study.yaml"
    written.write_text(written.read_text() + "written_by: another version\n")
    (out / "tiny" / "private" / "released_sizes.json").unlink()
    assert main(["plan", str(secure), "--out", str(out), "--no-estimate"]) == 0
    draws = json.loads((out / "tiny" / "private" / "released_sizes.json").read_text())["draws"]
    assert {d["key"]: d["count"] for d in draws} == shown
    shutil.rmtree(out / "tiny" / "private")
    capsys.readouterr()
    assert main(["plan", str(secure), "--out", str(out), "--no-estimate"]) == 2
    line = _one_line_error(capsys.readouterr().err)
    assert "data_fingerprint is gone too" in line and f"count {shown['patients']}" in line and "--out" in line


@pytest.mark.parametrize("name, damage", [("data_fingerprint", lambda b: b"\xff" * 8 + b[8:]),
                                          ("attributes_fingerprint", lambda b: b[:20])])
def test_a_damaged_data_fingerprint_is_refused_naming_the_file(tiny_study, tiny_study_file, tmp_path, capsys, name,
                                                               damage):
    """Before: a byte that is not UTF-8 in a fingerprint ended `dpmed run` and `dpmed plan` in "internal error:
    UnicodeDecodeError", and one cut short was read as other data than the runs were trained on."""
    out = tmp_path / "out"
    shutil.copytree(tiny_study, out / "tiny")
    path = out / "tiny" / "private" / name
    path.write_bytes(damage(path.read_bytes()))
    assert main(["plan", str(tiny_study_file), "--out", str(out), "--no-estimate"]) == 2
    assert _one_line_error(capsys.readouterr().err) == (
        f"dpmed: error: {path} is damaged (it holds no fingerprint of the data), so dpmed cannot tell whether the "
        f"finished runs in {out / 'tiny'} were trained on the data this study now reads; restore it from a copy, or "
        f"use another output folder (--out) {RETRAIN_NOTE}")


def test_a_damaged_study_yaml_that_sends_the_user_to_another_folder_says_the_runs_there_are_new_releases(
        tiny_study, tiny_study_file, tmp_path, capsys):
    """The refusal advises running into another --out, which retrains every DP-SGD run of the same patients with
    fresh noise: like every such advice (`dpmed.folders.RETRAIN_NOTE`), it says their eps add up with the old ones'."""
    out = tmp_path / "out"
    shutil.copytree(tiny_study, out / "tiny")
    (out / "tiny" / "study.yaml").write_bytes(b"study: [unclosed\n")
    assert main(["run", str(tiny_study_file), "--out", str(out), "--no-progress"]) == 2
    line = _one_line_error(capsys.readouterr().err)
    assert "study.yaml cannot be read" in line and "--out" in line and line.endswith(RETRAIN_NOTE), line


def test_a_finished_run_s_files_keep_no_wall_time_while_the_next_run_trains(tiny_text, tmp_path, monkeypatch):
    """Times were set to the constant only when the command left the folder: a kill -9 while the second run trained
    left the first run's files with wall times that tell how long it trained. They are settled as each run ends."""
    import dpmed.executors
    from dpmed.folders import RELEASE_TIME

    execute, seen = dpmed.executors._execute, []

    def watched(task, context):
        for path in (tmp_path / "o" / "tiny" / "runs").glob("*/run.json"):     # the runs finished before this one
            seen.append((path.stat().st_mtime, path.parent.stat().st_mtime))
        return execute(task, context)

    monkeypatch.setattr(dpmed.executors, "_execute", watched)
    study = tmp_path / "s.yaml"
    study.write_text(tiny_text.replace("epochs: 3", "epochs: 1"))
    assert main(["run", str(study), "--out", str(tmp_path / "o"), "--no-progress"]) == 0
    assert seen == [(RELEASE_TIME, RELEASE_TIME)]
