"""The state ``(R, Pi)`` of one body."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp


class State(eqx.Module):
    """Attitude ``R`` (body -> world, 3x3) and **body** angular momentum ``Pi = J * Omega``.

    World momentum is ``R @ Pi``; world angular velocity ``R @ (Pi / J)``.
    """

    R: jax.Array
    Pi: jax.Array

    @property
    def L(self) -> jax.Array:
        """World angular momentum ``R @ Pi``."""
        return jnp.einsum("...ij,...j->...i", self.R, self.Pi)
