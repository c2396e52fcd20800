"""A study folder read back without training: the state of each run, the study.yaml, the DP counts it shows."""

from __future__ import annotations

import json
import os
import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import yaml

from dpmed.accounting import Ledger, dp_sgd_event
from dpmed.config import ATTEMPT_FORMAT, Study
from dpmed.config.data_section import NormalizeConfig
from dpmed.errors import ConfigError
from dpmed.folders import StudyFolder, file_sha256, write_arrays_atomic
from dpmed.randomness import PrivacyRandomness
from dpmed.records import PretrainRecord, StartRecord
import dpmed.states
from dpmed.states import counts_shown, read_resolved, run_states

NOW = time.time()


@pytest.fixture(autouse=True)
def status_clock(monkeypatch):
    """Status reads a checkpoint's age on a clock stopped at ``NOW``: on the wall clock, a test descheduled for 6 s
    between writing a checkpoint 1.4 min old and reading it saw "2 min"; one written meanwhile is 0 min old."""
    monkeypatch.setattr(dpmed.states, "time", SimpleNamespace(time=lambda: NOW))


def _without_fairness(resolved):
    """``resolved`` asking no fairness block, as these records hold none: else status says the next run evaluates
    them again."""
    return resolved.model_copy(update={"study": resolved.study.model_copy(update={
        "evaluation": resolved.study.evaluation.model_copy(update={"fairness": None})})})


@pytest.fixture
def study_folder(tmp_path, make_record, make_resolved):
    """A study folder as `dpmed run` leaves it, of the runs ``run_ids`` (arm "a", no privacy), with study.yaml
    listing them all and no run started: returns (the folder, the records the study would write)."""

    def make(*run_ids: str) -> tuple[StudyFolder, dict]:
        records = {run_id: make_record(run_id, "a", seed=i) for i, run_id in enumerate(run_ids)}
        folder = StudyFolder(tmp_path / "s")
        folder.make_private()
        resolved = _without_fairness(make_resolved(list(records.values())))
        folder.resolved_study.write_text(yaml.safe_dump(resolved.model_dump(mode="json"), sort_keys=False))
        return folder, records

    return make


def _finish(files, record) -> None:
    """Leave ``record``'s run finished in ``files`` as `dpmed run` does: its run.json and the predictions every
    finished run keeps (status tells one without them as a run its next `dpmed run` evaluates again)."""
    record.write(files.record)
    write_arrays_atomic(files.predictions, {"test_scores": np.array([0.2, 0.8]), "test_labels": np.array([0, 1]),
                                           "test_patient_ids": np.array(["p0", "p1"])})


# What status says of a checkpoint it cannot tell from one `dpmed run` continues: its key file keeps no fingerprint of
# the settings (`_key`, as an older dpmed wrote it), and status reads no training data
OLDER = " and the older dpmed that made it fingerprinted the run as this one does"
IF_UNCHANGED = f"if its settings, training data and starting weights are unchanged{OLDER}"


def _key(path, randomness: PrivacyRandomness | None = None) -> PrivacyRandomness:
    """The privacy key file of the run whose checkpoint is ``path``, as `dpmed run` wrote it beside it before it kept
    the fingerprint of the run's settings (its attempt a bare sha256)."""
    randomness = randomness or PrivacyRandomness.secure()
    (path.parent / "privacy_key").write_text(json.dumps({"root": randomness.root_hex(), "attempt": "ab" * 32}))
    return randomness


def _checkpoint(path, steps: int, of: int, minutes_old: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"progress": {"steps": steps, "of": of}}, path)
    _key(path)
    then = NOW - minutes_old * 60
    os.utime(path, (then, then))


PER_STEP = {"sampling": 300, "noise": 2}      # the words a step of 300 units takes from each stream


def _dp_checkpoint(path, done: int, *, drawn: int | None = None) -> PrivacyRandomness:
    """A DP-SGD checkpoint of step ``done`` of 20 whose streams stand where step ``drawn`` (default ``done``) left
    them, and its key beside it: returns the run's randomness."""
    randomness = PrivacyRandomness.secure()
    for name, words in PER_STEP.items():
        randomness.stream(name).bit_generator.random_raw(words * (done if drawn is None else drawn))
    ledger = Ledger().record(dp_sgd_event(noise="gaussian", noise_multiplier=1.0, sample_rate=0.1, steps=done))
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"progress": {"steps": done, "of": 20}, "done": done, "privacy_randomness": randomness.state(),
                "ledger": ledger.to_dict(), "per_step": PER_STEP}, path)
    return _key(path, PrivacyRandomness.from_root_hex(randomness.root_hex(), "secure"))


