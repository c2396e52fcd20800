"""Per-example gradients of one layer from what backpropagation already has: its input and its output gradient.

For a layer ``out = f(a; W)`` and a loss that is a *sum* of per-example losses, the output gradient of example i,
``g_i = dL/d out_i``, depends on example i alone (no supported layer mixes examples), and the example's parameter
gradient is a fixed bilinear function of (a_i, g_i). For a linear map over T positions (a Linear over a sequence, a
Conv2d over its T output pixels after unfolding the input into patches):

    grad_i W = sum_t g_it a_it^T                                        [d_out, d_in]
    ||grad_i W||^2 = sum_{t,s} (a_it . a_is) (g_it . g_is)              (the "ghost norm": two T x T Gram matrices)

The ghost norm (Goodfellow 2015; Li et al. 2021 for sequences; Bu et al. 2022 for convolutions) costs
~T^2 (d_in + d_out) per example; materialising grad_i W costs ~T d_in d_out. Neither wins everywhere: early conv
layers have large T and few parameters, deep ones small T and many. Each rule therefore states both costs and
the engine picks the cheaper per layer and input size ("mixed ghost clipping", Bu et al. 2022). Once the clip
factors c_i are known, the clipped sum sum_i c_i grad_i W is *one* ordinary weight-gradient computation with
g_i scaled by c_i ("book-keeping", Bu et al. 2023): no second backward pass.

User-level clipping needs the norm of a group's summed gradient, ||sum_{i in G} grad_i W||^2 = sum_i ||grad_i W||^2
+ 2 sum_{i<j} <grad_i W, grad_j W>; the cross terms are ghost dot products of pairs of examples,
<grad_i W, grad_j W> = sum_{t,s} (a_it . a_js) (g_it . g_js), the same two Gram matrices taken across the pair.

A rule is a frozen info object per layer type (``LAYER_RULES``, below; :mod:`.rule` defines it), one module per
layer family (:mod:`.linear`, :mod:`.convolution`, :mod:`.standardized`, :mod:`.normalisation`,
:mod:`.embedding`); the engine has no if-ladder over layer names, and the tests iterate the same registry. A layer
type without a rule is an error, never a silent approximation. Adding a layer type is its rule in its family's module
(naming the layer types it is for) plus one entry in ``_RULES`` here.

Shapes: B examples; a: the layer's input; g: the gradient of the layer's output, both batch-first.
"""

from __future__ import annotations

from typing import Mapping

from torch import nn

from dpmed.training.layer_rules.convolution import CONVOLUTION
from dpmed.training.layer_rules.embedding import EMBEDDING
from dpmed.training.layer_rules.linear import LINEAR
from dpmed.training.layer_rules.normalisation import GROUP_NORM, LAYER_NORM
from dpmed.training.layer_rules.rule import BoundGhost, BoundRule, GhostRule, LayerRule, Rule
from dpmed.training.layer_rules.standardized import WS_CONVOLUTION

__all__ = ["LayerRule", "GhostRule", "Rule", "BoundRule", "BoundGhost", "LAYER_RULES"]

_RULES: tuple[Rule, ...] = (LINEAR, CONVOLUTION, WS_CONVOLUTION, GROUP_NORM, LAYER_NORM, EMBEDDING)

# Each layer type to its rule, by the rules' own ``layers`` (a WSConv2d, though a Conv2d, has its own rule: the
# engine looks rules up by a layer's exact type).
LAYER_RULES: Mapping[type[nn.Module], Rule] = {layer: rule for rule in _RULES for layer in rule.layers}
