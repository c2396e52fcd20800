"""Run a whole study: load the data once, plan every run, skip finished ones, execute the rest, collect, report.

Which finished runs a study may reuse, and what refuses the rest, is `dpmed.resumption`'s; whether the data can
support the study at all, `dpmed.suitability`'s.

This is the one module that knows every stage. Planning (calibration included) happens here, before any training, so
that the resolved study (every run's plan) and the study's privacy as a whole are on disk before the first step is
taken; `prepare_study` does exactly that planning for `dpmed plan` too, which then trains nothing. The outputs
written from the finished runs are `dpmed.outputs`', the folder read back `dpmed.states`'. A running study holds its
folder (`dpmed.workspace.claim_folder`), so that a second `dpmed run` stays out.

Progress is logged (``logging.getLogger("dpmed.study")``; the library installs no handler): the data, the study's
privacy, each run's outcome, and after each run the study's progress with the time left, estimated from the runs
finished so far (`dpmed.progress.StudyProgress`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import multiprocessing
import signal
import sys
import time
from dataclasses import dataclass, field, replace
from os import PathLike
from pathlib import Path
from typing import Callable, Mapping

import torch
import yaml

from dpmed import accounting
from dpmed.accounting import Ledger
from dpmed.accounting.events import Event
from dpmed.audit import AuditRecord, max_canaries, read_audit
from dpmed.budget import check_budget, study_privacy
from dpmed.config import RunPlan, Study, check_study, load_study, plan_runs
from dpmed.data import Dataset, images_per_patient, read_dataset
from dpmed.errors import ConfigError
from dpmed.evaluation.version import evaluated_by
from dpmed.executors import RunFailure, RunTask, check_executor_options, make_executor
from dpmed.folders import RunFolder, StudyFolder, write_text_atomic
from dpmed.interruption import interruptible
from dpmed.mechanisms import DpSgdPlan, PlanContext, PrivacyCard, mechanism_info, patient_guarantee
from dpmed.mechanisms.base import refuse_vacuous_delta
from dpmed.models.installation import check_torchvision, needs_torchvision
from dpmed.numbers import confidence_text, count_text, percent_interval_text, shape_text
from dpmed.outputs import write_outputs
from dpmed.pretraining import prepare_start
from dpmed.progress import StudyProgress
from dpmed.records import AttackRecord, DatasetSummary, ResolvedStudy, RunRecord, StudyPrivacy, read_record, read_timing
from dpmed.released_size import COUNT_CONFIDENCE, count_is_rough, count_margin, keep_sizes, needed_sizes, release_sizes
from dpmed.resumption import (attributes_fingerprint, data_fingerprints, finished_runs, randomness_of,
                              unreadable_outputs)
from dpmed.run import RunContext, continues, reevaluate, released_model
from dpmed.states import checkpoints_told, counts_shown, read_resolved
from dpmed.suitability import check_classes, check_fit, check_patients
from dpmed.timing import Rates, probe_rates
from dpmed.workspace import claim_folder, withdraw_leftovers, withdraw_public_timing, writing_into

__all__ = ["StudyResult", "PreparedStudy", "run_study", "prepare_study", "plan_study", "load_study_data",
           "planned_card", "estimate_times", "check_device", "check_machine", "Checkpoints", "checkpoints_of"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StudyResult:
    """What `run_study` did. out_dir: the study's folder, ``out/<study name>`` (`dpmed.read_results` reads it;
    report_path: its report.html). records: one record per finished run, in study order. resumed: run ids found
    finished and not retrained. failures: runs that raised this time (their error.json holds the traceback).
    pending: runs left unfinished because the study stopped first (a fail-fast stop, or a process pool broken by a
    worker that died: the runs it stopped in the other workers, and those not started). seconds: the call's wall
    time."""

    study: Study
    out_dir: Path
    records: list[RunRecord]
    resumed: list[str]
    seconds: float
    failures: list[RunFailure] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)   # not finished: the study stopped first

    @property
    def report_path(self) -> Path:
        return StudyFolder(self.out_dir).report

    @property
    def results_path(self) -> Path:
        return StudyFolder(self.out_dir).results


@dataclass(frozen=True, eq=False)
class PreparedStudy:
    """A study planned against its data and its output folder, before any training: what `dpmed plan` shows and
    `run_study` executes. finished: the runs the folder holds already, with this study's settings (not retrained);
    elsewhere: finished runs in the folder that the study no longer lists (released all the same, so accounted);
    privacy: everything the folder will hold, accounted together; load_seconds: reading and preparing the data."""

    study: Study
    folder: StudyFolder
    dataset: Dataset
    plans: list[RunPlan]
    finished: dict[str, RunRecord]
    elsewhere: list[RunRecord]
    privacy: StudyPrivacy
    load_seconds: float
    fingerprint: str = ""
    attributes: str = ""          # resumption.attributes_fingerprint
    sizes: Mapping[str, int] = field(default_factory=dict)   # the DP counts DP-SGD planned from (released_size)
    reevaluate: tuple[str, ...] = ()      # finished runs evaluated otherwise: evaluated again, not retrained
    damaged: Mapping[str, str] = field(default_factory=dict)   # of those, the runs evaluated again for their files

    @property
    def todo(self) -> list[RunPlan]:
        """The runs still to train, in study order."""
        return [p for p in self.plans if p.run_id not in self.finished]

    def resolved(self) -> ResolvedStudy:
        return ResolvedStudy(study=self.study, study_privacy=self.privacy, runs=self.plans,
                             dataset=_dataset_summary(self.dataset, *self._released_sizes()))

    def _released_sizes(self) -> tuple[dict[str, int], float]:
        """The DP counts the folder's DP-SGD runs were planned from, this study's and those of finished runs it no
        longer lists (they still count, `dpmed.budget`), and their eps: where only the latter hold one, study.yaml
        and the report would otherwise publish the exact size beside runs whose eps hides it."""
        sizes, size_epsilon = dict(self.sizes), self.study.size_epsilon
        for record in self.elsewhere:
            dp = record.plan.privacy
            if isinstance(dp, DpSgdPlan) and dp.size_epsilon and dp.size_key not in sizes:
                sizes[dp.size_key] = dp.released_count
                size_epsilon = size_epsilon if self.sizes else dp.size_epsilon
        return sizes, size_epsilon


def check_device(study: Study) -> None:
    """A study that asks for a GPU this machine lacks is refused before the data are read, not when each run
    starts, naming the option that asked for it where one did (``--device cuda``: `Study.origin`); checked with the
    rest of the machine by `check_machine`. Public pretraining's own device too: it trains first, after the private
    and public data are read and the folder is made, and was met there as an internal error."""
    devices = {"training.device": study.training.device}
    if study.pretrain is not None:
        devices["pretrain.training.device"] = study.pretrain.training.device
    for key, device in devices.items():
        if device == "cuda" and not torch.cuda.is_available():
            build = "" if torch.version.cuda else f" (this torch {torch.__version__} is built without CUDA)"
            given = study.origin(key)
            asked = f"{given}: {key} is cuda" if given else f"{key} is cuda"
            how = "dpmed run --device cpu" if key == "training.device" else f"set {key} to cpu or auto"
            raise ConfigError(f"{asked}, but this machine has no CUDA GPU that torch can use{build}; use device cpu "
                              f"or auto ({how}), or run where a GPU is")


def check_machine(study: Study) -> None:
    """What this machine must offer ``study``, checked before the data are read or a folder is made: the GPU it asks
    for (`check_device`), and a torchvision built for this torch where its models need one (told here, not where a
    model imports it). Each command checks once: `run_study` for `dpmed run` and a Python caller, `dpmed plan`
    itself."""
    check_device(study)
    if needs_torchvision(study):
        check_torchvision()


def load_study_data(study: Study) -> Dataset:
    """The study's dataset, preprocessed and split as the study asks (DataError names the file or row on failure),
    with the classes each split needs (:func:`check_classes`)."""
    dataset = read_dataset(study.data.to_request())
    check_classes(dataset, where=str(study.data.path or study.data.source))
    check_patients(dataset, where=str(study.data.path or study.data.source))
    return dataset


def plan_context(dataset: Dataset) -> PlanContext:
    """What planning reads of ``dataset``: images per training patient, the image shape, whether patients are known."""
    return PlanContext(images_per_patient=images_per_patient(dataset.train.patient_ids),
                       image_shape=dataset.train.image_shape, patients_known=dataset.patients_known)


def plan_study(study: Study, dataset: Dataset, sizes: Mapping[str, int] | None = None, *,
               context: PlanContext | None = None) -> list[RunPlan]:
    """Every run of ``study`` on ``dataset``, planned (METHODS.md s.1-2): DP-SGD's q, T, delta and calibrated sigma
    over its unit, from ``sizes``, the DP counts of its units (`dpmed.released_size`; None: from the exact counts,
    taken as public), local DP noise scales. ``context``: :func:`plan_context` of ``dataset``, where the caller
    has it already. Audits are checked against the training patients, and the batch against the training images;
    what needs no plan (:func:`check_fit`) is not checked here."""
    context = context or plan_context(dataset)
    if sizes is not None:
        context = replace(context, released_sizes=sizes, size_epsilon=study.size_epsilon)
    plans = plan_runs(study, context)
    # DP-SGD's plans check their batch against the DP count of their units, and their audits are checked against
    # it here: whether a study runs is seen by whoever holds its files, so it must not read the exact count. The
    # other arms' checks read the exact counts, which their own releases do not protect (local DP releases the
    # number of images in the clear).
    exact_limit = max_canaries(dataset.train)
    for plan in plans:
        dp_plan = plan.privacy if isinstance(plan.privacy, DpSgdPlan) else None
        dp = dp_plan is not None
        limit = dp_plan.released_count - 1 if dp_plan is not None else exact_limit
        if plan.audit is not None and plan.audit.canaries > limit:
            none_left = limit < 2                   # 2: the fewest canaries an audit takes
            # a DP-SGD arm's count is of its units: images where the image is the unit (`dpmed.audit.canaries`)
            units = f"{dp_plan.unit}s" if dp_plan is not None else "patients"
            if dp and limit < 0:            # a count is released, with noise: below one, it is no count of units
                raise ConfigError(
                    f"arm {plan.arm!r}: audit.canaries = {plan.audit.canaries} needs more training {units} than the "
                    f"DP count it plans from, {limit + 1} (its noise, scale 1 / size_epsilon, took it below one: a "
                    "larger size_epsilon draws a count nearer the true one), which leaves none to audit with; remove "
                    "the arm's audit, or use more images")
            raise ConfigError(
                f"arm {plan.arm!r}: audit.canaries = {plan.audit.canaries} needs more training {units} than the "
                f"{limit + 1} " + ("of the DP count it plans from" if dp else "this dataset has")
                + (", which leave none to audit with" if none_left else "")
                + (" (one canary per patient, and some patients left to train on); " if units == "patients" else
                   " (one canary per image, and some images left to train on); ")
                + ("remove the arm's audit, or use more images" if none_left
                   else f"lower audit.canaries below {limit + 1} or use more images"))
    for plan in plans:
        # The other arms would quietly train on the whole set at every step, another recipe than the batch the
        # study states.
        if not isinstance(plan.privacy, DpSgdPlan) and plan.training.batch_size > len(dataset.train):
            raise ConfigError(f"arm {plan.arm!r}: training.batch_size {plan.training.batch_size} exceeds the "
                              f"{len(dataset.train)} training images; lower training.batch_size to at most "
                              f"{len(dataset.train)}")
    return plans


def _tell_largest_patient(plans: list[RunPlan], context: PlanContext) -> None:
    """What each image-unit DP-SGD run's eps implies for the training patient with the most images, where its arm
    declares no max_images_per_patient for the card to state it for: told to the user (terminal, private log) and
    written to no shareable file, since that count is a statistic of the training set."""
    counts = context.images_per_patient
    k = int(counts.max()) if context.patients_known and len(counts) else 1
    cache: dict = {}
    for plan in plans:
        dp = plan.privacy
        if k > 1 and isinstance(dp, DpSgdPlan) and dp.unit == "image" and dp.max_images_per_patient is None:
            group = patient_guarantee(dp, k, cache, why=f"up to k = {k} training images ({int((counts > 1).sum())} "
                                      "patients have several; shown here only, not in any shareable file)")
            _log.info("%s: %s", plan.run_id, group.statement)


def _tell_ignored_caps(study: Study, dataset: Dataset) -> None:
    """Warn where an arm caps each patient's images but the data name no patients: every image is its own patient,
    so the cap keeps them all and the cards state no patient guarantee (`mechanisms.dp_sgd`)."""
    if dataset.patients_known:
        return
    for arm in study.arms:
        if getattr(arm, "max_images_per_patient", None) is not None:
            _log.warning("arm %r: max_images_per_patient has no effect: %s names no patient ids, so every image is "
                         "its own patient; the unit is one image, and a patient with several images is protected "
                         "only as a group of them", arm.name, dataset.name)


def _tell_settings_the_data_turn_off(study: Study, dataset: Dataset) -> None:
    """Warn of each setting the study gives that its data, once read, leave unread
    (`Study.settings_the_data_turn_off`), as `dpmed.config.loading` warns of one another setting turns off, but
    before any training rather than where the file is read, where the data are not yet known; `dpmed plan` says it
    too. Dropping it trains no finished run again (`Study.removal`, which names the --set that gave it)."""
    for key, why in study.settings_the_data_turn_off(dataset):
        _log.warning("%s changes nothing, as %s; %s", key, why, study.removal(key))


def _tell_whole_batches(plans: list[RunPlan]) -> None:
    """Warn where a DP-SGD run samples every unit at every step (q = 1): its DP count of units is at most the
    expected batch, so the study's batch size is not what trains and the noise is spread over fewer, larger steps
    than the user may think (terminal and private log only: the count is near the exact one)."""
    for plan in plans:
        dp = plan.privacy
        if isinstance(dp, DpSgdPlan) and dp.sample_rate >= 1.0:
            _log.warning("%s: q = 1: the DP count of the training %ss is no more than the expected batch of %d, so "
                         "every %s is in every one of its %d steps; lower training.batch_size for sampled batches "
                         "(on a small dataset the count's noise, scale 1 / size_epsilon, can also be the cause: a "
                         "larger size_epsilon draws a count nearer the true one)",
                         plan.run_id, dp.unit, plan.training.batch_size, dp.unit, dp.steps)


def _tell_rough_counts(plans: list[RunPlan], arms_with_epochs: set[str]) -> None:
    """Warn, once per count, where a DP count a DP-SGD run still to train plans from is rough against its noise
    (`count_is_rough`: at the default size_epsilon, a count below about 300 units): q, the expected batch and T by
    epochs may then be off by a factor of two or more, silently. ``plans``: the runs still to train; a finished run
    plans from nothing any more, and its count is told, with its interval, in the plan and the report. The warning
    reads only the count and public settings (post-processing). Its advice sizes size_epsilon from a size the user
    may publish: one chosen from this count would be a function of it, spending its eps again where no card counts
    it, and one from the exact size would release that size outright. Below 12 units no size_epsilon within the
    schema's limit narrows the count to a quarter of them: there, and only there, it says so (whether the count is
    below 12 is read from the DP count, post-processing like the rest; told of 150 units, the clause only confused),
    and that training.steps keeps T off the count (q = B / N still reads it) where a run of the count plans T by
    epochs, with no epochs on its arm (one of ``arms_with_epochs``), which replace training.steps. Before, the first
    run of the count decided alone: a study with training.steps whose arm listed first had epochs was told to set
    it, and one whose first had none was not told that the other arms' epochs read T from the count."""
    told = set()
    limit = next(m.le for m in Study.model_fields["size_epsilon"].metadata if hasattr(m, "le"))
    # the margin is about ln(1 / (1 - confidence)) / eps, so 4 ln 20 / n, 12 / n, makes it a quarter of n
    per_unit = round(4 * math.log(1 / (1 - COUNT_CONFIDENCE)))
    for plan in plans:
        dp = plan.privacy
        if not (isinstance(dp, DpSgdPlan) and dp.size_epsilon and dp.size_key not in told
                and count_is_rough(dp.released_count, dp.size_epsilon)):
            continue
        told.add(dp.size_key)
        by_epochs = {p.arm for p in plans if isinstance(p.privacy, DpSgdPlan) and p.privacy.size_key == dp.size_key
                     and p.training.steps is None}
        own = sorted(by_epochs & arms_with_epochs)
        steps = ("training.steps, which keeps T off the count (q = B / N still reads it)"
                 + (f", and no epochs on arm{'s' if len(own) > 1 else ''} {', '.join(own)}, which replace it"
                    if own else "") if by_epochs else "")
        at_limit = (f"no size_epsilon within its limit, {limit:g}, narrows a count of fewer than {per_unit / limit:g} "
                    f"units so far (at {limit:g} it is +- {count_margin(limit)})")
        if dp.size_epsilon < limit:
            advice = (f"To narrow it to +- n / 4, set size_epsilon = {per_unit} / n, n a study size you may publish "
                      f"(the protocol's), not this count nor the data; it adds to each DP-SGD run's eps")
            if dp.released_count < per_unit / limit:    # the count is DP already: reading it is post-processing
                advice += f". But {at_limit}: for so few, set size_epsilon {limit:g}" + (
                    f" and {steps}" if steps else "")
        else:   # rough at the limit is below 2 count_margin(limit) units, fewer than per_unit / limit
            advice = f"size_epsilon is at its limit: {at_limit}; " + (f"set {steps}, or " if steps else "") + (
                "train on more units")
        _log.warning("the DP count of the training %s, %d, is rough at size_epsilon %g: the exact count lies within "
                     "%d +- %d at %g %% confidence, so DP-SGD's q = B / N, expected batch and T by epochs may be off "
                     "by a factor of two or more (its eps stays exact). %s", dp.size_key, dp.released_count,
                     dp.size_epsilon, dp.released_count, count_margin(dp.size_epsilon), 100 * COUNT_CONFIDENCE,
                     advice)


