"""End to end through `main(argv)`: the quickstart at a tiny size, resume, and bad input that loses nothing."""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from dpmed.cli import main
from dpmed.errors import ConfigError
from dpmed.folders import RELEASE_TIME, StudyFolder
from dpmed.records import read_record, read_timing
from dpmed.states import read_resolved

TINY = ["--no-progress", "--set", "data.n_images=240", "--set", "data.image_size=32", "--set", "training.epochs=1",
        "--set", "evaluation.bootstrap_resamples=100"]


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("out")
    assert main(["run", "--out", str(out), *TINY]) == 0
    return out / "quickstart"


def test_quickstart_writes_every_output(quickstart, capsys):
    frame = pd.read_csv(quickstart / "results.csv")
    assert sorted(frame["mechanism"]) == ["dp_sgd", "dp_sgd", "none", "pixel_laplace"]
    for col in ("test_auroc", "test_auroc_low", "test_auroc_high", "epsilon", "delta", "accountant",
                "neighbour_relation", "privacy_statement"):
        assert col in frame.columns
    assert (frame["test_auroc_low"] <= frame["test_auroc"]).all()
    assert (frame["test_auroc"] <= frame["test_auroc_high"]).all()
    for run_id in frame["run_id"]:
        assert (quickstart / "runs" / run_id / "run.json").is_file()
        assert (quickstart / "runs" / run_id / "predictions.npz").is_file()
    report = (quickstart / "report.html").read_text()
    for section in ('id="summary"', 'id="utility"', 'id="privacy"', 'id="risk"', 'id="ldp-examples"',
                    'id="provenance"', "data:image/png;base64,", "phantom", "git_commit", "Wall time per run"):
        assert section in report, section
    assert (quickstart / "ldp_examples.png").is_file() and (quickstart / "auroc_vs_epsilon.png").is_file()
    # the phantom names each image's patient (some have two images): the test bootstrap redraws patients
    assert set(frame["bootstrap_unit"]) == {"patient"} and (frame["n_test_patients"] < frame["n_test"]).all()
    assert "redraws of the test patients (each drawn patient with all of their images)" in report


def test_privacy_cards_are_honest(quickstart):
    records = {p.parent.name: read_record(p) for p in (quickstart / "runs").glob("*/run.json")}
    resolved = yaml.safe_load((quickstart / "study.yaml").read_text())
    dataset = resolved["dataset"]
    assert dataset["n_train"] is None and dataset["n_train_patients"] is None   # the exact size is private
    batch = resolved["study"]["training"]["batch_size"]
    n_patients = max(dataset["released_sizes"]["patients"], batch)   # the DP count, at least the expected batch
    for run_id, r in records.items():
        card = r.privacy
        if r.mechanism == "dp_sgd":
            assert card.epsilon <= card.target_epsilon              # calibration never overshoots
            assert card.epsilon > 0.9 * card.target_epsilon         # ... and is not wildly loose
            assert card.size_epsilon == dataset["size_epsilon"] == 0.02
            assert card.unit == "patient" and card.n_units == n_patients
            assert card.delta == pytest.approx(min(1e-5, 1 / (10 * n_patients)))
            assert card.sampling == "poisson" and card.accountant == "pld"
            for word in ("delta", "PLD", "add or remove one training patient"):
                assert word in card.statement
            plan = next(s for s in resolved["runs"] if s["run_id"] == run_id)
            assert plan["privacy"]["noise_multiplier"] == card.noise_multiplier > 0
        elif r.mechanism == "pixel_laplace":
            assert card.dimension_d == 32 * 32 and card.unit == "image" and "clear" in card.labels
            assert card.epsilon_image == pytest.approx(32 * 32 / 0.5)
            assert card.epsilon_pixel == pytest.approx(2.0)
        else:
            assert card.is_dp is False and card.epsilon is None


def test_rerun_skips_finished_runs_and_retrains_only_missing_ones(quickstart, capsys):
    out = str(quickstart.parent)
    stamps = {p: (p.stat().st_ino, p.read_bytes()) for p in quickstart.glob("runs/*/run.json")}
    assert main(["run", "--out", out, *TINY]) == 0
    assert "4 finished earlier" in capsys.readouterr().out
    assert stamps == {p: (p.stat().st_ino, p.read_bytes()) for p in quickstart.glob("runs/*/run.json")}
    victim = quickstart / "runs" / "non-private_seed0" / "run.json"
    victim.unlink()
    assert main(["run", "--out", out, *TINY]) == 0
    assert "3 finished earlier" in capsys.readouterr().out
    assert victim.is_file()


