"""The utility section's table of each finding's test AUROC, for a multilabel task (CheXpert, NIH, MIMIC findings).

Why: the macro AUROC averages findings of very different prevalence, so a private arm can keep its macro AUROC while
losing a rare finding; a reader choosing an ε for one finding needs that finding's AUROC, per run, with its interval
(the same percentile bootstrap, from the same redraws, as the macro's: `dpmed.evaluation.utility`). A finding with
no positive (or no negative) test image has no AUROC, and reads "undefined", not as a number or a blank.
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
    """One row per run, one column per finding; empty unless the task is multilabel."""
    data = inputs.resolved.dataset
    if data.task != "multilabel":
        return ""
    findings = inputs.resolved.label_names(inputs.records)
    if not findings:
        return ""
    heads = "".join(f"<th>{escape(f)}</th>" for f in findings)
    rows = "".join(f"<tr><td>{escape(r.run_id)}</td>" + "".join(f"<td class=num>{_cell(r, f)}</td>" for f in findings)
                   + "</tr>" for r in inputs.records)
    return (f'<h3 id="findings">Test AUROC per finding [{inputs.level} CI]</h3><p>Each finding\'s AUROC on the '
            f"whole test set, with the percentile interval of the same redraws of {inputs.redrawn} as the macro "
            "AUROC above; a redraw without a positive or a negative of the finding is left out of that finding's "
            "interval only. \"undefined\": the test set has no positive or no negative of the finding.</p>"
            + stacked(f"<table><tr><th>run</th>{heads}</tr>{rows}</table>"))
