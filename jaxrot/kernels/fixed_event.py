"""Fixed-step fused runs with an event: the constant-step loop of :func:`jaxrot.kernels._common.loop_kernel`
with the event condition evaluated after every step, the first crossing located on that step's dense
output (bisection and one Newton step, :mod:`jaxrot.kernels.adaptive_dense`, as the XLA loop's
:func:`jaxrot.driver.events.locate`) and polished with the method's own steps, and a terminal event
ending the body's thread.

A terminal event leaves the frames as the XLA loop's bounded while loop leaves them: the frame in
which the event fell holds the state after the crossing step, later frames that state too (the
trajectory sets every frame after the event time to the event state), and ``steps`` says how many
steps were taken. The condition is a plain function restated from its jaxpr
(:mod:`jaxrot.kernels.event_restate`), the step the method's own, generated from its JAX code
(:mod:`jaxrot.kernels.generate`).
"""


import functools

import jax
import jax.numpy as jnp

from . import event_restate, host_threads
from ._common import FUSE_FP, checked_step, so3_funcs, warp
from .adaptive_dense import crossing, dense_funcs, polish_func, polishes

__all__ = ["event_loop_kernel", "launch", "why_not_event"]

#: the kernel's outputs (name, per-body shape after B) in order
_OUTPUTS = ("R_out", "Pi_out", "failed_out", "result_out", "tev_out", "Rev_out", "Piev_out", "steps_out")


def event_loop_kernel(S, init, step, reason, torque_key: str, event_key: str, direction, terminal: bool, *,
                      key: str, polished: bool = True):
    """The fused constant-step run with an event (see the module docstring): ``init``, ``step`` and
    ``reason`` as :func:`~jaxrot.kernels._common.loop_kernel` takes them; ``torque_key`` the dense
    output's torque (:func:`jaxrot.kernels.dense_torque`); ``polished``: the event polished on the
    method's own steps (:func:`~jaxrot.kernels.adaptive_dense.polishes`)."""
    wp = warp()
    c = so3_funcs(S)
    V, M = c.V, c.M
    g, locate = dense_funcs(S, torque_key, event_key)
    TERMINAL = bool(terminal)
    crossed = crossing(S, direction)
    advance = checked_step(S, step, reason)

    @wp.func
    def one_step(R: M, Pi: V, t: S, h: S, J: V, P: wp.array(dtype=S)):
        """The method's step of length ``h`` from fresh memory (the event's polish)."""
        R1, Pi1, A1 = step(R, Pi, init(R, Pi, J, P, h), t, h, J, P)
        return R1, Pi1

    polish = polish_func(S, one_step, g)

    def run(R0: wp.array(dtype=M), Pi0: wp.array(dtype=V), dtv: wp.array(dtype=S), t0v: wp.array(dtype=S),
            Jv: wp.array(dtype=V), P: wp.array(dtype=S), Q: wp.array(dtype=S), n_frames: wp.int32,
            save_every: wp.int32, R_out: wp.array2d(dtype=M), Pi_out: wp.array2d(dtype=V),
            failed_out: wp.array(dtype=wp.int32), result_out: wp.array(dtype=wp.int32), tev_out: wp.array(dtype=S),
            Rev_out: wp.array(dtype=M), Piev_out: wp.array(dtype=V), steps_out: wp.array(dtype=wp.int32)):
        b = wp.tid()
        R = R0[b]
        Pi = Pi0[b]
        dt = dtv[0]
        t0 = t0v[0]
        J = Jv[0]
        A = init(R, Pi, J, P, dt)
        k = int(0)
        failed = int(-1)
        code = int(0)
        nan = S(wp.nan)
        tev = nan
        Rev = M(nan, nan, nan, nan, nan, nan, nan, nan, nan)
        Piev = V(nan, nan, nan)
        found = bool(False)
        done = bool(False)
        gprev = g(t0, R, Pi, Q)
        f_end = n_frames
        for f in range(n_frames):
            for _s in range(save_every):
                t = t0 + S(k) * dt  # the step's start, as advance computes it
                Rk = R
                Pik = Pi
                R, Pi, A, k, failed, code = advance(R, Pi, A, t0, dt, k, failed, code, J, P)
                if not found:
                    gb = g(t + dt, R, Pi, Q)  # (the XLA loop's time of the step's end)
                    if crossed(gprev, gb):
                        found = True
                        sev, gs, Rev, Piev = locate(t, dt, Rk, Pik, R, Pi, J, P, Q)
                        tev = t + sev
                        if wp.static(polished):
                            tev, Rev, Piev = polish(t, Rk, Pik, sev, gs, J, P, Q)
                        if wp.static(TERMINAL):
                            done = True
                    gprev = gb
                if done:
                    break
            R_out[b, f] = R
            Pi_out[b, f] = Pi
            if done:
                f_end = f + 1
                break
        for f in range(f_end, n_frames):  # frames after a terminal event hold the last state
            R_out[b, f] = R
            Pi_out[b, f] = Pi
        failed_out[b] = failed
        result_out[b] = code
        tev_out[b] = tev
        Rev_out[b] = Rev
        Piev_out[b] = Piev
        steps_out[b] = k

    run.__name__ = run.__qualname__ = f"fused_event_{key}"
    return wp.kernel(run, module="unique", enable_backward=False, module_options={"fuse_fp": FUSE_FP})


