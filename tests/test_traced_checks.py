"""Every bad input x {plain call, jit, grad, vmap, simulate_batch, jit(simulate_batch)}: the same
checks and messages whether values are concrete (``ValueError`` before anything runs), known under
``grad``/``vmap`` without ``jit`` (the same ``ValueError`` at once, a vmapped body named by its index)
or only known at run time under ``jit`` (a host callback raises it, JAX wraps it in its runtime
error, ``jaxrot.simulation_errors()`` re-raises the ``ValueError``). Each transform is one compiled
program for every bad value (all five inputs are its arguments), so the whole table costs a handful
of compilations."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrot
from jaxrot import problems

jax.config.update("jax_enable_x64", True)
P = problems.get("t_handle")
GOOD = dict(R=P.state0.R, Pi=P.state0.Pi, J=P.body.J, dt=jnp.asarray(0.01), t0=jnp.asarray(0.0))
DT_MSG = "must be finite and > 0"
# name: (argument, bad value, message, raised while tracing (shapes are static) rather than at run time)
CASES = {
    "non-orthogonal R": ("R", 1.01 * jnp.eye(3), "is not orthogonal", False),
    "reflection": ("R", jnp.diag(jnp.array([1.0, 1.0, -1.0])), "det <= 0", False),
    "NaN momentum": ("Pi", jnp.array([jnp.nan, 1.0, 0.0]), "NaN or inf", False),
    "negative J": ("J", jnp.array([-1.0, 1.4, 1.3]), "principal moments J", False),
    "J violates the triangle inequality": ("J", jnp.array([3.0, 1.0, 1.0]), "principal moments J", False),
    "dt = 0": ("dt", jnp.asarray(0.0), DT_MSG, False),
    "dt < 0": ("dt", jnp.asarray(-0.1), DT_MSG, False),
    "dt = inf": ("dt", jnp.asarray(jnp.inf), DT_MSG, False),
    "dt = nan": ("dt", jnp.asarray(jnp.nan), DT_MSG, False),
    "t0 = nan": ("t0", jnp.asarray(jnp.nan), "must be a finite scalar", False),
    "dt of shape (1,)": ("dt", jnp.asarray([0.01]), "dt must be a scalar", True),
}
TRANSFORMS = ["plain", "jit", "grad", "vmap", "batch", "batch_jit"]


def _final_R(R, Pi, J, dt, t0):
    q = jaxrot.Problem(jaxrot.RigidBody(J), P.torque, P.state0, P.t_end)
    return jaxrot.simulate("buss2p", q, dt, 10, state0=jaxrot.State(R, Pi), t0=t0).final.R


def _batch_R(R, Pi, J, dt, t0):  # R, Pi with a leading batch axis; J, dt, t0 shared
    q = jaxrot.Problem(jaxrot.RigidBody(J), P.torque, P.state0, P.t_end)
    return jaxrot.simulate_batch("buss2p", q, dt, 10, states0=jaxrot.State(R, Pi), t0=t0).states.R


_jit = jax.jit(_final_R)
_vmap = jax.vmap(_final_R)
_batch_jit = jax.jit(_batch_R)


def _grad(*args):
    return jax.grad(lambda *a: jnp.sum(_final_R(*a)), argnums=(0, 1, 2, 3, 4))(*args)


def _pair(good, bad):  # body 0 good, body 1 bad
    return jnp.stack([jnp.broadcast_to(jnp.asarray(good, bad.dtype), bad.shape), bad])


def _run(transform, args):
    R, Pi, J, dt, t0 = (args[k] for k in ("R", "Pi", "J", "dt", "t0"))
    if transform == "plain":
        return _final_R(R, Pi, J, dt, t0)
    if transform == "jit":
        return _jit(R, Pi, J, dt, t0)
    if transform == "grad":
        return _grad(R, Pi, J, dt, t0)
    if transform == "vmap":  # every argument batched: body 0 good, body 1 as given
        return _vmap(*(_pair(GOOD[k], args[k]) for k in ("R", "Pi", "J", "dt", "t0")))
    states = (_pair(GOOD["R"], R), _pair(GOOD["Pi"], Pi))
    return (_batch_R if transform == "batch" else _batch_jit)(*states, J, dt, t0)


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_raises_the_documented_error(case, transform):
    arg, value, msg, static = CASES[case]
    if (transform in ("batch", "batch_jit") and arg in ("R", "Pi")) or (transform == "vmap" and not static):
        # a batch names the body; under vmap, its index along the vmapped axis
        msg = f"of body 1 .*{msg}|{msg}.*of body 1 "
    args = dict(GOOD, **{arg: value})
    if transform in ("jit", "batch_jit") and not static:
        # known only at run time: JAX's error (a JaxRuntimeError, or a ValueError once the compiled
        # function has run before) with the plain message inside and no equinox banner;
        # simulation_errors() re-raises the plain ValueError itself
        with pytest.raises((jax.errors.JaxRuntimeError, ValueError), match=msg) as e:
            jax.block_until_ready(_run(transform, args))
        assert "filter_jit" not in str(e.value)
        with pytest.raises(ValueError, match=msg) as e, jaxrot.simulation_errors():
            jax.block_until_ready(_run(transform, args))
        assert "Traceback" not in str(e.value)
    else:
        with pytest.raises(ValueError, match=msg):
            jax.block_until_ready(_run(transform, args))


@pytest.mark.parametrize("transform", TRANSFORMS)
def test_good_input_passes_every_transform(transform):
    out = _run(transform, GOOD)
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree_util.tree_leaves(out))


def test_structural_inputs_are_promoted_or_rejected_by_name():
    batch = jax.tree_util.tree_map(lambda x: jnp.stack([x, x]), P.state0)
    # accepted: a NumPy integer step count; a float32 state with float64 J runs in float32
    assert jaxrot.simulate("buss2p", P, 0.01, np.int64(10)).final.R.shape == (3, 3)
    assert jaxrot.simulate("buss2p", P, 0.01, 10, state0=jaxrot.cast(P.state0, jnp.float32)).final.R.dtype == jnp.float32
    with pytest.raises(ValueError, match="empty batch"):
        jaxrot.simulate_batch("buss2p", P, 0.01, 10, states0=jax.tree_util.tree_map(lambda x: x[:0], batch))
    with pytest.raises(ValueError, match="devices must be a non-empty list"):
        jaxrot.simulate_batch("buss2p", P, 0.01, 10, states0=batch, devices=[])
    with pytest.raises(TypeError, match="n_steps must be an int"):
        jaxrot.simulate("buss2p", P, 0.01, 10.0)
    with pytest.raises(ValueError, match="n_steps must be >= 1"):
        jaxrot.simulate("buss2p", P, 0.01, 0)
    with pytest.raises(ValueError, match="t0 must be a finite scalar"):
        jaxrot.final_state("buss2p", P, 0.01, 10, t0=jnp.zeros(2))
