"""The public surface of dpmed.data: every exported name imports and is what it says."""

from __future__ import annotations

import importlib

import dpmed.data


def test_every_exported_name_exists():
    for name in dpmed.data.__all__:
        assert getattr(dpmed.data, name) is not None, name


def test_required_names_are_exported():
    required = {"Sample", "ImageSet", "Task", "Dataset", "make_phantom", "read_medmnist", "split_by_patient",
                "load_dataset", "read_image_folders", "read_aptos", "read_chexpert", "read_nih", "read_mimic",
                "read_ham10000", "read_csv_table", "Preprocessing", "SplitPlan"}
    assert required <= set(dpmed.data.__all__)


def test_submodules_declare_all():
    for module in ("sample", "splits", "synthetic", "transforms", "registry", "manifest", "assembly", "cache",
                   "decoder", "decoding", "dicom", "formats", "formats.medmnist", "formats.folders",
                   "formats.table_reading", "formats.tables", "formats.chest_xray"):
        mod = importlib.import_module(f"dpmed.data.{module}")
        for name in mod.__all__:
            assert hasattr(mod, name), f"dpmed.data.{module}.{name}"
