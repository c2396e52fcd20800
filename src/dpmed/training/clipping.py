"""dpmed's per-example clipping engine: clipped gradient sums at about the cost of one ordinary training step.

DP-SGD needs sum_i c_i g_i with c_i = min(1, C / ||g_i||), where g_i is example i's gradient over *all*
parameters (Abadi et al. 2016). Opacus materialises every g_i ([B, *p.shape] per parameter), which costs B times the
memory of the model and far more time than a plain step. The norms and the re-weighted sum can instead be read off
what backpropagation already has, each layer's input a and output gradient g (see ``layer_rules``):

1. forward once with hooks that keep each trainable layer's input (autograd keeps it anyway);
2. backward once on the *summed* loss, asking autograd only for layer-output gradients, never parameter
   gradients; as each layer's output gradient arrives, compute its per-example squared norm, by a ghost norm or a
   materialised per-example gradient, whichever is cheaper at this layer and input size (mixed ghost clipping,
   Bu et al. 2022; Goodfellow 2015; Li et al. 2021);
3. c_i from the total norm, then each layer's clipped sum as one weight-gradient computation with g scaled by c
   ("book-keeping", Bu et al. 2023): no second backward, no [B, 11M] tensor.

Opacus 1.6's hooks mode materialises every g_i and its ghost mode backpropagates twice; what this engine's step
costs beside both, machine by machine, is measured in benchmarks/RESULTS.md, "DP-SGD step cost".

It is exact, not an approximation: the tests compare it with an explicit per-example autograd loop in float64.
The assumptions that make it exact are checked, not hoped for: every trainable parameter belongs to a layer type
with a rule and is one that rule computes (else PrivacyError naming the module), no BatchNorm (it mixes examples),
every parameter is used only inside its own layer's forward (a graph walk counts its uses; weight tying or a
parameter read in a custom forward is an error), every trainable layer's input and output have one row per
example, batch first (a layer on x.reshape(B * T, d) would have its rows clipped, not its examples; checked by
shape, so a layer on a sequence-first [T, B, d] with T = B would pass unseen), and no output where backward ends
(a layer whose input needs no gradient) is modified in place (its gradient would never arrive). The loss must be a
sum over examples, as for ``DpSgdStep``.

User-level clipping (``groups``; McMahan et al. 2018, "Learning differentially private recurrent language models"):
where the patient is the unit of privacy, each patient's gradients over their images are summed and that *sum* is
clipped, sum_G c_G sum_{i in G} g_i with c_G from ||sum_{i in G} g_i||. Step 3 is unchanged, each example weighted
by its group's factor; only the norms differ, and the norm of a group's sum is not a function of its examples'
norms. Examples alone in their group keep the route above. For the groups with several images, each layer takes
the cheaper of two exact routes:
* ghost: ||sum_{i in G} g_i||^2 = sum_i ||g_i||^2 + 2 sum_{i<j in G} <g_i, g_j>, every term a ghost norm or a ghost
  dot product of a pair of examples (``layer_rules``): cheap where the ghost norm is (deep layers: few positions,
  many parameters), but the pairs grow with the square of a group's size;
* materialised: the examples' per-example gradients, summed per group (index_add) and normed, a few groups at a
  time so that memory stays bounded, then dropped: grows linearly with a group's size.
A batch of singletons costs what image-level clipping costs; multi-image groups add the pairs' dot products or the
materialised gradients at the layers where the ghost norm was taken.

A group's sum that cancels is where rounding matters: two near-identical films of one patient with opposite labels,
near the decision boundary, have gradients g and -g + e, and the pair route's ||g||^2 + ||g - e||^2 - 2 <g, g - e>
is then the difference of two large numbers. In float32 it was off by about 1e-6 of (||g|| + ||g - e||)^2, and the
clipped contributions of tests/training/test_patient_clipping.py's patients whose gradients cancel to about 1/1000
of their norms reached up to 2.1 C; so the pair route is taken in float64, as every ghost norm is (`_wide`). What
stays float32 is what that does not widen: the materialised route norms the float32 sum of the group's per-example
gradients, and every route book-keeps the clipped sum from the float32 (a, g), rounded by about 1e-7 of sum_i
||g_i||, not of ||sum_i g_i||: without a slack those patients still passed C by up to 4.6e-5 (benchmarks/RESULTS.md,
"A ghost norm's rounding"). So a multi-image group's norm is taken as sqrt(||sum_i g_i||^2 + s (sum_i ||g_i||)^2), s
= GROUP_ROUNDING_SLACK times the gradients' machine epsilon (2^-16 in float32, 2^-45 in float64): never below the
true norm while the rounding stays below s, and above it by a relative s R^2 / 2 for a group whose images' norms add
to R times its sum's. In float32 a 2-image group of unrelated gradients (R = 1.4) is clipped at 0.999985 C, one that
cancels to R = 40 at 0.988 C; one whose sum cancels to a fraction f < 1/256 of its images' norms is normed mostly by
the slack (sum_i ||g_i||, the triangle inequality's bound on its sum, over 256) and contributes about 256 f C.
Singletons keep the image-level route and its norms, which sum nothing.
"""

