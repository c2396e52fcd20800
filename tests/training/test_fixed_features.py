"""Training a model with a fixed front end (ScatterNet) on its features computed once: the same model, bit for bit,
as transforming every batch, and every batch transformed where the features cannot be kept."""

from __future__ import annotations

import dataclasses
import logging
import re
import signal
import time
import weakref
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

import dpmed.data.pace
from dpmed.config import TrainingConfig
from dpmed.interruption import interruptible
from dpmed.memory import Headroom
from dpmed.models.scatternet import scatternet_cnn
from dpmed.randomness import PrivacyRandomness
from dpmed.training import DpSgdPlan, train
from dpmed.training import fixed_features, loop

_PLAN = DpSgdPlan(noise_multiplier=1.0, max_grad_norm=1.0, sample_rate=0.25, steps=3)


def _trained(data, dp, calls=None, at_once=1, **training):
    images, task = data
    torch.manual_seed(0)
    model = scatternet_cnn(images.images.shape[1], 2, 16)
    if calls is not None:
        model.scattering.register_forward_hook(lambda module, args, out: calls.append(len(args[0])))
    cfg = TrainingConfig(steps=3, batch_size=8, physical_batch_size=8, optimizer="adam", learning_rate=0.01,
                         **training)
    train(model, images, task, cfg, seed=0, dp=dp, progress=False, at_once=at_once,
          randomness=None if dp is None else PrivacyRandomness.reproducible(seed=0, run_id="fixed"))
    return model.state_dict()


def _per_batch(model, x_all, **_):
    return model, x_all


@pytest.mark.parametrize("dp", [None, _PLAN], ids=["non-private", "dp-sgd"])
def test_features_computed_once_train_the_same_model_as_per_batch(data, dp, monkeypatch):
    n, calls = len(data[0]), []
    once = _trained(data, dp, calls)
    assert sum(calls) == 1 + n             # a probe image, then each training image once
    monkeypatch.setattr(loop, "precompute", _per_batch)
    again: list[int] = []
    per_batch = _trained(data, dp, again)
    assert max(again) <= 8                  # per batch: the same images transformed again every epoch
    assert once.keys() == per_batch.keys()
    assert all(torch.equal(once[k], per_batch[k]) for k in once)


def test_colour_images_with_the_patient_as_the_unit_train_the_same_model_as_per_batch(data, monkeypatch):
    # each patient's clipping group gathers its images' features as it gathered their per-batch transforms
    images, task = data
    pixels = images.images
    patients = dataclasses.replace(images, images=np.concatenate([pixels, pixels ** 2, 1 - pixels], axis=1),
                                   patient_ids=np.array([f"p{i // 3}" for i in range(len(images))]))
    plan = _PLAN.model_copy(update={"unit": "patient"})
    once = _trained((patients, task), plan)
    monkeypatch.setattr(loop, "precompute", _per_batch)
    per_batch = _trained((patients, task), plan)
    assert all(torch.equal(once[k], per_batch[k]) for k in once)


def test_augmented_or_too_large_features_are_computed_per_batch(data, monkeypatch):
    calls: list[int] = []
    _trained(data, None, calls, augmentation={"multiplicity": 2})
    assert calls and max(calls) <= 16       # batches of 8 images, 2 copies each: never the whole set
    monkeypatch.setattr(fixed_features, "headroom", lambda: Headroom(ram=1000, swap=0))
    calls.clear()
    _trained(data, None, calls)
    assert calls[0] == 1 and max(calls) <= 8


def test_runs_that_train_at_once_share_the_half_of_the_free_memory_the_features_may_take(data, monkeypatch):
    # N workers start together and each reads the same free memory: each allowed half of it, N runs' features could
    # take N halves. Here the features take exactly half: one run alone keeps them, one of two runs at once does not.
    images, _ = data
    probe = scatternet_cnn(1, 2, 16).fixed_features(torch.from_numpy(images.images[:1]))
    need = probe.element_size() * probe.numel() * len(images)
    monkeypatch.setattr(fixed_features, "headroom", lambda: Headroom(ram=2 * need, swap=0))
    for at_once, transformed in ((1, len(images)), (2, 3 * 8)):
        calls: list[int] = []
        _trained(data, None, calls, at_once=at_once)
        assert sum(calls) == 1 + transformed          # a probe, then each image once, or the 3 steps' batches of 8
    monkeypatch.setattr(fixed_features, "headroom", lambda: Headroom(ram=4 * need, swap=0))
    calls.clear()
    _trained(data, None, calls, at_once=2)            # a quarter each: two runs' features fit in half
    assert sum(calls) == 1 + len(images)


class _Doubling(nn.Module):
    """A fixed front end (2 x) that records, at each call, how many of its earlier outputs besides the first (the
    size probe) are still held, and can lose a Ctrl-C in its ``lose_at``-th call, as torch's calls may."""

    def __init__(self, lose_at: int = 0) -> None:
        super().__init__()
        self.outputs: list[weakref.ref] = []
        self.held: list[int] = []
        self.lose_at = lose_at

    def fixed_features(self, x):
        self.held.append(sum(ref() is not None for ref in self.outputs[1:]))
        if len(self.held) == self.lose_at:
            try:
                signal.raise_signal(signal.SIGINT)
                sum(range(10))                     # Python code after the signal: where the handler runs
            except KeyboardInterrupt:
                pass
        out = 2 * x
        self.outputs.append(weakref.ref(out))
        return out

    def from_fixed(self, features):
        return features


