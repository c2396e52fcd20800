"""Execute one run: data -> mechanism -> training -> evaluation -> record.

`run_one` is the unit an executor schedules. It only sequences the stages; each stage reads the run's typed plan
(`dpmed.config.RunPlan`) and nothing comes back up. It writes ``run.json`` last and atomically, so a run is finished
exactly when that file exists; anything that fails before leaves no record and the run is simply redone.

What a run writes is split as `dpmed.folders` says: the released model's weights, run.json and predictions are
releasable; the checkpoint with the privacy randomness, noiseless training statistics, a DP-SGD run's wall times
and the audit's secret bits are private. The privacy randomness is fresh per run (`dpmed.randomness`); its key is
kept in the private folder only while the run is unfinished, so that a resumed run makes exactly the same draws, and
deleted when it finishes.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dpmed import attack, audit
from dpmed.accounting.events import ImageEvent
from dpmed.config import ATTEMPT_FORMAT, EvaluationConfig, RunPlan, Study, made_otherwise
from dpmed.config.schema import EXECUTION_ONLY
from dpmed.data import Dataset, ImageSet, cap_images_per_patient, normalize
from dpmed.errors import ConfigError
from dpmed.evaluation.assessment import Assessment, assess
from dpmed.evaluation.inference import predict_logits
from dpmed.evaluation.predictions import save_predictions
from dpmed.evaluation.proportions import clopper_pearson
from dpmed.evaluation.version import EVALUATION_VERSION
from dpmed.folders import (EXAMPLE_KEYS, RETRAIN_NOTE, RunFolder, read_arrays, write_arrays_atomic, write_atomic,
                           write_json_atomic, write_torch_atomic)
from dpmed.mechanisms import DpSgdPlan, PrivacyCard, mechanism_info
from dpmed.models import MODELS, build_model
from dpmed.models.weights import load_weights, read_state_dict, set_trainable
from dpmed.numbers import epsilon_text, number_text
from dpmed.provenance import versions
from dpmed.randomness import PrivacyRandomness, RandomnessMode, SavedKey, public_seed, saved_key
from dpmed.records import AttackRecord, AuditSummary, DataSummary, RunRecord, StartRecord, Timing
from dpmed.training import resolve_device, run_threads, torch_threads, train

__all__ = ["RunContext", "run_one", "start_model", "continues", "released_model"]

N_EXAMPLES = 4

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunContext:
    """What every run of a study shares: the dataset, the evaluation settings, where privacy
    randomness comes from ("secure" or "reproducible", the study's ``privacy_randomness``) and where the model
    starts (``start``: saved weights and what trains, `dpmed.pretraining.prepare_start`; None: random
    initialisation, everything trains). ``at_once``: how many runs of the study may train at the same time
    (`dpmed.executors`), this one included; they share the memory (`dpmed.training.fixed_features`). ``study``:
    the study as its study.yaml records it, whose settings' fingerprint (`RunPlan.fingerprint`) a run keeps in its
    key file for `dpmed status`; None for a run outside a study folder, whose key file keeps none."""

    dataset: Dataset
    evaluation: EvaluationConfig
    device: str = "auto"
    progress: bool = True
    privacy_randomness: RandomnessMode = "secure"
    start: StartRecord | None = None
    at_once: int = 1
    study: Study | None = None

    @property
    def alone(self) -> bool:
        """Whether the run trains with no other beside it: otherwise its seconds carry their load (`Timing`)."""
        return self.at_once < 2


# What of a start's record says where its public pretraining's weights and data lie now and how that stage ran, not
# what the model starts from: the cache entry lies inside the study folder, which may move or be reached by another
# --out (its sha256 and key name the weights), the public data's folder may move or be renamed (the key hashes its
# images, so other images are other weights), and time and execution settings change no weight of an entry trained
# again.
_NOT_THE_START: dict[str, Any] = {"weights": True, "pretraining": {"weights": True, "seconds": True, "data": True,
                                                                  "training": set(EXECUTION_ONLY)}}


def _attempt(plan: RunPlan, context: RunContext) -> str:
    """What an unfinished attempt of the run must share with this one for its key to serve again: the run's
    settings, the randomness mode, the study's start (but `_NOT_THE_START`) and the training data's content
    (sha256; it is kept only in the private key file, which goes when the run finishes), after the version of how it
    is made (`ATTEMPT_FORMAT`). What of it study.yaml shows is kept in the key file apart too (`RunPlan.fingerprint`),
    for `dpmed status`. The arrays are hashed where they are: a bytes copy would hold the training images twice in
    every worker."""
    start = context.start
    digest = hashlib.sha256(json.dumps({"plan": plan.settings(), "randomness": context.privacy_randomness,
                                        "start": None if start is None else start.model_dump(
                                            mode="json", exclude=None if start.pretraining is None else _NOT_THE_START),
                                        "normalization": str(context.dataset.normalization)},
                                       sort_keys=True).encode())
    train = context.dataset.train
    for array in (train.images, train.labels):
        digest.update(np.ascontiguousarray(array).data)
        digest.update(str(array.shape).encode())
    digest.update("\0".join(map(str, train.patient_ids)).encode())
    return f"{ATTEMPT_FORMAT}:{digest.hexdigest()}"


def _why_not_continued(saved: SavedKey | None, weights: str | None) -> str:
    """Why the checkpoint of the attempt its key file ``saved`` serves (None where there is no key) cannot continue
    this one, started from the model.weights file of sha256 ``weights``, for the log. An attempt fingerprinted by
    another version of dpmed is said to be that dpmed's: upgrading dpmed changes no setting or data, and saying so
    sent users looking for one; one whose fingerprint is damaged was said to be an older dpmed's, with other settings
    or data, of which nothing need be true; one started from other contents of model.weights says so, as `dpmed
    status` does, not "other settings or data"."""
    if saved is None:
        return "its privacy key is missing or damaged"
    if saved.attempt is None:
        return ("the attempt fingerprint in its privacy key file is damaged, so the attempt the checkpoint belongs to "
                "cannot be told")
    if ":" not in saved.attempt:       # a bare hash: written before the format was, by an older dpmed
        return "an older dpmed made it, with other settings or data or fingerprinting them otherwise"
    if None not in (saved.weights, weights) and saved.weights != weights:
        return "started from other contents of the model.weights file than it holds now"
    return made_otherwise(saved.attempt) or "made with other settings or data"


def _serves(saved: SavedKey | None, attempt: str) -> bool:
    """Whether the key file ``saved`` serves ``attempt``: a bare hash equal to its own is an older dpmed's attempt of
    the same settings and data, which continues."""
    return saved is not None and saved.attempt in (attempt, attempt.partition(":")[2])


def _settings_agree(saved: SavedKey, shown: str | None) -> bool:
    """A settings' fingerprint that is not this run's beside this attempt's: `dpmed status` says "other settings",
    so the key file is damaged and serves no attempt."""
    return None in (saved.settings, shown) or saved.settings == shown


def continues(plan: RunPlan, context: RunContext, folder: RunFolder) -> bool:
    """Whether the run's checkpoint continues (the test `_privacy_randomness` makes, which reads and changes nothing
    here): `dpmed run`'s time left counts such a run for the steps after its checkpoint only. `dpmed status` and
    `dpmed plan` tell it on the condition that the training data and a pretrained start are unchanged, which they do
    not read; `dpmed run` has both, and a checkpoint they fail trains all its steps."""
    if not folder.checkpoint.is_file():
        return False
    saved = saved_key(folder.privacy_key, context.privacy_randomness)
    shown = None if context.study is None else plan.fingerprint(context.study)
    return saved is not None and _serves(saved, _attempt(plan, context)) and _settings_agree(saved, shown)


def _privacy_randomness(plan: RunPlan, context: RunContext, folder: RunFolder) -> PrivacyRandomness:
    """Secure: a fresh key, kept in the private folder (owner-only) until the run finishes, so that an interrupted
    run continues with the same draws (a second, different perturbation of the same images would be a second
    release); reproducible: derived from the published seed and run id.

    The key serves again only an attempt with the same settings, start and training data (`_attempt`). Any other
    attempt starts afresh: what the earlier one left is deleted (its model, if evaluation failed after training)
    and a secure run gets a new key, so that no two models trained on other settings share their batches and
    noise, whose difference would cancel the noise."""
    mode, attempt = context.privacy_randomness, _attempt(plan, context)
    weights = None if context.start is None else context.start.given_sha256
    saved = saved_key(folder.privacy_key, mode)
    shown = None if context.study is None else plan.fingerprint(context.study)
    same = _serves(saved, attempt)
    if saved is not None and same and _settings_agree(saved, shown):
        return saved.randomness
    if folder.checkpoint.is_file():     # `dpmed status` may have shown it as continuing: say why it does not
        why = ("the settings' fingerprint in its privacy key file is not this run's, beside this run's attempt "
               "fingerprint: the key file is damaged" if same else _why_not_continued(saved, weights))
        _log.info("%s: its checkpoint cannot continue (%s): deleted, and the run trains afresh%s, nothing of that "
                  "attempt mixed in", plan.run_id, why, " under a new privacy key" if mode == "secure" else "")
    folder.discard_attempt()
    randomness = (PrivacyRandomness.reproducible(seed=plan.seed, run_id=plan.run_id) if mode == "reproducible" else
                  PrivacyRandomness.secure())
    # The text is made inside the write, named by no local: a Ctrl-C just after the file replaced its temporary one
    # keeps the key for the next attempt, and a traceback that shows locals would print it.
    # what `dpmed status` compares with study.yaml's plan and with the model.weights file now, reading no images
    kept = ({} if shown is None else {"settings": shown}) | ({} if weights is None else {"weights": weights})
    write_atomic(folder.privacy_key, lambda f: f.write(json.dumps({"root": randomness.root_hex(), "attempt": attempt,
                                                                   **kept}).encode()), owner_only=True)
    return randomness


def _training_set(plan: RunPlan, dataset: Dataset, randomness: PrivacyRandomness, folder: RunFolder):
    """(the training images as released to training, the audit trial or None, the local DP events): the cap on images
    per patient, the audit's canaries, then the arm's local DP transform (validation and test stay clean)."""
    train_set = dataset.train
    cap = plan.privacy.max_images_per_patient if isinstance(plan.privacy, DpSgdPlan) else None
    if cap:
        # One public key for every run of the study, not the run's seed: capped runs of several seeds then train on
        # one capped set, whose add/remove neighbours their composed eps is stated for (`dpmed.budget`).
        train_set = train_set.subset(cap_images_per_patient(train_set.patient_ids, train_set.images, cap,
                                                            seed=public_seed(0, "image_cap")))
    trial = None
    if plan.audit is not None:   # q, T and sigma were fixed from the split before: the claim covers each canary
        dp = plan.privacy
        # Canary patients are drawn at rate m / N. For DP-SGD N is the DP count it plans from: the exact count would
        # make every patient's draw read all the others. An arm without DP-SGD makes no central claim to break.
        # (The count as released also where it fell below the batch: drawn at m / B, about m count / B canaries
        # would come out.)
        n_patients = dp.released_count if isinstance(dp, DpSgdPlan) else train_set.n_patients
        try:
            train_set, trial = audit.insert_canaries_for(train_set, dataset.task, plan.audit, seed=plan.seed,
                                                         n_patients=n_patients, rng=randomness.stream("canaries"),
                                                         unit=dp.unit if isinstance(dp, DpSgdPlan) else "patient")
        except ValueError as exc:
            raise ConfigError(f"arm {plan.arm!r}: {exc}") from None
    transform = mechanism_info(plan.mechanism).image_mechanism(plan.privacy)
    events: tuple[ImageEvent, ...] = ()
    if transform is not None:
        train_set = train_set.with_images(transform.apply(train_set.images, rng=randomness.stream("local_dp")))
        event = transform.event(train_set.image_shape)
        events = () if event is None else (event,)
        write_arrays_atomic(folder.unreleased(folder.examples), _examples(transform, dataset, randomness),
                            owner_only=True)
    return train_set, trial, events


def _examples(transform, dataset: Dataset, randomness: PrivacyRandomness) -> dict[str, np.ndarray]:
    """The report's figure of an image mechanism: the first test images and their copies through ``transform``, from
    the run's "examples" stream. Test images only, which the file shows unnoised anyway: drawn again (a finished
    run's damaged file, `reevaluate`) it releases nothing of the training set."""
    images = dataset.test.images[:N_EXAMPLES]
    return {"original": images, "perturbed": transform.apply(images, rng=randomness.stream("examples"))}


