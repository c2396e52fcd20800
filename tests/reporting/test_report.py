"""The report and tables from hand-made typed run records: no training needed, so every branch is cheap to reach."""

from __future__ import annotations

import csv
import logging
import re
from html import escape as html_escape
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

import dpmed.data.pace
from dpmed.comparisons import compare_runs
from dpmed.folders import StudyFolder
from dpmed.outputs import write_outputs
from dpmed.reporting import SECTIONS, page, results_frame, summary_text, write_report, write_results_table


def _metrics(auroc, low, high):
    return {"test_auroc": auroc, "test_auroc_low": low, "test_auroc_high": high, "test_accuracy": 0.8,
            "test_accuracy_low": 0.7, "test_accuracy_high": 0.9}


@pytest.fixture
def records(make_record):
    return [make_record("non-private_seed0", "non-private", metrics=_metrics(0.90, 0.85, 0.95)),
            make_record("dp-sgd_eps8_C1_seed0", "dp-sgd", "dp_sgd", eps=8.07,     # interval entirely below 0.85
                        metrics=_metrics(0.80, 0.70, 0.84)),
            make_record("dp-sgd_eps1_C1_seed0", "dp-sgd", "dp_sgd", eps=1.0, metrics=_metrics(None, None, None))]


def _write(tmp_path, resolved, records):
    folder = StudyFolder(tmp_path)
    write_report(resolved, records, compare_runs(records, {}, kind="binary", label_names=[]), folder)
    return folder.report.read_text()


def test_results_table_has_one_row_per_run_with_privacy_fields(tmp_path, records):
    write_results_table(records, tmp_path / "results.csv")
    frame = pd.read_csv(tmp_path / "results.csv")
    assert list(frame["run_id"]) == [r.run_id for r in records]
    assert frame.loc[1, "delta"] == 1e-5 and frame.loc[1, "accountant"] == "pld"
    assert pd.isna(frame.loc[0, "epsilon"]) and frame.loc[0, "is_dp"] == False  # noqa: E712 (numpy bool)
    assert results_frame(records).shape[0] == 3


def test_summary_names_delta_and_accountant_and_survives_undefined_auroc(records):
    text = summary_text(records).splitlines()
    assert "inf (no privacy)" in text[1] and "0.900 [0.850, 0.950]" in text[1]
    assert "delta 1e-05" in text[2] and "PLD" in text[2] and "add/remove one image" in text[2]
    assert "undefined" in text[3]


def test_report_reads_the_numbers_honestly(tmp_path, records, make_record, make_resolved):
    html = _write(tmp_path, make_resolved(records, confidence=0.9), records)
    assert "whole interval lies below that of its seed's non-private run" in html   # 0.84 < 0.85, no predictions
    assert "test AUROC undefined" in html
    assert "90% percentile intervals" in html and "[90% CI]" in html      # the study's level, not a fixed 95%
    assert "90% BCa intervals" in _write(tmp_path, make_resolved(records, confidence=0.9, interval="bca"), records)
    assert "synthetic" in html and (tmp_path / "auroc_vs_epsilon.png").stat().st_size > 1000
    assert "test statement" in html                                        # the study as a whole
    overlap = [records[0], make_record("dp-sgd_eps8_C1_seed0", "dp-sgd", "dp_sgd", eps=8.07,
                                       metrics=_metrics(0.84, 0.78, 0.86))]
    page = _write(tmp_path, make_resolved(overlap), overlap)
    assert "its interval overlaps that of its seed's non-private run" in page


def test_every_section_renders_in_page_order(tmp_path, records, make_resolved):
    html = _write(tmp_path, make_resolved(records), records)
    positions = [html.index(f'id="{anchor}"') for anchor in ("summary", "utility", "privacy", "study-privacy",
                                                              "provenance")]
    assert positions == sorted(positions) and len(SECTIONS) >= 10


