"""The report's fairness section: for each attribute (sex, age bins) the test images' groups, compared.

What is shown (METHODS.md sec. 5): per-group AUROC and the accuracy parity difference of Tayebi Arasteh, Ziller et
al. 2023 (003_9a91354dc2d7e2df.txt; named as what it is), fairlearn's demographic parity and equalised odds
differences, the worst group, and Pearson r between log10 eps and each group's accuracy parity difference across a
sweep (computed before rendering: `dpmed.comparisons`). Every number carries its bootstrap interval (percentile, BCa
where the study asks for it, or a band: `dpmed.evaluation.fairness`); small groups and intervals of zero width are
flagged (`dpmed.comparisons.GroupFlag`).
"""

from __future__ import annotations

from typing import Callable, Collection, Sequence

from dpmed.comparisons import MIN_CLASS_COUNT
from dpmed.evaluation.fairness import named_groups, uncompared_groups
from dpmed.evaluation.summaries import AttributeFairness, Estimate, Fairness, GroupFairness, Spread
from dpmed.records import RunRecord
from dpmed.reporting.figures import not_dp_as_run
from dpmed.reporting.inputs import (METHODS, ReportInputs, column_table, embed_figure, eps_label, escape as _e,
                                    estimate_text as _est, not_computed_text, r_and_p, stacked,
                                    undefined_redraws_flag)
from dpmed.reporting.sections import decision_rule
from dpmed.reporting.study_figures import group_estimates

__all__ = ["fairness_section"]


def _groups_alt(name: str, groups: Sequence[str], series: Sequence[tuple[str, Sequence[Estimate | None]]],
                level: str, not_dp: Collection[int] = ()) -> str:
    """What a fairness figure shows, in words: its axes, and each run's test AUROC per group, from the values it
    plots ("AUROC by age" alone named the figure, not what it says); which markers are hollow (``not_dp``: the
    series not DP as run), where some are."""
    runs = "; ".join(f"{label}: " + ", ".join(f"{g} {'undefined' if e is None or e.value is None else f'{e.value:.3f}'}"
                                               for g, e in zip(groups, estimates))
                     for label, estimates in series)
    hollow = ", hollow for a run not DP as run" if not_dp else ""
    return (f"Test AUROC (with {level} intervals) for each {name} group ({', '.join(groups)}), one marker per "
            f"run{hollow}: {runs}.")


def _undefined_share(spread: Spread | None, resamples: int) -> str:
    """Where many redraws left a statistic over the groups undefined (a tiny group absent, or with one class), how
    many: the interval describes only the others (`dpmed.evaluation.fairness`), as the utility metrics warn above
    the same share."""
    undefined = (spread.undefined_redraws if spread is not None else None) or 0
    return undefined_redraws_flag(undefined, resamples, "in these redraws a compared group was absent or lacked a "
                                  "class the statistic needs; the interval uses the others")


def _group(entry: AttributeFairness, group: str, metric: str) -> Estimate | None:
    """One group's ``metric`` (None where the run has no such group)."""
    g = entry.groups.get(group)
    return None if g is None else getattr(g, metric)


def _positives(g: GroupFairness) -> str:
    """A group's positives in words, after its size: a multilabel task's per finding (a sum over findings would
    count an image once for each of its findings); a multiclass task's images per class (it has no n_positive)."""
    if g.n_positive_by_label is not None:
        what = "images per class" if g.n_positive is None else "positives per finding"
        return f"{what}: " + ", ".join(str(k) for k in g.n_positive_by_label)
    return "" if g.n_positive is None else f"{g.n_positive} positive"


