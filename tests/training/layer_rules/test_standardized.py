"""The weight-standardised convolution's rule (per-example gradients of the *raw* weights through the standardisation)
against independent truth in float64: torch's autograd through WSConv2d's own forward, one example at a time.

The registered-layer tests (test_clipping_engine.py, test_patient_clipping.py) run WSConv2d through every route and
both engines at fixed geometries; here: any geometry, each piece of the rule on its own, and the module itself."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from dpmed.models import WSConv2d, weight_standardize
from dpmed.models.standardized import standardize
from dpmed.training.clipping import ROUTES, GhostClipper
from dpmed.training.layer_rules import LAYER_RULES
from dpmed.training.layer_rules.standardized import _apply_jacobian


def _ce(z, y):
    return F.cross_entropy(z, y, reduction="sum")


def _close(got, expected, rtol=1e-9):
    for a, b in zip(got, expected, strict=True):
        assert (a - b).norm().item() <= rtol * b.norm().item() + 1e-12


def test_the_module_convolves_with_the_standardised_kernel():
    """Zero mean and unit (biased) variance per output channel, up to eps; the forward is a plain convolution with
    it; weight_standardize keeps every parameter (same tensors) and replaces only plain Conv2d layers."""
    torch.manual_seed(0)
    conv = WSConv2d(4, 6, 3, padding=1, groups=2).double()
    w_hat, s = standardize(conv.weight, conv.eps)
    flat = w_hat.reshape(6, -1)
    torch.testing.assert_close(flat.mean(1), torch.zeros(6, dtype=torch.float64), atol=1e-12, rtol=0)
    torch.testing.assert_close(flat.var(1, unbiased=False), torch.ones(6, dtype=torch.float64), atol=1e-3, rtol=0)
    x = torch.randn(2, 4, 5, 5, dtype=torch.float64)
    torch.testing.assert_close(conv(x), F.conv2d(x, w_hat, conv.bias, padding=1, groups=2))
    plain = nn.Sequential(nn.Conv2d(3, 4, 3), nn.GroupNorm(2, 4), nn.Conv1d(4, 4, 1))
    before = [id(p) for p in plain.parameters()]
    model = weight_standardize(plain)
    assert type(model[0]) is WSConv2d and type(model[2]) is nn.Conv1d
    assert [id(p) for p in model.parameters()] == before
    with pytest.raises(ValueError, match="at least 2 values"):
        WSConv2d(1, 3, 1)


def test_the_scale_has_eps_inside_the_root_and_a_constant_kernel_gives_zeros_not_nan():
    """timm's StdConv2d: s = sqrt(var + eps). Without eps a constant channel divides 0 by 0."""
    w = torch.randn(4, 2, 3, 3, dtype=torch.float64)
    _, s = standardize(w, 0.5)
    torch.testing.assert_close(s, (w.reshape(4, -1).var(1, unbiased=False) + 0.5).sqrt(), atol=1e-15, rtol=0)
    w_hat, s = standardize(torch.ones(2, 3, 3, 3, dtype=torch.float64), 1e-6)
    assert torch.equal(w_hat, torch.zeros_like(w_hat)) and torch.allclose(s, torch.full((2,), 1e-3).double())


@pytest.mark.parametrize("stride, padding_mode", [(2, "zeros"), (1, "reflect"), ((2, 1), "circular")])
def test_from_conv_keeps_the_convolutions_geometry(stride, padding_mode):
    """weight_standardize must not change where a kernel is applied: stride and padding mode as the layer had them
    (resnet9_ws above 64 px downsamples with stride 2)."""
    torch.manual_seed(0)
    conv = nn.Conv2d(2, 4, 3, stride=stride, padding=1, padding_mode=padding_mode).double()
    ws = WSConv2d.from_conv(conv)
    x = torch.randn(1, 2, 7, 7, dtype=torch.float64)
    expected = nn.Conv2d(2, 4, 3, stride=stride, padding=1, padding_mode=padding_mode).double()
    with torch.no_grad():
        expected.weight.copy_(standardize(conv.weight, ws.eps)[0])
        expected.bias.copy_(conv.bias)
    torch.testing.assert_close(ws(x), expected(x))


