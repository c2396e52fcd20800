"""Fairness metrics (METHODS.md sec. 5) against values worked out by hand on ten test images, against fairlearn, and
their intervals against a plain loop over the same bootstrap redraws."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from fairlearn.metrics import demographic_parity_difference, equalized_odds_difference
from sklearn.metrics import roc_auc_score

from dpmed.evaluation.bootstrap import bootstrap_indices, percentile_interval
from dpmed.evaluation.fairness import (AGE_BINS, UNKNOWN, _group_order, age_groups, attribute_fairness, decisions,
                                       evaluate_fairness, fairness_columns, group_labels, named_groups, sex_groups,
                                       uncompared_groups)
from dpmed.evaluation.utility import youden_threshold

# Validation set whose Youden threshold is 0.5 (score >= 0.5 is positive): J = 1 there and below 1 elsewhere.
VAL_Y = np.array([0, 0, 1, 1])
VAL_S = np.array([0.1, 0.3, 0.5, 0.9])

# Ten test images. Decisions at 0.5 and whether they are right:
#   i  sex  age  y  s     yhat  right
#   0  F    25   1  0.90  1     yes
#   1  F    45   0  0.20  0     yes
#   2  F    65   1  0.40  0     no
#   3  F    85   0  0.60  1     no
#   4  M    25   1  0.80  1     yes
#   5  M    45   1  0.70  1     yes
#   6  M    65   0  0.30  0     yes
#   7  M    75   0  0.10  0     yes
#   8  M    85   1  0.35  0     no
#   9  M    nan  0  0.45  0     yes
Y = np.array([1, 0, 1, 0, 1, 1, 0, 0, 1, 0])
S = np.array([0.9, 0.2, 0.4, 0.6, 0.8, 0.7, 0.3, 0.1, 0.35, 0.45])
SEX = np.array(["female"] * 4 + ["male"] * 6)
AGE = np.array([25, 45, 65, 85, 25, 45, 65, 75, 85, np.nan])


def _evaluate(**kw):
    return evaluate_fairness(kind="binary", val_labels=VAL_Y, val_scores=VAL_S, test_labels=Y, test_scores=S,
                             attributes={"sex": SEX, "age": AGE}, n_resamples=kw.pop("n_resamples", 200), seed=0,
                             **kw)


def test_groups_follow_the_bins_of_003_and_missing_values_become_unknown():
    assert age_groups([0, 29.9, 30, 59, 60, 70, 80, 99.9, 100, np.nan, -1]).tolist() == [
        "[0,30)", "[0,30)", "[30,60)", "[30,60)", "[60,70)", "[70,80)", "[80,100)", "[80,100)", ">=100", UNKNOWN,
        UNKNOWN]
    assert sex_groups(["female", "Male", "", "nan", "unknown"]).tolist() == ["female", "male"] + [UNKNOWN] * 3
    with pytest.raises(ValueError, match="no grouping"):
        group_labels("ethnicity", ["a"])


def test_threshold_comes_from_validation_and_decides_test():
    _, _, correct, selected, thresholds = decisions("binary", VAL_Y, VAL_S, Y, S)
    assert thresholds == [0.5]
    assert selected[:, 0].tolist() == [1, 0, 0, 1, 1, 1, 0, 0, 0, 0]
    assert correct.tolist() == [1, 1, 0, 0, 1, 1, 1, 1, 0, 1]
    # a score equal to the threshold is decided positive, as in the utility metrics (s >= t)
    _, _, correct, selected, _ = decisions("binary", VAL_Y, VAL_S, [1, 0, 1], [0.5, 0.1, 0.9])
    assert selected[:, 0].tolist() == [1, 0, 1] and correct.tolist() == [1, 1, 1]


def test_sex_groups_by_hand(hand_bca):
    sex = _evaluate(interval="bca").attributes["sex"]
    f, m = sex.groups["female"], sex.groups["male"]
    assert (f.n, f.n_positive, m.n, m.n_positive) == (4, 2, 6, 3)
    # female AUROC: positives {.9, .4} vs negatives {.2, .6}: 3 of 4 pairs ordered; male {.8,.7,.35} vs {.3,.1,.45}: 8/9
    assert f.auroc.value == pytest.approx(3 / 4)
    assert m.auroc.value == pytest.approx(8 / 9)
    assert f.accuracy.value == pytest.approx(2 / 4)
    assert m.accuracy.value == pytest.approx(5 / 6)
    # accuracy parity ("statistical parity difference" of 003): female minus male, and its mirror
    assert f.accuracy_parity_difference.value == pytest.approx(2 / 4 - 5 / 6)
    assert m.accuracy_parity_difference.value == pytest.approx(5 / 6 - 2 / 4)
    # demographic parity per group: P(yhat=1 | female) = 2/4, P(yhat=1 | male) = 2/6
    assert f.demographic_parity_difference.value == pytest.approx(2 / 4 - 2 / 6)
    # per attribute: max - min selection rate = 1/6; equalised odds: TPR 1/2 vs 2/3, FPR 1/2 vs 0 -> 1/2
    assert sex.demographic_parity_difference.value == pytest.approx(1 / 6)
    assert sex.equalized_odds_difference.value == pytest.approx(1 / 2)
    assert sex.worst_group_auroc.group == "female"
    assert sex.worst_group_auroc.value == pytest.approx(3 / 4)
    for est in (f.auroc, m.accuracy, f.accuracy_parity_difference, sex.equalized_odds_difference):
        assert est.low <= est.value <= est.high
    # The bounds of 200 redraws of ten images cannot be worked out by hand; they are those of the same statistic
    # recomputed on each redraw (bootstrap_indices(10, 200, seed=0), as evaluate_fairness draws them).
    correct = np.array([1, 1, 0, 0, 1, 1, 1, 1, 0, 1])              # the "right" column of the table
    aurocs, accuracies, parities = [], [], []
    for idx in bootstrap_indices(10, n_resamples=200, seed=0):
        fi, mi = idx[SEX[idx] == "female"], idx[SEX[idx] == "male"]
        aurocs.append(roc_auc_score(Y[fi], S[fi]) if len(set(Y[fi])) == 2 else np.nan)
        accuracies.append(correct[mi].mean() if len(mi) else np.nan)
        parities.append(correct[fi].mean() - correct[mi].mean() if len(fi) and len(mi) else np.nan)
    # A group's AUROC and accuracy: BCa, its jackknife leaving out each image in turn; a difference: percentile.
    female_auroc = hand_bca(lambda i: roc_auc_score(Y[i][SEX[i] == "female"], S[i][SEX[i] == "female"])
                            if len(set(Y[i][SEX[i] == "female"])) == 2 else np.nan, aurocs, np.arange(10))
    male_accuracy = hand_bca(lambda i: correct[i][SEX[i] == "male"].mean(), accuracies, np.arange(10))
    for est, expected in ((f.auroc, female_auroc), (m.accuracy, male_accuracy),
                          (f.accuracy_parity_difference, percentile_interval(np.array(parities)))):
        assert (est.low, est.high) == pytest.approx(expected, abs=1e-12)


def test_point_values_equal_fairlearn():
    sex = _evaluate().attributes["sex"]
    yhat = (S >= 0.5).astype(int)
    assert sex.demographic_parity_difference.value == pytest.approx(
        demographic_parity_difference(Y, yhat, sensitive_features=SEX))
    assert sex.equalized_odds_difference.value == pytest.approx(
        equalized_odds_difference(Y, yhat, sensitive_features=SEX))


def test_a_known_age_below_the_first_bin_is_a_group_of_its_own_not_unknown():
    groups = age_groups([10, 17.9, 18, 40, 70, np.nan, -1], bins=(18, 40, 65))
    assert groups.tolist() == ["<18", "<18", "[18,40)", "[40,65)", ">=65", UNKNOWN, UNKNOWN]
    assert _group_order(groups, "age", (18, 40, 65)) == ["<18", "[18,40)", "[40,65)", ">=65", UNKNOWN]


@pytest.mark.parametrize("bins", [AGE_BINS, (0, 40, 65), (18, 40, 65, 100), (18, 40, 65)])
def test_the_named_age_groups_are_those_the_bins_compare(bins):
    """The report names each group the study names that no test image falls in (`named_groups`). Bins that end
    below 100 make their last group an open one (65 and over), compared like any other; it was left out, so a test
    set without anyone 65 or over said nothing of it. Bins that start above 0 make a group below the first edge
    ("<18"), compared too; it was left out the same way. Every compared group a known age falls in is named, and no
    other."""
    ages = np.arange(0.0, 120.0, 0.5)
    compared = set(age_groups(ages, bins=bins).tolist()) - set(uncompared_groups("age", bins))
    assert set(named_groups("age", bins)) == compared


def test_age_groups_by_hand_with_undefined_auroc_and_unknown_age():
    age = _evaluate().attributes["age"]
    groups = age.groups
    assert list(groups) == ["[0,30)", "[30,60)", "[60,70)", "[70,80)", "[80,100)", UNKNOWN]
    assert groups["[0,30)"].auroc.value is None            # two positives, no negative: undefined
    assert groups["[30,60)"].auroc.value == 1.0
    assert groups["[60,70)"].auroc.value == 1.0
    assert groups["[80,100)"].auroc.value == 0.0           # positive .35 below negative .6
    assert groups["[80,100)"].accuracy.value == 0.0
    # [80,100): 0 of 2 right, against the other age groups pooled (6 of their 7 right; image 9, of unknown age, is in
    # no group's rest)
    assert groups["[80,100)"].accuracy_parity_difference.value == pytest.approx(0 - 6 / 7)
    assert groups[UNKNOWN].accuracy_parity_difference.value == pytest.approx(1 - 6 / 9)    # against all 9 named
    assert groups[UNKNOWN].n == 1
    # worst group among the named groups whose AUROC is defined
    assert age.worst_group_auroc.group == "[80,100)" and age.worst_group_auroc.value == 0.0
    # equalised odds leaves out groups lacking a class, and says which
    assert set(age.equalized_odds_excluded_groups) == {"[0,30)", "[70,80)"}


def test_redraw_path_with_the_identity_redraw_equals_fairlearn():
    """One "redraw" that is the test set itself: the interval bounds are then the redraw code's own point values,
    which must equal fairlearn's (the point values come from fairlearn directly)."""
    rng = np.random.default_rng(3)
    n = 60
    y = rng.integers(0, 2, n)
    s = np.clip(y * 0.3 + rng.random(n) * 0.7, 0, 1)
    groups = rng.choice(["a", "b", "c"], n)
    _, _, correct, selected, _ = decisions("binary", y, s, y, s)
    out = attribute_fairness(y=y[:, None], s=s[:, None], correct=correct, selected=selected, groups=groups,
                             order=["a", "b", "c"], redraws=np.arange(n)[None, :], confidence=0.95)
    for key, fn in (("demographic_parity_difference", demographic_parity_difference),
                    ("equalized_odds_difference", equalized_odds_difference)):
        expected = fn(y, selected[:, 0], sensitive_features=groups)
        assert getattr(out, key).value == pytest.approx(expected)
        assert getattr(out, key).low == pytest.approx(expected) and getattr(out, key).high == pytest.approx(expected)


