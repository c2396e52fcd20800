"""Figures for the report, returned as PNG bytes (embedded in the HTML and saved beside it)."""

from __future__ import annotations

import io
from typing import Any, Iterable

from matplotlib.figure import Figure  # not pyplot: no global backend or figure state is touched

from dpmed.records import RunRecord

__all__ = ["auroc_figure", "auroc_versus_epsilon", "ldp_examples"]


def auroc_versus_epsilon(records: Iterable[RunRecord]) -> bytes:
    """:func:`auroc_figure` as PNG bytes."""
    buf = io.BytesIO()
    auroc_figure(records).savefig(buf, format="png")
    return buf.getvalue()


def auroc_figure(records: Iterable[RunRecord]) -> Figure:
    """Test AUROC (with its bootstrap interval) against eps on a log axis.

    DP-SGD arms sit at their central eps; local-DP arms at their per-image eps (a different neighbour relation,
    drawn with another marker and said in the legend); the non-private level is a line with its interval as a band.
    The AUROC axis starts at 0.4 unless an interval reaches lower: a run below chance is shown, not cut off.
    """
    records = list(records)
    fig = Figure(figsize=(7, 4.2), dpi=110)
    ax = fig.subplots()
    styles = {"dp_sgd": ("o", "tab:blue", "DP-SGD (eps at its delta)"),
              "pixel_laplace": ("s", "tab:orange", "pixel Laplace LDP (eps per image)"),
              "pixel_gaussian": ("^", "tab:green", "pixel Gaussian LDP (eps per image at its delta)")}
    xs, lows = [], [0.4]
    for mech, (marker, color, label) in styles.items():
        pts = [(r, r.estimate("test_auroc")) for r in records if r.mechanism == mech and r.privacy.is_dp]
        pts = [(r, e) for r, e in pts if e.value is not None]
        if not pts:
            continue
        x = [r.privacy.epsilon for r, _ in pts]
        y = [e.value for _, e in pts]
        lo = [e.value - e.low for _, e in pts]
        hi = [e.high - e.value for _, e in pts]
        ax.errorbar(x, y, yerr=[lo, hi], fmt=marker, color=color, capsize=3, label=label)
        xs += x
        lows += [e.low for _, e in pts]
    base = [e for e in (r.estimate("test_auroc") for r in records if r.mechanism == "none") if e.value is not None]
    for i, e in enumerate(base):
        ax.axhline(e.value, color="k", lw=1, label="non-private" if i == 0 else None)
        ax.axhspan(e.low, e.high, color="k", alpha=0.08)
        lows.append(e.low)
    if xs:
        ax.set_xscale("log")
    ax.set_xlabel("epsilon (log scale; lower = more private)")
    ax.set_ylabel("test AUROC")
    ax.set_ylim(max(0.0, min(lows) - 0.02) if min(lows) < 0.4 else 0.4, 1.01)
    ax.axhline(0.5, color="grey", ls=":", lw=1)
    ax.grid(alpha=0.3, which="both")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig


def ldp_examples(rows: list[tuple[str, Any, Any]]) -> bytes:
    """A grid of images: the first row the originals, then one row per local-DP run (label, originals, perturbed)
    with the same images after its mechanism. Arrays are [n, C, H, W] in [0, 1]; the first channel is shown."""
    n = rows[0][1].shape[0]
    fig = Figure(figsize=(1.6 * n + 1.8, 1.6 * (len(rows) + 1)), dpi=100)
    axes = fig.subplots(len(rows) + 1, n, squeeze=False)
    grids = [("original", rows[0][1])] + [(label, perturbed) for label, _, perturbed in rows]
    for r, (label, images) in enumerate(grids):
        for c in range(n):
            ax = axes[r][c]
            ax.imshow(images[c, 0], cmap="gray", vmin=0.0, vmax=1.0)
            ax.set_xticks([])
            ax.set_yticks([])
            if c == 0:
                ax.set_ylabel(label, fontsize=7, rotation=0, ha="right", va="center")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()
