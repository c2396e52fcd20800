"""When a reconstruction counts as a success, and how sure a measured success rate is.

Fowl et al. 2022 (and the realistic threat model of Ziller et al. 2024, 004_6210268d59b6f8e5.txt) match each
reconstruction to the closest image of the attacked batch and score the pair. Here the score is SSIM (Wang, Bovik,
Sheikh, Simoncelli 2004, as scikit-image computes it: 7 x 7 Gaussian-free windows, data range 1), and the normalised
cross-correlation of the same pair is reported beside it.

**The threshold** is calibrated, not chosen: medical images of one dataset look alike, so an *unrelated* image of
the same kind already reaches a high SSIM against the closest of a batch (measured on PneumoniaMNIST and the
phantom in benchmarks/RESULTS.md, section "The attack's SSIM threshold"). The best guess an adversary can make
*without* the private data is such a plausible public image. So the threshold is the ``quantile`` (default 0.99)
of that null distribution, computed on public images: a reconstruction passes only if it matches its batch image
better than 99 % of plausible guesses that carry no information about the batch do. For scale,
:func:`noise_level_at` gives the pixel noise at which a noisy copy of an image falls to the threshold (on
PneumoniaMNIST a success is that image seen through mild noise). Uniform noise images score far below the threshold
against the closest of a batch and never pass (both measured in the same section). Single public images are not the
best blind guess, though: the median of many public images of one brightness is smoother and more typical, and
passes far more often. The attack's chance rate measures that (`dpmed.attack.experiment.blind_prototypes`), and the
report reads every attack rate against it.

**The success rate** is per attacked *image*: a trial is one attacked image (a held-out test image in a study) in one
attacked batch, and it is a success when at least one kept reconstruction has that image as its closest (SSIM) batch
image with SSIM at or above the threshold, and that image lay in the reconstruction's bin (``run_imprint_attack``:
the prior pulls a noisy bin towards typical images, and a look-alike of another image is no reconstruction of it;
on the phantom at sigma 0.1, 25 of 79 passing matches were such). Clopper-Pearson intervals (exact binomial; Clopper
and Pearson 1934) treat trials as independent; images of one batch are not quite (they compete for bins), so the
per-batch rate (a batch is a success when any of its images is), whose trials are independent batches, is reported
with its own interval.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.ndimage import uniform_filter
from skimage.metrics import structural_similarity as _skimage_ssim

from dpmed.evaluation.proportions import clopper_pearson   # re-exported: the attack's rates are told with it

__all__ = ["structural_similarity", "normalised_cross_correlation", "Matches", "match_reconstructions",
           "SuccessThreshold", "calibrate_threshold", "noise_level_at", "clopper_pearson"]


def structural_similarity(a: np.ndarray, b: np.ndarray) -> float:
    """SSIM of two images [C, H, W] in [0, 1] (scikit-image, data_range 1; channels averaged when C > 1)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 3:
        raise ValueError(f"need two images [C, H, W] of one shape, got {a.shape} and {b.shape}")
    if a.shape[0] == 1:
        return float(_skimage_ssim(a[0], b[0], data_range=1.0))
    return float(_skimage_ssim(a, b, data_range=1.0, channel_axis=0))


def _similarities(image: np.ndarray, others: np.ndarray) -> np.ndarray:
    """The SSIM of ``image`` [C, H, W] against each of ``others`` [B, C, H, W]: :func:`structural_similarity`'s
    value for each pair, to the last bit, in one pass. On small images scikit-image's call is nearly all checks and
    set-up, paid per pair, and a threshold's null draws are thousands of pairs. Its steps are repeated over the
    batch: 7 x 7 uniform windows, sample covariance, data range 1, each window mean taken along the image axes alone
    (``uniform_filter`` skips an axis of size 1) and each image's mean map over the same 2-D crop."""
    x = np.asarray(image, dtype=np.float64)[None]
    y = np.asarray(others, dtype=np.float64)
    if y.ndim != 4 or y.shape[1:] != x.shape[1:]:
        raise ValueError(f"need images [B, C, H, W] of the shape {x.shape[1:]}, got {y.shape}")
    win, pad = 7, 3
    if min(x.shape[2:]) < win:
        raise ValueError(f"SSIM's {win} x {win} window exceeds the image extent {x.shape[2:]}")

    def mean(a: np.ndarray) -> np.ndarray:
        return uniform_filter(a, size=(1, 1, win, win))

    cov_norm, c1, c2 = win * win / (win * win - 1), 0.01 ** 2, 0.03 ** 2
    ux, uy = mean(x), mean(y)
    vx = cov_norm * (mean(x * x) - ux * ux)
    vy = cov_norm * (mean(y * y) - uy * uy)
    vxy = cov_norm * (mean(x * y) - ux * uy)
    s = ((2 * ux * uy + c1) * (2 * vxy + c2)) / ((ux ** 2 + uy ** 2 + c1) * (vx + vy + c2))
    per_channel = np.array([[m[pad:-pad, pad:-pad].mean(dtype=np.float64) for m in maps] for maps in s])
    return per_channel[:, 0] if per_channel.shape[1] == 1 else per_channel.mean(axis=1)


