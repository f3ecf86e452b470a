"""AKW: Austin-Krishnaprasad-Wang "almost Lie-Poisson" midpoint (Krysl's appendix).

With ``Om_bar = (Om_n + Om_{n+1}) / 2`` (body frame), solved for ``Om_{n+1}`` by Newton:

    J Om_{n+1} = J Om_n - dt Om_bar x J Om_bar + dt/2 (T_n + T_{n+1}),   T_{n+1} at R_{n+1}
    R_{n+1}   = R_n cay(dt Om_bar)

Free body: ``Pi_{n+1} = cay(dt Om_bar)^T Pi_n``, so world momentum, |Pi| and energy are exact.
Order 2; with torque nothing is conserved exactly (pi_z drifts on the Coulomb system).
"""

from __future__ import annotations

from typing import ClassVar

from ..geometry import so3
from .newton import Newton
from ..geometry.state import State
from .stats import StepStats
from ..physics.torques import body_torque
from ._base import AbstractIntegrator


class AKW(AbstractIntegrator):
    order: ClassVar[int] = 2
    conserves: ClassVar[tuple[str, ...]] = ("L", "|Pi|", "E")
    implicit: ClassVar[bool] = True
    torque_evals: ClassVar[str] = "1 per Newton iteration"
    reference: ClassVar[str] = "Austin-Krishnaprasad-Wang 1993; Krysl appendix"
    family: ClassVar[str] = "comparison"
    newton: Newton = Newton()

    def init(self, system, t0, state0, dt):
        return body_torque(system, t0, state0.R, state0.Pi)

    def step(self, system, t, state, aux, dt):
        J, R = system.body.J, state.R
        Om0 = state.Pi / J

        def end(Om1):
            ob = 0.5 * (Om0 + Om1)
            R1 = R @ so3.cayley(dt * ob)
            return ob, R1, body_torque(system, t + dt, R1, J * Om1)

        def residual(Om1):
            ob, _, T1 = end(Om1)
            return J * Om1 - J * Om0 + dt * so3.hat(ob) @ (J * ob) - 0.5 * dt * (aux + T1)

        Om1, st = self.newton(residual, Om0)
        _, R1, T1 = end(Om1)
        return State(R1, J * Om1), T1, StepStats.from_solves(st)
