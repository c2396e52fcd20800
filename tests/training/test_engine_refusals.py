"""What dpmed's clipping engine must refuse rather than clip wrongly, and the near cases it must still clip exactly.

* An in-place op on the output of a layer whose input needs no gradient (the first layer, or the first unfrozen one):
  backward ends at that output, so the layer's gradient would never arrive and it would silently never train. An
  in-place op on any other layer's output is harmless (the hook sees the gradient of the output the layer returned)
  and stays exact.
* A trainable layer whose input or output is not one row per example, batch first (a Linear on x.reshape(B * T, d),
  a conv per channel on [B * C, 1, H, W]): its rows would be clipped instead of the examples, so one example's
  contribution could exceed C (B = 1), or the shapes clash in a rule (B > 1). Layers on [B, T, d] stay exact.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dpmed.errors import PrivacyError
from dpmed.training import DpSgdStep
from dpmed.training.clipping import ROUTES, GhostClipper

RTOL = 1e-5


def _ce(z, y):
    return F.cross_entropy(z, y, reduction="sum")


def _explicit_clipped_sum(model, x, y, clip):
    """The definition, one backward per example: sum_i min(1, C / (||g_i|| + 1e-6)) g_i."""
    params = [p for p in model.parameters() if p.requires_grad]
    total = [torch.zeros_like(p) for p in params]
    for i in range(len(x)):
        g = torch.autograd.grad(_ce(model(x[i:i + 1]), y[i:i + 1]), params)
        factor = min(1.0, clip / (torch.cat([t.flatten() for t in g]).norm().item() + 1e-6))
        for acc, t in zip(total, g, strict=True):
            acc += factor * t
    return total


def _assert_close(got, expected):
    for a, b in zip(got, expected, strict=True):
        assert (a - b).norm().item() <= RTOL * b.norm().item() + 1e-12


class _Stem(nn.Module):
    """conv -> ``after`` on its output -> tanh -> conv -> ``later`` on its output -> pool -> linear head; with
    ``frozen_front`` a frozen conv first, so that the first trainable conv's input needs no gradient either."""

    def __init__(self, after=None, later=None, frozen_front=False):
        super().__init__()
        self.front = nn.Conv2d(2, 2, 1).requires_grad_(False) if frozen_front else nn.Identity()
        self.conv = nn.Conv2d(2, 4, 3)
        self.conv2 = nn.Conv2d(4, 4, 3)
        self.head = nn.Linear(4, 3)
        self.after, self.later = after, later

    def forward(self, x):
        h = self.conv(self.front(x))
        if self.after is not None:
            h = self.after(h)
        h = self.conv2(torch.tanh(h))
        if self.later is not None:
            h = self.later(h)
        return self.head(h.mean((2, 3)))


def _add_one_in_place(h):
    h += 1.0
    return h


def _images(n=4):
    g = torch.Generator().manual_seed(1)
    return torch.randn(n, 2, 7, 7, generator=g, dtype=torch.float64), torch.randint(0, 3, (n,), generator=g)


# ------------------------------------------------------------------------ in-place ops on layer outputs

@pytest.mark.parametrize("frozen_front", [False, True], ids=["first_layer", "first_unfrozen_layer"])
@pytest.mark.parametrize("op", [nn.ReLU(inplace=True), _add_one_in_place], ids=["relu_inplace", "add_inplace"])
def test_an_output_modified_in_place_where_backward_ends_is_refused(op, frozen_front):
    """Before the fix the conv got a zero clipped gradient and nothing said so."""
    torch.manual_seed(0)
    model = _Stem(after=op, frozen_front=frozen_front).double()
    x, y = _images()
    with pytest.raises(PrivacyError, match=r"output of module 'conv' was modified in place.*Remove the in-place"):
        GhostClipper(model).clipped_sum(x, y, loss_fn=_ce, max_grad_norm=0.1)


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("op", [nn.ReLU(inplace=True), _add_one_in_place], ids=["relu_inplace", "add_inplace"])
def test_an_in_place_op_on_a_later_layer_output_stays_exact(op, route):
    """conv2's input needs a gradient, so its output is not where backward ends: its hook still gets the gradient
    of the output it returned, and the clipped sum is the explicit loop's (nothing is refused)."""
    torch.manual_seed(0)
    model = _Stem(later=op).double()
    x, y = _images()
    expected = _explicit_clipped_sum(model, x, y, 0.05)
    _assert_close(GhostClipper(model, route=route).clipped_sum(x, y, loss_fn=_ce, max_grad_norm=0.05), expected)


# --------------------------------------------------------------------------- batch-first, one row per example

class _FoldedPositions(nn.Module):
    """A Linear on the 7 x 7 pixels of every image folded into the batch: [B * 49, 2] rows."""

    def __init__(self):
        super().__init__()
        self.mix = nn.Linear(2, 3)

    def forward(self, x):
        b = x.shape[0]
        return self.mix(x.flatten(2).transpose(1, 2).reshape(-1, 2)).view(b, -1, 3).mean(1)


