"""The fairness, interpretability and comparison sections of the report, and their results.csv columns, from
hand-made run records plus saved predictions and CAMs: the study-level comparisons are recomputed from the files."""

from __future__ import annotations

import html
import json
import re

import numpy as np

from dpmed.evaluation.explanations import explain_test_set
from dpmed.evaluation.fairness import evaluate_fairness
from dpmed.folders import StudyFolder
from dpmed.models import build_model
from dpmed.outputs import write_outputs
from dpmed.evaluation.summaries import Estimate
from dpmed.reporting import results_frame
from dpmed.reporting.inputs import eps_label
from dpmed.reporting.inputs import estimate_text as _est

RNG = np.random.default_rng(0)
N = 60
Y = RNG.integers(0, 2, N)
SEX = RNG.choice(["female", "male"], N)
AGE = RNG.uniform(20, 95, N)


def _run(release, make_record, run_id, arm, mechanism, eps, noise_level, seed=0, root=None):
    """A run released with its predictions and CAMs (`release`) into the study folder ``root`` (tmp_path unless
    given)."""
    scores = np.clip(0.5 * Y + noise_level * RNG.random(N), 0, 1)
    images = RNG.random((N, 1, 16, 16)).astype(np.float32)
    masks = np.zeros((N, 16, 16), bool)
    masks[Y == 1, 4:9, 4:9] = True
    model = build_model("small_cnn", in_channels=1, num_outputs=2, image_size=16, seed=seed)
    explanations, cams = explain_test_set(model, images, masks, kind="binary", target_layer="features",
                                          method="gradcam", n_images=8, seed=0, deletion_steps=4, pointing_tolerance=0,
                                          n_resamples=50)
    record = make_record(run_id, arm, mechanism, eps=eps, seed=seed,
                         metrics={"test_auroc": 0.8, "test_auroc_low": 0.7, "test_auroc_high": 0.9},
                         fairness=evaluate_fairness(kind="binary", val_labels=Y, val_scores=scores, test_labels=Y,
                                                    test_scores=scores, attributes={"sex": SEX, "age": AGE},
                                                    n_resamples=50),
                         explanations=explanations)
    return release(record, root=root, cams=cams, predictions=dict(
        test_scores=scores, test_labels=Y, test_patient_ids=np.arange(N).astype(str), val_scores=scores, val_labels=Y,
        val_patient_ids=np.arange(N).astype(str)))


