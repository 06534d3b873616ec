"""The privacy loss of a Poisson-subsampled mechanism in one direction, and batched planner MGFs."""
from __future__ import annotations

import math

import numpy as np

from .. import _kernels, _reference
from .base import ContinuousLoss, _U, _rel_of_log
from .pairs import _BasePair, _GaussPair, _binomial_tables, _integer_chord, _log_binomial_moment
from .quadrature import _cdf_moments
from .tails import _generic_window

__all__ = ["SubsampledLoss", "subsampled_log_mgf_rows"]


class SubsampledLoss(ContinuousLoss):
    """Loss of a Poisson-subsampled mechanism in one direction.

    ``remove``: ``Y = log(1 - q + q e^L)`` with ``w ~ M = (1-q) P + q Q``
    (bounded below by ``log(1-q)``); ``add``: ``Y = -log(1 - q + q e^L)`` with
    ``w ~ P`` (bounded above by ``-log(1-q)``).
    """

    cdf_rel_error = 1e-11

    def __init__(self, pair: _BasePair, q: float, direction: str):
        self.pair = pair
        self.q = float(q)
        self.direction = direction
        self._ylo = math.log1p(-self.q)
        def g(l):
            if not math.isfinite(l):
                return math.inf if l > 0 else self._ylo
            if l > 700:  # e^l overflows: log(1 - q + q e^l) = l + log(q) + log1p((1 - q) e^-l / q)
                return l + math.log(self.q) + math.log1p((1 - self.q) * math.exp(-l) / self.q)
            return math.log1p(-self.q + self.q * math.exp(l))
        lo, hi = pair.support
        if direction == "remove":
            self.support = (max(self._ylo, g(lo)), g(hi))
            self.atoms = tuple(g(x) for x in pair.atoms)
        else:
            self.support = (-g(hi), min(-self._ylo, -g(lo)))
            self.atoms = tuple(-g(x) for x in pair.atoms)
        self._mean = None
        self._std = None
        # the Gaussian pair has compiled kernels (CDF/SF/density, partial moments in L-space)
        self._psg = (self.q, pair.v, pair.sd, direction == "remove") if isinstance(pair, _GaussPair) else None

    def reverses(self, other) -> bool:
        """Whether ``other``'s pair is exactly this one's with its two distributions swapped: the two directions
        of one Poisson-subsampled pair, ``(M, P)`` (remove) and ``(P, M)`` (add).  Their privacy curves then
        satisfy ``delta_other(eps) = 1 - e^eps (1 - delta_self(-eps))`` (docs/dominance.md, "Reversed pairs")."""
        return (isinstance(other, SubsampledLoss) and other.pair is self.pair and other.q == self.q
                and {self.direction, other.direction} == {"remove", "add"})

    @property
    def psg_params(self) -> tuple[float, float, float, bool] | None:
        """``(q, v, sd, remove)`` of a Gaussian pair (``v = 1 / sigma^2``, ``sd = sqrt(v)``, ``remove``: the
        direction), else ``None``.

        The arguments of the subsampled-Gaussian kernels (:func:`fastpld._kernels.psg_eval`,
        :func:`~fastpld._kernels.psg_moments`, :func:`~fastpld._kernels.psg_window`,
        :func:`~fastpld._kernels.psg_leaf_full`): the discretisation and the planner take this fast path
        when it is not ``None``.
        """
        return self._psg

    def cdf_shift(self, tmax: float) -> float:
        """Position error of the CDF for ``|t| <= tmax``: ``8 u (tmax + |log q| + |log(1-q)| + c + 2)``.

        ``l = g^-1(t)`` (:func:`fastpld._kernels.subsampled_ginv`) is exact at ``t`` moved by at most
        twice the error of the rounded ``log1p(-q)``, and its own rounding, like that of the pair's
        offsets (``c``: ``v / 2`` or ``eps0``) and of the normal arguments, is an absolute error of a
        few ``u (|l| + |log q| + |log(1-q)| + c)`` in ``L``, hence at most that in ``t`` (``dt/dl =
        1 - (1-q) e^-t`` lies in ``[0, 1]``, and ``|l| dt/dl <= |t| + |log q| + |log(1-q)| + 1``).
        Each mixture term is monotone in its argument, so a sum of such terms is again the exact
        CDF at one point in that range.  (_leaf.psg_leaf_full repeats this formula.)
        """
        q = self.q
        return 8 * _U * (tmax + abs(math.log(q)) + abs(math.log1p(-q)) + self.pair.lscale + 2)

    # l(t) = g^{-1}(t) = log((e^t - 1 + q)/q), defined for t > log(1-q)
    def _ginv(self, t):
        # (without overflow above t = 709.78 or cancellation near log(1 - q): see subsampled_ginv)
        return _kernels.subsampled_ginv(t, self.q)

    def _cdf_sf_pdf(self, t):
        """``(cdf(t), sf(t), pdf(t))`` with one evaluation of ``g^-1`` (same values as the three calls)."""
        t = np.asarray(t, dtype=np.float64)
        if self._psg is not None:
            return _kernels.psg_eval(t, *self._psg)
        q = self.q
        if self.direction == "remove":
            l = self._ginv(t)
            F = (1 - q) * self.pair.cdf_P(l) + q * self.pair.cdf_Q(l)
            S = (1 - q) * self.pair.sf_P(l) + q * self.pair.sf_Q(l)
        else:
            l = self._ginv(-t)
            F = np.where(t >= -self._ylo, 1.0, self.pair.sf_P(l, strict=True))
            S = np.where(t >= -self._ylo, 0.0, self.pair.cdf_P(l, strict=True))
        return F, S, self.pdf(t)

    def cdf(self, t):
        t = np.asarray(t, dtype=np.float64)
        if self._psg is not None:
            return _kernels.psg_eval(t, *self._psg, want_pdf=False)[0]
        q = self.q
        if self.direction == "remove":
            l = self._ginv(t)
            return (1 - q) * self.pair.cdf_P(l) + q * self.pair.cdf_Q(l)
        # Y <= t  <=>  L >= ginv(-t)
        l = self._ginv(-t)
        return np.where(t >= -self._ylo, 1.0, self.pair.sf_P(l, strict=True))

    def sf(self, t):
        t = np.asarray(t, dtype=np.float64)
        if self._psg is not None:
            return _kernels.psg_eval(t, *self._psg, want_pdf=False)[1]
        q = self.q
        if self.direction == "remove":
            l = self._ginv(t)
            return (1 - q) * self.pair.sf_P(l) + q * self.pair.sf_Q(l)
        l = self._ginv(-t)
        return np.where(t >= -self._ylo, 0.0, self.pair.cdf_P(l, strict=True))

    def end_mass(self, t, side: int):
        """The continuous mass between ``t`` and a support end (:meth:`ContinuousLoss.end_mass`), from the pair's
        own (a pair with atoms at the ends of ``L``'s support: the Laplace pair's), else ``None``.  ``remove``:
        ``Y = g(L)`` increasing, the mixture's mass of ``L`` between ``g^-1(t)`` and that end; ``add``:
        ``Y = -g(L)``, ``P``'s mass of ``L`` between ``g^-1(-t)`` and the other end."""
        em_p = getattr(self.pair, "end_mass_P", None)
        if em_p is None:
            return None
        t = np.asarray(t, dtype=np.float64)
        q = self.q
        if self.direction == "remove":
            l = self._ginv(t)
            return (1 - q) * em_p(l, side) + q * self.pair.end_mass_Q(l, side)
        return em_p(self._ginv(-t), 1 - side)

    def end_map(self, side: int):
        """``(sgn, lower, Le, s)`` where the support end on ``side`` is ``g(Le)`` (``+-``: ``s`` the float end, in
        ``g``'s sign) for ``Le`` a finite end of the pair's ``L`` whose pair evaluates itself from an offset from it
        (``from_end``: the Laplace pair): ``Y`` moves from the end by ``d`` where ``g(L) = s + sgn d`` and ``L`` is
        the pair's ``lower`` end or the upper one.  ``None`` elsewhere (the subsampled Gaussian's end ``log(1 - q)``
        has its own: :func:`fastpld.dominance.ends._psg_from_end`)."""
        if getattr(self.pair, "from_end", None) is None or not 0 < self.q < 1:
            return None
        remove = self.direction == "remove"
        sgn = 1 if (side == 0) == remove else -1
        le = self.pair.support[0] if sgn == 1 else self.pair.support[1]
        if not (math.isfinite(le) and abs(le) <= 700.0):
            return None
        s = float(self.support[side])
        return sgn, sgn == 1, float(le), (s if remove else -s)

    def from_end(self, d, side: int, delta=0.0):
        """The density at distance ``d`` from the float support end on ``side`` (:meth:`end_map`), the continuous mass
        between the end and that point, their relative error bounds, and where they hold (``ok``): ``(pdf, pdf_rel,
        mass, mass_rel, ok)``, ``delta`` an uncertainty of ``d`` (absolute).

        Near an end that is not ``log(1 - q)`` the point ``end +- d`` rounds to within ``u |end|``, and ``e^t - 1 +
        q`` cancels: a subsampled Laplace of scale ~0.1 holds half its mass within ~1e-6 of its end, where the
        density at the rounded point is known to ~5e-11 only (its leaf's cell was charged 1-3e-10 of its mass, and
        compositions of 1,000 copies were refused at delta_error 1e-10).  From ``d`` itself: ``e^y - 1 + q = q e^Le
        (1 + x)``, ``x = c expm1(sgn d)``, ``c = e^(s - Le) / q``, so ``L = Le + log1p(x)`` (the pair from the offset
        ``z = log1p(x)``, :meth:`fastpld.mechanisms.pairs._LaplacePair.from_end`) and ``|dL/dy| = c e^(sgn d) / (1 +
        x)``; where ``x >= -1/2`` (no cancellation in ``1 + x``) and ``L`` is inside the pair's support.  This is the
        loss whose end is the float ``s``: within ``2 |s - g(Le)|`` of the exact one there (:meth:`end_shift`,
        charged by the leaves).

        Errors (relative; libm within 4 ulp, ``8 u``): ``c`` within ``u (|s - Le| + 9)``; ``expm1`` ``8 u`` and the
        shift ``delta`` of ``d``, ``delta e^d / |expm1(d)|``; ``x`` their sum and ``u``; ``z`` ``kappa`` times that plus
        ``8 u`` (``kappa = |x| / ((1 + x) |z|)``, at most 1.45 for ``x >= -1/2``); the pair's values as it states;
        ``dL/dy`` ``c``'s, ``exp``'s ``8 u + delta``, ``1 + x``'s ``(|x| r_x + u) / (1 + x)`` and ``2 u``; the mixture
        ``3 u``, the product ``u``."""
        sgn, lower, le, s = self.end_map(side)
        q = self.q
        d = np.asarray(d, dtype=np.float64)
        delta = np.broadcast_to(np.asarray(delta, dtype=np.float64), d.shape)
        c = math.exp(s - le) / q
        ec = _U * (abs(s - le) + 9)
        with np.errstate(all="ignore"):
            em = np.expm1(sgn * d)
            x = c * em
            ok = (x >= -0.5) & np.isfinite(x) & (d >= 0)
            x = np.where(ok, x, 0.0)
            z = np.log1p(x)
            rd = np.where(delta > 0, delta * np.exp(d) / np.abs(em), 0.0)
            ex = ec + 9 * _U + rd
            kappa = np.where(z != 0, np.abs(x) / ((1 + x) * np.abs(z)), 1.0) * (1 + 1e-6)
            ez = kappa * ex + 8 * _U
            ok &= np.abs(z) <= self.pair.support[1] - self.pair.support[0]  # (within the support: L between its ends)
            pP, pQ, mP, mQ = self.pair.from_end(z, lower)
            az = np.abs(z) / 2
            e_dens = az * ez + 17 * _U
            e_mass = (1 + az) * ez + 17 * _U
            dl = c * np.exp(sgn * d) / (1 + x)
            e_dl = ec + 8 * _U + delta + (np.abs(x) * ex + _U) / (1 + x) + 2 * _U
            if self.direction == "remove":
                f, m = ((1 - q) * pP + q * pQ) * dl, (1 - q) * mP + q * mQ
            else:
                f, m = pP * dl, mP
            rel_f = e_dens + 3 * _U + e_dl + _U
            rel_m = e_mass + 3 * _U
        ok &= np.isfinite(f) & np.isfinite(rel_f) & np.isfinite(m)
        return f, rel_f, m, rel_m, ok

    def end_shift(self) -> float:
        """How far (at most) the loss :meth:`from_end` evaluates lies from the exact one near an end: ``2 |s - g(Le)|``
        (``c`` moves with ``s``: ``|log1p(w / c') - log1p(w / c)| <= |log(c' / c)|``), ``s = log1p(-q + q e^Le)`` within
        ``8 u |s|`` (log1p) plus ``10 u |t| / (1 + t)`` (``t``'s own rounding, ``|t| / (1 + t) = |expm1(-s)|``), for
        the worse of the two ends; 0 where neither has the map."""
        r = 0.0
        for side in (0, 1):
            m = self.end_map(side)
            if m is not None:
                s = m[3]
                r = max(r, 2 * (8 * _U * abs(s) + 10 * _U * abs(math.expm1(-s)) * (1 + 1e-6)))
        return r

    def pdf(self, t):
        t = np.asarray(t, dtype=np.float64)
        if self._psg is not None:
            return _kernels.psg_eval(t, *self._psg, want_cdf=False)[2]
        q = self.q
        sgn = 1.0 if self.direction == "remove" else -1.0
        tt = sgn * t
        l, dl = _kernels.subsampled_ginv(tt, q, want_dl=True)  # dl/dt = e^t / (e^t - 1 + q)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            if self.direction == "remove":
                dens = ((1 - q) * self.pair.pdf_P(l) + q * self.pair.pdf_Q(l)) * dl
            else:
                dens = self.pair.pdf_P(l) * dl
        return np.where(np.isfinite(dens), dens, 0.0)

    def pdf_error(self, t, dt):
        """:meth:`ContinuousLoss.pdf_error`: ``l = g^-1(+-t)`` (:func:`fastpld._kernels.subsampled_ginv`) is within
        ``10 u (1 + 2 |l| + 2 |log q| + 2 |log(1 - q)|)`` of the exact value at the float ``t`` (each libm call
        within 4 ulp), below ``t = 0`` its ``expm1`` argument ``t - log(1 - q)`` adds ``u |t - log(1 - q)| + 8 u
        |log(1 - q)|`` to the point's shift, and a shift ``delta`` of the point moves ``l`` by ``dl delta``
        (``dl = dl/dt``) and ``log dl`` by ``|dl - 1| delta``; the pair's log-densities move by their slope times
        ``l``'s error.  The Gaussian pair's: :func:`fastpld._reference.psg_density_rel` (the C leaf's formula)."""
        t = np.asarray(t, dtype=np.float64)
        tt = t if self.direction == "remove" else -t
        ylo = self._ylo
        with np.errstate(all="ignore"):
            l, dl = _kernels.subsampled_ginv(tt, self.q, want_dl=True)
            delta = np.asarray(dt, dtype=np.float64) + np.where(tt < 0, _U * np.abs(tt - ylo) + 8 * _U * abs(ylo), 0.0)
            lq = abs(math.log(self.q)) + abs(ylo)
            if self._psg is not None:
                return _reference.psg_density_rel(l, dl, delta, lq, self.pair.v, self.pair.sd)
            slope, ops = self.pair.pdf_slope_ops(l)
            dlz = 10 * _U * (1 + 2 * np.abs(l) + 2 * lq) + np.abs(dl) * delta
            return _rel_of_log(slope * dlz + ops + 15 * _U + np.abs(dl - 1.0) * delta)

    def partial_mean(self, edges):
        """``E[Y; edges[0] < Y <= edges[-1]]`` and an error bound.

        Gaussian pair: ``Y = +-g(L)`` with ``g(l) = log(1 - q + q e^l)`` analytic in
        ``|Im l| < pi``, so the expectation is integrated over ``L`` between the images of
        the two ends (Gauss-Legendre on panels of width ``<= min(sd, 1)``, see
        :func:`fastpld._kernels.psg_moments`), a few hundred points where the quadrature in
        ``Y`` needs thousands.  Error bound: ten times the 8- vs 16-point disagreement (as in
        :meth:`ContinuousLoss.partial_mean`) plus a bound on the round-off of the sums.
        """
        if self._psg is None:
            return super().partial_mean(edges)
        edges = np.asarray(edges, dtype=np.float64)
        a, b = float(edges[0]), float(edges[-1])
        q, v, sd, remove = self._psg
        if remove:  # a < Y <= b  <=>  ginv(a) < L <= ginv(b)
            la, lb = self._ginv(np.array([a, b]))
            i1, d1, r1 = _kernels.psg_moments(float(la), float(lb), q, v, sd, True)[:3]
        else:  # a < -g(L) <= b  <=>  ginv(-b) <= L < ginv(-a)
            la, lb = self._ginv(np.array([-b, -a]))
            i1, d1, r1 = _kernels.psg_moments(float(la), float(lb), q, v, sd, False)[:3]
            i1 = -i1
        return float(i1), float(10.0 * d1 + r1)

    def _K_binom(self, a):
        # memo per (pair, q): both directions need nearly the same integer orders
        a = np.asarray(a)
        memo = self.pair.__dict__.setdefault("_binom_memo", {}).setdefault(self.q, {})
        flat = a.astype(np.int64).ravel()
        need = [v for v in set(flat.tolist()) if v not in memo]
        if need:
            vals = _log_binomial_moment(self.pair, self.q, np.array(need, dtype=np.int64))
            memo.update(zip(need, vals.tolist()))
        return np.array([memo[v] for v in flat.tolist()], dtype=np.float64).reshape(a.shape)

    def _binomial_chord(self, x, shift, need=None):
        """``_integer_chord(lambda a: self._K_binom(a + shift), x)`` by the compiled kernel (same terms).

        Its memo (one per (pair, q), apart from the numpy one: the compiled sums may differ in the
        last bit, and a backend's results must not depend on which backend filled a memo first)
        holds each order's sum, which does not depend on the other orders requested.
        """
        if need is None:  # (the caller may know it: many losses on one grid)
            need = int(np.max(x)) + shift + 2 if x.size else 2
        tabs = self.pair.__dict__.setdefault("_binom_native", {})
        t = tabs.get(self.q)
        if t is None or t[2].size < need:
            size = max(need, 1024)
            lm, lf = _binomial_tables(self.pair, size)
            memo = np.full(size, np.nan)
            if t is not None:
                memo[: t[2].size] = t[2]
            t = tabs[self.q] = (np.ascontiguousarray(lm, dtype=np.float64), lf, memo)
        lq1 = math.log1p(-self.q) if self.q < 1 else -np.inf
        return _kernels.binomial_chord(x, shift, t[0], t[1], lq1, math.log(self.q), t[2])

    def log_mgf(self, s, *, native=False):
        # native: the binomial chords come from the compiled kernel (same terms; the planner uses it)
        s = np.asarray(s, dtype=np.float64)
        out = np.full(s.shape, np.inf)
        q = self.q
        if self.direction == "remove":
            # s >= 0: E_M[(M/P)^s] = E_P[(M/P)^(s+1)], convex in s: chord between integers.
            pos = s >= 0
            if pos.any():
                x = np.minimum(s[pos], 4096)
                k = self._binomial_chord(x, 1) if native else _integer_chord(lambda a: self._K_binom(a + 1), x)
                # beyond the largest tabulated order the MGF is unknown (+inf), not K(4096): K grows
                out[pos] = np.where(s[pos] <= 4096, k, np.inf)
            mid = (s < 0) & (s >= -1)
            out[mid] = 0.0  # Jensen: E_P[(M/P)^(1+s)] <= 1
            neg = s < -1
            if neg.any():
                a = -1 - s[neg]
                # x -> x^(-a) convex: (1-q + q Q/P)^(-a) <= (1-q) + q (P/Q)^a
                out[neg] = np.logaddexp(math.log1p(-q) if q < 1 else -np.inf, math.log(q) + self.pair.log_moment_P(-a))
        else:
            pos = s > 0
            if pos.any():
                a = s[pos]
                out[pos] = np.logaddexp(math.log1p(-q) if q < 1 else -np.inf, math.log(q) + self.pair.log_moment_P(-a))
            mid = (s <= 0) & (s >= -1)
            out[mid] = 0.0
            neg = s < -1
            if neg.any():
                x = np.minimum(-s[neg], 4096)
                k = self._binomial_chord(x, 0) if native else _integer_chord(self._K_binom, x)
                out[neg] = np.where(-s[neg] <= 4096, k, np.inf)  # unknown beyond order 4096 (see above)
        return out

    def _moments(self):
        if self._mean is None and self._pair_moments():
            pass
        elif self._mean is None:
            # KL-type moments by quadrature on a quantile-adapted panel grid.
            m, sd = _cdf_moments(self, *_generic_window(self, 1e-18))
            # _std before _mean: another thread that sees _mean set must also see _std
            self._std = sd
            self._mean = m
        return self._mean, self._std

    def _pair_moments(self):
        """Mean and std from expectations over the pair's own loss ``L`` (cheap, accurate); False if unavailable.

        ``Y = +/- g(L)`` with ``g(l) = log(1 - q + q e^l)`` analytic in ``|Im l| < pi``,
        so the pair's quadrature is accurate to round-off (the CDF-based
        quadrature in ``Y`` converges slowly where ``g^-1`` is singular).
        """
        if self._psg is not None:
            q, v, sd, remove = self._psg
            m1, m2 = _kernels.psg_mean_sq(q, v, sd, remove)  # (psg_moments' I1 and I2, bitwise)
            if not remove:
                m1 = -m1
            self._std = float(math.sqrt(max(m2 - m1 * m1, 0.0)))
            self._mean = float(m1)
            return True
        r = self._pair_expectation_moments()
        if r is None:
            return False
        self._std = r[1]  # (before _mean, as in _moments: a thread that sees _mean set also sees _std)
        self._mean = r[0]
        return True

    def _pair_expectation_moments(self):
        """``(mean, std)`` from the pair's :meth:`_BasePair.expect` (any pair), or ``None`` if it has none."""
        lq1, lq = math.log1p(-self.q), math.log(self.q)
        g = lambda l: np.logaddexp(lq1, lq + l)
        g2 = lambda l: g(l) ** 2
        parts = []
        for f in (g, g2):
            if self.direction == "remove":  # w ~ M = (1-q) P + q Q
                eP, eQ = self.pair.expect(f, "P"), self.pair.expect(f, "Q")
                if eP is None or eQ is None:
                    return None
                parts.append((1 - self.q) * eP + self.q * eQ)
            else:  # w ~ P, Y = -g(L)
                eP = self.pair.expect(f, "P")
                if eP is None:
                    return None
                parts.append(eP)
        m1, m2 = parts
        if self.direction == "add":
            m1 = -m1
        return float(m1), float(math.sqrt(max(m2 - m1 * m1, 0.0)))

    def _native_moments(self):
        """``(mean, std)`` by the compiled quadrature of :meth:`_pair_moments` (Gaussian pair), else ``None``.

        For the native leaf's truncation ladder (any centre and scale give a valid window);
        cached apart from :meth:`mean`/:meth:`std`, so that the numpy backend's values never
        depend on which backend ran first.
        """
        r = getattr(self, "_fastpld_moments_native", None)
        if r is None:
            if not (isinstance(self.pair, _GaussPair) and 0 < self.q < 1):
                return None
            r = _kernels.gauss_pair_moments(self.pair.v, self.pair.sd, self.q, self.direction == "remove")
            if r is not None:
                self._fastpld_moments_native = r
        return r

    def mean(self):
        return self._moments()[0]

    def std(self):
        return self._moments()[1]

    def __repr__(self):
        return f"SubsampledLoss({type(self.pair).__name__}, q={self.q}, {self.direction})"


