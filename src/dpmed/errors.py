"""Errors a user can act on.

Every error dpmed raises on bad input names the file, the key or the row at fault and says what to do. The CLI
prints the message alone (no traceback) and exits non-zero; the Python API raises it.
"""

from __future__ import annotations

__all__ = ["DpmedError", "ConfigError", "DataError", "PrivacyError", "FolderError", "InstallationError",
           "error_name", "first_invalid"]


def error_name(exc: BaseException) -> str:
    """The class of ``exc`` as a message names it: ``ValueError``, or with its module where the bare name says
    nothing (``zlib.error`` for a corrupt compressed file, ``zipfile.BadZipFile``)."""
    name = type(exc).__qualname__
    return name if type(exc).__module__ == "builtins" else f"{type(exc).__module__}.{name}"


def first_invalid(exc) -> str:
    """The first problem of a pydantic ValidationError of a file dpmed wrote, as a message quotes it: "key.path: what
    is wrong", or what is wrong alone where the file is no JSON at all (no key to name)."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    return (f"{where}: " if where else "") + first["msg"]


class DpmedError(Exception):
    """Base class: a problem with the user's input, explained in the message."""


class ConfigError(DpmedError):
    """A study file is malformed: unknown key, wrong type or impossible value."""


class DataError(DpmedError):
    """A dataset is missing, unreadable, or not in the layout its reader documents."""


class PrivacyError(DpmedError):
    """A privacy request cannot be met (e.g. a target eps no noise level reaches)."""


class FolderError(DpmedError):
    """An output folder cannot be written, or another dpmed run is working in it."""


class InstallationError(DpmedError):
    """The installed packages do not work together (a torchvision built for another torch)."""
