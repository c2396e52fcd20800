"""Evaluation: predictions once, then metrics as pure functions of them."""

from dpmed.evaluation.bootstrap import Redraws, bootstrap_indices, bootstrap_redraws, percentile_interval
from dpmed.evaluation.predictions import Predictions, SplitPredictions, load_predictions, predict, save_predictions
from dpmed.evaluation.summaries import Estimate
from dpmed.evaluation.utility import auroc, evaluate_utility, youden_threshold

__all__ = [
    "Estimate", "Redraws", "bootstrap_indices", "bootstrap_redraws", "percentile_interval", "load_predictions",
    "predict", "save_predictions", "Predictions", "SplitPredictions", "auroc", "evaluate_utility",
    "youden_threshold",
]
