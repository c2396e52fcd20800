"""Where a run's numbers came from: the packages' versions (or that one is missing) and the commit, marked when the
source tree that ran differs from it."""

from __future__ import annotations

import subprocess

from dpmed import provenance


def test_every_package_is_listed_with_its_version_or_as_not_installed(monkeypatch):
    monkeypatch.setattr(provenance, "_PACKAGES", ("numpy", "no-such-package-dpmed-test"))
    found = provenance.versions()
    import numpy

    assert found["numpy"] == numpy.__version__ and found["no-such-package-dpmed-test"] == "not installed"
    assert {"python", "machine", "processor", "cpu_count", "git_commit"} <= set(found)


def _git(outputs: dict[str, tuple[int, str]]):
    """A stand-in for subprocess.run answering `git rev-parse` and `git status` with (returncode, stdout)."""

    def run(args, **kwargs):
        code, out = outputs[args[1]]
        return subprocess.CompletedProcess(args, code, out, "")

    return run


def test_the_commit_says_when_the_tree_that_ran_had_uncommitted_changes(monkeypatch):
    monkeypatch.setattr(subprocess, "run", _git({"rev-parse": (0, "abc1234\n"), "status": (0, " M src/x.py\n")}))
    assert provenance._git_commit() == "abc1234 with uncommitted changes"
    monkeypatch.setattr(subprocess, "run", _git({"rev-parse": (0, "abc1234\n"), "status": (0, "")}))
    assert provenance._git_commit() == "abc1234"
    monkeypatch.setattr(subprocess, "run", _git({"rev-parse": (128, ""), "status": (128, "")}))
    assert provenance._git_commit() == "unknown (not a git checkout)"


def test_no_git_at_all_is_said_not_raised(monkeypatch):
    def missing(*args, **kwargs):
        raise FileNotFoundError("git")

    monkeypatch.setattr(subprocess, "run", missing)
    assert provenance._git_commit() == "unknown (git not available)"
