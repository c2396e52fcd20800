"""From a reader's :class:`~dpmed.data.manifest.Manifest` to a :class:`~dpmed.data.sample.Dataset`: check, decode,
split -- the same for every file layout.

The order matters for the user's time: table problems (a missing file, a duplicate id or file, a label outside the
task) are found before any pixel is decoded, so a broken dataset stops in seconds, with one message that lists the
first few offending rows and their count. Decoding then finds the files that exist but cannot be read (truncated,
corrupt). ``skip_invalid`` leaves flagged rows out instead (not a repeated id or file: see ``_REPEATS``); how many
and why is told to the user and kept in the private log, never in a shareable file (a count of the private rows).

Splits (METHODS.md, and 003_9a91354dc2d7e2df.txt's "patient-wise stratification"):

* a split the publisher defined is kept (Kermany's train/test folders, NIH's test_list.txt, CheXpert's valid.csv,
  MIMIC-CXR's split file); the splits it lacks are carved out of its training rows (and rows without a split) by
  :func:`~dpmed.data.splits.split_by_patient`: seeded, whole patients only, each patient's split drawn from its own
  id, so that neighbouring datasets keep neighbouring training splits (not stratified: that module says why).
  ``val_fraction`` and ``test_fraction`` are shares of those pooled rows. ``official: false`` ignores the published
  splits and divides every row this way;
* a patient never crosses splits. Some publishers' splits do put one patient on two sides (the Kermany release has
  170, where a bacteria and a virus series of one person number are taken for one child, as dpmed does by default:
  `dpmed.data.formats.folders` says why). ``shared_patients: drop_from_train`` (the default) keeps the
  published test split exactly as published, so results stay comparable with the literature, and leaves that
  patient's other images out of train and val (test outranks val, val outranks train); the record counts them.
  ``keep`` reproduces papers that trained on the published split as is; the record then says that patients cross.

Once the splits are formed, identical images under two patient ids are told, not refused (`dpmed.data.duplicates`).
"""

from __future__ import annotations

import logging
import os
import stat
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from dpmed.data.cache import decode_images
from dpmed.data.duplicates import describe_copies
from dpmed.data.manifest import (Manifest, describe_demographics, describe_problems, describe_spellings,
                                 refuse_placeholder_patients)
from dpmed.data.sample import Dataset, ImageSet
from dpmed.data.splits import split_by_patient
from dpmed.data.transforms import Preprocessing
from dpmed.errors import DataError

__all__ = ["SplitPlan", "assemble_dataset", "in_group_order"]

_log = logging.getLogger(__name__)

_RANK = {"test": 2, "val": 1, "train": 0, "": 0}  # which side keeps a patient that published splits share
_EXAMPLES = 5


@dataclass(frozen=True)
class SplitPlan:
    """How to split (see the module docstring). Fractions are shares of the pooled rows being divided."""

    val_fraction: float = 0.15
    test_fraction: float = 0.15
    seed: int = 0
    official: bool = True
    shared_patients: Literal["drop_from_train", "keep"] = "drop_from_train"

    def __post_init__(self) -> None:
        if not (0 < self.val_fraction < 1 and 0 < self.test_fraction < 1
                and self.val_fraction + self.test_fraction < 1):
            raise ValueError(f"val_fraction {self.val_fraction} and test_fraction {self.test_fraction} must be in "
                             "(0, 1) with a sum below 1")
        if self.shared_patients not in ("drop_from_train", "keep"):
            raise ValueError(f"shared_patients must be 'drop_from_train' or 'keep', got {self.shared_patients!r}")


def _relative(manifest: Manifest, path: Path) -> str:
    try:
        return str(path.relative_to(manifest.root))
    except ValueError:
        return str(path)


def _flag_table_problems(manifest: Manifest) -> None:
    """Duplicate ids (every repeat after the first), image files that do not exist, and one file listed twice.

    A file is compared by what it is, not how a row spells it: ``images/020.png``, ``./images/020.png`` and a link to
    it are one image, and listed under two patients it could sit in train and in test at once.
    """
    first: dict[str, int] = {}
    for row, key in enumerate(manifest.ids.tolist()):
        if key in first:
            manifest.flag(row, "duplicate id",
                          f"id {key!r} repeats {manifest.where[first[key]]}; each image may be listed once")
        else:
            first[key] = row
    row_of_file: dict[object, int] = {}
    for row in manifest.valid_rows():
        path = manifest.paths[row]
        try:
            found = path.stat()
        except OSError:
            found = None
        if found is None or not stat.S_ISREG(found.st_mode):
            what = "is a folder, not an image file" if found and stat.S_ISDIR(found.st_mode) else "does not exist"
            manifest.flag(row, "missing image", f"image file {_relative(manifest, path)} {what} (looked for {path})")
            continue
        # st_ino is 0 where a file system has no file ids: compare the resolved path there
        file = (found.st_dev, found.st_ino) if found.st_ino else os.path.realpath(path)
        if file in row_of_file:
            manifest.flag(row, "duplicate image", f"image file {_relative(manifest, path)} is the same file as "
                                                  f"{manifest.where[row_of_file[file]]}; each image may be listed once")
        else:
            row_of_file[file] = row


