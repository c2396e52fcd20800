"""Patient-level train/validation/test splits.

Why by patient: two images of one patient in different splits let a model score on the test set by recognising the
patient, not the finding, and (for privacy) make "the test set is unseen" false. 003_9a91354dc2d7e2df.txt splits
UKA-CXR "using patient-wise stratification"; this module splits every dataset that has no official split by patient
too (MedMNIST ships its own splits and needs none), but not stratified.

Why not stratified: DP-SGD's eps is over the training split, and holds for the dataset only where the split maps
neighbouring datasets (one patient more or fewer) to neighbouring training splits. A stratified split shuffles each
class and lays it out by share, so one patient more moved others between the splits: the two training sets differed
in several patients, and the test split a study publishes (its class counts, its metrics, its predictions) read the
new patient's label. Here each patient's split is a keyed hash of the seed and the patient's own id (as
`dpmed.data.cohorts` draws a cohort), so adding or removing a patient changes no other patient's split. The cost:
shares and class balance hold in expectation only, with binomial spread (a test share of 0.15 over 1,000 patients
is 15 % +- 1.1 %, one standard deviation), a rare class may miss a split, and with few patients a whole split may
be left empty (then refused, not filled).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from dpmed.data.cohorts import patient_draws

__all__ = ["split_by_patient", "split_stratified", "images_per_patient", "cap_images_per_patient", "image_keys"]


def split_by_patient(
    patient_ids: Sequence[str] | np.ndarray,
    *,
    fractions: tuple[float, ...] = (0.7, 0.15, 0.15),
    seed: int = 0,
) -> tuple[np.ndarray, ...]:
    """Split images into train, validation and test index arrays; a patient never crosses splits.

    ``fractions`` usually holds three shares (train, val, test); two shares split one set in two, e.g. carve a
    validation split out of a published training split (``(0.9, 0.1)``). One index array is returned per share.

    Each patient draws u = sha256("split:<seed>:<patient id>") in [0, 1) (`dpmed.data.cohorts.patient_draws`) and
    goes to split j where u lies in [F_j-1, F_j), F the cumulative fractions: a patient's split reads that patient's
    id alone (see the module docstring for why). The fractions hold in expectation, in patients.

    Returns one sorted int64 index array into ``patient_ids`` per fraction; together they are a partition of
    ``range(len(patient_ids))``.

    A split that no patient draws (a few patients only: at a share of 0.15 over 100 patients, a chance of 1e-7) is
    returned empty, for the caller to refuse. It is not filled by moving a patient into it, as
    :func:`split_stratified` fills one: whichever patient a rule took would read the others' draws, and one more
    training patient (whose id sorts first, say) would displace another from a published split. An empty split
    reads no training patient, whose own draw is training whatever the others draw.

    Raises ValueError when the fractions are not two or three positive numbers summing to 1, or when there are
    fewer patients than splits.
    """
    k = len(fractions)
    patients, patient_of_image = _patients(patient_ids, fractions, "split_by_patient")  # [P], [N]
    bounds = np.cumsum(fractions)[:-1]  # split j holds draws in [bounds[j-1], bounds[j])
    split_of_patient = np.searchsorted(bounds, patient_draws(patients, seed, purpose="split"), side="right")  # [P]
    split_of_image = split_of_patient[patient_of_image]  # [N]
    return tuple(np.flatnonzero(split_of_image == j).astype(np.int64) for j in range(k))


def split_stratified(
    patient_ids: Sequence[str] | np.ndarray,
    labels: np.ndarray,
    *,
    fractions: tuple[float, ...] = (0.7, 0.15, 0.15),
    seed: int = 0,
) -> tuple[np.ndarray, ...]:
    """Split images into train, validation and test index arrays, stratified by label; a patient never crosses
    splits. For generated data only (the phantom, whose patients are no one): one patient more moves others between
    the splits, so a real dataset is split by :func:`split_by_patient` (the module docstring says why).

    ``fractions`` as for :func:`split_by_patient`. Patients are grouped into strata by one label each (binary: any
    positive image makes the patient positive; multiclass: the patient's most frequent class, ties to the highest;
    multilabel: the rarest finding the patient has, or "no finding", a cheap version of iterative stratification,
    Sechidis et al. 2011), shuffled within each stratum with ``np.random.default_rng(seed)``, and laid on a line in
    proportion to their image counts; a random offset per stratum (systematic sampling) makes the expected share of
    every split equal to its fraction in every stratum. The fractions are met in images, up to the granularity of
    patients.

    Returns one sorted int64 index array into ``patient_ids`` per fraction; together they are a partition of
    ``range(len(patient_ids))``, and every split is non-empty.

    Raises ValueError when the inputs disagree in length, when the fractions are not two or three positive numbers
    summing to 1, or when there are fewer patients than splits (non-empty patient-level splits are then impossible).
    """
    y = np.asarray(labels)  # [N] or [N, L]
    if len(y) != len(patient_ids):
        raise ValueError(f"split_stratified: {len(y)} labels for {len(patient_ids)} patient ids; pass one label per "
                         "image")
    k = len(fractions)
    patients, patient_of_image = _patients(patient_ids, fractions, "split_stratified")  # [P], [N]
    n_patients = len(patients)

    stratum = _patient_strata(patient_of_image, y, n_patients)  # [P]
    images_per_patient = np.bincount(patient_of_image, minlength=n_patients)  # [P]
    bounds = np.cumsum(fractions)[:-1]  # split j holds positions in [bounds[j-1], bounds[j])

    rng = np.random.default_rng(seed)
    split_of_patient = np.empty(n_patients, dtype=np.int64)  # [P] in {0, .., k - 1}
    for s in np.unique(stratum):
        members = rng.permutation(np.flatnonzero(stratum == s))
        sizes = images_per_patient[members]
        # Position of each patient's centre on [0, 1), rotated by a random offset so that no split is favoured
        # when a stratum is small.
        centre = (np.cumsum(sizes) - sizes / 2.0) / sizes.sum()
        position = (centre + rng.random()) % 1.0
        split_of_patient[members] = np.searchsorted(bounds, position, side="right")

    _fill_empty_splits(split_of_patient, images_per_patient, k)
    split_of_image = split_of_patient[patient_of_image]  # [N]
    return tuple(np.flatnonzero(split_of_image == j).astype(np.int64) for j in range(k))


def _patients(patient_ids: Sequence[str] | np.ndarray, fractions: tuple[float, ...],
              caller: str) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct patients [P], each image's patient index [N]); ValueError naming ``caller`` unless the fractions
    are two or three positive shares summing to 1 and there are at least as many patients as splits."""
    k = len(fractions)
    if k not in (2, 3) or any(not f > 0 for f in fractions) or abs(sum(fractions) - 1.0) > 1e-6:
        raise ValueError(f"{caller}: fractions must be three (train, val, test) or two positive numbers summing to 1, "
                         f"got {tuple(fractions)}")
    patients, patient_of_image = np.unique(np.asarray(patient_ids).astype(str), return_inverse=True)
    if len(patients) < k:
        raise ValueError(f"{caller}: {len(patients)} distinct patient(s) among {len(patient_of_image)} images; {k} "
                         f"non-empty patient-level splits need at least {k} patients")
    return patients, patient_of_image


