"""Weight standardisation (Qiao, Wang, Liu, Shen, Yuille 2019, "Micro-Batch Training with Batch-Channel
Normalization and Weight Standardization"): each output channel's kernel is standardised before it is used,

    W_hat[c] = (W[c] - mean(W[c])) / sqrt(var(W[c]) + eps)        over the C_in / G * kh * kw values of channel c,

so the convolution sees zero-mean, unit-variance kernels whatever the raw weights drift to. With GroupNorm after
each convolution it is the normalisation De, Berrada, Hayes, Smith, Balle 2022 ("Unlocking high-accuracy
differentially private image classification through scale") train their DP-SGD WideResNets with, and what BiT
(Kolesnikov et al. 2020) pretrains with: it smooths the loss landscape without mixing examples (BatchNorm would), so
per-example clipping keeps its meaning. The standardisation acts on the weights only, never across a batch.

The trainable parameters stay the *raw* weights W; DP-SGD clips and noises their per-example gradients, which are
J^T grad_{W_hat} with J the Jacobian of the per-channel standardisation (the standard backward, `dpmed.training`'s
layer rule for :class:`WSConv2d`). ``eps`` follows timm's ``StdConv2d`` (biased variance, eps inside the root).
"""

from __future__ import annotations

from torch import Tensor, nn

__all__ = ["WSConv2d", "standardize", "weight_standardize", "WS_EPS"]

WS_EPS = 1e-6


def standardize(weight: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """(W_hat, s): the standardised kernel, shaped like ``weight`` [C_out, C_in/G, kh, kw], and the per-channel
    scale s = sqrt(var + eps), [C_out] (biased variance over each output channel's values)."""
    flat = weight.reshape(weight.shape[0], -1)                                      # [C_out, n]
    mean = flat.mean(1, keepdim=True)
    scale = (flat.var(1, unbiased=False, keepdim=True) + eps).sqrt()                # [C_out, 1]
    return ((flat - mean) / scale).view_as(weight), scale.squeeze(1)


class WSConv2d(nn.Conv2d):
    """A Conv2d that convolves with its standardised kernel (``standardize``); same arguments as ``nn.Conv2d`` plus
    ``eps``. Build one from an existing convolution with :meth:`from_conv` (it keeps that layer's parameters)."""

    def __init__(self, *args, eps: float = WS_EPS, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self.weight[0].numel() < 2:
            raise ValueError("weight standardisation needs at least 2 values per output channel (C_in / groups * "
                             f"kh * kw); this kernel has {self.weight[0].numel()}: every standardised value is 0")
        self.eps = eps

    @classmethod
    def from_conv(cls, conv: nn.Conv2d, eps: float = WS_EPS) -> "WSConv2d":
        """The standardised version of ``conv``, sharing its parameters (its initialisation is kept; the new layer
        is built on the meta device, so no random number is drawn)."""
        ws = cls(conv.in_channels, conv.out_channels, conv.kernel_size, stride=conv.stride, padding=conv.padding,
                 dilation=conv.dilation, groups=conv.groups, bias=conv.bias is not None,
                 padding_mode=conv.padding_mode, eps=eps, device="meta")
        ws.weight = conv.weight
        ws.bias = conv.bias
        return ws

    def standardized_weight(self) -> Tensor:
        return standardize(self.weight, self.eps)[0]

    def forward(self, x: Tensor) -> Tensor:
        return self._conv_forward(x, self.standardized_weight(), self.bias)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", eps={self.eps:g}"


def weight_standardize(model: nn.Module, eps: float = WS_EPS) -> nn.Module:
    """``model`` with every plain ``nn.Conv2d`` replaced in place by a :class:`WSConv2d` sharing its parameters
    (names, initialisation and parameter count unchanged). Meant for convolutions followed by GroupNorm, as in the
    registered ``*_ws`` models; returns ``model``."""
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Conv2d:
                setattr(parent, name, WSConv2d.from_conv(child, eps))
    return model