def test_writing_the_report_says_it_began_and_how_far_it_is(tmp_path, records, make_resolved, monkeypatch, caplog):
    """A study of many runs spent minutes on its report's figures with no line on the terminal. Here each section
    takes 15 s on the clock the paced lines read: a line when the report begins, then at most one per interval."""
    now = [1000.0]
    monkeypatch.setattr(dpmed.data.pace, "time", SimpleNamespace(perf_counter=lambda: now[0]))

    def slow(section):
        def drawn(inputs):
            now[0] += 15.0
            return section(inputs)
        return drawn

    monkeypatch.setattr(page, "SECTIONS", tuple(slow(section) for section in SECTIONS[:4]))
    with caplog.at_level(logging.INFO, logger="dpmed.reporting"):
        _write(tmp_path, make_resolved(records), records)
    assert caplog.messages == ["report: drawing the figures and tables of 3 finished runs",
                               "report: 2 of 4 sections drawn, about 1 min left"]


def test_the_auroc_axis_shows_a_run_below_chance_and_keeps_its_usual_floor_otherwise(records, make_record):
    from dpmed.reporting.figures import auroc_figure

    assert auroc_figure(records).axes[0].get_ylim() == (0.4, 1.01)
    below = records + [make_record("dp-sgd_eps1_C1_seed2", "dp-sgd", "dp_sgd", eps=1.0, seed=2,
                                   metrics=_metrics(0.39, 0.31, 0.48))]
    bottom, top = auroc_figure(below).axes[0].get_ylim()
    # two seeds, one defined at eps 1: down to that seed's AUROC, not its bootstrap interval
    assert bottom == pytest.approx(0.37) and top == 1.01


def test_the_report_says_on_what_the_settings_were_chosen(records, make_resolved):
    """Hyperparameters searched on the private patients cost privacy no eps covers: the study's statement is
    printed beside the recipe, and its absence is said, not hidden."""
    from dpmed.folders import StudyFolder
    from dpmed.reporting.inputs import ReportInputs
    from dpmed.reporting.recipe_section import recipe_section
    from dpmed.reporting.privacy_section import study_privacy_section

    def inputs(resolved):
        return ReportInputs(resolved=resolved, records=records, comparisons=None, folder=StudyFolder(Path("unused")))

    resolved = make_resolved(records)
    assert "Settings chosen on:</b> not stated" in recipe_section(inputs(resolved))
    assert "Papernot and Steinke" in recipe_section(inputs(resolved))
    # what "may be shared" keeps: a non-private run's model is shareable but protects no one
    section = study_privacy_section(inputs(resolved))
    assert "a run without privacy (ε = ∞) keeps none, its model and predictions included" in section
    # shared together, the files keep the study's total, not each card's ε (two runs at ε 8 are more than ε 8)
    assert "they keep the privacy each run's card states" not in section
    assert ("all of them shared together keep only the study's total above, not the ε of any one card" in section
            and "each run's own files keep the privacy its card states" in section)
    said = resolved.model_copy(update={"study": resolved.study.model_copy(
        update={"settings_chosen_on": "CheXpert's validation split <b>"})})
    html = recipe_section(inputs(said))
    assert "CheXpert&#x27;s validation split &lt;b&gt; (the study's own statement)" in html   # escaped, as given
    assert "not stated" not in html


def test_summary_header_states_the_confidence_level_of_the_intervals(make_record):
    metrics = {"test_auroc": 0.8, "test_auroc_low": 0.7, "test_auroc_high": 0.9, "test_accuracy": 0.75,
               "confidence": 0.9}
    header = summary_text([make_record("r0", "base", metrics=metrics)]).splitlines()[0]
    assert "90% percentile CI" in header
    assert "95%" not in header
    for level, shown in ((0.999, "99.9% percentile CI"), (0.975, "97.5% percentile CI"),
                         (0.995, "99.5% percentile CI")):   # never "100%" or "98%"
        metrics["confidence"] = level
        assert shown in summary_text([make_record("r0", "base", metrics=metrics)]).splitlines()[0], level


def test_the_report_states_a_level_as_it_is_never_rounded_to_a_certainty(tmp_path, records, make_resolved):
    html = _write(tmp_path, make_resolved(records, confidence=0.999), records)
    assert "99.9% percentile intervals" in html and "[99.9% CI]" in html and "100% " not in html


