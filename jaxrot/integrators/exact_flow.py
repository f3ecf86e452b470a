"""The exact torque-free flow as an integrator, and the Strang splitting built on it.

``exact_free`` advances the state by :func:`jaxrot.exact.free_flow` (Jacobi elliptic functions and
an elliptic integral of the third kind, in Carlson form): exact to round-off at any step, torque-free
bodies only, explicit.

``exact_split`` is the splitting of Celledoni, Fasso, Safstrom & Zanna (SIAM J. Sci. Comput. 30
(2008) 2084) for bodies with torque:

    Pi+ = Pi_n + h/2 T(t_n, R_n)                 (kick: the exact flow of a torque from a potential)
    (R_{n+1}, Pi-) = free_flow(h)(R_n, Pi+)      (exact free motion)
    Pi_{n+1} = Pi- + h/2 T(t_n + h, R_{n+1})

``T = R^T tau`` is the body torque. Order 2, symmetric, one torque evaluation per step (the end kick's
torque is the next step's start kick), world momentum changed only by the torque impulses; exact
without torque. Its compositions (``Compose``) give orders 4, 6, 8. For a torque that depends on Pi
the kick freezes Pi at its start (still order 2, no longer the exact sub-flow).
"""

from __future__ import annotations

import math
from typing import ClassVar

from ..physics import exact
from ..geometry.state import State
from .stats import StepStats
from ..physics.torques import body_torque
from ._base import AbstractIntegrator, require_free


class ExactFree(AbstractIntegrator):
    """The exact free-body flow over each step (order infinite)."""

    order: ClassVar[float] = math.inf
    conserves: ClassVar[tuple[str, ...]] = ("L", "|Pi|", "E")
    torque: ClassVar[bool] = False
    symmetric: ClassVar[bool] = True
    torque_evals: ClassVar[str] = "0 (free only)"
    reference: ClassVar[str] = "Celledoni-Fasso-Safstrom-Zanna 2008"
    family: ClassVar[str] = "high-order"

    def step(self, system, t, state, aux, dt):
        require_free(system, "exact_free")
        return exact.free_flow(system.body.J, state, dt), aux, StepStats.explicit()


class ExactSplit(AbstractIntegrator):
    """Strang splitting: half kick, exact free flow, half kick (the end torque is cached)."""

    order: ClassVar[int] = 2
    free_order: ClassVar[float] = math.inf
    conserves: ClassVar[tuple[str, ...]] = ("L", "|Pi|", "E")
    symmetric: ClassVar[bool] = True
    torque_evals: ClassVar[str] = "1 (cached)"
    reference: ClassVar[str] = "Celledoni-Fasso-Safstrom-Zanna 2008"
    family: ClassVar[str] = "high-order"

    def init(self, system, t0, state0, dt):
        return body_torque(system, t0, state0.R, state0.Pi)

    def step(self, system, t, state, aux, dt):
        h = 0.5 * dt
        free = exact.free_flow(system.body.J, State(state.R, state.Pi + h * aux), dt)
        T1 = body_torque(system, t + dt, free.R, free.Pi)
        return State(free.R, free.Pi + h * T1), T1, StepStats.explicit()