def _dataset_summary(dataset: Dataset, sizes: Mapping[str, int] | None = None,
                     size_epsilon: float | None = None) -> DatasetSummary:
    """The dataset as study.yaml and the report show it: with DP-SGD runs (``sizes``: their DP counts), the training
    set's size only as those counts (`dpmed.released_size`); without, exactly (no add/remove eps to break)."""
    hidden = bool(sizes)
    return DatasetSummary(name=dataset.name, task=dataset.task.kind, label_names=dataset.task.label_names,
                          ordinal=dataset.task.ordinal, synthetic=dataset.synthetic,
                          description=dataset.description, n_train=None if hidden else len(dataset.train),
                          n_val=len(dataset.val), n_test=len(dataset.test),
                          n_train_patients=None if hidden else len(set(dataset.train.patient_ids.tolist())),
                          released_sizes=dict(sizes or {}), size_epsilon=size_epsilon if hidden else None,
                          patients_known=dataset.patients_known, image_shape=dataset.train.image_shape)


def prepare_study(study: Study, *, out: Path | str = "results") -> PreparedStudy:
    """Read the data and plan every run of ``study`` (calibration included) against the output folder
    ``out/<study.name>/``: which runs are finished, and the study's privacy as a whole, with ``privacy_budget``
    checked. Trains nothing, and writes only the DP counts of the training set that DP-SGD plans from, where this
    folder holds none yet (private; `dpmed.released_size`). Raises ConfigError if the folder holds runs made with
    other settings."""
    folder = StudyFolder(Path(out) / study.name)
    _refuse_shared_cache(study, folder)
    # first: a study.yaml another version wrote is refused before the data are read or a count is drawn
    before = (read_resolved(folder.root) if folder.finished_run_ids() and folder.resolved_study.is_file()
              else None)
    start = time.perf_counter()
    dataset = load_study_data(study)
    load_seconds = time.perf_counter() - start
    if dataset.source.get("summary"):   # before planning, whose refusals (a batch above the set) it may explain
        _log.info("data: %s", dataset.source["summary"])
    _tell_settings_the_data_turn_off(study, dataset)
    check_fit(study, dataset)      # before a count is drawn and written: a refusal here leaves the folder as it was
    fingerprint, training_set = data_fingerprints(dataset)
    context = plan_context(dataset)
    needed = needed_sizes(study, context)
    seed = study.seeds[0] if study.privacy_randomness == "reproducible" else None
    released, checked = _counts_released_before(folder, fingerprint, before)
    with writing_into(folder.root):      # `dpmed plan` too writes the DP counts: into private/, made owner-only
        if needed:
            folder.make_private()
        sizes = release_sizes(needed, epsilon=study.size_epsilon, path=folder.released_sizes,
                              fingerprint=training_set, older_keys=(fingerprint,), reproducible_seed=seed,
                              planned_before=released, data_checked=checked)
    plans = plan_study(study, dataset, sizes, context=context)
    _tell_largest_patient(plans, context)
    _tell_whole_batches(plans)
    _tell_ignored_caps(study, dataset)
    attributes = attributes_fingerprint(dataset)
    existing, elsewhere, stale = finished_runs(folder, plans, _dataset_summary(dataset), study, fingerprint,
                                               before, attributes)
    damaged = _damaged_outputs(folder, existing, stale, dataset)
    with writing_into(folder.root):      # a count taken back from the runs, now that they are accepted
        keep_sizes(sizes, epsilon=study.size_epsilon, path=folder.released_sizes,
                   fingerprint=training_set, reproducible_seed=seed)
    reproducible = "reproducible" in {study.privacy_randomness, *map(randomness_of, elsewhere)}
    privacy = study_privacy(plans, elsewhere, budget=study.privacy_budget, reproducible=reproducible)
    if study.privacy_budget is not None:
        _refuse_vacuous_budget_delta(study.privacy_budget.delta, plans)
        check_budget(study.privacy_budget, privacy)
    # last: a study refused above is told that alone; only where a run still to train plans from the count
    _tell_rough_counts([p for p in plans if p.run_id not in existing], {arm.name for arm in study.arms if arm.epochs})
    return PreparedStudy(study=study, folder=folder, dataset=dataset, plans=plans, finished=existing,
                         elsewhere=elsewhere, privacy=privacy, load_seconds=load_seconds, fingerprint=fingerprint,
                         attributes=attributes, sizes=sizes, reevaluate=(*stale, *damaged),
                         damaged=damaged)


