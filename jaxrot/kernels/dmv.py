"""The discrete Moser-Veselov map and Hairer-Vilmart's ``dmv4`` ... ``dmv10`` restated as Warp functions
(see :mod:`jaxrot.integrators.dmv`). Torque-free. One step::

    1/J~ = S(h^2 H, h^2 N) / J + D(h^2 H, h^2 N),   H = sum Pi^2 / (2 J),  N = |Pi|^2 / 2
    d = (sum J~ - 2 J~) / 2
    solve  F(q) = 2 q0 (J~ o q) + 2 (d o q) x q - h Pi = 0,  q0 = sqrt(1 - |q|^2)   (Newton from h Pi / (2 J~))
    Q = (q0^2 - |q|^2) 1 + 2 q q^T + 2 q0 hat(q),   R1 = R Q,  Pi1 = Q^T Pi

The coefficients of the polynomials ``S`` and ``D`` depend on ``J`` only: they are computed once per
run by the JAX method's own function (:func:`constants`) and read by the kernel from its parameter
array. Newton's Jacobian is written out,

    F'(q) = 2 (J~ o q) (-q / q0)^T + 2 q0 diag(J~) - 2 hat(q) diag(d) + 2 hat(d o q),

(the JAX method takes it from ``jax.jacfwd``: the same derivative, so the iteration reaches the same
root), with the method's stopping rule (``|dq| <= atol + rtol |q|`` in the max norm, at most
``max_iters`` iterations); a step whose solve does not converge is reported as
:attr:`jaxrot.RESULTS.solve_failed`, as in the JAX run. The iteration counts are not kept.
"""

import functools

import jax.numpy as jnp

from ..integrators import get as get_method
from ..integrators.dmv import modifier_coefficients
from ._common import so3_funcs, warp

#: the registered DMV methods a kernel restates
NAMES = ("dmv", "dmv4", "dmv6", "dmv8", "dmv10")
_OFFSET = 1  # the free torque's parameter array is one zero; the coefficients follow it


def constants(method, system, dtype):
    """The run's constants appended to the kernel's parameters: the coefficients of ``S`` and ``D``."""
    return jnp.asarray(modifier_coefficients(jnp.asarray(system.body.J, dtype), method.order), dtype)


@functools.lru_cache(maxsize=None)
def make_dmv(S, name: str, torque: str, K: int):
    """``(init, step, reason)`` Warp functions of a DMV method (torque-free)."""
    wp = warp()
    c = so3_funcs(S)
    V, M = c.V, c.M
    m = get_method(name)
    KM = m.order // 2 - 1  # terms S_3, D_3, ..., S_{2 KM + 1}, D_{2 KM + 1}
    rtol, atol = m.newton.tolerances(jnp.float32 if S is wp.float32 else jnp.float64)
    max_iters = m.newton.max_iters
    assert m.newton.chord == 0

    @wp.func
    def init(R: M, Pi: V, J: V, P: wp.array(dtype=S), h: S):
        return V(S(1.0), S(0.0), S(0.0))  # A[0]: 1 while every solve converged

    @wp.func
    def residual(q: V, Jm: V, d: V, hPi: V):
        q0 = wp.sqrt(S(1.0) - wp.dot(q, q))
        return S(2.0) * q0 * wp.cw_mul(Jm, q) + S(2.0) * wp.cross(wp.cw_mul(d, q), q) - hPi

    @wp.func
    def jacobian(q: V, Jm: V, d: V):
        q0 = wp.sqrt(S(1.0) - wp.dot(q, q))
        Jq = wp.cw_mul(Jm, q)
        dq = wp.cw_mul(d, q)
        A = S(2.0) * wp.outer(Jq, -q / q0) + S(2.0) * q0 * wp.diag(Jm)
        return A - S(2.0) * wp.skew(q) @ wp.diag(d) + S(2.0) * wp.skew(dq)

    @wp.func
    def solve3(A: M, b: V):
        """``A^-1 b`` by the adjugate (rows' cross products), as the JAX method's solver."""
        c0 = wp.cross(A[1], A[2])
        c1 = wp.cross(A[2], A[0])
        c2 = wp.cross(A[0], A[1])
        det = wp.dot(A[0], c0)
        return (c0 * b[0] + c1 * b[1] + c2 * b[2]) / det

    @wp.func
    def step(R: M, Pi: V, A: V, t: S, h: S, J: V, P: wp.array(dtype=S)):
        h2 = h * h
        q2 = wp.cw_div(wp.cw_mul(Pi, Pi), J)
        H = S(0.5) * h2 * (q2[0] + q2[1] + q2[2])
        N = S(0.5) * h2 * wp.dot(Pi, Pi)
        Ssum = S(1.0)
        Dsum = S(0.0)
        i = int(_OFFSET)
        for k in range(1, wp.static(KM + 1)):
            s_acc = S(0.0)
            d_acc = S(0.0)
            for l in range(k + 1):  # the monomial N^(k-l) H^l serves S's and D's coefficient
                mono = S(1.0)
                for _a in range(k - l):
                    mono = mono * N
                for _b in range(l):
                    mono = mono * H
                s_acc = s_acc + P[i + l] * mono
                d_acc = d_acc + P[i + k + 1 + l] * mono
            Ssum = Ssum + s_acc
            Dsum = Dsum + d_acc
            i = i + 2 * (k + 1)
        inv = V(Ssum / J[0] + Dsum, Ssum / J[1] + Dsum, Ssum / J[2] + Dsum)
        Jm = V(S(1.0) / inv[0], S(1.0) / inv[1], S(1.0) / inv[2])
        tot = Jm[0] + Jm[1] + Jm[2]
        d = V(S(0.5) * (tot - S(2.0) * Jm[0]), S(0.5) * (tot - S(2.0) * Jm[1]), S(0.5) * (tot - S(2.0) * Jm[2]))
        hPi = h * Pi
        q = wp.cw_div(hPi, S(2.0) * Jm)
        it = int(0)
        done = bool(False)
        while it < max_iters and not done:
            dq = solve3(jacobian(q, Jm, d), -residual(q, Jm, d, hPi))
            q = q + dq
            it = it + 1
            big = wp.max(wp.max(wp.abs(q[0]), wp.abs(q[1])), wp.abs(q[2]))
            small = wp.max(wp.max(wp.abs(dq[0]), wp.abs(dq[1])), wp.abs(dq[2]))
            done = small <= S(atol) + S(rtol) * big
            if not wp.isfinite(q[0] + q[1] + q[2]):
                done = True
        ok = A[0]
        if not (done and wp.isfinite(q[0] + q[1] + q[2])):
            ok = S(0.0)
        q0 = wp.sqrt(S(1.0) - wp.dot(q, q))
        Q = (q0 * q0 - wp.dot(q, q)) * wp.identity(n=3, dtype=S) + S(2.0) * wp.outer(q, q) + S(2.0) * q0 * wp.skew(q)
        return R @ Q, wp.transpose(Q) @ Pi, V(ok, S(0.0), S(0.0))

    @wp.func
    def reason(Pi: V, A: V):
        code = int(0)
        if not wp.isfinite(Pi[0] + Pi[1] + Pi[2]):
            code = int(2)
        elif A[0] == S(0.0):
            code = int(1)
        return code

    return init, step, reason
