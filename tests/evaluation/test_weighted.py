"""The evaluation stage's one bootstrap engine (per-image counts) against scikit-learn on the redrawn samples
themselves: with integer counts every weighted statistic must be the statistic of the sample with each image
repeated as often as it was drawn, ties and absent classes included (METHODS.md sec. 4)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import cohen_kappa_score, roc_auc_score

from dpmed.evaluation.bootstrap import bootstrap_indices
from dpmed.evaluation.weighted import (as_label_columns, evaluate_redraws, number, quadratic_kappa, redraw_counts,
                                       weighted_auroc, weighted_kappa, weighted_macro_auroc, weighted_mean)

# ------------------------------------------------------------------------------------------------------------ AUROC


def test_weighted_auroc_equals_sklearn_on_random_data_with_ties():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, size=(50, 60))
    scores = np.round(rng.random((50, 60)) * 0.5 + 0.3 * labels, 1)  # coarse scores: many ties
    got = [weighted_auroc(y, s, np.ones(60))[0] for y, s in zip(labels, scores, strict=True)]  # each image once
    expected = [roc_auc_score(y, s) for y, s in zip(labels, scores, strict=True)]
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 4)), min_size=1, max_size=30))
def test_weighted_auroc_matches_sklearn_or_is_nan_with_one_class(pairs):
    labels = np.array([p[0] for p in pairs])
    scores = np.array([p[1] for p in pairs], dtype=float) / 4
    got = weighted_auroc(labels, scores, np.ones(len(pairs)))[0]
    if labels.min() == labels.max():
        assert np.isnan(got)
    else:
        assert got == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 4), st.integers(0, 3)), min_size=1, max_size=30))
def test_weighted_auroc_with_counts_is_the_auroc_of_the_repeated_sample(triples):
    labels, levels, counts = (np.array(v) for v in zip(*triples, strict=True))
    scores = levels / 4.0
    got = weighted_auroc(labels, scores, counts[None, :].astype(float))[0]
    y, s = np.repeat(labels, counts), np.repeat(scores, counts)
    if y.size == 0 or y.min() == y.max():
        assert np.isnan(got)
    else:
        assert got == pytest.approx(roc_auc_score(y, s), abs=1e-12)


def test_every_redraw_of_a_seeded_bootstrap_equals_sklearn():
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 2, 80)
    scores = np.round(np.clip(0.35 + 0.3 * labels + rng.normal(0, 0.2, 80), 0, 1), 1)
    indices = bootstrap_indices(80, n_resamples=60, seed=8)
    got = evaluate_redraws(indices, lambda w: weighted_auroc(labels, scores, w))
    expected = [roc_auc_score(labels[i], scores[i]) for i in indices]
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)


# ------------------------------------------------------------------------------------------------- means and kappa


def test_weighted_mean_with_counts_is_the_mean_of_the_redrawn_sample():
    values = np.random.default_rng(1).random(40)
    indices = bootstrap_indices(40, n_resamples=30, seed=2)
    got = evaluate_redraws(indices, lambda w: weighted_mean(values, w))
    np.testing.assert_allclose(got, [values[i].mean() for i in indices], rtol=1e-14)
    assert np.isnan(weighted_mean(values[:2], np.zeros((1, 2)))[0])  # nothing drawn: undefined


def test_weighted_kappa_with_counts_is_the_kappa_of_the_redrawn_sample():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 5, 120)
    p = np.clip(y + rng.integers(-2, 3, 120), 0, 4)
    indices = bootstrap_indices(120, n_resamples=50, seed=1)
    got = evaluate_redraws(indices, lambda w: weighted_kappa(y, p, w, n_classes=5))
    expected = [cohen_kappa_score(y[i], p[i], weights="quadratic") for i in indices]
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    for r, i in enumerate(indices[:5]):  # the confusion counts are exactly the redrawn sample's
        confusion = np.bincount(y[i] * 5 + p[i], minlength=25).reshape(5, 5).astype(np.float64)
        assert got[r] == quadratic_kappa(confusion[None])[0]


def test_weighted_kappa_is_nan_where_every_label_and_prediction_is_one_class():
    y = np.array([0, 2, 2, 1])
    w = np.array([[0, 3, 1, 0], [1, 1, 1, 1]], dtype=float)  # redraw 0: only the two 2 -> 2 images
    got = weighted_kappa(y, y, w, n_classes=3)
    assert np.isnan(got[0]) and got[1] == 1.0


# ---------------------------------------------------------------------------------------------------------- blocks


def test_counts_are_the_draws_and_blocks_change_nothing(monkeypatch):
    indices = bootstrap_indices(7, n_resamples=25, seed=0)
    whole = np.concatenate([c for _, c in redraw_counts(indices)])
    np.testing.assert_array_equal(whole, [np.bincount(i, minlength=7) for i in indices])
    values = np.arange(7.0)
    one_block = evaluate_redraws(indices, lambda w: weighted_mean(values, w))
    monkeypatch.setattr("dpmed.evaluation.weighted._BLOCK_ELEMENTS", 7 * 4)  # blocks of 4 redraws
    assert len(list(redraw_counts(indices))) == 7
    np.testing.assert_array_equal(evaluate_redraws(indices, lambda w: weighted_mean(values, w)), one_block)


def test_label_columns_by_hand():
    """Binary: one column of P(class 1); multiclass: one-vs-rest per class; multilabel: as they are."""
    y, s = as_label_columns("binary", [0, 1, 1], [0.2, 0.7, 0.9])
    assert y.tolist() == [[0], [1], [1]] and s.tolist() == [[0.2], [0.7], [0.9]]
    probabilities = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6], [0.5, 0.4, 0.1]])
    y, s = as_label_columns("multiclass", [0, 1, 2, 1], probabilities)
    assert y.tolist() == [[1, 0, 0], [0, 1, 0], [0, 0, 1], [0, 1, 0]] and (s == probabilities).all()
    y, s = as_label_columns("multilabel", [[1, 0], [0, 1]], [[0.9, 0.2], [0.3, 0.6]])
    assert y.tolist() == [[1, 0], [0, 1]] and s.tolist() == [[0.9, 0.2], [0.3, 0.6]]
    with pytest.raises(ValueError, match="kind must be"):
        as_label_columns("ordinal", [0], [0.5])


def test_the_macro_auroc_leaves_out_a_label_with_one_class_and_a_redraw_that_loses_one_is_undefined():
    labels = np.array([[1, 0], [0, 0], [1, 0], [0, 0]])            # the second finding never occurs
    scores = np.array([[0.9, 0.5], [0.2, 0.1], [0.4, 0.7], [0.6, 0.3]])
    whole = np.ones((1, 4))
    assert weighted_macro_auroc(labels, scores, whole)[0] == pytest.approx(roc_auc_score(labels[:, 0], scores[:, 0]))
    two_each = np.array([[2.0, 2.0, 0.0, 0.0]])                       # a positive and a negative, twice each
    no_negative = np.array([[1.0, 0.0, 1.0, 0.0]])                   # both positives, no negative
    assert weighted_macro_auroc(labels, scores, two_each)[0] == pytest.approx(1.0)     # label 2 still left out
    assert np.isnan(weighted_macro_auroc(labels, scores, no_negative)[0])
    assert np.isnan(weighted_macro_auroc(np.zeros((4, 2), int), scores, whole)).all()   # nothing defined: nan


def test_json_numbers_drop_nan_and_both_infinities():
    assert [number(v) for v in (0.25, np.float32(0.5), np.nan, np.inf, -np.inf, None)] == [0.25, 0.5, None, None,
                                                                                          None, None]


def test_an_empty_test_set_has_no_auroc():
    assert np.isnan(weighted_auroc(np.zeros(0), np.zeros(0), np.ones((2, 0)))).all()


def test_weights_with_a_column_more_than_images_are_refused_not_cut_to_fit():
    """Without the check the AUROC would weigh the images by the first n columns of a redraw meant for n + 1 images
    and return a number; kappa would fail inside a matrix product."""
    y, s = np.array([0, 1, 0, 1]), np.array([0.1, 0.9, 0.4, 0.6])
    with pytest.raises(ValueError, match=r"weighted_auroc: .* must agree; got \(4,\), \(4,\), \(2, 5\)"):
        weighted_auroc(y, s, np.ones((2, 5)))
    with pytest.raises(ValueError, match=r"weighted_kappa: .* must agree; got \(4,\), \(4,\), \(2, 5\)"):
        weighted_kappa(y, y, np.ones((2, 5)), n_classes=2)
