"""What `dpmed.outputs` makes of a run's private audit record (audit.json) for private/report.html: each record read
and checked once, a damaged one named once on its run's card while the rest is written, a statement that an older
dpmed wrote without the card's "not DP" label given it, and the joint level of exactly the bounds shown."""

from __future__ import annotations

import csv
import html
import io
import json
import re

import pytest

from dpmed.audit import AUDIT_CITATION, AuditRecord
from dpmed.folders import StudyFolder, write_json_atomic
from dpmed.mechanisms.cards import label_randomness
from dpmed.outputs import write_outputs

BOUND = ("empirical lower bound eps >= 0.21 at delta = 1e-5, add/remove one canary (an image that is its own patient) "
         "(one-run audit, 98 mislabelled canaries, 95% confidence; 40 of 44 guesses correct)")
CONSISTENT = (": consistent (a lower bound can refute the claim, not prove it; one far below it is no evidence that "
              "the run is more private than claimed)")
TERMS = ("PLD, add/remove one patient; training alone: the card's 0.9995 adds 0.01331 for the released training-set "
         "size")
# the statement a reproducible-mode run's audit.json kept before its claim carried the card's label, and the older
# one from before the claim named its delta, accountant and neighbours
UNLABELLED = f"{BOUND}; the accountant claims eps = 0.9862 (the same delta, {TERMS}){CONSISTENT}"
UNLABELLED_BARE = f"{BOUND}; the accountant claims eps = 0.986{CONSISTENT}"
NO_CLAIM = f"{BOUND}; no eps is claimed: the run has no privacy guarantee, and a small bound is no evidence of privacy"


def _audit(statement: str = NO_CLAIM, *, bound: float | None = 0.21, confidence: float = 0.95,
           claimed: float | None = None) -> AuditRecord:
    return AuditRecord(n_canaries=98, kind="mislabelled", n_included=50, n_guesses=44, n_correct=40, k_positive=22,
                       k_negative=22, epsilon_lower_bound=bound, confidence=confidence, delta=1e-5,
                       claimed_epsilon=claimed, consistent_with_claim=None if claimed is None else True,
                       method=None if bound is None else "test", citation=AUDIT_CITATION, statement=statement,
                       canary_source="training split", private="private")


@pytest.fixture
def private_report(tmp_path, make_resolved):
    """Writes each run's audit.json (an `AuditRecord`, or the bytes given), then the study's outputs; returns
    private/report.html as a reader sees it."""

    def write(records, audits: dict) -> str:
        folder = StudyFolder(tmp_path)
        for run_id, audit in audits.items():
            path = folder.run(run_id).audit
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(audit, AuditRecord):
                write_json_atomic(path, audit.model_dump(mode="json"))
            else:
                path.write_bytes(audit)
        write_outputs(folder, make_resolved(records), records)
        page = folder.private_report.read_text()
        return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", page)))

    write.folder = StudyFolder(tmp_path)
    return write


def _partial(key: str, value=None) -> bytes:
    """A record with ``key`` missing (``value`` None) or set to ``value``."""
    fields = _audit().model_dump(mode="json")
    if value is None:
        del fields[key]
    else:
        fields[key] = value
    return json.dumps(fields).encode()


@pytest.mark.parametrize("damaged, reason", [
    (_audit().model_dump_json().encode()[:60], "Invalid JSON: EOF while parsing"),
    (b"\xff\xfe" + _audit().model_dump_json().encode(), "Invalid JSON: expected value at line 1 column 1"),
    (b"[]", "Input should be an object"),
    (_partial("epsilon_lower_bound"), "epsilon_lower_bound: Field required"),
    (_partial("confidence", "high"), "confidence: Input should be a valid number"),
    (_partial("statement", 3), "statement: Input should be a valid string"),
])
def test_a_damaged_audit_record_is_named_once_on_its_card_and_the_rest_is_written(private_report, make_record,
                                                                                   damaged, reason):
    """A record is checked whole, as the study's log checks it: a file missing a key, or with one of another type, is
    not shown in part as if it were a record; one line names the file and what is wrong."""
    records = [make_record("np_seed0", "np"), make_record("np_seed1", "np", seed=1)]
    text = private_report(records, {"np_seed0": damaged, "np_seed1": _audit()})
    path = private_report.folder.run("np_seed0").audit
    assert text.count(str(path)) == 1
    assert f"{path} cannot be read ({reason}" in text and "so it is left out of this report" in text
    assert text.count(NO_CLAIM) == 1                     # the other run's statement, not the damaged one's
    assert "Read together" not in text                   # one bound shown: nothing to read together


