"""The commands benchmarks/RESULTS.md gives to reproduce its tables still run against today's code: every `dpmed`
line parses and its study, with each `--set` applied, passes the study schema; every harness call parses with the
harness's own flags, also where the text gives it in a sentence or an indented line rather than a bash block;
every test file named exists. Nothing is trained or measured: each block runs in bash with
`dpmed`, `python` and the file-changing commands replaced by a recorder, so the shell's own variables (ARM, OLD,
SN, ...) expand as a reader's shell would expand them. A study key renamed in the schema, or a harness flag
dropped, would otherwise leave a reproduce block that fails only when someone runs it for hours."""

from __future__ import annotations

import argparse
import re
import runpy
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dpmed.cli import _parser
from dpmed.config import load_study, parse_override
from dpmed.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "RESULTS.md"

# What each recorded command is replaced by: its arguments, NUL-separated, then a record separator. `time -f FORMAT` is
# dropped; mkdir, ln and sed (a block that patches a source file) do nothing.
_RECORDER = r"""
record() { printf '%s\0' "$@" $'\x1e' >> "$RECORD"; }
dpmed() { record dpmed "$@"; }
python() { record python "$@"; }
pytest() { record pytest "$@"; }
function /usr/bin/time { shift 2; "$@"; }
mkdir() { :; }; ln() { :; }; sed() { :; }
"""


def _blocks() -> list[tuple[int, str]]:
    text = RESULTS.read_text(encoding="utf-8")
    return [(text[:m.start()].count("\n") + 1, m.group(1)) for m in re.finditer(r"```bash\n(.*?)```", text, re.S)]


def _commands(tmp_path: Path) -> list[tuple[int, list[str]]]:
    commands = []
    for line, block in _blocks():
        record = tmp_path / f"block{line}"
        record.touch()
        done = subprocess.run(["bash", "-c", _RECORDER + block], cwd=tmp_path, env={"RECORD": str(record)},
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and not done.stderr, (line, done.stderr)
        argv: list[str] = []
        for arg in record.read_text().split("\0")[:-1]:
            if arg == "\x1e":
                commands.append((line, argv))
                argv = []
            else:
                argv.append(arg)
    return commands


def _harness_calls_outside_blocks() -> list[str]:
    """Harness calls the text gives in a sentence (`python benchmarks/x.py --flag`) or as an indented line, which
    the bash blocks above do not hold: the same drift (a flag renamed) would pass unseen there. Optional parts
    shown in brackets are checked as if given; a trailing `# comment` is dropped."""
    prose = re.sub(r"```.*?```", "", RESULTS.read_text(encoding="utf-8"), flags=re.S)
    calls = re.findall(r"`(python benchmarks/[^`]*)`", prose)
    calls += re.findall(r"^ {4,}(python benchmarks/(?:.*\\\n)*.*)", prose, flags=re.M)
    return [re.sub(r"\\\n", " ", call).split(" #")[0].replace("[", "").replace("]", "") for call in calls]


class _Parsed(Exception):
    """Raised by a harness's parse_args once its flags have parsed: the harness itself never runs."""


def _check_harness(argv: list[str], monkeypatch) -> None:
    real = argparse.ArgumentParser.parse_args

    def parse_only(self, args=None, namespace=None):
        real(self, args, namespace)
        raise _Parsed

    with monkeypatch.context() as m:
        m.setattr(argparse.ArgumentParser, "parse_args", parse_only)
        m.setattr(sys, "argv", [str(REPO / argv[0]), *argv[1:]])
        m.syspath_prepend(str((REPO / argv[0]).parent))     # as `python benchmarks/x.py` finds x's sibling modules
        with pytest.raises(_Parsed):
            runpy.run_path(str(REPO / argv[0]), run_name="__main__")


def _check_study(args: argparse.Namespace, tmp_path: Path) -> None:
    """The study with the command's overrides, as `dpmed run` would read it, with any data path that is not here
    (the shared data, a file an earlier line of the block writes) replaced by a placeholder."""
    overrides = dict(parse_override(text) for text in args.overrides)
    if args.device is not None:
        overrides["training.device"] = args.device
    placeholder = tmp_path / "data.npz"
    placeholder.touch()
    if args.data_path is not None:
        overrides["data.path"] = str(args.data_path if args.data_path.exists() else placeholder)
    study = None if args.study is None else REPO / args.study
    try:
        load_study(study, overrides)
    except ConfigError as exc:
        if "does not exist" not in str(exc):
            raise
        try:                                       # a folder (the Kermany layout), else a file (a MedMNIST .npz)
            load_study(study, {**overrides, "data.path": str(tmp_path)})
        except ConfigError:
            load_study(study, {**overrides, "data.path": str(placeholder)})


@pytest.mark.skipif(shutil.which("bash") is None, reason="the reproduce blocks are bash")
def test_every_reproduce_command_in_results_parses_and_its_study_is_valid(tmp_path, monkeypatch):
    commands = _commands(tmp_path)
    assert sum(argv[0] == "dpmed" for _, argv in commands) >= 30            # the blocks were found and expanded
    for line, argv in commands:
        where = f"RESULTS.md line {line}: {' '.join(argv)[:160]}"
        if argv[0] == "dpmed":
            args = _parser().parse_args(argv[1:])
            # a study the block names but the repository does not hold (a scratch file its text describes) is skipped
            if args.command in ("run", "plan") and (args.study is None or (REPO / args.study).is_file()):
                try:
                    _check_study(args, tmp_path)
                except ConfigError as exc:
                    raise AssertionError(f"{where}\n{exc}") from None
        elif argv[0] == "python" and argv[1].startswith("benchmarks/"):
            try:
                _check_harness(argv[1:], monkeypatch)
            except SystemExit:                                          # argparse refused a flag (printed above)
                raise AssertionError(f"{where}: the harness refuses its flags") from None
        elif argv[0] == "python" and argv[1] == "-m" and argv[2] == "pytest" or argv[0] == "pytest":
            named = [a for a in argv if a.startswith("tests/")]
            assert named and all((REPO / a).is_file() for a in named), where
        else:
            assert argv[:2] == ["python", "-c"], where                    # a one-off script, shown in full


@pytest.mark.parametrize("call", _harness_calls_outside_blocks())
def test_every_harness_call_in_the_text_parses(call, monkeypatch):
    argv = shlex.split(call)
    assert argv[0] == "python" and (REPO / argv[1]).is_file(), call
    try:
        _check_harness(argv[1:], monkeypatch)
    except SystemExit:                                                  # argparse refused a flag (printed above)
        raise AssertionError(f"RESULTS.md: {call}: the harness refuses its flags") from None


def test_harness_calls_outside_blocks_are_found():
    calls = _harness_calls_outside_blocks()
    assert any("\n" not in c and "--cache-dir" in c for c in calls)     # an indented call continued with a backslash
    assert any("private_copies.py --images" in c for c in calls)      # a call whose optional flags were bracketed
