"""The study report: one self-contained HTML file (inline CSS, figures as data URIs) that opens offline, rendered
from a list of sections; and the private report of the numbers no eps covers.

Adding a section is its function (of :class:`~dpmed.reporting.inputs.ReportInputs`, returning HTML) and one entry in
:data:`SECTIONS`. Reporting only renders: the records, the resolved study and the comparisons arrive computed.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from dpmed.comparisons import Comparisons
from dpmed.data.pace import Pace
from dpmed.folders import StudyFolder, write_text_atomic
from dpmed.numbers import confidence_text, count_text
from dpmed.records import ResolvedStudy, RunRecord, Timing
from dpmed.reporting import clinical, privacy_section, sections
from dpmed.reporting.comparison_section import comparison_section
from dpmed.reporting.fairness_section import fairness_section
from dpmed.reporting.findings_section import findings_section
from dpmed.reporting.inputs import (METHODS, ReportInputs, cite, embed_png, escape as _e, facts_table,
                                    read_figure_arrays)
from dpmed.reporting.interpretability_section import interpretability_section
from dpmed.reporting.pretraining_section import pretraining_section
from dpmed.reporting.recipe_section import recipe_section
from dpmed.reporting.threat_section import ATTACK_IMAGE_KEYS, attack_label, reconstructions_figure, threat_section

__all__ = ["write_report", "write_private_report", "PrivateRun", "SECTIONS"]

_log = logging.getLogger(__name__)

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;max-width:1100px;margin:2em auto;
padding:0 1em;color:#1b1b1b;line-height:1.45;overflow-wrap:break-word}  /* a long path breaks, not the page */
h1{margin-bottom:.2em} h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.8em}
/* a wide table scrolls inside itself, not the page */
table{border-collapse:collapse;font-size:.9em;margin:.6em 0;display:block;max-width:100%;overflow-x:auto}
th,td{border:1px solid #ddd;padding:.3em .6em;text-align:left;vertical-align:top}
th{background:#f4f4f4} td.num{text-align:right;font-variant-numeric:tabular-nums} td.eps{min-width:8em}
img{max-width:100%;height:auto} figure{margin:1em 0}
/* a table's name for a screen reader where a heading already names it on screen and paper */
.vh{position:absolute;width:1px;height:1px;margin:-1px;padding:0;overflow:hidden;clip:rect(0 0 0 0);
white-space:nowrap;border:0}
.note{background:#fff8e1;border-left:4px solid #f0b400;padding:.6em 1em;margin:1em 0}
.flag{color:#8a4b00;background:#fff3e0;border-left:3px solid #e07b00;padding:.2em .5em;margin:.3em 0}
span.flag{display:inline;background:none;border:0;padding:0;margin:0;font-size:.9em}
.notdp{color:#b00020;font-weight:600} pre{background:#f7f7f7;padding:1em;overflow:auto;font-size:.8em}
ul.reading li{margin:.3em 0}
/* cards: the statement first, key facts, the rest folded; every row of the grid as tall as its tallest card */
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(330px,100%),1fr));grid-auto-rows:1fr;gap:1em}
.card{border:1px solid #ddd;border-radius:6px;padding:.6em 1em;min-width:0} .card h3{margin:.2em 0 .4em;font-size:1em}
.card .statement{font-size:.92em} .card table.facts{font-size:.85em;width:100%;display:table}
.card table.facts th{width:45%} .card table.facts td{white-space:normal}
.card details{font-size:.8em;margin-top:.5em} .card summary{cursor:pointer;color:#355}
dl.raw{display:grid;grid-template-columns:max-content minmax(0,1fr);gap:.1em .8em;font-family:ui-monospace,monospace}
dl.raw dt{color:#555} dl.raw dd{margin:0;overflow-wrap:anywhere}
table.clinical td:last-child{min-width:18em} table.stack td:first-child,td.run{white-space:nowrap}
details.resolved summary{cursor:pointer;color:#355}
/* a phone: one card per row at its own height, and every table of runs as one block of labelled values per run */
@media (max-width:700px){
body{margin:1em auto} h1{font-size:1.5em} .cards{grid-auto-rows:auto}
table.stack,table.stack tbody,table.stack tr,table.stack td{display:block;min-width:0}
table.stack thead{display:none} table.stack tr{border:1px solid #ddd;margin:0 0 .8em;padding:.3em}
table.stack td{border:0;text-align:left;white-space:normal;padding:.15em .3em}
table.stack td::before{content:attr(data-label);display:block;font-size:.8em;color:#555}
table.stack td:first-child{font-weight:600} table.stack td:first-child::before{display:none}
table.clinical td:last-child{min-width:0}}
/* paper (print, save as PDF): no box scrolls there, so every table is laid out whole within the page's width, its
   rows kept on one page each, and the cards one after another */
@page{margin:1.2cm}
@media print{
body{max-width:none;margin:0;padding:0;font-size:10pt}
table{display:table;width:100%;overflow:visible;font-size:.75em;table-layout:auto}
th,td{padding:.15em .3em;overflow-wrap:break-word} td.eps{min-width:0} table.clinical td:last-child{min-width:0}
td.num{overflow-wrap:anywhere}   /* an interval (no-break spaces) breaks where a table is too wide for the page */
table.stack td:first-child,td.run{white-space:normal}
tr,figure,img,.note{break-inside:avoid} h2,h3{break-after:avoid}
.cards{display:block} .card{break-inside:avoid;margin:0 0 .6em}
/* paper cannot unfold: a card prints its folded sentences (what its eps covers) open, but not the raw fields that
   repeat them (each run's run.json holds those), nor the resolved study (pages of YAML: study.yaml beside it) */
.card details::details-content{content-visibility:visible;display:block} .card dl.raw{display:none}
pre{white-space:pre-wrap;overflow-wrap:anywhere}}
"""

