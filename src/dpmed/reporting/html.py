"""The study report: one self-contained HTML file (inline CSS, figures as data URIs) that opens offline."""

from __future__ import annotations

import base64
import datetime as dt
import html
from pathlib import Path
from typing import Any, Iterable

import yaml

import numpy as np

from dpmed.reporting.figures import auroc_versus_epsilon, ldp_examples
from dpmed.reporting.study_sections import study_sections
from dpmed.reporting.tables import audit_text, eps_text

__all__ = ["write_report", "write_private_report"]

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;max-width:1100px;margin:2em auto;
padding:0 1em;color:#1b1b1b;line-height:1.45}
h1{margin-bottom:.2em} h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.8em}
/* a wide table scrolls inside itself, not the page */
table{border-collapse:collapse;font-size:.9em;margin:.6em 0;display:block;max-width:100%;overflow-x:auto}
th,td{border:1px solid #ddd;padding:.3em .6em;text-align:left;vertical-align:top}
th{background:#f4f4f4} td.num{text-align:right;font-variant-numeric:tabular-nums}
.note{background:#fff8e1;border-left:4px solid #f0b400;padding:.6em 1em;margin:1em 0}
.notdp{color:#b00020;font-weight:600} pre{background:#f7f7f7;padding:1em;overflow:auto;font-size:.8em}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(330px,1fr));gap:1em}
.card{border:1px solid #ddd;border-radius:6px;padding:.6em 1em} .card h3{margin:.2em 0 .4em;font-size:1em}
.card table{font-size:.85em;width:100%;display:table} .card td{overflow-wrap:anywhere}
"""


def _e(value: Any) -> str:
    return html.escape(str(value))


def _ci(m: dict[str, Any], key: str) -> str:
    v = m.get(key)
    if v is None:
        return "–"
    lo, hi = m.get(f"{key}_low"), m.get(f"{key}_high")
    return f"{v:.3f} [{lo:.3f}, {hi:.3f}]" if lo is not None and hi is not None else f"{v:.3f}"


def _reading(records: list[dict[str, Any]]) -> str:
    """A plain-language summary of the trade-off, from the numbers alone."""
    base = [r for r in records if r["mechanism"] == "none" and r["metrics"].get("test_auroc") is not None]
    if not base:
        return "This study has no non-private arm with a defined AUROC, so the cost of privacy has no baseline here."
    b = sum(r["metrics"]["test_auroc"] for r in base) / len(base)
    base_low = min(x["metrics"]["test_auroc_low"] for x in base)
    parts = [f"Without privacy the model reaches a test AUROC of {b:.3f}."]
    for r in records:
        m, card = r["metrics"], r["privacy"]
        if r["mechanism"] == "none":
            continue
        if m.get("test_auroc") is None:
            parts.append(f"{_e(r['run_id'])}: test AUROC undefined (one class only among its scores or labels).")
            continue
        verdict = ("its interval overlaps the non-private one" if m["test_auroc_high"] >= base_low
                   else "its whole interval lies below the non-private one")
        parts.append(f"{_e(r['run_id'])} ({_e(eps_text(card))}): {m['test_auroc']:.3f} "
                     f"({m['test_auroc'] - b:+.3f}); {verdict}.")
    parts.append("Intervals are percentile bootstrap intervals over the test set; intervals that overlap do not "
                 "show that two arms are equal, nor that they differ.")
    return " ".join(parts)


def _card(r: dict[str, Any]) -> str:
    card = r["privacy"]
    skip = {"statement", "mechanism"}
    rows = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in card.items() if k not in skip)
    cls = "" if card["is_dp"] else ' class="notdp"'
    audit = r.get("audit")
    if not audit:
        audited = ""
    elif "epsilon_lower_bound" not in audit:   # the public record: the result depends on the secret canary bits
        audited = (f"<p>Audited with {audit['n_canaries']} {_e(audit['kind'])} canaries; the result is in the study's "
                   "private report (private/report.html): it depends on the secret canary inclusion bits.</p>")
    else:
        audited = (f'<p{" class=notdp" if audit.get("consistent_with_claim") is False else ""}>'
                   f"{_e(audit_text(audit))}: {audit['n_correct']} of {audit['n_guesses']} "
                   f"membership guesses right{_e(_audit_verdict(audit))}</p>")
    return (f'<div class="card"><h3>{_e(r["run_id"])}</h3><p{cls}>{_e(card["statement"])}</p>{audited}'
            f"<table>{rows}</table></div>")


def _audit_verdict(audit: dict[str, Any]) -> str:
    if audit.get("claimed_epsilon") is None:
        return ""
    if audit["consistent_with_claim"]:
        return f"; not above the claimed eps = {audit['claimed_epsilon']:.3g}, as DP requires"
    return (f"; ABOVE the claimed eps = {audit['claimed_epsilon']:.3g}: inconsistent with the claimed eps at "
            f"{audit['confidence']:.0%}")


def _risk_section(records: list[dict[str, Any]]) -> str:
    """Reconstruction and membership-inference bounds per DP-SGD run (METHODS.md s.7), with their assumptions."""
    rows, assumptions = [], ""
    for r in records:
        risk = r.get("reconstruction")
        if not risk:
            continue
        tpr = risk["tpr_at_fpr"]
        rows.append(f"<tr><td>{_e(r['run_id'])}</td><td>{_e(eps_text(r['privacy']))}</td>"
                    f"<td class=num>{risk['kappa']:.3g}</td><td class=num>{risk['worst_case']:.3%}</td>"
                    f"<td class=num>{risk['relaxed']:.3%}</td><td class=num>{tpr.get('0.001', 0):.2%}</td>"
                    f"<td class=num>{tpr.get('0.01', 0):.2%}</td></tr>")
        assumptions = risk["assumptions"]
    if not rows:
        return ""
    return (f'<h2 id="risk">Reconstruction risk</h2><p>Upper bounds on the success probability of an informed '
            f"attacker reconstructing one training record (an image, or a patient where the card's unit is the "
            f"patient; worst case, and relaxed: gradient sign unknown), and the "
            f"best possible membership-inference TPR at a fixed FPR, from each run's DP-SGD trade-off curve.</p>"
            f"<table><tr><th>run</th><th>eps</th><th>prior kappa</th><th>worst case</th><th>relaxed</th>"
            f"<th>MIA TPR at FPR 0.1%</th><th>MIA TPR at FPR 1%</th></tr>{''.join(rows)}</table>"
            f"<p>Assumptions: {_e(assumptions)}</p>")


def _study_privacy_section(resolved: dict[str, Any]) -> str:
    """Every run of the study trained on the same patients: what releasing them all together costs."""
    privacy = resolved.get("study_privacy")
    if not privacy:
        return ""
    return ('<h2 id="study-privacy">The study as a whole</h2><p>Every run trained on the same patients, so sharing '
            f"all of their models shares their composition: {_e(privacy['statement'])}.</p><p>Files that may be "
            "shared: everything in the study folder except <code>private/</code> (checkpoints, training-set "
            "statistics computed without noise, audit results, the log).</p>")


def write_private_report(resolved: dict[str, Any], items: dict[str, dict[str, Any]], path: Path) -> None:
    """private/report.html: the numbers no eps covers (training-set metrics computed without noise, one-run audit
    results that depend on the secret canary bits), per run. Never share it."""
    rows = []
    for run_id, item in items.items():
        parts = []
        if item.get("audit"):
            parts.append(f"<p>{_e(item['audit']['statement'])}</p>")
        metrics = (item.get("statistics") or {}).get("training_metrics")
        if metrics:
            shown = {k: v for k, v in metrics.items() if k.startswith("train_") and not k.endswith(("_low", "_high"))
                     and isinstance(v, float)}
            parts.append("<table>" + "".join(f"<tr><th>{_e(k)}</th><td class=num>{v:.4f}</td></tr>"
                                             for k, v in shown.items()) + "</table>")
        if parts:
            rows.append(f'<div class="card"><h3>{_e(run_id)}</h3>{"".join(parts)}</div>')
    doc = f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>dpmed private report: {_e(resolved['study']['name'])}</title><style>{_CSS}</style></head><body>
<h1>Private: {_e(resolved['study']['name'])}</h1>
<div class="note notdp">PRIVATE, NOT COVERED BY EPS. These numbers are computed from the training images without
noise (training-set metrics, as in the train/test table of 000_56c2431ae4df8d10.txt) or from the audit's secret canary
inclusion bits. Sharing them breaks the eps of the runs they describe. Keep this file in the study's private
folder.</div>
<div class="cards">{''.join(rows) or '<p>No private statistics were computed.</p>'}</div>
</body></html>"""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(doc, encoding="utf-8")
    tmp.replace(path)


def _examples_section(records: list[dict[str, Any]], runs_dir: Path, out_dir: Path) -> str:
    """Original versus perturbed images for each local-DP run (the visual point of 000_56c2431ae4df8d10.txt)."""
    rows = []
    for r in records:
        path = runs_dir / r["run_id"] / "ldp_examples.npz"
        if path.is_file():
            with np.load(path) as f:
                rows.append((f"{r['run_id']}\n{eps_text(r['privacy'])}", f["original"], f["perturbed"]))
    if not rows:
        return ""
    png = ldp_examples(rows)
    (out_dir / "ldp_examples.png").write_bytes(png)
    uri = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
    return ('<h2 id="ldp-examples">Local DP: what the released images look like</h2><p>The same test images '
            "before (top row) and after each local-DP run's mechanism. Each run applied its mechanism to its training "
            "images only; test images are shown here so the report contains no training image. "
            "Visual unrecognisability is not a privacy guarantee: read the eps on each card.</p>"
            f'<img src="{uri}" alt="original and perturbed example images" style="max-width:100%">')


def write_report(resolved: dict[str, Any], records: Iterable[dict[str, Any]], path: Path) -> None:
    """Write report.html (and the figure as PNG beside it) from the resolved study and the run records."""
    records = list(records)
    study, data = resolved["study"], resolved["dataset"]
    png = auroc_versus_epsilon(records)
    (path.parent / "auroc_vs_epsilon.png").write_bytes(png)
    uri = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
    synthetic = ('<div class="note">The data are the <b>phantom</b> chest X-rays embedded in dpmed: a synthetic '
                 "teaching and testing dataset. These numbers show how the tool works, not how a clinical model "
                 "behaves.</div>") if data["synthetic"] else ""
    util_rows = "".join(
        f"<tr><td>{_e(r['run_id'])}</td><td>{_e(r['mechanism'])}</td><td>{_e(eps_text(r['privacy']))}</td>"
        f"<td class=num>{_ci(r['metrics'], 'test_auroc')}</td><td class=num>{_ci(r['metrics'], 'test_accuracy')}</td>"
        f"<td class=num>{_ci(r['metrics'], 'test_sensitivity')}</td>"
        f"<td class=num>{_ci(r['metrics'], 'test_specificity')}</td>"
        f"<td class=num>{r['timing']['train_seconds']:.1f}</td></tr>" for r in records)
    arms = ", ".join(f"{a['name']} ({a['mechanism']})" for a in study["arms"])
    versions = records[0]["versions"] if records else {}
    level = f"{study['evaluation']['confidence']:.0%}"
    doc = f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>dpmed report: {_e(study['name'])}</title><style>{_CSS}</style></head><body>
<h1>What privacy costs: {_e(study['name'])}</h1>
<p>Written {_e(dt.datetime.now().isoformat(timespec='seconds'))} by dpmed {_e(versions.get('dpmed', ''))}.</p>
<h2 id="summary">Summary</h2>
<table><tr><th>dataset</th><td>{_e(data['name'])}: {data['n_train']} / {data['n_val']} / {data['n_test']}
train / validation / test images of shape {_e(tuple(data['image_shape']))}, task {_e(data['task'])}</td></tr>
<tr><th>model</th><td>{_e(study['model']['name'])}</td></tr><tr><th>arms</th><td>{_e(arms)}</td></tr>
<tr><th>seeds</th><td>{_e(study['seeds'])}</td></tr>
<tr><th>measured</th><td>test AUROC (macro), and accuracy, sensitivity and specificity at the Youden threshold
chosen on the validation split; {level} percentile intervals from {study['evaluation']['bootstrap_resamples']} paired
bootstrap redraws of the test set (seed {study['evaluation']['bootstrap_seed']})</td></tr></table>
{synthetic}<p>{_reading(records)}</p>
<h2 id="utility">Utility</h2>
<img src="{uri}" alt="test AUROC versus epsilon" style="max-width:100%">
<table><tr><th>run</th><th>mechanism</th><th>eps</th><th>test AUROC [{level} CI]</th><th>accuracy</th>
<th>sensitivity</th><th>specificity</th><th>train s</th></tr>{util_rows}</table>
<h2 id="privacy">Privacy cards</h2>
<p>Every eps names its delta, accountant and neighbour relation. Local DP (pixel noise) and DP-SGD protect against
different neighbours (any two images versus adding or removing one image from training), so their eps are not
directly comparable.</p>
<div class="cards">{''.join(_card(r) for r in records)}</div>
{_study_privacy_section(resolved)}
{_risk_section(records)}
{study_sections(resolved, records, path.parent)}
{_examples_section(records, path.parent / "runs", path.parent)}
<h2 id="provenance">Provenance</h2>
<table>{''.join(f'<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>' for k, v in versions.items())}</table>
<p>Wall time per run (seconds; a resumed run counts only its last session):</p>
<table><tr><th>run</th><th>training</th><th>total</th><th>device</th><th>resumed from</th></tr>{''.join(
    f"<tr><td>{_e(r['run_id'])}</td><td class=num>{r['timing']['train_seconds']:.1f}</td>"
    f"<td class=num>{r['timing'].get('total_seconds', float('nan')):.1f}</td><td>{_e(r['timing'].get('device', ''))}</td>"
    f"<td class=num>{r['timing'].get('resumed_from', 0)}</td></tr>" for r in records)}</table>
<p>Resolved study (every derived value included):</p>
<pre>{_e(yaml.safe_dump(resolved, sort_keys=False))}</pre>
</body></html>"""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(doc, encoding="utf-8")
    tmp.replace(path)
