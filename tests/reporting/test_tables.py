"""results.csv and the terminal summary from typed records: every value where its column says, a DP-SGD run without
its seconds (private), an audit without its result (private), and the summary's interval level as computed."""

from __future__ import annotations

import csv
import io

import pandas as pd
import pytest

from dpmed.records import AttackRecord, AuditSummary
from dpmed.reporting.tables import results_frame, summary_text, write_results_table


def _dp_record(make_record, make_fairness, make_explanations):
    from dpmed.mechanisms import ReconstructionRecord

    record = make_record("dp_eps8_C1_seed0", "dp", "dp_sgd", eps=8.0, metrics={
        "test_auroc": 0.91, "test_auroc_low": 0.88, "test_auroc_high": 0.94, "test_accuracy": 0.8456,
        "confidence": 0.9},
        fairness=make_fairness("sex", {"female": {"auroc": {"value": 0.9, "low": 0.8, "high": 0.95}}}),
        explanations=make_explanations({"mask_energy": {"value": 0.4, "low": 0.3, "high": 0.5}},
                                       mask_area_share=0.12))
    risk = ReconstructionRecord(noise_multiplier=0.125, sample_rate=0.1, steps=10, kappa=0.001, worst_case=0.7,
                                worst_case_edgeworth=0.69, relaxed=0.2, gdp=0.5, tpr_at_fpr={"0.01": 0.3, "0.1": 0.6},
                                assumptions="", worst_case_via="", worst_case_edgeworth_via="", relaxed_via="",
                                gdp_via="", tpr_at_fpr_via={}, unit="image")
    attack = AttackRecord(structure="imprint", n_bins=8, batch_size=4, n_batches=2, grouped=False, threshold=0.6,
                          threshold_quantile=0.99, n_trials=8, n_success=2, rate=0.25, rate_low=0.03, rate_high=0.65,
                          ci_level=0.95, batch_rate=0.5, chance_rate=0.01, mean_best_ssim=0.4, mean_best_ncc=0.5,
                          attacked="test images")
    audit = AuditSummary(n_canaries=100, kind="mislabelled", result="private/runs/x/audit.json")
    return record.model_copy(update={"reconstruction": risk, "attack": attack, "audit": audit,
                                     "timing": record.timing.shareable(record.plan)})


def test_each_value_lands_in_its_column(make_record, make_fairness, make_explanations):
    dp = _dp_record(make_record, make_fairness, make_explanations)
    plain = make_record("np_seed0", "np", metrics={"test_auroc": 0.95})
    frame = results_frame([plain, dp])
    row = frame.set_index("run_id").loc["dp_eps8_C1_seed0"]
    assert (row.epsilon, row.delta, row.accountant, row.privacy_statement) == (
        pytest.approx(7.92), 1e-5, "pld", dp.privacy.statement)
    assert (row.reconstruction_worst_case, row.reconstruction_relaxed) == (0.7, 0.2)
    assert (row["mia_tpr_at_fpr_0.01"], row["mia_tpr_at_fpr_0.1"]) == (0.3, 0.6)
    assert (row.attack_rate, row.attack_rate_low, row.attack_rate_high, row.attack_chance_rate,
            row.attack_threshold) == (0.25, 0.03, 0.65, 0.01, 0.6)
    assert row.audit_canaries == 100 and not any("audit" in c and c != "audit_canaries" for c in frame.columns)
    assert (row.test_auroc, row.test_auroc_low, row.test_auroc_high) == (0.91, 0.88, 0.94)
    assert [c for c in frame.columns if c.startswith("fairness[sex=female]_auroc")] == [
        "fairness[sex=female]_auroc", "fairness[sex=female]_auroc_low", "fairness[sex=female]_auroc_high"]
    assert row["fairness[sex=female]_auroc_low"] == 0.8
    assert (row.explanations_mask_energy, row.explanations_mask_energy_low, row.explanations_mask_energy_high,
            row.explanations_mask_area_share, row.explanations_method) == (0.4, 0.3, 0.5, 0.12, "gradcam")
    assert row.explanations_target_layer == "features"
    assert pd.isna(row.train_seconds)                                    # a DP-SGD run's seconds are private
    assert frame.set_index("run_id").loc["np_seed0"].train_seconds == 1.0


