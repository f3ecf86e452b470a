"""Re-orthonormalisation after each step of a method that leaves SO(3) (a wrapper, not a flag)."""

from __future__ import annotations

from typing import ClassVar

from ..geometry import so3
from ..geometry.state import State
from ._base import AbstractWrapper


class Reorthonormalize(AbstractWrapper):
    """``base`` followed by ``R <- nearest_rotation(R)`` (SVD polar factor, det = +1).

    The body momentum is re-expressed so the world momentum ``R Pi`` of the base step is kept:
    ``Pi <- R_new^T R_old Pi``. Projection keeps the base method's order.
    """

    on_so3: ClassVar[bool] = True

    def step(self, system, t, state, aux, dt):
        new, aux, st = self.base.step(system, t, state, aux, dt)
        R1 = so3.nearest_rotation(new.R)
        Pi1 = so3.mtv(R1, so3.mv(new.R, new.Pi))
        return State(R1, Pi1), aux, st