def _model_inputs(dataset: Dataset, *sets: ImageSet) -> tuple[ImageSet, ...]:
    """The sets as the model sees them: the study's fixed normalisation, after any mechanism (METHODS.md s.1)."""
    if dataset.normalization is None:
        return sets
    return tuple(s.with_images(normalize(s.images, *dataset.normalization)) for s in sets)


def _audited_claim(card: PrivacyCard) -> str:
    """The card's claim besides its eps and delta, for the audit's statement: the accountant, the neighbours, and
    that the audited eps is training's alone (an audit tests the model, not the released training-set size); and,
    where the card labels its accounted eps not DP (a reproducible-mode run), that label, as everywhere the eps is
    stated (`PrivacyCard.in_brief`). A card with no eps (shuffled batches, which reproduce the source documents'
    DP-SGD) claims none: its label in brief, "not DP: shuffled batches (a Poisson run would have ...)"."""
    if card.epsilon is None:
        return card.in_brief()
    terms = f"{card.accountant_in_brief}, {card.neighbours_in_brief}"
    if card.size_epsilon:
        terms += (f"; training alone: the card's {epsilon_text(card.epsilon)} adds {number_text(card.size_epsilon)} "
                  "for the released training-set size")
    if not card.is_dp:
        terms += f"; not DP: {card.why_not_dp_in_brief}"
    return terms


