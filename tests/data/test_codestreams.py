"""The sizes of compressed DICOM pixel data found before decoding (`dpmed.data.codestreams`): a deflated data set
inflated in bounded memory, and a JPEG or JPEG 2000 codestream's own stated size, each through `read_image`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dpmed.data import dicom
from dpmed.data.decoding import UnreadableImage, read_image


def _deflated(pydicom, path: Path) -> Path:
    """``path`` saved again in the Deflated Explicit VR Little Endian transfer syntax."""
    ds = pydicom.dcmread(path)
    ds.file_meta.TransferSyntaxUID = pydicom.uid.DeflatedExplicitVRLittleEndian
    ds.save_as(path, enforce_file_format=True)
    return path


def test_a_deflated_dicom_is_refused_before_it_inflates_beyond_what_the_largest_image_takes(tmp_path, write_dicom,
                                                                                           monkeypatch):
    """pydicom inflates a deflated data set whole before any header value can be checked, for the header alone too:
    a 32 kB file of zeros under a header of 16 x 16 pixels took 64 MB to read, 1,000 times its size. A data set that
    inflates beyond 4 bytes for each pixel dpmed decodes from any image is refused first, in bounded memory; one
    within it reads as before, and one cut short is unreadable by name (zlib's error escaped)."""
    import tracemalloc

    from PIL import Image

    pydicom = pytest.importorskip("pydicom")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 10_000)    # 20,000 px: data sets of at most 80,000 bytes
    image = np.arange(64 * 64, dtype=np.uint16).reshape(64, 64)
    small = _deflated(pydicom, write_dicom(tmp_path / "small.dcm", image))
    np.testing.assert_allclose(read_image(small, channels=1)[0], image / image.max(), atol=1e-6)
    bomb = write_dicom(tmp_path / "bomb.dcm", np.zeros((16, 16)))
    ds = pydicom.dcmread(bomb)
    ds.PixelData = bytes(32 * 2**20)
    ds.save_as(bomb, enforce_file_format=True)
    bomb = _deflated(pydicom, bomb)
    assert bomb.stat().st_size < 100_000
    for read in (lambda p: read_image(p, channels=1), dicom.peek_dicom, dicom.read_dicom_header):
        tracemalloc.start()
        try:
            with pytest.raises(UnreadableImage,
                               match=r"inflates to more than the 80,000 bytes dpmed reads from one DICOM file"):
                read(bomb)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 8 * 2**20, peak
    cut = tmp_path / "cut.dcm"
    cut.write_bytes(small.read_bytes()[:-16])
    with pytest.raises(UnreadableImage, match="is not a readable DICOM file"):
        read_image(cut, channels=1)


def _encapsulated(pydicom, path: Path, codestream: bytes, syntax: str, size: int = 16, fragments: int = 1) -> Path:
    """A single-frame 8-bit grey DICOM file of ``size`` x ``size`` pixels whose pixel data are ``codestream``, in
    ``fragments`` items."""
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.encaps import encapsulate

    meta = FileMetaDataset()
    meta.TransferSyntaxUID = syntax
    meta.MediaStorageSOPClassUID = "1.2.840.10008.5.1.4.1.1.7"
    meta.MediaStorageSOPInstanceUID = pydicom.uid.generate_uid()
    ds = Dataset()
    ds.file_meta = meta
    ds.SOPClassUID = meta.MediaStorageSOPClassUID
    ds.Rows = ds.Columns = size
    ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 8, 8, 7, 0
    ds.PixelData = encapsulate([codestream], fragments_per_frame=fragments)
    ds["PixelData"].VR = "OB"
    ds.save_as(path, enforce_file_format=True)
    return path


@pytest.mark.parametrize("fragments", [1, 16])
@pytest.mark.parametrize("kind", ["JPEG Lossless", "JPEG Lossless, bytes between segments", "JPEG 2000 codestream",
                                  "JPEG 2000 in JP2 boxes"])
def test_a_compressed_image_larger_than_dpmed_decodes_is_refused_from_its_own_header_whatever_decodes_it(
        tmp_path, monkeypatch, kind, fragments):
    """A JPEG or JPEG 2000 codestream states its size in its own header (SOF, SIZ), whatever Rows and Columns say.
    Pillow refuses a decompression bomb, but pylibjpeg and gdcm decode whatever it states: a 16 x 16 header over a
    larger codestream passed the header's check, and went to them (or was told as needing them where none was
    installed). The codestream's own size is checked against the same limit before any decoder runs, also where
    the one frame is split into fragments that cut its header (only the first fragment was read), and where stray
    bytes lie between two marker segments, which IJG libjpeg skips with a warning and the walk stopped at."""
    pydicom = pytest.importorskip("pydicom")
    import io

    from PIL import Image, features

    codestream = io.BytesIO()
    image = Image.fromarray(np.full((64, 48), 100, np.uint8))
    if kind.startswith("JPEG Lossless"):
        image.save(codestream, "JPEG")
        stream = codestream.getvalue().replace(b"\xff\xc0", b"\xff\xc3", 1)    # a lossless frame header: no decoder
        if kind.endswith("segments"):
            assert stream[2:4] == b"\xff\xe0"                              # after the APP0 segment, before the SOF
            end = 4 + int.from_bytes(stream[4:6], "big")
            stream = stream[:end] + b"\x00\x17" + stream[end:]
        syntax = pydicom.uid.JPEGLosslessSV1                                     # installed with dpmed reads it
    else:
        if not features.check("jpg_2000"):
            pytest.skip("this Pillow writes no JPEG 2000")
        image.save(codestream, "JPEG2000", no_jp2=kind == "JPEG 2000 codestream")
        stream, syntax = codestream.getvalue(), pydicom.uid.HTJ2KLossless
    path = _encapsulated(pydicom, tmp_path / "lies.dcm", stream, syntax, fragments=fragments)
    small = _encapsulated(pydicom, tmp_path / "fits.dcm", stream, syntax, fragments=fragments)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)        # 16 x 16 = 256 px within 2,000; 64 x 48 beyond it
    with pytest.raises(UnreadableImage) as caught:
        read_image(path, channels=1)
    said = str(caught.value)
    assert "declares 16 x 16 pixels, but its compressed pixel data hold 64 x 48 (1 component), more than the 2,000" \
        in said, said
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 2000)        # 64 x 48 = 3,072 px within 4,000: left to decoders
    with pytest.raises(UnreadableImage) as caught:
        read_image(small, channels=1)
    assert "compressed pixel data hold" not in str(caught.value)
