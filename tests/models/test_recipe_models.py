"""The recipe's models (METHODS.md s.9): weight-standardised variants (Qiao et al. 2019, as De et al. 2022 train
with) and ScatterNet (Tramer and Boneh 2021). The registry-wide tests (a DP-SGD step, exact clipping against an
explicit loop with both engines, Grad-CAM) already run them; here what makes each what it claims to be."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dpmed.models import WSConv2d, build_model
from dpmed.models import scatternet
from dpmed.models.scatternet import ScatterNet
from dpmed.training import DpSgdStep


@pytest.mark.parametrize(("ws", "plain"), [("small_cnn_ws", "small_cnn"), ("resnet9_ws", "resnet9")])
def test_ws_variants_standardise_every_convolution_and_keep_the_parameters(ws, plain):
    model = build_model(ws, in_channels=1, num_outputs=2, image_size=28)
    reference = build_model(plain, in_channels=1, num_outputs=2, image_size=28)
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert convs and all(type(m) is WSConv2d for m in convs)
    shapes = [(n, p.shape) for n, p in model.named_parameters()]
    assert shapes == [(n, p.shape) for n, p in reference.named_parameters()]


def test_a_standardised_kernel_is_the_hand_computed_one_with_timms_eps():
    """Two output channels of four values each. [1, 2, 3, 4]: mean 2.5, biased variance (2.25 + 0.25) * 2 / 4 =
    1.25; [0, 0, 0, 8]: mean 2, variance (3 * 4 + 36) / 4 = 12. Each value becomes (w - mean) / sqrt(var + 1e-6)
    (timm's StdConv2d), which a 2 x 2 convolution of a one-hot image reads out value by value."""
    conv = WSConv2d(1, 2, 2, bias=False).double()
    with torch.no_grad():
        conv.weight.copy_(torch.tensor([[1.0, 2.0, 3.0, 4.0], [0.0, 0.0, 0.0, 8.0]]).view(2, 1, 2, 2))
    expected = [[(w - 2.5) / (1.25 + 1e-6) ** 0.5 for w in (1, 2, 3, 4)],
                [(w - 2.0) / (12 + 1e-6) ** 0.5 for w in (0, 0, 0, 8)]]
    for position in range(4):
        x = torch.zeros(1, 1, 2, 2, dtype=torch.float64)
        x.view(-1)[position] = 1.0
        out = conv(x).flatten()
        for c in range(2):
            assert out[c].item() == pytest.approx(expected[c][position], rel=1e-12, abs=1e-15), (c, position)


@pytest.mark.parametrize("name", ["scatternet_linear", "scatternet_cnn"])
def test_the_scattering_front_end_is_frozen_and_only_the_head_trains(name):
    """No parameter in the scattering transform; its filters are constant buffers, which a DP-SGD step leaves
    unchanged (the step refuses any buffer it changed); the trainable part is the GroupNorm and the head."""
    torch.manual_seed(0)
    model = build_model(name, in_channels=1, num_outputs=2, image_size=28)
    assert isinstance(model, ScatterNet) and not list(model.scattering.parameters())
    assert list(model.scattering.buffers())
    trainable = {n.split(".")[0] for n, p in model.named_parameters() if p.requires_grad}
    assert trainable <= {"norm", "features", "head"} and model.norm.num_channels == 81
    x = torch.rand(4, 1, 28, 28)
    before = [p.detach().clone() for p in model.parameters()]
    step = DpSgdStep(model, loss_fn=lambda z, y: F.cross_entropy(z, y, reduction="sum"), max_grad_norm=1.0,
                     noise_multiplier=0.5, expected_batch_size=4.0, physical_batch_size=4,
                     noise_rng=np.random.default_rng(0))
    step(x, torch.tensor([0, 1, 0, 1]))
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert model(x).shape == (4, 2)


def test_scatternet_heads_are_the_ones_the_module_describes():
    """Linear: a trainable GroupNorm of 27 groups, then the features as they are, flattened, into one linear layer
    (the default head). CNN: conv-GroupNorm-ReLU, an average pool, conv-GroupNorm-ReLU at width 64, then a global
    max pool (a single bright pixel survives it whole). Gradients reach the input (attacks and saliency need them)."""
    linear = build_model("scatternet_linear", in_channels=1, num_outputs=2, image_size=28)
    assert linear.norm.num_groups == 27 and linear.norm.affine
    assert {n.split(".")[0] for n, _ in linear.named_parameters()} == {"norm", "head"}
    z = torch.randn(1, 81, 7, 7)
    assert torch.equal(linear.features(z), z) and linear.head.in_features == 81 * 7 * 7
    assert ScatterNet(1, 2, 28).head.in_features == 81 * 7 * 7
    cnn = build_model("scatternet_cnn", in_channels=1, num_outputs=2, image_size=28)
    assert [type(layer) for layer in cnn.features] == [nn.Conv2d, nn.GroupNorm, nn.ReLU, nn.AvgPool2d, nn.Conv2d,
                                                       nn.GroupNorm, nn.ReLU]
    assert cnn.head.in_features == 64
    hot = torch.zeros(1, 64, 3, 3)
    hot[0, 5, 2, 1] = 5.0
    assert cnn.pool(hot)[0, 5].item() == 5.0
    seen = []
    cnn.features.register_forward_hook(lambda module, args, out: seen.append(out.shape))
    x = torch.rand(2, 1, 28, 28, requires_grad=True)
    cnn(x).sum().backward()
    assert seen == [(2, 64, 3, 3)] and x.grad is not None and x.grad.abs().sum() > 0


def test_scatternet_features_are_the_wavelet_coefficients_at_a_quarter_of_the_size():
    model = build_model("scatternet_linear", in_channels=3, num_outputs=5, image_size=64)
    assert model.norm.num_channels == 3 * 81 and model.head.in_features == 3 * 81 * 16 * 16
    with pytest.raises(ValueError, match="at least 4 px"):
        ScatterNet(1, 2, 3)


@pytest.fixture
def fresh_scattering_banks():
    """The per-process filter banks emptied before and after: a test that counts kymatio's builds, or swaps its
    class, must neither find nor leave one."""
    scatternet._scattering_bank.cache_clear()
    yield
    scatternet._scattering_bank.cache_clear()


def test_a_scatternet_built_again_has_the_bits_of_one_built_from_kymatio_alone(monkeypatch):
    """The second model of a size takes its filters from the first build's bank: the same bits as kymatio's own
    filters, and the whole model (seeded alike) the same outputs as one whose transform kymatio built afresh."""
    from kymatio.scattering2d.frontend.torch_frontend import ScatteringTorch2D

    for _ in range(2):
        kept = build_model("scatternet_cnn", in_channels=1, num_outputs=2, image_size=28, seed=0)
    own = dict(ScatteringTorch2D(J=scatternet.SCATTER_J, shape=(28, 28), L=scatternet.SCATTER_L).named_buffers())
    ours = dict(kept.scattering.named_buffers())
    assert ours.keys() == own.keys() and all(torch.equal(ours[k], own[k]) for k in own)
    monkeypatch.setattr(scatternet, "_scattering", scatternet._scattering_bank.__wrapped__)
    afresh = build_model("scatternet_cnn", in_channels=1, num_outputs=2, image_size=28, seed=0)
    x = torch.rand(3, 1, 28, 28)
    with torch.no_grad():
        assert torch.equal(kept(x), afresh(x))
    assert all(torch.equal(a, b) for a, b in zip(kept.state_dict().values(), afresh.state_dict().values(),
                                                 strict=True))


def test_the_filter_bank_is_built_once_per_size_and_each_model_holds_its_own_copy(monkeypatch,
                                                                                  fresh_scattering_banks):
    """kymatio's filters take a minute to build at 224 px on a loaded CPU, and a study builds the model for every
    run: they are built once per size in a process. Every model still holds tensors of its own, so converting one
    (``.double()``, as ``.to(device)`` moves it) or changing one in place leaves the next model as kymatio built it."""
    from kymatio.scattering2d.frontend import torch_frontend

    built = []

    class Counted(torch_frontend.ScatteringTorch2D):
        def __init__(self, *args, **kwargs):
            built.append(kwargs["shape"])
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(torch_frontend, "ScatteringTorch2D", Counted)
    first = build_model("scatternet_linear", in_channels=1, num_outputs=2, image_size=12)
    second = build_model("scatternet_cnn", in_channels=1, num_outputs=2, image_size=12)
    build_model("scatternet_cnn", in_channels=1, num_outputs=2, image_size=16)
    assert built == [(12, 12), (16, 16)]
    pointers = {t.data_ptr() for t in first.scattering.buffers()}
    assert pointers and not pointers & {t.data_ptr() for t in second.scattering.buffers()}
    expected = [t.clone() for t in second.scattering.buffers()]
    first.double()
    for t in second.scattering.buffers():
        t.add_(1.0)
    third = build_model("scatternet_cnn", in_channels=1, num_outputs=2, image_size=12)
    assert all(a.dtype == torch.float32 and torch.equal(a, b)
               for a, b in zip(third.scattering.buffers(), expected, strict=True))
    assert built == [(12, 12), (16, 16)]
