"""Figures of the fairness and interpretability sections, returned as PNG bytes (embedded and saved beside the report).

Kept apart from :mod:`dpmed.reporting.figures` (the utility and privacy figures) so each section's figures live with
the section that shows them; same conventions: matplotlib's object API, no pyplot global state.
"""

from __future__ import annotations

import io
from typing import Sequence

import numpy as np
from matplotlib.figure import Figure

__all__ = ["group_estimates", "cam_grid"]


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def group_estimates(groups: Sequence[str], series: Sequence[tuple[str, Sequence[dict | None]]], *,
                    ylabel: str, title: str) -> bytes:
    """One point with its interval per (run, group): groups on x, runs side by side within a group.

    ``series``: (run label, one {"value", "low", "high"} or None per group). Undefined values are left out."""
    fig = Figure(figsize=(max(6.0, 1.2 * len(groups) + 3), 4.2), dpi=110)
    ax = fig.subplots()
    width = 0.8 / max(1, len(series))
    for k, (label, estimates) in enumerate(series):
        xs, ys, lo, hi = [], [], [], []
        for i, est in enumerate(estimates):
            if not est or est.get("value") is None:
                continue
            v = est["value"]
            xs.append(i - 0.4 + width * (k + 0.5))
            ys.append(v)
            lo.append(v - est["low"] if est.get("low") is not None else 0.0)
            hi.append(est["high"] - v if est.get("high") is not None else 0.0)
        ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o", ms=4, capsize=2, label=label)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2, frameon=False)   # below the axes
    fig.set_figheight(4.2 + 0.18 * ((len(series) + 1) // 2))
    fig.tight_layout()
    return _png(fig)


def cam_grid(images: np.ndarray, masks: np.ndarray | None, rows: Sequence[tuple[str, np.ndarray]],
             column_titles: Sequence[str]) -> bytes:
    """The same test images in every column: first row the images (lesion mask outlined), then one row per run with
    its CAM over the image. ``images`` [n, C, H, W] in [0, 1] (first channel shown); each row's CAMs [n, H, W]."""
    n = images.shape[0]
    fig = Figure(figsize=(1.5 * n + 2.2, 1.5 * (len(rows) + 1)), dpi=100)
    axes = fig.subplots(len(rows) + 1, n, squeeze=False)
    for c in range(n):
        ax = axes[0][c]
        ax.imshow(images[c, 0], cmap="gray", vmin=0.0, vmax=1.0)
        if masks is not None and masks[c].any():
            ax.contour(masks[c].astype(float), levels=[0.5], colors="lime", linewidths=0.8)
        ax.set_title(column_titles[c], fontsize=7)
        for r, (_label, cams) in enumerate(rows, start=1):
            axes[r][c].imshow(images[c, 0], cmap="gray", vmin=0.0, vmax=1.0)
            axes[r][c].imshow(cams[c].astype(np.float32), cmap="jet", vmin=0.0, vmax=1.0, alpha=0.45)
    for r, (label, _cams) in enumerate([("image (lesion mask)", None), *rows]):
        axes[r][0].set_ylabel(label, fontsize=7, rotation=0, ha="right", va="center")
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    fig.tight_layout()
    return _png(fig)
