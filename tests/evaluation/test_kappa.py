"""Quadratic-weighted kappa for ordinal grades (METHODS.md sec. 4): by hand, against scikit-learn, in the report row."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score

from dpmed.evaluation.bootstrap import bootstrap_indices
from dpmed.evaluation.utility import evaluate_utility, quadratic_weighted_kappa
from dpmed.evaluation.weighted import weighted_kappa


def test_kappa_by_hand():
    # y = 0, 1, 2 and predictions 0, 2, 2 (K = 3): w = (i - j)^2 / 4. Observed disagreement: w(1, 2) / 3 = 1/12.
    # Marginals: true 1/3 each, predicted (1/3, 0, 2/3); expected disagreement = 1/3 * (1/3 * 5/4 + 2/3 * 5/4) = 5/12.
    # kappa = 1 - (1/12) / (5/12) = 0.8
    assert quadratic_weighted_kappa([0, 1, 2], [0, 2, 2], n_classes=3) == pytest.approx(0.8)
    assert quadratic_weighted_kappa([0, 1, 2, 3], [0, 1, 2, 3], n_classes=5) == pytest.approx(1.0)
    assert np.isnan(quadratic_weighted_kappa([2, 2], [2, 2], n_classes=5))  # one class only: undefined


def test_kappa_matches_scikit_learn():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 5, 300)
    p = np.clip(y + rng.integers(-2, 3, 300), 0, 4)
    assert quadratic_weighted_kappa(y, p, n_classes=5) == pytest.approx(cohen_kappa_score(y, p, weights="quadratic"))


def test_ordinal_task_reports_kappa_with_interval():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 5, 200)
    scores = np.eye(5)[np.clip(y + rng.integers(-1, 2, 200), 0, 4)] * 0.8 + 0.04  # [N, 5], rows sum to 1
    args = dict(kind="multiclass", label_names=list("01234"), val_labels=y, val_scores=scores, test_labels=y,
                test_scores=scores, n_resamples=200, seed=0)
    row = evaluate_utility(**args, ordinal=True)
    expected = cohen_kappa_score(y, scores.argmax(axis=1), weights="quadratic")
    assert row["test_kappa_quadratic"] == pytest.approx(expected)
    assert row["test_kappa_quadratic_low"] < expected < row["test_kappa_quadratic_high"]
    assert "test_kappa_quadratic" not in evaluate_utility(**args)  # nominal classes: no kappa
    with pytest.raises(ValueError, match="ordinal applies to multiclass"):
        evaluate_utility(kind="binary", label_names=["a", "b"], val_labels=[0, 1], val_scores=[0.1, 0.9],
                         test_labels=[0, 1], test_scores=[0.2, 0.8], n_resamples=10, seed=0, ordinal=True)


def test_kappa_interval_is_the_bca_interval_of_sklearn_redraws(hand_bca):
    """End to end: the kappa of every redraw of the seeded bootstrap is scikit-learn's on the redrawn images."""
    rng = np.random.default_rng(4)
    y = rng.integers(0, 5, 90)
    scores = np.eye(5)[np.clip(y + rng.integers(-2, 3, 90), 0, 4)] * 0.8 + 0.04
    row = evaluate_utility(interval="bca",
                           kind="multiclass", label_names=list("01234"), val_labels=y, val_scores=scores,
                           test_labels=y, test_scores=scores, n_resamples=150, seed=2, ordinal=True)
    predicted = scores.argmax(axis=1)

    def kappa(i):
        return cohen_kappa_score(y[i], predicted[i], weights="quadratic")

    expected = hand_bca(kappa, [kappa(i) for i in bootstrap_indices(90, n_resamples=150, seed=2)], np.arange(90))
    assert (row["test_kappa_quadratic_low"], row["test_kappa_quadratic_high"]) == pytest.approx(tuple(expected),
                                                                                               rel=1e-12)


@pytest.mark.parametrize("labels, predicted, n_classes", [
    ([0, 1], [0, 1, 1], 3),             # a prediction more than labels: the pairs are lost
    ([[0, 1]], [[0, 1]], 3),            # a table, not one grade per image
    ([0, 0], [0, 0], 1),                # one class: no disagreement can be weighed
])
def test_kappa_refuses_arrays_that_do_not_pair_and_a_single_class(labels, predicted, n_classes):
    with pytest.raises(ValueError, match="must both be \\[N\\] with K >= 2 classes"):
        quadratic_weighted_kappa(labels, predicted, n_classes=n_classes)


@pytest.mark.parametrize("labels, predicted", [
    ([0, 1, 2], [3, 1, 2]),             # grade 3 of 3 classes would be read as (true 1, predicted 0)
    ([1, 1, 2], [-1, 1, 2]),            # grade -1 would be read as (true 0, predicted 2)
    ([3, 1, 2], [0, 1, 2]),
])
def test_kappa_refuses_grades_outside_its_classes_instead_of_counting_them_in_another_cell(labels, predicted):
    with pytest.raises(ValueError, match=r"class indices 0\.\.2"):
        quadratic_weighted_kappa(labels, predicted, n_classes=3)
    with pytest.raises(ValueError, match=r"weighted_kappa: .*class indices 0\.\.2"):     # the bootstrap's kappa too
        weighted_kappa(labels, predicted, np.ones((2, 3)), n_classes=3)


def test_kappa_weighs_by_grade_distance_when_grades_between_are_never_seen():
    """Grades 2 and 3 in neither labels nor predictions: calling 4 for a 1 is still three grades off. scikit-learn
    without ``labels`` numbers only the grades it sees (0, 1, 4 become 0, 1, 2) and weighs that error as two."""
    y, p = np.array([0, 1, 4, 1, 0]), np.array([0, 4, 4, 1, 1])
    got = quadratic_weighted_kappa(y, p, n_classes=5)
    assert got == pytest.approx(cohen_kappa_score(y, p, weights="quadratic", labels=range(5)))
    assert got != pytest.approx(cohen_kappa_score(y, p, weights="quadratic"))
