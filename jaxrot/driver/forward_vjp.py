"""A reverse-mode derivative taken in forward mode, where the inputs are few numbers.

``jax.grad`` of an error-controlled run differentiates a while loop. In reverse mode that is a
checkpointed loop run again backwards: its program holds the loop's step three or four times over
(the run, its replay to the checkpoints, the recomputation and the step's transpose), and compiling it
is most of a first call. Where the perturbed inputs
of one body's loop are ``n`` numbers (the moments ``J``: 3; an initial state: 12), the loop's Jacobian
is ``n`` tangents of one forward run, each along the steps the run takes (the controller's choice
carries no derivative, :func:`jaxrot.integrators.pairs.adapt`): the primal loop and its ``n``
tangents in one loop, whose program holds the step and its linearisation, and the backward pass is
the cotangent contracted with the tangents (the tangents share the loop's every iteration,
vectorised). Both first and next calls against the checkpointed loop, and the tests of the same
derivative: docs/user_guide/compile_time.md.

:func:`jacobian` runs the loop with its tangents; :func:`pull_back` makes the gradient of them.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

__all__ = ["MOST", "directions", "jacobian", "pull_back"]

#: perturbed numbers (of one body's loop) up to which its reverse-mode derivative is taken in forward mode
MOST = 16


def directions(perturbed, args) -> int:
    """How many numbers of ``args`` are perturbed (``perturbed``: equinox's flags, one per leaf)."""
    diff, _ = eqx.partition(args, perturbed)
    return sum(math.prod(jnp.shape(x)) for x in jax.tree_util.tree_leaves(diff))


def jacobian(f, args, perturbed):
    """``f(args)`` and its tangents in each perturbed number of ``args``: ``(out, tangents)``, each
    tangent leaf with a leading axis of the directions (integer outputs' tangents dropped: None)."""
    diff, rest = eqx.partition(args, perturbed)
    x, unravel = ravel_pytree(diff)

    def g(v):
        return f(eqx.combine(unravel(v), rest))

    # the primal does not depend on the direction: vmap computes it once, beside the batched tangents
    out, tangents = jax.vmap(lambda d: jax.jvp(g, (x,), (d,)), out_axes=(None, 0))(jnp.eye(x.size, dtype=x.dtype))
    tangents = jax.tree_util.tree_map(lambda o, t: t if eqx.is_inexact_array(o) else None, out, tangents)
    return out, tangents


def pull_back(tangents, cotangents, args, perturbed):
    """The gradient of ``<cotangents, out>`` in the perturbed leaves of ``args`` (None elsewhere), from
    :func:`jacobian`'s tangents."""
    diff, _ = eqx.partition(args, perturbed)
    x, unravel = ravel_pytree(diff)
    total = jnp.zeros((x.size,), x.dtype)
    for t, c in zip(jax.tree_util.tree_leaves(tangents, is_leaf=lambda z: z is None),
                    jax.tree_util.tree_leaves(cotangents, is_leaf=lambda z: z is None)):
        if t is None or c is None:
            continue
        total = total + jnp.tensordot(t, c.astype(t.dtype), axes=c.ndim).astype(x.dtype)
    return unravel(total)


#: numbers (directions times outputs) up to which the tangents of a run's outputs are kept
MOST_NUMBERS = 1 << 24


def by_jacobian(f, args, size: int, reverse=None, most: int | None = None):
    """``f(args)`` for reverse mode (``jax.grad``; not ``jax.jvp``): its derivative taken through the
    Jacobian in its perturbed numbers where they are at most :data:`MOST` and the tangents (``size``
    numbers out, each) at most :data:`MOST_NUMBERS` numbers, with JAX's own reverse pass of ``reverse``
    (default ``f``: the same function, differentiable in reverse mode) otherwise. ``f`` and
    ``reverse`` are static (hashable) functions; ``most`` replaces :data:`MOST` (a cheap ``f``)."""
    return _by_jacobian(args, f, (size, most), reverse or f)


@eqx.filter_custom_vjp
def _by_jacobian(args, f, size, reverse):
    return reverse(args)


def _jacobian_here(perturbed, args, size) -> bool:
    n, (numbers, most) = directions(perturbed, args), size
    return 0 < n <= (MOST if most is None else most) and n * numbers <= MOST_NUMBERS


@_by_jacobian.def_fwd
def _by_jacobian_fwd(perturbed, args, f, size, reverse):
    if _jacobian_here(perturbed, args, size):
        return jacobian(f, args, perturbed)
    diff, rest = eqx.partition(args, perturbed)
    return jax.vjp(lambda d: reverse(eqx.combine(d, rest)), diff)


@_by_jacobian.def_bwd
def _by_jacobian_bwd(residuals, cotangents, perturbed, args, f, size, reverse):
    if _jacobian_here(perturbed, args, size):
        return pull_back(residuals, cotangents, args, perturbed)

    def fill(shape, c):  # JAX's reverse pass takes a cotangent for every output (float0 for integers)
        if c is not None or shape is None:
            return c
        inexact = jnp.issubdtype(shape.dtype, jnp.inexact)
        return jnp.zeros(shape.shape, shape.dtype) if inexact else np.zeros(shape.shape, jax.dtypes.float0)

    shapes = eqx.filter_eval_shape(f, args)
    (grad,) = residuals(jax.tree_util.tree_map(fill, shapes, cotangents, is_leaf=lambda z: z is None))
    return grad
