"""Study files: a strict, frozen schema, and expansion of a study into runs."""

from dpmed.config.loading import load_study, parse_override, study_to_dict
from dpmed.config.runs import RunSpec, expand_runs
from dpmed.config.schema import (
    AUDITABLE_MECHANISMS, CAM_METHOD_NAMES, CANARY_KIND_NAMES, Arm, AuditConfig, CamConfig, DataConfig, DpSgdArm,
    EvaluationConfig, FairnessConfig, ModelConfig, NoPrivacyArm, PixelGaussianArm, PixelLaplaceArm, PrivacyBudget,
    ScalarShiftArm, Study, TrainingConfig,
)

__all__ = [
    "load_study", "parse_override", "study_to_dict", "RunSpec", "expand_runs",
    "CAM_METHOD_NAMES", "CamConfig", "FairnessConfig", "AUDITABLE_MECHANISMS", "AuditConfig", "CANARY_KIND_NAMES",
    "Arm", "DataConfig", "DpSgdArm", "EvaluationConfig", "ModelConfig", "NoPrivacyArm", "PixelGaussianArm",
    "PixelLaplaceArm", "PrivacyBudget", "ScalarShiftArm", "Study", "TrainingConfig",
]
