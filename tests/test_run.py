"""What `dpmed.run` settles before and around training, tested without training: which earlier attempt's key may
serve again (the same settings and the same training images, labels and patients; never another's, whose batches
and noise would then be shared), what another attempt left being deleted, the local DP release drawn from its own
stream, and the starting weights checked against what the study recorded."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import traceback
from pathlib import Path

import numpy as np
import pytest
import torch

from dpmed.config import load_study, plan_runs
from dpmed.config.schema import PretrainConfig
from dpmed.errors import ConfigError
from dpmed.folders import StudyFolder, file_sha256
from dpmed.mechanisms import MECHANISMS, PlanContext, mechanism_info
from dpmed.models import build_model
from dpmed.randomness import PrivacyRandomness
from dpmed.records import PretrainRecord, StartRecord
from dpmed.run import ATTEMPT_FORMAT, RunContext, _attempt, _privacy_randomness, _training_set, start_model
from dpmed.states import _checkpoint_detail, _start_of
from dpmed.study import load_study_data, plan_study

STUDY = ("name: s\ndata: {source: phantom, n_images: 120, image_size: 16}\nseeds: [3]\n"
         "arms: [{name: base, mechanism: none}, {name: lap, mechanism: pixel_laplace, scale: 2}]\n")


def _planned(tmp_path_factory, text: str):
    """(study, dataset, its run plans) of the study ``text``: read and planned as `dpmed run` does, not trained."""
    path = tmp_path_factory.mktemp("study") / "study.yaml"
    path.write_text(text, encoding="utf-8")
    study = load_study(path)
    dataset = load_study_data(study)
    return study, dataset, plan_study(study, dataset)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    study, dataset, plans = _planned(tmp_path_factory, STUDY)
    return study, dataset, {p.arm: p for p in plans}


def _with_train(dataset, **arrays):
    return dataclasses.replace(dataset, train=dataclasses.replace(dataset.train, **arrays))


def test_an_attempt_is_another_where_the_training_images_labels_or_patients_differ(prepared):
    study, dataset, plans = prepared
    context = RunContext(dataset=dataset, evaluation=study.evaluation)
    key = _attempt(plans["base"], context)
    assert _attempt(plans["base"], dataclasses.replace(context, dataset=_with_train(dataset))) == key
    images = dataset.train.images.copy()
    images[5, 0, 3, 3] += 0.25
    labels = dataset.train.labels.copy()
    labels[0] = 1 - labels[0]
    ids = dataset.train.patient_ids.copy()
    first, other = 0, int(np.flatnonzero(ids != ids[0])[0])
    ids[[first, other]] = ids[[other, first]]                        # two images change patients, nothing else
    for changed in ({"images": images}, {"labels": labels}, {"patient_ids": ids}):
        assert _attempt(plans["base"], dataclasses.replace(context, dataset=_with_train(dataset, **changed))) != key
    assert _attempt(plans["lap"], context) != key
    assert _attempt(plans["base"], dataclasses.replace(context, privacy_randomness="reproducible")) != key


def test_an_attempt_is_another_where_the_model_starts_elsewhere_or_the_images_are_normalised_otherwise(prepared):
    """The checkpoint's own check reads the training settings, not where the model started nor the normalisation:
    the attempt's hash is what keeps a run from continuing with another start's checkpoint under the same key."""
    study, dataset, plans = prepared
    context = RunContext(dataset=dataset, evaluation=study.evaluation)
    key = _attempt(plans["base"], context)
    start = StartRecord(weights="a.pt", sha256="0" * 64, n_trainable=1, n_frozen=0)
    started = _attempt(plans["base"], dataclasses.replace(context, start=start))
    assert started != key
    other = start.model_copy(update={"sha256": "1" * 64})
    assert _attempt(plans["base"], dataclasses.replace(context, start=other)) not in (key, started)
    normalised = dataclasses.replace(dataset, normalization=((0.5,), (0.25,)))
    assert _attempt(plans["base"], dataclasses.replace(context, dataset=normalised)) != key


def test_an_attempt_with_public_pretraining_is_the_same_wherever_the_study_folder_lies(prepared):
    """The pretrained weights' cache entry lies in the study folder, and the start's record names them where they
    are found now: a folder moved, or resumed under another spelling of --out, gave another attempt, and `dpmed run`
    deleted a checkpoint that `dpmed status` said continues. What the weights are, and what the study says of them,
    still make another attempt."""
    study, dataset, plans = prepared
    pretraining = PretrainRecord(dataset="public", task="binary", public="published", n_train=1, n_val=1, n_test=1,
                                 image_shape=(1, 16, 16), model="m", training=study.training, seed=0, steps=1,
                                 seconds=1.0, key="k", weights="results/s/pretrain/k/weights.pt", sha256="0" * 64,
                                 near_duplicate_bits=8)
    start = StartRecord(weights=pretraining.weights, sha256="0" * 64, n_trainable=1, n_frozen=0,
                        pretraining=pretraining)

    def attempt(**changed) -> str:
        record = pretraining.model_copy(update=changed)
        return _attempt(plans["base"], RunContext(dataset=dataset, evaluation=study.evaluation, start=start.model_copy(
            update={"weights": record.weights, "sha256": record.sha256, "pretraining": record})))
    key = attempt()
    # moved, reached otherwise, trained again in other time or threads: the same weights
    assert attempt(weights="/elsewhere/s/pretrain/k/weights.pt") == key
    # the public data's folder moved or renamed: the reader's record names it, the weights' key hashes its images
    assert attempt(data={"format": "folders", "path": "/data/public"}) == attempt(
        data={"format": "folders", "path": "/data/public-renamed"})
    assert attempt(seconds=2.5, training=study.training.model_copy(update={"threads": 7, "device": "cpu"})) == key
    for changed in ({"sha256": "1" * 64}, {"public": "published elsewhere"}, {"near_duplicate_bits": 9},
                    {"seed": 1}, {"training": study.training.model_copy(update={"batch_size": 3})}):
        assert attempt(**changed) != key, changed


def test_an_attempt_s_key_hashes_the_training_images_where_they_are_not_a_copy_of_them(prepared):
    """Before, the training images were copied into a bytes object to be hashed: every worker held them twice."""
    import tracemalloc

    study, dataset, plans = prepared
    train = dataset.train
    big = _with_train(dataset, masks=None, **{name: np.repeat(getattr(train, name), 50, axis=0)
                                              for name in ("images", "labels", "patient_ids", "sex", "age")})
    context = RunContext(dataset=big, evaluation=study.evaluation)
    tracemalloc.start()
    try:
        _attempt(plans["base"], context)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < big.train.images.nbytes / 4, (peak, big.train.images.nbytes)


# What `_attempt` fingerprints as ATTEMPT_FORMAT 3 makes it, pinned: a change detector, not a truth about the
# settings. A change to either side without the other fails the test below, which says what to do.
PINNED_FORMAT = 3
_TRAINING = {"augmentation", "augmentation.crop_padding", "augmentation.flip", "augmentation.multiplicity",
             "batch_size", "dp_engine", "ema_decay", "epochs", "learning_rate", "lr_scaling", "lr_schedule",
             "lr_schedule.gamma", "lr_schedule.kind", "lr_schedule.milestones", "lr_schedule.warmup_fraction",
             "momentum", "optimizer", "reference_batch_size", "steps", "weight_decay"}
PINNED_PLAN_KEYS = ({"arm", "audit", "audit.canaries", "audit.confidence", "audit.kind", "model", "privacy",
                     "run_id", "seed", "swept", "swept.key", "swept.tag", "swept.value", "training"}
                    | {f"training.{k}" for k in _TRAINING})
PINNED_PRIVACY_KEYS = {
    "none": {"mechanism"},
    "pixel_laplace": {"mechanism", "dimension", "scale", "target_epsilon_image"},
    "pixel_gaussian": {"mechanism", "delta", "dimension", "std", "target_epsilon_image"},
    "scalar_shift": {"mechanism", "scale"},
    "dp_sgd": {"mechanism", "accountant", "accountant_note", "attack", "attack.batches", "attack.structure",
               "attack.threshold_quantile", "delta", "expected_batch_size", "image_cap_key", "max_grad_norm",
               "max_images_per_patient", "n_units", "noise", "noise_given", "noise_multiplier", "patient_guarantee",
               "patient_guarantee.formula_delta", "patient_guarantee.formula_epsilon", "patient_guarantee.k",
               "patient_guarantee.statement", "patient_guarantee.tight_epsilon", "patients_known", "sample_rate",
               "sampling", "size_epsilon", "steps", "target_epsilon", "unit"},
}
PINNED_START_KEYS = ({"weights", "sha256", "trained_on", "trainable", "n_trainable", "n_frozen", "loaded", "kept",
                      "head_rows", "pretraining"}
                     | {f"pretraining.{k}" for k in (
                         "dataset", "task", "label_names", "public", "data", "n_train", "n_val", "n_test",
                         "image_shape", "model", "training", "seed", "steps", "seconds", "key", "weights", "sha256",
                         "validation_auroc", "overlap_checks", "near_duplicate_bits", "start_weights")}
                     | {f"pretraining.training.{k}" for k in _TRAINING | {"device", "physical_batch_size", "threads"}})
# Every mechanism, with each optional part of a plan's settings filled (swept values, an audit, augmentation, the
# attack, the image unit's patient guarantee), so that its keys show.
_EVERY_PART = """
name: s
seeds: [0]
training: {epochs: 2, batch_size: 10, augmentation: {multiplicity: 2}}
arms:
  - {name: base, mechanism: none, audit: {canaries: 20}}
  - {name: lap, mechanism: pixel_laplace, target_epsilon_image: 512}
  - {name: gauss, mechanism: pixel_gaussian, target_epsilon_image: 512}
  - {name: shift, mechanism: scalar_shift, scale: 2}
  - {name: dp, mechanism: dp_sgd, noise_multiplier: 1, attack: {batches: 2}}
  - {name: img, mechanism: dp_sgd, noise_multiplier: 1, privacy_unit: image, max_images_per_patient: 2}
