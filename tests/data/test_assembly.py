"""Assembly of a manifest into splits: published splits are kept, the rest carved by patient, and a patient never
crosses splits, whatever the publisher's split says (property test with hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpmed.data import Manifest, Preprocessing, SplitPlan, Task, assemble_dataset
from dpmed.data.assembly import in_group_order
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


def _sex(path) -> str:
    """File i's sex, by its number: alternating, so that a row's sex read from another row shows."""
    return ("female", "male")[int(path.stem) % 2]


def _age(path) -> float:
    """File i's age: 20 + i, one per file."""
    return 20.0 + int(path.stem)


def _manifest(root, paths, patients, labels, splits) -> Manifest:
    return Manifest(name="fixture", root=root, task=Task("binary", ("a", "b")), paths=list(paths),
                    labels=np.asarray(labels, dtype=np.int64), patient_ids=np.array(patients, dtype=str),
                    sex=np.array([_sex(p) for p in paths]), age=np.array([_age(p) for p in paths]),
                    splits=np.array(splits, dtype=str),
                    where=np.array([p.name for p in paths]), ids=np.array([p.name for p in paths]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), shared=st.sampled_from(["drop_from_train", "keep"]), official=st.booleans(),
       cached=st.booleans())
def test_no_patient_crosses_splits(files, tmp_path_factory, data, shared, official, cached):
    root, paths = files
    patients = data.draw(st.lists(st.integers(0, 9), min_size=N_FILES, max_size=N_FILES))
    labels = data.draw(st.lists(st.integers(0, 1), min_size=N_FILES, max_size=N_FILES))
    splits = data.draw(st.lists(st.sampled_from(["", "train", "val", "test"]), min_size=N_FILES, max_size=N_FILES))
    manifest = _manifest(root, paths, [f"p{p}" for p in patients], labels, splits)
    plan = SplitPlan(val_fraction=0.2, test_fraction=0.2, seed=1, official=official, shared_patients=shared)
    try:
        d = assemble_dataset(manifest, preprocessing=Preprocessing(), split=plan,
                             cache_dir=tmp_path_factory.getbasetemp() / "cache" if cached else None)
    except DataError as err:  # too few patients for the splits asked, a split left empty, or no draw fell in it
        assert any(why in str(err) for why in ("is empty", "cannot carve", "no patient's draw fell in the",
                                               "more than half of the images")), err
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
    for s in (d.train, d.val, d.test):   # each image still beside its own record (file i has level 10 i)
        files = (s.images[:, 0, 0, 0] * 255 / 10).round().astype(int)
        assert s.patient_ids.tolist() == [f"p{patients[i]}" for i in files]
        assert s.labels.tolist() == [labels[i] for i in files]
        assert s.sex.tolist() == [_sex(paths[i]) for i in files]
        assert s.age.tolist() == [_age(paths[i]) for i in files]
    kept = sum(map(len, (d.train, d.val, d.test)))
    assert kept == N_FILES - (d.source["split"]["rows_of_those_patients_outside_their_top_split"]
                              if official and shared == "drop_from_train" else 0)


@pytest.mark.parametrize("placeholders", [["ANONYMOUS"], ["p1", "unknown"], ["", "n/a"]])
def test_an_anonymiser_s_placeholder_patient_id_is_refused_naming_it(files, placeholders):
    """An export that writes one placeholder for every patient made them one "patient" (and two sites' placeholders
    two), protected as one person by a patient-level eps; it was refused only as "too few patients", which did not
    say why. Here every image but the first is under a placeholder, the first under a real id."""
    root, paths = files
    patients = ["p0"] + [placeholders[i % len(placeholders)] or "p1" for i in range(1, N_FILES)]
    named = patients[1]             # the one placeholder spelling (several: the test below)
    manifest = _manifest(root, paths, patients, [i % 2 for i in range(N_FILES)], [""] * N_FILES)
    with pytest.raises(DataError, match=rf"the patient id {named!r} \(.*\) holds {patients.count(named)} of "
                                        rf"{N_FILES} images \(e\.g\. 1\.png, .*\), which an anonymiser writes .* "
                                        r"Give each patient a real pseudonymous id"):
        assemble_dataset(manifest, preprocessing=Preprocessing(), split=SplitPlan(), cache_dir=None)


