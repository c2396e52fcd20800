"""ResNet-9 of 003_9a91354dc2d7e2df.txt: torchvision's ResNet with one BasicBlock per stage, GroupNorm(32), Mish.

That paper trains "the ResNet9 architecture introduced in" Klause et al. 2022 for DP-SGD on chest radiographs: a
7x7 convolution to 64 channels, four residual stages (64, 128, 256, 512 channels) of one basic block each, global
average pooling and a linear layer from 512 features; GroupNorm with 32 groups in place of BatchNorm "to be
compatible with DP processing", and Mish (Misra 2020) "as the activation function in all layers". With 3 input
channels this has 4.9M trainable parameters, the count the paper gives. Here it is built from torchvision's
``ResNet`` and ``BasicBlock`` (so layer names match ResNet-18's: Grad-CAM reads ``layer4``, the last block), with:

* no in-place operations (Opacus's backward hooks reject them, meta-pytorch/opacus#828): the block's residual sum is
  out of place and Mish is never in place;
* any number of input channels; inputs of 64 px or less keep the 7x7 stem at stride 1 and skip the max-pool, so a
  28 px image is not reduced to 1x1 before the last stage (as MedMNIST's small-input ResNets do).

The benchmarks run the model registered as ``resnet9``, i.e. this one.
"""

from __future__ import annotations

from torch import Tensor, nn
from torchvision.models.resnet import BasicBlock, ResNet

__all__ = ["resnet9_gn_mish"]


class _MishBlock(BasicBlock):
    """torchvision's BasicBlock with Mish for ReLU and an out-of-place residual sum; otherwise identical."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.relu = nn.Mish()

    def forward(self, x: Tensor) -> Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))           # bn1/bn2 are GroupNorm(32) (torchvision's names)
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


def _group_norm(channels: int) -> nn.GroupNorm:
    return nn.GroupNorm(32, channels)


def resnet9_gn_mish(in_channels: int, num_outputs: int, image_size: int) -> ResNet:
    """in [B, C, H, W] -> logits [B, num_outputs]; randomly initialised (MIMIC-CXR pretraining is not bundled)."""
    model = ResNet(_MishBlock, [1, 1, 1, 1], num_classes=num_outputs, norm_layer=_group_norm)
    small = image_size <= 64
    model.conv1 = nn.Conv2d(in_channels, 64, 7, stride=1 if small else 2, padding=3, bias=False)
    if small:
        model.maxpool = nn.Identity()
    model.relu = nn.Mish()
    return model
