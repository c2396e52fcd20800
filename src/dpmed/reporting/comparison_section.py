"""The report's comparisons across runs: each private run against the non-private one, with intervals.

The comparisons (the paired bootstrap AUROC difference of every private run against the non-private one, over
seeds, Pearson r across labels) are computed before rendering (`dpmed.comparisons`, from the runs' saved
predictions); this section only renders them. Every number carries its bootstrap interval, and p-values at the
bootstrap's floor are printed as "<= floor".
"""

from __future__ import annotations

from dpmed.comparisons import SIGNIFICANCE, Comparisons, Correlation, PairedDifference, SeedSummary
from dpmed.evaluation.summaries import Estimate
from dpmed.reporting.inputs import (ReportInputs, column_table, escape as _e, estimate_text as _est, p_text,
                                    r_and_p, range_text, signed_text, stacked, t_text)
from dpmed.reporting.sections import across_seeds, decision_rule

__all__ = ["comparison_section"]


def _r_with_p(entry: Correlation) -> str:
    """"+0.412 (p 0.03)", or "– (why)" where r is undefined (before: "– (p one variable is constant)")."""
    r, p = r_and_p(entry)
    return f"{r} (p {p})" if entry.r is not None else f"{r} ({p})" if p else r


def _difference_cell(d: PairedDifference | None) -> str:
    if d is None or d.value is None:
        return "<td class=num>–</td><td class=num>–</td>"
    return (f"<td class=num>{_est(Estimate(value=d.value, low=d.low, high=d.high), signed=True)}</td>"
            f"<td class=num>{p_text(d)}</td>")


def _seeds_interval(s: SeedSummary) -> str:
    """mean [t interval over seeds]; the mean alone where there is none (a comparisons.json that predates it)."""
    return _est(Estimate(value=s.mean, low=s.low, high=s.high), signed=True)


def _decisions_over_seeds(task: str, ordinal: bool = False) -> str:
    """Where the decisions' changes over seeds are: the opening table gives each with this table's t interval and
    range, in cases per 100 and with the same verdict in words; repeated here they would make a table too wide for
    a phone to tell a clinician nothing more."""
    what = "sensitivity and specificity" if task == "binary" else "accuracy"
    kappa = ", beside those of quadratic-weighted kappa" if ordinal else ""
    return (f"The {what} changes over seeds, with the same t interval and range, are in cases per 100 in the "
            f'opening table (<a href="#clinical">what each arm costs, in cases</a>){kappa}.')


