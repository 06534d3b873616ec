"""What the randomised sweeps (``oracle_sweep.py``, ``robustness_sweep.py``) share: their command line and clock."""
from __future__ import annotations

import argparse
import random
import time


def start(doc: str, argv=None):
    """``(args, rng, t0)``: ``--seconds`` (how long to draw, default 300) and ``--seed`` (default 1) parsed from
    ``argv``, a generator seeded with it, and the clock's start; ``doc``'s first line describes the command."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=300.0)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    return a, random.Random(a.seed), time.perf_counter()
