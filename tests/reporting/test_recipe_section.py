"""The report's "How each arm trained": the recipe each arm ran with, planned by dpmed from a study file, with the
study's own choices in bold, settings that do nothing left out, and nothing that follows from the exact training
size (which DP-SGD's eps protects)."""

from __future__ import annotations

import re
from dataclasses import replace
from types import SimpleNamespace

import pytest

from dpmed.config import Study
from dpmed.records import DatasetSummary, ResolvedStudy, StudyPrivacy
from dpmed.reporting.recipe_section import recipe_section
from dpmed.released_size import needed_sizes
from dpmed.study import load_study_data, plan_context, plan_study


def _section(training: dict, dp_arm: dict | None = None, *, patients_known: bool = True,
             released: bool = True) -> tuple[dict[str, str], list]:
    """The section's rows by arm name (tags kept), and the plans, for a phantom study of 32 px images (with its
    patient ids, or as data that publish none), planned from counts given as released (as a study plans), or from
    the exact ones taken as public (as runs of a dpmed before the DP count were)."""
    study = Study.model_validate({
        "name": "recipe", "data": {"source": "phantom", "n_images": 300, "image_size": 32}, "training": training,
        "arms": [{"name": "plain", "mechanism": "none"},
                 {"name": "dp", "mechanism": "dp_sgd", "target_epsilon": [1, 8], **(dp_arm or {})}]})
    dataset = replace(load_study_data(study), patients_known=patients_known)
    sizes = needed_sizes(study, plan_context(dataset)) if released else None
    plans = plan_study(study, dataset, sizes)
    summary = DatasetSummary(name="phantom", task="binary", synthetic=True, description="", n_train=None, n_val=1,
                             n_test=1, n_train_patients=None, patients_known=True, image_shape=(1, 32, 32))
    privacy = StudyPrivacy(dp_sgd_runs=(), not_private=(), local_dp=(), unit=None, delta=None, accountant=None,
                           dp_sgd_epsilon=None, epsilon=None, reproducible=False, statement="")
    html = recipe_section(SimpleNamespace(resolved=ResolvedStudy(study=study, dataset=summary, study_privacy=privacy,
                                                                 runs=plans)))
    rows = {re.match(r"<tr><td[^>]*>(\w+)", row).group(1): row for row in re.findall(r"<tr><td.*?</tr>", html)}
    return rows, plans


def test_defaults_read_plain_and_the_studys_choices_bold():
    rows, plans = _section({}, {"learning_rate": 0.002})
    plain, dp = rows["plain"], rows["dp"]
    assert ">Adam<" in plain and "momentum" not in plain      # momentum does nothing under Adam
    assert ">0.001<" in plain and "<b>0.002</b>" in dp
    assert "auto: at least 10 epochs and 500 steps" in plain and "<b>" not in plain
    # DP-SGD's T is on its card, planned from the count; the other arm's exact steps would tell the training size
    steps = {p.privacy.steps for p in plans if p.mechanism == "dp_sgd"}
    assert len(steps) == 1 and f"T = {steps.pop()} steps" in dp and "T =" not in plain
    assert "64 images, shuffled" in plain and "64 patients expected (Poisson, q = " in dp
    assert "δ = min(1e-5, 1 / (10 N)) = 1e-5" in dp and "PLD accountant" in dp and "unit: one patient" in dp
    assert "the last iterate" in dp and ">none<" in dp        # no EMA, no augmentation


def test_the_unit_is_the_one_the_runs_trained_with():
    """Without patient ids each image is its own patient: the row says image, as the batch beside it does."""
    assert "unit: one patient<" in _section({})[0]["dp"]
    dp = _section({}, patients_known=False)[0]["dp"]
    assert "unit: one image (the data name no patients, so each image is its own)" in dp
    assert "64 images expected" in dp


