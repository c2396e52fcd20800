"""Starting from saved weights and freezing (`dpmed.models.weights`): the layouts read, the refusals with their
reasons, and what freezing means under DP-SGD (a frozen parameter is neither clipped nor noised, and never moves)."""

from __future__ import annotations

import hashlib
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import torchvision
from torch import nn

from dpmed.errors import ConfigError
from dpmed.models import MODELS, build_model, list_models
from dpmed.folders import file_sha256
from dpmed.models.weights import load_weights, match_head, read_state_dict, read_weights, set_trainable
from dpmed.training import DpSgdStep


def _save(state: dict, path) -> str:
    torch.save(state, path)
    return path


def _loss(z, y):
    return F.cross_entropy(z, y, reduction="sum")


@pytest.mark.parametrize("file_names, model_names, rows, why", [
    (("a", "b", "c"), ("a", "b", "c"), (0, 1, 2), ""),
    (("a", "b", "c"), ("c", "a", "b"), (2, 0, 1), "the study's labels in another order (['a', 'b', 'c'])"),
    (("Effusion", "Mass"), ("effusion", "mass"), (0, 1), "the study's labels up to letter case"),
    (("Mass", "Effusion"), ("effusion", "MASS"), (1, 0), "the study's labels up to letter case in another order"),
    (("Effusion", "effusion"), ("EFFUSION", "effusion"), None, "not one to one"),
    (("normal", "opacity"), ("normal", "pneumonia"), None, "pretrained for ['normal', 'opacity'], not"),
    (("a", "b", "c"), ("a", "b"), None, "pretrained for"),
])
def test_a_head_matches_the_same_labels_by_name_and_by_letter_case_only_one_to_one(file_names, model_names, rows,
                                                                                   why):
    """Which of the file's output rows each of the model's outputs is: the same names in any order, or names that
    differ only in letter case where that pairs them one to one; otherwise none, with the reason."""
    match = match_head(file_names, model_names)
    assert match.rows == rows and why in match.why and (why == "") == (match.why == "")
    assert match.same_order == (rows is not None and rows == tuple(range(len(rows))))


def test_the_weights_hash_covers_every_byte_of_a_file_larger_than_a_read(tmp_path):
    """The record names the weights by sha256 (`file_sha256` reads in blocks of 1 MiB): two files that differ only
    after their first blocks must not share a hash."""
    first, second = tmp_path / "a.pt", tmp_path / "b.pt"
    data = np.random.default_rng(0).bytes(3 << 20)
    first.write_bytes(data)
    second.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    assert file_sha256(first) == hashlib.sha256(data).hexdigest()
    assert file_sha256(second) == hashlib.sha256(second.read_bytes()).hexdigest() != file_sha256(first)


def test_dpmed_model_pt_round_trips(tmp_path):
    """A run's released model.pt (a state dict on the CPU) starts a fresh model of the same name exactly."""
    torch.manual_seed(0)
    trained = build_model("small_cnn", in_channels=1, num_outputs=2, image_size=32)
    path = _save({k: v.detach().cpu() for k, v in trained.state_dict().items()}, tmp_path / "model.pt")
    torch.manual_seed(1)
    fresh = build_model("small_cnn", in_channels=1, num_outputs=2, image_size=32)
    loaded = load_weights(fresh, read_state_dict(path), head="head")
    assert loaded.kept == () and set(loaded.loaded) == set(trained.state_dict())
    assert all(torch.equal(a, b)
               for a, b in zip(trained.state_dict().values(), fresh.state_dict().values(), strict=True))
    assert len(file_sha256(path)) == 64


def test_torchvision_resnet18_layout_loads_into_resnet18_and_a_new_head_is_kept(tmp_path):
    """torchvision's ResNet-18 names, with GroupNorm (a GroupNorm / BiT-style checkpoint): every tensor but the
    1000-class head lands in dpmed's resnet18; the two-class head keeps its initialisation, and the record says so."""
    torch.manual_seed(0)
    source = torchvision.models.resnet18(num_classes=1000, norm_layer=lambda c: nn.GroupNorm(32, c))
    path = _save(source.state_dict(), tmp_path / "resnet18_gn.pt")
    model = build_model("resnet18", in_channels=3, num_outputs=2, image_size=224)
    head_before = model.fc.weight.detach().clone()
    loaded = load_weights(model, read_state_dict(path), head=MODELS["resnet18"].head)
    assert loaded.kept == ("fc.weight", "fc.bias")
    assert len(loaded.loaded) == len(source.state_dict()) - 2
    assert torch.equal(model.layer4[1].conv2.weight, source.layer4[1].conv2.weight)
    assert torch.equal(model.bn1.weight, source.bn1.weight) and torch.equal(model.fc.weight, head_before)


