"""Starting a model from saved weights, and choosing which of its parameters train.

Why: a prior that costs no privacy is the strongest lever on DP-SGD's utility (De et al. 2022; Tramer and Boneh
2021; METHODS.md s.9). 003_9a91354dc2d7e2df.txt pretrains its ResNet-9 on MIMIC-CXR, 000_56c2431ae4df8d10.txt starts
from an ImageNet ResNet-18, 004_6210268d59b6f8e5.txt fine-tunes pretrained models. Nothing here downloads: a
study names a local file.

**Layouts read.** A state dict as torch saves it: dpmed's own ``model.pt`` (every run writes one), torchvision's
ResNet layout (dpmed's ``resnet18`` keeps its module names: ``conv1``, ``layer1.0.bn1``, ..., ``fc``), or a
checkpoint that holds one under ``state_dict`` or ``model``; a ``module.`` prefix (DataParallel) or
``_module.`` prefix (Opacus' GradSampleModule) is removed. Every
parameter of the model except its classifier head must come from the file with its shape, and every tensor of the
file must have a place in the model: otherwise the architectures differ, and the error names the key. The head
(``ModelInfo.head``) is loaded, as one unit, where all of its tensors' shapes match, and otherwise left whole at its
initialisation (a checkpoint for 1000 ImageNet classes starting a two-class model): that is the usual fine-tuning,
and the record lists the keys.

**No BatchNorm.** A checkpoint with BatchNorm running statistics (torchvision's and timm's ImageNet ResNets) is
refused. Its normalisation was fitted with statistics of batches, and under DP-SGD it cannot be kept: in training
mode BatchNorm mixes the examples of a batch, so one example's influence on the update is no longer its own clipped
gradient (per-example clipping bounds nothing), and its running mean and variance are statistics of the private
images released without noise (`dpmed.training.clipping` refuses the layer for both reasons). Dropping the
statistics and swapping in GroupNorm would leave weights fitted to another normalisation. Use weights trained with
GroupNorm (dpmed's own models, any run's model.pt) or pretrain them with dpmed's ``pretrain`` stage. BiT (Kolesnikov
et al. 2020) and De et al. 2022's checkpoints are GroupNorm with weight standardisation, but on ResNet-v2 and
WideResNet architectures that are not among dpmed's models, so their files do not load here (the error names the
first key without a place); timm's ResNet-18 uses torchvision's names and BatchNorm, so it is refused as above.

**What a state dict cannot show.** Names and shapes are all a file carries: one whose names and shapes fit loads,
whatever trained it. BatchNorm weights saved without their running statistics load into the GroupNorm layers of the
same names, and ``small_cnn``'s weights into ``small_cnn_ws`` (the same tensors; the latter standardises its
convolutions), both without error. Hence ``weights_source``, which the record and the report print beside the
file's sha256: the user says what the weights are.

**Freezing.** ``trainable`` is ``all``, ``head`` or ``last_blocks: N`` (the head and the last N blocks of
``ModelInfo.blocks``); every other parameter gets ``requires_grad = False``. DP-SGD takes only parameters that
require a gradient (`dpmed.training.dp_sgd.DpSgdStep.params`, and each clipping engine's layers): a frozen
parameter is neither clipped nor noised, and the noise has exactly as many coordinates as there are trainable
parameters. Fewer noised coordinates is the point: the noise norm grows with sqrt(d) (Tramer and Boneh 2021).
"""

from __future__ import annotations

import io
import pickle
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import torch
from torch import Tensor, nn

from dpmed.errors import ConfigError
from dpmed.folders import file_sha256

__all__ = ["LoadedWeights", "HeadMatch", "match_head", "read_state_dict", "load_weights", "set_trainable",
           "last_blocks_problem", "frozen_at_random", "hash_weights", "read_weights", "TRAINABLE_ALL", "TRAINABLE_HEAD",
           "BATCH_NORM_STATISTICS"]

