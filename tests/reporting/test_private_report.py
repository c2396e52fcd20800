"""private/report.html (`dpmed.reporting.page.write_private_report`) from typed inputs: only its owner can read it,
each run's card holds what that run's private folder gave (wall time, audit statement, training-set point
estimates, what could not be read), and the attack's reconstructions appear where they can be drawn. (The end-to-end
tests in tests/integration/test_cli.py and test_attack_run.py check a real study's file for a few lines.)"""

from __future__ import annotations

import html
import os
import re
from html.parser import HTMLParser

import numpy as np
import pytest

from dpmed.folders import write_arrays_atomic
from dpmed.records import Timing
from dpmed.reporting import PrivateRun, write_private_report


@pytest.fixture
def private(tmp_path, make_record, make_resolved):
    """Writes the private report of ``items`` and returns its text as a reader sees it (``raw=True``: its HTML)."""
    path = tmp_path / "private" / "report.html"
    path.parent.mkdir()

    def write(items: dict[str, PrivateRun], raw: bool = False) -> str:
        write_private_report(make_resolved([make_record("dp_seed0", "dp", "dp_sgd", eps=1.0)]), items, path)
        page = path.read_text()
        return page if raw else re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", page)))
    write.path = path
    return write


@pytest.mark.skipif(os.name == "nt", reason="POSIX file modes")
def test_only_its_owner_can_read_the_private_report(private):
    private({"dp_seed0": PrivateRun(audit_statement="eps >= 0.3 at 95 %")})
    assert private.path.stat().st_mode & 0o777 == 0o600


@pytest.mark.skipif(os.name == "nt", reason="POSIX file modes")
def test_only_its_owner_can_read_the_reconstructions_figure_beside_it(private, make_record, tmp_path):
    """The figure shows patient images and what the attack made of them, as the report that embeds it does; it was
    written 0644, readable by the group once a chmod -R g+rX of the results opened private/."""
    attacked = make_record("dp_seed0", "dp", "dp_sgd", eps=1.0)
    private({"dp_seed0": PrivateRun(attack_images=_attack_file(tmp_path / "a.npz", [0.9]), attacked=attacked)})
    assert (private.path.parent / "attack_reconstructions.png").stat().st_mode & 0o777 == 0o600


def test_each_run_s_card_holds_its_wall_time_audit_and_training_set_point_estimates(private):
    timing = Timing(train_seconds=12.34, total_seconds=20.0, device="cpu", threads=2, resumed_from=40)
    metrics = {"train_auroc": 0.91234, "train_auroc_low": 0.8, "train_auroc_high": 0.95, "test_auroc": 0.7,
               "train_n": 120, "bootstrap_unit": "patient"}
    text = private({"dp_seed0": PrivateRun(audit_statement="The audit found eps >= 0.31", training_metrics=metrics,
                                           timing=timing)})
    assert "Wall time: training 12.3 s, in all 20.0 s (cpu, 2 threads, resumed from step 40)." in text
    assert "The audit found eps >= 0.31" in text
    assert "training-set AUROC 0.9123" in text
    # the point estimate only: not its interval, nothing of the test set, no counts or words
    for left_out in ("train_auroc_low", "train_auroc_high", "test_auroc", "train_n", "bootstrap_unit"):
        assert left_out not in text, left_out
    assert "No private statistics" not in text


def test_a_run_that_did_not_resume_and_a_timing_without_its_total_say_no_more_than_they_hold(private):
    whole = Timing(train_seconds=5.0, total_seconds=6.0, device="cuda", threads=1, resumed_from=0)
    half = Timing(train_seconds=5.0, total_seconds=None, device="cpu", threads=1)
    text = private({"a": PrivateRun(timing=whole), "b": PrivateRun(timing=half, audit_statement="audited")})
    assert "Wall time: training 5.0 s, in all 6.0 s (cuda, 1 thread)." in text
    assert text.count("Wall time") == 1 and "audited" in text


def test_a_file_that_could_not_be_read_is_named_on_its_run_s_card(private):
    unread = "runs/dp_seed0/private/audit.json cannot be read (JSONDecodeError: ...), so it is left out of this report"
    item = PrivateRun(unread=(unread,))
    assert item                                             # a run with only an unreadable file still gets a card
    text = private({"dp_seed0": item}, raw=True)
    assert '<div class="card"><h3>dp_seed0</h3>' in text and html.escape(unread) in text
    assert not PrivateRun()


def test_a_report_without_private_numbers_says_so(private):
    assert "No private statistics were computed." in private({})


def _attack_file(path, ssim):
    n = len(ssim)
    write_arrays_atomic(path, {"originals": np.zeros((n, 1, 8, 8), np.float32),
                               "reconstructions": np.ones((n, 1, 8, 8), np.float32),
                               "ssim": np.asarray(ssim, np.float32)})
    return path


