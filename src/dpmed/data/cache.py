"""Decode a dataset's images once -- in memory, and into a file on disk keyed by the files and the preprocessing.

Why: decoding a JPEG or PNG and resizing it costs far more than a training step of a small model, and a study trains
several arms, each for several epochs, on the same images. dpmed therefore decodes every image once per study and
holds the preprocessed float32 tensors in memory; every epoch of every arm reads those. With ``data.cache_dir`` the
tensors also go to ``<cache_dir>/<key>.npy`` and later studies (or a resumed one) read that file instead of
decoding again.

The key is a SHA-256 over everything that determines the pixels: the cache format, Pillow's version (pydicom's and its
installed pixel-data plugins' where a file is a DICOM, torch's where images are resized), the decoded channel count and
size, the preprocessing steps, that EXIF orientation is applied, that 16-bit grey samples are stretched by each image's
own min and max (`dpmed.data.decoding`; an entry from before divided them by 65535), the decoders' later changes (each
named where the key adds it, and only where the files it changes may be among the paths), and every file's resolved
path, byte size, inode, modification time and status-change time, in order. Changing a file or a preprocessing step
gives another key, so a stale entry is not read: a file rewritten in place with its size and modification time set back
(``touch -r``) still has a new status-change time, which no user call sets. Files that could not be decoded, and the
decoder's notes on files it read (transparency, a size over Pillow's limit), are stored with the entry, so a cached load
reports the same unreadable rows and notes as a fresh one; an entry is not stored where a file could not be read at all
(an OSError: a full file table, a network share gone for a moment), since that may pass.

Privacy: a cache entry holds the patients' images, decoded. Its files are created readable by their owner only (0600;
so one user's cache is not another's), a cache folder dpmed creates is 0700 (an existing one keeps its mode), and a
decode stopped midway deletes its partial file (one killed outright cannot: the next decode into the folder on that
host deletes it). Keep ``cache_dir`` where the dataset itself may live (never in the
study's own folder outside private/: `dpmed.study` refuses that); nothing is cached on disk unless a study asks for
it.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import math
import os
import socket
import stat
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

import numpy as np
import PIL
from PIL import Image

try:
    import fcntl
except ImportError:     # Windows
    fcntl = None  # type: ignore[assignment]

from dpmed import memory
from dpmed.data.decoding import DECODERS, ImageNote, UnreadableImage, peek_image, read_image
from dpmed.data.dicom import quiet_pydicom
from dpmed.data.pace import Pace
from dpmed.data.transforms import Preprocessing
from dpmed.errors import DataError, error_name
from dpmed.folders import file_in_the_way, link_to_nothing, open_owner_only, write_text_atomic
from dpmed.numbers import bytes_text
from dpmed.provenance import package_version

__all__ = ["DecodedImages", "decode_images", "cache_key"]

_FORMAT = "dpmed-image-cache-1"
_NO_ROOM = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))     # a full disk, or a full quota
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DecodedImages:
    """images: float32 [N, C, H, W] in [0, 1], this process's own, also when read from a cache file (rows of
    failed files are 0); failures: index -> why that file could not be decoded; cached: read from cache_dir;
    seconds: wall time of this call; key: the cache key (None without cache_dir)."""

    images: np.ndarray
    failures: dict[int, str]
    cached: bool
    seconds: float
    key: str | None


def _layout(paths: Sequence[Path], preprocessing: Preprocessing) -> tuple[int, tuple[int, int]]:
    """(channels, (H, W)) every decoded image gets: the preprocessing's, else the first readable file's own, which
    `decode_images` then requires of every file. The shape is released (study.yaml, the model's first layer), and the
    first file may be a training image: taken from it alone, one patient's colour image or its size would be
    published. Without a channel count the first file is decoded, not peeked: its header says how it is stored, and
    a grey image stored as colour is grey (`dpmed.data.decoding.read_image`)."""
    for path in paths:
        try:
            if preprocessing.channels is None:
                x = read_image(path, channels=None, size_hint=preprocessing.size)
                stored_channels, stored_size = x.shape[0], (x.shape[1], x.shape[2])
            else:
                stored_channels, stored_size = peek_image(path)
        except (UnreadableImage, OSError):
            continue  # that file is reported when it is decoded
        return preprocessing.channels or stored_channels, preprocessing.size or stored_size
    return preprocessing.channels or 1, preprocessing.size or (1, 1)


def _stored(channels: int) -> str:
    return {1: "grey", 3: "colour"}.get(channels, f"with {channels} channels")


# pydicom's optional pixel-data decoders (distribution names), as its documentation lists them
DICOM_PLUGINS = ("numpy", "pylibjpeg", "pylibjpeg-libjpeg", "pylibjpeg-openjpeg", "pylibjpeg-rle", "python-gdcm",
                 "pyjpegls")


# The suffixes of the files whose turned pixels decoding 5 reads otherwise (`dpmed.data.version`); a multi-picture
# JPEG (MPO) is named .jpg
_TURNED_SINCE = (".webp", ".tif", ".tiff", ".jpg", ".jpeg", ".jfif")


def cache_key(paths: Sequence[Path], preprocessing: Preprocessing, channels: int, size: tuple[int, int]) -> str:
    """The SHA-256 (hex) of the module docstring's ingredients; a file that is missing hashes as missing."""
    h = hashlib.sha256()
    settings = {"format": _FORMAT, "pillow": PIL.__version__, "channels": channels, "size": list(size),
                "resize": preprocessing.size is not None, "minmax": preprocessing.minmax,
                "equalize": preprocessing.equalize}
    if preprocessing.aspect != "stretch":   # only then, so that the caches written before the option stay valid
        settings["aspect"] = preprocessing.aspect
    if preprocessing.size is None:   # an entry from before kept images of another size as failures, which are refused
        settings["other_sizes"] = "refused"
    if preprocessing.channels is None:  # an entry from before converted every image to the first one's channels
        settings["other_channels"] = "refused"
    # an entry from before read a JPEG or PNG with an EXIF orientation as stored, and the key cannot tell which
    # files have one without opening them: every entry from before is decoded again, once
    settings["orientation"] = "exif"
    # and read 16-bit grey samples / 65535 (12-bit values near black), now stretched per image: decoded again, once
    settings["sixteen_bit"] = "stretched"
    if any(Path(path).suffix.lower() in _TURNED_SINCE for path in paths):
        # an entry from before read a WebP or multi-picture JPEG with an EXIF orientation as stored, and an
        # uncompressed TIFF shown a quarter turn scrambled (`dpmed.data.decoding`): decoded again, once
        settings["orientation"] = "exif, every format"
    if any(DECODERS.get(Path(path).suffix.lower()) is DECODERS[".dcm"] for path in paths):
        # pydicom decodes DICOM pixels and applies their LUTs, as Pillow decodes the rest; only then, so that the
        # entries of raster files stay valid
        settings["pydicom"] = package_version("pydicom")
        # and its plugins decode compressed transfer syntaxes: a file that failed ("needs pylibjpeg") is stored as a
        # failure, and must be decoded again once the user installs the plugin the message named
        settings["pydicom_plugins"] = {plugin: package_version(plugin) for plugin in DICOM_PLUGINS}
        # an entry from before read a DICOM's padding pixels as data (`dpmed.data.dicom`): decoded again, once
        settings["pixel_padding"] = "black"
        # and refused a PALETTE COLOR file, kept with the entry as its failure: decoded again, once
        settings["palette_color"] = "read"
    if preprocessing.size is not None:     # torch resizes (`dpmed.data.transforms.resize`), and only then
        settings["torch"] = package_version("torch")
    h.update(json.dumps(settings, sort_keys=True).encode())
    for path in paths:
        resolved = Path(path).resolve()
        try:
            st = resolved.stat()
            h.update(f"{resolved}\0{st.st_size}\0{st.st_ino}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\n".encode())
        except OSError:
            h.update(f"{resolved}\0missing\n".encode())
    return h.hexdigest()


def decode_images(paths: Sequence[Path], preprocessing: Preprocessing, *, cache_dir: Path | None = None,
                  workers: int | None = None) -> DecodedImages:
    """Decode and preprocess every file in ``paths`` (in order) into one float32 [N, C, H, W] array.

    Each file is decoded at the preprocessing's channel count (or the first readable file's) and, when a size is
    set, resized to it, then min-max and equalisation run per image (:class:`~dpmed.data.transforms.Preprocessing`;
    ``normalize`` is not applied here). Without a size every image must have the first readable image's size, and
    without a channel count its channels (grey or colour, by content: `_layout`): any that differs is a DataError
    that says to set data.image_size or data.channels (not a bad row that skip_invalid would drop).
    Decoding runs in ``workers`` threads (default: the CPU count, at most 8; Pillow and torch release the GIL while
    they work). A decode that takes longer than `dpmed.data.pace`'s interval logs how far it has come at that interval.
    What the decoder notes about files it read (:class:`~dpmed.data.decoding.ImageNote`) is logged once per note, with
    how many files have it and the first; Pillow's own warning of a large image, which names no file, and pydicom's
    about the headers it reads (`dpmed.data.dicom.quiet_pydicom`) are silenced meanwhile (here, in the calling thread:
    the filters are the process's, and the decoding threads share them).
    """
    with warnings.catch_warnings(), quiet_pydicom():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        return _decode_images(paths, preprocessing, cache_dir, workers)


def _decode_images(paths: Sequence[Path], preprocessing: Preprocessing, cache_dir: Path | None,
                   workers: int | None) -> DecodedImages:
    start = time.perf_counter()
    paths = [Path(p) for p in paths]
    channels, size = _layout(paths, preprocessing)
    # held once (`dpmed.data.assembly` splits them in place); from a cache entry too, as the splits are copied out
    memory.check_images((len(paths), channels, *size), fix=memory.SMALLER_IMAGES)
    key = None
    if cache_dir is not None:
        _refuse_open_cache(Path(cache_dir))
        key = cache_key(paths, preprocessing, channels, size)
        hit = _load(Path(cache_dir), key, len(paths), (channels, *size))
        if hit is not None:
            images, failures, kept = hit
            _tell(kept, paths)
            return DecodedImages(images, failures, True, time.perf_counter() - start, key)

    n = len(paths)
    shape = (n, channels, *size)
    tmp = holder = None
    if cache_dir is None:
        images = np.zeros(shape, dtype=np.float32)  # [N, C, H, W]
    else:
        tmp = Path(cache_dir) / f".{key}.{socket.gethostname()}.{os.getpid()}.npy"
        try:
            Path(cache_dir).mkdir(mode=0o700, parents=True, exist_ok=True)
            _sweep_abandoned(Path(cache_dir))
            holder = open_owner_only(tmp, "wb")     # decoded patient images: 0600 before the first byte
            if fcntl is not None:                   # held until this decode ends: no sweep takes it for abandoned
                fcntl.flock(holder.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            images = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=shape)
            _reserve(tmp, start=images.offset)
        except OSError as exc:
            with contextlib.suppress(OSError):    # a file open_owner_only made before the failure
                tmp.unlink()
            if holder is not None:
                holder.close()
            if exc.errno in _NO_ROOM:
                raise DataError(f"data.cache_dir {cache_dir} has no room for the {n} decoded images "
                                f"({bytes_text(4 * math.prod(shape))} as float32): free space on its disk (or "
                                "quota), choose a folder on another disk, or remove data.cache_dir to decode without "
                                "a cache") from None
            raise DataError(f"data.cache_dir {cache_dir} cannot be made or written ({exc.strerror or exc}); choose a "
                            "writable folder, or remove data.cache_dir to decode without a cache") from None
    per_image = replace(preprocessing, size=preprocessing.size, channels=None)  # channels are set at decode
    unread: set[int] = set()
    check_size, check_channels = preprocessing.size is None, preprocessing.channels is None
    wrong_size: dict[int, tuple[int, int]] = {}
    wrong_channels: dict[int, int] = {}
    noted: dict[int, list[ImageNote]] = {}

    def decode(i: int) -> str | None:
        try:
            # as stored where the first file set the channels: each file is then opened once, not peeked first
            x = read_image(paths[i], channels=None if check_channels else channels,
                           size_hint=preprocessing.size, notes=noted.setdefault(i, []))  # [C, h, w]
            if x.shape[0] != channels:
                wrong_channels[i] = x.shape[0]
                return "wrong channels"
        except UnreadableImage as exc:
            return str(exc)
        except OSError as exc:  # vanished or unreadable between listing and decoding: may pass, so not cached
            unread.add(i)
            return f"cannot be read ({error_name(exc)}: {exc})"
        if check_size and tuple(x.shape[1:]) != tuple(size):
            wrong_size[i] = (x.shape[1], x.shape[2])
            return "wrong size"
        images[i] = per_image.apply(x[None])[0]
        return None

    try:
        outcomes: list[str | None] = []
        with ThreadPoolExecutor(max_workers=workers or min(8, os.cpu_count() or 1)) as pool:
            pace = Pace(_log)
            for done, outcome in enumerate(pool.map(decode, range(n), chunksize=16), start=1):
                outcomes.append(outcome)
                pace.log(done / n, "data: decoding: %d of %d images (%.0f %%), %.0f/s", done, n, 100 * done / n,
                         done / max(time.perf_counter() - pace.began, 1e-9))
        failures = {i: reason for i, reason in enumerate(outcomes) if reason is not None}
        _tell(noted, paths)
        if wrong_channels:    # as for sizes below: one setting, not bad rows
            i = min(wrong_channels)
            raise DataError(f"{len(wrong_channels)} of {n} images are stored {_stored(wrong_channels[i])} while the "
                            f"first readable one is {_stored(channels)} (a file of three equal channels is grey), e.g. "
                            f"{paths[i]}; set data.channels (1: every image read as grey, 3: as colour)")
        if wrong_size:   # one setting, not bad rows: skip_invalid would leave out every image of another size
            i = min(wrong_size)
            raise DataError(f"{len(wrong_size)} of {n} images differ in size from the first readable one "
                            f"({size[0]}x{size[1]} px), e.g. {paths[i]} is {wrong_size[i][0]}x{wrong_size[i][1]} px; "
                            "set data.image_size to resize every image to one size")
        if cache_dir is not None:
            assert tmp is not None and key is not None and isinstance(images, np.memmap)
            images.flush()
            del images                       # unmapped before it is read back: see _in_memory
            if unread:
                images = _in_memory(tmp)     # the next study decodes again
            else:
                _store(Path(cache_dir), key, tmp, n, failures, noted)
                images = _in_memory(Path(cache_dir) / f"{key}.npy")
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)      # stopped midway, or not stored: no partial copy of the images stays
        if holder is not None:
            holder.close()
    return DecodedImages(images, failures, False, time.perf_counter() - start, key)


