"""The one sharding helper: a batch split over devices, in one process or many (``jax.distributed``).

In one process the devices are the local ones and a batch is placed with ``jax.device_put``. Under
JAX's multi-controller runtime (``jax.distributed.initialize``, one process per host or GPU) the
default devices are *all* processes' devices: every process passes the same full batch (the usual
SPMD convention), each keeps only the shards of its own devices (``jax.make_array_from_callback``),
the compiled program runs on every process at once, and :func:`gather` brings the results back to
every process as NumPy arrays.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np


def use_cpu_cores(n: int | None = None) -> int:
    """Make ``n`` CPU cores (default: all this process may use) separate JAX CPU devices; returns ``n``.

    Call it right after ``import jax``, before any JAX computation (JAX fixes its devices then; a
    later call raises ``RuntimeError``). :func:`jaxrot.simulate` (a batch) and the maps then split a
    batch over the cores, each core running its part in cache-sized blocks: on one CPU device XLA
    spreads each of a step's small kernels over the cores, which gains nothing over one core
    (``jaxrot bench throughput``). Sets JAX's ``jax_num_cpu_devices``; the default device (where a
    single body runs) is unchanged.
    """
    if n is None:
        n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    n = int(n)
    if jax.config.jax_num_cpu_devices == n:
        return n
    try:
        jax.config.update("jax_num_cpu_devices", n)
    except Exception as e:  # JAX raises once its backends exist
        if len(jax.devices("cpu")) == n:
            return n
        raise RuntimeError(f"use_cpu_cores({n}) must come before the first JAX computation (JAX has already "
                           f"created its devices: {len(jax.devices('cpu'))} CPU device(s))") from e
    return n


def default_devices(devices=None) -> list:
    """``devices`` as a non-empty list; ``None``: every device of every process (in one process, the
    local devices)."""
    devices = list(jax.devices() if devices is None else devices)
    if not devices:
        raise ValueError("devices must be a non-empty list of JAX devices (default: all devices)")
    return devices


def is_multiprocess(devices) -> bool:
    return any(d.process_index != jax.process_index() for d in devices)


def batch_mesh(devices):
    """The 1-D mesh (axis ``"batch"``) a batch is split over; ``None`` for one device."""
    from jax.sharding import Mesh

    return Mesh(np.asarray(devices), ("batch",)) if len(devices) > 1 else None


def per_device(fn, mesh):
    """``fn`` applied to each device's part of its arguments (array leaves split along their
    leading axis over ``mesh``; other leaves static), through ``shard_map``: every device runs its
    own part with no communication. A batch under a plain ``jit`` would be partitioned by XLA
    instead, which reduces a vmapped ``while_loop``'s "any body still iterating" across the devices
    every iteration (the cost is in ``docs/benchmarks.md``).
    ``mesh=None`` (one device): ``fn`` itself."""
    if mesh is None:
        return fn
    import equinox as eqx
    from jax.sharding import PartitionSpec

    spec = PartitionSpec(mesh.axis_names[0])

    def run(*trees):
        arrays, static = eqx.partition(trees, eqx.is_array)
        return _shard_map(lambda a: fn(*eqx.combine(a, static)), mesh=mesh, in_specs=(spec,),
                          out_specs=spec)(arrays)

    return run


def _shard_map(f, **kw):
    # no replication types: every value inside is per-device (a scan's constant initial carry
    # would otherwise need a pcast to "varying")
    try:
        from jax import shard_map

        return shard_map(f, check_vma=False, **kw)
    except ImportError:  # JAX < 0.7
        from jax.experimental.shard_map import shard_map

        return shard_map(f, check_rep=False, **kw)


def shard(tree, devices, pad: int = 0):
    """Pad the leading axis of every array leaf by ``pad`` copies of its last entry and split it over
    a 1-D mesh of ``devices`` (across processes too)."""
    from jax.sharding import NamedSharding, PartitionSpec

    sharding = NamedSharding(batch_mesh(devices), PartitionSpec("batch"))
    multi = is_multiprocess(devices)

    def put(x):
        if not isinstance(x, (jax.Array, np.ndarray)) or x.ndim == 0:
            return x
        if multi:  # every process holds the whole batch on the host; each keeps its devices' shards
            host = np.asarray(x)
            if pad:
                host = np.concatenate([host, np.repeat(host[-1:], pad, axis=0)], axis=0)
            return jax.make_array_from_callback(host.shape, sharding, lambda idx: host[idx])
        if pad:
            x = jnp.concatenate([x, jnp.repeat(x[-1:], pad, axis=0)], axis=0)
        return jax.device_put(x, sharding)

    return jax.tree_util.tree_map(put, tree)


def gather(tree):
    """Every array leaf as a NumPy array holding the whole batch, on every process (a collective
    under ``jax.distributed``: every process must call it); other leaves unchanged."""
    from jax.experimental import multihost_utils

    def get(x):
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            return np.asarray(multihost_utils.process_allgather(x, tiled=True))
        return np.asarray(x) if isinstance(x, jax.Array) else x

    return jax.tree_util.tree_map(get, tree)
