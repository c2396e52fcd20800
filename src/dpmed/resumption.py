"""What a study may reuse of the finished runs its folder holds: the same data and settings, or nothing.

A finished run is reused only where rerunning it would train the same thing: its plan's settings (the model included),
its privacy randomness and the data (checked by private fingerprints of every split, since study.yaml's sizes and shape
do not tell a corrected label file or age column apart). Where the folder's study.yaml shows that another version of
dpmed's image decoding read its runs' images (`dpmed.data.version`), the refusal says so and how it changed: the files
may be unchanged. New names for the same data (a CSV study's data.name and
data.classes) only rename the runs. Anything else is refused with a message naming what differs, never mixed into one
table. A run evaluated with other settings than the study's now (bootstrap, confidence level, interval,
fairness, explanations), or by another version of dpmed's evaluation methods (its record's ``evaluation_version``:
`dpmed.evaluation.version`), is reused and evaluated again from its released model (`dpmed.run.reevaluate`), except
where ``training_metrics`` differs, which only training can compute (where only the methods differ, the run's private
training-set metrics are kept as its training computed them). Runs the study file no longer lists are returned apart:
their files were released all the same, so the study's privacy counts them (`dpmed.budget`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np

from dpmed.config import RunPlan, Study
from dpmed.data import Dataset
from dpmed.data.version import decoded_since
from dpmed.errors import ConfigError
from dpmed.evaluation.version import EVALUATION_VERSION
from dpmed.evaluation.predictions import load_predictions
from dpmed.folders import CAM_KEYS, EXAMPLE_KEYS, RETRAIN_NOTE, RunFolder, StudyFolder, read_arrays
from dpmed.mechanisms import claims_beyond
from dpmed.randomness import NOT_DP_REPRODUCIBLE
from dpmed.records import DatasetSummary, ResolvedStudy, RunRecord, read_record

__all__ = ["finished_runs", "data_fingerprints", "attributes_fingerprint", "randomness_of", "setting_differences",
           "evaluated_otherwise", "unreadable_outputs"]


def setting_differences(before: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """``training.learning_rate: 0.001 in the finished run, 0.01 now``, one per differing setting, by dotted key
    (``swept.0.value``). A section set on one side only is one line, not one per key it holds ("audit: not set in the
    finished run, {canaries: 10, ...} now"); None reads "not set", a key one side lacks (another mechanism's plan, a
    record of another dpmed) "absent"."""
    return [f"{key}: {' in the finished run, '.join(_told(a, b))} now"
            for key, a, b in sorted(_differing(before, now, ""), key=lambda d: d[0])]


_ABSENT = object()     # a key one side does not have


def _differing(a: Any, b: Any, key: str) -> list[tuple[str, Any, Any]]:
    """(dotted key, value before, value now) of each differing value in two nested JSON data, compared key by key
    where both are mappings (or lists of one length) and as a whole otherwise. A mapping or list one side lacks
    compares as an empty one, which holds no setting to differ (so a record that lacks an empty section is reused)."""
    a, b = (type(b)() if a is _ABSENT and isinstance(b, (dict, list)) else a,
            type(a)() if b is _ABSENT and isinstance(a, (dict, list)) else b)
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in a.keys() | b.keys() for d in _differing(a.get(k, _ABSENT), b.get(k, _ABSENT), f"{key}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _differing(x, y, f"{key}.{i}")]
    return [] if a == b else [(key.lstrip("."), a, b)]


def _shown(value: Any) -> str:
    """A setting's value as the message writes it: None as "not set", a key one side lacks as "absent", a section as
    the study file would ({canaries: 10, kind: mislabelled})."""
    return "absent" if value is _ABSENT else "not set" if value is None else _written(value)


def _written(value: Any) -> str:
    """``value`` in YAML's flow style, as a study file writes it."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_written(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(map(_written, value)) + "]"
    return "null" if value is None else str(value)


def _told(a: Any, b: Any) -> tuple[str, str]:
    """Two differing values as text; long floats to the fewest figures (four at least) that tell them apart, not
    all seventeen (a noise multiplier read 3.4119000860365762). Short ones (0.001, 3.0) as Python writes them."""
    if not (isinstance(a, float) and isinstance(b, float)) or max(len(str(a)), len(str(b))) <= 10:
        return _shown(a), _shown(b)
    figures = next((p for p in range(4, 17) if f"{a:.{p}g}" != f"{b:.{p}g}"), 17)
    return f"{a:.{figures}g}", f"{b:.{figures}g}"


