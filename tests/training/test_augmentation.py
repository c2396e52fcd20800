"""Augmentation multiplicity (De et al. 2022) against its definition, in float64.

Per unit u (an image, or a patient with their images), the clipped quantity must be
    g_u = sum_{images j of u} (1/K) sum_k grad l(aug_k(x_j)),
clipped to C as a whole: the truth below computes it the slow way (one backward per copy), and the step must agree
for both engines and both units. One unit's contribution stays at most C whatever K, so the accounting is unchanged.
The augmentation a copy gets depends on (public seed, step, copy, the image itself) only, never on the batch.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from dpmed.config.schema import AugmentationConfig
from dpmed.training import DpSgdStep
from dpmed.training.augmentation import Augmentation, image_keys
from dpmed.training.dp_sgd import physical_chunks

K = 4


def _ce(z, y):
    return F.cross_entropy(z, y, reduction="sum")


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.GroupNorm(2, 4), nn.Tanh(), nn.Flatten(),
                         nn.Linear(4 * 8 * 8, 3)).double()


def _batch(n=6, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 1, 8, 8, generator=g, dtype=torch.float64)
    return x, torch.randint(0, 3, (n,), generator=g), image_keys(x.numpy())


def _step(model, clip, engine="dpmed", weight=1.0, physical=64):
    return DpSgdStep(model, loss_fn=lambda z, y: _ce(z, y) * weight, max_grad_norm=clip, noise_multiplier=0.0,
                     expected_batch_size=1.0, physical_batch_size=physical, noise_rng=np.random.default_rng(0),
                     engine=engine)


def _unit_gradients(model, copies, y, units, k=K):
    """The definition: per unit, sum over its images of the mean over the k copies of each copy's gradient."""
    n = len(y)
    params = list(model.parameters())
    out = {}
    for u in torch.unique(units).tolist():
        total = [torch.zeros_like(p) for p in params]
        for j in torch.nonzero(units == u).flatten().tolist():
            for c in range(k):
                g = torch.autograd.grad(_ce(model(copies[c * n + j:c * n + j + 1]), y[j:j + 1]), params)
                for acc, t in zip(total, g, strict=True):
                    acc += t / k
        out[u] = total
    return out