def test_intervals_equal_a_plain_loop_over_the_same_redraws(hand_bca):
    rng = np.random.default_rng(0)
    n, r = 80, 60
    y = rng.integers(0, 2, n)
    s = np.clip(0.35 * y + 0.65 * rng.random(n), 0, 1)
    sex = rng.choice(["female", "male"], n, p=[0.3, 0.7])
    vy, vs = y[:20], s[:20]
    out = evaluate_fairness(interval="bca", kind="binary", val_labels=vy, val_scores=vs, test_labels=y, test_scores=s,
                            attributes={"sex": sex}, n_resamples=r, seed=5).attributes["sex"].groups
    _, _, correct, _, _ = decisions("binary", vy, vs, y, s)
    aurocs, parity = [], []
    for idx in bootstrap_indices(n, n_resamples=r, seed=5):
        f = idx[sex[idx] == "female"]
        m = idx[sex[idx] == "male"]
        aurocs.append(roc_auc_score(y[f], s[f]) if len(set(y[f])) == 2 else np.nan)
        parity.append(correct[f].mean() - correct[m].mean())
    female = sex == "female"
    assert (out["female"].auroc.low, out["female"].auroc.high) == pytest.approx(
        hand_bca(lambda i: roc_auc_score(y[i[female[i]]], s[i[female[i]]]), aurocs, np.arange(n)))
    assert (out["female"].accuracy_parity_difference.low,
            out["female"].accuracy_parity_difference.high) == pytest.approx(percentile_interval(np.array(parity)))


