"""Utility of a diagnostic model: AUROC, and accuracy, sensitivity, specificity at a validation-chosen threshold.

Pure functions of label and score arrays (METHODS.md sec. 4); predictions are made once upstream. Conventions:

* binary: labels int [N] in {0, 1}; scores float [N] = P(class 1)
* multiclass: labels int [N] in 0..K-1; scores float [N, K] class probabilities (argmax is the prediction)
* multilabel: labels 0/1 [N, L]; scores float [N, L] sigmoid probabilities

Why each choice:

* The threshold that turns scores into decisions is Youden's J (Youden 1950, "Index for rating diagnostic tests",
  Cancer 3:32-35) chosen on the **validation** split and applied unchanged to test. A threshold chosen on the test
  set (an anti-example in the source documents' code) tunes the reported accuracy to the very images that measure it.
* AUROC per label is scikit-learn's; the macro average is one-vs-rest for multiclass and the mean over labels for
  multilabel, taken over the labels whose AUROC is defined (both classes present) in the test set; a redraw that
  loses one of them is undefined (counted, not averaged over fewer labels). Each label's interval comes from the
  same redraws, undefined in a redraw only where that label lost a class.
* Intervals are percentile intervals (at the study's confidence, 95% by default; METHODS.md sec. 4) over seeded
  redraws of the test set, paired across models (:mod:`dpmed.evaluation.bootstrap`; Efron & Tibshirani 1993), or,
  with ``interval="bca"``, BCa intervals (Efron 1987) from the same redraws, their acceleration from a jackknife of
  the same units: on small test sets the percentile interval holds the truth less often than it says. The threshold
  and the model stay fixed: the interval reflects the sampling of test patients, so where patient ids are known whole
  patients are redrawn, each with all of their images (the cluster bootstrap, Davison & Hinkley 1997, sec. 3.8);
  where they are not, each image is its own patient. The point value is always the metric on the whole test set.
* The redraws go through the evaluation stage's one bootstrap engine, per-image counts
  (:mod:`dpmed.evaluation.weighted`), as fairness and the comparisons do: AUROC by the weighted Mann-Whitney
  statistic (vectorised over redraws, because 1000 calls of scikit-learn per metric and per label would make
  evaluation slower than training the small models of the quickstart), rates by weighted means, kappa by weighted
  confusion counts; each exact on the redrawn sample.
"""

from __future__ import annotations

import math
import warnings
from typing import Callable, Sequence

import numpy as np
from sklearn.metrics import roc_auc_score, roc_curve

from dpmed.evaluation.bootstrap import INTERVALS, Interval, Redraws, bootstrap_redraws, interval_of
from dpmed.evaluation.weighted import (check_class_indices, evaluate_jackknife, evaluate_redraws, quadratic_kappa,
                                       weighted_auroc, weighted_kappa, weighted_mean)

__all__ = ["youden_threshold", "auroc", "quadratic_weighted_kappa", "evaluate_utility",
           "UNDEFINED_REDRAWS_WARN_FRACTION"]

# Above this share of redraws in which a metric is undefined (one class drawn), evaluate_utility warns: the interval
# then describes a conditional distribution (redraws that happen to contain both classes) and may be too narrow.
UNDEFINED_REDRAWS_WARN_FRACTION = 0.10


# ---------------------------------------------------------------------------------------------------------- checks


def _binary_arrays(labels, scores, where: str) -> tuple[np.ndarray, np.ndarray]:
    """Validated binary labels int64 [N] and scores float64 [N]."""
    y = np.asarray(labels)
    s = np.asarray(scores, dtype=np.float64)
    if y.ndim != 1 or s.shape != y.shape:
        raise ValueError(f"{where}: binary labels and scores must both be [N]; got shapes {y.shape} and {s.shape}")
    if y.size == 0:
        raise ValueError(f"{where}: no samples")
    if not np.isin(y, (0, 1)).all():
        raise ValueError(f"{where}: binary labels must be 0 or 1, got values {np.unique(y)[:10].tolist()}")
    if not np.isfinite(s).all():
        raise ValueError(f"{where}: {int((~np.isfinite(s)).sum())} scores are nan or infinite")
    return y.astype(np.int64), s


