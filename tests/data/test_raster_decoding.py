"""Raster files decode onto [0, 1]: 8-bit / 255, 16-bit grey stretched by the image's own min and max (module
docstring of `dpmed.data.decoding`), each checked against the values written into the file."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dpmed.data.decoding import UnreadableImage, peek_image, read_image

WIDE = np.array([[0, 1000, 32768], [65535, 4095, 12]], dtype=np.uint16)   # 2 x 3: rows and columns not confused


def test_a_16_bit_grey_png_spanning_0_to_65535_reads_onto_0_1_and_is_repeated_for_colour(tmp_path):
    path = tmp_path / "wide.png"
    Image.fromarray(WIDE).save(path)            # Pillow writes a 16-bit grey PNG (mode I;16)
    grey = read_image(path, channels=1)
    assert grey.dtype == np.float32 and grey.shape == (1, 2, 3)
    np.testing.assert_allclose(grey[0], WIDE / 65535.0, rtol=1e-6)
    colour = read_image(path, channels=3)
    assert colour.shape == (3, 2, 3)
    np.testing.assert_array_equal(colour, np.repeat(grey, 3, axis=0))
    assert peek_image(path) == (1, (2, 3))


def test_12_bit_values_in_a_16_bit_png_span_0_to_1_as_a_dicom_without_a_window_does(tmp_path):
    """Exported DICOM often holds 0..4095 in a 16-bit PNG: divided by 65535 it read at most 0.0625, near black."""
    twelve = np.array([[200, 4095, 1000], [3000, 700, 2500]], dtype=np.uint16)
    Image.fromarray(twelve).save(tmp_path / "twelve.png")
    x = read_image(tmp_path / "twelve.png", channels=1)[0]
    np.testing.assert_allclose(x, (twelve - 200.0) / (4095.0 - 200.0), rtol=1e-6)
    Image.fromarray(np.full((2, 3), 4095, dtype=np.uint16)).save(tmp_path / "flat.png")
    assert not read_image(tmp_path / "flat.png", channels=1).any()     # one value: 0, as a flat DICOM


def write_png(path: Path, samples: np.ndarray, colour_type: int, *, significant_bits: int | None = None) -> Path:
    """A 16-bit PNG of ``samples`` (uint16 [H, W, C]; colour type 0 grey, 2 RGB, 4 grey + alpha, 6 RGBA), written
    byte by byte (Pillow writes no 16-bit colour), with an sBIT chunk where ``significant_bits`` is given."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    height, width, channels = samples.shape
    rows = b"".join(b"\x00" + row.astype(">u2").tobytes() for row in samples)        # filter type 0 per row
    sbit = b"" if significant_bits is None else chunk(b"sBIT", bytes([significant_bits] * channels))
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 16, colour_type, 0,
                                                                        0, 0))
                     + sbit + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
    return path


@pytest.mark.parametrize("colour_type, channels", [(2, 3), (6, 4), (4, 2)], ids=["RGB", "RGBA", "grey+alpha"])
def test_a_16_bit_png_in_colour_or_with_alpha_is_unreadable_saying_how_to_convert_it(tmp_path, colour_type, channels):
    """Pillow opens these as 8-bit (RGB, RGBA; grey + alpha as RGBA) from each sample's top byte: 12-bit values
    (0..4095) read 0..15 of 255, near black, and keep 4 of their 12 bits."""
    samples = np.stack([WIDE] * channels, axis=-1)
    path = write_png(tmp_path / "wide.png", samples, colour_type)
    for read in (lambda: read_image(path, channels=None), lambda: read_image(path, channels=3),
                 lambda: peek_image(path)):
        with pytest.raises(UnreadableImage, match=r"16-bit samples .*8-bit.*convert it") as told:
            read()
        assert "magick" in str(told.value) and "\n" not in str(told.value)


def test_a_16_bit_rgb_tiff_is_unreadable_too(tmp_path):
    tifffile = pytest.importorskip("tifffile")
    path = tmp_path / "wide.tif"
    tifffile.imwrite(path, np.stack([WIDE] * 3, axis=-1), photometric="rgb")
    with pytest.raises(UnreadableImage, match="16-bit samples"):
        read_image(path, channels=None)


