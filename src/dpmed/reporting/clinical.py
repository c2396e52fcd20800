"""The table the report opens with (after a warning of planned runs it lacks): what each private arm costs, in the
terms a clinician reads, and what its ε means in words.

AUROC alone does not say how many patients a model misses. Per compared arm (a private one, or a not-DP one such as
a reproduction of a flawed mechanism, named as not DP with its card's reason) this section shows the change in AUROC,
in sensitivity (cases of the positive class found, named: in some public binary sets class 1 is "benign" or
"normal") and in specificity, each against the non-private run **of the same seed**, with the paired bootstrap
intervals of `dpmed.comparisons` (each model deciding at its own threshold chosen on the validation split; for
ordered grades also the change in quadratic-weighted kappa, which counts a far miss of the grade above a near one,
as METHODS.md sec. 4 asks), and one
sentence per arm: "at eps 1 the model misses about 12 more of every 100 pneumonia cases". With several seeds the
sentence gives the mean over seeds with its Student t interval over seeds (training randomness, which the test
bootstrap does not see), and the seeds' range labelled as a range: 3 seeds' range holds their true mean only 75 % of
the time, so it is no interval. A change reads as one direction only where that t interval excludes 0; where it holds
0 the sentence opens with "no difference is shown" and gives the mean only after it; for ordered grades a second
sentence reads the kappa change by the same rule. Runs that
predict one class for every test image are flagged here, where a reader starts, and so are runs whose
validation-chosen threshold does not carry over to the test images (validation and test rates differ far beyond
chance: the test images differ from those the threshold was chosen on, e.g. the Kermany release's test folder).
"""

from __future__ import annotations

from typing import Sequence

from dpmed.comparisons import Difference, PairedDifference, SeedSummary, ValueSummary, holds_chance
from dpmed.numbers import count_text
from dpmed.records import RunRecord
from dpmed.reporting.inputs import (ReportInputs, eps_label, escape, estimate_text, not_dp_text, range_text,
                                   signed_text, t_text)

__all__ = ["clinical", "case_sentence", "flag_html", "flag_count", "ONE_SEED", "WARNINGS"]

# Where the runs' warnings stand, each once: under the utility table, which lists every run (a badge in its row points
# there). The opening section and the summary link to it instead of saying them again, which read the same warning
# three times before the reader met the table it qualifies.
WARNINGS = "warnings"

# A paired interval of one seed's runs redraws the test set only: the randomness of training (initialisation,
# batches, noise) moves a run's AUROC by as much as small costs of privacy (benchmarks/RESULTS.md, "Utility under DP").
ONE_SEED = ("Every comparison here rests on one training seed: its interval covers the redraws of the test set, not "
            "the randomness of training (initialisation, batches, noise), which can move a run's AUROC by as much "
            "as a small cost of privacy; run several seeds (seeds: [0, 1, 2]) before reading a difference as "
            "privacy's cost.")


def _per100(value: float | None) -> str:
    """A change of a rate as cases per 100: -0.124 -> "-12", and "0", not "-0", for a change that rounds to none."""
    if value is None:
        return "–"
    k = round(100 * value)
    return "0" if k == 0 else f"{k:+d}"


def _per100_end(value: float) -> str:
    """An interval's or the seeds' range's end in cases per 100, as :func:`_per100`, but an end clear of 0 that rounds
    to 0 keeps its side ("-0.4", "+0.04"): "[-14, 0]" read as an interval that holds no change beside a sentence
    saying it does not, and "seed range -8 to 0" as a seed that showed none beside "under 1 to 8 more"."""
    if value == 0 or round(100 * value) != 0:
        return _per100(value)
    text = f"{100 * value:+.1g}"
    return text if "e" not in text else f"{text[0]}0.000"          # not "-1e-05": the side is what it tells


def _interval_cell(low: float | None, high: float | None, *, cases: bool) -> str:
    """" [low, high]" of a difference, each end signed; "" where it has no interval."""
    if low is None or high is None:
        return ""
    fmt = _per100_end if cases else signed_text
    return f" [{fmt(low)},\u00a0{fmt(high)}]"


def _paired_cell(d: PairedDifference | None, *, cases: bool) -> str:
    if d is None or d.value is None:
        return "–"
    fmt = _per100 if cases else signed_text
    interval = _interval_cell(d.low, d.high, cases=cases)
    return f"{fmt(d.value)}{interval}"


