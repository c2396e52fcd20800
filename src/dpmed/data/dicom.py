"""DICOM images (pydicom, the optional extra ``pip install 'dpmed[dicom]'``): stored values to display values in [0, 1].

A DICOM pixel is not a brightness. The standard's grey pipeline (PS3.3 C.11, "Grayscale Transformations") is applied
in its order, per image:

1. **Modality LUT**: stored value -> modality value, ``RescaleSlope * x + RescaleIntercept`` or a Modality LUT
   Sequence (pydicom's ``apply_modality_lut``); e.g. CT Hounsfield units.
2. **VOI LUT**: modality value -> display value. A VOI LUT Sequence (a table) is applied by pydicom's
   ``apply_voi_lut`` and its output divided by the table's output maximum (2^bits - 1, from LUTDescriptor). A window
   (WindowCenter c, WindowWidth w; the first of several) is applied here directly to [0, 1] by the standard's
   formulas: LINEAR (default) ``(x - (c - 0.5)) / (w - 1) + 0.5`` clipped to [0, 1]; LINEAR_EXACT
   ``(x - c) / w + 0.5`` clipped; SIGMOID ``1 / (1 + exp(-4 (x - c) / w))``. With neither, the image is stretched
   by its own min and max (per image, so METHODS.md section 1 holds).
3. **MONOCHROME1 inversion**: in MONOCHROME1 the lowest value is displayed white; ``1 - y`` makes every image
   "bright = dense" like MONOCHROME2, so one model sees one convention.

Pixel padding (PixelPaddingValue, up to PixelPaddingRangeLimit where given; PS3.3 C.7.5.1.1.2) marks stored values
outside the patient: a CT's corners, a cropped radiograph's border. They are no data: left out of the image's own
range in step 2, and read 0 (black: nothing dense) after step 3, whatever the window says of them.

Compressed transfer syntaxes are decoded by pydicom's plugins: RLE and deflate always, JPEG baseline (8 bits) and
JPEG 2000 through Pillow where it has them; JPEG Extended (12 bits), JPEG Lossless and JPEG-LS need pylibjpeg with
pylibjpeg-libjpeg, or python-gdcm. A file no installed plugin decodes is unreadable by name, with the packages to
install (`_DECODERS_BY_SYNTAX`). Sizes are checked before anything is decoded, so that a decompression bomb of a
few hundred kB is refused by name: the header's Rows x Columns against the pixels Pillow decodes from any image
(`_refuse_too_large`), uncompressed pixel data against the header's one frame (`_refuse_excess_frames`), and a
deflated data set and a JPEG-family codestream by their own sizes (:mod:`dpmed.data.codestreams`).

Colour DICOM (PhotometricInterpretation RGB, or YBR converted to RGB by pydicom) is divided by 2^BitsStored - 1.
PALETTE COLOR (an index per pixel into red, green and blue tables: rare in radiography, found in ultrasound and in
secondary captures) is looked up by pydicom's ``apply_color_lut`` and divided by 2^bits - 1 of its tables' entries
(their descriptor's third value, 8 or 16; an Alpha table, opacity, is left out); a palette of greys then reads as one
channel, as any grey colour file does (`dpmed.data.decoding.read_image`).
One frame per file: multi-frame files (tomosynthesis, cine) are refused by name.
"""

from __future__ import annotations

import contextlib
import logging
import struct
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from dpmed.data.codestreams import pixel_limit, refuse_inflating_beyond, refuse_large_codestream
from dpmed.data.decoder import UnreadableImage, stretched
from dpmed.errors import DataError, error_name

__all__ = ["read_dicom", "peek_dicom", "read_dicom_header", "voi_window", "quiet_pydicom"]

INSTALL_HINT = "pip install 'dpmed[dicom]'"


def _pydicom(path: Path):
    """The pydicom module, or a DataError that names the file that needs it and says how to install it (it is an
    optional extra; one stray .dcm among thousands of images is otherwise hard to find)."""
    try:
        import pydicom
    except ImportError as exc:
        raise DataError(f"{path}: reading DICOM files needs pydicom, which is not installed: {INSTALL_HINT}") from exc
    return pydicom