def test_changed_settings_refuse_to_mix_with_finished_runs(quickstart, capsys):
    before = sorted(quickstart.glob("runs/*/run.json"))
    assert main(["run", "--out", str(quickstart.parent), *TINY, "--set", "training.learning_rate=0.01"]) == 2
    err = capsys.readouterr().err
    assert "other settings" in err and "--out" in err
    assert before == sorted(quickstart.glob("runs/*/run.json"))


@pytest.mark.parametrize(("change", "named"), [
    ("model.name=flat_cnn", "model: small_cnn in the finished run, flat_cnn now"),
    ("data.n_images=280", "dataset.n_val: "),
    ("data.image_size=28", "dataset.image_shape: [1, 32, 32] in the finished runs, [1, 28, 28] now"),
    ("privacy_randomness=reproducible", "privacy_randomness: secure in the finished run, reproducible now"),
    ("data.preprocessing.minmax=true", "the images, labels or patient ids differ"),   # same sizes, other pixels
    ("data.preprocessing.normalize={mean: [0.5], std: [0.25]}", "the images' normalisation differ"),
])
def test_another_model_or_other_data_refuse_to_mix_with_finished_runs(quickstart, capsys, change, named):
    """Finished runs are reused only for the same model, data and privacy randomness: before, a study whose model or
    image size changed reported the old runs beside the new ones as one study, and a study switched from
    reproducible to secure randomness called the reused runs DP. (Runs evaluated otherwise are evaluated again:
    tests/integration/test_resume_evaluation.py.)"""
    before = {p: (p.stat().st_ino, p.read_bytes()) for p in quickstart.glob("runs/*/run.json")}
    assert main(["run", "--out", str(quickstart.parent), *TINY, "--set", change]) == 2
    err = capsys.readouterr().err
    assert named in err and "--out" in err and "Traceback" not in err, err
    assert before == {p: (p.stat().st_ino, p.read_bytes()) for p in quickstart.glob("runs/*/run.json")}


@pytest.mark.parametrize("name", ["data_fingerprint", "attributes_fingerprint"])
def test_the_data_fingerprints_are_private(quickstart, name):
    """Functions of the training images, and of every split's sex, age and masks: a shareable file holding either
    would be outside every eps."""
    fingerprint = (quickstart / "private" / name).read_text()
    assert re.fullmatch(r"[0-9a-f]{64}", fingerprint)
    assert os.name == "nt" or (quickstart / "private" / name).stat().st_mode & 0o777 == 0o600
    public = [p for p in quickstart.rglob("*") if p.is_file() and "private" not in p.relative_to(quickstart).parts]
    assert public and not [p for p in public if fingerprint.encode() in p.read_bytes()]


def test_a_dp_sgd_runs_wall_time_is_kept_in_the_private_folder(quickstart):
    """It grows with the patients Poisson sampling drew and with their images, statistics of the training set that
    no eps covers: before, run.json, results.csv and the report gave it to the second. Runs without DP-SGD keep it."""
    folder = StudyFolder(quickstart)
    assert folder.private.stat().st_mode & 0o777 == 0o700          # other users of the machine cannot list it
    frame = pd.read_csv(folder.results).set_index("run_id")
    public_report, private_report = folder.report.read_text(), folder.private_report.read_text()
    kinds = set()
    for path in folder.runs.glob("*/run.json"):
        record = read_record(path)
        private = read_timing(folder.run(record.run_id).timing)
        assert private.total_seconds >= private.train_seconds > 0
        provenance = re.search(rf'<td data-label="run">{re.escape(record.run_id)}</td><td data-label="training" '
                               r"class=num>(.*?)</td>", public_report)
        if record.mechanism == "dp_sgd":
            assert record.timing == private.model_copy(update={"train_seconds": None, "total_seconds": None,
                                                                "resumed_from": None})
            assert pd.isna(frame.loc[record.run_id, "train_seconds"])
            assert "private" in provenance.group(1) and f"{private.train_seconds:.1f}" not in provenance.group(1)
            assert f"Wall time: training {private.train_seconds:.1f} s" in private_report
        else:
            assert record.timing == private
            assert frame.loc[record.run_id, "train_seconds"] == pytest.approx(private.train_seconds)
            assert provenance.group(1) == f"{private.train_seconds:.1f}"
        kinds.add(record.mechanism == "dp_sgd")
    assert kinds == {True, False}
    # nor do the files' times (tar and zip keep them), nor a date in the report
    released = [quickstart, *(p for p in quickstart.rglob("*") if "private" not in p.relative_to(quickstart).parts)]
    assert len(released) > 10 and {p.stat().st_mtime for p in released} == {RELEASE_TIME}
    assert not re.search(r"20\d\d-\d\d-\d\d", public_report)