def test_an_audit_record_that_is_a_folder_is_named_once_and_a_missing_one_not_at_all(private_report, make_record):
    records = [make_record("np_seed0", "np"), make_record("np_seed1", "np", seed=1), make_record("np_seed2", "np")]
    private_report.folder.run("np_seed0").audit.mkdir(parents=True)
    text = private_report(records, {"np_seed1": _audit()})
    path = private_report.folder.run("np_seed0").audit
    assert text.count(str(path)) == 1 and re.search(rf"{re.escape(str(path))} cannot be read \(\w+Error: ", text)
    assert "np_seed2" not in text                        # no audit.json, no statistics: no card


def test_a_training_statistics_file_that_is_a_folder_is_named_once(private_report, make_record):
    """Before, the line read "PATH cannot be read (IsADirectoryError: [Errno 21] Is a directory: 'PATH')"."""
    records = [make_record("np_seed0", "np")]
    private_report.folder.run("np_seed0").statistics.mkdir(parents=True)
    text = private_report(records, {})
    path = private_report.folder.run("np_seed0").statistics
    assert text.count(str(path)) == 1 and f"{path} cannot be read (IsADirectoryError: Is a directory)" in text


def test_training_statistics_of_another_type_are_named_and_no_private_report_is_made_without_private_items(
        private_report, make_record):
    """training_metrics must be an object; a list there is named as such (not rendered as if it were metrics). A
    study whose runs keep nothing private gets no private report at all."""
    records = [make_record("np_seed0", "np")]
    path = private_report.folder.run("np_seed0").statistics
    path.parent.mkdir(parents=True)
    path.write_text('{"training_metrics": [0.5, 0.7]}')
    text = private_report(records, {})
    assert f"{path} cannot be read (TypeError: training_metrics is a list), so it is left out of this report" in text
    path.unlink()
    private_report.folder.private_report.unlink()
    # the fixture reads private/report.html, which is not written
    with pytest.raises(FileNotFoundError, match=re.escape(str(private_report.folder.private_report))):
        private_report(records, {})


@pytest.mark.parametrize("stored, shown", [
    (UNLABELLED, f"claims eps = 0.9862 (the same delta, {TERMS}; not DP: seed known){CONSISTENT}"),
    (UNLABELLED_BARE, f"claims eps = 0.986 (not DP: seed known){CONSISTENT}"),
    (UNLABELLED.replace(CONSISTENT, ": inconsistent with the claimed eps at 95% confidence"),
     f"claims eps = 0.9862 (the same delta, {TERMS}; not DP: seed known): inconsistent with the claimed eps"),
])
def test_an_older_audit_record_of_a_run_whose_card_is_not_dp_shows_its_claim_with_the_label(
        private_report, make_record, stored, shown):
    """Before the audit's claim carried the card's label, a reproducible-mode run's audit.json stated the accounted
    eps bare; the private report took that statement as it was, the one place that showed the eps unlabelled."""
    dp = make_record("dp_seed0", "dp", "dp_sgd", eps=1.0)
    reproducible = dp.model_copy(update={"privacy": label_randomness(dp.privacy, "reproducible")})
    text = private_report([reproducible], {"dp_seed0": _audit(stored, claimed=0.9862)})
    assert shown in text
    assert text.count("not DP: seed known") == 1


def test_an_audit_statement_that_has_its_label_or_needs_none_is_shown_as_written(private_report, make_record):
    dp = make_record("dp_seed0", "dp", "dp_sgd", eps=1.0)
    reproducible = make_record("dp_seed1", "dp", "dp_sgd", eps=1.0, seed=1)
    reproducible = reproducible.model_copy(update={"privacy": label_randomness(reproducible.privacy, "reproducible")})
    labelled = UNLABELLED.replace("size)", "size; not DP: seed known)")
    text = private_report([dp, reproducible], {"dp_seed0": _audit(UNLABELLED, claimed=0.9862),
                                               "dp_seed1": _audit(labelled, claimed=0.9862)})
    assert UNLABELLED in text and labelled in text and text.count("not DP: seed known") == 1