def test_each_run_is_told_finished_unreadable_failed_interrupted_or_pending_in_the_study_s_order(study_folder):
    """A run with a run.json is finished (or unreadable, where `dpmed report` would refuse it), whatever its private
    folder still holds; one without is failed where error.json says so, interrupted where a checkpoint waits (with
    the step it reached), else pending. A finished run the study no longer lists comes last."""
    ids = ("e_seed0", "d_seed1", "c_seed2", "b_seed3", "a_seed4")
    folder, records = study_folder(*ids)
    finished, unreadable, failed, interrupted, pending = (folder.run(run_id) for run_id in ids)
    finished.make()
    _finish(finished, records["e_seed0"])
    finished.error.write_text('{"error": "an earlier attempt failed"}')       # a finished run is finished
    unreadable.make()
    unreadable.record.write_text("{cut short")
    failed.make_private()
    failed.error.write_text('{"run_id": "c_seed2", "error": "ValueError: boom"}')
    _checkpoint(interrupted.checkpoint, 7, 40, minutes_old=5.2)
    dropped = folder.run("z_seed9")
    dropped.make()
    _finish(dropped, records["e_seed0"].model_copy(update={"run_id": "z_seed9"}))
    states = run_states(folder.root)
    assert [(run_id, state) for run_id, state, _ in states] == [
        ("e_seed0", "finished"), ("d_seed1", "unreadable"), ("c_seed2", "failed"), ("b_seed3", "interrupted"),
        ("a_seed4", "pending"), ("z_seed9", "finished")]
    details = [detail for _, _, detail in states]
    assert details[0] == "" and details[4] == ""
    assert details[1].startswith(f"{unreadable.record} is not a run record this version of dpmed can read")
    assert details[2] == "ValueError: boom"
    assert details[3] == f"continues from its checkpoint at step 7 of 40 (saved 5 min ago) {IF_UNCHANGED}"
    assert details[5].startswith("not in the study file now, but in this folder")


@pytest.mark.parametrize(("minutes", "age"), [(0.2, "under a minute"), (1.4, "1 min"), (119.0, "119 min"),
                                              (121.0, "2 h"), (60 * 30.2, "30 h")])
def test_an_interrupted_run_s_checkpoint_age_is_told_in_minutes_then_hours(study_folder, minutes, age):
    """A run still training rewrites its checkpoint every epoch: its age tells a run in progress from one stopped."""
    folder, _ = study_folder("a_seed0")
    _checkpoint(folder.run("a_seed0").checkpoint, 3, 12, minutes_old=minutes)
    assert run_states(folder.root) == [("a_seed0", "interrupted",
                                        f"continues from its checkpoint at step 3 of 12 (saved {age} ago) "
                                        f"{IF_UNCHANGED}")]


def test_a_checkpoint_that_says_not_how_far_it_got_still_marks_the_run_interrupted(study_folder):
    folder, _ = study_folder("a_seed0")
    checkpoint = folder.run("a_seed0").checkpoint
    checkpoint.parent.mkdir(parents=True)
    torch.save({"model": {}}, checkpoint)     # as written before checkpoints recorded their progress
    _key(checkpoint)
    assert run_states(folder.root) == [("a_seed0", "interrupted",
                                        f"continues from its checkpoint (saved under a minute ago) {IF_UNCHANGED}")]


def test_a_readable_checkpoint_without_progress_is_read_once(study_folder, monkeypatch):
    """It was read mapped for its progress, then whole again to look for a problem the mapped read had not found."""
    from dpmed.training import loop

    folder, _ = study_folder("a_seed0")
    checkpoint = folder.run("a_seed0").checkpoint
    checkpoint.parent.mkdir(parents=True)
    torch.save({"model": {}}, checkpoint)
    _key(checkpoint)
    reads = []
    real_load = torch.load
    monkeypatch.setattr(loop.torch, "load", lambda *args, **kwargs: reads.append(args[0]) or real_load(*args, **kwargs))
    assert run_states(folder.root)[0][1] == "interrupted"
    assert reads == [checkpoint]


