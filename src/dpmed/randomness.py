"""Where dpmed's randomness comes from: public streams of the study seed, and each run's secret privacy randomness.

The two kinds are kept apart (METHODS.md s.2b):

* **Public randomness** (model initialisation, data splits, which test images are explained, the bootstrap, which
  patients a canary is made from) derives from the study seed with :func:`public_seed`: anyone may rerun it, and
  nothing private rests on it.
* **Privacy randomness** (Poisson sampling, DP-SGD noise, local-DP noise, the canaries' inclusion bits) is what
  every eps rests on. An adversary who can regenerate it subtracts the noise, and two runs that share it let anyone
  cancel it (with noise multipliers s1, s2 and the same draws u, s2 * u1 - s1 * u2 is noise-free). So
  :meth:`PrivacyRandomness.secure` keys it with 256 bits from the operating system's entropy, fresh for every run:
  independent across runs, arms, swept values and seeds, and derived from nothing that dpmed writes to a shareable
  file. Its key lives only in the run's private folder while the run is unfinished (so that a resumed run continues
  the very same draws) and is deleted when the run finishes.

The generator is AES-128 in counter mode (randomgen's ``AESCounter``, AES-NI where the CPU has it), a
cryptographically secure generator: its output reveals nothing about its key or about other outputs. numpy's
``Generator`` turns it into floats: 53-bit uniforms, float64 Gaussians (ziggurat) and Laplace draws. Opacus's
``secure_mode`` draws from torchcsprng's ``/dev/urandom`` generator (unmaintained; no build for current torch) and
sums 4 float32 Gaussians per coordinate against floating-point attacks (Holohan and Braghin 2021, arXiv:2107.10138);
dpmed instead draws float64 noise, adds it to the clipped sum in float64 and rounds the result to the model's float32
(`dpmed.training.dp_sgd`), so every float32 output is reachable from every sum and the gaps in the set of float64
noise values that those attacks read (Mironov 2012) fall far below the output's rounding. Residual risks, stated:
the continuous samplers are not exact (Canonne, Kamath, Steinke 2020), and timing is not constant. One way in which
they are not exact is priced rather than stated: their draws are bounded (:data:`GAUSSIAN_DRAW_BOUND`,
:data:`LAPLACE_DRAW_BOUND`), and `dpmed.accounting.truncation` turns the bound into delta, or voids a claim at
noise so small that one unit moves an output past every draw. The one integer
release, the training set's noisy size (`dpmed.released_size`), uses their exact discrete Laplace sampler
(:func:`discrete_laplace`) over integer draws from the operating system.

``PrivacyRandomness.reproducible(seed=..., run_id=...)`` derives the key from the study seed and the run id instead:
for tests and debugging only (study key ``privacy_randomness: reproducible``). Its runs are labelled "not DP against
anyone who knows the seed": the seed is published in study.yaml and run.json.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import secrets
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, NamedTuple

import numpy as np
from randomgen import AESCounter

__all__ = ["PrivacyRandomness", "PRIVACY_STREAMS", "RandomnessMode", "public_seed", "poisson_mask",
           "poisson_mask_words", "NOT_DP_REPRODUCIBLE", "discrete_laplace", "GAUSSIAN_DRAW_BOUND",
           "LAPLACE_DRAW_BOUND", "DRAW_BOUND", "DRAW_BOUNDS", "SavedKey", "saved_key"]

RandomnessMode = Literal["secure", "reproducible"]

# The independent streams of a run's privacy randomness, one per use, so that (say) the number of Poisson draws
# never shifts the noise; a run asks for them by name.
PRIVACY_STREAMS = ("sampling", "noise", "local_dp", "canaries", "examples")

# What a reproducible run's privacy card, results row and report say about it.
NOT_DP_REPRODUCIBLE = ("not DP against anyone who knows the seed: privacy randomness derived from the published "
                       "study seed (privacy_randomness: reproducible, for tests and debugging)")

# The largest magnitude numpy's float64 samplers return for unit noise, whatever bit generator feeds them: their
# uniforms are multiples of 2^-53 in [0, 1 - 2^-53] (next_double). Gaussian (the ziggurat of
# Generator.standard_normal): a tail draw is r + x with x = -log(1 - u1) / r, accepted only if
# -2 log(1 - u2) > x^2, and -log(1 - u2) <= 53 log 2, so |Z| < r + sqrt(2 * 53 log 2), r = 3.6541528853610088 the
# ziggurat's last layer. Laplace (Generator.laplace): -log(2 - 2U) with 2 - 2U rounded to at least 2^-53 above 0,
# and log(2U) with U at least 2^-53 below, so draws lie in [-52 log 2, 53 log 2]: the bound that counts is the nearer
# end, 52 log 2 (a shift towards the lower end meets it first). tests/test_randomness.py feeds the samplers the
# extreme words and finds draws at the bounds.
GAUSSIAN_DRAW_BOUND = 3.6541528853610088 + math.sqrt(2 * 53 * math.log(2))      # 12.2258...
LAPLACE_DRAW_BOUND = 52 * math.log(2)                                          # 36.0437...
DRAW_BOUND = {"gaussian": GAUSSIAN_DRAW_BOUND, "laplace": LAPLACE_DRAW_BOUND}
# The bounds in words, for a card that rests on them.
DRAW_BOUNDS = {"gaussian": "numpy's Gaussian never exceeds 12.23 std",
               "laplace": "numpy's Laplace lies between -36.04 and 36.74 scales"}

_KEY_BYTES = 32
_REPRODUCIBLE_DOMAIN = b"dpmed reproducible privacy randomness v1"
_STREAM_DOMAIN = b"dpmed privacy stream v1"
_PUBLIC_DOMAIN = b"dpmed public stream v1"


def public_seed(seed: int, stream: str) -> int:
    """A 63-bit seed for the public randomness called ``stream`` (e.g. "init", "splits", "canary_sources"),
    derived from the study ``seed``: independent across stream names, the same on every machine, and never used
    for anything a privacy claim rests on."""
    digest = hashlib.sha256(_PUBLIC_DOMAIN + b"\0" + str(int(seed)).encode() + b"\0" + stream.encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def _stream_key(root: bytes, name: str) -> int:
    """The 128-bit AES key of stream ``name``: SHA-256 of the run's root key and the name (independent streams)."""
    return int.from_bytes(hashlib.sha256(_STREAM_DOMAIN + root + name.encode()).digest()[:16], "little")


