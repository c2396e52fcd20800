"""A study expanded into typed run plans: one per arm, per combination of swept values, per seed.

A :class:`RunPlan` is everything one run needs, computed before training and frozen: its identity, its training
settings (after the arm's overrides), its audit, and its privacy plan, one kind per mechanism
(`dpmed.mechanisms.registry`). It flows down from `dpmed.study` through `dpmed.run` into the stages, is written to
study.yaml and run.json, and is what comparisons and the report group runs by (never their ids).
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import replace
from typing import Any

from pydantic import Field, ValidationError

from dpmed.config.schema import Study, TrainingConfig
from dpmed.errors import ConfigError
from dpmed.mechanisms import AuditConfig, PlanContext, PrivacyPlan, Strict, mechanism_info

__all__ = ["ATTEMPT_FORMAT", "made_otherwise", "RunPlan", "SweptValue", "plan_runs", "run_ids", "check_run_ids"]

# How an unfinished attempt of a run is fingerprinted (`dpmed.run`), written before its hash ("3:<sha256>"; a bare
# hash is an older dpmed's), and so the fingerprint of its settings alone (`RunPlan.fingerprint`): bump it when either
# hash is made otherwise or a plan's settings gain or lose a key, so that a checkpoint a dpmed of another version left
# is said to be its (`made_otherwise`), by `dpmed run` and `dpmed status` alike, not one made with other settings or
# data. tests/test_run.py pins what the attempt's hash is made of beside this number, and fails where either changes
# alone.
ATTEMPT_FORMAT = 3


def made_otherwise(fingerprint: str) -> str | None:
    """Why an attempt fingerprinted as ``fingerprint`` (a key file's) is no attempt of this dpmed's, for `dpmed run`'s
    log and `dpmed status`: another version of dpmed made it, which fingerprints a run otherwise (so whether its
    settings or data differ cannot be told, and saying they did sent users looking for one). None where its format is
    this dpmed's, or a bare hash (an older dpmed's, which continues where the hash is this one's)."""
    made, colon, _ = fingerprint.rpartition(":")
    if not (colon and made.isdigit()) or int(made) == ATTEMPT_FORMAT:
        return None
    which = "an older" if int(made) < ATTEMPT_FORMAT else "a newer"
    return f"{which} dpmed made it, which fingerprints a run otherwise"


class SweptValue(Strict):
    """One swept key of a run (e.g. target_epsilon = 8), with the tag it has in the run id (eps8)."""

    key: str
    tag: str
    value: float


class RunPlan(Strict):
    """One run of a study: arm x swept values x seed, with every derived value (METHODS.md s.1-2). model: the
    architecture (``model.name``); where it starts and what of it trains is the study's start, the same for every
    run and checked apart (`dpmed.pretraining.refuse_other_starts`)."""

    run_id: str
    arm: str
    seed: int
    model: str
    swept: tuple[SweptValue, ...] = ()
    training: TrainingConfig
    audit: AuditConfig | None = None
    privacy: PrivacyPlan = Field(discriminator="mechanism")

    @property
    def mechanism(self) -> str:
        return self.privacy.mechanism

    @property
    def label(self) -> str:
        """The run without its seed (arm and swept values): the runs of one label differ only by seed."""
        return "_".join([self.arm] + [f"{s.tag}{_tag(s.value)}" for s in self.swept])

    def swept_value(self, key: str) -> float | None:
        return next((s.value for s in self.swept if s.key == key), None)

    def settings(self) -> dict[str, Any]:
        """What the run computes, as JSON data: a finished run is reused only when these are equal."""
        data = self.model_dump(mode="json")
        data["training"] = self.training.computed_settings(dp_sgd=self.mechanism == "dp_sgd")
        # DP-SGD's count as released where it fell below the batch: what the card states, not what trains (N, q,
        # T and sigma decide that), and absent from the runs an older dpmed finished, which must still resume
        data["privacy"].pop("released_units", None)
        return data

    def fingerprint(self, study: Study) -> str:
        """What of an attempt's fingerprint (`dpmed.run`) study.yaml shows, hashed ("<ATTEMPT_FORMAT>:<sha256>"): the
        run's settings and, of ``study``, the privacy randomness mode, the fixed normalisation and the model section
        (the weights' path and source and what trains; not the weights, which status does not read), and of public
        pretraining what its record keeps whether its weights train now or are found cached (its statement and
        overlap threshold) or what keys the cache (its seed and computed training settings; not its data, which status
        does not read). Kept apart in the private key file so that `dpmed status` tells an interrupted run that the
        next `dpmed run` trains afresh for its settings without reading the training data. Each is in the attempt's
        fingerprint too (the normalisation as the dataset's, the model and pretrain sections as the start's record):
        one differing here always differs there, so status never says "afresh" of a run that continues; execution
        settings (threads, device) and other runs are in neither. Nothing of the data goes into it."""
        normalize, pretrain = study.data.preprocessing.normalize, study.pretrain
        text = json.dumps({"plan": self.settings(), "randomness": study.privacy_randomness,
                           "normalize": None if normalize is None else [normalize.mean, normalize.std],
                           "model": study.model.model_dump(mode="json"),
                           "pretrain": None if pretrain is None else {
                               "public": pretrain.public, "near_duplicate_bits": pretrain.near_duplicate_bits,
                               "seed": pretrain.seed, "training": pretrain.training.computed_settings()}},
                          sort_keys=True)
        return f"{ATTEMPT_FORMAT}:{hashlib.sha256(text.encode()).hexdigest()}"


def _tag(value: float) -> str:
    return f"{value:g}".replace("+", "")


def _expand(study: Study):
    """(arm, swept values, training, run id, seed) in study order: arms as listed, values as listed, seeds innermost.
    A run id carries every swept key that is set, even with one value, so adding a value never renames (and
    re-trains) old runs; keys left unset (the arm chose the other of two alternatives) are not swept."""
    for arm in study.arms:
        info = mechanism_info(arm.mechanism)
        keys = {k: tag for k, tag in info.sweep_keys.items() if getattr(arm, k) is not None}
        overrides = {k: getattr(arm, k) for k in ("epochs", "batch_size", "learning_rate") if getattr(arm, k)}
        if arm.epochs:              # an arm's epochs replace the study's training length, steps included
            overrides["steps"] = None
        training = study.training.model_copy(update=overrides)
        for values in itertools.product(*(getattr(arm, k) for k in keys)):
            swept = tuple(SweptValue(key=k, tag=keys[k], value=v) for k, v in zip(keys, values))
            label = "_".join([arm.name] + [f"{s.tag}{_tag(s.value)}" for s in swept])
            for seed in study.seeds:
                yield arm, swept, training, f"{label}_seed{seed}", seed


def run_ids(study: Study) -> list[str]:
    """The ids of the study's runs, in study order, without planning them."""
    return [run_id for _, _, _, run_id, _ in _expand(study)]


def check_run_ids(study: Study) -> None:
    """Raise ValueError if two runs of ``study`` would write one folder ``runs/<run id>/``, where the second would
    overwrite the first's model and be taken for it when the study resumes. Ids are compared ignoring case, as the
    default file systems of macOS and Windows compare names. They collide where an arm is named like another arm's
    run (``b`` swept at eps 8 and an arm ``b_eps8_C1``), or two swept values agree in the 6 significant figures a
    run id keeps of them."""
    seen: dict[str, str] = {}
    for arm, swept, _, run_id, _ in _expand(study):
        values = ", ".join(f"{s.key} {s.value:.15g}" for s in swept)
        what = f"arm {arm.name!r}" + (f" ({values})" if values else "")
        first = seen.setdefault(run_id.casefold(), what)
        if first != what:
            raise ValueError(f"{first} and {what} would both write runs/{run_id}/ (a run id is its arm's name, then "
                             "each swept value to 6 significant figures, then the seed; names that differ only in "
                             "case are one folder on macOS and Windows): rename an arm, or give values that differ "
                             "within 6 figures")


def plan_runs(study: Study, context: PlanContext) -> list[RunPlan]:
    """Every run of ``study``, planned: each mechanism's plan from its arm, swept values and the data (``context``:
    images per training patient, image shape; calibrations shared through its cache)."""
    plans = []
    for arm, swept, training, run_id, seed in _expand(study):
        info = mechanism_info(arm.mechanism)
        values = {s.key: s.value for s in swept}
        try:
            privacy = info.make_plan(arm, values, replace(context, batch_size=training.batch_size,
                                                          epochs=training.epochs, steps=training.steps))
        except ValidationError:   # a plan its own model refuses: dpmed's bug, not the study's
            raise
        except (ValueError, ArithmeticError) as exc:   # a value too extreme to compute with (scale 5e-324, ...)
            why = (f"its values are too extreme to compute with ({type(exc).__name__}: {exc})"
                   if isinstance(exc, ArithmeticError) else str(exc))
            raise ConfigError(f"arm {arm.name!r} ({run_id}): {why}") from None
        plans.append(RunPlan(run_id=run_id, arm=arm.name, seed=seed, model=study.model.name, swept=swept,
                             training=training, audit=arm.audit, privacy=privacy))
    return plans
