"""Every eps a study prints names its delta, accountant and neighbour relation, in the terminal summary, the report
and the figure's axes: local DP included (delta 0, closed form), and a reproducible-mode run, whose label is the
accounted one followed by "not DP: seed known" (it was the bare number with that note)."""

from __future__ import annotations

import pytest

from dpmed.mechanisms import PrivacyCard
from dpmed.mechanisms.cards import label_randomness
from dpmed.reporting.figures import auroc_figure
from dpmed.reporting.inputs import eps_label

LAPLACE = PrivacyCard(mechanism="pixel_laplace", is_dp=True, statement="eps_image = 2,048", epsilon=2048.0,
                      epsilon_image=2048.0, epsilon_pixel=2.0, delta=0.0,
                      accountant="closed form (Laplace mechanism, pure DP)")
GAUSS = PrivacyCard(mechanism="pixel_gaussian", is_dp=True, statement="eps_image = 2,320", epsilon=2320.0,
                    epsilon_image=2320.0, delta=1e-5,
                    accountant="analytic Gaussian mechanism (Balle & Wang 2018), L2 sensitivity sqrt(d) R")
DP_SGD = PrivacyCard(mechanism="dp_sgd", is_dp=True, statement="eps = 7.99", epsilon=7.99, delta=1e-5,
                     accountant="pld", unit="patient")


def _plain(text: str) -> str:
    return text.replace("\u00a0", " ").replace("\u2011", "-")


def test_local_dp_labels_name_delta_and_accountant():
    assert _plain(eps_label(LAPLACE)) == "ε 2,048 per image (local DP, δ 0, closed form, any two images)"
    assert _plain(eps_label(GAUSS)) == "ε 2,320 per image (local DP, δ 1e-5, analytic Gaussian, any two images)"
    assert LAPLACE.in_brief() == "2,048 per image (local DP, delta 0, closed form, any two images)"
    assert GAUSS.in_brief() == "2,320 per image (local DP, delta 1e-05, analytic Gaussian, any two images)"


@pytest.mark.parametrize("card", [LAPLACE, GAUSS, DP_SGD], ids=["laplace", "gaussian", "dp_sgd"])
def test_a_reproducible_run_keeps_its_full_label_and_says_not_dp(card):
    reproducible = label_randomness(card, "reproducible")
    assert not reproducible.is_dp
    for shown, secure in ((eps_label(reproducible), eps_label(card)), (reproducible.in_brief(), card.in_brief())):
        assert shown.startswith(secure) and shown.endswith("not DP: seed known")
    assert "δ" in eps_label(reproducible) and "delta" in reproducible.in_brief()


def test_the_figure_axes_name_delta_and_accountant_and_reproducible_runs_are_plotted_as_not_dp(make_record):
    """In reproducible mode the DP-SGD panel said "no run of this kind" although the study had DP-SGD runs."""
    base = make_record("non-private_seed0", "non-private",
                       metrics={"test_auroc": 0.95, "test_auroc_low": 0.93, "test_auroc_high": 0.97})
    metrics = {"test_auroc": 0.9, "test_auroc_low": 0.85, "test_auroc_high": 0.94}
    dp = make_record("dp_eps8_C1_seed0", "dp", "dp_sgd", eps=8.0, metrics=metrics)
    local = make_record("lap_seed0", "lap", metrics=metrics).model_copy(
        update={"mechanism": "pixel_laplace", "privacy": LAPLACE})
    secure = auroc_figure([base, dp, local])
    xlabels = [_plain(ax.get_xlabel()) for ax in secure.axes[:2]]
    assert "δ 0, closed form; any two images" in xlabels[0] and "δ 1e-05, PLD; add or remove one image" in xlabels[1]
    reproducible = [r.model_copy(update={"privacy": label_randomness(r.privacy, "reproducible")}) for r in (dp, local)]
    fig = auroc_figure([base, *reproducible])
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert "no run of this kind" not in texts
    assert sum("not DP: seed known" in t for t in texts) == 2


PURE = DP_SGD.model_copy(update={"accountant": "pure", "delta": 0.0})   # pure DP by design: its bound holds at 0


