"""What `prepare_study` (and so `dpmed plan` and `dpmed run`) settles before any training: the budget checked, DP-SGD
planned from the released DP count and the exact count kept out of the shareable summary, the cards `dpmed plan`
shows, and the planning refusals at their edges. Phantom data, no training."""

from __future__ import annotations

import pytest

from dpmed.config import load_study
from dpmed.errors import ConfigError, DataError, PrivacyError
from dpmed.mechanisms import DpSgdPlan
from dpmed.study import load_study_data, plan_study, planned_card, prepare_study
from dpmed.suitability import check_fit

HEAD = "name: s\ndata: {source: phantom, n_images: 200, image_size: 16}\nseeds: [0]\nprivacy_randomness: reproducible\n"
DP = "{name: dp, mechanism: dp_sgd, target_epsilon: 8, epochs: 2}"


def _prepare(write_study, tmp_path, text: str):
    return prepare_study(load_study(write_study(HEAD + text)), out=tmp_path / "out")


def test_a_study_over_its_budget_is_refused_by_prepare_study_itself(write_study, tmp_path):
    """Not only by check_budget called on its own: the study as `dpmed run` prepares it (two eps-8 runs)."""
    with pytest.raises(PrivacyError, match=r"above the budget eps = 10"):
        _prepare(write_study, tmp_path, f"privacy_budget: {{epsilon: 10, delta: 1e-5}}\narms: [{DP}, "
                                        f"{DP.replace('name: dp', 'name: dp2')}]\n")


def test_dp_sgd_plans_from_the_released_count_and_the_summary_hides_the_exact_one(write_study, tmp_path):
    prepared = _prepare(write_study, tmp_path, f"arms: [{{name: base, mechanism: none}}, {DP}]\n")
    dp = next(p.privacy for p in prepared.plans if isinstance(p.privacy, DpSgdPlan))
    assert dp.size_epsilon == prepared.study.size_epsilon > 0
    assert dp.released_count == prepared.sizes[dp.size_key]
    summary = prepared.resolved().dataset
    assert summary.n_train is None and summary.n_train_patients is None
    assert summary.released_sizes == dict(prepared.sizes) and summary.size_epsilon == prepared.study.size_epsilon
    plain = _prepare(write_study, tmp_path / "plain", "arms: [{name: base, mechanism: none}]\n").resolved().dataset
    assert plain.n_train == 140 and plain.size_epsilon is None and plain.released_sizes == {}


def test_the_planned_cards_are_the_runs_own(write_study, tmp_path):
    """`dpmed plan` shows each arm's card before training: DP-SGD's eps at most its target and close to it (Poisson
    sampling, as the run does), a local-DP arm's eps per image from its release of the images (H W C / b)."""
    prepared = _prepare(write_study, tmp_path, f"arms: [{DP}, {{name: lap, mechanism: pixel_laplace, scale: 2}}]\n")
    shape = prepared.dataset.train.image_shape
    cards = {p.arm: planned_card(p, shape, "secure") for p in prepared.plans}
    assert cards["dp"].is_dp and 7.5 < cards["dp"].epsilon <= 8
    assert cards["lap"].is_dp and cards["lap"].epsilon_image == 16 * 16 / 2


def test_a_budget_delta_is_checked_against_the_largest_count_any_run_plans_from(write_study, tmp_path):
    """A patient-unit and an image-unit arm: the budget's delta must be below 1/N of the larger N (images)."""
    arms = (f"arms: [{DP}, {{name: dpi, mechanism: dp_sgd, target_epsilon: 8, epochs: 2, privacy_unit: image}}]\n")
    prepared = _prepare(write_study, tmp_path, arms)
    counts = sorted(p.privacy.n_units for p in prepared.plans)
    assert counts[0] < counts[1]
    delta = 2 / (counts[0] + counts[1])          # between 1/N of the images and 1/N of the patients
    with pytest.raises(ConfigError, match=rf"privacy_budget.delta .* at or above 1/N = 1/{counts[1]}"):
        _prepare(write_study, tmp_path, f"privacy_budget: {{epsilon: 1000, delta: {delta}}}\n" + arms)


def test_a_batch_of_the_whole_training_set_is_allowed_and_one_more_is_refused(write_study):
    study = load_study(write_study(HEAD + "arms: [{name: base, mechanism: none}]\ntraining: {batch_size: 140}\n"))
    dataset = load_study_data(study)
    assert len(dataset.train) == 140
    plan_study(study, dataset)
    bigger = load_study(write_study(HEAD + "arms: [{name: base, mechanism: none}]\ntraining: {batch_size: 141}\n"))
    with pytest.raises(ConfigError, match="batch_size 141 exceeds the 140 training images"):
        plan_study(bigger, dataset)


def test_an_audit_may_take_every_patient_but_one(write_study):
    """One canary per patient and one patient left to train on: patients - 1 canaries are allowed, no more."""
    from dpmed.audit import max_canaries

    study = load_study(write_study(HEAD + "arms: [{name: base, mechanism: none}]\n"))
    dataset = load_study_data(study)
    limit = max_canaries(dataset.train)

    def audited(m):
        return load_study(write_study(HEAD + f"arms: [{{name: base, mechanism: none, audit: {{canaries: {m}}}}}]\n"))

    plan_study(audited(limit), dataset)
    with pytest.raises(ConfigError, match=rf"audit.canaries = {limit + 1} needs more training patients than the "
                                          rf"{limit + 1} this dataset has"):
        plan_study(audited(limit + 1), dataset)