def test_report_shows_fairness_interpretability_and_paired_differences(tmp_path, release, make_record,
                                                                       make_resolved):
    records = [_run(release, make_record, "np_seed0", "np", "none", None, 0.6),
               *[_run(release, make_record, f"dp_eps{e}_C1_seed0", "dp", "dp_sgd", e, 1.0 - 0.05 * e)
                 for e in (1, 4, 8)]]
    write_outputs(StudyFolder(tmp_path), make_resolved(records, resamples=50, n_test=N), records)
    page = (tmp_path / "report.html").read_text()
    for text in ('id="fairness"', 'id="interpretability"', 'id="comparisons"', "Accuracy parity difference",
                 "equalised odds", "lesion-mask energy", "masked-input score", "AUROC difference",
                 "percentile bootstrap intervals over those images.",         # explained without patient ids
                 "percentile interval of the paired bootstrap",               # not the BCa of the runs' own
                 "Test accuracy per group", "Demographic parity difference per group",
                 "in 4 equal steps, a deleted pixel (or one not yet inserted) set to black (0 in [0, 1] pixels)",
                 "within 0 px of the lesion mask",                           # the settings the metrics depend on
                 "Pearson r between log10 ε and each group's accuracy parity difference"):
        assert text in page, text
    for png in ("fairness_sex.png", "fairness_age.png", "cam_grid.png"):
        assert (tmp_path / png).stat().st_size > 1000
    comparisons = json.loads((tmp_path / "comparisons.json").read_text())
    assert {row["run_id"] for row in comparisons["auroc_differences"]} == {r.run_id for r in records[1:]}
    # every eps in the fairness and interpretability tables is the full label (delta, accountant, unit, rounded up),
    # and the comparison table's sensitivity column holds the sensitivity difference
    for anchor in ("fairness", "interpretability"):
        start = page.index(f'id="{anchor}"')
        section = page[start:page.find("<h2 ", start + 1)]
        for r in records[1:]:
            assert re.search(rf"<td[^>]*>{re.escape(r.run_id)}</td><td[^>]*>{re.escape(eps_label(r.privacy))}</td>",
                             section), (anchor, r.run_id)
    row = next(c for c in comparisons["auroc_differences"] if c["run_id"] == "dp_eps8_C1_seed0")
    start = page.index('id="comparisons"')
    table_row = re.search(r"<tr><td[^>]*>dp_eps8_C1_seed0</td>(.*?)</tr>", page[start:], re.S).group(1)
    cells = dict(re.findall(r'<td data-label="([^"]+)" class=num>([^<]*)</td>', table_row))
    sensitivity = row["sensitivity_difference"]
    assert cells["sensitivity (opacity) difference"] == _est(Estimate(value=sensitivity["value"],
                                                                      low=sensitivity["low"], high=sensitivity["high"]),
                                                                 signed=True)
    assert comparisons["correlations"]["epsilon_vs_accuracy_parity"][0]["n"] == 3
    assert comparisons["correlations"]["epsilon_vs_accuracy_parity"][0]["x"] == "log10 eps"
    # one p per group, uncorrected: said; three eps values: an r for each group
    assert "not corrected for the number of groups tested" in page
    assert all(c["r"] is not None for c in comparisons["correlations"]["epsilon_vs_accuracy_parity"])
    two = tmp_path / "two"
    pair = [_run(release, make_record, f"np_seed{k}", "np", "none", None, 0.6, seed=k, root=two) for k in (0, 1)] + [
        _run(release, make_record, f"dp_eps{e}_C1_seed{k}", "dp", "dp_sgd", e, 1.0 - 0.05 * e - 0.1 * k, seed=k,
             root=two)
        for e in (1, 8) for k in (0, 1)]                                    # two eps, two seeds: four points
    write_outputs(StudyFolder(two), make_resolved(pair, resamples=50, n_test=N), pair)
    two_page = html.unescape((two / "report.html").read_text())
    # across two eps values r only says which is larger: no r, and the report says why instead of a table
    assert "only 2 distinct values of log10 eps (r needs 3: across two it only compares them)" in two_page
    assert '<th scope="col">group</th><th scope="col">r</th>' not in two_page

    frame = results_frame(records)
    for column in ("fairness[sex=female]_auroc", "fairness[sex=female]_auroc_low", "fairness[age]_worst_group_auroc",
                   "fairness[sex]_equalized_odds_difference_high", "explanations_mask_energy",
                   "explanations_pointing_game_low", "explanations_average_drop"):
        assert column in frame.columns, column


def test_a_damaged_cams_file_leaves_its_run_out_of_the_grid_and_says_so(tmp_path, release, make_record,
                                                                        make_resolved):
    """Before: a truncated cams.npz ended the report in BadZipFile; now the grid shows the other runs."""
    records = [_run(release, make_record, "np_seed0", "np", "none", None, 0.6),
               _run(release, make_record, "dp_eps1_C1_seed0", "dp", "dp_sgd", 1, 0.95)]
    damaged = tmp_path / "runs" / "dp_eps1_C1_seed0" / "cams.npz"
    damaged.write_bytes(damaged.read_bytes()[:-40])
    write_outputs(StudyFolder(tmp_path), make_resolved(records, resamples=50, n_test=N), records)
    page = html.unescape((tmp_path / "report.html").read_text())
    assert f"Left out of the CAM grid: dp_eps1_C1_seed0: {damaged} cannot be read (" in page
    assert (tmp_path / "cam_grid.png").stat().st_size > 1000 and "explained by every run" in page


def test_the_report_says_whether_the_bootstrap_redrew_patients_or_images(two_arms, report_html):
    """Every interval sentence names what its redraws drew: the runs' bootstrap_unit (run.json) for the utility and
    fairness intervals, the comparisons' for the paired differences; records without it predate the patient
    bootstrap and redrew images."""
    page = report_html(two_arms)                          # computed without patient ids: images
    for text in ("paired bootstrap redraws of the test images (bootstrap seed",
                 "over the same redraws of the test images as the utility intervals",
                 "redraws of the test images [95% CI]",
                 "(the same redraws of the test images for both)"):
        assert text in page, text
    assert "test patients" not in page
    by_patient = [r.model_copy(update={"metrics": {**r.metrics, "bootstrap_unit": "patient"}}) for r in two_arms]
    page = report_html(by_patient)
    patients = "the test patients (each drawn patient with all of their images)"
    for text in (f"paired bootstrap redraws of {patients} (bootstrap seed",
                 f"over the same redraws of {patients} as the utility intervals",
                 "redraws of the test patients [95% CI]",
                 "(the same redraws of the test patients for both)"):
        assert text in page, text
    assert "redraws of the test images" not in page