def test_the_summary_gives_the_training_set_only_as_its_dp_count_where_dp_sgd_planned_from_one(records,
                                                                                              make_resolved):
    from dpmed.folders import StudyFolder
    from dpmed.reporting.inputs import ReportInputs
    from dpmed.reporting.sections import summary

    def section(resolved):
        return summary(ReportInputs(resolved=resolved, records=records, folder=StudyFolder(Path("unused")),
                                    comparisons=compare_runs(records, {}, kind="binary", label_names=[])))

    resolved = make_resolved(records)
    assert "10 / 5 / 5 train / validation / test images (8 training patients)" in section(resolved)
    hidden = resolved.model_copy(update={"dataset": resolved.dataset.model_copy(update={
        "n_train": None, "n_train_patients": None, "released_sizes": {"patients": 9}, "size_epsilon": 0.02})})
    html = section(hidden)
    assert ("in training about 9 patients, rough: ± 150 at 95 % (a DP count: ε 0.02, δ 0, closed form (discrete "
            "Laplace), add/remove one of what it counts; a DP-SGD run&#x27;s ε includes it)" in html
            and "5 / 5 validation / test images" in html)
    assert "10 /" not in html and "8 training" not in html and "not DP" not in html
    seeded = hidden.model_copy(update={"study": hidden.study.model_copy(update={"privacy_randomness": "reproducible"})})
    assert ("in training about 9 patients, rough: ± 150 at 95 % (not DP: seed known (reproducible mode); as accounted, "
            "a DP count: ε 0.02" in section(seeded))     # its noise came from the published seed: anyone subtracts it


def test_a_card_planned_from_a_count_below_the_batch_shows_the_count_beside_n(make_record):
    """Before: the key facts said only "training units N (planned from) 64" and "ε of the released N", though 64 was
    the batch and the count released was 35; results.csv had no column for it."""
    from dpmed.reporting import results_frame
    from dpmed.reporting.privacy_section import _card

    record = make_record("dp_eps8_seed0", "dp", "dp_sgd", eps=8.0)
    record = record.model_copy(update={"privacy": record.privacy.model_copy(update={
        "n_units": 64, "released_units": 35, "size_epsilon": 0.02})})
    html = _card(record)
    assert '<th scope="row">training units N (planned from)</th><td>64</td>' in html
    assert '<th scope="row">released count (below the expected batch, which N then is)</th><td>35</td>' in html
    assert '<th scope="row">ε of the released count (included in ε)</th><td>0.02</td>' in html
    assert results_frame([record]).loc[0, "released_units"] == 35
    plain = make_record("dp_eps8_seed1", "dp", "dp_sgd", eps=8.0)
    assert "released count (below" not in _card(plain)


def test_provenance_names_the_runs_written_by_other_versions(tmp_path, records, make_resolved):
    """The report showed the first run's versions only, though a folder resumed after an upgrade mixes runs of two
    dpmed commits (and Ray workers may run other libraries)."""
    same = {"dpmed": "0.1.0", "git_commit": "aaaa", "torch": "2.9"}
    mixed = [records[0].model_copy(update={"versions": same}),
             records[1].model_copy(update={"versions": {**same, "git_commit": "bbbb"}}),
             records[2].model_copy(update={"versions": same})]
    html = _write(tmp_path, make_resolved(mixed), mixed)
    assert "Not every run was written by the same versions: 2 of 3 by those below" in html
    assert "<li>dp-sgd_eps8_C1_seed0: git_commit bbbb</li>" in html and "<td>aaaa</td>" in html
    html = _write(tmp_path, make_resolved(mixed), [r.model_copy(update={"versions": same}) for r in mixed])
    assert "Not every run" not in html


def test_provenance_says_the_unit_of_where_each_run_resumed(tmp_path, records, make_resolved):
    """The column "resumed from" showed 2 for a run without DP-SGD (an epoch) beside a DP-SGD run's 33 (a step, in the
    private report): now every run's point is a step, said as one, a record an older dpmed wrote keeps its epoch,
    named, and a DP-SGD run's stays private."""
    import re

    def resumed(record, point: int, unit: str = "step"):
        return record.model_copy(update={"timing": record.timing.model_copy(
            update={"resumed_from": point, "resumed_unit": unit})})

    shown = [resumed(records[0], 28), resumed(records[0], 2, "epoch").model_copy(update={"run_id": "older_seed0"}),
             records[0].model_copy(update={"run_id": "whole_seed0"}), records[1].model_copy(
                 update={"timing": resumed(records[1], 33).timing.shareable(records[1].plan)})]
    html = _write(tmp_path, make_resolved(shown), shown)
    cells = dict(re.findall(r'<td data-label="run">([^<]+)</td>.*?<td data-label="resumed from" class=num>(.*?)</td>',
                            html))
    assert cells["non-private_seed0"] == "step 28" and cells["older_seed0"] == "epoch 2"
    assert cells["whole_seed0"] == "–" and "private" in cells["dp-sgd_eps8_C1_seed0"] and "step 33" not in html


