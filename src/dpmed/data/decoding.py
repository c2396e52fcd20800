"""Decode one image file into float32 [C, H, W] in [0, 1], whatever its format.

A registry by file suffix (as data/registry.py): raster formats (JPEG, PNG, BMP, TIFF, WebP) through Pillow, DICOM
through :mod:`dpmed.data.dicom` (pydicom, an optional extra, imported by that module only when a DICOM is read).
Every decoder signals a file it cannot read with :class:`~dpmed.data.decoder.UnreadableImage`, which assembly turns
into a flagged row ("unreadable image") that names the file; anything else is raised as it is: a missing optional
package, or the system's error (an OSError with an errno: too many open files, a share gone), which may pass and so
must not be kept as the file's failure (`dpmed.data.cache`).
A change to the pixels read from a file that was read before bumps `dpmed.data.version`, so that a study folder
its runs were made in tells the changed decoder from a changed file.

Value scale: 8-bit samples / 255. 16-bit grey samples (PNG or TIFF, as exported from DICOM) are stretched by the
image's own min and max, as a grey DICOM without a window is (`dpmed.data.dicom`): such a file says neither its
window nor how many of its 16 bits are used, and most hold 10-, 12- or 14-bit detector values (0..4095 for 12 bits),
which / 65535 read almost black (at most 0.0625). Per image, never from other images (METHODS.md section 1); a 16-bit
file of one value reads 0. A PNG's sBIT chunk (12 significant bits of 16) changes nothing: the standard stores such
samples scaled to 16 bits, and a stretch by the image's own min and max reads a scaled image as the unscaled one.
Samples whose range is unknown (floating point, or 32-bit integers beyond 0..65535) make the file unreadable rather
than be clipped, and so do 16-bit samples in colour or with alpha (PNG or TIFF RGB, RGBA, grey + alpha): Pillow has
no mode for them and reads each sample's top byte as an 8-bit one (12-bit values 0..4095 read 0..15 of 255, near
black, keeping 4 of their 12 bits), so the file is told to be converted (to 8-bit colour, or to 16-bit grey without
alpha where it is grey). Colour to grey
is ITU-R BT.601 luma (Pillow's ``convert("L")``), grey to colour repeats the channel, alpha is dropped (and where it
hides pixels, noted: the model sees what lies under them). A palette is expanded to its colours (never read as
indices), CMYK converted to RGB by Pillow (an Adobe JPEG's inverted samples undone) and 1-bit pixels read 0 and 1.

Colour profiles (ICC) are not applied, by choice. A grey radiograph's profile is the exporting program's tone curve
(a gray gamma, a print's dot gain), not the detector's: DICOM calibrates grey for display by its own standard
function (PS3.14), outside the pixels, and two exports of one film that differ only in the profile they carry are
one image to the model only if both are read as stored; the curve is monotone, so it would change no order of
values, only the contrast in between, which ``equalize`` (a function of that order, up to its bins) sets per image
anyway; ``minmax`` stretches linearly and keeps it. Known limit, for colour photographs (dermatology, fundus): a
Display P3 or Adobe RGB file is read as if its values were sRGB, less saturated than its viewer shows it; convert
such files to sRGB beforehand where a dataset mixes them.

Channels when none are asked for: grey (1) is what the pixels are, not how the file stores them. A colour file whose
three channels are equal in every pixel is read as 1 channel, as a grey file is: many radiograph JPEGs are saved RGB
with R = G = B (the local Kermany copy is, every file), and read as stored they made a dataset of 3 channels, or one
refused beside grey PNGs of the same study. A JPEG encoder writes R = G = B exactly (its chroma is then constant).

Orientation: a file whose EXIF Orientation tag says it is shown turned or mirrored (a phone's photograph of a
lesion or of a film: JPEG, its multi-picture variant MPO, PNG, WebP) is read as a viewer shows it (Pillow's
``ImageOps.exif_transpose``), its size too. Read as stored, the model saw it on its side, and its copy saved upright
in a public set escaped the overlap check (`dpmed.data.overlap`: a turn is no near-duplicate). A TIFF's Orientation
is a baseline tag of the format, which Pillow applies itself while it loads the file (and reports the shown size on
opening it); before Pillow 10.1 ``exif_transpose`` then turned it a second time, so it is left to Pillow. Files are
opened from a file object, not by name: by name, Pillow maps an uncompressed file into memory at the size it shows,
so an uncompressed grey TIFF shown a quarter turn (Orientation 5 to 8) read its rows at the wrong length, scrambled.

Speed: for JPEG, Pillow's ``draft`` lets the decoder skip DCT detail the resize would throw away (it decodes at 1/2,
1/4 or 1/8 scale, never below the requested size): a 2,000 px radiograph decodes several times faster for a 224 px
study. The result depends only on the file and the requested size, so it is deterministic and per image.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
from PIL import Image, ImageFile, ImageOps

from dpmed.data.codestreams import pixel_limit
from dpmed.data.decoder import Decoder, ImageNote, UnreadableImage, stretched
from dpmed.data.dicom import peek_dicom, read_dicom
from dpmed.errors import error_name

__all__ = ["UnreadableImage", "ImageNote", "Decoder", "DECODERS", "decoder_for", "read_image", "peek_image"]

_GREY_MODES = {"1", "L", "LA", "I", "I;16", "I;16L", "I;16B", "I;16N", "F", "La"}
_WIDE_MODES = {"I", "I;16", "I;16L", "I;16B", "I;16N"}  # 16-bit samples (Pillow opens 16-bit PNG as I or I;16)
_ORIENTATION = 0x0112          # the EXIF Orientation tag
_QUARTER_TURNS = {5, 6, 7, 8}  # orientations shown a quarter turn from the stored rows: shown height = stored width


def _pillow_errors() -> tuple[type[BaseException], ...]:
    # What Pillow raises on a bad file: OSError (incl. UnidentifiedImageError, "image file is truncated"),
    # SyntaxError and ValueError from some plugins, EOFError on a cut-off stream.
    return (OSError, SyntaxError, ValueError, EOFError)


def _too_large() -> UnreadableImage:
    """Pillow refuses a file of more than twice ``Image.MAX_IMAGE_PIXELS`` pixels as a possible "decompression bomb
    DOS attack", in words that name no file and say nothing of what to do: a radiograph scanned at full resolution
    can be that large."""
    return UnreadableImage(f"has more than {pixel_limit():,} pixels, which Pillow refuses to decode (its guard against "
                           "decompression bombs); resize it (e.g. to 4,096 px on its long side) and run again")


def _large(im: Image.Image) -> tuple[ImageNote, ...]:
    """The note for a file decoded at more than ``Image.MAX_IMAGE_PIXELS``, for which Pillow warns (without the file's
    name) while it opens it: `dpmed.data.cache` silences that warning while it decodes and tells this note instead.
    Measured after ``draft``: a JPEG that a size to reach lets Pillow decode at a fraction of its sides is not
    decoded in full, as the note says, and is left unsaid."""
    limit = Image.MAX_IMAGE_PIXELS
    if limit is None or im.width * im.height <= limit:
        return ()
    return (ImageNote(f"are larger than {limit:,} pixels (Pillow's warning of a possible decompression bomb): each is "
                      "decoded in full, slowly and with much memory, before it is resized; resize them beforehand "
                      "(e.g. to 4,096 px on their long side) to decode faster"),)


_HIDDEN = ImageNote("have transparent pixels, whose transparency dpmed drops: the model sees the pixels stored under "
                    "them, which a viewer does not show; export the images without transparency (flattened onto the "
                    "background you mean) if those pixels are not what a reader sees")


def _hidden(im: Image.Image) -> tuple[ImageNote, ...]:
    """The note for a file whose alpha (an alpha band, or a palette's or colour key's transparency) is below opaque
    anywhere. Alpha is dropped, so what the model sees there depends on whatever the exporting program left under
    the transparent pixels; an alpha that is opaque everywhere hides nothing and is dropped without a word. Asked of
    the bands and ``info`` (a palette's or colour key's), not ``has_transparency_data``, which Pillow before 10.1
    lacks."""
    banded = "A" in im.getbands()
    if not banded and "transparency" not in im.info:
        return ()
    alpha = im.getchannel("A") if banded else im.convert("RGBA").getchannel("A")   # mode L: 256 levels
    return (_HIDDEN,) if alpha.histogram()[255] < alpha.width * alpha.height else ()   # not all of it opaque


def _narrowed(im: ImageFile.ImageFile) -> UnreadableImage | None:
    """The refusal of a file whose 16-bit samples Pillow would read as 8-bit ones (the module docstring): its raw mode
    (how the file stores a pixel, e.g. "RGB;16B") gives 16 bits per sample (";16" and a byte order: B, L or N), while
    the mode Pillow opens it in is an 8-bit one. A BMP's packed 16 bits per pixel ("BGR;16") are 8-bit colour."""
    if im.mode in _WIDE_MODES:
        return None
    for tile in im.tile:
        args = tile.args if isinstance(tile.args, tuple) else (tile.args,)
        raw = args[0] if args and isinstance(args[0], str) else ""
        if raw.rpartition(";")[2] in ("16B", "16L", "16N"):
            return UnreadableImage(
                f"holds 16-bit samples in colour or with alpha ({raw}), which Pillow reads only as 8-bit ones (their "
                "top byte: 12-bit values read near black); convert it to 8-bit colour (e.g. ImageMagick: magick FILE "
                "-depth 8 OUT.png) or, if it is grey, to 16-bit grey without alpha (magick FILE -alpha off "
                "-colorspace Gray OUT.png), which dpmed reads in full")
    return None