def test_an_8_bit_bmp_of_16_bits_per_pixel_is_read(tmp_path):
    """A BMP of 16 bits per pixel packs 5, 6 and 5 bits of R, G and B: 8-bit colour, not 16-bit samples."""
    path = tmp_path / "packed.bmp"
    width, height = 2, 1
    pixels = struct.pack("<HH", 0xF800, 0x001F)     # 5-6-5: red, blue
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 16, 3, len(pixels), 2835, 2835, 0, 0)
    masks = struct.pack("<III", 0xF800, 0x07E0, 0x001F)
    offset = 14 + len(info) + len(masks)
    path.write_bytes(b"BM" + struct.pack("<IHHI", offset + len(pixels), 0, 0, offset) + info + masks + pixels)
    x = read_image(path, channels=3)
    np.testing.assert_allclose(x[:, 0, 0], [1, 0, 0], atol=0.01)
    np.testing.assert_allclose(x[:, 0, 1], [0, 0, 1], atol=0.01)


def test_a_png_s_significant_bits_change_nothing_the_per_image_stretch_reads(tmp_path):
    """A 12-bit image in a 16-bit PNG is stored scaled to 16 bits (sample << 4, the PNG standard), its sBIT chunk
    saying 12; stored unscaled without sBIT, it reads the same: the stretch by the image's own min and max takes
    any scale out."""
    twelve = np.array([[200, 4095, 1000], [3000, 700, 2500]], dtype=np.uint16)[..., None]
    scaled = read_image(write_png(tmp_path / "scaled.png", twelve << 4, 0, significant_bits=12), channels=1)
    plain = read_image(write_png(tmp_path / "plain.png", twelve, 0), channels=1)
    np.testing.assert_allclose(scaled, plain, atol=1e-6)
    np.testing.assert_allclose(plain[0], (twelve[..., 0] - 200.0) / (4095.0 - 200.0), rtol=1e-6)


def test_an_8_bit_file_is_divided_by_255_and_colour_keeps_its_channels_in_order(tmp_path):
    rgb = np.zeros((2, 3, 3), dtype=np.uint8)
    rgb[..., 0], rgb[..., 1], rgb[..., 2] = 255, 51, 0          # every pixel orange: R, G, B told apart
    rgb[1, 2] = (0, 0, 255)
    path = tmp_path / "colour.png"
    Image.fromarray(rgb).save(path)
    x = read_image(path, channels=3)
    assert x.shape == (3, 2, 3)
    np.testing.assert_allclose(x, rgb.transpose(2, 0, 1) / 255.0, rtol=1e-6)
    grey = read_image(path, channels=1)                            # ITU-R BT.601 luma, Pillow's convert("L")
    np.testing.assert_allclose(grey[0, 0, 0] * 255, round(0.299 * 255 + 0.587 * 51), atol=1)
    np.testing.assert_allclose(grey[0, 1, 2] * 255, round(0.114 * 255), atol=1)
    assert peek_image(path) == (3, (2, 3))
    Image.fromarray(rgb[..., 1]).save(tmp_path / "grey.png")
    assert peek_image(tmp_path / "grey.png") == (1, (2, 3))


def test_a_floating_point_tiff_is_unreadable_naming_its_mode(tmp_path):
    path = tmp_path / "float.tif"
    Image.fromarray(np.array([[0.0, 0.5], [2.0, -1.0]], dtype=np.float32)).save(path)
    with pytest.raises(UnreadableImage, match="mode F"):
        read_image(path, channels=1)


def test_a_32_bit_tiff_is_read_within_16_bits_and_unreadable_beyond(tmp_path):
    """Pillow opens a 32-bit integer TIFF as mode I, as older Pillow opened a 16-bit PNG. Within 0..65535 its values
    are 16-bit samples; beyond, they were clipped to black and white without a word."""
    path = tmp_path / "within.tif"
    Image.fromarray(WIDE.astype(np.int32)).save(path)
    assert Image.open(path).mode == "I"
    np.testing.assert_allclose(read_image(path, channels=1)[0], WIDE / 65535.0, rtol=1e-6)
    for name, values in (("above", [[0, 70000]]), ("below", [[-5, 1000]])):
        Image.fromarray(np.array(values, dtype=np.int32)).save(tmp_path / f"{name}.tif")
        with pytest.raises(UnreadableImage, match=f"32-bit samples from {min(values[0])} to {max(values[0])}"):
            read_image(tmp_path / f"{name}.tif", channels=1)


