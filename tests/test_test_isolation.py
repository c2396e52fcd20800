"""What one test does to the process's global state does not reach the next: a test's result must not depend on
which tests ran before it. Checked in a small session run under this suite's own conftest."""

from __future__ import annotations

from pathlib import Path

CONFTEST = Path(__file__).with_name("conftest.py")


def test_a_test_that_seeds_the_global_generators_leaves_the_next_test_their_state(pytester):
    """The first test seeds and draws from torch's, numpy's and Python's global generators; the second finds each in
    the state it had before the first ran."""
    pytester.makeconftest(CONFTEST.read_text(encoding="utf-8"))
    pytester.makepyfile(test_pair='''
        import random

        import numpy as np
        import torch

        BEFORE = torch.get_rng_state(), np.random.get_state(), random.getstate()


        def test_seeds_and_draws():
            torch.manual_seed(1)
            np.random.seed(1)
            random.seed(1)
            torch.rand(3), np.random.rand(3), random.random()


        def test_finds_the_state_from_before():
            assert torch.equal(torch.get_rng_state(), BEFORE[0])
            state = np.random.get_state()
            assert state[0] == BEFORE[1][0] and np.array_equal(state[1], BEFORE[1][1]) and state[2:] == BEFORE[1][2:]
            assert random.getstate() == BEFORE[2]
    ''')
    pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=2)
