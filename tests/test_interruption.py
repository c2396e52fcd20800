"""A Ctrl-C that Python lost is raised again at the next training step.

Before: about one Ctrl-C in ten of an in-process `dpmed run` on a busy 2-core machine was lost (its KeyboardInterrupt
raised inside torch's call back into Python and cleared there) and the run trained on; a CI run saw it as
test_a_second_run_on_the_same_folder_refuses_naming_the_first timing out. Simulated here by a forward hook that
catches the KeyboardInterrupt its Ctrl-C raises, as the extension did."""

from __future__ import annotations

import signal

import pytest
import torch

from dpmed.config import TrainingConfig
from dpmed.data.synthetic import make_phantom
from dpmed.interruption import check, interruptible
from dpmed.models import build_model
from dpmed.randomness import PrivacyRandomness
from dpmed.training import DpSgdPlan, train

CFG = TrainingConfig(epochs=3, batch_size=16)


def _losing_a_ctrl_c_at_call(model: torch.nn.Module, call: int) -> list[int]:
    """A forward hook that sends this process Ctrl-C at its ``call``-th forward pass and loses the interrupt."""
    calls, lost = [0], []

    def hook(module, args):
        calls[0] += 1
        if calls[0] == call:
            try:
                signal.raise_signal(signal.SIGINT)
                sum(range(10))                    # Python code after the signal: where the handler runs
            except KeyboardInterrupt:
                lost.append(calls[0])
    model.register_forward_pre_hook(hook)
    return lost


@pytest.mark.parametrize("dp", [None, DpSgdPlan(noise_multiplier=1.0, max_grad_norm=1.0, sample_rate=0.2, steps=20)],
                         ids=["non-private", "DP-SGD"])
def test_a_lost_ctrl_c_stops_training_at_the_next_step(dp):
    ds = make_phantom(n_images=100, image_size=16, seed=0)
    torch.manual_seed(0)
    model = build_model("small_cnn", in_channels=1, num_outputs=2, image_size=16)
    lost = _losing_a_ctrl_c_at_call(model, 3)
    with interruptible():
        with pytest.raises(KeyboardInterrupt):
            train(model, ds.train, ds.task, CFG, seed=0, dp=dp, randomness=PrivacyRandomness.secure(), progress=False)
    assert lost == [3]                            # the interrupt was lost where it landed, and raised again after


def test_the_record_of_a_signal_ends_with_the_block_and_the_handlers_come_back():
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with interruptible() as received:
        check()                                   # nothing received: nothing raised
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGTERM)
            sum(range(10))
        assert received == [signal.SIGTERM]
        with pytest.raises(KeyboardInterrupt):
            check()
    check()
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_a_block_inside_another_changes_nothing_and_keeps_the_outer_record():
    """The command's block holds run_study's: the inner one's exit cleared the record the command reads to say
    whether SIGTERM stopped it."""
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with interruptible() as received:
        handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
        with pytest.raises(KeyboardInterrupt):
            with interruptible((signal.SIGINT,)) as inner:
                assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers
                assert inner is received           # the code inside reads the signals the outer block took
                signal.raise_signal(signal.SIGTERM)
                sum(range(10))
        assert received == [signal.SIGTERM]
        assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_a_block_in_another_thread_sets_no_handler_and_records_nothing():
    """run_study called from a worker thread (a notebook's executor, a web service): only the main thread may set
    signal handlers, so the block must leave them alone there instead of failing the study with a ValueError."""
    import threading

    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    seen = []

    def study():
        try:
            with interruptible() as received:
                seen.append((list(received), signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)))
                check()
        except BaseException as exc:   # noqa: BLE001 - handed to the main thread's assertion
            seen.append(exc)

    worker = threading.Thread(target=study)
    worker.start()
    worker.join()
    assert seen == [([], *before)]
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
