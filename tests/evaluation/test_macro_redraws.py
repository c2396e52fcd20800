"""A bootstrap redraw of the macro AUROC averages the same labels as the point value.

A redraw that draws no positive (or no negative) of a label that is defined on the whole test set is undefined
(scikit-learn's macro AUROC raises on it), not the mean of the labels it kept. Before, those redraws silently
averaged fewer labels, which shifted the interval (here the upper bound by ~0.3) and hid them from
``test_auroc_undefined_redraws`` and from the >10% warning.
"""

import warnings

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from dpmed.evaluation.bootstrap import bootstrap_indices, percentile_interval
from dpmed.evaluation.fairness import evaluate_fairness
from dpmed.evaluation.paired import paired_differences
from dpmed.evaluation.utility import evaluate_utility

N, R, SEED = 200, 1000, 0


def _data():
    rng = np.random.default_rng(0)
    y = (rng.random((N, 3)) < [0.3, 0.3, 0.0]).astype(int)
    y[:2, 2] = 1                                   # a rare finding: 2 positives among 200 test images
    s = np.clip(0.35 * y + rng.random((N, 3)) * 0.65, 0, 1)
    s[:2, 2] = 0.01                                # ... ranked below every negative: its AUROC is ~0
    return y, s


def _pairs_auroc(y, s):
    """AUROC by its definition: the share of (positive, negative) pairs the score ranks right, a tie counting 1/2.
    The same number as scikit-learn's (checked below), at a fraction of its input checks over 1000 redraws."""
    pos, neg = s[y == 1][:, None], s[y == 0][None, :]
    return ((pos > neg).sum() + 0.5 * (pos == neg).sum()) / (pos.size * neg.size)


def _sk_macro(y, s):
    """scikit-learn's macro AUROC of the redrawn sample; undefined (nan) when a label has one class in it."""
    if any(y[:, j].min() == y[:, j].max() for j in range(y.shape[1])):
        return np.nan
    return float(np.mean([_pairs_auroc(y[:, j], s[:, j]) for j in range(y.shape[1])]))


def test_the_reference_auroc_is_scikit_learn_s():
    """Ties included (scores rounded to 0.1): the reference the redraws are compared with is scikit-learn's AUROC."""
    y, s = _data()
    for scores in (s, np.round(s, 1)):
        for i in bootstrap_indices(N, n_resamples=20, seed=SEED):
            assert _sk_macro(y[i, :2], scores[i, :2]) == pytest.approx(
                roc_auc_score(y[i, :2], scores[i, :2], average="macro"), abs=1e-15)


def test_utility_macro_auroc_interval_uses_the_same_labels_in_every_redraw(hand_bca):
    y, s = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        row = evaluate_utility(interval="bca",
                               kind="multilabel", label_names=["a", "b", "rare"], val_labels=y, val_scores=s,
                               test_labels=y, test_scores=s, n_resamples=R, seed=SEED)
    ref = np.array([_sk_macro(y[i], s[i]) for i in bootstrap_indices(N, n_resamples=R, seed=SEED)])
    low, high = hand_bca(lambda i: _sk_macro(y[i], s[i]), ref, np.arange(N))
    assert row["test_auroc"] == pytest.approx(roc_auc_score(y, s, average="macro"))
    assert row["test_auroc_undefined_redraws"] == int(np.isnan(ref).sum())       # 132, not 0
    assert (row["test_auroc_low"], row["test_auroc_high"]) == pytest.approx((low, high), abs=1e-12)


def test_utility_warns_when_many_redraws_lose_a_label():
    y, s = _data()
    with pytest.warns(RuntimeWarning, match="test_auroc"):
        evaluate_utility(kind="multilabel", label_names=["a", "b", "rare"], val_labels=y, val_scores=s,
                         test_labels=y, test_scores=s, n_resamples=R, seed=SEED)


def test_paired_macro_auroc_difference_uses_the_same_labels_in_every_redraw():
    y, s = _data()
    s0 = np.clip(s + np.random.default_rng(1).normal(0, 0.1, s.shape), 0, 1)
    out = paired_differences(kind="multilabel", labels=y, scores=s, reference_scores=s0, n_resamples=R, seed=SEED)
    idx = bootstrap_indices(N, n_resamples=R, seed=SEED)
    ref = np.array([_sk_macro(y[i], s[i]) - _sk_macro(y[i], s0[i]) for i in idx])
    low, high = percentile_interval(ref)
    assert out["auroc"].defined_redraws == int(np.isfinite(ref).sum())
    assert (out["auroc"].low, out["auroc"].high) == pytest.approx((low, high), abs=1e-12)


def test_fairness_group_auroc_interval_uses_the_group_labels_in_every_redraw(hand_bca):
    y, s = _data()
    sex = np.array(["female"] * N)
    sex[100:] = "male"                             # both rare positives (rows 0, 1) are female
    out = evaluate_fairness(interval="bca", kind="multilabel", val_labels=y, val_scores=s, test_labels=y, test_scores=s,
                            attributes={"sex": sex}, n_resamples=R, seed=SEED)
    g = out.attributes["sex"].groups["female"].auroc
    member = sex == "female"
    ref = []
    for i in bootstrap_indices(N, n_resamples=R, seed=SEED):
        keep = i[member[i]]
        ref.append(_sk_macro(y[keep], s[keep]))
    low, high = hand_bca(lambda i: _sk_macro(y[i[member[i]]], s[i[member[i]]]), ref, np.arange(N))
    assert g.value == pytest.approx(roc_auc_score(y[member], s[member], average="macro"))
    assert (g.low, g.high) == pytest.approx((low, high), abs=1e-12)


