"""The record of one finished run, as a type: what ``run.json`` holds (``model_dump_json`` / ``model_validate_json``).

Everything downstream of a run (the study's resume check and budget, results.csv, comparisons, the report) reads
:class:`RunRecord` fields, never string keys of a parsed file. A run.json holds only what may be shared
(`dpmed.folders`): the plan, the privacy card and ledger, metrics of the validation and test sets, timings (a DP-SGD
run's seconds, and those of a run that trained beside others, excepted: `Timing`) and versions.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (BaseModel, ConfigDict, Field, PlainSerializer, PlainValidator, ValidationError, ValidationInfo,
                      field_validator)

from dpmed.accounting import Ledger
from dpmed.config import RunPlan, Study, TrainingConfig
from dpmed.data.version import DECODING_VERSION
from dpmed.evaluation.summaries import Estimate, Explanations, Fairness
from dpmed.evaluation.version import EVALUATION_VERSION, UNRECORDED
from dpmed.errors import ConfigError, first_invalid
from dpmed.folders import RETRAIN_NOTE, write_text_atomic
from dpmed.mechanisms import DpSgdPlan, PrivacyCard, ReconstructionRecord

__all__ = ["RunRecord", "DataSummary", "Timing", "read_timing", "AuditSummary", "AttackRecord", "Estimate",
           "read_record", "StudyPrivacy", "PretrainRecord", "StartRecord", "read_pretrain_record",
           "DatasetSummary", "ResolvedStudy"]


def _ledger(value: object) -> Ledger:
    return value if isinstance(value, Ledger) else Ledger.from_dict(value)  # type: ignore[arg-type]


# The privacy ledger, held as the accounting type and written as its own JSON form (exact round trip).
LedgerField = Annotated[Ledger, PlainValidator(_ledger), PlainSerializer(lambda ledger: ledger.to_dict())]


class _Record(BaseModel):
    # inf (a study with a non-private arm has eps = infinity) is written as "Infinity", not as null
    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True, ser_json_inf_nan="strings")


class DataSummary(_Record):
    """The dataset a run trained on: its name, task, and the reader's provenance (format, path, preprocessing, rows
    left out, split; its keys differ by layout, so they stay a mapping)."""

    name: str
    task: str
    source: dict[str, Any] = Field(default_factory=dict)


class Timing(_Record):
    """Wall time of the run's last session (a resumed run counts only that), where it ran and with how many CPU
    threads (its numbers depend on that count), and the optimiser step a checkpoint continued from (0: none).

    A DP-SGD run's seconds are None in run.json (`shareable`) and kept in its private folder: its training time
    grows with the number of units Poisson sampling drew and with their images, statistics of the training set
    that no eps covers (a timing side channel; Jin et al. 2022 show such channels in DP libraries). So is the step
    it resumed from: how far a run had come when it was stopped depends on the same times. So are those of a run
    that did not train ``alone`` (--workers 2 or more, Ray): other runs of the study shared its machine, a DP-SGD
    run's load included, and its seconds carry that load. A file without ``alone`` was written by an older dpmed,
    which did not record it, and reads as alone (as its serial runs were; its runs with workers published theirs).

    ``resumed_from`` counts steps for every kind of run, as the log's "continues from its checkpoint at step 28 of
    112" does, and ``resumed_unit`` says so in the file. Before it did, a run without DP-SGD recorded the epoch: its
    run.json, which has no ``resumed_unit``, is read with "epoch" (`RunRecord`), so no older epoch is read as a step.
    A timing.json without it is read with "step": right for a DP-SGD run's, the only ones shown (`dpmed.outputs`);
    another run's is read only for whether it resumed (`dpmed.timing`)."""

    train_seconds: float | None
    total_seconds: float | None
    device: str
    threads: int
    resumed_from: int | None = 0
    resumed_unit: Literal["step", "epoch"] = "step"
    alone: bool = True     # False: other runs of the study trained at the same time (`dpmed.executors`)

    @property
    def resumed_at(self) -> str | None:
        """Where a checkpoint continued from, with its unit ("step 28"); None for a run trained in one go and for the
        run.json of a run whose seconds are private, which withholds it."""
        return f"{self.resumed_unit} {self.resumed_from}" if self.resumed_from else None

    def is_private(self, plan: RunPlan) -> bool:
        """Whether the run's seconds are private: a DP-SGD run's, and those of any run that did not train alone."""
        return isinstance(plan.privacy, DpSgdPlan) or not self.alone

    def shareable(self, plan: RunPlan) -> Timing:
        """What run.json may hold: all of it for a run without DP-SGD that trained alone; otherwise no seconds and no
        step it resumed from."""
        if self.is_private(plan):
            return self.model_copy(update={"train_seconds": None, "total_seconds": None, "resumed_from": None})
        return self

    def write(self, path: Path) -> None:
        """Into the run's private folder, owner-only: a DP-SGD run's seconds grow with what sampling drew."""
        write_text_atomic(path, self.model_dump_json(indent=2), owner_only=True)


