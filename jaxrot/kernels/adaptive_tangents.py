"""Forward mode of a fused error-controlled run in one pass: the tangents ride in the pair's memory.

The derivative of an error-controlled run is that of the steps it accepted (the controller's choice
carries none, :mod:`jaxrot.driver.adjoint`). Its tangents can therefore be stepped beside the state,
in the same loop: :class:`Carried` is the pair whose attempt is the Jacobian-vector product of the
pair's own attempt (``jax.jvp`` of its ``step_with_error``), and whose memory is ::

    (aux, dR, dPi, daux)        the pair's memory, the tangents of the state and of that memory

so that the fused loop (:func:`jaxrot.kernels.loop.loop`), which keeps an attempt's memory only when
it accepts the attempt, keeps the tangents of the accepted steps and drops those of the rejected
ones. Its attempt is generated from that JAX code like any pair's
(:func:`jaxrot.kernels.generate.lower_pair`, checked against JAX before use); the kernel takes each
body's memory at the start (the tangents of its initial state) and writes the memory at each output
(:func:`tangent_outputs`). The controller sees the primal attempt only, so the run accepts the steps
the plain run accepts.

Cost: one pass of the attempt's Jacobian-vector product per attempt, and no record (walking a
record of the accepted steps after the run, as the backward pass does, would cost the run that writes
it and then the steps' products again: ``benchmarks/heterogeneous_gradient.py``, docs/benchmarks.md).
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..geometry.state import State
from ..integrators import AbstractPair

__all__ = ["Carried", "carried", "carrying_run", "carried_call", "carried_reason", "check_memory", "initial_memory", "tangent_outputs"]


class Carried(AbstractPair):
    """``base`` (an embedded pair, or a method run at constant steps) with the tangents of its state
    carried in its memory (module docstring).

    Args:
      base: the pair or method.
      d_arrays: the tangents of the system's arrays (``eqx.partition(system, eqx.is_array)[0]``'s
        structure, None where a leaf is not an array; zeros where the system is not differentiated:
        one kernel serves both).
    """

    base: Any
    d_arrays: Any

    order = property(lambda self: self.base.order)

    def error_order(self) -> int:
        return self.base.error_order()

    def error_norm(self, y, y1, y_err, rtol, atol):
        return self.base.error_norm(y, y1, y_err, rtol, atol)

    def init(self, system, t0, state0, dt):
        # (a kernel run of this pair is given its memory at the start: initial_memory)
        aux = self.base.init(system, t0, state0, dt)
        return aux, jnp.zeros_like(state0.R), jnp.zeros_like(state0.Pi), _inexact(jax.tree_util.tree_map(jnp.zeros_like, aux))

    def step_with_error(self, system, t, state, aux, dt):
        mem, dR, dPi, dmem = aux
        arrays, static = eqx.partition(system, eqx.is_array)
        # (a memory's integers, a step count, have no tangent: float0 zeros for JAX, none carried)
        dmem, kept = iter(dmem), jax.tree_util.tree_leaves(mem)
        dmem = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(mem), [
            next(dmem) if _is_inexact(x) else np.zeros(jnp.shape(x), jax.dtypes.float0) for x in kept])

        def attempt(R, Pi, mem, arrays):
            system = eqx.combine(arrays, static)
            if isinstance(self.base, AbstractPair):
                new, mem1, stats, y_err = self.base.step_with_error(system, t, State(R, Pi), mem, dt)
            else:  # (a method at constant steps: no estimate)
                (new, mem1, stats), y_err = self.base.step(system, t, State(R, Pi), mem, dt), jnp.zeros(12, R.dtype)
            return (new.R, new.Pi, mem1), (stats, y_err)

        out, d_out, (stats, y_err) = jax.jvp(attempt, (state.R, state.Pi, mem, arrays),
                                             (dR, dPi, dmem, self.d_arrays), has_aux=True)
        return State(out[0], out[1]), (out[2], d_out[0], d_out[1], _inexact(d_out[2])), stats, y_err


def _is_inexact(x) -> bool:
    return jnp.issubdtype(jnp.result_type(x), jnp.inexact)


def _inexact(tree) -> list:
    """The leaves of a memory's tangent that carry one (not an integer's float0)."""
    return [x for x in jax.tree_util.tree_leaves(tree) if _is_inexact(x)]


def carried(method, system, dtype) -> Carried:
    """:class:`Carried` of ``method`` for ``system``'s structure: what a run generates and compiles
    (:func:`carried_reason`). Its tangents of the system's arrays are arbitrary numbers, which the
    check of the generated attempt against JAX reads (a run's own are parameters of the same source)."""
    rng = np.random.default_rng(2)
    arrays = eqx.filter(system, eqx.is_array)
    return Carried(method, jax.tree_util.tree_map(lambda x: jnp.asarray(rng.normal(size=jnp.shape(x)), dtype), arrays))


def check_memory(method, system, dtype, R, Pi, h):
    """``(A0, memory)``: memories of :class:`Carried` ``method`` for the test states ``R``, ``Pi`` (n of
    them) with which a generated step is compared with JAX: its base's from ``init``, arbitrary
    tangents; ``A0`` (n, len(A)) as the kernel holds them, ``memory`` the pytree (leading axis n)."""
    from .generate import memory_row
    from .generate_checks import reference_values

    rng = np.random.default_rng(3)
    aux, *tangents = reference_values(lambda R, Pi: method.init(system, jnp.zeros((), dtype), State(R, Pi), h), R, Pi)
    memory = (aux, *jax.tree_util.tree_map(lambda x: rng.normal(size=np.shape(x)).astype(dtype), tangents))
    return np.asarray(jax.vmap(lambda m: memory_row(m, dtype))(memory)), memory


def carried_reason(method, system, dtype, pair: bool = True) -> str | None:
    """Why ``method``'s tangents cannot be carried in its memory in a fused run (an error-controlled
    one with ``pair``, else a constant-step one), or None: the system's arrays must be real numbers,
    and the attempt's (the step's) product must be restated (:mod:`jaxrot.kernels.generate`) within
    :data:`~jaxrot.kernels.jaxpr_warp.MAX_LINES` lines, its loops counted at each pass."""
    from . import generate
    from .jaxpr_warp import MAX_LINES

    if any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(method)):
        return "the method's own arrays are being differentiated"
    if not all(jnp.issubdtype(jnp.asarray(x).dtype, jnp.inexact)
               for x in jax.tree_util.tree_leaves(eqx.filter(system, eqx.is_array))):
        return "the system holds integer arrays"
    c = carried(method, system, dtype)
    # (written out first, nothing compiled: the compiler unrolls short loops, as long to compile)
    if not generate.written_within(c, system, dtype, MAX_LINES, pair):
        return (f"its step with the tangents cannot be restated or is longer than {MAX_LINES} lines, its loops "
                "counted at each pass (compiling and checking it would take minutes)")
    if pair:  # (off a CPU the check compiles alone: the run's kernel is built for its device)
        return generate.pair_reason(c, system, dtype, alone=jax.default_backend() != "cpu")
    return generate.reason(c, system, dtype)


