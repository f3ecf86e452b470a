"""Simo-Wong energy-momentum algorithm, implicit form (Krysl's ``simo_wong_algo_c1``),
and the explicit "C2" variant Buss compared against.

Implicit (``simo_wong``), solved for ``Om_{n+1}`` by Newton:

    Theta = dt/2 (Om_n + Om_{n+1});  R_{n+1} = R_n E(Theta)
    t_a = spatial torque at R_n E(Theta/2), time t + dt/2
    J Om_{n+1} = E(-Theta) J Om_n + dt R_{n+1}^T t_a

Free body: energy exact (``Theta . E(-Theta) Pi = Theta . Pi``), world momentum and |Pi| exact;
it is the object-space trapezoidal rule of the Roblox article. pi_z exact on the tops. Order 2.

Explicit C2 (``simo_wong_explicit``), with ``A`` the cached angular acceleration:

    Theta = dt (Om_n + dt/2 A_n);  R_{n+1} = R_n E(Theta)
    J Om_{n+1} = R_{n+1}^T (R_n J Om_n + dt/2 (t_n + t_{n+1}));  A_{n+1} = (Om_{n+1} - Om_n)/dt
"""

from __future__ import annotations

from typing import ClassVar

import jax.numpy as jnp

from ..geometry import so3
from .newton import Newton
from ..geometry.state import State
from .stats import StepStats
from ._base import AbstractIntegrator


class SimoWong(AbstractIntegrator):
    order: ClassVar[int] = 2
    conserves: ClassVar[tuple[str, ...]] = ("L", "|Pi|", "E")
    implicit: ClassVar[bool] = True
    torque_evals: ClassVar[str] = "1 per Newton iteration"
    reference: ClassVar[str] = "Simo-Wong 1991 (port's algo C1)"
    family: ClassVar[str] = "comparison"
    newton: Newton = Newton()

    def step(self, system, t, state, aux, dt):
        J, R, Pi0 = system.body.J, state.R, state.Pi
        Om0 = Pi0 / J

        def end(Om1):
            th = 0.5 * dt * (Om0 + Om1)
            Rh = R @ so3.exp(0.5 * th)
            ta = system.torque(t + 0.5 * dt, Rh, so3.rotate(-0.5 * th, Pi0))
            R1 = R @ so3.exp(th)
            return th, R1, so3.rotate(-th, Pi0) + dt * (R1.T @ ta)

        def residual(Om1):
            return J * Om1 - end(Om1)[2]

        Om1, st = self.newton(residual, Om0)
        _, R1, Pi1 = end(Om1)
        return State(R1, Pi1), aux, StepStats.from_solves(st)


class SimoWongExplicit(AbstractIntegrator):
    order: ClassVar[int] = 2
    conserves: ClassVar[tuple[str, ...]] = ("L", "|Pi|")
    reference: ClassVar[str] = "Simo-Wong explicit (port's algo C2)"
    family: ClassVar[str] = "baseline"

    def init(self, system, t0, state0, dt):
        # A_0 from Euler's equations (the port starts from the exact acceleration)
        J = system.body.J
        T0 = state0.R.T @ system.torque(t0, state0.R, state0.Pi)
        return jnp.cross(state0.Pi, state0.Pi / J) / J + T0 / J, system.torque(t0, state0.R, state0.Pi)

    def step(self, system, t, state, aux, dt):
        J, R, Pi0 = system.body.J, state.R, state.Pi
        A0, t0 = aux
        Om0 = Pi0 / J
        R1 = R @ so3.exp(dt * (Om0 + 0.5 * dt * A0))
        # the end torque at R_{n+1}; for a Pi-independent torque this is explicit
        t1 = system.torque(t + dt, R1, R1.T @ (R @ Pi0))
        Pi1 = R1.T @ (R @ Pi0 + 0.5 * dt * (t0 + t1))
        A1 = (Pi1 / J - Om0) / dt
        return State(R1, Pi1), (A1, t1), StepStats.explicit()
