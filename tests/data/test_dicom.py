"""DICOM decoding (pydicom, the optional extra): modality LUT, VOI LUT / window, MONOCHROME1 inversion, folders of
DICOM files with patients from the header, broken files, and the message when pydicom is absent."""

from __future__ import annotations

import logging
from pathlib import Path
import re
import warnings
import sys

import numpy as np
import pytest

from dpmed.data import Preprocessing, SplitPlan, load_dataset
from dpmed.data import dicom
from dpmed.data.cache import decode_images
from dpmed.data.decoding import UnreadableImage, peek_image, read_image
from dpmed.data.dicom import voi_window
from dpmed.errors import DataError


STORED = np.array([[0, 100], [200, 4095]], dtype=np.uint16)


def test_voi_window_formulas_by_hand():
    x = np.array([-100.0, 99.5, 100.0, 300.0])
    # LINEAR, c = 100, w = 201: (x - 99.5) / 200 + 0.5, clipped
    np.testing.assert_allclose(voi_window(x, 100, 201), [0.0, 0.5, 0.5025, 1.0], atol=1e-6)
    # LINEAR_EXACT, c = 100, w = 400: (x - 100) / 400 + 0.5
    np.testing.assert_allclose(voi_window(x, 100, 400, "LINEAR_EXACT"), [0.0, 0.49875, 0.5, 1.0], atol=1e-6)
    # SIGMOID: 1 / (1 + exp(-4 (x - c) / w)); at x = c it is 1/2
    np.testing.assert_allclose(voi_window(np.array([100.0]), 100, 50, "SIGMOID"), [0.5])
    # and away from c, where the slope shows: x = c + w / 2 gives 1 / (1 + e^-2)
    np.testing.assert_allclose(voi_window(np.array([125.0, 75.0]), 100, 50, "SIGMOID"),
                               [1 / (1 + np.exp(-2.0)), 1 / (1 + np.exp(2.0))], rtol=1e-6)
    # LINEAR with w = 1 is a threshold at c - 0.5 (x <= c - 0.5 is 0)
    np.testing.assert_array_equal(voi_window(np.array([99.0, 99.5, 99.6, 100.0]), 100, 1), [0, 0, 1, 1])
    with pytest.raises(ValueError, match="VOILUTFunction 'GAMMA'"):
        voi_window(x, 100, 400, "GAMMA")


def test_modality_lut_then_window(tmp_path, write_dicom):
    # stored 0, 100, 200, 4095 -> modality (slope 2, intercept -100) -100, 100, 300, 8090 -> LINEAR_EXACT c 100 w 400
    path = write_dicom(tmp_path / "a.dcm", STORED, rescale=(2, -100), window=(100, 400), function="LINEAR_EXACT")
    np.testing.assert_allclose(read_image(path, channels=1)[0], [[0.0, 0.5], [1.0, 1.0]], atol=1e-6)


def test_monochrome1_is_inverted(tmp_path, write_dicom):
    path = write_dicom(tmp_path / "m1.dcm", STORED, photometric="MONOCHROME1", rescale=(2, -100),
                        window=(100, 400), function="LINEAR_EXACT")
    np.testing.assert_allclose(read_image(path, channels=1)[0], [[1.0, 0.5], [0.0, 0.0]], atol=1e-6)


def test_voi_lut_sequence_and_no_voi(tmp_path, write_dicom):
    lut = write_dicom(tmp_path / "lut.dcm", np.array([[0, 1], [2, 3]]), voi_lut=[0, 85, 170, 255])
    np.testing.assert_allclose(read_image(lut, channels=1)[0], [[0, 1 / 3], [2 / 3, 1]], atol=1e-6)
    plain = write_dicom(tmp_path / "plain.dcm", STORED)  # no window: the image's own range
    np.testing.assert_allclose(read_image(plain, channels=1)[0], STORED / 4095.0, atol=1e-6)
    assert read_image(plain, channels=3).shape == (3, 2, 2)


def test_a_voi_lut_table_is_applied_and_wins_over_a_window(tmp_path, write_dicom):
    # a non-linear table over stored 0..3: neither the window nor the image's own range gives these values
    path = write_dicom(tmp_path / "lut.dcm", np.array([[0, 1], [2, 3]]), voi_lut=[0, 200, 220, 255],
                        window=(1, 2), function="LINEAR_EXACT")
    np.testing.assert_allclose(read_image(path, channels=1)[0], [[0, 200 / 255], [220 / 255, 1]], atol=1e-6)


def test_without_a_window_the_image_s_own_range_and_a_constant_image_is_black_not_nan(tmp_path, write_dicom):
    path = write_dicom(tmp_path / "range.dcm", np.array([[100, 200], [300, 500]]))
    np.testing.assert_allclose(read_image(path, channels=1)[0], [[0, 0.25], [0.5, 1]], atol=1e-6)
    flat = read_image(write_dicom(tmp_path / "flat.dcm", np.full((2, 2), 7)), channels=1)
    np.testing.assert_array_equal(flat, np.zeros((1, 2, 2)))
    flat1 = read_image(write_dicom(tmp_path / "flat1.dcm", np.full((2, 2), 7), photometric="MONOCHROME1"), channels=1)
    np.testing.assert_array_equal(flat1, np.ones((1, 2, 2)))


def test_the_first_of_several_windows_is_the_one_applied(tmp_path, write_dicom):
    one = write_dicom(tmp_path / "one.dcm", STORED, window=(100, 400), function="LINEAR_EXACT")
    several = write_dicom(tmp_path / "several.dcm", STORED, window=([100, 2000], [400, 10]), function="LINEAR_EXACT")
    np.testing.assert_array_equal(read_image(several, channels=1), read_image(one, channels=1))


def test_monochrome1_is_one_minus_the_monochrome2_value_where_the_window_stays_below_white(tmp_path, write_dicom):
    kw = dict(window=(5000, 20000), function="LINEAR_EXACT")   # STORED maps into [0.25, 0.46]
    m2 = read_image(write_dicom(tmp_path / "m2.dcm", STORED, **kw), channels=1)
    m1 = read_image(write_dicom(tmp_path / "m1.dcm", STORED, photometric="MONOCHROME1", **kw), channels=1)
    assert m2.max() < 0.5
    np.testing.assert_allclose(m1, 1 - m2, atol=1e-6)