@pytest.mark.parametrize("suffix, fmt", [(".png", "PNG"), (".jpg", "JPEG"), (".jpeg", "JPEG"), (".bmp", "BMP"),
                                         (".tif", "TIFF"), (".tiff", "TIFF"), (".PNG", "PNG"), (".JPG", "JPEG"),
                                         (".TIF", "TIFF"), (".Bmp", "BMP"), (".jfif", "JPEG"), (".JFIF", "JPEG"),
                                         (".webp", "WEBP"), (".WebP", "WEBP")])
def test_every_raster_suffix_in_any_case_is_decoded(tmp_path, suffix, fmt):
    path = tmp_path / f"x{suffix}"
    Image.fromarray(np.full((4, 6), 128, dtype=np.uint8)).save(path, format=fmt)
    x = read_image(path, channels=1)
    assert x.shape == (1, 4, 6)
    np.testing.assert_allclose(x, 128 / 255, atol=2 / 255)        # JPEG may move a flat grey by a level


@pytest.mark.parametrize("mode", ["1", "LA", "I;16"])
def test_grey_modes_are_peeked_as_one_channel(tmp_path, mode):
    path = tmp_path / f"{mode.replace(';', '')}.png"
    Image.new(mode, (5, 3)).save(path)
    assert peek_image(path) == (1, (3, 5))


LEVELS = np.tile(np.array([0, 64, 128, 255], np.uint8), (3, 1))                       # 3 x 4 grey
SHADES = np.stack([LEVELS, np.zeros_like(LEVELS), 255 - LEVELS], axis=-1)               # 3 x 4 colour


def grey_palette(levels: np.ndarray) -> Image.Image:
    """``levels`` as a palette image whose indices are not its grey levels (index 0 is white)."""
    values = np.unique(levels).astype(np.int64)[::-1]
    image = Image.fromarray(np.searchsorted(-values, -levels.astype(np.int64)).astype(np.uint8), "P")
    image.putpalette(np.repeat(values, 3).tolist())
    return image


@pytest.mark.parametrize("name, image, expected", [
    ("grey_palette.png", lambda: grey_palette(LEVELS), LEVELS[None]),
    ("colour_palette.png", lambda: Image.fromarray(SHADES).quantize(4), SHADES.transpose(2, 0, 1)),
    ("grey_alpha.png", lambda: Image.fromarray(np.stack([LEVELS, np.full_like(LEVELS, 255)], -1), "LA"),
     LEVELS[None]),
    ("cmyk.jpg", lambda: Image.fromarray(SHADES).convert("CMYK"), SHADES.transpose(2, 0, 1)),   # Adobe, inverted
    ("black_white.tif", lambda: Image.fromarray(LEVELS > 100), np.where(LEVELS > 100, 255, 0)[None]),
    ("black_white_g4.tif", lambda: Image.fromarray(LEVELS > 100), np.where(LEVELS > 100, 255, 0)[None]),
])
def test_palette_grey_alpha_cmyk_and_1_bit_files_read_as_their_pixels(tmp_path, name, image, expected):
    """A palette is expanded (to 1 channel where its colours are grey), alpha dropped, CMYK converted to RGB (an
    Adobe JPEG's inverted samples undone) and 1-bit read as 0 and 1: each as a viewer shows it, not its indices."""
    path = tmp_path / name
    image().save(path, **({"compression": "group4"} if "g4" in name else {"quality": 100} if "jpg" in name else {}))
    x = read_image(path, channels=None)
    assert x.shape == expected.shape
    np.testing.assert_allclose(x * 255, expected, atol=2 if name.endswith(".jpg") else 1e-4)


def test_a_jpeg_asked_for_at_a_smaller_size_decodes_no_smaller_than_it(tmp_path):
    """Pillow's draft decodes a JPEG at 1/2, 1/4 or 1/8 scale: never below the size the study asks for."""
    path = tmp_path / "big.jpg"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (256, 256), dtype=np.uint8)).save(path)
    assert read_image(path, channels=1).shape == (1, 256, 256)
    drafted = read_image(path, channels=1, size_hint=(64, 64))
    assert drafted.shape[1:] == (64, 64)
    assert read_image(path, channels=3, size_hint=(100, 100)).shape[1:] == (128, 128)