TRAINABLE_ALL = "all"
TRAINABLE_HEAD = "head"
BATCH_NORM_STATISTICS = ("running_mean", "running_var", "num_batches_tracked")
_CONTAINERS = ("state_dict", "model")
_EXAMPLES = 5
_ESCAPES = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|[@-Z\\-_])")   # ANSI colour and cursor codes


@dataclass(frozen=True)
class LoadedWeights:
    """What a file gave a model: ``loaded`` keys (their tensors copied in) and ``kept`` keys of the head left at
    their initialisation because the file's shape differs (e.g. another number of classes)."""

    loaded: tuple[str, ...]
    kept: tuple[str, ...]


@dataclass(frozen=True)
class HeadMatch:
    """How the outputs of a head trained for one list of labels map onto a model's: ``rows``, the file's output row
    for each of the model's outputs in order (None: other labels, or names that match only ambiguously), and
    ``why``, what the user is told about it ("" for the same names in the same order)."""

    rows: tuple[int, ...] | None
    why: str

    @property
    def same_order(self) -> bool:
        """Each output of the file is the model's output of the same index: the head loads as it is."""
        return self.rows is not None and self.rows == tuple(range(len(self.rows)))


def match_head(file_names: Sequence[str], model_names: Sequence[str]) -> HeadMatch:
    """Match the labels a head was trained for (``file_names``, in output order) to a model's (``model_names``).
    The same names in another order match by name; names that differ only in letter case ("Effusion", "effusion":
    two readers of one release) match only where letter case pairs them one to one, since otherwise a head row could
    be given to the wrong label."""
    file_names, model_names = tuple(file_names), tuple(model_names)
    other = f"pretrained for {list(file_names)}, not {list(model_names)}"
    for fold, words in ((lambda n: n, ""), (str.casefold, " up to letter case")):
        have, want = [fold(n) for n in file_names], [fold(n) for n in model_names]
        if len(set(have)) == len(have) == len(want) == len(set(want)) and set(have) == set(want):
            rows = tuple(have.index(n) for n in want)
            order = "" if rows == tuple(range(len(rows))) else f" in another order ({list(file_names)})"
            return HeadMatch(rows, "" if not words and not order else f"the study's labels{words}{order}")
    if sorted({n.casefold() for n in file_names}) == sorted({n.casefold() for n in model_names}):
        return HeadMatch(None, f"{other}: the names match only ignoring letter case, and not one to one")
    return HeadMatch(None, other)


def _unreadable(exc: OSError, path: Path, key: str) -> str:
    """A file that exists but cannot be read (permissions, a failing disk): its access is what to fix, not its
    format."""
    return (f"{key}: {path} cannot be read ({exc.strerror or exc}); check that this user may read it (and that the "
            "disk holding it works)")


def hash_weights(path: Path) -> str:
    """`file_sha256` of the weights file a study names under model.weights; ConfigError naming the key and the path
    where it cannot be read (it is hashed before it is loaded, so this is where an unreadable file is first met)."""
    try:
        return file_sha256(path)
    except OSError as exc:
        raise ConfigError(_unreadable(exc, Path(path), "model.weights")) from None


def _examples(keys: list[str]) -> str:
    return ", ".join(keys[:_EXAMPLES]) + (f" (and {len(keys) - _EXAMPLES} more)" if len(keys) > _EXAMPLES else "")