# physical 5: slices that cut through a unit's copies wherever they are cut at 5 (an image's K copies, a patient's
# K per image), so the step must keep each unit's copies in one slice; 64: the whole batch in one. K = 1 with the
# image as unit has no groups: its copies are cut at 5 as they come, the last slice holding the sixth alone.
@pytest.mark.parametrize("physical", [64, 5])
@pytest.mark.parametrize("k", [1, 2, K])     # 2: the least that must group an image's copies
@pytest.mark.parametrize("engine", ["dpmed", "opacus"])
@pytest.mark.parametrize("unit", ["image", "patient"])
def test_the_clipped_sum_is_the_clipped_mean_over_copies(unit, engine, k, physical):
    model = _model()
    x, y, keys = _batch()
    augment = Augmentation(multiplicity=k, padding=2, flip=True, seed=7)
    patients = torch.tensor([3, 8, 3, 1, 8, 8]) if unit == "patient" else None
    copies, labels, groups = augment.expand(x, y, keys, step=5, groups=patients)
    assert len(copies) == k * 6 and labels.shape == (k * 6,)
    assert groups.shape == (k * 6,) if k > 1 or patients is not None else groups is None
    units = patients if patients is not None else torch.arange(6)
    truth = _unit_gradients(model, augment.apply(x, keys, 5), y, units, k)
    norms = {u: torch.cat([t.flatten() for t in g]).norm().item() for u, g in truth.items()}
    step = _step(model, 1.0, engine, augment.loss_weight, physical)  # Opacus hooks a model once: one step, 3 clips
    for clip in (min(norms.values()) / 2, sorted(norms.values())[len(norms) // 2], 2 * max(norms.values())):
        expected = [sum(min(1.0, clip / (norms[u] + 1e-6)) * g[i] for u, g in truth.items())
                    for i in range(len(list(model.parameters())))]
        step.max_grad_norm = clip
        got = step.clipped_sum(copies, labels, groups=groups)
        for a, b in zip(got, expected, strict=True):
            assert (a - b).norm().item() <= 1e-8 * b.norm().item()


@pytest.mark.parametrize("multiplicity", [1, 2, 3, 4, 16])
def test_one_unit_moves_the_sum_by_at_most_c_whatever_k(multiplicity):
    model = _model()
    x, y, keys = _batch(n=3)
    augment = Augmentation(multiplicity=multiplicity, padding=2, flip=True, seed=0)
    copies, labels, groups = augment.expand(x, y, keys, step=1, groups=torch.tensor([4, 4, 4]))   # one patient
    clip = 1e-3
    got = _step(model, clip, weight=augment.loss_weight).clipped_sum(copies, labels, groups=groups)
    assert torch.cat([t.flatten() for t in got]).norm().item() <= clip * (1 + 1e-9)
    images, _, image_groups = augment.expand(x[:1], y[:1], keys[:1], step=1)                         # one image
    got = _step(model, clip, weight=augment.loss_weight).clipped_sum(images, labels[:multiplicity],
                                                                    groups=image_groups)
    assert torch.cat([t.flatten() for t in got]).norm().item() <= clip * (1 + 1e-9)


def test_an_images_copies_do_not_depend_on_the_rest_of_the_batch():
    """What makes a public seed sound: the copies of an image are a function of (seed, step, copy, the image), so
    adding or removing another unit from the batch changes nothing else's gradient."""
    x, _, keys = _batch(n=5)
    augment = Augmentation(multiplicity=3, padding=2, flip=True, seed=11)
    whole = augment.apply(x, keys, step=9).view(3, 5, 1, 8, 8)
    part = augment.apply(x[[4, 1]], keys[[4, 1]], step=9).view(3, 2, 1, 8, 8)
    torch.testing.assert_close(part[:, 0], whole[:, 4], rtol=0, atol=0)
    torch.testing.assert_close(part[:, 1], whole[:, 1], rtol=0, atol=0)
    assert not torch.equal(augment.apply(x, keys, step=10), augment.apply(x, keys, step=9))      # fresh per step
    assert not torch.equal(whole[0], whole[1])                                                    # and per copy


def test_each_copy_is_a_reflect_padded_crop_maybe_flipped():
    x, _, keys = _batch(n=4)
    p = 2
    augment = Augmentation(multiplicity=5, padding=p, flip=True, seed=3)
    u = augment.draws(keys, step=2)                                            # [K, n, 3]
    copies = augment.apply(x, keys, step=2).view(5, 4, 1, 8, 8)
    padded = F.pad(x, (p, p, p, p), mode="reflect")
    flips = set()
    for k in range(5):
        for i in range(4):
            dy, dx = (int(v % (2 * p + 1)) for v in u[k, i, :2])
            crop = padded[i, :, dy:dy + 8, dx:dx + 8]
            flipped = bool(u[k, i, 2] >> np.uint64(63))
            flips.add(flipped)
            torch.testing.assert_close(copies[k, i], crop.flip(-1) if flipped else crop, rtol=0, atol=0)
    assert flips == {True, False}
    plain = Augmentation(multiplicity=2, padding=0, flip=False, seed=3).apply(x, keys, step=2)
    torch.testing.assert_close(plain, x.repeat(2, 1, 1, 1), rtol=0, atol=0)


def test_flips_are_off_by_default_and_keys_follow_the_pixels():
    """Chest X-rays have a left and a right (the heart, side markers): no flip unless asked. Equal images get equal
    keys (so equal augmentations), different images different ones."""
    assert AugmentationConfig().flip is False and AugmentationConfig().multiplicity == 1
    x, _, keys = _batch(n=3)
    assert len(set(keys.tolist())) == 3
    assert image_keys(np.concatenate([x.numpy(), x.numpy()[:1]]))[3] == keys[0]


def test_the_draws_follow_the_seed_and_a_seed_repeats_them():
    """The seed is one of the draws' inputs: the same (seed, step, copy, image) gives the same crop and flip, and
    another seed gives other ones, so two runs of one study with different seeds do not share their augmentations."""
    x, _, keys = _batch(n=4)
    same = [Augmentation(multiplicity=3, padding=2, flip=True, seed=5).draws(keys, step=4) for _ in range(2)]
    assert np.array_equal(same[0], same[1])
    other = Augmentation(multiplicity=3, padding=2, flip=True, seed=6).draws(keys, step=4)
    assert not np.any(other == same[0])                # 36 independent 64-bit draws: none equal by chance
    assert not torch.equal(Augmentation(multiplicity=3, padding=2, flip=True, seed=5).apply(x, keys, 4),
                           Augmentation(multiplicity=3, padding=2, flip=True, seed=6).apply(x, keys, 4))


def test_settings_without_meaning_are_refused():
    """K = 0 copies would weigh each copy's loss 1/0; a negative padding crops nothing sound; reflect padding needs
    a padding below the image's side, so a padding equal to it is refused with the reason, not deep inside torch."""
    for multiplicity, padding in ((0, 2), (-1, 2), (2, -1)):
        with pytest.raises(ValueError, match="multiplicity must be >= 1 and padding >= 0"):
            Augmentation(multiplicity=multiplicity, padding=padding, flip=False, seed=0)
    x, _, keys = _batch(n=2)
    with pytest.raises(ValueError, match="crop padding 8 px needs images larger than 8 px"):
        Augmentation(multiplicity=2, padding=8, flip=False, seed=0).apply(x, keys, step=1)
    assert Augmentation(multiplicity=2, padding=7, flip=False, seed=0).apply(x, keys, step=1).shape == (4, 1, 8, 8)


def test_copies_made_a_slice_at_a_time_are_the_batchs_copies_bit_for_bit():
    """A step takes its copies a slice at a time (`Copies`): each must be the very copy that making all K n at once
    gives, in the same memory layout, or runs (and resumed runs) would no longer repeat the models they made."""
    x, y, keys = _batch(n=5)
    augment = Augmentation(multiplicity=3, padding=2, flip=True, seed=11)
    whole = augment.apply(x, keys, step=9)
    copies, _, _ = augment.expand(x, y, keys, step=9)
    at = torch.tensor([14, 0, 5, 10, 3])                   # any places, any order: one image's copies, others'
    assert torch.equal(copies[at], whole[at]) and copies[at].stride() == whole[at].stride()
    parts = list(copies.split(4))
    assert [len(part) for part in parts] == [4, 4, 4, 3] and torch.equal(torch.cat(parts), whole)


def _empty_batches():
    """An empty batch as each input a step takes: images (unit the image, or the patient), and their copies with
    K = 1 (no groups) and K = 3 (each copy grouped with its image)."""
    x, y, keys = _batch(n=0)
    yield "images", x, y, None
    yield "images by patient", x, y, torch.zeros(0, dtype=torch.int64)
    for k in (1, 3):
        copies, labels, groups = Augmentation(multiplicity=k, padding=2, flip=True, seed=0).expand(x, y, keys, 1)
        yield f"copies, K = {k}", copies, labels, groups


def test_an_empty_batch_has_no_slice_as_images_or_as_their_copies():
    """physical_chunks gave an empty tensor one empty slice (torch.split's) and its copies none; the docstring
    promised the first. Now neither has a slice: dpmed's clipping engine cannot take an empty one."""
    for name, x, y, _ in _empty_batches():
        assert list(physical_chunks(x, y, 4)) == [], name


@pytest.mark.parametrize("engine", ["dpmed", "opacus"])
def test_an_empty_batch_is_a_pure_noise_step_as_images_or_as_their_copies(engine):
    """A Poisson batch may be empty, and the accountant counts its step: whatever the input, the step must draw its
    noise from the stream (by the words every step takes) and leave noise alone as the update, the same noise."""
    sigma, clip, expected = 1.5, 2.0, 10.0
    updates = {}
    for name, x, y, groups in _empty_batches():
        model, stream = _model(), np.random.default_rng(3)
        step = DpSgdStep(model, loss_fn=_ce, max_grad_norm=clip, noise_multiplier=sigma, expected_batch_size=expected,
                         physical_batch_size=4, noise_rng=stream, engine=engine)
        step(x, y, groups=groups)
        moved = np.random.default_rng(3)
        moved.bit_generator.random_raw(step.stream_words)
        assert step.stream_words > 0 and stream.bit_generator.state == moved.bit_generator.state, name
        updates[name] = torch.cat([p.grad.flatten() for p in model.parameters()])
    first = next(iter(updates.values()))
    assert first.std().item() * expected == pytest.approx(sigma * clip, rel=0.1)   # 819 draws: std error ~2.5%
    for name, update in updates.items():
        assert torch.equal(update, first), name


class _Largest(TorchDispatchMode):
    """The most elements of any tensor an operation made while it was on."""

    def __init__(self):
        super().__init__()
        self.most = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.most = max([self.most] + [t.numel() for t in tree_leaves(out) if isinstance(t, torch.Tensor)])
        return out


@pytest.mark.parametrize("engine", ["dpmed", "opacus"])
def test_a_steps_largest_tensor_does_not_grow_with_its_copies(engine):
    """A step's copies are made in its slices: its largest tensor is a slice's, however many copies the batch has
    (before, all K n copies were made at once, and a step's memory grew as K n whatever physical_batch_size)."""
    def largest(k, n):
        x, y, keys = _batch(n=n)
        augment = Augmentation(multiplicity=k, padding=2, flip=True, seed=0)
        step = DpSgdStep(_model(), loss_fn=_ce, max_grad_norm=1.0, noise_multiplier=0.0, expected_batch_size=1.0,
                         physical_batch_size=8, noise_rng=np.random.default_rng(0), engine=engine)
        with _Largest() as seen:
            copies, labels, groups = augment.expand(x, y, keys, step=1)
            step.clipped_sum(copies, labels, groups=groups)
        return seen.most

    assert largest(k=4, n=64) == largest(k=4, n=2)        # 256 copies in slices of 8, as 8 copies in one
