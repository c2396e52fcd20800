"""A study whose data lack a class a split needs is refused before training, naming the split and the class: before,
a binary set with one class in training reported a test AUROC of 0.24 without a word, and one with a single class in
validation trained every run and then failed in Youden's threshold naming no file."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from dpmed.data import make_phantom
from dpmed.errors import DataError
from dpmed.study import check_classes


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


def test_both_classes_everywhere_pass_and_multiclass_needs_two_in_training_only(phantom):
    check_classes(phantom, where="phantom")
    multiclass = replace(phantom, task=replace(phantom.task, kind="multiclass"), val=_only(phantom.val, 1))
    check_classes(multiclass, where="phantom")                     # validation picks no threshold for argmax
    with pytest.raises(DataError, match="at least two classes in training"):
        check_classes(replace(multiclass, train=_only(phantom.train, 1)), where="phantom")