def test_batch_norm_weights_are_refused_with_the_reason(tmp_path):
    path = _save(torchvision.models.resnet18().state_dict(), tmp_path / "imagenet_bn.pt")
    with pytest.raises(ConfigError) as info:
        read_state_dict(path)
    message = str(info.value)
    assert "BatchNorm running statistics" in message and "bn1.running_mean" in message
    # the first five in the file's order, and how many more: ResNet-18 has 20 BatchNorm layers (the stem's, two per
    # block in eight blocks, three downsamples), each with three statistics
    assert ("(bn1.running_mean, bn1.running_var, bn1.num_batches_tracked, layer1.0.bn1.running_mean, "
            "layer1.0.bn1.running_var (and 55 more))") in message
    assert "per-example clipping" in message and "GroupNorm" in message and "model.pt" in message
    assert "does not fit dpmed's models" in message       # BiT's files are named only as what does not load
    # the second half: which checkpoints can be used instead, weight-standardised ones included
    assert "GroupNorm checkpoints, with or without weight-standardised convolutions, can be used" in message
    assert "small_cnn_ws and resnet9_ws" in message


def test_a_shape_mismatch_names_the_file_and_the_key(tmp_path):
    rgb = build_model("small_cnn", in_channels=3, num_outputs=2, image_size=32)
    path = _save(rgb.state_dict(), tmp_path / "rgb.pt")
    grey = build_model("small_cnn", in_channels=1, num_outputs=2, image_size=32)
    with pytest.raises(ConfigError, match=re.escape(f"model.weights: {path}: features.0.0.weight has shape "
                                                    "[16, 3, 3, 3] in the file but [16, 1, 3, 3]")):
        load_weights(grey, read_state_dict(path), head="head", path=path)


def test_a_first_layer_of_other_channels_or_kernel_says_which_setting_fits_the_file(tmp_path):
    """torchvision's ImageNet ResNet-18 names fit dpmed's resnet18, but its 3-channel 7x7 stem met a grey model at
    64 px or less (a 3x3 stem) with only "another architecture, input channels or image size": the user could not
    tell that data.channels and data.image_size decide it."""
    path = _save(torchvision.models.resnet18(norm_layer=lambda c: nn.GroupNorm(32, c)).state_dict(),
                 tmp_path / "tv.pt")
    for channels, size, told in ((1, 32, ("takes 3-channel images, the model 1-channel ones: set data.channels: 3",
                                          "kernel is 7x7 in the file, 3x3 in the model", "data.image_size")),
                                 (1, 96, ("set data.channels: 3",)), (3, 32, ("7x7 in the file, 3x3",))):
        model = build_model("resnet18", in_channels=channels, num_outputs=2, image_size=size)
        with pytest.raises(ConfigError) as err:
            load_weights(model, read_state_dict(path), head="fc", path=path)
        assert all(t in str(err.value) for t in told), (channels, size, str(err.value))
        assert ("channels" in str(err.value)) == (channels != 3) and ("kernel" in str(err.value)) == (size <= 64)
    model = build_model("resnet18", in_channels=3, num_outputs=2, image_size=96)
    assert load_weights(model, read_state_dict(path), head="fc", path=path).kept == ("fc.weight", "fc.bias")


def test_a_file_without_a_head_loads_the_features_and_keeps_the_head_at_its_initialisation():
    """A feature extractor saved without its classifier: every other tensor comes from the file, and the head is
    left as the model was built (and listed as kept), not a KeyError from the copy."""
    torch.manual_seed(0)
    source = build_model("small_cnn", in_channels=1, num_outputs=2, image_size=16).state_dict()
    features = {k: v for k, v in source.items() if not k.startswith("head.")}
    torch.manual_seed(1)
    model = build_model("small_cnn", in_channels=1, num_outputs=2, image_size=16)
    head = {k: v.clone() for k, v in model.state_dict().items() if k.startswith("head.")}
    loaded = load_weights(model, features, head="head")
    assert loaded.kept == ("head.weight", "head.bias") and set(loaded.loaded) == set(features)
    for k, v in model.state_dict().items():
        assert torch.equal(v, head[k] if k in head else source[k]), k


