"""Privacy mechanisms: each its arm in a study file, its per-run plan, its privacy card, and (local DP) the transform
of the released images; all listed in one registry (`dpmed.mechanisms.registry`)."""

from dpmed.mechanisms.base import (AUTO_EPOCHS, AUTO_MIN_STEPS, ArmBase, AuditConfig, GroupGuarantee, MechanismInfo,
                                   PlanContext, PrivacyCard, ReconstructionRecord, Strict, length_text,
                                   training_steps, unit_words)
from dpmed.mechanisms.dp_sgd import DpSgdArm, DpSgdPlan, patient_guarantee
from dpmed.mechanisms.none import NoPrivacyArm, NoPrivacyPlan
from dpmed.mechanisms.pixel_gaussian import PixelGaussian, PixelGaussianArm, PixelGaussianPlan
from dpmed.mechanisms.pixel_laplace import PixelLaplace, PixelLaplaceArm, PixelLaplacePlan
from dpmed.mechanisms.registry import MECHANISMS, Arm, PrivacyPlan, claims_beyond, mechanism_info
from dpmed.mechanisms.scalar_shift import ScalarShift, ScalarShiftArm, ScalarShiftPlan

__all__ = [
    "MECHANISMS", "mechanism_info", "claims_beyond", "MechanismInfo", "Arm", "PrivacyPlan", "ArmBase", "AuditConfig",
    "PlanContext",
    "PrivacyCard", "GroupGuarantee", "Strict", "ReconstructionRecord", "training_steps", "length_text", "AUTO_EPOCHS",
    "AUTO_MIN_STEPS",
    "NoPrivacyArm", "NoPrivacyPlan", "PixelLaplace", "PixelLaplaceArm", "PixelLaplacePlan", "PixelGaussian",
    "PixelGaussianArm", "PixelGaussianPlan", "ScalarShift", "ScalarShiftArm", "ScalarShiftPlan", "DpSgdArm",
    "DpSgdPlan", "patient_guarantee", "unit_words",
]
