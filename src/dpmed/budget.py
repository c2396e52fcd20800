"""What a whole study releases, accounted together: every run that trained on the same patients composes.

A study releases one model per run (arm x swept value x seed), all trained on the same training split, so a user
who shares them all shares their composition, not the eps of any single run. This module composes the ledgers of
*every* run the study folder holds: the runs the study file asks for (planned, before training), and finished runs
that are still in the folder although the study file no longer lists them (their files were released just the same).

* DP-SGD runs (Poisson sampling, one unit of privacy) compose in one accountant: the study's eps. To that is added
  the eps of each DP count of the training set they planned from (`dpmed.released_size`): once per count, however
  many runs share it.
* A run without privacy (``none``, ``scalar_shift``, shuffle-mode DP-SGD, DP-SGD whose noise is below what its
  sampler draws: `dpmed.accounting.truncation`) trained on the same patients makes the study's total infinite:
  nothing that includes its model is DP.
* The delta each DP-SGD run pays for its sampler's bounded draws adds to the study's delta, or, under a budget, is
  taken from the budget's delta before composing (a thousandth of delta or less up to eps of several hundred).
* Local-DP runs (each seed and swept value of a ``pixel_laplace`` or ``pixel_gaussian`` arm) each release a new,
  independently noised copy of every training image; whoever holds several of their models holds several releases of
  each image, which compose under their own relation (any two images): `accounting.compose_image_events` adds them
  up into one per-image total. That relation is not DP-SGD's add/remove, so a study with both has no single total.
* Runs with the patient as the unit and runs with the image as the unit are add/remove of different sets, as are
  image-unit runs under different ``max_images_per_patient`` caps (or none). Where every image-unit run has a cap k,
  Gaussian noise and patients the dataset names, they compose with the patient as the unit: a patient is at most k
  images of each such run, a group whose tight PLD is the mixture of Gaussians of Ganesh 2024
  (`accounting.patient_epsilon`), composed in one PLD accountant with the patient-unit runs. Its DP counts of
  capped images cost a patient k times their eps (a patient is up to k of the counted images), and each such run's
  sampler costs the delta of k images together. Without a cap (the most images of a patient is a statistic of the
  training set, never released), without patient ids, with Laplace noise on the images (no mixture analysis), or
  beyond what PLD resolves (RDP has no analysis of the mixture), there is no single eps, and the statement says why.
* Reproducible-mode runs are not DP against anyone who knows the seed.

``privacy_budget`` in a study file asks dpmed to refuse, before any training, a study whose total exceeds the budget
or has none. The total is shown in the report with its accountant, delta and unit either way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from dpmed import accounting
from dpmed.config import PrivacyBudget, RunPlan
from dpmed.errors import PrivacyError
from dpmed.accounting.events import ImageEvent
from dpmed.mechanisms import DpSgdPlan, PixelGaussianPlan, PixelLaplacePlan, mechanism_info, unit_words
from dpmed.records import RunRecord, StudyPrivacy
from dpmed.numbers import count_text, delta_share_text, delta_text, epsilon_text

__all__ = ["study_privacy", "check_budget"]


@dataclass(frozen=True)
class _Released:
    """A local-DP run or a run without privacy, as the study accounting sees it (DP-SGD runs: `_DpSgdRun`)."""

    run_id: str
    kind: str                     # "not_private" or "local_dp"
    delta: float = 0.0            # local DP: the per-image delta of its release
    events: tuple = ()            # local DP: its one release of the images
    voided: bool = False          # not private: a mechanism's claim its settings void (not a baseline)


@dataclass(frozen=True)
class _DpSgdRun:
    """A DP-SGD run whose claim holds (Poisson sampling, noise its sampler draws), as the study accounting sees it."""

    run_id: str
    unit: str                     # its neighbours' unit in words (`mechanisms.unit_words`)
    delta: float
    accountant: str
    events: tuple                 # its events
    size: tuple[str, float] | None    # the DP count it planned from (count key, its eps), if released
    sampler_delta: float          # what its noise sampler's bounded draws add to delta
    noise: str                    # "gaussian" or "laplace"
    cap: int | None               # image unit: max_images_per_patient
    patients_known: bool          # whether the dataset names patients
    group_sampler_delta: float    # image unit under a cap k: the sampler's share for k images


def _released(plan: RunPlan, ledger: accounting.Ledger | None) -> _Released | _DpSgdRun:
    """A run from its plan, and its ledger where it finished (else the events its plan will record)."""
    info = mechanism_info(plan.mechanism)
    privacy = plan.privacy
    if info.local:
        event = (_image_event(privacy, ledger)
                 if info.is_private and isinstance(privacy, (PixelLaplacePlan, PixelGaussianPlan)) else None)
        if event is None:                    # no guarantee to compose: listed, without a total
            return _Released(plan.run_id, "local_dp")
        # noise the sampler cannot draw: no claim holds. The card decides it, from the release's own R / s
        if info.card(privacy, accounting.Ledger((event,)), "secure").sampler_voids:
            return _Released(plan.run_id, "not_private", voided=True)
        delta = (privacy.delta if isinstance(privacy, PixelGaussianPlan)
                 and isinstance(event, accounting.GaussianImageEvent) else 0.0)
        return _Released(plan.run_id, "local_dp", delta=delta, events=(event,))
    if (not info.is_private or not isinstance(privacy, DpSgdPlan) or privacy.sampling != "poisson"
            or privacy.sampler_voids):
        return _Released(plan.run_id, "not_private", voided=info.is_private)
    events = ledger.events if ledger is not None else (accounting.dp_sgd_event(
        noise=privacy.noise, noise_multiplier=privacy.noise_multiplier, sample_rate=privacy.sample_rate,
        steps=privacy.steps),)
    size = (privacy.size_key, privacy.size_epsilon) if privacy.size_epsilon else None
    # A capped run's add/remove is of the capped set (`mechanisms.unit_words`), so runs under different caps (or
    # none) have different neighbours: no eps of either relation holds for both (a patient's may: `study_privacy`).
    unit = unit_words(privacy.unit, privacy.max_images_per_patient)
    cap = privacy.max_images_per_patient if privacy.unit == "image" else None
    if cap and privacy.image_cap_key != "study":
        # a version before the study-wide key kept each seed's own images (`dpmed.run`): another capped set than the
        # study's runs, so it composes with them for the patient (each choice reads that patient alone), not per image
        unit += f", its images kept by seed {plan.seed}'s key"
    return _DpSgdRun(plan.run_id, unit, privacy.delta, privacy.accountant, tuple(events), size,
                     privacy.sampler_delta, privacy.noise, cap, privacy.patients_known,
                     privacy.sampler_share(group=cap) if cap else 0.0)


def _patient_statement(dp: Sequence[_DpSgdRun], epsilon: float | None, delta: float) -> str:
    """What an image-unit total means for a patient, "" where the patient is the unit. A patient with k images is
    protected only as a group of k (METHODS.md s.2b): with max_images_per_patient k, all of ``dp`` share it (their
    unit names it), the group-privacy formula of the composed total; without, that the group is unstated, since the
    most images of one patient is a statistic of the training set (told to the user only, `dpmed.study`)."""
    if epsilon is None or any(r.unit == "patient" for r in dp):     # no total to apply it to, or no need
        return ""
    if not all(r.patients_known for r in dp):
        return ("; no patient ids are known for these images, so the unit is one image and a patient with several "
                "images is protected only as a group of them (group privacy)")
    k = dp[0].cap
    if k is None:
        return ("; a patient with k images is protected only as a group of k, at about (k eps, k e^((k-1) eps) "
                "delta) (group privacy), for a k this statement does not state: set max_images_per_patient, or "
                "privacy_unit: patient, to have it stated")
    if k == 1:
        return "; a patient has at most 1 training image (max_images_per_patient), so this total is also the patient's"
    group = accounting.group_privacy(epsilon=epsilon, delta=delta, k=k)
    formula = (f"({epsilon_text(group.formula_epsilon)}, {delta_text(group.formula_delta)})-DP"
               if not group.formula_is_vacuous
               else f"eps {epsilon_text(group.formula_epsilon)} with delta >= 1 (vacuous)")
    return (f"; a patient with at most {k} training images (max_images_per_patient) is protected as a group of {k}: "
            f"{formula} by the group-privacy formula (k eps, k e^((k-1) eps) delta) applied to this total "
            f"({accounting.GROUP_CITATION})")


def _image_event(privacy: PixelLaplacePlan | PixelGaussianPlan, ledger: accounting.Ledger | None) -> ImageEvent | None:
    """The release of the training images a local-DP run recorded (finished), else the one its plan will record
    (None: its mechanism declares none, so it has no guarantee to compose)."""
    image_events = (accounting.LaplaceImageEvent, accounting.GaussianImageEvent)
    recorded = [e for e in ledger.events if isinstance(e, image_events)] if ledger is not None else []
    if recorded:
        return recorded[0]
    # the event depends on the image's d = C H W values only, which the plan holds
    transform = mechanism_info(privacy.mechanism).image_mechanism(privacy)
    return None if transform is None else transform.event((privacy.dimension,))


def _local_statement(local: Sequence[_Released], composed: accounting.ImageComposition | None, dp: bool) -> str:
    ids = ", ".join(r.run_id for r in local)
    if composed is None:
        return (f"{len(local)} local-DP run(s) ({ids}) hold per image under another neighbour relation and do not "
                "compose with DP-SGD's eps")
    runs = f"the {len(local)} local-DP runs together" if len(local) > 1 else "the local-DP run"
    return (f"{runs} ({ids}): eps_image = {epsilon_text(composed.epsilon)} at delta = "
            f"{delta_text(composed.delta)} ({composed.method}, {composed.citation}; neighbours: "
            f"{composed.neighbour_relation}), under another neighbour relation than DP-SGD's"
            + (", so no single total with it" if dp else ""))


def _compose(runs: Sequence[_DpSgdRun], delta: float, accountant: str) -> tuple[float | None, str]:
    ledger = accounting.Ledger()
    for run in runs:
        for event in run.events:
            ledger = ledger.record(event)
    try:
        return accounting.ledger_epsilon(ledger, delta=delta, accountant=accountant), ""
    except ValueError as exc:
        return None, f" ({accountant.upper()} could not certify the composition: {exc})"


def _patient_obstacle(dp: Sequence[_DpSgdRun], budget: PrivacyBudget | None) -> str:
    """Why DP-SGD runs of different units have no total with the patient as the unit; "" where they have one."""
    image = [r for r in dp if r.unit != "patient"]
    uncapped = [r.run_id for r in image if r.cap is None]
    laplace = [r.run_id for r in image if r.noise != "gaussian"]
    outrun = [r for r in image if r.group_sampler_delta > r.delta]
    if not all(r.patients_known for r in dp):
        return ("no patient ids are known for these images (the dataset, as read, names none), so no run's guarantee "
                "can be stated for a patient")
    if uncapped:
        return (f"the image-unit run(s) {', '.join(uncapped)} set no max_images_per_patient, so a patient is a group "
                "of as many of their images as they have, a statistic of the training set that no total may read; "
                "set max_images_per_patient (or privacy_unit: patient) on their arms")
    if laplace:
        return (f"the image-unit run(s) {', '.join(laplace)} add Laplace noise, and a patient's images together have "
                "a PLD here only under Gaussian noise (the mixture of Gaussians); set noise: gaussian (or "
                "privacy_unit: patient) on their arms")
    if budget is not None and budget.accountant != "pld":
        return (f"privacy_budget.accountant is {budget.accountant}, and only a PLD composes a patient's images in the "
                "image-unit runs (dp_accounting's RDP accountant has no analysis of the mixture of Gaussians); set "
                "privacy_budget.accountant: pld")
    if outrun:
        return (f"in the image-unit run(s) {', '.join(r.run_id for r in outrun)} a patient's images together can move "
                "a coordinate past every draw of the noise sampler, with probability above the run's delta "
                f"(up to {max(r.group_sampler_delta for r in outrun):.2g} over the run), so no guarantee holds for "
                "the patient as run; give them more noise (a lower target_epsilon), or set privacy_unit: patient on "
                "their arms")
    return ""


def _compose_patients(dp: Sequence[_DpSgdRun], delta: float) -> tuple[float | None, str]:
    """The runs composed for add/remove one patient: patient-unit runs' steps as they are, image-unit runs' steps as
    groups of a patient's at most k images (`accounting.patient_epsilon`)."""
    patients = [e for r in dp if r.unit == "patient" for e in r.events]
    groups: list[accounting.ImageGroup] = []
    for r in dp:
        if r.unit != "patient":
            # each has a cap where they compose (`_patient_obstacle`): a run without one fails here, never leaves the
            # total (and ImageGroup refuses a k of None where asserts are off)
            assert r.cap is not None, f"{r.run_id}: an image-unit run without max_images_per_patient"
            groups += [accounting.ImageGroup(r.cap, e) for e in r.events]
    try:
        return accounting.patient_epsilon(patients, groups, delta=delta), ""
    except ValueError as exc:
        return None, (f" (PLD could not certify the composition: {exc}; with privacy_unit: patient on the image-unit "
                      "arms, RDP composes beyond what PLD resolves)")


