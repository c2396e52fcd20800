"""Seeded, paired percentile bootstrap of test-set metrics.

Why: a test AUROC on a few hundred images moves by several points from one draw of patients to the next, and the
cost of privacy dpmed reports is often of that size. METHODS.md sec. 4 therefore asks for 1000 redraws of the test set
(with replacement, same size), seeded and *paired* across the models compared, and for the 95% *percentile* interval
of the redrawn metric (Efron & Tibshirani 1993, An Introduction to the Bootstrap, ch. 13). Two habits of the source
documents are ruled out here by construction: a "+/-" bootstrap standard deviation shown as if it were an interval
(:func:`percentile_interval` returns quantiles, never a std), and unseeded bootstraps (:func:`bootstrap_indices`
demands a seed and touches no global random state).

Pairing: every model evaluated on one test set with one seed gets exactly the same redraws, so the difference between
two models can be bootstrapped redraw by redraw and the intervals of the arms of a study are comparable.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

__all__ = ["Estimate", "bootstrap_indices", "percentile_interval"]


@dataclass(frozen=True)
class Estimate:
    """A point value with its percentile bootstrap interval.

    ``value`` is the metric on the whole test set, never the mean of the redraws; ``low`` and ``high`` are the
    percentile interval of the redraws (nan when no redraw defined the metric).
    """

    value: float
    low: float
    high: float

    @classmethod
    def from_redraws(cls, value: float, redraws: np.ndarray, *, confidence: float = 0.95) -> "Estimate":
        """``value`` with the percentile interval of ``redraws`` (float [n_resamples], nan = undefined redraw)."""
        low, high = percentile_interval(redraws, confidence=confidence)
        return cls(value=float(value), low=low, high=high)


def bootstrap_indices(n: int, *, n_resamples: int = 1000, seed: int) -> np.ndarray:
    """Row r holds the test-set positions drawn (with replacement) in redraw r: int64 [n_resamples, n].

    The draw depends on ``(n, n_resamples, seed)`` only, through its own ``np.random.default_rng(seed)``; no global
    state is read or changed. Calling it again with the same arguments for another model gives the same redraws,
    which is what makes the bootstrap paired across the arms of a study (METHODS.md sec. 4). ``seed`` has no default
    and ``None`` is refused: an unseeded bootstrap cannot be reproduced or paired.
    """
    if seed is None or isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise ValueError(
            f"seed must be an int, got {seed!r}: an unseeded bootstrap can be neither reproduced nor paired across "
            "the models compared (METHODS.md sec. 4)"
        )
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
        raise ValueError(f"n (the test-set size) must be a positive int, got {n!r}")
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, numbers.Integral) or n_resamples < 1:
        raise ValueError(f"n_resamples must be a positive int, got {n_resamples!r}")
    rng = np.random.default_rng(int(seed))
    return rng.integers(0, int(n), size=(int(n_resamples), int(n)), dtype=np.int64)  # [n_resamples, n]


def percentile_interval(samples: np.ndarray, *, confidence: float = 0.95) -> tuple[float, float]:
    """The central ``confidence`` percentile interval of bootstrap ``samples`` (float [n_resamples]).

    The bounds are the ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` quantiles (numpy's default linear
    interpolation) of the redraws (Efron & Tibshirani 1993, sec. 13.3): an interval, not a standard deviation.
    nan entries are redraws in which the metric is undefined (e.g. only one class was drawn, so AUROC has no value);
    they are left out rather than counted as any number. With no defined redraw the interval is ``(nan, nan)``.
    """
    if not (isinstance(confidence, numbers.Real) and 0.0 < float(confidence) < 1.0):
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence!r}")
    values = np.asarray(samples, dtype=np.float64)
    if values.ndim != 1:
        raise ValueError(f"samples must be one value per redraw, shape [n_resamples]; got shape {values.shape}")
    values = values[~np.isnan(values)]
    if values.size == 0:
        return float("nan"), float("nan")
    tail = 50.0 * (1.0 - float(confidence))  # percent in each tail
    low, high = np.percentile(values, [tail, 100.0 - tail])
    return float(low), float(high)