def test_colour_is_divided_by_its_stored_range_in_channel_row_column_order(tmp_path, write_dicom):
    rgb = np.zeros((2, 3, 3), dtype=np.uint16)     # 2 x 3: rows and columns not confused
    rgb[..., 0], rgb[..., 1], rgb[..., 2] = 4095, 1365, 0
    rgb[1, 2] = (0, 0, 4095)
    path = write_dicom(tmp_path / "rgb.dcm", rgb, photometric="RGB")       # 12 bits stored
    x = read_image(path, channels=3)
    assert x.shape == (3, 2, 3)
    np.testing.assert_allclose(x, rgb.transpose(2, 0, 1) / 4095.0, atol=1e-6)
    grey = read_image(path, channels=1)           # ITU-R BT.601 luma
    np.testing.assert_allclose(grey[0, 0, 0], 0.299 + 0.587 / 3, atol=1e-6)
    np.testing.assert_allclose(grey[0, 1, 2], 0.114, atol=1e-6)
    assert dicom.peek_dicom(path) == (3, (2, 3))
    assert dicom.peek_dicom(write_dicom(tmp_path / "grey.dcm", rgb[..., 0])) == (1, (2, 3))


def test_ybr_colour_is_read_as_rgb(tmp_path, write_dicom):
    ybr = np.full((2, 2, 3), 128, dtype=np.uint8)
    ybr[0, 0, 0], ybr[0, 1, 0] = 0, 255           # neutral: R = G = B = Y
    ybr[1, 1] = (128, 128, 228)                   # Cr 100 above neutral: red (R = Y + 1.402 (Cr - 128))
    path = write_dicom(tmp_path / "ybr.dcm", ybr, photometric="YBR_FULL", bits=(8, 8))
    x = read_image(path, channels=3)
    assert x.shape == (3, 2, 2) and 0 <= x.min() and x.max() <= 1
    np.testing.assert_allclose(x[:, 0, 0], 0, atol=1 / 255)
    np.testing.assert_allclose(x[:, 0, 1], 1, atol=1 / 255)
    np.testing.assert_allclose(x[:, 1, 1], np.array([128 + 140.2, 128 - 0.714136 * 100, 128]).clip(0, 255) / 255,
                               atol=1.5 / 255)


def test_broken_and_multiframe_files_are_unreadable(tmp_path, write_dicom):
    pytest.importorskip("pydicom")
    junk = tmp_path / "junk.dcm"
    junk.write_bytes(b"\x00" * 50)
    with pytest.raises(UnreadableImage, match="is not a DICOM file"):
        read_image(junk, channels=1)
    multi = write_dicom(tmp_path / "multi.dcm", STORED, frames=2)
    with pytest.raises(UnreadableImage, match="holds 2 frames"):
        read_image(multi, channels=1)
    pydicom = pytest.importorskip("pydicom")
    empty = pydicom.dcmread(write_dicom(tmp_path / "empty.dcm", STORED))
    empty.Rows = None                             # present and empty: before, a TypeError's traceback
    empty.save_as(tmp_path / "empty.dcm")
    with pytest.raises(UnreadableImage, match="has no Rows / Columns: not an image"):
        dicom.peek_dicom(tmp_path / "empty.dcm")
    with pytest.raises(UnreadableImage, match="has no Rows / Columns in its header"):
        dicom.read_dicom_header(tmp_path / "empty.dcm")


def test_every_changed_byte_of_a_dicom_file_reads_or_is_unreadable_never_an_internal_error(tmp_path, write_dicom):
    """Before: changing each byte of a small file in turn (inverted, or the file cut there), a few dozen changes
    escaped as struct.error, NotImplementedError ("Unknown Value Representation") or pydicom's BytesLengthException
    (an internal error), from dcmread or from an element pydicom converted only when the reader first used it."""
    import warnings

    path = write_dicom(tmp_path / "x.dcm", STORED, patient="p1", sex="F", age="045Y")
    data, damaged = path.read_bytes(), tmp_path / "damaged.dcm"
    refused = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                  # pydicom warns of what it reads leniently
        for i in range(len(data)):
            for changed in (data[:i], data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:]):
                damaged.write_bytes(changed)
                for read in (lambda: read_image(damaged, channels=1), lambda: dicom.peek_dicom(damaged),
                             lambda: dicom.read_dicom_header(damaged)):
                    try:
                        read()
                    except UnreadableImage as exc:
                        assert len(str(exc)) < 400, exc          # pydicom's own message quotes the raw bytes
                        assert "(error: " not in str(exc), exc      # struct.error is named as such
                        refused += 1
    assert refused > len(data)


def test_folder_of_dicom_files_takes_patients_from_the_header(tmp_path, write_dicom):
    rng = np.random.default_rng(0)
    for k, cls in enumerate(("normal", "nodule")):
        for i in range(6):
            write_dicom(tmp_path / "cxr" / cls / f"{cls}{i}.dcm", rng.integers(0, 4096, (10, 10)),
                         patient=f"P{i % 4}", sex="MF"[i % 2], age=f"0{40 + i}Y")
    (tmp_path / "cxr" / "normal" / "normal5.dcm").write_bytes(b"DICM but not really")
    with pytest.raises(DataError, match=r"normal/normal5.dcm: image normal/normal5.dcm is not a DICOM file"):
        load_dataset(source="folders", path=tmp_path / "cxr", image_size=8, channels=1, seed=0, n_images=None)
    cut = tmp_path / "cxr" / "nodule" / "nodule5.dcm"       # cut inside its header, before PatientID
    cut.write_bytes(cut.read_bytes()[:300])
    with pytest.raises(DataError, match=r"2 of 12 rows cannot be used \(2 unreadable image\); the first 2:\n  - "
                                        r"nodule/nodule5.dcm: image nodule/nodule5.dcm has no Rows / Columns in its "
                                        r"header: cut short, or not an image"):
        load_dataset(source="folders", path=tmp_path / "cxr", image_size=8, channels=1, seed=0, n_images=None)
    # split seed 1: at seed 0 none of the four patients draws validation (refused, not filled)
    d = load_dataset(source="folders", path=tmp_path / "cxr", image_size=8, channels=1, seed=0, n_images=None,
                     skip_invalid=True, split=SplitPlan(val_fraction=0.25, test_fraction=0.25, seed=1))
    assert d.source["patient_key"]["dicom_patient_id"] == 10 and d.source["left_out_invalid"]["count"] == 2
    ids = [set(s.patient_ids) for s in (d.train, d.val, d.test)]
    assert set().union(*ids) == {"P0", "P1", "P2", "P3"} and not (ids[0] & ids[1] or ids[0] & ids[2] or ids[1] & ids[2])
    assert {"female", "male"} == set(np.concatenate([s.sex for s in (d.train, d.val, d.test)]))
    assert set(np.concatenate([s.age for s in (d.train, d.val, d.test)])) <= {40.0, 41.0, 42.0, 43.0, 44.0, 45.0}