def test_a_report_rebuilt_for_an_older_dp_sgd_record_keeps_its_wall_time_private(quickstart, tmp_path, capsys):
    """An older dpmed wrote a DP-SGD run's seconds into run.json. Before, `dpmed report` copied them into results.csv
    and the public report (under a note saying they were private); now they go to the private report only."""
    copy = tmp_path / "quickstart"
    shutil.copytree(quickstart, copy)
    folder = StudyFolder(copy)
    path = next(p for p in folder.runs.glob("*/run.json") if read_record(p).mechanism == "dp_sgd")
    record = read_record(path)
    shutil.rmtree(folder.run(record.run_id).private)   # an older dpmed kept no private copy
    folder.private.chmod(0o755)                        # nor did it make private/ owner-only
    older = record.timing.model_copy(update={"train_seconds": 1234.5678, "total_seconds": 2345.6789})
    path.write_text(record.model_copy(update={"timing": older}).model_dump_json(indent=2))
    assert main(["report", str(copy)]) == 0
    assert "1 DP-SGD run.json file(s) written by an older dpmed held the run's wall time" in capsys.readouterr().err
    assert pd.isna(pd.read_csv(folder.results).set_index("run_id").loc[record.run_id, "train_seconds"])
    public = [p for p in copy.rglob("*") if p.is_file() and "private" not in p.relative_to(copy).parts]
    assert not [p for p in public if b"1234.5" in p.read_bytes() or b"2345.6" in p.read_bytes()]   # run.json too
    assert read_timing(folder.run(record.run_id).timing).train_seconds == 1234.5678     # kept, privately
    assert "Wall time: training 1234.6 s" in folder.private_report.read_text()
    assert read_record(path).timing == older.shareable(record.plan)
    assert folder.private.stat().st_mode & 0o777 == 0o700       # where it went, other users of the machine cannot
    run = folder.run(record.run_id)                              # read it, even after a chmod -R g+rX of the results
    assert [p.stat().st_mode & 0o777 for p in (run.private, run.timing)] == [0o700, 0o600]


def test_a_report_rebuilt_withdraws_the_wall_time_of_a_run_the_study_no_longer_lists(tiny_study, tiny_study_file,
                                                                                       tmp_path, capsys):
    """A finished DP-SGD run the study file no longer lists is still in the folder, released (its run.json is
    shared with the rest). Before, `dpmed report` moved an older dpmed's seconds out of the listed runs' run.json
    only, and left this one's in the shareable folder (`dpmed run` moved them for every run it holds)."""
    out = tmp_path / "out"
    shutil.copytree(tiny_study, out / tiny_study.name)
    folder = StudyFolder(out / tiny_study.name)
    fewer = tmp_path / "fewer.yaml"
    fewer.write_text(tiny_study_file.read_text().replace("  - {name: dp, mechanism: dp_sgd, target_epsilon: 8}\n", ""))
    assert main(["run", str(fewer), "--out", str(out), "--no-progress"]) == 0
    path = next(p for p in folder.runs.glob("*/run.json") if read_record(p).mechanism == "dp_sgd")
    record = read_record(path)
    assert record.run_id not in {p.run_id for p in read_resolved(folder.root).runs}      # unlisted now
    folder.run(record.run_id).timing.unlink()           # an older dpmed kept no private copy
    older = record.timing.model_copy(update={"train_seconds": 1234.5678, "total_seconds": 2345.6789})
    path.write_text(record.model_copy(update={"timing": older}).model_dump_json(indent=2))
    capsys.readouterr()
    assert main(["report", str(folder.root)]) == 0
    public = [p for p in folder.root.rglob("*") if p.is_file() and "private" not in p.relative_to(folder.root).parts]
    assert not [p for p in public if b"1234.5" in p.read_bytes() or b"2345.6" in p.read_bytes()]
    assert read_timing(folder.run(record.run_id).timing).train_seconds == 1234.5678      # kept, privately


