"""A repeated simulate call replays its checked plan (jaxrot.driver.replay): the same results as the
first call, its failures raised again, and no stale result where an input can change in place."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrot
from jaxrot import problems
from jaxrot.driver import replay

jax.config.update("jax_enable_x64", True)
P = problems.get("fast_top")


def _same(a, b):
    for x, y in zip(jax.tree_util.tree_leaves((a.ts, a.states, a.failed_step)),
                    jax.tree_util.tree_leaves((b.ts, b.states, b.failed_step))):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.parametrize("kwargs", [dict(dt=1e-3, n_steps=10), dict(dt=1e-3, n_steps=40, saveat=jaxrot.SaveAt(steps=4)),
                                    dict(t1=0.05, stepsize=jaxrot.Adaptive(1e-9, 1e-9))])
def test_a_repeated_call_gives_the_first_calls_trajectory(kwargs):
    method = "buss4(3)" if "stepsize" in kwargs else "buss4"
    replay.forget()
    first = jaxrot.simulate(method, P, **kwargs)
    assert len(replay._PLANS) == 1  # remembered ...
    again = jaxrot.simulate(method, P, **kwargs)
    _same(first, again)
    assert again.provenance == first.provenance and np.array_equal(again.controller.n_accepted, first.controller.n_accepted)
    changed = dict(t1=0.06) if "t1" in kwargs else dict(dt=2e-3)
    other = jaxrot.simulate(method, P, **{**kwargs, **changed})  # ... and another call is another plan
    assert len(replay._PLANS) == 2
    assert not np.array_equal(np.asarray(other.states.R), np.asarray(first.states.R))


def test_option_objects_made_anew_are_matched_by_value(monkeypatch):
    """``saveat=jaxrot.SaveAt(...)`` and ``executor=jaxrot.XLA()`` written in a repeated call are new
    objects each time: equal values replay the plan (the full path, which checks the step-size
    option first, is not taken), a different value does not."""
    from jaxrot.driver import simulate as sim

    replay.forget()
    kw = lambda k: dict(saveat=jaxrot.SaveAt(steps=k), executor=jaxrot.XLA(), stepsize=jaxrot.Fixed())  # noqa: E731
    first = jaxrot.simulate("buss4", P, 1e-3, 20, **kw(5))

    def full_path(*a, **k):
        raise AssertionError("the call was carried out in full")

    monkeypatch.setattr(sim, "_controller", full_path)
    _same(first, jaxrot.simulate("buss4", P, 1e-3, 20, **kw(5)))
    with pytest.raises(AssertionError, match="in full"):
        jaxrot.simulate("buss4", P, 1e-3, 20, **kw(4))
    # an option holding an array is matched by identity only
    ts = jnp.array([0.005, 0.01])
    assert replay.by_value(("k",) * 8, None, jaxrot.SaveAt(ts=ts), None, None, None) is None


def test_a_step_given_as_a_new_device_array_is_matched_by_value(monkeypatch):
    """``dt`` (or ``t0``, ``t1``) passed as a JAX scalar made anew for every call (or a NumPy scalar)
    replays the plan when its value, type and placement are the same; another value or type is another
    call."""
    from jaxrot.driver import simulate as sim

    replay.forget()
    first = jaxrot.simulate("buss4", P, jnp.asarray(1e-3), 20)
    adaptive = dict(stepsize=jaxrot.Adaptive(1e-9, 1e-9), saveat=jaxrot.SaveAt(t1=True))
    first_adaptive = jaxrot.simulate("buss4(3)", P, t1=jnp.asarray(0.05), **adaptive)
    first_numpy = jaxrot.simulate("buss4", P, np.float64(1e-3), 20, t0=np.float64(0.5))

    def full_path(*a, **k):
        raise AssertionError("the call was carried out in full")

    with monkeypatch.context() as m:
        m.setattr(sim, "_controller", full_path)
        _same(first, jaxrot.simulate("buss4", P, jnp.asarray(1e-3), 20))
        _same(first_adaptive, jaxrot.simulate("buss4(3)", P, t1=jnp.asarray(0.05), **adaptive))
        _same(first_numpy, jaxrot.simulate("buss4", P, np.float64(1e-3), 20, t0=np.float64(0.5)))
        for dt in (jnp.asarray(2e-3), jnp.asarray(1e-3, jnp.float32)):
            with pytest.raises(AssertionError, match="in full"):
                jaxrot.simulate("buss4", P, dt, 20)
    other = jaxrot.simulate("buss4", P, jnp.asarray(2e-3), 20)
    assert not np.array_equal(np.asarray(other.states.R), np.asarray(first.states.R))
    # the plan keeps its own copy: the caller's array deleted, a new one of the same value still replays
    dt = jnp.asarray(3e-3, jnp.float64)  # (the run's type: taken as it is, not cast)
    kept = jaxrot.simulate("buss4", P, dt, 20)
    dt.delete()
    _same(kept, jaxrot.simulate("buss4", P, jnp.asarray(3e-3, jnp.float64), 20))
    # a zero's sign is part of its value (the frames keep it); placement too (a committed array's run is
    # committed to its device); an array that is not a number is refused as it was before
    for zero in (jnp.asarray(-0.0), np.float64(-0.0), -0.0):
        assert np.signbit(jaxrot.simulate("buss4", P, 1e-3, 2, t0=zero).ts[0])
        assert not np.signbit(jaxrot.simulate("buss4", P, 1e-3, 2, t0=abs(zero)).ts[0])
    x = jnp.asarray(1e-3, jnp.float64)
    assert replay._number(x) != replay._number(jax.device_put(x, jax.devices()[0]))
    with pytest.raises(TypeError):
        jaxrot.simulate("buss4", P, jax.random.key(0), 2)
    # numbers keyed with their types: a call the checks refuse does not replay an equal accepted one
    jaxrot.simulate("buss4", P, 1.0, 1)
    for dt, n in ((1.0, True), (True, 1), (1.0, 1.0)):
        with pytest.raises(TypeError):
            jaxrot.simulate("buss4", P, dt, n)
    # a scalar closed over by someone's jit is keyed and copied concretely, not staged into the trace
    dt = jnp.asarray(1e-3)
    inside = jax.jit(lambda: jaxrot.simulate("buss4", P, dt, t1=0.02))()
    np.testing.assert_array_equal(np.asarray(inside.ts), [0.0, 0.02])
    assert replay.key("buss4", P, jnp.ones(2), 20, 0.0, None, *(None,) * 7, True, None, 1, None) is None


def test_a_failing_call_fails_again():
    th = problems.get("t_handle")
    for _ in range(2):
        with pytest.raises(jaxrot.SimulationError, match=r"step \d+ failed"):
            jaxrot.simulate("midpoint_exp", th, 20.0, 10)


def test_inputs_that_can_change_in_place_are_not_remembered():
    replay.forget()
    Pi = np.asarray(P.state0.Pi).copy()
    s0 = jaxrot.State(np.asarray(P.state0.R), Pi)  # NumPy arrays: the user may change them in place
    a = jaxrot.simulate("buss4", P, 1e-2, 20, state0=s0)
    Pi[2] *= 1.5
    b = jaxrot.simulate("buss4", P, 1e-2, 20, state0=s0)
    assert len(replay._PLANS) == 0
    fresh = jaxrot.simulate("buss4", P, 1e-2, 20, state0=jaxrot.State(P.state0.R, jnp.asarray(Pi)))
    np.testing.assert_array_equal(np.asarray(b.states.Pi), np.asarray(fresh.states.Pi))
    assert not np.array_equal(np.asarray(a.states.Pi), np.asarray(b.states.Pi))


def test_the_plans_are_bounded():
    replay.forget()
    for k in range(replay.MAX_PLANS + 5):
        jaxrot.simulate("buss2p", P, 1e-3, 2 + k % 3, t0=float(k))
    assert len(replay._PLANS) == replay.MAX_PLANS


def test_a_call_first_made_inside_a_trace_is_not_replayed_with_its_tracers():
    """Made first inside someone's jit (its inputs concrete, closed over), the call's plan would hold
    values of that trace (e.g. the output times): it is not remembered, and the same call made
    afterwards outside runs as a first call."""
    replay.forget()
    save = jaxrot.SaveAt(ts=[0.01, 0.02])
    inside = jax.jit(lambda: jaxrot.simulate("buss4", P, 1e-3, 30, saveat=save).states.R)()
    outside = jaxrot.simulate("buss4", P, 1e-3, 30, saveat=save)
    np.testing.assert_allclose(np.asarray(outside.states.R), np.asarray(inside), rtol=1e-14, atol=1e-14)
    again = jaxrot.simulate("buss4", P, 1e-3, 30, saveat=save)
    _same(outside, again)
