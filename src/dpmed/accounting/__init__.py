"""Privacy accounting: what was released (events, a ledger) in, eps(delta) and calibrated noise out.

Pure math on numbers (numpy, scipy, Google's dp_accounting and the standard library): it imports no torch and
nothing else of dpmed, so every privacy number dpmed prints comes from this one auditable place.

Names are imported from their module on first use: dp_accounting and scipy take a second to import, and what only
reads a ledger (``from dpmed.accounting import Ledger``, e.g. `dpmed status` reading run records) needs neither.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__all__ = [
    # events and the ledger
    "PoissonGaussianEvent", "PoissonLaplaceEvent", "ShuffledBatchesEvent", "LaplaceImageEvent", "GaussianImageEvent",
    "ImageEvent", "event_to_dict", "event_from_dict", "Ledger", "shuffled_event", "poisson_counterpart",
    # DP-SGD
    "ACCOUNTANTS", "NOISES", "AccountantInfo", "accountant_info", "describe_accountant", "effective_accountant",
    "fallback_accountant", "check_accountant_noise",
    "NEIGHBOUR_DP_SGD", "dp_sgd_event", "dp_sgd_epsilon", "ledger_epsilon", "default_delta", "dp_sgd_schedule",
    "noise_multiplier_for",
    # the patient as the unit, and what image-level DP-SGD implies for a patient with k images
    "NEIGHBOUR_PATIENT", "GroupPrivacy", "group_privacy", "GROUP_CITATION", "TIGHT_GROUP_CITATION",
    # both units composed for add/remove one patient, an image-unit run's steps as groups of a patient's images
    "ImageGroup", "patient_epsilon",
    # local DP on images
    "NEIGHBOUR_LDP_IMAGE", "laplace_pixel_epsilon", "laplace_image_epsilon", "laplace_scale_for_image",
    "gaussian_epsilon", "gaussian_image_epsilon", "gaussian_std_for_image",
    # several local-DP releases of the same image (one per run), composed into one per-image guarantee
    "ImageComposition", "compose_image_events", "LAPLACE_COMPOSITION", "GAUSSIAN_COMPOSITION", "MIXED_COMPOSITION",
    # reconstruction and membership-inference risk
    "RECONSTRUCTION_METHODS", "ReconstructionMethod", "reconstruction_method", "NEIGHBOUR_RECONSTRUCTION",
    "MIA_FPRS", "default_kappa", "reconstruction_bound", "relaxed_reconstruction_bound", "membership_inference_tpr",
    "ReconstructionRisk", "reconstruction_risk",
    # what a sampler whose draws are bounded costs a claim
    "bounded_noise_delta", "laplace_end_excess", "gaussian_end_shortfall", "NEGLIGIBLE_SHARE",
]

# the module of each name above; events, ledger and _arguments import neither dp_accounting nor scipy
_MODULES = {
    "events": ("PoissonGaussianEvent", "PoissonLaplaceEvent", "ShuffledBatchesEvent", "LaplaceImageEvent",
               "GaussianImageEvent", "ImageEvent", "event_to_dict", "event_from_dict", "NEIGHBOUR_LDP_IMAGE"),
    "ledger": ("Ledger",),
    "_arguments": ("check_accountant_noise",),
    "epsilon": ("ACCOUNTANTS", "NOISES", "AccountantInfo", "accountant_info", "describe_accountant",
                "effective_accountant", "fallback_accountant", "NEIGHBOUR_DP_SGD", "dp_sgd_event", "dp_sgd_epsilon",
                "ledger_epsilon", "default_delta", "dp_sgd_schedule", "shuffled_event", "poisson_counterpart"),
    "calibration": ("noise_multiplier_for",),
    "group": ("NEIGHBOUR_PATIENT", "GroupPrivacy", "group_privacy", "GROUP_CITATION", "TIGHT_GROUP_CITATION",
              "ImageGroup", "patient_epsilon"),
    "ldp": ("laplace_pixel_epsilon", "laplace_image_epsilon", "laplace_scale_for_image",
            "gaussian_epsilon", "gaussian_image_epsilon", "gaussian_std_for_image", "ImageComposition",
            "compose_image_events", "LAPLACE_COMPOSITION", "GAUSSIAN_COMPOSITION", "MIXED_COMPOSITION"),
    "reconstruction": ("RECONSTRUCTION_METHODS", "ReconstructionMethod", "reconstruction_method",
                       "NEIGHBOUR_RECONSTRUCTION", "MIA_FPRS", "default_kappa", "reconstruction_bound",
                       "relaxed_reconstruction_bound", "membership_inference_tpr", "ReconstructionRisk",
                       "reconstruction_risk"),
    "truncation": ("bounded_noise_delta", "laplace_end_excess", "gaussian_end_shortfall", "NEGLIGIBLE_SHARE"),
}

if TYPE_CHECKING:   # the same names, for a type checker: `__getattr__` below hides their types from it (all Any)
    from dpmed.accounting._arguments import check_accountant_noise
    from dpmed.accounting.calibration import noise_multiplier_for
    from dpmed.accounting.epsilon import (ACCOUNTANTS, NEIGHBOUR_DP_SGD, NOISES, accountant_info, AccountantInfo,
                                          default_delta, describe_accountant, dp_sgd_epsilon, dp_sgd_event,
                                          dp_sgd_schedule, effective_accountant, fallback_accountant, ledger_epsilon,
                                          poisson_counterpart, shuffled_event)
    from dpmed.accounting.events import (NEIGHBOUR_LDP_IMAGE, event_from_dict, event_to_dict, GaussianImageEvent,
                                         ImageEvent, LaplaceImageEvent, PoissonGaussianEvent, PoissonLaplaceEvent,
                                         ShuffledBatchesEvent)
    from dpmed.accounting.group import (GROUP_CITATION, NEIGHBOUR_PATIENT, TIGHT_GROUP_CITATION, group_privacy,
                                        GroupPrivacy, ImageGroup, patient_epsilon)
    from dpmed.accounting.ldp import (GAUSSIAN_COMPOSITION, LAPLACE_COMPOSITION, MIXED_COMPOSITION,
                                      compose_image_events, gaussian_epsilon, gaussian_image_epsilon,
                                      gaussian_std_for_image, ImageComposition, laplace_image_epsilon,
                                      laplace_pixel_epsilon, laplace_scale_for_image)
    from dpmed.accounting.ledger import Ledger
    from dpmed.accounting.reconstruction import (MIA_FPRS, NEIGHBOUR_RECONSTRUCTION, RECONSTRUCTION_METHODS,
                                                 default_kappa, membership_inference_tpr, reconstruction_bound,
                                                 reconstruction_method, reconstruction_risk, ReconstructionMethod,
                                                 ReconstructionRisk, relaxed_reconstruction_bound)
    from dpmed.accounting.truncation import (NEGLIGIBLE_SHARE, bounded_noise_delta, gaussian_end_shortfall,
                                             laplace_end_excess)

_HOME = {name: f"{__name__}.{module}" for module, names in _MODULES.items() for name in names}


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(import_module(_HOME[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:       # the names imported on first use, for tab completion
    return sorted({*globals(), *__all__})
