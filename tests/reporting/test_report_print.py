"""The report on paper (print, or save as PDF): WeasyPrint lays report.html out on A4 pages with its print style, as
a browser prints it. On screen a wide table scrolls inside its own box; on paper nothing scrolls, and a table wider
than the page lost its right-hand columns (the utility table's specificity, threshold and wall time, the fairness
tables' last groups and parity differences)."""

from __future__ import annotations

import pytest

weasyprint = pytest.importorskip("weasyprint", reason="WeasyPrint is not installed (pip install weasyprint): the "
                                                      "report's print layout is checked with it only")


def _past_the_edge(box, right_edge: float, found: list[str]) -> list[str]:
    """The boxes under ``box`` whose right edge passes ``right_edge`` (the page's), with the tag that made them."""
    for child in getattr(box, "children", None) or []:
        if getattr(child, "width", None) is not None and hasattr(child, "margin_width"):
            right = child.position_x + child.margin_width()
            if right > right_edge + 0.5:
                found.append(f"{child.element_tag} to {right:.0f} px")
        _past_the_edge(child, right_edge, found)
    return found


def test_every_table_of_the_report_fits_the_printed_page(tmp_path, two_arms, report_html):
    page = report_html(two_arms)
    assert "<table" in page and "[30," in page             # the utility table and the fairness tables by age
    document = weasyprint.HTML(filename=str(tmp_path / "report.html")).render()
    cut = {i: found for i, printed in enumerate(document.pages, start=1)
           if (found := _past_the_edge(printed._page_box, printed.width, []))}
    assert len(document.pages) > 1 and cut == {}, cut
