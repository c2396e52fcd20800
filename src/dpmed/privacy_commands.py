"""`dpmed privacy epsilon|calibrate|risk`: planning a DP-SGD run's privacy without training (imports no torch).

The numbers come from `dpmed.accounting`; `dpmed.cli` declares the flags, and this module checks each where it
enters and speaks of flags in its messages, not of the library's argument names (a user who typed --batch-size is not
told to lower ``training.batch_size``). The cli imports it only when a privacy command runs: dp_accounting and scipy
take about a second to import, which every other command (`dpmed --help`, `dpmed status`) would pay.
"""

from __future__ import annotations

import argparse
import math
import re

from dpmed import accounting
from dpmed.errors import DpmedError
from dpmed.mechanisms.base import refuse_vacuous_delta
from dpmed.numbers import delta_text, number_text, round_up, up_to_figures

__all__ = ["privacy_command"]

# `Study.size_epsilon`'s default, written out: importing dpmed.config for it would add 0.4 s to every privacy command
# (tests/test_cli_privacy.py holds them equal)
STUDY_SIZE_EPSILON = 0.02


def _schedule(args: argparse.Namespace) -> tuple[float, int, int | None]:
    """(q, T, N or None) from --sample-rate/--steps, or from --dataset-size/--batch-size/--epochs as studies do."""
    if args.dataset_size is not None and args.batch_size is not None:
        if args.sample_rate is not None or (args.steps is not None and args.epochs is not None):
            raise DpmedError("give either --sample-rate and --steps, or --dataset-size, --batch-size and --epochs")
        if args.epochs is None and args.steps is None:
            raise DpmedError("with --dataset-size and --batch-size, give --epochs (or --steps)")
        if args.batch_size > args.dataset_size:
            raise DpmedError(f"--batch-size {args.batch_size} exceeds --dataset-size {args.dataset_size}; lower "
                             "--batch-size")
        q, steps = accounting.dp_sgd_schedule(args.dataset_size, batch_size=args.batch_size, epochs=args.epochs or 1)
        return q, (args.steps if args.epochs is None else steps), args.dataset_size
    if args.sample_rate is None or args.steps is None:
        raise DpmedError("give --sample-rate and --steps (or --dataset-size, --batch-size and --epochs)")
    if args.epochs is not None or args.batch_size is not None:    # they would be silently unused
        given = " and ".join(f for f, v in (("--epochs", args.epochs), ("--batch-size", args.batch_size)) if v)
        raise DpmedError(f"{given} cannot be used with --sample-rate and --steps, which set q and T themselves; "
                         "give either --sample-rate and --steps, or --dataset-size, --batch-size and --epochs")
    return args.sample_rate, args.steps, args.dataset_size


def _delta(args: argparse.Namespace, n: int | None) -> float:
    """--delta, else the default for --dataset-size. The pure accountant's bound has delta 0: it needs none (any valid
    value is passed on and not used)."""
    if args.delta is None and n is None and args.accountant == "pure":
        return 1e-5
    if args.delta is not None:
        if n is not None:   # as `dpmed run` refuses it; with --sample-rate alone N is not known here
            whole = "each training image" if args.unit == "image" else "each training patient's images"
            refuse_vacuous_delta("--delta", args.delta, n, counted=f"the {n} training {args.unit}s of --dataset-size",
                                 whole=f"publishing {whole} whole")
        return args.delta
    if n is None:
        raise DpmedError("give --delta (or --dataset-size, for the default min(1e-5, 1/(10 N)))")
    return accounting.default_delta(n)


