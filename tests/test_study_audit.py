"""What the study's log says of a finished run's private audit record (`dpmed.study._tell_audit`): its statement, or,
where audit.json is damaged, one warning naming the file and what is wrong with it, never a traceback that stops
the study after the run has finished."""

from __future__ import annotations

import logging
import re

import pytest

from dpmed.audit import AUDIT_CITATION, AuditRecord
from dpmed.folders import StudyFolder, write_json_atomic
from dpmed.study import _tell_audit

STATEMENT = "empirical lower bound eps >= 0.5 at delta = 1e-5, add/remove one canary (an image that is its own patient)"
RECORD = AuditRecord(n_canaries=40, kind="mislabelled", n_included=21, n_guesses=10, n_correct=9, k_positive=5,
                     k_negative=5, epsilon_lower_bound=0.5, confidence=0.95, delta=1e-5, claimed_epsilon=None,
                     consistent_with_claim=None, method="test", citation=AUDIT_CITATION, statement=STATEMENT,
                     canary_source="training split", private="private")


def _folder(tmp_path):
    folder = StudyFolder(tmp_path).run("dp_seed0")
    folder.private.mkdir(parents=True)
    return folder


def _lines(caplog, folder):
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="dpmed.study"):
        _tell_audit("[1/1] dp_seed0", folder)
    return [r for r in caplog.records if r.name == "dpmed.study"]


def test_a_readable_record_logs_its_statement(tmp_path, caplog):
    folder = _folder(tmp_path)
    write_json_atomic(folder.audit, RECORD.model_dump(mode="json"))
    (line,) = _lines(caplog, folder)
    assert line.levelno == logging.INFO
    assert line.getMessage() == f"[1/1] dp_seed0: audit (private: {folder.audit}): {STATEMENT}"


@pytest.mark.parametrize("damage, reason", [
    (lambda text: b"\xff\xfe" + text.encode(), "(Invalid JSON: expected value at line 1 column 1)"),
    (lambda text: text[:len(text) // 2].encode(), "(Invalid JSON: EOF while parsing"),
    (lambda text: text.replace('"statement"', '"said"').encode(), "(statement: Field required)"),
    (lambda text: b"[]", "(Input should be an object)"),
])
def test_a_damaged_record_is_one_warning_naming_the_file_not_a_traceback(tmp_path, caplog, damage, reason):
    folder = _folder(tmp_path)
    folder.audit.write_bytes(damage(RECORD.model_dump_json(indent=2)))
    (line,) = _lines(caplog, folder)          # before, json.loads(...)["statement"] raised out of the study's callback
    message = line.getMessage()
    assert line.levelno == logging.WARNING and line.exc_info is None and "\n" not in message
    assert message.startswith(f"[1/1] dp_seed0: private audit record {folder.audit} cannot be read {reason}")
    assert message.endswith("so its result is not shown")          # no scores file here: none is named
    folder.audit_scores.write_bytes(b"npz")
    (line,) = _lines(caplog, folder)
    assert line.getMessage().endswith(f"; {folder.audit_scores} keeps each canary's score and inclusion bit")


def test_an_unreadable_record_is_one_warning_too(tmp_path, caplog):
    folder = _folder(tmp_path)
    folder.audit.mkdir()                       # a folder where the file should be: the read fails with an OSError
    (line,) = _lines(caplog, folder)
    assert line.levelno == logging.WARNING and line.exc_info is None
    # IsADirectoryError on POSIX, PermissionError on Windows: named, with the system's words
    assert re.match(rf"\[1/1\] dp_seed0: private audit record {re.escape(str(folder.audit))} cannot be read "
                    r"\((IsADirectory|Permission)Error: [^)]+\), so its result is not shown$", line.getMessage())


def test_a_run_that_wrote_no_record_logs_nothing(tmp_path, caplog):
    """A run without an audit writes no audit.json: nothing is said of it, least of all a warning that its record
    cannot be read."""
    assert _lines(caplog, _folder(tmp_path)) == []
