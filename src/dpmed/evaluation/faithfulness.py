"""How faithful a class activation map is to the model it explains (METHODS.md sec. 6; 001_d0483fd35863b74c.txt):
pure functions of scores, CAMs and masks, per image, and their means with bootstrap intervals.

* Y = softmax score of the explained class c on the image I, O = the same on the masked input E = L * I (in
  [0, 1] pixel space, before any normalisation), per image; then over the explained images
  ``average_drop`` = 100 mean(max(0, Y - O) / Y) (lower is better, Chattopadhay et al. 2018),
  ``increase_in_confidence`` = 100 mean(1[Y < O]) (higher is better), and
  ``masked_input_score`` = 100 mean(O / Y): our operational definition of 001's "average normalised input score",
  which that paper does not define; labelled so wherever it is shown. Not pytorch-grad-cam's ``DropInConfidence``
  (1.5.7): it masks the normalised model input, not the [0, 1] pixels, and returns max(0, Y - O) without the 1/Y.
* A second view, less sensitive to the multiplicative masking: deletion and insertion AUC (Petsiuk et al. 2018,
  RISE). Pixels are removed from (deletion) or restored into (insertion) a black image in order of decreasing CAM,
  in ``steps`` equal fractions, and the area under the class-c score curve over the fraction is taken (trapezoid).
  Low deletion AUC and high insertion AUC mean the CAM ranks the pixels that matter first. pytorch-grad-cam has no
  such curve (its ROAD imputes the removed pixels from their neighbours instead of a fixed baseline).
* Where ground-truth lesion masks exist (the phantom): the share of CAM energy inside the mask, sum(L M) / sum(L)
  (an all-zero CAM scores 0; a uniform one the mask's share of the image, :func:`mask_area_share`, the chance
  level), and the pointing game (Zhang et al. 2018): a hit when the peak of L lies in the mask (optionally within
  ``tolerance`` pixels of it; an all-zero CAM points nowhere and misses).

Every mean has a percentile bootstrap interval at the study's confidence level (``evaluation.confidence``, 95%
by default) over seeded redraws of the explained images, or of their
patients where patient ids are known (:func:`mean_with_interval`, on the per-image count redraws of
:mod:`dpmed.evaluation.weighted`).
"""

from __future__ import annotations

import logging
from typing import Callable, Sequence

import numpy as np

from dpmed.data.pace import Pace
from dpmed.evaluation.bootstrap import bootstrap_redraws
from dpmed.evaluation.summaries import MeanEstimate
from dpmed.evaluation.weighted import estimate, evaluate_redraws, weighted_mean

__all__ = ["METRIC_LABELS", "average_drop", "increase_in_confidence", "masked_input_score", "mask_energy",
           "mask_area_share", "pointing_game", "deletion_insertion", "mean_with_interval"]

_log = logging.getLogger(__name__)

METRIC_LABELS = {
    "average_drop": "Average Drop % (lower is better)",
    "increase_in_confidence": "Increase in Confidence % (higher is better)",
    "masked_input_score": "masked-input score % (mean O/Y; our operational definition of 001's 'average "
                          "normalised input score')",
    "deletion_auc": "deletion AUC (lower is better)",
    "insertion_auc": "insertion AUC (higher is better)",
    "mask_energy": "share of CAM energy inside the lesion mask",
    "pointing_game": "pointing-game hit rate",
}


def _ratio(y, o) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(y, dtype=np.float64)
    o = np.asarray(o, dtype=np.float64)
    if y.shape != o.shape or y.ndim != 1:
        raise ValueError(f"Y and O must both be [N], got {y.shape} and {o.shape}")
    if np.any(y <= 0):
        raise ValueError("Y (the class score on the unmasked image) must be > 0: softmax scores always are")
    return y, o


def average_drop(y, o) -> np.ndarray:
    """Per image 100 max(0, Y - O) / Y; its mean is Average Drop % (Chattopadhay et al. 2018)."""
    y, o = _ratio(y, o)
    return 100.0 * np.maximum(0.0, y - o) / y


