"""Run a whole study: load the data once, plan every run, skip finished ones, execute the rest, collect, report.

This is the one module that knows every stage. Planning (calibration included) happens here, before any training, so
that the resolved study (every run's plan) and the study's privacy as a whole are on disk before the first step is
taken. It also owns what is done with a study folder afterwards: its status, and rebuilding its outputs.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from dpmed.audit import max_canaries
from dpmed.budget import check_budget, study_privacy
from dpmed.comparisons import Comparisons, compare_runs
from dpmed.config import RunPlan, Study, plan_runs
from dpmed.data import Dataset, images_per_patient, read_dataset
from dpmed.errors import ConfigError
from dpmed.evaluation import load_predictions
from dpmed.executors import RunFailure, RunTask, make_executor
from dpmed.folders import StudyFolder, write_json_atomic, write_text_atomic
from dpmed.mechanisms import PlanContext
from dpmed.records import DatasetSummary, ResolvedStudy, RunRecord, read_record
from dpmed.reporting import write_private_report, write_report, write_results_table
from dpmed.run import RunContext

__all__ = ["StudyResult", "run_study", "plan_study", "load_study_data", "write_outputs", "rebuild_outputs",
           "run_states"]


@dataclass(frozen=True)
class StudyResult:
    """records: one record per finished run, in study order. resumed: run ids found finished and not retrained.
    failures: runs that raised this time (their error.json holds the traceback)."""

    study: Study
    out_dir: Path
    records: list[RunRecord]
    resumed: list[str]
    seconds: float
    failures: list[RunFailure] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)   # not run: a fail-fast stop came first

    @property
    def report_path(self) -> Path:
        return StudyFolder(self.out_dir).report

    @property
    def results_path(self) -> Path:
        return StudyFolder(self.out_dir).results


def load_study_data(study: Study) -> Dataset:
    """The study's dataset, preprocessed and split as the study asks (DataError names the file or row on failure)."""
    return read_dataset(study.data.to_request())


def plan_study(study: Study, dataset: Dataset) -> list[RunPlan]:
    """Every run of ``study`` on ``dataset``, planned (METHODS.md s.1-2): DP-SGD's q, T, delta and calibrated sigma
    over its unit, local DP noise scales. Audits are checked against the training patients."""
    context = PlanContext(images_per_patient=images_per_patient(dataset.train.patient_ids),
                          image_shape=dataset.train.image_shape, patients_known=dataset.patients_known)
    plans = plan_runs(study, context)
    limit = max_canaries(dataset.train)
    for plan in plans:
        if plan.audit is not None and plan.audit.canaries > limit:
            raise ConfigError(
                f"arm {plan.arm!r}: audit.canaries = {plan.audit.canaries} needs more training patients than the "
                f"{limit + 1} this dataset has (one canary per patient, and some patients left to train on); "
                f"lower audit.canaries below {limit + 1} or use more images")
    return plans


def _dataset_summary(dataset: Dataset) -> DatasetSummary:
    return DatasetSummary(name=dataset.name, task=dataset.task.kind, synthetic=dataset.synthetic,
                          description=dataset.description, n_train=len(dataset.train), n_val=len(dataset.val),
                          n_test=len(dataset.test), n_train_patients=len(set(dataset.train.patient_ids.tolist())),
                          patients_known=dataset.patients_known, image_shape=dataset.train.image_shape)


def _finished(folder: StudyFolder, plans: list[RunPlan]) -> tuple[dict[str, RunRecord], list[RunRecord]]:
    """(finished runs the study lists, by id; finished runs in the folder it no longer lists: released all the same).
    A listed run made with other settings is refused rather than mixed into one table."""
    listed = {p.run_id: p for p in plans}
    mine, elsewhere = {}, []
    for run_id in folder.finished_run_ids():
        record = read_record(folder.run(run_id).record)
        if run_id not in listed:
            elsewhere.append(record)
        elif record.plan.settings() != listed[run_id].settings():
            raise ConfigError(
                f"{folder.run(run_id).record} was made with other settings than this study now asks for run "
                f"{run_id}; use another --out, or delete {folder.run(run_id).public} to retrain it")
        else:
            mine[run_id] = record
    return mine, elsewhere