def test_a_folder_of_dicom_files_with_an_anonymiser_s_patient_id_is_refused_naming_it(tmp_path, write_dicom):
    """An export that wrote PatientID "ANONYMOUS" into every header made all its files one patient, refused only as
    too few patients to split; the refusal now names the id, the header and what to do."""
    rng = np.random.default_rng(0)
    for cls in ("normal", "nodule"):
        for i in range(6):
            write_dicom(tmp_path / "cxr" / cls / f"{cls}{i}.dcm", rng.integers(0, 4096, (10, 10)), patient="ANONYMOUS")
    with pytest.raises(DataError, match=r"the patient id 'ANONYMOUS' \(the DICOM headers' PatientID\) holds 12 of 12 "
                                        r"images \(e\.g\. nodule/nodule0\.dcm, .*\), which an anonymiser writes .*"
                                        r"blank the PatientID in these files"):
        load_dataset(source="folders", path=tmp_path / "cxr", image_size=8, channels=1, seed=0, n_images=None)


def test_missing_pydicom_says_how_to_install(tmp_path, monkeypatch):
    path = tmp_path / "x.dcm"
    path.write_bytes(b"\x00" * 200)
    monkeypatch.setitem(sys.modules, "pydicom", None)  # import pydicom now raises ImportError
    with pytest.raises(DataError, match=r"pip install 'dpmed\[dicom\]'") as raised:
        dicom.read_dicom(path)
    assert str(raised.value).startswith(f"{path}: ")           # one stray .dcm among thousands: which one
    (tmp_path / "f" / "a").mkdir(parents=True)
    (tmp_path / "f" / "b").mkdir()
    for name in ("a/1.dcm", "a/2.dcm", "a/3.dcm", "b/1.dcm", "b/2.dcm", "b/3.dcm"):
        (tmp_path / "f" / name).write_bytes(b"\x00" * 200)
    with pytest.raises(DataError, match=r"pip install 'dpmed\[dicom\]'"):  # raised, never a skipped row
        load_dataset(source="folders", path=tmp_path / "f", image_size=8, channels=1, seed=0, n_images=None,
                     skip_invalid=True)


@pytest.mark.parametrize("suffix", [".dcm", ".dicom", ".DCM"])
def test_a_dicom_file_named_like_kermany_still_takes_its_patient_from_the_header(tmp_path, suffix, write_dicom):
    """A viewer's export names files IM-<series>-<image>.dcm, which the Kermany pattern reads as patient IM-<series>:
    the header's PatientID must decide, or each patient's series would scatter over the splits as separate units
    (and the sex and age in the header would be lost). Whatever the suffix's spelling."""
    rng = np.random.default_rng(0)
    for k, cls in enumerate(("normal", "nodule")):
        for p in range(5):
            for series in (1, 2, 3):
                write_dicom(tmp_path / "cxr" / cls / f"P{k}{p}" / f"IM-000{series}-0001{suffix}",
                             rng.integers(0, 4096, (10, 10)), patient=f"P{k}{p}", sex="MF"[p % 2], age="050Y")
    d = load_dataset(source="folders", path=tmp_path / "cxr", image_size=8, channels=1, seed=0, n_images=None,
                     split=SplitPlan(val_fraction=0.2, test_fraction=0.2))
    assert d.source["patient_key"]["dicom_patient_id"] == 30 and d.source["patient_key"]["files_matched"] == 0
    assert d.source["patient_key"]["files_as_own_patient"] == 0     # every file's patient is its header's
    ids = [set(s.patient_ids) for s in (d.train, d.val, d.test)]
    assert set().union(*ids) == {f"P{k}{p}" for k in range(2) for p in range(5)}
    assert not (ids[0] & ids[1] or ids[0] & ids[2] or ids[1] & ids[2])
    assert [len(s.patient_ids) for s in (d.train, d.val, d.test)] == [3 * len(i) for i in ids]  # every series kept
    assert {"female", "male"} == set(np.concatenate([s.sex for s in (d.train, d.val, d.test)]))


def test_a_dicom_file_with_a_blank_patient_id_names_no_patient_whatever_its_name(tmp_path, write_dicom):
    """Anonymised exports blank PatientID: the Kermany pattern must not then read IM-<series> from the name as a
    patient (each real patient scattered over their series); blank beside named files is the mixed layout refused.
    A PatientID's leading and trailing spaces are not significant: " P1" is P1."""
    rng = np.random.default_rng(0)
    for k, cls in enumerate(("normal", "nodule")):
        for p in range(3):
            for series in (1, 2):
                write_dicom(tmp_path / "cxr" / cls / f"P{k}{p}" / f"IM-000{series}-0001.dcm",
                             rng.integers(0, 4096, (10, 10)), patient=" " * series + f"P{k}{p}")
    d = load_dataset(source="folders", path=tmp_path / "cxr", image_size=8, channels=1, seed=0, n_images=None,
                     split=SplitPlan(val_fraction=0.2, test_fraction=0.2))
    ids = set(np.concatenate([s.patient_ids for s in (d.train, d.val, d.test)]))
    assert ids == {f"P{k}{p}" for k in range(2) for p in range(3)}
    write_dicom(tmp_path / "cxr" / "normal" / "P00" / "IM-0003-0001.dcm", rng.integers(0, 4096, (10, 10)),
                 patient="  ")
    with pytest.raises(DataError, match=r"1 of 13 images name no patient \(e.g. normal/P00/IM-0003-0001.dcm\)"):
        load_dataset(source="folders", path=tmp_path / "cxr", image_size=8, channels=1, seed=0, n_images=None)


