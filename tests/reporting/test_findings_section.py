"""The report's table of each label's test AUROC with its interval: shown for a multilabel study (per finding) and a
multiclass one (per class, one-vs-rest), one row per run and one column per label, and not for a binary task. Before,
those AUROCs went to results.csv only, without intervals, and a multiclass study's stayed there after the multilabel
table came."""

import re

import numpy as np

from dpmed.evaluation.utility import evaluate_utility

N = 120


def _multilabel_run(release, make_record, run_id, arm, mechanism, quality, rng):
    """A run on findings "effusion", "nodule" (no test positive: undefined) and "edema", released as a study releases
    it (`release`)."""
    y = np.c_[rng.random(N) < 0.4, np.zeros(N, bool), rng.random(N) < 0.3].astype(int)
    s = np.clip(quality * y + (1 - quality) * rng.random((N, 3)), 0, 1)
    y_val = np.c_[y[:, 0], np.arange(N) % 2, y[:, 2]]                 # every finding decidable on validation
    metrics = evaluate_utility(kind="multilabel", label_names=["effusion", "nodule", "edema"], val_labels=y_val,
                               val_scores=s, test_labels=y, test_scores=s, n_resamples=200)
    return release(make_record(run_id, arm, mechanism, eps=1.0 if mechanism == "dp_sgd" else None, metrics=metrics),
                   predictions=dict(test_scores=s, test_labels=y, test_patient_ids=np.arange(N).astype(str),
                                    val_scores=s, val_labels=y_val, val_patient_ids=np.arange(N).astype(str)))


def _findings(html: str) -> str:
    start = html.index('id="findings"')
    return html[start:html.index("</table>", start)]


def test_the_findings_table_shows_for_a_multilabel_study_and_not_for_a_binary_one(tmp_path, release, make_record,
                                                                                   report_html, two_arms):
    rng = np.random.default_rng(2)
    records = [_multilabel_run(release, make_record, "np_seed0", "np", "none", 0.3, rng),
               _multilabel_run(release, make_record, "dp_eps1_C1_seed0", "dp", "dp_sgd", 0.15, rng)]
    html = report_html(records, task="multilabel", names=("effusion", "nodule", "edema"))
    assert html.index('id="utility"') < html.index('id="findings"') < html.index('id="privacy"')
    table = _findings(html)
    assert re.findall(r"<th[^>]*>([^<]*)</th>", table) == ["run", "effusion", "nodule", "edema"]
    rows = re.findall(r"<tr><td[^>]*>([^<]*)</td>(.*?)</tr>", table, re.S)
    assert [run_id for run_id, _ in rows] == ["np_seed0", "dp_eps1_C1_seed0"]
    for (_, cells), r in zip(rows, records, strict=True):
        m = r.metrics
        shown = [c.replace("\u00a0", " ") for c in re.findall(r"<td[^>]*>([^<]*)</td>", cells)]
        assert shown == [f"{m['test_auroc[effusion]']:.3f} [{m['test_auroc[effusion]_low']:.3f}, "
                         f"{m['test_auroc[effusion]_high']:.3f}]", "undefined",
                         f"{m['test_auroc[edema]']:.3f} [{m['test_auroc[edema]_low']:.3f}, "
                         f"{m['test_auroc[edema]_high']:.3f}]"]
    columns = (tmp_path / "results.csv").read_text().splitlines()[0].split(",")
    at = columns.index("test_auroc[edema]")
    assert columns[at:at + 3] == ["test_auroc[edema]", "test_auroc[edema]_low", "test_auroc[edema]_high"]

    binary = report_html(two_arms)
    assert 'id="findings"' not in binary and "per finding" not in binary


def test_a_multiclass_study_tables_each_class_one_vs_rest(release, make_record, report_html):
    rng = np.random.default_rng(3)
    names = ["grade 0", "grade 1", "grade 2"]
    y = np.arange(N) % 3
    s = rng.random((N, 3)) + 0.8 * np.eye(3)[y]
    s /= s.sum(1, keepdims=True)
    m = evaluate_utility(kind="multiclass", label_names=names, val_labels=y, val_scores=s, test_labels=y,
                         test_scores=s, n_resamples=200)
    run = release(make_record("np_seed0", "np", "none", metrics=m), predictions=dict(
        test_scores=s, test_labels=y, test_patient_ids=np.arange(N).astype(str), val_scores=s, val_labels=y,
        val_patient_ids=np.arange(N).astype(str)))
    html = report_html([run], task="multiclass", names=names)
    table = _findings(html)
    assert "Test AUROC per class" in table and "one-vs-rest" in table and "per finding" not in table
    assert re.findall(r"<th[^>]*>([^<]*)</th>", table) == ["run", *names]
    shown = [c.replace("\u00a0", " ") for c in re.findall(r"<td[^>]*class=num>([^<]*)</td>", table)]
    assert shown == [f"{m[f'test_auroc[{c}]']:.3f} [{m[f'test_auroc[{c}]_low']:.3f}, {m[f'test_auroc[{c}]_high']:.3f}]"
                     for c in names]


