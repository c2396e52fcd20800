"""The report as a new user reads it (issue 16): privacy cards in plain numbers, the opening table in cases per
100 patients of the named positive class, every private run paired with its own seed, small fairness groups and
one-class runs flagged, p-values at the bootstrap's floor said as "<=", papers cited by authors and year, and figures
that stay readable on a phone. Built from hand-made records and predictions: no training."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from matplotlib.text import Text

from dpmed.evaluation.utility import evaluate_utility
from dpmed.evaluation.summaries import Estimate, Spread
from dpmed.mechanisms import PrivacyCard
from dpmed.randomness import NOT_DP_REPRODUCIBLE
from dpmed.reporting.figures import FONT, auroc_figure, ldp_examples_figure
from dpmed.reporting.inputs import PHONE_WIDTH, number_text
from dpmed.reporting.study_figures import cam_grid_figure, group_figure

REPO = Path(__file__).resolve().parents[2]
RNG = np.random.default_rng(16)


def _section(html: str, anchor: str) -> str:
    start = html.index(f'id="{anchor}"')
    end = html.find("<h2 ", start)
    return html[start:end if end > 0 else None]


def _text(fragment: str) -> str:
    return re.sub(r"<[^>]+>", " ", fragment)


# ------------------------------------------------------------------------------------------------- privacy cards


def test_number_text_gives_three_significant_figures_and_plain_words():
    assert [number_text(v) for v in (0.09235209235209235, 3.4646348288527666, 8192.0, 12345.6, 1e-5, 2.5e15,
                                     0.5, 693, True, False, None, float("inf"))] == \
        ["0.0924", "3.46", "8,192", "12,300", "1e-5", "2.5e15", "0.5", "693", "yes", "no", "–", "∞"]
    assert number_text(0.9994150945476274, up=True) == "1"        # an eps shown shorter never looks smaller
    assert number_text(0.9994150945476274) == "0.999"


def test_privacy_cards_read_as_plain_numbers_with_the_statement_first_and_raw_fields_folded(make_record,
                                                                                           report_html):
    card = PrivacyCard(mechanism="dp_sgd", is_dp=True, statement="eps = 0.9994 at delta = 1e-05 (PLD accountant)",
                       epsilon=0.9994150945476274, delta=1e-5, accountant="pld", unit="patient", n_units=693,
                       sample_rate=0.09235209235209235, steps=88, noise_multiplier=3.4646348288527666,
                       noise_given=False, max_grad_norm=1.0, target_epsilon=1.0, sampling="poisson")
    laplace = PrivacyCard(mechanism="pixel_laplace", is_dp=True, epsilon=8192.0, epsilon_image=8192.0,
                          epsilon_pixel=2.0, delta=0.0, scale_b=0.5,         # a mechanism's statement, as printed
                          statement="eps_image = 8,192 (delta = 0; unit: one image); eps per pixel value = 2")
    records = [make_record("non-private_seed0", "non-private"),
               make_record("dp-sgd_eps1_C1_seed0", "dp-sgd", "dp_sgd", eps=1.0).model_copy(update={"privacy": card}),
               make_record("pixel-laplace_b0.5_seed0", "pixel-laplace").model_copy(
                   update={"mechanism": "pixel_laplace", "privacy": laplace})]
    html = report_html(records)
    cards = re.findall(r'<div class="card">(.*?)</details></div>', _section(html, "privacy"), flags=re.S)
    assert len(cards) == 3
    for body in cards:
        shown, folded = body.split("<details>")
        assert shown.index('class="statement') < shown.index('class="facts"')     # the sentence first
        text = _text(shown)
        assert not re.search(r"\b(False|True|None)\b", text), text                # no Python reprs
        assert not re.search(r"\b[a-z]+_[a-z_]+\b", re.sub(r"_(seed0|C1|b0\.5)", "", text)), text   # no field names
        assert not re.search(r"\d\.\d{5,}", text), text                           # no 16-digit floats
    assert "ε per image = 8,192 (δ = 0; unit: one image); ε per pixel value = 2" in _text(cards[2])
    dp = _text(cards[1].split("<details>")[0])
    for plain in ("noise multiplier σ", "3.46", "sampling rate q", "0.0924", "δ", "1e-5", "one patient", "693"):
        assert plain in dp, plain
    assert "noise_multiplier" in cards[1].split("<details>")[1]                   # every raw field, folded
    assert "3.4646348288527666" in cards[1].split("<details>")[1]
    assert "grid-auto-rows:1fr" in html                                            # one height per row of cards


def test_what_an_image_unit_eps_means_for_a_patient_is_shown_not_folded(make_record, report_html):
    """Before, the unit note and the patient's group guarantee sat in the folded raw fields only, so that every table
    and card face read "ε 1 (δ 1e-5, PLD, add/remove one image)", easy to take for the patient's ε."""
    from dpmed.mechanisms.base import GroupGuarantee

    base = dict(mechanism="dp_sgd", is_dp=True, statement="eps = 1 at delta = 1e-05 (PLD accountant)", epsilon=1.0,
                delta=1e-5, accountant="pld", unit="image")
    cards = {"dp-sgd_eps1_C1_seed0": PrivacyCard(**base, unit_note="UNIT NOTE: a patient is protected as a group"),
             "dp-sgd_eps1_C1_seed1": PrivacyCard(**base, patient_guarantee=GroupGuarantee(
                 k=3, formula_epsilon=3.0, formula_delta=2.3e-4, statement="GROUP: a patient with 3 images: eps 3"))}
    records = [make_record("non-private_seed0", "non-private")] + [
        make_record(run_id, "dp-sgd", "dp_sgd", eps=1.0).model_copy(update={"privacy": card})
        for run_id, card in cards.items()]
    faces = [body.split("<details>")[0] for body in
             re.findall(r'<div class="card">(.*?)</details></div>', _section(report_html(records), "privacy"), re.S)]
    assert "UNIT NOTE: a patient is protected as a group" in faces[1]
    assert "GROUP: a patient with 3 images: ε 3" in faces[2]


def test_an_audited_card_says_how_its_canaries_were_drawn_for_its_unit(make_record, report_html):
    """Where the image is the unit, patients are drawn at rate m / the count of images and every image of theirs is a
    canary (`dpmed.audit.canaries`); the card said "each training patient drawn at rate m / N" for every arm."""
    from dpmed.records import AuditSummary

    audit = AuditSummary(n_canaries=50, kind="mislabelled", result="private")
    records = []
    for run_id, unit in (("dp-sgd_eps1_C1_seed0", "patient"), ("dp-sgd_eps1_C1_seed1", "image")):
        record = make_record(run_id, "dp-sgd", "dp_sgd", eps=1.0)
        plan = record.plan.model_copy(update={"privacy": record.plan.privacy.model_copy(update={"unit": unit})})
        records.append(record.model_copy(update={"plan": plan, "audit": audit}))
    cards = re.findall(r'<div class="card">(.*?)</details></div>', _section(report_html(records), "privacy"), re.S)
    assert "each training patient drawn at rate m / N)" in cards[0] and "every image" not in cards[0]
    assert "each training patient drawn at rate m / N images, every image of theirs a canary)" in cards[1]


# -------------------------------------------------------------------------------------- the opening table (cases)


def test_report_opens_with_a_table_in_cases_of_the_named_positive_class(two_arms, report_html):
    html = report_html(two_arms)
    body = html[html.index("<body>"):]
    assert body.index('id="clinical"') < body.index('id="summary"')
    assert body.index("<table") == body.index('<table class="clinical stack"')          # the first table of the page
    clinical = _section(html, "clinical")
    for head in ("AUROC change", "sensitivity change: pneumonia cases found", "specificity change: normal cases"):
        assert head in clinical, head
    sens = two_arms[1].metrics["test_sensitivity"] - two_arms[0].metrics["test_sensitivity"]
    missed = round(-100 * sens)
    assert missed > 0
    assert f"the model misses about {missed} more of every 100 pneumonia cases" in clinical
    assert re.search(r"\(95% CI: \d+ (to \d+ )?more\)", clinical) or "fewer to" in clinical
    assert "AUROC change [95% CI]" in clinical and "seed range" not in clinical
    assert "<small>seed 0</small>" in clinical                      # the row's one seed, in the singular
    # what ε, δ and the accountant are, in words, for a reader who does not know DP (before: nowhere)
    # (ε, δ)-DP: Pr[M(D) in S] <= e^ε Pr[M(D') in S] + δ; δ is added, not the chance that the bound fails
    assert "Reading ε." in clinical and "is at most e<sup>ε</sup> times its probability without them" in clinical
    assert "plus δ, a small allowance" in clinical and "except with probability" not in clinical
    assert "Reading ε." not in _section(report_html(two_arms[:1]), "clinical")    # no ε to read


def test_several_seeds_give_the_mean_and_spread_and_the_summary_pairs_by_seed(scored_run, scores, report_html):
    names = ["normal", "pneumonia"]
    rng = np.random.default_rng(2)
    records = [scored_run(f"np_seed{s}", "np", "none", seed=s, scores=scores(q, rng), names=names)
               for s, q in ((0, 0.8), (1, 0.4))]
    records += [scored_run(f"dp_eps1_C1_seed{s}", "dp", "dp_sgd", eps=1.0, seed=s, scores=scores(q, rng),
                           names=names) for s, q in ((0, 0.35), (1, 0.3))]
    html = report_html(records)
    auroc = {r.run_id: r.metrics["test_auroc"] for r in records}
    same_seed = auroc["dp_eps1_C1_seed0"] - auroc["np_seed0"]
    against_mean = auroc["dp_eps1_C1_seed0"] - (auroc["np_seed0"] + auroc["np_seed1"]) / 2
    assert f"{same_seed:+.3f}" != f"{against_mean:+.3f}"
    summary = _section(html, "summary")
    assert f"{same_seed:+.3f} against np_seed0 (same seed" in summary
    assert f"{against_mean:+.3f}" not in summary
    clinical = _text(_section(html, "clinical"))
    assert "Over 2 seeds, at ε" in clinical and "on average" in clinical
    assert "95% t interval over seeds:" in clinical and "seed range:" in clinical
    assert "seeds 0, 1" in clinical                                     # the row's seeds
    assert "Each seed's run is paired with the non-private run of the same seed" in clinical
    assert "rests on one training seed" not in clinical
    # a row over seeds holds the mean, its t interval over seeds and the seeds' range, each called what it is
    heads = clinical.split("reading")[0]
    assert "AUROC change mean [95% t interval over seeds] (seed range)" in heads and "CI]" not in heads
    rate_heads = [h for h in re.findall(r'<th scope="col">([^<]*)</th>', _section(html, "clinical"))
                  if h.startswith(("sensitivity", "specificity"))]
    assert len(rate_heads) == 2 and all(h.endswith("per 100, mean [95% t interval over seeds] (seed range)")
                                        for h in rate_heads), rate_heads
    # the comparison's over-seeds row: the mean of the per-seed differences, signed, with its t interval (1 df:
    # t 12.706), what that interval supports, the seeds' range, and their std (ddof 1), not a standard error
    paired = [auroc[f"dp_eps1_C1_seed{s}"] - auroc[f"np_seed{s}"] for s in (0, 1)]
    half = 12.7062 * np.std(paired, ddof=1) / np.sqrt(2)
    row = re.search(r"<tr><td[^>]*>dp_eps1_C1</td>(.*?)</tr>", _section(html, "comparisons"), re.S).group(1)
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", row)
    mean = np.mean(paired)
    across = "not shown (interval holds 0)" if mean - half <= 0 <= mean + half else "lower" if mean < 0 else "higher"
    assert cells[:4] == [f"{mean:+.3f} [{mean - half:+.3f},\u00a0{mean + half:+.3f}]", across,
                         f"{min(paired):+.3f} to {max(paired):+.3f}", f"{np.std(paired, ddof=1):.3f}"], (cells, paired)
    # the decisions over seeds are not repeated there: the comparison points to the opening table that has them
    over_seeds = _section(html, "comparisons").split("Over seeds (training randomness")[1]
    assert 'sensitivity and specificity changes over seeds' in over_seeds and 'href="#clinical"' in over_seeds


def test_a_run_that_is_not_dp_is_no_private_arm_and_its_reading_says_why(scored_run, scores, report_html):
    """The opening table called a scalar_shift run a "private arm" and read "At not DP the model misses ...", a
    reproducible-mode run "At ε 4 (...), not DP: seed known the model ..."; the summary said of the shift run "lower
    than without privacy". Each not-DP row now names its run and its card's reason; a DP row reads "At ε ..."."""
    from dpmed.mechanisms.cards import label_randomness

    rng = np.random.default_rng(5)
    shift = PrivacyCard(mechanism="scalar_shift", is_dp=False, statement="NOT DP: one Laplace shift per image")
    seeded = scored_run("seeded_eps4_C1_seed0", "seeded", "dp_sgd", eps=4.0, scores=scores(0.5, rng))
    records = [scored_run("np_seed0", "np", "none", scores=scores(0.9, rng)),
               scored_run("shift_seed0", "shift", scores=scores(0.1, rng)).model_copy(
                   update={"mechanism": "scalar_shift", "privacy": shift}),
               seeded.model_copy(update={"privacy": label_randomness(seeded.privacy, "reproducible")}),
               scored_run("dp_eps8_C1_seed0", "dp", "dp_sgd", eps=8.0, scores=scores(0.6, rng))]
    html = report_html(records)
    clinical = _section(html, "clinical")
    assert "private arm" not in clinical and "At not DP" not in clinical
    readings = dict(re.findall(r'<tr><td data-label="[^"]+">([^<]+)<br>.*?<td data-label="reading">([^<]+)',
                               clinical))
    assert set(readings) == {"shift", "seeded_eps4_C1", "dp_eps8_C1"}
    for label, reason in (("shift", "reproduces"), ("seeded_eps4_C1", "published study seed")):
        assert readings[label].startswith(f"{label}, which is not DP because"), readings[label]
        assert reason in readings[label] and "without privacy" not in readings[label]
    assert "published study seed" not in readings["shift"] and "reproduces" not in readings["seeded_eps4_C1"]
    assert readings["dp_eps8_C1"].startswith("At ε") and "not DP" not in readings["dp_eps8_C1"]
    summary = {line.split(" ", 1)[0]: line for line in re.findall(r"<li>(.*?)</li>", _section(html, "summary"))}
    assert "lower than" in summary["shift_seed0"]           # its paired interval lies below 0
    assert "without privacy" not in summary["shift_seed0"] and "not DP because" in summary["shift_seed0"]


# ------------------------------------------------------------------------------------------------- fairness, p


def test_fairness_flags_small_groups_and_explains_the_worst_group_interval(two_arms, report_html):
    html = _section(report_html(two_arms), "fairness")
    fairness = _text(html)
    assert "[0,30): 8 (" in fairness and "⚠ small" in fairness
    # the attribute's spreads compare the small group too: their cells say so, not only the group's own
    marks = re.findall(r'title="spread over groups that include the small ([^"]*): see the warnings above"', html)
    # in the table's order of groups; equalised odds leaves [0,30) (one class only) out, so its mark does not name it
    assert "[0,30)" in two_arms[0].fairness.attributes["age"].equalized_odds_excluded_groups
    assert sorted(m.startswith("[0,30)") for m in marks) == [False] * len(two_arms) + [True] * len(two_arms)
    assert not re.findall(r'data-label="worst group"[^>]*>[^<]*<span class="flag" title="a small group', html)
    worst_small = []
    for r in two_arms:                                                        # one whose worst group is
        age = r.fairness.attributes["age"]
        age = age.model_copy(update={"worst_group_auroc": age.worst_group_auroc.model_copy(update={"group": "[0,30)"})})
        changed = r.fairness.model_copy(update={"attributes": {**r.fairness.attributes, "age": age}})
        worst_small.append(r.model_copy(update={"fairness": changed}))
    cells = re.findall(r'data-label="worst group"[^>]*>\[0,30\): [^<]*<span class="flag" title="a small group',
                       _section(report_html(worst_small), "fairness"))
    assert len(cells) == len(two_arms)
    assert "only" in fairness and "anecdotes" in fairness
    assert "The worst group's interval is not that group's own interval" in fairness


