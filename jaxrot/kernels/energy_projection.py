"""Buss's energy projection (the ``_ep`` methods) restated as a Warp wrapper of a base kernel (see
:mod:`jaxrot.integrators.energy_projection`, rule ``"nearest"``).

After the base step the body momentum ``L_b`` moves to the nearest point of the polhode
``|x|^2 = L2``, ``sum x^2 / J = 2 E0`` (``L2``, ``E0`` from the initial state)::

    x(p) = L_b / (1 + p0 + p1 c / J),   c = L2 / (2 E0)
    r(p) = (sum x^2 / L2 - 1, sum x^2 / J / (2 E0) - 1)
    p <- p - (A^T A + reg 1)^-1 A^T r,  A = dr/dp,  reg = eps (tr A^T A + 1)     (six times from p = 0)

with ``A`` written out (the JAX method takes it from ``jax.jacfwd``: the same derivative, so Gauss-Newton
converges to the same point to round-off), then the body turns by the minimal rotation taking ``x`` to
the direction of ``L_b``, ``R' = reorth(R exp(hat(coef (x x L_b))))``, and ``Pi' = x``. The memory is
the base's 3-vector followed by ``(E0, L2)``. The count of projections that missed the polhode
(``StepStats.clamped`` in the JAX run) is not kept by the kernel.
"""

import functools

import numpy as np

from ..integrators.energy_projection import NEWTON_ITERS
from ._common import so3_funcs, warp


@functools.lru_cache(maxsize=None)
def make_ep(S, name: str, torque: str, K: int):
    """``(init, step)`` Warp functions of ``<base>_ep`` (torque-free) from the base's kernel."""
    from . import KERNELS

    base = name.removesuffix("_ep")
    base_init, base_step = KERNELS[base].make(S, base, torque, K)
    wp = warp()
    c = so3_funcs(S)
    V, M = c.V, c.M
    A5 = wp.types.vector(5, S)
    eps = float(np.finfo(np.float32 if S is wp.float32 else np.float64).eps)

    @wp.func
    def denominator(p0: S, p1: S, cc: S, J: V):
        """``1 + p0 + p1 c / J`` componentwise (``x = L_b / denominator``)."""
        return V(S(1.0) + p0 + p1 * cc / J[0], S(1.0) + p0 + p1 * cc / J[1], S(1.0) + p0 + p1 * cc / J[2])

    @wp.func
    def nearest_on_polhode(J: V, Lb: V, L2: S, E0: S):
        ok = (L2 > S(0.0)) and (E0 > S(0.0))
        L2s = S(1.0)
        E2s = S(1.0)
        if ok:
            L2s = L2
            E2s = S(2.0) * E0
        cc = L2s / E2s
        p0 = S(0.0)
        p1 = S(0.0)
        for _ in range(wp.static(NEWTON_ITERS)):
            D = denominator(p0, p1, cc, J)
            x = wp.cw_div(Lb, D)
            r0 = wp.dot(x, x) / L2s - S(1.0)
            xJ = wp.cw_div(wp.cw_mul(x, x), J)
            r1 = (xJ[0] + xJ[1] + xJ[2]) / E2s - S(1.0)
            # dx/dp0 = -L_b / D^2, dx/dp1 = -L_b (c / J) / D^2
            dx0 = -wp.cw_div(wp.cw_div(Lb, D), D)
            dx1 = wp.cw_mul(dx0, V(cc / J[0], cc / J[1], cc / J[2]))
            a00 = S(2.0) * wp.dot(x, dx0) / L2s
            a01 = S(2.0) * wp.dot(x, dx1) / L2s
            a10 = S(2.0) * wp.dot(wp.cw_div(x, J), dx0) / E2s
            a11 = S(2.0) * wp.dot(wp.cw_div(x, J), dx1) / E2s
            m00 = a00 * a00 + a10 * a10
            m01 = a00 * a01 + a10 * a11
            m11 = a01 * a01 + a11 * a11
            reg = S(eps) * (m00 + m11 + S(1.0))
            m00 = m00 + reg
            m11 = m11 + reg
            g0 = a00 * r0 + a10 * r1
            g1 = a01 * r0 + a11 * r1
            det = m00 * m11 - m01 * m01
            p0 = p0 - (m11 * g0 - m01 * g1) / det
            p1 = p1 - (m00 * g1 - m01 * g0) / det
        out = Lb
        if ok:
            out = wp.cw_div(Lb, denominator(p0, p1, cc, J))
        return out

    @wp.func
    def align(R: M, Lb1: V, Lb: V):
        cr = wp.cross(Lb1, Lb)
        n2 = wp.dot(cr, cr)
        d = wp.dot(Lb1, Lb)
        coef = S(0.0)
        if n2 < (S(1e-4) * d) * (S(1e-4) * d) and d > S(0.0):
            coef = S(1.0) / d - n2 / (S(3.0) * d * d * d)  # atan2(n, d) / n, Taylor
        elif n2 != S(0.0):
            n = wp.sqrt(n2)
            coef = wp.atan2(n, d) / n
        return c.reorthogonalize(R @ c.exp(coef * cr))

    @wp.func
    def init(R: M, Pi: V, J: V, P: wp.array(dtype=S), h: S):
        a = base_init(R, Pi, J, P, h)
        q = wp.cw_div(wp.cw_mul(Pi, Pi), J)
        return A5(a[0], a[1], a[2], S(0.5) * (q[0] + q[1] + q[2]), wp.dot(Pi, Pi))

    @wp.func
    def step(R: M, Pi: V, A: A5, t: S, h: S, J: V, P: wp.array(dtype=S)):
        R1, Pi1, a1 = base_step(R, Pi, V(A[0], A[1], A[2]), t, h, J, P)
        Lb1 = nearest_on_polhode(J, Pi1, A[4], A[3])
        return align(R1, Lb1, Pi1), Lb1, A5(a1[0], a1[1], a1[2], A[3], A[4])

    return init, step
