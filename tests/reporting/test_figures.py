"""The AUROC-versus-eps figure: local DP's eps per image and DP-SGD's eps never share an axis, and every mark on it
is named (the runs, the non-private band, the chance line)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from matplotlib.lines import Line2D
from matplotlib.path import Path
from matplotlib.text import Annotation, Text
from matplotlib.transforms import Bbox

from dpmed.comparisons import compare_runs
from dpmed.mechanisms import PrivacyCard
from dpmed.reporting import point_labels
from dpmed.reporting.figures import auroc_alt, auroc_figure


def _metrics(auroc, low, high):
    return {"test_auroc": auroc, "test_auroc_low": low, "test_auroc_high": high}


@pytest.fixture
def records(make_record):
    laplace = PrivacyCard(mechanism="pixel_laplace", is_dp=True, statement="eps_image = 8,192", epsilon=8192.0,
                          epsilon_image=8192.0, epsilon_pixel=2.0, delta=0.0)
    return [make_record("non-private_seed0", "non-private", metrics=_metrics(0.96, 0.94, 0.98)),
            make_record("pixel-laplace_b0.5_seed0", "pixel-laplace", metrics=_metrics(0.91, 0.86, 0.95))
            .model_copy(update={"mechanism": "pixel_laplace", "privacy": laplace}),
            make_record("dp-sgd_eps1_C1_seed0", "dp-sgd", "dp_sgd", eps=1.0, metrics=_metrics(0.90, 0.85, 0.94)),
            make_record("dp-sgd_eps8_C1_seed0", "dp-sgd", "dp_sgd", eps=8.0, metrics=_metrics(0.87, 0.82, 0.92))]


def _points(ax) -> list[float]:
    """The x of every plotted point (error bar caps share it)."""
    return sorted({float(x) for line in ax.get_lines() for x in np.atleast_1d(line.get_xdata())
                   if line.get_marker() not in (None, "None", "", " ")})


def test_the_non_private_line_and_band_are_the_non_private_runs(records):
    """The black line and band are the non-private AUROC and its interval (0.96 [0.94, 0.98]), in every panel: not
    a private run's."""
    fig = auroc_figure(records)
    for ax in fig.axes[:2]:
        black = {float(line.get_ydata()[0]) for line in ax.get_lines() if line.get_color() == "k"}
        assert black == {0.96}
        band = [p.get_path().get_extents().transformed(p.get_patch_transform()) for p in ax.patches]
        assert [(round(b.y0, 6), round(b.y1, 6)) for b in band] == [(0.94, 0.98)]


def test_each_local_dp_row_shows_its_perturbed_images_under_the_originals():
    from dpmed.reporting.figures import ldp_examples_figure

    original, perturbed = np.zeros((2, 1, 4, 4)), np.full((2, 1, 4, 4), 0.5)
    fig = ldp_examples_figure([("laplace", original, perturbed)])
    shown = [float(ax.images[0].get_array().mean()) for ax in fig.axes if ax.images]
    assert shown == [0.0, 0.0, 0.5, 0.5]


@pytest.mark.parametrize("narrow", [False, True])
def test_each_cam_row_lays_its_own_map_of_each_image_over_that_image(narrow):
    """The CAM grid (`dpmed.reporting.study_figures`): column c shows image c, its lesion outlined where it has one,
    and every run's map of image c over it; titles name the columns on a desktop; a phone shows three columns."""
    from dpmed.reporting.study_figures import cam_grid_figure

    n = 4
    images = np.stack([np.full((1, 6, 6), (c + 1) / 10) for c in range(n)])           # image c: all (c + 1) / 10
    masks = np.zeros((n, 6, 6), bool)
    masks[1, 2:4, 2:4] = True                                                          # only image 1 has a lesion
    cams = {"a": np.stack([np.full((6, 6), 0.5 + c / 10) for c in range(n)]), "b": np.zeros((n, 6, 6))}
    fig = cam_grid_figure(images, masks, list(cams.items()), ["w", "x", "y", "z"], narrow=narrow)
    shown = min(3, n) if narrow else n
    grid = [ax for ax in fig.get_axes() if ax.images]
    assert len(grid) == 3 * shown
    for c, ax in enumerate(grid[:shown]):                                               # the images' row
        assert [float(im.get_array().mean()) for im in ax.images] == pytest.approx([(c + 1) / 10])
        assert bool(ax.collections) == (c == 1), c                                    # the lesion's outline
        assert ax.get_title() == ("" if narrow else "wxyz"[c])
    for r, cam in enumerate(cams.values(), start=1):
        for c, ax in enumerate(grid[r * shown:(r + 1) * shown]):
            image, heat = (float(im.get_array().mean()) for im in ax.images)
            assert (image, heat) == pytest.approx(((c + 1) / 10, float(cam[c].mean()))), (r, c)


@pytest.mark.parametrize("narrow", [False, True])
def test_a_cam_grid_without_lesion_masks_shows_every_image_and_outlines_none(narrow):
    """A data set without lesion masks (masks None) still gets its grid: each column's image in the first row, no
    outline drawn, and the run's map over every image. Fails if the grid reads the masks without asking whether
    there are any."""
    from dpmed.reporting.study_figures import cam_grid_figure

    images = np.stack([np.full((1, 6, 6), (c + 1) / 10) for c in range(4)])
    fig = cam_grid_figure(images, None, [("a", np.full((4, 6, 6), 0.3))], ["w", "x", "y", "z"], narrow=narrow)
    shown = 3 if narrow else 4
    grid = [ax for ax in fig.get_axes() if ax.images]
    assert len(grid) == 2 * shown
    firsts = [float(ax.images[0].get_array().mean()) for ax in grid[:shown]]
    assert firsts == pytest.approx([0.1, 0.2, 0.3, 0.4][:shown])
    assert not any(ax.collections for ax in grid)
    assert all(len(ax.images) == 2 for ax in grid[shown:])


@pytest.mark.parametrize("narrow", [False, True])
def test_local_dp_and_dp_sgd_eps_get_separate_panels(records, narrow):
    fig = auroc_figure(records, narrow=narrow)
    local, central = fig.axes[:2]
    assert len([ax for ax in fig.axes if ax.get_visible()]) == 2
    assert _points(local) == [8192.0]                                  # eps per image alone on its axis
    assert _points(central) == pytest.approx([0.99, 7.92])             # DP-SGD's eps (as accounted) on its own
    assert "per image" in local.get_xlabel() and "add or remove one" in central.get_xlabel()
    assert local.get_xscale() == central.get_xscale() == "log"


def test_legend_names_the_non_private_band_and_the_chance_line_and_points_carry_run_labels(records):
    fig = auroc_figure(records)
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "non-private AUROC" in legend and "non-private interval" in legend and "chance (AUROC 0.5)" in legend
    labels = {t.get_text() for ax in fig.axes for t in ax.texts}
    assert {"pixel-laplace", "dp-sgd_eps1_C1", "dp-sgd_eps8_C1"} <= labels      # arm and swept values


def test_one_kind_of_eps_is_one_panel_and_a_run_below_chance_is_shown(records, make_record):
    only_dp = [records[0], records[2]]
    assert len(auroc_figure(only_dp).axes) == 1
    below = only_dp + [make_record("dp-sgd_eps2_C1_seed0", "dp-sgd", "dp_sgd", eps=2.0,      # one seed: intervals
                                   metrics=_metrics(0.39, 0.31, 0.48))]
    bottom, top = auroc_figure(below).axes[0].get_ylim()
    assert bottom == pytest.approx(0.29) and top == 1.01
    assert auroc_figure(only_dp).axes[0].get_ylim() == (0.4, 1.01)


def test_the_dp_sgd_axis_names_the_unit_each_arm_uses_where_they_differ(records):
    """Arms at one patient and at one image shared an axis labelled "add or remove one patient or image"."""
    image = records[3]
    patient = records[2].model_copy(update={"arm": "dp-patient",
                                            "privacy": records[2].privacy.model_copy(update={"unit": "patient"})})
    for narrow in (False, True):
        label = " ".join(auroc_figure([records[0], patient, image], narrow=narrow).axes[0].get_xlabel().split())
        said = {unit: set(arms.split(", ")) for unit, arms in re.findall(r"one (patient|image) \(([^()]*)\)", label)}
        assert said == {"patient": {"dp-patient"}, "image": {"dp-sgd"}}, label


def test_the_dp_sgd_axis_tells_a_capped_image_unit_from_the_image(records):
    """Before, runs on one image of a training set capped at k per patient shared "one image" with uncapped runs,
    though their eps are of another neighbour relation (and do not compose with theirs)."""
    image = records[3]
    capped = records[2].model_copy(update={"arm": "dp-capped", "privacy": records[2].privacy.model_copy(
        update={"unit": "image", "capped_at": 2})})
    label = " ".join(auroc_figure([records[0], capped, image]).axes[0].get_xlabel().split())
    assert "one image of the training set as capped at 2 per patient (dp-capped)" in label, label
    assert "one image (dp-sgd)" in label, label


