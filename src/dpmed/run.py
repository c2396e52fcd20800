"""Execute one run: data -> mechanism -> training -> evaluation -> record.

`run_one` is the unit an executor schedules. It writes ``run.json`` last and atomically, so a run is finished
exactly when that file exists; anything that fails before leaves no record and the run is simply redone.
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

from dpmed import accounting
from dpmed.config import EvaluationConfig, RunSpec
from dpmed.data import Dataset, ImageSet, Task, normalize
from dpmed.data.canaries import hold_out_canary_sources, insert_canaries, make_canaries
from dpmed.evaluation import evaluate_utility, predict, save_predictions
from dpmed.evaluation.audit import audit_epsilon_lower_bound_over_grid, canary_scores_from_logits, choose_canaries
from dpmed.evaluation.predictions import predict_logits
from dpmed.evaluation.explanations import explain_test_set
from dpmed.evaluation.fairness import evaluate_fairness
from dpmed.mechanisms import PixelGaussian, PixelLaplace, ScalarShift
from dpmed.models import MODELS, build_model
from dpmed.training import DpSgdPlan, resolve_device, train

__all__ = ["RunContext", "run_one", "privacy_card", "reconstruction_record", "write_json_atomic", "RUN_RECORD",
           "CHECKPOINT"]

RUN_RECORD = "run.json"
CHECKPOINT = "checkpoint.pt"
EXAMPLES = "ldp_examples.npz"
CAMS = "cams.npz"
N_EXAMPLES = 4
COVERAGE = ("the training images; validation images (threshold choice) and test images are not protected")


@dataclass(frozen=True)
class RunContext:
    """What every run of a study shares: the dataset, the model name and the evaluation settings."""

    dataset: Dataset
    model: str
    evaluation: EvaluationConfig
    device: str = "auto"
    progress: bool = True


def write_json_atomic(path: Path, payload: Mapping[str, Any]) -> None:
    """Write to a temporary file in the same folder, then rename: readers see the old file or the whole new one."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(payload, indent=2, allow_nan=False, default=str), encoding="utf-8")
    os.replace(tmp, path)


def _local_mechanism(spec: RunSpec):
    """The local DP mechanism object of a run (None for arms that do not perturb images)."""
    d = spec.derived
    if spec.mechanism == "pixel_laplace":
        return PixelLaplace(scale=d["scale"])
    if spec.mechanism == "pixel_gaussian":
        return PixelGaussian(std=d["std"])
    if spec.mechanism == "scalar_shift":
        return ScalarShift(scale=spec.params["scale"])
    return None


def _dp_sgd_card(spec: RunSpec, ledger: accounting.Ledger) -> dict[str, Any]:
    d, p = spec.derived, spec.params
    accountant = d["accountant"]
    eps = accounting.ledger_epsilon(ledger, delta=d["delta"], accountant=accountant)
    clip = "L1" if p["noise"] == "laplace" else "L2"
    card = {
        "mechanism": "dp_sgd", "is_dp": True, "scope": "central DP of the trained model",
        "epsilon": eps, "delta": d["delta"], "target_epsilon": p.get("target_epsilon"),
        "accountant": accountant, "accountant_description": accounting.describe_accountant(accountant),
        "neighbour_relation": accounting.NEIGHBOUR_DP_SGD, "sampling": p["sampling"], "noise": p["noise"],
        "clipping": clip, "sample_rate": d["sample_rate"], "steps": ledger.dp_sgd_steps,
        "noise_multiplier": d["noise_multiplier"], "noise_given": d["noise_given"],
        "max_grad_norm": p["max_grad_norm"], "covers": COVERAGE,
    }
    if d.get("accountant_note"):
        card["accountant_note"] = d["accountant_note"]
    params = (f"q = {d['sample_rate']:.4g}, T = {ledger.dp_sgd_steps}, sigma = {d['noise_multiplier']:.4g}, "
              f"C = {p['max_grad_norm']:g}" + (", Laplace noise, L1 clipping" if p["noise"] == "laplace" else ""))
    if p["sampling"] == "shuffle":
        # The accountants assume Poisson sampling; for shuffled fixed-size batches their eps is not a valid bound.
        card.update(is_dp=False, epsilon=None, epsilon_if_poisson=eps,
                    statement=(f"NOT DP as accounted (reproduction mode): shuffled fixed-size batches, but the "
                               f"{accountant.upper()} accountant assumes Poisson sampling, so its eps = {eps:.4g} at "
                               f"delta = {d['delta']:.3g} does not hold for this run ({params})"))
        return card
    card["statement"] = (f"eps = {eps:.4g} at delta = {d['delta']:.3g} ({accountant.upper()} accountant; neighbours: "
                         f"{accounting.NEIGHBOUR_DP_SGD}; {params})")
    return card


