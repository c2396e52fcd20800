"""Figures for the report, returned as PNG bytes (embedded in the HTML and saved beside it).

Every figure comes in two layouts: ``narrow=False`` for a desktop page (panels side by side, drawn at about the
width it is shown at) and ``narrow=True`` for a phone (panels stacked, drawn at twice the 358 CSS px it is shown at,
with type that stays at least 10 CSS px there); :func:`~dpmed.reporting.inputs.embed_figure` lets the browser pick.
"""

from __future__ import annotations

import io
import textwrap
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure  # not pyplot: no global backend or figure state is touched
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import LogLocator, NullFormatter

from dpmed.comparisons import summarise_seeds
from dpmed.mechanisms.base import unit_words
from dpmed.numbers import confidence_text, delta_text
from dpmed.records import RunRecord
from dpmed.reporting.inputs import eps_label, not_dp_text
from dpmed.reporting.point_labels import fit_inside

__all__ = ["auroc_figure", "auroc_versus_epsilon", "auroc_alt", "spans_seeds", "ldp_examples_alt", "ldp_examples",
           "ldp_examples_figure", "FONT", "NARROW_INCHES", "NOT_DP_MARKER", "image_rows", "not_dp_as_run",
           "plot_interval", "plotted", "png_bytes"]

# Type sizes in points, per layout: (dpi, text). Narrow figures are 3.9 in wide at 200 dpi (780 px) and shown at
# 358 CSS px, so 11 pt is 11 * 200 / 72 * 358 / 780 = 14 CSS px; wide ones are shown at about their own size.
FONT = {False: (110, 10.0), True: (200, 11.0)}
NARROW_INCHES = 3.9          # every narrow figure's width: 780 px at 200 dpi


def plot_interval(ax: Any, at: float, value: float, low: float | None, high: float | None, *, across: bool = False,
                  marker: str = "o", ms: float = 4, **style: Any) -> Any:
    """A point estimate at ``at`` with its interval drawn as a line from ``low`` to ``high`` (``across``: values on
    x), not as error bars: a bootstrap interval (percentile or BCa) need not contain its point (few redraws, or a skewed
    statistic such as a small group's AUROC), and error bars cannot show that (matplotlib refuses negative lengths,
    which made a finished study's report fail). Returns the point's line, for a legend."""
    xy = (value, at) if across else (at, value)
    point, = ax.plot([xy[0]], [xy[1]], marker, ms=ms, **style)
    if low is not None and high is not None:
        (ax.hlines if across else ax.vlines)(at, low, high, color=point.get_color(), lw=1.2)
    return point


def png_bytes(fig: Figure) -> bytes:
    """A figure as PNG bytes, drawn once, at the figure's own size and dpi (the layouts' type sizes assume both).

    Printed by the Agg canvas, not `Figure.savefig`: savefig draws a figure with a layout engine twice, once with
    its output discarded to lay it out and once to render, and a figure `fit_inside` already laid out keeps a
    placeholder engine, so it too was drawn for nothing. The canvas's one drawing lays the figure out and renders
    it, and the PNG is the same to the byte (every figure of a study's report compared); it also keeps a
    matplotlibrc's ``savefig.dpi`` from redrawing the figure at a dpi its type sizes do not assume."""
    buf = io.BytesIO()
    FigureCanvasAgg(fig).print_png(buf)
    return buf.getvalue()


def auroc_versus_epsilon(records: Iterable[RunRecord], *, confidence: float = 0.95, narrow: bool = False) -> bytes:
    """:func:`auroc_figure` as PNG bytes."""
    return png_bytes(auroc_figure(records, confidence=confidence, narrow=narrow))


def spans_seeds(records: Iterable[RunRecord]) -> bool:
    """Whether the runs come from more than one seed: :func:`auroc_figure` then draws each configuration's mean over
    seeds, not each run, and its text alternative and caption must say so exactly when it does."""
    return len({r.seed for r in records}) > 1


