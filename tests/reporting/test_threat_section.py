"""The realistic threat model in the report (issue 17): per attacked DP-SGD run, the worst-case and relaxed bounds
beside the imprint attack's success rate, said plainly; the attack's images only in the private report. Built from
hand-made records and a hand-made attack_reconstructions.npz: no training."""

from __future__ import annotations

import re

import numpy as np
import pytest

from dpmed import accounting
from dpmed.attack import clopper_pearson
from dpmed.folders import StudyFolder
from dpmed.mechanisms import ReconstructionRecord
from dpmed.outputs import write_outputs
from dpmed.records import AttackRecord
from dpmed.reporting import SECTIONS
from dpmed.reporting.inputs import eps_label
from dpmed.reporting.threat_section import attack_label, reconstructions_figure, threat_section

RNG = np.random.default_rng(17)


def _attack(rate: float, low: float, high: float, n_success: int, chance: float = 0.0) -> AttackRecord:
    return AttackRecord(structure="cumulative", n_bins=64, batch_size=16, n_batches=4, grouped=False,
                        threshold=0.873, threshold_quantile=0.99, n_trials=64, n_success=n_success, rate=rate,
                        rate_low=low, rate_high=high, ci_level=0.95, batch_rate=rate, chance_rate=chance,
                        mean_best_ssim=0.5, mean_best_ncc=0.4,
                        attacked="held-out test images through the arm's own step and trained model")


def _risk(worst: float, relaxed: float) -> ReconstructionRecord:
    """The cross-checks (Edgeworth, GDP) are not the bound: given other values, so that a column showing one of them
    in the bound's place reads wrong."""
    return ReconstructionRecord(noise_multiplier=1.0, sample_rate=0.1, steps=10, kappa=1e-3, worst_case=worst,
                                worst_case_edgeworth=worst / 2, relaxed=relaxed, gdp=worst / 3,
                                tpr_at_fpr={"0.001": 0.01},
                                assumptions="informed adversary", worst_case_via="pld",
                                worst_case_edgeworth_via="edgeworth", relaxed_via="pld", gdp_via="gdp",
                                tpr_at_fpr_via={"0.001": "pld"}, unit="image")


@pytest.fixture
def attacked(make_record):
    auroc = {"test_auroc": 0.81, "test_auroc_low": 0.74, "test_auroc_high": 0.88}
    return [make_record("np_seed0", "np", metrics=auroc),
            make_record("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0, metrics=auroc).model_copy(
                update={"attack": _attack(0.0, 0.0, 0.056, 0, chance=0.016),
                        "reconstruction": _risk(0.0123, 0.0046)}),
            make_record("dp_eps1e+06_C1_seed0", "dp", "dp_sgd", eps=1e6, metrics=auroc).model_copy(
                update={"attack": _attack(0.25, 0.15, 0.37, 16), "reconstruction": _risk(1.0, 1.0)}),
            make_record("plain_eps8_C1_seed0", "plain", "dp_sgd", eps=8.0, metrics=auroc)]       # not attacked


def _save_images(folder: StudyFolder, run_id: str, m: int = 5) -> np.ndarray:
    """A run's private attack file as dpmed.run writes it: originals, reconstructions [m, 1, 16, 16], SSIM [m]."""
    originals = RNG.random((m, 1, 16, 16)).astype(np.float32)
    run = folder.run(run_id)
    run.private.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(run.attack_images, originals=originals,
                        reconstructions=np.clip(originals + 0.05 * RNG.standard_normal(originals.shape), 0, 1),
                        ssim=np.linspace(0.95, 0.6, m))
    return originals


def _section(html: str, anchor: str) -> str:
    start = html.index(f'id="{anchor}"')
    end = html.find("<h2 ", start)
    return html[start:end if end > 0 else None]


