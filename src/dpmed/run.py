"""Execute one run: data -> mechanism -> training -> evaluation -> record.

`run_one` is the unit an executor schedules. It writes ``run.json`` last and atomically, so a run is finished
exactly when that file exists; anything that fails before leaves no record and the run is simply redone.

What a run writes is split as `dpmed.folders` says: the released model's weights, run.json and predictions are
releasable (nothing in them depends on the training images except through the noised model and the accountant);
the checkpoint with the privacy randomness, noiseless training statistics and the audit's secret bits are private.
The privacy randomness is fresh per run (`dpmed.randomness`); its key is kept in the private folder only while
the run is unfinished, so that a resumed run makes exactly the same draws, and deleted when it finishes.
"""

from __future__ import annotations

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
from dpmed.data import Dataset, ImageSet, Task, cap_images_per_patient, normalize
from dpmed.data.canaries import hold_out_canary_sources, insert_canaries, make_canaries
from dpmed.evaluation import evaluate_utility, predict, save_predictions
from dpmed.evaluation.audit import audit_epsilon_lower_bound_over_grid, canary_scores_from_logits, choose_canaries
from dpmed.evaluation.predictions import predict_logits
from dpmed.evaluation.explanations import explain_test_set
from dpmed.evaluation.fairness import evaluate_fairness
from dpmed.folders import RunFolder, write_json_atomic, write_text_atomic
from dpmed.mechanisms import PixelGaussian, PixelLaplace, ScalarShift
from dpmed.models import MODELS, build_model
from dpmed.randomness import NOT_DP_REPRODUCIBLE, PrivacyRandomness, public_seed
from dpmed.training import DpSgdPlan, resolve_device, train

__all__ = ["RunContext", "run_one", "privacy_card", "reconstruction_record", "write_json_atomic"]

N_EXAMPLES = 4
COVERAGE = ("the training images; validation images (threshold choice) and test images are not protected")
LABELS_IN_CLEAR = "the labels are released in the clear: local DP on the pixels does not protect them"
SECURE_RANDOMNESS = ("privacy randomness (sampling, noise) fresh from OS entropy for this run, AES-128-CTR, "
                     "never written to a shareable file")


@dataclass(frozen=True)
class RunContext:
    """What every run of a study shares: the dataset, the model name, the evaluation settings and where privacy
    randomness comes from ("secure" or "reproducible", the study's ``privacy_randomness``)."""

    dataset: Dataset
    model: str
    evaluation: EvaluationConfig
    device: str = "auto"
    progress: bool = True
    privacy_randomness: str = "secure"


def _privacy_randomness(spec: RunSpec, mode: str, folder: RunFolder) -> PrivacyRandomness:
    """The run's privacy randomness. Secure: a fresh key, saved in the private folder (owner-only) the first time, so
    that an interrupted run continues with the same draws (a second, different perturbation of the same images
    would be a second release); reproducible: derived from the published seed and run id."""
    if mode == "reproducible":
        return PrivacyRandomness.reproducible(seed=spec.seed, run_id=spec.run_id)
    if folder.privacy_key.is_file():
        return PrivacyRandomness.from_root_hex(folder.privacy_key.read_text(encoding="utf-8"), "secure")
    randomness = PrivacyRandomness.secure()
    write_text_atomic(folder.privacy_key, randomness.root_hex())
    os.chmod(folder.privacy_key, 0o600)
    return randomness


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


def _unit_text(d: Mapping[str, Any]) -> str:
    return "patient" if d.get("unit") == "patient" else "image"


def _patient_guarantee(d: Mapping[str, Any], delta: float) -> dict[str, Any] | None:
    """For image-level DP-SGD on data where a patient has several images: what the eps implies for the patient with
    the most images (group privacy), from the values the study planned (`dpmed.study`)."""
    group = d.get("patient_guarantee")
    if not group:
        return None
    k, eps_k, delta_k, tight = group["k"], group["formula_epsilon"], group["formula_delta"], group["tight_epsilon"]
    formula = (f"({eps_k:.4g}, {delta_k:.3g})-DP" if delta_k < 1 else f"eps {eps_k:.4g} with delta >= 1 (vacuous)")
    text = (f"the image is the unit: {group['n_multi']} training patients have several images, up to k = {k}; for "
            f"that patient the group-privacy formula (k eps, k e^((k-1) eps) delta) gives {formula} "
            f"({accounting.GROUP_CITATION})")
    if tight is not None:
        text += f"; DP-SGD's tight group value is eps = {tight:.4g} at delta = {delta:.3g} ({accounting.TIGHT_GROUP_CITATION})"
    return {**group, "statement": text}