def _groups_text(dp: Sequence[_DpSgdRun]) -> str:
    """Which image-unit runs enter the patient's composition as groups of how many images."""
    by_cap: dict[int, list[str]] = {}
    for r in dp:
        if r.unit != "patient" and r.cap is not None:     # each has a cap where they compose (`_patient_obstacle`)
            by_cap.setdefault(r.cap, []).append(r.run_id)
    return "; ".join(f"{', '.join(ids)} as groups of at most {k} image{'s' if k > 1 else ''}"
                     for k, ids in sorted(by_cap.items()))


def _not_private_text(runs: Sequence[_Released]) -> str:
    """The runs without a guarantee, each group by why: a baseline trains without privacy, while a claim its settings
    void (shuffled batches, noise the sampler cannot draw) is another matter for whoever set it."""
    plain = [r.run_id for r in runs if not r.voided]
    voided = [r.run_id for r in runs if r.voided]
    groups = ([f"{count_text(len(plain), 'run')} without privacy"] if plain else []) + (
        [f"{count_text(len(voided), 'run')} whose privacy claim does not hold"] if voided else [])
    if len(groups) == 1:
        listed = f"{groups[0]} on the same patients ({', '.join(plain or voided)})"
    else:
        listed = f"{groups[0]} ({', '.join(plain)}) and {groups[1]} ({', '.join(voided)}), on the same patients"
    return f"{listed}: everything released with them is not DP (eps = infinity)"


