"""The imprint reconstruction attack (Fowl et al. 2022) through dpmed's own DP-SGD step, on phantom images.

Truth here is independent of the attack's code: the training images themselves (an image alone in its bin must come
back exactly), the clipping bound (the released gradient's norm), closed forms (Clopper-Pearson at 0 and n
successes, NCC of affine copies), and the step itself (patching DpSgdStep must change what the attack sees).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from dpmed.attack import (IMPRINT_STRUCTURES, ImagePrior, ImprintBins, Matches, brightness, calibrate_threshold,
                          clopper_pearson, imprint_model, invert_imprint, match_reconstructions,
                          normalised_cross_correlation, noise_level_at, Reconstructions, release_imprint_gradients,
                          run_imprint_attack, structural_similarity)
from dpmed.attack import experiment
from dpmed.data import make_phantom
from dpmed.models.registry import build_model
from dpmed.randomness import PrivacyRandomness, public_seed
from dpmed.training.dp_sgd import DpSgdStep

SIZE = 16
BATCH = 8


@pytest.fixture(autouse=True)
def one_thread():
    """Small convolutions on a shared 2-core CPU: one thread is ~100x faster than two contending ones; restored."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def seeded_noise(monkeypatch):
    """The attack draws its step's noise from fresh OS entropy, as a run does; the tests that make statistical claims
    about noised steps fix it, so that they pass or fail the same way every time."""
    class Seeded:
        @staticmethod
        def secure() -> PrivacyRandomness:
            return PrivacyRandomness.reproducible(seed=0, run_id="imprint-test")

    monkeypatch.setattr(experiment, "PrivacyRandomness", Seeded)


@pytest.fixture(scope="module")
def phantom():
    data = make_phantom(n_images=240, image_size=SIZE, seed=0)
    public = np.concatenate([data.val.images, data.test.images])      # the adversary's data: disjoint patients
    return data.train.images, data.train.labels, public


@pytest.fixture(scope="module")
def threshold(phantom):
    _, _, public = phantom
    return calibrate_threshold(public, batch_size=BATCH, n_null=100, rng=np.random.default_rng(0))


def small_cnn() -> torch.nn.Module:
    return build_model("small_cnn", in_channels=1, num_outputs=2, image_size=SIZE, seed=0)


def loss_fn(z, y):
    return F.cross_entropy(z, y, reduction="sum")


def lone_images(images: np.ndarray, bins: ImprintBins, count: int) -> np.ndarray:
    """Indices of ``count`` images in distinct bins, each at least 1e-4 from an edge (float32 decides the bin)."""
    m = brightness(images)
    chosen, used = [], set()
    for i, b in enumerate(bins.bin_of(images)):
        if b not in used and np.min(np.abs(bins.edges - m[i])) > 1e-4:
            chosen.append(i)
            used.add(int(b))
        if len(chosen) == count:
            return np.array(chosen)
    raise AssertionError("not enough images in distinct bins")


def release(model, x, y, *, c, sigma, groups=None):
    return release_imprint_gradients(model, x, y, loss_fn=loss_fn, max_grad_norm=c, noise_multiplier=sigma,
                                     expected_batch_size=len(x), groups=groups,
                                     noise_rng=PrivacyRandomness.secure().stream("noise"))


def attacked(phantom, structure, n_bins=32):
    images, labels, public = phantom
    bins = ImprintBins.from_public(public, n_bins=n_bins, structure=structure)
    model = imprint_model(small_cnn(), bins, image_shape=(1, SIZE, SIZE),
                          pattern_generator=torch.Generator().manual_seed(0))
    return images, labels, bins, model


@pytest.mark.parametrize("structure", sorted(IMPRINT_STRUCTURES))
def test_an_image_alone_in_its_bin_comes_back_exactly(phantom, structure):
    images, labels, bins, model = attacked(phantom, structure)
    pick = lone_images(images, bins, 3)
    x, y = torch.from_numpy(images[pick]), torch.from_numpy(labels[pick])
    recs = invert_imprint(release(model, x, y, c=math.inf, sigma=0.0), structure=structure,
                          image_shape=(1, SIZE, SIZE))
    where = bins.bin_of(images[pick])
    assert sorted(torch.nonzero(recs.occupied).flatten().tolist()) == sorted(where.tolist())
    for i, b in zip(pick, where, strict=True):
        np.testing.assert_allclose(recs.images[b].numpy(), images[i], atol=1e-4)


@pytest.mark.parametrize("structure", sorted(IMPRINT_STRUCTURES))
def test_clipping_alone_does_not_stop_the_attack(phantom, structure):
    """The clip factor scales dW and db of an image alike, so the ratio is unchanged (Fowl et al. 2022)."""
    images, labels, bins, model = attacked(phantom, structure)
    pick = lone_images(images, bins, 3)
    x, y = torch.from_numpy(images[pick]), torch.from_numpy(labels[pick])
    free = release(model, x, y, c=math.inf, sigma=0.0)
    c = 1e-4
    clipped = release(model, x, y, c=c, sigma=0.0)
    norm = lambda r: math.hypot(r.weight.norm().item(), r.bias.norm().item())
    # The step did clip: the released mean of 3 clipped gradients has norm <= C, the unclipped one is far above.
    assert norm(clipped) <= c * (1 + 1e-4) < 1e-3 * norm(free)
    shape = (1, SIZE, SIZE)
    a = invert_imprint(free, structure=structure, image_shape=shape)
    b = invert_imprint(clipped, structure=structure, image_shape=shape)
    for i, k in zip(pick, bins.bin_of(images[pick]), strict=True):
        np.testing.assert_allclose(b.images[k].numpy(), images[i], atol=1e-4)
        np.testing.assert_allclose(b.images[k].numpy(), a.images[k].numpy(), atol=1e-4)


def test_under_noise_the_bins_brightness_and_the_public_prior_bring_the_images_closer(phantom):
    """sigma 0.03: the bare ratio dW / db leaves each pixel under noise sigma C / |db| and scales by a noisy db; the
    adversary also knows each bin's brightness and what public images look like, and an attack that ignores them
    understates the risk. Truth: the images themselves, and the public mean (the best guess without a gradient)."""
    images, labels, public = phantom
    bins = ImprintBins.from_public(public, n_bins=32, structure="sparse")
    model = imprint_model(small_cnn(), bins, image_shape=(1, SIZE, SIZE),
                          pattern_generator=torch.Generator().manual_seed(0))
    pick = lone_images(images, bins, 8)
    sigma, shape = 0.03, (1, SIZE, SIZE)
    released = release_imprint_gradients(
        model, torch.from_numpy(images[pick]), torch.from_numpy(labels[pick]), loss_fn=loss_fn, max_grad_norm=1.0,
        noise_multiplier=sigma, expected_batch_size=len(pick),
        noise_rng=PrivacyRandomness.reproducible(seed=0, run_id="imprint-test").stream("noise"))
    where = bins.bin_of(images[pick])
    bare = invert_imprint(released, structure="sparse", image_shape=shape).images[where].numpy()
    informed = invert_imprint(released, structure="sparse", image_shape=shape, bins=bins,
                              prior=ImagePrior.from_public(public), noise_sd=sigma / len(pick),
                              clipped_norm=1.0 / len(pick)).images[where].numpy()
    mse = lambda r: ((r - images[pick]) ** 2).mean()
    assert mse(informed) < 0.25 * mse(bare)
    assert mse(informed) < 0.75 * mse(np.broadcast_to(public.mean(axis=0), bare.shape))   # the gradient told more


