"""Finished runs are reused only under the evaluation settings they were evaluated with, also where the folder's
study.yaml is gone (`dpmed.resumption`): before, a rerun without study.yaml reused every run under another
confidence level, and the report headed their 95 % intervals "[50% CI]". Runs evaluated otherwise are now evaluated
again from their models (before, they were refused, and retraining them released a second model of the patients)."""

from __future__ import annotations

import shutil

import pytest

import dpmed.study
from dpmed.cli import main
from dpmed.errors import ConfigError
from dpmed.states import run_states


def _finished_without_study_yaml(tiny_study, tmp_path):
    """The finished tiny study copied to tmp_path/out/tiny, its study.yaml lost (deleted, or never copied back);
    returns the output folder."""
    out = tmp_path / "out"
    shutil.copytree(tiny_study, out / "tiny")
    (out / "tiny" / "study.yaml").unlink()
    return out


def test_without_study_yaml_each_record_says_how_it_was_evaluated(tiny_study, tiny_study_file, tmp_path, capsys):
    """Each record says its own evaluation settings, so a folder without study.yaml still knows which runs to
    evaluate again; and evaluating again reads the released model, trains nothing and changes no privacy record."""
    import json

    out = _finished_without_study_yaml(tiny_study, tmp_path)
    runs = sorted((out / "tiny" / "runs").iterdir())
    models = {r.name: (r / "model.pt").read_bytes() for r in runs}
    before = {r.name: json.loads((r / "run.json").read_text()) for r in runs}
    capsys.readouterr()
    command = ["run", str(tiny_study_file), "--out", str(out), "--no-progress"]
    assert main([*command, "--set", "evaluation.confidence=0.5"]) == 0
    assert capsys.readouterr().err.count("finished earlier, evaluated again under this study's evaluation") == 2
    for r in runs:
        after = json.loads((r / "run.json").read_text())
        assert after["metrics"]["confidence"] == 0.5 and before[r.name]["metrics"]["confidence"] == 0.95
        assert after["metrics"]["test_auroc"] == before[r.name]["metrics"]["test_auroc"]        # the same model
        for key in ("privacy", "ledger", "plan", "timing"):
            assert after[key] == before[r.name][key], key
        assert (r / "model.pt").read_bytes() == models[r.name]
    assert "[50% CI]" in (out / "tiny" / "report.html").read_text()
    assert main([*command, "--set", "evaluation.explanations={n_images: 4}"]) == 0
    assert all((r / "cams.npz").is_file() for r in runs)
    assert main(command) == 0                                                   # as they were made
    assert not any((r / "cams.npz").exists() for r in runs)
    assert all(json.loads((r / "run.json").read_text()) == before[r.name] for r in runs)
    assert main(command) == 0
    assert "2 finished earlier" in capsys.readouterr().out and (out / "tiny" / "study.yaml").is_file()


def test_a_run_to_evaluate_again_without_its_model_is_refused_naming_the_file(tiny_study, tiny_study_file, tmp_path,
                                                                              capsys):
    """Refused before anything is written: study.yaml and every run as they were (before, the runs ahead of it were
    evaluated again and study.yaml stated the new settings for all of them), whether the model is gone or damaged
    (before, a damaged one was found after study.yaml stated the new settings)."""
    out = tmp_path / "out"
    shutil.copytree(tiny_study, out / "tiny")
    (out / "tiny" / "runs" / "dp_eps8_C1_seed0" / "model.pt").unlink()
    kept = {p: p.read_bytes() for p in (out / "tiny").rglob("*.json")} | {
        out / "tiny" / "study.yaml": (out / "tiny" / "study.yaml").read_bytes()}
    capsys.readouterr()
    assert main(["run", str(tiny_study_file), "--out", str(out), "--no-progress",
                 "--set", "evaluation.bootstrap_resamples=30"]) == 2
    err = capsys.readouterr().err
    assert "the finished run dp_eps8_C1_seed0 was evaluated with other settings" in err and "model.pt is gone" in err
    assert "Traceback" not in err
    assert all(p.read_bytes() == b for p, b in kept.items() if p.is_file() and "private" not in p.parts)
    (out / "tiny" / "runs" / "dp_eps8_C1_seed0" / "model.pt").write_bytes(b"not a model")      # damaged, not gone
    assert main(["run", str(tiny_study_file), "--out", str(out), "--no-progress",
                 "--set", "evaluation.bootstrap_resamples=30"]) == 2
    err = capsys.readouterr().err
    assert "the finished run dp_eps8_C1_seed0's model" in err and "model.pt" in err and "Traceback" not in err
    assert all(p.read_bytes() == b for p, b in kept.items() if p.is_file() and "private" not in p.parts)


def test_an_old_run_json_s_private_timing_stays_out_when_the_run_is_evaluated_again(tiny_study, tiny_study_file,
                                                                                    tmp_path):
    """A DP-SGD run.json an older dpmed wrote held the run's seconds; the rerun moves them to private/, and
    evaluating the run again wrote the record as read before that, seconds included."""
    import json

    out = tmp_path / "out"
    shutil.copytree(tiny_study, out / "tiny")
    record = out / "tiny" / "runs" / "dp_eps8_C1_seed0" / "run.json"
    data = json.loads(record.read_text())
    data["timing"].update(train_seconds=123.4, total_seconds=130.0, resumed_from=0)
    record.write_text(json.dumps(data))
    assert main(["run", str(tiny_study_file), "--out", str(out), "--no-progress",
                 "--set", "evaluation.confidence=0.5"]) == 0
    timing = json.loads(record.read_text())["timing"]
    assert timing["train_seconds"] is None and timing["total_seconds"] is None and timing["resumed_from"] is None


