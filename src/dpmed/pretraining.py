"""Where every arm's model starts: saved weights (``model.weights``), or public pretraining (``pretrain``), a stage
run once before the arms.

Why: DP-SGD pays for every coordinate it noises and every step it takes, and a model that already knows what a chest
X-ray looks like needs fewer of both. A prior costs no privacy when it was learnt from data that are not the private
patients' (De et al. 2022; Tramer and Boneh 2021; METHODS.md s.9): 003_9a91354dc2d7e2df.txt pretrains on MIMIC-CXR
before its DP training on other hospitals' images, 000_56c2431ae4df8d10.txt starts from ImageNet.

The stage, in order (`prepare_start`):

1. read the dataset the study declares public (``pretrain.data``, any reader; image size and channels default to
   the private data's, so one model fits both);
2. refuse it if it overlaps the private dataset in any split (identical images, shared patient ids, near-duplicate
   images: `dpmed.data.overlap`; the public set read at the private data's preprocessing for the check, so that
   one file is one image in both, and that copy dropped before the one that trains is read), before anything trains;
3. train the model on it without privacy (``pretrain.training``, ``pretrain.seed``), once: the weights are cached
   under ``<study>/pretrain/<key>/`` by a content hash of the public images and labels, the pretraining settings,
   the model and any weights it started from, so a resumed or re-run study reuses them, also after its folder
   moved or from another working directory (an entry names its weights relative to itself). They are releasable
   (public data only), so they sit beside the runs, not in ``private/``;
4. check that the weights fit the private model (the head may differ: another class count; it is left at its
   initialisation unless the public classes are the private ones, names compared up to letter case where that
   pairs them one to one, its outputs then taken in the private order; the log says why a head was left), freeze what
   ``model.trainable`` leaves out, refuse a study folder whose finished runs started otherwise (they would be
   reused), and hand every run the same :class:`~dpmed.records.StartRecord`.

What pretraining learnt is not protected by any eps: the report says so, with the public data and the pretrained
model's AUROC on their validation split. The privacy of the private patients is untouched by it, provided the public
set holds none of them, which is what step 2 checks and the user's ``pretrain.public`` statement declares.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from dpmed.config import Study
from dpmed.config.schema import EXECUTION_ONLY, DataConfig, PretrainConfig, TrainingConfig
from dpmed.data import DATASET_SOURCES, DataRequest, Dataset, ImageSet, normalize, read_dataset
from dpmed.data.overlap import Overlap, refuse_overlap
from dpmed.errors import ConfigError
from dpmed.evaluation.inference import predict
from dpmed.evaluation.utility import auroc
from dpmed.folders import RETRAIN_NOTE, StudyFolder, file_sha256, write_torch_atomic
from dpmed.mechanisms import length_text, training_steps
from dpmed.models import MODELS, build_model
from dpmed.models.weights import (hash_weights, load_weights, match_head, read_state_dict, read_weights,
                                  set_trainable)
from dpmed.records import PretrainRecord, StartRecord, read_pretrain_record, read_record
from dpmed.training import resolve_device, run_threads, torch_threads, train

__all__ = ["check_weights", "describe_start", "prepare_start", "pretrain", "pretrain_folder", "public_request",
           "refuse_changed_weights", "refuse_other_starts"]

_log = logging.getLogger(__name__)
_WEIGHTS = "weights.pt"     # the weights' file name in a cache entry, which its pretrain.json names them by


def pretrain_folder(folder: StudyFolder) -> Path:
    """``<study>/pretrain/``: the cached weights of public pretraining, one sub-folder per content hash."""
    return folder.root / "pretrain"


def public_request(config: DataConfig, private: Dataset):
    """The public data's request, with image size and channels of the private data where the study gives none."""
    c, h, _ = private.train.image_shape
    update = {k: v for k, v in (("image_size", h), ("channels", c)) if getattr(config, k) is None}
    return config.model_copy(update=update).to_request()


