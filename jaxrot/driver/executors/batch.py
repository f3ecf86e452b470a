"""The batch loop shared by the executors that run many bodies: the loop ``vmap`` ped over the bodies,
optionally split over devices (``shard_map``: every device runs its own part, no communication) and, on
CPUs, run in cache-sized *blocks* of bodies (``lax.map`` over blocks, each block scanned over all its
steps, so its data stay in cache)."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..adjoint import reverse_only
from ..checks import is_concrete
from ..layout import Frames, batch_frames_per_chunk, join, run_chunks
from ..lean_jit import lean_jit
from ..constant_attempts import constant_frames
from ..loop import empty_stats, exact_frames, init_carry, last_frame, run_steps, scan_frames, steps_from, loop_args
from ..paced import one_call, steps_in_pieces
from ..sharding import batch_mesh, default_devices, is_multiprocess, per_device, shard
from .base import RunSpec

#: bodies per cache block on CPU (``jaxrot bench throughput`` compares block sizes)
CPU_BLOCK = 512


def auto_block(block, part: int, devices) -> int | None:
    """The block size to use: ``None`` (one ``vmap`` over each device's part) on accelerators and for
    parts that fit one block; else ``block`` (``"auto"``: :data:`CPU_BLOCK` on CPU devices)."""
    if isinstance(block, str) and block == "auto":
        block = CPU_BLOCK if all(d.platform == "cpu" for d in devices) else None
    elif block is not None and (isinstance(block, bool) or not isinstance(block, (int, np.integer)) or block < 1):
        raise ValueError(f"block_size must be a positive int, None or 'auto', got {block!r}")
    if block is None or block >= part:
        return None
    return int(block)


def in_blocks(fn, block, *trees):
    """``fn(*trees)`` for trees with a leading batch axis, run as ``lax.map`` over blocks of ``block``
    bodies (the last block padded by repeating the last body; the padding dropped)."""
    if block is None:
        return fn(*trees)
    arrays, static = eqx.partition(trees, eqx.is_array)
    B = jax.tree_util.tree_leaves(arrays)[0].shape[0]
    nb = -(-B // block)

    def split(x):
        x = jnp.concatenate([x, jnp.repeat(x[-1:], nb * block - B, axis=0)], axis=0)
        return x.reshape((nb, block) + x.shape[1:])

    out = lax.map(lambda a: fn(*eqx.combine(a, static)), jax.tree_util.tree_map(split, arrays))
    return jax.tree_util.tree_map(lambda x: x.reshape((nb * block,) + x.shape[2:])[:B], out)


def blocked_per_device(fn, block, mesh, *trees):
    """:func:`in_blocks` on each device's part of the batch."""
    return per_device(lambda *t: in_blocks(fn, block, *t), mesh)(*trees)


@lean_jit
def _batch_init(method, system, state0, dt, t0, system_axis, monitor=None, event=None):
    return jax.vmap(lambda p, s: init_carry(method, p, s, dt, t0, monitor, event), in_axes=(system_axis, 0))(
        system, state0)


@lean_jit
def _batch_chunk(method, system, carry, dt, t0, n_valid, n_frames, save_every, system_axis, unroll, block=None,
                 monitor=None, mesh=None, event=None):
    """``n_frames`` frames of every body (frames from ``n_valid`` on skipped); the compiled program
    depends on ``n_frames`` (fixed per batch size), not on the run's length."""

    def one(p, c):
        return scan_frames(method, p, c, dt, t0, n_frames, save_every, unroll, monitor, n_valid, event=event)

    if system_axis is None:
        return blocked_per_device(lambda c: jax.vmap(lambda c1: one(system, c1))(c), block, mesh, carry)
    return blocked_per_device(lambda p, c: jax.vmap(one)(p, c), block, mesh, system, carry)


@lean_jit
def _batch_final(method, system, states0, dt, t0, n_steps, system_axis, block=None, monitor=None, event=None):
    def one(p, s):
        c, stats = run_steps(method, p, s, dt, t0, n_steps, monitor, event)
        return last_frame(s, t0, dt, c, stats)

    if system_axis is None:
        return in_blocks(jax.vmap(lambda s: one(system, s)), block, states0)
    return in_blocks(jax.vmap(one), block, system, states0)


@lean_jit
def _batch_steps(method, system, carry, stats, dt, t0, n, system_axis, block=None, monitor=None, mesh=None,
                 event=None):
    """``n`` (traced) more steps of every body from ``carry``, statistics folded into ``stats``."""
    def one(p, c, s):
        return steps_from(method, p, c, s, dt, t0, n, monitor, event)

    if system_axis is None:
        return blocked_per_device(lambda c, s: jax.vmap(lambda c1, s1: one(system, c1, s1))(c, s), block, mesh, carry,
                                  stats)
    return blocked_per_device(lambda p, c, s: jax.vmap(one)(p, c, s), block, mesh, system, carry, stats)


@lean_jit
def _batch_last(states0, t0, dt, carry, stats):
    return jax.vmap(lambda s, c, a: last_frame(s, t0, dt, c, a))(states0, carry, stats)


@lean_jit
def _batch_stats0(states0):
    return jax.vmap(lambda _: empty_stats())(states0.Pi)


def inputs(spec) -> list:
    """The leaves of a run's inputs (method, system, initial states, step, start time, monitor, event):
    whether any is traced, and how, decides how the run is carried out."""
    return jax.tree_util.tree_leaves((spec.method, spec.system, spec.state0, getattr(spec, "dt", None), spec.t0,
                                      spec.monitor, spec.event))


def place_batch(spec: RunSpec, devices):
    """``(system, states0, pad, mesh)``: the batch padded to a multiple of the devices and split
    over them (one device: unchanged)."""
    system, states0 = spec.system, spec.state0
    batched = (system, states0) if spec.stacked else states0
    pad = (-states0.R.shape[0]) % len(devices)
    if is_multiprocess(devices) and not all(is_concrete(x) for x in jax.tree_util.tree_leaves(batched)):
        raise ValueError("under jax.distributed a batch takes concrete (not traced) initial states: every "
                         "process passes the whole batch")
    if len(devices) > 1:
        batched = shard(batched, devices, pad)
    system, states0 = batched if spec.stacked else (system, batched)
    return system, states0, pad, batch_mesh(devices)


def map_batch(fn, block, devices, *trees):
    """``vmap(fn)`` over the leading axis of ``trees``, split over ``devices`` (padded to a multiple
    of them) and run in blocks of ``block`` bodies on each (see :func:`auto_block`)."""
    devices = [jax.devices()[0]] if devices is None else default_devices(devices)
    batch = jax.tree_util.tree_leaves(eqx.filter(trees, eqx.is_array))[0].shape[0]
    pad = (-batch) % len(devices)
    if is_multiprocess(devices) and not all(is_concrete(x) for x in jax.tree_util.tree_leaves(trees)):
        raise ValueError("under jax.distributed a batch takes concrete (not traced) initial states: every "
                         "process passes the whole batch")
    if len(devices) > 1:
        trees = shard(trees, devices, pad)
    block = auto_block(block, (batch + pad) // len(devices), devices)
    out = blocked_per_device(jax.vmap(fn), block, batch_mesh(devices), *trees)
    return jax.tree_util.tree_map(lambda x: x[:batch], out) if pad else out


@lean_jit
def _batch_exact(method, system, states0, dt, t0, n_frames: int, save_every: int, system_axis, unroll: int, block=None,
                 monitor=None, event=None, reverse: bool = False) -> Frames:
    """Every body's frames from a scan of exactly ``n_frames`` frames (a batch inside someone's trace,
    :func:`~jaxrot.driver.loop.exact_frames`), in blocks of ``block`` bodies."""
    def one(p, s, dt, t0):
        return exact_frames((method, p, s, dt, t0, monitor, event), n_frames, save_every, unroll, reverse)

    # the step and the start time go to every body as its own (B,) copies: a derivative taken per body
    # (forward tangents in reverse mode) then returns per-body cotangents that the copy sums, where a
    # value shared by the bodies of a vmap would need them summed inside the custom rule
    B = states0.R.shape[0]
    times = (jnp.broadcast_to(dt, (B,) + jnp.shape(dt)), jnp.broadcast_to(t0, (B,) + jnp.shape(t0)))
    if system_axis is None:
        return in_blocks(jax.vmap(lambda s, dt, t0: one(system, s, dt, t0)), block, states0, *times)
    return in_blocks(jax.vmap(one), block, system, states0, *times)


def batch_frames(spec: RunSpec, block, devices) -> Frames:
    """Every saved frame of every body: chunks of a length fixed by the batch size (a new number of
    steps reuses the compiled chunk), blocked by ``block`` (``"auto"``, an int or None) on each of
    ``devices`` (None: the default device only); inside someone's trace on one device, one scan of
    exactly the run's frames (the chunks' skipped frames would be differentiated too)."""
    devices = [jax.devices()[0]] if devices is None else default_devices(devices)
    batch = spec.state0.R.shape[0]
    m, dt, t0, ev = spec.method, spec.dt, spec.t0, spec.event
    leaves = inputs(spec)
    if len(devices) == 1 and not all(map(is_concrete, leaves)):
        return _batch_exact(m, spec.system, spec.state0, dt, t0, spec.n_frames, spec.save_every,
                            0 if spec.stacked else None, spec.unroll, auto_block(block, batch, devices), spec.monitor,
                            ev, reverse_only(leaves))
    system, states0, pad, mesh = place_batch(spec, devices)
    block = auto_block(block, (batch + pad) // len(devices), devices)
    axis = 0 if spec.stacked else None
    carry = _batch_init(m, system, states0, dt, t0, axis, spec.monitor, ev)
    F = batch_frames_per_chunk(states0.R.shape[0], jnp.dtype(dt.dtype).itemsize)

    def run_chunk(c, nv):
        return _batch_chunk(m, system, c, dt, t0, nv, F, spec.save_every, axis, spec.unroll, block, spec.monitor, mesh,
                            ev)

    carry, parts, nvs = run_chunks(run_chunk, carry, spec.n_frames, F, spec.report)
    frames = join(states0, t0, parts, nvs, (carry[3], carry[4], carry[6], carry[2]), batched=True)
    if pad:
        frames = jax.tree_util.tree_map(lambda x: x[:batch], frames)
    return frames


def batch_final(spec: RunSpec, block, devices=None) -> Frames:
    """Only the last state of every body, the step count a traced loop bound (one program for any
    count), blocked by ``block`` on the default device; with a progress report, in pieces of steps
    (on ``devices``: None, the default device only)."""
    if spec.report is not None:
        return _batch_final_in_pieces(spec, block, devices)
    states0 = spec.state0
    block = auto_block(block, states0.R.shape[0], jax.devices()[:1])
    axis = 0 if spec.stacked else None
    return _batch_final(spec.method, spec.system, states0, spec.dt, spec.t0, jnp.asarray(spec.n_steps, jnp.int32),
                        axis, block, spec.monitor, spec.event)


def _batch_final_in_pieces(spec: RunSpec, block, devices) -> Frames:
    """:func:`batch_final` with a progress report: the steps in pieces (:func:`~jaxrot.driver.progress.steps_in_pieces`),
    the same steps and statistics."""
    devices = [jax.devices()[0]] if devices is None else default_devices(devices)
    batch = spec.state0.R.shape[0]
    system, states0, pad, mesh = place_batch(spec, devices)
    block = auto_block(block, (batch + pad) // len(devices), devices)
    axis = 0 if spec.stacked else None
    m, dt, t0, mon, ev = spec.method, spec.dt, spec.t0, spec.monitor, spec.event

    def start():
        return _batch_init(m, system, states0, dt, t0, axis, mon, ev), _batch_stats0(states0)

    def piece(c, n):
        return _batch_steps(m, system, c[0], c[1], dt, t0, np.asarray(n, np.int32), axis, block, mon, mesh, ev)

    carry, stats = steps_in_pieces(spec.report, spec.n_steps, start, piece)
    frames = _batch_last(states0, t0, dt, carry, stats)
    return jax.tree_util.tree_map(lambda x: x[:batch], frames) if pad else frames


def batch_while(spec: RunSpec, executor) -> Frames:
    """Every body's constant steps in the loop of attempts (a terminal event ends each), placed by
    ``executor``'s ``map_bodies``, compiled once per configuration."""
    leaves = inputs(spec)
    reverse = reverse_only(leaves)

    def run():
        return _batch_while(executor, loop_args(spec), (spec.n_steps, spec.save_every, spec.final_only, spec.adjoint),
                            spec.stacked, reverse)

    concrete = all(map(is_concrete, leaves))
    return run() if spec.report is None or not concrete else one_call(spec.report, run, spec.n_steps)


@eqx.filter_jit
def _batch_while(executor, args, loop, stacked: bool, reverse: bool) -> Frames:
    map_bodies = type(executor).map_bodies.__get__(executor)
    method, system, state0, dt, t0, monitor, event = args

    def one(p, s):
        return constant_frames((method, p, s, dt, t0, monitor, event), *loop, reverse)

    if stacked:
        return map_bodies(one, system, state0)
    return map_bodies(lambda s: one(system, s), state0)
