"""Kantorovich-safe sub-stepping of an implicit one-step rule (Roblox article).

For the implicit midpoint ``F(v) = v - I^-1 R(-v/2) l`` started at ``v0 = 0``, Kantorovich's
condition holds (Newton converges, iterates stay within ``|v| <= 2 sqrt 2``) when

    x = h |L| / J_min <= 2 sqrt 2 - 2 ~ 0.8284

so each frame step ``dt`` is split into sub-steps ``h = min(remaining, c J_min / |L|)`` with
``c = 0.8284`` (|L| re-read before every sub-step, so torques are allowed when the base takes
them). The sub-step count is reported in ``StepStats.substeps``.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from ..geometry import so3
from .stats import StepStats
from ._base import AbstractWrapper

KANTOROVICH_X = 2.0 * 2.0**0.5 - 2.0


class AdaptiveKantorovich(AbstractWrapper):
    """``base`` sub-stepped so every sub-step satisfies ``h |L| / J_min <= c`` (default 0.8284).

    Forward-mode and ``vmap`` work; reverse-mode gradients do not pass the data-dependent loop
    (use ``jax.jacfwd``). ``max_substeps`` bounds the loop; exceeding it marks the step failed.
    """

    c: float = KANTOROVICH_X
    max_substeps: int = 100000

    def __check_init__(self):
        if not self.c > 0:
            raise ValueError(f"the safe-step constant c must be positive, got {self.c}")

    def step(self, system, t, state, aux, dt):
        Jmin = jnp.min(system.body.J)

        def cond(c):
            _, _, _, remaining, k, _ = c
            return (remaining > 0) & (k < self.max_substeps)

        def body(c):
            s, a, tt, remaining, k, st = c
            L = so3.mv(s.R, s.Pi)
            safe = self.c * Jmin / jnp.maximum(jnp.linalg.norm(L), jnp.finfo(L.dtype).tiny)
            h = jnp.minimum(remaining, safe)
            # the last sub-step absorbs a round-off remainder instead of a near-zero extra step
            h = jnp.where(remaining - h <= 1e-12 * dt, remaining, h)
            s1, a1, st1 = self.base.step(system, tt, s, a, h)
            acc = StepStats(newton_iters=jnp.maximum(st.newton_iters, st1.newton_iters),
                            converged=st.converged & st1.converged, clamped=st.clamped + st1.clamped,
                            substeps=st.substeps + 1)
            return s1, a1, tt + h, remaining - h, k + 1, acc

        st0 = StepStats(newton_iters=jnp.asarray(0, jnp.int32), converged=jnp.asarray(True),
                        clamped=jnp.asarray(0, jnp.int32), substeps=jnp.asarray(0, jnp.int32))
        s, a, _, remaining, _, st = lax.while_loop(cond, body, (state, aux, t, dt, jnp.asarray(0), st0))
        st = StepStats(newton_iters=st.newton_iters, converged=st.converged & (remaining <= 0),
                       clamped=st.clamped, substeps=st.substeps)
        return s, a, st