def _seeds_cell(s: SeedSummary | None, *, cases: bool) -> str:
    """mean [t interval over seeds] (seed range min to max); a summary without the interval (one seed, or a
    comparisons.json that predates it) gives the mean and range only."""
    if s is None or s.mean is None or s.min is None or s.max is None:     # a mean has its range (seed_summary)
        return "–"
    fmt = _per100 if cases else signed_text
    end = _per100_end if cases else signed_text      # the range's ends keep their side too, as the sentence's do
    interval = _interval_cell(s.low, s.high, cases=cases)
    return f"{fmt(s.mean)}{interval} (seed range {end(s.min)} to {end(s.max)})"


def _count(x: float, more: str, fewer: str) -> str:
    """A change in cases per 100 as words: 12.4 -> "12 more", -3 -> "3 fewer", 0.2 -> "none"."""
    k = round(x)
    return "none" if k == 0 else f"{abs(k)} {more if k > 0 else fewer}"


def _range(low: float, high: float, more: str, fewer: str) -> str:
    a, b = round(low), round(high)
    if a == b == 0 and (low > 0 or high < 0):     # clear of 0 however small: "no change" would deny what it shows
        return f"under 1 {more if low > 0 else fewer}"
    if a == b:
        return "no change" if a == 0 else _count(a, more, fewer)      # not "95% CI: none"
    if low > 0 or high < 0:                        # one side of zero: "4 to 19 more"
        near, far = sorted((abs(a), abs(b)))
        # an end that rounds to 0 is still on that side: "none to 14 more" read as holding no change
        return f"{near or 'under 1'} to {far} {more if low > 0 else fewer}"
    return f"{_count(a, more, fewer)} to {_count(b, more, fewer)}"


def _about(x: float, what: str, more: str, fewer: str, tail: str, baseline: str | None = None,
           same: str | None = None) -> str:
    """``baseline``: what the change is against, said where the subject is not a privacy level ("the non-private
    run"); None: "without privacy", and "more" needs no "than". ``same``: what follows "about as many" where the
    change rounds to none, if not ``tail`` ("test images wrong" where ``more`` is "more wrong")."""
    k = round(x)
    if k == 0:
        return f"{what} about as many {same or tail} as {baseline or 'without privacy'}"
    return f"{what} about {abs(k)} {more if k > 0 else fewer} of every 100 {tail}" + (f" than {baseline}"
                                                                                     if baseline else "")


def case_sentence(*, privacy: str, kind: str, positive: str | None, negative: str | None, level: str,
                  single: Difference | None = None, seeds: ValueSummary | None = None,
                  not_dp: tuple[str, str] | None = None) -> str:
    """One sentence: what the arm at ``privacy`` changes, in cases per 100. ``single``: one seed's paired
    differences (with their intervals); ``seeds``: the mean over several seeds (with the seeds' spread).
    ``not_dp``: (the arm's name, why it is not DP) for an arm whose privacy is no ε: the sentence is then about
    that arm against the non-private run ("shift_b1, which is not DP because ..., misses ..."), not "at" a level
    of privacy. Ordinal grades (a quadratic-weighted kappa difference present) add a sentence on kappa
    (:func:`_kappa_sentence`)."""
    return (_decision_sentence(privacy=privacy, kind=kind, positive=positive, negative=negative, level=level,
                               single=single, seeds=seeds, not_dp=not_dp)
            + _kappa_sentence(single=single, seeds=seeds, level=level))


def _kappa_sentence(*, single: Difference | None, seeds: ValueSummary | None, level: str) -> str:
    """" Its quadratic-weighted kappa changes by ..." with its interval; "" where the grades are not ordinal. Kappa
    is no share of cases, so it reads as a difference of kappas. Over seeds, as every other change over seeds, a t
    interval that holds 0 comes first ("no difference is shown"), and the mean only after it."""
    if single is not None:
        d = single.kappa_quadratic_difference
        if d is None or d.value is None:
            return ""
        ci = "" if d.low is None else f" ({level} CI [{signed_text(d.low)}, {signed_text(d.high)}]; higher is better)"
        return f" Its quadratic-weighted kappa changes by {signed_text(d.value)}{ci}."
    if seeds is None or (s := seeds.kappa_quadratic_difference) is None or s.mean is None:
        return ""
    if s.low is None:
        return f" Its quadratic-weighted kappa changes on average by {signed_text(s.mean)} (higher is better)."
    interval = f"{level} t interval over seeds [{signed_text(s.low)}, {signed_text(s.high)}]"
    if not s.excludes_zero:
        return (f" Over {len(seeds.seeds)} seeds no difference is shown in the quadratic-weighted kappa ({interval}, "
                f"which includes 0; on average {signed_text(s.mean)}).")
    return f" Its quadratic-weighted kappa changes on average by {signed_text(s.mean)} ({interval}; higher is better)."