def _comparisons(folder: StudyFolder, resolved: ResolvedStudy, records: list[RunRecord]) -> Comparisons:
    """Paired comparisons over the finished runs' saved predictions, with the study's bootstrap settings (the
    redraws of every run's own intervals)."""
    predictions = {r.run_id: load_predictions(folder.run(r.run_id).predictions) for r in records
                   if folder.run(r.run_id).predictions.is_file()}
    labels = next(([k[len("test_auroc["):-1] for k in r.metrics if k.startswith("test_auroc[")] for r in records
                   if any(k.startswith("test_auroc[") for k in r.metrics)), [])
    ev = resolved.study.evaluation
    return compare_runs(records, predictions, kind=resolved.dataset.task, label_names=labels,
                        n_resamples=ev.bootstrap_resamples, seed=ev.bootstrap_seed, confidence=ev.confidence)


def _private_items(folder: StudyFolder, records: list[RunRecord]) -> dict[str, dict[str, Any]]:
    """Per run, what its private folder holds for the private report: audit results and training metrics."""
    items = {}
    for r in records:
        run = folder.run(r.run_id)
        item = {}
        if run.audit.is_file():
            item["audit"] = json.loads(run.audit.read_text(encoding="utf-8"))
        if run.statistics.is_file():
            stats = json.loads(run.statistics.read_text(encoding="utf-8"))
            if stats.get("training_metrics"):
                item["statistics"] = stats
        if item:
            items[r.run_id] = item
    return items


def write_outputs(folder: StudyFolder, resolved: ResolvedStudy, records: list[RunRecord]) -> None:
    """results.csv, comparisons.json and report.html from the finished runs, and private/report.html where runs
    hold private statistics (audit results, training-set metrics). Comparisons are computed before rendering."""
    comparisons = _comparisons(folder, resolved, records)
    write_json_atomic(folder.comparisons, comparisons.model_dump(mode="json"))
    write_results_table(records, folder.results)
    write_report(resolved, records, comparisons, folder)
    private = _private_items(folder, records)
    if private:
        folder.private.mkdir(parents=True, exist_ok=True)
        write_private_report(resolved, private, folder.private_report)


def _read_resolved(folder: StudyFolder) -> ResolvedStudy:
    if not folder.resolved_study.is_file():
        raise ConfigError(f"{folder.root} holds no study.yaml; pass the folder `dpmed run` wrote (results/<study>)")
    # through JSON: the plans' tuples are lists in YAML, which only JSON validation reads as tuples
    data = yaml.safe_load(folder.resolved_study.read_text(encoding="utf-8"))
    return ResolvedStudy.model_validate_json(json.dumps(data))


def rebuild_outputs(study_dir: Path) -> tuple[ResolvedStudy, list[RunRecord]]:
    """Rewrite results.csv and the reports of the study folder ``study_dir`` from its finished runs (``dpmed
    report``); returns the resolved study and the records."""
    folder = StudyFolder(Path(study_dir))
    resolved = _read_resolved(folder)
    records = [read_record(folder.run(p.run_id).record) for p in resolved.runs if folder.run(p.run_id).is_finished]
    if not records:
        raise ConfigError(f"{folder.root} has no finished run (no runs/*/run.json); run the study first")
    write_outputs(folder, resolved, records)
    return resolved, records


def run_states(study_dir: Path) -> list[tuple[str, str, str]]:
    """(run id, state, detail) of every run the study folder lists: finished, failed (with the error), interrupted
    (a private checkpoint waits) or pending."""
    folder = StudyFolder(Path(study_dir))
    states = []
    for plan in _read_resolved(folder).runs:
        files = folder.run(plan.run_id)
        if files.is_finished:
            states.append((plan.run_id, "finished", ""))
        elif files.error.is_file():
            states.append((plan.run_id, "failed", json.loads(files.error.read_text(encoding="utf-8"))["error"]))
        elif files.checkpoint.is_file():
            states.append((plan.run_id, "interrupted", "continues from its checkpoint"))
        else:
            states.append((plan.run_id, "pending", ""))
    return states


