"""Study-level comparisons: the paired bootstrap AUROC difference and its p-value, Pearson r, seed summaries, and
which runs form a sweep, each against hand-worked values, scipy, or a plain loop over the same redraws."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import pearsonr
from sklearn.metrics import cohen_kappa_score, roc_auc_score

from dpmed.evaluation.bootstrap import bootstrap_indices, percentile_interval
from dpmed.comparisons import compare_runs
from dpmed.evaluation.predictions import Predictions, SplitPredictions
from dpmed.evaluation.paired import (bootstrap_p_value, p_value_floor, paired_differences,
                                    pearson, SeedSummary, seed_summary)


def test_bootstrap_p_value_by_hand():
    # min(#{d <= 0}, #{d >= 0}) = 1 of R = 4: p = 2 (1 + 1) / 5
    assert bootstrap_p_value(np.array([-1.0, 1.0, 2.0, 3.0])) == pytest.approx(0.8)
    assert bootstrap_p_value(np.array([1.0, 2.0, 3.0, 4.0])) == pytest.approx(2 * 1 / 5)   # never 0
    assert bootstrap_p_value(np.zeros(9)) == 1.0                                           # identical models
    assert bootstrap_p_value(np.array([np.nan, 1.0, 2.0])) == pytest.approx(2 / 3)        # nan redraws left out
    assert bootstrap_p_value(np.array([np.nan])) is None


def test_paired_difference_by_hand_and_against_a_plain_loop():
    y = np.array([0, 0, 1, 1, 0, 1, 0, 1])
    a = np.array([0.1, 0.2, 0.8, 0.9, 0.3, 0.7, 0.4, 0.6])       # AUROC 1
    b = np.array([0.1, 0.9, 0.8, 0.2, 0.3, 0.7, 0.4, 0.6])       # pos {.8,.2,.7,.6} vs neg {.1,.9,.3,.4}: 10/16
    out = paired_differences(kind="binary", labels=y, scores=a, reference_scores=b, n_resamples=300, seed=4)["auroc"]
    assert out.value == pytest.approx(1 - 10 / 16)
    diffs = []
    for idx in bootstrap_indices(len(y), n_resamples=300, seed=4):        # the same redraws, scored one by one
        yy = y[idx]
        diffs.append(roc_auc_score(yy, a[idx]) - roc_auc_score(yy, b[idx]) if 0 < yy.sum() < len(yy) else np.nan)
    diffs = np.array(diffs)
    assert (out.low, out.high) == pytest.approx(percentile_interval(diffs))
    assert out.p_value == pytest.approx(bootstrap_p_value(diffs))
    assert out.defined_redraws == int(np.isfinite(diffs).sum())


def test_a_multiclass_paired_difference_is_that_of_scikit_learn_s_one_vs_rest_macro_aurocs():
    rng = np.random.default_rng(5)
    y = np.tile([0, 1, 2], 20)

    def softmax(strength):
        logits = rng.normal(size=(60, 3)) + strength * np.eye(3)[y]
        return np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)

    a, b = softmax(2.0), softmax(0.5)
    out = paired_differences(kind="multiclass", labels=y, scores=a, reference_scores=b, n_resamples=50,
                             seed=0)["auroc"]
    private, reference = (roc_auc_score(y, s, multi_class="ovr", average="macro") for s in (a, b))
    assert (out.private, out.reference) == pytest.approx((private, reference))
    assert out.value == pytest.approx(private - reference) and private > reference > 0.5


def test_paired_difference_of_a_model_with_itself_is_zero_with_p_one():
    rng = np.random.default_rng(1)
    y, s = rng.integers(0, 2, 50), rng.random(50)
    out = paired_differences(kind="binary", labels=y, scores=s, reference_scores=s, n_resamples=100, seed=0)["auroc"]
    assert (out.value, out.low, out.high, out.p_value) == (0.0, 0.0, 0.0, 1.0)


@pytest.mark.parametrize("kind, scores, reference", [
    ("binary", np.full(4, 0.5), np.full(5, 0.5)),                # the reference scored one image more
    ("multiclass", np.full((4, 3), 1 / 3), np.full((4, 2), 0.5)),  # the reference has a class fewer
])
def test_two_models_scored_on_different_images_or_classes_are_not_compared(kind, scores, reference):
    with pytest.raises(ValueError, match="the two models' scores differ in shape"):
        paired_differences(kind=kind, labels=np.array([0, 1, 0, 1]), scores=scores, reference_scores=reference,
                           n_resamples=10, seed=0)


def test_pearson_by_hand_and_against_scipy():
    # x = 1, 2, 3; y = 1, 2, 4: sum dx dy = 3, sum dx^2 = 2, sum dy^2 = 14/3, r = 3 / sqrt(28/3)
    out = pearson([1, 2, 3], [1, 2, 4])
    assert out.r == pytest.approx(3 / np.sqrt(28 / 3))
    assert out.p_value == pytest.approx(pearsonr([1, 2, 3], [1, 2, 4]).pvalue) and out.n == 3
    rng = np.random.default_rng(2)
    x, y = rng.random(12), rng.random(12)
    ref = pearsonr(x, y)
    assert (pearson(x, y).r, pearson(x, y).p_value) == pytest.approx((ref.statistic, ref.pvalue))
    assert pearson([1, 2, None, 4], [1, 2, 3, None]).reason == "fewer than 3 points"   # missing points dropped
    assert pearson([1, 2, 3], [5, 5, 5]).r is None


def test_seed_summary_by_hand():
    summary = seed_summary([0.1, 0.3, None]).model_dump()
    # t(0.975, 1 df) = 12.706; std / sqrt(2) = 0.1: the interval is 0.2 +- 1.2706
    assert summary == {"mean": pytest.approx(0.2), "std": pytest.approx(np.sqrt(0.02)), "min": 0.1, "max": 0.3,
                       "n_seeds": 2, "low": pytest.approx(0.2 - 1.2706, abs=1e-4),
                       "high": pytest.approx(0.2 + 1.2706, abs=1e-4), "reason": None}
    assert seed_summary([0.5]).std is None


def _saved(labels, patient_ids, scores, *, val=None) -> Predictions:
    """A run's predictions as load_predictions returns them: the test split, and (labels, scores) of validation."""
    return Predictions(test=SplitPredictions(scores=scores, labels=labels, patient_ids=patient_ids),
                       val=None if val is None else SplitPredictions(scores=val[1], labels=val[0],
                                                                      patient_ids=np.arange(len(val[0])).astype(str)))


def _record(make_record, run_id, arm, mechanism, *, eps=None, C=1.0, seed=0, parity=None, energy=None, lr=0.002,
            metrics=None, make_fairness=None, make_explanations=None):
    fairness = None if parity is None else make_fairness("sex", {"female": {"accuracy_parity_difference":
                                                                                {"value": parity}}})
    explanations = None if energy is None else make_explanations({"mask_energy": {"value": energy, "low": 0,
                                                                                  "high": 1}})
    return make_record(run_id, arm, mechanism, eps=eps, C=C, seed=seed, lr=lr, metrics=metrics, fairness=fairness,
                       explanations=explanations)