def test_an_unreadable_study_yaml_comes_first_then_the_runs_the_folder_holds_files_of(study_folder):
    """Which runs are pending is unknown without study.yaml: the runs listed are those with a public or a private
    folder, in name order, each in its own state."""
    folder, records = study_folder("b_seed0", "a_seed1")
    folder.run("b_seed0").make()
    _finish(folder.run("b_seed0"), records["b_seed0"])
    failed = folder.run("a_seed1")
    failed.make_private()
    failed.error.write_text('{"error": "OSError: disk full"}')
    folder.resolved_study.write_text("study: {name: [unclosed\n")
    states = run_states(folder.root)
    assert states[0][:2] == ("study.yaml", "unreadable")
    assert states[0][2].startswith(f"{folder.resolved_study} cannot be read (")
    assert states[0][2].endswith("(which runs are pending is not known without it)")
    assert states[1:] == [("a_seed1", "failed", "OSError: disk full"), ("b_seed0", "finished", "")]


def test_a_folder_without_study_yaml_is_refused_naming_what_to_pass(tmp_path):
    with pytest.raises(ConfigError, match=r"holds no study\.yaml; pass the folder `dpmed run` wrote"):
        read_resolved(tmp_path)
    with pytest.raises(ConfigError, match=r"holds no study\.yaml"):
        run_states(tmp_path)


def test_study_yaml_reads_back_as_it_was_written(study_folder, make_resolved):
    folder, records = study_folder("b_seed0", "a_seed1")
    assert read_resolved(folder.root) == _without_fairness(make_resolved(list(records.values())))


@pytest.mark.parametrize(("randomness", "size_epsilon", "shown"), [
    ("secure", 0.5, ({"image": 812, "patient": 640}, 0.5)),
    ("reproducible", 0.5, ({}, 0.0)),         # the exact size plus public noise: no count to take back
    ("secure", None, ({}, 0.0)),              # no DP count drawn: the size is shown exactly
])
def test_the_dp_counts_a_study_yaml_shows_are_read_key_by_key(tmp_path, randomness, size_epsilon, shown):
    """Also from a study.yaml another version wrote (here, with keys this one does not know): a count it shows is
    released whatever else it holds."""
    folder = StudyFolder(tmp_path)
    data = {"study": {"name": "s", "privacy_randomness": randomness, "future_key": 1},
            "dataset": {"released_sizes": {"image": 812, "patient": 640.0}, "size_epsilon": size_epsilon}}
    folder.resolved_study.write_text(yaml.safe_dump(data))
    assert counts_shown(tmp_path) == shown
    del data["study"]["privacy_randomness"]                 # secure is the default
    folder.resolved_study.write_text(yaml.safe_dump(data))
    assert counts_shown(tmp_path) == (shown if randomness == "secure" else ({"image": 812, "patient": 640}, 0.5))


@pytest.mark.parametrize("text", ["", "[1, 2]", "study: {}\n", "dataset: {size_epsilon: 1}\nstudy: {}\n",
                                  "dataset: {size_epsilon: 1, released_sizes: {image: many}}\nstudy: {}\n",
                                  "study: [unclosed\n"])
def test_a_study_yaml_that_shows_no_count_reads_as_none(tmp_path, text):
    (tmp_path / "study.yaml").write_text(text)
    assert counts_shown(tmp_path) == ({}, 0.0)
    assert counts_shown(tmp_path / "absent") == ({}, 0.0)


def test_a_private_folder_that_cannot_be_read_leaves_a_finished_run_finished_and_an_unfinished_one_unknown(
        study_folder, monkeypatch):
    """As a colleague reads a study folder shared in place (private/ is its owner's alone): a run.json tells a
    finished run without private/, and the others cannot be told failed, interrupted or pending. (Simulated: the
    tests may run as root, whom no folder mode stops.)"""
    import pathlib

    folder, records = study_folder("a_seed0", "b_seed1")
    folder.run("a_seed0").make()
    _finish(folder.run("a_seed0"), records["a_seed0"])
    folder.run("b_seed1").make_private()
    stat = pathlib.Path.stat

    def denied(self, *args, **kwargs):
        if folder.private in self.absolute().parents:
            raise PermissionError(13, "Permission denied", str(self))
        return stat(self, *args, **kwargs)
    monkeypatch.setattr(pathlib.Path, "stat", denied)
    (finished, unknown) = run_states(folder.root)
    assert finished == ("a_seed0", "finished", "")
    assert unknown[:2] == ("b_seed1", "unknown")
    assert unknown[2].startswith("not finished; whether it failed, was interrupted or waits cannot be told: its "
                                 f"private folder cannot be read (Permission denied: {folder.run('b_seed1').error})")