def test_the_csv_reads_back_as_the_frame(tmp_path, make_record, make_fairness, make_explanations):
    records = [make_record("np_seed0", "np", metrics={"test_auroc": 0.95}),
               _dp_record(make_record, make_fairness, make_explanations)]
    frame = write_results_table(records, tmp_path / "results.csv")
    back = pd.read_csv(io.StringIO((tmp_path / "results.csv").read_text()))
    assert list(back.columns) == list(frame.columns) and back.run_id.tolist() == ["np_seed0", "dp_eps8_C1_seed0"]
    assert back.epsilon.iloc[1] == pytest.approx(7.92) and pd.isna(back.epsilon.iloc[0])


def test_the_summary_shows_eps_with_its_terms_the_interval_at_its_level_and_undefined_values(
        make_record, make_fairness, make_explanations):
    dp = _dp_record(make_record, make_fairness, make_explanations)
    undefined = make_record("np_seed0", "np", metrics={"test_auroc": None, "confidence": 0.9})
    lines = summary_text([undefined, dp]).splitlines()
    assert "test AUROC [90% percentile CI]" in lines[0]
    assert lines[1].split()[0] == "np_seed0" and "undefined" in lines[1]
    assert dp.privacy.in_brief() in lines[2] and "0.910 [0.880, 0.940]" in lines[2] and lines[2].endswith("0.846")
    mixed = make_record("b_seed0", "b", metrics={"test_auroc": 0.8, "confidence": 0.95})
    two_levels = summary_text([dp, mixed]).splitlines()
    assert "test AUROC [percentile CI]" in two_levels[0]   # two levels: none is named, the last line names each
    assert two_levels[-1].startswith("the runs' intervals differ: 90% percentile for dp_eps8_C1_seed0; "
                                     "95% percentile for b_seed0 (")


def test_the_summary_names_the_interval_of_the_runs_as_the_report_does(make_record, make_fairness, make_explanations):
    """The terminal said "[95% CI]" where the report and run.json say whether the intervals are percentile or BCa
    (`evaluation.interval`): a reader who stops at the terminal could not tell which. Runs of both kinds (a folder
    left between two settings) name neither, as two levels name no level."""
    dp = _dp_record(make_record, make_fairness, make_explanations)
    bca = dp.model_copy(update={"metrics": {**dp.metrics, "interval": "bca"}})
    header, *rows = summary_text([bca]).splitlines()
    assert "test AUROC [90% BCa CI]" in header
    assert rows[0].index(" 0.910 [0.880, 0.940]") + 1 == header.index("test AUROC")
    assert len(rows[0]) == len(header)                    # the wider head widens its column, the row with it
    assert "percentile CI]" in summary_text([dp]).splitlines()[0]
    both = summary_text([dp.model_copy(update={"metrics": {**dp.metrics, "confidence": 0.95}}),
                         bca.model_copy(update={"run_id": "dp_eps8_C1_seed1",
                                                "metrics": {**bca.metrics, "confidence": 0.95}})]).splitlines()
    assert "[95% CI]" in both[0]
    # the header names neither kind, so the last line says which run has which, and where to read more
    assert both[-1] == ("the runs' intervals differ: 95% percentile for dp_eps8_C1_seed0; 95% BCa for dp_eps8_C1_seed1 "
                        "(`dpmed status` names the runs the next `dpmed run` evaluates again)")
    assert not any(line.startswith("the runs' intervals differ") for line in summary_text([dp, dp]).splitlines())


# Every privacy field results.csv carries, each with a value no other field has: a column that is dropped, or that
# holds another field's value, shows up as a mismatch with the card.
_CARD_FIELDS = {"epsilon": 3.21, "delta": 2.5e-6, "accountant": "rdp", "unit": "patient", "n_units": 4254,
                "released_units": 4250, "size_epsilon": 0.05, "neighbour_relation": "add or remove one patient",
                "epsilon_pixel": 0.7, "scale_b": 0.11, "noise_multiplier": 1.3, "sample_rate": 0.017, "steps": 300,
                "max_grad_norm": 0.9, "target_epsilon": 3.0, "randomness": "secure", "sampler_delta": 1e-12,
                "sampler_voids": False}