def _as_the_private_data_is_read(request: DataRequest, private_config: DataConfig, private: Dataset
                                 ) -> Dataset | None:
    """The public set read again at the private data's per-image steps (its size, channels, aspect, min-max and
    equalisation) for the overlap check, or None where it already is (or either set is generated: no file to share).

    Why: the identical-image check compares decoded pixels, and one file decodes to the same pixels in both sets only
    under the same steps. Read at steps of its own (``pretrain.data.image_size``, ``pretrain.data.preprocessing``),
    a private file given again as public had no identical image, and was found only by the near-duplicate check,
    which ``pretrain.near_duplicate_bits`` may set as low as 0."""
    if DATASET_SOURCES[request.source].generates or DATASET_SOURCES[private_config.source].generates:
        return None
    c, h, w = private.train.image_shape
    own = private_config.to_request().preprocessing
    steps = replace(request.preprocessing, size=(h, w), channels=c, aspect=own.aspect, minmax=own.minmax,
                    equalize=own.equalize)
    if steps == request.preprocessing:
        return None
    _log.info("pretrain: reading the public data again at the private data's preprocessing, for the overlap check")
    return read_dataset(replace(request, preprocessing=steps))


def _refuse_overlap(public: Dataset, private: Dataset, config: PretrainConfig) -> Overlap:
    """`refuse_overlap` of ``public`` (the public set, as read for the check) against ``private``, at the study's
    threshold."""
    _log.info("pretrain: checking %s (%d images) against the private %s (%d images) for overlap", public.name,
              len(public.train) + len(public.val) + len(public.test), private.name,
              len(private.train) + len(private.val) + len(private.test))
    return refuse_overlap(public, private, max_distance=config.near_duplicate_bits, what="pretrain.data")


def _with_inputs(dataset: Dataset, images: ImageSet) -> ImageSet:
    """The set as the model sees it: the dataset's fixed normalisation, if any (as `dpmed.run` does)."""
    return images if dataset.normalization is None else images.with_images(normalize(images.images,
                                                                                      *dataset.normalization))


def _content_key(public: Dataset, config: PretrainConfig, model: str, start_sha: str | None, *,
                 training: dict | None = None) -> str:
    """sha256 over the public images and labels (every split), the pretraining settings that change what is
    computed, the model and the weights it starts from: equal keys, equal weights up to float rounding. The arrays
    are hashed where they are (a bytes copy would hold the public set's largest split twice). ``training``: the
    training settings to key by in place of ``config.training``'s computed ones (`_keyed_otherwise`)."""
    digest = hashlib.sha256()
    for split in (public.train, public.val, public.test):
        for array in (split.images, split.labels):
            digest.update(np.ascontiguousarray(array).data)
            digest.update(str(array.shape).encode())
    training = config.training.computed_settings() if training is None else training
    settings = {"training": training, "seed": config.seed, "model": model, "start": start_sha,
                "task": [public.task.kind, list(public.task.label_names)], "normalization": public.normalization}
    digest.update(json.dumps(settings, sort_keys=True, default=str).encode())
    return digest.hexdigest()


def _read_settings(training: TrainingConfig) -> dict:
    """The settings public pretraining reads: the computed ones of a run that takes no DP-SGD step (the dp_engine,
    like every other setting it does not read, at its default)."""
    return training.computed_settings(dp_sgd=False)


def _keyed_otherwise(public: Dataset, config: PretrainConfig, model: str, start_sha: str | None,
                     folder: StudyFolder) -> PretrainRecord | None:
    """A cache entry of these weights that an earlier dpmed keyed by a setting pretraining does not read (a
    dp_engine, Adam's momentum, both refused now; a setting another turns off, `TrainingConfig.settings_turned_off`),
    which the study file may no longer give: its key is recomputed from the settings its record holds, as they were
    keyed. Without it the study trained the weights again, and refused its own finished runs, keyed by the old
    entry, before it did (`_refuse_clashes`)."""
    ours = _read_settings(config.training)
    for record_path in sorted(pretrain_folder(folder).glob("*/pretrain.json")):
        try:
            written = read_pretrain_record(record_path)
        except (OSError, ValueError):      # told by `_cached` where it is this study's own entry
            continue
        if _read_settings(written.training) != ours:
            continue
        as_keyed = written.training.model_dump(mode="json", exclude=set(EXECUTION_ONLY))
        if _content_key(public, config, model, start_sha, training=as_keyed) == written.key:
            return _cached(record_path.parent)
    return None