def _damaged_outputs(folder: StudyFolder, finished: Mapping[str, RunRecord], stale: list[str],
                     dataset: Dataset) -> dict[str, str]:
    """Why each finished run whose evaluation files cannot be read (`unreadable_outputs`: its predictions.npz, CAMs
    or local-DP examples cut short or overwritten) is evaluated again from its model, by run id: they are functions
    of the released model and the test images, so nothing trains and nothing is spent (the report advised deleting
    the run and retraining it, a second release of its patients). Only where its model.pt loads into the model its
    record names; where it does not, the run is left as it is and a warning says it cannot be recovered but by
    retraining. Runs evaluated again anyway (``stale``) write their files afresh already."""
    damaged = {}
    for run_id, record in finished.items():
        run = folder.run(run_id)
        why = "" if run_id in stale else unreadable_outputs(run)
        if not why:
            continue
        if run.model_problem() is not None:
            _log.warning("%s: %s", run_id, run.recovery(why))
            continue
        try:
            released_model(record, run, dataset)
        except ConfigError as exc:
            _log.warning("%s: %s, so it cannot be evaluated again: %s", run_id, why, exc)
            continue
        damaged[run_id] = why
    return damaged


def _refuse_shared_cache(study: Study, folder: StudyFolder) -> None:
    """ConfigError for a data.cache_dir in the study folder outside private/: the cache holds the training images,
    decoded, and everything there but private/ is the folder's shareable part."""
    cache = study.data.cache_dir
    if cache is None:
        return
    cache, root, private = (Path(p).resolve() for p in (cache, folder.root, folder.private))
    if cache.is_relative_to(root) and not cache.is_relative_to(private):
        raise ConfigError(f"data.cache_dir {study.data.cache_dir} lies in the study folder {folder.root}, whose files "
                          "outside private/ may be shared, and the cache holds the training images, decoded: put it "
                          f"where the dataset itself lives, or under {folder.private}")


