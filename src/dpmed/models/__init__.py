"""DP-compatible architectures (GroupNorm, no in-place ops), by name."""

from dpmed.models.registry import MODELS, ModelInfo, build_model, list_models

__all__ = ["MODELS", "ModelInfo", "build_model", "list_models"]
