"""Every ``k``-th accepted step and the dense output of a fused error-controlled run, read from the
record of its accepted steps.

The fused adaptive kernel can record where each accepted step started (``R``, ``Pi``, ``t``) and how
long it was (``h``), as it does for the kernels' derivative passes (:mod:`.adaptive_backward`). The
state after ``j`` accepted steps is the start of step ``j + 1``, so the buffers the XLA loop writes
as it goes (:func:`jaxrot.driver.attempts.while_attempts` with ``every`` or ``dense``) are gathers of
the record, written after the run instead of inside the loop::

    after(j) = record[j]                 j < n       (record[0] is the initial state at t0)
             = the last state, t_end     j = n       (n the accepted steps)
             = the last state, t = +inf  j > n       (never reached, as the XLA loop leaves them)

With an event that is not terminal the record is the same. A terminal event ends its body's loop
with the step across which the condition changed sign, accepted and counted, as in the XLA loop; the
kernel records that step's start as well and, in the next column ``n``, the state the step ended in
and its time: ``after(n)`` is that column (the XLA loop's last state, which its buffers hold for the
frames after it; the trajectory replaces the steps' frames after the event time by the event state,
and the dense output ends at the event). The kernel needs no other code for either, and the values
are the kernel's own states, bit for bit. A body that accepts more steps than the record holds (a
body stopped by its event: one column more) fails with a message naming the remedy.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["buffers"]


def _after(rec, n, last, t_end, idx):
    """The times (B, m) and states after ``idx`` (m,) accepted steps of each body (module docstring)."""
    R_rec, Pi_rec, t_rec = rec
    j = jnp.clip(idx, 0, R_rec.shape[1] - 1)
    inside = idx[None, :] < n[:, None]

    def take(x, held):
        g = x[:, j]
        keep = inside.reshape(inside.shape + (1,) * (x.ndim - 2))
        return jnp.where(keep, g, jnp.expand_dims(held, 1))

    t = jnp.where(inside, t_rec[:, j], jnp.where(idx[None, :] == n[:, None], t_end[:, None], jnp.inf))
    return t, take(R_rec, last[0]), take(Pi_rec, last[1])


def buffers(record, run, t0, t1, every: int | None, dense: bool, max_steps: int, terminal: bool = False):
    """``(steps, dense)`` for :attr:`jaxrot.driver.layout.Frames.dense` of a batch: each ``(times, State)``
    with a leading batch axis, or None where not asked for.

    Args:
      record: the kernel's :class:`~jaxrot.kernels.adaptive_pairs.Record` of every step (rows in launch
        order: row ``k`` is body ``order[k]``; ``order`` None: the caller's order).
      run: the run's :class:`~jaxrot.kernels.adaptive_pairs.AdaptiveRun`: its outputs not reached hold
        the last state, so the last output is each body's last state (but after a terminal event).
      terminal: the run has a terminal event: a body that found it (a finite event time) has the
        state after its crossing step in the record's column ``n`` (module docstring).
      t0: the start time; ``t1`` the last output time, where a successful run ends.
      every: keep the state after every ``every``-th accepted step (``max_steps // every`` frames), or None.
      dense: keep the state after every accepted step, the initial one first (``max_steps + 1`` frames).
    """
    import equinox as eqx

    from ..geometry.state import State

    R_rec, Pi_rec, t_rec, h_rec, _, order = record[:6]
    if order is not None:
        inverse = jnp.argsort(order)
        R_rec, Pi_rec, t_rec, h_rec = R_rec[inverse], Pi_rec[inverse], t_rec[inverse], h_rec[inverse]
    cap = R_rec.shape[1]
    n_acc = run.n_accepted
    # where the last accepted step ended: at t1 for a run that reached it, else where it stopped
    j = jnp.clip(n_acc - 1, 0, cap - 1)[:, None]
    stopped = jnp.take_along_axis(t_rec, j, 1)[:, 0] + jnp.take_along_axis(h_rec, j, 1)[:, 0]
    t_end = jnp.where(run.result == 0, jnp.asarray(t1, t_rec.dtype), stopped)
    last = (run.R[:, -1], run.Pi[:, -1])
    need = n_acc
    if terminal:  # a body stopped by its event: its last state and time are the record's column n
        ended = jnp.isfinite(run.event_time)
        k = jnp.clip(n_acc, 0, cap - 1)
        t_end = jnp.where(ended, jnp.take_along_axis(t_rec, k[:, None], 1)[:, 0], t_end)
        last = tuple(jnp.where(ended.reshape((-1,) + (1,) * (held.ndim - 1)), x[jnp.arange(x.shape[0]), k], held)
                     for x, held in zip((R_rec, Pi_rec), last))
        need = n_acc + ended.astype(n_acc.dtype)
    # a body whose steps were not all recorded would lose frames: fail, as the XLA loop never would
    n_acc = eqx.error_if(n_acc, need > cap,
                         f"a body accepted more steps than the fused kernel records ({cap}) for SaveAt(steps=...) or "
                         "SaveAt(dense=True): lower max_steps, or run with executor=jaxrot.XLA()")
    rec = (R_rec, Pi_rec, t_rec)
    out = []
    for idx in ((jnp.arange(max_steps // every, dtype=jnp.int32) + 1) * every if every is not None else None,
                jnp.arange(max_steps + 1, dtype=jnp.int32) if dense else None):
        if idx is None:
            out.append(None)
            continue
        t, R, Pi = _after(rec, n_acc, last, t_end, idx)
        out.append((t, State(R, Pi)))
    if dense:  # its first frame is the initial state at t0, also where no step was accepted
        t, s = out[1]
        out[1] = (t.at[:, 0].set(jnp.asarray(t0, t.dtype)), s)
    return tuple(out)


def no_derivative(x, what: str):
    """``x`` as a value whose derivative raises a ValueError saying ``what`` is not differentiated in the
    kernels (instead of a missing differentiation rule deep inside the launch)."""
    f = jax.custom_jvp(lambda x: x)

    @f.defjvp
    def _jvp(primals, tangents):
        raise ValueError(f"{what} of a fused error-controlled run are not differentiated in the kernels: run it "
                         "with executor=jaxrot.XLA() to differentiate it")

    return f(x)