def _attack(model, dataset: Dataset, dp: DpSgdPlan, plan: RunPlan, context: RunContext, device,
            folder: RunFolder) -> AttackRecord:
    """The imprint attack on the arm's step (`dpmed.attack`): its counts for run.json, its images kept privately;
    its interval at the study's confidence, as every other interval. Its step's noise is fresh (secure), or, in a
    reproducible study, derived from the seed as the run's own randomness is (its own key, so that it never replays
    the training noise), so that a rerun reports the same attack."""
    randomness = (PrivacyRandomness.reproducible(seed=plan.seed, run_id=f"{plan.run_id}/attack")
                  if context.privacy_randomness == "reproducible" else None)
    result = attack.attack_arm(model, dataset, dp, seed=plan.seed, device=device,
                               ci_level=context.evaluation.confidence, randomness=randomness, arm=plan.arm)
    write_arrays_atomic(folder.attack_images, {"reconstructions": result.images.reconstructions,
                                               "originals": result.images.originals, "ssim": result.images.ssim},
                        owner_only=True)
    return AttackRecord(structure=result.structure, n_bins=result.n_bins, batch_size=result.batch_size,
                        n_batches=result.n_batches, grouped=result.grouped, threshold=result.threshold.value,
                        threshold_quantile=result.threshold.quantile, n_trials=result.n_trials,
                        n_success=result.n_success, rate=result.rate, rate_low=result.ci[0], rate_high=result.ci[1],
                        ci_level=result.ci_level, batch_rate=result.batch_rate, chance_rate=result.chance_rate,
                        mean_best_ssim=_number(result.mean_best_ssim), mean_best_ncc=_number(result.mean_best_ncc),
                        attacked=attack.ATTACKED)