def reconstruction_record(spec: RunSpec) -> dict[str, Any] | None:
    """Reconstruction and membership-inference bounds of a DP-SGD run (METHODS.md s.7), prior kappa = 1/N_train.

    Only for Gaussian noise with Poisson sampling, the setting the bounds are proved for; None otherwise."""
    if spec.mechanism != "dp_sgd" or spec.params["noise"] != "gaussian" or spec.params["sampling"] != "poisson":
        return None
    d = spec.derived
    return accounting.reconstruction_risk(noise_multiplier=d["noise_multiplier"], sample_rate=d["sample_rate"],
                                          steps=d["steps"], kappa=accounting.default_kappa(d["n_train"])).to_dict()


def privacy_card(spec: RunSpec, ledger: accounting.Ledger, image_shape: tuple[int, ...]) -> dict[str, Any]:
    """What this run's privacy claim is, with every parameter it rests on. Never a bare eps."""
    if spec.mechanism == "none":
        return {"mechanism": "none", "is_dp": False, "epsilon": None,
                "statement": "no privacy protection (eps = infinity)"}
    if spec.mechanism == "scalar_shift":
        return {"mechanism": "scalar_shift", "is_dp": False, "epsilon": None, "scale_b": spec.params["scale"],
                "statement": ("NOT DP: one Laplace brightness shift per image (reproduction of "
                              "000_56c2431ae4df8d10.txt's code); the image content is released unchanged, so no "
                              "finite eps holds")}
    if spec.mechanism == "pixel_laplace":
        event = PixelLaplace(scale=spec.derived["scale"]).event(image_shape)
        eps_pixel = accounting.laplace_pixel_epsilon(scale=event.scale, value_range=event.value_range)
        eps_image = accounting.laplace_image_epsilon(event)
        return {
            "mechanism": "pixel_laplace", "is_dp": True, "scope": "local DP on each released training image",
            "scale_b": event.scale, "value_range_R": event.value_range, "dimension_d": event.dimension,
            "epsilon_pixel": eps_pixel, "epsilon_image": eps_image, "epsilon": eps_image, "delta": 0.0,
            "accountant": "closed form (Laplace mechanism, pure DP)",
            "neighbour_relation": accounting.NEIGHBOUR_LDP_IMAGE, "covers": COVERAGE,
            "statement": (f"eps_image = {eps_image:,.6g} (delta = 0; neighbours: "
                          f"{accounting.NEIGHBOUR_LDP_IMAGE}; Laplace b = {event.scale:g}, R = {event.value_range:g}, "
                          f"d = {event.dimension}); eps per pixel value = {eps_pixel:g}"),
        }
    if spec.mechanism == "pixel_gaussian":
        event = PixelGaussian(std=spec.derived["std"]).event(image_shape)
        delta = spec.derived["delta"]
        eps_image = accounting.gaussian_image_epsilon(event, delta=delta)
        eps_pixel = accounting.gaussian_epsilon(mu=event.value_range / event.std, delta=delta)
        return {
            "mechanism": "pixel_gaussian", "is_dp": True, "scope": "local DP on each released training image",
            "std": event.std, "value_range_R": event.value_range, "dimension_d": event.dimension,
            "epsilon_pixel": eps_pixel, "epsilon_image": eps_image, "epsilon": eps_image, "delta": delta,
            "accountant": "analytic Gaussian mechanism (Balle & Wang 2018), L2 sensitivity sqrt(d) R",
            "neighbour_relation": accounting.NEIGHBOUR_LDP_IMAGE, "covers": COVERAGE,
            "statement": (f"eps_image = {eps_image:,.6g} at delta = {delta:.3g} (analytic Gaussian; neighbours: "
                          f"{accounting.NEIGHBOUR_LDP_IMAGE}; s = {event.std:g}, R = {event.value_range:g}, "
                          f"d = {event.dimension}); eps per pixel value = {eps_pixel:.4g}"),
        }
    return _dp_sgd_card(spec, ledger)


