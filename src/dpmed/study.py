"""Run a whole study: load the data once, resolve every run, skip finished ones, execute the rest, collect.

This is the one module that knows every stage. Calibration happens here, before any training, so that the resolved
study (with each run's noise_multiplier, sample_rate, steps and delta) is on disk before the first step is taken.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import yaml

from dpmed import accounting
from dpmed.budget import check_budget, study_privacy
from dpmed.config import RunSpec, Study, expand_runs, study_to_dict
from dpmed.data import Dataset, SplitPlan, images_per_patient, load_dataset
from dpmed.data.canaries import max_canaries
from dpmed.errors import ConfigError, PrivacyError
from dpmed.executors import RunFailure, RunTask, make_executor
from dpmed.folders import StudyFolder
from dpmed.models import MODELS
from dpmed.reporting import write_private_report, write_report, write_results_table
from dpmed.run import RunContext

__all__ = ["StudyResult", "run_study", "resolve_runs", "load_study_data", "write_outputs", "rebuild_outputs",
           "run_states"]


@dataclass(frozen=True)
class StudyResult:
    """records: one run.json payload per finished run, in study order. resumed: run ids found finished and not
    retrained. failures: runs that raised this time (their error.json holds the traceback)."""

    study: Study
    out_dir: Path
    records: list[dict[str, Any]]
    resumed: list[str]
    seconds: float
    failures: list[RunFailure] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)   # not run: a fail-fast stop came first

    @property
    def report_path(self) -> Path:
        return self.out_dir / "report.html"

    @property
    def results_path(self) -> Path:
        return self.out_dir / "results.csv"


def load_study_data(study: Study) -> Dataset:
    """The study's dataset, preprocessed and split as the study asks (DataError names the file or row on failure)."""
    d = study.data
    pre, s = d.preprocessing, d.split
    return load_dataset(source=d.source, path=None if d.path is None else str(d.path), image_size=d.image_size,
                        channels=d.channels, seed=d.seed, n_images=d.n_images, minmax=pre.minmax,
                        equalize=pre.equalize, normalize=None if pre.normalize is None else (
                            tuple(pre.normalize.mean), tuple(pre.normalize.std)),
                        labels=None if d.labels is None else tuple(d.labels),
                        columns=None if d.columns is None else d.columns.model_dump(exclude_none=True),
                        task=d.task, uncertain=d.uncertain, skip_invalid=d.skip_invalid, cache_dir=d.cache_dir,
                        split=None if s is None else SplitPlan(val_fraction=s.val_fraction,
                                                               test_fraction=s.test_fraction, seed=s.seed,
                                                               official=s.official,
                                                               shared_patients=s.shared_patients))


def _unit_counts(train_patients: np.ndarray, cap: int | None) -> np.ndarray:
    """Images each training patient contributes (after ``max_images_per_patient``), int64 [P]."""
    counts = images_per_patient(train_patients)
    return counts if cap is None else np.minimum(counts, cap)


