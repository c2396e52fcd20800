"""Class activation maps (CAMs) of a trained model: Grad-CAM and its relatives (METHODS.md sec. 6).

001_d0483fd35863b74c.txt asks whether DP-SGD makes a model's explanations worse; this module computes the
explanations, :mod:`dpmed.evaluation.faithfulness` scores them, :mod:`dpmed.evaluation.explanations` does both for a
run.

* CAM (Selvaraju et al. 2017): alpha_k = spatial mean of d y_c / d A_k at the target layer,
  L = ReLU(sum_k alpha_k A_k), upsampled (bilinear) to the input and divided by its max (an all-zero map stays
  zero). pytorch-grad-cam computes alpha and the weighted sum (so Grad-CAM++, XGrad-CAM, HiRes-CAM, Layer-CAM,
  Eigen-CAM and Score-CAM are one name away: :data:`CAM_METHODS`); its own rescaling (min-max per image) is replaced
  by METHODS' divide-by-max, because subtracting the minimum would change the masked input of the faithfulness
  metrics wherever the map has a floor.

CAMs are computed on a plain copy of the model (:func:`plain_copy`): an Opacus GradSampleModule wrapper, or hooks
a caller left on the model, would fire inside the CAM library's own hooks, and the library puts its model in eval
mode. The caller's model keeps its mode, parameters, gradients and hooks (a test checks this).
"""

from __future__ import annotations

import copy
import importlib
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["CamMethod", "CAM_METHODS", "plain_copy", "compute_cams", "cams_of_plain", "class_probabilities",
           "load_cam_libraries"]


@dataclass(frozen=True)
class CamMethod:
    """A CAM method: the pytorch-grad-cam class that computes its channel weights, and where it comes from."""

    name: str
    class_name: str
    reference: str


CAM_METHODS: dict[str, CamMethod] = {
    m.name: m for m in (
        CamMethod("gradcam", "GradCAM", "Selvaraju et al. 2017"),
        CamMethod("gradcam++", "GradCAMPlusPlus", "Chattopadhay et al. 2018"),
        CamMethod("xgradcam", "XGradCAM", "Fu et al. 2020"),
        CamMethod("hirescam", "HiResCAM", "Draelos & Carin 2020"),
        CamMethod("layercam", "LayerCAM", "Jiang et al. 2021"),
        CamMethod("eigencam", "EigenCAM", "Muhammad & Yeasin 2020"),
        CamMethod("scorecam", "ScoreCAM", "Wang et al. 2020"),
    )
}


_HOOK_DICTS = ("_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_forward_pre_hooks",
               "_forward_pre_hooks_with_kwargs", "_backward_hooks", "_backward_pre_hooks")


def load_cam_libraries() -> None:
    """Import what explaining loads on first use: pytorch_grad_cam (and with it OpenCV) and Opacus, whose wrapper
    :func:`plain_copy` unwraps. Seconds on a cold start, once per process, whatever the number of images: a caller
    that times a few images to scale them up to many loads these first, or scales the import with them."""
    importlib.import_module("opacus")
    importlib.import_module("pytorch_grad_cam")


def plain_copy(model: nn.Module) -> nn.Module:
    """A hook-free deep copy of ``model`` (unwrapped from an Opacus GradSampleModule), in eval mode, every parameter
    requiring grad (so gradients reach the target layer) and no ``grad`` or ``grad_sample`` carried over.

    The copy never shares a tensor with ``model``, and ``model`` is not touched: hooks are left out of the copy by
    pre-seeding deepcopy's memo with empty hook dicts, not by removing them from the original.
    """
    from opacus import GradSampleModule        # a dependency of training anyway; its subclasses are wrappers too

    if isinstance(model, GradSampleModule):
        model = model._module
    memo: dict[int, Any] = {}
    for module in model.modules():
        for name in _HOOK_DICTS:
            hooks = module.__dict__.get(name)
            if hooks is not None:
                memo[id(hooks)] = type(hooks)()
    clone = copy.deepcopy(model, memo)
    for p in clone.parameters():
        p.requires_grad_(True)
        p.grad = None
        if hasattr(p, "grad_sample"):
            del p.grad_sample
    return clone.eval()


def _max_normalised(cam_class: type) -> type:
    """``cam_class`` with METHODS.md's normalisation: ReLU, bilinear upsampling, divide by the max (not min-max)."""

    class MaxNormalised(cam_class):  # type: ignore[misc, valid-type]
        def compute_cam_per_layer(self, input_tensor, targets, eigen_smooth):
            acts = [a.cpu().numpy() for a in self.activations_and_grads.activations]
            grads = [g.cpu().numpy() for g in self.activations_and_grads.gradients]
            size = tuple(input_tensor.shape[-2:])
            per_layer = []
            for i, layer in enumerate(self.target_layers):
                raw = self.get_cam_image(input_tensor, layer, targets, acts[i] if i < len(acts) else None,
                                         grads[i] if i < len(grads) else None, eigen_smooth)       # [B, h, w]
                raw = torch.from_numpy(np.maximum(raw, 0).astype(np.float32))[:, None]            # [B, 1, h, w]
                up = F.interpolate(raw, size=size, mode="bilinear", align_corners=False)          # [B, 1, H, W]
                per_layer.append(up.clamp_min(0).numpy())
            return per_layer

        def aggregate_multi_layers(self, per_layer):
            cam = np.concatenate(per_layer, axis=1).mean(axis=1)                                   # [B, H, W]
            peak = cam.reshape(len(cam), -1).max(axis=1)
            return np.where(peak[:, None, None] > 0, cam / np.where(peak > 0, peak, 1.0)[:, None, None],
                            0.0).astype(np.float32)

    MaxNormalised.__name__ = f"MaxNormalised{cam_class.__name__}"
    return MaxNormalised


