"""Seeded, paired bootstrap of test-set metrics, redrawing patients where the test set names them.

Why: a test AUROC on a few hundred images moves by several points from one draw of patients to the next, and the
cost of privacy dpmed reports is often of that size. METHODS.md sec. 4 therefore asks for 1000 redraws of the test set
(with replacement, same size), seeded and *paired* across the models compared, and for the 95% *percentile* interval
of the redrawn metric (:func:`percentile_interval`; Efron & Tibshirani 1993, An Introduction to the Bootstrap,
ch. 13); 95% is the default of ``evaluation.confidence``, where a study may set another level. A study may ask for
the *BCa* interval instead (``evaluation.interval: bca``; :func:`bca_interval`, ch. 14) for its utility metrics and
fairness groups; a p-value read off the same redraws keeps the percentile interval. Two
habits of the source documents are ruled out here by construction: a "+/-" bootstrap standard deviation shown as if it
were an interval (both return quantiles, never a std), and unseeded bootstraps (:func:`bootstrap_indices` demands a
seed and touches no global random state).

The unit redrawn is the patient where patient ids are known (:func:`bootstrap_redraws`): the images of one patient
(both eyes, follow-up films, several views) are not independent, so the test set is a sample of patients, and
redrawing its images one by one treats correlated images as separate evidence and makes the interval too narrow.
Redrawing whole patients with replacement, each drawn patient bringing all of their images, is the cluster
bootstrap for hierarchical data (Davison & Hinkley 1997, Bootstrap Methods and their Application, sec. 3.8: resample
the clusters, keep each drawn cluster whole), whose variance estimate Field & Welsh 2007 ("Bootstrapping clustered
data", JRSS B 69:369-390) show to be consistent, as the clusters grow in number, when the clusters are a random
sample (here the test patients). A redraw holds as many patients as the test set, so its number of images varies.
Where no patient ids exist (each image its own patient) the image is the unit, and the redraws are exactly those of
the image bootstrap.

Pairing: every model evaluated on one test set (same images in the same order, same patient ids) with one seed gets
exactly the same redraws, so the difference between two models can be bootstrapped redraw by redraw and the
intervals of the arms of a study are comparable.

Not scipy.stats.bootstrap (1.17): it redraws observations, never clusters (patients), its BCa jackknife leaves out
each of the n observations in turn (n AUROCs, where :data:`JACKKNIFE_GROUPS` caps ours), and it does not skip the
redraws in which a metric is undefined.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.special import ndtr, ndtri

__all__ = ["INTERVALS", "Interval", "JACKKNIFE_GROUPS", "Redraws", "bca_interval", "bootstrap_indices",
           "bootstrap_redraws", "interval_of", "patient_numbers", "percentile_interval"]

# The interval a study's utility metrics and fairness groups get (``evaluation.interval``): the percentile interval
# METHODS.md sec. 4 asks for, or BCa (:func:`bca_interval`), which covers better on small test sets.
Interval = Literal["percentile", "bca"]
INTERVALS: tuple[Interval, ...] = ("percentile", "bca")

# The BCa acceleration comes from a delete-a-group jackknife of at most this many groups of units (every unit its own
# group below it): its cost is that of this many redraws, a fifth of the 1000 redraws', at any test-set size, where a
# full jackknife of n AUROCs costs n sorts of n scores.
JACKKNIFE_GROUPS = 200


def bootstrap_indices(n: int, *, n_resamples: int = 1000, seed: int) -> np.ndarray:
    """Row r holds the positions drawn (with replacement) in redraw r: int64 [n_resamples, n]; the positions are the
    test set's images, or its patients (:func:`bootstrap_redraws`).

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
        raise ValueError(f"n (the test set's images or patients) must be a positive int, got {n!r}")
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, numbers.Integral) or n_resamples < 1:
        raise ValueError(f"n_resamples must be a positive int, got {n_resamples!r}")
    rng = np.random.default_rng(int(seed))
    return rng.integers(0, int(n), size=(int(n_resamples), int(n)), dtype=np.int64)  # [n_resamples, n]


