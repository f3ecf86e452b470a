"""Reverse mode of a fused error-controlled run in the kernels: each body replays its own accepted
steps backwards, one thread per body, through its step's derivative generated from the pair's JAX
code (:mod:`jaxrot.kernels.generate_vjp`).

The derivative of an error-controlled run is that of the steps it accepted (the controller's choice
carries none; :mod:`jaxrot.driver.adjoint`), as for the XLA loop. The forward kernel, run for a
gradient, records where each accepted step started and how long it was (``R``, ``Pi``, ``t``, ``h``)
and, for each output, how many steps had been accepted when it was written. The backward kernel then
walks each body's steps from the last to the first::

    c <- c + (cotangents of the outputs written after step k)
    (c, cF_k) <- vjp_k(c)          the step's derivative at its recorded start
    cF <- cF + cF_k                (the system's arrays: the moments, the torque's parameters)

and returns the cotangents of the initial state and, summed over the bodies, of the system's arrays.
(Forward mode needs no record: the tangents are carried in the run, :mod:`jaxrot.kernels.adaptive_tangents`.)

Memory against recomputation (:func:`record_layout`, the adjoint's ``checkpoints``): by default every
accepted step's start is stored (13 numbers a step), so nothing is computed twice and the backward
pass costs the derivatives of the accepted steps only. The record holds ``capacity`` steps a body
(:func:`capacity_for`: ``max_steps`` where the batch's record fits in :data:`RECORD_BYTES`, fewer
otherwise); a body that accepts more fails the derivative with a message. With
``RecursiveCheckpointAdjoint(checkpoints=C)`` the forward run keeps each step's time and length (2
numbers a step, for up to ``T`` steps) and the state of every ``s = ceil(T / C)``-th step only; the
backward pass recomputes the states of each stretch of ``s`` steps from its checkpoint with the
step itself (generated from the same JAX code) before it walks them back::

    memory  12 C + 2 T + 13 s numbers a body     (every step stored: 13 T)
    work    one more step per accepted step, the step's derivative as before

The recomputed states are the generated step's, which may differ from the forward kernel's attempt in the last bits. A constant-step
run's record (:class:`~jaxrot.kernels.adaptive_pairs.Record`,
:func:`jaxrot.kernels.adaptive_derivatives.fixed_in_kernels`) holds one column of times and lengths,
``t0`` and ``h`` (step ``k`` at ``t0 + k h``, as the loop takes it), and either every step's state or
its frames as the checkpoints: the states the run wrote (each the end of a step or a stretch), read
after each body's initial state rather than copied behind it.

Reference: Griewank & Walther, *Evaluating Derivatives* (2008), ch. 12 (reverse sweeps over a stored
tape); diffrax's ``RecursiveCheckpointAdjoint`` (the derivative of the steps taken).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from . import host_threads
from ._common import jax_kernel, so3_funcs, warp
from .generate_vjp import carried, flat_system, lower_vjp, recomputes, vjp_funcs, vjp_reason

__all__ = ["RECORD_BYTES", "steps_in_budget", "capacity_for", "record_layout", "why_not_backward", "backward"]

#: the memory the record of a batch's accepted steps may take by default (bytes)
RECORD_BYTES = 512 * 2**20


def steps_in_budget(bodies: int, itemsize: int, numbers: int = 13) -> int:
    """How many steps a body's record holds within :data:`RECORD_BYTES` for the batch, at ``numbers``
    numbers of ``itemsize`` bytes a step."""
    return RECORD_BYTES // max(1, bodies * numbers * itemsize)


def capacity_for(bodies: int, max_steps: int, itemsize: int, checkpoints: int | None = None) -> int:
    """The accepted steps recorded per body: ``checkpoints`` if given, else ``max_steps`` or as many as
    :data:`RECORD_BYTES` holds for the batch (13 numbers a step), at least 64."""
    if checkpoints is not None:
        return int(checkpoints)
    return int(max(64, min(int(max_steps), steps_in_budget(bodies, itemsize))))


def record_layout(bodies: int, max_steps: int, itemsize: int, checkpoints: int | None = None):
    """The record a differentiated run keeps per body (module docstring): without ``checkpoints``
    :func:`capacity_for`'s steps, each whole; with it ``(T, C)``: the times and lengths of ``T`` steps
    (``max_steps``, or as many as :data:`RECORD_BYTES` holds at 2 numbers a step, at least
    ``checkpoints``) and the states of every ``ceil(T / C)``-th step, ``C <= checkpoints`` of them."""
    if checkpoints is None:
        return capacity_for(bodies, max_steps, itemsize)
    T = max(1, min(int(max_steps), max(int(checkpoints), steps_in_budget(bodies, itemsize, 2))))
    stride = -(-T // min(int(checkpoints), T))
    return T, -(-T // stride)


def why_not_backward(pair, system, dtype, memory_leaves: int, event) -> str | None:
    """Why a fused run of ``pair`` cannot be differentiated in the kernels in reverse mode (its
    derivatives then come from the XLA loop), or None."""
    if event is not None:
        return "the kernels' backward pass does not differentiate an event's location"
    return vjp_reason(pair, system, dtype, bool(memory_leaves))


@functools.lru_cache(maxsize=None)
def derivative_module(dtype_name: str, key: str) -> str:
    """The Warp module of the derivative kernels of ``key`` (and of its check before use,
    :mod:`jaxrot.kernels.generate_vjp`): one compilation of the large generated functions for all of
    them. Each operation rounded on its own, as in the forward kernels."""
    from ._common import fuse_fp

    name = f"jaxrot_derivatives_{key}_{dtype_name}"
    warp().set_module_options({"fuse_fp": fuse_fp(), "enable_backward": False}, module=name)
    return name


def define_kernels(dtype_name: str, key: str) -> None:
    """Define the derivative kernel of ``key`` in its module before the module is first compiled."""
    backward_kernel(dtype_name, key)


@functools.lru_cache(maxsize=None)
def _when(S):
    """``when(t_rec, h_rec, b, k) -> (t, h)``: step ``k``'s start and length, read from the record, or
    with one column of each (constant steps) ``t0 + k h`` (as the constant-step loop takes it) and ``h``."""
    wp = warp()

    def when(t_rec, h_rec, b, k):
        t = t_rec[b, 0] + S(k) * h_rec[b, 0]
        h = h_rec[b, 0]
        if h_rec.shape[1] > 1:
            t = t_rec[b, k]
            h = h_rec[b, k]
        return t, h

    # (annotations set here: this module's are strings, which Warp would look up among its globals)
    when.__annotations__ = dict(t_rec=wp.array2d(dtype=S), h_rec=wp.array2d(dtype=S), b=int, k=int)
    when.__name__ = when.__qualname__ = f"when_{S.__name__}"
    return wp.func(when)


@functools.lru_cache(maxsize=None)
def _kept(S):
    """``kept(R_rec, Pi_rec, R0, Pi0, b, c, shift) -> (R, Pi)``: the ``c``-th state a body's record keeps:
    ``R_rec[b, c]``, or with ``shift`` 1 (a record that keeps its frames, :class:`~jaxrot.kernels.
    adaptive_pairs.Record`'s ``start``) ``R0[b]`` first, then ``R_rec[b, c - 1]``."""
    wp = warp()
    c = so3_funcs(S)

    def kept(R_rec, Pi_rec, R0, Pi0, b, k, shift):
        R = R0[b]
        Pi = Pi0[b]
        if k >= shift:
            R = R_rec[b, k - shift]
            Pi = Pi_rec[b, k - shift]
        return R, Pi

    A2 = wp.array2d
    kept.__annotations__ = dict(R_rec=A2(dtype=c.M), Pi_rec=A2(dtype=c.V), R0=wp.array(dtype=c.M),
                                Pi0=wp.array(dtype=c.V), b=int, k=int, shift=int)
    kept.__name__ = kept.__qualname__ = f"kept_{S.__name__}"
    return wp.func(kept)


@functools.lru_cache(maxsize=None)
def backward_kernel(dtype_name: str, key: str):
    """``(S, F_T, kernel)``: the backward sweep over each body's recorded steps (module docstring)."""
    wp = warp()
    S = {"float32": wp.float32, "float64": wp.float64}[dtype_name]
    c = so3_funcs(S)
    V, M = c.V, c.M
    fns, F_T, MT = vjp_funcs(S, key)
    vjp, init_vjp, minit, mstep = fns["vjp"], fns["init_vjp"], fns["minit"], fns["mstep"]
    fstep = fns.get("fstep", mstep)
    CARRIED, STRIDED = carried(key), recomputes(key)
    when, kept = _when(S), _kept(S)

    def back(R_rec, Pi_rec, R0, Pi0, t_rec, h_rec, n_acc, out_k, cR_out, cPi_out, F, n_out, stride, shift, cR0, cPi0,
             cF, m_rec, R_scr, Pi_scr, m_scr):
        b = wp.tid()
        cR = M()
        cPi = V()
        cm = MT()
        acc = F_T()
        n = n_acc[b]  # (0 for a body whose steps were not all recorded: :func:`_unrecorded`)
        if wp.static(CARRIED):  # the memory at each step's start (each checkpoint's), from the first
            if n > 0:
                Rq, Piq = kept(R_rec, Pi_rec, R0, Pi0, b, 0, shift)
                m = minit(Rq, Piq, t_rec[b, 0], F)
                for k in range(n):
                    if wp.static(STRIDED):
                        if k % stride == 0:
                            m_rec[b, k // stride] = m
                            Rq, Piq = kept(R_rec, Pi_rec, R0, Pi0, b, k // stride, shift)
                        tk, hk = when(t_rec, h_rec, b, k)
                        Rq, Piq, m = fstep(Rq, Piq, m, tk, hk, F)
                    else:
                        m_rec[b, k] = m
                        tk, hk = when(t_rec, h_rec, b, k)
                        Rk, Pik = kept(R_rec, Pi_rec, R0, Pi0, b, k, shift)
                        m = mstep(Rk, Pik, m, tk, hk, F)
        seg = int(-1)
        i = n_out - 1
        k = n
        while k >= 0:
            more = i >= 0
            while more:  # the outputs written after step k (out_k is non-decreasing)
                if out_k[b, i] == k:
                    cR = cR + cR_out[b, i]
                    cPi = cPi + cPi_out[b, i]
                    i = i - 1
                    more = i >= 0
                else:
                    more = False
            if k > 0:
                j = k - 1
                mj = MT()
                if wp.static(STRIDED):
                    if j // stride != seg:  # the stretch's states again, from its checkpoint
                        seg = j // stride
                        base = seg * stride
                        Rq, Piq = kept(R_rec, Pi_rec, R0, Pi0, b, seg, shift)
                        mq = MT()
                        if wp.static(CARRIED):
                            mq = m_rec[b, seg]
                        for q in range(base, j + 1):
                            R_scr[b, q - base] = Rq
                            Pi_scr[b, q - base] = Piq
                            if wp.static(CARRIED):
                                m_scr[b, q - base] = mq
                            if q < j:
                                tq, hq = when(t_rec, h_rec, b, q)
                                Rq, Piq, mq = fstep(Rq, Piq, mq, tq, hq, F)
                    Rj = R_scr[b, j - seg * stride]
                    Pij = Pi_scr[b, j - seg * stride]
                    if wp.static(CARRIED):
                        mj = m_scr[b, j - seg * stride]
                else:
                    Rj, Pij = kept(R_rec, Pi_rec, R0, Pi0, b, j, shift)
                    if wp.static(CARRIED):
                        mj = m_rec[b, j]
                tj, hj = when(t_rec, h_rec, b, j)
                cR, cPi, cm, f = vjp(Rj, Pij, mj, tj, hj, F, cR, cPi, cm)
                acc = acc + f
            k = k - 1
        if wp.static(CARRIED):  # the first memory's dependence on the initial state and the system
            if n > 0:
                Rs, Pis = kept(R_rec, Pi_rec, R0, Pi0, b, 0, shift)
                ia, ip, iF = init_vjp(Rs, Pis, t_rec[b, 0], F, cm)
                cR = cR + ia
                cPi = cPi + ip
                acc = acc + iF
        cR0[b] = cR
        cPi0[b] = cPi
        cF[b] = acc

    A, A2 = wp.array, wp.array2d
    back.__annotations__ = dict(R_rec=A2(dtype=M), Pi_rec=A2(dtype=V), R0=A(dtype=M), Pi0=A(dtype=V), t_rec=A2(dtype=S),
                                h_rec=A2(dtype=S), n_acc=A(dtype=wp.int32), out_k=A2(dtype=wp.int32), cR_out=A2(dtype=M),
                                cPi_out=A2(dtype=V), F=A(dtype=S), n_out=wp.int32, stride=wp.int32, shift=wp.int32,
                                cR0=A(dtype=M),
                                cPi0=A(dtype=V), cF=A(dtype=F_T), m_rec=A2(dtype=MT), R_scr=A2(dtype=M),
                                Pi_scr=A2(dtype=V), m_scr=A2(dtype=MT))
    back.__name__ = back.__qualname__ = f"backward_{key}_{dtype_name}"
    kernel = wp.kernel(back, module=derivative_module(dtype_name, key), enable_backward=False)
    return S, F_T, kernel


def _launch(kernel, shared: frozenset, args, scalars: tuple, dims: dict):
    """A derivative kernel on the batch (one row per body in ``args[0]``; ``scalars`` its int arguments
    after the arrays): Warp's custom call (a GPU, a small batch), or slices of the batch from the pool's
    threads (a CPU; ``shared``: the arrays every slice reads whole)."""
    from .adaptive_launch import slices_for

    B = args[0].shape[0]
    n_slices = min(slices_for(B), B)
    ints = tuple(int(x) for x in scalars)
    if n_slices == 1 or jax.default_backend() != "cpu":
        return jax_kernel(kernel, len(dims))(*args, *ints, launch_dims=(B,), output_dims=dims)
    return host_threads.sliced_callable(kernel, len(dims), shared)(*args, *ints, int(n_slices), output_dims=dims)


def backward(pair, system, record, n_acc, cR_out, cPi_out, memory: bool = False):
    """``(cR0, cPi0, c_system)``: the cotangents of a batch's initial states (B, 3, 3), (B, 3) and of
    the system's arrays (a system of cotangents, None where not an array) from those of its outputs
    ``cR_out`` (B, n, 3, 3), ``cPi_out`` (B, n, 3), given the forward kernel's ``record`` and each
    body's accepted steps ``n_acc`` (``memory``: the pair carries its memory from step to step); a body
    whose steps were not all recorded fails with a message."""
    import equinox as eqx

    R_rec, Pi_rec, t_rec, h_rec, out_k, order, _, start = record
    if order is not None:  # the record's rows are the bodies in the order they were launched
        n_acc, cR_out, cPi_out = n_acc[order], cR_out[order], cPi_out[order]
        start = None if start is None else tuple(x[order] for x in start)
    dtype = R_rec.dtype
    name = jnp.dtype(dtype).name
    stride = record.stride
    low = lower_vjp(pair, system, dtype, memory, stride > 1)
    arrays, static = eqx.partition(system, eqx.is_array)
    F, pull_F = jax.vjp(lambda a: flat_system(eqx.combine(a, static), dtype)[0], arrays)
    F_in = jnp.concatenate([F, jnp.zeros((1,), dtype)])  # (a kernel array is never empty)
    B, n_out = cR_out.shape[:2]
    n_acc, over = _unrecorded(n_acc, record.n_steps)
    # the states kept: the record's own, or a constant-step run's frames after each body's initial state
    R0, Pi0 = (R_rec[:, 0], Pi_rec[:, 0]) if start is None else (x.astype(dtype) for x in start)
    args = (R_rec, Pi_rec, R0, Pi0, t_rec, h_rec, n_acc, out_k, cR_out.astype(dtype), cPi_out.astype(dtype), F_in)
    # scratch for the sweep: m_rec the memory at each recorded state; with checkpoints, a stretch's
    # recomputed states and memories
    scr = stride if stride > 1 else 1
    dims = {"cR0": (B,), "cPi0": (B,), "cF": (B,), "m_rec": (B, R_rec.shape[1] if memory else 1),
            "R_scr": (B, scr), "Pi_scr": (B, scr), "m_scr": (B, scr if memory else 1)}
    scalars = (n_out, stride, int(start is not None))
    cR0, cPi0, cF = _launch(backward_kernel(name, low.key)[2], frozenset({"F"}), args, scalars, dims)[:3]
    cR0, cPi0, cF = over((cR0, cPi0, cF), "gradient's", _MORE)
    if order is not None:
        inverse = jnp.argsort(order)
        cR0, cPi0 = cR0[inverse], cPi0[inverse]
    (c_arrays,) = pull_F(jnp.sum(cF[:, :low.n_flat], axis=0))
    return cR0, cPi0, c_arrays


#: what a body whose steps outnumber its record can do
_MORE = ("adjoint=jaxrot.RecursiveCheckpointAdjoint(checkpoints=N) to keep N states a body and recompute the steps "
         "between them, a lower max_steps, or executor=jaxrot.XLA()")


def _unrecorded(n_acc, capacity: int):
    """``(n, over)``: the steps each body's derivative replays, 0 for a body that accepted more than its
    record holds, and ``over(outputs, what, remedy)``, which makes those bodies' outputs NaN and fails
    the derivative with a message naming ``remedy``."""
    import equinox as eqx

    lost = n_acc > capacity

    def over(outputs, what: str, remedy: str):
        nan = [jnp.where(lost.reshape((-1,) + (1,) * (x.ndim - 1)), jnp.nan, x) for x in outputs]
        return eqx.error_if(tuple(nan), jnp.any(lost), f"a body accepted more steps than the {capacity} its "
                            f"{what} record holds: pass {remedy}")

    return jnp.where(lost, 0, n_acc), over
