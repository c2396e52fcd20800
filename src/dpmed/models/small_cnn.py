"""A small GroupNorm CNN: the fast default for CPU studies.

Four conv blocks (conv 3x3 -> GroupNorm -> ReLU, stride-2 pooling), global *max* pooling and a linear head.
GroupNorm instead of BatchNorm because BatchNorm mixes examples within a batch, which breaks per-example clipping
in DP-SGD (Abadi et al. 2016; the Opacus ModuleValidator rejects it for the same reason).

Max, not average, pooling at the end: GroupNorm gives every image's feature map a fixed mean and spread per group,
so their spatial *average* hardly varies between images and a small lesion is averaged away; "is there a finding
anywhere" is a maximum. On the quickstart, average pooling left the non-private model's test scores in a narrow
band; max pooling spreads them over nearly all of [0, 1] and raises the AUROC of every arm, DP-SGD included
(measured in benchmarks/RESULTS.md, section "small_cnn's global max pooling").
"""

from __future__ import annotations

from torch import Tensor, nn

__all__ = ["SmallCNN"]


def _block(cin: int, cout: int, groups: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False),
        nn.GroupNorm(groups, cout),
        nn.ReLU(),
    )


class SmallCNN(nn.Module):
    """in [B, C, H, W] -> logits [B, num_outputs]. ``features`` ends at the last conv block (the Grad-CAM layer)."""

    def __init__(self, in_channels: int, num_outputs: int, width: int = 16, groups: int = 4) -> None:
        super().__init__()
        w = width
        self.features = nn.Sequential(
            _block(in_channels, w, groups), nn.AvgPool2d(2),      # [B, w, H/2, W/2]
            _block(w, 2 * w, groups), nn.AvgPool2d(2),            # [B, 2w, H/4, W/4]
            _block(2 * w, 4 * w, groups), nn.AvgPool2d(2),        # [B, 4w, H/8, W/8]
            _block(4 * w, 4 * w, groups),                         # [B, 4w, H/8, W/8]
        )
        self.pool = nn.AdaptiveMaxPool2d(1)
        self.head = nn.Linear(4 * w, num_outputs)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.pool(self.features(x)).flatten(1))