def _check_flags(args: argparse.Namespace) -> None:
    """Each number where it enters, in the command's own words (the library's checks speak of its arguments)."""
    def finite(flag: str, value: float) -> None:
        if not math.isfinite(value):
            raise DpmedError(f"{flag} must be a finite number, got {value:g}")

    accountant = getattr(args, "accountant", "all")
    if accountant != "all":   # before anything else is asked for: the library's check of accountant and noise
        accounting.effective_accountant(accountant, target_epsilon=None, noise=args.noise)
    value = getattr(args, "noise_multiplier", None)
    if value is not None:
        finite("--noise-multiplier", value)
        if value < 0:
            raise DpmedError(f"--noise-multiplier must be >= 0, got {value:g}")
    value = getattr(args, "target_epsilon", None)
    if value is not None:
        finite("--target-epsilon", value)
        if value <= 0:
            raise DpmedError(f"--target-epsilon must be > 0 (the eps budget of the whole run), got {value:g}")
    if args.sample_rate is not None:
        finite("--sample-rate", args.sample_rate)
        if not 0 < args.sample_rate <= 1:
            raise DpmedError(f"--sample-rate must be in (0, 1] (the Poisson rate q = batch / N), got "
                             f"{args.sample_rate:g}")
    for flag, name in (("--steps", "steps"), ("--dataset-size", "dataset_size"), ("--batch-size", "batch_size"),
                       ("--epochs", "epochs")):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise DpmedError(f"{flag} must be at least 1, got {value}")
    value = getattr(args, "delta", None)
    if value is not None:
        finite("--delta", value)
        if not 0 < value < 1:
            raise DpmedError(f"--delta must be in (0, 1), got {value:g}; leave it out and give --dataset-size N for "
                             "the usual min(1e-5, 1/(10 N))")
    value = getattr(args, "kappa", None)
    if value is not None:
        finite("--kappa", value)
        if not 0 < value < 1:         # at kappa = 1 a guess always succeeds, and accounting refuses it
            raise DpmedError(f"--kappa must be in (0, 1) (a prior probability of success), got {value:g}")


# The library's names for what these commands take as flags: a message that reaches the user still speaks of flags.
_FLAG_NAMES = [
    (r"default_delta\(n_train\)", "--dataset-size N (delta = min(1e-5, 1/(10 N)))"),
    (r"training\.batch_size", "--batch-size"), (r"\bn_train\b", "--dataset-size"),
    (r"\btarget_epsilon\b", "--target-epsilon"), (r"\bnoise_multiplier\b", "--noise-multiplier"),
    (r"\bsample_rate\b", "--sample-rate"), (r"\bbatch_size\b", "--batch-size"),
    (r"accountant\s*=\s*'([a-z-]+)'", r"--accountant \1"), (r"accountant '([a-z-]+)'", r"--accountant \1"),
]


def _in_flags(message: str) -> str:
    for pattern, flag in _FLAG_NAMES:
        message = re.sub(pattern, flag, message)
    return message


def privacy_command(args: argparse.Namespace) -> int:
    try:
        _check_flags(args)
        return _PRIVACY[args.privacy_command](args)
    except (ValueError, DpmedError) as exc:  # accounting checks its arguments and explains: in the flags' words
        raise DpmedError(_in_flags(str(exc))) from None
    except ArithmeticError as exc:   # beyond what accounting already words: values this extreme overflow elsewhere
        raise DpmedError(f"these values are too extreme to compute with ({type(exc).__name__}: {exc}); "
                         "check the flags") from None


def _assumptions(args: argparse.Namespace, q: float, steps: int, sigma: float) -> str:
    """The setting the eps holds for, its unit included: DP-SGD's accounting is the same whether one image or one
    patient with all of their images is the unit (each sampled patient's gradients are clipped together), so --unit
    changes only which record the eps protects, and a patient study's user can say so."""
    noise = ("Laplace noise b = sigma C1, L1 clipping" if args.noise == "laplace"
             else "Gaussian noise N(0, (sigma C)^2), L2 clipping")
    neighbours = accounting.NEIGHBOUR_PATIENT if args.unit == "patient" else accounting.NEIGHBOUR_DP_SGD
    return (f"assumes: Poisson sampling at q = {q:.6g} for T = {steps} steps, noise multiplier sigma = {sigma:.6g} "
            f"({noise}); neighbours: {neighbours}")


