"""jaxrot.compile: one checked, ahead-of-time compiled run reused with new initial states and steps."""

import jax.numpy as jnp
import numpy as np
import pytest

import jaxrot
from jaxrot import problems


def test_compiled_run_equals_simulate_and_takes_new_states_and_steps():
    p = problems.get("fast_top")
    run = jaxrot.compile("buss4", p, 1e-3, 40, save_every=10)
    a = run()
    b = jaxrot.simulate("buss4", p, 1e-3, 40, saveat=jaxrot.SaveAt(steps=10))
    np.testing.assert_allclose(np.asarray(a.states.R), np.asarray(b.states.R), atol=1e-15)
    s = jaxrot.State(p.state0.R, p.state0.Pi * 1.1)
    c = run(s, jnp.asarray(2e-3))
    d = jaxrot.simulate("buss4", p, 2e-3, 40, saveat=jaxrot.SaveAt(steps=10), state0=s)
    np.testing.assert_allclose(np.asarray(c.states.Pi), np.asarray(d.states.Pi), atol=1e-14)
    assert int(c.failed_step) == -1


def test_compiled_batch_and_checks():
    p = problems.get("t_handle")
    run = jaxrot.compile("buss2p", p, 1e-2, 20, batch=5)
    S = jaxrot.State(jnp.broadcast_to(p.state0.R, (5, 3, 3)), p.state0.Pi * jnp.linspace(0.5, 1.5, 5)[:, None])
    out = run(S)
    one = jaxrot.simulate("buss2p", p, 1e-2, 20, saveat=jaxrot.SaveAt(steps=20), state0=jaxrot.State(S.R[3], S.Pi[3]))
    np.testing.assert_allclose(np.asarray(out.final.R[3]), np.asarray(one.final.R), atol=1e-14)
    with pytest.raises(ValueError, match="dt"):
        jaxrot.compile("buss2p", p, -1.0, 20)
    with pytest.raises(ValueError, match="batch"):
        jaxrot.compile("buss2p", p, 1e-2, 20, batch=0)
