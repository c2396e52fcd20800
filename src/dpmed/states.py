"""A study folder read back: its study.yaml, the state of each of its runs and the `dpmed run` working in it now,
for `dpmed status`, `dpmed report`, `dpmed plan` and a study that continues in the folder.

Kept apart from `dpmed.outputs` (which computes comparisons and renders reports) so that `dpmed status` imports
neither torch nor the report's libraries: only a run interrupted mid-training has its checkpoint opened, to say how
far it got.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import NamedTuple

import yaml
from pydantic import ValidationError

from dpmed.config import Study, made_otherwise
from dpmed.data.version import UNRECORDED
from dpmed.errors import ConfigError, first_invalid
from dpmed.evaluation.version import evaluated_by
from dpmed.folders import RETRAIN_NOTE, RunFolder, StudyFolder, file_sha256
from dpmed.lock import Holder, lock_holder
from dpmed.randomness import RandomnessMode, saved_key
from dpmed.records import ResolvedStudy, RunRecord, StartRecord, read_record
from dpmed.resumption import evaluated_otherwise_than_saved, unreadable_outputs

__all__ = ["read_resolved", "counts_shown", "run_states", "checkpoints_told", "folder_holder", "release_cut_short",
           "StudyFileGiven", "FileState"]


class StudyFileGiven(ConfigError):
    """The folder passed holds a user's study file as study.yaml: it is no study output folder at all, so `dpmed
    status` refuses it as `dpmed report` does (exit 2), rather than listing an "unreadable" study.yaml."""


def folder_holder(root: Path | str) -> Holder | None:
    """The `dpmed run` process working in the study folder ``root`` now, if any (`dpmed.lock`)."""
    return lock_holder(StudyFolder(Path(root)).lock)


def read_resolved(study_dir: Path) -> ResolvedStudy:
    """The study.yaml of the study output folder ``study_dir``: the study, its data and every run's plan, as run."""
    folder = StudyFolder(Path(study_dir))
    if not folder.resolved_study.is_file():
        raise ConfigError(f"{folder.root} holds no study.yaml; pass the folder `dpmed run` wrote (results/<study>)")
    # through JSON: the plans' tuples are lists in YAML, which only JSON validation reads as tuples
    try:
        data = yaml.safe_load(folder.resolved_study.read_text(encoding="utf-8"))
        resolved = ResolvedStudy.model_validate_json(json.dumps(data))
    except ValidationError as exc:     # a file in the format of another dpmed version, or edited by hand
        if isinstance(data, dict) and "arms" in data and "study" not in data:
            # a study file (what `dpmed run` takes) that the user keeps as study.yaml in the folder passed
            name = data.get("name", "<study name>")
            raise StudyFileGiven(f"{folder.resolved_study} is a study file (what `dpmed run` takes), not the record "
                                 f"of a study that `dpmed run` writes into the study's output folder; pass that "
                                 f"folder, OUT/{name} (by default results/{name})") from None
        raise ConfigError(f"{folder.resolved_study} is not a study.yaml this version of dpmed can read "
                          f"({first_invalid(exc)}); it may have been written by another version of dpmed: read the "
                          f"folder with that version, or run the study again into another output folder (--out) "
                          f"{RETRAIN_NOTE}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{folder.resolved_study} cannot be read ({type(exc).__name__}: "
                          f"{str(exc).splitlines()[0]}); `dpmed run` writes it and reads it back to check finished "
                          f"runs: restore it from a copy, or run the study into another output folder (--out) "
                          f"{RETRAIN_NOTE}") from None
    if "decoding_version" not in resolved.dataset.model_fields_set:   # written before the field: by the decoder before
        resolved = resolved.model_copy(update={"dataset": resolved.dataset.model_copy(
            update={"decoding_version": UNRECORDED})})
    return resolved


class FileState(NamedTuple):
    """A row of `run_states` that is no run: a file the study as a whole needs (study.yaml, model.weights) that
    cannot be read now, listed before the runs. `dpmed status` counts the runs and names these apart: counted as one
    more run, a study of one run was summed up as "1 finished, 1 unreadable"."""

    name: str
    state: str
    detail: str


class _Start(NamedTuple):
    """What `dpmed status` knows of where a study's runs start without reading any image: the ``model.weights``
    file (None: the study names none), its sha256 now (None: none named, or it cannot be read now), why it cannot
    be read (None: it can, or none is named) and whether public pretraining, whose images status does not read,
    comes between."""

    weights: Path | None = None
    sha256: str | None = None
    unreadable: str | None = None
    pretrained: bool = False


def _start_of(study: Study | None, sha256: str | None = None) -> _Start:
    """``study``'s :class:`_Start`, its weights file hashed once for all runs (one read of a local file, which
    `dpmed run` hashes too; nothing of the private images), or taken as ``sha256`` where the command hashed it
    already; an empty one where study.yaml cannot be read."""
    if study is None:
        return _Start()
    weights, sha, why = study.model.weights, sha256, None
    if weights is not None and sha is None:
        try:
            sha = file_sha256(weights)
        except FileNotFoundError:
            why = "does not exist"
        except IsADirectoryError:
            why = "is a folder"
        except OSError as exc:
            why = f"cannot be read ({exc.strerror or exc})"
    return _Start(weights, sha, why, study.pretrain is not None)


def _weights_state(start: _Start) -> list[FileState]:
    """The model.weights file's row, where study.yaml names one that cannot be read now: `dpmed run` refuses the
    study file as it loads it (`dpmed.config.resolve_paths`), whatever state its runs are in, while status listed
    them as if nothing stood in the way. One row for the study, as for an unreadable study.yaml; none otherwise."""
    if start.unreadable is None:
        return []
    return [FileState("model.weights", "unreadable",
                      f"{start.weights} {start.unreadable}: the next `dpmed run` refuses the study before it reads "
                      "any data or trains; restore the file, or set model.weights in the study file to the weights "
                      "file its runs start from")]


def _weights_changed(start: _Start, then: str | None) -> str | None:
    """Why a run that started from the model.weights file of sha256 ``then`` (None: not known) does not start
    from what ``start`` shows now, or None where it does or that cannot be told."""
    if None in (start.sha256, then) or then == start.sha256:
        return None
    return f"started from other contents of model.weights ({start.weights}) than the file holds now"


def _checkpoint_detail(path: Path, key: Path, mode: RandomnessMode, shown: str | None, start: _Start,
                       against: str = "study.yaml's now") -> tuple[str, tuple[int, int] | None]:
    """(detail, (the step the next `dpmed run` continues from, the run's steps): None where it cannot, or the
    checkpoint, an older dpmed's, does not say) of a checkpoint: how far an interrupted (or running) run's checkpoint
    is, and how old: a run still training rewrites it every epoch, so a minutes-old checkpoint of a folder in use is a
    run in progress. Or why it cannot continue, as `dpmed run` finds it with the run's privacy key ``key``: unreadable,
    another key's, mixed from two points of the run (`dpmed.training.checkpoint_review`), its attempt's fingerprint
    damaged, made by another version of dpmed (`made_otherwise`), or made with other settings than those study.yaml now
    shows (or the study file that ``against`` names), fingerprinted as ``shown`` (`RunPlan.fingerprint`, kept in the key
    file; None: study.yaml unreadable), or started from other contents of the model.weights file than ``start`` shows
    now (the sha256 the key file keeps beside it); where the key or its attempt's fingerprint is missing or damaged,
    `dpmed run` deletes the checkpoint and trains afresh. The training data, which status does not read (slow), the
    attempt's fingerprint covers too: a continuation is told on the condition that they are unchanged; so are the
    starting weights where status cannot tell them (a key file of an older dpmed that keeps no hash of the file, a file
    unreadable now, or public pretraining: its weights are those of the public images, which status does not read),
    and, under a key file that keeps no settings' fingerprint (an older dpmed's), the settings; under an attempt hashed
    before `ATTEMPT_FORMAT` (a bare hash, beside which a settings' fingerprint was never written), also that the dpmed
    that made it hashed the run as this one does. Nothing of the key, the streams or the training images is told."""
    from dpmed.training import checkpoint_review      # torch: only for a run with a checkpoint

    minutes = max(0.0, time.time() - path.stat().st_mtime) / 60
    saved = saved_key(key, mode)
    other: str | None
    if saved is None:
        other = f"its privacy key {key} is missing or damaged"
    elif saved.attempt is None:     # `dpmed run` matches no attempt to it, whatever the settings' fingerprint says
        other = (f"the attempt fingerprint in its privacy key file {key} is damaged, so the attempt the checkpoint "
                 "belongs to cannot be told")
    else:
        other = made_otherwise(saved.attempt) or (f"made with other settings than {against}"
                                                  if None not in (shown, saved.settings) and saved.settings != shown
                                                  else _weights_changed(start, saved.weights))
    if saved is None or other is not None:
        if not path.is_file():      # the run finished as status looked (its checkpoint goes first): look again
            raise FileNotFoundError(path)
        # a reproducible run's key is derived from its seed and id again: the same, not a new one
        return (f"cannot continue: {other}; the next `dpmed run` deletes the checkpoint and trains this run afresh"
                + (" under a new key" if mode == "secure" else "")), None
    progress, problem = checkpoint_review(path, saved.randomness)   # progress None: an older dpmed's checkpoint
    if problem is not None:     # `dpmed run` fails on it: no run continues from there
        return f"cannot continue: {problem}", None
    age = "under a minute" if minutes < 1 else f"{minutes:.0f} min" if minutes < 120 else f"{minutes / 60:.0f} h"
    where = "" if progress is None else f" at step {progress[0]} of {progress[1]}"
    settings_known = None not in (shown, saved.settings)
    # the starting weights are told by the settings where the study names no file and trains no public model, and by
    # the file's hash where the key file keeps the one the attempt started from
    weights_known = not start.pretrained and settings_known and (
        start.weights is None or (start.sha256 is not None and saved.weights == start.sha256))
    unchanged = ([] if settings_known else ["settings"]) + ["training data"] + (
        [] if weights_known else ["starting weights"])
    # a bare hash: a dpmed before `ATTEMPT_FORMAT` made it, and `dpmed run` continues it only where that dpmed hashed
    # the run as this one does (the last of them did for the studies tried, those of 4 December and before did not):
    # a condition, as status cannot tell it without the training data the hash covers
    older = ("" if ":" in (saved.attempt or "")
             else " and the older dpmed that made it fingerprinted the run as this one does")
    listed = unchanged[0] if len(unchanged) == 1 else f"{', '.join(unchanged[:-1])} and {unchanged[-1]}"
    return f"continues from its checkpoint{where} (saved {age} ago) if its {listed} are unchanged{older}", progress


def _failure_message(path: Path) -> str:
    """The error a failed run's error.json records, or "(error.json unreadable)": a file cut short or edited by hand
    still marks the run as failed, and must not stop `dpmed status` from listing the others."""
    try:
        error = json.loads(path.read_text(encoding="utf-8"))["error"]
    except (OSError, ValueError, TypeError, KeyError):      # ValueError covers bad JSON and bytes that are not UTF-8
        return "(error.json unreadable)"
    return str(error)


def _unfinished_state(run_id: str, files: RunFolder, mode: RandomnessMode, shown: str | None, start: _Start,
                      against: str = "study.yaml's now") -> tuple[str, str, str, tuple[int, int] | None]:
    """(run id, state, detail, (the step the next `dpmed run` continues from, of how many) or None) of a run without a
    run.json: failed, interrupted or pending, as its private folder tells (`_checkpoint_detail`); "unknown" where that
    folder cannot be read, as by a colleague reading a study folder shared in place (dpmed keeps ``private/`` its
    owner's alone): that is no internal error, and the other runs are listed."""
    try:
        if files.error.is_file():
            return run_id, "failed", _failure_message(files.error), None
        if files.checkpoint.is_file():
            return run_id, "interrupted", *_checkpoint_detail(files.checkpoint, files.privacy_key, mode, shown, start,
                                                              against)
    except PermissionError as exc:
        return run_id, "unknown", (f"not finished; whether it failed, was interrupted or waits cannot be told: its "
                                   f"private folder cannot be read ({exc.strerror}: {exc.filename}), as it is its "
                                   "owner's alone; run `dpmed status` as the user who ran the study"), None
    return run_id, "pending", "", None


def release_cut_short(run_id: str, left: list[Path], *, listed: bool) -> str:
    """Why the releasable files of a run without its run.json (`StudyFolder.interrupted_releases`) must not be
    shared, and what the next `dpmed run` does with them: listed as pending or interrupted, the run's model lay in
    runs/ unsaid, beside the finished runs a user shares."""
    again = ("runs it again (from its checkpoint where one is kept), releasing them with its run.json" if listed else
             "leaves them deleted: the study file no longer lists this run")
    return (f"{', '.join(p.name for p in left)} {'lies' if len(left) == 1 else 'lie'} in runs/{run_id}/ without "
            f"its run.json (stopped between the two): no eps of this study covers them, so do not share them; the "
            f"next `dpmed run` of this study deletes them and {again}")


def _cut_short_state(run_id: str, files: RunFolder, left: list[Path]) -> tuple[str, str, str]:
    """(run id, state, detail) of a listed run whose release was cut short; one whose record could not be written
    and whose files could not be taken back either (`RunFolder.take_back`) failed too, and its error is kept."""
    text = release_cut_short(run_id, left, listed=True)
    with contextlib.suppress(PermissionError):      # private/ another user's: what is in runs/ is told all the same
        if files.error.is_file():
            return run_id, "interrupted release", f"{text}; it failed: {_failure_message(files.error)}"
    return run_id, "interrupted release", text


def _evaluated_again(record: RunRecord, resolved: ResolvedStudy | None) -> str:
    """Why the next `dpmed run` evaluates a finished run again (its evaluation differs from study.yaml's, or another
    dpmed's methods made it: `dpmed.resumption`), briefly; "" where it does not, or study.yaml cannot be read. The
    report says so of its numbers; status said nothing, and listed the run as finished like any other."""
    if resolved is None:
        return ""
    differ = evaluated_otherwise_than_saved(record, resolved)
    why = [f"evaluated otherwise than study.yaml says ({'; '.join(differ)})"] if differ else []
    why += [older] if (older := evaluated_by(record.evaluation_version)) else []
    return ("; ".join(why) + ": the same `dpmed run` evaluates it again from its model (no privacy spent)"
            if why else "")


def _started_otherwise(start: StartRecord | None, now: _Start) -> str:
    """Why the next `dpmed run` refuses the study for a finished run that started from ``start``: other contents of
    the model.weights file than it holds now (`dpmed.pretraining.refuse_other_starts` checks it by the hash);
    "" where they are the same, or that cannot be told."""
    changed = _weights_changed(now, None if start is None else start.given_sha256)
    return "" if changed is None else (f"{changed}: the next `dpmed run` refuses the study; restore the file, use "
                                       f"another output folder (--out), or delete this run to retrain it")


def _unlisted_start(files: RunFolder, start: _Start) -> str:
    """`_started_otherwise` of a finished run the study no longer lists: `dpmed run` checks the start of every
    finished run in the folder. "" where its record cannot be read (`dpmed report` tells why)."""
    try:
        return _started_otherwise(read_record(files.record).start, start)
    except ConfigError:
        return ""


def _run_state(run_id: str, files: RunFolder, resolved: ResolvedStudy | None, start: _Start, *,
               again: bool = True) -> tuple[str, str, str]:
    """(run id, state, detail) of one run the study lists (``resolved``, None where study.yaml cannot be read; its
    start as status sees it, ``start``). A `dpmed run` working in the folder deletes a run's checkpoint as the run
    finishes: one that goes between the look and the read is looked at once more (before, `dpmed status` and `dpmed
    report` ended in an internal error)."""
    if files.is_finished:
        try:
            record = read_record(files.record)
        except ConfigError as exc:
            return run_id, "unreadable", str(exc)
        damaged = unreadable_outputs(files)
        return run_id, "finished", "; ".join(
            why for why in (_started_otherwise(record.start, start), _evaluated_again(record, resolved),
                            damaged and files.recovery(damaged)) if why)
    mode = "secure" if resolved is None else resolved.study.privacy_randomness   # a label: the check reads the root
    shown = None if resolved is None else next(p for p in resolved.runs if p.run_id == run_id).fingerprint(
        resolved.study)
    try:
        return _unfinished_state(run_id, files, mode, shown, start)[:3]
    except FileNotFoundError:
        return _run_state(run_id, files, resolved, start, again=False) if again else (run_id, "pending", "")


def checkpoints_told(study_dir: Path, resolved: ResolvedStudy, run_ids: list[str], *,
                     weights_sha256: str | None = None) -> list[tuple[str, str, str, tuple[int, int] | None]]:
    """(run id, state, what the next `dpmed run` does with its checkpoint, (the step it continues from, the run's steps
    as its checkpoint counts them): None where it trains afresh) of each of ``run_ids`` whose interrupted attempt left
    one in the study folder ``study_dir``, told as `dpmed status` tells it but against ``resolved``, the study as that
    run will run it, not the folder's study.yaml: for `dpmed plan`, which said nothing of them, so that a study file
    edited before a rerun was not told to cost a run its progress until the rerun deleted the checkpoint, and which
    estimated the run's time for all its steps. The checkpoint's count of steps is the run's own: an audited run without
    DP-SGD trains on what its secret canary draws left, which the plan knows only in expectation. ``weights_sha256``:
    the sha256 of the study's model.weights file where the command has hashed it already (None: hashed here), so that
    `dpmed plan` and `dpmed run` read it once (a second read took 0.15 s per 100 MB)."""
    folder, told, start = StudyFolder(Path(study_dir)), [], _start_of(resolved.study, weights_sha256)
    for run_id in run_ids:
        shown = next(p for p in resolved.runs if p.run_id == run_id).fingerprint(resolved.study)
        with contextlib.suppress(FileNotFoundError):    # the run finished as plan looked: no checkpoint waits
            state = _unfinished_state(run_id, folder.run(run_id), resolved.study.privacy_randomness, shown, start,
                                      "the study file's")
            told += [state] if state[1] in ("interrupted", "unknown") else []
    return told


def counts_shown(study_dir: Path) -> tuple[dict[str, int], float]:
    """The DP counts of the training set, and their eps, that the study.yaml of ``study_dir`` shows in secure mode,
    read key by key, so that also a file :func:`read_resolved` refuses as a whole (another dpmed version's, edited
    by hand) gives them: a count it shows is released, whatever else the file holds, and drawing another would spend
    size_epsilon again. ({}, 0.0) where it shows none there, or in reproducible mode (a count of public noise: never
    taken back, `dpmed.released_size`)."""
    try:
        data = yaml.safe_load(StudyFolder(Path(study_dir)).resolved_study.read_text(encoding="utf-8"))
        dataset, study = data["dataset"], data["study"]
        if study.get("privacy_randomness", "secure") != "secure" or not dataset.get("size_epsilon"):
            return {}, 0.0
        return {str(key): int(count) for key, count in dataset["released_sizes"].items()}, float(
            dataset["size_epsilon"])
    except (OSError, UnicodeDecodeError, yaml.YAMLError, KeyError, TypeError, ValueError, AttributeError):
        return {}, 0.0


def run_states(study_dir: Path) -> list[tuple[str, str, str]]:
    """(run id, state, detail) of every run the study folder lists, after the model.weights file where study.yaml
    names one that cannot be read now (`_weights_state`): finished (and why the next `dpmed run` evaluates
    it again, where it will, or refuses the study: it started from other contents of model.weights than the file
    holds now), unreadable (a run.json that `dpmed report` would refuse: why), failed (with the
    error), interrupted (a private checkpoint waits: the step it reached and its age), interrupted release (its
    model and outputs in runs/ without its run.json) or pending; then every finished run the folder holds that the
    study file no longer lists (its model is released all the same, and the study's eps composes it:
    `dpmed.budget`), and every interrupted release of a run it no longer lists.

    Where study.yaml is there but cannot be read (another version of dpmed wrote it), its state comes first, and
    then the runs the folder holds files of: which are pending is not known without it. Both files' rows are
    `FileState`s."""
    folder = StudyFolder(Path(study_dir))
    states: list[tuple[str, str, str]] = []
    resolved = None
    try:
        resolved = read_resolved(folder.root)
        listed = [plan.run_id for plan in resolved.runs]
    except StudyFileGiven:
        raise
    except ConfigError as exc:
        if not folder.resolved_study.is_file():
            raise
        states.append(FileState("study.yaml", "unreadable", f"{exc}; the runs below are those with files in the "
                                                            "folder (which runs are pending is not known without it)"))
        listed = sorted({p.name for base in (folder.runs, folder.private / "runs") if base.is_dir()
                         for p in base.iterdir() if p.is_dir()})
    cut, start = folder.interrupted_releases(), _start_of(None if resolved is None else resolved.study)
    states += _weights_state(start)
    states += [_cut_short_state(run_id, folder.run(run_id), cut[run_id]) if run_id in cut
               else _run_state(run_id, folder.run(run_id), resolved, start) for run_id in listed]
    names = set(listed)
    kept = "not in the study file now, but in this folder: the study's eps still counts it"
    states += [(run_id, "finished", "; ".join(why for why in (kept, _unlisted_start(folder.run(run_id), start)) if why))
               for run_id in folder.finished_run_ids() if run_id not in names]
    states += [(run_id, "interrupted release", release_cut_short(run_id, left, listed=False))
               for run_id, left in cut.items() if run_id not in names]
    return states
