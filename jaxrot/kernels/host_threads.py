"""A fused run on a CPU split over its cores: the batch cut into one slice per core, each slice one
Warp launch from its own thread.

Warp runs a CPU launch as one loop over the bodies on the calling thread, and its JAX custom call
(``warp.jax_kernel``) holds a process-wide lock around the launch, so a batch ran on one core however
many the machine has (and XLA's threads, one per CPU device, queued on that lock). On a machine whose
default backend is the CPU, a run of at least ``2 * MIN_BODIES_PER_THREAD`` bodies and
``2 * MIN_BODY_STEPS_PER_THREAD`` body-steps is called through ``jax.pure_callback`` instead, and
the slices are launched from a thread pool; Warp's native call releases
Python's lock, so they run in parallel. Every body is computed by the same kernel as before: the
results are the same bits.
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
#: the fewest body-steps a thread of its own is given: the split costs about 0.6 ms per call on a 2-core
#: CPU (the host callback, the Warp arrays and launches, the threads' hand-over), which a run must
#: outweigh (docs/benchmarks.md, "Fused kernels")
MIN_BODY_STEPS_PER_THREAD = 8192


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


def threads_for(bodies: int, steps: int) -> int:
    """How many threads a fused CPU run of ``bodies`` bodies and ``steps`` steps is split over (1: not
    split)."""
    return max(1, min(cores(), bodies // MIN_BODIES_PER_THREAD, bodies * steps // MIN_BODY_STEPS_PER_THREAD))


@functools.lru_cache(maxsize=1)
def _pool() -> concurrent.futures.ThreadPoolExecutor:
    """One pool for every split run (as many threads as cores; a run uses as many as its slices)."""
    return concurrent.futures.ThreadPoolExecutor(cores(), thread_name_prefix="jaxrot-fused")


def call(kernel, S, n_threads: int, n_frames: int, save_every: int, R, Pi, dt, t0, J, P):
    """``kernel`` (a :func:`jaxrot.kernels._common.loop_kernel` of scalar type ``S``) on the batch
    ``R`` (B, 3, 3), ``Pi`` (B, 3), its ``B`` bodies split over ``n_threads`` launches on the host;
    returns the kernel's outputs ``(R_out, Pi_out, failed, result)`` as JAX arrays (a
    ``jax.pure_callback``: usable under ``jit`` and ``shard_map``, on CPU devices)."""
    wp = warp()
    c = so3_funcs(S)
    B, dtype = R.shape[0], R.dtype
    shapes = (jax.ShapeDtypeStruct((B, n_frames, 3, 3), dtype), jax.ShapeDtypeStruct((B, n_frames, 3), dtype),
              jax.ShapeDtypeStruct((B,), np.int32), jax.ShapeDtypeStruct((B,), np.int32))
    cuts = np.linspace(0, B, n_threads + 1).astype(int)

    def host(R, Pi, dt, t0, J, P):
        R, Pi = np.ascontiguousarray(R), np.ascontiguousarray(Pi)
        outs = [np.empty(s.shape, s.dtype) for s in shapes]
        shared = [wp.array(np.ascontiguousarray(x), dtype=d, device="cpu")
                  for x, d in ((dt, S), (t0, S), (J, c.V), (P, S))]

        def launch(i):
            lo, hi = int(cuts[i]), int(cuts[i + 1])

            def view(x, dt_):
                return wp.array(x[lo:hi], dtype=dt_, device="cpu", copy=False)

            wp.launch(kernel, dim=hi - lo, device="cpu",
                      inputs=[view(R, c.M), view(Pi, c.V), *shared, n_frames, save_every,
                              view(outs[0], c.M), view(outs[1], c.V), view(outs[2], wp.int32),
                              view(outs[3], wp.int32)])

        # built (or read from Warp's cache) here, once, not by every thread at once; block_dim 1 is the
        # variant a CPU launch runs
        kernel.module.load("cpu", 1)
        futures = [_pool().submit(launch, i) for i in range(n_threads)]
        concurrent.futures.wait(futures)  # every slice done before the buffers go back to XLA
        for f in futures:
            f.result()  # (re-raises a launch's error)
        return tuple(outs)

    return jax.pure_callback(host, shapes, R, Pi, dt, t0, J, P, vmap_method="sequential")
