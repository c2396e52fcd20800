"""What `dpmed plan` prints: the data, the folder's finished runs, where the models start, one row per run (its
noise, q, T, the eps its card will state and an estimated time: of the steps after its checkpoint, where it continues
from one), the study's privacy against its budget, and the study's estimated time. `dpmed.cli` loads and prepares
the study (`dpmed.study.prepare_study`); this only prints what that planned, so that the command line module keeps
to parsing.

The exact training-set sizes printed here are for the user at the terminal only: no shareable file holds them.
"""

from __future__ import annotations

import os

from dpmed.config import RunPlan
from dpmed.mechanisms import DpSgdPlan, PrivacyCard
from dpmed.numbers import bytes_text, count_text, delta_text, epsilon_text, shape_text
from dpmed.pretraining import describe_start
from dpmed.released_size import describe_counts
from dpmed.states import folder_holder
from dpmed.study import Checkpoints, PreparedStudy, planned_card
from dpmed.timing import Rates, clock, concurrent_runs, run_steps

__all__ = ["print_plan"]


def _number(value: float | None, spec: str = ".4g") -> str:
    return "-" if value is None else format(value, spec)


def _steps_text(plan: RunPlan, n_train: int, n_patients: int) -> str:
    """T as the plan table shows it: "about" where the audit's secret draws set the training set's size."""
    steps = str(run_steps(plan, n_train, n_patients))
    return f"about {steps}" if plan.audit is not None and not isinstance(plan.privacy, DpSgdPlan) else steps