"""


def _key_paths(data, prefix: str = "") -> set[str]:
    """The dotted key of every mapping entry in JSON ``data``, a list's entries' under the list's own key."""
    if isinstance(data, dict):
        return set().union(*({prefix + k} | _key_paths(v, f"{prefix}{k}.") for k, v in data.items()))
    if isinstance(data, list):
        return set().union(*(_key_paths(v, prefix) for v in data))
    return set()


def _fingerprint_as_format_3(plan, context) -> str:
    """ATTEMPT_FORMAT 3 as its comment and `_attempt`'s docstring state it, written out again: format 2 hashed the
    start's record whole, where the pretrained weights lie and how long they took included."""
    start = None if context.start is None else context.start.model_dump(mode="json")
    if start is not None and start["pretraining"] is not None:
        del start["weights"], start["pretraining"]["weights"], start["pretraining"]["seconds"]
        del start["pretraining"]["data"]
        for key in ("device", "physical_batch_size", "threads"):
            del start["pretraining"]["training"][key]
    digest = hashlib.sha256(json.dumps({
        "plan": plan.settings(), "randomness": context.privacy_randomness, "start": start,
        "normalization": str(context.dataset.normalization)}, sort_keys=True).encode())
    train = context.dataset.train
    for array in (train.images, train.labels):
        digest.update(np.ascontiguousarray(array).tobytes())
        digest.update(str(array.shape).encode())
    digest.update("\0".join(map(str, train.patient_ids)).encode())
    return f"3:{digest.hexdigest()}"


def _settings_fingerprint_as_format_3(plan, study) -> str:
    """`RunPlan.fingerprint` as ATTEMPT_FORMAT 3 makes it, written out again: `dpmed status` compares it with the key
    file's, so a recipe changed without the format would tell every interrupted run of an earlier dpmed as made with
    other settings."""
    normalize, pretrain = study.data.preprocessing.normalize, study.pretrain
    text = json.dumps({"plan": plan.settings(), "randomness": study.privacy_randomness,
                       "normalize": None if normalize is None else [normalize.mean, normalize.std],
                       "model": study.model.model_dump(mode="json"),
                       "pretrain": None if pretrain is None else {
                           "public": pretrain.public, "near_duplicate_bits": pretrain.near_duplicate_bits,
                           "seed": pretrain.seed, "training": pretrain.training.computed_settings()}},
                      sort_keys=True)
    return f"3:{hashlib.sha256(text.encode()).hexdigest()}"


def test_the_attempt_format_is_bumped_with_what_an_attempt_is_fingerprinted_from(prepared, tmp_path):
    """A checkpoint whose key file's format differs from ATTEMPT_FORMAT is said to be another dpmed's; one of the
    same format but another fingerprint, to be made with other settings or data. So a plan's settings that gain or
    lose a key, or a fingerprint hashed otherwise, must come with a new ATTEMPT_FORMAT, which nothing else enforces.

    A change detector: the key names of every mechanism's settings, of the study's start and the recipes of both
    fingerprints (the attempt's, and its settings part that `dpmed status` compares) are pinned beside the format
    they belong to, and a change of either alone fails here."""
    bump = ("bump ATTEMPT_FORMAT in dpmed/config/plans.py, then pin the new format, key names and recipe here "
            "(PINNED_FORMAT and its neighbours): a checkpoint of the old format is then named as an older dpmed's")
    assert ATTEMPT_FORMAT == PINNED_FORMAT, f"ATTEMPT_FORMAT changed: {bump}"
    study_file = tmp_path / "every_part.yaml"
    study_file.write_text(_EVERY_PART, encoding="utf-8")
    every_part = load_study(study_file)
    planned = plan_runs(every_part, PlanContext(images_per_patient=np.array([1] * 30 + [2] * 20),
                                                            image_shape=(1, 16, 16)))
    assert {p.mechanism for p in planned} == set(MECHANISMS), "give every mechanism an arm above and pin its keys"
    for plan in planned:
        for mode in ("secure", "reproducible"):
            study = every_part.model_copy(update={"privacy_randomness": mode})
            assert plan.fingerprint(study) == _settings_fingerprint_as_format_3(plan, study), (
                f"the settings' fingerprint (RunPlan.fingerprint) is made otherwise: {bump}")
    plan_keys, privacy_keys = set(), {}
    for plan in planned:
        keys = _key_paths(plan.settings())
        plan_keys |= {k for k in keys if not k.startswith("privacy.")}
        privacy_keys.setdefault(plan.mechanism, set()).update(k.removeprefix("privacy.") for k in keys
                                                               if k.startswith("privacy."))
    assert plan_keys == PINNED_PLAN_KEYS, f"a plan's settings gained or lost a key: {bump}"
    assert privacy_keys == PINNED_PRIVACY_KEYS, f"a privacy plan's settings gained or lost a key: {bump}"
    study, dataset, plans = prepared
    pretraining = PretrainRecord(dataset="public", task="binary", public="published", n_train=1, n_val=1, n_test=1,
                                 image_shape=(1, 16, 16), model="m", training=planned[0].training, seed=0, steps=1,
                                 seconds=1.0, key="k", weights="w.pt", sha256="0" * 64, near_duplicate_bits=8)
    start = StartRecord(weights="w.pt", sha256="0" * 64, n_trainable=1, n_frozen=0, pretraining=pretraining)
    assert _key_paths(start.model_dump(mode="json")) == PINNED_START_KEYS, f"the start gained or lost a key: {bump}"
    context = RunContext(dataset=dataset, evaluation=study.evaluation, start=start)
    for plan in plans.values():
        assert _attempt(plan, context) == _fingerprint_as_format_3(plan, context), (
            f"the fingerprint is made otherwise: {bump}")


