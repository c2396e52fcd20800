"""run.json is the RunRecord type's JSON: an exact round trip, and a clear error for a file this dpmed cannot read."""

from __future__ import annotations

import json

import pytest

from dpmed.accounting import Ledger, PoissonGaussianEvent
from dpmed.errors import ConfigError
from dpmed.records import RunRecord, read_record


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
    with pytest.raises(Exception):
        make_record("a_seed0", "a").seed = 3
    assert RunRecord.model_config["frozen"]


def test_a_study_with_data_files_round_trips_through_study_yaml(tmp_path):
    """study.yaml is read back through JSON (`dpmed report`, `dpmed status`); the strict schema refused its own
    data path there (a Path from JSON text), so no study on a real dataset could be rebuilt."""
    import yaml

    from dpmed.config import Study

    study = Study.model_validate({"name": "files", "data": {"source": "medmnist", "path": str(tmp_path / "x.npz"),
                                                            "cache_dir": str(tmp_path / "cache")},
                                  "arms": [{"name": "np", "mechanism": "none"}]})
    text = yaml.safe_dump(study.model_dump(mode="json"))
    back = Study.model_validate_json(json.dumps(yaml.safe_load(text)))
    assert back == study and back.data.path == tmp_path / "x.npz"
    with pytest.raises(ValueError, match="must be a path"):
        Study.model_validate({"name": "bad", "data": {"source": "medmnist", "path": 3},
                              "arms": [{"name": "np", "mechanism": "none"}]})
