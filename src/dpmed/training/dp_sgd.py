"""One DP-SGD step (Abadi et al. 2016, Algorithm 1): per-example clipping, then noise on the clipped sum.

An *engine* computes the clipped sum: ``dpmed`` (default; `dpmed.training.clipping`, ghost norms and book-keeping,
no per-example gradients where they are not needed) or ``opacus`` (Opacus's GradSampleModule materialises every
per-example gradient with backward hooks). Both give the same sum up to float rounding (tests/training). Summing and
noise are done here, once for both, so that the step is explicit and exactly what the accountant assumes:

    g_sum = sum_i  g_i * min(1, C / ||g_i||_2)            (per-example L2 clip to C, over all parameters)
    g     = (g_sum + N(0, (sigma C)^2 I)) / (q N)          (noise on the sum, divided by the expected batch size)

With ``groups`` (the patient as the unit of privacy, METHODS.md s.2b; McMahan et al. 2018) each group's summed
gradient is clipped instead, g_sum = sum_G clip(sum_{i in G} g_i), and q N is the expected number of groups per
batch. Whatever the engine, a step that changes a buffer of the model is refused: buffers are released with the
model but receive no noise.

Dividing by the *expected* batch size q N, not the realised one, keeps the sensitivity of each step at C / (q N);
dividing by the realised size would make the update depend on whether an example is present in two ways. The
physical batch size only chunks the forward and backward passes for memory; the clipped sum is the same. No pass takes
more examples (augmented copies counted), not even for a group that has more: its summed gradient is accumulated over
slices and clipped once (`DpSgdStep._clipped_unit`).

With ``noise="laplace"`` (the "Laplacian" DP-SGD of 001_d0483fd35863b74c.txt, METHODS.md s.2) each example is
clipped in L1 to C and iid Laplace(sigma C) noise is added per coordinate: the L1 sensitivity of the sum is C, so
each step is the Laplace mechanism with scale sigma in units of C.

Noise comes from the run's secret noise stream (`dpmed.randomness`: AES-CTR keyed from OS entropy, fresh per
run), never from the public study seed: a noise that anyone can regenerate, or that two runs share, can be subtracted.
A cryptographic generator costs more than torch's own: a step's noise is drawn in blocks on several threads while the
clipped sum is computed (`dpmed.training.noise`), the same draws whatever the number of threads, so the stream and a
resumed run are unchanged.
"""

from __future__ import annotations

import functools
import math
import operator
import warnings
from concurrent.futures import ThreadPoolExecutor
from itertools import chain
from typing import Callable, Iterator

import numpy as np
import torch
from torch import Tensor, nn
from torch.profiler import record_function

from dpmed.errors import PrivacyError
from dpmed.names import DP_ENGINES, check_registry
from dpmed.training.augmentation import Copies
from dpmed.training.clipping import GhostClipper, clip_factors, finite_rows, gradient_sum, refuse_batch_norm
from dpmed.training.grouping import group_index
from dpmed.training.noise import NoiseBuffer, block_keys, block_words, fill_noise, noise_workers

__all__ = ["DpSgdStep", "OpacusClipper", "CLIPPING_ENGINES", "physical_chunks"]


def _refuse_opacus_gaps(model: nn.Module) -> None:
    """Layers whose per-example gradients Opacus 1.6 computes wrongly (its convolution sampler pads with zeros
    whatever the padding mode; its embedding sampler gives the padding row a gradient), so that the clipped sum would
    not be the model's gradient, or not at all (its LayerNorm sampler reads the bias of a LayerNorm(bias=False) and
    crashes). dpmed's engine handles all three (training.dp_engine: dpmed)."""
    wrongly = "computes its per-example gradients wrongly"
    for name, module in model.named_modules():
        if isinstance(module, nn.modules.conv._ConvNd) and module.padding_mode != "zeros":
            what, fault = f"padding_mode {module.padding_mode!r}", wrongly
        elif isinstance(module, nn.Embedding) and module.padding_idx is not None:
            what, fault = f"padding_idx {module.padding_idx}", wrongly
        elif isinstance(module, nn.LayerNorm) and module.weight is not None and module.bias is None:
            what, fault = "bias=False", "cannot compute its per-example gradients"
        else:
            continue
        if any(p.requires_grad for p in module.parameters(recurse=False)):
            raise PrivacyError(f"module {name or 'model'!r} ({type(module).__name__}, {what}): Opacus {fault}, so "
                               "the clipped sum would not be the model's gradient; use the dpmed engine "
                               "(training.dp_engine: dpmed), which handles it")


