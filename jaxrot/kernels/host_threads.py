"""A fused run on a CPU split over its cores: the batch cut into one slice per core, each slice one
Warp launch from its own thread.

Warp runs a CPU launch as one loop over the bodies on the calling thread, and its JAX custom call
(``warp.jax_kernel``) holds a process-wide lock around the launch, so a batch ran on one core however
many the machine has (and XLA's threads, one per CPU device, queued on that lock). On a machine whose
default backend is the CPU, a run of at least ``2 * MIN_BODIES_PER_THREAD`` bodies and
``2 * MIN_BODY_STEPS_PER_THREAD`` body-steps is one call of a Python function instead (Warp's
``jax_callable``, which hands XLA's buffers over without a copy), and that function launches the
slices, the first on its own thread and the others from a thread pool; Warp's native call releases
Python's lock, so they run in parallel. Each slice's launch is recorded once
(``wp.launch(..., record_cmd=True)``) and replayed with the call's buffers. Every body is computed
by the same kernel as before: the results are the same bits.
"""

from __future__ import annotations

import concurrent.futures
import functools
import os

import jax
import numpy as np

from ._common import so3_funcs, warp

#: the fewest bodies that a thread of its own is given
MIN_BODIES_PER_THREAD = 32
#: the fewest body-steps a thread of its own is given: the split costs about 0.1 ms more per call than
#: one launch (the Python call, the threads' hand-over), which a run must outweigh; below this floor
#: the cheapest kernels (``buss2p``) gain nothing (``python benchmarks/fused_cpu_split.py``)
MIN_BODY_STEPS_PER_THREAD = 2048


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