def _resolve_dp_sgd(spec: RunSpec, train_patients: np.ndarray, patients_known: bool, cache: dict) -> dict[str, Any]:
    """q = B / N and T = epochs * round(N / B) over the N sampling units (patients or images); delta; the certifying
    accountant; sigma calibrated (or given); and, where the image is the unit but patients have several images,
    what the run's eps implies for the patient with the most (`accounting.group_privacy`)."""
    p = spec.params
    counts = _unit_counts(train_patients, p.get("max_images_per_patient"))
    unit = p["privacy_unit"]
    n_units = int(len(counts) if unit == "patient" else counts.sum())
    try:
        q, steps = accounting.dp_sgd_schedule(n_units, batch_size=spec.training.batch_size,
                                              epochs=spec.training.epochs)
        delta = p["delta"] or accounting.default_delta(n_units)
        accountant, note = accounting.effective_accountant(p["accountant"], target_epsilon=p.get("target_epsilon"),
                                                           noise=p["noise"])
    except ValueError as exc:
        raise ConfigError(f"arm {spec.arm!r}: {exc}" + (" (batch_size counts patients: privacy_unit is patient)"
                                                        if unit == "patient" else "")) from None
    derived = {"sample_rate": q, "steps": steps, "delta": delta, "n_train": int(counts.sum()), "unit": unit,
               "n_units": n_units, "patients_known": patients_known, "accountant": accountant}
    if note:
        derived["accountant_note"] = note
    if p.get("noise_multiplier") is not None:
        derived.update(noise_multiplier=p["noise_multiplier"], noise_given=True)
    else:
        key = (p["target_epsilon"], delta, q, steps, accountant, p["noise"])
        if key not in cache:
            try:
                cache[key] = accounting.noise_multiplier_for(target_epsilon=key[0], delta=delta, sample_rate=q,
                                                             steps=steps, accountant=accountant, noise=p["noise"])
            except ValueError as exc:
                raise PrivacyError(f"arm {spec.arm!r}, target_epsilon {key[0]:g}: {exc}") from None
        derived.update(noise_multiplier=cache[key], noise_given=False)
    k = int(counts.max())
    if unit == "image" and k > 1:
        derived["patient_guarantee"] = _patient_guarantee(derived, p, k, int((counts > 1).sum()), cache)
    return derived


def _patient_guarantee(d: dict[str, Any], p: Mapping[str, Any], k: int, n_multi: int, cache: dict) -> dict[str, Any]:
    """Group privacy of an image-level run for its patient with the most images (k), cached per setting."""
    key = ("group", d["noise_multiplier"], d["sample_rate"], d["steps"], d["delta"], d["accountant"], p["noise"], k)
    if key not in cache:
        eps = accounting.dp_sgd_epsilon(noise_multiplier=d["noise_multiplier"], sample_rate=d["sample_rate"],
                                        steps=d["steps"], delta=d["delta"], accountant=d["accountant"],
                                        noise=p["noise"])
        tight = p["noise"] == "gaussian" and p["sampling"] == "poisson"
        group = accounting.group_privacy(epsilon=eps, delta=d["delta"], k=k,
                                         **(dict(noise_multiplier=d["noise_multiplier"], sample_rate=d["sample_rate"],
                                                 steps=d["steps"]) if tight else {}))
        cache[key] = {"k": k, "formula_epsilon": group.formula_epsilon, "formula_delta": group.formula_delta,
                      "tight_epsilon": group.tight_epsilon}
    return {**cache[key], "n_multi": n_multi}


def _resolve_local(spec: RunSpec, n_train: int, dimension: int) -> dict[str, Any]:
    """The noise scale of a local DP arm, solved from target_epsilon_image where the arm gave a budget."""
    p = spec.params
    if spec.mechanism == "pixel_laplace":
        scale = p.get("scale") or accounting.laplace_scale_for_image(
            epsilon_image=p["target_epsilon_image"], dimension=dimension, value_range=1.0)
        return {"scale": scale, "dimension": dimension}
    if spec.mechanism == "pixel_gaussian":
        delta = p["delta"] or accounting.default_delta(n_train)
        std = p.get("std") or accounting.gaussian_std_for_image(
            epsilon_image=p["target_epsilon_image"], delta=delta, dimension=dimension, value_range=1.0)
        return {"std": std, "delta": delta, "dimension": dimension}
    return {}


def resolve_runs(study: Study, train_patients: np.ndarray, image_shape: tuple[int, ...], *,
                 patients_known: bool = True) -> list[RunSpec]:
    """Expand the study and compute every derived privacy value (METHODS.md s.1-2) before any training: DP-SGD's
    q, T, delta (default min(1e-5, 1/(10 N))) and sigma calibrated so that eps <= target; local DP noise scales.
    ``train_patients``: the patient id of every training image (their count is N_train; their distinct values the
    patients that DP-SGD's default unit counts)."""
    if study.model.name not in MODELS:
        raise ConfigError(f"model.name: unknown model {study.model.name!r}; known: {', '.join(sorted(MODELS))}")
    train_patients = np.asarray(train_patients).astype(str)
    dimension = int(math.prod(image_shape))
    resolved, cache = [], {}
    for spec in expand_runs(study):
        derived = (_resolve_dp_sgd(spec, train_patients, patients_known, cache) if spec.mechanism == "dp_sgd"
                   else _resolve_local(spec, len(train_patients), dimension))
        resolved.append(replace(spec, derived=derived))
    return resolved