def test_the_risk_section_names_the_dp_sgd_runs_it_has_no_bound_for(make_record, make_resolved):
    """The reconstruction and membership bounds are proved for Gaussian noise with Poisson sampling: a Laplace-noise
    DP-SGD run has none, and the section left it out without a word, as if the study had no such run. It now names
    it and says why, and still shows the section where no run has a bound."""
    from dpmed.folders import StudyFolder
    from dpmed.mechanisms import mechanism_info
    from dpmed.reporting.inputs import ReportInputs
    from dpmed.reporting.privacy_section import reconstruction_risk

    gaussian = make_record("gauss_eps8_C1_seed0", "gauss", "dp_sgd", eps=8.0)
    gaussian = gaussian.model_copy(update={"reconstruction": mechanism_info("dp_sgd").reconstruction(
        gaussian.plan.privacy.model_copy(update={"n_units": 100}))})
    laplace = make_record("lap_eps8_C1_seed0", "lap", "dp_sgd", eps=8.0)
    laplace = laplace.model_copy(update={"privacy": laplace.privacy.model_copy(update={"noise": "laplace"})})

    def section(records):
        return reconstruction_risk(ReportInputs(resolved=make_resolved(records), records=records, comparisons=None,
                                                folder=StudyFolder(Path("unused"))))

    both = section([gaussian, laplace])
    assert ">gauss_eps8_C1_seed0</td>" in both and ">lap_eps8_C1_seed0</td>" not in both
    assert "No bound is given for lap_eps8_C1_seed0 (Laplace noise)" in both
    alone = section([laplace])
    assert alone.startswith('<h2 id="risk">') and "lap_eps8_C1_seed0 (Laplace noise)" in alone
    assert "reconstruction and membership-inference bounds are proved" in alone and "above" not in alone
    assert "the bounds above are proved" in both
    assert section([gaussian]).count("No bound") == 0


def test_the_risk_section_says_each_bound_is_for_its_model_released_alone(make_record, make_resolved):
    """A quickstart's section gave each DP-SGD run's reconstruction bound (0.311% at eps 1) as "upper bounds on the
    success probability of an informed attacker", beside non-private models of the same patients that the study
    folder shares: an attacker who sees those as well is bounded by nothing. Where the study has other runs, the
    section says a bound holds for its model alone and names the runs without privacy."""
    from dpmed.folders import StudyFolder
    from dpmed.mechanisms import mechanism_info
    from dpmed.reporting.inputs import ReportInputs
    from dpmed.reporting.privacy_section import reconstruction_risk

    dp = make_record("dp-sgd_eps1_C1_seed0", "dp-sgd", "dp_sgd", eps=1.0)
    dp = dp.model_copy(update={"reconstruction": mechanism_info("dp_sgd").reconstruction(
        dp.plan.privacy.model_copy(update={"n_units": 100}))})
    baseline = make_record("non-private_seed0", "non-private")

    def section(records):
        html = reconstruction_risk(ReportInputs(resolved=make_resolved(records), records=records, comparisons=None,
                                                folder=StudyFolder(Path("unused"))))
        return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html))

    study = section([baseline, dp])
    assert "that run's model released alone" in study
    assert "'The study as a whole'" in study
    assert "by nothing where those include a run without privacy (non-private_seed0)" in study
    assert "released alone" not in section([dp])


