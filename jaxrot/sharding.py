"""The one sharding helper: a batch split over devices, in one process or many (``jax.distributed``).

In one process the devices are the local ones and a batch is placed with ``jax.device_put``. Under
JAX's multi-controller runtime (``jax.distributed.initialize``, one process per host or GPU) the
default devices are *all* processes' devices: every process passes the same full batch (the usual
SPMD convention), each keeps only the shards of its own devices (``jax.make_array_from_callback``),
the compiled program runs on every process at once, and :func:`gather` brings the results back to
every process as NumPy arrays.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def default_devices(devices=None) -> list:
    """``devices`` as a non-empty list; ``None``: every device of every process (in one process, the
    local devices)."""
    devices = list(jax.devices() if devices is None else devices)
    if not devices:
        raise ValueError("devices must be a non-empty list of JAX devices (default: all devices)")
    return devices


def is_multiprocess(devices) -> bool:
    return any(d.process_index != jax.process_index() for d in devices)


def shard(tree, devices, pad: int = 0):
    """Pad the leading axis of every array leaf by ``pad`` copies of its last entry and split it over
    a 1-D mesh of ``devices`` (across processes too)."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    sharding = NamedSharding(Mesh(np.asarray(devices), ("batch",)), PartitionSpec("batch"))
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