@functools.lru_cache(maxsize=None)
def _kernel(dtype_name: str, gen_key: str, torque_key: str, event_key: str, direction, terminal: bool,
            polished: bool):
    """``(Warp scalar type, kernel)`` of (dtype, generated method, torque, event), built once."""
    from . import generate

    wp = warp()
    S = {"float32": wp.float32, "float64": wp.float64}[dtype_name]
    key = f"{gen_key}_{torque_key}_{dtype_name}_ev{event_key}_{direction}_{int(terminal)}"
    return S, event_loop_kernel(S, *generate.funcs(S, gen_key), torque_key, event_key, direction, terminal, key=key,
                                polished=polished)


@functools.lru_cache(maxsize=None)
def _ffi(*key):
    """Warp's JAX custom call of the kernel (CUDA, and a CPU batch too small to split)."""
    return warp().jax_kernel(_kernel(*key)[1], num_outputs=len(_OUTPUTS), vmap_method="sequential")


def why_not_event(event, dtype) -> str | None:
    """Why the fixed-step kernels cannot check ``event`` (a sentence), or None."""
    why = event_restate.reason(event.cond_fn, dtype)
    return None if why is None else f"the event condition cannot be restated in a kernel: {why}"


def launch(method, system, states0, dt, t0, n_frames: int, save_every: int, event):
    """The kernel of ``method``'s generated step (:mod:`jaxrot.kernels.generate`) on a batch:
    ``(R (B, n_frames, 3, 3), Pi (B, n_frames, 3), failed, result, t_event, R_event, Pi_event, steps)``
    (the event's NaN where none was found). The dense output restates the torque from its JAX code
    (:func:`jaxrot.kernels.dense_torque`): its parameters come first in ``P``, the method's after them."""
    from . import dense_torque, generate

    dtype = states0.R.dtype
    B = states0.R.shape[0]
    tkey, T = dense_torque(system.torque, dtype)
    low = generate.lower(method, system, dtype, int(T.shape[0]))
    ekey, Q = event_restate.lower(event.cond_fn, dtype)
    polished = polishes(getattr(method, "order", None))
    key = (jnp.dtype(dtype).name, low.key, tkey, ekey, event.direction, bool(event.terminal), polished)
    args = (jnp.asarray(states0.R, dtype), jnp.asarray(states0.Pi, dtype), jnp.reshape(dt, (1,)),
            jnp.reshape(t0, (1,)), jnp.asarray(system.body.J, dtype).reshape(1, 3),
            jnp.concatenate([T, jnp.asarray(low.params, dtype)]), jnp.asarray(Q, dtype))
    dims = {"R_out": (B, n_frames), "Pi_out": (B, n_frames), **{k: (B,) for k in _OUTPUTS[2:]}}
    threads = host_threads.threads_for(B, n_frames * save_every, generate.split_weight(low.key))
    if threads == 1 or jax.default_backend() != "cpu":  # (a machine with a GPU keeps Warp's custom call)
        return tuple(_ffi(*key)(*args, int(n_frames), int(save_every), launch_dims=(B,), output_dims=dims))
    split = host_threads.sliced_callable(_kernel(*key)[1], len(_OUTPUTS), frozenset({"dtv", "t0v", "Jv", "P", "Q"}))
    return tuple(split(*args, int(n_frames), int(save_every), int(threads), output_dims=dims))
