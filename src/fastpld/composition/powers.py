"""The numpy backend's node powers: the references of ``NativeBackend.convolve``.

A node's Fourier-domain power ``prod_c X_c^m_c``, its inverse FFT and its round-off bound, in polar
form (:func:`_numpy_power`), by direct products (:func:`_direct_power`) or from the lattice spectra
(:func:`_lattice_power_numpy`).  The native backend runs the same arithmetic in compiled kernels.
"""
from __future__ import annotations

import math

import numpy as np

from .. import _kernels, _lowdft
from .._fft_error import _MIXED_RATIO, _fwd_error, _inverse64_l1, _low_e2
from .lattice import _lattice_amp
from .roundoff import _fp_fft_bound


def _spectrum(backend, p, cen, N, fdt, dft_in=None):
    """The numpy backend's spectrum of one input: ``rfft`` of its circular placement, or its
    direct DFT (``dft_in``: :func:`fastpld._kernels.dft_order`'s ``(q, steps, err)``)."""
    if dft_in is not None:
        out = np.empty(N // 2 + 1, dtype=np.clongdouble if np.dtype(fdt) == np.longdouble else np.complex128)
        return _kernels.small_dft(dft_in[0], dft_in[1], N, out)
    buf = np.zeros(N, dtype=fdt)
    np.add.at(buf, (np.arange(p.size) - cen) % N, np.asarray(p).astype(fdt))
    return backend.rfft(buf, N)


def _lattice_power_numpy(backend, lat, N, dtype, u):
    """Reference of ``NativeBackend.convolve(lat=...)`` (``_core.lattice_power`` and the inverse FFT): the
    power from :func:`_lattice_spectrum` at every frequency, its bound from :func:`_lattice_amp` and the
    inverse FFT's: ``(l1, linf, out)``."""
    _, L, Phi, _, _, Q, _ = lat
    lp, amp = _lattice_amp(lat, u)
    Pc = _kernels.polar_power(L, Phi, Q)
    w = np.full(amp.shape, 2.0)
    w[0] = 1.0
    if N % 2 == 0:
        w[-1] = 1.0
    with np.errstate(over="ignore", under="ignore"):
        e2 = math.sqrt(float(np.sum(w * amp**2)))
        p2 = math.sqrt(float(np.sum(w * np.exp(2 * lp))))
    l1 = e2 + 12.0 * u * math.ceil(math.log2(max(N, 2))) * p2
    return l1, l1 / math.sqrt(N), backend.irfft(Pc, N)


def _numpy_power(backend, ins, N, dtype, fdt, u, ser, low, g_extra, dft=None):
    """Reference (numpy backend) of ``NativeBackend.convolve``: ``(l1, linf, out)``.

    ``fdt``: precision of the forward transforms (float64 in a long double node: section 3c of
    docs/roundoff.md; the whole node in ``dtype`` if that forward error is not negligible).
    ``dft``: per input ``(q, steps, err)``: direct DFTs instead of forward FFTs (section 3e; ``fdt``
    is then ``dtype``).
    """
    specs = []
    logmag = phase = None
    quarter = 0
    if dft is not None:
        fdt = dtype
    for i, (p, cen, m) in enumerate(ins):
        X = _spectrum(backend, p, cen, N, fdt, None if dft is None else dft[i])
        specs.append((X, m))
        with np.errstate(divide="ignore", invalid="ignore"):
            lr = np.log(np.abs(X)).astype(dtype)
            psi, q = _kernels.quarter_angle(X)  # arg X = psi + q pi/2, |psi| <= pi/4
            ph = psi.astype(dtype)
        logmag = m * lr if logmag is None else logmag + m * lr
        phase = m * ph if phase is None else phase + m * ph
        quarter = (quarter + (int(m) % 4) * q.astype(np.int64)) & 3
    fwd = _fwd_error(ins, N, fdt, u, ser, dft)
    fp_l1, fp_linf, e2, p2 = _fp_fft_bound(specs, N, u, g_extra, low, fwd, detail=True)
    if fdt is not dtype and e2 > _MIXED_RATIO * (_low_e2(low) + (fp_l1 - e2)):
        return _numpy_power(backend, ins, N, dtype, dtype, u, ser, low, g_extra)
    if ser is not None:
        logmag[:ser[0]] = ser[1]
        phase[:ser[0]] = ser[2]
        quarter[:ser[0]] = 0
    # (reduced by 2 pi in the node's precision: a float64 2 pi would put float64-size phase errors
    # (|phase| * 2.4e-16) into long double nodes, whose charge assumes long double accuracy)
    out = backend.irfft(_kernels.polar_power(logmag, phase, quarter), N)
    return fp_l1, fp_linf, out


def _binary_power(x, m):
    """``x^m`` elementwise by binary powering (the compiled kernels' addition chain; the first factor taken as 1 times
    it, exactly), in ``x``'s precision."""
    y = np.ones_like(x)
    e = int(m)
    while True:
        if e & 1:
            y = y * x
        e >>= 1
        if not e:
            return y
        x = x * x


def _direct_power(backend, ins, N, u, dft=None, dtype=np.float64, inv64=None, low_dft=None):
    """Reference (numpy backend) of the direct powers of a node without the series, float64 or long double
    (``dtype``; ``NativeBackend.convolve(direct=True)``, same arithmetic): ``(l1, linf, out)``.

    Instead of the polar form, ``P = prod_c X_c^m_c`` is computed by binary powering and
    products (complex products by the textbook formula: relative error at most ``sqrt(5) u``
    each without FMA [Brent, Percival & Zimmermann 2007], ``2 u`` with FMA; any addition chain for ``x^m`` and
    the product over the inputs accumulate ``M - 1`` such roundings, ``M = sum m_c``), so
    ``|P~ - prod X~_c^m_c| <= ((1 + sqrt(5) u)^(M - 1) - 1) B <= 4.01 (M - 1) u B`` with
    ``B = prod (|X~_c| + g)^m_c``.  The forward error ``|X~_c - X_c| <= g`` propagates as in
    :func:`_fp_fft_bound`: ``g B sum_c m_c / (|X~_c| + g)``.  ``B`` and that sum are computed in
    float64 (relative error below ``(2M + 3C) u <= 3e-10`` for ``M <= 2^20``): both terms are
    inflated by ``1 + 1e-9``, and ``M 1e-300`` covers underflow (every factor is at most ~1, so
    an underflowed ``B`` leaves at most ``M 2.3e-308`` of either term).  No logarithms, no
    trigonometric calls: the bound is of the polar form's size (both are dominated by the forward
    term) at a fraction of its cost (docs/roundoff.md, section 3d).

    ``inv64``: as ``NativeBackend.convolve``'s (a long double node's test of its bound with a float64 inverse FFT).
    ``low_dft``: per input of a float64 node, the most low frequencies summed directly (:mod:`fastpld._lowdft`):
    there its forward error is ``g_c = rho_c g`` instead of ``g``, and the forward term is ``B sum_c g_c m_c /
    (|X~_c| + g)`` (``B`` and the denominators keep ``g``: ``(|X~| + g_c)^(m - 1) <= (|X~| + g)^m / (|X~| + g)``).
    """
    g, _ = _fwd_error(ins, N, dtype, u, None, dft)
    P = B = D = None
    msum = 0
    klow_all = None
    for i, (p, cen, m) in enumerate(ins):
        X = _spectrum(backend, p, cen, N, dtype, None if dft is None else dft[i])
        klow, rho, XL = 0, 1.0, None
        if low_dft is not None and low_dft[i]:
            X = np.array(X, dtype=np.complex128)
            klow, rho, XL = _lowdft.spectrum(X, p, cen, N, m, g, low_dft[i], sum(mm for _, _, mm in ins), False)
        klow_all = klow if klow_all is None else min(klow_all, klow)
        # (|X| in float64, also of a long double X: relative error <= 3 u64, inside the 1e-9 inflation)
        xr, xi = X.real.astype(np.float64), X.imag.astype(np.float64)
        r = np.sqrt(xr * xr + xi * xi)
        y, b = _binary_power(X, m), _binary_power(r + g, m)
        d = m / (r + g)
        d[:klow] *= rho
        newP = y if P is None else P * y
        if klow:
            # (the summed values' powers in long double, multiplied into the product in long double: _core's)
            ld = np.clongdouble
            yl = _binary_power(XL[0:2 * klow:2].astype(ld) + 1j * XL[1:2 * klow:2].astype(ld), m)
            newP[:klow] = (yl if P is None else P[:klow].astype(ld) * yl).astype(np.complex128)
        P, B, D = (newP, b, d) if P is None else (newP, B * b, D + d)
        msum += int(m)
    c1 = np.full(B.shape, 4.01 * (msum - 1) * u)
    c1[:klow_all or 0] = _lowdft.power_rounding(msum, len(ins))
    with np.errstate(under="ignore"):
        amp = (g * D + c1) * B * (1 + 1e-9) + msum * 1e-300
        w = np.full(amp.shape, 2.0)
        w[0] = 1.0
        if N % 2 == 0:
            w[-1] = 1.0
        e2 = math.sqrt(float(np.sum(w * amp * amp)))
        p2 = math.sqrt(float(np.sum(w * B * B))) * (1 + 1e-9)
    if inv64 is not None and np.dtype(dtype) == np.dtype(np.longdouble):
        # (a float64 inverse FFT where its bound passes the node's test: section 3h)
        l1 = _inverse64_l1(e2, p2, N)
        if inv64(l1):
            return l1, l1 / math.sqrt(N), backend.irfft(P.astype(np.complex128), N)
    g_inv = 12.0 * u * math.ceil(math.log2(max(N, 2)))
    out = backend.irfft(P, N)
    l1 = e2 + g_inv * p2
    return l1, l1 / math.sqrt(N), out


def numpy_convolve(backend, ins, N, dtype, u, ser=None, low=None, dead_log=800.0, fwd_dtype=None, direct=False,
                   dft=None, lat=None, raw=False, inv64=None, low_dft=None):
    """The numpy backend's node power (:meth:`fastpld._backend.NumpyBackend.convolve`), the reference of
    ``NativeBackend.convolve`` with the same arguments: ``(out, l1, linf)``.

    ``lat``: from the lattice spectra (:func:`_lattice_power_numpy`); ``direct``: by direct products
    (:func:`_direct_power`); else in polar form (:func:`_numpy_power`, forward transforms in ``fwd_dtype``,
    the series' scale ``ser[5]`` widening the FFT error of the other frequencies).  ``dead_log`` and ``raw``
    concern the native backend only: no frequency is skipped, and ``out`` is scaled.
    """
    if lat is not None:
        l1, linf, out = _lattice_power_numpy(backend, lat, N, dtype, u)
    elif direct:
        l1, linf, out = _direct_power(backend, ins, N, u, dft, dtype, inv64, low_dft)
    else:
        fdt = dtype if fwd_dtype is None else fwd_dtype
        l1, linf, out = _numpy_power(backend, ins, N, dtype, fdt, u, ser, low, ser[5] if ser is not None else 0.0, dft)
    return out, l1, linf


def numpy_finish_node(out, shift, floor, trim):
    """The numpy backend's :meth:`fastpld._backend.Backend.finish_node` (the reference of the compiled
    ``_kernels.finish_node``): ``(lin, first, dropped)``."""
    lin = np.roll(out, -shift) if shift else out
    # exact result is non-negative: clipping only moves towards it
    lin = np.maximum(lin, 0)
    if trim:
        lin = np.where(lin < floor, 0, lin)
    # entries below float64's range would vanish when the next node casts to float64 for its
    # Chernoff MGF: drop them here and charge their (tiny) mass
    tiny = (lin > 0) & (lin < 1e-300)
    dropped = 0.0
    if tiny.any():
        dropped = float(np.sum(lin[tiny]) if lin.dtype == np.float64 else tiny.sum() * 1e-300)
        lin = np.where(tiny, 0, lin)
    nz = np.flatnonzero(lin)
    if nz.size == 0:
        raise ValueError("composition lost all probability mass to round-off; increase eps_error or delta_error")
    first = int(nz[0])
    lin = lin[first:int(nz[-1]) + 1]
    return lin / lin.sum(), first, dropped
