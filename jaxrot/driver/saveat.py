"""What a run keeps: :class:`SaveAt` (diffrax's meanings)."""

from __future__ import annotations

from typing import Any

import equinox as eqx
import numpy as np


class SaveAt(eqx.Module):
    """Which states a run returns.

    Args:
      t0: keep the initial state (first frame).
      t1: keep the final state.
      ts: states at these times (increasing, within the span; between steps by the method's dense
        output).
      steps: keep the state after every step (``every=1``).
      every: keep the state after every ``every``-th step (fixed steps; must divide the step count).
      dense: make ``traj.evaluate(t)`` work for any ``t`` in the span.

    With neither ``ts``, ``steps`` nor ``every`` a fixed-step run keeps ``t0`` and ``t1`` only and its
    step count is a traced loop bound (one compiled program for any count).

    Example::

        jaxrot.simulate("buss4", problem, 1e-3, 1000, saveat=jaxrot.SaveAt(every=10))
        jaxrot.simulate("buss4", problem, 1e-3, 1000, saveat=jaxrot.SaveAt(t0=False))   # final state only
    """

    t0: bool = True
    t1: bool = True
    ts: Any = None
    steps: bool = False
    every: int | None = None
    dense: bool = False

    def __check_init__(self):
        for name in ("t0", "t1", "steps", "dense"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"SaveAt.{name} must be a bool, got {getattr(self, name)!r}")
        if self.every is not None:
            if isinstance(self.every, bool) or not isinstance(self.every, (int, np.integer)) or self.every < 1:
                raise ValueError(f"SaveAt.every must be a positive int, got {self.every!r}")
            if self.steps:
                raise ValueError("SaveAt takes steps=True or every=k, not both")

    @property
    def save_every(self) -> int | None:
        """Steps between saved frames, or None (only the final state)."""
        return 1 if self.steps else (None if self.every is None else int(self.every))
