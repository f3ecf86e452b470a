"""Derivatives of a fused error-controlled run computed in the kernels: the custom rules around
:func:`jaxrot.kernels.adaptive.fused_adaptive` whose backward pass (``jax.custom_vjp``) or tangents
(``jax.custom_jvp``) run through the recorded accepted steps (:mod:`jaxrot.kernels.adaptive_backward`),
the derivatives with respect to the save times (the last step's length moves with them) from the
reference loop where they are wanted."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..geometry.state import State
from .adaptive_backward import capacity_for
from .generate_vjp import keeps_memory

__all__ = ["in_kernels", "in_kernels_jvp", "fixed_in_kernels", "fixed_reason"]


def _parts(pair, forward, static, states0, const, max_steps, stored_steps):
    """``(B, dtype, capacity, pair object, fwd_run)``: what both rules start from; ``fwd_run(arrays,
    states0, dyn)`` is the run without a record."""
    from .adaptive import integrators_get

    B = states0.R.shape[0]
    dtype = states0.R.dtype
    cap = capacity_for(B, max_steps, jnp.dtype(dtype).itemsize, stored_steps)

    def fwd_run(arrays, states0, dyn):
        return forward(eqx.combine(arrays, static), states0, **{**const, **dyn})

    return B, dtype, cap, integrators_get(pair), fwd_run


def _in_kernels(pair, system, dtype, kind: str) -> bool:
    """Whether the derivative ``kind`` of the run is taken in the kernels: asked only when the run is
    differentiated (a plain run restates no derivative)."""
    from .adaptive import backward_reason

    return backward_reason(pair, system, dtype, None, kind) is None


def in_kernels(pair, to_dtype, forward, arrays, static, states0, dyn, const, ref, max_steps, stored_steps):
    """The run (without an event) as a ``jax.custom_vjp`` whose backward pass runs in the kernels
    (:mod:`jaxrot.kernels.adaptive_backward`) where the pair's step derivative can be generated, else
    the reference loop's; ``t0``/``ts`` cotangents, where they are wanted, from the reference loop."""
    from .adaptive_backward import backward

    B, dtype, cap, p, fwd_run = _parts(pair, forward, static, states0, const, max_steps, stored_steps)
    run = jax.custom_vjp(fwd_run)
    out_avals = None

    def run_fwd(arrays, states0, dyn):
        times = {k: v.perturbed for k, v in dyn.items() if k in ("t0", "ts")}
        primals = jax.tree_util.tree_map(lambda x: x.value, (arrays, states0, dyn),
                                         is_leaf=lambda x: isinstance(x, jax.custom_derivatives.CustomVJPPrimal))
        nonlocal out_avals
        if not _in_kernels(pair, to_dtype(eqx.combine(primals[0], static)), dtype, "vjp"):
            out = fwd_run(*primals)
            out_avals = jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), out)
            return out, (primals, None, None, True)
        out, record = forward(eqx.combine(primals[0], static), primals[1], **{**const, **primals[2]},
                              capacity=cap)
        out_avals = jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), out)
        return out, (primals, record, out.n_accepted, any(jax.tree_util.tree_leaves(times)))

    def run_bwd(res, ct):
        primals, record, n_acc, times = res
        if record is None:  # the reference loop's backward pass
            ct = jax.tree_util.tree_map(lambda c, o: _zero(o) if _symbolic(c) else c, ct, out_avals, is_leaf=_symbolic)
            return jax.vjp(lambda a, s, d: ref(a, s, d, None), *primals)[1](ct)
        system = to_dtype(eqx.combine(primals[0], static))
        memory = keeps_memory(p, system, dtype)
        zero = jnp.zeros((B, record[4].shape[1], 3, 3), dtype)
        cR_out = zero if _symbolic(ct.R) else ct.R
        cPi_out = zero[..., 0] if _symbolic(ct.Pi) else ct.Pi
        cR0, cPi0, c_sys = backward(p, system, record, n_acc, cR_out, cPi_out, memory)
        c_arrays = eqx.filter(c_sys, eqx.is_array)
        c_arrays = jax.tree_util.tree_map(lambda c, a: c.astype(a.dtype) if jnp.issubdtype(a.dtype, jnp.inexact)
                                          else None, c_arrays, primals[0])
        c_dyn = {k: None for k in primals[2]}
        if times:  # the output times' own derivatives: the reference's (the last step's length moves with them)
            _, pull = jax.vjp(lambda d: ref(primals[0], primals[1], d, None), primals[2])
            ct = jax.tree_util.tree_map(lambda c, o: _zero(o) if _symbolic(c) else c, ct, out_avals, is_leaf=_symbolic)
            c_dyn = {k: (v if k in ("t0", "ts") else None) for k, v in pull(ct)[0].items()}
        return c_arrays, State(cR0.astype(states0.R.dtype), cPi0.astype(states0.Pi.dtype)), c_dyn

    run.defvjp(run_fwd, run_bwd, symbolic_zeros=True)
    return run(arrays, states0, dyn)



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


