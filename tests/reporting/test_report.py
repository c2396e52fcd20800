"""The report and tables from hand-made run records: no training needed, so every branch is cheap to reach."""

from __future__ import annotations

import pandas as pd
import pytest

from dpmed.reporting import results_frame, summary_text, write_report, write_results_table


def _record(run_id, mechanism, auroc, low, high, card):
    metrics = {"test_auroc": auroc, "test_auroc_low": low, "test_auroc_high": high, "test_accuracy": 0.8,
               "test_accuracy_low": 0.7, "test_accuracy_high": 0.9}
    return {"run_id": run_id, "arm": run_id.split("_")[0], "mechanism": mechanism, "seed": 0, "privacy": card,
            "metrics": metrics, "timing": {"train_seconds": 1.5}, "versions": {"dpmed": "0.0-test"}}


NONE = {"mechanism": "none", "is_dp": False, "epsilon": None, "statement": "no privacy protection (eps = infinity)"}
DPSGD = {"mechanism": "dp_sgd", "is_dp": True, "epsilon": 7.99, "delta": 1e-5, "accountant": "pld",
         "neighbour_relation": "add or remove one training image", "statement": "eps = 7.99 at delta = 1e-05 (PLD)"}
RECORDS = [
    _record("non-private_seed0", "none", 0.90, 0.85, 0.95, NONE),
    _record("dp-sgd_eps8_C1_seed0", "dp_sgd", 0.80, 0.70, 0.84, DPSGD),   # interval entirely below 0.85
    _record("dp-sgd_eps1_C1_seed0", "dp_sgd", None, None, None, {**DPSGD, "epsilon": 0.99}),
]
RESOLVED = {"study": {"name": "t", "model": {"name": "small_cnn"}, "seeds": [0],
                      "arms": [{"name": "non-private", "mechanism": "none"}, {"name": "dp-sgd", "mechanism": "dp_sgd"}],
                      "evaluation": {"bootstrap_resamples": 200, "bootstrap_seed": 0, "confidence": 0.9}},
            "dataset": {"name": "phantom", "task": "binary", "synthetic": True, "n_train": 10, "n_val": 5,
                        "n_test": 5, "image_shape": [1, 8, 8]}}


def test_results_table_has_one_row_per_run_with_privacy_fields(tmp_path):
    write_results_table(RECORDS, tmp_path / "results.csv")
    frame = pd.read_csv(tmp_path / "results.csv")
    assert list(frame["run_id"]) == [r["run_id"] for r in RECORDS]
    assert frame.loc[1, "delta"] == 1e-5 and frame.loc[1, "accountant"] == "pld"
    assert pd.isna(frame.loc[0, "epsilon"]) and frame.loc[0, "is_dp"] == False  # noqa: E712 (numpy bool)
    assert results_frame(RECORDS).shape[0] == 3


def test_summary_names_delta_and_accountant_and_survives_undefined_auroc():
    text = summary_text(RECORDS).splitlines()
    assert "inf (no DP)" in text[1] and "0.900 [0.850, 0.950]" in text[1]
    assert "d=1e-05" in text[2] and "pld" in text[2]
    assert "undefined" in text[3]


def test_report_reads_the_numbers_honestly(tmp_path):
    write_report(RESOLVED, RECORDS, tmp_path / "report.html")
    html = (tmp_path / "report.html").read_text()
    assert "whole interval lies below the non-private one" in html          # 0.84 < 0.85
    assert "test AUROC undefined" in html
    assert "90% percentile intervals" in html and "[90% CI]" in html      # the study's level, not a fixed 95%
    assert "synthetic" in html and (tmp_path / "auroc_vs_epsilon.png").stat().st_size > 1000
    overlap = [_record("non-private_seed0", "none", 0.90, 0.85, 0.95, NONE),
               _record("dp-sgd_eps8_C1_seed0", "dp_sgd", 0.84, 0.78, 0.86, DPSGD)]
    write_report(RESOLVED, overlap, tmp_path / "report.html")
    assert "its interval overlaps the non-private one" in (tmp_path / "report.html").read_text()


def test_the_auroc_axis_shows_a_run_below_chance_and_keeps_its_usual_floor_otherwise():
    from dpmed.reporting.figures import auroc_figure

    assert auroc_figure(RECORDS).axes[0].get_ylim() == (0.4, 1.01)
    below = RECORDS + [_record("dp-sgd_eps1_C1_seed2", "dp_sgd", 0.39, 0.31, 0.48, {**DPSGD, "epsilon": 0.99})]
    bottom, top = auroc_figure(below).axes[0].get_ylim()
    assert bottom == pytest.approx(0.29) and top == 1.01
