"""The training set's size released as a DP count (dpmed.released_size): drawn once per study folder, data and eps,
reused by every rerun (fresh draws could be averaged), kept owner-only in private/; reproducible mode is seeded."""

from __future__ import annotations

import json
import stat

from dpmed.released_size import release_sizes

NEEDED = {"patients": 140, "images": 300}


def test_a_count_is_drawn_once_and_every_rerun_plans_from_the_same_draw(tmp_path):
    path = tmp_path / "private" / "released_sizes.json"
    first = release_sizes(NEEDED, epsilon=0.02, path=path, fingerprint="abc")
    assert set(first) == set(NEEDED) and stat.S_IMODE(path.stat().st_mode) == 0o600
    for _ in range(3):
        assert release_sizes(NEEDED, epsilon=0.02, path=path, fingerprint="abc") == first
    draws = json.loads(path.read_text())["draws"]
    assert len(draws) == 2 and {d["count"] for d in draws} == set(first.values())


def test_other_data_or_another_eps_is_another_release_and_is_drawn_afresh(tmp_path):
    """A new draw for each, the old ones kept (a study's earlier runs planned from them). 40 fresh draws of scale 50
    (the law itself is tested in test_randomness): not all alike, and none 2,000 off (probability e^-40 each)."""
    path = tmp_path / "released_sizes.json"
    counts = [release_sizes({"patients": 5000}, epsilon=0.02, path=path, fingerprint=str(i))["patients"]
              for i in range(40)]
    assert len(json.loads(path.read_text())["draws"]) == 40
    assert len(set(counts)) > 10 and all(abs(c - 5000) < 2000 for c in counts)
    release_sizes({"patients": 5000}, epsilon=0.5, path=path, fingerprint="0")
    assert len(json.loads(path.read_text())["draws"]) == 41


def test_a_count_an_older_key_holds_for_the_same_data_is_planned_from_not_drawn_again(tmp_path):
    """A folder written before the counts were keyed by the training set alone holds them under the fingerprint of
    every split: still these data's counts (and perhaps shown by `dpmed plan`), so they are planned from again,
    and a draw under another data's key is not."""
    path = tmp_path / "released_sizes.json"
    old = release_sizes(NEEDED, epsilon=0.02, path=path, fingerprint="every split")
    again = release_sizes(NEEDED, epsilon=0.02, path=path, fingerprint="training set", older_keys=("every split",))
    assert again == old
    assert len(json.loads(path.read_text())["draws"]) == 2
    release_sizes(NEEDED, epsilon=0.02, path=path, fingerprint="training set", older_keys=("other data",))
    draws = json.loads(path.read_text())["draws"]
    assert len(draws) == 4 and {d["data"] for d in draws[2:]} == {"training set"}


