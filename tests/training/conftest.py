"""What the training-loop tests share: a small phantom and a model built the same way each time (as a resumed
process would rebuild it)."""

from __future__ import annotations

import pytest
import torch

from dpmed.data.synthetic import make_phantom
from dpmed.models import build_model


@pytest.fixture(scope="module")
def data():
    """The training split of a 120-image phantom at 16 px, and its task."""
    ds = make_phantom(n_images=120, image_size=16, seed=0)
    return ds.train, ds.task


@pytest.fixture
def new_model():
    """``new_model(task)``: small_cnn for 16 px grey images, from the same initial weights every call."""
    def build(task):
        torch.manual_seed(0)
        return build_model("small_cnn", in_channels=1, num_outputs=task.num_outputs, image_size=16)
    return build