def start_model(model: torch.nn.Module, name: str, start: StartRecord | None) -> None:
    """Load ``start``'s weights into ``model`` (a freshly built ``name``) and freeze what it does not train
    (`dpmed.models.weights`). The file must still be the one the study recorded (its sha256): the run record names
    the weights by that hash, so the bytes hashed are the bytes loaded, from one read (hashed, then read again to
    load, a file replaced between the two started the run from weights its record does not name). The head keys
    the study left at their initialisation (``start.kept``: pretrained for other classes) are left so here too,
    whatever their shape; a head pretrained for the same classes in another order is taken in the study's order
    (``start.head_rows``)."""
    if start is None:
        return
    info = MODELS[name]
    if start.weights is not None:
        path = Path(start.weights)
        try:
            contents = path.read_bytes()
        except OSError:
            contents = None
        if contents is None or hashlib.sha256(contents).hexdigest() != start.sha256:
            raise ConfigError(f"the starting weights {path} are missing or changed since the study was prepared "
                              f"(sha256 {start.sha256}); run the study again to record the file it uses")
        state = {k: v for k, v in read_state_dict(path, contents=contents).items() if k not in start.kept}
        loaded = load_weights(model, state, head=info.head, path=path, rows=start.head_rows)
        if len(loaded.loaded) != start.loaded:        # one rule for what the record says and what the run loads
            raise AssertionError(f"{len(loaded.loaded)} tensors loaded from {path}, the study recorded "
                                 f"{start.loaded}")
    set_trainable(model, start.trainable, head=info.head, blocks=info.blocks)


def _number(value: float) -> float | None:
    return value if np.isfinite(value) else None