def _patient_strata(patient_of_image: np.ndarray, y: np.ndarray, n_patients: int) -> np.ndarray:
    """One stratum label per patient, as :func:`split_stratified` defines it."""
    if y.ndim == 2 and y.shape[1] > 1:  # multilabel [N, L]
        has = np.zeros((n_patients, y.shape[1]), dtype=bool)  # [P, L]
        np.logical_or.at(has, patient_of_image, y > 0.5)
        frequency = has.sum(axis=0)  # [L] patients with each finding
        rarity = np.where(has, frequency[None, :], np.iinfo(np.int64).max)  # [P, L]
        return np.where(has.any(axis=1), rarity.argmin(axis=1), y.shape[1])
    cls = y.reshape(len(y)).astype(np.int64)  # [N]
    if cls.min() < 0:
        raise ValueError(f"split_stratified: class labels must be >= 0, found {cls.min()}")
    counts = np.zeros((n_patients, cls.max() + 1), dtype=np.int64)  # [P, K]
    np.add.at(counts, (patient_of_image, cls), 1)
    if counts.shape[1] <= 2:
        return (counts[:, 1:].sum(axis=1) > 0).astype(np.int64)  # any positive image
    return counts.shape[1] - 1 - counts[:, ::-1].argmax(axis=1)  # majority class, ties to the highest


