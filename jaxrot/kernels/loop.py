"""The fused loop: one Warp template (:func:`loop`), a body's whole run in its thread, for constant
steps and for error control; the kernels around it (:mod:`jaxrot.kernels.fixed_loop`,
:mod:`jaxrot.kernels.adaptive_kernel`) only read a body's inputs and write its results. What differs
is switched by ``wp.static`` when the kernel is generated, as the event and the record are:

- **constant steps**: step ``j`` at ``t0 + j h`` (no accumulated round-off), every step accepted,
  output ``i`` after ``(i + 1) * every`` steps, the first step whose ``reason`` is not 0 recorded
  (1-based, with its code) as the XLA loop does; a terminal event stops the body at its crossing
  step, located at once, and outputs not reached hold the state after that step;
- **error control** (:mod:`jaxrot.kernels.adaptive`): the pair's attempt with its scaled error, the PI
  controller generated from the XLA loop's (:func:`jaxrot.kernels.generate_pieces.controller`), steps shortened to land on
  the output times ``ts``, ``max_steps`` attempts at most; a terminal event's crossing step is
  accepted and the event located after the loop (a GPU warp's threads then locate theirs together),
  outputs not reached holding the event state.

An event's first crossing is tested and located on the crossing step's dense output, polished with
the method's own steps, by code generated from the XLA loop's (:func:`jaxrot.kernels.generate_pieces.locator`
from :func:`jaxrot.integrators.dense_output.locate`).
"""

from typing import Any

from ._common import fuse_fp, so3_funcs, warp
from .event_restate import event_g
from .generate_pieces import controller, crossing, locator
from ..integrators.pairs import LANDING
from .adaptive_pairs import RESULT_MAX_STEPS_REACHED, RESULT_NONFINITE_STATE

__all__ = ["as_kernel", "loop"]


def as_kernel(run, name: str, module: str | None = None):
    """The Warp kernel of the Python function ``run`` (around :func:`loop`), named ``name``, in a module
    of its own (or in ``module``, whose options its namer set), with per-operation rounding (no
    contraction into fused multiply-adds)."""
    run.__name__ = run.__qualname__ = name
    if module is not None:
        return warp().kernel(run, module=module, enable_backward=False)
    return warp().kernel(run, module="unique", enable_backward=False, module_options={"fuse_fp": fuse_fp()})


