"""What every section of the report reads (the study's typed records, computed comparisons, its folder), and the small
pieces of HTML they share: numbers as a reader reads them (three significant figures, p-values at their floor as
"<= 0.002"), papers cited by authors and year, and figures that stay readable on a phone."""

from __future__ import annotations

import base64
import html
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
from scipy.stats import t as student_t

from dpmed.comparisons import SIGNIFICANCE, Comparisons, Correlation, PairedDifference
from dpmed.comparisons.correlations import ExplanationCorrelation, ParityCorrelation
from dpmed.evaluation.utility import UNDEFINED_REDRAWS_WARN_FRACTION
from dpmed.folders import RETRAIN_NOTE, StudyFolder, read_arrays, write_text_atomic
from dpmed.mechanisms import MECHANISMS, PrivacyCard
from dpmed.numbers import confidence_text, delta_number, number_text, round_up, up_to_figures
from dpmed.randomness import NOT_DP_REPRODUCIBLE
from dpmed.records import Estimate, ResolvedStudy, RunRecord

__all__ = ["ReportInputs", "escape", "estimate_text", "signed_text", "embed_png", "embed_figure", "number_text",
           "p_text", "cite", "SOURCES", "METHODS", "NARROW_MEDIA", "PHONE_WIDTH", "eps_label", "is_reproduction",
           "not_dp_reasons", "not_dp_text", "accountant_name", "stacked", "bound_percent", "read_figure_arrays",
           "no_bound_note", "facts_table", "column_table", "r_and_p", "not_computed_text", "t_text", "range_text",
           "runs_text", "undefined_redraws_flag"]

# The source documents, cited by authors and year wherever a reader sees them (their file names stay in code
# comments): /work/shared/seeds/README.md lists them.
SOURCES = {
    "000_56c2431ae4df8d10.txt": "Singh, Sikka, Kotti and Trask 2020",
    "001_d0483fd35863b74c.txt": "Naidu et al. 2021",
    "003_9a91354dc2d7e2df.txt": "Tayebi Arasteh, Ziller et al. 2023",
    "004_6210268d59b6f8e5.txt": "Ziller et al. 2024",
}
_SOURCE_FILE = re.compile(r"\b(00\d_[0-9a-f]{16}\.txt)")

# Where the definitions live: the repository's docs/METHODS.md (the report names it, it cannot link a file).
METHODS = "docs/METHODS.md"

# Below this page width the report shows each figure's narrow variant (stacked panels, larger type).
NARROW_MEDIA = "(max-width: 700px)"
# The CSS width a figure is shown at on a 390 px phone (the body's padding taken off), for the figures' font sizes.
PHONE_WIDTH = 358


@dataclass(frozen=True)
class ReportInputs:
    """resolved: study.yaml; records: the finished runs in study order; comparisons: computed before rendering;
    folder: where figures are saved beside the report and per-run arrays (CAMs, examples) are read."""

    resolved: ResolvedStudy
    records: list[RunRecord]
    comparisons: Comparisons
    folder: StudyFolder

    @property
    def level(self) -> str:
        """The confidence level of every interval, e.g. "95%"."""
        return confidence_text(self.resolved.study.evaluation.confidence)

    @property
    def interval(self) -> str:
        """The interval the study's utility metrics and fairness groups were given (``evaluation.interval``), as the
        report names it: "percentile" or "BCa"."""
        return "BCa" if self.resolved.study.evaluation.interval == "bca" else "percentile"

    @property
    def redrawn(self) -> str:
        """What the runs' test-set bootstrap redrew, in words that follow "redraws of" (`RunRecord.bootstrap_unit`)."""
        units = {r.bootstrap_unit for r in self.records}
        if units == {"patient"}:
            return "the test patients (each drawn patient with all of their images)"
        if units <= {"image"}:
            return "the test images"
        return "the test patients (images in runs recorded before dpmed redrew patients)"


