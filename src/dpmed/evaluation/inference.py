"""A model's scores on a set of images, in eval mode: what the evaluation measures (`dpmed.evaluation.predictions`
keeps them) and what the privacy audit ranks its canaries by. Apart from the predictions' file format so that
reading a finished run's predictions (`dpmed report`) needs no torch."""

from __future__ import annotations

import logging
from typing import Callable

import numpy as np
import torch
from torch import nn

from dpmed.data import ImageSet, Task
from dpmed.data.pace import Pace
from dpmed.training import OBJECTIVES

__all__ = ["predict", "predict_logits", "scored_at_once"]

_log = logging.getLogger(__name__)

# Pixels scored at once, 32 images at 224 px: a progress line can come only between chunks, and a chunk of 256
# images at 224 px (a ResNet-18 on a CPU) took minutes, so a set of 256 images or fewer scored with no line at all.
# At most 256 images: 32 images of 28 or 64 px made ScatterNet's scoring slower (its scattering pays per call;
# benchmarks/RESULTS.md, "Scoring chunks"), where 256 of them take seconds.
_PIXELS_AT_ONCE = 32 * 224 * 224
_MOST_AT_ONCE = 256


def scored_at_once(image_shape: tuple[int, ...]) -> int:
    """Images scored in one chunk, for images of ``image_shape`` (C, H, W): what the image size alone sets."""
    return max(1, min(_MOST_AT_ONCE, _PIXELS_AT_ONCE // (image_shape[-2] * image_shape[-1])))


def predict(model: nn.Module, data: ImageSet, task: Task, *, batch_size: int | None = None,
            device: torch.device | None = None, label: str | None = None, what: str = "images",
            pace: Pace | None = None) -> np.ndarray:
    """Scores as the evaluation expects them: binary [N] = P(class 1), multiclass [N, K], multilabel [N, L].

    From the logits in float64: a float32 softmax is exactly 1 from a logit margin of about 17, so a confident
    model's positives and its confident false positives tied there, and AUROC and the Youden threshold read the
    rounding, not the model (the non-private arm, confident most often, most of all). In float64 the ties begin at a
    margin of about 37. The model is put in eval mode for the pass and returned to the mode it was in.

    With ``label`` (the run), progress lines as ``label``'s, naming ``what`` is scored ("test images"), as the data
    layer's long loops log theirs (`dpmed.data.pace`): at 224 px a run's validation and test sets take minutes to
    score on a CPU, which a silent terminal shows as a hang. Shares of the work and times only, never a count; the
    shares still tell how many chunks a set took, so scoring the training images (``evaluation.training_metrics``)
    tells their number to within a chunk: no more than the log, private, holds exactly (`dpmed.study`'s "data:"
    line). ``pace``: the run's
    scoring so far (`Pace.again`), so that a validation and a test set each scored within the interval still
    draw a line. ``batch_size``: images per chunk; by default `scored_at_once`.
    """
    scores = _outputs(model, data, batch_size, device,
                      lambda out: OBJECTIVES[task.kind].scores(out.double()).cpu().numpy(), label, what, pace)
    return np.concatenate(scores).astype(np.float64)


def predict_logits(model: nn.Module, data: ImageSet, *, batch_size: int | None = None,
                   device: torch.device | None = None) -> np.ndarray:
    """The model's raw outputs, float64 [N, K] (binary: K = 2 softmax logits), for scores that must not saturate:
    a float32 probability of a well-fitted example rounds to exactly 1, and its log-likelihood to a tie (the
    privacy audit ranks canaries by it). Eval mode for the pass, then the mode the model was in."""
    return np.concatenate(_outputs(model, data, batch_size, device, lambda out: out.double().cpu().numpy()))


@torch.no_grad()
def _outputs(model: nn.Module, data: ImageSet, batch_size: int | None, device: torch.device | None,
             convert: Callable[[torch.Tensor], np.ndarray], label: str | None = None,
             what: str = "images", pace: Pace | None = None) -> list[np.ndarray]:
    """``convert`` of the model's output on each chunk of at most ``batch_size`` images, in eval mode; the model
    goes back to the mode it was in. With ``label``, a paced progress line after a chunk (:func:`predict`)."""
    device = device or next(model.parameters()).device
    was_training = model.training
    model.eval()
    batch_size = batch_size or scored_at_once(data.images.shape)
    chunks = np.array_split(data.images, max(1, int(np.ceil(len(data) / batch_size))))
    if pace is None:
        pace = Pace(_log)
    else:
        pace.again()
    out = []
    try:
        for i, chunk in enumerate(chunks):
            out.append(convert(model(torch.from_numpy(chunk).to(device))))
            if label is not None:
                share = (i + 1) / len(chunks)
                pace.log(share, "%s: %s %.0f %% scored", label, what, 100 * share)
        return out
    finally:
        model.train(was_training)