def test_a_printed_model_shows_each_standardised_convolution_with_its_eps():
    """The printed architecture (a run's log, a user's print(model)) tells a WS layer and its eps from a plain
    convolution's geometry."""
    printed = repr(weight_standardize(nn.Sequential(nn.Conv2d(1, 2, 3, padding=1)), eps=1e-4))
    assert "WSConv2d(1, 2, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), eps=0.0001)" in printed


def test_the_jacobian_is_autograds():
    """J^T G = (G - mean G - w_hat mean(G w_hat)) / s against autograd through `standardize`, batched."""
    torch.manual_seed(1)
    w = torch.randn(5, 3, 2, 2, dtype=torch.float64, requires_grad=True)
    grads = torch.randn(4, 5, 3, 2, 2, dtype=torch.float64)                    # four examples' grad of w_hat
    w_hat, s = standardize(w, 1e-6)
    for i in range(4):
        expected, = torch.autograd.grad(w_hat, w, grads[i], retain_graph=True)
        got = _apply_jacobian(grads[i].reshape(5, -1), w_hat.detach().reshape(5, -1), s.detach()).view_as(w)
        torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


@settings(max_examples=25, deadline=None)
@given(c_in=st.integers(1, 3), groups=st.sampled_from([1, 2]), c_out_per_group=st.integers(1, 3),
       kernel=st.integers(2, 3), stride=st.integers(1, 2), padding=st.integers(0, 2), dilation=st.integers(1, 2),
       bias=st.booleans(), mode=st.sampled_from(["zeros", "reflect"]), route=st.sampled_from(ROUTES),
       clip=st.floats(1e-3, 10.0))
def test_any_ws_geometry_matches_explicit_loop(c_in, groups, c_out_per_group, kernel, stride, padding, dilation,
                                               bias, mode, route, clip, unit_gradients, clipped):
    """Per-example norms (ghost: ||P g||^2 from per-channel Gram products and two functionals; materialised: J^T
    per example) and the book-kept clipped sum, against one autograd backward per example."""
    c_in, c_out = c_in * groups, c_out_per_group * groups
    torch.manual_seed(0)
    conv = WSConv2d(c_in, c_out, kernel, stride=stride, padding=padding, dilation=dilation, groups=groups,
                    bias=bias, padding_mode=mode if padding else "zeros")
    model = nn.Sequential(conv, nn.Tanh(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c_out, 2)).double()
    g = torch.Generator().manual_seed(3)
    x = torch.randn(3, c_in, 7, 7, generator=g, dtype=torch.float64)
    y = torch.tensor([0, 1, 1])
    expected = clipped(*unit_gradients(model, x, y), clip)
    _close(GhostClipper(model, route=route).clipped_sum(x, y, loss_fn=_ce, max_grad_norm=clip), expected)


@pytest.mark.parametrize("route", ["ghost", "materialised"])
def test_ws_pair_dots_give_the_norm_of_a_patients_sum(route, unit_gradients, clipped):
    """User-level clipping through a WS layer: the norm of a group's summed gradient (ghost: the pairs' dot
    products <P g_i, P g_j>; materialised: the per-example J^T G summed), against the group's own backward."""
    torch.manual_seed(2)
    model = nn.Sequential(WSConv2d(2, 4, 3, padding=1), nn.Tanh(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(4, 3)).double()
    x = torch.randn(6, 2, 6, 6, dtype=torch.float64)
    y = torch.tensor([0, 1, 2, 0, 1, 2])
    groups = torch.tensor([5, 9, 5, 5, 2, 9])
    norms, sums = unit_gradients(model, x, y, groups)
    clip = sorted(norms)[1]
    got = GhostClipper(model, route=route).clipped_sum(x, y, loss_fn=_ce, max_grad_norm=clip, groups=groups)
    _close(got, clipped(norms, sums, clip))


def test_ws_has_its_own_rule_not_the_convolutions():
    """The registry is keyed by exact type: a WSConv2d never falls to the plain convolution's rule, which would
    clip the gradient of the standardised kernel instead of the weights'."""
    assert LAYER_RULES[WSConv2d] is not LAYER_RULES[nn.Conv2d]
