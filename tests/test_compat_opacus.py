"""fastpld.compat.opacus with the real Opacus (CPU torch)."""
import math

import pytest

pytest.importorskip("torch")
opacus = pytest.importorskip("opacus")

from opacus.accountants import IAccountant, PRVAccountant, create_accountant  # noqa: E402
from opacus.accountants.utils import get_noise_multiplier  # noqa: E402

import fastpld.compat.opacus as fo  # noqa: E402  (registers "fastpld")


def test_registered_and_interface():
    acc = create_accountant("fastpld")
    assert isinstance(acc, fo.FastPLDAccountant) and isinstance(acc, IAccountant)
    assert acc.mechanism() == fo.FastPLDAccountant.mechanism() == "fastpld"
    fo.register()  # idempotent
    assert type(create_accountant("fastpld")) is fo.FastPLDAccountant
    assert acc.get_epsilon(1e-5) == 0.0 and len(acc) == 0


def test_history_state_dict_and_agreement():
    ours, ref = fo.FastPLDAccountant(), PRVAccountant()
    for acc in (ours, ref):
        for _ in range(300):
            acc.step(noise_multiplier=1.0, sample_rate=0.01)
        for _ in range(100):
            acc.step(noise_multiplier=1.2, sample_rate=0.02)
    assert ours.history == ref.history == [(1.0, 0.01, 300), (1.2, 0.02, 100)]
    assert len(ours) == len(ref) == 2
    b = ours.get_epsilon_bounds(1e-5)
    e_ref = ref.get_epsilon(1e-5)  # opacus PRV: upper bound, eps_error 0.01, remove direction only
    assert ours.get_epsilon(1e-5) == b.upper
    assert b.lower <= e_ref and abs(b.upper - e_ref) <= 2 * 0.01
    # state dicts round-trip and are checked by mechanism name
    sd = ours.state_dict()
    assert sd["mechanism"] == "fastpld" and sd["history"] == ours.history
    other = fo.FastPLDAccountant()
    other.load_state_dict(sd)
    assert other.get_epsilon(1e-5) == ours.get_epsilon(1e-5)
    with pytest.raises(ValueError):
        other.load_state_dict(ref.state_dict())
    with pytest.raises(ValueError):
        ref.load_state_dict(sd)


@pytest.mark.filterwarnings("ignore:Optimal order is the:UserWarning")  # opacus' own PRV domain sizing
def test_get_noise_multiplier():
    kw = dict(target_epsilon=2.0, target_delta=1e-5, sample_rate=0.01, steps=1000, eps_error=0.05)
    s_ours = get_noise_multiplier(accountant="fastpld", **kw)
    s_ref = get_noise_multiplier(accountant="prv", **kw)
    assert s_ours == pytest.approx(s_ref, rel=0.02)
    acc = fo.FastPLDAccountant(eps_error=0.05)
    acc.history = [(s_ours, 0.01, 1000)]
    assert acc.get_epsilon(1e-5) <= 2.0


def test_non_private_and_bad_input():
    acc = fo.FastPLDAccountant()
    acc.step(noise_multiplier=1.0, sample_rate=0.0)
    assert acc.get_epsilon(1e-5) == 0.0
    acc.step(noise_multiplier=0.0, sample_rate=0.1)
    assert acc.get_epsilon(1e-5) == math.inf
    with pytest.raises(ValueError, match="sample_rate"):
        acc.step(noise_multiplier=1.0, sample_rate=2.0)
    with pytest.raises(ValueError, match="delta"):
        acc.get_epsilon(0.0)
    acc.history = [(1.0, 0.1)]
    with pytest.raises(ValueError, match="history"):
        acc.get_epsilon(1e-5)


