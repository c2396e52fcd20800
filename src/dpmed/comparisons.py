"""Comparisons across the runs of a study, from their records and saved predictions: what privacy costs, with
intervals. Computed by `dpmed.study` before the report is rendered, and written to comparisons.json.

* **Paired AUROC differences** (METHODS.md sec. 4): every private run against the non-private run of the same seed
  (the first in study order), on the same seeded redraws of the test set (`dpmed.evaluation.paired`).
* **Seeds** of one arm value (runs of one plan label) are summarised by mean, standard deviation, min and max.
* **Pearson r** (003_9a91354dc2d7e2df.txt) across a DP-SGD sweep: runs that differ only in eps (or only in the
  clipping norm), grouped by their typed plans, every seed a point; between eps and each group's accuracy parity
  difference, eps (or the clipping norm) and each explanation metric; and across labels (three or more), between
  each label's AUROC drop and its positive count or non-private AUROC.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Mapping, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

from dpmed.evaluation.paired import paired_auroc_difference, pearson, seed_summary
from dpmed.evaluation.weighted import number
from dpmed.records import RunRecord

__all__ = ["Comparisons", "compare_runs", "Correlation", "SeedSummary", "AurocDifference"]


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AurocDifference(_Row):
    value: float | None
    low: float | None
    high: float | None
    p_value: float | None
    defined_redraws: int


class SeedSummary(_Row):
    mean: float | None
    std: float | None
    min: float | None
    max: float | None
    n_seeds: int


class Correlation(_Row):
    r: float | None
    p_value: float | None
    n: int
    reason: str | None = None


class Difference(_Row):
    run_id: str
    label: str
    arm: str
    mechanism: str
    seed: int
    reference_run: str
    epsilon: float | None
    auroc_difference: AurocDifference


class ValueSummary(_Row):
    label: str
    arm: str
    seeds: list[int]
    epsilon: float | None
    auroc_difference: SeedSummary
    significant_seeds: int


class ParityCorrelation(Correlation):
    sweep: str
    attribute: str
    group: str


class ExplanationCorrelation(Correlation):
    sweep: str
    metric: str


class LabelCorrelation(_Row):
    run_id: str
    epsilon: float | None
    drop_vs_positive_count: Correlation
    drop_vs_nonprivate_auroc: Correlation


class Correlations(_Row):
    epsilon_vs_accuracy_parity: list[ParityCorrelation]
    epsilon_vs_explanations: list[ExplanationCorrelation]
    max_grad_norm_vs_explanations: list[ExplanationCorrelation]
    auroc_drop_vs_label: list[LabelCorrelation]


class Comparisons(_Row):
    """The study's comparisons (comparisons.json)."""

    definitions: dict[str, str]
    n_resamples: int
    bootstrap_seed: int
    confidence: float
    auroc_differences: list[Difference]
    by_value: list[ValueSummary]
    correlations: Correlations
    notes: list[str]


# What a sweep varies, and the plan fields that vary with it (left out of the key that groups a sweep's runs). Runs
# group across arms, so that a clipping-norm arm at eps 1 and the eps arm's own eps 1 run fall on one curve when all
# else agrees; the certifying accountant may differ along an eps sweep (RDP beyond what PLD resolves).
_VARIES = {"epsilon": {"target_epsilon", "noise_multiplier", "noise_given", "patient_guarantee", "accountant",
                       "accountant_note"},
           "max_grad_norm": {"max_grad_norm"}}


def _x(record: RunRecord, variable: str) -> float | None:
    """eps as accounted (the x of 003's Table 3); the clipping norm as set."""
    return record.privacy.epsilon if variable == "epsilon" else record.plan.swept_value(variable)