def comparison_section(inputs: ReportInputs) -> str:
    comparisons: Comparisons = inputs.comparisons
    level = inputs.level
    data = inputs.resolved.dataset
    ordinal = data.task == "multiclass" and data.ordinal
    parts = []
    rows = [c for c in comparisons.auroc_differences if c.auroc_difference.p_value is not None]
    if rows:
        binary = data.task == "binary"
        extra: tuple[tuple[str, str], ...] = (
            (("sensitivity_difference", f"sensitivity ({_e(data.positive_class or 'label 1')})"),
             ("specificity_difference", f"specificity ({_e(data.negative_class or 'label 0')})")) if binary
            else (("accuracy_difference", "accuracy" + (" (argmax)" if data.task == "multiclass" else "")),))
        if ordinal:
            extra += (("kappa_quadratic_difference", "quadratic-weighted kappa"),)
        heads = "".join(f"<th>{name} difference</th><th>p</th>" for _, name in (("", "AUROC"), *extra))
        body = "".join(f"<tr><td>{_e(c.run_id)}</td><td class=run>{_e(c.reference_run)}</td>"
                       + _difference_cell(c.auroc_difference)
                       + "".join(_difference_cell(getattr(c, key)) for key, _ in extra) + "</tr>" for c in rows)
        decided = (f"{'sensitivity and specificity' if binary else 'accuracy'}"
                   + (" and the quadratic-weighted kappa of the grades" if ordinal else "")
                   + f" with each run deciding by {decision_rule(data)}")
        floor = next((c.auroc_difference.p_floor for c in rows if c.auroc_difference.p_floor), None)
        floor_text = ("" if floor is None else
                      f" With {comparisons.n_resamples} redraws the smallest p-value the bootstrap can give is "
                      f"{floor:.2g} (2 / (R + 1)); a difference that no redraw crossed is shown as p ≤ {floor:.2g}.")
        unit = "patients" if comparisons.bootstrap_unit == "patient" else "images"
        parts.append(f"<p>Each run minus the non-private run of the same seed, with the percentile interval of the "
                     f"paired bootstrap over the same redraws of the test {unit} [{level} CI] ("
                     + ("the runs' own intervals are BCa" if inputs.interval == "BCa" else "as are the runs' own")
                     + f") and the two-sided bootstrap p-value that inverts it; {decided}. The "
                     "interval of a difference is what says whether two arms differ; overlapping per-arm intervals "
                     f"do not.{floor_text}</p>"
                     + stacked(f"<table><tr><th>run</th><th>reference</th>{heads}</tr>{body}</table>"))
    multi = [b for b in comparisons.by_value if b.auroc_difference.n_seeds > 1]
    if multi:
        seed_counts = [b.auroc_difference.n_seeds for b in multi]
        body = "".join(f"<tr><td>{_e(b.label)}</td><td class=num>{_seeds_interval(b.auroc_difference)}</td>"
                       f"<td class=num>{_e(across_seeds(b.auroc_difference))}</td>"
                       f"<td class=num>{signed_text(b.auroc_difference.min)} to "
                       f"{signed_text(b.auroc_difference.max)}</td><td class=num>{b.auroc_difference.std:.3f}</td>"
                       f"<td class=num>{b.significant_seeds} of {b.auroc_difference.n_seeds}</td></tr>" for b in multi)
        parts.append("<p>Over seeds (training randomness, which the test-set bootstrap does not see), each seed "
                     f"paired with its own non-private run: the mean AUROC difference with its {level} Student t "
                     "interval over seeds (n - 1 degrees of freedom; it assumes independent seeds and roughly normal "
                     f"differences, and is wide with few seeds: {t_text(comparisons.confidence, seed_counts)}). An "
                     "arm value is lower or higher than the non-private arm across seeds only where that interval "
                     "excludes 0. The seeds' range is "
                     f"their spread, not an interval ({range_text(seed_counts)}, whatever the confidence), and "
                     "the count of seeds with a small p says how many single test sets showed a difference, not "
                     f"whether the arm differs across seeds. {_decisions_over_seeds(data.task, ordinal)}</p>"
                     + stacked(f"<table><tr><th>arm value</th><th>mean AUROC difference [{level} t interval over "
                               "seeds]</th><th>across seeds</th><th>seed range</th><th>std over seeds</th>"
                               f"<th>seeds with p &lt; {SIGNIFICANCE:g}</th></tr>{body}</table>"))
    labels = comparisons.correlations.auroc_drop_vs_label
    if labels:
        body = "".join(f"<tr><td>{_e(c.run_id)}</td><td class=num>{_r_with_p(c.drop_vs_positive_count)}</td>"
                       f"<td class=num>{_r_with_p(c.drop_vs_nonprivate_auroc)}</td></tr>" for c in labels)
        # the columns of the per-label AUROC table: findings, or classes one-vs-rest (`findings_section`)
        noun = {"multiclass": "class", "multilabel": "finding"}.get(data.task, "label")
        plural = "classes" if noun == "class" else f"{noun}s"
        parts.append(f"<p>Across {plural}, Pearson r between each {noun}'s AUROC drop (non-private minus private"
                     + ("; one-vs-rest" if noun == "class" else "") + f") and its positive test count (the test "
                     f"images of that {noun}), and its non-private AUROC (Tayebi Arasteh, Ziller et al. 2023):</p>"
                     + column_table(("run", "drop vs positives", "drop vs non-private AUROC"), body))
    if comparisons.notes:
        parts.append("<ul>" + "".join(f"<li>{_e(n)}</li>" for n in comparisons.notes) + "</ul>")
    if not parts:
        return ""
    return f'<h2 id="comparisons">Against the non-private run, with intervals</h2>{"".join(parts)}'