def auroc_alt(records: Iterable[RunRecord]) -> str:
    """What :func:`auroc_figure` shows, in words, for a reader who cannot see it: its axes, each panel's points
    (run, eps, test AUROC) and the non-private line, read from the records it plots. A title alone ("test AUROC
    versus epsilon") told a screen reader's user that a figure exists, not what it says. Each point's eps is the
    report's label (`eps_label`: its delta, accountant and neighbours, and why a run is not DP), as in the tables:
    where the runs' deltas differ, the axis only points to the cards. Where some point is not DP as run, it says
    what the hollow markers and their legend entry mean, as the figure does, and the filled ones only where a DP
    run is drawn (of a figure of voided runs alone, "filled markers: DP runs" sent a reader looking for one)."""
    records = list(records)
    panels = []
    for panel in _panels(records):
        points = [f"{r.run_id} at {eps_label(r.privacy)}, AUROC {r.estimate('test_auroc').value:.3f}"
                  for r in records if panel.member(r) and plotted(r)]
        panels.append(f"Panel {panel.title}: {panel.xlabel}; " + ("; ".join(points) if points else "no point") + ".")
    base = [f"{r.run_id} {value:.3f}" for r, value in _defined([r for r in records if r.mechanism == "none"])]
    if spans_seeds(records):      # as auroc_figure draws them: a point is a configuration's mean
        lead = ("one faint dot per run (each listed below), and per configuration of several seeds a point at their "
                "mean with a bar, its t interval over seeds. ")
        line = f" Horizontal line per non-private arm, at its seeds' mean (runs: {', '.join(base)})." if base else ""
    else:
        lead = "one point per run. "
        line = f" Horizontal line: the non-private test AUROC ({', '.join(base)})." if base else ""
    entries = dict.fromkeys(_legend_entry(r.mechanism, True)[2] for r in records if plotted(r) and not_dp_as_run(r))
    filled = "; filled markers: DP runs" if any(plotted(r) and not not_dp_as_run(r) for r in records) else ""
    hollow = (f" Hollow markers (legend: {', '.join(f'“{e}”' for e in entries)}): runs not DP as run, each at its "
              f"ε as accounted, which does not hold{filled}." if entries else "")
    return ("Test AUROC (vertical axis) against ε (horizontal axis, log scale), " + lead
            + " ".join(panels) + hollow + line + " Dotted line: chance, 0.5.")


def ldp_examples_alt(rows: list[tuple[str, Any, Any]]) -> str:
    """What :func:`ldp_examples_figure` shows, in words: how many test images, and which run each row is."""
    n = rows[0][1].shape[0] if rows else 0
    labels = "; ".join(label.replace("\n", ", ") for label, _, _ in rows)
    return (f"{n} test images: the top row as they are, then one row per run with the same images after its image "
            f"mechanism ({labels}).")


def _configurations(runs: list[RunRecord], several_seeds: bool) -> list[list[RunRecord]]:
    """The runs :func:`auroc_figure` draws as one point each. With several seeds, the seeds of one configuration
    (arm and swept values) go together: drawn one per seed, their points sat at nearly one eps with their labels
    piled on each other. With one seed, each run is its own point (with its bootstrap interval)."""
    if not several_seeds:
        return [[r] for r in runs]
    groups: dict[str, list[RunRecord]] = {}
    for r in runs:
        groups.setdefault(r.plan.label, []).append(r)
    return list(groups.values())


def _defined(runs: list[RunRecord]) -> list[tuple[RunRecord, float]]:
    """The runs with a defined test AUROC, with it: the others have no point (the report's caption names them)."""
    return [(r, value) for r in runs if (value := r.estimate("test_auroc").value) is not None]


def _point(shown: list[tuple[RunRecord, float]], several_seeds: bool,
           confidence: float) -> tuple[float, float | None, float | None]:
    """(AUROC, low, high) of what one point or line stands for: a run and its bootstrap interval; with several
    seeds, the mean of a configuration's defined seeds and its Student t interval at ``confidence`` over them (None
    for one seed), the level of the runs' own intervals: comparisons.json's ``metrics_by_value`` holds the same, from
    the same :func:`~dpmed.comparisons.summarise_seeds`. Their range is no interval (3 seeds' range holds the true
    mean 75 % of the time): the faint dots show it.
    """
    if not several_seeds:
        r, value = shown[0]
        e = r.estimate("test_auroc")
        return value, e.low, e.high
    s = summarise_seeds([r for r, _ in shown], "test_auroc", confidence=confidence)
    assert s is not None and s.mean is not None, "every shown run has a defined test AUROC (_defined)"
    return s.mean, s.low, s.high


