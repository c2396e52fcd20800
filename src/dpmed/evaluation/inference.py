"""A model's scores on a set of images, in eval mode: what the evaluation measures (`dpmed.evaluation.predictions`
keeps them) and what the privacy audit ranks its canaries by. Apart from the predictions' file format so that
reading a finished run's predictions (`dpmed report`) needs no torch."""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch
from torch import nn

from dpmed.data import ImageSet, Task
from dpmed.training import OBJECTIVES

__all__ = ["predict", "predict_logits"]


def predict(model: nn.Module, data: ImageSet, task: Task, *, batch_size: int = 256,
            device: torch.device | None = None) -> np.ndarray:
    """Scores as the evaluation expects them: binary [N] = P(class 1), multiclass [N, K], multilabel [N, L].

    From the logits in float64: a float32 softmax is exactly 1 from a logit margin of about 17, so a confident
    model's positives and its confident false positives tied there, and AUROC and the Youden threshold read the
    rounding, not the model (the non-private arm, confident most often, most of all). In float64 the ties begin at a
    margin of about 37. The model is put in eval mode for the pass and returned to the mode it was in.
    """
    scores = _outputs(model, data, batch_size, device,
                      lambda out: OBJECTIVES[task.kind].scores(out.double()).cpu().numpy())
    return np.concatenate(scores).astype(np.float64)


def predict_logits(model: nn.Module, data: ImageSet, *, batch_size: int = 256,
                   device: torch.device | None = None) -> np.ndarray:
    """The model's raw outputs, float64 [N, K] (binary: K = 2 softmax logits), for scores that must not saturate:
    a float32 probability of a well-fitted example rounds to exactly 1, and its log-likelihood to a tie (the
    privacy audit ranks canaries by it). Eval mode for the pass, then the mode the model was in."""
    return np.concatenate(_outputs(model, data, batch_size, device, lambda out: out.double().cpu().numpy()))


@torch.no_grad()
def _outputs(model: nn.Module, data: ImageSet, batch_size: int, device: torch.device | None,
             convert: Callable[[torch.Tensor], np.ndarray]) -> list[np.ndarray]:
    """``convert`` of the model's output on each chunk of at most ``batch_size`` images, in eval mode; the model
    goes back to the mode it was in."""
    device = device or next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        return [convert(model(torch.from_numpy(chunk).to(device)))
                for chunk in np.array_split(data.images, max(1, int(np.ceil(len(data) / batch_size))))]
    finally:
        model.train(was_training)