def _decision_sentence(*, privacy: str, kind: str, positive: str | None, negative: str | None, level: str,
                       single: Difference | None = None, seeds: ValueSummary | None = None,
                       not_dp: tuple[str, str] | None = None) -> str:
    """The sentence of :func:`case_sentence` on the decisions (sensitivity and specificity, or accuracy), or on
    AUROC where the runs have no decisions."""
    subject = f"at {privacy} the model" if not_dp is None else f"{not_dp[0]}, which is {not_dp[1]},"
    baseline = None if not_dp is None else "the non-private run" if single is not None else "its seed's non-private run"
    sens: PairedDifference | SeedSummary | None
    spec: PairedDifference | SeedSummary | None
    acc: PairedDifference | SeedSummary | None
    spread: SeedSummary | None            # the AUROC change's summary over seeds; None for one seed's
    if single is not None:
        sens, spec, acc = single.sensitivity_difference, single.specificity_difference, single.accuracy_difference
        lead, avg = (f"At {privacy} the model" if not_dp is None else subject), ""
        auroc, spread = single.auroc_difference.value, None
    else:
        assert seeds is not None
        sens, spec, acc = seeds.sensitivity_difference, seeds.specificity_difference, seeds.accuracy_difference
        lead, avg = f"Over {len(seeds.seeds)} seeds, {subject}", " on average"
        auroc, spread = seeds.auroc_difference.mean, seeds.auroc_difference

    def interval(d, more, fewer) -> str:
        if single is not None and d.low is not None:      # missed = -sensitivity: the interval flips
            return f" ({level} CI: {_range(-100 * d.high, -100 * d.low, more, fewer)})"
        if seeds is not None and d.min is not None and len(seeds.seeds) > 1:
            spread = f"seed range: {_range(-100 * d.max, -100 * d.min, more, fewer)}"
            if d.low is None:
                return f" ({spread})"
            return f" ({level} t interval over seeds: {_range(-100 * d.high, -100 * d.low, more, fewer)}; {spread})"
        return ""

    def mean(d) -> float | None:
        return d.value if single is not None else d.mean

    # Over seeds, the mean's direction is a finding only where the t interval excludes 0 (the range never shows
    # it). Where it holds 0 the clause opens with that verdict and gives the mean after it: "misses on average
    # about 5 more ... (..., which includes no change)" told a reader who stopped early of a change not shown.
    def unshown(d) -> bool:
        return seeds is not None and d.low is not None and not d.excludes_zero

    def undecided(d, what: str) -> str:
        k = round(-100 * d.mean)
        on_average = "about as many" if k == 0 else f"about {abs(k)} {'more' if k > 0 else 'fewer'}"
        t_range = _range(-100 * d.high, -100 * d.low, "more", "fewer")
        per = " of every 100" if any(c.isdigit() for c in t_range) else ""
        holds = "" if t_range == "no change" else ", which includes no change"     # not "no change, which includes..."
        return (f"no difference is shown in {what} ({level} t interval over seeds: {t_range}{per}{holds}; on average "
                f"{on_average}; seed range: {_range(-100 * d.max, -100 * d.min, 'more', 'fewer')})")

    pos = positive or "positive"
    neg = negative or "negative"
    against = f" against {baseline}" if baseline else ""
    if seeds is not None:
        context = f"Over {len(seeds.seeds)} seeds, " + (f"at {privacy}" if not_dp is None else
                                                        f"for {not_dp[0]}, which is {not_dp[1]},")
        actor = "the model" if not_dp is None else not_dp[0]
    # sensitivity and specificity are defined together: test AUROC needs both classes (dpmed.evaluation.utility)
    if (kind == "binary" and sens is not None and spec is not None and (sens_mean := mean(sens)) is not None
            and (spec_mean := mean(spec)) is not None):
        missed = _about(-100 * sens_mean, f"misses{avg}", "more", "fewer", f"{pos} cases", baseline)
        alarms = _about(-100 * spec_mean, f"wrongly flags{avg}", "more", "fewer", f"{neg} cases as {pos}", baseline,
                        same=f"{neg} cases")         # not "about as many normal cases as opacity as without privacy"
        if unshown(sens) or unshown(spec):
            first = (undecided(sens, f"the {pos} cases {actor} misses{against}") if unshown(sens) else
                     f"{actor} {missed}{interval(sens, 'more', 'fewer')}")
            second = (undecided(spec, f"the {neg} cases it wrongly flags as {pos}{against}") if unshown(spec) else
                      f"it {alarms}{interval(spec, 'more', 'fewer')}")
            return f"{context} {first}, and {second}."
        return (f"{lead} {missed}{interval(sens, 'more', 'fewer')} and {alarms}"
                f"{interval(spec, 'more', 'fewer')}.")
    if acc is not None and (acc_mean := mean(acc)) is not None:
        unit = "findings" if kind == "multilabel" else "test images"
        how = " (argmax)" if kind == "multiclass" else ""
        if unshown(acc):
            return f"{context} {undecided(acc, f'the {unit}{how} {actor} gets wrong{against}')}."
        wrong = _about(-100 * acc_mean, f"gets{avg}", "more wrong", "fewer wrong", f"{unit}{how}", baseline,
                       same=f"{unit}{how} wrong")
        return f"{lead} {wrong}{interval(acc, 'more', 'fewer')}."
    if auroc is None:
        return f"{lead} has no defined AUROC change."
    d = spread
    if d is None or d.low is None:
        return f"{lead} changes the test AUROC by{avg} {signed_text(auroc)}{against}."
    interval_text = f"{level} t interval over seeds [{signed_text(d.low)}, {signed_text(d.high)}]"
    if unshown(d):
        return (f"{context} no difference is shown in the test AUROC{against} ({interval_text}, which includes 0; "
                f"on average {signed_text(auroc)}).")
    return f"{lead} changes the test AUROC by{avg} {signed_text(auroc)}{against} ({interval_text})."