def _not_a_state_dict(exc: Exception, path: Path, key: str) -> str:
    """Why torch could not read ``path`` as tensors, in our words. torch's text on a pickled object (a whole model
    saved with ``torch.save(model, PATH)``) advises weights_only=False or allow-listing its classes, which would run
    the file's code, and it holds terminal escape codes: only the class it names is kept. Other errors keep their
    first line, without escape codes."""
    text = _ESCAPES.sub("", str(exc))
    weights_only = isinstance(exc, pickle.UnpicklingError) and "weights only load failed" in text.lower()
    named = re.search(r"Unsupported global: GLOBAL ([\w.]+)", text)
    if weights_only and (named or "Unsupported global" in text):
        what = f"a pickled {named.group(1)} object" if named else "pickled Python objects"
        return (f"{key}: {path} is not a torch state dict but {what} (as torch.save(model, PATH) saves a whole "
                "model); dpmed does not unpickle objects, since that could run any code in the file: save the weights "
                "alone, with torch.save(model.state_dict(), PATH), and give that file")
    # torch's own reason, where it gives one below its advice ("Unsupported operand 103": not a pickle at all)
    reason = re.search(r"WeightsUnpickler error:\s*(\S[^\n]*)", text) if weights_only else None
    first = reason.group(1)[:200] if reason else (text.strip().splitlines() or [""])[0][:200]
    if isinstance(exc, EOFError) or "central directory" in text:   # empty, or a zip archive cut short
        what = "empty" if isinstance(exc, EOFError) else "its end is missing"
        return (f"{key}: {path} is incomplete or damaged ({what}: a copy cut short?); copy it again from where it "
                "was saved")
    if path.suffix == ".safetensors":   # how timm and BiT weights are mostly published now; dpmed reads torch's
        return (f"{key}: {path} is a safetensors file, which dpmed does not read: convert it to a torch state dict "
                "once, with torch.save(safetensors.torch.load_file(PATH), NEW_PATH) (pip install safetensors), and "
                "give that file")
    return (f"{key}: {path} is not a torch state dict ({type(exc).__name__}{': ' + first if first else ''}); save one "
            "with torch.save(model.state_dict(), PATH): a whole pickled model is not read, since unpickling it could "
            "run any code")


# The wrappers whose prefix a saved state dict carries: DataParallel's and Opacus' GradSampleModule's.
_WRAPPER_PREFIXES = ("module.", "_module.")


def _unwrapped(key: str) -> str:
    return next((key[len(p):] for p in _WRAPPER_PREFIXES if key.startswith(p)), key)


def read_weights(path: Path, *, key: str = "model.weights") -> bytes:
    """The bytes of the weights file ``path``, read once, so that the bytes a caller hashes are the bytes it loads
    (`read_state_dict`'s ``contents``): hashed, then read again to load, a file replaced between the two reads would
    train from weights whose hash is not the one recorded. ConfigError naming ``key`` and the path where it is a
    folder, missing or cannot be read."""
    path = Path(path)
    _refuse_no_file(path, key)
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise ConfigError(_unreadable(exc, path, key)) from None


def _refuse_no_file(path: Path, key: str) -> None:
    """ConfigError naming ``key`` where ``path`` is a folder or no file."""
    if path.is_dir():
        raise ConfigError(f"{key}: {path} is a folder; give the path of the weights file in it (a .pt state dict)")
    if not path.is_file():
        raise ConfigError(f"{key}: no such file {path}; give the path of a local state dict (dpmed downloads "
                          "nothing)")


def read_state_dict(path: Path, *, key: str = "model.weights", contents: bytes | None = None) -> dict[str, Tensor]:
    """The state dict in ``path`` (the layouts of the module docstring), on the CPU. ConfigError naming ``key`` and
    the path if the file is missing or holds no state dict; naming the BatchNorm keys if it holds BatchNorm.
    ``contents``: the file's bytes as the caller read and hashed them (`read_weights`), loaded instead of reading the
    file again, which may have been replaced since (`dpmed.run.start_model`, `dpmed.pretraining.pretrain`)."""
    path = Path(path)
    if contents is None:
        _refuse_no_file(path, key)
    try:
        with warnings.catch_warnings():   # torch's warnings on a file it then refuses (a pickle protocol) add nothing
            warnings.simplefilter("ignore")
            raw = torch.load(path if contents is None else io.BytesIO(contents), map_location="cpu",
                             weights_only=True)
    except OSError as exc:     # before the catch-all: an unreadable file is no reason to re-save it
        raise ConfigError(_unreadable(exc, path, key)) from None
    except Exception as exc:   # torch raises several types for a file that is not a checkpoint
        raise ConfigError(_not_a_state_dict(exc, path, key)) from None
    for name in _CONTAINERS:
        if isinstance(raw, Mapping) and isinstance(raw.get(name), Mapping):
            raw = raw[name]
            break
    if not isinstance(raw, Mapping) or not raw or not all(isinstance(v, Tensor) for v in raw.values()):
        raise ConfigError(f"{key}: {path} holds no state dict (a mapping of names to tensors, or one under "
                          f"{' or '.join(_CONTAINERS)}); save one with torch.save(model.state_dict(), PATH) and give "
                          "that file")
    state = {_unwrapped(k): v for k, v in raw.items()}
    batch_norm = [k for k in state if k.rsplit(".", 1)[-1] in BATCH_NORM_STATISTICS]
    if batch_norm:
        raise ConfigError(
            f"{key}: {path} holds BatchNorm running statistics ({_examples(batch_norm)}); BatchNorm cannot be used "
            "under DP-SGD: in training it mixes the examples of a batch, so per-example clipping no longer bounds "
            "one example's influence, and its running mean and variance would be statistics of the private images "
            "released without noise. GroupNorm checkpoints, with or without weight-standardised convolutions, can "
            "be used: they normalise each image alone and keep no statistics. Use such weights for one of dpmed's "
            "models (any dpmed run's model.pt; small_cnn_ws and resnet9_ws for weight-standardised ones), or "
            "pretrain with the study's pretrain stage (BiT's GroupNorm and weight-standardised ResNet-v2 suits "
            "DP-SGD too, but does not fit dpmed's models)")
    return state


