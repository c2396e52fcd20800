"""What each part of the private training recipe gains: one study trained as several variants (each a list of
``--set`` overrides of the study file), several seeds each, and a table of test AUROC per variant and arm value
(mean and spread over seeds) with the difference to the first variant paired by seed.

    python benchmarks/utility_ablation.py configs/pneumoniamnist.yaml --out ablation-pneumonia \
        [--seeds 0,1,2] [--variants shipped,schedule] [--data-path FILE] [--arms dp-only] [--threads 1] \
        [--set KEY=VALUE ...]

Each variant is a `dpmed run` of its own in ``OUT/<variant>`` (resumable: a variant that finished is read, not
retrained). The variants are listed in VARIANTS below: from `shipped` to `schedule` each adds one part of De et al.
2022's recipe (METHODS.md s.9) to the one before, `ws` and `augment` then swap in weight-standardised convolutions
and add augmentation multiplicity; the ScatterNet variants swap the model of `schedule` for frozen scattering
features (Tramer and Boneh 2021); `no-pretrain` drops a study's public pretraining instead. The shipped real-data
studies already train the full recipe with ScatterNet, so the ablation starts from the recipe they shipped with
before (benchmarks/RESULTS.md, "Utility under DP"):

    python benchmarks/utility_ablation.py configs/pneumoniamnist.yaml --out ablation-pneumonia --arms dp-only \
        --set model.name=small_cnn --set training.epochs=10 --set training.ema_decay=null \
        --set "training.lr_schedule={kind: constant}"

Nothing here was tuned on the evaluation data: the settings are De et al.'s (EMA 0.999, augmentation multiplicity,
warm-up and cosine decay), Tramer and Boneh's (J = 2, L = 8) and dpmed's defaults.

``--set`` overrides apply to every variant before the variant's own (to start the ablation from another recipe
than the study file's, e.g. the one it shipped before). This is a benchmark, not a test: the table goes to stdout,
the numbers to OUT/ablation.json.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

# De et al. 2022's free parts: the default length, the EMA of the iterates, warm-up then cosine decay.
_SCHEDULE = ["training.epochs=auto", "training.ema_decay=0.999",
             "training.lr_schedule={kind: cosine, warmup_fraction: 0.05}"]
# Cumulative up to `schedule`: each variant is the previous one plus one part; `ws` and `augment` build on `schedule`.
VARIANTS: dict[str, list[str]] = {
    "shipped": [],
    "steps": _SCHEDULE[:1],
    "ema": _SCHEDULE[:2],
    "schedule": _SCHEDULE,
    "ws": [*_SCHEDULE, "model.name=small_cnn_ws"],
    "augment": [*_SCHEDULE, "model.name=small_cnn_ws", "training.augmentation={multiplicity: 4}"],
    # Not cumulative: `schedule` with the model swapped for frozen scattering features and a small head (Tramer and
    # Boneh 2021), their answer to small data without public data.
    "scatternet-linear": [*_SCHEDULE, "model.name=scatternet_linear"],
    "scatternet-cnn": [*_SCHEDULE, "model.name=scatternet_cnn"],
    # Not cumulative: a study with a pretrain section (configs/kermany_pretrained.yaml) without it, so that the
    # paired difference to `shipped` is minus what the public prior gains.
    "no-pretrain": ["pretrain=null"],
}
DP_ONLY = ("arms=[{name: non-private, mechanism: none}, {name: dp-sgd, mechanism: dp_sgd, target_epsilon: [1, 8], "
           "max_grad_norm: 1.0, learning_rate: 0.002}]")


def _value(row: dict[str, str]) -> str:
    """The arm and its swept value without the seed: dp-sgd_eps8_C1_seed2 -> dp-sgd_eps8_C1."""
    return row["run_id"].rsplit("_seed", 1)[0]


def run_variant(study: str, name: str, overrides: list[str], args: argparse.Namespace) -> float:
    seeds = "[" + ",".join(args.seeds.split(",")) + "]"
    cmd = [sys.executable, "-m", "dpmed", "run", study, "--out", str(Path(args.out) / name), "--no-progress",
           "--set", f"seeds={seeds}", "--set", f"name=ablation-{name}", "--set", f"training.threads={args.threads}"]
    if args.data_path:
        cmd += ["--data-path", args.data_path]
    if args.arms == "dp-only":
        cmd += ["--set", DP_ONLY]
    for o in [*args.set, *overrides]:
        cmd += ["--set", o]
    start = time.perf_counter()
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True)
    return time.perf_counter() - start


def read_variant(out: Path, name: str) -> dict[str, dict[int, dict[str, float]]]:
    """{arm value: {seed: {test_auroc, test_accuracy}}} from the variant's results.csv."""
    table: dict[str, dict[int, dict[str, float]]] = {}
    with open(out / name / f"ablation-{name}" / "results.csv", newline="") as f:
        for row in csv.DictReader(f):
            table.setdefault(_value(row), {})[int(row["seed"])] = {
                "test_auroc": float(row["test_auroc"]), "test_accuracy": float(row["test_accuracy"])}
    return table


def _spread(values: list[float]) -> str:
    if not values:
        return "–"
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.3f} ± {sd:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("study")
    parser.add_argument("--out", required=True)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--data-path")
    parser.add_argument("--arms", choices=("study", "dp-only"), default="study",
                        help="the study's arms, or dp-only: the non-private arm and DP-SGD at eps 1 and 8")
    parser.add_argument("--threads", default="1", help="training.threads of every run")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="an override of the study file for every variant, before the variant's own (repeatable)")
    args = parser.parse_args()
    names = args.variants.split(",")
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"unknown variant(s) {unknown}; known: {', '.join(VARIANTS)}")
    out = Path(args.out)
    seconds = {name: run_variant(args.study, name, VARIANTS[name], args) for name in names}
    tables = {name: read_variant(out, name) for name in names}
    base = tables[names[0]]
    rows = []
    print(f"\n| variant | arm | test AUROC (mean ± sd) | accuracy | minus {names[0]}, paired by seed | seeds |")
    print("|---|---|---|---|---|---|")
    for name in names:
        for value, by_seed in sorted(tables[name].items()):
            aurocs = [m["test_auroc"] for m in by_seed.values()]
            paired = [by_seed[s]["test_auroc"] - base[value][s]["test_auroc"] for s in by_seed
                      if value in base and s in base[value]]
            diff = "–" if name == names[0] or not paired else _spread(paired).replace("0.", "+0.", 1) \
                if statistics.mean(paired) >= 0 else _spread(paired)
            print(f"| {name} | {value} | {_spread(aurocs)} | {_spread([m['test_accuracy'] for m in by_seed.values()])}"
                  f" | {diff} | {len(by_seed)} |")
            rows.append({"variant": name, "value": value, "by_seed": by_seed, "paired_auroc_difference": paired})
    (out / "ablation.json").write_text(json.dumps({"study": args.study, "variants": {n: VARIANTS[n] for n in names},
                                                   "seconds": seconds, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