def test_dpmed_run_over_an_older_folder_withdraws_its_dp_sgd_timing_and_keeps_the_private_copy(
        tiny_study, tiny_study_file, tmp_path, capsys):
    """The `dpmed run` path (the report path is the test above). An older run.json with the seconds and no private
    copy: they move to private/. One with only the step it resumed from beside a full private timing.json: the step
    leaves run.json and the private seconds are not overwritten by the record's empty ones."""
    out = tmp_path / "out"
    shutil.copytree(tiny_study, out / tiny_study.name)
    folder = StudyFolder(out / tiny_study.name)
    dp = [p for p in sorted(folder.runs.glob("*/run.json")) if read_record(p).mechanism == "dp_sgd"]
    seconds_only = step_only = read_record(dp[0])         # the tiny study's one DP-SGD run, in both cases
    folder.run(seconds_only.run_id).timing.unlink()
    older = seconds_only.timing.model_copy(update={"train_seconds": 1234.5678, "total_seconds": 2345.6789})
    dp[0].write_text(seconds_only.model_copy(update={"timing": older}).model_dump_json(indent=2))
    assert main(["run", str(tiny_study_file), "--out", str(out), "--no-progress"]) == 0
    assert "1 DP-SGD run.json file(s) written by an older dpmed held the run's wall time" in capsys.readouterr().err
    public = [p for p in folder.root.rglob("*") if p.is_file() and "private" not in p.relative_to(folder.root).parts]
    assert not [p for p in public if b"1234.5" in p.read_bytes() or b"2345.6" in p.read_bytes()]
    assert read_timing(folder.run(seconds_only.run_id).timing).train_seconds == 1234.5678

    kept = read_timing(folder.run(step_only.run_id).timing)
    resumed = step_only.timing.model_copy(update={"train_seconds": None, "total_seconds": None, "resumed_from": 3})
    dp[0].write_text(step_only.model_copy(update={"timing": resumed}).model_dump_json(indent=2))
    assert main(["run", str(tiny_study_file), "--out", str(out), "--no-progress"]) == 0
    assert "said whether the run resumed" in capsys.readouterr().err
    assert read_record(dp[0]).timing.resumed_from is None
    assert read_timing(folder.run(step_only.run_id).timing) == kept and kept.train_seconds == 1234.5678


