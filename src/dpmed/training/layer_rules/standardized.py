"""The layer rule of :class:`dpmed.models.standardized.WSConv2d`, a convolution with a weight-standardised kernel
(Qiao et al. 2019; the normalisation of De et al. 2022's DP-SGD WideResNets).

DP-SGD clips the per-example gradients of the trainable *raw* weights W. Per output channel c (n = C_in / G * kh kw
values) the kernel used is w_hat = (w - mean w) / s, s = sqrt(var w + eps), so by the chain rule

    grad_i w = J^T grad_i w_hat,   J^T = (1/s) P,   P = I - 1 1^T / n - w_hat w_hat^T / n      (P symmetric)

(the standard WS backward, the layer-norm backward applied to a kernel); grad_i w_hat is the convolution rule's
per-example gradient. J is the same for every example (it depends on the weights only), so:

* materialised: the convolution's per-example gradients, then P / s applied to each;
* clipped sum: sum_i c_i grad_i w = J^T sum_i c_i grad_i w_hat, the convolution's book-kept sum, then J^T once;
* ghost norm: with g = grad_i w_hat[c], 1.g and k = w_hat.g / n (w_hat . 1 = 0),
  ||P g||^2 = ||g||^2 - (1.g)^2 / n - k^2 (2n - ||w_hat||^2), and <P g, P h> likewise for a pair of examples.
  ||g||^2 per channel is the convolution's ghost norm kept per output channel, g_c^T AA g_c with AA the patch Gram
  matrix; 1.g = sum_t g_tc (sum of patch t's values), a convolution of the input with a kernel of ones; and
  w_hat.g = sum_t g_tc z_tc with z = conv(a, w_hat) the layer's output before its bias, recomputed here (one
  forward convolution of the layer: the ghost route costs that on top of the Gram matrices).

The bias is not standardised: its rule is the convolution's.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from dpmed.models.standardized import WSConv2d, standardize
from dpmed.training.layer_rules.convolution import (_ConvGeometry, _bias_per_example, _conv_2d, _conv_check,
                                                    _conv_dims, _conv_ghost_cost, _conv_gram_costs,
                                                    _conv_materialised_cost, _conv_per_example, _conv_weighted_sum,
                                                    _patch_gram_by_pixels, _patch_gram_unfolded)
from dpmed.training.layer_rules.rule import GhostRule, Grads, LayerRule, Names, split_batch

__all__ = ["WS_CONVOLUTION"]


def _kernel(m: WSConv2d, like: Tensor) -> tuple[Tensor, Tensor]:
    """(w_hat [C_out, n], s [C_out]) of the layer's current weights, exactly as its forward computes them, in the
    dtype of ``like`` (the engine takes ghost norms in float64 from a float32 layer)."""
    w_hat, s = standardize(m.weight.detach(), m.eps)
    return w_hat.reshape(w_hat.shape[0], -1).to(like.dtype), s.to(like.dtype)


def _apply_jacobian(grad_w_hat: Tensor, w_hat: Tensor, s: Tensor) -> Tensor:
    """J^T G = (G - mean(G) - w_hat mean(G w_hat)) / s per output channel; G [..., C_out, n] -> [..., C_out, n]."""
    mean = grad_w_hat.mean(-1, keepdim=True)
    along = (grad_w_hat * w_hat).mean(-1, keepdim=True)
    return (grad_w_hat - mean - w_hat * along) / s.unsqueeze(-1)


def _ws_per_example(m: WSConv2d, a: Tensor, g: Tensor, names: Names) -> Grads:
    out = _conv_per_example(m, a, g, names)                                     # grads of w_hat and of the bias
    if "weight" in names:
        per = out["weight"]                                                     # [B, C_out, C_in/G, kh, kw]
        w_hat, s = _kernel(m, per)
        out["weight"] = _apply_jacobian(per.reshape(per.shape[0], *w_hat.shape), w_hat, s).view_as(per)
    return out


def _ws_weighted_sum(m: WSConv2d, a: Tensor, g: Tensor, c: Tensor, names: Names) -> Grads:
    out = _conv_weighted_sum(m, a, g, c, names)
    if "weight" in names:
        w_hat, s = _kernel(m, out["weight"])
        out["weight"] = _apply_jacobian(out["weight"].reshape(w_hat.shape), w_hat, s).view_as(m.weight)
    return out


def _ws_materialised_cost(m: WSConv2d, a: Tensor, g: Tensor) -> float:
    return _conv_materialised_cost(m, a, g) + 4 * m.weight.numel()


def _ws_ghost_cost(m: WSConv2d, a: Tensor, g: Tensor) -> float:
    t, d_in, d_out = _conv_dims(m, g)
    return _conv_ghost_cost(m, a, g) + m.groups * t * d_in * (d_out + 1)        # + z and the patch sums


def _functionals(m: WSConv2d, a4: Tensor, g4: Tensor, geo: _ConvGeometry, w_hat: Tensor) -> tuple[Tensor, Tensor]:
    """(1.g, k = w_hat.g / n) per example and output channel, [B, C_out] each, g = grad_i w_hat[c]."""
    groups, n = geo.groups, w_hat.shape[1]

    def conv(w: Tensor) -> Tensor:
        return F.conv2d(a4, w, stride=geo.stride, padding=geo.padding, dilation=geo.dilation, groups=groups)

    ones = a4.new_ones(groups, a4.shape[1] // groups, *geo.kernel)
    sums = conv(ones)                                                           # [B, G, H', W']: patch sums
    b, c_out = g4.shape[:2]
    gf = g4.reshape(b, groups, c_out // groups, -1)                             # [B, G, d_out, T]
    one = (gf * sums.reshape(b, groups, 1, -1)).sum(-1).reshape(b, c_out)       # [B, C_out]
    z = conv(w_hat.view(c_out, -1, *geo.kernel))                                # [B, C_out, H', W']
    k = (g4 * z).sum((2, 3)) / n                                                # [B, C_out]
    return one, k


def _channel_dots(m: WSConv2d, a: Tensor, g: Tensor, a4: Tensor, g4: Tensor, geo: _ConvGeometry,
                  pairs: tuple[Tensor, Tensor] | None = None) -> Tensor:
    """<grad_l w_hat[c], grad_r w_hat[c]> per channel, [n, C_out]: the convolution's ghost norm (pairs None) or the
    ghost dot products of the pairs (left [n], right [n]), kept per output channel (g_l,c^T AA g_r,c, AA the patch
    Gram matrix)."""
    groups = geo.groups
    t, d_in, d_out = _conv_dims(m, g)
    unfolded, by_pixels = _conv_gram_costs(m, a, g)
    pixels = (a4.shape[2] + 2 * geo.padding[0]) * (a4.shape[3] + 2 * geo.padding[1])
    count = a4.shape[0] if pairs is None else len(pairs[0])
    per_example = groups * ((pixels * pixels if by_pixels < unfolded else 2 * d_in * t) + 3 * t * t)
    out = a4.new_zeros(count, groups, d_out)
    for s in split_batch(count, per_example, a4.device):
        l, r = (s, s) if pairs is None else (pairs[0][s], pairs[1][s])
        other = None if pairs is None else a4[r]
        if by_pixels < unfolded:
            aa = _patch_gram_by_pixels(a4[l], geo, (g4.shape[2], g4.shape[3]), other)    # [b, G, T, T]
        else:
            aa = _patch_gram_unfolded(a4[l], geo, t, other)                             # [b, G, T, T]
        gl = g4[l].reshape(aa.shape[0], groups, d_out, t)                               # [b, G, d_out, T]
        gr = g4[r].reshape(aa.shape[0], groups, d_out, t)
        out[s] = ((gl @ aa) * gr).sum(-1)                                               # [b, G, d_out]
    return out.reshape(count, groups * d_out)


def _projected(dots: Tensor, one_l: Tensor, one_r: Tensor, k_l: Tensor, k_r: Tensor, w_hat: Tensor,
               s: Tensor) -> Tensor:
    """sum_c <P g_l, P h_r> / s_c^2 from the per-channel dots and functionals, [n]."""
    n = w_hat.shape[1]
    along = 2 * n - w_hat.square().sum(1)                                       # [C_out]
    return ((dots - one_l * one_r / n - k_l * k_r * along) / s.square()).sum(1)


def _ws_sq_norms(m: WSConv2d, a: Tensor, g: Tensor, names: Names) -> Tensor:
    a4, g4, geo = _conv_2d(m, a, g)
    sq = a4.new_zeros(a4.shape[0])
    if "weight" in names:
        w_hat, s = _kernel(m, a4)
        one, k = _functionals(m, a4, g4, geo, w_hat)
        sq = sq + _projected(_channel_dots(m, a, g, a4, g4, geo), one, one, k, k, w_hat, s)
    if "bias" in names:
        sq = sq + _bias_per_example(g4).square().sum(1)
    return sq


def _ws_pair_dots(m: WSConv2d, a: Tensor, g: Tensor, names: Names, left: Tensor, right: Tensor) -> Tensor:
    a4, g4, geo = _conv_2d(m, a, g)
    dots = a4.new_zeros(len(left))
    if "weight" in names:
        w_hat, s = _kernel(m, a4)
        one, k = _functionals(m, a4, g4, geo, w_hat)
        channel = _channel_dots(m, a, g, a4, g4, geo, (left, right))
        dots = dots + _projected(channel, one[left], one[right], k[left], k[right], w_hat, s)
    if "bias" in names:
        gb = _bias_per_example(g4)  # [B, C_out]
        dots = dots + (gb[left] * gb[right]).sum(1)
    return dots


WS_CONVOLUTION = LayerRule((WSConv2d,), _conv_check, _ws_materialised_cost, _ws_per_example,
                           GhostRule(_ws_ghost_cost, _ws_sq_norms, _ws_weighted_sum, _ws_pair_dots))