def _counts(dp: Sequence[_DpSgdRun], for_patient: bool) -> tuple[float, str]:
    """(the eps of the DP counts of the training set ``dp`` planned from, their words for the statement). One cost
    per count: a folder holds one draw per key and eps (`released_size` never draws again beside finished secure runs
    planned from an earlier one: it takes their count back, and refuses a folder whose runs and file hold two), shared
    by every run planned from it. ``for_patient``: a count of capped images costs a patient k times its eps (a
    patient is up to k of the images it counts)."""
    sizes = {(*r.size, r.cap if for_patient and r.cap else 1) for r in dp if r.size is not None}
    if not sizes:
        return 0.0, ""
    return sum(eps * times for _, eps, times in sizes), (
        f" (including {count_text(len(sizes), 'DP count')} of the training set: "
        + "; ".join(f"{key} at eps {eps:g}" + (f", times {times} (a patient is up to {times} of the images it counts)"
                                               if times > 1 else "")
                    for key, eps, times in sorted(sizes)) + ")")


def _tight_patient(dp: Sequence[_DpSgdRun], composed_at: float) -> str:
    """Where image-unit runs share a cap k of 2 or more: the patient's tight total, composed as a study of mixed units
    is (`accounting.patient_epsilon`), at the delta the runs compose at plus their samplers' shares for k images;
    "" where it has no such total (the group formula then stands alone)."""
    if _patient_obstacle(dp, None):
        return ""
    eps, _ = _compose_patients(dp, composed_at)
    if eps is None:
        return ""
    counted, words = _counts(dp, True)
    delta = composed_at + sum(r.group_sampler_delta for r in dp)
    return (f"; composed for the patient directly: eps = {epsilon_text(eps + counted)} at delta = "
            f"{delta_text(delta)} (PLD; neighbours: add/remove one patient with all of their images; each run's steps "
            f"as the mixture of Gaussians of the patient's {dp[0].cap} images, {accounting.TIGHT_GROUP_CITATION})"
            f"{words}")


