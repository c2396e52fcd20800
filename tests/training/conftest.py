"""What the training-loop tests share: a small phantom and a model built the same way each time (as a resumed
process would rebuild it); and the clipping tests' small models, one or a few layer types each, with the explicit
per-example and per-patient loops they are checked against."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dpmed.data.synthetic import make_phantom
from dpmed.models import WSConv2d, build_model


@pytest.fixture(scope="module")
def data():
    """The training split of a 120-image phantom at 16 px, and its task."""
    ds = make_phantom(n_images=120, image_size=16, seed=0)
    return ds.train, ds.task


@pytest.fixture(scope="module")
def new_model():
    """``new_model(task)``: small_cnn for 16 px grey images, from the same initial weights every call (it holds no
    state, so module fixtures may build with it too)."""
    def build(task):
        torch.manual_seed(0)
        return build_model("small_cnn", in_channels=1, num_outputs=task.num_outputs, image_size=16)
    return build


# --------------------------------------------------- the clipping tests' layer cases and their independent truth

class _Tokens(nn.Module):
    """Embedding (with a padding row) -> LayerNorm -> Linear over the sequence -> mean -> Linear."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(11, 6, padding_idx=0)
        self.norm = nn.LayerNorm(6)
        self.mix = nn.Linear(6, 5)
        self.head = nn.Linear(5, 3)

    def forward(self, x):
        return self.head(torch.tanh(self.mix(self.norm(self.embed(x)))).mean(1))


class _Twice(nn.Module):
    """One Linear called twice: its per-example gradient is the sum over its calls."""

    def __init__(self):
        super().__init__()
        self.flat = nn.Flatten()
        self.shared = nn.Linear(98, 98)
        self.head = nn.Linear(98, 3)

    def forward(self, x):
        return self.head(self.shared(torch.tanh(self.shared(self.flat(x)))))


def _images(c=2, hw=7):
    return lambda n, g: torch.randn(n, c, hw, hw, generator=g, dtype=torch.float64)


def _conv_net(conv: nn.Module, c_out: int) -> nn.Module:
    return nn.Sequential(conv, nn.Tanh(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c_out, 3))


def _frozen(model: nn.Module, *names: str) -> nn.Module:
    """``model`` with the named parameters frozen: layers that train their weight alone or their bias alone."""
    for name in names:
        model.get_parameter(name).requires_grad_(False)
    return model


# name -> (model factory, input factory(n, generator), the layer types it exercises)
_LAYER_CASES = {
    "linear": (lambda: nn.Sequential(nn.Flatten(), nn.Linear(98, 4), nn.Tanh(), nn.Linear(4, 3)), _images(),
               {nn.Linear}),
    "linear_no_bias": (lambda: nn.Sequential(nn.Flatten(), nn.Linear(98, 3, bias=False)), _images(), {nn.Linear}),
    "linear_no_bias_called_twice": (_Twice, _images(), {nn.Linear}),
    "conv2d": (lambda: _conv_net(nn.Conv2d(2, 4, 3, padding=1), 4), _images(), {nn.Conv2d}),
    "conv2d_stride_dilation": (lambda: _conv_net(nn.Conv2d(2, 4, 3, stride=2, padding=2, dilation=2), 4),
                               _images(), {nn.Conv2d}),
    "conv2d_groups_no_bias": (lambda: _conv_net(nn.Conv2d(4, 6, (3, 2), groups=2, bias=False), 6), _images(c=4),
                              {nn.Conv2d}),
    "conv2d_same_reflect": (lambda: _conv_net(nn.Conv2d(2, 3, 4, padding="same", padding_mode="reflect"), 3),
                            _images(), {nn.Conv2d}),
    "conv2d_circular": (lambda: _conv_net(nn.Conv2d(2, 3, 3, padding=1, padding_mode="circular"), 3),
                        _images(), {nn.Conv2d}),
    "conv1d": (lambda: nn.Sequential(nn.Flatten(2), nn.Conv1d(2, 4, 5, stride=2, padding=1), nn.Tanh(),
                                     nn.Flatten(), nn.Linear(4 * 24, 3)), _images(), {nn.Conv1d}),
    "group_norm": (lambda: nn.Sequential(nn.Conv2d(2, 4, 3), nn.GroupNorm(2, 4), nn.ReLU(), nn.Flatten(),
                                         nn.Linear(100, 3)), _images(), {nn.Conv2d, nn.GroupNorm}),
    "layer_norm_image": (lambda: nn.Sequential(nn.Conv2d(2, 3, 3), nn.LayerNorm([3, 5, 5]), nn.Flatten(),
                                               nn.Linear(75, 3)), _images(), {nn.LayerNorm}),
    "tokens": (_Tokens, lambda n, g: torch.randint(0, 11, (n, 9), generator=g), {nn.Embedding, nn.LayerNorm}),
    "embedding_no_padding_weight_only_norm": (
        lambda: nn.Sequential(nn.Embedding(8, 4), nn.LayerNorm(4, bias=False), nn.Flatten(), nn.Linear(4 * 6, 3)),
        lambda n, g: torch.randint(0, 8, (n, 6), generator=g), {nn.Embedding, nn.LayerNorm}),
    "ws_conv2d": (lambda: _conv_net(WSConv2d(2, 4, 3, padding=1), 4), _images(), {WSConv2d}),
    "ws_conv2d_groups_stride_no_bias": (
        lambda: _conv_net(WSConv2d(4, 6, (3, 2), stride=2, groups=2, bias=False), 6), _images(c=4), {WSConv2d}),
    "ws_conv2d_reflect_group_norm": (
        lambda: nn.Sequential(WSConv2d(2, 4, 3, padding=1, padding_mode="reflect"), nn.GroupNorm(2, 4), nn.ReLU(),
                              nn.Flatten(), nn.Linear(196, 3)), _images(), {WSConv2d, nn.GroupNorm}),
    "group_norm_one_group_and_per_channel": (
        lambda: nn.Sequential(nn.Conv2d(2, 6, 3, padding=1), nn.GroupNorm(1, 6), nn.SiLU(), nn.Conv2d(6, 4, 3),
                              nn.GroupNorm(4, 4), nn.Flatten(), nn.Linear(100, 3)),
        _images(), {nn.Conv2d, nn.GroupNorm}),
    "linear_bias_only_then_weight_only": (
        lambda: _frozen(nn.Sequential(nn.Flatten(), nn.Linear(98, 4), nn.Tanh(), nn.Linear(4, 3)),
                        "1.weight", "3.bias"),
        _images(), {nn.Linear}),
    "conv2d_and_ws_conv2d_bias_only": (
        lambda: _frozen(nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.Tanh(), WSConv2d(4, 4, 3), nn.Tanh(),
                                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3)), "0.weight", "2.weight"),
        _images(), {nn.Conv2d, WSConv2d}),
    "group_norm_weight_only_layer_norm_bias_only": (
        lambda: _frozen(nn.Sequential(nn.Conv2d(2, 4, 3), nn.GroupNorm(2, 4), nn.ReLU(), nn.LayerNorm([4, 5, 5]),
                                      nn.Flatten(), nn.Linear(100, 3)), "1.bias", "3.weight"),
        _images(), {nn.Conv2d, nn.GroupNorm, nn.LayerNorm}),
}


