"""Privacy events: what a run released, as data.

Mechanisms and training only *describe* what they released with these frozen records; the accountants
(:mod:`dpmed.accounting.epsilon`, :mod:`dpmed.accounting.ldp`) turn them into eps. This follows Google's
dp_accounting, whose ``DpEvent`` objects separate the description of a mechanism from its analysis: a run can
save its events with every checkpoint, and anyone can recompute its eps later with another accountant.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, Union

from dpmed.accounting import _arguments

__all__ = ["PoissonGaussianEvent", "PoissonLaplaceEvent", "ShuffledBatchesEvent", "LaplaceImageEvent",
           "GaussianImageEvent", "Event", "DpSgdEvent", "ImageEvent", "event_to_dict", "event_from_dict",
           "NEIGHBOUR_LDP_IMAGE"]

# the neighbour relation of the image events' eps (`dpmed.accounting.ldp`); here, without scipy, for the local-DP
# privacy cards that name it
NEIGHBOUR_LDP_IMAGE = "any two images (local DP on the released image)"


@dataclass(frozen=True)
class PoissonGaussianEvent:
    """``steps`` steps of the Poisson-subsampled Gaussian mechanism: DP-SGD (Abadi et al. 2016).

    Each step includes every training example independently with probability ``sample_rate`` (q), clips each
    example's gradient to L2 norm C and adds N(0, (noise_multiplier * C)^2) to the sum. Under add/remove-one
    neighbours a step is the Poisson-subsampled Gaussian mechanism with sensitivity 1 and standard deviation
    ``noise_multiplier`` (sigma), which is what the accountants analyse. The accounting is only valid if the
    loader really samples this way (METHODS.md s.2).

    ``noise_multiplier = 0`` describes a non-private debug run (eps = inf); ``steps = 0`` releases nothing.
    """

    noise_multiplier: float
    sample_rate: float
    steps: int

    def __post_init__(self) -> None:
        sigma = _arguments.positive("noise_multiplier", self.noise_multiplier, allow_zero=True,
                                    hint="it is the noise std divided by the clipping norm (0: non-private debug run)")
        q = _arguments.probability("sample_rate", self.sample_rate, include_one=True,
                                   hint="use the Poisson rate q = expected batch size / N")
        steps = _arguments.count("steps", self.steps, minimum=0, hint="count optimiser steps")
        object.__setattr__(self, "noise_multiplier", sigma)
        object.__setattr__(self, "sample_rate", q)
        object.__setattr__(self, "steps", steps)


@dataclass(frozen=True)
class PoissonLaplaceEvent:
    """``steps`` steps of Laplace-noise DP-SGD: Poisson sampling at ``sample_rate``, per-example L1 clipping to C1,
    and iid Laplace(b) noise on every coordinate of the sum, with ``noise_multiplier`` = b / C1 (METHODS.md s.2,
    the "Laplacian" rows of 001_d0483fd35863b74c.txt).

    Under add/remove-one neighbours each step is the Poisson-subsampled Laplace mechanism with L1 sensitivity 1 and
    scale ``noise_multiplier``: per step (1 / noise_multiplier)-DP before subsampling.
    """

    noise_multiplier: float
    sample_rate: float
    steps: int

    def __post_init__(self) -> None:
        b = _arguments.positive("noise_multiplier", self.noise_multiplier, allow_zero=True,
                                hint="it is the Laplace scale divided by the L1 clipping norm (0: no noise)")
        q = _arguments.probability("sample_rate", self.sample_rate, include_one=True,
                                   hint="use the Poisson rate q = expected batch size / N")
        steps = _arguments.count("steps", self.steps, minimum=0, hint="count optimiser steps")
        object.__setattr__(self, "noise_multiplier", b)
        object.__setattr__(self, "sample_rate", q)
        object.__setattr__(self, "steps", steps)


@dataclass(frozen=True)
class ShuffledBatchesEvent:
    """``steps`` DP-SGD steps on fixed-size batches cut from shuffled epochs (the reproduction mode
    ``sampling: shuffle``), with ``noise`` ("gaussian" or "laplace") at ``noise_multiplier`` and batches of
    ``sample_rate`` * N examples.

    Every accountant dpmed offers assumes Poisson sampling and refuses this event: its amplification by shuffling is
    a different (and, for fixed batches, weaker-studied) analysis, and accounting it as Poisson understates eps. It
    records what ran, so that a card can show the eps it *would* have had under Poisson sampling, labelled as not
    holding (:func:`dpmed.accounting.poisson_counterpart`).
    """

    noise: str
    noise_multiplier: float
    sample_rate: float
    steps: int

    def __post_init__(self) -> None:
        if self.noise not in ("gaussian", "laplace"):
            raise ValueError(f"noise must be 'gaussian' or 'laplace', got {self.noise!r}")
        sigma = _arguments.positive("noise_multiplier", self.noise_multiplier, allow_zero=True,
                                    hint="it is the noise scale divided by the clipping norm")
        q = _arguments.probability("sample_rate", self.sample_rate, include_one=True,
                                   hint="the batch's share of the training set")
        steps = _arguments.count("steps", self.steps, minimum=0, hint="count optimiser steps")
        object.__setattr__(self, "noise_multiplier", sigma)
        object.__setattr__(self, "sample_rate", q)
        object.__setattr__(self, "steps", steps)


@dataclass(frozen=True)
class LaplaceImageEvent:
    """Local DP release of one image: iid Laplace(``scale``) noise on each of ``dimension`` values in
    [0, ``value_range``] (METHODS.md s.1, ``pixel_laplace``).

    Any two images differ by at most d * R in L1, so the release is (d R / b)-DP with respect to the whole image
    (Laplace mechanism, Dwork et al. 2006), and (R / b)-DP per pixel value. It is a *local* guarantee under a
    different neighbour relation from DP-SGD's; it never composes with a :class:`PoissonGaussianEvent`.
    """

    scale: float
    value_range: float
    dimension: int

    def __post_init__(self) -> None:
        b = _arguments.positive("scale", self.scale, hint="the Laplace scale b must be positive")
        r = _arguments.positive("value_range", self.value_range, hint="values lie in [0, R]; R = 1 for [0, 1] images")
        d = _arguments.count("dimension", self.dimension, minimum=1, hint="pass d = H * W * C of the released image")
        object.__setattr__(self, "scale", b)
        object.__setattr__(self, "value_range", r)
        object.__setattr__(self, "dimension", d)


@dataclass(frozen=True)
class GaussianImageEvent:
    """Local DP release of one image: iid N(0, ``std``^2) noise on each of ``dimension`` values in
    [0, ``value_range``] (METHODS.md s.1, ``pixel_gaussian``).

    Any two images differ by at most sqrt(d) * R in L2, so the release is the Gaussian mechanism with L2
    sensitivity sqrt(d) R: its (eps, delta) is that of noise multiplier std / (sqrt(d) R) (Balle & Wang 2018).
    """

    std: float
    value_range: float
    dimension: int

    def __post_init__(self) -> None:
        s = _arguments.positive("std", self.std, hint="the Gaussian noise standard deviation must be positive")
        r = _arguments.positive("value_range", self.value_range, hint="values lie in [0, R]; R = 1 for [0, 1] images")
        d = _arguments.count("dimension", self.dimension, minimum=1, hint="pass d = H * W * C of the released image")
        object.__setattr__(self, "std", s)
        object.__setattr__(self, "value_range", r)
        object.__setattr__(self, "dimension", d)


DpSgdEvent = Union[PoissonGaussianEvent, PoissonLaplaceEvent]
ImageEvent = Union[LaplaceImageEvent, GaussianImageEvent]
Event = Union[PoissonGaussianEvent, PoissonLaplaceEvent, ShuffledBatchesEvent, LaplaceImageEvent, GaussianImageEvent]

# The serialised "type" of each event class: one table drives both directions.
_EVENT_TYPES: dict[str, type] = {"poisson_gaussian": PoissonGaussianEvent, "poisson_laplace": PoissonLaplaceEvent,
                                 "shuffled_batches": ShuffledBatchesEvent, "laplace_image": LaplaceImageEvent,
                                 "gaussian_image": GaussianImageEvent}
_TYPE_NAMES = {cls: name for name, cls in _EVENT_TYPES.items()}


def event_to_dict(event: Event) -> dict[str, Any]:
    """A JSON-able dict of ``event`` with a ``"type"`` key; :func:`event_from_dict` inverts it exactly."""
    if type(event) not in _TYPE_NAMES:
        raise TypeError(f"event must be one of {', '.join(c.__name__ for c in _TYPE_NAMES)}, got {event!r}")
    return {"type": _TYPE_NAMES[type(event)], **dataclasses.asdict(event)}


def event_from_dict(d: Mapping[str, Any]) -> Event:
    """The event that :func:`event_to_dict` wrote; unknown types and missing or extra keys are errors."""
    if not isinstance(d, Mapping) or "type" not in d:
        raise ValueError(f"an event dict needs a 'type' key ({', '.join(_EVENT_TYPES)}), got {d!r}")
    cls = _EVENT_TYPES.get(d["type"])
    if cls is None:
        raise ValueError(f"unknown event type {d['type']!r}; known types: {', '.join(_EVENT_TYPES)}")
    fields = {f.name for f in dataclasses.fields(cls)}
    given = set(d) - {"type"}
    if given != fields:
        raise ValueError(f"event of type {d['type']!r} needs exactly the keys {sorted(fields)}; "
                         f"missing {sorted(fields - given)}, unknown {sorted(given - fields)}")
    return cls(**{name: d[name] for name in fields})
