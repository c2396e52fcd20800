"""Training on a model's fixed front end computed once, not once per epoch.

A model whose first stage has no parameter and treats each image alone (ScatterNet's scattering transform) maps a
training image to the same features at every step, so recomputing them for every batch repeats work: for the
PneumoniaMNIST study the scattering was most of each non-private step. Such a model offers ``fixed_features(x)`` and
``from_fixed(features)`` (``forward`` is their composition); training then computes the features of the training
set once and trains :class:`FromFixed` on them. The features are exactly those a batch would give (the transform is
computed per image), so the losses, the clipped sums and the model are the same numbers.

Not with augmentation (each step's copies are new images), nor where the features would take more than half of the
free memory (ScatterNet's are 81/16 times the images' size), shared among the runs that train at the same time
(``--workers``): then every batch is transformed as before.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Protocol, runtime_checkable

import torch
from torch import nn

from dpmed.data import pace as pacing
from dpmed.interruption import check as check_interrupt
from dpmed.memory import headroom
from dpmed.numbers import bytes_text

__all__ = ["FixedFront", "FromFixed", "precompute"]

_log = logging.getLogger(__name__)


@runtime_checkable
class FixedFront(Protocol):
    """A model with a fixed front end: ``forward(x)`` is ``from_fixed(fixed_features(x))``, and ``fixed_features``
    has no parameter and treats each image alone (module docstring)."""

    def fixed_features(self, x: torch.Tensor) -> torch.Tensor: ...

    def from_fixed(self, features: torch.Tensor) -> torch.Tensor: ...


class FromFixed(nn.Module):
    """``model`` from its fixed features on: the module training runs (its parameters are ``model``'s own)."""

    def __init__(self, model: FixedFront) -> None:
        super().__init__()
        self.model = model

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.model.from_fixed(features)


# Images of the first chunk, which times the whole: enough for a batch's rate (a single image costs several times
# its share of a batch), few enough that the line saying how long the features take comes within seconds.
_TIMING_CHUNK = 8


@torch.no_grad()
def precompute(model: nn.Module, x_all: torch.Tensor, *, device: torch.device, chunk: int,
               at_once: int = 1, label: str = "train") -> tuple[nn.Module, torch.Tensor]:
    """(the module to train, its inputs): (:class:`FromFixed`, the fixed features of ``x_all``, kept on the CPU as
    the images are) where ``model`` has a fixed front end and they fit, else (``model``, ``x_all``). ``at_once``:
    the runs that may train at the same time on this machine, this one included; each reads the same free memory
    as it starts, so each may take 1/``at_once`` of the half allowed, or N workers' features could take N halves.

    Logged, as ``label``'s, where the first chunk (at most ``_TIMING_CHUNK`` images) shows it will take longer than
    the data layer's interval between lines, and then as its long loops are (`dpmed.data.pace`): at 224 px a few
    thousand images take minutes before the first step, which a silent terminal shows as a hang; a quick one
    (``dpmed plan`` timing a few steps) says nothing. Shares of the work and times only: no count of the training
    images."""
    if not isinstance(model, FixedFront) or not len(x_all):
        return model, x_all
    first = model.fixed_features(x_all[:1].to(device))
    need = first.element_size() * first.numel() * len(x_all)
    room = headroom()
    if room is not None and need > room.ram // (2 * max(1, at_once)):
        _log.info("the fixed features would take %s, more than %s of the free memory: computed per batch",
                  bytes_text(need), "half" if at_once < 2 else f"half shared by {at_once} runs at once")
        return model, x_all
    # filled in place: a list of the chunks and then their concatenation held twice the features' size at once
    features, step = torch.empty((len(x_all), *first.shape[1:]), dtype=first.dtype), max(1, chunk)
    # a short first chunk times the rest: a whole one at 224 px kept the terminal silent for a minute or more
    starts = [0, *range(min(step, _TIMING_CHUNK), len(x_all), step)]
    pace = pacing.Pace(_log)
    for at, end in zip(starts, [*starts[1:], len(x_all)]):
        check_interrupt()          # a Ctrl-C during the transform's torch calls may be lost (`dpmed.interruption`)
        features[at:end] = model.fixed_features(x_all[at:end].to(device))
        share = end / len(x_all)
        expected = (time.perf_counter() - pace.began) / share                 # seconds for all, at this rate
        if at == 0 and share < 1 and expected > pacing.REPORT_EVERY:
            _log.info("%s: computing the fixed features of the training images once, about %d min", label,
                      math.ceil(expected / 60))
        pace.log(share, "%s: fixed features %.0f %% computed", label, 100 * share)
    return FromFixed(model), features
