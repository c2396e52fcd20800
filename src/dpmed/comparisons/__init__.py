"""Comparisons across the runs of a study, from their records and saved predictions: what privacy costs, with
intervals. Computed by `dpmed.outputs` before the report is rendered, and written to comparisons.json.

* **Paired differences** (METHODS.md sec. 4): every private run against the non-private run of the same seed (the
  first in study order), on the same seeded redraws of the test set that gave the runs their own intervals (of its
  patients where the runs redrew patients; `dpmed.evaluation.paired`): AUROC, accuracy,
  and for a binary task sensitivity and specificity, each model deciding at its own validation-chosen threshold;
  for ordinal grades the quadratic-weighted kappa of the argmax grades (METHODS.md sec. 4).
  The report opens with these, read as cases ("misses about N more of every 100 pneumonia cases").
* **Seeds** of one arm value (runs of one plan label) are summarised by mean, standard deviation, min and max, and
  the Student t interval of the mean of the per-seed paired differences (n - 1 degrees of freedom; none for one
  seed): a private run is always compared with its own seed's non-private run, never with the mean of the
  non-private seeds. Whether an arm differs from the non-private one across seeds is read from that interval
  excluding 0, not from the seeds' range nor from how many seeds had p < 0.05.
* **Each arm value's own metrics over seeds** (`metrics_by_value`, :class:`ValueMetrics`): test AUROC, accuracy,
  sensitivity and specificity, quadratic-weighted kappa (where the task has them) and the accounted eps, each with
  the same t interval over seeds; the report's figure draws its points from the same :func:`summarise_seeds`.
* **Flags** the report must not leave unsaid: a run that predicts one class for every test image (its accuracy is
  then the share of that class, and its sensitivity or specificity 0), and fairness groups too small for their
  numbers (fewer than ``MIN_CLASS_COUNT`` positives or negatives) or with an interval of zero width.
* **Pearson r** (003_9a91354dc2d7e2df.txt) across a DP-SGD sweep and across labels: `dpmed.comparisons.correlations`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Literal, Mapping, Sequence

import numpy as np
from pydantic import model_serializer
from scipy.stats import t as student_t

from dpmed.comparisons.correlations import Correlation, Correlations, _Row, correlate_runs
from dpmed.evaluation.bootstrap import Interval
from dpmed.evaluation.paired import PairedDifference, SeedSummary, paired_differences, seed_summary
from dpmed.evaluation.predictions import Predictions
from dpmed.evaluation.utility import youden_threshold
from dpmed.evaluation.weighted import number
from dpmed.records import RunRecord

__all__ = ["Comparisons", "compare_runs", "Correlation", "Correlations", "SeedSummary", "PairedDifference",
           "Difference", "ValueSummary", "ValueMetrics", "summarise_seeds", "RunFlag", "GroupFlag", "MIN_CLASS_COUNT",
           "SIGNIFICANCE", "decides_one_class", "holds_chance"]

# A fairness group with fewer positives (or negatives) than this is flagged: its AUROC moves in steps of 1 / (its
# positives x negatives), its sensitivity in steps of 1 / positives, and its bootstrap interval can collapse to a
# point (1.000 [1.000, 1.000] for a group whose one positive outscores every negative in every redraw).
MIN_CLASS_COUNT = 10


# The level below which a seed's paired p-value counts it among the "seeds with p < 0.05" of the report. The count
# describes single seeds' test sets; whether an arm differs across seeds is its t interval over seeds (SeedSummary).
SIGNIFICANCE = 0.05


# The fields an ordinal task alone fills: a comparisons.json of a binary, multilabel or unordered multiclass study is
# written without them, as it was before they existed.
_ORDINAL_FIELDS = ("kappa_quadratic_difference", "test_kappa_quadratic")


class _GradedRow(_Row):
    @model_serializer(mode="wrap")
    def _without_absent_kappa(self, handler):
        out = handler(self)
        for name in _ORDINAL_FIELDS:
            if name in out and out[name] is None:
                del out[name]
        return out


class Difference(_GradedRow):
    run_id: str
    label: str
    arm: str
    mechanism: str
    seed: int
    reference_run: str
    epsilon: float | None
    epsilon_label: str = ""         # the eps with its delta, accountant and neighbours (or "not DP"): never bare
    auroc_difference: PairedDifference
    accuracy_difference: PairedDifference | None = None
    sensitivity_difference: PairedDifference | None = None
    specificity_difference: PairedDifference | None = None
    kappa_quadratic_difference: PairedDifference | None = None     # ordinal grades only
    reference_at_chance: bool = False   # :func:`holds_chance` of reference_run: the difference may read as a gain


class ValueSummary(_GradedRow):
    """The runs of one arm value over seeds, each paired with its own seed's non-private run: mean, spread, and the
    t interval over seeds of each paired difference (:class:`SeedSummary`)."""

    label: str
    arm: str
    mechanism: str = ""
    seeds: list[int]
    run_ids: list[str] = []
    epsilon: float | None
    epsilon_label: str = ""         # the first seed's eps with its delta, accountant and neighbours
    auroc_difference: SeedSummary
    accuracy_difference: SeedSummary | None = None
    sensitivity_difference: SeedSummary | None = None
    specificity_difference: SeedSummary | None = None
    kappa_quadratic_difference: SeedSummary | None = None          # ordinal grades only; cut to [-2, 2]
    significant_seeds: int
    references_at_chance: list[str] = []     # the seeds' non-private runs that :func:`holds_chance`


class ValueMetrics(_GradedRow):
    """The runs of one arm value (the non-private arm's included) over seeds: each metric of the runs themselves,
    not their differences, as a :class:`SeedSummary` (mean, std, range and the t interval over seeds at the study's
    confidence; none for one seed, with the reason). A metric the task does not have (sensitivity and specificity
    outside a binary task, quadratic-weighted kappa outside ordinal grades) is None; kappa's interval is cut to
    [-1, 1], the others' to [0, 1]. epsilon: the accounted eps over seeds where every run has a finite one (it
    differs between seeds only where each calibrated its noise to its own released count), else None; its delta,
    accountant and neighbours are in epsilon_label. Without these, a reader of comparisons.json had to recompute
    each arm's own level from the run records."""

    label: str
    arm: str
    mechanism: str
    seeds: list[int]
    run_ids: list[str]
    epsilon_label: str
    epsilon: SeedSummary | None
    test_auroc: SeedSummary | None
    test_accuracy: SeedSummary | None = None
    test_sensitivity: SeedSummary | None = None
    test_specificity: SeedSummary | None = None
    test_kappa_quadratic: SeedSummary | None = None


