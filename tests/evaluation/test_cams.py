"""Grad-CAM and its relatives (METHODS.md sec. 6): a network whose Grad-CAM is known in closed form, the
divide-by-max normalisation, and the caller's model left exactly as it was, for every registered architecture."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dpmed.names import CAM_METHODS as CAM_METHOD_NAMES
from dpmed.evaluation.cams import CAM_METHODS, _to_input, class_probabilities, compute_cams, plain_copy
from dpmed.models import MODELS, build_model


class Linear(nn.Module):
    """features: a 1x1 convolution with weight 1 (A = the image, or with ``stride`` 2 the image's 2x2 means), then
    global average pooling and logits y = w * mean(A). Grad-CAM: dy_c/dA_ij = w_c / (h w) everywhere, so alpha_c =
    w_c / (h w) and L = ReLU(w_c A / (h w)); divided by its max: A / max(A) for w_c > 0, and all zero for w_c < 0."""

    def __init__(self, stride: int = 1) -> None:
        super().__init__()
        self.features = nn.Conv2d(1, 1, kernel_size=stride, stride=stride, bias=False)
        self.head = nn.Linear(1, 2, bias=False)
        with torch.no_grad():
            self.features.weight.fill_(1.0 / stride**2)
            self.head.weight.copy_(torch.tensor([[-1.0], [2.0]]))

    def forward(self, x):
        return self.head(self.features(x).mean(dim=(2, 3)))


def test_cam_methods_of_the_schema_and_of_the_module_agree():
    assert tuple(CAM_METHODS) == CAM_METHOD_NAMES


def test_grad_cam_in_closed_form_and_an_all_zero_map_stays_zero():
    image = np.random.default_rng(0).random((1, 1, 4, 4)).astype(np.float32)
    cams = compute_cams(Linear(), np.repeat(image, 2, axis=0), target_layer="features", targets=[1, 0])
    np.testing.assert_allclose(cams[0], image[0, 0] / image.max(), rtol=1e-5)      # w_1 = 2 > 0: A / max A
    assert np.all(cams[1] == 0)                                                      # w_0 = -1: ReLU leaves nothing


def test_grad_cam_upsamples_bilinearly_and_divides_by_the_max_not_min_max():
    image = np.full((1, 1, 4, 4), 0.2, np.float32)
    image[0, 0, :2, :2] = 1.0
    image[0, 0, 2:, 2:] = 0.5                          # 2x2 means: A = [[1, 0.2], [0.2, 0.5]]
    cam = compute_cams(Linear(stride=2), image, target_layer="features", targets=[1])[0]
    a = torch.tensor([[[[1.0, 0.2], [0.2, 0.5]]]])
    expected = F.interpolate(a, size=(4, 4), mode="bilinear", align_corners=False)[0, 0].numpy()
    np.testing.assert_allclose(cam, expected / expected.max(), rtol=1e-5)
    assert cam.min() > 0                               # min-max rescaling would have set the minimum to 0


def _snapshot(model: nn.Module):
    return ({k: v.detach().clone() for k, v in model.state_dict().items()},
            [m.training for m in model.modules()], [p.requires_grad for p in model.parameters()],
            [p.grad is None for p in model.parameters()],
            sum(len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._backward_hooks) for m in model.modules()))


# pytorch-grad-cam puts the model it is given in eval mode: training mode is the state at risk, so every
# architecture is checked in it; eval mode once.
@pytest.mark.parametrize(("name", "mode"), [(name, "train") for name in sorted(MODELS)] + [("small_cnn", "eval")])
def test_grad_cam_leaves_the_model_as_it_was(name, mode):
    torch.manual_seed(0)
    model = build_model(name, in_channels=1, num_outputs=2, image_size=32)
    model.train(mode == "train")
    model.get_submodule("head" if hasattr(model, "head") else "fc").weight.requires_grad_(False)  # a frozen layer
    before = _snapshot(model)
    images = np.random.default_rng(0).random((2, 1, 32, 32)).astype(np.float32)
    cams = compute_cams(model, images, target_layer=MODELS[name].cam_layer, targets=[0, 1])
    after = _snapshot(model)
    assert cams.shape == (2, 32, 32) and cams.min() >= 0 and cams.max() <= 1
    assert before[1:] == after[1:]                                    # modes, requires_grad, grads, hooks
    assert all(torch.equal(before[0][k], after[0][k]) for k in before[0])


def test_grad_cam_unwraps_an_opacus_model_and_leaves_its_hooks():
    from opacus import GradSampleModule

    model = GradSampleModule(build_model("small_cnn", in_channels=1, num_outputs=2, image_size=16))
    hooks = sum(len(m._forward_hooks) + len(m._backward_hooks) for m in model.modules())
    assert hooks > 0
    cams = compute_cams(model, np.random.default_rng(1).random((2, 1, 16, 16)).astype(np.float32),
                        target_layer="features", targets=[1, 1])
    assert cams.shape == (2, 16, 16)
    assert hooks == sum(len(m._forward_hooks) + len(m._backward_hooks) for m in model.modules())
    assert model.training and not plain_copy(model).training


def test_hirescam_equals_grad_cam_on_a_pooled_head_and_not_on_a_flattened_one():
    """Draelos & Carin 2020: with global average pooling before the linear head the gradient at the target layer is
    the same at every position, so Grad-CAM's averaged weights lose nothing; a flattened head has per-position
    weights, which only HiResCAM keeps (why configs/interpretability.yaml uses it with flat_cnn); so does global max
    pooling (small_cnn), whose gradient reaches one position per channel."""
    images = np.random.default_rng(2).random((3, 1, 16, 16)).astype(np.float32)
    for name, layer, same in (("resnet9", "layer4", True), ("flat_cnn", "features", False),
                              ("small_cnn", "features", False)):  # small_cnn: global max pooling, one position
        torch.manual_seed(0)
        model = build_model(name, in_channels=1, num_outputs=2, image_size=16)
        grad, hires = (compute_cams(model, images, target_layer=layer, targets=[1, 1, 1], method=m)
                       for m in ("gradcam", "hirescam"))
        assert np.allclose(grad, hires, atol=1e-4) == same, name


def test_each_map_is_divided_by_its_own_peak_and_targets_follow_their_images_past_a_batch():
    """Per image, not per batch: an image of 0.25 with a pixel of 0.5 peaks at 1 as its brighter neighbour does
    (divided by the batch's peak it would reach 0.5). With one image per batch the second image's target (class 0,
    w < 0: an all-zero map) is its own, not the first batch's."""
    images = np.stack([np.full((1, 4, 4), 0.5, np.float32), np.full((1, 4, 4), 0.25, np.float32)])
    images[0, 0, 0, 0], images[1, 0, 0, 0] = 1.0, 0.5
    cams = compute_cams(Linear(), images, target_layer="features", targets=[1, 1])
    np.testing.assert_allclose(cams.reshape(2, -1).max(axis=1), [1.0, 1.0], rtol=1e-6)
    one_each = compute_cams(Linear(), images, target_layer="features", targets=[1, 0], batch_size=1)
    assert one_each[0].max() == pytest.approx(1.0) and np.all(one_each[1] == 0)


def test_the_relu_comes_before_the_upsampling():
    """Normalised input x - 0.5: the 2x2 means become [[0.5, -0.3], [-0.3, -0.3]]. ReLU first leaves [[0.5, 0],
    [0, 0]], upsampled: a first row of 1, 0.75, 0.25, 0 after division by the peak; upsampling first would blend the
    negative means into it."""
    image = np.full((1, 1, 4, 4), 0.2, np.float32)
    image[0, 0, :2, :2] = 1.0
    cam = compute_cams(Linear(stride=2), image, target_layer="features", targets=[1],
                       normalization=((0.5,), (1.0,)))[0]
    expected = F.interpolate(torch.tensor([[[[0.5, 0.0], [0.0, 0.0]]]]), size=(4, 4), mode="bilinear",
                             align_corners=False)[0, 0].numpy()
    np.testing.assert_allclose(cam, expected / expected.max(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(cam[0], [1.0, 0.75, 0.25, 0.0], atol=1e-6)


def test_class_probabilities_normalise_the_input_and_take_a_softmax_per_image():
    """Constant 0.5 normalised by mean 0, std 0.5 is 1: logits (-1, 2), softmax (0.0474, 0.9526), per row."""
    images = np.full((2, 1, 4, 4), 0.5, np.float32)
    images[1] = 0.25                                              # logits (-0.5, 1)
    probs = class_probabilities(Linear(), images, kind="binary", normalization=((0.0,), (0.5,)))
    expected = torch.tensor([[-1.0, 2.0], [-0.5, 1.0]]).softmax(dim=1).numpy()
    np.testing.assert_allclose(probs, expected, rtol=1e-6)


def test_each_method_name_builds_its_own_pytorch_grad_cam_class():
    """The name a study gives is the method the report names: a name mapped to another class would compare the
    wrong explanations without a word (pytorch-grad-cam's class names)."""
    import pytorch_grad_cam

    assert {name: m.class_name for name, m in CAM_METHODS.items()} == {
        "gradcam": "GradCAM", "gradcam++": "GradCAMPlusPlus", "xgradcam": "XGradCAM", "hirescam": "HiResCAM",
        "layercam": "LayerCAM", "eigencam": "EigenCAM", "scorecam": "ScoreCAM"}
    assert all(hasattr(pytorch_grad_cam, m.class_name) for m in CAM_METHODS.values())


def test_a_model_with_frozen_layers_gets_the_maps_of_the_unfrozen_one_and_stays_frozen():
    """A pretrained start freezes the layers it does not train (`dpmed.models.weights`); gradients must still reach
    the target layer of the copy."""
    image = np.random.default_rng(1).random((1, 1, 4, 4)).astype(np.float32)
    frozen = Linear()
    for p in frozen.parameters():
        p.requires_grad_(False)
    cams = compute_cams(frozen, image, target_layer="features", targets=[1])
    np.testing.assert_allclose(cams, compute_cams(Linear(), image, target_layer="features", targets=[1]), rtol=1e-6)
    np.testing.assert_allclose(cams[0], image[0, 0] / image.max(), rtol=1e-5)
    assert not any(p.requires_grad for p in frozen.parameters())


def test_a_map_of_a_non_square_image_keeps_its_rows_and_columns():
    image = np.random.default_rng(3).random((1, 1, 4, 8)).astype(np.float32)
    cam = compute_cams(Linear(), image, target_layer="features", targets=[1])
    assert cam.shape == (1, 4, 8)
    np.testing.assert_allclose(cam[0], image[0, 0] / image.max(), rtol=1e-5)


def test_colour_images_are_normalised_channel_by_channel():
    images = np.random.default_rng(4).random((2, 3, 2, 2)).astype(np.float32)
    mean, std = (0.1, 0.2, 0.3), (0.5, 1.0, 2.0)
    x = _to_input(images, (mean, std), torch.device("cpu")).numpy()
    for c in range(3):
        np.testing.assert_allclose(x[:, c], (images[:, c] - mean[c]) / std[c], rtol=1e-6)


@pytest.mark.parametrize("batch_size", [1, 2])
def test_class_probabilities_keep_every_image_across_batches(batch_size):
    images = np.random.default_rng(5).random((3, 1, 4, 4)).astype(np.float32)
    whole = class_probabilities(Linear(), images, kind="binary")
    assert whole.shape == (3, 2)
    np.testing.assert_array_equal(class_probabilities(Linear(), images, kind="binary", batch_size=batch_size), whole)


def test_an_unknown_method_is_refused_naming_the_known_ones():
    images = np.random.default_rng(0).random((1, 1, 4, 4)).astype(np.float32)
    with pytest.raises(ValueError, match="unknown CAM method 'grad-cam'; known: gradcam, gradcam\\+\\+"):
        compute_cams(Linear(), images, target_layer="features", targets=[1], method="grad-cam")
