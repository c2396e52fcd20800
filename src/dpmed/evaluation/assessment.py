"""Everything a run measures on its trained model, in one call: predictions once, then utility, fairness and
explanations as functions of them (METHODS.md s.4-6), and, where a study asks, the training-set metrics of
000_56c2431ae4df8d10.txt's train/test table (private: computed from the training images without noise).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from dpmed.config import EvaluationConfig
from dpmed.data import Dataset, ImageSet
from dpmed.data.pace import Pace
from dpmed.evaluation.explanations import explain_test_set
from dpmed.evaluation.fairness import evaluate_fairness, group_labels
from dpmed.evaluation.inference import predict
from dpmed.evaluation.summaries import Explanations, Fairness
from dpmed.evaluation.utility import evaluate_utility
from dpmed.evaluation.weighted import redraw_bytes

__all__ = ["Assessment", "assess", "RedrawMemory", "redraw_memory"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True, eq=False)
class Assessment:
    """val_scores / test_scores: the model's scores (saved once as predictions.npz). metrics, fairness,
    explanations: the run record's blocks (non-finite values as None); cams: the CAM arrays for the report's grid;
    training_metrics: private, None unless asked."""

    val_scores: np.ndarray
    test_scores: np.ndarray
    metrics: dict[str, Any]
    fairness: Fairness | None = None
    explanations: Explanations | None = None
    cams: dict[str, np.ndarray] | None = None
    training_metrics: dict[str, Any] | None = None


@dataclass(frozen=True)
class RedrawMemory:
    """What a run's evaluation takes at its peak for its bootstrap redraws of the test set, in bytes: engine, the
    redraws and their blocks of counts (`dpmed.evaluation.weighted.redraw_bytes`); tables, what is kept for every
    redraw, which grows with the label columns (``labels``: findings, classes) and, where fairness decides
    (binary, multilabel), with them times the ``groups`` of its attribute with the most (0 without). training: the
    peak of the private training-set metrics (``evaluation.training_metrics``; 0 without), utility on the training
    images, redrawn after the test set's work is freed: the run's peak is the larger of the two."""

    engine: int
    tables: int
    labels: int
    groups: int
    training: int = 0

    @property
    def total(self) -> int:
        return self.engine + self.tables


def redraw_memory(config: EvaluationConfig, dataset: Dataset) -> RedrawMemory:
    """The :class:`RedrawMemory` of evaluating a run on ``dataset``'s test set as ``config`` asks. Utility and
    fairness redraw one after the other, through one engine; each keeps its per-redraw values until it summarises
    them. Utility keeps each label's AUROC (8 bytes a redraw and label); fairness on decisions keeps, for each
    group, four rates per label (selection in and outside the group, TPR, FPR), in blocks that are then joined and
    stacked across groups for the spreads: about 100 bytes a redraw, label and group (measured in
    benchmarks/RESULTS.md, "The bootstrap's memory estimate"); multiclass fairness
    keeps a few numbers a redraw and group. Patients redrawn instead of images take no more. The training-set
    metrics are counted over all training images (an audit may hold some out)."""
    r, n = config.bootstrap_resamples, len(dataset.test)
    labels = 1 if dataset.task.kind == "binary" else len(dataset.task.label_names)
    groups = 0
    if config.fairness is not None and dataset.task.kind != "multiclass":
        groups = max(len(np.unique(group_labels(name, getattr(dataset.test, name), age_bins=config.fairness.age_bins)))
                     for name in config.fairness.attributes)
    training = redraw_bytes(r, len(dataset.train)) + r * labels * 8 if config.training_metrics else 0
    return RedrawMemory(engine=redraw_bytes(r, n), tables=r * labels * (8 + 100 * groups), labels=labels,
                        groups=groups, training=training)


def _finite(values: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in values.items()}


def _patients(dataset: Dataset, images: ImageSet) -> np.ndarray | None:
    """The patient of each image of ``images``, the unit the bootstrap redraws (METHODS.md sec. 4); None where the
    dataset names no patients (each image its own: the image is redrawn)."""
    return images.patient_ids if dataset.patients_known else None


def _utility(config: EvaluationConfig, dataset: Dataset, val_scores, images: ImageSet, scores,
             split: str = "test") -> dict[str, Any]:
    return _finite(evaluate_utility(kind=dataset.task.kind, label_names=list(dataset.task.label_names),
                                    val_labels=dataset.val.labels, val_scores=val_scores, test_labels=images.labels,
                                    test_scores=scores, n_resamples=config.bootstrap_resamples,
                                    seed=config.bootstrap_seed, confidence=config.confidence,
                                    interval=config.interval, ordinal=dataset.task.ordinal,
                                    test_patient_ids=_patients(dataset, images), split=split))


def assess(model: nn.Module, dataset: Dataset, inputs: tuple[ImageSet, ImageSet], config: EvaluationConfig, *,
           cam_layer: str, device: torch.device, training: ImageSet | None = None,
           label: str = "evaluation") -> Assessment:
    """Measure ``model`` on ``dataset``'s validation and test splits, given as the model sees them (``inputs``:
    validation and test after the study's fixed normalisation); ``training`` (as the model saw it) adds the private
    training-set metrics. ``label`` names the run in the progress lines of the parts that take minutes at 224 px:
    scoring the images (`dpmed.evaluation.inference.predict`) and explaining them (Grad-CAM and its deletion and
    insertion curves, `dpmed.evaluation.explanations.explain`)."""
    val_input, test_input = inputs
    pace = Pace(_log)     # one for the run's scoring: sets each scored within its interval would each be silent
    val_scores = predict(model, val_input, dataset.task, device=device, label=label, what="validation images",
                         pace=pace)
    test_scores = predict(model, test_input, dataset.task, device=device, label=label, what="test images", pace=pace)
    metrics = _utility(config, dataset, val_scores, dataset.test, test_scores)
    fairness = None
    if config.fairness is not None:   # per-group metrics, a pure function of the predictions (METHODS.md s.5)
        fairness = evaluate_fairness(
            kind=dataset.task.kind, val_labels=dataset.val.labels, val_scores=val_scores,
            test_labels=dataset.test.labels, test_scores=test_scores,
            attributes={name: getattr(dataset.test, name) for name in config.fairness.attributes},
            age_bins=config.fairness.age_bins, n_resamples=config.bootstrap_resamples, seed=config.bootstrap_seed,
            confidence=config.confidence, interval=config.interval,
            patient_ids=_patients(dataset, dataset.test))
    explanations = cams = None
    if config.explanations is not None:   # Grad-CAM on a plain copy of the model: ``model`` stays as it is
        start = time.perf_counter()
        explanations, cams = explain_test_set(
            model, dataset.test.images, dataset.test.masks, kind=dataset.task.kind, target_layer=cam_layer,
            normalization=dataset.normalization, n_resamples=config.bootstrap_resamples,
            bootstrap_seed=config.bootstrap_seed, confidence=config.confidence,
            patient_ids=_patients(dataset, dataset.test), threshold=metrics.get("threshold"), label=label,
            **config.explanations.model_dump())
        explanations = explanations.model_copy(update={"seconds": time.perf_counter() - start})
    private = None
    if config.training_metrics and training is not None and len(training):   # an audit may leave none
        train_scores = predict(model, training, dataset.task, device=device, label=label, what="training images",
                               pace=pace)
        private = {"covered_by_eps": False, "note": "computed from the training images without noise: private",
                   **{k.replace("test_", "train_", 1): v for k, v in _utility(
                       config, dataset, val_scores, training, train_scores, "train").items()}}
    return Assessment(val_scores=val_scores, test_scores=test_scores, metrics=metrics, fairness=fairness,
                      explanations=explanations, cams=cams, training_metrics=private)