def test_each_all_zero_count_is_attached_to_the_metrics_its_maps_feed(tmp_path, make_record, make_resolved,
                                                                      make_explanations):
    """The predicted-class maps feed the confidence and deletion/insertion metrics, the lesion-class maps energy and
    the pointing game: each count of all-zero maps is named with its own metrics, never one for the other."""
    estimate = {"value": 0.5, "low": 0.4, "high": 0.6, "n": 4}
    explanations = make_explanations({m: estimate for m in ("average_drop", "deletion_auc", "mask_energy",
                                                            "pointing_game")},
                                     n_zero_cams=3, n_masked_images=4, n_zero_lesion_cams=2, lesion_class=1,
                                     mask_area_share=0.1)
    records = [make_record("np_seed0", "np", explanations=explanations),
               make_record("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0,
                           explanations=explanations.model_copy(update={"n_zero_cams": 0, "n_zero_lesion_cams": 1}))]
    write_outputs(StudyFolder(tmp_path), make_resolved(records, resamples=50, n_test=N), records)
    page = (tmp_path / "report.html").read_text()
    predicted = page[page.index("All-zero CAMs of the explained class"):]
    predicted = predicted[:predicted.index(".</")]
    lesion = page[page.index("All-zero CAMs of class 1"):]
    lesion = lesion[:lesion.index(".</")]
    assert "Average Drop" in predicted and "deletion/insertion AUC" in predicted and "np_seed0: 3 of 8" in predicted
    assert "energy" not in predicted and "pointing" not in predicted and "dp_eps1" not in predicted   # 0: unsaid
    assert "lesion-mask energy and the pointing game" in lesion and "0 energy and misses" in lesion
    assert "np_seed0: 2 of 4, dp_eps1_C1_seed0: 1 of 4" in lesion and "Average Drop" not in lesion


def test_a_label_correlation_without_r_gives_its_reason_not_a_p_value():
    """Before: "– (p one variable is constant)" in the across-labels table."""
    from dpmed.comparisons.correlations import Correlation
    from dpmed.reporting.comparison_section import _r_with_p

    assert _r_with_p(Correlation(r=None, p_value=None, n=3, reason="one variable is constant")) == (
        "– (one variable is constant)")
    assert _r_with_p(Correlation(r=0.4123, p_value=0.0312, n=5)) == "+0.412 (p 0.0312)"


def test_a_multilabel_group_s_positives_are_given_per_finding_not_summed():
    """Before: "[70,80): 11 (11 positive)" for 11 images with 5 and 6 positives in two findings."""
    from dpmed.evaluation.summaries import Estimate, GroupFairness
    from dpmed.reporting.fairness_section import _positives

    est = Estimate(value=0.8, low=0.6, high=0.9)
    group = GroupFairness(n=11, auroc=est, accuracy=est, accuracy_parity_difference=est, n_positive=11,
                          n_positive_by_label=[5, 6])
    assert _positives(group) == "positives per finding: 5, 6"
    assert _positives(group.model_copy(update={"n_positive_by_label": None})) == "11 positive"   # binary, or older
    assert _positives(group.model_copy(update={"n_positive_by_label": None, "n_positive": None})) == ""


