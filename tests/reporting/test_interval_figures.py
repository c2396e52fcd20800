"""Figures draw an interval that does not hold its point as it is: a percentile bootstrap interval need not (few
redraws, a small group's skewed AUROC), and error bars, which refuse negative lengths, made a finished study's report
fail on one (AUROC 0.571 with the interval [0.335, 0.415])."""

from __future__ import annotations

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection

from dpmed.evaluation.summaries import Estimate
from dpmed.reporting.study_figures import group_estimates, group_figure

AWRY = Estimate(value=0.571, low=0.335, high=0.415)


def _segments(fig) -> list[np.ndarray]:
    return [seg for c in fig.axes[0].collections if isinstance(c, LineCollection) for seg in c.get_segments()]


def test_an_interval_below_its_point_is_drawn_from_its_low_to_its_high_end_in_both_layouts():
    for narrow in (False, True):
        fig = group_figure(["[0,30)", "[30,60)"], [("a run", [AWRY, Estimate(value=0.8, low=0.7, high=0.9)]),
                                                   ("b", [None, Estimate(value=0.6)])],
                           ylabel="test AUROC", title="AUROC by age", narrow=narrow)
        ends = sorted(tuple(sorted(seg[:, 0 if narrow else 1])) for seg in _segments(fig))
        assert ends == [(0.335, 0.415), (0.7, 0.9)]                 # one line per interval, none for b's
        points = sorted(v for line in fig.axes[0].lines for v in (line.get_xdata() if narrow else line.get_ydata()))
        assert points == [0.571, 0.6, 0.8]
        assert [t.get_text() for t in fig.legends[0].get_texts()] == ["a run", "b"]   # one entry per run
    assert group_estimates(["[0,30)"], [("a run", [AWRY])], ylabel="AUROC", title="t")[:8] == b"\x89PNG\r\n\x1a\n"


def test_each_run_has_its_own_place_within_a_group_and_a_phone_lists_the_groups_top_down():
    """Two runs: a's points left of (on a phone: above) each group's tick and b's right of it, both 0.2 from it;
    an undefined value and a missing estimate draw nothing; the groups in their order, the first on top on a phone
    as in the tables."""
    groups = ["[0,30)", "[30,60)", "[60,70)"]
    series = [("a", [Estimate(value=0.7), Estimate(value=None), Estimate(value=0.8)]),
              ("b", [Estimate(value=0.6), Estimate(value=0.65), None])]
    for narrow in (False, True):
        fig = group_figure(groups, series, ylabel="test AUROC", title="AUROC by age", narrow=narrow)
        ax = fig.axes[0]
        drawn = sorted((round(float(y if narrow else x), 6), round(float(x if narrow else y), 6))
                       for line in ax.lines for x, y in zip(line.get_xdata(), line.get_ydata(), strict=True))
        assert drawn == [(-0.2, 0.7), (0.2, 0.6), (1.2, 0.65), (1.8, 0.8)], narrow
        ticks, labels = (ax.get_yticks(), ax.get_yticklabels()) if narrow else (ax.get_xticks(), ax.get_xticklabels())
        assert list(ticks) == [0, 1, 2] and [t.get_text() for t in labels] == groups
        assert ax.yaxis_inverted() == narrow


def test_a_figure_with_no_defined_value_draws_no_legend_and_warns_nothing():
    """A fairness figure of a small test set, where no group's AUROC is defined: before, matplotlib's "UserWarning:
    No artists with labels found to put in legend" reached the user's terminal after every such study, with the
    source line that raised it."""
    import warnings

    for narrow in (False, True):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            fig = group_figure(["female", "male"], [("a run", [None, Estimate(value=None)])],
                               ylabel="test AUROC", title="AUROC by sex", narrow=narrow)
        assert not fig.legends


def _drawn(fig):
    """The figure drawn (constrained layout done); its renderer and its own extent in display units."""
    FigureCanvasAgg(fig).draw()
    return fig.canvas.get_renderer(), fig.bbox


def _inside(box, edge) -> bool:
    return box.x0 >= edge.x0 - 1 and box.x1 <= edge.x1 + 1 and box.y0 >= edge.y0 - 1 and box.y1 <= edge.y1 + 1


def test_the_title_and_the_value_axis_are_named_in_both_layouts():
    """The value axis is y on a desktop and x on a phone (groups go on y there); either way it carries the figure's
    ylabel, and the axes carry its title. Fails if either is dropped, or the phone names the wrong axis."""
    for narrow in (False, True):
        fig = group_figure(["female", "male"], [("a", [Estimate(value=0.7), Estimate(value=0.8)])],
                           ylabel="test AUROC", title="AUROC by sex", narrow=narrow)
        ax = fig.axes[0]
        assert ax.get_title() == "AUROC by sex"
        assert (ax.get_xlabel(), ax.get_ylabel()) == (("test AUROC", "") if narrow else ("", "test AUROC")), narrow