from __future__ import annotations

import contextlib
import functools
import operator
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Iterator, Sequence

import torch
from torch import Tensor, nn

from dpmed.errors import PrivacyError
from dpmed.training.grouping import Grouping
from dpmed.training.layer_rules import LAYER_RULES, BoundGhost, BoundRule
from dpmed.training.process_setting import ProcessSetting

__all__ = ["GhostClipper", "clip_factors", "finite_rows", "gradient_sum", "refuse_batch_norm", "ROUTES"]

ROUTES = ("mixed", "ghost", "materialised")

# Times the dtype's machine epsilon and (sum_i ||g_i||)^2, added to a multi-image group's squared norm (L1: times
# sum_i ||g_i||_1, to its norm) to cover the rounding of a sum that cancels (module docstring). In float32 2^-16:
# 23 times the largest rounding of float32 pair dot products (6.5e-7 of (sum_i ||g_i||)^2, tests/training/
# test_patient_clipping.py's cancelling patients), which are float64 now; what it covers since, the float32 group sums
# and book-kept sum, let those patients pass C by 4.6e-5 without it, by nothing with it, and rounds the registered
# models' patients by at most 2.1e-7 of (sum_i ||g_i||)^2 (benchmarks/RESULTS.md). Larger is safer and clips
# patients whose images' gradients partly cancel harder than C asks (2^-12 clipped R = 40 at 0.85 C).
GROUP_ROUNDING_SLACK = 2.0 ** 7


def clip_factors(norms: Tensor, max_grad_norm: float) -> Tensor:
    """c_i = min(1, C / (||g_i|| + 1e-6)): Opacus's clip factor, shared by every engine so that they agree; 0 for a
    non-finite norm (an overflowing gradient), whose unit the engines then leave out of the sum (`finite_rows`)."""
    factors = (max_grad_norm / (norms + 1e-6)).clamp(max=1.0)
    return torch.where(torch.isfinite(norms), factors, torch.zeros_like(factors))


def finite_rows(t: Tensor, keep: Tensor) -> Tensor:
    """``t`` [B, ...] with the rows where ``keep`` [B] is False set to zero.

    Why: a unit whose gradient overflowed has clip factor 0, but 0 times inf is nan, and one nan in the clipped sum
    makes the whole noised update nan. Whether the release is nan would then depend on whether that one unit was
    sampled: its influence would not be bounded by C. With its rows zeroed it contributes nothing, within C."""
    return torch.where(keep.view(-1, *[1] * (t.dim() - 1)), t, torch.zeros((), dtype=t.dtype, device=t.device))


def gradient_sum(model: nn.Module, params: Sequence[Tensor], x: Tensor, y: Tensor, *,
                 loss_fn: Callable[[Tensor, Tensor], Tensor]) -> list[Tensor]:
    """[sum_i g_i per parameter of ``params``]: ordinary autograd on the summed loss of x, y, with no per-example
    norm and no clip, for the slices of a unit that is clipped as a whole once they are added up
    (`DpSgdStep._clipped_unit`). No factor zeroes an example whose gradient overflows: it leaves the sum non-finite,
    so that its whole unit contributes nothing, as through the engines' clip (`finite_rows`). The backward runs in
    full float32 on a GPU, as the engine's (`_without_tf32`)."""
    with torch.enable_grad():
        loss = loss_fn(model(x.detach()), y)                                        # scalar
    if not loss.requires_grad:
        raise PrivacyError("the loss does not depend on any trainable parameter")
    with _without_tf32():
        grads = torch.autograd.grad(loss, params, allow_unused=True)
    return [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads)]