def test_a_dicom_file_the_system_could_not_open_is_not_cached_as_unreadable(tmp_path, monkeypatch, write_dicom):
    """As for PNG and JPEG (test_cache): an OSError of the system (a full file table) inside pydicom passes through
    the decoder, so the cache does not store the file as "not a readable DICOM file" for every later study."""
    pydicom = pytest.importorskip("pydicom")
    from dpmed.data.cache import decode_images

    rng = np.random.default_rng(0)
    paths = [write_dicom(tmp_path / f"{i}.dcm", rng.integers(0, 4096, (10, 10))) for i in range(4)]
    real = pydicom.dcmread

    def once(path, *args, **kw):
        if str(path) == str(paths[2]) and not kw.get("stop_before_pixels"):
            raise OSError(24, "Too many open files")
        return real(path, *args, **kw)

    monkeypatch.setattr(pydicom, "dcmread", once)
    first = decode_images(paths, Preprocessing(size=(8, 8), channels=1), cache_dir=tmp_path / "cache")
    assert list(first.failures) == [2] and "Too many open files" in first.failures[2]
    assert not list((tmp_path / "cache").glob("*.npy"))


def test_a_broken_link_to_a_dicom_file_is_a_missing_image(tmp_path, write_dicom):
    """Before: the header read's failure came first, "not a readable DICOM file (FileNotFoundError ...)", and the
    missing image's kind and its advice (restore the file, or delete the link) were lost."""
    rng = np.random.default_rng(0)
    for cls in ("normal", "nodule"):
        for i in range(4):
            write_dicom(tmp_path / "cxr" / cls / f"{cls}{i}.dcm", rng.integers(0, 4096, (10, 10)), patient=f"P{i}")
    link = tmp_path / "cxr" / "normal" / "link.dcm"
    try:
        link.symlink_to(tmp_path / "gone.dcm")
    except OSError:
        pytest.skip("this file system cannot make symbolic links")
    with pytest.raises(DataError, match=r"1 of 9 rows cannot be used \(1 missing image\).*\n  - normal/link.dcm: image "
                                        r"normal/link.dcm is a link to \S+gone.dcm, which does not exist"):
        load_dataset(source="folders", path=tmp_path / "cxr", image_size=8, channels=1, seed=0, n_images=None)


def test_a_window_without_its_center_or_its_width_is_no_window(tmp_path, write_dicom):
    """Half a window cannot be applied: the image is stretched by its own range, as a file with none is."""
    pydicom = pytest.importorskip("pydicom")
    for dropped in ("WindowCenter", "WindowWidth"):
        path = write_dicom(tmp_path / f"{dropped}.dcm", STORED, window=(100, 400), function="LINEAR_EXACT")
        ds = pydicom.dcmread(path)
        delattr(ds, dropped)
        ds.save_as(path)
        np.testing.assert_allclose(read_image(path, channels=1)[0], STORED / 4095.0, atol=1e-6, err_msg=dropped)


def test_a_table_its_descriptor_does_not_describe_is_unreadable_not_an_internal_error(tmp_path, write_dicom):
    """A VOI LUT's LUTDescriptor gives its entries' count (0: 65536) and bits. 1000 in an 8-bit table made pydicom
    overflow, and a table shorter than its count made it fail to unpack: internal errors and a traceback, where a
    flagged row is due."""
    path = write_dicom(tmp_path / "overflow.dcm", np.array([[0, 1], [2, 3]]), voi_lut=[0, 85, 255, 1000])
    with pytest.raises(UnreadableImage, match="pixel data cannot be decoded.*OverflowError"):
        read_image(path, channels=1)
    pydicom = pytest.importorskip("pydicom")
    ds = pydicom.dcmread(write_dicom(tmp_path / "short.dcm", np.array([[0, 1], [2, 3]]), voi_lut=[0, 85, 170, 255]))
    ds.VOILUTSequence[0].LUTDescriptor = [0, 0, 16]           # 65536 entries of 16 bits, and 4 in the file
    ds.save_as(tmp_path / "short.dcm")
    with pytest.raises(UnreadableImage, match=r"pixel data cannot be decoded \(struct\.error: unpack"):
        read_image(tmp_path / "short.dcm", channels=1)


@pytest.mark.parametrize(("header", "named"), [(dict(rescale=("inf", 0)), "RescaleSlope inf"),
                                               (dict(rescale=("nan", 0)), "RescaleSlope nan"),
                                               (dict(rescale=("1e308", 0)), "RescaleSlope 1e308"),   # overflows
                                               (dict(rescale=(1, "-inf")), "RescaleIntercept -inf"),
                                               (dict(window=("nan", 400)), "got nan and 400"),
                                               (dict(window=(100, "inf")), "got 100.0 and inf"),
                                               (dict(window=(100, "nan"), function="SIGMOID"), "got 100.0 and nan")])
@pytest.mark.filterwarnings("ignore:Invalid value for VR DS")   # writing such a header, as a scanner might
def test_a_header_whose_grey_transforms_give_no_finite_value_is_unreadable(tmp_path, header, named, write_dicom):
    """Before, a WindowCenter of nan gave an image of nan (which would reach training), an infinite WindowWidth a
    uniform grey, and an overflowing RescaleSlope a wrapped-around integer."""
    path = write_dicom(tmp_path / "odd.dcm", STORED, **header)
    # and nothing else: pydicom's "Invalid value for VR DS" and numpy's "overflow encountered" printed library lines
    # without the file's name beside dpmed's own message
    with warnings.catch_warnings(), pytest.raises(UnreadableImage, match=f"decoded.*{re.escape(named)}"):
        warnings.simplefilter("error")
        read_image(path, channels=1)


@pytest.mark.parametrize(("function", "width", "said"), [
    ("SIGMOID", 0, "SIGMOID window needs WindowWidth > 0, got 0.0"),
    ("LINEAR_EXACT", 0, "LINEAR_EXACT window needs WindowWidth > 0, got 0.0"),
    (None, 0.5, "LINEAR window needs WindowWidth >= 1, got 0.5"),
])
def test_a_window_narrower_than_its_function_allows_is_unreadable_naming_the_width(tmp_path, function, width, said,
                                                                                 write_dicom):
    """PS3.3 C.11.2.1.2 defines each function for its widths only: a width of 0 would divide by zero."""
    path = write_dicom(tmp_path / "narrow.dcm", STORED, window=(100, width), function=function)
    with pytest.raises(UnreadableImage) as err:
        read_image(path, channels=1)
    assert str(err.value) == f"pixel data cannot be decoded (ValueError: {said})"


