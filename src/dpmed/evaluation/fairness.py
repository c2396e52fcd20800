"""Fairness of one model across patient groups: pure functions of its saved predictions (METHODS.md sec. 5).

Why these numbers (003_9a91354dc2d7e2df.txt, "Diagnostic accuracy is correlated with patient age"): that paper asks
whether DP-SGD makes a chest X-ray model less fair to patient groups, and reads it from per-group AUROC and a
"statistical parity difference" it defines as P(correct | group) - P(correct | rest). That is a difference of
*accuracy*, not the textbook statistical (demographic) parity of Dwork et al. 2012, P(yhat = 1 | group) -
P(yhat = 1 | rest); both are reported here under their own names so neither is mistaken for the other:

* ``accuracy_parity_difference``: the 003 quantity. The group against the patients of the other compared groups
  pooled (the rest weighted by size); for sex that is female minus male. Positive: the group is served better.
* ``demographic_parity_difference``: P(yhat = 1 | group) - P(yhat = 1 | rest) per group, and per attribute
  fairlearn's ``demographic_parity_difference`` (largest minus smallest selection rate over the groups).
* ``equalized_odds_difference``: fairlearn's (Hardt et al. 2016): the larger of the spread of true-positive rates and
  the spread of false-positive rates over the groups.
* ``worst_group_auroc``: the lowest group AUROC (Sagawa et al. 2020's worst-group view): a model can keep its
  overall AUROC while one group loses.

Decisions (yhat) use the Youden threshold chosen on the **validation** split (METHODS.md sec. 4), never on test.
Groups: sex, and age bins [0,30), [30,60), [60,70), [70,80), [80,100) (003's Table 3); a missing value is its own
group, "unknown", and so is an age at or above a last edge of 100 or more (">=100"; study bins that end lower make
their last group an open one, "65 and over", which is compared). Both get their own rows but are compared with
nothing: they are in no other group's rest and in no attribute-level summary, since they are not groups of
METHODS.md s.5 and a handful of such images (unrecorded sex, a centenarian) would otherwise decide the spread, the
worst group, or what "female minus male" means. Every number has an interval at the study's confidence level
(``evaluation.confidence``, 95% by default; percentile, METHODS.md sec. 4;
with ``interval="bca"`` a group's AUROC and accuracy BCa, :func:`~dpmed.evaluation.bootstrap.bca_interval`, while the
differences and the worst group stay percentile; the two spreads a simultaneous band, :func:`_spread_estimate`) over
the same seeded redraws of the whole test set that the utility metrics use (:mod:`dpmed.evaluation.weighted`; by
patient where patient ids are known): a group's metric in a redraw is computed on the redrawn images that belong to
it, so groups and arms are paired.
Multilabel tasks average the per-label values (003's "average over all labels"); multiclass tasks have no single
yhat = 1, so the two parity-of-decisions metrics are n/a there.
"""

from __future__ import annotations

import warnings
from typing import Callable, Mapping, Sequence

import numpy as np

from dpmed.evaluation.bootstrap import INTERVALS, Interval, Redraws, bootstrap_redraws
from dpmed.evaluation.summaries import AttributeFairness, Fairness, GroupFairness, Spread, WorstGroup
from dpmed.evaluation.utility import youden_threshold
from dpmed.evaluation.weighted import (as_label_columns, estimate, evaluate_jackknife, redraw_counts,
                                       weighted_macro_auroc, weighted_mean)

__all__ = ["AGE_BINS", "UNKNOWN", "GROUPINGS", "group_labels", "named_groups", "age_groups", "sex_groups", "decisions",
           "evaluate_fairness", "uncompared_groups", "attribute_fairness", "fairness_columns", "DEFINITIONS",
           "task_definitions"]

AGE_BINS: tuple[float, ...] = (0.0, 30.0, 60.0, 70.0, 80.0, 100.0)
UNKNOWN = "unknown"

