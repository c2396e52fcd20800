"""Figures draw an interval that does not hold its point as it is: a percentile bootstrap interval need not (few
redraws, a small group's skewed AUROC), and error bars, which refuse negative lengths, made a finished study's report
fail on one (AUROC 0.571 with the interval [0.335, 0.415])."""

from __future__ import annotations

import numpy as np
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
                       for line in ax.lines for x, y in zip(line.get_xdata(), line.get_ydata()))
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
