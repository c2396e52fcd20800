"""Where no progress bar is drawn (a batch job's log, a worker process), a run logs a line after each of its first two
steps and at each tenth of its steps (hundredth from 1000 steps): step counts and times only, never a loss. A resumed
run counts on from its checkpoint (test_resume.py)."""

from __future__ import annotations

import logging
import math
import re
from types import SimpleNamespace

import pytest
from torch import nn

from dpmed.config import TrainingConfig
from dpmed.randomness import PrivacyRandomness
from dpmed.training import DpSgdPlan, loop, train
from dpmed.training.fixed_features import precompute

CFG = TrainingConfig(epochs=3, batch_size=16, physical_batch_size=64, optimizer="adam", learning_rate=1e-3)
PLAN = DpSgdPlan(noise_multiplier=1.2, max_grad_norm=1.0, sample_rate=0.2, steps=17)
LINE = re.compile(r"^train: step (\d+) of (\d+) \((\d+) %\), \d+ s so far, "
                  r"(?:about \d+ s of training left|time left known after step \d+)$")


def _lines(caplog) -> list[tuple[int, int, int]]:
    found = []
    for record in caplog.records:
        if record.name == "dpmed.training.loop":
            match = LINE.match(record.getMessage())
            assert match, record.getMessage()
            found.append(tuple(int(g) for g in match.groups()))
    return found


