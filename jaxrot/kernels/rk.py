"""Runge-Kutta 4 on the body-frame equations restated as Warp functions (see
:mod:`jaxrot.integrators.rk4`)::

    R' = R hat(Om),  Pi' = Pi x Om + R^T tau(t, R, Pi),  Om = Pi / J
    k1 = f(t, y), k2 = f(t + h/2, y + h/2 k1), k3 = f(t + h/2, y + h/2 k2), k4 = f(t + h, y + h k3)
    y1 = y + h/6 (k1 + 2 k2 + 2 k3 + k4)

on the 12 numbers ``y = (R, Pi)`` (R is not re-orthonormalised). No memory.
"""


import functools

from ._common import so3_funcs, torque_funcs, warp

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
    def init(R: M, Pi: V, J: V, P: wp.array(dtype=S)):
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
