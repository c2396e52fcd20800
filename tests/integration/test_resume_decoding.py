"""A folder whose runs an older dpmed's decoder read (`dpmed.data.version`): grey radiographs saved as RGB JPEGs,
once 3 channels and now 1 where data.channels is unset, and 16-bit PNGs of 12-bit values, once divided by 65535 and
now stretched per image. Before, resuming such a folder was refused as other data, blaming "a file was changed or
replaced" where none was; the refusal now says that this dpmed decodes the files otherwise, how, and what reads them
as before. The folder stays readable, and its finished runs are never mixed nor lost."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from dpmed.cli import main
from dpmed.data.version import DECODING_VERSION
from dpmed.states import read_resolved

STUDY = """
name: old
data: {{source: folders, path: {path}}}
training: {{epochs: 1, batch_size: 8, threads: 2}}
evaluation: {{bootstrap_resamples: 20, explanations: null}}
arms: [{{name: base, mechanism: none}}]
"""


def _write_folders(root: Path, kind: str) -> Path:
    """train/val/test class folders of 12 x 12 noise images (a bright square marks PNEUMONIA): grey saved as RGB
    JPEGs (R = G = B) for ``rgb``, 16-bit grey PNGs holding 12-bit values (0..4080) for ``png16``."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for split, n in (("train", 12), ("val", 4), ("test", 4)):
        for label in ("NORMAL", "PNEUMONIA"):
            folder = root / split / label
            folder.mkdir(parents=True)
            for i in range(n):
                grey = rng.integers(0, 200, (12, 12)).astype(np.uint8)
                grey[3:8, 3:8] = 255 if label == "PNEUMONIA" else grey[3:8, 3:8]
                if kind == "rgb":
                    Image.fromarray(np.stack([grey] * 3, axis=-1)).save(folder / f"{i}.jpeg", quality=95)
                else:
                    Image.fromarray(grey.astype(np.uint16) * 16).save(folder / f"{i}.png")
    return root


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A function: (study file, output folder) of the study finished on ``kind``'s images, copied afresh."""
    made: dict[str, tuple[Path, Path]] = {}

    def copy(kind: str, tmp_path: Path, *extra: str) -> tuple[Path, Path]:
        if kind not in made:
            base = tmp_path_factory.mktemp(kind)
            study = base / "s.yaml"
            study.write_text(STUDY.format(path=_write_folders(base / "data", kind)))
            assert main(["run", str(study), "--out", str(base / "out"), "--no-progress", *extra]) == 0
            made[kind] = study, base / "out"
        study, out = made[kind]
        shutil.copytree(out, tmp_path / "out")
        return study, tmp_path / "out"

    return copy


def _as_decoded_by_an_older_dpmed(root: Path, *, channels_unset: bool = False) -> None:
    """Rewrite study.yaml as a dpmed before the decoding version wrote it (no ``decoding_version``), and, with
    ``channels_unset``, as a study without data.channels (which that dpmed read as stored)."""
    path = root / "study.yaml"
    data = yaml.safe_load(path.read_text())
    del data["dataset"]["decoding_version"]
    if channels_unset:
        data["study"]["data"]["channels"] = None
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def _records(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in root.glob("runs/*/run.json")}


