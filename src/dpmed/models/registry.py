"""The registry of DP-compatible architectures: frozen info objects drive both the code and the tests."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from dpmed.models.classic import ALEXNET_CAM_LAYER, VGG16_CAM_LAYER, alexnet_dp, vgg16_dp
from dpmed.models.flat_cnn import FlatCNN
from dpmed.models.scatternet import scatternet_cnn, scatternet_linear
from dpmed.models.small_cnn import SmallCNN
from dpmed.models.standardized import weight_standardize
from dpmed.names import MODEL_NAMES, check_registry

__all__ = ["ModelInfo", "MODELS", "build_model", "list_models"]


@dataclass(frozen=True)
class ModelInfo:
    """name: the study file's ``model.name``. build(in_channels, num_outputs, image_size) -> module.
    cam_layer: dotted name of the layer Grad-CAM reads (METHODS.md s.6). head: the classifier's module, which
    weights from a file may leave at its initialisation (another class count) and ``model.trainable: head`` trains.
    blocks: the feature blocks in forward order, each the module names it holds, for ``model.trainable:
    {last_blocks: N}`` (`dpmed.models.weights`); parameters in no block and outside the head (a stem) train only
    with ``trainable: all``. square: built for S x S images only (S = image_size, the height), by a head over the
    flattened map or a fixed transform of that size; `dpmed.suitability.check_fit` refuses other images before training,
    where the models with global pooling take any. torchvision: built from torchvision's modules, so building it
    imports torchvision (`dpmed.models.installation.needs_torchvision`)."""

    name: str
    build: Callable[[int, int, int], nn.Module]
    cam_layer: str
    description: str
    head: str = "head"
    blocks: tuple[tuple[str, ...], ...] = ()
    square: bool = False
    torchvision: bool = False


_SMALL_CNN_BLOCKS = (("features.0",), ("features.2",), ("features.4",), ("features.6",))


def _imported(module: str, name: str) -> Callable[[int, int, int], nn.Module]:
    """The builder ``module.name``, imported when a model is built. The ResNets subclass torchvision's blocks, and
    importing any of torchvision imports all of it (torch._dynamo too, through torchvision.ops): seconds in every
    process that imports the registry, which is every `dpmed` command that reads a study, for models few use."""
    return lambda c, k, s: getattr(importlib.import_module(module), name)(c, k, s)


_resnet9 = _imported("dpmed.models.resnet9", "resnet9_gn_mish")


def _resnet_blocks(per_stage: int) -> tuple[tuple[str, ...], ...]:
    """torchvision ResNet residual blocks, layer1.0 ... layer4.<per_stage - 1> (the stem conv1/bn1 is in none)."""
    return tuple((f"layer{stage}.{i}",) for stage in range(1, 5) for i in range(per_stage))


MODELS: dict[str, ModelInfo] = {
    info.name: info
    for info in (
        ModelInfo("small_cnn", lambda c, k, s: SmallCNN(c, k), "features",
                  "4-block GroupNorm CNN, ~60k parameters; fast on CPU", blocks=_SMALL_CNN_BLOCKS),
        ModelInfo("flat_cnn", FlatCNN, "features",
                  "2-block GroupNorm CNN with a flattened linear head (no global pooling): memorises single images "
                  "quickly, the model of the privacy-audit demo; 8 S^2 K + 5k parameters for S x S images",
                  blocks=(("features.0", "features.1"), ("features.4", "features.5")), square=True),
        ModelInfo("resnet9", _resnet9, "layer4",
                  "ResNet-9 of Tayebi Arasteh, Ziller et al. 2023 (Klause et al. 2022): torchvision ResNet, one "
                  "BasicBlock per stage, GroupNorm(32), Mish, no in-place ops; 4.9M parameters", head="fc",
                  blocks=_resnet_blocks(1), torchvision=True),
        ModelInfo("resnet18", _imported("dpmed.models.resnet", "resnet18_gn"), "layer4",
                  "torchvision ResNet-18, GroupNorm(32), no in-place ops; 11M parameters", head="fc",
                  blocks=_resnet_blocks(2), torchvision=True),
        ModelInfo("alexnet", alexnet_dp, ALEXNET_CAM_LAYER,
                  "torchvision AlexNet features (Naidu et al. 2021), out-of-place ReLU, GAP + linear head; "
                  "2.5M parameters", blocks=tuple((f"features.{i}",) for i in (0, 3, 6, 8, 10)), torchvision=True),
        ModelInfo("vgg16", vgg16_dp, VGG16_CAM_LAYER,
                  "torchvision VGG-16 features (Naidu et al. 2021), no BatchNorm, out-of-place ReLU, GAP + "
                  "linear head; 14.7M parameters",
                  blocks=tuple((f"features.{i}",) for i in (0, 2, 5, 7, 10, 12, 14, 17, 19, 21, 24, 26, 28)),
                  torchvision=True),
        # The private training recipe (METHODS.md s.9): weight standardisation + GroupNorm (Qiao et al. 2019;
        # De et al. 2022), and handcrafted scattering features (Tramer and Boneh 2021).
        ModelInfo("small_cnn_ws", lambda c, k, s: weight_standardize(SmallCNN(c, k)), "features",
                  "small_cnn with weight-standardised convolutions before each GroupNorm (De et al. 2022)",
                  blocks=_SMALL_CNN_BLOCKS),
        ModelInfo("resnet9_ws", lambda c, k, s: weight_standardize(_resnet9(c, k, s)), "layer4",
                  "resnet9 with weight-standardised convolutions before each GroupNorm (De et al. 2022)", head="fc",
                  blocks=_resnet_blocks(1), torchvision=True),
        ModelInfo("scatternet_linear", scatternet_linear, "features",
                  "frozen scattering transform (J=2, L=8), GroupNorm, linear head (Tramer and Boneh 2021); "
                  "81 C (S/4)^2 K parameters", blocks=(("norm",),), square=True),
        ModelInfo("scatternet_cnn", scatternet_cnn, "features",
                  "frozen scattering transform (J=2, L=8), GroupNorm, two-block GroupNorm CNN head (Tramer and "
                  "Boneh 2021); 84k parameters for grey images",
                  blocks=(("norm",), ("features.0", "features.1"), ("features.4", "features.5")), square=True),
    )
}


check_registry("model", MODELS, MODEL_NAMES)


def list_models() -> list[str]:
    return sorted(MODELS)


def build_model(name: str, *, in_channels: int, num_outputs: int, image_size: int,
                seed: int | None = None) -> nn.Module:
    """Build a freshly initialised model. With ``seed``, its initialisation is drawn from torch's CPU generator
    seeded with it inside a fork of that generator: the same weights wherever and whenever it is built, and the
    caller's global random state is left as it was (a later draw of the caller's, or of a test, does not depend on
    whether a model was built before it). Only the CPU generator is seeded, as models are built on the CPU:
    ``torch.manual_seed`` would also reseed every CUDA generator, outside the fork. Without ``seed`` it draws from,
    and so moves, the global generator itself: for callers that seed that generator themselves (tests)."""
    if name not in MODELS:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(list_models())}")
    build = MODELS[name].build
    if seed is None:
        return build(in_channels, num_outputs, image_size)
    with torch.random.fork_rng(devices=[]):
        torch.random.default_generator.manual_seed(seed)
        return build(in_channels, num_outputs, image_size)
