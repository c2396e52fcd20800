"""A study whose data lack a class a split needs is refused before training, naming the split and the class: before,
a binary set with one class in training reported a test AUROC of 0.24 without a word, and one with a single class in
validation trained every run and then failed in Youden's threshold naming no file."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from dpmed.data import make_phantom
from dpmed.data.sample import names_text
from dpmed.errors import DataError
from dpmed.suitability import check_classes, check_patients


@pytest.fixture(scope="module")
def phantom():
    return make_phantom(n_images=120, image_size=16, seed=0)


def _only(split, label: int):
    return replace(split, labels=np.full_like(split.labels, label))


@pytest.mark.parametrize("split, named", [("train", "training"), ("val", "validation"), ("test", "test")])
def test_a_binary_split_with_one_class_is_refused_naming_it(phantom, split, named):
    data = replace(phantom, **{split: _only(getattr(phantom, split), 0)})
    name = phantom.task.label_names[0]
    with pytest.raises(DataError, match=rf"^labels\.csv: the {named} split holds only class {name} \(\d+ images\); "
                                        r"a binary task needs both classes in training, validation and test"):
        check_classes(data, where="labels.csv")


def test_both_classes_everywhere_pass_and_multiclass_needs_two_in_training_and_test(phantom):
    """A multiclass test split of one class left every one-vs-rest AUROC undefined: before, every run trained and
    then failed in evaluation ("test AUROC is undefined"), exit status 1 and no result."""
    check_classes(phantom, where="phantom")
    multiclass = replace(phantom, task=replace(phantom.task, kind="multiclass"), val=_only(phantom.val, 1))
    check_classes(multiclass, where="phantom")                     # validation picks no threshold for argmax
    for split, named in (("train", "training"), ("test", "test")):
        with pytest.raises(DataError, match=rf"the {named} split holds only class .*at least two classes in "
                                            "training and in test"):
            check_classes(replace(multiclass, **{split: _only(getattr(phantom, split), 1)}), where="phantom")


def test_classes_counted_from_the_images_need_each_training_class_in_validation_or_test(phantom):
    """The count of classes counted from the images is published (study.yaml, the model's last layer): a class that
    only training images hold is refused. Validation is enough (DP does not cover it), and a class no image holds
    (``task: multiclass`` over labels 0, 1, 3) publishes no one's label."""
    task = replace(phantom.task, kind="multiclass", label_names=("a", "b", "c", "d"), classes_from_data=True)
    train = replace(phantom.train, labels=np.array([0, 1, 3])[np.arange(len(phantom.train)) % 3])
    counted = replace(phantom, task=task, train=train)
    with pytest.raises(DataError, match=r"^phantom: class\(es\) d have training images but no validation or test "
                                        r"image\."):
        check_classes(counted, where="phantom")
    check_classes(replace(counted, task=replace(task, classes_from_data=False)), where="phantom")  # given: fine
    val = replace(phantom.val, labels=np.where(phantom.val.labels == 1, 3, 0))
    check_classes(replace(counted, val=val), where="phantom")          # class d held by validation images too


@pytest.mark.parametrize("split, named", [("val", "validation"), ("test", "test")])
def test_a_multiclass_class_that_evaluation_holds_and_training_does_not_is_refused_naming_it(phantom, split, named):
    """Before: a study whose training split held no image of class c trained every run without a word, and its
    macro AUROC averaged in the one-vs-rest AUROC of an output no image had trained, and its accuracy counted every
    test image of c as the model's miss. A class no split holds is no one's miss and is left alone."""
    task = replace(phantom.task, kind="multiclass", label_names=("a", "b", "c", "d"))
    evaluated = getattr(phantom, split)
    three = replace(evaluated, labels=np.arange(len(evaluated)) % 3)         # a, b and c; d nowhere
    data = replace(phantom, task=task, **{split: three})
    with pytest.raises(DataError, match=rf"^labels\.csv: the training split holds no image of class c \(of its "
                                        rf"{len(phantom.train)} images\), and the {named} split holds "
                                        rf"{int((three.labels == 2).sum())}: "):
        check_classes(data, where="labels.csv")
    train = replace(phantom.train, labels=np.arange(len(phantom.train)) % 3)
    check_classes(replace(data, train=train), where="labels.csv")


def test_a_class_that_training_lacks_under_published_splits_is_told_how_to_divide_them_anew(phantom):
    """Where the layout publishes the splits, data.split.seed and the fractions move no image, so the remedy they
    gave left the study refused as before; the message names data.split.official: false, which divides them anew."""
    task = replace(phantom.task, kind="multiclass", label_names=("a", "b", "c"))
    test = replace(phantom.test, labels=np.arange(len(phantom.test)) % 3)
    data = replace(phantom, task=task, test=test)
    with pytest.raises(DataError) as refused:
        check_classes(replace(data, source={"split": {"published": ["test"]}}), where="chest_xray")
    assert "a published split is divided anew with data.split.official: false" in str(refused.value)
    with pytest.raises(DataError) as refused:
        check_classes(data, where="chest_xray")
    assert "data.split.official" not in str(refused.value)


@pytest.mark.parametrize("value, held", [(0, "absent"), (1, "present")])
def test_a_multilabel_finding_with_one_value_in_validation_is_refused_before_training(value, held):
    """Before: every run trained, then failed in evaluation ("ValueError: label 'Cardiomegaly': no validation
    threshold can be chosen: youden_threshold: all 8 labels are 0"), exit status 1 and no result, as NIH
    ChestX-ray14 with its 14 findings does on a small validation split. Test may lack a finding (its AUROC is
    then undefined and said so); validation picks each finding's threshold, so it cannot."""
    data = make_phantom(n_images=120, image_size=16, seed=0, task="multilabel")
    labels = data.val.labels.copy()
    labels[:, 1] = value
    name = data.task.label_names[1]
    with pytest.raises(DataError, match=rf"^labels\.csv: the validation split holds finding {name!r} {held} in "
                                        rf"all of its {len(labels)} images, so no decision threshold can be chosen "
                                        r"for it \(Youden's J needs images with and without it\)"):
        check_classes(replace(data, val=replace(data.val, labels=labels)), where="labels.csv")
    test = data.test.labels.copy()
    test[:, 1] = value
    check_classes(replace(data, test=replace(data.test, labels=test)), where="labels.csv")
    check_classes(data, where="labels.csv")


def test_a_multilabel_test_split_where_no_finding_varies_is_refused_before_training():
    """Before: every run trained, then failed in evaluation ("test AUROC is undefined: no label has both positives
    and negatives"). One finding that varies on test is enough: the others are reported undefined."""
    data = make_phantom(n_images=120, image_size=16, seed=0, task="multilabel")
    labels = data.test.labels.copy()
    labels[:, 1:] = 0
    check_classes(replace(data, test=replace(data.test, labels=labels)), where="labels.csv")
    labels[:, 0] = 1
    with pytest.raises(DataError, match=rf"^labels\.csv: no finding is both present and absent among the "
                                        rf"{len(labels)} test images, so no test AUROC is defined"):
        check_classes(replace(data, test=replace(data.test, labels=labels)), where="labels.csv")


def test_a_binary_validation_split_with_few_images_of_a_class_is_warned_of(phantom, caplog):
    """Every run decides at the Youden threshold chosen on validation: with 2 validation images of a class (a very
    unbalanced set carved by patient) that threshold rests on those 2, and nothing said so."""
    labels = np.ones_like(phantom.val.labels)
    labels[:2] = 0
    data = replace(phantom, val=replace(phantom.val, labels=labels))
    name = phantom.task.label_names[0]
    with caplog.at_level("WARNING", logger="dpmed.suitability"):
        check_classes(data, where="labels.csv")
    assert [r.getMessage() for r in caplog.records] == [
        f"labels.csv: the validation split holds only 2 images of class {name}: the threshold every run decides at "
        "(Youden's J) is chosen on them, so its sensitivity and specificity may not carry over to the test images; "
        "give validation more of them (data.split.val_fraction, or the split column or folders)"]
    caplog.clear()
    # a validation split the layout publishes is kept as published: data.split.val_fraction would give it nothing
    with caplog.at_level("WARNING", logger="dpmed.suitability"):
        check_classes(replace(data, source={"split": {"published": ["val", "test"]}}), where="labels.csv")
    assert [r.getMessage().split("; ")[-1] for r in caplog.records] == [
        "give validation more of them (the split column or folders that publish it)"]
    caplog.clear()
    with caplog.at_level("WARNING", logger="dpmed.suitability"):
        check_classes(replace(phantom, val=phantom.train), where="phantom")     # 10 or more of each: no word
    assert not caplog.records


def test_a_test_split_of_one_patient_is_refused_before_training(phantom):
    """The bootstrap redraws patients: with one test patient every redraw is the whole test set, so every interval
    had zero width and the report called a difference between two runs significant (p <= 0.04) on one patient."""
    one = replace(phantom.test, patient_ids=np.full(len(phantom.test), "P7"))
    with pytest.raises(DataError, match=rf"^phantom: all {len(one)} test images are of one patient, and the "
                                        "intervals redraw patients"):
        check_patients(replace(phantom, test=one), where="phantom")
    check_patients(phantom, where="phantom")


@pytest.mark.parametrize("kind", ["multiclass", "multilabel"])
def test_a_class_or_finding_whose_test_auroc_is_undefined_is_told_before_training(phantom, kind, caplog):
    """Before: the terminal printed each run's macro test AUROC with no word that it averaged fewer classes (or
    findings) than the study names; only the report's table of classes said "undefined". Told once, before training,
    with what the macro then averages."""
    if kind == "multiclass":
        data = replace(phantom, task=replace(phantom.task, kind="multiclass", label_names=("a", "b", "c")),
                       train=replace(phantom.train, labels=np.arange(len(phantom.train)) % 3))
        told, averaged = "class c: the test split holds no image of it", "a, b"
    else:
        data = make_phantom(n_images=120, image_size=16, seed=0, task="multilabel")
        labels = data.test.labels.copy()
        labels[:, 1] = 0
        data = replace(data, test=replace(data.test, labels=labels))
        names = data.task.label_names
        told = f"finding {names[1]!r}: the test split holds it in none of its {len(labels)} images"
        averaged = names_text([n for n in names if n != names[1]])
    with caplog.at_level("WARNING", logger="dpmed.suitability"):
        check_classes(data, where="labels.csv")
    assert [r.getMessage().split(", so ")[0] for r in caplog.records] == [f"labels.csv: {told}"]
    assert f"the macro test AUROC averages the others ({averaged}) alone" in caplog.records[0].getMessage()
    caplog.clear()
    with caplog.at_level("WARNING", logger="dpmed.suitability"):
        check_classes(replace(data, test=data.train), where="labels.csv")
    assert not caplog.records


def test_a_class_that_no_image_holds_is_told_with_its_own_remedy(phantom, caplog):
    """A class that data.classes names and no image of any split holds (left alone by the refusals): the warning told
    the user to give the test split images of it, which no split change can do; it says that no image holds it and
    to leave the name out."""
    task = replace(phantom.task, kind="multiclass", label_names=("a", "b", "c", "d"))
    data = replace(phantom, task=task, **{split: replace(images, labels=np.arange(len(images)) % 3)
                                          for split, images in (("train", phantom.train), ("val", phantom.val),
                                                                ("test", phantom.test))})
    with caplog.at_level("WARNING", logger="dpmed.suitability"):
        check_classes(data, where="labels.csv")
    told = " ".join(r.getMessage() for r in caplog.records)
    assert "class d: no image of any split holds it, so its test AUROC is undefined" in told
    assert "leave its name out of data.classes" in told
    assert "give the test split images" not in told


@pytest.mark.parametrize("value, held", [(0, "none"), (1, "all")])
def test_a_multilabel_finding_with_one_value_in_training_is_told_before_training(value, held, caplog):
    """Before: a finding that no training image showed (or every one did) trained without a word, and its test AUROC,
    of an output that learnt nothing of it, was averaged into the macro AUROC. Training may lack a finding (a rare
    one in a small cohort), so it is told, not refused."""
    data = make_phantom(n_images=120, image_size=16, seed=0, task="multilabel")
    labels = data.train.labels.copy()
    labels[:, 0] = value
    name = data.task.label_names[0]
    with caplog.at_level("WARNING", logger="dpmed.suitability"):
        check_classes(replace(data, train=replace(data.train, labels=labels)), where="labels.csv")
    assert [r.getMessage().split(": no run")[0] for r in caplog.records] == [
        f"labels.csv: the training split holds finding {name!r} in {held} of its {len(labels)} images"]
    caplog.clear()
    with caplog.at_level("WARNING", logger="dpmed.suitability"):
        check_classes(data, where="labels.csv")
    assert not caplog.records


def test_a_training_split_of_one_patient_is_told_before_training(phantom, caplog):
    """Before: a split that left one patient in training trained every run on that one person without a word."""
    one = replace(phantom.train, patient_ids=np.full(len(phantom.train), "P7"))
    with caplog.at_level("WARNING", logger="dpmed.suitability"):
        check_patients(replace(phantom, train=one), where="phantom")
    assert [r.getMessage().split(": every run")[0] for r in caplog.records] == [
        f"phantom: all {len(one)} training images are of one patient"]
    caplog.clear()
    with caplog.at_level("WARNING", logger="dpmed.suitability"):
        check_patients(phantom, where="phantom")
    assert not caplog.records


def test_a_multilabel_training_split_where_no_finding_varies_is_refused_before_training():
    """No run can learn anything from it, as from a binary training split of one class (refused); before, every run
    trained, and one with evaluation.training_metrics then failed ("test AUROC is undefined", of the training set)."""
    data = make_phantom(n_images=120, image_size=16, seed=0, task="multilabel")
    labels = data.train.labels.copy()
    labels[:, 1:] = 0
    check_classes(replace(data, train=replace(data.train, labels=labels)), where="labels.csv")
    labels[:, 0] = 1
    with pytest.raises(DataError, match=rf"^labels\.csv: no finding is both present and absent among the "
                                        rf"{len(labels)} training images, so no run can learn any"):
        check_classes(replace(data, train=replace(data.train, labels=labels)), where="labels.csv")
