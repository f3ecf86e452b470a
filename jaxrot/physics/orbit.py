"""A rigid satellite on a circular orbit: the gravity-gradient torque and its test problem.

On a circular orbit of mean motion ``n`` (``n^2 = mu / r^3``) the Earth's field exerts on the body
the torque, in the body frame,

    tau_body = 3 n^2  c x (J c),        c = R^T c_world(t),

where ``c`` is the unit nadir direction (from the satellite to the Earth's centre) in body axes and
``J`` the principal moments. The nadir turns with the orbit: ``c_world(t) = cos(n t + phase) e_x +
sin(n t + phase) e_y`` (the orbit normal is ``e_z``). It is the torque of the potential

    V(t, R) = (3/2) n^2 c^T J c

(the leading term of the gravity gradient; the orbit is not perturbed by the attitude). ``V``
depends on time through ``c_world``: the body's energy is not conserved, the Jacobi integral of the
orbit frame is. A body whose principal axes are the orbit frame's (one along the nadir, one along
the orbit normal) turning at ``n`` about the normal feels no torque and stays so: a relative
equilibrium (stable for ``J_normal > J_along-track > J_nadir``, the Lagrange configuration).

Reference: P. C. Hughes, *Spacecraft Attitude Dynamics* (Wiley 1986), ch. 8; M. H. Kaplan, *Modern
Spacecraft Dynamics and Control* (1976), §5.2.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..geometry import so3
from ..geometry.body import RigidBody
from ..geometry.state import State
from .torques import AbstractTorque


class GravityGradientTorque(AbstractTorque):
    """The gravity-gradient torque on a body of principal moments ``J`` on a circular orbit of mean
    motion ``n`` (world frame: ``R @ (3 n^2 c x J c)``, ``c = R^T c_world(t)``); differentiable in
    ``J`` and ``n``."""

    J: jax.Array
    n: float | jax.Array = 1.0
    phase: float | jax.Array = 0.0

    def nadir(self, t, dtype) -> jax.Array:
        """The world-frame unit nadir direction at time ``t``."""
        a = jnp.asarray(self.n, dtype) * jnp.asarray(t, dtype) + jnp.asarray(self.phase, dtype)
        return jnp.stack([jnp.cos(a), jnp.sin(a), jnp.zeros_like(a)])

    def __call__(self, t, R, Pi):
        c = R.T @ self.nadir(t, R.dtype)
        J = jnp.asarray(self.J, R.dtype)
        return R @ (3.0 * jnp.asarray(self.n, R.dtype) ** 2 * jnp.cross(c, J * c))

    def potential(self, t, R):
        c = R.T @ self.nadir(t, R.dtype)
        return 1.5 * jnp.asarray(self.n, R.dtype) ** 2 * jnp.sum(jnp.asarray(self.J, R.dtype) * c * c)


def gravity_gradient_satellite(J=(3.0, 4.0, 5.0), n: float = 1.0, libration=(0.1, -0.05, 0.08),
                               rate=(0.02, 0.05, -0.03), t_end: float = 4 * np.pi):
    """A satellite librating about the Lagrange configuration (nadir along body x, orbit normal along
    body z, ``J = (3, 4, 5)``): initial attitude ``exp(hat(libration))`` away from the orbit frame,
    body rate ``n e_z + rate``; two orbits."""
    from .problems import Problem

    Jv = jnp.asarray(np.asarray(J, np.float64))
    body = RigidBody(Jv)
    R0 = so3.exp(jnp.asarray(np.asarray(libration, np.float64)))
    omega = jnp.asarray(np.array([0.0, 0.0, n]) + np.asarray(rate, np.float64))
    return Problem(body, GravityGradientTorque(Jv, n), State(R0, Jv * omega), t_end=float(t_end),
                   name="gravity_gradient",
                   description=f"satellite on a circular orbit, gravity gradient, J={tuple(J)}, n={n:g}, "
                               "librating about the orbit frame")
