"""The report's section on how each arm trained: one row per arm with the settings that shape its model, each marked
where it is dpmed's default, and where the study says its settings were chosen.

Why a section: the report measures the cost of privacy under one training recipe, and a weak recipe overstates it (De,
Berrada, Hayes, Smith, Balle 2022). A reader must see that recipe without reading study.yaml, and which of its
settings the study chose rather than inherited, to weigh the study's statement of what they were chosen on
(Papernot and Steinke 2022: a search on the private patients spends privacy that no eps covers). Settings that change
nothing under an arm's other choices (momentum under Adam, a step schedule's milestones under another schedule) are
left out, and so are those that change no number (physical batch, engine, device, threads). The exact number of
steps of an arm without DP-SGD is left out too: it follows from the exact training size, which DP-SGD's eps protects.
"""

from __future__ import annotations

from dpmed.config import TrainingConfig
from dpmed.mechanisms import Arm, DpSgdArm, DpSgdPlan, length_text
from dpmed.numbers import count_text, delta_number, epsilon_text, number_text
from dpmed.reporting.inputs import ReportInputs, escape, stacked

__all__ = ["recipe_section", "settings_chosen_on"]

_DEFAULT = TrainingConfig()
_COLUMNS = ("arm", "optimiser", "learning rate", "schedule", "length", "batch", "augmentation",
            "released weights", "weight decay", "privacy settings")


def _marked(text: str, default: bool) -> str:
    """The escaped setting, in bold where the study chose it (it differs from dpmed's default)."""
    return escape(text) if default else f"<b>{escape(text)}</b>"


def _learning_rate(t: TrainingConfig) -> str:
    if t.lr_scaling == "none":
        return _marked(f"{t.learning_rate:g}", t.learning_rate == _DEFAULT.learning_rate)
    factor = "B" if t.lr_scaling == "linear" else "√B"
    reference = "" if t.lr_scaling == "linear" else "√"
    return _marked(f"{t.learning_rate:g} × {factor} / {reference}{t.reference_batch_size} = "
                   f"{number_text(t.scaled_learning_rate)} ({t.lr_scaling} scaling with the batch B = {t.batch_size})",
                   False)


def _schedule(t: TrainingConfig) -> str:
    s = t.lr_schedule
    kind = {"constant": "constant", "cosine": "cosine decay to 0",
            "step": f"× {s.gamma:g} at {', '.join(f'{m:.0%}' for m in s.milestones)} of the steps"}[s.kind]
    warmup = f", after a linear warm-up over the first {s.warmup_fraction:.0%}" if s.warmup_fraction else ""
    return _marked(kind + warmup, s.kind == "constant" and not s.warmup_fraction)


def _length(t: TrainingConfig, dp: list[DpSgdPlan]) -> str:
    text = _marked(length_text(epochs=t.epochs, steps=t.steps), t.steps is None and t.epochs == "auto")
    if dp and t.steps is None:     # DP-SGD's T is public: planned from the DP count, on every card
        steps = sorted({p.steps for p in dp})
        text += escape(f"; T = {' or '.join(map(str, steps))} step{'' if steps == [1] else 's'}, planned from "
                       f"{_counted(dp)}")
    return text


def _batch(t: TrainingConfig, dp: list[DpSgdPlan]) -> str:
    if not dp:
        return _marked(f"{t.batch_size} images, shuffled", t.batch_size == _DEFAULT.batch_size)
    if dp[0].sampling != "poisson":     # fixed batches of q times the exact size: about B, not an expectation
        return _marked(f"about {t.batch_size} {dp[0].unit}s per batch (shuffled: not DP)", False)
    rates = " or ".join(sorted({number_text(p.sample_rate) for p in dp}))
    return _marked(f"{t.batch_size} {dp[0].unit}s expected (Poisson, q = {rates})",
                   t.batch_size == _DEFAULT.batch_size)


def _augmentation(t: TrainingConfig, size: int, dp: bool) -> str:
    a = t.augmentation
    if a is None:
        return _marked("none", True)
    padding = a.padding(size)
    parts = [f"{a.multiplicity} copies of each image, averaged" + (" before clipping" if dp else "")
             if a.multiplicity > 1 else "one copy of each image"]
    parts.append(f"random crops after {padding} px of reflect padding" if padding else "no crops")
    if a.flip:
        parts.append("horizontal flips")
    return _marked(", ".join(parts), False)


