"""Flat tables of run records: results.csv for pandas users and the printed summary."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from dpmed.comparisons import decides_one_class
from dpmed.evaluation.fairness import fairness_columns
from dpmed.evaluation.summaries import Explanations
from dpmed.folders import write_text_atomic
from dpmed.numbers import confidence_text
from dpmed.records import RunRecord

__all__ = ["results_frame", "write_results_table", "summary_text"]

_PRIVACY_COLUMNS = ("is_dp", "epsilon", "delta", "accountant", "unit", "n_units", "released_units", "size_epsilon",
                    "neighbour_relation", "epsilon_pixel", "scale_b", "noise_multiplier", "sample_rate", "steps",
                    "max_grad_norm", "target_epsilon", "randomness", "sampler_delta", "sampler_voids")


def results_frame(records: Iterable[RunRecord]) -> pd.DataFrame:
    """One row per run: identity, privacy card fields, every metric, wall time (empty for a DP-SGD run: private)."""
    rows = []
    for r in records:
        row = {"run_id": r.run_id, "arm": r.arm, "mechanism": r.mechanism, "seed": r.seed}
        row.update({k: getattr(r.privacy, k) for k in _PRIVACY_COLUMNS})
        row["privacy_statement"] = r.privacy.statement
        # where the model started: what a prior learnt there is covered by no eps, so a merged table must tell
        start = r.start
        row.update(start_trained_on=None if start is None else start.trained_on,
                   start_sha256=None if start is None else start.sha256,
                   trainable="all" if start is None else start.trainable)
        risk = r.reconstruction
        row["reconstruction_worst_case"] = None if risk is None else risk.worst_case
        row["reconstruction_relaxed"] = None if risk is None else risk.relaxed
        for fpr, tpr in ({} if risk is None else risk.tpr_at_fpr).items():
            row[f"mia_tpr_at_fpr_{fpr}"] = tpr
        if r.attack is not None:   # the realistic threat model: an actual reconstruction attack
            row.update(attack_rate=r.attack.rate, attack_rate_low=r.attack.rate_low,
                       attack_rate_high=r.attack.rate_high, attack_chance_rate=r.attack.chance_rate,
                       attack_threshold=r.attack.threshold)
        if r.audit is not None:   # the result is private (it depends on the secret canary bits): only that it ran
            row["audit_canaries"] = r.audit.n_canaries
        row.update({**r.metrics, "interval": r.interval})      # a record before the setting: percentile
        row.update(fairness_columns(r.fairness))            # per group, e.g. fairness[age=[80,100)]_auroc
        row.update(_explanation_columns(r.explanations))    # e.g. explanations_mask_energy_low
        row["train_seconds"] = r.timing.train_seconds
        rows.append(row)
    return _with_integer_columns(pd.DataFrame(rows), rows)


def _with_integer_columns(frame: pd.DataFrame, rows: list[dict[str, Any]]) -> pd.DataFrame:
    """``frame`` with each column whose values are all integers (or missing) as pandas' nullable Int64: a count such
    as n_units or steps, missing for runs without DP-SGD, was otherwise a float column, and results.csv read 4254.0."""
    for column in frame.columns:
        values = [row[column] for row in rows if row.get(column) is not None]
        if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            frame[column] = frame[column].astype("Int64")
    return frame


def _explanation_columns(explanations: Explanations | None) -> dict[str, Any]:
    """The flat results.csv columns of a run's explanations block, e.g. ``explanations_mask_energy_low``."""
    if explanations is None:
        return {}
    row: dict[str, Any] = {"explanations_method": explanations.method,
                           "explanations_target_layer": explanations.target_layer,
                           "explanations_mask_area_share": explanations.mask_area_share}
    for metric, v in explanations.metrics.items():
        row[f"explanations_{metric}"], row[f"explanations_{metric}_low"], row[f"explanations_{metric}_high"] = (
            v.value, v.low, v.high)
    return row


def write_results_table(records: Iterable[RunRecord], path: Path) -> pd.DataFrame:
    frame = results_frame(records)
    write_text_atomic(path, frame.to_csv(index=False))
    return frame


def summary_text(records: Iterable[RunRecord]) -> str:
    """A fixed-width table for the terminal: run, eps with its delta, accountant and neighbours, test AUROC with
    interval (its level and kind, percentile or BCa, named as the report names them), accuracy at the run's
    threshold; then a line for each run that decides one class for every test image, whose accuracy (that class's
    share) would otherwise pass for a weak model's, and, where runs' intervals differ (a folder evaluated under two
    settings), a line naming each run's, which the header cannot."""
    records = list(records)
    levels = {float(level) for r in records if (level := r.metrics.get("confidence")) is not None}
    kinds = {r.interval for r in records}
    # the intervals' level and kind, as the report names them ("95% BCa CI"); either left out where runs differ
    named = [confidence_text(levels.pop())] if len(levels) == 1 else []
    if len(kinds) == 1:
        named.append("BCa" if kinds == {"bca"} else "percentile")
    head = f"test AUROC [{' '.join([*named, 'CI'])}]"
    width = max([len("eps"), *(len(r.privacy.in_brief()) for r in records)])
    ids = max([28, *(len(r.run_id) for r in records)])     # a longer run id widens its column, not its row
    auroc = max(24, len(head))
    lines = [f"{'run':<{ids}} {'eps':<{width}} {head:<{auroc}} {'accuracy':>8}"]
    for r in records:
        auc = r.estimate("test_auroc")
        shown = ("undefined" if auc.value is None else f"{auc.value:.3f}" if auc.low is None
                 else f"{auc.value:.3f} [{auc.low:.3f}, {auc.high:.3f}]")
        acc = r.estimate("test_accuracy").value
        lines.append(f"{r.run_id:<{ids}} {r.privacy.in_brief():<{width}} {shown:<{auroc}} "
                     f"{'' if acc is None else format(acc, '.3f'):>8}")
    lines += [f"{r.run_id} predicts one class for every test image: its accuracy is that class's share, and its "
              "decisions separate nothing, whatever its AUROC (report.html says more)"
              for r in records if decides_one_class(r)]
    if len(levels) > 1 or len(kinds) > 1:                   # the header names only what all runs share: say the rest
        groups: dict[str, list[str]] = {}
        for r in records:
            level = r.metrics.get("confidence")
            text = " ".join([*([confidence_text(float(level))] if level is not None else []),
                             "BCa" if r.interval == "bca" else "percentile"])
            groups.setdefault(text, []).append(r.run_id)
        lines.append("the runs' intervals differ: " + "; ".join(f"{text} for {', '.join(ids)}"
                                                                for text, ids in groups.items())
                     + " (`dpmed status` names the runs the next `dpmed run` evaluates again)")
    return "\n".join(lines)
