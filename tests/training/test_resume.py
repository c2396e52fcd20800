"""Kill and resume: a run interrupted mid-training and continued from its checkpoint ends with exactly the model
and the privacy ledger (so the eps) of a run trained in one go (METHODS.md s.3). The privacy randomness continues
from the position the checkpoint saved; its key is the run's (a fresh process rebuilds it from the saved key)."""

from __future__ import annotations

import json
import logging
import math
import re
import subprocess
import sys
import traceback
from pathlib import Path

import numpy as np
import pytest
import torch

from dpmed.accounting import ledger_epsilon
from dpmed.config import TrainingConfig
from dpmed.config.schema import AugmentationConfig
from dpmed.randomness import PRIVACY_STREAMS, PrivacyRandomness, _stream_key
from dpmed.training import DpSgdPlan, DpSgdStep, checkpoint_review, train

CFG = TrainingConfig(epochs=3, batch_size=16, physical_batch_size=64, optimizer="adam", learning_rate=1e-3)
PLAN = DpSgdPlan(noise_multiplier=1.2, max_grad_norm=1.0, sample_rate=0.2, steps=17)  # epochs of 5 steps


class Killed(Exception):
    pass


def _interrupt_after(monkeypatch, target, name, calls):
    original, count = getattr(target, name), {"n": 0}

    def wrapped(*args, **kwargs):
        count["n"] += 1
        if count["n"] > calls:
            raise Killed
        return original(*args, **kwargs)
    monkeypatch.setattr(target, name, wrapped)


def _in_one_go(data, new_model, dp, key):
    """The model and result of a training in one go under the run's key ``key``, which a resumed one must equal."""
    images, task = data
    model = new_model(task)
    return model, train(model, images, task, CFG, seed=4, dp=dp,
                        randomness=PrivacyRandomness.from_root_hex(key, "secure"), progress=False)


@pytest.fixture(scope="module")
def dp_in_one_go(data, new_model):
    """A DP-SGD training in one go under a fresh key, with that key: trained once for the tests that resume it (no
    test changes it, and none needs a key of its own)."""
    key = PrivacyRandomness.secure().root_hex()
    return key, *_in_one_go(data, new_model, PLAN, key)