def _in_memory(path: Path) -> np.ndarray:
    """The array file at ``path`` read into this process's own memory, not mapped.

    Why: the splits are carved out of the images in place (`dpmed.data.assembly.in_group_order`) only where the
    process owns them; a read-only map was copied out, and the pages of the map it read stayed resident beside the
    copy, so a study reading the cache (or writing it) peaked at twice the decoded bytes (benchmarks/RESULTS.md,
    "At the size of the public chest X-ray sets")."""
    mapped = np.load(path, mmap_mode="r")       # its header only: shape, dtype, where the pixels start
    shape, dtype, offset, contiguous = mapped.shape, mapped.dtype, mapped.offset, mapped.flags.c_contiguous
    del mapped
    if dtype != np.float32 or not contiguous:
        raise ValueError(f"holds {dtype}{'' if contiguous else ' (Fortran order)'}, not C-ordered float32")
    images = np.empty(shape, dtype=np.float32)  # its own buffer: np.load's is a view of a flat one
    if images.size == 0:                        # no image: a byte view of no bytes cannot be made (zeros in shape)
        return images
    with open(path, "rb") as f:
        f.seek(offset)
        if f.readinto(images.data.cast("B")) != images.nbytes:
            raise ValueError("ends before its last image")
    return images


def _tell(noted: dict[int, list[ImageNote]], paths: Sequence[Path]) -> None:
    """One line per note: how many files have it, and the first of them (not a line per file)."""
    having: dict[ImageNote, list[int]] = {}
    for i in sorted(noted):
        for note in noted[i]:
            having.setdefault(note, []).append(i)
    for note, rows in having.items():
        _log.warning("data: %d of %d images %s; the first is %s", len(rows), len(paths), note.what, paths[rows[0]])


