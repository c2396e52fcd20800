"""The report's privacy sections: a card per run (its statement first, its key facts in plain labels, every field
folded under it), the study's privacy as a whole, and the reconstruction and membership-inference bounds of each
DP-SGD run (METHODS.md s.7) with their assumptions. Each is a function of
:class:`~dpmed.reporting.inputs.ReportInputs` that returns HTML ("" where a study has nothing for it).

The cards show what the accountant wrote into run.json, in the symbols a reader knows (:func:`statement_text`),
and never a number smaller than was accounted: eps and delta are rounded up.
"""

from __future__ import annotations

import json
import re

from dpmed.mechanisms import ReconstructionRecord, claims_beyond
from dpmed.numbers import delta_number
from dpmed.records import RunRecord
from dpmed.reporting.inputs import (ReportInputs, accountant_name, bound_percent, eps_label, escape, facts_table,
                                    no_bound_note, number_text, runs_text, stacked)

__all__ = ["privacy_cards", "study_privacy_section", "reconstruction_risk", "statement_text"]


# A card's key facts, in the order a reader asks for them, with plain labels (the raw field names stay in the
# folded list of every field).
_FACTS = (("epsilon_image", "ε per image"), ("epsilon_pixel", "ε per pixel value"), ("epsilon", "ε"),
          ("delta", "δ"), ("accountant", "accountant"), ("unit", "unit of privacy"),
          ("n_units", "training units N (planned from)"),
          ("released_units", "released count (below the expected batch, which N then is)"),
          ("size_epsilon", "ε of the released count (included in ε)"),
          ("target_epsilon", "target ε"), ("noise_multiplier", "noise multiplier σ"),
          ("max_grad_norm", "clipping norm C"), ("sample_rate", "sampling rate q"), ("steps", "steps T"),
          ("scale_b", "Laplace scale b"), ("std", "Gaussian std s"), ("value_range_R", "pixel range R"),
          ("dimension_d", "values per image d"), ("epsilon_if_poisson", "ε if Poisson-sampled"))
_NOTES = (("scope", "scope"), ("neighbour_relation", "neighbours"), ("covers", "covers"), ("labels", "labels"),
          ("patients", "patients"), ("unit_note", "unit"), ("accountant_description", "accountant"),
          ("accountant_note", "accountant note"), ("sampling", "sampling"), ("noise", "noise"),
          ("clipping", "clipping"), ("randomness", "randomness"))


# A card's statement comes from its mechanism in plain ASCII (the prompt prints it too); the card shows the symbols
# and words a reader knows ("eps_image = 8,192" reads "ε per image = 8,192"). A word joined to a name by "-" or "."
# is part of a run id the statement names (an arm "eps-free" runs as "eps-free_seed0", "eps..x" as "eps..x_seed0"),
# and keeps its letters; a "." that ends a sentence does not join.
_ALONE = r"(?<![\w.-]){}(?![\w-]|\.[\w.-])"
_SYMBOLS = ((re.compile(_ALONE.format(r"eps_image = (\S+) per image")), r"ε per image = \1"),   # an older total
            (re.compile(_ALONE.format("eps_image")), "ε per image"),
            (re.compile(_ALONE.format("eps_pixel")), "ε per pixel value"), (re.compile(_ALONE.format("eps")), "ε"),
            (re.compile(_ALONE.format("delta")), "δ"), (re.compile(_ALONE.format("sigma")), "σ"),
            (re.compile(r"= infinity\b"), "= ∞"))


def statement_text(statement: str) -> str:
    """A card's statement with symbols for eps, delta and sigma, and no field names."""
    for pattern, symbol in _SYMBOLS:
        statement = pattern.sub(symbol, statement)
    return statement


