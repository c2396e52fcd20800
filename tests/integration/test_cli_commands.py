"""The command line as a user meets it before and around training: --version and `python -m dpmed`, `dpmed plan`,
--device, and messages that name what the user typed (--set, a mistyped mechanism, the setting that differs from the
finished runs). Each uses the tiny phantom study of conftest.py; `dpmed plan` is checked against what `dpmed run`
then did on the same study."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import torch
import yaml

from dpmed.cli import main
from dpmed.numbers import epsilon_text
from dpmed.records import read_record
from dpmed.released_size import count_is_rough


def _study(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return path


def _finished_copy(tiny_study: Path, tmp_path: Path) -> Path:
    """A copy of the finished tiny study's output root (holding tiny/), for tests that run into it."""
    out = tmp_path / "out"
    shutil.copytree(tiny_study, out / tiny_study.name)
    return out


# ------------------------------------------------------------------------------------------------ --version, -m


def test_version_prints_the_installed_version(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"dpmed {metadata.version('dpmed')}"


def test_python_dash_m_dpmed_is_the_dpmed_command():
    done = subprocess.run([sys.executable, "-m", "dpmed", "privacy", "epsilon", "--noise-multiplier", "1",
                           "--sample-rate", "0.01", "--steps", "100", "--delta", "1e-5"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert re.search(r"^eps = [0-9.]+ at delta = 1e-05", done.stdout, flags=re.M)
    bad = subprocess.run([sys.executable, "-m", "dpmed", "privacy", "epsilon", "--noise-multiplier", "1",
                          "--sample-rate", "0.01", "--steps", "100", "--delta", "2"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.startswith("dpmed: error: --delta")


@pytest.mark.parametrize("command", ["run", "plan"])
def test_a_mistake_in_the_study_is_told_before_the_training_stack_is_imported(command, tmp_path):
    """A user fixing a study file waits for each error: run and plan imported the training stack (Opacus, the
    engines, evaluation: seconds) before reading the file, and then torch itself (the data layer's resize)."""
    code = ("import sys\nfrom dpmed.cli import main\n"
            f"code = main([{command!r}, '--set', 'training.epochs=-1', '--out', {str(tmp_path)!r}])\n"
            "print(code, 'opacus' in sys.modules, 'dpmed.study' in sys.modules, 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.stdout.split() == ["2", "False", "False", "False"], (done.stdout, done.stderr)
    assert "training.epochs: must be at least 1" in done.stderr


def test_a_study_of_small_cnn_on_the_dpmed_engine_imports_neither_opacus_nor_torchvision(tiny_text, tmp_path):
    """Every run, worker and `dpmed` command paid seconds for imports only some studies need: Opacus (its engine)
    and torchvision (the ResNets, AlexNet, VGG-16; its import pulls in torch._dynamo)."""
    study = _study(tmp_path, tiny_text.replace("epochs: 3", "epochs: 1"))
    code = ("import sys\nfrom dpmed.cli import main\n"
            f"code = main(['run', {str(study)!r}, '--out', {str(tmp_path / 'out')!r}, '--no-progress'])\n"
            "print(code, 'opacus' in sys.modules, 'torchvision' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.stdout.split()[-3:] == ["0", "False", "False"], (done.stdout, done.stderr)


# ------------------------------------------------------------------------------------------------------- plan


def test_plan_shows_every_run_as_run_then_made_it_and_trains_nothing(tiny_study, tiny_text, tmp_path, capsys):
    """Each run's sigma, eps (with delta, accountant and unit), q and T in `dpmed plan` are the ones `dpmed run`
    then recorded into the same folder; the study's eps, the budget and a timed estimate are printed. Nothing is
    written but the private DP count of the training set, which the run then plans from. One epoch: the plan is
    checked against the record, whatever the number of steps."""
    study = _study(tmp_path, tiny_text.replace("epochs: 3", "epochs: 1"))
    out = tmp_path / "plan-out"
    assert main(["plan", str(study), "--out", str(out)]) == 0
    text, err = capsys.readouterr()
    # the probe says what it times before it does (at 224 px on a CPU a part took minutes, silent)
    assert "estimating the study's time: timing a few steps of each kind of run (--no-estimate skips this)" in err
    assert "timing DP-SGD (dpmed engine) steps of" in err and "timing one evaluation of the" in err
    assert [p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()] == [
        f"{tiny_study.name}/private/released_sizes.json"]   # no runs/, no study.yaml: nothing trained
    # status on that folder says what is there and what to run, not that it is no study folder (found by a user)
    assert main(["status", str(out / tiny_study.name)]) == 2
    assert (f"holds no run yet, only the DP count of the training set that `dpmed plan` drew "
            f"({out / tiny_study.name / 'private' / 'released_sizes.json'}); `dpmed run STUDY --out {out}` trains the "
            "study there") in capsys.readouterr().err
    assert main(["run", str(study), "--out", str(out), "--no-progress"]) == 0
    tiny_study = out / tiny_study.name
    resolved = yaml.safe_load((tiny_study / "study.yaml").read_text())
    count = resolved["dataset"]["released_sizes"]["patients"]
    rough = ", rough: +- 150 at 95 %" if count_is_rough(count, 0.02) else ""
    assert (f"size: DP-SGD plans from the training set's size as released: about {count:,} patients{rough} (not DP: "
            "seed known (reproducible mode); as accounted, a DP count: eps 0.02, delta 0, closed form (discrete "
            "Laplace), add/remove one of what it counts" in text)
    ids = {r["run_id"] for r in resolved["runs"]}
    rows = {line.split()[0]: line for line in text.splitlines() if line.split()[:1] and line.split()[0] in ids}
    assert set(rows) == ids == {"base_seed0", "dp_eps8_C1_seed0"}
    dp_plan = next(r for r in resolved["runs"] if r["run_id"] == "dp_eps8_C1_seed0")["privacy"]
    card = read_record(tiny_study / "runs" / "dp_eps8_C1_seed0" / "run.json").privacy
    dp = rows["dp_eps8_C1_seed0"]
    assert f"sigma = {dp_plan['noise_multiplier']:.4g}" in dp
    assert f" {dp_plan['sample_rate']:.4g} " in dp and f" {dp_plan['steps']} " in dp
    assert f"{epsilon_text(card.epsilon)} (delta {card.delta:.3g}, PLD, add/remove one patient)" in dp
    assert "inf (no privacy)" in rows["base_seed0"]
    # the tests' studies are reproducible: said first, before the eps it voids
    assert re.search(r"^study privacy: NOT DP against anyone who knows the seed \(reproducible mode\); as accounted: "
                     r"the 1 DP-SGD runs together: eps = [0-9.]+ at delta = 1e-05", text, re.M)
    assert "privacy budget: none set" in text
    assert "start: random initialisation; every parameter trains" in text
    assert "task binary (positive class opacity, label 1; negative normal, label 0)" in text   # before: "task binary"
    # 160 phantom images of 16 x 16 px: 4 bytes a pixel, and a 1-byte lesion mask pixel beside each: 204,800 bytes
    assert "205 kB of images in memory, and a copy in each --workers process)" in text
    # a fast machine trains this tiny study in under half a second, so "about 0:00" is a right answer here
    assert re.search(r"^estimated time: about \d+:\d\d for `dpmed run`: \d+:\d\d to read the data", text, re.M)
    assert re.search(r"how: timed now on cpu .*DP-SGD", text)
    for row in rows.values():
        assert re.search(r"\d+:\d\d$", row)                     # each run's own estimate


def test_plan_of_a_finished_folder_says_nothing_is_left_to_train(tiny_study, tiny_text, tmp_path, capsys):
    out = _finished_copy(tiny_study, tmp_path)
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    assert main(["plan", str(_study(tmp_path, tiny_text)), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "2 of 2 runs finished earlier, not retrained" in text
    assert "nothing to train" in text and text.count(" done\n") == 2
    assert before == sorted(p.relative_to(out) for p in out.rglob("*"))
    # another bootstrap: plan says the runs are evaluated again, not retrained, and changes nothing
    assert main(["plan", str(_study(tmp_path, tiny_text)), "--out", str(out),
                 "--set", "evaluation.bootstrap_resamples=30"]) == 0
    text = capsys.readouterr().out
    assert "(2 evaluated with other settings than this study's or by another dpmed: `run` evaluates them again" in text
    assert text.count(" evaluate again\n") == 2
    assert before == sorted(p.relative_to(out) for p in out.rglob("*"))


def test_a_study_file_without_its_dp_sgd_arm_still_hides_the_training_set_s_size(tiny_study, tiny_text, tmp_path,
                                                                                  capsys):
    """The folder's finished DP-SGD run still counts (the study composes it) and its card states its eps for the
    DP count of the training patients. Before, rerunning the folder with that arm deleted from the study file wrote
    the exact sizes into study.yaml and the report beside it, as a study without DP-SGD may."""
    out = _finished_copy(tiny_study, tmp_path)
    base_only = tiny_text.replace("  - {name: dp, mechanism: dp_sgd, target_epsilon: 8}\n", "")
    assert base_only != tiny_text
    assert main(["plan", str(_study(tmp_path, base_only)), "--out", str(out), "--no-estimate"]) == 0
    assert "study tiny: 1 run planned as `dpmed run` would" in capsys.readouterr().out     # one run, not "1 runs"
    assert main(["run", str(_study(tmp_path, base_only)), "--out", str(out), "--no-progress"]) == 0
    assert "\n1 run (1 finished earlier) in " in capsys.readouterr().out
    released = yaml.safe_load((tiny_study / "study.yaml").read_text())["dataset"]
    dataset = yaml.safe_load((out / "tiny" / "study.yaml").read_text())["dataset"]
    assert dataset["n_train"] is None and dataset["n_train_patients"] is None
    assert dataset["released_sizes"] == released["released_sizes"] and dataset["size_epsilon"] == 0.02
    report = (out / "tiny" / "report.html").read_text()
    assert "training patients)" not in report and "train / validation / test images" not in report
    # and the report says that run is in the folder, counted, but in no table (before: left out unsaid)
    assert "1 finished run(s) in this folder are no longer in the study file" in report
    assert "so they are in no table of this report: dp_eps8_C1_seed0." in report


def test_a_study_folder_s_record_given_as_a_study_says_what_it_is(tiny_study, capsys):
    """study.yaml of a study folder is dpmed's record of the study: given to dpmed, it read as six unknown keys
    ("study: unknown key (did you mean 'std'?)")."""
    assert main(["plan", str(tiny_study / "study.yaml")]) == 2
    err = capsys.readouterr().err
    assert "is the record a study folder keeps of its study" in err and "its 'study:' section" in err
    assert "did you mean" not in err


@pytest.mark.parametrize("command", ["run", "plan"])
def test_a_data_path_without_a_study_file_says_the_quickstart_reads_no_data(command, tmp_path, capsys):
    """Before, the message blamed dpmed's own embedded file: "study file .../src/dpmed/configs/quickstart.yaml has 1
    problem(s): data: source 'phantom' is generated, it takes no 'path'"."""
    assert main([command, "--data-path", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "without a study file dpmed runs the embedded phantom quickstart" in err
    assert f"dpmed {command} configs/kermany.yaml --data-path {tmp_path}" in err and "quickstart.yaml" not in err
    assert not (tmp_path / "out").exists()


def test_plan_shows_the_budget_the_study_spends(tiny_text, tmp_path, capsys):
    text = tiny_text.replace("  - {name: base, mechanism: none}\n", "")
    study = _study(tmp_path, text + "privacy_budget: {epsilon: 20, delta: 1.0e-5}\n")
    assert main(["plan", str(study), "--out", str(tmp_path / "o"), "--no-estimate"]) == 0
    out = capsys.readouterr().out.splitlines()
    line = next(x for x in out if x.startswith("privacy budget:"))
    assert re.fullmatch(r"privacy budget: eps = 20 at delta = 1e-05 \(PLD; add/remove one (patient|image)\); the "
                        r"study's runs together use eps = "
                        r"7\.99\d? of it; reproducible mode: not DP against anyone who knows the seed, whatever the "
                        r"budget", line), line     # the tests' studies are reproducible: the budget line says so too
    total = re.search(r"runs together: eps = (\S+) at", next(x for x in out if x.startswith("study privacy:")))
    assert f"use eps = {total.group(1)} of it;" in line     # before: 7.997 above, 7.996 here (to nearest)
    secure = _study(tmp_path, text.replace("privacy_randomness: reproducible", "privacy_randomness: secure")
                    + "privacy_budget: {epsilon: 20, delta: 1.0e-5}\n")
    assert main(["plan", str(secure), "--out", str(tmp_path / "o2"), "--no-estimate"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("privacy budget:"))
    assert line.endswith(" of it") and "reproducible" not in line, line


# ---------------------------------------------------------------------------------------------- device, clashes


@pytest.mark.parametrize("flags, said", [(["--device", "cuda"], "--device cuda"),
                                         (["--set", "training.device=cuda"], "--set training.device=cuda")])
@pytest.mark.parametrize("command", ["run", "plan"])
def test_cuda_without_a_gpu_is_refused_before_anything_is_read_or_written(tiny_text, tmp_path, capsys, monkeypatch,
                                                                          flags, said, command):
    """`run` is told by `run_study`, `plan` by itself, each once, naming the option that asked for the GPU (the
    study holds how each setting was given: `Study.origin`); a machine with one is told it has none."""
    import dpmed.study

    def read(study):
        raise AssertionError("the data were read")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(dpmed.study, "load_study_data", read)
    out = tmp_path / "out"
    assert main([command, str(_study(tmp_path, tiny_text)), "--out", str(out), *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"dpmed: error: {said}: training.device is cuda, but this machine has no CUDA GPU")
    assert "--device cpu" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


@pytest.mark.parametrize("command", ["run", "plan"])
def test_public_pretraining_on_a_gpu_this_machine_lacks_is_refused_before_anything_is_read_or_written(
        tiny_text, tmp_path, capsys, monkeypatch, command):
    """pretrain.training.device trains the public model first: `run` met it after reading both data sets and
    making the folder, as an internal error with a traceback, and `plan` not at all."""
    import dpmed.study

    def read(study):
        raise AssertionError("the data were read")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(dpmed.study, "load_study_data", read)
    text = tiny_text + ("pretrain: {public: a second phantom, data: {source: phantom, seed: 1}, "
                        "training: {steps: 2, device: cuda}}\n")
    out = tmp_path / "out"
    assert main([command, str(_study(tmp_path, text)), "--out", str(out), "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dpmed: error: pretrain.training.device is cuda, but this machine has no CUDA GPU")
    assert "set pretrain.training.device to cpu or auto" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_a_finished_run_trained_on_a_gpu_is_evaluated_again_on_the_device_this_study_asks_for(
        tiny_study, tiny_text, tmp_path, capsys, monkeypatch):
    """The device is where a run executes, not what it released: a study whose evaluation settings changed, on a
    machine without the GPU its finished runs trained on, evaluates them again here. It took the device from the
    record and failed as an internal error with a traceback file, while `dpmed plan` had said it would evaluate them."""
    import json

    out = _finished_copy(tiny_study, tmp_path)
    for path in out.rglob("run.json"):
        record = json.loads(path.read_text())
        record["plan"]["training"]["device"] = "cuda"
        path.write_text(json.dumps(record))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    study, again = str(_study(tmp_path, tiny_text)), ["--set", "evaluation.bootstrap_resamples=30"]
    assert main(["plan", study, "--out", str(out), "--no-estimate", *again]) == 0
    shown = capsys.readouterr().out
    assert shown.count("evaluate again") == 2 and "would evaluate 2 runs again from their models" in shown
    assert main(["run", study, "--out", str(out), "--no-progress", *again]) == 0
    assert "evaluated again" in capsys.readouterr().err
    records = [read_record(path) for path in out.rglob("run.json")]
    assert len(records) == 2
    assert all(r.metrics["n_resamples"] == 30 and r.plan.training.device == "cuda" for r in records)


def test_plan_refuses_finished_runs_started_from_other_contents_of_model_weights_as_run_and_status_tell_them(
        tiny_text, tmp_path, capsys):
    """Other bytes in the model.weights file: `dpmed status` says the next `dpmed run` refuses the study, and it does,
    while `dpmed plan` listed the runs as done and said run "would only rewrite the report"."""
    from dpmed.models import build_model

    weights = tmp_path / "w.pt"
    torch.save(build_model("small_cnn", in_channels=1, num_outputs=2, image_size=16, seed=1).state_dict(), weights)
    text = tiny_text.replace("  - {name: dp, mechanism: dp_sgd, target_epsilon: 8}\n", "") + \
        f"model: {{name: small_cnn, weights: {weights}, weights_source: a test}}\n"
    study, out = str(_study(tmp_path, text)), str(tmp_path / "out")
    assert main(["run", study, "--out", out, "--no-progress"]) == 0
    assert main(["plan", study, "--out", out, "--no-estimate"]) == 0
    capsys.readouterr()
    torch.save(build_model("small_cnn", in_channels=1, num_outputs=2, image_size=16, seed=2).state_dict(), weights)
    assert main(["status", str(tmp_path / "out" / "tiny")]) == 0
    assert "the next `dpmed run` refuses the study" in capsys.readouterr().out
    said = f"started from other contents of model.weights ({weights}) than the file holds now"
    for command in (["plan", study, "--out", out, "--no-estimate"], ["run", study, "--out", out, "--no-progress"]):
        assert main(command) == 2
        assert said in capsys.readouterr().err
    weights.unlink()        # gone: status tells it once, before the runs, as what run does, and run does it
    assert main(["status", str(tmp_path / "out" / "tiny")]) == 0
    assert re.match(rf"model.weights +unreadable: {re.escape(str(weights))} does not exist: the next `dpmed run` "
                    "refuses the study", capsys.readouterr().out)
    assert main(["run", study, "--out", out, "--no-progress"]) == 2
    assert f"model.weights: no such file {weights}" in capsys.readouterr().err


def test_finished_runs_made_otherwise_are_refused_naming_the_setting_but_not_the_device(tiny_study, tiny_text,
                                                                                       tmp_path, capsys):
    out = _finished_copy(tiny_study, tmp_path)
    study = str(_study(tmp_path, tiny_text))
    before = {p: (p.stat().st_ino, p.read_bytes()) for p in out.rglob("run.json")}
    assert main(["run", study, "--out", str(out), "--no-progress", "--set", "training.learning_rate=0.01",
                 "--set", "training.device=cpu", "--set", "training.threads=1"]) == 2
    err = capsys.readouterr().err
    assert "2 finished run(s)" in err
    assert err.count("training.learning_rate: 0.001 in the finished run, 0.01 now") == 2
    assert "device" not in err and "threads" not in err     # where and how fast runs execute changes no result
    assert before == {p: (p.stat().st_ino, p.read_bytes()) for p in out.rglob("run.json")}
    # only the device and the physical batch (memory: what a worker that ran out of it is told to lower) changed:
    # the finished runs are the study's runs
    assert main(["run", study, "--out", str(out), "--no-progress", "--set", "training.device=cpu",
                 "--set", "training.physical_batch_size=4"]) == 0
    assert "2 runs (2 finished earlier)" in capsys.readouterr().out
    assert before == {p: (p.stat().st_ino, p.read_bytes()) for p in out.rglob("run.json")}


# ----------------------------------------------------------------------------------------- messages in user words


def test_a_bad_set_is_blamed_on_the_set_not_on_the_study_file(tiny_text, tmp_path, capsys):
    study = _study(tmp_path, tiny_text)
    assert main(["run", str(study), "--out", str(tmp_path / "out"), "--set", "training.epochs=abc"]) == 2
    err = capsys.readouterr().err
    head, *problems = err.strip().splitlines()
    assert head.startswith("dpmed: error: the settings given with study file")
    assert problems and problems[0].startswith("  - --set training.epochs=abc: training.epochs")
    assert "Traceback" not in err and not (tmp_path / "out").exists()


def test_a_key_set_again_after_a_set_of_its_section_takes_the_later_value(tiny_text, tmp_path, monkeypatch):
    """--set applies in the order given: before, a key given twice kept its first place, so a --set of its section
    between the two applied after both and its value won over the later --set of the key."""
    import dpmed.config
    loaded = []
    real = dpmed.config.load_study
    monkeypatch.setattr(dpmed.config, "load_study", lambda *a, **k: loaded.append(real(*a, **k)) or loaded[-1])
    study = _study(tmp_path, tiny_text)
    main(["plan", str(study), "--out", str(tmp_path / "out"), "--no-estimate", "--set", "training.epochs=1",
          "--set", "training={epochs: 2}", "--set", "training.epochs=3"])
    assert loaded and loaded[0].training.epochs == 3


def test_a_bad_value_is_blamed_on_the_set_that_gave_it_last(tiny_text, tmp_path, capsys):
    """Of a section's --set and a later --set of a key inside it, the later gave the bad value: name that one, not
    the section's."""
    study = _study(tmp_path, tiny_text)
    assert main(["run", str(study), "--out", str(tmp_path / "out"), "--set", "training={epochs: 2}",
                 "--set", "training.epochs=abc"]) == 2
    problems = capsys.readouterr().err.strip().splitlines()[1:]
    assert problems and problems[0].startswith("  - --set training.epochs=abc: training.epochs"), problems


def test_a_mistyped_mechanism_gets_did_you_mean(tiny_text, tmp_path, capsys):
    study = _study(tmp_path, tiny_text.replace("mechanism: dp_sgd", "mechanism: dp-sgd"))
    assert main(["plan", str(study), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "arms[1].mechanism: 'dp-sgd' is not a mechanism (did you mean 'dp_sgd'?)" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("workers", ["0", "-2", "two"])
def test_workers_below_one_are_refused_while_the_command_line_is_parsed(tiny_text, tmp_path, capsys, workers):
    """Before: --workers 0 was refused only after the data were read (minutes on a real dataset) and the output
    folder made."""
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as done:
        main(["run", str(_study(tmp_path, tiny_text)), "--out", str(out), "--workers", workers])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == (f"dpmed run: error: argument --workers: must be a positive integer (1 or "
                                            f"more), got {workers}")
    assert "Traceback" not in err and not out.exists()


def test_executor_ray_without_ray_is_refused_before_the_data_are_read(tiny_text, tmp_path, capsys, monkeypatch):
    """Before: the data were read and study.yaml, the released counts and the log written before the refusal."""
    monkeypatch.setitem(sys.modules, "ray", None)            # as if the extra were not installed
    out = tmp_path / "out"
    assert main(["run", str(_study(tmp_path, tiny_text)), "--out", str(out), "--executor", "ray"]) == 2
    err = capsys.readouterr().err
    assert err == "dpmed: error: --executor ray needs Ray, which is not installed: pip install 'dpmed[ray]'\n"
    assert not out.exists()


@pytest.mark.parametrize("flags, message", [
    (["--address", "ray://h:1"], "--address ray://h:1 names a Ray cluster and applies only with --executor ray"),
    (["--address", "ray://h:1", "--executor", "local"], "--address ray://h:1 names a Ray cluster"),
    (["--executor", "ray", "--workers", "2"], "--workers 2 counts local processes and does not apply with --executor "
                                              "ray"),
    (["--executor", "ray", "--workers", "1"], "--workers 1 counts local processes"),
])
def test_an_executor_s_flag_given_to_the_other_executor_is_refused_before_the_data_are_read(
        tiny_text, tmp_path, capsys, flags, message):
    """Before: --address without --executor ray trained locally, exit 0, and --workers with --executor ray was
    dropped; both silently."""
    out = tmp_path / "out"
    assert main(["run", str(_study(tmp_path, tiny_text)), "--out", str(out), *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"dpmed: error: {message}") and err.count("\n") == 1
    assert "Traceback" not in err and not out.exists()


def test_a_data_path_that_does_not_exist_says_what_it_tried_and_from_where(tmp_path, capsys, monkeypatch):
    """Before: "--data-path gone.npz: no such file or folder (/abs/gone.npz)", without what a relative path is read
    from; the --help text called it "the dataset file" and said nothing of relative paths."""
    study = _study(tmp_path, "name: real\ndata: {source: medmnist, path: x.npz}\narms: [{name: a, mechanism: none}]\n")
    cwd = tmp_path / "here"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    assert main(["plan", str(study), "--out", str(tmp_path / "out"), "--data-path", "gone.npz"]) == 2
    err = capsys.readouterr().err
    assert err == (f"dpmed: error: --data-path gone.npz: no such file or folder (tried {cwd / 'gone.npz'}: a relative "
                   f"--data-path is read from the current directory, {cwd}); pass the dataset's file or folder\n")
    assert main(["plan", str(study), "--data-path", str(tmp_path / "gone.npz")]) == 2
    assert capsys.readouterr().err == (f"dpmed: error: --data-path {tmp_path / 'gone.npz'}: no such file or folder; "
                                       "pass the dataset's file or folder\n")
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    assert ("a relative --data-path (or path given with --set) is read from the current directory (a relative "
            "data.path, from the study file's folder)") in " ".join(capsys.readouterr().out.split())


def test_plan_help_says_the_one_file_plan_writes(capsys):
    """Before: `dpmed plan --help` did not say that plan draws the DP count and writes it into the study folder."""
    with pytest.raises(SystemExit) as done:
        main(["plan", "--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "OUT/<study>/private/released_sizes.json" in text and "the DP count of the training set" in text


@pytest.mark.parametrize("workers, cores, said", [
    (None, 8, "then 0:40 for the 2 runs to train one after the other (0:36 training, 0:04 evaluation); --workers N "
              "divides the runs' part by up to N where there are cores for them"),
    ("2", 8, "then 0:20 for the 2 runs to train 2 at a time (0:40 one after the other: 0:36 training, 0:04 "
             "evaluation)"),
    ("2", 3, "then 0:40 for the 2 runs to train one after the other (0:36 training, 0:04 evaluation); this "
             "machine's 3 cores have room for 1 run at once at their training.threads"),
])
def test_plan_takes_run_s_command_line_and_estimates_with_its_workers(tiny_text, tmp_path, capsys, monkeypatch,
                                                                      workers, cores, said):
    """Before: `dpmed plan` refused --no-progress, --workers, --fail-fast, --executor and --address ("unrecognized
    arguments"), though a user plans by swapping `run` for `plan`; --workers now divides the runs' part of the
    estimate as far as the cores go (the tiny study's runs take 2 threads each)."""
    from dpmed import study as study_module, timing
    from dpmed.timing import Rates

    def estimate(prepared, left):   # the probe's figures, fixed: 10 s and 30 s, 2 s of each evaluation
        return Rates(per_step={}, evaluation=2.0, how="fixed"), dict(zip((p.run_id for p in prepared.todo), (10, 30)))

    monkeypatch.setattr(study_module, "estimate_times", estimate)
    monkeypatch.setattr(timing.os, "cpu_count", lambda: cores)
    flags = ["--no-progress", "--fail-fast", "--executor", "local"]
    flags += [] if workers is None else ["--workers", workers]
    assert main(["plan", str(_study(tmp_path, tiny_text)), "--out", str(tmp_path / "out"), *flags]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("estimated time:"))
    assert f"for `dpmed run{'' if workers is None else ' --workers 2'}`: " in line and line.endswith(said)


def test_plan_help_says_which_of_run_s_options_change_nothing_in_a_plan(capsys):
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--no-progress, --fail-fast, --executor and --address do not change the plan" in text
    assert "--workers N estimates the time with N runs at a time" in text


@pytest.mark.parametrize("flags, message", [
    (["--address", "ray://h:1"], "--address ray://h:1 names a Ray cluster and applies only with --executor ray"),
    (["--executor", "ray", "--workers", "2"], "--workers 2 counts local processes"),
])
def test_plan_refuses_what_run_would_refuse_of_its_options(tiny_text, tmp_path, capsys, flags, message):
    out = tmp_path / "out"
    assert main(["plan", str(_study(tmp_path, tiny_text)), "--out", str(out), *flags]) == 2
    assert message in capsys.readouterr().err and not out.exists()


def test_a_data_path_too_long_for_the_file_system_is_told_in_one_line_not_as_an_internal_error(tmp_path, capsys):
    """A --data-path whose name is longer than the file system allows (255 bytes a name on Linux) cannot even be
    looked up: the lookup's OSError is told as bad input (exit 2, one line naming the flag), not as a dpmed bug."""
    study = _study(tmp_path, "name: real\ndata: {source: medmnist, path: x.npz}\narms: [{name: a, mechanism: none}]\n")
    long = str(tmp_path / ("a" * 300))
    assert main(["plan", str(study), "--out", str(tmp_path / "out"), "--data-path", long]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"dpmed: error: --data-path {long}: not a usable path ([Errno 36] File name too long"), err
    assert err.count("\n") == 1 and "Traceback" not in err and "internal error" not in err


def test_a_relative_data_path_is_read_from_the_current_directory_not_the_study_file_s(tmp_path, capsys, monkeypatch):
    """The study file lies elsewhere and names a data.path that does not exist beside it; --data-path chest_xray,
    relative, is the folder in the current directory."""
    from PIL import Image

    cwd = tmp_path / "here"
    for k in range(30):             # patients enough that validation and test draw both classes
        for folder, name in (("NORMAL", f"IM-{k:04d}-0001.jpeg"), ("PNEUMONIA", f"person{k}_virus_{k}.jpeg")):
            (cwd / "chest_xray" / folder).mkdir(parents=True, exist_ok=True)
            Image.new("L", (12, 12), 60 + 5 * k).save(cwd / "chest_xray" / folder / name)
    (tmp_path / "studies").mkdir()
    study = _study(tmp_path / "studies", "name: rel\ndata: {source: folders, path: chest_xray, image_size: 8}\n"
                                         "training: {batch_size: 4}\narms: [{name: a, mechanism: none}]\n")
    monkeypatch.chdir(cwd)
    assert main(["plan", str(study), "--out", str(tmp_path / "out"), "--data-path", "chest_xray",
                 "--no-estimate"]) == 0
    assert "training patients" in capsys.readouterr().out


def test_the_plan_table_says_about_only_where_an_audit_s_secret_draws_set_t(tmp_path, capsys):
    """An audited arm without DP-SGD trains on what the audit leaves, counted by patients (the phantom repeats some
    patients, so images and patients differ); an audited DP-SGD arm's T is planned exactly."""
    from dpmed.config import load_study
    from dpmed.study import prepare_study
    from dpmed.timing import run_steps

    # reproducible: the DP count of the training patients is then the seed's, not a fresh draw (scale 50 about some
    # hundred patients) that can fall below the canaries, as it once did in a full run
    study = _study(tmp_path, "name: audited\ndata: {source: phantom, n_images: 200, image_size: 16}\n"
                             "privacy_randomness: reproducible\ntraining: {epochs: 10, batch_size: 16}\n"
                             "arms: [{name: plain, mechanism: none, audit: {canaries: 20}},\n"
                             "       {name: dp, mechanism: dp_sgd, target_epsilon: 8, epochs: 2,"
                             " audit: {canaries: 20}}]\n")
    assert main(["plan", str(study), "--out", str(tmp_path / "out"), "--no-estimate"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.startswith(("plain", "dp"))}
    prepared = prepare_study(load_study(study), out=tmp_path / "out")
    train = prepared.dataset.train
    patients = len(set(train.patient_ids.tolist()))
    assert patients < len(train)
    plain, dp = (next(p for p in prepared.plans if p.arm == arm) for arm in ("plain", "dp"))
    assert run_steps(plain, len(train), patients) != run_steps(plain, len(train), len(train))
    assert f" about {run_steps(plain, len(train), patients)} " in rows[plain.run_id]
    assert f" {dp.privacy.steps} " in rows[dp.run_id] and "about" not in rows[dp.run_id]


def test_status_and_report_on_a_file_say_it_is_a_file(tmp_path, capsys):
    (tmp_path / "results.csv").write_text("run_id\n")
    for command in ("status", "report"):
        assert main([command, str(tmp_path / "results.csv")]) == 2
        err = capsys.readouterr().err
        assert f"{tmp_path / 'results.csv'} is a file, not a folder" in err and err.count("\n") == 1


@pytest.mark.parametrize("args, name", [
    (["run", ""], "study"),
    (["plan", "STUDY", "--out", ""], "--out"),
    (["run", "STUDY", "--data-path", " "], "--data-path"),
    (["status", ""], "dir"),
    (["report", ""], "dir"),
])
def test_an_empty_path_is_refused_while_the_command_line_is_parsed(tiny_text, tmp_path, capsys, monkeypatch, args,
                                                                   name):
    """An empty path (an unset shell variable: dpmed run "$STUDY") was read as the current folder: a study file
    that "is a folder", an --out that wrote the study into the current folder, a --data-path that read it as the
    dataset."""
    monkeypatch.chdir(tmp_path)
    study = str(_study(tmp_path, tiny_text))
    with pytest.raises(SystemExit) as done:
        main([study if a == "STUDY" else a for a in args])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == (f"dpmed {args[0]}: error: argument {name}: is empty (an unset shell "
                                            "variable?); give a path")
    assert "Traceback" not in err and sorted(p.name for p in tmp_path.iterdir()) == [Path(study).name]


@pytest.mark.parametrize("command, said", [
    ("status", "interrupted (the step its checkpoint reached: `dpmed run` continues from there if the training "
               "data, which status does not read, are unchanged; or why it cannot)"),
    ("report", "Rebuild results.csv, comparisons.json, report.html and its figures from the finished runs in DIR"),
])
def test_status_and_report_help_say_what_the_command_does(capsys, command, said):
    """Before: `dpmed status --help` and `dpmed report --help` showed only their DIR argument; what each does was
    told by `dpmed --help` alone."""
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0
    assert said in " ".join(capsys.readouterr().out.split())


def test_help_lists_the_exit_statuses_with_a_torchvision_for_another_torch_among_bad_input(capsys):
    """Before: `dpmed --help` listed no exit status, and the command's own list left out the torchvision built for
    another torch that `dpmed run` and `dpmed plan` refuse with status 2."""
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    said = re.search(r"exit status: 0 done; 1 .*?; 2 (.*?); 130 interrupted", text)
    assert said is not None, text
    assert "bad input" in said.group(1) and "a torchvision built for another torch" in said.group(1)
