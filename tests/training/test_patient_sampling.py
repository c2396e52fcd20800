"""Patient-level DP-SGD in the training loop (METHODS.md s.2b; McMahan et al. 2018): the unit that is Poisson-sampled
is a patient with all of their images, and the DP step clips each sampled patient's summed gradient as one group.

The accountant counts N_patients units sampled at rate q; its eps holds only if the loop really samples patients
(not images) and really hands the step one group per patient (not one per image, which would let a patient with k
images move the noisy sum by k C). The truth here is worked by hand for the index helpers, and, for the loop itself,
read off what the DP step actually receives: images stamped with their own index so that each row can be traced
back to its patient.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dpmed.config import TrainingConfig
from dpmed.data.synthetic import make_phantom
from dpmed.randomness import PrivacyRandomness
from dpmed.training import DpSgdPlan, DpSgdStep, train
from dpmed.training.loop import _expand, sampling_units
from dpmed.training.objectives import objective_for
from dpmed.training.sampling import poisson_batches

# patient "b" owns images 0, 2, 5; "a" owns 1, 4; "c" owns 3. First appearance: b, a, c (not sorted order a, b, c).
IDS = np.array(["b", "a", "b", "c", "a", "b"])
SIZES = (2, 3) * 15                                  # 30 patients of 2 or 3 images: 75 images
STAMP = 128.0                                        # image i carries i / 128 in its first pixel (exact in float32)


def _training(**changed) -> TrainingConfig:
    """The training settings of every loop test here, with ``changed``."""
    return TrainingConfig(epochs=1, batch_size=8, physical_batch_size=64, optimizer="sgd", learning_rate=1e-3,
                          **changed)


def _steps_made(monkeypatch) -> list:
    """The DP steps the loop builds, appended as it builds them."""
    made, real_init = [], DpSgdStep.__init__

    def spy(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(DpSgdStep, "__init__", spy)
    return made


def _ids_only(patient_ids) -> object:
    """Just what `sampling_units` reads of an ImageSet: its patient ids and its length."""
    class Ids:
        def __init__(self, ids):
            self.patient_ids = np.asarray(ids)

        def __len__(self):
            return len(self.patient_ids)
    return Ids(patient_ids)


def test_an_image_is_its_own_unit():
    offsets, images = sampling_units(_ids_only(IDS), "image")
    assert offsets.tolist() == [0, 1, 2, 3, 4, 5, 6] and images.tolist() == [0, 1, 2, 3, 4, 5]
    assert offsets.dtype == np.int64 and images.dtype == np.int64


def test_a_patient_unit_owns_all_of_their_images_in_order_of_first_appearance():
    """Worked by hand: unit 0 is b (images 0, 2, 5), unit 1 is a (1, 4), unit 2 is c (3)."""
    offsets, images = sampling_units(_ids_only(IDS), "patient")
    assert offsets.tolist() == [0, 3, 5, 6]
    assert images.tolist() == [0, 2, 5, 1, 4, 3]
    assert offsets.dtype == np.int64 and images.dtype == np.int64


def test_an_unknown_unit_is_refused():
    with pytest.raises(ValueError, match="unit must be 'image' or 'patient'"):
        sampling_units(_ids_only(IDS), "study")


def test_expand_lists_each_sampled_unit_with_all_its_images_and_its_unit_as_group():
    """Units 2 (c: image 3) and 0 (b: images 0, 2, 5), in the order sampled; each image tagged with its unit."""
    offsets, images = sampling_units(_ids_only(IDS), "patient")
    idx, groups = _expand(np.array([2, 0]), offsets, images)
    assert idx.tolist() == [3, 0, 2, 5] and groups.tolist() == [2, 0, 0, 0]
    idx, groups = _expand(np.array([0, 1, 2]), offsets, images)
    assert idx.tolist() == [0, 2, 5, 1, 4, 3] and groups.tolist() == [0, 0, 0, 1, 1, 2]
    idx, groups = _expand(np.array([1]), offsets, images)
    assert idx.tolist() == [1, 4] and groups.tolist() == [1, 1]


def test_expand_of_an_empty_batch_is_empty():
    """Poisson sampling draws empty batches now and then; the step still runs (and adds noise) on nothing."""
    offsets, images = sampling_units(_ids_only(IDS), "patient")
    idx, groups = _expand(np.array([], dtype=np.int64), offsets, images)
    assert len(idx) == 0 and len(groups) == 0


@settings(max_examples=60, deadline=None)
@given(ids=st.lists(st.integers(-5, 30), min_size=1, max_size=40), data=st.data())
def test_units_partition_the_images_by_patient_and_expand_recovers_them(ids, data):
    """Against the definition: unit u is the u-th distinct patient in order of appearance and owns exactly the
    images with that id, ascending; expanding any subset of units gives those images, each tagged with its unit."""
    patient_ids = np.array([str(i) for i in ids])
    offsets, images = sampling_units(_ids_only(patient_ids), "patient")
    order = list(dict.fromkeys(patient_ids.tolist()))                 # distinct ids, first appearance first
    assert len(offsets) == len(order) + 1 and sorted(images.tolist()) == list(range(len(ids)))
    for u, pid in enumerate(order):
        assert images[offsets[u]:offsets[u + 1]].tolist() == [i for i, p in enumerate(patient_ids) if p == pid]
    chosen = np.array(sorted(data.draw(st.sets(st.integers(0, len(order) - 1)))), dtype=np.int64)
    idx, groups = _expand(chosen, offsets, images)
    expected = [(i, u) for u in chosen.tolist() for i, p in enumerate(patient_ids) if p == order[u]]
    assert list(zip(idx.tolist(), groups.tolist(), strict=True)) == expected


@pytest.fixture(scope="module")
def patients():
    """75 phantom images owned by 30 patients of 2 or 3 images, in shuffled order; image i carries i / 128 in its
    first pixel so that the rows the DP step receives can be traced back to their image."""
    phantom = make_phantom(n_images=120, image_size=16, seed=0)
    n = sum(SIZES)
    owner = np.repeat(np.arange(len(SIZES)), SIZES)
    owner = owner[np.random.default_rng(0).permutation(n)]
    images = phantom.train.images[:n].copy()
    images[:, 0, 0, 0] = np.arange(n) / STAMP
    base = phantom.train
    data = dataclasses.replace(base, images=images, labels=base.labels[:n], patient_ids=np.array(
        [f"patient-{p:03d}" for p in owner]), sex=base.sex[:n], age=base.age[:n],
        masks=None if base.masks is None else base.masks[:n])
    return data, phantom.task, owner


def test_the_loop_samples_patients_and_hands_the_step_each_one_whole_as_one_group(patients, new_model,
                                                                                  monkeypatch):
    """Every step's batch is a set of whole patients, one group id per patient (so each is clipped as one unit),
    and the number of patients per step follows Binomial(P, q), the law the accountant assumes. Sampling images
    instead of patients, or passing no groups (each image its own unit), breaks the first. The loop's batches are
    exactly the run's sampling stream's draws (checked over 40 trained steps), so the law is checked on 300 draws
    of that stream, without training a step for each: loosely (5 standard errors on the mean, a wide band on the
    variance), under reproducible randomness, so the test is deterministic."""
    data, task, owner = patients
    n_patients, q, steps, drawn = len(SIZES), 0.2, 40, 300
    plan = DpSgdPlan(noise_multiplier=1.0, max_grad_norm=1.0, sample_rate=q, steps=steps, unit="patient",
                     expected_batch_size=q * n_patients, n_units=n_patients)
    cfg = _training()
    seen, real_call = [], DpSgdStep.__call__

    def spy(self, x, y, *, groups=None):
        rows = np.rint(x[:, 0, 0, 0].double().cpu().numpy() * STAMP).astype(np.int64)
        seen.append((rows, None if groups is None else groups.cpu().numpy()))
        return real_call(self, x, y, groups=groups)

    monkeypatch.setattr(DpSgdStep, "__call__", spy)
    result = train(new_model(task), data, task, cfg, seed=0, dp=plan, progress=False,
                   randomness=PrivacyRandomness.reproducible(seed=0, run_id="patient-sampling"))
    assert len(seen) == steps and result.ledger.dp_sgd_steps == steps

    size = np.bincount(owner)
    per_step = []
    for rows, groups in seen:
        assert groups is not None, "patient-level DP-SGD must pass group ids to the DP step"
        assert len(groups) == len(rows) and len(set(rows.tolist())) == len(rows)
        by_group = {g: rows[groups == g] for g in np.unique(groups).tolist()}
        owners = set()
        for g, members in by_group.items():
            (patient,) = set(owner[members].tolist())                    # one group holds one patient's images
            assert len(members) == size[patient], f"patient {patient} arrived with {len(members)} of {size[patient]}"
            owners.add(patient)
        assert len(owners) == len(by_group)                              # and one patient is in one group only
        per_step.append(len(owners))
    # and exactly the units Poisson sampling draws from the run's own sampling stream, not the noise's
    offsets, owned = sampling_units(data, "patient")
    stream = PrivacyRandomness.reproducible(seed=0, run_id="patient-sampling").stream("sampling")
    for (rows, _), units in zip(seen, poisson_batches(n_patients, sample_rate=q, steps=steps, rng=stream), strict=True):
        assert sorted(rows.tolist()) == sorted(_expand(units, offsets, owned)[0].tolist())
    assert len(set(per_step)) > 3 and max(per_step) < n_patients        # a random number, not a fixed batch
    stream = PrivacyRandomness.reproducible(seed=0, run_id="patient-sampling").stream("sampling")
    counts = np.array([len(units) for units in poisson_batches(n_patients, sample_rate=q, steps=drawn, rng=stream)])
    assert counts[:steps].tolist() == per_step
    mean, var = n_patients * q, n_patients * q * (1 - q)
    assert abs(counts.mean() - mean) <= 5 * np.sqrt(var / drawn)
    assert 0.6 * var <= counts.var() <= 1.5 * var


@pytest.mark.parametrize("multiplicity", [1, 3])
def test_the_loop_divides_by_the_expected_units_and_weighs_each_copy_one_kth(patients, new_model, monkeypatch,
                                                                            multiplicity):
    """What the loop hands the DP step. A direct caller's plan may leave the expected batch to the loop: q times the
    units (30 patients), not the images (75), which would scale every update down. With K augmented copies each
    copy's loss weighs 1/K, so that a group's clipped quantity is the mean over its copies, not K times it."""
    data, task, _ = patients
    q = 0.2
    plan = DpSgdPlan(noise_multiplier=1.0, max_grad_norm=1.0, sample_rate=q, steps=2, unit="patient",
                     n_units=len(SIZES))
    cfg = _training(augmentation={"multiplicity": multiplicity})
    made = _steps_made(monkeypatch)
    train(new_model(task), data, task, cfg, seed=0, dp=plan, progress=False,
          randomness=PrivacyRandomness.reproducible(seed=0, run_id="loop-wiring"))
    (step,) = made
    assert step.expected_batch_size == pytest.approx(q * len(SIZES), rel=1e-12)
    z, y = torch.randn(5, 2, generator=torch.Generator().manual_seed(0)), torch.tensor([0, 1, 1, 0, 1])
    whole = objective_for(task.kind).loss(z, y, reduction="sum")
    assert step.loss_fn(z, y).item() == pytest.approx(whole.item() / multiplicity, rel=1e-6)


def test_the_loop_divides_by_the_plans_expected_batch_not_the_exact_count(patients, new_model, monkeypatch):
    """A planned run fixes its divisor q N from the count it planned with (a released, noisy count where the study
    releases its size): the loop must hand the step that q N, not q times the units it holds, a divisor read off the
    exact private count that no accountant covers."""
    data, task, _ = patients
    plan = DpSgdPlan(noise_multiplier=1.0, max_grad_norm=1.0, sample_rate=0.2, steps=1, unit="patient",
                     n_units=33, expected_batch_size=0.2 * 33)
    made = _steps_made(monkeypatch)
    train(new_model(task), data, task, _training(), seed=0, dp=plan, progress=False,
          randomness=PrivacyRandomness.reproducible(seed=0, run_id="planned-divisor"))
    (step,) = made
    assert step.expected_batch_size == pytest.approx(6.6, rel=1e-12)       # not 0.2 x 30 patients = 6


def test_with_augmented_copies_each_patient_is_still_one_group(patients, new_model, monkeypatch):
    """K = 2 copies of every image: a patient's group holds the copies of all of their images (2 x 2 or 2 x 3 rows),
    never one group per image, which would let a patient move the noisy sum by their image count times C."""
    data, task, _ = patients
    plan = DpSgdPlan(noise_multiplier=1.0, max_grad_norm=1.0, sample_rate=0.2, steps=20, unit="patient",
                     n_units=len(SIZES))
    cfg = _training(augmentation={"multiplicity": 2})
    sizes, real_call = [], DpSgdStep.__call__

    def spy(self, x, y, *, groups=None):
        assert groups is not None and len(groups) == len(x)
        sizes.extend(np.unique(groups.cpu().numpy(), return_counts=True)[1].tolist())
        return real_call(self, x, y, groups=groups)

    monkeypatch.setattr(DpSgdStep, "__call__", spy)
    train(new_model(task), data, task, cfg, seed=0, dp=plan, progress=False,
          randomness=PrivacyRandomness.reproducible(seed=0, run_id="copies"))
    assert sizes and set(sizes) == {4, 6}


def test_a_laplace_plan_trains_with_laplace_noise_and_l1_clipping_and_records_it(patients, new_model, monkeypatch):
    """The ledger says Laplace; the step must draw it (its default is Gaussian)."""
    data, task, _ = patients
    plan = DpSgdPlan(noise_multiplier=1.0, max_grad_norm=1.0, sample_rate=0.2, steps=3, unit="patient",
                     n_units=len(SIZES), noise="laplace")
    cfg = _training()
    made = _steps_made(monkeypatch)
    result = train(new_model(task), data, task, cfg, seed=0, dp=plan, progress=False,
                   randomness=PrivacyRandomness.reproducible(seed=0, run_id="laplace"))
    (step,) = made
    assert step.noise == "laplace" and step.norm_order == 1
    assert result.ledger.dp_sgd_steps == 3
    assert {type(e).__name__ for e in result.ledger.events} == {"PoissonLaplaceEvent"}


def test_dp_sgd_gets_no_loss_weighted_by_its_private_labels(patients, new_model, monkeypatch):
    """Label-frequency weights are a statistic of the training labels that no accountant covers: DP-SGD's
    objective is built without them; a non-private arm's with them."""
    from dpmed.training import loop

    data, task, _ = patients
    given, real = [], loop.objective_for

    def spy(kind, *, train_labels=None):
        given.append(train_labels)
        return real(kind, train_labels=train_labels)

    monkeypatch.setattr(loop, "objective_for", spy)
    plan = DpSgdPlan(noise_multiplier=1.0, max_grad_norm=1.0, sample_rate=0.2, steps=1, unit="patient",
                     n_units=len(SIZES))
    cfg = _training()
    train(new_model(task), data, task, cfg, seed=0, dp=plan, progress=False,
          randomness=PrivacyRandomness.reproducible(seed=0, run_id="labels"))
    train(new_model(task), data, task, cfg.model_copy(update={"steps": 1}), seed=0, progress=False)
    assert given[0] is None and given[1] is data.labels
