"""Augmentation multiplicity (De, Berrada, Hayes, Smith, Balle 2022, "Unlocking high-accuracy differentially private
image classification through scale", s.3.1): each sampled image is trained on as K augmented copies (random
reflect-padded crops, optionally horizontal flips), and the gradients of the copies are *averaged before clipping*.

In dpmed's engine this is exact through the grouping the clipper already has (``groups``, user-level clipping):
the K copies of an image (or, with the patient as the unit, the K copies of each of the patient's images) form one
group, and each copy's loss is weighted 1/K, so the group's summed gradient is

    g_u = sum_{images j of unit u} (1/K) sum_k grad l(aug_k(x_j))       (the mean over copies, summed over images)

and it is g_u that is clipped to C. One unit still moves the noisy sum by at most C whatever K: the sampling, the
noise and the accounting are those of plain DP-SGD. The average lowers the variance of the signal, not the noise.

Where the augmentation randomness comes from, and why it may be public. DP-SGD's guarantee holds for any
per-record transformation that is fixed before the step and applied to each record on its own: the step is then
DP-SGD on the transformed records, and neighbouring datasets stay neighbours. So which crop and flip copy k of an
image gets at step t must not depend on which *other* units were sampled (a sequential generator would: adding one
unit to a batch shifts the draws of every image after it, so with the seed known the others' gradients change too
and the step's sensitivity is no longer C). Here it is a function of (public seed, step t, copy k, the image's own
pixels) only: a 64-bit hash of each image's bytes (computed once) is mixed with the seed, t and k by SplitMix64
(Steele, Lea, Flood 2014). It depends on the data through the image itself and nothing else, so it is such a fixed
per-record transformation, and it may derive from the run's public seed: knowing it tells an adversary which
augmentation each possible image would get, which the guarantee allows. Identical images get identical copies.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Iterator

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["Augmentation", "Copies", "image_keys"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's output function on uint64 arrays (wrapping arithmetic): a bijective, well-mixed hash."""
    with np.errstate(over="ignore"):
        z = (x + _GOLDEN).astype(np.uint64)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def image_keys(images: np.ndarray) -> np.ndarray:
    """A 64-bit key of each image's own bytes (BLAKE2b), uint64 [N]: what an image's augmentations derive from."""
    keys = np.empty(len(images), dtype=np.uint64)
    for i in range(len(images)):
        digest = hashlib.blake2b(np.ascontiguousarray(images[i]).tobytes(), digest_size=8).digest()
        keys[i] = int.from_bytes(digest, "little")
    return keys