def _multiclass_arrays(labels, scores, where: str) -> tuple[np.ndarray, np.ndarray]:
    """Validated multiclass labels int64 [N] in 0..K-1 and scores float64 [N, K]."""
    y = np.asarray(labels)
    s = np.asarray(scores, dtype=np.float64)
    if y.ndim != 1 or s.ndim != 2 or s.shape[0] != y.shape[0] or s.shape[1] < 2:
        raise ValueError(
            f"{where}: multiclass labels must be [N] and scores [N, K] with K >= 2; got shapes {y.shape} and {s.shape}"
        )
    if y.size == 0:
        raise ValueError(f"{where}: no samples")
    if not np.isin(y, np.arange(s.shape[1])).all():
        raise ValueError(f"{where}: multiclass labels must be class indices 0..{s.shape[1] - 1} (one per score column)")
    if not np.isfinite(s).all():
        raise ValueError(f"{where}: {int((~np.isfinite(s)).sum())} scores are nan or infinite")
    return y.astype(np.int64), s


def _multilabel_arrays(labels, scores, where: str) -> tuple[np.ndarray, np.ndarray]:
    """Validated multilabel labels int64 [N, L] in {0, 1} and scores float64 [N, L]."""
    y = np.asarray(labels)
    s = np.asarray(scores, dtype=np.float64)
    if y.ndim != 2 or s.shape != y.shape:
        raise ValueError(
            f"{where}: multilabel labels and scores must both be [N, L]; got shapes {y.shape} and {s.shape}"
        )
    if y.size == 0:
        raise ValueError(f"{where}: no samples")
    if not np.isin(y, (0, 1)).all():
        raise ValueError(f"{where}: multilabel labels must be 0 or 1 (missing labels must be resolved upstream)")
    if not np.isfinite(s).all():
        raise ValueError(f"{where}: {int((~np.isfinite(s)).sum())} scores are nan or infinite")
    return y.astype(np.int64), s


# Multiclass as one-vs-rest columns, like multilabel: (labels 0/1 [N, K], scores [N, K]).
def _multiclass_columns(labels, scores, where: str) -> tuple[np.ndarray, np.ndarray]:
    y, s = _multiclass_arrays(labels, scores, where)
    onehot = (y[:, None] == np.arange(s.shape[1])[None, :]).astype(np.int64)  # [N, K]
    return onehot, s


def _lookup(table: dict, kind: str):
    try:
        return table[kind]
    except (KeyError, TypeError):
        raise ValueError(f"kind must be one of {sorted(table)}, got {kind!r}") from None


# --------------------------------------------------------------------------------------------------------- metrics


def youden_threshold(labels, scores) -> float:
    """The score threshold maximising Youden's J = TPR - FPR on these (validation) labels and scores.

    Youden 1950: J weighs sensitivity and specificity equally, which suits a screening comparison across privacy
    arms where no clinical cost ratio is given. METHODS.md sec. 4: call this on the **validation** split and apply
    the result unchanged to test; never on test.

    A sample is predicted positive when ``score >= threshold`` (scikit-learn's ``roc_curve`` convention), so the J
    maximised here is the J the threshold achieves on these labels. The candidates are the observed scores
    (``roc_curve(drop_intermediate=False)`` without its leading ``inf``, which predicts nothing positive). J is
    compared in exact integer form (TP * N_neg - FP * N_pos), and among equal maxima the first, i.e. the highest
    threshold, wins. One class only: ``ValueError``, since J is then undefined.
    """
    y, s = _binary_arrays(labels, scores, "youden_threshold")
    n_pos = int(y.sum())
    n_neg = y.size - n_pos
    if n_pos == 0 or n_neg == 0:
        raise ValueError(
            f"youden_threshold: all {y.size} labels are {int(y[0])}; Youden's J needs positives and negatives. "
            "Choose the threshold on a validation split that holds both classes (never on the test set)."
        )
    fpr, tpr, thresholds = roc_curve(y, s, drop_intermediate=False)  # thresholds decreasing, [0] = inf
    tp = np.rint(tpr[1:] * n_pos).astype(np.int64)  # exact counts back from the rates
    fp = np.rint(fpr[1:] * n_neg).astype(np.int64)
    j_scaled = tp * n_neg - fp * n_pos  # = J * n_pos * n_neg, exact, so ties are ties
    return float(thresholds[1:][int(np.argmax(j_scaled))])  # argmax: first maximiser = highest threshold


