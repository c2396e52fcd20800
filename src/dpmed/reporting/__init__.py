"""Reporting: results.csv, the printed summary, and the self-contained HTML report."""

from dpmed.reporting.html import write_private_report, write_report
from dpmed.reporting.tables import results_frame, summary_text, write_results_table

__all__ = ["write_report", "write_private_report", "results_frame", "summary_text", "write_results_table"]
