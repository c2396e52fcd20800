"""How long a study's runs take: measured by a short probe before training (`dpmed plan`), and learnt from the runs
that have finished while a study runs (the ETA of `dpmed run`).

A run's time is dominated by its optimiser steps, and a step's cost depends on what kind of step it is: a plain step
on a shuffled batch, or a DP-SGD step (per-example clipping with the study's engine) on a Poisson batch of a given
expected size; and on the model, the image size, the device and the threads, which a study shares. So the probe
times a few steps of each kind the study's runs need, of the study's model on images of the study's shape, on the
device and with the threads the runs will use, and scales by each run's number of steps. A model with a fixed front end
(ScatterNet) computes its features of every training image once before the first step: the probe times that part
apart and scales it by the training images, not by the steps. It then times one evaluation
(predictions, bootstrap intervals, fairness, explanations on a few images, scaled) on the real validation and test
images. The probe trains on random images, never on the training images, and its model is discarded.

Not included: audits and attacks (extra passes over their canaries and batches), and a machine that gets busier or
quieter meanwhile (the load at probe time is stated).
"""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

import numpy as np
import torch

from dpmed.config import EvaluationConfig, RunPlan
from dpmed.data import Dataset, ImageSet, normalize
from dpmed.evaluation.assessment import assess
from dpmed.evaluation.cams import load_cam_libraries
from dpmed.mechanisms import DpSgdPlan, training_steps
from dpmed.models import MODELS, build_model
from dpmed.models.weights import set_trainable
from dpmed.numbers import count_text, shape_text
from dpmed.randomness import PrivacyRandomness
from dpmed.records import Timing
from dpmed.training import run_threads, torch_threads, train

_log = logging.getLogger(__name__)

__all__ = ["StepKind", "step_kind", "run_steps", "Rates", "probe_rates", "concurrent_runs", "clock", "machine_load"]

_PROBE_SECONDS = 1.5      # aim of the timed part of each step kind's probe
_MIN_STEPS, _MAX_STEPS = 3, 40
_TELL_SECONDS = 20.0      # a timed part longer than this is announced with its expected length
# images explained in the evaluation probe, scaled to the study's n_images: each explanation also pays a part that
# does not grow with its images (a copy of the model, the CAM hooks, the bootstrap of its metrics), which two
# images left to be multiplied by n_images / 2 (benchmarks/RESULTS.md, "At scale", on the plan's evaluation probe)
_PROBE_CAMS = 8


@dataclass(frozen=True)
class StepKind:
    """What a step's cost depends on, besides what the whole study shares (model, image shape)."""

    dp_sgd: bool
    batch: int                # images per step (DP-SGD: expected, whatever the unit)
    physical_batch: int
    engine: str | None        # DP-SGD clipping engine
    threads: int
    device: str

    def describe(self) -> str:
        what = f"DP-SGD ({self.engine} engine)" if self.dp_sgd else "plain"
        return f"{what} steps of {self.batch} images"


def _device(setting: str, default: str) -> str:
    name = default if setting == "auto" else setting
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def step_kind(plan: RunPlan, n_train: int, device: str = "auto") -> StepKind:
    """The kind of the steps of ``plan``'s run on ``n_train`` training images. ``device``: where a run whose
    ``training.device`` is auto runs (auto: CUDA if available).

    A DP-SGD step's expected batch in images is q times the images it samples from: q N where the unit is the image,
    but q times the training images, not q N, where it is the patient, since a sampled patient brings every image
    of theirs; q N patients timed as q N images under-estimated Kermany's steps by half (benchmarks/RESULTS.md,
    "The plan's training probe"). ``n_train`` is the exact count: the estimate is printed to the user, never
    written."""
    training = plan.training
    dp = plan.privacy if isinstance(plan.privacy, DpSgdPlan) else None
    if dp is None:
        batch = training.batch_size
    else:
        batch = max(1, round(dp.sample_rate * (n_train if dp.unit == "patient" else dp.n_units)))
    return StepKind(dp_sgd=dp is not None, batch=batch, physical_batch=training.physical_batch_size,
                    engine=None if dp is None else training.dp_engine, threads=run_threads(training.threads),
                    device=_device(training.device, device))