@pytest.mark.parametrize("card", [LAPLACE, DP_SGD], ids=["laplace", "dp_sgd"])
def test_a_card_that_states_no_delta_reads_delta_unknown_not_pure_dp(tmp_path, make_record, card):
    """A run.json edited by hand (or by another writer) to hold no delta read "delta 0" in the summary, the plan and
    results.csv, a pure-DP claim the run never made, and a DP-SGD one stopped the report with an internal error.
    The card is read back from run.json as every reader reads it; a pure card's delta 0 still reads 0."""
    import json

    from dpmed.records import read_record

    path = tmp_path / "run.json"
    metrics = {"test_auroc": 0.9, "test_auroc_low": 0.85, "test_auroc_high": 0.94}
    record = make_record("r_seed0", "r", card.mechanism, eps=8.0, metrics=metrics).model_copy(
        update={"privacy": card})
    data = json.loads(record.model_dump_json())
    del data["privacy"]["delta"]
    path.write_text(json.dumps(data))
    missing = read_record(path)
    assert missing.privacy.delta is None
    assert "delta unknown," in missing.privacy.in_brief() and "delta 0" not in missing.privacy.in_brief()
    assert "δ unknown," in _plain(eps_label(missing.privacy)) and "δ 0" not in _plain(eps_label(missing.privacy))
    [axis] = [_plain(ax.get_xlabel()) for ax in auroc_figure([missing]).axes if "δ" in ax.get_xlabel()]
    assert "δ unknown," in axis and "δ 0" not in axis, axis
    pure = LAPLACE if card.epsilon_image is not None else PURE
    assert "delta 0," in pure.in_brief() and "δ 0," in _plain(eps_label(pure))
    stated = record.model_copy(update={"privacy": pure})
    [axis] = [_plain(ax.get_xlabel()) for ax in auroc_figure([stated]).axes if "δ" in ax.get_xlabel()]
    assert "δ 0," in axis, axis


def _examples_section(folder, release, make_record, make_resolved, *, with_shift: bool) -> str:
    """The released-images section's text for a study of a non-private run, a Laplace run, the same in
    reproducible mode (seeded_seed0) and, ``with_shift``, scalar_shift (a flawed mechanism's reproduction), each
    local-DP run released with its example images (`release`)."""
    import re
    from html import unescape

    import numpy as np

    from dpmed.outputs import write_outputs

    shift = PrivacyCard(mechanism="scalar_shift", is_dp=False, statement="NOT DP: one shift per image")
    laplace = make_record("lap_seed0", "lap").model_copy(update={"mechanism": "pixel_laplace", "privacy": LAPLACE})
    records = [make_record("np_seed0", "np"), laplace,
               laplace.model_copy(update={"run_id": "seeded_seed0",
                                          "privacy": label_randomness(LAPLACE, "reproducible")})]
    if with_shift:
        records.append(make_record("shift_seed0", "shift").model_copy(update={"mechanism": "scalar_shift",
                                                                              "privacy": shift}))
    images = np.random.default_rng(0).random((3, 1, 8, 8)).astype(np.float32)
    for r in records[1:]:
        release(r, root=folder.root, examples=dict(original=images, perturbed=images[::-1]))
    write_outputs(folder, make_resolved(records), records)
    html = folder.report.read_text()
    start = html.index('id="ldp-examples"')
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", html[start:html.find("<h2 ", start)])))


def test_the_released_images_section_says_why_each_not_dp_run_is_not_dp(tmp_path, release, make_record,
                                                                         make_resolved):
    """scalar_shift (a source document's flawed mechanism, not DP) appeared under "after each local-DP run's
    mechanism"; then every not-DP run was called a reproduction of a flawed mechanism, a reproducible-mode Laplace
    run too, which is not DP because its seed is published. Each is named with its own card's reason."""
    from dpmed.folders import StudyFolder

    section = _examples_section(StudyFolder(tmp_path), release, make_record, make_resolved, with_shift=True)
    assert "Local DP and its not-DP reproductions" in section
    assert "each local-DP run's mechanism" not in section
    named = section.split("image mechanism (", 1)[1].split(". Each run applied")[0]
    said = {clause.split(": ", 1)[0]: clause.split(": ", 1)[1] for clause in named.split("; ")}
    assert set(said) == {"seeded_seed0", "shift_seed0"}          # the DP run is not among them
    assert said["shift_seed0"].startswith("not DP") and "reproduces" in said["shift_seed0"]
    assert "seed" not in said["shift_seed0"]
    assert said["seeded_seed0"].startswith("not DP") and "published study seed" in said["seeded_seed0"]
    assert "reproduc" not in said["seeded_seed0"].replace("reproducible mode", "")