def test_a_photometric_interpretation_dpmed_does_not_read_is_named(tmp_path, write_dicom):
    """A retired CMYK file's samples are no grey nor RGB: read as either they would be no image."""
    path = write_dicom(tmp_path / "cmyk.dcm", STORED, photometric="CMYK")
    with pytest.raises(UnreadableImage) as err:
        read_image(path, channels=1)
    assert str(err.value) == ("has PhotometricInterpretation 'CMYK'; dpmed reads MONOCHROME1, MONOCHROME2, "
                              "PALETTE COLOR, RGB and YBR")


def _palette_file(path, write_dicom, tables) -> Path:
    """An 8-bit PALETTE COLOR file of indices 0..11 and, per channel, a table of 256 16-bit entries (or none)."""
    pydicom = pytest.importorskip("pydicom")
    write_dicom(path, np.arange(12, dtype=np.uint8).reshape(3, 4), photometric="PALETTE COLOR", bits=(8, 8))
    ds = pydicom.dcmread(path)
    for c, table in enumerate(tables):
        ds.add_new(0x00281101 + c, "US", [256, 0, 16])      # Red, Green, Blue descriptor: entries, first index, bits
        ds.add_new(0x00281201 + c, "OW", np.asarray(table, dtype=np.uint16).tobytes())
    ds.save_as(path, enforce_file_format=True)
    return path


def test_a_palette_colour_file_is_read_through_its_tables(tmp_path, write_dicom):
    """Refused before, though pydicom looks its indices up in a few lines. Index i reads each table's entry i
    / 65535 (16-bit entries); a palette of greys is one channel, as any colour file of equal channels."""
    index = np.arange(256)
    tables = [index * 200, 65535 - index * 200, np.full(256, 30000)]
    x = read_image(_palette_file(tmp_path / "palette.dcm", write_dicom, tables), channels=None)
    stored = np.arange(12).reshape(3, 4)
    np.testing.assert_allclose(x, np.stack([np.asarray(t)[stored] / 65535 for t in tables]), atol=1e-6)
    assert peek_image(tmp_path / "palette.dcm") == (3, (3, 4))
    grey = read_image(_palette_file(tmp_path / "grey.dcm", write_dicom, [index * 257] * 3), channels=None)
    np.testing.assert_allclose(grey, (stored * 257 / 65535)[None], atol=1e-6)
    with pytest.raises(UnreadableImage, match=r"^is PALETTE COLOR but its header holds no palette \(Red, Green and "
                                              r"Blue Palette Color Lookup Table Descriptor and Data\); export it "
                                              r"again as RGB or grey$"):
        read_image(_palette_file(tmp_path / "bare.dcm", write_dicom, []), channels=1)


def test_a_palette_with_an_opacity_table_is_read_as_its_three_colours(tmp_path, write_dicom):
    """The Palette Color Lookup Table module may carry an Alpha table (0028,1204) beside the colours; pydicom then
    returns four channels, which were refused as a shape dpmed does not read. Opacity is no colour: the three are
    kept, as a viewer without a background to blend shows them."""
    pydicom = pytest.importorskip("pydicom")
    index = np.arange(256)
    tables = [index * 200, 65535 - index * 200, np.full(256, 30000)]
    path = _palette_file(tmp_path / "alpha.dcm", write_dicom, tables)
    ds = pydicom.dcmread(path)
    ds.add_new(0x00281204, "OW", np.full(256, 65535, dtype=np.uint16).tobytes())
    ds.save_as(path, enforce_file_format=True)
    stored = np.arange(12).reshape(3, 4)
    x = read_image(path, channels=None)
    np.testing.assert_allclose(x, np.stack([np.asarray(t)[stored] / 65535 for t in tables]), atol=1e-6)


@pytest.mark.parametrize("frames", [1, None])
def test_a_frame_count_of_one_or_left_empty_is_a_single_frame(tmp_path, frames, write_dicom):
    pydicom = pytest.importorskip("pydicom")
    path = write_dicom(tmp_path / "one.dcm", STORED, window=(100, 400), function="LINEAR_EXACT", frames=1)
    ds = pydicom.dcmread(path)
    ds.NumberOfFrames = frames                    # None: the element present and empty
    ds.save_as(path)
    with warnings.catch_warnings():               # pydicom's "is invalid, assuming 1 frame" is ours to say, or not
        warnings.simplefilter("error")
        decoded = decode_images([path], Preprocessing(channels=1))
    assert decoded.failures == {}
    np.testing.assert_allclose(decoded.images[0, 0], [[0.25, 0.5], [0.75, 1.0]], atol=1e-6)


def test_a_header_pydicom_warns_of_is_read_without_its_warning_and_leaves_the_warning_filters_as_they_were(
        tmp_path, write_dicom):
    """A PatientID longer than DICOM's 64 characters (an anonymiser's hash, say) made pydicom print "The value length
    (80) exceeds the maximum length of 64" while the header was read, a library line that names no file; and reading
    quiets such lines for itself only, not for the rest of the process (no hidden global effects)."""
    long_id = "p" * 80
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # writing it warns too
        path = write_dicom(tmp_path / "long_id.dcm", STORED, patient=long_id)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with dicom.quiet_pydicom():             # as the folder reader reads the headers
            assert dicom.read_dicom_header(path)["PatientID"] == long_id
        assert decode_images([path], Preprocessing(channels=1)).failures == {}
    before = list(warnings.filters)
    decode_images([path], Preprocessing(channels=1))
    assert warnings.filters == before


def test_dicom_files_decoded_in_threads_are_quieted_once_in_the_calling_thread(tmp_path, write_dicom, monkeypatch):
    """Before, each decoding thread opened its own warnings.catch_warnings, which is not thread-safe: the threads save
    and restore the one process-wide filter list, so an exit that interleaves with another thread's leaves the
    "ignore" filter in place for the rest of the process, or drops the filters of a thread still decoding."""
    import threading

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # writing it warns too
        paths = [write_dicom(tmp_path / f"{i}.dcm", STORED + i, patient="p" * 80) for i in range(6)]
    entered = []
    real = warnings.catch_warnings

    class Recorded(real):
        def __enter__(self):
            entered.append(threading.current_thread())
            return super().__enter__()

    monkeypatch.setattr(warnings, "catch_warnings", Recorded)
    with real():
        warnings.simplefilter("error")           # pydicom's warning, leaked from a thread, fails that file's decode
        before = list(warnings.filters)
        decoded = decode_images(paths, Preprocessing(size=(2, 2), channels=1), workers=3)
        assert warnings.filters == before
    assert decoded.failures == {} and decoded.images.shape == (6, 1, 2, 2)
    assert entered and set(entered) == {threading.current_thread()}


