"""The fused constant-step run: one Warp kernel template (:func:`loop_kernel`), one thread per body,
with or without an event.

Each thread takes ``n_frames * save_every`` steps of the method's ``step`` from ``init``'s memory,
step ``j`` at ``t0 + j dt`` (no accumulated round-off), writes every ``save_every``-th state, and
records the first step whose ``reason`` is not 0 (1-based) with its code, as the XLA loop does; the
three functions are generated from the method's JAX code (:func:`jaxrot.kernels.generate.funcs`).

With an event, the condition (a plain function restated from its jaxpr,
:mod:`jaxrot.kernels.event_restate`) is evaluated after every step, the first crossing located on
that step's dense output (bisection and one Newton step, :mod:`jaxrot.kernels.adaptive_dense`, as the
XLA loop's :func:`jaxrot.driver.events.locate`) and polished with the method's own steps, and a
terminal event ends the body's thread. The event's parts are switched by ``wp.static``, as in the
error-controlled loop (:mod:`jaxrot.kernels.adaptive_kernel`): a run without an event compiles none
of them. A terminal event leaves the frames as the XLA loop's bounded while loop leaves them: the
frame in which the event fell holds the state after the crossing step, later frames that state too
(the trajectory sets every frame after the event time to the event state), and ``steps`` says how
many steps were taken.
"""

import functools

from . import event_restate
from ._common import FUSE_FP, so3_funcs, warp
from .adaptive_dense import crossing, dense_funcs, polish_func

__all__ = ["OUTPUTS", "kernel", "loop_kernel", "output_dims", "why_not_event"]

#: the kernel's outputs in order; the last four (the event's and the steps taken) written only with an event
OUTPUTS = ("R_out", "Pi_out", "failed_out", "result_out", "tev_out", "Rev_out", "Piev_out", "steps_out")


def output_dims(B: int, n_frames: int) -> dict:
    """The kernel's output shapes for a batch of ``B`` bodies."""
    return {"R_out": (B, n_frames), "Pi_out": (B, n_frames), **{k: (B,) for k in OUTPUTS[2:]}}


def loop_kernel(S, init, step, reason, event=None, *, key: str):
    """The fused constant-step run of scalar type ``S`` (see the module docstring).

    ``init(R, Pi, J, P, h) -> A`` and ``step(R, Pi, A, t, h, J, P) -> (R, Pi, A)`` are Warp functions of
    one body (``A``: a vector of memory, e.g. Buss's world momentum), ``reason(Pi, A) -> int`` a step's
    :class:`jaxrot.RESULTS` code (0: none). ``event``: None, or ``(torque_key, event_key, direction,
    terminal, polished)``: the dense output's torque (:func:`jaxrot.kernels.dense_torque`), the restated
    condition, and whether the event is polished on the method's own steps
    (:func:`~jaxrot.kernels.adaptive_dense.polishes`). Arguments: ``R0`` (B) 3x3, ``Pi0`` (B)
    3-vectors, ``dt``, ``t0`` (1), ``J`` (1) 3-vector, ``P`` (the parameters: with an event the dense
    output's torque's first, then the method's), ``Q`` (the event condition's), ``n_frames``,
    ``save_every``; outputs :data:`OUTPUTS`."""
    wp = warp()
    c = so3_funcs(S)
    V, M = c.V, c.M
    EVENT = event is not None
    torque_key, event_key, direction, terminal, polished = event if EVENT else (None, None, None, False, False)
    TERMINAL = EVENT and bool(terminal)
    POLISHED = EVENT and bool(polished)
    g, locate = dense_funcs(S, torque_key, event_key)
    crossed = crossing(S, direction)

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
        if wp.static(EVENT):
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
                t = t0 + S(k) * dt
                if wp.static(EVENT):
                    Rk = R
                    Pik = Pi
                R, Pi, A = step(R, Pi, A, t, dt, J, P)
                k = k + 1
                if failed < 0:
                    r = reason(Pi, A)
                    if r != 0:
                        failed = k
                        code = r
                if wp.static(EVENT):
                    if not found:
                        gb = g(t + dt, R, Pi, Q)  # (the XLA loop's time of the step's end)
                        if crossed(gprev, gb):
                            found = True
                            sev, gs, Rev, Piev = locate(t, dt, Rk, Pik, R, Pi, J, P, Q)
                            tev = t + sev
                            if wp.static(POLISHED):
                                tev, Rev, Piev = polish(t, Rk, Pik, sev, gs, J, P, Q)
                            if wp.static(TERMINAL):
                                done = True
                        gprev = gb
                if wp.static(TERMINAL):
                    if done:
                        break
            R_out[b, f] = R
            Pi_out[b, f] = Pi
            if wp.static(TERMINAL):
                if done:
                    f_end = f + 1
                    break
        failed_out[b] = failed
        result_out[b] = code
        if wp.static(EVENT):
            for f in range(f_end, n_frames):  # frames after a terminal event hold the last state
                R_out[b, f] = R
                Pi_out[b, f] = Pi
            tev_out[b] = tev
            Rev_out[b] = Rev
            Piev_out[b] = Piev
            steps_out[b] = k

    run.__name__ = run.__qualname__ = f"fused_{key}"
    return wp.kernel(run, module="unique", enable_backward=False, module_options={"fuse_fp": FUSE_FP})


@functools.lru_cache(maxsize=None)
def kernel(dtype_name: str, gen_key: str, event=None):
    """``(Warp scalar type, kernel)`` of the generated method ``gen_key`` (:mod:`jaxrot.kernels.generate`)
    at ``dtype_name``, with ``event`` as :func:`loop_kernel` takes it; built once."""
    from . import generate

    wp = warp()
    S = {"float32": wp.float32, "float64": wp.float64}[dtype_name]
    ev = "" if event is None else "_{}_ev{}_{}_{:d}_{:d}".format(*event)
    return S, loop_kernel(S, *generate.funcs(S, gen_key), event, key=f"gen_{gen_key}_{dtype_name}{ev}")


def why_not_event(event, dtype) -> str | None:
    """Why the constant-step kernel cannot check ``event`` (a sentence), or None."""
    why = event_restate.reason(event.cond_fn, dtype)
    return None if why is None else f"the event condition cannot be restated in a kernel: {why}"
