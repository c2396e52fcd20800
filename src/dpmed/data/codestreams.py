"""How large compressed DICOM pixel data are, found before any decoder is given them: a decompression bomb of a
few hundred kB otherwise takes GB of memory (Pillow's ``Image.MAX_IMAGE_PIXELS`` guard, which dpmed applies to
every image, sets the bound: `pixel_limit`).

* A deflated data set (Deflated Explicit VR Little Endian, PS3.5 A.5): pydicom inflates it whole before any value of
  it can be read, for a header read too, and deflate packs up to 1,032 bytes into one. `refuse_inflating_beyond`
  inflates it first 1 MiB at a time, keeping nothing, and refuses it beyond 4 bytes for each pixel of the bound.
* A JPEG, JPEG-LS or JPEG 2000 codestream states its own size in its frame header (ITU-T T.81 B.2.2, T.87 C.2.2,
  T.800 A.5.1), whatever the DICOM header's Rows and Columns say; Pillow refuses a bomb, but pylibjpeg and gdcm
  decode whatever it states. `refuse_large_codestream` reads that size from the one frame's fragments. Known
  limit: a codestream that states its height only after its first scan (a DNL marker) is sized by its decoder
  alone.

Both read bytes by the standards' layouts only, so that nothing is decoded or inflated whole to learn a size; the
DICOM header's own checks (Rows x Columns, frames) are :mod:`dpmed.data.dicom`'s, which calls these.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

from dpmed.data.decoder import UnreadableImage

__all__ = ["pixel_limit", "refuse_inflating_beyond", "refuse_large_codestream"]


def pixel_limit() -> int:
    """The most pixels (samples) dpmed decodes from any image: twice ``Image.MAX_IMAGE_PIXELS``, above which Pillow
    refuses a raster as a decompression bomb; 0 where that guard is turned off."""
    from PIL import Image

    return 2 * (Image.MAX_IMAGE_PIXELS or 0)


_DEFLATED = "1.2.840.10008.1.2.1.99"
# Explicit VR elements whose value length takes 4 bytes, after 2 reserved ones (PS3.5 7.1.2)
_LONG_LENGTH_VRS = {b"OB", b"OD", b"OF", b"OL", b"OV", b"OW", b"SQ", b"SV", b"UC", b"UN", b"UR", b"UT", b"UV"}
_BYTES_PER_PIXEL = 4     # the widest sample of an image's Pixel Data dpmed reads (32 bits allocated)


def _deflated_start(file) -> int | None:
    """Where the data set of ``file`` starts if its file meta information (explicit VR little endian always, PS3.10
    7.1; after the preamble where there is one) names the deflated transfer syntax; else None."""
    file.seek(128)
    if file.read(4) != b"DICM":
        file.seek(0)
    syntax = None
    while len(head := file.read(8)) == 8:
        group, element, vr, length = struct.unpack("<HH2sH", head)
        if group != 0x0002:
            return file.tell() - 8 if syntax == _DEFLATED else None
        if vr in _LONG_LENGTH_VRS:
            length = struct.unpack("<L", file.read(4).ljust(4, b"\0"))[0]
        value_at = file.tell()
        if element == 0x0010:
            syntax = file.read(min(length, 64)).rstrip(b"\0 ").decode("ascii", "replace")
        file.seek(value_at + length)
    return None


def refuse_inflating_beyond(path: Path) -> None:
    """UnreadableImage where ``path`` is deflated (PS3.5 A.5) and its data set inflates to more than 4 bytes for each
    pixel dpmed decodes (`pixel_limit`, at 32-bit samples), or is cut short or damaged. pydicom inflates the data
    set whole before any of its values can be checked, for a header read too, and deflate packs up to 1,032 bytes
    into one: a file of 1 MB can take 1 GB before :mod:`dpmed.data.dicom` reads its Rows and Columns. Counted here 1 MiB
    at a time, and thrown away; a file within the bound is inflated twice, which costs time, not memory (a small
    share of the decode: benchmarks/RESULTS.md, "One deflated DICOM file")."""
    limit = _BYTES_PER_PIXEL * pixel_limit()
    with path.open("rb") as file:
        start = _deflated_start(file)
        if start is None or not limit:
            return
        file.seek(start)
        inflater, size = zlib.decompressobj(-zlib.MAX_WBITS), 0
        try:
            while not inflater.eof:
                compressed = inflater.unconsumed_tail or file.read(1 << 16)
                inflated = len(inflater.decompress(compressed, 1 << 20))
                if not compressed and not inflated:
                    raise UnreadableImage("is not a readable DICOM file (its deflated data set is cut short); copy "
                                          "it again")
                size += inflated
                if size > limit:
                    raise UnreadableImage(
                        f"is deflated and inflates to more than the {limit:,} bytes dpmed reads from one DICOM file "
                        f"({_BYTES_PER_PIXEL} for each of the {limit // _BYTES_PER_PIXEL:,} pixels it decodes from "
                        "any image, Pillow's guard against decompression bombs); resize it (e.g. to 4,096 px on its "
                        "long side) and export it again")
        except zlib.error as exc:
            raise UnreadableImage(f"is not a readable DICOM file (its deflated data set is damaged: {exc})") from exc


# The frame headers that state a JPEG image's size: SOF0-SOF15 but DHT, JPG and DAC (ITU-T T.81 B.1.1.3), and
# JPEG-LS's SOF55 (ITU-T T.87 C.2.2); each Lf(2) P(1) Y(2) X(2) Nf(1)
_JPEG_FRAMES = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC} | {0xF7}


def _codestream(data: bytes) -> bytes:
    """The codestream of encapsulated pixel data (PS3.5 A.4) of one frame, as `dpmed.data.dicom.read_dicom` allows:
    its fragments, the items after the Basic Offset Table's, joined (an encoder may split a frame anywhere, its
    header too); b"" where there is none."""
    at, fragments = 0, []
    while at + 8 <= len(data) and struct.unpack_from("<HH", data, at) == (0xFFFE, 0xE000):
        length = struct.unpack_from("<L", data, at + 4)[0]
        fragments.append(data[at + 8:at + 8 + length])
        at += 8 + length
    return b"".join(fragments[1:])


def _jpeg_size(stream: bytes) -> tuple[int, int, int] | None:
    """(rows, columns, components) from a JPEG or JPEG-LS codestream's frame header, its markers walked from SOI
    (an APP segment's thumbnail has its own, which is skipped); None where none comes before the first scan. Bytes
    between segments that start no marker are skipped, as IJG libjpeg skips them (with a warning) and decodes on."""
    at = 2
    while 0 <= (at := stream.find(b"\xff", at)) and at + 4 <= len(stream):
        marker = stream[at + 1]
        if marker == 0xFF:                                  # a fill byte
            at += 1
        elif marker <= 0x01 or 0xD0 <= marker <= 0xD8:      # no marker (FF 00), or markers without a segment
            at += 2
        elif marker in _JPEG_FRAMES:
            return (*struct.unpack_from(">HH", stream, at + 5), stream[at + 9]) if at + 10 <= len(stream) else None
        elif marker == 0xDA:                                # a scan before any frame header
            return None
        else:
            at += 2 + int.from_bytes(stream[at + 2:at + 4], "big")
    return None


def _j2k_size(stream: bytes) -> tuple[int, int, int] | None:
    """(rows, columns, components) from a JPEG 2000 codestream's SIZ segment, which follows its SOC (ITU-T T.800
    A.5.1); in JP2 boxes (ISO 15444-1 I.4), from the contiguous codestream box's. None where neither is found."""
    if stream[4:8] == b"jP  ":
        at = header = 0
        while at + 8 <= len(stream):
            length, header = struct.unpack_from(">L", stream, at)[0], 8
            if length == 1 and at + 16 <= len(stream):
                length, header = struct.unpack_from(">Q", stream, at + 8)[0], 16
            if stream[at + 4:at + 8] == b"jp2c" or length < header:      # 0: the last box, to the end
                break
            at += length
        stream = stream[at + header:] if stream[at + 4:at + 8] == b"jp2c" else b""
    if stream[:4] != b"\xff\x4f\xff\x51" or len(stream) < 42:
        return None
    width, height, left, top = struct.unpack_from(">4L", stream, 8)
    return max(height - top, 0), max(width - left, 0), struct.unpack_from(">H", stream, 40)[0]


