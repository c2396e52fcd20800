"""Flat tables of run records: results.csv for pandas users and the printed summary."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from dpmed.evaluation.explanations import explanation_columns
from dpmed.evaluation.fairness import fairness_columns

__all__ = ["results_frame", "write_results_table", "summary_text"]

_PRIVACY_COLUMNS = ("is_dp", "epsilon", "delta", "accountant", "unit", "n_units", "neighbour_relation",
                    "epsilon_pixel", "scale_b", "noise_multiplier", "sample_rate", "steps", "max_grad_norm",
                    "target_epsilon", "randomness")


def results_frame(records: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """One row per run: identity, privacy card fields, every metric, wall time."""
    rows = []
    for r in records:
        card = r["privacy"]
        row = {"run_id": r["run_id"], "arm": r["arm"], "mechanism": r["mechanism"], "seed": r["seed"]}
        row.update({k: card.get(k) for k in _PRIVACY_COLUMNS})
        row["privacy_statement"] = card["statement"]
        risk = r.get("reconstruction") or {}
        row["reconstruction_worst_case"] = risk.get("worst_case")
        row["reconstruction_relaxed"] = risk.get("relaxed")
        for fpr, tpr in (risk.get("tpr_at_fpr") or {}).items():
            row[f"mia_tpr_at_fpr_{fpr}"] = tpr
        if r.get("audit"):   # the result is private (it depends on the secret canary bits): only that there was one
            row["audit_canaries"] = r["audit"]["n_canaries"]
        row.update(r["metrics"])
        row.update(fairness_columns(r.get("fairness")))            # per group, e.g. fairness[age=[80,100)]_auroc
        row.update(explanation_columns(r.get("explanations")))     # e.g. explanations_mask_energy_low
        row["train_seconds"] = r["timing"]["train_seconds"]
        rows.append(row)
    return pd.DataFrame(rows)


def write_results_table(records: Iterable[dict[str, Any]], path: Path) -> pd.DataFrame:
    frame = results_frame(records)
    tmp = path.with_name(f".{path.name}.tmp")
    frame.to_csv(tmp, index=False)
    tmp.replace(path)
    return frame


def eps_text(card: dict[str, Any]) -> str:
    if not card["is_dp"] and card.get("epsilon") is not None:   # reproducible mode: the accounted value, labelled
        return f"{card['epsilon']:.3g} (not DP: seed known)"
    if not card["is_dp"]:
        return "inf (no DP)" if card["mechanism"] == "none" else "not DP"
    if "epsilon_image" in card:   # local DP: per image, for "any two images" (not comparable to DP-SGD's eps)
        delta = f", d={card['delta']:.0e}" if card.get("delta") else ""
        return f"{card['epsilon_image']:,.4g} (image, LDP{delta})"
    return f"{card['epsilon']:.3g} (d={card['delta']:.0e}, {card['accountant']})"


def audit_text(audit: dict[str, Any]) -> str:
    """The audit's line for a privacy card, e.g. "empirical lower bound eps >= 2.1 at delta = 1e-05 (one-run audit,
    100 canaries, 95%)": a lower bound, next to the accountant's upper bound."""
    return (f"empirical lower bound eps >= {audit['epsilon_lower_bound']:.3g} at delta = {audit['delta']:.3g} "
            f"(one-run audit, {audit['n_canaries']} canaries, {audit['confidence']:.0%})")


def summary_text(records: Iterable[dict[str, Any]]) -> str:
    """A fixed-width table for the terminal: run, eps with its delta and accountant, test AUROC with interval."""
    lines = [f"{'run':<28} {'eps':<30} {'test AUROC [95% CI]':<24} {'acc':>6}"]
    for r in records:
        m = r["metrics"]
        auc = ("undefined" if m.get("test_auroc") is None
               else f"{m['test_auroc']:.3f} [{m['test_auroc_low']:.3f}, {m['test_auroc_high']:.3f}]")
        acc = m.get("test_accuracy")
        lines.append(f"{r['run_id']:<28} {eps_text(r['privacy']):<30} {auc:<24} "
                     f"{'' if acc is None else format(acc, '.3f'):>6}")
    return "\n".join(lines)
