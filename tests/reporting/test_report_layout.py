"""The report in a real browser (issue 16): headless Chromium lays out a report made of hand-made records at a desktop
width (1280 px) and a phone's (390 px); the page must not scroll sideways, no element may stick out of the viewport
except inside a box that scrolls by itself, the privacy cards of one row are one height, and a phone gets each
figure's narrow variant. benchmarks/report_layout.py does the measuring (and takes screenshots of real reports)."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from dpmed.mechanisms import PrivacyCard

_SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "report_layout.py"


def _layout_module():
    spec = importlib.util.spec_from_file_location("report_layout", _SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


layout = _layout_module()
pytestmark = pytest.mark.skipif(layout.find_chromium() is None,
                                reason="Chromium is not installed (Debian: apt-get install -y chromium); the report's "
                                       "layout is checked in a real browser only")


@pytest.fixture
def report(tmp_path, two_arms, report_html) -> Path:
    laplace = PrivacyCard(mechanism="pixel_laplace", is_dp=True, epsilon=8192.0, epsilon_image=8192.0,
                          epsilon_pixel=2.0, delta=0.0, scale_b=0.5, value_range_R=1.0, dimension_d=4096,
                          statement="eps_image = 8,192 (delta = 0; unit: one image, pixels only (the labels are "
                                    "released in the clear); neighbours: any two images); eps per pixel value = 2")
    records = [*two_arms, two_arms[1].model_copy(update={"run_id": "pixel-laplace_b0.5_seed0",
                                                         "arm": "pixel-laplace", "mechanism": "pixel_laplace",
                                                         "privacy": laplace})]
    report_html(records)
    return tmp_path / "report.html"


@pytest.mark.parametrize("width", [1280, 390])
def test_the_report_fits_the_page_width_in_chromium(report, width):
    result = layout.measure(report, width)
    assert result["inner_width"] == width
    assert not result["overflows"], f"page {result['scroll_width']} px wide at {width} px: {result['offenders']}"
    assert result["offenders"] == []
    assert result["run_rows"] > 0 and result["hidden_run_rows"] == 0      # every run shown, the first one too
    assert (result["heads_shown"] == 0) == (width == 390)                 # a phone labels each cell instead
    assert len(result["card_heights"]) == 3
    if width == 1280:                             # one row of three cards: one height, whatever each card holds
        assert len(set(result["card_heights"])) == 1, result["card_heights"]
    figures = [image for image in result["images"] if image["natural"]]
    assert figures and all(image["shown"] <= width for image in figures)
    if width == 390:                              # the phone's variant of every figure (780 px, shown at 358)
        assert {image["natural"] for image in figures} == {780}, figures
    else:
        assert 780 not in {image["natural"] for image in figures}, figures


@pytest.mark.skipif(shutil.which("pdftotext") is None, reason="pdftotext (Debian: poppler-utils) reads the printed PDF")
def test_a_printed_card_keeps_what_its_eps_covers(tmp_path, two_arms, report_html):
    """Paper cannot unfold: a browser prints a closed <details> as its summary line alone, so a printed or
    PDF-saved report lost each card's folded part, among it which images its eps covers (the validation and test
    images are not protected). Chromium prints the report; the text of the PDF holds every card's scope."""
    covers = "the training images; validation images (threshold choice) and test images are not protected"
    dp = two_arms[1].model_copy(update={"privacy": two_arms[1].privacy.model_copy(update={"covers": covers})})
    report_html([two_arms[0], dp])
    report, pdf = tmp_path / "report.html", tmp_path / "report.pdf"
    done = layout._chromium(layout.find_chromium(), ["--no-pdf-header-footer", f"--print-to-pdf={pdf}",
                                                     report.resolve().as_uri()], 120)
    assert pdf.is_file(), done.stderr[-500:]
    text = " ".join(subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True, check=True)
                    .stdout.split())
    assert f"<b>covers:</b> {covers}" in report.read_text()           # in the card's folded part
    assert f"covers: {covers}" in text


@pytest.mark.skipif(shutil.which("pdftotext") is None, reason="pdftotext (Debian: poppler-utils) reads the printed PDF")
def test_a_table_of_runs_printed_over_several_pages_repeats_its_head_on_each(tmp_path, scored_run, scores,
                                                                             report_html):
    """A table of runs longer than a page went on, on the next page, without the head row that says which column
    is AUROC, which accuracy and which eps. In <thead>, the browser prints it on every page the table reaches."""
    import numpy as np

    rng = np.random.default_rng(3)
    runs = [scored_run(f"dp-sgd_eps{k}_C1_seed{k}", "dp-sgd", "dp_sgd", eps=float(k), seed=k, scores=scores(0.5, rng),
                       resamples=20) for k in range(1, 33)]
    report_html(runs, resamples=20)
    pdf = tmp_path / "report.pdf"
    done = layout._chromium(layout.find_chromium(), ["--no-pdf-header-footer", f"--print-to-pdf={pdf}",
                                                     (tmp_path / "report.html").resolve().as_uri()], 120)
    assert pdf.is_file(), done.stderr[-500:]
    pages = subprocess.run(["pdftotext", "-layout", str(pdf), "-"], capture_output=True, text=True,
                           check=True).stdout.split("\f")
    # the utility table's rows: a run's mechanism, then its eps (no other table has those columns side by side)
    utility = [i for i, page in enumerate(pages) if re.search(r"\bdp_sgd +ε \d", page)]
    assert len(utility) > 1, utility                                    # the table runs over pages
    for i in utility:
        assert re.search(r"run +mechanism +eps", pages[i]), pages[i][:600]
