"""The layer rules of ``nn.GroupNorm`` and ``nn.LayerNorm``: per-example gradients of the affine parameters are sums of
g * x_hat and of g, as small as the parameters themselves, so they are always materialised (no ghost route). x_hat
is recomputed from the input (no affine). BatchNorm has no rule: it mixes the examples of a batch.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from dpmed.training.layer_rules.rule import Grads, LayerRule, Names, accept

__all__ = ["GROUP_NORM", "LAYER_NORM"]


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


GROUP_NORM = LayerRule((nn.GroupNorm,), accept, _norm_cost, _group_norm_per_example)
LAYER_NORM = LayerRule((nn.LayerNorm,), accept, _norm_cost, _layer_norm_per_example)