# What _flag_table_problems calls a row that repeats an earlier one: refused even with skip_invalid. Leaving the
# repeat out keeps whichever copy comes first, so one more training row, read first with a validation or test
# image's id or file, would take that image out of the split the study publishes (and train on it).
_REPEATS = frozenset({"duplicate id", "duplicate image"})


def _stop_unless_skipping(manifest: Manifest, skip_invalid: bool) -> None:
    """DataError listing the flagged rows, unless ``skip_invalid`` leaves them out; a repeat stops the study either
    way, and its message then never advises data.skip_invalid (which would only stop it again)."""
    kinds = {problem.kind for problem in manifest.problems.values()}
    if kinds & _REPEATS:
        others = ("\nFix or remove the other rows too (data.skip_invalid: true leaves those out once no image is "
                  "listed twice)." if kinds - _REPEATS and not skip_invalid else "")
        raise DataError(describe_problems(manifest, skip_hint=False) + others + "\nA repeated id or image file stops "
                        "the study even with data.skip_invalid: which copy to leave out would decide the split its "
                        "image is in. Keep one row (or file) of each image.")
    if manifest.problems and not skip_invalid:
        raise DataError(describe_problems(manifest))


def _resolve_shared_patients(manifest: Manifest, rows: np.ndarray, published: np.ndarray,
                             plan: SplitPlan) -> tuple[np.ndarray, dict[str, int]]:
    """Rows to keep, and counts of the patients that published splits share (see the module docstring)."""
    patients = manifest.patient_ids[rows]
    rank = np.array([_RANK[s] for s in published])
    top: dict[str, int] = {}
    sides: dict[str, set[int]] = {}
    for pid, r in zip(patients, rank):
        top[pid] = max(top.get(pid, -1), r)
        sides.setdefault(pid, set()).add(r)
    shared = {pid for pid, s in sides.items() if len(s) > 1}
    below = np.array([top[pid] > r for pid, r in zip(patients, rank)], dtype=bool)
    counts = {"patients_in_two_published_splits": len(shared), "rows_of_those_patients_outside_their_top_split":
              int(below.sum())}
    if plan.shared_patients == "keep" or not shared:
        return np.ones(len(rows), dtype=bool), counts
    return ~below, counts


# Below this many images a published validation split is told: the decision threshold, and with it accuracy,
# sensitivity and specificity, is chosen on it.
_SMALL_VALIDATION = 50


def _tell_small_published_validation(manifest: Manifest, val: ImageSet, published: bool) -> None:
    """Warn where the layout publishes a validation split of fewer than _SMALL_VALIDATION images (Kaggle's copy of
    the Kermany release: a val/ folder of 16): it replaces the one dpmed would carve, and the threshold rests on it.
    Its size is no training statistic (study.yaml states it). A ``split.val_fraction`` the study gives is told unread
    once, by `dpmed.study.prepare_study` (`DataConfig.settings_the_data_turn_off`), not here too."""
    if not published or len(val) >= _SMALL_VALIDATION:
        return
    _log.warning("%s publishes a validation split of only %d images, and it is used as published: the decision "
                 "threshold (and so accuracy, sensitivity and specificity) is chosen on them. To carve validation "
                 "from the training patients instead, move the published validation images into train (for the "
                 "Kermany folders: chest_xray/val into chest_xray/train), or set data.split.official: false to "
                 "divide every image by the fractions",
                 manifest.name, len(val))