def _fpr_gap_data():
    """Female and male patients whose positives score alike (TPRs close) while male negatives score higher (FPR
    about 0.5 against about 0.15): the FPR gap dominates equalised odds and male is the worst AUROC group. A few
    patients of unknown sex have reversed scores (AUROC near 0), which must not count as a patient group."""
    rng = np.random.default_rng(7)
    sex = np.array(["female"] * 70 + ["male"] * 70 + [UNKNOWN] * 12)
    y = (rng.random(sex.size) < 0.4).astype(int)
    y[-12:] = [1] * 6 + [0] * 6
    negative_top = np.where(sex == "male", 1.0, 0.58)
    s = np.where(y == 1, rng.uniform(0.45, 1.0, sex.size), rng.uniform(0.0, 1.0, sex.size) * negative_top)
    s[-12:] = np.where(y[-12:] == 1, 0.05, 0.95)
    return y, s.round(2), sex


def _fpr_gap_fairness(r, seed):
    y, s, sex = _fpr_gap_data()
    out = evaluate_fairness(kind="binary", val_labels=VAL_Y, val_scores=VAL_S, test_labels=y, test_scores=s,
                            attributes={"sex": sex}, n_resamples=r, seed=seed)
    assert out.thresholds == [0.5]
    return out.attributes["sex"], y, s, sex


def test_worst_group_auroc_interval_is_the_percentile_interval_of_the_lowest_sklearn_group_auroc():
    """Per redraw the worst group is the lowest of scikit-learn's AUROCs of the redrawn female and male images (the
    unknown left out): the interval describes the worst group of each redrawn population, not the best one."""
    r, seed = 200, 3
    sex_entry, y, s, sex = _fpr_gap_fairness(r, seed)
    worst, best, with_unknown = [], [], []
    for idx in bootstrap_indices(len(y), n_resamples=r, seed=seed):
        aurocs = {}
        for g in ("female", "male", UNKNOWN):
            k = idx[sex[idx] == g]
            aurocs[g] = roc_auc_score(y[k], s[k]) if len(set(y[k])) == 2 else np.nan
        assert np.isfinite(aurocs["female"]) and np.isfinite(aurocs["male"])     # no undefined redraw to skip
        worst.append(min(aurocs["female"], aurocs["male"]))
        best.append(max(aurocs["female"], aurocs["male"]))
        with_unknown.append(np.nanmin(list(aurocs.values())))
    expected = percentile_interval(np.array(worst))
    est = sex_entry.worst_group_auroc
    assert est.group == "male"
    assert est.value == pytest.approx(roc_auc_score(y[sex == "male"], s[sex == "male"]))
    assert (est.low, est.high) == pytest.approx(expected, abs=1e-12)
    # the data tell the worst group's interval apart from the best group's and from one counting the unknown
    assert percentile_interval(np.array(best))[0] > expected[0] + 0.05
    assert percentile_interval(np.array(with_unknown))[1] < expected[0]


def test_equalized_odds_interval_spans_the_larger_of_the_tpr_and_fpr_gaps_when_the_fpr_gap_dominates():
    """Per redraw: TPR and FPR of the redrawn female and male images at the validation threshold; equalised odds =
    max(|TPR gap|, |FPR gap|) (fairlearn's definition, DEFINITIONS), and its interval is the point value +- the 95%
    quantile of the larger deviation of the two redrawn gaps from their point values. Here the FPR gap is the
    larger, so an interval around the TPR gap would sit near 0."""
    r, seed = 200, 3
    sex_entry, y, s, sex = _fpr_gap_fairness(r, seed)
    yhat = (s >= 0.5).astype(int)
    point = {g: (yhat[(sex == g) & (y == 1)].mean(), yhat[(sex == g) & (y == 0)].mean()) for g in ("female", "male")}
    gaps = [point["female"][k] - point["male"][k] for k in (0, 1)]
    deviations = []
    for idx in bootstrap_indices(len(y), n_resamples=r, seed=seed):
        rates = {}
        for g in ("female", "male"):
            k = idx[sex[idx] == g]
            pos, neg = k[y[k] == 1], k[y[k] == 0]
            assert len(pos) and len(neg)                              # both rates defined in every redraw
            rates[g] = (yhat[pos].mean(), yhat[neg].mean())
        deviations.append(max(abs(rates["female"][k] - rates["male"][k] - gaps[k]) for k in (0, 1)))
    assert abs(gaps[1]) - abs(gaps[0]) > 0.25
    margin = np.quantile(deviations, 0.95)
    est = sex_entry.equalized_odds_difference
    assert est.value == pytest.approx(abs(gaps[1]))
    assert (est.low, est.high) == pytest.approx((abs(gaps[1]) - margin, abs(gaps[1]) + margin), abs=1e-12)
    assert est.low > abs(gaps[0])                                  # around the FPR gap, not the TPR gap's
    named = sex != UNKNOWN
    assert est.value == pytest.approx(equalized_odds_difference(y[named], yhat[named], sensitive_features=sex[named]))
    assert sex_entry.equalized_odds_excluded_groups == []     # unknown is left out silently, not "excluded"


def test_multilabel_averages_labels_and_unrecorded_attributes_are_not_applicable():
    two = np.stack([Y, Y], axis=1)
    out = evaluate_fairness(kind="multilabel", val_labels=np.stack([VAL_Y, VAL_Y], 1),
                            val_scores=np.stack([VAL_S, VAL_S], 1), test_labels=two, test_scores=np.stack([S, S], 1),
                            attributes={"sex": SEX, "age": np.full(10, np.nan)}, n_resamples=50, seed=0)
    f = out.attributes["sex"].groups["female"]
    assert f.auroc.value == pytest.approx(3 / 4) and f.accuracy.value == pytest.approx(1 / 2)
    assert out.attributes["sex"].equalized_odds_difference.value == pytest.approx(1 / 2)
    assert out.attributes["age"].status == "n/a"