def subsampled_log_mgf_rows(losses, s, *, native=False):
    """``np.stack([loss.log_mgf(s, native=native) for loss in losses])`` for many :class:`SubsampledLoss`.

    The same values bitwise (tested), for the planner's grids of heterogeneous schedules (one loss
    per part): the sign masks of ``s`` are computed once, the convexity bounds of all Gaussian-pair
    losses (closed-form moments ``lam (lam - 1) v / 2``) in one array pass, and only the binomial
    chords row by row (their memo is per pair and ``q``).
    """
    s = np.asarray(s, dtype=np.float64)
    out = np.full((len(losses), s.size), np.inf)
    for direction in ("remove", "add"):
        rows = [i for i, loss in enumerate(losses) if loss.direction == direction]
        if not rows:
            continue
        if direction == "remove":  # as log_mgf: chords at s >= 0 (shift 1), convexity bound below -1
            chord, conv, zero, shift = s >= 0, s < -1, (s < 0) & (s >= -1), 1
            x_raw = s[chord]
            lam = -(-1 - s[conv])
        else:  # convexity bound at s > 0, chords below -1 (shift 0)
            chord, conv, zero, shift = s < -1, s > 0, (s <= 0) & (s >= -1), 0
            x_raw = -s[chord]
            lam = -s[conv]
        x = np.minimum(x_raw, 4096)
        known = x_raw <= 4096
        if zero.any():
            out[np.ix_(rows, np.nonzero(zero)[0])] = 0.0
        gauss = [i for i in rows if isinstance(losses[i].pair, _GaussPair)]
        if conv.any():
            qs = [losses[i].q for i in rows]
            lq1 = np.array([math.log1p(-q) if q < 1 else -np.inf for q in qs])[:, None]
            lq = np.array([math.log(q) for q in qs])[:, None]
            vals = np.empty((len(rows), lam.size))
            pos = {i: r for r, i in enumerate(rows)}
            if gauss:
                gr = [pos[i] for i in gauss]
                v = np.array([losses[i].pair.v for i in gauss])[:, None]
                # _GaussPair.log_moment_P, ((lam (lam - 1)) v) / 2, for every row at once
                vals[gr] = np.logaddexp(lq1[gr], lq[gr] + (lam * (lam - 1))[None, :] * v / 2)
            gset = set(gauss)
            for i in rows:
                if i not in gset:
                    r = pos[i]
                    vals[r] = np.logaddexp(lq1[r, 0], lq[r, 0] + losses[i].pair.log_moment_P(lam))
            out[np.ix_(rows, np.nonzero(conv)[0])] = vals
        if chord.any():
            ks = np.empty((len(rows), x.size))
            need = int(np.max(x)) + shift + 2 if x.size else 2
            for r, i in enumerate(rows):
                loss = losses[i]
                if native:
                    ks[r] = loss._binomial_chord(x, shift, need)
                elif shift:
                    ks[r] = _integer_chord(lambda a, loss=loss: loss._K_binom(a + 1), x)
                else:
                    ks[r] = _integer_chord(loss._K_binom, x)
            out[np.ix_(rows, np.nonzero(chord)[0])] = np.where(known, ks, np.inf)
    return out