def _sweep_abandoned(cache_dir: Path) -> None:
    """Delete the partial entries of decodes that died without cleaning up (SIGKILL: the out-of-memory killer,
    kill -9, a lost node), each a file of decoded patient images as large as the whole tensor. A decode holds an
    exclusive lock on its partial entry while it runs, which the kernel lets go when the process ends however it
    ends (in any container of the host, whatever its pid namespace); an entry whose lock can be taken is abandoned.
    Only this host's: on a folder shared over the network, a lock may not reach another host. Not on Windows (no
    flock)."""
    if fcntl is None:
        return
    host, freed = socket.gethostname(), 0
    for path in cache_dir.glob(".*.npy"):
        if path.name[1 + 64 + 1:-len(".npy")].rpartition(".")[0] != host:
            continue
        with contextlib.suppress(OSError), open(path, "rb") as f:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue                     # a decode still writing it
            size = os.fstat(f.fileno()).st_size
            path.unlink()
            freed += size
    if freed:
        _log.info("data: removed partial cache entries of decodes that were killed (%s) from %s", bytes_text(freed),
                  cache_dir)


def _reserve(path: Path, *, start: int) -> None:
    """Give ``path`` (an array file from open_memmap, its data from byte ``start``) all its disk blocks now.

    Why: open_memmap makes a sparse file, and a write through the map into a block the disk has no room for kills
    the process with SIGBUS ("Bus error": no message, no clean-up, and the partial file of decoded images stays).
    Reserved first, a full disk is an OSError (ENOSPC) here, before any image is decoded."""
    with open(path, "r+b") as f:
        size = os.fstat(f.fileno()).st_size
        if hasattr(os, "posix_fallocate"):      # Linux; glibc writes the blocks itself where the file system cannot
            try:
                os.posix_fallocate(f.fileno(), start, size - start)
                return
            except OSError as exc:
                if exc.errno in _NO_ROOM:
                    raise                       # any other refusal (a file system without it): write the zeros
        f.seek(start)                           # macOS, Windows: write the zeros the array holds anyway
        block = bytes(1 << 24)
        for left in range(size - start, 0, -len(block)):
            f.write(block[:left])
        f.flush()
        os.fsync(f.fileno())