def test_another_attempt_s_key_is_replaced_and_what_it_left_deleted(prepared, tmp_path):
    study, dataset, plans = prepared
    context = RunContext(dataset=dataset, evaluation=study.evaluation, study=study)
    folder = StudyFolder(tmp_path).run(plans["lap"].run_id)
    folder.make()
    old = PrivacyRandomness.secure()
    folder.privacy_key.write_text(json.dumps({"root": old.root_hex(), "attempt": "another attempt"}))
    folder.checkpoint.write_bytes(b"the other attempt's checkpoint")
    randomness = _privacy_randomness(plans["lap"], context, folder)
    assert not folder.checkpoint.exists() and randomness.root_hex() != old.root_hex()
    saved = json.loads(folder.privacy_key.read_text())
    assert saved == {"root": randomness.root_hex(), "attempt": _attempt(plans["lap"], context),
                     "settings": plans["lap"].fingerprint(study)}
    if os.name == "posix":
        assert folder.privacy_key.stat().st_mode & 0o777 == 0o600
    folder.checkpoint.write_bytes(b"this attempt's checkpoint")
    again = _privacy_randomness(plans["lap"], context, folder)      # the same attempt continues with its key
    assert again.root_hex() == randomness.root_hex() and folder.checkpoint.exists()


_OTHER_ATTEMPTS = {      # the key file's attempt, and why its checkpoint cannot continue
    "another attempt's": (f"{ATTEMPT_FORMAT}:{'ab' * 32}", "made with other settings or data"),
    "an older dpmed's": (f"{ATTEMPT_FORMAT - 1}:{'ab' * 32}", "an older dpmed made it"),
    "a bare hash": ("ab" * 32, "an older dpmed made it"),    # written before the format was
    "a newer dpmed's": (f"{ATTEMPT_FORMAT + 1}:{'ab' * 32}", "a newer dpmed made it"),
    "a garbled attempt": ("not a fingerprint", "the attempt fingerprint in its privacy key file is damaged"),
    "damaged": (None, "its privacy key is missing"), "missing": (None, "its privacy key is missing")}


def test_an_older_dpmed_s_attempt_of_the_same_fingerprint_continues(prepared, tmp_path, caplog):
    """The key file's attempt now begins with how it was fingerprinted; one an older dpmed wrote, a bare hash equal to
    this attempt's, is the same settings and data: its checkpoint continues, not deleted by an upgrade."""
    study, dataset, plans = prepared
    context = RunContext(dataset=dataset, evaluation=study.evaluation)
    folder = StudyFolder(tmp_path).run(plans["lap"].run_id)
    folder.make()
    old = PrivacyRandomness.secure()
    folder.privacy_key.write_text(json.dumps({"root": old.root_hex(),
                                              "attempt": _attempt(plans["lap"], context).partition(":")[2]}))
    folder.checkpoint.write_bytes(b"the older dpmed's checkpoint")
    with caplog.at_level("INFO", logger="dpmed.run"):
        assert _privacy_randomness(plans["lap"], context, folder).root_hex() == old.root_hex()
    assert folder.checkpoint.exists() and "afresh" not in caplog.text


@pytest.mark.parametrize("key", list(_OTHER_ATTEMPTS))
def test_a_checkpoint_that_cannot_continue_is_named_as_it_is_deleted(prepared, tmp_path, caplog, key):
    """`dpmed status` showed the run as continuing from its checkpoint, and `dpmed run` then trained it from step 0
    without a word: the user could not tell a resumed run from one that started afresh, nor why. A checkpoint an
    older dpmed left was said to be "made with other settings or data" where only dpmed changed: it is that
    dpmed's, and the run trains under a new key, not mixed with it."""
    study, dataset, plans = prepared
    context = RunContext(dataset=dataset, evaluation=study.evaluation)
    folder = StudyFolder(tmp_path).run(plans["lap"].run_id)
    folder.make()
    attempt, reason = _OTHER_ATTEMPTS[key]
    if key != "missing":
        folder.privacy_key.write_text(json.dumps({"root": PrivacyRandomness.secure().root_hex(),
                                                  "attempt": attempt}) if key != "damaged" else "{")
    folder.checkpoint.write_bytes(b"the other attempt's checkpoint")
    with caplog.at_level("INFO", logger="dpmed.run"):
        _privacy_randomness(plans["lap"], context, folder)
    assert f"{plans['lap'].run_id}: its checkpoint" in caplog.text and reason in caplog.text
    assert "trains afresh under a new privacy key" in caplog.text and not folder.checkpoint.exists()
    assert ("other settings or data" in caplog.text) == (key in ("another attempt's", "a bare hash"))
    caplog.clear()
    folder.checkpoint.write_bytes(b"this attempt's checkpoint")
    with caplog.at_level("INFO", logger="dpmed.run"):
        _privacy_randomness(plans["lap"], context, folder)      # the same attempt continues: nothing to say
    assert "afresh" not in caplog.text and folder.checkpoint.exists()


def test_a_run_given_no_study_continues_its_attempt_whatever_settings_fingerprint_is_kept(prepared, tmp_path):
    """dpmed as a library: a run given no study has no settings' fingerprint to compare with the one its key file
    keeps, and its attempt's own fingerprint covers the settings, so the checkpoint of this attempt continues under
    its key rather than being deleted and trained again."""
    study, dataset, plans = prepared
    plan = plans["lap"]
    context = RunContext(dataset=dataset, evaluation=study.evaluation)                   # no study
    folder = StudyFolder(tmp_path).run(plan.run_id)
    folder.make()
    torch.save({"progress": {"steps": 5, "of": 20}}, folder.checkpoint)
    root = PrivacyRandomness.secure().root_hex()
    folder.privacy_key.write_text(json.dumps({"root": root, "attempt": _attempt(plan, context),
                                              "settings": plans["base"].fingerprint(study)}))
    assert _privacy_randomness(plan, context, folder).root_hex() == root
    assert folder.checkpoint.exists()


