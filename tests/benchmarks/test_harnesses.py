"""The benchmark harnesses still run against today's API: a harness that fails on every engine measures nothing,
and the DP-step one did (it still passed the step a torch generator after the noise moved to a secret numpy
stream). One step of a small model per engine; nothing here asserts a speed."""

from __future__ import annotations

import argparse
import importlib
import json
import re
import runpy
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dpmed.data.synthetic import make_phantom

_BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(autouse=True)
def _threads_given_back():
    """Harnesses run here in-process set torch's thread count for their measurement (--threads) and keep it: without
    this, every later test in the session would run at their count."""
    import torch

    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.filterwarnings("ignore:Secure RNG turned off")      # Opacus's, of its own noise in this benchmark
def test_dp_step_runs_every_engine():
    """Each engine's step as the harness's worker measures it, here in this process: a worker process per engine
    (the next test's path) would import torch and Opacus five times over."""
    dp_step = _harness("dp_step")
    rows = {}
    for engine in ("nonprivate", "opacus-hooks", "opacus-ghost", "dpmed", "dpmed-no-noise"):
        rows[engine] = dp_step.worker(argparse.Namespace(
            model="small_cnn", size="16x1", engine=engine, device="cpu", batch=8, steps=1, warmup=0, threads=1,
            profile=1, count_ops=True, images_per_patient=1))
    for engine, row in rows.items():
        assert row["median_ms"] > 0 and row["parameters"] > 0 and row["torch_threads"] == 1, engine
        assert row["profile"]["top"] and all(op["self_ms"] >= 0 for op in row["profile"]["top"]), engine
    # the dpmed step names its phases; sigma 0 draws no noise, so it has the clipped sum's phase only
    phases = {engine: row["profile"]["phases"] for engine, row in rows.items()}
    assert set(phases["dpmed"]) == {"dpmed.clipped_sum", "dpmed.noise_wait", "dpmed.noise_add"}
    assert phases["dpmed"]["dpmed.clipped_sum"]["cpu_ms"] > 0
    assert phases["dpmed-no-noise"] == {} and phases["nonprivate"] == {} and phases["opacus-ghost"] == {}
    # clipping and noise dispatch operators a plain step does not
    ops = {engine: row["dispatched_ops"] for engine, row in rows.items()}
    assert 0 < ops["nonprivate"] < ops["dpmed-no-noise"] < ops["dpmed"]


def test_clipping_rounding_stays_below_the_slack_that_covers_it_and_puts_the_slack_back():
    import torch

    from dpmed.training import clipping

    worst = _harness("clipping_rounding").worst_rounding("small_cnn", 16, 1, seeds=1)
    assert set(worst) == set(clipping.ROUTES)
    assert 0 < max(worst.values()) < clipping.GROUP_ROUNDING_SLACK * torch.finfo(torch.float32).eps
    assert clipping.GROUP_ROUNDING_SLACK == 2.0 ** 7 and clipping.clip_factors.__name__ == "clip_factors"


def test_clipping_rounding_runs_only_the_routes_asked_for(monkeypatch, capsys):
    """--routes leaves a route out (the ghost route's pixel Gram at a 224 px ResNet-18 stem is 21 GiB in float64):
    the engine is never run on it, and its column says so rather than reading 0."""
    harness = _harness("clipping_rounding")
    seen, engine = [], harness.engine_and_exact

    def spy(*args, route, **kwargs):
        seen.append(route)
        return engine(*args, route=route, **kwargs)

    monkeypatch.setattr(harness, "engine_and_exact", spy)
    assert harness.main(["--models", "small_cnn:16:1", "--seeds", "1", "--routes", "mixed,materialised"]) == 0
    assert seen == ["mixed", "materialised"]
    row = capsys.readouterr().out.splitlines()[-1].strip("| ").split(" | ")
    assert row[:2] == ["small_cnn", "16x1"] and row[3] == "not run"
    assert 0 < float(row[2]) and 0 < float(row[4]) and float(row[5]) > 1
    with pytest.raises(SystemExit):
        harness.main(["--models", "small_cnn:16:1", "--routes", "mixed,pairs"])


