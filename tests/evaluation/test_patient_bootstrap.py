"""The test-set bootstrap redraws patients where their ids are known (METHODS.md sec. 4; the cluster bootstrap of
Davison & Hinkley 1997, sec. 3.8): a drawn patient brings all of their images, every redraw draws as many patients
as the test set holds, every arm, group and metric sees the same redraws, and where every image is its own patient
nothing changes, bit for bit. The intervals are checked against an explicit loop that builds each redrawn sample from
patients drawn with numpy and scores it with scikit-learn."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from dpmed.evaluation.bootstrap import bootstrap_indices, bootstrap_redraws, patient_numbers, percentile_interval
from dpmed.evaluation.explanations import explain
from dpmed.evaluation.fairness import evaluate_fairness
from dpmed.evaluation.faithfulness import mean_with_interval
from dpmed.evaluation.paired import bootstrap_p_value, paired_differences
from dpmed.evaluation.utility import evaluate_utility
from dpmed.evaluation.weighted import redraw_counts

R, SEED = 300, 11


def _clustered(seed: int = 0, n_patients: int = 70):
    """A test set of patients with 1 to 6 images each, in interleaved order; label and most of the score are the
    patient's (as a patient's films share their diagnosis and look), so images of one patient are far from
    independent. Returns labels [n], two models' scores [n], patient ids [n], sex [n]."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 7, n_patients)
    patient = np.repeat(np.arange(n_patients), sizes)
    patient = patient[rng.permutation(patient.size)]                       # one patient's images not adjacent
    label_of = rng.integers(0, 2, n_patients)
    look_of = rng.normal(size=n_patients)
    y = label_of[patient]
    a = 1.0 * y + look_of[patient] + 0.2 * rng.normal(size=patient.size)
    b = 0.6 * y + look_of[patient] + 0.4 * rng.normal(size=patient.size)
    ids = np.array([f"pt-{p * 7919 % 1000:03d}" for p in patient])         # ids not in first-appearance order
    sex = np.where(rng.integers(0, 2, n_patients) == 1, "female", "male")[patient]
    return y, a, b, ids, sex


def _patient_samples(ids: np.ndarray, n_resamples: int, seed: int) -> list[np.ndarray]:
    """Each redraw as the positions of its images, built explicitly: P patients drawn with replacement by numpy
    (patients in order of first appearance), each bringing every one of their images."""
    patients = list(dict.fromkeys(ids.tolist()))
    images_of = [np.flatnonzero(ids == p) for p in patients]
    draws = np.random.default_rng(seed).integers(0, len(patients), size=(n_resamples, len(patients)))
    return [np.concatenate([images_of[p] for p in row]) for row in draws]


def _auroc(y, s) -> float:
    return float(roc_auc_score(y, s)) if 0 < y.sum() < len(y) else np.nan


# ------------------------------------------------------------------------------------------- (a) the redraws


def test_a_patient_s_images_are_redrawn_together_and_each_redraw_draws_every_patient_count(monkeypatch):
    _, _, _, ids, _ = _clustered()
    n, n_patients = len(ids), len(set(ids.tolist()))
    redraws = bootstrap_redraws(n, patient_ids=ids, n_resamples=R, seed=SEED)
    assert redraws.unit == "patient" and redraws.draws.shape == (R, n_patients) and redraws.n_images == n
    monkeypatch.setattr("dpmed.evaluation.weighted._BLOCK_ELEMENTS", 7 * n)   # several blocks
    counts = np.concatenate([c for _, c in redraw_counts(redraws)])           # [R, n] per image
    assert counts.shape == (R, n)
    drawn = np.zeros((R, n_patients))
    for k, p in enumerate(dict.fromkeys(ids.tolist())):
        mine = counts[:, ids == p]                                            # [R, images of p]
        assert (mine == mine[:, :1]).all()                                   # equal in every redraw
        drawn[:, k] = mine[:, 0]
    assert (drawn.sum(axis=1) == n_patients).all()                           # n_patients patients per redraw
    np.testing.assert_array_equal(drawn, [np.bincount(row, minlength=n_patients) for row in redraws.draws])
    # how many images a redraw holds varies with the patients drawn, so it is not an image bootstrap in disguise
    assert len(np.unique(counts.sum(axis=1))) > 1