def test_a_run_whose_release_was_cut_short_is_told_as_such_listed_or_not_and_left_as_it_is(study_folder):
    """A run stopped between moving its model and predictions into runs/<id>/ and writing its run.json (Ray's
    force-cancel, kill -9, a power loss) was shown as pending, or interrupted where its checkpoint waited, with its
    model in the shareable folder unsaid. It is an interrupted release now, naming its files and what the next
    `dpmed run` does; one the study file no longer lists is shown too. Status deletes nothing."""
    folder, records = study_folder("a_seed0", "b_seed1", "c_seed2", "d_seed3")
    cut, checkpointed, pending, failed = (folder.run(r) for r in ("a_seed0", "b_seed1", "c_seed2", "d_seed3"))
    dropped = folder.run("z_seed9")
    for run in (cut, checkpointed, dropped, failed):
        run.make()
        run.model.write_text("weights")
    failed.error.write_text('{"error": "OSError: no space left; its files could not be taken back"}')
    cut.predictions.write_text("predictions")
    _checkpoint(checkpointed.checkpoint, 40, 40, minutes_old=1.0)
    pending.make()
    pending.unreleased(pending.model).write_text("staged, not released")     # private: no release yet
    states = run_states(folder.root)
    assert [(run_id, state) for run_id, state, _ in states] == [
        ("a_seed0", "interrupted release"), ("b_seed1", "interrupted release"), ("c_seed2", "pending"),
        ("d_seed3", "interrupted release"), ("z_seed9", "interrupted release")]
    details = [detail for _, _, detail in states]
    assert details[3].endswith("releasing them with its run.json; it failed: OSError: no space left; its files "
                               "could not be taken back")
    del details[3]
    assert details[0].startswith("model.pt, predictions.npz lie in runs/a_seed0/ without its run.json")
    assert details[1].startswith("model.pt lies in runs/b_seed1/ without its run.json")
    for detail in (details[0], details[1], details[3]):
        assert "no eps of this study covers them, so do not share them" in detail
    assert details[0].endswith("deletes them and runs it again (from its checkpoint where one is kept), releasing "
                               "them with its run.json")
    assert details[3].endswith("deletes them and leaves them deleted: the study file no longer lists this run")
    assert all(p.is_file() for p in (cut.model, cut.predictions, checkpointed.model, dropped.model))
    _finish(cut, records["a_seed0"])                       # with its record, the same files are a finished run
    assert run_states(folder.root)[0][:2] == ("a_seed0", "finished")


def test_a_checkpoint_that_continues_its_run_under_its_key_is_told_as_continuing(study_folder):
    folder, _ = study_folder("a_seed0")
    _dp_checkpoint(folder.run("a_seed0").checkpoint, 5)
    assert run_states(folder.root)[0][2] == ("continues from its checkpoint at step 5 of 20 (saved under a minute ago) "
                                            f"{IF_UNCHANGED}")


# How the attempt whose key file `test_a_checkpoint_made_with_other_settings_...` writes differs from study.yaml's
# now: each of the run's plan or of what the study shows besides it, which its attempt's fingerprint covers too
_OTHER_STUDY = {
    "learning rate": lambda plan, study: (plan.model_copy(update={"training": plan.training.model_copy(
        update={"learning_rate": 2 * plan.training.learning_rate})}), study),
    "normalisation": lambda plan, study: (plan, study.model_copy(update={"data": study.data.model_copy(update={
        "preprocessing": study.data.preprocessing.model_copy(update={
            "normalize": NormalizeConfig(mean=[0.5], std=[0.25])})})})),
    "what trains": lambda plan, study: (plan, study.model_copy(update={
        "model": study.model.model_copy(update={"trainable": "head"})})),
    "weights' source": lambda plan, study: (plan, study.model_copy(update={
        "model": study.model.model_copy(update={"weights_source": "another statement"})})),
    "randomness": lambda plan, study: (plan, study.model_copy(update={"privacy_randomness": "reproducible"})),
}