def increase_in_confidence(y, o) -> np.ndarray:
    """Per image 100 1[Y < O]; its mean is Increase in Confidence %."""
    y, o = _ratio(y, o)
    return 100.0 * (y < o).astype(np.float64)


def masked_input_score(y, o) -> np.ndarray:
    """Per image 100 O / Y; its mean is our masked-input score % (001's undefined 'average normalised input score')."""
    y, o = _ratio(y, o)
    return 100.0 * o / y


def mask_energy(cams, masks) -> np.ndarray:
    """Per image sum(L M) / sum(L): the share of CAM energy inside the mask (cams [N, H, W] >= 0, masks bool
    [N, H, W]); nan for an empty mask (nothing to find).

    An all-zero CAM (Grad-CAM's ReLU removed everything: no evidence for the class anywhere) scores 0, not nan: it
    found none of the lesion, and dropping it would flatter exactly the noisy DP models whose maps die. A uniform
    CAM scores the mask's share of the image (:func:`mask_area_share`), the chance level to read this against.
    """
    cams = np.asarray(cams, dtype=np.float64)
    masks = np.asarray(masks, dtype=bool)
    if cams.shape != masks.shape or cams.ndim != 3:
        raise ValueError(f"cams and masks must both be [N, H, W], got {cams.shape} and {masks.shape}")
    total = cams.sum(axis=(1, 2))                                                # [N]
    inside = (cams * masks).sum(axis=(1, 2))                                     # [N]
    share = np.where(total > 0, inside / np.where(total > 0, total, 1.0), 0.0)
    return np.where(masks.any(axis=(1, 2)), share, np.nan)


def mask_area_share(masks) -> np.ndarray:
    """Per image |M| / (H W): the mask energy of a uniform CAM (chance level); nan for an empty mask."""
    masks = np.asarray(masks, dtype=bool)
    area = masks.mean(axis=(1, 2))
    return np.where(area > 0, area, np.nan)


def pointing_game(cams, masks, *, tolerance: float = 0.0) -> np.ndarray:
    """Per image 1.0 when the CAM's peak lies within ``tolerance`` pixels of the mask, else 0.0 (Zhang et al. 2018,
    who allow 15 px at 224 px); an all-zero CAM points nowhere and misses; nan for an empty mask.

    The peak is the centroid (rounded) of the maximal pixels: one pixel for a peaked map, the centre of a plateau
    where bilinear upsampling of a coarse map leaves one at the border, and the image centre for a flat map, so a
    map without a preference cannot hit by having its maximum everywhere."""
    from scipy.ndimage import distance_transform_edt

    cams = np.asarray(cams, dtype=np.float64)
    masks = np.asarray(masks, dtype=bool)
    if cams.shape != masks.shape or cams.ndim != 3:
        raise ValueError(f"cams and masks must both be [N, H, W], got {cams.shape} and {masks.shape}")
    out = np.full(len(cams), np.nan)
    for i, (cam, mask) in enumerate(zip(cams, masks)):
        if not mask.any():
            continue
        near = mask if tolerance <= 0 else distance_transform_edt(~mask) <= tolerance
        peak = cam.max()
        if peak <= 0:
            out[i] = 0.0
            continue
        rows, cols = np.nonzero(cam == peak)
        out[i] = float(near[int(np.rint(rows.mean())), int(np.rint(cols.mean()))])
    return out