def in_kernels_jvp(pair, to_dtype, forward, arrays, static, states0, dyn, const, ref, max_steps, stored_steps):
    """The run (without an event) as a ``jax.custom_jvp`` whose tangents are carried through the recorded
    steps in the kernels (:func:`jaxrot.kernels.adaptive_backward.tangents`) where the pair's step
    derivative can be generated, else the reference loop's; ``t0``/``ts`` tangents, where given, from the
    reference loop. Forward mode only."""
    from .adaptive_backward import tangents

    _, _, cap, p, fwd_run = _parts(pair, forward, static, states0, const, max_steps, stored_steps)
    run = jax.custom_jvp(fwd_run)

    def run_jvp(primals, tangents_in):
        arrays, states0, dyn = primals
        t_arrays, t_states, t_dyn = tangents_in
        if not _in_kernels(pair, to_dtype(eqx.combine(arrays, static)), states0.R.dtype, "jvp"):
            t_in = jax.tree_util.tree_map(lambda t, x: _zero(x) if _symbolic(t) else t, tangents_in, primals,
                                          is_leaf=_symbolic)
            return run(*primals), jax.jvp(lambda a, s, d: ref(a, s, d, None), primals, t_in)[1]
        out, record = forward(eqx.combine(arrays, static), states0, **{**const, **dyn}, capacity=cap)
        system = to_dtype(eqx.combine(arrays, static))
        memory = keeps_memory(p, system, states0.R.dtype)
        sys_arrays = eqx.filter(system, eqx.is_array)
        t_sys = jax.tree_util.tree_map(lambda t, a: _zero(a) if _symbolic(t) else t.astype(a.dtype),
                                       t_arrays, sys_arrays, is_leaf=_symbolic)
        dR0 = _zero(states0.R) if _symbolic(t_states.R) else t_states.R
        dPi0 = _zero(states0.Pi) if _symbolic(t_states.Pi) else t_states.Pi
        dR, dPi = tangents(p, system, record, out.n_accepted, dR0, dPi0, t_sys, memory)
        moved = {k: v for k, v in t_dyn.items() if k in ("t0", "ts") and not _symbolic(v)}
        if moved:  # the save times' own tangents: the reference's (the last step's length moves with them)
            _, t_ref = jax.jvp(lambda d: ref(arrays, states0, {**dyn, **d}, None), ({k: dyn[k] for k in moved},),
                               (moved,))
            dR, dPi = dR + t_ref.R, dPi + t_ref.Pi
        t_out = jax.tree_util.tree_map(_zero, out)
        return out, t_out._replace(R=dR.astype(out.R.dtype), Pi=dPi.astype(out.Pi.dtype))

    run.defjvp(run_jvp, symbolic_zeros=True)
    return run(arrays, states0, dyn)