def _located(record: PretrainRecord, where: Path) -> PretrainRecord:
    """``record`` naming the weights in the cache entry ``where`` as this process reaches it: the entry's own
    pretrain.json names them relative to the entry, since the study folder may move, or be resumed from another
    working directory, after it was written."""
    return record.model_copy(update={"weights": str(where / _WEIGHTS)})


def _cached(where: Path) -> PretrainRecord | None:
    """The cache entry ``where``'s record, its weights named where they are found now; None if absent, changed or
    damaged (then trained again and rewritten, as for weights that changed). A record that cannot be read, or weights
    whose bytes no longer have the sha256 it records (replaced, damaged), are logged as warnings: the user sees why
    minutes go to training again. Entries written before the record named the weights relative to the entry (it held
    the path as given then, stale once the folder moved) are read the same way: only the entry's own weights file is
    ever used."""
    record_path, weights = where / "pretrain.json", where / _WEIGHTS
    if not (record_path.is_file() and weights.is_file()):
        return None
    try:
        record = read_pretrain_record(record_path)
    except (OSError, ValueError) as exc:          # pydantic's ValidationError is a ValueError
        _log.warning("pretrain: %s cannot be read (%s); training the public model again", record_path,
                     str(exc).splitlines()[0])
        return None
    if file_sha256(weights) != record.sha256:
        _log.warning("pretrain: %s does not match the sha256 its %s records (changed or damaged since it was "
                     "written); training the public model again", weights, record_path.name)
        return None
    return _located(record, where)


def _tell_settings_the_data_turn_off(study: Study, config: PretrainConfig, public: Dataset) -> None:
    """Warn of each ``pretrain.data`` setting (``config``, the study's pretrain section) that the public data, once
    read, leave unread (`DataConfig.settings_the_data_turn_off`), as `dpmed.study` warns of the study's own; only
    `dpmed run` reads them. Dropping it trains no weights again: they are cached by the public images' content, not
    these keys."""
    for key, why in config.data.settings_the_data_turn_off(public):
        _log.warning("pretrain.data.%s changes nothing, as %s; %s", key, why, study.removal(f"pretrain.data.{key}"))


