"""Everything a study writes outside ``private/``, for a dataset and for its neighbour, compared byte for byte.

Adversary: holds every shareable file of a study (study.yaml, run.json, model.pt, predictions.npz, cams.npz,
ldp_examples.npz, results.csv, comparisons.json, report.html, its figures, the pretrain cache entry) and tries to
tell whether one more training patient was there. dpmed's claim (README, "What may be shared") is that those files
depend on the training images only through the noised models and the accountant, and the accountant only through
the released count. So with training made blind to its images (every run trains on one fixed set of images that
both datasets hold) and the released count's noise coupled so that both studies release the same count, the two
folders must be identical, file for file, byte for byte.

What differs for other reasons is frozen, not ignored: wall times (``time.perf_counter``, whose readings the files
of runs without DP-SGD and the pretraining record hold by design) and the attack step's noise, drawn from fresh OS
entropy. The study holds a local-DP arm, a non-private arm, DP-SGD with the patient and with the image as the unit
(capped and uncapped), an audit, an attack, explanations, fairness and public pretraining on a second CSV set; the
neighbour's patient has a longer id than any other and an unrecorded sex, so that any file whose format follows the
whole dataset's (the width of a numpy string, say) tells the two apart.
"""

from __future__ import annotations

import hashlib
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

import dpmed.attack.experiment
import dpmed.run
from dpmed import released_size
from dpmed.config import load_study
from dpmed.data.cohorts import patient_draws
from dpmed.randomness import PrivacyRandomness
from dpmed.study import load_study_data, run_study

SIDE = 16
EXTRA = "a-training-patient-with-a-long-id-1"      # its split draw is training (asserted below)


def _table(folder: Path, prefix: str, extra: bool) -> Path:
    """A CSV dataset: 60 patients (every third with two images), sex and age, splits carved by patient; ``extra``
    adds the neighbour's patient (one image, sex unknown). A patient's pixels depend on its file name alone."""
    rows = [(f"{prefix}{i:03d}", f"{prefix}{i:03d}_{j}", i % 2, "FM"[i % 2], 20 + i)
            for i in range(60) for j in range(1 + (i % 3 == 0))]
    if extra:
        rows.append((EXTRA, f"{EXTRA}_0", 1, "", 33))
    lines = ["file,label,patient,sex,age"]
    (folder / "images").mkdir(parents=True, exist_ok=True)
    for patient, name, label, sex, age in rows:
        seed = int(hashlib.sha256(name.encode()).hexdigest()[:8], 16)
        pixels = np.random.default_rng(seed).integers(0, 256, (SIDE, SIDE), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / "images" / f"{name}.png")
        lines.append(f"images/{name}.png,{label},{patient},{sex},{age}")
    (folder / "labels.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder / "labels.csv"


def _study(root: Path, extra: bool):
    columns = {"path": "file", "patient": "patient", "sex": "sex", "age": "age"}
    shutil.rmtree(root / "private-data", ignore_errors=True)      # one path for both datasets: the path is published
    raw = {
        "name": "neighbours", "seeds": [0], "size_epsilon": 1.0, "privacy_randomness": "reproducible",
        "settings_chosen_on": "nothing: a test",
        "data": {"source": "csv", "path": str(_table(root / "private-data", "p", extra)), "labels": ["label"],
                 "classes": ["normal", "finding"], "name": "toy", "columns": columns,
                 "split": {"val_fraction": 0.2, "test_fraction": 0.2, "seed": 0}},
        "model": {"name": "small_cnn"},
        "pretrain": {"public": "another site's patients",
                     "data": {"source": "csv", "path": str(root / "public-data" / "labels.csv"), "labels": ["label"],
                              "columns": {"path": "file", "patient": "patient"}},
                     "training": {"steps": 2, "batch_size": 8}},
        "training": {"steps": 3, "batch_size": 8, "device": "cpu"},
        "evaluation": {"bootstrap_resamples": 10, "explanations": {"method": "gradcam", "n_images": 4},
                       "fairness": {"attributes": ["sex", "age"], "age_bins": [0, 50, 100]}},
        "arms": [{"name": "non-private", "mechanism": "none"},
                 {"name": "ldp", "mechanism": "pixel_laplace", "scale": 0.5},
                 {"name": "patients", "mechanism": "dp_sgd", "target_epsilon": 8, "attack": {"batches": 1},
                  "audit": {"canaries": 5, "kind": "mislabelled"}},
                 {"name": "capped", "mechanism": "dp_sgd", "target_epsilon": 8, "privacy_unit": "image",
                  "max_images_per_patient": 1},
                 {"name": "images", "mechanism": "dp_sgd", "target_epsilon": 8, "privacy_unit": "image"}]}
    (root / "study.yaml").write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return load_study(root / "study.yaml")


def _shareable(root: Path, extra: bool, noise: int, fixed) -> dict[str, bytes]:
    """Every file outside private/ of the study on the dataset (``extra``: its neighbour), by path."""
    study = _study(root, extra)
    real_train = dpmed.run.train
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(dpmed.run, "train", lambda model, data, *a, **k: real_train(model, fixed, *a, **k))
        mp.setattr(released_size, "discrete_laplace", lambda scale, randbelow=None: noise)
        mp.setattr(time, "perf_counter", lambda: 0.0)
        mp.setattr(dpmed.attack.experiment.PrivacyRandomness, "secure",
                   classmethod(lambda cls: PrivacyRandomness.reproducible(seed=0, run_id="attack")))
        result = run_study(study, out=root / "out", progress=False)
    assert not result.failures, [f.error for f in result.failures]
    files = {str(p.relative_to(result.out_dir)): p.read_bytes() for p in sorted(result.out_dir.rglob("*"))
             if p.is_file() and "private" not in p.relative_to(result.out_dir).parts}
    shutil.rmtree(root / "out")
    return files


def test_every_shareable_file_is_the_same_for_a_dataset_and_its_neighbour_when_training_is_blind(tmp_path):
    _table(tmp_path / "public-data", "q", extra=False)
    assert patient_draws(np.array([EXTRA]), 0, purpose="split")[0] < 0.6      # the neighbour's patient trains
    dataset = load_study_data(_study(tmp_path, extra=False))
    neighbour = load_study_data(_study(tmp_path, extra=True))
    assert EXTRA in neighbour.train.patient_ids and len(neighbour.train) == len(dataset.train) + 1
    fixed = dataset.test           # what every run trains on, in both studies
    same = _shareable(tmp_path, extra=False, noise=0, fixed=fixed)
    coupled = _shareable(tmp_path, extra=True, noise=-1, fixed=fixed)    # the same count released: N + 1 - 1
    assert {"report.html", "results.csv", "study.yaml", "runs/patients_eps8_C1_seed0/predictions.npz",
            "runs/ldp_b0.5_seed0/ldp_examples.npz", "runs/images_eps8_C1_seed0/cams.npz"} <= set(same)
    assert sorted(coupled) == sorted(same)
    assert [name for name in same if coupled[name] != same[name]] == []
    # the control: the count released without noise tells them apart (study.yaml, the DP-SGD runs' plans)
    exact = _shareable(tmp_path, extra=True, noise=0, fixed=fixed)
    assert exact["study.yaml"] != same["study.yaml"]
