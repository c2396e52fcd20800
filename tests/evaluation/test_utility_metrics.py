"""Utility metrics against hand counts on tiny inputs and against scikit-learn (METHODS.md sec. 4)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import roc_auc_score

from dpmed.evaluation.bootstrap import bootstrap_indices
from dpmed.evaluation.utility import (UNDEFINED_REDRAWS_WARN_FRACTION, _estimate, auroc, evaluate_utility,
                                      youden_threshold)
from dpmed.evaluation.weighted import weighted_auroc

# ------------------------------------------------------------------------------------------------------------ AUROC


def test_auroc_hand_case():
    # 4 positive-negative pairs: (0.35 vs 0.1) yes, (0.35 vs 0.4) no, (0.8 vs both) yes -> 3/4
    labels, scores = [0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]
    value, per_label = auroc(labels, scores, kind="binary")
    assert value == 0.75
    assert per_label == {"0": 0.75, "1": 0.75}  # class 0 one-vs-rest has the same area
    assert weighted_auroc(labels, scores, np.ones(4))[0] == 0.75  # the bootstrap engine's form, each image once


def test_auroc_ties_get_half_credit():
    # pairs: (0.6 vs 0.2) 1, (0.9 vs 0.2) 1, (0.6 vs 0.6) 1/2, (0.9 vs 0.6) 1 -> 3.5 / 4
    labels, scores = [0, 0, 1, 1], [0.2, 0.6, 0.6, 0.9]
    assert auroc(labels, scores, kind="binary")[0] == 0.875
    assert weighted_auroc(labels, scores, np.ones(4))[0] == 0.875
    assert weighted_auroc([0, 1], [0.5, 0.5], np.ones(2))[0] == 0.5


def test_multiclass_macro_is_sklearn_one_vs_rest():
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 4, 200)
    scores = rng.dirichlet(np.ones(4), 200)
    scores[np.arange(200), labels] += 0.4
    scores /= scores.sum(axis=1, keepdims=True)
    macro, per_class = auroc(labels, scores, kind="multiclass")
    assert macro == pytest.approx(roc_auc_score(labels, scores, multi_class="ovr", average="macro"), abs=1e-12)
    for k in range(4):
        assert per_class[str(k)] == pytest.approx(roc_auc_score(labels == k, scores[:, k]), abs=1e-12)


def test_a_class_absent_from_the_set_is_nan_and_left_out_of_the_multiclass_macro():
    rng = np.random.default_rng(3)
    labels = rng.choice([0, 1, 3], 60)                   # class 2 of 4 never occurs
    scores = rng.dirichlet(np.ones(4), 60)
    macro, per_class = auroc(labels, scores, kind="multiclass")
    assert np.isnan(per_class["2"])
    assert macro == pytest.approx(np.mean([roc_auc_score(labels == k, scores[:, k]) for k in (0, 1, 3)]), abs=1e-12)


def test_multilabel_macro_is_mean_over_labels_with_both_classes():
    rng = np.random.default_rng(2)
    labels = (rng.random((150, 3)) < 0.3).astype(float)
    scores = np.clip(0.3 + 0.3 * labels + rng.normal(0, 0.2, labels.shape), 0, 1)
    macro, per_label = auroc(labels, scores, kind="multilabel")
    assert macro == pytest.approx(roc_auc_score(labels, scores, average="macro"), abs=1e-12)
    labels[:, 1] = 0  # label 1 now has no positive: undefined, left out of the macro
    macro, per_label = auroc(labels, scores, kind="multilabel")
    assert np.isnan(per_label["1"])
    assert macro == pytest.approx(np.mean([roc_auc_score(labels[:, j], scores[:, j]) for j in (0, 2)]), abs=1e-12)


def test_auroc_undefined_and_unknown_kind_are_errors():
    with pytest.raises(ValueError, match="positives and negatives"):
        auroc([1, 1, 1], [0.2, 0.5, 0.9], kind="binary")
    with pytest.raises(ValueError, match="kind must be one of"):
        auroc([0, 1], [0.2, 0.5], kind="ordinal")


# ----------------------------------------------------------------------------------------------------------- Youden


def test_youden_hand_case():
    # threshold: TPR - FPR: 0.9: 1/3 - 0; 0.7: 1/3 - 1/3; 0.6: 2/3 - 1/3; 0.4: 1 - 1/3 (max); 0.2: 1 - 2/3; 0.1: 0
    labels, scores = [0, 0, 0, 1, 1, 1], [0.1, 0.2, 0.7, 0.4, 0.6, 0.9]
    assert youden_threshold(labels, scores) == 0.4


def test_youden_ties_go_to_the_highest_threshold():
    # J = 0.5 at 0.8 (TPR 1/2, FPR 0) and at 0.35 (TPR 1, FPR 1/2): the first, highest, wins
    assert youden_threshold([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]) == 0.8


def test_youden_ties_are_exact_not_float_rounded():
    # 2 positives, 10 negatives. J = 1/2 - 2/10 = 0.3 at 0.85 and 2/2 - 7/10 = 0.3 at 0.55, but in floats the second
    # reads 0.30000000000000004: a naive argmax of tpr - fpr would pick 0.55.
    labels = [0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0]
    scores = [0.95, 0.9, 0.85, 0.8, 0.75, 0.7, 0.65, 0.6, 0.55, 0.5, 0.45, 0.4]
    assert youden_threshold(labels, scores) == 0.85


def test_youden_counts_are_exact_where_a_rate_times_its_class_size_is_not():
    # 49 positives, 49 negatives. The top score (a positive) gives J = 1/49 - 0; the third, after one negative,
    # 2/49 - 1/49: a tie, which the top one wins. But 1/49 * 49 is 0.9999999999999999 in floats, so counts taken
    # back from the rates by truncation lose that positive (J 0 at the top) and pick the third score.
    labels = np.r_[[1, 0, 1], np.tile([0, 1], 47), [0]]  # below the top three, J never exceeds 1/49
    scores = np.linspace(1.0, 0.01, labels.size)
    assert (labels.sum(), (labels == 0).sum()) == (49, 49) and (1 / 49) * 49 < 1
    assert youden_threshold(labels, scores) == scores[0]


def _brute_youden(labels: np.ndarray, scores: np.ndarray) -> float:
    """Every distinct score tried from the highest down, positive when score >= it; the first largest J wins."""
    best, chosen = None, None
    for t in sorted(set(scores.tolist()), reverse=True):
        called = scores >= t
        j = called[labels == 1].sum() * (labels == 0).sum() - called[labels == 0].sum() * (labels == 1).sum()
        if best is None or j > best:
            best, chosen = j, t
    return chosen


# Scores on a coarse grid, so that many are tied, positives and negatives alike.
_VAL_SETS = st.lists(st.tuples(st.integers(0, 1), st.integers(0, 6)), min_size=2, max_size=40).filter(
    lambda pairs: len({y for y, _ in pairs}) == 2)


@settings(max_examples=200, deadline=None)
@given(_VAL_SETS)
def test_youden_is_the_highest_of_the_best_distinct_scores_by_brute_force(pairs):
    labels = np.array([y for y, _ in pairs])
    scores = np.array([s / 6 for _, s in pairs])
    assert youden_threshold(labels, scores) == _brute_youden(labels, scores)


@pytest.mark.filterwarnings("ignore:.*bootstrap redraws:RuntimeWarning")    # tiny test sets: most redraws lose a class
@settings(max_examples=50, deadline=None)
@given(_VAL_SETS, _VAL_SETS)
def test_the_stated_rates_are_those_of_score_at_or_above_the_validation_threshold(val, test):
    val_y, val_s = np.array([y for y, _ in val]), np.array([s / 6 for _, s in val])
    y, s = np.array([y for y, _ in test]), np.array([s / 6 for _, s in test])
    row = evaluate_utility(kind="binary", label_names=["neg", "pos"], val_labels=val_y, val_scores=val_s,
                           test_labels=y, test_scores=s, n_resamples=5, seed=0)
    t = _brute_youden(val_y, val_s)
    assert row["threshold"] == t
    assert row["val_sensitivity"] == pytest.approx((val_s[val_y == 1] >= t).mean())
    assert row["val_specificity"] == pytest.approx((val_s[val_y == 0] < t).mean())
    assert row["test_sensitivity"] == pytest.approx((s[y == 1] >= t).mean())
    assert row["test_specificity"] == pytest.approx((s[y == 0] < t).mean())
    assert row["test_accuracy"] == pytest.approx(((s >= t) == (y == 1)).mean())


@pytest.mark.parametrize("labels", [[0, 0, 0], [1, 1, 1]])
def test_youden_one_class_is_an_error_that_says_why(labels):
    with pytest.raises(ValueError, match="positives and negatives"):
        youden_threshold(labels, [0.1, 0.5, 0.9])


def test_youden_rejects_non_binary_labels_and_nan_scores():
    with pytest.raises(ValueError, match="0 or 1"):
        youden_threshold([0, 2, 1], [0.1, 0.5, 0.9])
    with pytest.raises(ValueError, match="nan"):
        youden_threshold([0, 1, 1], [0.1, np.nan, 0.9])


# ------------------------------------------------------------------------------------------- evaluate_utility: binary

VAL_LABELS = np.array([0, 0, 0, 1, 1, 1])
VAL_SCORES = np.array([0.1, 0.2, 0.7, 0.4, 0.6, 0.9])  # Youden on validation: 0.4
TEST_LABELS = np.array([0, 0, 0, 0, 1, 1, 1, 1])
TEST_SCORES = np.array([0.1, 0.3, 0.45, 0.5, 0.35, 0.6, 0.7, 0.8])  # Youden on test would be 0.6


def _binary_row(**kw):
    args = dict(kind="binary", label_names=["normal", "pneumonia"], val_labels=VAL_LABELS, val_scores=VAL_SCORES,
                test_labels=TEST_LABELS, test_scores=TEST_SCORES, n_resamples=200, seed=0)
    args.update(kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # 8 test images: many redraws lack a class
        return evaluate_utility(**args)


def test_threshold_comes_from_validation_and_is_applied_unchanged_to_test():
    assert youden_threshold(TEST_LABELS, TEST_SCORES) == 0.6  # what a test-set choice would give (7/8 accuracy)
    row = _binary_row()
    assert row["threshold"] == 0.4
    # At 0.4 on test: positive calls 0.45, 0.5 (negatives: FP = 2), 0.6, 0.7, 0.8 (TP = 3); 0.35 is a FN;
    # 0.1, 0.3 are TN = 2.  accuracy = (3 + 2) / 8, sensitivity = 3 / 4, specificity = 2 / 4.
    assert row["test_accuracy"] == 5 / 8
    assert row["test_sensitivity"] == 3 / 4
    assert row["test_specificity"] == 2 / 4
    # On validation at 0.4: positives 0.4, 0.6, 0.9 all called (3 / 3); negatives 0.1, 0.2 cleared, 0.7 not (2 / 3).
    assert row["val_sensitivity"] == 1.0 and row["val_specificity"] == pytest.approx(2 / 3)


def _two_proportion_p(k1, n1, k2, n2):
    """Two-sided p of the pooled two-proportion z-test, by scipy's normal distribution."""
    from scipy.stats import norm

    pooled = (k1 + k2) / (n1 + n2)
    return 2 * norm.sf(abs(k1 / n1 - k2 / n2) / np.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2)))


