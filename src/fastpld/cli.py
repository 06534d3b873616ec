"""Command line: ``fastpld epsilon | delta | calibrate | plot | tradeoff | batch``.

Examples::

    fastpld epsilon --sigma 1.0 --sampling-probability 0.01 --steps 10000 --delta 1e-5
    fastpld delta --laplace-scale 20 --steps 100 --epsilon 1.0 --json
    fastpld epsilon --randomized-response 0.5 --num-categories 4 --steps 50 --delta 1e-6
    fastpld calibrate --target-epsilon 3 --delta 1e-5 --sampling-probability 0.01 --steps 10000
    fastpld plot --sigma 1.0 --sampling-probability 0.01 --steps 1000 -o curve.png
    fastpld plot --sigma 1.0 --sampling-probability 0.01 --steps-grid 100,1000,10000 --delta 1e-5 -o eps.png
    fastpld tradeoff --sigma 1.0 --sampling-probability 0.01 --steps 1000 --fpr 1e-4,1e-3,0.01 --json
    fastpld plot --tradeoff --sigma 1.0 --sampling-probability 0.01 --steps 1000 -o tradeoff.png
    fastpld batch questions.jsonl -o answers.jsonl --workers 2

The mechanism is chosen by exactly one of ``--sigma`` (Gaussian),
``--laplace-scale``, ``--pure-dp EPS``, ``--randomized-response EPS``
(with ``--num-categories``) or ``--approx-dp EPS DELTA``;
``--sampling-probability`` makes the Gaussian or Laplace mechanism
Poisson-subsampled.  Output is human-readable; ``--json`` prints
``{"epsilon": {"lower": ..., "estimate": ..., "upper": ...}, "parameters": {...}}``
(``"delta"`` for ``fastpld delta``, ``"sigma"`` for ``fastpld calibrate``; ``fastpld tradeoff --json``
prints ``{"tradeoff": [{"fpr", "tpr", "beta"}, ...], "advantage", "gdp_mu", "parameters"}``).

Bad input prints one line naming the parameter (``fastpld: error: ...``) and
exits with status 2, also for argument-parsing errors.

``fastpld batch`` answers a JSON-lines file of questions (see :mod:`fastpld.batch`)
on local processes, in this process (``--serial``) or on a Dask cluster
(``--scheduler tcp://...``), and writes one JSON record per question, in input
order unless ``--as-completed``.  A failed question is a record with ``"ok": false``
and its ``error``; the batch goes on and exits with status 3 if any failed.
"""
from __future__ import annotations

import argparse
import decimal
import importlib.util
import json
import sys

from . import _validation as V
from .calibrate import _accuracy as _calibration_accuracy
from .calibrate import _compose_widening, find_noise_multiplier
from .composition.api import DEFAULT_MAX_BUCKETS, compose, compose_for_delta
from .mechanisms import (
    ApproxDP,
    Gaussian,
    Laplace,
    PoissonSubsampledGaussian,
    PoissonSubsampledLaplace,
    PureDP,
    RandomizedResponse,
)

__all__ = ["main", "build_parser"]


class _UsageError(Exception):
    """An argument-parsing error, reported as one line with exit status 2."""


class _Parser(argparse.ArgumentParser):
    # argparse prints the usage block and exits; we want one line and no SystemExit inside main().
    def error(self, message):
        raise _UsageError(message)


