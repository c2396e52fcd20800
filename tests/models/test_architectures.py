"""Every registered model's layout as the registry and the module docstrings state it: the head is the classifier,
the blocks cover every trainable parameter outside the documented stem and come in forward order (``last_blocks:
N`` trains the last N), Grad-CAM reads the last block, and the ResNet and small_cnn details their docstrings
promise (torchvision's block arithmetic, GroupNorm(32), the small-image stem; conv-GroupNorm-ReLU blocks, global
max pooling)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dpmed.models import MODELS, build_model

# The stem: parameters that train only with `trainable: all` (ModelInfo's docstring), by model.
STEMS = {"resnet9": {"conv1", "bn1"}, "resnet18": {"conv1", "bn1"}, "resnet9_ws": {"conv1", "bn1"}}


def _within(module: str, names) -> bool:
    return any(module == n or module.startswith(n + ".") for n in names)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_head_blocks_and_grad_cam_layer_are_where_the_registry_says(name):
    info = MODELS[name]
    torch.manual_seed(0)
    model = build_model(name, in_channels=1, num_outputs=3, image_size=32)
    head = model.get_submodule(info.head)
    assert isinstance(head, nn.Linear) and head.out_features == 3 and head.bias is not None
    modules = [n for n, _ in model.named_modules()]
    firsts = [modules.index(block[0]) for block in info.blocks]
    assert firsts == sorted(firsts) and len(set(firsts)) == len(firsts), "blocks out of forward order"
    outside = {p.rsplit(".", 1)[0] for p, q in model.named_parameters() if q.requires_grad}
    outside = {m for m in outside if not _within(m, [info.head, *(n for block in info.blocks for n in block)])}
    assert outside == STEMS.get(name, set())
    last, cam = info.blocks[-1][0], info.cam_layer
    assert last.startswith(cam + ".") or modules.index(cam) > modules.index(last), (cam, last)
    assert modules.index(cam) < modules.index(info.head)


def test_the_resnet_block_computes_torchvision_s_arithmetic_out_of_place():
    from torchvision.models.resnet import BasicBlock

    from dpmed.models.resnet import _BasicBlock, _group_norm

    def block(kind):
        torch.manual_seed(0)
        down = nn.Sequential(nn.Conv2d(8, 16, 1, stride=2, bias=False), _group_norm(16))
        return kind(8, 16, stride=2, downsample=down, norm_layer=_group_norm).eval()

    x = torch.randn(2, 8, 10, 10, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(block(_BasicBlock)(x), block(BasicBlock)(x), rtol=0, atol=0)
    plain = [b.eval() for b in (_BasicBlock(8, 8, norm_layer=_group_norm), BasicBlock(8, 8, norm_layer=_group_norm))]
    plain[0].load_state_dict(plain[1].state_dict())
    torch.testing.assert_close(plain[0](x), plain[1](x), rtol=0, atol=0)


@pytest.mark.parametrize("size, kernel, stride, pooled", [(28, 3, 1, False), (64, 3, 1, False), (65, 7, 2, True)])
def test_resnet18_uses_groupnorm_32_and_the_small_image_stem_up_to_64_px(size, kernel, stride, pooled):
    model = build_model("resnet18", in_channels=1, num_outputs=2, image_size=size)
    assert model.conv1.kernel_size == (kernel, kernel) and model.conv1.stride == (stride, stride)
    assert isinstance(model.maxpool, nn.MaxPool2d) == pooled and isinstance(model.maxpool, nn.Identity) != pooled
    norms = [m for m in model.modules() if isinstance(m, nn.GroupNorm)]
    assert norms and all(m.num_groups == min(32, m.num_channels) for m in norms)
    assert not any(isinstance(m, nn.BatchNorm2d) for m in model.modules())


@pytest.mark.parametrize("size, kernel, stride", [(32, 5, 1), (127, 5, 1), (128, 11, 4)])
def test_alexnet_keeps_the_imagenet_stem_from_128_px_and_a_small_image_stem_below(size, kernel, stride):
    """Below 128 px an 11x11 stride-4 stem would shrink the map to a few pixels before the first pooling; from 128 px
    up it is AlexNet's own, and the network still ends in one logit per output."""
    model = build_model("alexnet", in_channels=1, num_outputs=2, image_size=size)
    stem = model.features[0]
    assert stem.kernel_size == (kernel, kernel) and stem.stride == (stride, stride) and stem.in_channels == 1
    if size == 128:
        assert model(torch.zeros(2, 1, size, size)).shape == (2, 2)


