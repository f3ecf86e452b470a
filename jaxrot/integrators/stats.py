"""What a step reports (:class:`StepStats`): part of the integrator interface."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp


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
    def from_solves(cls, *solves) -> "StepStats":
        """Stats of a step made of one or more nonlinear solves (``NewtonStats``: iterations summed,
        converged only if all did)."""
        it = sum(s.iters for s in solves)
        ok = solves[0].converged
        for s in solves[1:]:
            ok = ok & s.converged
        return cls(newton_iters=jnp.asarray(it, jnp.int32), converged=ok, clamped=jnp.asarray(0, jnp.int32),
                   substeps=jnp.asarray(1, jnp.int32))

    @classmethod
    def explicit(cls, substeps: int = 1) -> "StepStats":
        """Stats of a step with no solve."""
        return cls(
            newton_iters=jnp.asarray(0, jnp.int32),
            converged=jnp.asarray(True),
            clamped=jnp.asarray(0, jnp.int32),
            substeps=jnp.asarray(substeps, jnp.int32),
        )
