"""The groups (patients) of a batch as the clipping engine lays them out: each example's group, the lone examples,
the others group by group, every pair within a group, and chunks of whole groups. Checked against the definitions
on a batch with groups of 1, 2 and 3 examples under unsorted, non-contiguous ids."""

from __future__ import annotations

import pytest
import torch

from dpmed.training.grouping import Grouping, group_index

IDS = torch.tensor([42, -3, 42, 7, 100, -3, 42])      # 42: examples 0, 2, 6; -3: 1, 5; 7 and 100 alone


def test_group_index_numbers_the_groups_in_order_of_their_ids():
    index, count = group_index(IDS, len(IDS))
    assert count == 4
    assert index.tolist() == [2, 0, 2, 1, 3, 0, 2]    # sorted ids: -3, 7, 42, 100


def test_group_index_refuses_a_wrong_shape_or_non_integer_ids():
    with pytest.raises(ValueError, match="one group id per example"):
        group_index(IDS[:3], len(IDS))
    for bad in (IDS.float(), IDS > 0):
        with pytest.raises(ValueError, match="integer ids"):
            group_index(bad, len(IDS))


def test_the_layout_follows_the_definitions():
    g = Grouping.of(IDS, len(IDS), torch.device("cpu"))
    assert g.count == 4 and g.lone.tolist() == [3, 4]
    assert g.shared.tolist() == [1, 5, 0, 2, 6]                     # group by group, in group order
    assert g.shared_ids.tolist() == [0, 2] and g.shared_sizes == (2, 3)
    assert g.shared_local.tolist() == [0, 0, 1, 1, 1]
    pairs = sorted(zip(g.pair_left.tolist(), g.pair_right.tolist(), g.pair_group.tolist(), strict=True))
    assert pairs == [(0, 2, 2), (0, 6, 2), (1, 5, 0), (2, 6, 2)]   # every i < j of one group, with its group
    per_example = torch.arange(7.0)[:, None] * torch.ones(1, 2)     # [B, 2]
    assert g.sum(per_example)[:, 0].tolist() == [1 + 5, 3, 0 + 2 + 6, 4]


@pytest.mark.parametrize("elements, budget, expected", [(1, None, [[0, 2]]), (4 * 10**6, None, [[0], [2]]),
                                                     (10, 1, [[0], [2]]), (1, 5, [[0, 2]]), (1, 4, [[0], [2]])])
def test_shared_chunks_hold_whole_groups_within_the_budget(elements, budget, expected, monkeypatch):
    """At 2^24 elements both groups (5 examples) fit when an example has one element; at 4e6 elements per example
    only 4 examples fit, so one group at a time; with a budget below one example each group still goes whole; a
    budget of exactly the 5 examples holds both groups, one of 4 does not."""
    if budget is not None:
        monkeypatch.setattr("dpmed.training.grouping.GROUP_CHUNK_ELEMENTS", budget)
    g = Grouping.of(IDS, len(IDS), torch.device("cpu"))
    chunks = list(g.shared_chunks(elements))
    assert [ids.tolist() for _, _, ids in chunks] == expected
    rows = torch.cat([r for r, _, _ in chunks])
    assert rows.tolist() == g.shared.tolist()                        # every multi-image example once, in order
    for r, local, ids in chunks:
        assert (g.index[r] == ids[local]).all()                     # local indexes the chunk's groups