def test_pydicom_s_warning_is_not_logged_either_where_dpmed_logs_to_the_terminal(tmp_path, write_dicom, caplog):
    """pydicom says each warning twice, as a warning and on its "pydicom" logger; `dpmed run` shows every library's
    log lines (a handler on the root logger), so "The value length (80) exceeds the maximum length of 64" still
    reached the terminal, once per file and naming none, while the warning itself was silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # writing it warns too
        paths = [write_dicom(tmp_path / f"{i}.dcm", STORED, patient="p" * 80) for i in range(2)]
    caplog.clear()                               # writing it logs too
    assert decode_images(paths, Preprocessing(channels=1)).failures == {}
    assert [r.getMessage() for r in caplog.records if r.name.startswith("pydicom")] == []
    assert logging.getLogger("pydicom").filters == []        # and nothing is left on its logger


_NO_PLUGIN = ("pylibjpeg", "gdcm", "jpeg_ls")


@pytest.mark.parametrize("name, syntax, package", [
    ("JPGExtended.dcm", "JPEG Extended", "pylibjpeg-libjpeg"),          # 12-bit: Pillow tries it, and cannot
    ("SC_rgb_jpeg_gdcm.dcm", "JPEG Lossless", "pylibjpeg-libjpeg"),
    ("MR_small_jpeg_ls_lossless.dcm", "JPEG-LS Lossless", "pylibjpeg-libjpeg"),
])
def test_a_compressed_file_no_installed_decoder_reads_names_the_package_that_decodes_it(name, syntax, package):
    """Before: pydicom's message of several lines ("Unable to decode as exceptions were raised by all available
    plugins: ...", or a list of plugins and the versions they require), which for 12-bit JPEG named no package."""
    pydicom = pytest.importorskip("pydicom")
    import importlib.util

    if any(importlib.util.find_spec(module) for module in _NO_PLUGIN):
        pytest.skip("a decoder plugin of pydicom is installed")
    path = pydicom.data.get_testdata_file(name)
    with pytest.raises(UnreadableImage) as caught:
        read_image(Path(path), channels=None)
    said = str(caught.value)
    assert "\n" not in said and len(said) < 400, said
    assert syntax in said and f"pip install pylibjpeg {package}" in said and "python-gdcm" in said, said


@pytest.mark.parametrize("key, value, said", [
    ("NumberOfFrames", "1A", "NumberOfFrames '1A'"),     # pydicom's own test file badVR.dcm holds this
    ("WindowCenter", ["", "100"], "WindowCenter ['', 100], which is not a number"),
    ("WindowWidth", "wide", "WindowWidth 'wide', which is not a number"),
])
def test_a_header_value_that_is_no_number_is_unreadable_naming_the_key(tmp_path, key, value, said, write_dicom):
    """Before: an IS of '1A' escaped as ValueError (a traceback), and a window of no number was "pixel data cannot
    be decoded (ValueError: could not convert string to float: '')", naming neither key."""
    pydicom = pytest.importorskip("pydicom")
    path = write_dicom(tmp_path / "x.dcm", STORED, window=(100, 400))
    ds = pydicom.dcmread(path)
    if key == "NumberOfFrames":
        ds.add_new(0x00280008, "IS", None)
    ds[key]._value = value                      # as a file on disk may hold it; pydicom refuses to set it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.save_as(path)
        with pytest.raises(UnreadableImage, match=re.escape(said)):
            read_image(path, channels=1)


def test_a_window_present_and_empty_is_no_window(tmp_path, write_dicom):
    """An empty value says the value is unknown (PS3.5 7.4): stretched by the image's range, as without a window.
    Before: float(None) escaped as a TypeError, a traceback."""
    pydicom = pytest.importorskip("pydicom")
    path = write_dicom(tmp_path / "x.dcm", STORED, window=(100, 400))
    ds = pydicom.dcmread(path)
    ds.WindowCenter = None
    ds.save_as(path)
    np.testing.assert_allclose(read_image(path, channels=1)[0], STORED / 4095.0, atol=1e-6)


def test_pixel_padding_is_left_out_of_the_image_s_range_and_reads_black(tmp_path, write_dicom):
    """PixelPaddingValue (PS3.3 C.7.5.1.1.2) marks the pixels outside the patient (a CT's round field in a square
    image, a cropped radiograph's border): not data. Before, a padding of 0 set the stretch's black, and the patient's
    values 1000..1400 were squeezed into 0.71..1."""
    pydicom = pytest.importorskip("pydicom")
    stored = np.array([[0, 1000], [1200, 1400]], dtype=np.uint16)
    for photometric, padding in (("MONOCHROME2", 0), ("MONOCHROME1", 4095)):
        path = write_dicom(tmp_path / f"{photometric}.dcm", np.where(stored == 0, padding, stored),
                           photometric=photometric)
        ds = pydicom.dcmread(path)
        ds.add_new(0x00280120, "US", padding)
        ds.save_as(path)
        expected = np.array([[0.0, 0.0], [0.5, 1.0]])
        expected = expected if photometric == "MONOCHROME2" else np.array([[0.0, 1.0], [0.5, 0.0]])
        np.testing.assert_allclose(read_image(path, channels=1)[0], expected, atol=1e-6, err_msg=photometric)