class RunFlag(_Row):
    """Something about one run that its numbers alone hide. kind: ``one_class`` (the same decision for every test
    image; ``predicted``: which class, where known), ``unused_classes`` (multiclass: the argmax chooses only ``count``
    of the classes for the test images, so the others' recall is 0), ``constant_labels`` (multilabel: findings
    decided the same way for every test image, ``count`` of them) or ``below_chance`` (the whole test AUROC interval
    below 0.5: a reference worse than a coin makes its seed's private runs look like gains)."""

    run_id: str
    kind: str
    predicted: str | None = None
    count: int | None = None
    message: str


class GroupFlag(_Row):
    """A fairness group whose numbers in one run need a warning: few positives or negatives (fewer than
    MIN_CLASS_COUNT; multilabel: in any one finding, and n_positive, n_negative are the fewest over findings), or an
    interval of zero width (every redraw gave the same value)."""

    run_id: str
    attribute: str
    group: str
    n: int
    n_positive: int | None
    n_negative: int | None
    reasons: list[str]


class Comparisons(_Row):
    """The study's comparisons (comparisons.json). bootstrap_unit: what the paired differences redrew, the test
    set's patients or its images (comparisons.json files that predate it redrew images)."""

    definitions: dict[str, str]
    n_resamples: int
    bootstrap_seed: int
    bootstrap_unit: Literal["patient", "image"] = "image"
    confidence: float
    auroc_differences: list[Difference]
    by_value: list[ValueSummary]
    correlations: Correlations
    notes: list[str]
    run_flags: list[RunFlag] = []
    group_flags: list[GroupFlag] = []
    metrics_by_value: list[ValueMetrics] = []          # absent from comparisons.json files that predate it

    def flags_of(self, run_id: str) -> list[RunFlag]:
        return [f for f in self.run_flags if f.run_id == run_id]


