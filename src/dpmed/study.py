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
from typing import Any, Callable

import yaml

from dpmed import accounting
from dpmed.config import RunSpec, Study, expand_runs, study_to_dict
from dpmed.data import Dataset, SplitPlan, load_dataset
from dpmed.data.canaries import max_canaries
from dpmed.errors import ConfigError, PrivacyError
from dpmed.executors import RunFailure, RunTask, make_executor
from dpmed.models import MODELS
from dpmed.reporting import write_report, write_results_table
from dpmed.run import RUN_RECORD, RunContext

__all__ = ["StudyResult", "run_study", "resolve_runs", "load_study_data"]


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


def _resolve_dp_sgd(spec: RunSpec, n_train: int, cache: dict) -> dict[str, Any]:
    """q = B / N; T = epochs * round(N / B); delta; the certifying accountant; sigma calibrated (or given)."""
    p = spec.params
    try:
        q, steps = accounting.dp_sgd_schedule(n_train, batch_size=spec.training.batch_size,
                                              epochs=spec.training.epochs)
        delta = p["delta"] or accounting.default_delta(n_train)
        accountant, note = accounting.effective_accountant(p["accountant"], target_epsilon=p.get("target_epsilon"),
                                                           noise=p["noise"])
    except ValueError as exc:
        raise ConfigError(f"arm {spec.arm!r}: {exc}") from None
    derived = {"sample_rate": q, "steps": steps, "delta": delta, "n_train": n_train, "accountant": accountant}
    if note:
        derived["accountant_note"] = note
    if p.get("noise_multiplier") is not None:
        return {**derived, "noise_multiplier": p["noise_multiplier"], "noise_given": True}
    key = (p["target_epsilon"], delta, q, steps, accountant, p["noise"])
    if key not in cache:
        try:
            cache[key] = accounting.noise_multiplier_for(target_epsilon=key[0], delta=delta, sample_rate=q,
                                                         steps=steps, accountant=accountant, noise=p["noise"])
        except ValueError as exc:
            raise PrivacyError(f"arm {spec.arm!r}, target_epsilon {key[0]:g}: {exc}") from None
    return {**derived, "noise_multiplier": cache[key], "noise_given": False}


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


def resolve_runs(study: Study, n_train: int, image_shape: tuple[int, ...]) -> list[RunSpec]:
    """Expand the study and compute every derived privacy value (METHODS.md s.1-2) before any training: DP-SGD's
    q, T, delta (default min(1e-5, 1/(10 N))) and sigma calibrated so that eps <= target; local DP noise scales."""
    if study.model.name not in MODELS:
        raise ConfigError(f"model.name: unknown model {study.model.name!r}; known: {', '.join(sorted(MODELS))}")
    dimension = int(math.prod(image_shape))
    resolved, cache = [], {}
    for spec in expand_runs(study):
        derived = (_resolve_dp_sgd(spec, n_train, cache) if spec.mechanism == "dp_sgd"
                   else _resolve_local(spec, n_train, dimension))
        resolved.append(replace(spec, derived=derived))
    if study.privacy_budget is not None:
        _check_budget(study, resolved)
    return resolved


def _check_budget(study: Study, specs: list[RunSpec]) -> None:
    """Every DP-SGD run of the study trains on the same images, so releasing all their models composes: account
    all their events together and refuse the study before training if that exceeds the declared budget."""
    budget = study.privacy_budget
    shuffled = [s.run_id for s in specs if s.mechanism == "dp_sgd" and s.params["sampling"] == "shuffle"]
    if shuffled:
        raise PrivacyError(f"privacy_budget: runs {', '.join(shuffled)} use shuffled batches (a reproduction mode the "
                           "accountants do not cover), so no budget can be certified; use sampling: poisson")
    events = [accounting.dp_sgd_event(noise=s.params["noise"], noise_multiplier=s.derived["noise_multiplier"],
                                      sample_rate=s.derived["sample_rate"], steps=s.derived["steps"])
              for s in specs if s.mechanism == "dp_sgd"]
    if not events:
        return
    ledger = accounting.Ledger()
    for event in events:
        ledger = ledger.record(event)
    try:
        total = accounting.ledger_epsilon(ledger, delta=budget.delta, accountant=budget.accountant)
    except ValueError as exc:
        raise PrivacyError(f"privacy_budget: {exc}") from None
    if total > budget.epsilon:
        raise PrivacyError(
            f"privacy_budget: the study's {len(events)} DP-SGD runs together cost eps = {total:.4g} at delta = "
            f"{budget.delta:g} ({budget.accountant.upper()}), above the budget eps = {budget.epsilon:g}; drop runs "
            f"(arms, values or seeds), lower their target_epsilon, or raise the budget")


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