DEFINITIONS = {
    "accuracy_parity_difference": ("P(correct | group) - P(correct | rest), the rest pooled (size-weighted); the "
                                   "'statistical parity difference' of Tayebi Arasteh, Ziller et al. 2023, which is "
                                   "accuracy parity; for sex: female minus male"),
    "demographic_parity_difference": ("per group: P(yhat=1 | group) - P(yhat=1 | rest); per attribute: fairlearn "
                                      "demographic_parity_difference (max - min selection rate over groups)"),
    "equalized_odds_difference": ("fairlearn equalized_odds_difference: max(TPR spread, FPR spread) over the groups "
                                  "in which both classes occur"),
    "worst_group_auroc": "the lowest AUROC over the groups in which it is defined",
    "threshold": "Youden's J on the validation split, applied unchanged to test",
    "interval": ("percentile bootstrap over seeded redraws of the whole test set (of its patients, each with all "
                 "of their images, where patient ids are known), paired with the utility metrics; the two spreads "
                 "(demographic parity, equalised odds) instead take their value +- the quantile, at the confidence "
                 "level, of the redraws' largest deviation of a pairwise group difference from its value, clipped "
                 "to [0, 1]; "
                 "a redraw in which a group that a summary compares draws none of its images, or lacks a class the "
                 "summary needs (AUROC and equalised odds need both), is undefined for that summary and left out; "
                 "each attribute-level summary counts them (undefined_redraws)"),
}
# What the "interval" definition opens with where the study asks for BCa (evaluation.interval: bca).
_BCA_INTERVAL = ("bootstrap over seeded redraws of the whole test set (of its patients, each with all "
                 "of their images, where patient ids are known), paired with the utility metrics: BCa for a "
                 "group's AUROC and accuracy (acceleration from a jackknife of at most 200 groups of the same "
                 "units), percentile for the parity differences and the worst group; the two spreads ")


def _interval_definitions(interval: Interval) -> dict[str, str]:
    """The fairness block's definitions (:data:`DEFINITIONS`, which are the percentile interval's), its "interval"
    naming the interval a study with ``interval`` gives the groups."""
    if interval == "percentile":
        return dict(DEFINITIONS)
    rest = DEFINITIONS["interval"].split("; the two spreads ", 1)[1]
    return {**DEFINITIONS, "interval": _BCA_INTERVAL + rest}


# What differs where a task decides otherwise than by one threshold (`decisions`): a multiclass run decides by argmax,
# so it has no yhat = 1 and neither spread; a multilabel run decides each finding at its own threshold and averages.
_TASK_DEFINITIONS: Mapping[str, Mapping[str, str]] = {
    "multiclass": {
        "accuracy_parity_difference": DEFINITIONS["accuracy_parity_difference"] + "; correct: the argmax is the class",
        "demographic_parity_difference": "n/a for a multiclass task: its argmax decisions have no one positive class",
        "equalized_odds_difference": "n/a for a multiclass task: its argmax decisions have no one positive class",
        "threshold": "none: each test image is decided as the class with the highest score (argmax)",
    },
    "multilabel": {
        "accuracy_parity_difference": (DEFINITIONS["accuracy_parity_difference"] + "; correct: the share of an "
                                       "image's findings decided right, so the mean over the findings"),
        "demographic_parity_difference": DEFINITIONS["demographic_parity_difference"] + ", each the mean over the "
                                                                                        "findings",
        "equalized_odds_difference": DEFINITIONS["equalized_odds_difference"] + ", the mean over the findings",
        "threshold": "each finding's own Youden's J on the validation split, applied unchanged to test",
    },
}


def task_definitions(kind: str, interval: Interval = "percentile") -> dict[str, str]:
    """The definitions a run.json's fairness block carries, as its task decides (`decisions`) and with the interval
    the study gives the groups (``interval``)."""
    return {**_interval_definitions(interval), **_TASK_DEFINITIONS.get(kind, {})}


# ---------------------------------------------------------------------------------------------------------- groups


def _bin_label(low: float, high: float) -> str:
    return f"[{low:g},{high:g})"


def _age_labels(age_bins: Sequence[float] | np.ndarray) -> tuple[str, list[str], str]:
    """(the group below the first edge, each bin's, the group from the last edge on) of the edges ``age_bins``: the
    names the groups get, the report names and the comparisons leave out, made in one place."""
    edges = [float(b) for b in age_bins]
    return f"<{edges[0]:g}", [_bin_label(lo, hi) for lo, hi in zip(edges[:-1], edges[1:])], f">={edges[-1]:g}"