def test_threshold_shift_p_is_the_bonferroni_two_proportion_test_of_the_rate_that_moved_most():
    row = _binary_row()
    # sensitivity 3/3 on validation against 3/4 on test; specificity 2/3 against 2/4 (test above)
    p = min(_two_proportion_p(3, 3, 3, 4), _two_proportion_p(2, 3, 2, 4))
    assert row["threshold_shift_p"] == pytest.approx(2 * p) and 2 * p == pytest.approx(0.6991, abs=1e-4)
    # A test set whose negatives all score above the threshold: specificity 1 on validation, 0 on test
    n = 200
    val_labels, val_scores = np.r_[np.zeros(n, int), np.ones(n, int)], np.r_[np.full(n, 0.1), np.full(n, 0.9)]
    row = _binary_row(val_labels=val_labels, val_scores=val_scores, test_labels=val_labels,
                      test_scores=np.full(2 * n, 0.95))
    assert row["val_specificity"] == 1.0 and row["test_specificity"] == 0.0 and row["threshold_shift_p"] < 1e-40
    # Validation and test the same images: no shift at all
    row = _binary_row(test_labels=VAL_LABELS, test_scores=VAL_SCORES)
    assert row["threshold_shift_p"] == 1.0


def test_binary_row_auroc_values_and_bookkeeping():
    row = _binary_row()
    # test pairs (16): positive 0.35 beats 0.1, 0.3 -> 2; 0.6, 0.7, 0.8 beat all 4 -> 12; total 14 / 16
    assert row["test_auroc"] == 14 / 16
    # validation pairs (9): 0.4 beats 0.1, 0.2 -> 2; 0.6 -> 2; 0.9 -> 3; total 7 / 9
    assert row["val_auroc"] == pytest.approx(7 / 9)
    assert (row["n_test"], row["n_resamples"], row["confidence"], row["bootstrap_seed"]) == (8, 200, 0.95, 0)
    assert not any(key.startswith("test_auroc[") for key in row)


