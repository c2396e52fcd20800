"""The one-run audit as a run performs it: canaries into the training set before training, the bound after.

Before training (:func:`insert_canaries_for`): about m canary sources (one image of each patient drawn at rate m / the
public count of patients; where the image is the unit of privacy, every image of each patient drawn at rate m / the
public count of images) leave the training split with every image of their patients; each canary goes back in with
probability 1/2. Which patients and the canaries' wrong labels are public draws of the run's seed; the inclusion bits,
the secret the guesser tries to recover, come from the run's secret ``canaries`` stream (`dpmed.randomness`). Nothing
the guesser sees (not even the canary order) depends on the bits. After training (:func:`conclude`): each canary is
scored from the final model only (black box), and the scores and bits give the empirical lower bound
(`dpmed.audit.bound`). It depends on the secret bits, so its record belongs in the run's private folder.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from dpmed.audit.bound import audit_epsilon_lower_bound_over_grid, canary_scores_from_logits, choose_canaries
from dpmed.audit.canaries import hold_out_canary_sources, insert_canaries, make_canaries
from dpmed.data import ImageSet, Task
from dpmed.errors import error_name, first_invalid
from dpmed.mechanisms import AuditConfig, PrivacyCard
from dpmed.numbers import confidence_text, epsilon_text, number_text
from dpmed.randomness import public_seed

__all__ = ["AuditTrial", "AuditRecord", "read_audit", "insert_canaries_for", "conclude", "AUDIT_DELTA_NON_PRIVATE",
           "AUDIT_CITATION"]

AUDIT_DELTA_NON_PRIVATE = 1e-5   # the delta at which a non-private arm's audit bound is stated
AUDIT_CITATION = ("Steinke, Nasr and Jagielski, Privacy Auditing with One (1) Training Run, NeurIPS 2023, "
                  "arXiv:2305.08846")


@dataclass(frozen=True, eq=False)
class AuditTrial:
    """One audited run's canaries (m images) and their secret inclusion bits (bool [m]). ``unit``: the run's unit of
    privacy; "patient": each canary is its own patient; "image": a drawn patient's images are all canaries."""

    config: AuditConfig
    canaries: ImageSet
    included: np.ndarray
    unit: str = "patient"