def flag_html(inputs: ReportInputs, run_ids: list[str]) -> str:
    """The warnings of these runs (one class for every image; findings decided one way; below chance), as HTML:
    said once in the report, under the utility table (:data:`WARNINGS`)."""
    flags = [f for run_id in run_ids for f in inputs.comparisons.flags_of(run_id)]
    return "".join(f'<div class="flag">⚠ {escape(f.run_id)} {escape(f.message)}.</div>' for f in flags)


def flag_count(inputs: ReportInputs, run_ids: list[str]) -> str:
    """A line counting the warnings of these runs and linking to where they stand (:data:`WARNINGS`); "" where they
    have none."""
    flagged = [run_id for run_id in dict.fromkeys(run_ids) if inputs.comparisons.flags_of(run_id)]
    if not flagged:
        return ""
    n = sum(len(inputs.comparisons.flags_of(run_id)) for run_id in flagged)
    return (f'<div class="flag">⚠ {count_text(n, "warning")} about {escape(", ".join(flagged))}: '
            f'<a href="#{WARNINGS}">read {"it" if n == 1 else "them"} under the utility table</a>.</div>')


def _reference_line(inputs: ReportInputs, records: dict[str, RunRecord], reference_ids: list[str]) -> str:
    data = inputs.resolved.dataset
    pos, neg = data.positive_class, data.negative_class
    lines = []
    for run_id in reference_ids:
        r = records.get(run_id)
        if r is None:
            continue
        sens, spec = r.estimate("test_sensitivity"), r.estimate("test_specificity")
        text = f"{escape(run_id)}: test AUROC {estimate_text(r.estimate('test_auroc'))}"
        if sens.value is not None and spec.value is not None:
            text += (f"; it finds {100 * sens.value:.0f} of every 100 {escape(pos or 'positive')} cases "
                     f"(sensitivity) and clears {100 * spec.value:.0f} of every 100 {escape(neg or 'negative')} cases "
                     "(specificity)")
        elif r.estimate("test_accuracy").value is not None:
            text += f"; accuracy {estimate_text(r.estimate('test_accuracy'))}"
        lines.append(text)
    # a reference whose interval holds chance makes its seed's private runs read as gains; comparisons.json marks
    # its pairs by the same rule (holds_chance)
    at_chance = [run_id for run_id in reference_ids if run_id in records and holds_chance(records[run_id])]
    run, whose = ("this run", "its seed's") if len(at_chance) == 1 else ("these runs", "their seeds'")
    chance = ("" if not at_chance else
              f"<p>{escape(', '.join(at_chance))}: the test AUROC interval includes 0.5, chance, so {run} may have "
              f"learned nothing, and {whose} changes in the table below measure that more than privacy's cost.</p>")
    return ("<p>Without privacy, " + "; ".join(lines) + ".</p>" + chance) if lines else ""


