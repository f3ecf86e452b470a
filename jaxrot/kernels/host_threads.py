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

import numpy as np

from ._common import warp

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


def _rebind(sets, arrays, sliced) -> None:
    """Point the recorded launches of ``sets`` at this call's buffers: each slice's rows of the arrays
    in ``sliced``, the whole of the others."""
    for lo, launch, structs in sets:
        for i, t in structs.items():
            x = arrays[i]
            t.data = x.ptr + (lo * x.strides[0] if i in sliced else 0)
            launch.set_param_at_index_from_ctype(i, t)


def call(kernel, S, n_threads: int, n_frames: int, save_every: int, *args, dims: dict):
    """``kernel`` (a :func:`jaxrot.kernels.fixed_loop.loop_kernel` of scalar type ``S``) on the batch
    ``args`` (its inputs: ``R`` (B, 3, 3), ``Pi`` (B, 3), the memory ``A0`` (B, len(A)), then ``dt``, ``t0``,
    ``J``, ``P`` and ``Q``, shared by the bodies), its ``B`` bodies split over ``n_threads`` launches on the host, its outputs' shapes
    ``dims``; returns the kernel's outputs as JAX arrays (a JAX foreign function call: usable under
    ``jit`` and ``shard_map``, on CPU devices)."""
    from .fixed_loop import OUTPUTS

    return tuple(sliced_callable(kernel, len(OUTPUTS), frozenset({"dtv", "t0v", "Jv", "P", "Q"}))(
        *args, n_frames, save_every, n_threads, output_dims=dims))


#: recorded launches of :func:`launch_in_slices`, by (kernel, batch, slices, scalars, shapes): a list of
#: free sets (a set is in use by one call at a time; calls from several threads, e.g. ``shard_map``'s
#: devices, take their own)
_RECORDED_ANY: dict[tuple, list] = {}


def launch_in_slices(kernel, n_slices: int, arrays: dict, scalars: dict, sliced: frozenset) -> None:
    """Launch ``kernel`` on the batch in ``n_slices`` slices, the first on this thread and the others
    on the pool's (a thread that finishes early takes the next slice); returns when every slice is done.
    ``arrays``: parameter position -> ``wp.array`` (the positions in ``sliced`` hold one row per body,
    the others are shared), ``scalars``: position -> value. Each slice's launch is recorded once
    (``wp.launch(..., record_cmd=True)``) per (kernel, batch, slices, scalars, shapes) and replayed with
    the call's buffers (:func:`_rebind`): a replayed launch costs a few microseconds of Python,
    ``wp.launch`` about a hundred."""
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
        # the first slice on this thread, the others on the pool's (Warp's native call releases Python's lock)
        futures = [_pool().submit(launch.launch) for _, launch, _ in sets[1:]]
        try:
            sets[0][1].launch()
        finally:
            concurrent.futures.wait(futures)  # every slice done before the buffers go back to XLA
        for f in futures:
            f.result()  # (re-raises a launch's error)
    finally:
        free.append(sets)


@functools.lru_cache(maxsize=None)
def sliced_callable(kernel, num_outputs: int, shared: frozenset = frozenset()):
    """Warp's JAX callable (XLA's buffers handed over without a copy) that runs ``kernel`` in slices of
    its batch from the pool's threads (:func:`launch_in_slices`). Its parameters are the kernel's own,
    the last ``num_outputs`` of them its outputs, with ``n_slices`` (an int) between the inputs and the
    outputs; every array parameter holds one row per body except those named in ``shared``."""
    import inspect

    from warp.types import is_array

    wp = warp()
    params = [(a.label, a.type) for a in kernel.adj.args]
    n_in = len(params) - num_outputs
    scalar = frozenset(i for i, (_, t) in enumerate(params) if not is_array(t))
    sliced = frozenset(i for i, (n, _) in enumerate(params) if i not in scalar and n not in shared)

    def split(*args):
        values = args[:n_in] + args[n_in + 1:]
        launch_in_slices(kernel, args[n_in], {i: v for i, v in enumerate(values) if i not in scalar},
                         {i: values[i] for i in scalar}, sliced)

    # (Warp reads the callable's parameters from its signature and annotations; its int32 scalars
    # are Python ints there)
    types = [(n, int if i in scalar else t) for i, (n, t) in enumerate(params)]
    types.insert(n_in, ("n_slices", int))
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    split.__signature__ = inspect.Signature([inspect.Parameter(n, kind) for n, _ in types])
    split.__annotations__ = {**dict(types), "return": None}
    split.__name__ = split.__qualname__ = f"split_{kernel.key}"
    return wp.jax_callable(split, num_outputs=num_outputs, vmap_method="sequential")