@dataclass(frozen=True, eq=False)
class Redraws:
    """Seeded redraws of a test set, as the units drawn and the unit each image belongs to.

    draws: int64 [n_resamples, n_units], row r the units (patients, or images) drawn with replacement in redraw r;
    unit_of_image: int64 [n_images], image i belongs to unit ``unit_of_image[i]``, and is in redraw r as often as its
    unit was drawn there (:func:`dpmed.evaluation.weighted.redraw_counts`); unit: what was drawn, "patient" or
    "image" (then ``unit_of_image`` is 0..n-1). Make them with :func:`bootstrap_redraws`.
    """

    draws: np.ndarray
    unit_of_image: np.ndarray
    unit: Literal["patient", "image"]

    def __post_init__(self) -> None:
        if self.draws.ndim != 2 or self.unit_of_image.ndim != 1:
            raise ValueError(f"draws must be [n_resamples, n_units] and unit_of_image [n_images]; got shapes "
                             f"{self.draws.shape} and {self.unit_of_image.shape}")
        if self.unit not in ("patient", "image"):
            raise ValueError(f"unit must be 'patient' or 'image', got {self.unit!r}")
        if self.unit_of_image.size and (self.unit_of_image.min() < 0 or self.unit_of_image.max() >= self.n_units):
            raise ValueError(f"unit_of_image must index the {self.n_units} units drawn")

    @classmethod
    def of_images(cls, indices) -> "Redraws":
        """Image positions drawn, int [n_resamples, n] (as :func:`bootstrap_indices` makes them), as redraws of
        images: each image its own unit."""
        draws = np.asarray(indices, dtype=np.int64)
        if draws.ndim != 2:
            raise ValueError(f"indices must be [n_resamples, n], got shape {draws.shape}")
        return cls(draws=draws, unit_of_image=np.arange(draws.shape[1], dtype=np.int64), unit="image")

    @property
    def n_resamples(self) -> int:
        return int(self.draws.shape[0])

    @property
    def n_units(self) -> int:
        """Patients (or images) in the test set, and in every redraw."""
        return int(self.draws.shape[1])

    @property
    def n_images(self) -> int:
        return int(self.unit_of_image.shape[0])

    @property
    def jackknife_groups(self) -> np.ndarray:
        """int64 [n_units]: the jackknife group of each unit, unit k in group k mod G, G = min(n_units,
        JACKKNIFE_GROUPS). Interleaved, so that a test set stored in order of class, site or score spreads each over
        the groups; every unit its own group (the ordinary jackknife) for up to JACKKNIFE_GROUPS units."""
        m = self.n_units
        return np.arange(m, dtype=np.int64) % max(1, min(m, JACKKNIFE_GROUPS))


def patient_numbers(patient_ids) -> np.ndarray:
    """Each image's patient as an int64 [n] in 0..P-1, patients numbered in order of first appearance.

    First appearance, not sorted ids: where every id is distinct patient k is image k, so the patient redraws of
    :func:`bootstrap_redraws` are, bit for bit, the image redraws of the same seed (the unit changes nothing where
    each image is its own patient)."""
    ids = np.asarray(patient_ids).astype(str)
    if ids.ndim != 1:
        raise ValueError(f"patient ids must be one per image, shape [n]; got shape {ids.shape}")
    _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    rank = np.empty(first.size, dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size, dtype=np.int64)
    return rank[inverse.reshape(-1)]


def bootstrap_redraws(n: int, *, patient_ids=None, n_resamples: int = 1000, seed: int) -> Redraws:
    """The seeded redraws of a test set of ``n`` images: of its patients where ``patient_ids`` (str [n]) are given,
    else of its images (module docstring).

    By patient: ``bootstrap_indices(P, n_resamples, seed)`` draws P of the P patients (numbered by
    :func:`patient_numbers`) per redraw, and every image of a drawn patient comes with them. By image:
    ``bootstrap_indices(n, n_resamples, seed)``, as before patients were known. The redraws depend on ``(n, ids,
    n_resamples, seed)`` only, so every model scored on one test set with one seed sees the same ones (paired).
    """
    if patient_ids is None:
        return Redraws.of_images(bootstrap_indices(n, n_resamples=n_resamples, seed=seed))
    unit_of_image = patient_numbers(patient_ids)
    if unit_of_image.size != n:
        raise ValueError(f"{unit_of_image.size} patient ids for {n} test images")
    n_patients = int(unit_of_image.max()) + 1 if unit_of_image.size else 0
    return Redraws(draws=bootstrap_indices(n_patients, n_resamples=n_resamples, seed=seed),
                   unit_of_image=unit_of_image, unit="patient")


def _defined_redraws(samples: np.ndarray, confidence: float) -> np.ndarray:
    """The defined (not nan) values of bootstrap ``samples`` [n_resamples] as float64; ValueError unless
    ``confidence`` lies strictly between 0 and 1 and the samples are one value per redraw."""
    if not (isinstance(confidence, numbers.Real) and 0.0 < float(confidence) < 1.0):
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence!r}")
    values = np.asarray(samples, dtype=np.float64)
    if values.ndim != 1:
        raise ValueError(f"samples must be one value per redraw, shape [n_resamples]; got shape {values.shape}")
    return values[~np.isnan(values)]


def percentile_interval(samples: np.ndarray, *, confidence: float = 0.95) -> tuple[float, float]:
    """The central ``confidence`` percentile interval of bootstrap ``samples`` (float [n_resamples]).

    The bounds are the ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` quantiles (numpy's default linear
    interpolation) of the redraws (Efron & Tibshirani 1993, sec. 13.3): an interval, not a standard deviation.
    nan entries are redraws in which the metric is undefined (e.g. only one class was drawn, so AUROC has no value);
    they are left out rather than counted as any number. With no defined redraw the interval is ``(nan, nan)``.
    """
    values = _defined_redraws(samples, confidence)
    if values.size == 0:
        return float("nan"), float("nan")
    tail = 50.0 * (1.0 - float(confidence))  # percent in each tail
    low, high = np.percentile(values, [tail, 100.0 - tail])
    return float(low), float(high)


