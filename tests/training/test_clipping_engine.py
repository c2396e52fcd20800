"""dpmed's clipping engine against independent truth: an explicit per-example autograd loop, in float64.

The engine never forms most per-example gradients; these tests form every one of them the slow, obvious way (one
backward per example) and require the clipped sum to agree to 1e-5 relative, for each supported layer type
(parametrized over the same registry the engine uses), each route (ghost, materialised, mixed), each registered
model, clip levels that clip all, some or none of the examples, and randomly drawn convolution geometries.
"""

from __future__ import annotations

import math
import warnings

import pytest
import numpy as np
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from dpmed.errors import PrivacyError
from dpmed.models import build_model, list_models
from dpmed.models.standardized import WSConv2d
from dpmed.training import DpSgdStep
from dpmed.training.clipping import ROUTES, GhostClipper, clip_factors
from dpmed.training.dp_sgd import OpacusClipper
from dpmed.training.layer_rules import LAYER_RULES
from dpmed.training.layer_rules.rule import CHUNK_ELEMENTS, GPU_CHUNK_ELEMENTS, split_batch

RTOL = 1e-5


def _ce(z, y):
    return F.cross_entropy(z, y, reduction="sum")


def _assert_close(got, expected):
    for a, b in zip(got, expected, strict=True):
        scale = b.norm().item()
        err = (a - b).norm().item()
        assert err <= RTOL * scale + 1e-12, f"relative error {err / max(scale, 1e-300):.2e}"


# --------------------------------------------------------------------------------------------- one layer at a time

def test_every_registered_layer_type_has_a_case(layer_cases):
    """The layer cases (conftest.py) are those of both the image-level and the patient-level tests."""
    assert set(LAYER_RULES) <= set().union(*layer_cases.values())
    # the layer types the engine promises (issue 7), each with a rule and a case
    assert {nn.Conv2d, nn.Linear, nn.GroupNorm, nn.LayerNorm, nn.Embedding} <= set(LAYER_RULES)


def test_a_rule_binds_only_the_layer_types_it_is_written_for():
    """Each rule is registered for the layer types it names, and refuses to bind a layer of another type, whose
    attributes its functions would misread."""
    for layer_type, rule in LAYER_RULES.items():
        assert layer_type in rule.layers
    with pytest.raises(TypeError, match="Conv2d is none of this rule's layer types"):
        LAYER_RULES[nn.Linear].bind(nn.Conv2d(1, 1, 1))


def test_the_benchmarked_models_are_among_those_tested():
    """small_cnn, ResNet-9 and ResNet-18 (GroupNorm) are what the benchmark and the studies train."""
    assert {"small_cnn", "resnet9", "resnet18"} <= set(list_models())


