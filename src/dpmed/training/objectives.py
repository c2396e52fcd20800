"""Loss and output scores per task kind (a registry, not an if-ladder).

binary and multiclass: softmax over K outputs with cross-entropy (binary has K = 2, so Grad-CAM and the
faithfulness metrics of 001_d0483fd35863b74c.txt read a softmax score, METHODS.md s.6); the score of a binary model
is P(class 1). multilabel: one sigmoid per finding with binary cross-entropy (003_9a91354dc2d7e2df.txt).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["Objective", "OBJECTIVES"]


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
