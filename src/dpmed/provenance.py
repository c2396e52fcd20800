"""Where a run's numbers came from: the dpmed commit, the machine and the versions of the libraries that computed
them (the report's provenance section)."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

__all__ = ["versions", "package_version"]

# Every package whose version can change a run's numbers: decoding and resizing (Pillow, pydicom) and the model
# definitions (torchvision) included.
_PACKAGES = ("dpmed", "torch", "torchvision", "opacus", "dp-accounting", "randomgen", "numpy", "scipy",
             "scikit-learn", "scikit-image", "fairlearn", "grad-cam", "kymatio", "pydantic", "pillow", "pydicom")


def _git_commit(here: Path = Path(__file__).parent) -> str:
    """The commit of the dpmed source tree that ran, when it is a git checkout of dpmed: one whose git tracks this
    package. An installed dpmed in a virtual environment inside another repository (a project's ignored .venv) is no
    checkout, and that repository's commit and uncommitted changes would otherwise be reported as dpmed's. Git's
    output is read as UTF-8, as Git for Windows writes it whatever the code page, with what is no UTF-8 replaced: a
    translated message read in the locale's encoding (GBK, cp1252) could stop the run."""
    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], cwd=here, capture_output=True, encoding="utf-8", errors="replace",
                              timeout=5)

    try:
        tracked = git("ls-files", "--error-unmatch", "__init__.py")
        done = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "unknown (git not available)"
    if tracked.returncode != 0 or done.returncode != 0:
        return "unknown (not a git checkout)"
    return done.stdout.strip() + (" with uncommitted changes" if dirty.stdout.strip() else "")


def versions() -> dict[str, str]:
    """Python, machine, CPU count, dpmed's git commit and the versions of the packages that compute the numbers."""
    out = {"python": platform.python_version(), "machine": f"{platform.system()} {platform.machine()}",
           "processor": platform.processor() or "unknown", "cpu_count": str(os.cpu_count()),
           "git_commit": _git_commit()}
    out.update({pkg: package_version(pkg) for pkg in _PACKAGES})
    return out


def package_version(package: str) -> str:
    """The installed version of ``package`` (its distribution name), or "not installed"."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"
