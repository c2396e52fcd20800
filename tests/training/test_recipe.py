"""The private training recipe in the loop (De et al. 2022; METHODS.md s.9): what each part costs in privacy
(nothing: the ledger, hence eps, is that of the plain run), what the released model is (the EMA of the iterates),
and that a run with the recipe resumes exactly."""

from __future__ import annotations

import pytest
import torch

from dpmed.accounting import ledger_epsilon
from dpmed.config import TrainingConfig
from dpmed.data.synthetic import make_phantom
from dpmed.models import MODELS, build_model
from dpmed.models.weights import set_trainable
from dpmed.randomness import PrivacyRandomness
from dpmed.training import DpSgdPlan, DpSgdStep, train
from dpmed.training.averaging import ParameterAverage

CFG = TrainingConfig(epochs=2, batch_size=16, physical_batch_size=64, optimizer="adam", learning_rate=1e-3)
RECIPE = TrainingConfig.model_validate({**CFG.model_dump(), "ema_decay": 0.9,
                                        "augmentation": {"multiplicity": 3, "crop_padding": 2},
                                        "lr_schedule": {"kind": "cosine", "warmup_fraction": 0.2}})
PLAN = DpSgdPlan(noise_multiplier=1.2, max_grad_norm=1.0, sample_rate=0.2, steps=9)
PATIENT_PLAN = PLAN.model_copy(update={"unit": "patient"})


@pytest.fixture(scope="module")
def data():
    ds = make_phantom(n_images=100, image_size=16, seed=0)
    return ds.train, ds.task


def _model(task):
    torch.manual_seed(0)
    return build_model("small_cnn", in_channels=1, num_outputs=task.num_outputs, image_size=16)


def _randomness(key):
    return PrivacyRandomness.from_root_hex(key, "secure")


@pytest.mark.parametrize("plan", [PLAN, PATIENT_PLAN], ids=["image", "patient"])
def test_the_recipe_leaves_the_ledger_and_eps_as_they_were(data, plan):
    """Augmentation multiplicity, EMA and the schedule change the model, not a single privacy event."""
    images, task = data
    key = PrivacyRandomness.secure().root_hex()
    plain = train(_model(task), images, task, CFG, seed=1, dp=plan, randomness=_randomness(key), progress=False)
    model = _model(task)
    recipe = train(model, images, task, RECIPE, seed=1, dp=plan, randomness=_randomness(key), progress=False)
    assert recipe.ledger == plain.ledger and recipe.ledger.dp_sgd_steps == plan.steps
    assert ledger_epsilon(recipe.ledger, delta=1e-5) == ledger_epsilon(plain.ledger, delta=1e-5)


