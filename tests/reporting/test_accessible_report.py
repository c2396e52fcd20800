"""The report as a screen reader and a reviewer read it: every table named and its headers marked as row or column
headers, the private report's numbers under the public report's names, each warning said once, and each figure's
text alternative saying what the figure shows. The HTML is parsed, not searched as text."""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

import numpy as np

from dpmed.comparisons import Comparisons
from dpmed.records import Timing
from dpmed.reporting import PrivateRun, write_private_report
from dpmed.reporting.inputs import eps_label


@dataclass
class _Table:
    caption: str = ""
    head_scopes: list[str | None] = field(default_factory=list)      # <th> inside <thead>
    body_scopes: list[str | None] = field(default_factory=list)      # <th> elsewhere


class _Page(HTMLParser):
    """The tables (caption, header scopes) and image alternatives of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[_Table] = []
        self.alts: list[str] = []
        self._open: list[_Table] = []
        self._in_head = self._in_caption = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table":
            self._open.append(_Table())
            self.tables.append(self._open[-1])
        elif tag == "thead":
            self._in_head = True
        elif tag == "caption":
            self._in_caption = True
        elif tag == "th" and self._open:
            (self._open[-1].head_scopes if self._in_head else self._open[-1].body_scopes).append(a.get("scope"))
        elif tag == "img":
            self.alts.append(a.get("alt") or "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "table" and self._open:
            self._open.pop()
        elif tag == "thead":
            self._in_head = False
        elif tag == "caption":
            self._in_caption = False

    def handle_data(self, data: str) -> None:
        if self._in_caption and self._open:
            self._open[-1].caption += data


def _parse(page: str) -> _Page:
    parser = _Page()
    parser.feed(page)
    return parser


def _section(page: str, anchor: str) -> str:
    start = page.index(f'id="{anchor}"')
    end = page.find("<h2 ", start)
    return page[start:end if end > 0 else None]


def _text(fragment: str) -> str:
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", fragment)))


def _assert_every_header_is_scoped(page: str) -> list[_Table]:
    tables = _parse(page).tables
    for t in tables:
        assert t.head_scopes or t.body_scopes, t
        assert all(s == "col" for s in t.head_scopes), t
        assert all(s == "row" for s in t.body_scopes), t
        if t.body_scopes:                      # a table of facts: a name a screen reader can list it by
            assert t.caption.strip(), t
    return tables


def test_every_table_names_its_headers_as_rows_or_columns_and_every_fact_table_has_a_caption(two_arms,
                                                                                              report_html):
    tables = _assert_every_header_is_scoped(report_html(two_arms))
    facts = [t for t in tables if t.body_scopes]
    # the summary, and a privacy card per run (these records name no versions: no table of them)
    assert len(facts) == 1 + len(two_arms)
    assert all(any(r.run_id in t.caption for t in facts) for r in two_arms)
    assert any(t.head_scopes for t in tables)          # the tables of runs keep their column headers


def test_the_private_report_names_training_set_metrics_as_the_public_report_does(tmp_path, make_record,
                                                                                 make_resolved):
    path = tmp_path / "private" / "report.html"
    path.parent.mkdir()
    metrics = {"train_auroc": 0.91234, "train_sensitivity": 0.5, "train_specificity": 0.75,
               "train_kappa_quadratic": 0.25, "train_auroc_low": 0.8}
    resolved = make_resolved([make_record("dp_seed0", "dp", "dp_sgd", eps=1.0)], label_names=("normal", "pneumonia"))
    write_private_report(resolved, {"dp_seed0": PrivateRun(training_metrics=metrics, timing=Timing(
        train_seconds=1.0, total_seconds=2.0, device="cpu", threads=1))}, path)
    page = path.read_text()
    text = _text(page)
    assert "train_" not in text
    for label in ("training-set AUROC 0.9123", "training-set sensitivity (pneumonia found) 0.5000",
                  "training-set specificity (normal cleared) 0.7500", "training-set quadratic-weighted kappa 0.2500"):
        assert label in text, label
    assert "<td class=num>0.9123</td>" in page      # numbers aligned as in every other table
    tables = _assert_every_header_is_scoped(page)
    assert any("dp_seed0" in t.caption for t in tables)


def _flagged_runs(scored_run, scores):
    """A non-private run that ranks the classes below chance and a DP-SGD run that predicts one class: the first a
    paired reference, the second a row of the opening table."""
    names = ["normal", "pneumonia"]
    rng = np.random.default_rng(5)
    val, test = scores(0.7, rng)
    inverted = scored_run("np_seed0", "np", "none", scores=(val, 1 - test), names=names)
    val, test = scores(0.7, rng)
    one_class = scored_run("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0, names=names,
                           scores=(val, np.full_like(test, 1e-3)))
    return [inverted, one_class]


def test_each_warning_is_said_once_under_the_utility_table_and_counted_with_a_link_where_runs_are_read(
        scored_run, scores, report_html, tmp_path):
    records = _flagged_runs(scored_run, scores)
    page = report_html(records)
    flags = Comparisons.model_validate(json.loads((tmp_path / "comparisons.json").read_text())).run_flags
    assert {f.kind for f in flags} >= {"below_chance", "one_class"}
    text, utility = _text(page), _text(_section(page, "utility"))
    for f in flags:
        warning = _text(f"{f.run_id} {f.message}")
        assert text.count(warning) == 1, warning            # not lost, and not repeated in another section
        assert warning in utility, warning                   # where every run's row points
    assert 'id="warnings"' in _section(page, "utility")
    for anchor in ("clinical", "summary"):                   # where a reader starts: a count and a way there
        assert 'href="#warnings"' in _section(page, anchor), anchor
        assert "2 warnings" in _text(_section(page, anchor)) or "1 warning" in _text(_section(page, anchor))
    # with no run to pair, the opening section still points to the warnings, and says none of them itself
    alone = report_html(records[1:])
    assert 'href="#warnings"' in _section(alone, "clinical")
    assert _text(alone).count("predicts normal for every test image") == 1


def test_each_figure_s_alternative_text_says_what_it_plots(two_arms, report_html):
    alts = _parse(report_html(two_arms)).alts
    auroc = next(a for a in alts if a.startswith("Test AUROC (vertical axis)"))
    private = two_arms[1]
    assert "log scale" in auroc and "chance" in auroc
    assert f"{private.run_id} at {eps_label(private.privacy)}, AUROC {private.metrics['test_auroc']:.3f}" in auroc
    assert f"{two_arms[0].run_id} {two_arms[0].metrics['test_auroc']:.3f}" in auroc        # the non-private line
    groups = [a for a in alts if a.startswith("Test AUROC (with")]
    assert {"sex", "age"} <= {re.search(r"for each (\w+) group", a).group(1) for a in groups}
    for alt in groups:
        assert all(r.run_id in alt for r in two_arms), alt
    assert all(len(a) > 60 for a in alts), alts
