"""The DP-SGD step against independent truth: autograd on single examples, and plain SGD in the degenerate case."""

from __future__ import annotations

import math

import pytest
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from dpmed.training import DpSgdStep


def _tiny_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.GroupNorm(2, 4), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(),
        nn.Linear(16, 3),
    ).double()


def _loss(z, y):
    return F.cross_entropy(z, y, reduction="sum")


def _per_example_grads(model, x, y):
    """Explicit loop: one backward per example, the definition the engine must match."""
    out = []
    for i in range(len(x)):
        model.zero_grad()
        _loss(model(x[i:i + 1]), y[i:i + 1]).backward()
        out.append([p.grad.detach().clone() for p in model.parameters()])
    model.zero_grad()
    return out


def _data(n=6):
    g = torch.Generator().manual_seed(1)
    return torch.randn(n, 1, 8, 8, generator=g, dtype=torch.float64), torch.randint(0, 3, (n,), generator=g)


def test_noise_zero_and_no_clipping_equals_plain_sgd():
    """Degenerate case (as opacus privacy_engine_test): sigma = 0, C = inf gives the ordinary gradient of the
    summed loss divided by the expected batch size."""
    x, y = _data()
    reference = _tiny_model()
    _loss(reference(x), y).backward()
    expected = [p.grad / 4.0 for p in reference.parameters()]

    model = _tiny_model()
    step = DpSgdStep(model, loss_fn=_loss, max_grad_norm=math.inf, noise_multiplier=0.0, expected_batch_size=4.0,
                     physical_batch_size=4, noise_rng=np.random.default_rng(0))
    step(x, y)
    for p, e in zip(model.parameters(), expected, strict=True):
        torch.testing.assert_close(p.grad, e, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("clipped", ["every", "some", "no"])
@pytest.mark.parametrize("physical", [1, 4, 6])
@pytest.mark.parametrize("engine", ["dpmed", "opacus"])
def test_clipped_sum_matches_explicit_per_example_loop(clipped, physical, engine):
    """Clipping is per example over all parameters jointly; chunking for memory changes nothing. The clip is read
    from the examples' own norms (1.6 to 2.1 here), so that "some" sums clipped and unclipped examples in one chunk:
    a fixed clip of 0.5 clipped all six, and a step that left a batch unclipped unless every example in it
    exceeded C passed every case."""
    x, y = _data()
    model = _tiny_model()
    grads = _per_example_grads(model, x, y)
    norms = np.array([torch.sqrt(sum((t ** 2).sum() for t in g)).item() for g in grads])
    clip = {"every": 1e-3, "some": float(norms.mean()), "no": 1e3}[clipped]
    above = int((norms > clip).sum())
    assert {"every": above == len(norms), "some": 0 < above < len(norms), "no": above == 0}[clipped], norms
    expected = [torch.zeros_like(p) for p in model.parameters()]
    for g in grads:
        norm = torch.sqrt(sum((t ** 2).sum() for t in g))
        factor = min(1.0, clip / (norm.item() + 1e-6))
        for e, t in zip(expected, g, strict=True):
            e += factor * t
    step = DpSgdStep(model, loss_fn=_loss, max_grad_norm=clip, noise_multiplier=0.0, expected_batch_size=1.0,
                     physical_batch_size=physical, noise_rng=np.random.default_rng(0), engine=engine)
    got = step.clipped_sum(x, y)
    for a, b in zip(got, expected, strict=True):        # one sum per parameter, none left out
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)


