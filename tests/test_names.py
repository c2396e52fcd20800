"""Study-file names and the registries that implement them cannot drift apart: each registry checks at import."""

from __future__ import annotations

import pytest

from dpmed.names import CAM_METHODS, CANARY_KINDS, DP_ENGINES, MODEL_NAMES, check_registry


def test_a_registry_that_differs_from_its_names_fails_loudly():
    check_registry("model", list(MODEL_NAMES), MODEL_NAMES)
    with pytest.raises(RuntimeError, match="dpmed/names.py"):
        check_registry("model", [*MODEL_NAMES, "vit"], MODEL_NAMES)          # implemented, but no study file names it
    with pytest.raises(RuntimeError, match="dpmed/names.py"):
        check_registry("model", MODEL_NAMES[1:], MODEL_NAMES)                 # named, but nothing implements it


def test_every_registry_implements_exactly_its_names():
    from dpmed.audit import CANARY_KINDS as canaries
    from dpmed.evaluation.explanations import CAM_METHODS as cams
    from dpmed.models import MODELS
    from dpmed.training.dp_sgd import CLIPPING_ENGINES

    assert set(MODELS) == set(MODEL_NAMES) and set(canaries) == set(CANARY_KINDS)
    assert set(cams) == set(CAM_METHODS) and set(CLIPPING_ENGINES) == set(DP_ENGINES)
