"""Classical Runge-Kutta 4 on the body-frame equations for ``(R, Pi)`` (Buss's baseline).

    R' = R hat(Om),  Pi' = Pi x Om + R^T tau(t, R, Pi),  Om = Pi / J

integrated as 12 numbers. Nothing is conserved exactly and R drifts off SO(3) at O(h^4) per unit
time; ``rk4_svd`` is ``Reorthonormalize(RK4())`` (nearest rotation after each step). Order 4,
four torque evaluations per step.
"""

from __future__ import annotations

from typing import ClassVar

from ..physics.flow import body_vector_field, pack_body, unpack_body
from ..geometry.state import State
from .stats import StepStats
from ._base import AbstractIntegrator


def rk4_step(f, t, y, h):
    k1 = f(t, y)
    k2 = f(t + 0.5 * h, y + 0.5 * h * k1)
    k3 = f(t + 0.5 * h, y + 0.5 * h * k2)
    k4 = f(t + h, y + h * k3)
    return y + (h / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)


class RK4(AbstractIntegrator):
    """RK4 on ``(R, Pi)``; R is *not* kept orthogonal (see ``Reorthonormalize``)."""

    order: ClassVar[int] = 4
    on_so3: ClassVar[bool] = False
    torque_evals: ClassVar[str] = "4"
    reference: ClassVar[str] = "Buss (2000) comparison baselines"
    family: ClassVar[str] = "baseline"

    def step(self, system, t, state, aux, dt):
        y = rk4_step(body_vector_field(system), t, pack_body(state.R, state.Pi), dt)
        return State(*unpack_body(y)), aux, StepStats.explicit()
