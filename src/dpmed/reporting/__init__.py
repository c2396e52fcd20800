"""Reporting: results.csv, the printed summary, and the self-contained HTML report, rendered from typed records."""

from dpmed.reporting.page import SECTIONS, PrivateRun, write_private_report, write_report
from dpmed.reporting.tables import results_frame, summary_text, write_results_table

__all__ = ["write_report", "write_private_report", "PrivateRun", "SECTIONS", "results_frame", "summary_text",
           "write_results_table"]
