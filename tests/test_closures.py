"""Derivatives with respect to values a torque function or an event condition closes over
(``jaxrot.closures.hoist``): the way users write a parameter they differentiate."""

import functools
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrot
from jaxrot import closures, problems

T_HANDLE = problems.get("t_handle")
TOP = problems.get("asymmetric_top")


def test_a_function_closing_over_nothing_traced_is_kept():
    c = jnp.asarray(0.5)

    def cond(t, s, args):
        return s.R[1, 1] - c

    assert closures.hoist(cond) is cond
    assert jaxrot.Event(cond).cond_fn is cond
    assert closures.hoist(len) is len  # not a Python function


def test_a_closure_over_a_traced_value_calls_the_same_code_with_it():
    def helper(x, k):
        return lambda y: k * x + y

    seen = {}

    def f(k):
        inner = helper(2.0, k)

        def g(y, scale=k):
            return inner(y) * scale

        h = closures.hoist(g)
        seen["type"], seen["sig"] = type(h), inspect.signature(h)
        leaves = jax.tree_util.tree_leaves(h)
        seen["leaves"] = sum(isinstance(x, jax.core.Tracer) for x in leaves)
        return h(1.0)

    k = 3.0
    assert float(jax.jit(f)(k)) == (k * 2.0 + 1.0) * k
    assert seen["type"] is closures.Closure
    assert list(seen["sig"].parameters) == ["y", "scale"]
    assert seen["leaves"] == 2  # the default argument, and k in the function it closes over
    np.testing.assert_allclose(float(jax.grad(f)(k)), 4.0 * k + 1.0, rtol=1e-14)  # d/dk (2k^2 + k)


def test_keyword_defaults_partials_and_functions_held_in_containers_are_hoisted():
    def kwonly(k):
        def f(x, *, scale=k):
            return scale * x
        return f

    def partial(k):
        return functools.partial(lambda x, scale: scale * x, scale=k)

    def held(k):
        helpers = {"scale": lambda: k}
        return lambda x: helpers["scale"]() * x

    for make in (kwonly, partial, held):
        def f(k, make=make):
            h = closures.hoist(make(k))
            assert isinstance(h, (closures.Closure, closures.Partial)), make.__name__
            assert any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(h)), make.__name__
            return h(3.0)

        assert float(jax.jit(f)(2.0)) == 6.0
        assert float(jax.grad(f)(2.0)) == 3.0, make.__name__


def _event_time(c, stepsize, executor, batch):
    # the flip of the T-handle's long axis past the level c, c closed over
    flip = jaxrot.Event(lambda t, s, args: s.R[1, 1] - c, direction=-1)
    method = "rkmk8(5,3)" if isinstance(stepsize, jaxrot.Adaptive) else "rk4"
    kw = {}
    if batch:
        P = T_HANDLE.state0
        kw["state0"] = jaxrot.State(jnp.stack([P.R, P.R]), jnp.stack([P.Pi, 1.1 * P.Pi]))
    tr = jaxrot.simulate(method, T_HANDLE, t1=10.0, stepsize=stepsize, event=flip, executor=executor, **kw)
    return jnp.sum(tr.event_time)


CASES = [(jaxrot.Fixed(0.01), jaxrot.XLA(), False), (jaxrot.Adaptive(1e-9, 1e-9), jaxrot.Fused(), True),
         (jaxrot.Fixed(0.01), jaxrot.Fused(), True), (jaxrot.Adaptive(1e-9, 1e-9), jaxrot.XLA(), False)]
IDS = ["constant-XLA-one", "adaptive-Fused-batch", "constant-Fused-batch", "adaptive-XLA-one"]


@pytest.mark.parametrize("stepsize,executor,batch", CASES, ids=IDS)
def test_derivatives_reach_an_event_level_the_condition_closes_over(stepsize, executor, batch):
    """d(event time)/d(level): reverse and forward mode agree, and agree with central differences
    (a smooth function of the level: the steps to the crossing do not depend on it), also under jit."""
    f = functools.partial(_event_time, stepsize=stepsize, executor=executor, batch=batch)
    c = 0.0
    g = float(jax.grad(f)(c))
    d = float(jax.jvp(f, (c,), (1.0,))[1])
    h = 1e-5
    fd = (float(f(c + h)) - float(f(c - h))) / (2 * h)
    assert g < -1.0  # the axis falls through the level: a higher level is crossed sooner
    np.testing.assert_allclose(d, g, rtol=1e-12)
    np.testing.assert_allclose(g, fd, rtol=1e-7)
    if not batch:
        np.testing.assert_allclose(float(jax.jit(jax.grad(f))(c)), g, rtol=1e-12)


def _momentum(k, stepsize, executor):
    # a damping torque -k L in the world frame, k closed over: Pi(1) = exp(-k) Pi(0)
    q = jaxrot.Problem(TOP.body, lambda t, R, Pi: -k * (R @ Pi), TOP.state0, 1.0)
    method = "rkmk8(5,3)" if isinstance(stepsize, jaxrot.Adaptive) else "rk4"
    tr = jaxrot.simulate(method, q, t1=1.0, stepsize=stepsize, executor=executor)
    return jnp.sum(tr.final.Pi * jnp.array([1.0, 2.0, 3.0]))


@pytest.mark.parametrize("stepsize,executor", [(jaxrot.Adaptive(1e-10, 1e-10), jaxrot.XLA()),
                                               (jaxrot.Fixed(0.01), jaxrot.Fused())], ids=["adaptive-XLA", "constant-Fused"])
def test_derivatives_reach_a_parameter_the_torque_closes_over(stepsize, executor):
    """The damping rate of a torque written as a plain function closing over it (the top spins about a
    principal axis, so Pi(1) = exp(-k) Pi0): the derivative is the exact one, -exp(-k) w.Pi0, to the
    run's accuracy."""
    f = functools.partial(_momentum, stepsize=stepsize, executor=executor)
    k = 0.1
    exact = -np.exp(-k) * float(jnp.sum(TOP.state0.Pi * jnp.array([1.0, 2.0, 3.0])))
    g = float(jax.grad(f)(k))
    np.testing.assert_allclose(g, exact, rtol=1e-8)
    if isinstance(stepsize, jaxrot.Fixed):  # (forward mode of an error-controlled run: the event cases)
        np.testing.assert_allclose(float(jax.jvp(f, (k,), (1.0,))[1]), g, rtol=1e-12)


@pytest.mark.slow  # an error-controlled reverse-mode compilation with a monitor (~20 s)
def test_a_potential_closing_over_a_traced_value_is_differentiable_with_a_monitor():
    """The energy monitor of an error-controlled run evaluates the torque's potential in the loop; a
    potential closing over the differentiated value reaches the custom derivative rule as a leaf."""
    def final(k):
        torque = jaxrot.Torque(lambda t, R, Pi: -k * jnp.cross(R[:, 2], jnp.array([0.0, 0.0, 1.0])),
                               potential=lambda t, R: k * R[2, 2])
        q = jaxrot.Problem(TOP.body, torque, TOP.state0, 1.0)
        tr = jaxrot.simulate("rkmk8(5,3)", q, t1=1.0, stepsize=jaxrot.Adaptive(1e-10, 1e-10),
                             monitor=jaxrot.InvariantMonitor(energy_rtol=1e-3))
        return jnp.sum(tr.final.Pi)

    g = float(jax.grad(final)(2.0))
    fd = (float(final(2.0 + 1e-5)) - float(final(2.0 - 1e-5))) / 2e-5
    np.testing.assert_allclose(g, fd, rtol=1e-5)
