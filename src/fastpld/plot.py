"""Plots of certified privacy curves (needs matplotlib: ``pip install fastpld[plot]``).

>>> import fastpld
>>> from fastpld.plot import plot_delta_curve, plot_epsilon_vs_steps
>>> pld = fastpld.compose(fastpld.PoissonSubsampledGaussian(1.0, 0.01), 1000)
>>> ax = plot_delta_curve(pld)                                          # doctest: +SKIP
>>> ax = plot_epsilon_vs_steps(fastpld.PoissonSubsampledGaussian(1.0, 0.01),
...                            [100, 1000, 10_000], delta=1e-5)         # doctest: +SKIP

matplotlib is imported when a function is called, never at ``import fastpld``.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from . import _validation as V
from .composition.api import DEFAULT_MAX_BUCKETS, compose, compose_for_delta
from .curve import Bounds, PrivacyLossDistribution
from .mechanisms import Mechanism

__all__ = ["plot_delta_curve", "plot_epsilon_vs_steps", "epsilon_vs_steps", "plot_tradeoff"]

_BAND_ALPHA = 0.3
_FLOOR = 1e-300  # log-scale axes cannot show a certified lower bound of exactly 0


def _describe(mech) -> str:
    """Compact label: the mechanism's class and the fields that differ from their defaults."""
    import dataclasses

    if not dataclasses.is_dataclass(mech):
        return type(mech).__name__
    parts = []
    for f in dataclasses.fields(mech):
        v = getattr(mech, f.name)
        if f.default is not dataclasses.MISSING and v == f.default:
            continue
        parts.append(f"{f.name}={v:g}" if isinstance(v, float) else f"{f.name}={v}")
    return f"{type(mech).__name__}({', '.join(parts)})"


def _describe_events(events) -> str:
    """``Mechanism(...) x count`` for each composed event, joined by ``+``."""
    parts = [f"{_describe(m)} x {c}" for m, c in events]
    if len(parts) > 3:
        parts = parts[:2] + [f"... ({len(parts) - 2} more)"]
    return " + ".join(parts)


def _band_label(ax, label):
    """Legend label of a certified band: one "certified band" entry per axes for unlabelled curves."""
    if label is not None:
        return f"{label} (certified band)"
    if any(t == "certified band" for t in ax.get_legend_handles_labels()[1]):
        return "_nolegend_"
    return "certified band"


def _axes(ax):
    if ax is not None:
        return ax
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - exercised only without matplotlib
        raise ImportError("fastpld.plot needs matplotlib: pip install 'fastpld[plot]'") from exc
    _, ax = plt.subplots(figsize=(6.4, 4.4), layout="constrained")
    return ax


def _default_epsilons(pld: PrivacyLossDistribution, num: int) -> np.ndarray:
    """From 0 to the certified epsilon at the smallest delta the composition can certify (>= 1e-12)."""
    for d in (1e-12, 1e-10, 1e-8, 1e-6, 1e-4, 1e-2):
        try:
            top = float(pld.epsilon(d).upper)
        except ValueError:
            continue
        if np.isfinite(top) and top > 0:
            return np.linspace(0.0, top, num)
    return np.linspace(0.0, 10.0, num)


