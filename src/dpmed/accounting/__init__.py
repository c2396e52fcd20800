"""Privacy accounting: what was released (events, a ledger) in, eps(delta) and calibrated noise out.

Pure math on numbers (numpy, scipy, Google's dp_accounting and the standard library): it imports no torch and
nothing else of dpmed, so every privacy number dpmed prints comes from this one auditable place.
"""

from dpmed.accounting.calibration import noise_multiplier_for
from dpmed.accounting.epsilon import (ACCOUNTANTS, NEIGHBOUR_DP_SGD, AccountantInfo, accountant_info, default_delta,
                                      describe_accountant, dp_sgd_epsilon, ledger_epsilon)
from dpmed.accounting.events import LaplaceImageEvent, PoissonGaussianEvent, event_from_dict, event_to_dict
from dpmed.accounting.ldp import (NEIGHBOUR_LDP_IMAGE, laplace_image_epsilon, laplace_pixel_epsilon,
                                  laplace_scale_for)
from dpmed.accounting.ledger import Ledger

__all__ = [
    # events and the ledger
    "PoissonGaussianEvent", "LaplaceImageEvent", "event_to_dict", "event_from_dict", "Ledger",
    # DP-SGD
    "ACCOUNTANTS", "AccountantInfo", "accountant_info", "describe_accountant", "NEIGHBOUR_DP_SGD",
    "dp_sgd_epsilon", "ledger_epsilon", "default_delta", "noise_multiplier_for",
    # local DP on images
    "NEIGHBOUR_LDP_IMAGE", "laplace_pixel_epsilon", "laplace_image_epsilon", "laplace_scale_for",
]
