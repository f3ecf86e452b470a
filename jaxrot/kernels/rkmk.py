"""RKMK8 restated as Warp functions (see :mod:`jaxrot.integrators.rkmk8`)::

    U_i = h sum_j a_ij K_j,   P_i = Pi + h sum_j a_ij F_j,   Om_i = P_i / J,   R_i = R exp(hat U_i)
    K_i = Om_i + 1/2 U_i x Om_i + c(|U_i|) U_i x (U_i x Om_i)
    F_i = P_i x Om_i + R_i^T tau(t + c_i h, R_i, P_i)
    R1 = R exp(h hat(sum_i b_i K_i)),   Pi1 = Pi + h sum_i b_i F_i

with DOP853's twelve-stage tableau held as kernel constants and the stages in two 12x3 local
matrices. No memory. The stage's torque is taken in the body frame without forming ``R_i``:
``R_i^T w = E_i^T (R^T w)`` with ``E_i = exp(hat U_i)`` (gravity: ``-mgl c x R_i^T up``), which
rounds differently from the JAX method's ``R_i^T tau(R_i)``, within the 1e-13 the kernel tests
allow after 1000 steps.
"""

import functools

from ..integrators.dop853_coefficients import A as _A
from ..integrators.dop853_coefficients import B as _B
from ..integrators.dop853_coefficients import C as _C
from ..geometry.so3 import DEXPINV_TAYLOR as _TC
from ._common import SMALL_ANGLE2, so3_funcs, torque_funcs, warp


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
    # which coefficients are nonzero (a sixth of DOP853's are zero): their terms are left out of the
    # generated code, as the compiler may not drop x * 0.0 itself (x could be inf or NaN)
    NZA = [[bool(_A[i, j] != 0.0) for j in range(n)] for i in range(n)]
    NZB = [bool(x != 0.0) for x in _B]
    c0, c1, c2, c3, c4 = _TC
    small = SMALL_ANGLE2

    @wp.func
    def init(R: M, Pi: V, J: V, P: wp.array(dtype=S)):
        return V(S(0.0), S(0.0), S(0.0))

    # dexp^{-1}_{-U}(Om) = Om - U x Om / 2 + c U x (U x Om) (so3.dexpinv(-U, Om)), with
    # c = (1 - (a/2) cot(a/2)) / a^2 of a = |U|, its Taylor series below the switch
    @wp.func
    def dexpinv_c_taylor(a2: S):
        return (((S(c4) * a2 + S(c3)) * a2 + S(c2)) * a2 + S(c1)) * a2 + S(c0)

    @wp.func
    def dexpinv_c(a2: S, half: S, sh: S):
        return (S(1.0) - half * wp.cos(half) / sh) / a2

    @wp.func
    def dexpinv_neg_with(U: V, Om: V, cc: S):
        UxO = wp.cross(-U, Om)
        return Om - S(0.5) * UxO + cc * wp.cross(-U, UxO)

    @wp.func
    def dexpinv_neg(U: V, Om: V):
        a2 = wp.dot(U, U)
        cc = S(0.0)
        if a2 < S(small):
            cc = dexpinv_c_taylor(a2)
        else:
            half = S(0.5) * wp.sqrt(a2)
            cc = dexpinv_c(a2, half, wp.sin(half))
        return dexpinv_neg_with(U, Om, cc)

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
                if wp.static(NZA[i][j]):
                    su = su + wp.static(A)[i, j] * row(Ks, j)
                    sp = sp + wp.static(A)[i, j] * row(Fs, j)
            U = h * su
            Pc = Pi + h * sp
            Om = wp.cw_div(Pc, J)
            Kv = V(S(0.0), S(0.0), S(0.0))
            Fv = wp.cross(Pc, Om)
            if wp.static(FREE):
                Kv = dexpinv_neg(U, Om)
            else:  # R_i's exponential and dexp^{-1} share the angle's square root and half-angle sine
                a2 = wp.dot(U, U)
                s1, s2, half, sh = c.rodrigues12_half(a2)
                cc = S(0.0)
                if a2 < S(small):
                    cc = dexpinv_c_taylor(a2)
                else:
                    cc = dexpinv_c(a2, half, sh)
                Kv = dexpinv_neg_with(U, Om, cc)
                Fv = Fv + tq.body_tau_at(t + wp.static(C)[i] * h, R, c.exp_of(U, a2, s1, s2), Pc, P)
            for k in range(3):
                Ks[i, k] = Kv[k]
                Fs[i, k] = Fv[k]
        sk = V(S(0.0), S(0.0), S(0.0))
        sf = V(S(0.0), S(0.0), S(0.0))
        for i in range(n):
            if wp.static(NZB[i]):
                sk = sk + wp.static(B)[i] * row(Ks, i)
                sf = sf + wp.static(B)[i] * row(Fs, i)
        return R @ c.exp(h * sk), Pi + h * sf, Amem

    return init, step
