"""How a run's frames are laid out in memory and split into compiled programs on the host.

XLA's CPU runtime executes a program inline only if it has at most 8 operations or touches no buffer
over 512 bytes; otherwise it dispatches it to its thread pool, which costs tens of microseconds per
program. So a frame's outputs are packed into one row of one buffer (:func:`row_packing`), a short run's
frames into one buffer per number (:class:`Columns`), and a long run is a sequence of *chunks* of
:data:`FRAMES_PER_CHUNK` frames, one compiled program for any length (:func:`run_chunks`, joined by
:func:`join`).
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..geometry.state import State
from .progress import Pacer

#: frames skipped as a group by one conditional in a partly used chunk
SKIP_GROUP = 32


def row_packing(shapes, dtype):
    """``(pack, unpack, width)``: a pytree of arrays of ``shapes`` as one row of ``dtype`` numbers and
    back (for a leading axis of rows); integers and flags are bit-cast through the same-width integer
    (exact), other floating types converted."""
    leaves, treedef = jax.tree_util.tree_flatten(shapes)
    dtype = jnp.dtype(dtype)
    as_int = jnp.int64 if dtype.itemsize == 8 else jnp.int32
    sizes = [int(np.prod(v.shape)) for v in leaves]

    def bits(v):
        return not jnp.issubdtype(v.dtype, jnp.floating)

    def pack(tree):
        return jnp.concatenate([
            lax.bitcast_convert_type(jnp.ravel(v).astype(as_int), dtype) if bits(v) else jnp.ravel(v).astype(dtype)
            for v in jax.tree_util.tree_leaves(tree)])

    def unpack(rows):
        out, k = [], 0
        for v, n in zip(leaves, sizes):
            x = rows[:, k:k + n]
            x = (lax.bitcast_convert_type(x, as_int) if bits(v) else x).astype(v.dtype)
            out.append(x.reshape(rows.shape[:1] + v.shape))
            k += n
        return jax.tree_util.tree_unflatten(treedef, out)

    return pack, unpack, sum(sizes)


class Columns(eqx.Module):
    """A short run's frames as one buffer per number (``layout``: the frame's tree and leaf shapes).

    XLA's CPU runtime runs a program inline only if it has at most 8 operations or touches no buffer
    over 512 bytes; otherwise it goes through its thread pool, tens of microseconds a program. 64
    frames of one number are 512 bytes in float64, so a short run's whole program qualifies where a
    (frames, 17) buffer would not."""

    cols: tuple
    layout: tuple = eqx.field(static=True)

    def unpack(self):
        treedef, specs = self.layout
        shapes = jax.tree_util.tree_unflatten(treedef, [jax.ShapeDtypeStruct(sh, d) for sh, d in specs])
        return row_packing(shapes, self.cols[0].dtype)[1](jnp.stack(self.cols, axis=1))


#: frames of a run short enough for :class:`Columns` (one compiled program for any such run)
SHORT_RUN_FRAMES = 64


#: frames per compiled chunk of :func:`simulate`: a run is a sequence of such chunks, the last one
#: partly skipped, so a new ``n_steps`` (same ``save_every``) reuses the compiled chunk
FRAMES_PER_CHUNK = 1024


#: saved-frame memory of one compiled chunk of a batch: a chunk holds as many frames (a power of
#: two, at most :data:`FRAMES_PER_CHUNK`) as fit, so 10^6 bodies run one frame per chunk
BATCH_CHUNK_BYTES = 1 << 22


def batch_frames_per_chunk(batch: int, itemsize: int) -> int:
    per_frame = batch * 16 * itemsize  # R (9), Pi (3), t and the frame's stats
    f = int(max(1, min(FRAMES_PER_CHUNK, BATCH_CHUNK_BYTES // per_frame)))
    return 1 << (f.bit_length() - 1)


def run_chunks(run_chunk, carry, n_frames: int, per_chunk: int, report=None):
    """All frames in chunks of ``per_chunk`` frames, ``run_chunk(carry, n_valid) -> (carry, out)``
    being one compiled program for any count: ``(carry, chunk outputs, valid frames of each)``;
    :func:`join` cuts and joins them. With a progress ``report``
    (:class:`~jaxrot.driver.progress.RunProgress`) the program is compiled first (a chunk of no frames,
    reported as the compilation) and the run goes in pieces, each a call of the same chunk with at most
    ``per_chunk`` valid frames, sized by a :class:`~jaxrot.driver.progress.Pacer`; ``report(frames_done)``
    follows each. The frames are the same either way."""
    def call(c, nv):
        return run_chunk(c, np.asarray(nv, np.int32))

    pacer = None
    if report is not None:
        report.compile(lambda: call(carry, 0))
        pacer = Pacer(most=per_chunk)
    parts, nvs, done = [], [], 0
    while done < n_frames:
        nv = min(per_chunk if pacer is None else pacer.n, n_frames - done)
        carry, part = call(carry, nv) if pacer is None else pacer.run(report, nv, lambda k: call(carry, k))
        parts.append(part)
        nvs.append(nv)
        done += nv
        if report is not None:
            report(done)
    return carry, tuple(parts), tuple(nvs)


class Frames(eqx.Module):
    """What a loop returns for one body or a batch (a leading axis on every leaf): the saved frames,
    initial state first (``ts``, ``states``, ``stats`` per saved interval), the first failed step and
    its RESULTS code, the event's carry (or None; a :class:`LocatedEvent` where the executor located
    the event itself, as the fused adaptive kernel does), the step counts (``(n_accepted, n_rejected,
    err_estimate)`` of an error-controlled run, else None) and what the dense output needs (or None).
    :func:`jaxrot.driver.integrate.trajectory` makes the :class:`~jaxrot.Trajectory` of it."""

    ts: jax.Array
    states: State
    stats: object
    failed: jax.Array
    reason: jax.Array
    event: object = None
    counts: tuple | None = None
    dense: tuple | None = None


class LocatedEvent(eqx.Module):
    """An event already located by the executor (the fused adaptive kernel locates it in the kernel):
    its ``time`` and ``state`` per body, NaN where none was found; in :attr:`Frames.event` in place of
    the loop's :class:`~jaxrot.driver.events.EventCarry`."""

    time: jax.Array
    state: State


