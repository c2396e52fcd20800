"""End to end through `main(argv)`: the tiny phantom study started from public pretraining (a second phantom) with
only its last block and head trained, and from a run's released model.pt. What the records say, that the frozen
layers of the released DP-SGD model are exactly the pretrained ones, and the report's section."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dpmed.cli import main
from dpmed.folders import StudyFolder
from dpmed.folders import file_sha256
from dpmed.outputs import rebuild_outputs
from dpmed.records import read_record
from dpmed.reporting.inputs import ReportInputs
from dpmed.reporting.pretraining_section import pretraining_section

PRETRAIN = """
pretrain:
  public: "a second phantom (seed 1): synthetic, of no person"
  data: {source: phantom, n_images: 160, seed: 1}
  training: {steps: 20, batch_size: 16}
"""


@pytest.fixture(scope="module")
def pretrained(tiny_text, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("pretrained")
    text = tiny_text.replace("name: tiny", "name: tiny-pretrained") + PRETRAIN + \
        "model: {name: small_cnn, trainable: {last_blocks: 1}}\n"
    (folder / "s.yaml").write_text(text)
    assert main(["run", str(folder / "s.yaml"), "--out", str(folder / "out"), "--no-progress"]) == 0
    return folder / "out" / "tiny-pretrained"


def test_every_run_records_the_pretrained_start(pretrained):
    records = [read_record(p) for p in sorted((pretrained / "runs").glob("*/run.json"))]
    assert len(records) == 2
    starts = {r.start.model_dump_json() for r in records}
    assert len(starts) == 1                                    # every arm starts from the same weights
    start = records[0].start
    weights = Path(start.weights)
    assert weights.parent.parent == pretrained / "pretrain" and "private" not in weights.parts
    assert start.sha256 == file_sha256(weights) == start.pretraining.sha256
    assert start.trainable == 1 and start.n_frozen > 0 and start.n_trainable > 0
    assert start.pretraining.public.startswith("a second phantom") and start.pretraining.steps == 20


def test_results_csv_says_where_each_run_started_and_what_trained(pretrained):
    """Before, only the report's cards said that a run started from public pretraining (what it learnt there is
    covered by no eps): a table merged from several studies could not tell such runs from runs trained from
    scratch, nor a head trained alone."""
    import pandas as pd

    frame = pd.read_csv(pretrained / "results.csv")
    start = read_record(next((pretrained / "runs").glob("*/run.json"))).start
    assert frame["start_sha256"].tolist() == [start.sha256] * 2
    assert frame["start_trained_on"].tolist() == [start.trained_on] * 2 and "second phantom" in start.trained_on
    assert frame["trainable"].astype(str).tolist() == ["1", "1"]


def test_frozen_layers_of_the_released_dp_model_are_the_pretrained_ones(pretrained):
    dp = next(r for r in (read_record(p) for p in (pretrained / "runs").glob("*/run.json")) if r.mechanism == "dp_sgd")
    released = torch.load(pretrained / "runs" / dp.run_id / "model.pt", weights_only=True)
    start = torch.load(dp.start.weights, weights_only=True)
    frozen = [k for k in released if k.startswith(("features.0.", "features.2.", "features.4."))]
    trained = [k for k in released if k.startswith(("features.6.", "head."))]
    assert frozen and all(torch.equal(released[k], start[k]) for k in frozen)
    assert trained and all(not torch.equal(released[k], start[k]) for k in trained)   # named, and moved


def test_the_report_section_says_pretraining_is_not_protected(pretrained):
    resolved, records = rebuild_outputs(pretrained)          # study.yaml with the pretrain key reads back
    html = pretraining_section(ReportInputs(resolved=resolved, records=records, comparisons=None,
                                            folder=StudyFolder(pretrained)))
    for text in ("Where the models started", "Not protected by any ε", "a second phantom (seed 1)",
                 "AUROC", "the head and the last 1 block(s)", "none found one",
                 "the near-duplicate check is a heuristic that misses some copies"):
        assert text in html, text
    assert pretraining_section(ReportInputs(resolved=resolved, records=[r.model_copy(update={"start": None})
                                                                        for r in records],
                                            comparisons=None, folder=StudyFolder(pretrained))) == ""


def test_a_released_model_starts_another_study(tiny_study, tiny_text, tmp_path, capsys):
    weights = tiny_study / "runs" / "base_seed0" / "model.pt"
    text = tiny_text.replace("name: tiny", "name: tiny-from-weights") + (
        f"model: {{name: small_cnn, weights: {weights}, weights_source: 'the tiny study, non-private arm', "
        "trainable: head}\n")
    (tmp_path / "s.yaml").write_text(text)
    assert main(["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    record = read_record(tmp_path / "out" / "tiny-from-weights" / "runs" / "dp_eps8_C1_seed0" / "run.json")
    assert record.start.sha256 == file_sha256(weights) and record.start.weights == str(weights)
    assert record.start.trained_on == "the tiny study, non-private arm" and record.start.n_trainable == 130
    report = (tmp_path / "out" / "tiny-from-weights" / "report.html").read_text()
    assert "tiny-from-weights" in report
    # dpmed plan checks the file as run does: a text file named as weights is refused before anything trains
    (tmp_path / "notes.txt").write_text("not weights")
    bad = text.replace(str(weights), str(tmp_path / "notes.txt"))
    (tmp_path / "bad.yaml").write_text(bad.replace("name: tiny-from-weights", "name: tiny-bad-weights"))
    assert main(["plan", str(tmp_path / "bad.yaml"), "--out", str(tmp_path / "out"), "--no-estimate"]) == 2
    assert f"{tmp_path / 'notes.txt'} is not a torch state dict" in capsys.readouterr().err
    # the study.yaml it wrote reads back (its weights path through JSON): status, report and a rerun work
    study_dir = str(tmp_path / "out" / "tiny-from-weights")
    assert main(["status", study_dir]) == 0 and main(["report", study_dir]) == 0
    assert main(["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "out"), "--no-progress"]) == 0


def test_a_rerun_that_starts_otherwise_is_refused_not_mixed(pretrained, capsys):
    """The finished runs started from the pretrained weights with one block trained; the same folder with the head
    alone trained would reuse them in one table: refused, naming the runs, before anything trains. The refused
    settings are not written to the folder's study.yaml either: it went on saying the head alone trained, of runs
    that trained a block too, and `dpmed report` printed that in report.html."""
    study_file = pretrained.parent.parent / "s.yaml"
    resolved = (pretrained / "study.yaml").read_bytes()
    code = main(["run", str(study_file), "--out", str(pretrained.parent), "--no-progress",
                 "--set", "model.trainable=head"])
    assert code != 0
    err = capsys.readouterr().err
    assert "started from other weights than this study now does" in err and "base_seed0" in err
    assert (pretrained / "study.yaml").read_bytes() == resolved


def test_other_pretraining_settings_are_refused_before_they_train(pretrained, capsys, monkeypatch):
    """Before: the new pretraining trained (minutes on real data), and only then were the finished runs found to
    have started from other weights."""
    def no_training(*args, **kwargs):
        raise AssertionError("pretrained although the finished runs would refuse the weights")

    monkeypatch.setattr("dpmed.pretraining.train", no_training)
    study_file = pretrained.parent.parent / "s.yaml"
    code = main(["run", str(study_file), "--out", str(pretrained.parent), "--no-progress",
                 "--set", "pretrain.seed=5"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "started from other weights than this study now does (public pretraining on phantom not yet trained" in err
    assert "base_seed0" in err and not list((pretrained / "pretrain").glob("*/pretrain.json"))[1:]


def test_the_study_report_carries_the_pretraining_section(pretrained):
    """The section is one of the report's SECTIONS, so report.html of a pretrained study says what was learnt
    without privacy."""
    from dpmed.reporting.page import SECTIONS

    assert pretraining_section in SECTIONS


def test_each_privacy_card_names_the_start_its_eps_does_not_cover(pretrained):
    """A reader who looks only at one run's card still learns that the model did not start from nothing."""
    from dpmed.reporting.privacy_section import privacy_cards

    resolved, records = rebuild_outputs(pretrained)
    html = privacy_cards(ReportInputs(resolved=resolved, records=records, comparisons=None,
                                      folder=StudyFolder(pretrained)))
    note = "Started from public pretraining on phantom"       # on the DP-SGD card; the non-private one has no ε
    assert html.count(note) == 1 and html.count("what the model learnt there is not covered by this ε") == 1
    assert html.index(note) > html.index("<h3>dp_eps8_C1_seed0</h3>")
    fresh = [r.model_copy(update={"start": None}) for r in records]          # random initialisation: no such note
    assert "Started from" not in privacy_cards(ReportInputs(resolved=resolved, records=fresh, comparisons=None,
                                                            folder=StudyFolder(pretrained)))


def test_plan_says_where_the_arms_start(pretrained, capsys):
    """`dpmed plan` of a study with public pretraining announces the stage (what, how long, declared public, not
    covered by eps) before anything trains."""
    study_file = pretrained.parent.parent / "s.yaml"
    assert main(["plan", str(study_file), "--out", str(pretrained.parent), "--no-estimate"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("start: "))
    for text in ("public pretraining on phantom (20 steps at batch 16, without privacy",
                 "declared public: a second phantom (seed 1)", "the head and the last 1 block(s) train",
                 "not covered by any eps"):
        assert text in line, line
