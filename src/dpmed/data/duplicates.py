"""Identical images filed under two patient ids inside the private dataset, told after the splits are formed.

Why tell: a patient-level split and a guarantee per patient both take the patient id for the person. Two copies of
one image under two ids break both: in two splits (one in train, one in test) the model is tested on an image it
trained on, which inflates the test metric; in any split, one person counted as two patients is covered as two
units (group privacy, k = 2), not one. Public releases hold such pairs (the Kermany folders file one image as
NORMAL2-IM-0095 and NORMAL2-IM-0096: `dpmed.data.overlap`'s docstring), so this warns and never refuses.

Where no patient ids are published (a MedMNIST file: `dpmed.data.formats.medmnist`), each image is its own unit,
so two copies of an image are one image counted as two, and a copy in two splits is a leak from training into
evaluation; the same check tells them, by image, and its advice drops a copy rather than giving a patient id.

Images are compared by the sha256 of their pixels as the study holds them (`dpmed.data.overlap.content_hashes`):
byte-identical files, whatever their names. What is found is a statistic of the private images: it goes to the
terminal and the private log only, never into ``Dataset.source`` (which study.yaml and run.json carry).
"""

from __future__ import annotations

from typing import Callable, Mapping

from dpmed.data.overlap import content_hashes
from dpmed.data.sample import ImageSet

__all__ = ["describe_copies"]

# by how many splits a kind of copy names: where the copy lies, why it matters, what to do; {k}: the most ids (units)
# that share one image in a split, the size of the group the guarantee then covers them as
_TOLD = {1: ("the same split", "one person under {k} ids counts as {k} patients: in training, the guarantee per "
                               "patient then covers them only as a group (group privacy, k = {k}); in evaluation, the "
                               "image counts {k} times", "If they are one person, give both one patient id (in the "
                               "table, or the file names that give it); otherwise drop the copy"),
         2: ("another split", "an image the model trained on (or chose its threshold on) is evaluated again, which "
                              "inflates the metrics, and one person counts as two patients",
             "If they are one person, give both one patient id (in the table, or the file names that give it), "
             "which keeps the patient in one split; otherwise drop the copy")}
# the same without patient ids: each image is its own unit
_TOLD_BY_IMAGE = {
    1: ("the same split", "each image is its own unit, so one image counts as {k}: in training, the guarantee per "
                          "image then covers it only as a group (group privacy, k = {k}); in evaluation, it counts "
                          "{k} times",
        "Drop one copy (its image and its label) and save the file again"),
    2: ("another split", "an image the model trained on (or chose its threshold on) is evaluated again, which "
                         "inflates the metrics", "Drop the copy in the earlier split (its image and its label: train "
                                                 "before val before test, so the test split stays as published) and "
                                                 "save the file again")}


def describe_copies(sets: Mapping[str, ImageSet], *,
                    name: Callable[[str, int], str] = lambda split, i: f"{split}[{i}]",
                    patients_known: bool = True) -> list[str]:
    """Up to two lines for the user: images identical to an earlier one (``sets`` in their order) of another patient
    id in the same split, and in another split, each with the count per split (or pair of splits), the first example
    and what to do; none where there is nothing to tell. ``name(split, index)``: how the user finds an image.
    ``patients_known`` False: the ids are no people's (each image its own), so the lines speak of images."""
    splits = list(sets)
    where = [(split, i) for split in splits for i in range(len(sets[split]))]
    patients = [pid for split in splits for pid in sets[split].patient_ids.tolist()]
    # per image content and split: the first positions of up to two patients, enough to find an earlier image of a
    # patient other than any later one's (a blank image repeated thousands of times costs no more)
    seen: dict[tuple[str, str], list[int]] = {}
    found: dict[tuple[str, ...], list] = {}     # (split,) or (earlier split, split) -> [count, (earlier, image)]
    units: dict[tuple[str, str], set[str]] = {}  # per image content and split: its ids, the group a copy makes
    # by how many splits a kind names: the images with a copy of that kind, each once (an image in train, val and
    # test makes three pairs but two copies)
    copies: dict[int, set[int]] = {}
    for k, digest in enumerate(content_hashes([sets[split].images for split in splits])):
        split = where[k][0]
        for earlier in splits:
            other = next((j for j in seen.get((digest, earlier), ()) if patients[j] != patients[k]), None)
            if other is not None:
                kind = (split,) if earlier == split else (earlier, split)
                found.setdefault(kind, [0, (other, k)])[0] += 1
                copies.setdefault(len(kind), set()).add(k)
        units.setdefault((digest, split), set()).add(patients[k])
        kept = seen.setdefault((digest, split), [])
        if len(kept) < 2 and all(patients[j] != patients[k] for j in kept):
            kept.append(k)

    def example(pair: tuple[int, int]) -> str:
        return (", and " if patients_known else " and ").join(
            name(*where[j]) + (f", patient {patients[j]}" if patients_known else "") for j in pair)

    lines = []
    another = "an image of another patient id" if patients_known else "another image"
    for n_splits, (place, why, advice) in (_TOLD if patients_known else _TOLD_BY_IMAGE).items():
        kinds = {kind: v for kind, v in found.items() if len(kind) == n_splits}
        if not kinds:
            continue
        count = len(copies[n_splits])
        counts = ", ".join(f"{n} {'in' if n_splits == 1 else 'between'} {' and '.join(kind)}"
                           for kind, (n, _) in kinds.items())
        lines.append(f"data: {count} image{'s are' if count > 1 else ' is'} identical to {another} in {place} "
                     f"({counts}), e.g. {example(next(iter(kinds.values()))[1])}: "
                     f"{why.format(k=max(map(len, units.values())))}. {advice}")
    return lines
