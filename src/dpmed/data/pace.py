"""Progress lines of the data layer's long loops (decoding a dataset, hashing images for the overlap check): a study
of 200,000 files spends minutes there before its first step, and a silent terminal looks like a hang."""

from __future__ import annotations

import logging
import math
import time

__all__ = ["Pace", "REPORT_EVERY"]

REPORT_EVERY = 20.0     # seconds between the progress lines of a long loop (CheXpert: 224,316 files)


class Pace:
    """Progress lines of a long loop to ``log``: at most one every ``REPORT_EVERY`` seconds, none at its start or
    end, each ending with the minutes left at the rate so far."""

    def __init__(self, log: logging.Logger) -> None:
        self._log = log
        self.began = self._last = time.perf_counter()

    def again(self) -> None:
        """The next of loops paced as one (a run's validation, then test images): its time left counts from now, but
        its first line waits only out what is left of the interval since the last line, so that loops each a little
        shorter than the interval, one after another, do not all run in silence."""
        self.began = time.perf_counter()

    def log(self, share: float, message: str, *args: object) -> None:
        """``share`` of the work is done; ``message % args`` says how far."""
        now = time.perf_counter()
        if now - self._last < REPORT_EVERY or not 0 < share < 1:
            return
        self._last = now
        self._log.info(message + ", about %d min left", *args,
                       math.ceil((now - self.began) * (1 - share) / share / 60))
