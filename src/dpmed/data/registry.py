"""Where a study's dataset comes from: a registry of frozen source descriptions, and :func:`load_dataset`.

Why a registry (DESIGN.md, style example 3, after timm's model registry): the config validates a source name
against ``DATASET_SOURCES``, the tests parametrize over it, and adding a format is one entry, not another branch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from dpmed.data.formats.medmnist import read_medmnist
from dpmed.data.sample import Dataset, ImageSet
from dpmed.data.synthetic import make_phantom
from dpmed.data.transforms import resize, to_channels
from dpmed.errors import DataError

__all__ = ["DatasetSource", "DATASET_SOURCES", "load_dataset"]


@dataclass(frozen=True)
class DatasetSource:
    """How to obtain one kind of dataset.

    read(path, image_size, n_images, seed) returns the Dataset; image_size is passed only to sources that generate
    images (``generates=True``: the phantom is drawn at the requested size rather than resized).
    """

    name: str
    summary: str
    needs_path: bool
    takes_n_images: bool
    generates: bool
    read: Callable[[Path | None, int | None, int | None, int], Dataset]


def _read_phantom(path: Path | None, image_size: int | None, n_images: int | None, seed: int) -> Dataset:
    kwargs = {"seed": seed}
    if image_size is not None:
        kwargs["image_size"] = image_size
    if n_images is not None:
        kwargs["n_images"] = n_images
    return make_phantom(**kwargs)


def _read_medmnist(path: Path | None, image_size: int | None, n_images: int | None, seed: int) -> Dataset:
    assert path is not None  # load_dataset checks needs_path first
    return read_medmnist(path)


DATASET_SOURCES: dict[str, DatasetSource] = {
    source.name: source
    for source in (
        DatasetSource(
            name="phantom",
            summary="embedded synthetic chest X-rays with lesion masks, sex and age (teaching/testing, no download)",
            needs_path=False,
            takes_n_images=True,
            generates=True,
            read=_read_phantom,
        ),
        DatasetSource(
            name="medmnist",
            summary="a MedMNIST v2 2D .npz file with its official splits (no patient ids or demographics)",
            needs_path=True,
            takes_n_images=False,
            generates=False,
            read=_read_medmnist,
        ),
    )
}


def load_dataset(
    *,
    source: str,
    path: str | Path | None,
    image_size: int | None,
    channels: int | None,
    seed: int,
    n_images: int | None,
) -> Dataset:
    """Load a dataset and bring every split to ``image_size`` x ``image_size`` pixels and ``channels`` channels.

    None keeps the data's own size or channel count. Resizing and channel conversion are per image
    (:mod:`dpmed.data.transforms`), so they may precede a local DP mechanism (METHODS.md section 1); phantom masks
    are generated at the requested size, other masks are resized bilinearly and thresholded at 0.5.

    seed: the phantom's generation seed; MedMNIST files carry fixed official splits and use no randomness.
    n_images: the phantom's size; an error for sources with fixed content (nothing is silently ignored).
    Raises DataError for an unknown source, a missing or superfluous path, or n_images where it does not apply.
    """
    info = DATASET_SOURCES.get(source)
    if info is None:
        known = ", ".join(f"{name!r} ({s.summary})" for name, s in DATASET_SOURCES.items())
        raise DataError(f"unknown dataset source {source!r}; known sources: {known}")
    if info.needs_path and path is None:
        raise DataError(
            f"dataset source {source!r} needs a path to its file; set data.path in the study or pass --data-path"
        )
    if not info.needs_path and path is not None:
        raise DataError(f"dataset source {source!r} reads no file, but path={str(path)!r} was given; remove the path")
    if n_images is not None and not info.takes_n_images:
        raise DataError(
            f"dataset source {source!r} has fixed splits; n_images={n_images} applies only to generated sources "
            f"({', '.join(n for n, s in DATASET_SOURCES.items() if s.takes_n_images)}); remove it"
        )
    if image_size is not None and image_size < 1:
        raise DataError(f"image_size must be a positive number of pixels, got {image_size}")
    if channels is not None and channels not in (1, 3):
        raise DataError(f"channels must be 1 (grey) or 3 (RGB), got {channels}")

    dataset = info.read(None if path is None else Path(path), image_size if info.generates else None, n_images, seed)
    _, height, width = dataset.train.image_shape
    steps = []
    if image_size is not None and (height, width) != (image_size, image_size):
        steps.append(f"resize {height}x{width} -> {image_size}x{image_size} (bilinear, antialiased)")
    if channels is not None and dataset.train.image_shape[0] != channels:
        steps.append(f"channels {dataset.train.image_shape[0]} -> {channels}")
    if not steps:
        return dataset

    def convert(split: ImageSet) -> ImageSet:
        images = split.images  # [N, C, H, W]
        masks = split.masks  # [N, H, W] or None
        if image_size is not None:
            images = resize(images, image_size)
            if masks is not None:
                masks = resize(masks[:, None].astype(np.float32), image_size)[:, 0] >= 0.5
        if channels is not None:
            images = to_channels(images, channels)
        return ImageSet(images, split.labels, split.patient_ids, split.sex, split.age, masks)

    return replace(
        dataset,
        train=convert(dataset.train),
        val=convert(dataset.val),
        test=convert(dataset.test),
        source={**dataset.source, "transforms": tuple(steps)},
    )