def _fact(card, key: str) -> str | None:
    value = getattr(card, key)
    if key == "delta" and value is None and _states_an_epsilon(card):
        # a run.json edited by hand: a δ left out read as pure DP beside the ε ("every ε names its δ")
        return "unknown (the card states none)"
    if value is None or (key == "epsilon" and card.epsilon_image is not None):   # local DP: said per image
        return None
    if key == "accountant":
        return escape(accountant_name(value))
    if key == "unit":
        return f"one {escape(value)}"
    if key == "delta":
        return escape(delta_number(value))
    # eps rounded up: shorter, never smaller than accounted
    text = number_text(value, up=key.startswith(("epsilon", "target_epsilon", "size_epsilon")))
    # an accounted eps whose claim does not hold (noise below the sampler's reach, seed known) is no DP fact
    claimed = key in ("epsilon", "epsilon_image", "epsilon_pixel")
    return escape(f"{text} (as accounted; not DP)" if claimed and not card.is_dp else text)


def _states_an_epsilon(card) -> bool:
    """Whether ``card`` states an eps, which holds only with its delta: DP-SGD's, local DP's per image, or the one a
    Poisson-sampled run would have."""
    return any(getattr(card, key) is not None for key in ("epsilon", "epsilon_image", "epsilon_if_poisson"))


def _card(r: RunRecord) -> str:
    card = r.privacy
    facts = [(label, text) for key, label in _FACTS if (text := _fact(card, key)) is not None]
    if card.mechanism == "none":
        facts = [("ε", "∞ (no protection)")]
    cls = "statement" if card.is_dp else "statement notdp"
    # where the image is the unit, patients are drawn at rate m / the count of images, all their images canaries
    per_image = getattr(r.plan.privacy, "unit", "patient") == "image"
    audited = "" if r.audit is None else (
        f"<p>Audited with about {r.audit.n_canaries} {escape(r.audit.kind)} canaries (each training patient drawn at "
        + ("rate m / N images, every image of theirs a canary" if per_image else "rate m / N") + "); how many, and "
        "the result, are in the study's private report (private/report.html): they depend on the training set and "
        "the secret canary inclusion bits.</p>")
    notes = [(label, statement_text(getattr(card, key))) for key, label in _NOTES if getattr(card, key) is not None]
    if card.patient_guarantee is not None and card.patient_guarantee.statement:
        notes.append(("each patient", statement_text(card.patient_guarantee.statement)))
    # What an image-unit ε means for a patient is shown, not folded away: ε per image read as the patient's would
    # overstate the protection of every patient with several images.
    shown = [(label, text) for label, text in notes if label in ("unit", "each patient")]
    notes_html = "".join(f"<p><b>{label}:</b> {escape(text)}</p>" for label, text in notes
                         if (label, text) not in shown)
    unit_html = "".join(f'<p class="note"><b>{label}:</b> {escape(text)}</p>' for label, text in shown)
    raw = card.model_dump(mode="json", exclude_none=True)
    raw_html = "".join(f"<dt>{escape(k)}</dt><dd>{escape(json.dumps(v))}</dd>" for k, v in raw.items())
    more = ("<details><summary>What it covers, and every field (as in run.json)</summary>"
            f'{notes_html}<dl class="raw">{raw_html}</dl></details>')
    statement = escape(statement_text(card.statement))
    return (f'<div class="card"><h3>{escape(r.run_id)}</h3><p class="{cls}">{statement}</p>{unit_html}'
            f'{_start_note(r)}{audited}{facts_table(facts, f"{r.run_id}: privacy facts", "facts")}{more}</div>')


def _start_note(r: RunRecord) -> str:
    """Where a run that did not start from random weights started: the ε above covers only what followed."""
    start = r.start
    if start is None or start.weights is None or r.privacy.mechanism == "none":   # no ε to qualify
        return ""
    prior = (f"public pretraining on {start.pretraining.dataset}" if start.pretraining is not None
             else f"the weights {start.weights} ({start.trained_on})")
    return (f'<p class="note">Started from {escape(prior)} (<a href="#start">where the models started</a>): what the '
            "model learnt there is not covered by this ε.</p>")


