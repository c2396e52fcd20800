"""The layer rule of ``nn.Conv1d`` and ``nn.Conv2d``, as a 2-d convolution: a [B, C_in, H, W], g [B, C_out, H', W'],
T = H' W', G groups, d_in = C_in / G * kh * kw, d_out = C_out / G. A Conv1d is the 2-d case with H = kh = 1.

After unfolding the input into patches a convolution is a linear map over its T output pixels, so its ghost norm is
sum_{t,s} <patch_t, patch_s> (g_t . g_s) (Bu et al. 2022); the patch Gram matrix comes either from the unfolded
patches or, cheaper where the kernel is larger than the stride, from the Gram matrix of the input's pixels. The
materialised per-example gradient is a grouped convolution's weight gradient or a batched product over unfolded
patches, whichever the machine runs faster.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dpmed.errors import PrivacyError
from dpmed.training.layer_rules.rule import GhostRule, Grads, LayerRule, Names, split_batch

__all__ = ["CONVOLUTION", "Convolution"]

# The layers this rule covers; a WSConv2d is a Conv2d, so `.standardized`'s rule reuses these functions on it.
Convolution = nn.Conv1d | nn.Conv2d


def _bias_per_example(g: Tensor) -> Tensor:
    """sum of g over every position: [B, d_out]. g is [B, d_out, *spatial]."""
    return g.reshape(g.shape[0], g.shape[1], -1).sum(2)


@dataclass(frozen=True)
class _ConvGeometry:
    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    groups: int


def _conv_2d(m: Convolution, a: Tensor, g: Tensor) -> tuple[Tensor, Tensor, _ConvGeometry]:
    """(a, g) as 4-d tensors and the geometry of the equivalent 2-d convolution with explicit zero padding.

    A string padding ('same', 'valid') or a non-zero padding mode (reflect, replicate, circular) is applied to the
    input here exactly as torch's forward applies it, so the convolution below always has plain zero padding."""
    padding: str | tuple[int, ...] = m.padding
    if isinstance(padding, str) or m.padding_mode != "zeros":
        mode = "constant" if m.padding_mode == "zeros" else m.padding_mode
        a = F.pad(a, m._reversed_padding_repeated_twice, mode=mode)
        padding = (0,) * len(m.kernel_size)
    kernel, stride, dilation = m.kernel_size, m.stride, m.dilation
    if a.dim() == 3:                                                            # Conv1d: [B, C, L] -> [B, C, 1, L]
        a, g = a.unsqueeze(2), g.unsqueeze(2)
        kernel, stride, dilation = ((1, *v) for v in (kernel, stride, dilation))
        padding = (0, *padding)
    return a, g, _ConvGeometry(_pair(kernel), _pair(stride), _pair(padding), _pair(dilation), m.groups)


def _pair(v: tuple[int, ...]) -> tuple[int, int]:
    """A 2-d convolution's (height, width) setting; ValueError for any other length."""
    h, w = v
    return h, w


def _conv_dims(m: Convolution, g: Tensor) -> tuple[int, int, int]:
    """(T, d_in, d_out) per group."""
    positions = math.prod(g.shape[2:])                                          # T, without indexing g
    d_in = m.in_channels // m.groups
    for k in m.kernel_size:
        d_in *= k
    return positions, d_in, m.out_channels // m.groups


def _conv_check(m: Convolution) -> None:
    if not isinstance(m.padding, str) and m.padding_mode == "zeros":
        return
    if not hasattr(m, "_reversed_padding_repeated_twice"):
        raise PrivacyError(f"{type(m).__name__} with padding {m.padding!r} / padding_mode {m.padding_mode!r}: this "
                           "torch version does not expose the padding the engine needs to replay; use zero padding")


def _padded_pixels(m: Convolution, a: Tensor) -> int:
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