def test_each_privacy_field_of_the_card_lands_in_its_own_column_of_the_csv(tmp_path, make_record):
    from dpmed.records import StartRecord

    dp = make_record("dp_eps3_C1_seed0", "dp", "dp_sgd", eps=3.0)
    start = StartRecord(weights="w.pt", sha256="ab" * 32, trained_on="public chest X-rays", trainable="head",
                        n_trainable=10, n_frozen=90)
    dp = dp.model_copy(update={"privacy": dp.privacy.model_copy(update=_CARD_FIELDS), "start": start})
    plain = make_record("np_seed0", "np")
    write_results_table([plain, dp], tmp_path / "results.csv")
    header, _, row = csv.reader((tmp_path / "results.csv").read_text().splitlines())
    shown = dict(zip(header, row, strict=True))
    for field, value in _CARD_FIELDS.items():
        assert shown[field] == str(value), field          # bools as True/False, counts as integers, floats as they are
    assert (shown["start_trained_on"], shown["start_sha256"], shown["trainable"]) == (
        "public chest X-rays", "ab" * 32, "head")
    assert shown["is_dp"] == "True"
    back = pd.read_csv(tmp_path / "results.csv")
    assert back.trainable.tolist() == ["all", "head"] and pd.isna(back.start_sha256.iloc[0])


def test_a_column_of_integers_and_fractions_stays_fractional(tmp_path, make_record):
    """Only a column whose values are all integers reads as integers: one of 1 and 0.5 keeps its 0.5, not cut to an
    integer nor refused."""
    records = [make_record("a_seed0", "a", metrics={"test_auroc": 1}),
               make_record("b_seed0", "b", metrics={"test_auroc": 0.5})]
    frame = write_results_table(records, tmp_path / "results.csv")
    assert frame.test_auroc.tolist() == [1.0, 0.5]
    assert pd.read_csv(tmp_path / "results.csv").test_auroc.tolist() == [1.0, 0.5]


def test_the_summary_columns_line_up_under_their_headings(make_record, make_fairness, make_explanations):
    """Each run's eps, AUROC and accuracy start (the accuracy: ends) where their headings do, whatever the length of
    the eps text: a column cut to the heading's width, or a row with another width, would shift them."""
    dp = _dp_record(make_record, make_fairness, make_explanations)
    plain = make_record("np_seed0", "np", metrics={"test_auroc": 0.95, "test_accuracy": 0.5})
    header, *rows = summary_text([plain, dp]).splitlines()
    assert len(dp.privacy.in_brief()) > len("eps") and header.startswith("run ")
    for record, row in zip([plain, dp], rows, strict=True):
        assert row.startswith(record.run_id + " ")
        assert row.index(record.privacy.in_brief()) == header.index("eps")
        assert row.index(" " + format(record.metrics["test_auroc"], ".3f")) + 1 == header.index("test AUROC")
        assert len(row) == len(header) and row.endswith(format(record.metrics["test_accuracy"], ".3f"))


def test_the_summary_spells_out_accuracy_and_keeps_its_columns_for_a_long_run_id(make_record):
    """The terminal's header read "acc"; a run id longer than the 28 characters its column had pushed that row's
    eps, AUROC and accuracy right of their headings."""
    long = make_record("dp-sgd-per-patient-capped_eps1_C1_seed0", "x", metrics={"test_auroc": 0.9,
                                                                               "test_accuracy": 0.75})
    short = make_record("np_seed0", "np", metrics={"test_auroc": 0.95, "test_accuracy": 0.5})
    header, *rows = summary_text([short, long]).splitlines()
    assert header.split()[-1] == "accuracy"
    for record, row in zip([short, long], rows):
        assert row.index(record.privacy.in_brief()) == header.index("eps")
        assert len(row) == len(header) and row.endswith(format(record.metrics["test_accuracy"], ".3f"))


def test_the_summary_names_a_run_that_decides_one_class_for_every_test_image(make_record):
    """The terminal is where many users stop reading: a DP arm whose accuracy is only the share of the one class it
    always predicts must not pass there as a modest model (the report's warning is not enough)."""
    collapsed = make_record("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0,
                            metrics={"test_auroc": 0.64, "test_accuracy": 0.36, "test_predicted_classes": 1})
    fine = make_record("np_seed0", "np", metrics={"test_auroc": 0.78, "test_accuracy": 0.52,
                                                  "test_predicted_classes": 2})
    lines = summary_text([fine, collapsed]).splitlines()
    assert len(lines) == 4
    # its scores may still rank the images (AUROC 0.64 two lines above): only its decisions separate nothing
    assert lines[3] == ("dp_eps1_C1_seed0 predicts one class for every test image: its accuracy is that class's "
                        "share, and its decisions separate nothing, whatever its AUROC (report.html says more)")