def test_a_head_that_fits_in_part_is_kept_whole_at_its_initialisation():
    """Before: a head trained on other features (a weight of another shape) beside a bias of the same shape was kept
    tensor by tensor: the weight at its initialisation, the bias from the file, half trained on features the model
    does not compute. The head is one unit: loaded whole where all of it fits, else kept whole."""
    def net(features: int) -> nn.Module:
        return nn.ModuleDict({"body": nn.Linear(4, 4), "fc": nn.Linear(features, 2)})

    torch.manual_seed(0)
    source = net(3).state_dict()
    model = net(4)
    head = {k: v.clone() for k, v in model.state_dict().items() if k.startswith("fc.")}
    loaded = load_weights(model, source, head="fc")
    assert loaded.kept == ("fc.weight", "fc.bias") and loaded.loaded == ("body.weight", "body.bias")
    assert torch.equal(model.fc.bias, head["fc.bias"]) and not torch.equal(model.fc.bias, source["fc.bias"])
    assert load_weights(net(4), net(4).state_dict(), head="fc").kept == ()      # a head that fits loads whole


def test_only_the_head_module_itself_may_differ_not_a_module_whose_name_starts_like_it():
    """The head is ``fc`` and what lies below it; a layer named ``fc0`` is a feature layer whose other shape means
    another architecture, refused, not left at its initialisation as if it were the classifier."""
    def net(width: int) -> nn.Module:
        return nn.ModuleDict({"fc0": nn.Linear(4, width), "fc": nn.Linear(width, 2)})

    with pytest.raises(ConfigError, match=re.escape("fc0.weight has shape [3, 4] in the file but [5, 4]")):
        load_weights(net(5), net(3).state_dict(), head="fc")


def test_a_shape_mismatch_counts_the_other_keys_that_differ_outside_the_head():
    """small_cnn at width 8 for one at width 16: every convolution and GroupNorm differs (4 blocks of a conv weight
    and a GroupNorm weight and bias: 12 tensors), the head too but it may; the first is named, 11 more counted."""
    from dpmed.models.small_cnn import SmallCNN

    narrow = SmallCNN(1, 2, width=8).state_dict()
    with pytest.raises(ConfigError, match=re.escape("features.0.0.weight has shape [8, 1, 3, 3] in the file but "
                                                    "[16, 1, 3, 3] in the model (and 11 more keys differ)")):
        load_weights(build_model("small_cnn", in_channels=1, num_outputs=2, image_size=16), narrow, head="head")


def test_another_architecture_is_refused_naming_keys(tmp_path):
    """ResNet-18 weights for ResNet-9 (same stem at 128 px, one block per stage instead of two)."""
    path = _save(build_model("resnet18", in_channels=1, num_outputs=2, image_size=128).state_dict(), tmp_path / "r.pt")
    with pytest.raises(ConfigError, match=re.escape(f"model.weights: {path}: the file does not fit the model")
                       + r".*the file's layer1.1.conv1.weight.* have no place in the model"):
        load_weights(build_model("resnet9", in_channels=1, num_outputs=2, image_size=128), read_state_dict(path),
                     head="fc", path=path)


def test_a_missing_file_names_the_key_and_the_path(tmp_path):
    missing = tmp_path / "nowhere" / "weights.pt"
    with pytest.raises(ConfigError, match=f"model.weights: no such file {missing}"):
        read_state_dict(missing)


def test_the_one_read_of_the_weights_refuses_a_folder_or_a_missing_file_as_the_load_does(tmp_path):
    """`read_weights` reads the bytes pretraining hashes and loads: a folder or a missing file is told as
    `read_state_dict` tells it, what to give instead, not as a file that cannot be read."""
    missing = tmp_path / "nowhere" / "weights.pt"
    for read in (read_weights, read_state_dict):
        with pytest.raises(ConfigError, match=f"model.weights: {re.escape(str(tmp_path))} is a folder; give the path"):
            read(tmp_path)
        with pytest.raises(ConfigError, match=f"model.weights: no such file {re.escape(str(missing))}; give the path"):
            read(missing)