def test_a_dicom_file_without_its_preamble_is_read(tmp_path, write_dicom):
    """Some exporters write the file meta or the bare data set from their first byte, without the 128-byte preamble
    and "DICM" (PS3.10 7.1); pydicom reads them only when told to. Before, refused as "not a readable DICOM file ...
    Use force=True to force reading", words the user cannot act on."""
    pydicom = pytest.importorskip("pydicom")
    path = write_dicom(tmp_path / "x.dcm", STORED, window=(100, 400), patient="p1")
    meta_first = tmp_path / "meta_first.dcm"
    meta_first.write_bytes(path.read_bytes()[132:])         # the file meta from the first byte
    bare = tmp_path / "bare.dcm"                            # the data set alone, implicit VR (ACR-NEMA style)
    ds = pydicom.dcmread(path)
    del ds.file_meta
    ds.preamble = None
    pydicom.dcmwrite(bare, ds, implicit_vr=True, little_endian=True, enforce_file_format=False)
    assert bare.read_bytes()[:2] == b"\x08\x00"
    for written in (meta_first, bare):
        np.testing.assert_array_equal(read_image(written, channels=1), read_image(path, channels=1))
        assert dicom.peek_dicom(written) == (1, (2, 2))
        assert dicom.read_dicom_header(written)["PatientID"] == "p1"
    bundled = Path(pydicom.data.get_testdata_file("ExplVR_LitEndNoMeta.dcm"))    # a data set with no image in it
    with pytest.raises(UnreadableImage, match="DICOM file without pixel data"):
        read_image(bundled, channels=1)


@pytest.mark.parametrize("content, said", [
    (b"\x89PNG\r\n\x1a\n" + b"\x00" * 200, "a PNG image"),
    (b"\xff\xd8\xff\xe0" + b"\x00" * 200, "a JPEG image"),
    (b"PatientID,label\n1,0\n" * 20, "not a DICOM file"),
])
def test_a_dcm_file_that_is_not_dicom_says_so_without_pydicom_s_advice(tmp_path, content, said):
    """Before: "File is missing DICOM File Meta Information header ... Use force=True to force reading", which
    names an argument of a library the user does not call."""
    pytest.importorskip("pydicom")
    path = tmp_path / "x.dcm"
    path.write_bytes(content)
    with pytest.raises(UnreadableImage) as caught:
        read_image(path, channels=1)
    assert said in str(caught.value) and "force" not in str(caught.value), caught.value


def test_a_dicom_declaring_more_pixels_than_pillow_decodes_is_refused_before_decoding(tmp_path, write_dicom,
                                                                                        monkeypatch):
    """A deflated DICOM of 125 kB declaring 8,000 x 8,000 zeros took 1.8 GB to read; at 30,000 x 30,000 it would take
    tens of GB. Rasters were refused above twice Pillow's limit, DICOM files at any size: the same limit holds now."""
    from PIL import Image

    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)          # 15 x 15 = 225 px: over twice the limit
    large, small = (write_dicom(tmp_path / f"{n}.dcm", np.zeros((n, n))) for n in (15, 14))
    with pytest.raises(UnreadableImage, match=r"declares 15 x 15 pixels, more than the 200 dpmed decodes"):
        read_image(large, channels=1)
    assert read_image(small, channels=1).shape == (1, 14, 14)    # 196 px: within it


def test_a_dicom_whose_compressed_image_is_larger_than_its_header_says_is_not_told_to_install_a_decoder(
        tmp_path, monkeypatch):
    """The header's Rows x Columns is checked before decoding, but a JPEG codestream says its own size: a header of
    16 x 16 over a 64 x 64 codestream passed that check and Pillow refused it as a decompression bomb, which was told
    as "no installed decoder reads it; install pylibjpeg", a decoder with no such guard. It is refused as the
    oversized image it is: from the codestream's own header before decoding, and by Pillow's refusal where that
    header cannot be found first (as for a JPEG that states its height only in a DNL marker; here that check is
    left out)."""
    pydicom = pytest.importorskip("pydicom")
    import io

    from PIL import Image
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.encaps import encapsulate

    codestream = io.BytesIO()
    Image.fromarray(np.full((64, 64), 100, np.uint8)).save(codestream, "JPEG")
    meta = FileMetaDataset()
    meta.TransferSyntaxUID = pydicom.uid.JPEGBaseline8Bit
    meta.MediaStorageSOPClassUID = "1.2.840.10008.5.1.4.1.1.7"
    meta.MediaStorageSOPInstanceUID = pydicom.uid.generate_uid()
    ds = Dataset()
    ds.file_meta = meta
    ds.SOPClassUID = meta.MediaStorageSOPClassUID
    ds.Rows = ds.Columns = 16
    ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 8, 8, 7, 0
    ds.PixelData = encapsulate([codestream.getvalue()], fragments_per_frame=8)     # 48 bytes before the SOF
    ds["PixelData"].VR = "OB"
    path = tmp_path / "lies.dcm"
    ds.save_as(path, enforce_file_format=True)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)        # 16 x 16 = 256 px within 2,000; 64 x 64 beyond it
    for sized_first in (True, False):
        if not sized_first:
            monkeypatch.setattr(dicom, "refuse_large_codestream", lambda ds: None)
        with pytest.raises(UnreadableImage) as caught:
            read_image(path, channels=1)
        said = str(caught.value)
        held = "64 x 64 (1 component), " if sized_first else ""
        assert f"declares 16 x 16 pixels, but its compressed pixel data hold {held}more than the 2,000" in said, said
        assert "pip install" not in said, said


def test_pixel_data_holding_more_frames_than_its_header_declares_is_refused_before_decoding(tmp_path, write_dicom):
    """pydicom returns every frame uncompressed pixel data hold, whatever NumberOfFrames says, and dpmed converted
    them all to float before finding the shape wrong: 100 MB of pixel data under a header of one 16 x 16 frame (in
    a deflated file of 97 kB) took 2.2 GB. A second frame is refused from the data's length; a pad byte is not one."""
    pydicom = pytest.importorskip("pydicom")
    path = write_dicom(tmp_path / "frames.dcm", np.zeros((16, 16)))
    ds = pydicom.dcmread(path)
    ds.PixelData = bytes(2 * 16 * 16 * 2)
    ds.save_as(path, enforce_file_format=True)
    with pytest.raises(UnreadableImage, match=r"holds 1,024 bytes of pixel data, 2 frames of the 16 x 16 pixels "
                                              r"\(16 bits each\) its header declares"):
        read_image(path, channels=1)
    ds.PixelData = bytes(16 * 16 * 2 + 2)
    ds.save_as(path, enforce_file_format=True)
    with dicom.quiet_pydicom():                                   # its warning of the padding dropped
        assert read_image(path, channels=1).shape == (1, 16, 16)