def refuse_batch_norm(model: nn.Module) -> None:
    """PrivacyError for any BatchNorm in ``model``, trainable or frozen: every engine refuses it, with this reason."""
    for name, module in model.named_modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            raise PrivacyError(f"module {name or 'model'!r} is {type(module).__name__}: BatchNorm normalises with "
                               "batch statistics in train mode, so one example's output depends on the others and "
                               "per-example clipping bounds nothing, frozen or not, and it writes running statistics "
                               "of the private batch into the model without noise. Use GroupNorm (the registered "
                               "models do)")


@dataclass(frozen=True)
class _Layer:
    name: str
    module: nn.Module
    rule: BoundRule                            # the rule of the layer's type, bound to it
    names: frozenset[str]                      # the layer's trainable parameter names ("weight", "bias")


@dataclass
class _Call:
    """One forward call of a layer: its input until the output gradient arrives, the input's version then, and
    whether the call is in the graph (not under no_grad: only then does it use the layer's parameters there)."""

    layer: int
    a: Tensor | None
    version: int
    graphed: bool


@dataclass(frozen=True)
class _Kept:
    """A layer call's input and output gradient, kept until the clip factors are known, and the ghost route whose
    ``weighted_sum`` then book-keeps the layer's clipped sum from them."""

    a: Tensor
    g: Tensor
    ghost: BoundGhost


@dataclass
class _LayerState:
    """What step 2 leaves per layer: its share of the norms, and (a, g) for the book-kept sum or per-example grads."""

    partial: Tensor | None = None
    kept: _Kept | None = None
    per_example: dict[str, Tensor] = field(default_factory=dict)


def _trainable_layers(model: nn.Module) -> list[_Layer]:
    refuse_batch_norm(model)
    layers = []
    for name, module in model.named_modules():
        trainable = frozenset(n for n, p in module.named_parameters(recurse=False) if p.requires_grad)
        if not trainable:
            continue
        rule = LAYER_RULES.get(type(module))
        if rule is None:
            known = ", ".join(sorted(t.__name__ for t in LAYER_RULES))
            raise PrivacyError(f"module {name or 'model'!r} ({type(module).__name__}) has trainable parameters "
                               f"{sorted(trainable)} but dpmed's clipping engine has no per-example rule for its "
                               f"type (rules exist for: {known}). Freeze it, replace it, or use the Opacus engine "
                               "(training.dp_engine: opacus) if Opacus supports it")
        unknown = sorted(trainable - rule.parameters)
        if unknown:
            raise PrivacyError(f"module {name or 'model'!r} ({type(module).__name__}) has trainable parameters "
                               f"{unknown} but dpmed's clipping engine has no per-example rule for them: its rule for "
                               f"{type(module).__name__} computes {sorted(rule.parameters)} only, so they would get "
                               "a clipped sum of zero and train on noise alone (weight_norm registers weight_g and "
                               "weight_v this way). Freeze them, or remove them from the layer")
        bound = rule.bind(module)
        bound.check()
        layers.append(_Layer(name, module, bound, trainable))
    return layers


