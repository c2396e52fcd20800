"""A run's explanations (METHODS.md sec. 6): every metric with an interval, the arrays the report's CAM grid is
drawn from, the same images for every arm, and the caller's model left in its mode."""

from __future__ import annotations

import logging
import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import dpmed.data.pace
import dpmed.evaluation.explanations
from dpmed.evaluation.cams import cams_of_plain
from dpmed.evaluation.explanations import explain, explain_test_set
from dpmed.models import build_model


def test_explain_reports_every_metric_with_an_interval_and_the_arrays_for_the_grid():
    torch.manual_seed(0)
    model = build_model("small_cnn", in_channels=1, num_outputs=2, image_size=16).train()
    rng = np.random.default_rng(0)
    images = rng.random((10, 1, 16, 16)).astype(np.float32)
    masks = np.zeros((10, 16, 16), bool)
    masks[::2, 4:8, 4:8] = True
    record, arrays = explain_test_set(model, images, masks, kind="binary", target_layer="features",
                                      method="gradcam", n_images=6, seed=0, deletion_steps=4, pointing_tolerance=0,
                                      n_resamples=50)
    assert set(record.metrics) == {"average_drop", "increase_in_confidence", "masked_input_score", "deletion_auc",
                                      "insertion_auc", "mask_energy", "pointing_game"}
    for est in record.metrics.values():
        assert est.low <= est.high and est.n >= 1
    assert record.target_layer == "features" and record.n_images == 6 and model.training
    assert record.mask_area_share == pytest.approx(16 / 256)
    positions = arrays["positions"]
    assert arrays["cams"].shape == (6, 16, 16) and arrays["images"].shape == (6, 1, 16, 16)
    np.testing.assert_array_equal(arrays["masks"], masks[positions])
    assert len(arrays["lesion_positions"]) == record.n_masked_images == int(masks[positions].any(axis=(1, 2)).sum())
    # the same call explains the same images: every arm of a study shows the same columns in the CAM grid
    again, arrays2 = explain(model, images[positions], kind="binary", target_layer="features", deletion_steps=4,
                             n_resamples=50)
    np.testing.assert_array_equal(arrays2["cams"], arrays["cams"])


def test_all_zero_maps_are_counted_for_the_maps_each_metric_reads(monkeypatch):
    """``n_zero_cams`` counts the predicted-class maps, which the confidence and deletion/insertion metrics read;
    mask energy and the pointing game read separate lesion-class maps, whose all-zero maps (0 energy, a miss) are
    counted apart as ``n_zero_lesion_cams``."""
    calls = []

    def fake_cams(clone, images, *, targets, **kw):
        maps = np.zeros((len(images), 16, 16), np.float32)
        maps[:, 5, 5] = 1.0                                      # a peak inside the lesion masks below
        if calls:
            maps[:2] = 0.0                                       # the second call, lesion maps: two all-zero
        else:
            maps[-1] = 0.0                                       # the first, predicted-class maps: one all-zero
        calls.append(list(targets))
        return maps

    monkeypatch.setattr("dpmed.evaluation.explanations.cams_of_plain", fake_cams)
    torch.manual_seed(0)
    model = build_model("small_cnn", in_channels=1, num_outputs=2, image_size=16)
    images = np.random.default_rng(0).random((6, 1, 16, 16)).astype(np.float32)
    masks = np.zeros((6, 16, 16), bool)
    masks[:4, 4:8, 4:8] = True                                    # four images carry a lesion mask
    record, _ = explain(model, images, kind="binary", target_layer="features", masks=masks, deletion_steps=2,
                        n_resamples=20)
    assert calls[1] == [1, 1, 1, 1]                               # the lesion maps: class 1 on the masked images
    assert record.n_zero_cams == 1 and record.n_zero_lesion_cams == 2 and record.n_masked_images == 4
    assert record.metrics["mask_energy"].value == pytest.approx(0.5)    # two maps all inside, two score 0
    assert record.metrics["pointing_game"].value == pytest.approx(0.5)  # two hits, two misses