@pytest.mark.parametrize("settings", ["the same", *_OTHER_STUDY, "not kept", "a number", "not a fingerprint"])
def test_a_checkpoint_made_with_other_settings_than_study_yaml_s_is_told_as_trained_afresh(study_folder, settings):
    """Status said "continues from its checkpoint" of a run whose settings study.yaml (rewritten by a rerun of the
    edited study file) now plans otherwise: `dpmed run` then deleted the checkpoint and trained from step 0. The key
    file keeps the settings' fingerprint; status compares it with study.yaml's, and where they agree says the run
    continues if the training data and starting weights, which it does not read, are unchanged. The study's
    normalisation and model section count as the plan does: status said a run continues "if its training data and
    starting weights are unchanged" whose images and weights were, and `dpmed run` trained it afresh for another
    data.preprocessing.normalize or model.trainable. A key file written before it kept the fingerprint, or with the
    field damaged (`dpmed run` does not read it, and continues), leaves the settings a condition too: status said
    "afresh" of a run that continued."""
    folder, _ = study_folder("a_seed0")
    files = folder.run("a_seed0")
    randomness = _dp_checkpoint(files.checkpoint, 5)
    resolved = read_resolved(folder.root)
    plan, study = _OTHER_STUDY.get(settings, lambda *made: made)(resolved.runs[0], resolved.study)
    kept = {"not kept": {}, "a number": {"settings": 5}, "not a fingerprint": {"settings": "2:not a sha256"}}.get(
        settings, {"settings": plan.fingerprint(study)})
    files.privacy_key.write_text(json.dumps({**json.loads(files.privacy_key.read_text()),
                                             "attempt": f"{ATTEMPT_FORMAT}:{'ab' * 32}", **kept}))
    [(_, state, detail)] = run_states(folder.root)
    assert state == "interrupted" and randomness.root_hex() not in detail
    if settings in _OTHER_STUDY:
        assert detail == ("cannot continue: made with other settings than study.yaml's now; the next `dpmed run` "
                          "deletes the checkpoint and trains this run afresh under a new key")
    elif settings == "the same":     # the study names no weights file: its settings tell the start
        assert detail == ("continues from its checkpoint at step 5 of 20 (saved under a minute ago) if its training "
                          "data are unchanged")
    else:
        assert detail == ("continues from its checkpoint at step 5 of 20 (saved under a minute ago) if its settings, "
                          "training data and starting weights are unchanged")


@pytest.mark.parametrize("made", ["an older", "a newer"])
def test_a_checkpoint_another_dpmed_fingerprinted_is_told_as_its_not_as_made_with_other_settings(study_folder, made):
    """A key file whose attempt another version of dpmed fingerprinted (`ATTEMPT_FORMAT`): `dpmed run` trains the
    run afresh and says that dpmed made it. Status said it "continues ... if its settings, training data and starting
    weights are unchanged" where the key file kept no settings' fingerprint, and "made with other settings" where it
    kept one in that dpmed's format, though nothing of the study need have changed."""
    folder, _ = study_folder("a_seed0")
    files = folder.run("a_seed0")
    _dp_checkpoint(files.checkpoint, 5)
    other = ATTEMPT_FORMAT - 1 if made == "an older" else ATTEMPT_FORMAT + 1
    key = json.loads(files.privacy_key.read_text())
    for kept in ({}, {"settings": f"{other}:{'ab' * 32}"}):
        files.privacy_key.write_text(json.dumps({**key, "attempt": f"{other}:{'cd' * 32}", **kept}))
        assert run_states(folder.root)[0][1:] == ("interrupted", (
            f"cannot continue: {made} dpmed made it, which fingerprints a run otherwise; the next `dpmed run` deletes "
            "the checkpoint and trains this run afresh under a new key"))


@pytest.mark.parametrize("attempt", ["not a fingerprint", f"{ATTEMPT_FORMAT}:{'cd' * 31}", 7, None])
def test_a_key_file_whose_attempt_is_damaged_and_settings_intact_is_told_as_trained_afresh_for_that(
        study_folder, attempt):
    """A key file whose attempt fingerprint is garbled, beside a settings' fingerprint equal to study.yaml's: `dpmed
    run` matches no attempt to it and trains afresh, while status said the run continues (a garbled attempt read as an
    older dpmed's bare hash) and the run's log blamed an older dpmed with other settings or data."""
    folder, _ = study_folder("a_seed0")
    files = folder.run("a_seed0")
    _dp_checkpoint(files.checkpoint, 5)
    resolved = read_resolved(folder.root)
    key = {**json.loads(files.privacy_key.read_text()), "settings": resolved.runs[0].fingerprint(resolved.study)}
    files.privacy_key.write_text(json.dumps({**key, "attempt": attempt}))
    assert run_states(folder.root)[0][1:] == ("interrupted", (
        f"cannot continue: the attempt fingerprint in its privacy key file {files.privacy_key} is damaged, so the "
        "attempt the checkpoint belongs to cannot be told; the next `dpmed run` deletes the checkpoint and trains "
        "this run afresh under a new key"))


