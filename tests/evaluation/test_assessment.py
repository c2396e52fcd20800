"""One call measures a trained model (`dpmed.evaluation.assessment.assess`): its numbers are those of the evaluation
functions called by hand on the model's scores, redrawn by patient where the dataset names patients (by image where
not), and the private training-set metrics appear only when the study asks, renamed and marked as not covered."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

import dpmed.data.pace
from dpmed.config import EvaluationConfig
from dpmed.data import Dataset, ImageSet, Task
from dpmed.evaluation.assessment import assess
from dpmed.evaluation.fairness import evaluate_fairness
from dpmed.evaluation.inference import predict, predict_logits, scored_at_once
from dpmed.evaluation.utility import evaluate_utility

TASK = Task(kind="binary", label_names=("normal", "pneumonia"))


def _images(n: int, seed: int) -> ImageSet:
    """Two images per patient; the label shows in the mean brightness, with noise, so the AUROC is high but not 1."""
    rng = np.random.default_rng(seed)
    labels = np.repeat(rng.integers(0, 2, n // 2), 2)
    images = (rng.random((n, 1, 4, 4)) * 0.6 + 0.05 * labels[:, None, None, None]).astype(np.float32)
    return ImageSet(images=images, labels=labels, patient_ids=np.repeat([f"p{seed}-{i}" for i in range(n // 2)], 2),
                    sex=np.where(np.arange(n) % 4 < 2, "female", "male"), age=np.tile([25.0, 25.0, 75.0, 75.0], n // 4))


def _dataset(patients_known: bool) -> Dataset:
    return Dataset(name="tiny", task=TASK, train=_images(40, 0), val=_images(40, 1), test=_images(60, 2),
                   patients_known=patients_known)


def _model() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Dropout(0.5), nn.Linear(16, 2))
    with torch.no_grad():
        model[2].weight.copy_(torch.stack([-torch.ones(16), torch.ones(16)]))
        model[2].bias.zero_()
    return model


def _assess(dataset: Dataset, config: EvaluationConfig, model: nn.Module | None = None):
    return assess(model or _model(), dataset, (dataset.val, dataset.test), config, cam_layer="2",
                  device=torch.device("cpu"), training=dataset.train)


@pytest.mark.parametrize("patients_known", [True, False])
def test_the_numbers_are_those_of_the_evaluation_functions_on_the_model_s_scores(patients_known):
    dataset = _dataset(patients_known)
    config = EvaluationConfig(bootstrap_resamples=50, bootstrap_seed=7, confidence=0.9,
                              fairness={"attributes": ["sex", "age"], "age_bins": [0, 50, 100]})
    out = _assess(dataset, config)
    val, test = (predict(_model(), s, TASK) for s in (dataset.val, dataset.test))
    np.testing.assert_array_equal(out.val_scores, val)
    np.testing.assert_array_equal(out.test_scores, test)
    ids = dataset.test.patient_ids if patients_known else None
    utility = evaluate_utility(kind="binary", label_names=list(TASK.label_names), val_labels=dataset.val.labels,
                               val_scores=val, test_labels=dataset.test.labels, test_scores=test, n_resamples=50,
                               seed=7, confidence=0.9, test_patient_ids=ids)
    assert out.metrics == {k: None if isinstance(v, float) and not np.isfinite(v) else v for k, v in utility.items()}
    assert out.metrics["bootstrap_unit"] == ("patient" if patients_known else "image")
    assert 0.7 < out.metrics["test_auroc"] < 1.0
    fairness = evaluate_fairness(kind="binary", val_labels=dataset.val.labels, val_scores=val,
                                 test_labels=dataset.test.labels, test_scores=test,
                                 attributes={"sex": dataset.test.sex, "age": dataset.test.age}, age_bins=[0, 50, 100],
                                 n_resamples=50, seed=7, confidence=0.9, patient_ids=ids)
    assert out.fairness == fairness and out.fairness.bootstrap_unit == out.metrics["bootstrap_unit"]
    assert out.training_metrics is None and out.explanations is None and out.cams is None


def test_training_metrics_come_only_when_asked_renamed_and_marked_private():
    dataset = _dataset(True)
    assert _assess(dataset, EvaluationConfig(bootstrap_resamples=20, fairness=None)).training_metrics is None
    out = _assess(dataset, EvaluationConfig(bootstrap_resamples=20, fairness=None, training_metrics=True))
    private = out.training_metrics
    assert private["covered_by_eps"] is False and "private" in private["note"]
    assert not any(key.startswith("test_") for key in private) and out.fairness is None
    by_hand = evaluate_utility(kind="binary", label_names=list(TASK.label_names), val_labels=dataset.val.labels,
                               val_scores=out.val_scores, test_labels=dataset.train.labels,
                               test_scores=predict(_model(), dataset.train, TASK), n_resamples=20, seed=0,
                               confidence=0.95, test_patient_ids=dataset.train.patient_ids)
    assert private["train_auroc"] == by_hand["test_auroc"] and private["train_accuracy"] == by_hand["test_accuracy"]


def test_scores_come_from_eval_mode_and_the_model_goes_back_to_its_mode():
    """Dropout on during evaluation would make the scores random; the training loop's model must stay in training."""
    model = _model().train()
    first, second = (predict(model, _dataset(True).test, TASK, batch_size=7) for _ in range(2))
    np.testing.assert_array_equal(first, second)
    assert model.training
    model.eval()
    predict(model, _dataset(True).test, TASK)
    assert not model.training
    assert len(first) == 60                                            # every image, over uneven chunks


