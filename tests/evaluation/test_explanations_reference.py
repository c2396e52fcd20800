"""The explanation metrics of METHODS.md sec. 6 against computations that share no code with dpmed: Grad-CAM by
torch autograd and a numpy bilinear upsampling (and against pytorch-grad-cam's own GradCAM), the confidence,
deletion and insertion metrics by literal loops over the definitions, the lesion metrics by brute force, and the
intervals against the exact distribution of the bootstrap mean."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.stats import binom
from torch import nn

from dpmed.evaluation.cams import compute_cams
from dpmed.evaluation.explanations import explain
from dpmed.evaluation.faithfulness import deletion_insertion, mask_energy, mean_with_interval, pointing_game


class TinyCnn(nn.Module):
    """Two convolutions (the second strided, so the map is coarser than the image), pooling, a linear head."""

    def __init__(self, in_channels: int = 1, n_classes: int = 3, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.features = nn.Sequential(nn.Conv2d(in_channels, 4, 3, padding=1), nn.ReLU(),
                                      nn.Conv2d(4, 5, 3, stride=2, padding=1), nn.ReLU())
        self.head = nn.Linear(5, n_classes)

    def forward(self, x):
        return self.head(self.features(x).mean(dim=(2, 3)))


def _bilinear(a: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Bilinear upsampling of a 2-D map with half-pixel centres (source coordinate (i + 0.5) h / H - 0.5, clamped
    at 0), written out pixel by pixel."""
    h, w = a.shape
    out = np.empty(size)
    for i in range(size[0]):
        for j in range(size[1]):
            y = max((i + 0.5) * h / size[0] - 0.5, 0.0)
            x = max((j + 0.5) * w / size[1] - 0.5, 0.0)
            y0, x0 = int(math.floor(y)), int(math.floor(x))
            y1, x1 = min(y0 + 1, h - 1), min(x0 + 1, w - 1)
            dy, dx = y - y0, x - x0
            out[i, j] = ((1 - dy) * (1 - dx) * a[y0, x0] + (1 - dy) * dx * a[y0, x1]
                         + dy * (1 - dx) * a[y1, x0] + dy * dx * a[y1, x1])
    return out


def _model_input(images: np.ndarray, normalization) -> torch.Tensor:
    x = torch.tensor(np.asarray(images, dtype=np.float64), dtype=torch.float32)
    if normalization is not None:
        mean, std = (torch.tensor(v, dtype=torch.float32).reshape(1, -1, 1, 1) for v in normalization)
        x = (x - mean) / std
    return x


def _grad_cam(model: nn.Module, layer: nn.Module, image: np.ndarray, c, normalization=None) -> np.ndarray:
    """Selvaraju et al.: alpha_k = spatial mean of d y_c / d A_k, L = ReLU(sum_k alpha_k A_k), upsampled to the
    input and divided by its max (all zero stays zero); y_c the logit of class c (a tuple: the sum of their
    logits), for one image [C, H, W]."""
    kept = {}
    handle = layer.register_forward_hook(lambda _m, _i, out: kept.setdefault("a", out))
    try:
        logits = model(_model_input(image[None], normalization))
    finally:
        handle.remove()
    a = kept["a"]
    (grad,) = torch.autograd.grad(logits[0, list(np.atleast_1d(c))].sum(), a)
    alpha = grad[0].double().mean(dim=(1, 2))                                    # [K]
    raw = np.maximum((alpha[:, None, None] * a[0].detach().double()).sum(dim=0).numpy(), 0.0)
    up = _bilinear(raw, image.shape[1:])
    return up / up.max() if up.max() > 0 else up