def _seeds_text(shown: int, runs: int, counts_differ: bool) -> str:
    """How many seeds a multi-seed point is the mean of: always where some of its seeds have no AUROC ("2 of 3
    seeds"), else only where configurations differ in it (a count every label shares tells nothing)."""
    if shown < runs:
        return f" ({shown} of {runs} seeds)"
    return f" ({shown} seed{'s' * (shown != 1)})" if counts_differ else ""


@dataclass(frozen=True)
class _Panel:
    """One kind of eps: which runs it holds, their x, and how it is labelled."""

    title: str
    xlabel: str
    member: Callable[[RunRecord], bool]
    x: Callable[[RunRecord], Any]


def _unit(records: list[RunRecord]) -> str:
    """What the DP-SGD panel's neighbours add or remove: "one patient"; where its arms differ, each unit with the
    arms that use it ("one patient (dp-patient) or one image (dp-image)"); an image of a capped training set is a
    unit of its own (`unit_words`)."""
    arms: dict[str, list[str]] = {}
    for r in records:
        unit = unit_words(r.privacy.unit, r.privacy.capped_at) if r.privacy.unit else "unit"
        if _is_central(r) and r.arm not in arms.setdefault(unit, []):
            arms[unit].append(r.arm)
    if len(arms) <= 1:
        return f"one {next(iter(arms), 'patient or image')}"
    return " or ".join(f"one {unit} ({', '.join(names)})" for unit, names in arms.items())


def _terms(records: list[RunRecord]) -> str:
    """The delta and accountant the panel's eps are at ("δ 1e-05, PLD"), or where to find them when runs differ.
    Runs of one delta whose accountants differ (a high-budget sweep: PLD up to its ceiling of 500, RDP beyond) keep
    that delta on the axis and name each accountant ("δ 1e-05, PLD or RDP, each run's on its card"): sending the
    reader to every card for a delta all of them share hid it. The delta is rounded up, never to nearest:
    1.31086e-05 shows as 1.32e-05 (1.31e-05 would claim more)."""
    terms = {(r.privacy.delta, r.privacy.accountant_in_brief) for r in records}
    if not terms:
        return "δ, accountant"
    deltas = {delta for delta, _ in terms}
    if len(deltas) != 1:
        return "δ and accountant per run: see its card"
    delta = deltas.pop()
    accountants = list(dict.fromkeys(r.privacy.accountant_in_brief for r in records))
    shown = "δ unknown" if delta is None else f"δ {delta_text(delta)}"   # None: a card edited by hand, not pure DP
    if len(accountants) == 1:
        return f"{shown}, {accountants[0]}"
    return f"{shown}, {' or '.join(accountants)}, each run's on its card"


def _is_local(r: RunRecord) -> bool:
    return r.privacy.epsilon_image is not None


def _is_central(r: RunRecord) -> bool:
    return r.mechanism == "dp_sgd" and r.privacy.epsilon is not None


def plotted(r: RunRecord) -> bool:
    """Whether :func:`auroc_figure` draws this run as a point: it has an eps (one that holds, or a reproducible-mode
    run's accounted one, labelled not DP) and a defined AUROC. The non-private runs are its line and band; the
    others (no eps at all: a flawed mechanism's reproduction, shuffled batches) are in no panel."""
    return (_is_local(r) or _is_central(r)) and r.estimate("test_auroc").value is not None


def _panels(records: list[RunRecord]) -> list[_Panel]:
    """Runs whose eps holds, and reproducible-mode runs at their accounted eps (their points say "not DP"). A panel
    of local noise none of whose runs is DP as run (a study of ``privacy_randomness: reproducible``) is not titled
    local DP: it was, over its hollow markers alone."""
    voided = all(not_dp_as_run(r) for r in records if _is_local(r))
    local = _Panel(title="Local noise on the images (not DP as run)" if voided else "Local DP on the images",
                   xlabel=f"ε per image ({_terms([r for r in records if _is_local(r)])}; any two images), log scale",
                   member=_is_local, x=lambda r: r.privacy.epsilon_image)
    central = _Panel(title="DP-SGD", xlabel=f"ε ({_terms([r for r in records if _is_central(r)])}; add or remove "
                                            f"{_unit(records)}), log scale",
                     member=_is_central, x=lambda r: r.privacy.epsilon)
    present = [p for p in (local, central) if any(p.member(r) for r in records)]
    return present or [central]


