"""Bootstrap redraws as per-image counts, so that group metrics and paired differences reuse one set of redraws.

A redraw of the test set with replacement (:class:`~dpmed.evaluation.bootstrap.Redraws`) is the same thing as a
count per test image: how often that image was drawn. Where patients are redrawn, that is how often the image's
patient was drawn (a drawn patient brings all of their images), so the counts of one patient's images are equal in
every redraw. Written as counts, a metric on a *subgroup* of the redraw (e.g. the patients over 80 among the redrawn
patients) is the metric on the subgroup's images weighted by their counts, and every arm, group and metric of a
study is computed on literally the same redraws (the pairing of METHODS.md sec. 4). Counts also make AUROC on a
variable-size subgroup vectorisable: the weighted Mann-Whitney statistic below needs one sort of the scores, not one
per redraw.

Conventions: ``weights`` are float [R, n] (R redraws, n images); a metric undefined in a redraw (no positive or no
negative drawn in the group) is nan there and left out of the interval, as in
:func:`~dpmed.evaluation.bootstrap.bca_interval`. The same metric function evaluated on the rows of
:func:`jackknife_counts` gives the jackknife values BCa's acceleration needs.

This is the one bootstrap engine of the evaluation stage: utility (:mod:`dpmed.evaluation.utility`), fairness,
explanations and the paired comparisons all redraw through it. With integer counts every statistic here is computed
from exact integer (or half-integer) sums, so a metric on a redraw is the metric on the redrawn sample itself, not
an approximation of it (the tests compare each with scikit-learn on the repeated images).
"""

from __future__ import annotations

from typing import Callable, Iterator

import numpy as np

from dpmed.evaluation.bootstrap import Redraws, interval_of
from dpmed.evaluation.summaries import Estimate

__all__ = ["redraw_counts", "redraw_bytes", "evaluate_redraws", "jackknife_counts", "evaluate_jackknife",
           "weighted_auroc", "weighted_macro_auroc",
           "weighted_mean", "quadratic_kappa", "weighted_kappa", "estimate", "as_label_columns", "number"]

# Redraws are turned into counts in blocks so that [R, n] float64 blocks stay near 32 MiB for large test sets.
_BLOCK_ELEMENTS = 1 << 22


