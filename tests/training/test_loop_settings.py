"""How the training loop turns its settings into its parts: threads and device, the optimiser's own settings, the
augmentation's padding and seed, the step each schedule and augmentation is asked for, and shuffle mode's batch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dpmed.config import TrainingConfig
from dpmed.randomness import PrivacyRandomness, public_seed
from dpmed.training import DpSgdPlan, train
from dpmed.training import loop
from dpmed.training.augmentation import Augmentation


@pytest.mark.parametrize("cores, threads", [(16, 4), (4, 4), (2, 2), (None, 1)])
def test_auto_threads_are_the_cores_up_to_four(monkeypatch, cores, threads):
    monkeypatch.setattr(loop.os, "cpu_count", lambda: cores)
    assert loop.run_threads("auto") == threads
    assert loop.run_threads(3) == 3


def test_a_gpu_that_is_not_there_is_refused_by_name(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert loop.resolve_device("auto") == torch.device("cpu") == loop.resolve_device("cpu")
    with pytest.raises(RuntimeError, match="training.device is 'cuda' but no CUDA device is available"):
        loop.resolve_device("cuda")


def test_the_optimiser_takes_its_momentum_and_weight_decay():
    model = torch.nn.Linear(3, 2)
    adam = loop._optimizer(model, TrainingConfig(optimizer="adam", learning_rate=0.01, weight_decay=0.1))
    assert isinstance(adam, torch.optim.Adam)
    assert adam.param_groups[0]["weight_decay"] == 0.1 and adam.param_groups[0]["lr"] == 0.01
    sgd = loop._optimizer(model, TrainingConfig(optimizer="sgd", learning_rate=0.02, momentum=0.7, weight_decay=0.2))
    assert isinstance(sgd, torch.optim.SGD)
    assert sgd.param_groups[0]["momentum"] == 0.7 and sgd.param_groups[0]["weight_decay"] == 0.2


def test_auto_padding_is_an_eighth_of_the_image_and_each_run_seed_augments_its_own_way(data):
    images, _ = data                                                  # 16 px
    cfg = TrainingConfig(augmentation={"multiplicity": 2})
    first, keys = loop._augmentation(cfg, images, 1)
    assert first.padding == 2 and first.multiplicity == 2 and len(keys) == len(images)
    assert first.seed == np.uint64(public_seed(1, "augmentation"))
    second, _ = loop._augmentation(cfg, images, 2)
    assert second.seed != first.seed
    fixed, _ = loop._augmentation(TrainingConfig(augmentation={"multiplicity": 2, "crop_padding": 5}), images, 1)
    assert fixed.padding == 5
    assert loop._augmentation(TrainingConfig(), images, 1) is None


@pytest.mark.parametrize("dp", [None, DpSgdPlan(noise_multiplier=1.0, max_grad_norm=1.0, sample_rate=0.1, steps=7)],
                         ids=["non-private", "dp-sgd"])
def test_every_step_sets_its_own_rate_and_augments_with_its_own_index(data, new_model, monkeypatch, dp):
    """Steps 0 .. T-1, each once, for the schedule and for the augmentation draw: one off and the warm-up starts
    late, the schedule ends a step early, or every step draws the same crops."""
    images, task = data
    rates, augmented = [], []
    real_rate, real_expand = loop.set_learning_rate, Augmentation.expand

    def rate(optimizer, cfg, step, total):
        rates.append((step, total))
        return real_rate(optimizer, cfg, step, total)

    def expand(self, x, y, keys, step, groups=None):
        augmented.append(step)
        return real_expand(self, x, y, keys, step, groups)

    monkeypatch.setattr(loop, "set_learning_rate", rate)
    monkeypatch.setattr(Augmentation, "expand", expand)
    cfg = TrainingConfig(steps=7, batch_size=16, optimizer="sgd", learning_rate=1e-3,
                         lr_schedule={"kind": "cosine", "warmup_fraction": 0.3}, augmentation={"multiplicity": 2})
    train(new_model(task), images, task, cfg, seed=0, dp=dp, progress=False,
          randomness=None if dp is None else PrivacyRandomness.reproducible(seed=0, run_id="steps"))
    assert rates == [(s, 7) for s in range(7)]
    assert augmented == ([s for s in range(7)] if dp is None else [s for s in range(1, 8)])


def test_shuffle_mode_batches_hold_the_rounded_expected_batch(data, new_model, monkeypatch):
    images, task = data
    n = len(images)
    q = (n // 5 + 0.7) / n                                             # q N = n // 5 + 0.7: rounds up, not down
    seen, real = [], loop.fixed_size_batches

    def batches(units, *, batch_size, steps, rng):
        seen.append((units, batch_size))
        return real(units, batch_size=batch_size, steps=steps, rng=rng)

    monkeypatch.setattr(loop, "fixed_size_batches", batches)
    plan = DpSgdPlan(noise_multiplier=1.0, max_grad_norm=1.0, sample_rate=q, steps=2, sampling="shuffle")
    train(new_model(task), images, task, TrainingConfig(batch_size=16), seed=0, dp=plan, progress=False,
          randomness=PrivacyRandomness.reproducible(seed=0, run_id="shuffle"))
    assert seen == [(n, n // 5 + 1)]


@pytest.mark.parametrize("dp", [None, DpSgdPlan(noise_multiplier=1.0, max_grad_norm=1.0, sample_rate=0.1, steps=4)],
                         ids=["non-private", "dp-sgd"])
def test_each_optimiser_step_takes_the_rate_of_its_own_index(data, new_model, monkeypatch, dp):
    """Warm-up over half of 4 steps (W = 2), then cosine over the other 2: the updates are made at 1/2, 1, 1, 1/2 of
    the base rate (step 3 is half-way through the decay: (1 + cos(pi / 2)) / 2). A rate set after the update would
    make step 0 at the full rate, the very step the warm-up exists for, and shift every later one by a step."""
    images, task = data
    used, real_step = [], torch.optim.SGD.step

    def step(self, *args, **kwargs):
        used.append(self.param_groups[0]["lr"])
        return real_step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.SGD, "step", step)
    cfg = TrainingConfig(steps=4, batch_size=16, optimizer="sgd", learning_rate=0.01,
                         lr_schedule={"kind": "cosine", "warmup_fraction": 0.5})
    train(new_model(task), images, task, cfg, seed=0, dp=dp, progress=False,
          randomness=None if dp is None else PrivacyRandomness.reproducible(seed=0, run_id="rates"))
    assert used == pytest.approx([0.005, 0.01, 0.01, 0.005])


def test_non_private_sgd_is_plain_minibatch_sgd_on_the_seeds_shuffle(data, new_model):
    """Two steps replayed by hand: the batches are the seed's permutation split at the batch size, each update is
    the rate times the gradient of that batch's mean cross-entropy alone (gradients not carried over from the step
    before), from the model's own initial weights. The epoch's training loss is the mean of its batches' losses."""
    images, task = data
    cfg = TrainingConfig(steps=2, batch_size=16, optimizer="sgd", learning_rate=0.05, momentum=0.0)
    trained = new_model(task)
    result = train(trained, images, task, cfg, seed=3, progress=False)
    by_hand, losses = new_model(task).train(), []
    x_all, y_all = torch.from_numpy(images.images), torch.as_tensor(images.labels, dtype=torch.int64)
    order = torch.randperm(len(images), generator=torch.Generator().manual_seed(3))
    for idx in order.split(16)[:2]:
        by_hand.zero_grad()
        loss = torch.nn.functional.cross_entropy(by_hand(x_all[idx]), y_all[idx])
        loss.backward()
        losses.append(loss.item())
        with torch.no_grad():
            for p in by_hand.parameters():
                p -= 0.05 * p.grad
    for a, b in zip(trained.parameters(), by_hand.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert [s["epoch"] for s in result.statistics] == [1]
    assert result.statistics[0]["training_loss"] == pytest.approx((losses[0] + losses[1]) / 2, rel=1e-5)


@pytest.mark.parametrize("dp", [None, DpSgdPlan(noise_multiplier=1.0, max_grad_norm=1.0, sample_rate=0.2, steps=2)],
                         ids=["non-private", "dp-sgd"])
def test_a_model_handed_over_in_eval_mode_trains_in_training_mode(data, new_model, dp):
    """A caller's model left in eval mode (after an evaluation, say) must still train as in training: the classic
    architectures' dropout is off in eval mode."""
    images, task = data
    model = new_model(task).eval()
    modes = []
    model.register_forward_pre_hook(lambda module, args: modes.append(module.training))
    train(model, images, task, TrainingConfig(steps=2, batch_size=16), seed=0, dp=dp, progress=False,
          randomness=None if dp is None else PrivacyRandomness.reproducible(seed=0, run_id="mode"))
    assert modes and all(modes)
