"""Buss's third- and fourth-order methods restated as Warp functions (see :mod:`jaxrot.integrators.buss`)
for the hand-written error-controlled pair ``buss4(3)``.

One step, with ``w = I_w^-1 L``, the derivatives of ``w`` and (for gravity) of the world momentum along
the exact flow from :mod:`jaxrot.integrators.buss_rates`, the same Python functions the JAX methods
use, compiled here by Warp::

    h w_bar  (buss3, buss4, the table of the integrator module)
    L1 = L + sum_{k <= order} h^k / k! L^(k)          (prescribed L(t): L1 = L(t + h))
    R1 = reorth(R exp(hat(R^T h w_bar))),  Pi1 = R1^T L1

The memory ``A`` is the world momentum ``L`` (``R0 Pi0`` at the start), as in the JAX method.
"""


import functools
import types

from ..integrators.buss_rates import formulas
from ._common import so3_funcs, warp
from .torques import torque_funcs

#: name -> (order, number of omega derivatives): the methods of the hand-written error-controlled pair
#: ``buss4(3)`` (:mod:`jaxrot.kernels.adaptive_pairs`); constant-step runs take generated kernels
METHODS = {
    "buss3": (3, 2),
    "buss4": (4, 3),
}


@functools.lru_cache(maxsize=None)
def rates(S):
    """Buss's rate formulas and gravity's Taylor terms (:func:`jaxrot.integrators.buss_rates.formulas`):
    the JAX methods' own functions over Warp's algebra, compiled once per scalar type."""
    wp = warp()
    c = so3_funcs(S)
    plain = formulas(wp.cross, c.inv_inertia, S, c.V, c.M)
    return types.SimpleNamespace(**{k: wp.func(v) for k, v in vars(plain).items()})


@functools.lru_cache(maxsize=None)
def make(S, name: str, torque: str, K: int):
    """``(init, step)`` Warp functions of Buss's method ``name`` for a torque kind."""
    wp = warp()
    c = so3_funcs(S)
    tq = torque_funcs(S, torque, K)
    V, M = c.V, c.M
    inv = c.inv_inertia
    f = rates(S)
    order, NO = METHODS[name]
    NL = max(order, NO)
    GRAV, POLY = torque == "gravity", torque == "poly"
    B3, B4 = name == "buss3", name == "buss4"

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
            g = tq.gravity_params(P)
            mgl = g.mgl
            up = g.up
            chi = R @ g.com
            L1 = f.gravity_term(mgl, chi, up)
        if wp.static(POLY):
            L1 = tq.momentum_derivative(t, P, 1)
            if wp.static(NL >= 2):
                L2 = tq.momentum_derivative(t, P, 2)
            if wp.static(NL >= 3):
                L3 = tq.momentum_derivative(t, P, 3)
            if wp.static(NL >= 4):
                L4 = tq.momentum_derivative(t, P, 4)
        if wp.static(NO >= 1):
            w1 = f.rate1(R, J, w, L, L1)
        if wp.static(GRAV and NL >= 2):
            c1 = f.chi1(w, chi)
            L2 = f.gravity_term(mgl, c1, up)
        if wp.static(NO >= 2):
            w2 = f.rate2(R, J, w, w1, L, L1, L2)
        if wp.static(GRAV and NL >= 3):
            c2 = f.chi2(w, w1, chi, c1)
            L3 = f.gravity_term(mgl, c2, up)
        if wp.static(NO >= 3):
            w3 = f.rate3(R, J, w, w1, w2, L, L1, L2, L3)
        if wp.static(GRAV and NL >= 4):
            c3 = f.chi3(w, w1, w2, chi, c1, c2)
            L4 = f.gravity_term(mgl, c3, up)
        # the net rate
        wbar = w
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
