"""run.json is the RunRecord type's JSON: an exact round trip, and a clear error for a file this dpmed cannot read."""

from __future__ import annotations

import json
import math
import os

import pytest
from pydantic import ValidationError

from dpmed.accounting import Ledger, PoissonGaussianEvent
from dpmed.errors import ConfigError
from dpmed.records import RunRecord, Timing, read_record, read_timing


def test_a_record_round_trips_through_run_json(tmp_path, make_record):
    record = make_record("dp_eps8_C1_seed0", "dp", "dp_sgd", eps=8.0, metrics={"test_auroc": 0.9, "n_test": 40})
    record = record.model_copy(update={"ledger": Ledger((PoissonGaussianEvent(0.7, 0.05, 120),))})
    record.write(tmp_path / "run.json")
    again = read_record(tmp_path / "run.json")
    assert again == record and isinstance(again.ledger, Ledger) and again.ledger.dp_sgd_steps == 120
    assert isinstance(again.metrics["n_test"], int) and again.estimate("test_auroc").value == 0.9
    assert again.estimate("test_accuracy").value is None
    data = json.loads((tmp_path / "run.json").read_text())
    assert data["ledger"] == {"events": [{"type": "poisson_gaussian", "noise_multiplier": 0.7, "sample_rate": 0.05,
                                          "steps": 120}]}
    assert data["plan"]["privacy"]["mechanism"] == "dp_sgd" and data["privacy"]["epsilon"] == pytest.approx(7.92)


def test_a_foreign_run_json_is_a_clear_error_naming_the_file(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"run_id": "x", "spec": {}, "privacy": {}}))
    with pytest.raises(ConfigError, match=r"run.json is not a run record this version of dpmed can read.*--out"):
        read_record(path)


def test_records_are_frozen(make_record):
    """A record is what was run: setting a field of one read back must be refused, not change it."""
    record = make_record("a_seed0", "a")
    with pytest.raises(ValidationError, match="frozen"):
        record.seed = 3
    assert record.seed == 0 and RunRecord.model_config["frozen"]


def test_a_study_with_data_files_round_trips_through_study_yaml(tmp_path):
    """study.yaml is read back through JSON (`dpmed report`, `dpmed status`); the strict schema refused its own
    data path there (a Path from JSON text), so no study on a real dataset could be rebuilt."""
    import yaml

    from dpmed.config import Study

    study = Study.model_validate({"name": "files", "data": {"source": "csv", "path": str(tmp_path / "x.csv"),
                                                            "cache_dir": str(tmp_path / "cache")},
                                  "arms": [{"name": "np", "mechanism": "none"}]})
    text = yaml.safe_dump(study.model_dump(mode="json"))
    back = Study.model_validate_json(json.dumps(yaml.safe_load(text)))
    assert back == study and back.data.path == tmp_path / "x.csv"
    with pytest.raises(ValueError, match="must be a path"):
        Study.model_validate({"name": "bad", "data": {"source": "medmnist", "path": 3},
                              "arms": [{"name": "np", "mechanism": "none"}]})


