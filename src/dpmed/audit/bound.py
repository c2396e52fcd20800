"""Empirical privacy audit in one training run (Steinke, Nasr and Jagielski, "Privacy Auditing with One (1)
Training Run", NeurIPS 2023; arXiv:2305.08846).

Why: the accountant's eps is an *upper* bound that holds only if the code really does what the accountant assumes
(per-example clipping, noise on the sum, Poisson sampling, nothing else touching the private data). An audit gives
an empirical *lower* bound: if the lower bound ever exceeds the claimed eps, the implementation is not DP as claimed.
With DP switched off the audit must find a large eps, or it has no power to catch a bug.

The procedure (their Algorithm 1, black-box):

1. Draw m canaries; include each in the training set independently with probability 1/2
   (:func:`choose_canaries`). The inclusion bits S in {0, 1}^m are the secret the audit tries to recover.
2. Train once; score every canary from the final model only (:func:`canary_scores_from_logits`, or
   :func:`canary_scores` from probabilities: the log-likelihood of the canary's label; a memorised canary scores
   high).
3. Guess "included" for the ``k_positive`` highest scores and "excluded" for the ``k_negative`` lowest, abstain on
   the rest: r = k_positive + k_negative guesses, v of them correct.
4. For an (eps, delta)-DP algorithm the number of correct guesses W obeys (their main theorem, Sec. 3 for pure DP
   and its (eps, delta) extension; the p-value routine the paper prints):

       P[W >= v] <= P[Binomial(r, q) >= v] + 2 m delta * max_{i = 1..v} (1/i) P[v - i <= Binomial(r, q) < v],
       q = e^eps / (1 + e^eps)            (the accuracy of eps-DP randomised response).

   The right-hand side is a p-value for the null hypothesis "the algorithm is (eps, delta)-DP"; the reported lower
   bound is the largest eps that the observed v rejects at level 1 - confidence (bisection on eps, returning the
   end of the bracket that is still rejected, so rounding never inflates the bound). The delta term is the paper's
   exact one, not a delta = 0 approximation.

The guesses must not look at the inclusion bits: ties in the scores are broken by canary index (fixed before the
bits are drawn). The number of guesses (k_positive, k_negative) must be fixed before looking at the scores; choosing
the best of several after the fact needs a correction: :func:`audit_epsilon_lower_bound_over_grid` applies a
Bonferroni (union) bound over its grid, i.e. each grid point is tested at level (1 - confidence) / len(grid).

Pure numpy and scipy (no torch): scores in, numbers out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import special, stats

__all__ = [
    "AuditResult", "AUDIT_FRACTIONS", "choose_canaries", "canary_scores", "canary_scores_from_logits",
    "audit_p_value", "epsilon_lower_bound_from_counts", "audit_epsilon_lower_bound",
    "audit_epsilon_lower_bound_over_grid", "default_audit_grid",
]

METHOD = "one-run audit (Steinke, Nasr, Jagielski 2023), (eps, delta) tail bound"

# Shares of the m canaries guessed on each side by the default grid (see default_audit_grid).
AUDIT_FRACTIONS: tuple[float, ...] = (0.02, 0.05, 0.1, 0.2, 0.5)


@dataclass(frozen=True)
class AuditResult:
    """An empirical lower bound on eps: with probability >= ``confidence`` over the canaries' random inclusion,
    an algorithm that is (eps, delta)-DP for every eps >= ``epsilon_lower_bound`` would not have produced so many
    correct guesses. So a lower bound above the accountant's eps means the implementation is not DP as claimed.

    n_canaries: m (each included with probability 1/2). n_guesses: r = k_positive + k_negative. n_correct: v.
    method: the test, including any correction for choosing (k_positive, k_negative) from a grid.
    """

    epsilon_lower_bound: float
    n_canaries: int
    n_guesses: int
    n_correct: int
    confidence: float
    delta: float
    method: str
    k_positive: int = 0
    k_negative: int = 0


def choose_canaries(m: int, *, rng: np.random.Generator) -> np.ndarray:
    """Inclusion bits bool [m]: each canary independently in the training set with probability 1/2.

    Independence and the probability 1/2 are what the audit's tail bound assumes (Steinke et al. 2023, Sec. 3). The
    bits are the secret the audit's guesser tries to recover: a run draws them from its secret ``canaries`` stream
    (`dpmed.randomness`), never from the public seed.
    """
    m = _count("m", m, minimum=1)
    return rng.random(m) < 0.5


def canary_scores(predictions: np.ndarray, labels: np.ndarray, *, task_kind: str,
                  floor: float = 1e-12) -> np.ndarray:
    """Per-canary audit score float64 [m]: the log-likelihood the trained model gives each canary's own label.

    predictions: what :func:`dpmed.evaluation.predict` returns for the canaries (binary [m] = P(class 1),
    multiclass [m, K], multilabel [m, L]). labels: the canaries' (e.g. flipped) labels. A model that memorised an
    included canary gives its label a high likelihood; one that never saw it predicts what the rest of the data
    suggests. Probabilities are floored at ``floor`` before the log, so saturated predictions tie rather than give
    -inf; ties are broken by canary index in the audit.
    """
    p = np.clip(np.asarray(predictions, dtype=np.float64), floor, 1.0 - floor)
    y = np.asarray(labels)
    if len(p) != len(y):
        raise ValueError(f"predictions has {len(p)} rows for {len(y)} labels")
    if task_kind == "binary":
        return np.where(y.astype(np.int64) == 1, np.log(p), np.log1p(-p))
    if task_kind == "multiclass":
        return np.log(p[np.arange(len(y)), y.astype(np.int64)])
    if task_kind == "multilabel":
        return (y * np.log(p) + (1 - y) * np.log1p(-p)).sum(axis=1)
    raise ValueError(f"task_kind must be 'binary', 'multiclass' or 'multilabel', got {task_kind!r}")


def canary_scores_from_logits(logits: np.ndarray, labels: np.ndarray, *, task_kind: str) -> np.ndarray:
    """Per-canary audit score float64 [m] as :func:`canary_scores`, from the model's raw outputs [m, K] in float64.

    Preferred: probabilities in float32 saturate (a well-fitted canary's P rounds to 1), and saturated canaries tie,
    which costs the audit power; log-softmax (binary, multiclass) and log-sigmoid (multilabel) of the logits keep
    every margin apart."""
    z = np.asarray(logits, dtype=np.float64)
    y = np.asarray(labels)
    if z.ndim != 2 or len(z) != len(y):
        raise ValueError(f"logits must be [m, K] with one row per label, got {z.shape} for {len(y)} labels")
    if task_kind in ("binary", "multiclass"):
        # log p_y = -log(1 + sum_{j != y} e^(z_j - z_y)): log1p inside logaddexp keeps tiny losses (margin 40 gives
        # -4e-18) that log_softmax would round to 0
        rows, target = np.arange(len(y)), y.astype(np.int64)
        rel = z - z[rows, target][:, None]                                       # [m, K]
        rel[rows, target] = -np.inf
        return -np.logaddexp(0.0, special.logsumexp(rel, axis=1))
    if task_kind == "multilabel":
        return (y * -np.logaddexp(0.0, -z) + (1 - y) * -np.logaddexp(0.0, z)).sum(axis=1)
    raise ValueError(f"task_kind must be 'binary', 'multiclass' or 'multilabel', got {task_kind!r}")


def audit_p_value(*, n_canaries: int, n_guesses: int, n_correct: int, epsilon: float, delta: float) -> float:
    """P[at least ``n_correct`` of ``n_guesses`` guesses correct] under the null "(epsilon, delta)-DP": an upper
    bound on it from Steinke, Nasr and Jagielski (2023), the formula in the module docstring.

    The delta term 2 m delta * alpha makes a delta > 0 claim harder to reject; with delta = 0 this is the binomial
    tail of eps-randomised response, which is exact for that mechanism.
    """
    m = _count("n_canaries", n_canaries, minimum=1)
    r = _count("n_guesses", n_guesses, minimum=0)
    v = _count("n_correct", n_correct, minimum=0)
    if not v <= r <= m:
        raise ValueError(f"need n_correct <= n_guesses <= n_canaries, got {v}, {r}, {m}")
    if not epsilon >= 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon}")
    if not 0 <= delta <= 1:
        raise ValueError(f"delta must be in [0, 1], got {delta}")
    if v == 0:
        return 1.0
    q = float(special.expit(epsilon))                       # e^eps / (1 + e^eps)
    beta = float(stats.binom.sf(v - 1, r, q))               # P[Binomial(r, q) >= v]
    if delta == 0:
        return min(beta, 1.0)
    # P[v - i <= Binomial(r, q) < v] for i = 1..v as a running sum of point masses (a difference of two CDFs near 1
    # would cancel to rounding noise), then alpha = max_i of it / i, as in the paper's Appendix D.
    i = np.arange(1, v + 1)                                                      # [v]
    within = np.cumsum(stats.binom.pmf(v - i, r, q))                             # [v]
    alpha = float(np.max(within / i))
    return min(beta + alpha * delta * 2 * m, 1.0)


def epsilon_lower_bound_from_counts(*, n_canaries: int, n_guesses: int, n_correct: int, delta: float,
                                    confidence: float = 0.95, tolerance: float = 1e-6) -> float:
    """The largest eps (within ``tolerance``) whose (eps, delta)-DP claim the counts reject at level
    1 - ``confidence``; 0 when even eps = 0 is not rejected (e.g. guesses at chance).

    The p-value grows with eps (more correct guesses become plausible), so the rejected eps form an interval
    [0, eps*); bisection keeps its lower end inside that interval and returns it, never a value above eps*.
    """
    confidence = _confidence(confidence)
    level = 1.0 - confidence

    def rejected(eps: float) -> bool:
        return audit_p_value(n_canaries=n_canaries, n_guesses=n_guesses, n_correct=n_correct, epsilon=eps,
                             delta=delta) < level

    if not rejected(0.0):
        return 0.0
    lo, hi = 0.0, 1.0
    while rejected(hi):
        lo, hi = hi, 2.0 * hi
        if hi > 1e4:           # v = r = m with tiny level still has a finite bound; this only guards a bug
            raise RuntimeError("the audit bound did not converge below eps = 1e4")
    while hi - lo > tolerance:
        mid = 0.5 * (lo + hi)
        if rejected(mid):
            lo = mid
        else:
            hi = mid
    return lo


def audit_epsilon_lower_bound(scores: np.ndarray, included: np.ndarray, *, k_positive: int, k_negative: int,
                              delta: float, confidence: float = 0.95) -> AuditResult:
    """Steinke, Nasr and Jagielski's one-run audit with (k_positive, k_negative) fixed in advance.

    scores: float [m], higher = more likely included (e.g. :func:`canary_scores`). included: bool [m], the bits
    from :func:`choose_canaries`. Guesses "included" for the k_positive highest scores and "excluded" for the
    k_negative lowest, abstains otherwise; ties are broken by canary index, which cannot depend on the bits.

    The stated ``confidence`` holds only if k_positive and k_negative were chosen without looking at these scores;
    to pick them from several candidates use :func:`audit_epsilon_lower_bound_over_grid`.
    """
    scores, included = _scores_and_bits(scores, included)
    m = len(scores)
    k_pos = _count("k_positive", k_positive, minimum=0)
    k_neg = _count("k_negative", k_negative, minimum=0)
    if k_pos + k_neg > m:
        raise ValueError(f"k_positive + k_negative = {k_pos + k_neg} guesses exceed the {m} canaries")
    order = np.argsort(-scores, kind="stable")              # [m] highest score first, ties by index
    guessed_in, guessed_out = order[:k_pos], order[m - k_neg:]
    n_correct = int(included[guessed_in].sum() + (~included[guessed_out]).sum())
    eps = epsilon_lower_bound_from_counts(n_canaries=m, n_guesses=k_pos + k_neg, n_correct=n_correct,
                                          delta=delta, confidence=confidence)
    return AuditResult(epsilon_lower_bound=eps, n_canaries=m, n_guesses=k_pos + k_neg, n_correct=n_correct,
                       confidence=_confidence(confidence), delta=float(delta),
                       method=f"{METHOD}; k fixed in advance", k_positive=k_pos, k_negative=k_neg)


def default_audit_grid(m: int, fractions: Sequence[float] = AUDIT_FRACTIONS) -> list[tuple[int, int]]:
    """(k_positive, k_negative) pairs to try: for each share f, f m guesses on both sides, on the positive side
    only, and on the negative side only. One-sided guesses matter: an attack is often sure only on one side (a
    canary the model gets badly wrong was certainly not trained on, while a well-fitted one may just be easy).
    Duplicates and empty pairs are dropped; the grid depends on m only, never on the scores."""
    m = _count("m", m, minimum=1)
    grid: list[tuple[int, int]] = []
    for f in fractions:
        if not 0 < f <= 0.5:
            raise ValueError(f"fractions must be in (0, 0.5] (k on each side), got {f}")
        k = max(1, int(round(f * m)))
        for pair in ((k, min(k, m - k)), (k, 0), (0, k)):
            if pair not in grid and 0 < sum(pair) <= m:
                grid.append(pair)
    return grid


def audit_epsilon_lower_bound_over_grid(scores: np.ndarray, included: np.ndarray, *, delta: float,
                                        confidence: float = 0.95,
                                        grid: Sequence[tuple[int, int]] | None = None) -> AuditResult:
    """The best audit over a grid of (k_positive, k_negative), still valid at ``confidence``.

    Choosing k after seeing the scores would make the reported confidence a lie (the best of many tests rejects
    more often than each). This applies a Bonferroni (union) bound: every grid point is tested at level
    (1 - confidence) / len(grid), so the probability that *any* of them overstates eps is at most 1 - confidence.
    The grid (default :func:`default_audit_grid`) must itself not depend on the scores.
    """
    scores, included = _scores_and_bits(scores, included)
    confidence = _confidence(confidence)
    grid = list(default_audit_grid(len(scores)) if grid is None else grid)
    if not grid:
        raise ValueError("grid is empty; give at least one (k_positive, k_negative) pair")
    per_test = 1.0 - (1.0 - confidence) / len(grid)
    results = [audit_epsilon_lower_bound(scores, included, k_positive=kp, k_negative=kn, delta=delta,
                                         confidence=per_test) for kp, kn in grid]
    best = max(results, key=lambda res: res.epsilon_lower_bound)    # first of equals: the grid's order
    return AuditResult(epsilon_lower_bound=best.epsilon_lower_bound, n_canaries=best.n_canaries,
                       n_guesses=best.n_guesses, n_correct=best.n_correct, confidence=confidence, delta=best.delta,
                       method=f"{METHOD}; best of {len(grid)} (k_positive, k_negative) pairs, Bonferroni-corrected "
                              f"(each tested at confidence {per_test:.6g})",
                       k_positive=best.k_positive, k_negative=best.k_negative)


def _scores_and_bits(scores: np.ndarray, included: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(scores, dtype=np.float64)
    b = np.asarray(included)
    if s.ndim != 1 or b.shape != s.shape:
        raise ValueError(f"scores and included must both be [m], got shapes {s.shape} and {b.shape}")
    if b.dtype != np.bool_:
        raise TypeError(f"included must be bool (the inclusion bits of choose_canaries), got {b.dtype}")
    if not np.all(np.isfinite(s)):
        raise ValueError("scores must be finite (floor probabilities before taking logs; see canary_scores)")
    if len(s) == 0:
        raise ValueError("no canaries to audit")
    return s, b


def _count(name: str, value: int, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _confidence(confidence: float) -> float:
    if not 0 < confidence < 1 or math.isnan(confidence):
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    return float(confidence)