def test_a_multilabel_group_counts_each_finding_s_positives():
    """Before, only their sum over findings was kept, and the report read it as a count of images."""
    other = np.array([1, 1, 1, 1, 0, 0, 0, 0, 0, 0])        # every female image, no male image
    out = evaluate_fairness(kind="multilabel", val_labels=np.stack([VAL_Y, VAL_Y], 1),
                            val_scores=np.stack([VAL_S, VAL_S], 1), test_labels=np.stack([Y, other], 1),
                            test_scores=np.stack([S, S], 1), attributes={"sex": SEX}, n_resamples=20, seed=0)
    groups = out.attributes["sex"].groups
    assert (groups["female"].n_positive_by_label, groups["female"].n_positive) == ([2, 4], 6)
    assert (groups["male"].n_positive_by_label, groups["male"].n_positive) == ([3, 0], 3)
    assert _evaluate().attributes["sex"].groups["female"].n_positive_by_label is None


def test_demographic_parity_difference_is_undefined_with_one_named_group():
    """fairlearn's spread over a single named group (the rest unknown) is 0.0, which read as "no disparity".

    The ten images of the table above, images 3 and 8 of unknown sex: the attribute-level spreads compare nothing,
    and so does female's difference against its rest (the unknown are in no group's rest), while the unknown's own
    row, against the named images pooled, is defined and worked out by hand."""
    sex = np.where(np.isin(np.arange(10), [3, 8]), UNKNOWN, "female")
    out = evaluate_fairness(kind="binary", val_labels=VAL_Y, val_scores=VAL_S, test_labels=Y, test_scores=S,
                            attributes={"sex": sex}, n_resamples=50, seed=0)
    entry = out.attributes["sex"]
    assert entry.equalized_odds_difference.value is None
    assert entry.demographic_parity_difference.value is None      # before: 0.0
    for spread in (entry.demographic_parity_difference, entry.equalized_odds_difference):
        assert spread.low is None and spread.high is None and spread.undefined_redraws == 50   # nor 0-0 redraws
    female, unknown = entry.groups["female"], entry.groups[UNKNOWN]
    assert female.demographic_parity_difference.value is None and female.accuracy_parity_difference.value is None
    # yhat = 1 for images 0, 4, 5 of the 8 female images and for 3 of the unknown (3, 8)
    assert unknown.demographic_parity_difference.value == pytest.approx(1 / 2 - 3 / 8)
    # right: 7 of 8 female images (all but 2), none of the unknown (3 and 8 are both wrong)
    assert unknown.accuracy_parity_difference.value == pytest.approx(0 / 2 - 7 / 8)
    # female AUROC: positives .9, .8, .7 beat all 4 negatives {.2, .3, .1, .45}, .4 beats 3 of them: 15 / 16; the
    # unknown group (positive .35 below negative .6, AUROC 0) is no patient group and cannot be the worst
    assert entry.worst_group_auroc.group == "female"
    assert entry.worst_group_auroc.value == pytest.approx(15 / 16)


def _rare_negative_data():
    """Sixty female images with both classes well separated, and thirty male ones of which only two are negative and
    rank high: male is the worst AUROC group, and about one redraw in eight draws neither male negative."""
    rng = np.random.default_rng(11)
    sex = np.array(["female"] * 60 + ["male"] * 30)
    y = np.r_[np.tile([1, 0], 30), np.ones(28, int), [0, 0]]
    s = np.where(y == 1, rng.uniform(0.4, 1.0, y.size), rng.uniform(0.0, 0.6, y.size))
    s[-2:] = [0.9, 0.7]                          # the male negatives: male AUROC well below female's
    return y, s.round(3), sex


def test_a_redraw_in_which_a_compared_group_loses_a_class_is_undefined_for_the_attribute_summaries():
    """The worst group and equalised odds compare the groups defined on the whole test set. A redraw that draws no
    male negative has no male AUROC or FPR: it is undefined (left out, counted), as for the macro AUROC. Taking the
    lowest of the groups still defined would report female's AUROC for it, and lift the interval's top."""
    y, s, sex = _rare_negative_data()
    r, seed = 400, 2
    out = evaluate_fairness(kind="binary", val_labels=VAL_Y, val_scores=VAL_S, test_labels=y, test_scores=s,
                            attributes={"sex": sex}, n_resamples=r, seed=seed).attributes["sex"]
    yhat = (s >= 0.5).astype(int)
    point = {g: (yhat[(sex == g) & (y == 1)].mean(), yhat[(sex == g) & (y == 0)].mean()) for g in ("female", "male")}
    selection = {g: yhat[sex == g].mean() for g in ("female", "male")}
    worst, worst_of_kept, eo, dp = [], [], [], []
    for idx in bootstrap_indices(len(y), n_resamples=r, seed=seed):
        auroc, rates = {}, {}
        for g in ("female", "male"):
            k = idx[sex[idx] == g]
            pos, neg = k[y[k] == 1], k[y[k] == 0]
            auroc[g] = roc_auc_score(y[k], s[k]) if len(pos) and len(neg) else np.nan
            rates[g] = (yhat[pos].mean() if len(pos) else np.nan, yhat[neg].mean() if len(neg) else np.nan)
        worst.append(np.min(list(auroc.values())))                            # nan if either is nan
        worst_of_kept.append(np.nanmin(list(auroc.values())))
        # how far the redrawn female-minus-male differences stray from the whole test set's (TPR, FPR; selection)
        eo.append(np.max([abs(rates["female"][k] - rates["male"][k] - (point["female"][k] - point["male"][k]))
                          for k in (0, 1)]))
        chosen = {g: yhat[idx[sex[idx] == g]] for g in ("female", "male")}
        dp.append(abs(chosen["female"].mean() - chosen["male"].mean() - (selection["female"] - selection["male"]))
                  if all(map(len, chosen.values())) else np.nan)
    worst, eo = np.array(worst), np.array(eo)
    undefined = int(np.isnan(worst).sum())
    assert 20 < undefined < 100 and np.array_equal(np.isnan(worst), np.isnan(eo))
    est = out.worst_group_auroc
    assert est.group == "male" and est.undefined_redraws == undefined
    assert (est.low, est.high) == pytest.approx(percentile_interval(worst), abs=1e-12)
    assert percentile_interval(np.array(worst_of_kept))[1] > est.high + 0.01      # the old, lifted interval
    # a spread's interval: its value +- the 95% quantile of the redraws' largest deviation, clipped at 0
    eo_est = out.equalized_odds_difference
    margin = np.quantile(eo[np.isfinite(eo)], 0.95)
    expected = (max(0, eo_est.value - margin), min(1, eo_est.value + margin))
    assert (eo_est.low, eo_est.high) == pytest.approx(expected, abs=1e-12)
    assert eo_est.undefined_redraws == undefined                  # a group without a negative: no FPR, undefined
    dp_est = out.demographic_parity_difference                    # both groups in every redraw: always defined
    assert dp_est.undefined_redraws == int(np.isnan(dp).sum()) == 0
    margin = np.quantile(dp, 0.95)
    expected = (max(0, dp_est.value - margin), min(1, dp_est.value + margin))
    assert (dp_est.low, dp_est.high) == pytest.approx(expected, abs=1e-12)