def test_only_arm_values_run_at_two_or_more_seeds_get_a_row_over_seeds(scored_run, report_html, scores):
    """A study mixing a two-seed and a one-seed DP arm: a one-seed value has no spread over seeds, so the table of
    means and standard deviations over seeds lists the two-seed value alone."""
    binary_scores, rng = scores, np.random.default_rng(3)
    records = [scored_run(f"np_seed{s}", "np", scores=binary_scores(0.7, rng), seed=s) for s in (0, 1)]
    records += [scored_run(f"dp_eps1_C1_seed{s}", "dp", "dp_sgd", eps=1.0, scores=binary_scores(0.4, rng), seed=s)
                for s in (0, 1)]
    records.append(scored_run("dp_eps8_C1_seed0", "dp", "dp_sgd", eps=8.0, scores=binary_scores(0.6, rng)))
    page = report_html(records)
    start = page.index("Over seeds (training randomness")
    table = page[start:page.index("</table>", start)]
    assert re.findall(r"<tr><td[^>]*>([^<]*)</td>", table) == ["dp_eps1_C1"]
    assert re.search(r">[012] of 2</td>", table) and " of 1<" not in table


def test_a_binary_run_whose_scores_sit_on_both_sides_of_one_half_is_flagged_as_hardly_varying(
        tmp_path, make_record, make_resolved, make_explanations):
    """A binary run explains the class its validation threshold decides, so a never-confident model's Y may fall just
    below 0.5 as well as just above: every Y within 0.05 of chance (0.5) is the flat case the note names. A
    multiclass run's chance is 1/K, not 0.5, so Y near 0.5 there is not flat."""
    estimate = {"value": 10.0, "low": 5.0, "high": 15.0}
    flat = make_explanations({"average_drop": estimate}, explained_class="predicted (at the run's validation Youden "
                             "threshold)", score_image_min=0.46, score_image_max=0.53)
    confident = flat.model_copy(update={"score_image_min": 0.44, "score_image_max": 0.9})
    records = [make_record("np_seed0", "np", explanations=confident),
               make_record("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0, explanations=flat)]
    write_outputs(StudyFolder(tmp_path), make_resolved(records, resamples=50, n_test=N), records)
    page = (tmp_path / "report.html").read_text()
    note = page[page.index("Predicted-class scores Y that hardly vary"):]
    note = note[:note.index("</li>")]
    assert "dp_eps1_C1_seed0" in note and "np_seed0" not in note

    three = [r.model_copy(update={"data": r.data.model_copy(update={"task": "multiclass"}),
                                  "explanations": flat.model_copy(update={"explained_class": "predicted (argmax)",
                                                                          "score_image_min": 0.5,
                                                                          "score_image_max": 0.54})})
             for r in records]
    out = tmp_path / "multiclass"
    out.mkdir()
    write_outputs(StudyFolder(out), make_resolved(three, resamples=50, n_test=N, task="multiclass",
                                                  label_names=("a", "b", "c")), three)
    assert "hardly vary" not in (out / "report.html").read_text()


def _number_cells(page: str, start: str) -> dict[str, list[str]]:
    """The number cells of the first table after ``start``, by column header."""
    at = page.index(start)
    table = page[at:page.index("</table>", at)]
    heads = re.findall(r"<th[^>]*>([^<]*)</th>", table)
    rows = [re.findall(r"<td[^>]*>([^<]*)", row) for row in re.findall(r"<tr><td.*?</tr>", table, re.S)]
    return {h: [row[i].strip() for row in rows if row[i].strip() != "–"] for i, h in enumerate(heads)
            if h not in ("run", "reference", "p")}


def test_a_difference_carries_its_sign_in_every_table_as_in_the_summary(tmp_path, release, make_record,
                                                                        make_resolved):
    """A difference (a run minus the non-private run, a group minus the rest) reads "-0.050 [-0.120, +0.010]" in
    the comparison and fairness tables, as the summary prints it; before, "0.050" there could be a gain or a loss.
    The spreads over the groups (largest minus smallest: never negative) stay unsigned."""
    from dpmed.comparisons import PairedDifference
    from dpmed.reporting.comparison_section import _difference_cell

    loss = PairedDifference(value=-0.05, low=-0.12, high=0.01, p_value=0.2, defined_redraws=200)
    gain = PairedDifference(value=0.216, low=-0.006, high=0.427, p_value=0.06, defined_redraws=200)
    assert _difference_cell(loss).startswith("<td class=num>-0.050 [-0.120,\u00a0+0.010]</td>")
    assert _difference_cell(gain).startswith("<td class=num>+0.216 [-0.006,\u00a0+0.427]</td>")

    records = [_run(release, make_record, "np_seed0", "np", "none", None, 0.6),
               _run(release, make_record, "dp_eps1_C1_seed0", "dp", "dp_sgd", 1, 0.95)]
    write_outputs(StudyFolder(tmp_path), make_resolved(records, resamples=50, n_test=N), records)
    page = html.unescape((tmp_path / "report.html").read_text())
    number = r"(?:[+-]\d\.\d{3}|0\.000)"          # signed, or a change that rounds to none
    signed = re.compile(rf"{number} \[{number},\u00a0{number}\]( ⚠)?")
    spreads = ("demographic parity diff.", "equalised odds diff.")
    tables = {start: _number_cells(page, start) for start in (
        "Each run minus the non-private run of the same seed", "Accuracy parity difference per group",
        "Demographic parity difference per group")}
    for start, columns in tables.items():
        cells = [c for head, values in columns.items() if head not in spreads for c in values]
        assert cells and all(signed.fullmatch(c) for c in cells), (start, cells)
    # two groups of sex: female minus the rest and male minus the rest have opposite signs, and both show them
    parity = tables["Accuracy parity difference per group"]
    female, male = (records[0].fairness.attributes["sex"].groups[g].accuracy_parity_difference.value
                    for g in ("female", "male"))
    assert female * male < 0 and {parity["female"][0][0], parity["male"][0][0]} == {"+", "-"}
    assert all(c[0].isdigit() for head in spreads for c in parity[head]) and parity[spreads[0]]


def test_the_note_on_an_interval_beside_its_point_quotes_a_parity_with_its_sign_and_a_spread_without():
    """The note's example is a number of the tables above: a group's parity signed as there, a spread unsigned."""
    from types import SimpleNamespace

    from dpmed.evaluation.summaries import AttributeFairness, GroupFairness, Spread
    from dpmed.reporting.fairness_section import _outside_note

    inside = Estimate(value=0.8, low=0.7, high=0.9)
    parity = Estimate(value=-0.3, low=-0.2, high=0.1)                  # the point below its interval
    group = GroupFairness(n=20, auroc=inside, accuracy=inside, accuracy_parity_difference=parity)
    entry = AttributeFairness(status="ok", groups={"female": group})
    note = _outside_note([(SimpleNamespace(run_id="r"), entry)], ["female"], "95%", "percentile")
    assert "female accuracy parity difference -0.300 [-0.200,\u00a0+0.100])" in note
    spread = AttributeFairness(status="ok", groups={"female": group.model_copy(update={
        "accuracy_parity_difference": inside})}, equalized_odds_difference=Spread(value=0.275, low=0.286, high=1.0))
    note = _outside_note([(SimpleNamespace(run_id="r"), spread)], ["female"], "95%", "percentile")
    assert "equalised odds difference 0.275 [0.286,\u00a01.000])" in note


def test_the_interpretability_section_names_a_run_that_decides_one_class_for_every_test_image(
        tmp_path, make_record, make_resolved, make_explanations):
    """A DP arm that collapsed to one class still gets faithfulness scores, and they look the best of the table
    (Average Drop 0, Increase in Confidence 100 %: masking leaves the one class's score as high or raises it). The
    section says which runs those are, beside the numbers a reader compares, not only at the top of the report."""
    explained = make_explanations({"average_drop": {"value": 0.0, "low": 0.0, "high": 0.0}})
    metrics = {"test_auroc": 0.6, "test_auroc_low": 0.5, "test_auroc_high": 0.7}
    records = [make_record(run_id, arm, mechanism, eps=eps, metrics=metrics | {"test_predicted_classes": chosen},
                           explanations=explained)
               for run_id, arm, mechanism, eps, chosen in (("np_seed0", "np", "none", None, 3),
                                                           ("dp_eps1_C1_seed0", "dp", "dp_sgd", 1.0, 1))]
    records = [r.model_copy(update={"data": r.data.model_copy(update={"task": "multiclass"})}) for r in records]
    write_outputs(StudyFolder(tmp_path), make_resolved(records, resamples=50, n_test=N, task="multiclass",
                                                       label_names=("a", "b", "c")), records)
    page = (tmp_path / "report.html").read_text()
    section = page[page.index('id="interpretability"'):]
    section = section[:section.index("<h2", 1)]
    note = section[section.index("one class for every test image"):]
    note = note[:note.index("</li>")]
    assert "dp_eps1_C1_seed0" in note and "np_seed0" not in note