def _sweeps(records: Sequence[RunRecord], variable: str) -> dict[str, list[RunRecord]]:
    """DP-SGD runs grouped by everything in their plans except ``variable`` (and the seed), where it takes at
    least two values; the key names the arms and the settings held fixed."""
    groups: dict[tuple, list[RunRecord]] = defaultdict(list)
    for r in records:
        if r.mechanism != "dp_sgd" or _x(r, variable) is None:
            continue
        privacy = {k: v for k, v in r.plan.privacy.model_dump(mode="json").items() if k not in _VARIES[variable]}
        key = (repr(sorted(privacy.items())), repr(sorted(r.plan.settings()["training"].items())),
               repr(r.plan.audit))
        groups[key].append(r)
    out = {}
    for runs in groups.values():
        if len({_x(r, variable) for r in runs}) < 2:
            continue
        plan = runs[0].plan.privacy
        shown = {"noise": plan.noise} | ({"max_grad_norm": plan.max_grad_norm} if variable == "epsilon" else {})
        if variable == "max_grad_norm" and plan.target_epsilon is not None:
            shown["target_epsilon"] = plan.target_epsilon
        arms = "+".join(dict.fromkeys(r.arm for r in runs))
        out[f"{variable} sweep: {arms} (" + ", ".join(f"{k}={v}" for k, v in sorted(shown.items())) + ")"] = runs
    return out


def _same_test_set(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray]) -> bool:
    return (a["test_labels"].shape == b["test_labels"].shape and np.array_equal(a["test_labels"], b["test_labels"])
            and np.array_equal(a["test_patient_ids"], b["test_patient_ids"]))


def _references(records: Sequence[RunRecord], predictions) -> dict[int, RunRecord]:
    """seed -> the first non-private run of that seed whose predictions are loaded."""
    references: dict[int, RunRecord] = {}
    for r in records:
        if r.mechanism == "none" and r.run_id in predictions:
            references.setdefault(r.seed, r)
    return references


def _differences(records, predictions, kind, n_resamples, seed, confidence, notes) -> list[Difference]:
    references = _references(records, predictions)
    rows = []
    for r in records:
        if r.mechanism == "none" or r.run_id not in predictions:
            continue
        ref = references.get(r.seed)
        if ref is None:
            notes.append(f"{r.run_id}: no non-private run with seed {r.seed} to pair with")
            continue
        mine, theirs = predictions[r.run_id], predictions[ref.run_id]
        if not _same_test_set(mine, theirs):
            notes.append(f"{r.run_id}: its test set differs from {ref.run_id}'s; no paired difference")
            continue
        diff = paired_auroc_difference(kind=kind, labels=mine["test_labels"], scores=mine["test_scores"],
                                       reference_scores=theirs["test_scores"], n_resamples=n_resamples, seed=seed,
                                       confidence=confidence)
        rows.append(Difference(run_id=r.run_id, label=r.plan.label, arm=r.arm, mechanism=r.mechanism, seed=r.seed,
                               reference_run=ref.run_id, epsilon=number(r.privacy.epsilon),
                               auroc_difference=AurocDifference(**diff)))
    return rows


def _by_value(rows: list[Difference], records: Sequence[RunRecord]) -> list[ValueSummary]:
    eps = defaultdict(list)
    for r in records:
        eps[r.plan.label].append(r.privacy.epsilon)
    grouped: dict[str, list[Difference]] = defaultdict(list)
    for row in rows:
        grouped[row.label].append(row)
    return [ValueSummary(label=label, arm=members[0].arm, seeds=[m.seed for m in members],
                         epsilon=seed_summary(eps[label])["mean"],
                         auroc_difference=SeedSummary(**seed_summary([m.auroc_difference.value for m in members])),
                         significant_seeds=sum(1 for m in members if m.auroc_difference.p_value is not None
                                               and m.auroc_difference.p_value < 0.05))
            for label, members in grouped.items()]


def _parity_correlations(records) -> list[ParityCorrelation]:
    """Pearson r between eps and each group's accuracy parity difference, per DP-SGD eps sweep (003, Table 3)."""
    out = []
    for sweep, runs in _sweeps(records, "epsilon").items():
        keys = sorted({(attr, group) for r in runs for attr, entry in (r.fairness or {}).get("attributes", {}).items()
                       if entry.get("status") == "ok" for group in entry["groups"]})
        for attr, group in keys:
            eps, parity = [], []
            for r in runs:
                g = (r.fairness or {}).get("attributes", {}).get(attr, {}).get("groups", {}).get(group)
                eps.append(r.privacy.epsilon)
                parity.append(None if g is None else g["accuracy_parity_difference"]["value"])
            out.append(ParityCorrelation(sweep=sweep, attribute=attr, group=group, **pearson(eps, parity)))
    return out