def fixed_in_kernels(method, system, states0, dt, t0, n_frames: int, save_every: int, kind: str, forward, ref):
    """A constant-step run (without an event) whose derivative ``kind`` runs in the kernels: reverse mode
    (``"vjp"``, a ``jax.custom_vjp``) or forward mode (``"jvp"``, a ``jax.custom_jvp``) through the
    method's step derivative generated from its JAX code (:mod:`jaxrot.kernels.adaptive_backward`, the
    walk over a record that an error-controlled run's derivatives take too).

    The run keeps every step's start for it (the kernel run with ``save_every=1``; ``13 * n_steps``
    numbers a body), its frames are every ``save_every``-th state of that run. ``forward(method, system,
    states0, dt, t0, n_frames, save_every)`` is the kernel's run; ``ref(system, states0, dt, t0)`` the
    reference loop's, whose derivatives are taken for ``dt`` and ``t0`` where they are differentiated
    and for the whole run where the step's derivative cannot be generated. Returns
    ``(R_frames, Pi_frames, failed_step, result)`` as :func:`jaxrot.kernels.fused_frames`."""
    from .adaptive_backward import backward, tangents
    from .generate_vjp import vjp_reason

    B, dtype, N = states0.R.shape[0], states0.R.dtype, n_frames * save_every
    arrays, static = eqx.partition(system, eqx.is_array)

    def plain(arrays, states0, dt, t0):
        return forward(method, eqx.combine(arrays, static), states0, dt, t0, n_frames, save_every)

    def every_step(arrays, states0, dt, t0):
        """The frames, and the record of every step's start (the adaptive kernel's record's layout)."""
        R, Pi, failed, result = forward(method, eqx.combine(arrays, static), states0, dt, t0, N, 1)
        out = (R[:, save_every - 1::save_every], Pi[:, save_every - 1::save_every], failed, result)
        starts = State(jnp.concatenate([states0.R[:, None].astype(dtype), R[:, :-1]], axis=1),
                       jnp.concatenate([states0.Pi[:, None].astype(dtype), Pi[:, :-1]], axis=1))
        t_rec = jnp.broadcast_to(t0 + jnp.arange(N).astype(dtype) * dt, (B, N))  # (as the kernel: t0 + j dt)
        out_k = jnp.broadcast_to((jnp.arange(n_frames, dtype=jnp.int32) + 1) * save_every, (B, n_frames))
        record = (starts.R, starts.Pi, t_rec, jnp.broadcast_to(dt, (B, N)).astype(dtype), out_k, None)
        return out, record, jnp.full((B,), N, jnp.int32)

    def in_kernels(arrays):
        system = eqx.combine(arrays, static)
        memory = keeps_memory(method, system, dtype)
        return (vjp_reason(method, system, dtype, kind, memory) is None), system, memory

    if kind == "vjp":
        run = jax.custom_vjp(plain)

        def run_fwd(arrays, states0, dt, t0):
            times = dt.perturbed or t0.perturbed
            primals = jax.tree_util.tree_map(lambda x: x.value, (arrays, states0, dt, t0),
                                             is_leaf=lambda x: isinstance(x, jax.custom_derivatives.CustomVJPPrimal))
            if not in_kernels(primals[0])[0]:
                return plain(*primals), (primals, None, None, True)
            out, record, n = every_step(*primals)
            return out, (primals, record, n, times)

        def run_bwd(res, ct):
            primals, record, n, times = res
            outs = jax.eval_shape(plain, *primals)
            ct = jax.tree_util.tree_map(lambda c, o: _zero(o) if _symbolic(c) else c, ct, outs, is_leaf=_symbolic)
            if record is None:  # the reference loop's backward pass
                return jax.vjp(ref, *primals)[1](ct)
            _, system, memory = in_kernels(primals[0])
            cR0, cPi0, c_sys = backward(method, system, record, n, ct[0], ct[1], memory)
            c_arrays = jax.tree_util.tree_map(lambda c, a: c.astype(a.dtype) if jnp.issubdtype(a.dtype, jnp.inexact)
                                              else None, eqx.filter(c_sys, eqx.is_array), primals[0])
            c_dt = c_t0 = None
            if times:  # the step's and the start's own derivatives: the reference's
                c_dt, c_t0 = jax.vjp(lambda dt, t0: ref(primals[0], primals[1], dt, t0), *primals[2:])[1](ct)
            return c_arrays, State(cR0.astype(states0.R.dtype), cPi0.astype(states0.Pi.dtype)), c_dt, c_t0

        run.defvjp(run_fwd, run_bwd, symbolic_zeros=True)
        return run(arrays, states0, dt, t0)

    run = jax.custom_jvp(plain)

    def run_jvp(primals, tangents_in):
        ok, system, memory = in_kernels(primals[0])
        if not ok:
            t_in = jax.tree_util.tree_map(lambda t, x: _zero(x) if _symbolic(t) else t, tangents_in, primals,
                                          is_leaf=_symbolic)
            return run(*primals), jax.jvp(ref, primals, t_in)[1]
        out, record, n = every_step(*primals)
        t_arrays, t_states, t_dt, t_t0 = tangents_in
        t_sys = jax.tree_util.tree_map(lambda t, a: _zero(a) if _symbolic(t) else t.astype(a.dtype), t_arrays,
                                       eqx.filter(system, eqx.is_array), is_leaf=_symbolic)
        dR0 = _zero(primals[1].R) if _symbolic(t_states.R) else t_states.R
        dPi0 = _zero(primals[1].Pi) if _symbolic(t_states.Pi) else t_states.Pi
        dR, dPi = tangents(method, system, record, n, dR0, dPi0, t_sys, memory)
        if not (_symbolic(t_dt) and _symbolic(t_t0)):  # the step's and the start's own: the reference's
            moved = tuple(_zero(x) if _symbolic(t) else t for t, x in zip((t_dt, t_t0), primals[2:]))
            t_ref = jax.jvp(lambda dt, t0: ref(primals[0], primals[1], dt, t0), tuple(primals[2:]), moved)[1]
            dR, dPi = dR + t_ref[0], dPi + t_ref[1]
        t_out = (dR.astype(out[0].dtype), dPi.astype(out[1].dtype), *(_zero(x) for x in out[2:]))
        return out, t_out

    run.defjvp(run_jvp, symbolic_zeros=True)
    return run(arrays, states0, dt, t0)


def fixed_reason(method, system, dtype, bodies: int, n_steps: int, kind: str | None, event=None) -> str | None:
    """Why the derivative ``kind`` (``"vjp"``, ``"jvp"``; None: none is taken) of a fused constant-step run
    is not taken in the kernels (:func:`fixed_in_kernels`; it is then the reference loop's), or None."""
    from .adaptive_backward import RECORD_BYTES
    from .generate_vjp import vjp_reason

    if kind is None:
        return "the run is not differentiated in one mode alone"
    if event is not None:
        return "the kernels' derivative passes do not differentiate an event's location"
    if bodies * n_steps * 26 * jnp.dtype(dtype).itemsize > RECORD_BYTES:
        return "every step's start does not fit in the record's budget (adaptive_backward.RECORD_BYTES)"
    if any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(method)):
        return "the method's own arrays are being differentiated"
    return vjp_reason(method, system, dtype, kind, keeps_memory(method, system, dtype))
