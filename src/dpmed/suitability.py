"""Whether a study's data can support it, refused before any training: each split holds the classes (or findings)
evaluation needs and more than one test patient, the images suit the model, augmentation and Grad-CAM settings, and
the evaluation's bootstrap redraws fit in memory.

Before these checks, such a study trained every run and then failed in evaluation, or reported a number that meant
nothing. They read the dataset's labels and shapes only to refuse; nothing they compute is released (a warning goes
to the log). `dpmed.study` runs them as it reads the data (:func:`check_classes`, :func:`check_patients`) and
before it draws any DP count (:func:`check_fit`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import numpy as np

from dpmed import memory
from dpmed.comparisons import MIN_CLASS_COUNT
from dpmed.config import EvaluationConfig, Study
from dpmed.data import Dataset
from dpmed.data.sample import names_text
from dpmed.errors import ConfigError, DataError
from dpmed.evaluation.assessment import redraw_memory
from dpmed.models import MODELS
from dpmed.numbers import bytes_text

__all__ = ["check_classes", "check_patients", "check_fit"]

_log = logging.getLogger(__name__)


def check_patients(dataset: Dataset, *, where: str) -> None:
    """DataError, before any training, where every test image is of one patient: the bootstrap redraws patients
    (METHODS.md s.4), so each redraw is the whole test set, every interval has zero width and every paired comparison
    reads as certain (before, the report called a difference on one child's films significant, p <= 0.04). The test
    patients are not private, so this costs no privacy. A warning where every training image is of one patient:
    the runs are defined, but each learns from that one person, which before went unsaid (a warning goes to the
    terminal and the private log only)."""
    if len(dataset.train) > 1 and len(np.unique(np.asarray(dataset.train.patient_ids))) == 1:
        _log.warning("%s: all %d training images are of one patient: every run learns from that one person alone "
                     "(and every DP-SGD step that samples patients holds all or none of the training images), so "
                     "the test metrics say how far one person's images carry to others; give training more "
                     "patients (data.split.val_fraction and test_fraction, or the split column or folders)", where,
                     len(dataset.train))
    if len(np.unique(np.asarray(dataset.test.patient_ids))) == 1:
        raise DataError(f"{where}: all {len(dataset.test)} test images are of one patient, and the intervals redraw "
                        "patients, so they would measure no uncertainty and every comparison would read as certain; "
                        "give the test split more patients (data.split.test_fraction, or the split column or "
                        "folders)")


def check_classes(dataset: Dataset, *, where: str) -> None:
    """DataError, before any training, where a split lacks a class it needs: a binary task needs both classes in
    training (else nothing is learnt), validation (Youden's threshold, METHODS.md s.4) and test (AUROC); a
    multiclass one at least two classes in training and in test (one-vs-rest AUROC needs a class and another), and
    in training every class that validation or test holds (else its output is never trained).
    Before, such a study trained every run and then failed in evaluation, or reported an AUROC for a model that had
    seen one class (``where``: the data, for the message).
    Where the classes were counted from the images (`Task.classes_from_data`), every training class needs a
    validation or test image, so the count the study publishes is a fact of the evaluation splits, not of one
    training patient."""
    kind, names = dataset.task.kind, dataset.task.label_names
    if kind == "multilabel":
        _check_findings_in_training(dataset, where=where)
        _check_findings_in_validation(dataset, where=where)
        _check_a_finding_varies_in_test(dataset, where=where)
        _warn_of_undefined_test_aurocs(dataset, where=where)
        return
    if kind not in ("binary", "multiclass"):
        return
    splits = (("training", dataset.train), ("validation", dataset.val), ("test", dataset.test))
    for split, images in splits if kind == "binary" else splits[::2]:
        present = np.unique(np.asarray(images.labels))
        if len(present) < 2:
            held = ", ".join(names[int(c)] if int(c) < len(names) else str(c) for c in present) or "none"
            needs = ("both classes in training, validation and test" if kind == "binary"
                     else "at least two classes in training and in test")
            raise DataError(f"{where}: the {split} split holds only class {held} ({len(images)} images); a {kind} "
                            f"task needs {needs}: check the label column or class folders (data.labels), or the "
                            "split settings")
    if kind == "multiclass":
        _check_evaluated_classes_in_training(dataset, where=where)
        _warn_of_undefined_test_aurocs(dataset, where=where)
    if kind == "binary":
        counts = np.bincount(np.asarray(dataset.val.labels).reshape(-1).astype(np.int64), minlength=2)
        # a published validation split is kept as published: data.split.val_fraction gives it nothing
        how = ("the split column or folders that publish it" if "val" in _published(dataset)
               else "data.split.val_fraction, or the split column or folders")
        for c in np.flatnonzero(counts < MIN_CLASS_COUNT):
            _log.warning("%s: the validation split holds only %d images of class %s: the threshold every run "
                         "decides at (Youden's J) is chosen on them, so its sensitivity and specificity may not "
                         "carry over to the test images; give validation more of them (%s)", where, counts[c],
                         names[c] if c < len(names) else c, how)
    if dataset.task.classes_from_data:
        # The class count is released (study.yaml, the report, the model's last layer); counted from the images, it
        # is a fact of the evaluation splits (which DP does not protect) only when they hold every training class.
        evaluated = {int(c) for images in (dataset.val, dataset.test) for c in np.unique(np.asarray(images.labels))}
        unseen = sorted({int(c) for c in np.unique(np.asarray(dataset.train.labels))} - evaluated)
        if unseen:
            shown = ", ".join(names[c] if c < len(names) else str(c) for c in unseen)
            raise DataError(f"{where}: class(es) {shown} have training images but no validation or test image. The "
                            "classes were counted from the images and the study publishes them (study.yaml, the "
                            "model's last layer), so a class only training images hold would publish those "
                            "patients' labels, which DP does not cover: give every class validation or test images "
                            "(data.split, or the split column or folders), or leave that class's rows out")


def _published(dataset: Dataset) -> Sequence[str]:
    """The splits of ``dataset`` its layout publishes (its ``source``'s split record), none where it has none."""
    split = dataset.source.get("split")
    return split.get("published", ()) if isinstance(split, Mapping) else ()


def _check_evaluated_classes_in_training(dataset: Dataset, *, where: str) -> None:
    """DataError where validation or test holds a class of a multiclass task that no training image holds: its
    output is never trained, so its one-vs-rest AUROC (averaged into the macro) measures an untrained output and
    every test image of it is a certain miss. Before, such a study trained every run without a word. A class that
    no split holds is no one's miss (its AUROC is undefined and said so) and is left alone."""
    names = dataset.task.label_names
    trained = set(np.unique(np.asarray(dataset.train.labels)).tolist())
    # the seed and fractions move no image of a split the layout publishes
    published = ("; a published split is divided anew with data.split.official: false"
                 if _published(dataset) else "")
    for c in range(len(names)):
        held = [(split, int(np.count_nonzero(np.asarray(images.labels) == c)))
                for split, images in (("validation", dataset.val), ("test", dataset.test))]
        held = [(split, count) for split, count in held if count]
        if c in trained or not held:
            continue
        counts = " and the ".join(f"{split} split {'holds ' if not k else ''}{count}"
                                  for k, (split, count) in enumerate(held))
        raise DataError(f"{where}: the training split holds no image of class {names[c]} (of its "
                        f"{len(dataset.train)} images), and the {counts}: no run could learn it, so its AUROC would "
                        "measure an untrained output and every test image of it would be a certain miss; give "
                        "training images of it (data.split.seed or data.split.val_fraction / test_fraction, or the "
                        f"split column or folders{published}), or leave the class out (its rows, and its name in "
                        "data.classes or data.labels)")


def _check_findings_in_training(dataset: Dataset, *, where: str) -> None:
    """Warn where a multilabel finding is present in every training image or in none: no run learns to tell it,
    so its validation threshold and its test AUROC (averaged into the macro) are those of an output that learnt
    nothing of it. Before, that went unsaid. A rare finding in a small cohort may be absent from training, so this
    is told, not refused; the fix is the user's (another split, or the finding left out). Where no finding varies,
    no run learns anything (as from a binary training split of one class): DataError."""
    labels = np.asarray(dataset.train.labels)        # [N, L] of 0/1
    one_valued = [j for j in range(labels.shape[1]) if len(labels) and len(np.unique(labels[:, j])) < 2]
    if not one_valued:
        return
    if len(one_valued) == labels.shape[1]:
        raise DataError(f"{where}: no finding is both present and absent among the {len(labels)} training images, "
                        "so no run can learn any (each output would learn one answer for every image); check the "
                        "label columns (data.labels), or give training more images (data.split, or the split "
                        "column)")
    j, names = one_valued[0], dataset.task.label_names
    more = f" (so do {len(one_valued) - 1} more findings)" if len(one_valued) > 1 else ""
    _log.warning("%s: the training split holds finding %r in %s of its %d images%s: no run can learn to tell it, so "
                 "its test AUROC, averaged into the macro AUROC, is that of an output that learnt nothing of it; give "
                 "training images with and without it (data.split, or the split column), or leave the finding out of "
                 "data.labels", where, names[j], "all" if labels[0, j] else "none", len(labels), more)


def _warn_of_undefined_test_aurocs(dataset: Dataset, *, where: str) -> None:
    """Warn where the test split leaves a class or finding's AUROC undefined (no image of the class; a finding present
    in every test image or in none): the macro test AUROC then averages the others alone (METHODS.md s.4), and
    before, the terminal printed it without a word, only the report's table of classes saying "undefined". The
    first such class or finding is named, with how many more there are; a class that no image of any split holds
    (named by data.classes alone) is told so, since no split setting can give test images of it."""
    names, kind = dataset.task.label_names, dataset.task.kind
    labels = np.asarray(dataset.test.labels)
    if kind == "multiclass":
        present = set(np.unique(labels).tolist())
        anywhere = {int(c) for images in (dataset.train, dataset.val) for c in np.unique(np.asarray(images.labels))}
        undefined = [(c, "the test split holds no image of it" if c in anywhere else "no image of any split holds it")
                     for c in range(len(names)) if c not in present]
    else:
        undefined = [(j, f"the test split holds it in {'all' if labels[0, j] else 'none'} of its {len(labels)} "
                         "images") for j in range(labels.shape[1]) if len(np.unique(labels[:, j])) < 2]
    if not undefined:
        return
    what, whats = ("class", "classes") if kind == "multiclass" else ("finding", "findings")
    j, why = undefined[0]
    name = names[j] if kind == "multiclass" else repr(names[j])
    more = f" (so are those of {len(undefined) - 1} more {whats})" if len(undefined) > 1 else ""
    others = names_text([n for k, n in enumerate(names) if k not in {c for c, _ in undefined}])
    # a class no image holds is named by the study file alone: no other split can give the test split images of it
    fix = ("leave its name out of data.classes (or data.labels), or add images of it" if why.startswith("no image")
           else "give the test split images " + ("of it" if kind == "multiclass" else "with and without it")
           + " (data.split.test_fraction or data.split.seed, or the split column or folders)")
    _log.warning("%s: %s %s: %s, so its test AUROC is undefined%s and the macro test AUROC averages the others "
                 "(%s) alone; %s for a macro over every %s", where, what, name, why, more, others, fix, what)


def _check_a_finding_varies_in_test(dataset: Dataset, *, where: str) -> None:
    """DataError where no multilabel finding is both present and absent among the test images: the macro AUROC (over
    the findings whose AUROC is defined) then has no finding to average, and before, every run trained and then
    failed in evaluation. One finding that varies is enough; the others are reported undefined."""
    labels = np.asarray(dataset.test.labels)         # [N, L] of 0/1
    if not len(labels) or any(len(np.unique(labels[:, j])) > 1 for j in range(labels.shape[1])):
        return
    raise DataError(f"{where}: no finding is both present and absent among the {len(labels)} test images, so no "
                    "test AUROC is defined (it needs images with and without a finding) and every run would train "
                    "and then fail; give test more images (data.split.test_fraction or data.split.seed, or the split "
                    "column), or add to data.labels a finding that some test images show")


def _check_findings_in_validation(dataset: Dataset, *, where: str) -> None:
    """DataError where a multilabel finding is absent from every validation image, or present in every one: its
    decision threshold (Youden's J on validation, METHODS.md s.4) is then undefined, and before, every run trained
    and then failed in evaluation. Test may lack a finding (its AUROC is undefined and said so); training may too
    (told, not refused: `_check_findings_in_training`)."""
    labels = np.asarray(dataset.val.labels)          # [N, L] of 0/1
    if not len(labels):
        return
    names = dataset.task.label_names
    one_valued = [(j, int(labels[0, j])) for j in range(labels.shape[1]) if len(np.unique(labels[:, j])) < 2]
    if not one_valued:
        return
    j, value = one_valued[0]
    others = ", ".join(repr(names[k]) for k, _ in one_valued[1:6]) + (", ..." if len(one_valued) > 6 else "")
    more = f" (so do {len(one_valued) - 1} more: {others})" if len(one_valued) > 1 else ""
    raise DataError(f"{where}: the validation split holds finding {names[j]!r} {'present' if value else 'absent'} in "
                    f"all of its {len(labels)} images, so no decision threshold can be chosen for it (Youden's J "
                    f"needs images with and without it){more}, and every run would train and then fail; leave the "
                    "finding out of data.labels (where the source takes them), or give validation more images: raise "
                    "data.split.val_fraction or choose another data.split.seed (a published validation split is "
                    "divided anew with data.split.official: false)")


def check_fit(study: Study, dataset: Dataset) -> None:
    """Refuse what no plan can change: augmentation's crop padding as large as the images, a square-only model on
    other images, more deletion steps than pixels, bootstrap redraws no memory holds. Checked
    before the DP counts are drawn (`prepare_study`), so that a study refused for them writes nothing, and its output
    folder is left as it was found."""
    augmentation, side = study.training.augmentation, min(dataset.train.image_shape[1:])
    if augmentation is not None and augmentation.crop_padding != "auto" and augmentation.crop_padding >= side:
        raise ConfigError(f"training.augmentation.crop_padding {augmentation.crop_padding} px needs images larger "
                          f"than that (reflect padding), and these are {side} px; lower it, or use 'auto' (side / 8)")
    _, height, width = dataset.train.image_shape
    if MODELS[study.model.name].square and height != width:
        raise ConfigError(f"model.name {study.model.name} takes square images only, and these are {height} x {width} "
                          "px; set data.image_size to resize them to a square (data.preprocessing.aspect: crop keeps "
                          "their proportions), or use a model with global pooling (small_cnn, resnet9, resnet18)")
    cams = study.evaluation.explanations
    if cams is not None and cams.deletion_steps > height * width:    # found in NumPy after training, every run's
        raise ConfigError(f"evaluation.explanations.deletion_steps {cams.deletion_steps} exceeds the {height * width} "
                          f"pixel locations of these {height} x {width} px images (a step past one location each "
                          f"changes no pixel); lower it to {height * width} or less (default 16)")
    _check_redraws(study.evaluation, dataset)


def _check_redraws(config: EvaluationConfig, dataset: Dataset) -> None:
    """Refuse redraws of the test set, or of the training set for the training-set metrics, that no run's evaluation
    could hold in memory (`redraw_memory`): found after training, they failed every run."""
    need = redraw_memory(config, dataset)
    fairness = need.tables > need.engine and need.groups > 0
    findings = f" of {need.labels} findings" if need.labels > 1 else ""
    what = (f"evaluation.bootstrap_resamples: {config.bootstrap_resamples} redraws of the {len(dataset.test)} test "
            f"images take about {bytes_text(need.total)} of memory to evaluate a run"
            + (f" (fairness keeps {bytes_text(need.tables)} of it: each redraw's rates{findings} in up to "
               f"{need.groups} groups)" if fairness else ""))
    memory.check_bytes(need.total, what, fix="lower evaluation.bootstrap_resamples (the default, 1000, is what "
                                             "METHODS.md s.4 uses)"
                       + (", or measure fairness by fewer groups or not at all (evaluation.fairness)" if fairness
                          else ""))
    if need.training:        # after the test set's redraws, which are freed by then
        memory.check_bytes(need.training, f"evaluation.training_metrics: {config.bootstrap_resamples} redraws of the "
                                          f"{len(dataset.train)} training images take about "
                                          f"{bytes_text(need.training)} of memory to evaluate a run",
                           fix="set evaluation.training_metrics to false (they are private and not covered by eps), "
                               "or lower evaluation.bootstrap_resamples")
