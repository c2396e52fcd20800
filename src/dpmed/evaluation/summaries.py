"""The evaluation's blocks of a run record, as types: what run.json's ``fairness`` and ``explanations`` hold.

The evaluation stage builds them (:func:`~dpmed.evaluation.fairness.evaluate_fairness`,
:func:`~dpmed.evaluation.explanations.explain_test_set`); the record (`dpmed.records.RunRecord`), results.csv, the
comparisons and the report read their fields, never string keys of a parsed file, so a renamed or missing field is
an error where the file is read, not a silent gap in a table. Their JSON is the one run.json has always held: records
written before these types read unchanged (a field added since has a default that says what older records did).

Every number is JSON-safe: None where it is undefined (nan or infinite), as run.json is written without nan.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Estimate", "MeanEstimate", "GroupFairness", "Spread", "WorstGroup",
           "AttributeFairness", "Fairness", "Explanations"]


class _Summary(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Estimate(_Summary):
    """A metric with its bootstrap interval (BCa or percentile, :func:`dpmed.evaluation.weighted.estimate`; None
    where undefined)."""

    value: float | None
    low: float | None = None
    high: float | None = None


class MeanEstimate(Estimate):
    """A mean over per-image values with its interval; n: the images whose value is defined (the others left out)."""

    n: int


# ---------------------------------------------------------------------------------------------------------- fairness


class GroupFairness(_Summary):
    """One group of one attribute (`dpmed.evaluation.fairness`). n_positive and demographic_parity_difference exist
    for binary and multilabel tasks only (a multiclass task has no single decision yhat = 1); a multilabel task's
    n_positive sums its findings' positives, and n_positive_by_label gives each finding's (a multiclass task's: each
    class's images; None in older records)."""

    n: int
    auroc: Estimate
    accuracy: Estimate
    accuracy_parity_difference: Estimate
    n_positive: int | None = None
    demographic_parity_difference: Estimate | None = None
    n_positive_by_label: list[int] | None = None


class Spread(Estimate):
    """A statistic over the groups of an attribute, with the redraws that left it undefined (a compared group absent,
    or without a class the statistic needs) and so out of its interval; None in records that predate the count."""

    undefined_redraws: int | None = None


class WorstGroup(Spread):
    """The lowest group AUROC, and which group it is at the point value (None where no group's AUROC is defined)."""

    group: str | None = None


class AttributeFairness(_Summary):
    """Fairness across the groups of one attribute. status "n/a" (with its reason) where no test image records the
    attribute; then there are no numbers. The two spreads exist for binary and multilabel tasks only."""

    status: Literal["ok", "n/a"]
    reason: str | None = None
    reference: str | None = None
    groups: dict[str, GroupFairness] = Field(default_factory=dict)
    worst_group_auroc: WorstGroup | None = None
    demographic_parity_difference: Spread | None = None
    equalized_odds_difference: Spread | None = None
    equalized_odds_excluded_groups: list[str] = Field(default_factory=list)


class Fairness(_Summary):
    """A run's fairness block: the decision thresholds (chosen on validation; None for multiclass, which decides by
    argmax), the redraws' settings and unit (records before the patient bootstrap redrew images), and per attribute
    its :class:`AttributeFairness`."""

    definitions: dict[str, str]
    thresholds: list[float] | None
    n_test: int
    n_resamples: int
    bootstrap_seed: int
    bootstrap_unit: Literal["patient", "image"] = "image"
    confidence: float
    age_bins: list[float]
    attributes: dict[str, AttributeFairness]

    def ok(self, attribute: str) -> AttributeFairness | None:
        """The attribute's numbers, or None where it is absent or not applicable."""
        entry = self.attributes.get(attribute)
        return entry if entry is not None and entry.status == "ok" else None


# ---------------------------------------------------------------------------------------------------- explanations


class Explanations(_Summary):
    """A run's explanations block (`dpmed.evaluation.explanations`): how the CAMs were made, every faithfulness
    metric with its interval, and the all-zero maps among the CAMs the metrics read. The lesion fields exist where
    the explained images carry lesion masks (``mask_note`` says where none does); ``n_zero_lesion_cams`` is None in
    records that predate the count. seconds: the evaluation's time for them;
    None in shareable files where the run's own seconds are private (`dpmed.records.RunRecord.shareable`)."""

    method: str
    method_reference: str
    target_layer: str
    explained_class: str
    n_images: int
    n_zero_cams: int
    bootstrap_unit: Literal["patient", "image"] = "image"
    score_image_min: float | None
    score_image_max: float | None
    deletion_steps: int
    baseline: str
    labels: dict[str, str]
    metrics: dict[str, MeanEstimate]
    image_seed: int | None = None           # the seed that drew the explained test images; None: given, not drawn
    lesion_class: int | None = None
    # what the lesion maps explain, in words: "class 1", or a multilabel run's "the sum of every finding's score";
    # None in records that predate it (their maps are of ``lesion_class``)
    lesion_target: str | None = None
    pointing_tolerance_px: float | None = None
    n_masked_images: int | None = None
    n_zero_lesion_cams: int | None = None
    mask_area_share: float | None = None
    mask_note: str | None = None
    seconds: float | None = None