def test_every_metric_redraws_the_patients_it_is_given(monkeypatch):
    """The mask metrics included: their intervals redrew images while the rest redrew patients."""
    import dpmed.evaluation.explanations as explanations

    seen = {}
    real = explanations.mean_with_interval

    def spy(values, *, patient_ids=None, **kwargs):
        seen[len(seen)] = None if patient_ids is None else list(patient_ids)
        return real(values, patient_ids=patient_ids, **kwargs)

    monkeypatch.setattr(explanations, "mean_with_interval", spy)
    torch.manual_seed(0)
    model = build_model("small_cnn", in_channels=1, num_outputs=2, image_size=16)
    images = np.random.default_rng(0).random((8, 1, 16, 16)).astype(np.float32)
    masks = np.zeros((8, 16, 16), bool)
    masks[:, 4:8, 4:8] = True
    ids = [f"p{i // 2}" for i in range(8)]
    explain(model, images, kind="binary", target_layer="features", deletion_steps=4, n_resamples=20, masks=masks,
            patient_ids=ids)
    assert len(seen) == 7 and all(got == ids for got in seen.values())


class _Brightness(torch.nn.Module):
    """logits (-m, 2m), m the mean of the normalised image (x - 0.5): class 1 for images brighter than 0.5 on
    average, class 0 for darker ones (tests/evaluation/test_cams.py's Linear, with the centring)."""

    def __init__(self) -> None:
        super().__init__()
        self.features = torch.nn.Conv2d(1, 1, kernel_size=1, bias=False)
        self.head = torch.nn.Linear(1, 2, bias=False)
        with torch.no_grad():
            self.features.weight.fill_(1.0)
            self.head.weight.copy_(torch.tensor([[-1.0], [2.0]]))

    def forward(self, x):
        return self.head(self.features(x).mean(dim=(2, 3)))


def test_each_image_is_explained_for_its_own_predicted_class_and_the_arrays_are_its_own(monkeypatch):
    """Ten images, brightness rising with their index: the first five are predicted class 0, the rest class 1, so a
    target fixed at 1 (or the least likely class) shows. The explained images, their patients and the image seed are
    the selected ones, and the selection is a seeded draw, sorted, not the first n."""
    from dpmed.evaluation import explanations

    images = np.stack([np.full((1, 8, 8), 0.31 + 0.04 * i, np.float32) for i in range(10)])  # 0.31 .. 0.67
    seen_ids = []
    real = explanations.mean_with_interval

    def spy(values, *args, patient_ids=None, **kwargs):
        seen_ids.append(None if patient_ids is None else list(patient_ids))
        return real(values, *args, patient_ids=patient_ids, **kwargs)

    monkeypatch.setattr(explanations, "mean_with_interval", spy)
    record, arrays = explain_test_set(
        _Brightness(), images, None, kind="binary", target_layer="features", method="gradcam", n_images=6, seed=3,
        deletion_steps=4, pointing_tolerance=0, n_resamples=20, normalization=((0.5,), (1.0,)),
        patient_ids=[f"p{i}" for i in range(10)])
    positions = explanations.select_images(10, n_images=6, seed=3)
    assert positions.tolist() == sorted(np.random.default_rng(3).choice(10, 6, replace=False).tolist())
    assert positions.tolist() != list(range(6)) and len(set(positions.tolist())) == 6
    assert explanations.select_images(10, n_images=6, seed=4).tolist() != positions.tolist()
    np.testing.assert_array_equal(arrays["positions"], positions)
    assert arrays["targets"].tolist() == [int(p >= 5) for p in positions]          # 0.47 at index 4, 0.51 at 5
    np.testing.assert_array_equal(arrays["images"], images[positions].astype(np.float16))
    assert record.image_seed == 3 and seen_ids and all(ids == [f"p{p}" for p in positions] for ids in seen_ids)