def test_sensitivity_specificity_hand_counts_on_imbalanced_set():
    # threshold 0.5 from a separable validation set; test confusion: TP 2, FN 1, TN 4, FP 1
    val_labels, val_scores = np.array([0, 0, 1, 1]), np.array([0.2, 0.3, 0.5, 0.9])
    test_labels = np.array([1, 1, 1, 0, 0, 0, 0, 0])
    test_scores = np.array([0.9, 0.5, 0.49, 0.51, 0.4, 0.3, 0.2, 0.1])
    row = _binary_row(val_labels=val_labels, val_scores=val_scores, test_labels=test_labels, test_scores=test_scores)
    assert row["threshold"] == 0.5
    assert row["test_sensitivity"] == 2 / 3
    assert row["test_specificity"] == 4 / 5
    assert row["test_accuracy"] == 6 / 8


def test_binary_auroc_interval_is_the_bca_interval_of_sklearn_redraws(hand_bca):
    """End to end: the vectorised redraws equal scikit-learn on every redraw of the seeded bootstrap."""
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 2, 60)
    scores = np.round(np.clip(0.35 + 0.3 * labels + rng.normal(0, 0.2, 60), 0, 1), 1)
    row = evaluate_utility(interval="bca", kind="binary", label_names=["a", "b"], val_labels=labels, val_scores=scores,
                           test_labels=labels, test_scores=scores, n_resamples=150, seed=8)

    def auroc(i):
        return roc_auc_score(labels[i], scores[i]) if labels[i].min() != labels[i].max() else np.nan

    expected = hand_bca(auroc, [auroc(i) for i in bootstrap_indices(60, n_resamples=150, seed=8)], np.arange(60))
    assert (row["test_auroc_low"], row["test_auroc_high"]) == pytest.approx(tuple(expected), abs=1e-12)
    assert row["test_auroc"] == roc_auc_score(labels, scores)