def _to_input(images: np.ndarray, normalization, device) -> torch.Tensor:
    """[0, 1] images [B, C, H, W] -> the model's input tensor (fixed (x - mean) / std where the study asks)."""
    x = torch.from_numpy(np.ascontiguousarray(images, dtype=np.float32)).to(device)
    if normalization is not None:
        mean, std = (torch.tensor(v, dtype=torch.float32, device=device).reshape(1, -1, 1, 1) for v in normalization)
        x = (x - mean) / std
    return x


class _SummedOutputs:
    """A pytorch-grad-cam target: the sum of the model's outputs ``classes`` (one map of where any of them is)."""

    def __init__(self, classes: Sequence[int]) -> None:
        self.classes = [int(c) for c in classes]

    def __call__(self, model_output: torch.Tensor) -> torch.Tensor:
        return model_output[..., self.classes].sum(dim=-1)


def compute_cams(model: nn.Module, images: np.ndarray, *, target_layer: str, targets: Sequence[int | tuple[int, ...]],
                 method: str = "gradcam", normalization=None, batch_size: int = 32) -> np.ndarray:
    """CAMs float32 [N, H, W] in [0, 1] of ``images`` ([0, 1] pixels [N, C, H, W]) for class ``targets[i]``, or, where
    ``targets[i]`` is a tuple of classes, for the sum of their scores.

    ``target_layer`` is a dotted submodule name (the registry's ``cam_layer``). Computed on :func:`plain_copy`
    (``model`` keeps its mode, parameters and hooks).
    """
    return cams_of_plain(plain_copy(model), images, target_layer=target_layer, targets=targets, method=method,
                         normalization=normalization, batch_size=batch_size)


def cams_of_plain(clone: nn.Module, images: np.ndarray, *, target_layer: str,
                  targets: Sequence[int | tuple[int, ...]] | np.ndarray,
                  method: str, normalization, batch_size: int = 32) -> np.ndarray:
    """:func:`compute_cams` on a module that is already a :func:`plain_copy` (no second copy)."""
    if method not in CAM_METHODS:
        raise ValueError(f"unknown CAM method {method!r}; known: {', '.join(CAM_METHODS)}")
    import pytorch_grad_cam                                     # heavy (OpenCV): only when CAMs are asked for
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    device = next(clone.parameters()).device
    cam_class = _max_normalised(getattr(pytorch_grad_cam, CAM_METHODS[method].class_name))
    # Not ``with cam_class(...)``: BaseCAM.__exit__ swallows IndexError (it prints and returns True), which would
    # hand back CAMs for only some images. Release the hooks ourselves, and let every error through.
    cam = cam_class(model=clone, target_layers=[clone.get_submodule(target_layer)])
    out = []
    try:
        for start in range(0, len(images), batch_size):
            x = _to_input(images[start : start + batch_size], normalization, device)          # [b, C, H, W]
            chunk_targets = [_SummedOutputs(c) if isinstance(c, tuple) else ClassifierOutputTarget(int(c))
                             for c in targets[start : start + batch_size]]
            out.append(cam(input_tensor=x, targets=chunk_targets))                             # [b, H, W]
    finally:
        cam.activations_and_grads.release()
    return np.concatenate(out).astype(np.float32) if out else np.zeros((0, *images.shape[2:]), np.float32)


def class_probabilities(model: nn.Module, images: np.ndarray, *, kind: str, normalization=None,
                        batch_size: int = 128) -> np.ndarray:
    """Class scores [N, K] of ``model`` on [0, 1] ``images``: softmax (binary, multiclass) or sigmoid (multilabel).

    Runs on whatever module it is given without changing its mode: pass :func:`plain_copy` for eval-mode scores.
    From the logits in float64, as `dpmed.evaluation.inference.predict`: in float32 a confident image's Y and O are
    both exactly 1, and Increase in Confidence (Y < O) can never hold for it.
    """
    device = next(model.parameters()).device
    probs = []
    with torch.no_grad():
        for start in range(0, len(images), batch_size):
            logits = model(_to_input(images[start : start + batch_size], normalization, device)).double()
            probs.append((torch.sigmoid(logits) if kind == "multilabel" else logits.softmax(dim=1)).cpu().numpy())
    return np.concatenate(probs).astype(np.float64)
