"""The groups (patients) of one batch for user-level clipping, laid out for the clipping engine's tape.

Where the patient is the unit of privacy, each patient's gradients over their images are summed and that sum is
clipped (McMahan et al. 2018, "Learning differentially private recurrent language models"; see
:mod:`dpmed.training.clipping`). The engine needs, per batch: each example's group, the examples alone in their group
(they keep the image-level route), the others group by group, and every pair of examples of one group (whose ghost
dot products make up the norm of the group's sum). :class:`Grouping` lays these out once per batch, on the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["group_index", "Grouping", "GROUP_CHUNK_ELEMENTS"]

# Per-example gradients of multi-image groups materialised at one time, per layer (elements; 2^24 float32 = 64 MiB).
# A group larger than this still goes in one piece: the engine norms a group from all of its images at once (the
# step hands it none of more than physical_batch_size images: `DpSgdStep._clipped_unit` takes those in slices).
GROUP_CHUNK_ELEMENTS = 1 << 24


def group_index(groups: Tensor, batch: int) -> tuple[Tensor, int]:
    """(index [B] in 0..P-1, P) for the group ids of a batch of B examples: any integers, in any order."""
    if groups.shape != (batch,):
        raise ValueError(f"groups must hold one group id per example, shape ({batch},); got {tuple(groups.shape)}")
    if groups.is_floating_point() or groups.is_complex() or groups.dtype == torch.bool:
        raise ValueError(f"groups must be integer ids (int64), got {groups.dtype}")
    ids, index = torch.unique(groups, return_inverse=True)
    return index, len(ids)


@dataclass(frozen=True)
class Grouping:
    """The groups (patients) of one chunk, laid out for the tape: the lone examples, and the others group by group.

    index [B]: each example's group in 0..P-1; lone [B1]: examples alone in their group; shared [M]: the others,
    group by group; shared_local [M]: each one's group among the multi-image groups, 0..Q-1; shared_ids [Q]: those
    groups' indices in 0..P-1; shared_sizes: their sizes, in that order (Python ints: chunking needs no device sync);
    pair_left, pair_right, pair_group [R]: every pair i < j of examples of one group, and that group's index.
    """

    index: Tensor
    count: int
    lone: Tensor
    shared: Tensor
    shared_local: Tensor
    shared_ids: Tensor
    shared_sizes: tuple[int, ...]
    pair_left: Tensor
    pair_right: Tensor
    pair_group: Tensor

    @classmethod
    def of(cls, groups: Tensor, batch: int, device: torch.device) -> Grouping:
        """Laid out on the CPU (a few hundred integers: no kernels, no syncs on an accelerator), then moved."""
        index, count = group_index(groups.cpu(), batch)
        sizes = torch.bincount(index, minlength=count)                              # [P]
        in_shared = sizes[index] > 1                                                # [B]
        order = torch.argsort(index, stable=True)                                   # examples group by group
        shared = order[in_shared[order]]                                            # [M]
        shared_ids = torch.nonzero(sizes > 1).squeeze(1)                            # [Q], ascending like `order`
        local = torch.full((count,), -1, dtype=torch.int64)
        local[shared_ids] = torch.arange(len(shared_ids))
        lone = torch.nonzero(~in_shared).squeeze(1)
        shared_sizes = tuple(sizes[shared_ids].tolist())
        blocks, start = [], 0
        for k in shared_sizes:
            blocks.append(shared[start + torch.triu_indices(k, k, 1)])                # [2, k (k - 1) / 2]
            start += k
        pairs = torch.cat(blocks, 1) if blocks else torch.zeros(2, 0, dtype=torch.int64)
        return cls(index.to(device), count, lone.to(device), shared.to(device), local[index[shared]].to(device),
                   shared_ids.to(device), shared_sizes, pairs[0].to(device), pairs[1].to(device),
                   index[pairs[0]].to(device))

    def sum(self, t: Tensor) -> Tensor:
        """Per-example [B, *] -> per-group sums [P, *]."""
        return t.new_zeros(self.count, *t.shape[1:]).index_add_(0, self.index, t)

    def shared_chunks(self, elements_per_example: int):
        """(rows [m], local [m] in 0..n-1, ids [n]) for runs of whole multi-image groups with at most
        ``GROUP_CHUNK_ELEMENTS`` elements of per-example gradients each, or one group if it alone is larger."""
        budget = max(1, GROUP_CHUNK_ELEMENTS // max(1, elements_per_example))
        start, first, size = 0, 0, 0
        for i, k in enumerate((*self.shared_sizes, None)):
            if size and (k is None or size + k > budget):
                rows = slice(start, start + size)
                yield self.shared[rows], self.shared_local[rows] - first, self.shared_ids[first:i]
                start, first, size = start + size, i, 0
            size += k or 0
