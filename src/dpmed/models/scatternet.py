"""ScatterNet: handcrafted scattering features with a small trainable head (Tramer and Boneh 2021, "Differentially
private learning needs better features (or much more data)").

A 2-d wavelet scattering transform (Mallat 2012; Oyallon and Mallat 2015) with J = 2 scales and L = 8 angles maps
an image [B, C, S, S] to 81 C channels at S/4 x S/4: its low-pass average, 16 first-order and 64 second-order
wavelet modulus coefficients per input channel. The transform is fixed (no parameter, data-independent filters kept
as constant buffers), so under DP-SGD only the head pays for privacy: Tramer and Boneh find that linear models and
small CNNs on these features beat end-to-end CNNs at small eps without any public data (METHODS.md s.9, "Priors
that cost no privacy"). As they do, the features are normalised per image by a trainable GroupNorm (27 groups)
rather than by dataset statistics, which would be an unaccounted statistic of the private images.

* ``scatternet_linear``: GroupNorm -> flatten -> linear (their "ScatterNet + linear").
* ``scatternet_cnn``: GroupNorm -> two conv 3x3 -> GroupNorm -> ReLU blocks (an average pool between them) ->
  global max pool -> linear (their "ScatterNet + CNN", at the width of ``small_cnn``'s last block; max pooling for
  small findings, as ``small_cnn`` argues).

The transform is kymatio's (Andreux et al. 2020), imported when a model is built. kymatio 0.3's ``kymatio.torch``
also imports its 3-d scattering, which needs ``scipy.special.sph_harm`` (removed in scipy 1.17); the 2-d torch
front end is imported from its own module, which does not.
"""

from __future__ import annotations

import copy
import functools

import torch
from torch import Tensor, nn

__all__ = ["ScatterNet", "scatternet_linear", "scatternet_cnn", "SCATTER_J", "SCATTER_L"]

SCATTER_J = 2          # scales: S -> S / 4 (Tramer and Boneh 2021 use J = 2 on 28 and 32 px images)
SCATTER_L = 8          # angles
_GROUPS = 27           # GroupNorm groups over the 81 C scattering channels (Tramer and Boneh 2021)


@functools.lru_cache(maxsize=8)
def _scattering_bank(image_size: int) -> tuple[nn.Module, int]:
    """(kymatio's transform for S x S images, the side of its output maps, ~S / 4), built once per size in a process.
    kymatio builds its Morlet filters in numpy, element by element (``filter_bank.periodize_filter_fft``, and 25
    complex exponentials over the padded image per filter), slow at 224 px (benchmarks/RESULTS.md), while a study
    builds the model again for every run, its timing probe and any re-evaluation. Never handed out:
    :func:`_scattering` gives each model a copy."""
    try:
        from kymatio.scattering2d.frontend.torch_frontend import ScatteringTorch2D
    except ImportError as exc:   # pragma: no cover - kymatio is a dependency
        raise ImportError("the ScatterNet models need kymatio (pip install kymatio)") from exc
    scattering = ScatteringTorch2D(J=SCATTER_J, shape=(image_size, image_size), L=SCATTER_L)
    with torch.no_grad():
        side = scattering(torch.zeros(1, 1, image_size, image_size)).shape[-1]
    return scattering, side


def _scattering(image_size: int) -> tuple[nn.Module, int]:
    """(a transform of the model's own, its output side): a deep copy of the one built for ``image_size``, with the
    same filter bits in tensors no other model holds, so moving one model (``.to(device)``) or loading its state
    touches no other."""
    scattering, side = _scattering_bank(image_size)
    return copy.deepcopy(scattering), side


class ScatterNet(nn.Module):
    """in [B, C, S, S] -> logits [B, num_outputs]: frozen scattering, trainable GroupNorm, then ``head`` ("linear"
    or "cnn"). ``features`` is the layer Grad-CAM reads (the normalised scattering maps, or the CNN's last block)."""

    def __init__(self, in_channels: int, num_outputs: int, image_size: int, head: str = "linear",
                 width: int = 64) -> None:
        super().__init__()
        if image_size < 2 ** SCATTER_J:
            raise ValueError(f"ScatterNet with J = {SCATTER_J} needs images of at least {2 ** SCATTER_J} px, got "
                             f"{image_size}")
        self.scattering, side = _scattering(image_size)
        channels = in_channels * (1 + SCATTER_J * SCATTER_L + SCATTER_L ** 2 * SCATTER_J * (SCATTER_J - 1) // 2)
        self.norm = nn.GroupNorm(_GROUPS, channels)
        self.features: nn.Module
        self.pool: nn.Module
        if head == "linear":
            self.features = nn.Identity()
            self.pool = nn.Flatten()
            self.head = nn.Linear(channels * side * side, num_outputs)
        elif head == "cnn":
            self.features = nn.Sequential(
                nn.Conv2d(channels, width, 3, padding=1, bias=False), nn.GroupNorm(4, width), nn.ReLU(),
                nn.AvgPool2d(2) if side >= 2 else nn.Identity(),
                nn.Conv2d(width, width, 3, padding=1, bias=False), nn.GroupNorm(4, width), nn.ReLU(),
            )
            self.pool = nn.Sequential(nn.AdaptiveMaxPool2d(1), nn.Flatten())
            self.head = nn.Linear(width, num_outputs)
        else:
            raise ValueError(f"head must be 'linear' or 'cnn', got {head!r}")

    def forward(self, x: Tensor) -> Tensor:
        return self.from_fixed(self.fixed_features(x))

    def fixed_features(self, x: Tensor) -> Tensor:
        """The scattering of ``x``, [B, C, 81, S/4, S/4]: fixed filters, no parameter, each image's alone (the same
        values whatever batch it is in), so training computes it once per image instead of once per epoch
        (`dpmed.training.loop`)."""
        return self.scattering(x.contiguous())

    def from_fixed(self, s: Tensor) -> Tensor:
        """Logits [B, K] from :meth:`fixed_features`: the trainable part."""
        s = self.norm(s.reshape(s.shape[0], -1, *s.shape[-2:]))               # [B, 81 C, S/4, S/4]
        return self.head(self.pool(self.features(s)))                           # [B, K]


def scatternet_linear(in_channels: int, num_outputs: int, image_size: int) -> ScatterNet:
    return ScatterNet(in_channels, num_outputs, image_size, head="linear")


def scatternet_cnn(in_channels: int, num_outputs: int, image_size: int) -> ScatterNet:
    return ScatterNet(in_channels, num_outputs, image_size, head="cnn")