def test_a_secure_run_s_key_is_fresh_and_never_the_one_its_published_seed_gives(prepared, tmp_path):
    """The same run in two output folders (a study run again elsewhere, with the same seed) gets two keys, neither
    the key its published seed and run id derive; a reproducible run's key is exactly that derived one."""
    study, dataset, plans = prepared
    plan = plans["lap"]
    derived = PrivacyRandomness.reproducible(seed=plan.seed, run_id=plan.run_id).root
    keys = []
    for where in ("a", "b"):
        folder = StudyFolder(tmp_path / where).run(plan.run_id)
        folder.make()
        randomness = _privacy_randomness(plan, RunContext(dataset=dataset, evaluation=study.evaluation), folder)
        assert randomness.mode == "secure"
        keys.append(randomness.root)
    assert keys[0] != keys[1] and derived not in keys
    folder = StudyFolder(tmp_path / "r").run(plan.run_id)
    folder.make()
    context = RunContext(dataset=dataset, evaluation=study.evaluation, privacy_randomness="reproducible")
    randomness = _privacy_randomness(plan, context, folder)
    assert randomness.root == derived and randomness.mode == "reproducible"


def test_the_local_dp_release_of_the_training_images_is_drawn_from_its_own_stream(prepared, tmp_path):
    study, dataset, plans = prepared
    plan = plans["lap"]
    folder = StudyFolder(tmp_path).run(plan.run_id)
    folder.make()

    def randomness():
        return PrivacyRandomness.reproducible(seed=plan.seed, run_id=plan.run_id)

    train_set, trial, events = _training_set(plan, dataset, randomness(), folder)
    transform = mechanism_info("pixel_laplace").image_mechanism(plan.privacy)
    expected = transform.apply(dataset.train.images, rng=randomness().stream("local_dp"))
    np.testing.assert_array_equal(train_set.images, expected)
    assert trial is None and len(events) == 1
    assert not np.array_equal(train_set.images, transform.apply(dataset.train.images,
                                                                rng=randomness().stream("examples")))


@pytest.mark.parametrize("channels", [1, 3])
def test_the_local_dp_release_is_accounted_for_every_value_noised_colour_channels_included(tmp_path_factory,
                                                                                           tmp_path, channels):
    """A grey phantom read with 3 channels is noised in 3 x 16 x 16 = 768 values: at b = 2 the recorded release
    costs d / b = 384 per image, 3 times the grey study's 128 (by hand), and the plan, the card the study announces
    before training and the card of the recorded release all state that d and that eps."""
    from dpmed.accounting import Ledger
    from dpmed.study import planned_card

    study, dataset, plans = _planned(tmp_path_factory, STUDY.replace("image_size: 16}",
                                                                     f"image_size: 16, channels: {channels}}}"))
    plan = next(p for p in plans if p.arm == "lap")
    folder = StudyFolder(tmp_path).run(plan.run_id)
    folder.make()
    train_set, _, events = _training_set(plan, dataset, PrivacyRandomness.reproducible(seed=3, run_id="r"), folder)
    assert train_set.images.shape[1:] == (channels, 16, 16)
    recorded = mechanism_info("pixel_laplace").card(plan.privacy, Ledger(events), "secure")
    announced = planned_card(plan, dataset.train.image_shape, "secure")
    assert plan.privacy.dimension == recorded.dimension_d == announced.dimension_d == channels * 256
    assert recorded.epsilon_image == announced.epsilon_image == channels * 128.0


def test_a_local_dp_run_of_several_epochs_is_one_release_of_its_images(tmp_path_factory, tmp_path):
    """The images are noised once, before training, and that copy serves all 3 epochs: the run's ledger holds one
    release, and its card d / b = 256 / 2 = 128 per image (by hand), not 3 times that. A fresh copy per epoch would
    be 3 releases, and the card would have to say 384."""
    import dpmed.run as run
    from dpmed.accounting import LaplaceImageEvent

    study, dataset, plans = _planned(tmp_path_factory, STUDY + "training: {epochs: 3, batch_size: 32}\n"
                                     "evaluation: {bootstrap_resamples: 10, fairness: null}\n")
    plan = next(p for p in plans if p.arm == "lap")
    assert plan.training.epochs == 3
    record = run.run_one(plan, RunContext(dataset=dataset, evaluation=study.evaluation, progress=False),
                         StudyFolder(tmp_path).run(plan.run_id))
    assert [type(e) for e in record.ledger.events] == [LaplaceImageEvent]
    assert record.privacy.epsilon_image == record.privacy.epsilon == 128.0 and record.privacy.is_dp
    assert "noised once" in record.privacy.scope and "every epoch" in record.privacy.scope


@pytest.mark.skipif(os.name == "nt", reason="Windows keeps no Unix permissions")
def test_a_run_s_staged_files_are_its_owners_alone_until_released_then_as_the_umask_makes_them(
        tmp_path_factory, tmp_path, monkeypatch, umask_022):
    """Until a run finishes, its model, predictions and local-DP examples lie in its private folder, which no eps
    covers yet: made with the umask's 0644 they were readable by anyone who could reach the folder (a `chmod -R a+X`
    of the results), beside the 0600 key and checkpoint. Released, they are shareable files like run.json."""
    import dpmed.run as run
    from dpmed.folders import RunFolder

    study, dataset, plans = _planned(tmp_path_factory, STUDY + "training: {epochs: 1, batch_size: 32}\n"
                                     "evaluation: {bootstrap_resamples: 10, fairness: null}\n")
    plan = next(p for p in plans if p.arm == "lap")
    folder = StudyFolder(tmp_path).run(plan.run_id)
    staged = {}
    release = RunFolder.release

    def looked_at(self):
        staged.update({p.name: p.stat().st_mode & 0o777 for p in self.unreleased(self.model).parent.iterdir()})
        release(self)
    monkeypatch.setattr(RunFolder, "release", looked_at)
    run.run_one(plan, RunContext(dataset=dataset, evaluation=study.evaluation, progress=False), folder)
    assert staged == {"model.pt": 0o600, "predictions.npz": 0o600, "ldp_examples.npz": 0o600}
    assert {p.name: p.stat().st_mode & 0o777 for p in folder.public.iterdir()} == dict.fromkeys(
        ("model.pt", "predictions.npz", "ldp_examples.npz", "run.json"), 0o644)


def test_starting_weights_must_be_the_file_the_study_recorded_and_load_as_it_counted(tmp_path):
    from dpmed.folders import file_sha256

    torch.manual_seed(0)
    saved = build_model("small_cnn", in_channels=1, num_outputs=2, image_size=16)
    path = tmp_path / "weights.pt"
    torch.save(saved.state_dict(), path)
    n = len(saved.state_dict())
    record = StartRecord(weights=str(path), sha256=file_sha256(path), n_trainable=1, n_frozen=0, loaded=n)
    torch.manual_seed(1)
    model = build_model("small_cnn", in_channels=1, num_outputs=2, image_size=16)
    start_model(model, "small_cnn", record)
    for name, value in model.state_dict().items():
        torch.testing.assert_close(value, saved.state_dict()[name])
    with pytest.raises(ConfigError, match="are missing or changed since the study was prepared"):
        start_model(model, "small_cnn", record.model_copy(update={"sha256": "0" * 64}))
    with pytest.raises(AssertionError, match=f"{n} tensors loaded from .* the study recorded {n - 1}"):
        start_model(model, "small_cnn", record.model_copy(update={"loaded": n - 1}))
    path.unlink()           # gone since the study was prepared: told as the study's error, not the file system's
    with pytest.raises(ConfigError, match="are missing or changed since the study was prepared"):
        start_model(model, "small_cnn", record)


