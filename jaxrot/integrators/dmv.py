"""DMV: the discrete Moser-Veselov map for the free body, and Hairer-Vilmart's high-order versions.

With ``D = diag(d)``, ``d_i = (J_j + J_k - J_i)/2`` (so ``hat(J Om) = hat(Om) D + D hat(Om)``):

    solve dt hat(Pi_n) = Q D - D Q^T  for Q in SO(3);   R_{n+1} = R_n Q;   Pi_{n+1} = Q^T Pi_n

Solved in the unit quaternion ``(q0, q)``: ``dt Pi_n = 2 q0 (J o q) + 2 (D q) x q`` with
``q0 = sqrt(1 - |q|^2)``, Newton from ``q = dt Pi / (2 J)``. World momentum, |Pi| and energy are
exact; order 2.

``dmv4`` ... ``dmv10`` (Hairer & Vilmart, J. Phys. A 39 (2006) 13225) take the same step with
*modified* moments of inertia, chosen so that the map is the exact flow of the original body up to
``O(h^p)``:

    1/J~_i = S(h^2 H, h^2 N) / J_i + D(h^2 H, h^2 N),   H = sum Pi_i^2/(2 J_i),  N = |Pi|^2/2,

``S = 1 + S_3 + S_5 + ...`` and ``D = D_3 + D_5 + ...`` polynomials whose term ``S_{2k+1}``/
``D_{2k+1}`` is homogeneous of degree k in (N, H). Since N and H are invariants of the map, the
modified body is fixed for a whole trajectory and the order-p method keeps every invariant of
``dmv``. The coefficients are transcribed from the authors' Fortran ``DMV10.f`` (version of
29 Aug 2006, corrected 28 Dec 2007); tests/test_dmv.py checks against that code's output.
"""

from __future__ import annotations

from typing import ClassVar

import jax.numpy as jnp

from ..geometry import so3
from .newton import Newton
from ..geometry.state import State
from .stats import StepStats
from ._base import AbstractIntegrator, require_free


def _Q(q):
    q0 = jnp.sqrt(1.0 - jnp.dot(q, q))
    return (q0 * q0 - jnp.dot(q, q)) * jnp.eye(3, dtype=q.dtype) + 2 * jnp.outer(q, q) + 2 * q0 * so3.hat(q)


def _sym(f, J):
    """sum over the cyclic permutations (i, j, k) of f(J_i, J_j, J_k)."""
    a, b, c = J[0], J[1], J[2]
    return f(a, b, c) + f(b, c, a) + f(c, a, b)