@pytest.mark.parametrize("spellings", [2, 5, 7])
def test_a_whole_export_s_placeholder_refusal_names_each_spelling_with_its_count(files, spellings):
    """An export of several sites writes several placeholders; the refusal named only the first spelling and its
    count (4 of 24 images where 23 were under placeholders). Each is named with its count now, most first, the
    first five of them, and the count covers all."""
    root, paths = files
    written = ["ANONYMOUS", "Anonymized", "unknown", "n/a", "-", "?", "xxx"][:spellings]
    patients = ["p0"] + [written[(i - 1) % spellings] for i in range(1, N_FILES)]
    manifest = _manifest(root, paths, patients, [i % 2 for i in range(N_FILES)], [""] * N_FILES)
    with pytest.raises(DataError) as err:
        assemble_dataset(manifest, preprocessing=Preprocessing(), split=SplitPlan(), cache_dir=None)
    message = str(err.value)
    ranked = sorted(written, key=lambda p: -patients.count(p))    # stable: ties keep the order written
    told = [f"{p!r} ({patients.count(p)} images)" for p in ranked]
    assert f") {', '.join(told[:5])}{f' and {spellings - 5} more' if spellings > 5 else ''} hold " in message
    assert all(t not in message for t in told[5:])
    assert f" hold {N_FILES - 1} of {N_FILES} images (e.g. 1.png, 2.png), which an anonymiser writes" in message


def test_one_image_under_a_placeholder_is_refused_without_calling_it_many_people(files):
    """One image whose patient an export did not write: its patient may hold images under a real id too, split
    apart from them and protected as a second unit. Refused; but the message said that its one image was "of many
    people"."""
    root, paths = files
    patients = [f"p{i}" for i in range(N_FILES - 1)] + ["Unknown"]
    manifest = _manifest(root, paths, patients, [i % 2 for i in range(N_FILES)], [""] * N_FILES)
    with pytest.raises(DataError, match=rf"the patient id 'Unknown' \(.*\) holds 1 of {N_FILES} images .*whose "
                                        r"images they are is unknown") as err:
        assemble_dataset(manifest, preprocessing=Preprocessing(), split=SplitPlan(), cache_dir=None)
    assert "many people" not in str(err.value)


@pytest.mark.parametrize("stray", [["Unknown"], ["Unknown", "n/a", "ANONYMOUS"]])
def test_a_few_placeholder_rows_among_real_ids_are_named_with_a_remedy_for_those_rows(files, stray):
    """A few stray rows under a placeholder among real ids were told the remedies of a whole anonymised export
    ("remove 'patient' from data.columns", "blank the PatientID in these files"), which would give up the real ids
    of every other image. Each stray row is named now, with what to do about those rows."""
    root, paths = files
    patients = [f"p{i // 2}" for i in range(N_FILES - len(stray))] + stray
    manifest = _manifest(root, paths, patients, [i % 2 for i in range(N_FILES)], [""] * N_FILES)
    with pytest.raises(DataError) as err:
        assemble_dataset(manifest, preprocessing=Preprocessing(), split=SplitPlan(), cache_dir=None)
    message = str(err.value)
    ids = ", ".join(repr(p) for p in stray)
    assert f"the patient id{'s' if len(stray) > 1 else ''} {ids} (" in message
    assert f"hold{'' if len(stray) > 1 else 's'} {len(stray)} of {N_FILES} images (" in message
    for i in range(N_FILES - len(stray), N_FILES):       # every stray row, and no other
        assert f"{i}.png" in message
    assert f"{N_FILES - len(stray) - 1}.png" not in message
    assert "whose images they are is unknown" in message
    assert f"the other {N_FILES - len(stray)} images' ids look real" in message
    assert "if the patients cannot be told apart" not in message