def _counts_released_before(folder: StudyFolder, fingerprint: str,
                            before: ResolvedStudy | None) -> tuple[dict[tuple[str, float], set[int]] | None, bool]:
    """`release_sizes`'s (planned_before, data_checked): the DP counts of the training set the folder has released
    already, by (key, eps), in secure mode (a reproducible count is the exact size plus public noise: never one to
    take back, `dpmed.released_size`): those its finished DP-SGD runs were planned from, as their records hold
    them, and those its study.yaml shows (written before the first run trains, so also a study stopped before any
    run finished has released its counts there). None where private/data_fingerprint names other data (the runs
    are then refused as made on other data); data_checked False where it is gone, so that the runs' data cannot
    be checked. ``before``: study.yaml as `prepare_study` read it already (None: read here, where it may exist)."""
    saved = folder.data_fingerprint
    same = saved.is_file() and saved.read_bytes().strip() == fingerprint.encode("ascii")
    if saved.is_file() and not same:
        return None, True
    counts: dict[tuple[str, float], set[int]] = {}
    for run_id in folder.finished_run_ids():
        record = read_record(folder.run(run_id).record)
        p = record.plan.privacy
        if isinstance(p, DpSgdPlan) and p.size_epsilon and randomness_of(record) == "secure":
            counts.setdefault((p.size_key, p.size_epsilon), set()).add(p.released_count)
    if before is None:   # read key by key: another version's study.yaml (refused later where finished runs need it)
        sizes, size_epsilon = counts_shown(folder.root)     # shows released counts all the same
    elif before.study.privacy_randomness == "secure" and before.dataset.size_epsilon:
        sizes, size_epsilon = before.dataset.released_sizes, before.dataset.size_epsilon
    else:
        sizes, size_epsilon = {}, 0.0
    for key, count in sizes.items():
        counts.setdefault((key, size_epsilon), set()).add(count)
    return counts, same


