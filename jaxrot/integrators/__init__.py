"""The integrator registry: every method under a stable short name, with its metadata.

``REGISTRY`` maps name -> :class:`MethodInfo`; ``get(name)`` returns a ready integrator.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from ._base import AbstractIntegrator
from .buss import Buss1, Buss2, Buss2Plus, Buss3, Buss3False, Buss4, buss_omega_derivatives


@dataclasses.dataclass(frozen=True)
class MethodInfo:
    """What a research user needs to know before choosing a method."""

    name: str
    factory: Callable[[], AbstractIntegrator]
    order: int
    conserves: tuple[str, ...]  # exactly, without torque: "L" (world momentum), "|Pi|", "E"
    implicit: bool
    torque_evals: str  # per step
    reference: str
    family: str
    torque: bool = True  # False: torque-free problems only
    description: str = ""


REGISTRY: dict[str, MethodInfo] = {}

_BUSS = "Buss, J. Comput. Phys. 164 (2000) 377-406; SPEC 1.3"


def register(info: MethodInfo) -> None:
    """Add a method (names are unique)."""
    if info.name in REGISTRY:
        raise ValueError(f"method {info.name!r} is already registered")
    REGISTRY[info.name] = info


def get(name: str) -> AbstractIntegrator:
    """A fresh integrator by registered name (see ``jaxrot list``)."""
    try:
        return REGISTRY[name].factory()
    except KeyError:
        raise KeyError(f"unknown method {name!r}; known: {', '.join(sorted(REGISTRY))}") from None


def info(name: str) -> MethodInfo:
    """Metadata of a registered method."""
    if name not in REGISTRY:
        get(name)  # raises the helpful KeyError
    return REGISTRY[name]


for _name, _cls, _evals, _desc in [
    ("buss1", Buss1, "1", "1st order, w_bar = w"),
    ("buss2", Buss2, "1 + Taylor(1)", "2nd order, w + h/2 w'"),
    ("buss3_false", Buss3False, "1 + Taylor(2)", "naive 3rd-order Taylor; really 2nd order"),
    ("buss2p", Buss2Plus, "1 + Taylor(1)", "augmented 2nd order (2+), + h^2/12 w' x w"),
    ("buss3", Buss3, "1 + Taylor(2)", "true 3rd order"),
    ("buss4", Buss4, "1 + Taylor(3)", "true 4th order"),
]:
    register(
        MethodInfo(
            name=_name,
            factory=_cls,
            order=_cls.order,
            conserves=("L",),
            implicit=False,
            torque_evals=_evals,
            reference=_BUSS,
            family="buss",
            description=_desc,
        )
    )

__all__ = [
    "AbstractIntegrator",
    "MethodInfo",
    "REGISTRY",
    "register",
    "get",
    "info",
    "Buss1",
    "Buss2",
    "Buss3False",
    "Buss2Plus",
    "Buss3",
    "Buss4",
    "buss_omega_derivatives",
]