def plot_delta_curve(pld: PrivacyLossDistribution, ax=None, *, epsilons: Sequence[float] | None = None,
                     num: int = 200, label: str | None = None, color: str | None = None):
    """Draw ``delta(eps)`` with its certified lower/upper band on a log scale.

    Parameters
    ----------
    pld : fastpld.PrivacyLossDistribution
        A composed distribution (from :func:`fastpld.compose`).
    ax : matplotlib.axes.Axes, optional
        Axes to draw on (default: a new figure).
    epsilons : array_like, optional
        Where to evaluate (default: ``num`` points from 0 to the certified
        epsilon at ``delta = 1e-12``, or the smallest delta that can be certified).
    num : int, default 200
        Number of points when ``epsilons`` is not given.
    label : str, optional
        Legend label of the estimate (default ``"estimate"``).
    color : str, optional
        Matplotlib colour of line and band.

    Returns
    -------
    matplotlib.axes.Axes
    """
    if not isinstance(pld, PrivacyLossDistribution):
        raise ValueError(f"pld must be a fastpld.PrivacyLossDistribution, got {pld!r}")
    num = V.positive_int("num", num)
    eps = _default_epsilons(pld, max(num, 2)) if epsilons is None else V.query_array("epsilons", epsilons, lo=0.0)
    eps = np.sort(np.atleast_1d(eps))
    b = pld.delta(eps)
    ax = _axes(ax)
    line, = ax.plot(eps, np.maximum(b.estimate, _FLOOR), color=color, label=label or "estimate")
    ax.fill_between(eps, np.maximum(b.lower, _FLOOR), np.maximum(b.upper, _FLOOR), color=line.get_color(),
                    alpha=_BAND_ALPHA, linewidth=0, label=_band_label(ax, label))
    ax.set_yscale("log")
    positive = np.asarray(b.upper)[np.asarray(b.upper) > 0]
    bottom = max(float(positive.min()) / 10, 1e-16) if positive.size else 1e-16
    # delta <= 1 always: the axis stops there (autoscaling a log axis around the 1e-300 floor of a
    # zero lower bound would otherwise stretch it to ~1e13)
    ax.set_ylim(bottom=bottom, top=1.0)
    ds = pld.delta_spent
    lower0 = (np.asarray(b.lower) <= 0) & (np.asarray(b.upper) > 0)
    if lower0.any() and ds > bottom and not any(t.get_gid() == "fastpld-delta-error" for t in ax.texts):
        # where delta(eps) is not above the delta error the certificate spent, the lower bound
        # (the grid's delta minus that error) is 0: say so where the band drops
        ax.axhline(ds, color="0.4", linestyle=":", linewidth=1)
        ax.annotate(f"dotted: delta error spent ({ds:.2g}). The lower bound is\n"
                    "delta(eps + eps error) minus it, so the band drops to 0\nwhere the curve nears it",
                    xy=(float(eps[np.argmax(lower0)]), ds), xytext=(0.03, 0.13), textcoords="axes fraction",
                    fontsize="x-small", color="0.3", va="bottom", gid="fastpld-delta-error")
    ax.set_xlabel(r"$\varepsilon$")
    ax.set_ylabel(r"$\delta(\varepsilon)$")
    rel = getattr(pld, "rel_error", None)
    acc = f"rel_error={rel:g}" if rel is not None else f"eps_error={pld.eps_error:g}"
    ax.set_title(f"{_describe_events(pld.events)}\n({acc}, delta_error={pld.delta_error:g})", fontsize="small")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend()
    return ax


def epsilon_vs_steps(mechanism: Mechanism, steps: Sequence[int], delta: float, *, eps_error: float | None = None,
                     delta_error: float | None = None, method: str = "auto",
                     max_buckets: int = DEFAULT_MAX_BUCKETS, rel_error: float | None = None) -> Bounds:
    """Certified epsilon at ``delta`` after each number of steps in ``steps``.

    Parameters
    ----------
    mechanism : fastpld.Mechanism
        The mechanism run at every step.
    steps : sequence of int
        Step counts (each composed separately).
    delta : float
        In ``(0, 1]``.
    eps_error, delta_error, rel_error : float, optional
        Accuracy passed to :func:`fastpld.compose` (by default its own: ``rel_error=1e-3``; ``delta_error``
        1e-10, or ``delta / 1000`` where that is smaller, so that the accuracy holds at ``delta``).
    method : str, default "auto"
    max_buckets : int
        Size guard passed to :func:`fastpld.compose`.

    Returns
    -------
    Bounds
        Arrays ``lower``, ``estimate``, ``upper`` aligned with ``steps``.
    """
    if not isinstance(mechanism, Mechanism):
        raise ValueError(f"mechanism must be a fastpld.Mechanism, got {mechanism!r}")
    ks = [V.positive_int(f"steps[{i}]", k) for i, k in enumerate(steps)]
    if not ks:
        raise ValueError("steps must not be empty")
    delta = V.probability("delta", delta, open_low=True)
    rows = [compose_for_delta(lambda de, k=k: compose(mechanism, k, eps_error=eps_error, rel_error=rel_error,
                                                      delta_error=de, method=method, max_buckets=max_buckets),
                              delta, delta_error, rel_error, eps_error).epsilon(delta) for k in ks]
    return Bounds(*(np.array([r[i] for r in rows], dtype=np.float64) for i in range(3)))


def plot_epsilon_vs_steps(mechanism: Mechanism, steps: Sequence[int], delta: float, ax=None, *,
                          eps_error: float | None = None, delta_error: float | None = None, label: str | None = None,
                          color: str | None = None, bounds: Bounds | None = None, rel_error: float | None = None):
    """Draw certified epsilon against the number of steps (log-scaled steps).

    Parameters
    ----------
    mechanism : fastpld.Mechanism
        The mechanism run at every step.
    steps : sequence of int
        Step counts of the schedule.
    delta : float
        Target delta.
    ax : matplotlib.axes.Axes, optional
        Axes to draw on (default: a new figure).
    eps_error, delta_error, rel_error : float, optional
        Accuracy of each composition (see :func:`epsilon_vs_steps`).
    label : str, optional
        Legend label (default: the mechanism's repr).
    color : str, optional
        Matplotlib colour.
    bounds : Bounds, optional
        Precomputed :func:`epsilon_vs_steps` result (skips the computation).

    Returns
    -------
    matplotlib.axes.Axes
    """
    ks = np.asarray([V.positive_int(f"steps[{i}]", k) for i, k in enumerate(steps)])
    order = np.argsort(ks)
    if bounds is None:
        bounds = epsilon_vs_steps(mechanism, ks.tolist(), delta, eps_error=eps_error, delta_error=delta_error,
                                  rel_error=rel_error)
    lo, est, up = (np.asarray(x)[order] for x in bounds)
    ks = ks[order]
    ax = _axes(ax)
    line, = ax.plot(ks, est, marker="o", markersize=3, color=color, label=label or _describe(mechanism))
    ax.fill_between(ks, lo, up, color=line.get_color(), alpha=_BAND_ALPHA, linewidth=0,
                    label=_band_label(ax, None if label is None or label == "estimate" else label))
    if ks.size > 1 and ks[-1] / ks[0] >= 10:
        ax.set_xscale("log")
    ax.set_xlabel("steps")
    ax.set_ylabel(rf"$\varepsilon$ at $\delta$ = {delta:g}")
    ax.set_title(f"Epsilon against steps: {_describe(mechanism)}", fontsize="small")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize="small")
    return ax


