"""Where every arm starts (`dpmed.pretraining.prepare_start`): nothing for a plain study; saved weights with their
hash and what trains; public pretraining trained once and cached by content, refused before it trains when the
public set overlaps the private one; and the study-file keys (a missing file is an error naming the key and path)."""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import logging
import re
import weakref
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import dpmed.pretraining as pretraining
from dpmed.config import Study, load_study
from dpmed.data import ImageSet, make_phantom
from dpmed.errors import ConfigError, DataError
from dpmed.folders import StudyFolder
from dpmed.models import build_model
from dpmed.folders import file_sha256
from dpmed.pretraining import prepare_start, pretrain_folder
from dpmed.run import start_model

ARMS = [{"name": "base", "mechanism": "none"}]
PUBLIC = {"public": "another phantom: synthetic, of no person",
          "data": {"source": "phantom", "n_images": 100, "image_size": 16, "seed": 1},
          "training": {"steps": 4, "batch_size": 16}}


@pytest.fixture(scope="module")
def private():
    return make_phantom(seed=0, n_images=100, image_size=16)


def _study(**keys) -> Study:
    return Study.model_validate({"name": "s", "data": {"source": "phantom", "n_images": 100, "image_size": 16},
                                 "arms": ARMS, **keys})


def _no_training(*args, **kwargs):
    raise AssertionError("trained although it should not have")


def test_a_plain_study_starts_from_random_weights(private, tmp_path):
    assert prepare_start(_study(), private, StudyFolder(tmp_path)) is None


def test_a_study_without_weights_that_trains_the_head_alone_records_what_is_frozen(private, tmp_path):
    """scatternet_linear with ``trainable: head`` (Tramer and Boneh's linear model over the fixed scattering): no
    weights, but the runs must freeze the GroupNorm, so the start says what trains: the head, 81 channels at 4 x 4
    for two outputs and their biases (2 * 81 * 16 + 2); frozen, the GroupNorm's 81 weights and 81 biases."""
    study = _study(model={"name": "scatternet_linear", "trainable": "head"})
    start = prepare_start(study, private, StudyFolder(tmp_path))
    assert start is not None and start.weights is None and start.sha256 is None and start.loaded == 0
    assert start.trainable == "head" and (start.n_trainable, start.n_frozen) == (2 * 81 * 16 + 2, 2 * 81)


def test_each_run_of_a_study_without_weights_that_trains_the_head_alone_freezes_the_rest(private, tmp_path):
    """The start records no file, so a run loads nothing; but it must still freeze what the start says does not
    train, or scatternet_linear's GroupNorm trains in every arm, unlike the study's record of it."""
    study = _study(model={"name": "scatternet_linear", "trainable": "head"})
    start = prepare_start(study, private, StudyFolder(tmp_path))
    model = build_model("scatternet_linear", in_channels=1, num_outputs=2, image_size=16)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    start_model(model, "scatternet_linear", start)
    trains = sum(p.numel() for p in model.parameters() if p.requires_grad)
    frozen = sum(p.numel() for p in model.parameters() if not p.requires_grad)
    assert (trains, frozen) == (start.n_trainable, start.n_frozen)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())        # nothing loaded


def test_finished_runs_from_random_weights_are_refused_when_the_study_now_starts_from_a_file(private, tmp_path,
                                                                                            make_record):
    weights = tmp_path / "model.pt"
    torch.save(build_model("small_cnn", in_channels=1, num_outputs=2, image_size=16).state_dict(), weights)
    folder = StudyFolder(tmp_path / "out")
    folder.run("base_seed0").public.mkdir(parents=True)
    make_record("base_seed0", "base").write(folder.run("base_seed0").record)
    study = _study(model={"name": "small_cnn", "weights": str(weights), "weights_source": "the phantom"})
    with pytest.raises(ConfigError, match=re.escape(f"now does ({weights}, trained all): base_seed0 (started from "
                                                    "random weights, trained all)")):
        prepare_start(study, private, folder)


def test_finished_runs_from_other_contents_of_the_same_weights_file_are_refused_naming_that(private, tmp_path,
                                                                                              make_record):
    """Other bytes at the same path: the refusal named the finished runs' start as the study's own ("started from
    w.pt, trained all" twice); it says the file's contents differ, with the sha256 the runs started from."""
    weights = tmp_path / "model.pt"
    torch.save(build_model("small_cnn", in_channels=1, num_outputs=2, image_size=16, seed=1).state_dict(), weights)
    study = _study(model={"name": "small_cnn", "weights": str(weights), "weights_source": "the phantom"})
    folder = StudyFolder(tmp_path / "out")
    start = prepare_start(study, private, folder)
    folder.run("base_seed0").public.mkdir(parents=True)
    make_record("base_seed0", "base").model_copy(update={"start": start}).write(folder.run("base_seed0").record)
    assert prepare_start(study, private, folder) == start
    torch.save(build_model("small_cnn", in_channels=1, num_outputs=2, image_size=16, seed=2).state_dict(), weights)
    with pytest.raises(ConfigError, match=re.escape(f"started from other contents of model.weights ({weights}) than "
                                                    f"the file holds now (sha256 {file_sha256(weights)}): base_seed0 "
                                                    f"(sha256 {start.sha256}); restore the file")):
        prepare_start(study, private, folder)


def test_finished_runs_pretrained_from_other_contents_of_model_weights_are_refused_before_the_public_data_are_read(
        private, tmp_path, make_record, monkeypatch):
    """With public pretraining, other bytes in model.weights were met only after the public set was read and checked
    for overlap (minutes on a large one), and the refusal named the cached pretrained weights, not the file that
    changed. The hash the runs' pretraining started from tells it first, as `dpmed status` tells it; the same file
    refuses nothing."""
    import dpmed.pretraining

    weights = tmp_path / "model.pt"
    torch.save(build_model("small_cnn", in_channels=1, num_outputs=2, image_size=16, seed=1).state_dict(), weights)
    study = _study(model={"name": "small_cnn", "weights": str(weights), "weights_source": "the phantom"},
                   pretrain=PUBLIC)
    folder = StudyFolder(tmp_path / "out")
    start = prepare_start(study, private, folder)
    assert start.given_sha256 == file_sha256(weights)
    folder.run("base_seed0").public.mkdir(parents=True)
    make_record("base_seed0", "base").model_copy(update={"start": start}).write(folder.run("base_seed0").record)
    assert prepare_start(study, private, folder) == start
    torch.save(build_model("small_cnn", in_channels=1, num_outputs=2, image_size=16, seed=2).state_dict(), weights)

    def read(request):
        raise AssertionError("the public data were read")

    monkeypatch.setattr(dpmed.pretraining, "read_dataset", read)
    with pytest.raises(ConfigError, match=re.escape(f"model.weights ({weights}) (through public pretraining) than "
                                                    f"the file holds now (sha256 {file_sha256(weights)}): base_seed0 "
                                                    f"(sha256 {start.given_sha256})")):
        prepare_start(study, private, folder)