def _column_auroc(y: np.ndarray, s: np.ndarray) -> float:
    """scikit-learn's AUROC of one 0/1 column, nan when only one class is present (instead of sklearn's warning)."""
    if y.min() == y.max():
        return float("nan")
    return float(roc_auc_score(y, s))


def _macro(values: np.ndarray) -> np.ndarray:
    """Mean over the last axis ignoring nan (undefined labels); nan where no label is defined. No warnings."""
    defined = ~np.isnan(values)
    count = defined.sum(axis=-1)
    total = np.where(defined, values, 0.0).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def _auroc_columns(y: np.ndarray, s: np.ndarray) -> tuple[float, dict[str, float]]:
    per_label = {str(j): _column_auroc(y[:, j], s[:, j]) for j in range(y.shape[1])}
    return float(_macro(np.array(list(per_label.values())))), per_label


def _auroc_binary(labels, scores) -> tuple[float, dict[str, float]]:
    # Class 0 one-vs-rest scores by -s, whose ranks are exactly those of s reversed: the same AUROC, so reuse it.
    value = _column_auroc(*_binary_arrays(labels, scores, "auroc"))
    return value, {"0": value, "1": value}


_AUROC: dict[str, Callable[..., tuple[float, dict[str, float]]]] = {
    "binary": _auroc_binary,
    "multiclass": lambda labels, scores: _auroc_columns(*_multiclass_columns(labels, scores, "auroc")),
    "multilabel": lambda labels, scores: _auroc_columns(*_multilabel_arrays(labels, scores, "auroc")),
}


def auroc(labels, scores, *, kind: str) -> tuple[float, dict[str, float]]:
    """(macro AUROC, per-label AUROC keyed "0", "1", ...) on one set, by scikit-learn (METHODS.md sec. 4).

    * binary: the AUROC of P(class 1); the per-label dict holds class "0" and class "1" one-vs-rest, which are equal.
    * multiclass: one-vs-rest per class; the macro is their unweighted mean, i.e. ``roc_auc_score(multi_class="ovr",
      average="macro")`` when every class is present.
    * multilabel: per label; the macro is the mean over the labels with both classes in the set.

    A label without both classes in the set has AUROC nan in the dict and is left out of the macro (for multiclass,
    a class absent from the set, where scikit-learn would return nan). If no label is defined: ``ValueError``.
    """
    macro, per_label = _lookup(_AUROC, kind)(labels, scores)
    if np.isnan(macro):
        raise ValueError(f"auroc: undefined, no label has both positives and negatives among the {len(labels)} samples")
    return macro, per_label


def quadratic_weighted_kappa(labels, predicted, *, n_classes: int) -> float:
    """Cohen's kappa with quadratic weights w_ij = (i - j)^2 / (K - 1)^2 (Cohen 1968): 1 - sum(w O) / sum(w E), with
    O the observed share of (true i, predicted j) and E the product of the marginal shares.

    For ordinal grades (APTOS diabetic retinopathy 0-4, METHODS.md sec. 4): predicting grade 3 for a grade 4 eye costs
    1/16 of predicting grade 0. Equals scikit-learn's ``cohen_kappa_score(labels, predicted, weights="quadratic",
    labels=range(K))``: the weights are distances between grades, also where a grade between two others is never
    seen (scikit-learn without ``labels`` renumbers the grades it sees); nan when it is undefined (every label and
    prediction one class).
    """
    y = np.asarray(labels, dtype=np.int64)
    p = np.asarray(predicted, dtype=np.int64)
    if y.shape != p.shape or y.ndim != 1 or n_classes < 2:
        raise ValueError(f"quadratic_weighted_kappa: labels and predictions must both be [N] with K >= 2 classes; "
                         f"got shapes {y.shape}, {p.shape} and K = {n_classes}")
    check_class_indices(y, p, n_classes, "quadratic_weighted_kappa")
    confusion = np.bincount(y * n_classes + p, minlength=n_classes * n_classes).reshape(n_classes, n_classes)
    # The redraws' formula, not cohen_kappa_score: a BCa z0 counts redraws equal to this value (tests: scikit-learn's)
    return float(quadratic_kappa(confusion.astype(np.float64)))


