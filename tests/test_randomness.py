"""Privacy randomness is fresh, secret and independent per run; reproducible mode is reproducible and labelled."""

from __future__ import annotations

import json
import math
import random
import traceback
from fractions import Fraction

import numpy as np
import pytest
import scipy.stats
import torch

from dpmed.randomness import (GAUSSIAN_DRAW_BOUND, LAPLACE_DRAW_BOUND, PRIVACY_STREAMS, PrivacyRandomness,
                             _bernoulli_exp, _stream_key, discrete_laplace, public_seed)


def _draws(r: PrivacyRandomness, name: str = "noise", n: int = 64) -> np.ndarray:
    return r.stream(name).standard_normal(n)


def test_secure_randomness_is_fresh_whatever_the_global_seeds():
    """Two runs that set every global seed alike (numpy's, torch's and the random module's, which anyone can seed)
    still draw different noise: nothing seeded is used."""
    saved = random.getstate()
    try:
        roots = []
        for _ in range(2):
            np.random.seed(0)
            torch.manual_seed(0)
            random.seed(0)
            roots.append(PrivacyRandomness.secure())
    finally:
        random.setstate(saved)
    assert roots[0].root != roots[1].root
    assert not np.allclose(_draws(roots[0]), _draws(roots[1]))
    assert PrivacyRandomness.secure().mode == "secure"


def test_reproducible_randomness_repeats_per_run_and_differs_between_runs():
    a = PrivacyRandomness.reproducible(seed=3, run_id="dp_eps1_seed3")
    assert np.array_equal(_draws(a), _draws(PrivacyRandomness.reproducible(seed=3, run_id="dp_eps1_seed3")))
    # the runs of one sweep (same seed, other values) never share noise, even in reproducible mode
    other = _draws(PrivacyRandomness.reproducible(seed=3, run_id="dp_eps8_seed3"))
    assert abs(np.corrcoef(_draws(PrivacyRandomness.reproducible(seed=3, run_id="dp_eps1_seed3")), other)[0, 1]) < 0.5
    assert a.mode == "reproducible"


def test_the_root_key_derives_from_seed_and_run_id_and_has_256_bits():
    """Reproducible mode: one run id under two seeds is two keys (a run id without its seed, or a fixed probe's,
    would otherwise share every stream across studies). A key of any other length is refused, not used."""
    roots = {PrivacyRandomness.reproducible(seed=s, run_id=r).root for s in (0, 1) for r in ("x", "y")}
    assert len(roots) == 4
    for size in (16, 31, 33, 64):
        with pytest.raises(ValueError, match="32 bytes"):
            PrivacyRandomness(bytes(size), "secure")
    with pytest.raises(ValueError, match="32 bytes"):
        PrivacyRandomness.from_root_hex("00" * 33, "secure")
    for mode in ("Secure", "reproducable", ""):     # a misspelt mode would otherwise pass as "not secret"
        with pytest.raises(ValueError, match="mode must be 'secure' or 'reproducible'"):
            PrivacyRandomness(bytes(32), mode)


def test_each_stream_is_aes_ctr_under_a_128_bit_key_from_the_root_and_its_name():
    """The stream's key is the first 16 bytes of SHA-256(domain, root, name), all of them: its draws are those of
    AES-CTR under that key, computed here from hashlib and randomgen directly (a key cut to 64 bits draws otherwise)."""
    import hashlib

    from randomgen import AESCounter

    root = bytes(range(32))
    for name in ("noise", "sampling"):
        digest = hashlib.sha256(b"dpmed privacy stream v1" + root + name.encode()).digest()
        expected = np.random.Generator(AESCounter(key=int.from_bytes(digest[:16], "little"))).standard_normal(8)
        got = PrivacyRandomness(root, "secure").stream(name).standard_normal(8)
        assert np.array_equal(got, expected)


def test_streams_are_independent_and_persistent():
    r = PrivacyRandomness.reproducible(seed=0, run_id="x")
    draws = {name: _draws(r, name, 4096) for name in PRIVACY_STREAMS}
    names = list(draws)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert abs(np.corrcoef(draws[a], draws[b])[0, 1]) < 0.1
    assert r.stream("noise") is r.stream("noise")
    with pytest.raises(ValueError, match="unknown privacy stream"):
        r.stream("init")


