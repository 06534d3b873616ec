"""Command line: ``fastpld epsilon`` and ``fastpld delta`` for a DP-SGD style run.

Bad input prints one line naming the parameter and exits with status 2.
"""
from __future__ import annotations

import argparse
import json
import sys

from . import compose
from .mechanisms import Gaussian, Laplace, PoissonSubsampledGaussian, PoissonSubsampledLaplace


def _mechanism(args):
    q = args.sampling_probability
    if args.laplace_scale is not None:
        if q is None or q == 1.0:
            return Laplace(args.laplace_scale)
        return PoissonSubsampledLaplace(args.laplace_scale, q)
    if args.sigma is None:
        raise ValueError("one of --sigma or --laplace-scale is required")
    if q is None or q == 1.0:
        return Gaussian(args.sigma)
    return PoissonSubsampledGaussian(args.sigma, q)


def _common(p):
    p.add_argument("--sigma", type=float, help="Gaussian noise multiplier (noise std / sensitivity)")
    p.add_argument("--laplace-scale", type=float, help="Laplace scale (instead of --sigma)")
    p.add_argument("--sampling-probability", type=float, default=None, help="Poisson sampling probability q")
    p.add_argument("--steps", type=int, required=True, help="number of compositions")
    p.add_argument("--eps-error", type=float, default=0.1)
    p.add_argument("--delta-error", type=float, default=1e-10)
    p.add_argument("--method", default="auto")
    p.add_argument("--json", action="store_true", help="print JSON")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fastpld", description="Certified privacy accounting by evolving discretisation.")
    sub = parser.add_subparsers(dest="command", required=True)
    pe = sub.add_parser("epsilon", help="epsilon(delta) of a composed mechanism")
    _common(pe)
    pe.add_argument("--delta", type=float, required=True)
    pd = sub.add_parser("delta", help="delta(epsilon) of a composed mechanism")
    _common(pd)
    pd.add_argument("--epsilon", type=float, required=True)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        mech = _mechanism(args)
        pld = compose(mech, args.steps, eps_error=args.eps_error, delta_error=args.delta_error, method=args.method)
        if args.command == "epsilon":
            b = pld.epsilon(args.delta)
            key, query = "epsilon", {"delta": args.delta}
        else:
            b = pld.delta(args.epsilon)
            key, query = "delta", {"epsilon": args.epsilon}
    except ValueError as exc:
        print(f"fastpld: error: {exc}", file=sys.stderr)
        return 2
    params = {"mechanism": repr(mech), "steps": args.steps, "eps_error": args.eps_error,
              "delta_error": args.delta_error, "method": pld.method, **query}
    if args.json:
        print(json.dumps({key: {"lower": b.lower, "estimate": b.estimate, "upper": b.upper}, "parameters": params}))
    else:
        print(f"{key} = {b.estimate:.6g}  (certified: {b.lower:.6g} <= {key} <= {b.upper:.6g})")
        print(f"  {mech!r}, {args.steps} steps, method {pld.method}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