def test_a_binary_run_explains_the_class_its_validation_threshold_decides():
    """The utility metrics call an image predicted class 1 where P(class 1) >= the run's Youden threshold; the CAMs
    explained the argmax (0.5) instead, so an image of P(class 1) 0.45 at a threshold of 0.44 was counted as
    predicted pneumonia and explained as normal. Brightness 0.31 + 0.04 i: P(class 1) = sigmoid(3 (0.04 i - 0.19)),
    0.418 at i = 2 and 0.448 at i = 3."""
    images = np.stack([np.full((1, 8, 8), 0.31 + 0.04 * i, np.float32) for i in range(10)])
    common = dict(kind="binary", target_layer="features", deletion_steps=4, n_resamples=20,
                  normalization=((0.5,), (1.0,)))
    record, arrays = explain(_Brightness(), images, threshold=0.44, **common)
    assert arrays["targets"].tolist() == [int(i >= 3) for i in range(10)]
    assert record.explained_class == "predicted (at the run's validation Youden threshold)"
    record, arrays = explain(_Brightness(), images, **common)                 # no threshold given: the argmax
    assert arrays["targets"].tolist() == [int(i >= 5) for i in range(10)] and "argmax" in record.explained_class


def test_lesion_maps_are_the_lesion_class_s_on_the_masked_images_whatever_was_predicted():
    """Six images, brightness rising with their index (the first three predicted class 0), masks on images 0, 2 and
    5: the lesion maps are class 1's on exactly those three, stored with their positions, and mask energy reads
    them, not the predicted-class maps. The masked-input score O is the model's score, by hand, on the CAM-weighted
    image E = L * I."""
    from dpmed.evaluation.cams import cams_of_plain

    ramp = np.linspace(-0.04, 0.04, 8, dtype=np.float32)[None, None, :]           # structure within each image
    images = np.stack([np.full((1, 8, 8), 0.35 + 0.06 * i, np.float32) + ramp for i in range(6)])
    masks = np.zeros((6, 8, 8), bool)
    masks[[0, 2, 5], 2:5, 5:8] = True
    model = _Brightness()
    record, arrays = explain(model, images, kind="binary", target_layer="features", masks=masks, deletion_steps=2,
                             n_resamples=20, normalization=((0.5,), (1.0,)))
    assert arrays["targets"].tolist() == [0, 0, 0, 1, 1, 1]
    assert arrays["lesion_positions"].tolist() == [0, 2, 5] and record.n_masked_images == 3
    lesion = cams_of_plain(model, images[[0, 2, 5]], target_layer="features", targets=[1, 1, 1], method="gradcam",
                           normalization=((0.5,), (1.0,)))
    np.testing.assert_allclose(arrays["lesion_cams"].astype(np.float32), lesion, atol=1e-3)
    assert not np.allclose(arrays["lesion_cams"][0], arrays["cams"][0], atol=1e-2)   # class 1's map, not class 0's
    np.testing.assert_allclose(arrays["lesion_cams"][2], arrays["cams"][5], atol=1e-3)  # image 5: predicted 1 too
    energy = [(cam * mask).sum() / cam.sum() if cam.sum() > 0 else 0.0
              for cam, mask in zip(lesion, masks[[0, 2, 5]], strict=True)]
    assert record.metrics["mask_energy"].value == pytest.approx(np.mean(energy), abs=1e-3)
    # O by hand: logits (-m, 2m), m the mean of E - 0.5; the score is the softmax of the predicted class
    m = (arrays["cams"].astype(np.float32)[:, None] * images - 0.5).mean(axis=(1, 2, 3))
    logits = np.stack([-m, 2 * m], axis=1)
    expected = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(arrays["score_masked"], expected[np.arange(6), arrays["targets"]], atol=2e-3)


class _TwoFindings(torch.nn.Module):
    """Finding j's logit is the mean of input channel j (a 1x1 identity convolution, then global average pooling):
    Grad-CAM of y_j is channel j divided by its max, and of y_0 + y_1 the channels' sum divided by its max."""

    def __init__(self) -> None:
        super().__init__()
        self.features = torch.nn.Conv2d(2, 2, kernel_size=1, bias=False)
        self.head = torch.nn.Linear(2, 2, bias=False)
        with torch.no_grad():
            self.features.weight.copy_(torch.eye(2)[:, :, None, None])
            self.head.weight.copy_(torch.eye(2))

    def forward(self, x):
        return self.head(self.features(x).mean(dim=(2, 3)))