def test_a_fairness_cell_s_mark_points_to_where_its_warnings_stand(two_arms, report_html):
    # The small-group warnings stand above the figure and the tables; a mark that sent the reader below found none.
    html = _section(report_html(two_arms), "fairness")
    age = html[html.index("<h3>By age"):]
    assert age.index("anecdotes") < age.index("<table")
    titles = re.findall(r'<span class="flag" title="([^"]*see the warnings[^"]*)"', age)
    assert titles and all(t.endswith("see the warnings above") for t in titles), set(titles)


def test_a_fairness_cell_s_bare_mark_tells_a_screen_reader_what_it_means(two_arms, report_html):
    # A cell's mark is a lone sign whose meaning stood only in its title, which screen readers do not reliably read
    # (nor does a touch screen show it): a listener heard "warning sign" and no more. Each bare mark is an image
    # whose accessible name says what its title says.
    html = _section(report_html(two_arms), "fairness")
    marks = re.findall(r'<span class="flag"([^>]*)>⚠</span>', html)
    assert marks
    for attributes in marks:
        title = re.search(r'title="([^"]*)"', attributes).group(1)
        assert 'role="img"' in attributes and f'aria-label="warning: {title}"' in attributes, attributes


def test_a_small_group_is_marked_in_every_table_of_its_numbers_not_only_the_auroc_one(two_arms, report_html):
    # A group of 8 images gave an accuracy parity difference of -0.80 [-0.88, -0.71] in a quickstart: an interval
    # that reads as a firm disparity unless its cell, like the AUROC cell of the same group, carries the warning.
    html = _section(report_html(two_arms), "fairness")
    age = html[html.index("<h3>By age"):]
    tables = re.findall(r"<table[^>]*>.*?</table>", age, flags=re.S)
    per_group = [t for t in tables if 'data-label="[0,30)"' in t]
    assert len(per_group) == 4                       # AUROC, accuracy, accuracy parity, demographic parity
    for k, table in enumerate(per_group):
        cells = re.findall(r'<td[^>]*data-label="\[0,30\)"[^>]*>(.*?)</td>', table)
        assert len(cells) == len(two_arms) and all('class="flag"' in c for c in cells), table[:200]
        if k < 2:
            continue          # the AUROC and accuracy tables mark an interval of zero width too (the test below)
        others = re.findall(r'<td[^>]*data-label="\[30,60\)"[^>]*>(.*?)</td>', table)
        assert others and not any('class="flag"' in c for c in others)      # a group of enough images: no mark


def test_a_large_group_s_accuracy_of_zero_width_is_marked_in_its_cell_and_only_its_own(scored_run, scores,
                                                                                        report_html):
    """A quickstart's warning listed "[60,70): accuracy interval of zero width (1.000 in every redraw) (run:
    non-private_seed1)" while that cell, 1.000 [1.000, 1.000], carried no mark: a group of enough images is marked
    only where a warning concerns its own number, in the run it holds for."""
    from tests.reporting.conftest import AGE, Y

    rng = np.random.default_rng(5)
    middle = (AGE >= 30) & (AGE < 60)
    records = []
    for run_id, arm, mechanism in (("np_seed0", "np", "none"), ("dp_eps1_C1_seed0", "dp", "dp_sgd")):
        val, test = scores(0.4, rng)                  # classes overlap: no interval of zero width by chance
        test = test.copy()
        if mechanism == "none":
            test[middle] = Y[middle]                  # every image of the group decided right in every redraw
        records.append(scored_run(run_id, arm, mechanism, eps=None if mechanism == "none" else 1.0,
                                  scores=(val, test), fairness=True))
    accuracy = records[0].fairness.attributes["age"].groups["[30,60)"].accuracy
    assert accuracy.low == accuracy.high == 1.0
    age = _section(report_html(records), "fairness").split("<h3>By age")[1]
    table = age.split("Test accuracy per group")[1].split("</table>")[0]
    rows = dict(re.findall(r'<tr><td[^>]*>([^<]*)</td>(.*?)</tr>', table, flags=re.S))
    cell = {run: re.search(r'<td[^>]*data-label="\[30,60\)"[^>]*>(.*?)</td>', row).group(1)
            for run, row in rows.items()}
    assert 'class="flag"' in cell["np_seed0"]
    assert 'class="flag"' not in cell["dp_eps1_C1_seed0"]


def test_each_small_group_warning_names_exactly_the_runs_it_holds_for(scored_run, scores, tmp_path, report_html):
    """The warning merged every run's reasons into one line and listed every run after it: "accuracy interval of
    zero width (1.000 in every redraw); accuracy interval of zero width (0.000 in every redraw) (runs: all)" said
    of runs whose interval was neither. Each reason must name the runs whose comparisons.json flag has it, no other."""
    import json

    rng = np.random.default_rng(4)
    young = slice(0, 8)                               # the 8 patients under 30 (conftest), all of label 0
    records = []
    for run_id, arm, mechanism, young_scores in (("np_seed0", "np", "none", np.zeros(8)),
                                                 ("dp_eps1_C1_seed0", "dp", "dp_sgd", np.tile([0.0, 1.0], 4)),
                                                 ("dp_eps8_C1_seed0", "dp", "dp_sgd", np.ones(8))):
        val, test = scores(0.8, rng)
        test = test.copy()
        test[young] = young_scores                    # all right, half right, all wrong
        records.append(scored_run(run_id, arm, mechanism, eps=None if mechanism == "none" else float(run_id[6]),
                                  scores=(val, test), fairness=True))
    html = report_html(records)
    flags = [f for f in json.loads((tmp_path / "comparisons.json").read_text())["group_flags"]
             if f["attribute"] == "age" and f["group"] == "[0,30)"]
    expected = {(reason, f["run_id"]) for f in flags for reason in f["reasons"]}
    assert len({reason for reason, _ in expected if "zero width" in reason}) >= 2     # the runs' reasons differ
    warning = _section(html, "fairness").split("<b>[0,30)</b>")[1].split("</ul>")[0]
    stated = set()
    for item in re.findall(r"<li>(.*?)</li>", warning):
        reason, runs = re.fullmatch(r"(.*) \((?:every run|runs?: (.*))\)", _text(item).strip()).groups()
        for run_id in (runs.split(", ") if runs else [r.run_id for r in records]):
            stated.add((reason, run_id))
    assert stated == expected


def test_an_interval_wholly_beside_its_point_is_explained_where_one_is_shown(two_arms, report_html):
    """A percentile interval need not contain its point (equalised odds "0.275 [0.286, 1.000]"): unexplained, it
    reads as an error. The note appears for an attribute exactly where one of its shown intervals is such a case."""

    def outside(est) -> bool:
        return est is not None and None not in (est.low, est.value) and not est.low <= est.value <= est.high

    def cases(records, attribute) -> bool:
        entries = [r.fairness.attributes[attribute] for r in records]
        return any(outside(getattr(e, key)) for e in entries
                   for key in ("worst_group_auroc", "demographic_parity_difference", "equalized_odds_difference")) \
            or any(outside(getattr(g, m)) for e in entries for g in e.groups.values()
                   for m in ("auroc", "accuracy_parity_difference"))

    before = two_arms[1].fairness
    sex = before.attributes["sex"].model_copy(
        update={"equalized_odds_difference": Spread(value=0.275, low=0.286, high=1.0)})
    fairness = before.model_copy(update={"attributes": {**before.attributes, "sex": sex}})
    edited = [two_arms[0], two_arms[1].model_copy(update={"fairness": fairness})]
    for records in (two_arms, edited):
        section = _section(report_html(records), "fairness")
        for attribute in ("sex", "age"):
            part = section.split(f"<h3>By {attribute}</h3>")[1].split("<h3>")[0]
            assert ("wholly on one side of" in part) == cases(records, attribute), attribute
    assert cases(edited, "sex")


def test_the_note_on_a_group_auroc_beside_its_point_names_the_interval_it_has(two_arms, report_html):
    """A study with evaluation.interval: bca gives a group's AUROC a BCa interval, not the middle of the redraws:
    where it is the interval lying beside its point, the note must explain the interval it is, not call it a
    percentile one; a study with the default percentile interval is told that one."""
    before = two_arms[1].fairness
    sex = before.attributes["sex"]
    group = next(iter(sex.groups))
    moved = sex.groups[group].model_copy(update={"auroc": Estimate(value=0.70, low=0.72, high=0.90)})
    sex = sex.model_copy(update={"groups": {**sex.groups, group: moved}})
    fairness = before.model_copy(update={"attributes": {**before.attributes, "sex": sex}})
    edited = [two_arms[0], two_arms[1].model_copy(update={"fairness": fairness})]
    part = _text(_section(report_html(edited, interval="bca"), "fairness").split("<h3>By sex</h3>")[1]
                 .split("<h3>")[0])
    note = part[part.index("wholly on one side of"):]
    assert f"{group} AUROC" in note and "BCa" in note
    assert "A percentile interval is the middle" not in note
    part = _text(_section(report_html(edited), "fairness").split("<h3>By sex</h3>")[1].split("<h3>")[0])
    note = part[part.index("wholly on one side of"):]
    assert "A percentile interval is the middle 95% of the redraws' values" in note and "BCa" not in note


def test_runs_an_older_dpmed_evaluated_are_named_in_the_summary_until_the_study_is_resumed(two_arms, report_html):
    """`dpmed report` on a folder an older dpmed finished recomputes nothing: its runs' numbers come from the older
    methods, which the summary must say, with the way to evaluate them again; a folder of one version says nothing."""
    from dpmed.evaluation.version import EVALUATION_VERSION
    assert all(r.evaluation_version == EVALUATION_VERSION for r in two_arms)
    assert "evaluated by an older dpmed" not in _text(_section(report_html(two_arms), "summary"))
    older = [two_arms[0].model_copy(update={"evaluation_version": 1}), two_arms[1]]
    html = report_html(older)
    summary = _text(_section(html, "summary"))
    assert (f"1 of 2 runs were evaluated by an older dpmed (fairness intervals changed): "
            f"{older[0].run_id}.") in summary
    assert "without training and without spending privacy" in summary
    # said once: not again among the comparisons' notes, where it read as a setting study.yaml names otherwise
    assert _text(html).count("evaluated by an older dpmed") == 1 and "evaluated otherwise" not in html


def test_the_fairness_section_says_how_the_spreads_intervals_differ_from_the_others(two_arms, report_html):
    """The demographic parity and equalised odds differences have a band around their value, not the percentile
    interval every other number has (`dpmed.evaluation.fairness`): a reader told "percentile" alone would take the
    band for one."""
    intro = _text(_section(report_html(two_arms), "fairness").split("<h3>")[0])
    assert "percentile for each group's metrics and differences" in intro and "BCa" not in intro
    assert "demographic parity and equalised odds differences" in intro and "floored at 0" in intro
    intro = _text(_section(report_html(two_arms, interval="bca"), "fairness").split("<h3>")[0])
    assert "BCa for a group's AUROC and accuracy and percentile for the parity differences" in intro


def test_the_spreads_band_is_said_to_stop_at_1_as_its_cells_do(two_arms, report_html):
    """A spread's band is its value +- c kept within [0, 1] (`dpmed.evaluation.fairness`): a quickstart showed
    equalised odds 0.882 [0.422, 1.000], which a reader told "plus or minus, floored at 0" takes for an error (the
    upper end 'should' be 1.342). The intro says both ends are clipped, and the record's definition with it."""
    from dpmed.evaluation.fairness import DEFINITIONS

    intro = _text(_section(report_html(two_arms), "fairness").split("<h3>")[0])
    assert "floored at 0 and capped at 1" in intro
    assert "clipped to [0, 1]" in DEFINITIONS["interval"]


def test_p_values_at_the_bootstrap_floor_print_as_at_most(scored_run, scores, report_html):
    names = ["normal", "pneumonia"]
    rng = np.random.default_rng(3)
    records = [scored_run("np_seed0", "np", "none", scores=scores(0.9, rng), names=names, resamples=1000),
               scored_run("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0, scores=scores(0.05, rng), names=names,
                          resamples=1000)]
    comparisons = _section(report_html(records, resamples=1000), "comparisons")
    assert "≤ 0.002" in comparisons and ">0.002<" not in comparisons.replace(" ", "")


# ------------------------------------------------------------------------------ flags, decisions, class names