def pretrain(study: Study, private: Dataset, folder: StudyFolder, *, progress: bool = True) -> PretrainRecord:
    """Steps 1-3 of the module docstring: the pretrain stage's record, its weights trained now or found cached.
    DataError if the public set overlaps ``private``; ConfigError if its images do not fit the private model."""
    config = study.pretrain
    if config is None:
        raise ValueError("the study has no pretrain section")
    request = public_request(config.data, private)
    # A copy read at the private data's steps is checked and dropped before the copy that trains is decoded: each
    # holds the whole public set (100,000 grey images at 224 px: 20 GB each), so the two are never held at once.
    checked = _as_the_private_data_is_read(request, study.data, private)
    overlap = None if checked is None else _refuse_overlap(checked, private, config)
    del checked
    public = read_dataset(request)
    _tell_settings_the_data_turn_off(study, config, public)
    if public.train.image_shape[0] != private.train.image_shape[0]:
        raise ConfigError(f"pretrain.data gives {public.train.image_shape[0]}-channel images, the private data "
                          f"{private.train.image_shape[0]}-channel ones; set pretrain.data.channels to "
                          f"{private.train.image_shape[0]} (one model must take both)")
    if overlap is None:
        overlap = _refuse_overlap(public, private, config)
    start = study.model.weights
    # hashed and loaded from one read: the key and the record name the weights pretraining starts from by this hash
    contents = None if start is None else read_weights(start)
    start_sha = None if contents is None else hashlib.sha256(contents).hexdigest()
    key = _content_key(public, config, study.model.name, start_sha)
    where = pretrain_folder(folder) / key[:16]
    cached = _cached(where) or _keyed_otherwise(public, config, study.model.name, start_sha, folder)
    if cached is not None:
        _log.info("pretrain: weights of an earlier run found in %s (validation AUROC %s)", Path(cached.weights).parent,
                  "undefined" if cached.validation_auroc is None else f"{cached.validation_auroc:.3f}")
        # The key names the weights by what trained them; what this study declares and checked (its statement, the
        # reader's path, the overlap check's threshold) is this study's, not the first one's to use the entry.
        return cached.model_copy(update={"public": config.public, "data": public.shareable_source(),
                                         "overlap_checks": overlap.checks(),
                                         "near_duplicate_bits": config.near_duplicate_bits})

    # Weights not trained yet: finished runs that started from other ones would refuse them once trained
    # (`refuse_other_starts`), so refuse now rather than after the training.
    trainable = study.model.trainable_setting
    _refuse_clashes(folder, lambda before: before is not None and before.pretraining is not None
                    and before.pretraining.key == key and before.trainable == trainable,
                    f"public pretraining on {public.name} not yet trained, key {key[:16]}, trained {trainable}")
    info = MODELS[study.model.name]
    c, h, _ = public.train.image_shape
    model = build_model(study.model.name, in_channels=c, num_outputs=public.task.num_outputs, image_size=h,
                        seed=config.seed)
    if start is not None:
        load_weights(model, read_state_dict(start, contents=contents), head=info.head, path=start)
    device = resolve_device(config.training.device if config.training.device != "auto" else study.training.device)
    train_input, val_input = _with_inputs(public, public.train), _with_inputs(public, public.val)
    _log.info("pretrain: training %s on %d public images (%s), without privacy", study.model.name, len(public.train),
              public.name)
    # The pretrain stage's thread count (auto: the study's training.threads), as each run sets its own: float sums
    # depend on it, so a count left to the process would give other weights wherever the process's count differs.
    threads = run_threads(config.training.threads if config.training.threads != "auto" else study.training.threads)
    begin = time.perf_counter()
    with torch_threads(threads):
        result = train(model, train_input, public.task, config.training, seed=config.seed, device=device,
                       progress=progress, log_progress=True, label="pretrain")
        seconds = time.perf_counter() - begin
        scores = predict(model, val_input, public.task, device=device)
    try:
        validation, undefined = float(auroc(public.val.labels, scores, kind=public.task.kind)[0]), ""
    except ValueError as exc:   # a validation split without both classes, or scores that are no numbers
        validation, undefined = None, f" ({' '.join(str(exc).split()) or type(exc).__name__}; the report states none)"
    where.mkdir(parents=True, exist_ok=True)
    weights = where / _WEIGHTS
    write_torch_atomic(weights, {k: v.detach().cpu() for k, v in model.state_dict().items()})
    steps_per_epoch = int(np.ceil(len(public.train) / config.training.batch_size))
    record = PretrainRecord(
        dataset=public.name, task=public.task.kind, label_names=public.task.label_names, public=config.public,
        # the reader's settings only: a cohort of the private release counts the release's images ("of"), and
        # those include the private patients
        data=public.shareable_source(), n_train=len(public.train),
        n_val=len(public.val), n_test=len(public.test), image_shape=public.train.image_shape,
        model=study.model.name, training=config.training, seed=config.seed,
        steps=training_steps(steps_per_epoch, epochs=config.training.epochs, steps=config.training.steps),
        seconds=result.seconds or seconds, key=key, weights=_WEIGHTS, sha256=file_sha256(weights),
        validation_auroc=validation, overlap_checks=overlap.checks(), near_duplicate_bits=config.near_duplicate_bits,
        start_weights=start_sha)
    record.write(where / "pretrain.json")
    _log.log(logging.WARNING if validation is None else logging.INFO,
             "pretrain: done in %.0f s, public validation AUROC %s; weights in %s", seconds,
             f"undefined{undefined}" if validation is None else f"{validation:.3f}", weights)
    return _located(record, where)


def _starting_point(start: StartRecord | None) -> tuple:
    """What makes two starts the same: the weights, what trains, and how the head started (left at its
    initialisation, or pretrained rows taken in another order): one file and setting can start a head either way."""
    return (None, "all", (), None) if start is None else (start.sha256, start.trainable, start.kept, start.head_rows)


def _start_text(start: StartRecord | None) -> str:
    if start is None:
        return "random weights, trained all"
    head = ("; head left at its initialisation" if start.kept else
            "; head's pretrained outputs taken in another order" if start.head_rows else "")
    return f"{start.weights}, trained {start.trainable}{head}"