def test_the_features_are_written_in_place_holding_one_chunk_at_a_time():
    # A list of every chunk's features and then their concatenation held twice the features at once: with the
    # features allowed up to half the free memory, all of it.
    model, x = _Doubling(), torch.arange(40.0).reshape(10, 1, 2, 2)
    trained, features = fixed_features.precompute(model, x, device=torch.device("cpu"), chunk=3)
    assert isinstance(trained, fixed_features.FromFixed) and torch.equal(features, 2 * x)
    assert len(model.held) == 1 + 4 and max(model.held) == 0     # the probe, then 4 chunks, none kept past its copy


def test_the_features_log_when_they_start_and_how_far_they_are(monkeypatch, caplog):
    # At 224 px a few thousand training images take minutes here, before the run's first step or its bar.
    monkeypatch.setattr(dpmed.data.pace, "REPORT_EVERY", 0.0)
    with caplog.at_level(logging.INFO, logger="dpmed.training.fixed_features"):
        fixed_features.precompute(_Doubling(), torch.zeros(10, 1, 2, 2), device=torch.device("cpu"), chunk=3,
                                  label="arm_seed0")
    lines = [re.sub(r"about \d+ min", "about N min", r.getMessage()) for r in caplog.records]
    assert lines == ["arm_seed0: computing the fixed features of the training images once, about N min",
                     *(f"arm_seed0: fixed features {p} % computed, about N min left" for p in (30, 60, 90))]


def test_a_short_first_chunk_times_the_features_so_the_start_line_comes_at_once(monkeypatch, caplog):
    """The start line waited for a whole first chunk (physical_batch_size images: a minute or more at 224 px on a
    CPU) to learn the rate. A first chunk of at most 8 images times the rest; each image here 1 s on the clock the
    lines read: 8 s for 8 of 100 images, 100 s in all, 2 min; said before the next chunk."""
    now = [1000.0]
    monkeypatch.setattr(fixed_features, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    monkeypatch.setattr(dpmed.data.pace, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    sizes, lines_before, x = [], [], torch.arange(400.0).reshape(100, 1, 2, 2)

    class Slow(_Doubling):
        def fixed_features(self, x):
            sizes.append(len(x))
            lines_before.append(len(caplog.records))
            now[0] += len(x)
            return super().fixed_features(x)

    with caplog.at_level(logging.INFO, logger="dpmed.training.fixed_features"):
        _, features = fixed_features.precompute(Slow(), x, device=torch.device("cpu"), chunk=40, label="arm_seed0")
    assert torch.equal(features, 2 * x)                  # each image's own features, whatever chunk it was in
    assert sizes == [1, 8, 40, 40, 12]                   # the size probe, the timing chunk, then whole chunks
    assert lines_before[2] == 1 and caplog.records[0].getMessage() == (
        "arm_seed0: computing the fixed features of the training images once, about 2 min")


def test_features_done_within_the_interval_log_nothing(monkeypatch, caplog):
    # `dpmed plan` times a few steps of each kind of run: a line for each of its instant feature passes was noise.
    # Each chunk here 1 s on the clock the lines read, 4 s in all: on the wall clock, a chunk descheduled for 6 s by
    # the machine's load made the pass look long enough to announce.
    now = [1000.0]
    monkeypatch.setattr(fixed_features, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    monkeypatch.setattr(dpmed.data.pace, "time", SimpleNamespace(perf_counter=lambda: now[0]))

    class Quick(_Doubling):
        def fixed_features(self, x):
            now[0] += 1.0
            return super().fixed_features(x)

    with caplog.at_level(logging.INFO, logger="dpmed.training.fixed_features"):
        fixed_features.precompute(Quick(), torch.zeros(10, 1, 2, 2), device=torch.device("cpu"), chunk=3)
    assert caplog.records == []


def test_a_lost_ctrl_c_stops_the_features_at_the_next_chunk():
    model = _Doubling(lose_at=2)                  # the first chunk after the probe
    with interruptible():
        with pytest.raises(KeyboardInterrupt):
            fixed_features.precompute(model, torch.zeros(10, 1, 2, 2), device=torch.device("cpu"), chunk=3)
    assert len(model.held) == 2                   # not the whole set (minutes on a large one) before training stops


def test_the_training_time_counts_the_features(data, monkeypatch):
    # Otherwise a run's train_seconds left the features out, and the time estimate learnt from finished runs
    # (`dpmed.timing.Rates.from_runs`) counted them as evaluation.
    def slow(*args, **kwargs):
        time.sleep(0.5)
        return fixed_features.precompute(*args, **kwargs)
    monkeypatch.setattr(loop, "precompute", slow)
    images, task = data
    cfg = TrainingConfig(steps=1, batch_size=8, physical_batch_size=8)
    assert train(scatternet_cnn(1, 2, 16), images, task, cfg, seed=0, progress=False).seconds >= 0.5