def run_one(plan: RunPlan, context: RunContext, folder: RunFolder) -> RunRecord:
    """Train and evaluate one run; writes ``run.json`` (the record, returned), the model's weights and predictions
    into ``folder.public``, and private files (checkpoint, statistics, audit) into ``folder.private``."""
    start = time.perf_counter()
    folder.make()
    ds, info = context.dataset, mechanism_info(plan.mechanism)
    device = resolve_device(context.device if plan.training.device == "auto" else plan.training.device)
    threads = run_threads(plan.training.threads)
    randomness = _privacy_randomness(plan, context, folder)
    folder.discard_unreleased()     # this attempt writes its own; an earlier one's (its CAMs) must not be released
    with torch_threads(threads):
        train_set, trial, events = _training_set(plan, ds, randomness, folder)
        train_input, val_input, test_input = _model_inputs(ds, train_set, ds.val, ds.test)
        model = build_model(plan.model, in_channels=ds.train.image_shape[0], num_outputs=ds.task.num_outputs,
                            image_size=ds.train.image_shape[1], seed=plan.seed)
        start_model(model, plan.model, context.start)
        dp = plan.privacy if isinstance(plan.privacy, DpSgdPlan) else None
        if dp is not None and dp.attack is not None:
            attack.attack_batch_size(ds, dp, arm=plan.arm)  # a validation split too small for it fails before training
        result = train(model, train_input, ds.task, plan.training, seed=plan.seed, dp=dp, randomness=randomness,
                       device=device, progress=context.progress, log_progress=True, label=plan.run_id,
                       checkpoint=folder.checkpoint, released=events, at_once=context.at_once)
        write_torch_atomic(folder.unreleased(folder.model),     # owner-only until released, as all of private/
                           {k: v.detach().cpu() for k, v in model.state_dict().items()}, owner_only=True)
        _log.info("%s: trained in %.0f s; evaluating on %d validation and %d test images", plan.run_id,
                  result.seconds, len(ds.val), len(ds.test))
        evaluation_start = time.perf_counter()
        with _evaluation_warnings_logged(plan.run_id):
            assessment = assess(model, ds, (val_input, test_input), context.evaluation,
                                cam_layer=MODELS[plan.model].cam_layer, device=device, training=train_input,
                                label=plan.run_id)
        save_predictions(folder.unreleased(folder.predictions), val=(ds.val, assessment.val_scores),
                         test=(ds.test, assessment.test_scores), owner_only=True)
        if assessment.cams is not None:
            write_arrays_atomic(folder.unreleased(folder.cams), assessment.cams, owner_only=True)
        _log.info("%s: evaluated in %.0f s", plan.run_id, time.perf_counter() - evaluation_start)
        card = info.card(plan.privacy, result.ledger, context.privacy_randomness)
        audit_summary = None
        if trial is not None:   # scored from the final model only (black box); private: it depends on the secret bits
            canaries, = _model_inputs(ds, trial.canaries)
            logits = predict_logits(model, canaries, device=device) if len(canaries) else np.zeros((0, 0))
            verdict, arrays = audit.conclude(trial, logits,
                                             task_kind=ds.task.kind, delta=None if dp is None else dp.claimed_delta,
                                             claimed_epsilon=None if dp is None else card.training_epsilon,
                                             claim_terms="" if dp is None else _audited_claim(card))
            write_arrays_atomic(folder.audit_scores, arrays, owner_only=True)
            write_json_atomic(folder.audit, verdict.model_dump(mode="json"), owner_only=True)
            audit_summary = AuditSummary(n_canaries=trial.config.canaries, kind=trial.config.kind,
                                         result="in the study's private folder (it depends on the secret canary bits)")
        attack_record = (None if dp is None or dp.attack is None else
                         _attack(model, ds, dp, plan, context, device, folder))
    write_json_atomic(folder.statistics, {"run_id": plan.run_id, "per_epoch": result.statistics,
                                          "training_metrics": assessment.training_metrics}, owner_only=True)
    timing = Timing(train_seconds=result.seconds, total_seconds=time.perf_counter() - start, device=str(device),
                    threads=threads, resumed_from=result.resumed_from, alone=context.alone)
    record = RunRecord(
        run_id=plan.run_id, arm=plan.arm, mechanism=plan.mechanism, seed=plan.seed, plan=plan,
        data=DataSummary(name=ds.name, task=ds.task.kind, source=ds.shareable_source()), privacy=card,
        reconstruction=info.reconstruction(plan.privacy), ledger=result.ledger, metrics=assessment.metrics,
        fairness=assessment.fairness, explanations=assessment.explanations, evaluation_version=EVALUATION_VERSION,
        audit=audit_summary, attack=attack_record,
        start=context.start, timing=timing, versions=versions()).shareable()
    timing.write(folder.timing)
    folder.release()            # the model and its outputs become releasable with the record that accounts for them
    try:
        record.write(folder.record)
    except BaseException:
        try:
            folder.take_back()      # not without their record (a full disk at this last write)
        except OSError as exc:      # the write's own failure is the one to raise; the next run withdraws these
            _log.warning("%s: its model and outputs could not be moved back to its private folder (%s); the next "
                         "`dpmed run` deletes them, as files of an unfinished run", plan.run_id, exc)
        raise
    folder.discard_secrets()
    return record


