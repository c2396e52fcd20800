"""Readers of on-disk dataset layouts, one module per layout family.

medmnist: a MedMNIST npz, read straight into a Dataset. folders, chest_xray (CheXpert, NIH ChestX-ray14,
MIMIC-CXR-JPG) and tables (APTOS, HAM10000, a generic CSV): file layouts, read into a
:class:`~dpmed.data.manifest.Manifest` that :mod:`dpmed.data.assembly` checks, decodes and splits; table_reading is
what the table layouts share. The image decoders these layouts rely on (raster, and DICOM through pydicom) live below
them, in :mod:`dpmed.data.decoding` and :mod:`dpmed.data.dicom`.
"""

from dpmed.data.formats.chest_xray import (
    CHEXPERT_COMPETITION, CHEXPERT_FINDINGS, NIH_FINDINGS, UNCERTAIN_POLICIES, read_chexpert, read_mimic, read_nih,
)
from dpmed.data.formats.folders import KERMANY_PATIENT, read_image_folders
from dpmed.data.formats.medmnist import MEDMNIST_LABELS, read_medmnist
from dpmed.data.formats.tables import APTOS_GRADES, HAM10000_CLASSES, read_aptos, read_csv_table, read_ham10000

__all__ = [
    "read_medmnist", "MEDMNIST_LABELS", "read_image_folders", "KERMANY_PATIENT",
    "read_aptos", "read_chexpert", "read_nih", "read_mimic", "read_ham10000", "read_csv_table",
    "APTOS_GRADES", "CHEXPERT_FINDINGS", "CHEXPERT_COMPETITION", "NIH_FINDINGS", "HAM10000_CLASSES",
    "UNCERTAIN_POLICIES",
]