def plot_tradeoff(pld: PrivacyLossDistribution, ax=None, *, alphas: Sequence[float] | None = None, num: int = 400,
                  scale: str = "linear", gaussian: bool = True, label: str | None = None, color: str | None = None):
    """Draw the trade-off curve ``beta(alpha)`` with its certified band, and the Gaussian-DP curve of the same mu.

    Parameters
    ----------
    pld : fastpld.PrivacyLossDistribution
        A composed distribution.
    ax : matplotlib.axes.Axes, optional
        Axes to draw on (default: a new figure).
    alphas : array_like, optional
        Type-I errors (false-positive rates) to evaluate (default: ``num``
        points, uniform for ``scale="linear"``, log-spaced from ``1e-8`` for
        ``"log"``).
    num : int, default 400
    scale : {"linear", "log"}
        ``"linear"``: beta against alpha on ``[0, 1]^2`` (the f-DP picture).
        ``"log"``: the attack's true-positive rate ``1 - beta`` against its
        false-positive rate, both on log axes (the low-FPR regime of
        membership inference).
    gaussian : bool, default True
        Also draw ``G_mu`` for the estimated Gaussian-DP mu of :meth:`gdp_mu`.
    label, color : str, optional

    Returns
    -------
    matplotlib.axes.Axes
    """
    from .fdp import gaussian_tradeoff

    if not isinstance(pld, PrivacyLossDistribution):
        raise ValueError(f"pld must be a fastpld.PrivacyLossDistribution, got {pld!r}")
    if scale not in ("linear", "log"):
        raise ValueError(f"scale must be 'linear' or 'log', got {scale!r}")
    num = V.positive_int("num", num)
    if alphas is None:
        a = np.linspace(0.0, 1.0, max(num, 2)) if scale == "linear" else np.geomspace(1e-8, 1.0, max(num, 2))
    else:
        a = np.sort(np.atleast_1d(V.query_array("alphas", alphas, lo=0.0, hi=1.0)))
    b = pld.tradeoff(a)
    ax = _axes(ax)
    if scale == "linear":
        x, est, lo, up = a, b.estimate, b.lower, b.upper
    else:  # TPR = 1 - beta: the band flips
        x, est, lo, up = a, 1 - b.estimate, 1 - b.upper, 1 - b.lower
    line, = ax.plot(x, est, color=color, label=label or "estimate")
    ax.fill_between(x, lo, up, color=line.get_color(), alpha=_BAND_ALPHA, linewidth=0,
                    label="certified bounds" if label is None else f"{label} bounds")
    if gaussian:
        g = pld.gdp_mu()
        mu = g.mu.estimate
        if np.isfinite(mu):
            gb = gaussian_tradeoff(mu, a)
            ax.plot(x, gb if scale == "linear" else 1 - gb, color="black", linestyle="--", linewidth=1,
                    label=f"Gaussian DP, mu={mu:.4g} (certified mu <= {g.mu.upper:.4g})")
    if scale == "linear":
        ax.plot([0, 1], [1, 0], color="grey", linewidth=0.6, linestyle=":", label="random guessing")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xlabel(r"type-I error $\alpha$ (false-positive rate)")
        ax.set_ylabel(r"type-II error $\beta(\alpha)$")
        ax.set_aspect("equal")
    else:
        ax.plot(a[a > 0], a[a > 0], color="grey", linewidth=0.6, linestyle=":", label="random guessing")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("false-positive rate")
        ax.set_ylabel("true-positive rate of the best attack")
        pos = np.asarray(lo)[np.asarray(lo) > 0]
        if pos.size:
            ax.set_ylim(bottom=max(float(pos.min()) / 3, 1e-12), top=1.05)
    ax.set_title("Trade-off curve (f-DP)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize="x-small")
    return ax
