"""The clipping engine and the DP-SGD step on a CUDA GPU, against the CPU and against the sensitivity they promise.

A GPU takes other paths than the CPU: larger chunks (`GPU_CHUNK_ELEMENTS`, the whole batch at once), cuDNN's
convolutions (TF32 by default on Ampere and later), and the noise copied from pinned host memory. These tests run
only where a GPU is (CI has none); benchmarks/RESULTS.md says where they last ran.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from dpmed.models import build_model, list_models
from dpmed.training import DpSgdStep
from dpmed.training.clipping import GhostClipper

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="needs a CUDA GPU (the engine's GPU chunking, cuDNN and pinned-noise paths)")

GPU = torch.device("cuda")


def _ce(z, y):
    return F.cross_entropy(z, y, reduction="sum")


def _model(name, dtype, size=10, channels=3):
    return build_model(name, in_channels=channels, num_outputs=3, image_size=size, seed=0).to(dtype)


@pytest.mark.parametrize("name", list_models())
def test_float64_clipped_sum_on_the_gpu_equals_the_cpus_explicit_loop(name):
    """Every registered model in float64: the engine on the GPU (one chunk) against one backward per example on the
    CPU, at a clip level between the smallest and largest per-example norm."""
    model = _model(name, torch.float64)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(4, 3, 10, 10, generator=g, dtype=torch.float64)
    y = torch.tensor([0, 1, 2, 0])
    params = [p for p in model.parameters() if p.requires_grad]
    grads = [torch.autograd.grad(_ce(model(x[i:i + 1]), y[i:i + 1]), params, allow_unused=True) for i in range(4)]
    grads = [[torch.zeros_like(p) if t is None else t for p, t in zip(params, gr)] for gr in grads]
    norms = [torch.cat([t.flatten() for t in gr]).norm().item() for gr in grads]
    clip = sorted(norms)[2]
    expected = [sum(min(1.0, clip / (n + 1e-6)) * gr[k] for n, gr in zip(norms, grads)) for k in range(len(params))]
    got = GhostClipper(model.to(GPU)).clipped_sum(x.to(GPU), y.to(GPU), loss_fn=_ce, max_grad_norm=clip)
    for a, b in zip(got, expected, strict=True):
        assert (a.cpu() - b).norm().item() <= 1e-5 * b.norm().item() + 1e-12


@pytest.mark.parametrize("name", ["resnet18", "resnet9"])
def test_each_examples_float32_gpu_contribution_stays_within_the_clip(name, monkeypatch):
    """The sensitivity on the GPU's own float32 kernels (cuDNN, with torch's default TF32 flag), 64 px: every
    example's clipped contribution has norm C to float32 rounding (within 1.3e-7 on an H200), not TF32's: a norm
    computed on other values than the ones summed (cuDNN's TF32 in either) put these contributions 7e-6 to 3e-5 from
    C there, and a batch's 3-5e-4 (benchmarks/RESULTS.md, "Without TF32 on an H200"). (A batch's sum is not compared
    with the sum of these single-example calls: cuDNN picks other algorithms at another batch size, so on an H100
    the gradients they clip differ by about 1e-3 relative, benchmarks/RESULTS.md; the float64 test above checks
    the batch against the explicit loop.)"""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)      # torch's default, whatever ran before
    model = _model(name, torch.float32, size=64).to(GPU)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(6, 3, 64, 64, generator=g).to(GPU)
    y = torch.tensor([0, 1, 2, 0, 1, 2]).to(GPU)
    engine, clip = GhostClipper(model), 1e-3                 # far below every norm: every example is clipped
    alone = [engine.clipped_sum(x[i:i + 1], y[i:i + 1], loss_fn=_ce, max_grad_norm=clip) for i in range(6)]
    for parts in alone:
        norm = torch.cat([t.flatten().double() for t in parts]).norm().item()
        assert abs(norm / clip - 1) <= 1e-6


def test_the_noisy_step_on_the_gpu_draws_what_the_cpu_draws():
    """The same secret stream gives the same noise on either device (the pinned buffer copied once per step), and a
    second step's noise does not overwrite the first's before it is used. With C tiny the gradient is all noise."""
    grads = {}
    for device in ("cpu", "cuda"):
        model = _model("small_cnn", torch.float32, size=28, channels=1).to(device)
        x = torch.randn(5, 1, 28, 28, generator=torch.Generator().manual_seed(4)).to(device)
        y = torch.tensor([0, 1, 2, 0, 1]).to(device)
        step = DpSgdStep(model, loss_fn=_ce, max_grad_norm=1e-6, noise_multiplier=1e6, expected_batch_size=5.0,
                         physical_batch_size=5, noise_rng=np.random.default_rng(7), engine="dpmed")
        grads[device] = []
        for _ in range(2):
            step(x, y)
            grads[device].append(torch.cat([p.grad.flatten().cpu() for p in model.parameters()]))
    for cpu, gpu in zip(grads["cpu"], grads["cuda"]):
        torch.testing.assert_close(gpu, cpu, rtol=1e-4, atol=1e-6)
    assert not torch.allclose(grads["cuda"][0], grads["cuda"][1])
    assert grads["cuda"][0].std().item() == pytest.approx(1.0 / 5.0, rel=0.05)   # sigma C / qN
