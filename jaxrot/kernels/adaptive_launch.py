"""Launching the fused adaptive kernel on a batch (:func:`launch`): Warp's JAX custom call on a GPU
(and for a CPU batch too small to split), or on a CPU the batch cut into slices that a pool of one
thread per core takes in turn (:mod:`jaxrot.kernels.host_threads`' pool), the fastest bodies first.
"""

import functools

import jax
import jax.numpy as jnp

from . import event_parameters, host_threads
from ._common import jax_kernel
from .adaptive_kernel import kernel_for
from .adaptive_pairs import GENERATED_PAIRS, AdaptiveRun, Record
from .generate import memory_length

__all__ = ["launch", "slices_for", "SORT_MIN_BODIES", "MIN_BODIES_PER_SLICE", "SLICES_PER_CORE"]


#: the kernel's outputs (name, per-body shape after B) in order
_OUTPUTS = ("R_out", "Pi_out", "acc_out", "rej_out", "err_out", "result_out", "tev_out", "Rev_out", "Piev_out",
            "R_rec", "Pi_rec", "t_rec", "h_rec", "out_k", "A_out")


def _output_dims(B, n_out, capacity, given=False):
    """The outputs' shapes; the record's (``R_rec`` to ``out_k``) of one column where nothing is recorded;
    ``capacity`` the steps recorded, or ``(steps, states)`` where fewer states are kept (checkpoints);
    the memory at the outputs (``A_out``) of one column where the memory is not ``given``."""
    steps, states = capacity if isinstance(capacity, tuple) else (capacity, capacity)
    rec = {k: (B, max(n, 1)) for k, n in zip(_OUTPUTS[9:13], (states, states, steps, steps))}
    return {"R_out": (B, n_out), "Pi_out": (B, n_out), **{k: (B,) for k in _OUTPUTS[2:9]}, **rec,
            "out_k": (B, n_out if capacity else 1), "A_out": (B, n_out if given else 1)}


@functools.lru_cache(maxsize=None)
def _ffi(*key):
    """Warp's JAX custom call of the kernel (CUDA, and a CPU batch too small to split)."""
    return jax_kernel(kernel_for(*key)[1], len(_OUTPUTS))


# --------------------------------------------------------------------------------------------------
# a CPU batch split over the cores (as host_threads does for fixed steps), in more slices than cores
# so that the pool's threads balance bodies that take very different numbers of steps

#: from this many bodies a batch is launched in order of its bodies' initial angular speed
SORT_MIN_BODIES = 64
#: the fewest bodies a slice is given
MIN_BODIES_PER_SLICE = 16
#: slices per core: a thread that finishes early takes the next slice; each slice's launch costs a fixed
#: time, so more slices than needed for balance only add to a call's cost (benchmarks/adaptive_slices.py)
SLICES_PER_CORE = 4


def slices_for(bodies: int) -> int:
    """How many slices a CPU batch of ``bodies`` is cut into (1: one launch on the calling thread)."""
    n_cores = host_threads.cores()
    if n_cores < 2 or bodies < 2 * host_threads.MIN_BODIES_PER_THREAD:
        return 1
    return max(1, min(SLICES_PER_CORE * n_cores, bodies // MIN_BODIES_PER_SLICE))


@functools.lru_cache(maxsize=None)
def _callable(*key):
    """The kernel launched in slices of the batch from the pool's threads (a CPU); one per kernel."""
    return host_threads.sliced_callable(kernel_for(*key)[1], len(_OUTPUTS), frozenset({"t0v", "ts", "Jv", "P", "Q"}))


def launch(name, system, states0, t0, ts, rtol, atol, h0, max_steps, event, method_params, capacity=0, memory0=None):
    """The kernel of the generated pair ``name`` (:data:`~jaxrot.kernels.adaptive_pairs.GENERATED_PAIRS`)
    whose parameters are ``method_params`` on a batch; an :class:`AdaptiveRun`. With ``capacity``:
    ``(run, record)``, the :class:`~jaxrot.kernels.adaptive_pairs.Record` of each body's first
    ``capacity`` accepted steps (``capacity = (T, C)``: the times and lengths of ``T`` steps, the states of every
    ``ceil(T / C)``-th) (:func:`jaxrot.kernels.adaptive_kernel.adaptive_kernel`) in the order the bodies
    were launched: row ``k`` is body ``order[k]`` (``order`` None: the caller's order). With ``memory0``
    (B, len(A)), each body's memory at the start (without an event or a record): ``(run, A_out)``, the
    memory at each output (B, n, len(A))."""
    dtype = states0.R.dtype
    B, n_out = states0.R.shape[0], ts.shape[0]
    if event is None:  # (the torque is inside the generated attempt)
        tkey, P, ekey, Q, direction, terminal = None, method_params, None, jnp.zeros((1,), dtype), None, True
    else:
        tkey, ekey, P, Q = event_parameters(system, event, dtype, method_params)
        direction, terminal = event.direction, bool(event.terminal)
    if B == 0:
        z = jnp.zeros((0,), dtype)
        zi = jnp.zeros((0,), jnp.int32)
        ev = (None, None, None) if event is None else (z, jnp.zeros((0, 3, 3), dtype), jnp.zeros((0, 3), dtype))
        run = AdaptiveRun(jnp.zeros((0, n_out, 3, 3), dtype), jnp.zeros((0, n_out, 3), dtype), zi, zi, z, zi, *ev)
        return run if memory0 is None else (run, jnp.zeros((0, n_out, jnp.shape(memory0)[1]), dtype))
    given = memory0 is not None
    if given and (event is not None or capacity):
        raise ValueError("a run given its memory at the start (tangents carried) takes no event or record")
    key = (jnp.dtype(dtype).name, name, tkey, ekey, direction, terminal, bool(capacity), given)
    J = jnp.asarray(system.body.J, dtype)
    A0 = jnp.asarray(memory0, dtype) if given else jnp.zeros((B, memory_length(GENERATED_PAIRS[name].key)), dtype)
    per_body = [jnp.asarray(states0.R, dtype), jnp.asarray(states0.Pi, dtype), h0, rtol, atol, A0]
    inverse = order = None
    if B >= SORT_MIN_BODIES:
        # the bodies fastest first (initial angular speed): a GPU warp of 32 threads then holds bodies
        # of like cost instead of running as long as its slowest, and a CPU's pool starts the costliest
        # slices first; the outputs go back to the caller's order (the same arithmetic per body)
        order = jnp.argsort(-jnp.linalg.norm(per_body[1] / J, axis=-1))
        inverse = jnp.argsort(order)
        per_body = [x[order] for x in per_body]
    args = (*per_body, jnp.reshape(t0, (1,)), ts, J.reshape(1, 3), P, jnp.asarray(Q, dtype))
    n_slices = min(slices_for(B), B)
    dims = _output_dims(B, n_out, capacity, given)
    if n_slices == 1 or jax.default_backend() != "cpu":  # (a machine with a GPU keeps Warp's custom call)
        out = _ffi(*key)(*args, int(max_steps), int(n_out), launch_dims=(B,), output_dims=dims)
    else:
        out = _callable(*key)(*args, int(max_steps), int(n_out), int(n_slices), output_dims=dims)
    out = tuple(out)
    kept = 6 if event is None else 9
    run = AdaptiveRun(*(out[:kept] if inverse is None else (x[inverse] for x in out[:kept])))
    if given:
        return run, (out[14] if inverse is None else out[14][inverse])
    # the record stays in the launch's order (a gather of it would copy it whole)
    return (run, Record(*out[9:14], order if inverse is not None else None)) if capacity else run