def _check_audits(specs: list[RunSpec], limit: int) -> None:
    """An audit takes its canaries' sources from distinct training patients and must leave some to train on
    (``limit``: :func:`dpmed.data.canaries.max_canaries`): check that before any run starts, not in every audited
    run after the others have trained."""
    for spec in specs:
        audit = spec.params.get("audit")
        if audit is not None and audit["canaries"] > limit:
            raise ConfigError(
                f"arm {spec.arm!r}: audit.canaries = {audit['canaries']} needs more training patients than the "
                f"{limit + 1} this dataset has (one canary per patient, and some patients left to train on); "
                f"lower audit.canaries below {limit + 1} or use more images")


def _same_spec(record: dict[str, Any], spec: RunSpec) -> bool:
    return json.loads(json.dumps(record.get("spec"))) == json.loads(json.dumps(spec.to_dict()))


def _finished_elsewhere(folder: StudyFolder, specs: list[RunSpec]) -> list[dict[str, Any]]:
    """run.json of finished runs in the folder that the study file no longer lists: released all the same."""
    listed = {s.run_id for s in specs}
    return [json.loads(folder.run(run_id).record.read_text(encoding="utf-8"))
            for run_id in folder.finished_run_ids() if run_id not in listed]


def write_outputs(folder: StudyFolder, resolved: Mapping[str, Any], records: list[dict[str, Any]]) -> None:
    """results.csv and report.html from the finished runs, and private/report.html where runs hold private
    statistics (audit results, training-set metrics)."""
    write_results_table(records, folder.results)
    write_report(dict(resolved), records, folder.report)
    private = _private_items(folder, records)
    if private:
        folder.private.mkdir(parents=True, exist_ok=True)
        write_private_report(dict(resolved), private, folder.private_report)


def _read_resolved(folder: StudyFolder) -> dict[str, Any]:
    if not folder.resolved_study.is_file():
        raise ConfigError(f"{folder.root} holds no study.yaml; pass the folder `dpmed run` wrote (results/<study>)")
    return yaml.safe_load(folder.resolved_study.read_text(encoding="utf-8"))