def test_an_image_unit_audit_is_checked_against_the_images_it_counts_and_says_so(write_study):
    """Where the image is the unit the DP count is of images and every image of a drawn patient is a canary: the
    refusal named patients, a count the arm never had."""
    study = load_study(write_study(
        HEAD + "arms: [{name: img, mechanism: dp_sgd, target_epsilon: 8, privacy_unit: image, "
        "audit: {canaries: 30}}]\ntraining: {batch_size: 8}\n"))
    dataset = load_study_data(study)
    with pytest.raises(ConfigError, match=r"audit.canaries = 30 needs more training images than the 20 of the DP "
                                          r"count it plans from \(one canary per image, and some images left to "
                                          r"train on\); lower audit.canaries below 20"):
        plan_study(study, dataset, {"images": 20})


def test_a_finished_reproducible_run_the_study_no_longer_lists_keeps_its_privacy_reproducible(write_study, tmp_path):
    """The folder still releases that run's model, whose noise derives from the published seed: a secure study
    written into the same folder is not DP against whoever knows the seed either, and says so."""
    from dpmed.study import run_study

    lap = "arms: [{name: lap, mechanism: pixel_laplace, scale: 2}]\ntraining: {epochs: 1}\n"
    run_study(load_study(write_study(HEAD + lap)), out=tmp_path / "out", progress=False)
    secure = HEAD.replace("reproducible", "secure") + "arms: [{name: base, mechanism: none}]\ntraining: {epochs: 1}\n"
    prepared = prepare_study(load_study(write_study(secure)), out=tmp_path / "out")
    assert [r.plan.run_id for r in prepared.elsewhere] == ["lap_b2_seed0"]
    assert prepared.study.privacy_randomness == "secure"
    assert prepared.privacy.reproducible
    assert prepared.privacy.statement.startswith("NOT DP against anyone who knows the seed (reproducible mode)")