def _noise_text(card: PrivacyCard) -> str:
    if card.noise_multiplier is not None and card.noise == "laplace":   # its noise_multiplier is b / C (L1)
        return f"b = {card.noise_multiplier:.4g} C (Laplace)"
    if card.noise_multiplier is not None:
        return f"sigma = {card.noise_multiplier:.4g}"
    if card.scale_b is not None:
        return f"b = {card.scale_b:g}"
    if card.std is not None:
        return f"std = {card.std:g}"
    return "-"


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def print_plan(prepared: PreparedStudy, checkpoints: Checkpoints, rates: Rates | None, seconds: dict[str, float], *,
               workers: int | None) -> None:
    """Print ``prepared``'s plan to stdout. ``checkpoints``: `dpmed.study.checkpoints_of` it; ``rates`` and ``seconds``:
    `dpmed.study.estimate_times`'s (for the steps left after them), or None and {} where no time was estimated;
    ``workers``: --workers as given (None: not given)."""
    study, ds, folder = prepared.study, prepared.dataset, prepared.folder
    n_train = len(ds.train)
    print(f"study {study.name}: {count_text(len(prepared.plans), 'run')} planned as `dpmed run` would; nothing is "
          "trained")
    print(f"data: {ds.name}, {n_train}/{len(ds.val)}/{len(ds.test)} train/val/test images of shape "
          f"{shape_text(ds.train.image_shape)}, task {ds.task.describe()}, "
          + (f"{len(set(ds.train.patient_ids.tolist()))} training patients" if ds.patients_known
             else "no patient ids (each image counts as its own patient: a patient column (source: csv), DICOM's "
                  "PatientID or Kermany's file names give them)")
          + f" (read and prepared in {prepared.load_seconds:.0f} s; {bytes_text(ds.image_bytes)} of images in memory, "
            "and a copy in each --workers process)")
    if prepared.sizes:
        counts = describe_counts(prepared.sizes, study.size_epsilon,
                                 reproducible=study.privacy_randomness == "reproducible")
        print(f"size: DP-SGD plans from the training set's size as released: {counts}; kept in "
              f"{folder.released_sizes}; the exact sizes above are for you only: no shareable file holds them")
    finished = (f"{len(prepared.finished)} of {len(prepared.plans)} runs finished earlier, not retrained"
                if prepared.finished else "no finished runs")
    otherwise = len(prepared.reevaluate) - len(prepared.damaged)
    if otherwise:
        finished += (f" ({otherwise} evaluated with other settings than this study's or by "
                     "another dpmed: `run` evaluates them again from their models, spending no privacy)")
    print(f"output: {folder.root}: {finished}")
    holder = folder_holder(folder.root)
    if holder is not None:
        print(f"note: a dpmed run is working in that folder now ({holder.describe()})")
    print(f"start: {describe_start(study)}")
    n_patients = ds.train.n_patients
    told, continued = checkpoints.told, checkpoints.continued
    rows = [["run", "mechanism", "noise", "q", "T", "eps (delta, accountant, neighbours)", "time"]]
    sampler_paid = pure_paid = False    # a card's delta that shows the part its noise sampler's bounded draws cost
    for plan in prepared.plans:
        card = planned_card(plan, ds.train.image_shape, study.privacy_randomness)
        if card.sampler_delta and card.delta is not None and not card.sampler_voids:
            sampler_paid |= delta_text(card.delta) != delta_text(card.delta - card.sampler_delta)
            pure_paid |= card.accountant == "pure"
        time_text = ("evaluate again" if plan.run_id in prepared.reevaluate else
                     "done" if plan.run_id in prepared.finished else
                     "-" if rates is None else clock(seconds[plan.run_id])
                     + (f" from step {continued[plan.run_id][0]}" if plan.run_id in continued else ""))
        rows.append([plan.run_id, plan.mechanism, _noise_text(card), _number(card.sample_rate),
                     _steps_text(plan, n_train, n_patients), card.in_brief(), time_text])
    print()
    print(_table(rows))
    for run_id, state, detail, _ in told:
        print(f"{run_id}: {state}: {detail}")
    for run_id, why in prepared.damaged.items():
        print(f"{run_id}: finished: {why}: `run` evaluates it again from its model, not retrained: no privacy spent")
    print(f"\nT: optimiser steps (DP-SGD: Poisson-sampled at rate q; other runs: shuffled batches of "
          f"{study.training.batch_size} unless the arm says otherwise)")
    if sampler_paid:
        print("delta: where it is above the arm's, it includes what the noise sampler's bounded draws cost"
              + ("; a PURE run's delta is that cost alone, its bound holding at delta 0" if pure_paid else "")
              + " (each run's privacy card says how much)")
    print(f"study privacy: {prepared.privacy.statement}")
    budget = study.privacy_budget
    if budget is not None:
        unit = prepared.privacy.unit or "image or patient"
        used = prepared.privacy.dp_sgd_epsilon
        print(f"privacy budget: eps = {budget.epsilon:g} at delta = {budget.delta:g} ({budget.accountant.upper()}; "
              f"add/remove one {unit}); the study's runs together use eps = "
              f"{'-' if used is None else epsilon_text(used)} of it"
              + ("; reproducible mode: not DP against anyone who knows the seed, whatever the budget"
                 if prepared.privacy.reproducible else ""))
    else:
        print("privacy budget: none set (privacy_budget in the study file refuses, before training, a study whose runs "
              "together exceed it)")
    if rates is not None:
        total = sum(seconds.values())
        training = total - rates.evaluation * len(seconds)
        at_once = concurrent_runs(prepared.todo, workers or 1)
        parts = f"{clock(training)} training, {clock(total - training)} evaluation"
        how = (f"one after the other ({parts})" if at_once == 1 else
               f"{at_once} at a time ({clock(total)} one after the other: {parts})")
        if workers is None:
            more = "; --workers N divides the runs' part by up to N where there are cores for them"
        elif at_once < min(workers, len(seconds)):
            more = (f"; this machine's {os.cpu_count()} cores have room for {count_text(at_once, 'run')} at once "
                    "at their training.threads")
        else:
            on_gpu = any(kind.device == "cuda" for kind in rates.per_step)
            more = "; they share the GPU, so it may take longer" if at_once > 1 and on_gpu else ""
        print(f"estimated time: about {clock(total / at_once + prepared.load_seconds)} for `dpmed run"
              f"{'' if workers is None else f' --workers {workers}'}`: {clock(prepared.load_seconds)} to "
              f"read the data, then {clock(total / at_once)} for the {count_text(len(seconds), 'run')} to train "
              f"{how}{more}")
        pretraining = "public pretraining (unless cached), " if study.pretrain is not None else ""
        print(f"  how: {rates.how}; the probe took {rates.probe_seconds:.0f} s. Not included: {pretraining}audits, "
              f"attacks, writing the report, and a machine that gets busier or quieter meanwhile")
    elif not prepared.todo:
        n = len(prepared.reevaluate)
        again = (f"evaluate {count_text(n, 'run')} again from {'its model' if n == 1 else 'their models'} (no "
                 "privacy spent) and " if n else "only ")
        print(f"estimated time: nothing to train (every run is finished); `dpmed run` would {again}rewrite the report")