def test_undefined_redraws_are_skipped_counted_and_warned_about():
    labels = np.array([1] + [0] * 9)  # one positive in 10: about (9/10)^10 = 35% of redraws miss it
    scores = np.linspace(0.9, 0.0, 10)
    idx = bootstrap_indices(10, n_resamples=400, seed=0)
    expected_undefined = int((~(idx == 0).any(axis=1)).sum())
    with pytest.warns(RuntimeWarning, match="redraws"):
        row = evaluate_utility(kind="binary", label_names=["a", "b"], val_labels=[0, 1], val_scores=[0.2, 0.8],
                               test_labels=labels, test_scores=scores, n_resamples=400, seed=0)
    assert row["test_auroc_undefined_redraws"] == expected_undefined > 40
    assert row["test_auroc"] == 1.0  # the point value is the whole test set's
    assert np.isfinite(row["test_auroc_low"]) and np.isfinite(row["test_sensitivity_low"])


NO_JACKKNIFE = np.empty(0)     # no jackknife values: acceleration 0


def test_the_warning_comes_above_a_tenth_of_undefined_redraws_not_at_it():
    assert UNDEFINED_REDRAWS_WARN_FRACTION == 0.10
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _estimate({}, "test_auroc", 0.5, (np.r_[np.full(10, np.nan), np.linspace(0, 1, 90)], NO_JACKKNIFE),
                  0.95)  # 10 of 100
    with pytest.warns(RuntimeWarning, match="11 of 100 .* the interval uses the other 89 and may be too narrow"):
        _estimate({}, "test_auroc", 0.5, (np.r_[np.full(11, np.nan), np.linspace(0, 1, 89)], NO_JACKKNIFE), 0.95)