def _read_raster(path: Path, channels: int | None,
                 size_hint: tuple[int, int] | None) -> tuple[np.ndarray, tuple[ImageNote, ...]]:
    try:
        with path.open("rb") as file, Image.open(file) as im:   # not by name: the module docstring's Orientation
            channels = channels or _stored_channels(im)
            if im.mode == "F":
                raise UnreadableImage("holds floating-point samples (mode F) whose range is unknown; export it as "
                                      "8- or 16-bit PNG")
            if (narrowed := _narrowed(im)) is not None:
                raise narrowed
            turn = _orientation(im)
            if size_hint is not None and im.format == "JPEG":
                height, width = size_hint[::-1] if turn in _QUARTER_TURNS else size_hint
                im.draft("L" if channels == 1 else "RGB", (width, height))
            notes = _large(im)      # at the size decoded: a JPEG's draft may be an eighth of its sides
            im.load()  # decodes now: a truncated file raises here (LOAD_TRUNCATED_IMAGES is left as it is)
            notes += _hidden(im)
            if turn != 1:
                im = ImageOps.exif_transpose(im)    # as a viewer shows it (the module docstring)
            if im.mode in _WIDE_MODES:
                stored = np.asarray(im)                                          # [H, W]
                if stored.size and (stored.min() < 0 or stored.max() > 65535):   # mode I: 32-bit signed samples
                    raise UnreadableImage(f"holds 32-bit samples from {stored.min()} to {stored.max()}, beyond "
                                          "16 bits, whose range is unknown; export it as 8- or 16-bit PNG")
                x = stretched(stored).astype(np.float32)[None]   # as a DICOM without a window
                return (np.repeat(x, 3, axis=0) if channels == 3 else x), notes
            converted = im.convert("L" if channels == 1 else "RGB")
            x = np.asarray(converted, dtype=np.float32) / np.float32(255.0)  # [H, W] or [H, W, 3]
    except Image.DecompressionBombError as exc:
        raise _too_large() from exc
    except _pillow_errors() as exc:
        if isinstance(exc, OSError) and exc.errno is not None:   # the system's error (too many open files, a share
            raise                                                # gone), not the image's
        raise UnreadableImage(f"cannot be decoded ({error_name(exc)}: {exc})") from exc
    return (x[None] if x.ndim == 2 else np.ascontiguousarray(x.transpose(2, 0, 1))), notes  # [C, H, W]