def _store(cache_dir: Path, key: str, tmp: Path, n: int, failures: dict[int, str],
           noted: dict[int, list[ImageNote]]) -> None:
    """Rename the finished array into place, then write the index (its presence marks a complete entry). The notes
    go with it, as the failures do, so that a cached load tells them as the decode did."""
    os.replace(tmp, cache_dir / f"{key}.npy")
    notes = {str(i): [note.what for note in kept] for i, kept in noted.items() if kept}
    write_text_atomic(cache_dir / f"{key}.json", json.dumps(
        {"format": _FORMAT, "n": n, "failures": {str(i): r for i, r in failures.items()}, "notes": notes}),
        owner_only=True)


def _refuse_open_cache(cache_dir: Path) -> None:
    """DataError where cache_dir is a file or lies under one, or exists and belongs to another user or every user
    may write it: whoever can write it can replace the decoded images a study trains on (an entry's key follows from
    the files' sizes and times), or swap an entry being written for a file of theirs, which the decode then fills
    with patient images. Its entries are owner-only, so a folder shared with others was of no use to them anyway. A
    folder its group may write is let be: with the umask 002 of user-private groups (Debian, Ubuntu) every folder a
    user makes is so. Not checked on Windows (no owners)."""
    owner = getattr(os, "getuid", None)
    try:
        st = cache_dir.stat()
    except NotADirectoryError:      # else mkdir said only "Not a directory"
        file = file_in_the_way(cache_dir.parent) or cache_dir.parent
        raise DataError(f"data.cache_dir {cache_dir} lies under {file}, which is a file, not a folder: give a folder "
                        "(made if missing), or remove data.cache_dir to decode without a cache") from None
    except OSError:      # not there yet: made 0700 when the first entry is written
        link = link_to_nothing(cache_dir)
        if link is not None:        # else mkdir said only "File exists"
            raise DataError(f"data.cache_dir {cache_dir}: {link}, or remove data.cache_dir to decode without a "
                            "cache") from None
        return
    if not stat.S_ISDIR(st.st_mode):        # else mkdir said only "File exists"
        raise DataError(f"data.cache_dir {cache_dir} is a file, not a folder: give a folder (made if missing), or "
                        "remove data.cache_dir to decode without a cache")
    if owner is None:
        return
    if st.st_uid != owner():
        why = f"belongs to another user (uid {st.st_uid})"
    elif st.st_mode & 0o002:
        why = f"may be written by every user (mode {st.st_mode & 0o777:o})"
    else:
        return
    raise DataError(f"data.cache_dir {cache_dir} {why}: whoever can write it can replace the decoded images a study "
                    "trains on, or receive them as they are written; use a folder of yours that only you can write "
                    f"(chmod 700 {cache_dir}), or remove data.cache_dir to decode without a cache")