def _one_group(name: str, entries: list[AttributeFairness], bins: list[float], groups: list[str]) -> str:
    """A warning where every compared test image falls in one group of ``name`` (all ages in one bin): the worst
    group is then that group and every parity difference is undefined, so the tables compare nothing; what to change
    to compare groups. ``entries``: each run's numbers for ``name``; ``bins``: the first run's age bins."""
    compared = [g for g in groups if g not in uncompared_groups(name, bins)]
    if len(compared) != 1:
        return ""
    group = compared[0]
    # from the first run that has it: ``groups`` gathers every run's, as the sizes line beside this does
    n = next(e.groups[group].n for e in entries if group in e.groups)
    change = ("To compare age groups, give the study file's evaluation.fairness.age_bins edges that split these "
              f"test images (now [{', '.join(f'{b:g}' for b in bins)}])." if name == "age" else
              f"To compare groups of {_e(name)}, test on images of more than one (or leave {_e(name)} out of the "
              "study file's evaluation.fairness.attributes).")
    return (f'<div class="flag">⚠ All {n} test images compared by {_e(name)} fall in one group, {_e(group)}: '
            f"fairness by {_e(name)} compares nothing here. The worst group is that group, and each parity "
            f"difference (a group minus the others) is undefined (–). {change}</div>")


