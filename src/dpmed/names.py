"""The names a study file may use for things that registries elsewhere implement, in one torch-free place.

The study schema (`dpmed.config`) checks names while loading a file, before torch or any dataset is imported; the
registries that implement them (models, CAM methods, canary kinds, clipping engines) check at import that they
implement exactly these names (:func:`check_registry`), so the two can never drift apart.
"""

from __future__ import annotations

from typing import Iterable

__all__ = ["MODEL_NAMES", "CAM_METHODS", "CANARY_KINDS", "DP_ENGINES", "check_registry"]

# dpmed.models.MODELS
MODEL_NAMES = ("small_cnn", "flat_cnn", "resnet9", "resnet18", "alexnet", "vgg16", "small_cnn_ws", "resnet9_ws",
               "scatternet_linear", "scatternet_cnn")
# dpmed.evaluation.explanations.CAM_METHODS (pytorch-grad-cam)
CAM_METHODS = ("gradcam", "gradcam++", "xgradcam", "hirescam", "layercam", "eigencam", "scorecam")
# the one-run audit's canaries (dpmed.audit)
CANARY_KINDS = ("mislabelled", "marked", "noise")
# dpmed.training.CLIPPING_ENGINES
DP_ENGINES = ("dpmed", "opacus")


def check_registry(what: str, implemented: Iterable[str], names: tuple[str, ...]) -> None:
    """Raise RuntimeError unless ``implemented`` is exactly ``names`` (a registry and its study-file names)."""
    implemented = tuple(implemented)
    if set(implemented) != set(names):
        raise RuntimeError(f"the {what} registry implements {sorted(implemented)} but dpmed.names lists "
                           f"{sorted(names)}: add or remove the name in dpmed/names.py together with the entry")
