"""DP-compatible architectures (GroupNorm, no in-place ops), by name; weight standardisation for any of them."""

from dpmed.models.registry import MODELS, ModelInfo, build_model, list_models
from dpmed.models.standardized import WSConv2d, weight_standardize

__all__ = ["MODELS", "ModelInfo", "build_model", "list_models", "WSConv2d", "weight_standardize"]