def _git_commit() -> str:
    """The commit of the dpmed source tree that ran, when it is a git checkout (provenance for the report)."""
    try:
        done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent,
                              capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=Path(__file__).parent,
                               capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return "unknown (git not available)"
    if done.returncode != 0:
        return "unknown (not a git checkout)"
    return done.stdout.strip() + (" with uncommitted changes" if dirty.stdout.strip() else "")


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "machine": f"{platform.system()} {platform.machine()}",
           "processor": platform.processor() or "unknown", "cpu_count": str(os.cpu_count()),
           "git_commit": _git_commit()}
    for pkg in ("dpmed", "torch", "opacus", "dp-accounting", "numpy", "scikit-learn"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def _save_examples(path: Path, mechanism: Any, images: np.ndarray, *, seed: int) -> None:
    """A few test images before and after the run's mechanism, for the report's visual-privacy figure
    (000_56c2431ae4df8d10.txt). Test images are used so the report shows no training image; the run itself
    perturbs only training images."""
    np.savez_compressed(path, original=images, perturbed=mechanism.apply(images, seed=seed + 7919))


AUDIT_DELTA_NON_PRIVATE = 1e-5   # the delta at which a non-private arm's audit bound is stated
AUDIT_SCORES = "audit_scores.npz"
AUDIT_CITATION = ("Steinke, Nasr and Jagielski, Privacy Auditing with One (1) Training Run, NeurIPS 2023, "
                  "arXiv:2305.08846")


def _audit_canaries(train_set: ImageSet, task: Task, audit: Mapping[str, Any], *,
                    seed: int) -> tuple[ImageSet, ImageSet, np.ndarray]:
    """(training set with canaries, the m canaries, inclusion bits bool [m]) for a one-run audit.

    The canaries' sources (one image of each of m patients) leave the training split with every image of their
    patients; each canary goes back in with probability 1/2. The source draw, the canaries and the bits come from
    three independent streams of the run's seed, so nothing the guesser sees (not even the canary order) depends
    on the bits."""
    m = audit["canaries"]
    pool_seed, canary_seed, bits_seed = (int(c.generate_state(1)[0])
                                         for c in np.random.SeedSequence([seed, 20230514]).spawn(3))
    rest, sources = hold_out_canary_sources(train_set, m, seed=pool_seed)
    canaries = make_canaries(sources, m, task=task, seed=canary_seed, kind=audit["kind"])
    included = choose_canaries(m, seed=bits_seed)
    return insert_canaries(rest, canaries, included), canaries, included


def _audit_record(spec: RunSpec, audit: Mapping[str, Any], card: Mapping[str, Any], scores: np.ndarray,
                  included: np.ndarray) -> dict[str, Any]:
    """The audit's lower bound next to the claim it tests: same delta as the claim (1e-5 without one)."""
    delta = spec.derived["delta"] if spec.mechanism == "dp_sgd" else AUDIT_DELTA_NON_PRIVATE
    res = audit_epsilon_lower_bound_over_grid(scores, included, delta=delta, confidence=audit["confidence"])
    claimed = card.get("epsilon") if card.get("is_dp") else None
    statement = (f"empirical lower bound eps >= {res.epsilon_lower_bound:.3g} at delta = {delta:.3g} (one-run audit, "
                 f"{res.n_canaries} {audit['kind']} canaries, {res.confidence:.0%}; {res.n_correct} of "
                 f"{res.n_guesses} guesses correct)")
    statement += ("; no eps is claimed" if claimed is None else
                  f"; the accountant claims eps = {claimed:.3g}: " + (
                      "consistent" if res.epsilon_lower_bound <= claimed else "VIOLATED: the run is not DP as claimed"))
    return {"n_canaries": res.n_canaries, "kind": audit["kind"], "n_included": int(included.sum()),
            "n_guesses": res.n_guesses, "n_correct": res.n_correct, "k_positive": res.k_positive,
            "k_negative": res.k_negative, "epsilon_lower_bound": res.epsilon_lower_bound,
            "confidence": res.confidence, "delta": delta, "claimed_epsilon": claimed,
            "consistent_with_claim": None if claimed is None else bool(res.epsilon_lower_bound <= claimed),
            "method": res.method, "citation": AUDIT_CITATION, "statement": statement,
            "canary_source": "training split: one image of each of m patients, all their images held out"}


def run_one(spec: RunSpec, context: RunContext, out_dir: Path) -> dict[str, Any]:
    """Train and evaluate one run; writes ``out_dir/run.json`` (the record, returned) and ``predictions.npz``."""
    start = time.perf_counter()
    out_dir.mkdir(parents=True, exist_ok=True)
    ds = context.dataset
    device = resolve_device(context.device if spec.training.device == "auto" else spec.training.device)
    train_set = ds.train
    audit = spec.params.get("audit")
    if audit:
        # One-run audit: canaries go in with probability 1/2 each. q, T and sigma were fixed before, from the
        # split's size; with Poisson sampling the accountant depends on q, T and sigma only, so the claimed eps is the
        # same with the canaries in, and covers each of them as a training record.
        train_set, canaries, included = _audit_canaries(train_set, ds.task, audit, seed=spec.seed)
    mechanism = _local_mechanism(spec)
    if mechanism is not None:
        # The data holder releases perturbed training images; validation and test stay clean (METHODS.md s.1).
        train_set = train_set.with_images(mechanism.apply(train_set.images, seed=spec.seed))
        _save_examples(out_dir / EXAMPLES, mechanism, ds.test.images[:N_EXAMPLES], seed=spec.seed)
    val_set, test_set = ds.val, ds.test
    if ds.normalization is not None:  # fixed constants at the model input, after any mechanism (METHODS.md s.1)
        train_set, val_set, test_set = (s.with_images(normalize(s.images, *ds.normalization))
                                        for s in (train_set, val_set, test_set))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        model = build_model(context.model, in_channels=ds.train.image_shape[0], num_outputs=ds.task.num_outputs,
                            image_size=ds.train.image_shape[1])
    plan = None
    if spec.mechanism == "dp_sgd":
        d = spec.derived
        plan = DpSgdPlan(noise_multiplier=d["noise_multiplier"], max_grad_norm=spec.params["max_grad_norm"],
                         sample_rate=d["sample_rate"], steps=d["steps"], noise=spec.params["noise"],
                         sampling=spec.params["sampling"], expected_batch_size=d["sample_rate"] * d["n_train"])
    # The checkpoint (with the privacy ledger) lets an interrupted run continue where it stopped; the last one
    # holds the trained model.
    result = train(model, train_set, ds.task, spec.training, seed=spec.seed, dp=plan, device=device,
                   progress=context.progress, label=spec.run_id, checkpoint=out_dir / CHECKPOINT)
    val_scores = predict(model, val_set, ds.task, device=device)
    test_scores = predict(model, test_set, ds.task, device=device)
    save_predictions(out_dir / "predictions.npz", val=(ds.val, val_scores), test=(ds.test, test_scores))
    ev = context.evaluation
    metrics = evaluate_utility(kind=ds.task.kind, label_names=list(ds.task.label_names),
                               val_labels=ds.val.labels, val_scores=val_scores,
                               test_labels=ds.test.labels, test_scores=test_scores,
                               n_resamples=ev.bootstrap_resamples, seed=ev.bootstrap_seed, confidence=ev.confidence,
                               ordinal=ds.task.ordinal)
    record = {
        "run_id": spec.run_id, "arm": spec.arm, "mechanism": spec.mechanism, "seed": spec.seed,
        "spec": spec.to_dict(),
        "data": {"name": ds.name, "task": ds.task.kind, **ds.source},  # source, preprocessing, rows left out, split
        "privacy": privacy_card(spec, result.ledger, ds.train.image_shape),
        "reconstruction": reconstruction_record(spec),
        "ledger": result.ledger.to_dict(),
        "metrics": {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in metrics.items()},
        "history": result.history,
        "timing": {"train_seconds": result.seconds, "total_seconds": time.perf_counter() - start,
                   "device": str(device), "resumed_from": result.resumed_from},
        "versions": _versions(),
    }
    if audit:  # scored from the final model only (black-box audit); scores and bits kept for re-analysis
        canary_input = canaries if ds.normalization is None else canaries.with_images(
            normalize(canaries.images, *ds.normalization))
        scores = canary_scores_from_logits(predict_logits(model, canary_input, device=device), canaries.labels,
                                           task_kind=ds.task.kind)
        np.savez_compressed(out_dir / AUDIT_SCORES, scores=scores, included=included, labels=canaries.labels)
        record["audit"] = _audit_record(spec, audit, record["privacy"], scores, included)
    if ev.fairness is not None:  # per-group metrics, a pure function of the predictions saved above (METHODS.md s.5)
        record["fairness"] = evaluate_fairness(
            kind=ds.task.kind, val_labels=ds.val.labels, val_scores=val_scores, test_labels=ds.test.labels,
            test_scores=test_scores, attributes={name: getattr(ds.test, name) for name in ev.fairness.attributes},
            age_bins=ev.fairness.age_bins, n_resamples=ev.bootstrap_resamples, seed=ev.bootstrap_seed,
            confidence=ev.confidence)
    if ev.explanations is not None:  # Grad-CAM needs the model: on a plain copy of it, `model` stays as it is
        cam_start = time.perf_counter()
        record["explanations"], cams = explain_test_set(
            model, ds.test.images, ds.test.masks, kind=ds.task.kind, target_layer=MODELS[context.model].cam_layer,
            normalization=ds.normalization, n_resamples=ev.bootstrap_resamples, bootstrap_seed=ev.bootstrap_seed,
            confidence=ev.confidence, **ev.explanations.model_dump())
        np.savez_compressed(out_dir / CAMS, **cams)   # the report's CAM grid; run.json (below) marks it complete
        record["explanations"]["seconds"] = time.perf_counter() - cam_start
    write_json_atomic(out_dir / RUN_RECORD, record)
    return record