def _text(fragment: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", fragment))


def test_threat_section_follows_the_bounds_with_the_attack_rate_per_attacked_run(tmp_path, attacked, make_resolved):
    folder = StudyFolder(tmp_path)
    write_outputs(folder, make_resolved(attacked), attacked)
    html = folder.report.read_text()
    assert SECTIONS.index(threat_section) == [s.__name__ for s in SECTIONS].index("reconstruction_risk") + 1
    assert html.index('id="risk"') < html.index('id="threat"') < html.index('id="provenance"')
    section = _section(html, "threat")
    rows = re.findall(r"<tr><td data-label[^>]*>([^<]+)</td>", section)
    assert rows == ["dp_eps1_C1_seed0", "dp_eps1e+06_C1_seed0"]                    # attacked runs only
    text = _text(section)                           # the worst-case bound 1.23 % is shown rounded up, as eps is
    for shown in ("1.3%", "0.46%", "0.0% [0.0%, 5.6%]", "0 of 64 images", "25.0% [15.0%, 37.0%]", "16 of 64",
                  "100.0%", "0.810 [0.740, 0.880]"):
        assert shown in text, shown
    assert "ε 990,000 (δ 1e‑5, PLD, add/remove one image)" in text                  # the report's eps labels


def test_an_attack_whose_interval_reaches_chance_is_said_to_show_nothing(tmp_path, attacked, make_resolved):
    """'chance' is the rate of random validation images in place of the reconstructions; an attack that does not
    beat it has reconstructed nothing, and its row says so (the 25 % attack, far above 1.6 %, is not flagged)."""
    folder = StudyFolder(tmp_path)
    write_outputs(folder, make_resolved(attacked), attacked)
    section = _section(folder.report.read_text(), "threat")
    rows = dict(re.findall(r"<tr><td data-label[^>]*>([^<]+)</td>(.*?)</tr>", section, re.S))
    assert "1.6%" in _text(rows["dp_eps1_C1_seed0"]) and "not above chance" in rows["dp_eps1_C1_seed0"]
    assert "not above chance" not in rows["dp_eps1e+06_C1_seed0"]
    assert "with as many validation images drawn at random" in _text(section)
    assert "the median validation image of as many brightness groups" in _text(section)


def test_threat_section_says_which_threat_model_and_what_counts_as_success(tmp_path, attacked, make_resolved):
    folder = StudyFolder(tmp_path)
    write_outputs(folder, make_resolved(attacked), attacked)
    text = _text(_section(folder.report.read_text(), "threat"))
    for plain in ("Realistic is the threat model of Ziller et al. 2024", "imprint attack of Fowl et al. 2022",
                  "through dpmed's own DP-SGD step", "held-out test images",
                  "the run's augmentation and its multiplicity K are left out",
                  "SSIM 0.87", "calibrated on public images", "only 1 in 100 plausible images",
                  "Worst case and relaxed are upper bounds"):
        assert plain in text, plain
    assert not re.search(r"00\d_[0-9a-f]{16}\.txt", folder.report.read_text())


def test_no_attacked_run_no_threat_section(tmp_path, make_record, make_resolved):
    records = [make_record("np_seed0", "np"), make_record("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0)]
    folder = StudyFolder(tmp_path)
    write_outputs(folder, make_resolved(records), records)
    assert 'id="threat"' not in folder.report.read_text()


def test_reconstructions_are_in_the_private_report_and_never_in_the_public_one(tmp_path, attacked, make_resolved):
    folder = StudyFolder(tmp_path)
    for run_id in ("dp_eps1_C1_seed0", "dp_eps1e+06_C1_seed0"):
        _save_images(folder, run_id)
    write_outputs(folder, make_resolved(attacked), attacked)
    private = folder.private_report.read_text()
    figure = _section(private, "reconstructions")
    assert "best reconstructions" in figure and "held-out test images" in figure
    assert figure.count('<img src="data:image/png;base64,') == 1
    png = folder.private / "attack_reconstructions.png"
    assert png.stat().st_size > 1000
    public = folder.report.read_text()
    assert 'id="reconstructions"' not in public and "attack_reconstructions" not in public
    payload = re.search(r'src="data:image/png;base64,([^"]+)"', figure).group(1)
    assert payload[:200] not in public
    public_files = [p.name for p in folder.root.rglob("*") if folder.private not in p.parents]
    assert not [name for name in public_files if "reconstruction" in name]      # no attack image outside private/
    assert "private/report.html" in _text(_section(public, "threat"))


def test_private_report_without_attack_files_shows_no_figure(tmp_path, attacked, make_resolved):
    folder = StudyFolder(tmp_path)
    _save_images(folder, "dp_eps1_C1_seed0", m=0)                                  # an attack that kept nothing
    write_outputs(folder, make_resolved(attacked), attacked)
    private = folder.private_report.read_text() if folder.private_report.is_file() else ""
    assert 'id="reconstructions"' not in private


def test_reconstructions_figure_pairs_each_original_with_its_reconstruction():
    originals = RNG.random((3, 1, 8, 8))
    rows = [("run a\nε 1", {"originals": originals, "reconstructions": originals, "ssim": np.array([0.9, 0.8, 0.7])}),
            ("run b\nε 1e6", {"originals": originals[:1], "reconstructions": originals[:1], "ssim": np.array([0.5])})]
    png = reconstructions_figure(rows, n=4)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000


def test_small_bounds_keep_two_significant_figures():
    """eps 1's worst-case bound on PneumoniaMNIST is 0.056 %: one decimal printed it as 0.1 %, and 0.030 % as 0.0 %,
    which reads as no risk at all."""
    from dpmed.reporting.threat_section import _percent

    assert _percent(0.0005624) == "0.057%" and _percent(0.0002956) == "0.03%"     # bounds: rounded up
    assert _percent(0.0179) == "1.8%" and _percent(1.0) == "100.0%" and _percent(0.0) == "0.0%"
    assert _percent(None) == "–"


def test_every_bound_the_report_shows_is_rounded_up_never_below_the_bound(tmp_path, make_record, make_resolved):
    """Upper bounds were rounded to nearest (0.0031425 shown as 0.314 %) while eps is rounded up: a bound shown
    shorter looked smaller than it is. Each shown bound is at least the bound and less than one shown unit above."""
    risk = _risk(0.0031425, 0.0012341).model_copy(update={"tpr_at_fpr": {"0.001": 0.0012341, "0.01": 0.0123412}})
    records = [make_record("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0).model_copy(
                   update={"reconstruction": risk, "attack": _attack(0.0, 0.0, 0.056, 0)}),
               make_record("dp_eps8_C1_seed0", "dp", "dp_sgd", eps=8.0).model_copy(
                   update={"reconstruction": _risk(0.0005624, 0.0179)})]
    folder = StudyFolder(tmp_path)
    write_outputs(folder, make_resolved(records), records)
    html = folder.report.read_text()
    truths = [(0.0031425, 0.0012341, 0.0012341, 0.0123412), (0.0005624, 0.0179, 0.01)]
    risk_rows = re.findall(r"<tr><td[^>]*>dp_eps\d_C1_seed0</td>(.*?)</tr>", _section(html, "risk"), flags=re.S)
    threat_rows = re.findall(r"<tr><td[^>]*>dp_eps1_C1_seed0</td>(.*?)</tr>", _section(html, "threat"), flags=re.S)
    # the risk table's first percentage is the prior kappa (1e-3: 0.1%), in the same unit as the bounds after it
    assert all(re.findall(r"([\d.]+)%", _text(row))[0] == "0.1" for row in risk_rows)
    shown = [(re.findall(r"([\d.]+)%", _text(row))[1:5], truth) for row, truth in zip(risk_rows, truths, strict=True)]
    shown.append((re.findall(r"([\d.]+)%", _text(threat_rows[0]))[:2], truths[0][:2]))
    assert len(shown) == 3
    for cells, truth in shown:
        assert len(cells) == len(truth)
        for text, bound in zip(cells, truth, strict=True):
            unit = 10.0 ** -len(text.partition(".")[2])
            assert bound <= float(text) / 100 < bound + unit / 100, (text, bound)


def test_attack_above_the_run_bound_is_shown_against_the_attacked_steps_bound(tmp_path, make_record, make_resolved):
    """The run's bound is for a record Poisson-sampled over T steps; the attack puts every image in one batch, so its
    game's bound is the attacked step's (q = 1, T = 1). Before, only the run's bound (64.3 %) stood beside an 86 %
    attack under "the bounds say what no attacker can exceed" (measured on the phantom, one epoch, sigma 1e-3)."""
    attack = AttackRecord(structure="sparse", n_bins=64, batch_size=8, n_batches=60, grouped=False, threshold=0.861,
                          threshold_quantile=0.99, n_trials=480, n_success=413, rate=0.860, rate_low=0.826,
                          rate_high=0.890, ci_level=0.95, batch_rate=1.0, chance_rate=0.0, mean_best_ssim=0.9,
                          mean_best_ncc=0.9, attacked="held-out test images")
    risk = ReconstructionRecord(noise_multiplier=1e-3, sample_rate=8 / 168, steps=21, kappa=1 / 168,
                                worst_case=0.643, worst_case_edgeworth=0.643, relaxed=0.643, gdp=1.0,
                                tpr_at_fpr={"0.001": 0.64}, assumptions="informed adversary",
                                worst_case_via="exact limit", worst_case_edgeworth_via="exact limit",
                                relaxed_via="exact limit", gdp_via="gdp", tpr_at_fpr_via={"0.001": "exact"},
                                unit="image")
    records = [make_record("np_seed0", "np"),
               make_record("dp_eps1e+15_C1_seed0", "dp", "dp_sgd", eps=1e15).model_copy(
                   update={"attack": attack, "reconstruction": risk})]
    folder = StudyFolder(tmp_path)
    write_outputs(folder, make_resolved(records), records)
    section = _section(folder.report.read_text(), "threat")
    row = re.search(r"<tr><td data-label[^>]*>dp_eps1e\+15_C1_seed0</td>(.*?)</tr>", section, re.S).group(1)
    cells = [re.sub(r"<[^>]+>", " ", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
    assert any(c.startswith("100.0%") and "at kappa" in c for c in cells)  # the attacked step's bound, beside 64.3 %
    assert "attacked step" in section
    assert "above the run's bound" in section       # the 86 % attack is flagged, not silently above a "bound"


def test_risk_assumptions_are_quoted_once_per_unit_from_a_named_run(tmp_path, make_record, make_resolved):
    """The section printed the last run's assumptions under every row: a patient-unit row stood under "the target
    image" and another run's kappa, q and T."""
    def risk(unit: str, kappa: float) -> ReconstructionRecord:
        return _risk(0.01, 0.005).model_copy(update={"unit": unit, "kappa": kappa,
                                                     "assumptions": f"target {unit}, kappa = {kappa}"})
    records = [make_record("dp_patient_seed0", "dp", "dp_sgd", eps=1.0).model_copy(
                   update={"reconstruction": risk("patient", 1 / 174)}),
               make_record("dp_patient_seed1", "dp", "dp_sgd", eps=1.0).model_copy(
                   update={"reconstruction": risk("patient", 1 / 175)}),
               make_record("img_seed0", "img", "dp_sgd", eps=8.0).model_copy(
                   update={"reconstruction": risk("image", 1 / 210)})]
    folder = StudyFolder(tmp_path)
    write_outputs(folder, make_resolved(records), records)
    text = _text(_section(folder.report.read_text(), "risk"))
    assert "with the patient as the unit (quoted from dp_patient_seed0" in text
    assert f"target patient, kappa = {1 / 174}" in text and f"target patient, kappa = {1 / 175}" not in text
    assert "with the image as the unit (quoted from img_seed0" in text and f"target image, kappa = {1 / 210}" in text


def test_the_attacked_steps_bound_holds_at_the_success_criterions_prior_not_at_one_over_n(tmp_path, make_record,
                                                                                           make_resolved):
    """The step bound was taken at kappa = 1/N, but the SSIM criterion is passed by random plausible images at the
    chance rate: on PneumoniaMNIST at eps 0.5 the chance rate (1.6 %) lay above the step bound at kappa = 1/4700, so
    "an attack above the attacked step's bound would be a contradiction" was already true of random images. Hayes et
    al. 2023's bound holds at the criterion's own prior: the larger of 1/N and the chance interval's upper end."""
    def run(run_id: str, kappa: float, chance_successes: int):
        attack = _attack(0.0, 0.0, 0.056, 0, chance=chance_successes / 64)
        risk = _risk(0.0018, 0.001).model_copy(update={"noise_multiplier": 2.0, "kappa": kappa})
        return make_record(run_id, "dp", "dp_sgd", eps=0.5).model_copy(update={"attack": attack,
                                                                               "reconstruction": risk})
    records = [run("dp_eps0.5_C1_seed0", 1 / 4700, 1), run("dp_eps0.5_C1_seed1", 0.25, 0)]
    folder = StudyFolder(tmp_path)
    write_outputs(folder, make_resolved(records), records)
    section = _section(folder.report.read_text(), "threat")
    rows = dict(re.findall(r"<tr><td data-label[^>]*>([^<]+)</td>(.*?)</tr>", section, re.S))
    chance_high = clopper_pearson(1, 64)[1]
    for run_id, kappa, source in (("dp_eps0.5_C1_seed0", chance_high, "chance's upper end"),
                                  ("dp_eps0.5_C1_seed1", 0.25, "1/N")):
        cell = _text(re.findall(r"<td[^>]*>(.*?)</td>", rows[run_id], re.S)[3])
        bound = accounting.reconstruction_bound(noise_multiplier=2.0, sample_rate=1.0, steps=1, kappa=kappa)
        shown = float(re.match(r"\s*([\d.]+)%", cell).group(1)) / 100
        assert bound <= shown < bound + 0.001, (cell, bound)
        assert shown >= 1 / 64 and f"at kappa {kappa:.3g} ({source})" in cell, cell
    text = _text(section)
    assert "upper end of the chance rate's interval" in text
    assert "one above the attacked step's bound would be" in text


def test_each_flag_reads_the_interval_s_lower_end_against_its_own_bound(tmp_path, make_record, make_resolved):
    """A flag decided by the point rate, or against the other bound, says more than the attack showed. Run a: rate
    40.6 % [30 %, 53 %] against a run bound of 50 % (relaxed 20 %) and an attacked step's bound of about 35 %: its
    interval reaches below both, so neither "above" flag, and far above chance. Run b: 4.7 % [1 %, 13 %] against chance
    3.1 %: the point rate is above chance, the interval is not, so "not above chance". Run c: every random image
    passed (chance 64 of 64): the step's prior is certainty, its bound 100 %, no error."""
    def run(run_id: str, attack: tuple[float, float, float, int], chance: int) -> object:
        risk = _risk(0.5, 0.2)
        return make_record(run_id, "dp", "dp_sgd", eps=1.0).model_copy(
            update={"attack": _attack(*attack, chance=chance / 64), "reconstruction": risk})
    records = [run("a_seed0", (26 / 64, 0.30, 0.53, 26), 1), run("b_seed0", (3 / 64, 0.01, 0.13, 3), 2),
               run("c_seed0", (0.5, 0.37, 0.63, 32), 64)]
    step = accounting.reconstruction_bound(noise_multiplier=1.0, sample_rate=1.0, steps=1,
                                           kappa=clopper_pearson(1, 64)[1])
    assert 0.30 < step < 26 / 64                     # the setting the docstring states
    folder = StudyFolder(tmp_path)
    write_outputs(folder, make_resolved(records), records)
    rows = dict(re.findall(r"<tr><td data-label[^>]*>([^<]+)</td>(.*?)</tr>", _section(folder.report.read_text(),
                                                                                       "threat"), re.S))
    assert not re.search("above the run's bound|above the attacked step's bound|not above chance", rows["a_seed0"])
    assert "not above chance" in rows["b_seed0"] and "above the" not in rows["b_seed0"].replace("not above", "")
    step_c = _text(re.findall(r"<td[^>]*>(.*?)</td>", rows["c_seed0"], re.S)[3])
    assert step_c.startswith("100.0%") and "at kappa 1 (chance's upper end)" in step_c
    assert "not above chance" in rows["c_seed0"]


def test_an_attack_whose_interval_lies_above_the_attacked_steps_bound_is_flagged_as_a_contradiction(
        tmp_path, make_record, make_resolved):
    """The attacked step's bound (q = 1, T = 1, at the criterion's prior) is what the attack's own game cannot
    exceed: an attack whose whole interval lies above it contradicts the accounting (a bug, or a run whose noise was
    not what its record says), and the row says so. At sigma 10 and kappa 1e-3 that bound is far below 50 % [40 %,
    60 %]; the run's own bound is set above the attack, so only this flag can fire."""
    risk = _risk(0.9, 0.8).model_copy(update={"noise_multiplier": 10.0})
    step = accounting.reconstruction_bound(noise_multiplier=10.0, sample_rate=1.0, steps=1, kappa=1e-3)
    assert step < 0.40
    records = [make_record("dp_seed0", "dp", "dp_sgd", eps=1.0).model_copy(
        update={"attack": _attack(0.5, 0.40, 0.60, 32), "reconstruction": risk})]
    folder = StudyFolder(tmp_path)
    write_outputs(folder, make_resolved(records), records)
    row = dict(re.findall(r"<tr><td data-label[^>]*>([^<]+)</td>(.*?)</tr>", _section(folder.report.read_text(),
                                                                                      "threat"), re.S))["dp_seed0"]
    assert "above the attacked step's bound: contradicts the bound, check the run" in _text(row)
    assert "above the run's bound" not in row and "not above chance" not in row


def test_each_runs_own_success_threshold_and_batches_are_shown_not_the_first_runs_for_all(tmp_path, make_record,
                                                                                          make_resolved):
    """Each run calibrates its threshold on its own seed's null draws (and batch size) and attacks its own number of
    batches; the prose quoted the first run's threshold and counts as if every run shared them."""
    records = [make_record("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0).model_copy(
                   update={"attack": _attack(0.0, 0.0, 0.056, 0), "reconstruction": _risk(0.0123, 0.0046)}),
               make_record("dp_eps1_C1_seed1", "dp", "dp_sgd", eps=1.0).model_copy(
                   update={"attack": _attack(0.0, 0.0, 0.03, 0).model_copy(
                       update={"threshold": 0.912, "n_batches": 8, "n_trials": 128}),
                       "reconstruction": _risk(0.0123, 0.0046)})]
    folder = StudyFolder(tmp_path)
    write_outputs(folder, make_resolved(records), records)
    section = _section(folder.report.read_text(), "threat")
    text = _text(section)
    assert "reaches SSIM 0.87." not in text and "64 per run" not in text
    assert "its run's SSIM threshold (0.873 to 0.912; each row shows its own)" in text
    rows = dict(re.findall(r"<tr><td data-label[^>]*>([^<]+)</td>(.*?)</tr>", section, re.S))
    assert "0 of 64 images (4 batches of 16) at SSIM &ge; 0.87" in _text(rows["dp_eps1_C1_seed0"])
    assert "0 of 128 images (8 batches of 16) at SSIM &ge; 0.91" in _text(rows["dp_eps1_C1_seed1"])


def test_the_success_threshold_is_never_shown_above_the_one_applied(tmp_path, make_record, make_resolved):
    """A calibrated threshold of 0.84602 was printed as "SSIM 0.85" and "SSIM >= 0.85", so reconstructions at SSIM
    0.846 to 0.85 were counted as successes the text said did not pass. Shown to three decimals, rounded down: every
    success counted reaches the value shown."""
    records = [make_record("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0).model_copy(
        update={"attack": _attack(0.07, 0.05, 0.1, 4).model_copy(update={"threshold": 0.8460190026464312}),
                "reconstruction": _risk(0.0123, 0.0046)})]
    folder = StudyFolder(tmp_path)
    write_outputs(folder, make_resolved(records), records)
    text = _text(_section(folder.report.read_text(), "threat"))
    assert "reaches SSIM 0.846." in text, text
    assert "at SSIM &ge; 0.846" in text or "at SSIM ≥ 0.846" in text, text
    assert "0.85" not in text, text


def test_the_attacks_interval_level_is_shown_as_it_is(tmp_path, make_record, make_resolved):
    """An attack's Clopper-Pearson interval at 99.9 % read "[100% CI]": a certainty no finite count gives."""
    attack = _attack(0.5, 0.3, 0.7, 32).model_copy(update={"ci_level": 0.999})
    records = [make_record("np_seed0", "np"), make_record("dp_eps8_C1_seed0", "dp", "dp_sgd", eps=8.0).model_copy(
        update={"attack": attack, "reconstruction": _risk(0.01, 0.005)})]
    folder = StudyFolder(tmp_path)
    write_outputs(folder, make_resolved(records), records)
    section = _section(folder.report.read_text(), "threat")
    assert "attack success [99.9% CI]" in section and "100% CI" not in section


def _rows(tmp_path, make_resolved, records) -> tuple[dict[str, str], str]:
    """The threat section's rows by run id, and the section's text."""
    folder = StudyFolder(tmp_path)
    write_outputs(folder, make_resolved(records), records)
    section = _section(folder.report.read_text(), "threat")
    return dict(re.findall(r"<tr><td data-label[^>]*>([^<]+)</td>(.*?)</tr>", section, re.S)), _text(section)


def test_a_threshold_rounded_up_at_three_decimals_is_shown_rounded_down(tmp_path, make_record, make_resolved):
    """0.8468 to nearest is 0.847: a reconstruction at 0.8469 passed, one at 0.8466 reads as passing too, and did
    not. Rounded down, every success reaches the value shown."""
    records = [make_record("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0).model_copy(
        update={"attack": _attack(0.07, 0.05, 0.1, 4).model_copy(update={"threshold": 0.8468}),
                "reconstruction": _risk(0.0123, 0.0046)})]
    rows, text = _rows(tmp_path, make_resolved, records)
    assert "reaches SSIM 0.846." in text and "0.847" not in text
    assert "at SSIM &ge;\u00a00.846" in rows["dp_eps1_C1_seed0"]


def test_the_chance_rates_upper_end_is_taken_at_the_attacks_own_level(tmp_path, make_record, make_resolved):
    """At 99.9 % the upper end of 1 chance success in 64 lies above the 95 % one: the step's prior taken at 95 % sits
    below the end the attack's own interval states, and the bound with it."""
    attack = _attack(0.0, 0.0, 0.1, 0, chance=1 / 64).model_copy(update={"ci_level": 0.999})
    risk = _risk(0.0018, 0.001).model_copy(update={"noise_multiplier": 2.0, "kappa": 1 / 4700})
    records = [make_record("dp_eps0.5_C1_seed0", "dp", "dp_sgd", eps=0.5).model_copy(
        update={"attack": attack, "reconstruction": risk})]
    rows, _ = _rows(tmp_path, make_resolved, records)
    kappa = clopper_pearson(1, 64, level=0.999)[1]
    assert kappa > clopper_pearson(1, 64, level=0.95)[1] + 0.01
    cell = _text(re.findall(r"<td[^>]*>(.*?)</td>", rows["dp_eps0.5_C1_seed0"], re.S)[3])
    assert f"at kappa {kappa:.3g} (chance's upper end)" in cell, cell
    bound = accounting.reconstruction_bound(noise_multiplier=2.0, sample_rate=1.0, steps=1, kappa=kappa)
    assert bound <= float(re.match(r"\s*([\d.]+)%", cell).group(1)) / 100 < bound + 0.001


def test_the_flags_read_the_lower_end_at_its_boundaries(tmp_path, make_record, make_resolved):
    """Run a: its lower end equals the chance rate, which the interval reaches: "not above chance". Run b: its point
    rate (30 %) lies above the run's bound (20 %) and its lower end (15 %) below: no "above the run's bound". Run c:
    its lower end (25 %) lies above the run's bound: flagged, and below its step's bound (about 35 % at kappa 1 in
    64's upper end): no contradiction."""
    def run(run_id: str, attack: tuple[float, float, float, int], chance: float) -> object:
        return make_record(run_id, "dp", "dp_sgd", eps=1.0).model_copy(
            update={"attack": _attack(*attack, chance=chance), "reconstruction": _risk(0.2, 0.1)})
    records = [run("a_seed0", (5 / 64, 2 / 64, 0.17, 5), 2 / 64), run("b_seed0", (0.3, 0.15, 0.4, 19), 1 / 64),
               run("c_seed0", (0.4, 0.25, 0.5, 26), 1 / 64)]
    step = accounting.reconstruction_bound(noise_multiplier=1.0, sample_rate=1.0, steps=1,
                                           kappa=clopper_pearson(1, 64)[1])
    assert 0.25 < step < 0.4                            # the setting the docstring states
    rows, _ = _rows(tmp_path, make_resolved, records)
    assert "not above chance" in rows["a_seed0"]
    assert "above the run's bound" not in rows["b_seed0"] and "not above chance" not in rows["b_seed0"]
    assert "above the run's bound" in rows["c_seed0"] and "above the attacked step's bound" not in rows["c_seed0"]


def test_runs_calibrated_at_different_quantiles_are_said_to_differ(tmp_path, make_record, make_resolved):
    """One run's threshold passes 1 in 100 null images, another's 1 in 1000: the prose named the first for both."""
    records = [make_record(f"dp_eps1_C1_seed{seed}", "dp", "dp_sgd", eps=1.0, seed=seed).model_copy(
        update={"attack": _attack(0.0, 0.0, 0.056, 0).model_copy(update={"threshold_quantile": q}),
                "reconstruction": _risk(0.0123, 0.0046)}) for seed, q in ((0, 0.99), (1, 0.999))]
    _, text = _rows(tmp_path, make_resolved, records)
    assert "only 1 in 100 to 1 in 1000 plausible images" in text and "about 1 in 100 to 1 in 1000 per guess" in text


def test_the_reconstructions_figure_names_each_run_by_its_eps_and_never_reads_a_success_as_none(make_record):
    """The private figure's label of a run: its id, its eps with delta, accountant and neighbours, and how many images
    the attack reconstructed. 1 of 256 read "attack success 0%", as if the attack had reconstructed none."""
    record = make_record("dp_eps8_C1_seed0", "dp", "dp_sgd", eps=8.0).model_copy(
        update={"attack": _attack(1 / 256, 0.0001, 0.02, 1).model_copy(update={"n_trials": 256, "n_batches": 16}),
                "reconstruction": _risk(0.01, 0.005)})
    run_id, eps, rate = attack_label(record).split("\n")
    assert (run_id, eps) == ("dp_eps8_C1_seed0", eps_label(record.privacy)) and "δ" in eps
    assert rate == "attack success 1 of 256 images (0.4%)"
    assert attack_label(record.model_copy(update={"attack": None})) == f"dp_eps8_C1_seed0\n{eps_label(record.privacy)}"


def test_the_attacks_interval_is_shown_rounded_outward(tmp_path, make_record, make_resolved):
    """An interval of 0.054 % to 1.94 % to nearest reads [0.1%, 1.9%], narrower at both ends than the one computed:
    shown outward it reads [0.0%, 2.0%]. The point rate (0.7 %) is an estimate, to nearest."""
    records = [make_record("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0).model_copy(
        update={"attack": _attack(0.0072, 0.00054, 0.0194, 1), "reconstruction": _risk(0.0123, 0.0046)})]
    rows, _ = _rows(tmp_path, make_resolved, records)
    assert "0.7% [0.0%,\u00a02.0%]" in rows["dp_eps1_C1_seed0"]


@pytest.mark.parametrize("update, reason", [({"noise": "laplace"}, "Laplace noise"),
                                            ({"sampling": "shuffle"}, "shuffled batches")])
def test_an_attacked_run_without_bounds_says_why_its_bound_cells_are_empty(tmp_path, make_record, make_resolved,
                                                                          update, reason):
    """A Laplace-noise (or shuffled-batch) DP-SGD run has no reconstruction bound (they are proved for Gaussian noise
    with Poisson sampling): its three bound columns read "–" and nothing said why, as if a value were missing."""
    run = make_record("lap_eps8_C1_seed0", "lap", "dp_sgd", eps=8.0)
    run = run.model_copy(update={"attack": _attack(0.5, 0.3, 0.7, 32),
                                 "privacy": run.privacy.model_copy(update=update)})
    rows, text = _rows(tmp_path, make_resolved, [run])
    cells = re.findall(r"<td[^>]*>(.*?)</td>", rows["lap_eps8_C1_seed0"], re.S)
    assert [_text(c).strip() for c in cells[1:4]] == ["–"] * 3
    assert f"No bound is given for lap_eps8_C1_seed0 ({reason})" in text, text
    assert "proved for Gaussian noise with Poisson sampling" in text
    gaussian = make_record("gauss_eps8_C1_seed0", "gauss", "dp_sgd", eps=8.0).model_copy(
        update={"attack": _attack(0.5, 0.3, 0.7, 32), "reconstruction": _risk(0.01, 0.005)})
    (tmp_path / "gaussian").mkdir()
    assert "No bound" not in _rows(tmp_path / "gaussian", make_resolved, [gaussian])[1]