def test_a_reproducible_mode_run_alone_does_not_make_the_section_one_of_reproductions(tmp_path, release,
                                                                                      make_record, make_resolved):
    from dpmed.folders import StudyFolder

    section = _examples_section(StudyFolder(tmp_path), release, make_record, make_resolved, with_shift=False)
    assert section.startswith('id="ldp-examples">Local DP: what the released images look like ')
    assert "seeded_seed0: not DP" in section and "reproductions" not in section


# --- rounding: an eps or delta shown shorter is never smaller than the claim --------------------------------------

ODD = PrivacyCard(mechanism="dp_sgd", is_dp=True, statement="eps = 1", epsilon=0.99942, delta=1.31086e-5,
                  accountant="pld", unit="patient")


def test_eps_and_delta_labels_round_up_never_to_nearest():
    """0.99942 to nearest is 0.999 and 1.31086e-5 is 1.31e-5: both smaller than what the accountant certified.
    Every earlier test used whole eps and delta 1e-5, which print alike either way."""
    from dpmed.reporting.privacy_section import _fact

    assert _plain(eps_label(ODD)) == "ε 1 (δ 1.32e-5, PLD, add/remove one patient)"
    gauss = GAUSS.model_copy(update={"epsilon": 2320.4, "epsilon_image": 2320.4, "delta": 1.31086e-5})
    assert _plain(eps_label(gauss)) == "ε 2,330 per image (local DP, δ 1.32e-5, analytic Gaussian, any two images)"
    assert (_fact(ODD, "epsilon"), _fact(ODD, "delta")) == ("1", "1.32e-5")     # the privacy card's facts
    assert _fact(LAPLACE, "epsilon") is None      # local DP's eps is said per image only, never as a bare eps


def test_the_figure_axis_rounds_delta_up(make_record):
    """The axis printed δ with :.3g (to nearest): 1.31e-05 for a run at 1.31086e-5."""
    metrics = {"test_auroc": 0.9, "test_auroc_low": 0.85, "test_auroc_high": 0.94}
    dp = make_record("dp_eps8_C1_seed0", "dp", "dp_sgd", eps=8.0, metrics=metrics)
    dp = dp.model_copy(update={"privacy": dp.privacy.model_copy(update={"delta": 1.31086e-5})})
    xlabel = _plain(auroc_figure([dp]).axes[0].get_xlabel())
    assert "δ 1.32e-05, PLD" in xlabel


def test_every_reason_a_run_is_not_dp_is_said_and_a_run_without_privacy_needs_none():
    from dpmed.randomness import NOT_DP_REPRODUCIBLE
    from dpmed.reporting.inputs import not_dp_text

    both = DP_SGD.model_copy(update={"is_dp": False, "randomness": NOT_DP_REPRODUCIBLE, "sampler_voids": True})
    text = not_dp_text(both)
    assert text.startswith("not DP because its privacy randomness derives from the published study seed")
    assert ", and its noise is so small that one unit can move an output past every value the noise sampler draws" \
        in text
    assert not_dp_text(PrivacyCard(mechanism="none", is_dp=False, statement="no privacy protection")) is None
    unexplained = PrivacyCard(mechanism="dp_sgd", is_dp=False, statement="x")
    assert not_dp_text(unexplained) == "not DP (its privacy card says why)"


@pytest.mark.parametrize("share", [1e-15, 1e-12, 3e-8, 0.0])
def test_the_report_and_the_terminal_show_a_delta_with_a_tiny_sampler_share_alike(share):
    """A bounded noise sampler adds its share to delta. Where the share was below a billionth of delta the terminal
    read 1.01e-05 (rounded up strictly) and the report 1e-5 (rounding forgiven as binary noise): two deltas for one
    claim, the report's smaller than it. Both now show the same figures, never below the claim."""
    card = DP_SGD.model_copy(update={"delta": 1e-5 + share})
    terminal = card.in_brief().split("(delta ")[1].split(",")[0]
    report = _plain(eps_label(card)).split("(δ ")[1].split(",")[0]
    assert float(terminal) == float(report) >= card.delta
    assert report == ("1e-5" if share == 0 else "1.01e-5")


def test_a_not_dp_mechanism_without_an_eps_reads_not_dp_and_only_the_baseline_reads_infinity():
    """A flawed mechanism's reproduction has no eps either: labelled like the baseline, "no privacy (ε = ∞)", it
    would read as a deliberate arm without privacy instead of a mechanism that claims some and has none."""
    shift = PrivacyCard(mechanism="scalar_shift", is_dp=False, statement="NOT DP: one shift per image")
    none = PrivacyCard(mechanism="none", is_dp=False, statement="no privacy protection (eps = infinity)")
    assert eps_label(shift) == "not DP"
    assert _plain(eps_label(none)) == "no privacy (ε = ∞)"
    assert shift.in_brief() == "not DP" and none.in_brief() == "inf (no privacy)"