@pytest.mark.parametrize("size, stride, pooled", [(28, 1, False), (64, 1, False), (65, 2, True)])
def test_resnet9_is_the_papers_network_with_the_small_image_stem_up_to_64_px(size, stride, pooled):
    """A 7x7 stem (stride 1 and no max-pool up to 64 px, so the map keeps the image's size; stride 2 and the
    max-pool above), GroupNorm(32) and Mish everywhere, and the paper's 4.9M parameters at 3 channels, counted by
    hand: stem 3*64*49 + 128; block k (channels c_in -> c) 9 c_in c + 9 c^2 + 4c, plus c_in c + 2c where it
    downsamples: 73,984, 230,144, 919,040 and 3,673,088; then a 512 x K head."""
    model = build_model("resnet9", in_channels=3, num_outputs=5, image_size=size)
    assert model.conv1.kernel_size == (7, 7) and model.conv1.stride == (stride, stride)
    assert isinstance(model.maxpool, nn.MaxPool2d) == pooled and isinstance(model.maxpool, nn.Identity) != pooled
    norms = [m for m in model.modules() if isinstance(m, nn.GroupNorm)]
    assert len(norms) == 12 and all(m.num_groups == 32 for m in norms)
    assert not any(isinstance(m, (nn.ReLU, nn.BatchNorm2d)) for m in model.modules())
    assert model.relu.__class__ is nn.Mish and all(block.relu.__class__ is nn.Mish
                                                   for block in (model.layer1[0], model.layer4[0]))
    stem = 3 * 64 * 49 + 128
    assert sum(p.numel() for p in model.parameters()) == stem + 73_984 + 230_144 + 919_040 + 3_673_088 + 513 * 5
    seen = []
    model.conv1.register_forward_hook(lambda module, args, out: seen.append(out.shape[-1]))
    with torch.no_grad():
        assert model(torch.rand(1, 3, size, size)).shape == (1, 5)
    assert seen == [(size + 2 * 3 - 7) // stride + 1]


@pytest.mark.parametrize("size, outputs", [(16, 2), (28, 3)])
def test_flat_cnn_has_the_parameters_its_description_counts(size, outputs):
    """Two convolutions without bias (9 * 16 per input channel, 9 * 16 * 32) with their GroupNorms (2 * 16, 2 * 32):
    4,848 for grey images, the "5k"; the head reads 32 channels at S/2 x S/2, 8 S^2 weights per output and a bias.
    The registry said 32 S^2 K, four times the head."""
    model = build_model("flat_cnn", in_channels=1, num_outputs=outputs, image_size=size)
    assert sum(p.numel() for p in model.parameters()) == 4_848 + (8 * size ** 2 + 1) * outputs
    assert "8 S^2 K + 5k parameters" in MODELS["flat_cnn"].description
    with pytest.raises(ValueError, match="image_size must be >= 2"):
        build_model("flat_cnn", in_channels=1, num_outputs=2, image_size=1)


def test_small_cnn_is_four_conv_groupnorm_relu_blocks_then_global_max_pooling_and_a_linear_head():
    model = build_model("small_cnn", in_channels=1, num_outputs=2, image_size=16)
    blocks = [model.features[i] for i in (0, 2, 4, 6)]
    for block in blocks:
        conv, norm, relu = block
        assert isinstance(conv, nn.Conv2d) and conv.kernel_size == (3, 3) and conv.bias is None
        assert isinstance(norm, nn.GroupNorm) and norm.num_groups == 4 and isinstance(relu, nn.ReLU)
    assert [type(model.features[i]) for i in (1, 3, 5)] == [nn.AvgPool2d] * 3
    assert isinstance(model.pool, nn.AdaptiveMaxPool2d)


def test_the_models_are_listed_sorted_as_the_unknown_name_message_lists_them():
    from dpmed.models import list_models

    assert list_models() == sorted(MODELS)
    with pytest.raises(KeyError, match=f"known: {', '.join(sorted(MODELS))}"):
        build_model("resnet1", in_channels=1, num_outputs=2, image_size=16)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_model_not_marked_square_takes_images_of_any_proportions(name):
    """`ModelInfo.square` is what `check_fit` refuses non-square images by: every model without it must take them
    (here 20 x 30 px, built for the height), and every model with it fails on them, so the mark is not stale."""
    model = build_model(name, in_channels=1, num_outputs=2, image_size=20).eval()
    with torch.no_grad():
        assert model(torch.rand(2, 1, 20, 20)).shape == (2, 2)
        if not MODELS[name].square:
            assert model(torch.rand(2, 1, 20, 30)).shape == (2, 2)
            return
        with pytest.raises(RuntimeError):
            model(torch.rand(2, 1, 20, 30))
