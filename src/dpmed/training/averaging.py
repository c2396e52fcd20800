"""Parameter averaging: an exponential moving average (EMA) of the weights over the training iterates, released in
place of the last iterate (De, Berrada, Hayes, Smith, Balle 2022, s.3.1; Polyak and Juditsky 1992 for averaging).

Under DP-SGD the averaged weights are a function of the noisy iterates, themselves a function of the noisy gradients
the accountant already counts: post-processing, free in eps (the ledger is untouched; tests/training check it). The
average smooths out the noise of the last steps, which DP-SGD's iterates carry much more of than plain SGD's.

The decay is warmed up as De et al. do (TensorFlow's ExponentialMovingAverage with ``num_updates``): at the t-th
update (t = 0, 1, ...) the average moves by (1 - d_t) towards the current weights, d_t = min(decay, (1 + t) /
(10 + t)), so early iterates (near the random initialisation) are soon forgotten. Trainable parameters are
averaged; frozen ones (``requires_grad`` False: `dpmed.models.weights.set_trainable`) are not, and keep exactly the
values they were loaded with: a frozen layer never moves, and d a + (1 - d) p of a constant p still rounds away from p
in float32 (by up to a few 1e-8, in most entries over hundreds of updates). Buffers are not averaged either (DP-SGD
refuses models whose buffers change; the released model takes the live buffers).
"""

from __future__ import annotations

from typing import TypedDict

import torch
from torch import Tensor, nn

__all__ = ["ParameterAverage", "AverageState"]


class AverageState(TypedDict):
    """What a checkpoint keeps of an average (`ParameterAverage.state_dict`), to continue it where it stood."""

    decay: float
    updates: int
    average: list[Tensor]


class ParameterAverage:
    """EMA of ``model``'s trainable parameters: ``update()`` after each optimiser step, ``copy_to(model)`` to release
    it. Which parameters train is read once, here: freeze before averaging (as `dpmed.run` does)."""

    def __init__(self, model: nn.Module, *, decay: float) -> None:
        if not 0 < decay < 1:
            raise ValueError(f"decay must be in (0, 1), got {decay}")
        self.decay = decay
        every = list(model.parameters())
        self.n_parameters = len(every)
        self.trainable = [i for i, p in enumerate(every) if p.requires_grad]      # positions in model.parameters()
        self.params = [every[i] for i in self.trainable]
        self.average = [p.detach().clone() for p in self.params]
        self.updates = 0

    def rate(self, t: int) -> float:
        """d_t = min(decay, (1 + t) / (10 + t))."""
        return min(self.decay, (1 + t) / (10 + t))

    @torch.no_grad()
    def update(self) -> None:
        d = self.rate(self.updates)
        for avg, p in zip(self.average, self.params):
            avg.mul_(d).add_(p.detach(), alpha=1 - d)
        self.updates += 1

    @torch.no_grad()
    def copy_to(self, model: nn.Module) -> None:
        """Write the averaged weights into ``model``'s trainable parameters (the model the average was made of); its
        frozen parameters are left as they are."""
        params = list(model.parameters())
        if len(params) != self.n_parameters:
            raise ValueError("copy_to: the model has other parameters than the one averaged")
        for i, avg in zip(self.trainable, self.average):
            params[i].copy_(avg)

    def state_dict(self) -> AverageState:
        return {"decay": self.decay, "updates": self.updates, "average": [a.detach().cpu() for a in self.average]}

    def load_state_dict(self, state: AverageState) -> None:
        """Restore a saved average; one saved before frozen parameters were left out (an average of every
        parameter) is read for its trainable ones."""
        average = state["average"]
        if len(average) == self.n_parameters and len(average) != len(self.average):
            average = [average[i] for i in self.trainable]
        if state["decay"] != self.decay or len(average) != len(self.average):
            raise ValueError("the saved average was made with another decay or model")
        for avg, saved in zip(self.average, average):
            avg.copy_(saved)
        self.updates = int(state["updates"])