def run_study(study: Study, *, out: Path | str = "results", progress: bool = True,
              log: Callable[[str], None] = lambda _msg: None, executor: str = "local", workers: int = 1,
              address: str | None = None, fail_fast: bool = False) -> StudyResult:
    """Run every unfinished run of ``study`` into ``out/<study.name>/`` and write results.csv and report.html.

    A run whose run.json exists is loaded, not retrained; if it was made with different settings, this raises
    ConfigError rather than mixing two studies in one table (use another --out, or delete that run's folder).
    A run that fails is recorded (runs/<id>/error.json) and the others go on, unless ``fail_fast``; the report
    covers the finished runs. ``executor``: "local" (``workers`` > 1: a process pool) or "ray" (at ``address``).
    """
    start = time.perf_counter()
    out_dir = Path(out) / study.name
    dataset = load_study_data(study)
    log(f"data: {dataset.name}, {len(dataset.train)}/{len(dataset.val)}/{len(dataset.test)} train/val/test images "
        f"of shape {dataset.train.image_shape}, task {dataset.task.kind}")
    if dataset.source.get("summary"):
        log(f"data: {dataset.source['summary']}")
    specs = resolve_runs(study, len(dataset.train), dataset.train.image_shape)
    _check_audits(specs, max_canaries(dataset.train))
    runs_dir = out_dir / "runs"
    existing = {}
    for spec in specs:
        path = runs_dir / spec.run_id / RUN_RECORD
        if path.exists():
            record = json.loads(path.read_text(encoding="utf-8"))
            if not _same_spec(record, spec):
                raise ConfigError(
                    f"{path} was made with other settings than this study now asks for run {spec.run_id}; "
                    f"use another --out, or delete {path.parent} to retrain it")
            existing[spec.run_id] = record
    runs_dir.mkdir(parents=True, exist_ok=True)
    resolved = {"study": study_to_dict(study), "dataset": {"name": dataset.name, "task": dataset.task.kind,
                "synthetic": dataset.synthetic, "description": dataset.description,
                "n_train": len(dataset.train), "n_val": len(dataset.val), "n_test": len(dataset.test),
                "image_shape": list(dataset.train.image_shape)},
                "runs": [s.to_dict() for s in specs]}
    (out_dir / "study.yaml").write_text(yaml.safe_dump(resolved, sort_keys=False), encoding="utf-8")
    context = RunContext(dataset=dataset, model=study.model.name, evaluation=study.evaluation,
                         progress=progress and executor == "local" and workers == 1)
    order = {spec.run_id: i for i, spec in enumerate(specs, start=1)}
    for spec in specs:
        if spec.run_id in existing:
            log(f"[{order[spec.run_id]}/{len(specs)}] {spec.run_id}: finished earlier, skipped")
    todo = [RunTask(spec, runs_dir / spec.run_id) for spec in specs if spec.run_id not in existing]
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
        if outcome.get("audit"):
            log(f"{tag}: audit: {outcome['audit']['statement']}")

    if todo:
        log(f"training {len(todo)} run(s) with executor {executor!r}" + (f", {workers} workers" if workers > 1 else ""))
        make_executor(executor, workers=workers, address=address).map(todo, context, on_outcome,
                                                                       fail_fast=fail_fast)
    records = [outcomes[s.run_id] for s in specs if isinstance(outcomes.get(s.run_id), dict)]
    failures = [outcomes[s.run_id] for s in specs if isinstance(outcomes.get(s.run_id), RunFailure)]
    if records:
        write_results_table(records, out_dir / "results.csv")
        write_report(resolved, records, out_dir / "report.html")
    return StudyResult(study=study, out_dir=out_dir, records=records, resumed=sorted(existing),
                       seconds=time.perf_counter() - start, failures=failures,
                       pending=[s.run_id for s in specs if s.run_id not in outcomes])