def test_the_report_names_the_runs_the_figure_leaves_out_and_why(records, make_record, report_html):
    """A run with no eps (a flawed mechanism's reproduction, shuffled batches) was dropped from the figure unsaid."""
    shift = PrivacyCard(mechanism="scalar_shift", is_dp=False, statement="NOT DP: one Laplace shift per image")
    shuffled = PrivacyCard(mechanism="dp_sgd", is_dp=False, statement="NOT DP: shuffled batches", delta=1e-5,
                           accountant="pld", unit="image", epsilon_if_poisson=8.0, sampling="shuffle")
    extra = [make_record("shift_b1_seed0", "shift", metrics=_metrics(0.7, 0.6, 0.8)).model_copy(
                 update={"mechanism": "scalar_shift", "privacy": shift}),
             make_record("shuffled_eps8_C1_seed0", "shuffled", "dp_sgd", eps=8.0, metrics=_metrics(0.8, 0.7, 0.9))
             .model_copy(update={"privacy": shuffled})]
    html = report_html(records + extra)
    caption = re.sub(r"<[^>]+>", "", html.split('id="utility"')[1].split("</figure>")[0].split("<figcaption>")[1])
    named = set(re.findall(r"(\S+_seed0) \(", caption))
    assert named == {"shift_b1_seed0", "shuffled_eps8_C1_seed0"}      # the plotted runs are not among them
    assert "reproduces" in caption and "shuffled" in caption and "not DP" in caption


@pytest.mark.parametrize("narrow", [False, True])
def test_a_local_dp_studys_legend_and_labels_stay_inside_the_figure_and_apart(make_record, narrow):
    """In a local-DP-only study the one panel's figure is narrow, and the legend's three columns ran past both edges
    ("chance (AUROC" cut off, a marker missing); in reproducible mode the long point labels of nearby points
    overlapped each other and left the figure, and then sat on the other mechanism's bar. Measured on the drawn
    figure, as the saved PNG shows it."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from dpmed.config import SweptValue
    from dpmed.mechanisms.cards import label_randomness

    def local(mechanism: str, arm: str, b: float, eps: float, auroc: float):
        card = label_randomness(PrivacyCard(mechanism=mechanism, is_dp=True, statement="eps_image", epsilon=eps,
                                            epsilon_image=eps, delta=0.0, accountant="closed form"), "reproducible")
        record = make_record(f"{arm}_b{b}_seed0", arm, metrics=_metrics(auroc, auroc - 0.05, auroc + 0.04))
        plan = record.plan.model_copy(update={"swept": (SweptValue(key="b", tag="b", value=b),)})
        return record.model_copy(update={"mechanism": mechanism, "privacy": card, "plan": plan})

    records = [make_record("non-private_seed0", "non-private", metrics=_metrics(0.96, 0.94, 0.98)),
               local("pixel_laplace", "pixel-laplace", 0.5, 8192.0, 0.91),
               local("pixel_laplace", "pixel-laplace", 1.0, 4096.0, 0.85),
               local("pixel_gaussian", "pixel-gaussian", 0.5, 8000.0, 0.88),
               local("pixel_gaussian", "pixel-gaussian", 1.0, 4000.0, 0.83)]
    fig = auroc_figure(records, narrow=narrow)
    FigureCanvasAgg(fig).draw()
    renderer, edge = fig.canvas.get_renderer(), fig.bbox

    def inside(box) -> bool:
        return edge.x0 <= box.x0 and box.x1 <= edge.x1 and edge.y0 <= box.y0 and box.y1 <= edge.y1

    legend = fig.legends[0]
    assert inside(legend.get_window_extent(renderer)), (legend.get_window_extent(renderer), edge)
    assert "chance (AUROC 0.5)" in [t.get_text() for t in legend.get_texts()]
    (ax,) = fig.axes
    assert inside(ax.xaxis.label.get_window_extent(renderer))
    labels = [t for t in ax.texts if "not DP" in t.get_text()]          # the note may be shortened to fit
    assert len(labels) == 4
    for text in labels:
        assert inside(text.get_window_extent(renderer)), (text.get_text(), text.get_window_extent(renderer), edge)
    _assert_each_label_names_its_point(fig)


def test_high_budget_labels_with_their_not_dp_reason_stay_inside_the_phone_figure(make_record):
    """eps 1e6 .. 1e15 whose noise the sampler cannot reach: before, "(not DP: noise below the sampler's reach)"
    labels ran past the narrow figure's left edge (x0 = -236 px), over the axis title."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    records = [make_record("non-private_seed0", "non-private", metrics=_metrics(0.96, 0.94, 0.98)),
               make_record("dp_eps1_seed0", "dp", "dp_sgd", eps=1.0, metrics=_metrics(0.80, 0.75, 0.85))]
    for k, eps in enumerate((1e6, 1e10, 1e15)):
        r = make_record(f"dp_eps{eps:g}_seed0", "dp", "dp_sgd", eps=eps, metrics=_metrics(0.9 + k / 100, 0.85, 0.95))
        records.append(r.model_copy(update={"privacy": r.privacy.model_copy(update={"is_dp": False,
                                                                                    "sampler_voids": True})}))
    fig = auroc_figure(records, narrow=True)
    FigureCanvasAgg(fig).draw()
    renderer, edge = fig.canvas.get_renderer(), fig.bbox
    labels = [t for ax in fig.axes for t in ax.texts if "not DP" in t.get_text()]
    assert len(labels) == 3
    for text in labels:
        box = text.get_window_extent(renderer)
        assert edge.x0 <= box.x0 and box.x1 <= edge.x1, (text.get_text(), box, edge)


def test_every_report_figure_is_written_to_png_by_one_function():
    """figures.py and study_figures.py each had their own copy of the PNG writer (and the threat section a third,
    inline): a change to how figures are saved (dpi, size) would reach some figures and not others."""
    from pathlib import Path

    import dpmed.reporting
    from dpmed.reporting import figures, study_figures, threat_section

    sources = {p.name: p.read_text() for p in Path(dpmed.reporting.__file__).parent.glob("*.py")}
    writers = (".savefig(", ".print_png(", ".print_figure(")
    assert [name for name, text in sources.items() if any(w in text for w in writers)] == ["figures.py"]
    assert sum(sources["figures.py"].count(w) for w in writers) == 1
    assert study_figures.png_bytes is threat_section.png_bytes is figures.png_bytes


def test_runs_of_other_deltas_send_the_reader_to_their_cards_and_points_name_configurations(records, make_record):
    """A second seed makes the study a multi-seed one: a point is a configuration (its label carries no seed)."""
    dp = make_record("dp-sgd_eps2_C1_seed1", "dp-sgd", "dp_sgd", eps=2.0, seed=1, metrics=_metrics(0.9, 0.85, 0.94))
    dp = dp.model_copy(update={"privacy": dp.privacy.model_copy(update={"delta": 1e-6})})
    fig = auroc_figure([*records, dp])
    central = fig.axes[1]
    assert "δ and accountant per run: see its card" in central.get_xlabel().replace("\n", " ")
    assert central.get_xscale() == "log"
    assert {t.get_text() for t in central.texts} == {"dp-sgd_eps1_C1", "dp-sgd_eps2_C1", "dp-sgd_eps8_C1"}


def _seeds(make_record, aurocs: dict[str, list[float | None]]) -> list:
    """Runs of seeds 0, 1, 2: the non-private arm's and DP-SGD's at eps 1 and 8 ("eps1": the test AUROC of each
    seed, None for undefined), each with a bootstrap interval of its own that the figure must not draw."""
    runs = []
    for name, values in aurocs.items():
        for seed, auroc in enumerate(values):
            metrics = _metrics(auroc, auroc - 0.2, auroc + 0.03) if auroc is not None else _metrics(None, None, None)
            if name == "none":
                runs.append(make_record(f"non-private_seed{seed}", "non-private", seed=seed, metrics=metrics))
            else:
                runs.append(make_record(f"dp-sgd_{name}_C1_seed{seed}", "dp-sgd", "dp_sgd", eps=float(name[3:]),
                                        seed=seed, metrics=metrics))
    return runs


def _means(ax) -> list[tuple[float, float]]:
    """(x, y) of each configuration's point: the size-6 markers (a seed's faint dot is size 3)."""
    return sorted((float(line.get_xdata()[0]), float(line.get_ydata()[0])) for line in ax.get_lines()
                  if line.get_marker() == "o" and line.get_markersize() == 6)


def _legend_texts(fig) -> list[str]:
    """The legend's entries, each as one line: a phone's legend wraps its long entries to the figure's width."""
    return [" ".join(t.get_text().split()) for t in fig.legends[0].get_texts()]


