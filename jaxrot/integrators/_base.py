"""The integrator interface every method implements."""

from __future__ import annotations

import abc
from typing import Any, ClassVar

import equinox as eqx

from ..geometry.state import State
from .stats import StepStats


class AbstractIntegrator(eqx.Module):
    """One step of one body, unbatched and pure (batch with ``vmap`` at the call site).

    ``init`` builds the memory a method carries between steps (a cached torque, a history);
    ``step`` advances ``state`` at time ``t`` by ``dt`` and returns ``(state, aux, stats)``.
    """

    # Facts a research user needs to choose a method; the registry, `jaxrot list`, the docs and the
    # generic tests read them from here (wrappers derive theirs from their base).
    #: global order of accuracy on smooth problems (with torque)
    order: ClassVar[int]
    #: order without torque, where it differs (Krysl's E, E1, E2: 1 with torque, 2 without)
    free_order: ClassVar[int | None] = None
    #: what is exact without torque: "L" world momentum, "|Pi|" body momentum norm, "E" energy
    conserves: ClassVar[tuple[str, ...]] = ()
    #: solves a nonlinear equation per step
    implicit: ClassVar[bool] = False
    #: accepts torques (False: torque-free problems only; the driver checks this once)
    torque: ClassVar[bool] = True
    #: keeps R on SO(3) to round-off
    on_so3: ClassVar[bool] = True
    #: time-symmetric (Phi_{-h} = Phi_h^{-1}): a base for the compositions of ``Compose``
    symmetric: ClassVar[bool] = False
    #: torque evaluations per step
    torque_evals: ClassVar[str] = "1"
    #: the paper
    reference: ClassVar[str] = ""
    #: the family (one documentation page each)
    family: ClassVar[str] = ""

    def init(self, system, t0, state0: State, dt) -> Any:
        """Memory carried between steps (default: none)."""
        return None

    @abc.abstractmethod
    def step(self, system, t, state: State, aux: Any, dt) -> tuple[State, Any, StepStats]:
        """Advance one step."""


class AbstractWrapper(AbstractIntegrator):
    """A method built around another (``base``): same order and, by default, the same memory."""

    base: AbstractIntegrator

    # the base's facts, unless a wrapper declares its own
    order = property(lambda self: self.base.order)
    free_order = property(lambda self: self.base.free_order)
    conserves = property(lambda self: self.base.conserves)
    implicit = property(lambda self: self.base.implicit)
    torque = property(lambda self: self.base.torque)
    on_so3 = property(lambda self: self.base.on_so3)
    torque_evals = property(lambda self: self.base.torque_evals)
    reference = property(lambda self: self.base.reference)
    family = property(lambda self: self.base.family)

    def init(self, system, t0, state0: State, dt) -> Any:
        return self.base.init(system, t0, state0, dt)


def require_free(system, name: str):
    """Trace-time guard of a torque-free method (the driver already refuses torqued problems for a
    method that declares ``torque = False``; this keeps direct ``step`` calls honest)."""
    if not system.torque.is_free:
        raise ValueError(f"{name} is for torque-free problems; use a torque-capable method "
                         "(e.g. liemid_ea or liemid_i) for "
                         f"{type(system.torque).__name__}")
