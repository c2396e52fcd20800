"""The summary's line on the training set's size: private where DP-SGD planned from DP counts, unless a local-DP
Gaussian run's default delta, 1 / (10 N) above 10,000 images, writes the exact N into its run.json."""

from __future__ import annotations

from types import SimpleNamespace

from dpmed.accounting import default_delta
from dpmed.mechanisms import PixelGaussianArm, PixelGaussianPlan
from dpmed.reporting import sections

DATA = SimpleNamespace(n_train=None, n_val=500, n_test=600, released_sizes={"patients": 9_000}, size_epsilon=0.02,
                       synthetic=False)


def _inputs(delta_given: float | None, n_images: int):
    arm = PixelGaussianArm(name="gauss", mechanism="pixel_gaussian", std=[0.1], delta=delta_given)
    plan = SimpleNamespace(run_id="gauss_s0", arm="gauss", mechanism="pixel_gaussian",
                           privacy=PixelGaussianPlan(std=0.1, delta=delta_given or default_delta(n_images),
                                                     dimension=1024))
    dp = SimpleNamespace(run_id="dp_s0", arm="dp", mechanism="dp_sgd", privacy=SimpleNamespace(delta=1e-6))
    study = SimpleNamespace(arms=[arm, SimpleNamespace(name="dp", delta=None)])
    return SimpleNamespace(resolved=SimpleNamespace(study=study, runs=[plan, dp]))


def test_a_default_delta_that_gives_the_exact_count_is_said_not_called_private():
    stated = sections._stated_by_delta(_inputs(None, 12_345))
    assert stated == ["gauss_s0"]
    text = sections._sizes(DATA, stated)
    assert "the exact size is private" not in text
    assert "the default δ of the local-DP run gauss_s0, 1 / (10 N) above 10,000 images, gives" in text


def test_a_default_delta_of_1e_5_or_a_delta_given_keeps_the_count_out():
    for inputs in (_inputs(None, 9_000), _inputs(1e-7, 12_345)):
        stated = sections._stated_by_delta(inputs)
        assert stated == [] and "the exact size is private" in sections._sizes(DATA, stated)
