"""RKMK8 restated as Warp functions (see :mod:`jaxrot.integrators.rkmk8`)::

    U_i = h sum_j a_ij K_j,   P_i = Pi + h sum_j a_ij F_j,   Om_i = P_i / J,   R_i = R exp(hat U_i)
    K_i = Om_i + 1/2 U_i x Om_i + c(|U_i|) U_i x (U_i x Om_i)
    F_i = P_i x Om_i + R_i^T tau(t + c_i h, R_i, P_i)
    R1 = R exp(h hat(sum_i b_i K_i)),   Pi1 = Pi + h sum_i b_i F_i

with DOP853's twelve-stage tableau held as kernel constants and the stages in two 12x3 local
matrices. No memory. The stage's torque is taken in the body frame without forming ``R_i``:
``R_i^T w = E_i^T (R^T w)`` with ``E_i = exp(hat U_i)`` (gravity: ``-mgl c x R_i^T up``), which
rounds differently from the JAX method's ``R_i^T tau(R_i)`` (7e-15 relative after 1000 steps on the
fast top, within the kernels' 1e-13).
"""

import functools

from ..integrators.dop853_coefficients import A as _A
from ..integrators.dop853_coefficients import B as _B
from ..integrators.dop853_coefficients import C as _C
from ..geometry.so3 import DEXPINV_TAYLOR as _TC
from ._common import _T1, _T2, SMALL_ANGLE2, so3_funcs, torque_funcs, warp


@functools.lru_cache(maxsize=None)
def make_rkmk8(S, name: str, torque: str, K: int):
    """``(init, step)`` Warp functions of RKMK8 for a torque kind."""
    wp = warp()
    c = so3_funcs(S)
    tq = torque_funcs(S, torque, K)
    V, M = c.V, c.M
    n = _B.shape[0]
    KM = wp.types.matrix((n, 3), S)
    AM = wp.types.matrix((n, n), S)
    VN = wp.types.vector(n, S)
    A = AM(*[S(float(x)) for x in _A.reshape(-1)])
    B = VN(*[S(float(x)) for x in _B])
    C = VN(*[S(float(x)) for x in _C])
    FREE = torque == "free"
    c0, c1, c2, c3, c4 = _TC
    a0, a1, a2_, a3, a4 = _T1
    b0, b1, b2, b3, b4 = _T2
    small = SMALL_ANGLE2

    @wp.func
    def init(R: M, Pi: V, J: V, P: wp.array(dtype=S)):
        return V(S(0.0), S(0.0), S(0.0))

    @wp.func
    def dexpinv_neg(U: V, Om: V):
        """``dexp^{-1}_{-U}(Om)`` (so3.dexpinv(-U, Om))."""
        a2 = wp.dot(U, U)
        cc = S(0.0)
        if a2 < S(small):
            cc = (((S(c4) * a2 + S(c3)) * a2 + S(c2)) * a2 + S(c1)) * a2 + S(c0)
        else:
            half = S(0.5) * wp.sqrt(a2)
            cc = (S(1.0) - half * wp.cos(half) / wp.sin(half)) / a2
        UxO = wp.cross(-U, Om)
        return Om - S(0.5) * UxO + cc * wp.cross(-U, UxO)

    @wp.func
    def exp_and_dexpinv_neg(U: V, Om: V):
        """``(exp(hat U), dexp^{-1}_{-U}(Om))`` with the angle's square root and half-angle sine taken
        once for both (the same values as ``c.exp(U)`` and ``dexpinv_neg(U, Om)``, one Taylor switch)."""
        a2 = wp.dot(U, U)
        s1 = S(0.0)
        s2 = S(0.0)
        cc = S(0.0)
        if a2 < S(small):
            s1 = (((S(a4) * a2 + S(a3)) * a2 + S(a2_)) * a2 + S(a1)) * a2 + S(a0)
            s2 = (((S(b4) * a2 + S(b3)) * a2 + S(b2)) * a2 + S(b1)) * a2 + S(b0)
            cc = (((S(c4) * a2 + S(c3)) * a2 + S(c2)) * a2 + S(c1)) * a2 + S(c0)
        else:
            a = wp.sqrt(a2)
            half = S(0.5) * a
            sh = wp.sin(half)
            s1 = wp.sin(a) / a
            s2 = S(2.0) * sh * sh / a2
            cc = (S(1.0) - half * wp.cos(half) / sh) / a2
        E = (S(1.0) - s2 * a2) * wp.identity(n=3, dtype=S) + s1 * wp.skew(U) + s2 * wp.outer(U, U)
        UxO = wp.cross(-U, Om)
        return E, Om - S(0.5) * UxO + cc * wp.cross(-U, UxO)

    @wp.func
    def row(X: KM, j: int):
        return V(X[j, 0], X[j, 1], X[j, 2])

    @wp.func
    def step(R: M, Pi: V, Amem: V, t: S, h: S, J: V, P: wp.array(dtype=S)):
        Ks = KM()
        Fs = KM()
        for i in range(n):
            su = V(S(0.0), S(0.0), S(0.0))
            sp = V(S(0.0), S(0.0), S(0.0))
            for j in range(i):
                su = su + wp.static(A)[i, j] * row(Ks, j)
                sp = sp + wp.static(A)[i, j] * row(Fs, j)
            U = h * su
            Pc = Pi + h * sp
            Om = wp.cw_div(Pc, J)
            Kv = V(S(0.0), S(0.0), S(0.0))
            Fv = wp.cross(Pc, Om)
            if wp.static(FREE):
                Kv = dexpinv_neg(U, Om)
            else:
                E, Kv = exp_and_dexpinv_neg(U, Om)
                Fv = Fv + tq.body_tau_at(t + wp.static(C)[i] * h, R, E, Pc, P)
            for k in range(3):
                Ks[i, k] = Kv[k]
                Fs[i, k] = Fv[k]
        sk = V(S(0.0), S(0.0), S(0.0))
        sf = V(S(0.0), S(0.0), S(0.0))
        for i in range(n):
            sk = sk + wp.static(B)[i] * row(Ks, i)
            sf = sf + wp.static(B)[i] * row(Fs, i)
        return R @ c.exp(h * sk), Pi + h * sf, Amem

    return init, step