# Lay the page out at the phone's own width (without it a phone draws it at 980 px and shrinks everything).
_VIEWPORT = '<meta name="viewport" content="width=device-width, initial-scale=1">'
_FOOTER = (f"<p><small>Every number's definition, and where the source papers are vague or wrong: {METHODS} in the "
           "dpmed repository. Sources: Singh, Sikka, Kotti and Trask 2020 (local DP versus DP-SGD on chest X-rays "
           "and APTOS); Naidu et al. 2021 (DP and interpretability); Tayebi Arasteh, Ziller et al. 2023 (private, "
           "fair and accurate chest radiograph models); Ziller et al. 2024 (high-budget DP and reconstruction risk)."
           "</small></p>")

# The report's sections, in page order.
SECTIONS: tuple[Callable[[ReportInputs], str], ...] = (
    sections.unfinished, clinical.clinical, sections.summary, recipe_section, pretraining_section, sections.utility,
    findings_section, privacy_section.privacy_cards, privacy_section.study_privacy_section,
    privacy_section.reconstruction_risk, threat_section, comparison_section, fairness_section,
    interpretability_section, sections.ldp_examples_section, sections.provenance,
)


def write_report(resolved: ResolvedStudy, records: Sequence[RunRecord], comparisons: Comparisons,
                 folder: StudyFolder) -> None:
    """report.html (and its figures as PNG beside it) from the resolved study, the finished runs and the
    comparisons. It logs that it began and, paced, how many sections are drawn: a study of many runs spends minutes
    on its figures, which a silent terminal shows as a hang."""
    inputs = ReportInputs(resolved=resolved, records=list(records), comparisons=comparisons, folder=folder)
    earlier = {path: _identity(path) for path in _figures(folder.root)}
    _log.info("report: drawing the figures and tables of %s", count_text(len(records), "finished run"))
    pace, parts = Pace(_log), []
    for i, section in enumerate(SECTIONS, start=1):
        parts.append(section(inputs))
        pace.log(i / len(SECTIONS), "report: %d of %d sections drawn", i, len(SECTIONS))
    # cite(): sentences from records and upstream stages (a card's statement, a run.json of an older dpmed) may
    # still name a source document by its file name; the reader gets authors and year
    body = cite("\n".join(part for part in parts if part))
    doc = (f'<!doctype html><html lang="en"><head><meta charset="utf-8">{_VIEWPORT}<title>dpmed report: '
           f"{_e(resolved.name)}</title><style>{_CSS}</style></head><body>\n<h1>What privacy costs: "
           f"{_e(resolved.name)}</h1>\n{body}\n{_FOOTER}</body></html>")
    write_text_atomic(folder.report, doc)
    for path, identity in earlier.items():     # not written again (each figure is replaced whole): no longer drawn
        with contextlib.suppress(FileNotFoundError):
            if _identity(path) == identity:
                path.unlink()