def age_groups(age, *, bins: Sequence[float] = AGE_BINS) -> np.ndarray:
    """Age bins as strings: "[0,30)", ...; nan or a negative age (unknown) -> "unknown"; at or above the last edge
    -> ">=100"; a known age below the first edge (bins that start above 0, e.g. at 18) -> "<18", a group of its own,
    not an unknown age."""
    edges = np.asarray(bins, dtype=np.float64)
    if edges.ndim != 1 or edges.size < 2 or np.any(np.diff(edges) <= 0) or edges[0] < 0:
        raise ValueError(f"age bins must be increasing edges (at least two) from 0 or above, got {list(bins)}")
    a = np.asarray(age, dtype=np.float64)
    out = np.full(a.shape, UNKNOWN, dtype=object)
    known = np.isfinite(a) & (a >= edges[0])
    which = np.searchsorted(edges, a[known], side="right") - 1                # bin index, len(edges)-1 = overflow
    below, each, above = _age_labels(edges)
    names = np.array(each + [above], dtype=object)
    out[known] = names[which]
    out[np.isfinite(a) & (a >= 0) & (a < edges[0])] = below
    return out.astype(str)


def sex_groups(sex) -> np.ndarray:
    """"female", "male" as recorded; empty, "nan", "none" or missing -> "unknown"."""
    values = np.asarray(sex).astype(str)
    lowered = np.char.lower(np.char.strip(values))
    return np.where(np.isin(lowered, ["", "nan", "none", UNKNOWN]), UNKNOWN, lowered).astype(str)


# attribute name -> grouping of its per-image values. An ImageSet records sex and age (dpmed.data.Sample), so those
# are the attributes a study can name; the study schema holds the same two names.
GROUPINGS: Mapping[str, Callable[..., np.ndarray]] = {"sex": sex_groups, "age": age_groups}


def named_groups(attribute: str, age_bins: Sequence[float] = AGE_BINS) -> tuple[str, ...]:
    """The groups the study names for ``attribute``, whether or not a test image falls in them: each age bin (with
    the group below a first edge above 0, and the open last group of bins that end below 100, both compared like the
    others: `age_groups`, `uncompared_groups`), or female and male; the report names those no test image falls in,
    which have no numbers (a group is measured only where the test set holds it)."""
    if attribute == "age":
        below, bins, above = _age_labels(age_bins)
        return ((below,) if float(age_bins[0]) > 0 else ()) + tuple(bins) + (
            () if above in uncompared_groups("age", age_bins) else (above,))
    return ("female", "male")


def group_labels(attribute: str, values, *, age_bins: Sequence[float] = AGE_BINS) -> np.ndarray:
    """The group of every image for ``attribute`` (str [n])."""
    if attribute not in GROUPINGS:
        raise ValueError(f"no grouping for attribute {attribute!r}; known: {', '.join(GROUPINGS)}")
    if attribute == "age":
        return age_groups(values, bins=age_bins)
    return GROUPINGS[attribute](values)


def _group_order(groups: np.ndarray, attribute: str, age_bins: Sequence[float]) -> list[str]:
    """Age bins in age order, other groups alphabetically; "unknown" last."""
    present = set(np.unique(groups).tolist())
    if attribute == "age":
        below, bins, above = _age_labels(age_bins)
        order = [below] + bins + [above]
        named = [g for g in order if g in present]
    else:
        named = sorted(present - {UNKNOWN})
    return named + ([UNKNOWN] if UNKNOWN in present else [])


# ------------------------------------------------------------------------------------------------------- decisions


def decisions(kind: str, val_labels, val_scores, test_labels, test_scores):
    """(y [n, L] 0/1, s [n, L], correct float [n], selected 0/1 [n, L] or None, thresholds list or None).

    binary and multilabel: yhat = score >= the validation Youden threshold of that label; ``correct`` is the share
    of labels decided right (the utility module's accuracy). multiclass: argmax; ``selected`` is None.
    """
    y, s = as_label_columns(kind, test_labels, test_scores)
    if kind == "multiclass":
        correct = (np.argmax(s, axis=1) == np.asarray(test_labels)).astype(np.float64)
        return y, s, correct, None, None
    yv, sv = as_label_columns(kind, val_labels, val_scores)
    thresholds = [youden_threshold(yv[:, j], sv[:, j]) for j in range(y.shape[1])]   # validation, never test
    selected = (s >= np.asarray(thresholds)[None, :]).astype(np.int64)               # [n, L]
    correct = (selected == y).mean(axis=1)
    return y, s, correct, selected, [float(t) for t in thresholds]


def _nanmean(a: np.ndarray) -> np.ndarray:
    """The mean over axis 1 (the labels, [R, L] -> [R]), ignoring nan."""
    with warnings.catch_warnings():      # an all-nan slice is an undefined redraw: nan, said by the caller
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(a, axis=1)