def test_a_damaged_predictions_file_leaves_its_comparisons_out_and_says_so(quickstart, tmp_path, capsys):
    """Before: `dpmed report` (and `dpmed run` after skipping the finished runs) ended in a traceback."""
    copy = tmp_path / "quickstart"
    shutil.copytree(quickstart, copy)
    (copy / "runs" / "dp-sgd_eps1_C1_seed0" / "predictions.npz").write_text("x")
    assert main(["report", str(copy)]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    report = (copy / "report.html").read_text()
    assert "predictions.npz cannot be read" in report and "paired comparisons are left out" in report
    pairs = yaml.safe_load((copy / "comparisons.json").read_text())["auroc_differences"]
    assert "dp-sgd_eps1_C1_seed0" not in {row["run_id"] for row in pairs} and pairs


def test_a_damaged_private_statistics_file_is_named_in_the_private_report_and_the_rest_is_written(
        quickstart, tmp_path, capsys):
    """Before: a truncated training_statistics.json ended `dpmed report` in "internal error: JSONDecodeError", a
    garbled one in UnicodeDecodeError, one of another shape in AttributeError or KeyError."""
    copy = tmp_path / "quickstart"
    shutil.copytree(quickstart, copy)
    folder = StudyFolder(copy)
    truncated, foreign = (folder.run(run_id).statistics for run_id in ("dp-sgd_eps1_C1_seed0", "non-private_seed0"))
    truncated.write_bytes(truncated.read_bytes()[:40])
    foreign.write_text('{"training_metrics": [0.5]}')
    assert main(["report", str(copy)]) == 0
    assert "Traceback" not in capsys.readouterr().err
    private = html.unescape(folder.private_report.read_text())
    assert f"{truncated} cannot be read (JSONDecodeError: " in private
    assert f"{foreign} cannot be read (TypeError: training_metrics is a list), so it is left out" in private
    assert private.count("Wall time: training") == 2            # both DP-SGD runs' cards, the damaged one's too
    assert 'id="utility"' in folder.report.read_text()


def test_a_damaged_figure_file_leaves_its_run_out_of_the_figure_and_says_so(quickstart, tmp_path, capsys):
    """Before: one flipped byte in a run's ldp_examples.npz (or cams.npz) ended `dpmed report` in "internal error:
    BadZipFile" or "internal error: error: Error -3 while decompressing data", for every run's report."""
    copy = tmp_path / "quickstart"
    shutil.copytree(quickstart, copy)
    examples = copy / "runs" / "pixel-laplace_b0.5_seed0" / "ldp_examples.npz"
    data = bytearray(examples.read_bytes())
    data[60:68] = b"\xff" * 8                                  # inside the first array's compressed bytes
    examples.write_bytes(bytes(data))
    assert main(["report", str(copy)]) == 0
    assert "Traceback" not in capsys.readouterr().err
    report = html.unescape((copy / "report.html").read_text())
    assert f"Left out of the local-DP examples: pixel-laplace_b0.5_seed0: {examples} cannot be read (" in report
    assert 'id="ldp-examples"' in report
    assert "the next `dpmed run` of the study evaluates it again from its model (not retrained" in report


def test_report_rebuilds_from_finished_runs(quickstart, capsys):
    """Both files it rebuilds are named where it ends, as `dpmed run` names them (it named the report only)."""
    (quickstart / "report.html").unlink()
    (quickstart / "results.csv").unlink()
    capsys.readouterr()
    assert main(["report", str(quickstart)]) == 0
    assert (quickstart / "report.html").is_file() and (quickstart / "results.csv").is_file()
    out = capsys.readouterr().out
    assert f"results: {quickstart / 'results.csv'}\n" in out and f"report:  {quickstart / 'report.html'} (" in out
    assert main(["report", str(quickstart.parent)]) == 2


def test_a_crop_padding_beyond_the_image_is_refused_before_training(tmp_path, capsys):
    """Before: every run failed in training with a message that named no key."""
    assert main(["run", "--out", str(tmp_path / "out"), *TINY, "--set",
                 "training.augmentation={crop_padding: 32}"]) == 2
    err = capsys.readouterr().err
    assert "training.augmentation.crop_padding 32 px needs images larger than that" in err and "32 px" in err
    assert not (tmp_path / "out" / "quickstart" / "runs").exists()


def test_a_batch_larger_than_the_training_set_is_refused_for_arms_without_dp_sgd(tmp_path, capsys):
    """Before: the non-private arm trained on the whole set at every step, under the batch size the study states."""
    argv = ["run", "--out", str(tmp_path / "out"), *TINY, "--set", "training.batch_size=5000",
            "--set", "arms=[{name: non-private, mechanism: none}]"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert re.search(r"arm 'non-private': training.batch_size 5000 exceeds the \d+ training images", err), err
    assert "Traceback" not in err and not (tmp_path / "out" / "quickstart" / "runs").exists()


def test_status_calls_a_damaged_run_record_unreadable_not_finished(quickstart, tmp_path, capsys):
    copy = tmp_path / "quickstart"
    shutil.copytree(quickstart, copy)
    (copy / "runs" / "non-private_seed0" / "run.json").write_text("{cut short")
    assert main(["status", str(copy)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"non-private_seed0 +unreadable: .*run\.json is not a run record", out), out
    assert "3 finished, 1 unreadable" in out


@pytest.mark.parametrize("content, kind", [(b"study: [unclosed\n", "ParserError"), (b"\xff\xfe", "UnicodeDecodeError")],
                         ids=["not-yaml", "not-utf8"])
def test_a_damaged_study_yaml_is_named_not_a_traceback(quickstart, tmp_path, capsys, content, kind):
    copy = tmp_path / "quickstart"
    shutil.copytree(quickstart, copy)
    (copy / "study.yaml").write_bytes(content)
    assert main(["report", str(copy)]) == 2
    err = capsys.readouterr().err
    assert f"{copy / 'study.yaml'} cannot be read ({kind}" in err and "Traceback" not in err, err
    assert main(["status", str(copy)]) == 0                 # status names it and lists the runs it can see
    out = capsys.readouterr().out
    assert out.startswith(f"study.yaml                           unreadable: {copy / 'study.yaml'} cannot be read")
    assert "Traceback" not in out and out.splitlines()[-1] == "4 finished; study.yaml unreadable"


def test_bad_study_file_fails_with_one_clear_message(write_study, tmp_path, capsys):
    path = write_study("name: s\ntraining: {epochs: 2, lr: 0.1}\narms: [{name: a, mechanism: none}]\n")
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dpmed: error:") and str(path) in err and "training.lr" in err
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(os.name == "nt", reason="no core files, nor RLIMIT_CORE, on Windows")
def test_run_turns_core_dumps_off_for_itself_and_the_processes_it_starts_and_back_after(tmp_path, monkeypatch):
    """A crash's core file would hold the run's privacy key and the training images outside private/."""
    import resource

    import dpmed.study

    seen = []

    def fake(study, **kwargs):
        read = "import resource; print(resource.getrlimit(resource.RLIMIT_CORE)[0])"
        child = subprocess.run([sys.executable, "-c", read], capture_output=True, text=True, check=True)
        seen.append((resource.getrlimit(resource.RLIMIT_CORE)[0], int(child.stdout)))
        raise ConfigError("stopped by the test")

    soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    if hard == 0:
        pytest.skip("core dumps are off for this process already (hard limit 0): nothing to see turned off")
    resource.setrlimit(resource.RLIMIT_CORE, (hard if hard != resource.RLIM_INFINITY else 1 << 20, hard))
    try:
        before = resource.getrlimit(resource.RLIMIT_CORE)
        monkeypatch.setattr(dpmed.study, "run_study", fake)
        assert main(["run", "--out", str(tmp_path), "--no-progress"]) == 2
        assert seen == [(0, 0)]
        assert resource.getrlimit(resource.RLIMIT_CORE) == before
    finally:
        resource.setrlimit(resource.RLIMIT_CORE, (soft, hard))


def test_missing_and_corrupt_data_fail_clearly_and_keep_finished_runs(write_study, tmp_path, capsys):
    """A finished study survives a later run whose data file has gone bad."""
    rng = np.random.default_rng(0)
    good = tmp_path / "tiny.npz"
    arrays = {}
    for split, n in (("train", 120), ("val", 40), ("test", 40)):
        labels = rng.integers(0, 2, size=(n, 1))
        images = (rng.random((n, 28, 28)) * 60 + labels[:, :, None] * 120).astype(np.uint8)
        arrays.update({f"{split}_images": images, f"{split}_labels": labels})
    np.savez(good, **arrays)
    study = write_study(f"name: real\ndata: {{source: medmnist, path: {good.name}}}\ntraining: {{epochs: 1, "
                        "batch_size: 32}\nevaluation: {bootstrap_resamples: 50}\narms: [{name: a, mechanism: none}]\n")
    out = tmp_path / "out"
    assert main(["run", str(study), "--out", str(out), "--no-progress"]) == 0
    finished = out / "real" / "runs" / "a_seed0" / "run.json"
    assert finished.is_file()

    assert main(["run", str(study), "--out", str(out), "--data-path", str(tmp_path / "gone.npz")]) == 2
    assert "gone.npz" in capsys.readouterr().err
    assert finished.is_file()

    saved = {p: p.read_bytes() for p in (out / "real").rglob("*") if p.is_file()}
    good.write_bytes(b"this is not an npz archive")
    assert main(["run", str(study), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "tiny.npz" in err and "Traceback" not in err
    assert saved == {p: p.read_bytes() for p in (out / "real").rglob("*") if p.is_file()}