def load_weights(model: nn.Module, state: Mapping[str, Tensor], *, head: str, key: str = "model.weights",
                 path: Path | None = None, same_classes: bool = True,
                 rows: Sequence[int] | None = None) -> LoadedWeights:
    """Copy ``state`` (read from ``path``) into ``model`` (the rules of the module docstring): ConfigError naming
    the file and the first keys that are missing, unexpected or of another shape outside the head ``head`` (a module
    name, e.g. "fc").
    ``same_classes=False``: the file's outputs are known to mean other classes, so
    the head is left at its initialisation whatever its shape; a head of the right shape would otherwise start
    each output from another class's weights. ``rows``: the file's output row for each of the model's outputs (the
    same classes in another order, `match_head`): the head's tensors are taken in that order (every registered
    head is one linear layer, whose rows are its outputs)."""
    own = model.state_dict()
    in_head = lambda k: k == head or k.startswith(head + ".")  # noqa: E731
    if rows is not None:
        state = {k: v[list(rows)] if in_head(k) and v.shape[:1] == (len(rows),) else v for k, v in state.items()}
    missing = [k for k in own if k not in state and not in_head(k)]
    unexpected = [k for k in state if k not in own]
    mismatched = [k for k in own if k in state and state[k].shape != own[k].shape and not in_head(k)]
    where = f"{key}: " if path is None else f"{key}: {path}: "
    if mismatched:
        k = mismatched[0]
        raise ConfigError(f"{where}{k} has shape {list(state[k].shape)} in the file but {list(own[k].shape)} in the "
                          f"model" + (f" (and {len(mismatched) - 1} more keys differ)" if len(mismatched) > 1 else "")
                          + _first_layer_hint(own, state, k))
    if missing or unexpected:
        parts = ([f"the model's {_examples(missing)} are not in the file"] if missing else []) + \
                ([f"the file's {_examples(unexpected)} have no place in the model"] if unexpected else [])
        raise ConfigError(f"{where}the file does not fit the model: {'; '.join(parts)}; the architectures differ "
                          "(dpmed reads its own model.pt and torchvision's ResNet names)")
    # the head is one unit: loaded whole where every tensor of it fits, else kept whole at its initialisation (a
    # bias of the right shape beside a weight of another would start half trained on the file's features)
    head_keys = tuple(k for k in own if in_head(k))
    fits = same_classes and all(k in state and state[k].shape == own[k].shape for k in head_keys)
    kept = () if fits else head_keys
    loaded = tuple(k for k in own if k not in kept)
    with torch.no_grad():
        for k in loaded:
            own[k].copy_(state[k].to(own[k].dtype))
    return LoadedWeights(loaded=loaded, kept=kept)


