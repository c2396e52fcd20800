"""Comparisons across the runs of a study, from their saved predictions: what privacy costs, with intervals.

* **Paired AUROC differences** (METHODS.md sec. 4): every private run against the non-private run of the same seed,
  on the same seeded redraws of the test set that gave each arm its own interval
  (:func:`~dpmed.evaluation.bootstrap.bootstrap_indices`, as counts in :mod:`dpmed.evaluation.weighted`). Because
  both models are scored on each redraw, the interval of the *difference* is much narrower than the two arms'
  intervals side by side suggest (overlapping intervals do not show that two arms are equal). The p-value is the
  two-sided bootstrap test obtained by inverting percentile intervals: twice the share of redraws whose difference
  falls on the other side of zero, with the +1 correction of Davison & Hinkley 1997 (eq. 4.11) so it is never 0.
* **Seeds** of one arm value are summarised by mean, standard deviation (ddof = 1), min and max: the spread over
  seeds is training randomness (and DP noise), which the test-set bootstrap does not see.
* **Pearson r with p-values** (003_9a91354dc2d7e2df.txt, "To evaluate correlation ... we use Pearson's r"): across a
  DP-SGD sweep (runs that differ only in eps, or only in the clipping norm; every seed is a point), between eps and
  each group's accuracy parity difference, and between eps (or the clipping norm) and each explanation metric;
  across labels (three or more), between each label's AUROC drop (non-private minus private) and its positive count
  in the test set or its non-private AUROC. Fewer than three points give no r (said, not guessed). eps enters on
  its own scale, as in 003's Table 3 correlation.
* The reference of a private run is the first non-private run of the same seed (study order).
"""

from __future__ import annotations

import json
import re
import warnings
from collections import defaultdict
from typing import Any, Mapping, Sequence

import numpy as np
from scipy.stats import pearsonr

from dpmed.evaluation.bootstrap import bootstrap_indices
from dpmed.evaluation.weighted import as_label_columns, estimate, number, redraw_counts, weighted_auroc

__all__ = ["paired_auroc_difference", "bootstrap_p_value", "pearson", "seed_summary", "compare_runs"]


