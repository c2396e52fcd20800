"""pixel_laplace: the noise law, where its noise comes from, and the privacy fields it declares."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpmed.accounting import laplace_image_epsilon
from dpmed.mechanisms import PixelLaplace
from dpmed.randomness import PrivacyRandomness


def _rng(run_id: str = "r") -> np.random.Generator:
    return PrivacyRandomness.reproducible(seed=0, run_id=run_id).stream("local_dp")


def test_noise_has_laplace_scale_b():
    """On a mid-grey image with b small enough that clipping is rare, the mean absolute deviation of Laplace(b)
    is b and its variance 2 b^2."""
    images = np.full((20, 1, 32, 32), 0.5, dtype=np.float32)
    out = PixelLaplace(scale=0.05).apply(images, rng=_rng())
    noise = (out - images).ravel()
    assert np.abs(noise).mean() == pytest.approx(0.05, rel=0.03)
    assert noise.var() == pytest.approx(2 * 0.05 ** 2, rel=0.05)


def test_output_is_clipped_to_the_value_range():
    out = PixelLaplace(scale=2.0).apply(np.random.default_rng(0).random((4, 3, 8, 8), dtype=np.float32), rng=_rng())
    assert out.min() >= 0.0 and out.max() <= 1.0
    assert ((out == 0.0) | (out == 1.0)).mean() > 0.3      # heavy noise saturates many values


def test_noise_is_the_streams_draws_in_image_order_and_never_one_shift():
    """The perturbation is exactly clip(x + L) with L the stream's Laplace draws over the whole array, however the
    images are chunked, so a saved stream state reproduces it; another stream gives other noise."""
    images = np.random.default_rng(0).random((600, 1, 4, 4), dtype=np.float32)   # more than one chunk
    mech = PixelLaplace(scale=0.3)
    whole = mech.apply(images, rng=_rng("a"))
    expected = np.clip(images.astype(np.float64) + _rng("a").laplace(0.0, 0.3, size=images.shape), 0, 1)
    np.testing.assert_array_equal(whole, expected.astype(np.float32))
    assert not np.array_equal(whole, mech.apply(images, rng=_rng("b")))
    assert not np.array_equal(whole[0] - images[0], whole[1] - images[1])   # per pixel, per image: not one shift


def test_event_records_the_honest_image_epsilon():
    event = PixelLaplace(scale=1.0).event((3, 224, 224))
    assert (event.scale, event.value_range, event.dimension) == (1.0, 1.0, 150528)
    assert laplace_image_epsilon(event) == pytest.approx(150528)
    assert laplace_image_epsilon(PixelLaplace(scale=0.5).event((1, 64, 64))) == pytest.approx(8192)
    # R is the sensitivity of one pixel: d R / b = 10 * 2 / 0.5 (with R = 1 everywhere above, R could drop out)
    assert laplace_image_epsilon(PixelLaplace(scale=0.5, value_range=2.0).event((1, 2, 5))) == pytest.approx(40)


def test_rejects_non_positive_scale():
    with pytest.raises(ValueError, match="scale"):
        PixelLaplace(scale=0.0)


def test_the_card_names_delta_the_accountant_the_unit_what_is_unprotected_and_no_private_sampling():
    from dpmed.accounting import Ledger
    from dpmed.mechanisms import mechanism_info
    from dpmed.mechanisms.pixel_laplace import PixelLaplacePlan
    plan = PixelLaplacePlan(scale=0.5, dimension=4096)
    card = mechanism_info("pixel_laplace").card(plan, Ledger((PixelLaplace(scale=0.5).event((1, 64, 64)),)), "secure")
    assert card.statement.startswith("eps_image = 8,192 at delta = 0 (closed form, the Laplace mechanism; unit: one")
    assert "how many images there are" in card.statement and "eps_pixel = 2" in card.statement
    # a study of local-DP runs reports its training patients' count exactly: the card must not leave it out
    assert "how many patients they come from are released in the clear" in card.labels
    # eps_pixel is per value as noised: a grey pixel copied into 3 channels is 3 of them
    assert "a grey film read with 3 channels or enlarged, is protected only as their group): eps_pixel = 2" \
        in card.statement
    assert "sampling" not in card.randomness and "noise" in card.randomness
    assert "a patient with k images is protected by k eps_image" in card.patients
    third = mechanism_info("pixel_laplace").card(PixelLaplacePlan(scale=3.0, dimension=4096),
                                                Ledger((PixelLaplace(scale=3.0).event((1, 64, 64)),)), "secure")
    assert third.statement.endswith("eps_pixel = 0.3334")                # 1/3 rounded up (before: 0.333333)


def _laplace_card(scale: float, shape=(1, 8, 8), value_range: float = 1.0):
    from dpmed.accounting import Ledger
    from dpmed.mechanisms import mechanism_info
    from dpmed.mechanisms.pixel_laplace import PixelLaplacePlan
    plan = PixelLaplacePlan(scale=scale, dimension=int(np.prod(shape)))
    event = PixelLaplace(scale=scale, value_range=value_range).event(shape)
    return mechanism_info("pixel_laplace").card(plan, Ledger((event,)), "secure")


def test_where_the_noise_cannot_span_the_range_a_pixel_at_zero_is_never_released_as_r_and_the_card_says_not_dp():
    """The attack that breaks the closed form: the sampler's draws lie within 53 log 2 scales, so at b = R / 40 a
    pixel at 0 can never come out as R while a pixel at R does half the time. Seen here with the sampler itself."""
    mech, n = PixelLaplace(scale=1 / 40), 400_000
    dark = mech.apply(np.zeros((n, 1, 1, 1), dtype=np.float32), rng=_rng("dark"))
    bright = mech.apply(np.ones((n, 1, 1, 1), dtype=np.float32), rng=_rng("bright"))
    assert (dark == 1.0).sum() == 0 and (bright == 1.0).mean() == pytest.approx(0.5, abs=0.01)
    card = _laplace_card(1 / 40)
    assert not card.is_dp and card.sampler_voids and card.statement.startswith("NOT DP as run")
    # a pixel at R needs a draw of -40 scales to reach 0, below the draws' floor of -52 log 2 = -36.04: never
    assert "a pixel at R is never released as 0" in card.statement and "measurably" not in card.statement
    assert card.in_brief().endswith("not DP: noise below the sampler's reach")


def test_the_card_leaves_out_an_end_point_excess_below_float64s_resolution_and_is_void_above_it():
    plain = _laplace_card(0.5)
    assert plain.epsilon_pixel == 2.0 and plain.epsilon_image == 128.0 and plain.is_dp   # 4e-16 of eps: left out
    # R / b = 30: a pixel at 0 is released as R with probability (e^-30 - e^-36.74) / 2, not e^-30 / 2: the ratio at
    # the clipped end is e^30 / (1 - e^-6.74), 1e-3 above e^30
    close = _laplace_card(1 / 30)
    by_hand = math.log(0.5 / (0.5 * (math.exp(-30) - math.exp(-53 * math.log(2)))))
    assert by_hand - 30 > 1e-3 and not close.is_dp and close.sampler_voids
    assert "measurably less often" in close.statement
    assert _laplace_card(1 / 17).is_dp and not _laplace_card(1 / 19).is_dp      # the threshold, about R / b = 18
    # R / b decides it, not b alone: pixels in [0, 2] at b = 2 / 19 are as far out of reach as [0, 1] at 1 / 19
    assert not _laplace_card(2 / 19, value_range=2.0).is_dp and _laplace_card(2 / 17, value_range=2.0).is_dp


def test_the_report_gives_a_voided_local_run_the_local_reason():
    from dpmed.reporting.inputs import not_dp_text
    text = not_dp_text(_laplace_card(1 / 40))
    assert "a pixel at one end of the range is released at the other" in text and "accountant" not in text


def test_a_reproducible_card_whose_noise_the_sampler_cannot_reach_gives_both_reasons():
    """Each reason an accounted eps does not hold is named, in one list: the seed is known, and the noise is below
    the sampler's reach."""
    from dpmed.mechanisms.cards import label_randomness

    card = label_randomness(_laplace_card(1 / 40), "reproducible")
    assert not card.is_dp and card.why_not_dp_in_brief == "seed known, noise below the sampler's reach"
    assert card.in_brief().endswith("; not DP: seed known, noise below the sampler's reach")


@pytest.mark.parametrize("keys", [{}, {"scale": 0.5, "target_epsilon_image": 100}])
def test_an_arm_must_give_exactly_one_noise_setting(keys):
    """Neither the scale nor a target, or both: which noise the arm runs would be a guess."""
    from pydantic import ValidationError

    from dpmed.mechanisms.pixel_laplace import PixelLaplaceArm
    with pytest.raises(ValidationError, match="give exactly one of 'scale' and 'target_epsilon_image'"):
        PixelLaplaceArm.model_validate({"name": "lap", "mechanism": "pixel_laplace", **keys})