def test_a_count_is_not_drawn_again_beside_finished_runs_but_taken_back_from_their_records(tmp_path, monkeypatch):
    """Deleting the private file while finished runs stay would make a second draw of the same count, a second
    release the study's accounting cannot tell from the first (two draws may even come out equal). The runs' records
    hold the count they were planned from, released already: it is taken back, nothing is drawn, and it is written
    only by keep_sizes (once the study has accepted the runs)."""
    import pytest

    from dpmed import released_size
    from dpmed.errors import PrivacyError
    from dpmed.released_size import keep_sizes

    path = tmp_path / "private" / "released_sizes.json"
    first = release_sizes(NEEDED, epsilon=0.02, path=path, fingerprint="abc")
    planned = {(key, 0.02): {count} for key, count in first.items()}
    assert release_sizes(NEEDED, epsilon=0.02, path=path, fingerprint="abc", planned_before=planned) == first
    path.unlink()

    def no_draw(scale, source):
        raise AssertionError("a count was drawn again")
    with monkeypatch.context() as m:
        m.setattr(released_size, "discrete_laplace", no_draw)
        assert release_sizes(NEEDED, epsilon=0.02, path=path, fingerprint="abc", planned_before=planned) == first
        assert not path.exists()                                          # not kept before the runs are accepted
        keep_sizes(first, epsilon=0.02, path=path, fingerprint="abc")
        assert release_sizes(NEEDED, epsilon=0.02, path=path, fingerprint="abc") == first     # kept in the file
        keep_sizes(first, epsilon=0.02, path=path, fingerprint="abc")
        assert len(json.loads(path.read_text())["draws"]) == 2                                # once
    path.unlink()
    with pytest.raises(PrivacyError, match=r"hold more than one count of the training set's patients at eps 0.02 "
                                           r"\(3, 140\)") as refusal:
        release_sizes(NEEDED, epsilon=0.02, path=path, fingerprint="abc", planned_before={("patients", 0.02): {140, 3}})
    assert "are new releases of the same patients" in str(refusal.value)     # another --out retrains: it says so
    assert not path.exists()                                              # nothing drawn, nothing written
    with monkeypatch.context() as m:             # a second draw beside the runs, made before this was refused
        m.setattr(released_size, "discrete_laplace", lambda scale, source: first["patients"] - 140 + 1)
        release_sizes(NEEDED, epsilon=0.02, path=path, fingerprint="abc")
    with pytest.raises(PrivacyError, match=rf"hold more than one count of the training set's patients at eps 0.02 "
                                           rf"\({first['patients']}, {first['patients'] + 1}\)"):
        release_sizes(NEEDED, epsilon=0.02, path=path, fingerprint="abc", planned_before=planned)
    other_eps = release_sizes(NEEDED, epsilon=0.05, path=path, fingerprint="abc", planned_before=planned)   # drawn
    assert len(json.loads(path.read_text())["draws"]) == 4 and other_eps.keys() == first.keys()
    seeded = tmp_path / "seeded.json"                # reproducible mode: the public seed draws the same count again
    again = release_sizes(NEEDED, epsilon=0.02, path=seeded, fingerprint="abc", reproducible_seed=3)
    seeded.unlink()
    assert release_sizes(NEEDED, epsilon=0.02, path=seeded, fingerprint="abc", reproducible_seed=3,
                         planned_before={("patients", 0.02): {first["patients"] + 1}}) == again


def test_a_count_is_not_taken_back_where_the_folder_cannot_tell_which_data_it_counted(tmp_path):
    import pytest

    from dpmed.errors import PrivacyError

    with pytest.raises(PrivacyError, match=r"holds no count of the training set's patients \(at eps 0.02\) and .*"
                                           r"data_fingerprint is gone too") as refusal:
        release_sizes({"patients": 140}, epsilon=0.02, path=tmp_path / "r.json", fingerprint="abc",
                      planned_before={("patients", 0.02): {7}}, data_checked=False)
    assert "are new releases of the same patients" in str(refusal.value)
    assert not (tmp_path / "r.json").exists()


def test_a_draw_for_other_data_or_in_reproducible_mode_does_not_stop_the_take_back(tmp_path, monkeypatch):
    """Before, any draw of the (key, eps) in the file, whatever its data or mode, let a secure study draw afresh
    beside finished secure runs: a second release the study's total, one count per (key, eps), did not charge."""
    from dpmed import released_size

    def no_draw(scale, source):
        raise AssertionError("a count was drawn again")
    for other in ({"fingerprint": "xyz"}, {"fingerprint": "abc", "reproducible_seed": 0}):
        path = tmp_path / f"{len(other)}.json"
        release_sizes({"patients": 140}, epsilon=0.02, path=path, **other)
        with monkeypatch.context() as m:
            m.setattr(released_size, "discrete_laplace", no_draw)
            assert release_sizes({"patients": 140}, epsilon=0.02, path=path, fingerprint="abc",
                                 planned_before={("patients", 0.02): {7}}) == {"patients": 7}


