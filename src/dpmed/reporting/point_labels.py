"""Where a figure's point labels go: beside their points where that covers nothing, else away with a leader.

Placed only apart from each other, the labels of a high-budget sweep's points (eps 1e6 .. 1e15, several seeds each,
long "not DP" notes) sat beside other points' markers and bars and read as naming them, most of all on a phone-width
figure. Everything here is measured in display coordinates after layout (`Figure.draw_without_rendering`), and the
labels stay out of the layout, so placing them does not move the axes they are placed on.
"""

from __future__ import annotations

import itertools
import re
import textwrap
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Literal

import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.path import Path
from matplotlib.text import Annotation
from matplotlib.transforms import Bbox, BboxBase
from numpy.typing import NDArray

__all__ = ["fit_inside"]

Align = Literal["left", "center", "right"]       # how a label's lines align
Floats = NDArray[np.float64]
Boxes = NDArray[np.float64]                      # boxes' extents, one row of (x0, y0, x1, y1) each
Mask = NDArray[np.bool_]


def _inside(box: BboxBase, edge: BboxBase) -> bool:
    return edge.x0 <= box.x0 and box.x1 <= edge.x1 and edge.y0 <= box.y0 and box.y1 <= edge.y1


_GAP = 6.0            # points between a point and the label beside it
_PAD = 1.5            # points kept clear around every marker, bar and label
_ELBOW = 6.0          # points across and up or down from a point to its leader's bend: the leader comes in at 45
                      # degrees, along neither the point's bar nor a level line such as the non-private AUROC's