def test_the_evaluation_blocks_round_trip_and_read_as_earlier_versions_wrote_them(tmp_path, make_record):
    """run.json's fairness and explanations blocks are types now, with the JSON they always had: a block computed by
    the evaluation round-trips exactly, one written before the newer fields (the bootstrap unit, the undefined
    redraws, the lesion maps' zero count) still reads, with the defaults that say what those versions did, and a
    misspelt key is refused with the file's name."""
    import numpy as np

    from dpmed.evaluation.fairness import evaluate_fairness
    from dpmed.evaluation.summaries import Explanations, Fairness

    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 60)
    s = np.clip(0.4 * y + 0.6 * rng.random(60), 0, 1)
    fairness = evaluate_fairness(kind="binary", val_labels=y, val_scores=s, test_labels=y, test_scores=s,
                                 attributes={"sex": rng.choice(["female", "male"], 60), "age": np.full(60, np.nan)},
                                 n_resamples=50, patient_ids=np.arange(60).astype(str))
    record = make_record("np_seed0", "np", fairness=fairness)
    record.write(tmp_path / "run.json")
    assert read_record(tmp_path / "run.json") == record
    data = json.loads((tmp_path / "run.json").read_text())
    female = data["fairness"]["attributes"]["sex"]["groups"]["female"]
    assert set(female["auroc"]) == {"value", "low", "high"} and female["n"] == fairness.attributes["sex"].groups[
        "female"].n
    assert data["fairness"]["attributes"]["age"]["status"] == "n/a"
    assert data["fairness"]["bootstrap_unit"] == "patient"
    assert fairness.ok("sex") is fairness.attributes["sex"] and fairness.ok("age") is None   # n/a: no numbers
    assert fairness.ok("ethnicity") is None

    est = {"value": 0.7, "low": 0.6, "high": 0.8}
    older_fairness = {"definitions": {}, "thresholds": [0.5], "n_test": 20, "n_resamples": 50, "bootstrap_seed": 0,
                      "confidence": 0.95, "age_bins": [0, 30, 100], "attributes": {"sex": {
                          "status": "ok", "reference": "female minus male (and any unknown)",
                          "groups": {"female": {"n": 9, "n_positive": 4, "auroc": est, "accuracy": est,
                                                "accuracy_parity_difference": est,
                                                "demographic_parity_difference": est}},
                          "worst_group_auroc": {"group": "female", **est},
                          "demographic_parity_difference": est, "equalized_odds_difference": est}}}
    older_explanations = {"method": "gradcam", "method_reference": "Selvaraju et al. 2017", "target_layer": "features",
                          "explained_class": "predicted (argmax)", "n_images": 8, "n_zero_cams": 1,
                          "score_image_min": 0.5, "score_image_max": 0.9, "deletion_steps": 16,
                          "baseline": "black (0 in [0, 1] pixels)", "labels": {}, "image_seed": 0,
                          "metrics": {"mask_energy": {**est, "n": 8}}, "lesion_class": 1, "n_masked_images": 4,
                          "pointing_tolerance_px": 0.0, "mask_area_share": 0.1, "seconds": 1.5}
    data.update(fairness=older_fairness, explanations=older_explanations)
    (tmp_path / "run.json").write_text(json.dumps(data))
    older = read_record(tmp_path / "run.json")
    assert isinstance(older.fairness, Fairness) and isinstance(older.explanations, Explanations)
    assert older.fairness.bootstrap_unit == "image" and older.explanations.bootstrap_unit == "image"   # images then
    assert older.fairness.attributes["sex"].worst_group_auroc.undefined_redraws is None
    assert older.explanations.n_zero_lesion_cams is None and older.explanations.metrics["mask_energy"].n == 8

    data["explanations"] = {**older_explanations, "metrics": {"mask_energy": {**est, "count": 8}}}
    (tmp_path / "run.json").write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=r"run.json is not a run record .*explanations\.metrics\.mask_energy"):
        read_record(tmp_path / "run.json")
    data["explanations"] = older_explanations
    data["fairness"]["attributes"]["sex"]["groups"]["female"]["auroc"] = {**est, "lo": 0.6}   # a misspelt bound
    (tmp_path / "run.json").write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=r"run.json is not a run record .*female\.auroc\.lo"):
        read_record(tmp_path / "run.json")


def test_the_point_a_run_resumed_from_is_a_step_said_as_one_and_older_files_keep_their_unit(tmp_path, make_record):
    """A run without DP-SGD recorded the epoch its checkpoint continued from (2), a DP-SGD run the step (33), both
    as a bare "resumed_from". Every run records the step now, and the file says so; an older run.json is read with
    the unit it was written in, and an older DP-SGD timing.json (the private one, of steps) as steps."""
    def written(record: RunRecord, name: str, *, older: bool = False) -> dict:
        data = json.loads(record.model_dump_json())
        if older:
            del data["timing"]["resumed_unit"]
        (tmp_path / name).write_text(json.dumps(data))
        return data

    plain = make_record("np_seed0", "np")
    plain = plain.model_copy(update={"timing": plain.timing.model_copy(update={"resumed_from": 28})})
    assert written(plain, "new.json")["timing"]["resumed_unit"] == "step"
    assert read_record(tmp_path / "new.json") == plain and plain.timing.resumed_at == "step 28"

    older = plain.model_copy(update={"timing": plain.timing.model_copy(update={"resumed_from": 2})})
    written(older, "older.json", older=True)
    assert read_record(tmp_path / "older.json").timing.resumed_at == "epoch 2"

    dp = make_record("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0)
    dp = dp.model_copy(update={"timing": dp.timing.model_copy(update={"resumed_from": 33})})
    written(dp, "older_dp.json", older=True)
    assert read_record(tmp_path / "older_dp.json").timing.resumed_at == "step 33"
    timing = json.loads(dp.timing.model_dump_json())
    del timing["resumed_unit"]
    (tmp_path / "timing.json").write_text(json.dumps(timing))
    assert read_timing(tmp_path / "timing.json") == dp.timing
    assert Timing(train_seconds=1.0, total_seconds=2.0, device="cpu", threads=1).resumed_at is None   # in one go
    assert dp.timing.shareable(dp.plan).resumed_at is None      # a DP-SGD run's step stays private


def test_label_names_of_a_study_yaml_written_before_it_held_them_come_from_the_auroc_keys(make_record, make_resolved):
    """A study.yaml written before DatasetSummary.label_names leaves the names to the runs' per-label AUROC keys;
    since each has its interval, ``test_auroc[edema]_low`` must not read as a label "edema]_lo"."""
    metrics = {"test_auroc": 0.8, "test_auroc[edema]": 0.7, "test_auroc[edema]_low": 0.6,
               "test_auroc[edema]_high": 0.8, "test_auroc[mass]": 0.9, "test_auroc[mass]_low": 0.85}
    records = [make_record("a_seed0", "a", metrics={"test_auroc": 0.8}), make_record("b_seed0", "b", metrics=metrics)]
    old = make_resolved(records, task="multilabel", label_names=())
    assert old.label_names(records) == ["edema", "mass"]
    assert make_resolved(records, label_names=("mass", "edema")).label_names(records) == ["mass", "edema"]
    assert old.label_names(records[:1]) == []


def test_a_file_that_is_not_a_run_json_is_named_as_such_without_advice_to_retrain(tmp_path):
    """read_record given results.csv said it might come from another dpmed version and advised deleting the run's
    folder to retrain it."""
    (tmp_path / "results.csv").write_text("run_id\nbase_seed0\n")
    with pytest.raises(ConfigError) as info:
        read_record(tmp_path / "results.csv")
    message = str(info.value)
    assert message.startswith(f"{tmp_path / 'results.csv'} is not a run record (Invalid JSON")
    assert message.endswith("a run's record is the run.json in its folder, runs/<run id>/run.json")
    assert "retrain" not in message


def test_an_infinite_eps_is_written_as_strict_json_and_read_back_as_infinity():
    """A study with a run without privacy has eps = infinity: its privacy is written as the string "Infinity"
    (strict JSON, which other tools read), not as null, which reads back as "no eps"."""
    from dpmed.records import StudyPrivacy

    privacy = StudyPrivacy(dp_sgd_runs=(), not_private=("np_seed0",), local_dp=(), unit=None, delta=None,
                           accountant=None, dp_sgd_epsilon=None, epsilon=math.inf, reproducible=False, statement="")
    text = privacy.model_dump_json()
    assert json.loads(text, parse_constant=lambda name: pytest.fail(name))["epsilon"] == "Infinity"
    assert StudyPrivacy.model_validate_json(text) == privacy


def test_an_infinite_value_on_a_run_s_privacy_card_survives_run_json(tmp_path, make_record):
    """The card is a model of its own inside the record, and a nested model writes floats by its own settings: an
    infinite eps on the card (a group guarantee's k eps overflowing, say) would be written as null and read back
    as "no eps", a claim with its value gone."""
    from dpmed.mechanisms import PrivacyCard
    from dpmed.mechanisms.base import GroupGuarantee

    guarantee = GroupGuarantee(k=3, formula_epsilon=math.inf, formula_delta=1.0)
    card = PrivacyCard(mechanism="dp_sgd", is_dp=True, statement="eps = inf", epsilon=math.inf, delta=1e-5,
                       accountant="pld", unit="image", patient_guarantee=guarantee)
    record = make_record("dp_eps8_C1_seed0", "dp", "dp_sgd", eps=8.0).model_copy(update={"privacy": card})
    record.write(tmp_path / "run.json")
    data = json.loads((tmp_path / "run.json").read_text(), parse_constant=lambda name: pytest.fail(name))
    assert data["privacy"]["epsilon"] == "Infinity"
    assert data["privacy"]["patient_guarantee"]["formula_epsilon"] == "Infinity"
    again = read_record(tmp_path / "run.json")
    assert again.privacy.epsilon == math.inf and again.privacy.patient_guarantee.formula_epsilon == math.inf


def test_a_run_json_with_a_key_this_dpmed_does_not_know_is_refused_naming_it(tmp_path, make_record):
    """A key misspelt by hand, or written by a newer dpmed, would otherwise be dropped without a word."""
    data = json.loads(make_record("np_seed0", "np").model_dump_json())
    (tmp_path / "run.json").write_text(json.dumps({**data, "epsilon_total": 3.0}))
    with pytest.raises(ConfigError, match=r"run.json is not a run record this version .*epsilon_total"):
        read_record(tmp_path / "run.json")
    data["timing"]["gpu_seconds"] = 3.0
    (tmp_path / "run.json").write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=r"timing\.gpu_seconds"):
        read_record(tmp_path / "run.json")