def test_the_count_is_the_exact_one_plus_discrete_laplace_noise_of_scale_one_over_eps(tmp_path, monkeypatch):
    """Half the scale would make the count (2 eps)-DP while every card charges eps; the draws' spread alone cannot
    tell scale 25 from 50 in a few dozen draws, so the sampler's argument is checked (its law: test_randomness)."""
    import pytest

    from dpmed import released_size

    calls = []

    def recorded(scale, source):
        calls.append(scale)
        return 7
    monkeypatch.setattr(released_size, "discrete_laplace", recorded)
    got = release_sizes({"patients": 140}, epsilon=0.02, path=tmp_path / "r.json", fingerprint="abc")
    assert got == {"patients": 147} and len(calls) == 1 and float(calls[0]) == pytest.approx(50.0, rel=1e-12)


def test_reproducible_mode_derives_the_count_from_the_public_seed(tmp_path):
    one = release_sizes(NEEDED, epsilon=0.02, path=tmp_path / "a.json", fingerprint="x", reproducible_seed=3)
    two = release_sizes(NEEDED, epsilon=0.02, path=tmp_path / "b.json", fingerprint="x", reproducible_seed=3)
    other = release_sizes(NEEDED, epsilon=0.02, path=tmp_path / "c.json", fingerprint="x", reproducible_seed=4)
    assert one == two != other


def test_a_damaged_file_is_refused_naming_it_and_never_replaced(tmp_path):
    """Before: a truncated file ended `dpmed run` in "internal error: JSONDecodeError"."""
    import pytest

    from dpmed.errors import PrivacyError

    path = tmp_path / "released_sizes.json"
    for damaged in ('{"draws": [{"key": "patients", "epsil', '{"draws": [{"key": "patients"}]}', "[]"):
        path.write_text(damaged)
        with pytest.raises(PrivacyError, match=rf"^{path} cannot be read .* Restore it from a copy"):
            release_sizes(NEEDED, epsilon=0.02, path=path, fingerprint="abc")
        assert path.read_text() == damaged
    assert release_sizes({}, epsilon=0.02, path=path, fingerprint="abc") == {}    # nothing to plan: not read


def test_two_processes_drawing_at_once_plan_from_one_draw(tmp_path):
    """`dpmed plan` holds no study folder: beside a starting `dpmed run`, each drew a count the file did not hold
    yet, and one of two releases was kept. The draws are made under a lock on the folder: here one drawer holds it
    and writes its draw late; the other waits, and then plans from that draw instead of drawing its own."""
    import threading
    import time

    from dpmed.lock import guard

    path = tmp_path / "private" / "released_sizes.json"
    path.parent.mkdir()
    inside = threading.Event()

    def first():
        with guard(path.parent):
            inside.set()
            time.sleep(0.5)
            path.write_text(json.dumps({"draws": [{"key": "patients", "epsilon": 0.02, "data": "abc",
                                                   "mode": "secure", "count": 123456}]}))

    holder = threading.Thread(target=first)
    holder.start()
    assert inside.wait(30)
    second = release_sizes({"patients": 140}, epsilon=0.02, path=path, fingerprint="abc")
    holder.join()
    assert second == {"patients": 123456}
    assert len(json.loads(path.read_text())["draws"]) == 1


def test_several_released_counts_are_told_apart_each_with_its_guarantee():
    """Before: "about 281 images, about 256 images, at most 2 per patient, about 218 patients in training (a DP count
    at eps 0.02, included in every DP-SGD run's eps": three counts read as four, no delta, no neighbours, and each
    run's eps includes only the count it was planned from."""
    from dpmed.released_size import describe_counts

    text = describe_counts({"images": 281, "images, at most 2 per patient": 256, "patients": 2180}, 0.02)
    assert text == ("about 281 images, rough: +- 150 at 95 %; about 256 images, at most 2 per patient, rough: +- 150 "
                    "at 95 %; about 2,180 patients (each a DP count: eps 0.02, delta 0, closed form (discrete "
                    "Laplace), add/remove one of what it counts; a DP-SGD run's eps includes the count it was "
                    "planned from)")
    assert describe_counts({"patients": 9}, 0.02, symbols=True) == (
        "about 9 patients, rough: ± 150 at 95 % (a DP count: ε 0.02, δ 0, closed form (discrete Laplace), add/remove "
        "one of what it counts; a DP-SGD run's ε includes it)")
    assert describe_counts({"patients": 9}, 0.02, reproducible=True) == (     # before: "a DP count" from a public seed
        "about 9 patients, rough: +- 150 at 95 % (not DP: seed known (reproducible mode); as accounted, a DP count: "
        "eps 0.02, delta 0, closed form (discrete Laplace), add/remove one of what it counts; a DP-SGD run's eps "
        "includes it)")
    assert describe_counts({"patients": -100}, 0.02).startswith(       # before: "about -100 patients"
        "patients: -100 as drawn (the noise outweighs so few) (a DP count: eps 0.02")