def deletion_insertion(score_fn: Callable[[np.ndarray], np.ndarray], images: np.ndarray, cams: np.ndarray,
                       targets: Sequence[int] | np.ndarray, *, steps: int = 16, baseline: float = 0.0,
                       batch_size: int = 128, label: str = "explanations"):
    """(deletion AUC [N], insertion AUC [N], deletion curve [N, steps+1], insertion curve [N, steps+1]).

    Pixels (all channels of a location) are ranked by decreasing CAM (ties by position: a stable sort). At step
    k = 0..steps the top round(k P / steps) of the P locations are set to ``baseline`` (deletion), or are the only
    ones taken from the image on a ``baseline`` canvas (insertion). ``score_fn`` maps images [B, C, H, W] in [0, 1]
    to class scores [B, K]; image i is read at class ``targets[i]``. AUC: trapezoid over the fraction k / steps.
    Each image costs 2 (steps + 1) forward passes, minutes for 64 images at 224 px: progress lines as ``label``'s
    (`dpmed.data.pace`), so that a run's evaluation is not minutes of silence.
    """
    images = np.asarray(images, dtype=np.float32)
    n, _c, h, w = images.shape
    p = h * w
    order = np.argsort(-np.asarray(cams, dtype=np.float64).reshape(n, p), axis=1, kind="stable")   # [N, P]
    rank = np.empty_like(order)
    rank[np.arange(n)[:, None], order] = np.arange(p)[None, :]                  # rank of each location
    counts = np.rint(np.arange(steps + 1) * p / steps).astype(np.int64)           # locations changed at step k
    classes = np.asarray(targets, dtype=np.int64)                                 # [N]
    curves = np.empty((n, steps + 1, 2))
    per_chunk = max(1, batch_size // (2 * (steps + 1)))                          # images whose variants fit a batch
    pace = Pace(_log)
    for start in range(0, n, per_chunk):
        pace.log(start / n, "%s: deletion and insertion curves of %d of %d explained images", label, start, n)
        sl = slice(start, start + per_chunk)
        img, chosen_rank = images[sl], rank[sl]
        variants = []
        for k in counts:
            chosen = (chosen_rank < k).reshape(len(img), 1, h, w)                # [b, 1, H, W] top-k locations
            variants.append(np.where(chosen, np.float32(baseline), img))         # deletion
            variants.append(np.where(chosen, img, np.float32(baseline)))         # insertion
        stacked = np.stack(variants, axis=1).reshape(-1, *img.shape[1:])        # [b * (steps+1) * 2, C, H, W]
        scores = np.asarray(score_fn(stacked), dtype=np.float64)                 # [M, K]
        per_variant = np.repeat(classes[sl], 2 * (steps + 1))                     # image-major, like stacked
        curves[sl] = scores[np.arange(len(stacked)), per_variant].reshape(len(img), steps + 1, 2)
    deletion, insertion = curves[:, :, 0], curves[:, :, 1]
    return _trapezoid(deletion), _trapezoid(insertion), deletion, insertion


def _trapezoid(curve: np.ndarray) -> np.ndarray:
    """Area under curves [N, steps+1] sampled at equal steps of the fraction in [0, 1] (trapezoid rule): [N]."""
    steps = curve.shape[1] - 1
    return ((curve[:, 1:] + curve[:, :-1]) / 2.0).sum(axis=1) / steps


def mean_with_interval(per_image, *, n_resamples: int = 1000, seed: int = 0, confidence: float = 0.95,
                       patient_ids=None) -> MeanEstimate:
    """Mean of per-image values (nan = undefined, left out) with a seeded percentile bootstrap interval, and ``n``
    (the defined values).

    The redraws are of the images with a defined value, or, where ``patient_ids`` (str, one per value) are given,
    of their patients, each drawn patient with all of their images (the unit of
    :func:`~dpmed.evaluation.bootstrap.bootstrap_redraws`): a redrawn mean is then the mean over the images of the
    drawn patients."""
    v = np.asarray(per_image, dtype=np.float64)
    defined = np.isfinite(v)
    if patient_ids is not None:
        patient_ids = np.asarray(patient_ids)
        if patient_ids.shape != v.shape:
            raise ValueError(f"{patient_ids.shape[0]} patient ids for {v.shape[0]} values")
        patient_ids = patient_ids[defined]
    v = v[defined]
    if v.size == 0:
        return MeanEstimate(value=None, n=0)
    draws = bootstrap_redraws(v.size, patient_ids=patient_ids, n_resamples=n_resamples, seed=seed)
    redraws = evaluate_redraws(draws, lambda w: weighted_mean(v, w))
    return MeanEstimate(**estimate(v.mean(), redraws, confidence=confidence).model_dump(), n=int(v.size))