def threads_for(bodies: int, steps: int, weight: float = 1.0) -> int:
    """How many threads a fused CPU run of ``bodies`` bodies and ``steps`` steps is split over (1: not
    split); ``weight``: a body-step's cost relative to the cheapest kernels', for which the body-step
    floor was measured."""
    return max(1, min(cores(), bodies // MIN_BODIES_PER_THREAD,
                      int(bodies * steps * weight) // MIN_BODY_STEPS_PER_THREAD))


@functools.lru_cache(maxsize=1)
def _pool() -> concurrent.futures.ThreadPoolExecutor:
    """One pool for every split run (as many threads as cores; a run uses as many as its slices)."""
    return concurrent.futures.ThreadPoolExecutor(cores(), thread_name_prefix="jaxrot-fused")


#: the kernel's arguments: (R, Pi, dt, t0, J, P, n_frames, save_every, R_out, Pi_out, failed_out,
#: result_out); the arrays of a slice, and those every slice shares
_SLICED, _SHARED = (0, 1, 8, 9, 10, 11), (2, 3, 4, 5)

#: recorded launches, by (kernel, batch, slices, frames, save_every): a list of free sets (a set is in
#: use by one call at a time; calls from several threads, e.g. ``shard_map``'s devices, take their own)
_RECORDED: dict[tuple, list] = {}


def _record(kernel, S, cuts, n_frames, save_every, arrays):
    """One ``wp.launch(..., record_cmd=True)`` per slice of ``arrays`` (the kernel's 10 array arguments,
    ``wp.array``), and for each slice the ``array_t`` of every array argument, whose data pointer a later
    call replaces (``Launch.set_param_at_index_from_ctype``): a replayed launch costs a few microseconds
    of Python, ``wp.launch`` about a hundred (building ``wp.array`` views and packing the arguments)."""
    wp = warp()
    sets = []
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        args = {i: x[int(lo):int(hi)] if i in _SLICED else x for i, x in arrays.items()}
        inputs = [args[i] if i in args else (n_frames if i == 6 else save_every) for i in range(12)]
        launch = wp.launch(kernel, dim=int(hi - lo), device="cpu", inputs=inputs, record_cmd=True)
        structs = {i: a.__ctype__() for i, a in args.items()}
        sets.append((int(lo), launch, structs))
    return sets


def _launch_split(kernel, S, n_threads, n_frames, save_every, arrays):
    """The slices' launches, the first on this thread, the others on the pool's (Warp's native call
    releases Python's lock); returns when every slice is done."""
    B = arrays[0].shape[0]
    key = (kernel, B, n_threads, n_frames, save_every)
    if key not in _RECORDED and len(_RECORDED) >= 256:
        _RECORDED.clear()  # (shapes seen long ago: recorded again if they come back)
    free = _RECORDED.setdefault(key, [])
    try:
        sets = free.pop()  # (atomic under Python's lock)
    except IndexError:
        sets = _record(kernel, S, np.linspace(0, B, n_threads + 1).astype(int), n_frames, save_every, arrays)
    try:
        _rebind(sets, arrays, _SLICED)
        futures = [_pool().submit(launch.launch) for _, launch, _ in sets[1:]]
        try:
            sets[0][1].launch()
        finally:
            concurrent.futures.wait(futures)  # every slice done before the buffers go back to XLA
        for f in futures:
            f.result()  # (re-raises a launch's error)
    finally:
        free.append(sets)


def _rebind(sets, arrays, sliced) -> None:
    """Point the recorded launches of ``sets`` at this call's buffers: each slice's rows of the arrays
    in ``sliced``, the whole of the others."""
    for lo, launch, structs in sets:
        for i, t in structs.items():
            x = arrays[i]
            t.data = x.ptr + (lo * x.strides[0] if i in sliced else 0)
            launch.set_param_at_index_from_ctype(i, t)


@functools.lru_cache(maxsize=None)
def _callable(kernel, S):
    """Warp's JAX callable (``jax_callable``: XLA's buffers handed over as ``wp.array`` without a copy)
    that launches ``kernel`` in slices; one per kernel."""
    wp = warp()
    c = so3_funcs(S)

    def split(R, Pi, dt, t0, J, P, n_frames, save_every, n_threads, R_out, Pi_out, failed_out, result_out):
        arrays = dict(zip((*_SLICED[:2], *_SHARED, *_SLICED[2:]),
                          (R, Pi, dt, t0, J, P, R_out, Pi_out, failed_out, result_out)))
        _launch_split(kernel, S, n_threads, n_frames, save_every, arrays)

    split.__annotations__ = dict(
        R=wp.array(dtype=c.M), Pi=wp.array(dtype=c.V), dt=wp.array(dtype=S), t0=wp.array(dtype=S),
        J=wp.array(dtype=c.V), P=wp.array(dtype=S), n_frames=int, save_every=int, n_threads=int,
        R_out=wp.array2d(dtype=c.M), Pi_out=wp.array2d(dtype=c.V), failed_out=wp.array(dtype=wp.int32),
        result_out=wp.array(dtype=wp.int32), **{"return": None})
    split.__name__ = split.__qualname__ = f"split_{kernel.key}"
    return wp.jax_callable(split, num_outputs=4, vmap_method="sequential")


def call(kernel, S, n_threads: int, n_frames: int, save_every: int, R, Pi, dt, t0, J, P):
    """``kernel`` (a :func:`jaxrot.kernels._common.loop_kernel` of scalar type ``S``) on the batch
    ``R`` (B, 3, 3), ``Pi`` (B, 3), its ``B`` bodies split over ``n_threads`` launches on the host;
    returns the kernel's outputs ``(R_out, Pi_out, failed, result)`` as JAX arrays (a JAX foreign
    function call: usable under ``jit`` and ``shard_map``, on CPU devices)."""
    B = R.shape[0]
    return tuple(_callable(kernel, S)(
        R, Pi, dt, t0, J, P, n_frames, save_every, n_threads,
        output_dims={"R_out": (B, n_frames), "Pi_out": (B, n_frames), "failed_out": (B,), "result_out": (B,)}))


# --------------------------------------------------------------------------------------------------
# any kernel in slices taken by the pool's threads (the fused adaptive kernel, the fixed-step kernel
# with an event): the kernel's parameters by position, the sliced ones cut into rows per slice

#: recorded launches of :func:`launch_in_slices`, as :data:`_RECORDED`
_RECORDED_ANY: dict[tuple, list] = {}


def launch_in_slices(kernel, n_slices: int, arrays: dict, scalars: dict, sliced: frozenset) -> None:
    """Launch ``kernel`` on the batch in ``n_slices`` slices, every slice on the pool's threads (a
    thread that finishes early takes the next slice); returns when every slice is done. ``arrays``:
    parameter position -> ``wp.array`` (the positions in ``sliced`` hold one row per body, the others
    are shared), ``scalars``: position -> value. Each slice's launch is recorded once per (kernel,
    batch, slices, scalars, shapes) and replayed with the call's buffers, as :func:`_launch_split` does."""
    wp = warp()
    B = next(arrays[i] for i in sorted(sliced) if i in arrays).shape[0]
    # (the arrays' shapes too: a recorded launch keeps the shapes and strides it was recorded with)
    key = (kernel, B, n_slices, tuple(sorted(scalars.items())), tuple((i, arrays[i].shape) for i in sorted(arrays)))
    if key not in _RECORDED_ANY and len(_RECORDED_ANY) >= 256:
        _RECORDED_ANY.clear()
    free = _RECORDED_ANY.setdefault(key, [])
    try:
        sets = free.pop()  # (atomic under Python's lock)
    except IndexError:
        sets = []
        cuts = np.linspace(0, B, n_slices + 1).astype(int)
        for lo, hi in zip(cuts[:-1], cuts[1:]):
            args = {i: x[int(lo):int(hi)] if i in sliced else x for i, x in arrays.items()}
            inputs = [args[i] if i in args else scalars[i] for i in range(len(arrays) + len(scalars))]
            launch = wp.launch(kernel, dim=int(hi - lo), device="cpu", inputs=inputs, record_cmd=True)
            sets.append((int(lo), launch, {i: a.__ctype__() for i, a in args.items()}))
    try:
        _rebind(sets, arrays, sliced)
        futures = [_pool().submit(launch.launch) for _, launch, _ in sets]
        concurrent.futures.wait(futures)  # every slice done before the buffers go back to XLA
        for f in futures:
            f.result()  # (re-raises a launch's error)
    finally:
        free.append(sets)