# The report's figures beside it (`dpmed.reporting.inputs.embed_figure`: each also as <stem>_narrow.png).
_FIGURES = ("auroc_vs_epsilon", "ldp_examples", "fairness_*", "cam_grid")


def _figures(root: Path) -> set[Path]:
    """The figures an earlier report left in ``root``: one that this report does not draw again (fairness or
    explanations since turned off, the last local-DP run deleted) would stay beside it, showing runs and settings
    that the study no longer holds."""
    return {path for stem in _FIGURES for name in (f"{stem}.png", f"{stem}_narrow.png") for path in root.glob(name)}


def _identity(path: Path) -> tuple[int, int]:
    """A file's inode and modification time: a figure written again is a new file (replaced whole) with a new time,
    also where the file system has no inodes (FAT: 0)."""
    stat = path.stat()
    return stat.st_ino, stat.st_mtime_ns


@dataclass(frozen=True)
class PrivateRun:
    """What one run's private folder gives the private report (`dpmed.folders.RunFolder`): the audit's statement
    (audit.json), training-set metrics computed without noise (training_statistics.json), a DP-SGD run's wall time
    (timing.json), the attack's reconstructions (the file, and the record that labels them), and what of them
    could not be read (``unread``: one line per file, said in the run's card). ``audit_confidence``: the level
    the audit's bound holds at, for `_audits_together`."""

    audit_statement: str | None = None
    audit_confidence: float | None = None       # the level its bound holds at; None where it gave no bound
    training_metrics: Mapping[str, Any] | None = None
    timing: Timing | None = None
    attack_images: Path | None = None
    attacked: RunRecord | None = None
    unread: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.unread) or any(v is not None for v in (self.audit_statement, self.training_metrics,
                                                                 self.timing, self.attack_images))


def _reconstructions(items: Mapping[str, PrivateRun], path: Path) -> str:
    """The attack's best reconstructions beside the images they matched, one pair of rows per attacked run (the
    figure of Ziller et al. 2024 that shows what an attack at each eps recovers), saved beside the private report."""
    attacked = {record.run_id: (record, images) for item in items.values()
                if (images := item.attack_images) is not None and (record := item.attacked) is not None}
    loaded, unread = read_figure_arrays(((run_id, images) for run_id, (_, images) in attacked.items()),
                                        ATTACK_IMAGE_KEYS, "the attack's reconstructions")
    rows = [(attack_label(attacked[run_id][0]), arrays) for run_id, arrays in loaded if len(arrays["ssim"])]
    heading = '<h2 id="reconstructions">The imprint attack\'s best reconstructions</h2>'
    png = path.with_name("attack_reconstructions.png")
    if not rows:
        # an earlier report's figure (runs since deleted or retrained without the attack) would stay beside this
        # report, patient images under run labels that it no longer shows
        png.unlink(missing_ok=True)
        return unread and heading + unread
    figure = embed_png(reconstructions_figure(rows), png,
                       "The attack's best reconstructions (bottom row of each pair) under the test images they "
                       "matched (top row), one pair of rows per attacked run: "
                       + "; ".join(label.replace("\n", ", ") for label, _ in rows), owner_only=True)
    return (f"{heading}<p>Per attacked run, the "
            "reconstructions with the highest SSIM to an image of their batch (bottom row) under that image (top "
            "row). The attacked images are held-out test images put through the run's own DP-SGD step in place of a "
            "training batch, each once and without the run's augmentation; they are patient images all the same, so "
            "they appear here and not in report.html. "
            "A reconstruction counts as a success when its SSIM reaches the threshold given in report.html's "
            f"section 'Three threat models'.</p><figure>{figure}</figure>{unread}")


