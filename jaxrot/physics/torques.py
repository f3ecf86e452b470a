"""Torque models. Torques are **spatial** (world frame): ``t(time, R, Pi)``; body torque is ``R.T @ t``.

A model may also give its potential ``V(time, R)`` (for the Hamiltonian) and how the world momentum
advances over a step (``advance_momentum``): by default a Taylor polynomial along the exact flow, but
a prescribed momentum ``L(t)`` (Buss's setting) is advanced exactly.
"""

from __future__ import annotations

import abc
from typing import Callable, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp

from ..geometry import so3

_EZ = (0.0, 0.0, 1.0)


class AbstractTorque(eqx.Module):
    """Interface: ``__call__(time, R, Pi) -> world torque (3,)``."""

    #: True when the torque is identically zero (methods skip the Taylor machinery).
    is_free: ClassVar[bool] = False
    #: True when the torque depends on time only (then world momentum is known in closed form).
    time_only: ClassVar[bool] = False

    @abc.abstractmethod
    def __call__(self, t, R, Pi):
        """World-frame torque at time ``t``, attitude ``R``, body momentum ``Pi``."""

    def potential(self, t, R):
        """Potential energy ``V(t, R)``, or ``None`` for a non-conservative model."""
        return None

    def advance_momentum(self, t, h, L, L_derivs):
        """World momentum at ``t + h`` from ``L`` and its derivatives ``[L', L'', ...]`` at ``t``.

        The default is the Taylor polynomial ``L + sum_k h^k/k! L^(k)``, exact when the torque is
        zero; a method of order p passes p derivatives so that the momentum is advanced to order p.
        """
        out, fact = L, 1.0
        for k, d in enumerate(L_derivs, start=1):
            fact = fact * h / k
            out = out + fact * d
        return out


class FreeTorque(AbstractTorque):
    """No torque: world momentum is constant."""

    is_free: ClassVar[bool] = True

    def __call__(self, t, R, Pi):
        return jnp.zeros_like(Pi)

    def potential(self, t, R):
        return jnp.zeros((), R.dtype)


class GravityTorque(AbstractTorque):
    """Heavy top: ``t = -mgl (R c) x up``, potential ``V = mgl up . (R c)``.

    ``c`` is the body-frame unit vector from the fixed point to the centre of mass and ``up`` is the
    world unit vector against gravity. Krysl's tops use ``mgl = 20``, ``c = up = e_z`` (Krysl 2005, section 6;
    only ``mgl = 20`` makes the printed torque conserve the printed Hamiltonian).
    """

    mgl: float | jax.Array = 20.0
    com: tuple = _EZ
    up: tuple = _EZ

    def __call__(self, t, R, Pi):
        chi = R @ jnp.asarray(self.com, R.dtype)
        return -self.mgl * jnp.cross(chi, jnp.asarray(self.up, R.dtype))

    def potential(self, t, R):
        chi = R @ jnp.asarray(self.com, R.dtype)
        return self.mgl * jnp.dot(jnp.asarray(self.up, R.dtype), chi)


class CoulombWallTorque(AbstractTorque):
    """Krysl's problem (d): Coulomb potential with a soft wall in ``c = 1.1 + chi_z``, ``chi = R e_3``.

    ``t = f(c) (e_z x chi)`` with ``f = V'(c)``. ``sign = +1`` is the torque as printed in the paper,
    ``V = 1/c - 0.001 c^-10`` (repulsive Coulomb, attractive wall); ``sign = -1`` is the physically
    described model ``V = -1/c + 0.001 c^-10`` (attractive well, repulsive wall). See docs/problems.md (Krysl's problem d).
    """

    sign: float = 1.0

    def _c(self, R):
        return 1.1 + R[2, 2]

    def __call__(self, t, R, Pi):
        c = self._c(R)
        f = self.sign * (-(c**-2) + 0.01 * c**-11)
        chi = R[:, 2]
        return f * jnp.stack([-chi[1], chi[0], jnp.zeros_like(chi[0])])

    def potential(self, t, R):
        c = self._c(R)
        return self.sign * (1.0 / c - 0.001 * c**-10)


class PotentialTorque(AbstractTorque):
    """Torque of a potential ``V(t, R)``: ``t = -d/de V(t, exp(hat e) R) at e = 0`` by ``jax.grad``."""

    V: Callable = eqx.field(static=True)

    def __call__(self, t, R, Pi):
        def v_of(eps):
            return self.V(t, so3.exp(eps) @ R)

        return -jax.grad(v_of)(jnp.zeros(3, R.dtype))

    def potential(self, t, R):
        return self.V(t, R)


class AbstractPrescribedMomentum(AbstractTorque):
    """Buss's setting: the world momentum ``L(t)`` is prescribed; the torque is ``L'(t)``."""

    time_only: ClassVar[bool] = True

    @abc.abstractmethod
    def momentum(self, t):
        """World momentum ``L(t)``."""

    def __call__(self, t, R, Pi):
        t = jnp.asarray(t, Pi.dtype)
        return jax.jvp(self.momentum, (t,), (jnp.ones_like(t),))[1]

    def advance_momentum(self, t, h, L, L_derivs):
        return self.momentum(t + h)


class PolynomialMomentum(AbstractPrescribedMomentum):
    """``L(t) = sum_k t^k / k! * coeffs[k]`` (coeffs of shape (K, 3)) uses a cubic."""

    coeffs: jax.Array

    def momentum(self, t):
        out, fact = jnp.zeros_like(self.coeffs[0]), 1.0
        for k in range(self.coeffs.shape[0]):
            out = out + fact * self.coeffs[k]
            fact = fact * t / (k + 1)
        return out


class PrescribedMomentum(AbstractPrescribedMomentum):
    """``L(t)`` given as any JAX-traceable function of time."""

    fn: Callable = eqx.field(static=True)

    def momentum(self, t):
        return self.fn(t)


def body_torque(problem, t, R, Pi):
    """The problem's torque in the body frame, ``R^T t(time, R, Pi)``."""
    if getattr(problem.torque, "is_free", False):
        return jnp.zeros_like(Pi)  # not R^T 0: XLA keeps that product (a transpose and a dot per call)
    return so3.mtv(R, problem.torque(t, R, Pi))