def read_timing(path: Path) -> Timing | None:
    """The full timing a run kept in its private folder; None where there is none (a run finished by an older
    dpmed, or a file that is not one)."""
    try:
        return Timing.model_validate_json(Path(path).read_bytes())
    except (OSError, ValidationError):
        return None


class AuditSummary(_Record):
    """That a run was audited, and where the result is: it depends on the secret canary bits, so it is private.
    ``n_canaries``: the number the arm asked for; each training patient is drawn at rate m / N, and how many were is
    a statistic of the training set, kept with the result."""

    n_canaries: int
    kind: str
    result: str


class AttackRecord(_Record):
    """The imprint reconstruction attack on a DP-SGD arm (`dpmed.attack`; the realistic threat model of Ziller et al.
    2024): ``n_success`` of ``n_trials`` attacked images were reconstructed (SSIM at or above ``threshold``, the
    ``threshold_quantile`` of what plausible public images reach), ``rate`` with its Clopper-Pearson interval at
    ``ci_level``; the per-batch rate and, beside it, chance: the rate of the better, over all batches, of two blind
    attacks answering with as many public images as the attack kept (random ones, and the median image of as many
    brightness groups; `dpmed.attack.experiment`). Counts and scores only:
    the reconstructions are kept in the run's private folder. ``attacked``: which images stood in for a batch."""

    structure: str
    n_bins: int
    batch_size: int
    n_batches: int
    grouped: bool
    threshold: float
    threshold_quantile: float
    n_trials: int
    n_success: int
    rate: float
    rate_low: float
    rate_high: float
    ci_level: float
    batch_rate: float
    chance_rate: float
    mean_best_ssim: float | None
    mean_best_ncc: float | None
    attacked: str


class PretrainRecord(_Record):
    """Public pretraining (`dpmed.pretraining`): what it trained on and how, and how it did on the public validation
    images. Nothing here is protected by any eps, and nothing here depends on the private images: the overlap checks
    are listed, never their counts (`dpmed.data.overlap` says why).

    data: the public dataset's reader record (format, path, preprocessing, cohort). public: the user's statement of
    why the data are public. key: the content hash that names the cached weights (public images, settings, model).
    validation_auroc: the pretrained model's (macro) AUROC on the public validation split."""

    dataset: str
    task: str
    label_names: tuple[str, ...] = ()
    public: str
    data: dict[str, Any] = Field(default_factory=dict)
    n_train: int
    n_val: int
    n_test: int
    image_shape: tuple[int, ...]
    model: str
    training: TrainingConfig
    seed: int
    steps: int
    seconds: float
    key: str
    weights: str
    sha256: str
    validation_auroc: float | None = None
    overlap_checks: dict[str, str] = Field(default_factory=dict)
    near_duplicate_bits: int
    start_weights: str | None = None   # sha256 of model.weights the pretraining itself started from, if any

    def write(self, path: Path) -> None:
        write_text_atomic(path, self.model_dump_json(indent=2))


def read_pretrain_record(path: Path) -> PretrainRecord:
    return PretrainRecord.model_validate_json(Path(path).read_bytes())


class StartRecord(_Record):
    """Where every arm's model started and what of it trained (`dpmed.models.weights`).

    weights / sha256: the state dict loaded (model.weights, or the pretrain stage's cached weights); trained_on: what
    they were trained on (model.weights_source, or the pretraining's public statement and dataset); trainable:
    "all", "head" or the number of last blocks; n_trainable / n_frozen: parameter counts (DP-SGD clips and noises
    the trainable ones only); loaded: tensors copied from the file; kept: head keys left at initialisation (another
    class count, or public pretraining for other classes); head_rows: where public pretraining had the same classes
    in another order, the pretrained head's output row for each of the study's outputs (every run loads the head
    in that order). pretraining: the pretrain stage's record where the weights come from it."""

    weights: str | None = None
    sha256: str | None = None
    trained_on: str | None = None
    trainable: str | int = "all"
    n_trainable: int
    n_frozen: int
    loaded: int = 0
    kept: tuple[str, ...] = ()
    head_rows: tuple[int, ...] | None = None
    pretraining: PretrainRecord | None = None

    @property
    def given_sha256(self) -> str | None:
        """The sha256 of the study's ``model.weights`` file as this start read it: the weights loaded, or those public
        pretraining started from; None where the study names none (or an older dpmed's pretraining record keeps it
        not). What `dpmed status` hashes the file against, as it reads neither the public nor the training images."""
        return self.sha256 if self.pretraining is None else self.pretraining.start_weights

    @property
    def trainable_text(self) -> str:
        if isinstance(self.trainable, int):
            return f"the head and the last {self.trainable} block(s)"
        return {"all": "all parameters", "head": "the head only"}.get(self.trainable, str(self.trainable))