# Below this ``threshold_shift_p`` (`dpmed.evaluation.utility`) the report says that the validation-chosen threshold
# does not carry over to the test images: far below chance, since the validation rates are those the threshold was
# fitted to and a study holds many runs.
SHIFT_P = 1e-3


def _shift_line(records: dict[str, RunRecord], pos: str, neg: str, level: str) -> str:
    """A warning where binary runs' sensitivity or specificity at their own threshold differ between validation and
    test beyond chance: the decisions were set on images unlike the test images (another site, scanner, period or
    labelling), so the test rates measure that shift as much as the model; AUROC needs no threshold.

    A run has a ``threshold_shift_p`` only with both rates on both splits (`dpmed.evaluation.utility`: its
    validation and its test images each hold both classes, or it is not evaluated), so every shifted run has its
    gaps; a run.json from before the p has none of the three."""
    shifted = [r for r in records.values()
               if (p := r.estimate("threshold_shift_p").value) is not None and p < SHIFT_P]
    if not shifted:
        return ""
    gaps = [(abs(on_val - test.value), r, verb, cases, on_val, test.value, test)
            for r in shifted for rate, verb, cases in (("sensitivity", "found", pos), ("specificity", "cleared", neg))
            if (on_val := r.estimate(f"val_{rate}").value) is not None
            and (test := r.estimate(f"test_{rate}")).value is not None]
    _, r, verb, cases, on_val, on_test, test = max(gaps, key=lambda gap: gap[0])
    interval = ("" if test.low is None or test.high is None else
                f" [{100 * test.low:.0f}, {100 * test.high:.0f}] ({level} CI)")
    return (f'<div class="flag">⚠ The threshold chosen on the validation split does not carry over to the test '
            f"images in {len(shifted)} of {len(records)} runs (p &lt; {SHIFT_P:g}): {escape(r.run_id)} {verb} "
            f"{100 * on_val:.0f} of every 100 {escape(cases)} cases on validation and "
            f"{100 * on_test:.0f}{interval} on test. The test images differ from the validation images in what "
            "the model's scores see (another site, scanner, period or labelling): sensitivity, specificity and "
            "accuracy here are those of a threshold set on other images; AUROC needs no threshold.</div>")


def _columns(kind: str, pos: str, neg: str, level: str, seeds: tuple[bool, bool], ordinal: bool = False) -> list[str]:
    """The heads of the table's change columns (plain text: they also label each cell on a phone).

    ``seeds``: (a row is one seed's paired change, a row is a mean over seeds). A one-seed row's bracket is a
    bootstrap interval; a several-seed row's bracket is the t interval over seeds and its parenthesis the seeds'
    range, which the heading must not call an interval. Where rows are means over seeds every column says so, as a
    cell read alone on a phone carries only its own heading; a one-seed rate's bracket is the paragraph's bootstrap
    interval.
    """
    one, several = seeds
    auroc = (" or ".join(([f"[{level} CI]"] if one else [])
                         + ([f"mean [{level} t interval over seeds] (seed range)"] if several else []))
             or f"[{level} CI]")
    rates = f", {auroc}" if several else ""
    if kind == "binary":
        return [f"AUROC change {auroc}", f"sensitivity change: {pos} cases found, per 100{rates}",
                f"specificity change: {neg} cases cleared, per 100{rates}"]
    return ([f"AUROC change {auroc}", f"accuracy change{' (argmax)' if kind == 'multiclass' else ''}, per 100{rates}"]
            + ([f"quadratic-weighted kappa change {auroc}"] if ordinal else []))


# The differences shown as cases per 100: the rates. AUROC and kappa are no share of cases and stay as they are.
_CASES = {"sensitivity_difference", "specificity_difference", "accuracy_difference"}


