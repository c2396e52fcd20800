"""The report's sections about every study: a warning of planned runs it lacks, summary, utility, local-DP examples,
provenance (the privacy cards, the study as a whole and reconstruction risk are `dpmed.reporting.privacy_section`'s).
Each is a function of :class:`~dpmed.reporting.inputs.ReportInputs` that returns HTML ("" where a study has nothing
for it)."""

from __future__ import annotations

import yaml

from dpmed.comparisons import SeedSummary
from dpmed.data.sample import names_text
from dpmed.evaluation.version import evaluated_by
from dpmed.folders import EXAMPLE_KEYS
from dpmed.mechanisms import PixelGaussianArm, PixelGaussianPlan
from dpmed.numbers import shape_text
from dpmed.records import DatasetSummary, RunRecord, Timing
from dpmed.released_size import describe_counts
from dpmed.reporting.clinical import ONE_SEED, WARNINGS, flag_count, flag_html
from dpmed.reporting.figures import (auroc_alt, auroc_versus_epsilon, ldp_examples, ldp_examples_alt, plotted,
                                     spans_seeds)
from dpmed.reporting.inputs import (METHODS, ReportInputs, embed_figure, eps_label, escape, estimate_text,
                                    is_reproduction, not_dp_text, p_text, read_figure_arrays, runs_text, signed_text,
                                    stacked, facts_table, t_text, undefined_redraws_flag)

__all__ = ["unfinished", "summary", "utility", "ldp_examples_section", "provenance", "decision_rule", "metric_label",
           "across_seeds"]


def decision_rule(data: DatasetSummary) -> str:
    """How a run's scores become decisions, in words: the validation-chosen Youden threshold, or argmax."""
    if data.task == "multiclass":
        return "the class with the highest score (argmax; no threshold)"
    if data.task == "multilabel":
        return "each finding's Youden threshold, chosen on the validation split"
    return "the Youden threshold chosen on the validation split"


def _measured(inputs: ReportInputs) -> str:
    data, ev = inputs.resolved.dataset, inputs.resolved.study.evaluation
    if data.task == "binary":
        pos, neg = data.positive_class, data.negative_class
        named = (f"<b>{escape(pos)}</b> cases found: {escape(pos)} is the positive class, label 1" if pos
                 else "positive cases (label 1) found; the dataset's class names are not recorded")
        cleared = f"{escape(neg)} cases cleared" if neg else "negative cases (label 0) cleared"
        what = (f"test AUROC, and accuracy, sensitivity (the share of {named}) and specificity (the share of "
                f"{cleared}) at {decision_rule(data)}")
    elif data.task == "multiclass":
        what = f"test AUROC (macro, one-vs-rest) and accuracy of {decision_rule(data)}"
        if data.ordinal:
            what += ", and quadratic-weighted kappa of the ordered grades"
    else:
        what = f"test AUROC (macro over findings) and accuracy at {decision_rule(data)}"
    off = []      # said, so that a reader does not look for a section that was never computed
    if ev.fairness is None:
        off.append("fairness across sex and age (<code>evaluation.fairness</code> is null)")
    if ev.explanations is None:
        off.append("Grad-CAM explanations and their faithfulness (off by default: set "
                   "<code>evaluation.explanations</code>, as configs/interpretability.yaml does)")
    return (f"{what}; {inputs.level} {inputs.interval} intervals from {ev.bootstrap_resamples} paired bootstrap "
            f"redraws of {inputs.redrawn} (bootstrap seed {ev.bootstrap_seed}). Definitions: {METHODS} (in the dpmed "
            "repository), sec. 4" + (f". Not computed: {'; '.join(off)}" if off else ""))


def across_seeds(s: SeedSummary) -> str:
    """What the t interval over seeds supports: lower or higher than the non-private arm where it excludes 0."""
    if s.low is None or s.high is None:         # none or both (seed_summary)
        return s.reason or "no interval over seeds"
    if not s.excludes_zero:
        return "not shown (interval holds 0)"
    return "lower" if s.high < 0 else "higher"


