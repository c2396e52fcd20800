"""Wording shared by the privacy cards of several mechanisms: what a guarantee covers, where its randomness came
from, and the label of a reproducible-mode run."""

from __future__ import annotations

from dpmed.mechanisms.base import PrivacyCard
from dpmed.randomness import NOT_DP_REPRODUCIBLE

__all__ = ["COVERAGE", "SECURE_RANDOMNESS", "LABELS_IN_CLEAR", "label_randomness", "label_not_dp"]

COVERAGE = "the training images; validation images (threshold choice) and test images are not protected"
SECURE_RANDOMNESS = ("privacy randomness (sampling, noise) fresh from OS entropy for this run, AES-128-CTR, "
                     "never written to a shareable file")
# A study without DP-SGD runs reports its exact training counts, of images and of patients (`records.DatasetSummary`).
LABELS_IN_CLEAR = ("the labels, how many images there are and how many patients they come from are released in the "
                   "clear: local DP on the pixels protects none of them")
# eps_pixel is per value of the C x H x W image the noise is added to. A source pixel copied into several of them (a
# grey film read with channels: 3, or enlarged by the resize) is protected only as a group of its copies.
PIXEL_VALUE = ("the same for one pixel value of the image as noised (a source pixel copied into several values, as "
               "a grey film read with 3 channels or enlarged, is protected only as their group)")
# Local DP draws noise only: no sampling is private (the model then trains on the noised images as any data).
LOCAL_RANDOMNESS = SECURE_RANDOMNESS.replace("(sampling, noise)", "(the pixels' noise)")


def label_not_dp(card: PrivacyCard, why: str, **update: object) -> PrivacyCard:
    """``card`` marked not DP: ``why`` goes first in its statement and in its patient note (whose group eps, derived
    from the accounted eps, holds no more than that does), the accounted values are kept after "as accounted"."""
    group = card.patient_guarantee
    if group is not None and group.statement:
        group = group.model_copy(update={"statement": f"{why}; as accounted: {group.statement}"})
    return card.model_copy(update={"is_dp": False, "statement": f"{why}; as accounted: {card.statement}",
                                   "patient_guarantee": group, **update})


def label_randomness(card: PrivacyCard, randomness_mode: str) -> PrivacyCard:
    """A reproducible run's eps holds only against someone who does not know the published seed: say so first."""
    if randomness_mode != "reproducible":
        return card
    return label_not_dp(card, "NOT DP against anyone who knows the seed (reproducible mode)",
                        randomness=NOT_DP_REPRODUCIBLE)
