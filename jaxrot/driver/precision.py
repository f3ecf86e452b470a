"""Matrix products at full precision in the programs jaxrot traces.

At JAX's default precision, XLA on a GPU rounds the operands of a float32 matrix product with a long
contraction (a Runge-Kutta tableau's row against the stacked stages, a torque's ``R @ K`` over a
batch) to TF32's 10-bit mantissa: a float32 run would carry errors of ~1e-4 relative where float32
gives ~1e-7, and would differ from the fused kernels, which compute in IEEE float32. The entry points
that trace a run (:func:`jaxrot.simulate`, :func:`jaxrot.compile`, ``Trajectory.evaluate``,
:func:`jaxrot.reference.reference_solution`) do so under :func:`full_precision`. On CPUs nothing
changes.
"""

from __future__ import annotations

import functools

import jax


def full_precision(fn):
    """``fn`` with every program it traces at ``jax.default_matmul_precision("highest")`` (the setting
    is the caller's again when it returns)."""

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        with jax.default_matmul_precision("highest"):
            return fn(*args, **kwargs)

    return wrapped