# Behind a label's words: the non-private line and band and the chance line run across the whole axes, where a
# label beside a point at them must sit; its letters are read over a near-opaque white, not struck through. The pad
# (fontsize units: about 1 point) stays inside _PAD, so the backing covers no marker or bar that its words clear.
_BACKING = {"boxstyle": "square,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.85}
_SHRINK = 4.5         # points a leader stops short of its point: at a size-6 marker's edge
_LEADER = {"arrowstyle": "-", "color": "#777777", "lw": 0.6, "shrinkA": 0, "shrinkB": _SHRINK}


def _obstacles(ax: Axes, pad: float) -> list[tuple[tuple[float, float] | None, Bbox]]:
    """Every marker (each point of a line that has one) and bar (each segment of a line collection) of ``ax`` as a
    display box grown by ``pad`` pixels, each with the display centre of its marker (None for a bar): what no label
    may cover, so that a label cannot sit on, or beside and be read as naming, another point."""
    scale = ax.figure.dpi / 72
    boxes: list[tuple[tuple[float, float] | None, Bbox]] = []
    for line in ax.get_lines():
        if line.get_marker() in (None, "None", "", " "):
            continue
        r = (line.get_markersize() + line.get_markeredgewidth()) / 2 * scale + pad
        boxes += [((x, y), Bbox.from_extents(x - r, y - r, x + r, y + r))
                  for x, y in line.get_transform().transform(line.get_xydata())]
    for bars in ax.collections:
        if isinstance(bars, LineCollection):
            half = max(np.atleast_1d(bars.get_linewidth()), default=1.0) / 2 * scale + pad
            for segment in bars.get_segments():
                ends = bars.get_transform().transform(segment)
                (x0, y0), (x1, y1) = ends.min(0), ends.max(0)
                boxes.append((None, Bbox.from_extents(x0 - half, y0 - half, x1 + half, y1 + half)))
    return boxes


def _wordings(label: str) -> list[str]:
    """A point's label as it may be shown, longest first: as it is, on two lines (its note in brackets on the
    second), with a not-DP note shortened to "(not DP)" (the card and the table give the reason), that on two
    lines, and wrapped narrow."""
    short = re.sub(r" \(not DP: [^)]*\)", " (not DP)", label)

    def two_lines(words: str) -> str:
        return (words.replace(" (", "\n(", 1) if " (" in words else
                textwrap.fill(words, max(12, len(words) // 2 + 2), break_long_words=False, break_on_hyphens=False))

    narrow = textwrap.fill(short, 14, break_long_words=False, break_on_hyphens=False)
    return list(dict.fromkeys((label, two_lines(label), short, two_lines(short), narrow)))


@dataclass(frozen=True)
class _Label:
    """Where a point's label goes: its wording, its centre's offset from the point in display pixels, how its lines
    align, its window extent, and its leader back to the point in display pixels (None beside the point)."""

    words: str
    dx: float
    dy: float
    align: Align
    box: Bbox
    leader: Path | None = None


def _grid(sizes: list[tuple[float, float]], gap: float, step: float, room: BboxBase, taken: Boxes, at: Floats,
          later: Boxes) -> tuple[NDArray[np.intp], Floats, Floats, Mask]:
    """Where a label may go away from its point ``at`` (display), as (which wording, of display ``sizes``, the
    offset of its centre in pixels, and whether it blocks a later point; arrays): every place on a grid of ``step``
    pixels at least ``gap`` from the point where the label stays inside ``room`` (the axes) and covers none of
    ``taken`` (boxes' extents); nearest first, and at one distance the longer wording first. Places straight above
    or below ``later`` points (extents of the room kept around the points whose labels are still to come, across
    out to their leaders' bends) block them and come last: a label there would leave another point's label no way
    back to its point."""
    xs = np.arange(np.ceil((room.x0 - at[0]) / step), np.floor((room.x1 - at[0]) / step) + 1) * step
    ys = np.arange(np.ceil((room.y0 - at[1]) / step), np.floor((room.y1 - at[1]) / step) + 1) * step
    dx, dy = (a.ravel() for a in np.meshgrid(xs, ys))
    taken = taken.reshape(-1, 1, 4)
    found = []
    for wording, (w, h) in enumerate(sizes):
        x0, y0, x1, y1 = at[0] + dx - w / 2, at[1] + dy - h / 2, at[0] + dx + w / 2, at[1] + dy + h / 2
        away = np.hypot(np.maximum(np.abs(dx) - w / 2, 0), np.maximum(np.abs(dy) - h / 2, 0))
        free = ~((x0 < taken[..., 2]) & (taken[..., 0] < x1) & (y0 < taken[..., 3]) & (taken[..., 1] < y1)).any(0)
        ok = free & (away >= gap) & (room.x0 <= x0) & (x1 <= room.x1) & (room.y0 <= y0) & (y1 <= room.y1)
        blocks = np.zeros_like(ok)
        for lo, hi in later[:, [0, 2]]:
            blocks |= (x0 < hi) & (lo < x1)
        found.append((blocks[ok], np.rint(away[ok] / step), np.full(ok.sum(), wording), dx[ok], dy[ok]))
    blocks, away, n, u, v = (np.concatenate(a) for a in zip(*found))
    order = np.lexsort((v, u, np.abs(v), n, away, blocks))       # the last key first
    return n[order], u[order], v[order], blocks[order]


def _extents(boxes: list[Bbox]) -> Boxes:
    """The (x0, y0, x1, y1) of each of ``boxes``, one row each, lower edge first as `Bbox.overlaps` orders them."""
    e = np.array([b.extents for b in boxes], float).reshape(-1, 4)
    return np.hstack([np.minimum(e[:, :2], e[:, 2:]), np.maximum(e[:, :2], e[:, 2:])])


def _near(a: Boxes, b: Boxes, margin: float = 0.0) -> Mask:
    """Which of boxes ``a`` (rows of x0, y0, x1, y1) come within ``margin`` pixels of which of ``b`` (one row of a
    ``b`` column each), edges touching included: `Bbox.overlaps` of every pair at once at no margin. With a margin, a
    line whose extents are not near a box cannot cross it, so only the pairs near each other need matplotlib's exact
    test, each a call of its own (most of the time the labels took, with a Bbox made per place)."""
    a, b = a[:, None], b[None]
    return ((a[..., 0] - margin <= b[..., 2]) & (b[..., 0] <= a[..., 2] + margin)
            & (a[..., 1] - margin <= b[..., 3]) & (b[..., 1] <= a[..., 3] + margin))


def _leaders(at: Floats, boxes: Boxes, dx: Floats, dy: Floats, elbow: float,
             shrink: float) -> tuple[Floats, Mask]:
    """The leader from each of the label ``boxes`` (extents) centred (dx, dy) from the point ``at`` back to it: from
    the label's nearest edge to a bend :data:`_ELBOW` across and up or down from the point, towards the label (level:
    above it), then to the point short of it by the shrink; straight where the bend is in line with both. Returns
    each leader's three vertices (start, bend, end) and whether it bends."""
    side = np.where(np.stack([dx, dy], 1) < 0, -1.0, 1.0)
    corner = at + side * elbow
    start = np.clip(corner, boxes[:, :2], boxes[:, 2:])
    end = at + side * shrink / np.sqrt(2)
    (u, v), (p, q) = (corner - start).T, (at - corner).T
    return np.stack([start, corner, end], 1), np.abs(u * q - v * p) > 1e-6


def _crossing(lines: Floats, bent: Mask, boxes: Boxes) -> tuple[Mask, Mask]:
    """Whether each of ``lines`` (vertices and bends from :func:`_leaders`) crosses each of ``boxes`` (extents), as
    matplotlib's `Path.intersects_bbox` (unfilled) decides it: its first vertex inside the box, edges included, or a
    segment reaching into it. Returns (crosses, unsure): where the two sides of a comparison come within rounding of
    each other (a line along a box's edge) numpy's rounding may differ from matplotlib's, and only its test can say."""
    cx, cy = (boxes[:, 0] + boxes[:, 2]) * 0.5, (boxes[:, 1] + boxes[:, 3]) * 0.5
    w, h = np.abs(boxes[:, 0] - boxes[:, 2]), np.abs(boxes[:, 1] - boxes[:, 3])

    def below(lhs: Floats, rhs: Floats, *terms: Floats) -> tuple[Mask, Mask]:
        slack = 1e-9 * (np.abs(lhs) + np.abs(rhs) + sum(np.abs(t) for t in terms) + 1.0)
        return rhs - lhs > slack, rhs - lhs < -slack               # surely below; surely not

    start, corner, end = (lines[:, k, None, :] for k in range(3))      # each against every box
    corner = np.where(bent[:, None, None], corner, end)                # a straight leader: its one segment twice
    (inx, outx), (iny, outy) = below(2.0 * np.abs(start[..., 0] - cx), w), below(2.0 * np.abs(start[..., 1] - cy), h)
    hits, misses = inx & iny, outx | outy
    for a, b in ((start, corner), (corner, end)):
        (ax, ay), (bx, by) = np.moveaxis(a, -1, 0), np.moveaxis(b, -1, 0)
        across = (ax - cx) * (ay - by), (ay - cy) * (ax - bx)
        tests = (below(np.abs(ax + bx - 2.0 * cx), np.abs(ax - bx) + w),
                 below(np.abs(ay + by - 2.0 * cy), np.abs(ay - by) + h),
                 below(2.0 * np.abs(across[0] - across[1]), w * np.abs(ay - by) + h * np.abs(ax - bx), *across))
        hits = hits | (tests[0][0] & tests[1][0] & tests[2][0])
        misses = misses & (tests[0][1] | tests[1][1] | tests[2][1])
    return hits, ~hits & ~misses


def _place(text: Annotation, at: Floats, boxes: list[Bbox], own: list[Bbox], leaders: list[Path], later: Boxes,
           room: BboxBase, points: float) -> _Label:
    """Where the label of the point ``at`` (display) goes: right, left, above or below the point (above and below
    clear of ``own``, its bar and seeds), in each of its :func:`_wordings` in turn, the first place where it stays
    inside ``room`` (the axes) and covers none of ``boxes`` (every marker but its point's, every bar, the labels
    placed) and no leader; else away from the point (:func:`_grid`), with a leader from the label's nearest edge
    that bends :data:`_ELBOW` short of the point and must cross no leader and none of ``boxes`` but ``own`` (they
    sit at the point: no line could reach it past them); where every such leader would cross a bar or leader
    (points closer than its bend), the nearest clear place with a leader that crosses. A place whose label or leader
    blocks a ``later`` point (the room kept around each point still to be labelled: its leaders' bends, and a line
    of words above and below) comes after every place that blocks none: a leader through that room leaves the later
    point's label no way back to it past this leader, and that label's leader then crosses it. Where no place is
    clear (a tiny axes), the first beside the point inside the axes, else the narrowest wording on the side with
    more room.

    Every place and its leader are tested against every box at once in numpy (:func:`_near`, :func:`_crossing`);
    matplotlib's own tests, one call per place and box (most of a figure's time when each was asked), decide only
    where a leader comes near another leader or numpy's rounding could decide otherwise. The wordings are measured as
    they are needed, each a text layout."""
    x, y = at
    gap = _GAP / points
    above = max([gap] + [b.y1 - y + 1 for b in own])        # a pixel past their edge, which rounding may not clear
    below = max([gap] + [y - b.y0 + 1 for b in own])
    wordings = _wordings(text.get_text())
    sizes: list[tuple[float, float]] = []      # measured as they are needed: most fit beside their point as they are
    taken = _extents(boxes)
    drawn = _extents([line.get_extents() for line in leaders])

    def label(n: int, dx: float, dy: float, align: Align) -> _Label:
        w, h = sizes[n]
        return _Label(wordings[n], dx, dy, align, Bbox.from_bounds(x + dx - w / 2, y + dy - h / 2, w, h))

    def free(box: Bbox, near: Mask | None = None) -> bool:
        """Whether ``box`` covers none of ``boxes`` and no leader; ``near``: the leaders it comes near, where its
        cover of the boxes is already known."""
        if near is None:
            extents = np.asarray(box.extents)[None]         # one row: the stub's tuple is an array
            if _near(extents, taken).any():
                return False
            near = _near(extents, drawn, 1.0)[0]
        return not any(leaders[j].intersects_bbox(box, filled=False) for j in np.flatnonzero(near))

    beside = []
    for n, words in enumerate(wordings):
        sizes.append(_set(text, words, 0.0, 0.0, "center").size)
        w, h = sizes[n]
        places: tuple[tuple[float, float, Align], ...] = (
            (gap + w / 2, 0.0, "left"), (-gap - w / 2, 0.0, "right"), (0.0, above + h / 2, "center"),
            (0.0, -below - h / 2, "center"))
        for place in places:
            placed = label(n, *place)
            if _inside(placed.box, room):
                if free(placed.box):
                    return placed
                beside.append(placed)
    # the stub's font size may be a name ("large"); a text's is always its size in points
    step = text.get_fontsize() / 2 / points  # type: ignore[operator]
    wording, dx, dy, blocks = _grid(sizes, gap, step, room, taken, at, later)
    w, h = np.array(sizes, float).reshape(-1, 2)[wording].T
    spans = np.stack([x + dx - w / 2, y + dy - h / 2, x + dx - w / 2 + w, y + dy - h / 2 + h], 1)   # as label's
    lines, bent = _leaders(at, spans, dx, dy, _ELBOW / points, _SHRINK / points)
    reach = np.where(bent[:, None, None], lines, lines[:, [0, 0, 2]])       # the vertices each leader has
    reach = np.hstack([reach.min(1), reach.max(1)])
    mine = {id(b) for b in own}
    past = [k for k, b in enumerate(boxes) if id(b) not in mine]
    clear = np.flatnonzero(~_near(spans, taken).any(1))

    def leader(k: int | np.intp) -> Path:
        return Path(lines[k] if bent[k] else lines[k, [0, 2]])           # else in line with it

    cuts, unsure = _crossing(lines[clear], bent[clear], later)
    for i, j in zip(*np.nonzero(unsure & _near(reach[clear], later))):
        cuts[i, j] = leader(clear[i]).intersects_bbox(Bbox(later[j].reshape(2, 2)), filled=False)
    clear = clear[np.argsort(blocks[clear] | cuts.any(1), kind="stable")]      # nearest first within each
    on_box, crossed = _near(spans[clear], drawn, 1.0), _near(reach[clear], drawn, 1.0)
    hits, unsure = _crossing(lines[clear], bent[clear], taken[past])
    blocked: Mask = np.any(hits, 1)     # an array: the method's stub allows a scalar
    crossing = None            # the nearest place whose leader must cross a bar or leader: kept as a fallback
    for i, k in enumerate(clear):
        if blocked[i] and crossing is not None:
            continue
        placed = label(wording[k], dx[k], dy[k], "left" if dx[k] > 0 else "right")
        if not free(placed.box, on_box[i]):
            continue
        line = leader(k)
        if not blocked[i] and \
                not any(line.intersects_bbox(boxes[past[j]], filled=False) for j in np.flatnonzero(unsure[i])) and \
                not any(line.intersects_path(leaders[j], filled=False) for j in np.flatnonzero(crossed[i])):
            return replace(placed, leader=line)
        if crossing is None:
            crossing = replace(placed, leader=line)
    # Points closer than a leader's bend (high budgets a fraction of a decade apart): no leader reaches the point
    # past its neighbours' bars. A label that crosses a bar to its point is still legible and names it; labels piled
    # on each other beside the point (the last resort below) are neither.
    if crossing is not None:
        return crossing
    if beside:
        return beside[0]
    right = room.x1 - x > x - room.x0
    return label(len(sizes) - 1, (gap + sizes[-1][0] / 2) * (1 if right else -1), 0.0, "left" if right else "right")


def _set(text: Annotation, words: str, dx: float, dy: float, align: Align) -> Bbox:
    """Show ``words`` centred (dx, dy) display pixels from the point, its lines aligned ``align``; returns the
    text's window extent."""
    text.set_text(words)
    text.set_horizontalalignment("center")
    text.set_verticalalignment("center")
    text.set_multialignment(align)
    points = 72 / text.figure.dpi
    text.xyann = (dx * points, dy * points)
    return text.get_window_extent()


def _arrow(box: Bbox, leader: Path, at: Floats) -> dict[str, Any]:
    """The arrow properties that draw the ``leader`` of the label ``box`` as :func:`_place` laid it out: from its
    point on the label (``relpos``), to its bend, to the point ``at`` (display), short of it by the shrink."""
    vertices = np.asarray(leader.vertices)
    start, bend = vertices[:2]
    angles = (np.degrees(np.arctan2(*(b - a)[::-1])) for a, b in ((start, bend), (at, bend)))
    bent = {"connectionstyle": "angle,angleA={:.6g},angleB={:.6g},rad=0".format(*angles)} if len(
        vertices) == 3 else {}
    return {**_LEADER, **bent, "relpos": tuple((start - box.p0) / box.size)}


def _place_all(ax: Axes, texts: list[Annotation], points: float) -> list[_Label]:
    """Where each of ``texts`` (the labels of ``ax``'s points) goes (:func:`_place`), each clear of those placed
    before it, from the leftmost point to the rightmost: a label moved away from its point keeps clear of the
    points to its right, whose labels are still to come, and so does its leader where a place allows, so that a
    row of points close together (a high-budget sweep near the non-private line) has its labels stepped down away
    from it, each leader passing beside the labels before it, and no leader runs just past a later point, boxing it
    in so that its own leader must cross. Two leaders that still cross are undone afterwards, where a change allows,
    with every label known."""
    pad = _PAD / points
    marks = _obstacles(ax, pad)
    elbow = _ELBOW / points
    at = [ax.transData.transform(text.xy) for text in texts]
    order = sorted(range(len(texts)), key=lambda k: tuple(at[k]))
    # The room each point's label needs kept: across, out to its leaders' bends; up and down, a line of its words
    # further, the least there must be between the point and a leader passing above or below it.
    u, v = np.array(at, float).reshape(-1, 2).T
    across, line = elbow + pad, np.array([text.get_fontsize() for text in texts]) / points
    around = np.stack([u - across, v - across - line, u + across, v + across + line], 1)
    placed: dict[int, _Label] = {}

    def obstacles(k: int) -> tuple[list[Bbox], list[Bbox], list[Path]]:
        """What the label of point ``k`` must keep off: every marker and bar but its point's, and every label placed
        but its own (boxes); the point's own marker, seeds and bar (no leader could reach it past them); the leaders
        of the other labels placed."""
        x, y = at[k]
        others = [(c, b) for c, b in marks if c is None or abs(c[0] - x) + abs(c[1] - y) > 0.5]   # not its own
        own = [b for c, b in others if (abs(c[0] - x) <= 0.5 if c else b.x0 <= x <= b.x1 and b.y0 <= y <= b.y1)]
        rest = [p for j, p in placed.items() if j != k]
        boxes = [b for _, b in others] + [p.box.padded(pad) for p in rest]
        return boxes, own, [p.leader for p in rest if p.leader is not None]

    def place(group: tuple[int, ...]) -> None:
        """Place the labels of ``group``'s points in its order, apart from the others placed and each keeping the
        room the labels after it in the group need."""
        for k in group:
            placed.pop(k, None)
        for n, k in enumerate(group):
            placed[k] = _place(texts[k], at[k], *obstacles(k), around[list(group[n + 1:])], ax.bbox, points)

    def moved(k: int, words: str, centre: Floats) -> _Label:
        """The label of point ``k`` in ``words`` centred at ``centre`` (display), with its leader back to the point."""
        (w, h), (x, y) = _set(texts[k], words, 0.0, 0.0, "center").size, at[k]
        dx, dy = centre - at[k]
        span = np.array([[x + dx - w / 2, y + dy - h / 2, x + dx + w / 2, y + dy + h / 2]])
        lines, bent = _leaders(at[k], span, np.array([dx]), np.array([dy]), elbow, _SHRINK / points)
        return _Label(words, dx, dy, "left" if dx > 0 else "right", Bbox(span.reshape(2, 2)),
                      Path(lines[0] if bent[0] else lines[0, [0, 2]]))

    def swap(a: int, b: int) -> None:
        """Put the label of point ``a`` where point ``b``'s is, and that one where ``a``'s was, each with its own
        words and a leader back to its own point."""
        one, other = placed[a], placed[b]
        placed[a] = moved(a, one.words, at[b] + (other.dx, other.dy))
        placed[b] = moved(b, other.words, at[a] + (one.dx, one.dy))

    def clear(k: int) -> bool:
        """Whether the label of point ``k`` lies inside the axes and on no box."""
        box = placed[k].box
        return _inside(box, ax.bbox) and not any(box.overlaps(b) for b in obstacles(k)[0])

    def crossings(pair: tuple[int, int]) -> NDArray[np.intp]:
        """How many leaders, and how many boxes (markers, bars and labels but its point's), each label's leader
        crosses, summed over the axes where the labels of ``pair`` take part: a change of those two changes no other
        count. Counting every leader against every box took 6 of the 8 s a figure of 40 budgets over seeds took."""
        found = np.zeros(2, np.intp)
        for k, label in placed.items():
            if label.leader is None:
                continue
            if k in pair:
                boxes, own, leaders = obstacles(k)
                past = [b for b in boxes if all(b is not o for o in own)]
            else:
                past = [placed[j].box.padded(pad) for j in pair]
                leaders = [line for j in pair if (line := placed[j].leader) is not None]
            found += (sum(label.leader.intersects_path(line, filled=False) for line in leaders),
                      sum(label.leader.intersects_bbox(b, filled=False) for b in past))
        return found

    place(tuple(order))
    # Placed in turn, a label knows only the labels before it: its leader may take the way a later point's label
    # needed, and that label's leader then crosses it (points closer than a leader's bend, one above the other, the
    # upper one's label below and the lower one's above). Two labels whose leaders cross swap places, else are
    # placed again knowing every other label, one or both in either order: the first change that leaves each label
    # clear and the leaders crossing fewer leaders and no more boxes is kept.
    for a, b in itertools.combinations(order, 2):
        one, other = placed[a], placed[b]
        if one.leader is None or other.leader is None or not one.leader.intersects_path(other.leader, filled=False):
            continue
        before = crossings((a, b))
        for change in (partial(swap, a, b), partial(place, (a,)), partial(place, (b,)), partial(place, (a, b)),
                       partial(place, (b, a))):
            change()
            after = crossings((a, b))
            if clear(a) and clear(b) and after[0] < before[0] and after[1] <= before[1]:
                break
            placed[a], placed[b] = one, other
    return [placed[k] for k in range(len(texts))]


def fit_inside(fig: Figure, axes: list[Axes]) -> None:
    """Keep every text of the figure inside it, and each point's label off every other point, measured after
    layout: an x label wrapped by a character estimate can still spill over the figure's edge (rewrapped until it
    fits); a point's label goes where it stays inside its axes and covers no other label, no marker but its own
    point's and no bar, with a leader back to its point where it had to move away from it (:func:`_place_all`):
    placed only apart from each other, labels of a high-budget sweep's points sat beside other points and read as
    naming them. The labels stay out of the layout, so placing them does not move the axes they were placed on."""
    fig.draw_without_rendering()
    edge = fig.bbox
    rewrapped = False
    for ax in axes:
        label = ax.xaxis.label
        width = max(len(line) for line in label.get_text().split("\n"))
        while width > 12 and not _inside(label.get_window_extent(), edge):
            width -= 4
            label.set_text(textwrap.fill(" ".join(label.get_text().split()), width, break_long_words=False,
                                         break_on_hyphens=False))
            rewrapped = True
    if rewrapped:              # the layout changes with the label; else the first drawing's still holds
        fig.draw_without_rendering()
    points = 72 / fig.dpi
    for ax in axes:
        texts = [t for t in ax.texts if isinstance(t, Annotation)]       # "no run of this kind" is a plain text
        for text in texts:
            text.set_bbox(_BACKING)
        for text, placed in zip(texts, _place_all(ax, texts, points)):
            _set(text, placed.words, placed.dx, placed.dy, placed.align)
            if placed.leader is not None:       # drawn anew: an annotation takes its arrow when it is made
                ax.annotate(placed.words, text.xy, xytext=text.xyann, textcoords="offset points", ha="center",
                            va="center", multialignment=placed.align, fontsize=text.get_fontsize(),
                            color=text.get_color(), bbox=_BACKING,
                            arrowprops=_arrow(placed.box, placed.leader, ax.transData.transform(text.xy))
                            ).set_in_layout(False)
                text.remove()
    # The layout the labels were placed in is the one saved: a constrained layout run again by savefig took most of
    # the figure's time and, starting from the axes where this one left them, could move them by a pixel.
    fig.set_layout_engine("none")
