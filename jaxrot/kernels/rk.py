"""Runge-Kutta 4 on the body-frame equations restated as Warp functions (see
:mod:`jaxrot.integrators.rk4`)::

    R' = R hat(Om),  Pi' = Pi x Om + R^T tau(t, R, Pi),  Om = Pi / J
    k1 = f(t, y), k2 = f(t + h/2, y + h/2 k1), k3 = f(t + h/2, y + h/2 k2), k4 = f(t + h, y + h k3)
    y1 = y + h/6 (k1 + 2 k2 + 2 k3 + k4)

on the 12 numbers ``y = (R, Pi)`` (R is not re-orthonormalised). No memory.
"""


import functools

from ._common import so3_funcs, warp
from .torques import torque_funcs

METHODS = {"rk4": 4}


@functools.lru_cache(maxsize=None)
def make(S, name: str, torque: str, K: int):
    """``(init, step)`` Warp functions of RK4 for a torque kind."""
    wp = warp()
    c = so3_funcs(S)
    tq = torque_funcs(S, torque, K)
    V, M = c.V, c.M
    FREE = torque == "free"

    @wp.func
    def init(R: M, Pi: V, J: V, P: wp.array(dtype=S), h: S):
        return V(S(0.0), S(0.0), S(0.0))

    @wp.func
    def field(t: S, R: M, Pi: V, J: V, P: wp.array(dtype=S)):
        Om = wp.cw_div(Pi, J)
        Rdot = wp.matrix_from_rows(wp.cross(R[0], Om), wp.cross(R[1], Om), wp.cross(R[2], Om))
        Pidot = wp.cross(Pi, Om)
        if wp.static(not FREE):
            Pidot = Pidot + wp.transpose(R) @ tq.tau(t, R, Pi, P)
        return Rdot, Pidot

    @wp.func
    def step(R: M, Pi: V, A: V, t: S, h: S, J: V, P: wp.array(dtype=S)):
        hh = S(0.5) * h
        kR1, kP1 = field(t, R, Pi, J, P)
        kR2, kP2 = field(t + hh, R + hh * kR1, Pi + hh * kP1, J, P)
        kR3, kP3 = field(t + hh, R + hh * kR2, Pi + hh * kP2, J, P)
        kR4, kP4 = field(t + h, R + h * kR3, Pi + h * kP3, J, P)
        h6 = h / S(6.0)
        R1 = R + h6 * (kR1 + S(2.0) * kR2 + S(2.0) * kR3 + kR4)
        Pi1 = Pi + h6 * (kP1 + S(2.0) * kP2 + S(2.0) * kP3 + kP4)
        return R1, Pi1, A

    return init, step


@functools.lru_cache(maxsize=None)
def make_euler_quat(S, name: str, torque: str, K: int):
    """``(init, step)`` of forward Euler on the quaternion (:class:`jaxrot.integrators.euler.EulerQuat`)::

        L = R Pi,  w = R (Pi / J),  L1 = L + h tau(t, R, Pi)
        q = quat(R) (Shepperd, w >= 0),  q <- q + h/2 (0, w) (x) q,  R1 = R(q / |q|),  Pi1 = R1^T L1
    """
    wp = warp()
    c = so3_funcs(S)
    tq = torque_funcs(S, torque, K)
    V, M = c.V, c.M
    Q = wp.types.vector(4, S)
    FREE = torque == "free"

    @wp.func
    def init(R: M, Pi: V, J: V, P: wp.array(dtype=S), h: S):
        return V(S(0.0), S(0.0), S(0.0))

    @wp.func
    def matrix_to_quat(R: M):
        t = R[0, 0] + R[1, 1] + R[2, 2]
        k = int(0)
        best = t
        if R[0, 0] > best:
            k = 1
            best = R[0, 0]
        if R[1, 1] > best:
            k = 2
            best = R[1, 1]
        if R[2, 2] > best:
            k = 3
        q = Q(S(1.0) + t, R[2, 1] - R[1, 2], R[0, 2] - R[2, 0], R[1, 0] - R[0, 1])
        if k == 1:
            q = Q(R[2, 1] - R[1, 2], S(1.0) + S(2.0) * R[0, 0] - t, R[0, 1] + R[1, 0], R[0, 2] + R[2, 0])
        if k == 2:
            q = Q(R[0, 2] - R[2, 0], R[0, 1] + R[1, 0], S(1.0) + S(2.0) * R[1, 1] - t, R[1, 2] + R[2, 1])
        if k == 3:
            q = Q(R[1, 0] - R[0, 1], R[0, 2] + R[2, 0], R[1, 2] + R[2, 1], S(1.0) + S(2.0) * R[2, 2] - t)
        q = q / wp.length(q)
        if q[0] < S(0.0):
            q = -q
        return q

    @wp.func
    def quat_to_matrix(q: Q):
        q = q / wp.length(q)
        w = q[0]
        x = q[1]
        y = q[2]
        z = q[3]
        one = S(1.0)
        two = S(2.0)
        return M(one - two * (y * y + z * z), two * (x * y - w * z), two * (x * z + w * y),
                 two * (x * y + w * z), one - two * (x * x + z * z), two * (y * z - w * x),
                 two * (x * z - w * y), two * (y * z + w * x), one - two * (x * x + y * y))

    @wp.func
    def step(R: M, Pi: V, A: V, t: S, h: S, J: V, P: wp.array(dtype=S)):
        L = R @ Pi
        w = R @ wp.cw_div(Pi, J)
        L1 = L
        if wp.static(not FREE):
            L1 = L + h * tq.tau(t, R, Pi, P)
        q = matrix_to_quat(R)
        qv = V(q[1], q[2], q[3])
        pv = w * q[0] + wp.cross(w, qv)  # (0, w) (x) q: vector part 0 qv + qw w + w x qv
        prod = Q(S(0.0) * q[0] - wp.dot(w, qv), S(0.0) * q[1] + pv[0], S(0.0) * q[2] + pv[1],
                 S(0.0) * q[3] + pv[2])
        q = q + S(0.5) * h * prod
        R1 = quat_to_matrix(q / wp.length(q))
        return R1, wp.transpose(R1) @ L1, A

    return init, step
