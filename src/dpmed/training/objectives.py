"""Loss and output scores per task kind (a registry, not an if-ladder).

binary and multiclass: softmax over K outputs with cross-entropy (binary has K = 2, so Grad-CAM and the
faithfulness metrics of 001_d0483fd35863b74c.txt read a softmax score, METHODS.md s.6); the score of a binary model
is P(class 1). multilabel: one sigmoid per finding with binary cross-entropy (003_9a91354dc2d7e2df.txt), weighted
by inverse class frequency where :func:`objective_for` is given the training labels.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["Objective", "OBJECTIVES", "objective_for", "positive_weights"]


@dataclass(frozen=True)
class Objective:
    """loss(logits, targets, reduction) and scores(logits) -> probabilities as the evaluation expects them."""

    loss: Callable[..., Tensor]
    scores: Callable[[Tensor], Tensor]
    target_dtype: torch.dtype


OBJECTIVES: dict[str, Objective] = {
    "binary": Objective(F.cross_entropy, lambda z: z.softmax(dim=1)[:, 1], torch.int64),          # [B]
    "multiclass": Objective(F.cross_entropy, lambda z: z.softmax(dim=1), torch.int64),            # [B, K]
    "multilabel": Objective(F.binary_cross_entropy_with_logits, torch.sigmoid, torch.float32),    # [B, L]
}


def positive_weights(train_labels: np.ndarray) -> Tensor:
    """BCE pos_weight per finding = negatives / positives in the training labels (0/1 [N, L]): float32 [L].

    Inverse class frequency: a finding present in 5% of images weighs its positives 19 times, so that the rare
    findings of a chest X-ray table are not learned as "always absent". A finding with no positive gets weight
    N (it only ever multiplies positive terms, so it has no effect until a positive appears).
    """
    y = np.asarray(train_labels, dtype=np.float64)
    if y.ndim != 2 or not np.isin(y, (0.0, 1.0)).all():
        raise ValueError(f"positive_weights: training labels must be 0/1 [N, L], got shape {y.shape}")
    positives = y.sum(axis=0)  # [L]
    return torch.as_tensor((len(y) - positives) / np.maximum(positives, 1.0), dtype=torch.float32)


def objective_for(kind: str, *, train_labels: np.ndarray | None = None) -> Objective:
    """The objective of ``kind``; multilabel with ``train_labels`` weights BCE by :func:`positive_weights`.

    Privacy: the weights are a statistic of the training labels. Under DP-SGD every example's gradient would then
    depend on the other examples' labels, outside the clipping and the accountant, so callers pass
    ``train_labels=None`` for DP-SGD (plain BCE). Non-private and local DP arms (which release labels in the
    clear) may use them.
    """
    base = OBJECTIVES[kind]
    if kind != "multilabel" or train_labels is None:
        return base

    def weighted(logits: Tensor, targets: Tensor, reduction: str = "mean") -> Tensor:
        return F.binary_cross_entropy_with_logits(logits, targets, reduction=reduction,
                                                  pos_weight=weights.to(logits.device))

    weights = positive_weights(train_labels)  # [L]
    return replace(base, loss=weighted)
