"""A cohort: a seeded share of a dataset's patients, kept across all three splits.

Why: public pretraining needs a public dataset that shares no patient with the private one (METHODS.md s.9). Where
only one dataset is at hand, the way to simulate a second site is to divide the patients of one release in two: a
"public hospital" that publishes its images and a "private hospital" that trains under DP on its own. Both cohorts
of one ``seed`` and ``fraction`` are complementary and disjoint by construction, whatever the splits hold:

    u(patient) = the first 8 bytes of sha256("<seed>:<patient id>") / 2^64       uniform in [0, 1)
    part 0 = the patients with u < fraction; part 1 = the rest

A patient's images stay together (every split is filtered by the same patient set), so a patient never appears in both
cohorts, and the published train / val / test assignment of each image is kept. Where a file layout publishes no
validation or test split, each cohort's is carved from its own patients (`dpmed.data.registry` selects the cohort from
the reader's manifest before assembly carves): carved from the whole release and then filtered, one hospital's split,
and so a "public" cohort's training set and pretrained weights, would depend on which patients the other hospital has.
The draw depends on the patient id alone, not on the order of the rows or on the other patients, so one cohort is the
same whichever splits or preprocessing a study asks for. It is public randomness (METHODS.md s.2b): which patients form
a simulated site is a design choice of the study, not a private draw.

Where a dataset publishes no patient ids (MedMNIST, a CSV without a patient column) each image is its own patient,
and a cohort is then a share of images: two images of one person may land in both cohorts.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace

import numpy as np

from dpmed.data.sample import Dataset, ImageSet
from dpmed.errors import DataError

__all__ = ["PatientSelection", "select_patients", "patient_draws", "in_cohort"]


@dataclass(frozen=True)
class PatientSelection:
    """Which cohort (``part`` 0: the ``fraction`` of patients; part 1: the other 1 - fraction) of the seeded draw."""

    fraction: float
    part: int
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.fraction < 1:
            raise ValueError(f"fraction must be in (0, 1), got {self.fraction}")
        if self.part not in (0, 1):
            raise ValueError(f"part must be 0 (the fraction) or 1 (the rest), got {self.part}")

    def describe(self) -> str:
        share = self.fraction if self.part == 0 else 1 - self.fraction
        return (f"cohort {self.part} of a seeded patient draw (seed {self.seed}): {share:.0%} of the patients, "
                f"{'u < ' if self.part == 0 else 'u >= '}{self.fraction:g}")


def patient_draws(patient_ids: np.ndarray, seed: int, *, purpose: str = "") -> np.ndarray:
    """u(patient) in [0, 1) for each entry of ``patient_ids`` [N] (see the module docstring): float64 [N].
    ``purpose`` (e.g. "split", `dpmed.data.splits`) prefixes the hashed text, ``"<purpose>:<seed>:<patient id>"``,
    so that draws made for different ends are independent: a split drawn with the cohort's own u would put cohort 0
    (u < fraction) in training whole. A cohort's draw has no prefix, as before the prefix existed."""
    unique, inverse = np.unique(np.asarray(patient_ids).astype(str), return_inverse=True)
    prefix = f"{purpose}:" if purpose else ""
    draws = np.array([int.from_bytes(hashlib.sha256(f"{prefix}{seed}:{pid}".encode()).digest()[:8], "big") / 2.0 ** 64
                      for pid in unique.tolist()], dtype=np.float64)
    return draws[inverse]


def in_cohort(patient_ids: np.ndarray, selection: PatientSelection) -> np.ndarray:
    """bool [N]: which entries of ``patient_ids`` belong to the cohort of ``selection``."""
    below = patient_draws(patient_ids, selection.seed) < selection.fraction
    return below if selection.part == 0 else ~below


def _keep(images: ImageSet, selection: PatientSelection) -> ImageSet:
    return images.subset(np.flatnonzero(in_cohort(images.patient_ids, selection)))


def select_patients(dataset: Dataset, selection: PatientSelection, *, rows_before: int | None = None) -> Dataset:
    """``dataset`` with only the patients of ``selection`` in each split; the record (``source["cohort"]``) says
    which cohort and how many images each split kept, of how many. DataError if a split ends up empty.

    ``rows_before``: where a file layout's rows were cut to the cohort before its split was carved (a carved split
    holds other patients once cut), ``dataset`` is that cut and this the number of rows it was cut from; each split
    then has no "of" of its own."""
    kept = {name: _keep(getattr(dataset, name), selection) for name in ("train", "val", "test")}
    empty = [name for name, images in kept.items() if len(images) == 0]
    if empty:
        raise DataError(f"data.patients ({selection.describe()}) leaves the {' and '.join(empty)} split(s) of "
                        f"{dataset.name} without images; choose a larger share or another seed")
    counts: dict = ({name: {"kept": len(kept[name]), "of": len(getattr(dataset, name))} for name in kept}
                    if rows_before is None else
                    {**{name: {"kept": len(kept[name])} for name in kept}, "rows_cut_from": rows_before})
    source = {**dataset.source, "cohort": {"fraction": selection.fraction, "part": selection.part,
                                           "seed": selection.seed, "description": selection.describe(),
                                           "images": counts, "patients_known": dataset.patients_known}}
    return replace(dataset, train=kept["train"], val=kept["val"], test=kept["test"], source=source)
