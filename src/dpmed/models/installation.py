"""Whether the installed torchvision works with the installed torch, told before a study reads its data.

torchvision's compiled operators (nms, roi_align, ...) are built against one torch release and one build of it
(CPU, or one CUDA version). Beside another, torchvision's import fails on the first operator it registers
("operator torchvision::nms does not exist"), which surfaced wherever a study first imported torchvision (building a
ResNet, Grad-CAM, the reconstruction attack): an internal error with a traceback, after the data had been read and
perhaps after hours of training. Checked only for a study that imports torchvision: the import costs seconds, which
a study of a small model never paid.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

from dpmed.errors import InstallationError
from dpmed.provenance import package_version

__all__ = ["check_torchvision", "needs_torchvision"]


def needs_torchvision(study: Any) -> bool:
    """Whether running ``study`` (a `dpmed.config.Study`) imports torchvision: its model is built from torchvision's
    modules (`ModelInfo.torchvision`), it explains with Grad-CAM (pytorch_grad_cam imports torchvision), or an arm's
    attack puts the study's fixed normalisation in front of the model (torchvision's Normalize)."""
    from dpmed.models import MODELS

    attacked = any(getattr(arm, "attack", None) is not None for arm in study.arms)
    return (MODELS[study.model.name].torchvision or study.evaluation.explanations is not None
            or (attacked and study.data.preprocessing.normalize is not None))


def check_torchvision() -> None:
    """Import torchvision; InstallationError naming both versions where its operators do not load with this torch.
    Any other failure of the import is raised as it is (it is not this mismatch)."""
    try:
        importlib.import_module("torchvision")     # the import is the check
    except RuntimeError as exc:
        if "torchvision::" not in str(exc):
            raise
        torch, vision = package_version("torch"), package_version("torchvision")
        raise InstallationError(
            f"torchvision {vision} does not work with torch {torch}: its compiled operators do not load ({exc}). "
            "Install matching builds of the two from the same index (both CPU, or both for the same CUDA)"
            f"{_pair(torch)}"
        ) from None


def _pair(torch: str) -> str:
    """The torchvision release made for ``torch``, as an install command, where its number follows the rule every
    release since torch 2.0 has kept (torch 2.N with torchvision 0.(N + 15)); else nothing."""
    found = re.match(r"2\.(\d+)\b", torch)
    if found is None:
        return ""
    return (f": for torch {torch}, pip install 'torchvision==0.{int(found.group(1)) + 15}.*' (or reinstall both: "
            "pip install --force-reinstall torch torchvision)")