def test_the_prior_keeps_only_its_leading_axes_in_float32():
    """All min(N, d) axes in float64 were 1.2 GB at 224 px RGB with 1,000 public images. Truth: numpy's float64 SVD
    of the centred images, and the rank centring leaves (N - 1 when N < d; none when the images are all alike)."""
    rng = np.random.default_rng(0)
    for n, d in ((30, 200), (300, 50)):
        images = (rng.random((n, d)) * np.linspace(0.05, 1.0, d)).astype(np.float32).reshape(n, 1, 1, d)
        flat = images.reshape(n, d).astype(np.float64)
        _, s, vt = np.linalg.svd(flat - flat.mean(axis=0), full_matrices=False)
        capped = ImagePrior.from_public(images, max_axes=6)
        assert capped.axes.shape == (6, d) and capped.axes.dtype == np.float32
        np.testing.assert_allclose(capped.variances, s[:6] ** 2 / (n - 1), rtol=1e-5)
        np.testing.assert_allclose(np.abs((capped.axes * vt[:6]).sum(axis=1)), 1.0, atol=1e-5)
        full = ImagePrior.from_public(images, max_axes=10 ** 6)
        assert len(full.axes) == min(n - 2, d)      # no direction the public images do not vary along, and the
        assert full.residual_variance > 0           # last one left outside: the filter must not project (below)
        np.testing.assert_allclose(full.axes @ full.axes.T, np.eye(len(full.axes)), atol=1e-5)
    alike = ImagePrior.from_public(np.full((4, 1, 3, 3), 0.5, dtype=np.float32))
    assert alike.axes.shape == (0, 9)
    x = torch.rand(2, 9, dtype=torch.float64)
    torch.testing.assert_close(alike.denoise(x, torch.full((2,), 0.1, dtype=torch.float64)),
                               torch.full((2, 9), 0.5, dtype=torch.float64))


def test_the_prior_filter_tends_to_the_copy_as_its_noise_vanishes(phantom):
    """sigma 0 leaves the ratio exact; a vanishing sigma must tend to it, not to the copy's projection on the span of a
    few public images (9 of 256 pixels' directions here). Truth: the unfiltered images, and the public mean."""
    images, _, public = phantom
    prior = ImagePrior.from_public(public[:10])
    x = torch.from_numpy(images[:4].reshape(4, -1).astype(np.float64))
    faint = prior.denoise(x, torch.full((4,), 1e-9, dtype=torch.float64))
    torch.testing.assert_close(faint, x, atol=1e-5, rtol=0)
    blind = prior.denoise(x, torch.full((4,), 1e6, dtype=torch.float64))
    torch.testing.assert_close(blind, torch.from_numpy(prior.mean).expand(4, -1), atol=1e-6, rtol=0)


def test_the_attack_reads_images_above_chance_through_noise_the_bare_ratio_does_not_survive(seeded_noise):
    """The same through the whole attack (the phantom at 16 px, batches of 8 of its 90 test images, sigma 0.03):
    the bare ratio reconstructed none of 320 (0.0 % [0.0, 1.1]) against a chance of 28 %."""
    data = make_phantom(n_images=600, image_size=SIZE, seed=0)
    result = run_imprint_attack(model_factory=small_cnn, images=data.test.images, labels=data.test.labels,
                                public_images=data.val.images, max_grad_norm=1.0, noise_multiplier=0.03,
                                expected_batch_size=BATCH, batch_size=BATCH, n_batches=40, n_bins=4 * BATCH,
                                structure="sparse", seed=0)
    assert result.ci[0] > result.chance_ci[1], result.to_dict()


def test_a_copy_of_another_batch_image_is_no_success(phantom, threshold, monkeypatch):
    """Without noise each occupied bin inverts to its image exactly; hand each bin the image of the next occupied bin
    instead. Every kept candidate is then a perfect copy of some batch image, but none of an image its bin held, and
    the attack read nothing of it: the truth is no success at all."""
    images, labels, public = phantom
    real = experiment.invert_imprint

    def shifted(*args, **kwargs):
        recs = real(*args, **kwargs)
        occupied = torch.nonzero(recs.occupied).flatten()
        moved = recs.images.clone()
        moved[occupied] = recs.images[occupied.roll(1)]
        return Reconstructions(images=moved, occupied=recs.occupied, strength=recs.strength)

    monkeypatch.setattr(experiment, "invert_imprint", shifted)
    result = run_imprint_attack(model_factory=small_cnn, images=images, labels=labels, public_images=public,
                                max_grad_norm=1.0, noise_multiplier=0.0, expected_batch_size=BATCH,
                                batch_size=BATCH, n_batches=4, n_bins=32, structure="sparse", seed=0,
                                threshold=threshold)
    assert result.n_success == 0
    assert result.images.ssim.max() > 0.99       # yet some copies matched a batch image exactly


def test_a_non_private_step_reconstructs_most_of_a_small_batch(phantom, threshold):
    images, labels, public = phantom
    result = run_imprint_attack(model_factory=small_cnn, images=images, labels=labels, public_images=public,
                                max_grad_norm=math.inf, noise_multiplier=0.0, expected_batch_size=BATCH,
                                batch_size=BATCH, n_batches=6, n_bins=64, seed=0, threshold=threshold)
    # 64 equal-mass bins leave an image of 8 alone with probability about (63/64)^7 = 0.90.
    assert result.n_trials == 48
    assert result.rate >= 0.75, result.to_dict()
    assert result.ci[0] <= result.rate <= result.ci[1]
    assert result.mean_best_ssim > threshold.value
    assert result.chance_rate < result.ci[0]             # plausible public guesses come nowhere near it
    assert result.images.ssim[0] > 0.999          # the best reconstruction is its training image
    np.testing.assert_allclose(result.images.reconstructions[0], result.images.originals[0], atol=1e-3)


def test_heavy_noise_leaves_the_attack_at_chance(phantom, threshold, seeded_noise):
    images, labels, public = phantom
    result = run_imprint_attack(model_factory=small_cnn, images=images, labels=labels, public_images=public,
                                max_grad_norm=1.0, noise_multiplier=1.0, expected_batch_size=BATCH,
                                batch_size=BATCH, n_batches=4, n_bins=32, seed=1, threshold=threshold)
    # At chance or below: no more images "reconstructed" than blind public guesses match, and scores below the
    # threshold on average (the prior pulls what the noise hides towards the public images' mean).
    assert result.rate <= result.chance_ci[1] and result.ci[0] <= result.chance_rate
    assert result.n_reconstructions == 4 * BATCH      # with noise every bin is occupied; the strongest 8 are kept
    assert result.mean_best_ssim < threshold.value