# What says that two datasets are the same data to a finished run (not where the files lie, nor the description).
# (The training set's size is checked with the images, by the private fingerprint: study.yaml may not hold it.)
_SAME_DATA = ("name", "task", "label_names", "n_val", "n_test", "image_shape")


# What only names the data (a CSV study's data.name and data.classes): where the private fingerprint shows the same
# images and labels, a new name renames the finished runs (a new class name evaluates them again, for the per-class
# metrics it keys) rather than refusing them as other data.
_NAMES = ("name", "label_names")


def _other_data(before: ResolvedStudy, summary: DatasetSummary) -> dict[str, str]:
    """How the dataset of the folder's finished runs (its study.yaml) differs from ``summary`` (the dataset now), one
    line per field, by field."""
    old = before.dataset.model_dump(mode="json", include=set(_SAME_DATA))
    now = summary.model_dump(mode="json", include=set(_SAME_DATA))
    return {key: f"dataset.{key}: {old[key]} in the finished runs, {now[key]} now" for key in _SAME_DATA
            if old[key] != now[key]}


def _renamed_only(before: ResolvedStudy, summary: DatasetSummary, differ: dict[str, str]) -> bool:
    """Whether ``differ`` only renames the dataset or its classes (as many names as before): the caller still checks
    the fingerprint, which must have been kept."""
    return set(differ) <= set(_NAMES) and len(before.dataset.label_names) == len(summary.label_names)


def _other_evaluation(before: ResolvedStudy, study: Study) -> list[str]:
    """How the evaluation settings of the folder's finished runs (its study.yaml) differ from ``study``'s: every
    run's metrics, intervals and explanations were computed with them, and one report states one level."""
    return [f"evaluation.{line}" for line in setting_differences(before.study.evaluation.model_dump(mode="json"),
                                                                  study.evaluation.model_dump(mode="json"))]


def _recorded_evaluation(record: RunRecord) -> dict[str, Any]:
    """The evaluation settings a finished run's own record shows (the subset it keeps), by the study file's keys."""
    shown: dict[str, Any] = {}
    for key, metric in (("bootstrap_resamples", "n_resamples"), ("confidence", "confidence"),
                        ("bootstrap_seed", "bootstrap_seed")):
        if record.metrics.get(metric) is not None:
            shown[key] = record.metrics[metric]
    # Records from before the setting existed were evaluated with the percentile interval, the default: a study that
    # now asks for BCa evaluates them again, one that keeps the default reuses them.
    shown["interval"] = record.interval
    shown["fairness"] = None if record.fairness is None else {"age_bins": list(record.fairness.age_bins),
                                                              "attributes": list(record.fairness.attributes)}
    e = record.explanations
    shown["explanations"] = None if e is None else {
        "method": e.method, "seed": e.image_seed, "deletion_steps": e.deletion_steps, "n_images": e.n_images,
        **({} if not e.n_masked_images else {"pointing_tolerance": e.pointing_tolerance_px})}
    return shown


def evaluated_otherwise(record: RunRecord, study: Study, n_test: int) -> list[str]:
    """How the evaluation a finished run's record shows differs from ``study``'s. The folder's study.yaml says it for
    all runs at once; this reads each record, so that runs are not reused under other settings where study.yaml is
    gone, and so that a report rebuilt from a folder whose study.yaml a stopped rerun rewrote names the runs it did
    not evaluate again (`dpmed.outputs`)."""
    shown = _recorded_evaluation(record)
    config = study.evaluation.model_dump(mode="json")
    now: dict[str, Any] = {k: config[k] for k in shown if k not in ("fairness", "explanations")}
    now["fairness"] = None if config["fairness"] is None else {k: config["fairness"][k]
                                                               for k in ("age_bins", "attributes")}
    asked, explained = config["explanations"], shown["explanations"]
    now["explanations"] = None if asked is None else {k: asked[k] for k in ("method", "seed", "deletion_steps")}
    if asked is not None and explained is not None:
        # a record holds the images it explained: n_images, or the whole test set where that is smaller
        now["explanations"]["n_images"] = min(asked["n_images"], n_test)
        if "pointing_tolerance" in explained:      # recorded where lesion masks were explained
            now["explanations"]["pointing_tolerance"] = asked["pointing_tolerance"]
    return [f"evaluation.{line}" for line in setting_differences(shown, now)]


