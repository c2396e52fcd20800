"""What a layer rule is: the frozen info objects of :mod:`dpmed.training.layer_rules`, and what every layer family's
rule shares (the bound on transient memory, and the batch chunks that keep to it).

Shapes: B examples; a: the layer's input; g: the gradient of the layer's output, both batch-first.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable, Generic, Protocol, TypeVar

import torch
from torch import Tensor, nn

__all__ = ["Grads", "Names", "GhostRule", "LayerRule", "Rule", "BoundGhost", "BoundRule", "accept", "split_batch",
           "CHUNK_ELEMENTS", "GPU_CHUNK_ELEMENTS"]

Grads = dict[str, Tensor]
Names = frozenset[str]
M = TypeVar("M", bound=nn.Module)

# Transient memory for one chunk of unfolded patches or Gram matrices: the engine splits the batch so that no
# intermediate holds more elements than this (2^22 float32 = 16 MiB), which keeps peak memory near a plain step.
CHUNK_ELEMENTS = 1 << 22
# On a GPU the step is bound by launching many small batched products, not by memory (benchmarks/RESULTS.md, "On a
# GPU"): chunks 16 times larger there (2^26 float32 = 256 MiB, small beside a GPU's memory) cut the launches.
GPU_CHUNK_ELEMENTS = 1 << 26


@dataclass(frozen=True)
class BoundGhost:
    """A layer's ghost route with the layer bound: `GhostRule`'s functions less their first argument."""

    cost: Callable[[Tensor, Tensor], float]
    sq_norms: Callable[[Tensor, Tensor, Names], Tensor]
    weighted_sum: Callable[[Tensor, Tensor, Tensor, Names], Grads]
    pair_dots: Callable[[Tensor, Tensor, Names, Tensor, Tensor], Tensor]


@dataclass(frozen=True)
class BoundRule:
    """A layer's rule with the layer bound: `LayerRule`'s functions less their first argument. What the engine
    holds per layer, whatever the layer's type."""

    check: Callable[[], None]
    materialised_cost: Callable[[Tensor, Tensor], float]
    per_example: Callable[[Tensor, Tensor, Names], Grads]
    ghost: BoundGhost | None


@dataclass(frozen=True)
class GhostRule(Generic[M]):
    """The ghost-norm route of a layer: its cost, the per-example squared norms, and the book-kept clipped sum.

    cost(module, a, g) -> multiply-adds per example (and per pair); sq_norms(module, a, g, names) -> [B] (sum over
    the named parameters of ||grad_i p||^2); weighted_sum(module, a, g, c, names) -> {name: sum_i c_i grad_i p};
    pair_dots(module, a, g, names, left, right) -> [n] (sum over the named parameters of <grad_l p, grad_r p> for
    the n pairs of example indices (left[k], right[k])).
    """

    cost: Callable[[M, Tensor, Tensor], float]
    sq_norms: Callable[[M, Tensor, Tensor, Names], Tensor]
    weighted_sum: Callable[[M, Tensor, Tensor, Tensor, Names], Grads]
    pair_dots: Callable[[M, Tensor, Tensor, Names, Tensor, Tensor], Tensor]

    def bind(self, module: M) -> BoundGhost:
        return BoundGhost(partial(self.cost, module), partial(self.sq_norms, module),
                          partial(self.weighted_sum, module), partial(self.pair_dots, module))


@dataclass(frozen=True)
class LayerRule(Generic[M]):
    """How per-example gradients of one layer type come from (input a, output gradient g).

    layers: the layer types the rule is written for (`LAYER_RULES` maps each to it).
    check(module): raises PrivacyError for settings whose per-example gradient this rule does not compute.
    materialised_cost(module, a, g) -> multiply-adds per example of ``per_example``.
    per_example(module, a, g, names) -> {name: [B, *param.shape]} for the named trainable parameters.
    ghost: the cheaper-norm route, where one exists (not for the normalisation layers, whose per-example gradients
    are as small as their parameters).
    parameters: the parameter names the rule computes gradients of. A layer may carry others (weight_norm's weight_g
    and weight_v, a gain registered on it); the engine refuses them trainable, since no rule gives their gradient.
    """

    layers: tuple[type[M], ...]
    check: Callable[[M], None]
    materialised_cost: Callable[[M, Tensor, Tensor], float]
    per_example: Callable[[M, Tensor, Tensor, Names], Grads]
    ghost: GhostRule[M] | None = None
    parameters: Names = frozenset({"weight", "bias"})

    def bind(self, module: nn.Module) -> BoundRule:
        """This rule's functions for ``module``; TypeError if it is none of ``layers`` (its functions read
        attributes those types have)."""
        if not isinstance(module, self.layers):
            raise TypeError(f"{type(module).__name__} is none of this rule's layer types "
                            f"({', '.join(t.__name__ for t in self.layers)})")
        return BoundRule(partial(self.check, module), partial(self.materialised_cost, module),
                         partial(self.per_example, module), None if self.ghost is None else self.ghost.bind(module))


class Rule(Protocol):
    """What the engine reads of a `LayerRule`, whatever the layer type it is written for: a registry holds rules of
    several types, and only `LayerRule.bind` takes a module, checking its type."""

    @property
    def layers(self) -> tuple[type[nn.Module], ...]: ...

    @property
    def parameters(self) -> Names: ...

    def bind(self, module: nn.Module) -> BoundRule: ...


def accept(_module: nn.Module) -> None:
    """Every setting of the layer type is covered."""


def split_batch(batch: int, elements_per_example: int, device: torch.device) -> list[slice]:
    """Batch slices holding at most ``CHUNK_ELEMENTS`` elements of an intermediate (``GPU_CHUNK_ELEMENTS`` on a CUDA
    device; at least one example)."""
    bound = GPU_CHUNK_ELEMENTS if device.type == "cuda" else CHUNK_ELEMENTS
    step = max(1, bound // max(1, elements_per_example))
    return [slice(i, min(i + step, batch)) for i in range(0, batch, step)]