def test_a_reproducible_count_is_never_reused_by_a_secure_study_nor_by_another_seed(tmp_path):
    """A count derived from a published seed is no DP release: a secure study in the same folder draws its own, and
    each is stored with its mode; seed 4 draws what seed 4 draws on a fresh path, not seed 3's count."""
    path = tmp_path / "released_sizes.json"
    seeded = release_sizes({"patients": 5000}, epsilon=0.02, path=path, fingerprint="x", reproducible_seed=3)
    release_sizes({"patients": 5000}, epsilon=0.02, path=path, fingerprint="x")
    assert [d["mode"] for d in json.loads(path.read_text())["draws"]] == ["reproducible 3", "secure"]
    four = release_sizes({"patients": 5000}, epsilon=0.02, path=path, fingerprint="x", reproducible_seed=4)
    assert four == release_sizes({"patients": 5000}, epsilon=0.02, path=tmp_path / "fresh.json", fingerprint="x",
                                 reproducible_seed=4) != seeded
    # one seed draws each count from a stream of its own: two equal counts get two noises (a fixed seed: certain)
    both = release_sizes({"a": 1000, "b": 1000}, epsilon=0.02, path=tmp_path / "two.json", fingerprint="x",
                         reproducible_seed=3)
    assert both["a"] != both["b"]


def test_secure_counts_draw_from_the_operating_system(tmp_path, monkeypatch):
    import secrets

    from dpmed import released_size

    sources = []

    def recorded(scale, source):
        sources.append(source)
        return 0
    monkeypatch.setattr(released_size, "discrete_laplace", recorded)
    release_sizes({"patients": 140}, epsilon=0.02, path=tmp_path / "r.json", fingerprint="abc")
    assert sources == [secrets.randbelow]


def test_a_file_that_lost_this_count_but_holds_others_still_takes_it_back(tmp_path):
    """What counts is whether this (key, eps) is in the file, not whether the file is empty: a file holding only
    the images count, or the patients at another eps, does not hold the count the finished runs planned from, and a
    fresh draw of it would be a second release."""
    planned = {("patients", 0.02): {123}}
    for held in ({"images": 300}, None):
        path = tmp_path / f"{held is None}.json"
        if held is None:
            release_sizes({"patients": 140}, epsilon=0.05, path=path, fingerprint="abc")
        else:
            release_sizes(held, epsilon=0.02, path=path, fingerprint="abc")
        assert release_sizes({"patients": 140}, epsilon=0.02, path=path, fingerprint="abc",
                             planned_before=planned) == {"patients": 123}


def test_a_count_stored_as_anything_but_an_integer_or_a_file_that_cannot_be_read_is_refused(tmp_path, monkeypatch):
    import pytest
    from pathlib import Path

    from dpmed.errors import PrivacyError

    path = tmp_path / "released_sizes.json"
    path.write_text(json.dumps({"draws": [{"key": "patients", "epsilon": 0.02, "data": "abc", "mode": "secure",
                                           "count": "x"}]}))
    with pytest.raises(PrivacyError, match=rf"^{path} cannot be read"):
        release_sizes({"patients": 140}, epsilon=0.02, path=path, fingerprint="abc")
    real = Path.read_text

    def denied(self, *args, **kwargs):
        if self == path:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *args, **kwargs)
    monkeypatch.setattr(Path, "read_text", denied)
    with pytest.raises(PrivacyError, match=rf"^{path} cannot be read \(PermissionError"):
        release_sizes({"patients": 140}, epsilon=0.02, path=path, fingerprint="abc")


