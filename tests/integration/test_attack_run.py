"""The realistic threat model in a study: an attack block on DP-SGD arms runs the imprint attack on the arm's own step,
reports its success rate beside the bounds, and keeps every image it reconstructed in the private folder."""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest

from dpmed.cli import main
from dpmed.folders import StudyFolder
from dpmed.records import read_record

STUDY = """
name: attacked
data: {source: phantom, n_images: 300, image_size: 16}
training: {epochs: 1, batch_size: 16, threads: 1}
evaluation: {bootstrap_resamples: 20, fairness: null, confidence: 0.9}
arms:
  - {name: open, mechanism: dp_sgd, noise_multiplier: 1.0e-9, privacy_unit: image, attack: {batches: 2}}
  - {name: dp, mechanism: dp_sgd, target_epsilon: 1, privacy_unit: image, attack: {batches: 2}}
  - {name: plain, mechanism: dp_sgd, target_epsilon: 1}
"""


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    folder = tmp_path_factory.mktemp("attack")
    (folder / "s.yaml").write_text(STUDY)
    assert main(["run", str(folder / "s.yaml"), "--out", str(folder / "out"), "--no-progress"]) == 0
    return StudyFolder(folder / "out" / "attacked")


def test_the_attack_reconstructs_without_noise_and_fails_at_eps_1(study):
    open_, dp = (read_record(study.run(r).record).attack for r in ("open_sigma1e-09_C1_seed0", "dp_eps1_C1_seed0"))
    assert open_.rate > 0.5 and open_.rate_low > dp.rate_high          # the attack works; noise stops it
    assert dp.rate <= max(dp.chance_rate, 0.05)
    assert open_.n_trials == 2 * open_.batch_size and "held-out test images" in open_.attacked
    assert read_record(study.run("plain_eps1_C1_seed0").record).attack is None


def test_reconstructions_stay_private_and_the_rate_is_in_the_table(study):
    for run_id in ("open_sigma1e-09_C1_seed0", "dp_eps1_C1_seed0"):
        run = study.run(run_id)
        with np.load(run.attack_images) as f:
            assert f["reconstructions"].shape[1:] == (1, 16, 16) and len(f["originals"]) == len(f["ssim"])
        assert os.name == "nt" or run.attack_images.stat().st_mode & 0o777 == 0o600     # patient images
        record = json.loads(run.record.read_text())
        assert set(record["attack"]) >= {"rate", "rate_low", "rate_high", "chance_rate", "threshold"}
        assert not any(p.suffix == ".npz" and "attack" in p.name for p in run.public.iterdir())
    table = pd.read_csv(study.results)
    assert {"attack_rate", "attack_rate_low", "attack_rate_high", "reconstruction_worst_case"} <= set(table.columns)


def test_a_damaged_reconstructions_file_leaves_its_run_out_of_the_private_figure(study, tmp_path, capsys):
    """Before: a truncated attack_reconstructions.npz ended `dpmed report` in "internal error: BadZipFile"."""
    import html
    import shutil

    from dpmed.folders import StudyFolder

    copy = StudyFolder(tmp_path / "attacked")
    shutil.copytree(study.root, copy.root)
    damaged = copy.run("dp_eps1_C1_seed0").attack_images
    damaged.write_bytes(damaged.read_bytes()[:100])
    assert main(["report", str(copy.root)]) == 0
    assert "Traceback" not in capsys.readouterr().err
    private = html.unescape(copy.private_report.read_text())
    assert f"Left out of the attack's reconstructions: dp_eps1_C1_seed0: {damaged} cannot be read (" in private
    assert "<figure>" in private.split('id="reconstructions"')[1]          # the other attacked run's rows stay