def _reading(inputs: ReportInputs) -> str:
    """A plain-language summary of the trade-off, from the numbers alone: every other run against the
    non-private run of its own seed (paired where predictions allow, never against a mean over seeds); a run that
    is not DP says why, from its card."""
    records, level = inputs.records, inputs.level
    references: dict[int, tuple[RunRecord, float]] = {}       # per seed, its non-private run and that run's AUROC
    for r in records:
        if r.mechanism == "none" and (auroc := r.estimate("test_auroc").value) is not None:
            references.setdefault(r.seed, (r, auroc))
    if not references:
        return ("<p>This study has no non-private arm with a defined AUROC, so the cost of privacy has no baseline "
                "here.</p>")
    parts = ["Without privacy the model reaches a test AUROC of "
             + "; ".join(f"{estimate_text(r.estimate('test_auroc'))}"
                         + (f" (seed {seed})" if len(references) > 1 else "")
                         for seed, (r, _) in sorted(references.items())) + "."]
    paired = {d.run_id: d for d in inputs.comparisons.auroc_differences}
    for r in records:
        if r.mechanism == "none":
            continue
        e = r.estimate("test_auroc")
        why = not_dp_text(r.privacy)      # a not-DP run says why, and is not said to be "with privacy"
        if why is None:
            head = f"{escape(r.run_id)} ({escape(eps_label(r.privacy))})"
        else:                             # a reproducible-mode run's accounted eps, after why it does not hold
            accounted = ("" if r.privacy.epsilon is None else
                         f"; as accounted: {eps_label(r.privacy.model_copy(update={'is_dp': True}))}")
            head = f"{escape(r.run_id)} ({escape(why + accounted)})"
        than = "without privacy" if why is None else "the non-private run"
        if e.value is None:
            parts.append(f"{head}: test AUROC undefined (one class only among its scores or labels).")
            continue
        d = paired.get(r.run_id)
        ref = references.get(r.seed)
        if d is not None and d.auroc_difference.value is not None:
            a = d.auroc_difference
            if a.low is not None and a.high is not None and a.high < 0:
                verdict = f"the paired interval of the difference lies below 0: lower than {than}"
            elif a.low is not None and a.low > 0:
                verdict = "the paired interval of the difference lies above 0"
            else:
                verdict = "the paired interval of the difference includes 0"
            interval = "" if a.low is None else f" [{signed_text(a.low)}, {signed_text(a.high)}], p {p_text(a)}"
            parts.append(f"{head}: {e.value:.3f}, {signed_text(a.value)} against {escape(d.reference_run)} (same seed; "
                         f"paired {level} CI{interval}); {verdict}.")
        elif ref is not None:
            ref_run, ref_auroc = ref
            b = ref_run.estimate("test_auroc")
            verdict = ("its whole interval lies below that of its seed's non-private run"
                       if e.high is not None and b.low is not None and e.high < b.low
                       else "its interval overlaps that of its seed's non-private run")
            parts.append(f"{head}: {e.value:.3f} ({signed_text(e.value - ref_auroc)} against "
                         f"{escape(ref_run.run_id)}, same seed; no saved predictions to pair); {verdict}.")
        else:
            parts.append(f"{head}: {e.value:.3f}; no non-private run of seed {r.seed} to compare with.")
    note = ("A difference is read from its paired interval; per-arm intervals that overlap show neither that two "
            "arms are equal nor that they differ.")
    if len({r.seed for r in records}) == 1:
        note += " " + ONE_SEED
    else:
        # each line's verdict is one seed's test set; three seeds each "lower" can still leave the arm's mean over
        # seeds undecided, and a summary of per-seed verdicts alone read as the arm's
        over = [f"{escape(b.label)}: {escape(across_seeds(b.auroc_difference))}"
                for b in inputs.comparisons.by_value if b.auroc_difference.n_seeds > 1]
        note += (" Each line above is one seed's run: its verdict covers the redraws of that seed's test set, not "
                 "the chance in training that other seeds draw differently.") + (
                     f" Across seeds, by the {level} t interval over seeds of the AUROC change (the opening table): "
                     + "; ".join(over) + "." if over else "")
    items = "".join(f"<li>{part}</li>" for part in parts[1:])
    return f"<p>{parts[0]}</p>" + (f'<ul class="reading">{items}</ul>' if items else "") + f"<p>{note}</p>"


