"""Attacks on what a study releases (METHODS.md s.2b): shared noise, noise regenerable from the seed, leaked counts.

The adversary holds every file under ``<out>/<study>/`` except ``private/`` (run.json, study.yaml, results.csv,
report.html, the released model ``runs/<id>/model.pt``, ...), the public architecture, and, for local DP, the
released (perturbed) training images. It does not hold the clean training images; the tests do, to score it.
Each test runs one attack and asserts that it fails. Where runs share noise, where the noise is a function of the
published seed, or where checkpoints or realised batch sizes are released, the attack succeeds and its test fails
with what it recovered.

Tiny studies on the embedded phantom (100 images, 16 px, small_cnn, seed 0) keep each attack to seconds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import logging
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

import dpmed.run
import dpmed.study
from dpmed import released_size
from dpmed.config import load_study, run_ids
from dpmed.study import load_study_data, run_study

DATA = {"source": "phantom", "n_images": 100, "image_size": 16}
EXACT = 1e-6                 # a pixel (or sum) "recovered exactly" is within this of the truth
REPRODUCIBLE = "not dp against anyone who knows the seed"   # compared in lower case


def _randomness():
    """dpmed.randomness (the fixed library's derivation of privacy randomness), or None where it does not exist."""
    try:
        return importlib.import_module("dpmed.randomness")
    except ModuleNotFoundError:
        return None


# --- tiny studies ------------------------------------------------------------------------------------------------

def _study(folder: Path, name: str, arms: list[dict], *, reproducible: bool = False):
    """A one-seed phantom study; plain SGD without momentum, so one DP-SGD step is theta0 - lr * noisy mean."""
    raw = {"name": name, "seeds": [0], "data": DATA, "model": {"name": "small_cnn"},
           "training": {"epochs": 1, "batch_size": 16, "optimizer": "sgd", "momentum": 0.0, "learning_rate": 0.5,
                        "device": "cpu"},
           "evaluation": {"bootstrap_resamples": 10, "fairness": None}, "arms": arms}
    if reproducible:
        raw["privacy_randomness"] = "reproducible"
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return load_study(path)


def _dp_arm(name: str, sigmas: list[float], batch_size: int | None = None) -> dict:
    """DP-SGD at given sigmas over one epoch; batch_size = N_train gives q = 1 and T = 1 step every image joins.
    The image is the unit (where the library also offers patients), so N, q and the bound N C count images."""
    arm = {"name": name, "mechanism": "dp_sgd", "noise_multiplier": sigmas}
    if batch_size is not None:
        arm["batch_size"] = batch_size
    arm["privacy_unit"] = "image"
    return arm


class _Spy:
    """What the run path hands to model construction and to training, per run: initial weights, training images."""

    def __init__(self) -> None:
        self.inits, self.params, self.images, self.labels = [], [], {}, []

    def init_of(self, run_id: str) -> tuple[dict, list[str]]:
        assert len(self.inits) == len(self.labels), "expected one model construction per training call"
        i = self.labels.index(run_id)
        return self.inits[i], self.params[i]


@contextlib.contextmanager
def _spying(run_ids: list[str]):
    """THE spy (one place to change): the initial weights theta0, which the adversary could equally rebuild from the
    public seed, and the images training receives, i.e. the released local-DP images."""
    spy, real_build, real_train = _Spy(), dpmed.run.build_model, dpmed.run.train

    def build(*args, **kwargs):
        model = real_build(*args, **kwargs)
        spy.inits.append({k: v.detach().clone() for k, v in model.state_dict().items()})
        spy.params.append([n for n, p in model.named_parameters() if p.requires_grad])
        return model

    def train(model, data, *args, **kwargs):
        label = kwargs.get("label") or run_ids[len(spy.labels)]
        spy.labels.append(label)
        spy.images[label] = np.array(data.images, copy=True)
        return real_train(model, data, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(dpmed.run, "build_model", build)
        mp.setattr(dpmed.run, "train", train)
        yield spy


def _run(folder: Path, study):
    """Run ``study``, its released training-set count pinned to the exact count (noise 0): these attacks aim at the
    training's noise, and q = 1 (batch_size = N) needs a count no larger than N."""
    with _spying(run_ids(study)) as spy, pytest.MonkeyPatch.context() as patch:
        patch.setattr(released_size, "discrete_laplace", lambda scale, randbelow=None: 0)
        result = run_study(study, out=folder / "out", progress=False)
    assert not result.failures, [f.error for f in result.failures]
    return result.out_dir, spy


@pytest.fixture(scope="module")
def n_train(tmp_path_factory) -> int:
    study = _study(tmp_path_factory.mktemp("n"), "n", [{"name": "none", "mechanism": "none"}])
    return len(load_study_data(study).train)


@pytest.fixture(scope="module")
def dp_sweep(tmp_path_factory, n_train):
    """sigma in {1, 4} at q = 1, T = 1 (one sweep, one seed); plus a Poisson arm at q = 16/N over one epoch."""
    folder = tmp_path_factory.mktemp("dp")
    study = _study(folder, "dp", [_dp_arm("dp", [1.0, 4.0], n_train), _dp_arm("poisson", [1.0])])
    return _run(folder, study)


@pytest.fixture(scope="module")
def laplace_sweep(tmp_path_factory):
    """pixel_laplace at b in {0.5, 1} (one sweep, one seed), and the clean training images to score attacks."""
    folder = tmp_path_factory.mktemp("lap")
    study = _study(folder, "lap", [{"name": "lap", "mechanism": "pixel_laplace", "scale": [0.5, 1.0]}])
    return (*_run(folder, study), _clean_train_images(study))


def _clean_train_images(study) -> np.ndarray:
    ds = load_study_data(study)
    assert ds.normalization is None, "the attacks compare in [0, 1]: keep the phantom unnormalised"
    return ds.train.images.astype(np.float64)


# --- what the adversary reads ---------------------------------------------------------------------------------

def _releasable(study_dir: Path) -> list[Path]:
    return sorted(p for p in study_dir.rglob("*") if p.is_file() and "private" not in p.relative_to(study_dir).parts)


def _published_runs(study_dir: Path, arm: str) -> list[dict]:
    """The runs of ``arm`` as study.yaml lists them (run id, seed, planned noise scales), in study order."""
    runs = yaml.safe_load((study_dir / "study.yaml").read_text(encoding="utf-8"))["runs"]
    return [r for r in runs if r["arm"] == arm]


def _record(study_dir: Path, run_id: str) -> dict:
    return json.loads((study_dir / "runs" / run_id / "run.json").read_text(encoding="utf-8"))


def _released_weights(study_dir: Path, run_id: str) -> dict:
    """The final model as released: runs/<id>/model.pt, else any other .pt the adversary holds (a checkpoint's
    ``model``)."""
    run_dir = study_dir / "runs" / run_id
    files = sorted((p for p in _releasable(study_dir) if run_dir in p.parents and p.suffix == ".pt"),
                   key=lambda p: p.name != "model.pt")
    for path in files:
        obj = torch.load(path, map_location="cpu", weights_only=True)
        if isinstance(obj, dict) and isinstance(obj.get("model"), dict):
            obj = obj["model"]
        if isinstance(obj, dict) and obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
            return obj
    raise AssertionError(f"{run_id}: no released model among {files}")


# --- attack helpers ----------------------------------------------------------------------------------------------

def _dp_update(study_dir: Path, spy: _Spy, run_id: str) -> dict:
    """u = (theta0 - theta1) / c with c = lr / (q N): the clipped sum S plus sigma C xi, from the released model
    and the published settings (run.json); flattened in model.parameters() order."""
    rec = _record(study_dir, run_id)
    card, spec = rec["privacy"], rec["plan"]
    q, lr = card["sample_rate"], spec["training"]["learning_rate"]
    n = spec["privacy"]["expected_batch_size"] / q
    assert card["steps"] == 1 and q == 1 and spec["training"]["optimizer"] == "sgd"
    assert spec["training"]["momentum"] == 0 and spec["training"]["weight_decay"] == 0
    theta0, names = spy.init_of(run_id)
    final = _released_weights(study_dir, run_id)
    c = lr / (q * n)
    u = np.concatenate([((theta0[k].double() - final[k].double()) / c).numpy().ravel() for k in names])
    return {"u": u, "sigma": card["noise_multiplier"], "C": card["max_grad_norm"], "N": n, "seed": rec["seed"],
            "run_id": rec["run_id"], "shapes": [tuple(theta0[k].shape) for k in names]}


def _check_update_is_noise(run: dict) -> None:
    """The adversary's view is right (theta0, c, the released model): ||u|| = ||S + sigma C xi|| is within N C of
    sigma C sqrt(P). Guards against an attack that 'fails' only because it read the wrong files."""
    expected = run["sigma"] * run["C"] * math.sqrt(run["u"].size)
    assert abs(np.linalg.norm(run["u"]) - expected) <= run["N"] * run["C"] + 0.05 * expected, run["run_id"]


def _dp_noise_guesses(seed: int, run_id: str, shapes: list[tuple], scale: float):
    """Every derivation of a run's step-1 DP-SGD noise (sigma C xi, flattened) that the adversary knows."""
    g = torch.Generator().manual_seed(seed + 1_000_003)      # before the fix: training/loop.py
    yield "torch seed+1_000_003", np.concatenate(
        [torch.normal(0.0, scale, size=s, generator=g).double().numpy().ravel() for s in shapes])
    rnd = _randomness()
    if rnd is not None:                                         # the fixed library's reproducible derivation:
        from randomgen import AESCounter                        # blocks of unit noise, each keyed by two raw
        from dpmed.training.noise import BLOCK                  # words of the run's noise stream

        rng = rnd.PrivacyRandomness.reproducible(seed=seed, run_id=run_id).stream("noise")
        size = sum(math.prod(s) for s in shapes)
        blocks = []
        for start in range(0, size, BLOCK):
            hi, lo = (int(w) for w in rng.bit_generator.random_raw(2))
            blocks.append(np.random.Generator(AESCounter(key=(hi << 64) | lo)).standard_normal(
                min(BLOCK, size - start)))
        yield "PrivacyRandomness.reproducible", np.concatenate(blocks) * scale


def _pixel_noise_guesses(seed: int, run_id: str, shape: tuple, b: float):
    """Every derivation of a pixel_laplace run's noise on the training-image array that the adversary knows."""
    yield "numpy default_rng([seed, i])", np.stack(   # before the fix: mechanisms/pixel.py, one stream per image
        [np.random.default_rng([seed, i]).laplace(0.0, b, size=shape[1:]).astype(np.float32) for i in range(shape[0])])
    rnd = _randomness()
    if rnd is not None:
        rng = rnd.PrivacyRandomness.reproducible(seed=seed, run_id=run_id).stream("local_dp")
        yield "PrivacyRandomness.reproducible", rng.laplace(0.0, b, size=shape)


def _exact_fraction(x_hat: np.ndarray, clean: np.ndarray, unclipped: np.ndarray) -> float:
    """Share of unclipped pixels the adversary recovered exactly."""
    hit = (np.abs(x_hat - clean) < EXACT) & unclipped
    return float(hit.sum() / max(1, unclipped.sum()))


def _regenerate_pixels(study_dir: Path, spy: _Spy, clean: np.ndarray, run: dict) -> dict[str, float]:
    """Read seed, run id and b from the released files; subtract each guessed noise from the released images."""
    rec = _record(study_dir, run["run_id"])
    seed, run_id, b = rec["seed"], rec["run_id"], rec["privacy"]["scale_b"]
    assert (seed, run_id, b) == (run["seed"], run["run_id"], run["privacy"]["scale"])
    y = spy.images[run_id].astype(np.float64)
    unclipped = (y > 0) & (y < 1)
    return {name: _exact_fraction(y - noise, clean, unclipped)
            for name, noise in _pixel_noise_guesses(seed, run_id, y.shape, b)}


def _regenerate_dp_sum(run: dict) -> dict[str, float]:
    """S_hat = u - (guessed sigma C xi) for each derivation; its norm (a true clipped sum has norm <= N C)."""
    return {name: float(np.linalg.norm(run["u"] - noise))
            for name, noise in _dp_noise_guesses(run["seed"], run["run_id"], run["shapes"], run["sigma"] * run["C"])}


# --- the attacks ------------------------------------------------------------------------------------------------

def test_differencing_two_dp_sgd_runs_of_one_sweep_cancels_no_noise(dp_sweep):
    """Adversary: both released models of the sweep sigma in {1, 4} (q = 1, T = 1, plain SGD), run.json's settings,
    and theta0 (derived from the public seed; read here by the spy). It forms u_k = (theta0 - theta_k) / c =
    S + sigma_k C xi_k and S_hat = (sigma2 u1 - sigma1 u2) / (sigma2 - sigma1). If xi_1 = xi_2 (shared noise),
    S_hat is the noise-free clipped gradient sum, norm <= N C: both runs' noise is cancelled. With independent
    noise S_hat is dominated by noise of norm about C sqrt(P (sigma1^2 + sigma2^2)) / (sigma2 - sigma1) >> 2 N C."""
    study_dir, spy = dp_sweep
    _assert_differencing_fails(*(_dp_update(study_dir, spy, r["run_id"]) for r in _published_runs(study_dir, "dp")))


def _assert_differencing_fails(r1: dict, r2: dict) -> None:
    """The attack of the test above on two DP-SGD updates (`_dp_update`) at different sigmas: it must not recover a
    clipped sum (norm <= N C), which it does exactly where the two share their batch and their xi."""
    for run in (r1, r2):
        _check_update_is_noise(run)
    s1, s2 = r1["sigma"], r2["sigma"]
    assert s1 != s2
    s_hat = (s2 * r1["u"] - s1 * r2["u"]) / (s2 - s1)
    norm, bound = float(np.linalg.norm(s_hat)), r1["N"] * r1["C"]
    assert norm > 2 * bound, (f"differencing sigma {s1:g} and {s2:g} recovered S_hat with ||S_hat|| = {norm:.4g} "
                              f"<= 2 N C = {2 * bound:g} (N C = {bound:g}; P = {s_hat.size}): the runs share noise")


def test_differencing_two_pixel_laplace_scales_returns_no_clean_pixel(laplace_sweep):
    """Adversary: the two released training-image sets of the sweep b in {0.5, 1} (local DP releases them) and the
    scales from study.yaml. It forms 2 y1 - y2 = x + 2 n1 - n2: where neither release was clipped and the noise is
    shared (n2 = 2 n1), that is the clean pixel x exactly. Success: more than 1 % of all pixels recovered exactly."""
    study_dir, spy, clean = laplace_sweep
    runs = _published_runs(study_dir, "lap")
    assert [r["privacy"]["scale"] for r in runs] == [0.5, 1.0]
    y1, y2 = (spy.images[r["run_id"]].astype(np.float64) for r in runs)
    unclipped = (y1 > 0) & (y1 < 1) & (y2 > 0) & (y2 < 1)
    hit = (np.abs(2 * y1 - y2 - clean) < EXACT) & unclipped
    frac = float(hit.mean())
    assert frac < 0.01, (f"2 y1 - y2 recovered {frac:.1%} of all clean pixels exactly ({hit.sum()} of "
                         f"{unclipped.sum()} unclipped in both): the two scales share their noise")


def test_noise_cannot_be_regenerated_from_the_published_seed(dp_sweep, laplace_sweep):
    """Adversary: seed and run id parsed from run.json / study.yaml, the released images (pixel_laplace, b = 1) and
    model (DP-SGD sigma = 1, q = 1, T = 1). It regenerates the noise with every derivation it knows (before the fix:
    numpy default_rng([seed, i]) per image, torch seeded with seed + 1_000_003; after: PrivacyRandomness.reproducible)
    and subtracts it. Success: > 1 % of unclipped pixels recovered exactly, or an S_hat with norm <= 2 N C."""
    lap_dir, lap_spy, clean = laplace_sweep
    lap_run = next(r for r in _published_runs(lap_dir, "lap") if r["privacy"]["scale"] == 1.0)
    pixels = _regenerate_pixels(lap_dir, lap_spy, clean, lap_run)
    dp_dir, dp_spy = dp_sweep
    dp_run = _dp_update(dp_dir, dp_spy, _published_runs(dp_dir, "dp")[0]["run_id"])
    _check_update_is_noise(dp_run)
    sums = _regenerate_dp_sum(dp_run)
    bound = dp_run["N"] * dp_run["C"]
    found = ({f"pixels: {k}": f"{v:.1%} of unclipped pixels exact" for k, v in pixels.items() if v >= 0.01}
             | {f"dp_sgd: {k}": f"||S_hat|| = {v:.4g} <= 2 N C = {2 * bound:g}" for k, v in sums.items()
                if v <= 2 * bound})
    assert not found, f"the noise was regenerated from the published seed: {found} (pixels: {pixels}; sums: {sums})"


def test_reproducible_mode_is_regenerable_and_says_so(tmp_path, n_train):
    """Positive control of the regeneration attack: with ``privacy_randomness: reproducible`` the adversary's
    derivation PrivacyRandomness.reproducible(seed, run_id) must recover the clean pixels and a clipped sum of norm
    <= N C (so the attack above is a real one), and every such run's privacy card must say it is not DP against
    anyone who knows the seed."""
    if _randomness() is None:   # the control must run: skipping it would leave the attack above unchecked
        pytest.fail("dpmed.randomness is not importable: this library has no reproducible mode to control against")
    study = _study(tmp_path, "repro", [_dp_arm("dp", [1.0], n_train),
                                       {"name": "lap", "mechanism": "pixel_laplace", "scale": [1.0]}],
                   reproducible=True)
    study_dir, spy = _run(tmp_path, study)
    for path in (study_dir / "runs").glob("*/run.json"):
        assert REPRODUCIBLE in json.loads(path.read_text())["privacy"]["statement"].lower(), path
    pixels = _regenerate_pixels(study_dir, spy, _clean_train_images(study), _published_runs(study_dir, "lap")[0])
    assert pixels["PrivacyRandomness.reproducible"] > 0.99, pixels
    dp_run = _dp_update(study_dir, spy, _published_runs(study_dir, "dp")[0]["run_id"])
    sums = _regenerate_dp_sum(dp_run)
    assert sums["PrivacyRandomness.reproducible"] <= dp_run["N"] * dp_run["C"] * (1 + 1e-3), sums


def test_released_pt_files_hold_model_weights_only(dp_sweep, laplace_sweep):
    """Adversary: every .pt file outside private/. It loads each and looks for anything beyond the model: an
    optimiser, a generator state (which regenerates all later noise and batches), a ledger or history. Success: any
    .pt whose keys are not exactly the model's parameter and buffer names; every run must release model.pt."""
    for study_dir, spy in (dp_sweep, laplace_sweep[:2]):
        keys = set(spy.inits[0])
        for path in (p for p in _releasable(study_dir) if p.suffix == ".pt"):
            obj = torch.load(path, map_location="cpu", weights_only=True)
            assert isinstance(obj, dict) and set(obj) == keys, (
                f"{path.relative_to(study_dir)} holds {sorted(obj)[:8] if isinstance(obj, dict) else type(obj)}, "
                f"not the model's state dict")
            assert all(isinstance(v, torch.Tensor) for v in obj.values()), path
        for run_id in spy.labels:
            assert (study_dir / "runs" / run_id / "model.pt").is_file(), f"{run_id}: no released model.pt"


_REALISED = re.compile(r"(batch.?size|sampled)", re.I)
_PUBLIC = {"batch_size", "physical_batch_size", "expected_batch_size", "reference_batch_size"}  # settings, not counts
_TRAIN_STAT = re.compile(r"(loss|acc|batch|sampled)", re.I)


def _count_leaks(where: str, node, found: list[str]) -> None:
    """Walk a JSON/YAML document for realised batch sizes; where a list of windows carries them, rebuild the exact
    number of sampled examples (mean size x window length, the windows ending at their "step")."""
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(key, str) and _REALISED.search(key) and key not in _PUBLIC and not isinstance(value, (
                    dict, list)):
                found.append(f"{where}: {key} = {value}")
            _count_leaks(where, value, found)
    elif isinstance(node, list):
        windows = [e for e in node if isinstance(e, dict) and "mean_batch_size" in e and "step" in e]
        if windows:
            ends = [0] + [w["step"] for w in windows]
            total = sum(w["mean_batch_size"] * (b - a) for w, a, b in zip(windows, ends, ends[1:]))
            found.append(f"{where}: {len(windows)} window(s) -> exactly {round(total)} sampled examples")
        for value in node:
            _count_leaks(where, value, found)


def test_no_realised_batch_sizes_or_training_statistics_are_released(dp_sweep, laplace_sweep):
    """Adversary: every JSON, YAML, CSV and HTML file outside private/. It scans them for realised (Poisson) batch
    sizes per window and, where found, multiplies mean by window length to get the exact number of sampled examples,
    which depends on who is in the training set and is outside the accountant. Success: any realised count, or a
    DP-SGD run.json history with loss, accuracy or batch-size statistics of the training set."""
    found: list[str] = []
    for study_dir in (dp_sweep[0], laplace_sweep[0]):
        for path in _releasable(study_dir):
            text = path.read_text(encoding="utf-8", errors="replace") if path.suffix in (
                ".json", ".yaml", ".yml", ".csv", ".html") else None
            where = str(path.relative_to(study_dir))
            if path.suffix == ".json":
                _count_leaks(where, json.loads(text), found)
            elif path.suffix in (".yaml", ".yml"):
                _count_leaks(where, yaml.safe_load(text), found)
            elif path.suffix == ".csv":
                header = text.splitlines()[0].split(",") if text else []
                found.extend(f"{where}: column {c}" for c in header if _REALISED.search(c) and c not in _PUBLIC)
            elif path.suffix == ".html":
                found.extend(f"{where}: '{m}'" for m in re.findall(r"mean[_ ]batch[_ ]size|realis[ez]d batch", text,
                                                                    re.I))
            if path.name == "run.json":
                record = json.loads(text)
                if record.get("mechanism") == "dp_sgd":
                    found.extend(f"{where} history: {k}" for entry in record.get("history") or []
                                 for k in (entry if isinstance(entry, dict) else ()) if _TRAIN_STAT.search(k))
    assert not found, "training-set counts or statistics released:\n" + "\n".join(sorted(set(found)))


def test_training_returns_nothing_about_membership_but_the_model(tmp_path):
    """Neighbouring training sets (one patient more) trained with the same DP-SGD plan and the same privacy
    randomness: everything training hands back besides the model (ledger, statistics) must be identical, so nothing
    it returns can tell whether the patient was there (a realised batch size or training loss would)."""
    from dpmed.config import TrainingConfig
    from dpmed.data.synthetic import make_phantom
    from dpmed.models import build_model
    from dpmed.randomness import PrivacyRandomness
    from dpmed.training import DpSgdPlan, train

    ds = make_phantom(n_images=120, image_size=16, seed=0)
    with_patient = ds.train
    first = with_patient.patient_ids[0]
    without = with_patient.subset(np.flatnonzero(with_patient.patient_ids != first))
    plan = DpSgdPlan(noise_multiplier=1.0, max_grad_norm=1.0, sample_rate=0.25, steps=8,
                     expected_batch_size=0.25 * len(set(with_patient.patient_ids.tolist())), unit="patient")
    cfg = TrainingConfig(epochs=1, batch_size=16)
    results = []
    for data in (with_patient, without):
        torch.manual_seed(0)
        model = build_model("small_cnn", in_channels=1, num_outputs=ds.task.num_outputs, image_size=16)
        result = train(model, data, ds.task, cfg, seed=0, dp=plan, progress=False,
                       randomness=PrivacyRandomness.reproducible(seed=0, run_id="neighbours"))
        results.append((result.ledger, result.statistics, result.resumed_from))
    assert results[0] == results[1]


def _crash(*args, **kwargs):
    raise RuntimeError("evaluation failed after training (a full disk, Ctrl-C in Grad-CAM)")


def test_a_retried_run_with_other_settings_shares_no_noise_with_the_attempt_it_replaces(tmp_path, n_train):
    """Adversary: the model an attempt trained before its evaluation failed, and the retried run's release. The
    retry changed delta, which keeps the run id and moves sigma. With the first attempt's key used again the two
    steps share their batch and their xi, and the differencing of
    `test_differencing_two_dp_sgd_runs_of_one_sweep_cancels_no_noise` returns the clean clipped sum. (That model is
    no longer left in the shareable folder, only in the private one, `dpmed.folders.RunFolder.release`; the fresh
    key keeps a copy taken from there, or by an older dpmed from the shareable folder, useless all the same.)"""
    arm = {"name": "dp", "mechanism": "dp_sgd", "target_epsilon": [2.0], "batch_size": n_train,
           "privacy_unit": "image"}
    first = _study(tmp_path, "retry", [arm | {"accountant": "pld"}])
    run_id, = run_ids(first)
    with pytest.MonkeyPatch.context() as mp, _spying([run_id]) as spy1:
        mp.setattr(dpmed.run, "assess", _crash)
        mp.setattr(released_size, "discrete_laplace", lambda scale, randbelow=None: 0)   # as in _run: q = 1
        failed = run_study(first, out=tmp_path / "out", progress=False)
    assert failed.failures and not (failed.out_dir / "runs" / run_id / "run.json").exists()
    assert not (failed.out_dir / "runs" / run_id / "model.pt").exists()
    left = torch.load(failed.out_dir / "private" / "runs" / run_id / "unreleased" / "model.pt", map_location="cpu",
                      weights_only=True)
    sigma1 = _published_runs(failed.out_dir, "dp")[0]["privacy"]["noise_multiplier"]

    study_dir, spy2 = _run(tmp_path, _study(tmp_path, "retry", [arm | {"accountant": "rdp"}]))
    theta0, names = spy1.init_of(run_id)
    assert all(torch.equal(theta0[k], spy2.init_of(run_id)[0][k]) for k in names)
    second = _dp_update(study_dir, spy2, run_id)
    c = _record(study_dir, run_id)["plan"]["training"]["learning_rate"] / n_train
    first_run = second | {"sigma": sigma1, "u": np.concatenate(
        [((theta0[k].double() - left[k].double()) / c).numpy().ravel() for k in names])}
    _assert_differencing_fails(first_run, second)


# --- the training set's size ---------------------------------------------------------------------------------------

def _neighbour(dataset, unit: str):
    """The neighbouring dataset: the training patient with the most images left out whole (patient unit), or one of
    that patient's images (image unit). Taken out of the training split as split: a dataset without that patient
    splits so, since a carved split draws each patient's side from that patient's id alone
    (test_neighbouring_files.py holds that from files)."""
    ids, counts = np.unique(dataset.train.patient_ids, return_counts=True)
    theirs = np.flatnonzero(dataset.train.patient_ids == ids[np.argmax(counts)])
    assert len(theirs) > 1
    gone = theirs if unit == "patient" else theirs[:1]
    return dataclasses.replace(dataset, train=dataset.train.subset(np.setdiff1d(np.arange(len(dataset.train)), gone)))


def _released_without_training(folder: Path, study, dataset, noise: int) -> dict:
    """What the shareable files say of a study on ``dataset`` besides the DP model and its evaluation: study.yaml
    whole, and each run.json's identity, plan, data provenance, privacy card, reconstruction bounds, ledger and
    timing (whose seconds would grow with the units Poisson sampling drew); the released count's noise fixed at
    ``noise``."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dpmed.study, "load_study_data", lambda s: dataset)
        patch.setattr(released_size, "discrete_laplace", lambda scale, randbelow=None: noise)
        result = run_study(study, out=folder, progress=False)
    assert not result.failures, [f.error for f in result.failures]
    released = {"study.yaml": (result.out_dir / "study.yaml").read_text()}
    for path in sorted(result.out_dir.glob("runs/*/run.json")):
        record = json.loads(path.read_text())
        released[path.parent.name] = {k: record[k] for k in ("run_id", "plan", "data", "privacy", "reconstruction",
                                                             "ledger", "timing")}
    return released


@pytest.mark.parametrize("unit", ["patient", "image"])
def test_the_shareable_files_cannot_tell_a_dataset_from_its_neighbour_beyond_the_released_count(tmp_path, unit,
                                                                                                 caplog):
    """Adversary: everything dpmed writes outside private/ about two studies on neighbouring datasets (one patient
    with all of their images, or one image, more or fewer). Once the released count agrees, which the discrete
    Laplace noise makes as likely as e^(+-size_epsilon) allows, those files are identical: N reaches them only
    through the count. The positive control, the exact count (no noise) as dpmed released it before, tells the two
    apart: q, T, delta, the expected batch, the prior 1/N and the sizes in study.yaml all read N."""
    arms = [{"name": "dp", "mechanism": "dp_sgd", "target_epsilon": [2.0], "accountant": "pld", "privacy_unit": unit}]
    study = _study(tmp_path, "size", arms)
    full = load_study_data(study)
    neighbour = _neighbour(full, unit)
    caplog.set_level(logging.INFO, logger="dpmed.study")
    same = _released_without_training(tmp_path / "a", study, full, noise=0)
    if unit == "image":   # the most images of one patient: told to the user, in no shareable file
        assert "a patient has up to k = 2 training images" in caplog.text and "k = 2" not in str(same)
    coupled = _released_without_training(tmp_path / "b", study, neighbour, noise=1)   # count agrees: N - 1 + 1
    assert same == coupled
    exact = _released_without_training(tmp_path / "c", study, neighbour, noise=0)       # control: N - 1 released
    assert exact["study.yaml"] != same["study.yaml"]
    run = "dp_eps2_C1_seed0"
    assert exact[run]["plan"]["privacy"]["n_units"] == same[run]["plan"]["privacy"]["n_units"] - 1
    assert exact[run]["plan"]["privacy"]["sample_rate"] > same[run]["plan"]["privacy"]["sample_rate"]