def test_chance_is_what_plausible_public_guesses_score_under_the_threshold(phantom, seeded_noise):
    """'chance' answers with random public images: its rate follows the threshold's quantile (about 1 - quantile per
    guess). Uniform-noise guesses, as before, never pass any threshold (SSIM < 0.2), so chance read 0 % even where a
    plausible image passes half the time."""
    images, labels, public = phantom
    rates = {}
    for quantile in (0.5, 0.99):
        result = run_imprint_attack(model_factory=small_cnn, images=images, labels=labels, public_images=public,
                                    max_grad_norm=1.0, noise_multiplier=1.0, expected_batch_size=BATCH,
                                    batch_size=BATCH, n_batches=8, n_bins=32, seed=2, threshold_quantile=quantile,
                                    n_null=100)
        assert result.rate <= result.chance_ci[1]      # the noise leaves the attack itself no better than chance
        rates[quantile] = result
    # At the median a guess passes half the time, so 8 guesses find about 1 - (1 - 0.5/8)^8 = 40 % of a batch.
    assert rates[0.5].chance_ci[0] > 0.2
    assert rates[0.99].chance_rate < rates[0.5].chance_ci[0]
    assert rates[0.99].chance_ci[0] <= 0.01 <= rates[0.99].chance_ci[1]


def test_the_gradients_come_from_dpmed_step_not_a_copy(phantom, threshold, monkeypatch):
    images, labels, public = phantom
    kwargs = dict(model_factory=small_cnn, images=images, labels=labels, public_images=public, max_grad_norm=0.5,
                  noise_multiplier=0.0, expected_batch_size=7.5, batch_size=BATCH, n_batches=2, n_bins=32, seed=0,
                  threshold=threshold)
    calls = []
    original = DpSgdStep.__call__

    def spy(self, x, y, *, groups=None):
        calls.append((self.max_grad_norm, self.noise_multiplier, self.expected_batch_size, self.engine, len(x)))
        return original(self, x, y, groups=groups)

    monkeypatch.setattr(DpSgdStep, "__call__", spy)
    honest = run_imprint_attack(**kwargs)
    assert calls == [(0.5, 0.0, 7.5, "dpmed", BATCH)] * 2
    assert honest.n_success > 0

    # A step whose clipped sums are zero releases nothing: the attack then has nothing to invert.
    monkeypatch.setattr(DpSgdStep, "clipped_sum", lambda self, x, y, groups=None: [
        torch.zeros_like(p) for p in self.params])
    blind = run_imprint_attack(**kwargs)
    assert blind.n_reconstructions == 0 and blind.n_success == 0


def test_a_patients_images_are_clipped_together_and_still_come_back(phantom, threshold):
    """Sparse rows: the three images' clipped gradients sit in disjoint rows, so the norms are hand-checkable."""
    images, labels, bins, model = attacked(phantom, "sparse")
    pick = lone_images(images, bins, 3)
    x, y = torch.from_numpy(images[pick]), torch.from_numpy(labels[pick])
    c = 1e-3
    groups = torch.tensor([7, 7, 3])                 # images 0 and 1 are one patient's
    norm = lambda r: math.hypot(r.weight.norm().item(), r.bias.norm().item()) * len(x)   # the sum
    by_image = release(model, x, y, c=c, sigma=0.0)
    by_patient = release(model, x, y, c=c, sigma=0.0, groups=groups)
    assert norm(by_image) == pytest.approx(math.sqrt(3) * c, rel=1e-3)      # three clipped, orthogonal
    assert norm(by_patient) == pytest.approx(math.sqrt(2) * c, rel=1e-3)    # the pair clipped as one
    recs = invert_imprint(by_patient, structure="sparse", image_shape=(1, SIZE, SIZE))
    for i, k in zip(pick, bins.bin_of(images[pick]), strict=True):
        np.testing.assert_allclose(recs.images[k].numpy(), images[i], atol=1e-4)

    tr_images, tr_labels, public = phantom
    patients = np.arange(len(tr_images)) // 2        # every two consecutive images: one patient
    result = run_imprint_attack(model_factory=small_cnn, images=tr_images, labels=tr_labels, public_images=public,
                                max_grad_norm=1e-3, noise_multiplier=0.0, expected_batch_size=BATCH,
                                batch_size=BATCH, n_batches=2, n_bins=64, structure="sparse", seed=0,
                                groups=patients, threshold=threshold)
    assert result.grouped and result.n_success > 0


def test_bins_hold_equal_shares_of_the_public_brightness(phantom):
    _, _, public = phantom
    bins = ImprintBins.from_public(public, n_bins=9, structure="cumulative")
    counts = np.bincount(bins.bin_of(public), minlength=9)
    assert counts.max() - counts.min() <= 1 and counts.sum() == len(public)
    assert np.all(np.diff(bins.edges) > 0) and bins.edges[0] < 0 and bins.edges[-1] > 1
    extremes = np.stack([np.zeros((1, SIZE, SIZE)), np.ones((1, SIZE, SIZE))]).astype(np.float32)
    assert bins.bin_of(extremes).tolist() == [0, 8]


def test_public_images_of_tied_brightness_merge_bins_instead_of_failing():
    """As many bins as public images (a small validation split), several of one brightness: the quantiles tie. The
    Kermany 004 study failed here after training; tied edges now merge into fewer bins, each still holding images."""
    levels = np.repeat(np.array([0.2, 0.2, 0.2, 0.4, 0.5, 0.5, 0.7, 0.9], dtype=np.float32), 3)
    public = np.broadcast_to(levels[:, None, None, None], (len(levels), 1, SIZE, SIZE)).copy()
    bins = ImprintBins.from_public(public, n_bins=len(public), structure="sparse")
    assert np.all(np.diff(bins.edges) > 0) and 2 <= bins.n_bins < len(public)
    per_level = {float(v): set(bins.bin_of(public[levels == v]).tolist()) for v in np.unique(levels)}
    assert all(len(b) == 1 for b in per_level.values())                          # one bin per brightness level
    assert len(set().union(*per_level.values())) == len(per_level)                # and distinct levels apart


def test_the_threshold_passes_copies_and_fails_noise(phantom, threshold):
    images, _, _ = phantom
    assert threshold.null_median < threshold.value < 1.0
    x = images[0]
    assert structural_similarity(x, x) == pytest.approx(1.0)
    noise = np.random.default_rng(0).uniform(0, 1, x.shape)
    assert structural_similarity(noise, x) < threshold.value