@pytest.mark.filterwarnings("ignore:Secure RNG turned off")
@pytest.mark.filterwarnings("ignore:Full backward hook is firing:UserWarning")  # torch, inside opacus' hooks
@pytest.mark.filterwarnings("ignore:Optimal order is the:UserWarning")
def test_privacy_engine_end_to_end():
    import torch
    from opacus import PrivacyEngine

    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    loader = torch.utils.data.DataLoader(data, batch_size=16)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    engine = PrivacyEngine(accountant="fastpld")
    assert isinstance(engine.accountant, fo.FastPLDAccountant)
    model, opt, loader = engine.make_private(module=model, optimizer=opt, data_loader=loader,
                                             noise_multiplier=1.0, max_grad_norm=1.0)
    for x, y in loader:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    hist = engine.accountant.history
    assert len(hist) == 1 and hist[0][0] == 1.0 and hist[0][1] == pytest.approx(0.25) and hist[0][2] == 4
    eps = engine.get_epsilon(1e-5)
    ref = PRVAccountant()
    ref.history = list(hist)
    assert abs(eps - ref.get_epsilon(1e-5)) <= 0.02

    # make_private_with_epsilon calibrates through get_noise_multiplier(accountant="fastpld")
    engine2 = PrivacyEngine(accountant="fastpld")
    model2 = torch.nn.Linear(4, 2)
    opt2 = torch.optim.SGD(model2.parameters(), lr=0.1)
    loader2 = torch.utils.data.DataLoader(data, batch_size=16)
    _, opt2, _ = engine2.make_private_with_epsilon(module=model2, optimizer=opt2, data_loader=loader2,
                                                   target_epsilon=5.0, target_delta=1e-5, epochs=2,
                                                   max_grad_norm=1.0)
    acc = fo.FastPLDAccountant()
    acc.history = [(opt2.noise_multiplier, 0.25, 8)]
    assert acc.get_epsilon(1e-5) <= 5.0


def test_relative_accuracy():
    ours = fo.FastPLDAccountant(rel_error=1e-3)
    ref = PRVAccountant()
    for acc in (ours, ref):
        acc.history = [(1.0, 0.01, 2000)]
    b = ours.get_epsilon_bounds(1e-5)
    assert b.lower <= b.upper <= b.lower * (1 + 1e-3)
    assert b.lower <= ref.get_epsilon(1e-5) + 2 * 0.01  # opacus PRV: an upper bound to within its eps_error
    with pytest.raises(ValueError, match="not both"):
        fo.FastPLDAccountant(eps_error=0.01, rel_error=1e-3)
    with pytest.raises(ValueError, match="rel_error"):
        fo.FastPLDAccountant(rel_error=2.0)


def test_random_allocation_sampler_counts_whole_epochs():
    # shuffling into epochs of 10 steps: 25 steps are certified between 2 and 3 whole epochs
    import fastpld
    sampler = lambda s, q: fastpld.RandomAllocation(fastpld.Gaussian(s), round(1 / q))  # noqa: E731
    acc = fo.FastPLDAccountant(sampler=sampler)
    for _ in range(25):
        acc.step(noise_multiplier=2.0, sample_rate=0.1)
    epoch = fastpld.RandomAllocation(fastpld.Gaussian(2.0), 10)
    two, three = (fastpld.compose(epoch, n, delta_error=1e-8).epsilon(1e-5) for n in (2, 3))
    b = acc.get_epsilon_bounds(1e-5)
    assert b.upper == three.upper and b.lower == min(two.lower, three.lower) and b.lower < b.estimate <= b.upper
    assert acc.get_epsilon(1e-5) == three.upper
    for _ in range(5):  # the third epoch complete: one composition, both bounds of 3 epochs
        acc.step(noise_multiplier=2.0, sample_rate=0.1)
    assert tuple(acc.get_epsilon_bounds(1e-5)) == tuple(three)
    # fewer steps than an epoch: the lower bound is 0 (no epoch completed), the upper one an epoch's
    acc = fo.FastPLDAccountant(sampler=sampler)
    acc.step(noise_multiplier=2.0, sample_rate=0.1)
    one = fastpld.compose(epoch, 1, delta_error=1e-8).epsilon(1e-5)
    assert acc.get_epsilon_bounds(1e-5) == fastpld.Bounds(0.0, one.estimate, one.upper)
    with pytest.raises(ValueError, match="side"):
        acc.get_pld(1e-8, side="middle")
