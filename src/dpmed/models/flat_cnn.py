"""A small GroupNorm CNN with a flattened head: a model that memorises, for audits.

Two conv blocks (conv 3x3 -> GroupNorm -> ReLU, one stride-2 pooling) and a linear head on the *flattened* feature
map, with no global pooling. ``small_cnn`` pools globally, which makes it blind to where a pattern sits and slow to
memorise single images; this one sees every position and memorises single training images within a few hundred
steps. That is what the one-run privacy audit (`dpmed.audit`) needs to show its power: without DP the
model leaks which canaries it was trained on, with DP-SGD it must not. Square images only (``image_size``).
"""

from __future__ import annotations

from torch import Tensor, nn

__all__ = ["FlatCNN"]


class FlatCNN(nn.Module):
    """in [B, C, S, S] -> logits [B, num_outputs]. ``features`` ends at the last conv block (the Grad-CAM layer)."""

    def __init__(self, in_channels: int, num_outputs: int, image_size: int, width: int = 16, groups: int = 4) -> None:
        super().__init__()
        if image_size < 2:
            raise ValueError(f"image_size must be >= 2 (one 2x2 pooling), got {image_size}")
        w = width
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, w, 3, padding=1, bias=False), nn.GroupNorm(groups, w), nn.ReLU(),
            nn.AvgPool2d(2),                                                     # [B, w, S/2, S/2]
            nn.Conv2d(w, 2 * w, 3, padding=1, bias=False), nn.GroupNorm(groups, 2 * w), nn.ReLU(),
        )                                                                        # [B, 2w, S/2, S/2]
        self.head = nn.Linear(2 * w * (image_size // 2) ** 2, num_outputs)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.features(x).flatten(1))                           # [B, 2w * (S/2)^2] -> [B, K]