def rebuild_outputs(study_dir: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Rewrite results.csv and the reports of the study folder ``study_dir`` from its finished runs (``dpmed
    report``); returns the resolved study and the records."""
    folder = StudyFolder(Path(study_dir))
    resolved = _read_resolved(folder)
    records = [json.loads(folder.run(run["run_id"]).record.read_text(encoding="utf-8")) for run in resolved["runs"]
               if folder.run(run["run_id"]).is_finished]
    if not records:
        raise ConfigError(f"{folder.root} has no finished run (no runs/*/run.json); run the study first")
    write_outputs(folder, resolved, records)
    return resolved, records


def run_states(study_dir: Path) -> list[tuple[str, str, str]]:
    """(run id, state, detail) of every run the study folder lists: finished, failed (with the error), interrupted
    (a private checkpoint waits) or pending."""
    folder = StudyFolder(Path(study_dir))
    states = []
    for run in _read_resolved(folder)["runs"]:
        files = folder.run(run["run_id"])
        if files.is_finished:
            states.append((run["run_id"], "finished", ""))
        elif files.error.is_file():
            states.append((run["run_id"], "failed", json.loads(files.error.read_text(encoding="utf-8"))["error"]))
        elif files.checkpoint.is_file():
            states.append((run["run_id"], "interrupted", "continues from its checkpoint"))
        else:
            states.append((run["run_id"], "pending", ""))
    return states


def _private_items(folder: StudyFolder, records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per run, what its private folder holds for the private report: audit results and training metrics."""
    items = {}
    for r in records:
        run = folder.run(r["run_id"])
        item = {}
        if run.audit.is_file():
            item["audit"] = json.loads(run.audit.read_text(encoding="utf-8"))
        if run.statistics.is_file():
            stats = json.loads(run.statistics.read_text(encoding="utf-8"))
            if stats.get("training_metrics"):
                item["statistics"] = stats
        if item:
            items[r["run_id"]] = item
    return items


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
    specs = resolve_runs(study, dataset.train.patient_ids, dataset.train.image_shape,
                         patients_known=dataset.patients_known)
    _check_audits(specs, max_canaries(dataset.train))
    existing = {}
    for spec in specs:
        path = folder.run(spec.run_id).record
        if path.exists():
            record = json.loads(path.read_text(encoding="utf-8"))
            if not _same_spec(record, spec):
                raise ConfigError(
                    f"{path} was made with other settings than this study now asks for run {spec.run_id}; "
                    f"use another --out, or delete {path.parent} to retrain it")
            existing[spec.run_id] = record
    privacy = study_privacy(specs, _finished_elsewhere(folder, specs), budget=study.privacy_budget,
                            reproducible=study.privacy_randomness == "reproducible")
    if study.privacy_budget is not None:
        check_budget(study.privacy_budget, privacy)
    log(f"study privacy: {privacy.statement}")
    folder.runs.mkdir(parents=True, exist_ok=True)
    resolved = {"study": study_to_dict(study), "dataset": {"name": dataset.name, "task": dataset.task.kind,
                "synthetic": dataset.synthetic, "description": dataset.description,
                "n_train": len(dataset.train), "n_val": len(dataset.val), "n_test": len(dataset.test),
                "n_train_patients": len(set(dataset.train.patient_ids.tolist())),
                "patients_known": dataset.patients_known, "image_shape": list(dataset.train.image_shape)},
                "study_privacy": privacy.to_dict(), "runs": [s.to_dict() for s in specs]}
    folder.resolved_study.write_text(yaml.safe_dump(resolved, sort_keys=False), encoding="utf-8")
    context = RunContext(dataset=dataset, model=study.model.name, evaluation=study.evaluation,
                         progress=progress and executor == "local" and workers == 1,
                         privacy_randomness=study.privacy_randomness)
    order = {spec.run_id: i for i, spec in enumerate(specs, start=1)}
    for spec in specs:
        if spec.run_id in existing:
            log(f"[{order[spec.run_id]}/{len(specs)}] {spec.run_id}: finished earlier, skipped")
    todo = [RunTask(spec, folder.run(spec.run_id)) for spec in specs if spec.run_id not in existing]
    outcomes: dict[str, dict | RunFailure] = dict(existing)

    def on_outcome(task: RunTask, outcome: dict | RunFailure) -> None:
        outcomes[task.spec.run_id] = outcome
        tag = f"[{order[task.spec.run_id]}/{len(specs)}] {task.spec.run_id}"
        if isinstance(outcome, RunFailure):
            log(f"{tag}: FAILED: {outcome.error} (traceback in {outcome.error_file})")
            return
        auroc = outcome["metrics"].get("test_auroc")
        log(f"{tag}: test AUROC {'undefined' if auroc is None else format(auroc, '.3f')}; "
            f"{outcome['privacy']['statement']}")
        if task.folder.audit.is_file():   # shown to the user, never written to a shareable file
            audit = json.loads(task.folder.audit.read_text(encoding="utf-8"))
            log(f"{tag}: audit (private: {task.folder.audit}): {audit['statement']}")

    if todo:
        log(f"training {len(todo)} run(s) with executor {executor!r}" + (f", {workers} workers" if workers > 1 else ""))
        make_executor(executor, workers=workers, address=address).map(todo, context, on_outcome,
                                                                       fail_fast=fail_fast)
    records = [outcomes[s.run_id] for s in specs if isinstance(outcomes.get(s.run_id), dict)]
    failures = [outcomes[s.run_id] for s in specs if isinstance(outcomes.get(s.run_id), RunFailure)]
    if records:
        write_outputs(folder, resolved, records)
    return StudyResult(study=study, out_dir=folder.root, records=records, resumed=sorted(existing),
                       seconds=time.perf_counter() - start, failures=failures,
                       pending=[s.run_id for s in specs if s.run_id not in outcomes])
