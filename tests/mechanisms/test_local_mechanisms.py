"""pixel_gaussian and the not-DP scalar_shift reproduction: their noise laws, the events they declare, the range
they clip to and scalar_shift's label."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpmed.accounting import GaussianImageEvent, gaussian_image_epsilon
from dpmed.errors import PrivacyError
from dpmed.mechanisms import PixelGaussian, PixelLaplace, ScalarShift
from dpmed.randomness import PrivacyRandomness


def _rng(run_id: str = "r") -> np.random.Generator:
    return PrivacyRandomness.reproducible(seed=0, run_id=run_id).stream("local_dp")


def test_pixel_gaussian_noise_has_std_s_and_comes_from_the_stream():
    images = np.full((20, 1, 32, 32), 0.5, dtype=np.float32)
    out = PixelGaussian(std=0.05).apply(images, rng=_rng())
    noise = (out - images).ravel()
    assert noise.std() == pytest.approx(0.05, rel=0.03) and abs(noise.mean()) < 0.005
    expected = np.clip(0.5 + _rng().normal(0.0, 0.05, size=images.shape), 0, 1).astype(np.float32)
    np.testing.assert_array_equal(out, expected)


def test_pixel_gaussian_declares_the_l2_sensitivity_of_a_whole_image():
    event = PixelGaussian(std=2.0).event((3, 8, 8))
    assert event == GaussianImageEvent(std=2.0, value_range=1.0, dimension=192)
    # mu = sqrt(192) / 2 ~ 6.9 standard deviations: a large but finite image-level eps
    assert 20 < gaussian_image_epsilon(event, delta=1e-5) < 60


def test_scalar_shift_adds_one_value_per_image_and_declares_no_event():
    """The reproduction of 000_56c2431ae4df8d10.txt's code: a brightness shift, not DP (METHODS.md s.1)."""
    images = np.random.default_rng(0).uniform(0.3, 0.7, size=(200, 1, 8, 8)).astype(np.float32)
    out = ScalarShift(scale=0.01).apply(images, rng=_rng())
    shift = (out - images).reshape(200, -1)
    np.testing.assert_allclose(shift, shift[:, :1].repeat(64, axis=1), atol=1e-6)  # one value per image
    assert ScalarShift(scale=1.0).event((1, 8, 8)) is None


def test_scalar_shift_saturates_whole_images():
    """A mid-grey image turns all-black or all-white when |L| >= 0.5: probability e^-0.5 for L ~ Laplace(1).
    (METHODS.md's ~37% is for the intensity mix of real X-rays; this checks the law itself.)"""
    images = np.full((4000, 1, 4, 4), 0.5, dtype=np.float32)
    out = ScalarShift(scale=1.0).apply(images, rng=_rng())
    saturated = np.mean((out.reshape(4000, -1) == 0).all(1) | (out.reshape(4000, -1) == 1).all(1))
    assert saturated == pytest.approx(math.exp(-0.5), abs=0.03)


@pytest.mark.parametrize("mode", ["secure", "reproducible"])
def test_scalar_shift_is_labelled_not_dp_wherever_its_eps_would_be_printed(mode):
    """METHODS.md s.1: label it "not DP". The one-line label goes to the terminal's plan, the summary table and
    comparisons.json; "inf" or any number there would read as an accounted guarantee."""
    from dpmed.accounting import Ledger
    from dpmed.mechanisms import mechanism_info
    from dpmed.mechanisms.scalar_shift import ScalarShiftPlan

    card = mechanism_info("scalar_shift").card(ScalarShiftPlan(scale=1.0), Ledger(()), mode)
    assert card.in_brief() == "not DP" and not card.is_dp and card.epsilon is None
    assert card.statement.startswith("NOT DP")


@pytest.mark.parametrize("mechanism", [PixelGaussian(std=0.3, value_range=2.0),
                                       PixelLaplace(scale=0.3, value_range=2.0),
                                       ScalarShift(scale=0.3, value_range=2.0)], ids=lambda m: type(m).__name__)
