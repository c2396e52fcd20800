"""Per-example gradients of one layer from what backpropagation already has: its input and its output gradient.

For a layer ``out = f(a; W)`` and a loss that is a *sum* of per-example losses, the output gradient of example i,
``g_i = dL/d out_i``, depends on example i alone (no supported layer mixes examples), and the example's parameter
gradient is a fixed bilinear function of (a_i, g_i). For a linear map over T positions (a Linear over a sequence, a
Conv2d over its T output pixels after unfolding the input into patches):

    grad_i W = sum_t g_it a_it^T                                        [d_out, d_in]
    ||grad_i W||^2 = sum_{t,s} (a_it . a_is) (g_it . g_is)              (the "ghost norm": two T x T Gram matrices)

The ghost norm (Goodfellow 2015; Li et al. 2021 for sequences; Bu et al. 2022 for convolutions) costs
~T^2 (d_in + d_out) per example; materialising grad_i W costs ~T d_in d_out. Neither wins everywhere: early conv
layers have large T and few parameters, deep ones small T and many. Each rule therefore states both costs and
the engine picks the cheaper per layer and input size ("mixed ghost clipping", Bu et al. 2022). Once the clip
factors c_i are known, the clipped sum sum_i c_i grad_i W is *one* ordinary weight-gradient computation with
g_i scaled by c_i ("book-keeping", Bu et al. 2023): no second backward pass.

User-level clipping needs the norm of a group's summed gradient, ||sum_{i in G} grad_i W||^2 = sum_i ||grad_i W||^2
+ 2 sum_{i<j} <grad_i W, grad_j W>; the cross terms are ghost dot products of pairs of examples,
<grad_i W, grad_j W> = sum_{t,s} (a_it . a_js) (g_it . g_js), the same two Gram matrices taken across the pair.

A rule is a frozen info object per layer type (``LAYER_RULES``); the engine has no if-ladder over layer names,
and the tests iterate the same registry. A layer type without a rule is an error, never a silent approximation.

Shapes: B examples; a: the layer's input; g: the gradient of the layer's output, both batch-first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dpmed.errors import PrivacyError

__all__ = ["LayerRule", "GhostRule", "LAYER_RULES"]

Grads = dict[str, Tensor]
Names = frozenset[str]

# Transient memory for one chunk of unfolded patches or Gram matrices: the engine splits the batch so that no
# intermediate holds more elements than this (2^25 float32 = 128 MiB), which keeps peak memory near a plain step.
_CHUNK_ELEMENTS = 1 << 22


@dataclass(frozen=True)
class GhostRule:
    """The ghost-norm route of a layer: its cost, the per-example squared norms, and the book-kept clipped sum.

    cost(module, a, g) -> multiply-adds per example (and per pair); sq_norms(module, a, g, names) -> [B] (sum over
    the named parameters of ||grad_i p||^2); weighted_sum(module, a, g, c, names) -> {name: sum_i c_i grad_i p};
    pair_dots(module, a, g, names, left, right) -> [n] (sum over the named parameters of <grad_l p, grad_r p> for
    the n pairs of example indices (left[k], right[k])).
    """

    cost: Callable[[nn.Module, Tensor, Tensor], float]
    sq_norms: Callable[[nn.Module, Tensor, Tensor, Names], Tensor]
    weighted_sum: Callable[[nn.Module, Tensor, Tensor, Tensor, Names], Grads]
    pair_dots: Callable[[nn.Module, Tensor, Tensor, Names, Tensor, Tensor], Tensor]


@dataclass(frozen=True)
class LayerRule:
    """How per-example gradients of one layer type come from (input a, output gradient g).

    check(module): raises PrivacyError for settings whose per-example gradient this rule does not compute.
    materialised_cost(module, a, g) -> multiply-adds per example of ``per_example``.
    per_example(module, a, g, names) -> {name: [B, *param.shape]} for the named trainable parameters.
    ghost: the cheaper-norm route, where one exists (not for the normalisation layers, whose per-example gradients
    are as small as their parameters).
    """

    check: Callable[[nn.Module], None]
    materialised_cost: Callable[[nn.Module, Tensor, Tensor], float]
    per_example: Callable[[nn.Module, Tensor, Tensor, Names], Grads]
    ghost: GhostRule | None = None


def _accept(_module: nn.Module) -> None:
    """Every setting of the layer type is covered."""


def _chunks(batch: int, elements_per_example: int) -> list[slice]:
    """Batch slices holding at most ``_CHUNK_ELEMENTS`` elements of an intermediate (at least one example)."""
    step = max(1, _CHUNK_ELEMENTS // max(1, elements_per_example))
    return [slice(i, min(i + step, batch)) for i in range(0, batch, step)]


def _bias_per_example(g: Tensor, channel_dim_last: bool) -> Tensor:
    """sum of g over every position: [B, d_out]. g is [B, d_out, *spatial] or [B, *positions, d_out]."""
    if channel_dim_last:
        return g.reshape(g.shape[0], -1, g.shape[-1]).sum(1)
    return g.reshape(g.shape[0], g.shape[1], -1).sum(2)


# ---------------------------------------------------------------------------------------------------------------
# Linear: a [B, *, d_in], g [B, *, d_out]; the positions * are flattened to T (T = 1 for a plain batch of vectors).

def _linear_3d(a: Tensor, g: Tensor) -> tuple[Tensor, Tensor]:
    if a.dim() < 2:
        raise PrivacyError("Linear input must be batch-first with at least 2 dimensions [B, ..., d_in] to clip per "
                           f"example; got shape {tuple(a.shape)}")
    return a.reshape(a.shape[0], -1, a.shape[-1]), g.reshape(g.shape[0], -1, g.shape[-1])   # [B, T, d]


def _linear_positions(a: Tensor) -> int:
    return a[0].numel() // a.shape[-1] if a.shape[0] else 1


def _linear_ghost_cost(m: nn.Linear, a: Tensor, g: Tensor) -> float:
    t = _linear_positions(a)
    return (m.in_features + m.out_features) * (1 if t == 1 else t * t)


def _linear_materialised_cost(m: nn.Linear, a: Tensor, g: Tensor) -> float:
    return _linear_positions(a) * m.in_features * m.out_features


def _linear_sq_norms(m: nn.Linear, a: Tensor, g: Tensor, names: Names) -> Tensor:
    a3, g3 = _linear_3d(a, g)                                                    # [B, T, d_in], [B, T, d_out]
    sq = a3.new_zeros(a3.shape[0])
    if "weight" in names:
        if a3.shape[1] == 1:       # ||g a^T||^2 = ||a||^2 ||g||^2
            sq = sq + a3.square().sum((1, 2)) * g3.square().sum((1, 2))
        else:
            for s in _chunks(a3.shape[0], a3.shape[1] ** 2):
                aa = torch.bmm(a3[s], a3[s].transpose(1, 2))                    # [b, T, T]
                gg = torch.bmm(g3[s], g3[s].transpose(1, 2))                    # [b, T, T]
                sq[s] += (aa * gg).sum((1, 2))
    if "bias" in names:
        sq = sq + g3.sum(1).square().sum(1)
    return sq


def _linear_pair_dots(m: nn.Linear, a: Tensor, g: Tensor, names: Names, left: Tensor, right: Tensor) -> Tensor:
    a3, g3 = _linear_3d(a, g)                                                    # [B, T, d_in], [B, T, d_out]
    t = a3.shape[1]
    dots = a3.new_zeros(len(left))
    if "weight" in names:
        for s in _chunks(len(left), t * t + t * (a3.shape[2] + g3.shape[2])):
            l, r = left[s], right[s]
            if t == 1:             # <g_l a_l^T, g_r a_r^T> = (a_l . a_r) (g_l . g_r)
                dots[s] += (a3[l, 0] * a3[r, 0]).sum(1) * (g3[l, 0] * g3[r, 0]).sum(1)
            else:
                aa = torch.bmm(a3[l], a3[r].transpose(1, 2))                    # [n, T, T]
                gg = torch.bmm(g3[l], g3[r].transpose(1, 2))                    # [n, T, T]
                dots[s] += (aa * gg).sum((1, 2))
    if "bias" in names:
        gb = g3.sum(1)                                                          # [B, d_out]
        dots = dots + (gb[left] * gb[right]).sum(1)
    return dots


def _linear_weighted_sum(m: nn.Linear, a: Tensor, g: Tensor, c: Tensor, names: Names) -> Grads:
    a3, g3 = _linear_3d(a, g)
    gc = g3 * c[:, None, None]                                                  # [B, T, d_out]
    out: Grads = {}
    if "weight" in names:
        out["weight"] = gc.reshape(-1, gc.shape[-1]).T @ a3.reshape(-1, a3.shape[-1])   # [d_out, d_in]
    if "bias" in names:
        out["bias"] = gc.sum((0, 1))
    return out


def _linear_per_example(m: nn.Linear, a: Tensor, g: Tensor, names: Names) -> Grads:
    a3, g3 = _linear_3d(a, g)
    out: Grads = {}
    if "weight" in names:
        out["weight"] = torch.bmm(g3.transpose(1, 2), a3)                       # [B, d_out, d_in]
    if "bias" in names:
        out["bias"] = g3.sum(1)                                                 # [B, d_out]
    return out


# ---------------------------------------------------------------------------------------------------------------
# Conv1d / Conv2d, as a 2-d convolution: a [B, C_in, H, W], g [B, C_out, H', W'], T = H' W', G groups,
# d_in = C_in / G * kh * kw, d_out = C_out / G. A Conv1d is the 2-d case with H = kh = 1.

@dataclass(frozen=True)
class _ConvGeometry:
    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    groups: int


def _conv_2d(m: nn.Module, a: Tensor, g: Tensor) -> tuple[Tensor, Tensor, _ConvGeometry]:
    """(a, g) as 4-d tensors and the geometry of the equivalent 2-d convolution with explicit zero padding.

    A string padding ('same', 'valid') or a non-zero padding mode (reflect, replicate, circular) is applied to the
    input here exactly as torch's forward applies it, so the convolution below always has plain zero padding."""
    padding = m.padding
    if isinstance(padding, str) or m.padding_mode != "zeros":
        mode = "constant" if m.padding_mode == "zeros" else m.padding_mode
        a = F.pad(a, m._reversed_padding_repeated_twice, mode=mode)
        padding = (0,) * len(m.kernel_size)
    kernel, stride, dilation = m.kernel_size, m.stride, m.dilation
    if a.dim() == 3:                                                            # Conv1d: [B, C, L] -> [B, C, 1, L]
        a, g = a.unsqueeze(2), g.unsqueeze(2)
        kernel, stride, dilation = ((1, *v) for v in (kernel, stride, dilation))
        padding = (0, *padding)
    return a, g, _ConvGeometry(tuple(kernel), tuple(stride), tuple(padding), tuple(dilation), m.groups)