# Each mechanism's marker, colour, name and what its legend entry adds for a DP run. A run not DP as run (a
# sampler-voided or reproducible-mode run at its accounted eps) is drawn hollow under an entry of its own, "DP-SGD
# (not DP as run)": under the DP runs' filled "DP-SGD" it was called DP by the legend, its label's "not DP" aside.
_MARKERS = {"dp_sgd": ("o", "tab:blue", "DP-SGD", ""),
            "pixel_laplace": ("s", "tab:orange", "pixel Laplace", " (local DP)"),
            "pixel_gaussian": ("^", "tab:green", "pixel Gaussian", " (local DP)")}
# hollow: a run of a privacy mechanism that is not DP as run
NOT_DP_MARKER: dict[str, Any] = {"mfc": "none", "mew": 1.5}


def _legend_entry(mechanism: str, hollow: bool) -> tuple[str, str, str]:
    """The marker, colour and legend label of a mechanism's points, DP ones or (``hollow``) not DP as run."""
    marker, color, name, kind = _MARKERS.get(mechanism, ("D", "tab:purple", mechanism, ""))
    return marker, color, name + (" (not DP as run)" if hollow else kind)


def not_dp_as_run(r: RunRecord) -> bool:
    """Whether a run of a privacy mechanism is not DP as run (its card's claim does not hold, or it has none): the
    figures draw it hollow, under a legend entry that says so. A non-private run claims nothing, and is not one."""
    return not_dp_text(r.privacy) is not None