def _softmax_scores(model: nn.Module, images: np.ndarray, normalization=None) -> np.ndarray:
    with torch.no_grad():
        logits = model(_model_input(images, normalization)).double().numpy()
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _curves(score_fn, image: np.ndarray, cam: np.ndarray, c: int, steps: int):
    """Deletion and insertion curves of one image [C, H, W], literally: locations ranked by decreasing CAM (ties:
    the earlier location in reading order first); at step k the first round(k P / steps) locations are set to 0
    (black) in every channel, or are the only ones kept on a black canvas; the score of class c at each step."""
    _, h, w = image.shape
    order = sorted(range(h * w), key=lambda j: (-float(cam.reshape(-1)[j]), j))
    deletion, insertion = [], []
    for k in range(steps + 1):
        chosen = order[:round(k * h * w / steps)]
        removed, restored = image.copy(), np.zeros_like(image)
        for j in chosen:
            removed[:, j // w, j % w] = 0.0
            restored[:, j // w, j % w] = image[:, j // w, j % w]
        deletion.append(score_fn(removed[None])[0, c])
        insertion.append(score_fn(restored[None])[0, c])
    return deletion, insertion


def _area(curve) -> float:
    """Trapezoid rule over the fraction 0, 1/steps, ..., 1."""
    steps = len(curve) - 1
    return sum((curve[i] + curve[i + 1]) / 2 * (1 / steps) for i in range(steps))


def _points(cam: np.ndarray, mask: np.ndarray, tolerance: float) -> float:
    """Pointing game by brute force: nan for an empty mask, a miss for an all-zero map, else a hit when the rounded
    centroid of the maximal pixels is within ``tolerance`` (Euclidean) of some mask pixel."""
    if not mask.any():
        return math.nan
    if cam.max() <= 0:
        return 0.0
    peaks = [(i, j) for i in range(cam.shape[0]) for j in range(cam.shape[1]) if cam[i, j] == cam.max()]
    r = round(sum(p[0] for p in peaks) / len(peaks))
    s = round(sum(p[1] for p in peaks) / len(peaks))
    nearest = min(math.hypot(r - i, s - j) for i in range(mask.shape[0]) for j in range(mask.shape[1]) if mask[i, j])
    return float(nearest <= tolerance)


def _energy(cam: np.ndarray, mask: np.ndarray) -> float:
    if not mask.any():
        return math.nan
    total = sum(float(v) for v in cam.reshape(-1))
    inside = sum(float(v) for v, m in zip(cam.reshape(-1), mask.reshape(-1), strict=True) if m)
    return inside / total if total > 0 else 0.0


# ------------------------------------------------------------------------------------------------------ Grad-CAM


def test_grad_cam_equals_autograd_on_a_small_cnn_for_each_image_s_own_class():
    model = TinyCnn(in_channels=2, n_classes=3)
    images = np.random.default_rng(1).random((4, 2, 9, 7)).astype(np.float32)      # 5x4 maps upsampled to 9x7
    norm = ((0.4, 0.6), (0.2, 0.3))
    targets = [0, 2, 1, 2]
    cams = compute_cams(model, images, target_layer="features", targets=targets, normalization=norm, batch_size=3)
    for i, c in enumerate(targets):
        expected = _grad_cam(model, model.features, images[i], c, normalization=norm)
        np.testing.assert_allclose(cams[i], expected, atol=1e-5)


def test_grad_cam_agrees_with_pytorch_grad_cam_up_to_its_min_max_rescaling():
    """pytorch-grad-cam's GradCAM rescales each map to [min, max] -> [0, 1]; the reference Grad-CAM above, rescaled
    the same way, is its map, so the reference and the library compute the same alpha and sum."""
    from pytorch_grad_cam import GradCAM
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    model = TinyCnn(in_channels=1, n_classes=2, seed=3)
    images = np.random.default_rng(2).random((3, 1, 12, 12)).astype(np.float32)
    targets = [1, 0, 1]
    cam = GradCAM(model=model, target_layers=[model.features])
    try:
        library = cam(input_tensor=torch.from_numpy(images), targets=[ClassifierOutputTarget(c) for c in targets])
    finally:
        cam.activations_and_grads.release()
    for i, c in enumerate(targets):
        ours = _grad_cam(model, model.features, images[i], c)
        if ours.max() <= 0:
            continue
        np.testing.assert_allclose(library[i], (ours - ours.min()) / (ours.max() - ours.min()), atol=1e-3)


# ------------------------------------------------------------------------------------------ deletion, insertion


@pytest.mark.parametrize("steps", [3, 5, 16])
def test_deletion_and_insertion_equal_a_literal_loop_on_a_linear_model(steps):
    """A model whose class scores are fixed linear functions of the pixels; CAMs with ties (ranked in reading
    order) and step counts that do not divide the 16 locations of a 4x4 image."""
    rng = np.random.default_rng(steps)
    weights = rng.normal(size=(3, 2 * 4 * 4))

    def score(batch):
        return np.asarray(batch, dtype=np.float64).reshape(len(batch), -1) @ weights.T

    images = rng.random((3, 2, 4, 4)).astype(np.float32)
    cams = rng.integers(0, 4, size=(3, 4, 4)).astype(np.float64) / 3             # many ties
    targets = [2, 0, 1]
    dele, ins, dcurve, icurve = deletion_insertion(score, images, cams, targets, steps=steps, batch_size=7)
    for i, c in enumerate(targets):
        d, n = _curves(score, images[i], cams[i], c, steps)
        np.testing.assert_allclose(dcurve[i], d, rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(icurve[i], n, rtol=1e-6, atol=1e-9)
        assert dele[i] == pytest.approx(_area(d), rel=1e-6, abs=1e-9)
        assert ins[i] == pytest.approx(_area(n), rel=1e-6, abs=1e-9)


# ----------------------------------------------------------------------------------------------- lesion metrics


def test_pointing_game_and_mask_energy_equal_brute_force_on_maps_with_ties():
    rng = np.random.default_rng(5)
    cams = rng.integers(0, 3, size=(60, 6, 5)).astype(np.float64) / 2          # ties at the maximum are common
    cams[:5] = 0.0                                                              # all-zero maps
    cams[5:8] = 0.7                                                             # flat maps
    masks = rng.random((60, 6, 5)) < 0.2
    masks[::7] = False                                                          # empty masks
    for tolerance in (0.0, 1.0, 1.5):
        expected = [_points(c, m, tolerance) for c, m in zip(cams, masks, strict=True)]
        np.testing.assert_array_equal(pointing_game(cams, masks, tolerance=tolerance), expected)
    np.testing.assert_allclose(mask_energy(cams, masks), [_energy(c, m) for c, m in zip(cams, masks, strict=True)])


def test_pointing_game_on_hand_made_ties():
    mask = np.zeros((1, 5, 5), bool)
    mask[0, 2, 2] = True                                                        # only the centre
    two_peaks = np.zeros((1, 5, 5))
    two_peaks[0, 2, 0] = two_peaks[0, 2, 4] = 1.0                               # peaks either side: centroid (2, 2)
    assert pointing_game(two_peaks, mask).tolist() == [1.0]
    corner = np.zeros((1, 5, 5), bool)
    corner[0, 2, 0] = True                                                      # mask on one of the two peaks
    assert pointing_game(two_peaks, corner).tolist() == [0.0]                   # the map does not prefer it
    assert pointing_game(np.zeros((1, 5, 5)), mask).tolist() == [0.0]           # all-zero: points nowhere
    assert mask_energy(np.zeros((1, 5, 5)), mask).tolist() == [0.0]
    assert np.isnan(pointing_game(two_peaks, np.zeros((1, 5, 5), bool))[0])
    assert np.isnan(mask_energy(two_peaks, np.zeros((1, 5, 5), bool))[0])


# ------------------------------------------------------------------------------------------------ one run, whole


def test_explain_equals_the_definitions_computed_from_scratch():
    """explain() against METHODS.md sec. 6 computed here: c the argmax, Y and O softmax scores of c on I and on
    E = L * I (L the reference Grad-CAM, E in [0, 1] pixels, then normalised), the three confidence metrics, the
    deletion and insertion AUC with a black baseline in pixel space, and the lesion metrics of class 1's map."""
    model = TinyCnn(in_channels=1, n_classes=3, seed=7)
    rng = np.random.default_rng(7)
    images = rng.random((5, 1, 8, 8)).astype(np.float32)
    masks = np.zeros((5, 8, 8), bool)
    masks[:4, 2:5, 3:7] = True
    masks[4] = False
    norm = ((0.5,), (0.25,))
    record, arrays = explain(model, images, kind="multiclass", target_layer="features", normalization=norm,
                             masks=masks, lesion_class=1, deletion_steps=4, n_resamples=30)

    def score(batch):
        return _softmax_scores(model, batch, norm)

    probs = score(images)
    c = probs.argmax(axis=1)
    cams = np.stack([_grad_cam(model, model.features, images[i], int(c[i]), norm) for i in range(5)])
    np.testing.assert_allclose(arrays["cams"], cams, atol=2e-3)                 # stored as float16
    y = probs[np.arange(5), c]
    o = np.array([score((cams[i] * images[i])[None])[0, c[i]] for i in range(5)])
    np.testing.assert_allclose(arrays["score_image"], y, rtol=1e-6)
    np.testing.assert_allclose(arrays["score_masked"], o, rtol=1e-4)
    m = record.metrics
    assert m["average_drop"].value == pytest.approx(100 * np.mean(np.maximum(0, y - o) / y), rel=1e-4)
    assert m["increase_in_confidence"].value == pytest.approx(100 * np.mean(y < o))
    assert m["masked_input_score"].value == pytest.approx(100 * np.mean(o / y), rel=1e-4)
    curves = [_curves(score, images[i], cams[i], int(c[i]), 4) for i in range(5)]
    assert m["deletion_auc"].value == pytest.approx(np.mean([_area(d) for d, _ in curves]), rel=1e-4)
    assert m["insertion_auc"].value == pytest.approx(np.mean([_area(n) for _, n in curves]), rel=1e-4)
    black = score(np.zeros((1, 1, 8, 8)))[0]
    np.testing.assert_allclose(arrays["deletion_curve"][:, -1], black[c], rtol=1e-5)   # all pixels black
    np.testing.assert_allclose(arrays["insertion_curve"][:, 0], black[c], rtol=1e-5)
    lesion = np.stack([_grad_cam(model, model.features, images[i], 1, norm) for i in range(4)])
    assert m["mask_energy"].value == pytest.approx(np.mean([_energy(lesion[i], masks[i]) for i in range(4)]),
                                                   rel=1e-4)
    assert m["mask_energy"].n == m["pointing_game"].n == 4                      # the image without a lesion is out
    assert m["pointing_game"].value == pytest.approx(np.mean([_points(lesion[i], masks[i], 0.0) for i in range(4)]))


def test_a_multilabel_run_reads_sigmoid_scores_and_maps_the_lesions_of_every_finding():
    model = TinyCnn(in_channels=1, n_classes=2, seed=9)
    images = np.random.default_rng(9).random((3, 1, 8, 8)).astype(np.float32)
    masks = np.zeros((3, 8, 8), bool)
    masks[:, 1:4, 1:4] = True
    _, arrays = explain(model, images, kind="multilabel", target_layer="features", masks=masks, deletion_steps=4,
                        n_resamples=20)
    with torch.no_grad():
        logits = model(torch.from_numpy(images)).double().numpy()
    scores = 1 / (1 + np.exp(-logits))
    c = scores.argmax(axis=1)
    np.testing.assert_allclose(arrays["score_image"], scores[np.arange(3), c], rtol=1e-6)
    lesion = np.stack([_grad_cam(model, model.features, images[i], (0, 1)) for i in range(3)])
    np.testing.assert_allclose(arrays["lesion_cams"], lesion, atol=2e-3)


# ---------------------------------------------------------------------------------------------------- intervals


def test_interval_over_images_is_the_percentile_interval_of_the_bootstrap_mean():
    """Nine zeros and a one (and undefined values, left out): a redrawn mean is Binomial(10, 0.1) / 10, whose 2.5%
    and 97.5% quantiles are 0 and 0.3; 20000 redraws land on them."""
    v = np.array([0.0] * 9 + [1.0] + [np.nan] * 3)
    est = mean_with_interval(v, n_resamples=20000, seed=11)
    assert est.value == pytest.approx(0.1) and est.n == 10
    assert (est.low, est.high) == pytest.approx((binom.ppf(0.025, 10, 0.1) / 10, binom.ppf(0.975, 10, 0.1) / 10))


def test_interval_over_patients_redraws_whole_patients_and_averages_their_images():
    """One patient with ten images scoring 1, nine with one image scoring 0. Redrawing the ten patients, the big one
    is drawn X ~ Binomial(10, 0.1) times and the redrawn mean over images is 10 X / (10 X + 10 - X): quantiles 0 and
    30 / 37. (Redrawing images would give about [0.32, 0.74]; averaging patient means, X / 10, [0, 0.3].)"""
    v = np.array([1.0] * 10 + [0.0] * 9)
    ids = ["big"] * 10 + [f"p{i}" for i in range(9)]
    est = mean_with_interval(v, n_resamples=20000, seed=12, patient_ids=ids)
    assert est.value == pytest.approx(10 / 19) and est.n == 19

    def mean_of(x):
        return 10 * x / (10 * x + 10 - x)

    assert (est.low, est.high) == pytest.approx((mean_of(binom.ppf(0.025, 10, 0.1)),
                                                 mean_of(binom.ppf(0.975, 10, 0.1))))