# -------------------------------------------------------------------------------------------------------- redraws


def _replicates(redraws: Redraws, metric: Callable[[np.ndarray], np.ndarray],
                interval: Interval) -> tuple[np.ndarray, np.ndarray | None]:
    """``metric`` (counts [b, N] -> [b, ...]) on every redraw and, for ``interval`` "bca", on every jackknife row:
    ([n_resamples, ...], [G, ...] or None), what :func:`~dpmed.evaluation.bootstrap.interval_of` needs. The
    percentile interval needs no jackknife and is spared its cost."""
    return evaluate_redraws(redraws, metric), (evaluate_jackknife(redraws, metric) if interval == "bca" else None)


# The set a row measures, as its keys and its warnings name it: the test set, or the training images of the private
# training-set metrics (`dpmed.evaluation.assessment`), whose warning named "the test set" and sent readers to look
# for a fault there.
SPLITS = {"test": "the test set", "train": "the training set"}


def _replicate_auroc(y: np.ndarray, s: np.ndarray, redraws: Redraws,
                     interval: Interval) -> tuple[np.ndarray, np.ndarray | None]:
    """Per-label AUROC in every redraw and (BCa) jackknife row: y, s [N, L] -> float [n_resamples, L], [G, L] or
    None (nan where undefined)."""
    return _replicates(redraws, lambda w: np.stack([weighted_auroc(y[:, j], s[:, j], w)      # w [b, N]
                                                    for j in range(y.shape[1])], axis=1), interval)


def _estimate(row: dict, name: str, value: float, replicates: tuple[np.ndarray, np.ndarray | None],
              confidence: float, split: str = "test") -> None:
    """Put ``name``, ``name_low``, ``name_high`` into ``row`` (the interval of ``replicates``: redraws, and jackknife
    values for BCa or None for the percentile interval, :func:`~dpmed.evaluation.bootstrap.interval_of`); warn
    when too many redraws are undefined, naming the metric and the set (``split``, a key of :data:`SPLITS`) they
    redrew."""
    redraws, jackknife = replicates
    undefined = int(np.isnan(redraws).sum())
    if undefined > UNDEFINED_REDRAWS_WARN_FRACTION * redraws.size:
        interval = ("it has no interval" if undefined == redraws.size else
                    f"the interval uses the other {redraws.size - undefined} and may be too narrow")
        where = SPLITS[split]
        warnings.warn(
            f"{name.replace('test_', f'{split}_', 1)}: {undefined} of {redraws.size} bootstrap redraws of {where} "
            f"leave it undefined (one class only); {interval}. The point value uses the whole of {where}. A larger "
            f"{where.removeprefix('the ')}, or fewer labels this rare, fixes this.",
            RuntimeWarning,
            stacklevel=3,
        )
    low, high = interval_of(value, redraws, jackknife, confidence=confidence)
    row[name], row[f"{name}_low"], row[f"{name}_high"] = float(value), low, high