@pytest.mark.parametrize("shape", [(2, 4, 4), (4, 4), (1, 4), (1, 0, 4)])
def test_a_decoder_s_array_of_the_wrong_shape_is_an_unreadable_image(tmp_path, monkeypatch, shape):
    from dpmed.data import decoding

    wrong = decoding.Decoder("wrong", lambda path, channels, hint: (np.zeros(shape, np.float32), ()),
                             decoding._peek_raster)
    monkeypatch.setitem(decoding.DECODERS, ".png", wrong)
    with pytest.raises(UnreadableImage, match="decoded to shape"):
        read_image(tmp_path / "x.png", channels=1)


def test_a_file_pillow_cannot_identify_names_pillow_s_error_with_its_module(tmp_path):
    """"UnidentifiedImageError" alone says nothing of where it came from; DICOM's messages already name theirs so."""
    path = tmp_path / "scan.png"
    path.write_bytes(b"\x89PNG not really")
    for read in (lambda: read_image(path, channels=1), lambda: peek_image(path)):
        with pytest.raises(UnreadableImage, match=r"cannot be (decoded|opened) \(PIL\.UnidentifiedImageError: "):
            read()


@pytest.mark.parametrize("suffix", [".jpeg", ".png", ".dcm"])
def test_an_empty_file_is_told_as_empty_not_as_an_unknown_format(tmp_path, suffix):
    """A 0-byte JPEG was "cannot be decoded (PIL.UnidentifiedImageError: cannot identify image file ...)", which
    sends the user looking for a wrong format rather than a copy cut short."""
    path = tmp_path / f"IM-0001-0001{suffix}"
    path.write_bytes(b"")
    for read in (lambda: read_image(path, channels=1), lambda: peek_image(path)):
        with pytest.raises(UnreadableImage, match=r"^is empty \(0 bytes\), .*copy it again from the source"):
            read()


def test_a_file_gone_before_its_failure_is_told_keeps_the_decoder_s_words(tmp_path, monkeypatch):
    """The size is read only to tell an empty file: a file deleted in between keeps the decoder's message, not an
    OSError from that check (it would stop the whole decode instead of flagging one row)."""
    import dataclasses

    from dpmed.data import decoding

    path = tmp_path / "IM-0001-0001.png"
    path.write_bytes(b"\x89PNG not really")

    def read_then_vanish(*args):
        path.unlink()
        raise UnreadableImage("cannot be decoded (it said so)")

    vanishing = dataclasses.replace(decoding.decoder_for(path), read=read_then_vanish)
    monkeypatch.setattr(decoding, "decoder_for", lambda _: vanishing)
    with pytest.raises(UnreadableImage, match=r"^cannot be decoded \(it said so\)$"):
        read_image(path, channels=1)


@pytest.mark.parametrize("kind", ["png", "jpg", "mpo", "webp", "tif", "tif-lzw"])
@pytest.mark.parametrize("orientation, upright", [(1, lambda a: a), (3, lambda a: np.rot90(a, 2)),
                                                  (6, lambda a: np.rot90(a, -1)), (8, lambda a: np.rot90(a, 1)),
                                                  (5, lambda a: a.T), (2, lambda a: a[:, ::-1])])
def test_an_exif_orientation_is_applied_as_a_viewer_shows_the_image(tmp_path, kind, orientation, upright):
    """EXIF Orientation (tag 0x0112; 6: the stored rows are the shown right side, so it shows turned a quarter
    clockwise). A photographed lesion or a phone's copy of a film carries it; before, the stored pixels were read as
    they lie, so the model saw the image on its side, and a copy saved upright elsewhere escaped the overlap check
    (a rotation is no near-duplicate). So were a WebP's and a multi-picture JPEG's (Pillow opens it as MPO), and an
    uncompressed TIFF shown a quarter turn read scrambled (Pillow mapped its rows at the shown width)."""
    stored = np.zeros((40, 64), dtype=np.uint8)
    stored[:8, :16] = 255                               # a bright block in the stored top-left corner
    image = Image.fromarray(stored)
    exif = image.getexif()
    exif[0x0112] = orientation
    path = tmp_path / f"turned.{kind.partition('-')[0].replace('mpo', 'jpg')}"
    if kind.startswith("tif"):                          # a baseline TIFF tag, in the image's own directory
        image.save(path, tiffinfo={0x0112: orientation}, compression="tiff_lzw" if kind == "tif-lzw" else None)
    elif kind == "mpo":
        image.save(path, format="MPO", save_all=True, append_images=[image], exif=exif.tobytes())
    else:
        image.save(path, exif=exif.tobytes(), **({"lossless": True} if kind == "webp" else {}))
    with Image.open(path) as opened:
        assert opened.format == {"jpg": "JPEG", "tif": "TIFF"}.get(kind[:3], kind.upper())
    shown = upright(stored)
    x = read_image(path, channels=1)
    assert x.shape == (1, *shown.shape) and peek_image(path)[1] == shown.shape
    np.testing.assert_allclose(x[0], shown / 255.0, atol=0.1 if kind in ("jpg", "mpo") else 1e-6)
    drafted = read_image(path, channels=1, size_hint=(16, 16)).shape[1:]     # a JPEG's draft: turned alike
    assert min(drafted) >= 16 and (drafted[0] < drafted[1]) == (shown.shape[0] < shown.shape[1])


