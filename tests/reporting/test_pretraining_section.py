"""The report's section on where the models started (`dpmed.reporting.pretraining_section`), from typed records: each
fact of the pretraining and of the start reaches its row, starts are told apart by what trains as well as by the
file, and the warnings stand where the eps does not cover what the weights learnt. (The end-to-end test,
tests/integration/test_pretrain_run.py, checks the section of a real study for a few phrases only.)"""

from __future__ import annotations

import html
import re

import pytest

from dpmed.config import TrainingConfig
from dpmed.folders import StudyFolder
from dpmed.records import PretrainRecord, StartRecord
from dpmed.reporting.inputs import ReportInputs
from dpmed.reporting.pretraining_section import pretraining_section

CHECKS = {"identical files": "sha256 of every file", "patient ids": "the ids of both sets",
          "near-duplicate images": "a perceptual hash within 30 bits"}


def _pretraining(**changes) -> PretrainRecord:
    fields = dict(dataset="hospital-b", task="binary", label_names=("normal", "pneumonia"),
                  public="released by hospital B under CC-BY", n_train=1234, n_val=56, n_test=0,
                  data={"format": "folders", "cohort": {"description": "adults only"}}, image_shape=(1, 64, 48),
                  model="small_cnn", training=TrainingConfig(steps=300, batch_size=32, learning_rate=0.0005),
                  seed=7, steps=300, seconds=41.6, key="k", weights="/cache/pre.pt", sha256="ab" * 32,
                  validation_auroc=0.98765, overlap_checks=CHECKS, near_duplicate_bits=30)
    return PretrainRecord(**(fields | changes))


def _start(**changes) -> StartRecord:
    fields = dict(weights="/cache/pre.pt", sha256="ab" * 32, trained_on="hospital B's films", trainable=2,
                  n_trainable=12_345, n_frozen=678_901, loaded=10, pretraining=_pretraining())
    return StartRecord(**(fields | changes))


def _text(page: str) -> str:
    """``page`` as a reader sees it: tags dropped, entities unescaped, white space single."""
    text = re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", page))).strip()
    return re.sub(r"\( | (?=[),.;:])", lambda m: m.group(0).strip(), text)      # "( x )" where a tag closed


def _rows(page: str) -> dict[str, str]:
    """The pretraining table: each row's heading and the text of its cell."""
    return {th: _text(td) for th, td in re.findall(r'<tr><th scope="row">(.*?)</th><td>(.*?)</td></tr>', page, re.S)}


@pytest.fixture
def section(make_record, make_resolved, tmp_path):
    """The section as a reader sees it (``raw=True``: its HTML) for runs given as (run id, start) pairs."""
    def render(*runs, raw: bool = False) -> str:
        records = [make_record(run_id, "arm").model_copy(update={"start": start}) for run_id, start in runs]
        resolved = make_resolved(records, label_names=("normal", "pneumonia"))
        page = pretraining_section(ReportInputs(resolved=resolved, records=records, comparisons=None,
                                                folder=StudyFolder(tmp_path)))
        return page if raw else _text(page)
    return render


def test_each_fact_of_the_pretraining_reaches_its_row(section):
    page = section(("a_seed0", _start()), raw=True)
    assert "Not protected by any ε." in _text(page)
    rows = _rows(page)
    assert rows["public data"] == ("hospital-b (folders; adults only): 1234 training, 56 validation images, "
                                   "shape 1x64x48, task binary (normal, pneumonia)")
    assert rows["declared public because"] == "released by hospital B under CC-BY"
    assert rows["training"] == "small_cnn, 300 steps (300 steps) at batch 32, adam lr 0.0005, seed 7, no privacy; 42 s"
    assert rows["result"] == "AUROC 0.988 on the public validation images"
    overlap = rows["overlap with the private data"]
    assert all(f"{name}: {how}" in overlap for name, how in CHECKS.items()), overlap
    assert rows["weights"] == f"/cache/pre.pt sha256 {'ab' * 32}"


