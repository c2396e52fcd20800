"""How often the imprint attack (Fowl et al. 2022) reconstructs PneumoniaMNIST training images from one DP-SGD step,
at the noise multipliers of eps 1, 8, 1e6, 1e9, 1e12, 1e15 (004_6210268d59b6f8e5.txt's high budgets).

    python benchmarks/reconstruction_attack.py [--data ../shared/data/pneumoniamnist/pneumoniamnist.npz]
        [--epsilons 1,8,1e6,1e9,1e12,1e15] [--structures cumulative,sparse] [--batches 4] [--batch 128]
        [--bins 512] [--threads 1] [--seed S] [--no-references] [--out benchmarks/results-attack-<machine>.json]

The arm: Poisson rate q = 128 / 4708 (the expected batch of 128 over the 4708 training images), T = 370 steps
(about 10 epochs), delta = 1e-5, C = 1; sigma from ``dpmed.accounting.noise_multiplier_for`` (PLD up to eps 500,
RDP above). Two reference rows: no clipping and no noise (C = inf, sigma = 0), and clipping alone (C = 1, sigma = 0).
For each row ``--batches`` batches of ``--batch`` training images go through one step of the arm with the adversary's
imprinted model (``dpmed.attack``): the body is a freshly initialised small_cnn (the attack reads the first step it
is handed; the body is frozen, so its weights only set each image's gradient scale, which clipping removes). The
adversary's public images are the val and test splits (MedMNIST's splits are not documented as patient-disjoint:
they stand for "the same kind of images", which is all the attack uses them for: the bins, the prior, the threshold
and the chance guesses).

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
from pathlib import Path

import numpy as np
import torch

from dpmed.accounting import noise_multiplier_for
from dpmed.attack import calibrate_threshold, noise_level_at, run_imprint_attack
from dpmed.data import read_medmnist
from dpmed.errors import DataError
from dpmed.models.registry import build_model
from dpmed.randomness import PrivacyRandomness

N_TRAIN, EXPECTED_BATCH, STEPS, DELTA = 4708, 128, 370, 1e-5


def sigma_for(eps: float) -> float:
    return noise_multiplier_for(target_epsilon=eps, delta=DELTA, sample_rate=EXPECTED_BATCH / N_TRAIN, steps=STEPS,
                                accountant="pld" if eps <= 500 else "rdp")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data" /
                                              "pneumoniamnist" / "pneumoniamnist.npz"))
    parser.add_argument("--epsilons", default="1,8,1e6,1e9,1e12,1e15")
    parser.add_argument("--structures", default="cumulative,sparse")
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--batch", type=int, default=EXPECTED_BATCH)
    parser.add_argument("--bins", type=int, default=4 * EXPECTED_BATCH)
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

    if not Path(args.data).is_file():   # dpmed's own message names the study's --data-path, not this flag
        raise SystemExit(f"--data {args.data}: no such file; pass PneumoniaMNIST's pneumoniamnist.npz")
    try:
        data = read_medmnist(args.data)
    except DataError as exc:
        raise SystemExit(f"--data: {exc}") from None
    images, labels = data.train.images, data.train.labels
    public = np.concatenate([data.val.images, data.test.images])
    if len(images) != N_TRAIN:      # q and T above are PneumoniaMNIST's; on another set they would be no arm at all
        raise SystemExit(f"{args.data}: {len(images)} training images; the arm is PneumoniaMNIST's (q = "
                         f"{EXPECTED_BATCH} / {N_TRAIN}, T = {STEPS}): pass pneumoniamnist.npz with --data")

    seed = 0 if args.seed is None else args.seed

    def body() -> torch.nn.Module:
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            return build_model("small_cnn", in_channels=images.shape[1], num_outputs=2, image_size=images.shape[2])

    t0 = time.time()
    threshold = calibrate_threshold(public, batch_size=args.batch, rng=np.random.default_rng(seed))
    pixel_sd = noise_level_at(threshold.value, public[:64], rng=np.random.default_rng(seed))
    print(f"threshold: SSIM {threshold.value:.3f} (the {threshold.quantile:.0%} quantile of the best SSIM of an "
          f"unrelated public image against {args.batch} others; median {threshold.null_median:.3f}); a noisy copy "
          f"passes up to pixel noise sd {pixel_sd:.2f}  [{time.time() - t0:.0f} s]")

    rows = [] if args.no_references else [("no privacy (C = inf)", None, math.inf, 0.0),
                                          ("clipping only (C = 1)", None, 1.0, 0.0)]
    rows += [(f"eps {float(e):g}", float(e), 1.0, sigma_for(float(e))) for e in args.epsilons.split(",") if e]
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
            r = run_imprint_attack(model_factory=body, images=images, labels=labels, public_images=public,
                                   max_grad_norm=c, noise_multiplier=sigma, expected_batch_size=EXPECTED_BATCH,
                                   batch_size=args.batch, n_batches=args.batches, n_bins=args.bins,
                                   structure=structure, seed=seed, threshold=threshold, randomness=randomness)
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
        "arm": {"n_train": N_TRAIN, "expected_batch_size": EXPECTED_BATCH, "steps": STEPS, "delta": DELTA},
        "threshold": threshold.value, "threshold_pixel_noise_sd": pixel_sd, "total_seconds": time.time() - t0,
        "rows": results,
    }
    if args.out:
        Path(args.out).write_text(json.dumps(record, indent=1), encoding="utf-8")
    print(f"total {time.time() - t0:.0f} s; load average at end {os.getloadavg()}")


if __name__ == "__main__":
    main()