def _refuse_vacuous_budget_delta(delta: float, plans: list[RunPlan]) -> None:
    """The study's total eps is composed at the budget's delta: at delta >= 1/N a large composition reads small and
    passes any budget. N: the most units any DP-SGD run counts (the weakest requirement of the runs')."""
    units = {(p.privacy.n_units, p.privacy.unit) for p in plans if isinstance(p.privacy, DpSgdPlan)}
    if units:
        n, unit = max(units)
        refuse_vacuous_delta("privacy_budget.delta", delta, n, counted=f"the {n} training {unit}s the DP-SGD runs "
                             f"count", whole=f"publishing each {unit} whole")


def planned_card(plan: RunPlan, image_shape: tuple[int, ...], randomness: str) -> PrivacyCard:
    """The privacy card ``plan``'s run will carry if it runs as planned: its mechanism's card of the events the run
    will record (a local DP release of the training images, then T DP-SGD steps)."""
    info = mechanism_info(plan.mechanism)
    events: list[Event] = []
    transform = info.image_mechanism(plan.privacy)
    if transform is not None:
        event = transform.event(image_shape)
        if event is not None:
            events.append(event)
    dp = plan.privacy
    if isinstance(dp, DpSgdPlan):
        make = accounting.dp_sgd_event if dp.sampling == "poisson" else accounting.shuffled_event
        events.append(make(noise=dp.noise, noise_multiplier=dp.noise_multiplier, sample_rate=dp.sample_rate,
                           steps=dp.steps))
    return info.card(plan.privacy, Ledger(tuple(events)), randomness)


