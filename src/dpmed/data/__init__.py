"""Datasets as one documented :class:`Sample` per image: the embedded phantom, MedMNIST, patient-level splits.

The data stage is the most upstream stage after config: it imports nothing of dpmed's downstream stages
(DESIGN.md, "The flow"). Every split it returns is float32 [N, C, H, W] in [0, 1].
"""

from dpmed.data.formats.medmnist import read_medmnist
from dpmed.data.registry import DATASET_SOURCES, load_dataset
from dpmed.data.sample import Dataset, ImageSet, Sample, Task
from dpmed.data.splits import split_by_patient
from dpmed.data.synthetic import PhantomDifficulty, make_phantom

__all__ = [
    "Sample",
    "ImageSet",
    "Task",
    "Dataset",
    "make_phantom",
    "PhantomDifficulty",
    "read_medmnist",
    "split_by_patient",
    "load_dataset",
    "DATASET_SOURCES",
]
