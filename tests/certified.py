"""Checks shared by the tests of compositions the dominance certificate now answers: it answered, within the width
asked, and its interval agrees with an independent certificate (dp_accounting's, or fastpld's coupling one)."""
import fastpld


def dominance_epsilon(mechanism, count, rel_error=1e-3, delta=1e-5):
    """``epsilon(delta)`` of ``compose(mechanism, count, rel_error=...)``, checked to come from the dominance
    certificate and to be at most ``rel_error`` times epsilon wide (of 0.01 below epsilon 0.01, as asked)."""
    pld = fastpld.compose(mechanism, count, rel_error=rel_error)
    assert pld.method.startswith("dominance"), pld.method
    r = pld.epsilon(delta)
    assert r.upper - r.lower <= rel_error * max(r.lower, 0.01) * (1 + 1e-12), r
    return r


def laplace_peer(b, q, k, grid, delta=1e-5):
    """dp_accounting's epsilons of a Poisson-subsampled Laplace (noise ``b``, rate ``q``) composed ``k`` times:
    ``{True: pessimistic (an upper bound), False: optimistic (a lower bound)}``."""
    from dp_accounting.pld import privacy_loss_distribution as pldlib
    out = {}
    for pess in (True, False):
        one = pldlib.from_laplace_mechanism(b, sensitivity=1.0, sampling_prob=q, value_discretization_interval=grid,
                                            pessimistic_estimate=pess, use_connect_dots=pess)
        out[pess] = one.self_compose(k).get_epsilon_for_delta(delta)
    return out


def overlaps_coupling(mechanism, count, bounds, eps_error, delta=1e-5):
    """Whether ``bounds`` meet the coupling certificate's interval at ``eps_error`` (two certificates: they must)."""
    ref = fastpld.compose(mechanism, count, eps_error=eps_error, method="coupling").epsilon(delta)
    return bounds.lower <= ref.upper and ref.lower <= bounds.upper