def auroc_figure(records: Iterable[RunRecord], *, confidence: float = 0.95, narrow: bool = False) -> Figure:
    """Test AUROC against eps on a log axis, one panel per kind of eps.

    Local DP's eps per image (any two images are neighbours; thousands at 64 x 64 px) and DP-SGD's eps (add or
    remove one patient or image) answer different questions, so they never share an axis: one panel each, where
    both kinds are in the study. Every point carries its label, beside it or, where the points around it leave no
    room, joined to it by a leader. In every panel the non-private AUROC is a line with a band, and chance (0.5) a
    dotted line; the legend names all three. A run not DP as run (`not_dp_as_run`) is drawn hollow, under its
    mechanism's entry "... (not DP as run)", never the DP runs' filled one. The AUROC axis starts at 0.4 unless a
    value it shows reaches lower: a run below chance is shown, not cut off.

    With one seed, each run is a point with its bootstrap interval, and the band is the non-private run's interval.
    With several, each configuration is one point: the mean of its seeds' AUROC at the mean of their eps (a
    calibrated run's eps differs between seeds only in rounding), a bar over its t interval over seeds (at
    ``confidence``, the study's level) and each
    seed a faint dot (the dots span the seeds' range); each non-private arm is a line at its seeds' mean, its band
    that t interval. One point and one line per seed,
    all alike, could not be told apart; the runs' own intervals are in the report's table.
    """
    records = list(records)
    level = confidence_text(confidence)
    dpi, size = FONT[narrow]
    panels = _panels(records)
    n = len(panels)
    if narrow:
        fig = Figure(figsize=(NARROW_INCHES, 3.2 * n + 1.9), dpi=dpi, layout="constrained")
        axes = list(fig.subplots(n, 1, squeeze=False, sharey=True)[:, 0])
    else:
        fig = Figure(figsize=(4.6 * n + 0.8, 4.6), dpi=dpi, layout="constrained")
        axes = list(fig.subplots(1, n, squeeze=False, sharey=True)[0])
    several_seeds = spans_seeds(records)
    base = _defined([r for r in records if r.mechanism == "none"])
    lines = []                      # (value, low, high) of each non-private line: an arm's seeds, or a run
    for runs in _configurations([r for r, _ in base], several_seeds):
        value, low, high = _point(_defined(runs), several_seeds, confidence)
        alone = several_seeds and len(runs) == 1           # an arm of one seed has no interval to draw
        lines.append((value, None, None) if alone else (value, low, high))
    lows = [0.4] + [y for value, low, _ in lines for y in (value, low) if y is not None]
    configurations = [_configurations([r for r in records if p.member(r)], several_seeds) for p in panels]
    counts_differ = len({len(_defined(runs)) for c in configurations for runs in c} - {0}) > 1
    used: dict[tuple[str, bool], tuple[str, str, str]] = {}       # (mechanism, not DP as run): its legend entry
    for ax, panel, panel_runs in zip(axes, panels, configurations):
        for value, low, high in lines:
            ax.axhline(value, color="k", lw=1)
            if low is not None and high is not None:
                ax.axhspan(low, high, color="k", alpha=0.08, lw=0)
        ax.axhline(0.5, color="grey", ls=":", lw=1.2)
        xs = []
        for runs in panel_runs:
            shown = _defined(runs)
            if not shown:
                continue
            r, _ = shown[0]
            hollow = any(not_dp_as_run(r) for r, _ in shown)
            marker, color, _ = used[r.mechanism, hollow] = _legend_entry(r.mechanism, hollow)
            style = NOT_DP_MARKER if hollow else {}
            x = sum(panel.x(r) for r, _ in shown) / len(shown)
            y, low, high = _point(shown, several_seeds, confidence)
            if several_seeds:
                ax.plot([x] * len(shown), [value for _, value in shown], marker, ms=3, color=color, alpha=0.35,
                        **style)
            plot_interval(ax, x, y, low, high, marker=marker, color=color, ms=6, **style)
            reasons = dict.fromkeys(r.privacy.why_not_dp_in_brief for r, _ in shown if not r.privacy.is_dp)
            why = f" (not DP: {'; '.join(reasons)})" if reasons else ""
            label = r.plan.label + (_seeds_text(len(shown), len(runs), counts_differ) if several_seeds else "") + why
            ax.annotate(label, (x, y), xytext=(6, 4), textcoords="offset points",
                        fontsize=size - 1, color="#333333").set_in_layout(False)   # placed by fit_inside
            xs.append(x)
            # every seed's dot, and the bar: a configuration of one defined seed has no bar, only its dot
            lows += [value for _, value in shown] + ([low] if low is not None else [])
        if xs:
            ax.set_xscale("log")
            lo, hi = min(xs), max(xs)
            ax.set_xlim(lo / 4, hi * 25)       # whole decades shown, and room for the labels right of the points
            ax.xaxis.set_minor_formatter(NullFormatter())    # 2x10^3, 3x10^3, ... would overlap
            ax.xaxis.set_major_locator(LogLocator(base=10, numticks=6))
        else:
            ax.set_xticks([])
            ax.text(0.5, 0.3, "no run of this kind", transform=ax.transAxes, ha="center", fontsize=size - 1,
                    color="grey")
        # a phone's panel is about 34 characters of its title wide: a title's note goes on a line of its own
        ax.set_title(panel.title.replace(" (", "\n(") if narrow else panel.title, fontsize=size + 1)
        # wrapped at about the panel's width in characters: a phone's label, or one naming several units' arms,
        # would outgrow it
        width = int((fig.get_figwidth() if narrow else fig.get_figwidth() / n) * 72 / (0.6 * size))
        ax.set_xlabel(textwrap.fill(panel.xlabel, width, break_long_words=False, break_on_hyphens=False),
                      fontsize=size)
        ax.tick_params(labelsize=size - 1)
        ax.grid(alpha=0.3, which="major")
    axes[0].set_ylabel("test AUROC", fontsize=size)
    if narrow:
        for ax in axes[1:]:
            ax.set_ylabel("test AUROC", fontsize=size)
    axes[0].set_ylim(max(0.0, min(lows) - 0.02) if min(lows) < 0.4 else 0.4, 1.01)
    # the mechanisms in the order of their first runs, each one's DP entry before its not-DP one: in the runs' order
    # a sweep whose first eps is not DP as run listed "DP-SGD (not DP as run)" above "DP-SGD"
    first = list(dict.fromkeys(mechanism for mechanism, _ in used))
    entries = sorted(used.items(), key=lambda entry: (first.index(entry[0][0]), entry[0][1]))
    handles: list[Line2D | Patch] = [Line2D([], [], marker=m, color=c, ls="none", label=label,
                                            **(NOT_DP_MARKER if hollow else {}))
                                     for (_, hollow), (m, c, label) in entries]
    if several_seeds and used:
        handles.append(Line2D([], [], marker="|", ms=10, color="grey", ls="none",
                              label=f"bars: {level} t interval over seeds, faint dots: each seed"))
    if several_seeds and base:
        banded = any(low is not None for _, low, _ in lines)
        count = len(base)
        label = "non-private AUROC, " + (("mean over seeds, one line per arm" if banded else "one line per arm")
                                         if len(lines) > 1 else f"mean of {count} seeds" if banded else "1 seed")
        handles.append(Line2D([], [], color="k", lw=1, label=label))
        if banded:
            handles.append(Patch(color="k", alpha=0.08, label=f"non-private, {level} t interval over seeds"))
    elif base:
        handles += [Line2D([], [], color="k", lw=1, label="non-private AUROC"),
                    Patch(color="k", alpha=0.08, label="non-private interval")]
    handles.append(Line2D([], [], color="grey", ls=":", lw=1.2, label="chance (AUROC 0.5)"))
    _fitted_legend(fig, handles, 1 if narrow else min(len(handles), 3), size - 1)
    fit_inside(fig, axes)
    return fig