def _stated_by_delta(inputs: ReportInputs) -> list[str]:
    """The local-DP Gaussian runs whose delta is the default read off the exact number of training images
    (min(1e-5, 1 / (10 N)): 1 / (10 N) above 10,000 images): their run.json states N. Local DP takes that number as
    public (each image is released on its own), so the plan may; the summary must not then call it private."""
    arms = {a.name: a for a in inputs.resolved.study.arms}
    return [p.run_id for p in inputs.resolved.runs
            if isinstance(p.privacy, PixelGaussianPlan) and isinstance(arm := arms.get(p.arm), PixelGaussianArm)
            and arm.delta is None and p.privacy.delta < 1e-5]


def _sizes(data: DatasetSummary, stated_by: list[str] | None = None, *, reproducible: bool = False) -> str:
    """The splits' sizes; the training set's only as its DP counts where DP-SGD runs planned from them, and where
    a local-DP run's default delta states the exact count (``stated_by``), that it does."""
    if data.n_train is not None or data.size_epsilon is None:     # a DP count comes with its eps (DatasetSummary)
        return (f"{data.n_train} / {data.n_val} / {data.n_test} train / validation / test images "
                f"({data.n_train_patients} training patients)")
    counts = escape(describe_counts(data.released_sizes, data.size_epsilon, symbols=True, reproducible=reproducible))
    private = ("the exact size is private" if not data.synthetic else
               "a generated dataset's exact size follows from its n_images all the same, and protects no one")
    if stated_by and not data.synthetic:
        private = (f"the exact size is not written, except that the default δ of the local-DP "
                   f"run{'s' if len(stated_by) > 1 else ''} {runs_text(list(stated_by))}, 1 / (10 N) above 10,000 "
                   "images, gives the number of training images N (local DP takes it as public; set the arm's "
                   "delta to keep it out)")
    return f"in training {counts}: {private}; {data.n_val} / {data.n_test} validation / test images"


def unfinished(inputs: ReportInputs) -> str:
    """A warning at the top where runs the study plans are not in the report (failed, interrupted or not yet run),
    and one where finished runs of the folder are not in the study file any more: without them, an arm listed in
    the summary, or a run whose model sits in runs/, its eps counted in the study's, could be missing from every
    table unsaid."""
    shown = {r.run_id for r in inputs.records}
    missing = [p.run_id for p in inputs.resolved.runs if p.run_id not in shown]
    planned = {p.run_id for p in inputs.resolved.runs}
    totals = inputs.resolved.study_privacy
    left = sorted({*totals.dp_sgd_runs, *totals.not_private, *totals.local_dp} - planned)
    flags = ""
    if missing:
        flags += (f'<div class="flag">⚠ {len(missing)} of the {len(inputs.resolved.runs)} runs this study plans are '
                  f"not in this report: they have not finished (failed, interrupted or not yet run): "
                  f"{runs_text(missing)}. <code>dpmed status</code> on the study folder says which and why; the "
                  "same <code>dpmed run</code> again trains them and rewrites this report.</div>")
    cut = inputs.folder.interrupted_releases()
    if cut:
        names = sorted({p.name for paths in cut.values() for p in paths})
        flags += (f'<div class="flag">⚠ The release of {runs_text(list(cut))} was cut short: '
                  f"{escape(', '.join(names))} lie in runs/&lt;run&gt;/ without its run.json, so no ε of this study "
                  "covers them, and this report holds none of their numbers. Do not share runs/ as it is: the next "
                  "<code>dpmed run</code> of this study deletes these files, and runs again those it still plans."
                  "</div>")
    if left:
        flags += (f'<div class="flag">⚠ {len(left)} finished run(s) in this folder are no longer in the study file, '
                  f"so they are in no table of this report: {runs_text(left)}. Their models and records are still "
                  "in runs/ beside the others, and the study's privacy as a whole still counts them (\"The study as "
                  "a whole\"): delete their folders to withdraw them, or list their arms again to table them.</div>")
    return flags


