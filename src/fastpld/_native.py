"""The ``native`` backend: cached pyFFTW plans and the compiled kernels of :mod:`fastpld._core`.

:mod:`fastpld._fft` registers the backend on first use; importing this module fails
(and ``numpy`` stays the default) when pyFFTW or the compiled core is missing.

Plans.  One real-to-complex and one complex-to-real plan per (length, dtype),
each owning aligned input/output buffers, are built once and reused across
stages and across ``compose`` calls.  FFTW's planner is not thread-safe, so
plans are *built* under a global lock; execution (``FFTW.execute`` releases
the GIL) needs no lock because plans belong to a workspace
(:func:`fastpld.resources.workspace`) that one thread uses at a time: threads
never share a buffer, and a second thread never waits for the first one's FFT.
Plans are kept in the process-wide store bounded by
:func:`fastpld.set_cache_limit` (least recently used first out); rebuilding an
evicted plan costs about one FFT of its length at 2^18 and more, ~0.3 ms below
(FFTW keeps its planner's wisdom).
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import math
import os
import sys
import threading
import numpy as np

from . import _kernels, _lowdft, resources
from ._backend import Backend
from ._fft_error import _MIXED_RATIO, _fwd_error, _inverse64_l1, _low_e2

if _kernels._core is None:  # not built, or FASTPLD_PURE_PYTHON=1
    raise ImportError("the compiled core fastpld._core is unavailable")


def _pyfftw_core():
    """pyFFTW's compiled module ``pyfftw.pyfftw`` (``FFTW``, ``empty_aligned``), without the package's
    ``__init__``: that one imports ``pyfftw.interfaces``, hence ``scipy.fft`` and ``dask.array`` where installed,
    120-300 ms of a process's first composition for classes fastpld does not use (the extension module itself
    imports only numpy).  Registered under its own name, so that a later ``import pyfftw`` finds it and the
    two share one module (one ``FFTW`` class, one planner lock); loaded the usual way if pyFFTW is imported
    already or its layout is not the expected one."""
    mod = sys.modules.get("pyfftw.pyfftw")
    if mod is not None:
        return mod
    spec = importlib.util.find_spec("pyfftw")  # (a top-level name: found, not imported)
    if spec is not None and spec.submodule_search_locations and "pyfftw" not in sys.modules:
        for folder in spec.submodule_search_locations:
            for suffix in importlib.machinery.EXTENSION_SUFFIXES:
                path = os.path.join(folder, "pyfftw" + suffix)
                if os.path.isfile(path):
                    core = importlib.util.spec_from_file_location("pyfftw.pyfftw", path)
                    mod = importlib.util.module_from_spec(core)
                    sys.modules["pyfftw.pyfftw"] = mod
                    try:
                        core.loader.exec_module(mod)
                    except BaseException:
                        sys.modules.pop("pyfftw.pyfftw", None)
                        raise
                    return mod
    import pyfftw.pyfftw  # (the package and its interfaces)
    return sys.modules["pyfftw.pyfftw"]


pyfftw = _pyfftw_core()

__all__ = ["NativeBackend"]

_PLAN_LOCK = threading.Lock()
_FLAGS = ("FFTW_ESTIMATE", "FFTW_DESTROY_INPUT")
_COMPLEX = {np.dtype(np.float64): np.complex128, np.dtype(np.longdouble): np.clongdouble}
_TWIDDLE_BYTES = 2  # per point: FFTW's own tables of a plan (measured: ~1.7 bytes per point at 2^20)


def _plan(n: int, dtype, forward: bool) -> pyfftw.FFTW:
    """This workspace's plan for a real FFT of length ``n`` (built under the global lock on first use)."""
    dt = np.dtype(dtype)
    key = (n, dt.char, forward)
    ws = resources.workspace()
    fft = ws.get(key)
    if fft is not None:
        return fft
    cdt = _COMPLEX[dt]
    real = pyfftw.empty_aligned(n, dtype=dt)
    cplx = pyfftw.empty_aligned(n // 2 + 1, dtype=cdt)
    with _PLAN_LOCK:
        if forward:
            fft = pyfftw.FFTW(real, cplx, direction="FFTW_FORWARD", flags=_FLAGS, threads=1)
        else:
            fft = pyfftw.FFTW(cplx, real, direction="FFTW_BACKWARD", flags=_FLAGS, threads=1)
    ws.put(key, fft, real.nbytes + cplx.nbytes + _TWIDDLE_BYTES * n)
    return fft


_MAX_DIRECT_SCRATCH = 1 << 20  # doubles (8 MB) kept per workspace; larger nodes allocate per call


def _direct_scratch(F: int):
    """This workspace's ``(B, D, work)`` arrays for a direct-power node with ``F`` frequencies (reused up
    to ``_MAX_DIRECT_SCRATCH`` doubles: fresh arrays of these sizes are fresh mmaps, page faults on
    every node; larger ones are not kept)."""
    need = 8 * F + 1
    ws = resources.workspace()
    buf = ws.get("direct")
    if buf is None or buf.size < need:
        buf = np.empty(max(need, 1 << 12))
        if buf.size <= _MAX_DIRECT_SCRATCH:
            ws.put("direct", buf, buf.nbytes)
    return buf[:F], buf[F:2 * F], buf[2 * F:]


def clear_plans() -> None:
    """Drop the calling thread's workspace's plans and scratch arrays (:func:`fastpld.clear_caches` drops every one)."""
    resources.workspace().clear()


def _forward(fwd, p, cen, N, dft_in=None):
    """One input's spectrum into ``fwd.output_array``: the forward plan on its circular placement, or
    its direct DFT (``dft_in``: :func:`fastpld._kernels.dft_order`'s ``(q, steps, err)``)."""
    if dft_in is not None:
        _kernels.small_dft(dft_in[0], dft_in[1], N, fwd.output_array)
    else:
        _kernels.fold(np.ascontiguousarray(p), cen, fwd.input_array)
        fwd.execute()


class NativeBackend(Backend):
    """pyFFTW plans reused per (length, dtype) and the compiled kernels."""

    name = "native"
    native = True

    def rfft(self, x, n):
        x = np.asarray(x)
        dt = np.longdouble if x.dtype == np.longdouble else np.float64
        fft = _plan(n, dt, True)
        buf = fft.input_array
        m = min(n, x.size)
        buf[:m] = x[:m]
        buf[m:] = 0
        fft.execute()
        return fft.output_array.copy()

    def abs_rfft(self, p, cen, n, out):
        # placed straight into the plan's buffer, the modulus read from its output: no copies
        fft = _plan(n, np.float64, True)
        _forward(fft, p, cen, n)
        return np.abs(fft.output_array, out=out)

    def irfft(self, X, n):
        X = np.asarray(X)
        dt = np.longdouble if X.dtype == np.clongdouble else np.float64
        fft = _plan(n, dt, False)
        buf = fft.input_array
        m = min(buf.size, X.size)
        buf[:m] = X[:m]
        buf[m:] = 0
        fft.execute()
        return fft.output_array * dt(1.0 / n)

    def convolve(self, ins, N, dtype, u, ser=None, low=None, dead_log=800.0, fwd_dtype=None, direct=False, dft=None,
                 lat=None, raw=False, inv64=None, low_dft=None):
        """``irfft(prod_c rfft(fold(p_c))^m_c)`` and its round-off bound ``(out, l1, linf)``.

        ``ins``: list of ``(probs, centre_index, m)``.  Same arithmetic as the reference
        in :func:`fastpld.composition.node._run_node` / :func:`fastpld.composition.roundoff._fp_fft_bound`, except
        that frequencies where one input's power is below ``e^-dead_log`` are set to 0 and
        charged ``2 e^(10 - dead_log)`` each (``dead_log`` >= 40; the caller sizes it so that
        all such charges together are negligible against its round-off allowance).
        ``fwd_dtype``: precision of the forward transforms (default ``dtype``): a long double
        node may take float64 forward FFTs (see :func:`fastpld._fft_error._fwd_error`); the powers,
        the polar evaluation and the inverse FFT stay in ``dtype``.
        ``direct``: a float64 node without the series (``ser=None``) computes the powers as
        products (reference: :func:`fastpld.composition.powers._direct_power`) instead of in polar form.
        ``dft``: per input ``(q, steps, err)`` of :func:`fastpld._kernels.dft_order`; the spectra come
        from direct DFTs (:func:`fastpld._kernels.small_dft`, in ``dtype``) instead of forward FFTs.
        ``lat``: :func:`fastpld.composition.lattice._lattice_spectrum` of the node: the power and its bound at every
        frequency come from it, no forward transform (reference: ``composition.powers._lattice_power_numpy``).
        ``raw``: ``out`` is the inverse plan's own output buffer, not yet multiplied by ``1/N`` (for
        ``_core.finish_node(..., scale=1/N)``, which reads it before this thread's next transform of
        that length and precision): no copy of the node's output.
        ``inv64``: for a long double node with ``direct``, a test ``inv64(l1) -> bool`` of the bound ``l1`` it would
        have with a float64 inverse FFT (:func:`fastpld._fft_error._inverse64_l1`); where it passes, the
        long double power is rounded to complex128 and transformed in float64 (``out`` is then float64).
        ``low_dft``: for a float64 node with ``direct``, per input the most low frequencies to sum directly
        (:func:`fastpld._lowdft.plan`; 0: none), charged their own bound there.
        """
        dt = np.dtype(dtype)
        if _kernels._core is None and (lat is not None or direct):
            # (tests run this backend with every kernel replaced by its reference: these two paths have
            # only compiled kernels, so their numpy references; the output scaled, see finish_node)
            from .composition.powers import numpy_convolve
            return numpy_convolve(self, ins, N, dtype, u, ser, low, dead_log, fwd_dtype, direct, dft, lat,
                                  inv64=inv64, low_dft=low_dft)
        if _kernels._core is None:
            raw = False
        if lat is not None:
            return self._convolve_lattice(lat, N, dt, u, raw)
        fdt = dt if (fwd_dtype is None or dft is not None) else np.dtype(fwd_dtype)
        if direct:
            return self._convolve_direct(ins, N, u, dead_log, dft, raw, dt, inv64, low_dft)
        fwd = _plan(N, fdt, True)
        inv = _plan(N, dt, False)
        F = N // 2 + 1
        C = len(ins)
        g_inv = 12.0 * u * math.ceil(math.log2(max(N, 2)))
        # forward error (and the series' scale) per spectrum value; u_pol: rounding of |X| and arg X
        g, u_pol = _fwd_error(ins, N, fdt, u, ser, dft)
        logmag = np.empty(F, dtype=dt)
        phase = np.empty(F, dtype=dt)
        LR = np.empty((C, F))
        LRG = np.empty((C, F))
        PH = np.empty((C, F))
        ms = np.empty(C)
        dead = np.empty(F, dtype=np.uint8)
        quarter = np.empty(F, dtype=np.uint8)  # arg X = psi + q pi/2: the quarter turns, summed mod 4
        # skip frequencies where one input's power alone is below e^-T (T = dead_log): the others'
        # powers are at most (1 + g')^m' <= e^10 there, so the product, replaced by 0, is below
        # e^(10 - T); each is charged 2 e^(10 - T) (>= sqrt(2) times it, for the conjugate pair)
        # in both norms of the bound (at least 2e-300 each)
        msum = float(sum(m for _, _, m in ins))
        skip = msum * (g + 1e-10) < 10 and dead_log >= 40.0
        dead_charge = max(2e-300, 2.0 * math.exp(10.0 - dead_log))
        for c, (p, cen, m) in enumerate(ins):
            _forward(fwd, p, cen, N, None if dft is None else dft[c])
            rdead = math.exp(-dead_log / m) - g if skip else 0.0
            _kernels.spectrum_terms(fwd.output_array, m, logmag, phase, quarter, LR[c], LRG[c], PH[c], g, c == 0,
                                    dead, max(rdead, 0.0))
            ms[c] = m
        K = 0
        if ser is not None:  # accurate low-frequency series (composition.series._series_spectrum)
            K = ser[0]
            logmag[:K] = ser[1]
            phase[:K] = ser[2]
            quarter[:K] = 0
        e2sq, p2sq, ndead = _kernels.power_fp(logmag, phase, quarter, LR, LRG, PH, ms, g, u_pol, N, inv.input_array,
                                              K, low[1] if low else None, low[2] if low else None, dead)
        e2, p2 = math.sqrt(e2sq) + dead_charge * ndead, math.sqrt(p2sq) + dead_charge * ndead
        if fdt != dt and e2 > _MIXED_RATIO * (_low_e2(low) + g_inv * p2):
            # the float64 forward error is not negligible here: the whole node in dtype instead
            return self.convolve(ins, N, dtype, u, ser, low, dead_log, raw=raw)  # (dft is None: fdt == dt with it)
        inv.execute()
        out = inv.output_array if raw else inv.output_array * (dt.type(1) / dt.type(N))
        l1 = e2 + g_inv * p2
        return out, l1, l1 / math.sqrt(N)

    def finish_node(self, out, shift, floor, trim, N):
        """:meth:`fastpld._backend.Backend.finish_node` in one compiled pass (``out`` may be the inverse
        plan's unscaled buffer of ``convolve(..., raw=True)``: scaled by ``1/N`` here)."""
        if _kernels._core is None:  # (tests run this backend with every kernel replaced by its reference)
            from .composition.powers import numpy_finish_node
            return numpy_finish_node(out, shift, floor, trim)  # (convolve scaled it)
        lin, first, tiny_mass, n_tiny = _kernels.finish_node(out, shift, float(floor), trim, 1.0 / N)
        dropped = (tiny_mass if lin.dtype == np.float64 else n_tiny * 1e-300) if n_tiny else 0.0
        return lin, first, dropped

    def _convolve_lattice(self, lat, N, dt, u, raw=False):
        inv = _plan(N, dt, False)
        _, L, Phi, dL, dP, Q, up = lat
        # the power and its bound (composition.lattice._lattice_amp) in one pass
        e2sq, p2sq = _kernels.lattice_power(L, Phi, Q, dL, dP, up, u, N, inv.input_array)
        inv.execute()
        out = inv.output_array if raw else inv.output_array * (dt.type(1) / dt.type(N))
        l1 = math.sqrt(e2sq) + 12.0 * u * math.ceil(math.log2(max(N, 2))) * math.sqrt(p2sq)
        return out, l1, l1 / math.sqrt(N)

    def _convolve_direct(self, ins, N, u, dead_log=800.0, dft=None, raw=False, dt=np.dtype(np.float64), inv64=None,
                         low_dft=None):
        """``convolve`` of a node without the series by direct powers (reference: composition.powers._direct_power),
        in float64 or long double (``dt``).

        Dead frequencies as in the polar path: past an input's last frequency where its power
        ``(|X| + g)^m`` is at least ``e^-T`` (``T = dead_log``), that power alone is below ``e^-T``
        and the others' are at most ``(1 + g)^m <= e^10``; the frequencies past the earliest such
        cut (a suffix) are set to 0 and charged ``2 e^(10 - T)`` each in both norms.
        """
        ld = dt == np.longdouble
        fwd = _plan(N, dt, True)
        inv = _plan(N, dt, False)
        F = N // 2 + 1
        g, _ = _fwd_error(ins, N, dt, u, None, dft)
        P = inv.input_array  # the product accumulates in the inverse plan's input buffer
        B, D, work = _direct_scratch(F)
        msum = float(sum(m for _, _, m in ins))
        skip = msum * (g + 1e-10) < 10 and dead_log >= 40.0
        K = F
        klow_all = None  # (the frequencies where every input's value was summed directly: powers in long double)
        for c, (p, cen, m) in enumerate(ins):
            _forward(fwd, p, cen, N, None if dft is None else dft[c])
            rdead = max(math.exp(-dead_log / m) - g, 0.0) if skip else 0.0
            if ld:
                K = _kernels.power_direct_ld(fwd.output_array.view(np.longdouble), int(m), P.view(np.longdouble),
                                             B, D, g, c == 0, rdead, K)
            else:
                klow, rho, XL = 0, 1.0, None
                if low_dft is not None and low_dft[c]:
                    # (its first frequencies summed directly, within rho g, their powers in long double: _lowdft)
                    klow, rho, XL = _lowdft.spectrum(fwd.output_array, p, cen, N, m, g, low_dft[c], msum, True)
                klow_all = klow if klow_all is None else min(klow_all, klow)
                K = _kernels.power_direct(fwd.output_array, int(m), P, B, D, g, c == 0, work, rdead, K, klow, rho,
                                          XL)
        P[K:] = 0
        e2sq, p2sq = _kernels.power_direct_bound(B, D, g, msum, u, N, K, klow_all or 0,
                                                 _lowdft.power_rounding(msum, len(ins)))
        dead = (F - K) * max(2e-300, 2.0 * math.exp(10.0 - dead_log)) if K < F else 0.0
        e2, p2 = math.sqrt(e2sq) + dead, math.sqrt(p2sq) + dead
        if ld and inv64 is not None:
            l1 = _inverse64_l1(e2, p2, N)
            if inv64(l1):
                # the long double power rounded to complex128 (nearest) and a float64 inverse FFT
                inv = _plan(N, np.float64, False)
                inv.input_array[:] = P
                inv.execute()
                out = inv.output_array if raw else inv.output_array * (1.0 / N)
                return out, l1, l1 / math.sqrt(N)
        inv.execute()
        out = inv.output_array if raw else inv.output_array * (dt.type(1) / dt.type(N))
        g_inv = 12.0 * u * math.ceil(math.log2(max(N, 2)))
        l1 = e2 + g_inv * p2
        return out, l1, l1 / math.sqrt(N)