class OpacusClipper:
    """sum_i clip(g_i) for one physical batch from per-example gradients materialised by Opacus's hooks; with
    ``groups``, sum_G clip(sum_{i in G} g_i) from the per-example gradients summed per group.

    Opacus's GradSampleModule hooks every trainable layer; the hooks are held only inside ``clipped_sum``, as dpmed's
    engine holds its own, so the model is left as it was: hooks held for the clipper's lifetime (Opacus's design) ran
    in every later use of the trained model, and a backward through it with its parameters frozen (the imprint
    attack's) failed inside them. BatchNorm is refused, as by dpmed's engine: Opacus would clip its per-example
    gradients, but its output mixes the examples of the batch, trainable or frozen."""

    def __init__(self, model: nn.Module, *, norm_order: int = 2) -> None:
        refuse_batch_norm(model)
        _refuse_opacus_gaps(model)
        from opacus import GradSampleModule   # here: the default engine never needs Opacus, whose import takes seconds

        self.model = model
        self.module = GradSampleModule(model, batch_first=True, loss_reduction="sum")   # validates, and hooks
        self.module.remove_hooks()
        self.hooked = list(self.module.iterate_submodules(model))     # the modules whose hooks keep state
        trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        self.names, self.params = [n for n, _ in trainable], [p for _, p in trainable]
        self.norm_order = norm_order

    def clipped_sum(self, x: Tensor, y: Tensor, *, loss_fn: Callable[[Tensor, Tensor], Tensor],
                    max_grad_norm: float, groups: Tensor | None = None) -> list[Tensor]:
        self.module.add_hooks(loss_reduction="sum", batch_first=True)
        try:
            loss = loss_fn(self.module(x), y)
            with warnings.catch_warnings():
                # Opacus's hooks on the first layer fire although the images need no gradient; torch warns about
                # that case, which is expected here and changes nothing. Scoped to this call, this message only.
                warnings.filterwarnings("ignore", message="Full backward hook is firing", category=UserWarning)
                loss.backward()
            return self._clip(x, max_grad_norm, groups)
        finally:
            self.module.remove_hooks()
            self._forget()

    def _forget(self) -> None:
        """Drop what Opacus's hooks keep from one call to the next, however the call ended: a call that failed (out
        of memory, a refusal) left its batch's activations on the layers it had reached, their forward counts
        raised, per-example gradients made or half made and ``p.grad`` holding the batch's gradient unclipped and
        unnoised. Left there, the next call of the clipper (a caller retrying the step) failed however it was fed:
        counts that never fell back to 0 left it no per-example gradients, an old one beside a new made a list of
        them, and the old activations held their memory."""
        # set and popped in __dict__, where Opacus keeps them (torch's types declare none of them): hasattr on a
        # module goes through nn.Module.__getattr__, which raises for a name it lacks, about ten times the cost per
        # layer
        for p in self.params:
            p.grad = None
            p.__dict__.update(grad_sample=None, _forward_counter=0)
            p.__dict__.pop("_current_grad_sample", None)
        for module in self.hooked:
            module.__dict__.pop("activations", None)
            module.__dict__.pop("max_batch_len", None)

    def _clip(self, x: Tensor, max_grad_norm: float, groups: Tensor | None) -> list[Tensor]:
        """The clipped sum from the per-example gradients the hooks left on the parameters."""
        sampled: list[Tensor | None] = [p.__dict__["grad_sample"] for p in self.params]   # each [b, *p.shape]
        grads: list[Tensor] = []
        for name, g in zip(self.names, sampled):
            # Opacus reads a layer's rows as examples, as dpmed's engine does (`clipping._Tape._check_batch_first`):
            # a layer on x.reshape(B * T, d) would be clipped per row, one example moving the sum by up to T C.
            if g is None or g.shape[0] != len(x):
                raise PrivacyError(f"parameter {name!r}: Opacus computed {'no' if g is None else g.shape[0]} "
                                   f"per-example gradients for the {len(x)} examples of the batch: per-example "
                                   "clipping needs every trainable layer's input batch-first, one row per example")
            grads.append(g)
        if groups is not None:
            index, count = group_index(groups.to(x.device), len(x))
            if count < len(x):      # else every group is one example: image-level clipping as it stands
                grads = [g.new_zeros(count, *g.shape[1:]).index_add_(0, index, g) for g in grads]   # [P, *p.shape]
        o = self.norm_order   # per-example L2 (Gaussian) or L1 (Laplace) norm over all parameters
        # Summed as dpmed's engine sums them (`clipping._Tape._norm_part`): torch's sum is cascaded, its float32 norm
        # is not, and fell short of a row of 2.6 million coordinates' true norm by 1e-5 (L2) to 9e-4 (L1), the
        # clipped example passing C by as much (in float64 the norm would copy the row at twice its size).
        parts = functools.reduce(operator.add, (g.flatten(1).abs().sum(1) if o == 1 else g.flatten(1).square().sum(1)
                                                for g in grads))                                           # [b]
        norms = parts if o == 1 else parts.sqrt()
        factor = clip_factors(norms, max_grad_norm)
        if not bool(torch.isfinite(norms).all()):            # an overflowing unit contributes nothing (finite_rows)
            grads = [finite_rows(g, factor > 0) for g in grads]
        return [torch.einsum("b,b...->...", factor, g) for g in grads]


