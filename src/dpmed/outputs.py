"""A study folder's outputs: results.csv, comparisons.json and the reports written from its finished runs, and the
folder read back (its study.yaml, each run's state) for `dpmed report` and `dpmed status`.

`dpmed.study` writes them at the end of a run; `rebuild_outputs` rewrites them from the folder alone, so that a report
can be rebuilt (by a newer dpmed, or after a run was retrained) without the data.
"""

from __future__ import annotations

import json
import time
import zipfile
from pathlib import Path

import yaml
from pydantic import ValidationError

from dpmed.comparisons import Comparisons, compare_runs
from dpmed.errors import ConfigError
from dpmed.evaluation import load_predictions
from dpmed.folders import RETRAIN_NOTE, StudyFolder, write_json_atomic
from dpmed.mechanisms import DpSgdPlan
from dpmed.records import ResolvedStudy, RunRecord, read_record, read_timing
from dpmed.reporting import PrivateRun, write_private_report, write_report, write_results_table
from dpmed.training import checkpoint_progress
from dpmed.workspace import withdraw_public_timing, writing_into

__all__ = ["write_outputs", "read_resolved", "rebuild_outputs", "run_states"]


def _comparisons(folder: StudyFolder, resolved: ResolvedStudy, records: list[RunRecord]) -> Comparisons:
    """Paired comparisons over the finished runs' saved predictions, with the study's bootstrap settings (the
    redraws of every run's own intervals)."""
    predictions, unread = {}, []
    for r in records:
        path = folder.run(r.run_id).predictions
        try:
            predictions[r.run_id] = load_predictions(path)
        except FileNotFoundError:
            unread.append(f"{r.run_id}: {path} is missing, so its paired comparisons are left out; delete "
                          f"{folder.run(r.run_id).public} and run the study again to retrain it {RETRAIN_NOTE}")
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:       # a damaged or foreign file
            unread.append(f"{r.run_id}: {path} cannot be read ({type(exc).__name__}: {exc}), so its paired "
                          f"comparisons are left out; delete {folder.run(r.run_id).public} and run the study again "
                          f"to retrain it {RETRAIN_NOTE}")
    labels = list(resolved.dataset.label_names) or next(
        ([k[len("test_auroc["):-1] for k in r.metrics if k.startswith("test_auroc[")] for r in records
         if any(k.startswith("test_auroc[") for k in r.metrics)), [])   # a study.yaml written before label_names
    ev = resolved.study.evaluation
    out = compare_runs(records, predictions, kind=resolved.dataset.task, label_names=labels,
                       n_resamples=ev.bootstrap_resamples, seed=ev.bootstrap_seed, confidence=ev.confidence)
    return out.model_copy(update={"notes": unread + out.notes}) if unread else out


def _private_items(folder: StudyFolder, records: list[RunRecord]) -> dict[str, PrivateRun]:
    """Per run, what its private folder holds for the private report (`PrivateRun`), for runs that hold any."""
    items: dict[str, PrivateRun] = {}
    for r in records:
        run = folder.run(r.run_id)
        audit = json.loads(run.audit.read_text(encoding="utf-8")) if run.audit.is_file() else None
        stats = json.loads(run.statistics.read_text(encoding="utf-8")) if run.statistics.is_file() else {}
        attacked = r.attack is not None and run.attack_images.is_file()
        # a DP-SGD run's full timing is in its private folder; an older dpmed left it in run.json only
        timing = None if not isinstance(r.plan.privacy, DpSgdPlan) else read_timing(run.timing) or (
            r.timing if r.timing.train_seconds is not None else None)
        item = PrivateRun(audit_statement=None if audit is None else audit["statement"],
                          training_metrics=stats.get("training_metrics") or None, timing=timing,
                          attack_images=run.attack_images if attacked else None, attacked=r if attacked else None)
        if item:
            items[r.run_id] = item
    return items


def write_outputs(folder: StudyFolder, resolved: ResolvedStudy, records: list[RunRecord]) -> None:
    """results.csv, comparisons.json and report.html from the finished runs, and private/report.html where runs
    hold private statistics (audit results, training-set metrics). Comparisons are computed before rendering.

    The public outputs take each run's timing as `Timing.shareable` gives it: a DP-SGD run that an older dpmed
    finished still holds its seconds in run.json, and they go to the private report only."""
    public = [r.model_copy(update={"timing": r.timing.shareable(r.plan)}) for r in records]
    comparisons = _comparisons(folder, resolved, public)
    write_json_atomic(folder.comparisons, comparisons.model_dump(mode="json"))
    write_results_table(public, folder.results)
    write_report(resolved, public, comparisons, folder)
    private = _private_items(folder, records)
    if private:
        folder.private.mkdir(parents=True, exist_ok=True)
        write_private_report(resolved, private, folder.private_report)


