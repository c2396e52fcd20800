"""Do dpmed's nominal 95 % intervals cover the truth 95 % of the time? A simulation with known true values.

    python benchmarks/interval_coverage.py [--reps 500] [--resamples 1000] [--only utility,fairness,seeds]
        [--interval percentile|bca]

Scores are drawn from two normal distributions, negatives N(0, 1) and positives N(d, 1), so every true value is
known in closed form: AUROC = Phi(d / sqrt 2); at a fixed threshold t, sensitivity = 1 - Phi(t - d), specificity =
Phi(t), accuracy = prevalence * sensitivity + (1 - prevalence) * specificity. Each repetition draws a fresh test set
and calls dpmed's own functions (:func:`dpmed.evaluation.utility.evaluate_utility`,
:func:`dpmed.evaluation.fairness.evaluate_fairness`) with their default 1000 seeded redraws and the interval
``--interval`` names (a study's ``evaluation.interval``; percentile by default); the threshold is forced to t through
a two-image validation set (Youden's J on [0 at t - 1, 1 at t] is t). A row's coverage is the share of repetitions
whose interval holds the true value; with R repetitions its Monte Carlo standard error is
sqrt(0.95 * 0.05 / R) (0.0097 at R = 500).

Fairness: a test set of 624 images in which a small group (20 or 40 images, "female") and the rest ("male") have
the same score distributions, so the true group AUROC and accuracy are those above and every true parity
difference, demographic parity spread and equalised-odds spread is 0.

Seeds: the across-seed summary of `dpmed.comparisons` (mean, std, min, max of the per-seed paired differences, and
the Student t interval of the mean with n - 1 degrees of freedom); the rows show how often the seeds' range, and mean
+- std, would hold the true mean difference if read as an interval, and how often dpmed's t interval
(:func:`dpmed.evaluation.paired.seed_summary`, called once per repetition) does, for normal seed noise.
"""

from __future__ import annotations

import argparse
import time
import warnings
from typing import Iterator

import numpy as np
from scipy.stats import norm

from dpmed.evaluation.fairness import evaluate_fairness
from dpmed.evaluation.paired import seed_summary
from dpmed.evaluation.utility import evaluate_utility

__all__ = ["utility_rows", "fairness_rows", "seed_rows", "main"]

D = 1.5             # separation of the two classes: true AUROC Phi(1.5 / sqrt 2) = 0.856
THRESHOLD = 0.75    # the fixed decision threshold


def _truth(prevalence: float) -> dict[str, float]:
    sens, spec = 1 - norm.cdf(THRESHOLD - D), norm.cdf(THRESHOLD)
    return {"auroc": float(norm.cdf(D / np.sqrt(2))), "sensitivity": float(sens), "specificity": float(spec),
            "accuracy": float(prevalence * sens + (1 - prevalence) * spec)}


def _draw(rng: np.random.Generator, n: int, prevalence: float) -> tuple[np.ndarray, np.ndarray]:
    y = (rng.random(n) < prevalence).astype(np.int64)
    return y, rng.normal(0.0, 1.0, n) + D * y


_VALIDATION = dict(val_labels=np.array([0, 1]), val_scores=np.array([THRESHOLD - 1.0, THRESHOLD]))


def _covered(truth: float, low, high) -> tuple[bool, bool]:
    """(covered, defined): an undefined interval (None / nan) counts as a miss and is counted apart."""
    if low is None or high is None or not (np.isfinite(low) and np.isfinite(high)):
        return False, False
    return bool(low <= truth <= high), True