def _dp_sgd_card(spec: RunSpec, ledger: accounting.Ledger, randomness_mode: str) -> dict[str, Any]:
    d, p = spec.derived, spec.params
    accountant = d["accountant"]
    shuffled = ledger.has_shuffled_batches       # no accountant covers it: only a labelled Poisson counterpart
    eps = accounting.ledger_epsilon(accounting.poisson_counterpart(ledger) if shuffled else ledger, delta=d["delta"],
                                    accountant=accountant)
    clip = "L1" if p["noise"] == "laplace" else "L2"
    unit = _unit_text(d)
    neighbours = accounting.NEIGHBOUR_PATIENT if unit == "patient" else accounting.NEIGHBOUR_DP_SGD
    card = {
        "mechanism": "dp_sgd", "is_dp": True, "scope": "central DP of the trained model",
        "epsilon": eps, "delta": d["delta"], "target_epsilon": p.get("target_epsilon"),
        "accountant": accountant, "accountant_description": accounting.describe_accountant(accountant),
        "unit": unit, "n_units": d["n_units"], "neighbour_relation": neighbours, "sampling": p["sampling"],
        "noise": p["noise"], "clipping": clip, "sample_rate": d["sample_rate"], "steps": ledger.dp_sgd_steps,
        "noise_multiplier": d["noise_multiplier"], "noise_given": d["noise_given"],
        "max_grad_norm": p["max_grad_norm"], "covers": COVERAGE, "randomness": SECURE_RANDOMNESS,
    }
    if d.get("accountant_note"):
        card["accountant_note"] = d["accountant_note"]
    if not d.get("patients_known", True):
        card["unit_note"] = ("the dataset publishes no patient ids: each image counts as its own patient, so a "
                             "patient with several images is protected only as a group of them")
    guarantee = _patient_guarantee(d, d["delta"])
    if guarantee is not None:
        card["patient_guarantee"] = guarantee
    params = (f"{unit}s: N = {d['n_units']}, q = {d['sample_rate']:.4g}, T = {ledger.dp_sgd_steps}, "
              f"sigma = {d['noise_multiplier']:.4g}, C = {p['max_grad_norm']:g}"
              + (", Laplace noise, L1 clipping" if p["noise"] == "laplace" else ""))
    if shuffled:
        # The accountants assume Poisson sampling; for shuffled fixed-size batches their eps is not a valid bound.
        card.update(is_dp=False, epsilon=None, epsilon_if_poisson=eps,
                    statement=(f"NOT DP as accounted (reproduction mode): shuffled fixed-size batches, but the "
                               f"{accountant.upper()} accountant assumes Poisson sampling, so its eps = {eps:.4g} at "
                               f"delta = {d['delta']:.3g} does not hold for this run ({params})"))
        return card
    card["statement"] = (f"eps = {eps:.4g} at delta = {d['delta']:.3g} ({accountant.upper()} accountant; unit: one "
                         f"{unit}; neighbours: {neighbours}; {params})")
    return _label_randomness(card, randomness_mode)


def _label_randomness(card: dict[str, Any], randomness_mode: str) -> dict[str, Any]:
    """A reproducible run's eps holds only against someone who does not know the published seed: say so first."""
    if randomness_mode != "reproducible":
        return card
    return {**card, "is_dp": False, "randomness": NOT_DP_REPRODUCIBLE,
            "statement": f"NOT DP against anyone who knows the seed (reproducible mode); as accounted: "
                         f"{card['statement']}"}


def reconstruction_record(spec: RunSpec) -> dict[str, Any] | None:
    """Reconstruction and membership-inference bounds of a DP-SGD run (METHODS.md s.7), prior kappa = 1/N for the
    N sampling units (images or patients).

    Only for Gaussian noise with Poisson sampling, the setting the bounds are proved for; None otherwise."""
    if spec.mechanism != "dp_sgd" or spec.params["noise"] != "gaussian" or spec.params["sampling"] != "poisson":
        return None
    d = spec.derived
    risk = accounting.reconstruction_risk(noise_multiplier=d["noise_multiplier"], sample_rate=d["sample_rate"],
                                          steps=d["steps"], kappa=accounting.default_kappa(d["n_units"])).to_dict()
    return {**risk, "unit": _unit_text(d)}