def test_the_risk_section_says_in_words_what_its_prior_and_membership_columns_measure(make_record, make_resolved):
    """A reader who is no DP engineer met "prior kappa 0.134%" and "MIA TPR at FPR 0.1%: 0.24%" with no word on what
    either is. The intro says: the attacker's chance without the model, and the share of training patients an
    attacker can name as such while wrongly naming a set share of the others."""
    from dpmed.folders import StudyFolder
    from dpmed.mechanisms import mechanism_info
    from dpmed.reporting.inputs import ReportInputs
    from dpmed.reporting.privacy_section import reconstruction_risk

    dp = make_record("dp-sgd_eps1_C1_seed0", "dp-sgd", "dp_sgd", eps=1.0)
    dp = dp.model_copy(update={"reconstruction": mechanism_info("dp_sgd").reconstruction(
        dp.plan.privacy.model_copy(update={"n_units": 100}))})
    html = reconstruction_risk(ReportInputs(resolved=make_resolved([dp]), records=[dp], comparisons=None,
                                            folder=StudyFolder(Path("unused"))))
    intro = re.sub(r"\s+", " ", html.split("<table")[0])
    unit = dp.reconstruction.unit
    assert "prior kappa: the attacker's chance without the model" in intro
    assert (f"membership inference (MIA): the share (TPR) of training {unit}s an attacker can tell were in the "
            "training set while wrongly naming 0.1% or 1% (the FPR) of the others") in intro


def test_the_risk_section_names_the_runs_whose_bounds_came_from_rdp_not_pld(make_record, make_resolved,
                                                                           monkeypatch):
    """Beyond the steps a PLD composes the bounds come from RDP's delta (looser; run.json labels each value "RDP
    duality"), as the README promises the report says; the section showed them as if they were PLD's."""
    from dpmed.accounting import _pld
    from dpmed.folders import StudyFolder
    from dpmed.mechanisms import mechanism_info
    from dpmed.reporting.inputs import ReportInputs
    from dpmed.reporting.privacy_section import reconstruction_risk

    def bounded(run_id):
        record = make_record(run_id, "gauss", "dp_sgd", eps=0.5)      # sigma 2: no exact limit pins the bounds
        return record.model_copy(update={"reconstruction": mechanism_info("dp_sgd").reconstruction(
            record.plan.privacy.model_copy(update={"n_units": 100}))})

    pld = bounded("pld_eps0.5_C1_seed0")
    monkeypatch.setattr(_pld, "MAX_STEPS", 5)          # the record's 10 steps lie beyond it
    rdp = bounded("rdp_eps0.5_C1_seed0")
    assert rdp.reconstruction.worst_case_via.startswith("RDP duality")
    html = reconstruction_risk(ReportInputs(resolved=make_resolved([pld, rdp]), records=[pld, rdp], comparisons=None,
                                            folder=StudyFolder(Path("unused"))))
    assert "The bounds of rdp_eps0.5_C1_seed0 come from RDP's δ" in html
    assert "pld_eps0.5_C1_seed0 come" not in html and html.count("come from RDP") == 1


def test_results_csv_writes_counts_as_integers_where_some_runs_have_none(make_record, tmp_path):
    """n_units, steps and released_units are counts, missing for runs without DP-SGD: pandas made such a column
    float, and results.csv read "4254.0". They are written as integers."""
    dp = make_record("dp_eps8_seed0", "dp", "dp_sgd", eps=8.0)
    dp = dp.model_copy(update={"privacy": dp.privacy.model_copy(update={"n_units": 4254, "steps": 300})})
    write_results_table([make_record("base_seed0", "base"), dp], tmp_path / "results.csv")
    header, *rows = csv.reader((tmp_path / "results.csv").read_text().splitlines())
    for column, value in (("n_units", "4254"), ("steps", "300")):
        assert [row[header.index(column)] for row in rows] == ["", value]


def test_the_summary_names_the_cohort_the_study_trained_and_tested_on(records, make_resolved):
    """A study of one cohort of a release (data.patients: the private hospital of a simulated second site) is
    evaluated on that cohort's share of the test split; the summary named the dataset alone, as if it were whole."""
    from dpmed.config.data_section import PatientsConfig
    from dpmed.folders import StudyFolder
    from dpmed.reporting.inputs import ReportInputs
    from dpmed.reporting.sections import summary

    def section(resolved):
        return summary(ReportInputs(resolved=resolved, records=records, folder=StudyFolder(Path("unused")),
                                    comparisons=compare_runs(records, {}, kind="binary", label_names=[])))

    resolved = make_resolved(records)
    assert "cohort" not in section(resolved)
    study = resolved.study.model_copy(update={"data": resolved.study.data.model_copy(update={
        "patients": PatientsConfig(fraction=0.5, part=1, seed=2)})})
    html = section(resolved.model_copy(update={"study": study}))
    assert "phantom (only cohort 1 of a seeded patient draw (seed 2): 50% of the patients, u &gt;= 0.5):" in html


