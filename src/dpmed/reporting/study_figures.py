"""Figures of the fairness and interpretability sections, returned as PNG bytes (embedded and saved beside the report).

Kept apart from :mod:`dpmed.reporting.figures` (the utility and privacy figures) so each section's figures live with
the section that shows them; same conventions: matplotlib's object API, no pyplot global state, and a ``narrow``
layout for phones (:data:`~dpmed.reporting.figures.FONT`).
"""

from __future__ import annotations

import textwrap
from typing import Collection, Sequence

import numpy as np
from matplotlib.figure import Figure

from dpmed.evaluation.summaries import Estimate
from dpmed.reporting.figures import FONT, NARROW_INCHES, NOT_DP_MARKER, image_rows, plot_interval, png_bytes

__all__ = ["group_estimates", "group_figure", "cam_grid", "cam_grid_figure"]

# One shape per run beside its colour: printed in grey, or seen without red and green, runs told apart by colour alone
# would be one run (matplotlib's ten default colours, so the same ten shapes).
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")
# The plus, cross and star are all edge at this size: drawn hollow (a run not DP as run), their edges met and they
# looked filled, as a DP run's. Such a run takes an open shape of its own in their place.
_HOLLOW = {"P": "p", "X": "h", "*": "8"}


def group_estimates(groups: Sequence[str], series: Sequence[tuple[str, Sequence[Estimate | None]]], *,
                    ylabel: str, title: str, narrow: bool = False, not_dp: Collection[int] = ()) -> bytes:
    """:func:`group_figure` as PNG bytes."""
    return png_bytes(group_figure(groups, series, ylabel=ylabel, title=title, narrow=narrow, not_dp=not_dp))


def group_figure(groups: Sequence[str], series: Sequence[tuple[str, Sequence[Estimate | None]]], *,
                 ylabel: str, title: str, narrow: bool = False, not_dp: Collection[int] = ()) -> Figure:
    """One point with its interval per (run, group): groups on x, runs side by side within a group.

    ``series``: (run label, one estimate or None per group). Undefined values are left out. ``not_dp``: the
    indices in ``series`` of runs not DP as run (`~dpmed.reporting.figures.not_dp_as_run`), drawn hollow as in the
    AUROC-versus-eps figure, so no marker of theirs looks like a DP run's. The
    narrow layout (a phone) puts the groups on y and the values on x, so long group names and many runs still fit a
    358 px column."""
    dpi, size = FONT[narrow]
    width_inches = NARROW_INCHES if narrow else max(6.0, 1.2 * len(groups) + 3)
    # legend entries and the title wrap to the figure's width (a character is about 0.6 of the type size wide), so
    # none is cut off at the figure's edges; two legend columns only where every entry fits half the width
    wrap = int(width_inches * 72 / (0.6 * size)) - 6
    series = [("\n".join(textwrap.wrap(label, wrap)) or label, estimates) for label, estimates in series]
    title = "\n".join(textwrap.wrap(title, wrap)) or title
    columns = 2 if not narrow and all(len(label) <= wrap // 2 - 4 for label, _ in series) else 1
    lines = sum(label.count("\n") + 1 for label, _ in series)
    if narrow:
        fig = Figure(figsize=(width_inches, 0.45 * len(groups) * max(1, len(series)) ** 0.5 + 2.2 + 0.28 * lines),
                     dpi=dpi, layout="constrained")
    else:
        fig = Figure(figsize=(width_inches, 4.4 + 0.2 * -(-lines // columns)), dpi=dpi, layout="constrained")
    ax = fig.subplots()
    width = 0.8 / max(1, len(series))
    for k, (label, estimates) in enumerate(series):
        color, marker = f"C{k % 10}", _MARKERS[k % len(_MARKERS)]
        style = NOT_DP_MARKER if k in not_dp else {}
        marker = _HOLLOW.get(marker, marker) if style else marker
        legend: str | None = label                          # one legend entry per run: on its first point
        for i, est in enumerate(estimates):
            if est is None or est.value is None:
                continue
            point = plot_interval(ax, i - 0.4 + width * (k + 0.5), est.value, est.low, est.high,
                                  across=narrow, marker=marker, ms=5, color=color, **style)
            if legend is not None:
                point.set_label(legend)
                legend = None
    if narrow:
        ax.set_yticks(range(len(groups)))
        ax.set_yticklabels(groups)
        ax.invert_yaxis()                                   # first group on top, as in the tables
        ax.set_xlabel(ylabel, fontsize=size)
        ax.grid(alpha=0.3, axis="x")
    else:
        ax.set_xticks(range(len(groups)))
        ax.set_xticklabels(groups)
        ax.set_ylabel(ylabel, fontsize=size)
        ax.grid(alpha=0.3, axis="y")
    ax.tick_params(labelsize=size - 1)
    ax.set_title(title, fontsize=size)
    if ax.get_legend_handles_labels()[0]:   # no defined value drawn (a small test set): no legend, nor its warning
        fig.legend(fontsize=size - 1, loc="outside lower center", ncol=columns, frameon=False)
    return fig


def cam_grid(images: np.ndarray, masks: np.ndarray | None, rows: Sequence[tuple[str, np.ndarray]],
             column_titles: Sequence[str], *, narrow: bool = False) -> bytes:
    """:func:`cam_grid_figure` as PNG bytes."""
    return png_bytes(cam_grid_figure(images, masks, rows, column_titles, narrow=narrow))


def cam_grid_figure(images: np.ndarray, masks: np.ndarray | None, rows: Sequence[tuple[str, np.ndarray]],
                    column_titles: Sequence[str], *, narrow: bool = False) -> Figure:
    """The same test images in every column: first row the images (lesion mask outlined), then one row per run with
    its CAM over the image. ``images`` [n, C, H, W] in [0, 1] (first channel shown); each row's CAMs [n, H, W].
    The narrow layout shows the first three columns, with each row's label above it."""
    dpi, size = FONT[narrow]
    n = min(3, images.shape[0]) if narrow else images.shape[0]
    labelled = [("image (lesion mask)", None), *rows]
    if narrow:
        lines = sum(label.count("\n") + 1 for label, _ in labelled)
        fig = Figure(figsize=(NARROW_INCHES, 1.25 * len(labelled) + 0.22 * lines + 0.3), dpi=dpi,
                     layout="constrained")
    else:
        fig = Figure(figsize=(1.5 * n + 2.2, 1.5 * len(labelled)), dpi=dpi, layout="constrained")
    axes = image_rows(fig, [label for label, _ in labelled], n, narrow=narrow)
    for c in range(n):
        ax = axes[0][c]
        ax.imshow(images[c, 0], cmap="gray", vmin=0.0, vmax=1.0)
        if masks is not None and masks[c].any():
            ax.contour(masks[c].astype(float), levels=[0.5], colors="lime", linewidths=0.8)
        if not narrow:
            ax.set_title(column_titles[c], fontsize=size - 2)
        for r, (_label, cams) in enumerate(rows, start=1):
            axes[r][c].imshow(images[c, 0], cmap="gray", vmin=0.0, vmax=1.0)
            axes[r][c].imshow(cams[c].astype(np.float32), cmap="jet", vmin=0.0, vmax=1.0, alpha=0.45)
    for ax in (ax for row in axes for ax in row):
        ax.set_xticks([])
        ax.set_yticks([])
    return fig
