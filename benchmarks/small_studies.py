"""What the DP count of the training set does to DP-SGD's plan in small studies: at each exact size N, the count's
relative error, q and T as planned from the count against what N would give, the share of counts at or below zero,
the share `dpmed.released_size.count_is_rough` calls rough, and the share it leaves quiet though the count is more
than half of itself away from N. Draws with the sampler the counts are drawn with (`dpmed.randomness`), from a
seeded public source; planning as `dpmed.mechanisms.dp_sgd` does it (N at least the batch B, T by epochs).

    python benchmarks/small_studies.py                      # eps 0.02, N = 50 ... 20,000, B = 64 and N / 8, 8 epochs
    python benchmarks/small_studies.py --size-epsilon 0.12  # eps 12 / n for a study of about 100
"""

from __future__ import annotations

import argparse
import random
from fractions import Fraction

import numpy as np

from dpmed.accounting import dp_sgd_schedule
from dpmed.mechanisms.base import training_steps
from dpmed.randomness import discrete_laplace
from dpmed.released_size import count_is_rough


def plan(n: int, batch: int, epochs: int) -> tuple[float, int]:
    """(q, T) as DP-SGD plans them from a count n (at least the batch: q <= 1)."""
    q, per_epoch = dp_sgd_schedule(max(n, batch), batch_size=batch, epochs=1)
    return q, training_steps(per_epoch, epochs=epochs, steps=None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-epsilon", type=float, default=0.02)
    parser.add_argument("--sizes", type=int, nargs="+", default=[50, 100, 200, 500, 2000, 20000])
    parser.add_argument("--draws", type=int, default=20000)
    parser.add_argument("--epochs", type=int, default=8)
    args = parser.parse_args()
    source = random.Random(0).randrange
    scale = 1 / Fraction(args.size_epsilon)
    print(f"size_epsilon {args.size_epsilon:g}, {args.draws} draws per N, {args.epochs} epochs; ratios are planned "
          "from the count over planned from N (5th, 50th, 95th percentiles)")
    print("| N | B | count <= 0 | rough | median, 95th pct of abs error / N | q ratio | T ratio | q off 2x or more | "
          "quiet but more than half off |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n in args.sizes:
        counts = np.array([n + discrete_laplace(scale, source) for _ in range(args.draws)])
        rough = np.array([count_is_rough(int(c), args.size_epsilon) for c in counts])
        error = np.abs(counts - n) / n
        for batch in sorted({64, max(4, n // 8)}):
            if batch > n:
                continue
            q0, t0 = plan(n, batch, args.epochs)
            planned = {int(c): plan(int(c), batch, args.epochs) for c in np.unique(counts)}
            q = np.array([planned[int(c)][0] for c in counts]) / q0
            t = np.array([planned[int(c)][1] for c in counts]) / t0
            off = np.abs(counts - n) > counts / 2
            pct = "{:.2f} / {:.2f} / {:.2f}".format
            print(f"| {n:,} | {batch} | {np.mean(counts <= 0):.1%} | {rough.mean():.1%} | {np.median(error):.2f}, "
                  f"{np.percentile(error, 95):.2f} | {pct(*np.percentile(q, [5, 50, 95]))} | "
                  f"{pct(*np.percentile(t, [5, 50, 95]))} | {np.mean((q >= 2) | (q <= 0.5)):.1%} | "
                  f"{np.mean(off & ~rough):.1%} |")


if __name__ == "__main__":
    main()