def _memory_shapes(method, system, dtype):
    return jax.eval_shape(lambda s: method.init(system, jnp.zeros((), dtype), s, jnp.ones((), dtype)),
                          State(jnp.eye(3, dtype=dtype), jnp.ones(3, dtype)))


def initial_memory(method, system, t0, states0, d_states0, d_arrays, h0):
    """The memory of :class:`Carried` at the start, one row per body (B, len(A)) as the kernel holds it
    (:mod:`jaxrot.kernels.generate`: the leaves raveled, then the step's ``converged`` flag): the
    memory and its tangent from the initial states' ``d_states0`` and the system's ``d_arrays``;
    ``h0`` the first step, one per body."""
    from .generate import memory_row

    arrays, static = eqx.partition(system, eqx.is_array)

    def one(R, Pi, dR, dPi, h):
        def init(R, Pi, arrays):
            return method.init(eqx.combine(arrays, static), t0, State(R, Pi), h)

        mem, dmem = jax.jvp(init, (R, Pi, arrays), (dR, dPi, d_arrays))
        return memory_row((mem, dR, dPi, _inexact(dmem)), R.dtype)

    return jax.vmap(one)(states0.R, states0.Pi, d_states0.R, d_states0.Pi, h0)


def carrying_run(method, system, t0, states0, tangents, h0, lowered, launch, more: tuple):
    """A fused run of ``method`` carrying ``tangents = (d_states0, d_arrays)`` (one per body, and of the
    system's arrays): ``(out, dR, dPi)``, the run's outputs and the states' tangents at them.

    ``lowered(carried) -> (name, P)`` generates the :class:`Carried` attempt (step) and its parameters;
    ``launch(name, system, states0, *more, P, A0) -> (out, A_out)`` runs the kernel given each body's
    memory at the start; ``more`` the run's other arrays (times, tolerances), which its values depend on
    (:func:`carried_call`); ``h0`` the first step, one per body."""
    d_states0, d_arrays = tangents
    name, P = lowered(Carried(method, d_arrays))
    A0 = initial_memory(method, system, t0, states0, d_states0, d_arrays, h0)
    arrays, static = eqx.partition(system, eqx.is_array)

    def go(values, carried):
        (states0, arrays, *rest), (P, A0) = values, carried
        return launch(name, eqx.combine(arrays, static), states0, *rest, P, A0)

    out, A_out = carried_call(go, (states0, arrays, *more), (P, A0))
    return (out, *tangent_outputs(method, system, states0.R.dtype, A_out))