@dataclass(frozen=True)
class Checkpoints:
    """What the checkpoints of a study's runs still to train tell (`dpmed.states.checkpoints_told`): told, each
    run's (run id, state, what the next `dpmed run` does with it, (the step it continues from, the run's steps) or
    None), read once for both the time estimate and the lines that say it."""

    told: list[tuple[str, str, str, tuple[int, int] | None]]

    @property
    def continued(self) -> dict[str, tuple[int, int]]:
        """(the step it continues from, the run's steps as its checkpoint counts them) of each run that continues
        from its checkpoint: it trains the steps after it only (an audited run's own count, which the plan knows
        only in expectation)."""
        return {run_id: progress for run_id, _, _, progress in self.told if progress and progress[0]}

    @property
    def steps_left(self) -> dict[str, int]:
        """The steps each run that continues from its checkpoint trains after it: what `dpmed plan`'s estimate and
        `dpmed run`'s time left count for it (`dpmed.timing.Rates.run_seconds`), not all its steps."""
        return {run_id: of - done for run_id, (done, of) in self.continued.items()}


def checkpoints_of(prepared: PreparedStudy, weights_sha256: str | None = None) -> Checkpoints:
    """The checkpoints of ``prepared``'s runs still to train, told against the study as it will run them;
    ``weights_sha256``: its model.weights file's, where the command hashed it already (`checkpoints_told`)."""
    return Checkpoints(checkpoints_told(prepared.folder.root, prepared.resolved(), [p.run_id for p in prepared.todo],
                                        weights_sha256=weights_sha256))


def estimate_times(prepared: PreparedStudy, left: Mapping[str, int] | None = None) -> tuple[Rates, dict[str, float]]:
    """(the probe's rates, estimated seconds of each run still to train): a short timing probe on this machine
    now (`dpmed.timing`), scaled by each run's steps, or by ``left``'s: the steps a run that continues from its
    checkpoint trains after it, as the checkpoint counts them (`Checkpoints.steps_left`)."""
    rates = probe_rates(prepared.todo, prepared.dataset, evaluation=prepared.study.evaluation,
                        trainable=prepared.study.model.trainable_setting)
    train, left = prepared.dataset.train, left or {}
    n_train, n_patients = len(train), train.n_patients
    return rates, {p.run_id: rates.run_seconds(p, n_train, n_patients=n_patients, left=left.get(p.run_id)) or 0.0
                   for p in prepared.todo}


