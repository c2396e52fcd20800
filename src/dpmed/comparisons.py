"""Comparisons across the runs of a study, from their records and saved predictions: what privacy costs, with
intervals. Computed by `dpmed.study` before the report is rendered, and written to comparisons.json.

* **Paired differences** (METHODS.md sec. 4): every private run against the non-private run of the same seed (the
  first in study order), on the same seeded redraws of the test set (`dpmed.evaluation.paired`): AUROC, accuracy,
  and for a binary task sensitivity and specificity, each model deciding at its own validation-chosen threshold.
  The report opens with these, read as cases ("misses about N more of every 100 pneumonia cases").
* **Seeds** of one arm value (runs of one plan label) are summarised by mean, standard deviation, min and max: a
  private run is always compared with its own seed's non-private run, never with the mean of the non-private seeds.
* **Flags** the report must not leave unsaid: a run that predicts one class for every test image (its accuracy is
  then the share of that class, and its sensitivity or specificity 0), and fairness groups too small for their
  numbers (fewer than ``MIN_CLASS_COUNT`` positives or negatives) or with an interval of zero width.
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

from dpmed.evaluation.paired import paired_differences, pearson, seed_summary
from dpmed.evaluation.utility import youden_threshold
from dpmed.evaluation.weighted import number
from dpmed.records import RunRecord

__all__ = ["Comparisons", "compare_runs", "Correlation", "SeedSummary", "PairedDifference", "AurocDifference",
           "Difference", "ValueSummary", "RunFlag", "GroupFlag", "MIN_CLASS_COUNT"]

# A fairness group with fewer positives (or negatives) than this is flagged: its AUROC moves in steps of 1 / (its
# positives x negatives), its sensitivity in steps of 1 / positives, and its percentile interval can collapse to a
# point (1.000 [1.000, 1.000] for a group whose one positive outscores every negative in every redraw).
MIN_CLASS_COUNT = 10


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PairedDifference(_Row):
    """Private minus non-private on the same test redraws: value (whole test set), percentile interval, two-sided
    bootstrap p-value and its floor 2 / (R + 1) (a p-value at the floor means "at most" that), the redraws in which
    the difference was defined, and each model's own value."""

    value: float | None
    low: float | None
    high: float | None
    p_value: float | None
    p_floor: float | None = None
    defined_redraws: int
    private: float | None = None
    reference: float | None = None

    @property
    def p_at_floor(self) -> bool:
        """No redraw fell on the other side of zero: the p-value is only bounded above by its floor."""
        return self.p_value is not None and self.p_floor is not None and self.p_value <= self.p_floor * (1 + 1e-9)


AurocDifference = PairedDifference   # the name comparisons.json's first version used


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
    auroc_difference: PairedDifference
    accuracy_difference: PairedDifference | None = None
    sensitivity_difference: PairedDifference | None = None
    specificity_difference: PairedDifference | None = None


class ValueSummary(_Row):
    """The runs of one arm value over seeds, each paired with its own seed's non-private run: mean, spread."""

    label: str
    arm: str
    mechanism: str = ""
    seeds: list[int]
    run_ids: list[str] = []
    epsilon: float | None
    auroc_difference: SeedSummary
    accuracy_difference: SeedSummary | None = None
    sensitivity_difference: SeedSummary | None = None
    specificity_difference: SeedSummary | None = None
    significant_seeds: int


class RunFlag(_Row):
    """Something about one run that its numbers alone hide. kind: ``one_class`` (the same decision for every test
    image; ``predicted``: which class, where known) or ``constant_labels`` (multilabel: findings decided the same way
    for every test image, ``count`` of them)."""

    run_id: str
    kind: str
    predicted: str | None = None
    count: int | None = None
    message: str


class GroupFlag(_Row):
    """A fairness group whose numbers in one run need a warning: few positives or negatives (fewer than
    MIN_CLASS_COUNT), or an interval of zero width (every redraw gave the same value)."""

    run_id: str
    attribute: str
    group: str
    n: int
    n_positive: int | None
    n_negative: int | None
    reasons: list[str]


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
    run_flags: list[RunFlag] = []
    group_flags: list[GroupFlag] = []

    def flags_of(self, run_id: str) -> list[RunFlag]:
        return [f for f in self.run_flags if f.run_id == run_id]


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