@pytest.mark.parametrize("n_stray", [10, 11])
def test_up_to_ten_placeholder_rows_are_told_as_stray_in_a_message_of_a_few_lines(files, n_stray):
    """Ten stray rows (the most told as such) were all named on one line: ten of a DICOM folder's paths made it 750
    characters. The first five are named, and the count covers all; from eleven, it is a whole export's message."""
    root, paths = files
    patients = [f"p{i // 2}" for i in range(N_FILES - n_stray)] + ["Unknown"] * n_stray
    manifest = _manifest(root, paths, patients, [i % 2 for i in range(N_FILES)], [""] * N_FILES)
    with pytest.raises(DataError) as err:
        assemble_dataset(manifest, preprocessing=Preprocessing(), split=SplitPlan(), cache_dir=None)
    message = str(err.value)
    first = N_FILES - n_stray
    if n_stray > 10:
        assert "look real" not in message and "if the patients cannot be told apart" in message
        return
    assert f"holds {n_stray} of {N_FILES} images (" in message and f"; and {n_stray - 5} more)" in message
    assert [f"{i}.png" in message for i in range(first, N_FILES)] == [True] * 5 + [False] * (n_stray - 5)
    assert len(message) < 600


def test_one_id_of_most_images_is_refused_and_a_patient_of_many_images_is_not(files):
    """An id that holds more than half of the images is no one patient's (NIH ChestX-ray14 has patients of over
    100 images, among its 112,120), whatever its spelling, "0" too; a patient of many images, fewer than
    half, is a patient, as is one numbered 0."""
    root, paths = files
    labels = [i % 2 for i in range(N_FILES)]
    most = ["0" if i < N_FILES // 2 + 1 else f"p{i}" for i in range(N_FILES)]
    with pytest.raises(DataError, match=rf"the patient id '0' .* holds {N_FILES // 2 + 1} of {N_FILES} images .*"
                                        r"more than half of the images"):
        assemble_dataset(_manifest(root, paths, most, labels, [""] * N_FILES), preprocessing=Preprocessing(),
                         split=SplitPlan(), cache_dir=None)
    half = ["0" if i < N_FILES // 2 else f"p{i}" for i in range(N_FILES)]
    d = assemble_dataset(_manifest(root, paths, half, labels, [""] * N_FILES), preprocessing=Preprocessing(),
                         split=SplitPlan(val_fraction=0.2, test_fraction=0.2), cache_dir=None)
    assert sum(map(len, (d.train, d.val, d.test))) == N_FILES


def test_a_carved_split_no_patient_s_draw_falls_in_is_refused_not_filled(files):
    """Ten patients but the eighth (ids p0..p9, p7's images given to p8), seed 1: no patient's keyed draw lands in
    the validation split. That is refused, naming the fraction and seed to change, rather than filled with a patient
    of another split. (The property test above meets it only on fresh draws, and refused it as a failure.)"""
    root, paths = files
    patients = [f"p{8 if i % 10 == 7 else i % 10}" for i in range(N_FILES)]
    manifest = _manifest(root, paths, patients, [i % 2 for i in range(N_FILES)], [""] * N_FILES)
    plan = SplitPlan(val_fraction=0.2, test_fraction=0.2, seed=1, official=False, shared_patients="keep")
    refusal = (r"no patient's draw fell in the val split .*data\.split\.val_fraction 0\.2, seed 1\); raise "
               r"data\.split\.val_fraction or choose another data\.split\.seed")
    with pytest.raises(DataError, match=refusal):
        assemble_dataset(manifest, preprocessing=Preprocessing(), split=plan, cache_dir=None)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), n=st.integers(0, 40), owned=st.booleans())
def test_splits_in_group_order_equal_indexed_copies_and_share_one_block_where_owned(data, n, owned):
    """The in-place permutation against numpy's fancy indexing (a second implementation). Before, every split was a
    copy, so the decoded images were held twice at the end of assembly."""
    rows = data.draw(st.permutations(range(n)))
    cuts = sorted(data.draw(st.lists(st.integers(0, n), min_size=4, max_size=4)))
    groups = [np.array(rows[a:b], dtype=np.int64) for a, b in zip(cuts, cuts[1:])]   # three, disjoint; some rows unused
    original = np.arange(n * 6, dtype=np.float32).reshape(n, 1, 2, 3)
    images = original.copy()
    if not owned:
        images.flags.writeable = False         # as a cache entry's memory map: copied out, never written
    parts = in_group_order(images, groups)
    for part, g in zip(parts, groups, strict=True):
        np.testing.assert_array_equal(part, original[g])
        assert part.dtype == np.float32 and part.flags.c_contiguous
    if owned:
        assert all(p.base is images or len(p) == 0 for p in parts)
    else:
        np.testing.assert_array_equal(images, original)
        assert not any(np.shares_memory(p, images) for p in parts)


