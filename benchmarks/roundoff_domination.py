"""Actual FFT-node round-off against the charged bound (numbers quoted in docs/roundoff.md).

For every FFT node of the workloads in tests/test_roundoff.py, the node's output is compared
with an independent long-double reference of the exact *cyclic* convolution of the node's own
inputs on the node's own window (so wrap-around is excluded and only round-off and the
charged dropping of round-off-level entries remain).

    python benchmarks/roundoff_domination.py
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import test_roundoff as T  # noqa: E402


class _Patch:
    def setattr(self, obj, name, val):
        self.saved = (obj, name, getattr(obj, name))
        setattr(obj, name, val)

    def undo(self):
        obj, name, v = self.saved
        setattr(obj, name, v)


def main():
    ratios = []
    for name, (mech, count, kw) in T.WORKLOADS.items():
        _, records = T._run_with_spy(_Patch(), mech, count, kw)
        rows = []
        for inputs, out, info in records:
            if len(inputs) == 1 and inputs[0][1] == 1:
                continue
            ref, off, _, _ = T._reference(inputs)
            # the node centres each input at its mean index (as in composition.node._run_node)
            cen = sum(m * int(round(float(np.dot(np.arange(p.probs.size), np.asarray(p.probs, dtype=float))
                                          / float(np.sum(p.probs))))) for p, m in inputs)
            c, _ = info["window"]
            n = info["N"]
            s0 = cen + c
            cyc = np.zeros(n, dtype=np.longdouble)
            np.add.at(cyc, (np.arange(ref.size) - s0) % n, ref)
            cyc /= cyc.sum()
            shift = int(round((float(out.offset) - off) / out.mesh)) - s0
            o = np.zeros(n, dtype=np.longdouble)
            o[shift: shift + out.probs.size] = np.asarray(out.probs, dtype=np.longdouble)
            tv = float(np.abs(o - cyc).sum() / 2)
            rows.append((tv / info["fp"], tv, info["fp"], "longdouble" if info["dtype"] is np.longdouble else "float64"))
            ratios.append(tv / info["fp"])
        w = max(rows)
        print(f"{name:22s} nodes {len(rows):2d}  worst actual/charged {w[0]:.1e} "
              f"(actual TV {w[1]:.1e}, charged {w[2]:.1e}, {w[3]})")
    print(f"all {len(ratios)} nodes: actual/charged median {np.median(ratios):.1e}, worst {max(ratios):.1e}")


if __name__ == "__main__":
    main()