def _local_card(spec: RunSpec, image_shape: tuple[int, ...]) -> dict[str, Any]:
    """pixel_laplace / pixel_gaussian: local DP of each released training image (the unit is the image)."""
    common = {"is_dp": True, "scope": "local DP on each released training image", "unit": "image",
              "neighbour_relation": accounting.NEIGHBOUR_LDP_IMAGE, "labels": LABELS_IN_CLEAR, "covers": COVERAGE,
              "patients": ("each image is released on its own: a patient with k images is protected by k eps_image "
                           "(basic composition)"), "randomness": SECURE_RANDOMNESS}
    if spec.mechanism == "pixel_laplace":
        event = PixelLaplace(scale=spec.derived["scale"]).event(image_shape)
        eps_pixel = accounting.laplace_pixel_epsilon(scale=event.scale, value_range=event.value_range)
        eps_image = accounting.laplace_image_epsilon(event)
        return {
            "mechanism": "pixel_laplace", **common,
            "scale_b": event.scale, "value_range_R": event.value_range, "dimension_d": event.dimension,
            "epsilon_pixel": eps_pixel, "epsilon_image": eps_image, "epsilon": eps_image, "delta": 0.0,
            "accountant": "closed form (Laplace mechanism, pure DP)",
            "statement": (f"eps_image = {eps_image:,.6g} (delta = 0; unit: one image, pixels only ({LABELS_IN_CLEAR}); "
                          f"neighbours: {accounting.NEIGHBOUR_LDP_IMAGE}; Laplace b = {event.scale:g}, "
                          f"R = {event.value_range:g}, d = {event.dimension}); eps per pixel value = {eps_pixel:g}"),
        }
    event = PixelGaussian(std=spec.derived["std"]).event(image_shape)
    delta = spec.derived["delta"]
    eps_image = accounting.gaussian_image_epsilon(event, delta=delta)
    eps_pixel = accounting.gaussian_epsilon(mu=event.value_range / event.std, delta=delta)
    return {
        "mechanism": "pixel_gaussian", **common,
        "std": event.std, "value_range_R": event.value_range, "dimension_d": event.dimension,
        "epsilon_pixel": eps_pixel, "epsilon_image": eps_image, "epsilon": eps_image, "delta": delta,
        "accountant": "analytic Gaussian mechanism (Balle & Wang 2018), L2 sensitivity sqrt(d) R",
        "statement": (f"eps_image = {eps_image:,.6g} at delta = {delta:.3g} (analytic Gaussian; unit: one image, "
                      f"pixels only ({LABELS_IN_CLEAR}); neighbours: {accounting.NEIGHBOUR_LDP_IMAGE}; "
                      f"s = {event.std:g}, R = {event.value_range:g}, d = {event.dimension}); eps per pixel value "
                      f"= {eps_pixel:.4g}"),
    }


def privacy_card(spec: RunSpec, ledger: accounting.Ledger, image_shape: tuple[int, ...],
                 randomness_mode: str = "secure") -> dict[str, Any]:
    """What this run's privacy claim is, with every parameter it rests on. Never a bare eps."""
    if spec.mechanism == "none":
        return {"mechanism": "none", "is_dp": False, "epsilon": None,
                "statement": "no privacy protection (eps = infinity)"}
    if spec.mechanism == "scalar_shift":
        return {"mechanism": "scalar_shift", "is_dp": False, "epsilon": None, "scale_b": spec.params["scale"],
                "statement": ("NOT DP: one Laplace brightness shift per image (reproduction of "
                              "000_56c2431ae4df8d10.txt's code); the image content is released unchanged, so no "
                              "finite eps holds")}
    if spec.mechanism in ("pixel_laplace", "pixel_gaussian"):
        return _label_randomness(_local_card(spec, image_shape), randomness_mode)
    return _dp_sgd_card(spec, ledger, randomness_mode)


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


def _save_examples(path: Path, mechanism: Any, images: np.ndarray, rng: np.random.Generator) -> None:
    """A few test images before and after the run's mechanism, for the report's visual-privacy figure
    (000_56c2431ae4df8d10.txt). Test images are used so the report shows no training image; the run itself
    perturbs only training images."""
    np.savez_compressed(path, original=images, perturbed=mechanism.apply(images, rng=rng))


AUDIT_DELTA_NON_PRIVATE = 1e-5   # the delta at which a non-private arm's audit bound is stated
AUDIT_CITATION = ("Steinke, Nasr and Jagielski, Privacy Auditing with One (1) Training Run, NeurIPS 2023, "
                  "arXiv:2305.08846")