class RunRecord(_Record):
    """One finished run. metrics: utility on the test set (`dpmed.evaluation.evaluate_utility`: a flat mapping whose
    keys depend on the task, e.g. ``test_auroc``, ``test_auroc_low``, ``test_auroc[<label>]``, and the one word
    ``bootstrap_unit``, "patient" or "image", absent from records that predate it, which redrew images); fairness
    and explanations: their evaluation blocks (`dpmed.evaluation.summaries`) where the study asked for them;
    evaluation_version: the version of dpmed's evaluation methods that computed them (`dpmed.evaluation.version`;
    a run.json without it predates the field and reads as the version before it came)."""

    run_id: str
    arm: str
    mechanism: str
    seed: int
    plan: RunPlan
    data: DataSummary
    privacy: PrivacyCard
    reconstruction: ReconstructionRecord | None = None
    ledger: LedgerField
    metrics: dict[str, float | int | str | None]
    fairness: Fairness | None = None
    explanations: Explanations | None = None
    evaluation_version: int = Field(default=EVALUATION_VERSION, ge=1)     # read_record: UNRECORDED where absent
    audit: AuditSummary | None = None
    attack: AttackRecord | None = None
    start: StartRecord | None = None   # None: randomly initialised, every parameter trained
    timing: Timing
    versions: dict[str, str] = Field(default_factory=dict)

    @field_validator("timing", mode="before")
    @classmethod
    def _resumed_unit_of_older_records(cls, timing: object, info: ValidationInfo) -> object:
        """A run.json written before its timing named the unit of ``resumed_from`` holds the epoch for a run
        without DP-SGD and the step for a DP-SGD run: read so, not as the step every run records now. (On the field,
        not the record: a validator before the whole record would read the rest of run.json as Python, not JSON,
        where a list is no tuple.)"""
        if not isinstance(timing, dict) or "resumed_unit" in timing:
            return timing
        return {**timing, "resumed_unit": "step" if info.data.get("mechanism") == "dp_sgd" else "epoch"}

    @property
    def bootstrap_unit(self) -> str:
        """What the run's test-set intervals redrew: "patient" or "image" (a record without the word predates the
        patient bootstrap, and redrew images)."""
        return str(self.metrics.get("bootstrap_unit", "image"))

    @property
    def interval(self) -> str:
        """The interval of the run's utility metrics and fairness groups, "percentile" or "bca"
        (``evaluation.interval``); a record without it predates the setting, whose intervals were all percentile."""
        return str(self.metrics.get("interval") or "percentile")

    def estimate(self, metric: str) -> Estimate:
        """``metric`` (e.g. "test_auroc") with its interval; value None where the metric is undefined or absent."""
        def get(key: str) -> float | None:
            v = self.metrics.get(key)
            return None if v is None or (isinstance(v, float) and not math.isfinite(v)) else float(v)
        return Estimate(value=get(metric), low=get(f"{metric}_low"), high=get(f"{metric}_high"))

    def shareable(self) -> RunRecord:
        """What run.json and the public outputs may hold: the timing as `Timing.shareable` gives it and, where that
        withholds the run's seconds, its explanations without theirs (timed beside the same load, or after a DP-SGD
        run's training)."""
        timing = self.timing.shareable(self.plan)
        explanations = self.explanations
        if explanations is not None and self.timing.is_private(self.plan):
            explanations = explanations.model_copy(update={"seconds": None})
        return self.model_copy(update={"timing": timing, "explanations": explanations})

    def write(self, path: Path) -> None:
        """run.json, written last and atomically: the run is finished exactly when it exists."""
        write_text_atomic(path, self.model_dump_json(indent=2))