@pytest.mark.parametrize("route", ROUTES)
def test_layer_clipped_sum_matches_explicit_loop(layer_name, route, layer_case, unit_gradients, clipped):
    """Three clip levels: below every norm (all examples clipped), the median norm (some clipped, some below the
    clip) and above every norm (none clipped: the plain gradient of the summed loss)."""
    model, x, y = layer_case(layer_name, 5)
    norms, grads = unit_gradients(model, x, y)
    median = sorted(norms)[len(norms) // 2]
    assert 0 < min(norms) < median < max(norms)
    engine = GhostClipper(model, route=route)
    for clip in (min(norms) / 2, median, 2 * max(norms)):
        got = engine.clipped_sum(x, y, loss_fn=_ce, max_grad_norm=clip)
        _assert_close(got, clipped(norms, grads, clip))
    params = [p for p in model.parameters() if p.requires_grad]
    plain = torch.autograd.grad(_ce(model(x), y), params, allow_unused=True)
    plain = [torch.zeros_like(p) if t is None else t for p, t in zip(params, plain, strict=True)]
    _assert_close(engine.clipped_sum(x, y, loss_fn=_ce, max_grad_norm=math.inf), plain)


@pytest.mark.parametrize("route", ROUTES)
def test_layer_clipped_sum_matches_explicit_loop_one_example_per_chunk(layer_name, route, monkeypatch, layer_case,
                                                                       unit_gradients, clipped):
    """The cases above fit one chunk of transient memory; with a bound of one element every intermediate is cut
    into one-example chunks, so the chunked loops (and the pair chunks of the mixed route) are what is tested."""
    monkeypatch.setattr("dpmed.training.layer_rules.rule.CHUNK_ELEMENTS", 1)
    model, x, y = layer_case(layer_name, 5)
    norms, grads = unit_gradients(model, x, y)
    median = sorted(norms)[len(norms) // 2]
    got = GhostClipper(model, route=route).clipped_sum(x, y, loss_fn=_ce, max_grad_norm=median)
    _assert_close(got, clipped(norms, grads, median))


def test_the_chunk_bound_is_larger_on_a_gpu():
    """A CUDA device gets the larger bound (no GPU needed: the device is only read); every other device, the CPU's."""
    per_example = CHUNK_ELEMENTS // 4
    assert split_batch(64, per_example, torch.device("cpu")) == [slice(i, i + 4) for i in range(0, 64, 4)]
    assert split_batch(64, per_example, torch.device("meta")) == split_batch(64, per_example, torch.device("cpu"))
    assert split_batch(64, per_example, torch.device("cuda")) == [slice(0, 64)]
    assert split_batch(3, 10 * GPU_CHUNK_ELEMENTS, torch.device("cuda")) == [slice(0, 1), slice(1, 2), slice(2, 3)]


@pytest.mark.parametrize("name", ["tokens", "conv2d_groups_no_bias", "group_norm"])
def test_l1_clipping_matches_explicit_loop(name, layer_case, unit_gradients, clipped):
    """Laplace DP-SGD clips in L1; the engine materialises the per-example gradients it needs for that."""
    model, x, y = layer_case(name, 5)
    norms, grads = unit_gradients(model, x, y, order=1)
    clip = sorted(norms)[len(norms) // 2]
    got = GhostClipper(model, norm_order=1).clipped_sum(x, y, loss_fn=_ce, max_grad_norm=clip)
    _assert_close(got, clipped(norms, grads, clip))


def test_a_layer_called_twice_sums_its_calls_per_example(unit_gradients, clipped):
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.shared = nn.Linear(4, 4)
            self.head = nn.Linear(4, 3)

        def forward(self, x):
            return self.head(self.shared(torch.tanh(self.shared(x))))

    torch.manual_seed(0)
    model = Twice().double()
    x, y = torch.randn(5, 4, dtype=torch.float64), torch.tensor([0, 1, 2, 0, 1])
    expected = clipped(*unit_gradients(model, x, y), 0.3)
    _assert_close(GhostClipper(model).clipped_sum(x, y, loss_fn=_ce, max_grad_norm=0.3), expected)


def test_a_layer_also_called_without_grad_is_clipped_by_its_call_with_grad(unit_gradients, clipped):
    """A call under no_grad (a user's forward that reads a layer's output as a constant) adds nothing to the
    layer's per-example gradient: only the call that reaches the loss through autograd counts."""
    class Detached(nn.Module):
        def __init__(self):
            super().__init__()
            self.shared = nn.Linear(4, 3)

        def forward(self, x):
            with torch.no_grad():
                scale = 1 + self.shared(x).square().mean(1, keepdim=True)
            return self.shared(x) / scale

    torch.manual_seed(0)
    model = Detached().double()
    x, y = torch.randn(5, 4, dtype=torch.float64), torch.tensor([0, 1, 2, 0, 1])
    norms, grads = unit_gradients(model, x, y)
    assert min(norms) < 1.5 < max(norms)
    _assert_close(GhostClipper(model).clipped_sum(x, y, loss_fn=_ce, max_grad_norm=1.5), clipped(norms, grads, 1.5))


def test_frozen_parameters_are_left_out(layer_case, unit_gradients, clipped):
    model, x, y = layer_case("group_norm", 5)
    model[0].bias.requires_grad_(False)
    model[1].weight.requires_grad_(False)
    expected = clipped(*unit_gradients(model, x, y), 0.1)
    got = GhostClipper(model).clipped_sum(x, y, loss_fn=_ce, max_grad_norm=0.1)
    assert len(got) == sum(p.requires_grad for p in model.parameters())
    _assert_close(got, expected)


# ------------------------------------------------------------------------------------------- the registered models

@pytest.mark.parametrize("name", list_models())
def test_model_clipped_sum_matches_explicit_loop(name, unit_gradients, clipped):
    """Every registered model, float64, 10 px: all examples clipped (1e-4), some (median norm), none (1e4)."""
    model = build_model(name, in_channels=3, num_outputs=3, image_size=10, seed=0).double()
    g = torch.Generator().manual_seed(2)
    x = torch.randn(3, 3, 10, 10, generator=g, dtype=torch.float64)
    y = torch.tensor([0, 1, 2])
    norms, grads = unit_gradients(model, x, y)
    median = sorted(norms)[len(norms) // 2]
    assert min(norms) < median < max(norms) < 1e4
    engine = GhostClipper(model)
    for clip in (1e-4, median, 1e4):
        _assert_close(engine.clipped_sum(x, y, loss_fn=_ce, max_grad_norm=clip), clipped(norms, grads, clip))


# ------------------------------------------------------------------------------------- the step: same as Opacus's

def test_noise_zero_and_no_clipping_equals_plain_gradient(layer_case):
    """Degenerate case (opacus privacy_engine_test): sigma = 0, C = inf is the plain gradient of the summed loss
    divided by the expected batch size, with the physical batch split in two."""
    model, x, y = layer_case("group_norm", 5)
    _ce(model(x), y).backward()
    expected = [p.grad / 4.0 for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    step = DpSgdStep(model, loss_fn=_ce, max_grad_norm=math.inf, noise_multiplier=0.0, expected_batch_size=4.0,
                     physical_batch_size=3, noise_rng=np.random.default_rng(0), engine="dpmed")
    step(x, y)
    for p, e in zip(model.parameters(), expected, strict=True):
        torch.testing.assert_close(p.grad, e, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("noise", ["gaussian", "laplace"])
def test_engines_give_the_same_noisy_gradient(noise, layer_case):
    """Same generator seed, same examples: dpmed's engine and Opacus's leave the same p.grad (noise included)."""
    grads = {}
    for engine in ("dpmed", "opacus"):
        model, x, y = layer_case("group_norm", 5)
        step = DpSgdStep(model, loss_fn=_ce, max_grad_norm=0.5, noise_multiplier=0.7, expected_batch_size=4.0,
                         physical_batch_size=2, noise_rng=np.random.default_rng(5), noise=noise,
                         engine=engine)
        step(x, y)
        grads[engine] = [p.grad for p in model.parameters()]
    _assert_close(grads["dpmed"], grads["opacus"])


def test_empty_batch_still_gets_noise():
    model = nn.Linear(300, 4).double()
    step = DpSgdStep(model, loss_fn=_ce, max_grad_norm=2.0, noise_multiplier=1.5, expected_batch_size=10.0,
                     physical_batch_size=8, noise_rng=np.random.default_rng(3), engine="dpmed")
    step(torch.zeros(0, 300, dtype=torch.float64), torch.zeros(0, dtype=torch.int64))
    noise = torch.cat([p.grad.flatten() for p in model.parameters()]) * 10.0
    assert noise.std().item() == pytest.approx(3.0, rel=0.1)


def test_the_model_is_left_as_it_was(layer_case):
    model, x, y = layer_case("conv2d", 5)
    GhostClipper(model).clipped_sum(x, y, loss_fn=_ce, max_grad_norm=1.0)
    assert all(p.grad is None for p in model.parameters())
    assert not any(m._forward_hooks or m._backward_hooks for m in model.modules())


def test_the_opacus_engine_leaves_a_model_that_trains_and_backpropagates_as_before(layer_case):
    """Opacus's hooks held on the model after its steps: the trained model (released, explained, attacked) still
    ran them, and a backward through it with its parameters frozen (the imprint attack's, on every arm trained with
    training.dp_engine: opacus) failed inside Opacus ("pop from empty list"); a second step of either engine on it
    refused to hook it twice."""
    model, x, y = layer_case("conv2d", 5)
    for engine in ("opacus", "opacus", "dpmed"):
        DpSgdStep(model, loss_fn=_ce, max_grad_norm=1.0, noise_multiplier=0.5, expected_batch_size=4.0,
                  physical_batch_size=2, noise_rng=np.random.default_rng(0), engine=engine)(x, y)
    assert not any(m._forward_hooks or m._backward_hooks for m in model.modules())
    model.requires_grad_(False)
    inputs = x.clone().requires_grad_(True)
    _ce(model(inputs), y).backward()
    assert inputs.grad is not None and bool(torch.isfinite(inputs.grad).all())


@pytest.mark.parametrize("clipper", [GhostClipper, OpacusClipper])
def test_a_forward_that_fails_leaves_no_hooks(clipper, layer_case):
    """A step that fails inside the model's forward or loss must not leave the engine's hooks on the model: they
    would run in every later use of it (evaluation, explanations, the imprint attack's backward)."""
    model, x, y = layer_case("conv2d", 5)

    def failing(z, y):
        raise RuntimeError("loss failed")
    with pytest.raises(RuntimeError, match="loss failed"):
        clipper(model).clipped_sum(x, y, loss_fn=failing, max_grad_norm=1.0)
    assert not any(m._forward_hooks or m._backward_hooks for m in model.modules())


# ------------------------------------------------------------------------------------ what it refuses, and why

@pytest.mark.parametrize("norm", [nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm,
                                  nn.LazyBatchNorm2d])
def test_batch_norm_of_every_kind_is_refused_with_the_reason(norm):
    """Any module that normalises with batch statistics mixes the examples; not only the 2-d one of image models."""
    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 4), norm() if norm is nn.LazyBatchNorm2d else norm(4))
    with pytest.raises(PrivacyError, match=f"{norm.__name__}: BatchNorm.*GroupNorm"):
        GhostClipper(model)
    with pytest.raises(PrivacyError, match=f"{norm.__name__}: BatchNorm.*GroupNorm"):
        OpacusClipper(model)


def test_a_norm_order_or_route_without_meaning_is_refused():
    """An order other than 1 or 2 would be clipped in L2 unseen (the engine reads "not 1" as 2), while the noise
    is calibrated to the order asked; a route it does not know would run as materialised."""
    model = nn.Linear(3, 3)
    for order in (0, 3, math.inf):
        with pytest.raises(ValueError, match="norm_order must be 1 or 2"):
            GhostClipper(model, norm_order=order)
    for route in ("Ghost", "book-keeping", ""):
        with pytest.raises(ValueError, match="route must be one of"):
            GhostClipper(model, route=route)


def test_a_layer_without_a_rule_is_named():
    model = nn.Sequential(nn.Linear(3, 3), nn.PReLU())
    with pytest.raises(PrivacyError, match=r"'1' \(PReLU\).*no per-example rule"):
        GhostClipper(model)


@pytest.mark.parametrize("layer", [nn.Conv3d(1, 2, 3), nn.ConvTranspose2d(2, 2, 3), nn.Bilinear(3, 3, 2),
                                   nn.MultiheadAttention(4, 2, batch_first=True)],
                         ids=lambda m: type(m).__name__)
def test_unsupported_layers_are_refused_by_the_step_not_sent_to_another_engine(layer):
    """No silent fallback: DpSgdStep with the dpmed engine refuses a model it cannot clip exactly, naming the
    module and its type, and points at the Opacus engine as an explicit choice."""
    model = nn.Sequential(nn.Linear(3, 3), layer)
    with pytest.raises(PrivacyError, match=rf"'1' \({type(layer).__name__}\).*no per-example rule.*dp_engine"):
        DpSgdStep(model, loss_fn=_ce, max_grad_norm=1.0, noise_multiplier=1.0, expected_batch_size=4.0,
                  physical_batch_size=4, noise_rng=np.random.default_rng(0), engine="dpmed")


def _weight_normed_linear():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)        # torch deprecates the old weight_norm; it still runs
        return nn.utils.weight_norm(nn.Linear(4, 3))       # weight_g, weight_v on the Linear; weight recomputed


def _linear_with_a_gain():
    layer = nn.Linear(4, 3)
    layer.register_parameter("gain", nn.Parameter(torch.ones(3)))
    return layer


@pytest.mark.parametrize("build, extra", [(_weight_normed_linear, r"\['weight_g', 'weight_v'\]"),
                                          (_linear_with_a_gain, r"\['gain'\]")], ids=["weight_norm", "gain"])
def test_a_parameter_its_layers_rule_does_not_compute_is_refused(build, extra):
    """A layer type with a rule computes the per-example gradients of the parameters the rule knows (a Linear's
    weight and bias). A trainable parameter of another name on such a layer (weight_norm's weight_g and weight_v, a
    gain registered on it) would otherwise get a clipped sum of zero, and train on noise alone, without a word."""
    layer = build()
    model = nn.Sequential(layer)
    with pytest.raises(PrivacyError, match=rf"'0' \(Linear\).*{extra}.*no per-example rule"):
        GhostClipper(model)
    for p in layer.parameters():
        p.requires_grad_(False)
    layer.bias.requires_grad_(True)                  # frozen, the others are no longer the engine's concern
    GhostClipper(model)


def test_an_input_modified_in_place_after_use_is_refused():
    class InPlace(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 3)
            self.head = nn.Linear(3, 2)

        def forward(self, x):
            h = torch.tanh(x @ torch.ones(3, 3, dtype=x.dtype))                  # no gradient needed before fc
            out = self.fc(h)
            h.mul_(2.0)                                                          # fc's input changed after use
            return self.head(out + h)

    model = InPlace().double()
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=False)
    with pytest.raises(PrivacyError, match="modified in place"):
        GhostClipper(model).clipped_sum(x, torch.tensor([0, 1, 0, 1]), loss_fn=_ce, max_grad_norm=1.0)


@pytest.mark.parametrize("setting, named", [(dict(scale_grad_by_freq=True), "scale_grad_by_freq"),
                                            (dict(max_norm=1.0), "max_norm"), (dict(sparse=True), "sparse")])
def test_an_embedding_whose_gradient_is_not_a_plain_lookups_is_refused(setting, named):
    with pytest.raises(PrivacyError, match=f"Embedding with {named}"):
        GhostClipper(nn.Embedding(5, 2, **setting))


def test_a_padding_the_convolution_cannot_replay_is_refused():
    """A string padding or a padding mode is replayed from the layer's own padding amounts; without them (a torch
    that does not expose them) the layer is refused by name, not clipped with zero padding."""
    conv = nn.Conv2d(2, 3, 3, padding=1, padding_mode="reflect")
    del conv._reversed_padding_repeated_twice
    with pytest.raises(PrivacyError, match=r"Conv2d with padding \(1, 1\) / padding_mode 'reflect'.*use zero padding"):
        GhostClipper(conv)


def test_a_parameter_used_outside_its_layer_is_refused():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(7, 4)

        def forward(self, x):
            return self.embed(x).mean(1) @ self.embed.weight.T                 # weight tying: logits over 7

    model = Tied().double()
    with pytest.raises(PrivacyError, match="embed.weight.*outside its own layer"):
        GhostClipper(model).clipped_sum(torch.tensor([[1, 2], [3, 4]]), torch.tensor([0, 1]), loss_fn=_ce,
                                        max_grad_norm=1.0)


def test_a_parameter_used_outside_its_layer_that_ran_under_no_grad_is_refused():
    """A call under no_grad gives the parameter no use in the graph, so it cannot stand for one outside the layer:
    the weight read in the forward here was counted against that call, and its gradient came back as zero."""
    class Behind(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 3)
            self.head = nn.Linear(4, 3)

        def forward(self, x):
            with torch.no_grad():
                self.fc(x)
            return self.head(x) + x @ self.fc.weight.T

    model = Behind().double()
    with pytest.raises(PrivacyError, match=r"fc.weight is used 1 times but its module ran 0 times with grad.*outside"):
        GhostClipper(model).clipped_sum(torch.randn(2, 4, dtype=torch.float64), torch.tensor([0, 1]), loss_fn=_ce,
                                        max_grad_norm=1.0)


# ------------------------------------------------------------------------------- property: any conv geometry

@settings(max_examples=25, deadline=None)
@given(c_in=st.integers(1, 3), groups=st.sampled_from([1, 2]), c_out_per_group=st.integers(1, 3),
       kernel=st.integers(1, 3), stride=st.integers(1, 2), padding=st.integers(0, 2), dilation=st.integers(1, 2),
       bias=st.booleans(), hw=st.integers(5, 8), route=st.sampled_from(ROUTES), clip=st.floats(1e-3, 10.0))
def test_any_conv_geometry_matches_explicit_loop(c_in, groups, c_out_per_group, kernel, stride, padding, dilation,
                                                 bias, hw, route, clip, unit_gradients, clipped):
    c_in, c_out = c_in * groups, c_out_per_group * groups
    torch.manual_seed(0)
    conv = nn.Conv2d(c_in, c_out, kernel, stride=stride, padding=padding, dilation=dilation, groups=groups,
                     bias=bias)
    model = nn.Sequential(conv, nn.Tanh(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c_out, 2)).double()
    g = torch.Generator().manual_seed(3)
    x = torch.randn(3, c_in, hw, hw, generator=g, dtype=torch.float64)
    y = torch.tensor([0, 1, 1])
    expected = clipped(*unit_gradients(model, x, y), clip)
    _assert_close(GhostClipper(model, route=route).clipped_sum(x, y, loss_fn=_ce, max_grad_norm=clip), expected)


def test_norms_and_clipped_sums_are_taken_without_tf32_and_the_flag_comes_back(monkeypatch):
    """cuDNN may run float32 convolutions in TF32 (torch's default on GPUs that have it); the norms and the clipped
    sums come from different convolutions, which in TF32 would disagree by about 5e-4 and let a unit pass C."""
    from dpmed.training import clipping

    seen = []
    on_grad, sums = clipping._Tape._on_output_grad, clipping._Tape.clipped_sums

    def on_output_grad(self, call, g):
        seen.append(("norm", torch.backends.cudnn.allow_tf32))
        return on_grad(self, call, g)

    def clipped_sums(self, *args, **kwargs):
        seen.append(("sum", torch.backends.cudnn.allow_tf32))
        return sums(self, *args, **kwargs)

    monkeypatch.setattr(clipping._Tape, "_on_output_grad", on_output_grad)
    monkeypatch.setattr(clipping._Tape, "clipped_sums", clipped_sums)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.Tanh(), nn.Flatten(), nn.Linear(8, 2))
    x, y = torch.rand(4, 1, 4, 4), torch.tensor([0, 1, 0, 1])
    GhostClipper(model).clipped_sum(x, y, loss_fn=lambda z, t: F.cross_entropy(z, t, reduction="sum"),
                                    max_grad_norm=1.0)
    assert {kind for kind, _ in seen} == {"norm", "sum"} and not any(tf32 for _, tf32 in seen)
    assert torch.backends.cudnn.allow_tf32


def test_tf32_stays_off_until_the_last_of_overlapping_blocks_ends(monkeypatch):
    """Two threads' DP steps overlap: the first to end must not turn TF32 back on under the other."""
    from dpmed.training.clipping import _without_tf32

    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)
    first, second = _without_tf32(), _without_tf32()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert not torch.backends.cudnn.allow_tf32
    second.__exit__(None, None, None)
    assert torch.backends.cudnn.allow_tf32