def _first_layer_hint(own: Mapping[str, Tensor], state: Mapping[str, Tensor], key: str) -> str:
    """Which study setting would fit the file where ``key``, the first to differ, is the model's first convolution:
    its input channels are data.channels, and some models build it by data.image_size (resnet18: a 3x3 stem at 64 px
    or less, torchvision's 7x7 above); otherwise the architectures differ."""
    first = next((k for k, v in own.items() if v.dim() == 4), None)
    file, model = state[key].shape, own[key].shape
    if key != first or len(file) != 4 or file[0] != model[0]:
        return "; the weights were trained for another architecture, input channels or image size"
    hints = []
    if file[1] != model[1]:
        hints.append(f"the file's first layer takes {file[1]}-channel images, the model {model[1]}-channel ones: set "
                     f"data.channels: {file[1]}")
    if file[2:] != model[2:]:
        hints.append(f"its kernel is {file[2]}x{file[3]} in the file, {model[2]}x{model[3]} in the model: a model's "
                     "first layer can depend on data.image_size (resnet18 takes torchvision's 7x7 only above 64 px)")
    return "; " + "; ".join(hints)


def last_blocks_problem(n: int, blocks: tuple[tuple[str, ...], ...], *, model: str = "this model") -> str | None:
    """Why ``trainable: {last_blocks: n}`` does not fit a model with ``blocks`` (``model``: its name), or None. One
    rule for the study schema, which refuses it when the file is read (``dpmed plan`` as ``dpmed run``, and before
    public pretraining trains), and for `set_trainable`."""
    if n <= len(blocks):
        return None
    if not blocks:
        return f"last_blocks {n}, but {model} has no feature blocks; use head or all"
    return (f"last_blocks {n}, but {model} has {len(blocks)} blocks ({', '.join('+'.join(b) for b in blocks)}); use "
            f"at most {len(blocks)}, or all")


def frozen_at_random(model: nn.Module, trainable: str | int, *, head: str,
                     blocks: tuple[tuple[str, ...], ...]) -> tuple[str, ...]:
    """The parameters of the freshly built ``model`` that ``trainable`` would freeze at a random draw (a convolution's
    or a linear layer's weights), as `set_trainable` freezes them (it is applied to ``model``). A normalisation
    layer starts at the identity, so a frozen one is no random feature: scatternet's GroupNorm over its fixed
    scattering transform, under a trained head, is Tramer and Boneh's linear model. Without weights to start from,
    any name returned means the trained part sees random features."""
    set_trainable(model, trainable, head=head, blocks=blocks)
    norms = {name for name, module in model.named_modules() if isinstance(module, (nn.GroupNorm, nn.LayerNorm))}
    return tuple(name for name, p in model.named_parameters()
                 if not p.requires_grad and name.rpartition(".")[0] not in norms)


def set_trainable(model: nn.Module, trainable: str | int, *, head: str,
                  blocks: tuple[tuple[str, ...], ...]) -> tuple[int, int]:
    """Freeze what ``trainable`` leaves out: "all", "head", or an int N (the head and the last N of ``blocks``,
    each block a tuple of module names). Returns (trainable parameter count, frozen parameter count)."""
    if trainable == TRAINABLE_ALL:
        prefixes: tuple[str, ...] | None = None
    elif trainable == TRAINABLE_HEAD:
        prefixes = (head,)
    elif isinstance(trainable, int) and not isinstance(trainable, bool) and trainable >= 1:
        problem = last_blocks_problem(trainable, blocks)
        if problem is not None:
            raise ConfigError(f"model.trainable: {problem}")
        prefixes = (head,) + tuple(name for block in blocks[len(blocks) - trainable:] for name in block)
    else:
        raise ValueError(f"trainable must be 'all', 'head' or a number of blocks >= 1, got {trainable!r}")
    n_trainable = n_frozen = 0
    for name, p in model.named_parameters():
        train = prefixes is None or any(name == q or name.startswith(q + ".") for q in prefixes)
        p.requires_grad_(train)
        n_trainable += p.numel() if train else 0
        n_frozen += 0 if train else p.numel()
    return n_trainable, n_frozen
