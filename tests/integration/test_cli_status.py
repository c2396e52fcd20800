"""`dpmed status` and the messages that advise retraining: what a user reads about runs the study file no longer
lists, damaged records, and what a retrained DP-SGD run means for an earlier one's eps."""

from __future__ import annotations

import json
import logging
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dpmed.cli import main
from dpmed.folders import RETRAIN_NOTE, StudyFolder
from dpmed.randomness import PrivacyRandomness


def test_status_lists_a_finished_run_the_study_file_no_longer_lists(tiny_study, tmp_path, capsys):
    """A run dropped from the study file is still in the folder: its model is released and the study's eps composes
    it, so status must show it, not count only the runs the file lists (before: "1 finished" of 2 in the folder)."""
    copy = tmp_path / "tiny"
    shutil.copytree(tiny_study, copy)
    resolved = yaml.safe_load((copy / "study.yaml").read_text())
    dropped = resolved["runs"].pop()["run_id"]
    (copy / "study.yaml").write_text(yaml.safe_dump(resolved, sort_keys=False))
    assert main(["status", str(copy)]) == 0
    out = capsys.readouterr().out
    assert re.search(rf"{re.escape(dropped)} +finished: not in the study file now, .*eps still counts it", out), out
    assert out.strip().splitlines()[-1] == "2 finished"


def test_status_says_which_finished_runs_the_next_run_evaluates_again(tiny_study, tmp_path, capsys):
    """A folder whose study.yaml a stopped rerun set to BCa holds runs of percentile intervals, and a run an older
    dpmed evaluated holds its methods' numbers: the report says so, and status listed them all as plain finished."""
    copy = tmp_path / "tiny"
    shutil.copytree(tiny_study, copy)
    assert main(["status", str(copy)]) == 0
    assert len(re.findall(r"(?m)^\S+_seed0 +finished$", capsys.readouterr().out)) == 2     # nothing differs
    study_yaml = copy / "study.yaml"
    study_yaml.write_text(study_yaml.read_text().replace("interval: percentile", "interval: bca"))
    record = copy / "runs" / "base_seed0" / "run.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), "evaluation_version": 1}))
    assert main(["status", str(copy)]) == 0
    out = capsys.readouterr().out
    setting = ("finished: evaluated otherwise than study.yaml says (evaluation.interval: percentile in the finished "
               "run, bca in study.yaml)")
    again = ": the same `dpmed run` evaluates it again from its model (no privacy spent)"
    assert f"dp_eps8_C1_seed0 {' ' * 20}{setting}{again}" in out, out
    assert f"{setting}; evaluated by an older dpmed (fairness intervals changed){again}" in out, out
    assert out.strip().splitlines()[-1] == "2 finished"