def summary(inputs: ReportInputs) -> str:
    study, data = inputs.resolved.study, inputs.resolved.dataset
    arms = ", ".join(f"{a.name} ({a.mechanism})" for a in study.arms)
    synthetic = ('<div class="note">The data are the <b>phantom</b> chest X-rays embedded in dpmed: a synthetic '
                 "teaching and testing dataset. These numbers show how the tool works, not how a clinical model "
                 "behaves.</div>") if data.synthetic else ""
    classes = ""
    if data.label_names:
        classes = (f"; {'findings' if data.task == 'multilabel' else 'classes'} {escape(names_text(data.label_names))}"
                   if data.task != "binary" else
                   f"; positive class <b>{escape(data.positive_class)}</b> (label 1), negative "
                   f"{escape(data.negative_class)} (label 0)")
        if data.ordinal:
            classes += " (ordered grades)"
    cohort = study.data.patients     # the study's data one cohort of the release (a simulated site): which one
    cohort_text = "" if cohort is None else f" (only {escape(cohort.selection().describe())})"
    sizes = _sizes(data, _stated_by_delta(inputs), reproducible=study.privacy_randomness == "reproducible")
    facts = [("dataset", f"{escape(data.name)}{cohort_text}: {sizes}; images of shape "
                         f"{shape_text(data.image_shape)}, task {escape(data.task)}{classes}"),
             ("model", escape(study.model.name)), ("arms", escape(arms)),
             ("seeds", escape(", ".join(str(s) for s in study.seeds))), ("measured", _measured(inputs))]
    return f"""<h2 id="summary">Summary</h2>
{facts_table(facts, "The study: its data, model, arms, seeds and measures")}
{synthetic}{_older_methods(inputs)}{_reading(inputs)}{flag_count(inputs, [r.run_id for r in inputs.records])}"""


def _older_methods(inputs: ReportInputs) -> str:
    """A note where runs were evaluated by another version of dpmed's evaluation methods than this report's (a folder
    an older dpmed finished, reported without being resumed): their numbers are not computed as this report
    describes, nor like the other runs'. A resumed study evaluates them again from their released models
    (`dpmed.evaluation.version`); a report alone recomputes nothing."""
    other = {r.run_id: evaluated_by(r.evaluation_version) for r in inputs.records}
    other = {run_id: why for run_id, why in other.items() if why}
    if not other:
        return ""
    reasons = "; ".join(dict.fromkeys(other.values()))
    return (f'<div class="note">{len(other)} of {len(inputs.records)} runs were {escape(reasons)}: '
            f"{escape(', '.join(other))}. Their numbers are not computed as this report describes, nor like the "
            "other runs'. Run the study again with the same study file and output folder: it evaluates them again "
            "from their released models, without training and without spending privacy.</div>")


def metric_label(metric: str, data: DatasetSummary) -> str:
    """A metric's name in words (HTML), without its split: "auroc" -> "AUROC", "sensitivity" -> "sensitivity
    (pneumonia found)". The utility table and the private report's training-set metrics share them, so a reader
    finds one number under one name in both (the private report showed the raw key ``train_auroc``)."""
    words = {"auroc": "AUROC", "accuracy": "accuracy" + (" (argmax)" if data.task == "multiclass" else ""),
             "sensitivity": f"sensitivity ({escape(data.positive_class or 'label 1')} found)",
             "specificity": f"specificity ({escape(data.negative_class or 'label 0')} cleared)",
             "kappa_quadratic": "quadratic-weighted kappa"}
    return words.get(metric, escape(metric.replace("_", " ")))