@pytest.mark.parametrize("syntax", ["1.2.840.10008.1.2.1", "1.2.840.10008.1.2.4.70"])    # uncompressed, JPEG
def test_a_dicom_whose_pixel_data_element_is_empty_is_unreadable_by_name(tmp_path, write_dicom, syntax):
    """A Pixel Data element of length 0 reads as None in pydicom: the sizing of the frames and of the codestream
    took its length, and a TypeError escaped as a traceback instead of the file's flagged row."""
    pydicom = pytest.importorskip("pydicom")
    path = write_dicom(tmp_path / "empty.dcm", np.zeros((16, 16)))
    ds = pydicom.dcmread(path)
    ds.file_meta.TransferSyntaxUID = syntax
    ds.PixelData = pydicom.encaps.encapsulate([b"\xff\xd8\xff\xd9"])
    ds["PixelData"].VR = "OB"
    ds.save_as(path, enforce_file_format=True)
    raw = path.read_bytes()
    at = raw.rindex(b"\xe0\x7f\x10\x00OB")
    path.write_bytes(raw[:at + 8] + bytes(4))               # the element's 4-byte length, 0, and no value
    assert pydicom.dcmread(path).PixelData is None
    with pytest.raises(UnreadableImage, match="Pixel Data element is empty"):
        read_image(path, channels=1)


_HELD = np.random.default_rng(7).choice(np.arange(-3000, 3000, 2), size=(24, 40))    # even values only, some absent


@pytest.mark.parametrize("stored, kwargs", [
    (_HELD + 3000, {}),                                                      # 12 bits, stretched
    (_HELD * 10 + 32768, {"bits": (16, 16)}),                                # 16 bits, full range
    (_HELD, {"bits": (16, 16), "signed": True}),                             # signed, across zero
    (_HELD, {"bits": (16, 12), "signed": True, "rescale": (0.1, -1024.3), "window": (-1100, 333)}),
    (_HELD + 3000, {"rescale": (0.5, -1024), "window": (40, 400), "function": "LINEAR_EXACT"}),
    (_HELD + 3000, {"rescale": (1.7, 3.3), "window": (2000, 3000), "function": "SIGMOID"}),
    (_HELD + 3000, {"photometric": "MONOCHROME1", "window": (3000, 1500)}),
    (_HELD + 3000, {"padding": 3000 + int(_HELD[0, 0])}),                   # padding left out of the range
    (_HELD + 3000, {"photometric": "MONOCHROME1", "rescale": (0.5, 0), "voi_lut": list(range(0, 256, 2)) * 8}),
    ((_HELD + 3000) // 24, {"bits": (8, 8)}),
])
def test_grey_pixels_by_their_values_equal_the_pipeline_on_every_pixel(tmp_path, stored, kwargs, write_dicom):
    """The grey pipeline runs once per stored value an image holds (`dicom._grey`) and must give the very float32
    pixels it gives run on every pixel, bit for bit: a study's private fingerprint of its images is exact, and a
    resumed study would otherwise refuse its finished runs as trained on other files."""
    import pydicom

    path = write_dicom(tmp_path / "a.dcm", stored, **kwargs)
    ds = pydicom.dcmread(path)
    every_pixel = dicom._grey_values(ds, ds.pixel_array)[None]
    decoded = dicom.read_dicom(path)
    assert decoded.dtype == np.float32 and len(np.unique(decoded)) > 2
    np.testing.assert_array_equal(decoded, every_pixel)


@pytest.mark.parametrize("name", ["MR_small_bigendian.dcm", "MR_small.dcm", "CT_small.dcm", "MR_small_RLE.dcm"])
def test_pydicom_s_grey_files_by_their_values_equal_the_pipeline_on_every_pixel(name):
    """As above, on pydicom's own files: big-endian stored values (their array's byte order is not this machine's),
    a CT's signed values and rescale, RLE-compressed 16-bit values."""
    pydicom = pytest.importorskip("pydicom")
    path = Path(pydicom.data.get_testdata_file(name))
    ds = pydicom.dcmread(path)
    np.testing.assert_array_equal(dicom.read_dicom(path), dicom._grey_values(ds, ds.pixel_array)[None])


@pytest.mark.parametrize("low, signed", [(0, False), (1000, False), (-2000, True)])
def test_a_large_grey_dicom_is_decoded_without_float64_copies_of_it(tmp_path, write_dicom, low, signed):
    """The decoded image is float32; a float64 copy of it (the modality values, the window's output) is twice that.
    Python's heap at its peak while one 1,500 x 1,500 16-bit file is read: the file's bytes, its stored values and the
    float32 output, about 2 x the output (7 x before the grey pipeline ran per stored value). Values from ``low``
    (a CT's are signed; a radiograph's lowest is seldom 0): their offsets from it took a copy more, 2.5 x."""
    import tracemalloc

    stored = np.random.default_rng(0).integers(low, low + 30000, (1500, 1500))
    path = write_dicom(tmp_path / "big.dcm", stored, bits=(16, 16), signed=signed, rescale=(0.1, -1024),
                       window=(30, 4000))
    tracemalloc.start()
    try:
        decoded = dicom.read_dicom(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert decoded.shape == (1, 1500, 1500)
    assert peak < 2.25 * decoded.nbytes, f"{peak / decoded.nbytes:.2f} x the decoded image"


@pytest.mark.parametrize("key, dtype", [("FloatPixelData", np.float32), ("DoubleFloatPixelData", np.float64)])
def test_a_dicom_of_float_pixel_data_is_refused_as_such(tmp_path, write_dicom, key, dtype):
    """Float Pixel Data (a parametric map) were told as "without pixel data (a report or a structured document?)",
    which sent the user looking for a report."""
    import pydicom

    path = write_dicom(tmp_path / "a.dcm", np.zeros((4, 4)))
    ds = pydicom.dcmread(path)
    del ds.PixelData, ds.BitsStored, ds.HighBit, ds.PixelRepresentation
    ds.BitsAllocated = 8 * np.dtype(dtype).itemsize
    setattr(ds, key, np.linspace(0, 1, 16, dtype=dtype).tobytes())
    ds.save_as(path)
    with pytest.raises(UnreadableImage, match=f"holds its pixels as {key} .*integer Pixel Data"):
        read_image(path, channels=1)