def _mechanism(args):
    """Build the mechanism from the flags; exactly one mechanism flag must be given."""
    given = [name for name, val in (("--sigma", args.sigma), ("--laplace-scale", args.laplace_scale),
                                    ("--pure-dp", args.pure_dp), ("--randomized-response", args.randomized_response),
                                    ("--approx-dp", args.approx_dp)) if val is not None]
    if not given:
        raise ValueError("one of --sigma, --laplace-scale, --pure-dp, --randomized-response or --approx-dp is required")
    if len(given) > 1:
        raise ValueError(f"give only one mechanism, got {' and '.join(given)}")
    q = args.sampling_probability
    sens = args.sensitivity
    if q is not None and given[0] not in ("--sigma", "--laplace-scale"):
        raise ValueError(f"--sampling-probability applies to --sigma or --laplace-scale, not {given[0]}")
    if args.num_categories is not None and given[0] != "--randomized-response":
        raise ValueError("--num-categories applies to --randomized-response only")
    if args.sigma is not None:
        if q is None or q == 1.0:
            return Gaussian(args.sigma, sensitivity=sens)
        return PoissonSubsampledGaussian(args.sigma, q, sensitivity=sens, neighboring=args.neighboring)
    if args.laplace_scale is not None:
        if q is None or q == 1.0:
            return Laplace(args.laplace_scale, sensitivity=sens)
        return PoissonSubsampledLaplace(args.laplace_scale, q, sensitivity=sens, neighboring=args.neighboring)
    if args.pure_dp is not None:
        return PureDP(args.pure_dp)
    if args.randomized_response is not None:
        return RandomizedResponse(args.randomized_response,
                                  2 if args.num_categories is None else args.num_categories)
    return ApproxDP(*args.approx_dp)


def _count(text):
    """An argparse type: a whole number, also in float notation (``1e12``, ``2.5e3``); not ``1.5``."""
    try:
        d = decimal.Decimal(text.strip().replace("_", ""))
    except (decimal.InvalidOperation, AttributeError):
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    # (Decimal, not float: 1e23 must not become 99999999999999991611392)
    if not d.is_finite() or d != d.to_integral_value():
        raise argparse.ArgumentTypeError(f"must be an integer (1e6 is accepted, 1.5e0 is not), got {text!r}")
    return int(d)


def _add_mechanism(p):
    g = p.add_argument_group("mechanism (exactly one)")
    g.add_argument("--sigma", type=float, help="Gaussian noise multiplier (noise std / sensitivity)")
    g.add_argument("--laplace-scale", type=float, help="Laplace noise scale")
    g.add_argument("--pure-dp", type=float, metavar="EPS", help="an EPS-DP mechanism")
    g.add_argument("--randomized-response", type=float, metavar="EPS", help="k-ary randomized response with EPS")
    g.add_argument("--approx-dp", type=float, nargs=2, metavar=("EPS", "DELTA"), help="an (EPS, DELTA)-DP mechanism")
    p.add_argument("--sampling-probability", type=float, default=None,
                   help="Poisson sampling probability q (subsampled Gaussian/Laplace)")
    p.add_argument("--sensitivity", type=float, default=1.0, help="sensitivity of the Gaussian/Laplace query")
    p.add_argument("--num-categories", type=int, default=None, help="categories of randomized response (default 2)")
    p.add_argument("--neighboring", choices=("add_or_remove", "remove", "add"), default="add_or_remove",
                   help="neighbouring direction(s) of subsampled mechanisms (default: both)")


def _add_accuracy(p):
    p.add_argument("--eps-error", type=float, default=None,
                   help="certified absolute epsilon error instead of --rel-error")
    p.add_argument("--rel-error", type=float, default=None,
                   help="accuracy relative to epsilon, e.g. 1e-3 (the default): the certified interval at most "
                        "0.1%% of epsilon wide (the dominance certificate; where it refuses, --eps-error 0.01)")


def _add_budget(p):
    _add_accuracy(p)
    p.add_argument("--delta-error", type=float, default=None,
                   help="certified delta error (default 1e-10, or delta / 1000 where that is smaller: the accuracy "
                        "asked then holds at --delta)")
    p.add_argument("--method", default="auto", help="auto, glw, two_stage, recursive, coupling or dominance")
    _add_max_buckets(p)
    p.add_argument("--json", action="store_true", help="print JSON")