def test_a_ghost_norm_whose_positions_cancel_still_clips_to_c():
    """A 3x3 convolution of 512 channels at 7 x 7 (ResNet-18's last stage, where the engine takes ghost norms), fed
    an input nearly constant across positions and an output gradient that sums to zero over the inner positions: the
    example's gradient cancels to about 1/1000 of sum_t ||a_t|| ||g_t||, and float32's ghost norm, a sum over
    position pairs, fell 3 % short of it, so the example passed C by 3 %. Its clipped contribution, read off the
    engine's sum for that example alone, must have norm C to float32's rounding."""
    g = torch.Generator().manual_seed(5)
    conv = nn.Conv2d(512, 512, 3, padding=1, bias=False)
    x = torch.randn(3, 512, 1, 1, generator=g) + 1e-3 * torch.randn(3, 512, 7, 7, generator=g)
    inner = torch.randn(3, 512, 5, 5, generator=g)
    upstream = F.pad(inner - inner.mean((2, 3), keepdim=True), (1, 1, 1, 1))     # d loss / d output, [3, 512, 7, 7]
    exact = [torch.autograd.grad((conv.double()(x[i:i + 1].double()) * upstream[i].double()).sum(),
                                 conv.weight)[0].norm().item() for i in range(3)]
    conv.float()
    clip = min(exact) / 10                                           # every example clipped
    for i in range(3):
        (got,) = GhostClipper(conv).clipped_sum(x[i:i + 1], upstream[i:i + 1], max_grad_norm=clip,
                                                loss_fn=lambda z, u: (z * u).sum())
        assert got.double().norm().item() <= clip * (1 + 1e-6)


