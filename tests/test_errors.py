"""What the messages call an exception, and the one base class the command line turns into exit status 2."""

from __future__ import annotations

import tempfile
import zipfile
import zlib

import pytest

from dpmed import cli
from dpmed.errors import ConfigError, DataError, DpmedError, FolderError, InstallationError, PrivacyError, error_name

KINDS = [ConfigError, DataError, PrivacyError, FolderError, InstallationError]


def test_an_error_is_named_with_its_module_where_the_bare_name_says_nothing():
    assert error_name(zlib.error("bad")) == "zlib.error"
    assert error_name(zipfile.BadZipFile("bad")) == "zipfile.BadZipFile"
    assert error_name(ValueError("x")) == "ValueError" and error_name(OSError()) == "OSError"
    assert error_name(DataError("x")) == "dpmed.errors.DataError"


@pytest.mark.parametrize("kind", KINDS)
def test_every_input_error_is_a_dpmed_error(kind):
    assert issubclass(kind, DpmedError) and not issubclass(DpmedError, kind)


@pytest.mark.parametrize("kind", KINDS)
def test_every_dpmed_error_exits_2_with_its_message_alone_and_no_traceback_file(kind, monkeypatch, tmp_path, capsys):
    """What `dpmed --help` says of exit status 2, for each kind: one line, and no dpmed-error-*.txt as an internal
    error leaves."""
    def fail(args):
        raise kind("what is wrong, and what to do")

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(cli, "_status", fail)
    assert cli.main(["status", str(tmp_path)]) == 2
    assert capsys.readouterr().err == "dpmed: error: what is wrong, and what to do\n"
    assert list(tmp_path.iterdir()) == []