def test_a_run_starts_from_the_bytes_its_record_names_even_where_the_file_is_replaced_after_the_hash(
        tmp_path, monkeypatch):
    """start_model hashed the starting weights file, then read it again to load it: a file replaced between the two
    reads (a user saving new weights under the same name while a study runs) started the run from weights other
    than those its card names by their sha256. The hash and the load are of one read."""
    import dpmed.run
    from dpmed.folders import file_sha256

    torch.manual_seed(0)
    saved = build_model("small_cnn", in_channels=1, num_outputs=2, image_size=16)
    path = tmp_path / "weights.pt"
    torch.save(saved.state_dict(), path)
    record = StartRecord(weights=str(path), sha256=file_sha256(path), n_trainable=1, n_frozen=0,
                         loaded=len(saved.state_dict()))
    other = {k: v + 1 for k, v in saved.state_dict().items()}
    read_bytes, replaced = Path.read_bytes, []

    def then_replaced(read):
        """``read`` of the file, which is then replaced by other weights: what a second read of it would load."""
        def reading(file):
            got = read(file)
            if Path(file) == path:
                torch.save(other, path)
                replaced.append(path)
            return got
        return reading
    monkeypatch.setattr(Path, "read_bytes", then_replaced(read_bytes))
    monkeypatch.setattr(dpmed.run, "file_sha256", then_replaced(file_sha256), raising=False)
    model = build_model("small_cnn", in_channels=1, num_outputs=2, image_size=16, seed=1)
    start_model(model, "small_cnn", record)
    assert replaced == [path]
    for name, value in model.state_dict().items():
        torch.testing.assert_close(value, saved.state_dict()[name])


NORMALISED = ("name: n\ndata: {source: phantom, n_images: 120, image_size: 16, "
              "preprocessing: {normalize: {mean: [0.5], std: [0.25]}}}\nseeds: [3, 4]\n"
              "privacy_randomness: reproducible\n"
              "training: {epochs: 1, batch_size: 32}\nevaluation: {bootstrap_resamples: 10, fairness: null}\n"
              "arms: [{name: lap, mechanism: pixel_laplace, scale: 2}, "
              "{name: audited, mechanism: none, audit: {canaries: 4}}]\n")


@pytest.fixture(scope="module")
def normalised(tmp_path_factory):
    study, dataset, plans = _planned(tmp_path_factory, NORMALISED)
    assert dataset.normalization == ((0.5,), (0.25,))
    return study, dataset, plans


def test_a_run_trains_on_the_released_images_normalised_from_its_seed_s_weights(normalised, tmp_path, monkeypatch):
    """The local DP arm's model sees the perturbed training images (the release its eps is for), normalised after the
    mechanism (METHODS.md s.1), and starts from the weights of its own seed; the released examples pair each test
    image with its own perturbation, from the examples stream."""
    import dpmed.run as run
    from dpmed.data import normalize

    study, dataset, plans = normalised
    seen, real = [], run.train

    def spy(model, data, *args, **kwargs):
        seen.append(({k: v.clone() for k, v in model.state_dict().items()}, data.images.copy()))
        return real(model, data, *args, **kwargs)

    monkeypatch.setattr(run, "train", spy)
    context = RunContext(dataset=dataset, evaluation=study.evaluation, progress=False,
                         privacy_randomness="reproducible")
    lap = [p for p in plans if p.arm == "lap"]
    for plan in lap:
        run.run_one(plan, context, StudyFolder(tmp_path).run(plan.run_id))
    transform = mechanism_info("pixel_laplace").image_mechanism(lap[0].privacy)
    for plan, (weights, images) in zip(lap, seen, strict=True):
        fresh = PrivacyRandomness.reproducible(seed=plan.seed, run_id=plan.run_id)
        released = transform.apply(dataset.train.images, rng=fresh.stream("local_dp"))
        np.testing.assert_allclose(images, normalize(released, (0.5,), (0.25,)), rtol=0, atol=1e-6)
        torch.manual_seed(plan.seed)
        initial = build_model(plan.model, in_channels=1, num_outputs=2, image_size=16).state_dict()
        for name, value in initial.items():
            torch.testing.assert_close(weights[name], value, rtol=0, atol=0)
        with np.load(StudyFolder(tmp_path).run(plan.run_id).examples) as examples:
            np.testing.assert_array_equal(examples["original"], dataset.test.images[:run.N_EXAMPLES])
            np.testing.assert_array_equal(examples["perturbed"], transform.apply(
                dataset.test.images[:run.N_EXAMPLES], rng=fresh.stream("examples")))
    first = next(iter(seen[0][0]))
    assert not torch.equal(seen[0][0][first], seen[1][0][first])                # two seeds, two initialisations


def test_a_run_tells_training_how_many_runs_train_beside_it(prepared, tmp_path, monkeypatch):
    """They share the memory its fixed features may take (`dpmed.training.fixed_features`)."""
    import dpmed.run as run

    study, dataset, plans = prepared
    told = []

    class Stop(Exception):
        pass

    def spy(*args, at_once, **kwargs):
        told.append(at_once)
        raise Stop
    monkeypatch.setattr(run, "train", spy)
    for at_once in (1, 3):
        context = RunContext(dataset=dataset, evaluation=study.evaluation, progress=False, at_once=at_once,
                             privacy_randomness="reproducible")
        with pytest.raises(Stop):
            run.run_one(plans["base"], context, StudyFolder(tmp_path).run(plans["base"].run_id))
    assert told == [1, 3]


def test_an_audit_scores_its_canaries_as_the_model_sees_images(normalised, tmp_path, monkeypatch):
    """Normalised, as in training: raw [0, 1] canaries would be scored off the images the model learnt."""
    import dpmed.run as run
    from dpmed.data import normalize

    study, dataset, plans = normalised
    trials, scored = [], []
    real_insert, real_predict = run.audit.insert_canaries_for, run.predict_logits

    def insert(*args, **kwargs):
        inserted = real_insert(*args, **kwargs)
        trials.append(inserted[1])
        return inserted

    def predict(model, data, **kwargs):
        scored.append(data.images.copy())
        return real_predict(model, data, **kwargs)

    monkeypatch.setattr(run.audit, "insert_canaries_for", insert)
    monkeypatch.setattr(run, "predict_logits", predict)
    plan = next(p for p in plans if p.arm == "audited")
    context = RunContext(dataset=dataset, evaluation=study.evaluation, progress=False,
                         privacy_randomness="reproducible")
    run.run_one(plan, context, StudyFolder(tmp_path).run(plan.run_id))
    (trial,), (images,) = trials, scored
    np.testing.assert_allclose(images, normalize(trial.canaries.images, (0.5,), (0.25,)), rtol=0, atol=1e-6)


IMAGE_UNIT_AUDIT = ("name: s\ndata: {source: phantom, n_images: 200, image_size: 16}\nseeds: [0]\n"
                    "arms: [{name: img, mechanism: dp_sgd, target_epsilon: 4, privacy_unit: image, "
                    "audit: {canaries: 40}}]\n")


