"""Overlap between a dataset declared public and the private one, found before any public pretraining.

Why refuse: pretraining on public data costs no privacy only if the public data hold none of the private patients
(METHODS.md s.9). An image in both sets trains the model without noise, and a test image in the public set inflates
the test metric. The public and private sets of medical imaging often share a source: MedMNIST's PneumoniaMNIST is
the Kermany chest X-rays, centre-cropped and shrunk to 28 px (Yang et al. 2023), so the two must never be used as
a public / private pair. Three checks, each on every split of both sets:

* **identical images**: a sha256 of each image's pixels as the study holds them (after decoding and preprocessing;
  byte-identical files decode to identical pixels, whatever their names);
* **shared patients**: the same patient id in both (ignoring case, spaces around it and leading zeros), where both sets
  publish patient ids (MedMNIST publishes none), and neither is generated (a generator's ids are numbers of its draws,
  not people: the phantom's "phantom-00001" of two seeds are two different synthetic images);
* **near-duplicates**: a perceptual hash, the DCT hash of Zauner 2010 ("Implementation and benchmarking of
  perceptual image hash functions"; pHash). Each image is made grey, resized to 32 x 32 (antialiased bilinear),
  and the lowest 16 x 16 coefficients of its 2-d DCT-II, less the DC term, are thresholded at their median: 255
  bits that survive resizing, re-encoding and contrast changes. Two images are near-duplicates when their hashes
  differ in at most ``max_distance`` bits. A resized copy keeps its hash; a *cropped* copy does not, and MedMNIST
  crops: so each image is also hashed after central crops to 95 %, 90 %, ... 50 % of its width or of its height,
  and after central crops of both at once (a zoom) to 95 %, 90 %, 87.5 %, 85 % and 80 % of each side (87.5 % is
  the common "resize to 256, centre-crop 224", which the one-axis crops miss), each cut as many pixels from either
  edge of the image upsampled to at least ``FINE`` px a side, so that a small image's crop is centred and of its
  fraction to within a fraction of a pixel; and a pair's distance is the least over one image's crops against the
  other's whole image, both ways round. A crop of one fraction along one axis
  and another along the other, a shift or a rotation can still escape (benchmarks/RESULTS.md, "Priors that cost no
  privacy", measures what is found).
  Two generated sets (the phantom at two seeds) are not compared this way: a generator has no recorded image to
  copy, and its images share one template by design (phantoms of two seeds come within the default
  ``max_distance`` of each other), so only identical images are looked for.

The default ``max_distance`` of 30 bits (11.8 % of 255) finds most of the Kermany images in PneumoniaMNIST, while
between two disjoint halves of the Kermany patients it flags only one pair of byte-identical images filed under two
patient ids (which `dpmed.data.duplicates` tells within one private set), and the first chance match lies a few
bits above it: measured on the shared data in
benchmarks/RESULTS.md, section "Priors that cost no privacy" ("What the overlap refusal finds on the shared
data"; the slow tests of ``tests/data/test_overlap.py`` print the counts). The zooms (both-axis crops) changed none
of those counts.

What the checks find is printed to the user and never written to a shareable file: whether a private image has a
look-alike in a public set is a statistic of the private images. A study that trains at all has passed, so the
record only says that the checks ran and with which threshold.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np

from dpmed.data.manifest import patient_key
from dpmed.data.pace import Pace
from dpmed.data.sample import Dataset, ImageSet
from dpmed.errors import DataError

if TYPE_CHECKING:   # torch is imported where it is used: the study file's schema imports this module's constants
    import torch

__all__ = ["Overlap", "ImagePair", "find_overlap", "refuse_overlap", "perceptual_hashes", "hash_distances",
           "near_duplicates", "content_hashes", "HASH_BITS", "NEAR_DUPLICATE_BITS", "CROP_FRACTIONS", "ZOOM_FRACTIONS"]

_log = logging.getLogger(__name__)

HASH_SIZE = 32                  # images are resized to this before the DCT
DCT_KEEP = 16                   # the lowest DCT_KEEP x DCT_KEEP coefficients, less DC, make the hash
HASH_BITS = DCT_KEEP * DCT_KEEP - 1          # 255
NEAR_DUPLICATE_BITS = 30        # default max_distance (see the module docstring for how it was chosen)
CROP_FRACTIONS = (0.95, 0.9, 0.85, 0.8, 0.75, 0.7, 0.65, 0.6, 0.55, 0.5)    # of the width, or of the height
ZOOM_FRACTIONS = (0.95, 0.9, 0.875, 0.85, 0.8)                                # of both at once (a zoom)
_WORDS = (HASH_BITS + 63) // 64
_CHUNK = 256
_BLOCKS = 16                     # multi-index hashing's blocks (_BlockIndex)
_INDEXED_BELOW = 3 * _BLOCKS   # up to 2 bits a block (137 buckets of each): beyond, comparing all pairs is cheaper
_CANDIDATES = 1 << 22          # candidate pairs _BlockIndex.within compares at once
# What the search costs, in hash pairs compared one by one (the 2-core VM, PneumoniaMNIST's hashes; benchmarks/
# RESULTS.md, "Dataset size: what grows with N"): an index, about its bucket table (16 blocks of 2^16 entries); a
# private hash, about 6 pairs for each bucket it looks up (16 blocks x 17 buckets at 30 bits: about 1,600 pairs, so a
# public set of fewer hashes is compared pair by pair; 16 x 137 from 32 bits: 13,000); and each candidate in those
# buckets, about 8 pairs (gathered, sorted, and met in up to 16 blocks where films hash alike). The search runs where
# it costs less than comparing every pair, whatever the sizes.
_INDEX_COST = _BLOCKS << (_WORDS * 64 // _BLOCKS)
_LOOKUP_COST = 6
_CANDIDATE_COST = 8
# Crops are cut from the image upsampled (bilinear, by a whole factor) to at least FINE pixels a side, the same
# number from each edge: a crop's fraction and centre are then exact to a fraction of an original pixel. Cut from
# the image itself, a 95 % crop of a 28 px image is half a pixel off centre, and that half pixel can move the hash
# past the threshold (benchmarks/RESULTS.md, "Crops cut to the pixel's fraction", measures both).
FINE = 128
_EXAMPLES = 5
_SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class ImagePair:
    """One public image and one private image that a check matched (``where``: split, index and patient)."""

    public: str
    private: str
    distance: int = 0


@dataclass(frozen=True)
class Overlap:
    """What the three checks found between a public and a private dataset.

    identical: pairs of images with identical pixels. shared_patients: patient ids in both (None: not checked, see
    ``patients_note``). near_duplicates: each private image with a public image within ``max_distance`` bits, its
    nearest (None: not checked, see ``near_note``). n_public / n_private: images compared (all splits)."""

    n_public: int
    n_private: int
    identical: tuple[ImagePair, ...]
    shared_patients: tuple[str, ...] | None
    patients_note: str
    near_duplicates: tuple[ImagePair, ...] | None
    near_note: str
    max_distance: int

    @property
    def found(self) -> bool:
        return bool(self.identical or self.shared_patients or self.near_duplicates)

    def checks(self) -> dict[str, str]:
        """Which checks ran, for a record (no count: see the module docstring)."""
        return {"identical images": "sha256 of every image's pixels, all splits",
                "shared patients": self.patients_note,
                "near-duplicates": self.near_note}

    def describe(self) -> str:
        """A message for the user: what was found, with a few examples of each."""
        lines = []
        if self.identical:
            lines.append(f"{len(self.identical)} private image(s) are identical to public ones, e.g. "
                         + "; ".join(f"{p.private} = public {p.public}" for p in self.identical[:_EXAMPLES]))
        if self.shared_patients:
            lines.append(f"{len(self.shared_patients)} patient id(s) are in both sets, e.g. "
                         + ", ".join(self.shared_patients[:_EXAMPLES]))
        if self.near_duplicates:
            lines.append(f"{len(self.near_duplicates)} of {self.n_private} private images have a near-duplicate in "
                         f"the public set (perceptual hash within {self.max_distance} of {HASH_BITS} bits), e.g. "
                         + "; ".join(f"{p.private} ~ public {p.public} ({p.distance} bits)"
                                     for p in self.near_duplicates[:_EXAMPLES]))
        return "\n".join(f"  - {line}" for line in lines) if lines else "no overlap found"


def _grey(images: np.ndarray) -> torch.Tensor:
    """[N, C, H, W] -> [N, 1, H, W] float32, the mean over channels."""
    import torch

    return torch.from_numpy(np.ascontiguousarray(images, dtype=np.float32)).mean(1, keepdim=True)


def _fine(x: torch.Tensor) -> torch.Tensor:
    """``x`` [N, 1, H, W] upsampled by the least whole factor that gives at least FINE pixels a side (see FINE)."""
    import torch.nn.functional as F

    factor = -(-FINE // min(x.shape[-2:]))
    return x if factor == 1 else F.interpolate(x, scale_factor=factor, mode="bilinear", align_corners=False)


def _central(x: torch.Tensor, fraction: float, axis: int) -> torch.Tensor:
    """The central ``fraction`` of ``x`` [N, 1, H, W] along ``axis`` (-1: width, -2: height): as many pixels cut
    from each edge."""
    n = x.shape[axis]
    cut = min(int(round(n * (1 - fraction) / 2)), (n - 1) // 2)
    return x.narrow(axis, cut, n - 2 * cut)


def _hash(x: torch.Tensor) -> np.ndarray:
    """The DCT hash of grey images x [N, 1, H, W]: uint64 [N, _WORDS] (the module docstring)."""
    import scipy.fft                  # imported here too: the schema's import of this module needs neither
    import torch.nn.functional as F

    small = F.interpolate(x, size=(HASH_SIZE, HASH_SIZE), mode="bilinear", align_corners=False,
                          antialias=True)[:, 0].numpy()                                       # [N, 32, 32]
    coefficients = scipy.fft.dctn(small, axes=(1, 2), norm="ortho")[:, :DCT_KEEP, :DCT_KEEP]
    flat = coefficients.reshape(len(x), -1)[:, 1:]                                            # [N, 255], no DC
    bits = flat > np.median(flat, axis=1, keepdims=True)
    bits = np.pad(bits, ((0, 0), (0, _WORDS * 64 - HASH_BITS)))
    return np.packbits(bits, axis=1).view(">u8").astype(np.uint64)                         # [N, _WORDS]


def perceptual_hashes(images: np.ndarray | Sequence[np.ndarray], *, crops: tuple[float, ...] = (),
                      zooms: tuple[float, ...] = (), what: str = "") -> np.ndarray:
    """DCT hashes of images [N, C, H, W] (or of several such arrays, one after another, as a dataset's splits are
    kept): uint64 [V, N, words], V = 1 + 2 len(crops) + len(zooms): the whole image, then each central crop of the
    width, then of the height (``crops``: fractions kept), then each central crop of both at once (``zooms``: the
    fraction kept of each side); the crops are cut from the image upsampled (FINE). A long run logs how far it has
    come, naming the images ``what``."""
    parts = [images] if isinstance(images, np.ndarray) else list(images)
    n, done, out = sum(map(len, parts)), 0, []
    pace = Pace(_log)
    for part in parts:
        for start in range(0, len(part), _CHUNK):
            x = _grey(part[start:start + _CHUNK])
            fine = _fine(x) if crops or zooms else x
            variants = ([x] + [_central(fine, f, -1) for f in crops] + [_central(fine, f, -2) for f in crops]
                        + [_central(_central(fine, f, -1), f, -2) for f in zooms])
            out.append(np.stack([_hash(v) for v in variants]))
            done += len(x)
            pace.log(done / n, "overlap: hashed %d of %d%s images", done, n, f" {what}" if what else "")
    if not out:
        return np.zeros((1 + 2 * len(crops) + len(zooms), 0, _WORDS), dtype=np.uint64)
    return np.concatenate(out, axis=1)


def hash_distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamming distances between hashes a [n, words] and b [m, words]: int32 [n, m]."""
    d = np.zeros((len(a), len(b)), dtype=np.int32)
    for w in range(a.shape[1]):
        d += np.bitwise_count(a[:, None, w] ^ b[None, :, w])
    return d


