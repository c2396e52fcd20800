"""The statistics of comparisons between runs: what privacy costs, with intervals (`dpmed.comparisons` applies them
to the runs of a study).

* **Paired AUROC differences** (METHODS.md sec. 4): a private run against the non-private run of the same seed,
  on the same seeded redraws of the test set that gave each arm its own interval (of its patients where their ids
  are known: :func:`~dpmed.evaluation.bootstrap.bootstrap_redraws`, as counts in :mod:`dpmed.evaluation.weighted`).
  Because
  both models are scored on each redraw, the interval of the *difference* is much narrower than the two arms'
  intervals side by side suggest (overlapping intervals do not show that two arms are equal). The p-value is the
  two-sided bootstrap test obtained by inverting percentile intervals: twice the share of redraws whose difference
  falls on the other side of zero, with the +1 correction of Davison & Hinkley 1997 (eq. 4.11) so it is never 0.
  Its smallest possible value is 2 / (R + 1) for R defined redraws (0.002 for 1000): a p-value at that floor says
  "at most 0.002", not "0.002" (:func:`p_value_floor`).
* **Paired sensitivity, specificity and accuracy differences** (:func:`paired_differences`): the same redraws, each
  model deciding at its *own* validation-chosen threshold (Youden's J, METHODS.md sec. 4; argmax for multiclass),
  exactly as its own test_sensitivity / test_specificity / test_accuracy were computed. A clinician reads these as
  cases: a sensitivity change of -0.12 is about 12 more missed of every 100 positive cases.
* **Paired quadratic-weighted kappa differences** (ordinal grades, METHODS.md sec. 4; Cohen 1968): each model's
  kappa of its argmax grades, exactly as its own test_kappa_quadratic, on the same redraws, with the same interval
  and p-value. Kappa weighs a far miss above a near one (grade 0 for a grade 4 eye costs 16 times grade 3), which
  accuracy does not; a kappa lies in [-1, 1] (it is Lin's concordance of the grades), so a difference in [-2, 2].
* **Seeds** of one arm value are summarised by mean, standard deviation (ddof = 1), min and max, and the Student t
  interval of the mean with n - 1 degrees of freedom, cut to the values' possible range (none for one seed;
  :func:`seed_summary`): the spread over seeds is training randomness (and DP noise), which the test-set bootstrap does
  not see. The range of 3 seeds is no interval (it holds the true mean 75 % of the time); the t interval holds it
  as often as the study's confidence level says (``evaluation.confidence``, 95% by default), and is as wide as 3
  seeds make it.
* **Pearson r with p-values** (003_9a91354dc2d7e2df.txt, "To evaluate correlation ... we use Pearson's r"): across a
  DP-SGD sweep (runs that differ only in eps, or only in the clipping norm; every seed is a point), between log10 eps
  and each group's accuracy parity difference, and between log10 eps (or the clipping norm) and each explanation
  metric;
  across labels (three or more), between each label's AUROC drop (non-private minus private) and its positive count
  in the test set or its non-private AUROC. Fewer than three points, or a sweep of fewer than three distinct
  values, give no r (said, not guessed): across two values r only compares them. eps enters as
  log10 eps (METHODS.md s.5): 003 correlated eps itself over 0.29 to 7.89, but over the decades a dpmed sweep may
  span (up to 1e15) the largest eps alone would set r on a linear axis (`dpmed.comparisons`).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict
from scipy.stats import pearsonr
from scipy.stats import t as student_t

from dpmed.evaluation.bootstrap import bootstrap_redraws
from dpmed.evaluation.weighted import (as_label_columns, estimate, number, redraw_counts, weighted_kappa,
                                       weighted_macro_auroc, weighted_mean)

__all__ = ["PairedDifference", "paired_differences", "bootstrap_p_value", "p_value_floor", "Correlation", "pearson",
           "SeedSummary", "seed_summary"]


def bootstrap_p_value(differences: np.ndarray) -> float | None:
    """Two-sided p-value of "difference = 0" from bootstrap redraws of the difference (nan redraws left out).

    p = min(1, 2 (1 + min(#{d <= 0}, #{d >= 0})) / (R + 1)): the smallest level at which a percentile interval
    would exclude 0, with the +1 correction that keeps a Monte Carlo p-value valid (Davison & Hinkley 1997).
    """
    d = np.asarray(differences, dtype=np.float64)
    d = d[np.isfinite(d)]
    if d.size == 0:
        return None
    tail = min(int((d <= 0).sum()), int((d >= 0).sum()))
    return float(min(1.0, 2.0 * (1 + tail) / (d.size + 1)))


def p_value_floor(defined_redraws: int) -> float | None:
    """The smallest p-value :func:`bootstrap_p_value` can give with this many defined redraws: 2 / (R + 1).

    No redraw falling on the other side of zero gives exactly this value; it then means p <= 2 / (R + 1) (more
    redraws could only lower it), and is printed so."""
    if defined_redraws < 1:
        return None
    return float(min(1.0, 2.0 / (defined_redraws + 1)))


def _correct(kind: str, labels, y: np.ndarray, s: np.ndarray, thresholds) -> np.ndarray | None:
    """Per test image, the share of its labels decided right: float [n]; None where a threshold is missing.

    binary and multilabel: score >= that label's validation threshold (``thresholds``: one per label column);
    multiclass: argmax (no threshold)."""
    if kind == "multiclass":
        return (np.argmax(s, axis=1) == np.asarray(labels)).astype(np.float64)
    if thresholds is None:
        return None
    t = np.asarray(thresholds, dtype=np.float64).reshape(1, -1)                     # [1, L]
    if t.shape[1] != y.shape[1]:
        raise ValueError(f"{t.shape[1]} thresholds for {y.shape[1]} label columns")
    return ((s >= t) == (y == 1)).mean(axis=1)


def _rates(kind: str, y: np.ndarray, correct: np.ndarray | None, weights: np.ndarray) -> dict[str, np.ndarray]:
    """accuracy, and (binary) sensitivity = accuracy among the positives, specificity = among the negatives: [R]."""
    if correct is None:
        return {}
    out = {"accuracy": weighted_mean(correct, weights)}
    if kind == "binary":
        positive = y[:, 0] == 1
        out["sensitivity"] = weighted_mean(correct[positive], weights[:, positive])
        out["specificity"] = weighted_mean(correct[~positive], weights[:, ~positive])
    return out


class PairedDifference(BaseModel):
    """Private minus non-private on the same test redraws: value (whole test set), percentile interval, two-sided
    bootstrap p-value and its floor 2 / (R + 1) (a p-value at the floor means "at most" that), the redraws in which
    the difference was defined, and each model's own value."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    value: float | None
    low: float | None
    high: float | None
    p_value: float | None
    p_floor: float | None = None
    defined_redraws: int
    private: float | None = None
    reference: float | None = None

    @property
    def p_at_floor(self) -> bool:
        """No redraw fell on the other side of zero: the p-value is only bounded above by its floor."""
        return self.p_value is not None and self.p_floor is not None and self.p_value <= self.p_floor * (1 + 1e-9)


def paired_differences(*, kind: str, labels, scores, reference_scores, thresholds=None, reference_thresholds=None,
                       n_resamples: int = 1000, seed: int = 0, confidence: float = 0.95,
                       patient_ids=None, ordinal: bool = False) -> dict[str, PairedDifference]:
    """Private minus reference on the same test labels, for AUROC (macro), accuracy, for a binary task
    sensitivity and specificity, and for ordinal grades (``ordinal``, multiclass only) the quadratic-weighted kappa
    of the argmax grades (``kappa_quadratic``, :func:`~dpmed.evaluation.weighted.weighted_kappa`); each with a
    paired bootstrap interval and p-value over the same ``bootstrap_redraws(n, patient_ids, n_resamples, seed)``
    redraws: of the test patients where ``patient_ids``
    (str [n], the test set's) are given, else of its images; the redraws each model's own intervals used.

    ``thresholds`` / ``reference_thresholds``: each model's own validation-chosen thresholds (binary: one; multilabel:
    one per label), as its record's metrics hold them; without them only AUROC (and, multiclass, accuracy by argmax)
    is compared. Each entry, a :class:`PairedDifference`: ``value`` (whole test set), ``low``, ``high``, ``p_value``,
    ``p_floor`` (:func:`p_value_floor`), ``defined_redraws``, and the two models' own values ``private`` and
    ``reference``.
    """
    if ordinal and kind != "multiclass":
        raise ValueError(f"ordinal applies to multiclass grades, not to a {kind} task")
    y, s = as_label_columns(kind, labels, scores)
    _, s0 = as_label_columns(kind, labels, reference_scores)
    if s.shape != s0.shape:
        raise ValueError(f"the two models' scores differ in shape: {s.shape} and {s0.shape}")
    n = y.shape[0]
    grades = np.asarray(labels, dtype=np.int64) if ordinal else None
    correct = _correct(kind, labels, y, s, thresholds)
    correct0 = _correct(kind, labels, y, s0, reference_thresholds)
    if correct is None or correct0 is None:
        correct = correct0 = None

    def both(w: np.ndarray) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        mine = {"auroc": weighted_macro_auroc(y, s, w), **_rates(kind, y, correct, w)}
        theirs = {"auroc": weighted_macro_auroc(y, s0, w), **_rates(kind, y, correct0, w)}
        if grades is not None:
            mine["kappa_quadratic"] = weighted_kappa(grades, np.argmax(s, axis=1), w, n_classes=s.shape[1])
            theirs["kappa_quadratic"] = weighted_kappa(grades, np.argmax(s0, axis=1), w, n_classes=s.shape[1])
        return mine, theirs

    mine, theirs = both(np.ones((1, n)))
    redraws: dict[str, list[np.ndarray]] = {name: [] for name in mine}
    for _rows, w in redraw_counts(bootstrap_redraws(n, patient_ids=patient_ids, n_resamples=n_resamples, seed=seed)):
        a, b = both(w)
        for name in redraws:
            redraws[name].append(a[name] - b[name])
    out = {}
    for name, parts in redraws.items():
        diffs = np.concatenate(parts)
        defined = int(np.isfinite(diffs).sum())
        out[name] = PairedDifference(
            **estimate(float(mine[name][0] - theirs[name][0]), diffs, confidence=confidence).model_dump(),
            p_value=bootstrap_p_value(diffs), p_floor=p_value_floor(defined), defined_redraws=defined,
            private=number(mine[name][0]), reference=number(theirs[name][0]))
    return out


def _distinct(values: np.ndarray) -> int:
    """How many distinct values, equal up to float rounding (1e-9 relative): one eps accounted twice is one."""
    v = np.sort(values)
    return int(1 + (np.diff(v) > 1e-9 * np.maximum(1.0, np.abs(v[1:]))).sum()) if v.size else 0


class Correlation(BaseModel):
    """Pearson r, its two-sided p-value and the number of points; ``reason`` where r is undefined."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    r: float | None
    p_value: float | None
    n: int
    reason: str | None = None


def pearson(x: Sequence[float | None], y: Sequence[float | None], *, min_x_values: int = 1,
            x_name: str = "x") -> Correlation:
    """Pearson's r and its two-sided p-value (scipy; t-test with n - 2 degrees of freedom), with n.

    Points with a missing value (None or not finite) are dropped; fewer than 3 points, a constant variable, or fewer
    than ``min_x_values`` distinct values of ``x`` (named ``x_name`` in the reason) give r = None and a reason. A trend
    across a sweep needs three swept values (`dpmed.comparisons.correlations`): across two, r only compares two
    groups of points (with one point at each it is +-1 whatever they are; with seeds, a large |r| and a small p say
    only that the two values differ, which the paired differences say better), not a trend.
    """
    a = np.array([np.nan if v is None else v for v in x], dtype=np.float64)
    b = np.array([np.nan if v is None else v for v in y], dtype=np.float64)
    keep = np.isfinite(a) & np.isfinite(b)
    a, b = a[keep], b[keep]
    if a.size < 3:
        return Correlation(r=None, p_value=None, n=int(a.size), reason="fewer than 3 points")
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return Correlation(r=None, p_value=None, n=int(a.size), reason="one variable is constant")
    if (k := _distinct(a)) < min_x_values:
        return Correlation(r=None, p_value=None, n=int(a.size),
                           reason=f"only {k} distinct values of {x_name} (r needs {min_x_values}: across two it "
                                  "only compares them)")
    result = pearsonr(a, b)
    return Correlation(r=number(result.statistic), p_value=number(result.pvalue), n=int(a.size))


class SeedSummary(BaseModel):
    """Mean, standard deviation (ddof = 1; None for one seed), min and max over seeds, and their count; ``low`` and
    ``high``: the Student t interval of the mean (:func:`seed_summary`), None with the ``reason`` where it has none.

    The range (min, max) is the seeds' spread, not an interval: 3 seeds' range holds their true mean only 75 % of
    the time (1 - 2 / 2^3; benchmarks/RESULTS.md, "Interval coverage"), so the report shows it as a range and the
    t interval as the interval. ``low``, ``high`` and ``reason`` are later additions: a comparisons.json written
    before them reads with None, and a reader of the older fields reads the new file unchanged."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mean: float | None
    std: float | None
    min: float | None
    max: float | None
    n_seeds: int
    low: float | None = None
    high: float | None = None
    reason: str | None = None

    @property
    def excludes_zero(self) -> bool:
        """The t interval lies wholly on one side of 0: the seeds show a change, and which way (its sign)."""
        return self.low is not None and self.high is not None and (self.low > 0 or self.high < 0)


def seed_summary(values: Sequence[float | None], *, confidence: float = 0.95,
                 within: tuple[float, float] | None = None) -> SeedSummary:
    """The :class:`SeedSummary` of ``values`` (None: a seed without the value, left out), with the ``confidence``
    Student t interval of their mean: mean +- t_{(1 + confidence) / 2, n - 1} std / sqrt(n), scipy.stats.t.

    It assumes the seeds are independent draws of training randomness (each its own initialisation, batches and
    noise) and their values roughly normal; then it holds the mean over all possible seeds with the stated
    probability, whatever n (benchmarks/interval_coverage.py). With 3 seeds t is 4.30, so the interval is about 2.5
    std wide on each side: that width is what 3 seeds can tell. One seed has no spread to estimate: no interval.
    ``within``: the range the values can take (a metric in [0, 1], a difference of two in [-1, 1]); the interval is
    cut to it. That loses no coverage (the true mean lies in it), and with 2 seeds (t 12.7) an AUROC difference read
    "-3.0 to +2.4", or a sensitivity "495 fewer to 522 more of every 100 cases"."""
    v = np.array([x for x in values if x is not None], dtype=np.float64)
    if v.size == 0:
        return SeedSummary(mean=None, std=None, min=None, max=None, n_seeds=0, reason="no seed has this value")
    mean, n = number(v.mean()), int(v.size)
    if n == 1:
        return SeedSummary(mean=mean, std=None, min=number(v.min()), max=number(v.max()), n_seeds=1,
                           reason="one seed: no spread over seeds to estimate, so no interval over seeds")
    std = number(v.std(ddof=1))
    if mean is None or std is None:
        return SeedSummary(mean=mean, std=std, min=number(v.min()), max=number(v.max()), n_seeds=n,
                           reason="a seed's value is not finite")
    half = float(student_t.ppf((1 + confidence) / 2, n - 1) * std / np.sqrt(n))
    low, high = mean - half, mean + half
    if within is not None:
        low, high = max(low, within[0]), min(high, within[1])
    return SeedSummary(mean=mean, std=std, min=number(v.min()), max=number(v.max()), n_seeds=n, low=low, high=high)