def test_dp_sgd_run_logs_its_first_step_and_each_tenth_of_its_steps(data, new_model, caplog):
    images, task = data
    with caplog.at_level(logging.INFO, logger="dpmed.training.loop"):
        train(new_model(task), images, task, CFG, seed=0, dp=PLAN, randomness=PrivacyRandomness.secure(),
              progress=False, log_progress=True)
    # the first two steps, then the tenths of 17 steps, rounded up; the last step is left to the caller's "trained in"
    # line
    assert _lines(caplog) == [(s, 17, 100 * s // 17) for s in (1, 2, 4, 6, 7, 9, 11, 12, 14, 16)]
    assert not any("loss" in r.getMessage() for r in caplog.records)


def test_non_private_run_counts_steps_across_epochs(data, new_model, caplog):
    images, task = data
    total = 3 * math.ceil(len(images) / CFG.batch_size)
    with caplog.at_level(logging.INFO, logger="dpmed.training.loop"):
        train(new_model(task), images, task, CFG, seed=0, progress=False, log_progress=True)
    steps = sorted({1, 2} | {math.ceil(total * k / 10) for k in range(1, 10)})
    assert _lines(caplog) == [(s, total, 100 * s // total) for s in steps]


@pytest.mark.parametrize("bar, log", [(True, True), (False, False)])
def test_no_lines_with_a_bar_or_when_not_asked(data, new_model, caplog, bar, log):
    images, task = data
    with caplog.at_level(logging.INFO, logger="dpmed.training.loop"):
        train(new_model(task), images, task, CFG, seed=0, dp=PLAN, randomness=PrivacyRandomness.secure(), progress=bar,
              log_progress=log)
    assert _lines(caplog) == []


def test_a_run_under_ten_steps_logs_each_step_but_the_last(data, new_model, caplog):
    """A run of a few steps logged nothing at all, and at 224 px on a CPU a few steps are minutes."""
    images, task = data
    plan = DpSgdPlan(noise_multiplier=1.2, max_grad_norm=1.0, sample_rate=0.2, steps=3)
    with caplog.at_level(logging.INFO, logger="dpmed.training.loop"):
        train(new_model(task), images, task, CFG, seed=0, dp=plan, randomness=PrivacyRandomness.secure(),
              progress=False, log_progress=True)
    assert [s for s, _, _ in _lines(caplog)] == [1, 2]


@pytest.mark.parametrize("total, parts", [(999, 10), (1000, 100), (4000, 100)])
def test_a_run_of_1000_steps_or_more_logs_each_hundredth(caplog, total, parts):
    """A tenth of a 224 px run of thousands of steps is an hour on a CPU. Which steps log follows from the step
    counts alone (`_Progress`), so the steps are counted here without training."""
    shown = loop._Progress(total, 0, "train", bar=False, log=True, began=0.0)
    with caplog.at_level(logging.INFO, logger="dpmed.training.loop"):
        for _ in range(total):
            shown.step()
    assert [s for s, _, _ in _lines(caplog)] == sorted({1, 2} | {math.ceil(total * k / parts)
                                                                  for k in range(1, parts)})


def test_a_run_without_a_bar_leaves_the_callers_process_as_it_was():
    """A disabled tqdm bar still started tqdm's monitor thread (left running after the run) and fixed the process's
    multiprocessing start method, so that a notebook's later ``set_start_method`` raised "context has already been
    set". In a fresh process, as a notebook's first study would be."""
    import subprocess
    import sys

    script = """if True:
        import multiprocessing, threading
        from dpmed.config import TrainingConfig
        from dpmed.data.synthetic import make_phantom
        from dpmed.models import build_model
        from dpmed.training import train
        ds = make_phantom(n_images=40, image_size=16, seed=0)
        model = build_model("small_cnn", in_channels=1, num_outputs=ds.task.num_outputs, image_size=16)
        before = sorted(t.name for t in threading.enumerate())
        train(model, ds.train, ds.task, TrainingConfig(epochs=1, batch_size=16, physical_batch_size=64,
              optimizer="adam", learning_rate=1e-3), seed=0, progress=False, log_progress=True)
        print(before == sorted(t.name for t in threading.enumerate()), multiprocessing.get_start_method(True))
    """
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "None"]


class _Timed(nn.Module):
    """``model``, each forward pass 1 s on the clock the training loop reads, and the first ``once`` s more (what a
    run's first step pays once)."""

    def __init__(self, model: nn.Module, clock: list[float], once: float = 0.0) -> None:
        super().__init__()
        self.model, self.clock, self.once = model, clock, once

    def forward(self, x):
        self.clock[0] += 1.0 + self.once
        self.once = 0.0
        return self.model(x)


def test_the_time_so_far_counts_the_fixed_features_and_the_time_left_the_steps_alone(data, new_model, monkeypatch,
                                                                                      caplog):
    """The step lines counted their time from the first step, so the minutes a 224 px run spends on its fixed
    features before it (`dpmed.training.fixed_features`) were in neither figure, and the time so far disagreed with
    the "trained in" line, which counts them; the steps left go at the steps' own rate."""
    now = [1000.0]
    monkeypatch.setattr(loop, "time", SimpleNamespace(perf_counter=lambda: now[0]))

    def features(*args, **kwargs):
        now[0] += 100.0                                   # the features: 100 s before the first step
        return precompute(*args, **kwargs)

    monkeypatch.setattr(loop, "precompute", features)
    images, task = data
    cfg = TrainingConfig(steps=20, batch_size=8, physical_batch_size=64, optimizer="adam", learning_rate=1e-3)
    with caplog.at_level(logging.INFO, logger="dpmed.training.loop"):
        result = train(_Timed(new_model(task), now), images, task, cfg, seed=0, progress=False, log_progress=True)
    lines = [r.getMessage() for r in caplog.records if ": step " in r.getMessage()]
    assert lines[:2] == ["train: step 1 of 20 (5 %), 101 s so far, time left known after step 2",
                         "train: step 2 of 20 (10 %), 102 s so far, about 18 s of training left"]
    assert lines[-1] == "train: step 18 of 20 (90 %), 118 s so far, about 2 s of training left"
    assert result.seconds == 120.0                       # the "trained in" figure: the features and 20 steps


def test_the_time_left_leaves_out_what_the_first_step_pays_once(data, new_model, monkeypatch, caplog):
    """The first line extrapolated the time left from the first step alone, which pays one-off costs (the first
    allocations and passes: 4.6 times a later step's time in a 16 px phantom run), and said several times the training
    left. The rate now comes from the steps after it; the time so far counts it."""
    now = [0.0]
    monkeypatch.setattr(loop, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    images, task = data
    cfg = TrainingConfig(steps=20, batch_size=8, physical_batch_size=64, optimizer="adam", learning_rate=1e-3)
    with caplog.at_level(logging.INFO, logger="dpmed.training.loop"):
        train(_Timed(new_model(task), now, once=9.0), images, task, cfg, seed=0, progress=False, log_progress=True)
    lines = [r.getMessage() for r in caplog.records if ": step " in r.getMessage()]
    assert lines[:3] == ["train: step 1 of 20 (5 %), 10 s so far, time left known after step 2",
                         "train: step 2 of 20 (10 %), 11 s so far, about 18 s of training left",
                         "train: step 4 of 20 (20 %), 13 s so far, about 16 s of training left"]


def test_a_resumed_session_leaves_out_its_own_first_step_not_the_run_s(monkeypatch, caplog):
    """A run resumed at step 40 of 100 pays the one-off costs again at step 41, the session's first: the lines after
    it and after step 42 come where a fresh run's after steps 1 and 2 do (42 is no tenth, so only that rule logs it),
    and the rate is of steps 42 on (1 s each, step 41 10 s), not of the run's first step nor of step 41."""
    now = [0.0]
    monkeypatch.setattr(loop, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    shown = loop._Progress(100, 40, "train", bar=False, log=True, began=0.0)
    with caplog.at_level(logging.INFO, logger="dpmed.training.loop"):
        for step in range(41, 51):
            now[0] += 10.0 if step == 41 else 1.0
            shown.step()
    assert [r.getMessage() for r in caplog.records] == [
        "train: step 41 of 100 (41 %), 10 s so far, time left known after step 42",
        "train: step 42 of 100 (42 %), 11 s so far, about 58 s of training left",
        "train: step 50 of 100 (50 %), 19 s so far, about 50 s of training left"]