class _Tape:
    """The per-chunk record: forward hooks add calls, output-gradient hooks turn them into norms and sums."""

    def __init__(self, layers: list[_Layer], norm_order: int, route: str, batch: int,
                 grouping: Grouping | None = None) -> None:
        self.layers = layers
        self.norm_order = norm_order
        self.route = route
        self.batch = batch                     # rows fed to the model: one per example (augmented copies included)
        self.grouping = grouping               # None: every example is its own unit (image-level clipping)
        self.calls: list[list[_Call]] = [[] for _ in layers]
        self.sources: list[Tensor] = []        # outputs of calls whose input needs no gradient: where backward ends
        self.source_versions: list[tuple[int, int]] = []     # (layer, the output's version) per source
        self.states = [_LayerState() for _ in layers]
        self.example_parts: Tensor | None = None   # with groups: each example's own norm part [B], all layers
        self.eps = 0.0                             # the largest machine epsilon among the layers' gradients

    def _add_example_parts(self, parts: Tensor, rows: Tensor | None = None) -> None:
        """Add one layer's share of each example's own norm (``rows``: those examples; None: all B), with groups
        only: the bound that `norms` takes the group rounding slack from."""
        if self.example_parts is None:
            self.example_parts = parts.new_zeros(self.batch, dtype=torch.float64)
        if rows is None:
            self.example_parts += parts
        else:
            self.example_parts.index_add_(0, rows, parts.double())

    def forward_hook(self, index: int) -> Callable:
        def hook(module: nn.Module, inputs: tuple, output: Tensor) -> None:
            if not inputs:                              # a hook sees positional inputs only: layer(input=x) has none
                raise PrivacyError(f"module {self.layers[index].name!r} was called with its input by keyword: the "
                                   "clipping engine sees positional inputs only; call it as layer(x)")
            a = inputs[0]
            if not isinstance(a, Tensor) or not isinstance(output, Tensor):
                raise PrivacyError(f"module {self.layers[index].name!r}: the clipping engine needs a tensor input "
                                   "and output")
            self._check_batch_first(index, module, a, output)
            call = _Call(index, a.detach(), a._version, output.requires_grad)
            self.calls[index].append(call)
            if not output.requires_grad:
                return
            output.register_hook(lambda g: self._on_output_grad(call, g))
            if not a.requires_grad:
                self.sources.append(output)
                self.source_versions.append((index, output._version))
        return hook

    def _check_batch_first(self, index: int, module: nn.Module, a: Tensor, output: Tensor) -> None:
        """PrivacyError unless the layer's input and output have one row per example, batch first.

        Why: the rules read row i of a and g as example i. A layer applied to a reshape that folds another dimension
        into the batch (a Linear on x.reshape(B * T, d), a conv per channel on [B * C, 1, H, W]) has B * T rows: its
        rules would clip each row, a position or channel, instead of each example, so one example's clipped
        contribution could reach T C, not C (and with B > 1 the shapes would clash deep inside a rule)."""
        for what, t in (("input", a), ("output", output)):
            if t.dim() == 0 or t.shape[0] != self.batch:
                name = self.layers[index].name or "model"
                rows = "a scalar" if t.dim() == 0 else f"{t.shape[0]} rows"
                raise PrivacyError(f"module {name!r} ({type(module).__name__}) has {rows} in its {what} "
                                   f"{tuple(t.shape)} where the model's input has {self.batch}, one per example: "
                                   "per-example clipping needs every trainable layer's input and output batch-first, "
                                   "one row per example, else it clips rows, not examples. Keep the batch dimension "
                                   "first and apart (apply the layer to [B, T, d], not to a reshape to [B * T, d])")

    def check_sources(self) -> None:
        """PrivacyError if the output of a layer whose input needs no gradient was modified in place since the layer
        returned it.

        Why: backward ends at these outputs (``autograd.grad(loss, sources)``). After an in-place op (ReLU(inplace=
        True), h += 1) the tensor stands for the modified value, so backward stops there and the gradient of the
        layer's own output, hence its per-example gradients, never arrive: the layer would get a zero clipped sum and
        silently never train. (An in-place op on any other layer's output is harmless: its hook still receives the
        gradient of the output the layer returned.)"""
        for source, (index, version) in zip(self.sources, self.source_versions):
            if source._version != version:
                raise PrivacyError(f"the output of module {self.layers[index].name!r} was modified in place after "
                                   "the layer returned it (ReLU(inplace=True), +=, ...); its input needs no "
                                   "gradient, so backward ends at that output and the layer's per-example gradients "
                                   "cannot be recovered (it would never train). Remove the in-place operation")

    def _on_output_grad(self, call: _Call, g: Tensor) -> None:
        layer, state = self.layers[call.layer], self.states[call.layer]
        a, call.a = call.a, None
        if a is None:
            raise RuntimeError(f"module {layer.name!r}: a second output gradient for one call of it")
        if a._version != call.version:
            raise PrivacyError(f"the input of module {layer.name!r} was modified in place after the layer used it; "
                               "its per-example gradients cannot be recovered. Remove the in-place operation")
        rule, ghost = layer.rule, layer.rule.ghost
        self.eps = max(self.eps, torch.finfo(g.dtype).eps)
        if ghost is not None and self._use_ghost(call.layer, ghost, a, g):
            if self.grouping is None:
                state.partial = ghost.sq_norms(_wide(a), _wide(g), layer.names)         # [B], float64
            else:
                state.partial = self._grouped_ghost_sq_norms(layer, ghost, self.grouping, a, g)   # [P]
            state.kept = _Kept(a, g, ghost)
            return
        # Materialised: also the route for a layer called several times (its per-example gradient is the sum over
        # calls) and for L1 norms, which have no ghost form.
        per_example = rule.per_example(a, g, layer.names)                      # {name: [B, *p.shape]}
        if len(self.calls[call.layer]) == 1 and ghost is not None and not self._small(layer, a, g):
            # Keep whichever is smaller until the clip factors are known: here (a, g), and the clipped sum is then
            # book-kept like a ghost layer's (middle layers, where B p exceeds the activations).
            if self.grouping is None:
                state.partial = self._norm_part(per_example.values(), len(g))      # [B]
            else:
                state.partial = self._norm_part([self.grouping.sum(t) for t in per_example.values()],
                                                self.grouping.count)               # [P]
                self._add_example_parts(self._norm_part(per_example.values(), len(g)))
            state.kept = _Kept(a, g, ghost)
            return
        for name, t in per_example.items():
            state.per_example[name] = state.per_example[name] + t if name in state.per_example else t

    def _grouped_ghost_sq_norms(self, layer: _Layer, ghost: BoundGhost, grouping: Grouping, a: Tensor,
                                g: Tensor) -> Tensor:
        """This layer's share of ||sum_{i in G} g_i||^2 per group, [P], at a layer that takes ghost norms: for the
        multi-image groups, ghost dot products of their pairs or their materialised per-example gradients."""
        sq = g.new_zeros(grouping.count, dtype=torch.float64)
        if self._pairs_cheaper(layer, ghost, grouping, a, g):
            # sum_i ||g_i||^2 + 2 sum_{i<j in G} <g_i, g_j>, per group, in float64 as every ghost norm (`_wide`)
            wa, wg = _wide(a), _wide(g)
            own = ghost.sq_norms(wa, wg, layer.names)                                            # [B]
            self._add_example_parts(own)
            sq.index_add_(0, grouping.index, own)
            dots = ghost.pair_dots(wa, wg, layer.names, grouping.pair_left, grouping.pair_right)  # [R]
            return sq.index_add_(0, grouping.pair_group, 2 * dots)
        lone = grouping.lone
        if len(lone):
            # [B1]; no bound: no slack for a lone one
            own = ghost.sq_norms(_wide(a[lone]), _wide(g[lone]), layer.names)
            sq.index_add_(0, grouping.index[lone], own)
        params = dict(layer.module.named_parameters(recurse=False))
        elements = sum(params[n].numel() for n in layer.names)
        for rows, local, ids in grouping.shared_chunks(elements):
            per_example = layer.rule.per_example(a[rows], g[rows], layer.names)     # {name: [m, *p.shape]}
            self._add_example_parts(self._norm_part(per_example.values(), len(rows)), rows)
            sums = [t.new_zeros(len(ids), *t.shape[1:]).index_add_(0, local, t) for t in per_example.values()]
            sq.index_add_(0, ids, self._norm_part(sums, len(ids)).double())
        return sq

    def _pairs_cheaper(self, layer: _Layer, ghost: BoundGhost, grouping: Grouping, a: Tensor, g: Tensor) -> bool:
        """Ghost dot products of the pairs within groups, or materialised per-example gradients, for the examples
        of multi-image groups (M examples, R pairs): (M + R) ghost costs against M materialised ones."""
        if self.route != "mixed":
            return self.route == "ghost"
        shared, pairs = len(grouping.shared), len(grouping.pair_left)
        return (shared + pairs) * _ghost_cost(ghost, a, g) < shared * layer.rule.materialised_cost(a, g)

    @staticmethod
    def _small(layer: _Layer, a: Tensor, g: Tensor) -> bool:
        """Whether the per-example gradients ([B, p]) are no larger than the layer's input and output gradient."""
        params = dict(layer.module.named_parameters(recurse=False))
        return len(g) * sum(params[n].numel() for n in layer.names) <= a.numel() + g.numel()

    def _use_ghost(self, index: int, ghost: BoundGhost, a: Tensor, g: Tensor) -> bool:
        """Ghost norm or materialised per-example gradient for this call (Bu et al. 2022's mixed rule, refined).

        If the per-example gradients are small (B p <= |a| + |g|, early layers), materialising them is always
        cheaper: the clipped sum is then a weighted sum of them, while the ghost route still needs a weight-gradient
        pass. Otherwise both routes keep (a, g) and end in that pass, so the cheaper norm decides."""
        layer = self.layers[index]
        if self.norm_order != 2 or len(self.calls[index]) != 1:
            return False
        if self.route != "mixed":
            return self.route == "ghost"
        return not self._small(layer, a, g) and _ghost_cost(ghost, a, g) < layer.rule.materialised_cost(a, g)

    def _norm_part(self, tensors: Iterable[Tensor], batch: int) -> Tensor:
        """This layer's share of the per-example norm: sum of squares (L2) or of absolute values (L1), [B]."""
        flat = [t.reshape(batch, -1) for t in tensors]
        return functools.reduce(operator.add, (f.abs().sum(1) if self.norm_order == 1 else f.square().sum(1)
                                               for f in flat))

    def norms(self, batch: int, like: Tensor) -> Tensor:
        """Per-example norms over all parameters, [B]; with groups, norms of the per-group sums, [P]."""
        grouping = self.grouping
        if grouping is not None:
            batch = grouping.count
        total = like.new_zeros(batch, dtype=torch.float64)
        for state in self.states:
            if state.partial is not None:
                total = total + state.partial
            if state.per_example:
                tensors: Iterable[Tensor] = state.per_example.values()
                if grouping is not None:
                    self._add_example_parts(self._norm_part(tensors, self.batch))
                    tensors = [grouping.sum(t) for t in tensors]                        # [P, *p.shape]
                total = total + self._norm_part(tensors, batch)
        if grouping is not None:
            total = self._with_rounding_slack(total, grouping)
        return total if self.norm_order == 1 else total.clamp(min=0).sqrt()

    def _with_rounding_slack(self, total: Tensor, grouping: Grouping) -> Tensor:
        """The multi-image groups' norm parts [P] plus GROUP_ROUNDING_SLACK times the square (L1: the value) of
        sum_i ||g_i||, which bounds ||sum_i g_i|| (module docstring: why)."""
        if self.example_parts is None:                  # no layer's gradient arrived: every norm is 0
            return total
        own = self.example_parts.clamp(min=0)                                           # [B]
        bound = total.new_zeros(grouping.count).index_add_(
            0, grouping.index, (own if self.norm_order == 1 else own.sqrt()).to(total.dtype))   # [P]
        shared = grouping.shared_ids
        scale = GROUP_ROUNDING_SLACK * self.eps          # the gradients' dtype, whatever the loss's
        slack = scale * (bound if self.norm_order == 1 else bound.square())
        return total.index_add(0, shared, slack[shared])

    def clipped_sums(self, factors: Tensor, keep: Tensor | None = None) -> dict[int, Tensor]:
        """{id(parameter): sum_i c_i g_i} for every parameter whose layer took part in the loss; ``keep`` [B]: the
        examples whose unit's norm is finite, the others' rows zeroed first (`finite_rows`); None: all of them."""
        out: dict[int, Tensor] = {}
        for layer, state in zip(self.layers, self.states):
            params = dict(layer.module.named_parameters(recurse=False))
            if keep is not None:
                state.per_example = {n: finite_rows(t, keep) for n, t in state.per_example.items()}
                if state.kept is not None:
                    state.kept = replace(state.kept, a=finite_rows(state.kept.a, keep),
                                         g=finite_rows(state.kept.g, keep))
            kept = state.kept
            if kept is not None:
                sums = kept.ghost.weighted_sum(kept.a, kept.g, factors.to(kept.g.dtype), layer.names)
            else:
                # c^T [B, p] as one matrix-vector product: einsum adds a permute, views and a bmm per call, and on a
                # GPU each dispatched op costs host time the kernel does not (benchmarks/RESULTS.md, "On a GPU")
                sums = {n: (factors.to(t.dtype) @ t.reshape(len(t), -1)).view(t.shape[1:])
                        for n, t in state.per_example.items()}
            for n, t in sums.items():
                out[id(params[n])] = t
        return out


