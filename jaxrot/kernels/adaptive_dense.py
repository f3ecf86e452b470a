"""Warp functions of an error-controlled step's dense output and of an event's location on it, for
the fused adaptive kernel (:mod:`jaxrot.kernels.adaptive_kernel`).

The dense output is the cubic Hermite interpolant on SO(3) of :func:`jaxrot.driver.dense.interpolate`;
the crossing is located by :data:`BISECTIONS` halvings of the step and one Newton step, as
:mod:`jaxrot.driver.events` does, the Newton step's derivative a central difference of the
interpolated condition over ``sqrt(eps)`` of the step (the kernel does not differentiate; the step
only polishes a root the bisection has located to the last bits). :func:`polish_func` then takes
:data:`POLISH` Newton steps on the method's own steps from the crossing step's start, with that
slope, for methods of order above :data:`DENSE_ORDER` (as ``locate`` with a method: the same
times), and the event state is the method's step to the final time (the XLA loop, which
differentiates, saves that step and moves its last step's state by the last correction instead:
the two agree to round-off, ``tests/test_kernels.py``).
"""

import functools
import math

import numpy as np

from . import event_restate
from ._common import so3_funcs, warp
from .transpile import user_tau

__all__ = ["BISECTIONS", "DENSE_ORDER", "POLISH", "dense_funcs", "crossing", "polish_func", "polishes"]

#: how many halvings of the step locate an event (as :mod:`jaxrot.driver.events`)
BISECTIONS = 64
#: Newton steps on the method's own steps after the dense output's root (as :mod:`jaxrot.driver.events`)
POLISH = 2
#: the dense output's order: a method of higher order has its event times polished (as
#: :mod:`jaxrot.driver.events`)
DENSE_ORDER = 4


def polishes(order) -> bool:
    """Whether events of a method of this order are polished on its own steps (the rule of
    :func:`jaxrot.driver.events.polishes`, restated here: the kernels lie below the driver)."""
    return order is None or order > DENSE_ORDER