def _key_check(key: int) -> str:
    """A digest that tells a stream's key apart from another's without showing it (a saved position's owner)."""
    return hashlib.sha256(_STREAM_DOMAIN + b"\0check\0" + key.to_bytes(16, "little")).hexdigest()[:16]


def _position(generator: np.random.Generator) -> str:
    """The 64-bit words a stream has handed out, and whether half of the last waits for a 32-bit draw: JSON text
    that holds no key and no keystream. numpy's AES state holds both (its key schedule, and up to 8 words it made
    ahead, the next step's block keys among them): in a checkpoint it reached every traceback that shows the locals
    of the checkpoint's write (torch.save's own frames included), and no repr can hide a dict that torch's
    weights-only reader must read back."""
    s = generator.bit_generator.state["s"]
    words, half_used = _drawn(generator)
    return json.dumps({"words": words, "half_used": half_used,
                       "key_check": _key_check(int(s["seed"][0]) | int(s["seed"][1]) << 64)})


def _drawn(generator: np.random.Generator) -> tuple[int, bool]:
    """(the 64-bit words an AES stream has handed out, whether half of the last waits for a 32-bit draw)."""
    state = generator.bit_generator.state
    s = state["s"]
    counter = int(s["counter"][0]) | int(s["counter"][1]) << 64     # the next of 4 blocks of 2 words to encrypt
    return 2 * counter - 8 + int(s["offset"]) // 8, bool(state["has_uint32"])