def test_the_attack_s_interval_is_at_the_study_s_confidence_and_follows_it_when_reevaluated(study, tmp_path):
    """evaluation.confidence sets every interval: the attack's stayed at 95 % beside 90 % intervals elsewhere, and a
    rerun at another confidence left it at the old level. Its interval is the counts' Clopper-Pearson, so a
    reevaluation recomputes it without attacking again."""
    import shutil

    from dpmed.evaluation.proportions import clopper_pearson

    record = read_record(study.run("dp_eps1_C1_seed0").record)
    assert record.attack.ci_level == 0.9
    assert (record.attack.rate_low, record.attack.rate_high) == pytest.approx(
        clopper_pearson(record.attack.n_success, record.attack.n_trials, level=0.9))
    copy = StudyFolder(tmp_path / "attacked")
    shutil.copytree(study.root, copy.root)
    (tmp_path / "s.yaml").write_text(STUDY)
    assert main(["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path), "--no-progress",
                 "--set", "evaluation.confidence=0.8"]) == 0
    again = read_record(copy.run("dp_eps1_C1_seed0").record).attack
    assert again.n_success == record.attack.n_success and again.ci_level == 0.8
    assert (again.rate_low, again.rate_high) == pytest.approx(
        clopper_pearson(again.n_success, again.n_trials, level=0.8))
    assert "attack success [80% CI]" in copy.report.read_text()


