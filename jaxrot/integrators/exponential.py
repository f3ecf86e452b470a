"""One-step rules in exponential coordinates from the Roblox article (Mizerski 2020).

Each step works in the world frame of the step's start: ``O(t) = R(v(t)) O_0`` with ``v(0) = 0``,
world inertia ``I = O_0 diag(J) O_0^T`` and ``l = dt L`` (world momentum, constant: torque-free).
Newton (jacfwd Jacobian) solves for ``v``; then ``O <- R(v) O`` and ``Pi = O^T L``.

================== ==================================================== ==================
midpoint_exp        v = I^-1 R(v/2)^T l           (= Krysl's LIEMID)      v0 = 0
trapezoid_object    v = 1/2 I^-1 (l + R(v)^T l)   (object-space; = SW)    v0 = 0
trapezoid_world     v = 1/2 (I^-1 l + R(v) I^-1 R(v)^T l)  (world-space) v0 = I^-1 l
================== ==================================================== ==================

The starting guess is a parameter (``guess="zero"`` or ``"explicit"`` for ``I^-1 l``); the
defaults are our reading of the article's text (its images were not retrievable).
"""

from __future__ import annotations

from typing import ClassVar

import jax.numpy as jnp

from ..geometry import so3
from .newton import Newton
from ..geometry.state import State
from .stats import StepStats
from ._base import AbstractIntegrator, require_free


def _world_inv(J, O):
    return lambda x: O @ ((O.T @ x) / J)


def midpoint_residual(J, O, ell):
    inv = _world_inv(J, O)
    return lambda v: v - inv(so3.rotate(-0.5 * v, ell))


def trapezoid_object_residual(J, O, ell):
    inv = _world_inv(J, O)
    return lambda v: v - 0.5 * inv(ell + so3.rotate(-v, ell))


def trapezoid_world_residual(J, O, ell):
    inv = _world_inv(J, O)
    return lambda v: v - 0.5 * (inv(ell) + so3.rotate(v, inv(so3.rotate(-v, ell))))


class _AbstractExponential(AbstractIntegrator):
    order: ClassVar[int] = 2
    conserves: ClassVar[tuple[str, ...]] = ("L", "|Pi|")
    implicit: ClassVar[bool] = True
    torque: ClassVar[bool] = False
    torque_evals: ClassVar[str] = "0 (free only)"
    reference: ClassVar[str] = "Mizerski, Motion of Spinning Bodies (Roblox, 2020)"
    family: ClassVar[str] = "exponential"
    newton: Newton = Newton()
    guess: str = "zero"

    def __check_init__(self):
        if self.guess not in ("zero", "explicit"):
            raise ValueError(f"guess must be 'zero' or 'explicit', got {self.guess!r}")

    def residual(self, J, O, ell):
        raise NotImplementedError

    def solve(self, J, O, ell):
        """The rotation vector ``v`` of one step (world frame) and the Newton stats."""
        v0 = jnp.zeros_like(ell) if self.guess == "zero" else _world_inv(J, O)(ell)
        return self.newton(self.residual(J, O, ell), v0)

    def step(self, system, t, state, aux, dt):
        require_free(system, type(self).__name__)
        O, J = state.R, system.body.J
        L = O @ state.Pi
        v, st = self.solve(J, O, dt * L)
        O1 = so3.exp(v) @ O
        return State(O1, O1.T @ L), aux, StepStats.from_solves(st)


class MidpointExp(_AbstractExponential):
    """Implicit midpoint in exponential coordinates (the article's first method)."""

    symmetric: ClassVar[bool] = True

    def residual(self, J, O, ell):
        return midpoint_residual(J, O, ell)


class TrapezoidObject(_AbstractExponential):
    """Object-space trapezoidal rule: average of start and end body angular velocities."""

    conserves: ClassVar[tuple[str, ...]] = ("L", "|Pi|", "E")

    def residual(self, J, O, ell):
        return trapezoid_object_residual(J, O, ell)


class TrapezoidWorld(_AbstractExponential):
    """World-space trapezoidal rule (the one Roblox ships)."""

    guess: str = "explicit"

    def residual(self, J, O, ell):
        return trapezoid_world_residual(J, O, ell)