def _generator_at(key: int, saved: Mapping[str, Any]) -> dict[str, Any]:
    """The AES state of stream ``key`` at the position `_position` saved."""
    words = int(saved["words"])
    state = AESCounter(key=key).advance(words).state
    if saved["half_used"]:         # the high half of the last word is the next 32-bit draw
        state["has_uint32"] = 1
        state["uinteger"] = int(AESCounter(key=key).advance(words - 1).random_raw()) >> 32
    return state


def _state_from_json(text: str) -> dict[str, Any]:
    """A stream's state as checkpoints saved it before they held positions only (numpy's state, key included)."""
    def arrays(v: Any) -> Any:
        if isinstance(v, dict) and set(v) == {"dtype", "values"}:
            return np.array(v["values"], dtype=v["dtype"])
        if isinstance(v, dict):
            return {k: arrays(x) for k, x in v.items()}
        return v
    return arrays(json.loads(text))


@dataclass(frozen=True, eq=False)
class PrivacyRandomness:
    """The privacy randomness of one run: independent AES-CTR streams under one root key.

    ``mode`` is "secure" (root key from OS entropy) or "reproducible" (from the study seed and run id: not DP
    against anyone who knows the seed). Streams are created on first use and remember their position, so the
    sampler and the noise each continue where they stopped; :meth:`state` and :meth:`restore` carry those
    positions through a (private) checkpoint so that a resumed run makes exactly the draws an uninterrupted one
    would. Never write :meth:`root_hex` or :meth:`state` anywhere but the run's private folder. The key is left out
    of the repr: a traceback that shows each frame's locals (IPython's verbose mode, pytest --showlocals, a crash
    reporter) prints the repr of the randomness an interrupted run holds, and that run keeps its key to resume.
    """

    root: bytes = field(repr=False)
    mode: RandomnessMode

    def __post_init__(self) -> None:
        if len(self.root) != _KEY_BYTES:
            raise ValueError(f"a privacy randomness root key has {_KEY_BYTES} bytes, got {len(self.root)}")
        if self.mode not in ("secure", "reproducible"):
            raise ValueError(f"mode must be 'secure' or 'reproducible', got {self.mode!r}")
        object.__setattr__(self, "_streams", {})

    @classmethod
    def secure(cls) -> "PrivacyRandomness":
        """Fresh randomness: a root key of 256 bits from the operating system (``secrets``), never derived from
        anything dpmed publishes."""
        return cls(secrets.token_bytes(_KEY_BYTES), "secure")

    @classmethod
    def reproducible(cls, *, seed: int, run_id: str) -> "PrivacyRandomness":
        """Randomness derived from the study ``seed`` and ``run_id`` (distinct runs still get independent streams,
        so a sweep never shares noise). Anyone who knows the seed can regenerate it: NOT DP against them."""
        digest = hashlib.sha256(_REPRODUCIBLE_DOMAIN + b"\0" + str(int(seed)).encode() + b"\0"
                                + run_id.encode()).digest()
        return cls(digest, "reproducible")

    @classmethod
    def from_root_hex(cls, text: str, mode: RandomnessMode) -> "PrivacyRandomness":
        """The randomness whose :meth:`root_hex` was saved in a run's private folder (resuming that run)."""
        return cls(bytes.fromhex(text.strip()), mode)

    def root_hex(self) -> str:
        return self.root.hex()

    def stream(self, name: str) -> np.random.Generator:
        """The generator of stream ``name`` (one of PRIVACY_STREAMS), the same object on every call."""
        if name not in PRIVACY_STREAMS:
            raise ValueError(f"unknown privacy stream {name!r}; known: {', '.join(PRIVACY_STREAMS)}")
        streams: dict[str, np.random.Generator] = self._streams  # type: ignore[attr-defined]
        if name not in streams:
            streams[name] = np.random.Generator(AESCounter(key=_stream_key(self.root, name)))
        return streams[name]

    def state(self) -> dict[str, str]:
        """The positions of the streams used so far (JSON text per stream, `_position`: no key), for a checkpoint."""
        streams: dict[str, np.random.Generator] = self._streams  # type: ignore[attr-defined]
        return {name: _position(g) for name, g in streams.items()}

    def drawn(self, name: str) -> tuple[int, bool]:
        """(the 64-bit words stream ``name`` has handed out, whether half of the last waits for a 32-bit draw): where
        it stands, to check against the draws a checkpoint's step count implies."""
        return _drawn(self.stream(name))

    def restore(self, state: Mapping[str, str], *, needed: tuple[str, ...] = ()) -> None:
        """Continue every stream from :meth:`state` (taken from this same root key). ValueError where a stream in
        ``needed`` (those the caller goes on drawing from) has no saved position: from its start it would draw again
        the batches and noise of steps already taken and counted."""
        missing = [name for name in needed if name not in state]
        if missing:
            raise ValueError(f"no saved position of privacy stream {missing[0]!r}")
        for name, text in state.items():
            generator, key, saved = self.stream(name), _stream_key(self.root, name), _state_from_json(text)
            if "s" in saved:          # numpy's whole state: a checkpoint of an earlier dpmed
                if key & ((1 << 64) - 1) != int(saved["s"]["seed"][0]):
                    raise ValueError(f"the saved state of privacy stream {name!r} belongs to another key")
                generator.bit_generator.state = saved
                continue
            if saved["key_check"] != _key_check(key):
                raise ValueError(f"the saved state of privacy stream {name!r} belongs to another key")
            generator.bit_generator.state = _generator_at(key, saved)