@pytest.mark.parametrize("attempt", ["a bare hash", "this dpmed's"])
def test_a_checkpoint_under_a_bare_hash_is_told_to_continue_only_if_its_older_dpmed_hashed_the_run_alike(
        study_folder, attempt):
    """A key file whose attempt is a bare hash was written before dpmed named how it fingerprints a run: `dpmed run`
    continues its checkpoint only where that hash is this dpmed's, and a folder an early-December dpmed interrupted
    was trained afresh where status had said it continues if the settings, data and weights were unchanged, as
    they were. Status names that condition; an attempt in this dpmed's format is told as before."""
    folder, _ = study_folder("a_seed0")
    files = folder.run("a_seed0")
    _dp_checkpoint(files.checkpoint, 5)
    key = json.loads(files.privacy_key.read_text())
    files.privacy_key.write_text(json.dumps({**key, "attempt": "cd" * 32 if attempt == "a bare hash" else
                                             f"{ATTEMPT_FORMAT}:{'cd' * 32}"}))
    [(_, state, detail)] = run_states(folder.root)
    assert state == "interrupted" and detail.startswith("continues from its checkpoint at step 5 of 20")
    assert detail.endswith(IF_UNCHANGED if attempt == "a bare hash" else
                           "if its settings, training data and starting weights are unchanged")


@pytest.mark.parametrize("damage", ["mixed", "another key", "no key"])
def test_a_checkpoint_that_dpmed_run_would_not_continue_is_told_so_with_its_reason(study_folder, damage):
    """Status said "continues from its checkpoint" of one whose streams stand where an earlier step left them (the
    checkpoint of step 5 with the positions of step 3: mixed from two checkpoints of the run), of one saved under
    another key than the one beside it, and of one whose key is gone: `dpmed run` refuses the first two, and deletes
    the last to train afresh. Status says why, and never the key or the streams' word counts (N per step)."""
    folder, _ = study_folder("a_seed0")
    files = folder.run("a_seed0")
    randomness = _dp_checkpoint(files.checkpoint, 5, drawn=3 if damage == "mixed" else None)
    if damage == "another key":
        _key(files.checkpoint)
    elif damage == "no key":
        files.privacy_key.unlink()
    [(_, state, detail)] = run_states(folder.root)
    assert state == "interrupted" and detail.startswith("cannot continue: ")
    assert {"mixed": "its privacy stream 'sampling' stands behind where step 5 leaves it",
            "another key": "belongs to another key", "no key": "is missing or damaged"}[damage] in detail
    assert ("the next `dpmed run` deletes the checkpoint" if damage == "no key" else
            "delete it and the privacy key beside it") in detail
    assert randomness.root_hex() not in detail and not any(str(PER_STEP["sampling"] * k) in detail for k in (3, 5))


@pytest.mark.parametrize("mode", ["secure", "reproducible"])
def test_a_run_whose_key_is_gone_is_told_to_train_afresh_under_a_new_key_only_where_dpmed_run_makes_one(
        study_folder, mode):
    """Status said a run whose key file is gone trains afresh "under a new key" in reproducible mode too, where
    `dpmed run` derives the same key from the seed and run id again (and says no new key in its log)."""
    folder, _ = study_folder("a_seed0")
    study = yaml.safe_load(folder.resolved_study.read_text())
    study["study"]["privacy_randomness"] = mode
    folder.resolved_study.write_text(yaml.safe_dump(study, sort_keys=False))
    files = folder.run("a_seed0")
    _dp_checkpoint(files.checkpoint, 5)
    files.privacy_key.unlink()
    [(_, state, detail)] = run_states(folder.root)
    assert state == "interrupted" and detail == (
        f"cannot continue: its privacy key {files.privacy_key} is missing or damaged; the next `dpmed run` deletes "
        "the checkpoint and trains this run afresh" + (" under a new key" if mode == "secure" else ""))


