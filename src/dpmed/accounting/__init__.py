"""Privacy accounting: what was released (events, a ledger) in, eps(delta) and calibrated noise out.

Pure math on numbers (numpy, scipy, Google's dp_accounting and the standard library): it imports no torch and
nothing else of dpmed, so every privacy number dpmed prints comes from this one auditable place.
"""

from dpmed.accounting.calibration import noise_multiplier_for
from dpmed.accounting.epsilon import (ACCOUNTANTS, NEIGHBOUR_DP_SGD, NOISES, AccountantInfo, accountant_info,
                                      default_delta, describe_accountant, dp_sgd_epsilon, dp_sgd_event, dp_sgd_schedule,
                                      effective_accountant, fallback_accountant, ledger_epsilon, poisson_counterpart,
                                      shuffled_event)
from dpmed.accounting.group import (GROUP_CITATION, NEIGHBOUR_PATIENT, TIGHT_GROUP_CITATION, GroupPrivacy,
                                    group_privacy)
from dpmed.accounting.events import (GaussianImageEvent, LaplaceImageEvent, PoissonGaussianEvent, PoissonLaplaceEvent,
                                     ShuffledBatchesEvent, event_from_dict, event_to_dict)
from dpmed.accounting.ldp import (GAUSSIAN_COMPOSITION, LAPLACE_COMPOSITION, MIXED_COMPOSITION, NEIGHBOUR_LDP_IMAGE,
                                  ImageComposition, compose_image_events, gaussian_epsilon, gaussian_image_epsilon,
                                  gaussian_std_for_image, laplace_image_epsilon, laplace_pixel_epsilon,
                                  laplace_scale_for, laplace_scale_for_image)
from dpmed.accounting.ledger import Ledger
from dpmed.accounting.truncation import (NEGLIGIBLE_SHARE, bounded_noise_delta, gaussian_end_shortfall,
                                         laplace_end_excess)
from dpmed.accounting.reconstruction import (MIA_FPRS, NEIGHBOUR_RECONSTRUCTION, RECONSTRUCTION_METHODS,
                                             ReconstructionMethod, ReconstructionRisk, default_kappa,
                                             membership_inference_tpr, reconstruction_bound,
                                             reconstruction_method, reconstruction_risk,
                                             relaxed_reconstruction_bound)

__all__ = [
    # events and the ledger
    "PoissonGaussianEvent", "PoissonLaplaceEvent", "ShuffledBatchesEvent", "LaplaceImageEvent", "GaussianImageEvent",
    "event_to_dict", "event_from_dict", "Ledger", "shuffled_event", "poisson_counterpart",
    # DP-SGD
    "ACCOUNTANTS", "NOISES", "AccountantInfo", "accountant_info", "describe_accountant", "effective_accountant",
    "fallback_accountant",
    "NEIGHBOUR_DP_SGD", "dp_sgd_event", "dp_sgd_epsilon", "ledger_epsilon", "default_delta", "dp_sgd_schedule",
    "noise_multiplier_for",
    # the patient as the unit, and what image-level DP-SGD implies for a patient with k images
    "NEIGHBOUR_PATIENT", "GroupPrivacy", "group_privacy", "GROUP_CITATION", "TIGHT_GROUP_CITATION",
    # local DP on images
    "NEIGHBOUR_LDP_IMAGE", "laplace_pixel_epsilon", "laplace_image_epsilon", "laplace_scale_for",
    "laplace_scale_for_image", "gaussian_epsilon", "gaussian_image_epsilon", "gaussian_std_for_image",
    # several local-DP releases of the same image (one per run), composed into one per-image guarantee
    "ImageComposition", "compose_image_events", "LAPLACE_COMPOSITION", "GAUSSIAN_COMPOSITION", "MIXED_COMPOSITION",
    # reconstruction and membership-inference risk
    "RECONSTRUCTION_METHODS", "ReconstructionMethod", "reconstruction_method", "NEIGHBOUR_RECONSTRUCTION",
    "MIA_FPRS", "default_kappa", "reconstruction_bound", "relaxed_reconstruction_bound", "membership_inference_tpr",
    "ReconstructionRisk", "reconstruction_risk",
    # what a sampler whose draws are bounded costs a claim
    "bounded_noise_delta", "laplace_end_excess", "gaussian_end_shortfall", "NEGLIGIBLE_SHARE",
]