def _load(cache_dir: Path, key: str, n: int,
          shape: tuple[int, ...]) -> tuple[np.ndarray, dict[int, str], dict[int, list[ImageNote]]] | None:
    """A complete entry for ``key`` as (images, failures, notes), or None when there is none. ``shape``: each
    image's [C, H, W], which the entry's array must have. An entry written before notes were kept has none."""
    array, index = cache_dir / f"{key}.npy", cache_dir / f"{key}.json"
    read = index        # the file being read: the one an error names
    try:
        if not (array.is_file() and index.is_file()):
            return None
        meta = json.loads(index.read_text(encoding="utf-8"))
        failures = {int(i): str(r) for i, r in meta["failures"].items()}
        noted = {int(i): [ImageNote(str(what)) for what in kept] for i, kept in meta.get("notes", {}).items()}
        mismatch: str | None
        if meta["format"] != _FORMAT or meta["n"] != n:     # the index is the file that is wrong
            mismatch = f"it lists {meta['n']!r} images of format {meta['format']!r}; the key is for {n} of {_FORMAT!r}"
        else:
            read = array
            images = _in_memory(array)
            mismatch = None if images.shape == (n, *shape) else \
                f"it holds an array of shape {images.shape}; the key is for {(n, *shape)}"
    except PermissionError:
        raise DataError(f"cache entry {read} is not readable by you: dpmed keeps decoded images readable by their "
                        "owner only, so a cache made by another user is theirs; set a data.cache_dir of your own") \
            from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise DataError(f"cache entry {read} is damaged ({error_name(exc)}: {exc}); delete {array} and {index} "
                        "to decode again") from exc
    if mismatch is not None:
        raise DataError(f"cache entry {read} does not match its key ({mismatch}); delete {array} and {index} to "
                        "decode again")
    return images, failures, noted
