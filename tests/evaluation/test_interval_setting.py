"""evaluation.interval: the percentile interval METHODS.md sec. 4 prescribes by default, BCa where a study asks.

The percentile figures below are what dpmed computed before BCa was offered (86c549a's evaluate_utility and
evaluate_fairness on this example, pasted): the default must give them unchanged, so that studies evaluated then are
not told their numbers moved.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from dpmed.config.schema import EvaluationConfig
from dpmed.evaluation.fairness import evaluate_fairness
from dpmed.evaluation.utility import evaluate_utility


def _example():
    """60 binary test images of 30 patients (two each) with tied scores, and a three-grade test set."""
    rng = np.random.default_rng(7)
    n = 60
    y = (np.arange(n) % 3 == 0).astype(int)
    s = np.round(rng.normal(1.2 * y, 1.0) / 4 + 0.5, 3)
    vy, vs = np.array([0, 1, 0, 1, 1, 0]), np.array([0.2, 0.7, 0.4, 0.6, 0.9, 0.5])
    ids = np.array([f"p{i // 2}" for i in range(n)])
    sex = np.array(["female" if i % 4 == 0 else "male" for i in range(n)])
    age = np.array([20.0 + (i * 7) % 70 for i in range(n)])
    g = rng.integers(0, 3, size=n)
    gs = rng.dirichlet(np.ones(3), size=n)
    gs[np.arange(n), g] += 0.3
    gs /= gs.sum(1, keepdims=True)
    vg = np.array([0, 1, 2, 0, 1, 2])
    return y, s, vy, vs, ids, sex, age, g, gs, vg, np.eye(3)[vg] * 0.6 + 0.4 / 3


def _evaluate(**interval):
    y, s, vy, vs, ids, sex, age, g, gs, vg, vgs = _example()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)          # small groups: undefined redraws, said elsewhere
        binary = evaluate_utility(kind="binary", label_names=["neg", "pos"], val_labels=vy, val_scores=vs,
                                  test_labels=y, test_scores=s, n_resamples=200, seed=3, test_patient_ids=ids,
                                  **interval)
        grades = evaluate_utility(kind="multiclass", label_names=["a", "b", "c"], val_labels=vg, val_scores=vgs,
                                  test_labels=g, test_scores=gs, n_resamples=200, seed=3, ordinal=True, **interval)
        fairness = evaluate_fairness(kind="binary", val_labels=vy, val_scores=vs, test_labels=y, test_scores=s,
                                     attributes={"sex": sex, "age": age}, n_resamples=200, seed=3, patient_ids=ids,
                                     **interval)
    return binary, grades, fairness


def _intervals(row: dict) -> dict:
    return {k: v for k, v in row.items() if k.endswith(("_low", "_high"))}


def _groups(fairness) -> dict:
    return {f"{a}={g} {m}": (getattr(fairness.attributes[a].groups[g], m).low,
                             getattr(fairness.attributes[a].groups[g], m).high)
            for a, g in (("sex", "female"), ("sex", "male"), ("age", "[30,60)")) for m in ("auroc", "accuracy")}


# 86c549a on _example(): every utility interval, and the groups' AUROC and accuracy intervals.
BEFORE_BINARY = {
    "test_accuracy_high": 0.8166666666666667, "test_accuracy_low": 0.5833333333333334,
    "test_auroc_high": 0.8712395833333333, "test_auroc_low": 0.6154571123321123,
    "test_sensitivity_high": 0.85, "test_sensitivity_low": 0.41169786096256683,
    "test_specificity_high": 0.85, "test_specificity_low": 0.5998809523809524}
BEFORE_GRADES = {
    "test_accuracy_high": 0.7333333333333333, "test_accuracy_low": 0.4829166666666667,
    "test_auroc[a]_high": 0.954891202120383, "test_auroc[a]_low": 0.7891118421052632,
    "test_auroc[b]_high": 0.9180659983291563, "test_auroc[b]_low": 0.7249375,
    "test_auroc[c]_high": 0.9361743425399762, "test_auroc[c]_low": 0.7482919254658386,
    "test_auroc_high": 0.9118117138463278, "test_auroc_low": 0.7788034573079292,
    "test_kappa_quadratic_high": 0.7084136345339888, "test_kappa_quadratic_low": 0.22708920741780428}
BEFORE_GROUPS = {
    "sex=female auroc": (0.6991666666666667, 1.0), "sex=female accuracy": (0.7996428571428572, 1.0),
    "sex=male auroc": (0.5191346153846155, 0.8031654527014569),
    "sex=male accuracy": (0.5095588235294117, 0.7503289473684212),
    "age=[30,60) auroc": (0.5186048454469507, 0.9753003246753247),
    "age=[30,60) accuracy": (0.4987500000000002, 0.8501785714285715)}


def test_a_study_gets_the_percentile_interval_of_methods_sec_4_unless_it_asks_for_bca():
    assert EvaluationConfig().interval == "percentile"
    assert EvaluationConfig(interval="bca").interval == "bca"
    with pytest.raises(ValueError):
        EvaluationConfig(interval="bc")


def test_the_default_interval_is_the_percentile_interval_dpmed_gave_before_bca():
    binary, grades, fairness = _evaluate()
    assert _intervals(binary) == BEFORE_BINARY
    assert _intervals(grades) == BEFORE_GRADES
    assert _groups(fairness) == BEFORE_GROUPS
    assert binary["interval"] == grades["interval"] == "percentile"
    assert fairness.definitions["interval"].startswith("percentile bootstrap")


def test_asking_for_bca_moves_the_intervals_it_covers_and_no_others():
    binary, grades, fairness = _evaluate(interval="bca")
    assert binary["interval"] == grades["interval"] == "bca"
    assert "BCa for a group's AUROC and accuracy" in fairness.definitions["interval"]
    moved = [k for k in BEFORE_BINARY if binary[k] != BEFORE_BINARY[k]]
    assert len(moved) >= 4, moved                    # BCa differs from percentile on most bounds of a skewed set
    assert any(grades[k] != BEFORE_GRADES[k] for k in BEFORE_GRADES)
    assert any(_groups(fairness)[k] != BEFORE_GROUPS[k] for k in BEFORE_GROUPS)
    # the differences and the worst group keep the percentile interval either way
    percentile = _evaluate()[2]
    for name in ("sex", "age"):
        assert fairness.attributes[name].worst_group_auroc == percentile.attributes[name].worst_group_auroc
        for g, group in fairness.attributes[name].groups.items():
            assert group.accuracy_parity_difference == percentile.attributes[name].groups[g].accuracy_parity_difference


def test_an_unknown_interval_is_refused_by_name():
    with pytest.raises(ValueError, match="interval must be one of"):
        _evaluate(interval="studentized")