def test_the_bytes_a_caller_read_and_hashed_are_loaded_without_reading_the_file_again(tmp_path):
    """A run and pretraining load the bytes they hashed (``contents``): the file, gone or replaced since that one
    read, is not read again."""
    saved = build_model("small_cnn", in_channels=1, num_outputs=2, image_size=16, seed=0).state_dict()
    path = _save(saved, tmp_path / "weights.pt")
    contents = path.read_bytes()
    path.unlink()
    state = read_state_dict(path, contents=contents)
    assert state.keys() == saved.keys()
    for name, value in state.items():
        torch.testing.assert_close(value, saved[name])


def test_a_folder_a_text_file_and_a_pickled_model_say_what_to_give_instead(tmp_path):
    """Before: "no such file" for a folder, "(KeyError: 101)" for a text file, and torch's advice to unpickle with
    weights_only=False (which would run any code in the file) for a whole saved model."""
    with pytest.raises(ConfigError, match=f"model.weights: {tmp_path} is a folder; give the path of the weights file"):
        read_state_dict(tmp_path)
    (tmp_path / "notes.txt").write_text("epoch 10, AUROC 0.93")
    model = build_model("small_cnn", in_channels=1, num_outputs=2, image_size=32)
    torch.save(model, tmp_path / "whole.pt")
    for path in (tmp_path / "notes.txt", tmp_path / "whole.pt"):
        with pytest.raises(ConfigError, match=r"is not a torch state dict .*torch.save\(model.state_dict\(\), PATH\)"
                           ) as err:
            read_state_dict(path)
        assert "weights_only=False" not in str(err.value) and "add_safe_globals" not in str(err.value)
    for text in ("garbage\n", "epoch 10"):       # not a pickle at all: not called a pickled model (found by a user)
        (tmp_path / "notes.txt").write_text(text)
        with pytest.raises(ConfigError) as err:
            read_state_dict(tmp_path / "notes.txt")
        reason = str(err.value).split(";")[0]
        assert reason.startswith(f"model.weights: {tmp_path / 'notes.txt'} is not a torch state dict (") and \
            "pickled" not in reason, err.value


def test_a_whole_pickled_module_gets_our_words_not_torchs(tmp_path):
    """Before: the message quoted torch's first line, with its terminal escape codes (bold) and its offer to load the
    file anyway, and named no class; now the class, why it is not read, and what to save instead."""
    path = tmp_path / "whole.pt"
    torch.save(nn.Linear(2, 2), path)
    with pytest.raises(ConfigError) as err:
        read_state_dict(path)
    message = str(err.value)
    assert message == (
        f"model.weights: {path} is not a torch state dict but a pickled torch.nn.modules.linear.Linear object (as "
        "torch.save(model, PATH) saves a whole model); dpmed does not unpickle objects, since that could run any code "
        "in the file: save the weights alone, with torch.save(model.state_dict(), PATH), and give that file")
    assert "\x1b" not in message and "trust" not in message.lower() and "weights_only" not in message


def test_checkpoint_containers_and_a_data_parallel_or_opacus_prefix_are_read(tmp_path):
    model = build_model("small_cnn", in_channels=1, num_outputs=2, image_size=32)
    for container, prefix in (("state_dict", "module."), ("model", "module."), ("state_dict", "_module.")):
        wrapped = {container: {f"{prefix}{k}": v for k, v in model.state_dict().items()}, "epoch": 3}
        state = read_state_dict(_save(wrapped, tmp_path / "ckpt.pt"))
        assert set(state) == set(model.state_dict())
    for not_one in ({"epoch": 3}, {"features.0.0.weight": torch.zeros(2), "epoch": 3}, {}, {"state_dict": {}}, [1]):
        with pytest.raises(ConfigError) as err:
            read_state_dict(_save(not_one, tmp_path / "not.pt"))
        # the fix, not only the fault: which file to give instead
        assert str(err.value) == (f"model.weights: {tmp_path / 'not.pt'} holds no state dict (a mapping of names to "
                                  "tensors, or one under state_dict or model); save one with "
                                  "torch.save(model.state_dict(), PATH) and give that file")


def test_one_batch_norm_layer_is_enough_to_be_refused_for_it(tmp_path):
    path = _save(nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4)).state_dict(), tmp_path / "one_bn.pt")
    with pytest.raises(ConfigError, match="BatchNorm running statistics"):
        read_state_dict(path)


