"""What every section of the report reads (the study's typed records, computed comparisons, its folder), and the small
pieces of HTML they share."""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpmed.comparisons import Comparisons
from dpmed.folders import StudyFolder
from dpmed.records import Estimate, ResolvedStudy, RunRecord

__all__ = ["ReportInputs", "escape", "estimate_text", "embed_png"]


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
        return f"{self.resolved.study.evaluation.confidence:.0%}"


def escape(value: Any) -> str:
    return html.escape(str(value))


def estimate_text(est: Estimate | dict | None, digits: int = 3) -> str:
    """"v [low, high]" of an estimate (a record's, or an evaluation block's dict); "–" when undefined."""
    if est is None:
        return "–"
    value, low, high = ((est.value, est.low, est.high) if isinstance(est, Estimate)
                        else (est.get("value"), est.get("low"), est.get("high")))
    if value is None:
        return "–"
    if low is None or high is None:
        return f"{value:.{digits}f}"
    return f"{value:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def embed_png(png: bytes, path: Path, alt: str) -> str:
    """Save ``png`` beside the report and embed it (the report opens offline)."""
    path.write_bytes(png)
    uri = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
    return f'<img src="{uri}" alt="{escape(alt)}" style="max-width:100%">'