def _audit_parts(plan, dataset, folder):
    """({(image, label) bytes} of every canary the run made, included or not; {image bytes} of the rest)."""
    randomness = PrivacyRandomness.reproducible(seed=plan.seed, run_id=plan.run_id)
    train_set, trial, _ = _training_set(plan, dataset, randomness, folder)
    rest = train_set.images[:len(train_set) - int(trial.included.sum())]
    return ({(x.tobytes(), y.tobytes()) for x, y in zip(trial.canaries.images, trial.canaries.labels, strict=True)},
            {x.tobytes() for x in rest})


def test_an_image_unit_audit_changes_its_training_set_by_the_removed_image_alone(tmp_path_factory, tmp_path):
    """Where the image is the unit, removing one image must change what trains by that image only, or the run's eps
    does not hold for it. Holding out one image of each drawn patient failed: removing the chosen image of a
    patient with two made the other image the canary, a second training image that changed."""
    study, dataset, plans = _planned(tmp_path_factory, IMAGE_UNIT_AUDIT)
    plan, = plans
    assert plan.privacy.unit == "image"
    folder = StudyFolder(tmp_path).run(plan.run_id)
    folder.make()
    canaries, rest = _audit_parts(plan, dataset, folder)
    ids = dataset.train.patient_ids.astype(str)
    names, counts = np.unique(ids, return_counts=True)
    twins = np.flatnonzero(np.isin(ids, names[counts > 1]))
    swapped = 0
    for i in twins:
        x = dataset.train.images[i].tobytes()
        keep = np.flatnonzero(np.arange(len(ids)) != i)
        less = dataclasses.replace(dataset, train=dataset.train.subset(keep))
        canaries_n, rest_n = _audit_parts(plan, less, folder)
        assert rest_n <= rest and rest - rest_n <= {x}
        assert canaries_n <= canaries and {c[0] for c in canaries - canaries_n} <= {x}
        swapped += bool(canaries - canaries_n)
    assert swapped            # the check reached an image that was itself a canary


SHUFFLED_AUDIT = ("name: s\ndata: {source: phantom, n_images: 200, image_size: 16}\nseeds: [0]\n"
                  "training: {epochs: 1, batch_size: 20}\nevaluation: {bootstrap_resamples: 10, fairness: null}\n"
                  "arms: [{name: shuffled, mechanism: dp_sgd, target_epsilon: 8, sampling: shuffle, "
                  "audit: {canaries: 20}}]\n")


def test_the_audit_of_a_shuffled_run_says_its_card_is_not_dp(tmp_path_factory, tmp_path):
    """Shuffled batches reproduce the source documents' DP-SGD, whose eps no accountant gives: the card has none and
    says "not DP: shuffled batches". The audit's statement said only that no eps is claimed, and where the study
    released its training-set size (as it does by default) the run failed after training on the eps it lacks."""
    import dpmed.run as run
    from dpmed.audit import AuditRecord

    study, dataset, _ = _planned(tmp_path_factory, SHUFFLED_AUDIT)
    n_patients = len(np.unique(dataset.train.patient_ids))
    plan, = plan_study(study, dataset, {"patients": n_patients})      # as `dpmed run` plans: N released at eps
    assert plan.privacy.sampling == "shuffle" and plan.privacy.size_epsilon > 0
    context = RunContext(dataset=dataset, evaluation=study.evaluation, progress=False,
                         privacy_randomness="reproducible")
    folder = StudyFolder(tmp_path).run(plan.run_id)
    record = run.run_one(plan, context, folder)
    audit = AuditRecord.model_validate_json(folder.audit.read_bytes())
    assert record.privacy.is_dp is False and audit.claimed_epsilon is None
    assert f"; no eps is claimed ({record.privacy.in_brief()}): the run has no privacy guarantee" in audit.statement
    assert "not DP: shuffled batches (a Poisson run would have eps " in audit.statement


def test_the_audit_states_a_dp_claim_without_a_not_dp_label_and_without_a_size_cost_it_did_not_pay():
    """The audit's statement of what it tests: for a secure run's card (is DP), the accountant and neighbours and
    the released size's share, nothing labelled not DP; for a card planned from exact counts (a direct caller's),
    no size share. Only reproducible-mode cards, labelled not DP, had been audited in-process."""
    from dpmed.mechanisms import PrivacyCard
    from dpmed.run import _audited_claim

    card = PrivacyCard(mechanism="dp_sgd", is_dp=True, statement="eps = 2", epsilon=2.0, delta=1e-5,
                       accountant="pld", unit="patient", size_epsilon=0.02)
    assert _audited_claim(card) == ("PLD, add/remove one patient; training alone: the card's 2 adds 0.02 for the "
                                    "released training-set size")
    assert _audited_claim(card.model_copy(update={"size_epsilon": None})) == "PLD, add/remove one patient"


def test_every_run_s_evaluation_warning_is_a_log_line_that_names_the_run(caplog):
    """Too many undefined redraws is warned of by the evaluation as a library does (a RuntimeWarning); Python shows
    such a warning once per place, so in a study of several runs only the first run's reached the terminal, with a
    source line and no run. Each run's is now a line of the log that names it; other warnings pass on unchanged."""
    import logging
    import warnings
    from dpmed.evaluation.utility import evaluate_utility
    from dpmed.run import _evaluation_warnings_logged

    y = np.array([0, 0, 0, 0, 0, 0, 0, 1])              # one positive: most redraws of 8 images draw none
    s = np.linspace(0.1, 0.9, 8)
    caplog.set_level(logging.WARNING, logger="dpmed.run")
    for run_id in ("dp_seed0", "dp_seed1"):
        with _evaluation_warnings_logged(run_id):
            evaluate_utility(kind="binary", label_names=["normal", "pneumonia"], val_labels=y, val_scores=s,
                             test_labels=y, test_scores=s, n_resamples=50, seed=0, confidence=0.95)
    lines = [r.getMessage() for r in caplog.records if "bootstrap redraws of the test set leave it undefined"
             in r.getMessage()]
    assert [line.split(":")[0] for line in lines if "test_auroc" in line] == ["dp_seed0", "dp_seed1"]
    with pytest.warns(UserWarning, match="not dpmed's"), _evaluation_warnings_logged("dp_seed0"):
        warnings.warn("not dpmed's", UserWarning)


def test_an_evaluation_that_fails_still_logs_the_warnings_it_gave_first(caplog):
    """A run whose evaluation raised after warning (explanations out of memory after the utility metrics warned of
    undefined redraws) lost those warnings with the error: they were told only once evaluation returned."""
    import logging
    import warnings
    from dpmed.evaluation.utility import evaluate_utility
    from dpmed.run import _evaluation_warnings_logged

    y = np.array([0, 0, 0, 0, 0, 0, 0, 1])
    s = np.linspace(0.1, 0.9, 8)
    caplog.set_level(logging.WARNING, logger="dpmed.run")
    with pytest.raises(MemoryError), _evaluation_warnings_logged("dp_seed0"):
        evaluate_utility(kind="binary", label_names=["normal", "pneumonia"], val_labels=y, val_scores=s,
                         test_labels=y, test_scores=s, n_resamples=50, seed=0, confidence=0.95)
        raise MemoryError
    assert any(r.getMessage().startswith("dp_seed0: test_auroc") for r in caplog.records), caplog.records
    with pytest.warns(UserWarning, match="not dpmed's"), pytest.raises(MemoryError), \
            _evaluation_warnings_logged("dp_seed0"):
        warnings.warn("not dpmed's", UserWarning)
        raise MemoryError