def loop(S, init, advance, reason, event=None, record: bool = False, order=None, given: bool = False):
    """The loop of one body at scalar type ``S`` (see the module docstring), a Warp function.

    ``init(R, Pi, J, P, h) -> A`` the method's memory; with constant steps (``order`` None) ``advance``
    is the method's ``step(R, Pi, A, t, h, J, P) -> (R, Pi, A)`` and ``reason(Pi, A)`` a step's
    :class:`jaxrot.RESULTS` code (0: none), with error control the pair's ``attempt(R, Pi, A, t, h, J,
    P, rt, at) -> (R, Pi, A, err)`` and ``order`` its controller order; ``event``: None or ``(torque_key,
    event_key, direction, terminal, polished)`` (``polished``: None, or the method's ``step_dh`` where its
    events are polished on its own steps); ``record``: keep each accepted step (error control).

    Returns ``run(b, R, Pi, A0, h, rt, at, t0, ts, J, P, Q, max_steps, n_out, every, R_out, Pi_out, tev_out,
    Rev_out, Piev_out, R_rec, Pi_rec, t_rec, h_rec, out_k, A_out) -> (acc, rej, failed, err, code)``: body
    ``b``'s run from ``(R, Pi)`` at ``t0`` with (first) step ``h``, writing its ``n_out`` outputs to row ``b`` of
    ``R_out``, ``Pi_out``, its event's time and state (NaN: none; error control writes them without an
    event too) to ``tev_out``, ``Rev_out``, ``Piev_out`` and, with ``record``, each accepted step's
    start and length to ``R_rec``, ``Pi_rec``, ``t_rec``, ``h_rec`` (the states of every ``s``-th step
    only where ``R_rec`` has fewer columns than ``t_rec``: ``s = ceil(T / C)``, column ``k // s``; see
    :func:`jaxrot.kernels.adaptive_kernel.adaptive_kernel`) and the accepted steps before each output to
    ``out_k``; ``failed``: the first step with a ``reason`` (-1: none), ``err`` the last accepted step's
    error estimate. The body's memory at the start is ``init``'s, or with ``given`` row ``b`` of ``A0``,
    and then the memory at each output is written to row ``b`` of ``A_out`` beside the state (a memory
    that carries the state's tangents, :mod:`jaxrot.kernels.adaptive_tangents`)."""
    wp = warp()
    V, M = so3_funcs(S).V, so3_funcs(S).M
    CONSTANT = order is None
    EVENT = event is not None
    torque_key, event_key, direction, terminal, polished = event if EVENT else (None, None, None, False, False)
    TERMINAL = EVENT and bool(terminal)
    # a terminal event of error control is located after the loop, the others at their step
    DEFER = TERMINAL and not CONSTANT
    POLISHED = EVENT and bool(polished)
    RECORD = bool(record)
    KEEP = bool(given)
    control = None if CONSTANT else controller(S, int(order))
    CODE_NONFINITE, CODE_MAX = RESULT_NONFINITE_STATE, RESULT_MAX_STEPS_REACHED
    g = event_g(S, event_key) if EVENT else None
    crossed = crossing(S, direction) if EVENT else None

    @wp.func
    def one_step(R: M, Pi: V, t: S, h: S, J: V, P: wp.array(dtype=S)):
        """The method's step of length ``h`` from fresh memory (the event's polish)."""
        A = init(R, Pi, J, P, h)
        if wp.static(CONSTANT):
            R1, Pi1, A1 = advance(R, Pi, A, t, h, J, P)
        else:
            R1, Pi1, A1, err = advance(R, Pi, A, t, h, J, P, S(1.0), S(1.0))
        return R1, Pi1

    locate = None if not EVENT else locator(S, torque_key, event_key, one_step if POLISHED else None,
                                            polished if POLISHED else None)

    @wp.func
    def put(b: int, i: int, R: M, Pi: V, A: Any, k: int, R_out: wp.array2d(dtype=M), Pi_out: wp.array2d(dtype=V),
            out_k: Any, A_out: Any):
        """Output ``i`` of body ``b``: the state, (a record) the accepted steps ``k`` before it and
        (``given``) the memory ``A``."""
        R_out[b, i] = R
        Pi_out[b, i] = Pi
        if wp.static(RECORD):
            out_k[b, i] = k
        if wp.static(KEEP):
            A_out[b, i] = A
        return i + 1

    @wp.func
    def run(b: int, R: M, Pi: V, A0: Any, h: S, rt: S, at: S, t0: S, ts: wp.array(dtype=S), J: V, P: wp.array(dtype=S),
            Q: wp.array(dtype=S), max_steps: int, n_out: int, every: int, R_out: wp.array2d(dtype=M),
            Pi_out: wp.array2d(dtype=V), tev_out: wp.array(dtype=S), Rev_out: wp.array(dtype=M),
            Piev_out: wp.array(dtype=V), R_rec: Any, Pi_rec: Any, t_rec: Any, h_rec: Any, out_k: Any, A_out: Any):
        A = init(R, Pi, J, P, h)
        if wp.static(KEEP):
            A = A0[b]
        t = t0
        err_prev = S(1.0)
        i = int(0)
        acc = int(0)
        rej = int(0)
        failed = int(-1)
        code = int(0)
        done = bool(False)
        tev = S(wp.nan)
        Rev = M(tev, tev, tev, tev, tev, tev, tev, tev, tev)
        Piev = V(tev, tev, tev)
        found = bool(False)
        gprev = S(0.0)
        h_cross = S(0.0)
        hit_cross = bool(False)
        stride = int(1)
        kept = int(0)
        next_kept = int(0)
        if wp.static(RECORD):  # every step's time and length, the state at every stride-th (fewer columns)
            stride = (t_rec.shape[1] + R_rec.shape[1] - 1) // R_rec.shape[1]
        if wp.static(EVENT):
            gprev = g(t, R, Pi, Q)
        if wp.static(not CONSTANT):
            if not wp.isfinite(R[0, 0] + R[0, 1] + R[0, 2] + R[1, 0] + R[1, 1] + R[1, 2] + R[2, 0] + R[2, 1]
                                + R[2, 2] + Pi[0] + Pi[1] + Pi[2]):
                code = CODE_NONFINITE
                done = True
            # output times at t0 itself (a traced SaveAt(ts) may begin there): the initial state, no step
            while i < n_out and ts[i] <= t:
                i = put(b, i, R, Pi, A, 0, R_out, Pi_out, out_k, A_out)
        while (not done) and i < n_out and acc + rej < max_steps:  # one output a pass
            # the steps to output i: with constant steps `every` of them, with error control until one
            # lands on ts[i]; the output is written after them, not among them (a store among the
            # steps slowed the constant-step loop on a CPU)
            landed = bool(False)
            count = max_steps - acc - rej
            if wp.static(CONSTANT):
                count = every
            for _s in range(count):
                step = h
                if wp.static(CONSTANT):
                    t = t0 + S(acc) * h
                    hit = bool(False)  # (no step is shortened to land on an output)
                    Rp, Pip, Ap = advance(R, Pi, A, t, step, J, P)
                    ok = bool(True)
                    if failed < 0:
                        r = reason(Pip, Ap)
                        if r != 0:
                            failed = acc + 1
                            code = r
                else:
                    target = ts[i]
                    hit = t + h >= target - S(LANDING) * wp.max(S(1.0), wp.abs(target))
                    if hit:
                        step = target - t
                    Rp, Pip, Ap, err = advance(R, Pi, A, t, step, J, P, rt, at)
                    ok, h_new, e = control(err, err_prev, h, step, hit)
                if ok:
                    t_next = t + step
                    if wp.static(not CONSTANT):
                        if hit:
                            t_next = target
                        err_prev = e
                    cross = bool(False)
                    if wp.static(EVENT):
                        if not found:
                            gb = g(t_next, Rp, Pip, Q)
                            cross = crossed(gprev, gb)
                            gprev = gb
                    acc = acc + 1
                    if wp.static(RECORD):  # (a terminal event's crossing step too: SaveAt(steps=...), dense)
                        if acc <= t_rec.shape[1]:
                            t_rec[b, acc - 1] = t
                            h_rec[b, acc - 1] = step
                            if acc - 1 == next_kept:  # the state of every stride-th step (a checkpoint)
                                R_rec[b, kept] = R
                                Pi_rec[b, kept] = Pi
                                kept = kept + 1
                                next_kept = next_kept + stride
                    if wp.static(DEFER) and cross:
                        # the body stops here: t, R, Pi (and the memory) stay at the crossing step's start
                        found = True
                        done = True
                        h_cross = step
                        hit_cross = hit
                    else:
                        if wp.static(EVENT and not DEFER):
                            if cross:
                                found = True
                                tev, Rev, Piev = locate(t, step, R, Pi, Rp, Pip, J, P, Q)
                                if wp.static(TERMINAL):
                                    done = True
                        t = t_next
                        R = Rp
                        Pi = Pip
                        A = Ap
                        landed = hit
                else:
                    rej = rej + 1
                if wp.static(not CONSTANT):
                    h = h_new
                if landed or done:
                    break
            if landed or wp.static(CONSTANT):
                i = put(b, i, R, Pi, A, acc, R_out, Pi_out, out_k, A_out)
        # outputs not reached hold the last state (after a deferred terminal event: the event state)
        Rf = R
        Pif = Pi
        if wp.static(DEFER):
            if found:
                # the crossing step again, from the same state and memory (the same values), then
                # the event located on it; an output time it landed on at or before the event is written
                Rp, Pip, Ap, err = advance(R, Pi, A, t, h_cross, J, P, rt, at)
                tev, Rev, Piev = locate(t, h_cross, R, Pi, Rp, Pip, J, P, Q)
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
                    i = put(b, i, Rp, Pip, Ap, acc, R_out, Pi_out, out_k, A_out)
                Rf = Rev
                Pif = Piev
        for k in range(i, n_out):
            put(b, k, Rf, Pif, A, acc, R_out, Pi_out, out_k, A_out)
        if wp.static(not CONSTANT):
            if code == 0 and i < n_out and not (wp.static(DEFER) and found):  # (a terminal event: not short)
                code = CODE_MAX
        if wp.static(EVENT or not CONSTANT):
            tev_out[b] = tev
            Rev_out[b] = Rev
            Piev_out[b] = Piev
        return acc, rej, failed, err_prev, code

    return run