def _add_max_buckets(p):
    p.add_argument("--max-buckets", type=_count, default=DEFAULT_MAX_BUCKETS,
                   help=f"refuse a discretisation or FFT larger than this (default {DEFAULT_MAX_BUCKETS}); "
                        "raise it for very fine or very long compositions")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``fastpld`` command.

    Returns
    -------
    argparse.ArgumentParser
    """
    from . import __version__

    parser = _Parser(prog="fastpld", description="Certified privacy accounting by evolving discretisation.")
    parser.add_argument("--version", action="version", version=f"fastpld {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    pe = sub.add_parser("epsilon", help="epsilon(delta) of a composed mechanism")
    _add_mechanism(pe)
    pe.add_argument("--steps", type=_count, required=True, help="number of compositions")
    pe.add_argument("--delta", type=float, required=True)
    _add_budget(pe)
    pd = sub.add_parser("delta", help="delta(epsilon) of a composed mechanism")
    _add_mechanism(pd)
    pd.add_argument("--steps", type=_count, required=True, help="number of compositions")
    pd.add_argument("--epsilon", type=float, required=True)
    _add_budget(pd)
    pc = sub.add_parser("calibrate", help="smallest DP-SGD noise multiplier meeting (target epsilon, delta)")
    pc.add_argument("--target-epsilon", type=float, required=True)
    pc.add_argument("--delta", type=float, required=True, help="target delta")
    pc.add_argument("--sampling-probability", type=float, required=True)
    pc.add_argument("--steps", type=_count, required=True)
    _add_accuracy(pc)
    pc.add_argument("--delta-error", type=float, default=None, help="certified delta error (default delta / 1000)")
    _add_max_buckets(pc)
    pc.add_argument("--json", action="store_true", help="print JSON")
    pp = sub.add_parser("plot", help="plot delta(eps) with its bounds and/or epsilon against steps")
    _add_mechanism(pp)
    pp.add_argument("--steps", type=_count, help="compositions for the delta(eps) curve")
    pp.add_argument("--steps-grid", type=str, help="comma-separated step counts for epsilon against steps")
    pp.add_argument("--delta", type=float, help="delta of the epsilon-against-steps curve")
    pp.add_argument("-o", "--output", required=True, help="image file to write (.png, .pdf, .svg)")
    pp.add_argument("--tradeoff", action="store_true",
                    help="with --steps: draw the trade-off curve beta(alpha) and the attack's TPR against FPR "
                         "(certified bands, Gaussian-DP curve of the same mu) instead of delta(eps)")
    _add_budget(pp)
    pt = sub.add_parser("tradeoff", help="attack view of a composed mechanism: TPR at FPR, beta(alpha), "
                                         "advantage, Gaussian-DP mu")
    _add_mechanism(pt)
    pt.add_argument("--steps", type=int, required=True, help="number of compositions")
    pt.add_argument("--fpr", type=str, default="1e-6,1e-4,1e-3,0.01,0.1",
                    help="comma-separated false-positive rates (default 1e-6,1e-4,1e-3,0.01,0.1)")
    pt.add_argument("--alpha-range", type=float, nargs=2, metavar=("LOW", "HIGH"), default=None,
                    help="type-I errors over which the Gaussian-DP mu is taken (default: where the "
                         "certificate resolves the curve)")
    _add_budget(pt)
    pb = sub.add_parser("batch", help="answer a JSON-lines file of questions (see fastpld.batch)")
    pb.add_argument("questions", help="JSON-lines file of questions ('-': standard input)")
    pb.add_argument("-o", "--output", default="-", help="JSON-lines file of answers (default: standard output)")
    pb.add_argument("--scheduler", help="run on this Dask scheduler (tcp://host:port; needs fastpld[dask])")
    pb.add_argument("--workers", type=int, help="local worker processes (default: the CPUs available)")
    pb.add_argument("--serial", action="store_true", help="answer in this process, no workers")
    pb.add_argument("--as-completed", action="store_true", help="write answers as they complete (default: input order)")
    pb.add_argument("--chunk-size", type=int, help="distinct compositions per chunk sent to a worker")
    pb.add_argument("--no-progress", action="store_true",
                    help="no progress bar (default: one on a terminal's stderr when tqdm is installed)")
    return parser


def _bounds_dict(b):
    return {"lower": float(b.lower), "estimate": float(b.estimate), "upper": float(b.upper)}


def _accuracy(args) -> dict:
    """``compose``'s accuracy arguments from ``--eps-error`` / ``--rel-error`` (compose checks them)."""
    return {k: v for k, v in (("rel_error", getattr(args, "rel_error", None)), ("eps_error", args.eps_error))
            if v is not None}  # (neither: compose's default accuracy)