def test_a_count_the_noise_took_to_zero_is_written_as_drawn_and_two_counts_are_each_a_dp_count():
    from dpmed.released_size import describe_counts

    assert describe_counts({"patients": 0}, 0.02).startswith("patients: 0 as drawn (the noise outweighs so few)")
    assert describe_counts({"images": 5, "patients": 3}, 0.02).endswith(
        "(each a DP count: eps 0.02, delta 0, closed form (discrete Laplace), add/remove one of what it counts; a "
        "DP-SGD run's eps includes the count it was planned from)")


def test_keeping_a_count_taken_back_keeps_every_draw_the_file_holds_also_one_written_meanwhile(tmp_path):
    """keep_sizes adds the counts taken back from finished runs to the file; the draws it held already (other data,
    another eps or unit), and one that `dpmed plan` beside the study drew while keep_sizes waited for the folder,
    must stay: a draw lost from the file is drawn again by the next study, a second release of that count."""
    import threading
    import time

    from dpmed.lock import guard
    from dpmed.released_size import keep_sizes

    path = tmp_path / "private" / "released_sizes.json"
    held = release_sizes({"images": 300}, epsilon=0.02, path=path, fingerprint="abc")
    other = release_sizes({"patients": 140}, epsilon=0.02, path=path, fingerprint="xyz")
    inside = threading.Event()
    late = {"key": "patients", "epsilon": 0.05, "data": "abc", "mode": "secure", "count": 654321}

    def plan_beside():
        with guard(path.parent):          # as release_sizes does: read, draw, write
            draws = json.loads(path.read_text())["draws"]
            inside.set()
            time.sleep(0.5)
            path.write_text(json.dumps({"draws": [*draws, late]}))

    writer = threading.Thread(target=plan_beside)
    writer.start()
    assert inside.wait(30)
    keep_sizes({"patients": 123}, epsilon=0.02, path=path, fingerprint="abc")
    writer.join()
    draws = {(d["key"], d["epsilon"], d["data"]): d["count"] for d in json.loads(path.read_text())["draws"]}
    assert draws == {("images", 0.02, "abc"): held["images"], ("patients", 0.02, "xyz"): other["patients"],
                     ("patients", 0.05, "abc"): 654321, ("patients", 0.02, "abc"): 123}


def test_a_reproducible_count_kept_after_the_runs_are_accepted_stays_reproducible(tmp_path, monkeypatch):
    """A reproducible study keeps its counts too (`dpmed.study.prepare_study` calls keep_sizes whatever the mode):
    they are held already, under their mode, and nothing is added. Kept as secure, a count of public noise would be
    taken by a later secure study in the folder as a DP release, and planned from as one."""
    from dpmed import released_size
    from dpmed.released_size import keep_sizes

    path = tmp_path / "released_sizes.json"
    seeded = release_sizes({"patients": 5000}, epsilon=0.02, path=path, fingerprint="x", reproducible_seed=3)
    before = path.read_text()
    keep_sizes(seeded, epsilon=0.02, path=path, fingerprint="x", reproducible_seed=3)
    assert path.read_text() == before
    drawn = []
    monkeypatch.setattr(released_size, "discrete_laplace", lambda scale, source: drawn.append(source) or 17)
    assert release_sizes({"patients": 5000}, epsilon=0.02, path=path, fingerprint="x") == {"patients": 5017}
    assert len(drawn) == 1


