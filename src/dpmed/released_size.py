"""The training set's size, released only as a DP count: what DP-SGD plans from.

Under add/remove neighbours (one patient, or one image, more or fewer) the number N of training units is itself
private. DP-SGD's q = B / N, its T over epochs, the default delta, the expected batch and the reconstruction prior
1/N are all functions of N, and a shareable file that holds any of them exactly tells a dataset from its neighbour
with certainty, whatever eps the card prints. So a study releases N only as a noisy count N + Z, Z discrete Laplace
of scale 1 / size_epsilon, sampled exactly (`dpmed.randomness.discrete_laplace`): a count changes by at most one
between neighbours, so the count is (size_epsilon, 0)-DP (Dwork and Roth 2014, s.3.3), and every value planned from it
is post-processing. Each DP-SGD run's eps is its training's eps plus size_epsilon (basic composition, Dwork and Roth
2014, Theorem 3.16, which allows the training to be chosen after seeing the count), and its noise is calibrated to its
target less size_epsilon. The count's noise does not shrink with N: a count of a small study may be rough to plan
from (`count_is_rough`: below about 300 units at 0.02), which planning tells the user (`dpmed.study`).

One count per kind of unit an arm plans over (patients; images; images capped per patient) is drawn once per study
folder and training set (the second of `dpmed.resumption.data_fingerprints`: a corrected test label draws none),
from the operating system, and kept in ``private/released_sizes.json``: every run and every rerun of the study plans
from the same counts, so the study pays size_epsilon once per count (`dpmed.budget`) and no fresh draws exist to be
averaged. Deleting the folder and running again releases new counts, at a new cost. Where the file was deleted while
the folder shows a count it released in secure mode (its finished runs' records, and study.yaml, which shows it
before the first run trains), that count is taken back, released already: a second draw beside it would be a second
release, which the records could not be told apart from the first. It is kept in the file only once the study has
accepted those runs (`keep_sizes`): runs it refuses (made on other data) must not leave their count as this data's.
With private/ deleted as a whole, the fingerprint of the data the count was of is gone too, and the study is
refused. A reproducible-mode count is never taken back into a secure study: its noise comes from a public seed, so
it and a run's record give the exact size.
"""

from __future__ import annotations

import json
import math
import random
import secrets
from fractions import Fraction
from pathlib import Path
from typing import Collection, Mapping

from dpmed.config import Study
from dpmed.errors import PrivacyError
from dpmed.folders import RETRAIN_NOTE, write_text_atomic
from dpmed.lock import guard
from dpmed.mechanisms import PlanContext, mechanism_info
from dpmed.randomness import discrete_laplace, public_seed

__all__ = ["needed_sizes", "release_sizes", "keep_sizes", "describe_counts", "count_margin", "count_is_rough"]

# The confidence of the interval that says whether a count is rough (`count_is_rough`)
COUNT_CONFIDENCE = 0.95


def describe_counts(sizes: Mapping[str, int], epsilon: float, *, symbols: bool = False,
                    reproducible: bool = False) -> str:
    """The released counts in words, each with its own guarantee: "about 281 images; about 218 patients (each a DP
    count: eps 0.02, delta 0, closed form (discrete Laplace), add/remove one of what it counts; a DP-SGD run's eps
    includes the count it was planned from)", in ASCII for the terminal, or with ``symbols`` (ε, δ) for the report.
    Counts are separated by semicolons, as a key may hold a comma ("images, at most 2 per patient"). A count the
    noise took to 0 or below is written as drawn, with why, not as "about -100 patients". ``reproducible``: the
    noise came from the study's published seed, so anyone can subtract it: the counts are labelled not DP. A rough
    count (`count_is_rough`) says so with its 95 % interval, as planning's warning does (`dpmed.study`): a reader of
    the report learns that q and T were planned from it."""
    eps, delta = ("ε", "δ") if symbols else ("eps", "delta")
    rough = f", rough: {'±' if symbols else '+-'} {count_margin(epsilon)} at {100 * COUNT_CONFIDENCE:g} %"
    counts = "; ".join(f"about {n:,} {key}{rough if count_is_rough(n, epsilon) else ''}" if n > 0
                       else f"{key}: {n:,} as drawn (the noise outweighs so few)" for key, n in sizes.items())
    each = "each a DP count" if len(sizes) > 1 else "a DP count"
    which = "the count it was planned from" if len(sizes) > 1 else "it"
    seeded = "not DP: seed known (reproducible mode); as accounted, " if reproducible else ""
    return (f"{counts} ({seeded}{each}: {eps} {epsilon:g}, {delta} 0, closed form (discrete Laplace), add/remove one "
            f"of what it counts; a DP-SGD run's {eps} includes {which})")


