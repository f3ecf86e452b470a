"""Buss's 1st-4th order rotation updates (J. Comput. Phys. 164 (2000); talk 2011).

Every method has the form ``R_{i+1} = exp(h hat(w_bar)) R_i`` in the **world** frame, with a net
rotation rate ``w_bar`` built from ``w = I_w^-1 L`` and its time derivatives:

    w'   = I^-1 (L' - w x L)
    w''  = w x w' + I^-1 (L'' - w' x L - 2 w x L' + w x (w x L))
    w''' = 2 w x w'' - w x (w x w')
           + I^-1 [L''' - 3 w x L'' - 3 w' x L' - w'' x L + w' x (w x L) + 2 w x (w' x L)
                   + 3 w x (w x L') - w x (w x (w x L))]

=========== =========================================================== =====
name         w_bar                                                       order
=========== =========================================================== =====
buss1        w                                                           1
buss2        w + h/2 w'                                                  2
buss3_false  w + h/2 w' + h^2/6 w''                                      2 (!)
buss2p       w + h/2 w' + h^2/12 w' x w                                  2
buss3        w + h/2 w' + h^2/6 w'' + h^2/12 w' x w                      3
buss4        buss3 + h^3/24 w''' + h^3/24 w'' x w                        4
=========== =========================================================== =====

The derivatives ``L', L'', ...`` come from Taylor-mode AD of the torque along the exact flow
(:mod:`jaxrot.flow`), so any torque model works (attitude-dependent ones included). The world
momentum is advanced by the torque model's ``advance_momentum`` with p derivatives for a method of
order p (exact for a prescribed ``L(t)`` and without torque), so the pair (R, L) is of order p.
Without torque world momentum is conserved exactly; energy is not (see ``EnergyProjection``).
"""

from __future__ import annotations

from typing import ClassVar

import jax.numpy as jnp

from ..geometry import so3
from ..physics.flow import momentum_derivatives
from ..geometry.state import State
from .buss_rates import formulas
from .stats import StepStats
from ._base import AbstractIntegrator
from .world_update import initial_momentum, world_increment_step


def _inv_inertia(R, J, x):  # I_w^-1 x = R diag(1/J) R^T x
    return so3.mv(R, so3.mtv(R, x) / J)


#: Buss's formulas over JAX's algebra (the fused kernels compile the same functions over Warp's)
_RATES = formulas(jnp.cross, _inv_inertia, float)


def buss_omega_derivatives(J, R, L, L_derivs, n: int):
    """``[w, w', ..., w^(n)]`` (world frame, n <= 3) from Buss's closed formulas
    (:mod:`jaxrot.integrators.buss_rates`)."""
    if n >= 4:
        raise ValueError("Buss's closed formulas go up to the third derivative of omega")
    w = _inv_inertia(R, J, L)
    out = [w]
    if n >= 1:
        out.append(_RATES.rate1(R, J, w, L, L_derivs[0]))
    if n >= 2:
        out.append(_RATES.rate2(R, J, w, out[1], L, L_derivs[0], L_derivs[1]))
    if n >= 3:
        out.append(_RATES.rate3(R, J, w, out[1], out[2], L, L_derivs[0], L_derivs[1], L_derivs[2]))
    return out


class _AbstractBuss(AbstractIntegrator):
    conserves: ClassVar[tuple[str, ...]] = ("L",)
    reference: ClassVar[str] = "Buss, J. Comput. Phys. 164 (2000) 377-406"
    family: ClassVar[str] = "buss"
    #: how many derivatives of omega the net rate needs
    n_omega: ClassVar[int]

    def omega_bar(self, h, ws):
        raise NotImplementedError

    def init(self, system, t0, state0, dt):
        return initial_momentum(state0)

    def step(self, system, t, state: State, aux, dt):
        J, torque = system.body.J, system.torque
        R, L = state.R, aux
        n_L = max(self.order, self.n_omega)
        L_derivs = momentum_derivatives(J, torque, t, R, L, n_L)
        ws = buss_omega_derivatives(J, R, L, L_derivs, self.n_omega)
        L1 = torque.advance_momentum(t, dt, L, L_derivs[: self.order])
        return world_increment_step(R, L1, dt * self.omega_bar(dt, ws)), L1, StepStats.explicit()


class Buss1(_AbstractBuss):
    """Buss 1st order: ``w_bar = w`` (Chern's Algorithm 1)."""

    order: ClassVar[int] = 1
    n_omega: ClassVar[int] = 0

    def omega_bar(self, h, ws):
        return ws[0]


class Buss2(_AbstractBuss):
    """Buss 2nd order: ``w_bar = w + h/2 w'``."""

    order: ClassVar[int] = 2
    torque_evals: ClassVar[str] = "1 + Taylor(1)"
    n_omega: ClassVar[int] = 1

    def omega_bar(self, h, ws):
        w, w1 = ws
        return w + 0.5 * h * w1


class Buss3False(_AbstractBuss):
    """Buss's "false 3rd order": the naive Taylor ``w + h/2 w' + h^2/6 w''``; only 2nd order."""

    order: ClassVar[int] = 2
    torque_evals: ClassVar[str] = "1 + Taylor(2)"
    n_omega: ClassVar[int] = 2

    def omega_bar(self, h, ws):
        w, w1, w2 = ws
        return w + 0.5 * h * w1 + h * h / 6.0 * w2


class Buss2Plus(_AbstractBuss):
    """Buss augmented 2nd order ("2+"): ``w + h/2 w' + h^2/12 w' x w`` (Chern's Algorithm 2)."""

    order: ClassVar[int] = 2
    torque_evals: ClassVar[str] = "1 + Taylor(1)"
    n_omega: ClassVar[int] = 1

    def omega_bar(self, h, ws):
        w, w1 = ws
        return w + 0.5 * h * w1 + h * h / 12.0 * jnp.cross(w1, w)


class Buss3(_AbstractBuss):
    """Buss true 3rd order: ``w + h/2 w' + h^2/6 w'' + h^2/12 w' x w``."""

    order: ClassVar[int] = 3
    torque_evals: ClassVar[str] = "1 + Taylor(2)"
    n_omega: ClassVar[int] = 2

    def omega_bar(self, h, ws):
        w, w1, w2 = ws
        return w + 0.5 * h * w1 + h * h / 6.0 * w2 + h * h / 12.0 * jnp.cross(w1, w)


class Buss4(_AbstractBuss):
    """Buss true 4th order: 3rd order ``+ h^3/24 w''' + h^3/24 w'' x w``."""

    order: ClassVar[int] = 4
    torque_evals: ClassVar[str] = "1 + Taylor(3)"
    n_omega: ClassVar[int] = 3

    def omega_bar(self, h, ws):
        w, w1, w2, w3 = ws
        h2, h3 = h * h, h * h * h
        return (
            w
            + 0.5 * h * w1
            + h2 / 6.0 * w2
            + h2 / 12.0 * jnp.cross(w1, w)
            + h3 / 24.0 * w3
            + h3 / 24.0 * jnp.cross(w2, w)
        )