def test_saved_weights_start_every_arm_with_their_hash_and_what_trains(private, tmp_path):
    weights = tmp_path / "model.pt"
    torch.save(build_model("small_cnn", in_channels=1, num_outputs=2, image_size=16).state_dict(), weights)
    study = _study(model={"name": "small_cnn", "weights": str(weights), "weights_source": "the phantom, seed 9",
                          "trainable": "head"})
    start = prepare_start(study, private, StudyFolder(tmp_path / "out"))
    assert start.sha256 == file_sha256(weights) and start.trained_on == "the phantom, seed 9"
    assert start.loaded == 14 and start.kept == () and start.pretraining is None
    assert start.trainable == "head" and start.n_trainable == 65 * 2 and start.n_frozen > 0


def test_the_log_says_in_words_which_part_of_the_model_trains(private, tmp_path, caplog):
    """``last_blocks: 1`` was logged as "parameters train (1)", a bare number; the log says it as the plan and the
    report do."""
    weights = tmp_path / "model.pt"
    torch.save(build_model("small_cnn", in_channels=1, num_outputs=2, image_size=16).state_dict(), weights)
    study = _study(model={"name": "small_cnn", "weights": str(weights), "weights_source": "the phantom, seed 9",
                          "trainable": {"last_blocks": 1}})
    with caplog.at_level("INFO", logger="dpmed.pretraining"):
        start = prepare_start(study, private, StudyFolder(tmp_path / "out"))
    assert (f"start: {start.n_trainable} parameters train (the head and the last 1 block(s)), {start.n_frozen} "
            "frozen") in caplog.text, caplog.text


def test_pretraining_trains_once_and_is_cached_by_content(private, tmp_path, monkeypatch):
    study = _study(pretrain=PUBLIC, model={"trainable": {"last_blocks": 1}})
    folder = StudyFolder(tmp_path)
    first = prepare_start(study, private, folder)
    record = first.pretraining
    assert record.dataset == "phantom" and record.steps == 4 and record.public == PUBLIC["public"]
    assert Path(first.weights).parent == pretrain_folder(folder) / record.key[:16]
    assert first.sha256 == record.sha256 == file_sha256(Path(first.weights))
    assert "public pretraining on phantom" in first.trained_on and first.trainable == 1
    assert set(record.overlap_checks) == {"identical images", "shared patients", "near-duplicates"}
    monkeypatch.setattr(pretraining, "train", _no_training)
    again = prepare_start(study, private, folder)
    assert again.sha256 == first.sha256
    # what this study declares and checks is its own, not the first study's to use the entry (the report prints it)
    restated = study.model_copy(update={"pretrain": study.pretrain.model_copy(
        update={"public": "restated: a phantom, of no person", "near_duplicate_bits": 5})})
    cached = prepare_start(restated, private, folder).pretraining
    assert cached.sha256 == first.sha256 and cached.public == "restated: a phantom, of no person"
    assert cached.near_duplicate_bits == 5
    other = study.model_copy(update={"pretrain": study.pretrain.model_copy(update={"seed": 5})})
    with pytest.raises(AssertionError, match="trained although"):          # other settings: another key
        prepare_start(other, private, folder)


def test_pretraining_and_the_start_leave_the_caller_s_torch_generator_alone(private, tmp_path):
    """The public model is built from the pretraining's seed, and the start's model (its shapes checked, its
    weights loaded) from one of its own: a caller's later draws are the same whether the study prepared first or not,
    and the pretrained weights do not depend on the caller's generator."""
    study = _study(pretrain=PUBLIC, model={"trainable": {"last_blocks": 1}})
    sha = []
    for seed in (1, 2):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            before = torch.get_rng_state()
            start = prepare_start(study, private, StudyFolder(tmp_path / str(seed)))
            pretraining.check_weights(_study(model={"weights": start.weights, "weights_source": "a public phantom"}),
                                      private)
            assert torch.equal(torch.get_rng_state(), before)
        sha.append(start.sha256)
    assert sha[0] == sha[1]


def test_cached_weights_that_no_longer_have_their_recorded_hash_are_trained_again(private, tmp_path, monkeypatch,
                                                                                   caplog):
    """The entry names its weights by sha256: a file replaced since (other weights, a damaged copy) is never used
    under the old hash, which the card and report would print. Before, it was trained again without a word."""
    study = _study(pretrain=PUBLIC)
    folder = StudyFolder(tmp_path)
    first = prepare_start(study, private, folder)
    weights = Path(first.weights)
    swapped = build_model("small_cnn", in_channels=1, num_outputs=2, image_size=16).state_dict()
    torch.save(swapped, weights)
    trained, real = [], pretraining.train
    monkeypatch.setattr(pretraining, "train", lambda *a, **k: trained.append(1) or real(*a, **k))
    with caplog.at_level("WARNING", logger="dpmed.pretraining"):
        again = prepare_start(study, private, folder)
    assert trained == [1]
    assert (f"pretrain: {weights} does not match the sha256 its pretrain.json records" in caplog.text
            and "training the public model again" in caplog.text)
    assert again.sha256 == first.sha256 == hashlib.sha256(weights.read_bytes()).hexdigest()


