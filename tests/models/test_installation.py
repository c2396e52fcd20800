"""A torchvision built for another torch is told at start-up, naming both versions, not as an internal error where a
model first imports it. The mismatch is simulated: torchvision's import fails as it does then."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import subprocess
import sys

import pytest

from dpmed.cli import main
from dpmed.errors import InstallationError
from dpmed.config import load_study
from dpmed.models.installation import check_torchvision, needs_torchvision
from dpmed.provenance import package_version

MISMATCH = "operator torchvision::nms does not exist"
# a study whose model is built from torchvision's modules
RESNET_STUDY = ("name: s\ndata: {n_images: 200, image_size: 16}\ntraining: {steps: 1, batch_size: 16}\n"
                "model: {name: resnet9}\narms: [{name: base, mechanism: none}]\n")


class _Failing(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports torchvision as a torchvision built for another torch does: its first operator is not there."""

    def __init__(self, problem: Exception) -> None:
        self.problem = problem

    def find_spec(self, name, path=None, target=None):
        return importlib.machinery.ModuleSpec(name, self) if name == "torchvision" else None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        raise self.problem


@pytest.fixture
def torchvision_failing(monkeypatch):
    def fail(problem: Exception) -> None:
        for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
            monkeypatch.delitem(sys.modules, name)
        monkeypatch.setattr(sys, "meta_path", [_Failing(problem), *sys.meta_path])
    return fail


@pytest.mark.parametrize("command", ["run", "plan"])
def test_a_torchvision_for_another_torch_is_told_with_both_versions_at_start_up(torchvision_failing, tmp_path,
                                                                                capsys, command):
    """`run` is told by `run_study`, `plan` by itself: its time estimate builds the model."""
    study = tmp_path / "s.yaml"
    study.write_text(RESNET_STUDY)
    torchvision_failing(RuntimeError(MISMATCH))
    assert main([command, str(study), "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dpmed: error: ") and "internal error" not in err, err
    assert f"torchvision {package_version('torchvision')} does not work with torch {package_version('torch')}" in err
    assert MISMATCH in err and "Install matching builds" in err
    assert not (tmp_path / "out").exists()       # told before anything is read or written


def test_run_study_tells_a_torchvision_for_another_torch_before_it_reads_or_writes(torchvision_failing, tmp_path):
    """From Python (a notebook) as from the command line: the clear error, not torchvision's RuntimeError where a
    ResNet is first built, after the data are read."""
    import dpmed

    study = tmp_path / "s.yaml"
    study.write_text(RESNET_STUDY)
    torchvision_failing(RuntimeError(MISMATCH))
    with pytest.raises(dpmed.InstallationError, match="does not work with torch"):
        dpmed.run_study(study, out=tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()


def test_the_install_command_names_the_torchvision_made_for_this_torch(torchvision_failing, monkeypatch):
    from dpmed.models import installation

    monkeypatch.setattr(installation, "package_version", {"torch": "2.5.1+cu121", "torchvision": "0.21.0"}.get)
    torchvision_failing(RuntimeError(MISMATCH))
    with pytest.raises(InstallationError, match=r"for torch 2\.5\.1\+cu121, pip install 'torchvision==0\.20\.\*'"):
        check_torchvision()


def test_another_failure_of_torchvision_s_import_is_not_called_a_mismatch(torchvision_failing):
    torchvision_failing(RuntimeError("CUDA driver initialization failed"))
    with pytest.raises(RuntimeError, match="CUDA driver") as raised:
        check_torchvision()
    assert not isinstance(raised.value, InstallationError)


def test_a_working_torchvision_passes():
    check_torchvision()


def test_a_study_that_never_imports_torchvision_is_not_refused_for_it(torchvision_failing, tmp_path, capsys):
    """The check imported torchvision at every start: seconds of every `dpmed plan`, and a small_cnn study, which never
    needed torchvision, refused for a torchvision it would not have imported."""
    study = tmp_path / "s.yaml"
    study.write_text("name: s\ndata: {n_images: 200, image_size: 16}\narms: [{name: base, mechanism: none}]\n")
    torchvision_failing(RuntimeError(MISMATCH))
    assert main(["plan", str(study), "--out", str(tmp_path / "out"), "--no-estimate"]) == 0, capsys.readouterr().err
    assert "torchvision" not in sys.modules


ARMS = "arms: [{name: base, mechanism: none}]\n"
ATTACKED = "arms: [{name: dp, mechanism: dp_sgd, target_epsilon: 8, attack: {batches: 1}}]\n"
NORMALIZED = "data: {preprocessing: {normalize: {mean: [0.5], std: [0.25]}}}\n"


@pytest.mark.parametrize("text, needs", [
    (ARMS, False),
    ("model: {name: resnet18}\n" + ARMS, True),
    ("model: {name: vgg16}\n" + ARMS, True),
    ("evaluation: {explanations: {method: gradcam}}\n" + ARMS, True),     # pytorch_grad_cam imports torchvision
    (ATTACKED, False),
    (NORMALIZED + ARMS, False),
    (NORMALIZED + ATTACKED, True),                                         # torchvision's Normalize before the model
])
def test_a_study_needs_torchvision_where_its_model_explanations_or_attack_import_it(write_study, text, needs):
    assert needs_torchvision(load_study(write_study(f"name: s\n{text}"))) is needs


def test_the_models_said_to_need_no_torchvision_are_built_without_it():
    code = ("import sys\nfrom dpmed.models import MODELS\n"
            "for info in MODELS.values():\n"
            "    if not info.torchvision:\n"
            "        info.build(1, 2, 32)\n"
            "print(sorted(n for n in sys.modules if n.split('.')[0] == 'torchvision'))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout
