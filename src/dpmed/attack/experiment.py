"""The imprint attack on one DP-SGD arm, over many batches: the empirical side of METHODS.md s.7.

The reconstruction-robustness bounds (``dpmed.accounting.reconstruction``) reach their no-noise limit (the chance
the target was sampled at all: 100 % after a few epochs) long before eps = 1e6; the claim of
004_6210268d59b6f8e5.txt (Ziller et al. 2024) that high budgets still stop *realistic* reconstruction rests on actual
attacks failing. :func:`run_imprint_attack` mounts one: for each of ``n_batches`` batches drawn from the attacked
images (in a study, held-out test images: :data:`ATTACKED`), the adversary's imprinted model (``dpmed.attack.imprint``)
goes through one step of the arm (dpmed's ``DpSgdStep``: clipping at C, the arm's noise of scale sigma C from fresh
secure randomness, or in a reproducible study from its seed, division by the expected batch size), the imprint rows
are inverted into one candidate per bin (with what the adversary knows under noise: each bin's brightness and a
prior from the public images), the strongest ``batch_size`` are kept (the expected number of images in a
batch, q times the training images whatever the unit: the adversary knows that, not the realised batch), and each is
scored against the batch (``dpmed.attack.success``).

The result keeps the summary numbers (shareable) apart from the images (private: they are patient images and their
reconstructions): :meth:`AttackResult.to_dict` holds no pixel, :attr:`AttackResult.images` holds them all.
"""

from __future__ import annotations

import math
from copy import deepcopy
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from dpmed.attack.imprint import (IMPRINT_STRUCTURES, ImagePrior, ImprintBins, brightness, imprint_model,
                                  invert_imprint, release_imprint_gradients)
from dpmed.attack.success import (SuccessThreshold, calibrate_threshold, clopper_pearson, match_reconstructions)
from dpmed.data import Dataset
from dpmed.errors import ConfigError
from dpmed.mechanisms import DpSgdPlan
from dpmed.randomness import PrivacyRandomness, public_seed
from dpmed.training.objectives import OBJECTIVES

__all__ = ["AttackImages", "AttackResult", "run_imprint_attack", "attack_arm", "attack_batch_size", "ATTACKED",
           "blind_prototypes"]

# What a study's attack puts through the arm's step in place of a training batch, and why (run.json says it).
ATTACKED = ("held-out test images through the arm's own step and trained model (the same mechanism and image "
            "distribution as a training batch; a rate measured on the training images would itself be a statistic "
            "of them, outside the accountant), each image once and unaugmented (the arm's augmentation multiplicity "
            "is the adversary's choice, and leaves the step's accounting unchanged); bins and threshold from the "
            "validation images")


@dataclass(frozen=True)
class AttackImages:
    """PRIVATE: the best reconstructions over all batches, [m, C, H, W] float32, the attacked images they matched,
    [m, C, H, W], and their SSIM [m], best first. For a figure in a private folder; never in a shareable file."""

    reconstructions: np.ndarray
    originals: np.ndarray
    ssim: np.ndarray


