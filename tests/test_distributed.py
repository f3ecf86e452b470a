"""simulate_batch and the maps under JAX's multi-controller runtime: two CPU processes on localhost
(``jax.distributed.initialize`` with a local coordinator) return what one process returns."""

import socket
import subprocess
import sys
import textwrap

import jax.numpy as jnp
import numpy as np

import jaxrot
from jaxrot import maps, problems

from .helpers import subprocess_env

WORKER = textwrap.dedent(
    """
    import sys
    import jax
    jax.config.update("jax_enable_x64", True)
    pid, port, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    jax.distributed.initialize(coordinator_address=f"localhost:{port}", num_processes=2, process_id=pid)
    import numpy as np, jax.numpy as jnp, jaxrot
    from jaxrot import maps, problems
    assert jax.process_count() == 2 and len(jax.devices()) == 2 and len(jax.local_devices()) == 1
    p = problems.get("t_handle")
    rng = np.random.default_rng(0)  # the same whole batch on every process
    B = 6
    s = jaxrot.State(jax.vmap(jaxrot.so3.exp)(jnp.asarray(rng.normal(size=(B, 3)))), jnp.asarray(rng.normal(size=(B, 3))))
    traj = jaxrot.simulate_batch("buss2p", p, 0.01, 20, states0=s, save_every=10)
    local = [sh.data.shape[0] for sh in traj.states.R.addressable_shards]  # this process's bodies only
    g = jaxrot.gather(traj)
    odd = jaxrot.gather(jaxrot.simulate_batch("buss2p", p, 0.01, 20, states0=jax.tree_util.tree_map(lambda x: x[:5], s), save_every=10))  # padded
    x = np.linspace(-15, 15, 9)
    X, Y = np.meshgrid(x, x)
    conv = maps.convergence_map("midpoint", np.array([2.5, 1.4, 1.3]), np.stack([X, Y, 0 * X], -1), chunk=20)
    np.savez(out, R=g.states.R, Pi=g.states.Pi, failed=g.failed_step, oddR=odd.states.R, conv=conv, local=np.asarray(local))
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def test_two_processes_match_one(tmp_path):
    port = str(_free_port())
    env = subprocess_env(JAX_PLATFORMS="cpu")
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(i), port, str(tmp_path / f"out{i}.npz")], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    for pr in procs:
        _, err = pr.communicate(timeout=300)
        assert pr.returncode == 0, err[-3000:]

    p = problems.get("t_handle")
    rng = np.random.default_rng(0)
    B = 6
    s = jaxrot.State(jnp.stack([jaxrot.so3.exp(v) for v in jnp.asarray(rng.normal(size=(B, 3)))]),
                     jnp.asarray(rng.normal(size=(B, 3))))
    ref = jaxrot.simulate_batch("buss2p", p, 0.01, 20, states0=s, save_every=10)
    x = np.linspace(-15, 15, 9)
    X, Y = np.meshgrid(x, x)
    conv = maps.convergence_map("midpoint", np.array([2.5, 1.4, 1.3]), np.stack([X, Y, 0 * X], -1), chunk=20)
    for i in range(2):
        got = np.load(tmp_path / f"out{i}.npz")
        assert list(got["local"]) == [3]  # each process holds only its own shard
        assert got["R"].shape == (B, 3, 3, 3)
        np.testing.assert_allclose(got["R"], np.asarray(ref.states.R), rtol=0, atol=1e-14)
        np.testing.assert_allclose(got["Pi"], np.asarray(ref.states.Pi), rtol=0, atol=1e-14)
        np.testing.assert_allclose(got["oddR"], np.asarray(ref.states.R)[:5], rtol=0, atol=1e-14)
        assert np.array_equal(got["failed"], np.asarray(ref.failed_step))
        assert np.array_equal(got["conv"], conv) and (conv >= 0).any() and (conv < 0).any()
