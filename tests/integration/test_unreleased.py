"""A run's releasable files appear only with its run.json (`dpmed.folders.RunFolder.release`): the study's eps counts
finished runs, so a model left by a run that failed after training, beside no record, was a release no eps covered
(and once its arm left the study file, not even the count of runs named it). Before, model.pt was written into the
shareable folder as soon as training ended."""

from __future__ import annotations

import os
from datetime import datetime, timezone

import numpy as np
import pytest

import dpmed.run
from dpmed.cli import main
from dpmed.config import load_study
from dpmed.folders import read_arrays
from dpmed.study import load_study_data


def test_a_run_that_fails_after_training_leaves_no_model_where_files_are_shared(tmp_path, monkeypatch, capsys,
                                                                                 tiny_text):
    (tmp_path / "s.yaml").write_text(tiny_text)
    real = dpmed.run.assess

    def failing(model, dataset, inputs, config, **kwargs):
        if failing.calls == 0:                       # the first run to finish training
            failing.calls += 1
            raise RuntimeError("evaluation failed (simulated)")
        return real(model, dataset, inputs, config, **kwargs)
    failing.calls = 0
    monkeypatch.setattr(dpmed.run, "assess", failing)
    out = tmp_path / "out"
    assert main(["run", str(tmp_path / "s.yaml"), "--out", str(out), "--no-progress"]) == 1
    study = out / "tiny"
    failed = [p.name for p in (study / "private" / "runs").iterdir()
              if not (study / "runs" / p.name / "run.json").is_file()]
    assert len(failed) == 1, failed
    assert not (study / "runs" / failed[0]).exists()                              # nothing shareable of it
    assert (study / "private" / "runs" / failed[0] / "unreleased" / "model.pt").is_file()
    finished = [p for p in (study / "runs").iterdir() if (p / "run.json").is_file()]
    assert len(finished) == 1 and (finished[0] / "model.pt").is_file() and (finished[0] / "predictions.npz").is_file()
    assert not (study / "private" / "runs" / finished[0].name / "unreleased" / "model.pt").exists()

    # a model an older dpmed left beside no record, of a run the study no longer lists, is withdrawn
    stray = study / "runs" / "dropped_seed0"
    stray.mkdir()
    (stray / "model.pt").write_bytes(b"weights")
    killed = study / "runs" / finished[0].name / f".model.pt.{2 ** 22 + 12345}.tmp"   # its writer is gone
    killed.write_bytes(b"half a model")
    capsys.readouterr()
    assert main(["run", str(tmp_path / "s.yaml"), "--out", str(out), "--no-progress"]) == 0
    assert not (stray / "model.pt").exists() and not killed.exists()
    assert "dropped_seed0: unfinished; deleted its model.pt from the shareable folder" in capsys.readouterr().err
    assert all((p / "model.pt").is_file() for p in (study / "runs").iterdir() if (p / "run.json").is_file())


def _run_stopped_after_evaluation(study, out, monkeypatch) -> None:
    """Run ``study`` into ``out`` with each run stopped after its evaluation, as its wall time is measured."""
    def stopped(*args, **kwargs):
        raise RuntimeError("stopped after evaluation (simulated)")
    with monkeypatch.context() as patch:
        patch.setattr(dpmed.run, "Timing", stopped)
        assert main(["run", str(study), "--out", str(out), "--no-progress"]) == 1


def test_an_earlier_attempts_cams_are_not_released_beside_a_record_without_explanations(tmp_path, monkeypatch,
                                                                                       tiny_text):
    """The attempt's key does not depend on the evaluation settings, so a rerun with explanations off continues the
    same attempt: before, the CAM file its first try had written for release came out beside a run.json whose
    explanations are None."""
    study = tmp_path / "s.yaml"
    study.write_text(tiny_text.replace("  - {name: dp, mechanism: dp_sgd, target_epsilon: 8}\n", "")
                     .replace("evaluation: {bootstrap_resamples: 20}",
                              "evaluation: {bootstrap_resamples: 20, explanations: {n_images: 4}}"))
    out = tmp_path / "out"
    _run_stopped_after_evaluation(study, out, monkeypatch)
    private = out / "tiny" / "private" / "runs" / "base_seed0" / "unreleased"
    assert (private / "cams.npz").is_file()
    study.write_text(study.read_text().replace(", explanations: {n_images: 4}", ""))
    assert main(["run", str(study), "--out", str(out), "--no-progress"]) == 0
    run = out / "tiny" / "runs" / "base_seed0"
    assert (run / "run.json").is_file() and (run / "model.pt").is_file() and not (run / "cams.npz").exists()


@pytest.mark.skipif(os.name == "nt", reason="Windows keeps no Unix permissions")
def test_what_private_holds_is_its_owners_alone_file_by_file(tiny_study):
    """private/ is 0700, but its files and folders were made 0644 and 0755: a `chmod -R g+rX` of the results, common
    on shared servers, opened the log, the training statistics and the private report to the group until the next
    dpmed command narrowed private/ again."""
    private = tiny_study / "private"
    opened = [f"{path.relative_to(tiny_study)} {path.stat().st_mode & 0o777:o}" for path in private.rglob("*")
              if path.stat().st_mode & 0o077]
    assert opened == [], "\n".join(opened)


