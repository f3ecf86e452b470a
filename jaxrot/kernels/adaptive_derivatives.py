"""Derivatives of fused runs computed in the kernels: the custom rules (one builder, :func:`_rule`)
around an error-controlled run (:func:`jaxrot.kernels.adaptive.fused_adaptive`, :func:`in_kernels`) or a
constant-step one (:func:`jaxrot.kernels.fused_frames`, :func:`fixed_in_kernels`) whose backward pass
(``jax.custom_vjp``) runs through the record of the steps taken (:mod:`jaxrot.kernels.adaptive_backward`)
and whose tangents (``jax.custom_jvp``) are carried beside the states in the run itself
(:mod:`jaxrot.kernels.adaptive_tangents`), else the reference loop's; the
derivatives with respect to the times (the save times, ``dt``, ``t0``) from the reference loop where
they are wanted."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..geometry.state import State
from .adaptive_backward import record_layout
from .adaptive_pairs import Record
from .generate_vjp import keeps_memory

__all__ = ["in_kernels", "in_kernels_jvp", "fixed_in_kernels", "fixed_reason"]


def _rule(kind: str, plain, recorded, check, ref, moving: tuple, carried=None):
    """The run ``plain(arrays, states0, dyn) -> out`` (``out[0]``, ``out[1]``: the states ``R``, ``Pi``
    at the outputs) as a ``jax.custom_vjp`` (``kind="vjp"``) whose backward pass walks the record of its
    steps in the kernels (:mod:`jaxrot.kernels.adaptive_backward`), or a ``jax.custom_jvp`` (``"jvp"``)
    whose tangents a run carries beside its states (:mod:`jaxrot.kernels.adaptive_tangents`):

    - ``recorded(arrays, states0, dyn) -> (out, record, n_accepted)`` (reverse mode): the run keeping
      its record;
    - ``check(arrays) -> (ok, system, memory, method)`` (reverse mode): whether the method's step
      derivative can be generated for the system (else the whole derivative is ``ref``'s), the system
      the kernels take, whether the method carries memory;
    - ``ref(arrays, states0, dyn) -> out``: the reference loop, whose derivatives are taken for the
      entries of ``dyn`` named in ``moving`` (the times: the last step's length moves with them);
    - ``carried(primals, (dR0, dPi0), t_arrays) -> (out, dR, dPi)`` (forward mode): the run carrying
      its tangents, or None where they cannot be carried (the tangents then ``ref``'s)."""
    from .adaptive_backward import backward

    def arrays_of(c_sys, like):
        return jax.tree_util.tree_map(lambda c, a: c.astype(a.dtype) if jnp.issubdtype(a.dtype, jnp.inexact) else None,
                                      eqx.filter(c_sys, eqx.is_array), like)

    def filled(ts, xs):
        return jax.tree_util.tree_map(lambda t, x: _zero(x) if _symbolic(t) else t, ts, xs, is_leaf=_symbolic)

    if kind == "vjp":
        run = jax.custom_vjp(plain)

        def run_fwd(arrays, states0, dyn):
            moved = any(v.perturbed for k, v in dyn.items() if k in moving)
            primals = jax.tree_util.tree_map(lambda x: x.value, (arrays, states0, dyn),
                                             is_leaf=lambda x: isinstance(x, jax.custom_derivatives.CustomVJPPrimal))
            if not check(primals[0])[0]:
                return plain(*primals), (primals, None, None, True)
            out, record, n = recorded(*primals)
            return out, (primals, record, n, moved)

        def run_bwd(res, ct):
            primals, record, n, moved = res
            ct = filled(ct, jax.eval_shape(plain, *primals))
            if record is None:  # the reference loop's backward pass
                return jax.vjp(ref, *primals)[1](ct)
            _, system, memory, method = check(primals[0])
            cR0, cPi0, c_sys = backward(method, system, record, n, ct[0], ct[1], memory)
            c_dyn = {k: None for k in primals[2]}
            if moved:
                pulled = jax.vjp(lambda d: ref(primals[0], primals[1], d), primals[2])[1](ct)[0]
                c_dyn = {k: (v if k in moving else None) for k, v in pulled.items()}
            s0 = primals[1]
            return arrays_of(c_sys, primals[0]), State(cR0.astype(s0.R.dtype), cPi0.astype(s0.Pi.dtype)), c_dyn

        run.defvjp(run_fwd, run_bwd, symbolic_zeros=True)
        return run

    run = jax.custom_jvp(plain)

    def run_jvp(primals, tangents_in):
        t_arrays, t_states, t_dyn = tangents_in
        d_states = filled((t_states.R, t_states.Pi), (primals[1].R, primals[1].Pi))
        if all(map(_symbolic, jax.tree_util.tree_leaves((t_arrays, t_states), is_leaf=_symbolic))):
            done = plain(*primals)  # (the times alone move: no tangents to carry)
            done = (done, jnp.zeros_like(done[0]), jnp.zeros_like(done[1]))
        else:
            done = carried(primals, d_states, t_arrays)
        if done is None:
            return run(*primals), jax.jvp(ref, primals, filled(tangents_in, primals))[1]
        out, dR, dPi = done
        moved = {k: v for k, v in t_dyn.items() if k in moving and not _symbolic(v)}
        if moved:  # the times' own tangents: the reference's
            d = primals[2]
            t_ref = jax.jvp(lambda m: ref(primals[0], primals[1], {**d, **m}), ({k: d[k] for k in moved},), (moved,))[1]
            dR, dPi = dR + t_ref[0], dPi + t_ref[1]
        t_out = [dR.astype(out[0].dtype), dPi.astype(out[1].dtype), *jax.tree_util.tree_map(_zero, tuple(out[2:]))]
        return out, (out._make(t_out) if hasattr(out, "_make") else tuple(t_out))

    run.defjvp(run_jvp, symbolic_zeros=True)
    return run


def _carrying(method, system_of, run, pair: bool):
    """The rule's ``carried`` (:func:`_rule`): the run ``run(primals, (d_states0, d_arrays))`` carrying
    its tangents where ``method``'s can be carried (:func:`~jaxrot.kernels.adaptive_tangents.carried_reason`;
    an error-controlled run with ``pair``), else None; ``system_of(arrays)`` the run's system."""

    def carried(primals, d_states, t_arrays):
        from .adaptive_tangents import carried_reason

        system, dtype = system_of(primals[0]), primals[1].R.dtype
        if carried_reason(method, system, dtype, pair) is not None:
            return None
        d_states0 = State(*(x.astype(dtype) for x in d_states))
        return run(primals, (d_states0, system_tangents(t_arrays, system)))

    return carried


def system_tangents(t_arrays, system):
    """The tangents of ``system``'s arrays, zeros where ``t_arrays`` holds a symbolic zero, in the
    arrays' dtypes."""
    return jax.tree_util.tree_map(lambda t, a: _zero(a) if _symbolic(t) else t.astype(a.dtype), t_arrays,
                                  eqx.filter(system, eqx.is_array), is_leaf=_symbolic)


def _symbolic(c) -> bool:
    """Whether a cotangent is a symbolic zero (None, or JAX's ``SymbolicZero`` of a custom rule)."""
    return c is None or isinstance(c, jax.custom_derivatives.SymbolicZero)


def _zero(aval):
    """A cotangent of zeros for an output of this shape and dtype (float0 for integers); None for None."""
    if aval is None:
        return None
    if jnp.issubdtype(aval.dtype, jnp.inexact):
        return jnp.zeros(aval.shape, aval.dtype)
    return np.zeros(aval.shape, jax.dtypes.float0)


def in_kernels(pair, to_dtype, forward, arrays, static, states0, dyn, const, ref, max_steps, stored_steps,
               kind: str = "vjp"):
    """The error-controlled run (without an event) with its derivative ``kind`` in the kernels where the
    pair's step derivative can be generated (reverse mode) or its tangents carried (forward mode)
    (:func:`_rule`), else the reference loop's; ``t0``/``ts`` derivatives, where they are wanted, from
    the reference loop. ``forward(system, states0, **dyn, capacity=0, tangents=None)`` is the kernel's
    run, ``ref(arrays, states0, dyn, None)`` the reference loop's."""
    from .adaptive import backward_reason, integrators_get

    p = integrators_get(pair)
    dtype = states0.R.dtype
    cap = record_layout(states0.R.shape[0], max_steps, jnp.dtype(dtype).itemsize, stored_steps)

    def plain(arrays, states0, dyn):
        return forward(eqx.combine(arrays, static), states0, **{**const, **dyn})

    def recorded(arrays, states0, dyn):
        out, record = forward(eqx.combine(arrays, static), states0, **{**const, **dyn}, capacity=cap)
        return out, record, out.n_accepted

    def check(arrays):
        system = to_dtype(eqx.combine(arrays, static))
        ok = backward_reason(pair, system, dtype) is None  # (asked only when differentiated)
        return ok, system, ok and keeps_memory(p, system, dtype), p

    def carried(primals, tangents):
        arrays, states0, dyn = primals
        return forward(eqx.combine(arrays, static), states0, **{**const, **dyn}, tangents=tangents)

    rule = _rule(kind, plain, recorded, check, lambda a, s, d: ref(a, s, d, None), ("t0", "ts"),
                 _carrying(p, lambda a: to_dtype(eqx.combine(a, static)), carried, True) if kind == "jvp" else None)
    return rule(arrays, states0, dyn)


def in_kernels_jvp(pair, to_dtype, forward, arrays, static, states0, dyn, const, ref, max_steps, stored_steps):
    """:func:`in_kernels` in forward mode (``jax.jvp``, ``jax.jacfwd``)."""
    return in_kernels(pair, to_dtype, forward, arrays, static, states0, dyn, const, ref, max_steps, stored_steps,
                      kind="jvp")


def fixed_in_kernels(method, system, states0, dt, t0, n_frames: int, save_every: int, kind: str, forward, ref):
    """A constant-step run (without an event) whose derivative ``kind`` (``"vjp"`` or ``"jvp"``) runs in
    the kernels (:func:`_rule`): in forward mode the tangents carried in the run, in reverse mode
    through the method's step derivative generated from its JAX code, the walk over a record that an
    error-controlled run's backward pass takes too.

    In reverse mode the record (:func:`_record`) is the run's frames as checkpoints, from which the
    backward pass steps the states again (:mod:`jaxrot.kernels.adaptive_backward`), or every step's
    state (the kernel run with ``save_every=1``, its frames every ``save_every``-th state of that run):
    the run's frames read after each body's initial state (:class:`~jaxrot.kernels.adaptive_pairs.
    Record`'s ``start``), not a copy. The times are ``t0 + j dt``, as the kernel takes them.
    ``forward(method, system, states0, dt, t0, n_frames, save_every)`` is the kernel's run; ``ref(arrays,
    states0, dt, t0)`` the reference loop's (of the system's arrays), whose derivatives are taken for
    ``dt`` and ``t0`` where they are differentiated and for the whole run where the step's derivative
    cannot be generated. Returns ``(R_frames, Pi_frames, failed_step, result)`` as
    :func:`jaxrot.kernels.fused_frames`."""
    from .generate_vjp import vjp_reason

    B, dtype, N = states0.R.shape[0], states0.R.dtype, n_frames * save_every
    arrays, static = eqx.partition(system, eqx.is_array)
    whole = _record(B, dtype, n_frames, save_every, keeps_memory(method, system, dtype)) == "steps"

    def plain(arrays, states0, dyn):
        return forward(method, eqx.combine(arrays, static), states0, dyn["dt"], dyn["t0"], n_frames, save_every)

    def recorded(arrays, states0, dyn):
        """The frames, and the record of the steps' starts (every step's, or each frame's): the initial
        state, then the run's frames as it wrote them (each the start of the next step or stretch)."""
        dt, t0 = dyn["dt"], dyn["t0"]
        if whole:
            R, Pi, failed, result = forward(method, eqx.combine(arrays, static), states0, dt, t0, N, 1)
            out = (R[:, save_every - 1::save_every], Pi[:, save_every - 1::save_every], failed, result)
        else:
            out = R, Pi, failed, result = plain(arrays, states0, dyn)
        out_k = jnp.broadcast_to((jnp.arange(n_frames, dtype=jnp.int32) + 1) * save_every, (B, n_frames))
        one = jnp.ones((B, 1), dtype)
        record = Record(R, Pi, one * t0.astype(dtype), one * dt.astype(dtype), out_k, None, N, (states0.R, states0.Pi))
        return out, record, jnp.full((B,), N, jnp.int32)

    def check(arrays):
        system = eqx.combine(arrays, static)
        memory = keeps_memory(method, system, dtype)
        return vjp_reason(method, system, dtype, memory) is None, system, memory, method

    def carried(primals, tangents):
        arrays, states0, dyn = primals
        return forward(method, eqx.combine(arrays, static), states0, dyn["dt"], dyn["t0"], n_frames, save_every,
                       tangents=tangents)

    rule = _rule(kind, plain, recorded, check, lambda a, s, d: ref(a, s, d["dt"], d["t0"]),
                 ("dt", "t0"), _carrying(method, lambda a: eqx.combine(a, static), carried, False) if kind == "jvp" else None)
    return rule(arrays, states0, {"dt": dt, "t0": t0})


def fixed_reason(method, system, dtype, bodies: int, n_frames: int, save_every: int, kind: str | None,
                 event=None) -> str | None:
    """Why the derivative ``kind`` (``"vjp"``, ``"jvp"``; None: none is taken) of a fused constant-step run
    of ``n_frames`` frames every ``save_every`` steps is not taken in the kernels
    (:func:`fixed_in_kernels`; it is then the reference loop's), or None."""
    from .adaptive_tangents import carried_reason
    from .generate_vjp import vjp_reason

    if kind is None:
        return "the run is not differentiated in one mode alone"
    if n_frames * save_every == 0:
        return "a run of no steps"
    if event is not None:
        return "the kernels' derivative passes do not differentiate an event's location"
    if kind == "jvp":  # (the tangents carried in the run: no record)
        return carried_reason(method, system, dtype, pair=False)
    if any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(method)):
        return "the method's own arrays are being differentiated"
    memory = keeps_memory(method, system, dtype)
    if _record(bodies, dtype, n_frames, save_every, memory) is None:
        return ("neither every step's start nor the frames with the steps between two of them fit in the "
                "record's budget (adaptive_backward.RECORD_BYTES)")
    return vjp_reason(method, system, dtype, memory)


def _record(bodies: int, dtype, n_frames: int, save_every: int, memory: bool) -> str | None:
    """The record a constant-step reverse pass keeps: ``"frames"`` (the frames as checkpoints, wherever
    they fit), ``"steps"`` (every step's state: where the frames do not fit, or for a method carrying a
    ``memory``, which would otherwise be stepped forward once more; ``benchmarks/fixed_gradient.py
    --record-bytes``) or None (neither fits :data:`~jaxrot.kernels.adaptive_backward.RECORD_BYTES`).
    Counted 24 numbers a frame and 13 a step of a stretch (a margin over a frame's 12, written by the
    run anyway, and a stretch's state and memory), 26 a step where every step is kept."""
    from .adaptive_backward import steps_in_budget

    size = jnp.dtype(dtype).itemsize
    frames = 24 * n_frames + 13 * save_every <= steps_in_budget(bodies, size, 1)
    steps = n_frames * save_every <= steps_in_budget(bodies, size, 26)
    if steps and (memory or not frames):
        return "steps"
    return "frames" if frames else None
