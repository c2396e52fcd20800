"""Study files: a strict, frozen schema, and the study expanded into typed run plans."""

from dpmed.config.loading import check_study, load_study, parse_override
from dpmed.config.plans import ATTEMPT_FORMAT, RunPlan, made_otherwise, SweptValue, plan_runs, run_ids
from dpmed.config.schema import (
    Arm, AuditConfig, CamConfig, DataConfig, EvaluationConfig, FairnessConfig, ModelConfig, PrivacyBudget, Study,
    TrainingConfig,
)

__all__ = [
    "check_study", "load_study", "parse_override", "ATTEMPT_FORMAT", "made_otherwise", "RunPlan", "SweptValue",
    "plan_runs", "run_ids",
    "CamConfig", "FairnessConfig", "AuditConfig", "Arm", "DataConfig", "EvaluationConfig",
    "ModelConfig", "PrivacyBudget", "Study", "TrainingConfig",
]