def _cancelling_weight_standardised_conv(g: torch.Generator):
    """The convolution case above through a weight-standardised layer, whose ghost norm projects the same pairs."""
    x = torch.randn(8, 512, 1, 1, generator=g) + 1e-3 * torch.randn(8, 512, 7, 7, generator=g)
    inner = torch.randn(8, 512, 5, 5, generator=g)
    return WSConv2d(512, 512, 3, padding=1, bias=False), x, F.pad(inner - inner.mean((2, 3), keepdim=True),
                                                                 (1, 1, 1, 1))


def _cancelling_embedding(g: torch.Generator):
    """One index at all 512 positions, whose output gradients sum to 1e-4 of one position's: sum_{t,s} g_t . g_s
    cancels as the convolution's pairs do."""
    upstream = torch.randn(8, 512, 256, generator=g)
    upstream = upstream - upstream.mean(1, keepdim=True) + 1e-4 * torch.randn(8, 1, 256, generator=g)
    return nn.Embedding(10, 256), torch.zeros(8, 512, dtype=torch.long), upstream


@pytest.mark.parametrize("case", [_cancelling_weight_standardised_conv, _cancelling_embedding])
def test_every_ghost_rule_whose_positions_cancel_norms_to_the_exact_norm(case, monkeypatch):
    """The other rules' ghost norms sum position pairs too: forced onto the ghost route, each example's clip factor
    times its exact norm is C to 1e-6 (float32 ghost norms: up to 1.1e-2 and 2.4e-3 over). The factor, not the
    clipped sum: the embedding's book-kept sum adds 512 float32 rows that cancel, rounded by about 3e-6 of C whatever
    the norm."""
    factors = []

    def spy(norms, clip):
        factors.append(clip_factors(norms, clip))
        return factors[-1]

    monkeypatch.setattr("dpmed.training.clipping.clip_factors", spy)
    layer, x, upstream = case(torch.Generator().manual_seed(5))
    exact = [torch.autograd.grad((layer.double()(x[i:i + 1] if x.dtype == torch.long else x[i:i + 1].double())
                                  * upstream[i].double()).sum(), layer.weight)[0].norm().item() for i in range(8)]
    layer.float()
    clip = min(exact) / 10
    GhostClipper(layer, route="ghost").clipped_sum(x, upstream, max_grad_norm=clip, loss_fn=lambda z, u: (z * u).sum())
    assert max(f * n for f, n in zip(factors[0].tolist(), exact)) <= clip * (1 + 1e-6)


