"""Poisson sampling is what the accountant assumes: check its law, not just its type."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dpmed.training import dp_sgd_schedule, poisson_batches, shuffled_batches


def test_poisson_batch_sizes_follow_the_binomial_law():
    n, q, steps = 1000, 0.05, 2000
    sizes = np.array([len(b) for b in poisson_batches(n, sample_rate=q, steps=steps,
                                                      generator=torch.Generator().manual_seed(0))])
    assert sizes.mean() == pytest.approx(n * q, rel=0.02)
    assert sizes.var() == pytest.approx(n * q * (1 - q), rel=0.1)
    assert len(set(sizes.tolist())) > 10          # not a fixed batch size


def test_each_example_is_sampled_independently_at_rate_q():
    n, q, steps = 50, 0.2, 4000
    counts = np.zeros(n)
    for b in poisson_batches(n, sample_rate=q, steps=steps, generator=torch.Generator().manual_seed(1)):
        assert len(set(b.tolist())) == len(b)     # no example twice in one batch
        counts[b.numpy()] += 1
    assert np.allclose(counts / steps, q, atol=0.03)


def test_small_rates_give_empty_batches():
    sizes = [len(b) for b in poisson_batches(10, sample_rate=0.05, steps=200, generator=torch.Generator().manual_seed(2))]
    assert 0 in sizes


def test_shuffled_batches_cover_every_example_once():
    batches = list(shuffled_batches(10, batch_size=4, generator=torch.Generator().manual_seed(0)))
    assert [len(b) for b in batches] == [4, 4, 2]
    assert sorted(torch.cat(batches).tolist()) == list(range(10))


def test_schedule():
    assert dp_sgd_schedule(1000, batch_size=100, epochs=3) == (0.1, 30)
    with pytest.raises(ValueError, match="batch_size"):
        dp_sgd_schedule(10, batch_size=20, epochs=1)
    with pytest.raises(ValueError, match="sample_rate"):
        next(poisson_batches(10, sample_rate=0.0, steps=1, generator=torch.Generator()))