@dataclass(frozen=True)
class _DpSgdTotal:
    """A study's DP-SGD runs composed: what `StudyPrivacy` records of them, and the statement's part on them."""

    unit: str | None              # None: runs of different units, without a total for the patient
    delta: float
    accountant: str
    epsilon: float | None
    statement: str


def _dp_sgd_total(dp: Sequence[_DpSgdRun], budget: PrivacyBudget | None) -> _DpSgdTotal:
    """The DP-SGD runs ``dp`` (at least one) composed, at the budget's delta and accountant when given
    (`study_privacy`)."""
    units = sorted({r.unit for r in dp})
    unit = units[0] if len(units) == 1 else None
    # runs of different units compose with the patient as the unit where each image-unit run caps a patient's images
    obstacle = _patient_obstacle(dp, budget) if unit is None else ""
    grouped = unit is None and not obstacle
    unit = "patient" if grouped else unit
    delta = budget.delta if budget is not None else max(r.delta for r in dp)
    fallback = accounting.fallback_accountant(r.noise for r in dp)
    accountant = ("pld" if grouped else budget.accountant if budget is not None else
                  fallback if fallback and any(r.accountant != "pld" for r in dp) else "pld")
    dp_eps: float | None = None
    why = ""
    # The runs' samplers add their shares to delta (exact noise would not): with a budget the accountant composes at
    # its delta less them, so that the total holds at the budget's delta; without, at the runs' delta plus them. A
    # patient's k images in an image-unit run outrun the sampler together: that run pays the share of k images.
    shares = sum(r.group_sampler_delta if grouped and r.cap else r.sampler_delta for r in dp)
    composed_at = delta - shares if budget is not None else delta
    if unit is None:
        pass    # said below: no accountant composes runs of different neighbour relations
    elif composed_at <= 0:
        why = (f" (the runs' noise samplers, whose draws are bounded, already cost {shares:.2g} of the budget's "
               f"delta = {delta:g})")
    elif grouped:      # no fallback: only a PLD composes the mixture of Gaussians
        dp_eps, why = _compose_patients(dp, composed_at)
    else:
        dp_eps, why = _compose(dp, composed_at, accountant)
        if dp_eps is None and accountant == "pld" and budget is None and fallback:
            # runs each within PLD's reach whose composition is not: as a single run beyond it is planned
            # (`accounting.effective_accountant`)
            dp_eps, retried = _compose(dp, composed_at, fallback)
            if dp_eps is not None:
                accountant, why = fallback, (f" (the composition lies beyond what PLD resolves, so "
                                             f"{fallback.upper()} certifies it)")
            else:
                why += retried
        elif dp_eps is None and accountant == "pld" and fallback:
            why += f"; set privacy_budget.accountant: {fallback} to compose beyond what PLD resolves"
    if dp_eps is not None:
        counted, words = _counts(dp, grouped)
        dp_eps += counted
        why += words
    if budget is None:      # the pure bound holds at delta 0 (`DpSgdPlan.claimed_delta`): the shares alone
        delta = (0.0 if accountant == "pure" else delta) + shares
    if unit is None:
        return _DpSgdTotal(None, delta, accountant, None, (
            f"the {len(dp)} DP-SGD runs together: no single eps, as the runs with units {' and '.join(units)} do not "
            "compose into one eps (neighbours: " + "; ".join(f"add/remove one {u}" for u in units) + "), and no "
            f"total with the patient as the unit is derived: {obstacle}"))
    shown = (f"eps = {epsilon_text(dp_eps)} at delta = {delta_text(delta)}" if dp_eps is not None
             else "no single eps")
    share = ("" if budget is not None or accountant == "pure" else
             delta_share_text(composed_at, shares, "the noise samplers' bounded draws"))
    if grouped:
        terms = (f"{share}PLD; neighbours: add/remove one patient with all of their images; the image-unit runs "
                 f"enter as groups of a patient's images (max_images_per_patient): {_groups_text(dp)}; "
                 f"{accounting.TIGHT_GROUP_CITATION}")
        patient = ""
    else:
        terms = f"{share}{accountant.upper()}; neighbours: add/remove one {unit}"
        patient = _patient_statement(dp, dp_eps, delta) + (
            _tight_patient(dp, composed_at) if dp_eps is not None and (dp[0].cap or 0) > 1 else "")
    return _DpSgdTotal(unit, delta, accountant, dp_eps,
                       f"the {len(dp)} DP-SGD runs together: {shown} ({terms}){why}{patient}")