@pytest.mark.parametrize("key", ["features.0.0.weight", "features.0.1.bias"])
def test_a_missing_or_misshapen_tensor_of_any_kind_is_named(key):
    """Weights and biases alike: a file without one, or with one of another shape, is refused in dpmed's words
    naming the key (not torch's KeyError or RuntimeError from the copy)."""
    model = build_model("small_cnn", in_channels=1, num_outputs=2, image_size=32)
    state = dict(model.state_dict())
    assert key in state
    with pytest.raises(ConfigError, match=re.escape(f"the model's {key} are not in the file")):
        load_weights(model, {k: v for k, v in state.items() if k != key}, head="head")
    state[key] = torch.zeros(state[key].numel() + 1)
    with pytest.raises(ConfigError, match=re.escape(f"{key} has shape [{state[key].numel()}] in the file")):
        load_weights(model, state, head="head")


@pytest.mark.parametrize("name", list_models())
def test_every_model_names_its_head_and_blocks(name):
    """The registry's head and blocks exist in the built model; ``trainable`` partitions the parameters: the head
    alone, then the head and ever more blocks from the end, then all."""
    info = MODELS[name]
    model = build_model(name, in_channels=1, num_outputs=2, image_size=32)
    names = [n for n, _ in model.named_parameters()]
    total = sum(p.numel() for p in model.parameters())
    assert any(n.startswith(info.head + ".") for n in names)
    for block in info.blocks:
        for module in block:
            assert any(n.startswith(module + ".") for n in names), f"{name}: block {module} holds no parameter"
    counts = [set_trainable(model, "head", head=info.head, blocks=info.blocks)]
    for k in range(1, len(info.blocks) + 1):      # the head and exactly the last k blocks train
        counts.append(set_trainable(model, k, head=info.head, blocks=info.blocks))
        modules = (info.head,) + tuple(m for block in info.blocks[-k:] for m in block)
        assert {n for n, p in model.named_parameters() if p.requires_grad} == {
            n for n in names if any(n.startswith(m + ".") for m in modules)}, (name, k)
    assert all(a + b == total for a, b in counts)
    assert [c[0] for c in counts] == sorted(c[0] for c in counts) and counts[0][0] < total
    for bad in (0, True, -1, "last"):
        with pytest.raises(ValueError, match="trainable must be"):
            set_trainable(model, bad, head=info.head, blocks=info.blocks)
    set_trainable(model, "head", head=info.head, blocks=info.blocks)
    head_only = {n for n, p in model.named_parameters() if p.requires_grad}
    assert head_only == {n for n in names if n.startswith(info.head + ".")}
    assert set_trainable(model, "all", head=info.head, blocks=info.blocks) == (total, 0)
    with pytest.raises(ConfigError, match="last_blocks"):
        set_trainable(model, len(info.blocks) + 1, head=info.head, blocks=info.blocks)


def test_last_blocks_of_a_model_without_blocks_points_to_head_or_all():
    """A model given to set_trainable with no feature blocks: "has 0 blocks (); use at most 0" would ask for a
    count that is refused in turn; the message says what can be trained instead."""
    model = nn.Sequential()
    model.add_module("stem", nn.Linear(3, 3))
    model.add_module("fc", nn.Linear(3, 2))
    with pytest.raises(ConfigError, match=r"^model.trainable: last_blocks 1, but this model has no feature blocks; "
                                          r"use head or all$"):
        set_trainable(model, 1, head="fc", blocks=())


