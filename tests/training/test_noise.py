"""The noise of a DP-SGD step (dpmed.training.noise, DpSgdStep) against a one-thread twin written from the rule:

block b of the flat noise vector (parameters in order, BLOCK coordinates a block) is drawn by an AES-CTR generator
keyed by raw words 2b and 2b+1 of the run's noise stream; unit float64 noise (a float64 model: four Gaussian draws
halved) is multiplied by sigma C and added to the clipped sum in float64 before rounding. The twin below draws each
block with numpy's own ``normal``/``laplace`` on one thread, block after block, as nothing in the step does.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from randomgen import AESCounter
from torch import nn

import dpmed.training.dp_sgd as dp_sgd_module
import dpmed.training.noise as noise_module
from dpmed.randomness import PrivacyRandomness
from dpmed.training import DpSgdStep
from dpmed.training.noise import BLOCK, NoiseBuffer, block_keys, fill_noise, noise_workers


def _ce(z, y):
    return F.cross_entropy(z, y, reduction="sum")


def _twin_noise(seed: int, size: int, *, kind: str = "gaussian", four_halved: bool = False):
    """The unit noise vector and the stream after it, one block after another on this thread."""
    stream = np.random.default_rng(seed)
    parts = []
    for start in range(0, size, BLOCK):
        hi, lo = (int(w) for w in stream.bit_generator.random_raw(2))
        block = np.random.Generator(AESCounter(key=(hi << 64) | lo))
        n = min(BLOCK, size - start)
        if kind == "laplace":
            parts.append(block.laplace(0.0, 1.0, size=n))
        elif four_halved:
            parts.append(sum(block.normal(0.0, 1.0, size=n) for _ in range(4)) / 2)
        else:
            parts.append(block.normal(0.0, 1.0, size=n))
    return np.concatenate(parts), stream


def _wide_model(dtype=torch.float32) -> nn.Module:
    """A model of two blocks of noise (2^20 < 1,101,000 + 4,004 coordinates), the first ending inside the first
    layer's weight."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(1100, 1000), nn.ReLU(), nn.Linear(1000, 4)).to(dtype)


def _batch(dtype=torch.float32):
    g = torch.Generator().manual_seed(1)
    return torch.randn(5, 1100, generator=g).to(dtype), torch.randint(0, 4, (5,), generator=g)