def test_a_multiclass_group_s_auroc_is_scikit_learn_s_one_vs_rest_macro_auroc_on_the_group():
    """Each class against the rest, averaged: on a group with every class present, roc_auc_score(multi_class="ovr")."""
    rng = np.random.default_rng(3)
    y = np.tile([0, 1, 2], 20)
    logits = rng.normal(size=(60, 3)) + 1.5 * np.eye(3)[y]
    s = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    sex = np.where(np.arange(60) < 30, "female", "male")
    out = evaluate_fairness(kind="multiclass", val_labels=y, val_scores=s, test_labels=y, test_scores=s,
                            attributes={"sex": sex}, n_resamples=20, seed=0)
    for name, rows in (("female", slice(0, 30)), ("male", slice(30, 60))):
        expected = roc_auc_score(y[rows], s[rows], multi_class="ovr", average="macro")
        assert out.attributes["sex"].groups[name].auroc.value == pytest.approx(expected)
        assert 0.5 < expected < 1.0                                   # an informative model, so a flip would show


def test_unknown_sex_and_ages_beyond_the_last_bin_are_compared_with_nothing():
    """METHODS.md s.5: "for sex: female minus male"; the rest held the unknown too (female 100 % right, male 100 %,
    two unknown 0 %: female's accuracy parity 0.4, not 0). And an age of 101 made a group ">=100" that entered the
    spreads: one centenarian set the demographic parity spread over the age bins (0.667 where fairlearn over the
    bins of METHODS.md gives 0.167)."""
    y = np.array([1, 0, 1, 1, 0, 1, 1, 0])
    s = np.array([0.9, 0.1, 0.8, 0.9, 0.2, 0.7, 0.2, 0.9])        # images 6 and 7 wrong at 0.5
    sex = np.array(["female"] * 3 + ["male"] * 3 + [UNKNOWN] * 2)
    out = evaluate_fairness(kind="binary", val_labels=VAL_Y, val_scores=VAL_S, test_labels=y, test_scores=s,
                            attributes={"sex": sex}, n_resamples=20, seed=0).attributes["sex"]
    assert out.groups["female"].accuracy_parity_difference.value == 0.0
    # the reference heads the per-group tables, whose male column is male minus female
    assert out.reference == ("each sex minus the other: female minus male, and male minus female (unknown sex in "
                             "neither)")
    assert out.groups["male"].accuracy_parity_difference.value == -out.groups["female"].accuracy_parity_difference.value

    age = np.array([40, 45, 50, 55, 62, 64, 66, 101])
    s = np.array([0.9, 0.1, 0.8, 0.9, 0.2, 0.7, 0.9, 0.9])         # yhat 1, 0, 1, 1, 0, 1, 1, 1
    yhat = (s >= 0.5).astype(int)
    out = evaluate_fairness(kind="binary", val_labels=VAL_Y, val_scores=VAL_S, test_labels=y, test_scores=s,
                            attributes={"age": age}, n_resamples=20, seed=0).attributes["age"]
    binned = age_groups(age)
    named = binned != ">=100"
    assert list(out.groups) == ["[30,60)", "[60,70)", ">=100"]
    assert out.demographic_parity_difference.value == pytest.approx(
        demographic_parity_difference(y[named], yhat[named], sensitive_features=binned[named]))
    assert out.demographic_parity_difference.value == pytest.approx(3 / 4 - 2 / 3)
    # [30,60) against [60,70) alone: 3/4 - 2/3; the centenarian against the 7 images of the bins pooled
    assert out.groups["[30,60)"].demographic_parity_difference.value == pytest.approx(3 / 4 - 2 / 3)
    assert out.groups[">=100"].demographic_parity_difference.value == pytest.approx(1 - 5 / 7)


def test_bins_ending_below_100_compare_their_open_last_group_and_no_comparable_age_is_not_applicable():
    """With bins [0, 40, 65] the ages from 65 up are a real group (65 and over), compared as the others; and where no
    test age falls inside any bin, fairness by age is n/a rather than a crash (np.stack of no group)."""
    y = np.array([1, 0, 1, 1, 0, 1, 1, 0])
    s = np.array([0.9, 0.1, 0.8, 0.9, 0.2, 0.7, 0.9, 0.9])
    age = np.array([20, 30, 50, 55, 70, 75, 80, 90])
    kw = dict(kind="binary", val_labels=VAL_Y, val_scores=VAL_S, test_labels=y, test_scores=s, n_resamples=20, seed=0)
    out = evaluate_fairness(attributes={"age": age}, age_bins=(0, 40, 65), **kw).attributes["age"]
    yhat = (s >= 0.5).astype(int)
    assert out.demographic_parity_difference.value == pytest.approx(
        demographic_parity_difference(y, yhat, sensitive_features=age_groups(age, bins=(0, 40, 65))))
    assert out.groups[">=65"].accuracy_parity_difference.value is not None
    none = evaluate_fairness(attributes={"age": np.full(8, 120.0)}, **kw).attributes["age"]
    assert none.status == "n/a" and "compared" in none.reason


