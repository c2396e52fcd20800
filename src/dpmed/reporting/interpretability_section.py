"""The report's interpretability section: how faithful each run's Grad-CAM maps are, and the maps themselves.

What is shown (METHODS.md sec. 6): Grad-CAM's faithfulness metrics of Naidu et al. 2021 (001_d0483fd35863b74c.txt)
and, on the phantom, lesion-mask energy and pointing game, each with its bootstrap interval; Pearson r between a
swept setting and each metric (computed before rendering: `dpmed.comparisons`); a grid of the same test images
explained by every run, from each run's ``cams.npz``.
"""

from __future__ import annotations

import numpy as np

from dpmed.evaluation.faithfulness import METRIC_LABELS
from dpmed.evaluation.summaries import Explanations
from dpmed.folders import CAM_KEYS
from dpmed.records import RunRecord
from dpmed.reporting.inputs import (ReportInputs, column_table, embed_figure, eps_label, escape as _e,
                                    estimate_text as _est, not_computed_text, r_and_p, read_figure_arrays, stacked)
from dpmed.reporting.study_figures import cam_grid

__all__ = ["interpretability_section"]

CAM_GRID_COLUMNS = 8
_SHORT = {"average_drop": "Average Drop %", "increase_in_confidence": "Increase in Confidence %",
          "masked_input_score": "masked-input score %*", "deletion_auc": "deletion AUC",
          "insertion_auc": "insertion AUC",
          "mask_energy": "lesion-mask energy", "pointing_game": "pointing game"}
_PERCENT = ("average_drop", "increase_in_confidence", "masked_input_score")     # shown with two decimals


def _grid(runs: list[RunRecord], inputs: ReportInputs) -> str:
    by_id = {r.run_id: r for r in runs}
    arrays, unread = read_figure_arrays(((r.run_id, inputs.folder.run(r.run_id).cams) for r in runs),
                                        CAM_KEYS, "the CAM grid", inputs.folder)
    loaded = [(by_id[run_id], a) for run_id, a in arrays]
    if not loaded:
        return unread
    first = loaded[0][1]
    positions = first["positions"]
    masks = first.get("masks")
    has_lesion = (masks.reshape(len(masks), -1).any(axis=1) if masks is not None
                  else np.zeros(len(positions), bool))
    order = np.r_[np.flatnonzero(has_lesion), np.flatnonzero(~has_lesion)][:CAM_GRID_COLUMNS]   # lesions first
    rows = [(f"{r.run_id}\n{eps_label(r.privacy)}", a["cams"][order]) for r, a in loaded
            if np.array_equal(a["positions"], positions)]
    titles = [f"test #{int(positions[i])}" for i in order]
    images, shown_masks = first["images"][order].astype(np.float32), None if masks is None else masks[order]
    figure = embed_figure(cam_grid(images, shown_masks, rows, titles),
                          cam_grid(images, shown_masks, rows, titles, narrow=True),
                          inputs.folder.root / "cam_grid.png",
                          f"Grad-CAM maps of the test images {', '.join(titles)} (columns): the top row the images "
                          + ("with their lesion masks outlined" if masks is not None else "themselves")
                          + ", then one row per run: " + "; ".join(label.replace("\n", ", ") for label, _ in rows))
    return ("<p>The same test images explained by every run (Grad-CAM of the explained class, named above, over the "
            "image; top row: the image with its lesion mask outlined, where the dataset has masks; a phone shows the "
            f"first three).</p><figure>{figure}</figure>{unread}")


def _lesion_target(explanations: Explanations) -> str:
    """What the lesion maps explain: "class 1", or a multilabel run's sum of every finding's score."""
    return explanations.lesion_target or f"class {explanations.lesion_class}"


def _flat_scores(record: RunRecord, explanations: Explanations) -> bool:
    """A binary run whose every explained image's predicted-class score lies within 0.05 of chance, 0.5 (a model
    that is never confident, whatever it ranks): the confidence metrics have next to nothing to measure. The class is
    the one the validation threshold decides, so Y may lie below 0.5 as well as above. Other tasks: chance is not
    0.5 (1/K for K classes), and no run is flagged. ``explanations``: ``record``'s."""
    lo, hi = explanations.score_image_min, explanations.score_image_max
    return record.data.task == "binary" and lo is not None and hi is not None and lo > 0.45 and hi < 0.55


