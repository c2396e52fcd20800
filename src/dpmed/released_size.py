"""The training set's size, released only as a DP count: what DP-SGD plans from.

Under add/remove neighbours (one patient, or one image, more or fewer) the number N of training units is itself
private. DP-SGD's q = B / N, its T over epochs, the default delta, the expected batch and the reconstruction prior
1/N are all functions of N, and a shareable file that holds any of them exactly tells a dataset from its neighbour
with certainty, whatever eps the card prints. So a study releases N only as a noisy count N + Z, Z discrete Laplace
of scale 1 / size_epsilon, sampled exactly (`dpmed.randomness.discrete_laplace`): a count changes by at most one
between neighbours, so the count is (size_epsilon, 0)-DP (Dwork and Roth 2014, s.3.3), and every value planned from it
is post-processing. Each DP-SGD run's eps is its training's eps plus size_epsilon (basic composition, Dwork and Roth
2014, Theorem 3.16, which allows the training to be chosen after seeing the count), and its noise is calibrated to its
target less size_epsilon.

One count per kind of unit an arm plans over (patients; images; images capped per patient) is drawn once per study
folder and data, from the operating system, and kept in ``private/released_sizes.json``: every run and every rerun of
the study plans from the same counts, so the study pays size_epsilon once per count (`dpmed.budget`) and no fresh
draws exist to be averaged. Deleting the folder and running again releases new counts, at a new cost; deleting only
that file while finished runs planned from its counts stay in the folder is refused: a second draw beside theirs would
be a second release, which their records could not be told apart from the first.
"""

from __future__ import annotations

import json
import random
import secrets
from fractions import Fraction
from pathlib import Path
from typing import Collection, Mapping

from dpmed.config import Study
from dpmed.errors import PrivacyError
from dpmed.folders import write_text_atomic
from dpmed.lock import guard
from dpmed.mechanisms import PlanContext, mechanism_info
from dpmed.randomness import discrete_laplace, public_seed

__all__ = ["needed_sizes", "release_sizes", "describe_counts"]


def describe_counts(sizes: Mapping[str, int], epsilon: float, *, symbols: bool = False) -> str:
    """The released counts in words, each with its own guarantee: "about 281 images; about 218 patients (each a DP
    count: eps 0.02, delta 0, add/remove one of what it counts; a DP-SGD run's eps includes the count it was planned
    from)", in ASCII for the terminal, or with ``symbols`` (ε, δ) for the report. Counts are separated by
    semicolons, as a key may hold a comma ("images, at most 2 per patient"). A count the noise took to 0 or below is
    written as drawn, with why, not as "about -100 patients"."""
    eps, delta = ("ε", "δ") if symbols else ("eps", "delta")
    counts = "; ".join(f"about {n:,} {key}" if n > 0 else f"{key}: {n:,} as drawn (the noise outweighs so few)"
                       for key, n in sizes.items())
    each = "each a DP count" if len(sizes) > 1 else "a DP count"
    which = "the count it was planned from" if len(sizes) > 1 else "it"
    return (f"{counts} ({each}: {eps} {epsilon:g}, {delta} 0, add/remove one of what it counts; a DP-SGD run's {eps} "
            f"includes {which})")


def needed_sizes(study: Study, context: PlanContext) -> dict[str, int]:
    """The exact counts the study's arms plan from, by count key (``dp_sgd.size_key``); empty without DP-SGD arms."""
    needed: dict[str, int] = {}
    for arm in study.arms:
        size = mechanism_info(arm.mechanism).size(arm, context)
        if size is not None:
            needed[size[0]] = size[1]
    return needed


def release_sizes(needed: Mapping[str, int], *, epsilon: float, path: Path, fingerprint: str,
                  reproducible_seed: int | None = None,
                  planned_before: Collection[tuple[str, float]] = ()) -> dict[str, int]:
    """The noisy count of each of ``needed`` (exact counts by key), at ``epsilon`` each: the one drawn earlier for
    this key, epsilon and data (``fingerprint``) when ``path`` holds it, else a fresh draw, added to ``path``.
    ``reproducible_seed``: derive the noise from this public seed (reproducible mode, not DP) instead of the OS.
    ``planned_before``: the (key, epsilon) of the counts the folder's finished runs were planned from; where ``path``
    holds no draw of one of them at all (for any data), it was deleted beside those runs, and a fresh draw is refused
    (PrivacyError; module docstring). A draw for other data or randomness is left to the study to refuse: its
    finished runs were made on other data or in another mode. The read, the draws and the write are one step under
    `dpmed.lock.guard`; a file that cannot be read is refused (PrivacyError), never replaced by fresh draws."""
    if not needed:
        return {}
    # `dpmed plan` holds no study folder: beside a starting `dpmed run`, each would otherwise draw a count the file
    # did not hold yet, and one of the two releases would be kept and the other forgotten
    path.parent.mkdir(parents=True, exist_ok=True)
    with guard(path.parent):
        return _release(needed, epsilon=epsilon, path=path, fingerprint=fingerprint,
                        reproducible_seed=reproducible_seed, planned_before=planned_before)


def _read_draws(path: Path) -> list[dict]:
    """The draws ``path`` holds ([] where there is no file); PrivacyError naming the file where it is damaged."""
    if not path.is_file():
        return []
    try:
        draws = json.loads(path.read_text(encoding="utf-8"))["draws"]
        for d in draws:
            (d["key"], d["epsilon"], d["data"], d["mode"], int(d["count"]))
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise PrivacyError(
            f"{path} cannot be read ({type(exc).__name__}: {exc}); it holds the DP counts of the training set that "
            "DP-SGD plans from. Restore it from a copy; deleting it beside finished DP-SGD runs is refused, as a "
            "fresh count would be a second release; or run the study into another folder (--out)") from None
    return draws


def _release(needed: Mapping[str, int], *, epsilon: float, path: Path, fingerprint: str,
             reproducible_seed: int | None, planned_before: Collection[tuple[str, float]]) -> dict[str, int]:
    draws = _read_draws(path)
    mode = "secure" if reproducible_seed is None else f"reproducible {reproducible_seed}"
    released, fresh = {}, []
    for key, exact in needed.items():
        earlier = next((d["count"] for d in draws if (d["key"], d["epsilon"], d["data"], d["mode"])
                        == (key, epsilon, fingerprint, mode)), None)
        # (reproducible mode draws the same count again from its public seed: nothing new is released)
        if (earlier is None and reproducible_seed is None and (key, epsilon) in planned_before
                and not any((d["key"], d["epsilon"]) == (key, epsilon) for d in draws)):
            raise PrivacyError(
                f"{path} holds no count of the training set's {key} (at eps {epsilon:g}) for these data, but finished "
                "DP-SGD runs in this folder were planned from one: a new count beside theirs would be a second "
                "release of it, which the study's privacy could not tell from the first. Restore the file, or run "
                "the study into another folder (--out)")
        if earlier is None:
            source = (secrets.randbelow if reproducible_seed is None
                      else random.Random(public_seed(reproducible_seed, f"released size {key}")).randrange)
            earlier = exact + discrete_laplace(1 / Fraction(epsilon), source)
            fresh.append({"key": key, "epsilon": epsilon, "data": fingerprint, "mode": mode, "count": earlier})
        released[key] = int(earlier)
    if fresh:
        write_text_atomic(path, json.dumps({"draws": draws + fresh}, indent=2), owner_only=True)
    return released