def test_multilabel_group_accuracy_and_parities_average_the_findings():
    """Two findings decided right at different rates and with different selection gaps by sex: a group's accuracy is
    the mean over its images of the share of findings right (= the mean of the per-finding accuracies, not the share
    of images with every finding right), and the attribute's spreads are the mean over findings of fairlearn's."""
    rng = np.random.default_rng(6)
    n = 80
    sex = np.where(np.arange(n) < 35, "female", "male")
    y = (rng.random((n, 2)) < [0.4, 0.5]).astype(int)
    s = np.clip(np.c_[0.4 * y[:, 0] + 0.6 * rng.random(n),
                      0.3 * y[:, 1] + 0.5 * rng.random(n) + 0.25 * (sex == "male")], 0, 1).round(2)
    val_y, val_s = y[:40], s[:40]
    out = evaluate_fairness(kind="multilabel", val_labels=val_y, val_scores=val_s, test_labels=y, test_scores=s,
                            attributes={"sex": sex}, n_resamples=20, seed=0).attributes["sex"]
    yhat = (s >= [youden_threshold(val_y[:, j], val_s[:, j]) for j in range(2)]).astype(int)
    right = yhat == y                                                    # [n, 2]
    assert right.all(axis=1).mean() < right.mean() - 0.05
    for g in ("female", "male"):
        assert out.groups[g].accuracy.value == pytest.approx(right[sex == g].mean())
    dp = [demographic_parity_difference(y[:, j], yhat[:, j], sensitive_features=sex) for j in range(2)]
    eo = [equalized_odds_difference(y[:, j], yhat[:, j], sensitive_features=sex) for j in range(2)]
    assert abs(dp[0] - dp[1]) > 0.3 and abs(eo[0] - eo[1]) > 0.3         # mean, largest and either one differ
    assert out.demographic_parity_difference.value == pytest.approx(np.mean(dp))
    assert out.equalized_odds_difference.value == pytest.approx(np.mean(eo))


def test_a_multiclass_group_s_accuracy_is_its_share_of_argmax_right():
    y = np.array([0, 1, 2, 0, 1, 2])
    s = np.array([[0.6, 0.3, 0.1],    # female, right
                  [0.5, 0.4, 0.1],    # female, wrong (0)
                  [0.1, 0.2, 0.7],    # female, right
                  [0.2, 0.7, 0.1],    # male, wrong (1)
                  [0.1, 0.8, 0.1],    # male, right
                  [0.3, 0.5, 0.2]])   # male, wrong (1)
    sex = np.array(["female"] * 3 + ["male"] * 3)
    groups = evaluate_fairness(kind="multiclass", val_labels=y, val_scores=s, test_labels=y, test_scores=s,
                               attributes={"sex": sex}, n_resamples=10, seed=0).attributes["sex"].groups
    assert groups["female"].accuracy.value == pytest.approx(2 / 3)
    assert groups["male"].accuracy.value == pytest.approx(1 / 3)
    assert groups["female"].accuracy_parity_difference.value == pytest.approx(2 / 3 - 1 / 3)


def test_equalized_odds_compares_only_the_groups_with_both_classes():
    """Groups a and b have both classes and are decided perfectly (TPR 1, FPR 0 in each: equalised odds 0); group c
    holds negatives only, all called positive (FPR 1, no TPR). Counting c, as fairlearn does when given it, would
    report 1; it is left out and named. Beside a single group with both classes nothing is compared: undefined, not
    the 0 of a spread over one group."""
    y = np.array([1, 0, 1, 0, 0, 0])
    s = np.array([0.9, 0.1, 0.8, 0.2, 0.7, 0.6])
    kw = dict(kind="binary", val_labels=VAL_Y, val_scores=VAL_S, test_labels=y, test_scores=s, n_resamples=20, seed=0)
    three = np.array(["a", "a", "b", "b", "c", "c"])
    entry = evaluate_fairness(attributes={"sex": three}, **kw).attributes["sex"]
    assert entry.equalized_odds_difference.value == 0.0
    assert entry.equalized_odds_excluded_groups == ["c"]
    assert equalized_odds_difference(y, (s >= 0.5).astype(int), sensitive_features=three) == 1.0
    one = np.array(["a", "a", "a", "a", "c", "c"])
    spread = evaluate_fairness(attributes={"sex": one}, **kw).attributes["sex"].equalized_odds_difference
    assert (spread.value, spread.low, spread.high) == (None, None, None)


def test_a_finding_with_one_comparable_group_is_left_out_of_every_equalized_odds_redraw():
    """Finding 0 has both classes in both sexes; finding 1 has positives among the women only, so equalised odds
    compares nothing for it. The attribute's value is finding 0's alone, on the whole test set and in every redraw:
    its interval is that of finding 0's max(|TPR gap|, |FPR gap|), not undefined because of finding 1."""
    rng = np.random.default_rng(2)
    n, r, seed = 60, 100, 1
    sex = np.where(np.arange(n) % 2 == 0, "female", "male")
    y = np.c_[rng.integers(0, 2, n), np.where(sex == "female", rng.integers(0, 2, n), 0)]
    s = np.clip(0.3 * y + 0.7 * rng.random((n, 2)), 0, 1)
    est = evaluate_fairness(kind="multilabel", val_labels=np.c_[VAL_Y, VAL_Y], val_scores=np.c_[VAL_S, VAL_S],
                            test_labels=y, test_scores=s, attributes={"sex": sex}, n_resamples=r,
                            seed=seed).attributes["sex"].equalized_odds_difference
    yhat = (s[:, 0] >= 0.5).astype(int)
    point = {g: (yhat[(sex == g) & (y[:, 0] == 1)].mean(), yhat[(sex == g) & (y[:, 0] == 0)].mean())
             for g in ("female", "male")}
    eo = []
    for idx in bootstrap_indices(n, n_resamples=r, seed=seed):
        rates = {}
        for g in ("female", "male"):
            k = idx[sex[idx] == g]
            pos, neg = k[y[k, 0] == 1], k[y[k, 0] == 0]
            rates[g] = (yhat[pos].mean() if len(pos) else np.nan, yhat[neg].mean() if len(neg) else np.nan)
        eo.append(np.max([abs(rates["female"][k] - rates["male"][k] - (point["female"][k] - point["male"][k]))
                          for k in (0, 1)]))
    eo = np.array(eo)
    assert est.value == pytest.approx(equalized_odds_difference(y[:, 0], yhat, sensitive_features=sex))
    assert est.undefined_redraws == int(np.isnan(eo).sum())
    margin = np.quantile(eo[np.isfinite(eo)], 0.95)
    assert (est.low, est.high) == pytest.approx((max(0, est.value - margin), min(1, est.value + margin)), abs=1e-12)


