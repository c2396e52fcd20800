"""What the messages call an exception, and the one base class the command line turns into exit status 2."""

from __future__ import annotations

import zipfile
import zlib

import pytest

from dpmed.errors import ConfigError, DataError, DpmedError, FolderError, PrivacyError, error_name


def test_an_error_is_named_with_its_module_where_the_bare_name_says_nothing():
    assert error_name(zlib.error("bad")) == "zlib.error"
    assert error_name(zipfile.BadZipFile("bad")) == "zipfile.BadZipFile"
    assert error_name(ValueError("x")) == "ValueError" and error_name(OSError()) == "OSError"
    assert error_name(DataError("x")) == "dpmed.errors.DataError"


@pytest.mark.parametrize("kind", [ConfigError, DataError, PrivacyError, FolderError])
def test_every_input_error_is_a_dpmed_error(kind):
    assert issubclass(kind, DpmedError) and not issubclass(DpmedError, kind)