def _ghost_cost(ghost: BoundGhost, a: Tensor, g: Tensor) -> float:
    """A ghost norm's (or pair dot product's) cost in float32 multiply-adds, to weigh against the float32
    materialised route: the rule counts multiply-adds, and the ghost ones are float64 (`_wide`)."""
    return ghost.cost(a, g) * _wide_cost(g.device)


@functools.cache
def _wide_cost(device: torch.device) -> float:
    """What one float64 multiply-add costs in float32 ones on ``device``, read once per device.

    Why: the rules' costs were written for float32 ghost norms. On CPU a float64 matmul takes about twice float32's
    time (SIMD lanes hold half as many) and the widening copies add to it; 3 is the price that sends each layer of
    resnet9 and resnet18 measured there to its faster route (benchmarks/RESULTS.md, "The mixed route after float64
    ghost norms"). NVIDIA's full-size data-centre chips (`_FULL_RATE_FLOAT64`) run float64 at half float32's
    rate or better, taken as CPU's price; the others at 1/32 to 1/64 (unmeasured here: from the vendors' tables, not
    timed), where the ghost route is taken only where it saves far more. Read from the device's properties, not
    timed, so that the choice is the same on every run of a machine and costs nothing."""
    if device.type != "cuda":
        return 3.0
    props = torch.cuda.get_device_properties(device)
    return 3.0 if (props.major, props.minor) in _FULL_RATE_FLOAT64 else 64.0


