"""DMV: discrete Moser-Veselov for the free body (standard form).

With ``D = diag(d)``, ``d_i = (J_j + J_k - J_i)/2`` (so ``hat(J Om) = hat(Om) D + D hat(Om)``):

    solve dt hat(Pi_n) = Q D - D Q^T  for Q in SO(3);   R_{n+1} = R_n Q;   Pi_{n+1} = Q^T Pi_n

Solved in the unit quaternion ``(q0, q)``: ``dt Pi_n = 2 q0 (J o q) + 2 (D q) x q`` with
``q0 = sqrt(1 - |q|^2)``, Newton from ``q = dt Pi / (2 J)``. World momentum, |Pi| and energy are
exact; order 2. (McLachlan-Zanna's preprocessed variant is not implemented: its formulas were not
available.)
"""

from __future__ import annotations

from typing import ClassVar

import jax.numpy as jnp

from .. import so3
from ..newton import Newton
from ..state import State, StepStats
from ._base import AbstractIntegrator, require_free


def _Q(q):
    q0 = jnp.sqrt(1.0 - jnp.dot(q, q))
    return (q0 * q0 - jnp.dot(q, q)) * jnp.eye(3, dtype=q.dtype) + 2 * jnp.outer(q, q) + 2 * q0 * so3.hat(q)


class DMV(AbstractIntegrator):
    order: ClassVar[int] = 2
    conserves: ClassVar[tuple[str, ...]] = ("L", "|Pi|", "E")
    implicit: ClassVar[bool] = True
    torque: ClassVar[bool] = False
    torque_evals: ClassVar[str] = "0 (free only)"
    reference: ClassVar[str] = "Moser-Veselov 1991"
    family: ClassVar[str] = "comparison"
    newton: Newton = Newton()

    def step(self, problem, t, state, aux, dt):
        require_free(problem, "dmv")
        J, Pi = problem.body.J, state.Pi
        d = 0.5 * (jnp.sum(J) - 2 * J)

        def residual(q):
            q0 = jnp.sqrt(1.0 - jnp.dot(q, q))
            return 2 * q0 * (J * q) + 2 * jnp.cross(d * q, q) - dt * Pi

        q, st = self.newton(residual, dt * Pi / (2 * J))
        Q = _Q(q)
        return State(state.R @ Q, Q.T @ Pi), aux, StepStats.from_solves(st)