def _same_test_set(a: Predictions, b: Predictions) -> bool:
    return (a.test.labels.shape == b.test.labels.shape and np.array_equal(a.test.labels, b.test.labels)
            and np.array_equal(a.test.patient_ids, b.test.patient_ids))


def _bootstrap_unit(records: Sequence[RunRecord], notes: list[str]) -> Literal["patient", "image"]:
    """"patient" where every run's own intervals redrew the test patients (its ``bootstrap_unit``), else "image":
    the differences then use the redraws the runs' intervals used. A record without the key predates the patient
    bootstrap and redrew images; runs that disagree (some recorded by an older dpmed) are compared by image, said in
    a note."""
    units = {r.bootstrap_unit for r in records}
    if len(units) > 1:
        notes.append("the runs' intervals redrew different units (" + ", ".join(sorted(units)) + "; runs recorded "
                     "before dpmed redrew patients redrew images): the paired differences redraw images")
    return "patient" if units == {"patient"} else "image"


def _references(records: Sequence[RunRecord], predictions) -> dict[int, RunRecord]:
    """seed -> the first non-private run of that seed whose predictions are loaded."""
    references: dict[int, RunRecord] = {}
    for r in records:
        if r.mechanism == "none" and r.run_id in predictions:
            references.setdefault(r.seed, r)
    return references