def test_the_summary_keeps_label_names_that_hold_a_comma_apart(records, make_resolved):
    """The phantom's findings are "opacity, image-left lung" and "opacity, image-right lung": joined with ", " the
    summary read "classes opacity, image-left lung, opacity, image-right lung", four names for two findings."""
    from dpmed.data.sample import names_text
    from dpmed.folders import StudyFolder
    from dpmed.reporting.inputs import ReportInputs
    from dpmed.reporting.sections import summary

    findings = ("opacity, image-left lung", "opacity, image-right lung")
    resolved = make_resolved(records, task="multilabel", label_names=findings)
    html = summary(ReportInputs(resolved=resolved, records=records, folder=StudyFolder(Path("unused")),
                                comparisons=compare_runs(records, {}, kind="binary", label_names=[])))
    assert "task multilabel; findings opacity, image-left lung; opacity, image-right lung" in html
    assert names_text(["normal", "pneumonia", "covid"]) == "normal, pneumonia, covid"


def test_the_risk_table_labels_each_eps_and_names_a_run_of_any_bound_from_rdp_and_no_run_without_dp_sgd(
        make_record, make_resolved):
    """Each row's eps names its delta, accountant and neighbours; a run whose worst case, relaxed bound or one TPR alone
    came from RDP's delta is named as such; a run without DP-SGD (no privacy, or local DP) is not among the runs the
    section has no bound for: those bounds are DP-SGD's, and no other mechanism was ever to have them."""
    from dpmed.folders import StudyFolder
    from dpmed.mechanisms import mechanism_info
    from dpmed.reporting.inputs import ReportInputs, eps_label
    from dpmed.reporting.privacy_section import reconstruction_risk

    def bounded(run_id, **via):
        record = make_record(run_id, "gauss", "dp_sgd", eps=0.5)
        risk = mechanism_info("dp_sgd").reconstruction(record.plan.privacy.model_copy(update={"n_units": 100}))
        return record.model_copy(update={"reconstruction": risk.model_copy(update=via)})

    plain = bounded("plain_eps0.5_C1_seed0")
    worst = bounded("worst_eps0.5_C1_seed0", worst_case_via="RDP duality (beyond the PLD's steps)")
    relaxed = bounded("relaxed_eps0.5_C1_seed0", relaxed_via="RDP duality (beyond the PLD's steps)")
    tpr = bounded("tpr_eps0.5_C1_seed0", tpr_at_fpr_via={**plain.reconstruction.tpr_at_fpr_via,
                                                          "0.01": "RDP duality (beyond the PLD's steps)"})
    assert not any(v.startswith("RDP") for v in (plain.reconstruction.worst_case_via, plain.reconstruction.relaxed_via,
                                                 *plain.reconstruction.tpr_at_fpr_via.values()))
    records = [make_record("np_seed0", "np"), plain, worst, relaxed, tpr]
    html = reconstruction_risk(ReportInputs(resolved=make_resolved(records), records=records, comparisons=None,
                                            folder=StudyFolder(Path("unused"))))
    assert ("The bounds of worst_eps0.5_C1_seed0, relaxed_eps0.5_C1_seed0, tpr_eps0.5_C1_seed0 come from RDP's δ"
            in html)
    assert "No bound" not in html and ">np_seed0</td>" not in html      # named only as voiding the bounds shared
    row = html.split(">plain_eps0.5_C1_seed0</td>", 1)[1].split("</tr>", 1)[0]
    assert f">{html_escape(eps_label(plain.privacy))}</td>" in row and "δ" in row and "PLD" in row