@functools.partial(jax.jit, static_argnames=("nvs", "batched"))
def join(state0, t0, parts, nvs, tail, batched=False):
    """The frames from the chunks' outputs: valid frames cut, joined, the initial frame prepended —
    one dispatch (a tiny program per distinct ``nvs``) instead of dozens of eager ops; ``tail``: the
    final carry's ``(failed, reason, event, steps taken)``; ``batched``: every leaf has a leading body axis."""
    parts = tuple(p.unpack() if isinstance(p, Columns) else p for p in parts)

    def one(state0, parts, tail):
        states, ts, stats = jax.tree_util.tree_map(
            lambda *xs: jnp.concatenate([x[:nv] for x, nv in zip(xs, nvs)], axis=0), *parts)
        return assemble(state0, t0, states, ts, stats, *tail)

    return jax.vmap(one)(state0, parts, tail) if batched else one(state0, parts, tail)


def assemble(state0, t0, states, ts, stats, failed, reason, event=None, steps=None) -> Frames:
    """One body's frames, the initial state first; ``steps``: the steps taken (constant steps)."""
    R = jnp.concatenate([state0.R[None], states.R], axis=0)
    Pi = jnp.concatenate([state0.Pi[None], states.Pi], axis=0)
    ts = jnp.concatenate([jnp.reshape(t0, (1,)), ts])
    counts = None if steps is None else (steps, jnp.zeros_like(steps), None)
    return Frames(ts, State(R, Pi), stats, failed, reason, event, counts)