def _modifier_terms(J, order: int):
    """[(S_3, D_3) coefficient lists, (S_5, D_5), ...] up to the order: S_{2k+1} = sum_l s_l N^(k-l) H^l."""
    det = J[0] * J[1] * J[2]
    s1, s2, s3, s4 = (jnp.sum(J ** p) for p in (1, 2, 3, 4))
    i1, i2, i3, i4 = (jnp.sum(J ** -p) for p in (1, 2, 3, 4))
    si = _sym(lambda a, b, c: (a + b) / c, J)
    si12 = _sym(lambda a, b, c: (a + b) / c ** 2, J)
    si21 = _sym(lambda a, b, c: (a * a + b * b) / c, J)
    si13 = _sym(lambda a, b, c: (a + b) / c ** 3, J)
    si31 = _sym(lambda a, b, c: (a ** 3 + b ** 3) / c, J)
    si22 = _sym(lambda a, b, c: (a * a + b * b) / c ** 2, J)
    d2, d3, d4 = det ** 2, det ** 3, det ** 4
    terms = [(
        [s1 / (6 * det), -i1 / 3],
        [-1 / (3 * det), s1 / (6 * det)],
    ), (
        [(s2 / det - i1) / (30 * det), (1 - si) / (30 * det), (3 * s1 / det + 2 * i2) / 60],
        [-s1 / d2 / 60, i1 / det / 10 - s2 / d2 / 60, -(9 + si) / det / 60],
    ), (
        [(4 * det + 17 * s3 - 15 * det * si) / (2520 * d3),
         (9 * s1 + 10 * det * i2 - 6 * si21) / (420 * d2),
         ((6 * si12 - 100 * i1) * det + 53 * s2) / (2520 * d2),
         (15 - det * i3 - 2 * si) / (630 * det)],
        [(34 * det * i1 - 19 * s2) / (2520 * d3),
         (s3 + 2 * det * si - 85 * det) / (1260 * d3),
         (47 * s1 + 13 * si21 - 38 * det * i2) / (2520 * d2),
         (9 * det * i1 + det * si12 - 11 * s2) / (1260 * d2)],
    ), (
        [(62 * s4 - 94 * det * si21 + 66 * d2 * i2 + 81 * det * s1) / (45360 * d4),
         (-77 * si31 + 75 * det * si12 + 214 * s2 - 240 * det * i1) / (22680 * d3),
         (26 * det * si22 + 55 * s3 + 204 * det - 50 * d2 * i3 - 59 * det * si) / (7560 * d3),
         (137 * det * i2 - det * si13 + 3 * s1 - 69 * si21) / (11340 * d2),
         (2 * d2 * i4 + 5 * det * si12 - 171 * det * i1 + 159 * s2) / (45360 * d2)],
        [(60 * si * det - 61 * s3 - 247 * det) / (45360 * d4),
         (54 * det * s1 - s4 + 218 * det * si21 - 426 * d2 * i2) / (45360 * d4),
         (125 * det * i1 - 5 * si31 - 130 * s2 + 4 * det * si12) / (7560 * d3),
         (67 * s3 - 735 * det - 15 * det * si22 + 87 * det * si + 34 * d2 * i3) / (22680 * d3),
         (165 * s1 - det * si13 - 9 * si21 - 145 * det * i2) / (45360 * d2)],
    )]
    return terms[: order // 2 - 1]


def modified_inverse_inertia(J, Pi, dt, order: int):
    """Hairer-Vilmart's modified 1/J~ for the order-``order`` DMV (order 2: 1/J)."""
    h2 = dt * dt
    H = 0.5 * h2 * jnp.sum(Pi * Pi / J)
    N = 0.5 * h2 * jnp.dot(Pi, Pi)
    S, D = jnp.ones_like(H), jnp.zeros_like(H)
    for k, (s, d) in enumerate(_modifier_terms(J, order), start=1):
        mono = [N ** (k - l) * H ** l for l in range(k + 1)]
        S = S + sum(c * m for c, m in zip(s, mono))
        D = D + sum(c * m for c, m in zip(d, mono))
    return S / J + D


class DMV(AbstractIntegrator):
    order: ClassVar[int] = 2
    symmetric: ClassVar[bool] = True
    conserves: ClassVar[tuple[str, ...]] = ("L", "|Pi|", "E")
    implicit: ClassVar[bool] = True
    torque: ClassVar[bool] = False
    torque_evals: ClassVar[str] = "0 (free only)"
    reference: ClassVar[str] = "Moser-Veselov 1991"
    family: ClassVar[str] = "comparison"
    newton: Newton = Newton()

    def step(self, system, t, state, aux, dt):
        require_free(system, f"dmv{self.order if self.order > 2 else ''}")
        Pi = state.Pi
        J = 1.0 / modified_inverse_inertia(system.body.J, Pi, dt, self.order)
        d = 0.5 * (jnp.sum(J) - 2 * J)

        def residual(q):
            q0 = jnp.sqrt(1.0 - jnp.dot(q, q))
            return 2 * q0 * (J * q) + 2 * jnp.cross(d * q, q) - dt * Pi

        q, st = self.newton(residual, dt * Pi / (2 * J))
        Q = _Q(q)
        return State(state.R @ Q, Q.T @ Pi), aux, StepStats.from_solves(st)


class DMV4(DMV):
    order: ClassVar[int] = 4
    reference: ClassVar[str] = "Hairer-Vilmart 2006"
    family: ClassVar[str] = "high-order"


class DMV6(DMV4):
    order: ClassVar[int] = 6


class DMV8(DMV4):
    order: ClassVar[int] = 8


class DMV10(DMV4):
    order: ClassVar[int] = 10