def _conv_dims(m: nn.Module, g: Tensor) -> tuple[int, int, int]:
    """(T, d_in, d_out) per group."""
    positions = g[0, 0].numel() if g.shape[0] else 1
    d_in = m.in_channels // m.groups
    for k in m.kernel_size:
        d_in *= k
    return positions, d_in, m.out_channels // m.groups


def _conv_check(m: nn.Module) -> None:
    if not isinstance(m.padding, str) and m.padding_mode == "zeros":
        return
    if not hasattr(m, "_reversed_padding_repeated_twice"):
        raise PrivacyError(f"{type(m).__name__} with padding {m.padding!r} / padding_mode {m.padding_mode!r}: this "
                           "torch version does not expose the padding the engine needs to replay; use zero padding")


def _padded_pixels(m: nn.Module, a: Tensor) -> int:
    """Pixels per channel of the input after the convolution's padding (what the pixel Gram matrix spans)."""
    spatial = a.shape[2:]
    if isinstance(m.padding, str) or m.padding_mode != "zeros":
        pads = m._reversed_padding_repeated_twice                              # (last dim: left, right, ...)
        added = [pads[2 * i] + pads[2 * i + 1] for i in range(len(spatial))][::-1]
    else:
        added = [2 * p for p in m.padding]
    n = 1
    for size, extra in zip(spatial, added):
        n *= size + extra
    return n


