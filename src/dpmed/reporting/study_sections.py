"""The report's comparison, fairness and interpretability sections.

The comparisons across runs (the paired bootstrap AUROC difference of every private run against the non-private
one, Pearson r across an eps sweep) are computed before rendering (`dpmed.comparisons`, from the runs' saved
predictions); these sections only render them, with the per-run fairness and explanation blocks of each record and
the CAM grid from each run's ``cams.npz``.

What is shown (METHODS.md sec. 5-6): per-group AUROC and the accuracy parity difference of Tayebi Arasteh, Ziller et
al. 2023 (003_9a91354dc2d7e2df.txt; named as what it is), fairlearn's demographic parity and equalised odds
differences, the worst group; Grad-CAM's faithfulness metrics of Naidu et al. 2021 (001_d0483fd35863b74c.txt) and,
on the phantom, lesion-mask energy and pointing game; a grid of the same test images explained by every run. Every
number carries its bootstrap interval (percentile, BCa where the study asks for it, or a band:
`dpmed.evaluation.fairness`); small groups and
intervals of zero width are flagged (`dpmed.comparisons.GroupFlag`), and p-values at the bootstrap's floor are
printed as "<= floor".
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from dpmed.comparisons import (MIN_CLASS_COUNT, SIGNIFICANCE, Comparisons, Correlation, PairedDifference,
                               SeedSummary)
from dpmed.comparisons.correlations import ExplanationCorrelation, ParityCorrelation
from dpmed.evaluation.fairness import named_groups, uncompared_groups
from dpmed.evaluation.faithfulness import METRIC_LABELS
from dpmed.evaluation.summaries import AttributeFairness, Estimate, Explanations, GroupFairness, Spread
from dpmed.evaluation.utility import UNDEFINED_REDRAWS_WARN_FRACTION
from dpmed.records import RunRecord
from dpmed.reporting.inputs import (METHODS, ReportInputs, embed_figure, eps_label, escape as _e,
                                    estimate_text as _est, p_text, range_text, read_figure_arrays, signed_text,
                                    stacked, t_text)
from dpmed.reporting.sections import across_seeds, decision_rule
from dpmed.reporting.study_figures import cam_grid, group_estimates

__all__ = ["comparison_section", "fairness_section", "interpretability_section"]

CAM_GRID_COLUMNS = 8
_SHORT = {"average_drop": "Average Drop %", "increase_in_confidence": "Increase in Confidence %",
          "masked_input_score": "masked-input score %*", "deletion_auc": "deletion AUC",
          "insertion_auc": "insertion AUC",
          "mask_energy": "lesion-mask energy", "pointing_game": "pointing game"}
_PERCENT = ("average_drop", "increase_in_confidence", "masked_input_score")     # shown with two decimals


def _column_table(heads: Sequence[str], rows: str) -> str:
    """A table whose head row names its columns (``scope="col"``: a screen reader reads each cell with its column's
    name); ``rows``: its body rows as HTML."""
    return ("<table><thead><tr>" + "".join(f'<th scope="col">{_e(h)}</th>' for h in heads)
            + f"</tr></thead><tbody>{rows}</tbody></table>")


def _groups_alt(name: str, groups: Sequence[str], series: Sequence[tuple[str, Sequence[Estimate | None]]],
                level: str) -> str:
    """What a fairness figure shows, in words: its axes, and each run's test AUROC per group, from the values it
    plots ("AUROC by age" alone named the figure, not what it says)."""
    runs = "; ".join(f"{label}: " + ", ".join(f"{g} {'undefined' if e is None or e.value is None else f'{e.value:.3f}'}"
                                               for g, e in zip(groups, estimates))
                     for label, estimates in series)
    return (f"Test AUROC (with {level} intervals) for each {name} group ({', '.join(groups)}), one marker per run: "
            f"{runs}.")


def _r(entry: Correlation) -> tuple[str, str]:
    if entry.r is None:
        return "–", _e(entry.reason or "")
    return f"{entry.r:+.3f}", f"{entry.p_value:.3g}"


def _r_with_p(entry: Correlation) -> str:
    """"+0.412 (p 0.03)", or "– (why)" where r is undefined (before: "– (p one variable is constant)")."""
    r, p = _r(entry)
    return f"{r} (p {p})" if entry.r is not None else f"{r} ({p})" if p else r


def _none_defined(correlations: Sequence[ParityCorrelation | ExplanationCorrelation], what: str) -> str | None:
    """One sentence where no correlation has an r (a sweep of fewer than three values gives none, whatever the
    seeds): a table of dashes says less. None where some r is defined."""
    if any(c.r is not None for c in correlations):
        return None
    reasons = "; ".join(dict.fromkeys(c.reason or "undefined" for c in correlations))
    sweeps = "; ".join(dict.fromkeys(c.sweep for c in correlations))
    return f"not computed for any of the {len(correlations)} {what}: {reasons} ({sweeps})"


# ---------------------------------------------------------------------------------------------------- fairness


def _undefined_share(spread: Spread | None, resamples: int) -> str:
    """Where many redraws left a statistic over the groups undefined (a tiny group absent, or with one class), how
    many: the interval describes only the others (`dpmed.evaluation.fairness`), as the utility metrics warn above
    the same share."""
    undefined = (spread.undefined_redraws if spread is not None else None) or 0
    if not resamples or undefined <= UNDEFINED_REDRAWS_WARN_FRACTION * resamples:
        return ""
    return (f' <span class="flag" title="in these redraws a compared group was absent or lacked a class the '
            f'statistic needs; the interval uses the others">({undefined} of {resamples} redraws undefined)</span>')


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


def _one_group(name: str, runs: list[RunRecord], groups: list[str]) -> str:
    """A warning where every compared test image falls in one group of ``name`` (all ages in one bin): the worst
    group is then that group and every parity difference is undefined, so the tables compare nothing; what to change
    to compare groups."""
    bins = runs[0].fairness.age_bins
    compared = [g for g in groups if g not in uncompared_groups(name, bins)]
    if len(compared) != 1:
        return ""
    group = compared[0]
    # from the first run that has it: ``groups`` gathers every run's, as the sizes line beside this does
    n = next(r.fairness.attributes[name].groups[group].n for r in runs if group in r.fairness.attributes[name].groups)
    change = ("To compare age groups, give the study file's evaluation.fairness.age_bins edges that split these "
              f"test images (now [{', '.join(f'{b:g}' for b in bins)}])." if name == "age" else
              f"To compare groups of {_e(name)}, test on images of more than one (or leave {_e(name)} out of the "
              "study file's evaluation.fairness.attributes).")
    return (f'<div class="flag">⚠ All {n} test images compared by {_e(name)} fall in one group, {_e(group)}: '
            f"fairness by {_e(name)} compares nothing here. The worst group is that group, and each parity "
            f"difference (a group minus the others) is undefined (–). {change}</div>")


def _fairness_attribute(name: str, runs: list[RunRecord], inputs: ReportInputs) -> str:
    level = inputs.level
    entries: list[AttributeFairness] = [r.fairness.attributes[name] for r in runs]
    groups = list(dict.fromkeys(g for e in entries for g in e.groups))
    first = entries[0].groups
    flags = [f for f in inputs.comparisons.group_flags if f.attribute == name]
    flagged = {(f.run_id, f.group): f for f in flags}
    small = {f.group for f in flags if any(reason.startswith("only") for reason in f.reasons)}
    sizes = ", ".join(f"{_e(g)}: {first[g].n}" + (f" ({positives})" if (positives := _positives(first[g])) else "")
                      + (" ⚠ small" if g in small else "")
                      for g in groups if g in first)
    series = [(f"{r.run_id}: {eps_label(r.privacy)}", [_group(e, g, "auroc") for g in groups])
              for r, e in zip(runs, entries)]
    ticks = [f"{g} *" if g in small else g for g in groups]
    title = f"AUROC by {name} ({level} intervals)" + ("; * small group" if small else "")
    figure = embed_figure(group_estimates(ticks, series, ylabel="test AUROC", title=title),
                          group_estimates(ticks, series, ylabel="test AUROC", title=title, narrow=True),
                          inputs.folder.root / f"fairness_{name}.png", _groups_alt(name, groups, series, level))
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

    def worst_cell(r: RunRecord, e: AttributeFairness) -> str:
        w = e.worst_group_auroc
        if w is None or w.group is None:     # no group's AUROC is defined, so no group is the worst
            return "<td>undefined: no named group's AUROC is defined</td>"
        mark = warning_mark("a small group: see the warnings above") if w.group in small else ""
        return (f"<td>{_e(w.group)}: {_est(w)}{mark}"
                + _undefined_share(w, r.fairness.n_resamples) + "</td>")

    auroc_rows = "".join(
        f"<tr><td>{_e(r.run_id)}</td><td class=eps>{_e(eps_label(r.privacy))}</td>"
        + "".join(cell(r, e, g) for g in groups) + worst_cell(r, e) + "</tr>"
        for r, e in zip(runs, entries))

    def per_group(metric: str, tail=lambda r, e: "") -> str:
        # a small group's accuracy or parity reads as firm as a large one's (a narrow interval far from 0) unless
        # its cell, like its AUROC cell, carries the warning; a parity (the group minus the rest) with its sign
        signed = metric.endswith("_difference")

        def mark(r: RunRecord, g: str) -> str:
            return ("" if not warned(r, g, metric) else warning_mark("a small group: see the warnings above")
                    if g in small else warning_mark("see the warnings above"))
        return "".join(f"<tr><td>{_e(r.run_id)}</td>"
                       + "".join(f"<td class=num>{_est(_group(e, g, metric), signed=signed)}{mark(r, g)}</td>"
                                 for g in groups)
                       + tail(r, e) + "</tr>" for r, e in zip(runs, entries))

    def spreads(r: RunRecord, e: AttributeFairness) -> str:
        # a small group that a spread compares (its parity defined; equalised odds leaves some out) can set it alone
        compared = [g for g in groups if g in small and (p := _group(e, g, "accuracy_parity_difference")) is not None
                    and p.value is not None]
        cells = []
        for s, left_out in ((e.demographic_parity_difference, []),
                            (e.equalized_odds_difference, e.equalized_odds_excluded_groups)):
            these = [g for g in compared if g not in left_out]
            mark = (warning_mark(f"spread over groups that include the small {', '.join(these)}: see the warnings "
                               "above") if these and s is not None and s.value is not None else "")
            cells.append(f"<td class=num>{_est(s)}{mark}{_undefined_share(s, r.fairness.n_resamples)}</td>")
        return "".join(cells)

    decided = any(_group(e, g, "demographic_parity_difference") is not None for e in entries for g in groups)
    excluded = entries[0].equalized_odds_excluded_groups          # the test set's groups: the same for every run
    several = len(runs[0].fairness.thresholds or []) > 1         # multilabel: a group may be left out for one label
    # Records written before the two differences counted their undefined redraws cannot flag a large share.
    uncounted = [r.run_id for r, e in zip(runs, entries)
                 if any(s is not None and s.value is not None and s.undefined_redraws is None
                        for s in (e.worst_group_auroc, e.demographic_parity_difference, e.equalized_odds_difference))]
    reference = _e(entries[0].reference or "")
    warnings = ""
    if flags:
        by_group: dict[str, list] = {}
        for f in flags:
            by_group.setdefault(f.group, []).append(f)
        items = []
        shown = {r.run_id for r in runs}
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
    absent = [g for g in named_groups(name, runs[0].fairness.age_bins) if g not in groups]
    if absent:     # "<18" and ">=65" are groups the bins make, not bins
        what = (("an age group" if len(absent) == 1 else "age groups") + " of evaluation.fairness.age_bins"
                if name == "age" else "a sex")
        sizes += (f". No test image falls in {_e(', '.join(absent))} ({what}), so "
                  + ("it has" if len(absent) == 1 else "they have") + " no numbers here")
    return (f"<h3>By {_e(name)}</h3><p>Test images per group: {sizes}.</p>{_one_group(name, runs, groups)}{warnings}"
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
                      + f"</tr>{per_group('accuracy_parity_difference', spreads if decided else lambda r, e: '')}"
                      "</table>")
            + (differences
               + f"<p>Demographic parity difference per group [{level} CI] ({reference}; the share of images "
               "decided positive):</p>"
               + stacked(f"<table><tr><th>run</th>{head}</tr>{per_group('demographic_parity_difference')}</table>")
               if decided else "")
            + _outside_note(runs, entries, groups, level, inputs.interval))


def _outside_note(runs: list[RunRecord], entries: list[AttributeFairness], groups: list[str], level: str,
                  interval: str) -> str:
    """A note where some interval of the attribute's tables lies wholly on one side of its point (worst-group AUROC
    0.612 [0.501, 0.598]), which reads as an error but is what a bootstrap of such statistics can do. The
    two spreads' bands hold their points (`dpmed.evaluation.fairness`); records evaluated before they had bands may
    not. ``interval``: the study's interval for a group's AUROC ("percentile" or "BCa", `ReportInputs.interval`)."""
    def outside(est: Estimate | None) -> bool:
        return (est is not None and None not in (est.value, est.low, est.high)
                and not est.low <= est.value <= est.high)          # type: ignore[operator]

    shown = [(f"{g} AUROC", lambda e, g=g: _group(e, g, "auroc")) for g in groups]
    shown += [("worst-group AUROC", lambda e: e.worst_group_auroc),
              ("demographic parity difference", lambda e: e.demographic_parity_difference),
              ("equalised odds difference", lambda e: e.equalized_odds_difference)]
    shown += [(f"{g} accuracy parity difference",
               lambda e, g=g: _group(e, g, "accuracy_parity_difference")) for g in groups]
    cases = [(r.run_id, what, get(e)) for r, e in zip(runs, entries) for what, get in shown if outside(get(e))]
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
    runs = [r for r in inputs.records if r.fairness]
    if not runs:
        return ""
    names = list(dict.fromkeys(a for r in runs for a in r.fairness.attributes))
    parts = []
    for name in names:
        ok = [r for r in runs if r.fairness.ok(name)]
        if ok:
            parts.append(_fairness_attribute(name, ok, inputs))
        else:
            reason = next(r.fairness.attributes[name].reason or "" for r in runs if name in r.fairness.attributes)
            parts.append(f"<h3>By {_e(name)}</h3><p>Not applicable: {_e(reason)}</p>")
    corr = inputs.comparisons.correlations.epsilon_vs_accuracy_parity
    undefined = _none_defined(corr, "groups") if corr else None
    if undefined:
        parts.append("<p>Pearson r between log10 ε and each group's accuracy parity difference across a DP-SGD "
                     f"sweep (Tayebi Arasteh, Ziller et al. 2023, Table 3): {_e(undefined)}.</p>")
    elif corr:
        rows = "".join(f"<tr><td>{_e(c.sweep)}</td><td>{_e(c.attribute)}</td><td>{_e(c.group)}</td>"
                       f"<td class=num>{_r(c)[0]}</td><td class=num>{_r(c)[1]}</td><td class=num>{c.n}</td></tr>"
                       for c in corr)
        parts.append("<p>Pearson r between log10 ε and each group's accuracy parity difference across a DP-SGD "
                     "sweep, each run (every seed) a point. Tayebi Arasteh, Ziller et al. 2023 (Table 3) correlated "
                     "ε itself, over 0.29 to 7.89; here log10 ε, since over the decades a sweep may span the "
                     "largest ε alone would set r. A sweep of fewer than three ε values gets no r: across two, "
                     "r only says which of them is larger. Each p is its group's own, not corrected for the number "
                     "of groups tested.</p>" + _column_table(("sweep", "attribute", "group", "r", "p", "n"), rows))
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


# ---------------------------------------------------------------------------------------------- interpretability


def _grid(runs: list[RunRecord], inputs: ReportInputs) -> str:
    by_id = {r.run_id: r for r in runs}
    arrays, unread = read_figure_arrays(((r.run_id, inputs.folder.run(r.run_id).cams) for r in runs),
                                        ("positions", "images", "cams"), "the CAM grid")
    loaded = [(by_id[run_id], a) for run_id, a in arrays]
    if not loaded:
        return unread
    first = loaded[0][1]
    positions = first["positions"]
    masks = first.get("masks")
    has_lesion = (masks.reshape(len(masks), -1).any(axis=1) if masks is not None
                  else np.zeros(len(positions), bool))
    order = np.r_[np.flatnonzero(has_lesion), np.flatnonzero(~has_lesion)][:CAM_GRID_COLUMNS]   # lesions first
    rows = [(f"{r.run_id}\n{eps_label(r.privacy)}", a["cams"][order]) for r, a in loaded
            if np.array_equal(a["positions"], positions)]
    titles = [f"test #{int(positions[i])}" for i in order]
    images, shown_masks = first["images"][order].astype(np.float32), None if masks is None else masks[order]
    figure = embed_figure(cam_grid(images, shown_masks, rows, titles),
                          cam_grid(images, shown_masks, rows, titles, narrow=True),
                          inputs.folder.root / "cam_grid.png",
                          f"Grad-CAM maps of the test images {', '.join(titles)} (columns): the top row the images "
                          + ("with their lesion masks outlined" if masks is not None else "themselves")
                          + ", then one row per run: " + "; ".join(label.replace("\n", ", ") for label, _ in rows))
    return ("<p>The same test images explained by every run (Grad-CAM of the explained class, named above, over the "
            "image; top row: the image with its lesion mask outlined, where the dataset has masks; a phone shows the "
            f"first three).</p><figure>{figure}</figure>{unread}")


def _lesion_target(explanations: Explanations) -> str:
    """What the lesion maps explain: "class 1", or a multilabel run's sum of every finding's score."""
    return explanations.lesion_target or f"class {explanations.lesion_class}"


def _flat_scores(record: RunRecord) -> bool:
    """A binary run whose every explained image's predicted-class score lies within 0.05 of chance, 0.5 (a model
    that is never confident, whatever it ranks): the confidence metrics have next to nothing to measure. The class is
    the one the validation threshold decides, so Y may lie below 0.5 as well as above. Other tasks: chance is not
    0.5 (1/K for K classes), and no run is flagged."""
    lo, hi = record.explanations.score_image_min, record.explanations.score_image_max
    return record.data.task == "binary" and lo is not None and hi is not None and lo > 0.45 and hi < 0.55


def interpretability_section(inputs: ReportInputs) -> str:
    runs = [r for r in inputs.records if r.explanations]
    if not runs:
        return ""
    level = inputs.level
    metrics = list(dict.fromkeys(m for r in runs for m in r.explanations.metrics))
    head = "".join(f"<th>{_e(_SHORT.get(m, m))}</th>" for m in metrics)
    rows = "".join(
        f"<tr><td>{_e(r.run_id)}</td><td>{_e(eps_label(r.privacy))}</td>"
        + "".join(f"<td class=num>{_est(r.explanations.metrics.get(m), 2 if m in _PERCENT else 3)}</td>"
                  for m in metrics) + "</tr>" for r in runs)
    e0 = runs[0].explanations
    notes = [f"{_e(e0.method)} ({_e(e0.method_reference)}) at layer <code>{_e(e0.target_layer)}"
             f"</code>, class: {_e(e0.explained_class)}, on {e0.n_images} test images drawn once "
             f"(seed {e0.image_seed}) and shared by every run; {level} percentile bootstrap intervals "
             + ("over those images' patients (each drawn patient with all of their explained images)."
                if e0.bootstrap_unit == "patient" else "over those images.")]
    notes += [f"{_e(_SHORT.get(m, m))}: {_e(METRIC_LABELS.get(m, ''))}." for m in metrics]
    if {"deletion_auc", "insertion_auc"} & set(metrics):
        notes.append(f"Deletion and insertion take the pixels in order of the CAM in {e0.deletion_steps} equal steps, "
                     f"a deleted pixel (or one not yet inserted) set to {_e(e0.baseline)}; the AUC is that of the "
                     "explained class's score against the share of pixels taken (trapezoid rule).")
    if "pointing_game" in metrics and e0.pointing_tolerance_px is not None:
        notes.append(f"Pointing game: a hit where the CAM's peak lies within {e0.pointing_tolerance_px:g} px of the "
                     "lesion mask (0: inside it).")
    if e0.n_masked_images:
        notes.append(f"Lesion-mask energy and pointing game use the CAM of {_e(_lesion_target(e0))} on the "
                     f"{e0.n_masked_images} explained images with a lesion mask; a uniform CAM would put "
                     f"{e0.mask_area_share or 0:.3f} of its energy in the mask (chance level).")
    flat = [r.run_id for r in runs if _flat_scores(r)]
    if flat:
        notes.append("Predicted-class scores Y that hardly vary (within 0.05 of chance for every explained image) in: "
                     + ", ".join(flat) + ". Masking can then move Y only a little, so Average Drop, Increase in "
                     "Confidence, the masked-input score and deletion/insertion AUC say little about the CAM for "
                     "these runs; lesion-mask energy and pointing game do not depend on Y's size.")
    # A collapsed run scores best on the confidence metrics (masking leaves its one class's score as high or
    # raises it), so the warning the utility sections give must stand beside these numbers too.
    collapsed = [r.run_id for r in runs if any(f.kind == "one_class" for f in inputs.comparisons.flags_of(r.run_id))]
    if collapsed:
        notes.append("Runs that decide one class for every test image: " + _e(", ".join(collapsed)) + ". Their "
                     "maps explain a decision that no image changes, so a low Average Drop or a high Increase in "
                     "Confidence there shows that masking leaves that class's score as high, not that the map "
                     "found what the model looked at.")
    # Each count with the metrics that read its maps: the predicted-class maps feed the confidence and
    # deletion/insertion metrics, the lesion-class maps (records before them lack the count) energy and pointing.
    zero = [f"{_e(r.run_id)}: {e.n_zero_cams} of {e.n_images}" for r in runs if (e := r.explanations).n_zero_cams]
    if zero:
        notes.append("All-zero CAMs of the explained class (no positive evidence anywhere), which Average Drop, "
                     "Increase in Confidence, the masked-input score and deletion/insertion AUC read (the masked "
                     "input is then a black image, and deletion and insertion take the pixels in raster order): "
                     + ", ".join(zero) + ".")
    lesion_zero = [f"{_e(r.run_id)}: {e.n_zero_lesion_cams} of {e.n_masked_images}" for r in runs
                   if (e := r.explanations).n_zero_lesion_cams]
    if lesion_zero:
        notes.append(f"All-zero CAMs of {_e(_lesion_target(e0))} on the explained images with a lesion mask, "
                     "which lesion-mask energy and the pointing game read (such a map scores 0 energy and misses): "
                     + ", ".join(lesion_zero) + ".")
    correlations = inputs.comparisons.correlations
    corr = correlations.epsilon_vs_explanations + correlations.max_grad_norm_vs_explanations
    corr_html = ""
    undefined = _none_defined(corr, "metrics and sweeps") if corr else None
    if undefined:
        corr_html = ("<p>Pearson r between the swept setting (log10 ε, or the clipping norm at fixed ε) and "
                     f"each metric: {_e(undefined)}.</p>")
    elif corr:
        corr_rows = "".join(f"<tr><td>{_e(c.sweep)}</td><td>{_e(_SHORT.get(c.metric, c.metric))}</td>"
                            f"<td class=num>{_r(c)[0]}</td><td class=num>{_r(c)[1]}</td><td class=num>{c.n}</td>"
                            "</tr>" for c in corr)
        corr_html = ("<p>Pearson r between the swept setting (log10 ε, or the clipping norm at fixed ε) and "
                     "each metric:</p>" + _column_table(("sweep", "metric", "r", "p", "n"), corr_rows))
    return ('<h2 id="interpretability">Interpretability</h2>'
            + stacked(f"<table><tr><th>run</th><th>ε</th>{head}</tr>{rows}</table>")
            + f"<ul>{''.join(f'<li>{n}</li>' for n in notes)}</ul>{corr_html}{_grid(runs, inputs)}")


# ------------------------------------------------------------------------------------------------- comparisons


def _difference_cell(d: PairedDifference | None) -> str:
    if d is None or d.value is None:
        return "<td class=num>–</td><td class=num>–</td>"
    return (f"<td class=num>{_est(Estimate(value=d.value, low=d.low, high=d.high), signed=True)}</td>"
            f"<td class=num>{p_text(d)}</td>")


def _seeds_interval(s: SeedSummary) -> str:
    """mean [t interval over seeds]; the mean alone where there is none (a comparisons.json that predates it)."""
    if s.low is None:
        return signed_text(s.mean)
    return f"{signed_text(s.mean)} [{signed_text(s.low)},\u00a0{signed_text(s.high)}]"


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
        extra = (("sensitivity_difference", f"sensitivity ({_e(data.positive_class or 'label 1')})"),
                 ("specificity_difference", f"specificity ({_e(data.negative_class or 'label 0')})")) if binary \
            else (("accuracy_difference", "accuracy" + (" (argmax)" if data.task == "multiclass" else "")),)
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
                     + _column_table(("run", "drop vs positives", "drop vs non-private AUROC"), body))
    if comparisons.notes:
        parts.append("<ul>" + "".join(f"<li>{_e(n)}</li>" for n in comparisons.notes) + "</ul>")
    if not parts:
        return ""
    return f'<h2 id="comparisons">Against the non-private run, with intervals</h2>{"".join(parts)}'
