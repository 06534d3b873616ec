"""The auto planner's arity search: never far from the exhaustive choice, exact where it matters."""
import math

import pytest

import fastpld
from fastpld.composition import api, budget, cost, plan as plan_mod, planner


def _budgets(de):
    return budget._Budgets.split(0.1, de)


@pytest.mark.parametrize("de", [1e-10, 1e-7])
@pytest.mark.parametrize("kind", ["laplace", "psg", "gaussian"])
def test_arity_search_close_to_exhaustive(kind, de):
    b = _budgets(de)
    log_term, eps_az = math.log(2 / b.eta), 0.1 * (1 - budget._EPS_RESERVE)
    for e in (6, 10, 13, 16, 17, 19, 22, 26):
        k = 2 ** e
        noise = math.sqrt(k / 65536)
        mech = {"laplace": lambda: fastpld.Laplace(1081.3 * noise),
                "psg": lambda: fastpld.PoissonSubsampledGaussian(216.3 * noise, 0.2),
                "gaussian": lambda: fastpld.Gaussian(4.3 * noise)}[kind]()
        parts = list(api._direction_parts(api._normalise_events(mech, k)).values())[0]
        chosen = planner._choose_plan(parts, "auto", None, eps_az, log_term, b, True)[0][0]
        chains, _ = planner._candidates("auto", parts)
        costs = []
        for ch in chains:  # every candidate, predicted independently
            plan = plan_mod._build_plan(parts, ch[0], ch[1], None, True)
            n = plan.n_nodes + plan.n_leaves
            costs.append(cost._predict(plan, eps_az, log_term, b.wrap / n, b.trunc / n, {}, b, True)[1])
        best = min(costs)
        if best >= planner._EARLY_STOP_US:  # dear compositions: the exhaustive choice
            assert chosen == pytest.approx(best, rel=1e-12)
        else:  # cheap ones: at most ~0.1 ms per skipped candidate may be lost
            assert chosen <= best + 100.0 * len(chains)
