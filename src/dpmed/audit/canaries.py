"""Canaries for the one-run privacy audit (Steinke, Nasr and Jagielski, "Privacy Auditing with One (1) Training
Run", NeurIPS 2023): m extra training examples, each inserted with probability 1/2, whose membership the audit then
tries to guess from the trained model (`dpmed.audit.bound`).

A good canary is one the model can only fit by memorising it, so that its score differs between "trained on it"
and "not": we take real images from the training distribution and give them a *wrong* label ("mislabelled"). A model
that never saw the canary predicts the label the rest of the data suggests; one that memorised it moves towards the
wrong label. Optionally ("marked") each canary also carries a small random patch unique to it, which makes it easier
to memorise without changing what it looks like elsewhere.

The images must come from a pool that is not otherwise in the training set (a held-out slice, or a phantom drawn
with another seed): a canary whose clean twin is in the training set would be pulled back to the true label.
:func:`hold_out_canary_sources` makes such a pool from the training split itself: about m patients leave it, and
one image of each (or, where the image is the unit of privacy, each of their images) becomes a canary.

The audit's validity does not depend on what the canaries look like (any m records, each included with probability
1/2, will do); their kind only decides how much power it has.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from dpmed.data import ImageSet, Task, cap_images_per_patient, image_keys, patient_draws
from dpmed.names import CANARY_KINDS as CANARY_KIND_NAMES, check_registry

__all__ = ["CanaryKind", "CANARY_KINDS", "max_canaries", "hold_out_canary_sources", "make_canaries",
           "insert_canaries"]

_PATCH = 4   # side of the "marked" canaries' patch, in pixels


def _wrong_labels(labels: np.ndarray, task: Task, rng: np.random.Generator) -> np.ndarray:
    """A label that is certainly wrong: binary 1 - y; multiclass (y + U{1..K-1}) mod K; multilabel every finding
    flipped."""
    if task.kind == "multilabel":
        return (1.0 - labels).astype(labels.dtype)
    k = task.num_outputs
    if k < 2:
        raise ValueError(f"a {task.kind} task needs at least 2 classes to mislabel, got {k}")
    return ((labels + rng.integers(1, k, size=len(labels))) % k).astype(labels.dtype)


def _mislabelled(images: np.ndarray, labels: np.ndarray, task: Task, rng: np.random.Generator):
    return images.copy(), _wrong_labels(labels, task, rng)


def _marked(images: np.ndarray, labels: np.ndarray, task: Task, rng: np.random.Generator):
    """Mislabelled, plus a 4x4 patch of random black and white pixels at a random place, drawn per canary."""
    m, c, h, w = images.shape
    if h < _PATCH or w < _PATCH:
        raise ValueError(f"'marked' canaries need images of at least {_PATCH}x{_PATCH} pixels, got {h}x{w}")
    out = images.copy()                                                                  # [m, C, H, W]
    patches = (rng.random((m, 1, _PATCH, _PATCH)) < 0.5).astype(out.dtype)               # [m, 1, 4, 4]
    top, left = rng.integers(0, h - _PATCH + 1, m), rng.integers(0, w - _PATCH + 1, m)
    for i in range(m):
        out[i, :, top[i]:top[i] + _PATCH, left[i]:left[i] + _PATCH] = patches[i]
    return out, _wrong_labels(labels, task, rng)


def _noise(images: np.ndarray, labels: np.ndarray, task: Task, rng: np.random.Generator):
    """Uniform noise images with uniformly random labels (out of distribution)."""
    out = rng.random(images.shape, dtype=np.float32)
    if task.kind == "multilabel":
        return out, (rng.random(labels.shape) < 0.5).astype(labels.dtype)
    return out, rng.integers(0, task.num_outputs, size=len(labels)).astype(labels.dtype)


@dataclass(frozen=True)
class CanaryKind:
    """name: ``kind`` of :func:`make_canaries`. make(images [m, C, H, W], labels, task, rng) -> (images, labels)."""

    name: str
    make: Callable[[np.ndarray, np.ndarray, Task, np.random.Generator], tuple[np.ndarray, np.ndarray]]
    description: str


CANARY_KINDS: dict[str, CanaryKind] = {
    kind.name: kind
    for kind in (
        CanaryKind("mislabelled", _mislabelled, "training-distribution images with a wrong label"),
        CanaryKind("noise", _noise, "uniform-noise images with random labels"),
        CanaryKind("marked", _marked, "mislabelled images with a 4x4 random black/white patch unique to each"),
    )
}


check_registry("canary kinds", CANARY_KINDS, CANARY_KIND_NAMES)


def max_canaries(train: ImageSet) -> int:
    """The most canaries :func:`hold_out_canary_sources` can take from ``train``: one per patient, leaving one
    patient to train on. A study checks its audits against this before any run starts."""
    return train.n_patients - 1


def hold_out_canary_sources(train: ImageSet, m: int, *, seed: int, n_patients: int,
                            unit: str = "patient") -> tuple[ImageSet, ImageSet]:
    """Split ``train`` into (the rest, the canary sources): all images of each patient whose draw u(patient) of
    ``seed`` (`dpmed.data.patient_draws`) is below m / ``n_patients`` leave the rest, so no canary has a clean twin
    left to train on. ``unit`` "patient": each drawn patient gives one image (its image of smallest hash, as
    `dpmed.data.cap_images_per_patient` keeps one); "image" (the image is the unit of privacy): every image of a drawn
    patient is a source. ``n_patients``: a public count of the training units (for DP-SGD the DP count it plans
    from: of patients, or of images where the image is the unit), so that about m canaries are made; how many were
    is a statistic of the training set (private).

    Why every image where the image is the unit: with one image kept per patient, removing that image made the
    patient's other image the canary, so the neighbour without one image trained on a second image changed (a
    canary in place of a held-out image), and the run's image-level eps did not hold for it. Every image being its
    own canary, removing one removes its canary alone.

    Why a draw per patient rather than m patients drawn from all of them: whether a patient is a source then reads
    that patient alone, so adding or removing one patient changes the rest or the sources by that patient only,
    and a DP-SGD run's eps still holds for every other patient. Drawing exactly m from all patients, as before,
    let one patient's presence change which others were held out.

    The rest keeps its images in their original order. Either part may be empty, and neither is refused: whether a
    run finishes is seen by whoever holds the study's files, and the draws are public functions of the patients' ids,
    so failing when no training patient was drawn (or every one) would tell whoever knows a patient's id whether that
    patient trained. A draw that found none leaves the run unaudited; one that found all trains on the included
    canaries alone (`dpmed.audit.procedure`; the study bounds m by the public count beforehand).
    """
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 1 or n_patients < 1:
        raise ValueError(f"the audit needs m >= 1 canaries and a count of patients >= 1, got {m!r} and "
                         f"{n_patients!r}")
    if unit not in ("patient", "image"):
        raise ValueError(f"unit must be 'patient' or 'image', got {unit!r}")
    ids = train.patient_ids.astype(str)
    drawn = patient_draws(ids, seed) < m / n_patients                                    # bool [N], per patient
    held = np.flatnonzero(drawn)
    sources = held if unit == "image" else held[cap_images_per_patient(ids[held], train.images[held], 1, seed=seed)]
    return train.subset(np.flatnonzero(~drawn)), train.subset(sources)


def make_canaries(images: ImageSet, m: int, *, task: Task, seed: int, kind: str = "mislabelled") -> ImageSet:
    """m canaries drawn without replacement from ``images`` (a pool kept out of the training set), in a random
    order, with a wrong label (see the module docstring and :data:`CANARY_KINDS`).

    Patient ids become ``canary-00000`` ... so a canary never shares a patient with a real image; sex, age and
    masks are the source image's (the pixels of a mislabelled canary are unchanged, so its lesion mask still
    describes them). Randomness: ``seed`` only: which images, and their order, from ``np.random.default_rng(seed)``;
    each canary's own draws from ``seed`` and its source (`dpmed.data.image_keys`).
    """
    if kind not in CANARY_KINDS:
        raise ValueError(f"unknown canary kind {kind!r}; known: {', '.join(sorted(CANARY_KINDS))}")
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or not 1 <= m <= len(images):
        raise ValueError(f"m must be an integer in [1, {len(images)}] (the pool's size), got {m!r}")
    source = images.subset(np.random.default_rng(seed).choice(len(images), size=int(m), replace=False))
    make = CANARY_KINDS[kind].make
    # each canary's own draws (wrong label, patch, noise) from its source alone, so that a canary is the same whichever
    # others are made beside it (one generator drawn in turn gave each canary draws that depended on the others)
    keys = image_keys(source.patient_ids, source.images, seed=seed)
    made = [make(source.images[i:i + 1], source.labels[i:i + 1], task, np.random.default_rng(int(keys[i])))
            for i in range(m)]
    return ImageSet(images=np.concatenate([x for x, _ in made]), labels=np.concatenate([y for _, y in made]),
                    patient_ids=np.array([f"canary-{i:05d}" for i in range(m)]), sex=source.sex, age=source.age,
                    masks=source.masks)


def insert_canaries(train: ImageSet, canaries: ImageSet, included: np.ndarray) -> ImageSet:
    """The training set with the canaries where ``included`` (bool [m]) is True appended after it, so the original
    images keep their indices, each canary a patient of its own. Both sets must have the same image shape and label
    layout, and masks on both or neither (a merged set with masks on only some images would be silently
    incomplete)."""
    included = np.asarray(included)
    if included.dtype != np.bool_ or included.shape != (len(canaries),):
        raise ValueError(f"included must be bool [{len(canaries)}], got {included.dtype} {included.shape}")
    if train.image_shape != canaries.image_shape:
        raise ValueError(f"canary images are {canaries.image_shape}, training images {train.image_shape}")
    if train.labels.shape[1:] != canaries.labels.shape[1:] or train.labels.dtype != canaries.labels.dtype:
        raise ValueError(f"canary labels {canaries.labels.dtype}{list(canaries.labels.shape)} do not match training "
                         f"labels {train.labels.dtype}{list(train.labels.shape)}")
    if (train.masks is None) != (canaries.masks is None):
        raise ValueError("masks on the training set but not the canaries, or the reverse; give both or neither")
    chosen = canaries.subset(np.flatnonzero(included))
    # DP-SGD clips by patient id where the patient is the unit: a canary named as a training patient happens to be
    # would join that patient's unit, and including it would change that unit instead of adding one. Longer names
    # until none clash (only the grouping reads them; nothing written holds them).
    ids, taken = chosen.patient_ids.astype(str), set(train.patient_ids.astype(str).tolist())
    while taken.intersection(ids.tolist()):
        ids = np.char.add("canary-", ids)
    return ImageSet(
        images=np.concatenate([train.images, chosen.images]),
        labels=np.concatenate([train.labels, chosen.labels]),
        patient_ids=np.concatenate([train.patient_ids.astype(str), ids]),
        sex=np.concatenate([train.sex, chosen.sex]),
        age=np.concatenate([train.age, chosen.age]),
        masks=None if train.masks is None else np.concatenate([train.masks, chosen.masks]),
    )