@pytest.mark.parametrize("narrow", [False, True])
def test_a_multi_seed_study_draws_each_configuration_once_as_its_mean_and_t_interval_over_seeds(make_record, narrow):
    """With seeds 0, 1, 2 the figure had three black non-private lines and bands, unlabelled, and three points per
    configuration labelled "dp-sgd_eps1_C1 s0", "... s1", "... s2" piled on each other at nearly one eps. The bar
    and band were then the seeds' range, which holds the true mean of 3 seeds only 75 % of the time; they are now
    the t interval over seeds (2 df: t 4.3027), and the faint dots show the range."""
    def t_interval(values):
        half = 4.302653 * np.std(values, ddof=1) / np.sqrt(len(values))
        return round(np.mean(values) - half, 6), round(np.mean(values) + half, 6)

    records = _seeds(make_record, {"none": [0.96, 0.94, 0.92], "eps1": [0.80, 0.86, 0.83], "eps8": [0.90, 0.84, 0.88]})
    fig = auroc_figure(records, narrow=narrow)
    (ax,) = fig.axes
    black = [float(line.get_ydata()[0]) for line in ax.get_lines() if line.get_color() == "k"]
    assert black == [pytest.approx(0.94)]                                    # one line, at the mean over seeds
    band = [p.get_path().get_extents().transformed(p.get_patch_transform()) for p in ax.patches]
    assert [(round(b.y0, 6), round(b.y1, 6)) for b in band] == [pytest.approx(t_interval([0.96, 0.94, 0.92]))]
    assert sorted(t.get_text() for t in ax.texts) == ["dp-sgd_eps1_C1", "dp-sgd_eps8_C1"]     # no "s0", "s1", ...
    assert _means(ax) == [pytest.approx((0.99, (0.80 + 0.86 + 0.83) / 3)),      # at the mean of the seeds' eps
                          pytest.approx((7.92, (0.90 + 0.84 + 0.88) / 3))]
    bars = sorted(tuple(round(float(y), 6) for y in segment[:, 1]) for c in ax.collections
                  for segment in c.get_segments())
    assert bars == [pytest.approx(t_interval([0.80, 0.86, 0.83])),   # no bootstrap interval, no range
                    pytest.approx(t_interval([0.90, 0.84, 0.88]))]
    dots = sorted(round(float(y), 6) for line in ax.get_lines() if line.get_marker() == "o"
                  and line.get_markersize() == 3 for y in line.get_ydata())
    assert dots == [0.80, 0.83, 0.84, 0.86, 0.88, 0.90]              # each seed, faint
    legend = _legend_texts(fig)
    assert {"non-private AUROC, mean of 3 seeds", "non-private, 95% t interval over seeds",
            "bars: 95% t interval over seeds, faint dots: each seed", "chance (AUROC 0.5)"} <= set(legend)
    assert "non-private AUROC" not in legend and "non-private interval" not in legend


def test_the_bars_over_seeds_are_at_the_study_s_confidence_as_the_runs_intervals_are(make_record):
    """A study at 90% has every run's bootstrap interval at 90%: the t interval over seeds beside them must be too
    (t 2.919986 with 2 df), and the legend must say which."""
    values = [0.80, 0.86, 0.83]
    records = _seeds(make_record, {"none": [0.96, 0.94, 0.92], "eps1": values})
    fig = auroc_figure(records, confidence=0.90)
    (ax,) = fig.axes
    half = 2.919986 * np.std(values, ddof=1) / np.sqrt(3)
    bars = [tuple(float(y) for y in segment[:, 1]) for c in ax.collections for segment in c.get_segments()]
    assert bars == [pytest.approx((np.mean(values) - half, np.mean(values) + half), abs=1e-6)]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert {"non-private, 90% t interval over seeds", "bars: 90% t interval over seeds, faint dots: each seed"} \
        <= set(legend)


def test_the_bars_over_seeds_are_the_intervals_comparisons_json_gives_each_arm_value(make_record):
    """A reader of comparisons.json finds the figure's bar of each configuration as its metrics_by_value entry."""
    records = _seeds(make_record, {"none": [0.96, 0.94, 0.92], "eps1": [0.80, None, 0.83]})
    (ax,) = auroc_figure(records, confidence=0.90).axes
    bars = [tuple(float(y) for y in segment[:, 1]) for c in ax.collections for segment in c.get_segments()]
    own = {v.label: v.test_auroc for v in compare_runs(records, {}, kind="binary", label_names=["no", "yes"],
                                                       confidence=0.90).metrics_by_value}
    assert bars == [pytest.approx((own["dp-sgd_eps1_C1"].low, own["dp-sgd_eps1_C1"].high), abs=1e-12)]
    assert own["dp-sgd_eps1_C1"].n_seeds == 2 and own["non-private"].low is not None


def test_a_configuration_with_an_undefined_seed_averages_the_others_and_says_so(make_record):
    """The count of seeds a point averages is named where it differs between configurations."""
    records = _seeds(make_record, {"none": [0.96, None, 0.92], "eps1": [0.80, 0.86, 0.83], "eps8": [0.90, None, 0.86]})
    fig = auroc_figure(records)
    (ax,) = fig.axes
    assert sorted(t.get_text() for t in ax.texts) == ["dp-sgd_eps1_C1 (3 seeds)", "dp-sgd_eps8_C1 (2 of 3 seeds)"]
    assert _means(ax)[1] == pytest.approx((7.92, 0.88))
    assert [float(line.get_ydata()[0]) for line in ax.get_lines() if line.get_color() == "k"] == [pytest.approx(0.94)]
    assert "non-private AUROC, mean of 2 seeds" in [t.get_text() for t in fig.legends[0].get_texts()]


def test_a_multi_seed_study_with_one_non_private_run_draws_its_line_without_a_band_and_says_one_seed(make_record):
    """Seeds 0 and 1 with the non-private run of seed 1 failed: its one run has no range over seeds to draw, so the
    line at its AUROC has no band, and the legend says the line is one seed's, not a mean with an interval."""
    records = _seeds(make_record, {"none": [0.96], "eps1": [0.80, 0.86]})
    fig = auroc_figure(records)
    (ax,) = fig.axes
    assert [float(line.get_ydata()[0]) for line in ax.get_lines() if line.get_color() == "k"] == [0.96]
    assert len(ax.patches) == 0
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "non-private AUROC, 1 seed" in legend
    assert not [t for t in legend if "over seeds" in t and "bars" not in t], legend
    assert _means(ax) == [pytest.approx((0.99, 0.83))]


def test_a_non_private_arm_with_one_defined_seed_is_drawn_as_that_seed_not_as_a_mean_of_1_seeds(make_record):
    """Of the non-private runs of seeds 0 and 1, only seed 0's AUROC is defined: its line is that seed's, with no
    band, and the legend says so; not "mean of 1 seeds" beside "t interval over seeds" and a band of zero width."""
    records = _seeds(make_record, {"none": [0.96, None], "eps1": [0.80, 0.86]})
    fig = auroc_figure(records)
    (ax,) = fig.axes
    assert [float(line.get_ydata()[0]) for line in ax.get_lines() if line.get_color() == "k"] == [0.96]
    assert len(ax.patches) == 0
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "non-private AUROC, 1 seed" in legend and "non-private, 95% t interval over seeds" not in legend, legend


def test_the_report_says_a_multi_seed_figures_bars_are_ranges_over_seeds(make_record, report_html):
    """One seed's figure draws bootstrap intervals; a multi-seed one's bars are t intervals over seeds, and only its
    caption says so."""
    def caption(records) -> str:
        utility = report_html(records).split('id="utility"')[1].split("</figure>")[0]
        return re.sub(r"<[^>]+>", "", utility.split("<figcaption>")[1]) if "<figcaption>" in utility else ""

    said = "Each point is the mean test AUROC over a configuration's seeds"
    assert said in caption(_seeds(make_record, {"none": [0.96, 0.94], "eps1": [0.80, 0.86]}))
    assert said not in caption(_seeds(make_record, {"none": [0.96], "eps1": [0.80]}))


def test_two_non_private_arms_over_seeds_are_two_lines_not_one_mean(make_record):
    """Two non-private recipes (0.95, 0.94 and 0.70, 0.72) pooled into one line sat at 0.8275, a value neither
    reached; each arm is its own line, at its seeds' mean, with its own t interval over seeds (1 df: t 12.706)."""
    records = _seeds(make_record, {"none": [0.95, 0.94], "eps1": [0.80, 0.86]})
    records += [make_record(f"other_seed{seed}", "other", seed=seed, metrics=_metrics(v, v - 0.1, v + 0.02))
                for seed, v in enumerate([0.70, 0.72])]
    fig = auroc_figure(records)
    (ax,) = fig.axes
    black = sorted(float(line.get_ydata()[0]) for line in ax.get_lines() if line.get_color() == "k")
    assert black == [pytest.approx(0.71), pytest.approx(0.945)]
    band = sorted((round(b.y0, 6), round(b.y1, 6)) for b in (p.get_path().get_extents().transformed(
        p.get_patch_transform()) for p in ax.patches))
    assert band == [pytest.approx((0.71 - 12.7062 * 0.01, 0.71 + 12.7062 * 0.01), abs=1e-4),
                    pytest.approx((0.945 - 12.7062 * 0.005, 1.0), abs=1e-4)]     # an AUROC ends at 1
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "non-private AUROC, mean over seeds, one line per arm" in legend
    assert "non-private, 95% t interval over seeds" in legend


def test_a_high_budget_sweep_axis_names_its_one_delta_and_both_accountants(make_record):
    """eps 1 and 8 by PLD, eps 1e6 .. 1e15 by RDP (PLD's ceiling is 500), all at delta 1e-5: the axis sent the reader
    to every card for a delta that every run shares, and named no accountant at all."""
    records = [make_record("non-private_seed0", "non-private", metrics=_metrics(0.96, 0.94, 0.98))]
    for eps in (1.0, 8.0, 1e6, 1e15):
        r = make_record(f"dp-sgd_eps{eps:g}_C1_seed0", "dp-sgd", "dp_sgd", eps=eps, metrics=_metrics(0.9, 0.85, 0.95))
        if eps > 500:
            r = r.model_copy(update={"privacy": r.privacy.model_copy(update={"accountant": "rdp"})})
        records.append(r)
    label = auroc_figure(records).axes[0].get_xlabel().replace("\n", " ")
    assert "δ 1e-05" in label and "PLD" in label and "RDP" in label, label
    assert "δ and accountant per run" not in label, label


