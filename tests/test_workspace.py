"""Writing into a study folder: what the file system refuses reaches the user as one FolderError naming the folder
and what to do, also where the error names no file (a write that runs out of space)."""

from __future__ import annotations

import errno
import os

import pytest

from dpmed.errors import FolderError
from dpmed.workspace import writing_into

REFUSALS = [errno.ENOSPC, errno.EROFS, errno.EACCES] + ([errno.EDQUOT] if hasattr(errno, "EDQUOT") else [])


@pytest.mark.parametrize("code", REFUSALS, ids=[errno.errorcode[c] for c in REFUSALS])
def test_a_refusal_that_names_no_file_is_told_as_the_folder_s(tmp_path, code):
    """A write (or the close that flushes it) on a full disk raises ENOSPC with no file name: before, it passed as
    it was, and `dpmed run` ended in "internal error ... please report this"."""
    out = tmp_path / "out"
    with pytest.raises(FolderError) as caught:
        with writing_into(out):
            raise OSError(code, os.strerror(code))
    message = str(caught.value)
    assert message.startswith(f"cannot write to the output folder {out}: {os.strerror(code)}; ")
    full = code in (errno.ENOSPC, getattr(errno, "EDQUOT", None))
    assert ("free space on its disk" in message) is full and "--out" in message
    if full:
        assert "finished runs are kept" in message


def test_a_full_disk_met_writing_a_file_outside_the_folder_names_that_file(tmp_path):
    cache = tmp_path / "cache" / "weights.pt"
    with pytest.raises(FolderError, match=f"^cannot write {cache}: No space left on device; free space on its disk"):
        with writing_into(tmp_path / "out"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(cache))


@pytest.mark.parametrize("error", [OSError(errno.EIO, "Input/output error"),
                                   OSError(errno.EACCES, "Permission denied", "/somewhere/else/data.csv")],
                         ids=["no file, not a refusal", "another file's permission"])
def test_other_os_errors_pass(tmp_path, error):
    with pytest.raises(OSError) as caught:
        with writing_into(tmp_path / "out"):
            raise error
    assert caught.value is error


@pytest.mark.parametrize("windows", [True, False])
def test_a_file_that_cannot_be_replaced_is_named_and_on_windows_told_it_may_be_open_elsewhere(tmp_path, monkeypatch,
                                                                                            windows):
    """Windows refuses to replace a file another program holds open (results.csv in a spreadsheet) with EACCES: the
    advice was only to make the folder writable, which it already is, and the message named the atomic write's
    temporary file (os.replace's first name), which is gone by then, not the file it replaces."""
    import dpmed.workspace
    from dpmed.folders import write_text_atomic

    monkeypatch.setattr(dpmed.workspace, "_WINDOWS", windows)
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.csv").write_text("run_id\n")

    def open_elsewhere(src, dst):
        raise PermissionError(errno.EACCES, "Access is denied", str(src), None, str(dst))
    monkeypatch.setattr(os, "replace", open_elsewhere)
    with pytest.raises(FolderError) as caught:
        with writing_into(out):
            write_text_atomic(out / "results.csv", "run_id\nnew\n")
    message = str(caught.value)
    assert f"Access is denied ({out / 'results.csv'}); " in message and ".tmp" not in message
    hint = "if another program has it open (a spreadsheet, a viewer), close it and run again; else choose a writable"
    assert (hint in message) is windows
    with pytest.raises(FolderError) as caught:                 # a folder it cannot write into: no such advice
        with writing_into(out):
            raise PermissionError(errno.EACCES, "Permission denied", str(out / "runs"))
    assert "another program" not in str(caught.value)
