"""The README's command-line parts against the command: every `dpmed` line it shows parses, the set-up stays two
commands and says how to avoid the CUDA wheels, where runs train (`--device`, `training.device`) is documented, every
file it names exists, and every choice a study key accepts (a model, a layout, an accountant) is named in it."""

from __future__ import annotations

import argparse
import importlib
import re
import shlex
import typing
from pathlib import Path

import pytest
import yaml

from dpmed.cli import _parser, main
from dpmed.config import load_study
from dpmed.config.data_section import DATASET_SOURCES, PreprocessingConfig
from dpmed.config.schema import CAM_METHODS, DP_ENGINES, MODEL_NAMES, Arm, CamConfig, ScheduleConfig
from dpmed.mechanisms.dp_sgd import DpSgdArm
from dpmed.names import CANARY_KINDS

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
    prose = re.sub(r"```.*?```", "", README.read_text(encoding="utf-8"), flags=re.S)
    for span in re.findall(r"`(dpmed [^`]*)`", prose):            # a call given in a sentence (`dpmed report DIR`);
        if len(span.split()) > 2 and "--version" not in span:     # `dpmed report` alone names the command
            lines.append(" ".join(span.split()))
    return lines


def test_the_readme_shows_plan_device_and_version():
    shown = " ".join(_command_lines())
    assert "dpmed plan " in shown and "--device " in shown
    assert "dpmed --version" in README.read_text(encoding="utf-8")
    assert "python -m dpmed" in README.read_text(encoding="utf-8")


@pytest.mark.parametrize("line", _command_lines())
def test_every_dpmed_command_in_the_readme_parses(line):
    _parser().parse_args(shlex.split(line)[1:])


@pytest.mark.parametrize("line", [line for line in _command_lines() if line.startswith("dpmed privacy ")])
def test_every_privacy_command_in_the_readme_runs(line, capsys):
    """Parsing is not enough here: a call can parse and still be refused, as one giving q and T without the
    `--delta` whose default needs N was; these commands take seconds, so each runs as written."""
    assert main(shlex.split(line)[1:]) == 0, capsys.readouterr().err
    assert "eps" in capsys.readouterr().out


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


def test_every_study_benchmark_and_document_the_readme_names_exists():
    """The README sends users to study files, benchmark scripts and documents by path; one renamed or removed
    leaves a dead pointer that no command parse catches."""
    named = set(re.findall(r"(?<![\w/.])((?:configs|benchmarks|docs)/[\w./-]*\w)", README.read_text(encoding="utf-8")))
    assert len(named) > 10
    assert sorted(p for p in named if not (README.parent / p).exists()) == []


def _cli_flags() -> set[str]:
    flags: set[str] = set()
    parsers = [_parser()]
    while parsers:
        parser = parsers.pop()
        for action in parser._actions:
            flags.update(action.option_strings)
            if isinstance(action, argparse._SubParsersAction):
                parsers.extend(action.choices.values())
    return flags


def test_every_flag_the_readme_names_is_an_option_of_the_command():
    """The prose names flags outside any command line (`--fail-fast`, `--no-progress`, `--unit patient`,
    `--kappa`), which no parse of a command line reaches: a flag renamed in the CLI would leave them pointing
    nowhere. pip's own flag in the install advice and pytest's in the note on tracebacks are not dpmed's."""
    others = {"--index-url", "--showlocals"}
    named = set(re.findall(r"(?<![\w-])--[a-z][\w-]*", README.read_text(encoding="utf-8"))) - others
    assert {"--fail-fast", "--no-progress", "--kappa"} <= named
    assert sorted(named - _cli_flags()) == []


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for name in parts[cut:]:
                found = getattr(found, name)
        except AttributeError:
            return False
        return True
    return False


def test_every_dpmed_name_the_readme_gives_exists():
    """`dpmed.read_results`, `dpmed.config.DataConfig`, `dpmed.accounting.truncation`: the README sends readers to
    functions, classes and modules by name, and a rename leaves the pointer dead."""
    named = set(re.findall(r"`(dpmed(?:\.\w+)+)", README.read_text(encoding="utf-8")))
    assert len(named) > 5
    assert sorted(n for n in named if not _resolves(n)) == []


def _choices(model: type, field: str) -> tuple[str, ...]:
    return typing.get_args(model.model_fields[field].annotation)


@pytest.mark.parametrize("what, names", [
    ("data.source", tuple(DATASET_SOURCES)),
    ("model.name", MODEL_NAMES),
    ("training.dp_engine", DP_ENGINES),
    ("evaluation.explanations.method", CAM_METHODS),
    ("mechanism", tuple(typing.get_args(a.model_fields["mechanism"].annotation)[0]
                        for a in typing.get_args(typing.get_args(Arm)[0]))),
    ("accountant", _choices(DpSgdArm, "accountant")),
    ("noise", _choices(DpSgdArm, "noise")),
    ("sampling", _choices(DpSgdArm, "sampling")),
    ("privacy_unit", _choices(DpSgdArm, "privacy_unit")),
])
def test_the_readme_names_every_choice_a_study_key_accepts(what, names):
    """A value the schema accepts that the README never names is a feature users cannot find (a model, a layout,
    an accountant added without a line in the README)."""
    text = README.read_text(encoding="utf-8")
    assert names
    assert [n for n in names if not re.search(rf"(?<![\w-]){re.escape(n)}(?![\w+-])", text)] == []


def test_the_preprocessing_example_says_each_steps_default():
    """The study file's data keys show every preprocessing step turned on (crop, minmax, equalize, normalize),
    which a reader took for what a study gets without them: the comment of each line must state the schema's
    default, so that a study file written from the example knows which steps it adds."""
    block = re.search(r"\n  preprocessing: .*?\n(?=  \S)", _section("A study file, explained"), flags=re.S).group(0)
    comments = {key: " ".join(re.findall(r"#(.*)", body)) for key, body in
                re.findall(r"^    (\w+):(.*?)(?=^    \w|\Z)", block, flags=re.M | re.S)}
    for key, field in PreprocessingConfig.model_fields.items():
        default = {None: "none", False: "false", True: "true"}.get(field.default, field.default)
        assert re.search(rf"\bdefault:? {re.escape(str(default))}\b", comments[key]), (key, comments[key])


def test_the_audit_and_the_schedule_name_every_kind_where_they_are_described():
    """`audit.kind` takes marked and noise canaries and `lr_schedule.kind` a step decay, which the README's audit and
    recipe bullets never named (the words occur elsewhere in other senses, so a search of the whole file misses
    them): a user could not find them but in the source."""
    arms = _section("Privacy arms")
    audit = re.search(r"\n\* `audit: .*?(?=\n\* )", arms, flags=re.S).group(0)
    recipe = re.search(r"\n\* The private training recipe.*?(?=\n\S|\Z)", arms, flags=re.S).group(0)
    for text, names in ((audit, CANARY_KINDS), (recipe, _choices(ScheduleConfig, "kind"))):
        assert [n for n in names if f"kind: {n}" not in text and n != "constant"] == []


def test_the_explanations_block_shows_every_key_at_its_default():
    """The fairness and interpretability block is where a user learns the explanations' keys: it left out the
    deletion curve's steps and the pointing game's tolerance, so the interpretability study's settings could be
    found only in its file. Every key is named, and the values shown are the ones a study gets without them."""
    block = re.search(r"```yaml\n(.*?)```", _section("Fairness and interpretability"), flags=re.S).group(1)
    shown = yaml.safe_load(block)["evaluation"]["explanations"]
    assert [key for key in CamConfig.model_fields if key not in block] == []
    assert CamConfig(**shown) == CamConfig()