def _fill_empty_splits(split_of_patient: np.ndarray, images_per_patient: np.ndarray, n_splits: int) -> None:
    """Move one patient into each empty split, taken from the split with the most patients (deterministic): for
    :func:`split_stratified` only, whose patients are no one."""
    for k in range(n_splits):
        if np.any(split_of_patient == k):
            continue
        per_split = np.bincount(split_of_patient, minlength=n_splits)
        donor = int(per_split.argmax())
        candidates = np.flatnonzero(split_of_patient == donor)
        # The donor's patient with the fewest images keeps the fractions closest.
        split_of_patient[candidates[images_per_patient[candidates].argmin()]] = k


def images_per_patient(patient_ids: Sequence[str] | np.ndarray) -> np.ndarray:
    """int64 [P]: how many images each patient has (patients in sorted id order)."""
    return np.unique(np.asarray(patient_ids).astype(str), return_counts=True)[1].astype(np.int64)


def image_keys(patient_ids: Sequence[str] | np.ndarray, images: np.ndarray, *, seed: int) -> np.ndarray:
    """uint64 [N]: a keyed hash of (``seed``, patient id, pixels) of each image [N, ...]: a public draw for each image
    that depends on that image and its patient alone, never on the other images (see
    :func:`cap_images_per_patient`)."""
    ids = np.asarray(patient_ids).astype(str)
    pixels = np.ascontiguousarray(images)
    if len(pixels) != len(ids):
        raise ValueError(f"{len(ids)} patient ids for {len(pixels)} images")
    return np.array([int.from_bytes(hashlib.blake2b(f"{seed}:{pid}\0".encode() + pixels[i].tobytes(),
                                                    digest_size=8).digest(), "big")
                     for i, pid in enumerate(ids.tolist())], dtype=np.uint64)


def cap_images_per_patient(patient_ids: Sequence[str] | np.ndarray, images: np.ndarray, k: int, *,
                           seed: int) -> np.ndarray:
    """Sorted indices of at most ``k`` images of each patient: the ``k`` whose keyed hash of (``seed``, patient id,
    pixels) is smallest (``images`` [N, ...]). ``seed`` is public: which images a patient contributes is a
    data-preparation choice, not privacy randomness. Bounds a patient's contribution where the image is the unit of
    privacy, and a patient's work per step where the patient is.

    Why a hash of each image, not a shuffle of all of them: a patient's choice then reads only that patient's own
    images, so adding or removing one patient leaves every other patient's kept images as they were (the cap maps
    neighbours to neighbours and DP-SGD's eps carries over to the uncapped set); adding or removing one image changes
    its patient's kept images by at most one in and one out. A shuffle of all N images by the seed let one patient's
    presence reorder every other patient's choice, so neighbouring sets trained on sets far apart."""
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    ids = np.asarray(patient_ids).astype(str)
    keys = image_keys(ids, images, seed=seed)
    order = np.lexsort((np.arange(len(ids)), keys, ids))        # by patient, then key; equal pixels by position
    patient_sorted = ids[order]
    starts = np.r_[0, np.flatnonzero(patient_sorted[1:] != patient_sorted[:-1]) + 1]
    rank = np.arange(len(ids)) - np.repeat(starts, np.diff(np.r_[starts, len(ids)]))
    return np.sort(order[rank < k]).astype(np.int64)
