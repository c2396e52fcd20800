"""Finished runs are reused only under the evaluation settings they were evaluated with, also where the folder's
study.yaml is gone (`dpmed.resumption`): before, a rerun without study.yaml reused every run under another
confidence level, and the report headed their 95 % intervals "[50% CI]"."""

from __future__ import annotations

import shutil

from dpmed.cli import main


def test_without_study_yaml_each_record_says_how_it_was_evaluated(tiny_study, tiny_study_file, tmp_path, capsys):
    out = tmp_path / "out"
    shutil.copytree(tiny_study, out / "tiny")
    (out / "tiny" / "study.yaml").unlink()
    capsys.readouterr()
    assert main(["run", str(tiny_study_file), "--out", str(out), "--no-progress",
                 "--set", "evaluation.confidence=0.5"]) == 2
    err = capsys.readouterr().err
    assert "evaluation.confidence: 0.95 in the finished run, 0.5 now" in err and "Traceback" not in err
    assert main(["run", str(tiny_study_file), "--out", str(out), "--no-progress",
                 "--set", "evaluation.explanations={n_images: 4}"]) == 2
    assert "evaluation.explanations.method: (not set) in the finished run, gradcam now" in capsys.readouterr().err
    assert main(["run", str(tiny_study_file), "--out", str(out), "--no-progress"]) == 0     # as they were made
    assert "2 finished earlier" in capsys.readouterr().out and (out / "tiny" / "study.yaml").is_file()