def test_pretraining_from_saved_weights_starts_the_public_model_from_them_and_records_them(private, tmp_path,
                                                                                            monkeypatch):
    """model.weights with a pretrain section: the public model trains from those weights (every tensor, the head
    too: the same two outputs), the pretraining record names them by sha256, and every run's start says both what
    trained on the public data and where that began. The record counts the public set's own splits."""
    weights = tmp_path / "model.pt"
    torch.manual_seed(7)
    saved = build_model("small_cnn", in_channels=1, num_outputs=2, image_size=16).state_dict()
    torch.save(saved, weights)
    seen, real = [], pretraining.train

    def spy(model, *args, **kwargs):
        seen.append({k: v.detach().clone() for k, v in model.state_dict().items()})
        return real(model, *args, **kwargs)

    monkeypatch.setattr(pretraining, "train", spy)
    study = _study(pretrain=PUBLIC, model={"name": "small_cnn", "weights": str(weights),
                                           "weights_source": "the phantom, seed 7"})
    start = prepare_start(study, private, StudyFolder(tmp_path / "out"))
    assert len(seen) == 1 and set(seen[0]) == set(saved)
    assert all(torch.equal(seen[0][k], saved[k]) for k in saved)
    record = start.pretraining
    assert record.start_weights == hashlib.sha256(weights.read_bytes()).hexdigest()
    assert start.trained_on.startswith("public pretraining on phantom")
    assert start.trained_on.endswith(f"; it started from {weights} (the phantom, seed 7)")
    public = make_phantom(seed=1, n_images=100, image_size=16)
    assert (record.n_train, record.n_val, record.n_test) == (len(public.train), len(public.val), len(public.test))
    assert record.image_shape == (1, 16, 16)


def test_pretraining_starts_from_the_bytes_its_record_names_even_where_the_file_is_replaced_after_the_hash(
        private, tmp_path, monkeypatch):
    """pretrain hashed model.weights (the cache key and the record name the weights by that hash), then read the file
    again to load it after reading the public data: a file replaced between the two reads (new weights saved under
    the same name) pretrained from weights the record does not name. The hash and the load are of one read."""
    weights = tmp_path / "model.pt"
    torch.manual_seed(7)
    saved = build_model("small_cnn", in_channels=1, num_outputs=2, image_size=16).state_dict()
    torch.save(saved, weights)
    sha = file_sha256(weights)
    replaced, seen, real = [], [], pretraining.train

    def then_replaced(read):
        """``read`` of the file, which is then replaced by other weights: what a second read of it would load."""
        def reading(file, *args, **kwargs):
            got = read(file, *args, **kwargs)
            if Path(file) == weights:
                torch.save({k: v + 1 for k, v in saved.items()}, weights)
                replaced.append(weights)
            return got
        return reading

    for read in ("hash_weights", "read_weights"):     # what is read to be hashed, before the fix or after it
        if hasattr(pretraining, read):
            monkeypatch.setattr(pretraining, read, then_replaced(getattr(pretraining, read)))
    monkeypatch.setattr(pretraining, "train", lambda model, *a, **k: seen.append(
        {k: v.detach().clone() for k, v in model.state_dict().items()}) or real(model, *a, **k))
    study = _study(pretrain=PUBLIC, model={"name": "small_cnn", "weights": str(weights),
                                           "weights_source": "the phantom, seed 7"})
    record = pretraining.pretrain(study, private, StudyFolder(tmp_path / "out"))
    assert replaced == [weights] and record.start_weights == sha != file_sha256(weights) and len(seen) == 1
    for name, value in seen[0].items():
        torch.testing.assert_close(value, saved[name])


def test_finished_runs_that_trained_another_part_are_refused_before_their_pretraining_is_trained_again(
        private, tmp_path, monkeypatch, make_record):
    """The cache entry gone (deleted, or the folder copied without it), the finished runs' start names the same
    pretraining but another trainable setting: the new start would be refused once trained, so it is refused before
    the public model trains again, naming the runs."""
    folder = StudyFolder(tmp_path)
    head_only = prepare_start(_study(pretrain=PUBLIC, model={"trainable": "head"}), private, folder)
    record = make_record("base_seed0", "base").model_copy(update={"start": head_only})
    folder.run("base_seed0").public.mkdir(parents=True)
    record.write(folder.run("base_seed0").record)
    for entry in pretrain_folder(folder).iterdir():
        for file in entry.iterdir():
            file.unlink()
    monkeypatch.setattr(pretraining, "train", _no_training)
    with pytest.raises(ConfigError, match=r"now does \(public pretraining on phantom not yet trained, key .*, "
                                          r"trained all\): base_seed0 \(started from .*, trained head\)"):
        prepare_start(_study(pretrain=PUBLIC), private, folder)


def test_the_overlap_check_runs_at_the_studys_near_duplicate_threshold(private, tmp_path, monkeypatch):
    seen = []

    def stop(public, private, **kwargs):
        seen.append(kwargs)
        raise DataError("stopped by the test")

    monkeypatch.setattr(pretraining, "refuse_overlap", stop)
    study = _study(pretrain={**PUBLIC, "near_duplicate_bits": 7})
    with pytest.raises(DataError, match="stopped by the test"):
        prepare_start(study, private, StudyFolder(tmp_path))
    assert seen[0]["max_distance"] == 7


def test_a_damaged_cache_entry_is_trained_again_and_rewritten(private, tmp_path, caplog):
    """Before: a truncated pretrain.json in the cache ended the study in "internal error: ValidationError"."""
    study = _study(pretrain=PUBLIC)
    folder = StudyFolder(tmp_path)
    first = prepare_start(study, private, folder)
    entry = Path(first.weights).parent / "pretrain.json"
    entry.write_bytes(entry.read_bytes()[:50])
    again = prepare_start(study, private, folder)
    assert again.sha256 == first.sha256                                    # the same public model, trained again
    assert f"pretrain: {entry} cannot be read" in caplog.text and "training the public model again" in caplog.text
    assert pretraining._cached(entry.parent).sha256 == first.sha256        # and its entry is whole again
    Path(first.weights).unlink()                                           # weights gone, their record left
    assert prepare_start(study, private, folder).sha256 == first.sha256
    assert Path(first.weights).is_file()


def test_a_public_validation_split_of_one_class_gives_no_auroc_and_the_log_says_why(private, tmp_path, monkeypatch,
                                                                                     caplog):
    """The public set is no study's private data, so no class check refuses it: a validation split of one class
    leaves the public model's AUROC undefined. Pretraining goes on (the arms do not need it); the record and the
    report hold no number, and the log says why in one line rather than only "undefined" (a model whose scores are
    not numbers is undefined too)."""
    real = pretraining.read_dataset

    def one_class_validation(request):
        public = real(request)
        return dataclasses.replace(public, val=dataclasses.replace(public.val,
                                                                   labels=np.zeros_like(public.val.labels)))

    monkeypatch.setattr(pretraining, "read_dataset", one_class_validation)
    study = _study(pretrain=PUBLIC)
    folder = StudyFolder(tmp_path)
    with caplog.at_level("INFO", logger="dpmed.pretraining"):
        start = prepare_start(study, private, folder)
    n_val = start.pretraining.n_val
    assert start.pretraining.validation_auroc is None and Path(start.weights).is_file()
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1 and "validation AUROC" not in caplog.text.replace(warned[0], "")   # said once
    assert re.fullmatch(rf"pretrain: done in \d+ s, public validation AUROC undefined \(auroc: undefined, no label has "
                        rf"both positives and negatives among the {n_val} samples; the report states none\); weights "
                        r"in .*", warned[0]), warned
    caplog.clear()
    with caplog.at_level("INFO", logger="dpmed.pretraining"):          # the cached entry keeps it undefined
        assert prepare_start(study, private, folder).pretraining.validation_auroc is None
    assert "weights of an earlier run found" in caplog.text and "(validation AUROC undefined)" in caplog.text


