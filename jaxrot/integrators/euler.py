"""Forward Euler in the world frame with re-orthonormalisation (Postma & Nerbonne).

Both rules use the world rate ``w = R diag(1/J) R^T L`` and advance ``L <- L + h tau`` (exact
without torque, so world momentum is conserved; energy drifts). Order 1.

``euler_svd`` (the slides' rule with the inertia convention fixed): ``R <- nearest_rotation(R + h hat(w) R)``.

``euler_quat``: ``q <- normalize(q + h/2 (0, w) (x) q)`` (Hamilton product), ``R = R(q)``;
``q`` is recovered from ``R`` each step (the sign of ``q`` does not matter for ``R``).
"""

from __future__ import annotations

from typing import ClassVar

import jax.numpy as jnp

from ..geometry import so3
from ..geometry.state import State
from .stats import StepStats
from ._base import AbstractIntegrator


def _rate_and_momentum(system, t, state, dt):
    J, R = system.body.J, state.R
    L = so3.mv(R, state.Pi)
    w = so3.mv(R, state.Pi / J)
    L1 = L if system.torque.is_free else L + dt * system.torque(t, R, state.Pi)
    return w, L1


class EulerSVD(AbstractIntegrator):
    order: ClassVar[int] = 1
    conserves: ClassVar[tuple[str, ...]] = ("L", "|Pi|")
    reference: ClassVar[str] = "Postma & Nerbonne, Books in space (2011)"
    family: ClassVar[str] = "baseline"

    def step(self, system, t, state, aux, dt):
        w, L1 = _rate_and_momentum(system, t, state, dt)
        R = state.R
        R1 = so3.nearest_rotation(R + dt * jnp.cross(w[:, None], R, axis=0))
        return State(R1, so3.mtv(R1, L1)), aux, StepStats.explicit()


class EulerQuat(AbstractIntegrator):
    order: ClassVar[int] = 1
    conserves: ClassVar[tuple[str, ...]] = ("L", "|Pi|")
    reference: ClassVar[str] = "Postma & Nerbonne, Books in space (2011)"
    family: ClassVar[str] = "baseline"

    def step(self, system, t, state, aux, dt):
        w, L1 = _rate_and_momentum(system, t, state, dt)
        q = so3.matrix_to_quat(state.R)
        q = q + 0.5 * dt * so3.quat_multiply(jnp.concatenate([jnp.zeros_like(w[:1]), w]), q)
        R1 = so3.quat_to_matrix(q / jnp.linalg.norm(q))
        return State(R1, so3.mtv(R1, L1)), aux, StepStats.explicit()


class EulerSVDPrinted(AbstractIntegrator):
    """The slide's ``euler_svd`` *as printed* (Postma & Nerbonne): ``I_w^-1 = R^T I_b^-1 R``.

    A documented negative result, not a method: the printed inertia convention is inconsistent
    with ``R`` mapping body to world, and the error does not shrink with ``dt`` (it is not
    registered; ``jaxrot reproduce groningen`` shows its non-convergence).
    """

    order: ClassVar[int] = 0

    def step(self, system, t, state, aux, dt):
        J, R = system.body.J, state.R
        L = so3.mv(R, state.Pi)
        w = so3.mtv(R, so3.mv(R, L) / J)  # R^T diag(1/J) R L: the printed convention
        L1 = L if system.torque.is_free else L + dt * system.torque(t, R, state.Pi)
        R1 = so3.nearest_rotation(R + dt * jnp.cross(w[:, None], R, axis=0))
        return State(R1, so3.mtv(R1, L1)), aux, StepStats.explicit()