def test_empty_batch_still_adds_noise_of_the_right_scale():
    """A Poisson batch can be empty; the accountant counted the step, so the noise must still be there."""
    model = nn.Linear(500, 4).double()
    step = DpSgdStep(model, loss_fn=_loss, max_grad_norm=2.0, noise_multiplier=1.5, expected_batch_size=10.0,
                     physical_batch_size=8, noise_rng=np.random.default_rng(3))
    step(torch.zeros(0, 500, dtype=torch.float64), torch.zeros(0, dtype=torch.int64))
    noise = torch.cat([p.grad.flatten() for p in model.parameters()]) * 10.0
    assert noise.abs().sum() > 0
    assert noise.std().item() == pytest.approx(1.5 * 2.0, rel=0.05)   # 2004 draws: std error ~1.6%
    assert noise.mean().item() == pytest.approx(0.0, abs=0.2)


def test_rejects_settings_without_meaning():
    model = _tiny_model()
    kwargs = dict(loss_fn=_loss, expected_batch_size=1.0, physical_batch_size=1, noise_rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="max_grad_norm"):
        DpSgdStep(model, max_grad_norm=0.0, noise_multiplier=1.0, **kwargs)
    with pytest.raises(ValueError, match="finite max_grad_norm"):
        DpSgdStep(_tiny_model(), max_grad_norm=math.inf, noise_multiplier=1.0, **kwargs)
    with pytest.raises(ValueError, match="engine must be one of"):
        DpSgdStep(_tiny_model(), max_grad_norm=1.0, noise_multiplier=1.0, engine="fast", **kwargs)
    for noise in ("laplacian", "Gaussian", "uniform"):     # else drawn as Gaussian noise on L2-clipped sums
        with pytest.raises(ValueError, match="noise must be 'gaussian'"):
            DpSgdStep(_tiny_model(), max_grad_norm=1.0, noise_multiplier=1.0, noise=noise, **kwargs)


@pytest.mark.parametrize("field, value", [("noise_multiplier", math.nan), ("noise_multiplier", math.inf),
                                          ("expected_batch_size", 0.0), ("expected_batch_size", math.nan),
                                          ("expected_batch_size", -4.0)])
def test_a_noise_or_divisor_without_meaning_is_refused_not_run(field, value):
    """A nan noise multiplier failed every comparison, so the step took it for sigma = 0 and added no noise at all
    (the ledger would record a nan sigma); an infinite one, or a divisor of 0, turns every weight into inf or nan."""
    kwargs = dict(loss_fn=_loss, max_grad_norm=1.0, noise_multiplier=1.0, expected_batch_size=4.0,
                  physical_batch_size=4, noise_rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match=field):
        DpSgdStep(_tiny_model(), **{**kwargs, field: value})


def _fail_once(monkeypatch, where: str, loss):
    """``loss``, or Opacus's Linear sampler, or the clip, made to raise once: a step that runs out of memory there."""
    left = [1]

    def once(call):
        def failing(*args, **kwargs):
            if left:
                left.pop()
                raise RuntimeError(f"CUDA out of memory (forced, in the {where})")
            return call(*args, **kwargs)
        return failing

    if where == "forward":
        return once(loss)
    if where == "backward":
        from opacus import GradSampleModule
        monkeypatch.setitem(GradSampleModule.GRAD_SAMPLERS, nn.Linear, once(GradSampleModule.GRAD_SAMPLERS[nn.Linear]))
    else:
        import dpmed.training.dp_sgd as dp_sgd
        monkeypatch.setattr(dp_sgd, "clip_factors", once(dp_sgd.clip_factors))
    return loss


