"""torchvision ResNet-18 made DP-compatible: GroupNorm for BatchNorm, and no in-place operations.

* BatchNorm mixes the examples of a batch, so per-example gradients (and DP-SGD's clipping) lose their meaning; we
  build the network with GroupNorm from the start (Kolesnikov et al. 2020 and 003_9a91354dc2d7e2df.txt use
  GroupNorm for DP training).
* Opacus >= 1.5.4 registers full backward hooks, which reject in-place ops inside hooked modules: torchvision's
  BasicBlock uses ``ReLU(inplace=True)`` and ``out += identity`` (meta-pytorch/opacus#828). `_BasicBlock` below is
  torchvision's block with those two replaced; the arithmetic is identical.
* Small inputs (<= 64 px) get the CIFAR-style stem (3x3 stride-1 conv, no max-pool), as MedMNIST's ResNet-18 (28)
  does, so a 28x28 image is not reduced to 1x1 before the last stage.
"""

from __future__ import annotations

from torch import Tensor, nn
from torchvision.models.resnet import BasicBlock, ResNet

__all__ = ["resnet18_gn"]


class _BasicBlock(BasicBlock):
    def forward(self, x: Tensor) -> Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


def _group_norm(channels: int) -> nn.GroupNorm:
    return nn.GroupNorm(min(32, channels), channels)


def resnet18_gn(in_channels: int, num_outputs: int, image_size: int) -> ResNet:
    """ResNet-18 (He et al. 2016) with GroupNorm(32), any input channels and output count. Randomly initialised:
    ImageNet weights carry BatchNorm statistics that GroupNorm cannot use."""
    model = ResNet(_BasicBlock, [2, 2, 2, 2], num_classes=num_outputs, norm_layer=_group_norm)
    if image_size <= 64:
        model.conv1 = nn.Conv2d(in_channels, 64, 3, stride=1, padding=1, bias=False)
        model.maxpool = nn.Identity()
    elif in_channels != 3:
        model.conv1 = nn.Conv2d(in_channels, 64, 7, stride=2, padding=3, bias=False)
    for module in model.modules():
        if isinstance(module, nn.ReLU):
            module.inplace = False
    return model
