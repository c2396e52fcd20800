"""dpmed: what does privacy cost a diagnostic imaging model?

Train the same model with no privacy, local DP on the images, and DP-SGD at several privacy budgets; measure each
arm on one test set; write one report with a privacy card per arm. Start with ``dpmed run`` (the embedded phantom
quickstart) or, from Python::

    import dpmed
    result = dpmed.run_study(dpmed.load_study("configs/quickstart.yaml"), out="results")
    frame = dpmed.read_results(result.out_dir)

Names are imported on first use, so ``import dpmed.accounting`` (pure math) does not load torch.
"""

from __future__ import annotations

from importlib import import_module
from pathlib import Path
from typing import Any

__all__ = [
    "load_study", "run_study", "read_results", "read_record", "Study", "StudyResult", "RunPlan", "RunRecord",
    "PrivacyCard", "Dataset", "ImageSet", "Sample", "Task", "DpmedError", "ConfigError", "DataError", "PrivacyError",
]

_HOME = {
    "load_study": "dpmed.config", "Study": "dpmed.config", "RunPlan": "dpmed.config",
    "RunRecord": "dpmed.records", "read_record": "dpmed.records", "PrivacyCard": "dpmed.mechanisms",
    "run_study": "dpmed.study", "StudyResult": "dpmed.study",
    "Dataset": "dpmed.data", "ImageSet": "dpmed.data", "Sample": "dpmed.data", "Task": "dpmed.data",
    "DpmedError": "dpmed.errors", "ConfigError": "dpmed.errors", "DataError": "dpmed.errors",
    "PrivacyError": "dpmed.errors",
}


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(import_module(_HOME[name]), name)
    raise AttributeError(f"module 'dpmed' has no attribute {name!r}")


def read_results(study_dir: str | Path) -> "Any":
    """results.csv of a study folder (``results/<study>``) as a pandas DataFrame, one row per run."""
    import pandas as pd

    from dpmed.folders import StudyFolder

    return pd.read_csv(StudyFolder(Path(study_dir)).results)