def _conv_gram_costs(m: nn.Module, a: Tensor, g: Tensor) -> tuple[float, float]:
    """Multiply-adds per example of the input Gram matrix [T, T] by each route: (unfolded patches, pixel Gram)."""
    t, d_in, _ = _conv_dims(m, g)
    kernel = 1
    for k in m.kernel_size:
        kernel *= k
    pixels = _padded_pixels(m, a)
    unfolded = t * t * d_in + t * d_in                                          # Gram of the patches + the unfold
    by_pixels = pixels * pixels * (m.in_channels // m.groups) + kernel * t * t + pixels * d_in // kernel
    return unfolded, by_pixels


def _conv_ghost_cost(m: nn.Module, a: Tensor, g: Tensor) -> float:
    t, _, d_out = _conv_dims(m, g)
    return m.groups * (min(_conv_gram_costs(m, a, g)) + t * t * d_out)         # input Gram + output-gradient Gram


def _conv_materialised_cost(m: nn.Module, a: Tensor, g: Tensor) -> float:
    """T d_in d_out multiply-adds, plus a fixed per-example overhead of the grouped kernel (~64 positions' worth,
    measured on CPU: it runs at ~1/3 of the plain weight-gradient speed at T = 49 and near it at T >= 1024). The
    cost only picks the route; both routes give the same sum."""
    t, d_in, d_out = _conv_dims(m, g)
    return m.groups * (t + 64) * d_in * d_out


def _weight_grad(a4: Tensor, g4: Tensor, weight_shape: tuple[int, ...], geo: _ConvGeometry, groups: int) -> Tensor:
    """The ordinary weight gradient sum_i grad_i W of a 2-d convolution (the kernel plain backward uses)."""
    placeholder = g4.new_empty(1).expand(weight_shape)                          # only its shape is read
    return torch.ops.aten.convolution_backward(
        g4, a4, placeholder, None, list(geo.stride), list(geo.padding), list(geo.dilation), False, [0, 0], groups,
        [False, True, False])[1]


def _conv_weight_shape_2d(m: nn.Module) -> tuple[int, ...]:
    shape = tuple(m.weight.shape)
    return shape if len(shape) == 4 else (shape[0], shape[1], 1, shape[2])


def _unfold(a4: Tensor, geo: _ConvGeometry) -> Tensor:
    """F.unfold(a4, ...) -> [b, C kh kw, T], in its order (channel, then kernel row, then column), as strided slices
    of the padded input stacked along the kernel offsets. The same copy, but aten's im2col on CPU stalls for about a
    second per call when its threads compete with other processes for the cores; plain slicing copies do not."""
    (ph, pw), (kh, kw), (sh, sw), (dh, dw) = geo.padding, geo.kernel, geo.stride, geo.dilation
    ap = F.pad(a4, (pw, pw, ph, ph)) if ph or pw else a4                       # [b, C, Hp, Wp]
    ho = (ap.shape[2] - dh * (kh - 1) - 1) // sh + 1
    wo = (ap.shape[3] - dw * (kw - 1) - 1) // sw + 1
    blocks = [ap[:, :, i * dh:i * dh + sh * (ho - 1) + 1:sh, j * dw:j * dw + sw * (wo - 1) + 1:sw]
              for i in range(kh) for j in range(kw)]                            # kh kw x [b, C, H', W']
    return torch.stack(blocks, 2).reshape(a4.shape[0], -1, ho * wo)            # [b, C kh kw, T]


def _patch_gram_unfolded(a4: Tensor, geo: _ConvGeometry, t: int, b4: Tensor | None = None) -> Tensor:
    """aa[b, G, t, s] = <patch_t, patch_s> from the unfolded patches (im2col: a copy 9x the input for 3x3); with
    b4, the Gram matrix across two inputs, <patch_t of a4[b], patch_s of b4[b]>."""
    au = _unfold(a4, geo)                                                       # [b, G d_in, T]
    au = au.view(au.shape[0], geo.groups, -1, t)                               # [b, G, d_in, T]
    bu = au if b4 is None else _unfold(b4, geo).view(au.shape)
    return au.transpose(2, 3) @ bu                                             # [b, G, T, T]


def _patch_gram_by_pixels(a4: Tensor, geo: _ConvGeometry, out_hw: tuple[int, int],
                          b4: Tensor | None = None) -> Tensor:
    """The same aa without unfolding: a patch is the pixels p + k over the kernel offsets k, so
    <patch_t, patch_s> = sum_k <a_{t+k}, a_{s+k}> = sum_k P[t + k, s + k] with P = the Gram matrix of the padded
    input's pixels over the group's channels. Cheaper than im2col where the kernel is larger than the stride
    (T^2 d_in becomes Np^2 C / G + k T^2, and no 9x copy). With b4, P is taken across the two inputs."""
    (ph, pw), (kh, kw), (sh, sw), (dh, dw) = geo.padding, geo.kernel, geo.stride, geo.dilation
    ap = F.pad(a4, (pw, pw, ph, ph)) if ph or pw else a4                       # [b, C, Hp, Wp]
    b, c, hp, wp = ap.shape
    av = ap.reshape(b, geo.groups, c // geo.groups, hp * wp)                    # [b, G, C/G, Np]
    if b4 is None:
        bv = av
    else:
        bv = (F.pad(b4, (pw, pw, ph, ph)) if ph or pw else b4).reshape(av.shape)
    pix = (av.transpose(2, 3) @ bv).view(b, geo.groups, hp, wp, hp, wp)         # [b, G, Np, Np] as a 6-d view
    ho, wo = out_hw
    aa = None
    for i in range(kh):
        rows = slice(i * dh, i * dh + sh * (ho - 1) + 1, sh)
        for j in range(kw):
            cols = slice(j * dw, j * dw + sw * (wo - 1) + 1, sw)
            block = pix[:, :, rows, cols, rows, cols]                           # [b, G, H', W', H', W']
            aa = block.clone() if aa is None else aa.add_(block)
    return aa.reshape(b, geo.groups, ho * wo, ho * wo)                          # [b, G, T, T]


def _conv_sq_norms(m: nn.Module, a: Tensor, g: Tensor, names: Names) -> Tensor:
    a4, g4, geo = _conv_2d(m, a, g)
    b, groups = a4.shape[0], geo.groups
    t, d_in, d_out = _conv_dims(m, g)
    sq = a4.new_zeros(b)
    if "weight" in names:
        unfolded, by_pixels = _conv_gram_costs(m, a, g)
        pixels = (a4.shape[2] + 2 * geo.padding[0]) * (a4.shape[3] + 2 * geo.padding[1])
        per_example = groups * ((pixels * pixels if by_pixels < unfolded else d_in * t) + 3 * t * t)
        for s in _chunks(b, per_example):
            if by_pixels < unfolded:
                aa = _patch_gram_by_pixels(a4[s], geo, tuple(g4.shape[2:]))            # [b, G, T, T]
            else:
                aa = _patch_gram_unfolded(a4[s], geo, t)                               # [b, G, T, T]
            gf = g4[s].reshape(aa.shape[0], groups, d_out, t)                           # [b, G, d_out, T]
            gg = gf.transpose(2, 3) @ gf                                                # [b, G, T, T]
            sq[s] += (aa * gg).sum((1, 2, 3))
    if "bias" in names:
        sq = sq + _bias_per_example(g4, channel_dim_last=False).square().sum(1)
    return sq


def _conv_pair_dots(m: nn.Module, a: Tensor, g: Tensor, names: Names, left: Tensor, right: Tensor) -> Tensor:
    a4, g4, geo = _conv_2d(m, a, g)
    groups = geo.groups
    t, d_in, d_out = _conv_dims(m, g)
    dots = a4.new_zeros(len(left))
    if "weight" in names:
        unfolded, by_pixels = _conv_gram_costs(m, a, g)
        pixels = (a4.shape[2] + 2 * geo.padding[0]) * (a4.shape[3] + 2 * geo.padding[1])
        per_pair = groups * ((pixels * pixels if by_pixels < unfolded else 2 * d_in * t) + 3 * t * t) \
            + 2 * a4[0].numel()                                                 # + the pair's gathered inputs
        for s in _chunks(len(left), per_pair):
            l, r = left[s], right[s]
            if by_pixels < unfolded:
                aa = _patch_gram_by_pixels(a4[l], geo, tuple(g4.shape[2:]), a4[r])    # [n, G, T, T]
            else:
                aa = _patch_gram_unfolded(a4[l], geo, t, a4[r])                       # [n, G, T, T]
            gl = g4[l].reshape(len(l), groups, d_out, t)                               # [n, G, d_out, T]
            gr = g4[r].reshape(len(r), groups, d_out, t)
            dots[s] += (aa * (gl.transpose(2, 3) @ gr)).sum((1, 2, 3))
    if "bias" in names:
        gb = _bias_per_example(g4, channel_dim_last=False)                      # [B, C_out]
        dots = dots + (gb[left] * gb[right]).sum(1)
    return dots


def _conv_weighted_sum(m: nn.Module, a: Tensor, g: Tensor, c: Tensor, names: Names) -> Grads:
    a4, g4, geo = _conv_2d(m, a, g)
    gc = g4 * c.view(-1, 1, 1, 1)                                               # [B, C_out, H', W']
    out: Grads = {}
    if "weight" in names:
        out["weight"] = _weight_grad(a4, gc, _conv_weight_shape_2d(m), geo, geo.groups).view_as(m.weight)
    if "bias" in names:
        out["bias"] = gc.sum((0, 2, 3))
    return out


def _per_example_grouped(a4: Tensor, g4: Tensor, geo: _ConvGeometry, shape: tuple[int, ...]) -> Tensor:
    """grad_i W for every example as one grouped convolution's weight gradient: the batch becomes G B groups
    ([1, B C_in, H, W] against [1, B C_out, H', W']), so the machine's convolution kernel does the work with no
    unfolded copy of the input (the patches of a 3x3 layer are 9x its activations). -> [B C_out, C_in/G, kh, kw]"""
    b = a4.shape[0]
    return _weight_grad(a4.reshape(1, b * a4.shape[1], *a4.shape[2:]), g4.reshape(1, b * g4.shape[1], *g4.shape[2:]),
                        (b * shape[0], *shape[1:]), geo, b * geo.groups)


def _per_example_unfolded(a4: Tensor, g4: Tensor, geo: _ConvGeometry, shape: tuple[int, ...]) -> Tensor:
    """grad_i W = g_i unfold(a_i)^T as batched matrix products, in batch chunks that bound the unfolded copy."""
    b, groups = a4.shape[0], geo.groups
    d_out, d_in = shape[0] // groups, shape[1] * shape[2] * shape[3]
    t = g4[0, 0].numel()
    out = g4.new_empty(b, groups, d_out, d_in)                                   # [B, G, d_out, d_in]
    for s in _chunks(b, groups * d_in * t):
        au = _unfold(a4[s], geo)                                                  # [b, G d_in, T]
        au = au.view(au.shape[0], groups, d_in, t)
        torch.matmul(g4[s].reshape(au.shape[0], groups, d_out, t), au.transpose(2, 3), out=out[s])
    return out


def _per_example_kernel(a4: Tensor, geo: _ConvGeometry) -> Callable[..., Tensor]:
    """Which kernel materialises per-example conv gradients. On CPU the grouped convolution runs near the plain
    weight-gradient speed (oneDNN), except with few input channels per group (a stem on 1 or 3 channels), where it
    runs 10 to 100 times slower than the matrix products over unfolded patches; on CUDA those products are faster."""
    if a4.device.type == "cpu" and a4.shape[1] // geo.groups > 4:
        return _per_example_grouped
    return _per_example_unfolded


def _conv_per_example(m: nn.Module, a: Tensor, g: Tensor, names: Names) -> Grads:
    a4, g4, geo = _conv_2d(m, a, g)
    out: Grads = {}
    if "weight" in names:
        kernel = _per_example_kernel(a4, geo)
        out["weight"] = kernel(a4, g4, geo, _conv_weight_shape_2d(m)).reshape(a4.shape[0], *m.weight.shape)
    if "bias" in names:
        out["bias"] = _bias_per_example(g4, channel_dim_last=False)             # [B, C_out]
    return out


# ---------------------------------------------------------------------------------------------------------------
# GroupNorm / LayerNorm: per-example gradients of the affine parameters are sums of g * x_hat and of g, as small as
# the parameters themselves, so they are always materialised. x_hat is recomputed from the input (no affine).

def _group_norm_per_example(m: nn.GroupNorm, a: Tensor, g: Tensor, names: Names) -> Grads:
    b, c = a.shape[0], a.shape[1]
    out: Grads = {}
    if "weight" in names:
        x_hat = F.group_norm(a, m.num_groups, eps=m.eps)                        # [B, C, *]
        out["weight"] = (g * x_hat).reshape(b, c, -1).sum(2)                    # [B, C]
    if "bias" in names:
        out["bias"] = g.reshape(b, c, -1).sum(2)                                # [B, C]
    return out


def _layer_norm_per_example(m: nn.LayerNorm, a: Tensor, g: Tensor, names: Names) -> Grads:
    dims = tuple(range(1, a.dim() - len(m.normalized_shape)))                   # positions between B and the shape
    out: Grads = {}
    if "weight" in names:
        x_hat = F.layer_norm(a, m.normalized_shape, eps=m.eps)
        out["weight"] = (g * x_hat).sum(dims) if dims else g * x_hat            # [B, *normalized_shape]
    if "bias" in names:
        out["bias"] = g.sum(dims) if dims else g
    return out


def _norm_cost(m: nn.Module, a: Tensor, g: Tensor) -> float:
    return a[0].numel() if a.shape[0] else 1


# ---------------------------------------------------------------------------------------------------------------
# Embedding: a = indices [B, *] (T positions), g [B, *, D]. Example i's gradient adds g_it to row a_it, so
# ||grad_i E||^2 = sum_{t,s} [a_it = a_is] (g_it . g_is); the padding row gets no gradient (torch's rule).

def _embedding_check(m: nn.Embedding) -> None:
    if m.max_norm is not None:
        raise PrivacyError("Embedding with max_norm renormalises its weight in place during forward; its "
                           "per-example gradients are not those of a plain lookup. Set max_norm=None")
    if m.scale_grad_by_freq:
        raise PrivacyError("Embedding with scale_grad_by_freq scales each gradient by the index's frequency in the "
                           "*batch*, which mixes examples and breaks per-example clipping. Set it to False")
    if m.sparse:
        raise PrivacyError("Embedding with sparse=True: DP-SGD adds dense noise to every row, so the gradient is "
                           "dense anyway. Set sparse=False")


def _embedding_3d(m: nn.Embedding, a: Tensor, g: Tensor) -> tuple[Tensor, Tensor]:
    idx = a.reshape(a.shape[0], -1)                                             # [B, T]
    g3 = g.reshape(g.shape[0], -1, g.shape[-1])                                 # [B, T, D]
    if m.padding_idx is not None:
        g3 = g3 * (idx != m.padding_idx).unsqueeze(-1).to(g3.dtype)
    return idx, g3


def _embedding_ghost_cost(m: nn.Embedding, a: Tensor, g: Tensor) -> float:
    t = a[0].numel() if a.shape[0] else 1
    return t * t * (m.embedding_dim + 1)


def _embedding_materialised_cost(m: nn.Embedding, a: Tensor, g: Tensor) -> float:
    t = a[0].numel() if a.shape[0] else 1
    return m.num_embeddings * m.embedding_dim + t * m.embedding_dim


def _embedding_sq_norms(m: nn.Embedding, a: Tensor, g: Tensor, names: Names) -> Tensor:
    idx, g3 = _embedding_3d(m, a, g)
    sq = g3.new_zeros(idx.shape[0])
    for s in _chunks(idx.shape[0], 2 * idx.shape[1] ** 2):
        same = (idx[s].unsqueeze(2) == idx[s].unsqueeze(1)).to(g3.dtype)        # [b, T, T]
        sq[s] += (torch.bmm(g3[s], g3[s].transpose(1, 2)) * same).sum((1, 2))
    return sq


def _embedding_pair_dots(m: nn.Embedding, a: Tensor, g: Tensor, names: Names, left: Tensor,
                         right: Tensor) -> Tensor:
    idx, g3 = _embedding_3d(m, a, g)
    t = idx.shape[1]
    dots = g3.new_zeros(len(left))
    for s in _chunks(len(left), 2 * t * t + 2 * t * g3.shape[2]):
        l, r = left[s], right[s]
        same = (idx[l].unsqueeze(2) == idx[r].unsqueeze(1)).to(g3.dtype)        # [n, T, T]
        dots[s] += (torch.bmm(g3[l], g3[r].transpose(1, 2)) * same).sum((1, 2))
    return dots


def _embedding_weighted_sum(m: nn.Embedding, a: Tensor, g: Tensor, c: Tensor, names: Names) -> Grads:
    idx, g3 = _embedding_3d(m, a, g)
    gc = (g3 * c[:, None, None]).reshape(-1, g3.shape[-1])                      # [B T, D]
    return {"weight": g3.new_zeros(m.weight.shape).index_add_(0, idx.reshape(-1), gc)}


def _embedding_per_example(m: nn.Embedding, a: Tensor, g: Tensor, names: Names) -> Grads:
    idx, g3 = _embedding_3d(m, a, g)
    b, (v, d) = idx.shape[0], m.weight.shape
    rows = (torch.arange(b, device=idx.device).unsqueeze(1) * v + idx).reshape(-1)
    out = g3.new_zeros(b * v, d).index_add_(0, rows, g3.reshape(-1, d))
    return {"weight": out.view(b, v, d)}                                        # [B, V, D]


_CONV = LayerRule(_conv_check, _conv_materialised_cost, _conv_per_example,
                  GhostRule(_conv_ghost_cost, _conv_sq_norms, _conv_weighted_sum, _conv_pair_dots))

LAYER_RULES: Mapping[type, LayerRule] = {
    nn.Linear: LayerRule(_accept, _linear_materialised_cost, _linear_per_example,
                         GhostRule(_linear_ghost_cost, _linear_sq_norms, _linear_weighted_sum,
                                   _linear_pair_dots)),
    nn.Conv1d: _CONV,
    nn.Conv2d: _CONV,
    nn.GroupNorm: LayerRule(_accept, _norm_cost, _group_norm_per_example),
    nn.LayerNorm: LayerRule(_accept, _norm_cost, _layer_norm_per_example),
    nn.Embedding: LayerRule(_embedding_check, _embedding_materialised_cost, _embedding_per_example,
                            GhostRule(_embedding_ghost_cost, _embedding_sq_norms, _embedding_weighted_sum,
                                      _embedding_pair_dots)),
}