def _claims_beyond(inputs: ReportInputs) -> str:
    """A warning where a finished run's card, written by an earlier dpmed, claims more than this version finds for
    the same run (`dpmed run` refuses to reuse such a run; the report of an old folder still shows its card)."""
    lines = [f"<li>{escape(r.run_id)}: {escape(claim)}</li>" for r in inputs.records
             for claim in claims_beyond(r.privacy, r.plan.privacy, r.ledger)]
    if not lines:
        return ""
    return ('<div class="flag"><p>⚠ These cards claim more than this version of dpmed finds for the same training, '
            f"from each run's own plan and privacy ledger:</p><ul>{''.join(lines)}</ul><p>Read those runs by this "
            "version's claim, or retrain them: delete their folders under runs/ and run the study again.</p></div>")


def privacy_cards(inputs: ReportInputs) -> str:
    return ('<h2 id="privacy">Privacy cards</h2><p>Every ε names its δ, accountant, unit and neighbour relation. '
            "Local DP (pixel noise) and DP-SGD protect against different neighbours (any two images versus adding or "
            "removing one patient or image from training), so their ε values are not directly comparable. Numbers "
            "are shown to three significant figures, ε and δ rounded up, never below what was accounted (an ε of "
            "0.9995 reads 1); every field at full precision is folded under each card.</p>"
            f'{_claims_beyond(inputs)}<div class="cards">{"".join(_card(r) for r in inputs.records)}</div>')


def study_privacy_section(inputs: ReportInputs) -> str:
    """Every run trained on the same patients: what releasing them all together costs, in the symbols the cards use
    (the statement is the terminal's, in ASCII)."""
    return ('<h2 id="study-privacy">The study as a whole</h2><p>Every run trained on the same patients, so sharing '
            f"all of their models shares their composition: "
            f"{escape(statement_text(inputs.resolved.study_privacy.statement))}.</p>"
            "<p>Files that may be shared: everything in the study folder except <code>private/</code> (checkpoints, "
            "training-set statistics computed without noise, audit results, the log). Shared, each run's own files "
            "keep the privacy its card states, all of them shared together keep only the study's total above, not "
            "the ε of any one card, and a run without privacy (ε = ∞) keeps none, its model and predictions "
            "included.</p>")


def reconstruction_risk(inputs: ReportInputs) -> str:
    """Reconstruction and membership-inference bounds per DP-SGD run (METHODS.md s.7), with their assumptions."""
    bounded = [(r, k) for r in inputs.records if (k := r.reconstruction) is not None]
    unbounded = _unbounded_runs(inputs.records, alone=not bounded)
    if not bounded:
        return f'<h2 id="risk">Reconstruction risk</h2>{unbounded}' if unbounded else ""
    rows = "".join(
        f"<tr><td>{escape(r.run_id)}</td><td>{escape(eps_label(r.privacy))}</td>"
        f"<td class=num>{100 * k.kappa:.3g}%</td>"       # a prior, not a bound: as it is, in percent
        f"<td class=num>{bound_percent(k.worst_case, 3)}"
        f"</td><td class=num>{bound_percent(k.relaxed, 3)}</td>"     # upper bounds: rounded up
        f"<td class=num>{bound_percent(k.tpr_at_fpr.get('0.001'), 2)}</td>"
        f"<td class=num>{bound_percent(k.tpr_at_fpr.get('0.01'), 2)}</td></tr>" for r, k in bounded)
    units = {k.unit for _, k in bounded}
    unit = f"{units.pop()}s" if len(units) == 1 else "records"
    return ('<h2 id="risk">Reconstruction risk</h2><p>Upper bounds on the success probability of an informed attacker '
            "reconstructing one training record (an image, or a patient where the card's unit is the patient; worst "
            "case, and relaxed: gradient sign unknown; prior kappa: the attacker's chance without the model), and "
            f"on membership inference (MIA): the share (TPR) of training {unit} an attacker can tell were in the "
            "training set while wrongly naming 0.1% or 1% (the FPR) of the others; from each run's DP-SGD "
            "trade-off curve.</p>"
            + stacked("<table><tr><th>run</th><th>ε</th><th>prior kappa</th><th>worst case</th><th>relaxed</th>"
                      f"<th>MIA TPR at FPR 0.1%</th><th>MIA TPR at FPR 1%</th></tr>{rows}</table>") +
            _released_alone(inputs.records) + _not_from_pld(bounded) + _risk_assumptions(bounded) + unbounded)


