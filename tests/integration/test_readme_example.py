"""The README's Python example runs as written (on a tiny version of the quickstart) and the columns it prints exist.

The snippet is read from README.md, so the documentation cannot drift from the API unnoticed."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

import dpmed

ROOT = Path(__file__).resolve().parents[2]
TINY = {"data.n_images": 240, "data.image_size": 32, "training.epochs": 1, "evaluation.bootstrap_resamples": 50}


def _python_example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), flags=re.S)
    example = next(b for b in blocks if "run_study" in b)
    return example


def test_readme_python_example_runs_and_its_columns_exist(tmp_path, monkeypatch, capsys):
    code = _python_example()
    assert "dpmed.load_study(" in code and "dpmed.read_results(" in code
    monkeypatch.chdir(ROOT)
    load = dpmed.load_study
    # The same call as in the README, made small: tiny overrides and a temporary output folder.
    monkeypatch.setattr(dpmed, "load_study", lambda path=None, overrides=None: load(path, {**(overrides or {}),
                                                                                           **TINY}), raising=False)
    code = code.replace('out="results"', f'out={str(tmp_path)!r}, progress=False')
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    frame = namespace["frame"]
    assert isinstance(frame, pd.DataFrame) and len(frame) == 4
    shown = re.search(r"columns = \[(.*?)\]", code)
    assert shown is not None
    columns = re.findall(r'"([^"]+)"', shown.group(1))
    assert {"epsilon", "delta", "accountant", "test_auroc"} <= set(columns) <= set(frame.columns)
    header = capsys.readouterr().out.splitlines()[0].split()
    assert header == columns           # every column printed: a plain print elided delta and the accountant
    assert (tmp_path / "quickstart" / "report.html").is_file()
