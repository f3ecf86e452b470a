"""What a run keeps: :class:`SaveAt` (diffrax's meanings)."""

from __future__ import annotations

import warnings
from typing import Any

import equinox as eqx
import numpy as np


class SaveAt(eqx.Module):
    """Which states a run returns. ``saveat=None`` is ``SaveAt()``: the initial and the final state.

    Args:
      t0: keep the initial state (first frame).
      t1: keep the final state.
      ts: states at these times (increasing, within the span): with constant steps from the dense
        output between the steps; error-controlled steps land on them. A time at ``t0`` is the
        initial frame; under ``jit`` with traced times (error-controlled steps) it cannot be known
        before the run and is a frame of its own, and so is a ``t1`` given to the run (which goes on
        to it; without ``t1`` the run ends at the last save time): ``SaveAt(t0=False, t1=False, ts=ts)``
        keeps exactly ``ts``.
      steps: ``True`` keeps the state after every step, an integer ``k`` after every ``k``-th step
        (constant steps: ``k`` divides the step count; error-controlled: every ``k``-th accepted
        step, up to ``max_steps // k`` frames, the unused ones at time +inf).
      dense: make ``traj.evaluate(t)`` work for any ``t`` in the span.

    Example::

        jaxrot.simulate("buss4", problem, 1e-3, 1000, saveat=jaxrot.SaveAt(steps=10))
        jaxrot.simulate("buss4", problem, 1e-3, 1000, saveat=jaxrot.SaveAt(t0=False))   # final state only
    """

    t0: bool = True
    t1: bool = True
    ts: Any = None
    steps: bool | int = False
    dense: bool = False

    def __init__(self, t0=True, t1=True, ts=None, steps=False, dense=False, every=None):
        if every is not None:
            warnings.warn("SaveAt(every=k) is deprecated: use SaveAt(steps=k)", DeprecationWarning, stacklevel=2)
            if steps is not False:
                raise ValueError("SaveAt takes steps=..., not steps and every")
            steps = every
        self.t0, self.t1, self.ts, self.steps, self.dense = t0, t1, ts, steps, dense

    def __check_init__(self):
        for name in ("t0", "t1", "dense"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"SaveAt.{name} must be a bool, got {getattr(self, name)!r}")
        s = self.steps
        if not isinstance(s, bool) and (not isinstance(s, (int, np.integer)) or s < 1):
            raise ValueError(f"SaveAt.steps must be True, False or a positive int, got {s!r}")
        if self.ts is not None and self.every is not None:
            raise ValueError("SaveAt takes ts or steps, not both")
        if not (self.t1 or self.ts is not None or self.every is not None or self.dense):
            raise ValueError("SaveAt(t1=False) with neither ts, steps nor dense keeps nothing past t0")

    @property
    def every(self) -> int | None:
        """Steps between kept frames (``steps``), or None."""
        s = self.steps
        return None if s is False else 1 if s is True else int(s)

    @property
    def save_every(self) -> int | None:  # the older name of ``every``
        return self.every