def assemble_dataset(manifest: Manifest, *, preprocessing: Preprocessing, split: SplitPlan,
                     skip_invalid: bool = False, cache_dir: Path | None = None) -> Dataset:
    """Check, decode and split ``manifest`` into a Dataset (see the module docstring for every rule).

    Raises DataError listing the first few offending rows and their count when rows are flagged and
    ``skip_invalid`` is false, when a split ends up empty, or when too few patients remain to split.
    """
    _flag_table_problems(manifest)
    _stop_unless_skipping(manifest, skip_invalid)
    rows = manifest.valid_rows()
    if len(rows) == 0:
        raise DataError(describe_problems(manifest, skip_hint=False) + "\nNo usable row is left.")
    refuse_placeholder_patients(manifest, rows)
    decoded = decode_images([manifest.paths[r] for r in rows], preprocessing, cache_dir=cache_dir)
    for position, reason in decoded.failures.items():
        row = rows[position]
        manifest.flag(row, "unreadable image", f"image {_relative(manifest, manifest.paths[row])} {reason}")
    _stop_unless_skipping(manifest, skip_invalid)

    usable = np.array([r not in manifest.problems for r in rows], dtype=bool)
    rows, positions = rows[usable], np.flatnonzero(usable)  # manifest rows, and their rows in decoded.images
    published = (manifest.splits[rows] if split.official else np.full(len(rows), "")).astype("<U5")
    keep, shared = _resolve_shared_patients(manifest, rows, published, split)
    # a patient's rows without a split rank as train: told apart, as no publisher put them in two splits
    unsplit = len(set(manifest.patient_ids[rows[~keep & (published == "")]].tolist()))
    rows, positions, published = rows[keep], positions[keep], published[keep]

    assignment = published.copy()  # "<U5": room for "train"
    pool = np.flatnonzero((published == "train") | (published == ""))
    # Which splits the layout publishes is decided on all its rows: a published split whose rows were all left out
    # is an empty split (an error below), never silently replaced by a carved one.
    layout = [name for name in ("val", "test") if name in set(manifest.splits.tolist())]
    missing = [name for name in ("val", "test") if name not in layout or not split.official]
    fractions = {"val": split.val_fraction, "test": split.test_fraction}
    if missing and len(pool):
        shares = [1.0 - sum(fractions[m] for m in missing)] + [fractions[m] for m in missing]
        try:
            parts = split_by_patient(manifest.patient_ids[rows[pool]], fractions=tuple(shares), seed=split.seed)
        except ValueError as exc:
            raise DataError(f"{manifest.name} at {manifest.root}: cannot carve {' and '.join(missing)} out of "
                            f"{len(pool)} rows: {exc}") from exc
        assignment[pool] = "train"
        for name, part in zip(missing, parts[1:]):
            assignment[pool[part]] = name
    else:
        assignment[pool] = "train"

    chosen = {name: np.flatnonzero(assignment == name) for name in ("train", "val", "test")}
    for name, c in chosen.items():
        if len(c) == 0 and name in missing and len(pool):
            # refused, not filled with a patient of another split: see split_by_patient
            raise DataError(f"{manifest.name} at {manifest.root}: no patient's draw fell in the {name} split that "
                            f"dpmed carves (data.split.{name}_fraction {fractions[name]:g}, seed {split.seed}); "
                            f"raise data.split.{name}_fraction or choose another data.split.seed")
        if len(c) == 0:
            raise DataError(f"{manifest.name} at {manifest.root}: the {name} split is empty after "
                            f"{'leaving out invalid rows' if manifest.problems else 'reading'}; "
                            "every split needs images (check the layout's split folders or split column)")
    pixels = in_group_order(decoded.images, [positions[c] for c in chosen.values()])   # each [n, C, H, W]
    sets = {}
    for (name, c), images in zip(chosen.items(), pixels):
        r = rows[c]
        sets[name] = ImageSet(images=images, labels=manifest.labels[r], patient_ids=manifest.patient_ids[r].astype(str),
                              sex=manifest.sex[r].astype(str), age=manifest.age[r].astype(np.float64), masks=None)
    crossing = _patients_in_two_splits(sets)
    if crossing and split.shared_patients != "keep":
        raise DataError(f"{manifest.name}: {len(crossing)} patients ended up in two splits (e.g. {crossing[0]}); "
                        "this is a bug in dpmed's splitting, please report it")

    skipped = Counter(p.kind for p in manifest.problems.values())
    rate = len(decoded.images) / max(decoded.seconds, 1e-9)
    summary = [f"{'read' if decoded.cached else 'decoded'} {len(decoded.images)} images in {decoded.seconds:.1f} s "
               f"({rate:.0f}/s{', from the cache' if decoded.cached else ''})"]
    if manifest.problems:
        summary.append(f"left out {len(manifest.problems)} invalid rows ({dict(skipped)}; skip_invalid)")
        # which rows: told to the user (terminal, private log), never in data.source, which run.json and study.yaml
        # carry: a private file's name can name its patient
        for r in sorted(manifest.problems)[:_EXAMPLES]:
            _log.warning("left out %s: %s", manifest.where[r], manifest.problems[r].detail)
        if len(manifest.problems) > _EXAMPLES:
            _log.warning("left out %d more invalid rows, as counted above", len(manifest.problems) - _EXAMPLES)
    # told, as above: identical images under two patient ids (`dpmed.data.duplicates`), named as the rows are
    copies = describe_copies(sets, name=lambda split, i: str(manifest.where[rows[chosen[split][i]]]),
                             patients_known=bool(manifest.notes.get("patients_known", True)))
    for line in describe_spellings(manifest, rows) + describe_demographics(manifest, rows) + copies:
        _log.warning("%s", line)
    _tell_small_published_validation(manifest, sets["val"], "val" not in missing)
    if shared["patients_in_two_published_splits"]:
        blank = (f" ({unsplit} of them with rows that give no split, read as train: give those rows the "
                 "patient's split to keep them)" if unsplit else "")
        n, left = shared["patients_in_two_published_splits"], shared["rows_of_those_patients_outside_their_top_split"]
        summary.append(f"{n} patient{' is' if n == 1 else 's are'} in two published splits{blank}: "
                       + (f"left out {'its' if n == 1 else 'their'} {left} image{'' if left == 1 else 's'} outside "
                          "the higher split (test > val > train; data.split.shared_patients: keep keeps them, "
                          "patients then crossing splits)" if split.shared_patients != "keep"
                          else "kept as published (shared_patients: keep), so patients cross splits"))
    source = {
        "summary": "; ".join(summary),
        "format": manifest.notes.get("format", manifest.name), "path": str(manifest.root),
        "preprocessing": preprocessing.describe(),
        "rows": len(manifest),
        "left_out_invalid": {"count": len(manifest.problems), "by_kind": dict(skipped)},
        "split": {"val_fraction": split.val_fraction, "test_fraction": split.test_fraction, "seed": split.seed,
                  # the evaluation splits the layout publishes: whether a row is published as training (not
                  # blank) reads that row alone, and blank rows train alike
                  "official": split.official, "published": [name for name in ("val", "test") if name not in missing],
                  "carved": missing if len(pool) else [], "shared_patients": split.shared_patients, **shared,
                  # kept or not: where it publishes neither, official: false carves what true does
                  "layout_publishes": layout,
                  "patients_crossing_splits": len(crossing)},
        "decode": {"images": len(decoded.images), "seconds": round(decoded.seconds, 3), "from_cache": decoded.cached,
                   "cache_key": decoded.key},
        **{k: v for k, v in manifest.notes.items() if k != "format"},
    }
    return Dataset(name=manifest.name, task=manifest.task, train=sets["train"], val=sets["val"], test=sets["test"],
                   description=manifest.description, synthetic=False, source=source,
                   normalization=preprocessing.normalize,
                   patients_known=bool(manifest.notes.get("patients_known", True)))


