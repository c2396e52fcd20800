"""The public surface: every exported name imports, and the layer contracts in pyproject.toml hold."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import dpmed


def test_every_exported_name_exists():
    for name in dpmed.__all__:
        assert getattr(dpmed, name) is not None, name


def test_import_contracts_hold():
    """Data flows one way through the stages; accounting imports no torch (import-linter, pyproject.toml)."""
    beside = Path(sys.executable).with_name("lint-imports")
    exe = str(beside) if beside.exists() else shutil.which("lint-imports")
    if exe is None:
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run([exe], cwd=repo, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_names_imported_on_first_use_are_listed_for_completion():
    assert {"run_study", "load_study", "read_results", "FolderError"} <= set(dir(dpmed))
    assert issubclass(dpmed.FolderError, dpmed.DpmedError)


def test_reading_what_is_not_there_is_a_dpmed_error_naming_it(tmp_path):
    with pytest.raises(dpmed.ConfigError, match="holds no results.csv"):
        dpmed.read_results(tmp_path)
    with pytest.raises(dpmed.ConfigError, match=r"cannot read the run record .*run.json: No such file"):
        dpmed.read_record(tmp_path / "run.json")


def test_reading_results_from_the_out_folder_names_the_study_folder_in_it(tmp_path):
    """read_results wants the study's folder (out/<study name>); given the out folder itself, it said only that
    no results.csv was there."""
    (tmp_path / "quickstart").mkdir()
    (tmp_path / "quickstart" / "results.csv").write_text("run_id\nbase_seed0\n")
    with pytest.raises(dpmed.ConfigError, match=rf"; {tmp_path / 'quickstart'} is such a folder$"):
        dpmed.read_results(tmp_path)
    assert dpmed.read_results(tmp_path / "quickstart")["run_id"].tolist() == ["base_seed0"]


def test_load_study_without_a_path_is_the_embedded_quickstart():
    assert dpmed.load_study().name == "quickstart"


@pytest.mark.parametrize("overrides", [["training.epochs=2"], "training.epochs=2"])
def test_overrides_not_given_as_a_mapping_are_a_dpmed_error_showing_the_form(overrides):
    """load_study(None, ["training.epochs=2"]) raised "dictionary update sequence element #0 has length 16; 2 is
    required"."""
    with pytest.raises(dpmed.ConfigError, match=rf"^overrides map dotted keys to values, e.g. "
                                                rf"\{{'training.epochs': 2\}}, not {type(overrides).__name__} "):
        dpmed.load_study(None, overrides)


@pytest.mark.parametrize(("options", "message"), [({"executor": "locl"}, "unknown executor 'locl'"),
                                                  ({"workers": 0}, r"workers \(--workers\) must be at least 1"),
                                                  ({"workers": -1}, r"workers \(--workers\) must be at least 1"),
                                                  ({"workers": "2"}, r"workers \(--workers\) must be a whole "
                                                                     r"number, got '2' \(str\)$"),
                                                  ({"workers": 2.5}, r"workers .* got 2\.5 \(float\)$"),
                                                  ({"workers": 1.0}, r"workers .* got 1\.0 \(float\)$"),
                                                  ({"workers": True}, r"workers .* got True \(bool\)$"),
                                                  ({"address": "ray://head:10001"}, "applies only with")])
def test_run_study_refuses_bad_options_before_it_reads_data_or_writes(tmp_path, monkeypatch, options, message):
    """They were refused only after the data had been read, the noise calibrated, and the study folder written.
    (Should the check let one through, the study must not start: a pool of no workers would wait for ever.)"""
    import dpmed.study

    def started(*args, **kwargs):
        raise AssertionError(f"the study started with {options}")

    monkeypatch.setattr(dpmed.study, "_run_study", started)
    with pytest.raises(dpmed.ConfigError, match=message):
        dpmed.run_study(dpmed.load_study(), out=tmp_path / "out", **options)
    assert not (tmp_path / "out").exists()


def test_run_study_in_a_starting_worker_process_says_to_guard_the_script(monkeypatch):
    """A script without `if __name__ == "__main__":` calls run_study again in each spawned worker as it imports."""
    import multiprocessing

    monkeypatch.setattr(multiprocessing.current_process(), "_inheriting", True, raising=False)
    with pytest.raises(dpmed.ConfigError, match="called by a worker process as it started"):
        dpmed.run_study("no-such-study.yaml")