def _fairness_attribute(name: str, runs: list[tuple[RunRecord, Fairness, AttributeFairness]],
                        inputs: ReportInputs) -> str:
    """The section's tables and figure for attribute ``name``; ``runs``: each run whose numbers for it are computed,
    with its fairness block and those numbers."""
    level = inputs.level
    entries = [e for _, _, e in runs]
    fairness = runs[0][1]                 # the first run's block: the age bins and thresholds named below
    groups = list(dict.fromkeys(g for e in entries for g in e.groups))
    first = entries[0].groups
    flags = [f for f in inputs.comparisons.group_flags if f.attribute == name]
    flagged = {(f.run_id, f.group): f for f in flags}
    small = {f.group for f in flags if any(reason.startswith("only") for reason in f.reasons)}
    sizes = ", ".join(f"{_e(g)}: {first[g].n}" + (f" ({positives})" if (positives := _positives(first[g])) else "")
                      + (" ⚠ small" if g in small else "")
                      for g in groups if g in first)
    series = [(f"{r.run_id}: {eps_label(r.privacy)}", [_group(e, g, "auroc") for g in groups])
              for r, _, e in runs]
    ticks = [f"{g} *" if g in small else g for g in groups]
    title = f"AUROC by {name} ({level} intervals)" + ("; * small group" if small else "")
    not_dp = {k for k, (r, _, _) in enumerate(runs) if not_dp_as_run(r)}
    figure = embed_figure(group_estimates(ticks, series, ylabel="test AUROC", title=title, not_dp=not_dp),
                          group_estimates(ticks, series, ylabel="test AUROC", title=title, narrow=True, not_dp=not_dp),
                          inputs.folder.root / f"fairness_{name}.png", _groups_alt(name, groups, series, level, not_dp))
    head = "".join(f"<th>{_e(g)}</th>" for g in groups)

    def warning_mark(title: str) -> str:
        # a title alone is no name for a screen reader (it said "warning sign" and no more): an image named by it
        return f' <span class="flag" title="{_e(title)}" role="img" aria-label="warning: {_e(title)}">⚠</span>'

    def warned(r: RunRecord, g: str, metric: str) -> bool:
        # a small group's every number, or a group of enough images where a warning concerns this run's ``metric``
        # ("accuracy interval of zero width"): the list above says so, and the cell, where a reader looks, did not
        return g in small or any(reason.startswith(f"{metric} interval")
                                 for reason in getattr(flagged.get((r.run_id, g)), "reasons", ()))

    def cell(r: RunRecord, e: AttributeFairness, g: str) -> str:
        mark = warning_mark("see the warnings above") if warned(r, g, "AUROC") else ""
        return f"<td class=num>{_est(_group(e, g, 'auroc'))}{mark}</td>"

    def worst_cell(f: Fairness, e: AttributeFairness) -> str:
        w = e.worst_group_auroc
        if w is None or w.group is None:     # no group's AUROC is defined, so no group is the worst
            return "<td>undefined: no named group's AUROC is defined</td>"
        mark = warning_mark("a small group: see the warnings above") if w.group in small else ""
        return (f"<td>{_e(w.group)}: {_est(w)}{mark}"
                + _undefined_share(w, f.n_resamples) + "</td>")

    auroc_rows = "".join(
        f"<tr><td>{_e(r.run_id)}</td><td class=eps>{_e(eps_label(r.privacy))}</td>"
        + "".join(cell(r, e, g) for g in groups) + worst_cell(f, e) + "</tr>"
        for r, f, e in runs)

    def per_group(metric: str, tail: Callable[[Fairness, AttributeFairness], str] = lambda f, e: "") -> str:
        # a small group's accuracy or parity reads as firm as a large one's (a narrow interval far from 0) unless
        # its cell, like its AUROC cell, carries the warning; a parity (the group minus the rest) with its sign
        signed = metric.endswith("_difference")

        def mark(r: RunRecord, g: str) -> str:
            return ("" if not warned(r, g, metric) else warning_mark("a small group: see the warnings above")
                    if g in small else warning_mark("see the warnings above"))
        return "".join(f"<tr><td>{_e(r.run_id)}</td>"
                       + "".join(f"<td class=num>{_est(_group(e, g, metric), signed=signed)}{mark(r, g)}</td>"
                                 for g in groups)
                       + tail(f, e) + "</tr>" for r, f, e in runs)

    def spreads(f: Fairness, e: AttributeFairness) -> str:
        # a small group that a spread compares (its parity defined; equalised odds leaves some out) can set it alone
        compared = [g for g in groups if g in small and (p := _group(e, g, "accuracy_parity_difference")) is not None
                    and p.value is not None]
        cells = []
        for s, left_out in ((e.demographic_parity_difference, []),
                            (e.equalized_odds_difference, e.equalized_odds_excluded_groups)):
            these = [g for g in compared if g not in left_out]
            mark = (warning_mark(f"spread over groups that include the small {', '.join(these)}: see the warnings "
                               "above") if these and s is not None and s.value is not None else "")
            cells.append(f"<td class=num>{_est(s)}{mark}{_undefined_share(s, f.n_resamples)}</td>")
        return "".join(cells)

    decided = any(_group(e, g, "demographic_parity_difference") is not None for e in entries for g in groups)
    excluded = entries[0].equalized_odds_excluded_groups          # the test set's groups: the same for every run
    several = len(fairness.thresholds or []) > 1                  # multilabel: a group may be left out for one label
    # Records written before the two differences counted their undefined redraws cannot flag a large share.
    uncounted = [r.run_id for r, _, e in runs
                 if any(s is not None and s.value is not None and s.undefined_redraws is None
                        for s in (e.worst_group_auroc, e.demographic_parity_difference, e.equalized_odds_difference))]
    reference = _e(entries[0].reference or "")
    warnings = ""
    if flags:
        by_group: dict[str, list] = {}
        for f in flags:
            by_group.setdefault(f.group, []).append(f)
        items = []
        shown = {r.run_id for r, _, _ in runs}
        for g, members in by_group.items():
            # each reason with exactly the runs it holds for: one run's interval of zero width is not another's
            by_reason: dict[str, list[str]] = {}
            for f in members:
                for reason in f.reasons:
                    by_reason.setdefault(reason, []).append(f.run_id)
            reasons = "".join(
                f"<li>{_e(reason)} ("
                + ("every run" if set(ids) == shown and len(ids) > 1 else
                   f"run{'s' if len(ids) > 1 else ''}: {', '.join(_e(i) for i in ids)}") + ")</li>"
                for reason, ids in by_reason.items())
            positives = _positives(first[g]) if g in first else ""
            items.append(f"<li><b>{_e(g)}</b> ({members[0].n} test images" + (f"; {positives}" if positives else "")
                         + f"):<ul>{reasons}</ul></li>")
        warnings = (f'<div class="flag">⚠ Read these groups\' numbers as anecdotes, not measurements. With fewer '
                    f"than {MIN_CLASS_COUNT} positives or negatives a group's AUROC moves in large steps from one "
                    "patient to the next, and an interval of zero width (e.g. 1.000 [1.000, 1.000]) means "
                    "every redraw gave the same value because the group is too small to vary, not that the value is "
                    f"certain.<ul>{''.join(items)}</ul></div>")
    worst = ("<p>The worst group's interval is not that group's own interval: in each redraw it takes the lowest "
             "AUROC over the groups, whichever group that is in that redraw, so it lies at or below the named "
             "group's interval (the bootstrap of a minimum). A redraw in which one of the groups drew a single "
             "class has no worst group and is left out of the interval.</p>")
    differences = ("<p>Over the groups, fairlearn's demographic parity difference (the largest minus the smallest "
                   "share of images decided positive) and equalised odds difference (the larger of the same spread "
                   "of the true-positive and of the false-positive rate) [" + level + " CI]. A redraw in which a "
                   "group is absent leaves the demographic parity difference undefined, one in which a group that "
                   "equalised odds compares is absent or lacks a class leaves that undefined; such redraws are left "
                   "out of the interval"
                   + (f". Equalised odds compares only the groups with both classes on test; left out"
                      f"{' (for at least one finding)' if several else ''}: {_e(', '.join(excluded))}"
                      if excluded else "") + ".</p>")
    if uncounted:
        differences += (f"<p>{_e(', '.join(uncounted))}: written by an earlier version of dpmed, which did not "
                        "count the redraws each summary over the groups left out, so a large share of them is not "
                        "flagged there.</p>")
    # a group the study names (an age bin, a sex) that no test image falls in has no column: said, not left unsaid
    absent = [g for g in named_groups(name, fairness.age_bins) if g not in groups]
    if absent:     # "<18" and ">=65" are groups the bins make, not bins
        what = (("an age group" if len(absent) == 1 else "age groups") + " of evaluation.fairness.age_bins"
                if name == "age" else "a sex")
        sizes += (f". No test image falls in {_e(', '.join(absent))} ({what}), so "
                  + ("it has" if len(absent) == 1 else "they have") + " no numbers here")
    return (f"<h3>By {_e(name)}</h3><p>Test images per group: {sizes}.</p>"
            f"{_one_group(name, entries, fairness.age_bins, groups)}{warnings}"
            f"<figure>{figure}</figure>"
            f"<p>Test AUROC per group [{level} CI], and the worst group (named groups with a defined AUROC):</p>"
            + stacked(f"<table><tr><th>run</th><th>ε</th>{head}<th>worst group</th></tr>{auroc_rows}</table>")
            + worst
            + f"<p>Test accuracy per group at the run's decision [{level} CI]:</p>"
            + stacked(f"<table><tr><th>run</th>{head}</tr>{per_group('accuracy')}</table>")
            + f"<p>Accuracy parity difference per group [{level} CI] ({reference}; the 'statistical parity difference' "
            f"of Tayebi Arasteh, Ziller et al. 2023, which compares accuracy)"
            + (", and over the groups fairlearn's demographic parity difference and equalised odds difference:</p>"
               if decided else ":</p>")
            + stacked(f"<table><tr><th>run</th>{head}"
                      + ("<th>demographic parity diff.</th><th>equalised odds diff.</th>" if decided else "")
                      + f"</tr>{per_group('accuracy_parity_difference', spreads if decided else lambda f, e: '')}"
                      "</table>")
            + (differences
               + f"<p>Demographic parity difference per group [{level} CI] ({reference}; the share of images "
               "decided positive):</p>"
               + stacked(f"<table><tr><th>run</th>{head}</tr>{per_group('demographic_parity_difference')}</table>")
               if decided else "")
            + _outside_note([(r, e) for r, _, e in runs], groups, level, inputs.interval))


