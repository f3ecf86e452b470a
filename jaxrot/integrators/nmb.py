"""NMB: Krysl-Endres explicit Newmark (gamma = 1/2, beta = 0) in the body frame.

    A_n = J^-1 (T_n - Om_n x J Om_n)                              (cached from the last step)
    R_{n+1} = R_n E(dt Om_n + dt^2/2 A_n);  T_{n+1} = T(t_{n+1}, R_{n+1})
    solve J A_{n+1} + Om_{n+1} x J Om_{n+1} = T_{n+1},  Om_{n+1} = Om_n + dt/2 (A_n + A_{n+1})

One torque evaluation per step; the solve is the correct one (the port's ``_solve_nmb`` used
``Om_n + dt/2 A_{n+1}``, a bug). Not momentum-conserving. Order 2.
"""

from __future__ import annotations

from typing import ClassVar

import jax.numpy as jnp

from ..geometry import so3
from .newton import Newton
from ..geometry.state import State
from .stats import StepStats
from ..physics.torques import body_torque
from ._base import AbstractIntegrator


class NMB(AbstractIntegrator):
    order: ClassVar[int] = 2
    implicit: ClassVar[bool] = True
    reference: ClassVar[str] = "Krysl-Endres explicit Newmark"
    family: ClassVar[str] = "comparison"
    newton: Newton = Newton()

    def init(self, system, t0, state0, dt):
        J = system.body.J
        Om = state0.Pi / J
        return (body_torque(system, t0, state0.R, state0.Pi) - jnp.cross(Om, J * Om)) / J

    def step(self, system, t, state, aux, dt):
        J, R = system.body.J, state.R
        Om0, A0 = state.Pi / J, aux
        R1 = R @ so3.exp(dt * Om0 + 0.5 * dt * dt * A0)
        T1 = body_torque(system, t + dt, R1, state.Pi)

        def residual(A1):
            Om1 = Om0 + 0.5 * dt * (A0 + A1)
            return J * A1 + jnp.cross(Om1, J * Om1) - T1

        A1, st = self.newton(residual, A0)
        Om1 = Om0 + 0.5 * dt * (A0 + A1)
        return State(R1, J * Om1), A1, StepStats.from_solves(st)