# CUDA compute capabilities of the chips with float64 at half float32's rate or better: P100, V100, A100, H100/H200,
# B200. Not 10.3 (B300) nor 12.x (consumer Blackwell), whose float64 runs at 1/64.
_FULL_RATE_FLOAT64 = frozenset({(6, 0), (7, 0), (8, 0), (9, 0), (10, 0)})


def _wide(t: Tensor) -> Tensor:
    """A layer's input or output gradient in float64 for its ghost norm (integer inputs, an embedding's indices, as
    they are).

    Why: a ghost norm sum_{t,s} (a_t . a_s)(g_t . g_s) sums position pairs whose terms cancel where an example's
    gradient does (its positions' terms g_t a_t^T point opposite ways), so float32 rounds it by about 1e-7 of
    (sum_t ||a_t|| ||g_t||)^2, not of the norm. Where the positions' terms cancel to 1/R of that bound, the norm
    is off by about 1e-7 R^2 relative: a 3x3 convolution of 512 channels at 7 x 7 whose output gradient cancels to
    1/1000 across positions was normed 3 % short in float32, and its example passed C by as much (benchmarks/
    RESULTS.md, "A ghost norm's rounding"). Products of float32 numbers are exact in float64, whose sums round at
    2^-53: that error is 5e-10 relative there. The book-kept sum still runs on the float32 (a, g): only the norms
    widen, where they are cheap (deep layers, few positions)."""
    return t.double() if t.is_floating_point() else t