def interpretability_section(inputs: ReportInputs) -> str:
    explained = [(r, e) for r in inputs.records if (e := r.explanations) is not None]
    if not explained:
        return ""
    runs = [r for r, _ in explained]
    level = inputs.level
    metrics = list(dict.fromkeys(m for _, e in explained for m in e.metrics))
    head = "".join(f"<th>{_e(_SHORT.get(m, m))}</th>" for m in metrics)
    rows = "".join(
        f"<tr><td>{_e(r.run_id)}</td><td>{_e(eps_label(r.privacy))}</td>"
        + "".join(f"<td class=num>{_est(e.metrics.get(m), 2 if m in _PERCENT else 3)}</td>"
                  for m in metrics) + "</tr>" for r, e in explained)
    e0 = explained[0][1]
    notes = [f"{_e(e0.method)} ({_e(e0.method_reference)}) at layer <code>{_e(e0.target_layer)}"
             f"</code>, class: {_e(e0.explained_class)}, on {e0.n_images} test images drawn once "
             f"(seed {e0.image_seed}) and shared by every run; {level} percentile bootstrap intervals "
             + ("over those images' patients (each drawn patient with all of their explained images)."
                if e0.bootstrap_unit == "patient" else "over those images.")]
    notes += [f"{_e(_SHORT.get(m, m))}: {_e(METRIC_LABELS.get(m, ''))}." for m in metrics]
    if {"deletion_auc", "insertion_auc"} & set(metrics):
        notes.append(f"Deletion and insertion take the pixels in order of the CAM in {e0.deletion_steps} equal steps, "
                     f"a deleted pixel (or one not yet inserted) set to {_e(e0.baseline)}; the AUC is that of the "
                     "explained class's score against the share of pixels taken (trapezoid rule).")
    if "pointing_game" in metrics and e0.pointing_tolerance_px is not None:
        notes.append(f"Pointing game: a hit where the CAM's peak lies within {e0.pointing_tolerance_px:g} px of the "
                     "lesion mask (0: inside it).")
    if e0.n_masked_images:
        notes.append(f"Lesion-mask energy and pointing game use the CAM of {_e(_lesion_target(e0))} on the "
                     f"{e0.n_masked_images} explained images with a lesion mask; a uniform CAM would put "
                     f"{e0.mask_area_share or 0:.3f} of its energy in the mask (chance level).")
    flat = [r.run_id for r, e in explained if _flat_scores(r, e)]
    if flat:
        notes.append("Predicted-class scores Y that hardly vary (within 0.05 of chance for every explained image) in: "
                     + ", ".join(flat) + ". Masking can then move Y only a little, so Average Drop, Increase in "
                     "Confidence, the masked-input score and deletion/insertion AUC say little about the CAM for "
                     "these runs; lesion-mask energy and pointing game do not depend on Y's size.")
    # A collapsed run scores best on the confidence metrics (masking leaves its one class's score as high or
    # raises it), so the warning the utility sections give must stand beside these numbers too.
    collapsed = [r.run_id for r in runs if any(f.kind == "one_class" for f in inputs.comparisons.flags_of(r.run_id))]
    if collapsed:
        notes.append("Runs that decide one class for every test image: " + _e(", ".join(collapsed)) + ". Their "
                     "maps explain a decision that no image changes, so a low Average Drop or a high Increase in "
                     "Confidence there shows that masking leaves that class's score as high, not that the map "
                     "found what the model looked at.")
    # Each count with the metrics that read its maps: the predicted-class maps feed the confidence and
    # deletion/insertion metrics, the lesion-class maps (records before them lack the count) energy and pointing.
    zero = [f"{_e(r.run_id)}: {e.n_zero_cams} of {e.n_images}" for r, e in explained if e.n_zero_cams]
    if zero:
        notes.append("All-zero CAMs of the explained class (no positive evidence anywhere), which Average Drop, "
                     "Increase in Confidence, the masked-input score and deletion/insertion AUC read (the masked "
                     "input is then a black image, and deletion and insertion take the pixels in raster order): "
                     + ", ".join(zero) + ".")
    lesion_zero = [f"{_e(r.run_id)}: {e.n_zero_lesion_cams} of {e.n_masked_images}" for r, e in explained
                   if e.n_zero_lesion_cams]
    if lesion_zero:
        notes.append(f"All-zero CAMs of {_e(_lesion_target(e0))} on the explained images with a lesion mask, "
                     "which lesion-mask energy and the pointing game read (such a map scores 0 energy and misses): "
                     + ", ".join(lesion_zero) + ".")
    correlations = inputs.comparisons.correlations
    corr = correlations.epsilon_vs_explanations + correlations.max_grad_norm_vs_explanations
    corr_html = ""
    undefined = not_computed_text(corr, "metrics and sweeps") if corr else None
    if undefined:
        corr_html = ("<p>Pearson r between the swept setting (log10 ε, or the clipping norm at fixed ε) and "
                     f"each metric: {_e(undefined)}.</p>")
    elif corr:
        corr_rows = "".join(f"<tr><td>{_e(c.sweep)}</td><td>{_e(_SHORT.get(c.metric, c.metric))}</td>"
                            f"<td class=num>{r_and_p(c)[0]}</td><td class=num>{r_and_p(c)[1]}</td>"
                            f"<td class=num>{c.n}</td></tr>" for c in corr)
        corr_html = ("<p>Pearson r between the swept setting (log10 ε, or the clipping norm at fixed ε) and "
                     "each metric:</p>" + column_table(("sweep", "metric", "r", "p", "n"), corr_rows))
    return ('<h2 id="interpretability">Interpretability</h2>'
            + stacked(f"<table><tr><th>run</th><th>ε</th>{head}</tr>{rows}</table>")
            + f"<ul>{''.join(f'<li>{n}</li>' for n in notes)}</ul>{corr_html}{_grid(runs, inputs)}")