def run_steps(plan: RunPlan, n_train: int, n_patients: int | None = None) -> int:
    """Optimiser steps of ``plan``'s run on ``n_train`` training images (DP-SGD: the planned T).

    An audited run without DP-SGD trains on what the audit leaves: about m of the ``n_patients`` training patients
    are held out as canary sources with all their images and about m / 2 canaries go back in, each by a secret
    draw, so its T is known only in expectation; given ``n_patients`` this counts the expected images.
    """
    if isinstance(plan.privacy, DpSgdPlan):
        return plan.privacy.steps
    if plan.audit is not None and n_patients:
        m = min(plan.audit.canaries, n_patients)
        n_train = max(1, round(n_train * (1 - m / n_patients) + m / 2))
    return training_steps(math.ceil(n_train / plan.training.batch_size), epochs=plan.training.epochs,
                          steps=plan.training.steps)


@dataclass(frozen=True)
class Rates:
    """Seconds per step of each step kind, and seconds of one run's evaluation (and what else a run does besides
    training). ``how``: in words, how they were obtained."""

    per_step: Mapping[StepKind, float]
    evaluation: float
    how: str = ""
    probe_seconds: float = 0.0
    steps_timed: Mapping[StepKind, int] = field(default_factory=dict)
    # seconds per training image of the fixed features a run of the kind computes once before its first step
    features: Mapping[StepKind, float] = field(default_factory=dict)

    def run_seconds(self, plan: RunPlan, n_train: int, device: str = "auto", *, n_patients: int | None = None,
                    left: int | None = None) -> float | None:
        """Estimated seconds of ``plan``'s run; None if no step of its kind (nor any other) was timed.
        ``n_patients``: the training patients, for an audited run's expected steps (:func:`run_steps`). ``left``: the
        steps a continued run trains after its checkpoint, as the checkpoint counts them (its fixed features and its
        evaluation it computes all the same); None: all its steps."""
        kind = step_kind(plan, n_train, device)
        rate = self.per_step.get(kind)
        features = self.features.get(kind, 0.0)
        if rate is None:
            same = [k for k in self.per_step if k.dp_sgd == kind.dp_sgd] or list(self.per_step)
            if not same:
                return None
            rate = float(np.mean([self.per_step[k] for k in same]))
            features = float(np.mean([self.features.get(k, 0.0) for k in same]))
        steps = run_steps(plan, n_train, n_patients) if left is None else left
        return max(0, steps) * rate + n_train * features + self.evaluation

    @classmethod
    def from_runs(cls, runs: Iterable[tuple[RunPlan, Timing]], n_train: int,
                  n_patients: int | None = None) -> "Rates | None":
        """Rates learnt from finished runs' plans and full timings (a DP-SGD run's are in its private folder); a run
        resumed from a checkpoint teaches the rate of the steps it trained since (an older record that counted the
        epoch it resumed from, none); None if there is none. Before, a resumed run taught nothing, so a study whose
        runs all resumed said "time left: known after the first run" to its end. ``n_patients``: the training
        patients, for an audited run's expected steps (:func:`run_steps`): counted as the whole training set's, an
        audited run without DP-SGD taught about half its rate (0.012 s a step for 0.022 on a 294-image phantom with
        200 canaries, 38 steps counted for the 20 it trained)."""
        per_kind: dict[StepKind, list[float]] = {}
        evaluation = []
        for plan, timing in runs:
            resumed = timing.resumed_from or 0
            epoch = resumed and timing.resumed_unit != "step"        # how many steps that was is not known
            if timing.train_seconds is None or timing.total_seconds is None or epoch:
                continue
            steps = run_steps(plan, n_train, n_patients) - resumed
            if steps > 0:
                kind = step_kind(plan, n_train, timing.device)
                per_kind.setdefault(kind, []).append(timing.train_seconds / steps)
            evaluation.append(max(0.0, timing.total_seconds - timing.train_seconds))
        if not per_kind:
            return None
        return cls(per_step={k: float(np.mean(v)) for k, v in per_kind.items()},
                   evaluation=float(np.mean(evaluation)), how="from the runs finished so far")


def _random_images(dataset: Dataset, n: int, rng: np.random.Generator) -> ImageSet:
    """``n`` random images of the study's shape with random labels of its task: what the probe trains on."""
    task = dataset.task
    if task.kind == "multilabel":
        labels = rng.integers(0, 2, size=(n, task.num_outputs)).astype(np.float32)
    else:
        labels = rng.integers(0, task.num_outputs, size=n).astype(np.int64)
    images = rng.random((n, *dataset.train.image_shape), dtype=np.float32)
    if dataset.normalization is not None:
        images = normalize(images, *dataset.normalization)
    return ImageSet(images=images, labels=labels, patient_ids=np.array([f"probe{i}" for i in range(n)]),
                    sex=np.full(n, "unknown"), age=np.full(n, np.nan))