def test_where_no_redraw_is_defined_the_warning_says_there_is_no_interval():
    """Before: "the interval uses the other 0 and may be too narrow", of an interval that is nan at both ends."""
    row: dict = {}
    with pytest.warns(RuntimeWarning, match=r"100 of 100 .* \(one class only\); it has no interval\. The point"):
        _estimate(row, "test_auroc", 0.5, (np.full(100, np.nan), NO_JACKKNIFE), 0.95)
    assert np.isnan(row["test_auroc_low"]) and np.isnan(row["test_auroc_high"])


def test_no_warning_when_redraws_are_defined():
    rng = np.random.default_rng(0)
    labels = np.tile([0, 1], 100)
    scores = rng.random(200)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        evaluate_utility(kind="binary", label_names=["a", "b"], val_labels=labels, val_scores=scores,
                         test_labels=labels, test_scores=scores, n_resamples=100, seed=0)


def test_binary_errors_say_what_is_wrong():
    with pytest.raises(ValueError, match="positives and negatives"):  # validation has one class
        _binary_row(val_labels=np.zeros(6, dtype=int))
    with pytest.raises(ValueError, match="^test AUROC is undefined: .* among the 8 images of the test set$"):
        _binary_row(test_labels=np.ones(8, dtype=int))                # test has one class
    with pytest.raises(ValueError, match="^train AUROC is undefined: .* among the 8 images of the training set$"):
        _binary_row(test_labels=np.ones(8, dtype=int), split="train")  # the private training-set metrics: named so
    with pytest.raises(ValueError, match="two class names"):
        _binary_row(label_names=["pneumonia"])
    with pytest.raises(ValueError, match="kind must be one of"):
        _binary_row(kind="Binary")
    with pytest.raises(ValueError, match="confidence"):
        _binary_row(confidence=95)


# --------------------------------------------------------------------------------------- multiclass and multilabel


def test_multiclass_row_against_sklearn_and_hand_accuracy():
    labels = np.array([0, 1, 2, 2, 1, 0])
    scores = np.array([[0.7, 0.2, 0.1],  # right
                       [0.2, 0.5, 0.3],  # right
                       [0.1, 0.3, 0.6],  # right
                       [0.5, 0.1, 0.4],  # wrong (argmax 0)
                       [0.3, 0.3, 0.4],  # wrong (argmax 2)
                       [0.6, 0.3, 0.1]])  # right
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        row = evaluate_utility(kind="multiclass", label_names=["grade0", "grade1", "grade2"], val_labels=labels,
                               val_scores=scores, test_labels=labels, test_scores=scores, n_resamples=100, seed=0)
    assert row["test_accuracy"] == 4 / 6
    assert row["test_auroc"] == pytest.approx(roc_auc_score(labels, scores, multi_class="ovr"), abs=1e-12)
    for k, name in enumerate(["grade0", "grade1", "grade2"]):
        assert row[f"test_auroc[{name}]"] == pytest.approx(roc_auc_score(labels == k, scores[:, k]), abs=1e-12)
    assert "threshold" not in row