def _test_auroc(row: dict, names: Sequence[str], y: np.ndarray, s: np.ndarray, redraws: Redraws, confidence,
                interval: Interval, *, per_label: bool, split: str) -> None:
    """Macro test AUROC with interval (+ each label's, with its interval from the same redraws) into ``row``."""
    macro, by_index = _auroc_columns(y, s)
    if np.isnan(macro):
        raise ValueError(f"{split} AUROC is undefined: no label has both positives and negatives among the "
                         f"{y.shape[0]} images of {SPLITS[split]}")
    # The redraws average the same labels as the point value: a redraw that lost one of them (no positive or no
    # negative drawn) is undefined, not the mean of the labels it kept (a different statistic).
    defined = np.array([not np.isnan(by_index[str(j)]) for j in range(y.shape[1])])
    label_redraws, label_jackknife = _replicate_auroc(y[:, defined], s[:, defined], redraws, interval)  # [R or G, L]
    macro_redraws = label_redraws.mean(axis=1)                                # [n_resamples], nan if any label is
    macro_jackknife = None if label_jackknife is None else label_jackknife.mean(axis=1)
    _estimate(row, "test_auroc", macro, (macro_redraws, macro_jackknife), confidence, split)
    row["test_auroc_undefined_redraws"] = int(np.isnan(macro_redraws).sum())
    if not per_label:
        return
    # A label's interval uses the macro's redraws; one that lost this label's positives or negatives is undefined
    # for it alone. No warning here: such a redraw is undefined for the macro too, which already warned. A label
    # undefined on the whole test set has no interval.
    column = np.cumsum(defined) - 1                                           # label j -> its column of redraws
    for j, name in enumerate(names):
        low, high = (interval_of(by_index[str(j)], label_redraws[:, column[j]],
                                 None if label_jackknife is None else label_jackknife[:, column[j]],
                                 confidence=confidence)
                     if defined[j] else (float("nan"), float("nan")))
        key = f"test_auroc[{name}]"
        row[key], row[f"{key}_low"], row[f"{key}_high"] = by_index[str(j)], low, high


# ------------------------------------------------------------------------------------------------------ per kind


def _evaluate_binary(names, val_labels, val_scores, test_labels, test_scores, redraws, confidence,
                     interval, split) -> dict:
    if len(names) != 2:
        raise ValueError(f"a binary task has two class names (negative, positive), got {list(names)}")
    y_val, s_val = _binary_arrays(val_labels, val_scores, "validation")
    y, s = _binary_arrays(test_labels, test_scores, "test")
    threshold = youden_threshold(y_val, s_val)  # chosen on validation, never on test (METHODS.md sec. 4)
    row: dict = {"threshold": threshold, "val_auroc": _column_auroc(y_val, s_val)}
    _test_auroc(row, names, y[:, None], s[:, None], redraws, confidence, interval, per_label=False, split=split)

    decided = s >= threshold  # [N], the validation threshold applied unchanged
    correct = (decided == (y == 1)).astype(np.float64)
    row["test_predicted_classes"] = int(np.unique(decided).size)  # 1: one class for every test image
    positive = y == 1
    n = y.size
    n_pos, n_neg = float(y.sum()), float(n - y.sum())
    # Sensitivity is the accuracy among the positives, specificity among the negatives: weighted means over those
    # images, nan in a redraw that drew none of them.
    rates, jack = _replicates(redraws, lambda w: np.stack(
        [weighted_mean(correct, w), weighted_mean(correct[positive], w[:, positive]),
         weighted_mean(correct[~positive], w[:, ~positive])], axis=1), interval)  # [n_resamples, 3], [G, 3] or None
    for k, (name, value) in enumerate((("test_accuracy", correct.sum() / n),
                                       ("test_sensitivity", correct[positive].sum() / n_pos),
                                       ("test_specificity", correct[~positive].sum() / n_neg))):
        _estimate(row, name, value, (rates[:, k], None if jack is None else jack[:, k]), confidence, split)
    row.update(_threshold_transfer(y_val, s_val >= threshold, y, decided))
    return row


def _threshold_transfer(y_val: np.ndarray, val_decided: np.ndarray, y: np.ndarray, decided: np.ndarray) -> dict:
    """Sensitivity and specificity on validation at its own threshold, and ``threshold_shift_p``: whether they
    carry over to test, the two-sided p of the two-proportion z-test (pooled variance) of the rate that differs
    most, times 2 for the two rates (Bonferroni). A tiny p says the test images differ from those the threshold
    was chosen on (another site, scanner or labelling; the Kermany release's test folder), so test sensitivity and
    specificity measure that shift as much as the model, which AUROC alone hides. The validation rates are those
    the threshold was fitted to, a little optimistic; the report warns only far below chance (p < 0.001)."""
    row: dict = {}
    p_values = []
    for name, cls, called in (("sensitivity", 1, True), ("specificity", 0, False)):
        on_val, on_test = y_val == cls, y == cls
        if not on_val.any():
            row[f"val_{name}"] = None
            continue
        k_val, n_val = float((val_decided[on_val] == called).sum()), float(on_val.sum())
        k_test, n_test = float((decided[on_test] == called).sum()), float(on_test.sum())
        row[f"val_{name}"] = k_val / n_val
        pooled = (k_val + k_test) / (n_val + n_test) if n_test else 0.0
        se = math.sqrt(pooled * (1 - pooled) * (1 / n_val + 1 / n_test)) if n_test else 0.0
        if se > 0:
            p_values.append(math.erfc(abs(k_val / n_val - k_test / n_test) / se / math.sqrt(2)))
    row["threshold_shift_p"] = min(1.0, 2 * min(p_values)) if p_values else None
    return row