def count_margin(epsilon: float, confidence: float = COUNT_CONFIDENCE) -> int:
    """The smallest t with P(|Z| > t) <= 1 - ``confidence`` for Z discrete Laplace of scale 1 / ``epsilon``: the
    count +- t covers the exact size at that confidence (150 units at eps 0.02). With a = e^-eps, P(Z = z) =
    (1 - a) / (1 + a) a^|z| (the discrete Laplace of Canonne, Kamath and Steinke 2020), so P(|Z| >= k) =
    2 a^k / (1 + a)."""
    a = math.exp(-epsilon)
    # the smallest k with P(|Z| >= k) <= 1 - c; over -epsilon, not log(a): at epsilon 1e-9 log(a) is 3e-8 off
    k = math.ceil(math.log((1 - confidence) * (1 + a) / 2) / -epsilon)
    return max(k - 1, 0)


def count_is_rough(count: int, epsilon: float) -> bool:
    """Whether a DP count is too rough to plan from as it is: its confidence interval (`count_margin`) reaches below
    half of it, so the exact size may be half the count or one and a half times it, and DP-SGD's q = B / N, its
    expected batch and T by epochs as far from what the exact size gives (2-3 times at 100 units and eps 0.02). A
    function of the count and public settings only: post-processing, free to tell anyone."""
    return 2 * count_margin(epsilon) > count


def needed_sizes(study: Study, context: PlanContext) -> dict[str, int]:
    """The exact counts the study's arms plan from, by count key (``dp_sgd.size_key``); empty without DP-SGD arms."""
    needed: dict[str, int] = {}
    for arm in study.arms:
        size = mechanism_info(arm.mechanism).size(arm, context)
        if size is not None:
            needed[size[0]] = size[1]
    return needed


def release_sizes(needed: Mapping[str, int], *, epsilon: float, path: Path, fingerprint: str,
                  older_keys: Collection[str] = (), reproducible_seed: int | None = None,
                  planned_before: Mapping[tuple[str, float], Collection[int]] | None = None,
                  data_checked: bool = True) -> dict[str, int]:
    """The noisy count of each of ``needed`` (exact counts by key), at ``epsilon`` each: the one drawn earlier for
    this key, epsilon, data (``fingerprint``) and mode when ``path`` holds it, else one taken back from
    ``planned_before``, else a fresh draw, added to ``path``. ``older_keys``: what else keys a draw of these data
    (an older dpmed's fingerprint of every split, of which the training set's is a part).
    ``reproducible_seed``: derive the noise from this public seed (reproducible mode, not DP) instead of the OS.
    ``planned_before``: the counts the folder released already in secure mode, by (key, epsilon), as its finished
    runs' records and its study.yaml hold them (only they: module docstring); read in secure mode only. Where
    ``path`` holds no draw for these data, their count is returned, not written (`keep_sizes` writes it once the
    study has accepted the runs); PrivacyError where they hold more than one, where the file's draw is not theirs
    (a folder where two counts were released), or where ``data_checked`` is False (the folder's fingerprint of the
    data is gone, so whether they counted these data cannot be told). The read, the draws and the write are one
    step under `dpmed.lock.guard`; a file that cannot be read is refused (PrivacyError), never replaced by fresh
    draws."""
    if not needed:
        return {}
    # `dpmed plan` holds no study folder: beside a starting `dpmed run`, each would otherwise draw a count the file
    # did not hold yet, and one of the two releases would be kept and the other forgotten
    path.parent.mkdir(parents=True, exist_ok=True)
    with guard(path.parent):
        return _release(needed, epsilon=epsilon, path=path, fingerprints={fingerprint, *older_keys},
                        fresh_key=fingerprint, reproducible_seed=reproducible_seed, planned_before=planned_before,
                        data_checked=data_checked)


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
            "DP-SGD plans from. Restore it from a copy, or delete it: a study then takes the counts back from its "
            "finished DP-SGD runs' records (without such runs of secure randomness it draws new ones, a new "
            "release)") from None
    return draws