def _explanation_correlations(records, variable: str) -> list[ExplanationCorrelation]:
    """Pearson r between eps (or the clipping norm) and each explanation metric, per DP-SGD sweep: the trends of
    001_d0483fd35863b74c.txt's Tables 1-2 (eps) and Figure 6b (clipping factor at eps 1), quantified."""
    out = []
    for sweep, runs in _sweeps(records, variable).items():
        metrics = sorted({m for r in runs for m, v in (r.explanations or {}).get("metrics", {}).items()
                          if isinstance(v, dict) and "value" in v})
        for metric in metrics:
            xs = [_x(r, variable) for r in runs]
            vals = [((r.explanations or {}).get("metrics", {}).get(metric) or {}).get("value") for r in runs]
            out.append(ExplanationCorrelation(sweep=sweep, metric=metric, **pearson(xs, vals)))
    return out


def _label_correlations(records, predictions, kind, label_names, notes) -> list[LabelCorrelation]:
    """Per private run: Pearson r over labels between AUROC drop and positive count / non-private AUROC (003)."""
    if kind == "binary":          # one AUROC per model: nothing to correlate across labels
        return []
    if len(label_names) < 3:
        notes.append(f"AUROC drop versus label prevalence: n/a, the task has {len(label_names)} label(s) and a "
                     "correlation across labels needs at least 3")
        return []
    references = _references(records, predictions)
    out = []
    for r in records:
        ref = references.get(r.seed)
        if r.mechanism == "none" or ref is None:
            continue
        base = [ref.metrics.get(f"test_auroc[{name}]") for name in label_names]
        mine = [r.metrics.get(f"test_auroc[{name}]") for name in label_names]
        drop = [None if a is None or b is None else a - b for a, b in zip(base, mine)]
        y = predictions[ref.run_id]["test_labels"]
        counts = ((y[:, None] == np.arange(len(label_names))[None, :]).sum(axis=0) if y.ndim == 1
                  else y.sum(axis=0)).tolist()
        out.append(LabelCorrelation(run_id=r.run_id, epsilon=number(r.privacy.epsilon),
                                    drop_vs_positive_count=Correlation(**pearson(drop, counts)),
                                    drop_vs_nonprivate_auroc=Correlation(**pearson(drop, base))))
    return out


def compare_runs(records: Sequence[RunRecord], predictions: Mapping[str, Mapping[str, np.ndarray]], *, kind: str,
                 label_names: Sequence[str], n_resamples: int = 1000, seed: int = 0,
                 confidence: float = 0.95) -> Comparisons:
    """The study's comparisons, from run records and their loaded predictions (``run_id -> arrays`` as
    :func:`~dpmed.evaluation.predictions.load_predictions` returns them). Pure: no file is read or written."""
    notes: list[str] = []
    rows = _differences(records, predictions, kind, n_resamples, seed, confidence, notes)
    if not any(r.mechanism == "none" for r in records):
        notes.append("no non-private arm: no AUROC differences")
    return Comparisons(
        definitions={
            "auroc_difference": "private minus non-private test AUROC (same seed), paired bootstrap over the same "
                                "seeded test redraws; two-sided bootstrap p-value",
            "by_value": "seeds of one arm value: mean, std (ddof=1), min, max of the AUROC differences",
            "correlations": "Pearson r with two-sided p-value (scipy.stats.pearsonr); eps is the accounted eps",
        },
        n_resamples=int(n_resamples), bootstrap_seed=int(seed), confidence=float(confidence),
        auroc_differences=rows, by_value=_by_value(rows, records),
        correlations=Correlations(
            epsilon_vs_accuracy_parity=_parity_correlations(records),
            epsilon_vs_explanations=_explanation_correlations(records, "epsilon"),
            max_grad_norm_vs_explanations=_explanation_correlations(records, "max_grad_norm"),
            auroc_drop_vs_label=_label_correlations(records, predictions, kind, label_names, notes)),
        notes=notes)