def redraw_counts(redraws: Redraws | np.ndarray) -> Iterator[tuple[slice, np.ndarray]]:
    """(rows, counts float64 [b, n]) blocks: counts[r, i] = how often image i is in redraw ``rows``[r], i.e. how
    often its unit (its patient, or the image itself) was drawn there.

    ``redraws``: :class:`~dpmed.evaluation.bootstrap.Redraws`, or image positions int [R, n] as
    ``bootstrap_indices(n, seed=...)`` makes them. Each row of the counts sums to n where images are redrawn, and to
    the images of the drawn patients where patients are.
    """
    if not isinstance(redraws, Redraws):
        redraws = Redraws.of_images(redraws)
    m = redraws.n_units
    step = max(1, _BLOCK_ELEMENTS // max(1, m, redraws.n_images))
    # Every image its own unit, in order (redraws of images, or of patients with one image each): the unit counts are
    # the image counts, used as they are so that results stay bit for bit those of the image bootstrap (a gathered
    # copy can be summed in another order by BLAS).
    own_unit = m == redraws.n_images and np.array_equal(redraws.unit_of_image, np.arange(m))
    for start in range(0, redraws.n_resamples, step):
        idx = redraws.draws[start : start + step]                            # [b, m] units drawn
        b = idx.shape[0]
        flat = (idx + np.arange(b)[:, None] * m).ravel()
        counts = np.bincount(flat, minlength=b * m).reshape(b, m).astype(np.float64)      # [b, m] per unit
        if not own_unit:
            counts = counts[:, redraws.unit_of_image]                        # [b, n] an image counts as its patient
        yield slice(start, start + b), counts


def redraw_bytes(n_resamples: int, n_images: int) -> int:
    """Peak bytes of evaluating metrics over ``n_resamples`` redraws of ``n_images`` images through this engine: the
    redraws themselves, int64 [R, n] (8 bytes each, held throughout), and one block of :func:`redraw_counts` with
    the temporaries a metric makes of it (sorted copies, masks, sums: 56 bytes an element), blocks being at most
    ``_BLOCK_ELEMENTS`` elements, and 1 MiB for what an evaluation takes whatever its redraws (thresholds,
    summaries); checked against tracemalloc in benchmarks/RESULTS.md, "The bootstrap's memory estimate". What the
    metrics keep per redraw besides is their callers' to add."""
    rows = min(n_resamples, max(1, _BLOCK_ELEMENTS // max(1, n_images)))
    return 8 * n_resamples * n_images + 56 * rows * n_images + (1 << 20)


def evaluate_redraws(redraws: Redraws | np.ndarray, metric: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """``metric(counts)`` on every redraw: [R, ...], from the blocks of :func:`redraw_counts` (counts float64 [b, n]
    -> [b, ...] each) concatenated in redraw order."""
    return np.concatenate([metric(counts) for _rows, counts in redraw_counts(redraws)])


def jackknife_counts(redraws: Redraws | np.ndarray) -> Iterator[tuple[slice, np.ndarray]]:
    """(rows, counts float64 [b, n]) blocks of the delete-a-group jackknife behind the BCa interval: row g counts
    every image once but those of the units (patients, or images) in jackknife group g
    (:attr:`~dpmed.evaluation.bootstrap.Redraws.jackknife_groups`), which it counts 0 times. The unit left out is the
    unit the redraws draw, so a patient's images leave together."""
    if not isinstance(redraws, Redraws):
        redraws = Redraws.of_images(redraws)
    group_of_image = redraws.jackknife_groups[redraws.unit_of_image]                     # [n]
    n_groups = int(group_of_image.max()) + 1 if group_of_image.size else 0
    step = max(1, _BLOCK_ELEMENTS // max(1, redraws.n_images))
    for start in range(0, n_groups, step):
        rows = np.arange(start, min(n_groups, start + step))
        yield slice(start, start + rows.size), (group_of_image[None, :] != rows[:, None]).astype(np.float64)


def evaluate_jackknife(redraws: Redraws | np.ndarray, metric: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """``metric(counts)`` on every jackknife row of :func:`jackknife_counts`: [G, ...], as :func:`evaluate_redraws`
    on the redraws, so that the same metric function gives both."""
    return np.concatenate([metric(counts) for _rows, counts in jackknife_counts(redraws)])


def weighted_auroc(labels, scores, weights) -> np.ndarray:
    """AUROC of 0/1 ``labels`` [n] and ``scores`` [n] with each image counted ``weights[r, i]`` times: float [R].

    The weighted Mann-Whitney statistic: sum over (positive i, negative j) of w_i w_j (1[s_i > s_j] + 1/2 1[s_i =
    s_j]), divided by (sum of positive weights) (sum of negative weights). With integer counts this is exactly the
    AUROC of the redrawn sample (scikit-learn's ``roc_auc_score`` on the repeated images; ties count 1/2 as in
    Hanley & McNeil 1982). nan where a redraw has no positive or no negative weight. A 1-d ``weights`` [n] gives a
    scalar-like [1] result.
    """
    y = np.asarray(labels).astype(bool)
    s = np.asarray(scores, dtype=np.float64)
    w = np.atleast_2d(np.asarray(weights, dtype=np.float64))
    if y.ndim != 1 or s.shape != y.shape or w.shape[1] != y.size:
        raise ValueError(f"weighted_auroc: labels, scores [n] and weights [R, n] must agree; got {y.shape}, "
                         f"{s.shape}, {w.shape}")
    if y.size == 0:
        return np.full(w.shape[0], np.nan)
    order = np.argsort(s, kind="stable")
    s_sorted, y_sorted, w_sorted = s[order], y[order], w[:, order]         # ascending scores
    starts = np.flatnonzero(np.r_[True, s_sorted[1:] != s_sorted[:-1]])    # first position of each tied level
    pos = np.add.reduceat(np.where(y_sorted, w_sorted, 0.0), starts, axis=1)   # [R, levels]
    neg = np.add.reduceat(np.where(y_sorted, 0.0, w_sorted), starts, axis=1)   # [R, levels]
    below = np.cumsum(neg, axis=1) - neg                                     # negative weight strictly below
    u = (pos * (below + 0.5 * neg)).sum(axis=1)
    n_pos, n_neg = pos.sum(axis=1), neg.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((n_pos > 0) & (n_neg > 0), u / (n_pos * n_neg), np.nan)


def weighted_macro_auroc(labels: np.ndarray, scores: np.ndarray, weights) -> np.ndarray:
    """Mean over the label columns of ``labels`` [n, L] that hold both classes of the weighted AUROC: float [R]; nan
    in a redraw that lost one of them (every redraw averages the labels the point value does: the mean of the ones
    it kept would be another statistic), and everywhere where no column holds both classes."""
    defined = [j for j in range(labels.shape[1]) if len(labels) and labels[:, j].min() != labels[:, j].max()]
    if not defined:
        return np.full(np.atleast_2d(weights).shape[0], np.nan)
    return np.stack([weighted_auroc(labels[:, j], scores[:, j], weights) for j in defined], axis=1).mean(axis=1)


def weighted_mean(values, weights) -> np.ndarray:
    """sum_i w_ri v_i / sum_i w_ri for ``values`` [n] and ``weights`` [R, n]: float [R] (nan where no weight)."""
    v = np.asarray(values, dtype=np.float64)
    w = np.atleast_2d(np.asarray(weights, dtype=np.float64))
    total = w.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, (w @ v) / np.where(total > 0, total, 1.0), np.nan)


def quadratic_kappa(confusion: np.ndarray) -> np.ndarray:
    """Quadratic-weighted kappa of confusion counts [..., K, K] (rows: true class, columns: predicted): [...].

    Cohen 1968: 1 - sum(w O) / sum(w E) with w_ij = (i - j)^2 / (K - 1)^2, O the observed share of (true i,
    predicted j) and E the product of the marginal shares; nan where sum(w E) = 0 (every label and prediction one
    class: undefined).
    """
    k = confusion.shape[-1]
    i = np.arange(k)
    weights = (i[:, None] - i[None, :]) ** 2 / float((k - 1) ** 2)  # [K, K]
    total = confusion.sum(axis=(-2, -1), keepdims=True)  # [..., 1, 1]
    observed = confusion / np.maximum(total, 1)
    expected = observed.sum(axis=-1, keepdims=True) * observed.sum(axis=-2, keepdims=True)  # outer product of marginals
    disagreement = (weights * expected).sum(axis=(-2, -1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(disagreement > 0, 1.0 - (weights * observed).sum(axis=(-2, -1)) / disagreement, np.nan)


def check_class_indices(labels: np.ndarray, predicted: np.ndarray, n_classes: int, who: str) -> None:
    """ValueError naming the grades outside 0..K-1: a kappa reads (true a, predicted b) from the flattened cell
    a K + b, so true 0 predicted K would be counted as true 1 predicted 0, and the kappa changed silently."""
    outside = sorted(set(np.unique(labels[(labels < 0) | (labels >= n_classes)]).tolist())
                     | set(np.unique(predicted[(predicted < 0) | (predicted >= n_classes)]).tolist()))
    if outside:
        raise ValueError(f"{who}: labels and predictions must be class indices 0..{n_classes - 1}, got {outside[:10]}")


def weighted_kappa(labels, predicted, weights, *, n_classes: int) -> np.ndarray:
    """Quadratic-weighted kappa of class ``labels`` and ``predicted`` classes (int [n] in 0..K-1) with each image
    counted ``weights[r, i]`` times: float [R] (nan where undefined).

    The confusion counts of redraw r are sum_i w_ri [labels_i = a, predicted_i = b], one matrix product; with
    integer counts they are exactly the confusion matrix of the redrawn sample, so this is
    :func:`quadratic_kappa` of the redrawn sample.
    """
    y = np.asarray(labels, dtype=np.int64)
    p = np.asarray(predicted, dtype=np.int64)
    w = np.atleast_2d(np.asarray(weights, dtype=np.float64))
    if y.ndim != 1 or p.shape != y.shape or w.shape[1] != y.size:
        raise ValueError(f"weighted_kappa: labels, predicted [n] and weights [R, n] must agree; got {y.shape}, "
                         f"{p.shape}, {w.shape}")
    check_class_indices(y, p, n_classes, "weighted_kappa")
    cells = (y * n_classes + p)[:, None] == np.arange(n_classes * n_classes)[None, :]   # [n, K K] one-hot cell
    confusion = w @ cells.astype(np.float64)                                            # [R, K K]
    return quadratic_kappa(confusion.reshape(w.shape[0], n_classes, n_classes))


def number(value) -> float | None:
    """A JSON-safe float: None for nan or infinity (run.json is written with allow_nan=False)."""
    if value is None:
        return None
    value = float(value)
    return value if np.isfinite(value) else None


def estimate(value: float | None, redraws: np.ndarray, *, confidence: float,
             jackknife: np.ndarray | None = None) -> Estimate:
    """``value`` with the BCa interval of its ``redraws`` and ``jackknife`` values
    (:func:`~dpmed.evaluation.bootstrap.bca_interval`), or without ``jackknife`` the percentile interval of the
    redraws (nan redraws left out either way); None where undefined. The percentile interval stays where dpmed
    reads a p-value off the same redraws (paired differences) or the statistic is a minimum over groups, which BCa's
    smoothness assumption does not cover."""
    low, high = interval_of(np.nan if value is None else float(value), np.asarray(redraws, dtype=float),
                            None if jackknife is None else np.asarray(jackknife, dtype=float), confidence=confidence)
    return Estimate(value=number(value), low=number(low), high=number(high))


def as_label_columns(kind: str, labels, scores) -> tuple[np.ndarray, np.ndarray]:
    """Labels and scores as 0/1 and float columns [n, L]: binary one column (P(class 1)), multiclass one-vs-rest per
    class, multilabel per finding. The AUROC of a model is the mean over columns whose AUROC is defined."""
    y = np.asarray(labels)
    s = np.asarray(scores, dtype=np.float64)
    if kind == "binary":
        return y.reshape(-1, 1).astype(np.int64), s.reshape(-1, 1)
    if kind == "multiclass":
        return (y[:, None] == np.arange(s.shape[1])[None, :]).astype(np.int64), s
    if kind == "multilabel":
        return y.astype(np.int64), s
    raise ValueError(f"kind must be binary, multiclass or multilabel, got {kind!r}")