def test_patients_are_numbered_in_order_of_first_appearance():
    np.testing.assert_array_equal(patient_numbers(["b", "a", "b", "c", "a"]), [0, 1, 0, 2, 1])
    np.testing.assert_array_equal(patient_numbers(np.array(["z", "y", "x"])), [0, 1, 2])
    with pytest.raises(ValueError, match="3 patient ids for 4 test images"):
        bootstrap_redraws(4, patient_ids=["a", "b", "c"], seed=0)


def test_the_run_row_records_which_unit_was_redrawn():
    y, a, _, ids, _ = _clustered()
    kw = dict(kind="binary", label_names=["normal", "disease"], val_labels=y, val_scores=a, test_labels=y,
              test_scores=a, n_resamples=50, seed=0)
    by_patient = evaluate_utility(**kw, test_patient_ids=ids)
    assert by_patient["bootstrap_unit"] == "patient" and by_patient["n_test_patients"] == len(set(ids.tolist()))
    by_image = evaluate_utility(**kw)
    assert by_image["bootstrap_unit"] == "image" and "n_test_patients" not in by_image
    assert evaluate_fairness(kind="binary", val_labels=y, val_scores=a, test_labels=y, test_scores=a,
                             attributes={}, n_resamples=50, patient_ids=ids).bootstrap_unit == "patient"


# ---------------------------------------------------------------------- (b) each image its own patient: as before


def _without_unit(row: dict) -> dict:
    return {k: v for k, v in row.items() if k not in ("bootstrap_unit", "n_test_patients")}


def test_distinct_ids_give_the_image_bootstrap_bit_for_bit():
    y, a, b, _, sex = _clustered(seed=2)
    n = len(y)
    ids = np.array([f"img-{v}" for v in np.random.default_rng(9).permutation(n)])   # distinct, unsorted
    redraws = bootstrap_redraws(n, patient_ids=ids, n_resamples=R, seed=SEED)
    np.testing.assert_array_equal(redraws.draws, bootstrap_indices(n, n_resamples=R, seed=SEED))
    np.testing.assert_array_equal(np.concatenate([c for _, c in redraw_counts(redraws)]),
                                  np.concatenate([c for _, c in redraw_counts(bootstrap_indices(n, n_resamples=R,
                                                                                                 seed=SEED))]))
    grades = np.digitize(a, np.quantile(a, [0.25, 0.5, 0.75]))              # an ordinal task too
    probs = np.eye(4)[grades] * 0.7 + 0.3 * np.random.default_rng(1).random((n, 4))
    tasks = [dict(kind="binary", label_names=["n", "d"], val_labels=y, val_scores=a, test_labels=y, test_scores=a),
             dict(kind="multiclass", label_names=list("0123"), val_labels=grades, val_scores=probs,
                  test_labels=grades, test_scores=probs, ordinal=True),
             dict(kind="multilabel", label_names=["f", "g"], val_labels=np.stack([y, 1 - y], 1),
                  val_scores=np.stack([a, b], 1), test_labels=np.stack([y, 1 - y], 1),
                  test_scores=np.stack([a, b], 1))]
    for task in tasks:
        with_ids = evaluate_utility(**task, n_resamples=R, seed=SEED, test_patient_ids=ids)
        assert _without_unit(with_ids) == _without_unit(evaluate_utility(**task, n_resamples=R, seed=SEED))
    fair = dict(kind="binary", val_labels=y, val_scores=a, test_labels=y, test_scores=a,
                attributes={"sex": sex}, n_resamples=R, seed=SEED)
    assert (evaluate_fairness(**fair, patient_ids=ids).model_copy(update={"bootstrap_unit": "image"})
            == evaluate_fairness(**fair))
    paired = dict(kind="binary", labels=y, scores=a, reference_scores=b, thresholds=[0.5],
                  reference_thresholds=[0.3], n_resamples=R, seed=SEED)
    assert paired_differences(**paired, patient_ids=ids) == paired_differences(**paired)
    values = np.where(np.arange(n) % 5 == 0, np.nan, a)                      # undefined values are left out
    assert mean_with_interval(values, n_resamples=R, seed=SEED, patient_ids=ids) == mean_with_interval(
        values, n_resamples=R, seed=SEED)


