"""Assembly of a manifest into splits: published splits are kept, the rest carved by patient, and a patient never
crosses splits, whatever the publisher's split says (property test with hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpmed.data import Manifest, Preprocessing, SplitPlan, Task, assemble_dataset
from dpmed.errors import DataError

N_FILES = 24


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from PIL import Image

    root = tmp_path_factory.mktemp("pngs")
    paths = []
    for i in range(N_FILES):
        paths.append(root / f"{i}.png")
        Image.fromarray(np.full((4, 4), 10 * i, np.uint8)).save(paths[-1])
    return root, paths


def _manifest(root, paths, patients, labels, splits) -> Manifest:
    n = len(paths)
    return Manifest(name="fixture", root=root, task=Task("binary", ("a", "b")), paths=list(paths),
                    labels=np.asarray(labels, dtype=np.int64), patient_ids=np.array(patients, dtype=str),
                    sex=np.full(n, "unknown"), age=np.full(n, np.nan), splits=np.array(splits, dtype=str),
                    where=np.array([p.name for p in paths]), ids=np.array([p.name for p in paths]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), shared=st.sampled_from(["drop_from_train", "keep"]), official=st.booleans())
def test_no_patient_crosses_splits(files, tmp_path_factory, data, shared, official):
    root, paths = files
    patients = data.draw(st.lists(st.integers(0, 9), min_size=N_FILES, max_size=N_FILES))
    labels = data.draw(st.lists(st.integers(0, 1), min_size=N_FILES, max_size=N_FILES))
    splits = data.draw(st.lists(st.sampled_from(["", "train", "val", "test"]), min_size=N_FILES, max_size=N_FILES))
    manifest = _manifest(root, paths, [f"p{p}" for p in patients], labels, splits)
    plan = SplitPlan(val_fraction=0.2, test_fraction=0.2, seed=1, official=official, shared_patients=shared)
    try:
        d = assemble_dataset(manifest, preprocessing=Preprocessing(), split=plan,
                             cache_dir=tmp_path_factory.getbasetemp() / "cache")
    except DataError as err:  # too few patients for the splits asked, or a split left empty
        assert "is empty" in str(err) or "cannot carve" in str(err)
        return
    owners = {}
    for name in ("train", "val", "test"):
        for pid in getattr(d, name).patient_ids:
            owners.setdefault(str(pid), set()).add(name)
    crossing = [p for p, names in owners.items() if len(names) > 1]
    if shared == "keep" and official:
        assert len(crossing) == d.source["split"]["patients_crossing_splits"]
    else:
        assert not crossing
    if official and "test" in splits:  # the published test split is kept as published
        expected = sorted(i for i, s in enumerate(splits) if s == "test")
        assert sorted(int(v * 1) for v in (d.test.images[:, 0, 0, 0] * 255 / 10).round()) == expected
    kept = sum(map(len, (d.train, d.val, d.test)))
    assert kept == N_FILES - (d.source["split"]["rows_of_those_patients_outside_their_top_split"]
                              if official and shared == "drop_from_train" else 0)