def test_the_utility_table_labels_each_runs_eps_and_the_caption_says_why_a_run_has_no_point(
        tmp_path, make_record, make_resolved):
    """Each row's eps cell is its card's label (delta, accountant, neighbours; not DP and why where it is not); the
    figure's caption names the not-DP run it cannot place, with its card's reason, and not the non-private run,
    which is the figure's line."""
    from dpmed.mechanisms import PrivacyCard
    from dpmed.reporting.inputs import ReportInputs, eps_label, not_dp_text
    from dpmed.reporting.sections import utility

    metrics = _metrics(0.8, 0.7, 0.9)
    shift = make_record("shift_seed0", "shift", metrics=metrics).model_copy(update={
        "mechanism": "scalar_shift",
        "privacy": PrivacyCard(mechanism="scalar_shift", is_dp=False, statement="NOT DP: one shift per image")})
    records = [make_record("np_seed0", "np", metrics=metrics),
               make_record("dp_eps8_C1_seed0", "dp", "dp_sgd", eps=8.0, metrics=metrics), shift]
    html = utility(ReportInputs(resolved=make_resolved(records), records=records,
                                comparisons=compare_runs(records, {}, kind="binary", label_names=[]),
                                folder=StudyFolder(tmp_path)))
    for r in records:
        row = html.split(f">{r.run_id}</td>", 1)[1].split("</tr>", 1)[0]
        assert f"<td data-label=\"ε\" class=eps>{html_escape(eps_label(r.privacy))}</td>" in row, row
    caption = html.split("<figcaption>", 1)[1].split("</figcaption>", 1)[0]
    assert f"shift_seed0 ({html_escape(not_dp_text(shift.privacy))})" in caption and "np_seed0" not in caption


def test_a_non_private_run_with_an_undefined_auroc_is_no_baseline(tmp_path, make_record, make_resolved):
    """The cost of privacy is read against a non-private AUROC: one that is undefined gives none, said as such."""
    from dpmed.reporting.inputs import ReportInputs
    from dpmed.reporting.sections import _reading

    records = [make_record("np_seed0", "np", metrics=_metrics(None, None, None)),
               make_record("dp_eps8_C1_seed0", "dp", "dp_sgd", eps=8.0, metrics=_metrics(0.8, 0.7, 0.9))]
    text = _reading(ReportInputs(resolved=make_resolved(records), records=records,
                                 comparisons=compare_runs(records, {}, kind="binary", label_names=[]),
                                 folder=StudyFolder(tmp_path)))
    assert "no non-private arm with a defined AUROC" in text and "dp_eps8_C1_seed0" not in text


def test_the_study_s_name_is_escaped_in_the_title_and_the_heading(tmp_path, records, make_resolved):
    """A study's name is free text from study.yaml: "A & B <script>" must read as written, not open a tag (a test
    that fails if the <title> or the <h1> puts the name in unescaped)."""
    resolved = make_resolved(records)
    named = resolved.model_copy(update={"study": resolved.study.model_copy(update={"name": "A & B <script>"})})
    html = _write(tmp_path, named, records)
    assert "<title>dpmed report: A &amp; B &lt;script&gt;</title>" in html
    assert "<h1>What privacy costs: A &amp; B &lt;script&gt;</h1>" in html
    assert "<script>" not in html


def test_the_unfinished_runs_warning_opens_the_page_and_the_footer_closes_it(tmp_path, make_record, make_resolved):
    """A run the study plans but that has not finished is said at the top, before any table (sections.unfinished:
    "a warning at the top"); the sections then follow in reading order, from the clinical table to provenance, and
    the sources close the page. Fails if the warning moves below the clinical table, two sections swap, or the
    footer is dropped."""
    planned = [make_record("non-private_seed0", "non-private", metrics=_metrics(0.90, 0.85, 0.95)),
               make_record("dp-sgd_eps1_C1_seed0", "dp-sgd", "dp_sgd", eps=1.0, metrics=_metrics(0.8, 0.7, 0.84))]
    html = _write(tmp_path, make_resolved(planned), planned[:1])
    body = html[html.index("</h1>") + len("</h1>"):].lstrip()
    assert body.startswith('<div class="flag">⚠ 1 of the 2 runs this study plans are not in this report')
    anchors = re.findall(r'<h2 id="([a-z-]+)"', html)
    assert anchors == ["clinical", "summary", "recipe", "utility", "privacy", "study-privacy", "provenance"]
    tail = html[html.index('id="provenance"'):]
    assert "Sources: Singh, Sikka, Kotti and Trask 2020" in tail and tail.endswith("</small></p></body></html>")