@pytest.mark.parametrize("threads, expected", [({}, 1), ({"threads": 2}, 2)])
def test_pretraining_trains_at_the_set_thread_count_not_the_process_s(private, tmp_path, monkeypatch, threads,
                                                                      expected):
    """Before, it trained at whatever count torch had (the machine's cores, or what earlier work left), so the same
    study file gave other weights on another machine; now the pretrain stage's own count, else the study's."""
    seen = []
    real = pretraining.train

    def spy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(pretraining, "train", spy)
    study = _study(pretrain={**PUBLIC, "training": {**PUBLIC["training"], **threads}}, training={"threads": 1})
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        prepare_start(study, private, StudyFolder(tmp_path))
        assert torch.get_num_threads() == 3                       # and the process's count is given back
    finally:
        torch.set_num_threads(before)
    assert seen == [expected]


def test_a_pretrained_head_for_other_classes_is_not_loaded_even_where_its_shape_fits(private, tmp_path):
    """Two outputs for two other classes: a head of the right shape would start each private class from another
    class's weights. It is left at its initialisation, the record lists it, and each run starts so; the same names
    in the same order load it."""
    other = dataclasses.replace(private, task=dataclasses.replace(private.task, label_names=("benign", "malignant")))
    study = _study(pretrain=PUBLIC)
    start = prepare_start(study, other, StudyFolder(tmp_path))
    assert start.pretraining.label_names == private.task.label_names and start.kept == ("head.weight", "head.bias")
    model = build_model("small_cnn", in_channels=1, num_outputs=2, image_size=16)
    assert start.loaded == len(model.state_dict()) - 2 and start.head_rows is None
    same = prepare_start(study, private, StudyFolder(tmp_path / "same"))
    assert same.sha256 == start.sha256 and same.kept == () and same.loaded == len(model.state_dict())
    # ... and the model each run trains is started so: before, run.start_model loaded the head anyway
    file = torch.load(start.weights, weights_only=True)
    torch.manual_seed(3)
    model = build_model("small_cnn", in_channels=1, num_outputs=2, image_size=16)
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    start_model(model, "small_cnn", start)
    for k, v in model.state_dict().items():
        assert torch.equal(v, initial[k] if k in start.kept else file[k]), k
    start_model(model, "small_cnn", same)
    assert torch.equal(model.head.weight, file["head.weight"])


def test_a_pretrained_head_for_the_same_labels_in_another_order_or_letter_case_is_loaded_in_the_study_s_order(
        private, tmp_path, caplog):
    """Before, public labels that differed from the study's in letter case ("normal", "NORMAL") or in order only
    left the head at its initialisation without need. Now its outputs are taken in the study's order, by the study
    (the log says so) and by every run (``head_rows``): each class starts from its own pretrained row."""
    def relabelled(names):
        return dataclasses.replace(private, task=dataclasses.replace(private.task, label_names=names))

    upper = tuple(n.upper() for n in private.task.label_names)
    n_tensors = len(build_model("small_cnn", in_channels=1, num_outputs=2, image_size=16).state_dict())
    with caplog.at_level("INFO", logger="dpmed.pretraining"):
        start = prepare_start(_study(pretrain=PUBLIC), relabelled(upper), StudyFolder(tmp_path))
        swapped = prepare_start(_study(pretrain=PUBLIC), relabelled(upper[::-1]), StudyFolder(tmp_path / "swapped"))
    assert "head loaded (the study's labels up to letter case)" in caplog.text
    assert (f"head loaded (the study's labels up to letter case in another order "
            f"({list(private.task.label_names)}))" in caplog.text)
    assert start.kept == swapped.kept == () and start.loaded == swapped.loaded == n_tensors
    assert start.head_rows is None and swapped.head_rows == (1, 0)
    file = torch.load(start.weights, weights_only=True)
    for record, rows in ((start, [0, 1]), (swapped, [1, 0])):                     # and each run starts so
        model = build_model("small_cnn", in_channels=1, num_outputs=2, image_size=16)
        start_model(model, "small_cnn", record)
        assert torch.equal(model.head.weight, file["head.weight"][rows])
        assert torch.equal(model.head.bias, file["head.bias"][rows])


def test_finished_runs_whose_head_started_otherwise_are_refused_not_mixed(tmp_path, make_record):
    """One weights file and one trainable setting can start a head two ways: left at its initialisation (a dpmed
    before the head was matched by name), or taken from the pretrained rows in the study's order. A resumed study
    compared the file and the setting only, so it would mix both starts in one table."""
    from dpmed.records import StartRecord

    folder = StudyFolder(tmp_path)
    common = dict(weights="/cache/pre.pt", sha256="ab" * 32, trainable="all", n_trainable=10, n_frozen=0)
    kept = StartRecord(**common, loaded=8, kept=("head.weight", "head.bias"))
    reordered = StartRecord(**common, loaded=10, head_rows=(1, 0))
    record = make_record("base_seed0", "base").model_copy(update={"start": kept})
    folder.run("base_seed0").public.mkdir(parents=True)
    record.write(folder.run("base_seed0").record)
    pretraining.refuse_other_starts(folder, kept)                       # the same start: reused
    with pytest.raises(ConfigError) as info:
        pretraining.refuse_other_starts(folder, reordered)
    message = str(info.value)
    assert "now does (/cache/pre.pt, trained all; head's pretrained outputs taken in another order)" in message
    assert "base_seed0 (started from /cache/pre.pt, trained all; head left at its initialisation)" in message