def test_a_recipe_of_choices_states_each_as_training_used_it():
    rows, _ = _section({"optimizer": "sgd", "momentum": 0.5, "learning_rate": 0.1, "lr_scaling": "sqrt",
                        "batch_size": 32, "reference_batch_size": 128, "ema_decay": 0.999, "weight_decay": 0.01,
                        "lr_schedule": {"kind": "cosine", "warmup_fraction": 0.05}, "steps": 40,
                        "augmentation": {"multiplicity": 4}},
                       {"delta": 1e-6, "max_grad_norm": [0.1, 1.0], "accountant": "rdp", "privacy_unit": "image"})
    plain, dp = rows["plain"], rows["dp"]
    assert "<b>SGD, momentum 0.5</b>" in plain
    assert "0.1 × √B / √128 = 0.05 (sqrt scaling with the batch B = 32)" in plain          # 0.1 * sqrt(32 / 128)
    assert "<b>cosine decay to 0, after a linear warm-up over the first 5%</b>" in plain
    assert "milestones" not in plain and "× 0.1 at" not in plain
    assert "<b>40 steps</b>" in dp and "T =" not in dp         # given steps are every arm's T
    # auto padding is size / 8 = 4 px at 32 px; only DP-SGD clips, so only there are copies averaged before it
    assert "<b>4 copies of each image, averaged before clipping, random crops after 4 px of reflect padding</b>" in dp
    assert "4 copies of each image, averaged, random crops" in plain
    assert "<b>moving average of the iterates, decay 0.999</b>" in plain and "<b>0.01</b>" in plain
    assert "<b>δ = 1e-6</b>" in dp and "<b>C = 0.1, 1</b>" in dp and "<b>RDP accountant</b>" in dp
    assert "<b>unit: one image</b>" in dp and "32 images expected" in dp


def test_flips_and_one_copy_without_crops_are_stated_as_configured():
    """Flips are off by default (a flipped chest film puts the heart on the right): a study that turns them on is
    told so, and one copy with no padding says it crops nothing."""
    rows, _ = _section({"augmentation": {"multiplicity": 1, "crop_padding": 0, "flip": True}})
    assert "<b>one copy of each image, no crops, horizontal flips</b>" in rows["plain"]
    assert "flips" not in _section({"augmentation": {"multiplicity": 1, "crop_padding": 0}})[0]["plain"]


@pytest.mark.parametrize("milestones", [[0.5], [0.25, 0.75]])
def test_a_step_schedule_names_its_milestones(milestones):
    rows, _ = _section({"lr_schedule": {"kind": "step", "milestones": milestones, "gamma": 0.5}})
    assert f"× 0.5 at {', '.join(f'{m:.0%}' for m in milestones)} of the steps" in rows["plain"]


def test_the_accountant_and_the_count_are_those_the_runs_planned_with():
    """A budget beyond PLD's reach is certified by RDP, and the row says so; runs planned from the exact size (an
    older dpmed) do not claim a released count."""
    dp = _section({}, {"target_epsilon": [1, 1000, 1e6]})[0]["dp"]
    assert "PLD accountant; RDP for the runs it cannot certify (ε 1,000, 1e6), as their cards say" in dp  # not 1e+06
    assert "planned from the released count" in dp and "N the released count" in dp
    old = _section({}, released=False)[0]["dp"]
    assert "planned from the training set&#x27;s size" in old and "N the training set&#x27;s size" in old
    assert "the released count" not in old


def test_a_cap_on_each_patients_images_is_part_of_the_unit():
    dp = _section({}, {"privacy_unit": "image", "max_images_per_patient": 1})[0]["dp"]
    assert "<b>unit: one image, at most 1 image of each patient</b>" in dp


def test_shuffled_batches_are_not_called_an_expectation():
    dp = _section({}, {"sampling": "shuffle"})[0]["dp"]
    assert "<b>about 64 patients per batch (shuffled: not DP)</b>" in dp and "expected" not in dp


def test_one_epoch_reads_in_the_singular_and_more_in_the_plural():
    """The recipe table read "1 epochs" for training.epochs: 1."""
    assert "<b>1 epoch</b>" in _section({"epochs": 1})[0]["plain"]
    assert "<b>2 epochs</b>" in _section({"epochs": 2})[0]["plain"]
    assert "<b>1 step</b>" in _section({"steps": 1})[0]["plain"]


def test_the_noise_is_the_arms_own_and_gaussian_reads_as_the_default():
    default = _section({})[0]["dp"]
    assert "gaussian noise" in default and "<b>gaussian noise</b>" not in default
    assert "<b>laplace noise</b>" in _section({}, {"noise": "laplace"})[0]["dp"]