def _high_budget(make_record, seeds: int = 3) -> list:
    """Runs like configs/reproductions/004_high_budget.yaml's over several seeds: non-private, DP-SGD at eps 1 and 8
    (PLD) and at 1e6 .. 1e15 (RDP; not DP: noise below the sampler's reach), each seed's AUROC spread a few
    hundredths, the high budgets near the non-private line and near each other."""
    aurocs = {None: [0.95, 0.93, 0.94], 1.0: [0.78, 0.83, 0.80], 8.0: [0.86, 0.88, 0.84], 1e6: [0.92, 0.95, 0.93],
              1e9: [0.93, 0.95, 0.94], 1e12: [0.94, 0.92, 0.95], 1e15: [0.93, 0.95, 0.94]}
    records = []
    for eps, values in aurocs.items():
        for seed, v in enumerate(values[:seeds]):
            metrics = _metrics(v, v - 0.04, v + 0.03)
            if eps is None:
                records.append(make_record(f"non-private_seed{seed}", "non-private", seed=seed, metrics=metrics))
                continue
            r = make_record(f"dp-sgd_eps{eps:g}_C1_seed{seed}", "dp-sgd", "dp_sgd", eps=eps, seed=seed, metrics=metrics)
            if eps > 500:
                r = r.model_copy(update={"privacy": r.privacy.model_copy(
                    update={"accountant": "rdp", "is_dp": False, "sampler_voids": True})})
            records.append(r)
    return records


def _glyphs(ax) -> list[tuple]:
    """Every marker and bar of ``ax`` as (window extent, the data x and y of what it marks): each line drawn with a
    marker as matplotlib measures it (a mean's one marker; a configuration's seeds together), each bar (a line
    collection) as its segments' extent. Measured after layout."""
    found = [(line.get_window_extent(), tuple(zip(line.get_xdata(), line.get_ydata(), strict=True)))
             for line in ax.get_lines() if line.get_marker() not in (None, "None", "", " ")]
    for bars in ax.collections:                              # a collection's own extent is in data coordinates
        ends = np.concatenate(bars.get_segments())
        shown = bars.get_transform().transform(ends)
        found.append((Bbox.from_extents(*shown.min(0), *shown.max(0)), tuple(map(tuple, ends))))
    return found


def _marks(ax) -> list[tuple[float, Bbox]]:
    """Every marker of ``ax`` as a window box of its own (a configuration's seeds: one dot each) and every bar as its
    extent, each with the data x of the point it belongs to. Measured after layout."""
    found = []
    for line in ax.get_lines():
        if line.get_marker() not in (None, "None", "", " "):
            r = line.get_markersize() / 2 * ax.figure.dpi / 72
            found += [(float(x), Bbox.from_extents(u - r, v - r, u + r, v + r)) for (x, _), (u, v) in
                      zip(line.get_xydata(), line.get_transform().transform(line.get_xydata()), strict=True)]
    for bars in ax.collections:
        for segment in bars.get_segments():
            shown = bars.get_transform().transform(segment)
            found.append((float(segment[0][0]), Bbox.from_extents(*shown.min(0), *shown.max(0))))
    return found


def _assert_each_label_names_its_point(fig) -> None:
    """Every point's label, measured after layout, lies inside its axes, apart from the other labels, and on no
    marker but its own point's and on no bar; a label away from its point (more than the gap a label beside its
    point, or above or below its bar, keeps) has a leader that ends at its point, and no two leaders cross, nor a
    leader another point's marker or bar (a reader following it would reach that point). Each axis title lies inside
    the figure."""
    fig.draw_without_rendering()
    points = fig.dpi / 72
    for ax in fig.axes:
        title, edge = ax.xaxis.label.get_window_extent(), fig.bbox
        assert edge.x0 <= title.x0 and title.x1 <= edge.x1, (ax.get_xlabel(), title, edge)
        arrows = [t.arrow_patch for t in ax.texts if isinstance(t, Annotation) and t.arrow_patch is not None]
        leaders = [a.get_transform().transform_path(a.get_path()) for a in arrows]
        for i, one in enumerate(leaders):
            assert not any(one.intersects_path(other, filled=False) for other in leaders[i + 1:]), one.vertices
        labels = [t for t in ax.texts if isinstance(t, Annotation)]
        glyphs, room = _glyphs(ax), ax.bbox
        boxes = [Text.get_window_extent(t) for t in labels]      # the words: a leader ends at the point by design
        for text, box in zip(labels, boxes, strict=True):
            name = text.get_text()
            assert room.x0 <= box.x0 and box.x1 <= room.x1 and room.y0 <= box.y0 and box.y1 <= room.y1, name
            assert not any(box.overlaps(other) for other in boxes if other is not box), name
            hit = [xy for extent, xy in glyphs if box.overlaps(extent) and xy != (tuple(text.xy),)]
            assert not hit, (name, hit)
            near = Bbox.union([extent for extent, xy in glyphs if all(x == text.xy[0] for x, _ in xy)])
            away = np.hypot(max(near.x0 - box.x1, box.x0 - near.x1, 0), max(near.y0 - box.y1, box.y0 - near.y1, 0))
            if text.arrow_patch is None:
                assert away <= 8 * points, (name, away / points)
            else:
                arrow = text.arrow_patch
                leader = arrow.get_transform().transform_path(arrow.get_path())
                at = ax.transData.transform(text.xy)
                assert np.hypot(*(leader.vertices[-1] - at)) <= 6 * points, (name, leader.vertices[-1], at)
                crossed = [x for x, mark in _marks(ax) if x != text.xy[0]
                           and leader.intersects_bbox(mark, filled=False)]
                assert not crossed, (name, crossed)


@pytest.mark.parametrize("narrow", [False, True])
def test_high_budget_labels_sit_on_no_other_point_and_a_moved_label_has_a_leader_to_its_point(make_record, narrow):
    """004's budgets (eps 1 to 1e15, several seeds, the high ones near the non-private line and each other): labels
    kept apart only from each other sat on another budget's marker or bar, or beside another point, where a reader
    takes them to name it. Placing them moves them and may shorten a not-DP note, and says the same."""
    fig = auroc_figure(_high_budget(make_record), narrow=narrow)
    _assert_each_label_names_its_point(fig)
    (ax,) = fig.axes
    labels = [" ".join(t.get_text().split()) for t in ax.texts]
    assert sorted(re.sub(r" \(not DP[^)]*\)", "", label) for label in labels) == sorted(
        f"dp-sgd_eps{eps}_C1" for eps in ("1", "8", "1e06", "1e09", "1e12", "1e15"))
    assert sum("(not DP" in label for label in labels) == 4                    # the four budgets from 1e6 up


def test_a_label_on_the_non_private_line_is_read_over_white_and_its_backing_covers_no_other_point(make_record):
    """The high budgets' points lie at the non-private line, so their labels beside them sat on it and the band, and
    the line struck through their letters. Each label now has a near-opaque white backing, no larger than the
    clearance kept around every marker and bar, so that it hides lines behind it but no other point."""
    fig = auroc_figure(_high_budget(make_record), narrow=True)
    fig.draw_without_rendering()
    (ax,) = fig.axes
    glyphs = _glyphs(ax)
    labels = [t for t in ax.texts if isinstance(t, Annotation)]
    assert labels
    for text in labels:
        patch = text.get_bbox_patch()
        assert patch is not None, text.get_text()
        r, g, b, a = patch.get_facecolor()
        assert (r, g, b) == (1, 1, 1) and a >= 0.8, (text.get_text(), patch.get_facecolor())
        backing = patch.get_window_extent()
        hit = [xy for extent, xy in glyphs if backing.overlaps(extent) and xy != (tuple(text.xy),)]
        assert not hit, (text.get_text(), hit)


def _sweep_records(make_record, sweep) -> list:
    """One seed's non-private run at 0.95 and a DP-SGD run at each (eps, AUROC) of ``sweep``; above eps 500 (RDP)
    not DP, as 004's high budgets are."""
    records = [make_record("non-private_seed0", "non-private", metrics=_metrics(0.95, 0.93, 0.97))]
    for eps, auroc in sweep:
        r = make_record(f"dp-sgd_eps{eps:.3g}_C1_seed0", "dp-sgd", "dp_sgd", eps=eps,
                        metrics=_metrics(auroc, auroc - 0.04, auroc + 0.03))
        if eps > 500:
            r = r.model_copy(update={"privacy": r.privacy.model_copy(
                update={"accountant": "rdp", "is_dp": False, "sampler_voids": True})})
        records.append(r)
    return records


@pytest.mark.parametrize("sweep", [
    [(8.55e3, 0.951), (3.57e4, 0.96), (4.38e6, 0.913), (1.22e9, 0.948), (2.85e9, 0.922), (3.76e13, 0.901)],
    [(5.67e3, 0.906), (5.76e5, 0.959), (1.23e6, 0.918), (1.41e7, 0.938), (1.62e12, 0.928)],
])
def test_the_leaders_of_labels_moved_away_from_their_points_never_cross(make_record, sweep):
    """High-budget sweeps near the non-private line whose labels must move away from their points: placed without
    looking at the leaders drawn before, two leaders crossed here, and a reader following one reached the other's
    point."""
    fig = auroc_figure(_sweep_records(make_record, sweep))
    assert any(t.arrow_patch is not None for t in fig.axes[0].texts)        # some label did move away
    _assert_each_label_names_its_point(fig)


@pytest.mark.parametrize("narrow", [False, True])
def test_a_leader_that_passes_its_own_seeds_dots_still_keeps_off_every_other_point(make_record, narrow):
    """Over seeds, a point's faint dots sit within a leader's bend of it, and nearly every leader back to the point
    passes through the room kept clear around them. They sit at the point and count against no place: counted, they
    would leave no place with a clear leader, and the label would take the nearest place whatever its leader
    crossed; here eps 389's would run through eps 57600's marker, and a reader following it would reach that
    point."""
    fig = auroc_figure(_seeds(make_record, {"none": [0.94, 0.95, 0.96], "eps389": [0.871, 0.889, 0.873],
                                            "eps57600": [0.874, 0.89, 0.899], "eps3.86e12": [0.903, 0.926, 0.908]}),
                       narrow=narrow)
    assert any(t.arrow_patch is not None for t in fig.axes[0].texts)        # some label did move away
    _assert_each_label_names_its_point(fig)