def test_multilabel_accuracy_at_each_labels_validation_threshold():
    # label A: validation threshold 0.5; label B: validation threshold 0.3
    val_labels = np.array([[0, 0], [0, 1], [1, 0], [1, 1]])
    val_scores = np.array([[0.2, 0.1], [0.4, 0.3], [0.5, 0.2], [0.8, 0.9]])
    test_labels = np.array([[1, 0], [0, 1], [1, 1], [0, 0]])
    test_scores = np.array([[0.6, 0.35],  # A: 1 right; B: 0.35 >= 0.3 -> 1, wrong
                            [0.45, 0.2],  # A: 0 right; B: 0 wrong
                            [0.4, 0.31],  # A: 0 wrong; B: 1 right
                            [0.55, 0.1]])  # A: 1 wrong; B: 0 right
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        row = evaluate_utility(kind="multilabel", label_names=["A", "B"], val_labels=val_labels, val_scores=val_scores,
                               test_labels=test_labels, test_scores=test_scores, n_resamples=100, seed=0)
    assert (row["threshold[A]"], row["threshold[B]"]) == (0.5, 0.3)
    assert row["test_accuracy"] == pytest.approx((2 / 4 + 2 / 4) / 2)  # A: 2 of 4 right, B: 2 of 4 right
    assert row["test_auroc[A]"] == pytest.approx(roc_auc_score(test_labels[:, 0], test_scores[:, 0]))
    assert row["test_auroc"] == pytest.approx(roc_auc_score(test_labels, test_scores, average="macro"))


def test_multilabel_row_macro_against_sklearn_on_random_data():
    rng = np.random.default_rng(5)
    labels = (rng.random((300, 4)) < 0.3).astype(np.float32)
    scores = np.clip(0.3 + 0.25 * labels + rng.normal(0, 0.2, labels.shape), 0, 1)
    row = evaluate_utility(kind="multilabel", label_names=["a", "b", "c", "d"], val_labels=labels, val_scores=scores,
                           test_labels=labels, test_scores=scores, n_resamples=200, seed=0)
    assert row["test_auroc"] == pytest.approx(roc_auc_score(labels, scores, average="macro"), abs=1e-12)
    assert row["test_auroc_low"] < row["test_auroc"] < row["test_auroc_high"]


def test_multilabel_label_without_validation_positives_is_an_error_naming_it():
    labels = np.array([[0, 0], [1, 0], [0, 0], [1, 0]])
    scores = np.full((4, 2), 0.5)
    with pytest.raises(ValueError, match="'effusion'"):
        evaluate_utility(kind="multilabel", label_names=["mass", "effusion"], val_labels=labels, val_scores=scores,
                         test_labels=labels, test_scores=scores, n_resamples=10, seed=0)


@pytest.mark.parametrize("kind, names, labels, scores, words", [
    # a 1-based label file: class 3 has no score column, and would count as a negative of every class
    ("multiclass", ["a", "b", "c"], np.array([0, 1, 2, 3]), np.full((4, 3), 1 / 3), r"class indices 0\.\.2"),
    # a missing finding coded -1 (or uncertain coded 2) would be scored as a negative
    ("multilabel", ["a", "b"], np.array([[0, 1], [1, 0], [-1, 1], [1, 0]]), np.full((4, 2), 0.5), "0 or 1"),
    ("multilabel", ["a", "b"], np.array([[0, 1], [1, 0], [2, 1], [1, 0]]), np.full((4, 2), 0.5), "0 or 1"),
    # names that do not match the score columns would drop or misname per-class columns
    ("multiclass", ["a", "b"], np.array([0, 1, 2, 1]), np.full((4, 3), 1 / 3), "3 columns for 2 label_names"),
    ("multilabel", ["a", "b", "c"], np.array([[0, 1], [1, 0], [0, 1], [1, 0]]), np.full((4, 2), 0.5),
     "2 columns for 3 label_names"),
    # two labels of one name would write one column twice
    ("multilabel", ["x", "x"], np.array([[0, 1], [1, 0], [0, 1], [1, 0]]), np.full((4, 2), 0.5), "distinct"),
])
def test_labels_outside_the_task_and_names_that_do_not_fit_the_scores_are_refused(kind, names, labels, scores, words):
    with pytest.raises(ValueError, match=words):
        evaluate_utility(kind=kind, label_names=names, val_labels=labels, val_scores=scores, test_labels=labels,
                         test_scores=scores, n_resamples=10, seed=0)