class Augmentation:
    """K augmented copies per image: ``expand`` turns a batch into its copies, the copies' groups and the loss
    weight 1/K. ``padding``: reflect-padding of the random crops (0: none); ``flip``: random horizontal flips;
    ``seed``: the public seed the draws derive from (with the step, the copy and the image's key)."""

    def __init__(self, *, multiplicity: int, padding: int, flip: bool, seed: int) -> None:
        if multiplicity < 1 or padding < 0:
            raise ValueError(f"multiplicity must be >= 1 and padding >= 0, got {multiplicity}, {padding}")
        self.multiplicity = multiplicity
        self.padding = padding
        self.flip = flip
        self.seed = np.uint64(seed & 0xFFFFFFFFFFFFFFFF)

    @property
    def loss_weight(self) -> float:
        """The weight of each copy's loss, 1/K: a group's summed gradient is then the mean over its copies."""
        return 1.0 / self.multiplicity

    def draws(self, keys: np.ndarray, step: int) -> np.ndarray:
        """uint64 [K, n, 3]: independent 64-bit draws (crop row, crop column, flip) of each copy of each image at
        ``step``, a function of (seed, step, copy, key) only."""
        base = _mix(_mix(np.asarray(keys, dtype=np.uint64) ^ self.seed) ^ _mix(np.array([step], np.uint64)))  # [n]
        counters = np.arange(1, 3 * self.multiplicity + 1, dtype=np.uint64).reshape(self.multiplicity, 1, 3)
        with np.errstate(over="ignore"):
            return _mix(base[None, :, None] ^ (counters * _GOLDEN))

    def apply(self, x: Tensor, keys: np.ndarray, step: int, at: Tensor | None = None) -> Tensor:
        """[n, C, H, W] -> the K copies [K n, C, H, W], copy-major (copy k of image i at k n + i); ``at`` [m]: only
        the copies at those places, [m, C, H, W], padding only their images (`Copies`)."""
        n, _, h, w = x.shape
        k, p = self.multiplicity, self.padding
        if p > 0 and p >= min(h, w):
            raise ValueError(f"crop padding {p} px needs images larger than {p} px for reflect padding, got {h}x{w}")
        at = torch.arange(k * n) if at is None else at.cpu()
        used, image = torch.unique(at % n, return_inverse=True)        # the images of these copies, and each one's
        u = self.draws(keys[used.numpy()], step)[(at // n).numpy(), image.numpy()][None]     # [1, m, 3]
        rows = torch.arange(h).expand(1, len(at), h)                                # [1, m, H]
        cols = torch.arange(w).expand(1, len(at), w)                                # [1, m, W]
        if p > 0:
            rows = rows + torch.from_numpy((u[..., 0] % np.uint64(2 * p + 1)).astype(np.int64))[..., None]
            cols = cols + torch.from_numpy((u[..., 1] % np.uint64(2 * p + 1)).astype(np.int64))[..., None]
        if self.flip:
            flipped = torch.from_numpy((u[..., 2] >> np.uint64(63)).astype(bool))[..., None]    # the top bit
            cols = torch.where(flipped, cols.flip(-1), cols)
        x = x[used.to(x.device)]
        padded = F.pad(x, (p, p, p, p), mode="reflect") if p > 0 else x                      # [u, C, H+2p, W+2p]
        rows, cols, image = rows.to(x.device), cols.to(x.device), image.to(x.device)
        out = padded[image.view(1, -1, 1, 1), :, rows[..., :, None], cols[..., None, :]]     # [1, m, H, W, C]
        return out.permute(0, 1, 4, 2, 3).reshape(len(at), *x.shape[1:])

    def expand(self, x: Tensor, y: Tensor, keys: np.ndarray, step: int,
               groups: Tensor | None = None) -> tuple[Copies, Tensor, Tensor | None]:
        """(the K n copies, made as they are taken (`Copies`), their labels [K n, ...], their groups [K n] or None)
        for a batch x [n, ...] of images with ``keys`` [n]. ``groups``: each image's unit (patient) id, or None if
        every image is its own unit; the copies of a unit share its id (with the image as unit and K > 1, the image's
        position is its id).
        K = 1 keeps ``groups`` as given: one augmented image per image, nothing to average."""
        labels = y.repeat(self.multiplicity, *([1] * (y.dim() - 1)))
        if groups is None and self.multiplicity > 1:
            groups = torch.arange(len(x), device=x.device)
        if groups is not None:
            groups = groups.repeat(self.multiplicity)
        return Copies(self, x, keys, step), labels, groups


@dataclass(frozen=True, eq=False)
class Copies:
    """A batch's K n copies (`Augmentation.apply`), made only where a step's slice takes them, ``copies[at]`` or
    ``copies.split(size)``: a step then holds its batch and one slice's copies, where it held all K n copies at once
    whatever training.physical_batch_size, the most a step took beside the model. Each copy is the same, bit for bit:
    its crop and flip depend on (seed, step, copy, image) alone."""

    augmentation: Augmentation
    images: Tensor
    keys: np.ndarray
    step: int

    def __len__(self) -> int:
        return self.augmentation.multiplicity * len(self.images)

    @property
    def device(self) -> torch.device:
        return self.images.device

    def to(self, device: torch.device) -> Copies:
        return replace(self, images=self.images.to(device))

    def __getitem__(self, at: Tensor) -> Tensor:
        return self.augmentation.apply(self.images, self.keys, self.step, at)

    def split(self, size: int) -> Iterator[Tensor]:
        return (self[torch.arange(i, min(i + size, len(self)))] for i in range(0, len(self), size))
