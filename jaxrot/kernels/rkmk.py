"""RKMK8 with its embedded estimates restated as Warp functions for the hand-written error-controlled
pairs ``rkmk8(5)`` and ``rkmk8(5,3)`` (see :mod:`jaxrot.integrators.rkmk8`; constant-step runs take
generated kernels)::

    U_i = h sum_j a_ij K_j,   P_i = Pi + h sum_j a_ij F_j,   Om_i = P_i / J,   R_i = R exp(hat U_i)
    K_i = Om_i + 1/2 U_i x Om_i + c(|U_i|) U_i x (U_i x Om_i)
    F_i = P_i x Om_i + R_i^T tau(t + c_i h, R_i, P_i)
    R1 = R exp(h hat(sum_i b_i K_i)),   Pi1 = Pi + h sum_i b_i F_i

with DOP853's twelve-stage tableau held as kernel constants (its zero coefficients left out) and the
stages in two 12x3 local matrices. The stage's torque is taken in the body frame without forming
``R_i``: ``R_i^T w = E_i^T (R^T w)`` with ``E_i = exp(hat U_i)`` (gravity: ``-mgl c x R_i^T up``).
Below |U_i| = 1.5 rad the coefficients of ``exp`` and ``c`` come from their power series, truncated
at the precision's rounding on tiers of the angle (``so3_funcs``), not from sines, cosines and
divisions; the gravity gradient's stage nadirs are the step's turned by ``n c_i h``, whose cosines
and sines ``init`` computes once per body (its memory; no memory otherwise). All of these round
differently from the JAX method: within the 1e-13 the kernel tests allow after 1000 steps, and at
steps of 0.05-2.5 rad within 20 times the method's own change under one rounding of the initial
momentum, plus 10 roundings (measured when constant-step runs took this kernel; the pairs are
compared with XLA's loop in ``tests/test_kernels_adaptive.py``).
"""

import functools
import types
import typing

from ..integrators.dop853_coefficients import A as _A
from ..integrators.dop853_coefficients import B as _B
from ..integrators.dop853_coefficients import C as _C
from ..integrators.dop853_coefficients import E3 as _E3
from ..integrators.dop853_coefficients import E5 as _E5
from ._common import SERIES_ANGLE2, so3_funcs, warp
from .torques import torque_funcs


@functools.lru_cache(maxsize=None)
def make_rkmk8_embedded(S, name: str, torque: str, K: int):
    """``(init, step_pair)``: ``step_pair(R, Pi, A, t, h, J, P) -> (R8, Pi8, A, R5, Pi5)``, the
    eighth-order step and the fifth-order solution embedded in its stages (DOP853's weights
    ``B - E5``, :meth:`jaxrot.integrators.RKMK8.step_embedded`), from one set of stages. ``init``
    depends on the step (the gravity gradient's stage angles): an adaptive loop calls it per attempt."""
    f = _rkmk8_funcs(S, torque, K)
    return f.init, f.step_pair


@functools.lru_cache(maxsize=None)
def make_rkmk8_dop853(S, name: str, torque: str, K: int):
    """``(init, step_pair)``: ``step_pair(R, Pi, A, t, h, J, P) -> (R8, Pi8, A, X, Y)``, the
    eighth-order step and DOP853's two estimates from its stages in the lifted coordinates
    (:meth:`jaxrot.integrators.RKMK8DOP853Pair.step_with_error`): the rows of ``X`` are ``h sum E5_i K_i``,
    ``h sum E3_i K_i`` and ``h sum E5_i F_i``, and ``Y`` is ``h sum E3_i F_i`` (an adaptive loop calls
    ``init`` per attempt, as for ``rkmk8(5)``)."""
    f = _rkmk8_funcs(S, torque, K)
    return f.init, f.step_dop853