def in_group_order(images: np.ndarray, groups: list[np.ndarray]) -> list[np.ndarray]:
    """``[images[g] for g in groups]`` (float32), holding the images once where they are this process's own.

    Why: a copy per split held every decoded image twice at the end of assembly (benchmarks/RESULTS.md, "Memory";
    `dpmed.memory.check_images` refuses images that do not fit once). An array this process owns
    is instead permuted in place, along the permutation's cycles with one row in hand, so that the groups lie one
    after another (rows in no group after them, unused), and each group is a slice of it (a cache entry too:
    `dpmed.data.cache` reads it into memory, not mapped). Any other array is copied out, once. ``groups``: disjoint
    int arrays of row indices.
    """
    if not (images.flags.writeable and images.flags.owndata and images.dtype == np.float32) \
            or isinstance(images, np.memmap):
        return [np.asarray(images[g], dtype=np.float32) for g in groups]
    used = np.concatenate([np.asarray(g, dtype=np.int64) for g in groups])
    rest = np.setdiff1d(np.arange(len(images)), used)
    _permute_rows(images, np.concatenate([used, rest]))
    ends = np.cumsum([len(g) for g in groups])
    return [images[end - len(g):end] for g, end in zip(groups, ends)]


def _permute_rows(array: np.ndarray, order: np.ndarray) -> None:
    """In place, ``array[:] = array[order]`` for a permutation ``order``, with one row of extra memory."""
    done = np.zeros(len(order), dtype=bool)
    for start in range(len(order)):
        if done[start]:
            continue
        held, j = array[start].copy(), start
        while True:          # along the cycle: row j takes row order[j], read before anything writes it
            done[j] = True
            k = int(order[j])
            if k == start:
                array[j] = held
                break
            array[j] = array[k]
            j = k


def _patients_in_two_splits(sets: dict[str, ImageSet]) -> list[str]:
    owners: dict[str, set[str]] = {}
    for name, s in sets.items():
        for pid in set(s.patient_ids.tolist()):
            owners.setdefault(pid, set()).add(name)
    return sorted(pid for pid, names in owners.items() if len(names) > 1)
