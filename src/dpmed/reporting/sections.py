"""The report's sections about every study: summary, utility, privacy cards, the study as a whole, reconstruction
risk, local-DP examples, provenance. Each is a function of :class:`~dpmed.reporting.inputs.ReportInputs` that
returns HTML ("" where a study has nothing for it)."""

from __future__ import annotations

import datetime as dt

import numpy as np
import yaml

from dpmed.records import RunRecord
from dpmed.reporting.figures import auroc_versus_epsilon, ldp_examples
from dpmed.reporting.inputs import ReportInputs, embed_png, escape, estimate_text
from dpmed.reporting.tables import eps_text

__all__ = ["summary", "utility", "privacy_cards", "study_privacy", "reconstruction_risk", "ldp_examples_section",
           "provenance"]


def _reading(records: list[RunRecord]) -> str:
    """A plain-language summary of the trade-off, from the numbers alone."""
    base = [e for e in (r.estimate("test_auroc") for r in records if r.mechanism == "none") if e.value is not None]
    if not base:
        return "This study has no non-private arm with a defined AUROC, so the cost of privacy has no baseline here."
    b = sum(e.value for e in base) / len(base)
    base_low = min(e.low for e in base)
    parts = [f"Without privacy the model reaches a test AUROC of {b:.3f}."]
    for r in records:
        if r.mechanism == "none":
            continue
        e = r.estimate("test_auroc")
        if e.value is None:
            parts.append(f"{escape(r.run_id)}: test AUROC undefined (one class only among its scores or labels).")
            continue
        verdict = ("its interval overlaps the non-private one" if e.high >= base_low
                   else "its whole interval lies below the non-private one")
        parts.append(f"{escape(r.run_id)} ({escape(eps_text(r.privacy))}): {e.value:.3f} ({e.value - b:+.3f}); "
                     f"{verdict}.")
    parts.append("Intervals are percentile bootstrap intervals over the test set; intervals that overlap do not "
                 "show that two arms are equal, nor that they differ.")
    return " ".join(parts)


def summary(inputs: ReportInputs) -> str:
    study, data = inputs.resolved.study, inputs.resolved.dataset
    arms = ", ".join(f"{a.name} ({a.mechanism})" for a in study.arms)
    synthetic = ('<div class="note">The data are the <b>phantom</b> chest X-rays embedded in dpmed: a synthetic '
                 "teaching and testing dataset. These numbers show how the tool works, not how a clinical model "
                 "behaves.</div>") if data.synthetic else ""
    return f"""<h2 id="summary">Summary</h2>
<table><tr><th>dataset</th><td>{escape(data.name)}: {data.n_train} / {data.n_val} / {data.n_test}
train / validation / test images of shape {escape(tuple(data.image_shape))} ({data.n_train_patients} training
patients), task {escape(data.task)}</td></tr>
<tr><th>model</th><td>{escape(study.model.name)}</td></tr><tr><th>arms</th><td>{escape(arms)}</td></tr>
<tr><th>seeds</th><td>{escape(study.seeds)}</td></tr>
<tr><th>measured</th><td>test AUROC (macro), and accuracy, sensitivity and specificity at the Youden threshold
chosen on the validation split; {inputs.level} percentile intervals from {study.evaluation.bootstrap_resamples} paired
bootstrap redraws of the test set (seed {study.evaluation.bootstrap_seed})</td></tr></table>
{synthetic}<p>{_reading(inputs.records)}</p>"""


def utility(inputs: ReportInputs) -> str:
    figure = embed_png(auroc_versus_epsilon(inputs.records), inputs.folder.root / "auroc_vs_epsilon.png",
                       "test AUROC versus epsilon")
    rows = "".join(
        f"<tr><td>{escape(r.run_id)}</td><td>{escape(r.mechanism)}</td><td>{escape(eps_text(r.privacy))}</td>"
        + "".join(f"<td class=num>{estimate_text(r.estimate(m))}</td>"
                  for m in ("test_auroc", "test_accuracy", "test_sensitivity", "test_specificity"))
        + f"<td class=num>{r.timing.train_seconds:.1f}</td></tr>" for r in inputs.records)
    return (f'<h2 id="utility">Utility</h2>{figure}<table><tr><th>run</th><th>mechanism</th><th>eps</th>'
            f"<th>test AUROC [{inputs.level} CI]</th><th>accuracy</th><th>sensitivity</th><th>specificity</th>"
            f"<th>train s</th></tr>{rows}</table>")


def _card(r: RunRecord) -> str:
    card = r.privacy
    fields = card.model_dump(exclude={"statement", "mechanism"}, exclude_none=True)
    rows = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in fields.items())
    cls = "" if card.is_dp else ' class="notdp"'
    audited = "" if r.audit is None else (
        f"<p>Audited with {r.audit.n_canaries} {escape(r.audit.kind)} canaries; the result is in the study's private "
        "report (private/report.html): it depends on the secret canary inclusion bits.</p>")
    return (f'<div class="card"><h3>{escape(r.run_id)}</h3><p{cls}>{escape(card.statement)}</p>{audited}'
            f"<table>{rows}</table></div>")


