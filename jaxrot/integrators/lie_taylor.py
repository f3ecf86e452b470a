"""Lie-group Taylor (Magnus / dexpinv) methods of order K = 1...5 (Buss's talk, Part II).

For ``y' = W(t) y`` with ``W_k = W^(k)(0)`` (here ``W = hat(omega)``, world frame), ``y(h) =
exp(h Z(h)) y(0)`` with ``Z(h) = sum_k h^k/(k+1)! Y_k`` and (right-nested brackets,
``[a,b,c] = [a,[b,c]]``, ``[u,v] = u x v``):

    Y0 = W0;  Y1 = W1;  Y2 = W2 + 1/2 [W1,W0];  Y3 = W3 + [W2,W0]
    Y4 = W4 + 3/2 [W3,W0] + [W2,W1] + 1/2 [W1,W1,W0] - 1/6 [W0,W2,W0] - 1/6 [W0,W0,W1,W0]
    Y5 = W5 + 2 [W4,W0] + 5/2 [W3,W1] + 2 [W2,W1,W0] + 1/2 [W1,W2,W0]
            - 1/2 [W0,W3,W0] - 1/2 [W0,W0,W2,W0] - [W0,W1,W1,W0]

The order-K method keeps ``Y_0 ... Y_{K-1}`` (local error h^(K+1)); K = 3, 4 are Buss's true 3rd
and 4th order updates. ``omega^(k)`` comes from Taylor-mode AD along the exact flow, the momentum
is advanced with K derivatives. ``magnus_z`` works in any Lie algebra given its bracket.
"""

from __future__ import annotations

from typing import Callable, ClassVar


import jax.numpy as jnp

from ..geometry import so3
from ..physics.flow import momentum_derivatives, omega_derivatives
from .stats import StepStats
from ._base import AbstractIntegrator
from .world_update import initial_momentum, world_increment_step

_FACT = [1, 1, 2, 6, 24, 120, 720]


def magnus_y(W: list, bracket: Callable) -> list:
    """``[Y_0, ..., Y_{n-1}]`` from ``W = [W_0, ..., W_{n-1}]`` (n <= 6)."""
    b = bracket
    n = len(W)
    Y = [W[0]]
    if n > 1:
        Y.append(W[1])
    if n > 2:
        Y.append(W[2] + 0.5 * b(W[1], W[0]))
    if n > 3:
        Y.append(W[3] + b(W[2], W[0]))
    if n > 4:
        W0, W1, W2, W3, W4 = W[:5]
        Y.append(W4 + 1.5 * b(W3, W0) + b(W2, W1) + 0.5 * b(W1, b(W1, W0)) - b(W0, b(W2, W0)) / 6
                 - b(W0, b(W0, b(W1, W0))) / 6)
    if n > 5:
        W0, W1, W2, W3, W4, W5 = W[:6]
        Y.append(W5 + 2 * b(W4, W0) + 2.5 * b(W3, W1) + 2 * b(W2, b(W1, W0)) + 0.5 * b(W1, b(W2, W0))
                 - 0.5 * b(W0, b(W3, W0)) - 0.5 * b(W0, b(W0, b(W2, W0))) - b(W0, b(W1, b(W1, W0))))
    if n > 6:
        raise ValueError("Lie-Taylor coefficients are implemented up to Y_5")
    return Y


def magnus_z(W: list, h, bracket: Callable = jnp.cross):
    """``Z(h) = sum_{k<len(W)} h^k/(k+1)! Y_k`` (Buss's net rate ``omega_bar``)."""
    Y = magnus_y(W, bracket)
    return sum((h**k / _FACT[k + 1]) * y for k, y in enumerate(Y))


class LieTaylor(AbstractIntegrator):
    """Lie-Taylor method of order ``K`` (1...5), world frame: ``R <- exp(h Z(h)) R``."""

    K: int = 3
    conserves: ClassVar[tuple[str, ...]] = ("L",)
    reference: ClassVar[str] = "Buss, talk (2011) Part II; Magnus/dexpinv series"
    family: ClassVar[str] = "lie-taylor"

    @property
    def order(self):
        return self.K

    @property
    def torque_evals(self):
        return f"1 + Taylor({self.K})"

    def __check_init__(self):
        if self.K not in (1, 2, 3, 4, 5):
            raise ValueError(f"Lie-Taylor order K must be 1...5, got {self.K}")

    def init(self, system, t0, state0, dt):
        return initial_momentum(state0)

    def step(self, system, t, state, aux, dt):
        J, torque = system.body.J, system.torque
        R, L = state.R, aux
        W = omega_derivatives(J, torque, t, R, L, self.K - 1)
        L1 = torque.advance_momentum(t, dt, L, momentum_derivatives(J, torque, t, R, L, self.K))
        return world_increment_step(R, L1, dt * magnus_z(W, dt)), L1, StepStats.explicit()