def _fitted_legend(fig: Figure, handles: list[Line2D | Patch], columns: int, fontsize: float) -> None:
    """The legend below the panels, in the most of ``columns`` columns that fit inside the figure's width; in one
    column still too wide, its long entries wrapped, each at fewer characters until it fits. A phone's figure of
    several seeds was cut off at both edges ("...faint dots: each see"): its one column held entries wider than the
    figure. Measured, not estimated: an entry's width depends on its letters."""
    for ncol in range(columns, 0, -1):
        legend = fig.legend(handles=handles, loc="outside lower center", ncol=ncol, fontsize=fontsize, frameon=False)
        if legend.get_window_extent().width < fig.bbox.width:
            return
        legend.remove()
    labels = [str(h.get_label()) for h in handles]
    for width in range(max(map(len, labels)) - 1, 0, -1):
        wrapped = [textwrap.fill(label, width, break_long_words=False) for label in labels]
        legend = fig.legend(handles=handles, labels=wrapped, loc="outside lower center", fontsize=fontsize,
                            frameon=False)
        if legend.get_window_extent().width < fig.bbox.width or width == 1:
            return
        legend.remove()


def image_rows(fig: Figure, labels: list[str], n: int, *, narrow: bool) -> list[Any]:
    """Axes for a grid of images, one row per label and ``n`` per row: a desktop figure names each row at its left;
    a phone's names it above the row, wrapped to the figure's width, in a subfigure of its own (a label drawn as the
    first image's title would widen that column and push the other images right)."""
    dpi, size = FONT[narrow]
    if not narrow:
        axes = fig.subplots(len(labels), n, squeeze=False)
        for row, label in zip(axes, labels):
            row[0].set_ylabel(label, fontsize=size - 1, rotation=0, ha="right", va="center")
        return list(axes)
    wrap = int(fig.get_figwidth() * 72 / (0.6 * (size - 1))) - 2
    rows = []
    for sub, label in zip(fig.subfigures(len(labels), 1, squeeze=False)[:, 0], labels):
        text = "\n".join(part for line in label.split("\n") for part in (textwrap.wrap(line, wrap) or [line]))
        sub.suptitle(text, fontsize=size - 1, x=0.01, ha="left")
        rows.append(sub.subplots(1, n, squeeze=False)[0])
    return rows


def ldp_examples(rows: list[tuple[str, Any, Any]], *, narrow: bool = False) -> bytes:
    """:func:`ldp_examples_figure` as PNG bytes."""
    return png_bytes(ldp_examples_figure(rows, narrow=narrow))


def ldp_examples_figure(rows: list[tuple[str, Any, Any]], *, narrow: bool = False) -> Figure:
    """A grid of images: the first row the originals, then one row per local-DP run (label, originals, perturbed)
    with the same images after its mechanism. Arrays are [n, C, H, W] in [0, 1]; the first channel is shown. The
    narrow layout shows at most three images per row, with the row's label above it."""
    dpi, size = FONT[narrow]
    n = rows[0][1].shape[0] if not narrow else min(3, rows[0][1].shape[0])
    grids = [("original", rows[0][1])] + [(label, perturbed) for label, _, perturbed in rows]
    if narrow:
        lines = sum(label.count("\n") + 1 for label, _ in grids)
        fig = Figure(figsize=(NARROW_INCHES, 1.3 * len(grids) + 0.22 * lines + 0.2), dpi=dpi, layout="constrained")
    else:
        fig = Figure(figsize=(1.6 * n + 2.2, 1.6 * len(grids)), dpi=dpi, layout="constrained")
    axes = image_rows(fig, [label for label, _ in grids], n, narrow=narrow)
    for r, (_label, images) in enumerate(grids):
        for c in range(n):
            ax = axes[r][c]
            ax.imshow(images[c, 0], cmap="gray", vmin=0.0, vmax=1.0)
            ax.set_xticks([])
            ax.set_yticks([])
    return fig
