"""What `pip install dpmed` (not editable) gets: every file the package opens at run time, and an sdist that holds
no half of the test suite."""

from __future__ import annotations

import ast
import fnmatch
import importlib.metadata
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

_ROOT = Path(__file__).parents[1]


def test_every_data_file_of_the_package_is_declared_to_ship_in_the_wheel():
    """A wheel holds the package's .py files and only the data files that package-data names: a study file, a
    template or a font left out of it works from a checkout and is missing once installed (dpmed run without a study
    then fails to find the quickstart)."""
    tomllib = pytest.importorskip("tomllib", reason="Python 3.10 has no TOML reader (tomllib came in 3.11)")
    project = tomllib.loads((_ROOT / "pyproject.toml").read_text())
    globs = project["tool"]["setuptools"]["package-data"]["dpmed"]
    package = _ROOT / "src" / "dpmed"
    data = [p.relative_to(package).as_posix() for p in package.rglob("*")
            if p.is_file() and p.suffix not in {".py", ".pyc"} and "__pycache__" not in p.parts]
    assert data, "the quickstart study ships as package data"
    assert [name for name in data if not any(fnmatch.fnmatch(name, g) for g in globs)] == []


def _copy_of_the_package(where: Path) -> None:
    """What a build reads: pyproject.toml and the files it names, and the package's source."""
    for name in ("pyproject.toml", "README.md", "MANIFEST.in", "LICENSE"):
        shutil.copy(_ROOT / name, where)
    shutil.copytree(_ROOT / "src", where / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))


def test_the_package_is_described_to_setuptools_in_no_way_it_has_deprecated(tmp_path):
    """A deprecated key (``project.license`` as a table) builds today with a warning nobody reads and is refused by
    the setuptools released after its deadline, which pyproject's open-ended build requirement then installs: every
    ``pip install`` from source fails. The wheel's metadata is built here with setuptools' deprecations as errors."""
    pytest.importorskip("setuptools", minversion="77")     # pyproject's build requirement
    _copy_of_the_package(tmp_path)
    (tmp_path / "meta").mkdir()
    built = subprocess.run([sys.executable, "-c", "import sys, warnings; from setuptools import build_meta; "
                            "from setuptools.warnings import SetuptoolsDeprecationWarning; "
                            "warnings.simplefilter('error', SetuptoolsDeprecationWarning); "
                            "print(build_meta.prepare_metadata_for_build_wheel(sys.argv[1]))", str(tmp_path / "meta")],
                           cwd=tmp_path, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-3000:]
    metadata = (tmp_path / "meta" / built.stdout.split()[-1] / "METADATA").read_text(encoding="utf-8")
    assert "License-Expression: Apache-2.0" in metadata and "License-File: LICENSE" in metadata


def test_the_sdist_holds_the_package_and_no_test_suite_that_cannot_run(tmp_path):
    pytest.importorskip("setuptools", minversion="77")     # pyproject's build requirement
    _copy_of_the_package(tmp_path)
    shutil.copytree(_ROOT / "tests", tmp_path / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    built = subprocess.run([sys.executable, "-c", "import sys; from setuptools import build_meta; "
                            "print(build_meta.build_sdist(sys.argv[1]))", str(tmp_path / "dist")],
                           cwd=tmp_path, capture_output=True, text=True, check=True).stdout.split()[-1]
    with tarfile.open(tmp_path / "dist" / built) as sdist:
        names = {name.split("/", 1)[-1] for name in sdist.getnames()}
    assert {"README.md", "LICENSE", "pyproject.toml", "src/dpmed/__init__.py", "src/dpmed/configs/quickstart.yaml"} \
        <= names
    shipped_tests = sorted(name for name in names if name.startswith("tests/"))
    assert not shipped_tests or "tests/conftest.py" in names, shipped_tests


def test_the_systems_and_pythons_declared_to_pip_are_those_the_readme_says_dpmed_runs_on():
    """Code for Windows and macOS ships (msvcrt locks, icacls advice, spawned workers), yet neither pyproject nor the
    README said where dpmed runs, nor what differs there (a private folder Windows does not make owner-only)."""
    tomllib = pytest.importorskip("tomllib", reason="Python 3.10 has no TOML reader (tomllib came in 3.11)")
    project = tomllib.loads((_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    classifiers = project.get("classifiers", [])
    systems = {"Linux": "Operating System :: POSIX :: Linux", "macOS": "Operating System :: MacOS",
               "Windows": "Operating System :: Microsoft :: Windows"}
    readme = (_ROOT / "README.md").read_text(encoding="utf-8")
    platforms = readme[readme.index("\n### Platforms\n"):]
    platforms = platforms[:platforms.index("\n#", 2)]
    assert [name for name, c in systems.items() if c not in classifiers or name not in platforms] == []
    pythons = sorted(tuple(map(int, c.rsplit(" ", 1)[1].split("."))) for c in classifiers
                     if c.startswith("Programming Language :: Python :: 3."))
    assert pythons and f">={pythons[0][0]}.{pythons[0][1]}" == project["requires-python"]
    assert f"Python {pythons[0][0]}.{pythons[0][1]}" in platforms


def _top_level_imports(package: Path) -> set[str]:
    """The first name of every absolute import in the package's modules, however deep in a function."""
    names = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


def test_every_package_the_source_imports_is_declared_to_pip():
    """An import that works only because another dependency brought its package along (pydantic's pydantic_core)
    breaks when that dependency changes what it installs; pip must be told of each, core or extra."""
    tomllib = pytest.importorskip("tomllib", reason="Python 3.10 has no TOML reader (tomllib came in 3.11)")
    project = tomllib.loads((_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    specs = project["dependencies"] + extras["ray"] + extras["dicom"]
    declared = {re.split(r"[<>=!~\[ ;]", spec, maxsplit=1)[0].lower().replace("_", "-") for spec in specs}
    distributions = importlib.metadata.packages_distributions()
    third_party = _top_level_imports(_ROOT / "src" / "dpmed") - set(sys.stdlib_module_names) - {"dpmed"}
    undeclared = {name: distributions.get(name) for name in sorted(third_party)
                  if not {d.lower().replace("_", "-") for d in distributions.get(name, [name])} & declared}
    assert undeclared == {}


def test_the_numpy_pip_may_install_is_of_the_major_release_the_suite_runs_on():
    """A major NumPy release changes functions (np.bitwise_count, which the overlap check counts hash bits with, came
    in 2.0) and the promotion of scalars (NEP 50): a floor in an older major lets pip keep a NumPy on which no test
    ever ran, and the overlap check then stops with an AttributeError on a user's machine."""
    tomllib = pytest.importorskip("tomllib", reason="Python 3.10 has no TOML reader (tomllib came in 3.11)")
    import numpy

    project = tomllib.loads((_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    floor = next(spec.split(">=", 1)[1].split(",")[0] for spec in project["dependencies"] if spec.startswith("numpy>="))
    assert floor.split(".")[0] == numpy.__version__.split(".")[0], (floor, numpy.__version__)