# ----------------------------------------------------------------------- (c) against an explicit patient loop


def test_patient_intervals_equal_an_explicit_loop_over_redrawn_patients(hand_bca):
    y, a, _, ids, sex = _clustered()
    row = evaluate_utility(interval="bca", kind="binary", label_names=["normal", "disease"], val_labels=y,
                           val_scores=a, test_labels=y, test_scores=a, n_resamples=R,
                           seed=SEED, test_patient_ids=ids)
    t = row["threshold"]
    aucs, accs, sens, female = [], [], [], []
    for idx in _patient_samples(ids, R, SEED):
        yy, ss, xx = y[idx], a[idx], sex[idx]
        aucs.append(_auroc(yy, ss))
        accs.append(np.mean((ss >= t) == (yy == 1)))
        sens.append(np.mean(ss[yy == 1] >= t) if (yy == 1).any() else np.nan)
        female.append(_auroc(yy[xx == "female"], ss[xx == "female"]) if (xx == "female").any() else np.nan)
    # BCa, its jackknife leaving out one patient, with all of their images, at a time
    stats = {"test_auroc": lambda i: _auroc(y[i], a[i]), "test_accuracy": lambda i: np.mean((a[i] >= t) == (y[i] == 1)),
             "test_sensitivity": lambda i: np.mean(a[i][y[i] == 1] >= t) if (y[i] == 1).any() else np.nan}
    for name, loop in (("test_auroc", aucs), ("test_accuracy", accs), ("test_sensitivity", sens)):
        expected = hand_bca(stats[name], loop, ids)
        assert (row[f"{name}_low"], row[f"{name}_high"]) == pytest.approx(tuple(expected), abs=1e-12), name
    fairness = evaluate_fairness(interval="bca", kind="binary", val_labels=y, val_scores=a, test_labels=y,
                                 test_scores=a, attributes={"sex": sex}, n_resamples=R, seed=SEED, patient_ids=ids)
    group = fairness.attributes["sex"].groups["female"].auroc
    assert (group.low, group.high) == pytest.approx(
        hand_bca(lambda i: _auroc(y[i][sex[i] == "female"], a[i][sex[i] == "female"]), female, ids), abs=1e-12)
    # Images of one patient are not independent: redrawing them one by one gives a narrower interval here.
    by_image = evaluate_utility(interval="bca", kind="binary", label_names=["normal", "disease"], val_labels=y,
                                val_scores=a, test_labels=y, test_scores=a, n_resamples=R,
                                seed=SEED)
    assert by_image["test_auroc_high"] - by_image["test_auroc_low"] < row["test_auroc_high"] - row["test_auroc_low"]


def test_explanation_means_redraw_the_explained_images_patients():
    _, a, _, ids, _ = _clustered(seed=4)
    values = np.where(np.arange(len(a)) % 4 == 0, np.nan, a)               # e.g. images without a lesion mask
    out = mean_with_interval(values, n_resamples=R, seed=SEED, patient_ids=ids)
    keep = np.isfinite(values)
    v, kept = values[keep], ids[keep]
    means = [v[idx].mean() for idx in _patient_samples(kept, R, SEED)]
    assert (out.low, out.high) == pytest.approx(percentile_interval(np.array(means)), abs=1e-12)
    assert out.n == int(keep.sum())


def test_explain_records_the_unit_and_redraws_the_explained_images_patients():
    import torch

    from dpmed.models import build_model

    torch.manual_seed(0)
    model = build_model("small_cnn", in_channels=1, num_outputs=2, image_size=16)
    images = np.random.default_rng(0).random((8, 1, 16, 16)).astype(np.float32)
    ids = np.array(["p1", "p1", "p2", "p3", "p3", "p3", "p4", "p5"])
    kw = dict(kind="binary", target_layer="features", deletion_steps=2, n_resamples=60, seed=1)
    record, arrays = explain(model, images, patient_ids=ids, **kw)
    plain, _ = explain(model, images, **kw)
    assert record.bootstrap_unit == "patient" and plain.bootstrap_unit == "image"
    insertion = record.metrics["insertion_auc"]
    curve = arrays["insertion_curve"]                                       # [8, steps + 1], trapezoid AUC
    per_image = ((curve[:, 1:] + curve[:, :-1]) / 2).sum(axis=1) / 2
    means = [per_image[idx].mean() for idx in _patient_samples(ids, 60, 1)]
    assert (insertion.low, insertion.high) == pytest.approx(percentile_interval(np.array(means)), abs=1e-9)