def test_normalised_cross_correlation_of_hand_cases():
    a = np.random.default_rng(0).uniform(0, 1, (1, 8, 8))
    assert normalised_cross_correlation(a, 0.5 * a + 0.2) == pytest.approx(1.0)
    assert normalised_cross_correlation(a, 1.0 - a) == pytest.approx(-1.0)
    assert normalised_cross_correlation(a, np.full_like(a, 0.3)) == 0.0


def test_a_null_draw_is_one_public_image_against_batch_size_others():
    """Six images and batches of five: every draw's best is image i against all five others, so the 1 % quantile of
    200 draws is the least of those six bests (a batch one image short would find lower bests)."""
    images = np.random.default_rng(0).uniform(0, 1, (6, 1, 8, 8))
    best = [max(structural_similarity(images[i], images[j]) for j in range(6) if j != i) for i in range(6)]
    got = calibrate_threshold(images, batch_size=5, n_null=200, quantile=0.01, rng=np.random.default_rng(1))
    assert got.value == pytest.approx(min(best), abs=1e-12)


def test_a_reconstructions_ncc_is_that_of_its_ssim_match():
    """NCC describes the pair SSIM chose, not the best correlation in the batch: a brightness-shifted copy
    correlates perfectly with its original (NCC 1) but is not the SSIM-closest image here."""
    a = np.random.default_rng(0).uniform(0, 1, (1, 16, 16))
    noisy = np.clip(a + np.random.default_rng(1).normal(0, 0.05, a.shape), 0, 1)
    originals = np.stack([0.2 * a + 0.4, noisy])
    matches = match_reconstructions(a[None], originals)
    assert matches.closest[0] == 1
    assert matches.ncc[0] == pytest.approx(np.corrcoef(a.ravel(), noisy.ravel())[0, 1]) and matches.ncc[0] < 0.999


def test_the_noise_level_is_the_last_whose_median_ssim_reaches_the_threshold(monkeypatch):
    """Scores fixed per call (three images at each level): at sd 0.05 the median, 0.8, reaches the threshold 0.8
    while the mean, 0.57, would not; at 0.1 neither does, so the answer is 0.05."""
    import dpmed.attack.success as success

    scores = iter([1.0, 1.0, 1.0, 0.9, 0.8, 0.0, 0.1, 0.1, 0.1])
    monkeypatch.setattr(success, "structural_similarity", lambda a, b: next(scores))
    images = np.zeros((3, 1, 4, 4))
    assert noise_level_at(0.8, images, rng=np.random.default_rng(0), levels=(0.0, 0.05, 0.1, 0.15)) == 0.05


def test_clopper_pearson_matches_its_closed_forms():
    n, alpha = 20, 0.05
    assert clopper_pearson(0, n) == (0.0, pytest.approx(1 - (alpha / 2) ** (1 / n)))
    assert clopper_pearson(n, n) == (pytest.approx((alpha / 2) ** (1 / n)), 1.0)
    lo, hi = clopper_pearson(7, n)
    # At the bounds the binomial tail probabilities are exactly alpha / 2.
    from scipy.stats import binom
    assert binom.sf(6, n, lo) == pytest.approx(alpha / 2) and binom.cdf(7, n, hi) == pytest.approx(alpha / 2)


def test_the_summary_holds_no_image(phantom, threshold):
    images, labels, public = phantom
    result = run_imprint_attack(model_factory=small_cnn, images=images, labels=labels, public_images=public,
                                max_grad_norm=1.0, noise_multiplier=0.0, expected_batch_size=BATCH,
                                batch_size=BATCH, n_batches=1, n_bins=32, seed=0, threshold=threshold, n_figure=3)
    summary = result.to_dict()
    text = json.dumps(summary)                       # plain numbers only
    assert "images" not in summary and len(text) < 2000
    assert result.images.reconstructions.shape == result.images.originals.shape == (3, 1, SIZE, SIZE)
    assert list(result.images.ssim) == sorted(result.images.ssim, reverse=True)


def _matcher(ssim: float, hits: set[int] | None = None):
    """A stand-in for match_reconstructions: every reconstruction (and chance guess) matches the batch's first image
    at ``ssim``, on the calls numbered in ``hits`` (1-based; None: every call), and nothing on the others."""
    calls = []

    def match(reconstructions, originals):
        calls.append(1)
        n = len(reconstructions)
        hit = hits is None or len(calls) in hits
        return Matches(closest=np.zeros(n, dtype=np.int64), ssim=np.full(n, ssim if hit else -1.0),
                                  ncc=np.zeros(n))
    return match


def _attack_with(phantom, threshold, monkeypatch, **kwargs):
    """The attack with every match taken as one of an image its reconstruction's bin held (the stand-in matcher
    knows no bins)."""
    monkeypatch.setattr(experiment, "_held", lambda bins, originals, matches, kept: np.ones(len(kept), dtype=bool))
    images, labels, public = phantom
    return run_imprint_attack(model_factory=small_cnn, images=images, labels=labels, public_images=public,
                              max_grad_norm=1.0, noise_multiplier=1.0, expected_batch_size=BATCH, batch_size=BATCH,
                              n_batches=3, n_bins=16, seed=0, threshold=threshold, **kwargs)


def test_a_success_is_a_distinct_image_of_the_batch_reached_at_the_threshold_or_above(phantom, threshold,
                                                                                    monkeypatch):
    """Eight reconstructions all closest to one image recover one image, not eight (a rate of 100 % where the attack
    found one image in eight); so do eight chance guesses; and an SSIM equal to the threshold passes it."""
    monkeypatch.setattr(experiment, "match_reconstructions", _matcher(threshold.value))
    result = _attack_with(phantom, threshold, monkeypatch)
    assert result.n_trials == 3 * BATCH and result.n_success == 3 and result.rate == 3 / (3 * BATCH)
    assert result.chance_successes == 3 and result.batch_successes == 3


def test_a_batch_counts_once_where_its_own_reconstructions_pass(phantom, threshold, monkeypatch):
    """Only the first batch's reconstructions (call 1; each batch's chance guesses are matched after it) pass."""
    monkeypatch.setattr(experiment, "match_reconstructions", _matcher(1.0, hits={1}))
    result = _attack_with(phantom, threshold, monkeypatch)
    assert (result.n_success, result.batch_successes, result.chance_successes) == (1, 1, 0)
    assert result.batch_rate == pytest.approx(1 / 3)


def test_chance_counts_the_better_of_random_public_images_and_brightness_group_medians(phantom, threshold,
                                                                                       monkeypatch):
    """Each batch's calls: its reconstructions, then random public images, then the blind prototypes. A median of
    many public images is what SSIM rewards (smooth and typical), so it can pass where no single public image does;
    before, chance counted random images alone and understated the criterion's prior (the kappa of the attacked
    step's bound)."""
    monkeypatch.setattr(experiment, "match_reconstructions", _matcher(1.0, hits={3}))
    result = _attack_with(phantom, threshold, monkeypatch)
    assert (result.n_success, result.chance_successes) == (0, 1)
    monkeypatch.setattr(experiment, "match_reconstructions", _matcher(1.0, hits={2, 3}))
    assert _attack_with(phantom, threshold, monkeypatch).chance_successes == 1   # the better of the two, not their sum