# name -> clipper class; every engine takes (model, *, norm_order), keeps it as ``.model`` and offers
# clipped_sum(x, y, *, loss_fn, max_grad_norm, groups=None). The study file picks one with training.dp_engine.
CLIPPING_ENGINES: dict[str, Callable[..., GhostClipper | OpacusClipper]] = {
    "dpmed": GhostClipper,
    "opacus": OpacusClipper,
}
check_registry("clipping engine", CLIPPING_ENGINES, DP_ENGINES)


def _buffer_values(model: nn.Module) -> dict[str, Tensor]:
    """A copy of every buffer, to compare after a step. Values, not ``_version`` counters: in torch 2.14 an
    InstanceNorm's running statistics bump their counters, but BatchNorm's kernel writes its running mean and
    variance without bumping them, and a write through ``.data`` never does."""
    return {name: b.clone() for name, b in model.named_buffers()}


def _refuse_changed_buffers(model: nn.Module, before: dict[str, Tensor]) -> None:
    """PrivacyError naming the module and buffer a DP step changed (or added, or removed)."""
    after = dict(model.named_buffers())
    for name in sorted(before.keys() | after.keys()):
        old, new = before.get(name), after.get(name)
        if (old is not None and new is not None and old.shape == new.shape and old.dtype == new.dtype
                and (torch.equal(old, new) or (old.is_floating_point()
                                               and torch.allclose(old, new, rtol=0, atol=0, equal_nan=True)))):
            continue
        owner_name, _, buffer = name.rpartition(".")
        owner = dict(model.named_modules()).get(owner_name)
        raise PrivacyError(f"module {owner_name or 'model'!r} ({type(owner).__name__}) changed its buffer {buffer!r} "
                           "during a DP-SGD step: buffers are released with the model but receive no noise, so what "
                           "the step wrote there (a running statistic of the private batch, say) would be released "
                           "without privacy. Use a module that keeps no running statistics (GroupNorm, or "
                           "InstanceNorm with track_running_stats=False), or one whose buffers stay constant")


def physical_chunks(x: Tensor | Copies, y: Tensor, size: int) -> Iterator[tuple[Tensor, Tensor]]:
    """(x, y) in slices of at most ``size`` examples, for memory only; a size above the batch is the batch
    (torch.split takes no 10**23). An empty batch has no slice, whether x is a tensor or its copies (torch.split
    would give a tensor one empty slice, which dpmed's clipping engine cannot take): an empty Poisson batch's clipped
    sum is zero, and the step still adds its noise."""
    if not len(x):
        return iter(())
    size = min(size, len(x))
    return zip(x.split(size), y.split(size))