def test_a_reproducible_study_attacks_with_the_same_noise_every_time(tmp_path):
    """privacy_randomness: reproducible draws a run's randomness from the seed, for tests and debugging; the attack's
    step noise still came from the operating system, so two runs of one study reported different attack scores."""
    study = ("name: again\nprivacy_randomness: reproducible\n"
             "data: {source: phantom, n_images: 300, image_size: 16}\n"
             "training: {epochs: 1, batch_size: 16, threads: 1}\n"
             "evaluation: {bootstrap_resamples: 20, fairness: null, explanations: null}\n"
             "arms:\n  - {name: dp, mechanism: dp_sgd, noise_multiplier: 0.05, privacy_unit: image, "
             "attack: {batches: 1}}\n")
    (tmp_path / "s.yaml").write_text(study)
    attacks = []
    for out in ("first", "second"):
        assert main(["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / out), "--no-progress"]) == 0
        folder = StudyFolder(tmp_path / out / "again")
        attacks.append(read_record(folder.run("dp_sigma0.05_C1_seed0").record).attack)
    assert attacks[0].mean_best_ssim is not None and 0 < attacks[0].mean_best_ssim < 1
    assert attacks[0] == attacks[1]


def test_the_attack_s_result_is_told_on_the_terminal_as_run_json_gives_it(tmp_path, capsys):
    """Before: an audit's result was told as its run ended, the attack's only in run.json and the report."""
    import re

    (tmp_path / "s.yaml").write_text(
        "name: told\ndata: {source: phantom, n_images: 300, image_size: 16}\n"
        "training: {epochs: 1, batch_size: 16, threads: 1}\n"
        "evaluation: {bootstrap_resamples: 20, fairness: null, explanations: null, confidence: 0.9}\n"
        "arms:\n  - {name: open, mechanism: dp_sgd, noise_multiplier: 1.0e-9, privacy_unit: image, "
        "attack: {batches: 1}}\n")
    assert main(["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    folder = StudyFolder(tmp_path / "out" / "told")
    attack = read_record(folder.run("open_sigma1e-09_C1_seed0").record).attack
    told = [line for line in capsys.readouterr().err.splitlines() if "attack success" in line]
    assert len(told) == 1, told
    found = re.fullmatch(r"\[1/1\] open_sigma1e-09_C1_seed0: reconstruction attack success ([\d.]+)% \[([\d.]+)%, "
                         r"([\d.]+)%\] \(90% CI; (\d+) of (\d+) held-out test images\), chance ([\d.]+)%(.*)", told[0])
    assert found, told[0]
    rate, low, high, chance = (float(found[i]) / 100 for i in (1, 2, 3, 6))
    assert rate == pytest.approx(attack.rate, abs=5.1e-4) and chance == pytest.approx(attack.chance_rate, abs=5.1e-4)
    assert attack.rate_low - 0.001 <= low <= attack.rate_low <= attack.rate_high <= high <= attack.rate_high + 0.001
    assert (int(found[4]), int(found[5])) == (attack.n_success, attack.n_trials) and attack.n_trials == 16
    assert found[7] == ("; not above chance" if attack.rate_low <= attack.chance_rate else "")
    # the same line in the study's log, which is private
    assert told[0] in folder.log.read_text()


def test_a_run_evaluated_again_tells_its_audit_and_its_attack_at_the_new_confidence(tmp_path, capsys):
    """A trained run told its audit and attack as it ended; one evaluated again (here at another confidence, which
    recomputes the attack's interval and keeps the audit) told neither, once in the terminal and once in the log."""
    (tmp_path / "s.yaml").write_text(
        "name: again\ndata: {source: phantom, n_images: 300, image_size: 16}\n"
        "training: {epochs: 1, batch_size: 16, threads: 1}\n"
        "evaluation: {bootstrap_resamples: 20, fairness: null, explanations: null, confidence: 0.9}\n"
        "arms:\n  - {name: open, mechanism: dp_sgd, noise_multiplier: 1.0e-9, privacy_unit: image, "
        "attack: {batches: 1}, audit: {canaries: 20}}\n")
    command = ["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "out"), "--no-progress"]
    assert main(command) == 0
    capsys.readouterr()
    folder = StudyFolder(tmp_path / "out" / "again")
    log = len(folder.log.read_text().splitlines())
    assert main([*command, "--set", "evaluation.confidence=0.95"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert any("evaluated again" in line for line in err), err
    attack = read_record(folder.run("open_sigma1e-09_C1_seed0").record).attack
    assert attack.ci_level == 0.95
    told = [line for line in err if "attack success" in line]
    assert len(told) == 1 and told[0].startswith("[1/1] open_sigma1e-09_C1_seed0: reconstruction attack success "), err
    assert f"(95% CI; {attack.n_success} of {attack.n_trials} held-out test images)" in told[0]
    audit = [line for line in err if ": audit (private: " in line]
    assert len(audit) == 1 and "empirical lower bound eps >= " in audit[0], err
    logged = folder.log.read_text().splitlines()[log:]
    assert sum(told[0] in line for line in logged) == sum(audit[0] in line for line in logged) == 1


def test_an_attack_not_above_chance_is_told_so_as_the_report_tells_it(caplog):
    """The report's rule: a rate whose interval reaches down to the chance rate is not above chance."""
    import logging

    from dpmed.records import AttackRecord
    from dpmed.study import _tell_attack

    record = AttackRecord(structure="sparse", n_bins=8, batch_size=4, n_batches=2, grouped=False, threshold=0.8,
                          threshold_quantile=0.99, n_trials=8, n_success=1, rate=0.125, rate_low=0.0064,
                          rate_high=0.47, ci_level=0.95, batch_rate=0.5, chance_rate=0.125, mean_best_ssim=None,
                          mean_best_ncc=None, attacked="held-out test images")
    with caplog.at_level(logging.INFO, logger="dpmed.study"):
        _tell_attack("[2/3] dp_seed0", record)
        _tell_attack("[3/3] dp_seed1", record.model_copy(update={"chance_rate": 0.005}))
        _tell_attack("[1/3] dp_seed2", record.model_copy(update={"chance_rate": 0.0064}))    # reaches it exactly
    assert [r.getMessage() for r in caplog.records if r.name == "dpmed.study"] == [
        "[2/3] dp_seed0: reconstruction attack success 12.5% [0.6%, 47.0%] (95% CI; 1 of 8 held-out test images), "
        "chance 12.5%; not above chance",
        "[3/3] dp_seed1: reconstruction attack success 12.5% [0.6%, 47.0%] (95% CI; 1 of 8 held-out test images), "
        "chance 0.5%",
        "[1/3] dp_seed2: reconstruction attack success 12.5% [0.6%, 47.0%] (95% CI; 1 of 8 held-out test images), "
        "chance 0.6%; not above chance"]
