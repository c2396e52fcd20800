"""Time estimates (`dpmed.timing`) and the study's progress line (`dpmed.progress.StudyProgress`): steps per run as
training takes them, seconds per step learnt per kind of step (plain or DP-SGD), and the time left shared among the
workers. Numbers by hand from make_record's timings (1 s of training, 2 s in all, per run)."""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

import pytest

import dpmed.progress
from dpmed.mechanisms.base import AuditConfig
from dpmed.timing import Rates, clock, concurrent_runs, run_steps, step_kind
from dpmed.progress import StudyProgress

N_TRAIN = 100     # plain runs of make_record: 2 epochs of ceil(100 / 64) = 2 batches; DP-SGD runs: 10 steps


@pytest.fixture(autouse=True)
def study_clock(monkeypatch) -> list[float]:
    """The clock the progress lines read, still unless a test moves it: on the wall clock a line's time elapsed was
    whatever the machine's load made it, and a test descheduled for 10 s saw 0:10 where it read 0:0 and a digit."""
    now = [1000.0]
    monkeypatch.setattr(dpmed.progress, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    return now


def test_clock_reads_as_minutes_or_hours():
    assert [clock(s) for s in (0, 5.4, 65, 3599.6, 7384)] == ["0:00", "0:05", "1:05", "1:00:00", "2:03:04"]
    assert clock(None) == clock(math.inf) == clock(math.nan) == "?"
    assert clock(-3) == "0:00"


def test_clock_reads_days_and_years_beyond_a_day():
    assert [clock(s) for s in (86399, 86400, 2 * 86400 + 7384)] == ["23:59:59", "1 day 0:00:00", "2 days 2:03:04"]
    assert clock(3_778_653_097) == "120 years"        # the plan's estimate for --set training.epochs=1000000000
    assert clock(1e30) == f"{1e30 / (365.25 * 86400):,.0f} years"


def test_clock_reads_a_year_from_365_days_and_one_year_in_the_singular():
    """Before, 365 to 547 days read "1 years"; the year form starts at 365 days, as "1 day" starts at 24 hours."""
    assert clock(365 * 86400 - 1) == "364 days 23:59:59"
    assert [clock(d * 86400) for d in (365, 547)] == ["1 year", "1 year"]
    assert clock(548 * 86400) == "2 years"


def test_run_steps_counts_the_steps_training_takes(make_record):
    plain = make_record("np_seed0", "np").plan
    dp = make_record("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0).plan
    assert run_steps(plain, N_TRAIN) == 2 * math.ceil(N_TRAIN / 64) == 4
    assert run_steps(plain, 64) == 2 and run_steps(plain, 65) == 4         # a last partial batch is a step
    assert run_steps(dp, N_TRAIN) == dp.privacy.steps == 10               # the planned T, whatever N
    assert step_kind(dp, N_TRAIN, "cpu").dp_sgd and not step_kind(plain, N_TRAIN, "cpu").dp_sgd


def test_an_audited_run_without_dp_sgd_counts_the_images_the_audit_leaves(make_record):
    # 200 of 500 patients' images leave as canary sources (600 of 1000 images stay) and about 100 canaries go back:
    # 700 images, ceil(700 / 64) = 11 batches an epoch, 2 epochs; without the audit 2 * 16
    audit = AuditConfig(canaries=200)
    plain = make_record("np_seed0", "np").plan
    audited = plain.model_copy(update={"audit": audit})
    assert run_steps(plain, 1000, 500) == 32
    assert run_steps(audited, 1000, 500) == 2 * math.ceil(700 / 64) == 22
    assert run_steps(audited, 1000) == 32                                  # no patient count: the plain count
    # 200 canaries asked of 150 patients: all 150 leave as sources and about 75 canaries go back, 2 * ceil(75 / 64)
    assert run_steps(audited, 1000, 150) == 2 * math.ceil(75 / 64) == 4
    dp = make_record("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0).plan
    assert run_steps(dp.model_copy(update={"audit": audit}), 1000, 500) == 10   # DP-SGD: the planned T, always


def _runs(*records):
    return [(r.plan, r.timing) for r in records]


def test_rates_are_learnt_per_kind_of_step_from_finished_runs(make_record):
    plain, dp = make_record("np_seed0", "np"), make_record("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0)
    rates = Rates.from_runs(_runs(plain, dp), N_TRAIN)
    assert rates.per_step[step_kind(plain.plan, N_TRAIN, "cpu")] == pytest.approx(1.0 / 4)
    assert rates.per_step[step_kind(dp.plan, N_TRAIN, "cpu")] == pytest.approx(1.0 / 10)
    assert rates.evaluation == pytest.approx(1.0)                         # total minus training
    other = make_record("dp_eps8_C1_seed0", "dp", "dp_sgd", eps=8.0).plan
    assert rates.run_seconds(other, N_TRAIN, device="cpu") == pytest.approx(10 * 0.1 + 1.0)
    only_plain = Rates.from_runs(_runs(plain), N_TRAIN)                   # no DP-SGD step timed: the plain rate
    assert only_plain.run_seconds(other, N_TRAIN, device="cpu") == pytest.approx(10 * 0.25 + 1.0)


def test_a_resumed_run_teaches_the_rate_of_the_steps_it_trained_since(make_record):
    """Its training time covers the steps after the checkpoint only (here 3 of 4, in 1 s); an older record that
    counted the epoch it resumed from cannot say how many steps that was, and teaches nothing."""
    record = make_record("np_seed0", "np")
    resumed = record.model_copy(update={"timing": record.timing.model_copy(update={"resumed_from": 1})})
    kind = step_kind(record.plan, N_TRAIN, "cpu")
    assert Rates.from_runs(_runs(resumed), N_TRAIN).per_step[kind] == pytest.approx(1 / 3)
    epoch = resumed.model_copy(update={"timing": resumed.timing.model_copy(update={"resumed_unit": "epoch"})})
    assert Rates.from_runs(_runs(epoch), N_TRAIN) is None


def test_a_timing_without_seconds_teaches_no_rate(make_record):
    """A DP-SGD run's record holds no seconds (they are private): it must be skipped, not divided."""
    dp = make_record("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0)
    shared = dp.timing.shareable(dp.plan)
    assert shared.train_seconds is None and shared.total_seconds is None and shared.device == dp.timing.device
    assert shared.resumed_from is None          # how far it came before a stop depends on the same wall time
    assert Rates.from_runs([(dp.plan, shared)], N_TRAIN) is None


def _progress(make_record, workers: int):
    runs = [make_record("np_seed0", "np"), make_record("np_seed1", "np", seed=1),
            make_record("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0)]
    progress = StudyProgress(total=4, earlier=1, todo=[r.plan for r in runs], n_train=N_TRAIN, workers=workers,
                             n_patients=N_TRAIN)
    return progress, runs


@pytest.mark.parametrize("workers, left", [(1, "0:06"), (2, "0:03"), (4, "0:03")])   # 4 workers, 2 runs: 2 at work
def test_the_progress_line_says_runs_done_and_time_left_from_the_runs_finished(make_record, workers, left):
    progress, runs = _progress(make_record, workers)
    # left after the first: a plain run (4 steps at 0.25 s, + 1 s) and a DP-SGD run (10 steps at 0.25 s, + 1 s)
    line = progress.line("np_seed0", runs[0])
    assert re.fullmatch(rf"study: 2 of 4 runs done \(1 earlier\), 0:00 elapsed, about {left} left", line), line


def test_the_progress_line_counts_a_continued_run_for_the_steps_after_its_checkpoint(make_record):
    """A run that continues from its checkpoint trains the steps after it only: left after the first, a plain run
    (4 steps at 0.25 s, + 1 s) and a DP-SGD run stopped at step 7 of 10 (3 steps at 0.25 s, + 1 s), 3.75 s; counted
    for all its 10 steps, 5.5 s."""
    runs = [make_record("np_seed0", "np"), make_record("np_seed1", "np", seed=1),
            make_record("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0)]
    progress = StudyProgress(total=3, earlier=0, todo=[r.plan for r in runs], n_train=N_TRAIN, workers=1,
                             n_patients=N_TRAIN, steps_left={"dp_eps1_C1_seed0": 3})
    assert progress.line("np_seed0", runs[0]).endswith("about 0:04 left")


def test_the_progress_line_learns_a_dp_sgd_runs_rate_from_its_private_timing(make_record):
    """The record of a DP-SGD run holds no seconds; the study passes the private ones, and the rate is learnt."""
    progress, runs = _progress(make_record, 1)
    dp = runs[2]
    public = dp.model_copy(update={"timing": dp.timing.shareable(dp.plan)})
    assert progress.line(dp.run_id, public).endswith("time left: known after the first run")
    progress, runs = _progress(make_record, 1)
    # left: two plain runs of 4 steps at the DP-SGD rate (0.1 s) + 1 s of evaluation each
    assert progress.line(dp.run_id, public, dp.timing).endswith("about 0:03 left")


def test_the_progress_line_counts_failures_and_ends_without_a_time_left(make_record, tmp_path):
    from dpmed.executors import RunFailure

    progress, runs = _progress(make_record, 1)
    line = progress.line("np_seed0", RunFailure("np_seed0", "RuntimeError: boom", tmp_path / "error.json"))
    assert line.endswith("time left: known after the first run") and ", 1 failed," in line
    progress.line("np_seed1", runs[1])
    assert re.fullmatch(r"study: 3 of 4 runs done \(1 earlier\), 1 failed, 0:00 elapsed",
                        progress.line("dp_eps1_C1_seed0", runs[2]))


def test_the_progress_line_says_the_time_elapsed_since_the_study_began(make_record, study_clock):
    """Elapsed is the clock's reading at each line less its reading when the progress began (not since the last
    line, not zero): a fake clock, started at 1000 s, reads 1000 + 3725 s at the first line and + 5 s more at the
    second."""
    progress, runs = _progress(make_record, 1)
    study_clock[0] += 3725.0
    assert ", 1:02:05 elapsed," in progress.line("np_seed0", runs[0])
    study_clock[0] += 5.0
    assert ", 1:02:10 elapsed," in progress.line("np_seed1", runs[1])


def test_the_progress_line_counts_an_audited_run_s_steps_as_it_trains_them(make_record, study_clock):
    """An audited run without DP-SGD trains on what its canary draws leave: 22 expected steps of 1000 images of 500
    patients with 200 canaries (`run_steps`), not the whole set's 32. Counted as 32, its 220 s of training taught
    6.9 s a step for 10 and the line said 7:22 left, not 9:02: a plain run's 32 steps at 10 s and another audited
    run's 22, each + 1 s of evaluation."""
    from dpmed.records import Timing

    audited = [make_record(f"a_seed{seed}", "a", seed=seed) for seed in (0, 1)]
    audited = [r.model_copy(update={"plan": r.plan.model_copy(update={"audit": AuditConfig(canaries=200)})})
               for r in audited]
    plain = make_record("np_seed0", "np")
    progress = StudyProgress(total=3, earlier=0, todo=[audited[0].plan, audited[1].plan, plain.plan], n_train=1000,
                             workers=1, n_patients=500)
    study_clock[0] += 221.0
    timing = Timing(train_seconds=220.0, total_seconds=221.0, device="cpu", threads=1)
    line = progress.line("a_seed0", audited[0], timing)
    assert line == "study: 1 of 3 runs done, 3:41 elapsed, about 9:02 left", line


def test_runs_that_all_failed_are_not_called_done(make_record, tmp_path):
    """Before: a study whose two runs both failed logged "study: 2 of 2 runs done, 2 failed"."""
    from dpmed.executors import RunFailure

    progress = StudyProgress(total=2, earlier=0, todo=[make_record("a_seed0", "a").plan,
                                                       make_record("b_seed0", "b").plan], n_train=N_TRAIN, workers=1,
                             n_patients=N_TRAIN)
    progress.line("a_seed0", RunFailure("a_seed0", "RuntimeError: boom", tmp_path / "a.json"))
    line = progress.line("b_seed0", RunFailure("b_seed0", "RuntimeError: boom", tmp_path / "b.json"))
    assert re.fullmatch(r"study: 0 of 2 runs done, 2 failed, 0:00 elapsed", line), line


@pytest.mark.parametrize("mechanism", ["none", "dp_sgd"])
def test_the_probe_trains_its_own_few_steps_whatever_length_the_study_sets(make_record, monkeypatch, mechanism):
    """A study with training.steps: 1e9 left `dpmed plan` training the plain probe for 1e9 steps: the probe took the
    study's training length instead of its own."""
    import numpy as np
    import torch

    from dpmed import timing
    from dpmed.data import make_phantom
    from dpmed.mechanisms import training_steps

    record = make_record("r_seed0", "r", mechanism, eps=1.0)
    plan = record.plan.model_copy(update={"training": record.plan.training.model_copy(
        update={"epochs": "auto", "steps": 10 ** 9})})
    lengths = []

    def fake_train(model, data, task, training, *, dp, **kwargs):
        steps_per_epoch = 2                                   # the probe's data: two batches
        lengths.append(dp.steps if dp is not None else training_steps(steps_per_epoch, epochs=training.epochs,
                                                                       steps=training.steps))
        return SimpleNamespace(seconds=0.5, features_seconds=0.0)
    monkeypatch.setattr(timing, "train", fake_train)
    dataset = make_phantom(n_images=40, image_size=16)
    kind = timing.step_kind(plan, N_TRAIN, "cpu")
    probe_data = timing._random_images(dataset, 2 * kind.batch, np.random.default_rng(0))
    assert timing._time_steps(probe_data, dataset, kind, plan, 6, torch.device("cpu"), "all") == (0.5, 0.0)
    assert lengths == [6]


def _dp_plan(make_record, **privacy):
    plan = make_record("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0).plan
    return plan.model_copy(update={"privacy": plan.privacy.model_copy(update=privacy)})


def test_a_step_kind_is_the_expected_poisson_batch_on_the_resolved_threads_and_device(make_record, monkeypatch):
    """q N = 25.6 images a DP-SGD step on average: a kind of 26 (not the configured batch, nor 25); threads "auto"
    resolved as a run resolves them; an auto-device plan run where the caller says it ran, even beside a GPU."""
    from dpmed import timing
    from dpmed.training import run_threads

    dp = _dp_plan(make_record, sample_rate=0.256, n_units=100)
    kind = step_kind(dp, N_TRAIN, "cpu")
    assert kind.batch == 26 != dp.training.batch_size and kind.threads == run_threads(dp.training.threads)
    monkeypatch.setattr(timing.torch.cuda, "is_available", lambda: True)
    assert step_kind(dp, N_TRAIN, "cpu").device == "cpu" and step_kind(dp, N_TRAIN).device == "cuda"
    steps = make_record("np_seed0", "np").plan
    steps = steps.model_copy(update={"training": steps.training.model_copy(update={"epochs": "auto", "steps": 7})})
    assert run_steps(steps, N_TRAIN) == 7


def test_rates_are_means_per_kind_and_an_untimed_batch_takes_its_own_kind_s_rate(make_record, monkeypatch):
    from dpmed import timing

    plain = make_record("np_seed0", "np")
    dp = make_record("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0)
    runs = [(dp.plan, dp.timing.model_copy(update={"train_seconds": s, "total_seconds": s + e}))
            for s, e in ((1.0, 1.0), (1.0, 3.0), (4.0, 2.0))]
    runs.append((plain.plan, plain.timing.model_copy(update={"train_seconds": 400.0, "total_seconds": 390.0})))
    runs.append((plain.plan, plain.timing.model_copy(update={"total_seconds": None})))     # skipped, not divided
    rates = Rates.from_runs(runs, N_TRAIN)
    assert rates.per_step[step_kind(dp.plan, N_TRAIN, "cpu")] == pytest.approx(0.2)         # (0.1 + 0.1 + 0.4) / 3
    assert rates.evaluation == pytest.approx(1.5)                                 # (1 + 3 + 2 + 0) / 4: none below 0
    other = _dp_plan(make_record, sample_rate=0.5, n_units=100)                    # a batch of 50: never timed
    assert rates.run_seconds(other, N_TRAIN, device="cpu") == pytest.approx(10 * 0.2 + 1.5)   # DP's, not plain's
    monkeypatch.setattr(timing.torch.cuda, "is_available", lambda: True)          # learnt where the run ran
    assert set(Rates.from_runs(runs[:1], N_TRAIN).per_step) == {step_kind(dp.plan, N_TRAIN, "cpu")}


@pytest.mark.parametrize("workers, cores, at_once", [(1, 16, 1), (2, 16, 2), (8, 16, 3), (4, 4, 2), (4, 3, 1),
                                                     (4, None, 1)])
def test_workers_train_as_many_runs_at_once_as_there_are_runs_and_cores_for(make_record, monkeypatch, workers, cores,
                                                                            at_once):
    """Three runs, the widest of 2 threads: 8 workers train the 3 at once on 16 cores; 4 cores hold 2 of them."""
    from dpmed import timing

    monkeypatch.setattr(timing.os, "cpu_count", lambda: cores)
    plans = [make_record(f"np_seed{s}", "np", seed=s).plan for s in range(3)]
    plans = [p.model_copy(update={"training": p.training.model_copy(update={"threads": t})})
             for p, t in zip(plans, (1, 2, 1), strict=True)]
    assert concurrent_runs(plans, workers) == at_once


def _probe_at(make_record, monkeypatch, per_step: float) -> tuple[float, int, list[int]]:
    """(rate, steps timed, the steps of each call) of the probe of a plain kind whose steps take ``per_step``
    seconds on the fake clock: each call of `_time_steps` takes ``per_step`` a step."""
    from dpmed import timing
    from dpmed.data import make_phantom

    calls = []

    def fake(data, dataset, kind, plan, n, device, trainable):
        calls.append(n)
        return per_step * n, 0.0
    monkeypatch.setattr(timing, "_time_steps", fake)
    plan = make_record("np_seed0", "np").plan
    rate, timed, _ = timing._probe_kind(make_phantom(n_images=40, image_size=16), step_kind(plan, N_TRAIN, "cpu"), plan,
                                        "all")
    return rate, timed, calls


@pytest.mark.parametrize("per_step, steps", [(1e-5, 40), (0.1, 16), (1.0, 4), (1.4, 4), (1.5, 2), (40.0, 2)])
def test_the_probe_times_as_many_steps_as_fit_its_aim_in_whole_passes(make_record, monkeypatch, per_step, steps):
    """Two warm-up steps give a rate; the probe then times 1.5 s of steps, at least 3 and at most 40, even (whole
    passes over its two batches), and divides by the steps it timed. A step that alone takes the whole aim or more
    is timed over one pass, and the warm-up's two steps count too: ResNet-18 at 224 px on a CPU timed 4 more steps
    of 4-40 s each, minutes a kind."""
    rate, timed, calls = _probe_at(make_record, monkeypatch, per_step)
    assert calls == [2, steps]
    assert (rate, timed) == (pytest.approx(per_step), steps if per_step < 1.5 else 2 + steps)


def test_a_slow_kind_s_rate_is_that_of_its_warm_up_and_its_pass_together(make_record, monkeypatch):
    """The warm-up's 2 steps took 10 s each and the pass's 2 took 8 s each: 36 s over 4 steps. A fast kind's warm-up
    is left out (its first step's one-off part weighs on steps of milliseconds)."""
    from dpmed import timing
    from dpmed.data import make_phantom

    per_step = [10.0, 8.0]            # the warm-up's, then the pass's

    def fake(data, dataset, kind, plan, n, device, trainable):
        return per_step.pop(0) * n, 0.0
    monkeypatch.setattr(timing, "_time_steps", fake)
    plan = make_record("np_seed0", "np").plan
    rate, timed, _ = timing._probe_kind(make_phantom(n_images=40, image_size=16), step_kind(plan, N_TRAIN, "cpu"), plan,
                                        "all")
    assert (rate, timed) == (pytest.approx(36.0 / 4), 4)


@pytest.mark.parametrize("per_step, told", [
    (40.0, "about 40 s a step: timing 2 more steps, about 1:20; --no-estimate skips this"),
    (11.0, "about 11 s a step: timing 2 more steps, about 0:22; --no-estimate skips this"),
    (9.0, None), (1.4, None), (0.1, None)])
def test_the_probe_tells_how_long_a_kind_s_timed_steps_will_take_where_that_is_long(make_record, monkeypatch, caplog,
                                                                                      per_step, told):
    """At 224 px on a CPU the log said only "timing plain steps of 128 images" and then nothing for minutes. After
    the warm-up, a timed part of more than 20 s is announced with its length; a short one says nothing more."""
    import logging

    with caplog.at_level(logging.INFO, logger="dpmed.timing"):
        _probe_at(make_record, monkeypatch, per_step)
    said = [r.getMessage() for r in caplog.records if "a step: timing" in r.getMessage()]
    assert said == ([told] if told else [])


@pytest.mark.parametrize("mechanism", ["np", "dp"])
def test_the_probe_leaves_the_caller_s_torch_generator_alone(make_record, mechanism):
    """The probe builds a model to train and one to evaluate, each from a seed of its own, and its training draws from
    generators of its own: a caller's later draws are the same whether it probed first or not. Its evaluation
    explains images too: the probe's training and evaluation ran inside a fork of torch's generator, which went when
    the model's build took its own seed."""
    import torch

    from dpmed import timing
    from dpmed.config import CamConfig
    from dpmed.data import make_phantom

    plan = (_dp_plan(make_record, sample_rate=0.1, n_units=80) if mechanism == "dp"
            else make_record("np_seed0", "np").plan)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        before = torch.get_rng_state()
        evaluation = timing.EvaluationConfig(explanations=CamConfig(n_images=2, deletion_steps=2))
        timing.probe_rates([plan], make_phantom(n_images=40, image_size=16), evaluation=evaluation, device="cpu")
        assert torch.equal(torch.get_rng_state(), before)


def test_the_dp_sgd_probe_draws_its_expected_batch_from_two_batches_of_random_images(make_record, monkeypatch):
    from dpmed import timing
    from dpmed.data import make_phantom

    seen = []

    def fake_train(model, data, task, training, *, dp, **kwargs):
        seen.append((len(data), dp.sample_rate, dp.expected_batch_size))
        return SimpleNamespace(seconds=0.01 * dp.steps, features_seconds=0.0)
    monkeypatch.setattr(timing, "train", fake_train)
    plan = _dp_plan(make_record, sample_rate=0.01, n_units=1000)                 # an expected batch of 10
    timing._probe_kind(make_phantom(n_images=40, image_size=16), step_kind(plan, N_TRAIN, "cpu"), plan, "all")
    assert seen and set(seen) == {(20, 0.5, 10.0)}


def test_the_evaluation_probe_explains_a_few_images_and_scales_to_the_study_s_number(monkeypatch):
    """Five times the probe's images asked: those explained, each second of them counted five times (four more than
    timed). The fake explanations take 100 s, so the few real microseconds of the call cannot matter."""
    from dpmed import timing
    from dpmed.config import EvaluationConfig
    from dpmed.data import make_phantom

    asked = []

    def fake_assess(model, dataset, inputs, config, **kwargs):
        asked.append(config.explanations.n_images)
        return SimpleNamespace(explanations=SimpleNamespace(seconds=100.0))
    monkeypatch.setattr(timing, "assess", fake_assess)
    evaluation = EvaluationConfig(explanations={"n_images": 5 * timing._PROBE_CAMS})
    dataset = make_phantom(n_images=40, image_size=16)
    plan_kind = timing.StepKind(dp_sgd=False, batch=8, physical_batch=8, engine=None, threads=1, device="cpu")
    seconds = timing._probe_evaluation(dataset, "small_cnn", evaluation, plan_kind)
    assert asked == [timing._PROBE_CAMS] and 400.0 <= seconds < 450.0


def test_the_evaluation_probe_loads_the_cam_libraries_before_its_clock_starts(monkeypatch):
    """Explaining loads pytorch_grad_cam (OpenCV) and Opacus on first use, seconds once per process; timed with the
    two probe images, that import was scaled to the study's n_images as if each image paid it (a 64-image study's
    evaluation estimated at several times what it took). They are loaded first, and only where CAMs are asked for."""
    from dpmed import timing
    from dpmed.config import EvaluationConfig
    from dpmed.data import make_phantom

    events = []
    monkeypatch.setattr(timing, "load_cam_libraries", lambda: events.append("load"))
    monkeypatch.setattr(timing, "assess", lambda *args, **kwargs: events.append("assess")
                        or SimpleNamespace(explanations=SimpleNamespace(seconds=1.0)))
    kind = timing.StepKind(dp_sgd=False, batch=8, physical_batch=8, engine=None, threads=1, device="cpu")
    dataset = make_phantom(n_images=40, image_size=16)
    timing._probe_evaluation(dataset, "small_cnn", EvaluationConfig(explanations={"n_images": 64}), kind)
    assert events == ["load", "assess"]
    events.clear()
    timing._probe_evaluation(dataset, "small_cnn", EvaluationConfig(), kind)
    assert events == ["assess"]


def test_the_probe_runs_where_the_caller_says_the_runs_will(make_record, monkeypatch):
    from dpmed import timing
    from dpmed.config import EvaluationConfig
    from dpmed.data import make_phantom

    probed = []
    monkeypatch.setattr(timing.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(timing, "_probe_kind",
                        lambda dataset, kind, plan, trainable: probed.append(kind) or (0.1, 4, 0.0))
    monkeypatch.setattr(timing, "_probe_evaluation", lambda *args: 0.0)
    timing.probe_rates([make_record("np_seed0", "np").plan], make_phantom(n_images=40, image_size=16),
                       evaluation=EvaluationConfig(), device="cpu")
    assert [k.device for k in probed] == ["cpu"]


def test_the_probe_trains_the_model_frozen_as_the_study_freezes_it(make_record, monkeypatch):
    """A study that trains only the head (model.trainable: head) was timed with every layer trainable: per-example
    gradients, clipping and noise for layers its runs freeze, an estimate too high. The probe freezes as runs do."""
    from dpmed import timing
    from dpmed.data import make_phantom

    seen = []

    def fake_train(model, data, task, training, **kwargs):
        seen.append(sorted(name for name, p in model.named_parameters() if p.requires_grad))
        return SimpleNamespace(seconds=0.5, features_seconds=0.0)
    monkeypatch.setattr(timing, "train", fake_train)
    plan = _dp_plan(make_record, sample_rate=0.01, n_units=1000)
    head = timing.MODELS[plan.model].head
    for trainable in ("head", "all"):
        timing.probe_rates([plan], make_phantom(n_images=40, image_size=16), evaluation=timing.EvaluationConfig(),
                           device="cpu", trainable=trainable)
    frozen, whole = seen[0], seen[-1]
    assert frozen and all(name.startswith(head + ".") for name in frozen), frozen
    assert set(frozen) < set(whole)


def test_a_run_resumed_at_its_last_step_teaches_no_rate_and_divides_by_nothing(make_record):
    """It trained no step after its checkpoint (all 4 before it): its seconds say nothing of a step's cost."""
    record = make_record("np_seed0", "np")
    done = record.model_copy(update={"timing": record.timing.model_copy(update={"resumed_from": 4,
                                                                                "resumed_unit": "step"})})
    assert Rates.from_runs(_runs(done), N_TRAIN) is None
    rates = Rates.from_runs(_runs(done, make_record("np_seed1", "np", seed=1)), N_TRAIN)
    assert rates.per_step == {step_kind(record.plan, N_TRAIN, "cpu"): pytest.approx(1.0 / 4)}


def test_rates_without_any_step_timed_estimate_nothing(make_record):
    assert Rates(per_step={}, evaluation=1.0).run_seconds(make_record("np_seed0", "np").plan, N_TRAIN) is None


def test_a_warm_up_too_fast_to_measure_times_the_most_steps(make_record, monkeypatch):
    """A clock too coarse to see two steps (0 s) must not divide by zero: the probe times its largest number."""
    from dpmed import timing
    from dpmed.data import make_phantom

    monkeypatch.setattr(timing, "_time_steps", lambda data, dataset, kind, plan, n, device, trainable: (0.0, 0.0))
    plan = make_record("np_seed0", "np").plan
    kind = step_kind(plan, N_TRAIN, "cpu")
    assert timing._probe_kind(make_phantom(n_images=40, image_size=16), kind, plan, "all") == (0.0, 40, 0.0)


def test_the_evaluation_probe_explains_no_more_images_than_the_study_asks(monkeypatch):
    """One image asked: one explained, its seconds counted once (explaining two would count half of them twice)."""
    from dpmed import timing
    from dpmed.config import EvaluationConfig
    from dpmed.data import make_phantom

    asked = []

    def fake_assess(model, dataset, inputs, config, **kwargs):
        asked.append(config.explanations.n_images)
        return SimpleNamespace(explanations=SimpleNamespace(seconds=100.0))
    monkeypatch.setattr(timing, "assess", fake_assess)
    plan_kind = timing.StepKind(dp_sgd=False, batch=8, physical_batch=8, engine=None, threads=1, device="cpu")
    seconds = timing._probe_evaluation(make_phantom(n_images=40, image_size=16), "small_cnn",
                                       EvaluationConfig(explanations={"n_images": 1}), plan_kind)
    assert asked == [1] and 0.0 <= seconds < 50.0


def test_the_probe_says_what_it_timed_each_step_kind_at_and_the_load(make_record, monkeypatch):
    """The plan prints how the estimate was made: per step kind the steps timed and the milliseconds each, the
    evaluation's seconds, the device, the threads and the machine's load."""
    from dpmed import timing
    from dpmed.config import EvaluationConfig
    from dpmed.data import make_phantom

    plain, dp = make_record("np_seed0", "np").plan, _dp_plan(make_record, sample_rate=0.01, n_units=1000)
    rates_of = {False: (0.025, 16, 0.0), True: (0.3, 4, 0.0)}
    monkeypatch.setattr(timing, "_probe_kind", lambda dataset, kind, plan, trainable: rates_of[kind.dp_sgd])
    monkeypatch.setattr(timing, "_probe_evaluation", lambda *args: 3.25)
    monkeypatch.setattr(timing.os, "getloadavg", lambda: (1.5, 1.0, 1.0))
    monkeypatch.setattr(timing.os, "cpu_count", lambda: 6)
    rates = timing.probe_rates([plain, dp], make_phantom(n_images=40, image_size=16), evaluation=EvaluationConfig(),
                               device="cpu")
    threads = step_kind(plain, N_TRAIN, "cpu").threads
    assert rates.how.startswith(f"timed now on cpu with {threads} thread(s) (load 1.5 on 6 cores): ")
    assert (f": 16 plain steps of 64 images (25 ms each), 4 DP-SGD ({dp.training.dp_engine} engine) steps of 10 "
            "images (300 ms each), of small_cnn on random images") in rates.how
    assert "validation and test images (3.2 s) added per run" in rates.how
    assert rates.evaluation == 3.25 and rates.steps_timed == {step_kind(plain, N_TRAIN, "cpu"): 16,
                                                              step_kind(dp, N_TRAIN, "cpu"): 4}


def test_the_load_is_left_out_where_the_system_does_not_tell_it(monkeypatch):
    from dpmed import timing

    monkeypatch.setattr(timing.os, "getloadavg", lambda: (2.25, 0.0, 0.0))
    monkeypatch.setattr(timing.os, "cpu_count", lambda: 4)
    assert timing.machine_load() == " (load 2.2 on 4 cores)"             # 2.25 is exact: .1f rounds to even
    monkeypatch.setattr(timing.os, "cpu_count", lambda: None)                  # unknown: counted as one
    assert timing.machine_load() == " (load 2.2 on 1 core)"
    monkeypatch.delattr(timing.os, "getloadavg")                          # Windows has no load average
    assert timing.machine_load() == ""


def test_the_probe_draws_labels_of_the_study_s_task_and_images_as_its_model_sees_them(monkeypatch):
    """`dpmed plan` times a multilabel study's steps on 0/1 float findings, one per output, as its runs train, and
    a normalised study's probe, training and evaluation alike, on images normalised as the runs' are."""
    import dataclasses

    import numpy as np

    from dpmed import timing
    from dpmed.config import EvaluationConfig
    from dpmed.data import make_phantom

    dataset = dataclasses.replace(make_phantom(n_images=40, image_size=16, task="multilabel"),
                                  normalization=((0.5,), (0.25,)))
    probe = timing._random_images(dataset, 64, np.random.default_rng(0))
    assert probe.labels.shape == (64, 2) and probe.labels.dtype == np.float32
    assert set(np.unique(probe.labels)) == {0.0, 1.0}
    assert probe.images.min() < -1.5 and probe.images.max() > 1.5           # (U[0, 1) - 0.5) / 0.25
    seen = []
    monkeypatch.setattr(timing, "assess", lambda model, data, inputs, config, **kwargs: seen.append(inputs)
                        or SimpleNamespace(explanations=None))
    kind = timing.StepKind(dp_sgd=False, batch=8, physical_batch=8, engine=None, threads=1, device="cpu")
    timing._probe_evaluation(dataset, "small_cnn", EvaluationConfig(), kind)
    (val, test), = seen
    assert np.allclose(val.images, (dataset.val.images - 0.5) / 0.25)
    assert np.allclose(test.images, (dataset.test.images - 0.5) / 0.25)


def test_the_probe_counts_a_fixed_front_end_s_features_once_per_training_image_not_per_step(make_record, monkeypatch):
    """ScatterNet computes its features of every training image once before the first step. The probe's train
    calls took 20 s of features for their images and 0.1 s a step: the rate was (20 + 0.1 n) / n a step, which a
    run's steps multiplied. A step now costs its 0.1 s, and a run adds the features of its own training images."""
    from dpmed import timing
    from dpmed.data import make_phantom

    def fake_train(model, data, task, training, *, dp, **kwargs):
        return SimpleNamespace(seconds=20.0 + 0.1 * training.steps, features_seconds=20.0)
    monkeypatch.setattr(timing, "train", fake_train)
    monkeypatch.setattr(timing, "_probe_evaluation", lambda *args: 1.0)
    plan = make_record("np_seed0", "np").plan
    kind = step_kind(plan, N_TRAIN, "cpu")
    rate, timed, features = timing._probe_kind(make_phantom(n_images=40, image_size=16), kind, plan, "all")
    assert rate == pytest.approx(0.1) and timed == 16 and features == pytest.approx(20.0 / (2 * kind.batch))
    rates = timing.probe_rates([plan], make_phantom(n_images=40, image_size=16), evaluation=timing.EvaluationConfig(),
                               device="cpu")
    assert rates.run_seconds(plan, N_TRAIN, "cpu") == pytest.approx(
        run_steps(plan, N_TRAIN) * 0.1 + N_TRAIN * 20.0 / (2 * kind.batch) + 1.0)
    assert "fixed features of each training image" in rates.how


def test_training_says_how_long_its_fixed_features_took_apart_from_its_steps(monkeypatch):
    """The seconds of the features computed before the first step are told apart (a clock that advances 7 s during
    them); a model without a fixed front end reports none."""
    from dpmed.config import TrainingConfig
    from dpmed.data import make_phantom
    from dpmed.models import build_model
    from dpmed.training import loop

    data = make_phantom(n_images=24, image_size=16)
    now = [0.0]
    monkeypatch.setattr(loop.time, "perf_counter", lambda: now[0])
    real = loop.precompute

    def slow(model, x_all, **kwargs):
        now[0] += 7.0
        return real(model, x_all, **kwargs)
    monkeypatch.setattr(loop, "precompute", slow)
    config = TrainingConfig(steps=1, epochs="auto", batch_size=8, threads=1)
    for name, features in (("scatternet_cnn", 7.0), ("small_cnn", 0.0)):
        model = build_model(name, in_channels=1, num_outputs=data.task.num_outputs, image_size=16)
        result = loop.train(model, data.train, data.task, config, seed=0, progress=False)
        assert result.features_seconds == features and result.seconds == 7.0


def test_a_patient_unit_dp_sgd_step_is_timed_at_the_images_of_its_expected_patients(make_record, monkeypatch):
    """A sampled patient brings every image of theirs, so a step of q = 0.5 over 10 patients holding the training
    images trains on half of those images on average, not on 5. The probe timed 5 images a step, and Kermany's run
    took twice the estimate; a step's cost here grows with its images, so only the images' batch gives the rate."""
    from dpmed import timing
    from dpmed.data import make_phantom

    seen = []

    def fake_train(model, data, task, training, *, dp, **kwargs):
        seen.append((len(data), dp.expected_batch_size))
        return SimpleNamespace(seconds=0.001 * dp.expected_batch_size * dp.steps, features_seconds=0.0)
    monkeypatch.setattr(timing, "train", fake_train)
    monkeypatch.setattr(timing, "_probe_evaluation", lambda *args: 1.0)
    dataset = make_phantom(n_images=200, image_size=16)
    n_train = len(dataset.train)
    patients = _dp_plan(make_record, sample_rate=0.5, n_units=10, unit="patient")
    images = _dp_plan(make_record, sample_rate=0.5, n_units=10, unit="image")
    assert step_kind(patients, n_train, "cpu").batch == round(0.5 * n_train) > 10
    assert step_kind(images, n_train, "cpu").batch == 5
    rates = timing.probe_rates([patients], dataset, evaluation=timing.EvaluationConfig(), device="cpu")
    batch = round(0.5 * n_train)
    assert seen and set(seen) == {(2 * batch, float(batch))}
    assert rates.run_seconds(patients, n_train, "cpu") == pytest.approx(patients.privacy.steps * 0.001 * batch + 1.0)
    assert f"steps of {batch} images" in rates.how
