"""evaluate_utility says how many classes a model's test decisions use, so that a model predicting one class for every
image (accuracy = that class's share, sensitivity or specificity 0) is flagged rather than read as a weak model."""

from __future__ import annotations

import numpy as np

from dpmed.evaluation.utility import evaluate_utility

RNG = np.random.default_rng(0)
Y_VAL, Y = np.r_[np.zeros(20, int), np.ones(20, int)], np.r_[np.zeros(30, int), np.ones(30, int)]


def _binary(test_scores):
    val_scores = np.clip(0.5 * Y_VAL + 0.5 * RNG.random(40), 0, 1)          # a threshold somewhere in (0, 1)
    return evaluate_utility(kind="binary", label_names=["normal", "pneumonia"], val_labels=Y_VAL,
                            val_scores=val_scores, test_labels=Y, test_scores=test_scores, n_resamples=20)


def test_binary_model_deciding_one_class_for_every_test_image():
    constant = _binary(np.full(60, 0.01))                                     # below any validation threshold
    assert constant["test_predicted_classes"] == 1
    assert (constant["test_sensitivity"], constant["test_specificity"]) == (0.0, 1.0)
    assert _binary(np.clip(0.5 * Y + 0.5 * RNG.random(60), 0, 1))["test_predicted_classes"] == 2


def test_multiclass_counts_argmax_classes_and_multilabel_counts_constant_findings():
    y3 = np.arange(30) % 3
    one = np.tile([0.2, 0.5, 0.3], (30, 1))                                  # argmax 1 for every image
    row = evaluate_utility(kind="multiclass", label_names=["a", "b", "c"], val_labels=y3, val_scores=one,
                           test_labels=y3, test_scores=one, n_resamples=20)
    assert row["test_predicted_classes"] == 1
    y = np.c_[np.arange(40) % 2, (np.arange(40) // 2) % 2, (np.arange(40) // 4) % 2]
    s = np.c_[0.3 + 0.4 * y[:, 0], np.full(40, 0.5), 0.2 + 0.5 * y[:, 2]]   # finding 1: the same score for all
    row = evaluate_utility(kind="multilabel", label_names=["f0", "f1", "f2"], val_labels=y, val_scores=s,
                           test_labels=y, test_scores=s, n_resamples=20)
    assert row["test_constant_labels"] == 1                                   # f1, not the two findings decided
