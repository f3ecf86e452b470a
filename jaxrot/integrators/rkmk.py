"""RKMK4: the classical Runge-Kutta method lifted to the rotation group (Munthe-Kaas 1998).

The attitude is ``R = R_n exp(hat(U))`` and ``U`` solves ``U' = dexp^{-1}_{-U}(Omega)``; the
momentum is a vector (its group is additive). Each stage of classical RK4 (``c = 0, 1/2, 1/2, 1``,
``b = (1, 2, 2, 1)/6``) evaluates the body rate at ``R_n exp(hat(U_i))`` and corrects it by the
truncated inverse differential of the exponential,

    K_i = Om_i + 1/2 U_i x Om_i + 1/12 U_i x (U_i x Om_i),   U_{i+1} = h a_{i+1,i} K_i,
    F_i = Pi_i x Om_i + T(t_i, R_i, Pi_i),                  Pi_{i+1} = Pi_n + h a_{i+1,i} F_i,
    R_{n+1} = R_n exp(h hat(sum b_i K_i)),                  Pi_{n+1} = Pi_n + h sum b_i F_i.

Order 4 with any torque (the terms of dexp^{-1} kept are those order 4 needs), R on SO(3) to round-off,
explicit, four torque evaluations per step; nothing is conserved exactly.
H. Munthe-Kaas, "Runge-Kutta methods on Lie groups", BIT 38 (1998) 92-111.
"""

from __future__ import annotations

from typing import ClassVar

import jax.numpy as jnp

from ..geometry import so3
from ..geometry.state import State
from .stats import StepStats
from ..physics.torques import body_torque
from ._base import AbstractIntegrator


class RKMK4(AbstractIntegrator):
    order: ClassVar[int] = 4
    torque_evals: ClassVar[str] = "4"
    reference: ClassVar[str] = "Munthe-Kaas 1998"
    family: ClassVar[str] = "high-order"

    def step(self, system, t, state, aux, dt):
        J, R0, P0 = system.body.J, state.R, state.Pi
        U, P = jnp.zeros_like(P0), P0
        Ks, Fs = [], []
        for i, c in enumerate((0.0, 0.5, 0.5, 1.0)):
            Om = P / J
            Ks.append(Om + 0.5 * jnp.cross(U, Om) + jnp.cross(U, jnp.cross(U, Om)) / 12.0)
            Fs.append(jnp.cross(P, Om) + body_torque(system, t + c * dt, R0 @ so3.exp(U), P))
            if i < 3:
                a = (0.5, 0.5, 1.0)[i]
                U, P = dt * a * Ks[-1], P0 + dt * a * Fs[-1]
        K = (Ks[0] + 2 * Ks[1] + 2 * Ks[2] + Ks[3]) / 6.0
        F = (Fs[0] + 2 * Fs[1] + 2 * Fs[2] + Fs[3]) / 6.0
        return State(R0 @ so3.exp(dt * K), P0 + dt * F), aux, StepStats.explicit()