def run_study(study: Study | Path | str, *, out: Path | str = "results", progress: bool | None = None,
              executor: str = "local", workers: int = 1, address: str | None = None, fail_fast: bool = False,
              worker_setup: Callable[[], None] | None = None) -> StudyResult:
    """Run every unfinished run of ``study`` (a Study, or a study file's path) into ``out/<study.name>/`` and write
    results.csv and report.html. ``progress``: progress bars (default: where stderr is a terminal, or in a Jupyter
    kernel, where tqdm draws them as widgets; elsewhere a line after each of a run's first two steps and at each
    tenth of its steps, each hundredth from 1000 steps).

    The folder is held for the whole call (`claim_folder`): a second run_study on it, in another process or thread,
    raises FolderError naming this one. A run whose run.json exists is loaded, not retrained (under a changed
    ``evaluation`` section it is evaluated again from its model; the device, threads and physical batch never
    count); if it was made with other settings or data, this raises ConfigError naming them rather than mixing two
    studies in one table (use another ``out``, or delete that run's folder). A run that fails is recorded
    (private/runs/<id>/error.json) and the others go on, unless ``fail_fast``; the report covers the finished runs.
    ``executor``: "local" (``workers`` > 1: a process pool, each worker running ``worker_setup`` first) or "ray" (at
    ``address``). Before any training, every run the folder will hold is accounted together (`dpmed.budget`); with
    ``privacy_budget`` a study over it is refused. Ctrl-C (SIGINT) raises KeyboardInterrupt, and one that torch lost
    is raised again at the next step (`dpmed.interruption`); from the main thread only, where Python lets handlers
    be set.
    """
    if getattr(multiprocessing.current_process(), "_inheriting", False):   # multiprocessing's own test, in spawn
        raise ConfigError("run_study was called by a worker process as it started: it imports the script that "
                          "started the study, which calls run_study again; put that call under "
                          "`if __name__ == \"__main__\":`")
    study = check_study(study) if isinstance(study, Study) else load_study(study)
    for name, value in (("progress", progress), ("fail_fast", fail_fast)):    # "no" would be true
        if not isinstance(value, bool) and not (name == "progress" and value is None):
            raise ConfigError(f"{name} is True or False, not {type(value).__name__} {value!r:.60}")
    if not isinstance(out, (str, PathLike)):     # a Python caller's slip, said as a user's error
        raise ConfigError(f"out, the folder to write the study into, is a path (str or Path), not "
                          f"{type(out).__name__} {out!r:.60}")
    # before the data; 1, the default, is "not given" (so that Ray may be asked for), but True and 1.0 equal 1 too
    given = None if type(workers) is int and workers == 1 else workers
    check_executor_options(executor, workers=given, address=address)
    with interruptible((signal.SIGINT,)):
        return _run_study(study, out=out, progress=_bars_shown() if progress is None else progress,
                          executor=executor, workers=workers, address=address, fail_fast=fail_fast,
                          worker_setup=worker_setup)


def _tell_threats(tag: str, record: RunRecord, folder: RunFolder) -> None:
    """Log the run's audit and reconstruction attack results, where it has them, as it trained or was evaluated
    again (`dpmed.run.reevaluate`: the audit kept, the attack's interval at the study's confidence now): a run
    evaluated again told neither, so a rerun at another confidence showed the attack's new interval only in run.json
    and the report. Told from the main process, once per run."""
    if folder.audit.is_file():   # shown to the user, never written to a shareable file
        _tell_audit(tag, folder)
    if record.attack is not None:
        _tell_attack(tag, record.attack)


def _tell_audit(tag: str, folder: RunFolder) -> None:
    """Log the statement of the run's private audit record (`read_audit`), or, where its file cannot be read or is
    not such a record (damaged, truncated, foreign), one warning saying so: the run has finished and its record is
    written, so a file the study only shows never stops it or prints a traceback."""
    audit = read_audit(folder.audit)
    if isinstance(audit, AuditRecord):
        _log.info("%s: audit (private: %s): %s", tag, folder.audit, audit.statement)
    elif audit is not None:
        scores = folder.audit_scores
        kept = f"; {scores} keeps each canary's score and inclusion bit" if scores.is_file() else ""
        _log.warning("%s: private audit record %s, so its result is not shown%s", tag, audit, kept)


def _tell_attack(tag: str, attack: AttackRecord) -> None:
    """Log the imprint attack's success rate with its interval and the chance rate, as run.json and the report's
    threat section give them: they were told only there, while an audit's result is told as its run ends. Nothing
    new leaves the run: the rate is of held-out test images (`dpmed.attack.ATTACKED`), already in run.json."""
    verdict = "; not above chance" if attack.rate_low <= attack.chance_rate else ""
    _log.info("%s: reconstruction attack success %s %s (%s CI; %d of %d held-out test images), chance %s%s", tag,
              format(attack.rate, ".1%"), percent_interval_text(attack.rate_low, attack.rate_high),
              confidence_text(attack.ci_level), attack.n_success, attack.n_trials, format(attack.chance_rate, ".1%"),
              verdict)


def _bars_shown() -> bool:
    isatty = getattr(sys.stderr, "isatty", None)     # stderr is None under pythonw
    return bool(isatty and isatty()) or "ipykernel" in sys.modules