def _size_note(calibrating: bool, target: float | None = None) -> str:
    """Why a dpmed study's card states more than this eps: the study releases its training set's size as a DP count
    (`dpmed.released_size`) and adds that count's size_epsilon to each DP-SGD run's eps, which this calculator, given
    q and T, does not. Without the note the card's 0.9995 and this command's 0.9795 for one sigma, q and T look like
    two accountings of one run."""
    then = f"; a study at target_epsilon E calibrates to E - {STUDY_SIZE_EPSILON:g}" if calibrating else ""
    if calibrating and target is not None and target <= STUDY_SIZE_EPSILON:
        then = (f"; a study refuses target_epsilon {target:g}, which leaves nothing for training once the "
                f"{STUDY_SIZE_EPSILON:g} is spent (or lower the study's size_epsilon)")
    return (f"note: a dpmed study's card adds its size_epsilon (default {STUDY_SIZE_EPSILON:g}) to this eps for the "
            f"DP count of the training set, so the card reads eps + {STUDY_SIZE_EPSILON:g}{then}")


def _sampler_note(args: argparse.Namespace, q: float, steps: int, sigma: float, delta: float,
                  pure: bool = False) -> str | None:
    """What dpmed's noise sampler, whose draws are bounded, does to this setting's claim (`accounting.truncation`):
    nothing visible at the noise of eps up to several hundred; a share of delta; or the whole claim. ``pure``: a
    pure line was printed at delta = 0, which any share at all qualifies (a run's card states the share there)."""
    from dpmed.randomness import DRAW_BOUND, DRAW_BOUNDS    # numpy's samplers, not accounting's

    if not sigma > 0:    # no noise at all: eps is infinite whatever the sampler draws, and the eps line says so
        return ("note: --noise-multiplier 0 adds no noise: a run at it is not DP at any eps, whatever the noise "
                "sampler")
    paid = accounting.bounded_noise_delta(noise=args.noise, noise_multiplier=sigma, sample_rate=q, steps=steps,
                                          bound=DRAW_BOUND[args.noise])
    if paid > delta:
        return (f"note: a dpmed run at this sigma is NOT DP as run: its noise sampler's draws are bounded "
                f"({DRAW_BOUNDS[args.noise]}), and one unit's clipped gradient can move a coordinate past every draw "
                f"(probability up to {paid:.2g} over the run, above delta); the eps above is for exact noise")
    if paid >= 1e-3 * delta:
        return f"note: a dpmed run's card adds {paid:.2g} to delta for its noise sampler's bounded draws"
    if pure and paid > 0:
        return (f"note: a dpmed run's card states the pure eps at delta = {paid:.2g}, not 0, for its noise sampler's "
                "bounded draws")
    return None


def _privacy_epsilon(args: argparse.Namespace) -> int:
    q, steps, n = _schedule(args)
    delta = _delta(args, n)
    names = ([a for a in accounting.ACCOUNTANTS if args.noise in accounting.accountant_info(a).noises]
             if args.accountant == "all" else [args.accountant])
    pure = False
    for name in names:
        try:
            eps = accounting.dp_sgd_epsilon(noise_multiplier=args.noise_multiplier, sample_rate=q, steps=steps,
                                            delta=delta, accountant=name, noise=args.noise)
        except ValueError as exc:
            if len(names) == 1:
                raise
            # with all accountants, one that cannot certify this setting (PLD above eps 500) is said, not fatal
            print(f"eps: none certified  [{name}: {exc}]")
            continue
        shown = "0" if name == "pure" else delta_text(delta)     # a pure-DP bound: delta plays no role in it
        pure = pure or name == "pure"
        print(f"eps = {up_to_figures(eps, 6):.6g} at delta = {shown}, add/remove one {args.unit}  [{name}: "
              f"{accounting.describe_accountant(name)}]")
    note = _sampler_note(args, q, steps, args.noise_multiplier, delta, pure=pure)
    if note:
        print(note)
    print(_size_note(calibrating=False))
    print(_assumptions(args, q, steps, args.noise_multiplier))
    return 0