def _refuse_clashes(folder: StudyFolder, same: Callable[[StartRecord | None], bool], now: str) -> None:
    """ConfigError naming the finished runs in ``folder`` whose start ``same`` rejects (``now``: this study's)."""
    clashes = []
    for run_id in folder.finished_run_ids():
        before = read_record(folder.run(run_id).record).start
        if not same(before):
            clashes.append(f"{run_id} (started from {_start_text(before)})")
    if clashes:
        raise ConfigError(f"{len(clashes)} finished run(s) in {folder.root} started from other weights than this "
                          f"study now does ({now}): {'; '.join(clashes[:4])}; use another output folder (--out), or "
                          f"delete those runs to retrain them {RETRAIN_NOTE}")


def refuse_changed_weights(study: Study, folder: StudyFolder, sha: str | None = None) -> str | None:
    """ConfigError naming the finished runs in ``folder`` that started from other contents of the study's
    ``model.weights`` file than it holds now (``sha``: its sha256, where the caller has it), directly or through
    public pretraining as the study does now, told by the hash the start recorded (`StartRecord.given_sha256`), as
    `dpmed status` tells them. One hash of a local file: `prepare_start` checks it before public pretraining reads
    the public images and checks them for overlap (minutes on a large set; the message named only the cache entries
    then, not the file that changed), and `dpmed plan`, which trains nothing, listed such runs as done. A start this
    cannot tell (an older dpmed's pretraining record keeps no hash; a start of the other kind) is left to
    `refuse_other_starts`. Returns the file's sha256 (None: the study names none), so that `dpmed plan` reads it
    once for its checkpoints' lines too."""
    weights = study.model.weights
    if weights is None:
        return None
    sha = sha or hash_weights(weights)
    pretrained = study.pretrain is not None
    clashes = []
    for run_id in folder.finished_run_ids():
        before = read_record(folder.run(run_id).record).start
        if before is not None and (before.pretraining is not None) == pretrained and \
                before.given_sha256 not in (None, sha):
            clashes.append(f"{run_id} (sha256 {before.given_sha256})")
    if clashes:
        how = " (through public pretraining)" if pretrained else ""
        raise ConfigError(f"{len(clashes)} finished run(s) in {folder.root} started from other contents of "
                          f"model.weights ({weights}){how} than the file holds now (sha256 {sha}): "
                          f"{'; '.join(clashes[:4])}; restore the file, use another output folder (--out), or delete "
                          f"those runs to retrain them {RETRAIN_NOTE}")
    return sha


def refuse_other_starts(folder: StudyFolder, start: StartRecord | None) -> None:
    """ConfigError naming the finished runs in ``folder`` that started from other weights or trained another part
    of the model than ``start``: a resumed study reuses finished runs, and one table must not mix two starts (the
    runs' plans do not hold the start, so the study's own settings check cannot see it)."""
    _refuse_clashes(folder, lambda before: _starting_point(before) == _starting_point(start), _start_text(start))


def _part(trainable: str | int) -> str:
    """What of the model ``trainable`` trains, in words ("the head and the last 2 block(s)")."""
    parts: dict[str | int, str] = {"all": "the whole model", "head": "the head"}
    return parts.get(trainable, f"the head and the last {trainable} block(s)")


def describe_start(study: Study) -> str:
    """Where the arms of ``study`` will start and what of the model trains, from the study file alone (``dpmed
    plan``: nothing is read or trained); what a start learnt before the arms is not covered by any eps."""
    config, pretrain_config = study.model, study.pretrain
    trains_of: dict[str | int, str] = {"all": "every parameter trains", "head": "only the head trains"}
    trains = trains_of.get(config.trainable_setting, f"{_part(config.trainable_setting)} train")
    if pretrain_config is None and config.weights is None:
        return f"random initialisation; {trains}"
    prior = "" if config.weights is None else f"{config.weights} ({config.weights_source})"
    if pretrain_config is not None:
        data, t = pretrain_config.data, pretrain_config.training
        length = length_text(epochs=t.epochs, steps=t.steps)
        where = "" if data.path is None else f" at {data.path}"
        prior = (f"public pretraining on {data.source}{where} ({length} at batch {t.batch_size}, without privacy"
                 + (f", from {prior}" if prior else "") + f"; declared public: {pretrain_config.public}), run "
                 "when `dpmed run` starts unless its weights are cached in the study folder, after the overlap "
                 "checks against the private data (`dpmed plan` does not read the public images: `dpmed run` "
                 "finds an unreadable or overlapping public set)")
    return f"{prior}; {trains}. What the model learns before the arms is not covered by any eps"