def _base_only(tiny_text: str, tmp_path, evaluation: str, out) -> list[str]:
    """The `dpmed run` command of the tiny study without its DP arm (the base arm alone: fast), with ``evaluation``
    added to its evaluation settings, writing into ``out``."""
    study = tmp_path / "s.yaml"
    study.write_text(tiny_text.replace("  - {name: dp, mechanism: dp_sgd, target_epsilon: 8}\n", "")
                     .replace("evaluation: {bootstrap_resamples: 20}",
                              f"evaluation: {{bootstrap_resamples: 20, {evaluation}}}"))
    return ["run", str(study), "--out", str(out), "--no-progress"]


def test_the_explained_images_and_the_pointing_tolerance_count_and_a_test_set_smaller_than_asked_is_no_change(
        tiny_text, tmp_path, capsys):
    """A record holds the images it explained, min(n_images, the test set); the pointing tolerance where lesion masks
    were explained (the phantom has them). Before, both were ignored, and a rerun reused runs under another number
    of images and another tolerance while study.yaml and the report stated the new ones. Read from the records
    alone (study.yaml deleted), either change has the run evaluated again; asking for more images than the test set
    holds is no change."""
    out = tmp_path / "out"
    command = _base_only(tiny_text, tmp_path, "explanations: {n_images: 1000}", out)
    assert main(command) == 0
    (out / "tiny" / "study.yaml").unlink()
    capsys.readouterr()
    assert main([*command, "--set", "evaluation.explanations={n_images: 5000}"]) == 0     # the whole test set again
    assert "finished earlier, skipped" in capsys.readouterr().err
    (out / "tiny" / "study.yaml").unlink()
    again = "finished earlier, evaluated again"
    assert main([*command, "--set", "evaluation.explanations={n_images: 5}"]) == 0
    assert again in capsys.readouterr().err
    (out / "tiny" / "study.yaml").unlink()
    assert main([*command, "--set", "evaluation.explanations={n_images: 5, pointing_tolerance: 3}"]) == 0
    assert again in capsys.readouterr().err


def test_the_attributes_fingerprint_sees_sex_age_masks_and_normalisation_and_nothing_else():
    """Before, only images, labels and patient ids were fingerprinted: a study whose CSV's ages were corrected
    reused its finished runs, and one table then held fairness groups of two different age columns."""
    from dataclasses import replace

    import numpy as np

    from dpmed.data import load_dataset
    from dpmed.resumption import attributes_fingerprint, data_fingerprints

    dataset = load_dataset(source="phantom", path=None, image_size=16, channels=1, seed=0, n_images=60)
    assert dataset.test.masks is not None
    same = replace(dataset, test=replace(dataset.test, age=dataset.test.age.copy()))
    assert attributes_fingerprint(same) == attributes_fingerprint(dataset)
    masks = dataset.test.masks.copy()
    masks[0, 0, 0] = ~masks[0, 0, 0]
    sex = dataset.val.sex.copy()
    sex[0] = "male" if sex[0] != "male" else "female"
    changed = {"age": replace(dataset, test=replace(dataset.test, age=dataset.test.age + 25)),
               "sex": replace(dataset, val=replace(dataset.val, sex=sex)),
               "masks": replace(dataset, test=replace(dataset.test, masks=masks)),
               "no masks": replace(dataset, test=replace(dataset.test, masks=None)),
               "normalisation": replace(dataset, normalization=((0.5,), (0.25,)))}
    prints = {name: attributes_fingerprint(d) for name, d in changed.items()}
    assert attributes_fingerprint(dataset) not in prints.values() and len(set(prints.values())) == len(prints)
    # the released counts of the training set stay keyed to the images, labels and patients alone
    assert {data_fingerprints(d) for d in changed.values()} == {data_fingerprints(dataset)}
    # and to each of those: one training patient's id changed is other data (the patient unit groups by it)
    ids = dataset.train.patient_ids.copy()
    ids[0] = "someone else"
    other = data_fingerprints(replace(dataset, train=replace(dataset.train, patient_ids=ids)))
    assert all(mine != theirs for mine, theirs in zip(data_fingerprints(dataset), other, strict=True))
    assert np.isfinite(dataset.test.age).any()


def test_a_finished_run_s_key_and_checkpoint_left_by_a_stop_are_deleted_by_the_next_run(tiny_study, tiny_study_file,
                                                                                         tmp_path, capsys):
    """A stop between writing run.json and deleting the run's secrets left its privacy key and checkpoint for good:
    nothing resumes a finished run, so nothing deleted them, though no file may be left to regenerate its noise."""
    from dpmed.folders import StudyFolder

    out = tmp_path / "out"
    shutil.copytree(tiny_study, out / "tiny")
    run = StudyFolder(out / "tiny").run("dp_eps8_C1_seed0")
    assert run.is_finished
    run.privacy_key.write_bytes(b"the key of a finished run")
    run.checkpoint.write_bytes(b"its last checkpoint")
    assert main(["run", str(tiny_study_file), "--out", str(out), "--no-progress"]) == 0
    assert "2 finished earlier" in capsys.readouterr().out
    assert not run.privacy_key.exists() and not run.checkpoint.exists()