def normalised_cross_correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson correlation of the pixels of a and b, in [-1, 1]: invariant to brightness and contrast; 0 when
    either image is constant (it carries no pattern to correlate)."""
    x = np.asarray(a, dtype=np.float64).ravel()
    y = np.asarray(b, dtype=np.float64).ravel()
    x, y = x - x.mean(), y - y.mean()
    denom = np.sqrt((x @ x) * (y @ y))
    return float(x @ y / denom) if denom > 0 else 0.0


@dataclass(frozen=True)
class Matches:
    """For each reconstruction [n]: the index of its closest batch image by SSIM, that SSIM, and the pair's NCC."""

    closest: np.ndarray
    ssim: np.ndarray
    ncc: np.ndarray


def match_reconstructions(reconstructions: np.ndarray, originals: np.ndarray) -> Matches:
    """Match each of ``reconstructions`` [n, C, H, W] to the closest of ``originals`` [B, C, H, W] by SSIM."""
    n, b = len(reconstructions), len(originals)
    closest = np.zeros(n, dtype=np.int64)
    ssim = np.full(n, -1.0)
    ncc = np.zeros(n)
    if b == 0:
        return Matches(closest, ssim, ncc)
    for i, r in enumerate(reconstructions):
        scores = _similarities(r, originals)
        closest[i] = int(np.argmax(scores))
        ssim[i] = scores[closest[i]]
        ncc[i] = normalised_cross_correlation(r, originals[closest[i]])
    return Matches(closest, ssim, ncc)


@dataclass(frozen=True)
class SuccessThreshold:
    """value: the SSIM a reconstruction must reach; the ``quantile`` of the best SSIM of an unrelated public image
    against ``batch_size`` other public images, from ``n_null`` such draws (``null_median`` for scale)."""

    value: float
    quantile: float
    batch_size: int
    n_null: int
    null_median: float


def calibrate_threshold(public_images: np.ndarray, *, batch_size: int, rng: np.random.Generator,
                        n_null: int = 200, quantile: float = 0.99) -> SuccessThreshold:
    """The success threshold from public images [N, C, H, W] (see the module docstring). Each null draw takes one
    public image as the guess and ``batch_size`` other public images as the batch, and keeps the best SSIM.

    ``rng``: public randomness (nothing private rests on which public images are drawn)."""
    images = np.asarray(public_images)
    if len(images) < batch_size + 1:
        raise ValueError(f"need more than batch_size = {batch_size} public images, got {len(images)}")
    if not 0 < quantile < 1:
        raise ValueError(f"quantile must be in (0, 1), got {quantile}")
    best = np.empty(n_null)
    for t in range(n_null):
        pick = rng.choice(len(images), size=batch_size + 1, replace=False)
        guess, batch = images[pick[0]], images[pick[1:]]
        best[t] = _similarities(guess, batch).max()
    return SuccessThreshold(value=float(np.quantile(best, quantile)), quantile=quantile, batch_size=batch_size,
                            n_null=n_null, null_median=float(np.median(best)))


def noise_level_at(threshold: float, images: np.ndarray, *, rng: np.random.Generator,
                   levels: tuple[float, ...] = tuple(np.linspace(0.0, 0.3, 31))) -> float:
    """The largest Gaussian pixel noise sd (of ``levels``) at which the median SSIM between an image and its noisy
    copy (clipped to [0, 1]) is still at least ``threshold``: what the threshold means in pixel terms."""
    images = np.asarray(images, dtype=np.float64)
    passing = 0.0
    for sd in levels:
        scores = [structural_similarity(x, np.clip(x + rng.normal(0.0, sd, x.shape), 0.0, 1.0)) for x in images]
        if np.median(scores) < threshold:
            break
        passing = float(sd)
    return passing