def test_cached_pretraining_is_found_after_a_relative_out_folder_moves(private, tmp_path, monkeypatch):
    """``--out`` relative to the working directory, then the folder moved and the study resumed from another
    working directory: the cached weights are read where the entry is now, without training again; so are those of
    an entry whose record still names the weights by the path given when it was written (older entries)."""
    study = _study(pretrain=PUBLIC, model={"trainable": "head"})
    monkeypatch.chdir(tmp_path)
    first = prepare_start(study, private, StudyFolder(Path("out") / "s"))
    entry_name = first.pretraining.key[:16]
    assert Path(first.weights) == Path("out") / "s" / "pretrain" / entry_name / "weights.pt"
    (tmp_path / "out").rename(tmp_path / "moved")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    monkeypatch.setattr(pretraining, "train", _no_training)
    folder = StudyFolder(Path("..") / "moved" / "s")
    entry = pretrain_folder(folder) / entry_name
    again = prepare_start(study, private, folder)
    assert Path(again.weights) == entry / "weights.pt" and again.pretraining.weights == again.weights
    assert again.sha256 == first.sha256 and again.loaded == first.loaded and again.kept == first.kept
    older = first.pretraining.model_copy(update={"weights": first.weights})       # out/s/pretrain/...: stale now
    older.write(entry / "pretrain.json")
    assert Path(prepare_start(study, private, folder).weights) == entry / "weights.pt"


def test_an_overlapping_public_set_is_refused_before_anything_trains(private, tmp_path, monkeypatch):
    monkeypatch.setattr(pretraining, "train", _no_training)
    same = {**PUBLIC, "data": {"source": "phantom", "n_images": 100, "image_size": 16, "seed": 0}}
    with pytest.raises(DataError, match="pretrain.data .* overlaps the private dataset"):
        prepare_start(_study(pretrain=same), private, StudyFolder(tmp_path))
    assert not pretrain_folder(StudyFolder(tmp_path)).exists()


@pytest.mark.parametrize("own_steps", [{"image_size": 17}, {"preprocessing": {"equalize": True}}])
def test_the_private_files_are_refused_as_public_whatever_steps_the_public_set_is_read_with(tmp_path,
                                                                                               write_png_table,
                                                                                               monkeypatch, own_steps):
    """The identical-image check compares pixels, and a file of both sets decodes to the same pixels only under the
    same per-image steps. Before, the private CSV given again as pretrain.data at another size (or with its own
    preprocessing) had no identical image, no patient ids to compare, and no near-duplicate at
    near_duplicate_bits 0: it was trained on without noise."""
    from dpmed.data import read_dataset

    data = {"source": "csv", "path": str(write_png_table(40, (20, 20))), "columns": {"path": "file"},
            "labels": ["finding"], "task": "binary"}
    study = Study.model_validate({"name": "s", "data": {**data, "image_size": 16, "channels": 1}, "arms": ARMS,
                                  "pretrain": {**PUBLIC, "data": {**data, **own_steps}, "near_duplicate_bits": 0}})
    private = read_dataset(study.data.to_request())
    monkeypatch.setattr(pretraining, "train", _no_training)
    with pytest.raises(DataError, match="40 private image.s. are identical to public ones"):
        prepare_start(study, private, StudyFolder(tmp_path / "out"))


def _png_table(folder: Path, images: np.ndarray, patients: list[str]) -> dict:
    """A CSV dataset of grey PNGs ``images`` uint8 [N, H, W] with patient ids, as a study's data section."""
    folder.mkdir()
    rows = ["file,pid,finding"]
    for i, (image, pid) in enumerate(zip(images, patients, strict=True)):
        Image.fromarray(image).save(folder / f"{i}.png")
        rows.append(f"{i}.png,{pid},{i % 2}")
    (folder / "labels.csv").write_text("\n".join(rows) + "\n")
    return {"source": "csv", "path": str(folder / "labels.csv"), "columns": {"path": "file", "patient": "pid"},
            "labels": ["finding"], "task": "binary", "channels": 1}


