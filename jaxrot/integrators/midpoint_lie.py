"""Krysl's explicit momentum-conserving midpoint-Lie family (IJNME 63 (2005) 2171-2193).

Body frame throughout: ``Pi = J Omega``, body torque ``T = R^T t``, ``E(x) = exp(hat x)``,
``R_n = R_{n-1} E(Psi)``. Every variant solves the core implicit equation

    Psi = tau J^-1 E(-Psi/2) P                                              (*)

by Newton (:mod:`jaxrot.integrators.newton`) from ``Psi0 = tau J^-1 P``. Without torque all variants are
LIEMID: world momentum ``R Pi`` and ``|Pi|`` exact, energy bounded, order 2.

=========== ============================================================================== =====
LIEMID      (*) with P = P0;  Pi_n = E(-Psi) P0  (torque-free only)                         2
LIEMID[I]   Psi = dt J^-1 (E(-Psi/2) P0 + dt/2 T_half(Psi)), T_half at R E(Psi/2), t+dt/2;  2
            Pi_n = E(-Psi) P0 + dt E(-Psi/2) T_half
LIEMID[E]   Psi = dt J^-1 E(-Psi/2)(P0 + dt/2 T_{n-1});  Pi_n = E(-Psi)(P0 + dt T_{n-1})      1
LIEMID[E1]  (*) with P0; R_n; Pi_n = E(-Psi) P0 + dt T_n           (kick at the end)         1
LIEMID[E2]  P = P0 + dt T_{n-1}; (*) with P;  Pi_n = E(-Psi) P      (kick at the start)       1
LIEMID[EA]  half E2 then half E1: P = P0 + dt/2 T_{n-1}; Psi1 from (*) (tau = dt/2);          2
            P <- E(-Psi1) P; Psi2 from (*) (tau = dt/2); R_n = R E(Psi1) E(Psi2);
            Pi_n = E(-Psi2) P + dt/2 T_n; T_n cached for the next step (one torque eval/step)
=========== ============================================================================== =====
"""

from __future__ import annotations

from typing import ClassVar

import jax.numpy as jnp

from ..geometry import so3
from .newton import Newton
from ..geometry.state import State
from .stats import StepStats
from ..physics.torques import body_torque
from ._base import AbstractIntegrator, require_free


def solve_midpoint(J, tau, P, newton: Newton):
    """Krysl's core equation ``Psi = tau J^-1 E(-Psi/2) P``; returns ``(Psi, stats)``.

    Starts from ``tau J^-1 (P - (w/2) x P)``, ``w = tau J^-1 P`` (``E(-w/2) P`` to first order: an
    ``O(tau^3)`` guess); with ``Newton(chord=m)`` the chord Jacobian is taken at ``Psi = 0``.
    """
    def residual(psi):
        return psi - tau * so3.rotate(-0.5 * psi, P) / J

    w = tau * P / J
    guess = tau * (P - 0.5 * jnp.cross(w, P)) / J
    return newton(residual, guess, jnp.zeros_like(guess))


class _AbstractLieMid(AbstractIntegrator):
    conserves: ClassVar[tuple[str, ...]] = ("L", "|Pi|")
    implicit: ClassVar[bool] = True
    reference: ClassVar[str] = "Krysl, IJNME 63 (2005) 2171-2193"
    family: ClassVar[str] = "midpoint-lie"
    newton: Newton = Newton()

# LIEMID and LIEMID[EA] (the throughput methods, and EA's compositions) solve by two chord
# iterations first (several times faster per body-step, `jaxrot bench throughput`); the other
# variants keep plain Newton and its smaller programs.
_CHORD = Newton(chord=2)


class LieMid(_AbstractLieMid):
    """LIEMID: Krysl's midpoint-Lie algorithm for free motion (= Roblox's implicit midpoint)."""

    order: ClassVar[int] = 2
    symmetric: ClassVar[bool] = True
    torque: ClassVar[bool] = False
    torque_evals: ClassVar[str] = "0 (free only)"
    newton: Newton = _CHORD

    def step(self, system, t, state, aux, dt):
        require_free(system, "liemid")
        psi, st = solve_midpoint(system.body.J, dt, state.Pi, self.newton)
        return State(so3.mm(state.R, so3.exp(psi)), so3.rotate(-psi, state.Pi)), aux, StepStats.from_solves(st)