def test_a_group_s_demographic_parity_interval_is_that_of_its_selection_gap_over_the_same_redraws():
    rng = np.random.default_rng(1)
    n, r, seed = 70, 150, 4
    sex = rng.choice(["female", "male"], n)
    y = rng.integers(0, 2, n)
    s = np.clip(0.3 * y + 0.7 * rng.random(n) + 0.15 * (sex == "male"), 0, 1)
    female = evaluate_fairness(kind="binary", val_labels=VAL_Y, val_scores=VAL_S, test_labels=y, test_scores=s,
                               attributes={"sex": sex}, n_resamples=r, seed=seed).attributes["sex"].groups["female"]
    yhat = (s >= 0.5).astype(float)
    gaps = [yhat[idx[sex[idx] == "female"]].mean() - yhat[idx[sex[idx] == "male"]].mean()
            for idx in bootstrap_indices(n, n_resamples=r, seed=seed)]
    est = female.demographic_parity_difference
    assert est.value == pytest.approx(yhat[sex == "female"].mean() - yhat[sex == "male"].mean())
    assert (est.low, est.high) == pytest.approx(percentile_interval(np.array(gaps)), abs=1e-12)


def test_fairness_intervals_are_at_the_confidence_asked_for(hand_bca):
    """A study that asks for 80% intervals gets the 80% interval of the redraws, not the 95% one."""
    kw = dict(kind="binary", val_labels=VAL_Y, val_scores=VAL_S, test_labels=Y, test_scores=S,
              attributes={"sex": SEX}, n_resamples=200, seed=0)
    correct = np.array([1, 1, 0, 0, 1, 1, 1, 1, 0, 1])              # the "right" column of the table
    accuracies = np.array([correct[idx[SEX[idx] == "male"]].mean()
                           for idx in bootstrap_indices(10, n_resamples=200, seed=0)])
    assert percentile_interval(accuracies, confidence=0.8) != percentile_interval(accuracies)
    for confidence in (0.8, 0.95):
        out = evaluate_fairness(interval="bca", confidence=confidence, **kw)
        male = out.attributes["sex"].groups["male"]
        assert out.confidence == confidence
        assert (male.accuracy.low, male.accuracy.high) == pytest.approx(
            hand_bca(lambda i: correct[i][SEX[i] == "male"].mean(), accuracies, np.arange(10),
                     confidence=confidence), abs=1e-12)


def test_the_results_columns_carry_each_number_of_the_fairness_block():
    block = _evaluate(n_resamples=50)
    entry, row = block.attributes["sex"], fairness_columns(block)
    assert (row["fairness[sex=female]_n"], row["fairness[sex=male]_n"]) == (4, 6)
    # hand values of test_sex_groups_by_hand
    assert row["fairness[sex=female]_accuracy_parity_difference"] == pytest.approx(2 / 4 - 5 / 6)
    assert row["fairness[sex=female]_demographic_parity_difference"] == pytest.approx(2 / 4 - 2 / 6)
    assert row["fairness[sex]_worst_group"] == "female"
    assert row["fairness[sex]_worst_group_auroc"] == pytest.approx(0.75)
    assert row["fairness[sex]_equalized_odds_difference"] == pytest.approx(1 / 2)
    for group, g in entry.groups.items():
        for metric in ("auroc", "accuracy", "accuracy_parity_difference", "demographic_parity_difference"):
            est, key = getattr(g, metric), f"fairness[sex={group}]_{metric}"
            assert (row[key], row[f"{key}_low"], row[f"{key}_high"]) == (est.value, est.low, est.high)
    for metric in ("worst_group_auroc", "demographic_parity_difference", "equalized_odds_difference"):
        est, key = getattr(entry, metric), f"fairness[sex]_{metric}"
        assert (row[key], row[f"{key}_low"], row[f"{key}_high"]) == (est.value, est.low, est.high)
        assert est.low < est.high


def test_the_groups_left_out_of_equalized_odds_are_listed_in_order():
    """Sorted, so that results.csv does not change from run to run with the order of a set of strings. Only
    [30,60) and [60,70) hold both classes here."""
    y = np.array([1, 1, 0, 1, 0, 1, 0, 0, 1, 1])
    s = np.linspace(0.1, 0.9, 10)
    age = np.array([5, 15, 35, 45, 61, 62, 71, 72, 81, 82])
    block = evaluate_fairness(kind="binary", val_labels=VAL_Y, val_scores=VAL_S, test_labels=y, test_scores=s,
                              attributes={"age": age}, n_resamples=20, seed=0)
    assert block.attributes["age"].equalized_odds_excluded_groups == ["[0,30)", "[70,80)", "[80,100)"]
    assert fairness_columns(block)["fairness[age]_equalized_odds_excluded"] == "[0,30); [70,80); [80,100)"


def test_sex_groups_read_none_as_unknown_and_list_the_sexes_alphabetically():
    assert sex_groups(["None", " none ", " Female "]).tolist() == [UNKNOWN, UNKNOWN, "female"]
    assert _group_order(np.array(["male", UNKNOWN, "female", "male"]), "sex", AGE_BINS) == ["female", "male", UNKNOWN]
    assert list(_evaluate(n_resamples=10).attributes["sex"].groups) == ["female", "male"]


@pytest.mark.parametrize("bins", [(0, 30, 30, 60), (0, 60, 30), (50,), (-10, 30)])
def test_age_bins_that_are_not_increasing_edges_from_0_are_refused(bins):
    """A first edge below 0 would count a negative age, which the groups call unknown, as known."""
    with pytest.raises(ValueError, match="increasing edges"):
        age_groups([40.0], bins=bins)


def test_the_groups_left_out_of_equalised_odds_are_listed_in_the_groups_order():
    """Before, sorted as text: "[10,40)" came before "[5,10)" in the report and results.csv."""
    labels = np.array([1, 1, 0, 0, 1, 0, 1, 0, 1, 0])
    scores = np.array([0.9, 0.8, 0.2, 0.1, 0.7, 0.3, 0.6, 0.4, 0.95, 0.05])
    age = np.array([7, 8, 12, 13, 50, 51, 60, 61, 3, 4], dtype=float)    # [5,10) positives only, [10,40) negatives
    fairness = evaluate_fairness(kind="binary", val_labels=labels, val_scores=scores, test_labels=labels,
                                 test_scores=scores, attributes={"age": age}, age_bins=[0, 5, 10, 40, 100],
                                 n_resamples=20)
    assert list(fairness.attributes["age"].groups)[:3] == ["[0,5)", "[5,10)", "[10,40)"]
    assert fairness.attributes["age"].equalized_odds_excluded_groups == ["[5,10)", "[10,40)"]