def _audits_together(items: Mapping[str, PrivateRun]) -> str:
    """What several audit bounds make together. Each holds at its own confidence c_i: it is wrong (above its run's
    true eps; an inconsistent verdict on a run that keeps its claim is one such case) at most 1 - c_i of the time.
    Read side by side, one or more of k bounds is wrong up to sum(1 - c_i) of the time (the union bound, which needs
    no independence between the runs), so all k hold together with probability at least 1 - sum(1 - c_i). The k are
    the bounds the statements give: a run without a claim (no privacy, shuffled batches) states one all the same,
    a run whose draw found no canary states none and is not counted. Each run's statement keeps its own level: the
    audits are run and reported one by one, and the joint level is the reader's to weigh."""
    levels = [item.audit_confidence for item in items.values() if item.audit_confidence is not None]
    if len(levels) < 2:
        return ""
    unbounded = sum(item.audit_statement is not None and item.audit_confidence is None for item in items.values())
    left = ("" if not unbounded else "; 1 audited run states no bound and is not counted" if unbounded == 1
            else f"; {unbounded} audited runs state no bound and are not counted")
    # rounded: ten levels of 0.9 fall short by 0.9999999999999998 in floating point, and 1 - that is no joint level
    short = round(sum(1.0 - c for c in levels), 12)
    head = f"{len(levels)} audit bounds, each at its own confidence ({', '.join(map(confidence_text, levels))}){left}. "
    if short >= 1.0:
        return (f"<p>{head}Read together, no joint level for the {len(levels)} bounds follows from the union bound "
                f"(the levels' shortfalls add up to {confidence_text(short, up=True)}): read one inconsistent verdict "
                "among them with that in mind.</p>")
    return (f"<p>{head}Read together, all {len(levels)} bounds hold with probability at least "
            f"{confidence_text(1.0 - short)} (union bound): one or more of them exceeds its run's true ε up to "
            f"{confidence_text(short, up=True)} of the time, so among runs that keep their claims one or more is "
            "called inconsistent at most that often.</p>")


def write_private_report(resolved: ResolvedStudy, items: Mapping[str, PrivateRun], path: Path) -> None:
    """private/report.html: the numbers no eps covers (training-set metrics computed without noise, a DP-SGD run's
    wall time and a run's trained beside others, one-run audit results that depend on the secret canary bits) and
    the images no public file may hold (the reconstruction attack's best reconstructions beside the images they
    matched), per run id. Never share it."""
    rows = []
    for run_id, item in items.items():
        parts = []
        t = item.timing
        if t is not None and t.train_seconds is not None and t.total_seconds is not None:
            parts.append(f"<p>Wall time: training {t.train_seconds:.1f} s, in all {t.total_seconds:.1f} s "
                         f"({_e(t.device)}, {count_text(t.threads, 'thread')}"
                         + (f", resumed from {_e(t.resumed_at)}" if t.resumed_at else "") + ").</p>")
        if item.audit_statement:
            parts.append(f"<p>{_e(item.audit_statement)}</p>")
        metrics = item.training_metrics
        if metrics:
            shown = {k: v for k, v in metrics.items() if k.startswith("train_") and not k.endswith(("_low", "_high"))
                     and isinstance(v, float)}
            parts.append(facts_table(((f"training-set {sections.metric_label(k[len('train_'):], resolved.dataset)}",
                                       f"{v:.4f}") for k, v in shown.items()), f"{run_id}: training-set metrics",
                                     numbers=True))
        parts += [f"<p class=note>{_e(line)}</p>" for line in item.unread]
        if parts:
            rows.append(f'<div class="card"><h3>{_e(run_id)}</h3>{"".join(parts)}</div>')
    reconstructions = _reconstructions(items, path)
    # under a heading of their own: each card's h3 directly under the page's h1 skips a level of its outline
    cards = (f'<h2 id="runs">Each run\'s private numbers</h2>{_audits_together(items)}'
             f'<div class="cards">{"".join(rows)}</div>' if rows else "")
    if not rows and not reconstructions:
        cards = "<p>No private statistics were computed.</p>"
    doc = f"""<!doctype html><html lang="en"><head><meta charset="utf-8">{_VIEWPORT}
<title>dpmed private report: {_e(resolved.name)}</title><style>{_CSS}</style></head><body>
<h1>Private: {_e(resolved.name)}</h1>
<div class="note notdp">PRIVATE, NOT COVERED BY EPS. These numbers are computed from the training images without
noise (training-set metrics, as in the train/test table of Singh et al. 2020; a DP-SGD run's wall time, which grows
with what Poisson sampling drew) or from the audit's secret canary inclusion bits, and the images are patient images
and their reconstructions. Sharing them breaks the eps of the
runs they describe, or shows patients' images. Keep this file in the study's private folder.</div>
{cards}{reconstructions}
</body></html>"""
    write_text_atomic(path, doc, owner_only=True)
