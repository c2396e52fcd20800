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