def _privacy_calibrate(args: argparse.Namespace) -> int:
    q, steps, n = _schedule(args)
    delta = _delta(args, n)
    name, note = accounting.effective_accountant(args.accountant, target_epsilon=args.target_epsilon,
                                                 noise=args.noise, delta=delta, steps=steps)
    sigma = accounting.noise_multiplier_for(target_epsilon=args.target_epsilon, delta=delta, sample_rate=q,
                                            steps=steps, accountant=name, noise=args.noise)
    eps = accounting.dp_sgd_epsilon(noise_multiplier=sigma, sample_rate=q, steps=steps, delta=delta,
                                    accountant=name, noise=args.noise)
    shown = "0" if name == "pure" else delta_text(delta)
    print(f"noise_multiplier = {sigma:.6g}  (eps = {up_to_figures(eps, 6):.6g} <= target "
          f"{args.target_epsilon:g} at delta = {shown}, add/remove one {args.unit}) [{name}: "
          f"{accounting.describe_accountant(name)}]")
    if note:
        print(f"note: {note}")
    sampler = _sampler_note(args, q, steps, sigma, delta, pure=name == "pure")
    if sampler:
        print(sampler)
    print(_size_note(calibrating=True, target=args.target_epsilon))
    print(_assumptions(args, q, steps, sigma))
    return 0


def _privacy_risk(args: argparse.Namespace) -> int:
    q, steps, n = _schedule(args)
    kappa = args.kappa
    if kappa is None:
        if n is None:
            raise DpmedError("give --kappa (or --dataset-size, for the uniform prior kappa = 1/N)")
        if n < 2:     # kappa = 1/N = 1: a guess always succeeds, and nothing is left to bound
            raise DpmedError(f"--dataset-size {n} gives the uniform prior kappa = 1/N = 1, where a guess always "
                             "succeeds; give --dataset-size of at least 2, or --kappa")
        kappa = 1.0 / n
    risk = accounting.reconstruction_risk(noise_multiplier=args.noise_multiplier, sample_rate=q, steps=steps,
                                          kappa=kappa, unit=args.unit)
    print(f"reconstruction success, upper bounds (prior kappa = {kappa:.4g}), and how each was obtained:")
    print(f"  worst case                {_bound(risk.worst_case)}   {risk.worst_case_via}")
    edgeworth = ("" if risk.worst_case_edgeworth_via.startswith("exact") else "an approximation, not a bound; ")
    print(f"  worst case (Edgeworth)    {_bound(risk.worst_case_edgeworth)}   {edgeworth}cross-check of the line "
          f"above: {risk.worst_case_edgeworth_via}")
    print(f"  relaxed (sign unknown)    {_bound(risk.relaxed)}   {risk.relaxed_via}")
    print(f"  GDP/CLT shortcut          {_bound(risk.gdp)}   sanity value only: {risk.gdp_via}")
    print("membership inference, best possible attack:")
    for fpr, tpr in risk.tpr_at_fpr.items():
        print(f"  TPR at FPR {fpr:<5.1%}          {_bound(tpr)}   {risk.tpr_at_fpr_via[fpr]}")
    # as _size_note says for eps: a study's card also counts the DP count of its training set released beside
    # the model (`accounting.reconstruction_risk`'s size_epsilon)
    print(f"note: a dpmed study's card multiplies each bound by e^size_epsilon (default {STUDY_SIZE_EPSILON:g}: "
          f"x{math.exp(STUDY_SIZE_EPSILON):.4f}), capped at 100%, for the DP count of the training set released "
          "beside the model")
    print(f"assumptions: {risk.assumptions}")
    return 0


def _bound(probability: float) -> str:
    """An upper bound on a probability as a percentage, 9 wide, rounded up as the report rounds its bounds: to 4
    decimals, or to 2 significant figures below 0.01 % (where 4 decimals would show a bound of at least kappa as
    0.0000%)."""
    percent = 100 * probability
    text = (f"{round_up(percent * 1e4) / 1e4:.4f}" if percent >= 0.01 or percent == 0
            else number_text(percent, 2, up=True))
    return f"{text + '%':>9}"


_PRIVACY = {"epsilon": _privacy_epsilon, "calibrate": _privacy_calibrate, "risk": _privacy_risk}