def test_a_multilabel_run_s_lesion_maps_explain_every_finding_the_masks_mark():
    """The masks of a multilabel phantom mark the lesions of both findings (an opacity in the image-left lung, and
    one in the image-right lung) together. One image whose only lesion is in the left half, the left finding's
    evidence (channel 0: 0.8 there, 0.1 elsewhere) beside the right finding's (channel 1: 0.1 there, 0.5 elsewhere).
    Grad-CAM of y_0 + y_1 is 0.9 / 0.9 = 1 on the left half and 0.6 / 0.9 = 2/3 on the right, so the mask holds
    32 / (32 + 32 * 2/3) = 0.6 of its energy and its peak (the left half's centre) is inside. Finding 1's map alone
    (0.2 on the left, 1 on the right) held 0.2 / 1.2 of it and pointed outside the lesion."""
    image = np.empty((1, 2, 8, 8), np.float32)
    image[0, 0], image[0, 1] = 0.1, 0.5
    image[0, 0, :, :4], image[0, 1, :, :4] = 0.8, 0.1
    masks = np.zeros((1, 8, 8), bool)
    masks[0, :, :4] = True
    record, arrays = explain(_TwoFindings(), image, kind="multilabel", target_layer="features", masks=masks,
                             deletion_steps=2, n_resamples=20)
    expected = np.where(np.arange(8) < 4, 1.0, 2.0 / 3.0)[None, None, :].repeat(8, axis=1)
    np.testing.assert_allclose(arrays["lesion_cams"].astype(np.float32), expected, atol=1e-3)
    assert record.metrics["mask_energy"].value == pytest.approx(0.6, abs=1e-3)
    assert record.metrics["pointing_game"].value == 1.0
    assert "sum" in record.lesion_target and record.lesion_class is None


def test_masks_that_mark_no_lesion_give_a_note_and_no_lesion_metrics():
    """Masks are given (a dataset that has them) but none of the explained images carries one: mask energy and the
    pointing game have nothing to be scored on, and the record says why they are missing."""
    images = np.random.default_rng(0).random((3, 1, 16, 16)).astype(np.float32)
    record, arrays = explain(_Brightness(), images, kind="binary", target_layer="features", deletion_steps=2,
                             n_resamples=20, masks=np.zeros((3, 16, 16), bool))
    assert record.mask_note == "none of the explained images carries a lesion mask"
    assert "mask_energy" not in record.metrics and "pointing_game" not in record.metrics
    assert record.n_masked_images is None and "lesion_cams" not in arrays


def test_patient_ids_that_are_not_one_per_explained_image_are_refused_before_any_map_is_computed(monkeypatch):
    """Refused first: the maps and the deletion curves are most of an explanation's time."""
    from dpmed.evaluation import explanations

    def no_maps(*args, **kwargs):
        raise AssertionError("maps computed before the patient ids were checked")
    monkeypatch.setattr(explanations, "cams_of_plain", no_maps)
    images = np.random.default_rng(0).random((3, 1, 16, 16)).astype(np.float32)
    with pytest.raises(ValueError, match="2 patient ids for 3 explained images"):
        explain(_Brightness(), images, kind="binary", target_layer="features", deletion_steps=2, n_resamples=20,
                patient_ids=["p1", "p2"])


def test_a_multilabel_run_says_it_explains_the_finding_of_the_highest_score_not_a_predicted_class():
    """A multilabel run decides each finding at its own threshold, so an image may be decided to hold none or
    several: its CAM is of the finding with the highest score, which the record called "predicted (argmax)", as if
    the run had predicted that finding. Finding 1's evidence (0.5) outweighs finding 0's (0.1)."""
    image = np.empty((1, 2, 8, 8), np.float32)
    image[0, 0], image[0, 1] = 0.1, 0.5
    record, arrays = explain(_TwoFindings(), image, kind="multilabel", target_layer="features", deletion_steps=2,
                             n_resamples=20)
    assert arrays["targets"].tolist() == [1]
    assert "predicted" not in record.explained_class
    assert "finding with the highest score" in record.explained_class and "threshold" in record.explained_class