def _audit_canaries(train_set: ImageSet, task: Task, audit: Mapping[str, Any], *, seed: int,
                    rng: np.random.Generator) -> tuple[ImageSet, ImageSet, np.ndarray]:
    """(training set with canaries, the m canaries, inclusion bits bool [m]) for a one-run audit.

    The canaries' sources (one image of each of m patients) leave the training split with every image of their
    patients; each canary goes back in with probability 1/2. Which patients and the canaries' labels are public
    draws of the run's seed; the inclusion bits, the secret the audit's guesser tries to recover, come from the
    run's secret ``canaries`` stream. Nothing the guesser sees (not even the canary order) depends on the bits."""
    m = audit["canaries"]
    rest, sources = hold_out_canary_sources(train_set, m, seed=public_seed(seed, "canary_sources"))
    canaries = make_canaries(sources, m, task=task, seed=public_seed(seed, "canaries"), kind=audit["kind"])
    included = choose_canaries(m, rng=rng)
    return insert_canaries(rest, canaries, included), canaries, included


def _audit_record(spec: RunSpec, audit: Mapping[str, Any], card: Mapping[str, Any], scores: np.ndarray,
                  included: np.ndarray) -> dict[str, Any]:
    """The audit's lower bound next to the claim it tests: same delta as the claim (1e-5 without one)."""
    delta = spec.derived["delta"] if spec.mechanism == "dp_sgd" else AUDIT_DELTA_NON_PRIVATE
    res = audit_epsilon_lower_bound_over_grid(scores, included, delta=delta, confidence=audit["confidence"])
    claimed = card.get("epsilon") if spec.mechanism == "dp_sgd" and card.get("epsilon") is not None else None
    statement = (f"empirical lower bound eps >= {res.epsilon_lower_bound:.3g} at delta = {delta:.3g} (one-run audit, "
                 f"{res.n_canaries} {audit['kind']} canaries, {res.confidence:.0%}; {res.n_correct} of "
                 f"{res.n_guesses} guesses correct)")
    statement += ("; no eps is claimed" if claimed is None else
                  f"; the accountant claims eps = {claimed:.3g}: " + (
                      "consistent" if res.epsilon_lower_bound <= claimed else
                      f"inconsistent with the claimed eps at {res.confidence:.0%}"))
    return {"n_canaries": res.n_canaries, "kind": audit["kind"], "n_included": int(included.sum()),
            "n_guesses": res.n_guesses, "n_correct": res.n_correct, "k_positive": res.k_positive,
            "k_negative": res.k_negative, "epsilon_lower_bound": res.epsilon_lower_bound,
            "confidence": res.confidence, "delta": delta, "claimed_epsilon": claimed,
            "consistent_with_claim": None if claimed is None else bool(res.epsilon_lower_bound <= claimed),
            "method": res.method, "citation": AUDIT_CITATION, "statement": statement,
            "canary_source": "training split: one image of each of m patients, all their images held out",
            "private": ("depends on the secret canary inclusion bits: not covered by eps, kept in the study's "
                        "private folder")}


def _training_metrics(model, train_set: ImageSet, val: tuple[ImageSet, np.ndarray], task: Task, device,
                      ev: EvaluationConfig) -> dict[str, Any]:
    """AUROC and accuracy on the training images (000_56c2431ae4df8d10.txt's train/test table): noiseless statistics
    of the training images, for the private folder only."""
    scores = predict(model, train_set, task, device=device)
    metrics = evaluate_utility(kind=task.kind, label_names=list(task.label_names), val_labels=val[0].labels,
                               val_scores=val[1], test_labels=train_set.labels, test_scores=scores,
                               n_resamples=ev.bootstrap_resamples, seed=ev.bootstrap_seed, confidence=ev.confidence,
                               ordinal=task.ordinal)
    return {"covered_by_eps": False, "note": "computed from the training images without noise: private",
            **{k.replace("test_", "train_", 1): v for k, v in metrics.items()}}


def _finite(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in values.items()}