def _metric_columns(inputs: ReportInputs) -> list[tuple[str, str]]:
    """(metric, column head) of the utility table: the task's metrics that some run has."""
    data = inputs.resolved.dataset
    columns = [("test_auroc", f"test {metric_label('auroc', data)} [{inputs.level} CI]"),
               ("test_accuracy", metric_label("accuracy", data))]
    if data.task == "binary":
        columns += [("test_sensitivity", metric_label("sensitivity", data)),
                    ("test_specificity", metric_label("specificity", data)),
                    ("threshold", f"threshold (on the {escape(data.positive_class or 'label 1')} score, chosen on "
                                  "validation)")]
    columns.append(("test_kappa_quadratic", metric_label("kappa_quadratic", data)))
    return [(m, head) for m, head in columns if any(m in r.metrics for r in inputs.records)]


def _threshold_text(r: RunRecord) -> str:
    """A binary run's decision threshold: near 1 as "1 − 0.00023" (and near 0 to two figures), where three decimals
    would read 1.000 and hide that the model decides on its most confident scores alone."""
    t = r.estimate("threshold").value
    if t is None:
        return "–"
    if 0.999 < t < 1:
        return f"1 − {1 - t:.2g}"
    return f"{t:.2g}" if 0 < t < 0.001 else f"{t:.3f}"


def _seed_counts(records) -> list[int]:
    """How many seeds with a defined test AUROC each configuration's point in the figure has (its t interval's n)."""
    counts: dict[str, int] = {}
    for r in records:
        if r.estimate("test_auroc").value is not None:
            counts[r.plan.label] = counts.get(r.plan.label, 0) + 1
    return list(counts.values())


def _figure_caption(inputs: ReportInputs) -> str:
    """The AUROC-versus-eps figure's caption. In a multi-seed study it says what a point and its bar are (a
    configuration's mean and t interval over seeds, not a run's interval): one seed's figure draws intervals, and a
    reader would take the bars for them. It names the runs the figure has no point for, and why: no eps to place
    them at (not DP, with the card's reason), or an undefined AUROC. The non-private runs are its line and band."""
    no_eps, undefined = [], []
    for r in inputs.records:
        if r.mechanism == "none" or plotted(r):
            continue
        if r.estimate("test_auroc").value is None:
            undefined.append(escape(r.run_id))
        else:
            no_eps.append(f"{escape(r.run_id)} ({escape(not_dp_text(r.privacy) or 'no ε on its card')})")
    parts = ([f"runs with no ε to place them at: {'; '.join(no_eps)}"] if no_eps else []) + \
        ([f"runs whose test AUROC is undefined: {', '.join(undefined)}"] if undefined else [])
    seeds = (f"Each point is the mean test AUROC over a configuration's seeds, its bar the {inputs.level} Student t "
             "interval of that mean over the seeds (it assumes independent seeds, roughly normal; wide with few: "
             f"{t_text(inputs.resolved.study.evaluation.confidence, _seed_counts(inputs.records))}) and the faint "
             "dots the seeds themselves, whose spread is their range, not an "
             "interval (the non-private line and band: their mean and t interval); each run's own interval is in the "
             "table below." if spans_seeds(inputs.records) else "")
    left_out = f"Not in the figure (the table below has them): {'. And '.join(parts)}." if parts else ""
    text = " ".join(t for t in (seeds, left_out) if t)
    return f"<figcaption>{text}</figcaption>" if text else ""


def _auroc_cell(r: RunRecord) -> str:
    """A run's test AUROC with its interval, and how many redraws left it undefined where that is many: the interval
    then describes only the redraws that drew both classes (on a test set of a few patients, [1.000, 1.000] where
    half the redraws had no value), which the terminal warned of in passing and the table did not say."""
    # a count not held as a number (text, in a run.json written elsewhere) counts nothing to compare with the share
    undefined, resamples = (v if isinstance(v := r.metrics.get(key), (int, float)) else 0
                            for key in ("test_auroc_undefined_redraws", "n_resamples"))
    return estimate_text(r.estimate("test_auroc")) + undefined_redraws_flag(
        undefined, resamples, "in these redraws of the test set one class only was drawn; the interval uses the "
        "others and may be too narrow")