@pytest.mark.parametrize("kind, names, val, val_scores, test, test_scores, words", [
    # binary scores as two class-probability columns [N, 2] instead of P(class 1) [N]
    ("binary", ["a", "b"], [0, 1, 0, 1], [0.2, 0.8, 0.3, 0.7], [0, 1, 0, 1], np.full((4, 2), 0.5), "must both be"),
    # validation scores with a column fewer than test: the last finding would get no validation threshold of its own
    ("multilabel", ["a", "b"], np.array([[0], [1], [0], [1]]), np.array([[0.2], [0.8], [0.3], [0.7]]),
     np.array([[0, 1], [1, 0], [0, 1], [1, 0]]), np.full((4, 2), 0.5), "1 and 2 columns"),
    # one score row more than labels: the rows no longer pair an image with its label
    ("multiclass", ["a", "b"], [0, 1, 0, 1], np.full((4, 2), 0.5), [0, 1, 0, 1], np.full((5, 2), 0.5), "shapes"),
])
def test_scores_that_do_not_fit_their_labels_are_refused(kind, names, val, val_scores, test, test_scores, words):
    with pytest.raises(ValueError, match=words):
        evaluate_utility(kind=kind, label_names=names, val_labels=val, val_scores=val_scores, test_labels=test,
                         test_scores=test_scores, n_resamples=10, seed=0)


@pytest.mark.parametrize("missing", [-1, 2])
def test_a_multilabel_test_label_not_resolved_upstream_is_refused_even_where_validation_is_clean(missing):
    """Validation's labels are all 0 or 1 (its thresholds can be chosen); one test finding coded -1 (missing) or 2
    (uncertain) would otherwise be scored as a negative."""
    val = np.array([[0, 1], [1, 0], [0, 1], [1, 0]])
    test = val.copy()
    test[2, 0] = missing
    scores = np.array([[0.2, 0.7], [0.8, 0.3], [0.4, 0.6], [0.6, 0.1]])
    with pytest.raises(ValueError, match="test: multilabel labels must be 0 or 1"):
        evaluate_utility(kind="multilabel", label_names=["a", "b"], val_labels=val, val_scores=scores,
                         test_labels=test, test_scores=scores, n_resamples=10, seed=0)


@pytest.mark.parametrize("confidence", [0, 0.0, 1, 1.0, -0.5, float("nan")])
def test_a_confidence_that_gives_no_interval_is_refused(confidence):
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        _binary_row(confidence=confidence)


@pytest.mark.parametrize("kind, labels, scores, words", [
    ("binary", [], [], "auroc: no samples"),
    ("multiclass", np.zeros(0, int), np.zeros((0, 3)), "auroc: no samples"),
    ("multilabel", np.zeros((0, 2), int), np.zeros((0, 2)), "auroc: no samples"),
    ("multiclass", [0, 1, 2], [[0.5, 0.5, 0.0], [np.nan, 0.5, 0.5], [0.0, 0.0, 1.0]], "auroc: 1 scores are nan"),
    ("multilabel", [[0, 1], [1, 0]], [[0.2, np.inf], [0.8, -np.inf]], "auroc: 2 scores are nan or infinite"),
    # a multilabel task handed one finding as a flat column: [N] is a binary task's shape, not [N, L]
    ("multilabel", [0, 1], [0.2, 0.8], r"must both be \[N, L\]; got shapes \(2,\) and \(2,\)"),
])
def test_auroc_refuses_an_empty_set_non_finite_scores_and_a_flat_multilabel_array(kind, labels, scores, words):
    with pytest.raises(ValueError, match=words):
        auroc(labels, scores, kind=kind)


def test_an_empty_validation_split_is_named():
    with pytest.raises(ValueError, match="validation: no samples"):
        _binary_row(val_labels=np.zeros(0, int), val_scores=np.zeros(0))


def test_a_test_set_of_one_patient_is_warned_of_its_zero_width_intervals():
    """Before: a test set of one patient gave intervals such as 0.750 [0.750, 0.750] without a word: every redraw
    draws that patient, so the interval measures nothing, and reads as certainty."""
    with pytest.warns(RuntimeWarning, match="the test set holds one patient: every bootstrap redraw is the whole"):
        row = evaluate_utility(kind="binary", label_names=["a", "b"], val_labels=[0, 1], val_scores=[0.2, 0.8],
                               test_labels=[0, 1, 0, 1], test_scores=[0.2, 0.7, 0.6, 0.4], n_resamples=50, seed=0,
                               test_patient_ids=["p"] * 4)
    assert row["test_auroc_low"] == row["test_auroc_high"] == row["test_auroc"] == 0.75