def test_the_joint_level_counts_the_runs_that_state_a_bound_with_or_without_a_claim(private_report, make_record):
    """A run without a claim (no privacy, or shuffled batches) still states a lower bound at a confidence: that bound
    is read with the others. A run whose draw found no canary states none, and is no part of the joint statement."""
    records = [make_record("dp_seed0", "dp", "dp_sgd", eps=1.0), make_record("np_seed0", "np"),
               make_record("np_seed1", "np", seed=1)]
    unaudited = "no audit bound: none of the training patients was drawn as a canary source"
    text = private_report(records, {
        "dp_seed0": _audit(UNLABELLED.replace("0.9862", "0.99"), claimed=0.99, confidence=0.95),
        "np_seed0": _audit(NO_CLAIM, confidence=0.99),
        "np_seed1": _audit(unaudited, bound=None, confidence=0.9)})
    assert ("2 audit bounds, each at its own confidence (95%, 99%); 1 audited run states no bound and is not "
            "counted. Read together, all 2 bounds hold with probability at least 94% (union bound)") in text
    assert unaudited in text


def test_a_run_trained_beside_others_shows_its_seconds_in_the_private_report_only(tmp_path, make_record,
                                                                                  make_resolved, make_explanations):
    """A run trained while others of the study shared the machine (--workers, Ray) took as long as their load, a
    DP-SGD run's included, made it: results.csv and the report hold none of its seconds, the private report holds
    them (from its private timing.json). A run trained alone keeps its seconds in results.csv."""
    from dpmed.records import Timing

    folder = StudyFolder(tmp_path)
    cams = make_explanations({"mask_energy": {"value": 0.4, "low": 0.3, "high": 0.5}}, seconds=3.25)
    alone = make_record("np_seed0", "np", explanations=cams)
    timing = Timing(train_seconds=1234.5, total_seconds=2345.5, device="cpu", threads=1, alone=False)
    beside = make_record("np_seed1", "np", seed=1, explanations=cams).model_copy(update={"timing": timing})
    folder.run(beside.run_id).make()
    timing.write(folder.run(beside.run_id).timing)
    write_outputs(folder, make_resolved([alone, beside]), [alone, beside])
    results = {row["run_id"]: row for row in csv.DictReader(io.StringIO(folder.results.read_text()))}
    assert float(results[alone.run_id]["train_seconds"]) == alone.timing.train_seconds
    assert results[beside.run_id]["train_seconds"] == ""
    shareable = [path for path in folder.root.rglob("*") if path.is_file() and folder.private not in path.parents]
    assert folder.report in shareable and folder.results in shareable
    public = "".join(path.read_text(errors="replace") for path in shareable)   # every file outside private/
    assert "1234.5" not in public and "2345.5" not in public
    assert "Wall time: training 1234.5 s, in all 2345.5 s" in folder.private_report.read_text()


def test_the_private_report_is_private_report_html_beside_the_runs_private_files_and_nowhere_else(
        tmp_path, make_record, make_resolved):
    """The public report and README send the reader to private/report.html by that literal path, and a
    study folder is shared by leaving private/ out: the private report must be exactly there, in the owner-only
    folder that holds the runs' private files (here a run's timing.json), and no other HTML page may hold its
    numbers. Checked by the literal path, not through `StudyFolder.private_report`, which the other tests read it by:
    one moved with that property to another file name in private/ would pass them. Fails if it is written anywhere
    else."""
    from dpmed.records import Timing

    run = make_record("np_seed0", "np").model_copy(update={"timing": Timing(
        train_seconds=1234.5, total_seconds=2345.5, device="cpu", threads=1, alone=False)})
    folder = StudyFolder(tmp_path)
    folder.run(run.run_id).make()
    run.timing.write(folder.run(run.run_id).timing)
    write_outputs(folder, make_resolved([run]), [run])
    private = tmp_path / "private"
    assert sorted(path.relative_to(tmp_path).as_posix() for path in tmp_path.rglob("*.html")) == [
        "private/report.html", "report.html"]
    assert "Wall time: training 1234.5 s" in (private / "report.html").read_text()
    assert (private / "runs" / run.run_id / "timing.json").is_file()          # beside the runs' private files
