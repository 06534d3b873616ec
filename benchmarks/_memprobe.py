"""Run one accountant once in a fresh process and print JSON: time, peak extra RSS, tracemalloc peak.

Used by paper_figures.py (one subprocess per measurement so peaks do not leak between runs):

    python benchmarks/_memprobe.py LIB MECH NOISE K [METHOD] [DELTA_ERROR] [TRACE_MAX_SECONDS]

LIB is fastpld, prv or dpa.  Peak extra RSS: the kernel's high-water mark (VmHWM) is reset
through /proc/self/clear_refs right before the run, so ``VmHWM - VmRSS(before)`` is the extra
resident memory of the run alone.  Then (if the first run took at most TRACE_MAX_SECONDS) the run
is repeated under tracemalloc (numpy reports its
buffers to tracemalloc) for the peak of traced allocations.
"""
from __future__ import annotations

import json
import os
import sys
import time
import tracemalloc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402


def _status(field):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return None


def _reset_hwm():
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def main():
    lib, mech, noise, k = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
    method = sys.argv[5] if len(sys.argv) > 5 else "auto"
    de = float(sys.argv[6]) if len(sys.argv) > 6 else C.DELTA_ERROR
    trace_max = float(sys.argv[7]) if len(sys.argv) > 7 else float("inf")
    if lib == "fastpld":
        def run():
            return C.run_fastpld(mech, noise, k, method=method, delta_error=de)
    elif lib == "prv":
        def run():
            return C.run_prv(mech, noise, k, delta_error=de)
    elif lib == "dpa":
        def run():
            return C.run_dpa(mech, noise, k)
    else:
        raise SystemExit(f"unknown lib {lib!r}")
    out = {}
    try:
        rss0 = _status("VmRSS")
        ok = _reset_hwm()
        t0 = time.perf_counter()
        r = run()
        out["wall"] = time.perf_counter() - t0
        hwm = _status("VmHWM")
        out["rss_peak_extra"] = (hwm - rss0) if ok and hwm is not None else None
        out["result"] = r
        print("MEMPROBE " + json.dumps(out), flush=True)  # partial line: survives a later timeout
        if out["wall"] <= trace_max:
            tracemalloc.start()
            run()
            out["tracemalloc_peak"] = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
    except Exception as e:  # reported, not raised: the caller records infeasible settings
        out["error"] = f"{type(e).__name__}: {e}"
    print("MEMPROBE " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
