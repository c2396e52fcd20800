"""The registry of DP-compatible architectures: frozen info objects drive both the code and the tests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from torch import nn

from dpmed.models.resnet import resnet18_gn
from dpmed.models.small_cnn import SmallCNN

__all__ = ["ModelInfo", "MODELS", "build_model", "list_models"]


@dataclass(frozen=True)
class ModelInfo:
    """name: the study file's ``model.name``. build(in_channels, num_outputs, image_size) -> module.
    cam_layer: dotted name of the layer Grad-CAM reads (METHODS.md s.6)."""

    name: str
    build: Callable[[int, int, int], nn.Module]
    cam_layer: str
    description: str


MODELS: dict[str, ModelInfo] = {
    info.name: info
    for info in (
        ModelInfo("small_cnn", lambda c, k, s: SmallCNN(c, k), "features",
                  "4-block GroupNorm CNN, ~60k parameters; fast on CPU"),
        ModelInfo("resnet18", resnet18_gn, "layer4",
                  "torchvision ResNet-18, GroupNorm(32), no in-place ops; 11M parameters"),
    )
}


def list_models() -> list[str]:
    return sorted(MODELS)


def build_model(name: str, *, in_channels: int, num_outputs: int, image_size: int) -> nn.Module:
    """Build a freshly initialised model. Initialisation draws from torch's global generator: callers that need
    reproducibility wrap this in ``torch.random.fork_rng()`` and seed inside, leaving the caller's state alone."""
    if name not in MODELS:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(list_models())}")
    return MODELS[name].build(in_channels, num_outputs, image_size)