def test_a_study_yaml_of_another_version_is_named_as_such_with_the_key(tiny_study, tiny_study_file, tmp_path,
                                                                         capsys, monkeypatch):
    """Before: "study.yaml cannot be read (ValidationError: 3 validation errors ...); restore it from a copy", though
    the file was whole, a copy would fail the same way, and the cause (a key an older dpmed wrote) went unnamed."""
    import yaml

    out = tmp_path / "tiny"
    shutil.copytree(tiny_study, out)
    data = yaml.safe_load((out / "study.yaml").read_text())
    data["runs"][1]["privacy"]["n_train"] = 112            # what an older dpmed wrote there
    (out / "study.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    capsys.readouterr()
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err
    assert "is not a study.yaml this version of dpmed can read (runs.1.privacy" in err and "n_train" in err, err
    assert "another version of dpmed" in err and "Traceback" not in err and err.count("\n") == 1
    interrupted = out / "private" / "runs" / "dp_eps1_C1_seed0"       # files in private/ alone: it never finished
    interrupted.mkdir(parents=True)
    (interrupted / "checkpoint.pt").write_bytes(b"")
    assert main(["status", str(out)]) == 0    # listed, not refused whole: which runs of an old folder had finished
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("study.yaml") and "unreadable: " in lines[0] and "which runs are pending" in lines[0]
    assert [line.split()[:2] for line in lines[1:4]] == [["base_seed0", "finished"], ["dp_eps1_C1_seed0",
                                                         "interrupted:"], ["dp_eps8_C1_seed0", "finished"]]
    assert lines[-1] == "2 finished, 1 interrupted; study.yaml unreadable"
    shutil.rmtree(interrupted)
    (out / "study.yaml").rename(out / "study.yaml.old")       # gone altogether: still the clear refusal
    assert main(["status", str(out)]) == 2 and "study.yaml is missing" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="holds no study.yaml"):   # from Python too, where no command checks first
        run_states(out)
    (out / "study.yaml.old").rename(out / "study.yaml")
    (out / "private" / "released_sizes.json").unlink()

    def loaded(study):
        raise AssertionError("the data were read before study.yaml")

    monkeypatch.setattr(dpmed.study, "load_study_data", loaded)
    assert main(["run", str(tiny_study_file), "--out", str(tmp_path), "--no-progress"]) == 2
    assert "is not a study.yaml this version of dpmed can read" in capsys.readouterr().err
    assert not (out / "private" / "released_sizes.json").exists()    # refused before the data were read, nothing drawn