def test_each_run_is_drawn_and_listed_in_a_colour_of_its_own():
    """Runs side by side within a group are told apart by colour: each run's points share one colour, no two runs
    share one, and the legend's marker of a run is its points' colour. Fails if every run is drawn in one colour."""
    from matplotlib.colors import to_hex

    series = [(name, [Estimate(value=0.6 + k / 10), Estimate(value=0.5 + k / 10)]) for k, name in enumerate("abc")]
    fig = group_figure(["female", "male"], series, ylabel="test AUROC", title="AUROC by sex")
    colours = [{to_hex(line.get_color()) for line in fig.axes[0].lines if line.get_label() == name}
               for name in "abc"]
    assert all(len(c) == 1 for c in colours) and len(set.union(*colours)) == 3, colours
    legend = fig.legends[0]
    handles = {text.get_text(): to_hex(handle.get_color())
               for text, handle in zip(legend.get_texts(), legend.legend_handles, strict=True)}
    assert handles == {name: next(iter(c)) for name, c in zip("abc", colours, strict=True)}


def test_each_run_has_a_marker_of_its_own_so_the_runs_are_told_apart_without_colour():
    """A report printed in grey, or read by one of the one in twelve men who cannot tell red from green, loses the
    colours (the quickstart's eps 1 and eps 8 runs were green and red dots): each run's points and its legend entry
    share a marker shape that no other run uses, up to ten runs. Fails if every run is drawn as a dot."""
    names = [f"run {k}" for k in range(10)]
    series = [(name, [Estimate(value=0.5 + k / 40), Estimate(value=0.4 + k / 40)]) for k, name in enumerate(names)]
    for narrow in (False, True):
        fig = group_figure(["female", "male"], series, ylabel="test AUROC", title="AUROC by sex", narrow=narrow)
        markers = [{line.get_marker() for line in fig.axes[0].lines if line.get_label() == name} for name in names]
        assert all(len(m) == 1 for m in markers) and len(set.union(*markers)) == len(names), (narrow, markers)
        legend = fig.legends[0]
        handles = {text.get_text(): handle.get_marker()
                   for text, handle in zip(legend.get_texts(), legend.legend_handles, strict=True)}
        assert handles == {name: next(iter(m)) for name, m in zip(names, markers, strict=True)}, narrow


def test_long_run_labels_and_a_long_title_wrap_inside_the_figure_below_the_axes():
    """Run labels name the arm and its swept values and can be long; so can a title. Each wraps to the figure's
    width (its text kept, in order), the title and the legend stay inside the figure, and the legend sits below the
    axes, not over the points. Fails if the labels or the title are not wrapped, or the legend is drawn inside."""
    label = "dp-sgd_eps1_C1_lr0.001_batch256_epochs30 at eps 1, clipped at C 1, a long label " * 2
    title = "test AUROC by age group of every run of this study, each with its bootstrap interval, " * 2
    for narrow in (False, True):
        series = [(label, [Estimate(value=0.7)] * 2), ("b", [Estimate(value=0.6)] * 2)]
        fig = group_figure(["[0,30)", "[30,60)"], series, ylabel="test AUROC", title=title, narrow=narrow)
        renderer, edge = _drawn(fig)
        ax, legend = fig.axes[0], fig.legends[0]
        assert ["".join(t.get_text().split()) for t in legend.get_texts()] == ["".join(label.split()), "b"]
        assert "".join(ax.get_title().split()) == "".join(title.split()) and "\n" in ax.get_title()
        assert _inside(ax.title.get_window_extent(renderer), edge), narrow
        box = legend.get_window_extent(renderer)
        assert _inside(box, edge), (narrow, box, edge)
        assert box.y1 <= ax.get_window_extent(renderer).y0 + 1, narrow           # below the axes


def test_two_legend_columns_only_where_every_label_fits_half_the_width():
    """On a desktop short labels share a row two by two; one label too long for half the figure puts every entry on
    its own row; a phone always lists them one under another. Fails if the column count ignores the labels' length
    or the layout."""
    def rows(labels, narrow=False):
        fig = group_figure(["female", "male"], [(name, [Estimate(value=0.7)] * 2) for name in labels],
                           ylabel="test AUROC", title="t", narrow=narrow)
        renderer, _ = _drawn(fig)
        return len({round(t.get_window_extent(renderer).y0) for t in fig.legends[0].get_texts()})

    assert rows(["a", "b"]) == 1
    assert rows(["a", "b", "c", "d"]) == 2
    assert rows(["a", "a label of a run on one line, over half the figure"]) == 2       # 50 letters of a 6-inch figure
    assert rows(["a", "a rather longer label of a run that takes more than half of the figure"]) == 2
    assert rows(["a", "b"], narrow=True) == 2


def test_the_png_of_the_phone_layout_is_drawn_at_twice_a_phone_s_width():
    """The report's <picture> gives a phone the narrow PNG, drawn 780 px wide to be sharp on a 2x screen 390 px wide;
    a desktop's is another width. Fails if the PNG functions drop ``narrow`` and hand a phone the desktop figure."""
    import struct

    from dpmed.reporting.study_figures import cam_grid

    def width(png: bytes) -> int:
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        return struct.unpack(">I", png[16:20])[0]                 # the IHDR chunk: width, then height

    estimates = [Estimate(value=0.7, low=0.6, high=0.8)] * 2
    images = np.full((4, 1, 6, 6), 0.5)
    for narrow in (False, True):
        drawn = [width(group_estimates(["a", "b"], [("r", estimates)], ylabel="AUROC", title="t", narrow=narrow)),
                 width(cam_grid(images, None, [("r", images[:, 0])], list("wxyz"), narrow=narrow))]
        assert [w == 780 for w in drawn] == [narrow, narrow], (narrow, drawn)