def _privacy(arm: Arm, dp: list[DpSgdPlan]) -> str:
    """A DP-SGD arm's settings beside its budget: C, delta (the rule or the given value), accountant, noise and unit;
    for the other arms, where their settings are read."""
    if not isinstance(arm, DpSgdArm) or not dp:
        return "none" if arm.mechanism == "none" else "on each run's privacy card"

    def part(key: str, text: str) -> str:
        default = DpSgdArm.model_fields[key].get_default(call_default_factory=True)
        return _marked(text, getattr(arm, key) == default)

    deltas = " or ".join(sorted({delta_number(p.delta) for p in dp}))
    delta = (f"δ = min(1e-5, 1 / (10 N)) = {deltas}, N {_counted(dp)}" if arm.delta is None else f"δ = {deltas}")
    return "; ".join([part("max_grad_norm", f"C = {', '.join(f'{c:g}' for c in arm.max_grad_norm)}"),
                      part("delta", delta), part("accountant", _accountants(arm, dp)),
                      part("noise", f"{arm.noise} noise"), _marked(*_unit(arm, dp))])


def _counted(dp: list[DpSgdPlan]) -> str:
    """What N was: the DP count of the units, or (runs of a dpmed before that count) the exact size, taken as public."""
    return "the released count" if all(p.size_epsilon > 0 for p in dp) else "the training set's size"


def _accountants(arm: DpSgdArm, dp: list[DpSgdPlan]) -> str:
    """The accountants that certified the runs: the arm's, or the one a budget beyond its reach fell back to (PLD
    above eps 500 or below its delta floor: `dpmed.accounting.effective_accountant`), which each card names."""
    used = list(dict.fromkeys(p.accountant for p in dp))
    if used == [arm.accountant]:
        return f"{arm.accountant.upper()} accountant"
    fallen = [p for p in dp if p.accountant != arm.accountant]
    targets = ", ".join(epsilon_text(p.target_epsilon) for p in fallen if p.target_epsilon is not None)
    other = " or ".join(dict.fromkeys(p.accountant.upper() for p in fallen))
    return (f"{arm.accountant.upper()} accountant; {other} for the runs it cannot certify"
            + (f" (ε {targets})" if targets else "") + ", as their cards say")


def _unit(arm: DpSgdArm, dp: list[DpSgdPlan]) -> tuple[str, bool]:
    """The unit the runs trained with (an image where the arm asks for the patient but the data name none), with any
    cap on each patient's images, which changes the training set; and whether that is all dpmed's default."""
    unit, cap = dp[0].unit, dp[0].max_images_per_patient
    text = f"unit: one {unit}"
    if unit != arm.privacy_unit and not dp[0].patients_known:
        text += " (the data name no patients, so each image is its own)"
    if cap is not None:
        text += f", at most {count_text(cap, 'image')} of each patient"
    return text, arm.privacy_unit == "patient" and cap is None


def settings_chosen_on(inputs: ReportInputs) -> str:
    """The study's statement of where its settings came from: a search on the private data is not in any eps."""
    said = inputs.resolved.study.settings_chosen_on
    cost = ("picked by comparing results on these patients spend privacy that no ε of this report covers (Papernot "
            "and Steinke 2022)")
    if said is None:
        return ("<p><b>Settings chosen on:</b> not stated (the study file's <code>settings_chosen_on</code>). Learning "
                f"rates, clipping norm, batch size or training length {cost}.</p>")
    return (f"<p><b>Settings chosen on:</b> {escape(said)} (the study's own statement). Settings {cost}.</p>")


def recipe_section(inputs: ReportInputs) -> str:
    """One row per arm of the study file, from its planned runs (all of an arm's runs train alike: a sweep varies
    privacy settings only)."""
    study = inputs.resolved.study
    size = min(inputs.resolved.dataset.image_shape[1:])
    rows = []
    for arm in study.arms:
        plans = [p for p in inputs.resolved.runs if p.arm == arm.name]
        if not plans:
            continue
        t = plans[0].training
        dp = [p.privacy for p in plans if isinstance(p.privacy, DpSgdPlan)]     # the arm's DP-SGD plans, if any
        optimiser = _marked("Adam" if t.optimizer == "adam" else f"SGD, momentum {t.momentum:g}",
                            t.optimizer == _DEFAULT.optimizer)
        ema = (_marked("the last iterate", True) if t.ema_decay is None
               else _marked(f"moving average of the iterates, decay {t.ema_decay:g}", False))
        cells = [f"{escape(arm.name)} ({escape(plans[0].mechanism)})", optimiser, _learning_rate(t), _schedule(t),
                 _length(t, dp), _batch(t, dp), _augmentation(t, size, bool(dp)), ema,
                 _marked(f"{t.weight_decay:g}", t.weight_decay == _DEFAULT.weight_decay), _privacy(arm, dp)]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th>{c}</th>" for c in _COLUMNS)
    return ('<h2 id="recipe">How each arm trained</h2><p>The settings each arm trained with, as the study resolved '
            "them (every key is in the study file under Provenance). In bold: what the study chose; the rest are "
            "dpmed's defaults, which the study file left unset or restated. Left out: settings that change nothing "
            "here (momentum under Adam, the milestones of a schedule that has none) or change no number (physical "
            "batch, engine, device, threads).</p>"
            + stacked(f"<table><tr>{head}</tr>{''.join(rows)}</table>") + settings_chosen_on(inputs))