def _released_alone(records: list[RunRecord]) -> str:
    """Where the study has other runs: each bound is proved for one run's model, as its card's eps is, while every
    run trained on the same patients and the study folder shares their models together (`study_privacy_section`).
    Read alone, "upper bounds on the success probability" promised the bound to one who also sees the others."""
    if len(records) < 2:
        return ""
    bare = [r.run_id for r in records if not r.privacy.is_dp]
    return ("<p>Each bound is for an attacker who sees that run's model released alone. Every run of the study "
            "trained on the same patients: one who also sees other runs' models is bounded only by the study's "
            "composed privacy (the section 'The study as a whole')"
            + (f", and by nothing where those include a run without privacy ({runs_text(bare)})" if bare else "")
            + ".</p>")


def _not_from_pld(bounded: list[tuple[RunRecord, ReconstructionRecord]]) -> str:
    """A sentence naming the runs whose bounds came from RDP's delta rather than the PLD (beyond the steps a PLD
    composes, `dpmed.accounting.reconstruction`): looser upper bounds, which run.json labels ("RDP duality") and
    the section would otherwise show as if they were PLD's. ``bounded``: each run with its bounds."""
    rdp = [r.run_id for r, k in bounded
           if any(via.startswith("RDP duality") for via in (k.worst_case_via, k.relaxed_via,
                                                             *k.tpr_at_fpr_via.values()))]
    if not rdp:
        return ""
    from dpmed.accounting import accountant_info    # the ceiling the accountant applies, not a copy of its number

    return (f"<p>The bounds of {runs_text(rdp)} come from RDP's δ through the same duality, not from "
            f"the PLD, which composes at most {accountant_info('pld').max_steps:,.0f} steps: upper bounds still, "
            "looser than the PLD's would be (each value's method is in its run.json).</p>")


def _unbounded_runs(records: list[RunRecord], *, alone: bool = False) -> str:
    """A paragraph naming the DP-SGD runs the table leaves out, and why: the bounds are proved for Gaussian noise with
    Poisson sampling (`dpmed.accounting.reconstruction`), so a Laplace-noise or shuffled-batch run has none (before,
    such runs were left out without a word, as if the study had none). ``alone``: no run has a bound to show."""
    proved = "reconstruction and membership-inference bounds are" if alone else "the bounds above are"
    return no_bound_note(records, proved)


def _risk_assumptions(bounded: list[tuple[RunRecord, ReconstructionRecord]]) -> str:
    """The assumptions behind the bounds, once per unit of privacy (the target is an image or a patient), each
    quoted from a named run: the others of that unit differ only in their own kappa, q, T and sigma. ``bounded``:
    each run with its bounds."""
    first: dict[str, tuple[RunRecord, ReconstructionRecord]] = {}
    for r, k in bounded:
        first.setdefault(k.unit, (r, k))
    if len(first) == 1:
        r, k = next(iter(first.values()))
        return (f"<p>Assumptions (quoted from {escape(r.run_id)}; each run's kappa, q, T and σ are its own, in its "
                f"run.json): {escape(k.assumptions)}</p>")
    return "".join(f"<p>Assumptions with the {unit} as the unit (quoted from {escape(r.run_id)}; each run's kappa, q, "
                   f"T and σ are its own, in its run.json): {escape(k.assumptions)}</p>"
                   for unit, (r, k) in first.items())