def _time_steps(data: ImageSet, dataset: Dataset, kind: StepKind, plan: RunPlan, steps: int,
                device: torch.device, trainable: str | int) -> tuple[float, float]:
    """(seconds of ``steps`` optimiser steps, seconds of the fixed features of ``data``'s images computed before
    them) of ``kind`` on ``data`` (two batches' worth of images), of a freshly
    built model frozen as the study's runs freeze theirs (``trainable``, `dpmed.models.weights.set_trainable`): a
    frozen layer takes no per-example gradient, clipping or noise, so a probe of the whole model overestimated."""
    shape = dataset.train.image_shape
    model = build_model(plan.model, in_channels=shape[0], num_outputs=dataset.task.num_outputs, image_size=shape[1],
                        seed=0)
    info = MODELS[plan.model]
    set_trainable(model, trainable, head=info.head, blocks=info.blocks)
    # the probe's own length in steps, which take the place of the study's epochs or steps
    training = plan.training.model_copy(update={"steps": steps})
    dp, source = None, plan.privacy
    if isinstance(source, DpSgdPlan):   # kind.dp_sgd: the kind is that of ``plan`` (`step_kind`)
        dp = DpSgdPlan(noise_multiplier=source.noise_multiplier, max_grad_norm=source.max_grad_norm,
                       sample_rate=kind.batch / len(data), steps=steps, noise=source.noise, unit="image",
                       expected_batch_size=float(kind.batch), n_units=len(data))
    randomness = PrivacyRandomness.reproducible(seed=0, run_id="timing-probe")   # a probe: nothing is released
    result = train(model, data, dataset.task, training, seed=0, dp=dp, randomness=randomness, device=device,
                   progress=False)
    return result.seconds - result.features_seconds, result.features_seconds


def _probe_kind(dataset: Dataset, kind: StepKind, plan: RunPlan,
                trainable: str | int) -> tuple[float, int, float]:
    """(seconds per step, steps timed, seconds of fixed features per image) of ``kind``: a warm-up of two steps,
    then as many as fit the probe's aim, in whole passes over its two batches. Where a warm step already takes the
    whole aim or more (ResNet-18 at 224 px on a CPU: 4-40 s a step) one pass is timed, and the rate is that of the
    warm-up's and the pass's 4 steps together: a run's first step pays a one-off part of a few tenths of a second,
    little beside such steps (benchmarks/RESULTS.md, "The plan's training probe"). The user is told how long the
    timed part will take where that is long. The features are left out of the steps' seconds: a
    run computes them once, for its training images, and the probe's few steps each carried a share of them, which a
    run's hundreds of steps multiplied."""
    rng = np.random.default_rng(0)
    data = _random_images(dataset, 2 * kind.batch, rng)
    device = torch.device(kind.device)
    with torch_threads(kind.threads):
        warm = _time_steps(data, dataset, kind, plan, 2, device, trainable)[0] / 2
        if warm >= _PROBE_SECONDS:
            steps = 2
        else:
            steps = int(min(_MAX_STEPS, max(_MIN_STEPS, _PROBE_SECONDS / max(warm, 1e-4))))
            steps += steps % 2     # whole passes over the two batches
        if steps * warm > _TELL_SECONDS:
            _log.info("about %s a step: timing %d more steps, about %s; --no-estimate skips this",
                      f"{warm:.0f} s" if warm >= 10 else f"{warm:.1f} s", steps, clock(steps * warm))
        seconds, features = _time_steps(data, dataset, kind, plan, steps, device, trainable)
    if warm >= _PROBE_SECONDS:       # the warm-up's one-off part is a few tenths of a second of seconds-long steps
        seconds, steps = seconds + 2 * warm, steps + 2
    return seconds / steps, steps, features / len(data)