def test_the_reconstructions_appear_per_attacked_run_and_a_damaged_file_is_named(private, make_record, tmp_path):
    attacked = make_record("dp_seed0", "dp", "dp_sgd", eps=1.0)
    good = _attack_file(tmp_path / "good.npz", [0.9, 0.4])
    text = private({"dp_seed0": PrivateRun(attack_images=good, attacked=attacked)})
    assert "The imprint attack's best reconstructions" in text and "No private statistics" not in text
    assert (private.path.parent / "attack_reconstructions.png").is_file()

    damaged = tmp_path / "damaged.npz"
    damaged.write_bytes(b"not an archive")
    text = private({"dp_seed0": PrivateRun(attack_images=damaged, attacked=attacked)})
    assert "The imprint attack's best reconstructions" in text and "Left out of the attack's reconstructions" in text
    assert f"dp_seed0: {damaged} cannot be read" in text

    # an attack that reconstructed no image, or images whose record is missing, draws no figure
    empty = _attack_file(tmp_path / "empty.npz", [])
    for item in (PrivateRun(attack_images=empty, attacked=attacked), PrivateRun(attack_images=good)):
        text = private({"dp_seed0": item})
        assert "best reconstructions" not in text


def test_several_audits_are_read_together_at_the_union_bounds_level(private):
    """Each audit's bound holds at its own confidence; among k audited runs that all keep their claims, one or more
    is called inconsistent up to k times as often (union bound). Before, k cards each said "95 % confidence" and
    nothing said what they make together."""
    text = private({f"dp_seed{i}": PrivateRun(audit_statement=f"bound {i}", audit_confidence=c)
                    for i, c in enumerate((0.95, 0.95, 0.99))})
    assert ("3 audit bounds, each at its own confidence (95%, 95%, 99%). Read together, all 3 bounds hold with "
            "probability at least 89% (union bound): one or more of them exceeds its run's true ε up to 11% of the "
            "time, so among runs that keep their claims one or more is called inconsistent at most that often.") in text
    many = private({f"dp_seed{i}": PrivateRun(audit_statement="b", audit_confidence=0.9) for i in range(12)})
    assert ("Read together, no joint level for the 12 bounds follows from the union bound (the levels' shortfalls "
            "add up to 120%)") in many
    for alone in (private({"dp_seed0": PrivateRun(audit_statement="b", audit_confidence=0.95)}),
                  private({"dp_seed0": PrivateRun(audit_statement="b", audit_confidence=0.95),
                           "dp_seed1": PrivateRun(audit_statement="no audit bound: none drawn")})):
        assert "Read together" not in alone          # one bound, nothing to correct


@pytest.mark.parametrize("levels", [[0.5, 0.5], [0.9] * 10, [0.8] * 5])
def test_levels_whose_shortfalls_add_up_to_one_give_no_joint_level(private, levels):
    """Ten audits at 90% fall short by 1 in all: the union bound gives no joint level. Before, 1 - 0.9 added ten
    times in floating point came to just under 1, and the report said the 10 bounds hold "with probability at least
    2.22e-14%"."""
    text = private({f"dp_seed{i}": PrivateRun(audit_statement="b", audit_confidence=c) for i, c in enumerate(levels)})
    assert (f"Read together, no joint level for the {len(levels)} bounds follows from the union bound (the levels' "
            "shortfalls add up to 100%)") in text and "probability at least" not in text


def test_a_run_with_no_audit_is_not_counted_among_the_audited_runs_without_a_bound(private):
    """Only an audit statement without a bound (no canary drawn) is an audited run that states none; a run whose
    private folder holds training statistics alone was never audited, and the joint statement says nothing of it."""
    text = private({"dp_seed0": PrivateRun(audit_statement="b", audit_confidence=0.95),
                    "dp_seed1": PrivateRun(audit_statement="b", audit_confidence=0.95),
                    "np_seed0": PrivateRun(training_metrics={"train_auroc": 0.9})})
    assert "2 audit bounds, each at its own confidence (95%, 95%). Read together" in text
    assert "not counted" not in text


def test_several_audited_runs_without_a_bound_are_counted_in_the_plural(private):
    """Two audited runs whose draw found no canary: "2 audited runs state no bound and are not counted" (a test that
    fails if the plural case says "2 audited run states ... is not counted")."""
    text = private({"dp_seed0": PrivateRun(audit_statement="b", audit_confidence=0.95),
                    "dp_seed1": PrivateRun(audit_statement="b", audit_confidence=0.99),
                    "dp_seed2": PrivateRun(audit_statement="no audit bound: none drawn"),
                    "dp_seed3": PrivateRun(audit_statement="no audit bound: none drawn")})
    assert ("2 audit bounds, each at its own confidence (95%, 99%); 2 audited runs state no bound and are not "
            "counted. Read together") in text


