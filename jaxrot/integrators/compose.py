"""Compositions: order 4, 6 and 8 from any symmetric second-order one-step method.

``Compose(base, scheme)`` takes the steps ``gamma_1 h, gamma_2 h, ..., gamma_s h`` of ``base``
(``sum gamma_i = 1``, the sequence symmetric), which raises a symmetric method of order 2 to the
scheme's order (Hairer, Lubich & Wanner, Geometric Numerical Integration, 2nd ed., section V.3).
Whatever the base conserves exactly (world momentum, |Pi|, energy) the composition conserves.
The stages run in a ``lax.scan`` over the coefficients: one compiled copy of the base step
whatever the number of stages. Cost: s base steps.

===========  ======  =====  =======================================================================
scheme       order   s      coefficients
===========  ======  =====  =======================================================================
triple4      4       3      Yoshida 1990 / Suzuki 1990 triple jump, 1/(2 - 2^(1/3))
suzuki4      4       5      Suzuki 1990, p = 1/(4 - 4^(1/3))
yoshida6     6       7      Yoshida 1990 (solution A; 26 digits from HLW V.3, eq. 3.11)
kahan_li6    6       9      Kahan & Li 1997 (s9odr6a; HLW V.3, eq. 3.12)
mclachlan8   8       15     McLachlan 1995 (s15odr8; HLW V.3, eq. 3.13)
kahan_li8    8       17     Kahan & Li 1997 (s17odr8a; HLW V.3, eq. 3.14)
===========  ======  =====  =======================================================================

Example::

    method = Compose(jaxrot.get("liemid_ea"), "kahan_li8")   # registered as liemid_ea_kl8
"""

from __future__ import annotations

import math
from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
from jax import lax

from .stats import StepStats
from ._base import AbstractWrapper


def _symmetric(half):
    """The full symmetric sequence from its first (s+1)/2 coefficients (the last one central)."""
    return tuple(half) + tuple(reversed(half[:-1]))


def _triple(p):
    g = 1.0 / (2.0 - 2.0 ** (1.0 / (p + 1)))
    return (g, 1.0 - 2.0 * g, g)


_P4 = 1.0 / (4.0 - 4.0 ** (1.0 / 3.0))

SCHEMES: dict[str, tuple[int, tuple[float, ...], str]] = {
    "triple4": (4, _triple(2), "Yoshida, Phys. Lett. A 150 (1990) 262; Suzuki, Phys. Lett. A 146 (1990) 319"),
    "suzuki4": (4, (_P4, _P4, 1.0 - 4.0 * _P4, _P4, _P4), "Suzuki, Phys. Lett. A 146 (1990) 319"),
    "yoshida6": (6, _symmetric((0.78451361047755726381949763, 0.23557321335935813368479318,
                                -1.17767998417887100694641568, 1.31518632068391121888424973)),
                 "Yoshida, Phys. Lett. A 150 (1990) 262"),
    "kahan_li6": (6, _symmetric((0.39216144400731413927925056, 0.33259913678935943859974864,
                                 -0.70624617255763935980996482, 0.08221359629355080023149045,
                                 0.79854399093482996339895035)),
                  "Kahan & Li, Math. Comp. 66 (1997) 1089"),
    "mclachlan8": (8, _symmetric((0.74167036435061295344822780, -0.40910082580003159399730010,
                                  0.19075471029623837995387626, -0.57386247111608226665638773,
                                  0.29906418130365592384446354, 0.33462491824529818378495798,
                                  0.31529309239676659663205666, -0.79688793935291635401978884)),
                   "McLachlan, SIAM J. Sci. Comput. 16 (1995) 151"),
    "kahan_li8": (8, _symmetric((0.13020248308889008087881763, 0.56116298177510838456196441,
                                 -0.38947496264484728640807860, 0.15884190655515560089621075,
                                 -0.39590389413323757733623154, 0.18453964097831570709183254,
                                 0.25837438768632204729397911, 0.29501172360931029887096624,
                                 -0.60550853383003451169892108)),
                  "Kahan & Li, Math. Comp. 66 (1997) 1089"),
}


class Compose(AbstractWrapper):
    """``base`` stepped by ``gamma_i dt`` for the scheme's coefficients (see the module table)."""

    scheme: str = eqx.field(static=True, default="triple4")

    symmetric: ClassVar[bool] = True

    def __check_init__(self):
        if self.scheme not in SCHEMES:
            raise ValueError(f"unknown composition scheme {self.scheme!r}; known: {', '.join(SCHEMES)}")
        if not self.base.symmetric or self.base.order != 2:
            raise ValueError(f"Compose needs a symmetric second-order base method; {type(self.base).__name__} "
                             f"has order {self.base.order} and symmetric={self.base.symmetric}")

    order = property(lambda self: SCHEMES[self.scheme][0])
    # where the base is exact without torque (exact_split) the composition is too
    free_order = property(lambda self: self.base.free_order if self.base.free_order == math.inf else None)
    torque_evals = property(lambda self: f"{len(SCHEMES[self.scheme][1])} x ({self.base.torque_evals})")
    reference = property(lambda self: f"{self.base.reference}; composition: {SCHEMES[self.scheme][2]}")
    family = property(lambda self: "high-order")

    def step(self, system, t, state, aux, dt):
        gammas = jnp.asarray(SCHEMES[self.scheme][1], dtype=state.Pi.dtype)
        offsets = jnp.concatenate([jnp.zeros((1,), gammas.dtype), jnp.cumsum(gammas)[:-1]])

        def stage(carry, go):
            state, aux, it, ok, sub = carry
            g, off = go
            state, aux, st = self.base.step(system, t + off * dt, state, aux, g * dt)
            return (state, aux, it + st.newton_iters, ok & st.converged, sub + st.substeps), None

        zero = jnp.asarray(0, jnp.int32)
        (state, aux, it, ok, sub), _ = lax.scan(stage, (state, aux, zero, jnp.asarray(True), zero),
                                                (gammas, offsets))
        return state, aux, StepStats(newton_iters=it, converged=ok, clamped=zero, substeps=sub)

