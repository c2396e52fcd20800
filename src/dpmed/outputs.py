"""A study folder's outputs: results.csv, comparisons.json and the reports written from its finished runs (the
folder's study.yaml and each run's state are read back by `dpmed.states`).

`dpmed.study` writes them at the end of a run; `rebuild_outputs` rewrites them from the folder alone, so that a report
can be rebuilt (by a newer dpmed, or after a run was retrained) without the data.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dpmed.audit import AuditRecord, read_audit
from dpmed.comparisons import Comparisons, compare_runs
from dpmed.errors import ConfigError
from dpmed.evaluation.predictions import load_predictions
from dpmed.folders import StudyFolder, write_json_atomic
from dpmed.records import ResolvedStudy, RunRecord, read_record, read_timing
from dpmed.reporting import PrivateRun, write_private_report, write_report, write_results_table
from dpmed.resumption import evaluated_otherwise_than_saved
from dpmed.states import folder_holder, read_resolved, run_states
from dpmed.workspace import withdraw_public_timing, writing_into

__all__ = ["write_outputs", "rebuild_outputs"]


def _comparisons(folder: StudyFolder, resolved: ResolvedStudy, records: list[RunRecord]) -> Comparisons:
    """Paired comparisons over the finished runs' saved predictions, with the study's bootstrap settings (the
    redraws of every run's own intervals)."""
    predictions, unread = {}, []
    for r in records:
        run = folder.run(r.run_id)
        try:
            predictions[r.run_id] = load_predictions(run.predictions)
            continue
        except FileNotFoundError:
            why = f"{run.predictions} is missing"
        except ValueError as exc:       # a damaged or foreign file (`read_arrays` names it, its OSErrors too)
            why = str(exc)
        unread.append(f"{r.run_id}: {run.recovery(f'{why}, so its paired comparisons are left out')}")
    labels = resolved.label_names(records)
    ev = resolved.study.evaluation
    out = compare_runs(records, predictions, kind=resolved.dataset.task, label_names=labels,
                       n_resamples=ev.bootstrap_resamples, seed=ev.bootstrap_seed, confidence=ev.confidence,
                       interval=ev.interval, ordinal=resolved.dataset.ordinal)
    notes = unread + _evaluated_otherwise(resolved, records)
    return out.model_copy(update={"notes": notes + out.notes}) if notes else out


def _evaluated_otherwise(resolved: ResolvedStudy, records: list[RunRecord]) -> list[str]:
    """A line for each run whose record was evaluated otherwise than study.yaml says. A rerun under other evaluation
    settings writes study.yaml before it evaluates the finished runs again (they are written only once all are
    done), so a stop in between leaves runs of the old settings under the new ones: the report names the study's
    interval and level, and would name them for these runs too, unsaid. A run of another dpmed's evaluation methods
    is no setting of study.yaml: the report's summary names those runs, once (`dpmed.reporting.sections`)."""
    lines = []
    for r in records:
        differ = evaluated_otherwise_than_saved(r, resolved)
        if differ:
            lines.append(f"{r.run_id}: evaluated otherwise than study.yaml says ({'; '.join(differ)}), so what the "
                         "report says of the study's intervals does not hold for its numbers: run the same `dpmed "
                         "run` again to evaluate it again from its model (not retrained: no privacy spent)")
    return lines


def _json_entry(path: Path, key: str, kind: type, unread: list[str]) -> Any:
    """``key`` of the JSON object a run wrote to ``path``, if it is a ``kind``; None where the file is absent. A
    damaged file (or one without the key) adds a line to ``unread``: the private report says so, and the rest of the
    report is written."""
    try:
        value = json.loads(path.read_bytes())[key]
        if value is None or isinstance(value, kind):
            return value
        raise TypeError(f"{key} is a {type(value).__name__}")
    except FileNotFoundError:
        return None
    except (OSError, ValueError, LookupError, TypeError) as exc:      # JSONDecodeError and UnicodeDecodeError too
        detail = exc.strerror or exc if isinstance(exc, OSError) else exc     # an OSError's text repeats the path
        unread.append(f"{path} cannot be read ({type(exc).__name__}: {detail}), so it is left out of this report")
        return None


def _private_items(folder: StudyFolder, records: list[RunRecord]) -> dict[str, PrivateRun]:
    """Per run, what its private folder holds for the private report (`PrivateRun`), for runs that hold any."""
    items: dict[str, PrivateRun] = {}
    for r in records:
        run = folder.run(r.run_id)
        unread: list[str] = []
        audit = read_audit(run.audit)
        if isinstance(audit, str):
            unread.append(f"{audit}, so it is left out of this report")
        # an older dpmed stated a reproducible-mode run's claimed eps without the card's label: given it here
        audit = audit.label_claim(r.privacy) if isinstance(audit, AuditRecord) else None
        metrics = _json_entry(run.statistics, "training_metrics", dict, unread)
        attacked = r.attack is not None and run.attack_images.is_file()
        # a DP-SGD run's full timing, or a run's beside others, is in its private folder; an older dpmed left a
        # DP-SGD run's in run.json only
        timing = None if not r.timing.is_private(r.plan) else read_timing(run.timing) or (
            r.timing if r.timing.train_seconds is not None else None)
        # the level of the bound its statement gives, for the joint level: none where the draw found no canary
        bounded = None if audit is None or audit.epsilon_lower_bound is None else audit
        item = PrivateRun(audit_statement=None if audit is None else audit.statement,
                          audit_confidence=None if bounded is None else bounded.confidence,
                          training_metrics=metrics or None, timing=timing,
                          attack_images=run.attack_images if attacked else None,
                          attacked=r if attacked else None, unread=tuple(unread))
        if item:
            items[r.run_id] = item
    return items


def write_outputs(folder: StudyFolder, resolved: ResolvedStudy, records: list[RunRecord]) -> None:
    """results.csv, comparisons.json and report.html from the finished runs, and private/report.html where runs
    hold private statistics (audit results, training-set metrics). Comparisons are computed before rendering.

    The public outputs take each run as `RunRecord.shareable` gives it: a DP-SGD run that an older dpmed finished
    still holds its seconds in run.json, and they go to the private report only, as do those of a run that trained
    beside others."""
    public = [r.shareable() for r in records]
    comparisons = _comparisons(folder, resolved, public)
    write_json_atomic(folder.comparisons, comparisons.model_dump(mode="json"))
    write_results_table(public, folder.results)
    write_report(resolved, public, comparisons, folder)
    private = _private_items(folder, records)
    if private:
        folder.private.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_private_report(resolved, private, folder.private_report)


def rebuild_outputs(study_dir: Path) -> tuple[ResolvedStudy, list[RunRecord]]:
    """Rewrite results.csv and the reports of the study folder ``study_dir`` from its finished runs (``dpmed
    report``), after moving an older dpmed's DP-SGD timing out of every run.json the folder holds, listed or not
    (`withdraw_public_timing`); returns the resolved study and the records."""
    folder = StudyFolder(Path(study_dir))
    resolved = read_resolved(folder.root)
    records = [read_record(folder.run(p.run_id).record) for p in resolved.runs if folder.run(p.run_id).is_finished]
    if not records:
        holder = folder_holder(folder.root)
        kinds = [kind for _, kind, _ in run_states(folder.root)]
        waiting, cut = sum(k.startswith("interrupted") for k in kinds), kinds.count("interrupted release")
        cut_text = (f" ({cut} of them as their models and outputs were moved into runs/: these lie there without a "
                    "run.json, and no eps covers them: do not share them; that `dpmed run` deletes them first)"
                    if cut else "")
        raise ConfigError(f"{folder.root} has no finished run (no runs/*/run.json); " + (
            f"a dpmed run ({holder.describe()}) is working in it now: run `dpmed report` again once a run has "
            "finished" if holder is not None else
            f"{waiting} run(s) were interrupted{cut_text}: run the same `dpmed run` again to continue them" if waiting
            else "run the study first"))
    with writing_into(folder.root, "make it writable, or copy the folder somewhere writable and rebuild the copy",
                      "free space on its disk, then run `dpmed report` again (the finished runs are kept)"):
        folder.make_private()       # 0700 before anything private is written into it (an older folder's narrowed)
        # every run the folder releases, as `dpmed run` does: one the study file no longer lists is shared all the same
        listed = {r.run_id for r in records}
        withdraw_public_timing(folder, [*records, *(read_record(folder.run(run_id).record)
                                                    for run_id in folder.finished_run_ids() if run_id not in listed)])
        write_outputs(folder, resolved, records)
        folder.settle_times()
    return resolved, records