def _spread(rates: np.ndarray, compared: np.ndarray) -> np.ndarray:
    """max - min over the groups ``compared`` (bool [..., G], broadcast against ``rates`` [R, ..., G]); nan where
    fewer than two groups are compared, and in a redraw where a compared group's rate is undefined (nan). Dropping
    that group instead would make the redraw a spread over fewer groups, another statistic than the point value's
    (as the macro AUROC of :mod:`dpmed.evaluation.utility` treats a redraw that lost a label)."""
    compared = np.broadcast_to(compared, rates.shape)
    spread = (np.where(compared, rates, -np.inf).max(axis=-1) - np.where(compared, rates, np.inf).min(axis=-1))
    return np.where(compared.sum(axis=-1) >= 2, spread, np.nan)          # max/min carry a compared group's nan


def _group_stats(y, s, correct, selected, member, w_all, compared) -> dict[str, np.ndarray]:
    """Per-redraw statistics of one group (weights ``w_all`` [R, n]; member bool [n]): float [R] or [R, L]. Its
    rest: the images of the compared groups (bool [n]) outside it."""
    rest = compared & ~member
    w, wr = w_all[:, member], w_all[:, rest]
    out = {
        "auroc": weighted_macro_auroc(y[member], s[member], w),
        "accuracy": weighted_mean(correct[member], w),
        "accuracy_rest": weighted_mean(correct[rest], wr) if rest.any() else np.full(w_all.shape[0], np.nan),
    }
    if selected is not None:
        cols = range(y.shape[1])
        out["selection"] = np.stack([weighted_mean(selected[member, j], w) for j in cols], axis=1)        # [R, L]
        out["selection_rest"] = np.stack(
            [weighted_mean(selected[rest, j], wr) if rest.any() else np.full(w.shape[0], np.nan) for j in cols], axis=1)
        out["tpr"] = np.stack([weighted_mean(selected[member & (y[:, j] == 1), j], w_all[:, member & (y[:, j] == 1)])
                               for j in cols], axis=1)
        out["fpr"] = np.stack([weighted_mean(selected[member & (y[:, j] == 0), j], w_all[:, member & (y[:, j] == 0)])
                               for j in cols], axis=1)
    return out


def _fairlearn_differences(y, selected, groups, eo_groups) -> tuple[float, float]:
    """Point values by fairlearn itself, averaged over labels: (demographic parity diff, equalised odds diff)."""
    from fairlearn.metrics import demographic_parity_difference, equalized_odds_difference

    dp, eo = [], []
    if len(np.unique(groups)) < 2:       # a spread over one group compares nothing: undefined, as in the redraws
        return float("nan"), float("nan")
    for j in range(y.shape[1]):
        dp.append(demographic_parity_difference(y[:, j], selected[:, j], sensitive_features=groups))
        keep = np.isin(groups, eo_groups[j])
        if len(eo_groups[j]) >= 2:
            eo.append(equalized_odds_difference(y[keep, j], selected[keep, j], sensitive_features=groups[keep]))
    return float(np.mean(dp)), (float(np.mean(eo)) if eo else float("nan"))