class AuditRecord(BaseModel):
    """The audit's private record, as a type: what a run's ``private/audit.json`` holds (``model_dump`` /
    ``model_validate_json``; the field names are the file's keys). It depends on the secret inclusion bits, so it is
    never written outside the study's private folder (``private`` says so in the file).

    The bound (Steinke, Nasr and Jagielski 2023, their main theorem; `dpmed.audit.bound`): ``n_correct`` of
    ``n_guesses`` guesses (``k_positive`` "in", ``k_negative`` "out") about ``n_canaries`` canaries of ``kind``,
    ``n_included`` of them trained on, give ``epsilon_lower_bound`` at ``delta`` with probability >= ``confidence``
    (``method``: the test and its correction). ``claimed_epsilon``: the accountant's at the same delta (None for an
    arm without privacy), and ``consistent_with_claim`` whether the bound is at or below it: a bound can refute a
    claim, never prove one. A run whose draw found no canary patient has no bound: ``epsilon_lower_bound`` and
    ``method`` are None, the counts 0 (`conclude`). ``statement``: the one sentence shown to the user, with every
    term of the claim.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    n_canaries: int
    kind: str
    n_included: int
    n_guesses: int
    n_correct: int
    k_positive: int
    k_negative: int
    epsilon_lower_bound: float | None
    confidence: float
    delta: float
    claimed_epsilon: float | None
    consistent_with_claim: bool | None
    method: str | None
    citation: str
    statement: str
    canary_source: str
    private: str

    def label_claim(self, card: PrivacyCard) -> AuditRecord:
        """The record as its run's ``card`` labels the claimed eps: where the card is not DP, its "not DP: seed known"
        (`PrivacyCard.why_not_dp_in_brief`) beside the claim, as everywhere the eps is stated. A reproducible-mode
        run's audit.json written before `conclude` put it there states the accounted eps bare; a statement that has
        the label, or shows no claimed eps, is kept as written."""
        label = f"not DP: {card.why_not_dp_in_brief}"
        if card.is_dp or self.claimed_epsilon is None or label in self.statement:
            return self
        statement = _CLAIM.sub(lambda m: f"{m[1]} ({m[2] + '; ' if m[2] else ''}{label})", self.statement, count=1)
        return self.model_copy(update={"statement": statement})


# The claim in a statement, as `conclude` has written it: "the accountant claims eps = 0.9862 (the same delta, PLD,
# ...): consistent ...", and before its terms were given, "the accountant claims eps = 0.986: consistent ...".
_CLAIM = re.compile(r"(the accountant claims eps = [^ :(]+)(?: \((the same delta.*?)\))?(?=: (?:in)?consistent)")


def read_audit(path: Path) -> AuditRecord | str | None:
    """The audit record a run wrote to ``path`` (its private audit.json), read and checked whole, once; None where
    the run wrote none. A file that cannot be read or is not such a record (damaged, truncated, foreign) gives one
    line instead, naming it and what is wrong: the run has finished, so whoever shows its record says that line and
    goes on, never stops on it."""
    try:
        return AuditRecord.model_validate_json(Path(path).read_bytes())
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{path} cannot be read ({error_name(exc)}: {exc.strerror or exc})"
    except ValidationError as exc:
        return f"{path} cannot be read ({first_invalid(exc)})"


def insert_canaries_for(train_set: ImageSet, task: Task, config: AuditConfig, *, seed: int, n_patients: int,
                        rng: np.random.Generator, unit: str = "patient") -> tuple[ImageSet, AuditTrial]:
    """(the training set with the included canaries, the trial). ``seed``: the run's public seed; ``n_patients``: a
    public count of the training units and ``unit`` the unit of privacy (:func:`hold_out_canary_sources`); ``rng``:
    its secret canaries stream."""
    rest, sources = hold_out_canary_sources(train_set, config.canaries, seed=public_seed(seed, "canary_sources"),
                                            n_patients=n_patients, unit=unit)
    m = len(sources)
    if m == 0:      # no patient drawn: the run trains on its whole set, unaudited (`conclude` says so, privately)
        return train_set, AuditTrial(config, sources, np.zeros(0, bool), unit)
    canaries = make_canaries(sources, m, task=task, seed=public_seed(seed, "canaries"), kind=config.kind)
    included = choose_canaries(m, rng=rng)
    return insert_canaries(rest, canaries, included), AuditTrial(config, canaries, included, unit)


def conclude(trial: AuditTrial, logits: np.ndarray, *, task_kind: str, delta: float | None,
             claimed_epsilon: float | None, claim_terms: str = "") -> tuple[AuditRecord, dict[str, np.ndarray]]:
    """(the audit's private record, the arrays to keep for re-analysis: scores, bits, labels), from the final
    model's ``logits`` on the canaries. ``delta``: the claim's (None: a non-private arm, stated at 1e-5);
    ``claim_terms``: the rest of the claim as its card states it (accountant, neighbours, what it leaves out), so
    that the statement never gives an eps without them; without a claimed eps, the card's label of the run where
    it has one (a not-DP DP-SGD run: "not DP: shuffled batches ..."), said beside "no eps is claimed"."""
    delta = AUDIT_DELTA_NON_PRIVATE if delta is None else delta
    if len(trial.canaries) == 0:
        return _unaudited(trial, delta, claimed_epsilon), {"scores": np.zeros(0), "included": trial.included,
                                                           "labels": trial.canaries.labels}
    scores = canary_scores_from_logits(logits, trial.canaries.labels, task_kind=task_kind)
    res = audit_epsilon_lower_bound_over_grid(scores, trial.included, delta=delta,
                                              confidence=trial.config.confidence)
    confidence = confidence_text(res.confidence)
    # both rounded down: "not (eps, delta)-DP" at a smaller delta follows from it, at a larger one it does not
    # each canary is one image, and its own patient where the patient is the unit: the bound is for adding or
    # removing one of them; where the image is the unit a drawn patient's images are all canaries
    statement = (f"empirical lower bound eps >= {number_text(res.epsilon_lower_bound, down=True)} at delta = "
                 f"{number_text(delta, down=True)}, add/remove one canary ({_CANARY_IS[trial.unit]}) "
                 f"(one-run audit, {res.n_canaries} {trial.config.kind} canaries, {confidence} confidence; "
                 f"{res.n_correct} of {res.n_guesses} guesses correct)")
    terms = f", {claim_terms}" if claim_terms else ""
    statement += (_no_claim(claim_terms) if claimed_epsilon is None else
                  f"; the accountant claims eps = {epsilon_text(claimed_epsilon)} (the same delta{terms}): " + (
                      f"consistent{_NO_PROOF}" if res.epsilon_lower_bound <= claimed_epsilon else
                      f"inconsistent with the claimed eps at {confidence} confidence (an audit of a run that keeps "
                      f"its claim says so at most {confidence_text(1.0 - res.confidence, up=True)} of the time)"))
    record = AuditRecord(
        n_canaries=res.n_canaries, kind=trial.config.kind, n_included=int(trial.included.sum()),
        n_guesses=res.n_guesses, n_correct=res.n_correct, k_positive=res.k_positive, k_negative=res.k_negative,
        epsilon_lower_bound=res.epsilon_lower_bound, confidence=res.confidence, delta=delta,
        claimed_epsilon=claimed_epsilon,
        consistent_with_claim=None if claimed_epsilon is None else bool(res.epsilon_lower_bound <= claimed_epsilon),
        method=res.method, citation=AUDIT_CITATION, statement=statement, canary_source=_CANARY_SOURCE,
        private=_PRIVATE)
    return record, {"scores": scores, "included": trial.included, "labels": trial.canaries.labels}


_CANARY_IS = {"patient": "an image that is its own patient",
              "image": "one image; where the image is the unit, a patient's other images may be canaries too"}
_CANARY_SOURCE = ("training split: each patient drawn at rate m / the public count of units, all their images held out "
                  "and one of them (every one where the image is the unit) made a canary")
# A bound at or below the claim is no evidence for it: the audit can refute a claim, never prove one. Nor is a bound
# far below the claim (or a small one without a claim) evidence of more privacy than proven: the audit sees the final
# model and its canaries only, and such black-box audits give bounds well below the eps of the runs they audit
# (Steinke, Nasr and Jagielski 2023).
_NO_PROOF = (" (a lower bound can refute the claim, not prove it; one far below it is no evidence that the run is "
             "more private than claimed)")
_NO_CLAIM = "; no eps is claimed{}: the run has no privacy guarantee, and a small bound is no evidence of privacy"
_PRIVATE = "depends on the secret canary inclusion bits: not covered by eps, kept in the study's private folder"


def _no_claim(label: str) -> str:
    """The statement's end for a run that claims no eps, with its card's label where it has one ("not DP: shuffled
    batches ...": a run whose card is not DP is never stated without it)."""
    return _NO_CLAIM.format(f" ({label})" if label else "")


def _unaudited(trial: AuditTrial, delta: float, claimed_epsilon: float | None) -> AuditRecord:
    """The private record of a run whose draw found no canary patient: it trained on its whole set and has no bound.
    (How many patients were drawn reads the training set: private, as every audit record is.)"""
    statement = (f"no audit bound: none of the training patients was drawn as a canary source (each drawn at rate "
                 f"m / the public count of {trial.unit}s, m = {trial.config.canaries}), so the run trained on its "
                 "whole training split with no canaries; more training patients or a larger audit.canaries make such "
                 "a draw rarer")
    return AuditRecord(n_canaries=0, kind=trial.config.kind, n_included=0, n_guesses=0, n_correct=0, k_positive=0,
                       k_negative=0, epsilon_lower_bound=None, confidence=trial.config.confidence, delta=delta,
                       claimed_epsilon=claimed_epsilon, consistent_with_claim=None, method=None,
                       citation=AUDIT_CITATION, statement=statement, canary_source=_CANARY_SOURCE, private=_PRIVATE)
