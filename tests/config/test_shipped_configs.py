"""Every study file shipped in configs/ is valid and expands into runs (data paths that point at the user's own
files are replaced by a placeholder folder)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from dpmed.config import load_study, run_ids
from dpmed.errors import ConfigError

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs").rglob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_shipped_study_files_are_valid(path, tmp_path, caplog):
    """... and give no setting that another turns off (`Study.settings_turned_off`): none is warned of."""
    caplog.set_level(logging.WARNING)
    try:
        study = load_study(path)
    except ConfigError as exc:
        if "does not exist" not in str(exc):
            raise
        (tmp_path / "data.npz").touch()
        placeholder = tmp_path / "data.npz" if "source: medmnist" in path.read_text() else tmp_path
        study = load_study(path, {"data.path": str(placeholder)})
    assert run_ids(study)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_the_quickstart_and_the_schema_say_q_is_the_batch_over_the_released_count_of_units():
    """Both said sample_rate = B / N_train, but DP-SGD plans from the released DP count of its training units
    (patients where ids exist, else images; `dpmed.released_size`), never from the exact number of training images.
    The packaged quickstart (what `dpmed run` with no file runs) is the repository's file."""
    from importlib import resources

    from dpmed.config import TrainingConfig

    shipped = Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml"
    packaged = Path(str(resources.files("dpmed") / "configs" / "quickstart.yaml"))
    assert shipped.read_bytes() == packaged.read_bytes()
    comment = " ".join(line.partition("#")[2].strip() for line in shipped.read_text().splitlines()
                       if "batch_size:" in line or line.strip().startswith("# N the released"))
    doc = " ".join(TrainingConfig.__doc__.split())
    for text in (comment, doc):
        assert "N_train" not in text and "/ N," in text, text
        assert "released (DP) count of training patients" in text or "released DP count of the arm's units" in text


def test_the_fairness_study_says_how_many_test_images_its_age_groups_of_60_and_over_hold():
    """Its comment said "~100 images each" for the groups the effect is measured in; the phantom's test split gives
    them fewer, and the comment says what they hold."""
    import re

    import numpy as np

    from dpmed.study import load_study_data

    path = Path(__file__).resolve().parents[2] / "configs" / "fairness.yaml"
    study = load_study(path)
    comment = " ".join(line.partition("#")[2].strip() for line in path.read_text().splitlines() if "#" in line)
    said = re.search(r"\[60,70\), \[70,80\) and \[80,100\) have (\d+), (\d+) and (\d+) images", comment)
    age = np.asarray(load_study_data(study).test.age, float)
    bins = study.evaluation.fairness.age_bins
    assert bins[2:] == [60, 70, 80, 100] and said
    held = [int(((age >= lo) & (age < hi)).sum()) for lo, hi in zip(bins[2:], bins[3:])]
    assert [int(n) for n in said.groups()] == held