def _stored_channels(im: Image.Image) -> int:
    """1 for a grey mode, 3 for any other (alpha dropped, a palette expanded): what :func:`peek_image` reports."""
    return 1 if im.mode in _GREY_MODES else 3


def _orientation(im: Image.Image) -> int:
    """The EXIF Orientation (tag 0x0112) of a raster file, 1 to 8; 1 (as stored) where there is none or it cannot be
    read, and for a TIFF, which Pillow turns itself while it loads it (the module docstring)."""
    if im.format == "TIFF":
        return 1
    try:
        value = im.getexif().get(_ORIENTATION, 1)
    except (SyntaxError, ValueError, TypeError, KeyError, IndexError, EOFError, struct.error):   # a damaged EXIF block
        return 1
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def _peek_raster(path: Path) -> tuple[int, tuple[int, int]]:
    try:
        with Image.open(path) as im:
            if (narrowed := _narrowed(im)) is not None:
                raise narrowed
            turned = _orientation(im) in _QUARTER_TURNS
            return _stored_channels(im), ((im.width, im.height) if turned else (im.height, im.width))
    except Image.DecompressionBombError as exc:
        raise _too_large() from exc
    except _pillow_errors() as exc:
        raise UnreadableImage(f"cannot be opened ({error_name(exc)}: {exc})") from exc


