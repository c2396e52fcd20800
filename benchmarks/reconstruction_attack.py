"""How often the imprint attack (Fowl et al. 2022) reconstructs PneumoniaMNIST training images, or Kermany test
images at 64 px (``--kermany``), from one DP-SGD step, at the noise multipliers of eps 1, 8, 1e6, 1e9, 1e12, 1e15
(004_6210268d59b6f8e5.txt's high budgets).

    python benchmarks/reconstruction_attack.py [--data ../shared/data/pneumoniamnist/pneumoniamnist.npz
        | --kermany ../shared/data/chest_xray] [--epsilons 1,8,1e6,1e9,1e12,1e15] [--structures cumulative,sparse]
        [--batches 4] [--batch 128] [--bins 512] [--threads 1] [--seed S] [--no-references]
        [--out benchmarks/results-attack-<machine>.json]

The arm: Poisson rate q = 128 / 4708 (the expected batch of 128 over the 4708 training images), T = 370 steps
(about 10 epochs), delta = 1e-5, C = 1; sigma from ``dpmed.accounting.noise_multiplier_for`` (PLD up to eps 500,
RDP above). Two reference rows: no clipping and no noise (C = inf, sigma = 0), and clipping alone (C = 1, sigma = 0).
For each row ``--batches`` batches of ``--batch`` training images go through one step of the arm with the adversary's
imprinted model (``dpmed.attack``): the body is a freshly initialised small_cnn (the attack reads the first step it
is handed; the body is frozen, so its weights only set each image's gradient scale, which clipping removes). The
adversary's public images are the val and test splits (MedMNIST's splits are not documented as patient-disjoint:
they stand for "the same kind of images", which is all the attack uses them for: the bins, the prior, the threshold
and the chance guesses).

``--kermany FOLDER``: the arm and data of configs/reproductions/004_high_budget_kermany.yaml instead, read by dpmed as
that study reads them (64 px grey, its patient split of the train folder): the patient as the unit, q = B / N and
T = epochs x round(N / B) over the N training patients, delta = min(1e-5, 1 / (10 N)), C as the study's dp-sgd arm.
As the study's attack does (``dpmed.attack.attack_arm``), batches of held-out test images go through the step, each
patient's images clipped together, ``--batch`` defaulting to B test patients' worth of images and ``--bins`` to
4 per image as far as the validation images (the adversary's public images) reach. Unlike the study, N is the exact
count and sigma is calibrated to the whole eps: the study plans from a DP count of N and spends eps 0.02 on it, which
moves sigma by far less than the high budgets' steps do (the PneumoniaMNIST arm above does likewise).

This is a benchmark, not a test: the table goes to stdout and the numbers to ``--out`` (no image is written).

Measured figures, each row's command and their spread over seeds: benchmarks/RESULTS.md, "A decoder that uses the
adversary's prior" (the numbers in benchmarks/results-attack-cpu.json). ``--seed S`` makes one repetition
reproducible (the model's initialisation, the batches, the imprint pattern, the threshold and the step noise all from
S; every row names its seed); without it the public seed is 0 and the step noise is fresh. ``--epsilons ""`` runs the
two reference rows alone, ``--no-references`` leaves them out.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from dpmed.accounting import default_delta, dp_sgd_schedule, noise_multiplier_for
from dpmed.attack import attack_batch_size, calibrate_threshold, noise_level_at, run_imprint_attack
from dpmed.config import load_study
from dpmed.data import read_medmnist
from dpmed.errors import DpmedError
from dpmed.mechanisms import DpSgdPlan
from dpmed.models.registry import build_model
from dpmed.randomness import PrivacyRandomness
from dpmed.study import load_study_data

N_TRAIN, EXPECTED_BATCH, STEPS, DELTA = 4708, 128, 370, 1e-5
KERMANY_STUDY = Path(__file__).resolve().parents[1] / "configs" / "reproductions" / "004_high_budget_kermany.yaml"


@dataclass(frozen=True)
class Target:
    """What the attack puts through the arm's step (``images`` [N, C, H, W], ``labels``, a patient id per image in
    ``groups`` where the patient is the unit), the adversary's ``public`` images, and the arm: q = expected_batch /
    n_train, T = steps, delta, C = max_grad_norm; ``batch`` attacked images per step in ``bins`` brightness bins.
    ``about``: what the record says of the arm beyond q, T and delta."""

    images: np.ndarray
    labels: np.ndarray
    groups: np.ndarray | None
    public: np.ndarray
    n_train: int
    expected_batch: int
    steps: int
    delta: float
    max_grad_norm: float
    batch: int
    bins: int
    about: dict = field(default_factory=dict)

    def sigma_for(self, eps: float) -> float:
        return noise_multiplier_for(target_epsilon=eps, delta=self.delta, steps=self.steps,
                                    sample_rate=self.expected_batch / self.n_train,
                                    accountant="pld" if eps <= 500 else "rdp")


def pneumoniamnist(path: str, batch: int | None, bins: int | None) -> Target:
    """PneumoniaMNIST's arm (q = 128 / 4708, T = 370, the image as the unit) on its training images."""
    if not Path(path).is_file():   # dpmed's own message names the study's --data-path, not this flag
        raise SystemExit(f"--data {path}: no such file; pass PneumoniaMNIST's pneumoniamnist.npz")
    try:
        data = read_medmnist(path)
    except DpmedError as exc:
        raise SystemExit(f"--data: {exc}") from None
    images, labels = data.train.images, data.train.labels
    if len(images) != N_TRAIN:      # q and T above are PneumoniaMNIST's; on another set they would be no arm at all
        raise SystemExit(f"{path}: {len(images)} training images; the arm is PneumoniaMNIST's (q = "
                         f"{EXPECTED_BATCH} / {N_TRAIN}, T = {STEPS}): pass pneumoniamnist.npz with --data")
    batch = EXPECTED_BATCH if batch is None else batch
    return Target(images=images, labels=labels, groups=None, public=np.concatenate([data.val.images, data.test.images]),
                  n_train=N_TRAIN, expected_batch=EXPECTED_BATCH, steps=STEPS, delta=DELTA, max_grad_norm=1.0,
                  batch=batch, bins=4 * batch if bins is None else bins)


