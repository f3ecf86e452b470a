"""The one Newton solver every implicit method uses.

``x_{k+1} = x_k - F'(x_k)^-1 F(x_k)`` with ``F'`` from ``jax.jacfwd`` (never hand-derived), a
bounded ``lax.while_loop`` and a closed-form 3x3 solve (``jnp.linalg.solve`` for other sizes).
Optionally a few *chord* iterations come first, ``x_{k+1} = x_k - F'(x_J)^-1 F(x_k)`` with one
Jacobian at a fixed point ``x_J``, unrolled into the step; the while loop then only runs for a
body whose last chord step is not within the tolerance, and runs plain Newton from ``x0``. Gradients of the
solution with respect to everything ``F`` closes over come from the implicit function theorem
(``lax.custom_root``: one linear solve with ``F'(x*)``), not from differentiating the iterations;
the iteration count and convergence flag are computed outside the differentiated path.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax


class NewtonStats(eqx.Module):
    """Iterations taken and whether the step-size criterion was met with a finite iterate."""

    iters: jax.Array
    converged: jax.Array


class Newton(eqx.Module):
    """Settings of the Newton solve (a field of every implicit integrator).

    Converged when ``|dx| <= atol + rtol |x|`` (inf-norm); defaults are ``1000 eps`` of the dtype
    (2e-13 in float64, 1e-4 in float32), after which the quadratic convergence leaves the iterate
    at round-off. ``implicit_diff=False`` differentiates through ``max_iters`` unrolled iterations
    instead (for checking the implicit gradients; slower).

    ``chord = m > 0``: ``m`` chord iterations with the Jacobian at ``jac_point`` (given to
    :meth:`__call__`; default the starting guess), converged by the same criterion on the last
    chord step; where that fails, plain Newton runs from the starting guess (as with ``chord=0``,
    so a large step that defeats the chord iteration is solved exactly as before). LIEMID and
    LIEMID[EA] use it with the Jacobian at ``Psi = 0`` (constant, so XLA folds most of it) from a
    third-order starting guess, where the chord iteration contracts by ``O((h |Omega|)^2)`` per step:
    several times faster (``jaxrot bench throughput``), the same root within the tolerance (tests).
    """

    rtol: float | None = None
    atol: float | None = None
    max_iters: int = eqx.field(static=True, default=30)
    implicit_diff: bool = eqx.field(static=True, default=True)
    chord: int = eqx.field(static=True, default=0)

    def tolerances(self, dtype):
        eps = float(jnp.finfo(dtype).eps)
        rtol = 1e3 * eps if self.rtol is None else self.rtol
        atol = 1e3 * eps if self.atol is None else self.atol
        return rtol, atol

    def __call__(self, residual, x0, jac_point=None):
        """Solve ``residual(x) = 0`` from ``x0``; returns ``(x, NewtonStats)``."""
        return newton(residual, x0, rtol=self.rtol, atol=self.atol, max_iters=self.max_iters,
                      implicit_diff=self.implicit_diff, chord=self.chord, jac_point=jac_point)


def solve(A, b):
    """``A^-1 b``; for 3x3 systems (every rotation method's) in closed form by the adjugate: a
    LAPACK call per body costs more than the arithmetic under ``vmap``. A singular ``A`` gives
    non-finite values, which the
    convergence check reports."""
    if A.shape != (3, 3):
        return jnp.linalg.solve(A, b)
    c0 = jnp.cross(A[1], A[2])
    c1 = jnp.cross(A[2], A[0])
    c2 = jnp.cross(A[0], A[1])
    det = jnp.dot(A[0], c0)
    return (c0 * b[0] + c1 * b[1] + c2 * b[2]) / det  # adj(A) = [c0 c1 c2] (columns)


def _chord(residual, x0, rtol, atol, m, jac_point):
    """``m >= 1`` chord iterations from ``x0``; returns ``(x, done)``, ``done`` by the same step-size
    criterion as Newton's on the last step, and ``x0`` again where not done."""
    A = jax.jacfwd(residual)(x0 if jac_point is None else jac_point)
    x = x0
    for _ in range(m):
        dx = solve(A, -residual(x))
        x = x + dx
    finite = jnp.all(jnp.isfinite(x))
    done = finite & (jnp.max(jnp.abs(dx)) <= atol + rtol * jnp.max(jnp.abs(x)))
    return jnp.where(done, x, x0), done


def _loop(residual, x0, rtol, atol, max_iters, chord=0, jac_point=None):
    def cond(c):
        _, k, done = c
        return (k < max_iters) & ~done

    def body(c):
        x, k, _ = c
        J = jax.jacfwd(residual)(x)
        dx = solve(J, -residual(x))
        x = x + dx
        done = jnp.max(jnp.abs(dx)) <= atol + rtol * jnp.max(jnp.abs(x))
        return x, k + 1, done | ~jnp.all(jnp.isfinite(x))

    start = (x0, jnp.asarray(0, jnp.int32), jnp.asarray(False))
    if chord:
        x, done = _chord(residual, x0, rtol, atol, chord, jac_point)
        start = (x, jnp.asarray(chord, jnp.int32), done)  # the count includes the chord iterations
    x, k, done = lax.while_loop(cond, body, start)
    return x, k, done & jnp.all(jnp.isfinite(x))


def newton(residual, x0, *, rtol=None, atol=None, max_iters: int = 30, implicit_diff: bool = True,
           chord: int = 0, jac_point=None):
    """Solve ``residual(x) = 0`` (``x`` a vector) by Newton's method from ``x0``.

    Returns ``(x, NewtonStats(iters, converged))``. See :class:`Newton` for the tolerances.
    """
    x0 = jnp.asarray(x0)
    r, a = Newton(rtol, atol).tolerances(x0.dtype)
    if not implicit_diff:
        def body(c, _):
            x, k, done = c
            J = jax.jacfwd(residual)(x)
            dx = solve(J, -residual(x))
            step = jnp.max(jnp.abs(dx)) <= a + r * jnp.max(jnp.abs(x))
            x_new = jnp.where(done, x, x + dx)
            return (x_new, jnp.where(done, k, k + 1), done | step), None

        (x, k, done), _ = lax.scan(body, (x0, jnp.asarray(0, jnp.int32), jnp.asarray(False)), None,
                                   length=max_iters)
        return x, NewtonStats(k, done & jnp.all(jnp.isfinite(x)))
    # the iterations see the closed-over values without gradient; custom_root supplies the IFT
    f, consts = jax.closure_convert(residual, x0)
    consts_ng = [lax.stop_gradient(c) for c in consts]
    jp = None if jac_point is None else lax.stop_gradient(jac_point)
    x_star, k, ok = _loop(lambda x: f(x, *consts_ng), lax.stop_gradient(x0), r, a, max_iters, chord, jp)

    def tangent_solve(g, y):
        return solve(jax.jacfwd(g)(y), y)

    x = lax.custom_root(residual, x_star, lambda _f, x: x, tangent_solve)
    return x, NewtonStats(k, ok)