def _macro_auroc(y: np.ndarray, s: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Mean over label columns of the weighted AUROC, ignoring undefined labels: [R]."""
    per_label = np.stack([weighted_auroc(y[:, j], s[:, j], weights) for j in range(y.shape[1])], axis=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)    # a redraw with no defined label: nan, left out
        return np.nanmean(per_label, axis=1)


def bootstrap_p_value(differences: np.ndarray) -> float | None:
    """Two-sided p-value of "difference = 0" from bootstrap redraws of the difference (nan redraws left out).

    p = min(1, 2 (1 + min(#{d <= 0}, #{d >= 0})) / (R + 1)): the smallest level at which a percentile interval
    would exclude 0, with the +1 correction that keeps a Monte Carlo p-value valid (Davison & Hinkley 1997).
    """
    d = np.asarray(differences, dtype=np.float64)
    d = d[np.isfinite(d)]
    if d.size == 0:
        return None
    tail = min(int((d <= 0).sum()), int((d >= 0).sum()))
    return float(min(1.0, 2.0 * (1 + tail) / (d.size + 1)))


def paired_auroc_difference(*, kind: str, labels, scores, reference_scores, n_resamples: int = 1000,
                            seed: int = 0, confidence: float = 0.95) -> dict[str, Any]:
    """AUROC(scores) - AUROC(reference_scores) on the same test labels, with a paired bootstrap interval and p-value.

    Both models are scored on each of the ``bootstrap_indices(n, n_resamples, seed)`` redraws (the redraws of their
    own intervals) and the difference is taken redraw by redraw. Macro AUROC as in METHODS.md sec. 4.
    """
    y, s = as_label_columns(kind, labels, scores)
    _, s0 = as_label_columns(kind, labels, reference_scores)
    if s.shape != s0.shape:
        raise ValueError(f"the two models' scores differ in shape: {s.shape} and {s0.shape}")
    n = y.shape[0]
    ones = np.ones((1, n))
    point = float(_macro_auroc(y, s, ones)[0] - _macro_auroc(y, s0, ones)[0])
    indices = bootstrap_indices(n, n_resamples=n_resamples, seed=seed)
    diffs = np.concatenate([_macro_auroc(y, s, w) - _macro_auroc(y, s0, w) for _rows, w in redraw_counts(indices, n)])
    return {**estimate(point, diffs, confidence=confidence), "p_value": bootstrap_p_value(diffs),
            "defined_redraws": int(np.isfinite(diffs).sum())}


def pearson(x: Sequence[float], y: Sequence[float]) -> dict[str, Any]:
    """Pearson's r and its two-sided p-value (scipy; t-test with n - 2 degrees of freedom), with n.

    Points with a missing value are dropped; fewer than 3 points or a constant variable give r = None and a reason.
    """
    a = np.array([np.nan if v is None else v for v in x], dtype=np.float64)
    b = np.array([np.nan if v is None else v for v in y], dtype=np.float64)
    keep = np.isfinite(a) & np.isfinite(b)
    a, b = a[keep], b[keep]
    if a.size < 3:
        return {"r": None, "p_value": None, "n": int(a.size), "reason": "fewer than 3 points"}
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return {"r": None, "p_value": None, "n": int(a.size), "reason": "one variable is constant"}
    result = pearsonr(a, b)
    return {"r": number(result.statistic), "p_value": number(result.pvalue), "n": int(a.size)}


def seed_summary(values: Sequence[float | None]) -> dict[str, Any]:
    """Mean, standard deviation (ddof = 1; None for one seed), min and max over seeds, and their count."""
    v = np.array([x for x in values if x is not None], dtype=np.float64)
    if v.size == 0:
        return {"mean": None, "std": None, "min": None, "max": None, "n_seeds": 0}
    return {"mean": number(v.mean()), "std": number(v.std(ddof=1)) if v.size > 1 else None,
            "min": number(v.min()), "max": number(v.max()), "n_seeds": int(v.size)}


def _value_label(run_id: str) -> str:
    """The run id without its seed: one arm value (e.g. ``dp-sgd_eps1_C1``)."""
    return re.sub(r"_seed-?\d+$", "", run_id)


# The two variables a DP-SGD sweep varies, and the study-file parameters each one is set by. A sweep is the set of
# DP-SGD runs that differ in nothing else (arm settings, training settings): across arms, so that a clipping-norm arm
# at eps 1 and the eps arm's own eps 1 run fall on one curve when their other settings agree.
_SWEEP_VARIABLES = {"epsilon": ("target_epsilon", "noise_multiplier"), "max_grad_norm": ("max_grad_norm",)}


def _x_value(record: Mapping[str, Any], variable: str) -> float | None:
    """eps as accounted (the x of 003's Table 3); max_grad_norm as set."""
    if variable == "epsilon":
        return record["privacy"].get("epsilon")
    return ((record.get("spec") or {}).get("params") or {}).get(variable)


def _sweeps(records, variable: str) -> dict[str, list[Mapping[str, Any]]]:
    """DP-SGD runs grouped by everything except ``variable`` (and the seed); only groups where it takes at least two
    values. The key names the arms and the settings held fixed."""
    groups: dict[str, list] = defaultdict(list)
    for r in records:
        if r["mechanism"] != "dp_sgd" or _x_value(r, variable) is None:
            continue
        spec = r.get("spec") or {}
        fixed = {k: v for k, v in (spec.get("params") or {}).items() if k not in _SWEEP_VARIABLES[variable]}
        key = json.dumps({"params": fixed, "training": spec.get("training")}, sort_keys=True, default=str)
        groups[key].append(r)
    out = {}
    for key, runs in groups.items():
        if len({_x_value(r, variable) for r in runs}) < 2:
            continue
        shown = {k: v for k, v in json.loads(key)["params"].items()
                 if k in ("noise", "max_grad_norm", "target_epsilon") and v is not None}
        arms = "+".join(dict.fromkeys(r["arm"] for r in runs))
        out[f"{variable} sweep: {arms} (" + ", ".join(f"{k}={v}" for k, v in sorted(shown.items())) + ")"] = runs
    return out


def _same_test_set(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray]) -> bool:
    return (a["test_labels"].shape == b["test_labels"].shape and np.array_equal(a["test_labels"], b["test_labels"])
            and np.array_equal(a["test_patient_ids"], b["test_patient_ids"]))


def _references(records, predictions) -> dict[int, Mapping[str, Any]]:
    """seed -> the first non-private run of that seed whose predictions are loaded."""
    references: dict[int, Mapping[str, Any]] = {}
    for r in records:
        if r["mechanism"] == "none" and r["run_id"] in predictions:
            references.setdefault(r["seed"], r)
    return references


def _differences(records, predictions, kind, n_resamples, seed, confidence, notes) -> list[dict[str, Any]]:
    references = _references(records, predictions)
    rows = []
    for r in records:
        if r["mechanism"] == "none" or r["run_id"] not in predictions:
            continue
        ref = references.get(r["seed"])
        if ref is None:
            notes.append(f"{r['run_id']}: no non-private run with seed {r['seed']} to pair with")
            continue
        mine, theirs = predictions[r["run_id"]], predictions[ref["run_id"]]
        if not _same_test_set(mine, theirs):
            notes.append(f"{r['run_id']}: its test set differs from {ref['run_id']}'s; no paired difference")
            continue
        diff = paired_auroc_difference(kind=kind, labels=mine["test_labels"], scores=mine["test_scores"],
                                       reference_scores=theirs["test_scores"], n_resamples=n_resamples, seed=seed,
                                       confidence=confidence)
        rows.append({"run_id": r["run_id"], "value_label": _value_label(r["run_id"]), "arm": r["arm"],
                     "mechanism": r["mechanism"], "seed": r["seed"], "reference_run": ref["run_id"],
                     "epsilon": number(r["privacy"].get("epsilon")), "auroc_difference": diff})
    return rows


def _by_value(rows: list[dict[str, Any]], records) -> list[dict[str, Any]]:
    eps = defaultdict(list)
    for r in records:
        eps[_value_label(r["run_id"])].append(r["privacy"].get("epsilon"))
    grouped: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        grouped[row["value_label"]].append(row)
    out = []
    for label, members in grouped.items():
        values = [m["auroc_difference"]["value"] for m in members]
        out.append({"value_label": label, "arm": members[0]["arm"], "seeds": [m["seed"] for m in members],
                    "epsilon": seed_summary(eps[label])["mean"], "auroc_difference": seed_summary(values),
                    "significant_seeds": sum(1 for m in members
                                             if m["auroc_difference"]["p_value"] is not None
                                             and m["auroc_difference"]["p_value"] < 0.05)})
    return out


def _parity_correlations(records) -> list[dict[str, Any]]:
    """Pearson r between eps and each group's accuracy parity difference, per DP-SGD eps sweep (003, Table 3)."""
    out = []
    for sweep, runs in _sweeps(records, "epsilon").items():
        keys = sorted({(attr, group) for r in runs for attr, entry in ((r.get("fairness") or {})
                                                                        .get("attributes", {}).items())
                       if entry.get("status") == "ok" for group in entry["groups"]})
        for attr, group in keys:
            eps, parity = [], []
            for r in runs:
                g = r["fairness"]["attributes"].get(attr, {}).get("groups", {}).get(group)
                eps.append(r["privacy"]["epsilon"])
                parity.append(None if g is None else g["accuracy_parity_difference"]["value"])
            out.append({"sweep": sweep, "attribute": attr, "group": group, **pearson(eps, parity)})
    return out


def _explanation_correlations(records, variable: str) -> list[dict[str, Any]]:
    """Pearson r between eps (or the clipping norm) and each explanation metric, per DP-SGD sweep: the trends of
    001_d0483fd35863b74c.txt's Tables 1-2 (eps) and Figure 6b (clipping factor at eps 1), quantified."""
    out = []
    for sweep, runs in _sweeps(records, variable).items():
        metrics = sorted({m for r in runs for m, v in ((r.get("explanations") or {}).get("metrics", {}).items())
                          if isinstance(v, dict) and "value" in v})
        for metric in metrics:
            xs = [_x_value(r, variable) for r in runs]
            vals = [((r.get("explanations") or {}).get("metrics", {}).get(metric) or {}).get("value") for r in runs]
            out.append({"sweep": sweep, "metric": metric, **pearson(xs, vals)})
    return out


def _label_correlations(records, predictions, kind, label_names, notes) -> list[dict[str, Any]]:
    """Per private run: Pearson r over labels between AUROC drop and positive count / non-private AUROC (003)."""
    if kind == "binary":          # one AUROC per model: nothing to correlate across labels
        return []
    if len(label_names) < 3:
        notes.append(f"AUROC drop versus label prevalence: n/a, the task has {len(label_names)} label(s) and a "
                     "correlation across labels needs at least 3")
        return []
    references = _references(records, predictions)
    out = []
    for r in records:
        ref = references.get(r["seed"])
        if r["mechanism"] == "none" or ref is None:
            continue
        base = [ref["metrics"].get(f"test_auroc[{name}]") for name in label_names]
        mine = [r["metrics"].get(f"test_auroc[{name}]") for name in label_names]
        drop = [None if a is None or b is None else a - b for a, b in zip(base, mine)]
        y = predictions[ref["run_id"]]["test_labels"]
        counts = ((y[:, None] == np.arange(len(label_names))[None, :]).sum(axis=0) if y.ndim == 1
                  else y.sum(axis=0)).tolist()
        out.append({"run_id": r["run_id"], "epsilon": number(r["privacy"].get("epsilon")),
                    "drop_vs_positive_count": pearson(drop, counts),
                    "drop_vs_nonprivate_auroc": pearson(drop, base)})
    return out


def compare_runs(records: Sequence[Mapping[str, Any]], predictions: Mapping[str, Mapping[str, np.ndarray]], *,
                 kind: str, label_names: Sequence[str], n_resamples: int = 1000, seed: int = 0,
                 confidence: float = 0.95) -> dict[str, Any]:
    """The study's ``comparisons`` block, from run records and their loaded predictions (``run_id -> arrays`` as
    :func:`~dpmed.evaluation.predictions.load_predictions` returns them). Pure: no file is read or written."""
    notes: list[str] = []
    rows = _differences(records, predictions, kind, n_resamples, seed, confidence, notes)
    if not any(r["mechanism"] == "none" for r in records):
        notes.append("no non-private arm: no AUROC differences")
    return {
        "definitions": {
            "auroc_difference": "private minus non-private test AUROC (same seed), paired bootstrap over the same "
                                "seeded test redraws; two-sided bootstrap p-value",
            "by_value": "seeds of one arm value: mean, std (ddof=1), min, max of the AUROC differences",
            "correlations": "Pearson r with two-sided p-value (scipy.stats.pearsonr); eps is the accounted eps",
        },
        "n_resamples": int(n_resamples), "bootstrap_seed": int(seed), "confidence": float(confidence),
        "auroc_differences": rows,
        "by_value": _by_value(rows, records),
        "correlations": {
            "epsilon_vs_accuracy_parity": _parity_correlations(records),
            "epsilon_vs_explanations": _explanation_correlations(records, "epsilon"),
            "max_grad_norm_vs_explanations": _explanation_correlations(records, "max_grad_norm"),
            "auroc_drop_vs_label": _label_correlations(records, predictions, kind, label_names, notes),
        },
        "notes": notes,
    }
