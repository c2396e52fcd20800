"""A setting of the whole process that overlapping blocks of several threads set: torch's thread count, cuDNN's TF32.

Two studies of one process (a web service's requests, each a `run_study` in its own thread) train at once, and each
sets such a setting for its runs. Saving and restoring it per block goes wrong when the blocks overlap: the first to
leave restores the value from before it under the others still inside, and the last restores the value the first
had set. So the open blocks are counted, in order of entry: while any is open the setting is the value of the last
still open, and the last to leave restores the value from before the first.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator

__all__ = ["ProcessSetting"]


class ProcessSetting:
    """``read`` and ``write`` a process-wide value; ``held(value)`` sets it for a block, counted with the others."""

    def __init__(self, read: Callable[[], Any], write: Callable[[Any], None]) -> None:
        self._read, self._write = read, write
        self._lock = threading.Lock()
        self._open: list[list[Any]] = []     # the values of the blocks open, in order of entry
        self._before: Any = None             # the value before the first of them

    @contextlib.contextmanager
    def held(self, value: Any) -> Iterator[None]:
        with self._lock:
            if not self._open:
                self._before = self._read()
            entry = [value]   # removed by identity: removing an equal value could take another block's, leaving a
            self._open.append(entry)                                    # wrong last (counts 1, 3, 1 open)
            self._write(value)
        try:
            yield
        finally:
            with self._lock:
                self._open[:] = [e for e in self._open if e is not entry]
                self._write(self._open[-1][0] if self._open else self._before)