def test_released_values_are_clipped_to_the_declared_range_not_to_one(mechanism):
    """Clipping is post-processing of the noisy values into [0, R], the range the event's sensitivity is for: with
    R = 2, values above 1 are released (and none above 2, none below 0)."""
    images = np.full((64, 1, 8, 8), 1.5, dtype=np.float32)     # scalar_shift: P(no draw >= 0.5) = 0.0018
    out = mechanism.apply(images, rng=_rng())
    assert 1.0 < out.max() <= 2.0 and out.min() >= 0.0 and (out == 2.0).any()


def test_what_the_terminal_and_run_json_say_cite_the_source_documents_as_the_report_does():
    """scalar_shift's card statement (printed as each run ends, kept in run.json) and the fairness definitions
    named the source documents by their file names, which the user does not have, while the report cited the same
    papers by authors and year: one paper, two names."""
    import re

    from dpmed.accounting import Ledger
    from dpmed.evaluation.fairness import task_definitions
    from dpmed.mechanisms import mechanism_info
    from dpmed.mechanisms.scalar_shift import ScalarShiftPlan
    from dpmed.reporting.inputs import cite

    statement = mechanism_info("scalar_shift").card(ScalarShiftPlan(scale=0.5), Ledger(), "secure").statement
    for text in (statement, *(d for k in ("binary", "multiclass", "multilabel")
                                 for d in task_definitions(k).values())):
        assert not re.search(r"00\d_[0-9a-f]{16}\.txt", text) and cite(text) == text
    assert "Singh, Sikka, Kotti and Trask 2020" in statement


@pytest.mark.parametrize("make", [lambda v: PixelGaussian(std=v), lambda v: PixelLaplace(scale=v),
                                  lambda v: ScalarShift(scale=v)], ids=["gaussian", "laplace", "shift"])
@pytest.mark.parametrize("value", [0.0, -0.1])
def test_a_noise_scale_of_zero_or_below_is_refused(make, value):
    """Zero noise would release the images as they are; a card built on it would divide by zero."""
    with pytest.raises(ValueError, match="must be > 0"):
        make(value)


@pytest.mark.parametrize("n", [1, 257])
def test_every_image_is_perturbed_also_a_single_one_and_the_last_of_a_partial_chunk(n):
    """The perturbation is written chunk by chunk into an empty array: one image, or one image past a whole chunk of
    256, must be noised like the rest (an unwritten one would be whatever memory held)."""
    images = np.full((n, 1, 4, 4), 0.5, dtype=np.float32)
    out = PixelGaussian(std=0.1).apply(images, rng=_rng())
    expected = np.clip(0.5 + _rng().normal(0.0, 0.1, size=images.shape), 0, 1).astype(np.float32)
    np.testing.assert_array_equal(out, expected)


def test_scalar_shift_is_registered_as_no_private_mechanism():
    """The registry's is_private is what the study budget and the report read to list a run without a total eps and
    as a labelled reproduction of a flawed method: a brightness shift must never count as private there."""
    from dpmed.mechanisms import mechanism_info

    assert mechanism_info("scalar_shift").is_private is False
    assert mechanism_info("pixel_laplace").is_private and mechanism_info("pixel_gaussian").is_private


@pytest.mark.parametrize("make", [lambda: PixelGaussian(std=0.3), lambda: PixelLaplace(scale=0.3),
                                  lambda: ScalarShift(scale=0.3)], ids=["gaussian", "laplace", "shift"])
@pytest.mark.parametrize("bad", [1.0 + 1e-6, -1e-6, float("nan")])
def test_a_value_outside_the_range_the_sensitivity_is_for_is_refused_not_released(make, bad):
    """The claims are for inputs in [0, R]: clipping only the output, a pixel at 255 read as R = 1 comes out as R
    always, while one at 0 does a share e^(-R/b)/2 of the time, a ratio above e^(R/b). The mechanism names the image
    and the value instead of releasing it."""
    images = np.full((300, 1, 4, 4), 0.5, dtype=np.float32)
    images[257, 0, 2, 3] = bad                      # in the second chunk of 256
    with pytest.raises(PrivacyError, match=r"image 257 holds the value .* at \(channel, row, column\) \(0, 2, 3\), "
                                         r"outside \[0, 1\]"):
        make().apply(images, rng=_rng())
    images[257, 0, 2, 3] = 1.0                      # the ends themselves are in range
    images[0] = 0.0
    assert make().apply(images, rng=_rng()).shape == images.shape