def bca_interval(value: float, samples: np.ndarray, jackknife: np.ndarray, *,
                 confidence: float = 0.95) -> tuple[float, float]:
    """The bias-corrected and accelerated (BCa) ``confidence`` interval of ``value`` from bootstrap ``samples`` (float
    [n_resamples]) and its leave-one-group-out ``jackknife`` values (float [G], :attr:`Redraws.jackknife_groups`).

    Why not the percentile interval: on small test sets (100 images, or a group of 20) the percentile interval of
    AUROC, sensitivity or specificity holds the truth less often than it says, by a few points, and BCa comes closer
    to its nominal level there at no loss on larger sets (benchmarks/RESULTS.md, "Interval coverage"). BCa (Efron
    1987, "Better bootstrap confidence intervals", JASA 82:171-185; Efron & Tibshirani 1993, ch. 14) takes the quantiles
    Phi(z0 + (z0 + z) / (1 - a (z0 + z))) of the redraws, z = Phi^-1 of (1 -+ confidence) / 2, with the bias
    correction z0 = Phi^-1(share of redraws below ``value``, ties counting one half: eq. 14.14 counts only those
    strictly below, which biases z0 down for a rate that often redraws to its own value; the half is
    scipy.stats.bootstrap's rule) and the acceleration
    a = sum(u^3) / (6 (sum(u^2))^1.5), u the jackknife values' mean minus each (Efron & Tibshirani 1993, eq. 14.15).
    With groups of units instead of single units u is a sum of the units' influences, whose squares and cubes
    sum, in expectation, to the same totals, so a is estimated at a fixed cost (delete-a-group jackknife; Efron &
    Tibshirani 1993, sec. 11.5). a = 0 gives the bias-corrected percentile interval, a = z0 = 0 the percentile one.
    Past the formula's pole (1 - a (z0 + z) <= 0: an extreme z0 with a near its bound of 1/6) the bound is the last
    redraw on that side, the level's limit at the pole.

    nan samples (redraws in which the metric is undefined) are left out, as are nan jackknife values; with fewer than
    two defined jackknife values a = 0. With no defined redraw the interval is ``(nan, nan)``; where ``value`` itself
    is undefined, the percentile interval of the redraws.
    """
    values = _defined_redraws(samples, confidence)
    if values.size == 0 or not np.isfinite(value):
        return percentile_interval(values, confidence=confidence)
    # Ties: a discrete statistic (a rate on few images) often redraws to its own value, computed along another path
    # (weighted sums, not scikit-learn), so equal is equal to 1e-12, not to the last bit.
    tie = np.abs(values - value) <= 1e-12 * max(1.0, abs(float(value)))
    share = (np.sum((values < value) & ~tie) + 0.5 * np.sum(tie)) / values.size
    half = 0.5 / values.size                      # a share of 0 or 1 would put z0 at infinity
    z0 = ndtri(min(max(share, half), 1.0 - half))
    jack = np.asarray(jackknife, dtype=np.float64).reshape(-1)
    jack = jack[~np.isnan(jack)]
    u = jack.mean() - jack if jack.size >= 2 else np.zeros(1)
    spread = float(np.sum(u**2))
    a = float(np.sum(u**3)) / (6.0 * spread**1.5) if spread > 0 else 0.0
    z = ndtri(np.array([(1.0 - float(confidence)) / 2, (1.0 + float(confidence)) / 2]))
    # The level rises with z only while 1 - a (z0 + z) > 0; |a| < 1/6, but z0 reaches +-Phi^-1(1 - 1 / (2 R)), so a
    # high confidence or many redraws can cross that pole, where the formula would jump to the other end of the
    # redraws and turn the interval over. At and past the pole the level is its limit there: 1 for a > 0, 0 for a < 0.
    shift = z0 + z
    denominator = 1.0 - a * shift
    levels = np.where(denominator > 0, ndtr(z0 + shift / np.where(denominator > 0, denominator, 1.0)),
                      1.0 if a > 0 else 0.0)
    low, high = np.percentile(values, 100.0 * levels)
    return float(low), float(high)


def interval_of(value: float, samples: np.ndarray, jackknife: np.ndarray | None, *,
                confidence: float) -> tuple[float, float]:
    """The interval a study asked for: :func:`bca_interval` where ``jackknife`` values came with the ``samples``
    (``evaluation.interval: bca``), else their :func:`percentile_interval`, which needs none."""
    if jackknife is None:
        return percentile_interval(samples, confidence=confidence)
    return bca_interval(value, samples, jackknife, confidence=confidence)