def test_an_undefined_metric_is_written_as_none_not_nan():
    """run.json is written with allow_nan=False: a finding with no positive test image has no AUROC, which must read
    as None."""
    findings = Task(kind="multilabel", label_names=("effusion", "nodule"))

    def two_findings(images: ImageSet, second: bool) -> ImageSet:
        labels = np.stack([images.labels, images.labels if second else np.zeros_like(images.labels)], 1)
        return ImageSet(images=images.images, labels=labels.astype(np.float32), patient_ids=images.patient_ids,
                        sex=images.sex, age=images.age)

    tiny = _dataset(True)
    dataset = Dataset(name="tiny", task=findings, train=two_findings(tiny.train, True),
                      val=two_findings(tiny.val, True), test=two_findings(tiny.test, False))
    out = _assess(dataset, EvaluationConfig(bootstrap_resamples=20, fairness=None))
    assert out.metrics["test_auroc[nodule]"] is None and out.metrics["test_auroc"] is not None
    assert not any(isinstance(v, float) and not np.isfinite(v) for v in out.metrics.values())


def test_logits_are_the_raw_outputs_in_float64_and_their_softmax_is_the_score():
    model, test = _model(), _dataset(True).test
    logits = predict_logits(model, test, batch_size=16)
    with torch.no_grad():
        expected = model.eval()(torch.from_numpy(test.images)).double().numpy()
    assert logits.dtype == np.float64 and np.allclose(logits, expected)
    np.testing.assert_allclose(torch.from_numpy(logits).softmax(1)[:, 1].numpy(), predict(model, test, TASK),
                               rtol=1e-6)


def test_confident_scores_are_not_rounded_to_ties():
    """Logit margins 18 (a negative) and 25 (a positive): a float32 softmax read both as exactly 1.0, so AUROC 0.5
    where the model ranks them perfectly, and Increase in Confidence could never hold for either. Scores now come
    from the logits in float64, as scikit-learn on the logits ranks them."""
    from sklearn.metrics import roc_auc_score

    from dpmed.evaluation.cams import class_probabilities

    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 2))
    with torch.no_grad():
        model[1].weight.copy_(torch.stack([torch.zeros(16), torch.ones(16)]))
        model[1].bias.zero_()
    images = np.stack([np.full((1, 4, 4), margin / 16, np.float32) for margin in (18, 25)])
    test = ImageSet(images=images, labels=np.array([0, 1]), patient_ids=np.array(["a", "b"]),
                    sex=np.array(["female", "male"]), age=np.array([30.0, 40.0]))
    scores = predict(model, test, TASK)
    assert scores[0] < scores[1] < 1.0 and roc_auc_score(test.labels, scores) == 1.0
    probabilities = class_probabilities(model, images, kind="binary")[:, 1]
    assert probabilities[0] < probabilities[1] < 1.0