def _conv_gram_costs(m: Convolution, a: Tensor, g: Tensor) -> tuple[float, float]:
    """Multiply-adds per example of the input Gram matrix [T, T] by each route: (unfolded patches, pixel Gram)."""
    t, d_in, _ = _conv_dims(m, g)
    kernel = 1
    for k in m.kernel_size:
        kernel *= k
    pixels = _padded_pixels(m, a)
    unfolded = t * t * d_in + t * d_in                                          # Gram of the patches + the unfold
    by_pixels = pixels * pixels * (m.in_channels // m.groups) + kernel * t * t + pixels * d_in // kernel
    return unfolded, by_pixels


def _conv_ghost_cost(m: Convolution, a: Tensor, g: Tensor) -> float:
    t, _, d_out = _conv_dims(m, g)
    return m.groups * (min(_conv_gram_costs(m, a, g)) + t * t * d_out)         # input Gram + output-gradient Gram


def _conv_materialised_cost(m: Convolution, a: Tensor, g: Tensor) -> float:
    """T d_in d_out multiply-adds, plus a fixed per-example overhead of the grouped kernel (~64 positions' worth:
    on CPU it is slow at few output positions and near the plain weight-gradient speed at many; measured in
    benchmarks/RESULTS.md, section "Per-example convolution gradients on CPU"). The cost only picks the route; both
    routes give the same sum."""
    t, d_in, d_out = _conv_dims(m, g)
    return m.groups * (t + 64) * d_in * d_out


def _weight_grad(a4: Tensor, g4: Tensor, weight_shape: tuple[int, ...], geo: _ConvGeometry, groups: int) -> Tensor:
    """The ordinary weight gradient sum_i grad_i W of a 2-d convolution (the kernel plain backward uses)."""
    placeholder = g4.new_empty(1).expand(weight_shape)                          # only its shape is read
    return torch.ops.aten.convolution_backward(
        g4, a4, placeholder, None, list(geo.stride), list(geo.padding), list(geo.dilation), False, [0, 0], groups,
        [False, True, False])[1]


def _conv_weight_shape_2d(m: Convolution) -> tuple[int, ...]:
    shape = tuple(m.weight.shape)
    return shape if len(shape) == 4 else (shape[0], shape[1], 1, shape[2])


def _unfold(a4: Tensor, geo: _ConvGeometry) -> Tensor:
    """F.unfold(a4, ...) -> [b, C kh kw, T], in its order (channel, then kernel row, then column), as one strided
    view of the padded input (the kernel offsets as two more dimensions) copied once. The same copy, but aten's
    im2col on CPU stalls for about a second per call when its threads compete with other processes for the cores; a
    plain strided copy does not, and it is two dispatched ops where slicing per offset was kh kw times more."""
    (ph, pw), (kh, kw), (sh, sw), (dh, dw) = geo.padding, geo.kernel, geo.stride, geo.dilation
    ap = F.pad(a4, (pw, pw, ph, ph)) if ph or pw else a4                       # [b, C, Hp, Wp]
    ho = (ap.shape[2] - dh * (kh - 1) - 1) // sh + 1
    wo = (ap.shape[3] - dw * (kw - 1) - 1) // sw + 1
    s0, s1, s2, s3 = ap.stride()
    patches = ap.as_strided((ap.shape[0], ap.shape[1], kh, kw, ho, wo),             # [b, C, kh, kw, H', W']
                            (s0, s1, dh * s2, dw * s3, sh * s2, sw * s3), ap.storage_offset())
    return patches.reshape(a4.shape[0], -1, ho * wo)                           # [b, C kh kw, T]


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
    # P[t + k, s + k] for each kernel offset k = (i dh, j dw): offset (i, j) shifts both pixel indices, so its block
    # is one strided view of pix starting i dh (S_2 + S_4) + j dw (S_3 + S_5) further in. One view and one add per
    # offset (four slices and an add were 5 kh kw dispatched ops, each costing host time on a GPU); a single
    # reduction over all offsets as two more view dimensions is fewer ops still but slower on CPU (benchmarks/
    # RESULTS.md, "On a GPU")
    s0, s1, s2, s3, s4, s5 = pix.stride()
    size, strides = (b, geo.groups, ho, wo, ho, wo), (s0, s1, sh * s2, sw * s3, sh * s4, sw * s5)
    offsets = [pix.storage_offset() + i * dh * (s2 + s4) + j * dw * (s3 + s5) for i in range(kh) for j in range(kw)]
    aa = pix.as_strided(size, strides, offsets[0]).clone()                     # [b, G, H', W', H', W']
    for offset in offsets[1:]:
        aa.add_(pix.as_strided(size, strides, offset))
    return aa.reshape(b, geo.groups, ho * wo, ho * wo)                          # [b, G, T, T]


def _conv_sq_norms(m: Convolution, a: Tensor, g: Tensor, names: Names) -> Tensor:
    a4, g4, geo = _conv_2d(m, a, g)
    b, groups = a4.shape[0], geo.groups
    t, d_in, d_out = _conv_dims(m, g)
    sq = a4.new_zeros(b)
    if "weight" in names:
        unfolded, by_pixels = _conv_gram_costs(m, a, g)
        pixels = (a4.shape[2] + 2 * geo.padding[0]) * (a4.shape[3] + 2 * geo.padding[1])
        per_example = groups * ((pixels * pixels if by_pixels < unfolded else d_in * t) + 3 * t * t)
        for s in split_batch(b, per_example, a4.device):
            if by_pixels < unfolded:
                aa = _patch_gram_by_pixels(a4[s], geo, (g4.shape[2], g4.shape[3]))     # [b, G, T, T]
            else:
                aa = _patch_gram_unfolded(a4[s], geo, t)                               # [b, G, T, T]
            gf = g4[s].reshape(aa.shape[0], groups, d_out, t)                           # [b, G, d_out, T]
            gg = gf.transpose(2, 3) @ gf                                                # [b, G, T, T]
            sq[s] += (aa * gg).sum((1, 2, 3))
    if "bias" in names:
        sq = sq + _bias_per_example(g4).square().sum(1)
    return sq


def _conv_pair_dots(m: Convolution, a: Tensor, g: Tensor, names: Names, left: Tensor, right: Tensor) -> Tensor:
    a4, g4, geo = _conv_2d(m, a, g)
    groups = geo.groups
    t, d_in, d_out = _conv_dims(m, g)
    dots = a4.new_zeros(len(left))
    if "weight" in names:
        unfolded, by_pixels = _conv_gram_costs(m, a, g)
        pixels = (a4.shape[2] + 2 * geo.padding[0]) * (a4.shape[3] + 2 * geo.padding[1])
        per_pair = groups * ((pixels * pixels if by_pixels < unfolded else 2 * d_in * t) + 3 * t * t) \
            + 2 * a4[0].numel()                                                 # + the pair's gathered inputs
        for s in split_batch(len(left), per_pair, a4.device):
            l, r = left[s], right[s]
            if by_pixels < unfolded:
                aa = _patch_gram_by_pixels(a4[l], geo, (g4.shape[2], g4.shape[3]), a4[r])   # [n, G, T, T]
            else:
                aa = _patch_gram_unfolded(a4[l], geo, t, a4[r])                       # [n, G, T, T]
            gl = g4[l].reshape(len(l), groups, d_out, t)                               # [n, G, d_out, T]
            gr = g4[r].reshape(len(r), groups, d_out, t)
            dots[s] += (aa * (gl.transpose(2, 3) @ gr)).sum((1, 2, 3))
    if "bias" in names:
        gb = _bias_per_example(g4)  # [B, C_out]
        dots = dots + (gb[left] * gb[right]).sum(1)
    return dots


def _conv_weighted_sum(m: Convolution, a: Tensor, g: Tensor, c: Tensor, names: Names) -> Grads:
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
    t = math.prod(g4.shape[2:])
    out = g4.new_empty(b * groups, d_out, d_in)                                  # [B G, d_out, d_in]
    for s in split_batch(b, groups * d_in * t, a4.device):
        n = (s.stop - s.start) * groups
        au = _unfold(a4[s], geo).view(n, d_in, t)                                 # [b G, d_in, T]
        # 3-d bmm: a 4-d matmul with out= dispatches several views and expands more per chunk
        torch.bmm(g4[s].reshape(n, d_out, t), au.transpose(1, 2), out=out[s.start * groups:s.stop * groups])
    return out.view(b, groups, d_out, d_in)


def _per_example_kernel(a4: Tensor, geo: _ConvGeometry) -> Callable[..., Tensor]:
    """Which kernel materialises per-example conv gradients. On CPU the grouped convolution runs near the plain
    weight-gradient speed (oneDNN), except with few input channels per group (a stem on 1 or 3 channels), where it
    runs far slower than the matrix products over unfolded patches (benchmarks/RESULTS.md, section "Per-example
    convolution gradients on CPU"); on CUDA those products are faster."""
    if a4.device.type == "cpu" and a4.shape[1] // geo.groups > 4:
        return _per_example_grouped
    return _per_example_unfolded


def _conv_per_example(m: Convolution, a: Tensor, g: Tensor, names: Names) -> Grads:
    a4, g4, geo = _conv_2d(m, a, g)
    out: Grads = {}
    if "weight" in names:
        kernel = _per_example_kernel(a4, geo)
        out["weight"] = kernel(a4, g4, geo, _conv_weight_shape_2d(m)).reshape(a4.shape[0], *m.weight.shape)
    if "bias" in names:
        out["bias"] = _bias_per_example(g4)  # [B, C_out]
    return out


CONVOLUTION: LayerRule[Convolution] = LayerRule(
    (nn.Conv1d, nn.Conv2d), _conv_check, _conv_materialised_cost, _conv_per_example,
    GhostRule(_conv_ghost_cost, _conv_sq_norms, _conv_weighted_sum, _conv_pair_dots))