@contextlib.contextmanager
def _without_tf32() -> Iterator[None]:
    """cuDNN's convolutions in full float32 for the block, then as they were before it.

    Why: torch lets cuDNN run float32 convolutions in TF32 (10-bit mantissa) by default, on GPUs that have it. The
    per-example norms and the clipped sums come from different convolutions (a ghost norm or a grouped weight gradient
    against the book-kept weight gradient), so in TF32 they would disagree by TF32's rounding (2^-11, about 5e-4 of a
    gradient), and a unit's clipped contribution could pass C by as much: far beyond float32's rounding, and beyond
    the rounding slack of a patient whose images' gradients cancel. CUDA's float32 matmuls are full float32 unless
    a caller opts into TF32 (torch.set_float32_matmul_precision("high")), which would do the same to the ghost norms:
    dpmed never does.

    The flag is the process's: blocks of several threads (two studies of one process) are counted, and the last to
    leave restores the flag from before the first (torch's own scoped flags would let the first to leave turn TF32
    back on under the others; `ProcessSetting`)."""
    with _CUDNN_TF32.held(False):
        yield


def _write_cudnn_tf32(allowed: bool) -> None:
    torch.backends.cudnn.allow_tf32 = allowed


_CUDNN_TF32 = ProcessSetting(lambda: torch.backends.cudnn.allow_tf32, _write_cudnn_tf32)