@pytest.mark.parametrize("narrow", [False, True])
def test_a_leader_keeps_room_for_a_later_points_label_between_it_and_that_point(make_record, narrow):
    """Places straight above or below a point still to be labelled came last, but a leader could run just past it:
    here eps 7.08e5's label went right of eps 3.36e7's point, its leader passing a few points above it, and with eps
    3.37e6's label and leader below, eps 3.36e7's label had no place left whose leader crossed nothing; its leader
    crossed eps 7.08e5's, and a reader following one could reach the other's point."""
    fig = auroc_figure(_seeds(make_record, {"none": [0.94, 0.95, 0.96], "eps7.08e5": [0.954, 0.937, 0.943],
                                            "eps3.37e6": [0.913, 0.893, 0.91], "eps3.36e7": [0.941, 0.932, 0.936],
                                            "eps4.79e13": [0.928, 0.946, 0.948], "eps5.16e13": [0.915, 0.923, 0.937]}),
                       narrow=narrow)
    assert any(t.arrow_patch is not None for t in fig.axes[0].texts)        # some label did move away
    _assert_each_label_names_its_point(fig)


@pytest.mark.parametrize("aurocs, narrow", [
    ({"none": [0.94, 0.95, 0.96], "eps2.63e14": [0.925, 0.926, 0.918], "eps8.47": [0.921, 0.912, 0.91],
      "eps49.9": [0.953, 0.95, 0.946], "eps5.43e13": [0.9, 0.901, 0.903], "eps5350": [0.914, 0.905, 0.896],
      "eps309": [0.936, 0.943, 0.945]}, False),
    ({"none": [0.94, 0.95, 0.96], "eps1.09e5": [0.926, 0.916, 0.921], "eps2.07e6": [0.948, 0.957, 0.939],
      "eps96.2": [0.916, 0.921, 0.914], "eps1.5e4": [0.939, 0.933, 0.955], "eps1.12": [0.926, 0.94, 0.937],
      "eps1.97e10": [0.908, 0.921, 0.915], "eps3.44e10": [0.915, 0.88, 0.906]}, True)], ids=["wide", "phone"])
def test_labels_whose_leaders_cross_are_placed_again_until_none_cross(make_record, aurocs, narrow):
    """Placed in turn, a label knows only the labels before it: in each of these sweeps (drawn at random over seeds)
    a later label's leader crossed an earlier one's, and a reader following one could reach the other's point. The
    pair is swapped or placed again knowing every label, where that leaves both clear."""
    fig = auroc_figure(_seeds(make_record, aurocs), narrow=narrow)
    _assert_each_label_names_its_point(fig)
    fig.draw_without_rendering()
    (ax,) = fig.axes
    leaders = [t.arrow_patch.get_transform().transform_path(t.arrow_patch.get_path())
               for t in ax.texts if t.arrow_patch is not None]
    crossing = [(i, j) for i, a in enumerate(leaders) for j, b in enumerate(leaders[i + 1:], start=i + 1)
                if a.intersects_path(b, filled=False)]
    assert len(leaders) >= 2 and crossing == [], crossing


def test_undoing_crossed_leaders_of_forty_budgets_counts_only_what_the_two_labels_change(make_record, monkeypatch):
    """Each change tried for two crossed leaders was judged by every leader's crossings of every leader and box: on
    40 budgets over seeds, with many crossed pairs, over a million of matplotlib's exact tests and 8 s where
    placing the labels took 1 s. A change of two labels changes only the counts they take part in: about 100,000."""
    asked = [0]
    for name in ("intersects_bbox", "intersects_path"):
        test = getattr(Path, name)
        monkeypatch.setattr(Path, name, lambda self, *args, _test=test, **kwargs: (
            asked.__setitem__(0, asked[0] + 1), _test(self, *args, **kwargs))[1])
    rng = np.random.default_rng(5)
    budgets = sorted({float(f"{10 ** rng.uniform(0, 15):.3g}") for _ in range(40)})
    fig = auroc_figure(_seeds(make_record, {"none": [0.95, 0.94, 0.96], **{
        f"eps{eps:g}": [round(float(rng.uniform(0.9, 0.96)), 3) for _ in range(3)] for eps in budgets}}))
    assert len(fig.axes[0].texts) == 40
    assert asked[0] < 300_000, asked[0]


@pytest.mark.parametrize("narrow", [False, True])
def test_an_axis_title_of_wide_letters_is_rewrapped_inside_the_figure(make_record, narrow):
    """The DP-SGD axis names each unit's arms, wrapped at a width estimated from an average letter; arm names of
    wide capitals outgrow that estimate and ran past the figure's right edge (by 25 px on the wide figure, 32 px on
    the phone's), unless the drawn title is measured and wrapped narrower."""
    arms = ["MWMWMW-MWMWMW-WMWM", "WMWMWM-MWMW-MWMWM"]
    records = [make_record("non-private_seed0", "non-private", metrics=_metrics(0.96, 0.94, 0.98))]
    for i, arm in enumerate(arms):
        r = make_record(f"{arm}_eps{i + 1}_seed0", arm, "dp_sgd", eps=float(i + 1), metrics=_metrics(0.9, 0.85, 0.95))
        if i:
            r = r.model_copy(update={"privacy": r.privacy.model_copy(update={"unit": "patient"})})
        records.append(r)
    fig = auroc_figure(records, narrow=narrow)
    _assert_each_label_names_its_point(fig)
    assert f"one image ({arms[0]}) or one patient ({arms[1]})" in " ".join(fig.axes[0].get_xlabel().split())


def _labels_apart_inside_and_off_other_points(fig) -> int:
    """How many point labels, measured after layout, overlap another label, lie on another point's marker or bar,
    or leave their axes: what makes a label unreadable or name the wrong point (a leader that crosses a bar on
    its way does neither)."""
    fig.draw_without_rendering()
    bad = 0
    for ax in fig.axes:
        labels = [t for t in ax.texts if isinstance(t, Annotation)]
        glyphs, room = _glyphs(ax), ax.bbox
        boxes = [Text.get_window_extent(t) for t in labels]
        for text, box in zip(labels, boxes, strict=True):
            inside = room.x0 <= box.x0 and box.x1 <= room.x1 and room.y0 <= box.y0 and box.y1 <= room.y1
            bad += (not inside or any(box.overlaps(other) for other in boxes if other is not box)
                    or any(box.overlaps(extent) and xy != (tuple(text.xy),) for extent, xy in glyphs))
    return bad


def test_labels_of_budgets_a_fraction_of_a_decade_apart_never_pile_up(make_record):
    """Random high-budget sweeps near the non-private line, some points closer than a leader's bend: no leader
    reached such a point past its neighbours' bars, and the last resort put the label beside its point over the
    other labels, so that in most of these figures several labels piled into unreadable text while half the axes
    was empty. A leader may now cross a bar to reach its point."""
    rng = np.random.default_rng(1)
    piled = []
    for trial in range(8):
        sweep = sorted({(float(f"{10 ** rng.uniform(0, 15):.3g}"), round(float(rng.uniform(0.9, 0.96)), 3))
                        for _ in range(int(rng.integers(4, 8)))})
        records = _sweep_records(make_record, sweep)
        for narrow in (False, True):
            fig = auroc_figure(records, narrow=narrow)
            if _labels_apart_inside_and_off_other_points(fig):
                piled.append((trial, narrow, sweep))
            for text in fig.axes[0].texts:              # a moved label still points at its own point
                if isinstance(text, Annotation) and text.arrow_patch is not None:
                    arrow = text.arrow_patch
                    end = arrow.get_transform().transform_path(arrow.get_path()).vertices[-1]
                    at = fig.axes[0].transData.transform(text.xy)
                    assert np.hypot(*(end - at)) <= 6 * fig.dpi / 72, text.get_text()
    assert not piled, piled


def test_labels_go_where_matplotlibs_own_test_of_each_leader_and_box_would_put_them(make_record, monkeypatch):
    """Each place's leader is tested against every box at once in numpy, and matplotlib's exact test is asked only
    where numpy's rounding could decide otherwise: every label lands where it lands with matplotlib asked for every
    leader and box (each place one call per box took most of a figure's time)."""
    sweeps = [[(1.5e6, 0.93), (2.1e6, 0.95), (3.3e6, 0.92), (5.2e6, 0.94), (8.1e6, 0.935)]]   # closer than a bend

    def places() -> list:
        figs = [auroc_figure(_sweep_records(make_record, sweep), narrow=narrow) for sweep in sweeps
                for narrow in (False, True)]
        return [(t.get_text(), tuple(t.xyann), t.arrow_patch is not None) for fig in figs for t in fig.axes[0].texts]

    fast = places()
    assert any(moved for *_, moved in fast)                              # some leaders were tested
    monkeypatch.setattr(point_labels, "_crossing", lambda lines, bent, boxes: (
        np.zeros((len(lines), len(boxes)), bool), np.ones((len(lines), len(boxes)), bool)))      # all unsure
    assert places() == fast


