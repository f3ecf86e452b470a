"""Every combination of the loop's options, generated: {constant, error-controlled} steps x
{SaveAt(t1), SaveAt(steps), SaveAt(ts), SaveAt(dense)} x {no event, event, terminal event} x
{one body, batch} x {each executor}. Each run agrees with the exact flow of the T-handle (states at
the saved times, the time of its flip) and with the one-body XLA run."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize as so

import jaxrot
from jaxrot import exact, kernels, problems

P = problems.get("t_handle")
T1 = 8.0
FLIP = jaxrot.Event(lambda t, s, args: s.R[1, 1], direction=-1)  # the long axis' world-y component
WATCH = jaxrot.Event(lambda t, s, args: s.R[1, 1], direction=-1, terminal=False)
TS = [0.5, 3.25, 7.0]

CONTROLLERS = {
    # buss4 at h = 1e-2 and buss4(3) at 1e-10: both within ~1e-6 of the exact flow over [0, 8]
    "constant": dict(method="buss4", dt=1e-2, n_steps=800, stepsize=jaxrot.Fixed(), tol=2e-6),
    "pi": dict(method="buss4(3)", t1=T1, stepsize=jaxrot.Adaptive(rtol=1e-10, atol=1e-10), tol=2e-6),
}
SAVES = {"t1": jaxrot.SaveAt(), "steps": jaxrot.SaveAt(steps=50), "ts": jaxrot.SaveAt(ts=TS),
         "dense": jaxrot.SaveAt(dense=True)}
EVENTS = {"none": None, "event": WATCH, "terminal": FLIP}


@pytest.fixture(scope="module")
def flip_time():
    t = 7.6768
    return so.brentq(lambda s: float(exact.free_flow(P.body.J, P.state0, s).R[1, 1]), t - 0.01, t + 0.01,
                     xtol=1e-15, rtol=1e-15)


def _batch():
    # body 0 is the one-body run's; body 1 turns a little faster (it flips earlier)
    return jaxrot.State(jnp.stack([P.state0.R, P.state0.R]), jnp.stack([P.state0.Pi, 1.01 * P.state0.Pi]))


def _run(ctrl, save, event, state0=None, executor=None):
    c = CONTROLLERS[ctrl]
    kw = dict(stepsize=c["stepsize"], saveat=SAVES[save], event=EVENTS[event], state0=state0, executor=executor)
    if "dt" in c:
        return jaxrot.simulate(c["method"], P, c["dt"], c["n_steps"], **kw)
    return jaxrot.simulate(c["method"], P, t1=c["t1"], **kw)


def _exact(t):
    return exact.free_flow(P.body.J, P.state0, t)


CASES = list(itertools.product(CONTROLLERS, SAVES, EVENTS))


@pytest.mark.parametrize("ctrl,save,event", CASES)
def test_one_body_agrees_with_the_exact_flow(ctrl, save, event, flip_time):
    tr = _run(ctrl, save, event)
    tol = CONTROLLERS[ctrl]["tol"]
    ts = np.asarray(tr.ts)
    finite = np.isfinite(ts)
    assert finite[0] and ts[0] == 0.0
    if save == "ts":
        np.testing.assert_allclose(ts, [0.0, *TS, T1], rtol=0, atol=1e-12)
    stop = flip_time if event == "terminal" else np.inf
    for k in np.flatnonzero(finite):
        t = min(ts[k], stop)
        ex = _exact(t)
        R = np.asarray(tr.states.R[k])
        assert np.max(np.abs(R - np.asarray(ex.R))) < (50 * tol if ts[k] > stop else tol), (k, ts[k])
    if event == "none":
        assert tr.event_time is None
    else:
        assert abs(float(tr.event_time) - flip_time) <= 1e-8 * flip_time
        assert abs(float(tr.event_state.R[1, 1])) < 1e-9
    if save == "dense":
        mid = tr.evaluate(3.3)
        assert np.max(np.abs(np.asarray(mid.R) - np.asarray(_exact(3.3).R))) < 10 * tol


EXECUTORS = {"xla": jaxrot.XLA, "sharded": jaxrot.Sharded, "blocked": lambda: jaxrot.CPUBlocked(1),
             "fused": jaxrot.Fused}


def _executor_cases():
    """Every case on every executor; in the fast tier each case on one executor, the executor
    ``(controller + SaveAt + event) mod 4`` (by their indices): every case runs batched once, and every
    controller, SaveAt and event meets every executor (the one-body runs of every case are
    test_one_body_agrees_with_the_exact_flow's)."""
    names = list(EXECUTORS)
    for j, name in enumerate(names):
        for case in CASES:
            c, s, e = list(CONTROLLERS).index(case[0]), list(SAVES).index(case[1]), list(EVENTS).index(case[2])
            fast = (c + s + e) % len(names) == j
            yield pytest.param(*case, name, id="-".join((*case, name)), marks=() if fast else pytest.mark.slow)


@pytest.mark.parametrize("ctrl,save,event,executor", list(_executor_cases()))
def test_batch_and_executors_agree_with_one_body_or_refuse(ctrl, save, event, executor, flip_time):
    """Constant steps: body 0 of a batch equals the one-body run to round-off. Error-controlled steps:
    the step sizes follow the error estimate, a difference of two results whose relative round-off is
    eps over the tolerance (1e-6 at 1e-10), so a vmapped program's steps drift from the one-body
    program's at that level; output times agree exactly, every kept step's state agrees with the
    exact flow as the one-body run's does, and the event times agree to 1e-9."""
    if executor == "fused" and not kernels.have_warp():
        pytest.skip("the fused kernels need NVIDIA Warp (the fast extra)")
    one = _run(ctrl, save, event)
    tol = CONTROLLERS[ctrl]["tol"]
    for ex in [EXECUTORS[executor]()]:
        # (the fused kernels run every case: constant or error-controlled steps, every SaveAt, any event)
        tr = _run(ctrl, save, event, state0=_batch(), executor=ex)
        assert tr.info["executor"] == type(ex).__name__
        if ctrl == "pi" and save == "steps":
            ts = np.asarray(tr.ts[0])
            n = int(np.isfinite(ts).sum())
            assert abs(n - int(np.isfinite(np.asarray(one.ts)).sum())) <= 1
            np.testing.assert_allclose(ts[:n - 1], np.asarray(one.ts)[:n - 1], rtol=1e-4)
            stop = flip_time if event == "terminal" else np.inf
            for k in range(n):
                if ts[k] <= stop:
                    ex_R = np.asarray(_exact(ts[k]).R)
                    assert np.max(np.abs(np.asarray(tr.states.R[0, k]) - ex_R)) < tol
        else:
            np.testing.assert_allclose(np.asarray(tr.ts[0]), np.asarray(one.ts), rtol=0, atol=1e-12)
            same = 1e-10 if ctrl == "constant" else tol
            np.testing.assert_allclose(np.asarray(tr.states.R[0]), np.asarray(one.states.R), rtol=0, atol=same)
            np.testing.assert_allclose(np.asarray(tr.states.Pi[0]), np.asarray(one.states.Pi), rtol=same, atol=same)
        if event != "none":
            np.testing.assert_allclose(float(tr.event_time[0]), float(one.event_time),
                                       rtol=1e-12 if ctrl == "constant" else 1e-9)
            assert float(tr.event_time[1]) < float(tr.event_time[0])  # the faster body flips first
        if save == "dense":
            np.testing.assert_allclose(np.asarray(tr.evaluate(3.3).R[0]), np.asarray(one.evaluate(3.3).R),
                                       atol=1e-10 if ctrl == "constant" else tol)


def test_a_terminal_event_ends_the_loop():
    c = CONTROLLERS["pi"]
    full = jaxrot.simulate(c["method"], P, t1=T1, stepsize=c["stepsize"])
    cut = jaxrot.simulate(c["method"], P, t1=T1, stepsize=c["stepsize"], event=jaxrot.Event(
        lambda t, s, args: t - 0.8, direction=1))
    assert 0 < int(cut.controller.n_accepted) < int(full.controller.n_accepted) // 5
    fixed = jaxrot.simulate("buss4", P, 1e-2, 800, event=jaxrot.Event(lambda t, s, args: t - 0.8, direction=1))
    assert int(fixed.controller.n_accepted) == 80  # the step on which t crosses 0.8 (80.000...1 steps)
