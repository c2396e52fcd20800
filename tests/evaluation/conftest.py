"""The BCa interval written out from its definition, for tests that recompute dpmed's intervals redraw by redraw."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm


def bca_by_hand(stat, redraws, unit_of_image, *, confidence: float = 0.95) -> tuple[float, float]:
    """Efron & Tibshirani 1993, eqs. 14.10, 14.14, 14.15: ``stat`` (image positions int [k] -> float, nan where
    undefined) on the whole test set is the value; ``redraws`` its values on the redraws (nan left out); the
    acceleration from leaving out each unit (patient, or image) in turn, with all of its images (tests keep to
    fewer units than dpmed's jackknife groups, so each unit is its own group)."""
    units = np.asarray(unit_of_image)
    images = np.arange(units.size)
    value = stat(images)
    values = np.asarray(redraws, dtype=float)
    values = values[~np.isnan(values)]
    if not np.isfinite(value):
        tail = 50.0 * (1.0 - confidence)
        return tuple(np.percentile(values, [tail, 100.0 - tail]))
    jack = np.array([stat(images[units != u]) for u in np.unique(units)])
    jack = jack[~np.isnan(jack)]
    tie = np.isclose(values, value, rtol=0, atol=1e-12 * max(1.0, abs(value)))
    share = (np.sum((values < value) & ~tie) + 0.5 * np.sum(tie)) / values.size
    z0 = norm.ppf(np.clip(share, 0.5 / values.size, 1 - 0.5 / values.size))
    u = jack.mean() - jack
    a = np.sum(u**3) / (6 * np.sum(u**2) ** 1.5) if np.sum(u**2) > 0 else 0.0
    z = norm.ppf([(1 - confidence) / 2, (1 + confidence) / 2])
    return tuple(np.percentile(values, 100 * norm.cdf(z0 + (z0 + z) / (1 - a * (z0 + z)))))


@pytest.fixture
def hand_bca():
    return bca_by_hand