def utility(inputs: ReportInputs) -> str:
    confidence = inputs.resolved.study.evaluation.confidence
    figure = embed_figure(auroc_versus_epsilon(inputs.records, confidence=confidence),
                          auroc_versus_epsilon(inputs.records, confidence=confidence, narrow=True),
                          inputs.folder.root / "auroc_vs_epsilon.png", auroc_alt(inputs.records))
    columns = _metric_columns(inputs)
    badges = {"one_class": "one decision for all", "unused_classes": "classes never chosen",
              "constant_labels": "one decision for all", "below_chance": "below chance"}
    flagged: dict[str, str] = {}
    for f in inputs.comparisons.run_flags:       # every badge of a run: one decision for all can be below chance too
        badge = badges.get(f.kind, "see below")
        if badge not in flagged.get(f.run_id, "").split(", "):
            flagged[f.run_id] = f"{flagged[f.run_id]}, {badge}" if f.run_id in flagged else badge
    rows = "".join(
        f"<tr><td>{escape(r.run_id)}"
        + (f' <span class="flag" title="see the warning below the table">⚠ {flagged[r.run_id]}</span>'
           if r.run_id in flagged else "")
        + f"</td><td>{escape(r.mechanism)}</td><td class=eps>{escape(eps_label(r.privacy))}</td>"
        + "".join("<td class=num>" + (_threshold_text(r) if m == "threshold" else _auroc_cell(r) if m == "test_auroc"
                                      else estimate_text(r.estimate(m))) + "</td>" for m, _ in columns)
        + f"<td class=num>{_seconds(r.timing.train_seconds)}</td></tr>" for r in inputs.records)
    note = ("<p>The local-DP panel's ε is per image, for local DP's neighbours (any two images); the DP-SGD "
            "panel's is for adding or removing one training patient or image. They protect against different "
            "things, so the panels do not share an axis and their ε values are not to be compared.</p>"
            if any(r.privacy.epsilon_image is not None and r.privacy.is_dp for r in inputs.records)
            and any(r.mechanism == "dp_sgd" for r in inputs.records) else "")
    table = stacked(f"<table><tr><th>run</th><th>mechanism</th><th>ε</th>"
                    f"{''.join(f'<th>{head}</th>' for _, head in columns)}<th>training seconds</th></tr>{rows}</table>")
    return (f'<h2 id="utility">Utility</h2><figure>{figure}{_figure_caption(inputs)}</figure>{note}{table}'
            f'<div id="{WARNINGS}">{flag_html(inputs, [r.run_id for r in inputs.records])}</div>')


def ldp_examples_section(inputs: ReportInputs) -> str:
    """Original versus perturbed images for each run with an image mechanism (the visual point of Singh et al.
    2020, 000_56c2431ae4df8d10.txt): local DP, and the not-DP reproductions of flawed ones, named as such."""
    rows, not_dp, reproductions = [], [], False
    by_id = {r.run_id: r for r in inputs.records}
    loaded, unread = read_figure_arrays(((r.run_id, inputs.folder.run(r.run_id).examples) for r in inputs.records),
                                        EXAMPLE_KEYS, "the local-DP examples", inputs.folder)
    for run_id, arrays in loaded:
        r = by_id[run_id]
        rows.append((f"{r.run_id}\n{eps_label(r.privacy)}", arrays["original"], arrays["perturbed"]))
        why = not_dp_text(r.privacy)       # each run's own reason, from its card: not all of them reproductions
        if why is not None:
            not_dp.append(f"{r.run_id}: {why}")
            reproductions |= is_reproduction(r.privacy)
    if not rows:
        return unread and f'<h2 id="ldp-examples">Local DP: what the released images look like</h2>{unread}'
    figure = embed_figure(ldp_examples(rows), ldp_examples(rows, narrow=True),
                          inputs.folder.root / "ldp_examples.png", ldp_examples_alt(rows))
    heading = "Local DP" + (" and its not-DP reproductions" if reproductions else "")
    which = f" ({'; '.join(not_dp)})" if not_dp else ""
    return (f'<h2 id="ldp-examples">{heading}: what the released images look like</h2><p>The same test images '
            f"before (top row) and after each run's image mechanism{escape(which)}. Each run applied its mechanism "
            "to its training images only; test images are shown here so the report contains no training image. "
            f"Visual unrecognisability is not a privacy guarantee: read the ε on each card.</p>{figure}{unread}")