class SymmetricSubsampledLoss(ContinuousLoss):
    """The symmetric privacy loss ``Z`` whose curve is the remove curve for ``eps >= 0``.

    With ``Y`` the remove loss of ``(M = (1-g) P + g Q, P)`` for a symmetric base pair
    ``(P, Q)``: ``Z`` has the law of ``Y`` on ``(0, inf)``, the mirror image with weight
    ``e^-y`` (the law of ``Y`` under ``P``) on ``(-inf, 0)``, and the rest of the mass at 0.
    Its pair is symmetric and its tradeoff curve lies below both ``T(P, M)`` and ``T(M, P)``,
    hence below their symmetrisation ``C_g(f)`` of Dong, Roth, Su (2022, subsampling theorem); see
    ``docs/samplers.md``.
    """

    def __init__(self, pair, gamma: float):
        self.rem = SubsampledLoss(pair, gamma, "remove")
        self.pair = pair
        self.gamma = float(gamma)
        self.cdf_rel_error = self.rem.cdf_rel_error
        hi = self.rem.support[1]
        self.support = (-hi, hi)
        pos = [a for a in self.rem.atoms if a > 0]
        self.atoms = tuple(sorted({0.0, *pos, *(-a for a in pos)}))
        self._mean = None
        self._std = None

    def _mirrored(self, t, positive, negative):
        """``positive`` (the remove loss's CDF or survival function) at ``t >= 0``, ``negative`` (the pair's ``P``-tail
        that mirrors it) at ``g^-1(-t)`` for ``t < 0``."""
        t = np.asarray(t, dtype=np.float64)
        neg = t < 0
        out = np.asarray(positive(np.where(neg, 0.0, t)), dtype=np.float64).copy()
        if neg.any():
            out[neg] = negative(self.rem._ginv(-t[neg]), strict=True)
        return out

    def cdf(self, t):
        # (t < 0: Pr[Z <= t] = Pr_P[Y >= -t] = Pr_P[L >= ginv(-t)])
        return self._mirrored(t, self.rem.cdf, self.pair.sf_P)

    def sf(self, t):
        # (t < 0: Pr[Z > t] = 1 - Pr_P[L >= ginv(-t)] = Pr_P[L < ginv(-t)])
        return self._mirrored(t, self.rem.sf, self.pair.cdf_P)

    def atom_mass(self, y: float):
        """The atom at 0 (the rest of the mass): ``1 - M[Y > 0] - P[Y > 0]`` with ``Y > 0`` exactly where ``L > 0``
        (``g(0) = 0``), so ``1 - (2 - g) P[L > 0] - g Q[L > 0]`` from the pair's closed forms: an absolute error of a
        few u where the CDF's jump through ``g^-1`` had ``8 tau_F`` of the tails, 1.2e-10 of the atom at ``g`` 0.5%
        (its charge refused fixed-size batches by dominance even at one step).  Bound: ``8 u`` for the arithmetic
        and ``64 u`` of each term for the pair's functions (``ndtr``, ``exp``).  Other atoms: ``None``."""
        if y != 0.0:
            return None
        g = self.gamma
        sp = float(np.asarray(self.pair.sf_P(np.array([0.0])), dtype=np.float64)[0])
        sq = float(np.asarray(self.pair.sf_Q(np.array([0.0])), dtype=np.float64)[0])
        terms = (2 - g) * sp + g * sq
        m = 1.0 - terms
        if not m > 0:
            return None
        return m, 8 * _U + 64 * _U * terms

    def pdf(self, t):
        t = np.asarray(t, dtype=np.float64)
        neg = t < 0
        at = np.where(neg, -t, t)
        dens = np.asarray(self.rem.pdf(at), dtype=np.float64)
        with np.errstate(under="ignore"):
            out = np.where(neg, np.exp(np.minimum(t, 0.0)) * dens, dens)
        return np.where(t == 0, 0.0, out)

    def pdf_error(self, t, dt):
        """:meth:`ContinuousLoss.pdf_error`: the remove loss's at ``|t|``, and below 0 the factor ``e^t`` (``exp``
        and the product ``9 u``, slope 1 in log: ``dt``)."""
        t = np.asarray(t, dtype=np.float64)
        dt = np.asarray(dt, dtype=np.float64)
        e = np.asarray(self.rem.pdf_error(np.abs(t), dt), dtype=np.float64)
        return np.where(t < 0, _rel_of_log(e + 9 * _U + dt), e)

    def log_mgf(self, s):
        s = np.asarray(s, dtype=np.float64)
        out = np.zeros(s.shape)
        # s >= 0: E[e^{sZ}] <= E_M[e^{sY}; Y > 0] + Pr[Z <= 0]
        #        <= E_M[e^{sY}] - (1-g)^s M[Y <= 0] + M[Y <= 0] <= e^{K(s)} + 1 - (1-g)^s
        # s <= -1: E[e^{sZ}] = E[e^{(-1-s) Z}] (symmetry); -1 < s < 0: <= 0 (Jensen)
        pos = s >= 0
        neg = s <= -1
        x = np.concatenate([s[pos], -1.0 - s[neg]])
        if x.size:
            k = np.asarray(self.rem.log_mgf(x), dtype=np.float64)
            with np.errstate(over="ignore", divide="ignore"):
                extra = -np.expm1(x * math.log1p(-self.gamma)) if self.gamma < 1 else np.ones_like(x)
                val = np.logaddexp(k, np.log(np.maximum(extra, 1e-300)))
            out[pos] = val[: int(pos.sum())]
            out[neg] = val[int(pos.sum()):]
        return out

    def _moments(self):
        if self._mean is None:
            m, sd = _cdf_moments(self, *_generic_window(self, 1e-18, 0.0, max(self.rem.std(), 1e-12)))
            self._std = sd  # (before _mean, as in SubsampledLoss)
            self._mean = m
        return self._mean, self._std

    def mean(self):
        return self._moments()[0]

    def std(self):
        return self._moments()[1]

    def __repr__(self):
        return f"SymmetricSubsampledLoss({type(self.pair).__name__}, gamma={self.gamma})"
