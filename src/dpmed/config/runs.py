"""Expand a study into runs: one per arm, per combination of swept values, per seed."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Mapping

from dpmed.config.schema import (DpSgdArm, NoPrivacyArm, PixelGaussianArm, PixelLaplaceArm, ScalarShiftArm, Study,
                                 TrainingConfig)

__all__ = ["RunSpec", "expand_runs", "SWEEP_KEYS"]

# The arm keys that may hold several values, and the short tag each gets in a run id. A run id always carries every
# swept key that is set, even when its list holds one value, so adding a value to a sweep never renames (and
# re-trains) old runs. Keys left unset (None: the arm chose the other of two alternatives) are not swept.
SWEEP_KEYS: Mapping[type, Mapping[str, str]] = {
    NoPrivacyArm: {},
    PixelLaplaceArm: {"scale": "b", "target_epsilon_image": "epsimg"},
    PixelGaussianArm: {"std": "s", "target_epsilon_image": "epsimg"},
    ScalarShiftArm: {"scale": "b"},
    DpSgdArm: {"target_epsilon": "eps", "noise_multiplier": "sigma", "max_grad_norm": "C"},
}


@dataclass(frozen=True)
class RunSpec:
    """Everything one run needs, with scalars where the study had sweeps.

    params: the arm's settings for this run (e.g. target_epsilon, max_grad_norm, delta, accountant, or scale).
    derived: values the study computes before training (sample_rate, steps, delta, noise_multiplier); empty until
    `dpmed.study` resolves them, and written to study.yaml so that every printed number can be traced.
    """

    run_id: str
    arm: str
    mechanism: str
    seed: int
    params: Mapping[str, Any]
    training: TrainingConfig
    derived: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "run_id": self.run_id, "arm": self.arm, "mechanism": self.mechanism, "seed": self.seed,
            "params": dict(self.params), "derived": dict(self.derived),
            "training": self.training.model_dump(mode="json"),
        }


def _tag(value: float) -> str:
    return f"{value:g}".replace("+", "")


def expand_runs(study: Study) -> list[RunSpec]:
    """Runs in study order: arms as listed, values as listed, seeds innermost."""
    runs: list[RunSpec] = []
    for arm in study.arms:
        sweeps = {k: tag for k, tag in SWEEP_KEYS[type(arm)].items() if getattr(arm, k) is not None}
        not_params = {*SWEEP_KEYS[type(arm)], "name", "mechanism", "epochs", "batch_size", "learning_rate"}
        # An unset audit stays out of params, so the specs (and resume checks) of arms without one are unchanged.
        fixed = {k: v for k, v in arm.model_dump().items()
                 if k not in not_params and not (k == "audit" and v is None)}
        overrides = {k: getattr(arm, k) for k in ("epochs", "batch_size", "learning_rate") if getattr(arm, k)}
        training = study.training.model_copy(update=overrides)
        value_lists = [getattr(arm, k) for k in sweeps]
        for values in itertools.product(*value_lists):
            swept = dict(zip(sweeps, values))
            label = "_".join([arm.name] + [f"{sweeps[k]}{_tag(v)}" for k, v in swept.items()])
            for seed in study.seeds:
                runs.append(RunSpec(
                    run_id=f"{label}_seed{seed}", arm=arm.name, mechanism=arm.mechanism, seed=seed,
                    params={**swept, **fixed}, training=training,
                ))
    return runs