@pytest.mark.parametrize("dp", [PLAN, None], ids=["dp-sgd", "non-private"])
def test_a_resumed_run_equals_an_uninterrupted_one(data, new_model, dp_in_one_go, dp, tmp_path, monkeypatch, caplog):
    images, task = data
    if dp is not None:
        key, whole_model, whole = dp_in_one_go
    else:
        key = PrivacyRandomness.secure().root_hex()
        whole_model, whole = _in_one_go(data, new_model, dp, key)

    def randomness():                  # the run's key, as a fresh process reads it back from the private folder
        return PrivacyRandomness.from_root_hex(key, "secure")

    ckpt = tmp_path / "checkpoint.pt"
    with monkeypatch.context() as m:   # the "kill": step 13 of 17 (DP) or the 2nd epoch's 3rd batch fails
        if dp is not None:
            _interrupt_after(m, DpSgdStep, "__call__", 12)
        else:
            _interrupt_after(m, torch.optim.Adam, "step", len(images) // 16 + 3)
        with pytest.raises(Killed):
            train(new_model(task), images, task, CFG, seed=4, dp=dp, randomness=randomness(), progress=False,
                  checkpoint=ckpt)
    per_epoch = math.ceil(len(images) / CFG.batch_size)
    total, done = (PLAN.steps, 10) if dp is not None else (3 * per_epoch, per_epoch)
    # what `dpmed status` shows: the last save, not step 13, and that it continues
    assert checkpoint_review(ckpt, randomness()) == ((done, total), None)

    resumed_model = new_model(task)   # a fresh process would rebuild the model the same way
    with caplog.at_level(logging.INFO, logger="dpmed.training.loop"):
        resumed = train(resumed_model, images, task, CFG, seed=4, dp=dp, randomness=randomness(), progress=False,
                        log_progress=True, checkpoint=ckpt)
    assert resumed.resumed_from == done      # a step, as the log says, for both kinds (the plain run said epoch 1)
    assert f"train: continues from its checkpoint at step {done} of {total}" in caplog.messages
    logged = [int(m.group(1)) for r in caplog.records if (m := re.search(r": step (\d+) of ", r.getMessage()))]
    # counts on: the first two steps taken here, then the tenths still to come
    assert logged == sorted({done + 1, done + 2}
                            | {s for s in (math.ceil(total * k / 10) for k in range(1, 10)) if s > done})
    assert resumed.ledger == whole.ledger and resumed.statistics == whole.statistics
    for a, b in zip(resumed_model.state_dict().values(), whole_model.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    if dp is not None:
        assert resumed.ledger.dp_sgd_steps == PLAN.steps
        assert (ledger_epsilon(resumed.ledger, delta=1e-5) == ledger_epsilon(whole.ledger, delta=1e-5))


def test_a_run_resumed_twice_with_patients_and_augmented_copies_equals_an_uninterrupted_one(data, new_model,
                                                                                             tmp_path, monkeypatch):
    # Killed right after its first checkpoint (step 5), then mid-epoch (step 12): each resume restores the stream
    # positions that the one before restored and moved on, under the patient unit's grouping and K copies per image.
    images, task = data
    cfg = CFG.model_copy(update={"augmentation": AugmentationConfig(multiplicity=2)})
    plan, key = PLAN.model_copy(update={"unit": "patient"}), PrivacyRandomness.secure().root_hex()
    ckpt = tmp_path / "checkpoint.pt"

    def trained(model, **kwargs):
        return train(model, images, task, cfg, seed=4, dp=plan, progress=False,
                     randomness=PrivacyRandomness.from_root_hex(key, "secure"), **kwargs)

    whole_model = new_model(task)
    whole = trained(whole_model)
    for steps_done, kill_after in ((0, 5), (5, 12)):
        with monkeypatch.context() as m:
            _interrupt_after(m, DpSgdStep, "__call__", kill_after - steps_done)
            with pytest.raises(Killed):
                trained(new_model(task), checkpoint=ckpt)
    resumed_model = new_model(task)
    resumed = trained(resumed_model, checkpoint=ckpt)
    assert resumed.resumed_from == 10 and resumed.ledger == whole.ledger and resumed.statistics == whole.statistics
    for a, b in zip(resumed_model.state_dict().values(), whole_model.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def _numpy_states(randomness: PrivacyRandomness) -> dict[str, str]:
    """Each stream's state as checkpoints of an earlier dpmed saved it (`PrivacyRandomness.state` before it saved
    positions): numpy's AES state, key included, arrays as dtype and values."""
    def plain(v):
        if isinstance(v, np.ndarray):
            return {"dtype": str(v.dtype), "values": [int(x) for x in v.tolist()]}
        return {k: plain(x) for k, x in v.items()} if isinstance(v, dict) else v
    return {name: json.dumps(plain(g.bit_generator.state)) for name, g in randomness._streams.items()}


def test_a_run_resumed_from_a_checkpoint_of_an_earlier_version_equals_an_uninterrupted_one(data, new_model,
                                                                                            dp_in_one_go, tmp_path,
                                                                                            monkeypatch):
    # A run stopped under an earlier dpmed, whose checkpoint holds numpy's whole state of each stream, continues
    # under this one with the very batches and noise it would have drawn: the model and ledger of a run in one go.
    images, task = data
    key, whole_model, whole = dp_in_one_go
    ckpt = tmp_path / "checkpoint.pt"
    with monkeypatch.context() as m:
        m.setattr(PrivacyRandomness, "state", _numpy_states)
        _interrupt_after(m, DpSgdStep, "__call__", 12)           # the checkpoint of step 10, in the earlier form
        with pytest.raises(Killed):
            train(new_model(task), images, task, CFG, seed=4, dp=PLAN, progress=False, checkpoint=ckpt,
                  randomness=PrivacyRandomness.from_root_hex(key, "secure"))
    saved = torch.load(ckpt, weights_only=True)["privacy_randomness"]
    assert sorted(saved) == ["noise", "sampling"] and all("s" in json.loads(text) for text in saved.values())
    resumed_model = new_model(task)
    resumed = train(resumed_model, images, task, CFG, seed=4, dp=PLAN, progress=False, checkpoint=ckpt,
                    randomness=PrivacyRandomness.from_root_hex(key, "secure"))
    assert resumed.resumed_from == 10 and resumed.ledger == whole.ledger and resumed.statistics == whole.statistics
    for a, b in zip(resumed_model.state_dict().values(), whole_model.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_a_traceback_that_shows_locals_never_shows_the_key_of_a_resumed_run(data, new_model, tmp_path, monkeypatch):
    # The checkpoint holds each privacy stream's state, its AES key included. Kept as a local of the training loop,
    # it was printed by every traceback that shows locals (IPython's verbose mode, pytest --showlocals, a crash
    # reporter) of a resumed run stopped mid-way, which resumes again later with that same key.
    images, task = data
    key, ckpt = PrivacyRandomness.secure().root_hex(), tmp_path / "checkpoint.pt"
    for calls in (12, 2):                 # the first stop leaves a checkpoint at step 10; the resumed run stops too
        with monkeypatch.context() as m:
            _interrupt_after(m, DpSgdStep, "__call__", calls)
            with pytest.raises(Killed) as caught:
                train(new_model(task), images, task, CFG, seed=4, dp=PLAN, progress=False, checkpoint=ckpt,
                      randomness=PrivacyRandomness.from_root_hex(key, "secure"))
    frames = traceback.TracebackException.from_exception(caught.value, capture_locals=True).stack
    text = "".join(map(str, [frame.locals for frame in frames if "dpmed" in Path(frame.filename).parts]))
    root = bytes.fromhex(key)
    words = [key, repr(root), *(str(_stream_key(root, name) & ((1 << 64) - 1)) for name in PRIVACY_STREAMS)]
    assert "randomness" in text and not [word for word in words if word in text]


def test_a_traceback_of_a_run_stopped_while_it_writes_its_checkpoint_never_shows_the_key(data, new_model, tmp_path,
                                                                                          monkeypatch):
    # The checkpoint's dict is a local of its write, torch.save's own frames included, while it is written (a slow
    # disk's fsync, a large model): the streams' positions it holds must hold neither their keys nor draws to come.
    images, task = data
    key = PrivacyRandomness.secure().root_hex()
    with monkeypatch.context() as m:
        _interrupt_after(m, torch.serialization, "_save", 0)      # inside torch.save, the dict in its frames
        with pytest.raises(Killed) as caught:
            train(new_model(task), images, task, CFG, seed=4, dp=PLAN, progress=False,
                  checkpoint=tmp_path / "checkpoint.pt", randomness=PrivacyRandomness.from_root_hex(key, "secure"))
    frames = traceback.TracebackException.from_exception(caught.value, capture_locals=True).stack[1:]
    text = "".join(map(str, [frame.locals for frame in frames]))
    root = bytes.fromhex(key)
    words = [key, repr(root), *(str(_stream_key(root, name) & ((1 << 64) - 1)) for name in PRIVACY_STREAMS)]
    assert [frame.name for frame in frames if "torch" in Path(frame.filename).parts] == ["save"]
    assert "privacy_randomness" in text and not [word for word in words if word in text]


def test_a_release_before_training_opens_the_ledger_once_also_in_a_resumed_run(data, new_model, tmp_path,
                                                                                monkeypatch):
    """A local DP arm's release of its training images is the first entry of the run's ledger; a run killed in its
    second epoch and resumed from its checkpoint (which holds that ledger) charges it once, not again."""
    from dpmed.accounting import LaplaceImageEvent

    images, task = data
    release = LaplaceImageEvent(scale=2.0, value_range=1.0, dimension=16 * 16)
    whole = train(new_model(task), images, task, CFG, seed=4, progress=False, released=(release,))
    assert whole.ledger.events == (release,)
    ckpt = tmp_path / "checkpoint.pt"
    with monkeypatch.context() as m:
        _interrupt_after(m, torch.optim.Adam, "step", len(images) // 16 + 3)
        with pytest.raises(Killed):
            train(new_model(task), images, task, CFG, seed=4, progress=False, checkpoint=ckpt, released=(release,))
    resumed = train(new_model(task), images, task, CFG, seed=4, progress=False, checkpoint=ckpt,
                    released=(release,))
    assert resumed.resumed_from > 0 and resumed.ledger.events == (release,)


@pytest.mark.parametrize("dp", [PLAN, None], ids=["dp-sgd", "non-private"])
def test_a_finished_trainings_checkpoint_takes_no_further_step_and_charges_nothing_more(data, new_model, tmp_path,
                                                                                         monkeypatch, dp):
    """Training again over the checkpoint of a finished training (as a run whose evaluation failed does) takes no
    step, ends with the same model and ledger (T steps, not 2 T), and says it resumed at the last step: T = 17 for
    DP-SGD, 14 for the non-private run (83 images at batch 16), whose third epoch of 6 batches is cut after 2 (it
    did not reach step 18)."""
    images, task = data
    cfg = CFG if dp is not None else CFG.model_copy(update={"epochs": "auto", "steps": 14})
    key = PrivacyRandomness.secure().root_hex()
    ckpt, first = tmp_path / "checkpoint.pt", new_model(task)
    done = train(first, images, task, cfg, seed=4, dp=dp, randomness=PrivacyRandomness.from_root_hex(key, "secure"),
                 progress=False, checkpoint=ckpt)
    calls = []
    target, name = (DpSgdStep, "__call__") if dp is not None else (torch.optim.Adam, "step")
    real = getattr(target, name)
    monkeypatch.setattr(target, name, lambda *a, **k: calls.append(1) or real(*a, **k))
    again_model = new_model(task)
    again = train(again_model, images, task, cfg, seed=4, dp=dp,
                  randomness=PrivacyRandomness.from_root_hex(key, "secure"), progress=False, checkpoint=ckpt)
    assert calls == [] and again.ledger == done.ledger and again.statistics == done.statistics
    assert len(images) == 83 and again.resumed_from == (PLAN.steps if dp is not None else 14)
    if dp is not None:
        assert again.ledger.dp_sgd_steps == PLAN.steps
    for a, b in zip(again_model.state_dict().values(), first.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_a_checkpoint_continues_with_a_smaller_physical_batch(data, new_model, dp_in_one_go, tmp_path, monkeypatch):
    """After memory ran out, dpmed tells the user to lower training.physical_batch_size and run again, which only
    slices each step: the run continues from its checkpoint, to the model of a run trained in one go up to float
    rounding, rather than starting afresh."""
    images, task = data
    key, whole_model, whole = dp_in_one_go
    ckpt = tmp_path / "checkpoint.pt"
    with monkeypatch.context() as m:
        _interrupt_after(m, DpSgdStep, "__call__", 12)
        with pytest.raises(Killed):
            train(new_model(task), images, task, CFG, seed=4, dp=PLAN,
                  randomness=PrivacyRandomness.from_root_hex(key, "secure"), progress=False, checkpoint=ckpt)
    resumed_model = new_model(task)
    resumed = train(resumed_model, images, task, CFG.model_copy(update={"physical_batch_size": 3}), seed=4, dp=PLAN,
                    randomness=PrivacyRandomness.from_root_hex(key, "secure"), progress=False, checkpoint=ckpt)
    assert resumed.resumed_from == 10 and resumed.ledger == whole.ledger
    for a, b in zip(resumed_model.state_dict().values(), whole_model.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b)


def test_an_unreadable_checkpoint_is_named_when_its_progress_is_asked_and_by_training(data, new_model, tmp_path):
    (tmp_path / "checkpoint.pt").write_bytes(b"cut short by a full disk")
    progress, told = checkpoint_review(tmp_path / "checkpoint.pt", PrivacyRandomness.secure())
    assert progress is None and re.match(f"the checkpoint {re.escape(str(tmp_path / 'checkpoint.pt'))} cannot be "
                                         "read .*delete it", told)
    images, task = data
    with pytest.raises(RuntimeError, match=f"the checkpoint {tmp_path / 'checkpoint.pt'} cannot be read .*delete it"):
        train(new_model(task), images, task, CFG, seed=4, dp=PLAN, randomness=PrivacyRandomness.secure(),
              progress=False, checkpoint=tmp_path / "checkpoint.pt")


@pytest.mark.parametrize("content", [b"", b"an unreadable checkpoint"])
def test_an_empty_checkpoint_is_named_not_an_index_error(data, new_model, tmp_path, content):
    """A checkpoint left empty (a disk that filled as it was written) made torch raise an EOFError without a message,
    and the run failed with "IndexError: list index out of range", which named neither the file nor what to do;
    some other bytes met torch's unpickler with "IndexError: pop from empty list"."""
    (tmp_path / "checkpoint.pt").write_bytes(content)
    assert "cannot be read" in checkpoint_review(tmp_path / "checkpoint.pt", PrivacyRandomness.secure())[1]
    images, task = data
    with pytest.raises(RuntimeError, match=f"the checkpoint {tmp_path / 'checkpoint.pt'} cannot be read "
                                           r"\(\w+Error: .+\); delete it"):
        train(new_model(task), images, task, CFG, seed=4, dp=PLAN, randomness=PrivacyRandomness.secure(),
              progress=False, checkpoint=tmp_path / "checkpoint.pt")


def test_a_file_of_tensors_that_is_no_checkpoint_is_named_not_an_attribute_error(data, new_model, tmp_path):
    """A list of tensors in the checkpoint's place loaded and then failed on .get with an AttributeError that said
    nothing of the file or what to do."""
    torch.save([torch.zeros(2)], tmp_path / "checkpoint.pt")
    assert "holds a list, not a dpmed checkpoint" in checkpoint_review(tmp_path / "checkpoint.pt",
                                                                        PrivacyRandomness.secure())[1]
    images, task = data
    with pytest.raises(RuntimeError, match=f"the checkpoint {tmp_path / 'checkpoint.pt'} holds a list, not a dpmed "
                                           "checkpoint; delete it"):
        train(new_model(task), images, task, CFG, seed=4, dp=PLAN, randomness=PrivacyRandomness.secure(),
              progress=False, checkpoint=tmp_path / "checkpoint.pt")


@pytest.mark.parametrize("dp, other", [
    (PLAN, {"seed": 5}),
    (PLAN, {"dp": PLAN.model_copy(update={"noise_multiplier": 2.4})}),     # two noise levels under one ledger
    (PLAN, {"images": "one fewer"}),
    (None, {"cfg": CFG.model_copy(update={"epochs": 4})}),
], ids=["seed", "noise", "data", "epochs"])
def test_a_checkpoint_from_other_settings_is_not_continued(data, new_model, tmp_path, dp, other, caplog):
    """A finished training's checkpoint holds its last step (17 of 17: T is no multiple of the 5 steps between
    saves), readable by its owner only; a training with another seed, DP plan, data or length starts afresh, and
    says so."""
    import os

    images, task = data
    ckpt = tmp_path / "checkpoint.pt"
    train(new_model(task), images, task, CFG, seed=4, dp=dp, randomness=PrivacyRandomness.secure(), progress=False,
          checkpoint=ckpt)
    if dp is not None:
        assert checkpoint_review(ckpt, PrivacyRandomness.secure())[0] == (PLAN.steps, PLAN.steps)
    if os.name == "posix":
        assert ckpt.stat().st_mode & 0o777 == 0o600
    given = {"seed": 4, "dp": dp, "cfg": CFG, "images": images, **other}
    if given["images"] == "one fewer":
        given["images"] = images.subset(range(len(images) - 1))
    with caplog.at_level(logging.INFO, logger="dpmed"):
        again = train(new_model(task), given["images"], task, given["cfg"], seed=given["seed"], dp=given["dp"],
                      randomness=PrivacyRandomness.secure(), progress=False, checkpoint=ckpt)
    assert again.resumed_from == 0
    assert f"its checkpoint {ckpt} was made for other training settings or data: not continued" in caplog.text
    if dp is not None:
        assert again.ledger.dp_sgd_steps == PLAN.steps


def _stop_after(monkeypatch, model, images, task, ckpt, key, calls=7, plan=PLAN):
    """A secure DP-SGD run under ``key`` stopped at its ``calls``-th step, leaving its checkpoint at ``ckpt``."""
    with monkeypatch.context() as m:
        _interrupt_after(m, DpSgdStep, "__call__", calls)
        with pytest.raises(Killed):
            train(model, images, task, CFG, seed=4, dp=plan, progress=False, checkpoint=ckpt,
                  randomness=PrivacyRandomness.from_root_hex(key, "secure"))


def _refused(model, images, task, ckpt, key) -> str:
    """What the refusal to continue the checkpoint at ``ckpt`` says, after checking it names it and the remedy, and
    that `dpmed status` (`checkpoint_review`, under the key beside it, without the model) tells the same refusal."""
    progress, told = checkpoint_review(ckpt, PrivacyRandomness.from_root_hex(key, "secure"))
    with pytest.raises(RuntimeError) as caught:
        train(model, images, task, CFG, seed=4, dp=PLAN, progress=False, checkpoint=ckpt,
              randomness=PrivacyRandomness.from_root_hex(key, "secure"))
    said = str(caught.value)
    assert said.startswith(f"the checkpoint {ckpt} cannot continue this run: ")
    assert said.endswith("delete it and the privacy key beside it to train this run afresh under a new key")
    saved = torch.load(ckpt, weights_only=True).get("progress")
    assert told == said and progress == (None if saved is None else (saved["steps"], saved["of"]))
    assert not re.search(r"\d+ words", said)   # the sampling stream's count is N a step: N is released only noised
    return said


@pytest.mark.parametrize("damage", ["another key", "no noise position"])
def test_a_checkpoint_of_another_key_or_without_a_stream_s_position_is_refused_naming_it(data, new_model, tmp_path,
                                                                                          monkeypatch, damage):
    # Continuing it would draw, for steps its ledger already counts, another key's batches and noise, or (a stream
    # from its start) the very batches and noise of those steps again: the run is refused, and told what to do.
    images, task = data
    key, ckpt = PrivacyRandomness.secure().root_hex(), tmp_path / "checkpoint.pt"
    _stop_after(monkeypatch, new_model(task), images, task, ckpt, key)
    if damage == "another key":             # the key file beside it replaced
        key = PrivacyRandomness.secure().root_hex()
    else:
        state = torch.load(ckpt, weights_only=True)
        del state["privacy_randomness"]["noise"]
        torch.save(state, ckpt)
    said = _refused(new_model(task), images, task, ckpt, key)
    assert "'noise'" in said


@pytest.mark.parametrize("edit", ["ahead", "half a word"])
def test_a_checkpoint_whose_stream_stands_off_its_step_count_is_refused_saying_where(data, new_model, tmp_path,
                                                                                      monkeypatch, edit):
    # A noise position ahead of the step count skips draws rather than repeating any; one whose last word is half
    # drawn has the word count of its step yet repeats half a word. The refusal says which, and never that the
    # stream stands where its step leaves it.
    images, task = data
    key, ckpt = PrivacyRandomness.secure().root_hex(), tmp_path / "checkpoint.pt"
    _stop_after(monkeypatch, new_model(task), images, task, ckpt, key)
    state = torch.load(ckpt, weights_only=True)
    position = json.loads(state["privacy_randomness"]["noise"])
    position.update({"words": position["words"] + 2} if edit == "ahead" else {"half_used": True})
    state["privacy_randomness"]["noise"] = json.dumps(position)
    torch.save(state, ckpt)
    said = _refused(new_model(task), images, task, ckpt, key)
    assert "'noise'" in said
    if edit == "ahead":
        assert "draw again" not in said
    else:
        assert "half" in said and "draw again" in said


@pytest.mark.parametrize("mixed", ["streams", "noise stream", "ledger"])
def test_a_checkpoint_mixed_with_an_earlier_one_of_the_same_run_is_refused(data, new_model, tmp_path, monkeypatch,
                                                                           mixed):
    # The checkpoint of step 10 with the stream positions (or the ledger) of the same run's checkpoint of step 5:
    # under the run's own key it would draw again, for steps 11-15, the batches and noise of steps 6-10 (or count
    # five steps fewer than it took). Each step takes a fixed number of words from each stream, so the positions
    # that go with a step count are known.
    images, task = data
    key, ckpt = PrivacyRandomness.secure().root_hex(), tmp_path / "checkpoint.pt"

    def stopped_after(calls):
        _stop_after(monkeypatch, new_model(task), images, task, ckpt, key, calls)
        return torch.load(ckpt, weights_only=True)

    earlier, state = stopped_after(7), stopped_after(7)          # steps 5, then (resumed) 10
    assert (earlier["done"], state["done"]) == (5, 10)
    if mixed == "streams":
        state["privacy_randomness"] = earlier["privacy_randomness"]
    elif mixed == "noise stream":
        state["privacy_randomness"]["noise"] = earlier["privacy_randomness"]["noise"]
    else:
        state["ledger"] = earlier["ledger"]
    torch.save(state, ckpt)
    said = _refused(new_model(task), images, task, ckpt, key)
    assert "step 10" in said
    assert ("'noise'" if mixed == "noise stream" else "'sampling'" if mixed == "streams" else "ledger") in said


@pytest.mark.parametrize("damage", ["a position that is none", "no ledger"])
def test_a_checkpoint_with_a_damaged_part_is_refused_naming_it_not_a_key_error(data, new_model, tmp_path, monkeypatch,
                                                                                damage):
    # A file that reads as a checkpoint but lacks a part: training and `dpmed status` tell the file and the remedy.
    images, task = data
    key, ckpt = PrivacyRandomness.secure().root_hex(), tmp_path / "checkpoint.pt"
    _stop_after(monkeypatch, new_model(task), images, task, ckpt, key)
    state = torch.load(ckpt, weights_only=True)
    if damage == "no ledger":
        del state["ledger"]
    else:
        state["privacy_randomness"]["noise"] = "{}"
    torch.save(state, ckpt)
    assert "damaged" in _refused(new_model(task), images, task, ckpt, key)


def test_a_checkpoint_whose_words_per_step_were_edited_is_refused_by_training_as_by_status(data, new_model, tmp_path,
                                                                                          monkeypatch):
    # Status checks the stream positions against the words per step the checkpoint saved, having no model to count
    # them: training checks that those are its plan's, so that no edit makes the two tell a checkpoint apart.
    images, task = data
    key, ckpt = PrivacyRandomness.secure().root_hex(), tmp_path / "checkpoint.pt"
    _stop_after(monkeypatch, new_model(task), images, task, ckpt, key)
    state = torch.load(ckpt, weights_only=True)
    state["per_step"] = {name: words + 1 for name, words in state["per_step"].items()}
    torch.save(state, ckpt)
    _, told = checkpoint_review(ckpt, PrivacyRandomness.from_root_hex(key, "secure"))
    with pytest.raises(RuntimeError, match="not this run's") as caught:
        train(new_model(task), images, task, CFG, seed=4, dp=PLAN, progress=False, checkpoint=ckpt,
              randomness=PrivacyRandomness.from_root_hex(key, "secure"))
    assert told is not None and str(caught.value).startswith(f"the checkpoint {ckpt} cannot continue this run: ")
    assert not re.search(r"\d+ words", str(caught.value))


@pytest.mark.parametrize("update", [{"noise_multiplier": 0.0}, {"sample_rate": 1.0}], ids=["no noise", "every unit"])
def test_a_run_whose_step_draws_nothing_from_a_stream_still_resumes(data, new_model, tmp_path, monkeypatch, update):
    # sigma 0 draws no noise, and a sample rate of 1 no sampling words: the positions a step count implies are zero.
    images, task = data
    plan, key, ckpt = PLAN.model_copy(update=update), PrivacyRandomness.secure().root_hex(), tmp_path / "checkpoint.pt"
    _stop_after(monkeypatch, new_model(task), images, task, ckpt, key, plan=plan)
    (done, _), told = checkpoint_review(ckpt, PrivacyRandomness.from_root_hex(key, "secure"))
    assert told is None                          # done: every step at rate 1 (an epoch is one step), else step 5
    resumed = train(new_model(task), images, task, CFG, seed=4, dp=plan, progress=False, checkpoint=ckpt,
                    randomness=PrivacyRandomness.from_root_hex(key, "secure"))
    assert resumed.resumed_from == done > 0 and resumed.ledger.dp_sgd_steps == plan.steps


def test_shuffle_mode_dp_sgd_restarts_rather_than_continue(data, new_model, tmp_path):
    """Its batches are drawn anew each attempt (a reproduction mode, not DP): it writes no checkpoint to continue,
    and its ledger records shuffled batches."""
    images, task = data
    ckpt = tmp_path / "checkpoint.pt"
    plan = PLAN.model_copy(update={"sampling": "shuffle"})
    result = train(new_model(task), images, task, CFG, seed=4, dp=plan, randomness=PrivacyRandomness.secure(),
                   progress=False, checkpoint=ckpt)
    assert not ckpt.exists()
    # the ledger says what ran: shuffled batches, which no accountant takes, never Poisson steps it would give eps for
    assert {type(e).__name__ for e in result.ledger.events} == {"ShuffledBatchesEvent"}
    assert sum(e.steps for e in result.ledger.events) == PLAN.steps


def test_dp_sgd_refuses_to_train_without_privacy_randomness(data, new_model):
    images, task = data
    with pytest.raises(ValueError, match="privacy randomness"):
        train(new_model(task), images, task, CFG, seed=4, dp=PLAN, progress=False)


INTERRUPTED_AS_A_CHECKPOINT_CLOSES = """
import torch, torch.serialization as ts
from dpmed.config import TrainingConfig
from dpmed.data.synthetic import make_phantom
from dpmed.models import build_model
from dpmed.training import train

def interrupted(self, *args):      # the signal lands on __exit__'s first line: the zip is never finished
    raise KeyboardInterrupt

ts._open_zipfile_writer_buffer.__exit__ = interrupted
ds = make_phantom(n_images=40, image_size=16, seed=0)
model = build_model("small_cnn", in_channels=1, num_outputs=ds.task.num_outputs, image_size=16)
try:
    train(model, ds.train, ds.task, TrainingConfig(epochs=1, batch_size=16), seed=0, progress=False,
          checkpoint=__import__("pathlib").Path(%r))
except KeyboardInterrupt:
    print("interrupted")
"""


def test_an_interrupt_as_a_checkpoint_is_written_ends_the_process_cleanly(tmp_path):
    """Before: a Ctrl-C or SIGTERM that landed as torch.save was about to finish the checkpoint left torch's zip
    writer unfinished, bound to the file the write had closed; when the writer was freed it wrote to that closed file
    from C++ and the process aborted ("terminate called after throwing an instance of 'pybind11::error_already_set'
    ... write to closed file", status -6) instead of ending as interrupted, after dpmed had cleaned up."""
    ckpt = tmp_path / "checkpoint.pt"
    done = subprocess.run([sys.executable, "-c", INTERRUPTED_AS_A_CHECKPOINT_CLOSES % str(ckpt)], capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "interrupted" and "terminate called" not in done.stderr, done.stderr
    assert not ckpt.exists() and not list(tmp_path.iterdir())     # no half checkpoint, no temporary file left