@dataclass(frozen=True)
class AttackResult:
    """The attack's outcome on one arm. Rates are per attacked image (see ``dpmed.attack.success``): ``n_success``
    of ``n_trials`` images (n_batches x batch_size) were reconstructed, with a Clopper-Pearson ``ci`` at
    ``ci_level``. ``batch_*``: the same per batch (any image reconstructed), whose trials are independent.
    ``chance_*``: the per-image rate of the better, over all batches, of two blind attacks that answer with as many
    public images as the attack kept and know nothing of the batch: public images drawn at random (the criterion's
    own false positives, about 1 - ``threshold.quantile`` per guess), and the median public image of each of as many
    equal-mass brightness groups (:func:`blind_prototypes`). SSIM favours smooth typical images, so such medians pass
    far more often than any one public image; the chance rate is the prior the criterion gives an adversary without
    the gradient (Hayes et al. 2023's kappa for it), and the better of the two keeps it from being understated.
    ``mean_best_ssim`` / ``mean_best_ncc``: over every kept reconstruction, its SSIM to the closest batch image and the
    NCC of that pair."""

    structure: str
    n_bins: int
    max_grad_norm: float
    noise_multiplier: float
    expected_batch_size: float
    batch_size: int
    n_batches: int
    grouped: bool
    threshold: SuccessThreshold
    n_trials: int
    n_success: int
    rate: float
    ci: tuple[float, float]
    ci_level: float
    batch_successes: int
    batch_rate: float
    batch_ci: tuple[float, float]
    chance_successes: int
    chance_rate: float
    chance_ci: tuple[float, float]
    n_reconstructions: int
    mean_best_ssim: float
    mean_best_ncc: float
    images: AttackImages = field(repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """The summary, JSON-ready, without any image (safe to share: counts and scores only)."""
        out: dict[str, Any] = {}
        for name in self.__dataclass_fields__:
            if name == "images":
                continue
            value = getattr(self, name)
            if isinstance(value, SuccessThreshold):
                value = {k: getattr(value, k) for k in value.__dataclass_fields__}
            elif isinstance(value, tuple):
                value = list(value)
            out[name] = value
        return out


def _group_ids(groups: np.ndarray | None, n: int) -> np.ndarray | None:
    if groups is None:
        return None
    groups = np.asarray(groups)
    if groups.shape != (n,):
        raise ValueError(f"groups must hold one patient id per image, shape ({n},); got {groups.shape}")
    return np.unique(groups, return_inverse=True)[1].astype(np.int64)


def blind_prototypes(public_images: np.ndarray, n: int) -> np.ndarray:
    """``n`` guesses an adversary can make from public images alone [n, C, H, W]: the pixelwise median of each of
    ``n`` equal-mass groups of the public images by mean brightness (the measurement the imprint bins use). Such a
    median is a smooth, typical image of its brightness, which SSIM rewards against an image of similar brightness
    more than it rewards any single public image."""
    images = np.asarray(public_images, dtype=np.float32)
    order = np.argsort(brightness(images), kind="stable")
    groups = [g for g in np.array_split(order, min(n, len(images))) if len(g)]
    medians = np.stack([np.median(images[g], axis=0) for g in groups])
    return medians[np.arange(n) % len(medians)]


def run_imprint_attack(*, model_factory: Callable[[], nn.Module], images: np.ndarray, labels: np.ndarray,
                       public_images: np.ndarray, max_grad_norm: float, noise_multiplier: float,
                       expected_batch_size: float, batch_size: int, n_batches: int, seed: int,
                       n_bins: int | None = None, structure: str = "cumulative", task_kind: str = "binary",
                       groups: np.ndarray | None = None, threshold: SuccessThreshold | None = None,
                       n_null: int = 200, threshold_quantile: float = 0.99, n_figure: int = 8,
                       ci_level: float = 0.95, device: str | torch.device = "cpu",
                       noise: str = "gaussian", randomness: PrivacyRandomness | None = None) -> AttackResult:
    """Attack one arm (C = ``max_grad_norm``, sigma = ``noise_multiplier``, ``expected_batch_size`` q N) on
    ``n_batches`` batches of ``batch_size`` images drawn without replacement from ``images`` [N, C, H, W] in [0, 1]
    (``labels`` [N, ...] for the task ``task_kind``, a key of ``dpmed.training.OBJECTIVES``).

    model_factory() -> the arm's model with its weights (the adversary's copy: it is frozen and wrapped).
    public_images [M, C, H, W]: the adversary's public data, disjoint from ``images``: it calibrates the bins
        (``n_bins`` equal-mass bins, default 4 x batch_size, so an image is alone in its bin with probability about
        e^(-1/4)), the chance guesses and, unless ``threshold`` is given, the success threshold.
    groups: patient id per image [N] (any ids): each patient's summed gradient is clipped (METHODS.md s.2b).
        Batches are drawn image by image, not patient by patient, so most patients of a batch bring one image,
        which then has the whole patient's clipping budget: an attack at least as strong as on the arm's step.
    noise: the arm's noise, "gaussian" (L2 clipping) or "laplace" (L1 clipping, noise_multiplier = b / C).
    seed: public randomness only (which batches, the imprint pattern, the null draws, the chance guesses); the
        step's noise comes from ``randomness``'s noise stream, by default fresh OS entropy
        (``PrivacyRandomness.secure()``), as a DP run's does; a reproducible study passes one derived from its seed.
    """
    images = np.asarray(images, dtype=np.float32)
    public_images = np.asarray(public_images, dtype=np.float32)
    if images.ndim != 4 or images.min() < 0 or images.max() > 1:
        raise ValueError("images must be [N, C, H, W] with values in [0, 1]")
    if not 1 <= batch_size <= len(images):
        raise ValueError(f"batch_size must be in [1, {len(images)}], got {batch_size}")
    if n_batches < 1:
        raise ValueError(f"n_batches must be >= 1, got {n_batches}")
    if structure not in IMPRINT_STRUCTURES:
        raise ValueError(f"unknown imprint structure {structure!r}; known: {sorted(IMPRINT_STRUCTURES)}")
    objective = OBJECTIVES[task_kind]
    image_shape = tuple(images.shape[1:])
    group_ids = _group_ids(groups, len(images))
    n_bins = 4 * batch_size if n_bins is None else n_bins
    bins = ImprintBins.from_public(public_images, n_bins=n_bins, structure=structure)
    prior = ImagePrior.from_public(public_images)
    # each coordinate's noise in the released mean gradient: Gaussian of sd sigma C, or Laplace of scale sigma C
    noise_sd = (0.0 if noise_multiplier == 0 else (math.sqrt(2.0) if noise == "laplace" else 1.0)
                * noise_multiplier * max_grad_norm / expected_batch_size)
    if threshold is None:
        threshold = calibrate_threshold(public_images, batch_size=batch_size, n_null=n_null,
                                        quantile=threshold_quantile,
                                        rng=np.random.default_rng(public_seed(seed, "attack_threshold")))
    pattern = torch.Generator().manual_seed(public_seed(seed, "attack_pattern"))
    model = imprint_model(model_factory(), bins, image_shape=image_shape, pattern_generator=pattern).to(device)
    noise_rng = (PrivacyRandomness.secure() if randomness is None else randomness).stream("noise")
    batches = np.random.default_rng(public_seed(seed, "attack_batches"))
    chance = np.random.default_rng(public_seed(seed, "attack_chance"))
    # as many guesses as the batch holds images (the threshold was calibrated for that many); under the patient unit
    # the expected batch size counts patients, fewer than the images: keeping that few capped the attack's rate
    keep = batch_size
    prototypes = blind_prototypes(public_images, keep)

    n_success = batch_successes = random_found = prototype_found = 0
    best_ssim, best_ncc = [], []
    gallery: list[tuple[Any, np.ndarray, np.ndarray]] = []     # (SSIM, reconstruction, original), best first
    for _ in range(n_batches):
        pick = batches.choice(len(images), size=batch_size, replace=False)
        x = torch.from_numpy(images[pick]).to(device)
        y = torch.as_tensor(np.asarray(labels)[pick], dtype=objective.target_dtype, device=device)
        g = None if group_ids is None else torch.from_numpy(group_ids[pick])
        released = release_imprint_gradients(
            model, x, y, loss_fn=lambda z, t: objective.loss(z, t, reduction="sum"), max_grad_norm=max_grad_norm,
            noise_multiplier=noise_multiplier, expected_batch_size=expected_batch_size, noise_rng=noise_rng,
            groups=g, noise=noise)
        recs = invert_imprint(released, structure=structure, image_shape=image_shape, bins=bins, prior=prior,
                              noise_sd=noise_sd, clipped_norm=max_grad_norm / expected_batch_size)
        strongest = recs.strongest(keep)
        kept = recs.images[strongest].cpu().numpy()                                 # [n <= keep, C, H, W]
        originals = images[pick]
        matches = match_reconstructions(kept, originals)
        # a success is a match to an image the bin held: a look-alike of another batch image (the prior's pull under
        # noise, say) reconstructed nothing of it
        found = _found(matches, threshold, own=_held(bins, originals, matches, strongest.cpu().numpy()))
        n_success += found
        batch_successes += found > 0
        best_ssim.extend(matches.ssim.tolist())
        best_ncc.extend(matches.ncc.tolist())
        gallery.extend((s, r, originals[c]) for s, r, c in zip(matches.ssim, kept, matches.closest))
        gallery = sorted(gallery, key=lambda t: -t[0])[:n_figure]
        # chance: the better of two blind attacks, plausible guesses that carry nothing of the batch (uniform noise
        # never passes, so it measured nothing: a criterion that a public image can meet has a prior of its own)
        guesses = public_images[chance.choice(len(public_images), size=len(kept),
                                              replace=len(kept) > len(public_images))]
        random_found += _found(match_reconstructions(guesses, originals), threshold)
        spread = np.unique(np.linspace(0, keep - 1, len(kept)).round().astype(int))    # all brightnesses, not the
        prototype_found += _found(match_reconstructions(prototypes[spread], originals), threshold)   # darkest

    n_trials = n_batches * batch_size
    # the better of the two blind attacks over all batches, not batch by batch: choosing per batch would pick the
    # luckier one after seeing each batch, which no blind attacker can, and inflate chance
    chance_successes = max(random_found, prototype_found)
    empty = np.zeros((0, *image_shape), dtype=np.float32)
    return AttackResult(
        structure=structure, n_bins=n_bins, max_grad_norm=float(max_grad_norm),
        noise_multiplier=float(noise_multiplier), expected_batch_size=float(expected_batch_size),
        batch_size=batch_size, n_batches=n_batches, grouped=group_ids is not None, threshold=threshold,
        n_trials=n_trials, n_success=n_success, rate=n_success / n_trials,
        ci=clopper_pearson(n_success, n_trials, level=ci_level), ci_level=ci_level,
        batch_successes=batch_successes, batch_rate=batch_successes / n_batches,
        batch_ci=clopper_pearson(batch_successes, n_batches, level=ci_level),
        chance_successes=chance_successes, chance_rate=chance_successes / n_trials,
        chance_ci=clopper_pearson(chance_successes, n_trials, level=ci_level),
        n_reconstructions=len(best_ssim),
        mean_best_ssim=float(np.mean(best_ssim)) if best_ssim else float("nan"),
        mean_best_ncc=float(np.mean(best_ncc)) if best_ncc else float("nan"),
        images=AttackImages(
            reconstructions=np.stack([r for _, r, _ in gallery]) if gallery else empty,
            originals=np.stack([o for _, _, o in gallery]) if gallery else empty,
            ssim=np.array([s for s, _, _ in gallery])),
    )


def _held(bins: ImprintBins, originals: np.ndarray, matches, kept_bins: np.ndarray) -> np.ndarray:
    """Whether each reconstruction's match [n] is an image that its bin ``kept_bins`` [n] held."""
    return bins.bin_of(originals)[matches.closest] == kept_bins


def _found(matches, threshold: SuccessThreshold, own: np.ndarray | None = None) -> int:
    """How many batch images some guess matched at or above the threshold (each counted once); with ``own`` [n],
    only the matches it marks (a reconstruction's own bin held the image)."""
    passed = matches.ssim >= threshold.value
    return len(set(matches.closest[passed if own is None else passed & own].tolist()))


def attack_batch_size(dataset: Dataset, plan: DpSgdPlan, *, arm: str | None = None) -> int:
    """The attacked batch size (images) of ``plan`` on ``dataset``; ConfigError where the validation split cannot
    calibrate the success threshold (it needs more than that many images). dpmed.run calls it before training, so a
    study with too small a validation split fails at once rather than after the run has trained. The batch is the
    plan's expected batch of units, in images per test patient where the patient is the unit: nothing here is
    counted on the training set, whose size is private. ``arm``: the arm's name, which the error names (a study may
    attack several arms, of different batch sizes)."""
    units = plan.expected_batch_size if plan.expected_batch_size is not None else plan.sample_rate * plan.n_units
    per_unit = (len(dataset.test) / max(1, len(np.unique(dataset.test.patient_ids))) if plan.unit == "patient"
                else 1.0)
    batch_size = max(1, min(len(dataset.test), round(units * per_unit)))
    if len(dataset.val) < max(batch_size + 1, 2):
        key = "the arm's attack" if arm is None else f"arms.{arm}.attack"
        raise ConfigError(f"{key}: the imprint attack needs more validation images than its batch of {batch_size} "
                          f"(they calibrate its bins and success threshold), got {len(dataset.val)}; remove {key}, "
                          "lower its batch_size (or training.batch_size), or enlarge the validation split")
    return batch_size


def attack_arm(model: nn.Module, dataset: Dataset, plan: DpSgdPlan, *, seed: int,
               device: str | torch.device = "cpu", ci_level: float = 0.95,
               randomness: PrivacyRandomness | None = None, arm: str | None = None) -> AttackResult:
    """The attack a study runs on one trained DP-SGD arm (its ``plan.attack`` settings): batches of held-out test
    images (:data:`ATTACKED`) put through the arm's step (C, sigma, expected batch size, the unit of privacy) on a
    copy of the trained ``model``, bins and threshold calibrated on the validation images. The study's fixed
    normalisation, if any, sits in front of the model, so the imprint acts on [0, 1] pixels as the data arrive.
    ``ci_level``: the study's evaluation.confidence, which sets every interval of its report. ``randomness``: where
    the step's noise comes from (default: fresh OS entropy; a reproducible study's is derived from its seed).
    ``arm``: the arm's name, for errors."""
    config = plan.attack
    if config is None:
        raise ValueError("the plan has no attack settings")
    test, val = dataset.test, dataset.val
    batch_size = attack_batch_size(dataset, plan, arm=arm)

    def factory() -> nn.Module:
        copy = deepcopy(model).cpu()
        if dataset.normalization is None:
            return copy
        from torchvision.transforms import Normalize   # here: torchvision's import costs seconds (models/registry.py)

        mean, std = dataset.normalization
        return nn.Sequential(Normalize(mean, std), copy)

    groups = test.patient_ids if plan.unit == "patient" else None
    # 4 bins per image as the paper; a small validation split calibrates fewer (an image is then less often alone)
    n_bins = max(2, min(4 * batch_size, len(val)))
    return run_imprint_attack(
        model_factory=factory, images=test.images, labels=test.labels, public_images=val.images,
        max_grad_norm=plan.max_grad_norm, noise_multiplier=plan.noise_multiplier,
        expected_batch_size=plan.expected_batch_size or batch_size, batch_size=batch_size,
        n_batches=config.batches, seed=public_seed(seed, "attack"), structure=config.structure, n_bins=n_bins,
        task_kind=dataset.task.kind, groups=groups, threshold_quantile=config.threshold_quantile, device=device,
        noise=plan.noise, ci_level=ci_level, randomness=randomness)
