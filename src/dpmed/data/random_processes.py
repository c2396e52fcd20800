"""Images of random processes: a prior that needs no data and costs no privacy.

Why: Tang, Panda, Sehwag, Mittal 2023 ("Differentially private image classification by learning priors from random
processes") pretrain on synthetic images drawn from random processes before private training, and close much of the
gap to public-data pretraining with no data at all; Baradad, Wulff, Wang, Isola, Torralba 2021 ("Learning to see by
looking at noise") show that such images teach edge and texture features a network reuses on natural images. No
person is in them, so nothing about them needs protecting, and nothing downloads.

Two families, each drawn from the seed (`numpy.random.default_rng`), grey, in [0, 1]:

* **dead leaves** (Matheron 1968; Lee, Mumford, Huang 2001, "Occlusion models for natural images"): discs of
  uniform random grey level at uniform positions, radii with density proportional to r^-3 between r_min and r_max,
  each new disc falling *under* the ones already there. A fixed number of discs is drawn (``_DISCS``), not "until
  the image is covered": pixels no disc reaches keep one background grey, a share that grows with the image side
  (most of a 224 px image). Where covered, their statistics are scale invariant, like those of natural images (and
  radiographs: overlapping structures of all sizes);
* **1/f^alpha noise**: white noise shaped in the Fourier domain to an amplitude spectrum 1/f^alpha, then stretched
  to [0, 1] per image; alpha near 1 to 3 spans fine texture to smooth shading.

The pretraining task is supervised: which process (and which parameter range) drew the image, 6 classes (dead
leaves with small or with large discs; 1/f^alpha noise with alpha 1, 1.5, 2 or 2.5). Tang et al. learn their
features contrastively; a class of the process is a simpler pretext that the ordinary training loop can train,
stated here as the difference. Used as ``pretrain.data: {source: random_processes, n_images: N}``.

What it gave when measured is in benchmarks/RESULTS.md ("Priors that cost no privacy"): not a gain for a small CNN
fine-tuned whole. Tang et al.'s gains come from contrastive features kept frozen under a DP linear head
(``model.trainable: head``), which is a different use.
"""

from __future__ import annotations

import numpy as np

from dpmed.data.sample import Dataset, ImageSet, Task

__all__ = ["make_random_processes", "PROCESSES", "dead_leaves", "spectral_noise"]

# class name -> (family, parameter): dead leaves' r_max as a fraction of the image side, or the spectral alpha
PROCESSES: dict[str, tuple[str, float]] = {
    "dead_leaves_small": ("dead_leaves", 1 / 8),
    "dead_leaves_large": ("dead_leaves", 1 / 2),
    "noise_alpha_1": ("spectral", 1.0),
    "noise_alpha_1.5": ("spectral", 1.5),
    "noise_alpha_2": ("spectral", 2.0),
    "noise_alpha_2.5": ("spectral", 2.5),
}
_DISCS = 400          # discs drawn per dead-leaves image; uncovered pixels keep a background grey


def _radii(rng: np.random.Generator, n: int, r_min: float, r_max: float) -> np.ndarray:
    """n radii with density proportional to r^-3 on [r_min, r_max] (inverse of the CDF)."""
    u = rng.random(n)
    return (r_min ** -2 - u * (r_min ** -2 - r_max ** -2)) ** -0.5


def dead_leaves(rng: np.random.Generator, size: int, r_max_fraction: float) -> np.ndarray:
    """One dead-leaves image, float32 [size, size] in [0, 1]: the first disc drawn lies on top (painted last)."""
    r = _radii(rng, _DISCS, 1.0, max(2.0, r_max_fraction * size))                  # [K]
    centres = rng.random((_DISCS, 2)) * size                                         # [K, 2] (y, x)
    grey = rng.random(_DISCS).astype(np.float32)                                     # [K]
    image = np.full((size, size), rng.random(), dtype=np.float32)                    # background where uncovered
    axis = np.arange(size, dtype=np.float32) + 0.5
    for k in range(_DISCS - 1, -1, -1):                                              # last drawn first: underneath
        (cy, cx), rk = centres[k], r[k]
        y0, y1 = max(0, int(cy - rk)), min(size, int(cy + rk) + 1)
        x0, x1 = max(0, int(cx - rk)), min(size, int(cx + rk) + 1)
        if y0 >= y1 or x0 >= x1:
            continue
        disc = (axis[y0:y1, None] - cy) ** 2 + (axis[None, x0:x1] - cx) ** 2 <= rk ** 2
        image[y0:y1, x0:x1][disc] = grey[k]
    return image


def spectral_noise(rng: np.random.Generator, size: int, alpha: float) -> np.ndarray:
    """One 1/f^alpha noise image, float32 [size, size] stretched to [0, 1]."""
    fy = np.fft.fftfreq(size)[:, None]
    fx = np.fft.rfftfreq(size)[None, :]
    f = np.sqrt(fy ** 2 + fx ** 2)
    f[0, 0] = 1.0 / size                                                              # no infinite DC amplitude
    spectrum = np.fft.rfft2(rng.standard_normal((size, size))) / f ** alpha
    image = np.fft.irfft2(spectrum, s=(size, size))
    image = (image - image.min()) / max(float(np.ptp(image)), 1e-12)
    return image.astype(np.float32)


def make_random_processes(*, seed: int = 0, n_images: int = 6000, image_size: int = 64,
                          fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)) -> Dataset:
    """``n_images`` grey images, classes in turn (balanced), split by index in ``fractions``; synthetic, no patients
    (each image its own). Deterministic in ``seed``."""
    rng = np.random.default_rng(seed)
    names = tuple(PROCESSES)
    labels = np.arange(n_images) % len(names)
    rng.shuffle(labels)
    images = np.empty((n_images, 1, image_size, image_size), dtype=np.float32)        # [N, 1, S, S]
    for i, k in enumerate(labels.tolist()):
        family, value = PROCESSES[names[k]]
        images[i, 0] = (dead_leaves(rng, image_size, value) if family == "dead_leaves"
                        else spectral_noise(rng, image_size, value))
    cut = np.cumsum([0] + [int(round(f * n_images)) for f in fractions[:2]] + [n_images])
    cut[-1] = n_images

    def part(a: int, b: int) -> ImageSet:
        n = b - a
        return ImageSet(images[a:b], labels[a:b].astype(np.int64),
                        np.array([f"random-{i:06d}" for i in range(a, b)]), np.array(["unknown"] * n),
                        np.full(n, np.nan))

    return Dataset(
        name="random_processes", task=Task("multiclass", names),
        train=part(cut[0], cut[1]), val=part(cut[1], cut[2]), test=part(cut[2], cut[3]),
        description=("Synthetic images of random processes (dead leaves; 1/f^alpha noise), labelled by the process "
                     "that drew them: a prior with no data and no privacy cost (Tang et al. 2023)."),
        synthetic=True, source={"generator": "dpmed.data.random_processes.make_random_processes", "seed": seed,
                                "n_images": n_images, "image_size": image_size, "classes": list(names)},
        patients_known=False)
