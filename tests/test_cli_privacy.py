"""`dpmed privacy`: planning numbers from the command line, each with its accountant and assumptions."""

from __future__ import annotations

import math
import re
import subprocess
import sys

import pytest

from dpmed import accounting
from dpmed.cli import main

REFERENCE = ["--noise-multiplier", "5.002", "--sample-rate", str(128 / 5218), "--steps", "2039", "--delta", "1e-4"]


def _eps(line: str) -> float:
    return float(re.search(r"eps = ([0-9.e+-]+)", line).group(1))


def test_epsilon_under_every_accountant_names_each_and_the_assumptions(capsys):
    assert main(["privacy", "epsilon", *REFERENCE, "--accountant", "all"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [_eps(line) for line in lines[:3]] == pytest.approx([0.689, 0.770, 0.994], abs=0.005)
    assert "[pld:" in lines[0] and "[rdp:" in lines[1] and "[rdp-classic:" in lines[2]
    assert all("at delta = 0.0001, add/remove one image  [" in line for line in lines[:3])   # each eps its neighbours
    assert lines[-1].startswith("assumes:") and "Poisson sampling" in lines[-1]
    assert "add or remove one training image" in lines[-1]


def test_a_pure_dp_bound_is_printed_at_delta_zero_beside_the_pld_at_the_given_delta(capsys):
    """The pure accountant's line said "at delta = 1e-05" and then "(delta = 0)": two deltas for one eps."""
    assert main(["privacy", "epsilon", "--noise", "laplace", "--accountant", "all", "--noise-multiplier", "1",
                 "--sample-rate", "0.01", "--steps", "100", "--delta", "1e-5"]) == 0
    pld, pure = capsys.readouterr().out.splitlines()[:2]
    assert "[pld:" in pld and "at delta = 1e-05" in pld
    assert "[pure:" in pure and "at delta = 0, " in pure and "1e-05" not in pure
    assert _eps(pure) == pytest.approx(100 * math.log1p(0.01 * math.expm1(1.0)), rel=1e-5)   # closed form by hand


def test_calibrating_for_a_pure_dp_bound_needs_no_delta_and_shows_delta_zero(capsys):
    """calibrate asked for --delta under the pure accountant and then printed it beside a delta-0 bound."""
    args = ["privacy", "calibrate", "--target-epsilon", "2", "--sample-rate", "0.01", "--steps", "100",
            "--noise", "laplace", "--accountant", "pure"]
    assert main(args) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert "at delta = 0, " in line and _eps(line) <= 2
    sigma = float(re.search(r"noise_multiplier = ([0-9.e+-]+)", line).group(1))
    # the pure bound by hand: T log(1 + q (e^(1/sigma) - 1)) for Laplace b = sigma C1 at sensitivity C1
    assert _eps(line) == pytest.approx(100 * math.log1p(0.01 * math.expm1(1 / sigma)), rel=1e-4)
    assert main([*args, "--delta", "1e-5"]) == 0 and "1e-05" not in capsys.readouterr().out.splitlines()[0]


def test_with_every_accountant_one_that_cannot_certify_is_said_and_the_others_still_print(capsys):
    """Before: PLD's refusal above eps 500 ended the command (exit 2) before RDP, which certifies it, was printed."""
    assert main(["privacy", "epsilon", "--noise-multiplier", "1e-6", "--sample-rate", "0.01", "--steps", "100",
                 "--delta", "1e-5", "--accountant", "all"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("eps: none certified  [pld:") and "above 500" in lines[0]
    assert "[rdp:" in lines[1] and _eps(lines[1]) > 1e12 and "[rdp-classic:" in lines[2]


def test_calibrate_from_dataset_size_batch_and_epochs_matches_the_library(capsys):
    args = ["--dataset-size", "5000", "--batch-size", "100", "--epochs", "10"]
    assert main(["privacy", "calibrate", "--target-epsilon", "2", *args]) == 0
    out = capsys.readouterr().out
    sigma = float(re.search(r"noise_multiplier = ([0-9.e+-]+)", out).group(1))
    expected = accounting.noise_multiplier_for(target_epsilon=2, delta=1e-5, sample_rate=0.02, steps=500)
    assert sigma == pytest.approx(expected, rel=1e-5)
    assert "delta = 1e-05" in out and "T = 500" in out


@pytest.mark.parametrize("command", [["epsilon", "--noise-multiplier", "1"], ["calibrate", "--target-epsilon", "2"]])
def test_the_default_delta_is_printed_rounded_up(capsys, command):
    """N = 81110: delta = 1/(10 N) = 1.23290e-6, printed to nearest as 1.23e-06, a smaller delta than the eps is at."""
    args = ["--dataset-size", "81110", "--batch-size", "100", "--epochs", "1"]
    assert main(["privacy", *command, *args]) == 0
    out = capsys.readouterr().out
    assert "at delta = 1.24e-06" in out and "1.23e-06" not in out


def test_high_budget_calibration_says_which_accountant_certified_it(capsys):
    assert main(["privacy", "calibrate", "--target-epsilon", "1e12", "--sample-rate", "0.01", "--steps", "1000",
                 "--delta", "1e-5"]) == 0
    out = capsys.readouterr().out
    assert "[rdp:" in out and "PLD cannot resolve" in out and _eps(out) <= 1e12


@pytest.mark.parametrize("argv, words", [
    (["epsilon", "--noise-multiplier", "1", "--steps", "3", "--delta", "1e-5"], "--sample-rate"),
    (["epsilon", "--noise-multiplier", "1", "--sample-rate", "2", "--steps", "3", "--delta", "1e-5"],
     "--sample-rate"),
    (["epsilon", "--noise-multiplier", "1", "--sample-rate", "0.1", "--steps", "3"], "--delta"),
    (["calibrate", "--target-epsilon", "-1", "--sample-rate", "0.1", "--steps", "3", "--delta", "1e-5"],
     "--target-epsilon"),
    (["epsilon", "--noise-multiplier", "1", "--sample-rate", "0.1", "--steps", "3", "--delta", "1e-5",
      "--noise", "laplace", "--accountant", "rdp"],
     "--accountant rdp does not analyse laplace noise; it handles gaussian. For laplace noise use 'pld' or 'pure'"),
    # two schedules at once: neither is silently dropped
    (["epsilon", "--noise-multiplier", "1", "--dataset-size", "100", "--batch-size", "10", "--epochs", "1",
      "--steps", "50", "--delta", "1e-5"], "give either --sample-rate and --steps, or --dataset-size, --batch-size"),
    (["epsilon", "--noise-multiplier", "1", "--dataset-size", "100", "--batch-size", "10", "--epochs", "1",
      "--sample-rate", "0.5", "--delta", "1e-5"], "give either --sample-rate and --steps, or --dataset-size"),
    (["epsilon", "--noise-multiplier", "1", "--dataset-size", "100", "--batch-size", "10", "--delta", "1e-5"],
     "with --dataset-size and --batch-size, give --epochs (or --steps)"),
    (["risk", "--noise-multiplier", "1", "--sample-rate", "0.01", "--steps", "10"],
     "give --kappa (or --dataset-size, for the uniform prior kappa = 1/N)"),
    # kappa = 1/N = 1 was refused as "kappa must be in (0, 1)", a library argument no user typed
    (["risk", "--noise-multiplier", "1", "--sample-rate", "0.5", "--steps", "10", "--dataset-size", "1"],
     "--dataset-size 1 gives the uniform prior kappa = 1/N = 1, where a guess always succeeds; give --dataset-size "
     "of at least 2, or --kappa"),
    (["risk", "--noise-multiplier", "1", "--dataset-size", "1", "--batch-size", "1", "--epochs", "1"],
     "give --dataset-size of at least 2, or --kappa"),
    # a delta judged against the N given beside --sample-rate, as with --batch-size
    (["epsilon", "--noise-multiplier", "1", "--sample-rate", "0.1", "--steps", "10", "--dataset-size", "40",
      "--delta", "0.5"], "--delta 0.5 is at or above 1/N = 1/40"),
    # the boundaries of the flag checks: one image more than the dataset, an eps budget of 0, any negative noise
    (["epsilon", "--noise-multiplier", "1", "--dataset-size", "100", "--batch-size", "101", "--epochs", "1"],
     "--batch-size 101 exceeds --dataset-size 100; lower --batch-size"),
    (["calibrate", "--target-epsilon", "0", "--sample-rate", "0.1", "--steps", "3", "--delta", "1e-5"],
     "--target-epsilon must be > 0 (the eps budget of the whole run), got 0"),
    (["epsilon", "--noise-multiplier", "-0.5", "--sample-rate", "0.1", "--steps", "3", "--delta", "1e-5"],
     "--noise-multiplier must be >= 0, got -0.5\n"),
])
def test_bad_arguments_end_in_one_clear_line(capsys, argv, words):
    assert main(["privacy", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dpmed: error:") and words in err and "Traceback" not in err


SCHEDULE = ["--steps", "10", "--sample-rate", "0.01"]


@pytest.mark.parametrize("argv, flag", [
    (["epsilon", "--noise-multiplier", "1", *SCHEDULE, "--delta", "1e-400"], "--delta"),
    (["calibrate", "--target-epsilon", "1", *SCHEDULE, "--delta", "1e-400"], "--delta"),
    (["epsilon", "--noise-multiplier", "1", "--steps", "10", "--sample-rate", "1e-400", "--delta", "1e-5"],
     "--sample-rate"),
    (["epsilon", "--noise-multiplier", "1e-400", *SCHEDULE, "--delta", "1e-5"], "--noise-multiplier"),
    (["calibrate", "--target-epsilon", "1e-400", *SCHEDULE, "--delta", "1e-5"], "--target-epsilon"),
    (["risk", "--noise-multiplier", "1", *SCHEDULE, "--kappa", "1e-400"], "--kappa"),
])
def test_a_value_that_underflows_to_zero_is_said_to_underflow(capsys, argv, flag):
    """Before: --delta 1e-400 was refused as "--delta must be in (0, 1), got 0", a value the user never typed, and
    --noise-multiplier 1e-400 was silently computed as no noise at all."""
    with pytest.raises(SystemExit) as exit_:
        main(["privacy", *argv])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert (f"error: argument {flag}: 1e-400 underflows to 0 in floating point (the smallest positive double is "
            "about 5e-324); give 5e-324 or more") in err, err
    assert "got 0" not in err and "Traceback" not in err


@pytest.mark.parametrize("argv, flag", [
    (["epsilon", "--noise-multiplier", "1e400", *SCHEDULE, "--delta", "1e-5"], "--noise-multiplier"),
    (["calibrate", "--target-epsilon", "1e999", *SCHEDULE, "--delta", "1e-5"], "--target-epsilon"),
])
def test_a_value_that_overflows_is_said_to_overflow(capsys, argv, flag):
    """Before: --noise-multiplier 1e400 was refused as "must be a finite number, got inf"."""
    with pytest.raises(SystemExit) as exit_:
        main(["privacy", *argv])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"error: argument {flag}: {argv[argv.index(flag) + 1]} overflows to infinity in floating point" in err, err
    assert "got inf" not in err and "Traceback" not in err


def test_a_zero_or_an_infinity_as_written_is_not_said_to_underflow_or_overflow(capsys):
    """0e-400 and 0E5 are zeros as written (a noise multiplier of 0 is no noise, which epsilon answers), and inf in
    any case is the infinity written: neither underflowed or overflowed, so neither is said to. A word that is no
    number keeps argparse's own words for it."""
    def epsilon(noise: str) -> tuple[int, str]:
        code = main(["privacy", "epsilon", "--noise-multiplier", noise, *SCHEDULE, "--delta", "1e-5"])
        out = capsys.readouterr()
        return code, out.out + out.err

    zero = epsilon("0")
    assert zero[0] == 0 and "adds no noise" in zero[1]
    assert epsilon("0e-400") == epsilon("0E5") == zero
    for infinity in ("inf", "INF", "Infinity"):
        code, said = epsilon(infinity)
        assert code == 2 and "--noise-multiplier must be a finite number, got inf" in said and "overflow" not in said
    with pytest.raises(SystemExit):
        epsilon("abc")
    assert "error: argument --noise-multiplier: invalid float value: 'abc'" in capsys.readouterr().err


def test_risk_offers_no_noise_choice_and_no_flag_is_read_as_another_by_its_prefix(capsys):
    """The reconstruction bounds hold for Gaussian noise only: risk offered --noise and then refused laplace; and
    argparse's prefix matching read --noise as --noise-multiplier on a command without --noise."""
    with pytest.raises(SystemExit) as exit_:
        main(["privacy", "risk", "--help"])
    assert exit_.value.code == 0 and "--noise " not in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        main(["privacy", "risk", "--noise-multiplier", "1", "--sample-rate", "0.1", "--steps", "3", "--kappa", "0.01",
              "--noise", "laplace"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "dpmed: error: unrecognized arguments: --noise laplace" in err and "Traceback" not in err


def test_a_noise_that_one_unit_outruns_is_said_to_make_a_run_not_dp(capsys):
    """Calibrated for eps 1e9, sigma is far below what numpy's bounded sampler can hide one unit's gradient in
    (`accounting.truncation`): the command says a dpmed run there is not DP; at eps 8 it says nothing of it."""
    argv = ["--sample-rate", "0.05", "--steps", "500", "--delta", "1e-5"]
    assert main(["privacy", "calibrate", "--target-epsilon", "1e9", "--accountant", "rdp", *argv]) == 0
    assert "note: a dpmed run at this sigma is NOT DP as run" in capsys.readouterr().out
    assert main(["privacy", "epsilon", "--noise-multiplier", "0.15", "--accountant", "rdp", *argv]) == 0
    out = capsys.readouterr().out
    assert "note: a dpmed run's card adds" in out and "to delta for its noise sampler's bounded draws" in out
    assert main(["privacy", "calibrate", "--target-epsilon", "8", *argv]) == 0
    assert "sampler" not in capsys.readouterr().out


def test_a_run_is_said_not_to_be_dp_exactly_where_the_sampler_s_share_passes_delta(capsys):
    """The share the bounded draws cost is added to delta while it stays below it, and voids the claim above it: at
    one sigma whose share lies between 1e-5 and 1e-4, the note turns with the --delta given."""
    from dpmed.randomness import DRAW_BOUND

    paid = accounting.bounded_noise_delta(noise="gaussian", noise_multiplier=0.13, sample_rate=0.05, steps=500,
                                          bound=DRAW_BOUND["gaussian"])
    assert 1e-5 < paid < 1e-4
    setting = ["--noise-multiplier", "0.13", "--sample-rate", "0.05", "--steps", "500", "--accountant", "rdp"]
    assert main(["privacy", "epsilon", *setting, "--delta", "1e-5"]) == 0
    out = capsys.readouterr().out
    assert "NOT DP as run" in out and "to delta for its noise sampler" not in out
    assert main(["privacy", "epsilon", *setting, "--delta", "1e-4"]) == 0
    out = capsys.readouterr().out
    assert f"note: a dpmed run's card adds {paid:.2g} to delta" in out and "NOT DP" not in out


def test_the_pure_line_s_delta_of_0_is_qualified_by_the_sampler_s_share(capsys):
    """A Laplace run's card states the pure eps at delta = the bounded sampler's share (7.2e-16 here), not 0; the
    command printed "delta = 0" alone, its note waiting for a share of 1e-3 of the --delta the pure line ignores."""
    from dpmed.randomness import DRAW_BOUND

    paid = accounting.bounded_noise_delta(noise="laplace", noise_multiplier=2.0, sample_rate=0.1, steps=100,
                                          bound=DRAW_BOUND["laplace"])
    assert 0 < paid < 1e-3 * 1e-5
    setting = ["--noise-multiplier", "2", "--sample-rate", "0.1", "--steps", "100", "--delta", "1e-5",
               "--noise", "laplace"]
    assert main(["privacy", "epsilon", *setting, "--accountant", "all"]) == 0
    assert f"note: a dpmed run's card states the pure eps at delta = {paid:.2g}, not 0" in capsys.readouterr().out
    assert main(["privacy", "epsilon", *setting, "--accountant", "pld"]) == 0
    assert "sampler" not in capsys.readouterr().out
    assert main(["privacy", "calibrate", "--target-epsilon", "3", *setting[2:], "--accountant", "pure"]) == 0
    assert "note: a dpmed run's card states the pure eps at delta = " in capsys.readouterr().out


def test_the_parser_offers_the_accountants_and_noises_of_the_library():
    """The cli writes the choices out so as not to import dp_accounting; they must stay the library's."""
    import dpmed.cli

    assert dpmed.cli.PRIVACY_ACCOUNTANTS == accounting.ACCOUNTANTS
    assert dpmed.cli.PRIVACY_NOISES == accounting.NOISES


def test_commands_other_than_privacy_parse_without_dp_accounting():
    """`dpmed --help`, `status` and `report` paid a second for importing dp_accounting and scipy that they never use."""
    code = ("import sys; from dpmed.cli import _parser; _parser().parse_args(['status', 'x']); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dp_accounting', 'scipy', 'torch')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_privacy_commands_do_not_import_torch():
    """Planning a study should be instant: the accounting path imports no torch."""
    code = ("import sys; from dpmed.cli import main; main(['privacy', 'epsilon', '--noise-multiplier', '2', "
            "'--sample-rate', '0.01', '--steps', '10', '--delta', '1e-5']); print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip().endswith("False")


@pytest.mark.parametrize("argv, flag", [
    (["epsilon", "--noise-multiplier", "1", "--sample-rate", "0.01", "--steps", "10", "--delta", "2"], "--delta"),
    (["risk", "--noise-multiplier", "1", "--dataset-size", "100", "--batch-size", "200", "--epochs", "1"],
     "--batch-size"),
    (["calibrate", "--target-epsilon", "-1", "--sample-rate", "0.1", "--steps", "3", "--delta", "1e-5"],
     "--target-epsilon"),
    (["epsilon", "--noise-multiplier", "-1", "--sample-rate", "0.1", "--steps", "3", "--delta", "1e-5"],
     "--noise-multiplier"),
    (["epsilon", "--noise-multiplier", "1", "--sample-rate", "0", "--steps", "3", "--delta", "1e-5"],
     "--sample-rate"),
    (["risk", "--noise-multiplier", "1", "--sample-rate", "0.1", "--steps", "3", "--kappa", "2"], "--kappa"),
    (["epsilon", "--noise-multiplier", "1", "--sample-rate", "0.1", "--steps", "3", "--delta", "1e-5", "--noise",
      "laplace", "--accountant", "rdp"], "--accountant"),
    (["epsilon", "--noise-multiplier", "1", "--sample-rate", "0.1", "--steps", "3", "--delta", "1"], "--delta"),
    (["epsilon", "--noise-multiplier", "1", "--sample-rate", "0.1", "--steps", "0", "--delta", "1e-5"], "--steps"),
    (["epsilon", "--noise-multiplier", "1", "--dataset-size", "100", "--batch-size", "10", "--epochs", "0",
      "--delta", "1e-5"], "--epochs"),
    (["epsilon", "--noise-multiplier", "1", "--sample-rate", "0.01", "--steps", "100", "--epochs", "50",
      "--batch-size", "10", "--delta", "1e-5"], "--epochs and --batch-size"),   # were silently unused
])
def test_messages_speak_in_the_commands_own_flags(capsys, argv, flag):
    """Someone who typed --delta or --batch-size is told about --delta or --batch-size, never about the Python
    function default_delta(n_train) or the study key training.batch_size."""
    assert main(["privacy", *argv]) == 2
    err = capsys.readouterr().err
    assert flag in err, err
    assert not re.search(r"\b[a-z]+_[a-z_]+\b", err.replace("dp_accounting", "")), err   # no snake_case names
    assert "default_delta" not in err and "training." not in err


def test_known_harmless_rdp_warnings_do_not_reach_the_terminal():
    """dp_accounting logs "Negative Renyi divergence" (a -1e-16 rounding of zero) many times when calibrating small
    eps with RDP; the command shows its answer alone."""
    code = ("import sys; from dpmed.cli import main; sys.exit(main(['privacy', 'calibrate', '--target-epsilon', "
            "'0.01', '--sample-rate', '0.01', '--steps', '10', '--delta', '1e-5', '--accountant', 'rdp']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0 and "noise_multiplier =" in done.stdout
    assert done.stderr == "", done.stderr[:500]


@pytest.mark.parametrize("accountant", ["pld", "rdp"])
def test_a_noise_so_small_that_its_square_underflows_ends_in_the_command_s_line_alone(accountant):
    """At sigma 1e-300, sigma squared is 0 and dp_accounting's RDP divides by it: numpy's RuntimeWarning, with a
    line of dp_accounting's source, reached the terminal above the command's own refusal."""
    code = ("import sys; from dpmed.cli import main; sys.exit(main(['privacy', 'epsilon', '--noise-multiplier', "
            f"'1e-300', '--sample-rate', '1', '--steps', '1', '--delta', '1e-5', '--accountant', '{accountant}']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.startswith("dpmed: error: the eps of 1 step at"), done.stderr[:500]
    assert done.stderr.count("\n") == 1, done.stderr[:500]


def test_the_pure_accountant_needs_no_delta_and_is_refused_for_gaussian_noise_before_anything_else(capsys):
    """Before, --accountant pure asked for --delta although its bound has none, and with Gaussian noise asked for
    --delta before saying that pure does not apply at all."""
    assert main(["privacy", "epsilon", "--noise", "laplace", "--accountant", "pure", "--noise-multiplier", "1",
                 "--sample-rate", "0.01", "--steps", "100"]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert _eps(line) == pytest.approx(100 * math.log1p(0.01 * math.expm1(1.0)), rel=1e-5) and "delta = 0, " in line
    assert main(["privacy", "epsilon", "--accountant", "pure", "--noise-multiplier", "1", "--sample-rate", "0.01",
                 "--steps", "100"]) == 2
    assert capsys.readouterr().err.strip() == (
        "dpmed: error: --accountant pure does not analyse gaussian noise; it handles laplace. For gaussian noise use "
        "'pld' or 'rdp' or 'rdp-classic'")


def test_an_eps_beyond_the_accountants_reach_is_said_in_the_runs_own_terms(capsys):
    assert main(["privacy", "epsilon", "--noise-multiplier", "0.01", "--sample-rate", "0.5", "--steps", "100",
                 "--delta", "1e-5"]) == 2
    err = capsys.readouterr().err
    assert "the eps of 100 steps at --noise-multiplier 0.01, --sample-rate 0.5 at delta = 1e-05 lies above 500" in err
    assert "Event" not in err and "RDP estimate" in err
    assert ("lies above 500, the largest --accountant pld certifies (--accountant rdp has no such limit); an RDP "
            "estimate is eps ~ ") in err        # before: "above 500 (its limit; ...), the largest ... certifies"


@pytest.mark.parametrize("command", [["calibrate", "--target-epsilon", "1"], ["epsilon", "--noise-multiplier", "1"]])
@pytest.mark.parametrize("delta", ["0.9", "0.025"])
def test_a_delta_at_or_above_one_over_the_dataset_size_is_refused_as_dpmed_run_refuses_it(capsys, command, delta):
    """Before: calibrate at N = 40 and delta = 0.9 printed "noise_multiplier = 0.000173258 (eps = 0 <= target 1)",
    exit 0: noiseless training read as private."""
    assert main(["privacy", *command, "--dataset-size", "40", "--batch-size", "20", "--epochs", "1",
                 "--delta", delta]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"dpmed: error: --delta {delta} is at or above 1/N = 1/40 = 0.025") and err.count("\n") == 1
    assert "no eps means anything" in err and "Traceback" not in err
    assert main(["privacy", *command, "--dataset-size", "40", "--batch-size", "20", "--epochs", "1",
                 "--delta", "0.002"]) == 0


def test_without_the_dataset_size_a_large_delta_is_not_judged_against_an_unknown_n(capsys):
    assert main(["privacy", "epsilon", "--noise-multiplier", "1", "--sample-rate", "0.5", "--steps", "2",
                 "--delta", "0.9"]) == 0


@pytest.mark.parametrize("argv", [
    ["epsilon", "--noise-multiplier", "1e-200", "--sample-rate", "0.01", "--steps", "100", "--delta", "1e-5"],
    ["epsilon", "--noise-multiplier", "1e200", "--sample-rate", "0.01", "--steps", "100", "--delta", "1e-5"],
    ["epsilon", "--noise-multiplier", "1e200", "--sample-rate", "0.01", "--steps", "100", "--delta", "1e-5",
     "--accountant", "rdp"],
])
def test_values_whose_arithmetic_fails_in_dp_accounting_get_one_line_not_an_internal_error(capsys, argv):
    """Found by fuzzing: ZeroDivisionError and OverflowError from dp_accounting reached the user as internal
    errors."""
    assert main(["privacy", *argv]) == 2
    err = capsys.readouterr().err
    assert "its arithmetic fails at values this extreme" in err and err.count("\n") == 1, err


@pytest.mark.parametrize("noise", ["gaussian", "laplace"])
def test_calibrating_at_a_delta_that_already_covers_every_noise_says_why_in_one_line(capsys, noise):
    """q = 1e-6, T = 1: an example is drawn with chance 1e-6 < delta = 1e-5, so every noise gives eps 0. Laplace
    calibration then failed inside dp_accounting (a division by zero, told as 'arithmetic fails')."""
    assert main(["privacy", "calibrate", "--target-epsilon", "0.5", "--sample-rate", "1e-6", "--steps", "1",
                 "--delta", "1e-5", "--noise", noise]) == 2
    err = capsys.readouterr().err
    assert "delta = 1e-05 is at least the chance (1e-06) that an example is drawn into any of the 1 batches" in err
    assert "use a delta far below 1/N" in err and err.count("\n") == 1, err


def test_below_pld_s_delta_floor_epsilon_names_the_floor_and_calibrate_falls_back_to_rdp(capsys):
    """Before: epsilon said eps "lies above 500" (RDP: 2.6) and calibrate returned sigma = 766653, eps 0.0005 for a
    target of 1, silently."""
    setting = ["--sample-rate", "0.089", "--steps", "88", "--delta", "1e-15"]
    assert main(["privacy", "epsilon", "--noise-multiplier", "3", *setting]) == 2
    err = capsys.readouterr().err
    assert "--accountant pld cannot resolve delta = 1e-15 after 88 steps" in err and "above 500" not in err
    assert "use --accountant rdp" in err and err.count("\n") == 1
    assert main(["privacy", "calibrate", "--target-epsilon", "1", *setting]) == 0
    out = capsys.readouterr().out
    sigma = float(re.search(r"noise_multiplier = ([0-9.e+-]+)", out).group(1))
    assert "[rdp:" in out and "note: PLD cannot resolve delta below 1e-12 after 88 steps" in out
    assert sigma == pytest.approx(accounting.noise_multiplier_for(target_epsilon=1, delta=1e-15, sample_rate=0.089,
                                                                  steps=88, accountant="rdp"), rel=1e-5)
    assert 0.99 < _eps(out) <= 1


@pytest.mark.parametrize("kappa", ["1", "1.5", "0"])
def test_kappa_is_refused_at_one_by_the_flag_check_with_the_interval_accounting_uses(capsys, kappa):
    """The flag check said "(0, 1]" and let kappa = 1 through, where accounting then refused it under its own name
    "kappa" with "(0, 1)": the message contradicted itself and named no flag."""
    assert main(["privacy", "risk", "--noise-multiplier", "1", "--sample-rate", "0.1", "--steps", "3",
                 "--kappa", kappa]) == 2
    err = capsys.readouterr().err
    assert f"--kappa must be in (0, 1) (a prior probability of success), got {kappa}" in err, err
    assert "(0, 1]" not in err


def test_the_calculator_s_eps_is_six_figures_rounded_up(capsys):
    """Before: "eps = 4.5702" for 4.570200378885429 (to nearest), while dpmed plan said 4.571 (up)."""
    from dpmed import accounting

    args = ["--noise-multiplier", "1", "--sample-rate", "0.0256", "--steps", "800", "--delta", "1e-5"]
    assert main(["privacy", "epsilon", *args, "--accountant", "pld"]) == 0
    exact = accounting.dp_sgd_epsilon(noise_multiplier=1.0, sample_rate=0.0256, steps=800, delta=1e-5,
                                      accountant="pld")
    shown = _eps(capsys.readouterr().out.splitlines()[0])
    assert exact <= shown <= exact + 1e-5 * 10 ** math.floor(math.log10(exact))


@pytest.mark.parametrize("schedule, q, steps", [
    (["--dataset-size", "100", "--batch-size", "10", "--steps", "50"], 0.1, 50),       # --steps in place of epochs
    (["--dataset-size", "100", "--batch-size", "100", "--epochs", "3"], 1.0, 3),       # the whole set each step
    (["--sample-rate", "1", "--steps", "4"], 1.0, 4),
])
def test_each_schedule_is_accounted_as_given_up_to_q_one(capsys, schedule, q, steps):
    """A batch of the whole dataset (q = 1) is a valid schedule; --steps beside --dataset-size is the T accounted."""
    assert main(["privacy", "epsilon", "--noise-multiplier", "2", *schedule, "--delta", "1e-5",
                 "--accountant", "rdp"]) == 0
    out = capsys.readouterr().out
    assert f"q = {q:.6g} for T = {steps} steps" in out
    expected = accounting.dp_sgd_epsilon(noise_multiplier=2.0, sample_rate=q, steps=steps, delta=1e-5,
                                         accountant="rdp")
    assert expected <= _eps(out) <= expected * (1 + 1e-5)


def test_the_assumptions_name_the_noise_and_its_clipping(capsys):
    setting = ["--noise-multiplier", "1", "--sample-rate", "0.01", "--steps", "10", "--delta", "1e-5"]
    assert main(["privacy", "epsilon", *setting, "--accountant", "pld"]) == 0
    assert "(Gaussian noise N(0, (sigma C)^2), L2 clipping)" in capsys.readouterr().out
    assert main(["privacy", "epsilon", *setting, "--accountant", "pld", "--noise", "laplace"]) == 0
    out = capsys.readouterr().out
    assert "(Laplace noise b = sigma C1, L1 clipping)" in out and "Gaussian" not in out


def test_no_noise_is_said_to_make_a_run_not_dp_and_the_pure_bound_s_sampler_share_is_judged_against_no_delta(capsys):
    """sigma = 0: eps is infinite, and the note says a run is not DP because it adds no noise, not because of the
    sampler's bounded draws (it blamed them, with a "probability up to 1" of outrunning draws that are never made).
    The pure accountant has no delta; its sampler share is still reported against the usual 1e-5, not silently
    dropped."""
    assert main(["privacy", "epsilon", "--noise-multiplier", "0", "--sample-rate", "0.01", "--steps", "10",
                 "--delta", "1e-5", "--accountant", "rdp"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("eps = inf at delta = 1e-05")
    assert "note: --noise-multiplier 0 adds no noise: a run at it is not DP at any eps" in out
    assert "draws are bounded" not in out and "probability up to" not in out
    assert main(["privacy", "epsilon", "--noise", "laplace", "--accountant", "pure", "--noise-multiplier", "0.05",
                 "--sample-rate", "0.01", "--steps", "100"]) == 0
    assert "note: a dpmed run's card adds" in capsys.readouterr().out


def _shown_percent(out: str, label: str) -> float:
    return float(re.search(rf"{label} +([0-9.e+-]+)% ", out).group(1))


def _shown_as_bound(out: str, label: str, value: float) -> bool:
    """The line ``label`` shows ``value`` (a probability) as an upper bound: rounded up, to 4 decimals of a percent
    or 2 significant figures below 0.01 %."""
    shown, exact = _shown_percent(out, label), 100 * value
    return exact <= shown <= exact + (1e-4 if exact >= 0.01 else 0.1 * exact)


def test_risk_prints_the_library_s_bounds_at_the_prior_it_names(capsys):
    """Every printed value against `accounting.reconstruction_risk` at the stated kappa: 1/N by default, the given
    --kappa where both are given."""
    setting = ["--noise-multiplier", "0.8", "--sample-rate", "0.05", "--steps", "200"]
    for extra, kappa in ((["--dataset-size", "400"], 1 / 400), (["--dataset-size", "400", "--kappa", "0.1"], 0.1)):
        assert main(["privacy", "risk", *setting, *extra]) == 0
        out = capsys.readouterr().out
        risk = accounting.reconstruction_risk(noise_multiplier=0.8, sample_rate=0.05, steps=200, kappa=kappa)
        assert f"(prior kappa = {kappa:.4g})" in out
        assert "kappa = 1/N" not in out.split("assumptions:")[1]      # a given --kappa is no 1/N
        assert _shown_as_bound(out, "worst case", risk.worst_case)
        assert _shown_as_bound(out, r"relaxed \(sign unknown\)", risk.relaxed)
        assert risk.worst_case != pytest.approx(risk.relaxed, rel=1e-3)
        for fpr, tpr in risk.tpr_at_fpr.items():
            assert _shown_as_bound(out, f"TPR at FPR {re.escape(f'{fpr:<5.1%}')}", tpr), fpr


def test_risk_never_shows_a_bound_below_itself(capsys):
    """Rounded to nearest, one Gaussian step at sigma 1 and kappa 0.01 showed 9.2363 %, below the exact
    Phi(Phi^-1(0.01) + 1) = 9.23622 % (and PLD's 9.23634 %); and a bound of at least kappa = 1e-7 showed 0.0000 %."""
    from scipy.stats import norm

    assert main(["privacy", "risk", "--noise-multiplier", "1", "--sample-rate", "1", "--steps", "1",
                 "--kappa", "0.01"]) == 0
    assert _shown_percent(capsys.readouterr().out, "worst case") >= 100 * norm.cdf(norm.ppf(0.01) + 1)
    assert main(["privacy", "risk", "--noise-multiplier", "20", "--sample-rate", "0.001", "--steps", "100",
                 "--kappa", "1e-7"]) == 0
    out = capsys.readouterr().out
    assert "0.0000%" not in out and _shown_percent(out, "worst case") >= 1e-5


def test_risk_says_which_lines_are_not_bounds(capsys):
    """The heading reads "upper bounds"; the Edgeworth value is an approximation (it can fall below the exact power)
    and the GDP/CLT value a sanity value, and their lines say so, where a reader would otherwise take them as
    bounds."""
    assert main(["privacy", "risk", "--noise-multiplier", "1", "--sample-rate", "0.1", "--steps", "30",
                 "--kappa", "0.01"]) == 0
    lines = {line.split("%")[0].split("  ")[1]: line for line in capsys.readouterr().out.splitlines()
             if line.startswith("  ") and "%" in line}
    assert "an approximation, not a bound" in lines["worst case (Edgeworth)"]
    assert "sanity value only" in lines["GDP/CLT shortcut"]
    # where the Edgeworth line gives an exact limit, it is not called an approximation beside "exact limit"
    assert main(["privacy", "risk", "--noise-multiplier", "1e9", "--sample-rate", "0.1", "--steps", "30",
                 "--kappa", "0.01"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("  worst case (Edgeworth)"))
    assert "exact limit (pinned)" in line and "approximation" not in line, line


@pytest.mark.parametrize("command", [["epsilon", "--noise-multiplier", "1.2"], ["calibrate", "--target-epsilon", "2"]])
def test_the_unit_names_the_neighbours_and_leaves_the_number_as_it_is(capsys, command):
    """The neighbours said one training image whatever the study protected: a patient study's user could not state
    its unit. DP-SGD's accounting is the same for both units (a patient's images are clipped together), so --unit
    changes the words only, and the default stays the image."""
    setting = ["--dataset-size", "600", "--batch-size", "40", "--epochs", "5"]
    outs = {}
    for unit in ("image", "patient", None):
        assert main(["privacy", *command, *setting, *(["--unit", unit] if unit else [])]) == 0
        outs[unit] = capsys.readouterr().out
    assumed = outs["patient"].splitlines()[-1]
    assert assumed.startswith("assumes:") and f"neighbours: {accounting.NEIGHBOUR_PATIENT}" in assumed
    assert "training image" not in outs["patient"]
    assert f"neighbours: {accounting.NEIGHBOUR_DP_SGD}" in outs["image"] and outs[None] == outs["image"]
    first = {unit: outs[unit].splitlines()[0] for unit in ("image", "patient")}
    assert "add/remove one patient" in first["patient"] and "add/remove one image" in first["image"]  # beside its eps
    assert first["patient"].replace("one patient", "one image") == first["image"]        # the same sigma and eps


def test_with_the_patient_as_unit_the_dataset_size_counts_patients(capsys):
    """--dataset-size was "N training images" in the messages that read it; with --unit patient N counts patients."""
    assert main(["privacy", "epsilon", "--noise-multiplier", "1", "--sample-rate", "0.1", "--steps", "10",
                 "--dataset-size", "40", "--delta", "0.5", "--unit", "patient"]) == 2
    err = capsys.readouterr().err
    assert "the 40 training patients of --dataset-size" in err and "training image" not in err
    assert main(["privacy", "risk", "--noise-multiplier", "1", "--dataset-size", "400", "--batch-size", "20",
                 "--epochs", "2", "--unit", "patient"]) == 0
    out = capsys.readouterr().out
    assert "a uniform guess among N training patients" in out and "training image" not in out
    with pytest.raises(SystemExit):
        main(["privacy", "--help"])
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["privacy", "epsilon", "--help"])
    assert "N training images" not in capsys.readouterr().out


def test_the_eps_is_said_to_be_training_s_alone_without_the_released_count_a_study_adds(capsys):
    """A study's card states this eps plus its size_epsilon (the training set's size released as a DP count): the
    quickstart's card said 0.9995 where this command said 0.9795 for the same sigma, q and T, with nothing to tell
    the user why. calibrate says too what a study calibrates to."""
    from dpmed.config import Study
    from dpmed.privacy_commands import STUDY_SIZE_EPSILON

    assert STUDY_SIZE_EPSILON == Study.model_fields["size_epsilon"].default
    setting = ["--sample-rate", "0.09496", "--steps", "88", "--delta", "1e-5", "--unit", "patient"]
    assert main(["privacy", "epsilon", "--noise-multiplier", "3.614", *setting]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert _eps(lines[0]) + STUDY_SIZE_EPSILON == pytest.approx(0.9995, abs=1e-4)      # the quickstart card's eps
    notes = [line for line in lines if "size_epsilon" in line]
    assert notes == ["note: a dpmed study's card adds its size_epsilon (default 0.02) to this eps for the DP count "
                     "of the training set, so the card reads eps + 0.02"]
    assert main(["privacy", "calibrate", "--target-epsilon", "1", *setting]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if "size_epsilon" in line]
    assert len(notes) == 1 and notes[0].endswith("so the card reads eps + 0.02; a study at target_epsilon E "
                                                 "calibrates to E - 0.02")


def test_risk_says_that_a_study_s_card_scales_its_bounds_for_the_released_count(capsys):
    """The card's reconstruction bounds count the DP count of the training set too (e^size_epsilon, capped): the
    note says so, and what it says holds against the library's bounds with that count."""
    from dpmed.privacy_commands import STUDY_SIZE_EPSILON

    setting = dict(noise_multiplier=0.8, sample_rate=0.05, steps=200, kappa=1 / 400)
    assert main(["privacy", "risk", "--noise-multiplier", "0.8", "--sample-rate", "0.05", "--steps", "200",
                 "--dataset-size", "400"]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note:")]
    assert notes == ["note: a dpmed study's card multiplies each bound by e^size_epsilon (default 0.02: x1.0202), "
                     "capped at 100%, for the DP count of the training set released beside the model"]
    alone = accounting.reconstruction_risk(**setting)
    card = accounting.reconstruction_risk(**setting, size_epsilon=STUDY_SIZE_EPSILON)
    assert card.worst_case == pytest.approx(min(1.0, math.exp(STUDY_SIZE_EPSILON) * alone.worst_case))
    assert card.tpr_at_fpr[0.01] == pytest.approx(min(1.0, math.exp(STUDY_SIZE_EPSILON) * alone.tpr_at_fpr[0.01]))


def test_the_size_note_says_a_study_refuses_a_target_at_or_below_size_epsilon(capsys):
    """At --target-epsilon 0.01 the note said a study "calibrates to E - 0.02", a negative eps."""
    assert main(["privacy", "calibrate", "--target-epsilon", "0.01", "--sample-rate", "0.01", "--steps", "100",
                 "--delta", "1e-5"]) == 0
    out = capsys.readouterr().out
    assert "a study refuses target_epsilon 0.01" in out and "calibrates to E - " not in out
    # at the size_epsilon itself a study refuses the target too (nothing is left), just above it calibrates
    for target, said in (("0.02", "a study refuses target_epsilon 0.02"), ("0.021", "calibrates to E - 0.02")):
        assert main(["privacy", "calibrate", "--target-epsilon", target, "--sample-rate", "0.01", "--steps", "100",
                     "--delta", "1e-5"]) == 0
        assert said in capsys.readouterr().out


def test_with_every_unit_in_every_step_the_epsilons_are_the_gaussian_mechanism_s_by_hand(capsys):
    """q = 1: T steps at sigma are one Gaussian mechanism with mu = sqrt(T) / sigma, whose exact eps(delta) solves
    Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2) = delta (Balle & Wang 2018). PLD states it (rounded up); RDP's
    classic conversion is at least min over alpha of alpha mu^2/2 + log(1/delta)/(alpha - 1), taken at
    alpha - 1 = sqrt(2 log(1/delta)) / mu; the improved conversion lies between the two."""
    from scipy.optimize import brentq
    from scipy.stats import norm

    mu, delta = math.sqrt(4) / 2.0, 1e-5
    exact = brentq(lambda e: norm.cdf(-e / mu + mu / 2) - math.exp(e) * norm.cdf(-e / mu - mu / 2) - delta, 0, 100)
    classic = mu ** 2 / 2 + math.sqrt(2 * math.log(1 / delta)) * mu
    assert main(["privacy", "epsilon", "--noise-multiplier", "2", "--sample-rate", "1", "--steps", "4",
                 "--delta", "1e-5", "--accountant", "all"]) == 0
    pld, rdp, rdp_classic = (_eps(line) for line in capsys.readouterr().out.splitlines()[:3])
    assert exact <= pld <= exact * (1 + 1e-4)
    assert classic <= rdp_classic <= classic * (1 + 1e-3)
    assert pld < rdp < rdp_classic
