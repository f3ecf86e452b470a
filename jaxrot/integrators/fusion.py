"""Keeping XLA's CPU fusion from recomputing shared intermediates.

XLA on CPU fuses elementwise producers, ``sin`` and ``cos`` included, into *every* consumer: a
step whose twelve outputs (R, Pi) all depend on a chain of rotations recomputes that chain's
trigonometry in each output's kernel (``split4``: 218 ``sin`` per step for 13 axis flows).
``lax.optimization_barrier`` is removed before fusion there and does not help. :func:`materialize`
concatenates the values and passes them through ``lax.reduce_precision`` to their own format (an
exact identity), which XLA neither removes nor duplicates into the consumers: each value is
computed once. The first version passed them through a product with the identity (a ``dot`` is
never fused either), but each ``dot`` is a separate library call that also cuts its neighbours'
fusions (``split4_231`` had three times as many kernels a step). Per value, without the
concatenation, XLA fuses the ``reduce_precision`` into the consumers and the recomputation returns.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax


def materialize(*xs: jax.Array):
    """``xs`` unchanged (same values, shapes and gradients), computed once by XLA on a CPU.

    On other backends (whose fusion has its own cost model, not measured here) it returns ``xs``.
    """
    if jax.default_backend() != "cpu":
        return xs
    flat = jnp.concatenate([jnp.ravel(x) for x in xs])
    fi = jnp.finfo(flat.dtype)
    flat = lax.reduce_precision(flat, exponent_bits=fi.nexp, mantissa_bits=fi.nmant)
    out, k = [], 0
    for x in xs:
        out.append(flat[k:k + x.size].reshape(x.shape))
        k += x.size
    return tuple(out)