def read_resolved(study_dir: Path) -> ResolvedStudy:
    """The study.yaml of the study output folder ``study_dir``: the study, its data and every run's plan, as run."""
    folder = StudyFolder(Path(study_dir))
    if not folder.resolved_study.is_file():
        raise ConfigError(f"{folder.root} holds no study.yaml; pass the folder `dpmed run` wrote (results/<study>)")
    # through JSON: the plans' tuples are lists in YAML, which only JSON validation reads as tuples
    try:
        data = yaml.safe_load(folder.resolved_study.read_text(encoding="utf-8"))
        return ResolvedStudy.model_validate_json(json.dumps(data))
    except ValidationError as exc:     # a file in the format of another dpmed version, or edited by hand
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"{folder.resolved_study} is not a study.yaml this version of dpmed can read ("
                          + (f"{where}: " if where else "") + f"{first['msg']}); it may have been written by another "
                          "version of dpmed: read the folder with that version, or run the study again into another "
                          "--out") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{folder.resolved_study} cannot be read ({type(exc).__name__}: "
                          f"{str(exc).splitlines()[0]}); `dpmed run` writes it and reads it back to check finished "
                          "runs: restore it from a copy, or run the study into another --out") from None


def rebuild_outputs(study_dir: Path) -> tuple[ResolvedStudy, list[RunRecord]]:
    """Rewrite results.csv and the reports of the study folder ``study_dir`` from its finished runs (``dpmed
    report``), after moving an older dpmed's DP-SGD timing out of run.json (`withdraw_public_timing`); returns the
    resolved study and the records."""
    folder = StudyFolder(Path(study_dir))
    resolved = read_resolved(folder.root)
    records = [read_record(folder.run(p.run_id).record) for p in resolved.runs if folder.run(p.run_id).is_finished]
    if not records:
        waiting = sum(kind == "interrupted" for _, kind, _ in run_states(folder.root))
        raise ConfigError(f"{folder.root} has no finished run (no runs/*/run.json); " + (
            f"{waiting} run(s) were interrupted: run the same `dpmed run` again to continue them" if waiting
            else "run the study first"))
    with writing_into(folder.root, "make it writable, or copy the folder somewhere writable and rebuild the copy",
                      "free space on its disk, then run `dpmed report` again (the finished runs are kept)"):
        folder.make_private()       # 0700 before anything private is written into it (an older folder's narrowed)
        withdraw_public_timing(folder, records)
        write_outputs(folder, resolved, records)
        folder.settle_times()
    return resolved, records


def _checkpoint_detail(path: Path) -> str:
    """How far an interrupted (or running) run's checkpoint is, and how old: a run still training rewrites it
    every epoch, so a minutes-old checkpoint of a folder in use is a run in progress."""
    minutes = max(0.0, time.time() - path.stat().st_mtime) / 60
    age = "under a minute" if minutes < 1 else f"{minutes:.0f} min" if minutes < 120 else f"{minutes / 60:.0f} h"
    progress = checkpoint_progress(path)
    where = "" if progress is None else f" at step {progress[0]} of {progress[1]}"
    return f"continues from its checkpoint{where} (saved {age} ago)"


def _failure_message(path: Path) -> str:
    """The error a failed run's error.json records, or "(error.json unreadable)": a file cut short or edited by hand
    still marks the run as failed, and must not stop `dpmed status` from listing the others."""
    try:
        error = json.loads(path.read_text(encoding="utf-8"))["error"]
    except (OSError, ValueError, TypeError, KeyError):      # ValueError covers bad JSON and bytes that are not UTF-8
        return "(error.json unreadable)"
    return str(error)


def run_states(study_dir: Path) -> list[tuple[str, str, str]]:
    """(run id, state, detail) of every run the study folder lists: finished, unreadable (a run.json that `dpmed
    report` would refuse: why), failed (with the error), interrupted (a private checkpoint waits: the step it reached
    and its age) or pending; then every finished run the folder holds that the study file no longer lists (its model
    is released all the same, and the study's eps composes it: `dpmed.budget`)."""
    folder = StudyFolder(Path(study_dir))
    states = []
    listed = read_resolved(folder.root).runs
    for plan in listed:
        files = folder.run(plan.run_id)
        if files.is_finished:
            try:
                read_record(files.record)
                states.append((plan.run_id, "finished", ""))
            except ConfigError as exc:
                states.append((plan.run_id, "unreadable", str(exc)))
        elif files.error.is_file():
            states.append((plan.run_id, "failed", _failure_message(files.error)))
        elif files.checkpoint.is_file():
            states.append((plan.run_id, "interrupted", _checkpoint_detail(files.checkpoint)))
        else:
            states.append((plan.run_id, "pending", ""))
    names = {plan.run_id for plan in listed}
    states += [(run_id, "finished", "not in the study file now, but in this folder: the study's eps still counts it")
               for run_id in folder.finished_run_ids() if run_id not in names]
    return states