def test_compare_runs_pairs_each_private_run_with_the_non_private_one_and_finds_the_sweeps(make_record, make_fairness,
                                                                                          make_explanations):
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 40)
    ids = np.array([f"p{i}" for i in range(40)])
    base = np.clip(0.5 * y + 0.5 * rng.random(40), 0, 1)
    rec = lambda *a, **k: _record(make_record, *a, make_fairness=make_fairness,  # noqa: E731
                                  make_explanations=make_explanations, **k)
    records = [rec("np_seed0", "np", "none"),
               *[rec(f"g_eps{e}_C1_seed0", "g", "dp_sgd", eps=e, C=1.0, parity=0.01 * math.log10(0.99 * e),
                     energy=0.1 * e) for e in (1, 5, 1_000_000)],
               *[rec(f"c_eps1_C{c}_seed0", "c", "dp_sgd", eps=1, C=c, energy=0.2 * c) for c in (0.5, 2.0)],
               rec("other_eps1_C1_seed0", "other", "dp_sgd", eps=1, C=1.0, lr=0.1)]   # another lr: own sweep
    predictions = {r.run_id: _saved(y, ids, np.clip(base + 0.1 * i * rng.standard_normal(40), 0, 1))
                   for i, r in enumerate(records)}
    out = compare_runs(records, predictions, kind="binary", label_names=["normal", "opacity"], n_resamples=50)
    rows = {row.run_id: row for row in out.auroc_differences}
    assert set(rows) == {r.run_id for r in records[1:]}
    expected = (roc_auc_score(y, predictions["g_eps5_C1_seed0"].test.scores)
                - roc_auc_score(y, predictions["np_seed0"].test.scores))
    assert rows["g_eps5_C1_seed0"].auroc_difference.value == pytest.approx(expected)
    assert rows["g_eps5_C1_seed0"].reference_run == "np_seed0" and rows["g_eps5_C1_seed0"].label == "g_eps5_C1"
    # comparisons.json never holds a bare eps: each carries its delta, accountant and neighbours
    assert rows["g_eps5_C1_seed0"].epsilon_label == "4.95 (delta 1e-05, PLD, add/remove one image)"
    assert {v.label: v.epsilon_label for v in out.by_value}["g_eps5_C1"] == rows["g_eps5_C1_seed0"].epsilon_label

    parity = out.correlations.epsilon_vs_accuracy_parity
    assert len(parity) == 1 and parity[0].n == 3                       # the eps sweep of arm g only
    # against log10 of the eps as accounted (0.99 eps here): parity is linear in it, so r = 1 (against eps itself,
    # 0.994)
    assert parity[0].x == "log10 eps" and parity[0].r == pytest.approx(1.0)
    energy = out.correlations.epsilon_vs_explanations
    assert len(energy) == 1 and energy[0].x == "log10 eps"
    assert energy[0].r == pytest.approx(pearsonr(np.log10([0.99, 4.95, 0.99e6]), [0.1, 0.5, 1e5]).statistic)
    by_c = out.correlations.max_grad_norm_vs_explanations
    assert len(by_c) == 1 and by_c[0].n == 3 and by_c[0].x == "max_grad_norm"   # arm c's two + arm g's C=1 at eps 1
    assert "c+g" in by_c[0].sweep or "g+c" in by_c[0].sweep
    assert by_c[0].r == pytest.approx(pearsonr([1.0, 0.5, 2.0], [0.1, 0.1, 0.4]).statistic)
    assert out.correlations.auroc_drop_vs_label == [] and out.notes == []   # binary: one AUROC per model


def test_a_sweep_of_two_values_gives_no_r_and_says_why(make_record, make_fairness, make_explanations):
    """Across two swept values r only compares them (one run at each: always +-1, whatever the data), so no r is
    reported for a sweep with fewer than three distinct values, however many seeds add points; three give one."""
    y = np.random.default_rng(0).integers(0, 2, 20)
    ids = np.arange(20).astype(str)
    rec = lambda *a, **k: _record(make_record, *a, make_fairness=make_fairness,  # noqa: E731
                                  make_explanations=make_explanations, **k)
    records = [rec(f"np_seed{k}", "np", "none", seed=k) for k in (0, 1)]
    records += [rec(f"g_eps{e}_C1_seed{k}", "g", "dp_sgd", eps=e, seed=k, parity=0.1 * e + 0.03 * k,
                    energy=0.05 * e - 0.02 * k) for e in (1, 8) for k in (0, 1)]
    records += [rec(f"c_eps1_C{c}_seed{k}", "c", "dp_sgd", eps=1, C=c, seed=k, energy=0.1 * c + 0.01 * k)
                for c in (0.5, 2.0) for k in (0, 1)]
    predictions = {r.run_id: _saved(y, ids, np.random.default_rng(i).random(20)) for i, r in enumerate(records)}
    corr = compare_runs(records, predictions, kind="binary", label_names=["normal", "opacity"],
                        n_resamples=20).correlations
    # pearson itself would give r here: four points, two x values, y not constant
    assert pearson(np.log10([0.99, 0.99, 7.92, 7.92]), [0.1, 0.13, 0.8, 0.83]).r is not None
    rows = corr.epsilon_vs_accuracy_parity + corr.epsilon_vs_explanations
    assert len(corr.epsilon_vs_accuracy_parity) == 1 and len(corr.epsilon_vs_explanations) == 1
    for row in rows:
        assert row.r is None and row.p_value is None and row.n == 4
        assert row.reason == "only 2 distinct values of log10 eps (r needs 3: across two it only compares them)"
    # eps 1 at C 0.5, 1 (arm g) and 2: three clipping norms
    assert [row.n for row in corr.max_grad_norm_vs_explanations] == [6]
    assert corr.max_grad_norm_vs_explanations[0].r is not None
    two_c = [r for r in records if r.run_id.startswith(("np", "c_"))]
    corr = compare_runs(two_c, {k: v for k, v in predictions.items() if k.startswith(("np", "c_"))}, kind="binary",
                        label_names=["normal", "opacity"], n_resamples=20).correlations
    assert [(row.r, row.reason) for row in corr.max_grad_norm_vs_explanations] == [
        (None, "only 2 distinct values of max_grad_norm (r needs 3: across two it only compares them)")]
    assert pearson([1, 1, 2, 2], [0.1, 0.2, 0.3, 0.5], min_x_values=3).r is None
    assert pearson([1, 2, 3], [0.1, 0.2, 0.4], min_x_values=3).r == pytest.approx(
        pearsonr([1, 2, 3], [0.1, 0.2, 0.4]).statistic)


def test_label_correlations_of_003_across_labels_against_scipy(make_record):
    names = ["a", "b", "c", "d"]
    base = {"a": 0.9, "b": 0.8, "c": 0.75, "d": 0.6}
    private = {"a": 0.88, "b": 0.74, "c": 0.70, "d": 0.45}
    y = np.zeros((20, 4), int)
    y[:9, 0], y[:5, 1], y[:7, 2], y[:2, 3] = 1, 1, 1, 1                  # positive counts 9, 5, 7, 2
    records = [_record(make_record, "np_seed0", "np", "none", metrics={f"test_auroc[{k}]": v for k, v in base.items()}),
               _record(make_record, "dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1, C=1.0,
                       metrics={f"test_auroc[{k}]": v for k, v in private.items()})]
    predictions = {r.run_id: _saved(y, np.arange(20).astype(str), np.random.default_rng(i).random((20, 4)))
                   for i, r in enumerate(records)}
    out = compare_runs(records, predictions, kind="multilabel", label_names=names, n_resamples=20)
    row = out.correlations.auroc_drop_vs_label[0]
    drop = [base[k] - private[k] for k in names]
    assert row.drop_vs_positive_count.r == pytest.approx(pearsonr(drop, [9, 5, 7, 2]).statistic)
    assert row.drop_vs_positive_count.p_value == pytest.approx(pearsonr(drop, [9, 5, 7, 2]).pvalue)
    assert row.drop_vs_nonprivate_auroc.r == pytest.approx(pearsonr(drop, list(base.values())).statistic)


# ------------------------------------------------------------------------ sensitivity, specificity, flags, floors


def _rates_by_loop(y, s, t):
    """(accuracy, sensitivity, specificity) of decisions s >= t, one redraw at a time."""
    correct = (s >= t) == (y == 1)
    pos = y == 1
    return (correct.mean(), correct[pos].mean() if pos.any() else np.nan,
            correct[~pos].mean() if (~pos).any() else np.nan)


def test_paired_sensitivity_and_specificity_at_each_models_own_threshold_against_a_plain_loop():
    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, 40)
    a, b = np.clip(0.4 * y + 0.6 * rng.random(40), 0, 1), np.clip(0.2 * y + 0.8 * rng.random(40), 0, 1)
    ta, tb = 0.45, 0.55                                       # each model's own (validation-chosen) threshold
    out = paired_differences(kind="binary", labels=y, scores=a, reference_scores=b, thresholds=[ta],
                             reference_thresholds=[tb], n_resamples=200, seed=7)
    mine, theirs = _rates_by_loop(y, a, ta), _rates_by_loop(y, b, tb)
    for k, name in enumerate(("accuracy", "sensitivity", "specificity")):
        assert out[name].value == pytest.approx(mine[k] - theirs[k])
        assert (out[name].private, out[name].reference) == pytest.approx((mine[k], theirs[k]))
        diffs = np.array([_rates_by_loop(y[i], a[i], ta)[k] - _rates_by_loop(y[i], b[i], tb)[k]
                          for i in bootstrap_indices(40, n_resamples=200, seed=7)])          # the same redraws
        assert (out[name].low, out[name].high) == pytest.approx(percentile_interval(diffs))
        assert out[name].p_value == pytest.approx(bootstrap_p_value(diffs))
    assert out["auroc"].value == pytest.approx(roc_auc_score(y, a) - roc_auc_score(y, b))


