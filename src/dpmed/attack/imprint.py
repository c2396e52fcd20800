"""The imprint module of "Robbing the Fed" and its inversion: a malicious model that turns one DP-SGD step into images.

Fowl, Geiping, Czaja, Goldblum, Goldstein, "Robbing the Fed: Directly obtaining private data in federated learning
with modified models", ICLR 2022 (arXiv:2110.13057); reference code: ``breaching``
(github.com/JonasGeiping/breaching, ``cases/malicious_modifications/imprint.py`` and
``attacks/analytic_attack.py:ImprintAttacker``). That package is not used: it needs hydra and its own data and model
zoo, and its attack reads gradients it computes itself. Here the gradients come from dpmed's own DP-SGD step
(:class:`dpmed.training.DpSgdStep`), so what is attacked is exactly what a DP arm releases.

**What the adversary controls** (the "realistic" threat model of 004_6210268d59b6f8e5.txt, METHODS.md s.7, made
concrete). It holds the architecture and weights of the arm's model and may choose its hyperparameters; it does not
hold the training images. It ships a *modified* model (the malicious server of Fowl et al.), so it also controls:
* an imprint block in front of the arm's model (the *body*): a linear "measurement" layer of k rows, every row the
  same direction (the mean brightness, 1/d per pixel), biases at brightness thresholds, a nonlinearity, and a
  frozen connection that adds a tiny brightness-dependent offset along a fixed pattern v to the image the body sees;
* which parameters are trained (a fine-tuning hyperparameter): only the measurement layer; the body is frozen, so
  each example's whole clipped norm C is spent on the rows the attack reads (the strongest use of the step);
* the thresholds, from the brightness *distribution* of public images (never the private ones);
* the augmentation: none, each image through the step once as it is; an arm's multiplicity K averages K augmented
  copies of an image before clipping, which would only blur what the bins read, and leaves the accounting unchanged;
* the scales: ``perturbation`` keeps the body's input within 1e-4 or so of the image, so the model still works,
  and ``amplification`` makes each example's gradient far larger than any practical C, so clipping always binds
  and every example contributes exactly C (it then bounds nothing the attack needs: see below).
It does not control C, sigma, the batch or the noise: the step is the arm's (``DpSgdStep`` with the arm's
``max_grad_norm``, ``noise_multiplier`` and expected batch size, fresh secure noise).

**Why it works, and why clipping alone does not stop it.** Row i of the measurement layer computes
h_i = a(gain (m(x) - t_i) / s_i) with m(x) the mean brightness; the connection's columns are all the same vector,
so dL/dh_i = u(x) is the same for every row i. The released gradient of row i is therefore
    dW_i = sum_j c_j u(x_j) a'_ij x_j,      db_i = sum_j c_j u(x_j) a'_ij          (c_j: the clip factor)
and for the images that the structure isolates in bin i (see :data:`IMPRINT_STRUCTURES`), dW_i / db_i = x when one
image is alone there. The clip factor c_j scales numerator and denominator alike and cancels: per-example clipping
alone changes nothing (the tests check it). Only the Gaussian noise sigma C per coordinate, added to both, defeats
the ratio.

A normalisation layer removes a uniform offset of its input, so a connection that added the same value to every
pixel would give the body almost no gradient to pass back; a zero-mean pattern v is not removed.

**Reading through the noise.** The ratio alone leaves each pixel under noise sigma C / |db|, and a noisy db scales
the whole image wrongly. An adversary knows more than breaching's inversion uses: the bin fixes the image's
brightness (so mean(dW) / brightness estimates db far better than db itself), and public images of the same kind
give a prior. :class:`ImagePrior` applies it (a Wiener filter on the public images' principal axes); on
PneumoniaMNIST at the sigma of eps 1e6 it turns 0 % successes into about a third (benchmarks/RESULTS.md, section
"A decoder that uses the adversary's prior").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn.utils import skip_init

from dpmed.training.dp_sgd import DpSgdStep

__all__ = [
    "ImprintStructure", "IMPRINT_STRUCTURES", "ImprintBins", "ImprintBlock", "ImprintedModel", "ImprintGradients",
    "Reconstructions", "ImagePrior", "brightness", "imprint_model", "release_imprint_gradients", "invert_imprint",
]


def _cumulative_isolate(rows: Tensor) -> Tensor:
    """Row i holds every image with m > t_i; row i minus row i + 1 holds those in (t_i, t_(i+1)]: [k, ...]."""
    out = rows.clone()
    out[:-1] -= rows[1:]
    return out


@dataclass(frozen=True)
class ImprintStructure:
    """How the imprint rows respond to brightness, and how the released rows are turned into one sum per bin.

    nonlinearity(gain): the parameter-free activation after the measurement layer (its trainable layers stay
        Linear, which dpmed's clipping engine supports).
    widths(edges [k+1]) -> s [k]: the scale of each row's pre-activation, (m - t_i) / s_i.
    isolate(rows [k, ...]) -> per-bin sums [k, ...]: of the images whose brightness lies in bin i.
    """

    name: str
    nonlinearity: Callable[[float], nn.Module]
    widths: Callable[[np.ndarray], np.ndarray]
    isolate: Callable[[Tensor], Tensor]
    description: str


IMPRINT_STRUCTURES: dict[str, ImprintStructure] = {
    s.name: s
    for s in (
        ImprintStructure(
            "cumulative", lambda gain: nn.ReLU(), lambda edges: np.ones(len(edges) - 1),
            _cumulative_isolate,
            "ReLU rows: row i is active for every image brighter than t_i, so an image in bin b sits in rows 0..b; "
            "differences of consecutive rows isolate a bin (Fowl et al. 2022; breaching's ImprintBlock). "
            "An image's clipped norm is spread over b + 1 rows and a difference doubles the noise variance"),
        ImprintStructure(
            "sparse", lambda gain: nn.Hardtanh(min_val=0.0, max_val=gain), lambda edges: np.diff(edges),
            lambda rows: rows,
            "hard-tanh rows (two ReLUs): row i has a gradient only for images inside (t_i, t_(i+1)), so a row is a "
            "bin and no difference is needed (Fowl et al. 2022; breaching's SparseImprintBlock): "
            "the stronger variant under noise"),
    )
}


def brightness(images: np.ndarray | Tensor) -> np.ndarray:
    """The imprint's measurement m(x): the mean over every pixel and channel, float64 [N], for images [N, C, H, W]."""
    arr = images.detach().cpu().numpy() if isinstance(images, Tensor) else np.asarray(images)
    if arr.ndim != 4:
        raise ValueError(f"images must be [N, C, H, W], got shape {arr.shape}")
    return arr.reshape(len(arr), -1).astype(np.float64).mean(axis=1)


@dataclass(frozen=True)
class ImprintBins:
    """Brightness bin edges e_0 < ... < e_k (float64 [k + 1]) and the structure they are used with.

    Bin i is (e_i, e_(i+1)]. The interior edges are quantiles of the brightness of *public* images, so each bin holds
    1/k of that distribution and a private batch of B images leaves an image alone in its bin with probability
    about (1 - 1/k)^(B - 1) (bins of equal mass, as in Fowl et al. 2022 and breaching). e_0 and e_k lie just outside
    [0, 1], the range of dpmed's images, so every image falls in some bin.
    """

    edges: np.ndarray
    structure: str

    def __post_init__(self) -> None:
        edges = np.asarray(self.edges, dtype=np.float64)
        if edges.ndim != 1 or len(edges) < 2 or not np.all(np.diff(edges) > 0):
            raise ValueError("bin edges must be a strictly increasing 1-D array of at least 2 values; public images "
                             "with tied brightness make empty bins: use fewer bins")
        if self.structure not in IMPRINT_STRUCTURES:
            raise ValueError(f"unknown imprint structure {self.structure!r}; known: {sorted(IMPRINT_STRUCTURES)}")
        edges.setflags(write=False)
        object.__setattr__(self, "edges", edges)

    @classmethod
    def from_public(cls, public_images: np.ndarray | Tensor, *, n_bins: int, structure: str = "cumulative",
                    margin: float = 1e-3) -> "ImprintBins":
        """Equal-mass bins of the brightness of ``public_images`` [N, C, H, W] (the adversary's data, never the
        private batch). Needs at least n_bins public images; tied brightness values give fewer than n_bins bins."""
        if n_bins < 1:
            raise ValueError(f"n_bins must be >= 1, got {n_bins}")
        m = brightness(public_images)
        if len(m) < n_bins:
            raise ValueError(f"{len(m)} public images cannot calibrate {n_bins} equal-mass bins; give at least "
                             "n_bins images")
        # Public images of exactly equal brightness (JPEGs of a flat field, many copies of a template) put several
        # quantiles on one value; those bins would be empty, so tied edges merge and fewer, larger bins remain.
        interior = np.unique(np.quantile(m, np.arange(1, n_bins) / n_bins))
        edges = np.concatenate([[min(0.0, m.min()) - margin], interior, [max(1.0, m.max()) + margin]])
        return cls(edges, structure)

    @property
    def n_bins(self) -> int:
        return len(self.edges) - 1

    def bin_of(self, images: np.ndarray | Tensor) -> np.ndarray:
        """The bin index of each image, int [N] (in float64; the model decides in float32, which can differ for an
        image within about 1e-7 of an edge)."""
        return np.clip(np.searchsorted(self.edges, brightness(images), side="left") - 1, 0, self.n_bins - 1)


class ImprintBlock(nn.Module):
    """[B, C, H, W] -> the image plus a brightness-dependent offset along a fixed pattern, [B, C, H, W].

    measure (trainable Linear d -> k): row i = gain / (s_i d) everywhere, bias -gain t_i / s_i, so its output is
    gain (m(x) - t_i) / s_i; then the structure's nonlinearity; then ``connection`` (frozen Linear k -> d, no bias,
    every column amplification * v, v a zero-mean unit pattern). gain = perturbation / amplification, so the offset
    is perturbation * (sum of unit activations) * v and dL/dh_i = amplification * <v, dL/dx'>, the same for all i.
    """

    def __init__(self, image_shape: tuple[int, int, int], bins: ImprintBins, *, amplification: float,
                 perturbation: float, pattern: Tensor) -> None:
        super().__init__()
        if not (amplification > 0 and perturbation > 0):
            raise ValueError("amplification and perturbation must be > 0")
        self.image_shape = tuple(int(s) for s in image_shape)
        d = math.prod(self.image_shape)
        if pattern.shape != (d,):
            raise ValueError(f"pattern must have shape ({d},), got {tuple(pattern.shape)}")
        self.structure = IMPRINT_STRUCTURES[bins.structure]
        k = bins.n_bins
        gain = perturbation / amplification
        widths = self.structure.widths(bins.edges)                                             # [k]
        # uninitialised (every weight is set below): a default initialisation would draw from, and so move, the
        # caller's global torch random state, and an attack must leave a run's later draws as they were
        self.measure = skip_init(nn.Linear, d, k)
        self.nonlinearity = self.structure.nonlinearity(gain)
        self.connection = skip_init(nn.Linear, k, d, bias=False)
        with torch.no_grad():
            row = torch.as_tensor(gain / (widths * d), dtype=torch.float32)                   # [k]
            self.measure.weight.copy_(row[:, None].expand(k, d))
            self.measure.bias.copy_(torch.as_tensor(-gain * bins.edges[:-1] / widths, dtype=torch.float32))
            self.connection.weight.copy_((amplification * pattern.float())[:, None].expand(d, k))
        self.connection.weight.requires_grad_(False)

    def forward(self, x: Tensor) -> Tensor:
        h = self.nonlinearity(self.measure(x.flatten(1)))                                     # [B, k]
        return x + self.connection(h).view(-1, *self.image_shape)                             # [B, C, H, W]


class ImprintedModel(nn.Module):
    """The malicious model: ``imprint`` in front of the arm's model ``body`` (frozen): [B, C, H, W] -> body's logits."""

    def __init__(self, imprint: ImprintBlock, body: nn.Module) -> None:
        super().__init__()
        self.imprint = imprint
        self.body = body

    def forward(self, x: Tensor) -> Tensor:
        return self.body(self.imprint(x))


def imprint_model(body: nn.Module, bins: ImprintBins, *, image_shape: tuple[int, int, int],
                  amplification: float = 1e6, perturbation: float = 1e-4,
                  pattern_generator: torch.Generator) -> ImprintedModel:
    """The adversary's model: an imprint block in front of ``body``, whose parameters it freezes (``body`` is the
    adversary's own copy of the arm's model: it is modified in place, requires_grad set to False).

    amplification 1e6 puts each example's imprint gradient far above any C used in practice (it is
    amplification |<v, dL/dx'>| sqrt(n_rows (||x||^2 + 1)), and 1e6 times the smallest |<v, dL/dx'>| measured at
    initialisation for small_cnn and resnet9 is still far above 1: benchmarks/RESULTS.md, section "The imprint
    attack's amplification"), so clipping binds for every
    example and each contributes exactly C; an example whose loss gradient all but vanishes (a confidently right
    prediction of a trained body) can stay below C and contributes less. The ratio the attack reads does not depend
    on the amplification. perturbation 1e-4 keeps the body's
    input within about k * 1e-4 / sqrt(d) per pixel of the image. The pattern v is drawn from
    ``pattern_generator`` (public randomness: nothing private rests on it)."""
    d = math.prod(image_shape)
    v = torch.randn(d, generator=pattern_generator, dtype=torch.float64)
    v = v - v.mean()
    v = v / v.norm()
    body.requires_grad_(False)
    return ImprintedModel(ImprintBlock(image_shape, bins, amplification=amplification, perturbation=perturbation,
                                       pattern=v), body)


@dataclass(frozen=True)
class ImprintGradients:
    """What one DP-SGD step released for the imprint's measurement layer: the noisy mean gradient of its weight
    [k, d] and bias [k] (float64 copies of ``p.grad``)."""

    weight: Tensor
    bias: Tensor


def release_imprint_gradients(model: ImprintedModel, images: Tensor, labels: Tensor, *,
                              loss_fn: Callable[[Tensor, Tensor], Tensor], max_grad_norm: float,
                              noise_multiplier: float, expected_batch_size: float, noise_rng: np.random.Generator,
                              groups: Tensor | None = None, noise: str = "gaussian") -> ImprintGradients:
    """One DP-SGD step of the arm on ``images`` [B, C, H, W], ``labels`` [B, ...] through dpmed's own
    :class:`~dpmed.training.DpSgdStep` (engine "dpmed"; ``noise`` "gaussian" with L2 clipping, or "laplace" with L1
    clipping, as the arm's), and what it released for the imprint.

    ``loss_fn`` must sum over the batch (as for ``DpSgdStep``). ``groups``: the patient id of each image (int [B]):
    then each patient's summed gradient is clipped (METHODS.md s.2b). ``noise_rng``: the noise stream, e.g.
    ``PrivacyRandomness.secure().stream("noise")``. The model's ``.grad`` are cleared afterwards."""
    step = DpSgdStep(model, loss_fn=loss_fn, max_grad_norm=max_grad_norm, noise_multiplier=noise_multiplier,
                     expected_batch_size=expected_batch_size, physical_batch_size=max(1, len(images)),
                     noise_rng=noise_rng, noise=noise, engine="dpmed")
    step(images, labels, groups=groups)
    measure = model.imprint.measure
    released = ImprintGradients(weight=measure.weight.grad.detach().to(torch.float64).clone(),
                                bias=measure.bias.grad.detach().to(torch.float64).clone())
    for p in model.parameters():
        p.grad = None
    return released


@dataclass(frozen=True)
class Reconstructions:
    """One candidate image per bin, [k, C, H, W] float32 in [0, 1] (the data range, which the adversary knows);
    ``occupied`` [k] bool: bins whose isolated bias gradient is not zero (every bin, once there is noise);
    ``strength`` [k] float64: |mean of the bin's isolated weight gradient|, the adversary's ranking of how much
    image a bin holds (breaching's rule "best when faced with differential privacy")."""

    images: Tensor
    occupied: Tensor
    strength: Tensor

    def strongest(self, n: int) -> Tensor:
        """Indices of at most ``n`` occupied bins, strongest first, int64 [<= n]."""
        idx = torch.nonzero(self.occupied).flatten()
        order = torch.argsort(self.strength[idx], descending=True, stable=True)
        return idx[order][:max(0, int(n))]


@dataclass(frozen=True)
class ImagePrior:
    """What the adversary's public images say about an image before any gradient: their mean [d] (float64), leading
    principal axes [r, d] (orthonormal rows, float32) and the variance along each [r] (float64). Treating an image as
    Gaussian with that covariance, the best linear estimate from a copy under white pixel noise of sd tau is the
    Wiener filter mean + sum_j lambda_j / (lambda_j + tau^2) <x - mean, a_j> a_j: directions the public images vary
    along keep their signal, the rest (noise, mostly) is removed. Outside the axes kept the public images vary by
    ``residual_variance`` per pixel (their remaining variance spread evenly), shrunk alike: with it the filter tends
    to the unfiltered copy as tau falls, where axes alone would keep only what the public images span."""

    mean: np.ndarray
    axes: np.ndarray
    variances: np.ndarray
    residual_variance: float = 0.0

    @classmethod
    def from_public(cls, public_images: np.ndarray | Tensor, *, max_axes: int = 256) -> "ImagePrior":
        """The prior of ``public_images`` [N, C, H, W] (N >= 2; the adversary's data, never the private batch), on at
        most ``max_axes`` leading axes: all min(N, d) of them would be 1.2 GB at 224 px RGB with 1,000 images, and
        the trailing ones carry almost no variance, so the filter removes them under any noise anyway. Axes along
        which the public images do not vary at all are dropped (their direction is arbitrary). The axes come from
        the eigenvectors of the smaller of the two Gram matrices, summed in float64 a block of pixels at a time,
        so no float64 copy of the images is made."""
        arr = public_images.detach().cpu().numpy() if isinstance(public_images, Tensor) else public_images
        flat = np.asarray(arr, dtype=np.float32).reshape(len(arr), -1)
        n, d = flat.shape
        if n < 2:
            raise ValueError(f"an image prior needs at least 2 public images, got {n}")
        if not np.isfinite(flat).all():
            raise ValueError("public images must be finite to form an image prior")
        mean = flat.mean(axis=0, dtype=np.float64)
        centred = flat - mean.astype(np.float32)
        blocks = [slice(j, j + 16384) for j in range(0, d, 16384)]
        if d <= n:
            lam, vecs = np.linalg.eigh(centred.T.astype(np.float64) @ centred)
        else:
            gram = np.zeros((n, n))
            for b in blocks:
                part = centred[:, b].astype(np.float64)
                gram += part @ part.T
            lam, vecs = np.linalg.eigh(gram)
        # at most n - 2 axes: n - 1 would span all the public images' variance, leave none outside and so project
        # every estimate onto their span however small the noise (probabilistic PCA's residual variance)
        order = np.argsort(lam)[::-1][:max(0, min(int(max_axes), n - 2))]
        # a variance under what float32 rounding of the images leaves, (eps s_max)^2 per dimension, is none
        order = order[lam[order] > max(lam.max(), 0.0) * max(n, d) * np.finfo(np.float32).eps ** 2]
        lam, vecs = lam[order], vecs[:, order]
        if d <= n:
            axes = vecs.T.astype(np.float32)
        else:          # a_j = centred^T u_j / sqrt(lambda_j), a block of pixels at a time
            axes = np.empty((len(order), d), dtype=np.float32)
            for b in blocks:
                axes[:, b] = (vecs.T @ centred[:, b].astype(np.float64)) / np.sqrt(lam)[:, None]
        total = sum(float(np.square(centred[:, b], dtype=np.float64).sum()) for b in blocks) / (n - 1)
        rest = max(0.0, total - float(lam.sum()) / (n - 1)) / max(1, d - len(order))
        return cls(mean=mean, axes=axes, variances=lam / (n - 1), residual_variance=rest)

    def denoise(self, x: Tensor, noise_sd: Tensor) -> Tensor:
        """The Wiener estimates of images ``x`` [n, d] under pixel noise of sd ``noise_sd`` [n] (float64)."""
        mean, axes, lam = (torch.as_tensor(a, device=x.device, dtype=x.dtype)
                           for a in (self.mean, self.axes, self.variances))
        tau2 = noise_sd[:, None] ** 2
        coef = (x - mean) @ axes.T
        rest = x - mean - coef @ axes
        rest_shrink = self.residual_variance / (self.residual_variance + tau2) if self.residual_variance > 0 else 0.0
        return mean + (coef * (lam[None, :] / (lam[None, :] + tau2))) @ axes + rest * rest_shrink


def invert_imprint(released: ImprintGradients, *, structure: str, image_shape: tuple[int, int, int],
                   empty_tolerance: float = 1e-6, bins: ImprintBins | None = None, prior: ImagePrior | None = None,
                   noise_sd: float = 0.0, clipped_norm: float = math.inf) -> Reconstructions:
    """The attacker's inversion: isolate each bin's sums (the structure's ``isolate``), then x = dW / db per bin
    (Fowl et al. 2022; breaching's ImprintAttacker; the ratio is unchanged by clipping and by the division by the
    expected batch size), then clamp to [0, 1].

    Under noise (``noise_sd``: the sd of each coordinate of the released gradient, sigma C / expected batch size for
    Gaussian noise, which the adversary knows) it uses what it knows besides: with ``bins``, a bin's db is taken
    as mean(dW) / the bin's mid brightness wherever that is the more precise (its error is at most half the bin's
    width, relative; db's is its noise over |db|); with ``prior``, each x is Wiener-filtered (:class:`ImagePrior`)
    under the pixel noise that remains. That noise is the larger of the row's noise over the estimated db and over
    the db one image gives when its clipping binds (``clipped_norm``, C / expected batch size, over
    sqrt(||x||^2 + 1) at the bin's brightness): where the noise swamps a bin, its db estimate is noise too, and
    dividing by it would call the result clean. Without noise both leave the ratio exact.

    A bin is empty when its isolated |db| is at most ``empty_tolerance`` times the largest: without noise an empty
    bin's rows cancel to rounding error."""
    info = IMPRINT_STRUCTURES[structure]
    w = info.isolate(released.weight)                                                         # [k, d]
    b = info.isolate(released.bias)                                                           # [k]
    scale = b.abs().max()
    occupied = b.abs() > empty_tolerance * scale if scale > 0 else torch.zeros_like(b, dtype=torch.bool)
    iso_sd = noise_sd * info.isolate(torch.eye(len(b), dtype=b.dtype, device=b.device)).norm(dim=1)    # [k]
    db, nominal = b, torch.zeros_like(b)
    if bins is not None and noise_sd > 0:
        edges = torch.tensor(bins.edges, device=w.device)
        mid = 0.5 * (edges[:-1] + edges[1:])
        from_brightness = w.mean(dim=1) / mid
        db = torch.where(iso_sd / b.abs() <= torch.diff(edges) / (2 * mid.abs()), b, from_brightness)
        nominal = iso_sd * torch.sqrt(w.shape[1] * mid ** 2 + 1) / clipped_norm
    safe = torch.where(occupied & (db != 0), db, torch.ones_like(db))
    x = w / safe[:, None]
    if prior is not None and noise_sd > 0:
        x = prior.denoise(x, torch.maximum(iso_sd / safe.abs(), nominal))
    x = x.clamp(0.0, 1.0)
    x[~occupied] = 0.0
    return Reconstructions(images=x.to(torch.float32).view(-1, *image_shape), occupied=occupied,
                           strength=w.mean(dim=1).abs() * occupied)