def test_a_count_kept_from_the_finished_runs_is_written_owner_only_as_a_drawn_one_is(tmp_path):
    """keep_sizes writes private/released_sizes.json as release_sizes does: 0600 under a umask of 022, whether it
    creates the file (the file was deleted and the counts were taken back) or rewrites one that holds other draws."""
    import os

    from dpmed.released_size import keep_sizes

    old = os.umask(0o022)
    try:
        created = tmp_path / "a" / "released_sizes.json"
        created.parent.mkdir()
        keep_sizes({"patients": 123}, epsilon=0.02, path=created, fingerprint="abc")
        rewritten = tmp_path / "b" / "released_sizes.json"
        release_sizes({"images": 300}, epsilon=0.02, path=rewritten, fingerprint="abc")
        keep_sizes({"patients": 123}, epsilon=0.02, path=rewritten, fingerprint="abc")
    finally:
        os.umask(old)
    for path in (created, rewritten):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        assert {"key": "patients", "epsilon": 0.02, "data": "abc", "mode": "secure", "count": 123,
                "from": "the finished runs' records"} in json.loads(path.read_text())["draws"]


def test_the_margin_of_a_count_is_the_smallest_that_covers_its_noise_at_95_percent():
    """Against the discrete Laplace's probabilities summed term by term, at the default eps and others, and in closed
    form at 40 digits at a tiny eps: beyond the margin lies at most 5 % of the noise, beyond one less more than 5 %."""
    import math
    from decimal import Decimal, getcontext

    from dpmed.released_size import count_margin

    for eps in (0.02, 0.1, 0.3, 1.0):
        a = math.exp(-eps)
        mass = [(1 - a) / (1 + a) * a ** abs(z) for z in range(0, 4000)]
        outside = [1 - mass[0] - 2 * sum(mass[1:t + 1]) for t in range(0, 1000)]       # P(|Z| > t)
        t = count_margin(eps)
        assert outside[t] <= 0.05 < outside[t - 1], (eps, t)
    assert count_margin(0.02) == 150
    # a size_epsilon the schema allows however small: at 1e-9, log(e^-eps) is 3e-8 off and the margin was 83 too wide
    getcontext().prec = 40
    a = (-Decimal("1e-9")).exp()
    t = count_margin(1e-9)
    assert 2 * a ** (t + 1) / (1 + a) <= Decimal("0.05") < 2 * a ** t / (1 + a)        # P(|Z| > t), P(|Z| > t - 1)


def test_an_unrough_count_is_within_half_of_the_exact_size_in_95_percent_of_draws_at_any_size():
    """What `dpmed.study`'s warning promises where it stays quiet: at sizes from 50 to 20,000 units and the default
    eps 0.02, at most 5 % of all draws are a count it does not call rough that is more than half of itself away from
    the exact size (q = B / N planned from it below half, or above 1.5 times, what the exact size gives), and every
    count at or below zero (about 7 % at 100 units) is called rough. 1,000 draws per size, of the sampler the counts
    are drawn with."""
    import random
    from fractions import Fraction

    from dpmed.randomness import discrete_laplace
    from dpmed.released_size import count_is_rough

    source = random.Random(0).randrange
    for n in (50, 100, 200, 500, 2000, 20000):
        counts = [n + discrete_laplace(Fraction(50), source) for _ in range(1000)]
        quiet = [c for c in counts if not count_is_rough(c, 0.02)]
        assert all(count_is_rough(c, 0.02) for c in counts if c <= 0)
        assert sum(abs(c - n) > c / 2 for c in quiet) <= 50, n
        assert (len(quiet) == 1000) is (n >= 2000), n          # rough at small sizes, never at large ones


def test_a_rough_count_is_described_with_its_interval_where_the_report_and_plan_state_it():
    """A reader of the report saw "about 97 patients (a DP count: ...)" and no word that q and T were planned from a
    count that may be half or one and a half times the exact size, which only the run's terminal had warned of."""
    from dpmed.released_size import describe_counts

    assert describe_counts({"patients": 97, "images": 400}, 0.02).startswith(
        "about 97 patients, rough: +- 150 at 95 %; about 400 images (each a DP count")
    assert describe_counts({"patients": 97}, 0.02, symbols=True).startswith(
        "about 97 patients, rough: ± 150 at 95 % (a DP count: ε 0.02")
    assert describe_counts({"patients": 97}, 1.0).startswith("about 97 patients (a DP count")     # +- 3