@pytest.mark.parametrize("engine", ["dpmed", "opacus"])
def test_frozen_layers_do_not_move_under_dp_sgd_and_the_noise_has_the_trainable_dimension(engine):
    """small_cnn with its last block and head trainable: the DP-SGD step noises exactly the trainable parameters
    (as many noise coordinates as trainable parameters), SGD with weight decay leaves every frozen parameter as it
    was, and each example's clipped gradient is measured over the trainable parameters only (an explicit loop)."""
    torch.manual_seed(0)
    info = MODELS["small_cnn"]
    model = build_model("small_cnn", in_channels=1, num_outputs=2, image_size=16)
    n_trainable, n_frozen = set_trainable(model, 1, head=info.head, blocks=info.blocks)
    assert n_frozen > 0
    x, y = torch.rand(6, 1, 16, 16), torch.tensor([0, 1, 0, 1, 1, 0])

    trainable = [p for p in model.parameters() if p.requires_grad]
    expected = [torch.zeros_like(p) for p in trainable]
    for i in range(len(x)):                                   # the explicit per-example loop, trainable only
        grads = torch.autograd.grad(_loss(model(x[i:i + 1]), y[i:i + 1]), trainable)
        norm = torch.sqrt(sum((g ** 2).sum() for g in grads))
        for e, g in zip(expected, grads, strict=True):
            e.add_(g * min(1.0, 0.05 / float(norm)))

    step = DpSgdStep(model, loss_fn=_loss, max_grad_norm=0.05, noise_multiplier=1.0, expected_batch_size=6.0,
                     physical_batch_size=4, noise_rng=np.random.default_rng(0), engine=engine)
    assert sum(p.numel() for p in step.params) == n_trainable
    clipped = step.clipped_sum(x, y)
    assert all(torch.allclose(a, b, atol=1e-6, rtol=1e-4) for a, b in zip(clipped, expected, strict=True))

    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9, weight_decay=0.1)
    for _ in range(2):
        optimizer.zero_grad()
        step(x, y)
        assert all(p.grad is None for p in model.parameters() if not p.requires_grad)
        optimizer.step()
    for n, p in model.named_parameters():
        assert torch.equal(p, before[n]) != p.requires_grad, n


def test_an_unreadable_file_is_called_unreadable_not_a_pickled_model(tmp_path, monkeypatch):
    """A weights file the user may not read (permissions, a failing disk) was told to be "not a torch state dict"
    with advice to save it again without pickling; it is the file's access that is wrong."""
    path = _save(build_model("small_cnn", in_channels=1, num_outputs=2, image_size=16).state_dict(),
                 tmp_path / "model.pt")

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(torch, "load", denied)
    with pytest.raises(ConfigError) as err:
        read_state_dict(path)
    message = str(err.value)
    assert message.startswith(f"model.weights: {path} cannot be read (Permission denied)"), message
    assert "not a torch state dict" not in message and "torch.save" not in message


def test_a_safetensors_file_is_told_how_to_convert_it(tmp_path):
    """timm and BiT publish their weights as safetensors, which torch.load cannot read: the error said only "not a
    torch state dict"; it says what the file is and the one line that converts it."""
    path = tmp_path / "bit.safetensors"
    path.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    told = (r"bit\.safetensors is a safetensors file, which dpmed does not read: convert it .*"
            r"torch\.save\(safetensors\.torch\.load_file\(PATH\), NEW_PATH\)")
    with pytest.raises(ConfigError, match=told):
        read_state_dict(path)


def test_a_truncated_or_empty_file_is_called_incomplete_not_another_format(tmp_path):
    """A copy cut short (an interrupted transfer) or an empty file was told to save a state dict instead, after
    torch's sentence cut mid-word at 200 characters; it is the right format, damaged: the advice is to copy it
    again."""
    whole = tmp_path / "whole.pt"
    torch.save(build_model("small_cnn", in_channels=1, num_outputs=1, image_size=32).state_dict(), whole)
    data = whole.read_bytes()
    (tmp_path / "cut.pt").write_bytes(data[:len(data) // 2])
    (tmp_path / "empty.pt").write_bytes(b"")
    for name in ("cut.pt", "empty.pt"):
        with pytest.raises(ConfigError) as err:
            read_state_dict(tmp_path / name)
        message = str(err.value)
        assert message.startswith(f"model.weights: {tmp_path / name} is ") and "incomplete" in message and \
            "copy it again" in message and "torch.save" not in message and "miniz" not in message, message


def test_a_plain_pickle_gives_no_python_warning_beside_the_error(tmp_path, recwarn):
    """pickle.dump of a list: torch warned about its pickle protocol (a UserWarning with torch's file and line) on
    the user's terminal before dpmed's error."""
    import pickle
    path = tmp_path / "list.pkl"
    path.write_bytes(pickle.dumps([1, 2, 3], protocol=4))
    with pytest.raises(ConfigError, match="is not a torch state dict"):
        read_state_dict(path)
    assert not [str(w.message) for w in recwarn], [str(w.message) for w in recwarn]