def test_a_png_whose_exif_block_is_no_tiff_is_read_as_stored(tmp_path):
    """An eXIf chunk of junk (a converter's bug) makes Pillow raise SyntaxError ("not a TIFF file") when asked for
    the orientation: the pixels are fine, so the image is read as it lies, not refused or crashed on."""
    stored = np.zeros((40, 64), dtype=np.uint8)
    stored[:8, :16] = 255
    path = tmp_path / "junk_exif.png"
    Image.fromarray(stored).save(path, exif=b"\x01\x02\x03")
    x = read_image(path, channels=1)
    assert peek_image(path) == (1, (40, 64))
    np.testing.assert_allclose(x[0], stored / 255.0, atol=1e-6)


def test_transparency_is_found_with_a_pillow_older_than_10_1(tmp_path, monkeypatch):
    """pyproject allows Pillow 9.0, whose images have no ``has_transparency_data`` (added in 10.1): there every raster
    file failed with an AttributeError, the opaque ones too."""
    monkeypatch.delattr(Image.Image, "has_transparency_data", raising=False)
    rgba = np.full((2, 3, 4), 200, np.uint8)
    rgba[..., 3] = 255
    Image.fromarray(rgba, "RGBA").save(tmp_path / "opaque.png")
    rgba[0, 0, 3] = 0
    Image.fromarray(rgba, "RGBA").save(tmp_path / "masked.png")
    Image.fromarray(np.full((2, 3), 7, np.uint8)).save(tmp_path / "keyed.png", transparency=7)   # a tRNS colour key
    Image.fromarray(np.full((2, 3), 7, np.uint8)).save(tmp_path / "grey.png")
    told = {}
    for name in ("opaque", "masked", "keyed", "grey"):
        notes: list = []
        assert read_image(tmp_path / f"{name}.png", channels=1, notes=notes).shape == (1, 2, 3)
        told[name] = [n.what.split(",")[0] for n in notes]
    assert told == {"opaque": [], "masked": ["have transparent pixels"], "keyed": ["have transparent pixels"],
                    "grey": []}


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")
def test_a_large_jpeg_decoded_at_a_fraction_of_its_size_is_not_said_to_be_decoded_in_full(tmp_path, monkeypatch):
    """A JPEG with a size to reach is decoded at down to an eighth of its sides (``draft``): the note's "each is decoded
    in full, slowly and with much memory" was untrue of it. A PNG has no such shortcut and keeps the note."""
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)        # 40 x 40 = 1600 px: over it, not twice over
    pixels = np.random.default_rng(0).integers(0, 256, (40, 40), dtype=np.uint8)
    Image.fromarray(pixels).save(tmp_path / "film.jpg")
    Image.fromarray(pixels).save(tmp_path / "film.png")
    told = {}
    for name, hint in (("film.jpg", (8, 8)), ("film.jpg", None), ("film.png", (8, 8))):
        notes: list = []
        read_image(tmp_path / name, channels=1, size_hint=hint, notes=notes)
        told[name, hint] = [n.what.split(" (")[0] for n in notes]
    assert told == {("film.jpg", (8, 8)): [], ("film.jpg", None): ["are larger than 1,000 pixels"],
                    ("film.png", (8, 8)): ["are larger than 1,000 pixels"]}