def attribute_fairness(*, y: np.ndarray, s: np.ndarray, correct: np.ndarray, selected: np.ndarray | None,
                       groups: np.ndarray, order: Sequence[str], redraws: Redraws | np.ndarray,
                       confidence: float, uncompared: Sequence[str] = (UNKNOWN,),
                       interval: Interval = "percentile") -> AttributeFairness:
    """Fairness across the groups of one attribute (labels/decisions as made by :func:`decisions`).

    ``redraws``: the study's bootstrap redraws of the test set (:class:`~dpmed.evaluation.bootstrap.Redraws`, or
    image positions int [R, n]). Returns per group ``n``, ``auroc``,
    ``accuracy``, ``accuracy_parity_difference`` and (binary, multilabel) ``n_positive`` and
    ``demographic_parity_difference``, each an Estimate; per attribute ``worst_group_auroc`` (+ which group),
    ``demographic_parity_difference`` and ``equalized_odds_difference`` (status "ok", no reference: the caller
    names it). ``interval``: "percentile", or "bca" for a group's AUROC and accuracy (the rest stay percentile).

    The ``uncompared`` groups ("unknown": the attribute not recorded; ages beyond the last bin) get their own rows,
    each against all the compared groups pooled, but are in no other group's rest and in no attribute-level summary
    (worst group, the two spreads): a handful of such images would otherwise decide them (module docstring).
    """
    n = y.shape[0]
    members = {g: groups == g for g in order}
    named = [g for g in order if g not in uncompared]
    compared = np.isin(groups, named)
    ones = np.ones((1, n))
    point = {g: _group_stats(y, s, correct, selected, m, ones, compared) for g, m in members.items()}
    if not isinstance(redraws, Redraws):
        redraws = Redraws.of_images(redraws)
    by_group: dict[str, dict[str, list[np.ndarray]]] = {g: {} for g in order}
    for _rows, counts in redraw_counts(redraws):
        for g, m in members.items():
            for key, value in _group_stats(y, s, correct, selected, m, counts, compared).items():
                by_group[g].setdefault(key, []).append(value)
    redraws_cat = {g: {k: np.concatenate(v, axis=0) for k, v in d.items()} for g, d in by_group.items()}

    # A group's AUROC and accuracy with each jackknife group of units left out [G, 2]: the BCa acceleration
    # (dpmed.evaluation.bootstrap.bca_interval); the percentile interval needs none.
    def jackknifed(m: np.ndarray) -> np.ndarray:
        return evaluate_jackknife(redraws, lambda w: np.stack(
            [weighted_macro_auroc(y[m], s[m], w[:, m]), weighted_mean(correct[m], w[:, m])], axis=1))

    jack = {g: jackknifed(m) if interval == "bca" else None for g, m in members.items()}

    out_groups = {}
    decided = selected is not None                   # binary, multilabel: positives (per label, summed) exist
    for g in order:
        p, r, j = point[g], redraws_cat[g], jack[g]
        out_groups[g] = GroupFairness(
            n=int(members[g].sum()),
            auroc=estimate(p["auroc"][0], r["auroc"], confidence=confidence,
                           jackknife=None if j is None else j[:, 0]),
            accuracy=estimate(p["accuracy"][0], r["accuracy"], confidence=confidence,
                              jackknife=None if j is None else j[:, 1]),
            accuracy_parity_difference=estimate(p["accuracy"][0] - p["accuracy_rest"][0],
                                                r["accuracy"] - r["accuracy_rest"], confidence=confidence),
            n_positive=int(y[members[g]].sum()) if decided else None,
            # each finding's positives, or each class's images: what each one-vs-rest AUROC of the group rests on
            n_positive_by_label=[int(k) for k in y[members[g]].sum(axis=0)] if y.shape[1] > 1 else None,
            demographic_parity_difference=estimate(
                _nanmean(p["selection"] - p["selection_rest"])[0],
                _nanmean(r["selection"] - r["selection_rest"]), confidence=confidence) if decided else None)

    aurocs = (np.stack([redraws_cat[g]["auroc"] for g in named], axis=1) if named
              else np.empty((redraws.n_resamples, 0)))
    point_aurocs = np.array([point[g]["auroc"][0] for g in named])                       # [G]
    defined = np.isfinite(point_aurocs)
    fields: dict = {}
    if defined.any():
        worst = named[int(np.nanargmin(np.where(defined, point_aurocs, np.inf)))]
        # The lowest over the groups the point value compares: a redraw in which one of them drew one class only
        # is undefined (nan, left out of the interval), not the lowest of the groups it kept, which would leave
        # out the small group most likely to be the worst and lift the interval.
        worst_redraws = aurocs[:, defined].min(axis=1)
        fields["worst_group_auroc"] = WorstGroup(
            group=worst, **estimate(point_aurocs[defined].min(), worst_redraws, confidence=confidence).model_dump(),
            undefined_redraws=int(np.isnan(worst_redraws).sum()))
    else:
        fields["worst_group_auroc"] = WorstGroup(value=None)

    if selected is not None:
        # Equalised odds needs both classes in a group (TPR and FPR); groups without them are left out.
        eo_groups = [[g for g in named if (y[members[g], j] == 1).any() and (y[members[g], j] == 0).any()]
                     for j in range(y.shape[1])]
        dp_point, eo_point = _fairlearn_differences(y[compared], selected[compared], groups[compared], eo_groups)
        sel = np.stack([redraws_cat[g]["selection"] for g in named], axis=2)               # [R, L, G]
        tpr = np.stack([redraws_cat[g]["tpr"] for g in named], axis=2)
        fpr = np.stack([redraws_cat[g]["fpr"] for g in named], axis=2)
        keep = np.array([[g in eo_groups[j] for g in named] for j in range(y.shape[1])])    # [L, G]
        # The labels the point value averages (two or more groups with both classes); nan propagates: a redraw in
        # which a compared group lost a class, or vanished, is undefined.
        eo_labels = keep.sum(axis=1) >= 2
        eo_redraws = (np.maximum(_spread(tpr, keep), _spread(fpr, keep))[:, eo_labels].mean(axis=1)
                      if eo_labels.any() else np.full(redraws.n_resamples, np.nan))
        dp_redraws = _spread(sel, np.ones(len(named), dtype=bool)).mean(axis=1)
        # How far the redrawn pairwise differences stray from the point ones, per redraw: the spread of the redraw's
        # deviations from the point rates, largest over the labels (and, for equalised odds, over TPR and FPR).
        deviation = {k: np.stack([redraws_cat[g][k] for g in named], axis=2)
                     - np.stack([point[g][k] for g in named], axis=2) for k in ("selection", "tpr", "fpr")}
        dp_deviation = _spread(deviation["selection"], np.ones(len(named), dtype=bool)).max(axis=1)
        eo_deviation = (np.maximum(_spread(deviation["tpr"], keep), _spread(deviation["fpr"], keep))[:, eo_labels]
                        .max(axis=1) if eo_labels.any() else np.full(redraws.n_resamples, np.nan))
        fields["demographic_parity_difference"] = _spread_estimate(dp_point, dp_redraws, dp_deviation, confidence)
        fields["equalized_odds_difference"] = _spread_estimate(eo_point, eo_redraws, eo_deviation, confidence)
        fields["equalized_odds_excluded_groups"] = [      # in the groups' order: [5,10) before [10,40)
            g for g in named if any(g not in eo_groups[j] for j in range(y.shape[1]))]
    return AttributeFairness(status="ok", groups=out_groups, **fields)