def _seconds(value: float | None) -> str:
    """A wall time, or where a private one is (`dpmed.records.Timing`: a DP-SGD run's is a statistic of the training
    set, and a run's beside others carries their load)."""
    if value is not None:
        return f"{value:.1f}"
    return ('<span title="a DP-SGD run\'s time grows with the patients or images Poisson sampling drew, which no '
            'ε covers; a run trained beside others took as long as their load made it">private</span>')


def _resumed(timing: Timing) -> str:
    """The step a run resumed from, with its unit ("step 28"; "epoch 2" in a record of a run without DP-SGD that an
    older dpmed wrote), "–" for one trained in one go, or where one whose wall time is private is (it depends on
    it). A bare number was an epoch for one run and a step for the next in the same column."""
    if timing.resumed_from is not None:
        return escape(timing.resumed_at or "–")
    return ('<span title="how far a run had come when it was stopped depends on its wall time, which is private: a '
            'DP-SGD run\'s, or a run\'s trained beside others">private</span>')


def _other_versions(inputs: ReportInputs) -> tuple[dict[str, str], str]:
    """The versions most runs were written by, and a warning naming the runs written by others (an upgrade between
    two `dpmed run`s of one folder, or Ray workers with other libraries) with what differs; "" where all agree."""
    groups: dict[tuple[tuple[str, str], ...], list[str]] = {}
    for r in inputs.records:
        groups.setdefault(tuple(sorted(r.versions.items())), []).append(r.run_id)
    ordered = sorted(groups.items(), key=lambda group: -len(group[1]))
    versions = dict(ordered[0][0]) if ordered else {}
    lines = []
    for key, run_ids in ordered[1:]:
        theirs = dict(key)
        differ = [f"{name} {theirs.get(name, '(not recorded)')}" for name in sorted({*versions, *theirs})
                  if theirs.get(name) != versions.get(name)]
        lines.append(f"<li>{escape(', '.join(run_ids))}: {escape('; '.join(differ))}</li>")
    if not lines:
        return versions, ""
    return versions, (f'<p class="flag">⚠ Not every run was written by the same versions: {len(ordered[0][1])} of '
                      f"{len(inputs.records)} by those below, the others by</p><ul>{''.join(lines)}</ul>")


def provenance(inputs: ReportInputs) -> str:
    versions, others = _other_versions(inputs)
    timing = "".join(f"<tr><td>{escape(r.run_id)}</td><td class=num>{_seconds(r.timing.train_seconds)}</td>"
                     f"<td class=num>{_seconds(r.timing.total_seconds)}</td><td>{escape(r.timing.device)}</td>"
                     f"<td class=num>{r.timing.threads}</td><td class=num>{_resumed(r.timing)}</td></tr>"
                     for r in inputs.records)
    resolved = yaml.safe_dump(inputs.resolved.model_dump(mode="json"), sort_keys=False)
    # No date: when the report was written tells how long the DP-SGD runs before it took (`dpmed.records.Timing`).
    return (f'<h2 id="provenance">Provenance</h2><p>Written by dpmed {escape(versions.get("dpmed", ""))}.</p>{others}'
            + facts_table(((escape(k), escape(v)) for k, v in versions.items()), "Versions that wrote the runs")
            + "<p>Wall time per run (seconds; a resumed run counts only its last session; a DP-SGD run's "
            "is in the private report: it grows with what Poisson sampling drew from the training set, which no ε "
            "covers; so is that of a run trained beside others, which carries their load):</p>"
            + stacked("<table><tr><th>run</th><th>training</th><th>total</th><th>device</th><th>threads</th>"
                      f"<th>resumed from</th></tr>{timing}</table>")
            + '<details class="resolved"><summary>The resolved study (study.yaml: every setting, every derived '
            f"value included)</summary><pre>{escape(resolved)}</pre></details>")