@dataclass(frozen=True, eq=False)
class Reevaluation:
    """A finished run evaluated again (:func:`reevaluate`), held until :meth:`write`: a study evaluates all its runs
    first and writes them after, so that a stop midway leaves every run as it was rather than some of each."""

    record: RunRecord
    assessment: Assessment
    dataset: Dataset
    folder: RunFolder
    examples: dict[str, np.ndarray] | None = None      # drawn again where its file could not be read

    def write(self) -> RunRecord:
        """The new predictions, CAMs (and local-DP examples, where drawn again) and run.json, in place of the old. A
        run without an image mechanism has no examples: a file of that name in its folder is removed, as CAMs its
        settings ask for no more are (unreadable, it had the run evaluated again at every `dpmed run`)."""
        a = self.assessment
        if self.examples is not None:
            write_arrays_atomic(self.folder.examples, self.examples)
        elif _image_mechanism(self.record) is None:
            self.folder.examples.unlink(missing_ok=True)
        save_predictions(self.folder.predictions, val=(self.dataset.val, a.val_scores),
                         test=(self.dataset.test, a.test_scores))
        if a.cams is not None:
            write_arrays_atomic(self.folder.cams, a.cams)
        else:
            self.folder.cams.unlink(missing_ok=True)
        self.record.write(self.folder.record)
        return self.record


def read_released_model(record: RunRecord, folder: RunFolder) -> dict[str, torch.Tensor]:
    """The state dict a finished run released, to evaluate it again; ConfigError, naming the file, where its
    model.pt is gone or cannot be read. A study reads every such model before it writes anything (study.yaml
    included), so one damaged file leaves the folder as it was (`dpmed.resumption`)."""
    if not folder.model.is_file():
        raise ConfigError(f"the finished run {record.run_id} was evaluated with other settings than this study's "
                          f"(or by another dpmed's methods), and its model {folder.model} is gone, so it cannot be "
                          f"evaluated again: restore the file, or delete {folder.public} to retrain the run "
                          f"{RETRAIN_NOTE}")
    return read_state_dict(folder.model, key=f"the finished run {record.run_id}'s model")


def released_model(record: RunRecord, folder: RunFolder, dataset: Dataset) -> torch.nn.Module:
    """The model a finished run released, built as its record says and loaded from its model.pt, on the CPU;
    ConfigError naming the file where it is gone, cannot be read (`read_released_model`) or holds weights of another
    model than the record's (load_state_dict's RuntimeError, which ended a study in an internal error)."""
    state = read_released_model(record, folder)
    made = record.plan
    model = build_model(made.model, in_channels=dataset.train.image_shape[0], num_outputs=dataset.task.num_outputs,
                        image_size=dataset.train.image_shape[1], seed=made.seed)   # its initialisation is overwritten
    try:
        model.load_state_dict(state)
    except RuntimeError as exc:
        lines = str(exc).strip().splitlines()     # "Error(s) in loading state_dict for X:", then what differs
        first = lines[-1 if len(lines) < 2 else 1].strip()[:300]
        raise ConfigError(f"the finished run {record.run_id}'s model {folder.model} holds other weights than the "
                          f"{made.model} its run.json records ({first}); restore the file, or delete "
                          f"{folder.public} to retrain the run {RETRAIN_NOTE}") from None
    return model


def _attack_at(record: AttackRecord | None, confidence: float) -> AttackRecord | None:
    """The attack's interval at another confidence: it is its counts' Clopper-Pearson, so nothing is attacked again
    (the counts, the chance rate and the images stay the run's)."""
    if record is None or record.ci_level == confidence:
        return record
    low, high = clopper_pearson(record.n_success, record.n_trials, level=confidence)
    return record.model_copy(update={"rate_low": low, "rate_high": high, "ci_level": confidence})


