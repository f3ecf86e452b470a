"""Buss's methods restated as Warp functions (see :mod:`jaxrot.integrators.buss`).

One step, with ``w = I_w^-1 L`` and the derivatives of the world momentum along the exact flow
(``L' = tau``; for gravity ``tau = -mgl chi x up`` with ``chi = R c``, so
``L^(k+1) = -mgl chi^(k) x up``, ``chi' = w x chi``, ``chi'' = w' x chi + w x chi'``,
``chi''' = w'' x chi + 2 w' x chi' + w x chi''``)::

    w'   = I^-1 (L' - w x L)
    w''  = w x w' + I^-1 (L'' - w' x L - 2 w x L' + w x (w x L))
    w''' = 2 w x w'' - w x (w x w') + I^-1 [L''' - 3 w x L'' - 3 w' x L' - w'' x L + w' x (w x L)
                                           + 2 w x (w' x L) + 3 w x (w x L') - w x (w x (w x L))]
    h w_bar  (buss1 ... buss4, the table of the integrator module)
    L1 = L + sum_{k <= order} h^k / k! L^(k)          (prescribed L(t): L1 = L(t + h))
    R1 = reorth(R exp(hat(R^T h w_bar))),  Pi1 = R1^T L1

The memory ``A`` is the world momentum ``L`` (``R0 Pi0`` at the start), as in the JAX method.
"""


import functools

from ._common import so3_funcs, torque_funcs, warp

#: name -> (order, number of omega derivatives)
METHODS = {
    "buss1": (1, 0),
    "buss2": (2, 1),
    "buss3_false": (2, 2),
    "buss2p": (2, 1),
    "buss3": (3, 2),
    "buss4": (4, 3),
}


@functools.lru_cache(maxsize=None)
def make(S, name: str, torque: str, K: int):
    """``(init, step)`` Warp functions of Buss's method ``name`` for a torque kind."""
    wp = warp()
    c = so3_funcs(S)
    tq = torque_funcs(S, torque, K)
    V, M = c.V, c.M
    inv = c.inv_inertia
    order, NO = METHODS[name]
    NL = max(order, NO)
    GRAV, POLY, FREE = torque == "gravity", torque == "poly", torque == "free"
    B1, B2P, B3F, B3, B4 = (name == "buss1", name == "buss2p", name == "buss3_false", name == "buss3",
                            name == "buss4")
    B2 = name == "buss2"

    @wp.func
    def init(R: M, Pi: V, J: V, P: wp.array(dtype=S), h: S):
        return R @ Pi

    @wp.func
    def step(R: M, Pi: V, L: V, t: S, h: S, J: V, P: wp.array(dtype=S)):
        zero = V(S(0.0), S(0.0), S(0.0))
        w = inv(R, J, L)
        L1 = zero
        L2 = zero
        L3 = zero
        L4 = zero
        w1 = zero
        w2 = zero
        w3 = zero
        if wp.static(GRAV):
            mgl = P[0]
            up = V(P[4], P[5], P[6])
            chi = R @ V(P[1], P[2], P[3])
            L1 = -mgl * wp.cross(chi, up)
        if wp.static(POLY):
            L1 = tq.momentum_derivative(t, P, 1)
            if wp.static(NL >= 2):
                L2 = tq.momentum_derivative(t, P, 2)
            if wp.static(NL >= 3):
                L3 = tq.momentum_derivative(t, P, 3)
            if wp.static(NL >= 4):
                L4 = tq.momentum_derivative(t, P, 4)
        if wp.static(NO >= 1):
            w1 = inv(R, J, L1 - wp.cross(w, L))
        if wp.static(GRAV and NL >= 2):
            c1 = wp.cross(w, chi)
            L2 = -mgl * wp.cross(c1, up)
        if wp.static(NO >= 2):
            w2 = wp.cross(w, w1) + inv(R, J, L2 - wp.cross(w1, L) - S(2.0) * wp.cross(w, L1)
                                       + wp.cross(w, wp.cross(w, L)))
        if wp.static(GRAV and NL >= 3):
            c2 = wp.cross(w1, chi) + wp.cross(w, c1)
            L3 = -mgl * wp.cross(c2, up)
        if wp.static(NO >= 3):
            wL = wp.cross(w, L)
            w3 = (S(2.0) * wp.cross(w, w2) - wp.cross(w, wp.cross(w, w1))
                  + inv(R, J, L3 - S(3.0) * wp.cross(w, L2) - S(3.0) * wp.cross(w1, L1) - wp.cross(w2, L)
                        + wp.cross(w1, wL) + S(2.0) * wp.cross(w, wp.cross(w1, L))
                        + S(3.0) * wp.cross(w, wp.cross(w, L1)) - wp.cross(w, wp.cross(w, wL))))
        if wp.static(GRAV and NL >= 4):
            c3 = wp.cross(w2, chi) + S(2.0) * wp.cross(w1, c1) + wp.cross(w, c2)
            L4 = -mgl * wp.cross(c3, up)
        # the net rate
        wbar = w
        if wp.static(B2):
            wbar = w + S(0.5) * h * w1
        if wp.static(B3F):
            wbar = w + S(0.5) * h * w1 + h * h / S(6.0) * w2
        if wp.static(B2P):
            wbar = w + S(0.5) * h * w1 + h * h / S(12.0) * wp.cross(w1, w)
        if wp.static(B3):
            wbar = w + S(0.5) * h * w1 + h * h / S(6.0) * w2 + h * h / S(12.0) * wp.cross(w1, w)
        if wp.static(B4):
            h2 = h * h
            h3 = h * h * h
            wbar = (w + S(0.5) * h * w1 + h2 / S(6.0) * w2 + h2 / S(12.0) * wp.cross(w1, w)
                    + h3 / S(24.0) * w3 + h3 / S(24.0) * wp.cross(w2, w))
        # the world momentum at t + h
        Ln = L
        if wp.static(GRAV):
            fact = h
            Ln = Ln + fact * L1
            if wp.static(order >= 2):
                fact = fact * h / S(2.0)
                Ln = Ln + fact * L2
            if wp.static(order >= 3):
                fact = fact * h / S(3.0)
                Ln = Ln + fact * L3
            if wp.static(order >= 4):
                fact = fact * h / S(4.0)
                Ln = Ln + fact * L4
        if wp.static(POLY):
            Ln = L + (tq.momentum_derivative(t + h, P, 0) - tq.momentum_derivative(t, P, 0))
        R1, Pi1 = c.world_increment(R, Ln, h * wbar)
        return R1, Pi1, Ln

    return init, step