def test_the_released_model_is_the_ema_of_the_iterates(data, monkeypatch):
    """The iterates of a run without EMA (same privacy randomness: EMA changes no iterate), averaged by the
    formula d_t = min(decay, (1 + t) / (10 + t)), are the weights of the run with EMA; its ledger is the same."""
    images, task = data
    key = PrivacyRandomness.secure().root_hex()
    model, iterates = _model(task), []
    initial = [p.detach().clone() for p in model.parameters()]
    original = torch.optim.Adam.step

    def recording(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        iterates.append([p.detach().clone() for p in model.parameters()])
        return out

    with monkeypatch.context() as m:
        m.setattr(torch.optim.Adam, "step", recording)
        plain = train(model, images, task, CFG, seed=1, dp=PLAN, randomness=_randomness(key), progress=False)
    assert len(iterates) == PLAN.steps
    average = initial
    for t, weights in enumerate(iterates):
        d = min(0.99, (1 + t) / (10 + t))
        average = [d * a + (1 - d) * w for a, w in zip(average, weights, strict=True)]
    averaged_model = _model(task)
    with_ema = train(averaged_model, images, task, CFG.model_copy(update={"ema_decay": 0.99}), seed=1, dp=PLAN,
                     randomness=_randomness(key), progress=False)
    assert with_ema.ledger == plain.ledger
    for p, expected, last in zip(averaged_model.parameters(), average, iterates[-1], strict=True):
        torch.testing.assert_close(p.detach(), expected, rtol=1e-5, atol=1e-6)
    assert any(not torch.allclose(p, last) for p, last in zip(averaged_model.parameters(), iterates[-1], strict=True))


def test_parameter_average_warms_up_and_round_trips():
    model = torch.nn.Linear(3, 2)
    average = ParameterAverage(model, decay=0.999)
    assert [average.rate(t) for t in (0, 1, 90)] == [0.1, 2 / 11, 0.91] and average.rate(10 ** 6) == 0.999
    with torch.no_grad():
        model.weight.add_(1.0)
    average.update()
    other = ParameterAverage(model, decay=0.999)
    other.load_state_dict(average.state_dict())
    assert other.updates == 1 and all(torch.equal(a, b) for a, b in zip(other.average, average.average, strict=True))
    with pytest.raises(ValueError, match="another decay"):
        ParameterAverage(model, decay=0.9).load_state_dict(average.state_dict())


def test_parameter_average_refuses_a_decay_of_zero_and_an_average_of_another_model():
    """A decay of 0 is no average (the last iterate); a saved average of another model (2 tensors of a Linear for the
    4 of two) must be refused, not zipped onto the first tensors of this one, leaving the rest at their start."""
    with pytest.raises(ValueError, match="decay must be in"):
        ParameterAverage(torch.nn.Linear(3, 2), decay=0.0)
    saved = ParameterAverage(torch.nn.Linear(3, 2), decay=0.999).state_dict()
    two = ParameterAverage(torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 2)), decay=0.999)
    with pytest.raises(ValueError, match="another decay or model"):
        two.load_state_dict(saved)


def test_the_average_reaches_its_decay_over_a_long_run():
    """200 updates of a weight set to t before update t follow a_t = d_t a + (1 - d_t) t, d_t = min(0.99, (1 + t) /
    (10 + t)), which reaches 0.99 at t = 890 only; a counter that stopped early would stall d (short runs cannot
    tell). A decay of 1 never moves: refused."""
    model = torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.zero_()
    average = ParameterAverage(model, decay=0.99)
    expected = 0.0
    for t in range(200):
        with torch.no_grad():
            model.weight.fill_(float(t))
        average.update()
        d = min(0.99, (1 + t) / (10 + t))
        expected = d * expected + (1 - d) * t
    assert average.updates == 200 and average.average[0].item() == pytest.approx(expected, rel=1e-5)
    with pytest.raises(ValueError, match="decay must be in"):
        ParameterAverage(model, decay=1.0)


@pytest.mark.parametrize("dp", [PLAN, None], ids=["dp-sgd", "non-private"])
def test_frozen_parameters_stay_bit_identical_under_ema(data, dp):
    """``model.trainable: {last_blocks: 1}`` with ``ema_decay``: the released model is the average of the trained
    parameters, and every frozen one is exactly as loaded (the average of a constant rounds away from it in float32,
    so frozen parameters must not be averaged at all)."""
    images, task = data
    key = PrivacyRandomness.secure().root_hex()
    model = _model(task)
    info = MODELS["small_cnn"]
    set_trainable(model, 1, head=info.head, blocks=info.blocks)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    frozen = {name for name, p in model.named_parameters() if not p.requires_grad}
    assert frozen and len(frozen) < len(before)
    train(model, images, task, CFG.model_copy(update={"ema_decay": 0.99}), seed=1, dp=dp,
          randomness=None if dp is None else _randomness(key), progress=False)
    after = dict(model.named_parameters())
    assert all(torch.equal(after[name].detach(), before[name]) for name in frozen)
    assert all(not torch.equal(after[name].detach(), before[name]) for name in set(before) - frozen)


