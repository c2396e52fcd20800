"""How much memory decoding one large grey DICOM file takes: Python's heap at its peak (tracemalloc) while
`dpmed.data.dicom.read_dicom` reads a synthetic file of uniform noise, 16 bits stored, written with pydicom into a
temporary folder, against the bytes of the float32 image it returns.

A decoding thread holds the file's Pixel Data, its stored values and the float32 output at least (2 + 2 + 4 bytes a
pixel); float64 copies of the image (8 bytes a pixel each) come on top where the grey pipeline runs on every pixel.

    python benchmarks/dicom_memory.py [--size 8000] [--signed] [--rescale 0.5 -1024] [--window 40 400]

Not a test: the time depends on the machine; the peak only on numpy's and pydicom's arrays.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np


def _write(path: Path, size: int, signed: bool, rescale, window) -> None:
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.uid import ExplicitVRLittleEndian, SecondaryCaptureImageStorage, generate_uid

    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID, meta.MediaStorageSOPInstanceUID = SecondaryCaptureImageStorage, generate_uid()
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = Dataset()
    ds.file_meta = meta
    ds.SOPClassUID, ds.SOPInstanceUID = meta.MediaStorageSOPClassUID, meta.MediaStorageSOPInstanceUID
    ds.Rows = ds.Columns = size
    ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 16, 16, 15, int(signed)
    if rescale:
        ds.RescaleSlope, ds.RescaleIntercept = rescale
    if window:
        ds.WindowCenter, ds.WindowWidth = window
    dtype = np.int16 if signed else np.uint16
    info = np.iinfo(dtype)
    ds.PixelData = np.random.default_rng(0).integers(info.min, info.max, (size, size), dtype=dtype).tobytes()
    ds.save_as(path, enforce_file_format=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=8000, help="rows = columns (default 8000: 64 megapixels)")
    parser.add_argument("--signed", action="store_true", help="signed stored values (a CT's), across zero")
    parser.add_argument("--rescale", type=float, nargs=2, metavar=("SLOPE", "INTERCEPT"))
    parser.add_argument("--window", type=float, nargs=2, metavar=("CENTER", "WIDTH"))
    args = parser.parse_args()
    from dpmed.data.dicom import read_dicom

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "large.dcm"
        _write(path, args.size, args.signed, args.rescale, args.window)
        tracemalloc.start()
        start = time.perf_counter()
        image = read_dicom(path)
        seconds = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    kind = "signed" if args.signed else "unsigned"
    print(f"{args.size} x {args.size}, {kind}, rescale {args.rescale}, window {args.window}: "
          f"peak {peak / 1e6:,.0f} MB, "
          f"{peak / image.nbytes:.2f} x the {image.nbytes / 1e6:,.0f} MB float32 image, {seconds:.1f} s")


if __name__ == "__main__":
    main()
