"""Which version of dpmed's image decoding read the images a study folder's runs trained on, as its study.yaml
records it (``dataset.decoding_version``).

A resumed study reuses a finished run only where it reads the same pixels (`dpmed.resumption`, by a private
fingerprint of the decoded images). A change to how dpmed decodes the same files makes that fingerprint, or the
image shape, differ as an edited file would; without this number the refusal blamed a file that nobody changed. With
it, the refusal says that this dpmed decodes the files otherwise, and how.
"""

from __future__ import annotations

__all__ = ["DECODING_VERSION", "UNRECORDED", "decoded_since"]

# Bump DECODING_VERSION (add the next entry here) in the same commit as any change that alters the pixels dpmed reads
# from a file it read before: a channel count, a value scale, an orientation. Say in a few words what changed: a
# resumed study tells it where its finished runs read other pixels. A file read now that was refused before is one
# too: data.skip_invalid left it out, so the runs' data differ. Float rounding is no change.
CHANGES = {
    1: "",                                                       # every decoder until grey is told by content
    2: "a colour file whose three channels are equal is read as 1 channel where data.channels is unset",
    3: "16-bit grey PNG and TIFF samples are stretched by each image's own min and max, not divided by 65535",
    4: "a DICOM's padding pixels (PixelPaddingValue) read black and are left out of its own min and max",
    5: "a WebP's or multi-picture JPEG's EXIF orientation is applied, and an uncompressed TIFF shown a quarter turn "
       "is no longer scrambled",
    6: "a PALETTE COLOR DICOM is read through its colour tables, where it was refused (and left out under "
       "data.skip_invalid)",
}
DECODING_VERSION = max(CHANGES)

# What a study.yaml written before the version was recorded read as: every dpmed until grey was told by content.
UNRECORDED = 1


def decoded_since(version: int) -> list[str]:
    """How this dpmed decodes files otherwise than decoding ``version`` did, one change per line; [] for this
    version. A newer version's changes are unknown here: one line that says so. ``UNRECORDED`` also stands for the
    decoders before it, which changed too (an EXIF orientation read as a viewer shows it): one line that says so."""
    if version > DECODING_VERSION:
        return [f"a newer dpmed decoded them (its decoding {version}, this version's {DECODING_VERSION})"]
    older = ["and earlier changes, for runs older still"]
    return [CHANGES[v] for v in range(version + 1, DECODING_VERSION + 1) if CHANGES.get(v)] + (
        older if version == UNRECORDED < DECODING_VERSION else [])
