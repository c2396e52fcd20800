"""The benchmark harnesses still run against today's API: a harness that fails on every engine measures nothing,
and the DP-step one did (it still passed the step a torch generator after the noise moved to a secret numpy
stream). One step of a small model per engine; nothing here asserts a speed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

_BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def test_dp_step_runs_every_engine(tmp_path):
    out = tmp_path / "steps.json"
    done = subprocess.run([sys.executable, str(_BENCHMARKS / "dp_step.py"), "--models", "small_cnn", "--sizes", "16x1",
                           "--batch", "8", "--steps", "1", "--warmup", "0", "--threads", "1", "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [r["engine"] for r in rows] == ["nonprivate", "opacus-hooks", "opacus-ghost", "dpmed"]
    for row in rows:
        assert "error" not in row, row
        assert row["median_ms"] > 0 and row["parameters"] > 0 and row["torch_threads"] == 1


def _ablation():
    sys.path.insert(0, str(_BENCHMARKS))
    try:
        import utility_ablation
    finally:
        sys.path.remove(str(_BENCHMARKS))
    return utility_ablation


def test_ablation_variants_add_one_part_each_up_to_augment_and_scatternet_swaps_the_model_of_schedule():
    variants = _ablation().VARIANTS
    chain = ["shipped", "steps", "ema", "schedule", "ws", "augment"]
    for before, after in zip(chain, chain[1:]):
        assert variants[after][:-1] == variants[before], after
    for name in ("scatternet-linear", "scatternet-cnn"):
        assert variants[name] == [*variants["schedule"], f"model.name={name.replace('-', '_')}"]


def test_ablation_base_overrides_come_before_each_variants_own(monkeypatch, tmp_path):
    """`--set` starts every variant from another recipe; the variant's own overrides come later, so they win."""
    ablation = _ablation()
    calls = []
    monkeypatch.setattr(ablation.subprocess, "run", lambda cmd, check: calls.append(cmd))
    monkeypatch.setattr(sys, "argv", ["utility_ablation.py", "study.yaml", "--out", str(tmp_path), "--seeds", "0",
                                      "--variants", "schedule", "--set", "model.name=small_cnn",
                                      "--set", "training.epochs=10"])
    monkeypatch.setattr(ablation, "read_variant", lambda out, name: {})
    ablation.main()
    sets = [calls[0][i + 1] for i, a in enumerate(calls[0]) if a == "--set"]
    assert sets.index("model.name=small_cnn") < sets.index("training.epochs=10") < sets.index("training.epochs=auto")
    assert sets[-3:] == ablation.VARIANTS["schedule"]