@pytest.mark.parametrize("step", [0.5, None])
def test_numpy_says_a_leader_crosses_a_box_only_as_matplotlib_does(step):
    """Leaders and boxes on a half-pixel grid (many lines along, or ending on, a box's edge: where rounding
    decides) and anywhere: where numpy decides whether a leader crosses a box, matplotlib's `Path.intersects_bbox`
    decides the same, and anywhere numpy decides nearly every pair itself."""
    rng = np.random.default_rng(3)
    lines = rng.uniform(0, 6, (300, 3, 2))
    corners = rng.uniform(0, 6, (40, 2)), rng.uniform(0, 3, (40, 2))
    if step:
        lines, corners = np.round(lines / step) * step, [np.round(c / step) * step for c in corners]
    boxes = np.hstack([corners[0], corners[0] + corners[1]])
    bent = rng.random(len(lines)) < 0.7
    hits, unsure = point_labels._crossing(lines, bent, boxes)
    for i, j in zip(*np.nonzero(~unsure)):
        path = Path(lines[i] if bent[i] else lines[i, [0, 2]])
        assert hits[i, j] == path.intersects_bbox(Bbox(boxes[j].reshape(2, 2)), filled=False), (lines[i], boxes[j])
    assert hits.any() and (~hits & ~unsure).any()
    assert unsure.mean() < (0.5 if step else 0.001)


def test_a_study_of_non_private_runs_only_draws_an_empty_dp_sgd_panel_that_says_so(records):
    """With no private run there is no kind of eps to plot; the figure still has its one panel (the non-private
    line against chance) and says no run is of its kind, rather than having no axes at all."""
    fig = auroc_figure([records[0]])
    (ax,) = fig.axes
    assert ax.get_title() == "DP-SGD"
    assert [t.get_text() for t in ax.texts] == ["no run of this kind"]
    assert list(ax.get_xticks()) == []
    assert [float(line.get_ydata()[0]) for line in ax.get_lines() if line.get_color() == "k"] == [0.96]


@pytest.mark.parametrize("arms, said", [(1, "non-private AUROC, 1 seed"), (2, "non-private AUROC, one line per arm")])
def test_a_non_private_arm_of_one_seed_in_a_multi_seed_study_has_a_line_but_no_band(make_record, arms, said):
    """A non-private arm run at one seed has no range over seeds: its line has no band (a band of zero height would
    be drawn and named "range over seeds"), and the legend says how many seeds the line is, or that each arm has
    its own line."""
    records = _seeds(make_record, {"none": [0.95], "eps1": [0.80, 0.86]})
    if arms == 2:
        records.append(make_record("other_seed0", "other", metrics=_metrics(0.70, 0.6, 0.72)))
    fig = auroc_figure(records)
    (ax,) = fig.axes
    black = sorted(float(line.get_ydata()[0]) for line in ax.get_lines() if line.get_color() == "k")
    assert black == ([0.95] if arms == 1 else [0.70, 0.95])
    assert len(ax.patches) == 0
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert said in legend, legend
    assert not any("range over seeds" in t and "non-private" in t for t in legend), legend


def test_the_auroc_axis_reaches_down_to_a_low_non_private_band_and_never_below_zero(make_record):
    """The axis starts at 0.4 unless something shown lies lower: a non-private interval reaching 0.35 is shown
    whole (down to 0.35 - 0.02), and a run at AUROC 0.01 takes the axis down to 0, not to a negative AUROC."""
    low_base = [make_record("non-private_seed0", "non-private", metrics=_metrics(0.45, 0.35, 0.55)),
                make_record("dp_eps1_seed0", "dp", "dp_sgd", eps=1.0, metrics=_metrics(0.8, 0.7, 0.9))]
    assert auroc_figure(low_base).axes[0].get_ylim() == pytest.approx((0.33, 1.01))
    worst = [low_base[1], make_record("dp_eps2_seed0", "dp", "dp_sgd", eps=2.0, metrics=_metrics(0.01, 0.0, 0.05))]
    assert auroc_figure(worst).axes[0].get_ylim() == pytest.approx((0.0, 1.01))


def test_a_configuration_with_no_defined_auroc_does_not_make_the_others_name_their_seed_counts(make_record):
    """Every plotted configuration averages all 3 seeds; one whose seeds all lack an AUROC has no point, so the
    seed count tells nothing and no label carries one."""
    records = _seeds(make_record, {"none": [0.96, 0.94, 0.92], "eps1": [0.80, 0.86, 0.83], "eps8": [None] * 3,
                                   "eps4": [0.85, 0.86, 0.84]})
    (ax,) = auroc_figure(records).axes
    assert sorted(t.get_text() for t in ax.texts) == ["dp-sgd_eps1_C1", "dp-sgd_eps4_C1"]


def test_a_configuration_of_one_seed_among_configurations_of_two_says_1_seed(make_record):
    records = _seeds(make_record, {"none": [0.96, 0.94], "eps1": [0.80, 0.86], "eps8": [0.88]})
    (ax,) = auroc_figure(records).axes
    assert sorted(t.get_text() for t in ax.texts) == ["dp-sgd_eps1_C1 (2 seeds)", "dp-sgd_eps8_C1 (1 seed)"]


def test_a_configurations_point_sits_at_the_mean_of_its_seeds_eps(make_record):
    """Calibrated seeds of one configuration reach slightly different eps (2 and 3 here): the point is at their
    mean, 2.5, not at the first seed's."""
    records = _seeds(make_record, {"none": [0.96, 0.94], "eps1": [0.80, 0.86]})
    records[2:] = [r.model_copy(update={"privacy": r.privacy.model_copy(update={"epsilon": eps})})
                   for r, eps in zip(records[2:], (2.0, 3.0), strict=True)]
    (ax,) = auroc_figure(records).axes
    assert _means(ax) == [pytest.approx((2.5, 0.83))]


@pytest.mark.parametrize("narrow", [False, True])
def test_every_point_lies_well_inside_its_log_axis(records, narrow):
    """A point on the axes' edge is half cut off and its label has no room: the eps axis runs past the lowest and
    the highest point, with more room on the right where the labels go."""
    fig = auroc_figure(records, narrow=narrow)
    for ax in fig.axes:
        xs = _points(ax)
        left, right = ax.get_xlim()
        assert left < min(xs) / 2 and max(xs) * 10 < right, (xs, left, right)


def test_each_stacked_panel_of_a_phones_figure_names_its_auroc_axis(records):
    """On a phone the panels are stacked, so the lower one is read on its own and needs its own axis name."""
    fig = auroc_figure(records, narrow=True)
    assert [ax.get_ylabel() for ax in fig.axes] == ["test AUROC", "test AUROC"]


def test_a_dp_sgd_axis_of_one_unit_names_it_without_the_arms(records):
    """Where every DP-SGD arm adds or removes one image, the axis says just that; the arm names are for axes whose
    arms differ in their unit."""
    label = " ".join(auroc_figure(records).axes[1].get_xlabel().split())
    assert label.endswith("add or remove one image), log scale"), label


@pytest.mark.parametrize("narrow", [False, True])
def test_the_local_dp_examples_name_each_row_and_show_images_on_one_grey_scale(narrow):
    """Each row is named (the originals, then each run), a phone's rows hold three images, and every image is shown
    on the scale [0, 1], so a darkened perturbed image is not stretched back to look like its original."""
    from dpmed.reporting.figures import ldp_examples_figure

    original, perturbed = np.full((4, 1, 4, 4), 0.8), np.full((4, 1, 4, 4), 0.3)
    fig = ldp_examples_figure([("laplace b 0.5", original, perturbed)], narrow=narrow)
    grid = [ax for ax in fig.get_axes() if ax.images]
    assert len(grid) == 2 * (3 if narrow else 4)
    assert all(ax.images[0].get_clim() == (0.0, 1.0) for ax in grid)
    if narrow:
        named = [sub.get_suptitle() for sub in fig.subfigs]
    else:
        named = [ax.get_ylabel() for ax in grid if ax.get_ylabel()]
    assert named == ["original", "laplace b 0.5"]


def test_a_multi_seed_figure_s_text_alternative_says_a_point_is_a_mean_over_seeds(make_record):
    """Its points are configurations' means with t intervals over seeds; the text alternative said "one point per
    run" and called the runs' values the non-private line, which a reader who cannot see the figure took as drawn."""
    several = auroc_alt(_seeds(make_record, {"none": [0.96, 0.94], "eps1": [0.80, 0.86]}))
    assert "one point per run" not in several and "mean" in several and "t interval over seeds" in several
    assert "one point per run" in auroc_alt(_seeds(make_record, {"none": [0.96], "eps1": [0.80]}))


def test_the_figure_s_text_alternative_names_each_point_s_delta_accountant_neighbours_and_why_not_dp(make_record):
    """Runs of different deltas and accountants: the axis sends the reader to each card, and the text alternative
    gave each point a bare eps ("at 1") and a sampler-voided run "(not DP)" with no reason, where the report's
    every other eps (tables, the fairness figures' text) names its delta, accountant and neighbours."""
    records = [make_record("non-private_seed0", "non-private", metrics=_metrics(0.96, 0.94, 0.98)),
               make_record("dp_eps1_seed0", "dp", "dp_sgd", eps=1.0, metrics=_metrics(0.80, 0.75, 0.85))]
    r = make_record("dp_eps1e+06_seed0", "dp", "dp_sgd", eps=1e6, metrics=_metrics(0.9, 0.85, 0.95))
    records.append(r.model_copy(update={"privacy": r.privacy.model_copy(
        update={"accountant": "rdp", "delta": 1e-4, "is_dp": False, "sampler_voids": True})}))
    text = auroc_alt(records).replace("\u00a0", " ").replace("\u2011", "-")   # the report's unbroken spaces
    assert "see its card" in text       # the axis defers: the points must say it
    assert "dp_eps1_seed0 at ε 0.99 (δ 1e-5, PLD, add/remove one image), AUROC 0.800" in text, text
    assert ("dp_eps1e+06_seed0 at ε 990,000 (δ 0.0001, RDP, add/remove one image), not DP: noise below the "
            "sampler's reach, AUROC 0.900") in text, text