@pytest.mark.parametrize("kind, n_labels", [("binary", 1), ("multilabel", 14)])
def test_the_memory_estimate_of_the_redraws_holds_what_utility_and_fairness_take(kind, n_labels):
    """`redraw_memory` is what `dpmed run` refuses redraws by before training: it must not fall below what the
    evaluation then takes (measured by tracemalloc, which numpy reports to), or a study it passes fails in every
    run's evaluation, nor lie far above it. Before, 64 bytes a redraw and image whatever the findings: fairness of
    the 14 findings of NIH ChestX-ray14 in 4 age groups took nearly twice that here."""
    import tracemalloc

    from dpmed.evaluation.assessment import redraw_memory

    tiny, rng = _dataset(False), np.random.default_rng(0)
    task = TASK if kind == "binary" else Task(kind="multilabel", label_names=tuple(f"f{j}" for j in range(n_labels)))

    def labelled(images: ImageSet) -> ImageSet:
        labels = images.labels if kind == "binary" else rng.integers(0, 2, (len(images), n_labels))
        return ImageSet(images=images.images, labels=labels, patient_ids=images.patient_ids, sex=images.sex,
                        age=rng.integers(0, 100, len(images)).astype(float))      # 4 age groups

    dataset = Dataset(name="tiny", task=task, train=labelled(tiny.train), val=labelled(tiny.val),
                      test=labelled(tiny.test))
    config = EvaluationConfig(bootstrap_resamples=3000, fairness={"attributes": ["sex", "age"],
                                                                  "age_bins": [0, 20, 50, 80, 100]})
    shape = dataset.test.labels.shape
    val_scores, test_scores = rng.random(dataset.val.labels.shape), rng.random(shape)
    peaks = []
    for evaluate in (lambda: evaluate_utility(kind=kind, label_names=task.label_names, val_labels=dataset.val.labels,
                                              val_scores=val_scores, test_labels=dataset.test.labels,
                                              test_scores=test_scores, n_resamples=3000),
                     lambda: evaluate_fairness(kind=kind, val_labels=dataset.val.labels, val_scores=val_scores,
                                               test_labels=dataset.test.labels, test_scores=test_scores,
                                               attributes={"sex": dataset.test.sex, "age": dataset.test.age},
                                               age_bins=[0, 20, 50, 80, 100], n_resamples=3000)):
        tracemalloc.start()
        try:
            evaluate()
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    need = redraw_memory(config, dataset)
    assert max(peaks) <= need.total <= 1.5 * max(peaks), (peaks, need)
    assert need.training == 0
    # the private training-set metrics: utility again, on the training images
    tracemalloc.start()
    try:
        evaluate_utility(kind=kind, label_names=task.label_names, val_labels=dataset.val.labels,
                         val_scores=val_scores, test_labels=dataset.train.labels,
                         test_scores=rng.random(dataset.train.labels.shape), n_resamples=3000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    training = redraw_memory(config.model_copy(update={"training_metrics": True}), dataset).training
    assert peak <= training <= 1.5 * peak, (peak, training)


def test_undefined_redraws_of_the_training_set_are_named_as_such_not_as_the_test_set():
    """The warning that many redraws left a metric undefined named "the test set" and test_auroc also where the
    private training-set metrics gave it, so a reader looked for a fault in the test set that was not there."""
    tiny = _dataset(True)
    one_positive = np.zeros(40, dtype=tiny.train.labels.dtype)
    one_positive[0] = 1                                  # most redraws of 20 patients draw no positive
    train = ImageSet(images=tiny.train.images, labels=one_positive, patient_ids=tiny.train.patient_ids,
                     sex=tiny.train.sex, age=tiny.train.age)
    dataset = Dataset(name="tiny", task=TASK, train=train, val=tiny.val, test=tiny.test, patients_known=True)
    with pytest.warns(RuntimeWarning) as caught:
        _assess(dataset, EvaluationConfig(bootstrap_resamples=50, fairness=None, training_metrics=True))
    messages = [str(w.message) for w in caught if "bootstrap redraws" in str(w.message)]
    assert messages and all("redraws of the training set" in m and m.startswith("train_") for m in messages)


class _SlowModel(nn.Module):
    """The test model, each forward pass 15 s on the clock the progress lines read."""

    def __init__(self, clock: list[float]) -> None:
        super().__init__()
        self.model, self.clock = _model(), clock

    def forward(self, x):
        self.clock[0] += 15.0
        return self.model(x)


def _clock(monkeypatch) -> list[float]:
    now = [1000.0]
    monkeypatch.setattr(dpmed.data.pace, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    return now


def test_scoring_logs_how_far_it_is_naming_the_run(monkeypatch, caplog):
    """At 224 px a run's validation and test sets took minutes to score on a CPU with nothing on the terminal after
    'evaluating on ...'. Paced lines, naming the run: at most one per interval, none at the start or the end."""
    model = _SlowModel(_clock(monkeypatch))
    with caplog.at_level(logging.INFO, logger="dpmed.evaluation"):
        predict(model, _images(100, 2), TASK, batch_size=20, label="arm_seed0", what="test images")
    # 5 chunks of 15 s: 30 s at 40 % (45 s left), 60 s at 80 % (15 s left), each 1 min rounded up
    assert [r.getMessage() for r in caplog.records] == [f"arm_seed0: test images {p} % scored, about 1 min left"
                                                        for p in (40, 80)]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="dpmed.evaluation"):
        predict(model, _images(100, 2), TASK, batch_size=20)           # unnamed (the privacy audit's canaries)
    assert caplog.records == []


def test_a_run_s_evaluation_logs_how_far_each_set_is_scored(monkeypatch, caplog):
    """Sets of 256 images or fewer were scored in one chunk, with no line at all, which at 224 px took minutes."""
    n = 3 * scored_at_once(_images(4, 0).image_shape)            # 3 chunks of 15 s each
    dataset = Dataset(name="small", task=TASK, train=_images(n, 0), val=_images(n, 1), test=_images(n, 2),
                      patients_known=True)
    model = _SlowModel(_clock(monkeypatch))
    with caplog.at_level(logging.INFO, logger="dpmed.evaluation"):
        assess(model, dataset, (dataset.val, dataset.test),
               EvaluationConfig(bootstrap_resamples=20, fairness=None, training_metrics=True), cam_layer="model.2",
               device=torch.device("cpu"), training=dataset.train, label="arm_seed0")
    # one interval for the run's scoring: 30 s into the validation set, then 30 s later the test set's first chunk
    assert [m for m in caplog.messages if " scored, " in m] == [
        f"arm_seed0: {what} images {p} % scored, about 1 min left"
        for what, p in (("validation", 67), ("test", 33), ("training", 33))]


def test_a_validation_and_a_test_set_each_scored_within_the_interval_still_log_a_line(monkeypatch, caplog):
    """Each set was paced on its own: a validation set and then a test set, each a little faster than the interval,
    scored in silence however long the two took together."""
    n = 2 * scored_at_once(_images(4, 0).image_shape)            # 2 chunks of 15 s each: no line within a set
    dataset = Dataset(name="small", task=TASK, train=_images(n, 0), val=_images(n, 1), test=_images(n, 2),
                      patients_known=True)
    model = _SlowModel(_clock(monkeypatch))
    with caplog.at_level(logging.INFO, logger="dpmed.evaluation"):
        assess(model, dataset, (dataset.val, dataset.test), EvaluationConfig(bootstrap_resamples=20, fairness=None),
               cam_layer="model.2", device=torch.device("cpu"), label="arm_seed0")
    assert [m for m in caplog.messages if " scored, " in m] == ["arm_seed0: test images 50 % scored, about 1 min left"]


class _Sizes(nn.Module):
    """Records the images of each forward pass; scores nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.weight, self.sizes = nn.Parameter(torch.zeros(())), []

    def forward(self, x):
        self.sizes.append(len(x))
        return torch.zeros(len(x), 2) + self.weight


@pytest.mark.parametrize("side", [28, 64, 224])
def test_scoring_chunks_follow_the_pixels_of_an_image(side):
    """Chunks of 32 images made a 28 and 64 px ScatterNet's scoring slower than chunks of 256; at 224 px a chunk of
    256 took minutes, with no progress line. So a chunk holds at most 256 images and about 32 of 224 px."""
    images = _images(300, 0)
    images = images.with_images(np.zeros((300, 1, side, side), dtype=np.float32))
    model = _Sizes()
    predict(model, images, TASK)
    assert max(model.sizes) <= 256 and sum(model.sizes) == 300
    assert max(model.sizes) * side * side <= 2 * 32 * 224 * 224         # about 32 images of 224 px at most
    assert side > 64 or min(model.sizes) >= 150                         # small images: 2 chunks of 300, not 10