def refuse_large_codestream(ds) -> None:
    """UnreadableImage where the one frame's JPEG or JPEG 2000 codestream states more pixels than dpmed decodes
    from any image (`pixel_limit`), whatever the header's Rows and Columns passed (:mod:`dpmed.data.dicom`): Pillow
    refuses such a decompression bomb, but pylibjpeg and gdcm decode whatever size the codestream states. A
    codestream whose size cannot be found here is left to the decoders."""
    syntax = getattr(getattr(ds, "file_meta", None), "TransferSyntaxUID", None)
    limit = pixel_limit()
    if syntax is None or not syntax.is_transfer_syntax or not syntax.is_encapsulated or not limit:
        return
    stream = _codestream(ds.PixelData)
    size = _jpeg_size(stream) if stream[:2] == b"\xff\xd8" else _j2k_size(stream)
    if size is not None and size[0] * size[1] * size[2] > limit:
        rows, columns, components = size
        raise UnreadableImage(f"declares {ds.get('Rows')} x {ds.get('Columns')} pixels, but its compressed pixel "
                              f"data hold {rows:,} x {columns:,} ({components} component{'s' * (components != 1)}), "
                              f"more than the {limit:,} dpmed decodes from any image (Pillow's guard against "
                              "decompression bombs): the header does not describe its image; export it again")
