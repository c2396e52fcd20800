"""The tiny study the end-to-end tests share: two arms (no privacy, DP-SGD at eps 8) on 160 phantom images at 16 px,
three epochs, in reproducible mode so that every executor and every rerun can be compared number for number."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from dpmed.cli import main

TINY = """
name: tiny
privacy_randomness: reproducible
data: {source: phantom, n_images: 160, image_size: 16}
training: {epochs: 3, batch_size: 16, threads: 2}
evaluation: {bootstrap_resamples: 20}
arms:
  - {name: base, mechanism: none}
  - {name: dp, mechanism: dp_sgd, target_epsilon: 8}
"""
TIMING = ["train_seconds"]


def _results_table(folder: Path) -> pd.DataFrame:
    return pd.read_csv(folder / "results.csv").drop(columns=TIMING).sort_values("run_id").reset_index(drop=True)


@pytest.fixture(scope="session")
def results_table():
    """results.csv of a study folder without wall time, sorted by run: what must not depend on where or when the
    study ran."""
    return _results_table


@pytest.fixture(scope="session")
def tiny_text() -> str:
    return TINY


@pytest.fixture(scope="session")
def tiny_study_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tiny") / "s.yaml"
    path.write_text(TINY)
    return path


@pytest.fixture(scope="session")
def tiny_study(tiny_study_file, tmp_path_factory) -> Path:
    """The tiny study run once, in one go, in-process: its output folder."""
    out = tmp_path_factory.mktemp("tiny-out")
    assert main(["run", str(tiny_study_file), "--out", str(out), "--no-progress"]) == 0
    return out / "tiny"
