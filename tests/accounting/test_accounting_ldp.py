"""Local DP of the pixel Laplace mechanism (METHODS.md s.1)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dpmed.accounting import (NEIGHBOUR_LDP_IMAGE, LaplaceImageEvent, laplace_image_epsilon, laplace_pixel_epsilon,
                              laplace_scale_for)


def test_a_224x224x3_image_at_scale_1_costs_150528():
    event = LaplaceImageEvent(scale=1.0, value_range=1.0, dimension=224 * 224 * 3)
    assert laplace_image_epsilon(event) == 150_528
    assert laplace_pixel_epsilon(scale=1.0, value_range=1.0) == 1.0


@pytest.mark.parametrize("beta, eps_pixel", [(1, 1.0), (2, 0.5), (4, 0.25)])
def test_the_source_betas_are_laplace_scales_in_unit_range(beta, eps_pixel):
    """000_56c2431ae4df8d10.txt's beta = 1, 2, 4 with R = 1 (METHODS.md s.1)."""
    assert laplace_pixel_epsilon(scale=beta, value_range=1.0) == eps_pixel
    assert laplace_image_epsilon(LaplaceImageEvent(scale=beta, value_range=1.0, dimension=10)) == 10 * eps_pixel


@given(eps=st.floats(1e-6, 1e6), value_range=st.floats(1e-3, 1e3))
def test_scale_round_trips(eps, value_range):
    scale = laplace_scale_for(epsilon_pixel=eps, value_range=value_range)
    assert laplace_pixel_epsilon(scale=scale, value_range=value_range) == pytest.approx(eps, rel=1e-12)


@pytest.mark.parametrize("call, argument", [
    (lambda: laplace_pixel_epsilon(scale=0.0, value_range=1.0), "scale"),
    (lambda: laplace_pixel_epsilon(scale=1.0, value_range=-1.0), "value_range"),
    (lambda: laplace_scale_for(epsilon_pixel=0.0, value_range=1.0), "epsilon_pixel"),
    (lambda: laplace_scale_for(epsilon_pixel=math.inf, value_range=1.0), "epsilon_pixel"),
    (lambda: LaplaceImageEvent(scale=-1.0, value_range=1.0, dimension=3), "scale"),
    (lambda: LaplaceImageEvent(scale=1.0, value_range=1.0, dimension=0), "dimension"),
])
def test_invalid_arguments_name_the_argument(call, argument):
    with pytest.raises(ValueError, match=argument):
        call()


def test_neighbour_relation_is_any_two_images():
    assert NEIGHBOUR_LDP_IMAGE.startswith("any two images")
