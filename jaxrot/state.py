"""State ``(R, Pi)`` of one body, per-step statistics, and trajectories."""

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


class StepStats(eqx.Module):
    """What one step reports: Newton iterations, convergence, EP clamping and sub-steps.

    In a :class:`Trajectory` the stats are aggregated per saved frame: ``newton_iters`` is the
    maximum, ``converged`` is all, ``clamped`` counts clamped steps and ``substeps`` sums.
    """

    newton_iters: jax.Array
    converged: jax.Array
    clamped: jax.Array
    substeps: jax.Array

    @classmethod
    def explicit(cls, substeps: int = 1) -> "StepStats":
        """Stats of a step with no solve."""
        return cls(
            newton_iters=jnp.asarray(0, jnp.int32),
            converged=jnp.asarray(True),
            clamped=jnp.asarray(0, jnp.int32),
            substeps=jnp.asarray(substeps, jnp.int32),
        )


class Trajectory(eqx.Module):
    """Saved frames of a simulation.

    ``ts`` has shape ``(n_frames + 1,)`` and ``states`` leading axis ``n_frames + 1`` (the initial
    state first); ``stats`` has leading axis ``n_frames``. ``failed_step`` is the index (1-based)
    of the first step whose solve failed or whose state became non-finite, or -1.
    """

    ts: jax.Array
    states: State
    stats: StepStats
    failed_step: jax.Array

    @property
    def final(self) -> State:
        """The last saved state."""
        return State(self.states.R[..., -1, :, :], self.states.Pi[..., -1, :])