def _check_parameter_uses(loss: Tensor, tape: _Tape, owners: dict[int, tuple[int, str]]) -> None:
    """Every trainable parameter reaches the loss only through its own layer's calls.

    A rule computes a parameter's per-example gradient from its layer's input and output; a use elsewhere (weight
    tying, a parameter read by a parent module's forward, a penalty term in the loss) would be missed. Each use of a
    parameter is one edge into its AccumulateGrad node, so more edges than calls in the graph means a use outside
    the layer (a call under no_grad adds no edge, so it cannot stand for a use elsewhere)."""
    edges: dict[int, int] = {}
    seen, stack = set(), [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for child, _ in node.next_functions:
            if child is None:
                continue
            variable = getattr(child, "variable", None)
            if variable is not None and id(variable) in owners:
                edges[id(variable)] = edges.get(id(variable), 0) + 1
            stack.append(child)
    for pid, uses in edges.items():
        index, pname = owners[pid]
        calls = sum(call.graphed for call in tape.calls[index])
        if uses > calls:
            name = tape.layers[index].name
            raise PrivacyError(f"parameter {name}.{pname} is used {uses} times but its module ran {calls} times "
                               "with gradients (not under no_grad): it is also used outside its own layer (weight "
                               "tying, or read in another module's forward), where the clipping engine cannot see its "
                               "per-example gradient. Untie it, or use the Opacus engine (training.dp_engine: opacus)")


class GhostClipper:
    """sum_i clip(g_i) for one physical batch, without per-example gradients where a ghost norm is cheaper; with
    ``groups``, sum_G clip(sum_{i in G} g_i) (user-level clipping, see the module docstring).

    norm_order 2 (Gaussian DP-SGD) uses the mixed ghost/materialised choice per layer; norm_order 1 (Laplace
    DP-SGD, L1 clipping) has no ghost form and materialises every layer's per-example gradient (still one backward).
    route: ``mixed`` (the cheaper of ghost and materialised per layer), or ``ghost`` / ``materialised`` everywhere a
    layer allows it; all three give the same sum (the tests run each), only the cost differs.
    The model is left as it was: hooks live only inside ``clipped_sum`` and no ``p.grad`` is touched.
    """

    def __init__(self, model: nn.Module, *, norm_order: int = 2, route: str = "mixed") -> None:
        if norm_order not in (1, 2):
            raise ValueError(f"norm_order must be 1 or 2, got {norm_order}")
        if route not in ROUTES:
            raise ValueError(f"route must be one of {ROUTES}, got {route!r}")
        self.model = model
        self.norm_order = norm_order
        self.route = route
        self.layers = _trainable_layers(model)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self._owners = {id(p): (i, n) for i, layer in enumerate(self.layers)
                        for n, p in layer.module.named_parameters(recurse=False) if n in layer.names}

    def clipped_sum(self, x: Tensor, y: Tensor, *, loss_fn: Callable[[Tensor, Tensor], Tensor],
                    max_grad_norm: float, groups: Tensor | None = None) -> list[Tensor]:
        """[sum_i c_i g_i per trainable parameter] for examples x [B, ...] (B >= 1), y [B, ...]; loss_fn sums.

        groups: None (each example is clipped), or the group (patient) id of each example, int [B], any integers in
        any order: then each group's summed gradient is clipped, c_i = c_G(i) from ||sum_{j in G(i)} g_j||."""
        grouping = None if groups is None else Grouping.of(groups, len(x), x.device)
        if grouping is not None and grouping.count == len(x):
            grouping = None                   # every group a single example: exactly image-level clipping
        tape = _Tape(self.layers, self.norm_order, self.route, len(x), grouping)   # len(x): every row the model sees
        handles = [layer.module.register_forward_hook(tape.forward_hook(i)) for i, layer in enumerate(self.layers)]
        try:
            with torch.enable_grad():
                loss = loss_fn(self.model(x.detach()), y)                               # scalar
            if not loss.requires_grad:
                raise PrivacyError("the loss does not depend on any trainable parameter")
            _check_parameter_uses(loss, tape, self._owners)
            tape.check_sources()
            # Gradients of the layer outputs only: autograd computes no parameter gradient, and the output hooks see
            # every layer, because each layer's output lies on a path from the loss to some source output.
            with _without_tf32():
                torch.autograd.grad(loss, tape.sources, allow_unused=True)
        finally:
            for h in handles:
                h.remove()
            tape.sources.clear()       # the outputs' hooks reference the tape: break the cycle, free memory now
        norms = tape.norms(len(x), loss)                                                # [B], or [P] by group
        factors = clip_factors(norms, max_grad_norm)
        if grouping is not None:
            factors = factors[grouping.index]                                           # [B]: c_G(i)
        finite = bool(torch.isfinite(norms).all())         # one check per chunk; the rows are zeroed only if not
        with _without_tf32():
            sums = tape.clipped_sums(factors, None if finite else factors > 0)
        tape.states.clear()
        return [sums[id(p)] if id(p) in sums else torch.zeros_like(p) for p in self.params]