def clinical(inputs: ReportInputs) -> str:
    comparisons, data, level = inputs.comparisons, inputs.resolved.dataset, inputs.level
    records = {r.run_id: r for r in inputs.records}
    kind, pos, neg = data.task, data.positive_class, data.negative_class
    ordinal = kind == "multiclass" and data.ordinal
    pos_text, neg_text = pos or "positive", neg or "negative"
    # an arm that is not DP (a reproduction of a flawed mechanism, shuffled batches, a published seed) is compared
    # too, but it is no private arm: the table then speaks of compared arms, and each such row says why
    why_not = {value.label: not_dp_text(records[value.run_ids[0]].privacy)
               for value in comparisons.by_value if value.run_ids and value.run_ids[0] in records}
    arm = "private arm" if not any(why_not.values()) else "compared arm"
    head = f'<h2 id="clinical">What each {arm} costs, in cases</h2>'
    if not comparisons.by_value:
        why = "; ".join(comparisons.notes) or "no private run has a non-private run of its seed to pair with"
        return (f"{head}<p>No paired comparison with a non-private run of the same seed ({escape(why)}), so the "
                f"cost of privacy has no baseline here.</p>{flag_count(inputs, list(records))}")
    differences = {d.run_id: d for d in comparisons.auroc_differences}
    sizes = {len([i for i in v.run_ids if i in differences]) for v in comparisons.by_value} - {0}
    columns = _columns(kind, pos_text, neg_text, level, (1 in sizes, any(k > 1 for k in sizes)), ordinal)
    rows = []
    for value in comparisons.by_value:
        members = [differences[i] for i in value.run_ids if i in differences]
        if not members:
            continue
        privacy = eps_label(records[members[0].run_id].privacy)
        single = members[0] if len(members) == 1 else None
        not_dp = None if (reason := why_not.get(value.label)) is None else (value.label, reason)
        sentence = case_sentence(privacy=privacy, kind=kind, positive=pos, negative=neg, level=level,
                                 single=single, seeds=None if single else value, not_dp=not_dp)
        names = (["auroc_difference"] + (["sensitivity_difference", "specificity_difference"] if kind == "binary"
                                         else ["accuracy_difference"])
                 + (["kappa_quadratic_difference"] if ordinal else []))
        if single is not None:
            cells = [_paired_cell(getattr(single, n), cases=n in _CASES) for n in names]
        else:
            cells = [_seeds_cell(getattr(value, n), cases=n in _CASES) for n in names]
        seeds = ", ".join(str(s) for s in value.seeds)
        # a flagged reference (below chance turns its seed's change into a seeming gain) is counted once, by
        # the 'Without privacy' line; each row it is paired in points there
        pointers = "".join(f'<div class="flag">⚠ paired with {escape(ref)}, whose warning '
                           f'<a href="#{WARNINGS}">stands under the utility table</a>.</div>'
                           for ref in dict.fromkeys(m.reference_run for m in members)
                           if comparisons.flags_of(ref))
        rows.append(f'<tr><td data-label="{arm}">{escape(value.label)}<br><small>seed'
                    f"{'s' if len(value.seeds) > 1 else ''} {seeds}</small></td>"
                    f'<td data-label="privacy">{escape(privacy)}</td>'
                    + "".join(f'<td class=num data-label="{escape(c)}">{cell}</td>' for c, cell in zip(columns, cells))
                    + f'<td data-label="reading">{escape(sentence)}{flag_count(inputs, value.run_ids)}{pointers}'
                    "</td></tr>")
    if kind == "binary":
        meaning = (f"Sensitivity is the share of <b>{escape(pos_text)}</b> cases (the positive class, label 1) "
                   f"that the model calls {escape(pos_text)}; specificity the share of <b>{escape(neg_text)}</b> "
                   f"cases (label 0) it calls {escape(neg_text)}. Each model decides at its own threshold, chosen on "
                   "the validation split (Youden's J).")
    elif kind == "multiclass":
        meaning = "Accuracy is the share of test images whose class (the argmax of the scores) is right."
        if ordinal:
            meaning += (" Quadratic-weighted kappa (Cohen 1968) is the agreement of those grades with the true ones "
                        "beyond chance, a miss weighed by the square of how many grades it is off (from 1, every "
                        "grade right, to -1; 0 is chance), so a far miss costs more than a near one; its change is "
                        "a difference of kappas, not cases per 100.")
    else:
        meaning = ("Accuracy is the share of findings decided right, each at its threshold chosen on the "
                   "validation split (Youden's J).")
    references = list(dict.fromkeys(d.reference_run for d in comparisons.auroc_differences))
    several = any(len(v.seeds) > 1 for v in comparisons.by_value)
    seed_counts = [v.auroc_difference.n_seeds for v in comparisons.by_value]     # each row's n over seeds
    pairing = (f"Each change is that run minus the non-private run of its seed on the same {data.n_test} "
               f"test images, with a {level} paired bootstrap interval (the same redraws of the test "
               f"{'patients' if comparisons.bootstrap_unit == 'patient' else 'images'} for both). {ONE_SEED}"
               if not several else
               "Each seed's run is paired with the non-private run of the same seed; a row gives the mean "
               "of those paired changes over seeds with its interval over seeds, and the seeds' range. In plain "
               "words: training involves chance (the model's random start, the order it sees the images, the privacy "
               "noise), which the test-set bootstrap does not see; each seed is one draw of it, and the interval is "
               "where the average change over many such trainings would lie, as far as these few can tell "
               f"({level} Student t interval over seeds, n - 1 degrees of freedom; it assumes independent seeds and "
               "roughly normal changes). The range is no interval: "
               f"{range_text(seed_counts)}, whatever the confidence. "
               "The t interval is wide with few seeds ("
               f"{t_text(comparisons.confidence, seed_counts)}), "
               "so a change is a finding only where it excludes 0. Each seed's own "
               "paired interval is in the section 'Against the non-private run, with intervals'.")
    example = (f"-12 per 100 in sensitivity means about 12 more missed of every 100 {escape(pos_text)} cases"
               if kind == "binary" else "-5 per 100 in accuracy means about 5 more wrong of every 100")
    return (f"{head}<p>{pairing} {meaning} Positive changes are better, negative worse: {example}.</p>"
            f"{_reference_line(inputs, records, references)}{flag_count(inputs, references)}"
            + (_shift_line(records, pos_text, neg_text, level) if kind == "binary" else "") +
            f'<table class="clinical stack"><thead><tr><th scope="col">{arm}</th>'
            + '<th scope="col">privacy</th>'
            + "".join(f'<th scope="col">{escape(c)}</th>' for c in columns)
            + f"<th scope=\"col\">reading</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
            + _reading_eps(inputs.records))