def test_an_attribute_not_recorded_once_per_test_image_is_refused_by_name():
    with pytest.raises(ValueError, match="attribute 'sex' has 9 values for 10 test images"):
        evaluate_fairness(kind="binary", val_labels=VAL_Y, val_scores=VAL_S, test_labels=Y, test_scores=S,
                          attributes={"sex": SEX[:-1]}, n_resamples=10, seed=0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 4), st.sampled_from(["female", "male", "x", ""])),
                min_size=2, max_size=25))
def test_parities_on_small_groups_equal_hand_counts_and_fairlearn(images):
    """Groups of one image, a group without a class, unknown sex: each group's accuracy parity is its accuracy minus
    the pooled accuracy of the other named groups (each weighted by its size), its demographic parity likewise with
    decisions, and the attribute's spreads are fairlearn's over the named groups (equalised odds over those with
    both classes)."""
    y = np.array([i[0] for i in images])
    s = np.array([i[1] / 4 for i in images])
    sex = np.array([i[2] for i in images])
    entry = evaluate_fairness(kind="binary", val_labels=VAL_Y, val_scores=VAL_S, test_labels=y, test_scores=s,
                              attributes={"sex": sex}, n_resamples=3, seed=0).attributes["sex"]
    groups = np.where(sex == "", UNKNOWN, sex)
    named = sorted(set(groups.tolist()) - {UNKNOWN})
    if not named:
        assert entry.status == "n/a"
        return
    yhat = (s >= 0.5).astype(int)
    right = (yhat == y).astype(float)
    for g, got in entry.groups.items():
        others = [h for h in named if h != g]
        if not others:
            assert got.accuracy_parity_difference.value is None
            continue
        rest_right = sum(right[groups == h].sum() for h in others) / sum((groups == h).sum() for h in others)
        rest_called = sum(yhat[groups == h].sum() for h in others) / sum((groups == h).sum() for h in others)
        assert got.accuracy_parity_difference.value == pytest.approx(right[groups == g].mean() - rest_right)
        assert got.demographic_parity_difference.value == pytest.approx(yhat[groups == g].mean() - rest_called)
    if len(named) < 2:
        assert entry.demographic_parity_difference.value is None
        return
    compared = groups != UNKNOWN
    assert entry.demographic_parity_difference.value == pytest.approx(
        demographic_parity_difference(y[compared], yhat[compared], sensitive_features=groups[compared]))
    both = [g for g in named if len(set(y[groups == g].tolist())) == 2]
    if len(both) < 2:
        assert entry.equalized_odds_difference.value is None
    else:
        keep = np.isin(groups, both)
        assert entry.equalized_odds_difference.value == pytest.approx(
            equalized_odds_difference(y[keep], yhat[keep], sensitive_features=groups[keep]))


def test_the_spread_intervals_hold_a_true_spread_of_zero_about_as_often_as_they_claim():
    """Two groups scored alike: the true demographic parity and equalised-odds spreads are 0. A percentile interval
    of the redrawn spreads (each a largest minus smallest rate, so above 0 in almost every redraw) held 0 in none of
    40 test sets; the simultaneous margin holds it in about 95%. Pass mark: the count that a coverage of 0.90 reaches
    but for a chance of 1e-6 (binomial), so a correct interval cannot fail it by bad luck and 0% cannot pass."""
    from scipy.stats import binom

    rng = np.random.default_rng(20261206)
    reps, n = 40, 200
    sex = np.where(np.arange(n) < 40, "female", "male")
    held = {"demographic_parity_difference": 0, "equalized_odds_difference": 0}
    for rep in range(reps):
        y = (rng.random(n) < 0.4).astype(int)
        s = rng.normal(size=n) + 1.5 * y
        out = evaluate_fairness(kind="binary", val_labels=[0, 1], val_scores=[-0.25, 0.75], test_labels=y,
                                test_scores=s, attributes={"sex": sex}, n_resamples=200, seed=rep).attributes["sex"]
        for key in held:
            est = getattr(out, key)
            held[key] += est.low <= 0.0 <= est.high
    floor = binom.ppf(1e-6, reps, 0.90)
    assert all(count >= floor for count in held.values()), (held, floor)


def test_the_released_definition_of_the_spreads_band_names_no_level_but_the_record_s_own():
    """A study at 90% drew its spreads' bands from the 90% quantile while the run.json's definition said 95%."""
    y, s, sex = _fpr_gap_data()
    out = evaluate_fairness(kind="binary", val_labels=VAL_Y, val_scores=VAL_S, test_labels=y, test_scores=s,
                            attributes={"sex": sex}, n_resamples=20, seed=0, confidence=0.9)
    assert out.confidence == 0.9
    assert "%" not in out.definitions["interval"] and "confidence" in out.definitions["interval"]


def test_the_recorded_definitions_describe_the_task_s_own_decisions():
    """A multiclass run.json's fairness block said its decisions used "Youden's J on the validation split" and
    defined demographic parity as P(yhat=1 | group), while its thresholds were null (argmax) and both spreads n/a;
    a multilabel one did not say that its decisions, accuracy and spreads are per finding, averaged."""
    rng = np.random.default_rng(4)
    y = np.tile([0, 1, 2], 20)
    s = rng.dirichlet(np.ones(3), size=60)
    sex = np.where(np.arange(60) < 30, "female", "male")
    multiclass = evaluate_fairness(kind="multiclass", val_labels=y, val_scores=s, test_labels=y, test_scores=s,
                                   attributes={"sex": sex}, n_resamples=20, seed=0).definitions
    assert "Youden" not in multiclass["threshold"] and "argmax" in multiclass["threshold"]
    for key in ("demographic_parity_difference", "equalized_odds_difference"):
        assert "yhat=1" not in multiclass[key] and "multiclass" in multiclass[key]
    ym = np.stack([Y, 1 - Y], 1)
    multilabel = evaluate_fairness(kind="multilabel", val_labels=np.stack([VAL_Y, 1 - VAL_Y], 1),
                                   val_scores=np.stack([VAL_S, 1 - VAL_S], 1), test_labels=ym,
                                   test_scores=np.stack([S, 1 - S], 1), attributes={"sex": SEX}, n_resamples=20,
                                   seed=0).definitions
    assert "each finding" in multilabel["threshold"]
    for key in ("accuracy_parity_difference", "demographic_parity_difference", "equalized_odds_difference"):
        assert "findings" in multilabel[key]
    binary = _evaluate().definitions
    assert "Youden" in binary["threshold"] and "findings" not in binary["demographic_parity_difference"]
