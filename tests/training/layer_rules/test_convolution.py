"""The convolution rule's patch Gram matrices (the input half of its ghost norm and of a pair's ghost dot product)
against torch's own F.unfold, for any geometry, in float64. The rule's clipped sums against an explicit per-example
loop are in test_clipping_engine.py and test_patient_clipping.py."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from dpmed.training.layer_rules.convolution import _ConvGeometry, _patch_gram_by_pixels, _patch_gram_unfolded, _unfold


@settings(max_examples=40, deadline=None)
@given(c_in=st.integers(1, 3), groups=st.sampled_from([1, 2]), kh=st.integers(1, 3), kw=st.integers(1, 3),
       stride=st.tuples(st.integers(1, 2), st.integers(1, 3)), padding=st.tuples(st.integers(0, 2), st.integers(0, 2)),
       dilation=st.tuples(st.integers(1, 2), st.integers(1, 2)), h=st.integers(5, 8), w=st.integers(5, 9),
       strided=st.booleans())
def test_the_two_patch_gram_routes_and_the_unfold_agree_with_torch(c_in, groups, kh, kw, stride, padding, dilation,
                                                                   h, w, strided):
    """The conv ghost norm's input Gram matrix, by unfolded patches and by the pixel Gram matrix, equals the one
    from torch's own F.unfold, for any geometry (float64), also where the input is a strided view that starts
    inside its storage (a batch chunk of a layer's input: both routes read it through strides and an offset)."""
    c_in *= groups
    gen = torch.Generator().manual_seed(4)
    if strided:                          # every other column of examples 1-3 of a larger tensor: offset, not contiguous
        a = torch.randn(5, c_in, h, 2 * w, generator=gen, dtype=torch.float64)[1:4, :, :, ::2]
    else:
        a = torch.randn(3, c_in, h, w, generator=gen, dtype=torch.float64)
    geo = _ConvGeometry((kh, kw), stride, padding, dilation, groups)
    reference = F.unfold(a, (kh, kw), dilation, padding, stride)                 # [3, C kh kw, T]
    ho = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    wo = (w + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    t = ho * wo
    torch.testing.assert_close(_unfold(a, geo), reference, rtol=0, atol=0)
    ref = reference.view(3, groups, -1, t)
    gram = ref.transpose(2, 3) @ ref                                              # [3, G, T, T]
    torch.testing.assert_close(_patch_gram_unfolded(a, geo, t), gram, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(_patch_gram_by_pixels(a, geo, (ho, wo)), gram, rtol=1e-12, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(c_in=st.integers(1, 3), groups=st.sampled_from([1, 2]), kh=st.integers(1, 3), kw=st.integers(1, 3),
       stride=st.tuples(st.integers(1, 2), st.integers(1, 3)), padding=st.tuples(st.integers(0, 2), st.integers(0, 2)),
       dilation=st.tuples(st.integers(1, 2), st.integers(1, 2)), h=st.integers(5, 8), w=st.integers(5, 9))
def test_the_two_cross_patch_gram_routes_agree_with_torch(c_in, groups, kh, kw, stride, padding, dilation, h, w):
    """The Gram matrix of patches across two images (a pair's ghost dot product), by unfolded patches and by the
    pixel Gram matrix, equals the one from torch's F.unfold, for any geometry (float64)."""
    c_in *= groups
    gen = torch.Generator().manual_seed(4)
    a = torch.randn(3, c_in, h, w, generator=gen, dtype=torch.float64)
    b = torch.randn(3, c_in, h, w, generator=gen, dtype=torch.float64)
    geo = _ConvGeometry((kh, kw), stride, padding, dilation, groups)
    ua, ub = (F.unfold(t, (kh, kw), dilation, padding, stride) for t in (a, b))   # [3, C kh kw, T]
    ho = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    wo = (w + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    t = ho * wo
    cross = ua.view(3, groups, -1, t).transpose(2, 3) @ ub.view(3, groups, -1, t)  # [3, G, T, T]
    torch.testing.assert_close(_patch_gram_unfolded(a, geo, t, b), cross, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(_patch_gram_by_pixels(a, geo, (ho, wo), b), cross, rtol=1e-12, atol=1e-12)
