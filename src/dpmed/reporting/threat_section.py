"""The report's section on the three threat models of Ziller et al. 2024 (004_6210268d59b6f8e5.txt): the worst-case and
relaxed reconstruction bounds beside the success rate of an actual attack (the realistic threat model), per DP-SGD
run with an attack, and the private figure of its best reconstructions.

The section shows counts and rates only (run.json's ``attack`` block). The attack's images (the attacked images and
their reconstructions, ``RunFolder.attack_images``) are patient images: :func:`reconstructions_figure` draws them
for the private report (private/report.html) and never for report.html.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

from dpmed import accounting
from dpmed.evaluation.proportions import clopper_pearson
from dpmed.numbers import confidence_text, percent_interval_text
from dpmed.mechanisms import ReconstructionRecord
from dpmed.records import AttackRecord, RunRecord
from dpmed.reporting.figures import png_bytes
from dpmed.reporting.inputs import (ReportInputs, bound_percent, eps_label, escape, estimate_text, no_bound_note,
                                    number_text, stacked)

__all__ = ["threat_section", "reconstructions_figure", "attack_label", "ATTACK_IMAGE_KEYS"]

# What RunFolder.attack_images holds (written by dpmed.run): [m, C, H, W] arrays in [0, 1] and SSIM [m], best first.
ATTACK_IMAGE_KEYS = ("originals", "reconstructions", "ssim")


def _percent(value: float | None) -> str:
    """A bound as a percentage with two significant figures below 1 % (eps 1's 0.05624 % is not "0.1%", and 0.030 %
    is not "0.0%", which reads as no risk at all), one decimal above; rounded up, as eps is: an upper bound shown
    shorter never looks smaller than it is (0.05624 % -> "0.057%")."""
    if value is None:
        return "–"
    if 0 < value < 0.01:
        return f"{number_text(100 * value, 2, up=True)}%"
    return bound_percent(value, 1)


def _step_kappa(risk: ReconstructionRecord, a: AttackRecord) -> float:
    """The prior at which the attacked step's bound holds: the larger of the run's kappa (1/N) and the upper end of
    the chance rate's interval. Hayes et al. 2023 bound success by a criterion against that criterion's own baseline;
    the attack's SSIM criterion is passed by plausible images that know nothing of the batch (the chance rate: the
    better of random public images and brightness-group medians, `dpmed.attack.experiment`), and
    where that beats 1/N a bound at 1/N can sit below what random images score: no yardstick for the attack. The
    chance rate is itself measured, so the upper end of its interval (at the record's CI level) is taken, which keeps
    the bound an upper bound. The record holds the rate of ``n_trials`` draws; the count is recovered from it."""
    chance_high = clopper_pearson(round(a.chance_rate * a.n_trials), a.n_trials, level=a.ci_level)[1]
    return max(risk.kappa, chance_high)


def _step_bound(risk: ReconstructionRecord, a: AttackRecord) -> float:
    """The worst-case bound of the game the attack plays: one step whose batch holds the image (q = 1, T = 1), at
    the run's sigma and the success criterion's prior (:func:`_step_kappa`). The run's bound averages over Poisson
    sampling across T steps (the image is in a batch with probability 1 - (1-q)^T), so it can lie below what an
    attack on a batch holding the image reaches."""
    kappa = _step_kappa(risk, a)
    if kappa >= 1:                  # every random image passed: no prior below certainty, and gamma >= kappa
        return 1.0
    return accounting.reconstruction_bound(noise_multiplier=risk.noise_multiplier, sample_rate=1.0,
                                           steps=1, kappa=kappa)


def _step_cell(r: RunRecord) -> str:
    """The attacked step's bound with the kappa it holds at, and where that kappa came from."""
    risk, a = r.reconstruction, r.attack
    if risk is None or a is None:
        return _percent(None)
    bound, kappa = _step_bound(risk, a), _step_kappa(risk, a)
    source = "1/N" if kappa == risk.kappa else "chance's upper end"
    return f"{_percent(bound)}<br><small>at kappa {kappa:.3g} ({source})</small>"


def _threshold_text(threshold: float) -> str:
    """The SSIM a success reached, to three decimals rounded down: 0.84602 shown as "0.85" said that reconstructions
    at 0.846 to 0.85, which the attack counted, did not pass; rounded down, every success reaches the value shown."""
    return f"{math.floor(threshold * 1000) / 1000:.3f}"


def _attack_cell(r: RunRecord, a: AttackRecord) -> str:
    """The attack's success with its interval and criterion, and what it says against chance and the bounds; ``a``:
    ``r``'s attack."""
    interval = percent_interval_text(a.rate_low, a.rate_high).replace(" ", "\u00a0")    # one line in its cell
    cell = (f"{a.rate:.1%} {interval}<br>"
            f"<small>{a.n_success} of {a.n_trials} images ({a.n_batches} batches of {a.batch_size}) at SSIM "
            f"&ge;\u00a0{_threshold_text(a.threshold)}</small>")
    if a.rate_low <= a.chance_rate:
        cell += "<br><small>not above chance</small>"
    if r.reconstruction is not None and a.rate_low > r.reconstruction.worst_case:
        cell += "<br><small>above the run's bound: compare with the attacked step's bound</small>"
    if r.reconstruction is not None and a.rate_low > _step_bound(r.reconstruction, a):
        cell += "<br><small>above the attacked step's bound: contradicts the bound, check the run</small>"
    return cell


@dataclass(frozen=True)
class _Criterion:
    """The success criterion as the section's prose states it: one value where every attacked run shares it, else
    what varies and that each row shows its own."""

    threshold: str
    one_in: str
    trials: str


def _criterion_words(attacks: Sequence[AttackRecord]) -> _Criterion:
    """Each run calibrates its own threshold (on its seed's null draws, for its batch size and quantile) and attacks
    its own number of batches: the prose quoted the first run's as every run's, which another seed or batch size
    makes false."""
    thresholds = sorted({_threshold_text(a.threshold) for a in attacks}, key=float)
    one_in = sorted({round(1 / (1 - a.threshold_quantile)) for a in attacks})
    trials = {(a.n_trials, a.n_batches, a.batch_size) for a in attacks}
    (n, batches, size), = trials if len(trials) == 1 else ((None, None, None),)
    return _Criterion(
        threshold=(f"SSIM {thresholds[0]}" if len(thresholds) == 1 else
                   f"its run's SSIM threshold ({thresholds[0]} to {thresholds[-1]}; each row shows its own)"),
        one_in=(f"1 in {one_in[0]}" if len(one_in) == 1 else f"1 in {one_in[0]} to 1 in {one_in[-1]}"),
        trials=(f"{n} per run, in {batches} batches of {size}" if n is not None else
                "each row shows how many, in how many batches of how many images"))


def threat_section(inputs: ReportInputs) -> str:
    """Per DP-SGD run with an attack: eps, the worst-case and relaxed bounds of the run, the worst-case bound of the
    attacked step (the image in the batch, one step, at the success criterion's prior), the imprint attack's success
    rate with its interval, the chance rate and the test AUROC; "" where no run was attacked."""
    attacked = [(r, a) for r in inputs.records if (a := r.attack) is not None]
    if not attacked:
        return ""
    rows = "".join(
        f"<tr><td>{escape(r.run_id)}</td><td class=eps>{escape(eps_label(r.privacy))}</td>"
        f"<td class=num>{_percent(r.reconstruction.worst_case if r.reconstruction else None)}</td>"
        f"<td class=num>{_percent(r.reconstruction.relaxed if r.reconstruction else None)}</td>"
        f"<td class=num>{_step_cell(r)}</td>"
        f"<td class=num>{_attack_cell(r, a)}</td>"
        f"<td class=num>{a.chance_rate:.1%}</td>"
        f"<td class=num>{estimate_text(r.estimate('test_auroc'))}</td></tr>" for r, a in attacked)
    first = attacked[0][1]
    criterion = _criterion_words([a for _, a in attacked])
    table = stacked("<table><tr><th>run</th><th>ε</th><th>worst case (bound, whole run)</th>"
                    "<th>relaxed (bound, whole run)</th>"
                    "<th>worst case (bound, attacked step, at the criterion's prior)</th>"
                    f"<th>realistic: attack success [{confidence_text(first.ci_level)} CI]</th><th>chance</th>"
                    f"<th>test AUROC [{inputs.level} CI]</th></tr>{rows}</table>")
    return (
        '<h2 id="threat">Three threat models: bounds and an actual attack</h2>'
        "<p>Ziller et al. 2024 judge an ε by three threat models. <b>Worst case</b> and <b>relaxed</b> are upper "
        "bounds on an informed attacker's chance to reconstruct one training record (Hayes et al. 2023; Kaissis et "
        "al. 2023; the section above). <b>Realistic</b> is the threat model of Ziller et al. 2024: an adversary who "
        "holds the model's architecture and weights and may modify the model before a training step, but does not "
        "hold the images, and must actually reconstruct them. dpmed mounts that attack: the imprint attack of Fowl "
        "et al. 2022 (a linear layer with brightness bins put in front of the model; each bin read with its "
        "brightness and a prior from the validation images: an assumption that the adversary holds images of the "
        "same kind, from other patients, never the training images), through dpmed's own DP-SGD "
        "step with each run's clipping norm, noise multiplier, expected batch size and unit of privacy, on batches "
        "of held-out test images standing in for a training batch (a rate measured on the training images would "
        "itself be a statistic of them, outside the accountant). Each image goes through that step once, as it is: "
        "the run's augmentation and its multiplicity K are left out, as training choices this adversary, who "
        "changes the model before the step, would make; averaging augmented copies would only blur what each bin "
        "reads, and K leaves the step's accounting, and so its bound, unchanged.</p>"
        "<p><b>Success</b>: each reconstruction is matched to its closest image of the batch by SSIM "
        "(structural similarity); an attacked image counts as reconstructed when it lay in that reconstruction's "
        "bin and its match reaches "
        f"{criterion.threshold}. That threshold is calibrated on public images (here the validation split), not "
        f"chosen: only {criterion.one_in} plausible images that carry no information about the batch reach it by "
        f"chance. Rates are per attacked image ({criterion.trials}), with exact (Clopper-Pearson) intervals; "
        "'chance' is what an attack that learned "
        "nothing scores when it answers, in place of the reconstructions, with as many validation images drawn at "
        f"random (about {criterion.one_in} per guess, by the threshold's construction) or with the median validation "
        "image of as many brightness groups (smooth, typical images, which SSIM rewards far more often), whichever "
        "found more over all batches. An attack whose interval reaches down to chance has shown no reconstruction.</p>"
        f"{table}{no_bound_note([r for r, _ in attacked], 'the bounds in the table are')}"
        "<p>What each number covers. The run's bounds are for a record Poisson-sampled at rate q over all T steps "
        "(it is in no batch at all with probability (1-q)^T) and for success as singling it out against the prior "
        "kappa. The attack puts every attacked image into the attacked batch and reads one step, so the bound of its "
        "game is the attacked step's (q = 1, T = 1, the same σ), which can be far above the run's (few epochs, "
        "high budgets). Its SSIM criterion also has a prior of its own: plausible images that carry nothing of the "
        "batch (random ones, or the median image of a brightness group) pass it at the chance rate, which can be far "
        "above kappa = 1/N, and Hayes et al. 2023's bound holds at "
        "the prior of the criterion it is applied to. The attacked step's bound is therefore taken at kappa = the "
        "larger of 1/N and the upper end of the chance rate's interval (shown under each value), never below what "
        "random images score. An attack rate above the run's bound is no contradiction by itself; one "
        "above the attacked step's bound would be. The bounds say what no attacker of their game can exceed; the "
        "attack says what one strong attacker achieves. Where the "
        "bounds reach 100 % and the attack still fails, the protection rests on the attack's failure, not on a "
        "guarantee. The reconstructed images are patient images: they are shown only in the study's private report "
        "(private/report.html), never in this file.</p>")


def reconstructions_figure(rows: Sequence[tuple[str, Mapping[str, np.ndarray]]], n: int = 6) -> bytes:
    """PNG: per attacked run (a label and its :data:`ATTACK_IMAGE_KEYS` arrays), its ``n`` best reconstructions
    (bottom) under the images they matched (top), each with its SSIM, the run's label above the pair of rows. The
    first channel is shown."""
    fig = Figure(figsize=(1.3 * n + 0.6, 3.0 * len(rows)), dpi=100, layout="constrained")
    for sub, (label, arrays) in zip(fig.subfigures(len(rows), 1, squeeze=False)[:, 0], rows):
        sub.suptitle(label.replace("\n", " · "), fontsize=10, x=0.01, ha="left")
        axes = sub.subplots(2, n, squeeze=False)
        for r, key in enumerate(("originals", "reconstructions")):
            axes[r][0].set_ylabel(("original", "reconstructed")[r], fontsize=9)
            for c in range(n):
                ax = axes[r][c]
                ax.set_xticks([])
                ax.set_yticks([])
                if c >= len(arrays[key]):
                    ax.set_frame_on(False)
                    continue
                ax.imshow(np.asarray(arrays[key][c, 0], dtype=np.float32), cmap="gray", vmin=0.0, vmax=1.0)
                if r == 1:
                    ax.set_xlabel(f"SSIM {float(arrays['ssim'][c]):.2f}", fontsize=9)
    return png_bytes(fig)


def attack_label(record: RunRecord) -> str:
    """A run's name on the figure: its id, eps, and the attack's successes with their rate. The count is exact:
    a whole percent read 1 success in 256 as "0%", no reconstruction at all."""
    a = record.attack
    rate = "" if a is None else f"\nattack success {a.n_success} of {a.n_trials} images ({a.rate:.1%})"
    return f"{record.run_id}\n{eps_label(record.privacy)}{rate}"