def test_an_absent_run_json_is_a_clear_error_naming_the_file(tmp_path):
    with pytest.raises(ConfigError, match=r"^cannot read the run record .*run\.json: No such file or directory$"):
        read_record(tmp_path / "run.json")


def test_only_a_dp_sgd_run_withholds_its_seconds_and_step_from_run_json(make_record, tmp_path):
    """A DP-SGD run's training time grows with what Poisson sampling drew; another run's times are no statistic of
    the training set, and run.json keeps them. The full timing is kept private, owner-only."""
    plain = make_record("np_seed0", "np")
    timing = Timing(train_seconds=12.5, total_seconds=20.0, device="cpu", threads=4, resumed_from=28)
    assert plain.timing.model_copy(update={"resumed_from": 28}).shareable(plain.plan).resumed_from == 28
    assert timing.shareable(plain.plan) == timing
    dp = make_record("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0)
    assert timing.shareable(dp.plan) == Timing(train_seconds=None, total_seconds=None, device="cpu", threads=4,
                                               resumed_from=None)
    timing.write(tmp_path / "timing.json")
    assert read_timing(tmp_path / "timing.json") == timing
    assert os.name == "nt" or (tmp_path / "timing.json").stat().st_mode & 0o777 == 0o600


def test_a_run_beside_others_withholds_its_seconds_and_a_withheld_run_its_explanations_seconds(
        make_record, make_explanations, tmp_path):
    """A run that trained while other runs of the study shared the machine (--workers, Ray) took as long as their
    load made it, a DP-SGD run's included: its seconds are private as a DP-SGD run's are. So are the explanations'
    seconds of every run whose seconds are (measured beside the same load, or after a DP-SGD run's training). A run
    trained alone keeps all of them; a run.json without the word was written by a serial run or an older dpmed."""
    cams = make_explanations({"mask_energy": {"value": 0.4, "low": 0.3, "high": 0.5}}, seconds=3.5)
    plain = make_record("np_seed0", "np", explanations=cams)
    timing = Timing(train_seconds=12.5, total_seconds=20.0, device="cpu", threads=4, resumed_from=28)
    beside = timing.model_copy(update={"alone": False})
    assert timing.alone and beside.shareable(plain.plan) == beside.model_copy(
        update={"train_seconds": None, "total_seconds": None, "resumed_from": None})
    assert plain.shareable() == plain                                      # alone, without DP-SGD: all of it
    shared = plain.model_copy(update={"timing": beside}).shareable()
    assert shared.timing == beside.shareable(plain.plan) and shared.explanations.seconds is None
    assert shared.explanations == cams.model_copy(update={"seconds": None})
    dp = make_record("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0, explanations=cams).shareable()
    assert dp.explanations.seconds is None and dp.timing.train_seconds is None
    assert make_record("np_seed1", "np").shareable().explanations is None
    data = json.loads(plain.model_dump_json())
    del data["timing"]["alone"]
    (tmp_path / "run.json").write_text(json.dumps(data))
    assert read_record(tmp_path / "run.json").timing.alone
    beside.write(tmp_path / "timing.json")
    assert read_timing(tmp_path / "timing.json") == beside


@pytest.mark.parametrize("content", ["{cut short", "[]", '{"train_seconds": 1.0}', '{"device": "cpu", '
                                     '"threads": 1, "train_seconds": 1, "total_seconds": 1, "resumed_unit": "hour"}'])
def test_a_private_timing_that_is_not_one_reads_as_none(tmp_path, content):
    (tmp_path / "timing.json").write_text(content)
    assert read_timing(tmp_path / "timing.json") is None
    assert read_timing(tmp_path / "absent.json") is None


def test_an_undefined_metric_reads_as_no_value_and_a_record_without_a_bootstrap_unit_redrew_images(make_record):
    """AUROC on a test set of one class is nan; an interval bound may be inf. Neither is a number to show or
    compare. A record written before the patient bootstrap redrew images."""
    metrics = {"test_auroc": math.nan, "test_auroc_low": -math.inf, "test_auroc_high": math.inf,
               "test_accuracy": 1, "test_accuracy_low": 0.5, "test_accuracy_high": 1.0}
    record = make_record("np_seed0", "np", metrics=metrics)
    assert (record.estimate("test_auroc").value, record.estimate("test_auroc").low,
            record.estimate("test_auroc").high) == (None, None, None)
    accuracy = record.estimate("test_accuracy")
    assert (accuracy.value, accuracy.low, accuracy.high) == (1.0, 0.5, 1.0) and isinstance(accuracy.value, float)
    assert record.bootstrap_unit == "image"
    assert make_record("np_seed0", "np", metrics={"bootstrap_unit": "patient"}).bootstrap_unit == "patient"


def test_a_binary_task_s_positive_class_is_its_second_label(make_record, make_resolved):
    """Sensitivity counts label 1: in some public binary sets that is "benign" or "normal", not the disease."""
    dataset = make_resolved([make_record("np_seed0", "np")], label_names=("malignant", "benign")).dataset
    assert (dataset.negative_class, dataset.positive_class) == ("malignant", "benign")
    for other in (dataset.model_copy(update={"task": "multiclass", "label_names": ("a", "b")}),
                  dataset.model_copy(update={"label_names": ()})):
        assert (other.negative_class, other.positive_class) == (None, None)


def test_what_a_start_trained_is_said_in_words():
    from dpmed.records import StartRecord

    said = [StartRecord(trainable=t, n_trainable=1, n_frozen=0).trainable_text for t in ("all", "head", 2, "odd")]
    assert said == ["all parameters", "the head only", "the head and the last 2 block(s)", "odd"]