@pytest.mark.parametrize("kind", ["gaussian", "laplace"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_step_adds_the_twins_noise_in_float64_and_leaves_the_stream_where_the_twin_does(kind, dtype):
    model = _wide_model(dtype)
    x, y = _batch(dtype)
    step = DpSgdStep(model, loss_fn=_ce, max_grad_norm=0.5, noise_multiplier=0.7, expected_batch_size=4.0,
                     physical_batch_size=2, noise_rng=np.random.default_rng(11), noise=kind)
    clipped = [t.clone() for t in step.clipped_sum(x, y)]
    step(x, y)
    size = sum(p.numel() for p in step.params)
    assert math.ceil(size / BLOCK) == 2
    noise, twin = _twin_noise(11, size, kind=kind, four_halved=dtype == torch.float64 and kind == "gaussian")
    start = 0
    for p, c in zip(step.params, clipped, strict=True):
        draw = torch.from_numpy(noise[start:start + p.numel()]).view(p.shape)
        start += p.numel()
        expected = ((c.double() + 0.35 * draw).to(dtype) / 4.0)        # summed in float64, then rounded
        if dtype == torch.float32:      # exactly the float64 sum, rounded once
            torch.testing.assert_close(p.grad, expected, rtol=0, atol=0)
        else:                           # sigma C times the draw may be fused into the add: an ulp of float64
            torch.testing.assert_close(p.grad, expected, rtol=1e-12, atol=1e-15)
    assert step.noise_rng.random() == twin.random()


def test_the_draws_do_not_depend_on_the_number_of_threads(monkeypatch):
    grads = []
    for workers in (1, 2, 5):
        monkeypatch.setattr(dp_sgd_module, "noise_workers", lambda w=workers: w)
        model = _wide_model()
        step = DpSgdStep(model, loss_fn=_ce, max_grad_norm=1.0, noise_multiplier=1.0, expected_batch_size=4.0,
                         physical_batch_size=5, noise_rng=np.random.default_rng(3))
        step(*_batch())
        step(*_batch())                                        # a second step reuses the buffer
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    assert torch.equal(grads[0], grads[1]) and torch.equal(grads[0], grads[2])


def test_a_failing_step_has_moved_the_stream_by_its_keys_only_and_leaves_no_thread():
    """The clipped sum raises: every block is finished before the error reaches the caller, and the stream moved
    by the step's keys and nothing else (a resumed run takes the next keys)."""
    def broken_loss(z, t):
        raise ValueError("broken loss")

    model = nn.Linear(300, 4)
    rng = np.random.default_rng(2)
    step = DpSgdStep(model, loss_fn=broken_loss, max_grad_norm=1.0, noise_multiplier=1.0, expected_batch_size=4.0,
                     physical_batch_size=4, noise_rng=rng)
    with pytest.raises(ValueError, match="broken loss"):
        step(torch.randn(4, 300), torch.randint(0, 4, (4,)))
    assert not any(t.name.startswith("dpmed-noise") for t in threading.enumerate())
    twin = np.random.default_rng(2)
    twin.bit_generator.random_raw(2)                           # 1,204 coordinates: one block, two words
    assert rng.bit_generator.state == twin.bit_generator.state


def _shows_noise(value, noise: set[float], depth: int = 0) -> bool:
    """Whether ``value`` (a frame's local) is an array or tensor, or a list, tuple or dict of them, holding one of
    the ``noise`` values: a traceback that shows locals prints some of its entries."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        return value.dtype == np.float64 and not noise.isdisjoint(value.ravel().tolist())
    if depth < 2 and isinstance(value, (list, tuple, dict)):
        return any(_shows_noise(v, noise, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
    return False


@pytest.mark.parametrize("stopped_in", ["the clipped sum", "handing out the draws", "adding the noise",
                                        "a block's draw"])
def test_a_traceback_that_shows_locals_of_an_interrupted_step_shows_neither_its_keys_nor_its_noise(stopped_in,
                                                                                                    monkeypatch):
    # A Ctrl-C lands most often in the clipped sum, while the step's noise is drawn. A traceback that shows each
    # frame's locals (IPython's verbose mode, pytest --showlocals, a crash reporter) printed the step's block keys
    # and a few of its noise values; the resumed run draws that very step again from its checkpoint's stream state.
    # Handing the blocks to the threads starts them, and waits for each to start: a Ctrl-C lands there too, and
    # while the noise is added; a block's draw can fail in its thread (out of memory), its frame in the traceback.
    # The step stopped is the second: until the next checkpoint the buffer's noise of the first is drawn again too.
    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    def second(target, name, then=stop):
        original, calls = getattr(target, name), []

        def wrapped(*args, **kwargs):
            calls.append(1)
            return then(*args, **kwargs) if len(calls) == 2 else original(*args, **kwargs)
        monkeypatch.setattr(target, name, wrapped)

    losses = []

    def loss(z, t):
        losses.append(1)
        if stopped_in == "the clipped sum" and len(losses) == 2:
            raise KeyboardInterrupt
        return z.sum()

    if stopped_in == "handing out the draws":
        second(ThreadPoolExecutor, "submit")
    elif stopped_in == "adding the noise":          # the first call adds the first step's noise
        second(torch, "_foreach_add_")
    elif stopped_in == "a block's draw":
        def out_of_memory(*args, **kwargs):
            raise MemoryError
        second(noise_module, "AESCounter", out_of_memory)
    model = nn.Linear(300, 4)
    step = DpSgdStep(model, loss_fn=loss, max_grad_norm=1.0, noise_multiplier=1.0, expected_batch_size=4.0,
                     physical_batch_size=4, noise_rng=np.random.default_rng(2))
    x, y = torch.randn(4, 300), torch.randint(0, 4, (4,))
    step(x, y)
    with pytest.raises(MemoryError if stopped_in == "a block's draw" else KeyboardInterrupt) as caught:
        step(x, y)
    stream, noise = np.random.default_rng(2), set()
    for _ in range(2):                  # the twin of both steps' noise: one block of 1,204 coordinates each
        hi, lo = (int(w) for w in stream.bit_generator.random_raw(2))
        noise |= set(np.random.Generator(AESCounter(key=(hi << 64) | lo)).normal(0.0, 1.0, size=1204).tolist())
    package = Path(dp_sgd_module.__file__).parents[1]
    ours = [t for t in _frames(caught.value.__traceback__) if Path(t.f_code.co_filename).is_relative_to(package)]
    stopped_at = {"the clipped sum": "clipped_sum", "handing out the draws": "fill_noise",
                  "adding the noise": "_add_noise", "a block's draw": "_fill_block"}[stopped_in]
    assert stopped_at in [frame.f_code.co_name for frame in ours]
    shown = [f"{frame.f_code.co_name}: {name}" for frame in ours for name, value in list(frame.f_locals.items())
             if _shows_noise(value, noise)]
    assert not shown
    frames = traceback.TracebackException.from_exception(caught.value, capture_locals=True).stack
    text = "".join(shown for frame in frames if Path(frame.filename).is_relative_to(package)
                   for shown in frame.locals.values())
    keys = block_keys(np.random.default_rng(2), 2 * BLOCK)      # the twin of the step's stream: both steps' keys
    assert not [str(key) for key in keys if str(key) in text]


@pytest.mark.parametrize("kind, dtype", [("gaussian", torch.float32), ("gaussian", torch.float64),
                                         ("laplace", torch.float32)])
def test_no_python_frame_of_a_step_names_its_noise_at_any_line(kind, dtype):
    # A Ctrl-C lands at whatever line of Python code runs, torch's own included (some Tensor methods are Python
    # functions, whose frame names the tensor as self), and a traceback that shows locals prints that frame too. So
    # at no line of any Python frame, on the main thread or a block's, may a local be the noise or a piece of it.
    torch.manual_seed(0)
    model = nn.Linear(300, 4).to(dtype)
    step = DpSgdStep(model, loss_fn=_ce, max_grad_norm=1.0, noise_multiplier=1.0, expected_batch_size=4.0,
                     physical_batch_size=4, noise_rng=np.random.default_rng(2), noise=kind)
    x, y = torch.randn(4, 300, dtype=dtype), torch.randint(0, 4, (4,))
    unit, _ = _twin_noise(2, 1204, kind=kind, four_halved=dtype == torch.float64)
    noise, shown, ran = set(unit.tolist()), [], set()

    def trace(frame, event, arg):
        ran.add(frame.f_code.co_name)
        shown.extend(f"{frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}: {name}"
                     for name, value in list(frame.f_locals.items()) if _shows_noise(value, noise))
        return trace

    previous = sys.gettrace(), threading.gettrace()
    threading.settrace(trace)               # the blocks' threads start within the step
    sys.settrace(trace)
    try:
        step(x, y)
    finally:
        sys.settrace(previous[0])
        threading.settrace(previous[1])
    assert {"_add_noise", "_fill_block"} <= ran            # the trace reached both ends of the noise
    assert not shown


def _frames(tb):
    while tb is not None:
        yield tb.tb_frame
        tb = tb.tb_next


def test_a_run_resumed_from_the_streams_saved_state_draws_the_same_keys():
    run = PrivacyRandomness.reproducible(seed=0, run_id="r")
    block_keys(run.stream("noise"), 10)
    saved = run.state()
    after = block_keys(run.stream("noise"), 3 * BLOCK)
    resumed = PrivacyRandomness.from_root_hex(run.root_hex(), "reproducible")
    resumed.restore(saved)
    assert block_keys(resumed.stream("noise"), 3 * BLOCK) == after


@pytest.mark.parametrize("size, blocks", [(1, 1), (BLOCK, 1), (BLOCK + 1, 2), (3 * BLOCK, 3)])
def test_one_key_per_block_two_words_each_and_no_key_repeats(size, blocks):
    stream = np.random.default_rng(5)
    keys = block_keys(stream, size) + block_keys(stream, size)
    assert len(keys) == 2 * blocks and len(set(keys)) == len(keys)
    assert all(0 <= k < 2 ** 128 for k in keys)
    twin = np.random.default_rng(5)
    twin.bit_generator.random_raw(4 * blocks)
    assert stream.bit_generator.state == twin.bit_generator.state


@pytest.mark.parametrize("kind, moment", [("gaussian", lambda v: v.std()), ("laplace", lambda v: np.abs(v).mean())])
def test_blocks_are_unit_noise_and_uncorrelated(kind, moment):
    out = np.full(2 * BLOCK, np.nan)
    with ThreadPoolExecutor(2) as pool:
        for f in fill_noise(NoiseBuffer(out), block_keys(np.random.default_rng(0), len(out)), pool, kind=kind,
                            four_halved=False):
            f.result()
    assert not np.isnan(out).any()
    first, second = out[:BLOCK], out[BLOCK:]
    assert moment(first) == pytest.approx(1.0, rel=0.005) and moment(second) == pytest.approx(1.0, rel=0.005)
    assert abs(np.corrcoef(first, second)[0, 1]) < 0.005           # 2^20 pairs: standard error 0.001


def test_fill_noise_refuses_keys_that_do_not_cover_the_vector():
    with ThreadPoolExecutor(1) as pool, pytest.raises(ValueError, match="keys"):
        fill_noise(NoiseBuffer(np.empty(BLOCK + 1)), [1], pool, kind="gaussian", four_halved=False)


def test_parameters_of_two_dtypes_are_refused():
    model = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 2).double())
    with pytest.raises(ValueError, match="one dtype"):
        DpSgdStep(model, loss_fn=_ce, max_grad_norm=1.0, noise_multiplier=1.0, expected_batch_size=1.0,
                  physical_batch_size=1, noise_rng=np.random.default_rng(0))


@pytest.mark.parametrize("kind", ["gaussian", "laplace"])
@pytest.mark.parametrize("sigma, clip", [(0.5, 1e-3), (1e-3, 0.5)])
def test_a_small_noise_scale_still_adds_the_twins_noise(kind, sigma, clip):
    """Any sigma C > 0 adds noise: a small clip norm (C = 1e-3, sigma C = 5e-4) or a small multiplier leave p.grad
    = (clipped sum + sigma C draw) / q N, never the clipped sum alone (which would release it without privacy)."""
    torch.manual_seed(0)
    model = nn.Linear(300, 4).double()
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(5, 300, generator=g, dtype=torch.float64), torch.randint(0, 4, (5,), generator=g)
    step = DpSgdStep(model, loss_fn=_ce, max_grad_norm=clip, noise_multiplier=sigma, expected_batch_size=4.0,
                     physical_batch_size=5, noise_rng=np.random.default_rng(13), noise=kind)
    clipped = [t.clone() for t in step.clipped_sum(x, y)]
    step(x, y)
    noise, _ = _twin_noise(13, sum(p.numel() for p in step.params), kind=kind, four_halved=kind == "gaussian")
    start = 0
    for p, c in zip(step.params, clipped, strict=True):
        draw = torch.from_numpy(noise[start:start + p.numel()]).view(p.shape)
        start += p.numel()
        torch.testing.assert_close(p.grad, (c + sigma * clip * draw) / 4.0, rtol=1e-12, atol=1e-15)
        assert not torch.allclose(p.grad, c / 4.0, rtol=0, atol=1e-3 * sigma * clip)


def test_the_noise_covers_the_trainable_parameters_only():
    """A frozen layer of 1,101,000 weights beside 4,004 trainable ones: the step draws one block for the trainable
    coordinates (the stream moves by two words, not four), adds sigma C times it to their clipped sums, and leaves
    the frozen parameters without a gradient."""
    model = _wide_model()
    model[1].requires_grad_(False)
    x, y = _batch()
    step = DpSgdStep(model, loss_fn=_ce, max_grad_norm=0.5, noise_multiplier=0.7, expected_batch_size=4.0,
                     physical_batch_size=5, noise_rng=np.random.default_rng(17))
    assert step.params == [model[3].weight, model[3].bias]
    clipped = [t.clone() for t in step.clipped_sum(x, y)]
    step(x, y)
    noise, twin = _twin_noise(17, 4004)
    start = 0
    for p, c in zip(step.params, clipped, strict=True):
        draw = torch.from_numpy(noise[start:start + p.numel()]).view(p.shape)
        start += p.numel()
        torch.testing.assert_close(p.grad, (c.double() + 0.35 * draw).float() / 4.0, rtol=0, atol=0)
    assert model[1].weight.grad is None and model[1].bias.grad is None
    assert step.noise_rng.bit_generator.state == twin.bit_generator.state


@pytest.mark.parametrize("cores, expected", [(None, 1), (3, 3), (64, 8)])
def test_the_noise_threads_fall_back_to_the_cpu_count_without_an_affinity_mask(monkeypatch, cores, expected):
    """Where os.sched_getaffinity does not exist (macOS, Windows), the threads are the machine's cores, at least
    one (cpu_count may be unknown) and at most 8."""
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    assert noise_workers() == expected