def _evaluate_multiclass(names, val_labels, val_scores, test_labels, test_scores, redraws, confidence,
                         interval, split) -> dict:
    _multiclass_arrays(val_labels, val_scores, "validation")  # argmax needs no threshold; still reject bad input
    y, s = _multiclass_arrays(test_labels, test_scores, "test")
    if s.shape[1] != len(names):
        raise ValueError(f"test scores have {s.shape[1]} columns for {len(names)} label_names {list(names)}")
    row: dict = {}
    _test_auroc(row, names, *_multiclass_columns(y, s, "test"), redraws, confidence, interval, per_label=True,
                split=split)
    predicted = np.argmax(s, axis=1)  # [N]
    row["test_predicted_classes"] = int(np.unique(predicted).size)  # 1: one class for every test image
    correct = (predicted == y).astype(np.float64)
    _estimate(row, "test_accuracy", correct.mean(), _replicates(redraws, lambda w: weighted_mean(correct, w), interval),
              confidence, split)
    return row


def _evaluate_multilabel(names, val_labels, val_scores, test_labels, test_scores, redraws, confidence,
                         interval, split) -> dict:
    y_val, s_val = _multilabel_arrays(val_labels, val_scores, "validation")
    y, s = _multilabel_arrays(test_labels, test_scores, "test")
    if s.shape[1] != len(names) or s_val.shape[1] != len(names):
        raise ValueError(
            f"validation and test scores have {s_val.shape[1]} and {s.shape[1]} columns for {len(names)} "
            f"label_names {list(names)}"
        )
    thresholds = np.empty(len(names))
    for j, name in enumerate(names):
        try:
            thresholds[j] = youden_threshold(y_val[:, j], s_val[:, j])
        except ValueError as err:
            raise ValueError(f"label {name!r}: no validation threshold can be chosen: {err}") from err
    row: dict = {f"threshold[{name}]": float(t) for name, t in zip(names, thresholds)}
    _test_auroc(row, names, y, s, redraws, confidence, interval, per_label=True, split=split)
    # Mean over labels of per-label accuracy = mean over images of the share of labels right (same N per label).
    decided = s >= thresholds[None, :]  # [N, L]
    # a finding decided the same way for every test image (all positive or all negative) says nothing about it
    row["test_constant_labels"] = int(sum(np.unique(decided[:, j]).size == 1 for j in range(decided.shape[1])))
    correct = (decided == (y == 1)).mean(axis=1)  # [N]
    _estimate(row, "test_accuracy", correct.mean(), _replicates(redraws, lambda w: weighted_mean(correct, w), interval),
              confidence, split)
    return row


_EVALUATORS: dict[str, Callable[..., dict]] = {
    "binary": _evaluate_binary,
    "multiclass": _evaluate_multiclass,
    "multilabel": _evaluate_multilabel,
}