@contextlib.contextmanager
def quiet_pydicom():
    """Reading checks every value it uses and refuses a file by name (`read_dicom`), so pydicom's warnings about a
    header ("The value length (80) exceeds the maximum length of 64", "Invalid value for VR DS: 'inf'") would only
    add library lines, without the file's name, to the user's terminal: silenced (pydicom's own, not every warning)
    while this is entered. Enter it once, in the thread that starts the decoding threads (`dpmed.data.cache`), never
    in each of them: the warning filters are the process's, and ``warnings.catch_warnings`` is not thread-safe (an
    exit interleaved with another thread's leaves the filter in place, or drops that thread's). pydicom also logs
    each of these warnings on its "pydicom" logger, which `dpmed run` shows (every library's log lines reach the
    terminal): those are left unsaid meanwhile too, and its errors are not."""
    logger = logging.getLogger("pydicom")
    unsaid = _PydicomWarnings()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=UserWarning, module=r"pydicom(\.|$)")
        logger.addFilter(unsaid)
        try:
            yield
        finally:
            logger.removeFilter(unsaid)


class _PydicomWarnings(logging.Filter):
    """Drops the WARNING records of pydicom's logger: the log copy of the warnings `quiet_pydicom` silences."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno != logging.WARNING


# The first bytes of the files most often given a .dcm suffix by mistake (an export renamed, a viewer's snapshot)
_OTHER_FORMATS = ((b"\x89PNG", "a PNG image", ".png"), (b"\xff\xd8\xff", "a JPEG image", ".jpg"),
                  (b"II*\x00", "a TIFF image", ".tif"), (b"MM\x00*", "a TIFF image", ".tif"),
                  (b"BM", "a BMP image", ".bmp"), (b"%PDF", "a PDF document", ".pdf"),
                  (b"PK\x03\x04", "a ZIP archive", ".zip"))
_NOT_DICOM = ("is not a DICOM file: it has neither the 'DICM' marker at byte 128 nor a DICOM data set from its first "
              "byte; move it out of the image folders, or export it again as DICOM")


def _without_preamble(pydicom, path: Path, pixels: bool):
    """A file without the 128-byte preamble and "DICM" (PS3.10 7.1), which pydicom reads only when forced: older
    exporters write the file meta, or the bare data set (ACR-NEMA style), from the first byte. Read as such only
    where a DICOM image's elements come out of it, since forced reading makes elements of any bytes; a bare data set
    has no transfer syntax, and is given the encoding pydicom found it in. Another format renamed .dcm is named."""
    with path.open("rb") as file:
        head = file.read(8)
    for magic, kind, suffix in _OTHER_FORMATS:
        if head.startswith(magic):
            raise UnreadableImage(f"is not a DICOM file but {kind}; give it the suffix {suffix} if it is one")
    ds = pydicom.dcmread(path, stop_before_pixels=not pixels, force=True)
    if not ({"SOPClassUID", "Rows", "PixelData"} & set(ds.dir())):
        raise UnreadableImage(_NOT_DICOM)
    if "TransferSyntaxUID" not in ds.file_meta:
        implicit, little = getattr(ds, "original_encoding", (ds.is_implicit_VR, ds.is_little_endian))
        ds.file_meta.TransferSyntaxUID = (pydicom.uid.ImplicitVRLittleEndian if implicit else
                                          pydicom.uid.ExplicitVRLittleEndian if little else
                                          pydicom.uid.ExplicitVRBigEndian)
    return ds


def _open(path: Path, *, pixels: bool):
    pydicom = _pydicom(path)
    try:
        with np.errstate(all="ignore"):     # per thread, unlike the warning filters
            try:
                refuse_inflating_beyond(path)
                ds = pydicom.dcmread(path, stop_before_pixels=not pixels)
            except pydicom.errors.InvalidDicomError:    # only for a missing preamble: pydicom's advice is to force
                ds = _without_preamble(pydicom, path, pixels)
            for _ in ds.iterall():  # pydicom converts an element when first used: a damaged one fails here, not later
                pass
        return ds
    # A damaged file also gives struct.error, NotImplementedError ("Unknown Value Representation") and pydicom's
    # BytesLengthException, found by changing each byte of a small file in turn.
    except (pydicom.errors.InvalidDicomError, pydicom.errors.BytesLengthException, struct.error, NotImplementedError,
            OSError, EOFError, ValueError, KeyError) as exc:
        if pixels and isinstance(exc, OSError) and exc.errno is not None:   # the system's error, not the file's:
            raise                                                          # the cache must not keep it
        detail = str(exc)
        detail = detail if len(detail) <= 200 else f"{detail[:200]}..."     # pydicom quotes the raw bytes
        raise UnreadableImage(f"is not a readable DICOM file ({error_name(exc)}: {detail})") from exc


# The pip packages that decode each compressed transfer syntax (pydicom's "Supported Transfer Syntaxes" table), by
# the first UID parts that name the family: a hospital export is often JPEG Lossless, which nothing installed with
# pydicom decodes, and pydicom's own message lists plugins by module name over several lines.
_DECODERS_BY_SYNTAX = (
    ("1.2.840.10008.1.2.4.5", "pylibjpeg pylibjpeg-libjpeg"),      # JPEG baseline, extended, lossless (.50-.57)
    ("1.2.840.10008.1.2.4.70", "pylibjpeg pylibjpeg-libjpeg"),     # JPEG lossless, first-order prediction
    ("1.2.840.10008.1.2.4.8", "pylibjpeg pylibjpeg-libjpeg"),      # JPEG-LS (.80, .81)
    ("1.2.840.10008.1.2.4.9", "pylibjpeg pylibjpeg-openjpeg"),     # JPEG 2000 (.90-.93)
    ("1.2.840.10008.1.2.4.20", "pylibjpeg pylibjpeg-openjpeg"),    # High-Throughput JPEG 2000 (.201-.203)
)


def _undecoded(ds, exc: Exception) -> UnreadableImage | None:
    """The message for compressed pixel data that no installed plugin decodes, naming the transfer syntax and what
    to install; None for an uncompressed file, or a syntax not listed (pydicom's own words then stand)."""
    syntax = getattr(getattr(ds, "file_meta", None), "TransferSyntaxUID", None)
    packages = next((p for prefix, p in _DECODERS_BY_SYNTAX if str(syntax or "").startswith(prefix)), None)
    if packages is None or syntax is None or not syntax.is_compressed:
        return None
    reason = " ".join(str(exc).split())
    reason = reason if len(reason) <= 80 else f"{reason[:80]}..."
    return UnreadableImage(f"is compressed as {syntax.name}, which no installed decoder reads ({reason}); install "
                           f"one: pip install {packages} (or pip install python-gdcm), and run again")


def _refuse_too_large(ds) -> None:
    """UnreadableImage where the header declares more pixels than Pillow decodes from any other file
    (`pixel_limit`): compressed pixel data (RLE, JPEG, a deflated file) of a few hundred kB can declare 30,000 x
    30,000 pixels, and decoding them, then converting to float, takes tens of GB before any size check of the study
    is reached."""
    limit = pixel_limit()
    try:
        pixels = int(ds.Rows) * int(ds.Columns) * int(ds.get("SamplesPerPixel", 1) or 1)
    except (AttributeError, TypeError, ValueError):
        return          # pydicom's own error names what the header lacks
    if limit and pixels > limit:
        raise UnreadableImage(f"declares {int(ds.Rows):,} x {int(ds.Columns):,} pixels, more than the {limit:,} "
                              "dpmed decodes from any image (Pillow's guard against decompression bombs); resize it "
                              "(e.g. to 4,096 px on its long side) and run again")


def _refuse_excess_frames(ds) -> None:
    """UnreadableImage where uncompressed pixel data (deflated files' too) hold a second frame of the size the header
    declares: pydicom returns every frame it finds, whatever NumberOfFrames says, and all of them were converted to
    float before the shape was found wrong; in a deflated file a few kB of zeros make GB of such frames. Less than a
    frame more (a pad byte) is left to pydicom, which drops it."""
    syntax = getattr(getattr(ds, "file_meta", None), "TransferSyntaxUID", None)
    if syntax is None or not syntax.is_transfer_syntax or syntax.is_encapsulated:
        return
    try:
        rows, columns, bits = int(ds.Rows), int(ds.Columns), int(ds.BitsAllocated)
        frame = (rows * columns * int(ds.get("SamplesPerPixel", 1) or 1) * bits + 7) // 8
    except (AttributeError, TypeError, ValueError):
        return          # pydicom's own error names what the header lacks
    held = len(ds.PixelData)
    if frame and held >= 2 * frame:
        raise UnreadableImage(f"holds {held:,} bytes of pixel data, {held // frame:,} frames of the {rows:,} x "
                              f"{columns:,} pixels ({bits} bits each) its header declares, which says one frame: the "
                              "header does not describe its image; export it again")


def _oversized(ds, exc: Exception) -> UnreadableImage | None:
    """The refusal of compressed pixel data that Pillow found larger than it decodes (a decompression bomb) although
    the header passed `_refuse_too_large`: a JPEG codestream states its own size, whatever Rows and Columns say.
    pydicom gathers its plugins' failures into one RuntimeError, which `_undecoded` would tell as a decoder to
    install (pylibjpeg, which has no such guard). None for any other failure."""
    if "decompression bomb" not in str(exc):
        return None
    return UnreadableImage(f"declares {ds.get('Rows')} x {ds.get('Columns')} pixels, but its compressed pixel data "
                           f"hold more than the {pixel_limit():,} dpmed decodes from any image "
                           "(Pillow's guard against decompression bombs): the header does not describe its image; "
                           "export it again")


def voi_window(x: np.ndarray, center: float, width: float, function: str = "LINEAR") -> np.ndarray:
    """The VOI window of PS3.3 C.11.2.1.2 mapped to [0, 1] (see the module docstring for the three functions)."""
    x = x.astype(np.float64, copy=False)
    function = (function or "LINEAR").upper()
    if not (np.isfinite(center) and np.isfinite(width)):
        raise ValueError(f"window needs a finite WindowCenter and WindowWidth, got {center} and {width}")
    if function == "SIGMOID":
        if width <= 0:
            raise ValueError(f"SIGMOID window needs WindowWidth > 0, got {width}")
        return (1.0 / (1.0 + np.exp(-4.0 * (x - center) / width))).astype(np.float32)
    if function == "LINEAR_EXACT":
        if width <= 0:
            raise ValueError(f"LINEAR_EXACT window needs WindowWidth > 0, got {width}")
        return np.clip((x - center) / width + 0.5, 0.0, 1.0).astype(np.float32)
    if function != "LINEAR":
        raise ValueError(f"VOILUTFunction {function!r} is not LINEAR, LINEAR_EXACT or SIGMOID")
    if width < 1:
        raise ValueError(f"LINEAR window needs WindowWidth >= 1, got {width}")
    if width == 1:
        return (x > center - 0.5).astype(np.float32)
    return np.clip((x - (center - 0.5)) / (width - 1.0) + 0.5, 0.0, 1.0).astype(np.float32)


def _first(ds, key: str) -> float:
    """WindowCenter / WindowWidth may hold several values (alternative windows): the first is the default view. A value
    that is no number (an empty first of several, text) is unreadable by name: pydicom's ValueError named neither the
    key nor the file."""
    value = ds[key].value
    first = value[0] if isinstance(value, Sequence) and not isinstance(value, str) and len(value) else value
    try:
        return float(first)
    except (TypeError, ValueError) as exc:
        raise UnreadableImage(f"has {key} {value!r}, which is not a number; correct it in the header, or remove "
                              "WindowCenter and WindowWidth to stretch the image by its own range") from exc


def _padding(ds, stored: np.ndarray) -> np.ndarray | None:
    """The mask of padding pixels (module docstring), on the stored values; None where the header names none."""
    if ds.get("PixelPaddingValue") is None:
        return None
    try:
        ends = [int(ds.PixelPaddingValue), int(ds.get("PixelPaddingRangeLimit", ds.PixelPaddingValue))]
    except (TypeError, ValueError) as exc:       # an ambiguous US/SS pydicom left as bytes
        raise UnreadableImage(f"has PixelPaddingValue {ds.PixelPaddingValue!r}, which is not a whole number") from exc
    return (stored >= min(ends)) & (stored <= max(ends))


def _luts():
    """pydicom's module of look-up-table functions (apply_modality_lut, apply_voi_lut, apply_color_lut), where the
    installed version keeps it."""
    try:
        import pydicom.pixels as luts  # pydicom >= 3
    except ImportError:
        import pydicom.pixel_data_handlers.util as luts  # pydicom 2.x
    return luts


def _grey(ds, stored: np.ndarray) -> np.ndarray:
    """Grey stored values -> [1, H, W] in [0, 1] by the module docstring's pipeline. Each step maps one stored value
    to one display value (the image's own range, for the stretch, is the range of the values it holds), so an image
    of at most 2^16 distinct stored values (8 and 16 bits) takes the pipeline once per value it holds, in float64,
    and its pixels look their value up: the same float32 pixels as the pipeline on every pixel, without a float64
    copy of the image per step (benchmarks/RESULTS.md, "One large grey DICOM file"). ``stored`` (`read_dicom`'s own
    decoded array, unused after) becomes the table's index in place where it is writable: a CT's signed values, or
    any image whose lowest value is not 0, took a third copy of the stored values, half the output's size."""
    if stored.dtype.kind not in "ui" or stored.dtype.itemsize > 2 or not stored.size:
        return _grey_values(ds, stored)[None]
    stored = stored.astype(stored.dtype.newbyteorder("="), copy=False)     # a big-endian file's, swapped
    lo = stored.min()
    index = stored if not lo else np.subtract(stored, lo, dtype=stored.dtype,
                                              out=stored if stored.flags.writeable else None)
    index = index.view(f"u{stored.dtype.itemsize}")      # a signed difference wraps back to value - lo
    held = np.zeros(2 ** (8 * stored.dtype.itemsize), dtype=bool)
    held[index] = True
    values = (np.flatnonzero(held) + int(lo)).astype(stored.dtype)     # ascending, as the index counts them
    table = np.zeros(held.size, dtype=np.float32)
    table[held] = _grey_values(ds, values)
    return table[index][None]


def _grey_values(ds, stored: np.ndarray) -> np.ndarray:
    """The module docstring's grey pipeline on ``stored`` (an image, or the stored values it holds), float32."""
    luts = _luts()
    padding = _padding(ds, stored)
    modality = np.asarray(luts.apply_modality_lut(stored, ds))  # modality values
    if not np.isfinite(modality).all():   # a RescaleSlope or RescaleIntercept of inf or nan, or one that overflows
        raise ValueError(f"the modality LUT (RescaleSlope {ds.get('RescaleSlope')}, RescaleIntercept "
                         f"{ds.get('RescaleIntercept')}) gives values that are not finite numbers")
    if modality.dtype.kind == "f" and np.array_equal(modality, np.round(modality)):
        modality = modality.astype(np.int64)  # a table LUT is indexed by integers
    x = modality.astype(np.float64)
    if "VOILUTSequence" in ds:
        y = np.asarray(luts.apply_voi_lut(modality, ds, index=0, prefer_lut=True), dtype=np.float64)
        bits = int(ds.VOILUTSequence[0].LUTDescriptor[2])
        out = np.clip(y / float(2**bits - 1), 0.0, 1.0)
    elif ds.get("WindowCenter") is not None and ds.get("WindowWidth") is not None:    # present and empty: no window
        out = voi_window(x, _first(ds, "WindowCenter"), _first(ds, "WindowWidth"),
                         str(ds.get("VOILUTFunction", "LINEAR")))
    else:
        out = stretched(x, None if padding is None else ~padding)
    if str(ds.PhotometricInterpretation).upper() == "MONOCHROME1":
        out = 1.0 - out
    if padding is not None:
        out = np.where(padding, 0.0, out)
    return out.astype(np.float32)


def _palette(ds, stored: np.ndarray) -> np.ndarray:
    """PALETTE COLOR indices -> RGB [3, H, W] in [0, 1] through the header's tables (the module docstring)."""
    if "RedPaletteColorLookupTableDescriptor" not in ds:     # pydicom's words name no element of the header
        raise UnreadableImage("is PALETTE COLOR but its header holds no palette (Red, Green and Blue Palette Color "
                              "Lookup Table Descriptor and Data); export it again as RGB or grey")
    # [H, W, 3], entries of 8 or 16 bits; [H, W, 4] with an Alpha table, whose opacity is no colour: left out
    rgb = np.asarray(_luts().apply_color_lut(stored, ds)[..., :3], dtype=np.float32)
    bits = int(ds.RedPaletteColorLookupTableDescriptor[2])
    return np.ascontiguousarray((rgb / float(2**bits - 1)).clip(0, 1).transpose(2, 0, 1))


def read_dicom(path: Path) -> np.ndarray:
    """One DICOM file -> float32 [C, H, W] in [0, 1] (C = 1 grey, 3 colour), by the pipeline of the module docstring.

    Raises UnreadableImage (a flagged row) for a file that is not DICOM, has no pixel data, several frames, an
    unsupported photometric interpretation or transfer syntax, or grey transforms that give no finite value (a
    RescaleSlope of inf, a WindowCenter of nan: such pixels would reach training as nan); DataError when pydicom is
    not installed.
    """
    ds = _open(path, pixels=True)
    if "PixelData" not in ds:
        floats = next((key for key in ("FloatPixelData", "DoubleFloatPixelData") if key in ds), None)
        if floats is not None:      # told as no pixel data at all, a user looked for a report
            raise UnreadableImage(f"holds its pixels as {floats} (floating-point values: a parametric map or a "
                                  "derived image), which dpmed does not read; export the image with integer Pixel "
                                  "Data")
        raise UnreadableImage("is a DICOM file without pixel data (a report or a structured document?)")
    if ds.PixelData is None:        # an element of length 0: pydicom reads no value, and nothing can size it
        raise UnreadableImage("is a DICOM file whose Pixel Data element is empty (cut short when written?); export "
                              "it again")
    try:
        frames = int(ds.get("NumberOfFrames", 1) or 1)
    except (TypeError, ValueError) as exc:      # an IS of '1A' (pydicom's test file badVR.dcm): its ValueError escaped
        raise UnreadableImage(f"has NumberOfFrames {ds.NumberOfFrames!r}, which is not a whole number") from exc
    if frames != 1:
        raise UnreadableImage(f"holds {frames} frames; dpmed reads single-frame images (export one frame per file)")
    _refuse_too_large(ds)
    _refuse_excess_frames(ds)
    refuse_large_codestream(ds)
    photometric = str(ds.get("PhotometricInterpretation", "")).upper()
    try:
        # numpy's warnings of the arithmetic on a header's values ("overflow encountered in multiply"): told by name
        with np.errstate(all="ignore"):     # below instead; numpy's error state is per thread
            stored = ds.pixel_array  # decodes (compressed transfer syntaxes need their pydicom plugins)
            if photometric in ("MONOCHROME1", "MONOCHROME2"):
                return _grey(ds, stored)
            if photometric == "PALETTE COLOR":
                return _palette(ds, stored)
            if photometric == "RGB" or photometric.startswith("YBR"):  # pydicom returns YBR as RGB by default
                scale = float(2 ** int(ds.get("BitsStored", 8)) - 1)
                return np.ascontiguousarray((np.asarray(stored, np.float32) / scale).clip(0, 1).transpose(2, 0, 1))
    # OverflowError and struct.error: a VOI LUT whose entries exceed the bits, or whose data fall short of the entry
    # count, that its LUTDescriptor gives (found by writing odd headers; the changed-byte search keeps the header)
    except (ValueError, NotImplementedError, RuntimeError, AttributeError, KeyError, IndexError, OverflowError,
            struct.error) as exc:
        if isinstance(exc, RuntimeError) and (told := _oversized(ds, exc) or _undecoded(ds, exc)) is not None:
            raise told from exc
        raise UnreadableImage(f"pixel data cannot be decoded ({error_name(exc)}: {exc})") from exc
    raise UnreadableImage(f"has PhotometricInterpretation {photometric or '(none)'!r}; dpmed reads MONOCHROME1, "
                          "MONOCHROME2, PALETTE COLOR, RGB and YBR")


def peek_dicom(path: Path) -> tuple[int, tuple[int, int]]:
    """(SamplesPerPixel, 3 for PALETTE COLOR, (Rows, Columns)) from the header, without reading the pixels."""
    ds = _open(path, pixels=False)
    try:
        palette = str(ds.get("PhotometricInterpretation", "")).upper() == "PALETTE COLOR"   # one index, three colours
        return 3 if palette else int(ds.get("SamplesPerPixel", 1)), (int(ds.Rows), int(ds.Columns))
    except (AttributeError, TypeError, ValueError) as exc:     # absent, or present and empty
        raise UnreadableImage("has no Rows / Columns: not an image") from exc


def read_dicom_header(path: Path) -> dict[str, str]:
    """PatientID, PatientSex and PatientAge as stored ("" where absent): folders of DICOM files carry their patient
    in the header, so the folder reader takes patient ids and demographics from here. UnreadableImage for a header
    without Rows / Columns: pydicom reads a file cut short inside its header without a word, and its missing
    PatientID would otherwise be taken for a file that names no patient."""
    ds = _open(path, pixels=False)
    if not ds.get("Rows") or not ds.get("Columns"):       # absent, or present and empty
        raise UnreadableImage("has no Rows / Columns in its header: cut short, or not an image")
    return {key: str(ds.get(key, "") or "") for key in ("PatientID", "PatientSex", "PatientAge")}