def test_blind_prototypes_are_the_medians_of_equal_brightness_groups():
    images = np.stack([np.full((1, 2, 2), v, dtype=np.float32) for v in (0.9, 0.1, 0.5, 0.3, 0.7, 0.2)])
    images[0, 0, 0, 0] = 0.0                                    # brightness 0.675: still the brightest
    got = experiment.blind_prototypes(images, 3)
    # groups by mean brightness: {0.1, 0.2}, {0.3, 0.5}, {0.7, image 0}; pixelwise medians
    expected = np.stack([np.full((1, 2, 2), 0.15), np.full((1, 2, 2), 0.4), np.full((1, 2, 2), 0.8)])
    expected[2, 0, 0, 0] = 0.35
    np.testing.assert_allclose(got, expected, atol=1e-6)
    assert experiment.blind_prototypes(images, 8).shape == (8, 1, 2, 2)     # more guesses than groups: repeated


def test_without_a_given_threshold_it_is_calibrated_on_public_images_by_the_public_seed(phantom, seeded_noise):
    """The threshold must not see the attacked (private) images: it is the public null's, drawn from the seed."""
    images, labels, public = phantom
    result = run_imprint_attack(model_factory=small_cnn, images=images, labels=labels, public_images=public,
                                max_grad_norm=1.0, noise_multiplier=1.0, expected_batch_size=BATCH,
                                batch_size=BATCH, n_batches=1, n_bins=16, seed=3, n_null=30)
    assert result.threshold == calibrate_threshold(public, batch_size=BATCH, n_null=30, quantile=0.99,
                                                   rng=np.random.default_rng(public_seed(3, "attack_threshold")))


def test_bins_and_blocks_refuse_what_would_fail_later_or_silently():
    from dpmed.attack.imprint import ImprintBlock

    with pytest.raises(ValueError, match=r"must be \[N, C, H, W\]"):
        brightness(np.zeros((1, 4, 4)))
    for edges in ([0.5], [0.0, 0.5, 0.5, 1.0]):
        with pytest.raises(ValueError, match="strictly increasing 1-D array of at least 2 values"):
            ImprintBins(np.array(edges), "cumulative")
    with pytest.raises(ValueError, match="unknown imprint structure 'bogus'"):
        ImprintBins(np.array([0.0, 1.0]), "bogus")
    images = np.linspace(0.1, 0.9, 12).reshape(3, 1, 2, 2)
    with pytest.raises(ValueError, match="n_bins must be >= 1"):
        ImprintBins.from_public(images, n_bins=0)
    with pytest.raises(ValueError, match="3 public images cannot calibrate 4 equal-mass bins"):
        ImprintBins.from_public(images, n_bins=4)
    bins = ImprintBins.from_public(images, n_bins=2)
    assert bins.structure == "cumulative" and not bins.edges.flags.writeable
    for amplification, perturbation in ((0.0, 1e-4), (1e6, 0.0)):
        with pytest.raises(ValueError, match="amplification and perturbation must be > 0"):
            ImprintBlock((1, 2, 2), bins, amplification=amplification, perturbation=perturbation,
                         pattern=torch.zeros(4))
    with pytest.raises(ValueError, match=r"pattern must have shape \(4,\), got \(5,\)"):
        ImprintBlock((1, 2, 2), bins, amplification=1e6, perturbation=1e-4, pattern=torch.zeros(5))


def test_an_image_on_an_edge_is_in_the_bin_below_and_every_image_is_in_some_bin():
    """Bin i is (e_i, e_(i+1)]; images beyond the outer edges (not dpmed's [0, 1] images) go to the end bins."""
    bins = ImprintBins(np.array([-0.001, 0.25, 0.5, 1.001]), "cumulative")
    levels = np.array([0.25, 0.2500001, 0.5, -5.0, 2.0])
    assert bins.bin_of(np.broadcast_to(levels[:, None, None, None], (5, 1, 2, 2))).tolist() == [0, 1, 1, 0, 2]


def test_only_the_measurement_layer_trains_and_the_pattern_is_zero_mean_with_its_documented_defaults(phantom):
    """The threat model: the adversary's block in front of a frozen copy of the arm's model, so each example's
    clipped gradient is all in the measurement; its input stays within a hair of the image (perturbation 1e-4)
    and clipping binds (amplification 1e6)."""
    import inspect

    images, _, bins, model = attacked(phantom, "cumulative")
    assert {n for n, p in model.named_parameters() if p.requires_grad} == {"imprint.measure.weight",
                                                                             "imprint.measure.bias"}
    pattern = model.imprint.connection.weight[:, 0].double() / 1e6
    assert abs(pattern.sum().item()) < 1e-5 and pattern.norm().item() == pytest.approx(1.0, rel=1e-6)
    x = torch.from_numpy(images[:4])
    assert (model.imprint(x) - x).abs().max().item() < 1e-2
    defaults = inspect.signature(imprint_model).parameters
    assert defaults["amplification"].default == 1e6 and defaults["perturbation"].default == 1e-4


def test_the_released_step_leaves_no_gradient_behind(phantom):
    images, labels, _, model = attacked(phantom, "cumulative")
    release(model, torch.from_numpy(images[:4]), torch.as_tensor(labels[:4]), c=1.0, sigma=0.0)
    assert all(p.grad is None for p in model.parameters())


def test_the_strongest_bins_come_first_and_none_are_asked_for_none():
    from dpmed.attack.imprint import Reconstructions

    recs = Reconstructions(images=torch.zeros(4, 1, 2, 2), occupied=torch.tensor([True, True, False, True]),
                           strength=torch.tensor([1.0, 3.0, 9.0, 2.0], dtype=torch.float64))
    assert recs.strongest(2).tolist() == [1, 3] and recs.strongest(10).tolist() == [1, 3, 0]
    assert recs.strongest(0).tolist() == []


def test_an_inversion_stays_in_the_data_range_and_an_empty_bin_is_black():
    """Hand-made sums for the sparse structure (each bin its own row): bin 0 holds an image whose ratio dW/db runs
    below 0 and above 1 (noise does that), bin 1 is empty (db = 0)."""
    from dpmed.attack.imprint import ImprintGradients, invert_imprint

    weight = torch.tensor([[-0.5, 0.25, 0.5, 1.5], [0.3, 0.3, 0.3, 0.3]], dtype=torch.float64)
    bias = torch.tensor([0.5, 0.0], dtype=torch.float64)
    recs = invert_imprint(ImprintGradients(weight=weight, bias=bias), structure="sparse", image_shape=(1, 2, 2))
    assert recs.occupied.tolist() == [True, False]
    assert recs.images[0].flatten().tolist() == [0.0, 0.5, 1.0, 1.0] and recs.images[1].abs().sum().item() == 0.0