class _PerChannelConv(nn.Module):
    """One conv shared across input channels: [B, C, H, W] -> [B * C, 1, H, W]."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.head = nn.Linear(4 * 2, 3)

    def forward(self, x):
        b, c = x.shape[:2]
        return self.head(self.conv(x.reshape(b * c, 1, *x.shape[2:])).mean((2, 3)).reshape(b, c * 4))


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("build, name", [(_FoldedPositions, "mix"), (_PerChannelConv, "conv")],
                         ids=["linear_on_folded_positions", "conv_per_channel"])
def test_a_layer_with_rows_that_are_not_examples_is_refused(build, name, batch):
    """Before the fix: B > 1 a raw RuntimeError inside a rule; B = 1 each row clipped to C, so one example's
    clipped contribution reached many times C, silently."""
    torch.manual_seed(0)
    model = build().double()
    x, y = _images(batch)
    with pytest.raises(PrivacyError, match=rf"module '{name}' .*where the model's input has {batch}.*batch-first"):
        GhostClipper(model).clipped_sum(x, y, loss_fn=_ce, max_grad_norm=1e-3)


@pytest.mark.parametrize("batch", [1, 3])
def test_the_opacus_engine_refuses_rows_that_are_not_examples_too(batch):
    """Opacus also reads a layer's rows as examples: with the folded Linear it returned B * 49 per-example gradients
    (B = 1: one example's clipped contribution ~31 C) without a word."""
    from dpmed.training.dp_sgd import OpacusClipper

    torch.manual_seed(0)
    x, y = _images(batch)
    with pytest.raises(PrivacyError, match=rf"parameter 'mix.weight': Opacus computed {49 * batch} per-example "
                                           rf"gradients for the {batch} examples.*batch-first"):
        OpacusClipper(_FoldedPositions().double()).clipped_sum(x, y, loss_fn=_ce, max_grad_norm=1e-3)


def test_the_step_refuses_folded_rows_even_one_example_per_chunk():
    """Through DpSgdStep, physical batches of one (where nothing crashed before): refused, not clipped per row."""
    torch.manual_seed(0)
    model = _PerChannelConv().double()
    x, y = _images(2)
    step = DpSgdStep(model, loss_fn=_ce, max_grad_norm=1e-3, noise_multiplier=0.0, expected_batch_size=1.0,
                     physical_batch_size=1, noise_rng=np.random.default_rng(0))
    with pytest.raises(PrivacyError, match="module 'conv' .*batch-first"):
        step(x, y)


def test_a_linear_on_one_number_per_example_is_refused():
    """A Linear(B, B) on a [B] vector has one row per example by shape but mixes the examples in its product: its
    rule needs [B, ..., d_in] and refuses the layer rather than clip anything."""
    class Mixing(nn.Module):
        def __init__(self):
            super().__init__()
            self.mix = nn.Linear(3, 3)
            self.head = nn.Linear(1, 3)

        def forward(self, x):
            return self.head(self.mix(x.flatten(1).sum(1)).unsqueeze(1))

    torch.manual_seed(0)
    x, y = _images(3)
    with pytest.raises(PrivacyError, match=r"Linear input must be batch-first.*got shape \(3,\)"):
        GhostClipper(Mixing().double()).clipped_sum(x, y, loss_fn=_ce, max_grad_norm=1.0)


def test_a_layer_given_its_input_by_keyword_is_refused_by_name():
    """A forward hook sees positional inputs only: a layer called as layer(input=x) is refused naming it, not
    failed with an index error inside the engine."""
    class ByKeyword(nn.Module):
        def __init__(self):
            super().__init__()
            self.head = nn.Linear(98, 3)

        def forward(self, x):
            return self.head(input=x.flatten(1))

    x, y = _images(3)
    with pytest.raises(PrivacyError, match=r"module 'head' was called with its input by keyword: the clipping engine "
                                          r"sees positional inputs only; call it as layer\(x\)$"):
        GhostClipper(ByKeyword().double()).clipped_sum(x, y, loss_fn=_ce, max_grad_norm=1.0)


@pytest.mark.parametrize("batch", [1, 3])
def test_a_layer_on_batch_first_sequences_stays_exact(batch):
    """The same Linear on [B, 49, 2] (positions kept apart from the batch) is clipped per example, exactly."""
    class Positions(_FoldedPositions):
        def forward(self, x):
            return self.mix(x.flatten(2).transpose(1, 2)).mean(1)

    torch.manual_seed(0)
    model = Positions().double()
    x, y = _images(batch)
    expected = _explicit_clipped_sum(model, x, y, 1e-3)
    _assert_close(GhostClipper(model).clipped_sum(x, y, loss_fn=_ce, max_grad_norm=1e-3), expected)


def test_patient_groups_and_copies_count_the_rows_fed_to_the_model():
    """With augmentation multiplicity the step is given K copies of each image (B K rows) in their unit's group:
    those rows are what the model sees and what each layer must have, so nothing is refused, and each group's summed
    gradient is clipped as its definition says."""
    torch.manual_seed(0)
    model = _Stem().double()
    x, y = _images(3)
    copies, labels = x.repeat(2, 1, 1, 1), y.repeat(2)                         # K = 2: [6, ...]
    groups = torch.tensor([0, 1, 0, 0, 1, 0])
    params = [p for p in model.parameters() if p.requires_grad]
    expected = [torch.zeros_like(p) for p in params]
    for group in (0, 1):
        rows = groups == group
        g = torch.autograd.grad(_ce(model(copies[rows]), labels[rows]), params)
        factor = min(1.0, 0.05 / (torch.cat([t.flatten() for t in g]).norm().item() + 1e-6))
        for acc, t in zip(expected, g, strict=True):
            acc += factor * t
    got = GhostClipper(model).clipped_sum(copies, labels, loss_fn=_ce, max_grad_norm=0.05, groups=groups)
    _assert_close(got, expected)


def test_a_loss_that_does_not_depend_on_the_trainable_parameters_is_refused_by_name():
    model = nn.Sequential(nn.Flatten(), nn.Linear(8, 2))
    x, y = torch.randn(3, 2, 2, 2), torch.tensor([0, 1, 0])
    with pytest.raises(PrivacyError, match="the loss does not depend on any trainable parameter"):
        GhostClipper(model).clipped_sum(x, y, loss_fn=lambda z, t: torch.zeros(()), max_grad_norm=1.0)