def test_a_traceback_of_a_run_stopped_as_its_key_file_is_written_never_shows_the_key(prepared, tmp_path,
                                                                                       monkeypatch):
    # A Ctrl-C that lands just after the key file replaced its temporary file leaves the key for the next attempt,
    # which draws all its noise from it: a traceback that shows each frame's locals (IPython's verbose mode, pytest
    # --showlocals, a crash reporter) must not print the text that was written.
    study, dataset, plans = prepared
    folder = StudyFolder(tmp_path).run(plans["lap"].run_id)
    folder.make()
    replace = os.replace

    def replaced_then_stopped(src, dst):
        replace(src, dst)
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", replaced_then_stopped)
    with pytest.raises(KeyboardInterrupt) as caught:
        _privacy_randomness(plans["lap"], RunContext(dataset=dataset, evaluation=study.evaluation), folder)
    monkeypatch.undo()
    frames = traceback.TracebackException.from_exception(caught.value, capture_locals=True).stack[1:]
    root = json.loads(folder.privacy_key.read_text())["root"]
    assert "write_atomic" in [frame.name for frame in frames]
    assert root not in "".join(map(str, [frame.locals for frame in frames]))


def test_training_and_evaluating_a_run_again_leave_the_callers_random_state_alone(tmp_path_factory, tmp_path):
    """dpmed as a library, or a study that evaluates finished runs again before it trains: a run's model is built
    from its own seed, and one evaluated again takes its released weights, so neither may move the caller's global
    torch or numpy draws (evaluating again drew its overwritten initialisation from the caller's generator). Its
    fairness and explanations included: evaluating again ran them inside a fork of torch's generator, which went
    when the model's build took its own seed."""
    import dpmed.run as run

    study, dataset, plans = _planned(tmp_path_factory, STUDY + "training: {epochs: 1, batch_size: 32}\n"
                                     "evaluation: {bootstrap_resamples: 10,"
                                     " explanations: {n_images: 4, deletion_steps: 2}}\n")
    plan = next(p for p in plans if p.arm == "base")
    context, folder = RunContext(dataset=dataset, evaluation=study.evaluation, progress=False), StudyFolder(tmp_path)
    with torch.random.fork_rng(devices=[]):
        before = torch.get_rng_state(), np.random.get_state()[1].copy()
        record = run.run_one(plan, context, folder.run(plan.run_id))
        trained = torch.get_rng_state(), np.random.get_state()[1].copy()
        run.reevaluate(record, plan, context, folder.run(plan.run_id))
        evaluated = torch.get_rng_state(), np.random.get_state()[1].copy()
    for state in (trained, evaluated):
        assert torch.equal(state[0], before[0]) and np.array_equal(state[1], before[1])


def test_a_run_pretrained_from_model_weights_keeps_that_file_s_hash_in_its_key_file(prepared, tmp_path):
    """What `dpmed status` hashes the model.weights file against: the file public pretraining started from, not the
    pretrained weights (a file in the study folder it never names). Kept as the latter, status told a checkpoint
    that continues as one started from other contents of model.weights, to be deleted."""
    study, dataset, plans = prepared
    plan = plans["lap"]
    weights = tmp_path / "w.pt"
    weights.write_bytes(b"the weights pretraining started from")
    study = study.model_copy(update={"model": study.model.model_copy(update={"weights": weights,
                                                                             "weights_source": "a test"}),
                                     "pretrain": PretrainConfig.model_validate(
                                         {"data": {"source": "random_processes", "n_images": 40},
                                          "public": "generated"})})
    pretraining = PretrainRecord(dataset="public", task="binary", public="generated", n_train=1, n_val=1, n_test=1,
                                 image_shape=(1, 16, 16), model="m", training=study.training, seed=0, steps=1,
                                 seconds=1.0, key="k", weights="pre.pt", sha256="1" * 64, near_duplicate_bits=8,
                                 start_weights=file_sha256(weights))
    start = StartRecord(weights="pre.pt", sha256="1" * 64, n_trainable=1, n_frozen=0, pretraining=pretraining)
    folder = StudyFolder(tmp_path / "s").run(plan.run_id)
    folder.make()
    _privacy_randomness(plan, RunContext(dataset=dataset, evaluation=study.evaluation, study=study, start=start),
                        folder)
    torch.save({"progress": {"steps": 5, "of": 20}}, folder.checkpoint)
    assert json.loads(folder.privacy_key.read_text())["weights"] == file_sha256(weights)
    detail, progress = _checkpoint_detail(folder.checkpoint, folder.privacy_key, "secure", plan.fingerprint(study),
                                          _start_of(study))
    assert detail.startswith("continues from its checkpoint at step 5 of 20") and progress == (5, 20), detail


def test_a_run_evaluated_again_runs_on_the_threads_this_study_asks_for_not_those_it_trained_with(
        tmp_path_factory, tmp_path, monkeypatch):
    """training.threads changes no result (`EXECUTION_ONLY`), so a study may change it and keep its finished runs: one
    evaluated again runs at the study's count now, as it runs on the study's device, not at its record's."""
    import dpmed.run as run

    study, dataset, plans = _planned(tmp_path_factory, STUDY + "training: {epochs: 1, batch_size: 32, threads: 1}\n"
                                     "evaluation: {bootstrap_resamples: 10, explanations: null, fairness: null}\n")
    plan = next(p for p in plans if p.arm == "base")
    context, folder = RunContext(dataset=dataset, evaluation=study.evaluation, progress=False), StudyFolder(tmp_path)
    record = run.run_one(plan, context, folder.run(plan.run_id))
    seen, assess = [], run.assess
    monkeypatch.setattr(run, "assess", lambda *a, **k: seen.append(torch.get_num_threads()) or assess(*a, **k))
    now = plan.model_copy(update={"training": plan.training.model_copy(update={"threads": 2})})
    run.reevaluate(record, now, context, folder.run(plan.run_id))
    assert record.plan.training.threads == 1 and seen == [2]