def test_a_key_file_that_cannot_be_read_leaves_the_run_unknown_not_trained_afresh(study_folder, monkeypatch):
    """As a colleague reads a study folder whose private/ was opened to them but not its owner-only key: status said
    the next `dpmed run` deletes the checkpoint and trains afresh, which its owner's run does not. (Simulated: the
    tests may run as root, whom no file mode stops.)"""
    import pathlib

    folder, _ = study_folder("a_seed0")
    files = folder.run("a_seed0")
    _dp_checkpoint(files.checkpoint, 5)
    read_text = pathlib.Path.read_text

    def denied(self, *args, **kwargs):
        if self == files.privacy_key:
            raise PermissionError(13, "Permission denied", str(self))
        return read_text(self, *args, **kwargs)
    monkeypatch.setattr(pathlib.Path, "read_text", denied)
    [(_, state, detail)] = run_states(folder.root)
    assert state == "unknown" and f"(Permission denied: {files.privacy_key})" in detail


def _with_weights(folder: StudyFolder, weights, *, pretrain: bool = False) -> None:
    """Rewrite the folder's study.yaml as that of a study whose arms start from the file ``weights``, directly or
    through public pretraining started from it."""
    resolved = read_resolved(folder.root)
    study = resolved.study.model_copy(update={
        "model": resolved.study.model.model_copy(update={"weights": weights, "weights_source": "a test"}),
        "pretrain": None if not pretrain else Study.model_validate({
            "name": "p", "arms": [{"name": "a", "mechanism": "none"}],
            "pretrain": {"public": "another phantom", "data": {"source": "phantom"}}}).pretrain})
    folder.resolved_study.write_text(yaml.safe_dump(resolved.model_copy(update={"study": study}).model_dump(
        mode="json"), sort_keys=False))


def _start(weights, *, pretrain: bool = False) -> StartRecord:
    """The start `dpmed.pretraining.prepare_start` records for model.weights ``weights`` as they are now."""
    sha = file_sha256(weights)
    if not pretrain:
        return StartRecord(weights=str(weights), sha256=sha, trained_on="a test", n_trainable=1, n_frozen=0)
    record = PretrainRecord(dataset="phantom", task="binary", public="another phantom", n_train=1, n_val=1, n_test=1,
                            image_shape=(1, 8, 8), model="small_cnn", training={}, seed=0, steps=1, seconds=1.0,
                            key="k", weights="pre.pt", sha256="1" * 64, near_duplicate_bits=30, start_weights=sha)
    return StartRecord(weights="pre.pt", sha256="1" * 64, trained_on="public", n_trainable=1, n_frozen=0,
                       pretraining=record)


def _finished_from_weights(folder: StudyFolder, records, tmp_path):
    """A study whose arms start from a model.weights file, and its run a_seed0 finished from it: the file."""
    weights = tmp_path / "w.pt"
    weights.write_bytes(b"the weights the runs started from")
    _with_weights(folder, weights)
    files = folder.run("a_seed0")
    files.make()
    _finish(files, records["a_seed0"].model_copy(update={"start": _start(weights)}))
    return weights


@pytest.mark.parametrize("pretrain", [False, True])
def test_a_finished_run_started_from_other_contents_of_model_weights_is_told_refused(study_folder, tmp_path,
                                                                                      pretrain):
    """Other bytes in the model.weights file at the same path: `dpmed run` refuses the study (its finished runs
    started from other weights, `dpmed.pretraining.refuse_other_starts`; with public pretraining, from weights
    pretrained from other ones), while status listed them as plainly finished. It hashes the file (no image) and says
    so of each, the study file's and one it no longer lists alike (`dpmed run` checks every finished run); a file it
    cannot read now is no change it can tell."""
    folder, records = study_folder("a_seed0")
    weights = tmp_path / "w.pt"
    weights.write_bytes(b"the weights the runs started from")
    _with_weights(folder, weights, pretrain=pretrain)
    start = _start(weights, pretrain=pretrain)
    for run_id in ("a_seed0", "z_seed9"):
        files = folder.run(run_id)
        files.make()
        _finish(files, records["a_seed0"].model_copy(update={"run_id": run_id, "start": start}))
    assert [detail for _, _, detail in run_states(folder.root)] == [
        "", "not in the study file now, but in this folder: the study's eps still counts it"]
    weights.write_bytes(b"other weights at the same path")
    changed = (f"started from other contents of model.weights ({weights}) than the file holds now: the next `dpmed "
               "run` refuses the study; restore the file, use another output folder (--out), or delete this run to "
               "retrain it")
    assert run_states(folder.root) == [
        ("a_seed0", "finished", changed),
        ("z_seed9", "finished", f"not in the study file now, but in this folder: the study's eps still counts it; "
                                f"{changed}")]
    weights.unlink()        # no change it can tell: the row of the file that is gone says what run does
    assert [state[:2] for state in run_states(folder.root)] == [
        ("model.weights", "unreadable"), ("a_seed0", "finished"), ("z_seed9", "finished")]
    assert run_states(folder.root)[1][2] == ""


