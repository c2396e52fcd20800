"""The layer rule of ``nn.Embedding``: a = indices [B, *] (T positions), g [B, *, D]. Example i's gradient adds g_it to
row a_it, so ||grad_i E||^2 = sum_{t,s} [a_it = a_is] (g_it . g_is); the padding row gets no gradient (torch's rule).
Settings whose gradient is not that of a plain lookup (max_norm, scale_grad_by_freq, sparse) are refused.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from dpmed.errors import PrivacyError
from dpmed.training.layer_rules.rule import GhostRule, Grads, LayerRule, Names, split_batch

__all__ = ["EMBEDDING"]


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
    for s in split_batch(idx.shape[0], 2 * idx.shape[1] ** 2, g3.device):
        same = (idx[s].unsqueeze(2) == idx[s].unsqueeze(1)).to(g3.dtype)        # [b, T, T]
        sq[s] += (torch.bmm(g3[s], g3[s].transpose(1, 2)) * same).sum((1, 2))
    return sq


def _embedding_pair_dots(m: nn.Embedding, a: Tensor, g: Tensor, names: Names, left: Tensor,
                         right: Tensor) -> Tensor:
    idx, g3 = _embedding_3d(m, a, g)
    t = idx.shape[1]
    dots = g3.new_zeros(len(left))
    for s in split_batch(len(left), 2 * t * t + 2 * t * g3.shape[2], g3.device):
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


EMBEDDING = LayerRule((nn.Embedding,), _embedding_check, _embedding_materialised_cost, _embedding_per_example,
                      GhostRule(_embedding_ghost_cost, _embedding_sq_norms, _embedding_weighted_sum,
                                _embedding_pair_dots), frozenset({"weight"}))