def _run_query(args):
    mech = _mechanism(args)
    V.positive_int("steps", args.steps)
    if args.command == "epsilon":
        V.probability("delta", args.delta, open_low=True)
    else:
        V.nonnegative_float("epsilon", args.epsilon)
    acc = _accuracy(args)

    def compose_at(de):
        return compose(mech, args.steps, delta_error=de, method=args.method, max_buckets=args.max_buckets, **acc)

    # (an epsilon query: at delta / 1000 where that is below 1e-10, unless --delta-error is given, so that the
    # accuracy asked holds at --delta)
    pld = (compose_for_delta(compose_at, args.delta, args.delta_error, args.rel_error, args.eps_error)
           if args.command == "epsilon" else compose_at(V.delta_error_or_default(args.delta_error)))
    if args.command == "epsilon":
        b = pld.epsilon(args.delta)
        key, query = "epsilon", {"delta": args.delta}
    else:
        b = pld.delta(args.epsilon)
        key, query = "delta", {"epsilon": args.epsilon}
    params = {"mechanism": repr(mech), "steps": args.steps, **acc, "delta_error": pld.delta_error, "method": pld.method,
              **query}
    if args.json:
        print(json.dumps({key: _bounds_dict(b), "parameters": params}))
    else:
        # the number to quote is the certified upper bound: it is the headline
        print(f"{key} <= {b.upper:.6g}  (certified upper bound; certified lower bound {b.lower:.6g}, "
              f"estimate {b.estimate:.6g})")
        print(f"  {mech!r}, {args.steps} steps, method {pld.method}")


def _run_calibrate(args):
    te = V.positive_float("target_epsilon", args.target_epsilon)
    td = V.probability("delta", args.delta, open_low=True, open_high=True)
    q = V.probability("sampling_probability", args.sampling_probability, open_low=True)
    steps = V.positive_int("steps", args.steps)
    acc = _accuracy(args)
    sigma = find_noise_multiplier(te, td, q, steps, delta_error=args.delta_error, max_buckets=args.max_buckets,
                                  **acc)
    mech = PoissonSubsampledGaussian(sigma, q)
    # report the certified epsilon actually reached, composed again with the calibration's errors
    cacc, _, des, _ = _calibration_accuracy(te, td, acc.get("rel_error"), acc.get("eps_error"), args.delta_error,
                                            None)
    pld = _compose_widening(mech, steps, cacc, des, args.max_buckets)
    b = pld.epsilon(td)
    params = {"target_epsilon": te, "delta": td, "sampling_probability": q, "steps": steps, **acc,
              "delta_error": pld.delta_error, "method": pld.method}
    if args.json:
        print(json.dumps({"sigma": sigma, "epsilon": _bounds_dict(b), "parameters": params}))
    else:
        print(f"sigma = {sigma:.6g}")
        print(f"  certified epsilon at delta={td:g}: {b.lower:.6g} <= epsilon <= {b.upper:.6g} "
              f"(target {te:g}), q={q:g}, {steps} steps")


