"""The integrator interface every method implements."""

from __future__ import annotations

import abc
from typing import Any, ClassVar

import equinox as eqx

from ..state import State, StepStats


class AbstractIntegrator(eqx.Module):
    """One step of one body, unbatched and pure (batch with ``vmap`` at the call site).

    ``init`` builds the memory a method carries between steps (a cached torque, a history);
    ``step`` advances ``state`` at time ``t`` by ``dt`` and returns ``(state, aux, stats)``.
    """

    #: global order of accuracy on smooth problems
    order: ClassVar[int]

    def init(self, problem, t0, state0: State, dt) -> Any:
        """Memory carried between steps (default: none)."""
        return None

    @abc.abstractmethod
    def step(self, problem, t, state: State, aux: Any, dt) -> tuple[State, Any, StepStats]:
        """Advance one step."""


class AbstractWrapper(AbstractIntegrator):
    """A method built around another (``base``): same order and, by default, the same memory."""

    base: AbstractIntegrator

    @property
    def order(self):
        return self.base.order

    def init(self, problem, t0, state0: State, dt) -> Any:
        return self.base.init(problem, t0, state0, dt)