def test_run_study_takes_a_path_draws_bars_only_on_a_terminal_and_catches_a_lost_ctrl_c(tmp_path, monkeypatch):
    """From Python: a study file's path will do; bars (carriage returns) only where stderr is a terminal, as the
    command does; and a Ctrl-C that a C extension swallowed is raised again at the next check, while SIGTERM stays
    the caller's."""
    import signal

    import dpmed.study
    from dpmed.interruption import check

    seen = {}

    def fake(study, **kwargs):
        seen.update(name=study.name, progress=kwargs["progress"], term=signal.getsignal(signal.SIGTERM))
        try:
            signal.raise_signal(signal.SIGINT)
            sum(range(10))
        except KeyboardInterrupt:
            pass                                  # lost, as torch's call backs may lose it
        check()

    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(dpmed.study, "_run_study", fake)
    monkeypatch.setattr(sys, "stderr", open(tmp_path / "stderr", "w"))
    with pytest.raises(KeyboardInterrupt):
        dpmed.run_study(Path(dpmed.__file__).parent / "configs" / "quickstart.yaml", out=tmp_path)
    assert seen == {"name": "quickstart", "progress": False, "term": before[1]}
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_run_study_draws_bars_in_a_jupyter_kernel_and_none_where_there_is_no_stderr(tmp_path, monkeypatch):
    """A notebook's stderr is no terminal, yet tqdm draws its bars there as widgets; pythonw has no stderr."""
    import types

    import dpmed.study

    seen = []
    monkeypatch.setattr(dpmed.study, "_run_study", lambda study, **kwargs: seen.append(kwargs["progress"]))
    monkeypatch.setattr(sys, "stderr", open(tmp_path / "stderr", "w"))
    monkeypatch.setitem(sys.modules, "ipykernel", types.ModuleType("ipykernel"))
    dpmed.run_study(dpmed.load_study(), out=tmp_path)
    monkeypatch.delitem(sys.modules, "ipykernel")
    monkeypatch.setattr(sys, "stderr", None)
    dpmed.run_study(dpmed.load_study(), out=tmp_path)
    assert seen == [True, False]


def test_run_study_called_by_a_starting_worker_names_the_missing_main_guard(tmp_path, monkeypatch):
    """With workers > 1 each spawned worker imports the calling script: unguarded, it called run_study again, and the
    parent reported every run as killed from outside (out of memory)."""
    import multiprocessing

    monkeypatch.setattr(multiprocessing.current_process(), "_inheriting", True, raising=False)
    with pytest.raises(dpmed.ConfigError, match='under `if __name__ == "__main__":`'):
        dpmed.run_study(dpmed.load_study(), out=tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("study", [42, {"name": "x"}])
def test_a_study_of_another_type_is_a_dpmed_error_naming_what_was_given(study, tmp_path):
    """run_study(42) raised TypeError from pathlib ("expected str, bytes or os.PathLike object, not int")."""
    with pytest.raises(dpmed.ConfigError, match=rf"^a study is a study file's path \(str or Path\) or a loaded "
                                                rf"Study, not {type(study).__name__} "):
        dpmed.run_study(study, out=tmp_path)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("out", [123, None])
def test_an_out_folder_of_another_type_is_a_dpmed_error_naming_the_argument(out):
    """run_study(study, out=123) raised pathlib's TypeError ("expected str, bytes or os.PathLike object, not int"),
    which names no argument; read_results likewise."""
    with pytest.raises(dpmed.ConfigError, match=rf"^out, the folder to write the study into, is a path \(str or "
                                                rf"Path\), not {type(out).__name__} {out!r}$"):
        dpmed.run_study(dpmed.load_study(), out=out)
    with pytest.raises(dpmed.ConfigError, match=rf"^read_results takes a study folder's path \(str or Path\), "
                                                rf"not {type(out).__name__} {out!r}$"):
        dpmed.read_results(out)


def test_a_study_edited_without_validation_is_checked_before_anything_runs(tmp_path):
    """A Study edited with pydantic's model_copy(update=...) skips validation: run_study failed late with a raw
    pydantic "validation error for RunPlan"; it is checked up front, in load_study's words."""
    edited = dpmed.load_study().model_copy(update={"seeds": "abc"})
    with pytest.raises(dpmed.ConfigError, match=r"^the Study passed to run_study has 1 problem\(s\):\n  - seeds: "
                                                r"must be a list, got 'abc'; write its items in brackets"):
        dpmed.run_study(edited, out=tmp_path)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(("argument", "value"), [("progress", "no"), ("progress", 0), ("fail_fast", "no"),
                                                 ("fail_fast", 0), ("fail_fast", None)])
def test_a_switch_that_is_not_a_bool_is_refused_not_taken_as_true(argument, value, tmp_path):
    """run_study(progress="no") drew bars and fail_fast="no" stopped at the first failure: any non-empty string
    is true. progress=None (the default: bars where stderr is a terminal) is the one value besides a bool."""
    with pytest.raises(dpmed.ConfigError, match=rf"^{argument} is True or False, not {type(value).__name__} "
                                                rf"{value!r}$"):
        dpmed.run_study(dpmed.load_study(), out=tmp_path, **{argument: value})
    assert not list(tmp_path.iterdir())


def test_every_accounting_name_is_imported_from_its_module_on_first_use():
    """The accounting package names each export's module by hand (so that reading a ledger imports no accountant):
    a name listed in __all__ but in no module, or in the wrong one, would fail only when first used."""
    from importlib import import_module

    from dpmed import accounting

    assert set(accounting._HOME) == set(accounting.__all__)
    for name, module in accounting._HOME.items():
        assert getattr(accounting, name) is getattr(import_module(module), name), name
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        accounting.nothing


def test_a_type_checker_reads_each_exported_name_from_where_it_is_imported_on_first_use():
    """dpmed ships py.typed, but a name served by the module's __getattr__ is Any to a type checker: the
    TYPE_CHECKING imports must name every exported name, from the module it is imported from at run time."""
    import ast

    tree = ast.parse(Path(dpmed.__file__).read_text(encoding="utf-8"))
    guarded = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    seen = {alias.name: node.module for node in guarded.body if isinstance(node, ast.ImportFrom)
            for alias in node.names}
    assert seen == dpmed._HOME
    assert (Path(dpmed.__file__).parent / "py.typed").is_file()