@pytest.mark.parametrize("narrow", [False, True])
def test_saving_the_figure_shows_the_layout_its_labels_were_placed_in_without_laying_it_out_again(
        records, narrow, monkeypatch):
    """The labels are placed after a constrained layout; saving ran that layout a second time, which took most of
    the figure's time and, starting from where the first left the axes, could move them (and so the texts placed on
    them) by a fraction of a pixel. The PNG now shows the first layout: one layout, and nothing moves when saved."""
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    from dpmed.reporting.figures import png_bytes

    runs = []
    execute = ConstrainedLayoutEngine.execute
    monkeypatch.setattr(ConstrainedLayoutEngine, "execute", lambda self, fig: runs.append(fig) or execute(self, fig))
    fig = auroc_figure(records, narrow=narrow)

    def where() -> list:
        return [ax.get_position().bounds for ax in fig.axes] + [
            tuple(t.get_window_extent().bounds) for ax in fig.axes for t in (ax.title, ax.xaxis.label, *ax.texts)]

    placed, laid_out = where(), len(runs)     # twice where an x label had to be rewrapped to fit, else once
    assert laid_out in (1, 2)
    png_bytes(fig)
    assert len(runs) == laid_out
    assert where() == placed


@pytest.mark.parametrize("narrow", [False, True])
def test_a_figure_is_drawn_once_to_be_saved_at_its_own_dpi(records, narrow, monkeypatch):
    """`Figure.savefig` drew a figure with a layout engine twice: once with its output discarded, to lay it out,
    and once to render it; a figure whose labels `fit_inside` placed keeps a placeholder engine, and was drawn for
    nothing all the same. Each figure is now drawn once, and at its own dpi: savefig took a matplotlibrc's
    ``savefig.dpi`` instead, which the type sizes of `FONT` do not assume."""
    import io

    import matplotlib
    from matplotlib.figure import Figure
    from PIL import Image

    from dpmed.evaluation.summaries import Estimate
    from dpmed.reporting.figures import png_bytes
    from dpmed.reporting.study_figures import group_figure

    draws = []
    draw = Figure.draw
    monkeypatch.setattr(Figure, "draw", lambda fig, renderer: draws.append(fig) or draw(fig, renderer))
    estimate = Estimate(value=0.8, low=0.7, high=0.9)
    for fig in (auroc_figure(records, narrow=narrow),       # laid out by fit_inside: a placeholder engine left
                group_figure(["female", "male"], [("run", [estimate, estimate])], ylabel="test AUROC",
                             title="AUROC by sex", narrow=narrow)):        # laid out when drawn
        draws.clear()
        with matplotlib.rc_context({"savefig.dpi": 300}):
            png = png_bytes(fig)
        assert draws == [fig]
        assert Image.open(io.BytesIO(png)).size == tuple(round(v) for v in fig.get_size_inches() * fig.dpi)


def test_the_places_above_or_below_a_point_still_to_be_labelled_are_offered_last():
    """A label straight above or below a point whose label comes later would leave that label no way back to its
    point: every such place is offered after every other, however near; the others nearest first (to a step)."""
    n, u, v, blocks = point_labels._grid([(12.0, 4.0)], 3.0, 5.0, Bbox.from_extents(0, 0, 100, 100),
                                         np.empty((0, 4)), np.array([50.0, 50.0]), np.array([[40.0, 70.0, 60.0, 90.0]]))
    blocked = (50 + u - 6 < 60) & (40 < 50 + u + 6)
    assert blocked.any() and (~blocked).any()
    assert list(blocked) == sorted(blocked) and list(blocks) == list(blocked)
    gap = np.hypot(np.maximum(np.abs(u) - 6, 0), np.maximum(np.abs(v) - 2, 0))[~blocked]   # label's edge to point
    assert np.all(np.diff(np.rint(gap / 5)) >= 0)


def test_numpy_says_boxes_overlap_exactly_where_matplotlib_does_edges_touching_included():
    """Labels and boxes on a half-pixel grid, many touching at an edge or a corner: a label placed touching a bar or
    another label counts as covering it, as matplotlib's `Bbox.overlaps` decides, pair for pair."""
    rng = np.random.default_rng(4)
    corners = np.round(rng.uniform(0, 6, (60, 2)) * 2) / 2, np.round(rng.uniform(0, 3, (60, 2)) * 2) / 2
    boxes = np.hstack([corners[0], corners[0] + corners[1]])
    near = point_labels._near(boxes, boxes)
    for i, j in np.ndindex(near.shape):
        assert near[i, j] == Bbox(boxes[i].reshape(2, 2)).overlaps(Bbox(boxes[j].reshape(2, 2))), (boxes[i], boxes[j])
    touching = (boxes[:, None, 2] == boxes[None, :, 0]) | (boxes[:, None, 3] == boxes[None, :, 1])
    assert (near & touching).any()                  # the case this test is about


def _voided(records: list, eps: float) -> list:
    """The records with every run at ``eps`` made not DP as run: its noise below the sampler's reach."""
    return [r.model_copy(update={"privacy": r.privacy.model_copy(update={"is_dp": False, "sampler_voids": True})})
            if r.mechanism == "dp_sgd" and r.plan.privacy.target_epsilon == eps else r for r in records]


def _legend_markers(fig) -> dict[str, str]:
    """Each legend entry with a marker: its label and whether the marker is "filled" or "hollow"."""
    legend = fig.legends[0]
    return {t.get_text(): "hollow" if h.get_markerfacecolor() == "none" else "filled"
            for t, h in zip(legend.get_texts(), legend.legend_handles)
            if isinstance(h, Line2D) and h.get_marker() not in (None, "None", "", " ", "|")}


@pytest.mark.parametrize("narrow", [False, True])
@pytest.mark.parametrize("seeds", [1, 2])
def test_a_run_not_dp_as_run_is_drawn_hollow_under_a_legend_entry_that_says_so(make_record, narrow, seeds):
    """A sampler-voided DP-SGD run (eps 1e6) was a filled blue circle under the legend's "DP-SGD", as the DP run
    at eps 1: the legend called it DP, and only its label said "not DP". It is now hollow, every mark of it (with
    several seeds the seeds' faint dots too), under "DP-SGD (not DP as run)"; the DP run stays filled under
    "DP-SGD", and the text alternative says what the hollow markers are."""
    records = _voided(_seeds(make_record, {"none": [0.96, 0.94][:seeds], "eps1": [0.80, 0.86][:seeds],
                                           "eps1000000": [0.90, 0.88][:seeds]}), 1e6)
    fig = auroc_figure(records, narrow=narrow)
    assert _legend_markers(fig) == {"DP-SGD": "filled", "DP-SGD (not DP as run)": "hollow"}
    (ax,) = fig.axes
    marks = {}
    for line in ax.get_lines():
        if line.get_marker() == "o":
            marks.setdefault(round(float(line.get_xdata()[0])), set()).add(line.get_markerfacecolor() == "none")
    assert marks == {1: {False}, 990_000: {True}}
    alt = auroc_alt(records)
    assert "Hollow markers (legend: “DP-SGD (not DP as run)”): runs not DP as run" in alt, alt


def test_a_point_of_several_seeds_one_of_them_not_dp_as_run_is_drawn_hollow(make_record):
    """A configuration's point stands for all its seeds, and its label says "not DP" where one of them is not DP as
    run: its marks are hollow, under "DP-SGD (not DP as run)", not filled as a DP run's."""
    records = [r.model_copy(update={"privacy": r.privacy.model_copy(update={"is_dp": False, "sampler_voids": True})})
               if r.run_id == "dp-sgd_eps1000000_C1_seed1" else r
               for r in _seeds(make_record, {"none": [0.96, 0.94], "eps1000000": [0.90, 0.88]})]
    fig = auroc_figure(records)
    assert _legend_markers(fig) == {"DP-SGD (not DP as run)": "hollow"}
    assert {line.get_markerfacecolor() for line in fig.axes[0].get_lines() if line.get_marker() == "o"} == {"none"}


def test_a_local_dp_run_not_dp_as_run_is_not_named_local_dp_in_the_legend(records):
    """A reproducible-mode pixel Laplace run (the seed known) is not local DP: its entry is "pixel Laplace (not DP
    as run)", hollow, not "pixel Laplace (local DP)"."""
    from dpmed.randomness import NOT_DP_REPRODUCIBLE

    laplace = records[1]
    seeded = laplace.model_copy(update={"privacy": laplace.privacy.model_copy(
        update={"is_dp": False, "randomness": NOT_DP_REPRODUCIBLE})})
    legend = _legend_markers(auroc_figure([records[0], seeded, records[2]]))
    assert legend == {"pixel Laplace (not DP as run)": "hollow", "DP-SGD": "filled"}
    assert "legend: “pixel Laplace (not DP as run)”" in auroc_alt([records[0], seeded, records[2]])
    assert "Hollow" not in auroc_alt(records)


