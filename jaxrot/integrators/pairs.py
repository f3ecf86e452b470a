"""Embedded pairs: a method whose step also returns an estimate of its local error.

An error-controlled run (:class:`jaxrot.Adaptive`) needs, for every attempted step, the step's
result and an estimate of its error. A pair's :meth:`AbstractPair.step_with_error` returns both: the
higher-order result (kept: local extrapolation) and the difference to a lower-order result from the
same state, packed as the 12 numbers of ``(R, Pi)`` (:func:`jaxrot.physics.flow.pack_body`). Its
plain :meth:`~AbstractPair.step` is the higher-order method's, so a pair also runs with fixed steps.

- :class:`EmbeddedPair` ``(high, low)``: two methods, each taking the step in full.
- :class:`jaxrot.integrators.RKMK8Pair` (``rkmk8(5)``): both solutions from one set of stages.

Reference: Hairer, Norsett & Wanner, *Solving ODEs I*, II.4 (embedded formulas, local extrapolation).
"""

from __future__ import annotations

import abc
from typing import Any

import jax

from ..geometry.state import State
from ..physics.flow import pack_body
from ._base import AbstractIntegrator
from .stats import StepStats


class AbstractPair(AbstractIntegrator):
    """An integrator whose step also estimates its local error (see the module docstring).

    ``error_order`` is the order of the lower solution the estimate measures; the PI controller's
    exponents come from it.
    """

    def error_order(self) -> int:
        """The order of the lower-order solution (the estimate's order is this plus one)."""
        raise NotImplementedError

    @abc.abstractmethod
    def step_with_error(self, system, t, state: State, aux: Any, dt) -> tuple[State, Any, StepStats, jax.Array]:
        """``(higher-order state, aux, stats, y_high - y_low)``, the difference packed as 12 numbers."""

    def step(self, system, t, state, aux, dt):
        return self.step_with_error(system, t, state, aux, dt)[:3]


class EmbeddedPair(AbstractPair):
    """Two methods of different orders taking every step from the same state; the higher one's
    result is kept, their difference estimates the lower one's local error.

    Args:
      high: the method whose result is kept (its order is the pair's).
      low: a method of lower order.

    Example::

        pair = EmbeddedPair(jaxrot.get("buss4"), jaxrot.get("buss3"))      # registered as "buss4(3)"
    """

    high: AbstractIntegrator
    low: AbstractIntegrator

    def __check_init__(self):
        if not self.high.order > self.low.order:
            raise ValueError(f"an embedded pair needs a higher-order first method; got orders {self.high.order} "
                             f"and {self.low.order}")

    order = property(lambda self: self.high.order)
    free_order = property(lambda self: self.high.free_order)
    conserves = property(lambda self: self.high.conserves)
    implicit = property(lambda self: self.high.implicit or self.low.implicit)
    torque = property(lambda self: self.high.torque and self.low.torque)
    on_so3 = property(lambda self: self.high.on_so3)
    torque_evals = property(lambda self: f"{self.high.torque_evals} + {self.low.torque_evals}")
    reference = property(lambda self: self.high.reference)
    family = property(lambda self: self.high.family)

    def error_order(self) -> int:
        return int(self.low.order)

    def init(self, system, t0, state0, dt):
        return self.high.init(system, t0, state0, dt)

    def step_with_error(self, system, t, state, aux, dt):
        yp, aux_p, stats = self.high.step(system, t, state, aux, dt)
        yq, _, _ = self.low.step(system, t, state, self.low.init(system, t, state, dt), dt)
        return yp, aux_p, stats, pack_body(yp.R, yp.Pi) - pack_body(yq.R, yq.Pi)
