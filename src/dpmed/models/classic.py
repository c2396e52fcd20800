"""AlexNet and VGG-16, the architectures of 001_d0483fd35863b74c.txt, made DP-compatible.

torchvision's convolutional feature stacks are kept layer for layer (so the Grad-CAM target layers keep torchvision's
names: AlexNet ``features.11``, VGG-16 ``features.29``, the ReLU after the last convolution, METHODS.md s.6), with
four changes, each for a stated reason:

* **No in-place ops.** torchvision builds ``ReLU(inplace=True)``; Opacus's backward hooks reject in-place ops inside
  hooked modules (meta-pytorch/opacus#828), and an in-place ReLU would also overwrite the activation a CAM hook
  stores. Every ReLU is switched to out-of-place; the arithmetic is unchanged.
* **No BatchNorm.** torchvision's plain ``alexnet`` and ``vgg16`` have none (``vgg16_bn`` would mix the examples of
  a batch, which per-example clipping forbids); a test asserts it for every registered model.
* **Any input channels and size.** The first convolution takes ``in_channels`` (grey X-rays: 1). Below 128 px the
  AlexNet stem (11x11, stride 4, made for 224 px) becomes 5x5 stride 1, and any max-pool that would leave a map
  smaller than 2x2 becomes an identity, so 28 px (MedMNIST) and 64 px (the phantom) images keep a spatial map for
  Grad-CAM to localise on.
* **A small head.** torchvision's 4096-wide fully connected head (58M of AlexNet's 61M and 124M of VGG-16's 138M
  parameters) is sized for 1000 ImageNet classes at 224 px; under DP-SGD the noise grows with the parameter count
  (Tramer & Boneh 2021), and 001_d0483fd35863b74c.txt reports its AlexNet at "~2M parameters", i.e. the convolutional
  features with a small head. Here: global average pooling and one linear layer (AlexNet 2.5M, VGG-16 14.7M
  parameters).

Weights are randomly initialised: ImageNet weights would have to be re-learned for one grey channel and new head.
"""

from __future__ import annotations

from torch import Tensor, nn

__all__ = ["alexnet_dp", "vgg16_dp", "ALEXNET_CAM_LAYER", "VGG16_CAM_LAYER"]

ALEXNET_CAM_LAYER = "features.11"   # ReLU after the last (5th) convolution
VGG16_CAM_LAYER = "features.29"     # ReLU after the last (13th) convolution


class _FeaturesHead(nn.Module):
    """features -> global average pool -> linear: in [B, C, H, W] -> logits [B, num_outputs]."""

    def __init__(self, features: nn.Sequential, width: int, num_outputs: int) -> None:
        super().__init__()
        self.features = features
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(width, num_outputs)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.pool(self.features(x)).flatten(1))     # [B, width, h, w] -> [B, width] -> [B, K]


def _out_size(layer: nn.Module, size: int) -> int:
    """Spatial size after a conv or pool layer (square maps); other layers keep it."""
    if not isinstance(layer, (nn.Conv2d, nn.MaxPool2d)):
        return size
    k, s, p = (getattr(layer, name) for name in ("kernel_size", "stride", "padding"))
    k, s, p = (v[0] if isinstance(v, tuple) else v for v in (k, s, p))
    return (size + 2 * p - k) // s + 1


def _fit(features: nn.Sequential, image_size: int) -> nn.Sequential:
    """Out-of-place ReLUs; max-pools that would leave a map below 2x2 replaced by identities (indices kept)."""
    size = image_size
    for i, layer in enumerate(features):
        if isinstance(layer, nn.ReLU):
            features[i] = nn.ReLU(inplace=False)
        elif isinstance(layer, nn.MaxPool2d) and _out_size(layer, size) < 2:
            features[i] = nn.Identity()
            continue
        size = _out_size(layer, size)
    return features


def alexnet_dp(in_channels: int, num_outputs: int, image_size: int) -> nn.Module:
    """AlexNet (Krizhevsky et al. 2012, torchvision's single-GPU variant): five convolutions, DP-compatible."""
    from torchvision.models import AlexNet   # here: torchvision imports torch._dynamo, seconds (models/registry.py)

    features = AlexNet().features
    if image_size < 128:
        features[0] = nn.Conv2d(in_channels, 64, kernel_size=5, stride=1, padding=2)
    else:
        features[0] = nn.Conv2d(in_channels, 64, kernel_size=11, stride=4, padding=2)
    return _FeaturesHead(_fit(features, image_size), 256, num_outputs)


def vgg16_dp(in_channels: int, num_outputs: int, image_size: int) -> nn.Module:
    """VGG-16 (Simonyan & Zisserman 2015, configuration D): thirteen 3x3 convolutions, no BatchNorm."""
    from torchvision.models.vgg import cfgs, make_layers

    features = make_layers(cfgs["D"], batch_norm=False)
    features[0] = nn.Conv2d(in_channels, 64, kernel_size=3, padding=1)
    model = _FeaturesHead(_fit(features, image_size), 512, num_outputs)
    for m in model.modules():   # torchvision VGG's initialisation (its constructor is bypassed here)
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if m.bias is not None:      # every conv of make_layers has one
                nn.init.zeros_(m.bias)
    return model