def test_a_run_stopped_after_evaluation_has_every_file_staged_and_its_examples_are_test_images(tmp_path, monkeypatch,
                                                                                             tiny_text):
    """Each releasable file (model, predictions, CAMs, the local-DP examples) waits in private/ until run.json is
    written: a run that stops after evaluation (here, as its wall time is measured) shares nothing. The examples the
    report shows are test images, never training ones: a training image shown beside its noised copy is a release of
    a patient whom only the noised copy's eps covers."""
    study = tmp_path / "s.yaml"
    study.write_text(tiny_text.replace("  - {name: dp, mechanism: dp_sgd, target_epsilon: 8}\n",
                                       "  - {name: ldp, mechanism: pixel_laplace, scale: 0.5}\n")
                     .replace("evaluation: {bootstrap_resamples: 20}",
                              "evaluation: {bootstrap_resamples: 20, explanations: {n_images: 4}}"))
    out = tmp_path / "out"
    _run_stopped_after_evaluation(study, out, monkeypatch)
    root = out / "tiny"
    assert [p for p in (root / "runs").rglob("*") if p.is_file()] == []
    staged: dict[str, set[str]] = {}
    for path in (root / "private" / "runs").glob("*/unreleased/*"):
        staged.setdefault(path.parent.parent.name, set()).add(path.name)
    assert staged == {"base_seed0": {"model.pt", "predictions.npz", "cams.npz"},
                      "ldp_b0.5_seed0": {"model.pt", "predictions.npz", "cams.npz", "ldp_examples.npz"}}

    assert main(["run", str(study), "--out", str(out), "--no-progress"]) == 0
    examples = read_arrays(root / "runs" / "ldp_b0.5_seed0" / "ldp_examples.npz")["original"]
    data = load_study_data(load_study(study))
    assert len(examples) > 0 and np.array_equal(examples, data.test.images[:len(examples)])
    training = {image.tobytes() for image in data.train.images}
    assert not any(image.tobytes() in training for image in examples)


def test_outside_private_a_study_holds_only_what_it_releases_each_stamped_1980(tiny_study):
    """Whatever lies outside private/ is shared with the folder: a file there that this list does not name (a
    statistic of training, a copy of the private report) would be a release no eps covers. Each file and folder
    there carries 1980-01-01 00:00 UTC, not the time it was written (`dpmed.folders.RELEASE_TIME`)."""
    study_files = {"study.yaml", "results.csv", "report.html", "comparisons.json"}
    run_files = {"run.json", "model.pt", "predictions.npz", "ldp_examples.npz", "cams.npz"}
    shared = [p for p in tiny_study.rglob("*") if p.relative_to(tiny_study).parts[0] != "private"]
    stray = []
    for path in shared:
        parts = path.relative_to(tiny_study).parts
        if path.is_dir():
            known = parts[0] == "runs" and len(parts) <= 2
        elif len(parts) == 1:
            known = path.name in study_files or path.suffix == ".png"
        else:
            known = parts[0] == "runs" and len(parts) == 3 and path.name in run_files
        if not known:
            stray.append("/".join(parts))
    assert stray == []
    assert {p.stat().st_mtime for p in [tiny_study, *shared]} == {datetime(1980, 1, 1, tzinfo=timezone.utc).timestamp()}


def test_a_run_whose_record_cannot_be_written_takes_its_model_back_from_the_shareable_folder(tmp_path, monkeypatch,
                                                                                            capsys, tiny_text):
    """run.json is written after the model and predictions are moved beside it; a disk that fills at that last write
    left them in the shareable folder, beside no record, when the command ended. They go back to private/ and the
    same command finishes the run from its checkpoint (no retraining: the same key, the last step reached)."""
    import errno

    import dpmed.records

    (tmp_path / "s.yaml").write_text(tiny_text)
    real = dpmed.records.write_text_atomic

    def full_at_run_json(path, text, **kwargs):
        if path.name == "run.json":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real(path, text, **kwargs)

    monkeypatch.setattr(dpmed.records, "write_text_atomic", full_at_run_json)
    out = tmp_path / "out"
    assert main(["run", str(tmp_path / "s.yaml"), "--out", str(out), "--no-progress"]) == 1
    assert "No space left on device" in capsys.readouterr().err
    study = out / "tiny"
    for run_id in ("base_seed0", "dp_eps8_C1_seed0"):
        assert not [p.name for p in (study / "runs" / run_id).glob("*")]          # nothing shareable of it
        assert (study / "private" / "runs" / run_id / "unreleased" / "model.pt").is_file()

    monkeypatch.setattr(dpmed.records, "write_text_atomic", real)      # space freed: the same command finishes
    assert main(["run", str(tmp_path / "s.yaml"), "--out", str(out), "--no-progress"]) == 0
    assert "continues from its checkpoint at step" in capsys.readouterr().err
    assert all((study / "runs" / r / "model.pt").is_file() for r in ("base_seed0", "dp_eps8_C1_seed0"))


def test_a_take_back_that_fails_too_leaves_the_record_s_own_error_to_be_told(tmp_path, monkeypatch, capsys,
                                                                             tiny_text):
    """Where moving the files back fails as well, its OSError hid the failed write of run.json (the cause the user
    must act on). The write's error is raised; the take-back's is a warning, and the next run withdraws the files."""
    import errno

    import dpmed.folders
    import dpmed.records

    (tmp_path / "s.yaml").write_text(tiny_text.replace("epochs: 3", "epochs: 1"))
    real = dpmed.records.write_text_atomic

    def full_at_run_json(path, text, **kwargs):
        if path.name == "run.json":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real(path, text, **kwargs)

    def stuck(self):
        raise OSError(errno.EACCES, os.strerror(errno.EACCES), str(self.private))

    monkeypatch.setattr(dpmed.records, "write_text_atomic", full_at_run_json)
    monkeypatch.setattr(dpmed.folders.RunFolder, "take_back", stuck)
    assert main(["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "out"), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "No space left on device" in err and "could not be moved back to its private folder" in err, err
