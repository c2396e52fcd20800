"""`torch_threads`: the run's thread count while it trains, and the caller's back afterwards, also where threads of
one process train runs at once (the count is the process's, so their blocks overlap)."""

from __future__ import annotations

import subprocess
import sys

import torch

from dpmed.training import torch_threads

# Two runs in two threads, the second entering while the first trains and leaving after it, as two run_study calls
# of a web service would; in a fresh interpreter, whose main thread has run no parallel work (as in a notebook).
OVERLAPPING = """
import threading
import torch
from dpmed.training import torch_threads

torch.set_num_threads(2)
first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()

def first():
    with torch_threads(1):
        first_in.set()
        second_in.wait(30)
    first_out.set()

def second():
    first_in.wait(30)
    with torch_threads(3):
        second_in.set()
        first_out.wait(30)

threads = [threading.Thread(target=first), threading.Thread(target=second)]
for t in threads:
    t.start()
for t in threads:
    t.join(60)
print(torch.get_num_threads())
"""


def test_the_callers_count_comes_back_after_overlapping_runs():
    """Each block saved the count it found and restored it: the second found the first's count and restored that
    after the first had left, so the caller's own setting was lost (1 here instead of 2)."""
    done = subprocess.run([sys.executable, "-c", OVERLAPPING], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "2"


def test_nested_blocks_give_back_the_outer_count():
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        with torch_threads(1):
            with torch_threads(3):
                with torch_threads(4):
                    assert torch.get_num_threads() == 4
                assert torch.get_num_threads() == 3
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_blocks_that_end_out_of_order_leave_the_count_of_the_last_still_open():
    """Runs of two threads end in any order: with counts 1, 3, 1 open, the first ending leaves 3 and 1 open (the
    count is the last's, 1), not 3 alone, as removing the value 1 instead of the block would."""
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        first, second, third = torch_threads(1), torch_threads(3), torch_threads(1)
        for block in (first, second, third):
            block.__enter__()
        first.__exit__(None, None, None)
        assert torch.get_num_threads() == 1
        third.__exit__(None, None, None)
        assert torch.get_num_threads() == 3
        second.__exit__(None, None, None)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