class SavedKey(NamedTuple):
    """An unfinished run's private key file read back (`saved_key`): its randomness, the attempt it serves (the
    run's settings and training data, hashed: `dpmed.run`; None where the field holds no fingerprint any dpmed
    writes, "<format>:<sha256>" or an older dpmed's bare sha256: damaged, it serves no attempt, and `dpmed run` and
    `dpmed status` say so rather than blame the settings, the data or another dpmed) and, apart, the hash of those
    settings alone (`dpmed.config.RunPlan.fingerprint`), which `dpmed status` compares with study.yaml's plan without
    reading the data, and `dpmed run` against the run's beside the run's own attempt; None in a key file written
    before it was kept, where it is damaged (no such hash), or beside a bare-hash attempt (no dpmed wrote that pair:
    read by neither). weights: the sha256 of the ``model.weights`` file the attempt started from
    (`dpmed.records.StartRecord.given_sha256`), which status hashes the file now against; None where the study named
    none, or the key file keeps none (an older dpmed's) or a damaged one."""

    randomness: PrivacyRandomness
    attempt: str | None
    settings: str | None
    weights: str | None = None


# A settings fingerprint as `dpmed.config.RunPlan.fingerprint` writes it: "<format>:<sha256>", the format a number
# as str() writes it: "03:<sha256>" is no fingerprint of format 3, which `dpmed run` compares as text
_SETTINGS = re.compile(r"(0|[1-9][0-9]*):[0-9a-f]{64}")
# The sha256 of a file, as `dpmed.folders.file_sha256` writes it
_SHA256 = re.compile(r"[0-9a-f]{64}")
# An attempt's fingerprint as `dpmed.run` writes it: "<format>:<sha256>", or a bare sha256 (an older dpmed's)
_ATTEMPT = re.compile(r"((0|[1-9][0-9]*):)?[0-9a-f]{64}")


