"""The input checks hold when simulate / simulate_batch / final_state are traced (jit, grad, vmap):
the same messages as the plain call, raised at run time through ``eqx.error_if``."""

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest

import jaxrot
from jaxrot import problems

jax.config.update("jax_enable_x64", True)
P = problems.get("t_handle")
# under eqx.filter_jit the error is an EquinoxRuntimeError; under jax.jit JAX wraps it in its own
# runtime error (the message, with ours inside, is all a program can rely on)
TRACED_ERRORS = (eqx.EquinoxRuntimeError, jax.errors.JaxRuntimeError)


def _state(R=None, Pi=None):
    return jaxrot.State(P.state0.R if R is None else R, P.state0.Pi if Pi is None else Pi)


BAD = {
    "non-orthogonal R": (lambda: _state(R=1.01 * jnp.eye(3)), "not orthogonal"),
    "reflection": (lambda: _state(R=jnp.diag(jnp.array([1.0, 1.0, -1.0]))), "det <= 0"),
    "NaN momentum": (lambda: _state(Pi=jnp.array([jnp.nan, 1.0, 0.0])), "NaN or inf"),
}


def _plain(state, dt=0.01):
    return jaxrot.simulate("buss2p", P, dt, 10, state0=state).final.R


@pytest.mark.parametrize("case", sorted(BAD))
def test_plain_call_raises_value_error(case):
    make, msg = BAD[case]
    with pytest.raises(ValueError, match=msg):
        _plain(make())


# every transform with some bad input, every bad input under some transform (each pair compiles
# a program, so the full 3 x 5 product would cost minutes of CI for no extra code path)
PAIRS = [("non-orthogonal R", "jit"), ("reflection", "grad"), ("NaN momentum", "vmap"),
         ("non-orthogonal R", "batch_jit"), ("reflection", "final_state_jit"), ("NaN momentum", "jit")]


@pytest.mark.parametrize("case,transform", PAIRS)
def test_traced_call_raises_with_the_same_message(case, transform):
    make, msg = BAD[case]
    s = make()
    if transform == "jit":
        run = lambda: jax.jit(_plain)(s)  # noqa: E731
    elif transform == "grad":
        run = lambda: jax.grad(lambda R: jnp.sum(_plain(jaxrot.State(R, s.Pi))))(s.R)  # noqa: E731
    elif transform == "vmap":
        batch = jax.tree_util.tree_map(lambda x: jnp.stack([P.state0.R if x.shape == (3, 3) else P.state0.Pi, x]), s)
        run = lambda: jax.vmap(_plain)(batch)  # noqa: E731
    elif transform == "batch_jit":
        batch = jax.tree_util.tree_map(lambda x: x[None], s)
        run = lambda: jax.jit(lambda b: jaxrot.simulate_batch("buss2p", P, 0.01, 10, states0=b).states.R)(batch)  # noqa: E731
    else:
        run = lambda: jax.jit(lambda st: jaxrot.final_state("buss2p", P, 0.01, 10, state0=st).R)(s)  # noqa: E731
    with pytest.raises(TRACED_ERRORS, match=msg):
        jax.block_until_ready(run())


def test_traced_dt_is_checked():
    run = jax.jit(lambda d: _plain(P.state0, d))  # one compiled program, four bad values
    for dt in [0.0, -0.1, float("inf"), float("nan")]:
        with pytest.raises(TRACED_ERRORS, match="dt must be finite and > 0"):
            jax.block_until_ready(run(jnp.asarray(dt)))
    batch = jax.tree_util.tree_map(lambda x: x[None], P.state0)
    with pytest.raises(TRACED_ERRORS, match="dt must be finite and > 0"):
        jax.block_until_ready(jax.jit(lambda d: jaxrot.simulate_batch("buss2p", P, d, 10, states0=batch).states.R)(
            jnp.asarray(0.0)))


def test_traced_inertia_is_checked_in_batches():
    batch = jax.tree_util.tree_map(lambda x: x[None], P.state0)

    @jax.jit
    def run(Jb):
        q = jaxrot.Problem(jaxrot.RigidBody(Jb), P.torque, P.state0, P.t_end)
        return jaxrot.simulate_batch("buss2p", q, 0.01, 10, states0=batch).states.R

    for J in ([-1.0, 1.4, 1.3], [3.0, 1.0, 1.0]):  # negative; violates J_i <= J_j + J_k
        with pytest.raises(TRACED_ERRORS, match="principal moments J"):
            jax.block_until_ready(run(jnp.asarray(J)))


def test_good_input_passes_every_transform():
    R = jax.jit(_plain)(P.state0)
    g = jax.grad(lambda R0: jnp.sum(_plain(jaxrot.State(R0, P.state0.Pi))))(P.state0.R)
    assert bool(jnp.all(jnp.isfinite(R))) and bool(jnp.all(jnp.isfinite(g)))