@functools.lru_cache(maxsize=None)
def _rkmk8_funcs(S, torque: str, K: int):
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
    # the embedded fifth-order weights, formed in float64 as the JAX method forms them
    B5 = VN(*[S(float(x)) for x in (_B - _E5)])
    # DOP853's error weights (rkmk8(5,3))
    E5 = VN(*[S(float(x)) for x in _E5])
    E3 = VN(*[S(float(x)) for x in _E3])
    NZE5 = [bool(x != 0.0) for x in _E5]
    NZE3 = [bool(x != 0.0) for x in _E3]
    C = VN(*[S(float(x)) for x in _C])
    FREE = torque == "free"
    # which coefficients are nonzero (a sixth of DOP853's are zero): their terms are left out of the
    # generated code, as the compiler may not drop x * 0.0 itself (x could be inf or NaN)
    NZA = [[bool(_A[i, j] != 0.0) for j in range(n)] for i in range(n)]
    NZB = [bool(x != 0.0) for x in _B]
    NZB5 = [bool(x != 0.0) for x in (_B - _E5)]
    series = SERIES_ANGLE2

    GG = torque == "gravity_gradient"
    CS = wp.types.matrix((n, 2), S)

    @wp.func
    def init(R: M, Pi: V, J: V, P: wp.array(dtype=S), h: S):
        # the gravity gradient: cos and sin of each stage's advance of the orbit, n c_i h, which turn the
        # step's nadir (cos a, sin a) into the stage's, so that a step takes one cosine and one sine
        # instead of one of each per stage; other torques: no memory
        if wp.static(GG):
            cs = CS()
            rate = tq.orbit_params(P).n
            for i in range(n):
                d = rate * wp.static(C)[i] * h
                cs[i, 0] = wp.cos(d)
                cs[i, 1] = wp.sin(d)
            return cs
        else:
            return V(S(0.0), S(0.0), S(0.0))

    @wp.func
    def row(X: KM, j: int):
        return V(X[j, 0], X[j, 1], X[j, 2])

    def stage_sums(PAIR: bool, DOP: bool = False):
        """A Warp function of one step's stages giving their weighted sums ``(sum b_i K_i, sum b_i F_i)``
        and, with ``PAIR``, the embedded solution's ``(sum bhat_i K_i, sum bhat_i F_i)`` (zeros without),
        with ``DOP`` instead DOP853's estimates ``(sum E5_i K_i, sum E5_i F_i)`` and, in a 3x3 matrix's
        first two rows, ``sum E3_i K_i`` and ``sum E3_i F_i``: the stages stay in the function's local
        matrices (returning them costs the fixed-step kernel 5-10 % on a CPU)."""

        @wp.func
        def sums(R: M, Pi: V, Amem: typing.Any, t: S, h: S, J: V, P: wp.array(dtype=S)):
            Ks = KM()
            Fs = KM()
            ca = S(0.0)
            sa = S(0.0)
            if wp.static(GG):  # the step's nadir angle n t + phase
                nad = tq.nadir(t, P)
                ca = nad[0]
                sa = nad[1]
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
                    Kv = c.dexpinv(-U, Om)  # so3.dexpinv(-U, Om)
                else:  # R_i's exponential and dexp^{-1} share the angle (its series, or its square root and sine)
                    a2 = wp.dot(U, U)
                    s1 = S(0.0)
                    s2 = S(0.0)
                    cc = S(0.0)
                    if a2 < S(series):
                        s1, s2, cc = c.rodrigues12_dexpinv_series(a2)
                    else:
                        s1, s2, half, sh = c.rodrigues12_half(a2)
                        cc = c.dexpinv_c(a2, half, sh)
                    Kv = c.dexpinv_with(-U, Om, cc)
                    E = c.exp_of(U, a2, s1, s2)
                    if wp.static(GG):  # the stage's world nadir, turned from the step's by n c_i h
                        w = V(ca * Amem[i, 0] - sa * Amem[i, 1], sa * Amem[i, 0] + ca * Amem[i, 1], S(0.0))
                        Fv = Fv + tq.gravity_gradient_body(wp.transpose(E) @ (wp.transpose(R) @ w), P)
                    else:
                        Fv = Fv + tq.body_tau_at(t + wp.static(C)[i] * h, R, E, Pc, P)
                for k in range(3):
                    Ks[i, k] = Kv[k]
                    Fs[i, k] = Fv[k]
            sk = V(S(0.0), S(0.0), S(0.0))
            sf = V(S(0.0), S(0.0), S(0.0))
            for i in range(n):
                if wp.static(NZB[i]):
                    sk = sk + wp.static(B)[i] * row(Ks, i)
                    sf = sf + wp.static(B)[i] * row(Fs, i)
            sk5 = V(S(0.0), S(0.0), S(0.0))
            sf5 = V(S(0.0), S(0.0), S(0.0))
            e3 = M()
            if wp.static(PAIR):
                for i in range(n):
                    if wp.static(NZB5[i]):
                        sk5 = sk5 + wp.static(B5)[i] * row(Ks, i)
                        sf5 = sf5 + wp.static(B5)[i] * row(Fs, i)
            if wp.static(DOP):
                sk3 = V(S(0.0), S(0.0), S(0.0))
                sf3 = V(S(0.0), S(0.0), S(0.0))
                for i in range(n):
                    if wp.static(NZE5[i]):
                        sk5 = sk5 + wp.static(E5)[i] * row(Ks, i)
                        sf5 = sf5 + wp.static(E5)[i] * row(Fs, i)
                    if wp.static(NZE3[i]):
                        sk3 = sk3 + wp.static(E3)[i] * row(Ks, i)
                        sf3 = sf3 + wp.static(E3)[i] * row(Fs, i)
                for k in range(3):
                    e3[0, k] = sk3[k]
                    e3[1, k] = sf3[k]
            return sk, sf, sk5, sf5, e3

        return sums

    sums85 = stage_sums(True)
    sums8dop = stage_sums(False, True)

    @wp.func
    def step_pair(R: M, Pi: V, Amem: typing.Any, t: S, h: S, J: V, P: wp.array(dtype=S)):
        sk, sf, sk5, sf5, e3 = sums85(R, Pi, Amem, t, h, J, P)
        return R @ c.exp(h * sk), Pi + h * sf, Amem, R @ c.exp(h * sk5), Pi + h * sf5

    @wp.func
    def step_dop853(R: M, Pi: V, Amem: typing.Any, t: S, h: S, J: V, P: wp.array(dtype=S)):
        sk, sf, ek5, ef5, e3 = sums8dop(R, Pi, Amem, t, h, J, P)
        X = M()
        for k in range(3):
            X[0, k] = h * ek5[k]
            X[1, k] = h * e3[0, k]
            X[2, k] = h * ef5[k]
        Y = V(h * e3[1, 0], h * e3[1, 1], h * e3[1, 2])
        return R @ c.exp(h * sk), Pi + h * sf, Amem, X, Y

    return types.SimpleNamespace(init=init, step_pair=step_pair, step_dop853=step_dop853)