def _thresholds(record: RunRecord, predictions: Predictions, kind: str,
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
    if predictions.val is None:
        return None
    y, s = np.asarray(predictions.val.labels), np.asarray(predictions.val.scores)
    try:
        if kind == "binary":
            return [youden_threshold(y, s)]
        return [youden_threshold(y[:, j], s[:, j]) for j in range(y.shape[1])]
    except ValueError:
        return None


def holds_chance(record: RunRecord) -> bool:
    """Whether a run's test AUROC interval holds 0.5, chance: as the reference of its seed it may have learned
    nothing its test set can show, so its seed's private runs read as gains (+0.30 against a 0.55 reference), and
    with 3 seeds that one seed sets the interval over seeds. The report names such a reference in its opening table
    and comparisons.json marks its pairs (``reference_at_chance``), by this one rule. One wholly below chance holds
    no 0.5 (it is flagged ``below_chance``); deciding one class for every test image speaks of the decisions, not of
    the AUROC, so it does not count here."""
    a = record.estimate("test_auroc")
    return a.low is not None and a.high is not None and a.low <= 0.5 <= a.high


def _differences(records, predictions, kind, label_names, n_resamples, seed, confidence, unit, notes,
                 ordinal) -> list[Difference]:
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
        diff = paired_differences(kind=kind, labels=mine.test.labels, scores=mine.test.scores,
                                  reference_scores=theirs.test.scores,
                                  thresholds=_thresholds(r, mine, kind, label_names),
                                  reference_thresholds=_thresholds(ref, theirs, kind, label_names),
                                  n_resamples=n_resamples, seed=seed, confidence=confidence,
                                  patient_ids=mine.test.patient_ids if unit == "patient" else None,
                                  ordinal=ordinal)
        paired = {f"{name}_difference": values for name, values in diff.items()}
        rows.append(Difference(run_id=r.run_id, label=r.plan.label, arm=r.arm, mechanism=r.mechanism, seed=r.seed,
                               reference_run=ref.run_id, epsilon=number(r.privacy.epsilon),
                               epsilon_label=r.privacy.in_brief(), reference_at_chance=holds_chance(ref), **paired))
    return rows


def _by_value(rows: list[Difference], records: Sequence[RunRecord], confidence: float) -> list[ValueSummary]:
    eps = defaultdict(list)
    eps_labels: dict[str, str] = {}
    at_chance = {r.run_id for r in records if holds_chance(r)}
    for r in records:
        eps[r.plan.label].append(r.privacy.epsilon)
        eps_labels.setdefault(r.plan.label, r.privacy.in_brief())
    grouped: dict[str, list[Difference]] = defaultdict(list)
    for row in rows:
        grouped[row.label].append(row)

    def over_seeds(members: list[Difference], name: str, bound: float = 1.0) -> SeedSummary | None:
        values = [getattr(m, name) for m in members]
        return None if any(v is None for v in values) else summarise(values, bound)

    def summarise(values: list[PairedDifference], bound: float = 1.0) -> SeedSummary:
        return seed_summary([v.value for v in values], confidence=confidence, within=(-bound, bound))

    return [ValueSummary(label=label, arm=members[0].arm, mechanism=members[0].mechanism,
                         seeds=[m.seed for m in members], run_ids=[m.run_id for m in members],
                         epsilon=seed_summary(eps[label]).mean, epsilon_label=eps_labels[label],
                         auroc_difference=summarise([m.auroc_difference for m in members]),
                         accuracy_difference=over_seeds(members, "accuracy_difference"),
                         sensitivity_difference=over_seeds(members, "sensitivity_difference"),
                         specificity_difference=over_seeds(members, "specificity_difference"),
                         kappa_quadratic_difference=over_seeds(members, "kappa_quadratic_difference", 2.0),
                         significant_seeds=sum(1 for m in members if m.auroc_difference.p_value is not None
                                               and m.auroc_difference.p_value < SIGNIFICANCE),
                         references_at_chance=[m.reference_run for m in members if m.reference_run in at_chance])
            for label, members in grouped.items()]


def summarise_seeds(runs: Sequence[RunRecord], metric: str, *, confidence: float,
                    within: tuple[float, float] = (0.0, 1.0)) -> SeedSummary | None:
    """``metric`` (a key of the runs' metrics, e.g. "test_auroc") over the runs' seeds, with its Student t interval
    at ``confidence``, cut to ``within``, the metric's range ([0, 1]; a kappa's is [-1, 1])
    (:func:`~dpmed.evaluation.paired.seed_summary`; a run where it is undefined is left out); None where no run
    records the metric (the task has none)."""
    if not any(metric in r.metrics for r in runs):
        return None
    return seed_summary([r.estimate(metric).value for r in runs], confidence=confidence, within=within)


def _metrics_by_value(records: Sequence[RunRecord], confidence: float, ordinal: bool) -> list[ValueMetrics]:
    grouped: dict[str, list[RunRecord]] = defaultdict(list)
    for r in records:
        grouped[r.plan.label].append(r)
    out = []
    for label, runs in grouped.items():
        eps = [r.privacy.epsilon for r in runs]
        finite = all(e is not None and np.isfinite(e) for e in eps)
        out.append(ValueMetrics(
            label=label, arm=runs[0].arm, mechanism=runs[0].mechanism, seeds=[r.seed for r in runs],
            run_ids=[r.run_id for r in runs], epsilon_label=runs[0].privacy.in_brief(),
            epsilon=seed_summary(eps, confidence=confidence, within=(0.0, math.inf)) if finite else None,
            **{name: summarise_seeds(runs, name, confidence=confidence)
               for name in ("test_auroc", "test_accuracy", "test_sensitivity", "test_specificity")},
            test_kappa_quadratic=(summarise_seeds(runs, "test_kappa_quadratic", confidence=confidence,
                                                  within=(-1.0, 1.0)) if ordinal else None)))
    return out


def decides_one_class(record: RunRecord) -> bool:
    """Whether a run made the same decision for every test image (from ``test_predicted_classes``; for a binary
    record without it, sensitivity and specificity of 1 and 0, or 0 and 1): its accuracy is then only that class's
    share, which the report and the terminal say beside its numbers."""
    m = record.metrics
    chosen, sens, spec = m.get("test_predicted_classes"), m.get("test_sensitivity"), m.get("test_specificity")
    return chosen == 1 or (chosen is None and sens is not None and spec is not None and {sens, spec} == {0.0, 1.0})


# What a test AUROC wholly below 0.5 means, by task: (what is ranked, the AUROC's name, what the model does). Only a
# binary model ranks backwards (its flipped scores would rank above chance); a macro over classes or findings below
# 0.5 says only that on average each one's score ranks its own images below the others.
_BELOW_CHANCE = {
    "binary": ("classes", "", "the wrong way round"),
    "multiclass": ("classes", "macro one-vs-rest ", "on average a class's score ranks that class's images below the "
                                                    "other images more often than above"),
    "multilabel": ("findings", "macro ", "on average a finding's score ranks the images with it below those without "
                                         "more often than above"),
}


def _run_flags(records: Sequence[RunRecord], kind: str, label_names: Sequence[str]) -> list[RunFlag]:
    """Runs that decide the same way for every test image, or (multiclass) never choose some class (from
    ``test_predicted_classes`` and ``test_constant_labels``; for a binary record without them, from sensitivity and
    specificity: 1 and 0, or 0 and 1, is the same decision for every image), and runs whose test AUROC interval lies
    wholly below chance (0.5)."""
    names = list(label_names)
    flags = []
    for r in records:
        m = r.metrics
        sens = m.get("test_sensitivity")
        chosen = m.get("test_predicted_classes")
        if decides_one_class(r):
            predicted = None
            if kind == "binary" and sens is not None:
                positive = names[1] if len(names) == 2 else "the positive class"
                negative = names[0] if len(names) == 2 else "the negative class"
                predicted = positive if sens == 1.0 else negative
            if kind == "binary":
                why = ("it separates nothing at its threshold (its accuracy is the share of that class, and its "
                       "sensitivity or specificity is 0)")
            else:   # multiclass: the argmax decides, there is no threshold
                why = ("the same argmax everywhere, so it separates nothing (its accuracy is the share of that class, "
                       "and every other class's recall is 0)")
            what = predicted if predicted is not None else "one class"
            flags.append(RunFlag(run_id=r.run_id, kind="one_class", predicted=predicted,
                                 message=f"predicts {what} for every test image: {why}, whatever its AUROC"))
        if kind == "multiclass" and isinstance(chosen, (int, float)) and 1 < chosen < len(names):
            unused = len(names) - int(chosen)
            never = "1 class is never predicted, so its" if unused == 1 else f"{unused} are never predicted, so their"
            flags.append(RunFlag(run_id=r.run_id, kind="unused_classes", count=int(chosen),
                                 message=f"chooses only {int(chosen)} of the {len(names)} classes for the test images "
                                         f"(argmax): {never} recall is 0, whatever its AUROC"))
        value, low, high = m.get("test_auroc"), m.get("test_auroc_low"), m.get("test_auroc_high")
        if (isinstance(value, (int, float)) and isinstance(low, (int, float)) and isinstance(high, (int, float))
                and high < 0.5):
            ranked, auroc_name, what = _BELOW_CHANCE[kind]
            flags.append(RunFlag(run_id=r.run_id, kind="below_chance",
                                 message=f"ranks the {ranked} below chance: its {auroc_name}test AUROC "
                                         f"{value:.3f} [{low:.3f}, {high:.3f}] lies wholly below 0.5, worse than a "
                                         f"coin ({what}), so a difference taken with it says more "
                                         "about that failure than about privacy"))
        constant = m.get("test_constant_labels")
        if constant:
            flags.append(RunFlag(run_id=r.run_id, kind="constant_labels", count=int(constant),
                                 message=f"decides {int(constant)} of its {len(names) or 'the'} findings the same way "
                                         "for every test image"))
    return flags


def _few(count: int, kind: str, finding: str | None) -> list[str]:
    """The reason "only k positives" (of one finding), where ``count`` is below MIN_CLASS_COUNT."""
    if count >= MIN_CLASS_COUNT:
        return []
    return [f"only {count} {kind}{'s' if count != 1 else ''}" + (f" of {finding}" if finding else "")]


def _group_flags(records: Sequence[RunRecord], kind: str, label_names: Sequence[str]) -> list[GroupFlag]:
    """Fairness groups with fewer than MIN_CLASS_COUNT positives or negatives (multilabel: in any one finding, as
    each finding's AUROC sees them; multiclass: fewer than MIN_CLASS_COUNT images of any one class, as its
    one-vs-rest AUROC sees them, or fewer than 2 MIN_CLASS_COUNT images), or an AUROC or accuracy interval of zero
    width, per run. A multiclass record of a dpmed before the per-class counts holds none; every run of a study
    has the same test images and groups, so it takes the counts another run recorded for the same group."""
    counted = {(attribute, group): g.n_positive_by_label for r in records if r.fairness
               for attribute in r.fairness.attributes if (entry := r.fairness.ok(attribute)) is not None
               for group, g in entry.groups.items() if g.n_positive_by_label is not None}
    out = []
    for r in records:
        if r.fairness is None:
            continue
        for attribute in r.fairness.attributes:
            if (entry := r.fairness.ok(attribute)) is None:
                continue
            for group, g in entry.groups.items():
                n, n_pos, by_label = g.n, g.n_positive, g.n_positive_by_label
                if by_label is None and kind == "multiclass":
                    by_label = counted.get((attribute, group))
                reasons = []
                if by_label is not None and kind == "multiclass":
                    names = list(label_names) if len(label_names) == len(by_label) else [
                        f"class {j}" for j in range(len(by_label))]
                    for name, k in zip(names, by_label):
                        reasons += _few(k, "image", name)
                    n_neg = None
                elif by_label is not None:
                    names = list(label_names) if len(label_names) == len(by_label) else [
                        f"finding {j + 1}" for j in range(len(by_label))]
                    for name, k in zip(names, by_label):
                        reasons += _few(k, "positive", name) + _few(n - k, "negative", name)
                    n_pos, n_neg = min(by_label), n - max(by_label)
                else:   # binary; a multilabel record that predates the per-finding counts: summed over findings
                    labels_per_image = max(1, len(label_names)) if kind == "multilabel" else 1
                    n_neg = None if n_pos is None else labels_per_image * n - n_pos
                    if n_pos is not None:
                        reasons += _few(n_pos, "positive", None) + _few(labels_per_image * n - n_pos, "negative", None)
                if n_pos is None and n < 2 * MIN_CLASS_COUNT:
                    reasons.append(f"only {n} images")
                for metric, est in (("AUROC", g.auroc), ("accuracy", g.accuracy)):
                    if est.value is not None and est.low is not None and est.low == est.high:
                        reasons.append(f"{metric} interval of zero width ({est.low:.3f} in every redraw)")
                if reasons:
                    out.append(GroupFlag(run_id=r.run_id, attribute=attribute, group=group, n=n, n_positive=n_pos,
                                         n_negative=n_neg, reasons=reasons))
    return out


def compare_runs(records: Sequence[RunRecord], predictions: Mapping[str, Predictions], *, kind: str,
                 label_names: Sequence[str], n_resamples: int = 1000, seed: int = 0,
                 confidence: float = 0.95, interval: Interval = "percentile", ordinal: bool = False) -> Comparisons:
    """The study's comparisons, from run records and their loaded predictions (``run_id ->`` what
    :func:`~dpmed.evaluation.predictions.load_predictions` returns). Pure: no file is read or written. ``interval``:
    the study's ``evaluation.interval``, which the runs' own intervals were drawn with (the differences here are
    percentile intervals either way), as the definitions say. ``ordinal``: the classes are ordered grades (the
    dataset's ``ordinal``), which adds the quadratic-weighted kappa differences and kappa over seeds."""
    own = "each run's own AUROC interval is BCa" if interval == "bca" else "as is each run's own AUROC interval"
    notes: list[str] = []
    unit = _bootstrap_unit(records, notes)
    ordinal = ordinal and kind == "multiclass"
    rows = _differences(records, predictions, kind, label_names, n_resamples, seed, confidence, unit, notes, ordinal)
    if not any(r.mechanism == "none" for r in records):
        notes.append("no non-private arm: no AUROC differences")
    graded = {} if not ordinal else {
        "kappa_quadratic_difference": "ordinal grades: private minus non-private (same seed) quadratic-weighted "
                                      "kappa of the argmax grades (Cohen 1968; weights (i - j)^2 / (K - 1)^2), "
                                      "on the same redraws with the same interval and p-value as "
                                      "auroc_difference; by_value's is cut to [-2, 2], what a difference of two "
                                      "kappas can be",
        "test_kappa_quadratic": "metrics_by_value's quadratic-weighted kappa of each arm value's runs, its interval "
                                "cut to [-1, 1], the range of a kappa"}
    return Comparisons(
        definitions={
            "auroc_difference": "private minus non-private test AUROC (same seed), paired bootstrap over the same "
                                "seeded test redraws (of bootstrap_unit: patients, each with all of their images, "
                                "or images): the percentile interval of the redrawn differences, which the "
                                f"two-sided bootstrap p-value inverts ({own}), "
                                "p at least p_floor = 2 / (R + 1)",
            "sensitivity_difference": "private minus non-private (same seed) share of positive test images decided "
                                      "positive, each model at its own validation-chosen (Youden) threshold; the "
                                      "same redraws",
            "specificity_difference": "the same for the share of negative test images decided negative",
            "accuracy_difference": "the same for accuracy (multiclass: argmax)",
            "by_value": "seeds of one arm value, each paired with its own seed: mean, std (ddof=1), min, max of the "
                        "differences (min to max is the seeds' range, not an interval: 3 seeds' range holds the true "
                        "mean 75% of the time), and low, high: the Student t interval of the mean at the study's "
                        "confidence, mean +- t(n - 1) std / sqrt(n) (scipy.stats.t) cut to [-1, 1], what a "
                        "difference can be, assuming independent seeds with roughly normal differences; with 3 seeds "
                        f"t is {student_t.ppf((1 + confidence) / 2, 2):.2f}, so it is wide, which is what 3 seeds can "
                        "tell; none for one seed (reason). An arm differs across seeds where it excludes 0; "
                        "significant_seeds counts seeds whose own test-set p < 0.05, which says nothing across seeds",
            "reference_at_chance": "true where the pair's non-private run (reference_run) has a test AUROC interval "
                                   "holding 0.5, chance (low <= 0.5 <= high): it may have learned nothing its test "
                                   "set can show, so the difference measures that more than privacy's cost and a "
                                   "private run can read as a gain; by_value's references_at_chance lists such "
                                   "references among an arm value's seeds. The report names them in its opening "
                                   "table by the same rule (holds_chance)",
            "run_flags": "runs that decide the same way for every test image, or (multiclass) never choose some "
                         "class, or whose test AUROC interval lies wholly below chance (0.5)",
            "group_flags": f"fairness groups with fewer than {MIN_CLASS_COUNT} positives or negatives (multilabel: "
                           f"in any one finding; multiclass: fewer than {MIN_CLASS_COUNT} images of any one class, "
                           f"or {2 * MIN_CLASS_COUNT} in all), or an interval of zero width",
            "metrics_by_value": "each arm value's own test metrics over its seeds (auroc, accuracy, and for a binary "
                                "task sensitivity and specificity at each run's validation-chosen threshold; none "
                                "where the task has no such metric) and its accounted eps (none where not finite): "
                                "mean, std, min, max and the Student t interval of the mean, as in by_value but "
                                "cut to [0, 1] (eps: not below 0)",
            "correlations": "Pearson r with two-sided p-value (scipy.stats.pearsonr); eps is the accounted eps; "
                            "none (with the reason) across a sweep of fewer than 3 distinct values",
            **graded,
        },
        n_resamples=int(n_resamples), bootstrap_seed=int(seed), bootstrap_unit=unit, confidence=float(confidence),
        auroc_differences=rows, by_value=_by_value(rows, records, confidence),
        correlations=correlate_runs(records, predictions, _references(records, predictions), kind=kind,
                                    label_names=label_names, notes=notes),
        notes=notes, run_flags=_run_flags(records, kind, label_names),
        group_flags=_group_flags(records, kind, label_names),
        metrics_by_value=_metrics_by_value(records, confidence, ordinal))