@pytest.mark.parametrize("raw, uint32", [(0, 0), (1, 0), (7, 0), (8, 0), (17, 0), (64, 1), (3, 3)])
def test_state_restores_every_stream_exactly(raw, uint32):
    r = PrivacyRandomness.secure()
    r.stream("sampling").bit_generator.random_raw(raw)
    r.stream("canaries").integers(0, 2**32, size=uint32, dtype=np.uint32)    # an odd count leaves half a word
    r.stream("noise").standard_normal(5)
    saved = r.state()
    resumed = PrivacyRandomness.from_root_hex(r.root_hex(), "secure")
    resumed.stream("canaries").bit_generator.random_raw(40)       # drawn before the restore (a local-DP release)
    resumed.restore(saved)
    assert resumed.state() == saved                               # a run resumed twice continues where it stood
    for draw in (lambda g: g.bit_generator.random_raw(19), lambda g: g.integers(0, 2**32, size=5, dtype=np.uint32),
                 lambda g: g.standard_normal(3)):
        for name in ("sampling", "canaries", "noise"):
            assert np.array_equal(draw(r.stream(name)), draw(resumed.stream(name)))
    with pytest.raises(ValueError, match="another key"):
        PrivacyRandomness.secure().restore(saved)


def _numpy_state_text(generator: np.random.Generator) -> str:
    """A stream's state as checkpoints of an earlier dpmed saved it: numpy's, arrays as dtype and values."""
    def plain(v):
        if isinstance(v, np.ndarray):
            return {"dtype": str(v.dtype), "values": [int(x) for x in v.tolist()]}
        return {k: plain(x) for k, x in v.items()} if isinstance(v, dict) else v
    return json.dumps(plain(generator.bit_generator.state))


def test_a_checkpoint_of_an_earlier_version_still_restores_its_streams():
    r = PrivacyRandomness.secure()
    r.stream("noise").standard_normal(5)
    saved = {"noise": _numpy_state_text(r.stream("noise"))}
    resumed = PrivacyRandomness.from_root_hex(r.root_hex(), "secure")
    resumed.restore(saved)
    assert np.array_equal(r.stream("noise").standard_normal(9), resumed.stream("noise").standard_normal(9))
    with pytest.raises(ValueError, match="another key"):
        PrivacyRandomness.secure().restore(saved)


def test_the_saved_state_holds_neither_a_key_nor_draws_to_come():
    # numpy's AES state holds the stream's key and up to 8 words made ahead (the next step's block keys). In the
    # checkpoint's dict it reached every traceback that shows the locals of the checkpoint's write, torch.save's
    # own frames included, where no repr can hide it: a reader could regenerate the noise the run released.
    r = PrivacyRandomness.secure()
    r.stream("noise").bit_generator.random_raw(3)
    text = str(r.state())
    ahead = PrivacyRandomness.from_root_hex(r.root_hex(), "secure").stream("noise").bit_generator.random_raw(16)
    assert not [word for word in _key_words(r) + [str(w) for w in ahead[3:].tolist()] if word in text]


def test_a_saved_position_shows_no_part_of_a_stream_s_key_in_any_form():
    # The key check tells a checkpoint's owner key apart without showing it: a check that were the key's own digits,
    # in hex or decimal, in either byte order, would hand half the key to whoever reads a traceback of the write.
    r = PrivacyRandomness.secure()
    for name in ("sampling", "noise"):
        r.stream(name).standard_normal(3)
    text = str(r.state()).lower()
    for name in ("sampling", "noise"):
        key = _stream_key(r.root, name)
        forms = [f"{key:032x}", key.to_bytes(16, "little").hex(), str(key)]
        forms += [str(half) for half in (key & ((1 << 64) - 1), key >> 64)]
        pieces = {form[i:i + 8] for form in forms for i in range(len(form) - 7)}   # any 32 bits of it in one form
        assert not [piece for piece in pieces if piece in text]


def _key_words(randomness: PrivacyRandomness) -> list[str]:
    """The forms in which a run's key would show in a text: the root's bytes and hex, and each stream's AES key
    (the low 64-bit word a stream's saved state begins its key with)."""
    words = [repr(randomness.root), randomness.root.hex()]
    words += [str(_stream_key(randomness.root, name) & ((1 << 64) - 1)) for name in PRIVACY_STREAMS]
    return words