def _parse_fprs(text):
    try:
        vals = [float(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise ValueError(f"--fpr must be comma-separated numbers in [0, 1], got {text!r}") from None
    if not vals or any(not (0.0 <= v <= 1.0) for v in vals):
        raise ValueError(f"--fpr must be comma-separated numbers in [0, 1], got {text!r}")
    return vals


def _run_tradeoff(args):
    mech = _mechanism(args)
    V.positive_int("steps", args.steps)
    fprs = _parse_fprs(args.fpr)
    ar = tuple(args.alpha_range) if args.alpha_range is not None else None
    acc = _accuracy(args)
    de = V.delta_error_or_default(args.delta_error)
    pld = compose(mech, args.steps, delta_error=de, method=args.method, **acc)
    tpr = pld.tpr(fprs)
    beta = pld.tradeoff(fprs)
    adv = pld.advantage()
    g = pld.gdp_mu(ar)
    params = {"mechanism": repr(mech), "steps": args.steps, **acc, "delta_error": de, "method": pld.method}
    if args.json:
        rows = [{"fpr": f, "tpr": _bounds_dict(type(tpr)(tpr.lower[i], tpr.estimate[i], tpr.upper[i])),
                 "beta": _bounds_dict(type(beta)(beta.lower[i], beta.estimate[i], beta.upper[i]))}
                for i, f in enumerate(fprs)]
        out = {"tradeoff": rows, "advantage": _bounds_dict(adv),
               "gdp_mu": {**_bounds_dict(g.mu), "alpha_range": list(g.alpha_range), "all_alpha": g.all_alpha,
                          "binding_alpha": g.binding_alpha, "max_gap": g.max_gap, "gap_alpha": g.gap_alpha},
               "parameters": params}
        print(json.dumps(out))
        return
    print(f"{mech!r}, {args.steps} steps, method {pld.method}")
    print("  FPR          TPR of the best attack (certified lower .. upper)")
    for i, f in enumerate(fprs):
        print(f"  {f:<11.4g}  {tpr.estimate[i]:.6g}  ({tpr.lower[i]:.6g} .. {tpr.upper[i]:.6g})")
    print(f"  advantage max(TPR - FPR) = {adv.estimate:.6g}  ({adv.lower:.6g} .. {adv.upper:.6g})")
    which = "all alpha" if g.all_alpha else f"alpha in [{g.alpha_range[0]:.3g}, {g.alpha_range[1]:.10g}]"
    print(f"  Gaussian-DP mu = {g.mu.estimate:.6g}  (certified {g.mu.lower:.6g} <= mu <= {g.mu.upper:.6g}, "
          f"over {which}); the curve lies up to {g.max_gap:.3g} above G_mu (at alpha={g.gap_alpha:.3g})")


def _parse_grid(text):
    try:
        ks = [_count(t) for t in text.split(",") if t.strip()]
    except argparse.ArgumentTypeError:
        raise ValueError(f"--steps-grid must be comma-separated positive integers, got {text!r}") from None
    if not ks or any(k is None or k <= 0 for k in ks):
        raise ValueError(f"--steps-grid must be comma-separated positive integers, got {text!r}")
    return sorted(set(ks))


def _run_plot(args):
    mech = _mechanism(args)
    if args.tradeoff and args.steps is None:
        raise ValueError("--tradeoff needs --steps")
    if args.steps is None and args.steps_grid is None:
        raise ValueError("plot needs --steps (delta curve) and/or --steps-grid with --delta (epsilon against steps)")
    grid = None
    if args.steps_grid is not None:
        grid = _parse_grid(args.steps_grid)
        if args.delta is None:
            raise ValueError("--steps-grid needs --delta")
        V.probability("delta", args.delta, open_low=True)
    V.positive_int("max_buckets", args.max_buckets)
    if args.steps is not None:
        V.positive_int("steps", args.steps)
    try:
        import matplotlib
        matplotlib.use("Agg")  # writing a file: no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        raise _MissingDependency("fastpld plot needs matplotlib: pip install 'fastpld[plot]'") from None
    from .plot import _describe, epsilon_vs_steps, plot_delta_curve, plot_epsilon_vs_steps

    panels = (args.steps is not None) * (2 if args.tradeoff else 1) + (grid is not None)
    fig, axes = plt.subplots(1, panels, figsize=(6.4 * panels, 4.6), layout="constrained", squeeze=False)
    axes = list(axes[0])
    out = {"output": args.output, "mechanism": repr(mech)}
    # (the delta curve at the default delta_error or the one given; epsilon against steps at --delta's, as
    # plot.epsilon_vs_steps takes it)
    de = V.delta_error_or_default(args.delta_error)
    if args.steps is not None:
        pld = compose(mech, args.steps, delta_error=de, method=args.method,
                      max_buckets=args.max_buckets, **_accuracy(args))
        if args.tradeoff:
            from .plot import plot_tradeoff
            for scale in ("linear", "log"):
                ax = plot_tradeoff(pld, axes.pop(0), scale=scale)
                what = "beta(alpha)" if scale == "linear" else "TPR against FPR"
                ax.set_title(f"{what} after {args.steps} steps\n{_describe(mech)}", fontsize="small")
            out["tradeoff"] = True
        else:
            ax = plot_delta_curve(pld, axes.pop(0))
            ax.set_title(f"delta(eps) after {args.steps} steps\n{_describe(mech)}", fontsize="small")
        out["steps"] = args.steps
    if grid is not None:
        b = epsilon_vs_steps(mech, grid, args.delta, delta_error=args.delta_error, method=args.method,
                             max_buckets=args.max_buckets, **_accuracy(args))
        ax = plot_epsilon_vs_steps(mech, grid, args.delta, axes.pop(0), bounds=b, label="estimate")
        ax.set_title(f"epsilon at delta={args.delta:g}\n{_describe(mech)}", fontsize="small")
        out["steps_grid"] = grid
        out["epsilon"] = {"lower": b.lower.tolist(), "estimate": b.estimate.tolist(), "upper": b.upper.tolist()}
    try:
        fig.savefig(args.output, dpi=120)
    except (OSError, ValueError) as exc:
        raise ValueError(f"--output: cannot write {args.output!r}: {exc}") from None
    finally:
        plt.close(fig)
    if args.json:
        print(json.dumps({"plot": out, "parameters": {**_accuracy(args), "delta_error": args.delta_error}}))
    else:
        print(f"wrote {args.output}")


class _MissingDependency(Exception):
    pass


class _SomeFailed(Exception):
    pass


def _run_batch(args):
    from . import batch

    if args.serial and args.scheduler:
        raise ValueError("give either --serial or --scheduler, not both")
    progress = False
    if not args.no_progress and sys.stderr.isatty():
        progress = importlib.util.find_spec("tqdm") is not None
    client = None
    if args.scheduler:
        if importlib.util.find_spec("distributed") is None:
            raise _MissingDependency("--scheduler needs dask.distributed: pip install 'fastpld[dask]'")
        client = args.scheduler
    try:
        src = sys.stdin if args.questions == "-" else open(args.questions, encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"questions: cannot read {args.questions!r}: {exc}") from None
    try:
        try:
            out = sys.stdout if args.output == "-" else open(args.output, "w", encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"--output: cannot write {args.output!r}: {exc}") from None
        n = failed = 0
        try:
            for rec in batch.run(batch.read_jsonl(src), client=client, workers=args.workers, serial=args.serial,
                                 ordered=not args.as_completed, chunk_size=args.chunk_size, progress=progress):
                out.write(json.dumps(rec) + "\n")
                n += 1
                failed += not rec["ok"]
        finally:
            if out is not sys.stdout:
                out.close()
            else:
                out.flush()
    finally:
        if src is not sys.stdin:
            src.close()
    print(f"fastpld batch: {n - failed} of {n} questions answered"
          + (f", {failed} failed (records with \"ok\": false carry the error)" if failed else ""), file=sys.stderr)
    if failed:
        raise _SomeFailed()


def main(argv=None) -> int:
    """Run the command line.

    Parameters
    ----------
    argv : list of str, optional
        Arguments (default ``sys.argv[1:]``).

    Returns
    -------
    int
        Exit status: 0 on success, 2 on bad input, 1 if an optional
        dependency is missing, 3 if some questions of a batch failed.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command in ("epsilon", "delta"):
            _run_query(args)
        elif args.command == "calibrate":
            _run_calibrate(args)
        elif args.command == "tradeoff":
            _run_tradeoff(args)
        elif args.command == "batch":
            _run_batch(args)
        else:
            _run_plot(args)
    except (_UsageError, ValueError) as exc:
        msg = str(exc)
        if "more than max_buckets" in msg:
            msg += " (on the command line: --eps-error, --max-buckets)"
        print(f"fastpld: error: {msg}", file=sys.stderr)
        return 2
    except _MissingDependency as exc:
        print(f"fastpld: error: {exc}", file=sys.stderr)
        return 1
    except _SomeFailed:
        return 3
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
