"""The privacy ledger: the record of every privacy event of one run.

The ledger is saved with every checkpoint, so a resumed run continues the same record and its final eps equals
that of an uninterrupted run (METHODS.md s.3). It is immutable: recording returns a new ledger, so a checkpoint
can never hold a ledger that training mutates afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

from dpmed.accounting.events import (DpSgdEvent, Event, GaussianImageEvent, LaplaceImageEvent, PoissonGaussianEvent,
                                     PoissonLaplaceEvent, ShuffledBatchesEvent, event_from_dict, event_to_dict)

_EVENTS = (PoissonGaussianEvent, PoissonLaplaceEvent, ShuffledBatchesEvent, LaplaceImageEvent, GaussianImageEvent)
_DP_SGD_EVENTS = (PoissonGaussianEvent, PoissonLaplaceEvent)
_STEP_EVENTS = (PoissonGaussianEvent, PoissonLaplaceEvent, ShuffledBatchesEvent)   # one entry per optimiser step

__all__ = ["Ledger"]


@dataclass(frozen=True)
class Ledger:
    """The events of one run, in order.

    Consecutive DP-SGD steps with the same noise multiplier and sampling rate are one entry (their steps add),
    so recording after every step keeps a 10,000-step run a single ``PoissonGaussianEvent``. Merging is exact:
    T steps of the same mechanism are the same event as its T-fold self-composition.
    """

    events: tuple[Event, ...] = ()

    def __post_init__(self) -> None:
        events = tuple(self.events)
        for event in events:
            if not isinstance(event, _EVENTS):
                raise TypeError(f"a Ledger holds privacy events ({', '.join(c.__name__ for c in _EVENTS)}), "
                                f"got {event!r}")
        object.__setattr__(self, "events", events)

    def record(self, event: Event) -> "Ledger":
        """A new ledger with ``event`` appended (merged into the last entry when it continues it)."""
        if not isinstance(event, _EVENTS):
            raise TypeError(f"record() takes a privacy event ({', '.join(c.__name__ for c in _EVENTS)}), "
                            f"got {event!r}")
        last = self.events[-1] if self.events else None
        if (isinstance(event, _STEP_EVENTS) and type(last) is type(event)
                and replace(last, steps=0) == replace(event, steps=0)):
            return Ledger(self.events[:-1] + (replace(last, steps=last.steps + event.steps),))
        return Ledger(self.events + (event,))

    @property
    def dp_sgd_steps(self) -> int:
        """Total DP-SGD steps recorded (Poisson-sampled or on shuffled batches)."""
        return sum(e.steps for e in self.events if isinstance(e, _STEP_EVENTS))

    @property
    def has_shuffled_batches(self) -> bool:
        """Whether any step ran on shuffled fixed-size batches, which no accountant covers."""
        return any(isinstance(e, ShuffledBatchesEvent) for e in self.events)

    @property
    def dp_sgd_events(self) -> tuple[DpSgdEvent, ...]:
        """The DP-SGD entries (Gaussian or Laplace noise), in order."""
        return tuple(e for e in self.events if isinstance(e, _DP_SGD_EVENTS))

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form; ``json.dumps`` writes floats with ``repr``, so a round trip is exact."""
        return {"events": [event_to_dict(e) for e in self.events]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Ledger":
        """The ledger that :meth:`to_dict` wrote."""
        if not isinstance(d, Mapping) or set(d) != {"events"}:
            raise ValueError(f"a ledger dict has exactly one key, 'events' (a list of event dicts); got {d!r}")
        return cls(tuple(event_from_dict(e) for e in d["events"]))