def test_a_reference_below_chance_is_flagged_where_its_private_runs_are_read(scored_run, scores, report_html):
    # The non-private run of a seed that ranks the classes the wrong way round makes its seed's private runs look
    # like gains: the utility table says so, once; the opening section (and each row of those runs) and the summary
    # point there.
    names = ["normal", "pneumonia"]
    rng = np.random.default_rng(5)
    val, test = scores(0.7, rng)
    records = [scored_run("np_seed0", "np", "none", scores=(val, 1 - test), names=names),   # inverted on test
               scored_run("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0, scores=scores(0.5, rng), names=names)]
    assert records[0].metrics["test_auroc_high"] < 0.5
    html = report_html(records)
    assert "np_seed0 ranks the classes below chance" in _text(_section(html, "utility"))
    for anchor in ("clinical", "summary"):
        assert "about np_seed0" in _text(_section(html, anchor)) and 'href="#warnings"' in _section(html, anchor)
    row = _section(html, "clinical").split("<table")[1].split("</table>")[0]
    # in the row it undermines
    assert "paired with np_seed0, whose warning stands under the utility table" in " ".join(_text(row).split())
    assert "⚠ below chance" in _section(html, "utility").split("</table>")[0]


def test_a_run_that_predicts_one_class_is_flagged_in_the_table_and_the_summary(scored_run, scores, report_html):
    names = ["normal", "pneumonia"]
    rng = np.random.default_rng(4)
    first = scores(0.7, rng)
    val, test = scores(0.7, rng)
    records = [scored_run("np_seed0", "np", "none", scores=first, names=names),
               scored_run("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0, names=names,
                          scores=(val, np.full_like(test, 1e-3)))]               # below the threshold everywhere
    html = report_html(records)
    assert "dp_eps1_C1_seed0 predicts normal for every test image" in _text(_section(html, "utility"))
    for anchor in ("clinical", "summary"):
        assert "about dp_eps1_C1_seed0" in _text(_section(html, anchor)), anchor
    assert "⚠" in _section(html, "utility").split("</table>")[0]                  # in the table's row
    # with no private run to pair, the opening section has no table, but still points to the warning
    alone = _section(report_html(records[1:]), "clinical")
    assert "No paired comparison" in alone and "1 warning about dp_eps1_C1_seed0" in _text(alone)


def test_a_threshold_that_does_not_carry_over_to_the_test_images_is_flagged(scored_run, scores, labels,
                                                                            report_html):
    # The Kermany release's test folder: pneumonia scores alike on validation and test, but normal films score higher
    # on test, so the threshold set where validation's normals lie lets half of test's normals through.
    y_val, y = labels
    names = ["normal", "pneumonia"]
    val = np.where(y_val == 1, 0.9, 0.1)
    test = np.where(y == 1, 0.9, np.where(np.arange(len(y)) % 2 == 0, 0.95, 0.1))   # every other normal film above 0.9
    shifted = [scored_run("np_seed0", "np", "none", scores=(val, test), names=names),
               scored_run("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0, scores=(val, test), names=names)]
    assert shifted[0].metrics["val_specificity"] == 1.0 and shifted[0].metrics["test_specificity"] == 0.5
    clinical = _text(_section(report_html(shifted), "clinical"))
    low, high = (shifted[0].metrics[f"test_specificity_{end}"] for end in ("low", "high"))
    assert ("The threshold chosen on the validation split does not carry over to the test images in 2 of 2 runs "
            f"(p &lt; 0.001): np_seed0 cleared 100 of every 100 normal cases on validation and 50 [{100 * low:.0f}, "
            f"{100 * high:.0f}] (95% CI) on test") in clinical
    one = [shifted[0], scored_run("dp_eps2_C1_seed0", "dp", "dp_sgd", eps=2.0, names=names,
                                  scores=(val, np.where(y == 1, 0.9, 0.1)))]                   # no shift
    assert "does not carry over to the test images in 1 of 2 runs" in _text(_section(report_html(one), "clinical"))

    rng = np.random.default_rng(6)                           # validation and test drawn alike: no warning
    alike = [scored_run("np_seed1", "np", "none", scores=scores(0.7, rng), names=names, seed=1),
             scored_run("dp_eps1_C1_seed1", "dp", "dp_sgd", eps=1.0, scores=scores(0.5, rng), names=names, seed=1)]
    clinical = _text(_section(report_html(alike), "clinical"))
    assert "Over" in clinical or "At ε" in clinical                       # the table of paired changes is there
    assert "does not carry over" not in clinical


def test_the_threshold_warning_shows_the_rate_that_moved_most_whichever_way(scored_run, labels, report_html):
    """The warning names the rate whose validation and test values lie furthest apart, also where the test's is the
    higher: half of validation's pneumonia films score below the threshold but none of test's (sensitivity 50 -> 100,
    a gap of 50), while 6 of test's 60 normal films score above it (specificity 100 -> 90, a gap of 10)."""
    y_val, y = labels
    val = np.where(y_val == 1, np.where(np.arange(len(y_val)) % 2 == 0, 0.05, 0.9), 0.1)
    test = np.where(y == 1, 0.9, np.where(np.arange(len(y)) < 6, 0.95, 0.1))
    shifted = [scored_run("np_seed0", "np", "none", scores=(val, test)),
               scored_run("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0, scores=(val, test))]
    metrics = shifted[0].metrics
    assert (metrics["val_sensitivity"], metrics["test_sensitivity"]) == (0.5, 1.0)
    assert (metrics["val_specificity"], metrics["test_specificity"]) == (1.0, 0.9)
    clinical = _text(_section(report_html(shifted), "clinical"))
    assert "np_seed0 found 50 of every 100 pneumonia cases on validation and 100" in clinical
    assert "cleared 100 of every 100 normal cases on validation" not in clinical


def test_the_without_privacy_line_names_a_shared_non_private_run_once(scored_run, scores, report_html):
    """Two private arms paired with one non-private run: the 'Without privacy' line gives that run once."""
    rng = np.random.default_rng(9)
    records = [scored_run("np_seed0", "np", "none", scores=scores(0.7, rng)),
               scored_run("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0, scores=scores(0.5, rng)),
               scored_run("dp_eps8_C1_seed0", "dp", "dp_sgd", eps=8.0, scores=scores(0.6, rng))]
    clinical = _text(_section(report_html(records), "clinical"))
    assert clinical.count("At ε") == 2 and clinical.count("np_seed0: test AUROC") == 1, clinical


def test_the_positive_class_is_named_wherever_sensitivity_is_shown(scored_run, scores, report_html):
    names = ["malignant", "normal, benign"]                    # BreastMNIST: class 1 is not the disease
    rng = np.random.default_rng(5)
    records = [scored_run("np_seed0", "np", "none", scores=scores(0.7, rng), names=names),
               scored_run("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0, scores=scores(0.4, rng), names=names)]
    html = report_html(records, names=tuple(names))
    assert "sensitivity (normal, benign found)" in _section(html, "utility")
    assert "positive class <b>normal, benign</b>" in _section(html, "summary")
    assert "of every 100 normal, benign cases" in _section(html, "clinical")
    assert "sensitivity (normal, benign) difference" in _section(html, "comparisons")


def test_multiclass_decisions_are_argmax_not_youden_and_ordinal_grades_show_kappa(make_record, report_html):
    y = np.arange(60) % 3
    scores = np.eye(3)[y] * 0.6 + RNG.random((60, 3)) * 0.4
    metrics = evaluate_utility(kind="multiclass", label_names=["0", "1", "2"], val_labels=y, val_scores=scores,
                               test_labels=y, test_scores=scores, n_resamples=50, ordinal=True)
    records = [make_record("np_seed0", "np", metrics=metrics)]
    html = report_html(records, task="multiclass", names=("0", "1", "2"), ordinal=True)
    summary = _section(html, "summary")
    assert "argmax" in summary and "Youden" not in summary
    assert "quadratic-weighted kappa" in summary and "quadratic-weighted kappa" in _section(html, "utility")


# --------------------------------------------------------------------------------------- citations, docs, phone


def test_papers_are_cited_by_authors_and_year_and_methods_lives_in_the_repository(two_arms, report_html):
    shift = PrivacyCard(mechanism="scalar_shift", is_dp=False,
                        statement="NOT DP: one brightness shift per image (reproduction of 000_56c2431ae4df8d10.txt)")
    records = [*two_arms, two_arms[1].model_copy(update={"run_id": "shift_seed0", "arm": "shift",
                                                         "mechanism": "scalar_shift", "privacy": shift})]
    html = report_html(records)
    assert not re.search(r"00\d_[0-9a-f]{16}\.txt", html)
    assert "Singh, Sikka, Kotti and Trask 2020" in html and "Tayebi Arasteh, Ziller et al. 2023" in html
    assert "docs/METHODS.md" in html
    methods = REPO / "docs" / "METHODS.md"
    assert methods.is_file() and "## 4. Utility metrics" in methods.read_text()
    readme = (REPO / "README.md").read_text()
    assert "](docs/METHODS.md)" in readme and "../shared/docs/METHODS.md" not in readme


def _smallest_type_on_a_phone(fig) -> float:
    """The smallest text of a narrow figure, in CSS px, when the figure is shown PHONE_WIDTH px wide."""
    shown = PHONE_WIDTH / (fig.get_figwidth() * fig.dpi)
    sizes = [t.get_fontsize() * fig.dpi / 72 * shown for t in fig.findobj(Text) if t.get_visible() and t.get_text()]
    return min(sizes)


def test_figures_stay_readable_on_a_phone(tmp_path, two_arms, report_html):
    laplace = PrivacyCard(mechanism="pixel_laplace", is_dp=True, statement="eps_image = 8,192", epsilon=8192.0,
                          epsilon_image=8192.0, epsilon_pixel=2.0, delta=0.0)
    records = [*two_arms, two_arms[1].model_copy(update={"run_id": "pixel-laplace_b0.5_seed0",
                                                         "arm": "pixel-laplace", "mechanism": "pixel_laplace",
                                                         "privacy": laplace})]
    images = RNG.random((4, 1, 16, 16))
    est = Estimate(value=0.8, low=0.7, high=0.9)
    figures = [auroc_figure(records, narrow=True),
               group_figure(["[0,30)", "[30,60)", "[60,70)"], [("a run (ε 1)", [est] * 3), ("b", [est] * 3)],
                            ylabel="test AUROC", title="AUROC by age", narrow=True),
               ldp_examples_figure([("pixel-laplace\nε 8,192", images, images)], narrow=True),
               cam_grid_figure(images, None, [("run\nε 1", images[:, 0])], ["a", "b", "c", "d"], narrow=True)]
    for fig in figures:
        assert _smallest_type_on_a_phone(fig) >= 10.0
        assert fig.get_figwidth() * fig.dpi == pytest.approx(2 * 390, abs=20)      # sharp on a 2x phone screen
    assert FONT[True][1] >= FONT[False][1]
    html = report_html(records)
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in html
    assert html.count('<source media="(max-width: 700px)"') >= 3          # AUROC figure and both fairness figures
    assert (tmp_path / "auroc_vs_epsilon_narrow.png").stat().st_size > 1000


def _multiclass_pair(release, make_record, private_scores, y):
    """A non-private run scored well and a DP run scored ``private_scores`` on three classes ``y`` (validation = test),
    released as a study releases them (`release`); their records."""
    rng = np.random.default_rng(6)
    good = np.eye(3)[y] * 0.7 + rng.random((len(y), 3)) * 0.3
    records = []
    for run_id, arm, mechanism, scores in (("np_seed0", "np", "none", good),
                                           ("dp_eps1_C1_seed0", "dp", "dp_sgd", private_scores(good))):
        metrics = evaluate_utility(kind="multiclass", label_names=["a", "b", "c"], val_labels=y, val_scores=scores,
                                   test_labels=y, test_scores=scores, n_resamples=50)
        records.append(release(make_record(run_id, arm, mechanism, eps=1.0 if mechanism == "dp_sgd" else None,
                                           metrics=metrics),
                               predictions=dict(test_scores=scores, test_labels=y,
                                                test_patient_ids=np.arange(len(y)).astype(str))))
    return records


def test_multiclass_arms_are_read_as_more_wrong_of_every_100_images_by_argmax(release, make_record, report_html):
    y = np.arange(90) % 3
    rng = np.random.default_rng(8)
    records = _multiclass_pair(release, make_record, lambda good: np.eye(3)[y] * 0.2 + rng.random((90, 3)) * 0.8, y)
    wrong = round(100 * (records[0].metrics["test_accuracy"] - records[1].metrics["test_accuracy"]))
    assert wrong > 0
    clinical = _text(_section(report_html(records, task="multiclass", names=("a", "b", "c")), "clinical"))
    assert "accuracy change (argmax), per 100" in clinical
    assert "negative worse: -5 per 100 in accuracy means about 5 more wrong of every 100." in clinical  # the key
    assert f"the model gets about {wrong} more wrong of every 100 test images (argmax)" in clinical
    assert "sensitivity" not in clinical and "Youden" not in clinical
    # without rates, the 'Without privacy' line gives the non-private run's accuracy, with its interval
    accuracy = records[0].metrics["test_accuracy"]
    assert re.search(rf"np_seed0: test AUROC [^;]*; accuracy {accuracy:.3f} \[", clinical), clinical


def test_a_multiclass_run_that_never_chooses_a_class_is_flagged_in_the_table_and_the_reading(release, make_record,
                                                                                             report_html):
    y = np.arange(90) % 3
    records = _multiclass_pair(release, make_record, lambda good: good * np.array([1.0, 1.0, 0.0]), y)  # never "c"
    assert [r.metrics["test_predicted_classes"] for r in records] == [3, 2]
    html = report_html(records, task="multiclass", names=("a", "b", "c"))
    table = _section(html, "utility").split("</table>")[0]
    assert table.count("⚠ classes never chosen") == 1 and "one decision for all" not in table
    assert "dp_eps1_C1_seed0 chooses only 2 of the 3 classes for the test images (argmax)" in _text(
        _section(html, "utility"))
    reading = _section(html, "clinical").split("<tbody>")[1]          # the reading points to it
    assert "1 warning about dp_eps1_C1_seed0" in _text(reading) and 'href="#warnings"' in reading


def test_a_test_auroc_whose_redraws_are_mostly_undefined_says_so_in_the_utility_table(release, make_record,
                                                                                      report_html):
    """On a test set of two patients, one of each class, about half the redraws draw one class and have no AUROC:
    the table showed 1.000 [1.000, 1.000] as if certain, and only a Python warning on the terminal said otherwise."""
    y, s = np.array([0, 1]), np.array([0.2, 0.9])
    with pytest.warns(RuntimeWarning):             # the terminal's warnings of undefined redraws
        metrics = evaluate_utility(kind="binary", label_names=["normal", "pneumonia"], val_labels=y, val_scores=s,
                                   test_labels=y, test_scores=s, n_resamples=50, seed=0)
    undefined = metrics["test_auroc_undefined_redraws"]
    assert undefined > 5
    run = release(make_record("np_seed0", "np", "none", metrics=metrics),
                  predictions=dict(test_scores=s, test_labels=y, test_patient_ids=np.array(["a", "b"])))
    table = _text(_section(report_html([run], resamples=50), "utility").split("</table>")[0])
    assert f"1.000 [1.000,\u00a01.000]  ({undefined} of 50 redraws undefined)" in table


def test_a_test_auroc_defined_in_every_redraw_has_no_such_note(report_html, two_arms):
    table = _section(report_html(two_arms), "utility").split("</table>")[0]
    assert "redraws undefined" not in table


def test_multilabel_arms_are_read_as_findings_decided_right_at_each_findings_own_threshold(release, make_record,
                                                                                           report_html):
    """A multilabel study's clinical section counts wrong decisions over (image, finding) pairs, each finding at its
    own validation threshold: an accuracy column, no sensitivity or specificity (no one positive class), and the
    reading's count is the paired accuracy change per 100 findings."""
    rng = np.random.default_rng(3)
    y = (rng.random((120, 2)) < 0.5).astype(int)
    records = []
    for run_id, arm, mechanism, signal in (("np_seed0", "np", "none", 0.6), ("dp_eps1_C1_seed0", "dp", "dp_sgd", 0.2)):
        scores = np.clip(y * signal + rng.random((120, 2)) * (1 - signal), 0, 1)
        metrics = evaluate_utility(kind="multilabel", label_names=["effusion", "nodule"], val_labels=y,
                                   val_scores=scores, test_labels=y, test_scores=scores, n_resamples=50)
        records.append(release(make_record(run_id, arm, mechanism, eps=1.0 if mechanism == "dp_sgd" else None,
                                           metrics=metrics),
                               predictions=dict(test_scores=scores, test_labels=y,
                                                test_patient_ids=np.arange(120).astype(str))))
    wrong = round(100 * (records[0].metrics["test_accuracy"] - records[1].metrics["test_accuracy"]))
    assert wrong > 0
    clinical = _text(_section(report_html(records, task="multilabel", names=("effusion", "nodule")), "clinical"))
    assert ("Accuracy is the share of findings decided right, each at its threshold chosen on the validation split "
            "(Youden's J)." in clinical)
    assert "accuracy change, per 100" in clinical and "(argmax)" not in clinical
    assert "sensitivity" not in clinical and "specificity" not in clinical
    assert f"the model gets about {wrong} more wrong of every 100 findings" in clinical


def test_a_binary_run_without_its_threshold_reads_as_its_auroc_change_with_dashes_for_the_rates(release, make_record,
                                                                                                report_html):
    """A run an older dpmed recorded without its validation threshold, whose predictions.npz holds no validation
    split, cannot be decided at its own threshold again: its rates have no paired change. Both tables show "–" in
    their places and the reading gives the AUROC change alone. The non-private run separates the classes (AUROC 1);
    the private one scores every normal case 0 and half the pneumonia cases 1, half 0 (AUROC 1/2 + 1/2 x 1/2 =
    0.75), a change of -0.250."""
    y = np.r_[np.zeros(60, int), np.ones(60, int)]
    private_scores = np.r_[np.zeros(60), np.ones(30), np.zeros(30)]
    records = []
    for run_id, arm, mechanism, scores in (("np_seed0", "np", "none", y.astype(float)),
                                           ("dp_eps1_C1_seed0", "dp", "dp_sgd", private_scores)):
        metrics = evaluate_utility(kind="binary", label_names=["normal", "pneumonia"], val_labels=y,
                                   val_scores=scores, test_labels=y, test_scores=scores, n_resamples=50)
        if mechanism == "dp_sgd":
            del metrics["threshold"]
        records.append(release(make_record(run_id, arm, mechanism, eps=1.0 if mechanism == "dp_sgd" else None,
                                           metrics=metrics),
                               predictions=dict(test_scores=scores, test_labels=y,
                                                test_patient_ids=np.arange(120).astype(str))))
    html = report_html(records)
    row = re.search(r'<tr><td data-label="private arm">dp_eps1_C1<br>.*?</tr>', _section(html, "clinical"),
                    re.S).group(0)
    cells = re.findall(r'<td class=num data-label="[^"]*">([^<]*)</td>', row)
    assert cells[0].startswith("-0.250 [") and cells[1:] == ["–", "–"], cells
    reading = re.search(r'<td data-label="reading">([^<]*)', row).group(1)
    assert reading == ("At ε\u00a00.99 (δ\u00a01e‑5, PLD, add/remove one image) the model changes the test AUROC by "
                       "-0.250.")
    compared = re.search(r'<tr><td data-label="run">dp_eps1_C1_seed0</td>.*?</tr>', _section(html, "comparisons"),
                         re.S).group(0)
    cells = re.findall(r'<td data-label="[^"]*" class=num>([^<]*)</td>', compared)
    assert cells[0].startswith("-0.250 [") and cells[2:] == ["–"] * 4, cells


def test_over_seeds_a_rate_one_seed_cannot_pair_reads_as_a_dash_not_as_the_other_seeds_mean(release, make_record,
                                                                                            report_html):
    """Seeds 0 and 1; the private run of seed 1 was recorded without its validation threshold and saved no
    validation split, so only seed 0 has paired rate changes. A mean over seeds of one seed would be no mean: the
    rate cells read "–", the AUROC cell the mean and range over both seeds, and the reading the AUROC change. Both
    private runs score every normal case 0 and half the pneumonia cases 1 (AUROC 0.75); the non-private runs
    separate the classes (AUROC 1): -0.250 for each seed."""
    y = np.r_[np.zeros(60, int), np.ones(60, int)]
    half = np.r_[np.zeros(60), np.ones(30), np.zeros(30)]
    records = []
    for seed in (0, 1):
        for run_id, arm, mechanism, scores in ((f"np_seed{seed}", "np", "none", y.astype(float)),
                                               (f"dp_eps1_C1_seed{seed}", "dp", "dp_sgd", half)):
            val = {} if seed == 1 and mechanism == "dp_sgd" else dict(
                val_scores=scores, val_labels=y, val_patient_ids=np.arange(120).astype(str))
            metrics = evaluate_utility(kind="binary", label_names=["normal", "pneumonia"], val_labels=y,
                                       val_scores=scores, test_labels=y, test_scores=scores, n_resamples=50)
            if not val:
                del metrics["threshold"]
            records.append(release(make_record(run_id, arm, mechanism, eps=1.0 if mechanism == "dp_sgd" else None,
                                               seed=seed, metrics=metrics),
                                   predictions=dict(test_scores=scores, test_labels=y,
                                                    test_patient_ids=np.arange(120).astype(str), **val)))
    row = re.search(r'<tr><td data-label="private arm">dp_eps1_C1<br>.*?</tr>', _section(report_html(records),
                                                                                         "clinical"), re.S).group(0)
    assert "<small>seeds 0, 1</small>" in row
    cells = re.findall(r'<td class=num data-label="[^"]*">([^<]*)</td>', row)
    assert cells == ["-0.250 [-0.250,\u00a0-0.250] (seed range -0.250 to -0.250)", "–", "–"], cells
    reading = re.search(r'<td data-label="reading">([^<]*)', row).group(1)
    assert reading.startswith("Over 2 seeds, at ε") and reading.endswith(
        " the model changes the test AUROC by on average -0.250 (95% t interval over seeds [-0.250, -0.250])."), \
        reading


def test_a_private_seed_whose_non_private_run_is_missing_is_read_alone_not_against_another_seed(
        scored_run, scores, labels, report_html):
    """Seeds 0 and 1, with the non-private run of seed 1 failed: the DP run of seed 1 has nothing to be paired with.
    The summary's reading gives its AUROC alone and says so (never against seed 0's run); the opening table's row is
    seed 0's only. Its test scores are 0 for every normal case and 1 for half the pneumonia cases, 0 for the rest:
    AUROC 1/2 + 1/2 x 1/2 = 0.750."""
    rng = np.random.default_rng(4)
    y_val, y = labels
    half = (np.r_[np.zeros(40), np.ones(20), np.zeros(20)], np.r_[np.zeros(60), np.ones(30), np.zeros(30)])
    records = [scored_run("np_seed0", "np", "none", scores=(y_val * 1.0, y * 1.0)),
               scored_run("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0, scores=scores(0.5, rng)),
               scored_run("dp_eps1_C1_seed1", "dp", "dp_sgd", eps=1.0, seed=1, scores=half)]
    html = report_html(records)
    items = re.findall(r"<li>(.*?)</li>", _section(html, "summary").split('<ul class="reading">')[1].split("</ul>")[0])
    alone = [item for item in items if item.startswith("dp_eps1_C1_seed1 ")]
    assert alone == ["dp_eps1_C1_seed1 (ε\u00a00.99 (δ\u00a01e‑5, PLD, add/remove one image)): 0.750; no non-private "
                     "run of seed 1 to compare with."], items
    clinical = _section(html, "clinical")
    assert re.findall(r"<small>(seeds? [^<]*)</small>", clinical) == ["seed 0"]


def test_numbers_and_run_names_stay_whole_and_tables_of_runs_stack_on_a_phone(two_arms, report_html):
    from dpmed.comparisons import PairedDifference
    from dpmed.reporting.inputs import eps_label, p_text

    assert eps_label(two_arms[1].privacy) == ("ε\u00a00.99 (δ\u00a01e\u20115, PLD, add/remove one image)")  # no break
                                                                                                 # inside a number
    assert eps_label(two_arms[0].privacy) == "no privacy (ε\u00a0=\u00a0∞)"
    floor = PairedDifference(value=-0.2, low=-0.3, high=-0.1, p_value=2 / 1001, p_floor=2 / 1001, defined_redraws=1000)
    assert p_text(floor) == "≤\u00a00.002"
    html = report_html(two_arms)
    utility = _section(html, "utility")
    table = utility[utility.index('<table class="stack">'):]
    heads = re.findall(r"<th[^>]*>(.*?)</th>", table.split("</tr>")[0])
    first_row = table.split("</tr>")[1]
    assert re.findall(r'data-label="([^"]*)"', first_row) == [re.sub(r"<[^>]+>", "", h) for h in heads]
    for anchor in ("fairness", "comparisons", "provenance"):
        assert '<table class="stack">' in _section(html, anchor), anchor
    assert "table.stack td::before{content:attr(data-label)" in html
    assert '<details class="resolved">' in _section(html, "provenance")                  # the YAML folded


def test_a_group_with_one_class_is_named_where_equalised_odds_leaves_it_out(scored_run, scores, labels, attributes,
                                                                           report_html):
    """A single negative image under 30: equalised odds cannot compare the group (no positive, so no TPR) and leaves
    it out, which the report and results.csv must say; in about e^-1 of the redraws the group is absent, which
    leaves the demographic parity difference undefined there, and its cell must say how many redraws."""
    from dpmed.evaluation.fairness import evaluate_fairness, fairness_columns
    y_val, y = labels
    age = np.where(attributes["age"] < 30, 45.0, attributes["age"])
    age[np.flatnonzero(y == 0)[0]] = 25.0                                  # the group under 30: one negative
    val, test = scores(0.6, np.random.default_rng(2))
    run = scored_run("dp-sgd_eps8_C1_seed0", "dp-sgd", "dp_sgd", eps=8.0, scores=(val, test))
    block = evaluate_fairness(kind="binary", val_labels=y_val, val_scores=val, test_labels=y, test_scores=test,
                              attributes={**attributes, "age": age}, n_resamples=200)
    entry = block.attributes["age"]
    assert entry.equalized_odds_excluded_groups == ["[0,30)"] and entry.equalized_odds_difference.undefined_redraws == 0
    lost = entry.demographic_parity_difference.undefined_redraws
    assert 40 < lost < 110
    assert fairness_columns(block)["fairness[age]_equalized_odds_excluded"] == "[0,30)"
    part = _text(_section(report_html([run.model_copy(update={"fairness": block})]), "fairness")).split("By age")[1]
    assert "Equalised odds compares only the groups with both classes on test; left out: [0,30)" in part
    assert f"({lost} of 200 redraws undefined)" in part and "earlier version" not in part
    assert "a group is absent leaves the demographic parity difference undefined" in part
    older = entry.model_copy(update={"demographic_parity_difference": entry.demographic_parity_difference.model_copy(
        update={"undefined_redraws": None})})                          # as records before the count read
    older_block = block.model_copy(update={"attributes": {**block.attributes, "age": older}})
    part = _text(_section(report_html([run.model_copy(update={"fairness": older_block})]), "fairness"))
    assert "redraws undefined" not in part.split("By age")[1]
    assert "dp-sgd_eps8_C1_seed0: written by an earlier version of dpmed" in part.split("By age")[1]


def test_a_worst_group_interval_that_lost_many_redraws_says_how_many(scored_run, scores, labels, attributes,
                                                                    two_arms, report_html):
    """One positive patient under 30: in about e^-1 of the redraws it is not drawn, the group has one class, and no
    group is the worst (`dpmed.evaluation.fairness`). The interval then describes the other redraws only, and the
    table must say how many were left out, as the utility metrics warn above a tenth."""
    from dpmed.evaluation.fairness import evaluate_fairness
    assert "redraws undefined" not in _section(report_html(two_arms), "fairness")   # none where none are lost
    y_val, y = labels
    age = attributes["age"].copy()
    age[np.flatnonzero(y == 1)[0]] = 25.0                    # the group under 30: 8 negatives and 1 positive
    val, test = scores(0.6, np.random.default_rng(2))
    run = scored_run("dp-sgd_eps8_C1_seed0", "dp-sgd", "dp_sgd", eps=8.0, scores=(val, test))
    block = evaluate_fairness(kind="binary", val_labels=y_val, val_scores=val, test_labels=y, test_scores=test,
                              attributes={**attributes, "age": age}, n_resamples=200)
    lost = block.attributes["age"].worst_group_auroc.undefined_redraws
    assert 40 < lost < 110
    html = report_html([run.model_copy(update={"fairness": block})])
    assert f"({lost} of 200 redraws undefined)" in _text(_section(html, "fairness"))


def test_a_change_that_rounds_to_none_reads_as_a_sentence_and_as_0():
    """Before: "the model gets on average about as many findings as without privacy" (wrong findings, or right?),
    and "-0 (seeds -7 to +7)" in the table's cells."""
    from dpmed.comparisons import SeedSummary, ValueSummary
    from dpmed.reporting.clinical import _per100, case_sentence
    from dpmed.reporting.inputs import signed_text

    def summary(mean, low, high):
        return SeedSummary(mean=mean, std=0.01, min=low, max=high, n_seeds=2)

    seeds = ValueSummary(label="eps 8", arm="dp", seeds=[0, 1], epsilon=8.0,
                         auroc_difference=summary(-0.01, -0.02, 0.0), accuracy_difference=summary(-0.002, -0.07, 0.06),
                         significant_seeds=0)
    sentence = case_sentence(privacy="ε 8", kind="multilabel", positive=None, negative=None, level="95%", seeds=seeds)
    assert sentence == ("Over 2 seeds, at ε 8 the model gets on average about as many findings wrong as "
                        "without privacy (seed range: 6 fewer to 7 more)."), sentence
    worse = seeds.model_copy(update={"accuracy_difference": summary(-0.05, -0.07, -0.03)})
    sentence = case_sentence(privacy="ε 8", kind="multilabel", positive=None, negative=None, level="95%", seeds=worse)
    assert sentence == ("Over 2 seeds, at ε 8 the model gets on average about 5 more wrong of every 100 findings "
                        "(seed range: 3 to 7 more)."), sentence
    assert [_per100(v) for v in (-0.004, 0.004, -0.0, -0.07, 0.07, None)] == ["0", "0", "0", "-7", "+7", "–"]
    assert [signed_text(v) for v in (-0.0004, 0.0004, -0.012, 0.012)] == ["0.000", "0.000", "-0.012", "+0.012"]


def test_over_seeds_a_change_reads_as_a_direction_only_where_its_t_interval_excludes_0():
    """Before, three seeds that all missed more pneumonia cases read "misses on average about 5 more ... (seeds: 2 to
    8 more)", as if the range were an interval: 3 seeds' range holds the true mean 75 % of the time. The sentence now
    gives the t interval over seeds (2 df: t 4.303) as the interval and the range as the range, and says where that
    interval holds no change."""
    from dpmed.comparisons import PairedDifference, SeedSummary, ValueSummary
    from dpmed.evaluation.paired import seed_summary
    from dpmed.reporting.clinical import _paired_cell, _seeds_cell, case_sentence

    def arm(sensitivity, specificity):
        return ValueSummary(label="eps 1", arm="dp", seeds=[0, 1, 2], epsilon=1.0, significant_seeds=3,
                            auroc_difference=seed_summary([-0.02, -0.03, -0.04]),
                            sensitivity_difference=seed_summary(sensitivity),
                            specificity_difference=seed_summary(specificity))

    # sensitivity -0.05 +- 4.303 * 0.03 / sqrt(3) = -0.05 +- 0.0745: missed -2.5 to +12.5 per 100, holds 0;
    # specificity -0.05 +- 4.303 * 0.01 / sqrt(3) = -0.05 +- 0.0248: 2.52 to 7.48 more false alarms, excludes 0
    sentence = case_sentence(privacy="ε 1", kind="binary", positive="pneumonia", negative="normal", level="95%",
                             seeds=arm([-0.02, -0.05, -0.08], [-0.04, -0.05, -0.06]))
    assert sentence == ("Over 3 seeds, at ε 1 no difference is shown in the pneumonia cases the model misses (95% t "
                        "interval over seeds: 2 fewer to 12 more of every 100, which includes no change; on average "
                        "about 5 more; seed range: 2 to 8 more), and it wrongly flags on average about 5 more of "
                        "every 100 normal cases as pneumonia (95% t interval over seeds: 3 to 7 more; seed range: 4 "
                        "to 6 more)."), sentence
    # a reader who stops early must not read a direction that the interval does not show: the verdict comes first
    both = case_sentence(privacy="ε 1", kind="binary", positive="pneumonia", negative="normal", level="95%",
                         seeds=arm([-0.02, -0.05, -0.08], [-0.02, -0.05, -0.08]))
    assert both.startswith("Over 3 seeds, at ε 1 no difference is shown in the pneumonia cases the model misses ("), \
        both
    assert ", and no difference is shown in the normal cases it wrongly flags as pneumonia (95% t interval" in both
    assert "misses on average" not in both and "flags on average" not in both
    # -0.001 to +0.001: a t interval of -0.25 to +0.25 per 100 rounds to "no change" at both ends, which must not
    # read "no change, which includes no change"
    tiny = case_sentence(privacy="ε 1", kind="binary", positive="pneumonia", negative="normal", level="95%",
                         seeds=arm([-0.001, 0.0, 0.001], [-0.04, -0.05, -0.06]))
    assert tiny.startswith("Over 3 seeds, at ε 1 no difference is shown in the pneumonia cases the model misses (95% "
                           "t interval over seeds: no change; on average about as many; seed range: "), tiny
    assert _seeds_cell(seed_summary([-0.02, -0.05, -0.08]), cases=True) == "-5 [-12,\u00a0+2] (seed range -8 to -2)"
    # an interval end clear of 0 that rounds to 0 keeps its side: "[-14, 0]" read as holding no change beside a
    # sentence saying "under 1 to 14 more"
    clear = SeedSummary(mean=-0.07, std=0.005, min=-0.075, max=-0.065, n_seeds=2, low=-0.14, high=-0.004)
    assert _seeds_cell(clear, cases=True) == "-7 [-14,\u00a0-0.4] (seed range -8 to -6)"
    assert _seeds_cell(clear.model_copy(update={"low": 0.0004, "high": 0.14}), cases=True).startswith(
        "-7 [+0.04,\u00a0+14]")
    assert _paired_cell(PairedDifference(value=-0.05, low=-0.12, high=0.0, p_value=0.05, defined_redraws=200),
                        cases=True) == "-5 [-12,\u00a00]"                # an end at 0 exactly is 0
    # so does an end of the seeds' range: "seed range -8 to 0" beside a sentence saying "seed range: under 1 to 8
    # more" read as a seed that showed no change
    spread = clear.model_copy(update={"min": -0.08, "max": -0.004})
    assert _seeds_cell(spread, cases=True) == "-7 [-14,\u00a0-0.4] (seed range -8 to -0.4)"
    # AUROC alone (no thresholds): -0.030 +- 4.303 * 0.01 / sqrt(3) = [-0.055, -0.005]
    auroc_only = arm([-0.05], [-0.05]).model_copy(update={"sensitivity_difference": None,
                                                          "specificity_difference": None})
    assert case_sentence(privacy="ε 1", kind="binary", positive="pneumonia", negative="normal", level="95%",
                         seeds=auroc_only) == ("Over 3 seeds, at ε 1 the model changes the test AUROC by on average "
                                               "-0.030 (95% t interval over seeds [-0.055, -0.005]).")
    # -0.0133 +- 4.303 * 0.0208 / sqrt(3) = [-0.065, +0.038]: holds 0, so the verdict leads and the mean follows
    unsure = auroc_only.model_copy(update={"auroc_difference": seed_summary([-0.03, 0.01, -0.02])})
    assert case_sentence(privacy="ε 1", kind="binary", positive="pneumonia", negative="normal", level="95%",
                         seeds=unsure) == ("Over 3 seeds, at ε 1 no difference is shown in the test AUROC (95% t "
                                           "interval over seeds [-0.065, +0.038], which includes 0; on average "
                                           "-0.013).")


@pytest.mark.parametrize("confidence, seeds", [(0.95, 2), (0.90, 3)])
def test_the_t_named_beside_an_interval_over_seeds_is_the_one_it_was_drawn_with(scored_run, scores, report_html,
                                                                                confidence, seeds):
    """The opening paragraph, the comparison and the figure's caption each said "t is 4.30 for 3" (95%, 3 seeds)
    whatever the study: beside 2 seeds' intervals (t 12.71) or a 90% study's (t 2.92 for 3) it gave the reader a
    width the intervals do not have."""
    from scipy.stats import t

    rng = np.random.default_rng(3)
    records = [scored_run(f"np_seed{s}", "np", "none", seed=s, scores=scores(0.8 - 0.1 * s, rng))
               for s in range(seeds)]
    records += [scored_run(f"dp_eps1_C1_seed{s}", "dp", "dp_sgd", eps=1.0, seed=s, scores=scores(0.3 + 0.1 * s, rng))
                for s in range(seeds)]
    text = _text(report_html(records, confidence=confidence))
    named = f"t is {t.ppf((1 + confidence) / 2, seeds - 1):.2f} for {seeds} seeds"
    assert text.count(named) == 3, re.findall(r"t is [^)]*", text)        # opening table, comparison, caption
    assert "t is 4.30 for 3)" not in text
    # the range's share, 1 - 2 / 2^n, is the seeds' too: "3 seeds' range ... only 75%" stood beside 2 seeds' rows
    share = f"{seeds} seeds' range holds the true mean {100 * (1 - 2 ** (1 - seeds)):.0f}% of the time"
    assert text.count(share) == 2 and "only 75%" not in text                # opening table, comparison


def test_a_seeds_range_is_never_said_to_hold_the_true_mean_more_often_than_it_does():
    """From 9 seeds on, 1 - 2 / 2^n rounded to a whole percent read "holds the true mean 100% of the time": a
    certainty no range has. The share shown is never above the share itself, and never 100%."""
    from dpmed.reporting.inputs import range_text

    for n in range(2, 30):
        shown = float(re.search(r"holds the true mean (\d+)% of the time", range_text([n])).group(1))
        assert shown < 100 and shown <= 100 * (1 - 2.0 ** (1 - n)), (n, shown)


def test_the_opening_paragraph_says_in_plain_words_what_an_interval_over_seeds_is(scored_run, scores, report_html):
    """A clinician met "its 95% Student t interval over seeds (n - 1 degrees of freedom ...)" with nothing to say
    what a seed is or what the interval promises. The paragraph now says it in words before the statistics' names."""
    rng = np.random.default_rng(4)
    records = [scored_run(f"np_seed{s}", "np", "none", seed=s, scores=scores(0.8, rng)) for s in range(3)]
    records += [scored_run(f"dp_eps1_C1_seed{s}", "dp", "dp_sgd", eps=1.0, seed=s, scores=scores(0.4, rng))
                for s in range(3)]
    opening = _text(_section(report_html(records), "clinical")).split("Sensitivity is")[0]
    plain = opening.index("In plain words:")
    assert plain < opening.index("Student t") and plain < opening.index("degrees of freedom")
    assert "each seed is one draw of it" in opening and "many such trainings" in opening
    assert "which is what they can tell" not in opening                     # said once


def test_a_summary_of_several_seeds_gives_each_arms_verdict_across_seeds_beside_its_seeds_own(scored_run, scores,
                                                                                              report_html):
    """The summary listed each seed's verdict ("lower than without privacy" for 3 of 3 local-DP seeds) and nothing
    across seeds, where the t interval over seeds held 0: a reader took three test sets' verdicts for the arm's.
    It now says what a line's verdict covers and gives each arm's verdict across seeds, as the comparison does."""
    rng = np.random.default_rng(6)
    records = [scored_run(f"np_seed{s}", "np", "none", seed=s, scores=scores(q, rng))
               for s, q in ((0, 0.9), (1, 0.9), (2, 0.55))]
    records += [scored_run(f"dp_eps1_C1_seed{s}", "dp", "dp_sgd", eps=1.0, seed=s, scores=scores(q, rng))
                for s, q in ((0, 0.3), (1, 0.85), (2, 0.9))]
    html = report_html(records)
    verdict = re.search(r"<tr><td[^>]*>dp_eps1_C1</td><td[^>]*>[^<]*</td><td[^>]*>([^<]*)</td>",
                        _section(html, "comparisons")).group(1)
    summary = _text(_section(html, "summary"))
    assert "Each line above is one seed's run" in summary
    assert f"Across seeds, by the 95% t interval over seeds of the AUROC change (the opening table): " \
           f"dp_eps1_C1: {verdict}." in summary, summary


def test_a_reference_at_chance_is_said_where_its_seeds_changes_are_read(scored_run, scores, report_html):
    """With 3 seeds, one non-private run at 0.551 [0.475, 0.639] made its seed's private runs read as gains of +0.30
    and set the interval over seeds, and the report said nothing of it (only a reference wholly below 0.5 is
    flagged). The opening table now names a reference whose interval holds chance; one clear of it is not named."""
    rng = np.random.default_rng(7)
    records = [scored_run(f"np_seed{s}", "np", "none", seed=s, scores=scores(q, rng))
               for s, q in ((0, 0.9), (1, 0.9), (2, 0.0))]
    records += [scored_run(f"dp_eps1_C1_seed{s}", "dp", "dp_sgd", eps=1.0, seed=s, scores=scores(0.8, rng))
                for s in range(3)]
    auroc = {r.run_id: r.estimate("test_auroc") for r in records}
    at_chance = [f"np_seed{s}" for s in range(3) if auroc[f"np_seed{s}"].low <= 0.5 <= auroc[f"np_seed{s}"].high]
    assert at_chance == ["np_seed2"], auroc                                  # the scores made one reference fail
    clinical = _text(_section(report_html(records), "clinical"))
    assert "np_seed2: the test AUROC interval includes 0.5, chance" in clinical
    assert "its seed's changes in the table below" in clinical
    assert "np_seed0: the test AUROC interval" not in clinical and "np_seed1: the test AUROC interval" not in clinical


def test_a_reference_at_chance_that_decides_one_class_is_still_said_at_chance(scored_run, scores, report_html):
    """A model that learned nothing often also decides one class for every test image. That warning (about its
    decisions) says nothing of its AUROC at chance, and it left the opening table silent on what the reference's seed's
    changes measure: only a reference wholly below chance has its AUROC flagged elsewhere."""
    from dpmed.comparisons import decides_one_class

    rng = np.random.default_rng(7)
    val, test = scores(0.0, rng)
    records = [scored_run("np_seed0", "np", "none", seed=0, scores=(val, test + 2.0)),     # all above its threshold
               scored_run("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0, seed=0, scores=scores(0.8, rng))]
    auroc = records[0].estimate("test_auroc")
    assert decides_one_class(records[0]) and auroc.low <= 0.5 <= auroc.high, auroc
    clinical = _text(_section(report_html(records), "clinical"))
    assert "np_seed0: the test AUROC interval includes 0.5, chance" in clinical


def test_an_unchanged_false_alarm_rate_reads_as_one_sentence_with_its_interval():
    """Before: "wrongly flags about as many class_0 cases as class_1 as without privacy (95% CI: none)"."""
    from dpmed.comparisons import Difference, PairedDifference
    from dpmed.reporting.clinical import case_sentence

    def paired(value, low, high):
        return PairedDifference(value=value, low=low, high=high, p_value=1.0, defined_redraws=200)

    single = Difference(run_id="dp_seed0", label="eps 8", arm="dp", mechanism="dp_sgd", seed=0,
                        reference_run="base_seed0", epsilon=8.0, auroc_difference=paired(-0.01, -0.02, 0.0),
                        sensitivity_difference=paired(-0.05, -0.12, 0.01), specificity_difference=paired(0, 0, 0))
    sentence = case_sentence(privacy="ε 8", kind="binary", positive="class_1", negative="class_0", level="95%",
                             single=single)
    assert sentence == ("At ε 8 the model misses about 5 more of every 100 class_1 cases (95% CI: 1 fewer to 12 more) "
                        "and wrongly flags about as many class_0 cases as without privacy (95% CI: no change).")


def test_without_rates_the_sentence_gives_the_auroc_change_signed_and_0_000_where_it_rounds_to_none():
    """A run compared without thresholds (no rates) reads as its AUROC change. Before, a change that rounds to none
    read "by -0.000", a sign the table's cells never show."""
    from dpmed.comparisons import Difference, PairedDifference, SeedSummary, ValueSummary
    from dpmed.reporting.clinical import case_sentence

    def single(value):
        paired = PairedDifference(value=value, low=value - 0.01, high=value + 0.01, p_value=1.0, defined_redraws=200)
        return Difference(run_id="dp_seed0", label="eps 8", arm="dp", mechanism="dp_sgd", seed=0,
                          reference_run="base_seed0", epsilon=8.0, auroc_difference=paired)

    def sentence(**kw):
        return case_sentence(privacy="ε 8", kind="binary", positive="pneumonia", negative="normal", level="95%", **kw)

    assert sentence(single=single(-0.0004)) == "At ε 8 the model changes the test AUROC by 0.000."
    assert sentence(single=single(-0.012)) == "At ε 8 the model changes the test AUROC by -0.012."
    undefined = PairedDifference(value=None, low=None, high=None, p_value=None, defined_redraws=0)
    assert sentence(single=single(0.0).model_copy(update={"auroc_difference": undefined})) == (
        "At ε 8 the model has no defined AUROC change.")
    seeds = ValueSummary(label="eps 8", arm="dp", seeds=[0, 1], epsilon=8.0, significant_seeds=0,
                         auroc_difference=SeedSummary(mean=0.02, std=0.01, min=0.01, max=0.03, n_seeds=2))
    assert sentence(seeds=seeds) == "Over 2 seeds, at ε 8 the model changes the test AUROC by on average +0.020."
    assert sentence(single=single(0.0004), not_dp=("shift_b1", "not DP because it adds no noise")) == (
        "shift_b1, which is not DP because it adds no noise, changes the test AUROC by 0.000 against the "
        "non-private run.")


def test_a_sentence_rounds_cases_to_nearest_and_orders_an_interval_below_zero_from_near_to_far():
    """12.7 more missed reads 13, an interval of 3.6 to 19.6 reads 4 to 20; fewer false alarms read "4 to 20
    fewer", small to large, like more."""
    from dpmed.comparisons import Difference, PairedDifference
    from dpmed.reporting.clinical import case_sentence

    def paired(value, low, high):
        return PairedDifference(value=value, low=low, high=high, p_value=0.01, defined_redraws=200)

    single = Difference(run_id="dp_seed0", label="eps 8", arm="dp", mechanism="dp_sgd", seed=0,
                        reference_run="base_seed0", epsilon=8.0, auroc_difference=paired(-0.01, -0.02, 0.0),
                        sensitivity_difference=paired(-0.127, -0.196, -0.036),
                        specificity_difference=paired(0.124, 0.036, 0.196))
    sentence = case_sentence(privacy="ε 8", kind="binary", positive="pneumonia", negative="normal", level="95%",
                             single=single)
    assert sentence == ("At ε 8 the model misses about 13 more of every 100 pneumonia cases (95% CI: 4 to 20 more) "
                        "and wrongly flags about 12 fewer of every 100 normal cases as pneumonia (95% CI: 4 to 20 "
                        "fewer)."), sentence
    narrow = single.model_copy(update={"specificity_difference": paired(-0.05, -0.051, -0.049)})
    sentence = case_sentence(privacy="ε 8", kind="binary", positive="pneumonia", negative="normal", level="95%",
                             single=narrow)
    assert sentence.endswith("wrongly flags about 5 more of every 100 normal cases as pneumonia (95% CI: 5 more).")


def test_a_not_dp_arms_sentence_says_what_its_rates_are_against():
    """An arm that is not DP is no privacy level, so "misses about 5 more" needs its baseline: the non-private run
    (one seed), or its seed's non-private run (a mean over seeds); an unchanged rate reads "as many ... as" it."""
    from dpmed.comparisons import Difference, PairedDifference, SeedSummary, ValueSummary
    from dpmed.reporting.clinical import case_sentence

    def paired(value, low, high):
        return PairedDifference(value=value, low=low, high=high, p_value=1.0, defined_redraws=200)

    def summary(mean, low, high):
        return SeedSummary(mean=mean, std=0.01, min=low, max=high, n_seeds=2)

    not_dp = ("shift_b1", "not DP because it adds no noise")
    single = Difference(run_id="shift_b1_seed0", label="shift_b1", arm="shift", mechanism="shift", seed=0,
                        reference_run="base_seed0", epsilon=None, auroc_difference=paired(-0.01, -0.02, 0.0),
                        sensitivity_difference=paired(-0.05, -0.12, 0.01), specificity_difference=paired(0, 0, 0))
    sentence = case_sentence(privacy="not DP", kind="binary", positive="pneumonia", negative="normal", level="95%",
                             single=single, not_dp=not_dp)
    assert sentence == ("shift_b1, which is not DP because it adds no noise, misses about 5 more of every 100 "
                        "pneumonia cases than the non-private run (95% CI: 1 fewer to 12 more) and wrongly flags "
                        "about as many normal cases as the non-private run (95% CI: no change)."), sentence
    seeds = ValueSummary(label="shift_b1", arm="shift", seeds=[0, 1], epsilon=None, significant_seeds=0,
                         auroc_difference=summary(-0.01, -0.02, 0.0),
                         sensitivity_difference=summary(-0.05, -0.07, -0.03),
                         specificity_difference=summary(0.02, 0.01, 0.03))
    sentence = case_sentence(privacy="not DP", kind="binary", positive="pneumonia", negative="normal", level="95%",
                             seeds=seeds, not_dp=not_dp)
    assert sentence == ("Over 2 seeds, shift_b1, which is not DP because it adds no noise, misses on average about 5 "
                        "more of every 100 pneumonia cases than its seed's non-private run (seed range: 3 to 7 more) "
                        "and wrongly flags on average about 2 fewer of every 100 normal cases as pneumonia than its "
                        "seed's non-private run (seed range: 1 to 3 fewer)."), sentence


def test_the_opening_tables_auroc_cell_is_the_signed_paired_auroc_change_and_the_text_names_what_was_redrawn(
        two_arms, report_html):
    """The AUROC column holds the change in AUROC to three decimals (not per 100, as the rates beside it); the text
    says whether the paired bootstrap redrew the test images or the test patients, as the runs' intervals did."""
    base, private = two_arms
    change = private.metrics["test_auroc"] - base.metrics["test_auroc"]
    clinical = _section(report_html(two_arms), "clinical")
    cell = dict(re.findall(r'<td[^>]*data-label="([^"]+)"[^>]*>([^<]*)', clinical))
    assert cell["AUROC change [95% CI]"].startswith(f"{change:+.3f} [")
    assert "the same redraws of the test images for both" in _text(clinical)
    assert "on the same 120 test images" in _text(clinical)              # report_html's n_test
    by_patient = [r.model_copy(update={"metrics": {**r.metrics, "bootstrap_unit": "patient"}}) for r in two_arms]
    assert "the same redraws of the test patients for both" in _text(_section(report_html(by_patient), "clinical"))


def test_reading_eps_is_said_only_where_some_run_has_an_eps(two_arms):
    from dpmed.reporting.clinical import _reading_eps

    base, private = two_arms
    assert "Reading ε." in _reading_eps([base, private])
    assert _reading_eps([base]) == ""
    assert "voids the promise" not in _reading_eps([base, private])   # every ε shown holds


def test_an_eps_that_does_not_hold_is_read_as_voided_and_never_as_protection(two_arms):
    """A reproducible-mode run shows its accounted ε beside "not DP: seed known": the note says the seed voids it,
    and a study of such runs alone is not told what DP's ε protects (it would read as a protection they lack)."""
    from dpmed.randomness import NOT_DP_REPRODUCIBLE
    from dpmed.reporting.clinical import _reading_eps

    base, private = two_arms
    seeded = private.model_copy(update={"privacy": private.privacy.model_copy(
        update={"is_dp": False, "randomness": NOT_DP_REPRODUCIBLE})})
    alone = _reading_eps([base, seeded])
    assert "voids the promise" in alone and "seed known" in alone and "protects no one" in alone
    assert "at most e<sup>ε</sup>" not in alone and "Smaller ε is stronger protection" not in alone
    both = _reading_eps([base, private, seeded])
    assert "at most e<sup>ε</sup>" in both and "voids the promise" in both


def test_the_opening_tables_columns_hold_their_own_rates(two_arms, report_html):
    """The sensitivity column holds the change in sensitivity and the specificity column the change in specificity
    (swapped, the headers would still read right); and the 'Without privacy' line names each rate by its own
    value."""
    from dpmed.reporting.clinical import _per100

    base, private = two_arms
    sens = private.metrics["test_sensitivity"] - base.metrics["test_sensitivity"]
    spec = private.metrics["test_specificity"] - base.metrics["test_specificity"]
    assert _per100(sens) != _per100(spec)                              # the fixture tells the two apart
    clinical = _section(report_html(two_arms), "clinical")
    cell = dict(re.findall(r'<td[^>]*data-label="([^"]+)"[^>]*>([^<]*)', clinical))
    assert cell["sensitivity change: pneumonia cases found, per 100"].startswith(_per100(sens) + " [")
    assert cell["specificity change: normal cases cleared, per 100"].startswith(_per100(spec) + " [")
    rates = {**base.metrics, "test_sensitivity": 0.9, "test_specificity": 0.7}     # the fixture's are both 1
    clinical = _section(report_html([base.model_copy(update={"metrics": rates}), private]), "clinical")
    assert ("finds 90 of every 100 pneumonia cases (sensitivity) and clears 70"
            in re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", clinical)))


def test_the_report_cells_round_and_order_as_written():
    """Changes per 100 round to nearest (0.6 -> +1, -12.7 -> -13), an interval reads [low, high], a seed range
    [min, max]; a comparison cell's interval is the difference's own, each number signed; the fairness warning
    fires above 10 % of the redraws undefined, as the utility metrics' does (20 of 200 is not above)."""
    from dpmed.comparisons import PairedDifference, SeedSummary
    from dpmed.evaluation.summaries import Estimate, Spread
    from dpmed.reporting.clinical import _paired_cell, _per100, _seeds_cell
    from dpmed.reporting.comparison_section import _difference_cell, _est
    from dpmed.reporting.fairness_section import _undefined_share

    assert (_per100(0.006), _per100(-0.127), _per100(0.004)) == ("+1", "-13", "0")
    paired = PairedDifference(value=-0.05, low=-0.12, high=0.01, p_value=1.0, defined_redraws=200)
    assert _paired_cell(paired, cases=True) == "-5 [-12,\u00a0+1]"
    assert _seeds_cell(SeedSummary(mean=-0.002, std=0.01, min=-0.07, max=0.06, n_seeds=2), cases=True) == \
        "0 (seed range -7 to +6)"
    assert "-0.050 [-0.120,\u00a0+0.010]" in _difference_cell(paired)          # signed, as the summary prints it
    assert _est(Estimate(value=-0.05, low=-0.12, high=0.01), signed=True) in _difference_cell(paired)
    spread = Spread(value=0.1, low=0.05, high=0.2, undefined_redraws=20)
    assert _undefined_share(spread, 200) == ""
    assert "(21 of 200 redraws undefined)" in _undefined_share(spread.model_copy(update={"undefined_redraws": 21}),
                                                               200)


def test_a_redraw_count_that_is_not_a_number_raises_no_undefined_redraws_flag(tmp_path, make_record):
    """A run.json that dpmed did not write may hold NaN, and it reads: the utility table gave it no flag, as no share
    of NaN is above the threshold, and "(nan of 200 redraws undefined)" tells a reader nothing to act on."""
    from dpmed.records import read_record
    from dpmed.reporting.sections import _auroc_cell

    record = make_record("np_seed0", "np", metrics={"test_auroc": 0.8, "test_auroc_low": 0.7, "test_auroc_high": 0.9,
                                                    "test_auroc_undefined_redraws": 150, "n_resamples": 200})
    assert "(150 of 200 redraws undefined)" in _auroc_cell(record)
    for key in ("test_auroc_undefined_redraws", "n_resamples"):
        path = tmp_path / key / "run.json"
        path.parent.mkdir()
        path.write_text(record.model_dump_json().replace(f'"{key}":{record.metrics[key]}', f'"{key}":NaN'))
        read = read_record(path)
        assert read.metrics[key] != read.metrics[key], key                              # NaN, as read
        assert _auroc_cell(read) == _auroc_cell(record.model_copy(update={"metrics": {**record.metrics, key: 0}}))


def test_a_redraw_count_held_as_text_raises_no_undefined_redraws_flag(tmp_path, make_record):
    """A run.json may hold any metric as a string (its values are typed number or text): a count written as text
    is no number to compare with the share either, so it gets no flag, as NaN does, where it stopped the report."""
    from dpmed.records import read_record
    from dpmed.reporting.sections import _auroc_cell

    record = make_record("np_seed0", "np", metrics={"test_auroc": 0.8, "test_auroc_low": 0.7, "test_auroc_high": 0.9,
                                                    "test_auroc_undefined_redraws": 150, "n_resamples": 200})
    for key in ("test_auroc_undefined_redraws", "n_resamples"):
        path = tmp_path / key / "run.json"
        path.parent.mkdir()
        path.write_text(record.model_dump_json().replace(f'"{key}":{record.metrics[key]}',
                                                         f'"{key}":"{record.metrics[key]}"'))
        read = read_record(path)
        assert read.metrics[key] == str(record.metrics[key]), key                       # text, as read
        assert _auroc_cell(read) == _auroc_cell(record.model_copy(update={"metrics": {**record.metrics, key: 0}}))


# ------------------------------------------------------------------------------------------------- the reading


def _reading_of(records, differences):
    from types import SimpleNamespace

    from dpmed.reporting.sections import _reading

    inputs = SimpleNamespace(records=records, level="95%", comparisons=SimpleNamespace(auroc_differences=differences,
                                                                                         by_value=[]))
    return re.sub(r"\s+", " ", _text(_reading(inputs)))


def _auroc(value, low, high):
    return {"test_auroc": value, "test_auroc_low": low, "test_auroc_high": high}


@pytest.mark.parametrize("low, high, shown, verdict", [
    (-0.05, 0.0, "[-0.050, 0.000]", "includes 0"), (0.0, 0.05, "[0.000, +0.050]", "includes 0"),
    (-0.12, -0.01, "[-0.120, -0.010]", "lies below 0: lower than without privacy"),
    (0.01, 0.05, "[+0.010, +0.050]", "lies above 0")])
def test_the_reading_states_the_paired_interval_low_to_high_and_reads_its_sign(make_record, low, high, shown,
                                                                               verdict):
    """An interval ending exactly at 0 includes 0 (it was read as below or above); the interval reads [low, high]."""
    from dpmed.comparisons import Difference, PairedDifference

    base = make_record("base_seed0", "base", metrics=_auroc(0.95, 0.93, 0.97))
    dp = make_record("dp_seed0", "dp", "dp_sgd", eps=8.0, metrics=_auroc(0.9, 0.85, 0.94))
    paired = PairedDifference(value=(low + high) / 2, low=low, high=high, p_value=0.06, defined_redraws=200)
    difference = Difference(run_id="dp_seed0", label="eps 8", arm="dp", mechanism="dp_sgd", seed=0,
                            reference_run="base_seed0", epsilon=8.0, auroc_difference=paired)
    text = _reading_of([base, dp], [difference])
    assert f"paired 95% CI {shown}, p" in text        # a bound of exactly 0 unsigned, as in the tables
    assert f"the paired interval of the difference {verdict}." in text
    assert sum(word in text for word in ("includes 0", "lies below 0", "lies above 0")) == 1
    assert "Every comparison here rests on one training seed" in text      # one seed: the verdict's caveat


def test_without_predictions_each_run_is_compared_with_its_own_seeds_non_private_run_signed(make_record):
    records = [make_record("base_seed0", "base", metrics=_auroc(0.95, 0.93, 0.97)),
               make_record("base_seed1", "base", seed=1, metrics=_auroc(0.80, 0.75, 0.85)),
               make_record("dp_seed0", "dp", "dp_sgd", eps=8.0, metrics=_auroc(0.90, 0.85, 0.94)),
               make_record("dp_seed1", "dp", "dp_sgd", eps=8.0, seed=1, metrics=_auroc(0.85, 0.80, 0.90))]
    text = _reading_of(records, [])
    assert "0.900 (-0.050 against base_seed0, same seed; no saved predictions to pair)" in text
    assert "0.850 (+0.050 against base_seed1, same seed; no saved predictions to pair)" in text
    assert "one training seed" not in text


def test_the_sensitivity_and_specificity_heads_name_their_own_class():
    from types import SimpleNamespace

    from dpmed.reporting.sections import _metric_columns

    data = SimpleNamespace(task="binary", positive_class="pneumonia", negative_class="normal")
    inputs = SimpleNamespace(resolved=SimpleNamespace(dataset=data), level="95%",
                             records=[SimpleNamespace(metrics={"test_sensitivity": 1.0, "test_specificity": 1.0,
                                                               "threshold": 0.4})])
    columns = dict(_metric_columns(inputs))
    assert columns["test_sensitivity"] == "sensitivity (pneumonia found)"
    assert columns["test_specificity"] == "specificity (normal cleared)"
    assert columns["threshold"] == "threshold (on the pneumonia score, chosen on validation)"


def test_the_reading_uses_each_seeds_first_non_private_run_and_its_accounted_label(make_record):
    """Two non-private runs of seed 0 (two arms): the first is the reference, as the caption says. A not-DP run
    shows its accounted eps with delta and accountant; an interval touching the reference's is said to overlap."""
    from dpmed.mechanisms.cards import label_randomness

    first = make_record("base_seed0", "base", metrics=_auroc(0.95, 0.93, 0.97))
    second = make_record("again_seed0", "again", metrics=_auroc(0.70, 0.60, 0.80))
    dp = make_record("dp_seed0", "dp", "dp_sgd", eps=8.0, metrics=_auroc(0.90, 0.85, 0.93))
    text = _reading_of([first, second, dp], [])
    assert "0.900 (-0.050 against base_seed0, same seed" in text and "its interval overlaps" in text
    assert "Without privacy the model reaches a test AUROC of 0.950" in text and "(seed 0)" not in text
    seeded = dp.model_copy(update={"privacy": label_randomness(dp.privacy, "reproducible")})
    text = _reading_of([first, seeded], [])
    assert "; as accounted: ε 7.92 (δ 1e-5, PLD, add/remove one image))" in text.replace("\u00a0", " ").replace(
        "\u2011", "-")


def test_the_sizes_line_and_the_missing_runs_warning_count_what_they_say():
    from types import SimpleNamespace

    from dpmed.reporting.sections import _sizes, unfinished

    exact = SimpleNamespace(n_train=70, n_val=15, n_test=12, n_train_patients=60)
    assert _sizes(exact) == "70 / 15 / 12 train / validation / test images (60 training patients)"
    private = SimpleNamespace(n_train=None, n_val=15, n_test=12, released_sizes={"images": 71}, size_epsilon=0.02,
                              synthetic=False)
    assert _sizes(private).endswith("the exact size is private; 15 / 12 validation / test images")
    generated = SimpleNamespace(**{**vars(private), "synthetic": True})    # n_images in study.yaml gives it away
    assert "exact size is private" not in _sizes(generated) and "follows from its n_images" in _sizes(generated)
    runs = [SimpleNamespace(run_id=f"r{i}") for i in range(4)]
    totals = SimpleNamespace(dp_sgd_runs=("r1", "r2"), not_private=("r0",), local_dp=())
    inputs = SimpleNamespace(records=[SimpleNamespace(run_id="r0")], folder=SimpleNamespace(interrupted_releases=dict),
                             resolved=SimpleNamespace(runs=runs, study_privacy=totals))
    assert "3 of the 4 runs this study plans are not in this report" in unfinished(inputs)
    assert "no longer in the study file" not in unfinished(inputs)


def test_a_metric_column_is_shown_where_any_run_has_it():
    from types import SimpleNamespace

    from dpmed.reporting.sections import _metric_columns

    data = SimpleNamespace(task="binary", positive_class="pneumonia", negative_class="normal")
    records = [SimpleNamespace(metrics={"test_auroc": 0.9}), SimpleNamespace(metrics={"test_auroc": 0.8,
                                                                                       "test_accuracy": 0.7})]
    inputs = SimpleNamespace(resolved=SimpleNamespace(dataset=data), level="95%", records=records)
    assert [m for m, _ in _metric_columns(inputs)] == ["test_auroc", "test_accuracy"]


def test_accountants_names_reproductions_and_what_the_bootstrap_redrew_are_named_as_they_are():
    from types import SimpleNamespace

    from dpmed.reporting.inputs import ReportInputs, accountant_name, is_reproduction

    assert [accountant_name(a) for a in ("pld", "rdp", "rdp-classic", "pure", "closed form", None)] == \
        ["PLD", "RDP", "RDP-CLASSIC", "PURE", "closed form", ""]
    none = PrivacyCard(mechanism="none", is_dp=False, statement="no privacy protection")
    shift = PrivacyCard(mechanism="scalar_shift", is_dp=False, statement="NOT DP")
    laplace = PrivacyCard(mechanism="pixel_laplace", is_dp=True, statement="x", epsilon=1.0, epsilon_image=1.0,
                          delta=0.0)
    assert [is_reproduction(c) for c in (none, shift, laplace)] == [False, True, False]

    def redrawn(*units):
        return ReportInputs.redrawn.fget(SimpleNamespace(records=[SimpleNamespace(bootstrap_unit=u) for u in units]))

    assert redrawn("patient", "patient").startswith("the test patients (each drawn patient")
    assert redrawn("image") == "the test images"
    assert redrawn("patient", "image") == "the test patients (images in runs recorded before dpmed redrew patients)"


def test_card_statements_read_with_symbols_and_a_started_run_says_where_it_started(make_record):
    from types import SimpleNamespace

    from dpmed.reporting.recipe_section import settings_chosen_on
    from dpmed.reporting.privacy_section import _start_note, statement_text

    assert statement_text("eps = 1 at delta = 1e-05 (sigma 2), eps_image = 8,192, eps_pixel = 2; eps = infinity") \
        == "ε = 1 at δ = 1e-05 (σ 2), ε per image = 8,192, ε per pixel value = 2; ε = ∞"
    dp = SimpleNamespace(mechanism="dp_sgd")
    weights = SimpleNamespace(weights="w.pt", pretraining=None, trained_on="a public set")
    assert _start_note(SimpleNamespace(start=weights, privacy=dp)).startswith(
        '<p class="note">Started from the weights w.pt (a public set)')
    assert _start_note(SimpleNamespace(start=SimpleNamespace(weights=None), privacy=dp)) == ""

    def chosen(said):
        return settings_chosen_on(SimpleNamespace(resolved=SimpleNamespace(study=SimpleNamespace(
            settings_chosen_on=said))))

    assert "not stated" in chosen(None) and "the phantom (the study's own statement)" in chosen("the phantom")
    assert "not stated" not in chosen("the phantom")


def test_a_local_dp_cards_facts_say_its_eps_is_per_image(make_record):
    from dpmed.reporting.privacy_section import _card

    laplace = PrivacyCard(mechanism="pixel_laplace", is_dp=True, statement="eps_image = 2,048", epsilon=2048.0,
                          epsilon_image=2048.0, epsilon_pixel=2.0, delta=0.0, accountant="closed form")
    card = _card(make_record("lap_seed0", "lap").model_copy(update={"mechanism": "pixel_laplace", "privacy": laplace}))
    facts = card[card.index('<table class="facts">'):]
    heads = re.findall(r"<th[^>]*>([^<]*)</th>", facts)
    assert "ε per image" in heads and "ε" not in heads


@pytest.mark.parametrize("threshold, shown", [(0.5, "0.500"), (0.99977, "1 − 0.00023"), (0.00012, "0.00012"),
                                              (None, "–")])
def test_the_utility_table_gives_each_binary_runs_threshold(make_record, threshold, shown):
    """The decisions every accuracy, sensitivity and specificity rest on: a threshold near 1 is not rounded to
    1.000, which would hide that the model calls positive only its most confident scores."""
    from dpmed.reporting.sections import _threshold_text

    metrics = {} if threshold is None else {"threshold": threshold}
    assert _threshold_text(make_record("a_seed0", "a", metrics=metrics)) == shown


def test_the_summary_says_what_the_study_did_not_compute(make_record, make_resolved):
    """Explanations are off by default and fairness can be turned off: the summary says so, and how to turn them
    on, rather than leave a reader looking for sections that were never computed."""
    from dpmed.config import CamConfig
    from dpmed.folders import StudyFolder
    from dpmed.reporting.inputs import ReportInputs
    from dpmed.reporting.sections import _measured

    records = [make_record("a_seed0", "a")]
    resolved = make_resolved(records)

    def measured(evaluation):
        study = resolved.study.model_copy(update={"evaluation": evaluation})
        return _measured(ReportInputs(resolved=resolved.model_copy(update={"study": study}), records=records,
                                      comparisons=None, folder=StudyFolder(Path("unused"))))

    ev = resolved.study.evaluation
    default = measured(ev)
    assert "Not computed: Grad-CAM explanations" in default and "configs/interpretability.yaml" in default
    assert "fairness" not in default.lower()
    neither = measured(ev.model_copy(update={"fairness": None}))
    assert "Not computed: fairness across sex and age (<code>evaluation.fairness</code> is null); Grad-CAM" in neither
    both = measured(ev.model_copy(update={"explanations": CamConfig(), "fairness": None}))
    assert "Grad-CAM" not in both and "Not computed: fairness" in both
    assert "Not computed" not in measured(ev.model_copy(update={"explanations": CamConfig()}))


@pytest.mark.parametrize("p, shown", [(0.04995, "0.04995"), (0.0499999, "0.0499999"), (0.05, "0.05"),
                                      (0.050004, "0.05"), (0.0449, "0.045"), (0.123, "0.12"), (0.0012345, "0.0012")])
def test_a_p_value_is_printed_on_its_own_side_of_the_significance_level(p, shown):
    """0.04995 printed as "p 0.05" while the seeds table counted it among the "seeds with p < 0.05": two figures,
    and more only where two would carry it across the level (0.04995 to 3 figures is 0.0500, still across)."""
    from dpmed.comparisons import SIGNIFICANCE, PairedDifference
    from dpmed.reporting.inputs import p_text

    text = p_text(PairedDifference(value=-0.1, low=-0.2, high=0.01, p_value=p, defined_redraws=1000))
    assert text == shown
    assert (float(text) < SIGNIFICANCE) == (p < SIGNIFICANCE)


@pytest.mark.parametrize("redraws, shown", [(1000, "0.002"), (300, "0.0067"), (199, "0.01"), (99, "0.02"),
                                            (19, "0.1")])
def test_a_p_value_at_its_floor_is_bounded_by_the_floor_rounded_up(redraws, shown):
    """No redraw on the other side of zero: p is at most 2 / (R + 1). At R = 300 that is 0.006645, and "≤ 0.0066"
    claimed less than the redraws show; the floor is rounded up to two figures."""
    from dpmed.comparisons import PairedDifference
    from dpmed.reporting.inputs import p_text

    floor = 2 / (redraws + 1)
    text = p_text(PairedDifference(value=-0.2, low=-0.3, high=-0.1, p_value=floor, p_floor=floor,
                                   defined_redraws=redraws))
    assert text == f"≤\u00a0{shown}" and float(shown) >= floor


def test_a_cards_facts_round_every_eps_up_and_a_card_without_privacy_shows_infinity(make_record):
    """The released count's eps is part of the card's eps and its target is what the run was planned to: rounded to
    nearest they read below the budget spent (0.05012 as 0.0501). A run without privacy shows ε ∞ and no other fact,
    its statement not marked as a DP one; a DP run's statement is."""
    from types import SimpleNamespace

    from dpmed.reporting.privacy_section import _card, _fact, _start_note

    card = PrivacyCard(mechanism="dp_sgd", is_dp=True, statement="eps = 3", epsilon=2.99942, delta=1e-5,
                       accountant="pld", unit="patient", size_epsilon=0.05012, target_epsilon=2.99942)
    assert [_fact(card, k) for k in ("epsilon", "size_epsilon", "target_epsilon")] == ["3", "0.0502", "3"]
    plain = _card(make_record("np_seed0", "np"))
    facts = plain[plain.index('<table class="facts">'):plain.index("</table>")]
    assert re.findall(r'<tr><th scope="row">([^<]*)</th><td>([^<]*)</td></tr>', facts) == [
        ("ε", "∞ (no protection)")]
    assert '<p class="statement notdp">' in plain
    assert '<p class="statement">' in _card(make_record("dp_eps8_C1_seed0", "dp", "dp_sgd", eps=8.0))
    weights = SimpleNamespace(weights="w.pt", pretraining=None, trained_on="a public set")
    assert _start_note(SimpleNamespace(start=weights, privacy=SimpleNamespace(mechanism="none"))) == ""


def test_finished_runs_left_out_of_the_study_file_are_named_whatever_their_mechanism_and_the_total_is_stated():
    """A finished local-DP run no longer in the study file still released its images: it is named beside the
    DP-SGD and non-private ones. The study's total is stated in its own section (not only in the folded study file),
    and a generated dataset's size is said to protect no one even where a local-DP delta states it."""
    from types import SimpleNamespace

    from dpmed.reporting.sections import _sizes, unfinished
    from dpmed.reporting.privacy_section import study_privacy_section

    totals = SimpleNamespace(dp_sgd_runs=("r0", "old_dp"), not_private=("old_np",), local_dp=("old_ldp",),
                             statement="eps = 9.1 at delta = 1e-05 for all runs together")
    inputs = SimpleNamespace(records=[SimpleNamespace(run_id="r0")], folder=SimpleNamespace(interrupted_releases=dict),
                             resolved=SimpleNamespace(runs=[SimpleNamespace(run_id="r0")], study_privacy=totals))
    flag = unfinished(inputs)
    assert "3 finished run(s) in this folder are no longer in the study file" in flag
    assert "old_dp, old_ldp, old_np." in flag
    assert "composition: ε = 9.1 at δ = 1e-05 for all runs together.</p>" in study_privacy_section(inputs)
    generated = SimpleNamespace(n_train=None, n_val=15, n_test=12, released_sizes={"images": 71}, size_epsilon=0.02,
                                synthetic=True)
    assert "protects no one" in _sizes(generated, ["ldp_seed0"]) and "N" not in _sizes(generated, ["ldp_seed0"])


def test_the_study_as_a_whole_writes_eps_and_delta_as_the_cards_do(write_study):
    """The section quoted the terminal's statement, "eps = 10.67 at delta = 1e-05", beside cards and a closing line
    that write ε and δ; the local-DP total read "eps_image = ... per image" there, which the symbols would make "ε
    per image = ... per image"."""
    from types import SimpleNamespace

    from dpmed.budget import study_privacy
    from dpmed.config import load_study, plan_runs
    from dpmed.mechanisms import PlanContext
    from dpmed.reporting.privacy_section import study_privacy_section

    study = load_study(write_study("""
name: whole
seeds: [0, 1]
data: {source: phantom, n_images: 200, image_size: 16}
model: {name: small_cnn}
training: {epochs: 1, batch_size: 16}
arms:
  - {name: np, mechanism: none}
  - {name: lap, mechanism: pixel_laplace, scale: 0.5}
  - {name: dp, mechanism: dp_sgd, target_epsilon: 8}
"""))
    totals = study_privacy(plan_runs(study, PlanContext(images_per_patient=np.ones(140, dtype=np.int64),
                                                        image_shape=(1, 16, 16))))
    assert "eps = " in totals.statement and "eps_image = " in totals.statement     # the terminal's ASCII
    section = _text(study_privacy_section(SimpleNamespace(resolved=SimpleNamespace(study_privacy=totals))))
    assert re.search(r"\b(eps|delta|eps_image|infinity)\b", section) is None, section
    assert re.search(r"the 2 DP-SGD runs together: ε = [0-9.]+ at δ = ", section), section
    assert "ε per image = 1,024 at δ = 0 (" in section and "is not DP (ε = ∞)" in section
    older = SimpleNamespace(statement=totals.statement.replace("eps_image = 1,024", "eps_image = 1,024 per image"))
    assert "ε per image = 1,024 at δ = 0 (" in _text(study_privacy_section(SimpleNamespace(
        resolved=SimpleNamespace(study_privacy=older))))           # a study.yaml an older dpmed wrote


def test_the_study_as_a_whole_keeps_the_run_ids_it_names(write_study):
    """Its statement names runs by id, and an arm may be named "eps-free" or "lap.delta-0": the symbols the cards
    take turned those into "ε-free_seed0" and "lap.δ-0_b0.5_seed0", runs no folder holds."""
    from types import SimpleNamespace

    from dpmed.budget import study_privacy
    from dpmed.config import load_study, plan_runs
    from dpmed.mechanisms import PlanContext
    from dpmed.reporting.privacy_section import study_privacy_section

    study = load_study(write_study("""
name: ids
seeds: [0]
data: {source: phantom, n_images: 200, image_size: 16}
model: {name: small_cnn}
training: {epochs: 1, batch_size: 16}
arms:
  - {name: eps-free, mechanism: none}
  - {name: eps..x, mechanism: none}
  - {name: lap.delta-0, mechanism: pixel_laplace, scale: 0.5}
"""))
    totals = study_privacy(plan_runs(study, PlanContext(images_per_patient=np.ones(140, dtype=np.int64),
                                                        image_shape=(1, 16, 16))))
    section = _text(study_privacy_section(SimpleNamespace(resolved=SimpleNamespace(study_privacy=totals))))
    assert "(eps-free_seed0, eps..x_seed0)" in section, section      # a name may hold "..", or ".-", after a word
    assert "(lap.delta-0_b0.5_seed0): ε per image = 512 at δ = 0" in section, section


@pytest.mark.parametrize("update", [{"sampler_voids": True}, {"randomness": NOT_DP_REPRODUCIBLE}])
def test_a_cards_facts_call_an_accounted_eps_whose_claim_does_not_hold_not_dp(make_record, update):
    """A high-budget run whose noise is below the sampler's reach (or a reproducible one) keeps its accounted eps on
    its card: its facts row read a bare "ε 1e6" beside δ and accountant, as a DP run's does, while only the statement
    above it said NOT DP."""
    from dpmed.reporting.privacy_section import _card

    for card in (PrivacyCard(mechanism="dp_sgd", is_dp=False, statement="NOT DP as run", epsilon=999_100.0,
                             delta=1e-5, accountant="rdp", unit="image", **update),
                 PrivacyCard(mechanism="pixel_laplace", is_dp=False, statement="NOT DP as run", epsilon=12_800.0,
                             epsilon_image=12_800.0, epsilon_pixel=50.0, delta=0.0, accountant="closed form",
                             **update)):
        html = _card(make_record("r_seed0", "r").model_copy(update={"mechanism": card.mechanism, "privacy": card}))
        facts = dict(re.findall(r'<tr><th scope="row">([^<]*)</th><td>([^<]*)</td></tr>',
                                html[html.index('class="facts"'):]))
        shown = {k: v for k, v in facts.items() if k.startswith("ε")}
        assert shown and all(v.endswith(" (as accounted; not DP)") for v in shown.values()), shown


def test_a_references_warning_is_said_once_where_the_baseline_is_met_not_under_every_paired_row(release, make_record,
                                                                                                report_html):
    # Three private arms paired with one non-private run that never chooses class "c": its warning is counted once,
    # by the 'Without privacy' line, and each paired row only points to where it stands.
    y = np.arange(90) % 3
    rng = np.random.default_rng(6)
    records = []
    for run_id, arm, mechanism, eps in (("np_seed0", "np", "none", None), ("dp_eps1_C1_seed0", "dp1", "dp_sgd", 1.0),
                                        ("dp_eps2_C1_seed0", "dp2", "dp_sgd", 2.0),
                                        ("dp_eps4_C1_seed0", "dp4", "dp_sgd", 4.0)):
        scores = np.eye(3)[y] * 0.7 + rng.random((len(y), 3)) * 0.3
        if mechanism == "none":
            scores = scores * np.array([1.0, 1.0, 0.0])                   # never "c"
        metrics = evaluate_utility(kind="multiclass", label_names=["a", "b", "c"], val_labels=y, val_scores=scores,
                                   test_labels=y, test_scores=scores, n_resamples=50)
        records.append(release(make_record(run_id, arm, mechanism, eps=eps, metrics=metrics),
                               predictions=dict(test_scores=scores, test_labels=y,
                                                test_patient_ids=np.arange(len(y)).astype(str))))
    clinical = _text(_section(report_html(records, task="multiclass", names=("a", "b", "c")), "clinical"))
    assert clinical.count("1 warning about np_seed0") == 1 and "chooses only" not in clinical
    table = " ".join(clinical.split("reading")[-1].split())
    assert table.count("paired with np_seed0, whose warning stands under the utility table") == 3


def test_an_attribute_whose_test_images_all_fall_in_one_group_is_said_to_compare_nothing(scored_run, scores, labels,
                                                                                        attributes, report_html):
    """Every test age in [30,60) (a few unknown): the worst group is that one group and every parity is '–'. The
    section says so, naming the attribute, the group and the study file's bins to change; sex, with two groups, not."""
    from dpmed.evaluation.fairness import evaluate_fairness
    y_val, y = labels
    age = np.full(len(y), 45.0)
    age[:3] = np.nan
    val, test = scores(0.6, np.random.default_rng(2))
    run = scored_run("np_seed0", "np", "none", scores=(val, test))
    block = evaluate_fairness(kind="binary", val_labels=y_val, val_scores=val, test_labels=y, test_scores=test,
                              attributes={**attributes, "age": age}, n_resamples=50)
    section = _text(_section(report_html([run.model_copy(update={"fairness": block})]), "fairness"))
    by_sex, by_age = section.split("By age")
    assert ("⚠ All 117 test images compared by age fall in one group, [30,60): fairness by age compares nothing "
            "here. The worst group is that group, and each parity difference (a group minus the others) is "
            "undefined (–). To compare age groups, give the study file's evaluation.fairness.age_bins edges that "
            "split these test images (now [0, 30, 60, 70, 80, 100]).") in " ".join(by_age.split())
    assert "compares nothing" not in by_sex
    block = evaluate_fairness(kind="binary", val_labels=y_val, val_scores=val, test_labels=y, test_scores=test,
                              attributes={"sex": np.full(len(y), "female")}, n_resamples=50)
    section = _text(_section(report_html([run.model_copy(update={"fairness": block})]), "fairness"))
    assert (f"All {len(y)} test images compared by sex fall in one group, female: fairness by sex compares nothing "
            "here.") in " ".join(section.split())
    assert "leave sex out of the study file's evaluation.fairness.attributes" in " ".join(section.split())


def test_a_group_the_study_names_that_no_test_image_falls_in_is_named(scored_run, scores, labels, attributes,
                                                                     report_html):
    """No test age in [60,70): the sizes line listed the other bins, and the tables their columns, without a word
    of the bin the study file asks for; a reader took it for a row dropped by mistake. Sex, with both groups, not."""
    from dpmed.evaluation.fairness import evaluate_fairness
    y_val, y = labels
    age = np.array([25.0, 45.0, 75.0, 85.0])[np.arange(len(y)) % 4]
    val, test = scores(0.6, np.random.default_rng(2))
    run = scored_run("np_seed0", "np", "none", scores=(val, test))
    block = evaluate_fairness(kind="binary", val_labels=y_val, val_scores=val, test_labels=y, test_scores=test,
                              attributes={**attributes, "age": age}, n_resamples=50)
    section = _text(_section(report_html([run.model_copy(update={"fairness": block})]), "fairness"))
    by_sex, by_age = (" ".join(part.split()) for part in section.split("By age"))
    assert ("No test image falls in [60,70) (an age group of evaluation.fairness.age_bins), so it has no numbers "
            "here.") in by_age
    assert "No test image falls in" not in by_sex


@pytest.mark.parametrize("ages, said", [
    ((25.0, 45.0, 75.0), "<18 (an age group of evaluation.fairness.age_bins), so it has"),
    ((25.0, 45.0), "<18, >=65 (age groups of evaluation.fairness.age_bins), so they have")])
def test_the_group_below_a_first_age_edge_above_0_is_named_where_no_test_image_falls_in_it(tmp_path, scored_run,
                                                                                            scores, labels,
                                                                                            report_html, ages, said):
    """Bins [18, 40, 65] make "<18" a group of its own (known ages below the first edge), compared like the others;
    with no test image under 18 the report named none of it, where it names every other empty group. It is no bin
    of the study's edges, nor is ">=65", so neither is called one ("a bin of evaluation.fairness.age_bins" was said
    of both, and of two groups at once). The groups the report measures are those the run's record (run.json) and
    results.csv name, in the same words."""
    import csv
    import json
    from html import unescape

    from dpmed.evaluation.fairness import evaluate_fairness
    y_val, y = labels
    age = np.array(ages)[np.arange(len(y)) % len(ages)]
    val, test = scores(0.6, np.random.default_rng(2))
    block = evaluate_fairness(kind="binary", val_labels=y_val, val_scores=val, test_labels=y, test_scores=test,
                              attributes={"age": age}, age_bins=(18, 40, 65), n_resamples=50)
    run = scored_run("np_seed0", "np", "none", scores=(val, test)).model_copy(update={"fairness": block})
    section = " ".join(unescape(_text(_section(report_html([run]), "fairness"))).split())
    assert f"No test image falls in {said} no numbers here." in section
    measured = list(json.loads(run.model_dump_json())["fairness"]["attributes"]["age"]["groups"])
    assert measured == ["[18,40)", "[40,65)", ">=65"][:len(ages)]
    sizes = re.search(r"Test images per group: (.*?)\. No test image", section).group(1)
    assert re.findall(r"(\S+): \d+ \(", sizes) == measured
    columns = next(csv.reader((tmp_path / "results.csv").open()))
    assert {m.group(1) for c in columns if (m := re.fullmatch(r"fairness\[age=(.+?)\]_\w+", c))} == set(measured)


def test_a_worst_group_that_no_group_defines_is_said_to_be_undefined_not_named_none(scored_run, scores, labels,
                                                                                   attributes, report_html):
    """Every woman of the test set positive and every man negative: no group's AUROC is defined, so there is no worst
    group, and its cell read "None: –" (Python's None, printed)."""
    from dpmed.evaluation.fairness import evaluate_fairness
    y_val, y = labels
    val, test = scores(0.6, np.random.default_rng(2))
    run = scored_run("np_seed0", "np", "none", scores=(val, test))
    block = evaluate_fairness(kind="binary", val_labels=y_val, val_scores=val, test_labels=y, test_scores=test,
                              attributes={"sex": np.where(y == 1, "female", "male")}, n_resamples=50)
    assert block.attributes["sex"].worst_group_auroc.group is None
    section = " ".join(_text(_section(report_html([run.model_copy(update={"fairness": block})]), "fairness")).split())
    assert "None" not in section
    assert "undefined: no named group's AUROC is defined" in section


def test_runs_whose_groups_differ_still_say_that_an_attribute_compares_one_group(scored_run, scores, labels,
                                                                                 attributes, report_html):
    """The warning read the group's size from the first run alone, and failed with a KeyError where that run does not
    have the group the others do (the neighbouring sizes line already skipped such groups)."""
    from dpmed.evaluation.fairness import evaluate_fairness
    y_val, y = labels
    age = np.full(len(y), 45.0)
    age[:3] = np.nan
    val, test = scores(0.6, np.random.default_rng(2))
    block = evaluate_fairness(kind="binary", val_labels=y_val, val_scores=val, test_labels=y, test_scores=test,
                              attributes={**attributes, "age": age}, n_resamples=50)
    by_age = block.attributes["age"]
    lacking = block.model_copy(update={"attributes": {**block.attributes, "age": by_age.model_copy(
        update={"groups": {g: v for g, v in by_age.groups.items() if g != "[30,60)"}})}})
    runs = [scored_run("np_seed0", "np", "none", scores=(val, test)).model_copy(update={"fairness": lacking}),
            scored_run("np_seed1", "np", "none", scores=(val, test)).model_copy(update={"fairness": block})]
    section = " ".join(_text(_section(report_html(runs), "fairness")).split())
    assert ("⚠ All 117 test images compared by age fall in one group, [30,60): fairness by age compares "
            "nothing") in section


def test_an_interval_clear_of_0_whose_end_rounds_to_0_does_not_read_none():
    """A 2-seed quickstart read "misses on average about 7 more ... (95% t interval over seeds: none to 14 more)":
    "none" beside a change the interval shows reads as a contradiction. An end that rounds to 0 on the side the
    interval lies on is "under 1"; an interval that holds 0 still reads "none" there."""
    from dpmed.reporting.clinical import _range

    assert _range(0.3, 14.2, "more", "fewer") == "under 1 to 14 more"
    assert _range(-14.2, -0.3, "more", "fewer") == "under 1 to 14 fewer"
    assert _range(-0.3, 14.2, "more", "fewer") == "none to 14 more"
    assert _range(4.0, 19.0, "more", "fewer") == "4 to 19 more"


def test_an_interval_clear_of_0_whose_both_ends_round_to_0_does_not_read_no_change():
    """An interval of 0.2 to 0.4 more cases per 100 excludes 0, so the sentence gives its direction; "no change"
    for it denied the change the sentence reported. It reads "under 1 more" (or fewer); one that holds 0 and rounds
    to 0 at both ends still reads "no change"."""
    from dpmed.reporting.clinical import _range

    assert _range(0.2, 0.4, "more", "fewer") == "under 1 more"
    assert _range(-0.4, -0.2, "more", "fewer") == "under 1 fewer"
    assert _range(-0.2, 0.4, "more", "fewer") == "no change"


@pytest.mark.parametrize("ordinal", [True, False])
def test_ordinal_grades_show_the_kappa_change_in_the_opening_table_and_the_comparisons(tmp_path, release,
                                                                                       make_record, report_html,
                                                                                       ordinal):
    from dpmed.evaluation.paired import paired_differences
    from dpmed.reporting.inputs import signed_text

    y = np.arange(90) % 3
    rng = np.random.default_rng(8)
    records = _multiclass_pair(release, make_record, lambda good: np.eye(3)[y] * 0.2 + rng.random((90, 3)) * 0.8, y)
    html = report_html(records, task="multiclass", names=("a", "b", "c"), ordinal=ordinal)
    clinical, comparisons = _text(_section(html, "clinical")), _text(_section(html, "comparisons"))
    if not ordinal:
        assert "kappa" not in clinical and "kappa" not in comparisons
        return
    scores = [np.load(tmp_path / "runs" / r.run_id / "predictions.npz")["test_scores"] for r in records]
    kappa = paired_differences(kind="multiclass", labels=y, scores=scores[1], reference_scores=scores[0],
                               n_resamples=200, ordinal=True)["kappa_quadratic"]
    assert kappa.value < -0.05
    assert "quadratic-weighted kappa change [95% CI]" in clinical
    assert f"{signed_text(kappa.value)} [{signed_text(kappa.low)},\u00a0{signed_text(kappa.high)}]" in clinical
    assert "a far miss costs more than a near one" in clinical
    assert "quadratic-weighted kappa difference" in comparisons and signed_text(kappa.value) in comparisons


def test_the_reading_of_an_ordinal_arm_gives_the_kappa_change_with_its_verdict_first_over_seeds():
    """Before, an ordinal arm's reading spoke of accuracy alone: the kappa change over seeds stood in its cell as
    "-0.120 [-0.262, +0.022]" with no sentence saying that its t interval holds 0, while every other change over seeds
    opens with that verdict. Kappa is no share of cases, so it reads as a difference of kappas (higher is better)."""
    from dpmed.comparisons import Difference, PairedDifference, ValueSummary
    from dpmed.evaluation.paired import seed_summary
    from dpmed.reporting.clinical import case_sentence

    def arm(kappas):
        return ValueSummary(label="eps 1", arm="dp", seeds=[0, 1, 2], epsilon=1.0, significant_seeds=3,
                            auroc_difference=seed_summary([-0.02, -0.03, -0.04]),
                            accuracy_difference=seed_summary([-0.04, -0.05, -0.06]),
                            kappa_quadratic_difference=seed_summary(kappas, within=(-2.0, 2.0)))

    def read(**kw):
        return case_sentence(privacy="ε 1", kind="multiclass", positive=None, negative=None, level="95%", **kw)

    # -0.12 +- 4.303 * 0.06 / sqrt(3) = -0.12 +- 0.149: holds 0
    held = read(seeds=arm([-0.06, -0.12, -0.18]))
    assert held.startswith("Over 3 seeds, at ε 1 the model gets on average about 5 more wrong of every 100 test "
                           "images (argmax)"), held
    assert held.endswith(" Over 3 seeds no difference is shown in the quadratic-weighted kappa (95% t interval over "
                         "seeds [-0.269, +0.029], which includes 0; on average -0.120)."), held
    # -0.12 +- 4.303 * 0.01 / sqrt(3) = -0.12 +- 0.025: excludes 0
    shown = read(seeds=arm([-0.11, -0.12, -0.13]))
    assert shown.endswith(" Its quadratic-weighted kappa changes on average by -0.120 (95% t interval over seeds "
                          "[-0.145, -0.095]; higher is better)."), shown
    one = Difference(run_id="dp_seed0", label="eps 1", arm="dp", mechanism="dpsgd", seed=0, reference_run="np_seed0",
                     epsilon=1.0,
                     auroc_difference=PairedDifference(value=-0.03, low=-0.05, high=-0.01, p_value=0.01,
                                                       defined_redraws=200),
                     accuracy_difference=PairedDifference(value=-0.05, low=-0.08, high=-0.02, p_value=0.01,
                                                          defined_redraws=200),
                     kappa_quadratic_difference=PairedDifference(value=-0.12, low=-0.2, high=-0.04, p_value=0.01,
                                                                 defined_redraws=200))
    assert read(single=one).endswith(" Its quadratic-weighted kappa changes by -0.120 (95% CI [-0.200, -0.040]; "
                                     "higher is better)."), read(single=one)
    unordered = one.model_copy(update={"kappa_quadratic_difference": None})
    assert "kappa" not in read(single=unordered) and "kappa" not in read(seeds=arm([-0.1, -0.1, -0.1]).model_copy(
        update={"kappa_quadratic_difference": None}))