def test_ghost_rounding_truth_is_the_float64_engine_s_own_norm_for_a_float64_model():
    """The harness's truth, autograd of each layer alone on the (a, g) the engine saw, is the engine's own norm where
    nothing rounds at float32: a float64 model, images and patients (with the slack, which is 2^-45 there)."""
    import torch

    from dpmed.models import build_model

    engine_and_exact = _harness("ghost_rounding").engine_and_exact
    model = build_model("small_cnn", in_channels=1, num_outputs=2, image_size=16, seed=0).double()
    x = torch.rand(4, 1, 16, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    y = torch.tensor([0, 1, 1, 0])
    for groups in (None, torch.tensor([7, 7, 2, 7])):
        norms, exact, own = engine_and_exact(model, x, y, route="mixed", groups=groups, loss_fn=lambda z, t: (
            torch.nn.functional.cross_entropy(z, t, reduction="sum")))
        assert len(norms) == len(exact) == (4 if groups is None else 2) and len(own) == 4
        assert torch.allclose(norms, exact, rtol=1e-9, atol=0)


def test_ghost_rounding_finds_float32_ghost_norms_short_and_the_engine_s_exact_and_puts_both_back():
    from dpmed.training import clipping

    wide = clipping._wide
    before, after = _harness("ghost_rounding").measure("conv", scale=8)
    assert before > 1e-3 and abs(after) < 1e-5
    assert clipping._wide is wide and clipping.clip_factors.__name__ == "clip_factors"
    assert clipping._Tape._on_output_grad.__qualname__ == "_Tape._on_output_grad"


def test_dp_step_clips_patients_with_dpmed_and_refuses_them_to_opacus():
    """--images-per-patient reaches the engine (grouping patients dispatches more operators than clipping images),
    and Opacus, which has no patient-level clipping, is refused rather than timed clipping images."""
    dp_step = _harness("dp_step")

    def step(engine, k):
        return dp_step.worker(argparse.Namespace(
            model="small_cnn", size="16x1", engine=engine, device="cpu", batch=8, steps=1, warmup=0, threads=1,
            profile=0, count_ops=True, images_per_patient=k))

    assert step("dpmed", 2)["dispatched_ops"] > step("dpmed", 1)["dispatched_ops"]
    with pytest.raises(SystemExit, match="no patient-level"):
        step("opacus-hooks", 2)


def test_dp_step_measures_each_engine_in_its_own_process(tmp_path):
    out = tmp_path / "steps.json"
    done = subprocess.run([sys.executable, str(_BENCHMARKS / "dp_step.py"), "--models", "small_cnn", "--sizes", "16x1",
                           "--batch", "8", "--steps", "1", "--warmup", "0", "--threads", "1", "--out", str(out),
                           "--engines", "dpmed", "--profile", "1", "--count-ops"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    written = json.loads(out.read_text())
    assert written["machine"]["opacus"] and written["machine"]["torch_threads"] == 1
    [row] = written["rows"]
    assert row["engine"] == "dpmed" and "error" not in row and row["median_ms"] > 0, row
    assert "| small_cnn | 16x1 | dpmed |" in done.stdout
    assert "profile small_cnn 16x1 dpmed (ms per step, 1 steps):" in done.stdout and "dpmed.clipped_sum" in done.stdout
    assert "dispatched operators per step, small_cnn 16x1 dpmed: " in done.stdout


def _harness(name: str):
    """A benchmark script as a module (benchmarks/ is not a package)."""
    sys.path.insert(0, str(_BENCHMARKS))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(_BENCHMARKS))


def _ablation():
    return _harness("utility_ablation")


def test_ablation_variants_add_one_part_each_up_to_augment_and_scatternet_swaps_the_model_of_schedule():
    variants = _ablation().VARIANTS
    chain = ["shipped", "steps", "ema", "schedule", "ws", "augment"]
    for before, after in zip(chain, chain[1:]):
        assert variants[after][:-1] == variants[before], after
    for name in ("scatternet-linear", "scatternet-cnn"):
        assert variants[name] == [*variants["schedule"], f"model.name={name.replace('-', '_')}"]


def test_ablation_base_overrides_come_before_each_variants_own(monkeypatch, tmp_path):
    """`--set` starts every variant from another recipe; the variant's own overrides come later, so they win."""
    ablation = _ablation()
    calls = []
    monkeypatch.setattr(ablation.subprocess, "run", lambda cmd, check: calls.append(cmd))
    monkeypatch.setattr(sys, "argv", ["utility_ablation.py", "study.yaml", "--out", str(tmp_path), "--seeds", "0",
                                      "--variants", "schedule", "--set", "model.name=small_cnn",
                                      "--set", "training.epochs=10"])
    monkeypatch.setattr(ablation, "read_variant", lambda out, name: {})
    ablation.main()
    sets = [calls[0][i + 1] for i, a in enumerate(calls[0]) if a == "--set"]
    assert sets.index("model.name=small_cnn") < sets.index("training.epochs=10") < sets.index("training.epochs=auto")
    assert sets[-3:] == ablation.VARIANTS["schedule"]


def _site_calibration():
    return _harness("site_calibration")


def test_site_calibration_oracle_and_draws_against_hand_counts():
    import numpy as np

    site = _site_calibration()
    # t = 0.4 -> [0, 1, 1, 1] and t = 0.9 -> [0, 0, 0, 1] are right 3 times of 4; no threshold does better.
    assert site.oracle_accuracy(np.array([0, 0, 1, 1]), np.array([0.1, 0.6, 0.4, 0.9])) == 0.75
    # Patients 0-9 negative (score 0.1), 10-19 positive (0.8), two images each: Youden's threshold on any draw that
    # holds both classes is 0.8 (the highest of the equal maxima), so every held-out patient is right.
    patients = np.repeat(np.arange(20), 2)
    labels = (patients >= 10).astype(int)
    scores = np.where(labels == 1, 0.8, 0.1)
    accs = site.calibrated_accuracy(labels, scores, patients, fraction=0.5, draws=50, rng=np.random.default_rng(0))
    assert len(accs) == 50 and set(accs) == {1.0}
    # One image per patient, two patients: the only draw of one patient holds one class, so no draw counts.
    assert site.calibrated_accuracy(np.array([0, 1]), np.array([0.2, 0.7]), np.array(["a", "b"]), fraction=0.5,
                                    draws=5, rng=np.random.default_rng(0)) == []
    try:
        site.calibrated_accuracy(labels, scores, patients, fraction=1.0, draws=1, rng=np.random.default_rng(0))
    except ValueError as err:
        assert "no patient" in str(err)
    else:
        raise AssertionError("a fraction that leaves nothing to evaluate must be refused")


def test_site_calibration_reads_a_study_folder_and_groups_seeds(tmp_path, capsys):
    import numpy as np

    site = _site_calibration()
    for seed, shift in ((0, 0.0), (1, 0.15)):
        run = tmp_path / "study" / "runs" / f"dp-sgd_eps1_C1_seed{seed}"
        run.mkdir(parents=True)
        # Validation puts Youden's threshold at 0.6; on test the negatives score 0.5 + shift and the positives 0.9.
        # Seed 1's negatives cross 0.6: accuracy 1.0 and 0.5 at the validation threshold, but a threshold chosen on
        # half of the test patients (0.9) and every oracle still separate them.
        np.savez(run / "predictions.npz", val_labels=np.array([0, 0, 1, 1]), val_scores=np.array([0.2, 0.3, 0.6, 0.7]),
                 val_patient_ids=np.array(["v0", "v1", "v2", "v3"]),
                 test_labels=np.repeat([0, 1], 10), test_scores=np.r_[np.full(10, 0.5 + shift), np.full(10, 0.9)],
                 test_patient_ids=np.array([f"p{i}" for i in range(20)]))
    out = tmp_path / "rows.json"
    site.main([str(tmp_path / "study"), "--fractions", "0.5", "--draws", "20", "--json", str(out)])
    rows = json.loads(out.read_text())
    assert [r["validation"] for r in rows] == [1.0, 0.5]
    assert all(r["group"] == "dp-sgd_eps1_C1" and r["oracle"] == 1.0 for r in rows)
    assert "| study | dp-sgd_eps1_C1 | 0.750 (1.000, 0.500) | 1.000 (1.000, 1.000) | 1.000 (1.000, 1.000) |" in (
        capsys.readouterr().out)


def test_kermany_three_class_splits_by_patient_and_reads_as_a_multiclass_medmnist_file(tmp_path):
    from PIL import Image

    from dpmed.data.formats.medmnist import read_medmnist

    three = _harness("kermany_three_class")
    root = tmp_path / "chest_xray"
    files = {"test": ["NORMAL/IM-0001-0001", "PNEUMONIA/person1_bacteria_1", "PNEUMONIA/person2_virus_2"],
             "train": [f"NORMAL/IM-{i:04d}-0001" for i in range(10, 30)]
             + [f"PNEUMONIA/person{i}_bacteria_{j}" for i in range(10, 30) for j in (1, 2)]
             + [f"PNEUMONIA/person{i}_virus_9" for i in range(30, 40)]
             + ["PNEUMONIA/person1_bacteria_7", "PNEUMONIA/person2_virus_8"]}      # patients also in test
    for folder, names in files.items():
        for name in names:
            (root / folder / name).parent.mkdir(parents=True, exist_ok=True)
            Image.new("L", (40, 40), 100).save(root / folder / f"{name}.jpeg")
    parts = three.split(root, train_images=20)
    patients = {k: {three.patient_of(p) for p in v} for k, v in parts.items()}
    assert not {"person1", "person2"} & (patients["train"] | patients["val"])             # test's patients left out
    assert not patients["train"] & patients["val"]
    assert len(patients["val"]) == 5                                            # a tenth of the 50 other patients
    assert 20 <= len(parts["train"]) <= 21                              # whole patients until at least 20 images
    assert [three.label_of(p) for p in parts["test"]] == [0, 1, 2]
    three.write(root, tmp_path / "k3.npz", size=8, train_images=0)
    data = read_medmnist(tmp_path / "k3.npz")
    assert data.task.kind == "multiclass" and data.train.images.shape[1:] == (1, 8, 8)
    assert len(data.train.images) + len(data.val.images) == 20 + 40 + 10                 # every other train image


def test_shifted_inputs_moves_images_by_reflection_as_counted_by_hand():
    import numpy as np

    shifts = _harness("shifted_inputs")
    image = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)        # rows 0-3, 4-7, 8-11, 12-15
    right = shifts.shifted(image, 1, 0)[0, 0]
    assert right[:, 1:].tolist() == image[0, 0, :, :3].tolist()        # content one column to the right
    assert right[:, 0].tolist() == [1, 5, 9, 13]                       # the new left edge: reflection of column 1
    down = shifts.shifted(image, 0, -1)[0, 0]                           # dy = -1: up one row
    assert down[:3].tolist() == image[0, 0, 1:].tolist() and down[3].tolist() == [8, 9, 10, 11]
    assert shifts.shifted(image, 0, 0) is image
    assert len(shifts.transforms("shifts", 2)) == 5 and len(shifts.transforms("flip", 2)) == 2


def test_shifted_inputs_recomputes_a_study_from_its_models_and_refuses_other_scores(tmp_path, capsys):
    import numpy as np

    from dpmed.cli import main

    (tmp_path / "s.yaml").write_text("name: tta\ndata: {source: phantom, n_images: 160, image_size: 16}\n"
                                     "training: {epochs: 2, batch_size: 16, threads: 1}\n"
                                     "evaluation: {bootstrap_resamples: 20}\narms: [{name: base, mechanism: none}]\n")
    assert main(["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path), "--no-progress"]) == 0
    study, shifts = tmp_path / "tta", _harness("shifted_inputs")
    shifts.main([str(study), "--json", str(tmp_path / "rows.json")])
    row, = json.loads((tmp_path / "rows.json").read_text())
    record = json.loads((study / "runs" / "base_seed0" / "run.json").read_text())
    assert row["shift_px"] == 1 and row["group"] == "base"                         # 16 px / 16
    assert row["none"]["test_auroc"] == pytest.approx(record["metrics"]["test_auroc"], abs=1e-9)
    assert row["none"]["accuracy"] == pytest.approx(record["metrics"]["test_accuracy"], abs=1e-9)
    assert {"shifts", "flip"} <= set(row) and "| tta | base (1) | shifts |" in capsys.readouterr().out

    saved = study / "runs" / "base_seed0" / "predictions.npz"
    arrays = dict(np.load(saved))
    arrays["test_scores"] = 1 - arrays["test_scores"]
    np.savez(saved, **arrays)
    with pytest.raises(SystemExit, match="does not give its saved test scores"):
        shifts.main([str(study)])


def test_film_rendering_finds_the_central_crop_each_reference_image_was_rendered_with():
    import numpy as np

    films = np.random.default_rng(0).random((6, 40, 60), dtype=np.float32)
    rendering = _harness("film_rendering")
    made = [("width", 0.7)] * 4 + [("height", 0.8)] * 2
    reference = np.concatenate([rendering._render(films[:4], 0.7, 1.0, 12), rendering._render(films[4:], 1.0, 0.8, 12)])
    order = np.array([3, 0, 5, 1, 4, 2])                                  # reference image j is film order[j]
    crop, corr, index = rendering.best_crops(films, reference[order])
    assert crop == made and corr == pytest.approx(1.0, abs=1e-6)
    assert (order[index] == np.arange(6)).all()
    crop, corr, _ = rendering.best_crops(films, reference, fractions=(1.0, 0.9))     # the crop is not offered
    assert max(corr) < 0.99


def test_film_rendering_scores_both_renderings_at_the_runs_validation_threshold(tmp_path, capsys):
    """With the study's own test images as the second rendering, both columns agree with run.json."""
    import numpy as np

    from dpmed.cli import main
    from dpmed.states import read_resolved
    from dpmed.study import load_study_data

    (tmp_path / "s.yaml").write_text("name: rendering\ndata: {source: phantom, n_images: 160, image_size: 16}\n"
                                     "training: {epochs: 2, batch_size: 16, threads: 1}\n"
                                     "evaluation: {bootstrap_resamples: 20}\narms: [{name: base, mechanism: none}]\n")
    assert main(["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path), "--no-progress"]) == 0
    study = tmp_path / "rendering"
    test = load_study_data(read_resolved(study).study).test
    np.savez(tmp_path / "m.npz", test_images=test.images[:, 0] * 255, test_labels=test.labels[:, None])
    _harness("film_rendering").main([str(study), "--medmnist", str(tmp_path / "m.npz"), "--json",
                                     str(tmp_path / "rows.json")])
    row, = json.loads((tmp_path / "rows.json").read_text())
    record = json.loads((study / "runs" / "base_seed0" / "run.json").read_text())
    for rendering in ("folders", "medmnist"):
        assert row[rendering]["test_auroc"] == pytest.approx(record["metrics"]["test_auroc"], abs=1e-6)
        assert row[rendering]["accuracy"] == pytest.approx(record["metrics"]["test_accuracy"], abs=1e-9)
    assert "| rendering | base (1) | accuracy |" in capsys.readouterr().out


def test_film_rendering_restores_each_film_to_the_crop_its_reference_image_shows(tmp_path):
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(1)
    rendering = _harness("film_rendering")
    films = {"train": rng.random((2, 40, 60), dtype=np.float32), "test": rng.random((1, 40, 60), dtype=np.float32)}
    for split, stack in films.items():
        for i, film in enumerate(stack):
            (tmp_path / "src" / split / "A").mkdir(parents=True, exist_ok=True)
            Image.fromarray(np.round(film * 255).astype(np.uint8)).save(tmp_path / "src" / split / "A" / f"f{i}.png")
    grey = {k: np.round(v * 255) / 255 for k, v in films.items()}                  # as the PNGs hold them
    as_uint8 = lambda x: np.round(x * 255).astype(np.uint8)                          # noqa: E731
    np.savez(tmp_path / "m.npz", train_images=as_uint8(rendering._render(grey["train"][:1], 0.7, 1.0, 12)),
             val_images=as_uint8(rendering._render(grey["train"][1:], 0.55, 1.0, 12)),
             test_images=as_uint8(rendering._render(grey["test"], 1.0, 0.8, 12)))
    rendering.main(["--medmnist", str(tmp_path / "m.npz"), "--films", str(tmp_path / "src"), "--restore",
                    str(tmp_path / "out")])
    sizes = {p.relative_to(tmp_path / "out").as_posix(): Image.open(p).size for p in (tmp_path / "out").rglob("*.png")}
    assert sizes == {"train/A/f0.png": (42, 40), "train/A/f1.png": (33, 40), "test/A/f0.png": (60, 32)}
    restored = np.asarray(Image.open(tmp_path / "out" / "train" / "A" / "f0.png"), dtype=np.float32) / 255
    assert np.array_equal(restored, grey["train"][0][:, 9:51])                     # the central 42 of 60 columns


@pytest.mark.parametrize("steps", [1000, 10000])
def test_at_dpmeds_pld_delta_floor_the_library_s_grids_agree_and_stay_below_rdp(steps):
    """The floor dpmed puts on PLD's delta (max(1e-12, 1e-15 T)) must lie where dp_accounting's PLD is still
    consistent: three grids agree to 1 % and none exceeds RDP's bound. Checked with the harness's own calls."""
    from dpmed.accounting.epsilon import _pld_min_delta

    floor = _harness("pld_delta_floor")
    delta = _pld_min_delta(steps)
    eps = [floor.pld_epsilon(0.01, 1.0, steps, delta, h) for h in floor.GRIDS]
    assert max(eps) / min(eps) - 1 < 0.01
    assert max(eps) <= floor.rdp_epsilon(0.01, 1.0, steps, delta)


def test_bootstrap_unit_prints_equal_widths_without_shared_patients_and_wider_with_them(tmp_path, capsys):
    """Two runs of one study: ids all distinct (the patient bootstrap is the image one) or two images per patient
    with near-equal scores (redrawing patients redraws pairs: wider)."""
    harness = runpy.run_path(str(_BENCHMARKS / "bootstrap_unit.py"))
    rng = np.random.default_rng(0)
    for name, ids in (("distinct", np.arange(200).astype(str)), ("pairs", np.repeat(np.arange(100), 2).astype(str))):
        run = tmp_path / name / "runs" / "r_seed0"
        run.mkdir(parents=True)
        labels = np.repeat(rng.integers(0, 2, 100), 2)
        scores = np.clip(labels * 0.3 + np.repeat(rng.random(100), 2) * 0.7, 0, 1)
        np.savez(run / "predictions.npz", val_scores=scores, val_labels=labels, test_scores=scores,
                 test_labels=labels, test_patient_ids=ids, val_patient_ids=ids)
        (run / "run.json").write_text(json.dumps({"metrics": {"bootstrap_seed": 3}}))
    assert harness["main"]([str(tmp_path / "distinct"), str(tmp_path / "pairs"), "--resamples", "200"]) == 0
    rows = [line.split("|") for line in capsys.readouterr().out.splitlines()[2:]]
    ratio = {(r[1].strip(), r[4].strip()): float(r[7].split()[0]) for r in rows}
    assert ratio[("distinct", "test_auroc")] == ratio[("distinct", "test_accuracy")] == 1.0
    assert ratio[("pairs", "test_auroc")] > 1.1 and ratio[("pairs", "test_accuracy")] > 1.1


def test_overlap_crops_finds_each_crafted_copy_of_a_few_films_and_skips_without_the_data(tmp_path, capsys):
    overlap = _harness("overlap_crops")
    assert overlap.main(["--data", str(tmp_path)]) == 0
    assert "skipped: the Kermany folders are absent" in capsys.readouterr().out
    shared = _BENCHMARKS.parents[0] / ".." / "shared" / "data"
    if not (shared / "chest_xray" / "train").is_dir():
        pytest.skip(f"real data absent: {shared} (the project's shared/data folder sits beside the repo)")
    assert overlap.main(["--data", str(shared), "--films", "4", "--skip-full"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 28 px") or
            line.startswith("| 64 px")]
    assert len(rows) == 2 and all(cell.strip() == "4/4" for row in rows for cell in row.split("|")[2:-2]), rows


def test_accounting_cost_times_both_constructions_and_restores_dpmed_s(tmp_path, capsys):
    """Both constructions calibrate the same sigma (they build the same PMF), the row says so, and the harness puts
    dpmed's own one-step PLD back even though it swapped dp_accounting's in."""
    from dpmed.accounting import epsilon
    from dpmed.accounting._pld import subsampled_gaussian_pld

    out = tmp_path / "cost.json"
    assert _harness("accounting_cost").main(["--settings", "reference", "--targets", "8", "--repeats", "1",
                                             "--out", str(out)]) == 0
    (row,) = json.loads(out.read_text())["rows"]
    assert row["dpmed"]["noise_multiplier"] == row["dp_accounting"]["noise_multiplier"] > 0
    assert row["dpmed"]["epsilon"] == row["dp_accounting"]["epsilon"] <= 8
    assert "mismatch" not in row and epsilon.subsampled_gaussian_pld is subsampled_gaussian_pld
    assert "| reference | 8 |" in capsys.readouterr().out


def test_noise_cost_times_every_phase_for_each_thread_count_and_the_draws_after_the_launch(tmp_path, capsys):
    out = tmp_path / "noise.json"
    assert _harness("noise_cost").main(["--model", "small_cnn", "--size", "16x1", "--batch", "4", "--steps", "1",
                                        "--threads", "1,2", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["coordinates"] > 0 and set(result["draw_ms_by_threads"]) == {"1", "2"}
    assert all(ms > 0 for ms in result["draw_ms_by_threads"].values())
    assert list(result["phases_ms"]) == ["2 threads after the launch", "1 threads during the launch",
                                         "2 threads during the launch"]
    for phases in result["phases_ms"].values():
        assert set(phases) == {"launch", "wait", "busy", "copy_add"} and phases["launch"] > 0
        assert all(ms >= 0 for ms in phases.values())
    assert "drawing" in capsys.readouterr().out


def test_data_memory_reports_each_size_s_decoded_bytes_beside_its_peak(tmp_path):
    from PIL import Image

    root = tmp_path / "chest_xray"
    for split, n in (("train", 12), ("test", 4)):
        for cls in ("NORMAL", "PNEUMONIA"):
            for i in range(n):
                (root / split / cls).mkdir(parents=True, exist_ok=True)
                Image.new("L", (20, 20), 10 * i).save(root / split / cls / f"p{split}{cls}{i}_x.jpeg")
    out = subprocess.run([sys.executable, str(_BENCHMARKS / "data_memory.py"), "--data", str(root), "--sizes", "16",
                          "--channels", "1", "3"], check=True, capture_output=True, text=True).stdout
    rows = [line.split(" | ") for line in out.splitlines() if line.startswith("| 16 ")]
    assert [tuple(r[1:5]) for r in rows] == [("1", "none", "32 (32)", "0.00 GB"), ("3", "none", "32 (32)", "0.00 GB")]
    assert all(float(r[5].split()[0]) > 0 for r in rows)
    # with a cache folder, each load twice: the first writes the entry, the second reads it back
    out = subprocess.run([sys.executable, str(_BENCHMARKS / "data_memory.py"), "--data", str(root), "--sizes", "16",
                          "--channels", "1", "--cache-dir", str(tmp_path / "cache")],
                         check=True, capture_output=True, text=True).stdout
    rows = [line.split(" | ") for line in out.splitlines() if line.startswith("| 16 ")]
    assert [tuple(r[1:4]) for r in rows] == [("1", "write", "32 (32)"), ("1", "read", "32 (32)")]
    assert list((tmp_path / "cache").glob("*.npy"))


def test_overlap_memory_runs_the_pretrain_stage_up_to_training_and_gives_training_back(capsys):
    import dpmed.pretraining

    train = dpmed.pretraining.train
    assert _harness("overlap_memory").main(["--public", "40", "--private", "40", "--size", "20",
                                            "--private-size", "16"]) == 0
    out = capsys.readouterr().out
    assert "public set: 40 images, 0 MB decoded at 20 px, 0 MB at 16 px" in out and "peak allocated" in out
    assert dpmed.pretraining.train is train


@pytest.mark.parametrize("train", [0, 10])
def test_reconstruction_attack_refuses_a_file_that_is_not_pneumoniamnist_saying_why(tmp_path, monkeypatch, train):
    """The arm is PneumoniaMNIST's (q = 128 / 4708, T = 370): another file, or none, is told so, not asserted."""
    path = tmp_path / "other.npz"
    if train:
        images = {split: np.zeros((train, 8, 8), np.uint8) for split in ("train", "val", "test")}
        np.savez(path, **{f"{s}_images": x for s, x in images.items()},
                 **{f"{s}_labels": np.arange(train)[:, None] % 2 for s in images})
    monkeypatch.setattr(sys, "argv", ["reconstruction_attack.py", "--data", str(path)])
    words = "10 training images; the arm is PneumoniaMNIST's" if train else "other.npz: no such file"
    with pytest.raises(SystemExit, match=words):
        _harness("reconstruction_attack").main()


def test_reconstruction_attack_repeats_a_row_from_its_seed_and_draws_fresh_noise_without_one(tmp_path, monkeypatch):
    """Rows are repeated over seeds to give their spread: a seed must fix the whole repetition, the step noise
    included, and say so in the row; without one the noise stays fresh, as a DP run's is."""
    rng = np.random.default_rng(0)
    path = tmp_path / "pneumoniamnist.npz"
    sizes = {"train": 4708, "val": 60, "test": 60}
    np.savez(path, **{f"{s}_images": rng.integers(0, 256, (n, 8, 8), dtype=np.uint8) for s, n in sizes.items()},
             **{f"{s}_labels": np.arange(n)[:, None] % 2 for s, n in sizes.items()})

    def rows(*flags: str) -> list[dict]:
        out = tmp_path / "out.json"
        monkeypatch.setattr(sys, "argv", ["reconstruction_attack.py", "--data", str(path), "--structures", "sparse",
                                          "--batches", "1", "--batch", "8", "--bins", "32", "--out", str(out),
                                          *flags])
        _harness("reconstruction_attack").main()
        return [{k: v for k, v in r.items() if k != "seconds"} for r in json.loads(out.read_text())["rows"]]

    def row(*seed: str) -> dict:
        (only,) = rows("--epsilons", "1e6", "--no-references", *seed)
        return only

    seeded = row("--seed", "3")
    assert seeded["seed"] == 3 and seeded["noise"] == "from seed 3"
    assert row("--seed", "3") == seeded
    assert row("--seed", "4")["mean_best_ncc"] != seeded["mean_best_ncc"]
    fresh = row(), row()
    assert fresh[0]["seed"] == 0 and fresh[0]["noise"] == "fresh (OS entropy)"
    assert fresh[0]["mean_best_ncc"] != fresh[1]["mean_best_ncc"]
    references = rows("--epsilons", "", "--seed", "3")
    assert [r["arm"] for r in references] == ["no privacy (C = inf)", "clipping only (C = 1)"]


@pytest.mark.parametrize("flags, words", [
    (["--batch", "120"], r"^--batch 120: pass 1 to 119 \(the threshold compares a public image with --batch others "
                         r"of the 120 public images\)$"),
    (["--batch", "8", "--bins", "121"],
     r"^--bins 121: pass 2 to 120 \(equal-mass bins of the brightness of the 120 public images\)$"),
])
def test_reconstruction_attack_refuses_a_batch_or_bins_the_public_images_cannot_calibrate(tmp_path, monkeypatch,
                                                                                           flags, words):
    """The public images calibrate the threshold (a batch of others per null draw) and the bins (equal-mass): a
    --batch or --bins beyond them is the user's to change, told in a line naming the flag, not a traceback."""
    path = tmp_path / "pneumoniamnist.npz"
    sizes = {"train": 4708, "val": 60, "test": 60}
    np.savez(path, **{f"{s}_images": np.zeros((n, 8, 8), np.uint8) for s, n in sizes.items()},
             **{f"{s}_labels": np.arange(n)[:, None] % 2 for s, n in sizes.items()})
    monkeypatch.setattr(sys, "argv", ["reconstruction_attack.py", "--data", str(path), *flags])
    with pytest.raises(SystemExit, match=words):
        _harness("reconstruction_attack").main()


def _kermany_folder(root: Path, *, train: int, test: int) -> Path:
    """A Kermany-like chest_xray folder: ``train`` and ``test`` patients of two films each, half of them NORMAL."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for split, ids in {"train": range(train), "test": range(train, train + test)}.items():
        for i in ids:
            for j in (1, 2):
                name = f"NORMAL/IM-{i:04d}-{j:04d}" if i % 2 else f"PNEUMONIA/person{i}_bacteria_{j}"
                (root / split / name).parent.mkdir(parents=True, exist_ok=True)
                Image.fromarray(rng.integers(0, 256, (20, 20), dtype=np.uint8)).save(root / split / f"{name}.jpeg")
    return root


def test_reconstruction_attack_on_kermany_attacks_test_images_with_the_studys_patient_arm(tmp_path, monkeypatch):
    """--kermany takes 004_high_budget_kermany.yaml's arm (the patient as the unit, q = 128 / N over the training
    patients, T = 10 round(N / 128)) and attacks held-out test images, patient-clipped, with the validation images
    as public, as the study does: not PneumoniaMNIST's image-level arm on training images."""
    root = _kermany_folder(tmp_path / "chest_xray", train=200, test=10)

    def record(*flags: str) -> dict:
        out = tmp_path / "out.json"
        monkeypatch.setattr(sys, "argv", ["reconstruction_attack.py", "--kermany", str(root), "--structures", "sparse",
                                          "--epsilons", "1e9", "--no-references", "--batches", "1", "--seed", "0",
                                          "--out", str(out), *flags])
        _harness("reconstruction_attack").main()
        return json.loads(out.read_text())

    given = record("--batch", "4", "--bins", "8")
    arm, (row,) = given["arm"], given["rows"]
    n_val = given["arm"]["public_images"]
    assert arm["unit"] == "patient" and arm["n_train"] + n_val // 2 == 200      # the patients, not their 400 films
    assert arm["expected_batch_size"] == 128 and arm["steps"] == 10 * round(arm["n_train"] / 128)
    assert arm["delta"] == 1e-5 and arm["max_grad_norm"] == 1.0
    assert (arm["attacked_images"], arm["attacked_patients"]) == (20, 10)
    assert row["grouped"] and (row["batch_size"], row["n_bins"], row["n_trials"]) == (4, 8, 4)
    # without --batch and --bins, the study's: 128 test patients' worth of images (all 20 here), 4 bins an image as
    # far as the validation images reach
    (row,) = record()["rows"]
    assert (row["batch_size"], row["n_bins"]) == (20, min(80, n_val))


@pytest.mark.parametrize("train, test, words", [
    (100, 4, r"\d+ training patients, fewer than the arm's expected batch of 128 \(004_high_budget_kermany.yaml\); "
             r"pass the whole Kermany chest_xray folder"),
    (140, 100, r"(\d+) validation images, too few to calibrate the attack on 128 test patients' worth of test images; "
               r"pass the whole Kermany chest_xray folder, or a --batch below \1"),
])
def test_reconstruction_attack_on_too_small_a_kermany_folder_says_so(tmp_path, monkeypatch, train, test, words):
    """The arm's expected batch is 128 training patients, and the attack's batch 128 test patients' worth of images,
    which the validation images must outnumber: a folder too small for either (a sample of Kermany, say) is the
    user's to change, told in a line naming the folder and the count, not a traceback naming study keys."""
    root = _kermany_folder(tmp_path / "chest_xray", train=train, test=test)
    monkeypatch.setattr(sys, "argv", ["reconstruction_attack.py", "--kermany", str(root)])
    with pytest.raises(SystemExit, match=rf"^--kermany {re.escape(str(root))}: {words}$"):
        _harness("reconstruction_attack").main()


def test_bootstrap_unit_says_which_folder_holds_no_runs_and_goes_on(tmp_path, capsys):
    harness = runpy.run_path(str(_BENCHMARKS / "bootstrap_unit.py"))
    assert harness["main"]([str(tmp_path / "not-a-study"), "--resamples", "10"]) == 0
    assert f"{tmp_path / 'not-a-study'}: no binary run with predictions" in capsys.readouterr().err


@pytest.mark.parametrize(("name", "argv", "words"), [
    ("data_loading", ["--data", "{tmp}/nope"],
     r"^--data {tmp}/nope: no such folder; pass the Kermany chest_xray folder \(train/ and test/ in it\)$"),
    ("film_rendering", ["{tmp}/study", "--medmnist", "{tmp}/nope.npz"],
     r"^--medmnist {tmp}/nope.npz: no such file; pass PneumoniaMNIST's pneumoniamnist.npz$"),
    ("film_rendering", ["{tmp}/nope", "--medmnist", "{tmp}/m.npz"],
     r"^{tmp}/nope holds no study.yaml; pass the folder `dpmed run` wrote \(results/<study>\)$"),
    ("film_rendering", ["--medmnist", "{tmp}/m.npz", "--films", "{tmp}/nope", "--restore", "{tmp}/out"],
     r"^--films {tmp}/nope: no such folder; pass the Kermany chest_xray folder \(train/ and test/ in it\)$"),
    ("film_rendering", ["{tmp}/study", "--medmnist", "{tmp}/m.npz", "--films", "{tmp}/nope"],   # before the runs
     r"^--films {tmp}/nope: no such folder; pass the Kermany chest_xray folder \(train/ and test/ in it\)$"),
    ("film_rendering", ["--medmnist", "{tmp}/m.npz", "--films", "{tmp}", "--restore", "{tmp}/out"],
     r"^--films {tmp}: no films in {tmp}/train/<class>/; pass the Kermany chest_xray folder \(train/ and test/ in "
     r"it\)$"),
    ("reconstruction_attack", ["--kermany", "{tmp}/nope"],
     r"^--kermany {tmp}/nope: no such folder; pass the Kermany chest_xray folder \(train/ and test/ in it\)$"),
    ("fixed_features", ["--data", "{tmp}/nope.npz"],
     r"^--data {tmp}/nope.npz: no such file; pass PneumoniaMNIST's pneumoniamnist.npz$"),
    ("shifted_inputs", ["{tmp}/nope"],
     r"^{tmp}/nope holds no study.yaml; pass the folder `dpmed run` wrote \(results/<study>\)$"),
])
def test_a_harness_given_a_wrong_path_ends_with_one_line_naming_it(name, argv, words, tmp_path, monkeypatch):
    """A mistyped path stopped these harnesses with a traceback (dpmed's DataError naming a study's data.path, or
    numpy's FileNotFoundError): one line names the path and what to pass."""
    np.savez(tmp_path / "m.npz", test_images=np.zeros((2, 28, 28), np.uint8), test_labels=np.zeros((2, 1)))
    argv = [a.format(tmp=tmp_path) for a in argv]
    monkeypatch.setattr(sys, "argv", [f"{name}.py", *argv])       # these two mains read sys.argv
    main = _harness(name).main
    with pytest.raises(SystemExit, match=words.format(tmp=re.escape(str(tmp_path)))):
        main() if name in ("data_loading", "reconstruction_attack") else main(argv)


def test_interval_coverage_of_three_seeds_matches_the_closed_forms(capsys):
    """The range of k normal seeds holds their mean with probability 1 - 2 / 2^k (0.75 at 3: every seed on one side
    has chance 2^-k per side), the t interval with k - 1 degrees of freedom with 0.95. 10,000 seeded repetitions:
    a standard error of 0.0043, so 0.02 is over four of them."""
    harness = runpy.run_path(str(_BENCHMARKS / "interval_coverage.py"))
    assert harness["main"](["--only", "seeds"]) == 0
    out = capsys.readouterr().out.splitlines()
    rows = [[c.strip() for c in line.split("|")] for line in out if "| seeds |" in line]
    coverage = {(int(r[2]), r[4]): float(r[6]) for r in rows}
    for k in (3, 5, 10):
        assert coverage[(k, "range of the seeds (min, max)")] == pytest.approx(1 - 2 / 2 ** k, abs=0.02)
        assert coverage[(k, "t interval, n - 1 df")] == pytest.approx(0.95, abs=0.02)


@pytest.mark.parametrize("dp_sgd", [False, True], ids=["non-private", "DP-SGD"])
def test_fixed_features_times_both_ways_and_the_features_only_once(dp_sgd):
    harness = _harness("fixed_features")
    data = make_phantom(n_images=200, image_size=16, seed=0).train     # over 128: q = 128 / N
    per_step, features = harness.time_run(data, dp_sgd=dp_sgd, once=False, steps=1)
    assert per_step > 0 and features == 0                    # per batch: as before, no features computed ahead
    per_step, features = harness.time_run(data, dp_sgd=dp_sgd, once=True, steps=1)
    assert per_step > 0 and features > 0


def test_model_build_times_each_way_and_puts_the_models_own_transform_back(capsys):
    """A row per way at each size (the harness stops if the three builds differ in a bit), and afterwards models are
    built through dpmed's transform again, not the kymatio constructor the "rebuilt" way swapped in."""
    from dpmed.models import scatternet

    own = scatternet._scattering
    _harness("model_build").main(["--sizes", "8", "--repeats", "1"])
    out = capsys.readouterr().out
    assert all(f"| 8 | {way} |" in out for way in ("rebuilt", "first", "reused"))
    assert scatternet._scattering is own


def test_at_scale_writes_the_same_sets_for_a_seed_and_studies_that_read_them(tmp_path, capsys):
    """The reproduce block reads the harness's study files, which the repository does not hold, so the check of
    every study in RESULTS.md skips them: here they are read as `dpmed run` reads them, at a small size."""
    from dpmed.config import load_study
    from dpmed.data.registry import read_dataset

    at_scale = _harness("at_scale")
    flags = ["--train", "40", "--val", "6", "--test", "10", "--csv-images", "40", "--csv-size", "16"]
    for out in ("a", "b"):
        assert at_scale.main(["--out", str(tmp_path / out), *flags]) == 0
    assert "dpmed plan" in capsys.readouterr().out
    written = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert len(written) == 1 + 1 + 40 + 2                                     # npz, CSV, PNGs, studies
    assert all((tmp_path / "a" / p).read_bytes() == (tmp_path / "b" / p).read_bytes() for p in written)
    small = read_dataset(load_study(tmp_path / "a" / "study28.yaml").data.to_request())
    assert [len(s.images) for s in (small.train, small.val, small.test)] == [40, 6, 10]
    assert small.train.images.shape[1:] == (1, 28, 28)
    table = read_dataset(load_study(tmp_path / "a" / "study64.yaml").data.to_request())
    assert sum(len(s.images) for s in (table.train, table.val, table.test)) == 40
    assert table.train.images.shape[1:] == (1, 16, 16)
    ids = [i for s in (table.train, table.val, table.test) for i in s.patient_ids]
    assert len(set(ids)) < len(ids)                                 # some patients have two images, kept together
    assert not {i for i in table.train.patient_ids} & {i for s in (table.val, table.test) for i in s.patient_ids}


def test_long_run_samples_the_run_at_each_progress_line_and_finds_its_checkpoint_gone(tmp_path):
    result = _harness("long_run").measure(tmp_path, steps=12, batch=8, images=60, size=16, model="small_cnn",
                                          accountant_steps=[10])
    assert result["status"] == 0
    rows = result["samples"]
    steps = [r["step"] for r in rows]        # the first step, then each tenth but the last (`loop._Progress`)
    assert steps[0] == 1 and steps == sorted(set(steps)) and steps[-1] < 12 and len(steps) >= 9
    assert result["progress_lines"] == len(rows) and result["log_lines"] > len(rows)
    assert all(r["rss_mib"] > 0 and r["gc_objects"] > 0 and r["checkpoint_files"] <= 1 for r in rows)
    assert any(r["checkpoint_bytes"] > 0 for r in rows)
    assert not any("checkpoint" in name for name in result["files_left"])       # deleted once the run finished
    [accountant] = result["accountant"]
    assert accountant["steps"] == 10 and accountant["sigma"] > 0 and accountant["ledger_entries"] == 1


def test_dataset_size_reads_each_set_and_its_search_finds_what_comparing_every_pair_finds(tmp_path, capsys):
    """The harness stops (an AssertionError) where the search and the comparison of every pair disagree within the
    threshold; here it reads a tiny set it writes and prints its row. Nothing is timed."""
    harness = _harness("dataset_size")
    assert harness.main(["--out", str(tmp_path), "--sizes", "60", "--px", "16", "--every-pair-up-to", "60",
                         "--data", str(tmp_path / "absent")]) == 0
    out = capsys.readouterr().out
    assert re.search(r"N = 60: read .* s \(peak \d+ MB\); hashes .*; 60 against 60: search .* s, .*% of hash pairs "
                     r"compared; every pair .* s, \d+ within 30 bits either way", out), out
    assert (tmp_path / "n60" / "labels.csv").exists() and "PneumoniaMNIST" not in out
