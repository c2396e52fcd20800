"""Execute one run: data -> mechanism -> training -> evaluation -> record.

`run_one` is the unit an executor schedules. It writes ``run.json`` last and atomically, so a run is finished
exactly when that file exists; anything that fails before leaves no record and the run is simply redone.
"""

from __future__ import annotations

import json
import math
import os
import platform
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping

import torch

from dpmed import accounting
from dpmed.config import EvaluationConfig, RunSpec
from dpmed.data import Dataset
from dpmed.evaluation import evaluate_utility, predict, save_predictions
from dpmed.mechanisms import PixelLaplace
from dpmed.models import build_model
from dpmed.training import DpSgdPlan, resolve_device, train

__all__ = ["RunContext", "run_one", "privacy_card", "write_json_atomic", "RUN_RECORD"]

RUN_RECORD = "run.json"
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


def privacy_card(spec: RunSpec, ledger: accounting.Ledger, image_shape: tuple[int, ...]) -> dict[str, Any]:
    """What this run's privacy claim is, with every parameter it rests on. Never a bare eps."""
    if spec.mechanism == "none":
        return {"mechanism": "none", "is_dp": False, "epsilon": None,
                "statement": "no privacy protection (eps = infinity)"}
    if spec.mechanism == "pixel_laplace":
        event = PixelLaplace(scale=spec.params["scale"]).event(image_shape)
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
    d = spec.derived
    eps = accounting.ledger_epsilon(ledger, delta=d["delta"], accountant=spec.params["accountant"])
    return {
        "mechanism": "dp_sgd", "is_dp": True, "scope": "central DP of the trained model",
        "epsilon": eps, "delta": d["delta"], "target_epsilon": spec.params["target_epsilon"],
        "accountant": spec.params["accountant"],
        "accountant_description": accounting.describe_accountant(spec.params["accountant"]),
        "neighbour_relation": accounting.NEIGHBOUR_DP_SGD, "sampling": "poisson",
        "sample_rate": d["sample_rate"], "steps": ledger.dp_sgd_steps, "noise_multiplier": d["noise_multiplier"],
        "max_grad_norm": spec.params["max_grad_norm"], "covers": COVERAGE,
        "statement": (f"eps = {eps:.4g} at delta = {d['delta']:.3g} ({spec.params['accountant'].upper()} accountant; "
                      f"neighbours: {accounting.NEIGHBOUR_DP_SGD}; q = {d['sample_rate']:.4g}, "
                      f"T = {ledger.dp_sgd_steps}, sigma = {d['noise_multiplier']:.4g}, "
                      f"C = {spec.params['max_grad_norm']:g})"),
    }


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "machine": f"{platform.system()} {platform.machine()}"}
    for pkg in ("dpmed", "torch", "opacus", "dp-accounting", "numpy", "scikit-learn"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def run_one(spec: RunSpec, context: RunContext, out_dir: Path) -> dict[str, Any]:
    """Train and evaluate one run; writes ``out_dir/run.json`` (the record, returned) and ``predictions.npz``."""
    start = time.perf_counter()
    out_dir.mkdir(parents=True, exist_ok=True)
    ds = context.dataset
    device = resolve_device(context.device if spec.training.device == "auto" else spec.training.device)
    train_set = ds.train
    if spec.mechanism == "pixel_laplace":
        # The data holder releases perturbed training images; validation and test stay clean (METHODS.md s.1).
        train_set = train_set.with_images(PixelLaplace(scale=spec.params["scale"]).apply(train_set.images,
                                                                                         seed=spec.seed))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        model = build_model(context.model, in_channels=ds.train.image_shape[0], num_outputs=ds.task.num_outputs,
                            image_size=ds.train.image_shape[1])
    plan = None
    if spec.mechanism == "dp_sgd":
        d = spec.derived
        plan = DpSgdPlan(noise_multiplier=d["noise_multiplier"], max_grad_norm=spec.params["max_grad_norm"],
                         sample_rate=d["sample_rate"], steps=d["steps"])
    result = train(model, train_set, ds.task, spec.training, seed=spec.seed, dp=plan, device=device,
                   progress=context.progress, label=spec.run_id)
    val_scores = predict(model, ds.val, ds.task, device=device)
    test_scores = predict(model, ds.test, ds.task, device=device)
    save_predictions(out_dir / "predictions.npz", val=(ds.val, val_scores), test=(ds.test, test_scores))
    ev = context.evaluation
    metrics = evaluate_utility(kind=ds.task.kind, label_names=list(ds.task.label_names),
                               val_labels=ds.val.labels, val_scores=val_scores,
                               test_labels=ds.test.labels, test_scores=test_scores,
                               n_resamples=ev.bootstrap_resamples, seed=ev.bootstrap_seed, confidence=ev.confidence)
    record = {
        "run_id": spec.run_id, "arm": spec.arm, "mechanism": spec.mechanism, "seed": spec.seed,
        "spec": spec.to_dict(),
        "privacy": privacy_card(spec, result.ledger, ds.train.image_shape),
        "ledger": result.ledger.to_dict(),
        "metrics": {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in metrics.items()},
        "history": result.history,
        "timing": {"train_seconds": result.seconds, "total_seconds": time.perf_counter() - start,
                   "device": str(device)},
        "versions": _versions(),
    }
    write_json_atomic(out_dir / RUN_RECORD, record)
    return record
