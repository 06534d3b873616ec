"""Planner equality sweep: the ranked plans of ``compose``'s planner before and after a change.

Dumps ``_choose_plan``'s ranked output (cost, plan tree, meshes; both directions, the second
reusing the first's chain and grouping as ``compose`` does) for 800 cases: heterogeneous
schedules of n in {2, 5, 50, 200, 1000} parts (PSG with one sigma and spread q at count 10;
PSG with random sigma, q and counts 1..1000; PSG/PSL/Gaussian/Laplace mixes; count 1 each),
the single-mechanism sweep of Laplace, PSG and Gaussian at k = 2^2 .. 2^29, and 20 distinct PSG
parts; each at eps_error 0.1/0.01, delta_error 1e-8/1e-10, native and numpy grids.  Floats are
compared bitwise (hex).  Planning only (about a minute); nothing is executed.

    PYTHONPATH=/path/to/old/src python benchmarks/plan_sweep.py dump old.pkl
    PYTHONPATH=/path/to/new/src python benchmarks/plan_sweep.py dump new.pkl
    python benchmarks/plan_sweep.py cmp old.pkl new.pkl
"""
import sys, math, pickle, time, warnings
import numpy as np
warnings.simplefilter("ignore")

def ser_plan(plan, parts):
    from fastpld.composition import plan as plan_mod
    idx = {id(o): i for i, o in enumerate(plan.order)}
    lidx = {id(l): i for i, (l, _) in enumerate(parts)}
    objs = []
    for o in plan.order:
        if isinstance(o, plan_mod._Leaf):
            objs.append(("L", o.group, o.count, lidx[id(o.loss)]))
        else:
            objs.append(("N", o.group, o.label, o.count, tuple((idx[id(c)], m) for c, m in o.children)))
    return (plan.method, repr(plan.params), tuple(objs))

def schedules(quick=False):
    import fastpld as F
    out = []
    for n in (2, 5, 50, 200, 1000):
        for kind in ("psg_eq10", "psg_var", "mix", "ones"):
            rng = np.random.default_rng(1000 * n + len(kind))
            ev = []
            for i in range(n):
                if kind == "psg_eq10":
                    ev.append((F.PoissonSubsampledGaussian(1.0, float(np.linspace(0.005, 0.02, n)[i])), 10))
                    continue
                c = 1 if kind == "ones" else int(np.exp(rng.uniform(0, math.log(1000))))
                if kind in ("psg_var", "ones"):
                    m = F.PoissonSubsampledGaussian(float(rng.uniform(0.6, 3.0)), float(rng.uniform(0.001, 0.1)))
                else:
                    r = rng.integers(4)
                    m = (F.PoissonSubsampledGaussian(float(rng.uniform(0.6, 3.0)), float(rng.uniform(0.001, 0.1))) if r == 0
                         else F.Gaussian(float(rng.uniform(5.0, 200.0))) if r == 1
                         else F.Laplace(float(rng.uniform(20.0, 500.0))) if r == 2
                         else F.PoissonSubsampledLaplace(float(rng.uniform(1.0, 5.0)), float(rng.uniform(0.001, 0.05))))
                ev.append((m, c))
            out.append((f"n{n}-{kind}", ev))
    # the lead's single-mechanism sweep (best3.py) for the single-part path
    for e in range(2, 31, 3 if not quick else 9):
        k = 2 ** e
        out.append((f"lap-{e}", [(F.Laplace(1081.3 * math.sqrt(k / 65536) * (1.15 if k < 256 else 1)), k)]))
        out.append((f"psg-{e}", [(F.PoissonSubsampledGaussian(216.3 * math.sqrt(k / 65536) * (1.15 if k < 256 else 1), 0.2), k)]))
        out.append((f"gau-{e}", [(F.Gaussian(216.3 * math.sqrt(k / 65536) * (1.15 if k < 256 else 1) / 50), k)]))
        out.append((f"het20-{e}", [(F.PoissonSubsampledGaussian(1.0, 0.005 + 0.015 * i / 19), max(k // 1000, 1)) for i in range(20)]))
    return out

def dump(path, quick=False):
    from fastpld.composition import api, budget, planner
    from fastpld import mechanisms as M
    res = {}
    t0 = time.process_time()
    plan_t = 0.0
    for name, ev in schedules(quick):
        for ee in (0.1, 0.01):
            for de in (1e-8, 1e-10):
                for nat in (True, False):
                    if quick and (ee, de) == (0.01, 1e-8):
                        continue
                    M._LOSS_CACHE.clear()
                    b = budget._Budgets(eps=ee, delta=de, eta=budget._SHARE_ETA * de, trunc=budget._SHARE_TRUNC * de,
                                   wrap=budget._SHARE_WRAP * de, fp=budget._SHARE_FP * de)
                    lt = math.log(2.0 / b.eta); eaz = ee * (1 - budget._EPS_RESERVE)
                    events = api._normalise_events(ev, None)
                    reuse = None
                    for d, parts in api._direction_parts(events).items():
                        t = time.process_time()
                        if reuse is None:
                            r = planner._choose_plan(parts, "auto", None, eaz, lt, b, nat)
                        else:
                            r = planner._choose_plan(parts, reuse[0], reuse[1], eaz, lt, b, nat, merge=reuse[2])
                        plan_t += time.process_time() - t
                        p = r[0][1]
                        if reuse is None:
                            reuse = (p.method, p.params[0].get("arity"), p.params[0].get("merge"))
                        res[(name, ee, de, nat, d)] = [(float(c).hex(), ser_plan(pl, parts),
                                                        tuple(sorted((g, float(v).hex()) for g, v in m.items())))
                                                       for c, pl, m in r]
    with open(path, "wb") as f:
        pickle.dump(res, f)
    print(f"{len(res)} cases, planning {plan_t:.1f} s, total {time.process_time() - t0:.1f} s")

def cmp(a, b):
    A, B = pickle.load(open(a, "rb")), pickle.load(open(b, "rb"))
    assert A.keys() == B.keys(), (len(A), len(B))
    bad_choice = bad_rank = 0
    for k in A:
        x, y = A[k], B[k]
        if x[0] != y[0]:
            bad_choice += 1
            print("CHOICE DIFFERS", k, float.fromhex(x[0][0]), float.fromhex(y[0][0]), x[0][1][:2], y[0][1][:2])
        elif x != y:
            bad_rank += 1
            print("RANKED LIST DIFFERS", k, len(x), len(y))
    print(f"{len(A)} cases: chosen (cost, plan, meshes) identical in {len(A) - bad_choice}, full ranked lists identical in "
          f"{len(A) - bad_choice - bad_rank}")

if __name__ == "__main__":
    if sys.argv[1] == "dump":
        dump(sys.argv[2], len(sys.argv) > 3)
    else:
        cmp(sys.argv[2], sys.argv[3])