def carried_call(fn, values_in, tangents_in):
    """``fn(values_in, tangents_in) -> (values, tangents)``, a kernel run carrying tangents, whose values
    depend on ``values_in`` alone though the run reads both. Under a ``jax.vmap`` that maps
    ``tangents_in`` alone (``jax.jacfwd``'s directions) the run is made once per direction and the
    values returned unmapped (the first run's; the others' are the same), as the values of a function
    being differentiated are; mapped ``values_in`` map everything. ``values_in`` should hold every
    array the values depend on, the run's own or not (a mapped one decides)."""
    from jax import custom_batching

    run = custom_batching.custom_vmap(fn)

    @run.def_vmap
    def _(axis_size, in_batched, values_in, tangents_in):
        def spread(tree, batched):
            return jax.tree_util.tree_map(lambda x, b: x if b else jnp.broadcast_to(x, (axis_size, *jnp.shape(x))),
                                          tree, batched)

        if any(jax.tree_util.tree_leaves(in_batched[0])):
            out = jax.vmap(fn)(spread(values_in, in_batched[0]), spread(tangents_in, in_batched[1]))
            return out, jax.tree_util.tree_map(lambda _: True, out)
        spread_t = spread(tangents_in, in_batched[1])
        # the values from the first direction's run, the others' tangents alone (no copies of the values)
        first = jax.tree_util.tree_map(lambda x: x[0] if axis_size else jnp.zeros(x.shape[1:], x.dtype), spread_t)
        values, tangents = fn(values_in, first)
        if axis_size == 0:
            tangents = jax.tree_util.tree_map(lambda x: x[None][:0], tangents)
        else:
            rest = jax.lax.map(lambda t: fn(values_in, t)[1], jax.tree_util.tree_map(lambda x: x[1:], spread_t))
            tangents = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b]), tangents, rest)
        return (values, tangents), (jax.tree_util.tree_map(lambda _: False, values),
                                    jax.tree_util.tree_map(lambda _: True, tangents))

    return run(values_in, tangents_in)


def tangent_outputs(method, system, dtype, A_out):
    """``(dR, dPi)`` (B, n, 3, 3), (B, n, 3): the state's tangents at the outputs, read from the memory
    the kernel wrote there (B, n, len(A))."""
    k = sum(x.size for x in jax.tree_util.tree_leaves(_memory_shapes(method, system, dtype)))
    B, n = A_out.shape[:2]
    return A_out[..., k:k + 9].reshape(B, n, 3, 3), A_out[..., k + 9:k + 12]