def test_a_pretraining_set_in_epochs_without_a_defined_auroc_says_both(section):
    pretraining = _pretraining(training=TrainingConfig(epochs=4, batch_size=32), steps=160, validation_auroc=None,
                               data={"generator": "phantom"})
    rows = _rows(section(("a_seed0", _start(pretraining=pretraining)), raw=True))
    assert "4 epochs (160 steps) at batch 32" in rows["training"]
    assert rows["result"] == "AUROC undefined on the public validation images"
    assert rows["public data"].startswith("hospital-b (phantom): 1234 training")


def test_the_start_says_where_each_run_began_and_what_trained(section):
    text = section(("a_seed0", _start()), ("b_seed0", _start()))
    assert text.count("Runs a_seed0, b_seed0: started from /cache/pre.pt") == 1           # one start, both runs
    assert f"(sha256 {'ab' * 32}), trained on: hospital B's films." in text
    assert "Trained: the head and the last 2 block(s), 12,345 parameters; 678,901 frozen" in text


def test_the_same_file_with_other_layers_trained_is_another_start(section):
    text = section(("a_seed0", _start()), ("b_seed0", _start(trainable="head", n_trainable=130)))
    assert "Runs a_seed0: started from" in text and "Runs b_seed0: started from" in text
    assert "Trained: the head only, 130 parameters" in text


def test_a_head_left_at_its_initialisation_says_why(section):
    kept = _start(kept=("head.weight", "head.bias"))
    assert "head left at its initialisation (head.weight, head.bias: another shape in the file)" in \
        section(("a_seed0", kept))
    other = kept.model_copy(update={"pretraining": _pretraining(label_names=("benign", "malignant"))})
    assert ("(head.weight, head.bias: pretrained for benign, malignant, not this study's normal, pneumonia)"
            in section(("a_seed0", other)))
    assert "head left" not in section(("a_seed0", _start()))


def test_a_head_pretrained_for_the_same_classes_in_another_order_says_it_was_reordered(section):
    reordered = _start(head_rows=(1, 0), pretraining=_pretraining(label_names=("pneumonia", "normal")))
    text = section(("a_seed0", reordered))
    assert ("the pretrained head's outputs taken in this study's label order (pretrained as pneumonia, normal)"
            in text and "head left" not in text)
    assert "label order" not in section(("a_seed0", _start()))


def test_weights_from_a_file_warn_that_no_eps_covers_them_and_pretraining_gets_its_own_section(section):
    warning = "What these weights learnt before this study is not covered by any ε"
    from_file = section(("a_seed0", _start(pretraining=None)))
    assert warning in from_file and "Public pretraining" not in from_file
    pretrained = section(("a_seed0", _start()))
    assert warning not in pretrained and "Public pretraining" in pretrained


def test_random_weights_trained_in_part_are_shown_and_random_weights_trained_whole_are_not(section):
    part = section(("a_seed0", StartRecord(trainable="head", n_trainable=130, n_frozen=5_000)))
    assert "started from random initialisation. Trained: the head only, 130 parameters; 5,000 frozen" in part
    assert "not covered by any ε" not in part and "Public pretraining" not in part
    assert section(("a_seed0", None)) == ""


def test_one_epoch_and_one_step_read_in_the_singular(section):
    """The report read "1 epochs (1 steps)"."""
    pretraining = _pretraining(training=TrainingConfig(epochs=1, batch_size=32), steps=1, validation_auroc=None,
                               data={"generator": "phantom"})
    rows = _rows(section(("a_seed0", _start(pretraining=pretraining)), raw=True))
    assert "1 epoch (1 step) at batch 32" in rows["training"]


def test_a_pretraining_of_auto_length_says_what_auto_is(section):
    """The default length (training.epochs: auto) read "auto epochs (500 steps)"."""
    pretraining = _pretraining(training=TrainingConfig(batch_size=32), steps=500)
    rows = _rows(section(("a_seed0", _start(pretraining=pretraining)), raw=True))
    assert "auto: at least 10 epochs and 500 steps (500 steps) at batch 32" in rows["training"]
