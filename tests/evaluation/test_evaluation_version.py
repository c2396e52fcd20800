"""Which methods a run.json's evaluation_version names, as status, the report and a resumed study say it."""

from __future__ import annotations

import dpmed.evaluation.version as version
from dpmed.evaluation.version import evaluated_by


def test_a_retired_version_s_record_also_lacks_every_change_made_after_it(monkeypatch):
    """A run a retired version evaluated (BCa intervals) holds neither the methods dropped since nor those added
    later: once a next version changes a method, both are said, not the retired one's alone."""
    retired = min(version.RETIRED)
    later = max(version.CHANGES.keys() | version.RETIRED.keys()) + 1
    monkeypatch.setattr(version, "CHANGES", {**version.CHANGES, later: "a later change"})
    monkeypatch.setattr(version, "EVALUATION_VERSION", later)
    assert evaluated_by(retired) == f"evaluated by an older dpmed ({version.RETIRED[retired]}; a later change)"
    assert "newer dpmed" in evaluated_by(later + 1) and evaluated_by(later) == ""