def test_the_deletion_and_insertion_curves_log_how_far_they_are(monkeypatch, caplog):
    """Each explained image costs 2 (steps + 1) forward passes: 64 images at 224 px took minutes of a run's
    evaluation with nothing on the terminal. Lines name the run, as training's do; none at the start or the end."""
    monkeypatch.setattr(dpmed.data.pace, "REPORT_EVERY", 0.0)
    images = np.random.default_rng(0).random((10, 1, 8, 8)).astype(np.float32)
    with caplog.at_level(logging.INFO, logger="dpmed.evaluation"):
        explain_test_set(_Brightness(), images, None, kind="binary", target_layer="features", method="gradcam",
                         n_images=4, seed=0, deletion_steps=63, pointing_tolerance=0, n_resamples=20,
                         label="arm_seed0")      # 2 x 64 variants: one image a batch of 128
    lines = [re.sub(r"about \d+ min", "about N min", r.getMessage()) for r in caplog.records]
    assert lines == ["arm_seed0: explaining 4 images (gradcam maps, deletion and insertion curves), about N min",
                     *(f"arm_seed0: deletion and insertion curves of {i} of 4 explained images, about N min left"
                       for i in (1, 2, 3))]


class _Slow(_Brightness):
    """:class:`_Brightness`, each forward pass 10 s on the clock the explanations read (a class attribute: the
    explanations run on a deep copy of the model)."""

    clock = [1000.0]
    tick = 10.0

    def forward(self, x):
        self.clock[0] += self.tick
        return super().forward(x)


def _on_the_clock(monkeypatch, now: list[float]) -> None:
    """The explanations and their curves' progress lines read ``now`` instead of the wall clock."""
    clock = SimpleNamespace(perf_counter=lambda: now[0])
    monkeypatch.setattr(dpmed.evaluation.explanations, "time", clock)
    monkeypatch.setattr(dpmed.data.pace, "time", clock)


def test_a_long_explanation_says_so_before_its_maps_from_its_first_pass(monkeypatch, caplog):
    """At 224 px the scores, maps and masked scores before the first curve line took minutes with nothing on the
    terminal. The first pass over the images (their scores) times the whole: passes of 4 images, each its scores, its
    map (3), its masked input's scores and 2 (3 + 1) curve points, and 2 lesion maps (3 each): 58 x 10 s / 4, 145 s,
    3 min. Said before the maps are computed."""
    _on_the_clock(monkeypatch, _Slow.clock)
    said_before_maps = []

    def cams(*args, **kwargs):
        said_before_maps.append(len(caplog.records))
        return cams_of_plain(*args, **kwargs)

    monkeypatch.setattr(dpmed.evaluation.explanations, "cams_of_plain", cams)
    images = np.random.default_rng(0).random((4, 1, 8, 8)).astype(np.float32)
    masks = np.zeros((4, 8, 8), bool)
    masks[:2, 2:4, 2:4] = True
    with caplog.at_level(logging.INFO, logger="dpmed.evaluation.explanations"):
        explain(_Slow(), images, kind="binary", target_layer="features", masks=masks, deletion_steps=3,
                n_resamples=20, label="arm_seed0")
    assert [r.getMessage() for r in caplog.records] == [
        "arm_seed0: explaining 4 images (gradcam maps, deletion and insertion curves), about 3 min"]
    assert said_before_maps[0] == 1


class _Quick(_Slow):
    """:class:`_Slow` at 1 s a forward pass: the 4 images' whole explanation (52 passes of an image, 13 s on the
    clock the lines read) is within the interval between progress lines."""

    tick = 1.0


def test_a_quick_explanation_says_nothing(monkeypatch, caplog):
    # on a fake clock: the wall clock of a loaded machine would make a quick explanation slow at random
    _on_the_clock(monkeypatch, _Quick.clock)
    images = np.random.default_rng(0).random((4, 1, 8, 8)).astype(np.float32)
    with caplog.at_level(logging.INFO, logger="dpmed.evaluation"):
        explain(_Quick(), images, kind="binary", target_layer="features", deletion_steps=3, n_resamples=20)
    assert caplog.records == []