def _outside_note(runs: list[tuple[RunRecord, AttributeFairness]], groups: list[str], level: str,
                  interval: str) -> str:
    """A note where some interval of the attribute's tables lies wholly on one side of its point (worst-group AUROC
    0.612 [0.501, 0.598]), which reads as an error but is what a bootstrap of such statistics can do. The
    two spreads' bands hold their points (`dpmed.evaluation.fairness`); records evaluated before they had bands may
    not. ``interval``: the study's interval for a group's AUROC ("percentile" or "BCa", `ReportInputs.interval`)."""
    def outside(est: Estimate | None) -> bool:
        return (est is not None and est.value is not None and est.low is not None and est.high is not None
                and not est.low <= est.value <= est.high)

    def shown(e: AttributeFairness) -> list[tuple[str, Estimate | None]]:
        return ([(f"{g} AUROC", _group(e, g, "auroc")) for g in groups]
                + [("worst-group AUROC", e.worst_group_auroc),
                   ("demographic parity difference", e.demographic_parity_difference),
                   ("equalised odds difference", e.equalized_odds_difference)]
                + [(f"{g} accuracy parity difference", _group(e, g, "accuracy_parity_difference")) for g in groups])
    cases = [(r.run_id, what, est) for r, e in runs for what, est in shown(e) if outside(est)]
    if not cases:
        return ""
    run_id, what, est = cases[0]
    several = len(cases) > 1
    example = _est(est, signed=what.endswith("accuracy parity difference"))    # a group minus the rest: signed
    return (f"<p>{len(cases)} interval{'s' if several else ''} in these tables lie{'' if several else 's'} wholly on "
            f"one side of {'their points' if several else 'its point'} (e.g. {_e(run_id)}'s {_e(what)} "
            f"{example}). " + (
                f"An interval is read off the redraws' values, not set around the point: the middle {level} of them "
                "(percentile), or for a group's AUROC the BCa quantiles, moved towards the side on which most "
                "redraws fall." if interval == "BCa" else
                f"A percentile interval is the middle {level} of the redraws' values, not a band around the point.")
            + " Each redraw's noise pushes a minimum over the groups (the worst group) down and "
            "a largest minus smallest (the two differences over the groups, in runs evaluated before they got bands) "
            "up, and a small group's value moves in large steps, so the redraws can all fall on one side of the "
            "value on the whole test set.</p>")