def test_ssim_uses_the_data_range_of_one_as_a_hand_computed_flat_pair_shows():
    """Two flat images, 0 and 0.1: no variance, so SSIM is the luminance term (2 m1 m2 + C1) / (m1^2 + m2^2 + C1)
    with C1 = (0.01 L)^2; at L = 1 that is 1e-4 / 0.0101 (L = 2 would give 4e-4 / 0.0104, four times more)."""
    dark, grey = np.zeros((1, 8, 8)), np.full((1, 8, 8), 0.1)
    assert structural_similarity(dark, grey) == pytest.approx(1e-4 / 0.0101, rel=1e-9)
    assert structural_similarity(np.repeat(dark, 3, axis=0), np.repeat(grey, 3, axis=0)) == pytest.approx(
        1e-4 / 0.0101, rel=1e-9)


def test_ssim_of_colour_images_averages_every_channel():
    """Channel 0 alike and the others flat against a pattern: the mean of the three channels' SSIM, not channel 0's
    perfect score; and an image that differs in shape from the other is refused."""
    rng = np.random.default_rng(0)
    a = rng.uniform(0, 1, (3, 16, 16))
    b = a.copy()
    b[1:] = 0.5
    per_channel = [structural_similarity(a[c:c + 1], b[c:c + 1]) for c in range(3)]
    assert per_channel[0] == pytest.approx(1.0) and max(per_channel[1:]) < 0.5
    assert structural_similarity(a, b) == pytest.approx(np.mean(per_channel), rel=1e-9)
    with pytest.raises(ValueError, match="one shape"):
        structural_similarity(a, a[:1])


@pytest.mark.parametrize("channels", [1, 3])
def test_a_reconstruction_is_matched_by_the_ssim_of_each_pair_to_the_last_bit(channels):
    """The matching and the null draws score a whole batch at once (scikit-image's call, pair by pair, took seconds
    of every attacked run): each score is still exactly the pair's structural_similarity, ties included."""
    rng = np.random.default_rng(3)
    originals = rng.uniform(0, 1, (6, channels, 12, 16))
    originals[4] = originals[2]                                   # a tie: the first of the two is the match
    recs = np.stack([originals[2], np.full_like(originals[0], 0.5), *rng.uniform(0, 1, (3, channels, 12, 16))])
    matches = match_reconstructions(recs, originals)
    for i, r in enumerate(recs):
        scores = [structural_similarity(r, o) for o in originals]
        assert matches.closest[i] == int(np.argmax(scores)) and matches.ssim[i] == scores[matches.closest[i]]
    with pytest.raises(ValueError, match="exceeds"):
        match_reconstructions(recs[:, :, :6], originals[:, :, :6])


def test_ncc_ignores_contrast_however_faint():
    """NCC is invariant to contrast: a pattern scaled down to 1e-6 still correlates perfectly with itself."""
    a = np.random.default_rng(0).uniform(0, 1, (1, 8, 8))
    assert normalised_cross_correlation(a, 1e-6 * a + 0.5) == pytest.approx(1.0)


def test_with_no_batch_image_no_reconstruction_has_a_match():
    """An empty batch: every reconstruction scores -1, the least SSIM, so it passes no threshold."""
    matches = match_reconstructions(np.zeros((2, 1, 8, 8)), np.zeros((0, 1, 8, 8)))
    assert matches.ssim.tolist() == [-1.0, -1.0] and matches.ncc.tolist() == [0.0, 0.0]


def test_calibrate_threshold_refuses_too_few_images_and_a_quantile_of_0_or_1():
    images = np.random.default_rng(0).uniform(0, 1, (5, 1, 8, 8))
    with pytest.raises(ValueError, match="need more than batch_size = 5 public images, got 5"):
        calibrate_threshold(images, batch_size=5, rng=np.random.default_rng(0))
    for quantile in (0.0, 1.0):
        with pytest.raises(ValueError, match="quantile must be in"):
            calibrate_threshold(images, batch_size=2, quantile=quantile, rng=np.random.default_rng(0))


def test_the_null_median_is_the_median_of_the_null_draws(monkeypatch):
    """Scores fixed per call, batches of one: the five draws' bests are 0, 0, 0.1, 0.2 and 0.9; the median is 0.1
    (their mean, 0.24, is pulled up by the one high draw)."""
    import dpmed.attack.success as success

    scores = iter([0.0, 0.0, 0.1, 0.2, 0.9])
    monkeypatch.setattr(success, "_similarities", lambda a, batch: np.array([next(scores) for _ in batch]))
    got = calibrate_threshold(np.zeros((3, 1, 8, 8)), batch_size=1, n_null=5, quantile=0.5,
                              rng=np.random.default_rng(0))
    assert got.null_median == pytest.approx(0.1) and got.value == pytest.approx(0.1)


def test_the_noisy_copies_of_the_noise_level_stay_in_the_data_range(monkeypatch):
    """The noisy copy is clipped to [0, 1], as a reconstruction is: no copy that SSIM is given leaves it."""
    import dpmed.attack.success as success

    seen = []
    monkeypatch.setattr(success, "structural_similarity", lambda a, b: seen.append(b) or 1.0)
    images = np.stack([np.zeros((1, 8, 8)), np.ones((1, 8, 8))])
    noise_level_at(0.5, images, rng=np.random.default_rng(0), levels=(0.0, 0.3))
    assert len(seen) == 4 and all(b.min() >= 0.0 and b.max() <= 1.0 for b in seen)
    assert seen[2].max() > 0.0 and seen[3].min() < 1.0                 # the noise is there, only clipped


def test_the_intervals_are_clopper_pearson_at_the_requested_level(phantom, threshold, monkeypatch):
    """Three of 24 images and three of three batches found, at level 0.5: the bounds are the beta quantiles of the
    exact binomial interval (per image over the 24 trials, per batch over the 3 batches), computed here from scipy."""
    from scipy.stats import beta

    monkeypatch.setattr(experiment, "match_reconstructions", _matcher(threshold.value))
    result = _attack_with(phantom, threshold, monkeypatch, ci_level=0.5)
    assert (result.n_success, result.n_trials, result.batch_successes) == (3, 24, 3)
    assert result.ci == pytest.approx((beta.ppf(0.25, 3, 22), beta.ppf(0.75, 4, 21)), rel=1e-9)
    assert result.batch_ci == pytest.approx((0.25 ** (1 / 3), 1.0), rel=1e-9)
    assert result.chance_ci == pytest.approx(result.ci, rel=1e-9) and result.ci_level == 0.5