def evaluate_utility(
    *,
    kind: str,
    label_names: Sequence[str],
    val_labels,
    val_scores,
    test_labels,
    test_scores,
    n_resamples: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
    interval: Interval = "percentile",
    ordinal: bool = False,
    test_patient_ids=None,
    split: str = "test",
) -> dict[str, float | int | str]:
    """The utility of one model as one flat row (METHODS.md sec. 4); every interval is a bootstrap interval
    of kind ``interval``: "percentile" (METHODS.md sec. 4) or "bca" (:func:`~dpmed.evaluation.bootstrap.bca_interval`).

    Keys: ``test_auroc`` (macro) with ``_low`` / ``_high`` and ``test_auroc_undefined_redraws`` (redraws in which
    it had no value); ``test_auroc[<label name>]`` per label with ``_low`` / ``_high`` (multiclass, multilabel;
    nan where the label has one class on test); ``test_accuracy`` with
    interval (binary and multilabel at the validation Youden thresholds, multiclass by argmax); binary adds
    ``threshold``, ``val_auroc``, ``test_sensitivity`` and ``test_specificity`` with intervals,
    ``val_sensitivity``, ``val_specificity`` and ``threshold_shift_p`` (:func:`_threshold_transfer`); multilabel adds
    ``threshold[<label name>]``; ``test_predicted_classes`` (binary, multiclass: how many classes the decisions
    use on test; 1 flags a model that predicts one class for every image) and ``test_constant_labels``
    (multilabel: findings decided the same way for every test image); always ``n_test``, ``n_resamples``,
    ``confidence``, ``interval``, ``bootstrap_seed`` and ``bootstrap_unit`` ("patient" or "image": what was
    redrawn), with ``n_test_patients`` where patients were.
    ``ordinal=True`` (multiclass grades, e.g. APTOS) adds ``test_kappa_quadratic`` with interval: the
    quadratic-weighted kappa of the argmax predictions (:func:`quadratic_weighted_kappa`).

    Thresholds come from the validation arrays only; the test set is redrawn ``n_resamples`` times with
    :func:`~dpmed.evaluation.bootstrap.bootstrap_redraws` (``seed``): by patient where ``test_patient_ids`` (str [N],
    one per test image) are given, each drawn patient with all of their images, else by image. Every model scored on
    the same test set (and ids) with the same seed sees the same redraws (paired). A redraw in which a metric is
    undefined counts as nan and is left out of its interval; above 10% of such redraws a ``RuntimeWarning`` says so.
    Point values use the whole test set. ``split``: the set ``test_labels`` and ``test_scores`` come from, as the
    warnings name it (a key of :data:`SPLITS`: "train" for the private training-set metrics); the keys stay
    ``test_*``.
    """
    evaluate = _lookup(_EVALUATORS, kind)
    names = tuple(str(name) for name in label_names)
    if len(set(names)) != len(names):
        raise ValueError(f"label_names must be distinct (they become column names), got {list(names)}")
    if not (isinstance(confidence, (int, float)) and 0.0 < confidence < 1.0):
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence!r}")
    if interval not in INTERVALS:
        raise ValueError(f"interval must be one of {list(INTERVALS)}, got {interval!r}")
    if split not in SPLITS:
        raise ValueError(f"split must be one of {sorted(SPLITS)}, got {split!r}")
    n_test = len(np.asarray(test_labels))
    redraws = bootstrap_redraws(n_test, patient_ids=test_patient_ids, n_resamples=n_resamples, seed=seed)
    if redraws.n_units == 1:     # every redraw is the whole test set: intervals of zero width, which read as certainty
        warnings.warn(f"{SPLITS[split]} holds one {redraws.unit}: every bootstrap redraw is the whole of it, so each "
                      "interval has zero width and measures no uncertainty; test on more patients",
                      RuntimeWarning, stacklevel=2)
    if ordinal and kind != "multiclass":
        raise ValueError(f"ordinal applies to multiclass grades, not to a {kind} task")
    row = evaluate(names, val_labels, val_scores, test_labels, test_scores, redraws, confidence, interval, split)
    if ordinal:
        y, s = _multiclass_arrays(test_labels, test_scores, "test")
        predicted = np.argmax(s, axis=1)
        value = quadratic_weighted_kappa(y, predicted, n_classes=s.shape[1])
        kappas = _replicates(redraws, lambda w: weighted_kappa(y, predicted, w, n_classes=s.shape[1]), interval)
        _estimate(row, "test_kappa_quadratic", value, kappas, confidence, split)
    row.update(n_test=n_test, n_resamples=int(n_resamples), confidence=float(confidence), interval=interval,
               bootstrap_seed=int(seed), bootstrap_unit=redraws.unit)
    if redraws.unit == "patient":
        row["n_test_patients"] = redraws.n_units
    return row