def _spread_estimate(value: float, redraws: np.ndarray, deviations: np.ndarray, confidence: float) -> Spread:
    """A spread over the groups (largest minus smallest rate) with its interval and the redraws (nan) that left it
    undefined.

    Not the percentile interval of the redrawn spreads (METHODS.md sec. 4's rule for the other metrics): a spread is a
    maximum of pairwise differences, and where two groups' true rates are equal, as in a fair model, the redrawn
    maxima lie above the true one almost always, so that interval holds the true 0 in about none of the draws
    (benchmarks/RESULTS.md, "Interval coverage"; the bootstrap fails at such kinks: Andrews 2000, Econometrica
    68:399-405; Fang & Santos 2019, Rev. Econ. Stud. 86:377-412). Instead every pairwise difference gets the same
    margin c, the ``confidence`` quantile over redraws of the largest deviation of a redrawn pairwise difference from
    its point value (``deviations`` [R]): a simultaneous band, so the largest difference, and the mean of such
    largest differences over labels, lie within c of their point value, clipped to [0, 1]. Where one pair is far
    apart from the others this is a little wider than needed; it never misses because groups are alike.
    """
    defined = deviations[np.isfinite(deviations)]
    if value is None or not np.isfinite(value) or defined.size == 0:
        return Spread(**estimate(value, np.full(1, np.nan), confidence=confidence).model_dump(),
                      undefined_redraws=int(np.isnan(redraws).sum()))
    margin = float(np.quantile(defined, confidence))
    return Spread(value=float(value), low=max(0.0, value - margin), high=min(1.0, value + margin),
                  undefined_redraws=int(np.isnan(redraws).sum()))


def uncompared_groups(name: str, age_bins: Sequence[float]) -> tuple[str, ...]:
    """The groups of attribute ``name`` that no comparison counts: unknown values, and ages at or above the last edge
    only where that edge means "beyond every age" (METHODS.md's 100); study bins ending lower make their last group
    an open one ([0, 40, 65]: 65 and over), a real group."""
    return (UNKNOWN, _age_labels(age_bins)[2]) if name == "age" and float(age_bins[-1]) >= 100 else (UNKNOWN,)