@pytest.mark.parametrize("where", ["forward", "backward", "clip"])
def test_the_opacus_engine_steps_on_exactly_after_a_step_that_failed(monkeypatch, where):
    """A call that fails inside Opacus's engine leaves none of its batch behind. Opacus keeps state on the layers and
    parameters from its forward hooks to its backward ones (activations, forward counts, per-example gradients):
    after a failure the next call of the same step found counts that never returned to 0 (no per-example gradients,
    refused as a layer that is not batch-first) or an old per-example gradient beside the new one (a list, an
    AttributeError), and every later call failed too. The failed call's ``p.grad`` held its batch's gradient,
    unclipped and unnoised."""
    x, y = _data()
    settings = dict(max_grad_norm=1.0, noise_multiplier=0.0, expected_batch_size=1.0, physical_batch_size=6,
                    noise_rng=np.random.default_rng(0), engine="opacus")
    expected = DpSgdStep(_tiny_model(), loss_fn=_loss, **settings).clipped_sum(x, y)
    model = _tiny_model()
    step = DpSgdStep(model, loss_fn=_fail_once(monkeypatch, where, _loss), **settings)
    with pytest.raises(RuntimeError, match="forced"):
        step.clipped_sum(x, y)
    assert all(p.grad is None for p in model.parameters())
    for _ in range(2):
        for a, b in zip(step.clipped_sum(x, y), expected, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_a_retry_after_a_failed_opacus_step_may_take_a_smaller_batch_and_finds_no_trace_of_the_failed_one(
        monkeypatch):
    """The natural retry after running out of memory takes fewer examples (and Poisson batches vary in size anyway).
    Opacus sizes a layer's per-example gradients by the batch length it keeps on the layer from its backward hook,
    and keeps each forward's activations until their backward: left from a failed call, the stale length made the
    next, smaller batch's gradients the old batch's length (refused as not batch-first), and the failed batch's
    activations stayed on the model."""
    x, y = _data()
    settings = dict(max_grad_norm=1.0, noise_multiplier=0.0, expected_batch_size=1.0, physical_batch_size=6,
                    noise_rng=np.random.default_rng(0), engine="opacus")
    expected = DpSgdStep(_tiny_model(), loss_fn=_loss, **settings).clipped_sum(x[:3], y[:3])
    model = _tiny_model()
    step = DpSgdStep(model, loss_fn=_fail_once(monkeypatch, "backward", _loss), **settings)
    with pytest.raises(RuntimeError, match="forced"):
        step.clipped_sum(x, y)
    assert not [name for name, m in model.named_modules() if "activations" in m.__dict__]
    for a, b in zip(step.clipped_sum(x[:3], y[:3]), expected, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


class _SharedLayer(nn.Module):
    """One Linear applied twice: Opacus sums its two per-example gradients in ``_current_grad_sample`` across two
    backward hooks, promoting the sum only after the second."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.inner, self.out = nn.Linear(4, 4).double(), nn.Linear(4, 3).double()

    def forward(self, x):
        return self.out(torch.tanh(self.inner(torch.tanh(self.inner(x)))))


def test_a_failure_between_a_shared_layer_s_two_backward_hooks_adds_nothing_to_the_next_step(monkeypatch):
    """A step that failed after the shared layer's first backward hook left that half of its batch's per-example
    gradient on the parameter; the next call added its own to it, so the clipped sum carried a gradient of a batch
    that was never noised or counted."""
    from opacus import GradSampleModule

    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(5, 4, generator=g, dtype=torch.float64), torch.randint(0, 3, (5,), generator=g)
    settings = dict(loss_fn=_loss, max_grad_norm=1.0, noise_multiplier=0.0, expected_batch_size=1.0,
                    physical_batch_size=5, noise_rng=np.random.default_rng(0), engine="opacus")
    expected = DpSgdStep(_SharedLayer(), **settings).clipped_sum(x, y)
    calls, sampler = [], GradSampleModule.GRAD_SAMPLERS[nn.Linear]

    def third_fails(*args, **kwargs):        # out's hook, inner's second use, then inner's first use fails
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("CUDA out of memory (forced)")
        return sampler(*args, **kwargs)

    monkeypatch.setitem(GradSampleModule.GRAD_SAMPLERS, nn.Linear, third_fails)
    step = DpSgdStep(_SharedLayer(), **settings)
    with pytest.raises(RuntimeError, match="forced"):
        step.clipped_sum(x, y)
    assert len(calls) == 3
    for a, b in zip(step.clipped_sum(x, y), expected, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