@functools.lru_cache(maxsize=None)
def dense_funcs(S, torque_key: str | None, event_key: str | None):
    """Warp functions of the dense output and the event's location (see the module docstring): ``(g,
    locate)``; the world torque ``tau(t, R, Pi, P)`` restated from its JAX code
    (:func:`jaxrot.kernels.dense_torque`, by its key; None: no event, nothing is located)."""
    wp = warp()
    c = so3_funcs(S)
    V, M = c.V, c.M
    if torque_key is not None:
        tau = user_tau(S, torque_key)
    else:
        @wp.func
        def tau(t: S, R: M, Pi: V, P: wp.array(dtype=S)):
            return V(S(0.0), S(0.0), S(0.0))

    if event_key is not None:
        g = event_restate.event_g(S, event_key)
    else:
        @wp.func
        def g(t: S, R: M, Pi: V, Q: wp.array(dtype=S)):
            return S(0.0)

    eps = float(np.finfo(np.float32 if S == wp.float32 else np.float64).eps)
    tiny = float(np.finfo(np.float32 if S == wp.float32 else np.float64).tiny)
    root_eps = math.sqrt(eps)
    L1, L2, L3 = 1.0 / 6.0, 3.0 / 40.0, 5.0 / 112.0  # theta / sin(theta) in sin^2, as so3.log

    @wp.func
    def log(R: M):
        """The rotation vector of ``R`` (:func:`jaxrot.so3.log`: the antisymmetric part below pi/2,
        the symmetric part's axis above)."""
        w = S(0.5) * V(R[2, 1] - R[1, 2], R[0, 2] - R[2, 0], R[1, 0] - R[0, 1])
        cth = wp.clamp(S(0.5) * (R[0, 0] + R[1, 1] + R[2, 2] - S(1.0)), S(-1.0), S(1.0))
        s2 = wp.dot(w, w)
        s = S(0.0)
        if s2 > S(0.0):
            s = wp.sqrt(s2)
        theta = wp.atan2(s, cth)
        out = V(S(0.0), S(0.0), S(0.0))
        if cth < S(0.0):
            B = S(0.5) * (R + wp.transpose(R)) - cth * wp.identity(n=3, dtype=S)
            k = int(0)
            if B[1, 1] > B[k, k]:
                k = int(1)
            if B[2, 2] > B[k, k]:
                k = int(2)
            col = V(B[0, k], B[1, k], B[2, k])
            n = col / wp.sqrt(wp.max(wp.dot(col, col), S(tiny)))
            if wp.dot(n, w) < S(0.0):
                n = -n
            out = theta * n
        else:
            f = S(0.0)
            if s2 < S(1e-12):
                f = ((S(L3) * s2 + S(L2)) * s2 + S(L1)) * s2 + S(1.0)
            else:
                f = theta / s
            out = f * w
        return out

    @wp.func
    def interp(R0: M, Pi0: V, w0: V, d0: V, Pi1: V, d1: V, xi1: V, m1: V, h: S, s: S):
        """The state at ``s`` into a step of length ``h`` (:func:`jaxrot.driver.dense.interpolate`)."""
        u = s / h
        u2 = u * u
        u3 = u * u * u
        a = S(2.0) * u3 - S(3.0) * u2 + S(1.0)
        b = u3 - S(2.0) * u2 + u
        cc = S(-2.0) * u3 + S(3.0) * u2
        d = u3 - u2
        xi = (b * h) * w0 + cc * xi1 + (d * h) * m1
        return R0 @ c.exp(xi), a * Pi0 + (b * h) * d0 + cc * Pi1 + (d * h) * d1

    @wp.func
    def g_at(tk: S, R0: M, Pi0: V, w0: V, d0: V, Pi1: V, d1: V, xi1: V, m1: V, h: S, s: S, Q: wp.array(dtype=S)):
        R, Pi = interp(R0, Pi0, w0, d0, Pi1, d1, xi1, m1, h, s)
        return g(tk + s, R, Pi, Q)

    @wp.func
    def sgn(x: S):
        r = x  # (0 stays 0, NaN stays NaN, as jnp.sign)
        if x > S(0.0):
            r = S(1.0)
        if x < S(0.0):
            r = S(-1.0)
        return r

    @wp.func
    def locate(tk: S, h: S, R0: M, Pi0: V, R1: M, Pi1: V, J: V, P: wp.array(dtype=S), Q: wp.array(dtype=S)):
        """``(s, g', R, Pi)``: the offset into the step ``[tk, tk + h]`` from ``(R0, Pi0)`` to ``(R1, Pi1)``
        of the interpolated condition's root (bisection to the last bit, then one Newton step), the
        condition's slope there (0 where none could be taken) and the interpolated state."""
        w0 = wp.cw_div(Pi0, J)
        w1 = wp.cw_div(Pi1, J)
        xi1 = log(wp.transpose(R0) @ R1)
        m1 = c.dexpinv(-xi1, w1)
        d0 = wp.cross(Pi0, w0) + wp.transpose(R0) @ tau(tk, R0, Pi0, P)
        d1 = wp.cross(Pi1, w1) + wp.transpose(R1) @ tau(tk + h, R1, Pi1, P)
        ga = g_at(tk, R0, Pi0, w0, d0, Pi1, d1, xi1, m1, h, S(0.0), Q)
        lo = S(0.0)
        hi = h
        for _k in range(BISECTIONS):
            mid = S(0.5) * (lo + hi)
            if sgn(g_at(tk, R0, Pi0, w0, d0, Pi1, d1, xi1, m1, h, mid, Q)) == sgn(ga):
                lo = mid
            else:
                hi = mid
        sb = S(0.5) * (lo + hi)
        gv = g_at(tk, R0, Pi0, w0, d0, Pi1, d1, xi1, m1, h, sb, Q)
        dl = h * S(root_eps)
        gs = (g_at(tk, R0, Pi0, w0, d0, Pi1, d1, xi1, m1, h, sb + dl, Q)
              - g_at(tk, R0, Pi0, w0, d0, Pi1, d1, xi1, m1, h, sb - dl, Q)) / (S(2.0) * dl)
        s = sb
        if gs != S(0.0) and wp.isfinite(gs):
            s = sb - gv / gs
        else:
            gs = S(0.0)
        R, Pi = interp(R0, Pi0, w0, d0, Pi1, d1, xi1, m1, h, s)
        return s, gs, R, Pi

    return g, locate


def polish_func(S, one_step, g):
    """``polish(tk, R0, Pi0, s, gs, J, P, Q) -> (t, R, Pi)``: the event's time and state after
    :data:`POLISH` Newton steps from the dense output's root ``s`` (offset into the crossing step from
    ``(R0, Pi0)`` at ``tk``; ``gs`` its slope, 0: none), each on ``one_step(R0, Pi0, tk, x, J, P) ->
    (R, Pi)``, the method's step of length ``x``; the state is that step to the final offset."""
    wp = warp()
    c = so3_funcs(S)
    V, M = c.V, c.M

    @wp.func
    def polish(tk: S, R0: M, Pi0: V, s: S, gs: S, J: V, P: wp.array(dtype=S), Q: wp.array(dtype=S)):
        x = s
        for _k in range(POLISH):
            Rx, Pix = one_step(R0, Pi0, tk, x, J, P)
            gx = g(tk + x, Rx, Pix, Q)
            if gs != S(0.0):
                x = x - gx / gs
        R, Pi = one_step(R0, Pi0, tk, x, J, P)
        return tk + x, R, Pi

    return polish


@functools.lru_cache(maxsize=None)
def crossing(S, direction):
    """A Warp function ``crossed(ga, gb)``: whether the condition's values at a step's two ends cross
    zero in ``direction`` (+1 upwards, -1 downwards, None either way), as
    :func:`jaxrot.driver.events.event_update` decides."""
    wp = warp()
    UP, DOWN = direction in (None, 1), direction in (None, -1)

    @wp.func
    def crossed(ga: S, gb: S):
        out = bool(False)
        if wp.static(UP):
            if ga < S(0.0) and gb >= S(0.0):
                out = True
        if wp.static(DOWN):
            if ga > S(0.0) and gb <= S(0.0):
                out = True
        return out

    return crossed
