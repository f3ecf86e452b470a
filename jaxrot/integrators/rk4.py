"""Classical Runge-Kutta 4 on the body-frame equations for ``(R, Pi)`` (Buss's baseline; SPEC 1.7).

    R' = R hat(Om),  Pi' = Pi x Om + R^T tau(t, R, Pi),  Om = Pi / J

integrated as 12 numbers. Nothing is conserved exactly and R drifts off SO(3) at O(h^4) per unit
time; ``rk4_svd`` is ``Reorthonormalize(RK4())`` (nearest rotation after each step). Order 4,
four torque evaluations per step.
"""

from __future__ import annotations

from typing import ClassVar

import jax.numpy as jnp

from ..flow import body_vector_field
from ..state import State, StepStats
from ._base import AbstractIntegrator


def pack(state: State):
    return jnp.concatenate([state.R.reshape(9), state.Pi])


def unpack(y) -> State:
    return State(y[:9].reshape(3, 3), y[9:])


def rk4_step(f, t, y, h):
    k1 = f(t, y)
    k2 = f(t + 0.5 * h, y + 0.5 * h * k1)
    k3 = f(t + 0.5 * h, y + 0.5 * h * k2)
    k4 = f(t + h, y + h * k3)
    return y + (h / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)


class RK4(AbstractIntegrator):
    """RK4 on ``(R, Pi)``; R is *not* kept orthogonal (see ``Reorthonormalize``)."""

    order: ClassVar[int] = 4

    def step(self, problem, t, state, aux, dt):
        y = rk4_step(body_vector_field(problem), t, pack(state), dt)
        return unpack(y), aux, StepStats.explicit()