def study_privacy(plans: Sequence[RunPlan], finished_elsewhere: Sequence[RunRecord] = (), *,
                  budget: PrivacyBudget | None = None, reproducible: bool = False) -> StudyPrivacy:
    """Compose every run of ``plans`` (before training) and every finished run in ``finished_elsewhere`` (records of
    runs in the folder that the study no longer lists, with the ledgers they recorded).

    delta and accountant: the budget's when given; else the largest delta of the DP-SGD runs and PLD, or where a run
    was certified otherwise or their composition lies beyond what PLD resolves, what certifies their noise there
    (`accounting.fallback_accountant`: RDP for Gaussian noise, the pure bound for Laplace noise)."""
    runs = [_released(p, None) for p in plans] + [_released(r.plan, r.ledger) for r in finished_elsewhere]
    dp = [r for r in runs if isinstance(r, _DpSgdRun)]
    not_private_runs = [r for r in runs if isinstance(r, _Released) and r.kind == "not_private"]
    local_runs = [r for r in runs if isinstance(r, _Released) and r.kind == "local_dp"]
    not_private = tuple(r.run_id for r in not_private_runs)
    local = tuple(r.run_id for r in local_runs)
    dp_total = _dp_sgd_total(dp, budget) if dp else None
    dp_eps = dp_total.epsilon if dp_total else None
    total = math.inf if not_private else None if (local or (dp_total and dp_total.unit is None)) else dp_eps
    parts = [dp_total.statement] if dp_total else []
    if not_private:
        parts.append(_not_private_text(not_private_runs))
    # said first in reproducible mode: what follows holds only as accounted
    seeded = "NOT DP against anyone who knows the seed (reproducible mode); as accounted: " if reproducible else ""
    # every release of the images composes; a run without a guarantee, or reproducible mode, keeps the bare listing
    composed = (accounting.compose_image_events([r.events[0] for r in local_runs],
                                                deltas=[r.delta for r in local_runs])
                if local_runs and not reproducible and all(r.events for r in local_runs) else None)
    if local:
        parts.append(_local_statement(local_runs, composed, bool(dp)))
    return StudyPrivacy(dp_sgd_runs=tuple(r.run_id for r in dp), not_private=not_private, local_dp=local,
                        unit=dp_total.unit if dp_total else None,
                        delta=dp_total.delta if dp_total else budget.delta if budget is not None else None,
                        accountant=dp_total.accountant if dp_total else None, dp_sgd_epsilon=dp_eps, epsilon=total,
                        local_dp_epsilon=composed.epsilon if composed else None,
                        local_dp_delta=composed.delta if composed else None,
                        reproducible=reproducible, statement=(seeded + "; ".join(parts)) or "no runs")