def test_a_card_that_claims_more_than_this_version_finds_is_not_reused(tiny_study, tiny_study_file, tmp_path,
                                                                       capsys):
    """A finished run's card is checked against what this dpmed states for the same plan and ledger: an earlier
    dpmed's card (written before the noise sampler's bounded draws were priced) called a run DP that this version
    calls NOT DP, or stated a smaller delta, and was reused as it was."""
    from dpmed.mechanisms import claims_beyond, mechanism_info
    from dpmed.records import read_record

    path = next(p for p in (tiny_study / "runs").glob("*/run.json")
                if read_record(p).plan.privacy.mechanism == "dp_sgd")
    record = read_record(path)
    now = mechanism_info("dp_sgd").card(record.plan.privacy, record.ledger, "secure")
    assert now.is_dp and now.sampler_delta > 0

    def with_card(**changes):
        return record.model_copy(update={"privacy": now.model_copy(update=changes)})

    def claimed_more(run, randomness):
        assert randomness == "secure"                          # as the card says (no reproducible label)
        return claims_beyond(run.privacy, run.plan.privacy, run.ledger)

    assert claimed_more(with_card(), "secure") == []
    assert claimed_more(with_card(epsilon=now.epsilon * 1.1), "secure") == []        # weaker: it still holds
    assert claimed_more(with_card(delta=now.delta * (1 - 1e-7)), "secure") == []    # within the accountant's rounding
    for smaller in ({"delta": now.delta * (1 - 1e-5)}, {"epsilon": now.epsilon * (1 - 1e-5)}):   # and just beyond it
        assert len(claimed_more(with_card(**smaller), "secure")) == 1
    assert claimed_more(with_card(delta=now.delta / 2), "secure") == [     # each eps with its delta, accountant...
        f"its card (an earlier dpmed's) states delta = {now.delta / 2:.6g}, this version {now.delta:.6g}: "
        f"{now.in_brief()}"]
    assert claimed_more(with_card(epsilon=now.epsilon * 0.9), "secure") == [
        f"its card (an earlier dpmed's) states eps = {now.epsilon * 0.9:.6g}, this version {now.epsilon:.6g}: "
        f"{now.in_brief()}"]
    assert "(delta 1e-05, PLD, add/remove one patient)" in now.in_brief()
    tiny_noise = with_card().model_copy(update={"plan": record.plan.model_copy(update={
        "privacy": record.plan.privacy.model_copy(update={"noise_multiplier": 0.01})})})
    voided = mechanism_info("dp_sgd").card(tiny_noise.plan.privacy, record.ledger, "secure")
    assert claimed_more(tiny_noise, "secure") == [
        f"its card (an earlier dpmed's) calls it DP, this version NOT DP: {voided.in_brief()}"]
    assert voided.in_brief().endswith("; not DP: noise below the sampler's reach")

    out = tmp_path / "out"                                   # and `dpmed run` refuses to reuse it, naming the run
    shutil.copytree(tiny_study, out / "tiny")
    copied = out / "tiny" / path.relative_to(tiny_study)
    stored = read_record(copied)
    claimed = stored.privacy.model_copy(update={"is_dp": True})   # the study is reproducible: NOT DP, as labelled
    copied.write_text(stored.model_copy(update={"privacy": claimed}).model_dump_json())
    capsys.readouterr()
    assert main(["run", str(tiny_study_file), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"{path.parent.name}: privacy: its card (an earlier dpmed's) calls it DP, this version NOT DP" in err
    assert main(["report", str(out / "tiny")]) == 0          # the report of the folder says so above the cards
    page = (out / "tiny" / "report.html").read_text()
    assert "These cards claim more than this version of dpmed finds" in page
    assert f"<li>{path.parent.name}: its card (an earlier dpmed&#x27;s) calls it DP, this version NOT DP: " in page
    assert "not DP: seed known</li>" in page


def test_a_finished_dp_run_the_study_file_no_longer_lists_stays_in_the_studys_privacy(tiny_study, tiny_study_file,
                                                                                      tmp_path):
    """Its model is in the folder all the same: the study's eps still composes it (`dpmed.budget`)."""
    import yaml

    out = tmp_path / "out"
    shutil.copytree(tiny_study, out / "tiny")
    fewer = tmp_path / "s.yaml"
    fewer.write_text(tiny_study_file.read_text().replace("  - {name: dp, mechanism: dp_sgd, target_epsilon: 8}\n", ""))
    assert main(["run", str(fewer), "--out", str(out), "--no-progress"]) == 0
    resolved = yaml.safe_load((out / "tiny" / "study.yaml").read_text())
    assert "dp_eps8_C1_seed0" in resolved["study_privacy"]["dp_sgd_runs"]


def test_without_study_yaml_other_data_and_an_unrecorded_evaluation_setting_are_still_refused(
        tiny_study, tiny_study_file, tmp_path, capsys):
    """The data fingerprint lives in private/, not in study.yaml: a folder that lost study.yaml still refuses runs
    on other pixels. And a setting no run.json shows (training_metrics, private output only) is checked too."""
    out = _finished_without_study_yaml(tiny_study, tmp_path)
    capsys.readouterr()
    assert main(["run", str(tiny_study_file), "--out", str(out), "--no-progress",
                 "--set", "data.preprocessing.minmax=true"]) == 2
    assert "the images, labels or patient ids differ" in capsys.readouterr().err
    shutil.rmtree(out / "tiny")
    shutil.copytree(tiny_study, out / "tiny")
    assert main(["run", str(tiny_study_file), "--out", str(out), "--no-progress",
                 "--set", "evaluation.training_metrics=true"]) == 2
    assert "evaluation.training_metrics: False in the finished run, True now" in capsys.readouterr().err


def test_other_class_names_for_the_same_data_rename_the_runs_and_evaluate_them_again(tiny_study):
    """The same images and labels under other names for the dataset or its classes (a CSV study's data.name and
    data.classes) are the same runs: reused, and evaluated again under the new class names, whose per-class metrics
    they key, never mixed into one table with the old ones. Before, they were refused as other data, which pointed
    the user at retraining (a second release of the same patients) for a rename. Other data, or another number of
    classes, are still refused."""
    from dpmed.folders import StudyFolder
    from dpmed.resumption import finished_runs
    from dpmed.states import read_resolved

    folder, before = StudyFolder(tiny_study), read_resolved(tiny_study)
    fingerprint = folder.data_fingerprint.read_text().strip()
    renamed = before.dataset.model_copy(update={"name": "renamed",
                                                "label_names": tuple(reversed(before.dataset.label_names))})
    mine, _, again = finished_runs(folder, list(before.runs), renamed, before.study, fingerprint, before)
    assert sorted(mine) == sorted(again) == sorted(p.run_id for p in before.runs)
    mine, _, again = finished_runs(folder, list(before.runs), before.dataset.model_copy(update={"name": "renamed"}),
                                   before.study, fingerprint, before)
    assert sorted(mine) == sorted(p.run_id for p in before.runs) and again == []    # the name is in study.yaml only
    with pytest.raises(ConfigError, match="the images, labels or patient ids differ"):
        finished_runs(folder, list(before.runs), renamed, before.study, "0" * 64, before)
    more = before.dataset.model_copy(update={"label_names": (*before.dataset.label_names, "third")})
    with pytest.raises(ConfigError, match="dataset.label_names"):
        finished_runs(folder, list(before.runs), more, before.study, fingerprint, before)


def test_a_rebuilt_report_leaves_every_shared_file_stamped_1980(tiny_study, tmp_path):
    import os

    from dpmed.folders import RELEASE_TIME

    root = tmp_path / "out" / "tiny"
    shutil.copytree(tiny_study, root)

    def shared() -> list:
        return [root, *(p for p in root.rglob("*") if "private" not in p.relative_to(root).parts)]

    for path in shared():
        os.utime(path, None)                          # as a copy or a checkout would leave them: now
    assert main(["report", str(root)]) == 0
    assert {p.stat().st_mtime for p in shared()} == {RELEASE_TIME}


def test_a_changed_setting_is_told_to_the_figures_that_tell_the_values_apart():
    """A noise multiplier read 3.4119000860365762 against its new value: floats are shown to the fewest figures (at
    least four) that differ, so the message stays short and still shows the difference."""
    from dpmed.resumption import setting_differences

    told = setting_differences({"privacy": {"noise_multiplier": 3.4119000860365762, "steps": 80}, "lr": 0.001},
                               {"privacy": {"noise_multiplier": 3.4119000871, "steps": 88}, "lr": 0.01})
    assert told == ["lr: 0.001 in the finished run, 0.01 now",
                    "privacy.noise_multiplier: 3.411900086 in the finished run, 3.411900087 now",
                    "privacy.steps: 80 in the finished run, 88 now"]
    assert setting_differences({"x": 1.0}, {"x": 1.0 + 2 ** -52}) == [
        "x: 1 in the finished run, 1.0000000000000002 now"]


def _three_class_study(tmp_path, classes: list[str]) -> str:
    """A CSV study of 60 grey PNGs in three classes named ``classes`` (one arm without privacy, one epoch): the
    study file's path. The images and labels are the same whatever the names."""
    import numpy as np
    from PIL import Image

    data = tmp_path / "data"
    if not data.is_dir():
        data.mkdir()
        rng = np.random.default_rng(0)
        rows = ["file,grade"]
        for i in range(60):
            Image.fromarray(rng.integers(0, 256, (16, 16), dtype=np.uint8)).save(data / f"{i}.png")
            rows.append(f"{i}.png,{i % 3}")
        (data / "labels.csv").write_text("\n".join(rows) + "\n")
    path = tmp_path / "s.yaml"
    path.write_text(f"name: graded\ndata: {{source: csv, path: {data / 'labels.csv'}, columns: {{path: file}}, "
                    f"labels: [grade], task: multiclass, classes: [{', '.join(classes)}]}}\n"
                    "training: {epochs: 1, batch_size: 16, threads: 2}\nevaluation: {bootstrap_resamples: 10}\n"
                    "arms:\n  - {name: base, mechanism: none}\n")
    return str(path)


def _per_class_keys(out) -> set[tuple[str, ...]]:
    """The class names each finished run's per-class AUROCs are keyed by."""
    import json

    return {tuple(k[len("test_auroc["):-1] for k in json.loads(p.read_text())["metrics"]
                  if k.startswith("test_auroc[") and k.endswith("]"))
            for p in (out / "graded" / "runs").glob("*/run.json")}


def test_runs_keyed_by_old_class_names_are_evaluated_again_though_study_yaml_shows_the_new_ones(tmp_path,
                                                                                                   monkeypatch):
    """A study renames the classes (data.classes), so study.yaml is rewritten with the new names before the runs
    are evaluated again under them; a stop during that evaluation left every run keyed by the old names, and the
    next `dpmed run` read no rename from study.yaml and reused them as they were: the report showed the old names'
    per-class AUROCs under a study naming the new ones (and without study.yaml, the rename went unseen the same
    way). Each record's own per-class keys say which names it was evaluated under."""
    out = tmp_path / "out"
    assert main(["run", _three_class_study(tmp_path, ["mild", "moderate", "severe"]), "--out", str(out),
                 "--no-progress"]) == 0
    assert _per_class_keys(out) == {("mild", "moderate", "severe")}
    renamed = _three_class_study(tmp_path, ["grade_1", "grade_2", "grade_3"])

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(dpmed.study, "reevaluate", stopped)
        with pytest.raises(KeyboardInterrupt):
            dpmed.study.run_study(dpmed.study.load_study(renamed), out=out, progress=False)
    assert "grade_1" in (out / "graded" / "study.yaml").read_text()        # rewritten before the evaluation
    assert _per_class_keys(out) == {("mild", "moderate", "severe")}
    assert main(["run", renamed, "--out", str(out), "--no-progress"]) == 0
    assert _per_class_keys(out) == {("grade_1", "grade_2", "grade_3")}
    (out / "graded" / "study.yaml").unlink()
    assert main(["run", _three_class_study(tmp_path, ["low", "mid", "high"]), "--out", str(out),
                 "--no-progress"]) == 0
    assert _per_class_keys(out) == {("low", "mid", "high")}


def _as_evaluated_by(record_path, version: int | None) -> None:
    """Rewrite a run.json as an older dpmed's: its methods' ``version``, or (None) no version at all, as every
    run.json before the field; and its fairness spreads' intervals as that dpmed's percentile ones would differ."""
    import json

    data = json.loads(record_path.read_text())
    if version is None:
        del data["evaluation_version"]
    else:
        data["evaluation_version"] = version
    for attribute in data["fairness"]["attributes"].values():
        attribute["demographic_parity_difference"]["low"] = 0.123456
    record_path.write_text(json.dumps(data))


def test_runs_an_older_dpmed_evaluated_are_evaluated_again_and_current_ones_are_not(tiny_study, tiny_study_file,
                                                                                     tmp_path, capsys):
    """Before, a folder finished before the fairness spreads got their simultaneous band and resumed with this dpmed
    kept the old percentile intervals beside the new runs' bands, in one table, unsaid: only changed settings were
    evaluated again. Each record now says which methods computed it; an older one is evaluated again from its model
    and says why, and a folder at this version is left as it is."""
    import json

    from dpmed.evaluation.version import EVALUATION_VERSION

    out = tmp_path / "out"
    shutil.copytree(tiny_study, out / "tiny")
    runs = sorted((out / "tiny" / "runs").iterdir())
    fresh = {r.name: json.loads((r / "run.json").read_text()) for r in runs}
    assert {d["evaluation_version"] for d in fresh.values()} == {EVALUATION_VERSION}
    _as_evaluated_by(runs[0] / "run.json", None)
    _as_evaluated_by(runs[1] / "run.json", EVALUATION_VERSION - 1)
    models = {r.name: (r / "model.pt").read_bytes() for r in runs}
    capsys.readouterr()
    command = ["run", str(tiny_study_file), "--out", str(out), "--no-progress"]
    assert main(command) == 0
    err = capsys.readouterr().err
    assert err.count("finished earlier, evaluated by an older dpmed (fairness intervals changed): evaluated again") == 2
    for r in runs:
        after = json.loads((r / "run.json").read_text())
        assert after["evaluation_version"] == EVALUATION_VERSION
        assert after["fairness"] == fresh[r.name]["fairness"]          # this version's intervals, of the same model
        for key in ("privacy", "ledger", "plan", "metrics"):
            assert after[key] == fresh[r.name][key], key
        assert (r / "model.pt").read_bytes() == models[r.name]
    assert main(command) == 0                                            # at this version: nothing evaluated again
    err = capsys.readouterr().err
    assert err.count("finished earlier, skipped") == 2 and "evaluated again" not in err


def test_a_record_without_the_methods_version_reads_as_the_one_before_it_and_is_evaluated_again(tiny_study, tmp_path):
    """A run.json written before the field holds numbers of the methods before it came."""
    from dpmed.evaluation.version import CHANGES, EVALUATION_VERSION, RETIRED, UNRECORDED, evaluated_by
    from dpmed.folders import StudyFolder
    from dpmed.records import read_record
    from dpmed.resumption import finished_runs
    from dpmed.states import read_resolved

    root = tmp_path / "tiny"
    shutil.copytree(tiny_study, root)
    folder, before = StudyFolder(root), read_resolved(root)
    fingerprint = folder.data_fingerprint.read_text().strip()
    plans = list(before.runs)
    assert finished_runs(folder, plans, before.dataset, before.study, fingerprint, before)[2] == []
    path = folder.run(plans[0].run_id).record
    _as_evaluated_by(path, None)
    assert read_record(path).evaluation_version == UNRECORDED < EVALUATION_VERSION
    mine, _, again = finished_runs(folder, plans, before.dataset, before.study, fingerprint, before)
    assert sorted(mine) == sorted(p.run_id for p in plans) and again == [plans[0].run_id]
    assert evaluated_by(UNRECORDED) == "evaluated by an older dpmed (fairness intervals changed)"
    assert evaluated_by(EVALUATION_VERSION) == ""
    assert "newer dpmed" in evaluated_by(max(CHANGES.keys() | RETIRED.keys()) + 1)


def test_a_record_of_a_retired_methods_version_is_an_older_dpmed_s_and_is_evaluated_again(tiny_study,
                                                                                           tiny_study_file, tmp_path,
                                                                                           capsys):
    """A dpmed of 6 December recorded evaluation version 3 (BCa intervals) for half an hour, before the percentile
    interval came back as version 2's: `dpmed status`, the report and a resumed study called such a run a newer
    dpmed's, and a next version numbered 3 would have kept its BCa intervals unsaid as its own. Its number is held
    back, and the run is an older dpmed's, evaluated again from its model."""
    import json

    from dpmed.evaluation.version import CHANGES, EVALUATION_VERSION, RETIRED

    assert not CHANGES.keys() & RETIRED.keys() and EVALUATION_VERSION not in RETIRED
    out = tmp_path / "out"
    shutil.copytree(tiny_study, out / "tiny")
    record = sorted((out / "tiny" / "runs").iterdir())[0] / "run.json"
    fresh = json.loads(record.read_text())
    _as_evaluated_by(record, 3)          # as that dpmed wrote it: the field, without evaluation.interval
    data = json.loads(record.read_text())
    del data["metrics"]["interval"]
    record.write_text(json.dumps(data))
    capsys.readouterr()
    assert main(["status", str(out / "tiny")]) == 0
    listed = capsys.readouterr().out
    assert "evaluated by an older dpmed (BCa intervals)" in listed and "newer" not in listed
    assert main(["run", str(tiny_study_file), "--out", str(out), "--no-progress"]) == 0
    assert "evaluated by an older dpmed (BCa intervals): evaluated again" in capsys.readouterr().err
    after = json.loads(record.read_text())
    assert after["evaluation_version"] == EVALUATION_VERSION and after["fairness"] == fresh["fairness"]


def test_an_older_dpmed_s_run_keeps_its_private_training_metrics_when_evaluated_again(tiny_text, tmp_path, capsys):
    """The training-set metrics need the training images as the run saw them, which only its training had: a run
    evaluated again because an older dpmed evaluated it is neither refused nor stripped of them."""
    import json

    from dpmed.folders import StudyFolder

    out = tmp_path / "out"
    command = _base_only(tiny_text, tmp_path, "training_metrics: true", out)
    assert main(command) == 0
    run = StudyFolder(out / "tiny").run("base_seed0")
    statistics = run.statistics.read_bytes()
    assert json.loads(statistics)["training_metrics"]["train_auroc"] is not None
    _as_evaluated_by(run.record, None)
    capsys.readouterr()
    assert main(command) == 0
    assert "evaluated by an older dpmed (fairness intervals changed): evaluated again" in capsys.readouterr().err
    assert run.statistics.read_bytes() == statistics


def test_a_record_without_its_interval_reads_as_percentile_and_asking_for_bca_evaluates_it_again(
        tiny_study, tiny_study_file, tmp_path, capsys):
    """evaluation.interval: runs recorded before the setting existed hold percentile intervals, the default, so a
    study that keeps the default reuses them, also without study.yaml (each record read alone); one that asks for
    BCa evaluates them again from their models, and going back to percentile gives the numbers they had."""
    import json

    out = _finished_without_study_yaml(tiny_study, tmp_path)
    runs = sorted((out / "tiny" / "runs").iterdir())
    before = {}
    for r in runs:
        data = json.loads((r / "run.json").read_text())
        assert data["metrics"].pop("interval") == "percentile"               # the default, recorded
        (r / "run.json").write_text(json.dumps(data))
        before[r.name] = data
    models = {r.name: (r / "model.pt").read_bytes() for r in runs}
    capsys.readouterr()
    command = ["run", str(tiny_study_file), "--out", str(out), "--no-progress"]
    assert main(command) == 0
    err = capsys.readouterr().err
    assert err.count("finished earlier, skipped") == 2 and "evaluated again" not in err
    (out / "tiny" / "study.yaml").unlink()                  # each record alone tells how it was evaluated
    assert main([*command, "--set", "evaluation.interval=bca"]) == 0
    assert capsys.readouterr().err.count("finished earlier, evaluated again under this study's evaluation") == 2
    for r in runs:
        after = json.loads((r / "run.json").read_text())
        assert after["metrics"]["interval"] == "bca"
        assert after["metrics"]["test_auroc"] == before[r.name]["metrics"]["test_auroc"]        # the same model
        assert (after["metrics"]["test_auroc_low"], after["metrics"]["test_auroc_high"]) != (
            before[r.name]["metrics"]["test_auroc_low"], before[r.name]["metrics"]["test_auroc_high"])
        assert (r / "model.pt").read_bytes() == models[r.name]
    assert "95% BCa intervals" in (out / "tiny" / "report.html").read_text()
    (out / "tiny" / "study.yaml").unlink()
    assert main(command) == 0
    assert capsys.readouterr().err.count("evaluated again under this study's evaluation") == 2
    for r in runs:
        after = json.loads((r / "run.json").read_text())
        assert after["metrics"] == {**before[r.name]["metrics"], "interval": "percentile"}
    assert "95% percentile intervals" in (out / "tiny" / "report.html").read_text()


def test_a_folder_left_between_two_interval_settings_has_its_report_name_the_runs_evaluated_otherwise(
        tiny_study, tmp_path):
    """A rerun that asks for BCa writes study.yaml before it evaluates the finished runs again: stopped in between,
    the folder's study.yaml says BCa while every run holds percentile intervals. Before, `dpmed report` then called
    all of them BCa, in the report and comparisons.json, unsaid; now both name each run evaluated otherwise and how
    to evaluate it again."""
    import html
    import json

    out = tmp_path / "out"
    shutil.copytree(tiny_study, out / "tiny")
    study_yaml = out / "tiny" / "study.yaml"
    study_yaml.write_text(study_yaml.read_text().replace("interval: percentile", "interval: bca"))
    assert main(["report", str(out / "tiny")]) == 0
    notes = json.loads((out / "tiny" / "comparisons.json").read_text())["notes"]
    report = (out / "tiny" / "report.html").read_text()
    for run_id in ("base_seed0", "dp_eps8_C1_seed0"):
        said = [n for n in notes if n.startswith(f"{run_id}: evaluated otherwise than study.yaml says")]
        assert len(said) == 1 and "evaluation.interval: percentile in the finished run, bca in study.yaml" in said[0]
        assert "run the same `dpmed run` again" in said[0] and said[0] in html.unescape(report)


def test_results_csv_names_the_interval_of_a_run_recorded_before_the_setting(tiny_study, tmp_path):
    """A run.json of a dpmed before evaluation.interval holds percentile intervals (resumption reads it so); before,
    its row of results.csv left the interval blank beside the new runs' "percentile", so a reader could not tell
    how its bounds were drawn."""
    import csv
    import json

    out = tmp_path / "out"
    shutil.copytree(tiny_study, out / "tiny")
    record = out / "tiny" / "runs" / "dp_eps8_C1_seed0" / "run.json"
    data = json.loads(record.read_text())
    del data["metrics"]["interval"]
    record.write_text(json.dumps(data))
    assert main(["report", str(out / "tiny")]) == 0
    with (out / "tiny" / "results.csv").open(newline="") as f:
        assert {row["run_id"]: row["interval"] for row in csv.DictReader(f)} == {
            "base_seed0": "percentile", "dp_eps8_C1_seed0": "percentile"}


def _garbled(path, *, cut: bool = True) -> None:
    """``path`` cut short, or 8 bytes inside it overwritten."""
    data = bytearray(path.read_bytes())
    if cut:
        path.write_bytes(bytes(data[:len(data) // 3]))
    else:
        data[len(data) // 2:len(data) // 2 + 8] = b"\xff" * 8
        path.write_bytes(bytes(data))


def test_a_run_whose_predictions_cannot_be_read_is_evaluated_again_not_retrained(tiny_study, tiny_study_file,
                                                                                 tmp_path, capsys):
    """Before, status listed the run as finished, `dpmed run` skipped it, and the report advised deleting it and
    retraining it, a second release of its patients. Now status, plan and run say that `dpmed run` evaluates it again
    from its model, and it does: its model and run.json as they were, its predictions readable again."""
    import html
    import json

    from dpmed.evaluation.predictions import load_predictions

    out = tmp_path / "out"
    shutil.copytree(tiny_study, out / "tiny")
    run = out / "tiny" / "runs" / "dp_eps8_C1_seed0"
    model, record = (run / "model.pt").read_bytes(), json.loads((run / "run.json").read_text())
    _garbled(run / "predictions.npz")
    said = "its predictions.npz cannot be read"
    state = dict((run_id, detail) for run_id, _, detail in run_states(out / "tiny"))["dp_eps8_C1_seed0"]
    assert state.startswith(said) and "the next `dpmed run` of the study evaluates it again from its model" in state
    assert main(["report", str(out / "tiny")]) == 0
    report = html.unescape((out / "tiny" / "report.html").read_text())
    assert "so its paired comparisons are left out: the next `dpmed run` of the study evaluates it again" in report
    assert "delete" not in report[report.index("paired comparisons are left out"):][:200]
    capsys.readouterr()
    assert main(["plan", str(tiny_study_file), "--out", str(out), "--no-estimate"]) == 0
    assert (f"dp_eps8_C1_seed0: finished: {said}: `run` evaluates it again from its model, not retrained: no "
            "privacy spent") in capsys.readouterr().out
    assert main(["run", str(tiny_study_file), "--out", str(out), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert (f"dp_eps8_C1_seed0: finished earlier, {said}: evaluated again from its model, not retrained: no privacy "
            "spent") in err
    assert "trained in" not in err and "base_seed0: finished earlier, skipped" in err
    assert (run / "model.pt").read_bytes() == model
    assert json.loads((run / "run.json").read_text()) == record     # the same model, evaluated the same way
    assert len(load_predictions(run / "predictions.npz").test.scores) == record["metrics"]["n_test"]
    assert dict((run_id, detail) for run_id, _, detail in run_states(out / "tiny"))["dp_eps8_C1_seed0"] == ""


def test_a_run_whose_model_cannot_be_read_either_is_left_as_it_is_and_said_to_need_retraining(
        tiny_study, tiny_study_file, tmp_path, capsys):
    """A model.pt cut short, damaged inside, or of another model: nothing but a copy of the model or retraining
    recovers the run; `dpmed run` says so and leaves it (the study's other runs go on), status says so too."""
    import json

    import torch

    out = tmp_path / "out"
    shutil.copytree(tiny_study, out / "tiny")
    run = out / "tiny" / "runs" / "dp_eps8_C1_seed0"
    record = (run / "run.json").read_bytes()
    _garbled(run / "predictions.npz", cut=False)
    state = torch.load(run / "model.pt")
    for damage in ("cut", "overwritten", "another model"):
        if damage == "another model":
            torch.save(dict(list(state.items())[:-1]), run / "model.pt")
        else:
            torch.save(state, run / "model.pt")
            _garbled(run / "model.pt", cut=damage == "cut")
        predictions = (run / "predictions.npz").read_bytes()
        if damage != "another model":     # status reads no torch: it tells what the archive shows
            detail = dict((r, d) for r, _, d in run_states(out / "tiny"))["dp_eps8_C1_seed0"]
            assert "its predictions.npz cannot be read, and its model.pt cannot be read" in detail
            assert f"or delete {run} and run the study again to retrain it" in detail
        capsys.readouterr()
        assert main(["run", str(tiny_study_file), "--out", str(out), "--no-progress"]) == 0
        err = capsys.readouterr().err
        assert "dp_eps8_C1_seed0: its predictions.npz cannot be read" in err and "cannot be evaluated again" in err
        assert ("holds other weights than the small_cnn its run.json records" in err) == (damage == "another model")
        assert "dp_eps8_C1_seed0: finished earlier, skipped" in err and "Traceback" not in err
        assert (run / "run.json").read_bytes() == record and (run / "predictions.npz").read_bytes() == predictions
    assert json.loads(record)["run_id"] == "dp_eps8_C1_seed0"


def test_damaged_cams_and_local_dp_examples_are_written_again_not_retrained(tiny_text, tmp_path, capsys):
    """The CAM grid's and the local-DP figure's files of finished runs, cut short or overwritten: `dpmed run` writes
    them again (the examples, in a reproducible study, as they were) and retrains nothing; before, the report left the
    runs out of the figures and advised retraining them."""
    import html

    from dpmed.folders import read_arrays

    study = tmp_path / "s.yaml"
    study.write_text(tiny_text.replace("{name: dp, mechanism: dp_sgd, target_epsilon: 8}",
                                       "{name: lap, mechanism: pixel_laplace, scale: 0.5}")
                     .replace("evaluation: {bootstrap_resamples: 20}",
                              "evaluation: {bootstrap_resamples: 20, explanations: {n_images: 4}}"))
    out = tmp_path / "out"
    command = ["run", str(study), "--out", str(out), "--no-progress"]
    assert main(command) == 0
    runs = out / "tiny" / "runs"
    cams, examples = runs / "base_seed0" / "cams.npz", runs / "lap_b0.5_seed0" / "ldp_examples.npz"
    drawn = read_arrays(examples)
    models = {p: p.read_bytes() for p in runs.glob("*/model.pt")}
    _garbled(cams, cut=False)
    _garbled(examples)
    assert main(["report", str(out / "tiny")]) == 0
    report = html.unescape((out / "tiny" / "report.html").read_text())
    for figure, path in (("the CAM grid", cams), ("the local-DP examples", examples)):
        assert f"Left out of {figure}: " in report and f"{path} cannot be read (" in report
    assert report.count("the next `dpmed run` of the study evaluates it again from its model") == 2
    assert "Delete such a run's folder" not in report
    capsys.readouterr()
    assert main(command) == 0
    err = capsys.readouterr().err
    assert "base_seed0: finished earlier, its cams.npz cannot be read: evaluated again from its model" in err
    assert "lap_b0.5_seed0: finished earlier, its ldp_examples.npz cannot be read: evaluated again" in err
    assert "trained in" not in err
    assert {p: p.read_bytes() for p in runs.glob("*/model.pt")} == models
    assert set(read_arrays(cams)) >= {"positions", "images", "cams"}
    again = read_arrays(examples)
    assert all((again[k] == drawn[k]).all() for k in ("original", "perturbed"))
    assert "Left out of" not in (out / "tiny" / "report.html").read_text()


def test_a_damaged_examples_file_of_a_run_without_an_image_mechanism_is_removed_not_evaluated_again_forever(
        tiny_study, tiny_study_file, tmp_path, capsys):
    """A run without an image mechanism draws no local-DP examples: an unreadable ldp_examples.npz in its folder (a
    copy gone wrong) had it evaluated again at every `dpmed run`, each saying the file was written again, and
    status and the report went on saying the next run would."""
    out = tmp_path / "out"
    shutil.copytree(tiny_study, out / "tiny")
    examples = out / "tiny" / "runs" / "base_seed0" / "ldp_examples.npz"
    examples.write_bytes(b"not an archive")
    command = ["run", str(tiny_study_file), "--out", str(out), "--no-progress"]
    assert main(command) == 0
    err = capsys.readouterr().err
    assert "base_seed0: finished earlier, its ldp_examples.npz cannot be read: evaluated again" in err
    assert not examples.exists()
    assert dict((run_id, detail) for run_id, _, detail in run_states(out / "tiny"))["base_seed0"] == ""
    assert main(command) == 0
    assert "base_seed0: finished earlier, skipped" in capsys.readouterr().err


def test_a_run_whose_model_cannot_be_read_either_is_told_to_restore_the_model_before_retraining(
        tiny_study, tiny_study_file, tmp_path, capsys):
    """model.pt is a released file: a copy of it (shared, backed up) recovers the run without training, and the next
    `dpmed run` evaluates it again. Before, status, run and the report told retraining as the only way, a second
    release of the patients whose eps adds to the first."""
    out = tmp_path / "out"
    shutil.copytree(tiny_study, out / "tiny")
    run = out / "tiny" / "runs" / "dp_eps8_C1_seed0"
    kept = (run / "model.pt").read_bytes()
    _garbled(run / "predictions.npz")
    (run / "model.pt").write_bytes(b"")
    restore = f"restore {run / 'model.pt'} from a copy of it (the next `dpmed run` then evaluates the run again"
    detail = dict((r, d) for r, _, d in run_states(out / "tiny"))["dp_eps8_C1_seed0"]
    assert restore in detail and detail.index(restore) < detail.index(f"or delete {run}")
    capsys.readouterr()
    assert main(["run", str(tiny_study_file), "--out", str(out), "--no-progress"]) == 0
    assert restore in capsys.readouterr().err
    (run / "model.pt").write_bytes(kept)
    assert main(["run", str(tiny_study_file), "--out", str(out), "--no-progress"]) == 0
    assert "dp_eps8_C1_seed0: finished earlier, its predictions.npz cannot be read: evaluated again" in (
        capsys.readouterr().err)