def _thresholds(record: RunRecord, arrays: Mapping[str, np.ndarray], kind: str,
                label_names: Sequence[str]) -> list[float] | None:
    """The validation-chosen thresholds the run decided with: as its record holds them (binary ``threshold``,
    multilabel ``threshold[<label>]``), else Youden's J again on its saved validation predictions; None for
    multiclass (argmax) or where neither is there."""
    if kind == "binary":
        recorded = [record.metrics.get("threshold")]
    elif kind == "multilabel" and label_names:
        recorded = [record.metrics.get(f"threshold[{name}]") for name in label_names]
    else:
        return None
    if all(t is not None for t in recorded):
        return [float(t) for t in recorded]           # type: ignore[arg-type]
    if "val_labels" not in arrays or "val_scores" not in arrays:
        return None
    y, s = np.asarray(arrays["val_labels"]), np.asarray(arrays["val_scores"])
    try:
        if kind == "binary":
            return [youden_threshold(y, s)]
        return [youden_threshold(y[:, j], s[:, j]) for j in range(y.shape[1])]
    except ValueError:
        return None


def _differences(records, predictions, kind, label_names, n_resamples, seed, confidence, notes) -> list[Difference]:
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
        diff = paired_differences(kind=kind, labels=mine["test_labels"], scores=mine["test_scores"],
                                  reference_scores=theirs["test_scores"],
                                  thresholds=_thresholds(r, mine, kind, label_names),
                                  reference_thresholds=_thresholds(ref, theirs, kind, label_names),
                                  n_resamples=n_resamples, seed=seed, confidence=confidence)
        paired = {f"{name}_difference": PairedDifference(**values) for name, values in diff.items()}
        rows.append(Difference(run_id=r.run_id, label=r.plan.label, arm=r.arm, mechanism=r.mechanism, seed=r.seed,
                               reference_run=ref.run_id, epsilon=number(r.privacy.epsilon), **paired))
    return rows


def _by_value(rows: list[Difference], records: Sequence[RunRecord]) -> list[ValueSummary]:
    eps = defaultdict(list)
    for r in records:
        eps[r.plan.label].append(r.privacy.epsilon)
    grouped: dict[str, list[Difference]] = defaultdict(list)
    for row in rows:
        grouped[row.label].append(row)

    def over_seeds(members: list[Difference], name: str) -> SeedSummary | None:
        values = [getattr(m, name) for m in members]
        if any(v is None for v in values):
            return None
        return SeedSummary(**seed_summary([v.value for v in values]))

    return [ValueSummary(label=label, arm=members[0].arm, mechanism=members[0].mechanism,
                         seeds=[m.seed for m in members], run_ids=[m.run_id for m in members],
                         epsilon=seed_summary(eps[label])["mean"],
                         auroc_difference=over_seeds(members, "auroc_difference"),
                         accuracy_difference=over_seeds(members, "accuracy_difference"),
                         sensitivity_difference=over_seeds(members, "sensitivity_difference"),
                         specificity_difference=over_seeds(members, "specificity_difference"),
                         significant_seeds=sum(1 for m in members if m.auroc_difference.p_value is not None
                                               and m.auroc_difference.p_value < 0.05))
            for label, members in grouped.items()]


def _run_flags(records: Sequence[RunRecord], kind: str, label_names: Sequence[str]) -> list[RunFlag]:
    """Runs that decide the same way for every test image (from ``test_predicted_classes`` and
    ``test_constant_labels``; for a binary record without them, from sensitivity and specificity: 1 and 0, or 0 and
    1, is the same decision for every image)."""
    names = list(label_names)
    flags = []
    for r in records:
        m = r.metrics
        sens, spec = m.get("test_sensitivity"), m.get("test_specificity")
        one_class = m.get("test_predicted_classes") == 1 or (
            "test_predicted_classes" not in m and sens is not None and spec is not None
            and {sens, spec} == {0.0, 1.0})
        if one_class:
            predicted = None
            if kind == "binary" and sens is not None:
                positive = names[1] if len(names) == 2 else "the positive class"
                negative = names[0] if len(names) == 2 else "the negative class"
                predicted = positive if sens == 1.0 else negative
            what = predicted if predicted is not None else "one class"
            flags.append(RunFlag(run_id=r.run_id, kind="one_class", predicted=predicted,
                                 message=f"predicts {what} for every test image: it separates nothing at its "
                                         "threshold (its accuracy is the share of that class, and its sensitivity "
                                         "or specificity is 0), whatever its AUROC"))
        constant = m.get("test_constant_labels")
        if constant:
            flags.append(RunFlag(run_id=r.run_id, kind="constant_labels", count=int(constant),
                                 message=f"decides {int(constant)} of its {len(names) or 'the'} findings the same way "
                                         "for every test image"))
    return flags