def _read_dicom(path: Path, channels: int | None,
                size_hint: tuple[int, int] | None) -> tuple[np.ndarray, tuple[ImageNote, ...]]:
    x = read_dicom(path)  # [C, H, W] in [0, 1]
    if channels is None or x.shape[0] == channels:
        return x, ()
    if channels == 3:
        return np.repeat(x, 3, axis=0), ()
    return np.einsum("chw,c->hw", x, np.array([0.299, 0.587, 0.114], dtype=np.float32))[None], ()


_RASTER = Decoder("pillow", _read_raster, _peek_raster)
_DICOM = Decoder("dicom (pydicom)", _read_dicom, peek_dicom)

DECODERS: dict[str, Decoder] = {
    ".jpg": _RASTER, ".jpeg": _RASTER, ".jfif": _RASTER, ".png": _RASTER, ".bmp": _RASTER, ".tif": _RASTER,
    ".tiff": _RASTER, ".webp": _RASTER, ".dcm": _DICOM, ".dicom": _DICOM,  # .jfif: Windows' suffix for saved JPEGs
}
"""File suffix (lower case) -> decoder. A suffix not listed here is not an image file to dpmed."""


def decoder_for(path: Path) -> Decoder:
    """The decoder for ``path``'s suffix; UnreadableImage naming the suffix when there is none."""
    decoder = DECODERS.get(path.suffix.lower())
    if decoder is None:
        raise UnreadableImage(f"has suffix {path.suffix or '(none)'!r}, not an image format dpmed reads "
                              f"({', '.join(sorted(DECODERS))})")
    return decoder


def read_image(path: Path, *, channels: int | None, size_hint: tuple[int, int] | None = None,
               notes: list[ImageNote] | None = None) -> np.ndarray:
    """Decode ``path`` to float32 [channels, H, W] in [0, 1]; UnreadableImage when it cannot be decoded.
    ``channels`` None: as the content is, 1 for a grey image (stored grey, or stored as colour with three equal
    channels), 3 for colour, so that a caller who requires one channel count of every image opens each file once.
    The decoder's notes on a file it read (:class:`ImageNote`) are appended to ``notes``, for a caller that tells
    them."""
    try:
        x, told = decoder_for(path).read(path, channels, size_hint)
    except UnreadableImage as exc:
        raise _told_if_empty(path, exc) from exc
    if x.ndim != 3 or x.shape[0] not in ((1, 3) if channels is None else (channels,)) or min(x.shape[1:]) < 1:
        raise UnreadableImage(f"decoded to shape {x.shape}, not [{channels or '1 or 3'}, H, W]")
    if channels is None and x.shape[0] == 3 and np.array_equal(x[0], x[1]) and np.array_equal(x[1], x[2]):
        x = x[:1]   # grey stored as colour (module docstring): its grey neighbours in the dataset are 1 channel
    if notes is not None:
        notes.extend(told)
    return x


def peek_image(path: Path) -> tuple[int, tuple[int, int]]:
    """(channels as stored, (height, width)) from the file's header, without decoding the pixels."""
    try:
        return decoder_for(path).peek(path)
    except UnreadableImage as exc:
        raise _told_if_empty(path, exc) from exc


def _told_if_empty(path: Path, exc: UnreadableImage) -> UnreadableImage:
    """A file of 0 bytes (a copy or download cut short) is told as such: the decoder's "cannot identify image file"
    sends the user looking for a wrong format."""
    try:
        if path.stat().st_size:
            return exc
    except OSError:     # gone or unreadable meanwhile: the decoder's own words stand
        return exc
    return UnreadableImage("is empty (0 bytes), as a copy or download cut short leaves a file; copy it again from "
                           "the source, or delete it")
