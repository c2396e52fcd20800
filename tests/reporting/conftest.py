"""Fixtures of the report tests: runs made from hand-made scores (predictions saved as a run saves them; metrics and
fairness blocks computed by the evaluation stage itself), and the report written from them by the study's own
``write_outputs``. No training."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

from dpmed.evaluation.utility import evaluate_utility
from dpmed.evaluation.fairness import evaluate_fairness
from dpmed.folders import StudyFolder
from dpmed.outputs import write_outputs
from dpmed.records import RunRecord

N = 120                                                          # test images
_RNG = np.random.default_rng(16)
Y_VAL = np.r_[np.zeros(40, int), np.ones(40, int)]
Y = np.r_[np.zeros(N // 2, int), np.ones(N // 2, int)]
SEX = _RNG.choice(["female", "male"], N)
AGE = np.r_[np.full(8, 25.0), _RNG.uniform(30, 95, N - 8)]      # 8 patients under 30: a small fairness group
CUT_SHORT = "was cut short"     # the report's flag of runs whose files lie in runs/ without their run.json


def binary_scores(quality: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(validation, test) scores of a binary model whose separation grows with ``quality`` in [0, 1]."""
    return (np.clip(quality * Y_VAL + (1 - quality) * rng.random(len(Y_VAL)), 0, 1),
            np.clip(quality * Y + (1 - quality) * rng.random(N), 0, 1))


@pytest.fixture
def scores():
    """:func:`binary_scores`."""
    return binary_scores


@pytest.fixture
def attributes():
    """The test images' recorded sex and age, by which every scored run's fairness block is computed."""
    return {"sex": SEX, "age": AGE}


@pytest.fixture
def labels():
    """(validation labels, test labels): what every scored run is scored against."""
    return Y_VAL, Y


_EVALUATED: dict = {}


def _evaluated(val: np.ndarray, test: np.ndarray, names: tuple[str, ...], fairness: bool, resamples: int):
    """(metrics, fairness block or None) of these scores, as the evaluation stage computes them: a function of its
    arguments alone, so computed once per session (the bootstraps took most of a report test's time; most tests
    score the same few runs); callers get copies."""
    key = (np.asarray(val, float).tobytes(), np.asarray(test, float).tobytes(), names, fairness, resamples)
    if key not in _EVALUATED:
        metrics = evaluate_utility(kind="binary", label_names=list(names), val_labels=Y_VAL, val_scores=val,
                                   test_labels=Y, test_scores=test, n_resamples=resamples, seed=0)
        block = (evaluate_fairness(kind="binary", val_labels=Y_VAL, val_scores=val, test_labels=Y, test_scores=test,
                                   attributes={"sex": SEX, "age": AGE}, n_resamples=resamples) if fairness else None)
        _EVALUATED[key] = metrics, block
    return _EVALUATED[key]


@pytest.fixture
def release(tmp_path):
    """Save a finished run as `dpmed run` leaves it in the study folder ``root`` (tmp_path unless given): its
    releasable files (``predictions``, ``cams``, ``examples``: each the arrays of its npz) in runs/<id>/, and its
    record as its run.json beside them. Without the run.json a report tells those files as a release cut short
    (`StudyFolder.interrupted_releases`): the report tests would read a folder no finished study leaves, and could not
    tell a spurious warning from a real one. Returns the record."""

    def save(record: RunRecord, *, root: Path | None = None, predictions: dict | None = None,
             cams: dict | None = None, examples: dict | None = None) -> RunRecord:
        run = StudyFolder(root or tmp_path).run(record.run_id)
        run.public.mkdir(parents=True, exist_ok=True)
        for path, arrays in ((run.predictions, predictions), (run.cams, cams), (run.examples, examples)):
            if arrays is not None:
                np.savez(path, **arrays)
        record.write(run.record)
        return record

    return save


@pytest.fixture
def scored_run(make_record, release):
    """A factory of finished binary runs in tmp_path, released by :func:`release` with their predictions; returns
    the record with the metrics (and, with ``fairness=True``, the fairness block by sex and age) that evaluation
    computes."""

    def make(run_id: str, arm: str, mechanism: str = "none", *, scores, eps: float | None = None, seed: int = 0,
             names=("normal", "pneumonia"), fairness: bool = False, resamples: int = 200):
        val, test = scores
        metrics, block = copy.deepcopy(_evaluated(val, test, tuple(names), fairness, resamples))
        record = make_record(run_id, arm, mechanism, eps=eps, seed=seed, metrics=metrics, fairness=block)
        return release(record, predictions=dict(test_scores=test, test_labels=Y,
                                                test_patient_ids=np.arange(N).astype(str), val_scores=val,
                                                val_labels=Y_VAL, val_patient_ids=np.arange(len(Y_VAL)).astype(str)))

    return make


@pytest.fixture
def report_html(tmp_path, make_resolved):
    """Write results.csv, comparisons.json and report.html for ``records`` into tmp_path; return report.html."""

    def write(records, *, names=("normal", "pneumonia"), resamples: int = 200, **kw) -> str:
        resolved = make_resolved(records, resamples=resamples, n_test=N, label_names=tuple(names), **kw)
        write_outputs(StudyFolder(tmp_path), resolved, records)
        html = (tmp_path / "report.html").read_text()
        assert CUT_SHORT not in html, "a report test's runs lie in runs/ without their run.json: save them by release"
        return html

    return write


@pytest.fixture
def two_arms(scored_run):
    """A non-private run and a DP-SGD run at eps 1 that finds fewer pneumonia cases, both with fairness blocks."""
    rng = np.random.default_rng(1)
    return [scored_run("non-private_seed0", "non-private", "none", scores=binary_scores(0.7, rng), fairness=True),
            scored_run("dp-sgd_eps1_C1_seed0", "dp-sgd", "dp_sgd", eps=1.0, scores=binary_scores(0.35, rng),
                       fairness=True)]