def _denied(path):
    raise PermissionError(13, "Permission denied", str(path))


@pytest.mark.parametrize("damage, said", [
    (lambda weights, monkeypatch: weights.unlink(), "does not exist"),
    (lambda weights, monkeypatch: (weights.unlink(), weights.mkdir()), "is a folder"),
    (lambda weights, monkeypatch: monkeypatch.setattr(dpmed.states, "file_sha256", _denied),
     "cannot be read (Permission denied)")], ids=["missing", "folder", "unreadable"])
def test_a_model_weights_file_that_cannot_be_read_is_told_once_as_what_run_refuses(study_folder, tmp_path,
                                                                                    monkeypatch, damage, said):
    """`dpmed run` refuses a study file whose model.weights is gone, a folder or unreadable, whatever its runs' state,
    while status listed its finished runs as plainly finished (and a folder or a file it may not read must not end
    in a traceback). One row before the runs says what run does and what to do; the runs keep their own states."""
    folder, records = study_folder("a_seed0", "b_seed1")
    weights = _finished_from_weights(folder, records, tmp_path)
    assert run_states(folder.root) == [("a_seed0", "finished", ""), ("b_seed1", "pending", "")]
    damage(weights, monkeypatch)
    assert run_states(folder.root) == [
        ("model.weights", "unreadable", f"{weights} {said}: the next `dpmed run` refuses the study before it reads any "
                                        "data or trains; restore the file, or set model.weights in the study file to "
                                        "the weights file its runs start from"),
        ("a_seed0", "finished", ""), ("b_seed1", "pending", "")]


@pytest.mark.parametrize("damaged", ["model.weights", "study.yaml"])
def test_status_counts_runs_only_and_tells_a_file_the_study_needs_apart(study_folder, tmp_path, capsys, damaged):
    """Status's summary counted the row of a model.weights file that cannot be read, or of an unreadable study.yaml,
    as one more run: "1 finished, 1 unreadable" of a study of one run. It counts the runs, and names the file."""
    from dpmed.cli import main

    folder, records = study_folder("a_seed0")
    weights = _finished_from_weights(folder, records, tmp_path)
    if damaged == "model.weights":
        weights.unlink()
    else:
        folder.resolved_study.write_bytes(b"study: [unclosed\n")
    assert main(["status", str(folder.root)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{damaged:<36} unreadable: ") and lines[1].startswith("a_seed0"), lines
    assert lines[-1] == f"1 finished; {damaged} unreadable", lines


def test_status_of_an_unreadable_study_yaml_and_no_run_names_the_file_alone(study_folder, capsys):
    """Without a run to count, the summary is the file's name and state, not led by the separator of a count that
    is not there."""
    from dpmed.cli import main

    folder, _ = study_folder("a_seed0")
    folder.resolved_study.write_bytes(b"study: [unclosed\n")
    assert main(["status", str(folder.root)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{'study.yaml':<36} unreadable: ") and lines[-1] == "study.yaml unreadable", lines


def test_an_interrupted_run_after_public_pretraining_keeps_its_starting_weights_a_condition(study_folder, tmp_path):
    """The pretrained weights are those of the public images, which status does not read: where the model.weights
    file pretraining started from is unchanged, the starting weights stay a condition; where it changed, the run
    trains afresh (the pretraining, and so the start, is another)."""
    folder, _ = study_folder("a_seed0")
    weights = tmp_path / "w.pt"
    weights.write_bytes(b"the weights pretraining started from")
    _with_weights(folder, weights, pretrain=True)
    files = folder.run("a_seed0")
    _dp_checkpoint(files.checkpoint, 5)
    plan, study = read_resolved(folder.root).runs[0], read_resolved(folder.root).study
    files.privacy_key.write_text(json.dumps({**json.loads(files.privacy_key.read_text()),
                                             "attempt": f"{ATTEMPT_FORMAT}:{'ab' * 32}",
                                             "settings": plan.fingerprint(study), "weights": file_sha256(weights)}))
    assert run_states(folder.root)[0][2] == ("continues from its checkpoint at step 5 of 20 (saved under a minute "
                                            "ago) if its training data and starting weights are unchanged")
    weights.write_bytes(b"other weights at the same path")
    assert run_states(folder.root)[0][2].startswith(
        f"cannot continue: started from other contents of model.weights ({weights}) than the file holds now")