def test_a_gpu_this_machine_lacks_is_refused_before_the_study_folder_is_made(write_study, tmp_path, monkeypatch):
    """run_study, not only the CLI: the check comes before the folder is claimed, so no empty folder is left."""
    import torch

    from dpmed.study import run_study

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    study = load_study(write_study(HEAD + "arms: [{name: base, mechanism: none}]\ntraining: {device: cuda}\n"))
    with pytest.raises(ConfigError, match="training.device is cuda, but this machine has no CUDA GPU"):
        run_study(study, out=tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()


def test_the_count_drawn_is_the_exact_number_of_training_patients_plus_its_noise(write_study, tmp_path, monkeypatch):
    from dpmed import released_size

    monkeypatch.setattr(released_size, "discrete_laplace", lambda scale, source: 7)
    prepared = _prepare(write_study, tmp_path, f"arms: [{DP}]\n")
    (plan,) = prepared.plans
    patients = len(set(prepared.dataset.train.patient_ids.tolist()))
    assert plan.privacy.released_count == patients + 7 and prepared.sizes == {plan.privacy.size_key: patients + 7}


@pytest.mark.parametrize("source, views, hinted", [("chexpert", None, True), ("mimic", None, True),
                                                   ("chexpert", "all", False), ("medmnist", None, False)])
def test_runs_on_other_data_of_a_view_table_say_that_the_views_default_changed(tmp_path, source, views, hinted):
    """A CheXpert or MIMIC folder made when dpmed read every film reads as other data now that frontal films are
    the default: the refusal says how to continue it (data.views: all), and only where that can be the cause."""
    from dpmed.config import Study
    from dpmed.folders import StudyFolder
    from dpmed.records import DatasetSummary, ResolvedStudy, StudyPrivacy
    from dpmed.resumption import finished_runs

    study = Study.model_validate({"name": "s", "data": {"source": source, "path": str(tmp_path), "views": views},
                                  "arms": [{"name": "plain", "mechanism": "none"}]})
    summary = DatasetSummary(name="d", task="multilabel", synthetic=False, description="", n_train=None, n_val=10,
                             n_test=10, n_train_patients=None, patients_known=True, image_shape=(1, 8, 8))
    privacy = StudyPrivacy(dp_sgd_runs=(), not_private=(), local_dp=(), unit=None, delta=None, accountant=None,
                           dp_sgd_epsilon=None, epsilon=None, reproducible=False, statement="")
    before = ResolvedStudy(study=study, dataset=summary.model_copy(update={"n_val": 14}), study_privacy=privacy,
                           runs=[])
    with pytest.raises(ConfigError, match="dataset.n_val: 14 in the finished runs, 10 now") as refused:
        finished_runs(StudyFolder(tmp_path / "s"), [], summary, study, "0" * 64, before)
    assert ("continue with data.views: all" in str(refused.value)) is hinted

    # the same films (sizes and images match) with other sexes or ages: the views cannot be the cause
    folder = StudyFolder(tmp_path / "s")
    (folder.runs / "plain_seed0").mkdir(parents=True)
    (folder.runs / "plain_seed0" / "run.json").write_text("{}")
    folder.private.mkdir(parents=True)
    folder.data_fingerprint.write_text("0" * 64)
    folder.attributes_fingerprint.write_text("1" * 64)
    with pytest.raises(ConfigError, match="the images themselves match") as refused:
        finished_runs(folder, [], summary, study, "0" * 64, before.model_copy(update={"dataset": summary}), "2" * 64)
    assert "data.views" not in str(refused.value)


@pytest.mark.parametrize("model, refused", [("flat_cnn", True), ("scatternet_linear", True), ("small_cnn", False)])
def test_non_square_images_are_refused_before_training_by_the_models_that_take_square_ones(write_study,
                                                                                            write_png_table, model,
                                                                                            refused):
    """data.image_size unset keeps the files' own size: 20 x 30 px here. flat_cnn's flattened head and the
    ScatterNets' scattering are built for S x S images (S the height), so every run failed at its first step with
    torch's "mat1 and mat2 shapes cannot be multiplied" or kymatio's "Tensor must be of spatial size"; a model with
    global pooling takes them."""
    write_png_table(40, (20, 30))
    study = load_study(write_study(
        f"name: s\ndata: {{source: csv, path: labels.csv, columns: {{path: file}}, labels: [finding], task: binary, "
        f"channels: 1}}\nmodel: {{name: {model}}}\ntraining: {{batch_size: 8}}\n"
        "arms: [{name: a, mechanism: none}]\n"))
    dataset = load_study_data(study)
    assert dataset.train.image_shape == (1, 20, 30)
    if not refused:
        check_fit(study, dataset)
        assert plan_study(study, dataset)
        return
    with pytest.raises(ConfigError, match=rf"model.name {model} takes square images only, and these are 20 x 30 px; "
                                          r"set data.image_size"):
        check_fit(study, dataset)


def test_a_cap_on_data_without_patient_ids_is_said_to_have_no_effect(write_study, write_png_table, tmp_path,
                                                                      caplog):
    """Without patient ids every image is its own patient: the cap keeps them all, and the user who set it to have
    a patient's guarantee stated is told that it has none, before any training."""
    write_png_table(60, (16, 16))
    study = load_study(write_study(
        "name: s\ndata: {source: csv, path: labels.csv, columns: {path: file}, labels: [finding], task: binary, "
        "channels: 1}\nmodel: {name: small_cnn}\ntraining: {batch_size: 8, epochs: 1}\n"
        "arms: [{name: capped, mechanism: dp_sgd, target_epsilon: 8, privacy_unit: image, "
        "max_images_per_patient: 2}, {name: plain, mechanism: dp_sgd, target_epsilon: 8}]\n"))
    with caplog.at_level("WARNING", logger="dpmed"):
        prepared = prepare_study(study, out=tmp_path / "out")
    told = [r.getMessage() for r in caplog.records if "max_images_per_patient" in r.getMessage()]
    assert len(told) == 1 and told[0].startswith("arm 'capped': max_images_per_patient has no effect: labels names "
                                                 "no patient ids"), told
    assert all(p.privacy.unit == "image" and p.privacy.max_images_per_patient is None for p in prepared.plans)


def test_more_bootstrap_redraws_than_memory_holds_are_refused_before_training(write_study, monkeypatch):
    """Before: evaluation.bootstrap_resamples 10**23 was accepted, and every run failed after training in NumPy
    ("Maximum allowed dimension exceeded"); 10**7 would have filled the memory of each run's evaluation."""
    from dpmed import memory

    study = load_study(write_study("name: s\nseeds: [0]\ndata: {source: phantom, n_images: 100, image_size: 16}\n"
                                   "arms:\n  - {name: a, mechanism: none}\n"))
    dataset = load_study_data(study)
    monkeypatch.setattr(memory, "headroom", lambda: memory.Headroom(ram=2**30, swap=0))
    check_fit(study.model_copy(update={"evaluation": study.evaluation.model_copy(
        update={"bootstrap_resamples": 100_000})}), dataset)      # 100,000 x 15 test images: about 100 MB
    huge = study.model_copy(update={"evaluation": study.evaluation.model_copy(update={"bootstrap_resamples": 10**23})})
    with pytest.raises(DataError, match=rf"^evaluation.bootstrap_resamples: {10**23} redraws of the "
                                        rf"{len(dataset.test)} test images take about .* of memory to evaluate a "
                                        r"run \(fairness keeps .* of it: each redraw's rates in up to \d groups\), "
                                        r"and only 1.1 GB is free for dpmed here: lower "
                                        r"evaluation.bootstrap_resamples \(the default, 1000, is what METHODS.md s.4 "
                                        r"uses\), or measure fairness by fewer groups or not at all "
                                        r"\(evaluation.fairness\)$"):
        check_fit(huge, dataset)


def test_bootstrap_redraws_of_many_findings_count_their_fairness_values_per_group(write_study, monkeypatch):
    """Before: the check counted 64 bytes per redraw and test image whatever the task, but fairness keeps, for each
    redraw, each finding's rates in each group (about 100 bytes apiece): 200 findings of 18 test images in 4 age
    groups took 70 times the estimate (measured: 821 MB at 10,000 redraws, estimated 12 MB before, 828 MB now), and
    a study the check passed failed in every run's evaluation."""
    from dataclasses import replace

    import numpy as np

    from dpmed import memory
    from dpmed.data import make_phantom

    study = load_study(write_study("name: s\nseeds: [0]\ndata: {source: phantom, n_images: 120, image_size: 16}\n"
                                   "evaluation: {bootstrap_resamples: 100000}\n"
                                   "arms:\n  - {name: a, mechanism: none}\n"))
    binary = make_phantom(n_images=120, image_size=16, seed=0)
    monkeypatch.setattr(memory, "headroom", lambda: memory.Headroom(ram=2 * 10**9, swap=0))
    check_fit(study, binary)
    names = tuple(f"finding {j}" for j in range(200))
    labels = np.random.default_rng(0).integers(0, 2, (len(binary.test), len(names)))
    findings = replace(binary, task=replace(binary.task, kind="multilabel", label_names=names),
                       test=replace(binary.test, labels=labels))
    with pytest.raises(DataError, match=rf"^evaluation.bootstrap_resamples: 100000 redraws of the {len(labels)} test "
                                        r"images take about [0-9.]+ GB of memory to evaluate a run \(fairness keeps "
                                        r"[0-9.]+ GB of it: each redraw's rates of 200 findings in up to \d groups\), "
                                        r"and only 2.0 GB is free for dpmed here: lower evaluation.bootstrap_resamples "
                                        r"\(the default, 1000, is what METHODS.md s.4 uses\), or measure fairness by "
                                        r"fewer groups or not at all \(evaluation.fairness\)$"):
        check_fit(study, findings)
    check_fit(study.model_copy(update={"evaluation": study.evaluation.model_copy(update={"fairness": None})}),
              findings)


def test_training_set_metrics_count_their_redraws_of_the_training_images(write_study, monkeypatch):
    """Before: evaluation.training_metrics redraws the training images as often as the test images, a set several
    times larger, and the check counted the test set's redraws alone: a study it passed failed after training in
    every run's evaluation."""
    from dpmed import memory

    study = load_study(write_study("name: s\nseeds: [0]\ndata: {source: phantom, n_images: 120, image_size: 16}\n"
                                   "evaluation: {bootstrap_resamples: 100000, fairness: null, training_metrics: true}\n"
                                   "arms:\n  - {name: a, mechanism: none}\n"))
    dataset = load_study_data(study)
    assert len(dataset.train) > 3 * len(dataset.test)
    monkeypatch.setattr(memory, "headroom", lambda: memory.Headroom(ram=200 * 10**6, swap=0))
    with pytest.raises(DataError, match=rf"^evaluation.training_metrics: 100000 redraws of the {len(dataset.train)} "
                                        r"training images take about [0-9.]+ MB of memory to evaluate a run, and "
                                        r"only 200 MB is free for dpmed here: set evaluation.training_metrics to false "
                                        r"\(they are private and not covered by eps\), or lower "
                                        r"evaluation.bootstrap_resamples$"):
        check_fit(study, dataset)
    check_fit(study.model_copy(update={"evaluation": study.evaluation.model_copy(
        update={"training_metrics": False})}), dataset)     # the test set's redraws alone fit


def test_an_audit_refused_for_a_dp_count_its_noise_took_below_one_says_so(write_study):
    """Before: "needs more training patients than the -93 of the DP count it plans from", a number of patients no
    dataset has, with no word of where it came from."""
    arm = DP[:-1] + ", audit: {canaries: 10}}"
    study = load_study(write_study(HEAD + f"arms: [{arm}]\ntraining: {{batch_size: 8}}\n"))
    dataset = load_study_data(study)
    with pytest.raises(ConfigError) as caught:
        plan_study(study, dataset, {"patients": -92})
    assert str(caught.value) == (
        "arm 'dp': audit.canaries = 10 needs more training patients than the DP count it plans from, -92 (its noise, "
        "scale 1 / size_epsilon, took it below one: a larger size_epsilon draws a count nearer the true one), "
        "which leaves none to audit with; remove the arm's audit, or use more images")


def test_the_count_of_the_training_set_is_drawn_again_for_another_training_set_only(write_study, tmp_path,
                                                                                      monkeypatch):
    """A test or validation label corrected leaves the training set, and so its count, as it was: the count drawn
    before is planned from again, not drawn and paid a second time (its key was once every split's data). A training
    label, image or patient id changed is another training set, with a count of its own."""
    import json
    from dataclasses import replace

    from dpmed import study as study_module

    study = load_study(write_study(HEAD.replace("reproducible", "secure") + f"arms: [{DP}]\n"))
    dataset = load_study_data(study)
    draws = tmp_path / "out" / "s" / "private" / "released_sizes.json"

    def prepare(data):
        monkeypatch.setattr(study_module, "load_study_data", lambda _: data)
        return prepare_study(study, out=tmp_path / "out").sizes

    def flipped(images, row=0):
        labels = images.labels.copy()
        labels[row] = 1 - labels[row]
        return replace(images, labels=labels)

    first = prepare(dataset)
    assert prepare(replace(dataset, test=flipped(dataset.test), val=flipped(dataset.val, 1))) == first
    assert len(json.loads(draws.read_text())["draws"]) == 1
    ids = dataset.train.patient_ids.copy()
    ids[0] = "someone else"
    for changed in (flipped(dataset.train), replace(dataset.train, images=dataset.train.images[::-1].copy()),
                    replace(dataset.train, patient_ids=ids)):
        prepare(replace(dataset, train=changed))
    assert len(json.loads(draws.read_text())["draws"]) == 4


def test_a_shuffled_arm_s_planned_card_is_not_dp_and_states_its_poisson_counterpart(write_study, tmp_path):
    """`dpmed plan` must show a shuffled-batch arm as the run will record it: no accountant certifies shuffled
    batches, so its card holds no eps, only the labelled hypothetical under Poisson sampling."""
    shuffled = DP.replace("name: dp,", "name: sh,").replace("epochs: 2}", "epochs: 2, sampling: shuffle}")
    prepared = _prepare(write_study, tmp_path, f"arms: [{DP}, {shuffled}]\n")
    shape = prepared.dataset.train.image_shape
    cards = {p.arm: planned_card(p, shape, "secure") for p in prepared.plans}
    assert not cards["sh"].is_dp and cards["sh"].epsilon is None
    assert cards["sh"].epsilon_if_poisson == pytest.approx(cards["dp"].epsilon)


def test_the_runs_to_train_are_those_the_folder_does_not_hold_finished_in_study_order(write_study, tmp_path,
                                                                                     make_record):
    import dataclasses

    prepared = _prepare(write_study, tmp_path, "arms: [{name: b, mechanism: none}, {name: a, mechanism: none}]\n")
    ids = [p.run_id for p in prepared.plans]
    assert [p.run_id for p in prepared.todo] == ids == ["b_seed0", "a_seed0"]
    finished = dataclasses.replace(prepared, finished={"b_seed0": make_record("b_seed0", "b")})
    assert [p.run_id for p in finished.todo] == ["a_seed0"]


def test_crop_padding_as_large_as_the_images_is_refused_and_one_pixel_less_is_not(write_study):
    """Reflect padding needs images larger than the padding (torch refuses it at the first step otherwise)."""
    arms = "arms: [{name: base, mechanism: none}]\n"
    fits = load_study(write_study(HEAD + arms + "training: {augmentation: {crop_padding: 15}}\n"))
    dataset = load_study_data(fits)
    assert dataset.train.image_shape[1:] == (16, 16)
    check_fit(fits, dataset)
    too_large = load_study(write_study(HEAD + arms + "training: {augmentation: {crop_padding: 16}}\n"))
    with pytest.raises(ConfigError, match=r"crop_padding 16 px needs images larger than that .* these are 16 px"):
        check_fit(too_large, dataset)


def test_a_data_cache_in_the_shareable_part_of_the_study_folder_is_refused_and_one_in_private_is_not(
        write_study, write_png_table, tmp_path):
    """The cache holds the training images, decoded: everything in the study folder but private/ may be shared."""
    write_png_table(40, (16, 16))
    out = tmp_path / "out"

    def study(cache):
        return load_study(write_study(
            f"name: s\ndata: {{source: csv, path: labels.csv, columns: {{path: file}}, labels: [finding], "
            f"task: binary, channels: 1, cache_dir: {cache}}}\ntraining: {{batch_size: 8}}\n"
            "arms: [{name: base, mechanism: none}]\n"))
    with pytest.raises(ConfigError, match=r"data.cache_dir .*cache lies in the study folder .*put it where the"):
        prepare_study(study(out / "s" / "cache"), out=out)
    assert not out.exists()
    assert [p.run_id for p in prepare_study(study(out / "s" / "private" / "cache"), out=out).todo] == ["base_seed0"]


def test_a_dp_sgd_arm_whose_batch_is_every_unit_is_told_q_is_one(write_study, tmp_path, caplog):
    import logging

    whole = DP.replace("epochs: 2}", "epochs: 2, batch_size: 1000}")
    with caplog.at_level(logging.WARNING, logger="dpmed.study"):
        prepared = _prepare(write_study, tmp_path, f"arms: [{whole}, {DP.replace('name: dp,', 'name: q,')}]\n")
    rates = {p.arm: p.privacy.sample_rate for p in prepared.plans}
    assert rates["dp"] == 1.0 and rates["q"] < 1.0
    told = [r.getMessage() for r in caplog.records if "q = 1" in r.getMessage()]
    assert len(told) == 1 and told[0].startswith(f"{prepared.plans[0].run_id}: q = 1: the DP count"), told


def test_a_finished_dp_sgd_run_the_study_no_longer_lists_keeps_the_exact_training_size_out_of_study_yaml(
        write_study, tmp_path, make_record):
    """Its model is in the folder, and its eps hides the exact size: study.yaml must show its DP count instead, even
    where the study itself has no DP-SGD arm left (which alone would show the size exactly)."""
    import dataclasses

    dp = make_record("dp_eps8_C1_seed0", "dp", "dp_sgd", eps=8.0)
    privacy = dp.plan.privacy.model_copy(update={"n_units": 97, "size_epsilon": 0.25, "unit": "patient"})
    dp = dp.model_copy(update={"plan": dp.plan.model_copy(update={"privacy": privacy})})
    plain = _prepare(write_study, tmp_path, "arms: [{name: base, mechanism: none}]\n")
    assert plain.resolved().dataset.n_train == 140
    shown = dataclasses.replace(plain, elsewhere=[dp]).resolved().dataset
    assert (shown.n_train, shown.n_train_patients) == (None, None)
    assert shown.released_sizes == {"patients": 97} and shown.size_epsilon == 0.25
    with_dp = _prepare(write_study, tmp_path / "dp", f"arms: [{DP}]\n")
    image_unit = dp.plan.privacy.model_copy(update={"unit": "image"})
    other = dp.model_copy(update={"plan": dp.plan.model_copy(update={"privacy": image_unit})})
    both = dataclasses.replace(with_dp, elsewhere=[other, dp]).resolved().dataset
    assert both.released_sizes == {**with_dp.sizes, "images": 97} and both.size_epsilon == with_dp.study.size_epsilon
    assert both.released_sizes["patients"] == with_dp.sizes["patients"] != 97      # the study's own count stays


def test_the_time_estimate_covers_the_runs_still_to_train_only(write_study, tmp_path, make_record, monkeypatch):
    """`dpmed plan` estimates each run still to train from the probe's rate and its steps; a run finished already
    takes no time, and a run of a kind no step was timed for is estimated at 0 rather than failing."""
    import dataclasses

    import dpmed.study
    from dpmed.study import estimate_times

    class Rates:
        def run_seconds(self, plan, n_train, *, n_patients, left):
            return {"b_seed0": 30.0, "c_seed0": None}.get(plan.run_id, 99.0)

    probed = []
    monkeypatch.setattr(dpmed.study, "probe_rates", lambda todo, *args, **kwargs: probed.append(todo) or Rates())
    arms = "arms: [{name: a, mechanism: none}, {name: b, mechanism: none}, {name: c, mechanism: none}]\n"
    prepared = _prepare(write_study, tmp_path, arms)
    prepared = dataclasses.replace(prepared, finished={"a_seed0": make_record("a_seed0", "a")})
    rates, seconds = estimate_times(prepared)
    assert isinstance(rates, Rates) and seconds == {"b_seed0": 30.0, "c_seed0": 0.0}
    assert [[p.run_id for p in todo] for todo in probed] == [["b_seed0", "c_seed0"]]


def test_an_image_unit_arm_without_a_cap_is_told_what_its_eps_means_for_the_patient_with_most_images(
        write_study, tmp_path, caplog):
    """Told on the terminal only (a statistic of the training set): the group guarantee of the largest patient k,
    for the uncapped image-unit arm alone (a patient-unit arm protects the patient, a capped one states its cap)."""
    import logging

    import numpy as np

    arms = (f"arms: [{DP}, {{name: img, mechanism: dp_sgd, target_epsilon: 8, epochs: 2, privacy_unit: image}}, "
            "{name: cap, mechanism: dp_sgd, target_epsilon: 8, epochs: 2, privacy_unit: image, "
            "max_images_per_patient: 1}]\n")
    with caplog.at_level(logging.INFO, logger="dpmed.study"):
        prepared = _prepare(write_study, tmp_path, arms)
    _, per_patient = np.unique(prepared.dataset.train.patient_ids, return_counts=True)
    k, several = int(per_patient.max()), int((per_patient > 1).sum())
    assert k > 1
    image_run = next(p.run_id for p in prepared.plans if p.arm == "img")
    told = [r.getMessage() for r in caplog.records if "shown here only" in r.getMessage()]
    assert len(told) == 1 and told[0].startswith(f"{image_run}: "), told
    assert f"up to k = {k} training images ({several} patients have several" in told[0]


@pytest.mark.parametrize("same_data", [True, False])
def test_a_count_study_yaml_shows_is_taken_back_where_the_private_draw_is_gone(write_study, tmp_path, monkeypatch,
                                                                               same_data):
    """A study stopped before any run finished has released its DP count in study.yaml already: with the private
    file of draws deleted, the next plan must take that count back rather than draw (and release) another. Not
    where the folder's fingerprint names other data: that count is of another training set."""
    import itertools

    import yaml

    from dpmed import released_size
    from dpmed.folders import write_text_atomic

    noise = itertools.count(3, 8)                                   # 3, then 11, 19, ...
    monkeypatch.setattr(released_size, "discrete_laplace", lambda scale, source: next(noise))
    secure = HEAD.replace("reproducible", "secure") + f"arms: [{DP}]\n"
    first = prepare_study(load_study(write_study(secure)), out=tmp_path / "out")
    patients = len(set(first.dataset.train.patient_ids.tolist()))
    assert first.study.privacy_randomness == "secure" and dict(first.sizes) == {"patients": patients + 3}
    write_text_atomic(first.folder.resolved_study, yaml.safe_dump(first.resolved().model_dump(mode="json")))
    write_text_atomic(first.folder.data_fingerprint, first.fingerprint if same_data else "0" * 64, owner_only=True)
    first.folder.released_sizes.unlink()
    again = prepare_study(load_study(write_study(secure)), out=tmp_path / "out")
    assert dict(again.sizes) == {"patients": patients + (3 if same_data else 11)}


@pytest.mark.parametrize("masked, again", [(0, False), (4, True)])
def test_a_finished_run_explained_without_lesion_masks_is_not_evaluated_again_for_a_pointing_tolerance(
        tmp_path, make_record, make_explanations, masked, again):
    """The pointing tolerance counts only where lesion masks were explained: a run of data without masks recorded
    none, and resuming it under another tolerance must reuse it as it is (evaluating every such run again at every
    `dpmed run`), where a run with masks is evaluated again from its model. Its record read alone, as where
    study.yaml is gone; a record of an older dpmed without the bootstrap's settings is compared on the rest."""
    import torch

    from dpmed.config import Study
    from dpmed.folders import StudyFolder
    from dpmed.records import DatasetSummary
    from dpmed.resumption import finished_runs

    study = Study.model_validate({"name": "s", "data": {"source": "phantom", "n_images": 100, "image_size": 16},
                                  "arms": [{"name": "base", "mechanism": "none"}],
                                  "evaluation": {"fairness": None, "explanations": {
                                      "method": "gradcam", "n_images": 8, "deletion_steps": 8, "seed": 0,
                                      "pointing_tolerance": 5}}})
    shown = {} if not masked else {"n_masked_images": masked, "pointing_tolerance_px": 0.0}
    record = make_record("base_seed0", "base", explanations=make_explanations({}, **shown))
    folder = StudyFolder(tmp_path / "out")
    run = folder.run("base_seed0")
    run.public.mkdir(parents=True)
    record.write(run.record)
    torch.save({"w": torch.zeros(1)}, run.model)
    summary = DatasetSummary(name="test", task="binary", synthetic=True, description="", n_train=None, n_val=10,
                             n_test=10, n_train_patients=None, patients_known=True, image_shape=(1, 16, 16))
    mine, elsewhere, stale = finished_runs(folder, [record.plan], summary, study, "0" * 64, None)
    assert list(mine) == ["base_seed0"] and elsewhere == []
    assert stale == (["base_seed0"] if again else [])


@pytest.mark.parametrize("arm", ["{name: base, mechanism: none}", "{name: lap, mechanism: pixel_laplace, scale: 2}"])
def test_a_budget_over_a_study_without_dp_sgd_is_refused_for_its_runs_not_for_a_count_it_has_none_of(
        write_study, tmp_path, arm):
    """The budget's delta is checked against the most units a DP-SGD run counts; a study without DP-SGD has none
    to check it against, and its budget is refused for what its runs are (not private, or another neighbour
    relation), the one line the user can act on."""
    with pytest.raises(PrivacyError, match=r"^privacy_budget: (runs base_seed0 train without privacy|local-DP runs "
                                           r"lap_b2_seed0 hold under another neighbour relation)"):
        _prepare(write_study, tmp_path, f"privacy_budget: {{epsilon: 1, delta: 0.5}}\narms: [{arm}]\n")


def test_more_deletion_steps_than_pixels_are_refused_before_training(write_study):
    """Before: evaluation.explanations.deletion_steps 10**20 was accepted, and every run failed after training in
    NumPy's arange; a step past the P = H x W pixel locations changes no pixel the step before did not."""
    study = load_study(write_study("name: s\nseeds: [0]\ndata: {source: phantom, n_images: 100, image_size: 16}\n"
                                   "evaluation: {explanations: {deletion_steps: 256}}\n"
                                   "arms:\n  - {name: a, mechanism: none}\n"))
    dataset = load_study_data(study)
    check_fit(study, dataset)          # one pixel location a step: 16 x 16 = 256
    cams = study.evaluation.explanations
    for steps in (257, 10**20):
        too_many = study.model_copy(update={"evaluation": study.evaluation.model_copy(
            update={"explanations": cams.model_copy(update={"deletion_steps": steps})})})
        with pytest.raises(ConfigError, match=rf"^evaluation.explanations.deletion_steps {steps} exceeds the 256 "
                                              r"pixel locations of these 16 x 16 px images.*lower it to 256 or less"):
            check_fit(too_many, dataset)


def test_augmented_copies_are_no_longer_counted_whole_before_training(write_study, monkeypatch):
    """A step makes its K augmented copies a physical batch at a time (`dpmed.training.augmentation.Copies`): a
    multiplicity whose copies of a whole batch no memory holds trains, and the check before training that refused it
    (counting all K B copies at once) would refuse studies that fit."""
    from dpmed import memory

    study = load_study(write_study("name: s\nseeds: [0]\ndata: {source: phantom, n_images: 100, image_size: 32}\n"
                                   "training: {batch_size: 64, augmentation: {multiplicity: 256}}\n"
                                   "arms:\n  - {name: a, mechanism: dp_sgd, target_epsilon: 8}\n"))
    dataset = load_study_data(study)
    monkeypatch.setattr(memory, "headroom", lambda: memory.Headroom(ram=20 * 10**6, swap=0))   # copies: 67 MB
    check_fit(study, dataset)


def test_a_count_rough_against_its_noise_is_told_once_with_its_interval_and_a_size_epsilon_for_a_public_size(
        write_study, tmp_path, caplog):
    """About 120 training patients counted at the default eps 0.02 (noise sd 71): the count is told as rough once,
    for the two arms that plan from it, with its 95 % interval; at size_epsilon 1 (interval +- 3) nothing is told."""
    import logging

    arms = f"arms: [{DP}, {DP.replace('name: dp,', 'name: dp2,')}]\n"
    with caplog.at_level(logging.WARNING, logger="dpmed.study"):
        prepared = _prepare(write_study, tmp_path, arms)
    count = prepared.sizes["patients"]
    told = [r.getMessage() for r in caplog.records if "is rough" in r.getMessage()]
    opening = (f"the DP count of the training patients, {count}, is rough at size_epsilon 0.02: the exact count lies "
               f"within {count} +- 150 at 95 % confidence")
    assert len(told) == 1 and told[0].startswith(opening), told
    assert "set size_epsilon = 12 / n, n a study size you may publish" in told[0] and "not this count" in told[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="dpmed.study"):
        _prepare(write_study, tmp_path / "sharp", "size_epsilon: 1\n" + arms)
    assert not [r for r in caplog.records if "is rough" in r.getMessage()]


def test_a_rough_count_is_told_only_while_a_run_still_to_train_plans_from_it(write_study, tmp_path, caplog):
    """Every rerun of a small study warned of its rough count, also once its DP-SGD runs had all finished and
    nothing was planned from the count any more; a run still to train is warned again. The count as the plan shows
    it keeps its interval ("rough: +- 150")."""
    import logging

    from dpmed.released_size import describe_counts
    from dpmed.study import run_study

    dp = DP.replace("epochs: 2", "epochs: 1")
    finished = load_study(write_study(HEAD + f"arms: [{dp}]\n"))
    run_study(finished, out=tmp_path / "out", progress=False)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="dpmed.study"):
        prepared = prepare_study(finished, out=tmp_path / "out")
    assert not prepared.todo and not [r for r in caplog.records if "is rough" in r.getMessage()]
    assert ", rough: +- 150 at 95 %" in describe_counts(prepared.sizes, finished.size_epsilon)
    more = load_study(write_study(HEAD + f"arms: [{dp}, {dp.replace('name: dp,', 'name: dp2,')}]\n"))
    with caplog.at_level(logging.WARNING, logger="dpmed.study"):
        prepared = prepare_study(more, out=tmp_path / "out")
    told = [r.getMessage() for r in caplog.records if "is rough" in r.getMessage()]
    assert [p.run_id for p in prepared.todo] == ["dp2_eps8_C1_seed0"] and len(told) == 1, told


