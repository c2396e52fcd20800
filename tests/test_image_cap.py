"""The cap on images per patient across a study's runs (`dpmed.run`): every capped run keeps the same images, so
that the study's capped runs are add/remove neighbours of one capped set and compose (`dpmed.budget`)."""

from __future__ import annotations

import numpy as np

from dpmed.config import load_study
from dpmed.folders import StudyFolder
from dpmed.randomness import PrivacyRandomness
from dpmed.run import _training_set
from dpmed.study import load_study_data, plan_study

STUDY = ("name: cap\ndata: {source: phantom, n_images: 240, image_size: 16}\nseeds: [0, 1, 2]\n"
         "arms: [{name: dp, mechanism: dp_sgd, target_epsilon: 8, privacy_unit: image, max_images_per_patient: 1}]\n")


def test_every_seed_of_a_capped_arm_trains_on_one_capped_set(tmp_path, write_study):
    """The choice was keyed by each run's seed: three seeds trained on three capped sets, while the study's total
    was stated for add/remove of one capped set."""
    study = load_study(write_study(STUDY))
    dataset = load_study_data(study)
    counts = np.unique(dataset.train.patient_ids, return_counts=True)[1]
    assert counts.max() > 1                                    # some patients have several images to choose from
    plans = plan_study(study, dataset)
    assert {p.privacy.image_cap_key for p in plans} == {"study"}
    folder = StudyFolder(tmp_path / "out")
    kept = [_training_set(p, dataset, PrivacyRandomness.reproducible(seed=p.seed, run_id=p.run_id),
                          folder.run(p.run_id))[0] for p in plans]
    assert len(kept[0]) == len(counts)                         # one image per patient
    for other in kept[1:]:
        np.testing.assert_array_equal(other.images, kept[0].images)
