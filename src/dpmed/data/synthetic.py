"""The embedded phantom chest X-ray dataset: a deterministic teaching and testing dataset, not medical evidence.

Why it exists: ``dpmed run`` with no argument must run a real study on a laptop
CPU with no download, and every stage downstream needs what real public data rarely offers together:
* a lesion **mask** per positive image, so Grad-CAM can be scored against ground truth (METHODS.md section 6);
* **sex and age**, with older patients harder to read and one sex smaller, so fairness effects exist to be measured.
  003_9a91354dc2d7e2df.txt finds diagnostic accuracy falls with age and attributes it to "lower image quality" and
  less "homogenous background" in older patients (its Figure 5); here older patients get fainter lesions and more
  acquisition noise, by documented amounts;
* **patient ids** with some patients imaged twice, so patient-level splitting matters.

The image (grey, C = 1, values in [0, 1]) is built in normalised coordinates x, y in [-1, 1] (y grows downward),
so every ``image_size`` shows the same anatomy:
* air outside an elliptical body (dark), soft tissue (bright), a brighter spine band and heart shadow;
* two lung fields: darker ellipses with soft edges, carrying rib-like texture (periodic bands that curve down
  laterally, like posterior ribs on a PA film) and smooth "vascular" clutter;
* positives (label 1) carry 1 to 3 opacities: large flat-topped blobs (a consolidation whitening part of a lobe,
  not a nodule) whose centres lie inside a lung field, multiplied by the lung field so they never spill outside it;
  their mask is where a blob exceeds half its peak, within the aerated lung (lung field weight > 0.25, outside the
  heart shadow; all-False for negatives);
* Gaussian acquisition noise over the whole image, then clipping to [0, 1].

Difficulty is set by :class:`PhantomDifficulty`. The defaults were tuned against a four-block GroupNorm CNN with
global average pooling trained with Adam, so that the task is learnable but not solved, and harder for older
patients than for younger ones (the tuning runs, and what the max-pooled ``small_cnn`` reaches now, are measured in
benchmarks/RESULTS.md, section "The phantom's difficulty"). Two facts shaped the tuning:
* small lesions (a few pixels) are not learned at all by such average-pooled GroupNorm or normalisation-free CNNs
  in this budget: the training loss stays at ln 2, because the phantom's images differ little from one another
  and GroupNorm normalises within an image. Only large opacities (sigma 8 to 14 px at 64 px) give such networks a
  usable signal;
* a BatchNorm CNN (not usable under DP-SGD) learns the same data almost perfectly in a few epochs (same section):
  the ceiling is set by the learner, not by the lesions. Lower ``lesion_contrast`` to make the task harder for
  strong learners.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from dpmed.data.sample import Dataset, ImageSet, Task
from dpmed.data.splits import split_stratified

__all__ = ["PhantomDifficulty", "make_phantom"]

_CHUNK = 256  # images generated at once: bounds memory at large image sizes
_MAX_LESIONS = 3
_AGE_MIN, _AGE_MAX = 18.0, 95.0
_MASK_LEVEL = 0.5  # mask = blob above half its peak (the full width at half maximum)
# Opacity profile exp(-0.5 * d^(2 * _FLATNESS)) with d the elliptical distance in units of sigma: 1 is a Gaussian,
# 2 a flat-topped blob with a soft rim, closer to a consolidation that whitens a patch of lung than to a nodule.
_FLATNESS = 2.0


@dataclass(frozen=True)
class PhantomDifficulty:
    """What makes the phantom hard. Intensities are in image units ([0, 1]); ``t = (age - 18) / 77`` in [0, 1].

    lesion_contrast: peak brightness an opacity adds for the youngest patient (before a +-25% per-lesion draw); the
        main difficulty knob: the tuning CNN's AUROC rises steeply with it (benchmarks/RESULTS.md, section "The
        phantom's difficulty").
    noise_sd: standard deviation of the Gaussian acquisition noise for the youngest patient.
    age_contrast_loss: an opacity's peak is scaled by ``1 - age_contrast_loss * t`` (0.6: a 95-year-old's lesions
        have 40% of the contrast of an 18-year-old's).
    age_noise_gain: the noise sd is scaled by ``1 + age_noise_gain * t`` (1.0: doubled at 95).
    clutter_sd: standard deviation of the smooth "vascular" texture in the lungs, which lesions must be told from.
    rib_contrast: peak brightness of a rib band.
    lesion_sigma: range (min, max) of a blob's radius scale in normalised units (the image spans 2; a lung field
        is 0.54 wide), drawn per axis; (0.25, 0.45) is 8 to 14 pixels at 64 px.
    """

    lesion_contrast: float = 0.18
    noise_sd: float = 0.05
    age_contrast_loss: float = 0.6
    age_noise_gain: float = 1.0
    clutter_sd: float = 0.035
    rib_contrast: float = 0.10
    lesion_sigma: tuple[float, float] = (0.25, 0.45)

    def __post_init__(self) -> None:
        if not 0.0 <= self.age_contrast_loss < 1.0:
            raise ValueError(f"age_contrast_loss must be in [0, 1), got {self.age_contrast_loss}")
        for name in ("lesion_contrast", "noise_sd", "age_noise_gain", "clutter_sd", "rib_contrast"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        lo, hi = self.lesion_sigma
        if not 0 < lo <= hi:
            raise ValueError(f"lesion_sigma must be (min, max) with 0 < min <= max, got {self.lesion_sigma}")


def make_phantom(
    *,
    n_images: int = 1200,
    image_size: int = 64,
    seed: int = 0,
    positive_fraction: float = 0.5,
    difficulty: PhantomDifficulty = PhantomDifficulty(),
    female_fraction: float = 0.35,
    repeat_fraction: float = 0.2,
    fractions: tuple[float, float, float] = (0.7, 0.15, 0.15),
    task: str = "binary",
) -> Dataset:
    """Generate the phantom chest X-ray dataset (see the module docstring), split by patient.

    Deterministic: everything is drawn from ``np.random.default_rng(seed)``, so one seed gives byte-identical arrays.

    n_images: total images; ``round(n_images / (1 + repeat_fraction))`` patients, of whom the rest of the images
        are second images (``repeat_fraction`` = 0.2: about 20% of patients have two images). A patient's two images
        share anatomy, sex and age; their labels are drawn independently (a follow-up may differ).
    positive_fraction: share of images with opacities (exact up to rounding).
    female_fraction: share of female patients (0.35: the smaller group, as females are in
        003_9a91354dc2d7e2df.txt).
    fractions: train/val/test shares for :func:`dpmed.data.splits.split_stratified` (by label: the phantom's
        patients are no one, so it needs no split that keeps neighbouring datasets neighbours).
    task: ``binary`` ("normal", "opacity") or ``multilabel``: one finding per lung field ("opacity, image-left
        lung", "opacity, image-right lung"), 1 where at least one opacity lies in that lung; the images are the same
        as for ``binary`` with the same seed. The multi-label form stands in for the chest X-ray tables of
        003_9a91354dc2d7e2df.txt (several findings per image, with sex and age).

    Returns a :class:`Dataset` with the chosen task, masks bool [N, H, W], ``synthetic=True``.
    """
    if n_images < 3:
        raise ValueError(f"n_images must be >= 3 (three non-empty splits), got {n_images}")
    if image_size < 8:
        raise ValueError(f"image_size must be >= 8 pixels, got {image_size}")
    for name, value in (("positive_fraction", positive_fraction), ("female_fraction", female_fraction)):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {value}")
    if task not in ("binary", "multilabel"):
        raise ValueError(f"task must be 'binary' or 'multilabel' for the phantom, got {task!r}")
    if not 0.0 <= repeat_fraction <= 1.0:
        raise ValueError(f"repeat_fraction must be in [0, 1] (at most two images per patient), got {repeat_fraction}")

    rng = np.random.default_rng(seed)
    n_patients = max(3, min(n_images, round(n_images / (1.0 + repeat_fraction))))
    # Patients first, then which of them get a second image: image i belongs to patient_of_image[i].
    second = rng.choice(n_patients, size=n_images - n_patients, replace=False)
    patient_of_image = np.sort(np.concatenate([np.arange(n_patients), second]))  # [N]

    patient_female = rng.random(n_patients) < female_fraction  # [P]
    patient_age = np.round(_AGE_MIN + (_AGE_MAX - _AGE_MIN) * rng.beta(2.2, 1.6, n_patients), 1)  # [P] mean ~62
    anatomy = _draw_anatomy(rng, patient_female)  # per patient
    n_pos = round(n_images * positive_fraction)
    labels = rng.permutation(np.r_[np.ones(n_pos, np.int64), np.zeros(n_images - n_pos, np.int64)])  # [N]

    age = patient_age[patient_of_image]  # [N]
    t = (age - _AGE_MIN) / (_AGE_MAX - _AGE_MIN)  # [N] in [0, 1]
    lesions = _draw_lesions(rng, labels, t, difficulty, {k: v[patient_of_image] for k, v in anatomy.items()})
    acquisition = {
        "rib_phase": rng.uniform(0, 2 * np.pi, n_images),
        "rib_period": rng.uniform(0.19, 0.25, n_images),
        "clutter": rng.standard_normal((n_images, 7, 7)),
        "noise_sd": difficulty.noise_sd * (1.0 + difficulty.age_noise_gain * t),
    }

    images = np.empty((n_images, 1, image_size, image_size), dtype=np.float32)  # [N, 1, S, S]
    masks = np.empty((n_images, image_size, image_size), dtype=bool)  # [N, S, S]
    for start in range(0, n_images, _CHUNK):
        sl = slice(start, min(start + _CHUNK, n_images))
        per_image = {k: v[patient_of_image[sl]] for k, v in anatomy.items()}
        per_image.update({k: v[sl] for k, v in acquisition.items()})
        per_image.update({k: v[sl] for k, v in lesions.items()})
        images[sl, 0], masks[sl] = _render(rng, per_image, image_size, difficulty)

    patient_ids = np.array([f"phantom-{p:05d}" for p in patient_of_image])
    sex = np.where(patient_female[patient_of_image], "female", "male")
    kind = Task(kind="binary", label_names=("normal", "opacity"))
    targets = labels
    if task == "multilabel":
        present, side = lesions["lesion_present"], lesions["lesion_side"]  # [N, 3] each
        targets = np.stack([(present & (side == s)).any(axis=1) for s in (0, 1)], axis=1).astype(np.float32)
        kind = Task(kind="multilabel", label_names=("opacity, image-left lung", "opacity, image-right lung"))
    full = ImageSet(images=images, labels=targets, patient_ids=patient_ids, sex=sex, age=age, masks=masks)
    train, val, test = split_stratified(patient_ids, labels, fractions=fractions, seed=seed)  # any opacity
    return Dataset(
        name="phantom",
        task=kind,
        train=full.subset(train),
        val=full.subset(val),
        test=full.subset(test),
        description=(
            "Synthetic phantom chest X-rays generated by dpmed (two lung fields, rib texture, noise; positives carry "
            "opacities with ground-truth masks; older patients get fainter lesions and more noise). A teaching and "
            "testing dataset: its results are not medical evidence."
        ),
        synthetic=True,
        source={
            "generator": "dpmed.data.synthetic.make_phantom",
            "seed": seed,
            "n_images": n_images,
            "image_size": image_size,
            "positive_fraction": positive_fraction,
            "female_fraction": female_fraction,
            "repeat_fraction": repeat_fraction,
            "fractions": tuple(fractions),
            "task": task,
            "difficulty": asdict(difficulty),
        },
    )


def _draw_anatomy(rng: np.random.Generator, female: np.ndarray) -> dict[str, np.ndarray]:
    """Per-patient anatomy and exposure: shared by a patient's images. Females get a slightly narrower chest."""
    n = len(female)
    scale = np.where(female, 0.94, 1.0) * rng.uniform(0.95, 1.05, n)  # [P]
    return {
        "scale": scale,
        "lung_y": rng.uniform(-0.12, -0.04, n),
        "lung_dx": rng.uniform(-0.03, 0.03, (n, 2)),  # per lung: left, right
        "body": rng.uniform(0.58, 0.62, n),  # soft-tissue brightness
        "lung_depth": rng.uniform(0.30, 0.34, n),  # how much darker aerated lung is
        "heart_x": rng.uniform(0.05, 0.14, n),
    }


def _lung_geometry(scale: np.ndarray, lung_y: np.ndarray, lung_dx: np.ndarray, side: np.ndarray):
    """Centre and radii of lung ``side`` (0: image left, 1: image right) for each image: arrays [N]."""
    sign = np.where(side == 0, -1.0, 1.0)
    cx = sign * 0.42 * scale + np.take_along_axis(lung_dx, side[:, None], axis=1)[:, 0]
    return cx, lung_y, 0.27 * scale, 0.58 * scale


def _draw_lesions(rng, labels, t, difficulty: PhantomDifficulty, anatomy) -> dict[str, np.ndarray]:
    """Up to three opacities per positive image, centres inside a lung field and outside the heart: arrays [N, 3]."""
    n = len(labels)
    count = np.where(labels == 1, 1 + (rng.random(n) > 0.6) + (rng.random(n) > 0.85), 0)  # [N] 1-3 for positives
    present = np.arange(_MAX_LESIONS)[None, :] < count[:, None]  # [N, 3]
    side = rng.integers(0, 2, (n, _MAX_LESIONS))
    # Uniform over the inner 75% of the lung ellipse (polar, sqrt for uniform area).
    radius = 0.75 * np.sqrt(rng.random((n, _MAX_LESIONS)))
    angle = rng.uniform(0, 2 * np.pi, (n, _MAX_LESIONS))
    cx = np.empty((n, _MAX_LESIONS))
    cy = np.empty((n, _MAX_LESIONS))
    for k in range(_MAX_LESIONS):
        lx, ly, rx, ry = _lung_geometry(anatomy["scale"], anatomy["lung_y"], anatomy["lung_dx"], side[:, k])
        cx[:, k] = lx + radius[:, k] * rx * np.cos(angle[:, k])
        cy[:, k] = ly + radius[:, k] * ry * np.sin(angle[:, k])
    # A centre behind the heart shadow is mirrored to the upper half of its lung, away from the heart.
    behind_heart = _heart_distance(cx, cy, anatomy["heart_x"][:, None], anatomy["scale"][:, None]) < 1.0
    lung_y = anatomy["lung_y"][:, None]
    cy = np.where(behind_heart, lung_y - np.abs(cy - lung_y), cy)
    lo, hi = difficulty.lesion_sigma
    peak = difficulty.lesion_contrast * (1.0 - difficulty.age_contrast_loss * t)[:, None]
    return {
        "lesion_x": cx,
        "lesion_y": cy,
        "lesion_sx": rng.uniform(lo, hi, (n, _MAX_LESIONS)),
        "lesion_sy": rng.uniform(lo, hi, (n, _MAX_LESIONS)),
        "lesion_peak": np.where(present, peak * rng.uniform(0.75, 1.25, (n, _MAX_LESIONS)), 0.0),
        "lesion_present": present,
        "lesion_side": side,
    }


def _heart_distance(x, y, heart_x, scale):
    """Elliptical distance to the heart shadow's centre (< 1 inside it)."""
    return np.sqrt(((x - heart_x) / (0.30 * scale)) ** 2 + ((y - 0.42) / (0.24 * scale)) ** 2)


def _render(rng: np.random.Generator, p: dict[str, np.ndarray], size: int, difficulty: PhantomDifficulty):
    """Draw one chunk of B images from per-image parameters ``p``: images float32 [B, S, S], masks bool [B, S, S]."""
    b = len(p["scale"])
    axis = ((np.arange(size, dtype=np.float32) + 0.5) / size * 2.0 - 1.0).astype(np.float32)  # [S]
    y = axis[None, :, None]  # [1, S, 1]
    x = axis[None, None, :]  # [1, 1, S]

    def col(name: str) -> np.ndarray:
        return p[name].astype(np.float32)[:, None, None]  # [B, 1, 1]

    scale = col("scale")
    body = (x / (0.86 * scale)) ** 2 + ((y - 0.08) / 1.05) ** 2 < 1.0  # [B, S, S]
    image = np.where(body, col("body"), np.float32(0.06))  # [B, S, S]
    image = image + 0.08 * np.exp(-((x / 0.07) ** 2)) * body  # spine
    heart = np.clip((1.0 - _heart_distance(x, y, col("heart_x"), scale)) / 0.15, 0.0, 1.0)  # [B, S, S] soft

    lung_soft = np.zeros((b, size, size), dtype=np.float32)  # [B, S, S], 1 deep inside a lung, 0 outside
    for side in (0, 1):
        cx, cy, rx, ry = _lung_geometry(p["scale"], p["lung_y"], p["lung_dx"], np.full(b, side))
        cx, cy, rx, ry = (v[:, None, None] for v in (cx, cy, rx, ry))  # [B, 1, 1] each
        r = np.sqrt(((x - cx) / rx) ** 2 + ((y - cy) / ry) ** 2)  # [B, S, S] elliptical radius, 1 on the edge
        lung_soft = np.maximum(lung_soft, np.clip((1.0 - r) / 0.12, 0.0, 1.0).astype(np.float32))
    lung_soft *= 1.0 - heart
    lung_field = lung_soft > 0.25  # [B, S, S] aerated lung: where masks may lie (not its soft rim)

    # Posterior ribs: bands of constant y - 0.35 x^2, sharpened by a power so bands are narrower than gaps.
    band = np.cos(2 * np.pi * (y - 0.35 * x**2) / col("rib_period") + col("rib_phase"))
    ribs = difficulty.rib_contrast * ((1.0 + band) / 2.0) ** 4  # [B, S, S]
    clutter = difficulty.clutter_sd * _upsample(p["clutter"].astype(np.float32), size)  # [B, S, S]
    image = image + lung_soft * (ribs + clutter - col("lung_depth")) + 0.05 * heart

    blobs = np.zeros((b, size, size), dtype=np.float32)
    masks = np.zeros((b, size, size), dtype=bool)
    pixel = np.float32(2.0 / size)
    for k in range(_MAX_LESIONS):
        dx = x - p["lesion_x"][:, k, None, None].astype(np.float32)
        dy = y - p["lesion_y"][:, k, None, None].astype(np.float32)
        d2 = (dx / p["lesion_sx"][:, k, None, None]) ** 2 + (dy / p["lesion_sy"][:, k, None, None]) ** 2
        profile = np.exp(-0.5 * d2**_FLATNESS).astype(np.float32)  # [B, S, S], 1 at the centre
        blobs += p["lesion_peak"][:, k, None, None].astype(np.float32) * profile
        # Half maximum, or at least the pixel nearest the centre, so that small images keep a non-empty mask.
        inside = (profile > _MASK_LEVEL) | (dx**2 + dy**2 <= 0.51 * pixel**2)
        masks |= inside & p["lesion_present"][:, k, None, None]
    image = image + blobs * lung_soft
    masks &= lung_field

    noise = rng.standard_normal((b, size, size), dtype=np.float32) * col("noise_sd")
    return np.clip(image + noise, 0.0, 1.0).astype(np.float32), masks


def _upsample(grid: np.ndarray, size: int) -> np.ndarray:
    """Bilinear upsampling of coarse fields [B, g, g] to [B, S, S] as two matrix products (separable)."""
    g = grid.shape[-1]
    pos = (np.arange(size) + 0.5) / size * (g - 1)  # [S] position on the coarse grid
    lo = np.clip(np.floor(pos).astype(int), 0, g - 2)
    w = (pos - lo).astype(np.float32)
    u = np.zeros((size, g), dtype=np.float32)  # [S, g]
    u[np.arange(size), lo] = 1.0 - w
    u[np.arange(size), lo + 1] = w
    return np.einsum("sg,bgh,th->bst", u, grid, u, optimize=True)
