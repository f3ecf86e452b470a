"""Keeping XLA's CPU fusion from recomputing shared intermediates.

XLA on CPU fuses elementwise producers, ``sin`` and ``cos`` included, into *every* consumer: a
step whose twelve outputs (R, Pi) all depend on a chain of rotations recomputes that chain's
trigonometry in each output's kernel (``split4``: 218 ``sin`` per step for 13 axis flows).
``lax.optimization_barrier`` is removed before fusion there and does not help; a ``dot`` is never
fused into its consumers, so its result is computed once. :func:`materialize` passes values
through a product with the identity, which leaves them bit-identical (``x * 1 + y * 0``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def materialize(*xs: jax.Array):
    """``xs`` unchanged (same values, shapes and gradients), computed once by XLA on a CPU.

    On other backends (whose fusion has its own cost model, not measured here) it returns ``xs``.
    """
    if jax.default_backend() != "cpu":
        return xs
    flat = jnp.concatenate([jnp.ravel(x) for x in xs])
    flat = flat @ jnp.eye(flat.shape[0], dtype=flat.dtype)
    out, k = [], 0
    for x in xs:
        out.append(flat[k:k + x.size].reshape(x.shape))
        k += x.size
    return tuple(out)