def test_a_traceback_that_shows_locals_never_shows_the_key():
    # A Ctrl-C propagates out of a run with the randomness on the stack; a traceback that prints each frame's locals
    # (IPython's verbose mode, pytest --showlocals, a crash reporter) would print a key the unfinished run keeps, so
    # whoever read it could subtract the noise of the model the resumed run releases.
    randomness = PrivacyRandomness.secure()
    randomness.stream("noise")

    def training(randomness: PrivacyRandomness) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as caught:
        training(randomness)
    text = "".join(traceback.TracebackException.from_exception(caught.value, capture_locals=True).format())
    assert "PrivacyRandomness" in text and "secure" in text      # the locals are shown, the key is not
    assert not [word for word in _key_words(randomness) if word in text]


def test_draws_have_the_laws_the_mechanisms_assume():
    g = PrivacyRandomness.reproducible(seed=1, run_id="law").stream("noise")
    z = g.standard_normal(400_000)
    assert z.dtype == np.float64
    assert abs(z.mean()) < 0.01 and z.var() == pytest.approx(1.0, rel=0.01)
    lap = g.laplace(0.0, 2.0, size=400_000)
    assert np.abs(lap).mean() == pytest.approx(2.0, rel=0.01)          # E|L| = b


def test_public_seeds_are_stable_and_separate():
    assert public_seed(0, "init") == public_seed(0, "init")
    assert len({public_seed(0, "init"), public_seed(0, "splits"), public_seed(1, "init")}) == 3
    assert 0 <= public_seed(12345, "bootstrap") < 2 ** 63


# Bernoulli trials allowed for one exact draw: a correct draw takes about a dozen (at most about a hundred in the
# 80,000 draws below), so a test fails here, rather than hanging, where a sampler's loop never ends.
_TRIALS_PER_DRAW = 10_000


@pytest.fixture
def bounded(sampler_trials):
    """``bounded(sampler, *args)``: one call of an exact sampler, failed once it has made over _TRIALS_PER_DRAW
    Bernoulli trials (the suite's `sampler_trials` counts them)."""
    def draw(sampler, *args):
        sampler_trials.allow(_TRIALS_PER_DRAW)
        return sampler(*args)
    return draw


@pytest.mark.parametrize("scale", [Fraction(1, 2), Fraction(3), Fraction(7, 3), Fraction(50)])
def test_discrete_laplace_has_its_law(scale, bounded):
    """Chi-square of 20,000 draws against the exact pmf (1 - r) / (1 + r) r^|x|, r = e^(-1/scale), the tail pooled.
    A sampler with its two parameters swapped (CKS 2020's Lap_Z(t/s)) fails for every scale but 1."""
    rng = random.Random(7)
    draws = [bounded(discrete_laplace, scale, rng.randrange) for _ in range(20_000)]
    r = math.exp(-1 / float(scale))
    edge = max(1, int(3 * float(scale)))
    pmf = {x: (1 - r) / (1 + r) * r ** abs(x) for x in range(-edge, edge + 1)}
    counts = {x: sum(d == x for d in draws) for x in pmf}
    observed = list(counts.values()) + [len(draws) - sum(counts.values())]
    expected = [len(draws) * p for p in pmf.values()] + [len(draws) * (1 - sum(pmf.values()))]
    assert scipy.stats.chisquare(observed, expected).pvalue > 1e-4


def test_discrete_laplace_refuses_a_scale_that_is_not_positive():
    for randbelow in (None, random.Random(0).randrange):
        with pytest.raises(ValueError, match="scale must be positive"):
            discrete_laplace(Fraction(0), *([randbelow] if randbelow else []))


def test_discrete_laplace_draws_from_the_operating_system_by_default(bounded):
    """Not from the random module's generator, which anyone can seed: two sequences after random.seed(0) differ."""
    saved = random.getstate()
    try:
        random.seed(0)
        first = [bounded(discrete_laplace, Fraction(3)) for _ in range(30)]
        random.seed(0)
        second = [bounded(discrete_laplace, Fraction(3)) for _ in range(30)]
    finally:
        random.setstate(saved)
    assert first != second