def test_one_patient_written_two_ways_is_kept_out_of_a_second_split_and_told(files, caplog):
    """"pt01" published in test and "PT1" in train are one patient: the training image is left out as for any
    patient the published splits share, and the terminal says which ids were taken for one. Compared exactly, the
    patient trained and was tested on."""
    root, paths = files
    patients = ["pt01", "PT1"] + [f"p{2 + i // 2}" for i in range(N_FILES - 2)]
    splits = ["test", "train"] + [("train", "val", "test")[(i // 2) % 3] for i in range(N_FILES - 2)]
    manifest = _manifest(root, paths, patients, [i % 2 for i in range(N_FILES)], splits)
    with caplog.at_level("WARNING", logger="dpmed.data.assembly"):
        d = assemble_dataset(manifest, preprocessing=Preprocessing(), split=SplitPlan(), cache_dir=None)
    assert "PT1" in d.test.patient_ids.tolist() and "PT1" not in d.train.patient_ids.tolist()
    assert not {"pt01", "PT1"} & set(d.train.patient_ids.tolist() + d.val.patient_ids.tolist())
    assert len(d.train) == splits.count("train") - 1 and d.source["split"]["patients_in_two_published_splits"] == 1
    assert "1 patient id is written in ways that differ only in case or leading zeros ('PT1' = 'pt01')" in caplog.text


@pytest.mark.parametrize("cached", [False, True])
def test_an_unreadable_file_left_out_takes_no_other_image_s_record_with_it(tmp_path, cached):
    """File 2 cannot be decoded and skip_invalid leaves its row out: every image after it must still sit beside its
    own label, patient, sex and age, not the record one row up."""
    from PIL import Image

    paths = []
    for i in range(10):
        paths.append(tmp_path / "png" / f"{i}.png")
        paths[-1].parent.mkdir(exist_ok=True)
        Image.fromarray(np.full((4, 4), 10 * i, np.uint8)).save(paths[-1])
    paths[2].write_bytes(b"\x89PNG broken")
    labels = [0, 1, 1, 0, 1, 0, 0, 1, 1, 0]
    splits = ["train"] * 6 + ["val", "val", "test", "test"]
    manifest = _manifest(tmp_path, paths, [f"p{i}" for i in range(10)], labels, splits)
    d = assemble_dataset(manifest, preprocessing=Preprocessing(), split=SplitPlan(official=True), skip_invalid=True,
                         cache_dir=tmp_path / "cache" if cached else None)
    seen = []
    for s in (d.train, d.val, d.test):
        files = (s.images[:, 0, 0, 0] * 255 / 10).round().astype(int).tolist()
        assert s.patient_ids.tolist() == [f"p{i}" for i in files]
        assert s.labels.tolist() == [labels[i] for i in files]
        assert s.sex.tolist() == [_sex(paths[i]) for i in files] and s.age.tolist() == [_age(paths[i]) for i in files]
        seen += files
    assert sorted(seen) == [0, 1, 3, 4, 5, 6, 7, 8, 9]


def test_left_out_rows_beyond_the_examples_are_counted_on_the_terminal(tmp_path, caplog):
    """Before: the first five left-out rows were named and the rest went unsaid, so a user who fixed those five
    read the same refusal of the others on the next run."""
    from PIL import Image

    paths = []
    for i in range(16):
        paths.append(tmp_path / "png" / f"{i}.png")
        paths[-1].parent.mkdir(exist_ok=True)
        Image.fromarray(np.full((4, 4), 10 * i, np.uint8)).save(paths[-1])
    for i in range(7):
        paths[i].write_bytes(b"\x89PNG broken")
    manifest = _manifest(tmp_path, paths, [f"p{i}" for i in range(16)], [i % 2 for i in range(16)],
                         ["train"] * 12 + ["val", "val", "test", "test"])
    with caplog.at_level("WARNING", logger="dpmed.data.assembly"):
        assemble_dataset(manifest, preprocessing=Preprocessing(), split=SplitPlan(official=True), skip_invalid=True,
                         cache_dir=None)
    assert caplog.text.count("left out ") == 6 and "left out 2 more invalid rows, as counted above" in caplog.text