def t_text(confidence: float, seed_counts: Iterable[int]) -> str:
    """The Student t quantile each interval over seeds was drawn with, for the seed counts the report's rows have:
    "t is 4.30 for 3 seeds" (95%), "t is 2.92 for 3 seeds" (90%). A fixed "t is 4.30 for 3" beside a 90% interval,
    or beside rows of 2 seeds (t 12.71), told the reader a width the intervals do not have."""
    counts = sorted({n for n in seed_counts if n > 1})
    if not counts:
        return ""
    parts = [f"{student_t.ppf((1 + confidence) / 2, n - 1):.2f} for {n} seeds" for n in counts]
    return "t is " + (", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0])


def range_text(seed_counts: Iterable[int]) -> str:
    """How often the seeds' range holds their true mean, for the seed counts the report's rows have: 1 - 2 / 2^n for
    n seeds of roughly normal values ("3 seeds' range holds the true mean 75% of the time"). A fixed "3 seeds'
    ... only 75%" stood beside rows of 6 seeds, whose range holds it 96% of the time: the range is no interval
    because its share depends on n, not on the study's confidence. The percent is rounded down: rounded to the
    nearest, 9 seeds and more read "100% of the time", a certainty no range has."""
    counts = sorted({n for n in seed_counts if n > 1})
    return "; ".join(f"{n} seeds' range holds the true mean {math.floor(100 * (1 - 2.0 ** (1 - n)))}% of the time"
                     for n in counts)


def cite(text: str) -> str:
    """``text`` with every source document's file name replaced by its authors and year (records written by any
    version of dpmed, and sentences of upstream stages, may still name the files)."""
    return _SOURCE_FILE.sub(lambda m: SOURCES.get(m.group(1), m.group(1)), text)


def escape(value: Any) -> str:
    return html.escape(cite(str(value)))


def runs_text(run_ids: list[str]) -> str:
    """Run ids for a sentence, escaped: the first ten and how many more, so that a study of hundreds of runs does not
    bury the sentence that names them."""
    return (", ".join(escape(m) for m in run_ids[:10])
            + (f" and {len(run_ids) - 10} more" if len(run_ids) > 10 else ""))


def bound_percent(value: float | None, decimals: int) -> str:
    """An upper bound on a probability (a reconstruction or membership-inference bound) as a percentage with
    ``decimals`` decimals, rounded up as eps is: a bound shown shorter must never look smaller than it is (0.0031425
    -> "0.315%" at 3, not "0.314%"). "–" where there is none."""
    if value is None:
        return "–"
    scale = 10.0 ** decimals
    return f"{round_up(100 * value * scale) / scale:.{decimals}f}%"


def accountant_name(accountant: str | None) -> str:
    """pld -> PLD, rdp -> RDP; longer descriptions as they are."""
    if accountant is None:
        return ""
    return accountant.upper() if accountant in ("pld", "rdp", "rdp-classic", "pure") else accountant


def _unbroken(text: str) -> str:
    """``text`` with no line break inside a number or between a symbol and its value: "ε 1", "δ 1e-5" and "ε = ∞"
    stay on one line in a narrow cell (a browser may otherwise break "1e-" from "5"). No-break spaces, and the
    non-breaking hyphen in exponents."""
    text = re.sub(r"(\d)e-(\d)", "\\1e\u2011\\2", text)
    return re.sub(r"(ε|δ|=) ", "\\1\u00a0", text)


def eps_label(card: PrivacyCard) -> str:
    """A run's eps as the report shows it, rounded up, with its delta, accountant and neighbours: "ε 1 (δ 1e-5, PLD,
    add/remove one patient)" for 0.99942, local DP "ε 8,192 per image (local DP, δ 0, closed form, any two
    images)", "no privacy (ε = ∞)", "not DP" where no eps holds, and a reproducible-mode run's accounted label
    followed by ", not DP: seed known"; no line break inside "ε 1" or "δ 1e-5" (see :func:`_unbroken`)."""
    return _unbroken(_eps_label(card))


def _eps_label(card: PrivacyCard) -> str:
    if not card.is_dp and card.epsilon is not None:     # an accounted value whose claim does not hold, labelled
        return f"{_eps_label(card.model_copy(update={'is_dp': True}))}, not DP: {card.why_not_dp_in_brief}"
    if not card.is_dp:
        return "no privacy (ε = ∞)" if card.mechanism == "none" else "not DP"
    if card.epsilon_image is not None:      # per image, "any two images": not comparable with DP-SGD's eps
        return (f"ε {number_text(card.epsilon_image, up=True)} per image (local DP, δ {_delta_label(card)}, "
                f"{card.accountant_in_brief}, {card.neighbours_in_brief})")
    return (f"ε {number_text(card.epsilon, up=True)} (δ {_delta_label(card)}, "
            f"{card.accountant_in_brief}, {card.neighbours_in_brief})")


def _delta_label(card: PrivacyCard) -> str:
    """The card's delta, or "unknown" where it states none (a run.json edited by hand): read as 0, that claimed pure
    DP, and a DP-SGD card stopped the report with an internal error."""
    return "unknown" if card.delta is None else delta_number(card.delta)


def is_reproduction(card: PrivacyCard) -> bool:
    """Whether a run's mechanism is a labelled reproduction of a flawed one (the registry's ``is_private`` is False
    for it, and it is not the arm without privacy): not DP whatever its settings."""
    info = MECHANISMS.get(card.mechanism)
    return card.mechanism != "none" and info is not None and not info.is_private


def not_dp_reasons(card: PrivacyCard) -> list[str]:
    """Why a run is not DP, each reason read from its own card, as clauses that follow "not DP because": its
    mechanism is a labelled reproduction of a flawed one (the registry's ``is_private``), it trained on shuffled
    batches that its accountant does not cover (``epsilon_if_poisson``), its privacy randomness came from the
    published seed (``randomness``, reproducible mode). [] for a DP run and for a run without privacy."""
    if card.is_dp or card.mechanism == "none":
        return []
    reasons = []
    if is_reproduction(card):
        reasons.append("it reproduces a source document's flawed mechanism as it was")
    if card.epsilon is None and card.epsilon_if_poisson is not None:
        reasons.append("it trained on shuffled fixed-size batches, which its accountant (it assumes Poisson "
                       "sampling) does not cover")
    if card.randomness == NOT_DP_REPRODUCIBLE:
        reasons.append("its privacy randomness derives from the published study seed (reproducible mode)")
    if card.sampler_voids and card.epsilon_image is not None:
        reasons.append("its noise is so small that the noise sampler's bounded draws change how often a pixel at one "
                       f"end of the range is released at the other (the {card.accountant_in_brief} ε holds for "
                       "exact noise only)")
    elif card.sampler_voids:
        reasons.append("its noise is so small that one unit can move an output past every value the noise sampler "
                       "draws (the accountant's ε holds for exact noise only)")
    return reasons


def no_bound_note(records: Iterable[RunRecord], proved: str) -> str:
    """A sentence naming the DP-SGD runs among ``records`` without reconstruction bounds, and why: the bounds are
    proved for Gaussian noise with Poisson sampling (`dpmed.accounting.reconstruction`), so a Laplace-noise or
    shuffled-batch run has none, and a table showing "–" in their place said nothing of it. ``proved``: what the
    sentence says is proved, e.g. "the bounds above are"; "" where no run lacks its bounds."""
    left = [r for r in records if r.mechanism == "dp_sgd" and r.reconstruction is None]
    if not left:
        return ""
    why = {r.run_id: ", ".join((["Laplace noise"] if r.privacy.noise == "laplace" else [])
                               + (["shuffled batches"] if r.privacy.sampling == "shuffle" else [])) for r in left}
    named = "; ".join(f"{escape(run_id)} ({escape(reason or 'see its card')})" for run_id, reason in why.items())
    return (f"<p>No bound is given for {named}: {proved} proved for Gaussian noise with Poisson sampling only, so "
            "these DP-SGD runs have none; their cards state what privacy they have.</p>")


def not_dp_text(card: PrivacyCard) -> str | None:
    """"not DP because ..." for a run that is not DP (:func:`not_dp_reasons`; where its card gives no reason this
    report knows, it points to the card); None for a DP run and for a run without privacy."""
    if card.is_dp or card.mechanism == "none":
        return None
    reasons = not_dp_reasons(card)
    return f"not DP because {', and '.join(reasons)}" if reasons else "not DP (its privacy card says why)"


def p_text(diff: PairedDifference) -> str:
    """A bootstrap p-value; at its floor 2 / (R + 1) (no redraw on the other side of zero) it is "≤ floor", since
    more redraws could only have lowered it, the floor rounded up (0.00664 is "≤ 0.0067": "≤ 0.0066" would claim
    more than the redraws show). Two significant figures, and more where two would put it on the other side of the
    report's SIGNIFICANCE (0.04995 is "0.0499", not "0.05" beside a count of seeds with p < 0.05)."""
    if diff.p_value is None:
        return "–"
    if diff.p_floor is not None and diff.p_at_floor:                   # p_at_floor holds only with a floor
        return f"≤\u00a0{up_to_figures(diff.p_floor, 2):.2g}"         # one unit: "≤" never ends a line
    p, digits = diff.p_value, 2
    while (float(f"{p:.{digits}g}") < SIGNIFICANCE) != (p < SIGNIFICANCE) and digits < 17:
        digits += 1
    return f"{p:.{digits}g}"


def signed_text(value: float | None, digits: int = 3) -> str:
    """+0.012, -0.004, and 0.000 (not -0.000 or +0.000) for a change that rounds to none: every difference the
    report prints (a run minus the non-private run, a group minus the rest) reads as a gain or a loss."""
    if value is None:
        return "–"
    text = f"{value:+.{digits}f}"
    return text[1:] if float(text) == 0 else text


def undefined_redraws_flag(undefined: float, resamples: float, why: str) -> str:
    """" (21 of 200 redraws undefined)", flagged, where more than UNDEFINED_REDRAWS_WARN_FRACTION of the redraws left
    a statistic undefined: its interval then describes only the others, and the flag's title says ``why`` they are
    left out. Empty where few are (the utility metrics and the fairness differences warn above the same share), and
    where a count is not a number (a run.json written elsewhere): "nan of 200" says nothing a reader can act on."""
    if resamples and undefined > UNDEFINED_REDRAWS_WARN_FRACTION * resamples:
        return f' <span class="flag" title="{why}">({undefined} of {resamples} redraws undefined)</span>'
    return ""


def estimate_text(est: Estimate | None, digits: int = 3, *, signed: bool = False) -> str:
    """"v [low, high]" of an estimate; "–" when undefined. ``signed`` for a difference: "-0.050 [-0.120, +0.010]"."""
    if est is None:
        return "–"
    value, low, high = est.value, est.low, est.high
    if value is None:
        return "–"

    def text(x: float) -> str:
        return signed_text(x, digits) if signed else f"{x:.{digits}f}"
    if low is None or high is None:
        return text(value)
    # a narrow cell may wrap between the value and its interval, never inside the interval (no-break space)
    return f"{text(value)} [{text(low)},\u00a0{text(high)}]"


def _uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def embed_png(png: bytes, path: Path, alt: str, *, owner_only: bool = False) -> str:
    """Save ``png`` beside the report and embed it (the report opens offline); ``owner_only`` for a private
    report's figure, which shows what its report does."""
    write_text_atomic(path, png, owner_only=owner_only)        # `dpmed report` may write it while `dpmed run` does
    return f'<img src="{_uri(png)}" alt="{escape(alt)}">'


def embed_figure(wide: bytes, narrow: bytes, path: Path, alt: str) -> str:
    """A figure in two layouts, both saved beside the report (``path`` and ``<stem>_narrow.png``) and embedded: the
    browser shows the narrow one (panels stacked, type sized for a phone) at page widths of :data:`NARROW_MEDIA`,
    so axis labels stay readable at 390 px instead of shrinking with a desktop-wide image."""
    write_text_atomic(path, wide)
    write_text_atomic(path.with_name(f"{path.stem}_narrow{path.suffix}"), narrow)
    return (f'<picture><source media="{NARROW_MEDIA}" srcset="{_uri(narrow)}">'
            f'<img src="{_uri(wide)}" alt="{escape(alt)}"></picture>')


def read_figure_arrays(files: Iterable[tuple[str, Path]], required: tuple[str, ...], figure: str,
                       folder: StudyFolder | None = None) -> tuple[list[tuple[str, dict[str, np.ndarray]]], str]:
    """The arrays a figure draws, per run (``files``: run id and its .npz; runs without the file skipped), and a
    note naming each file that cannot be read (`dpmed.folders.read_arrays`): a damaged file leaves its run out of
    ``figure``, said there, instead of failing the whole report. ``folder``: the study folder, where the files are
    the runs' evaluation files, which the next `dpmed run` writes again from each model (`RunFolder.recovery`:
    deleting the run and retraining it, as the note advised, released its patients a second time); None where only
    retraining writes them again (the private attack's images)."""
    loaded, unread = [], []
    for run_id, path in files:
        try:
            loaded.append((run_id, read_arrays(path, required)))
        except FileNotFoundError:
            continue
        except ValueError as exc:
            unread.append(f"{run_id}: {exc if folder is None else folder.run(run_id).recovery(str(exc))}")
    if not unread:
        return loaded, ""
    retrain = "" if folder is not None else (f" Delete such a run's folder and run the study again to retrain it "
                                             f"{RETRAIN_NOTE}.")
    return loaded, f"<p class=note>Left out of {escape(figure)}: {escape('; '.join(unread))}.{escape(retrain)}</p>"


def facts_table(rows: Iterable[tuple[str, str]], caption: str, css_class: str = "", *, numbers: bool = False) -> str:
    """A table of labelled facts (``rows``: label and value, both HTML) whose labels are row headers and whose
    caption names it: a screen reader reads each value with its label and lists the table by name, where a table of
    bare cells read as an unnamed grid. The caption is for that reader only (a heading stands above every such
    table), hidden on screen and paper by the page's ``vh`` class. No facts, no table (an empty one
    named by its caption holds nothing to read). ``numbers``: the values are numbers, aligned as in the tables of
    runs."""
    td = "<td class=num>" if numbers else "<td>"
    cells = "".join(f'<tr><th scope="row">{label}</th>{td}{value}</td></tr>' for label, value in rows)
    cls = f' class="{css_class}"' if css_class else ""
    return f'<table{cls}><caption class="vh">{escape(caption)}</caption>{cells}</table>' if cells else ""


def column_table(heads: Sequence[str], rows: str) -> str:
    """A table whose head row names its columns (``scope="col"``: a screen reader reads each cell with its column's
    name); ``rows``: its body rows as HTML."""
    return ("<table><thead><tr>" + "".join(f'<th scope="col">{escape(h)}</th>' for h in heads)
            + f"</tr></thead><tbody>{rows}</tbody></table>")


def r_and_p(entry: Correlation) -> tuple[str, str]:
    """A correlation's r and p as two cells' text: "+0.412" and "0.0312", or "–" and why r is undefined."""
    if entry.r is None:
        return "–", escape(entry.reason or "")
    return f"{entry.r:+.3f}", f"{entry.p_value:.3g}"


def not_computed_text(correlations: Sequence[ParityCorrelation | ExplanationCorrelation], what: str) -> str | None:
    """One sentence where no correlation has an r (a sweep of fewer than three values gives none, whatever the
    seeds): a table of dashes says less. None where some r is defined."""
    if any(c.r is not None for c in correlations):
        return None
    reasons = "; ".join(dict.fromkeys(c.reason or "undefined" for c in correlations))
    sweeps = "; ".join(dict.fromkeys(c.sweep for c in correlations))
    return f"not computed for any of the {len(correlations)} {what}: {reasons} ({sweeps})"


_HEAD = re.compile(r"<th[^>]*>(.*?)</th>", re.S)
_TAG = re.compile(r"<[^>]+>")


def stacked(table: str) -> str:
    """A table of runs (``<table><tr><th>..</th>..</tr><tr><td>..</td>..</tr>..</table>``: one head row, then one
    row per run with the run's name first) marked to read on a phone: every cell carries its column's head as
    ``data-label``, and the page's CSS shows each row as a block of labelled values below :data:`NARROW_MEDIA`
    instead of a table to scroll sideways. On a desktop it is the same table, the run's name kept on one line. The
    head row goes in ``<thead>``, each of its cells a column header (``scope="col"``), and the runs in ``<tbody>``."""
    start = table.index("<tr>")
    end = table.index("</tr>", start)
    heads = [html.unescape(_TAG.sub("", h)).strip() for h in _HEAD.findall(table[start:end])]
    body = table[end:]

    def label(row: re.Match) -> str:
        names = iter(heads)
        return re.sub(r"<td(?=[\s>])", lambda _: f'<td data-label="{html.escape(next(names, ""), quote=True)}"',
                      row.group(0))

    closing = body.rindex("</table>")
    rows = re.sub(r"<tr>.*?</tr>", label, body[len("</tr>"):closing], flags=re.S)
    # the head row in <thead>: a printed table that runs onto another page repeats it there, a screen reader takes
    # its cells for the columns' headers, and a phone hides it alone (each cell carries its head)
    head = table[start:end].replace("<th>", '<th scope="col">')
    return (table[:start].replace("<table", '<table class="stack"', 1) + "<thead>" + head + "</tr></thead>"
            + f"<tbody>{rows}</tbody>" + body[closing:])