def read_record(path: str | Path) -> RunRecord:
    """The run record at ``path``; a ConfigError naming the file if it is not one this dpmed wrote."""
    try:
        record = RunRecord.model_validate_json(Path(path).read_bytes())
    except OSError as exc:
        raise ConfigError(f"cannot read the run record {path}: {exc.strerror or exc}") from None
    except ValidationError as exc:
        if Path(path).name != "run.json":                          # another file passed for one: no advice to retrain
            raise ConfigError(f"{path} is not a run record ({first_invalid(exc)}); a run's record is the run.json "
                              "in its folder, runs/<run id>/run.json") from None
        raise ConfigError(f"{path} is not a run record this version of dpmed can read ({first_invalid(exc)}); it "
                          "may come from another version: run the study into another output folder (--out), or "
                          f"delete that run's folder to retrain it {RETRAIN_NOTE}") from None
    if "evaluation_version" not in record.model_fields_set:     # written before the field: by the methods before it
        record = record.model_copy(update={"evaluation_version": UNRECORDED})
    return record


class StudyPrivacy(_Record):
    """The study's privacy as a whole (`dpmed.budget`). dp_sgd_epsilon: all DP-SGD runs composed, for add/remove one
    ``unit`` (runs of mixed units: the patient, where every image-unit run caps a patient's images; None where they
    cannot be composed, or the accountant could not certify). epsilon: everything the study releases (inf with a
    run without privacy; None with local-DP runs, or mixed units without a patient total). local_dp_epsilon at
    local_dp_delta: every local-DP run's release of the same images composed, per image, for the relation "any two
    images" (a study's total under that relation, never to be added to DP-SGD's eps; None without local-DP runs, in
    reproducible mode, or with a
    local run that holds no guarantee; absent from a study.yaml written before it). Run ids name the runs in each
    class."""

    dp_sgd_runs: tuple[str, ...]
    not_private: tuple[str, ...]
    local_dp: tuple[str, ...]
    unit: str | None
    delta: float | None
    accountant: str | None
    dp_sgd_epsilon: float | None
    epsilon: float | None
    reproducible: bool
    statement: str
    local_dp_epsilon: float | None = None
    local_dp_delta: float | None = None


class DatasetSummary(_Record):
    """The study's dataset as the report describes it: sizes of the splits, shape; the training set's size exactly
    (n_train images, n_train_patients) only in a study without DP-SGD runs, else None, and released_sizes holds the
    DP counts its DP-SGD runs planned from, at size_epsilon each (`dpmed.released_size`); the
    task's class (or finding) names, in label order: for a binary task the second is the *positive* class, the one
    sensitivity counts (in some public binary sets it is "benign" or "normal", not the disease); ordinal: the classes
    are ordered grades (quadratic-weighted kappa is reported); decoding_version: the version of dpmed's image decoding
    that read the images (`dpmed.data.version`; `dpmed.states.read_resolved` reads a study.yaml without it as
    ``UNRECORDED``), so that a resumed study can tell a changed decoder from a changed file."""

    name: str
    task: str
    label_names: tuple[str, ...] = ()
    ordinal: bool = False
    synthetic: bool
    description: str
    n_train: int | None
    n_val: int
    n_test: int
    n_train_patients: int | None
    released_sizes: dict[str, int] = Field(default_factory=dict)
    size_epsilon: float | None = None
    patients_known: bool
    image_shape: tuple[int, ...]
    decoding_version: int = Field(default=DECODING_VERSION, ge=1)

    @property
    def positive_class(self) -> str | None:
        """The class a binary task's sensitivity counts (label 1); None for other tasks or unknown names."""
        return self.label_names[1] if self.task == "binary" and len(self.label_names) == 2 else None

    @property
    def negative_class(self) -> str | None:
        """The class a binary task's specificity counts (label 0)."""
        return self.label_names[0] if self.task == "binary" and len(self.label_names) == 2 else None


class ResolvedStudy(_Record):
    """study.yaml: the study as loaded, its dataset, every run's plan (every derived value), and the study's privacy
    as a whole. Written before the first run trains."""

    study: Study
    dataset: DatasetSummary
    study_privacy: StudyPrivacy
    runs: list[RunPlan]

    @property
    def name(self) -> str:
        return self.study.name

    def label_names(self, records: list[RunRecord]) -> list[str]:
        """The task's label names in label order; where study.yaml predates ``DatasetSummary.label_names``, those of
        the first run's per-label AUROCs (``test_auroc[<name>]``; not their ``_low`` / ``_high``)."""
        if self.dataset.label_names:
            return list(self.dataset.label_names)
        return next(([k[len("test_auroc["):-1] for k in r.metrics if k.startswith("test_auroc[") and k.endswith("]")]
                     for r in records if any(k.startswith("test_auroc[") for k in r.metrics)), [])