@pytest.fixture(scope="session")
def layer_cases():
    """{case name: the layer types its model exercises}."""
    return {name: types for name, (_, _, types) in _LAYER_CASES.items()}


@pytest.fixture(params=sorted(_LAYER_CASES))
def layer_name(request):
    """Each layer case's name in turn: a test that takes it runs once per case."""
    return request.param


@pytest.fixture(scope="session")
def layer_case():
    """``layer_case(name, n)``: the case's model in float64 (the same initial weights every call), n inputs and n
    labels of 3 classes."""
    def build(name, n):
        make_model, inputs, _ = _LAYER_CASES[name]
        torch.manual_seed(0)
        model = make_model().double()
        g = torch.Generator().manual_seed(1)
        return model, inputs(n, g), torch.randint(0, 3, (n,), generator=g)
    return build


def _ce(z, y):
    return F.cross_entropy(z, y, reduction="sum")


def _unit_gradients(model, x, y, groups=None, order=2):
    """The definition, the slow way: per unit (each example, or with ``groups`` each patient's images in ascending
    id order), one backward of the summed cross-entropy over the unit; returns the units' norms and gradients."""
    params = [p for p in model.parameters() if p.requires_grad]
    units = ([slice(i, i + 1) for i in range(len(x))] if groups is None
             else [groups == pid for pid in torch.unique(groups).tolist()])
    norms, grads = [], []
    for rows in units:
        g = torch.autograd.grad(_ce(model(x[rows]), y[rows]), params, allow_unused=True)
        g = [torch.zeros_like(p) if t is None else t for p, t in zip(params, g, strict=True)]
        grads.append(g)
        norms.append(torch.cat([t.flatten() for t in g]).norm(p=order).item())
    return norms, grads


def _clipped(norms, grads, clip):
    """sum_u min(1, C / (||g_u|| + 1e-6)) g_u."""
    total = [torch.zeros_like(t) for t in grads[0]]
    for n, g in zip(norms, grads, strict=True):
        for acc, t in zip(total, g, strict=True):
            acc += min(1.0, clip / (n + 1e-6)) * t
    return total


@pytest.fixture(scope="session")
def unit_gradients():
    """``unit_gradients(model, x, y, groups=None, order=2)`` -> (norms, gradients): one backward per example, or
    per patient with ``groups``, of the summed cross-entropy; what the clipping engines are held to."""
    return _unit_gradients


@pytest.fixture(scope="session")
def clipped():
    """``clipped(norms, gradients, clip)``: the clipped sum of unit_gradients' gradients, by the definition."""
    return _clipped