def test_p_value_floor_is_two_over_r_plus_one_and_a_one_sided_difference_sits_on_it():
    assert p_value_floor(1000) == pytest.approx(2 / 1001) and p_value_floor(0) is None
    d = np.linspace(0.01, 0.2, 999)                          # every redraw on one side of zero
    assert bootstrap_p_value(d) == pytest.approx(p_value_floor(999))


def test_compare_runs_pairs_sensitivity_with_the_runs_recorded_metrics(make_record):
    from dpmed.evaluation.utility import evaluate_utility

    rng = np.random.default_rng(5)
    y_val, y = rng.integers(0, 2, 60), rng.integers(0, 2, 80)
    scores = {"np_seed0": (np.clip(0.5 * y_val + 0.5 * rng.random(60), 0, 1),
                           np.clip(0.5 * y + 0.5 * rng.random(80), 0, 1)),
              "dp_eps1_C1_seed0": (np.clip(0.2 * y_val + 0.8 * rng.random(60), 0, 1),
                                   np.clip(0.2 * y + 0.8 * rng.random(80), 0, 1))}
    metrics = {k: evaluate_utility(kind="binary", label_names=["normal", "pneumonia"], val_labels=y_val,
                                   val_scores=v, test_labels=y, test_scores=t, n_resamples=100, seed=0)
               for k, (v, t) in scores.items()}
    records = [make_record("np_seed0", "np", metrics=metrics["np_seed0"]),
               make_record("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0, metrics=metrics["dp_eps1_C1_seed0"])]
    predictions = {k: _saved(y, np.arange(80).astype(str), t, val=(y_val, v)) for k, (v, t) in scores.items()}
    out = compare_runs(records, predictions, kind="binary", label_names=["normal", "pneumonia"], n_resamples=100)
    row = out.auroc_differences[0]
    for name in ("sensitivity", "specificity", "accuracy"):
        d = getattr(row, f"{name}_difference")
        assert d.private == pytest.approx(metrics["dp_eps1_C1_seed0"][f"test_{name}"])     # the run's own numbers
        assert d.reference == pytest.approx(metrics["np_seed0"][f"test_{name}"])
        assert d.value == pytest.approx(d.private - d.reference)
    assert out.by_value[0].sensitivity_difference.mean == pytest.approx(row.sensitivity_difference.value)


def _two_seeds(make_record, y, ids, good, poor):
    """(records, saved predictions) of a non-private and a DP arm at seeds 0 and 1: the non-private run of seed 0
    scores ``good``, every other run ``poor``."""
    scores = {"np_seed0": good, "np_seed1": poor, "dp_eps1_C1_seed0": poor, "dp_eps1_C1_seed1": poor}
    records = [make_record("np_seed0", "np", seed=0), make_record("np_seed1", "np", seed=1),
               make_record("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0, seed=0),
               make_record("dp_eps1_C1_seed1", "dp", "dp_sgd", eps=1.0, seed=1)]
    return records, {k: _saved(y, ids, v) for k, v in scores.items()}


def test_several_seeds_pair_each_run_with_its_own_seed(make_record):
    rng = np.random.default_rng(6)
    y = rng.integers(0, 2, 50)
    ids = np.arange(50).astype(str)
    good, poor = np.clip(0.6 * y + 0.4 * rng.random(50), 0, 1), np.clip(0.2 * y + 0.8 * rng.random(50), 0, 1)
    records, predictions = _two_seeds(make_record, y, ids, good, poor)
    out = compare_runs(records, predictions, kind="binary", label_names=["normal", "pneumonia"], n_resamples=50)
    rows = {r.run_id: r for r in out.auroc_differences}
    assert rows["dp_eps1_C1_seed0"].reference_run == "np_seed0"
    assert rows["dp_eps1_C1_seed1"].reference_run == "np_seed1"
    assert rows["dp_eps1_C1_seed1"].auroc_difference.value == 0.0                          # same scores as its seed
    summary = out.by_value[0].auroc_difference
    assert summary.n_seeds == 2 and summary.max == 0.0 and summary.min < 0
    # the t interval over the two paired differences (1 df), at the study's confidence: t(0.95, 1) = 6.313752 at 90 %
    d = summary.min
    half = 12.706205 * abs(d) / 2                                   # t(0.975, 1) std / sqrt(2), std = |d| / sqrt(2)
    # cut to what a difference of two AUROCs can be, [-1, 1]
    assert (summary.low, summary.high) == pytest.approx((max(-1, d / 2 - half), min(1, d / 2 + half)), abs=1e-6)
    narrower = compare_runs(records, predictions, kind="binary", label_names=["normal", "pneumonia"], n_resamples=50,
                            confidence=0.9).by_value[0].auroc_difference
    assert narrower.high - narrower.mean == pytest.approx(6.313752 * abs(d) / 2, abs=1e-6)


def test_a_seed_with_two_non_private_runs_pairs_with_the_first_listed(make_record):
    rng = np.random.default_rng(6)
    y = rng.integers(0, 2, 50)
    ids = np.arange(50).astype(str)
    good, poor = np.clip(0.6 * y + 0.4 * rng.random(50), 0, 1), np.clip(0.2 * y + 0.8 * rng.random(50), 0, 1)
    records = [make_record("np_a_seed0", "np_a"), make_record("np_b_seed0", "np_b"),
               make_record("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0)]
    predictions = {"np_a_seed0": _saved(y, ids, good), "np_b_seed0": _saved(y, ids, poor),
                   "dp_eps1_C1_seed0": _saved(y, ids, poor)}
    (row,) = compare_runs(records, predictions, kind="binary", label_names=["normal", "pneumonia"],
                          n_resamples=20).auroc_differences
    assert row.reference_run == "np_a_seed0" and row.auroc_difference.value < 0


def test_runs_whose_test_patients_differ_are_not_paired(make_record):
    """The same labels and scores of other patients are another test set: a paired difference needs the same
    images, and the patient bootstrap would redraw different people."""
    y = np.random.default_rng(1).integers(0, 2, 50)
    s = np.linspace(0, 1, 50)
    records = [make_record("np_seed0", "np"), make_record("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0)]
    predictions = {"np_seed0": _saved(y, np.arange(50).astype(str), s),
                   "dp_eps1_C1_seed0": _saved(y, np.arange(100, 150).astype(str), s)}
    out = compare_runs(records, predictions, kind="binary", label_names=["normal", "pneumonia"], n_resamples=20)
    assert out.auroc_differences == []
    assert any("its test set differs from np_seed0's" in note for note in out.notes)


def test_runs_that_decide_one_class_for_every_image_are_flagged(make_record):
    records = [make_record("np_seed0", "np", metrics={"test_sensitivity": 0.8, "test_specificity": 0.9,
                                                      "test_predicted_classes": 2}),
               make_record("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0,
                           metrics={"test_sensitivity": 0.0, "test_specificity": 1.0, "test_predicted_classes": 1}),
               make_record("dp_eps8_C1_seed0", "dp", "dp_sgd", eps=8.0,            # a record without the count
                           metrics={"test_sensitivity": 1.0, "test_specificity": 0.0})]
    flags = compare_runs(records, {}, kind="binary", label_names=["malignant", "normal, benign"]).run_flags
    assert [(f.run_id, f.kind, f.predicted) for f in flags] == [("dp_eps1_C1_seed0", "one_class", "malignant"),
                                                                ("dp_eps8_C1_seed0", "one_class", "normal, benign")]
    assert "for every test image" in flags[0].message
    assert "at its threshold" in flags[0].message and "sensitivity or specificity is 0" in flags[0].message


def test_a_run_whose_whole_auroc_interval_lies_below_chance_is_flagged(make_record):
    # A model that ranks the classes the wrong way round (AUROC 0.33 [0.21, 0.45]) is worse than a coin: as the
    # reference of its seed, it makes any private run look like a gain. An interval that reaches 0.5 is no flag.
    records = [make_record("np_seed0", "np", metrics={"test_auroc": 0.33, "test_auroc_low": 0.21,
                                                      "test_auroc_high": 0.45}),
               make_record("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0,
                           metrics={"test_auroc": 0.45, "test_auroc_low": 0.30, "test_auroc_high": 0.5}),
               make_record("dp_eps8_C1_seed0", "dp", "dp_sgd", eps=8.0,
                           metrics={"test_auroc": 0.9, "test_auroc_low": 0.8, "test_auroc_high": 0.95})]
    flags = compare_runs(records, {}, kind="binary", label_names=["normal", "pneumonia"]).run_flags
    assert [(f.run_id, f.kind) for f in flags] == [("np_seed0", "below_chance")]
    assert "below chance" in flags[0].message and "0.5" in flags[0].message


def test_a_multiclass_run_below_chance_is_not_said_to_rank_the_classes_the_wrong_way_round(make_record):
    # Only a binary model below 0.5 ranks backwards (flipping its scores would fix it); a macro one-vs-rest AUROC
    # below 0.5 over three classes means each class's score tends to rank that class's images below the others.
    metrics = {"test_auroc": 0.40, "test_auroc_low": 0.35, "test_auroc_high": 0.45}
    binary = compare_runs([make_record("np_seed0", "np", metrics=metrics)], {}, kind="binary",
                          label_names=["normal", "pneumonia"]).run_flags[0].message
    multiclass = compare_runs([make_record("np_seed0", "np", metrics=metrics)], {}, kind="multiclass",
                              label_names=["normal", "bacterial", "viral"]).run_flags[0].message
    assert "the wrong way round" in binary
    assert "wrong way round" not in multiclass
    assert "macro one-vs-rest test AUROC 0.400 [0.350, 0.450]" in multiclass
    assert "ranks that class's images below the other images more often than above" in multiclass


def test_a_multilabel_run_below_chance_is_said_to_rank_its_findings_not_classes(make_record):
    # A multilabel model scores findings, each present or absent in an image: it has no classes to rank.
    metrics = {"test_auroc": 0.40, "test_auroc_low": 0.35, "test_auroc_high": 0.45}
    message = compare_runs([make_record("np_seed0", "np", metrics=metrics)], {}, kind="multilabel",
                           label_names=["opacity", "effusion"]).run_flags[0].message
    assert message.startswith("ranks the findings below chance: its macro test AUROC 0.400 [0.350, 0.450] lies ")
    assert "class" not in message


def test_a_multiclass_run_that_predicts_one_class_is_flagged_without_binary_words(make_record):
    # A multiclass model decides by argmax: the flag must not speak of a threshold, sensitivity or specificity.
    records = [make_record("np_seed0", "np", metrics={"test_predicted_classes": 3}),
               make_record("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0, metrics={"test_predicted_classes": 1})]
    flags = compare_runs(records, {}, kind="multiclass", label_names=["normal", "bacterial", "viral"]).run_flags
    assert [(f.run_id, f.kind, f.predicted) for f in flags] == [("dp_eps1_C1_seed0", "one_class", None)]
    assert "argmax" in flags[0].message and "recall is 0" in flags[0].message
    assert "threshold" not in flags[0].message and "specificity" not in flags[0].message


def test_a_multiclass_run_that_never_chooses_some_class_is_flagged(make_record):
    # Partial collapse under heavy noise: the argmax picks two of three classes, so the third's recall is 0.
    records = [make_record("np_seed0", "np", metrics={"test_predicted_classes": 3}),
               make_record("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0, metrics={"test_predicted_classes": 2})]
    names = ["normal", "bacterial", "viral"]
    flags = compare_runs(records, {}, kind="multiclass", label_names=names).run_flags
    assert [(f.run_id, f.kind, f.count) for f in flags] == [("dp_eps1_C1_seed0", "unused_classes", 2)]
    assert "only 2 of the 3 classes" in flags[0].message and "1 class is never predicted, so its recall is 0" in (
        flags[0].message)
    binary = compare_runs([make_record("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0,
                                       metrics={"test_predicted_classes": 2})], {}, kind="binary",
                          label_names=["a", "b"]).run_flags
    assert binary == []                                                   # both classes chosen: nothing to say


def test_small_groups_and_intervals_of_zero_width_are_flagged(make_record, make_fairness):
    fairness = make_fairness("age", {
        "[0,30)": {"n": 8, "n_positive": 1, "auroc": {"value": 1.0, "low": 1.0, "high": 1.0},
                   "accuracy": {"value": 0.875, "low": 0.6, "high": 1.0}},
        "[30,60)": {"n": 75, "n_positive": 40, "auroc": {"value": 0.97, "low": 0.94, "high": 0.99}},
        "[60,70)": {"n": 31, "n_positive": 17, "auroc": {"value": 1.0, "low": 1.0, "high": 1.0}}})
    records = [make_record("np_seed0", "np", fairness=fairness)]
    flags = {f.group: f for f in compare_runs(records, {}, kind="binary", label_names=["a", "b"]).group_flags}
    assert set(flags) == {"[0,30)", "[60,70)"}
    assert flags["[0,30)"].reasons[:2] == ["only 1 positive", "only 7 negatives"]
    assert any("zero width" in reason for reason in flags["[0,30)"].reasons)
    assert flags["[60,70)"].reasons == ["AUROC interval of zero width (1.000 in every redraw)"]


def test_a_multilabel_group_is_flagged_for_the_findings_with_few_positives_or_negatives(make_record, make_fairness):
    """Before, positives were summed over findings: 11 images with 5 and 6 positives counted as 11 positives and 11
    negatives, no warning, though each finding's AUROC in the group rests on 5 or 6 of either."""
    est = {"value": 0.8, "low": 0.6, "high": 0.95}
    fairness = make_fairness("age", {
        "[70,80)": {"n": 11, "n_positive": 11, "n_positive_by_label": [5, 6], "auroc": est},
        "[30,60)": {"n": 40, "n_positive": 45, "n_positive_by_label": [20, 25], "auroc": est},
        "older": {"n": 30, "n_positive": 12, "auroc": est},      # a record from before the per-finding counts
        "older, few": {"n": 8, "n_positive": 12, "auroc": est},  # 2 findings x 8 images: 4 negatives, not -4
        "at the bound": {"n": 30, "n_positive": 19, "n_positive_by_label": [10, 9], "auroc": est}})
    records = [make_record("np_seed0", "np", fairness=fairness)]
    flags = {f.group: f for f in compare_runs(records, {}, kind="multilabel",
                                              label_names=["opacity, left", "effusion"]).group_flags}
    assert set(flags) == {"[70,80)", "older, few", "at the bound"}
    assert flags["[70,80)"].reasons == ["only 5 positives of opacity, left", "only 6 negatives of opacity, left",
                                        "only 6 positives of effusion", "only 5 negatives of effusion"]
    assert (flags["[70,80)"].n_positive, flags["[70,80)"].n_negative) == (5, 5)
    assert flags["older, few"].reasons[:1] == ["only 4 negatives"]
    assert flags["at the bound"].reasons == ["only 9 positives of effusion"]     # 10, the minimum, is enough
    unnamed = {f.group: f for f in compare_runs(records, {}, kind="multilabel", label_names=[]).group_flags}
    assert unnamed["[70,80)"].reasons[0] == "only 5 positives of finding 1"     # names that do not match: numbered


def test_compare_runs_redraws_the_patients_the_runs_intervals_redrew(make_record):
    """Runs whose own intervals redrew test patients (their bootstrap_unit) are compared on the same patient redraws,
    read from predictions.npz's test_patient_ids; runs recorded before dpmed redrew patients, on image redraws."""
    rng = np.random.default_rng(8)
    patient = rng.integers(0, 25, 90)                                     # 25 patients, several images each
    y = (patient % 2).astype(np.int64)
    ids = np.array([f"p{p}" for p in patient])
    look = rng.normal(size=25)[patient]
    scores = {"np_seed0": np.clip(0.5 + 0.3 * (y - 0.5) + 0.2 * look, 0, 1),
              "dp_eps1_C1_seed0": np.clip(0.5 + 0.1 * (y - 0.5) + 0.2 * look + 0.1 * rng.normal(size=90), 0, 1)}
    predictions = {k: _saved(y, ids, v) for k, v in scores.items()}
    expected = {unit: paired_differences(kind="binary", labels=y, scores=scores["dp_eps1_C1_seed0"],
                                         reference_scores=scores["np_seed0"], n_resamples=200, seed=3,
                                         patient_ids=ids if unit == "patient" else None)["auroc"]
                for unit in ("patient", "image")}
    assert (expected["patient"].low, expected["patient"].high) != (expected["image"].low, expected["image"].high)

    def compared(units):
        records = [make_record(run_id, arm, mechanism, eps=eps, metrics={} if unit is None else
                               {"bootstrap_unit": unit})
                   for (run_id, arm, mechanism, eps), unit in zip((("np_seed0", "np", "none", None),
                                                                   ("dp_eps1_C1_seed0", "dp", "dp_sgd", 1.0)), units,
                                                                  strict=True)]
        return compare_runs(records, predictions, kind="binary", label_names=["a", "b"], n_resamples=200, seed=3)

    for units, unit in ((("patient", "patient"), "patient"), (("image", "image"), "image"), ((None, None), "image"),
                        (("patient", None), "image")):
        out = compared(units)
        got = out.auroc_differences[0].auroc_difference
        assert out.bootstrap_unit == unit
        assert (got.low, got.high, got.p_value) == (expected[unit].low, expected[unit].high,
                                                    expected[unit].p_value)
        assert any("redrew different units" in note for note in out.notes) == (units == ("patient", None))


def test_a_sweep_holds_runs_an_older_dpmed_finished_beside_runs_planned_now(make_record):
    """A run planned now from a count below the batch carries released_units; one an older dpmed finished does not,
    and still resumes. Before, the two fell into different sweeps and the correlation lost a point."""
    from dpmed.comparisons.correlations import _sweeps

    runs = [make_record(f"g_eps{e}_seed0", "g", "dp_sgd", eps=float(e)) for e in (1, 5, 10)]
    newer = runs[2].plan.model_copy(update={"privacy": runs[2].plan.privacy.model_copy(update={"released_units": 35})})
    runs[2] = runs[2].model_copy(update={"plan": newer})
    sweeps = _sweeps(runs, "epsilon")
    assert [sorted(r.run_id for r in group) for group in sweeps.values()] == [
        ["g_eps10_seed0", "g_eps1_seed0", "g_eps5_seed0"]]


# ------------------------------------------------------------------ pairing, thresholds, seeds and sweeps by hand


def test_runs_whose_test_labels_differ_are_not_paired(make_record):
    """The same patients with other labels (another labelling of the test set) are not the same test set either."""
    y = np.random.default_rng(2).integers(0, 2, 50)
    ids, s = np.arange(50).astype(str), np.linspace(0, 1, 50)
    records = [make_record("np_seed0", "np"), make_record("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0)]
    predictions = {"np_seed0": _saved(y, ids, s), "dp_eps1_C1_seed0": _saved(1 - y, ids, s)}
    out = compare_runs(records, predictions, kind="binary", label_names=["normal", "pneumonia"], n_resamples=20)
    assert out.auroc_differences == []
    assert any("its test set differs from np_seed0's" in note for note in out.notes)


@pytest.mark.parametrize("kind", ["binary", "multilabel"])
def test_a_record_without_its_thresholds_decides_at_youden_s_on_its_saved_validation_predictions(make_record, kind):
    """A record that lacks its threshold(s) (or one of a multilabel record's) is compared at the thresholds Youden's
    J chooses again on its saved validation predictions: the rates it was recorded with, not those at 0.5."""
    from dpmed.evaluation.utility import evaluate_utility

    rng = np.random.default_rng(9)
    shape = (80,) if kind == "binary" else (80, 2)
    names = ["normal", "pneumonia"] if kind == "binary" else ["effusion", "edema"]
    y_val, y = rng.integers(0, 2, shape), rng.integers(0, 2, shape)
    # scores far from 0.5 at both classes' sides: the Youden threshold lies well below 0.5
    scores = {run_id: (0.1 + q * y_val + 0.2 * rng.random(shape), 0.1 + q * y + 0.2 * rng.random(shape))
              for run_id, q in (("np_seed0", 0.25), ("dp_eps1_C1_seed0", 0.15))}
    metrics = {run_id: evaluate_utility(kind=kind, label_names=names, val_labels=y_val, val_scores=v, test_labels=y,
                                        test_scores=t, n_resamples=20)
               for run_id, (v, t) in scores.items()}
    kept = {"np_seed0": {}, "dp_eps1_C1_seed0": {}}                     # no threshold at all, or (multilabel) one
    if kind == "multilabel":
        kept["dp_eps1_C1_seed0"] = {"threshold[effusion]": metrics["dp_eps1_C1_seed0"]["threshold[effusion]"]}
    records = [make_record("np_seed0", "np", metrics=kept["np_seed0"]),
               make_record("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0, metrics=kept["dp_eps1_C1_seed0"])]
    predictions = {k: _saved(y, np.arange(80).astype(str), t, val=(y_val, v)) for k, (v, t) in scores.items()}
    (row,) = compare_runs(records, predictions, kind=kind, label_names=names, n_resamples=20).auroc_differences
    d = row.accuracy_difference
    assert d.private == pytest.approx(metrics["dp_eps1_C1_seed0"]["test_accuracy"])
    assert d.reference == pytest.approx(metrics["np_seed0"]["test_accuracy"])
    at_half = [((t >= 0.5) == (y == 1)).mean() for _, t in scores.values()]
    assert at_half != pytest.approx([d.reference, d.private])          # the setup tells the two apart
    if kind == "binary":
        assert row.sensitivity_difference.private == pytest.approx(metrics["dp_eps1_C1_seed0"]["test_sensitivity"])


def test_seeds_with_p_below_the_level_are_counted_and_a_p_of_exactly_the_level_is_not(make_record):
    """A seed counts among "seeds with p < 0.05" only where its p is below 0.05: with 39 redraws all on one side, p
    is its floor 2 / 40 = 0.05, which says p <= 0.05; a seed identical to its reference has p = 1."""
    rng = np.random.default_rng(6)
    y = np.tile([0, 1], 25)
    ids = np.arange(50).astype(str)
    good, poor = np.clip(0.6 * y + 0.4 * rng.random(50), 0, 1), np.clip(0.1 * y + 0.9 * rng.random(50), 0, 1)
    records, predictions = _two_seeds(make_record, y, ids, good, poor)

    def compared(n_resamples):
        return compare_runs(records, predictions, kind="binary", label_names=["normal", "pneumonia"],
                            n_resamples=n_resamples)

    out = compared(39)
    p = {r.run_id: r.auroc_difference.p_value for r in out.auroc_differences}
    assert p == {"dp_eps1_C1_seed0": 0.05, "dp_eps1_C1_seed1": 1.0}
    assert out.by_value[0].significant_seeds == 0
    out = compared(200)
    assert [r.auroc_difference.p_value for r in out.auroc_differences] == [pytest.approx(2 / 201), 1.0]
    assert out.by_value[0].significant_seeds == 1


def test_an_arm_value_s_epsilon_is_the_mean_of_its_seeds_accounted_epsilons(make_record):
    y = np.tile([0, 1], 10)
    ids, s = np.arange(20).astype(str), np.linspace(0, 1, 20)
    records = [make_record(f"np_seed{k}", "np", seed=k) for k in (0, 1)]
    for k, eps in ((0, 1.0), (1, 3.0)):
        dp = make_record(f"dp_eps1_C1_seed{k}", "dp", "dp_sgd", eps=1.0, seed=k)
        records.append(dp.model_copy(update={"privacy": dp.privacy.model_copy(update={"epsilon": eps})}))
    out = compare_runs(records, {r.run_id: _saved(y, ids, s) for r in records}, kind="binary",
                       label_names=["a", "b"], n_resamples=20)
    assert [(v.label, v.seeds, v.epsilon) for v in out.by_value] == [("dp_eps1_C1", [0, 1], 2.0)]


def test_only_an_interval_of_zero_width_is_flagged_and_a_group_of_unknown_classes_by_its_size(make_record,
                                                                                              make_fairness):
    fairness = make_fairness("age", {
        "[30,60)": {"n": 80, "n_positive": 40, "auroc": {"value": 0.9, "low": 0.9, "high": 0.95}},   # low = value
        "[60,70)": {"n": 80, "n_positive": 40, "accuracy": {"value": 0.8, "low": 0.7, "high": 0.8}},  # high = value
        "unknown, 19": {"n": 19, "n_positive": None},
        "unknown, 20": {"n": 20, "n_positive": None}})
    flags = compare_runs([make_record("np_seed0", "np", fairness=fairness)], {}, kind="binary",
                         label_names=["a", "b"]).group_flags
    assert [(f.group, f.reasons) for f in flags] == [("unknown, 19", ["only 19 images"])]


def test_a_multilabel_task_of_two_findings_says_why_it_has_no_correlation_across_labels(make_record):
    names = ["effusion", "edema"]
    y = np.tile([[0, 1], [1, 0], [1, 1], [0, 0]], (5, 1))
    metrics = {f"test_auroc[{k}]": 0.8 for k in names}
    records = [make_record("np_seed0", "np", metrics=metrics),
               make_record("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0, metrics=metrics)]
    predictions = {r.run_id: _saved(y, np.arange(20).astype(str), np.random.default_rng(i).random((20, 2)))
                   for i, r in enumerate(records)}
    out = compare_runs(records, predictions, kind="multilabel", label_names=names, n_resamples=20)
    assert out.correlations.auroc_drop_vs_label == []
    assert any("the task has 2 label(s)" in note and "needs at least 3" in note for note in out.notes)


def test_a_run_without_the_group_is_left_out_of_the_parity_correlation_not_read_as_zero(make_record, make_fairness):
    rec = lambda run_id, eps, parity: make_record(  # noqa: E731
        run_id, "g", "dp_sgd", eps=eps, fairness=make_fairness("sex", parity))
    runs = [rec(f"g_eps{e}_C1_seed0", e, {"female": {"accuracy_parity_difference": {"value": v}}})
            for e, v in ((1, 0.30), (10, 0.20), (100, 0.10))]
    runs.append(rec("g_eps1000_C1_seed0", 1000, {"male": {"accuracy_parity_difference": {"value": 0.05}}}))
    parity = {row.group: row for row in compare_runs(runs, {}, kind="binary",
                                                     label_names=["a", "b"]).correlations.epsilon_vs_accuracy_parity}
    assert parity["female"].n == 3 and parity["female"].r == pytest.approx(-1.0)
    assert (parity["male"].n, parity["male"].reason) == (1, "fewer than 3 points")


def test_a_sweep_holds_only_dp_sgd_runs_that_agree_on_their_training(make_record):
    """Runs at another learning rate are another sweep, and a local-DP arm with an eps is no DP-SGD sweep."""
    from dpmed.comparisons.correlations import _sweeps

    runs = [make_record(f"{arm}_eps{e}_seed0", arm, "dp_sgd", eps=float(e), lr=lr)
            for arm, lr in (("g", 0.002), ("h", 0.1)) for e in (1, 5, 10)]
    assert sorted(sorted(r.run_id for r in group) for group in _sweeps(runs, "epsilon").values()) == [
        ["g_eps10_seed0", "g_eps1_seed0", "g_eps5_seed0"], ["h_eps10_seed0", "h_eps1_seed0", "h_eps5_seed0"]]
    local = [r.model_copy(update={"mechanism": "pixel_gaussian"}) for r in runs[:3]]
    assert _sweeps(local, "epsilon") == {}


def test_a_multiclass_run_s_drop_is_set_against_each_class_s_test_count_even_without_its_saved_predictions(
        make_record):
    """Per class: its AUROC drop against its count among the test images, read from the non-private run's saved
    labels (the same test set); the private run's own metrics suffice, its predictions need not be loaded."""
    names = ["a", "b", "c", "d"]
    y = np.repeat([0, 1, 2, 3], [3, 8, 5, 4])                           # counts 3, 8, 5, 4
    base = {"a": 0.9, "b": 0.85, "c": 0.8, "d": 0.7}
    private = {"a": 0.7, "b": 0.84, "c": 0.75, "d": 0.6}
    records = [make_record("np_seed0", "np", metrics={f"test_auroc[{k}]": v for k, v in base.items()}),
               make_record("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0,
                           metrics={f"test_auroc[{k}]": v for k, v in private.items()})]
    predictions = {"np_seed0": _saved(y, np.arange(20).astype(str), np.full((20, 4), 0.25))}
    out = compare_runs(records, predictions, kind="multiclass", label_names=names, n_resamples=20)
    (row,) = out.correlations.auroc_drop_vs_label
    drop = [base[k] - private[k] for k in names]
    assert row.run_id == "dp_eps1_C1_seed0" and row.drop_vs_positive_count.n == 4
    assert row.drop_vs_positive_count.r == pytest.approx(pearsonr(drop, [3, 8, 5, 4]).statistic)


def test_a_multiclass_paired_accuracy_is_that_of_the_argmax_against_a_plain_loop():
    rng = np.random.default_rng(11)
    y = np.tile([0, 1, 2], 15)
    a = rng.random((45, 3)) + 0.6 * np.eye(3)[y]
    b = rng.random((45, 3)) + 0.2 * np.eye(3)[y]
    out = paired_differences(kind="multiclass", labels=y, scores=a, reference_scores=b, n_resamples=100,
                             seed=2)["accuracy"]
    right = lambda s, i: (s[i].argmax(axis=1) == y[i]).mean()  # noqa: E731
    everyone = np.arange(45)
    assert (out.private, out.reference) == pytest.approx((right(a, everyone), right(b, everyone)))
    diffs = np.array([right(a, i) - right(b, i) for i in bootstrap_indices(45, n_resamples=100, seed=2)])
    assert (out.low, out.high) == pytest.approx(percentile_interval(diffs))
    assert out.p_value == pytest.approx(bootstrap_p_value(diffs))


def test_the_p_value_floor_counts_only_the_redraws_in_which_the_difference_is_defined():
    """With 2 positives in 12 images some redraws hold no positive and no AUROC: p's floor is 2 / (R + 1) over the
    others, as the p-value itself counts them."""
    y = np.array([1, 1] + [0] * 10)
    a, b = np.linspace(1, 0, 12), np.linspace(0, 1, 12)
    out = paired_differences(kind="binary", labels=y, scores=a, reference_scores=b, n_resamples=200, seed=0)["auroc"]
    defined = sum(1 for i in bootstrap_indices(12, n_resamples=200, seed=0) if 0 < y[i].sum() < 12)
    assert out.defined_redraws == defined < 200
    assert out.p_floor == pytest.approx(2 / (defined + 1)) and out.p_value == pytest.approx(out.p_floor)


def test_a_seed_summary_of_no_value_is_empty():
    assert seed_summary([None, None]) == SeedSummary(mean=None, std=None, min=None, max=None, n_seeds=0,
                                                     reason="no seed has this value")


def test_no_finding_decided_one_way_is_no_flag_and_a_study_without_a_non_private_arm_says_so(make_record):
    records = [make_record("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0, metrics={"test_constant_labels": 0}),
               make_record("dp_eps8_C1_seed0", "dp", "dp_sgd", eps=8.0, metrics={"test_constant_labels": 2})]
    out = compare_runs(records, {}, kind="multilabel", label_names=["a", "b", "c"])
    assert [(f.run_id, f.kind, f.count) for f in out.run_flags] == [("dp_eps8_C1_seed0", "constant_labels", 2)]
    assert out.run_flags[0].message == "decides 2 of its 3 findings the same way for every test image"
    assert "no non-private arm: no AUROC differences" in out.notes
    with_base = compare_runs([make_record("np_seed0", "np"), *records], {}, kind="multilabel",
                             label_names=["a", "b", "c"])
    assert "no non-private arm: no AUROC differences" not in with_base.notes


def test_a_run_without_the_explanation_metric_is_left_out_of_its_correlation(make_record, make_explanations):
    def run(e, energy):
        explanations = None if energy is None else make_explanations({"mask_energy": {"value": energy, "low": 0,
                                                                                      "high": 1}})
        return make_record(f"g_eps{e}_C1_seed0", "g", "dp_sgd", eps=float(e), explanations=explanations)

    runs = [run(1, 0.1), run(10, 0.2), run(100, 0.3), run(1000, None)]
    (row,) = compare_runs(runs, {}, kind="binary", label_names=["a", "b"]).correlations.epsilon_vs_explanations
    assert row.n == 3 and row.r == pytest.approx(1.0)


def test_each_arm_value_has_its_own_metrics_over_seeds_at_the_study_confidence(make_record):
    # by hand: 0.80, 0.82, 0.84 have mean 0.82, sd 0.02; t(0.975, 2) = 4.3027, so 0.82 +- 4.3027 * 0.02 / sqrt(3)
    aurocs, sens = (0.80, 0.82, 0.84), (0.70, 0.60, 0.80)
    records = [make_record(f"np_seed{s}", "np", seed=s,
                           metrics={"test_auroc": a, "test_accuracy": 0.75, "test_sensitivity": b,
                                    "test_specificity": float("nan")})
               for s, a, b in zip(range(3), aurocs, sens)]
    records.append(make_record("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0,
                               metrics={"test_auroc": 0.61, "test_accuracy": 0.55}))
    out = compare_runs(records, {}, kind="binary", label_names=["normal", "pneumonia"], n_resamples=50)
    own = {v.label: v for v in out.metrics_by_value}
    assert list(own) == ["np", "dp_eps1_C1"] and own["np"].seeds == [0, 1, 2]
    auroc = own["np"].test_auroc
    assert (auroc.mean, auroc.n_seeds) == (pytest.approx(0.82), 3)
    assert (auroc.low, auroc.high) == pytest.approx((0.82 - 0.04968, 0.82 + 0.04968), abs=1e-5)
    # sensitivity: mean 0.70, sd 0.10, half width 4.3027 * 0.1 / sqrt(3) = 0.24842
    assert (own["np"].test_sensitivity.low, own["np"].test_sensitivity.high) == pytest.approx((0.45158, 0.94842),
                                                                                               abs=1e-5)
    assert own["np"].test_accuracy.std == 0.0 and own["np"].test_accuracy.low == pytest.approx(0.75)
    # a metric undefined in every seed says so; one the runs do not record (here the DP arm's) is absent
    assert own["np"].test_specificity.n_seeds == 0 and own["np"].test_specificity.reason
    assert own["dp_eps1_C1"].test_sensitivity is None and own["dp_eps1_C1"].test_specificity is None
    # one seed: its value, no interval, and why
    one = own["dp_eps1_C1"].test_auroc
    assert (one.mean, one.low, one.high, one.n_seeds) == (0.61, None, None, 1) and "one seed" in one.reason
    # eps: the accounted eps where the runs have one; the non-private arm has none
    assert own["dp_eps1_C1"].epsilon.mean == pytest.approx(0.99) and own["np"].epsilon is None
    assert own["dp_eps1_C1"].epsilon_label == records[-1].privacy.in_brief()
    # the study's confidence: t(0.95, 2) = 2.9200 at 90 %
    narrower = compare_runs(records, {}, kind="binary", label_names=["normal", "pneumonia"], n_resamples=50,
                            confidence=0.9).metrics_by_value[0].test_auroc
    assert narrower.high - narrower.mean == pytest.approx(2.9200 * 0.02 / np.sqrt(3), abs=1e-5)
    # written to comparisons.json and read back
    assert type(out).model_validate_json(out.model_dump_json()).metrics_by_value == out.metrics_by_value
    # a comparisons.json that predates the key still reads
    old = out.model_dump(mode="json")
    del old["metrics_by_value"]
    assert type(out).model_validate(old).metrics_by_value == []


def test_an_arms_eps_over_seeds_has_no_interval_below_zero(make_record):
    """Seeds that calibrate their noise to their own released counts account different eps; over 2 seeds (t 12.71)
    the t interval of 1 and 5 reached -22, an eps no mechanism has."""
    records = [make_record(f"dp_eps1_C1_seed{s}", "dp", "dp_sgd", eps=1.0, seed=s, metrics={"test_auroc": 0.7})
               for s in (0, 1)]
    records = [r.model_copy(update={"privacy": r.privacy.model_copy(update={"epsilon": e})})
               for r, e in zip(records, (1.0, 5.0))]
    eps = compare_runs(records, {}, kind="binary", label_names=["a", "b"], n_resamples=50).metrics_by_value[0].epsilon
    assert eps.n_seeds == 2 and eps.low == 0.0 and eps.high > eps.max, eps


def test_comparisons_json_describes_the_interval_over_seeds_as_it_is_computed(make_record):
    """comparisons.json's methods said "mean +- t(n - 1) std / sqrt(n) ... with 3 seeds t is 4.30" whatever the
    study's confidence, and nothing of the cut to what the value can be: a reader recomputing a 90% study's intervals,
    or 2 seeds' (cut to [-1, 1]), got other numbers than the file's."""
    from scipy.stats import t

    records = [make_record(f"np_seed{s}", "np", seed=s, metrics={"test_auroc": 0.8}) for s in range(3)]
    definitions = compare_runs(records, {}, kind="binary", label_names=["a", "b"], n_resamples=50,
                               confidence=0.9).definitions
    assert f"t is {t.ppf(0.95, 2):.2f}" in definitions["by_value"] and "4.30" not in definitions["by_value"]
    assert "[-1, 1]" in definitions["by_value"]
    assert "[0, 1]" in definitions["metrics_by_value"] and "not below 0" in definitions["metrics_by_value"]


def test_comparisons_json_names_the_interval_rule_of_the_paired_differences(make_record):
    """A run's own AUROC, accuracy and rates have the interval the study asks for (evaluation.interval: percentile
    or BCa); the paired differences keep the percentile interval that their p-value inverts. comparisons.json must
    say which, or a reader takes the difference's interval for the same rule as the arms' beside it."""
    records = [make_record("np_seed0", "np", seed=0, metrics={"test_auroc": 0.8})]
    definitions = compare_runs(records, {}, kind="binary", label_names=["a", "b"], n_resamples=50).definitions
    assert "percentile interval" in definitions["auroc_difference"] and "BCa" not in definitions["auroc_difference"]
    definitions = compare_runs(records, {}, kind="binary", label_names=["a", "b"], n_resamples=50,
                               interval="bca").definitions
    assert "percentile interval" in definitions["auroc_difference"]
    assert "each run's own AUROC interval is BCa" in definitions["auroc_difference"]


def test_a_pair_whose_reference_holds_chance_says_so_in_comparisons_json(make_record):
    """The report names a non-private run whose test AUROC interval holds 0.5 (its seed's changes then measure a
    reference that may have learned nothing, and read as gains); comparisons.json had no such field, so a program
    reading it took those gains at face value. Each pair, and each arm value over seeds, now says so, by the same
    rule as the report."""
    from dpmed.comparisons import Comparisons, holds_chance

    rng = np.random.default_rng(6)
    y = rng.integers(0, 2, 50)
    ids = np.arange(50).astype(str)
    good, poor = np.clip(0.6 * y + 0.4 * rng.random(50), 0, 1), np.clip(0.2 * y + 0.8 * rng.random(50), 0, 1)
    records, predictions = _two_seeds(make_record, y, ids, good, poor)
    at_chance = {"test_auroc": 0.55, "test_auroc_low": 0.45, "test_auroc_high": 0.65}
    records[1] = records[1].model_copy(update={"metrics": at_chance})            # np_seed1
    records[0] = records[0].model_copy(update={"metrics": {"test_auroc": 0.9, "test_auroc_low": 0.8,
                                                            "test_auroc_high": 0.95}})
    assert holds_chance(records[1]) and not holds_chance(records[0])
    edge = records[1].model_copy(update={"metrics": {**at_chance, "test_auroc_low": 0.5}})
    assert holds_chance(edge)                                                    # the interval holds its ends
    out = compare_runs(records, predictions, kind="binary", label_names=["normal", "pneumonia"], n_resamples=50)
    rows = {r.run_id: r for r in out.auroc_differences}
    assert rows["dp_eps1_C1_seed1"].reference_at_chance is True
    assert rows["dp_eps1_C1_seed0"].reference_at_chance is False
    assert out.by_value[0].references_at_chance == ["np_seed1"]
    assert "reference_at_chance" in out.definitions and "0.5" in out.definitions["reference_at_chance"]
    again = Comparisons.model_validate_json(out.model_dump_json())
    assert again.auroc_differences[1].reference_at_chance is True


def _graded_groups_fairness():
    """Fairness by sex of 100 graded test images: 40 women with 4 of grade 0 (a small class), 60 men with 20 of each."""
    from dpmed.evaluation.fairness import evaluate_fairness

    rng = np.random.default_rng(0)
    y = np.r_[np.repeat([0, 1, 2], [4, 18, 18]), np.repeat([0, 1, 2], 20)]
    s = rng.dirichlet(np.ones(3), size=y.size) + 0.4 * np.eye(3)[y]
    s /= s.sum(1, keepdims=True)
    sex = np.repeat(["female", "male"], [40, 60])
    fairness = evaluate_fairness(kind="multiclass", val_labels=y, val_scores=s, test_labels=y, test_scores=s,
                                 attributes={"sex": sex}, n_resamples=20, seed=0)
    return fairness


def test_a_multiclass_group_with_few_images_of_one_class_is_flagged(make_record):
    """A multiclass group was flagged only below 20 images: a group of 40 graded images with 4 of one grade passed
    as a measurement, though that grade's one-vs-rest AUROC, a quarter of the group's macro AUROC, rests on 4
    images, and a multilabel group with 4 positives of one finding is flagged."""
    fairness = _graded_groups_fairness()
    assert fairness.attributes["sex"].groups["female"].n_positive_by_label == [4, 18, 18]
    records = [make_record("np_seed0", "np", fairness=fairness)]
    flags = {f.group: f for f in compare_runs(records, {}, kind="multiclass",
                                              label_names=["none", "mild", "severe"]).group_flags}
    assert set(flags) == {"female"}
    assert flags["female"].reasons == ["only 4 images of none"]


def test_a_paired_kappa_difference_by_hand_on_four_grades():
    # K = 3, w = (i - j)^2 / 4. Private grades 0 1 2 1 for truth 0 1 2 2: sum wO = 1/16, sum wE = 5/16, kappa 4/5.
    # Reference 0 2 2 0: sum wO = 5/16, sum wE = 7/16, kappa 2/7. Difference 4/5 - 2/7 = 18/35.
    y = np.array([0, 1, 2, 2])
    private, reference = np.eye(3)[[0, 1, 2, 1]], np.eye(3)[[0, 2, 2, 0]]
    out = paired_differences(kind="multiclass", labels=y, scores=private, reference_scores=reference, n_resamples=20,
                             seed=1, ordinal=True)["kappa_quadratic"]
    assert (out.private, out.reference, out.value) == pytest.approx((4 / 5, 2 / 7, 18 / 35))


def test_a_paired_kappa_difference_is_scikit_learn_s_on_the_same_redraws():
    rng = np.random.default_rng(12)
    y = np.tile([0, 1, 2, 3, 4], 12)
    a = rng.random((60, 5)) + 0.8 * np.eye(5)[y]
    b = rng.random((60, 5)) + 0.3 * np.eye(5)[np.clip(y + rng.integers(-2, 3, 60), 0, 4)]
    out = paired_differences(kind="multiclass", labels=y, scores=a, reference_scores=b, n_resamples=100, seed=3,
                             ordinal=True, confidence=0.9)["kappa_quadratic"]

    def kappa(s, i):
        return cohen_kappa_score(y[i], s[i].argmax(axis=1), weights="quadratic", labels=range(5))

    everyone = np.arange(60)
    assert (out.private, out.reference) == pytest.approx((kappa(a, everyone), kappa(b, everyone)))
    assert out.value == pytest.approx(kappa(a, everyone) - kappa(b, everyone)) and out.value != 0
    diffs = np.array([kappa(a, i) - kappa(b, i) for i in bootstrap_indices(60, n_resamples=100, seed=3)])
    assert (out.low, out.high) == pytest.approx(percentile_interval(diffs, confidence=0.9))
    assert out.p_value == pytest.approx(bootstrap_p_value(diffs)) and out.defined_redraws == 100


def test_only_ordinal_grades_have_a_paired_kappa_difference():
    y = np.tile([0, 1, 2], 10)
    s = np.eye(3)[y] + 0.1
    assert "kappa_quadratic" not in paired_differences(kind="multiclass", labels=y, scores=s, reference_scores=s,
                                                       n_resamples=10)
    with pytest.raises(ValueError, match="ordinal applies to multiclass grades"):
        paired_differences(kind="binary", labels=y % 2, scores=s[:, 1], reference_scores=s[:, 1], n_resamples=10,
                           ordinal=True)


def _graded_study(make_record, kappas):
    """Two seeds of a non-private and a DP arm on five grades: seed 0's non-private run grades well, every other run
    poorly; the runs' recorded kappas are ``kappas`` (np seed 0, np seed 1, dp seed 0, dp seed 1)."""
    rng = np.random.default_rng(13)
    y = np.tile(np.arange(5), 12)
    good = rng.random((60, 5)) + 0.9 * np.eye(5)[y]
    poor = rng.random((60, 5)) + 0.2 * np.eye(5)[y]
    records, predictions = _two_seeds(make_record, y, np.arange(60).astype(str), good, poor)
    records = [r.model_copy(update={"metrics": {"test_auroc": 0.7, "test_kappa_quadratic": k}})
               for r, k in zip(records, kappas)]
    return records, predictions, y, good, poor


def test_an_ordinal_study_pairs_kappa_and_summarises_it_over_seeds(make_record):
    records, predictions, y, good, poor = _graded_study(make_record, (-0.5, -0.3, 0.2, 0.4))
    out = compare_runs(records, predictions, kind="multiclass", label_names=list("01234"), n_resamples=60,
                       ordinal=True)
    rows = {r.run_id: r for r in out.auroc_differences}
    expected = paired_differences(kind="multiclass", labels=y, scores=poor, reference_scores=good, n_resamples=60,
                                  ordinal=True)["kappa_quadratic"]
    assert rows["dp_eps1_C1_seed0"].kappa_quadratic_difference == expected and expected.value < -0.2
    assert rows["dp_eps1_C1_seed1"].kappa_quadratic_difference.value == 0.0           # same grades as its seed's
    # over seeds: mean d / 2, t(0.975, 1) = 12.706 gives a half width of 12.706 |d| / 2, cut to [-2, 2] (not [-1, 1])
    summary = out.by_value[0].kappa_quadratic_difference
    assert summary.mean == pytest.approx(expected.value / 2) and summary.n_seeds == 2
    assert (summary.low, summary.high) == pytest.approx((max(-2, expected.value / 2 - 12.706205 * -expected.value / 2),
                                                         min(2, expected.value / 2 + 12.706205 * -expected.value / 2)))
    assert summary.low < -1
    # each arm's own kappa over seeds, cut to [-1, 1]: the non-private arm's -0.5, -0.3 is -0.4 +- 12.706 * 0.1
    own = {v.label: v.test_kappa_quadratic for v in out.metrics_by_value}
    assert own["np"].mean == pytest.approx(-0.4) and (own["np"].low, own["np"].high) == pytest.approx((-1, 0.8706),
                                                                                                      abs=1e-4)
    assert "kappa_quadratic_difference" in out.definitions and "test_kappa_quadratic" in out.definitions
    dumped = out.model_dump(mode="json")
    assert dumped["auroc_differences"][0]["kappa_quadratic_difference"]["value"] == pytest.approx(expected.value)
    assert type(out).model_validate_json(out.model_dump_json()) == out


@pytest.mark.parametrize("kind", ["unordered", "binary"])
def test_a_study_of_unordered_classes_writes_no_kappa(make_record, kind):
    if kind == "binary":
        rng = np.random.default_rng(6)
        y = rng.integers(0, 2, 50)
        records, predictions = _two_seeds(make_record, y, np.arange(50).astype(str), rng.random(50), rng.random(50))
        out = compare_runs(records, predictions, kind="binary", label_names=["a", "b"], n_resamples=20, ordinal=True)
    else:
        records, predictions, *_ = _graded_study(make_record, (0.1, 0.2, 0.3, 0.4))
        out = compare_runs(records, predictions, kind="multiclass", label_names=list("01234"), n_resamples=20)
    assert out.auroc_differences and out.by_value and out.metrics_by_value
    assert "kappa" not in out.model_dump_json()


def test_a_multiclass_run_recorded_before_the_class_counts_is_flagged_as_a_newer_run_of_the_study_is(make_record):
    """A multiclass run.json of a dpmed before the per-class counts holds none (n_positive_by_label null), so in a
    folder resumed with one more seed the new run's group was flagged for 4 images of one grade and the same group
    of the older runs, on the same test images, was not. Every run of a study has the same test set and groups, so
    an older run's group takes the counts a newer run recorded for it."""
    fairness = _graded_groups_fairness()
    entry = fairness.attributes["sex"]
    old = fairness.model_copy(update={"attributes": {"sex": entry.model_copy(update={"groups": {
        name: g.model_copy(update={"n_positive_by_label": None}) for name, g in entry.groups.items()}})}})
    records = [make_record("np_seed0", "np", fairness=old), make_record("np_seed1", "np", fairness=fairness, seed=1)]
    flags = compare_runs(records, {}, kind="multiclass", label_names=["none", "mild", "severe"]).group_flags
    assert {(f.run_id, f.group): f.reasons for f in flags} == {("np_seed0", "female"): ["only 4 images of none"],
                                                               ("np_seed1", "female"): ["only 4 images of none"]}