def _group_chunks(groups: Tensor, batch: int, size: int) -> tuple[list[Tensor], list[Tensor]]:
    """(chunks, large): the example indices of each physical chunk [n_k], whole groups of at most ``size`` examples
    in all, each group's examples contiguous; and those of each group with more than ``size`` examples, which no chunk
    can hold whole (`DpSgdStep._clipped_unit` takes it in slices)."""
    index, _ = group_index(groups, batch)
    sizes = torch.bincount(index)                                               # [P], every group non-empty
    size = min(size, batch)                   # a count above the batch is the batch (torch compares no 10**23)
    order = torch.argsort(index, stable=True)                                   # examples group by group
    alone = sizes[index[order]] > size                                          # in a group larger than a chunk
    large = list(order[alone].split(sizes[sizes > size].tolist()))
    order = order[~alone]
    chunks, start, filled = [], 0, 0
    for k in sizes[sizes <= size].tolist():                                     # group sizes, in that order
        if filled + k > size:
            chunks.append(order[start:start + filled])
            start, filled = start + filled, 0
        filled += k
    if filled:
        chunks.append(order[start:start + filled])
    return chunks, large


class DpSgdStep:
    """Clip, sum and noise per-example gradients of ``model``; leaves the noisy mean gradient in ``p.grad``.

    max_grad_norm may be ``math.inf`` (no clipping) and noise_multiplier 0 (no noise): then the step is plain
    minibatch SGD on the sum divided by q N, which the tests check against ordinary autograd.
    """

    def __init__(self, model: nn.Module, *, loss_fn: Callable[[Tensor, Tensor], Tensor], max_grad_norm: float,
                 noise_multiplier: float, expected_batch_size: float, physical_batch_size: int,
                 noise_rng: np.random.Generator, noise: str = "gaussian", engine: str = "dpmed") -> None:
        if not max_grad_norm > 0:
            raise ValueError(f"max_grad_norm must be > 0, got {max_grad_norm}")
        if not 0 <= noise_multiplier < math.inf:      # written so that nan fails too: nan would add no noise
            raise ValueError(f"noise_multiplier must be finite and >= 0, got {noise_multiplier}")
        if not 0 < expected_batch_size < math.inf:
            raise ValueError(f"expected_batch_size must be finite and > 0 (the divisor q N), got {expected_batch_size}")
        if noise_multiplier > 0 and math.isinf(max_grad_norm):
            raise ValueError("noise needs a finite max_grad_norm: the noise std is noise_multiplier * max_grad_norm")
        if noise not in ("gaussian", "laplace"):
            raise ValueError(f"noise must be 'gaussian' (L2 clipping) or 'laplace' (L1 clipping), got {noise!r}")
        if engine not in CLIPPING_ENGINES:
            raise ValueError(f"engine must be one of {sorted(CLIPPING_ENGINES)}, got {engine!r}")
        self.noise = noise
        self.norm_order = 1 if noise == "laplace" else 2
        self.engine = engine
        self.clipper = CLIPPING_ENGINES[engine](model, norm_order=self.norm_order)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.loss_fn = loss_fn          # must sum over the batch (reduction="sum")
        self.max_grad_norm = max_grad_norm
        self.noise_multiplier = noise_multiplier
        self.expected_batch_size = expected_batch_size
        self.physical_batch_size = physical_batch_size
        self.noise_rng = noise_rng        # the run's secret noise stream (dpmed.randomness)
        if len({p.dtype for p in self.params}) > 1:
            raise ValueError("the trainable parameters must share one dtype: the noise is drawn for them as one "
                             f"vector; got {sorted({str(p.dtype) for p in self.params})}")
        self._flat: Tensor | None = None
        self._noise: NoiseBuffer | None = None

    @property
    def stream_words(self) -> int:
        """The raw words each step takes from the noise stream: its blocks' keys, none where it adds no noise. The
        same every step, so a checkpoint's step count tells where its noise stream must stand."""
        drawn = self.noise_multiplier * self.max_grad_norm > 0 and self.params     # as ``__call__`` decides
        return block_words(sum(p.numel() for p in self.params)) if drawn else 0

    def clipped_sum(self, x: Tensor | Copies, y: Tensor, *, groups: Tensor | None = None) -> list[Tensor]:
        """sum_i clip(g_i) for the examples x [B, C, H, W], y [B, ...]; zeros for an empty batch.

        groups: None (the image is the unit), or the group (patient) id of each example, int [B], any integers in
        any order: then sum_G clip(sum_{i in G} g_i). The engines norm a group from all of its images at once, so
        the physical chunks hold whole groups: the examples are reordered group by group and cut between groups. A
        group larger than the physical batch size is summed in slices and clipped once (`_clipped_unit`): no
        forward pass takes more than physical_batch_size examples, copies counted. PrivacyError if the step changed
        a buffer."""
        model = self.clipper.model
        before = _buffer_values(model)
        large: list[Tensor] = []
        chunks: Iterator[tuple[Tensor, Tensor, Tensor | None]]
        if groups is None:
            chunks = ((xs, ys, None) for xs, ys in physical_chunks(x, y, self.physical_batch_size))
        else:                               # laid out on the CPU; the engines move each chunk's ids to x's device
            groups = groups.cpu()
            index, large = _group_chunks(groups, len(x), self.physical_batch_size)
            chunks = ((x[i.to(x.device)], y[i.to(y.device)], groups[i]) for i in index)
        total = None
        # none for an empty Poisson batch: the sum is zero, the noise still comes
        for sums in chain((self.clipper.clipped_sum(xs, ys, loss_fn=self.loss_fn, max_grad_norm=self.max_grad_norm,
                                                    groups=gs) for xs, ys, gs in chunks),
                          (self._clipped_unit(x, y, rows) for rows in large)):
            if total is None:               # the engines return fresh tensors: own them, no extra copy
                total = sums
                continue
            for acc, g in zip(total, sums):
                acc.add_(g)
        _refuse_changed_buffers(model, before)
        return total if total is not None else [torch.zeros_like(p) for p in self.params]

    def _clipped_unit(self, x: Tensor | Copies, y: Tensor, rows: Tensor) -> list[Tensor]:
        """clip(sum_{i in rows} g_i) for one unit (patient, or an image's K copies) of more examples than the
        physical batch size: its summed gradient from slices of at most that many examples, then one norm, one clip.

        Each slice's summed gradient is ordinary autograd on its summed loss (`clipping.gradient_sum`, whatever the
        engine: no engine's hooks are on the model outside its ``clipped_sum``): with nothing to clip before the
        slices are added, per-example norms would be paid for and unused. The unit's norm
        is taken of the very sum it scales, not by another route whose rounding could disagree (`clipping`'s rounding
        slack), and in float64, so its contribution is at most C up to float32's rounding of one product. Only the
        unit's own examples enter it, so it depends on no other unit. An example whose gradient overflows leaves the
        sum non-finite, and the unit then contributes nothing, as it does through the engines' clip whatever
        physical_batch_size."""
        slices = (gradient_sum(self.clipper.model, self.params, x[part.to(x.device)], y[part.to(y.device)],
                               loss_fn=self.loss_fn) for part in rows.split(self.physical_batch_size))
        unit = next(slices)                       # rows is never empty: a unit has an example
        for sums in slices:
            for acc, g in zip(unit, sums):
                acc.add_(g)
        o = self.norm_order                       # L2 (Gaussian) or L1 (Laplace), over all parameters
        # Accumulated in float64: torch's float32 norm of a few million coordinates fell short of the true one by
        # 3e-5 (L2) to 4e-4 (L1), and the unit's contribution passed C by as much.
        norm = torch.stack([torch.linalg.vector_norm(g, o, dtype=torch.float64) for g in unit]).norm(p=o)
        if not bool(torch.isfinite(norm)):
            return [torch.zeros_like(g) for g in unit]
        factor = clip_factors(norm, self.max_grad_norm)
        for g in unit:
            g.mul_(factor)
        return unit

    def __call__(self, x: Tensor | Copies, y: Tensor, *, groups: Tensor | None = None) -> None:
        """Compute the noisy gradient of one Poisson batch into ``p.grad`` (the optimizer steps afterwards); with
        ``groups`` (patient id per example, see ``clipped_sum``) each patient's summed gradient is clipped.

        The noise is float64, from the run's secret stream (`dpmed.training.noise`: blocks drawn on several threads
        while the clipped sum is computed), added to the clipped sum in float64 and then rounded to the parameter's
        float32, so that every float32 value is a possible output whatever the sum (the floating-point attacks of
        Mironov 2012 and Jin et al. 2022 read gaps in the set of noise values). A float64 model has no coarser
        output to round to: there each Gaussian coordinate is the sum of four draws halved, Opacus's secure-mode
        defence (Holohan and Braghin 2021)."""
        scale = self.noise_multiplier * self.max_grad_norm   # Gaussian std, or Laplace scale b
        if not scale > 0 or not self.params:      # sigma 0 (with C = inf, scale is nan): no noise
            self._set_grads(self.clipped_sum(x, y, groups=groups))
            return
        # No frame names the noise or a slice of it (`NoiseBuffer`), nor a key (`BlockKeys`): a traceback that shows
        # locals would print some of them, and a run resumed from its checkpoint draws this step again.
        keys = block_keys(self.noise_rng, len(self._noise_buffer()))   # the stream moves here, before anything can fail
        # The record_function labels name the step's phases in a torch profile (benchmarks/dp_step.py --profile).
        with ThreadPoolExecutor(max_workers=min(len(keys), noise_workers()),
                                thread_name_prefix="dpmed-noise") as pool:
            filling = fill_noise(self._noise_buffer(), keys, pool, kind=self.noise,
                                 four_halved=self.params[0].dtype == torch.float64)
            with record_function("dpmed.clipped_sum"):
                total = self.clipped_sum(x, y, groups=groups)   # leaving the pool waits for every block, even if
            with record_function("dpmed.noise_wait"):           # this raised: no draw is left half made
                for f in filling:
                    f.result()              # re-raises a failed draw on this thread
        with record_function("dpmed.noise_add"):
            self._add_noise(total, scale)
        self._set_grads(total)

    def _add_noise(self, total: list[Tensor], scale: float) -> None:
        """total += scale * the drawn noise, in float64, then rounded; one call for all parameters (a GPU pays host
        time per dispatched op). The noise (its copy on the GPU, and its pieces shaped as the parameters) lives only
        within the expression: a frame's local would show in a traceback that shows locals. The methods called on it
        are torch's C ones (``split_with_sizes``: ``Tensor.split`` is a Python function, whose frame names it)."""
        if self._flat is None:
            raise RuntimeError("the noise is added after it is drawn into the noise buffer (`_noise_buffer`)")
        torch._foreach_add_(total, list(map(Tensor.view, self._flat.to(self.params[0].device).split_with_sizes(
            list(map(Tensor.numel, total))), map(Tensor.size, total))), alpha=scale)     # [P] -> pieces, shaped

    def _set_grads(self, total: list[Tensor]) -> None:
        """p.grad = the noisy (or plain) clipped sum divided by the expected batch size qN, for every parameter."""
        if total:
            torch._foreach_div_(total, self.expected_batch_size)
        for p, acc in zip(self.params, total):
            p.grad = acc

    def _noise_buffer(self) -> NoiseBuffer:
        """float64 [number of trainable coordinates], reused from step to step (``_flat``: the same memory as a
        tensor); in pinned memory where the model is on a GPU (a synchronous copy from it, so the next step cannot
        overwrite it early)."""
        if self._noise is None:
            size = sum(p.numel() for p in self.params)
            pin = self.params[0].device.type == "cuda"
            # zeros, not empty: fresh memory may hold what the process freed, and the buffer's first frame names it
            self._flat = torch.zeros(size, dtype=torch.float64, pin_memory=pin)
            self._noise = NoiseBuffer(self._flat.numpy())
        return self._noise