def saved_key(path: Path, mode: RandomnessMode) -> SavedKey | None:
    """The unfinished run's private key file at ``path`` (`dpmed.run` writes it); None where there is none, an older
    version's bare key, or a damaged one (its root not a key): the attempt then starts afresh, as without one. Read
    by the run that continues and by `dpmed status`, which checks its checkpoint against it. PermissionError where it
    is there but cannot be read, which is neither: `dpmed status`, run by a colleague, then tells the run unknown,
    and a run fails rather than delete the checkpoint that the key continues."""
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
        settings, attempt, weights = saved.get("settings"), saved["attempt"], saved.get("weights")
        attempt = attempt if isinstance(attempt, str) and _ATTEMPT.fullmatch(attempt) else None
        return SavedKey(PrivacyRandomness.from_root_hex(str(saved["root"]), mode), attempt,
                        settings if attempt is not None and ":" in attempt and isinstance(settings, str)
                        and _SETTINGS.fullmatch(settings) else None,
                        weights if isinstance(weights, str) and _SHA256.fullmatch(weights) else None)
    except PermissionError:
        raise
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def poisson_mask_words(n: int, sample_rate: float) -> int:
    """The 64-bit words :func:`poisson_mask` takes from its stream for ``n`` units: one each, none at rate 1."""
    return 0 if sample_rate == 1 else n


def poisson_mask(rng: np.random.Generator, n: int, sample_rate: float) -> np.ndarray:
    """bool [n]: each index independently True with probability at most ``sample_rate``, never more.

    Each index compares a raw 64-bit draw with floor(q 2^64), computed exactly: the inclusion probability is
    floor(q 2^64) / 2^64, below q by less than 2^-64. A float32 uniform (torch.rand) would round q up to its 2^-24
    grid, 6 % high at q = 1e-6 and double at 3e-8, and every accountant assumes the rate it is given."""
    if not 0 < sample_rate <= 1:
        raise ValueError(f"sample_rate must be in (0, 1], got {sample_rate}")
    if sample_rate == 1:
        return np.ones(n, dtype=bool)
    threshold = np.uint64(int(Fraction(sample_rate) * (1 << 64)))
    return rng.bit_generator.random_raw(n) < threshold


# Exact sampling of the discrete Laplace distribution, P(x) proportional to exp(-|x| / scale) on the integers
# (Canonne, Kamath, Steinke 2020, "The discrete Gaussian for differential privacy", Algorithms 1 and 2): rational
# arithmetic on uniform integers only, so no floating-point rounding shifts a probability (Mironov 2012). Nothing in
# numpy, dp_accounting or Opacus samples it exactly; ``randbelow(n)`` draws uniformly from 0..n-1.


def _bernoulli(p: Fraction, randbelow: Callable[[int], int]) -> bool:
    return randbelow(p.denominator) < p.numerator


def _bernoulli_exp(gamma: Fraction, randbelow: Callable[[int], int]) -> bool:
    """True with probability exp(-gamma), gamma >= 0 (CKS 2020, Algorithm 1, with its reduction for gamma > 1)."""
    while gamma > 1:
        if not _bernoulli_exp(Fraction(1), randbelow):
            return False
        gamma -= 1
    k = 1
    while _bernoulli(gamma / k, randbelow):
        k += 1
    return k % 2 == 1


def discrete_laplace(scale: Fraction, randbelow: Callable[[int], int] = secrets.randbelow) -> int:
    """One integer with P(x) = (1 - e^(-1/scale)) / (1 + e^(-1/scale)) e^(-|x| / scale), sampled exactly (CKS 2020,
    Algorithm 2). Added to a count of sensitivity 1 it is (1 / scale, 0)-DP. ``randbelow``: the uniform integer
    source, the operating system's by default (reproducible runs pass a seeded one)."""
    scale = Fraction(scale)
    if scale <= 0:
        raise ValueError(f"scale must be positive, got {scale}")
    t, s = scale.numerator, scale.denominator   # CKS sample Lap_Z(t / s)
    while True:
        u = randbelow(t)
        if not _bernoulli_exp(Fraction(u, t), randbelow):
            continue
        v = 0
        while _bernoulli_exp(Fraction(1), randbelow):
            v += 1
        y = (u + t * v) // s
        negative = randbelow(2) == 1
        if negative and y == 0:
            continue
        return -y if negative else y
