"""Where a run's numbers came from: the packages' versions (or that one is missing) and the commit, marked when the
source tree that ran differs from it."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from dpmed import provenance


def test_every_package_is_listed_with_its_version_or_as_not_installed(monkeypatch):
    monkeypatch.setattr(provenance, "_PACKAGES", ("numpy", "no-such-package-dpmed-test"))
    found = provenance.versions()
    import numpy

    assert found["numpy"] == numpy.__version__ and found["no-such-package-dpmed-test"] == "not installed"
    assert {"python", "machine", "processor", "cpu_count", "git_commit"} <= set(found)


# Dependencies that compute none of a run's numbers: tables and figures drawn from them, the study file, a progress bar.
_SHOWS_ONLY = {"pandas", "matplotlib", "pyyaml", "tqdm"}
# Dependencies whose version another recorded one fixes: pydantic pins its pydantic-core exactly.
_PINNED_BY_ANOTHER = {"pydantic-core"}


def test_every_dependency_that_computes_a_number_has_its_version_recorded():
    """A package that decodes, resizes, trains or accounts changes a run's numbers between its versions (Pillow's
    resampling, torchvision's model definitions, pydicom's LUTs): a dependency added to pyproject.toml without a
    place in the provenance, or left out of it, fails here until it is listed or said to show numbers only."""
    tomllib = pytest.importorskip("tomllib", reason="Python 3.10 has no TOML reader (tomllib came in 3.11)")
    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    declared = project["dependencies"] + project["optional-dependencies"]["dicom"]
    names = {re.split(r"[<>=!~\[ ;]", spec, maxsplit=1)[0].lower() for spec in declared}
    recorded = {name.lower() for name in provenance._PACKAGES}
    computing = names - _SHOWS_ONLY - _PINNED_BY_ANOTHER
    assert computing <= recorded, sorted(computing - recorded)
    assert not _SHOWS_ONLY & recorded and "dpmed" in recorded


def _git(outputs: dict[str, tuple[int, str]]):
    """A stand-in for subprocess.run answering `git rev-parse` and `git status` with (returncode, stdout), and
    `git ls-files` as a checkout that tracks dpmed unless told otherwise."""

    def run(args, **kwargs):
        code, out = {"ls-files": (0, "__init__.py\n"), **outputs}[args[1]]
        return subprocess.CompletedProcess(args, code, out, "")

    return run


def test_the_commit_says_when_the_tree_that_ran_had_uncommitted_changes(monkeypatch):
    monkeypatch.setattr(subprocess, "run", _git({"rev-parse": (0, "abc1234\n"), "status": (0, " M src/x.py\n")}))
    assert provenance._git_commit() == "abc1234 with uncommitted changes"
    monkeypatch.setattr(subprocess, "run", _git({"rev-parse": (0, "abc1234\n"), "status": (0, "")}))
    assert provenance._git_commit() == "abc1234"
    monkeypatch.setattr(subprocess, "run", _git({"rev-parse": (128, ""), "status": (128, "")}))
    assert provenance._git_commit() == "unknown (not a git checkout)"


def _commit_all(repo: Path) -> str:
    """Commits everything git tracks in ``repo`` and returns the short commit."""
    for args in (["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "project"]):
        subprocess.run(["git", *args], cwd=repo, check=True)
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_an_installed_dpmed_inside_another_repository_reports_no_commit_of_it(tmp_path):
    """A project that keeps its virtual environment (ignored) in its own repository: the dpmed installed there is no
    checkout of dpmed, and the project's commit or its uncommitted changes are not dpmed's."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text(".venv/\n")
    installed = tmp_path / ".venv" / "site-packages" / "dpmed"
    installed.mkdir(parents=True)
    (installed / "__init__.py").write_text("")
    (tmp_path / "analysis.py").write_text("1\n")
    _commit_all(tmp_path)
    (tmp_path / "analysis.py").write_text("2\n")
    assert provenance._git_commit(installed) == "unknown (not a git checkout)"


def test_a_checkout_of_dpmed_reports_its_commit(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    package = tmp_path / "src" / "dpmed"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    commit = _commit_all(tmp_path)
    assert provenance._git_commit(package) == commit
    (package / "__init__.py").write_text("changed = True\n")
    assert provenance._git_commit(package) == f"{commit} with uncommitted changes"


def test_no_git_at_all_is_said_not_raised(monkeypatch):
    def missing(*args, **kwargs):
        raise FileNotFoundError("git")

    monkeypatch.setattr(subprocess, "run", missing)
    assert provenance._git_commit() == "unknown (git not available)"


@pytest.mark.skipif(os.name == "nt", reason="the stand-in git is a shell script")
def test_git_messages_in_another_encoding_than_the_locale_s_are_no_crash(tmp_path, monkeypatch):
    """Git for Windows writes UTF-8 whatever the code page, and a translated git says "not a git repository" in the
    user's language: decoded in the locale's encoding (GBK on a Chinese Windows), that message raised
    UnicodeDecodeError and every run of an installed dpmed (no checkout) ended as an internal error. Here git writes
    bytes that are no text in any encoding's strict reading."""
    fake = tmp_path / "bin" / "git"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nprintf '\\377\\376 fatal \\377\\n' >&2\nexit 128\n", encoding="utf-8")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    assert provenance._git_commit(tmp_path) == "unknown (not a git checkout)"
