"""The integrators under test: every registered method is enrolled in the generic tests.

A new method needs no new generic test: register it in ``jaxrot.integrators`` and it is picked up
here. ``EXPECTED_ORDER`` lists methods whose *observed* order on the generic problems differs from
their registered global order (none so far); ``SKIP`` names generic tests a method cannot take.
"""

from __future__ import annotations

import dataclasses

from jaxrot.integrators import REGISTRY


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    order: int
    conserves: tuple[str, ...]
    torque: bool  # can take a torque


EXPECTED_ORDER: dict[str, int] = {}
SKIP: dict[str, set[str]] = {}

CASES = [
    Case(n, EXPECTED_ORDER.get(n, i.order), i.conserves, i.torque) for n, i in sorted(REGISTRY.items())
]
NAMES = [c.name for c in CASES]
TORQUE_NAMES = [c.name for c in CASES if c.torque]


def case(name: str) -> Case:
    return next(c for c in CASES if c.name == name)


def skipped(name: str, test: str) -> bool:
    return test in SKIP.get(name, set())
