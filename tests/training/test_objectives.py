"""Multilabel BCE weighted by inverse class frequency (pos_weight from the training labels), on hand-computed inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from dpmed.training.objectives import OBJECTIVES, objective_for, positive_weights


def test_positive_weights_are_negatives_over_positives():
    labels = np.array([[1, 0], [0, 0], [1, 1], [0, 0]], dtype=np.float32)  # positives 2, 1; negatives 2, 3
    torch.testing.assert_close(positive_weights(labels), torch.tensor([1.0, 3.0]))
    torch.testing.assert_close(positive_weights(np.zeros((3, 1))), torch.tensor([3.0]))  # no positive: weight N
    with pytest.raises(ValueError, match="0/1"):
        positive_weights(np.array([[2.0]]))


def test_weighted_bce_by_hand():
    labels = np.array([[1, 0], [0, 0], [1, 1], [0, 0]], dtype=np.float32)
    objective = objective_for("multilabel", train_labels=labels)
    logits = torch.zeros(2, 2)
    targets = torch.tensor([[1.0, 1.0], [0.0, 0.0]])
    # At logit 0 every term is ln 2 times its weight: positives weigh 1 and 3, negatives 1 -> mean (1 + 3 + 1 + 1)/4
    assert objective.loss(logits, targets).item() == pytest.approx(math.log(2) * 6 / 4)
    assert objective.loss(logits, targets, reduction="sum").item() == pytest.approx(math.log(2) * 6)
    assert objective.scores is OBJECTIVES["multilabel"].scores


def test_unweighted_where_no_labels_are_given():
    assert objective_for("multilabel") is OBJECTIVES["multilabel"]  # DP-SGD: plain BCE (see objective_for)
    assert objective_for("binary", train_labels=np.array([0, 1])) is OBJECTIVES["binary"]
