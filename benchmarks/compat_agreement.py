"""Agreement of the compat adapters with the real peer packages (numbers for docs/performance.md).

Run: python benchmarks/compat_agreement.py   (needs dp-accounting, prv-accountant; opacus optional)

Prints, per case, the peer's value next to fastpld's certified (lower, estimate, upper).
No timings: this is about numbers, not speed.
"""
import warnings

import dp_accounting as dpa
import prv_accountant as P
from dp_accounting.pld import PLDAccountant

from fastpld.compat import prv_accountant as F
from fastpld.compat.dp_accounting import FastPLDAccountant

R = dpa.NeighboringRelation
DELTA = 1e-5


def row(name, peer, b):
    inside = "yes" if b[0] <= peer <= b[2] else "NO"
    print(f"| {name} | {peer:.4f} | {b[0]:.4f} / {b[1]:.4f} / {b[2]:.4f} | {inside} |")


print(f"dp_accounting PLDAccountant (interval 1e-4) vs fastpld FastPLDAccountant(eps_error=0.01), epsilon at delta={DELTA:g}")
print("| case | dp_accounting | fastpld lower / estimate / upper | inside |\n|---|---|---|---|")
for name, ev, k, rel in [
    ("Gaussian(2.0) x50", dpa.GaussianDpEvent(2.0), 50, R.ADD_OR_REMOVE_ONE),
    ("PoissonSampled(0.01, Gaussian(1.0)) x1000", dpa.PoissonSampledDpEvent(0.01, dpa.GaussianDpEvent(1.0)), 1000,
     R.ADD_OR_REMOVE_ONE),
    ("PoissonSampled(0.05, Laplace(2.0)) x200", dpa.PoissonSampledDpEvent(0.05, dpa.LaplaceDpEvent(2.0)), 200,
     R.ADD_OR_REMOVE_ONE),
    ("Laplace(20) x100", dpa.LaplaceDpEvent(20.0), 100, R.ADD_OR_REMOVE_ONE),
    ("Gaussian(4.0) x50, REPLACE_ONE", dpa.GaussianDpEvent(4.0), 50, R.REPLACE_ONE),
    ("RandomizedResponse(0.5, 4) x30 (as Composed), REPLACE_ONE",
     dpa.ComposedDpEvent([dpa.RandomizedResponseDpEvent(0.5, 4)] * 30), 1, R.REPLACE_ONE),
]:
    ref = PLDAccountant(rel).compose(ev, k).get_epsilon(DELTA)
    row(name, ref, FastPLDAccountant(rel, eps_error=0.01).compose(ev, k).get_epsilon_bounds(DELTA))
rr = dpa.RandomizedResponseDpEvent(0.5, 4)
print(f"\nnote: dp_accounting PLDAccountant().compose(RR, 30).get_epsilon = "
      f"{PLDAccountant(R.REPLACE_ONE).compose(rr, 30).get_epsilon(DELTA):.4f} (count ignored for RR in 0.6.0)")

print(f"\nprv_accountant PRVAccountant vs fastpld.compat.prv_accountant (eps_error=0.1, delta_error=1e-10), "
      f"epsilon at delta={DELTA:g}")
print("| case | prv_accountant lower / estimate / upper | fastpld lower / estimate / upper |\n|---|---|---|")
cases = [
    ("PoissonSubsampledGaussian(0.01, 1.0) x1000", lambda M: [M.PoissonSubsampledGaussianMechanism(0.01, 1.0)], [1000]),
    ("Gaussian(10) x100", lambda M: [M.GaussianMechanism(10.0)], [100]),
    ("Laplace(mu=0.05) x100", lambda M: [M.LaplaceMechanism(0.05)], [100]),
    ("PureDP(0.1) x100", lambda M: [M.PureDPMechanism(0.1)], [100]),
    ("ApproximateDP(0.1, 1e-8) x100", lambda M: [M.ApproximateDPMechanism(0.1, 1e-8)], [100]),
    ("PSG x500 + Gaussian(20) x20 + Laplace(0.02) x30",
     lambda M: [M.PoissonSubsampledGaussianMechanism(0.01, 1.0), M.GaussianMechanism(20.0), M.LaplaceMechanism(0.02)],
     [500, 20, 30]),
]
for name, mk, ks in cases:
    p = P.PRVAccountant(mk(P), max_self_compositions=ks, eps_error=0.1, delta_error=1e-10).compute_epsilon(DELTA, ks)
    f = F.PRVAccountant(mk(F), max_self_compositions=ks, eps_error=0.1, delta_error=1e-10).compute_epsilon(DELTA, ks)
    print(f"| {name} | {p[0]:.4f} / {p[1]:.4f} / {p[2]:.4f} | {f[0]:.4f} / {f[1]:.4f} / {f[2]:.4f} |")

try:
    from opacus.accountants import PRVAccountant as OpacusPRV

    import fastpld.compat.opacus as fo
except ImportError:
    print("\n(opacus not installed: skipped)")
else:
    print(f"\nOpacus PRVAccountant vs fastpld.compat.opacus.FastPLDAccountant (both eps_error=0.01), history "
          f"[(1.0, 0.01, 1000), (1.2, 0.02, 500)], epsilon at delta={DELTA:g}")
    ours, ref = fo.FastPLDAccountant(), OpacusPRV()
    ours.history = ref.history = [(1.0, 0.01, 1000), (1.2, 0.02, 500)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        e_ref = ref.get_epsilon(DELTA)
    b = ours.get_epsilon_bounds(DELTA)
    print(f"opacus prv (upper) {e_ref:.4f}; fastpld {b.lower:.4f} / {b.estimate:.4f} / {b.upper:.4f}")