def _routes_taken(monkeypatch, layer: nn.Module, x, groups=None) -> list[bool]:
    """[whether the mixed route took each call ghost], then [whether it took pair dot products] with groups."""
    import dpmed.training.clipping as clipping
    taken = []
    for name in ("_use_ghost", "_pairs_cheaper"):
        def spy(tape, *args, _original=getattr(clipping._Tape, name)):
            taken.append(_original(tape, *args))
            return taken[-1]
        monkeypatch.setattr(clipping._Tape, name, spy)
    GhostClipper(layer).clipped_sum(x, torch.randn(len(x), *x.shape[1:]), max_grad_norm=1.0, groups=groups,
                                    loss_fn=lambda z, u: (z * u).sum())
    return taken


@pytest.mark.parametrize("width, groups, float64_routes, float32_routes", [
    (48, None, [False], [True]),                          # ghost 2/3 of materialised in multiply-adds
    (128, torch.tensor([0, 0, 1, 1]), [True, False], [True, True])])  # ghost 1/4; with pairs (M + R) = 1.5 M: 3/8
def test_the_mixed_route_prices_ghost_multiply_adds_as_float64(width, groups, float64_routes, float32_routes,
                                                                monkeypatch):
    """A Linear on 16 positions of ``width`` features: a ghost norm of (2 width) 16^2 multiply-adds against 16 width^2
    materialised ones. Ghost norms and pair dot products are float64 (`_wide`), each multiply-add about three of
    float32's on CPU with the widening (measured: resnet18's layer2 convolutions at 128 px, priced 2.1 times
    cheaper ghost as float32, normed in 0.15 s ghost against 0.11 s materialised), so the mixed route takes the
    float32 route where ghost saves less than two thirds."""
    import dpmed.training.clipping as clipping
    x = torch.randn(4, 16, width)
    assert _routes_taken(monkeypatch, nn.Linear(width, width), x, groups) == float64_routes
    monkeypatch.setattr(clipping, "_wide_cost", lambda device: 1.0)       # priced as float32, as before
    assert _routes_taken(monkeypatch, nn.Linear(width, width), x, groups) == float32_routes


@pytest.mark.parametrize("capability, cost", [((9, 0), 3.0), ((8, 0), 3.0), ((8, 6), 64.0), ((12, 0), 64.0),
                                              ((10, 3), 64.0), ((7, 5), 64.0)])
def test_a_float64_multiply_add_costs_more_on_gpus_without_full_rate_float64(capability, cost, monkeypatch):
    """NVIDIA's full-size data-centre chips (A100 8.0, H100 9.0) run float64 at half float32's rate or better,
    consumer chips (8.6, 12.0), the B300 (10.3) and the T4 (7.5) at 1/32 to 1/64: read from the device's
    properties."""
    import types

    import dpmed.training.clipping as clipping
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device: types.SimpleNamespace(major=capability[0], minor=capability[1]))
    clipping._wide_cost.cache_clear()
    try:
        assert clipping._wide_cost(torch.device("cuda", 0)) == cost
        assert clipping._wide_cost(torch.device("cpu")) == 3.0
    finally:
        clipping._wide_cost.cache_clear()