@pytest.mark.parametrize("size_epsilon", [0.02, 1])
def test_the_advice_for_a_rough_count_of_five_units_stays_within_size_epsilon_s_limit(
        write_study, tmp_path, caplog, monkeypatch, size_epsilon):
    """The advice size_epsilon = 12 / n exceeds the schema's limit of 1 below 12 units (2.4 at n = 5), and at
    size_epsilon 1 a count of 5 is still rough (+- 3), where the warning advised raising it. It now says that no
    size_epsilon narrows so few, and that training.steps keeps T off the count; the settings it names load."""
    import logging

    import dpmed.study
    from dpmed.errors import ConfigError as Refused

    monkeypatch.setattr(dpmed.study, "release_sizes", lambda needed, **kwargs: {key: 5 for key in needed})
    with caplog.at_level(logging.WARNING, logger="dpmed.study"):
        _prepare(write_study, tmp_path, f"size_epsilon: {size_epsilon}\narms: [{DP}]\n")
    [told] = [r.getMessage() for r in caplog.records if "is rough" in r.getMessage()]
    assert told.startswith(f"the DP count of the training patients, 5, is rough at size_epsilon {size_epsilon:g}")
    assert ("no size_epsilon within its limit, 1, narrows a count of fewer than 12 units so far (at 1 it is +- 3)"
            in told), told
    if size_epsilon < 1:
        assert told.endswith("for so few, set size_epsilon 1 and training.steps, which keeps T off the count (q = B / "
                             "N still reads it), and no epochs on arm dp, which replace it"), told
    else:
        assert "set size_epsilon" not in told and told.endswith(
            "set training.steps, which keeps T off the count (q = B / N still reads it), and no epochs on arm dp, "
            "which replace it, or train on more units"), told
    advised = HEAD + "size_epsilon: 1\ntraining: {steps: 20}\n" + f"arms: [{DP.replace(', epochs: 2', '')}]\n"
    load_study(write_study(advised))            # what it advises is a valid study
    with pytest.raises(Refused, match="size_epsilon"):
        load_study(write_study(advised.replace("size_epsilon: 1", f"size_epsilon: {12 / 5}")))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="dpmed.study"):
        _prepare(write_study, tmp_path / "steps", "size_epsilon: 1\ntraining: {steps: 20}\n"
                 f"arms: [{DP.replace(', epochs: 2', '')}]\n")
    [told] = [r.getMessage() for r in caplog.records if "is rough" in r.getMessage()]
    assert "training.steps" not in told and told.endswith("(at 1 it is +- 3); train on more units"), told