def fairness_section(inputs: ReportInputs) -> str:
    runs = [(r, f) for r in inputs.records if (f := r.fairness)]
    if not runs:
        return ""
    names = list(dict.fromkeys(a for _, f in runs for a in f.attributes))
    parts = []
    for name in names:
        ok = [(r, f, e) for r, f in runs if (e := f.ok(name))]
        if ok:
            parts.append(_fairness_attribute(name, ok, inputs))
        else:
            reason = next(f.attributes[name].reason or "" for _, f in runs if name in f.attributes)
            parts.append(f"<h3>By {_e(name)}</h3><p>Not applicable: {_e(reason)}</p>")
    corr = inputs.comparisons.correlations.epsilon_vs_accuracy_parity
    undefined = not_computed_text(corr, "groups") if corr else None
    if undefined:
        parts.append("<p>Pearson r between log10 ε and each group's accuracy parity difference across a DP-SGD "
                     f"sweep (Tayebi Arasteh, Ziller et al. 2023, Table 3): {_e(undefined)}.</p>")
    elif corr:
        rows = "".join(f"<tr><td>{_e(c.sweep)}</td><td>{_e(c.attribute)}</td><td>{_e(c.group)}</td>"
                       f"<td class=num>{r_and_p(c)[0]}</td><td class=num>{r_and_p(c)[1]}</td>"
                       f"<td class=num>{c.n}</td></tr>"
                       for c in corr)
        parts.append("<p>Pearson r between log10 ε and each group's accuracy parity difference across a DP-SGD "
                     "sweep, each run (every seed) a point. Tayebi Arasteh, Ziller et al. 2023 (Table 3) correlated "
                     "ε itself, over 0.29 to 7.89; here log10 ε, since over the decades a sweep may span the "
                     "largest ε alone would set r. A sweep of fewer than three ε values gets no r: across two, "
                     "r only says which of them is larger. Each p is its group's own, not corrected for the number "
                     "of groups tested.</p>" + column_table(("sweep", "attribute", "group", "r", "p", "n"), rows))
    threshold = (f"Each run's decisions: {decision_rule(inputs.resolved.dataset)} ({METHODS} sec. 4). "
                 f"Intervals: bootstrap over the same redraws of {inputs.redrawn} as the utility intervals, "
                 + ("BCa for a group's AUROC and accuracy and percentile for the parity differences and the worst "
                    "group" if inputs.interval == "BCa" else "percentile for each group's metrics and differences")
                 + "; a group's metric in a redraw uses the redrawn images of that group. The demographic "
                 "parity and equalised odds differences (largest minus smallest rate over the groups) instead take "
                 "their value plus or minus the redraws' largest move of a difference between two groups (the "
                 f"{inputs.level} quantile), floored at 0 and capped at 1 (no share differs by more): a percentile "
                 "interval of such a largest difference lies above 0 in nearly every test set even where the groups "
                 f"are alike ({METHODS} sec. 5).")
    return f'<h2 id="fairness">Fairness</h2><p>{threshold}</p>{"".join(parts)}'
