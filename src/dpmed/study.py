"""Run a whole study: load the data once, resolve every run, skip finished ones, execute the rest, collect.

This is the one module that knows every stage. Calibration happens here, before any training, so that the resolved
study (with each run's noise_multiplier, sample_rate, steps and delta) is on disk before the first step is taken.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import yaml

from dpmed import accounting
from dpmed.config import RunSpec, Study, expand_runs, study_to_dict
from dpmed.data import Dataset, load_dataset
from dpmed.errors import ConfigError, PrivacyError
from dpmed.models import MODELS
from dpmed.reporting import write_report, write_results_table
from dpmed.run import RUN_RECORD, RunContext, run_one
from dpmed.training import dp_sgd_schedule

__all__ = ["StudyResult", "run_study", "resolve_runs", "load_study_data"]


@dataclass(frozen=True)
class StudyResult:
    """records: one run.json payload per run, in study order. resumed: run ids found finished and not retrained."""

    study: Study
    out_dir: Path
    records: list[dict[str, Any]]
    resumed: list[str]
    seconds: float

    @property
    def report_path(self) -> Path:
        return self.out_dir / "report.html"

    @property
    def results_path(self) -> Path:
        return self.out_dir / "results.csv"


def load_study_data(study: Study) -> Dataset:
    """The study's dataset, resized and converted as the study asks (DataError names the file on failure)."""
    d = study.data
    return load_dataset(source=d.source, path=None if d.path is None else str(d.path), image_size=d.image_size,
                        channels=d.channels, seed=d.seed, n_images=d.n_images)


def resolve_runs(study: Study, n_train: int) -> list[RunSpec]:
    """Expand the study and compute every derived privacy value (METHODS.md s.2): delta defaults to
    min(1e-5, 1/(10 N)); q = B / N; T = epochs * round(N / B); sigma calibrated so that eps <= target."""
    if study.model.name not in MODELS:
        raise ConfigError(f"model.name: unknown model {study.model.name!r}; known: {', '.join(sorted(MODELS))}")
    resolved, cache = [], {}
    for spec in expand_runs(study):
        if spec.mechanism != "dp_sgd":
            resolved.append(spec)
            continue
        try:
            q, steps = dp_sgd_schedule(n_train, batch_size=spec.training.batch_size, epochs=spec.training.epochs)
        except ValueError as exc:
            raise ConfigError(f"arm {spec.arm!r}: {exc}") from None
        delta = spec.params["delta"] or accounting.default_delta(n_train)
        key = (spec.params["target_epsilon"], delta, q, steps, spec.params["accountant"])
        if key not in cache:
            try:
                cache[key] = accounting.noise_multiplier_for(target_epsilon=key[0], delta=delta, sample_rate=q,
                                                             steps=steps, accountant=key[4])
            except ValueError as exc:
                raise PrivacyError(f"arm {spec.arm!r}, target_epsilon {key[0]:g}: {exc}") from None
        resolved.append(replace(spec, derived={"sample_rate": q, "steps": steps, "delta": delta,
                                               "noise_multiplier": cache[key], "n_train": n_train}))
    return resolved


def _same_spec(record: dict[str, Any], spec: RunSpec) -> bool:
    return json.loads(json.dumps(record.get("spec"))) == json.loads(json.dumps(spec.to_dict()))


def run_study(study: Study, *, out: Path | str = "results", progress: bool = True,
              log: Callable[[str], None] = lambda _msg: None) -> StudyResult:
    """Run every unfinished run of ``study`` into ``out/<study.name>/`` and write results.csv and report.html.

    A run whose run.json exists is loaded, not retrained; if it was made with different settings, this raises
    ConfigError rather than mixing two studies in one table (use another --out, or delete that run's folder).
    """
    start = time.perf_counter()
    out_dir = Path(out) / study.name
    dataset = load_study_data(study)
    log(f"data: {dataset.name}, {len(dataset.train)}/{len(dataset.val)}/{len(dataset.test)} train/val/test images "
        f"of shape {dataset.train.image_shape}, task {dataset.task.kind}")
    specs = resolve_runs(study, len(dataset.train))
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
    context = RunContext(dataset=dataset, model=study.model.name, evaluation=study.evaluation, progress=progress)
    records = []
    for i, spec in enumerate(specs, start=1):
        if spec.run_id in existing:
            log(f"[{i}/{len(specs)}] {spec.run_id}: finished earlier, skipped")
            records.append(existing[spec.run_id])
            continue
        log(f"[{i}/{len(specs)}] {spec.run_id}: training ({spec.mechanism})")
        record = run_one(spec, context, runs_dir / spec.run_id)
        auroc = record["metrics"].get("test_auroc")
        log(f"[{i}/{len(specs)}] {spec.run_id}: test AUROC {'undefined' if auroc is None else format(auroc, '.3f')}; "
            f"{record['privacy']['statement']}")
        records.append(record)
    write_results_table(records, out_dir / "results.csv")
    write_report(resolved, records, out_dir / "report.html")
    return StudyResult(study=study, out_dir=out_dir, records=records, resumed=sorted(existing),
                       seconds=time.perf_counter() - start)