def test_grey_rgb_jpegs_an_older_dpmed_read_as_colour_name_the_decoder_and_data_channels_3(finished, tmp_path, capsys):
    """The older dpmed read these JPEGs as stored (3 channels), as data.channels: 3 reads them now: so the folder is
    finished with data.channels: 3 and written back as that dpmed's."""
    study, out = finished("rgb", tmp_path, "--set", "data.channels=3")
    root = out / "old"
    assert read_resolved(root).dataset.decoding_version == DECODING_VERSION
    _as_decoded_by_an_older_dpmed(root, channels_unset=True)
    assert read_resolved(root).dataset.decoding_version == 1
    records = _records(root)
    for command in (["status", str(root)], ["report", str(root)]):       # an old folder stays readable
        assert main(command) == 0, command
    capsys.readouterr()
    assert main(["run", str(study), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "dataset.image_shape: [3, 12, 12] in the finished runs, [1, 12, 12] now" in err, err
    assert "this dpmed decodes image files otherwise than the one that finished the runs" in err, err
    assert "three channels are equal is read as 1 channel where data.channels is unset" in err, err
    assert "set data.channels: 3 to read the images as the finished runs did" in err, err
    assert "a file was changed" not in err and "Traceback" not in err, err
    assert _records(root) == records
    assert main(["run", str(study), "--out", str(out), "--no-progress", "--set", "data.channels=3"]) == 0
    assert "1 finished earlier" in capsys.readouterr().out
    assert _records(root) == records
    assert read_resolved(root).dataset.decoding_version == DECODING_VERSION     # read now as that dpmed read them


def test_16_bit_pngs_an_older_dpmed_divided_by_65535_name_the_decoder_not_a_changed_file(finished, tmp_path, capsys):
    """No setting reads them as the older dpmed did: the refusal says so. The fingerprint of what it read is not one
    this dpmed can compute: any other fingerprint stands for it. A folder of this decoder keeps blaming a file."""
    study, out = finished("png16", tmp_path)
    root = out / "old"
    (root / "private" / "data_fingerprint").write_text("0" * 64)      # the pixels / 65535 the older dpmed read
    records = _records(root)
    capsys.readouterr()
    assert main(["run", str(study), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "a file was changed or replaced" in err and "decodes image files otherwise" not in err, err
    _as_decoded_by_an_older_dpmed(root)
    assert main(["run", str(study), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "the images, labels or patient ids differ, with the same sizes and shape" in err, err
    assert "16-bit grey PNG and TIFF samples are stretched by each image's own min and max" in err, err
    assert "finish them with the dpmed that made them" in err and "--out" in err, err
    assert "a file was changed" not in err and "data.channels: 3" not in err, err
    assert _records(root) == records


def test_palette_dicom_an_older_dpmed_left_out_names_the_decoder_not_a_changed_file(tmp_path, write_dicom,
                                                                                   monkeypatch, capsys):
    """An older dpmed refused PALETTE COLOR files, and data.skip_invalid left them out of the runs; this one reads
    them, so the same folder of files holds more training images. The refusal must say that the decoder changed,
    not that someone changed a file."""
    pydicom = pytest.importorskip("pydicom")
    from dpmed.data import dicom
    from dpmed.data.decoding import UnreadableImage

    rng = np.random.default_rng(0)
    for split, n in (("train", 12), ("val", 4), ("test", 4)):
        for label in ("NORMAL", "PNEUMONIA"):
            for i in range(n):
                grey = rng.integers(0, 200, (12, 12)).astype(np.uint8)
                grey[3:8, 3:8] = 255 if label == "PNEUMONIA" else grey[3:8, 3:8]
                write_dicom(tmp_path / "data" / split / label / f"{i}.dcm", grey, bits=(8, 8),
                            patient=f"{split}{label}{i}")
    palette = write_dicom(tmp_path / "data" / "train" / "NORMAL" / "palette.dcm", np.arange(144, dtype=np.uint8)
                          .reshape(12, 12), photometric="PALETTE COLOR", bits=(8, 8), patient="trainNORMALpalette")
    ds = pydicom.dcmread(palette)
    for c in range(3):                                                # a palette of greys: one channel, as the rest
        ds.add_new(0x00281101 + c, "US", [256, 0, 16])
        ds.add_new(0x00281201 + c, "OW", (np.arange(256, dtype=np.uint16) * 257).tobytes())
    ds.save_as(palette, enforce_file_format=True)
    study = tmp_path / "s.yaml"
    study.write_text(STUDY.format(path=tmp_path / "data").replace("path:", "skip_invalid: true, path:"))

    def refused(ds, stored):                                          # as every dpmed before the palette was read
        raise UnreadableImage("has PhotometricInterpretation 'PALETTE COLOR'; dpmed reads MONOCHROME1, "
                              "MONOCHROME2, RGB and YBR")

    with monkeypatch.context() as patch:
        patch.setattr(dicom, "_palette", refused)
        assert main(["run", str(study), "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    root = tmp_path / "out" / "old"
    data = yaml.safe_load((root / "study.yaml").read_text())
    data["dataset"]["decoding_version"] = 5                           # the last decoder that refused the palette
    (root / "study.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    records = _records(root)
    capsys.readouterr()
    assert main(["run", str(study), "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "this dpmed decodes image files otherwise than the one that finished the runs" in err, err
    assert "PALETTE COLOR" in err and "a file was changed" not in err and "Traceback" not in err, err
    assert _records(root) == records
