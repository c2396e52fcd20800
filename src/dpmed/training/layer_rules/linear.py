"""The layer rule of ``nn.Linear``: a [B, *, d_in], g [B, *, d_out]; the positions * are flattened to T (T = 1 for a
plain batch of vectors).

grad_i W = sum_t g_it a_it^T; its squared norm is the ghost norm sum_{t,s} (a_it . a_is) (g_it . g_is)
(Goodfellow 2015; Li et al. 2021 for sequences), which for T = 1 is ||a_i||^2 ||g_i||^2.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from dpmed.errors import PrivacyError
from dpmed.training.layer_rules.rule import GhostRule, Grads, LayerRule, Names, accept, split_batch

__all__ = ["LINEAR"]


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
            for s in split_batch(a3.shape[0], a3.shape[1] ** 2, a3.device):
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
        for s in split_batch(len(left), t * t + t * (a3.shape[2] + g3.shape[2]), a3.device):
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


LINEAR = LayerRule((nn.Linear,), accept, _linear_materialised_cost, _linear_per_example,
                   GhostRule(_linear_ghost_cost, _linear_sq_norms, _linear_weighted_sum, _linear_pair_dots))
