"""A run of the reproducible mode (privacy randomness from the published seed: not DP) never becomes part of a
secure study (`dpmed.resumption`, `dpmed.run`): not as a finished run reused, nor as an unfinished attempt whose key
a secure rerun continues. A study with DP-SGD arms would also see other settings (its released count is drawn
anew), so these use a local-DP arm alone, where the mode is the only difference."""

from __future__ import annotations

import numpy as np

import dpmed.run
from dpmed.cli import main
from dpmed.folders import read_arrays

ARMS = """  - {name: base, mechanism: none}
  - {name: dp, mechanism: dp_sgd, target_epsilon: 8}
"""


def _studies(tiny_text: str) -> tuple[str, str]:
    """The tiny study (reproducible mode) with a local-DP arm alone, and the same in secure mode."""
    assert ARMS in tiny_text
    reproducible = tiny_text.replace(ARMS, "  - {name: ldp, mechanism: pixel_laplace, scale: 0.5}\n")
    return reproducible, reproducible.replace("privacy_randomness: reproducible\n", "")


def _run(study, out) -> int:
    return main(["run", str(study), "--out", str(out), "--no-progress"])


def test_a_finished_reproducible_run_is_not_reused_by_a_secure_study(tmp_path, capsys, tiny_text):
    reproducible, secure = _studies(tiny_text)
    study, out = tmp_path / "s.yaml", tmp_path / "out"
    study.write_text(reproducible)
    assert _run(study, out) == 0
    before = {p: p.read_bytes() for p in out.glob("tiny/runs/*/run.json")}
    study.write_text(secure)
    capsys.readouterr()
    assert _run(study, out) == 2
    assert "privacy_randomness: reproducible in the finished run, secure now" in capsys.readouterr().err
    assert before and before == {p: p.read_bytes() for p in out.glob("tiny/runs/*/run.json")}


def test_an_unfinished_reproducible_attempt_lends_its_noise_to_no_secure_rerun(tmp_path, monkeypatch, tiny_text):
    """The attempt's key is kept for a resumed run of the same settings and mode only: continued in secure mode,
    the local-DP noise would still be the published seed's."""
    reproducible, secure = _studies(tiny_text)
    study = tmp_path / "s.yaml"
    study.write_text(reproducible)
    assert _run(study, tmp_path / "reference") == 0

    def stopped(*args, **kwargs):
        raise RuntimeError("stopped in training (simulated)")
    with monkeypatch.context() as patch:
        patch.setattr(dpmed.run, "train", stopped)
        assert _run(study, tmp_path / "out") == 1
    study.write_text(secure)
    assert _run(study, tmp_path / "out") == 0
    published, secure = (read_arrays(root / "tiny" / "runs" / "ldp_b0.5_seed0" / "ldp_examples.npz")["perturbed"]
                         for root in (tmp_path / "reference", tmp_path / "out"))
    assert not np.array_equal(published, secure)