def _nearest(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each hash of a [n, words], the least distance to b [m, words] and where: (int32 [n], int64 [n])."""
    best = np.full(len(a), HASH_BITS + 1, dtype=np.int32)
    where = np.zeros(len(a), dtype=np.int64)
    if len(b) == 0:
        return best, where
    for start in range(0, len(a), _CHUNK):
        d = hash_distances(a[start:start + _CHUNK], b)
        best[start:start + _CHUNK], where[start:start + _CHUNK] = d.min(1), d.argmin(1)
    return best, where


def near_duplicates(private: np.ndarray | Sequence[np.ndarray], public: np.ndarray | Sequence[np.ndarray], *,
                    crops: tuple[float, ...] = CROP_FRACTIONS, zooms: tuple[float, ...] = ZOOM_FRACTIONS,
                    max_distance: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """For each private image [N, C, H, W], the least hash distance to any public image [M, C', H', W'] over the
    crops and zooms of either against the whole of the other, and the index of that public image: (int32 [N],
    int64 [N]). Either side may be several arrays (a dataset's splits), indexed one after another.

    ``max_distance`` None compares every pair: the cost grows with N x M, 51 hash pairs per image pair (what that
    takes: benchmarks/RESULTS.md, "What the check costs at scale"). Given ``max_distance``, only the pairs that can
    lie within it may be compared (:func:`_least_distances`). A long run logs how far it has come."""
    hp = perceptual_hashes(private, crops=crops, zooms=zooms, what="private")        # [V, N, words]
    hq = perceptual_hashes(public, crops=crops, zooms=zooms, what="public")          # [V, M, words]
    return _least_distances(hp, hq, max_distance)


def _least_distances(hp: np.ndarray, hq: np.ndarray,
                     max_distance: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`near_duplicates` on hashes hp [V, N, words] and hq [V, M, words] (variant 0 the whole images): for
    each private hash set, the least distance of its variants against the public whole hashes and of its whole hash
    against the public variants, and where (int32 [N], int64 [N]).

    Given ``max_distance`` (below ``_INDEXED_BELOW``), where N x M pairs cost more than an index and N searches
    (``_INDEX_COST``, ``_LOOKUP_COST``), each variant pair is searched by block (:class:`_BlockIndex`; the whole
    public hashes' index built once for the V variants searched against it), with the same answer for every
    private image whose least distance is at most ``max_distance``; the others get HASH_BITS + 1 and index 0, as
    where the public set is empty (compared pair by pair, they keep their least distance, also above
    ``max_distance``)."""
    best = np.full(hp.shape[1], HASH_BITS + 1, dtype=np.int32)
    where = np.zeros(hp.shape[1], dtype=np.int64)
    pairs = [(v, 0) for v in range(len(hp))] + [(0, v) for v in range(1, len(hq))]    # (private, public) variants
    n, m = hp.shape[1], hq.shape[1]
    indexed = (max_distance is not None and max_distance < _INDEXED_BELOW
               and n * m > _INDEX_COST + n * _LOOKUP_COST * _BLOCKS * len(_flips(max_distance // _BLOCKS)))
    whole = _BlockIndex(hq[0]) if indexed else None
    pace = Pace(_log)
    for i, (v, u) in enumerate(pairs, start=1):
        if whole is not None and max_distance is not None:     # indexed
            d, j = (whole if u == 0 else _BlockIndex(hq[u])).within(hp[v], max_distance)
        else:
            d, j = _nearest(hp[v], hq[u])
        better = d < best
        best[better], where[better] = d[better], j[better]
        pace.log(i / len(pairs), "overlap: compared %d of %d crops of %d private against %d public images", i,
                 len(pairs), n, m)
    return best, where


def _block_keys(h: np.ndarray) -> np.ndarray:
    """The _BLOCKS keys of each hash h [n, words]: uint16 [n, _BLOCKS], block k holding bits k, k + _BLOCKS, k + 2
    _BLOCKS, ... of the 256 (the last bit pads, 0 in every hash). Interleaved, not consecutive: consecutive bits
    are neighbouring DCT frequencies, and chest films agree on many of the lowest, so a block of those would put
    most films in a few buckets."""
    bits = np.unpackbits(np.ascontiguousarray(h, dtype=">u8").view(np.uint8), axis=1)        # [n, 256]
    interleaved = np.arange(bits.shape[1]).reshape(-1, _BLOCKS).T.ravel()                   # block by block
    return np.ascontiguousarray(np.packbits(bits[:, interleaved], axis=1)).view(">u2").astype(np.uint16)  # [n, B]


def _flips(radius: int) -> np.ndarray:
    """Every key of a block's width with at most ``radius`` bits set: int64 [F], 0 first."""
    from itertools import combinations

    width = _WORDS * 64 // _BLOCKS
    return np.array([sum(1 << k for k in bits) for r in range(radius + 1) for bits in combinations(range(width), r)],
                    dtype=np.int64)


class _BlockIndex:
    """Hashes b [m, words] indexed by each block's key, for :meth:`within`: built once per public variant searched."""

    def __init__(self, b: np.ndarray) -> None:
        self.hashes = b
        self.columns = np.ascontiguousarray(b.T)                                                # [words, m]
        keys = _block_keys(b)                                                                   # [m, B]
        self.order = np.argsort(keys, axis=0, kind="stable").T.ravel()                          # [B m] (radix sort)
        buckets = 1 << (_WORDS * 64 // _BLOCKS)
        counts = np.bincount((keys.astype(np.int64) + np.arange(_BLOCKS) * buckets).ravel(),
                             minlength=_BLOCKS * buckets)                                       # [B buckets]
        self.starts = np.concatenate([[0], np.cumsum(counts)])       # bucket k of block i: order[starts[i B + k]:...]
        self.buckets = buckets

    def within(self, a: np.ndarray, max_distance: int) -> tuple[np.ndarray, np.ndarray]:
        """As :func:`_nearest` for each hash of a [n, words] whose least distance to the indexed hashes is at most
        ``max_distance``, the same least distance and index (the first of equals); HASH_BITS + 1 and 0 for the
        others.

        Multi-index hashing (Norouzi, Punjani and Fleet 2012, "Fast search in Hamming space with multi-index
        hashing"): the bits are cut into _BLOCKS blocks, and two hashes within ``max_distance`` bits differ in at most
        ``max_distance // _BLOCKS`` bits of at least one block (else they would differ in more). So each hash of a is
        compared only with the indexed hashes in the buckets within that many bits of one of its blocks' keys: at
        the default 30 bits, 17 buckets a block, and among chest films a few per cent of the pairs
        (benchmarks/RESULTS.md, "Dataset size: what grows with N"), where :func:`_nearest` compares all. A chunk of
        ``a`` whose buckets hold more candidates than that saves (``_CANDIDATE_COST``; films that hash alike meet in
        every block) is compared pair by pair. The answer is exact: no pair within ``max_distance`` is left out."""
        best = np.full(len(a), HASH_BITS + 1, dtype=np.int32)
        where = np.zeros(len(a), dtype=np.int64)
        if len(a) == 0 or len(self.hashes) == 0:
            return best, where
        flips = _flips(max_distance // _BLOCKS)                                                 # [F]
        offsets = (np.arange(_BLOCKS) * self.buckets)[None, :, None]                            # [1, B, 1]
        columns_a = np.ascontiguousarray(a.T)                                                   # [words, n]
        for first in range(0, len(a), _CHUNK):
            keys = _block_keys(a[first:first + _CHUNK]).astype(np.int64)                        # [c, B]
            bucket = (offsets + (keys[:, :, None] ^ flips)).reshape(len(keys), -1)              # [c, B F]
            lo, hi = self.starts[bucket], self.starts[bucket + 1]
            if _CANDIDATE_COST * (hi - lo).sum() + _LOOKUP_COST * bucket.size > len(keys) * len(self.hashes):
                # cheaper pair by pair (look-alike or blank films meet in every block)
                d, j = _nearest(a[first:first + _CHUNK], self.hashes)
                far = d > max_distance
                d[far], j[far] = HASH_BITS + 1, 0
                best[first:first + _CHUNK], where[first:first + _CHUNK] = d, j
                continue
            # at most about _CANDIDATES pairs at once: a bucket that most hashes share (blank films) stays in memory
            group = np.cumsum((hi - lo).sum(axis=1)) // _CANDIDATES                            # [c]
            for g in np.unique(group):
                rows = np.flatnonzero(group == g)
                low, n = lo[rows].ravel(), (hi[rows] - lo[rows]).ravel()                        # [g B F]
                query = np.repeat(np.repeat(rows, bucket.shape[1]), n)                          # [K] into the chunk
                j = self.order[np.repeat(low - (np.cumsum(n) - n), n) + np.arange(n.sum())]     # [K]
                d = np.zeros(len(j), dtype=np.int32)
                for word_a, word_b in zip(columns_a, self.columns):   # a word at a time: faster than whole rows
                    d += np.bitwise_count(word_a[first + query] ^ word_b[j])
                keep = d <= max_distance
                query, j, d = query[keep] + first, j[keep], d[keep]
                if not len(query):
                    continue
                firsts = np.lexsort((j, d, query))
                take = firsts[np.r_[True, query[firsts][1:] != query[firsts][:-1]]]             # per query: least d, j
                best[query[take]], where[query[take]] = d[take], j[take]
        return best, where


def _pooled(dataset: Dataset) -> tuple[list[np.ndarray], list[str], np.ndarray]:
    """(each split's images [n, C, H, W], one after another; where each one is; patient ids [N]). The splits are
    not concatenated: a copy of a large public set would double its memory."""
    sets: list[ImageSet] = [getattr(dataset, s) for s in _SPLITS]
    images = [s.images for s in sets]
    where = [f"{name}[{i}] (patient {pid})" for name, s in zip(_SPLITS, sets)
             for i, pid in enumerate(s.patient_ids.tolist())]
    return images, where, np.concatenate([s.patient_ids for s in sets]).astype(str)


def content_hashes(parts: Sequence[np.ndarray]) -> list[str]:
    """sha256 of each image's pixels as the study holds them (float32), over ``parts`` [n, C, H, W] one after
    another: byte-identical files decode to identical pixels, whatever their names."""
    return [hashlib.sha256(np.ascontiguousarray(x, dtype=np.float32).tobytes()).hexdigest()
            for images in parts for x in images]


def find_overlap(public: Dataset, private: Dataset, *, max_distance: int = NEAR_DUPLICATE_BITS,
                 crops: tuple[float, ...] = CROP_FRACTIONS, zooms: tuple[float, ...] = ZOOM_FRACTIONS) -> Overlap:
    """Run the three checks of the module docstring between every split of ``public`` and of ``private``."""
    pub_images, pub_where, pub_patients = _pooled(public)
    priv_images, priv_where, priv_patients = _pooled(private)

    identical: tuple[ImagePair, ...] = ()
    if pub_images[0].shape[1:] == priv_images[0].shape[1:]:
        first: dict[str, int] = {}
        for j, h in enumerate(content_hashes(pub_images)):
            first.setdefault(h, j)
        identical = tuple(ImagePair(public=pub_where[first[h]], private=priv_where[i])
                          for i, h in enumerate(content_hashes(priv_images)) if h in first)

    if public.synthetic or private.synthetic:
        shared, patients_note = None, "not checked: a generated set's ids number its draws, they are not people"
    elif not (public.patients_known and private.patients_known):
        shared = None
        patients_note = (f"not checked: {public.name if not public.patients_known else private.name} publishes no "
                         "patient ids (each image is its own patient)")
    else:
        # compared as one patient where only case, spaces or leading zeros differ: matching more ids refuses more (a
        # false refusal is told and can be undone; a missed patient trains without noise)
        public_ids = {patient_key(pid): pid for pid in pub_patients.tolist()}
        shared = tuple(sorted({public_ids[key] for key in map(patient_key, priv_patients.tolist())
                               if key in public_ids}))
        patients_note = ("patient ids of both sets, all splits (ignoring case, surrounding spaces and the leading "
                         "zeros of numbers)")

    if public.synthetic and private.synthetic:
        near, near_note = None, ("not checked: both sets are generated (no recorded image to copy; identical images "
                                 "are checked)")
    else:
        distance, nearest = near_duplicates(priv_images, pub_images, crops=crops, zooms=zooms,
                                            max_distance=max_distance)
        near = tuple(ImagePair(public=pub_where[nearest[i]], private=priv_where[i], distance=int(distance[i]))
                     for i in np.flatnonzero(distance <= max_distance))
        near_note = (f"DCT perceptual hash ({HASH_BITS} bits at {HASH_SIZE} px), at most {max_distance} bits apart, "
                     f"central crops to {min(crops, default=1):.0%} of width or height and to "
                     f"{min(zooms, default=1):.0%} of both, either way")
    return Overlap(n_public=len(pub_where), n_private=len(priv_where), identical=identical,
                   shared_patients=shared, patients_note=patients_note, near_duplicates=near, near_note=near_note,
                   max_distance=max_distance)


def refuse_overlap(public: Dataset, private: Dataset, *, max_distance: int = NEAR_DUPLICATE_BITS,
                   what: str = "the public dataset") -> Overlap:
    """:func:`find_overlap`, raising DataError that lists what was found when the sets overlap in any way."""
    overlap = find_overlap(public, private, max_distance=max_distance)
    if overlap.found:
        raise DataError(
            f"{what} ({public.name}, {overlap.n_public} images) overlaps the private dataset ({private.name}, "
            f"{overlap.n_private} images):\n{overlap.describe()}\nPublic pretraining on images or patients of the "
            "private set would train on them without noise (and on test images, inflate the test metric); use a "
            "public set that shares no source with the private one (PneumoniaMNIST and the Kermany folders share "
            "their images). If the near-duplicates are look-alikes of different people, check the pairs listed and "
            "lower the threshold (pretrain.near_duplicate_bits)."
            + (" If the shared patient ids only look alike (two releases that each number their patients 1, 2, 3, "
               "...), ids are compared ignoring case, spaces around them and leading zeros: give the public set's "
               "ids a prefix of its own in its table, "
               "once you know that no patient is in both." if overlap.shared_patients else ""))
    return overlap
