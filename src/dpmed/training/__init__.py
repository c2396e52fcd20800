"""Training: batches (Poisson for DP-SGD), the DP-SGD step, and the loop."""

from dpmed.training.dp_sgd import DpSgdStep
from dpmed.training.loop import (DpSgdPlan, TrainResult, checkpoint_review, dp_sgd_schedule, resolve_device,
                                 run_threads, torch_threads, train)
from dpmed.training.objectives import OBJECTIVES, Objective
from dpmed.training.sampling import poisson_batches, shuffled_batches

__all__ = [
    "DpSgdStep", "DpSgdPlan", "TrainResult", "checkpoint_review", "dp_sgd_schedule", "resolve_device",
    "run_threads", "torch_threads", "train",
    "OBJECTIVES", "Objective", "poisson_batches", "shuffled_batches",
]