def _release(needed: Mapping[str, int], *, epsilon: float, path: Path, fingerprints: Collection[str], fresh_key: str,
             reproducible_seed: int | None,
             planned_before: Mapping[tuple[str, float], Collection[int]] | None,
             data_checked: bool) -> dict[str, int]:
    draws = _read_draws(path)
    mode = "secure" if reproducible_seed is None else f"reproducible {reproducible_seed}"
    released, fresh = {}, []
    for key, exact in needed.items():
        earlier = next((d["count"] for d in draws if (d["key"], d["epsilon"], d["mode"]) == (key, epsilon, mode)
                        and d["data"] in fingerprints), None)
        # (reproducible mode draws the same count again from its public seed: nothing new is released)
        recorded = sorted((planned_before or {}).get((key, epsilon), ())) if reproducible_seed is None else []
        if recorded and (len(recorded) > 1 or earlier not in (None, *recorded)):
            counts = ", ".join(map(str, sorted(set(recorded) if earlier is None else {*recorded, earlier})))
            holders = f"{path.parent.parent}'s finished DP-SGD runs and study.yaml" + (
                "" if earlier is None else f", and {path},")
            raise PrivacyError(
                f"{holders} hold more than one count of the training set's {key} at eps {epsilon:g} ({counts}): the "
                "runs were made on other data, or beside a second draw of the count, which the study's privacy, "
                "charging one count, could not account for. Run the study into another folder (--out), or delete "
                f"the finished runs and study.yaml to retrain them {RETRAIN_NOTE}")
        if recorded and earlier is None and not data_checked:
            raise PrivacyError(
                f"{path} holds no count of the training set's {key} (at eps {epsilon:g}) and "
                f"{path.parent / 'data_fingerprint'} is gone too, so dpmed can tell neither whether the folder's "
                f"finished runs and study.yaml, planned from the count {recorded[0]}, counted these data, nor whether "
                "those runs were trained on them; a fresh count beside theirs would be a second release. Restore "
                f"{path.parent} from a copy, or run the study into another folder (--out) {RETRAIN_NOTE}")
        if recorded and earlier is None:
            released[key] = recorded[0]       # released already, with those runs: nothing new; kept by keep_sizes
            continue
        if earlier is None:
            source = (secrets.randbelow if reproducible_seed is None
                      else random.Random(public_seed(reproducible_seed, f"released size {key}")).randrange)
            earlier = exact + discrete_laplace(1 / Fraction(epsilon), source)
            fresh.append({"key": key, "epsilon": epsilon, "data": fresh_key, "mode": mode, "count": earlier})
        released[key] = int(earlier)
    if fresh:
        write_text_atomic(path, json.dumps({"draws": draws + fresh}, indent=2), owner_only=True)
    return released


def keep_sizes(sizes: Mapping[str, int], *, epsilon: float, path: Path, fingerprint: str,
               reproducible_seed: int | None = None) -> None:
    """Add to ``path`` each count of ``sizes`` (by key, at ``epsilon``) it holds no draw of for these data and this
    mode: the counts `release_sizes` took back from finished runs' records, once the study has accepted those runs
    (module docstring). Under `dpmed.lock.guard`, as the draws are."""
    if not sizes:
        return
    mode = "secure" if reproducible_seed is None else f"reproducible {reproducible_seed}"
    with guard(path.parent):
        draws = _read_draws(path)
        held = {(d["key"], d["epsilon"], d["data"], d["mode"]) for d in draws}
        taken = [{"key": key, "epsilon": epsilon, "data": fingerprint, "mode": mode, "count": count,
                  "from": "the finished runs' records"}
                 for key, count in sizes.items() if (key, epsilon, fingerprint, mode) not in held]
        if taken:
            write_text_atomic(path, json.dumps({"draws": draws + taken}, indent=2), owner_only=True)