def test_parameter_average_leaves_frozen_parameters_out_and_reads_an_average_of_every_parameter():
    """Only trainable parameters are averaged; copy_to writes them and leaves the frozen ones; a saved average of
    every parameter (checkpoints written before frozen parameters were left out) restores the trainable ones."""
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 2))
    model[0].requires_grad_(False)
    frozen = [p.detach().clone() for p in model[0].parameters()]
    average = ParameterAverage(model, decay=0.999)
    assert len(average.average) == 2
    for _ in range(50):
        with torch.no_grad():
            model[1].weight.add_(0.01)
        average.update()
    expected = [a.clone() for a in average.average]
    average.copy_to(model)
    assert all(torch.equal(p, f) for p, f in zip(model[0].parameters(), frozen, strict=True))
    assert torch.equal(model[1].weight, expected[0]) and torch.equal(model[1].bias, expected[1])
    older = {"decay": 0.999, "updates": 50, "average": frozen + expected}
    restored = ParameterAverage(model, decay=0.999)
    restored.load_state_dict(older)
    assert restored.updates == 50 and all(torch.equal(a, b) for a, b in zip(restored.average, expected, strict=True))
    with pytest.raises(ValueError, match="other parameters"):
        average.copy_to(torch.nn.Linear(64, 2))


class Killed(Exception):
    pass


@pytest.mark.parametrize("dp", [PATIENT_PLAN, None], ids=["dp-sgd", "non-private"])
def test_a_run_with_the_recipe_resumes_exactly(data, dp, tmp_path, monkeypatch):
    """The checkpoint carries the average; augmentations and rates are functions of the step: a run killed midway
    and resumed ends with the model (the EMA) and ledger of an uninterrupted one."""
    images, task = data
    key = PrivacyRandomness.secure().root_hex()
    whole_model = _model(task)
    whole = train(whole_model, images, task, RECIPE, seed=2, dp=dp, randomness=_randomness(key), progress=False)
    ckpt, calls = tmp_path / "checkpoint.pt", {"n": 0}
    target, name = (DpSgdStep, "__call__") if dp is not None else (torch.optim.Adam, "step")
    original = getattr(target, name)

    def dying(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] > 7:
            raise Killed
        return original(*args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(target, name, dying)
        with pytest.raises(Killed):
            train(_model(task), images, task, RECIPE, seed=2, dp=dp, randomness=_randomness(key), progress=False,
                  checkpoint=ckpt)
    resumed_model = _model(task)
    resumed = train(resumed_model, images, task, RECIPE, seed=2, dp=dp, randomness=_randomness(key),
                    progress=False, checkpoint=ckpt)
    assert resumed.resumed_from > 0 and resumed.ledger == whole.ledger
    for a, b in zip(resumed_model.state_dict().values(), whole_model.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_non_private_training_runs_exactly_the_steps_asked(data, monkeypatch):
    """training.steps: T optimiser steps, the last epoch cut short (70 images at batch 16: 5 steps an epoch)."""
    images, task = data
    count = {"n": 0}
    original = torch.optim.Adam.step

    def counting(self, *args, **kwargs):
        count["n"] += 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.Adam, "step", counting)
    cfg = TrainingConfig(steps=12, batch_size=16)
    result = train(_model(task), images, task, cfg, seed=0, progress=False)
    assert count["n"] == 12 and len(result.statistics) == -(-12 // -(-len(images) // 16))
    assert [s["epoch"] for s in result.statistics] == list(range(1, len(result.statistics) + 1))


def test_the_time_estimates_count_the_steps_the_length_asks_for():
    """`epochs: auto` and `steps` (the default length since the recipe) reach the progress line and `dpmed plan`
    as steps: a study of non-private runs without an epoch count failed after its first run when the estimate
    multiplied the word 'auto'."""
    from dpmed.config import TrainingConfig
    from dpmed.config.plans import RunPlan
    from dpmed.mechanisms import NoPrivacyPlan
    from dpmed.timing import run_steps

    def plan(**training):
        return RunPlan(run_id="np_seed0", arm="np", seed=0, model="small_cnn", swept=(),
                       training=TrainingConfig(**training), audit=None, privacy=NoPrivacyPlan())

    assert run_steps(plan(batch_size=128), 500) == 500                    # auto: 4 steps an epoch, 500 at least
    assert run_steps(plan(batch_size=128), 12800) == 1000                 # auto: 10 epochs of 100
    assert run_steps(plan(batch_size=100, steps=37), 1000) == 37
    assert run_steps(plan(batch_size=100, epochs=3), 1000) == 30
