"""Poisson sampling is what the accountant assumes: check its law, its exact rate and its source."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import torch

from dpmed.randomness import PrivacyRandomness, poisson_mask
from dpmed.training import dp_sgd_schedule, poisson_batches, shuffled_batches
from dpmed.training.sampling import fixed_size_batches


def _rng(name: str = "t") -> np.random.Generator:
    return PrivacyRandomness.reproducible(seed=0, run_id=name).stream("sampling")


def test_poisson_batch_sizes_follow_the_binomial_law():
    n, q, steps = 1000, 0.05, 2000
    sizes = np.array([len(b) for b in poisson_batches(n, sample_rate=q, steps=steps, rng=_rng())])
    assert sizes.mean() == pytest.approx(n * q, rel=0.02)
    assert sizes.var() == pytest.approx(n * q * (1 - q), rel=0.1)
    assert len(set(sizes.tolist())) > 10          # not a fixed batch size


def test_each_example_is_sampled_independently_at_rate_q():
    n, q, steps = 50, 0.2, 4000
    counts = np.zeros(n)
    pairs = 0
    for b in poisson_batches(n, sample_rate=q, steps=steps, rng=_rng("independent")):
        assert len(set(b.tolist())) == len(b)     # no example twice in one batch
        counts[b] += 1
        pairs += int(0 in b and 1 in b)
    assert np.allclose(counts / steps, q, atol=0.03)
    assert pairs / steps == pytest.approx(q * q, abs=0.015)   # joint inclusion factorises


def test_small_rates_give_empty_batches():
    sizes = [len(b) for b in poisson_batches(10, sample_rate=0.05, steps=200, rng=_rng("small"))]
    assert 0 in sizes


class _Raw:
    """A bit generator stand-in whose raw 64-bit draws are given (to test the comparison exactly)."""

    def __init__(self, values):
        self.values = np.asarray(values, dtype=np.uint64)

    def random_raw(self, n):
        assert n == len(self.values)
        return self.values


class _FakeGenerator:
    def __init__(self, values):
        self.bit_generator = _Raw(values)


@pytest.mark.parametrize("q", [1e-6, 3e-8, 0.3, 1 / 3, 2 ** -24 + 2 ** -30, 0.5, 0.75, 1 - 2 ** -40])
def test_inclusion_probability_is_floor_q_2_64_never_more(q):
    """The rate is the fraction of 64-bit draws below the threshold: exactly floor(q 2^64) / 2^64 <= q. Probed at
    the threshold's edges with raw draws, so the test needs no billions of samples (a float32 uniform would include
    a draw of q's rounded-up grid point)."""
    threshold = int(Fraction(q) * (1 << 64))
    assert Fraction(threshold, 1 << 64) <= Fraction(q) < Fraction(threshold + 1, 1 << 64)
    mask = poisson_mask(_FakeGenerator([0, threshold - 1, threshold, threshold + 1, 2 ** 64 - 1]), 5, q)
    assert mask.tolist() == [True, True, False, False, False]


def test_rate_one_takes_everything_and_bad_rates_are_refused():
    assert poisson_mask(_rng(), 7, 1.0).all()
    for q in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="sample_rate"):
            poisson_mask(_rng(), 7, q)
    with pytest.raises(ValueError, match="sample_rate"):
        next(poisson_batches(10, sample_rate=0.0, steps=1, rng=_rng()))


def test_shuffled_batches_cover_every_example_once():
    batches = list(shuffled_batches(10, batch_size=4, generator=torch.Generator().manual_seed(0)))
    assert [len(b) for b in batches] == [4, 4, 2]
    assert sorted(torch.cat(batches).tolist()) == list(range(10))


def test_fixed_size_batches_are_epochs_of_a_permutation():
    batches = list(fixed_size_batches(10, batch_size=4, steps=5, rng=_rng("shuffle")))
    assert [len(b) for b in batches] == [4, 4, 2, 4, 4]
    assert sorted(np.concatenate(batches[:3]).tolist()) == list(range(10))
    epochs = list(fixed_size_batches(10, batch_size=10, steps=6, rng=_rng("shuffle")))
    assert all(sorted(e.tolist()) == list(range(10)) for e in epochs)
    assert len({tuple(e.tolist()) for e in epochs}) > 1            # each epoch shuffles anew, not one order repeated


def test_poisson_batches_are_one_mask_a_step_at_exactly_the_rate_given():
    """Step by step the indices of `poisson_mask` at q itself, drawn in turn from the same stream: the exact rate
    the accountant is told (the law tests above could not see a rate 1 % off), a fresh draw every step."""
    n, q, steps = 40, 0.3, 25
    expected_rng = _rng("exact")
    expected = [np.flatnonzero(poisson_mask(expected_rng, n, q)) for _ in range(steps)]
    batches = list(poisson_batches(n, sample_rate=q, steps=steps, rng=_rng("exact")))
    assert len(batches) == steps
    assert all(np.array_equal(b, e) for b, e in zip(batches, expected, strict=True))


def test_schedule():
    assert dp_sgd_schedule(1000, batch_size=100, epochs=3) == (0.1, 30)
    with pytest.raises(ValueError, match="batch_size"):
        dp_sgd_schedule(10, batch_size=20, epochs=1)
