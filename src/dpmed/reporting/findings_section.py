"""The utility section's table of each label's test AUROC: each finding of a multilabel task (CheXpert, NIH, MIMIC
findings), each class of a multiclass one (one-vs-rest: APTOS grades, HAM10000 lesions).

Why: the macro AUROC averages labels of very different prevalence, so a private arm can keep its macro AUROC while
losing a rare finding or class; a reader choosing an ε for one of them needs its AUROC, per run, with its interval
(the same bootstrap interval, percentile or BCa as the study asks, from the same redraws, as the macro's:
`dpmed.evaluation.utility`). A label with no positive (or no negative) test image has no AUROC, and reads
"undefined", not as a number or a blank.
"""

from __future__ import annotations

from dpmed.records import RunRecord
from dpmed.reporting.inputs import ReportInputs, escape, estimate_text, stacked

__all__ = ["findings_section"]


def _cell(r: RunRecord, finding: str) -> str:
    key = f"test_auroc[{finding}]"
    if key not in r.metrics:
        return "–"          # a run recorded without it
    return "undefined" if r.estimate(key).value is None else estimate_text(r.estimate(key))


def findings_section(inputs: ReportInputs) -> str:
    """One row per run, one column per label; empty for a binary task (its one AUROC is the table above)."""
    task = inputs.resolved.dataset.task
    if task not in ("multilabel", "multiclass"):
        return ""
    labels = inputs.resolved.label_names(inputs.records)
    if not labels:
        return ""
    label = "finding" if task == "multilabel" else "class"
    one_vs_rest = "" if task == "multilabel" else " (one-vs-rest: the class against all the others)"
    heads = "".join(f"<th>{escape(f)}</th>" for f in labels)
    rows = "".join(f"<tr><td>{escape(r.run_id)}</td>" + "".join(f"<td class=num>{_cell(r, f)}</td>" for f in labels)
                   + "</tr>" for r in inputs.records)
    return (f'<h3 id="findings">Test AUROC per {label} [{inputs.level} CI]</h3><p>Each {label}\'s AUROC on the '
            f"whole test set{one_vs_rest}, with the {inputs.interval} interval of the same redraws of "
            f"{inputs.redrawn} as the macro AUROC above; a redraw without a positive or a negative of the {label} is "
            f"left out of that {label}'s interval only. \"undefined\": the test set has no positive or no negative of "
            f"the {label}.</p>"
            + stacked(f"<table><tr><th>run</th>{heads}</tr>{rows}</table>"))
