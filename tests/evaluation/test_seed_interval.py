"""The Student t interval over seeds (`dpmed.evaluation.paired.seed_summary`): hand-worked values, one seed without
an interval, and a comparisons.json written before the interval still read."""

from __future__ import annotations

import numpy as np
import pytest

from dpmed.evaluation.paired import SeedSummary, seed_summary


def test_three_seeds_by_hand():
    # mean 0.82, sd 0.02 (ddof 1), t(0.975, 2 df) = 4.3027: half width 4.3027 * 0.02 / sqrt(3) = 0.04968
    s = seed_summary([0.80, 0.82, 0.84])
    assert (s.mean, s.std, s.min, s.max, s.n_seeds) == (pytest.approx(0.82), pytest.approx(0.02), 0.80, 0.84, 3)
    assert s.low == pytest.approx(0.82 - 0.04968, abs=1e-5)
    assert s.high == pytest.approx(0.82 + 0.04968, abs=1e-5)
    assert s.reason is None
    # the range (0.80, 0.84) is narrower than the interval: it is no interval
    assert s.low < s.min and s.high > s.max


def test_the_confidence_sets_the_t_quantile():
    # t(0.95, 2 df) = 2.9200 for a 90 % interval
    s = seed_summary([0.80, 0.82, 0.84], confidence=0.90)
    assert s.high - s.mean == pytest.approx(2.9200 * 0.02 / np.sqrt(3), abs=1e-5)


def test_an_interval_is_cut_to_the_range_the_values_can_take():
    """Two seeds (t 12.706): AUROC 0.5 and 0.9 give 0.7 +- 2.54, which printed as an AUROC from -1.8 to 3.2; cut to
    what an AUROC can be, [0, 1], it loses no coverage. A side within the range stays where t puts it."""
    wide = seed_summary([0.5, 0.9])
    assert wide.low == pytest.approx(0.7 - 12.7062 * np.std([0.5, 0.9], ddof=1) / np.sqrt(2), abs=1e-3)
    cut = seed_summary([0.5, 0.9], within=(0.0, 1.0))
    assert (cut.low, cut.high, cut.mean) == (0.0, 1.0, pytest.approx(0.7))
    one_side = seed_summary([0.97, 0.98, 0.99], within=(0.0, 1.0))
    assert one_side.low == pytest.approx(0.98 - 0.04968 / 2, abs=1e-5) and one_side.high == 1.0


def test_one_seed_has_no_interval_and_says_why():
    s = seed_summary([0.81])
    assert (s.mean, s.std, s.low, s.high, s.n_seeds) == (0.81, None, None, None, 1)
    assert "one seed" in s.reason
    assert not s.excludes_zero
    assert seed_summary([None, 0.81]).low is None          # a seed without the value does not count


def test_an_interval_excludes_zero_only_when_it_lies_on_one_side():
    assert seed_summary([-0.05, -0.04, -0.06]).excludes_zero         # -0.05 +- 0.025
    assert not seed_summary([-0.05, 0.01, -0.02]).excludes_zero      # -0.02 +- 0.075: all but one seed below 0


def test_a_summary_written_before_the_interval_reads_without_it():
    old = {"mean": 0.1, "std": 0.01, "min": 0.09, "max": 0.11, "n_seeds": 3}
    s = SeedSummary.model_validate(old)
    assert (s.low, s.high, s.reason) == (None, None, None)
    # a reader of the older fields finds them all, with their old names and values
    assert {k: v for k, v in seed_summary([0.09, 0.1, 0.11]).model_dump().items() if k in old} == pytest.approx(old)
