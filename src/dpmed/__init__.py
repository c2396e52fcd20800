"""dpmed: what does privacy cost a diagnostic imaging model?

Train the same model with no privacy, local DP on the images, and DP-SGD at several privacy budgets; measure each
arm on one test set; write one report with a privacy card per arm. Start with ``dpmed run`` (the embedded phantom
quickstart) or, from Python::

    import dpmed
    result = dpmed.run_study(dpmed.load_study(), out="results")    # the quickstart, or a study file's path
    frame = dpmed.read_results(result.out_dir)

Names are imported on first use, so ``import dpmed.accounting`` (pure math) does not load torch.
"""

from __future__ import annotations

from importlib import import_module
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:       # what a type checker reads for the names below, which import on first use
    from dpmed.config import RunPlan, Study, load_study
    from dpmed.data import Dataset, ImageSet, Sample, Task
    from dpmed.errors import ConfigError, DataError, DpmedError, FolderError, InstallationError, PrivacyError
    from dpmed.mechanisms import PrivacyCard
    from dpmed.records import RunRecord, read_record
    from dpmed.study import StudyResult, run_study

__all__ = [
    "load_study", "run_study", "read_results", "read_record", "Study", "StudyResult", "RunPlan", "RunRecord",
    "PrivacyCard", "Dataset", "ImageSet", "Sample", "Task", "DpmedError", "ConfigError", "DataError", "PrivacyError",
    "FolderError", "InstallationError",
]

_HOME = {
    "load_study": "dpmed.config", "Study": "dpmed.config", "RunPlan": "dpmed.config",
    "RunRecord": "dpmed.records", "read_record": "dpmed.records", "PrivacyCard": "dpmed.mechanisms",
    "run_study": "dpmed.study", "StudyResult": "dpmed.study",
    "Dataset": "dpmed.data", "ImageSet": "dpmed.data", "Sample": "dpmed.data", "Task": "dpmed.data",
    "DpmedError": "dpmed.errors", "ConfigError": "dpmed.errors", "DataError": "dpmed.errors",
    "PrivacyError": "dpmed.errors", "FolderError": "dpmed.errors", "InstallationError": "dpmed.errors",
}


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(import_module(_HOME[name]), name)
    raise AttributeError(f"module 'dpmed' has no attribute {name!r}")


def __dir__() -> list[str]:       # the names imported on first use, for tab completion
    return sorted({*globals(), *__all__})


def read_results(study_dir: str | Path) -> "Any":
    """results.csv of a study folder (``results/<study>``) as a pandas DataFrame, one row per run."""
    import pandas as pd

    from dpmed.errors import ConfigError
    from dpmed.folders import StudyFolder

    if not isinstance(study_dir, (str, PathLike)):     # a Python caller's slip, said as a user's error
        raise ConfigError(f"read_results takes a study folder's path (str or Path), not {type(study_dir).__name__} "
                          f"{study_dir!r:.60}")
    path = StudyFolder(Path(study_dir)).results
    if not path.is_file():
        inside = sorted(p.parent for p in Path(study_dir).glob(f"*/{path.name}"))   # the out folder given instead
        hint = f"; {', '.join(map(str, inside))} {'is' if len(inside) == 1 else 'are'} such a folder" if inside else ""
        raise ConfigError(f"{study_dir} holds no results.csv: pass the folder run_study wrote for a study "
                          f"(its result's out_dir; by default results/<study name>), once a run has finished{hint}")
    return pd.read_csv(path)