@pytest.mark.parametrize("card, accountant", [(LAPLACE, "closed form"), (GAUSS, "analytic Gaussian")])
def test_a_local_dp_run_voided_by_the_sampler_names_its_own_accountant(card, accountant):
    """A pixel_gaussian run whose noise is below the sampler's reach was said to be void because "the closed form
    holds for exact noise only": its eps is the analytic Gaussian's, not the Laplace closed form's."""
    from dpmed.reporting.inputs import not_dp_text

    text = not_dp_text(card.model_copy(update={"is_dp": False, "sampler_voids": True}))
    assert f"(the {accountant} ε holds for exact noise only)" in text
    assert ("closed form" in text) == (accountant == "closed form")


def test_the_cards_say_their_eps_is_rounded_up_where_a_fact_exceeds_the_statement(make_record, make_resolved):
    """A quickstart's card stated eps = 0.9995 and its facts table read eps 1: "shown to three significant figures"
    gives 0.999, so the table looked wrong to a reader who checks. The facts round eps up (never below what was
    accounted), and the section's intro says so."""
    from pathlib import Path

    from dpmed.folders import StudyFolder
    from dpmed.reporting.inputs import ReportInputs
    from dpmed.reporting.privacy_section import privacy_cards

    dp = make_record("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0)
    dp = dp.model_copy(update={"privacy": dp.privacy.model_copy(
        update={"epsilon": 0.9994042328275012, "statement": "eps = 0.9995 at delta = 1e-05"})})
    records = [make_record("np_seed0", "np"), dp]
    html = privacy_cards(ReportInputs(resolved=make_resolved(records), records=records, comparisons=None,
                                      folder=StudyFolder(Path("unused"))))
    assert "<td>1</td>" in html.split("dp_eps1_C1_seed0: privacy facts")[1].replace(" class=num", "")
    assert "ε and δ rounded up" in html.split('<div class="cards">')[0]


def test_the_report_writes_eps_and_delta_as_symbols_beside_its_cards(two_arms, report_html):
    """The cards, the tables' cells and the study's total write ε and δ, while the cards' intro read "Every eps names
    its delta", the tables' heads "eps" and a card's notes "an upper bound on eps": one report, two spellings. The
    terminal, results.csv and the fields quoted as run.json holds them stay ASCII."""
    import re
    from html import unescape

    html = report_html(two_arms)
    quoted = r'<style.*?</style>|<script.*?</script>|<dl class="raw">.*?</dl>|<code>.*?</code>|<pre>.*?</pre>'
    text = unescape(re.sub(r"<[^>]+>", " ", re.sub(quoted, "", html, flags=re.S)))
    words = [text[max(0, m.start() - 60):m.end() + 20]
             for m in re.finditer(r"(?<![\w.-])(eps|delta|sigma|eps_image)(?![\w-]|\.\w)", text)]
    assert words == [], words
    assert '<th scope="col">ε</th>' in html and "Every ε names its δ" in html


@pytest.mark.parametrize("card", [LAPLACE, DP_SGD], ids=["laplace", "dp_sgd"])
def test_a_report_card_that_states_no_delta_says_so_beside_its_eps(make_record, card):
    """The report's privacy card listed ε and no δ for a card without one (a run.json edited by hand): beside "every ε
    names its δ" that read as pure DP. A pure card's δ 0 still reads 0, and a card without an ε names no δ."""
    import re

    from dpmed.reporting.privacy_section import _card

    def facts(privacy) -> dict[str, str]:
        html = _card(make_record("r_seed0", "r").model_copy(update={"mechanism": privacy.mechanism,
                                                                    "privacy": privacy}))
        return dict(re.findall(r'<tr><th scope="row">([^<]*)</th><td[^>]*>([^<]*)</td></tr>', html))

    assert facts(card.model_copy(update={"delta": None}))["δ"].startswith("unknown")
    pure = LAPLACE if card.epsilon_image is not None else PURE
    assert facts(pure)["δ"] == "0"
    assert "δ" not in facts(PrivacyCard(mechanism="scalar_shift", is_dp=False, statement="not DP"))
