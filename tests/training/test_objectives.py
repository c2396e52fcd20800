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


def test_scores_are_the_probabilities_the_evaluation_reads_by_hand():
    """binary: P(class 1) of a softmax over two outputs (logits 0 and ln 3: 3/4; equal logits: 1/2, where a sigmoid of
    the second logit would give 0.73); multiclass: each row a softmax over its classes; multilabel: one sigmoid per
    finding (0 and ln 3: 1/2 and 3/4, not a softmax across findings). P(class 0) in place of P(class 1) would invert
    every AUROC."""
    ln3 = math.log(3.0)
    binary = OBJECTIVES["binary"].scores(torch.tensor([[0.0, ln3], [1.0, 1.0]]))
    torch.testing.assert_close(binary, torch.tensor([0.75, 0.5]))
    multiclass = OBJECTIVES["multiclass"].scores(torch.tensor([[0.0, 0.0], [0.0, ln3]]))
    torch.testing.assert_close(multiclass, torch.tensor([[0.5, 0.5], [0.25, 0.75]]))
    multilabel = OBJECTIVES["multilabel"].scores(torch.tensor([[0.0, ln3]]))
    torch.testing.assert_close(multilabel, torch.tensor([[0.5, 0.75]]))


def test_cross_entropy_by_hand():
    """Three equal logits, target 0: ln 3; logits (ln 3, 0), target 0: -ln(3/4) = ln(4/3). No smoothing, no weights."""
    for kind in ("binary", "multiclass"):
        loss = OBJECTIVES[kind].loss
        assert loss(torch.zeros(1, 3), torch.tensor([0])).item() == pytest.approx(math.log(3.0), rel=1e-6)
        assert loss(torch.tensor([[math.log(3.0), 0.0]]), torch.tensor([0])).item() == pytest.approx(
            math.log(4 / 3), rel=1e-6)


def test_positive_weights_refuse_any_label_outside_zero_and_one():
    with pytest.raises(ValueError, match="0/1"):
        positive_weights(np.array([[0.0], [2.0]]))        # one bad label among good ones
    with pytest.raises(ValueError, match=r"\[N, L\], got shape \(3,\)"):
        positive_weights(np.array([0.0, 1.0, 1.0]))        # a binary task's labels, not one column per finding