def test_a_label_undefined_on_the_whole_test_set_is_left_out_of_the_point_value_and_of_every_redraw(hand_bca):
    """A finding with no test positive has no AUROC: the macro value and its interval are those of the others, not
    nan (which it would make every redraw)."""
    rng = np.random.default_rng(3)
    y = np.c_[(rng.random(N) < 0.4).astype(int), np.zeros(N, int)]       # finding "none": no positive on test
    s = np.clip(0.3 * y + rng.random((N, 2)) * 0.7, 0, 1)
    y_val = np.c_[y[:, 0], np.arange(N) % 2]                                # both findings decidable on validation
    row = evaluate_utility(interval="bca", kind="multilabel", label_names=["a", "none"], val_labels=y_val, val_scores=s,
                           test_labels=y, test_scores=s, n_resamples=R, seed=SEED)
    ref = np.array([_sk_macro(y[i, :1], s[i, :1]) for i in bootstrap_indices(N, n_resamples=R, seed=SEED)])
    assert np.isnan(row["test_auroc[none]"]) and row["test_auroc"] == pytest.approx(roc_auc_score(y[:, 0], s[:, 0]))
    assert row["test_auroc_undefined_redraws"] == 0
    assert (row["test_auroc_low"], row["test_auroc_high"]) == pytest.approx(
        hand_bca(lambda i: _sk_macro(y[i, :1], s[i, :1]), ref, np.arange(N)), abs=1e-12)


def _sk_label(y, s):
    """scikit-learn's AUROC of one finding in one redrawn sample; nan when the redraw holds one class of it."""
    return np.nan if y.min() == y.max() else _pairs_auroc(y, s)


def test_each_finding_s_interval_comes_from_the_macro_s_redraws_and_is_undefined_only_where_it_lost_a_class(
        hand_bca):
    """Before, a finding's AUROC had no interval at all. "rare" (2 positives) is lost in 132 redraws: those leave its
    interval, and the macro's, but not the intervals of "a" and "b", which keep all 1000."""
    y, s = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        row = evaluate_utility(interval="bca",
                               kind="multilabel", label_names=["a", "b", "rare"], val_labels=y, val_scores=s,
                               test_labels=y, test_scores=s, n_resamples=R, seed=SEED)
    idx = bootstrap_indices(N, n_resamples=R, seed=SEED)
    for j, name in enumerate(["a", "b", "rare"]):
        ref = np.array([_sk_label(y[i, j], s[i, j]) for i in idx])
        defined = ref[~np.isnan(ref)]
        low, high = hand_bca(lambda i: _sk_label(y[i, j], s[i, j]), ref, np.arange(N))     # BCa, by hand
        assert len(defined) == (R if name != "rare" else R - row["test_auroc_undefined_redraws"])
        assert row[f"test_auroc[{name}]"] == pytest.approx(roc_auc_score(y[:, j], s[:, j]), abs=1e-12)
        assert (row[f"test_auroc[{name}]_low"], row[f"test_auroc[{name}]_high"]) == pytest.approx((low, high),
                                                                                                  abs=1e-12)
    assert row["test_auroc_undefined_redraws"] == 132


def test_a_finding_undefined_on_the_whole_test_set_has_no_value_and_no_interval():
    rng = np.random.default_rng(3)
    y = np.c_[(rng.random(N) < 0.4).astype(int), np.zeros(N, int)]       # finding "none": no positive on test
    s = np.clip(0.3 * y + rng.random((N, 2)) * 0.7, 0, 1)
    y_val = np.c_[y[:, 0], np.arange(N) % 2]
    row = evaluate_utility(kind="multilabel", label_names=["a", "none"], val_labels=y_val, val_scores=s,
                           test_labels=y, test_scores=s, n_resamples=R, seed=SEED)
    assert all(np.isnan(row[k]) for k in ("test_auroc[none]", "test_auroc[none]_low", "test_auroc[none]_high"))
    assert row["test_auroc[a]_low"] < row["test_auroc[a]"] < row["test_auroc[a]_high"]


def test_a_finding_undefined_on_the_whole_test_set_ahead_of_defined_ones_leaves_their_intervals_their_own(hand_bca):
    """The first finding has no positive on test. Each later finding's interval is still the BCa interval of
    its own scikit-learn AUROC over the redraws: the redraws of the defined findings must not be read by position
    among all findings (that would give "a" the redraws of "b", and "b" none)."""
    rng = np.random.default_rng(4)
    n, r = 120, 200
    y = np.c_[np.zeros(n, int), (rng.random(n) < 0.5).astype(int), (rng.random(n) < 0.3).astype(int)]
    s = np.clip(np.c_[rng.random(n), 0.5 * y[:, 1] + 0.5 * rng.random(n), 0.2 * y[:, 2] + 0.8 * rng.random(n)], 0, 1)
    y_val = np.c_[np.arange(n) % 2, y[:, 1:]]
    row = evaluate_utility(interval="bca",
                           kind="multilabel", label_names=["none", "a", "b"], val_labels=y_val, val_scores=s,
                           test_labels=y, test_scores=s, n_resamples=r, seed=SEED)
    assert all(np.isnan(row[k]) for k in ("test_auroc[none]", "test_auroc[none]_low", "test_auroc[none]_high"))
    idx = bootstrap_indices(n, n_resamples=r, seed=SEED)
    for j, name in ((1, "a"), (2, "b")):
        ref = np.array([_sk_label(y[i, j], s[i, j]) for i in idx])
        assert (row[f"test_auroc[{name}]_low"], row[f"test_auroc[{name}]_high"]) == pytest.approx(
            hand_bca(lambda i: _sk_label(y[i, j], s[i, j]), ref, np.arange(n)), abs=1e-12)