def test_status_of_finished_runs_imports_neither_torch_nor_scikit_learn(tiny_study):
    """`dpmed status` took 9 s, most of it importing torch and scikit-learn: a run record's results are typed in
    the evaluation package, which imported every one of its modules. Only an interrupted run's checkpoint needs
    torch (to say how far it got)."""
    code = ("import sys\nfrom dpmed.cli import main\n"
            f"code = main(['status', {str(tiny_study)!r}])\n"
            "print(code, 'torch' in sys.modules, 'sklearn' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.stdout.split()[-3:] == ["0", "False", "False"], (done.stdout, done.stderr)
    assert done.stdout.splitlines()[-2].strip() == "2 finished", done.stdout


def test_status_imports_neither_dp_accounting_nor_scipy_nor_pandas(tiny_study):
    """`dpmed status` took 2 s, over half of it importing dp_accounting and scipy: a run record holds a ledger,
    and importing the ledger imported every accountant. Listing runs computes no eps, and reads no data table
    (pandas: the study file's schema imports the dataset readers)."""
    heavy = {"dp_accounting", "scipy", "pandas", "torch"}
    code = ("import sys\nfrom dpmed.cli import main\n"
            f"code = main(['status', {str(tiny_study)!r}])\n"
            f"print(code, sorted({{m.split('.')[0] for m in sys.modules}} & {heavy!r}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.stdout.splitlines()[-1] == "0 []", (done.stdout, done.stderr)
    assert done.stdout.splitlines()[-2].strip() == "2 finished", done.stdout


def test_a_report_rebuilt_from_finished_runs_imports_no_torch(tiny_study, tmp_path):
    """`dpmed report` took 12-14 s on a two-run study, a third of it importing torch and the training stack: the
    report's writer shared a module with the study's progress line (which names the executors, hence every run's
    code), the comparisons read predictions from the module that computes them, and the report took two labels and
    one interval from modules that explain or attack a model. Reading records and predictions needs none of that."""
    copy = tmp_path / "tiny"
    shutil.copytree(tiny_study, copy)
    code = ("import sys\nfrom dpmed.cli import main\n"
            f"code = main(['report', {str(copy)!r}])\n"
            "print(code, 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.stdout.split()[-2:] == ["0", "False"], (done.stdout, done.stderr)
    assert "report:" in done.stdout and (copy / "report.html").stat().st_size > 0


def test_a_run_not_started_is_pending_and_one_that_failed_after_a_checkpoint_is_failed(tiny_study, tmp_path, capsys):
    """Every run the study lists is shown (one not started too: else a study would look complete), and a run that
    failed after saving a checkpoint shows its error, not "interrupted" (which invites a rerun and hides why)."""
    copy = tmp_path / "tiny"
    shutil.copytree(tiny_study, copy)
    pending, failed = sorted(p.parent.name for p in copy.glob("runs/*/run.json"))
    for run_id in (pending, failed):
        shutil.rmtree(copy / "runs" / run_id)
    files = StudyFolder(copy).run(failed)
    files.error.parent.mkdir(parents=True, exist_ok=True)
    files.error.write_text(json.dumps({"run_id": failed, "error": "ValueError: boom"}))
    files.checkpoint.write_bytes(b"not read")
    assert main(["status", str(copy)]) == 0
    out = capsys.readouterr().out
    assert re.search(rf"^{re.escape(pending)} +pending$", out, re.M), out
    assert re.search(rf"^{re.escape(failed)} +failed: ValueError: boom$", out, re.M), out
    assert out.strip().splitlines()[-1] == "1 failed, 1 pending"


@pytest.mark.parametrize("content", [b"", b"cut short by a full disk"])
def test_an_unreadable_checkpoint_is_not_shown_as_one_the_run_continues_from(tiny_study, tmp_path, capsys, content):
    """Status said "continues from its checkpoint" of a checkpoint that `dpmed run` then failed to read: it names the
    file and what to do instead."""
    copy = tmp_path / "tiny"
    shutil.copytree(tiny_study, copy)
    run_id = sorted(p.parent.name for p in copy.glob("runs/*/run.json"))[0]
    shutil.rmtree(copy / "runs" / run_id)
    files = StudyFolder(copy).run(run_id)
    files.checkpoint.parent.mkdir(parents=True, exist_ok=True)
    files.checkpoint.write_bytes(content)
    files.privacy_key.write_text(json.dumps({"root": PrivacyRandomness.secure().root_hex(), "attempt": "ab" * 32}))
    assert main(["status", str(copy)]) == 0
    out = capsys.readouterr().out
    assert re.search(rf"^{re.escape(run_id)} +interrupted: cannot continue: the checkpoint "
                     rf"{re.escape(str(files.checkpoint))} cannot be read \(.+\); delete it", out, re.M), out
    assert "continues from" not in out


@pytest.mark.parametrize("command", ["status", "report"])
def test_a_run_that_finishes_while_status_looks_at_it_is_shown_finished(tiny_study, tmp_path, capsys, monkeypatch,
                                                                       command):
    """Found with a `dpmed run` at work: its run finished (its checkpoint deleted) between the status's look at the
    checkpoint and its read, and `dpmed status` and `dpmed report` ended in an internal error (FileNotFoundError)."""
    from dpmed import states

    copy = tmp_path / "tiny"
    shutil.copytree(tiny_study, copy)
    run_ids = sorted(p.parent.name for p in copy.glob("runs/*/run.json"))
    files = [StudyFolder(copy).run(run_id) for run_id in run_ids]
    kept = {f.record: f.record.read_bytes() for f in files}
    for f in files:
        f.record.unlink()
        f.take_back()             # at work: its model and predictions are still private
        f.checkpoint.write_bytes(b"a run at work")
    looked = states._checkpoint_detail

    def finishing(path, *key):    # each run ends (its record written, its checkpoint deleted) as it is looked at
        run = next(f for f in files if f.checkpoint == path)
        run.release()
        run.record.write_bytes(kept[run.record])
        run.checkpoint.unlink()
        return looked(path, *key)

    monkeypatch.setattr(states, "_checkpoint_detail", finishing)
    assert main([command, str(copy)]) == (0 if command == "status" else 2)   # report found no record at its look
    captured = capsys.readouterr()
    assert "internal error" not in captured.err, captured.err
    if command == "status":
        assert captured.out.strip().splitlines()[-1] == "2 finished", captured.out


@pytest.mark.parametrize("content", [b"{cut short", b"[]", b'{"run_id": "x"}', b"\xff\xfe"],
                         ids=["not-json", "not-an-object", "no-error", "not-utf8"])
def test_status_shows_a_run_whose_error_json_is_unreadable_as_failed(tiny_study, tmp_path, capsys, content):
    """A bad run.json was shown as unreadable, but a bad error.json crashed `dpmed status` ("internal error:
    JSONDecodeError") and hid every other run's state."""
    copy = tmp_path / "tiny"
    shutil.copytree(tiny_study, copy)
    record = next(copy.glob("runs/*/run.json"))
    run_id = record.parent.name
    record.unlink()
    StudyFolder(copy).run(run_id).take_back()          # a failed run's model and predictions stay private
    error = StudyFolder(copy).run(run_id).error
    error.parent.mkdir(parents=True, exist_ok=True)
    error.write_bytes(content)
    assert main(["status", str(copy)]) == 0
    out = capsys.readouterr().out
    assert re.search(rf"^{re.escape(run_id)} +failed: \(error.json unreadable\)$", out, re.M), out
    assert out.strip().splitlines()[-1] == "1 finished, 1 failed"


def test_a_record_that_is_not_json_is_named_without_an_empty_field_and_with_the_retraining_note(tiny_study, tmp_path,
                                                                                              capsys):
    copy = tmp_path / "tiny"
    shutil.copytree(tiny_study, copy)
    record = next(copy.glob("runs/*/run.json"))
    record.write_text("{cut short")
    assert main(["report", str(copy)]) == 2
    err = capsys.readouterr().err
    assert f"{record} is not a run record this version of dpmed can read (Invalid JSON" in err, err
    assert "(:" not in err and RETRAIN_NOTE in err


def test_a_changed_setting_s_refusal_says_retraining_is_a_new_release(tiny_study, tiny_study_file, tmp_path, capsys):
    copy = tmp_path / "tiny"
    shutil.copytree(tiny_study, copy)
    assert main(["run", str(tiny_study_file), "--out", str(tmp_path), "--no-progress",
                 "--set", "training.epochs=4"]) == 2
    err = capsys.readouterr().err
    assert "to retrain them" in err and RETRAIN_NOTE in err, err
    assert json.loads(next(copy.glob("runs/*/run.json")).read_text())     # nothing finished was touched


def test_a_rerun_tells_the_runs_finished_earlier_in_the_study_s_order(tiny_text, tmp_path, caplog):
    """Before, they came in the folder's alphabetical order: [2/2] before [1/2]. One epoch: only the order is
    read."""
    path = tmp_path / "s.yaml"
    path.write_text(tiny_text.replace("epochs: 3", "epochs: 1")
                    .replace("{name: base, mechanism: none}", "{name: zeta, mechanism: none}")
                    .replace("{name: dp, mechanism: dp_sgd, target_epsilon: 8}", "{name: alpha, mechanism: none}"))
    for _ in range(2):
        caplog.clear()
        assert main(["run", str(path), "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    told = re.findall(r"\[(\d)/2\] (\S+): finished earlier, skipped", caplog.text)
    assert told == [("1", "zeta_seed0"), ("2", "alpha_seed0")], caplog.text


def test_plan_on_a_file_without_patient_ids_does_not_count_patients(tmp_path, capsys):
    """A MedMNIST file publishes no patient ids: plan counted its images as "training patients"."""
    import numpy as np

    rng = np.random.default_rng(0)
    arrays = {}
    for split, n in (("train", 40), ("val", 10), ("test", 10)):
        arrays[f"{split}_images"] = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        arrays[f"{split}_labels"] = (np.arange(n) % 2)[:, None].astype(np.uint8)
    np.savez(tmp_path / "m.npz", **arrays)
    study = tmp_path / "s.yaml"
    study.write_text(f"name: m\ndata: {{source: medmnist, path: {tmp_path / 'm.npz'}}}\n"
                     "training: {batch_size: 8}\narms: [{name: a, mechanism: none}]\n")
    assert main(["plan", str(study), "--out", str(tmp_path / "out"), "--no-estimate"]) == 0
    out = capsys.readouterr().out
    assert "no patient ids" in out and "training patients" not in out, out
    assert "a patient column (source: csv), DICOM's PatientID or Kermany's file names give them" in out   # how


def test_status_of_a_folder_shared_in_place_lists_its_runs_without_reading_private(tiny_study, tmp_path, capsys,
                                                                                   monkeypatch):
    """A study folder shared in place (`chmod -R g+rX`, private/ kept 0700 by dpmed): a colleague's `dpmed status`
    cannot look into private/ for an unfinished run's error or checkpoint. It said "internal error: PermissionError"
    and listed nothing; it lists every run, the unfinished one as unknown, saying why. (Simulated: the tests may run
    as root, whom no folder mode stops.)"""
    import pathlib

    copy = tmp_path / "tiny"
    shutil.copytree(tiny_study, copy)
    unfinished = sorted(StudyFolder(copy).finished_run_ids())[0]
    (StudyFolder(copy).run(unfinished).record).unlink()
    StudyFolder(copy).run(unfinished).take_back()      # an unfinished run's model and predictions are private
    private, stat = copy / "private", pathlib.Path.stat

    def denied(self, *args, **kwargs):
        if private in self.absolute().parents:
            raise PermissionError(13, "Permission denied", str(self))
        return stat(self, *args, **kwargs)
    monkeypatch.setattr(pathlib.Path, "stat", denied)
    assert main(["status", str(copy)]) == 0
    out = capsys.readouterr().out
    assert re.search(rf"{re.escape(unfinished)} +unknown: not finished; .*private folder cannot be read "
                     r"\(Permission denied: .*\).*as the user who ran the study", out), out
    assert out.strip().splitlines()[-1] == "1 finished, 1 unknown"


@pytest.mark.parametrize("command", ["status", "report"])
def test_a_folder_whose_study_yaml_is_a_study_file_is_told_as_such(tmp_path, capsys, command):
    """A user who keeps their study file as study.yaml and passes its folder to `dpmed status` or `dpmed report`
    was told the file "may have been written by another version of dpmed: read the folder with that version".
    `dpmed status` then listed it as an "unreadable" study.yaml and exited 0, as for a study folder, while report and
    every other folder that is not a study's exit 2: both refuse it now."""
    (tmp_path / "study.yaml").write_text("name: mine\narms: [{name: a, mechanism: none}]\n")
    assert main([command, str(tmp_path)]) == 2
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert f"{tmp_path / 'study.yaml'} is a study file (what `dpmed run` takes), not the record" in text, text
    assert "pass that folder, OUT/mine (by default results/mine)" in text and "another version" not in text, text
    assert "unreadable" not in text and captured.err.startswith("dpmed: error:") and "Traceback" not in text


@pytest.mark.parametrize("command", ["status", "report"])
def test_status_and_report_say_that_a_run_is_working_in_the_folder(tiny_study, tmp_path, capsys, command):
    """Readers take no lock, so what they show may be overtaken while a `dpmed run` works in the folder: each says
    so, naming that run; a lock left by a process that is gone says nothing."""
    from dataclasses import asdict, replace

    from dpmed.lock import Holder

    copy = tmp_path / "tiny"
    shutil.copytree(tiny_study, copy)
    holder = Holder.current()            # this very process: alive
    StudyFolder(copy).lock.write_text(json.dumps(asdict(holder)))
    assert main([command, str(copy)]) == 0
    said = capsys.readouterr()
    note = (f"a dpmed run ({holder.describe()}) is working in this folder now"
            + (": runs shown as interrupted or pending may be in progress" if command == "status" else
               ": this report covers the runs finished so far, and that run rewrites it when it ends"))
    assert note in (said.out if command == "status" else said.err)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    StudyFolder(copy).lock.write_text(json.dumps(asdict(replace(holder, pid=gone.pid))))    # its process is gone
    assert main([command, str(copy)]) == 0
    said = capsys.readouterr()
    assert "is working in this folder" not in said.out + said.err


def test_status_and_report_tell_a_run_whose_release_was_cut_short_and_leave_its_files(tiny_study, tmp_path, capsys):
    """A run killed between moving its model and predictions into runs/<id>/ and writing its run.json left them in
    the shareable folder with no record until the next `dpmed run`: status called it pending, and `dpmed report`
    said nothing of them to a user about to share runs/. Both tell it now, and delete nothing (read-only)."""
    copy = tmp_path / "tiny"
    shutil.copytree(tiny_study, copy)
    kept, cut = sorted(p.parent.name for p in copy.glob("runs/*/run.json"))
    (copy / "runs" / cut / "run.json").unlink()
    released = sorted(p.name for p in (copy / "runs" / cut).iterdir())
    assert released == ["model.pt", "predictions.npz"]
    assert main(["status", str(copy)]) == 0
    out = capsys.readouterr().out
    assert re.search(rf"^{re.escape(cut)} +interrupted release: model.pt, predictions.npz lie in runs/"
                     rf"{re.escape(cut)}/ without its run.json .*do not share them; the next `dpmed run` of this "
                     "study deletes them and runs it again", out, re.M), out
    assert out.strip().splitlines()[-1] == "1 finished, 1 interrupted release"
    assert main(["report", str(copy)]) == 0
    captured = capsys.readouterr()
    assert re.search(rf"^warning: {re.escape(cut)}: model.pt, predictions.npz lie in runs/{re.escape(cut)}/",
                     captured.err, re.M), captured.err
    assert "(1 of 2 runs finished)" in captured.out and cut not in captured.out.split("results:")[0]
    report = (copy / "report.html").read_text()
    assert f"The release of {cut} was cut short: model.pt, predictions.npz lie in runs/" in report
    assert cut not in (copy / "results.csv").read_text() and kept in (copy / "results.csv").read_text()
    assert sorted(p.name for p in (copy / "runs" / cut).iterdir()) == released


# Edits of the tiny study file (one DP-SGD arm, and public pretraining where the edit is of its section) after a run of
# it stopped: (what is replaced, by what), and whether the next `dpmed run` trains the stopped run afresh for it
_EDITS = {
    None: (("", ""), False),
    "training": (("batch_size: 16,", "batch_size: 16, learning_rate: 0.05,"), True),
    "normalize": (("image_size: 16}", "image_size: 16, preprocessing: {normalize: {mean: [0.5], std: [0.25]}}}"),
                  True),
    # what no run computes from (threads), and other runs (a seed, an arm): the run continues
    "execution and other runs": (("threads: 2}", "threads: 1}\nseeds: [0, 1]"), False),
    "pretraining's statement": (("synthetic, of no person", "synthetic, of nobody"), True),
}
PRETRAIN = """
pretrain:
  public: "a second phantom (seed 1): synthetic, of no person"
  data: {source: phantom, n_images: 160, seed: 1}
  training: {steps: 4, batch_size: 16}
"""


def _stop_after_the_first_checkpoint(path, out, monkeypatch) -> None:
    """`dpmed run` of the study file ``path`` into ``out``, stopped by a Ctrl-C just after its first checkpoint."""
    from dpmed.training import loop

    save = loop._save_checkpoint

    def stopped(*args, **kwargs):
        save(*args, **kwargs)
        raise KeyboardInterrupt
    with monkeypatch.context() as patched:
        patched.setattr(loop, "_save_checkpoint", stopped)
        assert main(["run", str(path), "--out", str(out), "--no-progress"]) == 130


@pytest.mark.parametrize("changed", list(_EDITS))
def test_status_says_a_run_whose_settings_changed_trains_afresh_as_dpmed_run_then_does(tiny_text, tmp_path, capsys,
                                                                                       caplog, monkeypatch, changed):
    """A run stopped after its first checkpoint, its study file then edited (another learning rate) and run again
    but stopped before that run trained: study.yaml plans the new settings, and status still said "continues from
    its checkpoint at step 4 of 12", where `dpmed run` deleted it and trained from step 0. So it did, "if its training
    data and starting weights are unchanged", where the edit set data.preprocessing.normalize or pretrain.public: the
    images and weights were unchanged, and the run trained afresh all the same. Unchanged, or changed in what the run
    does not compute from, the run continues from the step status tells."""
    import dpmed.executors

    path, out = tmp_path / "s.yaml", tmp_path / "out"
    path.write_text(tiny_text.replace("  - {name: base, mechanism: none}\n", "")
                    + (PRETRAIN if changed == "pretraining's statement" else ""))
    _stop_after_the_first_checkpoint(path, out, monkeypatch)
    edit, afresh = _EDITS[changed]
    text = path.read_text()
    path.write_text(text.replace(*edit))
    assert (path.read_text() != text) == (changed is not None)

    def never(*args, **kwargs):         # Ctrl-C after study.yaml is written, before the run starts
        raise KeyboardInterrupt
    with monkeypatch.context() as patched:
        patched.setattr(dpmed.executors, "run_one", never)
        assert main(["run", str(path), "--out", str(out), "--no-progress"]) == 130
    capsys.readouterr()
    assert main(["status", str(out / "tiny")]) == 0
    [line] = [line for line in capsys.readouterr().out.splitlines() if "interrupted:" in line]
    _run_as_told(line, path, out, caplog, afresh, against="study.yaml's now")


@pytest.mark.parametrize("changed", [None, "training", "execution and other runs"])
def test_plan_says_what_the_next_run_does_with_an_interrupted_run_s_checkpoint(tiny_text, tmp_path, capsys, caplog,
                                                                               monkeypatch, changed):
    """`dpmed plan` of a study file edited after a run of it was stopped said nothing of the run's checkpoint: the
    user previewing the edit was not told that running it deletes the run's progress, nor, unedited, that the run
    continues. It now says either, as status would against the study file, and `dpmed run` then does so. Its time
    was estimated for all 12 steps, also where the run continues from step 4: now for the steps left there (the
    probe's rate fixed at 1 s a step)."""
    import dpmed.study
    from dpmed.timing import Rates, StepKind

    path, out = tmp_path / "s.yaml", tmp_path / "out"
    path.write_text(tiny_text.replace("  - {name: base, mechanism: none}\n", ""))
    _stop_after_the_first_checkpoint(path, out, monkeypatch)
    edit, afresh = _EDITS[changed]
    path.write_text(path.read_text().replace(*edit))
    capsys.readouterr()
    second = Rates(per_step={StepKind(True, 1, 1, "dpmed", 1, "cpu"): 1.0}, evaluation=0.0)
    with monkeypatch.context() as patched:
        patched.setattr(dpmed.study, "probe_rates", lambda *args, **kwargs: second)
        assert main(["plan", str(path), "--out", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    [line] = [line for line in printed if "interrupted:" in line]
    [row] = [row for row in printed if row.startswith("dp_eps8_C1_seed0 ")]
    [total] = [total for total in printed if total.startswith("estimated time:")]
    left = 12 if afresh else 12 - int(re.search(r"at step (\d+) of 12", line)[1])
    assert row.endswith(f"0:{left:02d}" + ("" if afresh else f" from step {12 - left}")), row
    others = sum(bool(re.match(r"dp_eps8_C1_seed\d +dp_sgd ", row)) for row in printed) - 1   # 12 steps each
    assert f"then 0:{left + 12 * others:02d} for the {others + 1} run" in total, total
    _run_as_told(line, path, out, caplog, afresh, against="the study file's")


def test_plan_and_run_hash_model_weights_once_and_see_a_file_changed_between_commands(tiny_text, tmp_path, capsys,
                                                                                       monkeypatch):
    """`dpmed plan` hashed the model.weights file twice (to refuse finished runs started from other contents, and
    for its checkpoints' lines), `dpmed run` twice before its runs (each run checks it once more as it loads it): a
    second full read, 0.14 s per 100 MB. Passed down within a command, the hash is taken once; a file changed
    between two commands is still seen, and a checkpoint told against the hash passed down."""
    import torch

    import dpmed.folders
    from dpmed.models import build_model

    weights = tmp_path / "w.pt"
    torch.save(build_model("small_cnn", in_channels=1, num_outputs=2, image_size=16, seed=1).state_dict(), weights)
    path, out = tmp_path / "s.yaml", tmp_path / "out"
    path.write_text(tiny_text.replace("  - {name: base, mechanism: none}\n", "")
                    + f"model: {{name: small_cnn, weights: {weights}, weights_source: a test}}\n")
    _stop_after_the_first_checkpoint(path, out, monkeypatch)
    reads, read_bytes = [], Path.read_bytes

    def counted(file, *args, **kwargs):
        reads.extend([file] if file == weights else [])
        return open(file, *args, **kwargs)

    def counted_bytes(file):
        reads.extend([file] if file == weights else [])
        return read_bytes(file)
    monkeypatch.setattr(dpmed.folders, "open", counted, raising=False)     # file_sha256's reads
    monkeypatch.setattr(Path, "read_bytes", counted_bytes)      # a run's, hashed and loaded (run.start_model)
    capsys.readouterr()
    assert main(["plan", str(path), "--out", str(out), "--no-estimate"]) == 0
    [line] = [line for line in capsys.readouterr().out.splitlines() if "interrupted:" in line]
    assert len(reads) == 1 and "if its training data are unchanged" in line, (reads, line)
    torch.save(build_model("small_cnn", in_channels=1, num_outputs=2, image_size=16, seed=2).state_dict(), weights)
    assert main(["plan", str(path), "--out", str(out), "--no-estimate"]) == 0
    [line] = [line for line in capsys.readouterr().out.splitlines() if "interrupted:" in line]
    assert f"cannot continue: started from other contents of model.weights ({weights})" in line, line
    reads.clear()
    assert main(["run", str(path), "--out", str(out), "--no-progress"]) == 0
    assert len(reads) == 2, reads      # once for the study, once as its one run hashes and loads the weights


@pytest.mark.parametrize("data_changed", [False, True])
def test_run_s_time_left_counts_a_continued_run_s_steps_after_its_checkpoint(tiny_text, tmp_path, caplog,
                                                                              monkeypatch, data_changed):
    """`dpmed run`'s progress line after a run estimated a run still to come that continues from its checkpoint for
    all its 12 steps, where `dpmed plan` counted the steps after the checkpoint only. Its DP-SGD run stopped after
    its first checkpoint and its plain run added before it, the line after the plain run now counts the steps the
    checkpoint leaves (the rate fixed at 1 s a step, no evaluation). A checkpoint of an attempt on other training data
    (its key file's attempt fingerprint another, its settings' the same: what status and plan cannot tell) trains
    all its 12 steps, and is counted so."""
    from dpmed.folders import StudyFolder
    from dpmed.timing import Rates, StepKind

    path, out = tmp_path / "s.yaml", tmp_path / "out"
    path.write_text(tiny_text.replace("  - {name: base, mechanism: none}\n", ""))
    _stop_after_the_first_checkpoint(path, out, monkeypatch)
    if data_changed:
        key = StudyFolder(out / "tiny").run("dp_eps8_C1_seed0").privacy_key
        saved = json.loads(key.read_text())
        key.write_text(json.dumps({**saved, "attempt": f"{saved['attempt'].partition(':')[0]}:{'ab' * 32}"}))
    path.write_text(tiny_text)
    fixed = Rates(per_step={StepKind(True, 1, 1, "dpmed", 1, "cpu"): 1.0}, evaluation=0.0)
    monkeypatch.setattr(Rates, "from_runs", classmethod(lambda cls, *args, **kwargs: fixed))
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="dpmed"):
        assert main(["run", str(path), "--out", str(out), "--no-progress"]) == 0
    [line] = [m for m in caplog.messages if m.startswith("study: 1 of 2 runs done")]
    if data_changed:
        assert "dp_eps8_C1_seed0: its checkpoint cannot continue (made with other settings or data)" in caplog.text
        assert line.endswith("about 0:12 left"), line
        return
    [(done, of)] = re.findall(r"dp_eps8_C1_seed0: .*continues from its checkpoint at step (\d+) of (\d+)",
                              caplog.text)
    assert 0 < int(done) < int(of) == 12 and line.endswith(f"about 0:{12 - int(done):02d} left"), (done, line)


def test_plan_estimates_an_audited_run_without_dp_sgd_for_the_steps_it_trains(tiny_text, tmp_path, capsys,
                                                                               monkeypatch):
    """An audited run without DP-SGD trains on what its secret canary draws leave (about m of the training patients
    held out, about m / 2 canaries back in): the plan's T said "about" that many steps, but its time was estimated
    for the whole training set's steps, and a continued run's for those less the step its checkpoint reached,
    where the checkpoint counts the run's own (on a 421-image phantom with 200 canaries, 1023 steps were estimated
    for the 703 left of 760). Now the expected steps before it starts, and the checkpoint's after (the probe's rate
    fixed at 1 s a step)."""
    import dpmed.study
    from dpmed.timing import Rates, StepKind

    path, out = tmp_path / "s.yaml", tmp_path / "out"
    path.write_text(tiny_text.replace("  - {name: dp, mechanism: dp_sgd, target_epsilon: 8}\n", "").replace(
        "{name: base, mechanism: none}", "{name: base, mechanism: none, audit: {canaries: 40}}"))
    second = Rates(per_step={StepKind(False, 1, 1, None, 1, "cpu"): 1.0}, evaluation=0.0)
    monkeypatch.setattr(dpmed.study, "probe_rates", lambda *args, **kwargs: second)

    def planned() -> tuple[str, list[str], int]:
        assert main(["plan", str(path), "--out", str(out)]) == 0
        printed = capsys.readouterr().out.splitlines()
        [row] = [row for row in printed if row.startswith("base_seed0 ")]
        [n_train] = [int(m[1]) for line in printed if (m := re.match(r"data: phantom, (\d+)/", line))]
        return row, [line for line in printed if "interrupted:" in line], n_train

    row, _, n_train = planned()
    expected = int(re.search(r" about (\d+) ", row)[1])
    assert row.endswith(f" 0:{expected:02d}") and expected < 3 * -(-n_train // 16), row   # 3 epochs of batches of 16
    _stop_after_the_first_checkpoint(path, out, monkeypatch)
    capsys.readouterr()
    row, [line], _ = planned()
    done, of = map(int, re.search(r"at step (\d+) of (\d+)", line).groups())
    assert of != 3 * -(-n_train // 16) and row.endswith(f" 0:{of - done:02d} from step {done}"), (row, line)


def _run_as_told(line: str, path, out, caplog, afresh: bool, *, against: str) -> None:
    """Run the study again and check it does what ``line`` (status's or plan's line of the interrupted run, judged
    ``against`` study.yaml or the study file given) told: train afresh from step 1, or continue from the step told."""
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="dpmed"):
        assert main(["run", str(path), "--out", str(out), "--no-progress"]) == 0
    resumed = re.findall(r"continues from its checkpoint (at step \d+ of \d+)", caplog.text)
    if afresh:
        assert line.endswith(f"interrupted: cannot continue: made with other settings than {against}; the next "
                             "`dpmed run` deletes the checkpoint and trains this run afresh"), line
        assert resumed == [] and "trains afresh" in caplog.text and "step 1 of 12" in caplog.text, caplog.text
    else:
        # the study names no weights file and trains no public model: its settings tell the start
        told = re.search(r"interrupted: continues from its checkpoint (at step \d+ of \d+) \(saved .*\) if its "
                         r"training data are unchanged$", line)
        assert told and resumed == [told[1]] and "afresh" not in caplog.text, (line, caplog.text)


def test_a_run_with_public_pretraining_continues_after_its_study_folder_moved_as_status_says(tiny_text, tmp_path,
                                                                                             capsys, caplog,
                                                                                             monkeypatch):
    """A study folder keeps its public pretraining's weights inside it, so where they lie changes with the folder:
    moved (or resumed under another spelling of --out), its interrupted run was told by status to continue, and
    `dpmed run` deleted the checkpoint and trained afresh, its start differing only in that path."""

    path, out, moved = tmp_path / "s.yaml", tmp_path / "out", tmp_path / "moved"
    path.write_text(tiny_text.replace("  - {name: base, mechanism: none}\n", "") + PRETRAIN)
    _stop_after_the_first_checkpoint(path, out, monkeypatch)
    out.rename(moved)
    capsys.readouterr()
    assert main(["status", str(moved / "tiny")]) == 0
    [line] = [line for line in capsys.readouterr().out.splitlines() if "interrupted:" in line]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="dpmed"):
        assert main(["run", str(path), "--out", str(moved), "--no-progress"]) == 0
    told = re.search(r"interrupted: continues from its checkpoint (at step \d+ of \d+)", line)
    resumed = re.findall(r"continues from its checkpoint (at step \d+ of \d+)", caplog.text)
    assert told and resumed == [told[1]] and "afresh" not in caplog.text, (line, caplog.text)
