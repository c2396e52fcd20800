"""Readers of on-disk dataset layouts, one module per layout family.

medmnist: a MedMNIST npz, read straight into a Dataset. folders and tables: file layouts, read into a
:class:`~dpmed.data.manifest.Manifest` that :mod:`dpmed.data.assembly` checks, decodes and splits. dicom: the DICOM
image decoder (pydicom, optional) that any file layout uses for ``.dcm`` files.
"""

from dpmed.data.formats.folders import KERMANY_PATIENT, read_image_folders
from dpmed.data.formats.medmnist import MEDMNIST_LABELS, read_medmnist
from dpmed.data.formats.tables import (
    APTOS_GRADES, CHEXPERT_COMPETITION, CHEXPERT_FINDINGS, HAM10000_CLASSES, NIH_FINDINGS, UNCERTAIN_POLICIES,
    read_aptos, read_chexpert, read_csv_table, read_ham10000, read_mimic, read_nih,
)

__all__ = [
    "read_medmnist", "MEDMNIST_LABELS", "read_image_folders", "KERMANY_PATIENT",
    "read_aptos", "read_chexpert", "read_nih", "read_mimic", "read_ham10000", "read_csv_table",
    "APTOS_GRADES", "CHEXPERT_FINDINGS", "CHEXPERT_COMPETITION", "NIH_FINDINGS", "HAM10000_CLASSES",
    "UNCERTAIN_POLICIES",
]
