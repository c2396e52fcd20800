"""How the ``dpmed`` command shows what the library logs: on the terminal, and in the study's log file.

The library only logs (``logging.getLogger("dpmed....")``) and never installs a handler: a program that imports
dpmed keeps its own logging. The command line calls :func:`log_to_console` and :func:`log_to_file` once, and hands
:func:`quiet_known_noise` to the executor so that the worker processes it starts drop the same known messages.

The log file lies in the study's ``private/`` folder: it holds what the terminal shows, audit results included, and
those depend on the secret canary bits. Nothing logs privacy randomness (keys, noise, sampled batches).
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import TextIO

__all__ = ["KnownRdpNoise", "quiet_known_noise", "log_to_console", "log_to_file", "hold_lines", "Held", "detach",
           "KNOWN_HARMLESS"]

# dp_accounting's RDP accountant logs these through absl; each is harmless where it appears:
# * "failed to converge": one fractional RDP order could not be evaluated; it is left out, and the eps of the
#   remaining orders is still a valid upper bound;
# * "Negative Renyi divergence": an order's divergence came out as -1e-16 or so (float rounding of what is zero); the
#   accountant then uses zero for it, which is the true value.
# Dozens appear during calibration or in a run's card and bury the output.
KNOWN_HARMLESS = ("failed to converge", "Negative Renyi divergence")


class KnownRdpNoise(logging.Filter):
    """Drops exactly dp_accounting's known harmless messages (:data:`KNOWN_HARMLESS`); everything else passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(text in message for text in KNOWN_HARMLESS)


def quiet_known_noise() -> None:
    """Install :class:`KnownRdpNoise` on the ``absl`` logger of this process (once). Module level, so that a spawned
    worker process can run it."""
    absl = logging.getLogger("absl")
    if not any(isinstance(f, KnownRdpNoise) for f in absl.filters):
        absl.addFilter(KnownRdpNoise())


class _Console(logging.StreamHandler):
    """Lines on the terminal; while tqdm progress bars are drawn, each line is written above them (not through
    them)."""

    def __init__(self, stream: TextIO, *, bars: bool) -> None:
        super().__init__(stream)
        self.bars = bars
        self.set_aside: list[logging.Handler] = []     # the root's terminal handlers, put back by :func:`detach`

    def emit(self, record: logging.LogRecord) -> None:
        if not self.bars:
            super().emit(record)
            return
        from tqdm import tqdm

        with tqdm.external_write_mode(file=self.stream):
            super().emit(record)


class _ConsoleFormat(logging.Formatter):
    """dpmed's own lines as they are; a warning or error of another library with its level and origin."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if record.levelno >= logging.WARNING and not record.name.startswith("dpmed"):
            text = f"{record.levelname.lower()} ({record.name}): {text}"
        return text


def log_to_console(*, stream: TextIO | None = None, bars: bool = False) -> logging.Handler:
    """Show dpmed's INFO lines and every library's warnings on ``stream`` (stderr); returns the handler.

    The command owns the terminal: a plain handler on the root logger that writes to the terminal (Opacus calls
    ``logging.basicConfig`` when imported) would print every line a second time, so it is set aside until
    :func:`detach`."""
    handler = _Console(stream or sys.stderr, bars=bars)
    handler.setFormatter(_ConsoleFormat("%(message)s"))
    root = logging.getLogger()
    terminals = {id(s) for s in (sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__, handler.stream)}
    handler.set_aside = [h for h in root.handlers if type(h) is logging.StreamHandler and id(h.stream) in terminals]
    for other in handler.set_aside:
        root.removeHandler(other)
    _attach(handler)
    return handler


class _File(logging.FileHandler):
    """A log file opened (and its folder made) at the first line, so that a command refused before it logs
    anything (e.g. by the lock of a study folder that another run holds) leaves no file. ``earlier``: lines logged
    before the file's place was known, written just before that first line, not at once: written at once they went
    into the log of the run holding the lock, or ended a command whose output folder cannot be made in an internal
    error."""

    def __init__(self, path: Path, earlier: list[logging.LogRecord]) -> None:
        super().__init__(path, mode="a", encoding="utf-8", delay=True)
        self.failed = False
        self.earlier = earlier

    def _open(self):  # noqa: ANN202 - logging.FileHandler's hook
        Path(self.baseFilename).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.close(os.open(self.baseFilename, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))   # owner-only if new
        return super()._open()

    def emit(self, record: logging.LogRecord) -> None:
        earlier, self.earlier = self.earlier, []
        for line in [*earlier, record]:
            if not self.failed:
                super().emit(line)

    def handleError(self, record: logging.LogRecord) -> None:  # logging.Handler's hook
        """A line that cannot be written (a full disk) ends the file's log with one line on stderr, instead of
        Python's "--- Logging error ---" traceback at every line after; the terminal still shows them."""
        self.failed = True
        sys.stderr.write(f"dpmed: cannot write the log file {self.baseFilename} ({sys.exc_info()[1]}); the log goes "
                         "on in the terminal only\n")


class Held(logging.Handler):
    """The lines logged before the log file's place is known, kept for it: the study file names the study's folder,
    and what reading it says (a setting another turns off) belongs in that folder's log as on the terminal."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def hold_lines() -> Held:
    """Keep the lines logged from now on (as the terminal shows them) until :func:`detach`, for :func:`log_to_file`'s
    ``earlier``."""
    handler = Held()
    _attach(handler)
    return handler


def log_to_file(path: Path, *, earlier: Held | None = None) -> logging.Handler:
    """Append the same lines, with time, process and origin, to ``path`` (the study's private log) from the first
    line on, those ``earlier`` kept first; returns the handler."""
    handler = _File(path, earlier=[] if earlier is None else earlier.records)
    handler.setFormatter(logging.Formatter("%(asctime)s %(processName)s %(name)s %(levelname)s: %(message)s"))
    _attach(handler)
    return handler


# dpmed's logger's level before each handler that raised it to INFO, given back by :func:`detach`
_LEVELS_BEFORE: dict[logging.Handler, int] = {}


def _attach(handler: logging.Handler) -> None:
    """On the root logger, so that other libraries' warnings are seen too; dpmed's loggers let INFO through."""
    handler.setLevel(logging.INFO)
    root = logging.getLogger()
    root.addHandler(handler)
    dpmed = logging.getLogger("dpmed")
    if dpmed.getEffectiveLevel() > logging.INFO:
        _LEVELS_BEFORE[handler] = dpmed.level      # the caller's
        dpmed.setLevel(logging.INFO)
    quiet_known_noise()


def detach(*handlers: logging.Handler) -> None:
    """Remove and close handlers added by :func:`log_to_console` or :func:`log_to_file`, last added first, and give
    dpmed's logger back the level it had before them (``main`` may be called more than once in one process, e.g. by
    a notebook or by tests)."""
    root = logging.getLogger()
    for handler in reversed(handlers):
        root.removeHandler(handler)
        handler.close()
        for other in getattr(handler, "set_aside", []):
            root.addHandler(other)
        if handler in _LEVELS_BEFORE:
            logging.getLogger("dpmed").setLevel(_LEVELS_BEFORE.pop(handler))