def test_the_fairness_figures_draw_a_run_not_dp_as_run_hollow_as_the_auroc_figure_does(
        two_arms, report_html, monkeypatch):
    """The fairness figures give each run its own marker, and a run not DP as run (here the seed known) had a filled
    one, as a DP run's. Now its every marker is hollow, the others' filled, in each layout, and the figure's text
    alternative says what hollow means."""
    from dpmed.randomness import NOT_DP_REPRODUCIBLE
    from dpmed.reporting import fairness_section
    from dpmed.reporting.study_figures import group_figure

    base, private = two_arms
    seeded = private.model_copy(update={"privacy": private.privacy.model_copy(
        update={"is_dp": False, "randomness": NOT_DP_REPRODUCIBLE})})
    figures = []
    monkeypatch.setattr(fairness_section, "group_estimates",
                        lambda *a, **kw: figures.append(group_figure(*a, **kw)) or b"\x89PNG\r\n\x1a\n")
    page = report_html([base, seeded])
    assert len(figures) == 4                                  # sex and age, each wide and narrow
    for fig in figures:
        hollow = {}
        for line in fig.axes[0].get_lines():
            hollow.setdefault(line.get_color(), set()).add(line.get_markerfacecolor() == "none")
        assert hollow == {"C0": {False}, "C1": {True}}        # the runs in order: non-private, then the seeded one
        assert _legend_markers(fig) == {t: ("hollow" if t.startswith(seeded.run_id) else "filled")
                                        for t in _legend_markers(fig)}
    assert page.count("one marker per run, hollow for a run not DP as run") == 2
    assert "hollow" not in report_html([base, private]).split('id="fairness"')[1].split("<h2 ")[0]


@pytest.mark.parametrize("narrow", [False, True])
def test_every_run_s_hollow_marker_in_the_fairness_figures_is_open_at_its_centre(narrow):
    """A fairness figure gives each of up to ten runs its own shape; a run not DP as run gets that shape hollow. The
    plus, the cross and the star (the 6th, 7th and 10th run) are all edge at the figure's marker size: drawn
    hollow, their edges met at the centre and they looked filled, like a DP run's. Each hollow marker, whatever its
    run's place, shows the background at its centre, in each layout."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from dpmed.evaluation.summaries import Estimate
    from dpmed.reporting.study_figures import group_figure

    series = [(f"run {k}", [Estimate(value=0.53 + k / 50)]) for k in range(10)]     # no interval through the marker
    fig = group_figure(["female"], series, ylabel="test AUROC", title="AUROC by sex", narrow=narrow,
                       not_dp=range(10))
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    pixels = np.asarray(canvas.buffer_rgba())
    (ax,) = fig.axes
    centres = {}
    for line in ax.get_lines():
        x, y = ax.transData.transform((line.get_xdata()[0], line.get_ydata()[0]))
        centres[line.get_label()] = int(pixels[pixels.shape[0] - 1 - int(y), int(x), :3].min())
    assert len(centres) == 10 and all(value > 200 for value in centres.values()), sorted(centres.items())


def test_the_text_alternative_names_filled_markers_only_where_a_dp_run_is_drawn(make_record):
    """Where every point is a run not DP as run (a study of sampler-voided eps only), every marker is hollow, and the
    text alternative said "filled markers: DP runs" of a figure with none: a reader of it would look for a DP run the
    figure does not have. Beside a DP run it still says what the filled markers are."""
    voided = _voided(_seeds(make_record, {"none": [0.96], "eps1000000": [0.90]}), 1e6)
    alt = auroc_alt(voided)
    assert "Hollow markers (legend: “DP-SGD (not DP as run)”)" in alt and "filled" not in alt, alt
    both = _voided(_seeds(make_record, {"none": [0.96], "eps1": [0.80], "eps1000000": [0.90]}), 1e6)
    assert "filled markers: DP runs" in auroc_alt(both)


def test_the_text_alternative_names_no_hollow_marker_for_a_run_not_dp_as_run_the_figure_does_not_draw(make_record):
    """A run not DP as run whose test AUROC is undefined is no point of the figure: its legend and text alternative
    name no hollow marker for it."""
    records = _voided(_seeds(make_record, {"none": [0.96], "eps1": [0.80], "eps1000000": [None]}), 1e6)
    assert _legend_markers(auroc_figure(records)) == {"DP-SGD": "filled"}
    alt = auroc_alt(records)
    assert "Hollow" not in alt and "not DP as run" not in alt, alt


@pytest.mark.parametrize("narrow", [False, True])
def test_a_multi_seed_study_s_legend_lies_inside_the_figure_in_each_layout(make_record, narrow):
    """On a phone, a study of two seeds with a run not DP as run had one legend column of long entries ("bars: 95%
    t interval over seeds, faint dots: each seed"), wider than the figure: cut off at both edges, "...each see".
    Its long entries are now wrapped to the figure's width; each is still there, in full. Measured on the drawn
    figure, as the saved PNG shows it."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    records = _voided(_seeds(make_record, {"none": [0.96, 0.94], "eps1": [0.80, 0.86], "eps1000000": [0.90, 0.88]}),
                      1e6)
    fig = auroc_figure(records, narrow=narrow)
    FigureCanvasAgg(fig).draw()
    edge = fig.bbox
    box = fig.legends[0].get_window_extent(fig.canvas.get_renderer())
    assert edge.contains(box.x0 + 1e-9, box.y0 + 1e-9) and edge.contains(box.x1 - 1e-9, box.y1 - 1e-9), (box, edge)
    texts = _legend_texts(fig)
    assert "bars: 95% t interval over seeds, faint dots: each seed" in texts
    assert "DP-SGD (not DP as run)" in texts


def test_a_panel_of_local_noise_runs_none_of_them_dp_as_run_is_not_titled_local_dp(records):
    """In a study of ``privacy_randomness: reproducible`` no run is DP as run (the seed is known), and the left
    panel was still titled "Local DP on the images". It now says that its runs are not DP as run; beside a DP run of
    local noise it keeps its title, and so does the DP-SGD panel, which names a mechanism, not a guarantee. On a
    phone the longer title fits the figure."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from dpmed.randomness import NOT_DP_REPRODUCIBLE

    def seeded(r):
        return r.model_copy(update={"privacy": r.privacy.model_copy(update={"is_dp": False,
                                                                            "randomness": NOT_DP_REPRODUCIBLE})})

    every = [records[0]] + [seeded(r) for r in records[1:]]
    titles = [ax.get_title() for ax in auroc_figure(every).axes]
    assert titles == ["Local noise on the images (not DP as run)", "DP-SGD"]
    phone = auroc_figure(every, narrow=True)
    FigureCanvasAgg(phone).draw()
    box = phone.axes[0].title.get_window_extent(phone.canvas.get_renderer())
    assert phone.bbox.x0 <= box.x0 and box.x1 <= phone.bbox.x1, (box, phone.bbox)      # on a line of its own
    assert " ".join(phone.axes[0].get_title().split()) == titles[0]
    assert "Panel Local noise on the images (not DP as run):" in auroc_alt(every)
    laplace = records[1]
    dp_beside = [*records, laplace.model_copy(update={"run_id": "pixel-laplace_b1_seed0"})]
    mixed = dp_beside[:1] + [seeded(dp_beside[1])] + dp_beside[2:]
    assert [ax.get_title() for ax in auroc_figure(mixed).axes] == ["Local DP on the images", "DP-SGD"]
    assert [ax.get_title() for ax in auroc_figure(records).axes] == ["Local DP on the images", "DP-SGD"]


@pytest.mark.parametrize("narrow", [False, True])
def test_a_mechanism_s_dp_entry_comes_before_its_not_dp_entry_in_the_legend(make_record, narrow):
    """The legend listed its entries in the order of the runs, so a sweep whose first eps is not DP as run (eps 1e6
    before eps 1) put "DP-SGD (not DP as run)" above "DP-SGD". A mechanism's DP entry now comes first."""
    records = _voided(_seeds(make_record, {"none": [0.96], "eps1000000": [0.90], "eps1": [0.80]}), 1e6)
    labels = [t.get_text() for t in auroc_figure(records, narrow=narrow).legends[0].get_texts()]
    assert labels[:2] == ["DP-SGD", "DP-SGD (not DP as run)"], labels


def test_the_legend_keeps_a_mechanism_s_entries_together_in_the_order_of_its_first_run(make_record):
    """Each mechanism's DP and not-DP entries stand together, mechanisms in the order of their first runs: a
    not-DP entry is not put after every other mechanism's DP one."""
    from dpmed.randomness import NOT_DP_REPRODUCIBLE

    def local(arm, mechanism, eps_image, dp=True):
        card = PrivacyCard(mechanism=mechanism, is_dp=True, statement=f"eps_image = {eps_image:g}",
                           epsilon=eps_image, epsilon_image=eps_image, epsilon_pixel=2.0, delta=0.0)
        if not dp:
            card = card.model_copy(update={"is_dp": False, "randomness": NOT_DP_REPRODUCIBLE})
        return make_record(f"{arm}_seed0", arm, metrics=_metrics(0.9, 0.85, 0.95)).model_copy(
            update={"mechanism": mechanism, "privacy": card})
    ordered = [local("laplace-seeded", "pixel_laplace", 100.0, dp=False), local("laplace", "pixel_laplace", 200.0),
               local("gaussian", "pixel_gaussian", 300.0)]
    labels = [t.get_text() for t in auroc_figure(ordered).legends[0].get_texts()]
    assert labels[:3] == ["pixel Laplace (local DP)", "pixel Laplace (not DP as run)", "pixel Gaussian (local DP)"], \
        labels