def utility_rows(reps: int, resamples: int, interval: str, seed: int = 0) -> Iterator[tuple]:
    for n in (100, 624, 5000):
        for prevalence in (0.1, 0.38, 0.5):
            truth = _truth(prevalence)
            rng = np.random.default_rng([seed, n, int(prevalence * 100)])
            hits = {m: [0, 0] for m in truth}
            runs = reps if n < 5000 else max(1, reps // 8)       # 2 s a repetition at 5000: fewer
            for rep in range(runs):
                y, s = _draw(rng, n, prevalence)
                if y.min() == y.max():
                    continue
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    row = evaluate_utility(kind="binary", label_names=["neg", "pos"], test_labels=y, test_scores=s,
                                           n_resamples=resamples, seed=rep, interval=interval,
                                           **_VALIDATION)
                for m in truth:
                    ok, defined = _covered(truth[m], row[f"test_{m}_low"], row[f"test_{m}_high"])
                    hits[m][0] += ok
                    hits[m][1] += defined
            yield from [("utility", f"{n} ({runs} reps)", prevalence, m, truth[m], hits[m][0] / runs, runs - hits[m][1])
                     for m in truth]


def fairness_rows(reps: int, resamples: int, interval: str, seed: int = 0) -> Iterator[tuple]:
    n, prevalence = 624, 0.38
    truth = _truth(prevalence)
    for small in (20, 40):
        rng = np.random.default_rng([seed, small])
        sex = np.array(["female"] * small + ["male"] * (n - small))
        names = ("female AUROC", "female accuracy", "female accuracy parity difference",
                 "female demographic parity difference", "sex demographic parity spread",
                 "sex equalised-odds spread", "sex worst-group AUROC")
        true_values = (truth["auroc"], truth["accuracy"], 0.0, 0.0, 0.0, 0.0, truth["auroc"])
        hits = {m: [0, 0] for m in names}
        for rep in range(reps):
            y, s = _draw(rng, n, prevalence)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                f = evaluate_fairness(kind="binary", test_labels=y, test_scores=s, attributes={"sex": sex},
                                      n_resamples=resamples, seed=rep, interval=interval,
                                      **_VALIDATION).ok("sex")
            g = f.groups["female"]
            for m, est, value in zip(names, (g.auroc, g.accuracy, g.accuracy_parity_difference,
                                             g.demographic_parity_difference, f.demographic_parity_difference,
                                             f.equalized_odds_difference, f.worst_group_auroc), true_values):
                ok, defined = _covered(value, est.low, est.high)
                hits[m][0] += ok
                hits[m][1] += defined
        yield from [("fairness", f"{small} of {n}", prevalence, m, v, hits[m][0] / reps, reps - hits[m][1])
                 for m, v in zip(names, true_values)]


def seed_rows(reps: int, seed: int = 0) -> list[tuple]:
    """Paired AUROC differences over seeds: true mean -0.03, seed noise sd 0.01 (normal); the range and mean +- std
    vectorised, the t interval from dpmed's own seed_summary per repetition (its undefined count: repetitions
    without one)."""
    rng = np.random.default_rng([seed, 7])
    rows = []
    true_mean, sd = -0.03, 0.01
    reps = max(reps, 10000)         # closed form per repetition: cheap, so many
    for k in (3, 5, 10):
        x = true_mean + sd * rng.standard_normal((reps, k))
        mean, std = x.mean(axis=1), x.std(axis=1, ddof=1)
        summaries = [seed_summary(list(row)) for row in x]
        held = np.array([s.low is not None and s.low <= true_mean <= s.high for s in summaries])
        rows += [
            ("seeds", k, "-", "range of the seeds (min, max)", true_mean,
             float(((x.min(axis=1) <= true_mean) & (true_mean <= x.max(axis=1))).mean()), 0),
            ("seeds", k, "-", "mean +- std", true_mean, float((np.abs(mean - true_mean) <= std).mean()), 0),
            ("seeds", k, "-", "t interval, n - 1 df", true_mean, float(held.mean()),
             sum(s.low is None for s in summaries)),
        ]
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=500)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--only", default="utility,fairness,seeds")
    parser.add_argument("--interval", choices=("percentile", "bca"), default="percentile")
    args = parser.parse_args(argv)
    parts = set(args.only.split(","))
    start = time.perf_counter()
    margin = 1.96 * np.sqrt(0.95 * 0.05 / args.reps)
    print(f"{args.reps} repetitions, {args.resamples} redraws, {args.interval} intervals; Monte Carlo 95 % band "
          f"around 0.95: +-{margin:.3f}")
    print("| what | n | prevalence | quantity | true value | coverage | undefined intervals |")
    print("|---|---|---:|---|---:|---:|---:|")
    for part, rows in (("utility", lambda: utility_rows(args.reps, args.resamples, args.interval)),
                       ("fairness", lambda: fairness_rows(args.reps, args.resamples, args.interval)),
                       ("seeds", lambda: seed_rows(args.reps))):
        if part not in parts:
            continue
        for what, n, prevalence, name, truth, coverage, undefined in rows():
            print(f"| {what} | {n} | {prevalence} | {name} | {truth:.3f} | {coverage:.3f} | {undefined} |", flush=True)
    print(f"({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