@pytest.mark.parametrize("public_kind, refusal", [
    ("unrelated", None),
    ("the private files", "40 private image.s. are identical to public ones"),
    ("the private patients", "40 patient id.s. are in both sets"),
    ("the private images, contrast halved", "40 of 40 private images have a near-duplicate"),
])
def test_the_public_set_read_again_for_the_overlap_check_is_dropped_before_the_copy_that_trains_is_read(
        tmp_path, monkeypatch, public_kind, refusal):
    """The public set at its own size (20 px), the private data at 16 px: the check reads the public set again at
    16 px. Before, that copy was read after the one that trains, and both were held at once (twice the public set's
    memory). Now it is read first and gone before the other is decoded; each check refuses as before, before the
    copy that trains is read at all."""
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (40, 20, 20), dtype=np.uint8)
    ids = [f"p{i}" for i in range(40)]
    private_data = _png_table(tmp_path / "private", images, ids)
    public_images, public_ids = {
        "unrelated": (rng.integers(0, 256, (40, 20, 20), dtype=np.uint8), [f"q{i}" for i in range(40)]),
        "the private files": (images, [f"q{i}" for i in range(40)]),
        "the private patients": (rng.integers(0, 256, (40, 20, 20), dtype=np.uint8), ids),
        "the private images, contrast halved": ((64 + images // 2).astype(np.uint8), [f"q{i}" for i in range(40)]),
    }[public_kind]
    public_data = {**_png_table(tmp_path / "public", public_images, public_ids), "image_size": 20}
    study = Study.model_validate({"name": "s", "data": {**private_data, "image_size": 16}, "arms": ARMS,
                                  "pretrain": {**PUBLIC, "data": public_data}})
    private = pretraining.read_dataset(study.data.to_request())
    reads, earlier, real = [], [], pretraining.read_dataset

    def read(request):
        """The reader, recording each read's image size and how many sets it read before are still held."""
        gc.collect()
        reads.append((request.preprocessing.size, sum(any(r() is not None for r in refs) for refs in earlier)))
        dataset = real(request)
        earlier.append([weakref.ref(s.images) for s in (dataset.train, dataset.val, dataset.test)])
        return dataset

    monkeypatch.setattr(pretraining, "read_dataset", read)
    monkeypatch.setattr(pretraining, "train", _no_training)
    with pytest.raises(AssertionError if refusal is None else DataError,
                       match="trained although" if refusal is None else refusal):
        prepare_start(study, private, StudyFolder(tmp_path / "out"))
    assert reads == ([((16, 16), 0)] if refusal else [((16, 16), 0), ((20, 20), 0)])


def test_a_public_data_setting_the_public_data_leave_unread_is_told_before_pretraining(private, tmp_path, monkeypatch,
                                                                                      caplog):
    """pretrain.data's split keys are read as the study's are: a fraction of a split the public layout publishes
    changes nothing (the cache key hashes the public images, not the keys), and is told once the public data are read
    and before anything trains, naming the --set that gave it; the fraction of the split it carves is not told."""
    public = _png_table(tmp_path / "public", np.random.default_rng(0).integers(0, 256, (40, 16, 16), dtype=np.uint8),
                        [f"q{i}" for i in range(40)])
    table = Path(public["path"])
    rows = table.read_text().splitlines()
    table.write_text("\n".join([f"{rows[0]},split", *(f"{row},{'val' if i % 5 == 0 else ''}"
                                                      for i, row in enumerate(rows[1:]))]) + "\n")
    public["columns"]["split"] = "split"
    monkeypatch.setattr(pretraining, "train", _no_training)
    said = ("pretrain.data.split.val_fraction changes nothing, as labels publishes its validation split, kept as "
            "published; remove it from --set pretrain.data.split.val_fraction=0.3 (runs that finished with it are the "
            "same runs without it)")
    for split, told in (({"test_fraction": 0.2}, []), ({"val_fraction": 0.3, "test_fraction": 0.2}, [said])):
        study = _study(pretrain={**PUBLIC, "data": {**public, "split": split}}).given_with(
            {"pretrain.data.split.val_fraction": "--set pretrain.data.split.val_fraction=0.3"})
        caplog.clear()
        with caplog.at_level(logging.WARNING), pytest.raises(AssertionError, match="trained although"):
            prepare_start(study, private, StudyFolder(tmp_path / "out"))
        assert [r.getMessage() for r in caplog.records if "changes nothing" in r.getMessage()] == told


def test_the_cache_key_hashes_the_public_images_where_they_are_not_a_copy_of_them():
    """Before, each split's images were copied into a bytes object to be hashed: with the copy that trains, the
    largest split of the public set was held twice."""
    import tracemalloc

    public = make_phantom(seed=1, n_images=1000, image_size=32)
    study = _study(pretrain=PUBLIC)
    tracemalloc.start()
    try:
        pretraining._content_key(public, study.pretrain, "small_cnn", None)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < public.train.images.nbytes / 4, (peak, public.train.images.nbytes)


def test_the_cache_key_is_of_the_public_images_content_in_every_split():
    """Equal keys must mean equal weights: the key is the same for the same pixels held elsewhere in memory (a copy,
    or a view of another layout), and differs where one pixel of any split differs, as where the labels do. A key
    of the labels and shapes alone handed a study the weights of other public images."""
    public = make_phantom(seed=1, n_images=60, image_size=16)
    study = _study(pretrain=PUBLIC)

    def key(dataset) -> str:
        return pretraining._content_key(dataset, study.pretrain, "small_cnn", None)

    def changed(split: str, images: np.ndarray):
        return dataclasses.replace(public, **{split: getattr(public, split).with_images(images)})

    first = key(public)
    assert key(changed("train", np.asfortranarray(public.train.images))) == first           # same pixels
    for split in ("train", "val", "test"):
        images = getattr(public, split).images.copy()
        images.flat[images.size // 2] += 1.0 / 255
        assert key(changed(split, images)) != first, split
    flipped = dataclasses.replace(public.train, labels=1 - public.train.labels)
    assert key(dataclasses.replace(public, train=flipped)) != first


def test_the_cache_key_changes_with_what_pretraining_computes_and_not_with_where_it_runs():
    """Another key for anything that changes the weights: the training settings, the model (small_cnn_ws holds
    small_cnn's tensors, so a key without the name would hand one the other's weights), the weights it starts from,
    the labels' meaning, the fixed normalisation, and the images' shape (the same bytes as 8 x 32 px images). The
    same key where only the device, the thread count or the physical batch differ: the same weights are computed."""
    public = make_phantom(seed=1, n_images=60, image_size=16)
    config = _study(pretrain=PUBLIC).pretrain

    def key(dataset=public, settings=config, model="small_cnn", start=None) -> str:
        return pretraining._content_key(dataset, settings, model, start)

    def training(**update):
        return config.model_copy(update={"training": config.training.model_copy(update=update)})

    def task(**update):
        return dataclasses.replace(public, task=dataclasses.replace(public.task, **update))

    first = key()
    for name, other in {
            "steps": key(settings=training(steps=5)),
            "learning rate": key(settings=training(learning_rate=config.training.learning_rate * 2)),
            "model": key(model="small_cnn_ws"),
            "start": key(start="ab" * 32),
            "labels": key(task(label_names=public.task.label_names[::-1])),
            "kind": key(task(kind="multiclass")),
            "normalization": key(dataclasses.replace(public, normalization=((0.5,), (0.25,)))),
            "shape": key(dataclasses.replace(public, train=ImageSet(
                public.train.images.reshape(-1, 1, 8, 32), public.train.labels, public.train.patient_ids,
                public.train.sex, public.train.age))),
    }.items():
        assert other != first, name
    assert key(settings=training(device="cuda", threads=3, physical_batch_size=4)) == first


def test_public_images_must_have_the_private_channels(private, tmp_path, monkeypatch):
    monkeypatch.setattr(pretraining, "train", _no_training)
    rgb = {**PUBLIC, "data": {**PUBLIC["data"], "channels": 3}}
    with pytest.raises(ConfigError, match="set pretrain.data.channels to 1"):
        prepare_start(_study(pretrain=rgb), private, StudyFolder(tmp_path))


def test_public_images_take_the_private_size_by_default(private):
    request = pretraining.public_request(_study(pretrain={**PUBLIC, "data": {"source": "phantom"}}).pretrain.data,
                                         private)
    assert request.preprocessing.size == (16, 16) and request.preprocessing.channels == 1


# --- the study file ------------------------------------------------------------------------------------------------

def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(text)
    return path


def test_a_missing_weights_file_names_the_key_and_the_path(tmp_path):
    path = _write(tmp_path, "name: s\nmodel: {weights: w/none.pt, weights_source: x}\narms: [{name: a, mechanism: "
                            "none}]\n")
    with pytest.raises(ConfigError, match=f"model.weights: no such file {tmp_path / 'w' / 'none.pt'}"):
        load_study(path)


def test_a_weights_file_that_cannot_be_read_is_told_when_the_study_file_is_loaded(tmp_path, monkeypatch):
    """Before: a weights file this user may not read was found only once the whole dataset had been read (`dpmed
    plan` loads the weights after the data; `dpmed run` hashes them after)."""
    weights = tmp_path / "m.pt"
    weights.write_bytes(b"not looked into here")
    opened = Path.open

    def denied(self, *args, **kwargs):
        if self == weights:
            raise PermissionError(13, "Permission denied", str(self))
        return opened(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", denied)
    path = _write(tmp_path, "name: s\nmodel: {weights: m.pt, weights_source: x}\narms: [{name: a, mechanism: none}]\n")
    with pytest.raises(ConfigError, match=re.escape(f"model.weights: {weights} cannot be read (Permission denied); "
                                                    "check that this user may read it")):
        load_study(path)


def test_relative_weights_and_public_data_paths_are_read_from_the_study_folder(tmp_path):
    (tmp_path / "w").mkdir()
    torch.save({}, tmp_path / "w" / "m.pt")
    (tmp_path / "public").mkdir()
    path = _write(tmp_path, "name: s\nmodel: {weights: w/m.pt, weights_source: x, trainable: {last_blocks: 2}}\n"
                            "pretrain: {public: p, data: {source: folders, path: public}}\n"
                            "arms: [{name: a, mechanism: none}]\n")
    study = load_study(path)
    assert study.model.weights == (tmp_path / "w" / "m.pt").resolve()
    assert study.pretrain.data.path == (tmp_path / "public").resolve()
    assert study.model.trainable_setting == 2
    with pytest.raises(ConfigError, match="pretrain.data.path: no such file or folder"):
        load_study(_write(tmp_path, "name: s\npretrain: {public: p, data: {source: folders, path: gone}}\n"
                                    "arms: [{name: a, mechanism: none}]\n"))


def test_only_a_pathless_public_set_of_the_studys_own_source_reads_the_studys_data_path(tmp_path):
    """The second site (configs/kermany_pretrained.yaml): pretrain.data of the study's source without a path is
    another cohort of the same release. A public path the study gives, or a public set of another source, is
    never replaced by the private data's path (that would pretrain on the private patients)."""
    for name in ("private", "public"):
        (tmp_path / name).mkdir()

    def public_path(pretrain_data: str) -> Path | None:
        study = load_study(_write(tmp_path, f"name: s\ndata: {{source: folders, path: private}}\n"
                                            f"pretrain: {{public: p, data: {pretrain_data}}}\n"
                                            "arms: [{name: a, mechanism: none}]\n"))
        return study.pretrain.data.path

    assert public_path("{source: folders, patients: {fraction: 0.5, part: 1}}") == (tmp_path / "private").resolve()
    assert public_path("{source: folders, path: public}") == (tmp_path / "public").resolve()
    assert public_path("{source: phantom}") is None
    # a pathless public set of another source that reads a path is refused, not given the private patients' path
    with pytest.raises(ConfigError, match="pretrain.data: source 'csv' needs 'path'"):
        public_path("{source: csv}")


def test_a_path_given_to_a_generated_source_is_refused_once_where_it_was_given(tmp_path):
    """--data-path (or data.path) given to a phantom study with a phantom public set was refused twice, the second
    time as "pretrain.data: source 'phantom' is generated, it takes no 'path'": a path the pretrain section never
    held, copied there as if it were another cohort of a release on disk. A source of a kind that needs no path
    (or one not known) is not given the data section's path."""
    (tmp_path / "ds").mkdir()
    text = ("name: s\ndata: {source: phantom}\npretrain: {public: p, data: {source: phantom}}\n"
            "arms: [{name: a, mechanism: none}]\n")
    with pytest.raises(ConfigError) as info:
        load_study(_write(tmp_path, text), {"data.path": str(tmp_path / "ds")},
                   origins={"data.path": "--data-path ds"})
    message = str(info.value)
    assert "  - data: source 'phantom' is generated, it takes no 'path' (after --data-path ds)" in message, message
    assert "pretrain.data" not in message, message
    with pytest.raises(ConfigError, match=r"pretrain.data.source: \[1\] is not one of"):
        load_study(_write(tmp_path, text.replace("source: phantom", "source: [1]")),
                   {"data.path": str(tmp_path / "ds")})


def test_weights_that_are_a_folder_and_a_near_duplicate_distance_beyond_half_the_hash_are_refused(tmp_path):
    """A folder is no state dict; two images further apart than half the hash's bits are less alike than unrelated
    ones, so a threshold there would refuse every public set."""
    (tmp_path / "w").mkdir()
    with pytest.raises(ConfigError, match=f"model.weights: {tmp_path / 'w'} is a folder; give the path of the "
                                          "weights file in it"):
        load_study(_write(tmp_path, "name: s\nmodel: {weights: w, weights_source: x}\narms: [{name: a, mechanism: "
                                    "none}]\n"))
    with pytest.raises(ConfigError, match=r"pretrain.near_duplicate_bits: must be at most 127, got 128; lower it to "
                                          "127 or less"):
        load_study(_write(tmp_path, "name: s\npretrain: {public: p, data: {source: phantom}, near_duplicate_bits: "
                                    "128}\narms: [{name: a, mechanism: none}]\n"))


@pytest.mark.parametrize(("model", "message"), [
    ("{weights: m.pt}", "needs model.weights_source"),
    ("{weights_source: ImageNet}", "describes model.weights, which is not set"),
    ("{trainable: {last_blocks: 0}}", "last_blocks"),
    ("{trainable: some}", "trainable"),
])
def test_model_keys_are_checked(tmp_path, model, message):
    with pytest.raises(ConfigError, match=message):
        load_study(_write(tmp_path, f"name: s\nmodel: {model}\narms: [{{name: a, mechanism: none}}]\n"))


def test_the_plan_s_start_line_for_saved_weights_alone_names_the_file_and_its_source(tmp_path):
    """`dpmed plan` for a study started from a weights file, without public pretraining: the file and what it was
    trained on, what trains, and that the eps does not cover it; nothing of a pretraining that will not run."""
    weights = tmp_path / "model.pt"
    torch.save(build_model("small_cnn", in_channels=1, num_outputs=2, image_size=16).state_dict(), weights)
    study = _study(model={"name": "small_cnn", "weights": str(weights), "weights_source": "ImageNet",
                          "trainable": "head"})
    assert pretraining.describe_start(study) == (f"{weights} (ImageNet); only the head trains. What the model "
                                                 "learns before the arms is not covered by any eps")


def test_pretrain_needs_a_public_statement(tmp_path):
    with pytest.raises(ConfigError, match="public"):
        load_study(_write(tmp_path, "name: s\npretrain: {data: {source: phantom}}\narms: [{name: a, mechanism: "
                                    "none}]\n"))


def test_a_data_free_prior_from_random_processes(private, tmp_path):
    """Pretraining on images of random processes (Tang et al. 2023): six process classes, so the two-class private
    model keeps its own head, and the record says so."""
    prior = {"public": "images of random processes: no data, no person",
             "data": {"source": "random_processes", "n_images": 60}, "training": {"steps": 3, "batch_size": 16}}
    start = prepare_start(_study(pretrain=prior), private, StudyFolder(tmp_path))
    assert start.pretraining.dataset == "random_processes" and start.pretraining.task == "multiclass"
    assert start.kept == ("head.weight", "head.bias") and start.loaded == 12
    assert start.pretraining.image_shape == (1, 16, 16)


def test_the_plan_s_start_line_says_the_public_images_are_read_and_checked_by_run_not_plan():
    """README said `dpmed plan` "reads the data ... as `run` does", but plan never reads pretrain.data: an unreadable
    or overlapping public set is found by `dpmed run` only, and the start line plan prints now says so. It also read
    "1 steps" for one step."""
    from dpmed.pretraining import describe_start

    line = describe_start(_study(pretrain={**PUBLIC, "training": {"steps": 1, "batch_size": 16}}))
    assert "(1 step at batch 16" in line
    blocks = describe_start(_study(pretrain=PUBLIC, model={"trainable": {"last_blocks": 2}}))
    assert "; the head and the last 2 block(s) train. What the model learns" in blocks
    assert "`dpmed plan` does not read the public images: `dpmed run` finds an unreadable or overlapping public set" \
        in line


def test_the_plan_s_start_line_says_what_an_auto_length_is():
    """pretrain.training's default length (epochs: auto) read "auto epochs at batch 64"."""
    from dpmed.pretraining import describe_start

    line = describe_start(_study(pretrain={**PUBLIC, "training": {"batch_size": 16}}))
    assert "(auto: at least 10 epochs and 500 steps at batch 16, without privacy" in line


def test_weights_of_another_architecture_are_refused_naming_the_file_by_plan_and_by_pretraining(private, tmp_path,
                                                                                                 monkeypatch):
    """`dpmed plan` (`check_weights`) and the pretrain stage, which loads model.weights into the public model, named
    the key and the tensor but not the file; prepare_start named it. Now all three do."""
    from dpmed.pretraining import check_weights

    rgb = tmp_path / "rgb.pt"
    torch.save(build_model("small_cnn", in_channels=3, num_outputs=2, image_size=16).state_dict(), rgb)
    model = {"name": "small_cnn", "weights": str(rgb), "weights_source": "three-channel images"}
    expected = f"model.weights: {rgb}: features.0.0.weight has shape [16, 3, 3, 3] in the file but [16, 1, 3, 3]"
    with pytest.raises(ConfigError, match=re.escape(expected)):
        check_weights(_study(model=model), private)
    monkeypatch.setattr(pretraining, "train", _no_training)
    with pytest.raises(ConfigError, match=re.escape(expected)):
        prepare_start(_study(model=model, pretrain=PUBLIC), private, StudyFolder(tmp_path / "out"))


def test_an_unreadable_weights_file_is_a_clear_error_not_an_internal_one(private, tmp_path, monkeypatch):
    """prepare_start hashes model.weights before it reads them: a file the user may not read ended `dpmed run` in
    "internal error: PermissionError ... Please report this"."""
    import dpmed.models.weights as weights_module

    path = tmp_path / "model.pt"
    torch.save(build_model("small_cnn", in_channels=1, num_outputs=2, image_size=16).state_dict(), path)

    def denied(file, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(file))

    monkeypatch.setattr(weights_module, "open", denied, raising=False)     # file_sha256's reads
    monkeypatch.setattr(torch, "load", denied)
    model = {"name": "small_cnn", "weights": str(path), "weights_source": "the phantom"}
    for study in (_study(model=model), _study(model=model, pretrain=PUBLIC)):
        with pytest.raises(ConfigError, match=re.escape(f"model.weights: {path} cannot be read (Permission denied)")):
            prepare_start(study, private, StudyFolder(tmp_path / "out"))


@pytest.mark.parametrize("unread", [{"dp_engine": "opacus"}, {"optimizer": "adam", "momentum": 0.5},
                                    {"reference_batch_size": 8}, {"lr_schedule": {"gamma": 0.5}}])
def test_weights_an_earlier_dpmed_keyed_by_a_setting_pretraining_does_not_read_are_reused(private, tmp_path,
                                                                                        monkeypatch, make_record,
                                                                                        unread):
    """An earlier dpmed took pretrain.training.dp_engine, or a momentum beside Adam, and keyed its cached weights by
    it, though they trained as without it; and by a setting another turns off (a reference batch beside lr_scaling
    none, a gamma beside a constant schedule). The study file that resumes its folder may give none (the first two
    are refused now): the cached weights are this study's, found without training again, and its finished runs,
    which started from them, are reused rather than refused as started from other weights."""
    import json

    from dpmed.config import TrainingConfig
    from dpmed.config.schema import EXECUTION_ONLY

    earlier = Study.model_validate_json(json.dumps(_study(pretrain=PUBLIC).model_dump(mode="json") | {
        "pretrain": {**PUBLIC, "training": {**PUBLIC["training"], **unread}}}))   # as study.yaml is read back
    folder = StudyFolder(tmp_path)
    with monkeypatch.context() as patched:       # an earlier dpmed keyed by the settings as given
        patched.setattr(TrainingConfig, "computed_settings",
                        lambda self, **_: self.model_dump(mode="json", exclude=set(EXECUTION_ONLY)))
        before = prepare_start(earlier, private, folder)
    record = make_record("base_seed0", "base").model_copy(update={"start": before})
    folder.run("base_seed0").public.mkdir(parents=True)
    record.write(folder.run("base_seed0").record)
    monkeypatch.setattr(pretraining, "train", _no_training)
    now = prepare_start(_study(pretrain=PUBLIC), private, folder)
    assert now.sha256 == before.sha256 and now.weights == before.weights