def check_budget(budget: PrivacyBudget, privacy: StudyPrivacy) -> None:
    """Refuse (PrivacyError) a study whose releases together exceed ``budget`` or have no eps to compare."""
    advice = "drop those runs, run them in another study on other patients, or remove privacy_budget"
    if privacy.not_private:
        raise PrivacyError(f"privacy_budget: runs {', '.join(privacy.not_private)} train without privacy (or with "
                           "shuffled batches no accountant covers, or noise below what the sampler draws) on the same "
                           f"patients, so the study's releases together have eps = infinity; {advice}")
    if privacy.local_dp:
        raise PrivacyError(f"privacy_budget: local-DP runs {', '.join(privacy.local_dp)} hold under another neighbour "
                           f"relation (any two images), which does not compose with DP-SGD's add/remove eps; {advice}")
    if privacy.dp_sgd_runs and privacy.dp_sgd_epsilon is None:
        raise PrivacyError(f"privacy_budget: {privacy.statement}")
    if privacy.dp_sgd_epsilon is not None and privacy.dp_sgd_epsilon > budget.epsilon:
        shown = epsilon_text(privacy.dp_sgd_epsilon)
        if float(shown.replace(",", "")) <= budget.epsilon:      # over by less than its last figure: all of them
            shown = f"{privacy.dp_sgd_epsilon:.15g}"
        raise PrivacyError(
            f"privacy_budget: the study's {len(privacy.dp_sgd_runs)} DP-SGD runs together cost eps = "
            f"{shown} at delta = {budget.delta:g} ({budget.accountant.upper()}; neighbours: "
            f"add/remove one {privacy.unit}), above the "
            f"budget eps = {budget.epsilon:g}; drop runs (arms, values or seeds), lower their target_epsilon, or "
            "raise the budget")
