"""Pearson r across the runs of a study (Tayebi Arasteh, Ziller et al. 2023, 003_9a91354dc2d7e2df.txt): the trends the
source papers read off their tables, quantified, for `dpmed.comparisons` (and comparisons.json's ``correlations``).

* **Across a DP-SGD sweep**: runs that differ only in eps (or only in the clipping norm), grouped by their typed plans,
  every seed a point: log10 eps against each fairness group's accuracy parity difference (003, Table 3); log10 eps,
  or the clipping norm at fixed eps, against each explanation metric (the trends of Naidu et al. 2021's Tables 1-2
  and Figure 6b). eps enters as its logarithm: 003 correlated eps itself over 0.29 to 7.89, but a dpmed sweep spans
  decades (1 to 1e15 in the high-budget regime), and on a linear axis its largest eps alone would set r, whatever
  the others show. Each row names its x.
* **Across labels** (three or more): each label's AUROC drop (non-private minus private, same seed) against its
  positive count and its non-private AUROC.

Every r comes with its two-sided p-value and the number of points (`dpmed.evaluation.paired.pearson`); an r that
cannot be computed (fewer than 3 points, a constant side, or a sweep of fewer than 3 distinct values: across two,
r only says which is larger, +-1 with one seed at each and a small p with several) carries the reason instead.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Mapping, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

from dpmed.evaluation.paired import Correlation, pearson
from dpmed.evaluation.predictions import Predictions
from dpmed.evaluation.weighted import number
from dpmed.mechanisms import DpSgdPlan
from dpmed.records import RunRecord

__all__ = ["Correlation", "ParityCorrelation", "ExplanationCorrelation", "LabelCorrelation", "Correlations",
           "correlate_runs"]


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ParityCorrelation(Correlation):
    sweep: str
    x: str                          # what r is taken against: "log10 eps"
    attribute: str
    group: str


class ExplanationCorrelation(Correlation):
    sweep: str
    x: str                          # "log10 eps" or "max_grad_norm"
    metric: str


class LabelCorrelation(_Row):
    run_id: str
    epsilon: float | None
    epsilon_label: str = ""         # the eps with its delta, accountant and neighbours (or "not DP"): never bare
    drop_vs_positive_count: Correlation
    drop_vs_nonprivate_auroc: Correlation


class Correlations(_Row):
    """Every correlation of a study (comparisons.json's ``correlations``)."""

    epsilon_vs_accuracy_parity: list[ParityCorrelation]
    epsilon_vs_explanations: list[ExplanationCorrelation]
    max_grad_norm_vs_explanations: list[ExplanationCorrelation]
    auroc_drop_vs_label: list[LabelCorrelation]


# What a sweep varies, and the plan fields that vary with it (left out of the key that groups a sweep's runs). Runs
# group across arms, so that a clipping-norm arm at eps 1 and the eps arm's own eps 1 run fall on one curve when all
# else agrees; the certifying accountant may differ along an eps sweep (RDP beyond what PLD resolves).
_VARIES = {"epsilon": {"target_epsilon", "noise_multiplier", "noise_given", "patient_guarantee", "accountant",
                       "accountant_note"},
           "max_grad_norm": {"max_grad_norm"}}


_X_NAME = {"epsilon": "log10 eps", "max_grad_norm": "max_grad_norm"}

# A trend across a sweep needs this many distinct swept values: across two, r only compares them (+-1 with one run
# at each, whatever the runs show; with several seeds a large r and a small p say only that the two values differ).
MIN_SWEPT_VALUES = 3


def _x(record: RunRecord, variable: str) -> float | None:
    """log10 of eps as accounted (003's Table 3 read eps itself: see the module's docstring); the clipping norm as
    set. None where a run has no eps (or no positive one)."""
    if variable != "epsilon":
        return record.plan.swept_value(variable)
    eps = record.privacy.epsilon
    return math.log10(eps) if eps is not None and eps > 0 else None


def _sweeps(records: Sequence[RunRecord], variable: str) -> dict[str, list[RunRecord]]:
    """DP-SGD runs grouped by everything in their plans except ``variable`` (and the seed), where it takes at
    least two values; the key names the arms and the settings held fixed."""
    groups: dict[tuple, list[RunRecord]] = defaultdict(list)
    for r in records:
        if r.mechanism != "dp_sgd" or _x(r, variable) is None:
            continue
        # settings(): without what a card only states (released_units), which older finished runs do not carry
        privacy = {k: v for k, v in r.plan.settings()["privacy"].items() if k not in _VARIES[variable]}
        key = (repr(sorted(privacy.items())), repr(sorted(r.plan.settings()["training"].items())),
               repr(r.plan.audit))
        groups[key].append(r)
    out = {}
    for runs in groups.values():
        if len({_x(r, variable) for r in runs}) < 2:
            continue
        plan = runs[0].plan.privacy
        assert isinstance(plan, DpSgdPlan)      # only DP-SGD runs are grouped
        shown = {"noise": plan.noise} | ({"max_grad_norm": plan.max_grad_norm} if variable == "epsilon" else {})
        if variable == "max_grad_norm" and plan.target_epsilon is not None:
            shown["target_epsilon"] = plan.target_epsilon
        arms = "+".join(dict.fromkeys(r.arm for r in runs))
        out[f"{variable} sweep: {arms} (" + ", ".join(f"{k}={v}" for k, v in sorted(shown.items())) + ")"] = runs
    return out


def _across_sweep(xs, ys, variable: str) -> Correlation:
    """Pearson r of a trend across a sweep: none where fewer than MIN_SWEPT_VALUES distinct swept values have a
    point (module docstring), whatever the number of seeds."""
    return pearson(xs, ys, min_x_values=MIN_SWEPT_VALUES, x_name=_X_NAME[variable])


def _parity_correlations(records) -> list[ParityCorrelation]:
    """Pearson r between log10 eps and each group's accuracy parity difference, per DP-SGD eps sweep (003,
    Table 3)."""
    out = []
    for sweep, runs in _sweeps(records, "epsilon").items():
        keys = sorted({(attr, group) for r in runs if r.fairness for attr in r.fairness.attributes
                       if (entry := r.fairness.ok(attr)) for group in entry.groups})
        xs = [_x(r, "epsilon") for r in runs]
        for attr, group in keys:
            parity = []
            for r in runs:
                entry = r.fairness.ok(attr) if r.fairness else None
                g = None if entry is None else entry.groups.get(group)
                parity.append(None if g is None else g.accuracy_parity_difference.value)
            out.append(ParityCorrelation(sweep=sweep, x=_X_NAME["epsilon"], attribute=attr, group=group,
                                         **_across_sweep(xs, parity, "epsilon").model_dump()))
    return out


def _explanation_correlations(records, variable: str) -> list[ExplanationCorrelation]:
    """Pearson r between log10 eps (or the clipping norm) and each explanation metric, per DP-SGD sweep: the trends of
    001_d0483fd35863b74c.txt's Tables 1-2 (eps) and Figure 6b (clipping factor at eps 1), quantified."""
    out = []
    for sweep, runs in _sweeps(records, variable).items():
        metrics = sorted({m for r in runs if r.explanations for m in r.explanations.metrics})
        for metric in metrics:
            xs = [_x(r, variable) for r in runs]
            vals = [None if r.explanations is None or metric not in r.explanations.metrics
                    else r.explanations.metrics[metric].value for r in runs]
            out.append(ExplanationCorrelation(sweep=sweep, x=_X_NAME[variable], metric=metric,
                                              **_across_sweep(xs, vals, variable).model_dump()))
    return out


def _label_correlations(records, predictions, references, kind, label_names, notes) -> list[LabelCorrelation]:
    """Per private run: Pearson r over labels between AUROC drop and positive count / non-private AUROC (003),
    against its seed's non-private run (``references``: seed -> that run)."""
    if kind == "binary":          # one AUROC per model: nothing to correlate across labels
        return []
    if len(label_names) < 3:
        notes.append(f"AUROC drop versus label prevalence: n/a, the task has {len(label_names)} label(s) and a "
                     "correlation across labels needs at least 3")
        return []
    out = []
    for r in records:
        ref = references.get(r.seed)
        if r.mechanism == "none" or ref is None:
            continue
        base = [ref.metrics.get(f"test_auroc[{name}]") for name in label_names]
        mine = [r.metrics.get(f"test_auroc[{name}]") for name in label_names]
        drop = [None if a is None or b is None else a - b for a, b in zip(base, mine)]
        y = predictions[ref.run_id].test.labels
        counts = ((y[:, None] == np.arange(len(label_names))[None, :]).sum(axis=0) if y.ndim == 1
                  else y.sum(axis=0)).tolist()
        out.append(LabelCorrelation(run_id=r.run_id, epsilon=number(r.privacy.epsilon),
                                    epsilon_label=r.privacy.in_brief(),
                                    drop_vs_positive_count=pearson(drop, counts),
                                    drop_vs_nonprivate_auroc=pearson(drop, base)))
    return out


def correlate_runs(records: Sequence[RunRecord], predictions: Mapping[str, Predictions],
                   references: Mapping[int, RunRecord], *, kind: str, label_names: Sequence[str],
                   notes: list[str]) -> Correlations:
    """The study's correlations, from run records, their loaded predictions (for the labels' positive counts) and
    the non-private run of each seed (``references``). Why a correlation across labels is not computed goes to
    ``notes``. Pure: no file is read or written."""
    return Correlations(
        epsilon_vs_accuracy_parity=_parity_correlations(records),
        epsilon_vs_explanations=_explanation_correlations(records, "epsilon"),
        max_grad_norm_vs_explanations=_explanation_correlations(records, "max_grad_norm"),
        auroc_drop_vs_label=_label_correlations(records, predictions, references, kind, label_names, notes))
