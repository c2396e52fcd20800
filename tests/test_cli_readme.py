"""The README's command-line parts against the command: every `dpmed` line it shows parses, the set-up stays two
commands and says how to avoid the CUDA wheels, and where runs train (`--device`, `training.device`) is documented."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from dpmed.cli import _parser
from dpmed.config import load_study

README = Path(__file__).resolve().parents[1] / "README.md"


def _section(title: str) -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def _command_lines() -> list[str]:
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S):
        for line in block.splitlines():
            command = line.split("#")[0].strip()
            if command.startswith("dpmed "):
                lines.append(re.sub(r"\[[^\]]*\]", "", command))     # [--address ...]: optional, shown in brackets
    return lines


def test_the_readme_shows_plan_device_and_version():
    shown = " ".join(_command_lines())
    assert "dpmed plan " in shown and "--device " in shown
    assert "dpmed --version" in README.read_text(encoding="utf-8")
    assert "python -m dpmed" in README.read_text(encoding="utf-8")


@pytest.mark.parametrize("line", _command_lines())
def test_every_dpmed_command_in_the_readme_parses(line):
    _parser().parse_args(shlex.split(line)[1:])


def test_set_up_is_two_commands_and_says_how_to_install_a_cpu_only_torch():
    setup = _section("Set up")
    assert len(re.findall(r"```bash\n", setup)) == 2
    assert "pip install torch torchvision --index-url https://download.pytorch.org/whl/cpu" in setup
    assert "CUDA" in setup and "4 GB" in setup


def test_the_study_file_explained_documents_the_device(tmp_path):
    section = _section("A study file, explained")
    block = re.search(r"```yaml\n(.*?)```", section, flags=re.S).group(1)
    assert re.search(r"^  device: auto +# auto \(a CUDA GPU if torch sees one; not MPS\), cpu or cuda; `--device`",
                     block, re.M)
    path = tmp_path / "explained.yaml"
    path.write_text(block)
    assert load_study(path).training.device == "auto"       # the block is a valid study as written