def evaluated_otherwise_than_saved(record: RunRecord, resolved: ResolvedStudy) -> list[str]:
    """:func:`evaluated_otherwise` against a study folder's study.yaml, each line said so ("evaluation.interval:
    percentile in the finished run, bca in study.yaml"): what `dpmed report` and `dpmed status` read from a folder."""
    return [line.removesuffix(" now") + " in study.yaml"
            for line in evaluated_otherwise(record, resolved.study, resolved.dataset.n_test)]


def unreadable_outputs(folder: RunFolder) -> str:
    """Which of a finished run's evaluation files cannot be read ("its predictions.npz cannot be read", "its
    predictions.npz is missing and its cams.npz cannot be read"), or "" where all read: cut short, bytes overwritten
    or another program's. They are functions of the released model and the test images, so `dpmed run` writes them
    again from its model (`dpmed.run.reevaluate`) rather than retraining it, which would spend privacy again. A CAM
    or examples file that is absent is no damage (the run's settings asked for none); predictions every run has."""
    problems = []
    try:
        load_predictions(folder.predictions)
    except FileNotFoundError:
        problems.append(f"its {folder.predictions.name} is missing")
    except ValueError:
        problems.append(f"its {folder.predictions.name} cannot be read")
    for path, keys in ((folder.cams, CAM_KEYS), (folder.examples, EXAMPLE_KEYS)):
        try:
            read_arrays(path, keys)
        except FileNotFoundError:
            continue
        except ValueError:
            problems.append(f"its {path.name} cannot be read")
    return " and ".join(problems)


def _other_class_names(record: RunRecord, label_names: tuple[str, ...] | list[str]) -> list[str]:
    """The class names a finished run's per-class metrics (``test_auroc[<name>]``, multiclass and multilabel) are
    keyed by, where they are not ``label_names`` (the data's now): a study that renames the classes rewrites
    study.yaml before it evaluates the runs again under the new names, so after a stop during that evaluation (or
    without study.yaml) only each record tells that it still holds the old ones."""
    keyed = [k[len("test_auroc["):-1] for k in record.metrics if k.startswith("test_auroc[") and k.endswith("]")]
    if not keyed or keyed == list(label_names):
        return []
    return [f"dataset.label_names: {keyed} in the finished run, {list(label_names)} now"]


def randomness_of(record: RunRecord) -> str | None:
    """The privacy randomness a finished run drew ("secure" or "reproducible", as its card says), None for a run
    that drew none (no privacy)."""
    card = record.privacy.randomness
    return None if card is None else "reproducible" if card == NOT_DP_REPRODUCIBLE else "secure"


def data_fingerprints(dataset: Dataset) -> tuple[str, str]:
    """(sha256 over every split's images, labels and patient ids, in order; the same over the training split alone),
    in one pass over the images. The first is what finished runs trained and were evaluated on: the sizes and shape
    in study.yaml do not tell a corrected label file or another file of the same shape apart. The second keys the DP
    counts of the training set (`dpmed.released_size`): a corrected test label leaves the training set, and so its
    count, as it was, and a key over every split drew and charged a second count of it. Functions of the training
    images, so they are kept in ``private/`` only."""
    digest, training = hashlib.sha256(), ""
    for split in (dataset.train, dataset.val, dataset.test):
        for array in (split.images, split.labels, split.patient_ids.astype(str)):
            _hash_array(digest, array)
        training = training or digest.copy().hexdigest()    # the state once the training split is in
    return digest.hexdigest(), training


def _hash_array(digest: Any, array: np.ndarray | None) -> None:
    """Add ``array`` to ``digest``: its dtype and shape, then its bytes (None: a marker of its own)."""
    if array is None:
        digest.update(b"none")
        return
    array = np.ascontiguousarray(array)
    digest.update(f"{array.dtype.str}{array.shape}".encode())
    digest.update(array.data.cast("B"))


def attributes_fingerprint(dataset: Dataset) -> str:
    """sha256 over every split's sex, age and lesion masks and the normalisation of the images: what else finished
    runs were evaluated (fairness groups, the pointing metric) or trained with. Apart from `data_fingerprints`, which
    keys the released counts of the training set: a corrected age column changes no count. Private, as that is."""
    digest = hashlib.sha256(repr(dataset.normalization).encode())
    for split in (dataset.train, dataset.val, dataset.test):
        for array in (split.sex.astype(str), split.age.astype(np.float64), split.masks):
            _hash_array(digest, array)
    return digest.hexdigest()


def _other_fingerprint(folder: StudyFolder, path: Path, fingerprint: str) -> bool:
    """Whether the folder's finished runs are recorded (in ``path``) as made with other data than ``fingerprint``
    (False where none was kept: folders written before it, checked from their next run on). ConfigError where the
    file holds no fingerprint (cut short or overwritten): what the runs were trained on cannot be told then."""
    if not (folder.finished_run_ids() and path.is_file()):
        return False
    saved = path.read_bytes().strip()
    if len(saved) != len(fingerprint) or saved.strip(b"0123456789abcdef"):
        raise ConfigError(f"{path} is damaged (it holds no fingerprint of the data), so dpmed cannot tell whether the "
                          f"finished runs in {folder.root} were trained on the data this study now reads; restore it "
                          f"from a copy, or use another output folder (--out) {RETRAIN_NOTE}")
    return saved.decode("ascii") != fingerprint


def finished_runs(folder: StudyFolder, plans: list[RunPlan], summary: DatasetSummary, study: Study,
                  fingerprint: str, before: ResolvedStudy | None,
                  attributes: str | None = None) -> tuple[dict[str, RunRecord], list[RunRecord], list[str]]:
    """(finished runs the study lists, by id; finished runs in the folder it no longer lists: released all the same; the
    ids of listed runs evaluated with other settings than the study's now, or by another version of dpmed's evaluation
    methods, to evaluate again from their models: `dpmed.run.reevaluate`). A listed run made with other settings (its
    plan, the model included, or the other privacy randomness), or finished runs on other data, are refused rather than
    mixed into one table; so are runs whose ``evaluation.training_metrics`` differs, which only training can compute.
    The message names what differs (where and how fast a run executes, ``TrainingConfig.computed_settings``, does not
    count). ``summary``: the dataset now, as study.yaml shows it; ``fingerprint``: the first of its
    :func:`data_fingerprints`; ``before``: the folder's study.yaml as read back, None where it holds no finished run;
    ``attributes``: the dataset's :func:`attributes_fingerprint` (None: not checked)."""
    differ = {} if before is None else _other_data(before, summary)
    renamed = (before is not None and bool(differ) and _renamed_only(before, summary, differ)
               and folder.data_fingerprint.is_file())
    data = [] if renamed else list(differ.values())
    hint = _views_hint(study) if data else ""     # other views change the sizes; matching sizes are not the cause
    decoded = [] if before is None else decoded_since(before.dataset.decoding_version)
    if not data and _other_fingerprint(folder, folder.data_fingerprint, fingerprint):
        data = ["the images, labels or patient ids differ, with the same sizes and shape" if decoded else
                "the images, labels or patient ids differ (a file was changed or replaced; sizes and shape match)"]
    if not data and attributes is not None and _other_fingerprint(folder, folder.attributes_fingerprint, attributes):
        data = ["the patients' sex or age, the lesion masks or the images' normalisation differ (a column or file was "
                "changed, or data.preprocessing.normalize; the images themselves match)"]
    if data:
        raise ConfigError(f"the finished runs in {folder.root} were trained on other data than this study now reads: "
                          f"{'; '.join(data)}{hint}{_decoding_note(decoded, before, summary, study)}; use another "
                          f"output folder (--out), or delete {folder.runs} to retrain them {RETRAIN_NOTE}")
    evaluation = [] if before is None else _other_evaluation(before, study)
    _refuse_training_metrics(folder, evaluation)
    randomness = study.privacy_randomness
    listed = {p.run_id: p for p in plans}
    mine, elsewhere, clashes, stale = {}, [], [], []
    for run_id in folder.finished_run_ids():
        record = read_record(folder.run(run_id).record)
        if run_id not in listed:
            elsewhere.append(record)
            continue
        diffs = setting_differences(record.plan.settings(), listed[run_id].settings())
        evaluated = evaluated_otherwise(record, study, summary.n_test)    # a record shows no training_metrics
        evaluated += [differ["label_names"]] if renamed and "label_names" in differ else []
        evaluated += _other_class_names(record, summary.label_names)
        if record.evaluation_version != EVALUATION_VERSION:     # an older dpmed's methods: not mixed with these
            evaluated.append(f"evaluation_version: {record.evaluation_version} in the finished run, "
                             f"{EVALUATION_VERSION} now")
        drawn = randomness_of(record)
        if drawn not in (None, randomness):   # a reproducible run is not DP: never reuse it as DP
            diffs.append(f"privacy_randomness: {drawn} in the finished run, {randomness} now")
        diffs += [f"privacy: {claim}"            # the card another dpmed wrote: not reused as it claims
                  for claim in claims_beyond(record.privacy, record.plan.privacy, record.ledger)]
        if diffs:
            clashes.append((run_id, diffs))
        else:
            mine[run_id] = record
            if evaluation or evaluated:
                # imported here: reading a model needs torch, and `dpmed report` (`dpmed.outputs`) uses this
                # module's evaluated_otherwise without it
                from dpmed.run import read_released_model

                read_released_model(record, folder.run(run_id))   # refused before the study writes anything
                stale.append(run_id)
    if clashes:
        lines = [f"  - {run_id}: {'; '.join(diffs[:4])}" + (f" (and {len(diffs) - 4} more)" if len(diffs) > 4 else "")
                 for run_id, diffs in clashes]
        raise ConfigError(
            f"{len(clashes)} finished run(s) in {folder.root} were made with other settings than this study now asks "
            "for:\n" + "\n".join(lines) + f"\nuse another output folder (--out), or delete "
            f"{', '.join(str(folder.run(r).public) for r, _ in clashes)} to retrain them {RETRAIN_NOTE}")
    return mine, elsewhere, stale