class LieMidI(_AbstractLieMid):
    """LIEMID[I]: implicit midpoint-Lie with the torque at the midpoint attitude."""

    order: ClassVar[int] = 2
    torque_evals: ClassVar[str] = "1 per Newton iteration"

    def step(self, system, t, state, aux, dt):
        J, R, P0 = system.body.J, state.R, state.Pi
        th = t + 0.5 * dt

        def t_half(psi):
            return body_torque(system, th, R @ so3.exp(0.5 * psi), so3.rotate(-0.5 * psi, P0))

        def residual(psi):
            return psi - dt * (so3.rotate(-0.5 * psi, P0) + 0.5 * dt * t_half(psi)) / J

        psi, st = self.newton(residual, dt * P0 / J)
        Pi = so3.rotate(-psi, P0) + dt * so3.rotate(-0.5 * psi, t_half(psi))
        return State(R @ so3.exp(psi), Pi), aux, StepStats.from_solves(st)


class LieMidE(_AbstractLieMid):
    """LIEMID[E]: explicit torque at the start in both halves (Krysl's "no good" variant)."""

    order: ClassVar[int] = 1
    free_order: ClassVar[int] = 2

    def step(self, system, t, state, aux, dt):
        J, R, P0 = system.body.J, state.R, state.Pi
        T0 = body_torque(system, t, R, P0)
        psi, st = solve_midpoint(J, dt, P0 + 0.5 * dt * T0, self.newton)
        return State(R @ so3.exp(psi), so3.rotate(-psi, P0 + dt * T0)), aux, StepStats.from_solves(st)


class LieMidE1(_AbstractLieMid):
    """LIEMID[E1]: free midpoint step, then the torque kick at the end of the step."""

    order: ClassVar[int] = 1
    free_order: ClassVar[int] = 2

    def step(self, system, t, state, aux, dt):
        J, R, P0 = system.body.J, state.R, state.Pi
        psi, st = solve_midpoint(J, dt, P0, self.newton)
        R1 = R @ so3.exp(psi)
        Pi_free = so3.rotate(-psi, P0)
        return State(R1, Pi_free + dt * body_torque(system, t + dt, R1, Pi_free)), aux, StepStats.from_solves(st)


class LieMidE2(_AbstractLieMid):
    """LIEMID[E2]: the torque kick at the start of the step, then a free midpoint step."""

    order: ClassVar[int] = 1
    free_order: ClassVar[int] = 2

    def step(self, system, t, state, aux, dt):
        J, R, P0 = system.body.J, state.R, state.Pi
        P = P0 + dt * body_torque(system, t, R, P0)
        psi, st = solve_midpoint(J, dt, P, self.newton)
        return State(R @ so3.exp(psi), so3.rotate(-psi, P)), aux, StepStats.from_solves(st)


class LieMidEA(_AbstractLieMid):
    """LIEMID[EA]: half E2 + half E1, symmetric, one torque evaluation per step (cached)."""

    order: ClassVar[int] = 2
    symmetric: ClassVar[bool] = True
    torque_evals: ClassVar[str] = "1 (cached)"
    newton: Newton = _CHORD

    def init(self, system, t0, state0, dt):
        return body_torque(system, t0, state0.R, state0.Pi)

    def step(self, system, t, state, aux, dt):
        J, R = system.body.J, state.R
        h = 0.5 * dt
        P = state.Pi + h * aux
        psi1, s1 = solve_midpoint(J, h, P, self.newton)
        P = so3.rotate(-psi1, P)
        psi2, s2 = solve_midpoint(J, h, P, self.newton)
        R1 = so3.mm(so3.mm(R, so3.exp(psi1)), so3.exp(psi2))
        P = so3.rotate(-psi2, P)
        T1 = body_torque(system, t + dt, R1, P)
        return State(R1, P + h * T1), T1, StepStats.from_solves(s1, s2)