@pytest.mark.parametrize("count", [11, 12, 150])
def test_a_rough_count_is_told_that_no_size_epsilon_narrows_it_only_below_twelve_units(
        write_study, tmp_path, caplog, monkeypatch, count):
    """The clause "no size_epsilon within its limit narrows a count of fewer than 12 units" ended every warning at
    size_epsilon 0.02, also of a count of 150, which size_epsilon = 12 / 150 narrows: it is told below 12 only."""
    import logging

    import dpmed.study

    monkeypatch.setattr(dpmed.study, "release_sizes", lambda needed, **kwargs: {key: count for key in needed})
    with caplog.at_level(logging.WARNING, logger="dpmed.study"):
        _prepare(write_study, tmp_path, f"arms: [{DP}]\n")
    [told] = [r.getMessage() for r in caplog.records if "is rough" in r.getMessage()]
    assert "set size_epsilon = 12 / n, n a study size you may publish" in told, told
    assert ("no size_epsilon within its limit" in told) == (count < 12), told
    assert ("training.steps" in told) == (count < 12), told
    if count >= 12:
        assert told.endswith("it adds to each DP-SGD run's eps"), told


@pytest.mark.parametrize("first", ["by_steps", "by_epochs"])
def test_the_advice_for_a_rough_count_names_the_arms_whose_epochs_read_t_from_it_whichever_is_listed_first(
        write_study, tmp_path, caplog, monkeypatch, first):
    """A study with training.steps and two DP-SGD arms of one count, one with epochs of its own (which replace
    training.steps): the first run of the count decided the advice alone, so listed first the arm with epochs had
    the study told to set the training.steps it had, and listed second it went untold that its epochs read T from
    the count. Either order now names it."""
    import logging

    import dpmed.study

    monkeypatch.setattr(dpmed.study, "release_sizes", lambda needed, **kwargs: {key: 5 for key in needed})
    arms = ["{name: by_steps, mechanism: dp_sgd, target_epsilon: 8}",
            "{name: by_epochs, mechanism: dp_sgd, target_epsilon: 8, epochs: 2}"]
    arms.sort(key=lambda arm: not arm.startswith(f"{{name: {first},"))
    with caplog.at_level(logging.WARNING, logger="dpmed.study"):
        _prepare(write_study, tmp_path, f"size_epsilon: 1\ntraining: {{steps: 20}}\narms: [{', '.join(arms)}]\n")
    [told] = [r.getMessage() for r in caplog.records if "is rough" in r.getMessage()]
    assert told.endswith("; set training.steps, which keeps T off the count (q = B / N still reads it), and no epochs "
                         "on arm by_epochs, which replace it, or train on more units"), told


def test_the_advice_for_a_rough_count_names_no_arm_whose_length_is_the_study_s_own_epochs(write_study, tmp_path,
                                                                                           caplog, monkeypatch):
    """An arm without epochs of its own reads T from the count through training.epochs: setting training.steps
    alone keeps T off it, so the advice names no arm's epochs to drop (the arm has none to drop)."""
    import logging

    import dpmed.study

    monkeypatch.setattr(dpmed.study, "release_sizes", lambda needed, **kwargs: {key: 5 for key in needed})
    with caplog.at_level(logging.WARNING, logger="dpmed.study"):
        _prepare(write_study, tmp_path, "size_epsilon: 1\ntraining: {epochs: 2}\n"
                 "arms: [{name: plain, mechanism: dp_sgd, target_epsilon: 8}]\n")
    [told] = [r.getMessage() for r in caplog.records if "is rough" in r.getMessage()]
    assert told.endswith("; set training.steps, which keeps T off the count (q = B / N still reads it), or train on "
                         "more units"), told