# --------------------------------------------------------------------------------------- (d) pairing still holds


def test_arms_and_their_paired_difference_see_the_same_patient_redraws(hand_bca):
    y, a, b, ids, _ = _clustered(seed=1)
    rows = {name: evaluate_utility(interval="bca", kind="binary", label_names=["n", "d"], val_labels=y, val_scores=s,
                                   test_labels=y, test_scores=s, n_resamples=R, seed=SEED, test_patient_ids=ids)
            for name, s in (("a", a), ("b", b))}
    diff = paired_differences(kind="binary", labels=y, scores=a, reference_scores=b, n_resamples=R, seed=SEED,
                              patient_ids=ids)["auroc"]
    auc_a, auc_b = [], []
    for idx in _patient_samples(ids, R, SEED):                               # one sample, both models
        auc_a.append(_auroc(y[idx], a[idx]))
        auc_b.append(_auroc(y[idx], b[idx]))
    auc_a, auc_b = np.array(auc_a), np.array(auc_b)
    for name, scores, loop in (("a", a, auc_a), ("b", b, auc_b)):      # each arm BCa, the difference percentile
        assert (rows[name]["test_auroc_low"], rows[name]["test_auroc_high"]) == pytest.approx(
            hand_bca(lambda i: _auroc(y[i], scores[i]), loop, ids), abs=1e-12)
    assert (diff.low, diff.high) == pytest.approx(percentile_interval(auc_a - auc_b), abs=1e-12)
    assert diff.p_value == pytest.approx(bootstrap_p_value(auc_a - auc_b))
    itself = paired_differences(kind="binary", labels=y, scores=a, reference_scores=a, n_resamples=R, seed=SEED,
                                patient_ids=ids)["auroc"]
    assert (itself.low, itself.high, itself.p_value) == (0.0, 0.0, 1.0)


def test_redraws_whose_images_name_units_that_were_not_drawn_are_refused():
    from dpmed.evaluation.bootstrap import Redraws

    draws = np.zeros((4, 3), dtype=np.int64)                       # 3 units per redraw
    Redraws(draws=draws, unit_of_image=np.array([0, 2, 2, 1]), unit="patient")
    for images in ([0, 3], [-1, 0]):
        with pytest.raises(ValueError, match="unit_of_image must index the 3 units drawn"):
            Redraws(draws=draws, unit_of_image=np.array(images), unit="patient")


def test_paired_rates_decide_at_the_threshold_itself_and_need_both_models_thresholds():
    """Hand-made: four images, labels 0 0 1 1. A score equal to the threshold is a positive call (score >= t, as
    the run's own metrics decide). The private model's calls are right on every image (accuracy 1), the
    reference's on two (0.5). Without the reference's threshold only AUROC is compared; a threshold per label
    column is required."""
    labels = np.array([0, 0, 1, 1])
    mine = np.array([0.1, 0.2, 0.5, 0.9])                # 0.5 sits on the threshold: positive, right
    reference = np.array([0.6, 0.2, 0.3, 0.9])           # wrong on images 0 and 2
    out = paired_differences(kind="binary", labels=labels, scores=mine, reference_scores=reference,
                             thresholds=[0.5], reference_thresholds=[0.5], n_resamples=20, seed=0)
    assert out["accuracy"].private == 1.0 and out["accuracy"].reference == 0.5
    assert out["sensitivity"].private == 1.0 and out["specificity"].reference == 0.5
    assert out["accuracy"].value == 0.5
    only = paired_differences(kind="binary", labels=labels, scores=mine, reference_scores=reference,
                              thresholds=[0.5], n_resamples=20, seed=0)
    assert set(only) == {"auroc"}
    with pytest.raises(ValueError, match="2 thresholds for 1 label columns"):
        paired_differences(kind="binary", labels=labels, scores=mine, reference_scores=reference,
                           thresholds=[0.5, 0.5], reference_thresholds=[0.5], n_resamples=20, seed=0)
