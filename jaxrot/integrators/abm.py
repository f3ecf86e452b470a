"""Adams-Bashforth-Moulton predictor-corrector of order 4 on ``(R, Pi)`` (Buss's baseline).

PECE with the 4-step Adams-Bashforth predictor and the 3-step Adams-Moulton corrector:

    y* = y_n + h/24 (55 f_n - 59 f_{n-1} + 37 f_{n-2} - 9 f_{n-3})
    y_{n+1} = y_n + h/24 (9 f(y*) + 19 f_n - 5 f_{n-1} + f_{n-2})

The first three steps are RK4 (start-up). Order 4, two evaluations of the vector field per step;
the history ``f_{n-1}, f_{n-2}, f_{n-3}`` is the carried memory, so a trajectory must be advanced
with a fixed step. Like RK4 it leaves SO(3); the registered ``abm`` is ``Reorthonormalize(ABM())``
(Buss does not say how he kept R on SO(3)).
"""

from __future__ import annotations

from typing import ClassVar

import jax.numpy as jnp
from jax import lax

from ..physics.flow import body_vector_field, pack_body, unpack_body
from ..geometry.state import State
from .stats import StepStats
from ._base import AbstractIntegrator
from .rk4 import rk4_step


class ABM(AbstractIntegrator):
    """4th-order Adams-Bashforth-Moulton PECE with RK4 start-up (no projection)."""

    order: ClassVar[int] = 4
    on_so3: ClassVar[bool] = False
    torque_evals: ClassVar[str] = "2"
    reference: ClassVar[str] = "Buss (2000) comparison baselines"
    family: ClassVar[str] = "baseline"

    def init(self, system, t0, state0, dt):
        z = jnp.zeros(12, state0.Pi.dtype)
        return (z, z, z, jnp.asarray(0, jnp.int32))  # f_{n-1}, f_{n-2}, f_{n-3}, steps done

    def step(self, system, t, state, aux, dt):
        f = body_vector_field(system)
        fm1, fm2, fm3, n = aux
        y = pack_body(state.R, state.Pi)
        fn = f(t, y)

        def startup(_):
            return rk4_step(f, t, y, dt)

        def pece(_):
            yp = y + (dt / 24.0) * (55.0 * fn - 59.0 * fm1 + 37.0 * fm2 - 9.0 * fm3)
            return y + (dt / 24.0) * (9.0 * f(t + dt, yp) + 19.0 * fn - 5.0 * fm1 + fm2)

        y1 = lax.cond(n < 3, startup, pece, None)
        return State(*unpack_body(y1)), (fn, fm1, fm2, n + 1), StepStats.explicit()