def _run_study(study: Study, *, out: Path | str, progress: bool, executor: str, workers: int, address: str | None,
               fail_fast: bool, worker_setup: Callable[[], None] | None) -> StudyResult:
    start = time.perf_counter()
    check_machine(study)
    root = Path(out) / study.name
    with claim_folder(root), writing_into(root):
        prepared = prepare_study(study, out=out)
        folder, dataset, plans = prepared.folder, prepared.dataset, prepared.plans
        _log.info("data: %s, %d/%d/%d train/val/test images of shape %s, task %s (%.0f s to prepare)", dataset.name,
                  len(dataset.train), len(dataset.val), len(dataset.test), shape_text(dataset.train.image_shape),
                  dataset.task.describe(), prepared.load_seconds)
        _log.info("study privacy: %s", prepared.privacy.statement)
        # before study.yaml is written: weights that do not fit, a public set that overlaps or finished runs that
        # started otherwise refuse the study, and the folder's study.yaml must go on describing its runs
        arms_start = prepare_start(study, dataset, folder, progress=progress)
        folder.runs.mkdir(parents=True, exist_ok=True)
        withdraw_leftovers(folder)
        withdraw_public_timing(folder, [*prepared.finished.values(), *prepared.elsewhere])
        resolved = prepared.resolved()
        write_text_atomic(folder.resolved_study, yaml.safe_dump(resolved.model_dump(mode="json"), sort_keys=False))
        write_text_atomic(folder.data_fingerprint, prepared.fingerprint, owner_only=True)
        write_text_atomic(folder.attributes_fingerprint, prepared.attributes, owner_only=True)
        context = RunContext(dataset=dataset, evaluation=study.evaluation,
                             progress=progress and executor == "local" and workers == 1,
                             privacy_randomness=study.privacy_randomness,
                             start=arms_start, study=resolved.study)
        order = {plan.run_id: i for i, plan in enumerate(plans, start=1)}
        outcomes: dict[str, RunRecord | RunFailure] = dict(prepared.finished)
        # every run evaluated again before any is written: a stop midway leaves each as it was
        planned = {plan.run_id: plan for plan in plans}
        again = [reevaluate(prepared.finished[run_id], planned[run_id], context, folder.run(run_id))
                 for run_id in sorted(prepared.reevaluate, key=order.__getitem__)]
        evaluated = {r.record.run_id: r.write() for r in again}
        outcomes.update(evaluated)
        for run_id in sorted(prepared.finished, key=order.__getitem__):
            if run_id in prepared.damaged:
                _log.info("[%d/%d] %s: finished earlier, %s: evaluated again from its model, not retrained: no privacy "
                          "spent", order[run_id], len(plans), run_id, prepared.damaged[run_id])
            elif run_id in prepared.reevaluate:
                why = evaluated_by(prepared.finished[run_id].evaluation_version)
                _log.info("[%d/%d] %s: finished earlier, %sevaluated again under this study's evaluation settings "
                          "from its model (not retrained: no privacy spent)", order[run_id], len(plans), run_id,
                          f"{why}: " if why else "")
                _tell_threats(f"[{order[run_id]}/{len(plans)}] {run_id}", evaluated[run_id], folder.run(run_id))
            else:
                _log.info("[%d/%d] %s: finished earlier, skipped", order[run_id], len(plans), run_id)
        todo = [RunTask(plan, folder.run(plan.run_id)) for plan in prepared.todo]
        # a checkpoint that status and plan tell as continuing if the training data and a pretrained start are
        # unchanged, which run alone can check: one that fails it trains all its steps; the weights file as
        # prepare_start hashed it
        told = checkpoints_of(prepared, None if arms_start is None else arms_start.given_sha256)
        tracker = StudyProgress(total=len(plans), earlier=len(prepared.finished), todo=prepared.todo,
                                n_train=len(dataset.train), workers=workers if executor == "local" else len(todo) or 1,
                                n_patients=dataset.train.n_patients,
                                steps_left={run_id: left for run_id, left in told.steps_left.items()
                                            if continues(planned[run_id], context, folder.run(run_id))})

        def on_outcome(task: RunTask, outcome: RunRecord | RunFailure) -> None:
            outcomes[task.plan.run_id] = outcome
            tag = f"[{order[task.plan.run_id]}/{len(plans)}] {task.plan.run_id}"
            if isinstance(outcome, RunFailure):
                _log.warning("%s: FAILED: %s (%s)", tag, outcome.error, outcome.traceback_note)
            else:
                auroc = outcome.estimate("test_auroc").value
                _log.info("%s: test AUROC %s; %s", tag, "undefined" if auroc is None else format(auroc, ".3f"),
                          outcome.privacy.statement)
                _tell_threats(tag, outcome, task.folder)
                # now, not only when the command ends: a kill -9 skips that, and a finished run's files would keep
                # wall times telling how long it trained (`StudyFolder.settle_times`); the end retries what fails
                with contextlib.suppress(OSError):
                    folder.settle_times()
            _log.info("%s", tracker.line(task.plan.run_id, outcome, read_timing(task.folder.timing)))

        if todo:
            started = min(workers, len(todo))    # a process pool starts no more workers than it has runs
            _log.info("training %s with executor %r%s", count_text(len(todo), "run"), executor,
                      "" if workers == 1 else f", {count_text(started, 'worker')}" + (
                          f" (one per run; {workers} asked for)" if started < workers else ""))
            make_executor(executor, workers=workers, address=address, worker_setup=worker_setup).map(
                todo, context, on_outcome, fail_fast=fail_fast)
        records = [outcome for p in plans if isinstance(outcome := outcomes.get(p.run_id), RunRecord)]
        failures = [outcome for p in plans if isinstance(outcome := outcomes.get(p.run_id), RunFailure)]
        if records:
            write_outputs(folder, resolved, records)
    return StudyResult(study=study, out_dir=folder.root, records=records, resumed=sorted(prepared.finished),
                       seconds=time.perf_counter() - start, failures=failures,
                       pending=[p.run_id for p in plans if p.run_id not in outcomes])