# Every state of an interrupted run's key file, beside a checkpoint: (its "attempt", its "settings") as functions of
# this attempt's fingerprint ``now``, another attempt's of the same settings on other training images ``images``, the
# settings' fingerprint ``shown`` and another run's ``other``; then what `dpmed status` says (afresh, or continues on
# the condition that the settings, data and weights are unchanged ("if ..."), the older dpmed that made it having
# fingerprinted the run alike ("if older ...")), and whether `dpmed run` continues. Here only the training images of
# "other images" rows changed: a continuation told on a condition that holds must continue.
_MISSING = object()
_KEY_FILES = {
    "no key file": (None, None, "afresh", False),
    "not JSON": ("{", None, "afresh", False),
    "no attempt": (_MISSING, "shown", "afresh", False),
    "attempt null": (lambda f: None, "shown", "afresh", False),
    "attempt a number": (lambda f: 7, "shown", "afresh", False),
    "attempt a list": (lambda f: [f["now"]], "shown", "afresh", False),
    "attempt garbled": (lambda f: "not a fingerprint", "shown", "afresh", False),
    "attempt in capitals": (lambda f: f["now"].upper(), "shown", "afresh", False),
    "attempt cut short": (lambda f: f["now"][:-1], "shown", "afresh", False),
    "attempt's format padded": (lambda f: "0" + f["now"], "shown", "afresh", False),
    "this attempt": (lambda f: f["now"], "shown", "if data", True),
    "this attempt, settings missing": (lambda f: f["now"], _MISSING, "if settings", True),
    "this attempt, settings garbled": (lambda f: f["now"], "garbled", "if settings", True),
    "this attempt, settings' format padded": (lambda f: f["now"], "padded", "if settings", True),
    "this attempt, settings other": (lambda f: f["now"], "other", "afresh", False),
    "other images": (lambda f: f["images"], "shown", "if data", False),
    "other images, settings missing": (lambda f: f["images"], _MISSING, "if settings", False),
    "other settings": (lambda f: f["other_run"], "other", "afresh", False),
    "an older format": (lambda f: f"{ATTEMPT_FORMAT - 1}:{f['hex']}", "shown", "afresh", False),
    "a newer format": (lambda f: f"{ATTEMPT_FORMAT + 1}:{f['hex']}", "shown", "afresh", False),
    "a bare hash alike": (lambda f: f["hex"], _MISSING, "if older", True),
    "a bare hash not alike": (lambda f: "ab" * 32, _MISSING, "if older", False),
    "a bare hash alike, settings equal": (lambda f: f["hex"], "shown", "if older", True),
    "a bare hash alike, settings other": (lambda f: f["hex"], "other", "if older", True),
}


@pytest.mark.parametrize("case", list(_KEY_FILES))
def test_status_tells_of_every_key_file_what_the_next_run_does_with_its_checkpoint(prepared, tmp_path, case):
    """`dpmed status` reads the key file and study.yaml, not the training data; `dpmed run` reads both. For every
    state the key file may be in, what status says of the checkpoint holds of what the run then does: "cannot
    continue" where the run trains afresh, and a continuation only on conditions that hold where the run
    continues."""
    study, dataset, plans = prepared
    plan = plans["lap"]
    context = RunContext(dataset=dataset, evaluation=study.evaluation, study=study)
    now = _attempt(plan, context)
    fingerprints = {"now": now, "hex": now.partition(":")[2],
                    "images": _attempt(plan, dataclasses.replace(context, dataset=_with_train(
                        dataset, labels=1 - dataset.train.labels))),
                    "other_run": _attempt(plans["base"], context)}
    settings = {"shown": plan.fingerprint(study), "other": plans["base"].fingerprint(study), "garbled": "3:x",
                "padded": "0" + plan.fingerprint(study)}
    attempt, kept, told, continues = _KEY_FILES[case]
    folder = StudyFolder(tmp_path).run(plan.run_id)
    folder.make()
    torch.save({"progress": {"steps": 5, "of": 20}}, folder.checkpoint)
    if attempt == "{":
        folder.privacy_key.write_text("{")
    elif attempt is not None:
        key = {"root": PrivacyRandomness.secure().root_hex()}
        key.update({} if attempt is _MISSING else {"attempt": attempt(fingerprints)})
        key.update({} if kept is _MISSING else {"settings": settings[kept]})
        folder.privacy_key.write_text(json.dumps(key))
    detail, progress = _checkpoint_detail(folder.checkpoint, folder.privacy_key, "secure", plan.fingerprint(study),
                                          _start_of(study))
    # the study names no weights file: where the settings are told the same, so is the start
    conditions = {"afresh": None, "if data": "if its training data are unchanged",
                  "if settings": "if its settings, training data and starting weights are unchanged",
                  "if older": ("if its settings, training data and starting weights are unchanged and the older "
                               "dpmed that made it fingerprinted the run as this one does")}
    if told == "afresh":
        assert detail.startswith("cannot continue: ") and detail.endswith(
            "the next `dpmed run` deletes the checkpoint and trains this run afresh under a new key"), detail
        assert progress is None     # `dpmed plan` estimates all its steps
    else:
        assert detail == f"continues from its checkpoint at step 5 of 20 (saved under a minute ago) {conditions[told]}"
        assert progress == (5, 20)  # `dpmed plan` estimates the 15 steps after it
    _privacy_randomness(plan, context, folder)
    assert folder.checkpoint.exists() == continues


@pytest.mark.parametrize("kept", [True, False])
@pytest.mark.parametrize("changed", [False, True])
def test_status_tells_a_checkpoint_started_from_other_contents_of_model_weights_as_the_run_treats_it(
        prepared, tmp_path, caplog, changed, kept):
    """Other bytes in the model.weights file at the same path: `dpmed run` deletes the checkpoint and trains afresh
    (the attempt's fingerprint covers the start's sha256), while `dpmed status`, which hashed no weights, said it
    "continues ... if its training data and starting weights are unchanged". The key file now keeps the sha256 of
    the file the attempt started from, and status, hashing the file (no image), tells the run trained afresh, or that
    it continues on the training data alone; under a key file that keeps no hash (an older dpmed's), the weights stay
    a condition, which a changed file fails."""
    study, dataset, plans = prepared
    plan = plans["lap"]
    weights = tmp_path / "w.pt"
    weights.write_bytes(b"the weights the attempt started from")
    study = study.model_copy(update={"model": study.model.model_copy(update={"weights": weights,
                                                                             "weights_source": "a test"})})

    def context() -> RunContext:       # as `dpmed.pretraining.prepare_start` records the file each time
        start = StartRecord(weights=str(weights), sha256=file_sha256(weights), n_trainable=1, n_frozen=0)
        return RunContext(dataset=dataset, evaluation=study.evaluation, study=study, start=start)

    folder = StudyFolder(tmp_path / "s").run(plan.run_id)
    folder.make()
    _privacy_randomness(plan, context(), folder)      # the attempt's key file, as `dpmed run` writes it
    torch.save({"progress": {"steps": 5, "of": 20}}, folder.checkpoint)
    key = json.loads(folder.privacy_key.read_text())
    assert key["weights"] == file_sha256(weights)
    if not kept:
        folder.privacy_key.write_text(json.dumps({k: v for k, v in key.items() if k != "weights"}))
    if changed:
        weights.write_bytes(b"other weights at the same path")
    detail, progress = _checkpoint_detail(folder.checkpoint, folder.privacy_key, "secure", plan.fingerprint(study),
                                          _start_of(study))
    if changed and kept:
        assert detail == (f"cannot continue: started from other contents of model.weights ({weights}) than the file "
                          "holds now; the next `dpmed run` deletes the checkpoint and trains this run afresh under a "
                          "new key") and progress is None
    else:
        told = "training data are" if kept else "training data and starting weights are"
        assert detail == f"continues from its checkpoint at step 5 of 20 (saved under a minute ago) if its {told} " \
                         "unchanged"
    with caplog.at_level("INFO", logger="dpmed.run"):
        _privacy_randomness(plan, context(), folder)
    assert folder.checkpoint.exists() == (not changed)
    assert ("started from other contents of the model.weights file" in caplog.text) == (changed and kept)
