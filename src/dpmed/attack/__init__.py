"""Empirical reconstruction attacks on what a DP arm releases (METHODS.md s.7; 004_6210268d59b6f8e5.txt's realistic
threat model): the imprint attack of Fowl et al. 2022 through dpmed's own DP-SGD step, its success criterion, and
its success rate over many batches."""

from dpmed.attack.experiment import (ATTACKED, AttackImages, AttackResult, attack_arm, attack_batch_size,
                                     blind_prototypes, run_imprint_attack)
from dpmed.attack.imprint import (IMPRINT_STRUCTURES, ImagePrior, ImprintBins, ImprintBlock, ImprintedModel,
                                  ImprintGradients, ImprintStructure, Reconstructions, brightness, imprint_model,
                                  invert_imprint, release_imprint_gradients)
from dpmed.attack.success import (Matches, SuccessThreshold, calibrate_threshold, clopper_pearson,
                                  match_reconstructions, noise_level_at, normalised_cross_correlation,
                                  structural_similarity)

__all__ = [
    "AttackImages", "AttackResult", "run_imprint_attack", "attack_arm", "attack_batch_size", "ATTACKED",
    "blind_prototypes",
    "IMPRINT_STRUCTURES", "ImagePrior", "ImprintBins", "ImprintBlock", "ImprintedModel", "ImprintGradients",
    "ImprintStructure",
    "Reconstructions", "brightness", "imprint_model", "invert_imprint", "release_imprint_gradients",
    "Matches", "SuccessThreshold", "calibrate_threshold", "clopper_pearson", "match_reconstructions",
    "noise_level_at", "normalised_cross_correlation", "structural_similarity",
]