def test_exact_bernoulli_of_exp_matches_its_probability(bounded):
    rng = random.Random(3)
    for gamma in (Fraction(0), Fraction(1, 3), Fraction(1), Fraction(5, 2)):
        hits = sum(bounded(_bernoulli_exp, gamma, rng.randrange) for _ in range(20_000))
        p = math.exp(-float(gamma))
        assert abs(hits / 20_000 - p) < 5 * math.sqrt(p * (1 - p) / 20_000) + 1e-9


def _fed(words: list[int]) -> np.random.Generator:
    """A numpy Generator fed ``words`` as its raw 64-bit output, then a word that makes any draw accept at once."""
    from randomgen import UserBitGenerator

    state = {"n": 0}

    def next_raw(_state):
        state["n"] += 1
        return words[state["n"] - 1] if state["n"] <= len(words) else 1 << 63
    return np.random.Generator(UserBitGenerator(next_raw, 64))


def test_the_samplers_largest_draws_reach_their_stated_bounds_and_no_further():
    """numpy's uniforms are multiples of 2^-53 (the raw word's top 53 bits), so the largest uniform is 1 - 2^-53.
    Laplace: that uniform gives exactly the bound. Gaussian: a ziggurat tail draw (first word: layer 0, largest
    magnitude) with the second uniform at its largest accepts only tail values below the bound; scanning the first
    uniform down from the top finds the largest accepted draw just below it."""
    top = (1 << 64) - 1
    assert _fed([top]).laplace(0.0, 1.0) == pytest.approx(53 * math.log(2), rel=1e-15)    # 2 - 2U rounds to 2^-53
    assert _fed([1 << 11]).laplace(0.0, 1.0) == pytest.approx(-LAPLACE_DRAW_BOUND, rel=1e-15)   # U = 2^-53: the
    assert LAPLACE_DRAW_BOUND == pytest.approx(52 * math.log(2))                                # nearer end
    largest = 0.0
    for k in range(150, 320):
        largest = max(largest, abs(_fed([top - 0xFF, ((1 << 53) - k) << 11, top]).standard_normal()))
    assert GAUSSIAN_DRAW_BOUND - 1e-3 < largest < GAUSSIAN_DRAW_BOUND


def test_a_damaged_key_file_lets_the_attempt_start_afresh_not_fail(tmp_path):
    """An unfinished run's key file is read back to resume it; before, a root that was not a key (a changed hex
    digit to a letter, or cut short) passed the read and failed the run in bytes.fromhex or the key's length check.
    Now it reads as no key: the attempt starts afresh with a new one, as where the file is missing."""
    import json

    from dpmed.randomness import saved_key

    key = PrivacyRandomness.secure()
    path = tmp_path / "privacy_key.json"
    path.write_text(json.dumps({"root": key.root_hex(), "attempt": "a1" * 32}))
    randomness, attempt, settings, weights = saved_key(path, "secure")
    assert randomness.root == key.root and randomness.mode == "secure" and attempt == "a1" * 32
    assert settings is None and weights is None
    path.write_text(json.dumps({"root": key.root_hex(), "attempt": "a1"}))     # no fingerprint: serves no attempt
    assert saved_key(path, "secure")[1:] == (None, None, None) and saved_key(path, "secure")[0].root == key.root
    # the sha256 of model.weights, read where it is one: status compares it with the file's now
    for kept, read in (("c3" * 32, "c3" * 32), ("C3" * 32, None), ("c3" * 31, None), (7, None)):
        path.write_text(json.dumps({"root": key.root_hex(), "attempt": "a1" * 32, "weights": kept}))
        assert saved_key(path, "secure").weights == read
    # a format no dpmed writes: `dpmed run` matches "3:<hash>" as text, so "03:<hash>" serves no attempt of format 3,
    # where status read it as one and said the run continues
    path.write_text(json.dumps({"root": key.root_hex(), "attempt": f"03:{'a1' * 32}", "settings": f"03:{'b2' * 32}"}))
    assert saved_key(path, "secure")[1:] == (None, None, None)
    for damaged in ({"root": "zz" + key.root_hex()[2:], "attempt": "a1"},
                    {"root": key.root_hex()[:-2], "attempt": "a1"}, {"root": key.root_hex()}, [key.root_hex()], "x"):
        path.write_text(json.dumps(damaged))
        assert saved_key(path, "secure") is None, damaged
    path.write_bytes(b"\xff" + path.read_bytes())
    assert saved_key(path, "secure") is None and saved_key(tmp_path / "absent.json", "secure") is None