def test_a_run_recorded_without_a_label_s_auroc_reads_as_a_dash_not_as_undefined(make_record):
    """"undefined" says the test set has one class of that label; a run recorded without the label's AUROC (an older
    or other run) says nothing of the test set, and reads "–"."""
    from types import SimpleNamespace

    from dpmed.reporting.findings_section import findings_section

    both = make_record("np_seed0", "np", metrics={"test_auroc[effusion]": 0.8, "test_auroc[effusion]_low": 0.7,
                                                 "test_auroc[effusion]_high": 0.9, "test_auroc[nodule]": float("nan")})
    older = make_record("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0, metrics={"test_auroc[effusion]": 0.75})
    resolved = SimpleNamespace(dataset=SimpleNamespace(task="multilabel"),
                               label_names=lambda records: ["effusion", "nodule"])
    html = findings_section(SimpleNamespace(resolved=resolved, records=[both, older], level="95%",
                                            redrawn="the test images", interval="percentile"))
    cells = [re.findall(r"<td[^>]*class=num>([^<]*)</td>", row) for row in html.split("</tr>")[1:3]]
    assert cells == [["0.800 [0.700,\u00a00.900]", "undefined"], ["0.750", "–"]]


def test_a_multiclass_study_that_names_no_class_anywhere_has_no_empty_per_class_table(release, make_record,
                                                                                       report_html):
    """An older folder: its study.yaml predates the dataset's label names and its runs' records hold no per-class
    AUROC. The report is written with its macro AUROC, and no per-class table of run names without a column."""
    y = np.arange(N) % 3
    s = np.eye(3)[y] * 0.8 + 0.1
    m = evaluate_utility(kind="multiclass", label_names=["a", "b", "c"], val_labels=y, val_scores=s, test_labels=y,
                         test_scores=s, n_resamples=50)
    m = {k: v for k, v in m.items() if not k.startswith("test_auroc[")}
    run = release(make_record("np_seed0", "np", "none", metrics=m),
                  predictions=dict(test_scores=s, test_labels=y, test_patient_ids=np.arange(N).astype(str)))
    html = report_html([run], task="multiclass", names=())
    assert 'id="findings"' not in html and "Test AUROC per class" not in html
    assert 'id="utility"' in html and "1.000" in html[html.index('id="utility"'):]
    summary = html[html.index('id="summary"'):html.index("</table>", html.index('id="summary"'))]
    assert "task multiclass</td>" in summary and "; classes" not in summary      # no list of no names


def test_the_correlation_across_classes_names_them_classes(release, make_record, report_html):
    """A multiclass study's report read "Across labels, Pearson r between each label's AUROC drop ... and its
    positive test count" beside tables that call the same columns classes, one-vs-rest."""
    rng = np.random.default_rng(5)
    names = ["none", "mild", "moderate", "severe"]
    y = np.arange(N) % 4
    records = []
    for run_id, arm, mechanism, quality in (("np_seed0", "np", "none", 0.9), ("dp_eps1_C1_seed0", "dp", "dp_sgd", 0.3)):
        s = rng.random((N, 4)) + quality * np.eye(4)[y] * (1 + np.arange(4))[None, :] / 4
        s /= s.sum(1, keepdims=True)
        m = evaluate_utility(kind="multiclass", label_names=names, val_labels=y, val_scores=s, test_labels=y,
                             test_scores=s, n_resamples=200)
        records.append(release(make_record(run_id, arm, mechanism, eps=1.0 if mechanism == "dp_sgd" else None,
                                           metrics=m),
                               predictions=dict(test_scores=s, test_labels=y, test_patient_ids=np.arange(N).astype(str),
                                                val_scores=s, val_labels=y, val_patient_ids=np.arange(N).astype(str))))
    html = report_html(records, task="multiclass", names=names)
    assert "Across classes, Pearson r between each class's AUROC drop" in html
    assert "Across labels" not in html and "each label's" not in html