_EVALUATION = Path(inspect.getfile(assess)).parent      # dpmed.evaluation's folder: where its warnings come from


@contextmanager
def _evaluation_warnings_logged(run_id: str) -> Iterator[None]:
    """dpmed's evaluation warns (a RuntimeWarning, as a library does) where too many bootstrap redraws left a metric
    undefined; in a study each such warning becomes a line of the run's log, named by its run. Python printed it
    with a source line, without the run, and for the first run only (its filter shows a warning once per place), so
    every later run's was lost. Other warnings are passed on as they came; both also where the evaluation then fails,
    whose error would otherwise take them with it."""
    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield
    finally:
        for w in caught:
            if issubclass(w.category, RuntimeWarning) and Path(w.filename).parent == _EVALUATION:
                _log.warning("%s: %s", run_id, w.message)
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def reevaluate(record: RunRecord, plan: RunPlan, context: RunContext, folder: RunFolder) -> Reevaluation:
    """A finished run evaluated again under ``context.evaluation`` (another bootstrap, confidence level, fairness bins
    or explanations) and this dpmed's evaluation methods (`dpmed.evaluation.version`: an older dpmed's numbers must not
    share a table with this one's), from the model it released: nothing trains, so nothing is spent. Its weights are
    public already, and scoring them on the validation and test images is post-processing, as the first evaluation was;
    retraining instead (all a study could do before) released a second model of the same patients, whose eps adds to the
    first. The privacy card, ledger, audit and attack stay the run's (the attack's interval is recomputed from its
    counts at the new confidence); its timing, and its explanations' seconds, keep only what run.json may hold. A
    changed ``training_metrics`` is not re-evaluated (`dpmed.resumption`): it reads the training images as the run saw
    them, canaries and local DP noise included, which only training has; so the private training-set metrics stay as its
    training computed them, also where only the methods' version differs. Nothing is written until
    :meth:`Reevaluation.write`.

    ``plan`` is the run as this study plans it: it evaluates on this study's device and threads, not on those the
    record says it trained with (`EXECUTION_ONLY`: they change no result, so a study may change them and keep its
    finished runs). A run trained on a GPU is then evaluated again on a machine without one, as the study asks."""
    ds, made = context.dataset, record.plan
    device = resolve_device(context.device if plan.training.device == "auto" else plan.training.device)
    with torch_threads(run_threads(plan.training.threads)):
        model = released_model(record, folder, ds)
        val_input, test_input = _model_inputs(ds, ds.val, ds.test)
        with _evaluation_warnings_logged(made.run_id):
            assessment = assess(model.to(device), ds, (val_input, test_input), context.evaluation,
                                cam_layer=MODELS[made.model].cam_layer, device=device, label=made.run_id)
    again = record.model_copy(update={"metrics": assessment.metrics, "fairness": assessment.fairness,
                                      "explanations": assessment.explanations,
                                      "evaluation_version": EVALUATION_VERSION,
                                      "attack": _attack_at(record.attack, context.evaluation.confidence)}).shareable()
    return Reevaluation(record=again, assessment=assessment, dataset=ds, folder=folder,
                        examples=_examples_again(record, context, folder))


def _examples_again(record: RunRecord, context: RunContext, folder: RunFolder) -> dict[str, np.ndarray] | None:
    """A finished run's local-DP examples drawn again where its ldp_examples.npz is there but cannot be read: from
    the same stream in a reproducible study (the same images), from a fresh key in a secure one (its key went when the
    run finished). None where the file reads, is absent, or the run has no image mechanism."""
    transform = _image_mechanism(record)
    if transform is None or not folder.examples.is_file():
        return None
    try:
        read_arrays(folder.examples, EXAMPLE_KEYS)
        return None
    except ValueError:
        pass
    randomness = (PrivacyRandomness.reproducible(seed=record.plan.seed, run_id=record.run_id)
                  if context.privacy_randomness == "reproducible" else PrivacyRandomness.secure())
    return _examples(transform, context.dataset, randomness)


def _image_mechanism(record: RunRecord):
    """The image mechanism a finished run applied to its training images (and to its examples), or None."""
    return mechanism_info(record.plan.mechanism).image_mechanism(record.plan.privacy)