def _fresh_model(study: Study, dataset: Dataset) -> torch.nn.Module:
    """The study's model for ``dataset``'s images and task, at an initialisation of its own (any seed: the checks
    read its shapes, and the weights loaded into it)."""
    c, h, _ = dataset.train.image_shape
    return build_model(study.model.name, in_channels=c, num_outputs=dataset.task.num_outputs, image_size=h, seed=0)


def check_weights(study: Study, dataset: Dataset) -> None:
    """Raise the ConfigError `prepare_start` would for ``model.weights`` (missing, not a state dict, BatchNorm
    statistics, another architecture), reading the file but training nothing: ``dpmed plan`` checks it as
    ``dpmed run`` will."""
    if study.model.weights is not None:
        load_weights(_fresh_model(study, dataset), read_state_dict(study.model.weights),
                     head=MODELS[study.model.name].head, path=study.model.weights)


def prepare_start(study: Study, dataset: Dataset, folder: StudyFolder, *, progress: bool = True
                  ) -> StartRecord | None:
    """Where every arm of ``study`` starts (the module docstring): None for a randomly initialised model trained
    whole; otherwise the weights (``model.weights`` or public pretraining, run or found cached now), their sha256 and
    provenance, and what trains. Raises before any arm trains: ConfigError for weights that do not fit the model or
    hold BatchNorm, DataError for a public set that overlaps the private one."""
    config = study.model
    trainable = config.trainable_setting
    if study.pretrain is None and config.weights is None and trainable == "all":
        refuse_other_starts(folder, None)
        return None
    info = MODELS[config.name]
    weights, sha, trained_on, record = None, None, None, None
    if config.weights is not None:
        weights, sha, trained_on = config.weights, hash_weights(config.weights), config.weights_source
        refuse_changed_weights(study, folder, sha)     # before pretraining reads and checks the public images
    if study.pretrain is not None:
        record = pretrain(study, dataset, folder, progress=progress)
        weights, sha = Path(record.weights), record.sha256
        trained_on = (f"public pretraining on {record.dataset} ({record.n_train} training images): "
                      f"{record.public}" + ("" if config.weights is None
                                            else f"; it started from {config.weights} ({config.weights_source})"))
    model = _fresh_model(study, dataset)
    loaded = None
    if weights is not None:
        key = "model.weights" if record is None else "the pretrained weights"
        # Public pretraining knows what its outputs mean: its head is used only for the same classes, names
        # compared up to letter case where that pairs them one to one, its outputs taken in the study's order (every
        # run does the same, from ``head_rows``); a user's own file says nothing of its classes: its head is used
        # where the shape fits.
        match = None if record is None else match_head(record.label_names, dataset.task.label_names)
        other_labels = match is not None and match.rows is None
        rows = None if match is None or match.same_order else match.rows
        loaded = load_weights(model, read_state_dict(weights, key=key), head=info.head, key=key, path=weights,
                              same_classes=not other_labels, rows=rows)
        why = match.why if match is not None and other_labels else "another shape"
        note = (f"; head left at its initialisation ({why}): {', '.join(loaded.kept)}" if loaded.kept
                else f"; head loaded ({match.why})" if match is not None and match.why else "")
        _log.info("start: %d tensors loaded from %s%s", len(loaded.loaded), weights, note)
        _log.debug("start: loaded %s", ", ".join(loaded.loaded))
    n_trainable, n_frozen = set_trainable(model, trainable, head=info.head, blocks=info.blocks)
    _log.info("start: %d parameters train (%s), %d frozen (neither clipped nor noised under DP-SGD)", n_trainable,
              _part(trainable), n_frozen)
    start = StartRecord(weights=None if weights is None else str(weights), sha256=sha, trained_on=trained_on,
                        trainable=trainable, n_trainable=n_trainable, n_frozen=n_frozen,
                        loaded=0 if loaded is None else len(loaded.loaded),
                        kept=() if loaded is None else loaded.kept,
                        head_rows=None if loaded is None or loaded.kept else rows, pretraining=record)
    refuse_other_starts(folder, start)
    return start
