"""Ctrl-C and SIGTERM during `dpmed run`: each raises KeyboardInterrupt, and one that Python lost is raised again.

Python raises KeyboardInterrupt wherever the main thread runs Python code when the signal arrives. When that code
runs inside a C extension's call back into Python (torch's, in a forward pass), the extension may clear the
exception, and the interrupt is lost without a trace: an interrupted `dpmed run` then trained on (about one Ctrl-C
in ten on a tiny study, on a 2-core machine kept busy: the process had caught the SIGINT, none was pending or
blocked, no "Exception ignored" was printed, and it was still training a minute later). So the handler also
records the signal, and `check`, called at every training step and while the study waits for its workers, raises
KeyboardInterrupt again once one is recorded.

`run_study` called from Python takes Ctrl-C the same way (a notebook's interrupt is a SIGINT) and leaves SIGTERM to
its caller. The command takes SIGTERM (`timeout`, SLURM, `docker stop`) as Ctrl-C, so that the same clean-up
happens: the folder's file times settled (a file's real time tells how long DP-SGD runs trained:
`dpmed.folders.RELEASE_TIME`), its lock released, the workers stopped, the "interrupted" line. Left at its default,
SIGTERM ended dpmed at once, with none of that.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any, Iterator

__all__ = ["interruptible", "check"]

_received: list[int] = []
_active: list[bool] = []       # an interruptible block is open (the command's, around `run_study`'s)


@contextlib.contextmanager
def interruptible(signals: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)) -> Iterator[list[int]]:
    """For as long as the block runs, ``signals`` raise KeyboardInterrupt and are recorded for `check`.
    Yields the list of the signals received; the previous handlers come back after, and the record is cleared.
    Only the main thread may set handlers: elsewhere this changes nothing. Within an open block it changes nothing
    either: the outer block's handlers stay, and its record is kept for the code that opened it."""
    if threading.current_thread() is not threading.main_thread() or _active:
        yield _received if _active else []
        return

    def interrupt(signum: int, frame: Any) -> None:
        _received.append(signum)
        raise KeyboardInterrupt

    _received.clear()          # before the handlers: a signal that comes as they are set is kept
    previous = {signum: signal.signal(signum, interrupt) for signum in signals}
    _active.append(True)
    try:
        yield _received
    finally:
        _active.clear()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _received.clear()


def check() -> None:
    """Raise KeyboardInterrupt if a Ctrl-C or SIGTERM came during `interruptible` (its own may have been lost)."""
    if _received:
        raise KeyboardInterrupt
