"""The Warp kernel of a pair's error-controlled loop, one thread per body (:func:`adaptive_kernel`;
see :mod:`jaxrot.kernels.adaptive` for the loop it restates), the pair's attempt generated from its
JAX code (:func:`jaxrot.kernels.generate.attempt_funcs`), and the cache of built kernels
(:func:`kernel_for`).
"""

import functools

from ._common import FUSE_FP, so3_funcs, warp
from .adaptive_dense import crossing, dense_funcs, polish_func, polishes
from .generate import attempt_funcs
from .adaptive_pairs import GENERATED_PAIRS, RESULT_MAX_STEPS_REACHED, RESULT_NONFINITE_STATE, GeneratedPair

__all__ = ["adaptive_kernel", "kernel_for"]


def adaptive_kernel(S, entry: GeneratedPair, torque_key: str | None, event_key: str | None = None,
                    direction: int | None = None, terminal: bool = True, record: bool = False, *, key: str):
    """The Warp kernel of a generated pair's error-controlled loop, one thread per body (see the
    module docstring). Arguments: ``R0`` (B) 3x3, ``Pi0`` (B) 3-vectors, ``h0``, ``rtol``, ``atol``
    (B), ``t0`` (1), ``ts`` (n), ``J`` (1) 3-vector, ``P`` (the parameters: with an event the dense output's torque's
    (``torque_key``, :func:`jaxrot.kernels.dense_torque`) first, then the pair's), ``Q`` (the
    event condition's), ``max_steps``, ``n_out``; outputs ``R_out`` (B, n), ``Pi_out`` (B, n),
    ``acc``, ``rej`` (int32), ``err``, ``result`` (int32), ``t_event``, ``R_event``, ``Pi_event`` (B);
    with ``record`` (for the backward pass, :mod:`jaxrot.kernels.adaptive_backward`, and the saved steps,
    :mod:`jaxrot.kernels.adaptive_saved`), each accepted step's start ``R_rec``, ``Pi_rec``, ``t_rec``
    and length ``h_rec`` (B, capacity; the first ``capacity`` steps; after a terminal event's crossing
    step, ``acc`` of them, the state after it in column ``acc`` with its time and length 0) and, for
    each output, the accepted steps before it was written ``out_k`` (B, n)."""
    wp = warp()
    c = so3_funcs(S)
    V, M = c.V, c.M
    init, attempt = attempt_funcs(S, entry.key)
    q1 = float(entry.controller_order) + 1.0
    alpha, beta = 0.7 / q1, 0.4 / q1
    EVENT = event_key is not None
    TERMINAL = EVENT and bool(terminal)
    RECORD = bool(record)
    crossed = crossing(S, direction)
    g, locate = dense_funcs(S, torque_key, event_key)

    @wp.func
    def one_step(R: M, Pi: V, t: S, h: S, J: V, P: wp.array(dtype=S)):
        """The pair's step of length ``h`` from fresh memory (the event's polish)."""
        Rp, Pip, Ap, err = attempt(R, Pi, init(R, Pi, J, P, h), t, h, J, P, S(1.0), S(1.0))
        return Rp, Pip

    polish = polish_func(S, one_step, g)
    POLISHED = polishes(entry.high_order)
    CODE_NONFINITE, CODE_MAX = RESULT_NONFINITE_STATE, RESULT_MAX_STEPS_REACHED

    def run(R0: wp.array(dtype=M), Pi0: wp.array(dtype=V), h0v: wp.array(dtype=S), rtolv: wp.array(dtype=S),
            atolv: wp.array(dtype=S), t0v: wp.array(dtype=S), ts: wp.array(dtype=S), Jv: wp.array(dtype=V),
            P: wp.array(dtype=S), Q: wp.array(dtype=S), max_steps: wp.int32, n_out: wp.int32,
            R_out: wp.array2d(dtype=M), Pi_out: wp.array2d(dtype=V), acc_out: wp.array(dtype=wp.int32),
            rej_out: wp.array(dtype=wp.int32), err_out: wp.array(dtype=S), result_out: wp.array(dtype=wp.int32),
            tev_out: wp.array(dtype=S), Rev_out: wp.array(dtype=M), Piev_out: wp.array(dtype=V),
            R_rec: wp.array2d(dtype=M), Pi_rec: wp.array2d(dtype=V), t_rec: wp.array2d(dtype=S),
            h_rec: wp.array2d(dtype=S), out_k: wp.array2d(dtype=wp.int32)):
        b = wp.tid()
        R = R0[b]
        Pi = Pi0[b]
        h = h0v[b]
        rt = rtolv[b]
        at = atolv[b]
        t = t0v[0]
        J = Jv[0]
        A = init(R, Pi, J, P, h)
        err_prev = S(1.0)
        i = int(0)
        acc = int(0)
        rej = int(0)
        code = int(0)
        done = bool(False)
        nan = S(wp.nan)
        tev = nan
        Rev = M(nan, nan, nan, nan, nan, nan, nan, nan, nan)
        Piev = V(nan, nan, nan)
        found = bool(False)
        gprev = S(0.0)
        h_cross = S(0.0)
        hit_cross = bool(False)
        if not wp.isfinite(R[0, 0] + R[0, 1] + R[0, 2] + R[1, 0] + R[1, 1] + R[1, 2] + R[2, 0] + R[2, 1]
                            + R[2, 2] + Pi[0] + Pi[1] + Pi[2]):
            code = CODE_NONFINITE
            done = True
        if wp.static(EVENT):
            gprev = g(t, R, Pi, Q)
        # save times at t0 itself (a traced SaveAt(ts) may begin there): the initial state, without a step
        while i < n_out and ts[i] <= t:
            R_out[b, i] = R
            Pi_out[b, i] = Pi
            if wp.static(RECORD):
                out_k[b, i] = 0
            i = i + 1
        while (not done) and i < n_out and acc + rej < max_steps:
            target = ts[i]
            hit = t + h >= target - S(1e-12) * wp.max(S(1.0), wp.abs(target))
            step = h
            if hit:
                step = target - t
            Rp, Pip, Ap, err = attempt(R, Pi, A, t, step, J, P, rt, at)
            ok = err <= S(1.0)  # (False where err is NaN or infinite)
            e = wp.max(err, S(1e-10))
            fac = S(0.2)  # a non-finite error: 0.9 inf^-alpha = 0, clipped to 0.2
            if wp.isfinite(err):
                fac = S(0.9) * wp.pow(e, S(-alpha))
                if ok:
                    fac = fac * wp.pow(err_prev, S(beta))
                fac = wp.min(wp.max(fac, S(0.2)), S(5.0))
            # a step shortened to land on an output time does not shrink the next one
            h_new = step * fac
            if ok and hit:
                h_new = wp.max(h, step * fac)
            if ok:
                t_next = t + step
                if hit:
                    t_next = target
                cross = bool(False)
                if wp.static(EVENT):
                    if not found:
                        gb = g(t_next, Rp, Pip, Q)
                        cross = crossed(gprev, gb)
                        gprev = gb
                err_prev = e
                acc = acc + 1
                if wp.static(RECORD):  # (a terminal event's crossing step too: SaveAt(steps=...), dense)
                    if acc <= R_rec.shape[1]:
                        R_rec[b, acc - 1] = R
                        Pi_rec[b, acc - 1] = Pi
                        t_rec[b, acc - 1] = t
                        h_rec[b, acc - 1] = step
                if wp.static(TERMINAL) and cross:
                    # the body stops here: t, R, Pi (and the pair's memory) stay at the crossing step's
                    # start and the event is located after the loop, where the threads of a GPU warp
                    # locate theirs together instead of one after another while the rest wait
                    found = True
                    done = True
                    h_cross = step
                    hit_cross = hit
                else:
                    tk = t
                    Rk = R
                    Pik = Pi
                    t = t_next
                    R = Rp
                    Pi = Pip
                    A = Ap
                    if wp.static(EVENT and not TERMINAL):
                        if cross:
                            found = True
                            sev, gs, Rev, Piev = locate(tk, step, Rk, Pik, R, Pi, J, P, Q)
                            tev = tk + sev
                            if wp.static(POLISHED):
                                tev, Rev, Piev = polish(tk, Rk, Pik, sev, gs, J, P, Q)
                    if hit:
                        R_out[b, i] = R
                        Pi_out[b, i] = Pi
                        if wp.static(RECORD):
                            out_k[b, i] = acc
                        i = i + 1
            else:
                rej = rej + 1
            h = h_new
        # outputs not reached hold the last state (after a terminal event: the event state)
        Rf = R
        Pif = Pi
        stopped = bool(False)
        if wp.static(TERMINAL):
            if found:
                # the crossing step again, from the same state and memory (the same values), then
                # the event located on it; a save time it landed on at or before the event is written
                Rp, Pip, Ap, err = attempt(R, Pi, A, t, h_cross, J, P, rt, at)
                sev, gs, Rev, Piev = locate(t, h_cross, R, Pi, Rp, Pip, J, P, Q)
                tev = t + sev
                if wp.static(POLISHED):
                    tev, Rev, Piev = polish(t, R, Pi, sev, gs, J, P, Q)
                if wp.static(RECORD):
                    # the state after the crossing step, the start of a step that is never taken (the
                    # XLA loop's last state, its time where the loop puts the step's end)
                    if acc < R_rec.shape[1]:
                        R_rec[b, acc] = Rp
                        Pi_rec[b, acc] = Pip
                        t_rec[b, acc] = t + h_cross
                        if hit_cross:
                            t_rec[b, acc] = ts[i]
                        h_rec[b, acc] = S(0.0)
                if hit_cross and not (ts[i] > tev):
                    R_out[b, i] = Rp
                    Pi_out[b, i] = Pip
                    if wp.static(RECORD):
                        out_k[b, i] = acc
                    i = i + 1
                Rf = Rev
                Pif = Piev
                stopped = True
        for k in range(i, n_out):
            R_out[b, k] = Rf
            Pi_out[b, k] = Pif
            if wp.static(RECORD):
                out_k[b, k] = acc
        if code == 0 and i < n_out and not stopped:
            code = CODE_MAX
        acc_out[b] = acc
        rej_out[b] = rej
        err_out[b] = err_prev
        result_out[b] = code
        tev_out[b] = tev
        Rev_out[b] = Rev
        Piev_out[b] = Piev

    run.__name__ = run.__qualname__ = f"adaptive_{key}"
    # per-operation rounding, as the fixed-step kernels (no contraction into fused multiply-adds)
    return wp.kernel(run, module="unique", enable_backward=False, module_options={"fuse_fp": FUSE_FP})


@functools.lru_cache(maxsize=None)
def kernel_for(dtype_name: str, pair: str, torque_key, event_key, direction, terminal, record=False):
    """``(Warp scalar type, kernel)``, built once per (dtype, pair, the dense output's torque, event,
    recording or not)."""
    wp = warp()
    S = {"float32": wp.float32, "float64": wp.float64}[dtype_name]
    ev = ("" if event_key is None else f"_{torque_key}_ev{event_key}_{direction}_{int(terminal)}") + ("_rec" if record else "")
    key = f"{pair.replace(':', '_')}_{dtype_name}{ev}"
    return S, adaptive_kernel(S, GENERATED_PAIRS[pair], torque_key, event_key, direction, terminal, record, key=key)