def _reading_eps(records: Sequence[RunRecord]) -> str:
    """What the privacy column's ε means, in words, for readers who do not know DP (the column names δ, accountant
    and neighbours; this says what they are). Only where some run has an ε. An ε that does not hold (a
    reproducible-mode run's, labelled "not DP: seed known") gets its own sentence and no explanation of protection,
    which it does not give."""
    holds = any(r.privacy.is_dp and r.privacy.epsilon is not None for r in records)
    void = any(not r.privacy.is_dp and r.privacy.epsilon is not None for r in records)
    if not holds and not void:
        return ""
    voided = ("An ε followed by \"not DP\" is what the accountant computes for that run's noise and sampling, but "
              "the reason beside it voids the promise (for \"seed known\": its noise came from the study's published "
              "seed, so anyone holding the study file can redraw and subtract it): such a run reproduces numbers, "
              "it protects no one." if void else "")
    if not holds:
        return f"<p class=\"note\"><b>Reading ε.</b> {voided}</p>"
    return ("<p class=\"note\"><b>Reading ε.</b> Differential privacy bounds what the released model can give away "
            "about any one unit of the training data, the patient or the image as each label says (\"add/remove "
            "one patient\"): whatever anyone concludes from what was released, the probability of each conclusion "
            "with that unit's images in the training set is at most e<sup>ε</sup> times its probability without "
            "them (2.7 times at ε 1, about 3,000 at ε 8), plus δ, a small allowance kept below one over the number "
            "of units, and the other way round. Smaller ε is stronger protection; an ε "
            "in the tens or more promises little in theory, though a real attack may still fail (the section "
            "'Reconstruction risk' bounds how often, where DP-SGD ran). PLD and RDP name the accountant that "
            "computed ε from the training's noise and sampling (PLD is the tighter). A local-DP ε \"per image\" "
            "protects each released image against any other image, a different promise, not comparable with "
            f"DP-SGD's ε.{' ' + voided if voided else ''}</p>")