def _group_flags(records: Sequence[RunRecord], kind: str, n_labels: int) -> list[GroupFlag]:
    """Fairness groups with fewer than MIN_CLASS_COUNT positives or negatives (multiclass: fewer than
    2 MIN_CLASS_COUNT images), or an AUROC or accuracy interval of zero width, per run."""
    out = []
    for r in records:
        for attribute, entry in ((r.fairness or {}).get("attributes") or {}).items():
            if entry.get("status") != "ok":
                continue
            for group, g in entry["groups"].items():
                n, n_pos = g.get("n"), g.get("n_positive")
                if n is None:            # a record without group sizes: nothing to count
                    continue
                labels_per_image = max(1, n_labels) if kind == "multilabel" else 1
                n_neg = None if n_pos is None else labels_per_image * int(n) - int(n_pos)
                reasons = []
                if n_pos is not None and n_pos < MIN_CLASS_COUNT:
                    reasons.append(f"only {n_pos} positive{'s' if n_pos != 1 else ''}")
                if n_neg is not None and n_neg < MIN_CLASS_COUNT:
                    reasons.append(f"only {n_neg} negative{'s' if n_neg != 1 else ''}")
                if n_pos is None and n < 2 * MIN_CLASS_COUNT:
                    reasons.append(f"only {n} images")
                for metric in ("auroc", "accuracy"):
                    est = g.get(metric) or {}
                    if est.get("value") is not None and est.get("low") is not None and est["low"] == est["high"]:
                        reasons.append(f"{'AUROC' if metric == 'auroc' else 'accuracy'} interval of zero width "
                                       f"({est['low']:.3f} in every redraw)")
                if reasons:
                    out.append(GroupFlag(run_id=r.run_id, attribute=attribute, group=group, n=int(n),
                                         n_positive=None if n_pos is None else int(n_pos), n_negative=n_neg,
                                         reasons=reasons))
    return out


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
    rows = _differences(records, predictions, kind, label_names, n_resamples, seed, confidence, notes)
    if not any(r.mechanism == "none" for r in records):
        notes.append("no non-private arm: no AUROC differences")
    return Comparisons(
        definitions={
            "auroc_difference": "private minus non-private test AUROC (same seed), paired bootstrap over the same "
                                "seeded test redraws; two-sided bootstrap p-value, at least p_floor = 2 / (R + 1)",
            "sensitivity_difference": "private minus non-private (same seed) share of positive test images decided "
                                      "positive, each model at its own validation-chosen (Youden) threshold; the "
                                      "same redraws",
            "specificity_difference": "the same for the share of negative test images decided negative",
            "accuracy_difference": "the same for accuracy (multiclass: argmax)",
            "by_value": "seeds of one arm value, each paired with its own seed: mean, std (ddof=1), min, max of the "
                        "differences",
            "run_flags": "runs that decide the same way for every test image",
            "group_flags": f"fairness groups with fewer than {MIN_CLASS_COUNT} positives or negatives, or an "
                           "interval of zero width",
            "correlations": "Pearson r with two-sided p-value (scipy.stats.pearsonr); eps is the accounted eps",
        },
        n_resamples=int(n_resamples), bootstrap_seed=int(seed), confidence=float(confidence),
        auroc_differences=rows, by_value=_by_value(rows, records),
        correlations=Correlations(
            epsilon_vs_accuracy_parity=_parity_correlations(records),
            epsilon_vs_explanations=_explanation_correlations(records, "epsilon"),
            max_grad_norm_vs_explanations=_explanation_correlations(records, "max_grad_norm"),
            auroc_drop_vs_label=_label_correlations(records, predictions, kind, label_names, notes)),
        notes=notes, run_flags=_run_flags(records, kind, label_names),
        group_flags=_group_flags(records, kind, len(label_names)))