def _decoding_note(decoded: list[str], before: ResolvedStudy | None, summary: DatasetSummary, study: Study) -> str:
    """Why runs of an older dpmed may read as other data though no file changed: ``decoded``, how this dpmed decodes
    files otherwise than the one that read the runs' images (`dpmed.data.version`), and the setting that reads them
    as before where one does (data.channels: 3 for grey images stored as colour); "" where the decoding is the same."""
    if not decoded or before is None:
        return ""
    (was, *was_size), (now, *now_size) = before.dataset.image_shape, summary.image_shape
    as_before = ("set data.channels: 3 to read the images as the finished runs did"
                 if (was, now) == (3, 1) and was_size == now_size and study.data.channels is None else
                 "finish them with the dpmed that made them (its version is in each run.json)")
    return (f" (this dpmed decodes image files otherwise than the one that finished the runs, so the pixels it reads "
            f"may differ though no file changed: {'; '.join(decoded)}); {as_before}")


def _views_hint(study: Study) -> str:
    """Why CheXpert or MIMIC runs of an older folder may read as other data: dpmed once read every film, and reads
    only the frontal ones unless ``data.views`` says otherwise since the option came."""
    if study.data.source not in ("chexpert", "mimic") or study.data.views is not None:
        return ""
    return (" (dpmed once read every film of these tables; it now reads the frontal films only unless data.views "
            "is all, so runs it made then continue with data.views: all)")


def _refuse_training_metrics(folder: StudyFolder, differences: list[str]) -> None:
    """ConfigError where ``evaluation.training_metrics`` is among the evaluation ``differences``: the noiseless
    training-set metrics read the training images as the run saw them (canaries, local DP noise), which only its
    training had; every other evaluation setting is evaluated again from the released model."""
    lines = [line for line in differences if line.startswith("evaluation.training_metrics")]
    if lines:
        raise ConfigError(f"the finished runs in {folder.root} were evaluated with other settings than this study now "
                          f"asks for: {'; '.join(lines)}; the training-set metrics need the training images as each "
                          "run saw them, so they cannot be added to or taken from a finished run: set "
                          f"evaluation.training_metrics back, use another output folder (--out), or delete "
                          f"{folder.runs} to retrain them {RETRAIN_NOTE}")