def test_the_mean_scores_are_over_the_attack_s_reconstructions_only(phantom, threshold, monkeypatch):
    """Each batch's reconstructions score SSIM 0 .. 0.7 and NCC 0 but one 0.8; the chance guesses, matched after
    them, score 0.9 and NCC 1 and must not count. The means are 0.35 and 0.1 (not the best 0.7, nor the median 0)."""
    calls = []

    def match(reconstructions, originals):
        calls.append(1)
        n = len(reconstructions)
        if len(calls) % 3 == 1:                        # the attack's own: the first call of each batch
            return Matches(closest=np.zeros(n, dtype=np.int64), ssim=np.linspace(0.0, 0.7, n),
                           ncc=np.r_[np.zeros(n - 1), 0.8])
        return Matches(closest=np.zeros(n, dtype=np.int64), ssim=np.full(n, 0.9), ncc=np.ones(n))

    monkeypatch.setattr(experiment, "match_reconstructions", match)
    result = _attack_with(phantom, threshold, monkeypatch)
    assert result.n_reconstructions == 3 * BATCH                     # noise: every bin occupied, 8 kept per batch
    assert result.mean_best_ssim == pytest.approx(0.35) and result.mean_best_ncc == pytest.approx(0.1)


def test_chance_answers_with_as_many_guesses_as_were_kept_and_prototypes_of_every_brightness(phantom, threshold,
                                                                                              monkeypatch):
    """Two bins and no noise keep at most two reconstructions of a batch of eight: the random public guesses are
    then two, and the prototypes the darkest and the brightest of the eight, not the two darkest."""
    seen = []

    def match(reconstructions, originals):
        seen.append(np.array(reconstructions))
        n = len(reconstructions)
        return Matches(closest=np.zeros(n, dtype=np.int64), ssim=np.full(n, -1.0), ncc=np.zeros(n))

    monkeypatch.setattr(experiment, "match_reconstructions", match)
    images, labels, public = phantom
    run_imprint_attack(model_factory=small_cnn, images=images, labels=labels, public_images=public,
                       max_grad_norm=1.0, noise_multiplier=0.0, expected_batch_size=BATCH, batch_size=BATCH,
                       n_batches=1, n_bins=2, seed=0, threshold=threshold)
    kept, guesses, prototypes = seen
    assert len(kept) == 2 and len(guesses) == 2
    np.testing.assert_array_equal(prototypes, experiment.blind_prototypes(public, BATCH)[[0, BATCH - 1]])


def test_each_batch_holds_distinct_images_and_each_patient_is_one_group_in_the_step(phantom, threshold,
                                                                                     monkeypatch):
    """Batches are drawn without replacement, and the patient ids (any labels) reach the step as groups that join
    exactly the images of one patient."""
    images, labels, public = phantom
    patients = np.array([f"p{i // 2}" for i in range(len(images))])         # two consecutive images: one patient
    steps = []
    release = experiment.release_imprint_gradients

    def spy(model, x, y, *, groups=None, **kwargs):
        steps.append((x.numpy().copy(), groups.numpy().copy()))
        return release(model, x, y, groups=groups, **kwargs)

    monkeypatch.setattr(experiment, "release_imprint_gradients", spy)
    run_imprint_attack(model_factory=small_cnn, images=images, labels=labels, public_images=public,
                       max_grad_norm=1.0, noise_multiplier=0.0, expected_batch_size=16, batch_size=16,
                       n_batches=3, n_bins=16, seed=0, groups=patients, threshold=threshold)
    flat = images.reshape(len(images), -1)
    for x, groups in steps:
        index = [int(np.flatnonzero((flat == row).all(axis=1))[0]) for row in x.reshape(len(x), -1)]
        assert len(set(index)) == len(x)
        owner = patients[index]
        assert all((groups[i] == groups[j]) == (owner[i] == owner[j]) for i in range(len(x)) for j in range(len(x)))
    assert any(len(set(g.tolist())) < len(g) for _, g in steps)           # some patient brought two images


def test_run_imprint_attack_refuses_bad_images_batch_counts_and_patient_ids(phantom):
    images, labels, public = phantom
    kwargs = dict(model_factory=small_cnn, labels=labels, public_images=public, max_grad_norm=1.0,
                  noise_multiplier=1.0, expected_batch_size=BATCH, n_batches=1, seed=0)
    for bad in (images * 1.5, images - 0.5):
        with pytest.raises(ValueError, match=r"values in \[0, 1\]"):
            run_imprint_attack(images=bad, batch_size=BATCH, **kwargs)
    with pytest.raises(ValueError, match="batch_size must be in"):
        run_imprint_attack(images=images[:5], batch_size=6, **kwargs)
    with pytest.raises(ValueError, match="n_batches must be >= 1, got 0"):
        run_imprint_attack(images=images, batch_size=BATCH, **{**kwargs, "n_batches": 0})
    # one patient id per image: ids for fewer images would clip by the wrong patients
    n = len(images)
    with pytest.raises(ValueError, match=rf"one patient id per image, shape \({n},\); got \({n - 1},\)"):
        run_imprint_attack(images=images, batch_size=BATCH, groups=np.arange(n - 1), **kwargs)


def test_the_bins_default_to_four_per_batch_image(phantom, monkeypatch):
    """The bins are calibrated before anything else runs: their count is seen there, and the run stopped."""
    images, labels, public = phantom
    seen = []

    class Stop(Exception):
        pass

    def from_public(public_images, *, n_bins, structure):
        seen.append(n_bins)
        raise Stop

    monkeypatch.setattr(experiment.ImprintBins, "from_public", from_public)
    with pytest.raises(Stop):
        run_imprint_attack(model_factory=small_cnn, images=images, labels=labels, public_images=public,
                           max_grad_norm=1.0, noise_multiplier=1.0, expected_batch_size=BATCH, batch_size=BATCH,
                           n_batches=1, seed=0)
    assert seen == [4 * BATCH]


def test_blind_prototypes_are_medians_not_means_of_three_images():
    """Groups of three flat images, 0.1, 0.2, 0.6 and 0.7, 0.8, 0.9: medians 0.2 and 0.8 (the means are 0.3, 0.8)."""
    images = np.stack([np.full((1, 2, 2), v, dtype=np.float32) for v in (0.9, 0.6, 0.1, 0.8, 0.2, 0.7)])
    got = experiment.blind_prototypes(images, 2)
    np.testing.assert_allclose(got[:, 0, 0, 0], [0.2, 0.8], atol=1e-6)


def test_a_bin_s_strength_is_its_weight_gradient_s_mean_not_its_bias():
    """Sparse rows by hand: bin 0 holds a dark image under a large bias sum (dW = 0.1 each, db = 1), bin 1 a bright
    one under a smaller (dW = 0.5 each, db = 0.6): bin 1 is the stronger by |mean dW|, as breaching ranks them
    under noise. And a negative count asks for no bin."""
    from dpmed.attack.imprint import ImprintGradients

    weight = torch.tensor([[0.1] * 4, [0.5] * 4], dtype=torch.float64)
    bias = torch.tensor([1.0, 0.6], dtype=torch.float64)
    recs = invert_imprint(ImprintGradients(weight=weight, bias=bias), structure="sparse", image_shape=(1, 2, 2))
    assert recs.strength.tolist() == pytest.approx([0.1, 0.5])
    assert recs.strongest(1).tolist() == [1] and recs.strongest(-1).tolist() == []


