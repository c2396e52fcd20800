"""Finished runs are reused only under the evaluation settings they were evaluated with, also where the folder's
study.yaml is gone (`dpmed.resumption`): before, a rerun without study.yaml reused every run under another
confidence level, and the report headed their 95 % intervals "[50% CI]"."""

from __future__ import annotations

import shutil

from dpmed.cli import main


def test_without_study_yaml_each_record_says_how_it_was_evaluated(tiny_study, tiny_study_file, tmp_path, capsys):
    out = tmp_path / "out"
    shutil.copytree(tiny_study, out / "tiny")
    (out / "tiny" / "study.yaml").unlink()
    capsys.readouterr()
    assert main(["run", str(tiny_study_file), "--out", str(out), "--no-progress",
                 "--set", "evaluation.confidence=0.5"]) == 2
    err = capsys.readouterr().err
    assert "evaluation.confidence: 0.95 in the finished run, 0.5 now" in err and "Traceback" not in err
    assert main(["run", str(tiny_study_file), "--out", str(out), "--no-progress",
                 "--set", "evaluation.explanations={n_images: 4}"]) == 2
    assert "evaluation.explanations.method: (not set) in the finished run, gradcam now" in capsys.readouterr().err
    assert main(["run", str(tiny_study_file), "--out", str(out), "--no-progress"]) == 0     # as they were made
    assert "2 finished earlier" in capsys.readouterr().out and (out / "tiny" / "study.yaml").is_file()


def test_the_explained_images_and_the_pointing_tolerance_count_and_a_test_set_smaller_than_asked_is_no_change(
        tiny_text, tmp_path, capsys):
    """A record holds the images it explained, min(n_images, the test set); the pointing tolerance where lesion masks
    were explained (the phantom has them). Before, both were ignored, and a rerun reused runs under another number
    of images and another tolerance while study.yaml and the report stated the new ones."""
    study = tmp_path / "s.yaml"
    study.write_text(tiny_text.replace("  - {name: dp, mechanism: dp_sgd, target_epsilon: 8}\n", "")
                     .replace("evaluation: {bootstrap_resamples: 20}",
                              "evaluation: {bootstrap_resamples: 20, explanations: {n_images: 1000}}"))
    out = tmp_path / "out"
    command = ["run", str(study), "--out", str(out), "--no-progress"]
    assert main(command) == 0
    (out / "tiny" / "study.yaml").unlink()
    capsys.readouterr()
    assert main([*command, "--set", "evaluation.explanations={n_images: 5}"]) == 2
    assert "evaluation.explanations.n_images:" in capsys.readouterr().err
    assert main([*command, "--set", "evaluation.explanations={n_images: 1000, pointing_tolerance: 3}"]) == 2
    assert "evaluation.explanations.pointing_tolerance: 0.0 in the finished run, 3.0 now" in capsys.readouterr().err
    assert main([*command, "--set", "evaluation.explanations={n_images: 5000}"]) == 0     # the whole test set again
    assert "1 finished earlier" in capsys.readouterr().out


def test_the_attributes_fingerprint_sees_sex_age_masks_and_normalisation_and_nothing_else():
    """Before, only images, labels and patient ids were fingerprinted: a study whose CSV's ages were corrected
    reused its finished runs, and one table then held fairness groups of two different age columns."""
    from dataclasses import replace

    import numpy as np

    from dpmed.data import load_dataset
    from dpmed.resumption import attributes_fingerprint, data_fingerprint

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
    assert {data_fingerprint(d) for d in changed.values()} == {data_fingerprint(dataset)}
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


def test_a_study_yaml_of_another_version_is_named_as_such_with_the_key(tiny_study, tmp_path, capsys):
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