def _probe_evaluation(dataset: Dataset, model_name: str, evaluation: EvaluationConfig, kind: StepKind) -> float:
    """Seconds of one run's evaluation on the real validation and test images, with a freshly initialised model
    (its scores are discarded); explanations on a few images, scaled to the study's number."""
    device = torch.device(kind.device)
    config, scale = evaluation, 1.0
    if evaluation.explanations is not None:
        n = min(_PROBE_CAMS, evaluation.explanations.n_images)
        scale = evaluation.explanations.n_images / n
        load_cam_libraries()    # before the clock: its seconds are once per process, not per image to scale
        config = evaluation.model_copy(update={"explanations": evaluation.explanations.model_copy(
            update={"n_images": n})})
    val, test = dataset.val, dataset.test
    if dataset.normalization is not None:
        val, test = (s.with_images(normalize(s.images, *dataset.normalization)) for s in (val, test))
    with torch_threads(kind.threads):
        model = build_model(model_name, in_channels=dataset.train.image_shape[0], num_outputs=dataset.task.num_outputs,
                            image_size=dataset.train.image_shape[1], seed=0).to(device)
        start = time.perf_counter()
        result = assess(model, dataset, (val, test), config, cam_layer=MODELS[model_name].cam_layer, device=device)
        seconds = time.perf_counter() - start
    cams = (result.explanations.seconds or 0.0) if result.explanations is not None else 0.0
    return seconds + cams * (scale - 1)


def probe_rates(plans: Iterable[RunPlan], dataset: Dataset, *, evaluation: EvaluationConfig,
                device: str = "auto", trainable: str | int = "all") -> Rates:
    """Time the step kinds that ``plans`` need (one probe per kind, with the plan's model, frozen as ``trainable``,
    the study's ``model.trainable_setting``) and one evaluation, on this machine now."""
    start = time.perf_counter()
    kinds: dict[StepKind, RunPlan] = {}
    for plan in plans:
        kinds.setdefault(step_kind(plan, len(dataset.train), device), plan)
    per_step, timed, features = {}, {}, {}
    for kind, plan in kinds.items():
        # said before each part: at 224 px on a CPU a part can take minutes, and nothing else is printed meanwhile
        _log.info("timing %s of %s on this machine", kind.describe(), plan.model)
        per_step[kind], timed[kind], features[kind] = _probe_kind(dataset, kind, plan, trainable)
    first = next(iter(kinds), None)
    if first is not None:
        _log.info("timing one evaluation of the %d validation and test images", len(dataset.val) + len(dataset.test))
    evaluation_seconds = 0.0 if first is None else _probe_evaluation(dataset, kinds[first].model, evaluation, first)
    models = "/".join(sorted({plan.model for plan in kinds.values()}))
    devices = sorted({k.device for k in kinds})
    threads = sorted({k.threads for k in kinds})
    steps = ", ".join(f"{timed[k]} {k.describe()} ({per_step[k] * 1000:.0f} ms each)" for k in kinds)
    fixed = max(features.values(), default=0.0)
    fixed_text = (f"; the fixed features of each training image ({fixed * 1000:.1f} ms each) added once per run"
                  if fixed else "")
    how = (f"timed now on {'/'.join(devices)} with {'/'.join(map(str, threads))} thread(s)"
           f"{machine_load()}: {steps}, of {models} on random images of shape "
           f"{shape_text(dataset.train.image_shape)}, scaled by each run's steps{fixed_text}; one evaluation of the "
           f"validation and test images ({evaluation_seconds:.1f} s) added per run")
    return Rates(per_step=per_step, evaluation=evaluation_seconds, how=how, probe_seconds=time.perf_counter() - start,
                 steps_timed=timed, features=features)


def concurrent_runs(plans: Sequence[RunPlan], workers: int) -> int:
    """How many of ``plans``' runs ``workers`` local processes train at once, as far as this machine's cores go: each
    run takes its ``training.threads``, so more workers than the cores have room for share them and finish no
    sooner together (on a GPU they share it too, which this does not count)."""
    threads = max((run_threads(plan.training.threads) for plan in plans), default=1)
    return max(1, min(workers, len(plans), (os.cpu_count() or 1) // threads))


def machine_load() -> str:
    """", load 3.2 on 2 cores" where the operating system tells; the probe's numbers depend on it."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return ""
    return f" (load {load:.1f} on {count_text(os.cpu_count() or 1, 'core')})"


def clock(seconds: float) -> str:
    """1:05 (minutes:seconds), 2:03:04 (hours), 3 days 2:03:04, 1 year or 120 years (an estimate a user should see is
    absurd at a glance, not as 1049625:51:37); '?' for an unknown time."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    seconds = int(round(max(0.0, seconds)))
    if seconds >= 365 * 86400:
        years = f"{seconds / (365.25 * 86400):,.0f}"
        return f"{years} year{'s' * (years != '1')}"
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{hours}:{minutes:02d}:{secs:02d}" if hours or days else f"{minutes}:{secs:02d}"
    return f"{days} day{'s' * (days > 1)} {text}" if days else text