def test_a_lone_training_image_without_clipping_or_noise_comes_back_through_the_whole_attack(phantom):
    """The degenerate case end to end: a batch of one image, no clipping and no noise. Whatever bin it falls in, it is
    alone there, so the attack's best reconstruction is that image, and the one trial is a success."""
    images, labels, public = phantom
    result = run_imprint_attack(model_factory=small_cnn, images=images[:1], labels=labels[:1], public_images=public,
                                max_grad_norm=math.inf, noise_multiplier=0.0, expected_batch_size=1, batch_size=1,
                                n_batches=1, seed=0, n_null=30)
    assert (result.n_trials, result.n_success, result.batch_successes) == (1, 1, 1)
    assert result.images.ssim[0] > 0.999
    np.testing.assert_allclose(result.images.reconstructions[0], images[0], atol=1e-3)
    np.testing.assert_array_equal(result.images.originals[0], images[0])


def test_enormous_noise_does_no_better_than_the_attacked_step_s_bound(phantom, threshold, seeded_noise):
    """At sigma = 1000 the released rows are noise: the attack's rate is not above what blind public guesses score,
    and its interval's lower end is not above the worst-case bound of its own game (one step whose batch holds the
    image, q = 1, T = 1) at the criterion's prior (the upper end of the chance interval, as the report takes it)."""
    from dpmed import accounting

    images, labels, public = phantom
    sigma = 1000.0
    result = run_imprint_attack(model_factory=small_cnn, images=images, labels=labels, public_images=public,
                                max_grad_norm=1.0, noise_multiplier=sigma, expected_batch_size=BATCH,
                                batch_size=BATCH, n_batches=6, n_bins=32, seed=4, threshold=threshold)
    assert result.rate <= result.chance_ci[1]
    kappa = max(result.chance_ci[1], 1 / len(images))
    bound = accounting.reconstruction_bound(noise_multiplier=sigma, sample_rate=1.0, steps=1, kappa=kappa)
    assert bound == pytest.approx(kappa, abs=1e-2)            # sigma 1000: the bound is the prior
    assert result.ci[0] <= bound
    # nothing of the batch gets through: every reconstruction is the prior's best guess, the public images' mean
    mean = np.clip(public.mean(axis=0), 0.0, 1.0)
    np.testing.assert_allclose(result.images.reconstructions, np.broadcast_to(mean, result.images.originals.shape),
                               atol=1e-3)


def _hand_ssim(a: np.ndarray, b: np.ndarray) -> float:
    """SSIM of two 7 x 7 images as Wang et al. 2004 define it over one 7 x 7 window (the only one that fits), with
    sample (n - 1) variances and covariance and C1 = (0.01 L)^2, C2 = (0.03 L)^2 at L = 1."""
    x, y = a.ravel(), b.ravel()
    mx, my = x.mean(), y.mean()
    vx, vy = x.var(ddof=1), y.var(ddof=1)
    cov = ((x - mx) * (y - my)).sum() / (len(x) - 1)
    c1, c2 = 0.01 ** 2, 0.03 ** 2
    return (2 * mx * my + c1) * (2 * cov + c2) / ((mx ** 2 + my ** 2 + c1) * (vx + vy + c2))


def test_the_success_metric_matches_a_hand_computation_on_tiny_images():
    """On 7 x 7 images SSIM is one window's, computed here from its definition; each reconstruction's match is the
    batch image of highest hand SSIM, and its NCC is the Pearson correlation of that pair."""
    rng = np.random.default_rng(5)
    originals = rng.uniform(0, 1, (3, 1, 7, 7))
    reconstructions = np.stack([np.clip(originals[2] + rng.normal(0, 0.05, (1, 7, 7)), 0, 1),
                                np.clip(originals[0] + rng.normal(0, 0.3, (1, 7, 7)), 0, 1),
                                rng.uniform(0, 1, (1, 7, 7))])
    matches = match_reconstructions(reconstructions, originals)
    for i, r in enumerate(reconstructions):
        hand = [_hand_ssim(r[0], o[0]) for o in originals]
        assert matches.closest[i] == int(np.argmax(hand))
        assert matches.ssim[i] == pytest.approx(max(hand), rel=1e-9)
        assert matches.ncc[i] == pytest.approx(np.corrcoef(r.ravel(), originals[matches.closest[i]].ravel())[0, 1])
    assert matches.closest[:2].tolist() == [2, 0]


def test_the_batches_are_public_randomness_of_the_seed_and_the_step_noise_is_fresh(phantom, threshold, monkeypatch):
    """randomness.py's split: which images are attacked follows the public seed (the same seed attacks the same
    batches, another seed others), while the step's noise is fresh for every attack unless a randomness is given."""
    images, labels, public = phantom
    steps = []
    release = experiment.release_imprint_gradients

    def spy(model, x, y, **kwargs):
        released = release(model, x, y, **kwargs)
        steps.append((x.numpy().copy(), released.bias.numpy().copy()))
        return released

    monkeypatch.setattr(experiment, "release_imprint_gradients", spy)

    def attack(seed, randomness=None):
        steps.clear()
        run_imprint_attack(model_factory=small_cnn, images=images, labels=labels, public_images=public,
                           max_grad_norm=1.0, noise_multiplier=1.0, expected_batch_size=BATCH, batch_size=BATCH,
                           n_batches=2, n_bins=16, seed=seed, threshold=threshold, randomness=randomness)
        return [x for x, _ in steps], [b for _, b in steps]

    (x1, b1), (x2, b2), (x3, _) = attack(0), attack(0), attack(1)
    for a, b in zip(x1, x2, strict=True):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(x1[0], x3[0])
    assert not np.allclose(b1[0], b2[0])                      # same batch, fresh noise
    given = [attack(0, PrivacyRandomness.reproducible(seed=0, run_id="r"))[1] for _ in range(2)]
    np.testing.assert_array_equal(given[0][0], given[1][0])


def test_building_the_attack_model_leaves_the_callers_random_state_alone(phantom):
    """A run trains and attacks in one process: an attack that drew from the global torch generator would move every
    later unseeded draw of its caller. The block's every weight is set from the bins and the pattern, so building it
    needs no draw at all."""
    _, _, public = phantom
    bins = ImprintBins.from_public(public, n_bins=32, structure="cumulative")
    body = small_cnn()                                              # drawn under its own seed, before the check
    before = torch.get_rng_state()
    imprint_model(body, bins, image_shape=(1, SIZE, SIZE), pattern_generator=torch.Generator().manual_seed(0))
    assert torch.equal(torch.get_rng_state(), before)
