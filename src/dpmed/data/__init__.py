"""Datasets as one documented :class:`Sample` per image: the embedded phantom, MedMNIST, published medical image
layouts (image folders, APTOS, CheXpert, NIH ChestX-ray14, MIMIC-CXR-JPG, HAM10000, a generic CSV, DICOM files),
per-image preprocessing, a decode cache and patient-level splits.

The data stage is the most upstream stage after config: it imports nothing of dpmed's downstream stages
(data flows one way through the stages). Every split it returns is float32 [N, C, H, W] in [0, 1].
"""

from dpmed.data.assembly import SplitPlan, assemble_dataset
from dpmed.data.cohorts import patient_draws
from dpmed.data.formats.chest_xray import read_chexpert, read_mimic, read_nih
from dpmed.data.formats.folders import read_image_folders
from dpmed.data.formats.medmnist import read_medmnist
from dpmed.data.formats.tables import read_aptos, read_csv_table, read_ham10000
from dpmed.data.manifest import Manifest
from dpmed.data.registry import DATASET_SOURCES, DataRequest, load_dataset, read_dataset
from dpmed.data.sample import Dataset, ImageSet, Sample, Task
from dpmed.data.splits import cap_images_per_patient, image_keys, images_per_patient, split_by_patient
from dpmed.data.synthetic import PhantomDifficulty, make_phantom
from dpmed.data.transforms import Preprocessing, normalize

__all__ = [
    "Sample",
    "ImageSet",
    "Task",
    "Dataset",
    "make_phantom",
    "PhantomDifficulty",
    "read_medmnist",
    "read_image_folders",
    "read_aptos",
    "read_chexpert",
    "read_nih",
    "read_mimic",
    "read_ham10000",
    "read_csv_table",
    "Manifest",
    "assemble_dataset",
    "SplitPlan",
    "Preprocessing",
    "normalize",
    "split_by_patient",
    "images_per_patient",
    "cap_images_per_patient",
    "image_keys",
    "patient_draws",
    "load_dataset",
    "read_dataset",
    "DataRequest",
    "DATASET_SOURCES",
]