def kermany(folder: str, batch: int | None, bins: int | None) -> Target:
    """The arm and attack of 004_high_budget_kermany.yaml on the Kermany folders (the module's docstring)."""
    if not Path(folder).is_dir():
        raise SystemExit(f"--kermany {folder}: no such folder; pass the Kermany chest_xray folder (train/ and test/ "
                         "in it)")
    try:
        study = load_study(KERMANY_STUDY, {"data.path": str(folder)})
        data = load_study_data(study)
    except DpmedError as exc:
        raise SystemExit(f"--kermany: {exc}") from None
    (arm,) = (a for a in study.arms if a.mechanism == "dp_sgd")
    n_train = len(np.unique(data.train.patient_ids))
    expected = arm.batch_size or study.training.batch_size
    if n_train < expected:      # the accountant's own refusal names a study key this harness does not read
        raise SystemExit(f"--kermany {folder}: {n_train} training patients, fewer than the arm's expected batch of "
                         f"{expected} ({KERMANY_STUDY.name}); pass the whole Kermany chest_xray folder")
    q, steps = dp_sgd_schedule(n_train, batch_size=expected, epochs=arm.epochs or study.training.epochs)
    delta = arm.delta or default_delta(n_train)
    (c,) = arm.max_grad_norm
    if batch is None:   # B test patients' worth of test images, as the study's attack
        plan = DpSgdPlan(noise_multiplier=1.0, max_grad_norm=c, sample_rate=q, steps=steps, unit=arm.privacy_unit,
                         expected_batch_size=expected, n_units=n_train)
        try:
            batch = attack_batch_size(data, plan)
        except DpmedError:      # its message names the study's keys, which this harness does not read
            raise SystemExit(f"--kermany {folder}: {len(data.val)} validation images, too few to calibrate the "
                             f"attack on {expected} test patients' worth of test images; pass the whole Kermany "
                             f"chest_xray folder, or a --batch below {len(data.val)}") from None
    return Target(images=data.test.images, labels=data.test.labels, public=data.val.images,
                  groups=data.test.patient_ids if arm.privacy_unit == "patient" else None,
                  n_train=n_train, expected_batch=expected, steps=steps, delta=delta, max_grad_norm=c, batch=batch,
                  bins=max(2, min(4 * batch, len(data.val))) if bins is None else bins,
                  about={"data": f"Kermany at {study.data.image_size} px ({KERMANY_STUDY.name}): held-out test "
                                 "images attacked, validation images public", "unit": arm.privacy_unit,
                         "max_grad_norm": c, "attacked_images": len(data.test.images),
                         "attacked_patients": len(np.unique(data.test.patient_ids)),
                         "public_images": len(data.val.images)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    data = parser.add_mutually_exclusive_group()
    data.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data" /
                                            "pneumoniamnist" / "pneumoniamnist.npz"))
    data.add_argument("--kermany", default=None, metavar="FOLDER",
                      help="attack Kermany test images at 64 px with 004_high_budget_kermany.yaml's arm instead")
    parser.add_argument("--epsilons", default="1,8,1e6,1e9,1e12,1e15")
    parser.add_argument("--structures", default="cumulative,sparse")
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--batch", type=int, default=None, help=f"default {EXPECTED_BATCH}; --kermany: the study's")
    parser.add_argument("--bins", type=int, default=None, help="default 4 x --batch; --kermany: the study's")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=None,
                        help="one repetition: the model's initialisation, the batches, the imprint pattern, the "
                             "threshold and the step noise, all from S (the noise is then not DP against anyone who "
                             "knows S). Without it: public seed 0 and fresh noise from OS entropy")
    parser.add_argument("--no-references", action="store_true",
                        help="leave out the no-privacy and clipping-only rows (noise-free: one seed measures them)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    target = (pneumoniamnist(args.data, args.batch, args.bins) if args.kermany is None else
              kermany(args.kermany, args.batch, args.bins))
    images, public = target.images, target.public
    # the public images calibrate the threshold (a batch of others each draw) and the bins: beyond them is a traceback
    most = min(len(images), len(public) - 1)
    if not 1 <= target.batch <= most:
        raise SystemExit(f"--batch {target.batch}: pass 1 to {most} (the threshold compares a public image with "
                         f"--batch others of the {len(public)} public images)")
    if not 2 <= target.bins <= len(public):
        raise SystemExit(f"--bins {target.bins}: pass 2 to {len(public)} (equal-mass bins of the brightness of the "
                         f"{len(public)} public images)")
    if target.about:
        print(f"arm: {target.n_train} training {target.about['unit']}s, q = {target.expected_batch} / "
              f"{target.n_train}, T = {target.steps}, delta {target.delta:g}, C = {target.max_grad_norm:g}; attacked: "
              f"batches of {target.batch} of the {target.about['attacked_images']} test images "
              f"({target.about['attacked_patients']} patients); {target.bins} bins from {len(public)} public images")

    seed = 0 if args.seed is None else args.seed

    def body() -> torch.nn.Module:
        return build_model("small_cnn", in_channels=images.shape[1], num_outputs=2, image_size=images.shape[2],
                           seed=seed)

    t0 = time.time()
    threshold = calibrate_threshold(public, batch_size=target.batch, rng=np.random.default_rng(seed))
    pixel_sd = noise_level_at(threshold.value, public[:64], rng=np.random.default_rng(seed))
    print(f"threshold: SSIM {threshold.value:.3f} (the {threshold.quantile:.0%} quantile of the best SSIM of an "
          f"unrelated public image against {target.batch} others; median {threshold.null_median:.3f}); a noisy copy "
          f"passes up to pixel noise sd {pixel_sd:.2f}  [{time.time() - t0:.0f} s]")

    c = target.max_grad_norm
    rows = [] if args.no_references else [("no privacy (C = inf)", None, math.inf, 0.0),
                                          (f"clipping only (C = {c:g})", None, c, 0.0)]
    rows += [(f"eps {float(e):g}", float(e), c, target.sigma_for(float(e))) for e in args.epsilons.split(",") if e]
    results = []
    noise = "fresh (OS entropy)" if args.seed is None else f"from seed {args.seed}"
    print(f"seed {seed} (model, batches, pattern, threshold); step noise {noise}")
    print("| structure | arm | seed | sigma | rate [95% CI] | per batch | chance | mean best SSIM | mean NCC | s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for structure in args.structures.split(","):
        for label, eps, c, sigma in rows:
            t = time.time()
            randomness = (PrivacyRandomness.secure() if args.seed is None else
                          PrivacyRandomness.reproducible(seed=args.seed, run_id=f"attack/{structure}/{label}"))
            r = run_imprint_attack(model_factory=body, images=images, labels=target.labels, public_images=public,
                                   max_grad_norm=c, noise_multiplier=sigma, expected_batch_size=target.expected_batch,
                                   batch_size=target.batch, n_batches=args.batches, n_bins=target.bins,
                                   groups=target.groups, structure=structure, seed=seed, threshold=threshold,
                                   randomness=randomness)
            seconds = time.time() - t
            print(f"| {structure} | {label} | {seed} | {sigma:.3g} | {r.rate:.3f} [{r.ci[0]:.3f}, {r.ci[1]:.3f}] "
                  f"({r.n_success}/{r.n_trials}) | {r.batch_successes}/{r.n_batches} | {r.chance_rate:.3f} | "
                  f"{r.mean_best_ssim:.3f} | {r.mean_best_ncc:.3f} | {seconds:.0f} |", flush=True)
            results.append({"arm": label, "epsilon": eps, "seed": seed, "noise": noise, "seconds": seconds,
                            **r.to_dict()})

    record = {
        "machine": {"platform": platform.platform(), "processor": platform.processor(), "cpus": os.cpu_count(),
                    "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
                    "load_average_end": os.getloadavg()},
        "arm": {"n_train": target.n_train, "expected_batch_size": target.expected_batch, "steps": target.steps,
                "delta": target.delta, **target.about},
        "threshold": threshold.value, "threshold_pixel_noise_sd": pixel_sd, "total_seconds": time.time() - t0,
        "rows": results,
    }
    if args.out:
        Path(args.out).write_text(json.dumps(record, indent=1), encoding="utf-8")
    print(f"total {time.time() - t0:.0f} s; load average at end {os.getloadavg()}")


if __name__ == "__main__":
    main()
