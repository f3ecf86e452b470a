"""Closed-form facts of the free rigid body: the complete elliptic integral K(m) and the period.

Euler's equations without torque are solved by Jacobi elliptic functions (Landau & Lifshitz,
Mechanics, section 37). With the principal moments sorted ``I1 < I2 < I3``, ``|Pi|^2 = L^2`` and
``2E = sum Pi^2 / J``, for ``L^2 > 2E I2`` (rotation about the I3 side of the separatrix)

    Pi(t) is periodic with period  T = 4 K(m) sqrt(I1 I2 I3 / ((I3 - I2)(L^2 - 2E I1))),
    m = k^2 = (I2 - I1)(2E I3 - L^2) / ((I3 - I2)(L^2 - 2E I1)),

and the same with I1 and I3 exchanged for ``L^2 < 2E I2``. The intermediate component changes sign
every half period: a body spun near its intermediate axis flips (the Dzhanibekov effect) every
``T/2``. ``K(m)`` is computed by the arithmetic-geometric mean, ``K = pi / (2 AGM(1, sqrt(1 - m)))``,
which converges quadratically, also as ``m -> 1`` (the separatrix, where ``K ~ log(4/sqrt(1-m))``).
All functions are jit-able and differentiable.

The full exact flow (Pi(t) by Jacobi elliptic functions and R(t) by the elliptic integral of the
third kind, Celledoni, Fasso, Safstrom & Zanna 2008) is not implemented yet.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

_AGM_ITERS = 40


def ellipk(m):
    """Complete elliptic integral of the first kind ``K(m) = int_0^{pi/2} (1 - m sin^2)^{-1/2}``, ``m < 1``."""
    m = jnp.asarray(m)
    a, b = jnp.ones_like(m), jnp.sqrt(1.0 - m)

    def body(_, ab):
        a, b = ab
        return 0.5 * (a + b), jnp.sqrt(a * b)

    a, b = lax.fori_loop(0, _AGM_ITERS, body, (a, b))
    return jnp.pi / (a + b)


def free_body_period(J, Pi):
    """Period of the body momentum ``Pi(t)`` of a torque-free body with distinct moments ``J``.

    Returns ``(T, m)``: the period and the elliptic parameter. On the separatrix ``T`` is infinite.
    """
    J, Pi = jnp.asarray(J), jnp.asarray(Pi)
    I1, I2, I3 = jnp.sort(J)
    L2 = jnp.sum(Pi * Pi)
    E2 = jnp.sum(Pi * Pi / J)
    upper = L2 > E2 * I2  # closer to the I3 axis
    a, c = jnp.where(upper, I1, I3), jnp.where(upper, I3, I1)
    # for the upper case (a, c) = (I1, I3); for the lower the roles swap, and every factor below
    # changes sign in pairs, so one formula with absolute values serves both
    m = jnp.abs((I2 - a) * (E2 * c - L2)) / jnp.abs((c - I2) * (L2 - E2 * a))
    T = 4.0 * ellipk(m) * jnp.sqrt(I1 * I2 * I3 / jnp.abs((c - I2) * (L2 - E2 * a)))
    return T, m