def test_a_model_in_runs_without_its_run_json_is_flagged_at_the_top_as_a_release_cut_short(tmp_path, make_record,
                                                                                           make_resolved):
    """A stop between moving a run's model and predictions into runs/<id>/ and writing its run.json leaves them in
    the shareable folder, covered by no eps of the study. Unflagged, a user who shares runs/ with the report shares
    them unsaid. The flag names the run and its files, before any table; runs with their run.json are not in it,
    and once the cut run has its run.json the flag is gone."""
    planned = [make_record("non-private_seed0", "non-private", metrics=_metrics(0.90, 0.85, 0.95)),
               make_record("dp-sgd_eps1_C1_seed0", "dp-sgd", "dp_sgd", eps=1.0, metrics=_metrics(0.8, 0.7, 0.84))]
    folder = StudyFolder(tmp_path)
    finished, cut = folder.run(planned[0].run_id), folder.run(planned[1].run_id)
    for run in (finished, cut):
        run.make()
        run.model.write_text("weights")
        run.predictions.write_text("scores")
    planned[0].write(finished.record)
    html = _write(tmp_path, make_resolved(planned), planned[:1])
    top = html[html.index("</h1>"):html.index("<h2")]
    flags = re.findall(r'<div class="flag">(.*?)</div>', top)
    released = [f for f in flags if "cut short" in f]
    assert len(released) == 1, flags
    assert released[0].startswith(f"⚠ The release of {cut.public.name} was cut short: "
                                  f"{cut.model.name}, {cut.predictions.name} lie in runs/")
    assert finished.public.name not in released[0] and "no ε of this study covers them" in released[0]
    planned[1].write(cut.record)
    html = _write(tmp_path, make_resolved(planned), planned)
    assert "cut short" not in html


def test_a_report_of_runs_released_whole_carries_no_flag_and_one_whose_run_json_is_gone_is_flagged(
        tmp_path, two_arms, report_html, make_resolved):
    """The report tests build their runs' folders as `dpmed run` leaves them (`release`: the run's files in runs/<id>/
    with its run.json). Several saved predictions without run.json, so every report built from them opened with a
    false flag of a release cut short, and a test could pass on that flag's words. A report of the whole study opens
    with no flag at all; once a run's run.json is gone, the flag names that run and its files, and no other run."""
    folder = StudyFolder(tmp_path)
    html = report_html(two_arms)
    assert folder.interrupted_releases() == {}
    assert re.findall(r'<div class="flag">', html[html.index("</h1>"):html.index("<h2")]) == []
    cut = folder.run(two_arms[1].run_id)
    cut.record.unlink()
    write_outputs(folder, make_resolved(two_arms, n_test=120, label_names=("normal", "pneumonia")), two_arms[:1])
    top = folder.report.read_text()
    top = top[top.index("</h1>"):top.index("<h2")]
    flagged = [f for f in re.findall(r'<div class="flag">(.*?)</div>', top) if "was cut short" in f]
    assert len(flagged) == 1 and flagged[0].startswith(f"⚠ The release of {cut.public.name} was cut short: "
                                                       f"{cut.predictions.name} lie"), flagged
    assert two_arms[0].run_id not in flagged[0]


def test_a_figure_the_report_no_longer_draws_is_removed_with_it(tmp_path, records, make_resolved):
    """Before: fairness_sex.png and cam_grid.png of an earlier report (fairness or explanations since turned off)
    stayed beside a report that no longer shows them, figures of runs and settings the study no longer holds."""
    stale = ["fairness_sex.png", "fairness_sex_narrow.png", "cam_grid.png", "cam_grid_narrow.png", "ldp_examples.png"]
    for name in stale:
        (tmp_path / name).write_bytes(b"\x89PNG old")
    (tmp_path / "notes.png").write_bytes(b"a user's own file")
    _write(tmp_path, make_resolved(records), records)
    assert not [name for name in stale if (tmp_path / name).exists()]
    assert (tmp_path / "notes.png").read_bytes() == b"a user's own file"
    assert (tmp_path / "auroc_vs_epsilon.png").stat().st_size > 1000
    assert (tmp_path / "auroc_vs_epsilon_narrow.png").is_file()