def test_every_free_text_of_a_run_s_card_is_escaped(private, make_resolved, make_record):
    """The study's name, a run id (an arm's name is free text), the device the timing names, the audit's statement,
    a metric's name and an unread file's line all reach the page as text: "<b>" in any of them must read as written,
    not open a tag. Fails if any one of them is put in unescaped."""
    timing = Timing(train_seconds=1.0, total_seconds=2.0, device="cuda:0 <dev>", threads=1, resumed_from=3)
    item = PrivateRun(audit_statement="eps >= 0.3 <audit>", training_metrics={"train_<metric>": 0.5}, timing=timing,
                      unread=("a <file> cannot be read",))
    resolved = make_resolved([make_record("dp_seed0", "dp", "dp_sgd", eps=1.0)])
    named = resolved.model_copy(update={"study": resolved.study.model_copy(update={"name": "A & B <name>"})})
    write_private_report(named, {"arm <run>_seed0": item}, private.path)
    page = private.path.read_text()
    for escaped in ("<title>dpmed private report: A &amp; B &lt;name&gt;</title>",
                    "<h1>Private: A &amp; B &lt;name&gt;",
                    "<h3>arm &lt;run&gt;_seed0</h3>", "(cuda:0 &lt;dev&gt;, 1 thread, resumed from step 3)",
                    "<p>eps &gt;= 0.3 &lt;audit&gt;</p>",
                    '<th scope="row">training-set &lt;metric&gt;</th><td class=num>0.5000</td>',
                    "a &lt;file&gt; cannot be read"):
        assert escaped in page, escaped
    for tag in ("<name>", "<run>", "<dev>", "<audit>", "<metric>", "<file>"):
        assert tag not in page, tag


def test_the_joint_level_is_rounded_down_and_the_shortfall_up(private):
    """Levels 90% and 91.2345% fall short by 18.7655% together: the joint level is never shown above what the union
    bound gives (81.23%, not 81.24%) and the chance of an inconsistent verdict never below it (18.77%, not 18.76%).
    Fails if either is rounded the other way."""
    text = private({"dp_seed0": PrivateRun(audit_statement="b", audit_confidence=0.9),
                    "dp_seed1": PrivateRun(audit_statement="b", audit_confidence=0.912345)})
    assert ("all 2 bounds hold with probability at least 81.23% (union bound): one or more of them exceeds its run's "
            "true ε up to 18.77% of the time") in text


def test_a_run_with_only_the_attack_s_reconstructions_counts_as_private_output(tmp_path):
    """The study keeps a run's private items only where they hold something (`dpmed.outputs`): a run attacked but
    neither audited nor timed must count, or its reconstructions never reach the private report."""
    assert PrivateRun(attack_images=tmp_path / "a.npz")


def test_a_reconstructions_figure_whose_runs_are_no_longer_attacked_is_removed(private, make_record, tmp_path):
    """The figure shows patient images labelled with runs and their eps: once no run of the study is attacked (its
    runs deleted and retrained without an attack), the old figure stayed in private/ beside a report without it."""
    attacked = make_record("dp_seed0", "dp", "dp_sgd", eps=1.0)
    private({"dp_seed0": PrivateRun(attack_images=_attack_file(tmp_path / "a.npz", [0.9]), attacked=attacked)})
    figure = private.path.parent / "attack_reconstructions.png"
    assert figure.is_file()
    private({"dp_seed0": PrivateRun(audit_statement="eps >= 0.3 at 95 %")})
    assert not figure.exists()


def _headings(page: str) -> list[int]:
    """The level of every heading of ``page``, in order."""
    levels: list[int] = []

    class Outline(HTMLParser):
        def handle_starttag(self, tag, attrs):
            if re.fullmatch(r"h[1-6]", tag):
                levels.append(int(tag[1]))

    Outline().feed(page)
    return levels


def test_the_headings_step_down_one_level_at_a_time_so_a_screen_reader_s_outline_holds_every_card(private, make_record,
                                                                                                  tmp_path):
    """A screen reader lists a page by its headings, and one that skips a level (the title, then each run's card at
    h3) hangs the cards under no section and reads as if a section were missing. Each level follows the one above it,
    with the cards and the reconstructions alike. Fails if the run cards sit directly under the page's title."""
    attacked = make_record("dp_seed0", "dp", "dp_sgd", eps=1.0)
    for items in ({"dp_seed0": PrivateRun(audit_statement="audited")},
                  {"dp_seed0": PrivateRun(audit_statement="audited", attacked=attacked,
                                          attack_images=_attack_file(tmp_path / "a.npz", [0.9]))}):
        levels = _headings(private(items, raw=True))
        assert levels[0] == 1 and levels.count(1) == 1 and 3 in levels, levels
        assert all(b <= a + 1 for a, b in zip(levels, levels[1:])), levels