def run_study(study: Study, *, out: Path | str = "results", progress: bool = True,
              log: Callable[[str], None] = lambda _msg: None, executor: str = "local", workers: int = 1,
              address: str | None = None, fail_fast: bool = False) -> StudyResult:
    """Run every unfinished run of ``study`` into ``out/<study.name>/`` and write results.csv and report.html.

    A run whose run.json exists is loaded, not retrained; if it was made with different settings, this raises
    ConfigError rather than mixing two studies in one table (use another --out, or delete that run's folder).
    A run that fails is recorded (runs/<id>/error.json) and the others go on, unless ``fail_fast``; the report
    covers the finished runs. ``executor``: "local" (``workers`` > 1: a process pool) or "ray" (at ``address``).
    Before any training, every run the folder will hold is accounted together (`dpmed.budget`); with
    ``privacy_budget`` a study over it is refused.
    """
    start = time.perf_counter()
    folder = StudyFolder(Path(out) / study.name)
    dataset = load_study_data(study)
    log(f"data: {dataset.name}, {len(dataset.train)}/{len(dataset.val)}/{len(dataset.test)} train/val/test images "
        f"of shape {dataset.train.image_shape}, task {dataset.task.kind}")
    if dataset.source.get("summary"):
        log(f"data: {dataset.source['summary']}")
    plans = plan_study(study, dataset)
    existing, elsewhere = _finished(folder, plans)
    privacy = study_privacy(plans, elsewhere, budget=study.privacy_budget,
                            reproducible=study.privacy_randomness == "reproducible")
    if study.privacy_budget is not None:
        check_budget(study.privacy_budget, privacy)
    log(f"study privacy: {privacy.statement}")
    folder.runs.mkdir(parents=True, exist_ok=True)
    resolved = ResolvedStudy(study=study, dataset=_dataset_summary(dataset), study_privacy=privacy, runs=plans)
    write_text_atomic(folder.resolved_study, yaml.safe_dump(resolved.model_dump(mode="json"), sort_keys=False))
    context = RunContext(dataset=dataset, model=study.model.name, evaluation=study.evaluation,
                         progress=progress and executor == "local" and workers == 1,
                         privacy_randomness=study.privacy_randomness)
    order = {plan.run_id: i for i, plan in enumerate(plans, start=1)}
    for plan in plans:
        if plan.run_id in existing:
            log(f"[{order[plan.run_id]}/{len(plans)}] {plan.run_id}: finished earlier, skipped")
    todo = [RunTask(plan, folder.run(plan.run_id)) for plan in plans if plan.run_id not in existing]
    outcomes: dict[str, RunRecord | RunFailure] = dict(existing)

    def on_outcome(task: RunTask, outcome: RunRecord | RunFailure) -> None:
        outcomes[task.plan.run_id] = outcome
        tag = f"[{order[task.plan.run_id]}/{len(plans)}] {task.plan.run_id}"
        if isinstance(outcome, RunFailure):
            log(f"{tag}: FAILED: {outcome.error} (traceback in {outcome.error_file})")
            return
        auroc = outcome.estimate("test_auroc").value
        log(f"{tag}: test AUROC {'undefined' if auroc is None else format(auroc, '.3f')}; "
            f"{outcome.privacy.statement}")
        if task.folder.audit.is_file():   # shown to the user, never written to a shareable file
            audit = json.loads(task.folder.audit.read_text(encoding="utf-8"))
            log(f"{tag}: audit (private: {task.folder.audit}): {audit['statement']}")

    if todo:
        log(f"training {len(todo)} run(s) with executor {executor!r}" + (f", {workers} workers" if workers > 1 else ""))
        make_executor(executor, workers=workers, address=address).map(todo, context, on_outcome,
                                                                       fail_fast=fail_fast)
    records = [outcomes[p.run_id] for p in plans if isinstance(outcomes.get(p.run_id), RunRecord)]
    failures = [outcomes[p.run_id] for p in plans if isinstance(outcomes.get(p.run_id), RunFailure)]
    if records:
        write_outputs(folder, resolved, records)
    return StudyResult(study=study, out_dir=folder.root, records=records, resumed=sorted(existing),
                       seconds=time.perf_counter() - start, failures=failures,
                       pending=[p.run_id for p in plans if p.run_id not in outcomes])
