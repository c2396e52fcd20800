"""Grad-CAM explanations of a trained model and how faithful they are, for one run (METHODS.md sec. 6;
001_d0483fd35863b74c.txt).

001_d0483fd35863b74c.txt asks whether DP-SGD makes a model's explanations worse, and measures it with Grad-CAM
(Selvaraju et al. 2017) and scores of how much of the model's confidence the explanation keeps. This module runs
both on the explained images of a test set and writes the run.json block and the arrays of ``cams.npz``:

* the CAMs (:mod:`dpmed.evaluation.cams`) of the predicted class c, and the confidence, deletion and insertion
  metrics of :mod:`dpmed.evaluation.faithfulness` on them. c is the class the run's other metrics say it predicts:
  for a binary task at the run's validation Youden threshold (a DP model's compressed scores often sit on either
  side of it and of 0.5 at once, and an explanation of "normal" for an image counted as predicted pneumonia would
  describe another decision than the utility numbers), otherwise the argmax (for a multilabel task, which decides
  each finding at its own threshold, the finding of the highest score, whether or not it is decided present);
* where ground-truth lesion masks exist (the phantom): the mask energy and the pointing game, on the CAM of the
  finding the mask annotates (binary: class 1; multilabel: the sum of every finding's score, since one mask marks
  the lesions of all findings together, and one finding's map would be scored against another's lesions), on the
  explained images that carry a non-empty mask, so a model that misses a lesion is asked "where would opacity be?",
  not "why normal?".

Every mean has a percentile bootstrap interval at the study's confidence level (``evaluation.confidence``, 95%
by default) over seeded redraws of the explained images, or of their
patients where the test set names them (each drawn patient with all of their explained images: the images of one
patient are not independent evidence about a CAM either). The caller's model is never modified (the CAMs and
scores come from :func:`~dpmed.evaluation.cams.plain_copy`).
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import numpy as np
from torch import nn

from dpmed.data import pace as pacing
from dpmed.evaluation.cams import CAM_METHODS, cams_of_plain, class_probabilities, plain_copy
from dpmed.evaluation.faithfulness import (METRIC_LABELS, average_drop, deletion_insertion, increase_in_confidence,
                                           mask_area_share, mask_energy, masked_input_score,
                                           mean_with_interval, pointing_game)
from dpmed.evaluation.summaries import Explanations, MeanEstimate
from dpmed.evaluation.weighted import number

# CAM_METHODS is re-exported: the registry of method names (`dpmed.names`) is checked against it here.
__all__ = ["select_images", "explain", "explain_test_set", "CAM_METHODS"]

_log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------------- one run, whole


def select_images(n_test: int, *, n_images: int, seed: int) -> np.ndarray:
    """The test positions to explain: min(n_images, n_test) drawn without replacement by ``seed``, sorted. The same
    for every arm of a study (same test set, same seed), so their explanations are of the same images."""
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(n_test, size=min(n_images, n_test), replace=False))


def _explained_class(kind: str, decided: bool) -> str:
    """What c is, as the record states it: a multilabel run decides each finding at its own threshold (none or
    several per image), so the finding its map explains is the one of the highest score, not a predicted class."""
    if kind == "multilabel":
        return "the finding with the highest score (argmax over the findings, whether or not it passes its threshold)"
    return "predicted (at the run's validation Youden threshold)" if decided else "predicted (argmax)"


# The forward passes a CAM costs, in passes of the model alone: one forward and one backward pass, with hooks.
_PASSES_PER_CAM = 3


def _announce(label: str, method: str, n: int, seconds: float, *, deletion_steps: int, n_masked: int) -> None:
    """Say that ``label``'s ``n`` images are being explained, and in about how long, where the first pass over them
    (``seconds``) shows the whole will take longer than the interval between progress lines. The whole, in passes
    over an image: its scores, its CAM, its masked input's scores and its 2 (steps + 1) curve points, and the lesion
    CAMs of the ``n_masked`` images with a mask."""
    passes = n * (2 + _PASSES_PER_CAM + 2 * (deletion_steps + 1)) + n_masked * _PASSES_PER_CAM
    expected = seconds * passes / max(1, n)
    if expected > pacing.REPORT_EVERY:
        _log.info("%s: explaining %d images (%s maps, deletion and insertion curves), about %d min", label, n,
                  method, math.ceil(expected / 60))


def explain(model: nn.Module, images: np.ndarray, *, kind: str, target_layer: str, method: str = "gradcam",
            normalization=None, masks: np.ndarray | None = None, lesion_class: int | None = 1,
            deletion_steps: int = 16, pointing_tolerance: float = 0.0, n_resamples: int = 1000, seed: int = 0,
            confidence: float = 0.95, patient_ids=None, threshold: float | None = None,
            label: str = "explanations") -> tuple[Explanations, dict[str, np.ndarray]]:
    """Explain ``images`` ([0, 1] pixels [N, C, H, W], e.g. the :func:`select_images` of the test set).
    ``threshold``: a binary run's validation Youden threshold, at which its predicted class is decided (None: the
    argmax, as for the other tasks). ``lesion_class``: the class whose map the masks score (None: no lesion
    metrics); a multilabel run's lesion maps are of the sum of all its findings' scores instead (module docstring).
    ``label`` names the run in the progress lines: one at the start where the first pass over the images shows the
    whole will take longer than the data layer's interval between lines (`dpmed.data.pace`), then those of the
    deletion and insertion curves. At 224 px the maps and scores before the curves take minutes on a CPU.

    Returns (record, arrays): the run record's explanations block (method, target layer, every metric with its
    interval, and the all-zero maps among the CAMs each metric reads: ``n_zero_cams`` of the predicted class, read
    by the confidence and deletion/insertion metrics, and ``n_zero_lesion_cams`` of the lesion class, read by mask
    energy and the pointing game) and the arrays for ``cams.npz`` (cams, targets, Y, O, deletion and insertion
    curves, and, where masks are given, lesion_cams and lesion_positions). ``model`` is never modified (see
    :func:`plain_copy`).
    Intervals: percentile bootstrap over the explained images, or over their patients where ``patient_ids`` (str
    [N], one per image) are given (:func:`~dpmed.evaluation.faithfulness.mean_with_interval`; the record's
    ``bootstrap_unit`` says which), so every arm explaining the same images gets the same redraws.
    """
    ids = None if patient_ids is None else np.asarray(patient_ids).astype(str)
    if ids is not None and ids.shape != (len(images),):
        raise ValueError(f"{ids.size} patient ids for {len(images)} explained images")
    clone = plain_copy(model)

    def scores_of(batch: np.ndarray) -> np.ndarray:
        return class_probabilities(clone, batch, kind=kind, normalization=normalization)

    start = time.perf_counter()
    probs = scores_of(images)                                                   # [N, K]
    _announce(label, method, len(images), time.perf_counter() - start, deletion_steps=deletion_steps,
              n_masked=0 if masks is None or lesion_class is None else int(np.asarray(masks).any(axis=(1, 2)).sum()))
    decided = kind == "binary" and threshold is not None
    targets = ((probs[:, 1] >= threshold).astype(np.int64) if decided           # the predicted class c
               else probs.argmax(axis=1))
    cams = cams_of_plain(clone, images, target_layer=target_layer, targets=targets, method=method,
                         normalization=normalization)                          # [N, H, W]
    rows = np.arange(len(images))
    y = probs[rows, targets]
    o = scores_of(cams[:, None] * images)[rows, targets]                        # E = L * I, before normalisation
    deletion, insertion, del_curve, ins_curve = deletion_insertion(scores_of, images, cams, targets,
                                                                   steps=deletion_steps, label=label)

    def interval(values: np.ndarray, ids: np.ndarray | None) -> MeanEstimate:
        """The mean of per-image ``values`` and its interval, on the redraws every arm shares (docstring)."""
        return mean_with_interval(values, patient_ids=ids, n_resamples=n_resamples, seed=seed, confidence=confidence)

    metrics = {
        "average_drop": interval(average_drop(y, o), ids),
        "increase_in_confidence": interval(increase_in_confidence(y, o), ids),
        "masked_input_score": interval(masked_input_score(y, o), ids),
        "deletion_auc": interval(deletion, ids),
        "insertion_auc": interval(insertion, ids),
    }
    arrays = {"cams": cams.astype(np.float16), "targets": targets, "score_image": y, "score_masked": o,
              "deletion_curve": del_curve, "insertion_curve": ins_curve}
    record: dict[str, Any] = {"method": method, "method_reference": CAM_METHODS[method].reference,
                              "target_layer": target_layer, "explained_class": _explained_class(kind, decided),
                              "n_images": int(len(images)), "n_zero_cams": int((cams.max(axis=(1, 2)) <= 0).sum()),
                              "bootstrap_unit": "image" if ids is None else "patient",
                              # Y's spread: the confidence metrics divide by Y, and a model whose class scores
                              # barely leave 1/K can drop little whatever its CAM shows (read them with it)
                              "score_image_min": number(y.min()), "score_image_max": number(y.max()),
                              "deletion_steps": int(deletion_steps), "baseline": "black (0 in [0, 1] pixels)",
                              "labels": METRIC_LABELS}
    if masks is not None and lesion_class is not None:
        masks = np.asarray(masks, dtype=bool)
        positions = np.flatnonzero(masks.reshape(len(masks), -1).any(axis=1))
        if positions.size:
            # The CAM of the finding the mask annotates, whatever the model predicted (module docstring).
            every_finding = kind == "multilabel"
            target = tuple(range(probs.shape[1])) if every_finding else int(lesion_class)
            lesion_cams = cams_of_plain(clone, images[positions], target_layer=target_layer,
                                        targets=[target] * positions.size, method=method,
                                        normalization=normalization)           # [M, H, W]
            lesion_ids = None if ids is None else ids[positions]
            metrics["mask_energy"] = interval(mask_energy(lesion_cams, masks[positions]), lesion_ids)
            metrics["pointing_game"] = interval(
                pointing_game(lesion_cams, masks[positions], tolerance=pointing_tolerance), lesion_ids)
            arrays.update(lesion_cams=lesion_cams.astype(np.float16), lesion_positions=positions)
            record.update(lesion_class=None if every_finding else target,
                          lesion_target="the sum of every finding's score" if every_finding else f"class {target}",
                          pointing_tolerance_px=float(pointing_tolerance),
                          n_masked_images=int(positions.size),
                          # maps of their own (the lesion class, not the predicted one): their all-zero maps score
                          # 0 energy and miss, so they are counted for the two metrics they enter
                          n_zero_lesion_cams=int((lesion_cams.max(axis=(1, 2)) <= 0).sum()),
                          mask_area_share=number(np.nanmean(mask_area_share(masks[positions]))))
        else:
            record["mask_note"] = "none of the explained images carries a lesion mask"
    return Explanations(**record, metrics=metrics), arrays


def explain_test_set(model: nn.Module, images: np.ndarray, masks: np.ndarray | None, *, kind: str, target_layer: str,
                     method: str, n_images: int, seed: int, deletion_steps: int, pointing_tolerance: float,
                     normalization=None, n_resamples: int = 1000, bootstrap_seed: int = 0,
                     confidence: float = 0.95, patient_ids=None, threshold: float | None = None,
                     label: str = "explanations") -> tuple[Explanations, dict[str, np.ndarray]]:
    """:func:`explain` on the :func:`select_images` (``n_images``, ``seed``) of a test set: the run's explanations.

    The keyword names match the study file's ``evaluation.explanations`` block; ``patient_ids`` (str, one per test
    image; None where the dataset names no patients) make the intervals redraw the explained images' patients. The
    arrays add ``positions`` (test indices), the explained ``images`` (float16) and their ``masks``, so the report
    can draw its CAM grid from cams.npz alone.
    """
    positions = select_images(len(images), n_images=n_images, seed=seed)
    chosen_masks = None if masks is None else np.asarray(masks)[positions]
    record, arrays = explain(model, np.asarray(images)[positions], kind=kind, target_layer=target_layer, method=method,
                             normalization=normalization, masks=chosen_masks, deletion_steps=deletion_steps,
                             pointing_tolerance=pointing_tolerance, n_resamples=n_resamples, seed=bootstrap_seed,
                             confidence=confidence, threshold=threshold, label=label,
                             patient_ids=None if patient_ids is None else np.asarray(patient_ids)[positions])
    record = record.model_copy(update={"image_seed": int(seed)})
    arrays.update(positions=positions, images=np.asarray(images)[positions].astype(np.float16))
    if chosen_masks is not None:
        arrays["masks"] = chosen_masks.astype(bool)
    return record, arrays