def run_one(spec: RunSpec, context: RunContext, folder: RunFolder) -> dict[str, Any]:
    """Train and evaluate one run; writes ``run.json`` (the record, returned), the model's weights and predictions
    into ``folder.public``, and private files (checkpoint, statistics, audit) into ``folder.private``."""
    start = time.perf_counter()
    folder.make()
    ds = context.dataset
    device = resolve_device(context.device if spec.training.device == "auto" else spec.training.device)
    randomness = _privacy_randomness(spec, context.privacy_randomness, folder)
    train_set = ds.train
    cap = spec.params.get("max_images_per_patient")
    if cap:
        train_set = train_set.subset(cap_images_per_patient(train_set.patient_ids, cap,
                                                            seed=public_seed(spec.seed, "image_cap")))
    audit = spec.params.get("audit")
    if audit:
        # One-run audit: canaries go in with probability 1/2 each. q, T and sigma were fixed before, from the
        # split's size; with Poisson sampling the accountant depends on q, T and sigma only, so the claimed eps is the
        # same with the canaries in, and covers each of them as a training record (each canary is its own patient).
        train_set, canaries, included = _audit_canaries(train_set, ds.task, audit, seed=spec.seed,
                                                        rng=randomness.stream("canaries"))
    mechanism = _local_mechanism(spec)
    if mechanism is not None:
        # The data holder releases perturbed training images; validation and test stay clean (METHODS.md s.1).
        train_set = train_set.with_images(mechanism.apply(train_set.images, rng=randomness.stream("local_dp")))
        _save_examples(folder.examples, mechanism, ds.test.images[:N_EXAMPLES], randomness.stream("examples"))
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
                         sampling=spec.params["sampling"], expected_batch_size=d["sample_rate"] * d["n_units"],
                         unit=_unit_text(d))
    # The checkpoint (with the privacy ledger and the randomness's position) lets an interrupted run continue where
    # it stopped; it is private and is deleted once the run is finished.
    result = train(model, train_set, ds.task, spec.training, seed=spec.seed, dp=plan, randomness=randomness,
                   device=device, progress=context.progress, label=spec.run_id, checkpoint=folder.checkpoint)
    torch.save(model.state_dict(), folder.model)
    val_scores = predict(model, val_set, ds.task, device=device)
    test_scores = predict(model, test_set, ds.task, device=device)
    save_predictions(folder.predictions, val=(ds.val, val_scores), test=(ds.test, test_scores))
    ev = context.evaluation
    metrics = evaluate_utility(kind=ds.task.kind, label_names=list(ds.task.label_names),
                               val_labels=ds.val.labels, val_scores=val_scores,
                               test_labels=ds.test.labels, test_scores=test_scores,
                               n_resamples=ev.bootstrap_resamples, seed=ev.bootstrap_seed, confidence=ev.confidence,
                               ordinal=ds.task.ordinal)
    statistics: dict[str, Any] = {"run_id": spec.run_id, "per_epoch": result.statistics}
    if ev.training_metrics:
        statistics["training_metrics"] = _finite(_training_metrics(model, train_set, (ds.val, val_scores), ds.task,
                                                                   device, ev))
    write_json_atomic(folder.statistics, statistics)
    record = {
        "run_id": spec.run_id, "arm": spec.arm, "mechanism": spec.mechanism, "seed": spec.seed,
        "spec": spec.to_dict(),
        "data": {"name": ds.name, "task": ds.task.kind, **ds.source},  # source, preprocessing, rows left out, split
        "privacy": privacy_card(spec, result.ledger, ds.train.image_shape, context.privacy_randomness),
        "reconstruction": reconstruction_record(spec),
        "ledger": result.ledger.to_dict(),
        "metrics": _finite(metrics),
        "timing": {"train_seconds": result.seconds, "total_seconds": time.perf_counter() - start,
                   "device": str(device), "resumed_from": result.resumed_from},
        "versions": _versions(),
    }
    if audit:  # scored from the final model only (black-box audit); scores and bits kept for re-analysis, privately
        canary_input = canaries if ds.normalization is None else canaries.with_images(
            normalize(canaries.images, *ds.normalization))
        scores = canary_scores_from_logits(predict_logits(model, canary_input, device=device), canaries.labels,
                                           task_kind=ds.task.kind)
        np.savez_compressed(folder.audit_scores, scores=scores, included=included, labels=canaries.labels)
        write_json_atomic(folder.audit, _audit_record(spec, audit, record["privacy"], scores, included))
        record["audit"] = {"n_canaries": audit["canaries"], "kind": audit["kind"],
                           "result": "in the study's private folder (it depends on the secret canary bits)"}
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
        np.savez_compressed(folder.cams, **cams)   # the report's CAM grid; run.json (below) marks it complete
        record["explanations"]["seconds"] = time.perf_counter() - cam_start
    write_json_atomic(folder.record, record)
    folder.discard_secrets()
    return record