def privacy_cards(inputs: ReportInputs) -> str:
    return ('<h2 id="privacy">Privacy cards</h2><p>Every eps names its delta, accountant, unit and neighbour relation. '
            "Local DP (pixel noise) and DP-SGD protect against different neighbours (any two images versus adding or "
            "removing one patient or image from training), so their eps are not directly comparable.</p>"
            f'<div class="cards">{"".join(_card(r) for r in inputs.records)}</div>')


def study_privacy(inputs: ReportInputs) -> str:
    """Every run trained on the same patients: what releasing them all together costs."""
    return ('<h2 id="study-privacy">The study as a whole</h2><p>Every run trained on the same patients, so sharing '
            f"all of their models shares their composition: {escape(inputs.resolved.study_privacy.statement)}.</p>"
            "<p>Files that may be shared: everything in the study folder except <code>private/</code> (checkpoints, "
            "training-set statistics computed without noise, audit results, the log).</p>")


def reconstruction_risk(inputs: ReportInputs) -> str:
    """Reconstruction and membership-inference bounds per DP-SGD run (METHODS.md s.7), with their assumptions."""
    runs = [r for r in inputs.records if r.reconstruction is not None]
    if not runs:
        return ""
    rows = "".join(
        f"<tr><td>{escape(r.run_id)}</td><td>{escape(eps_text(r.privacy))}</td>"
        f"<td class=num>{r.reconstruction.kappa:.3g}</td><td class=num>{r.reconstruction.worst_case:.3%}</td>"
        f"<td class=num>{r.reconstruction.relaxed:.3%}</td>"
        f"<td class=num>{r.reconstruction.tpr_at_fpr.get('0.001', 0):.2%}</td>"
        f"<td class=num>{r.reconstruction.tpr_at_fpr.get('0.01', 0):.2%}</td></tr>" for r in runs)
    return ('<h2 id="risk">Reconstruction risk</h2><p>Upper bounds on the success probability of an informed attacker '
            "reconstructing one training record (an image, or a patient where the card's unit is the patient; worst "
            "case, and relaxed: gradient sign unknown), and the best possible membership-inference TPR at a fixed "
            "FPR, from each run's DP-SGD trade-off curve.</p>"
            "<table><tr><th>run</th><th>eps</th><th>prior kappa</th><th>worst case</th><th>relaxed</th>"
            f"<th>MIA TPR at FPR 0.1%</th><th>MIA TPR at FPR 1%</th></tr>{rows}</table>"
            f"<p>Assumptions: {escape(runs[-1].reconstruction.assumptions)}</p>")


def ldp_examples_section(inputs: ReportInputs) -> str:
    """Original versus perturbed images for each local-DP run (the visual point of 000_56c2431ae4df8d10.txt)."""
    rows = []
    for r in inputs.records:
        path = inputs.folder.run(r.run_id).examples
        if path.is_file():
            with np.load(path) as f:
                rows.append((f"{r.run_id}\n{eps_text(r.privacy)}", f["original"], f["perturbed"]))
    if not rows:
        return ""
    figure = embed_png(ldp_examples(rows), inputs.folder.root / "ldp_examples.png",
                       "original and perturbed example images")
    return ('<h2 id="ldp-examples">Local DP: what the released images look like</h2><p>The same test images '
            "before (top row) and after each local-DP run's mechanism. Each run applied its mechanism to its training "
            "images only; test images are shown here so the report contains no training image. "
            f"Visual unrecognisability is not a privacy guarantee: read the eps on each card.</p>{figure}")


def provenance(inputs: ReportInputs) -> str:
    versions = inputs.records[0].versions if inputs.records else {}
    timing = "".join(f"<tr><td>{escape(r.run_id)}</td><td class=num>{r.timing.train_seconds:.1f}</td>"
                     f"<td class=num>{r.timing.total_seconds:.1f}</td><td>{escape(r.timing.device)}</td>"
                     f"<td class=num>{r.timing.threads}</td><td class=num>{r.timing.resumed_from}</td></tr>"
                     for r in inputs.records)
    resolved = yaml.safe_dump(inputs.resolved.model_dump(mode="json"), sort_keys=False)
    return (f'<h2 id="provenance">Provenance</h2><p>Written {escape(dt.datetime.now().isoformat(timespec="seconds"))} '
            f"by dpmed {escape(versions.get('dpmed', ''))}.</p><table>"
            + "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in versions.items())
            + "</table><p>Wall time per run (seconds; a resumed run counts only its last session):</p>"
            "<table><tr><th>run</th><th>training</th><th>total</th><th>device</th><th>threads</th><th>resumed from"
            f"</th></tr>{timing}</table><p>Resolved study (every derived value included):</p>"
            f"<pre>{escape(resolved)}</pre>")