def evaluate_fairness(*, kind: str, val_labels, val_scores, test_labels, test_scores,
                      attributes: Mapping[str, np.ndarray], age_bins: Sequence[float] = AGE_BINS,
                      n_resamples: int = 1000, seed: int = 0, confidence: float = 0.95, patient_ids=None,
                      interval: Interval = "percentile") -> Fairness:
    """Per-attribute fairness of one model (the run record's fairness block); see the module docstring.

    ``attributes`` maps a name (sex, age, or any recorded attribute) to its per-test-image values [n]. An attribute
    recorded for no test image (every value unknown, e.g. PneumoniaMNIST has no sex or age) gets status "n/a" and a
    reason instead of numbers. Redraws: ``bootstrap_redraws(n, patient_ids,
    n_resamples, seed)`` (by patient where ``patient_ids``, str [n], are given), the same as
    :func:`~dpmed.evaluation.utility.evaluate_utility`'s for the same ids; ``bootstrap_unit`` says which.
    ``interval``: as :func:`~dpmed.evaluation.utility.evaluate_utility`'s, named in the block's definitions.
    """
    if interval not in INTERVALS:
        raise ValueError(f"interval must be one of {list(INTERVALS)}, got {interval!r}")
    y, s, correct, selected, thresholds = decisions(kind, val_labels, val_scores, test_labels, test_scores)
    n = y.shape[0]
    redraws = bootstrap_redraws(n, patient_ids=patient_ids, n_resamples=n_resamples, seed=seed)
    out: dict[str, AttributeFairness] = {}
    for name, values in attributes.items():
        values = np.asarray(values)
        if len(values) != n:
            raise ValueError(f"attribute {name!r} has {len(values)} values for {n} test images")
        groups = group_labels(name, values, age_bins=age_bins)
        order = _group_order(groups, name, tuple(float(b) for b in age_bins))
        if order == [UNKNOWN]:
            out[name] = AttributeFairness(status="n/a", reason=f"no test image records {name} (all unknown): "
                                                               f"fairness by {name} cannot be measured on this dataset")
            continue
        uncompared = uncompared_groups(name, age_bins)
        if not set(order) - set(uncompared):
            out[name] = AttributeFairness(status="n/a", reason=f"no test image falls in a group of {name} that is "
                                                               "compared (every value unknown or beyond the bins)")
            continue
        entry = attribute_fairness(y=y, s=s, correct=correct, selected=selected, groups=groups, order=order,
                                   redraws=redraws, confidence=confidence, uncompared=uncompared,
                                   interval=interval)
        # what every column of the per-group tables is: the male column is male minus female, not "female minus male"
        out[name] = entry.model_copy(update={"reference": (
            "each sex minus the other: female minus male, and male minus female (unknown sex in neither)")
            if name == "sex" else (
            "each age group minus the other age groups pooled (unknown ages, and ages at or above the last edge, "
            "in neither)")})
    return Fairness(definitions=task_definitions(kind, interval), thresholds=thresholds, n_test=n,
                    n_resamples=int(n_resamples), bootstrap_seed=int(seed), bootstrap_unit=redraws.unit,
                    confidence=float(confidence),
                    age_bins=[float(b) for b in age_bins], attributes=out)


def fairness_columns(fairness: Fairness | None) -> dict[str, float | int | str | None]:
    """The flat results.csv columns of a run's fairness block, e.g. ``fairness[age=[80,100)]_auroc_low``."""
    if fairness is None:
        return {}
    row: dict = {}
    for attr in fairness.attributes:
        if (entry := fairness.ok(attr)) is None:
            continue
        for group, g in entry.groups.items():
            key = f"fairness[{attr}={group}]"
            row[f"{key}_n"] = g.n
            for metric in ("auroc", "accuracy", "accuracy_parity_difference", "demographic_parity_difference"):
                if (est := getattr(g, metric)) is not None:
                    row[f"{key}_{metric}"], row[f"{key}_{metric}_low"], row[f"{key}_{metric}_high"] = (
                        est.value, est.low, est.high)
        for metric in ("worst_group_auroc", "demographic_parity_difference", "equalized_odds_difference"):
            if (est := getattr(entry, metric)) is not None:
                for part in ("value", "low", "high"):
                    row[f"fairness[{attr}]_{metric}" + ("" if part == "value" else f"_{part}")] = getattr(est, part)
        row[f"fairness[{attr}]_worst_group"] = entry.worst_group_auroc.group if entry.worst_group_auroc else None
        if entry.equalized_odds_difference is not None:     # groups without both classes on test: not compared
            row[f"fairness[{attr}]_equalized_odds_excluded"] = "; ".join(entry.equalized_odds_excluded_groups)
    return row
