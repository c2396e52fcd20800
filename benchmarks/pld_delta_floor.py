"""How small a delta dp_accounting's PLD resolves after T steps: eps at three PLD grids beside RDP's bound.

Where the three grids disagree, or PLD comes out above RDP (which a correct PLD never does), the eps PLD returns at
that delta is rounding noise; dpmed's accounting (`dpmed.accounting.epsilon`, _PLD_MIN_DELTA) serves PLD only above
that floor. Pure dp_accounting, no dpmed code, so it checks the floor against the library itself.

    python benchmarks/pld_delta_floor.py            # q = 0.01, sigma = 1, T = 1e3, 1e4, 1e5
"""

from __future__ import annotations

import argparse
import math

from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.privacy_accountant import NeighboringRelation
from dp_accounting.rdp import rdp_privacy_accountant

GRIDS = (1e-3, 5e-4, 2.5e-4)


def event(q: float, sigma: float, steps: int):
    return dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), steps)


def pld_epsilon(q: float, sigma: float, steps: int, delta: float, h: float) -> float:
    accountant = pld_privacy_accountant.PLDAccountant(NeighboringRelation.ADD_OR_REMOVE_ONE,
                                                      value_discretization_interval=h)
    return accountant.compose(event(q, sigma, steps)).get_epsilon(delta)


def rdp_epsilon(q: float, sigma: float, steps: int, delta: float) -> float:
    return rdp_privacy_accountant.RdpAccountant().compose(event(q, sigma, steps)).get_epsilon(delta)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--q", type=float, default=0.01)
    parser.add_argument("--sigma", type=float, default=1.0)
    parser.add_argument("--steps", default="1000,10000,100000")
    parser.add_argument("--deltas", default="1e-10,1e-11,1e-12,1e-13,1e-14,1e-15")
    args = parser.parse_args()
    print("| T | delta | PLD eps at h = 1e-3, 5e-4, 2.5e-4 | spread (max/min - 1) | RDP eps | PLD above RDP |")
    print("|---|---|---|---|---|---|")
    for steps in (int(float(s)) for s in args.steps.split(",")):
        for delta in (float(d) for d in args.deltas.split(",")):
            eps = [pld_epsilon(args.q, args.sigma, steps, delta, h) for h in GRIDS]
            bound = rdp_epsilon(args.q, args.sigma, steps, delta)
            if all(math.isfinite(e) for e in eps) and min(eps) > 0:
                spread, above = f"{max(eps) / min(eps) - 1:.2%}", "yes" if max(eps) > bound else "no"
            else:              # a grid that cannot resolve this delta at all: no spread, and no verdict against RDP
                spread = above = "– (inf)"
            print(f"| {steps:g} | {delta:g} | {', '.join(f'{e:.4g}' for e in eps)} | {spread} | {bound:.4g} | "
                  f"{above} |")


if __name__ == "__main__":
    main()
