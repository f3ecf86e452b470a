"""simulate_batch and the maps shard over several devices and returns what a single device returns (to round-off)."""

import subprocess
import sys
import textwrap

import pytest

from .helpers import subprocess_env

def test_sharded_batch_matches_single_device():
    code = textwrap.dedent(
        """
        import jax
        jax.config.update("jax_enable_x64", True)
        import numpy as np, jax.numpy as jnp, jaxrot
        from jaxrot import problems
        assert len(jax.devices()) == 4, jax.devices()
        p = problems.get("t_handle")
        rng = np.random.default_rng(0)
        B = 6  # not a multiple of 4: exercises the padding
        R0 = jax.vmap(jaxrot.so3.exp)(jnp.asarray(rng.normal(size=(B, 3))))
        s = jaxrot.State(R0, jnp.asarray(rng.normal(size=(B, 3))))
        for m in ["buss2p", "liemid_ea"]:
            a = jaxrot.simulate_batch(m, p, 0.01, 20, states0=s, save_every=10)
            b = jaxrot.simulate_batch(m, p, 0.01, 20, states0=s, save_every=10, devices=jax.devices()[:1])
            assert a.states.R.shape == (B, 3, 3, 3)
            # equal to round-off: a different per-device batch changes XLA's vectorisation, which
            # moves some results by 1 ulp (measured max 1.1e-16)
            np.testing.assert_allclose(np.asarray(a.states.R), np.asarray(b.states.R), rtol=0, atol=1e-14)
            np.testing.assert_allclose(np.asarray(a.states.Pi), np.asarray(b.states.Pi), rtol=0, atol=1e-14)
        # maps: iteration counts identical (integers), energy changes to round-off
        from jaxrot import maps
        x = np.linspace(-15, 15, 13)
        X, Y = np.meshgrid(x, x)
        ells = np.stack([X, Y, 0 * X], -1)
        J = np.array([2.5, 1.4, 1.3])
        a = maps.convergence_map("midpoint", J, ells, chunk=50)
        b = maps.convergence_map("midpoint", J, ells, chunk=50, devices=jax.devices()[:1])
        assert np.array_equal(a, b) and (a >= 0).any() and (a < 0).any()
        body = jaxrot.RigidBody(J)
        a = maps.energy_change_map("midpoint_exp_adaptive", body, ells[::3, ::3], chunk=7)
        b = maps.energy_change_map("midpoint_exp_adaptive", body, ells[::3, ::3], chunk=7, devices=jax.devices()[:1])
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-14)
        print("OK")
        """
    )
    env = subprocess_env("--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-3000:]


@pytest.mark.slow  # a subprocess with per-core devices; test_sharded_batch_matches_single_device covers the sharded path
def test_cpu_cores_as_devices_block_each_part_and_match_one_device():
    """use_cpu_cores(2): the batch is split over two CPU devices and each part runs in its own blocks
    (13 bodies: padded to 14, 7 per device, blocks of 3 with each part's last block padded)."""
    code = textwrap.dedent(
        """
        import jax
        import jaxrot
        assert jaxrot.use_cpu_cores(2) == 2
        jax.config.update("jax_enable_x64", True)
        import numpy as np, jax.numpy as jnp
        from jaxrot import problems
        assert len(jax.devices()) == 2, jax.devices()
        try:
            jaxrot.use_cpu_cores(3)
            raise SystemExit("a late use_cpu_cores did not raise")
        except RuntimeError:
            pass
        p = problems.get("t_handle")
        rng = np.random.default_rng(1)
        B = 13
        s = jaxrot.State(jax.vmap(jaxrot.so3.exp)(jnp.asarray(rng.normal(size=(B, 3)))),
                         jnp.asarray(rng.normal(size=(B, 3))))
        for m in ["buss2p", "split4_231"]:
            a = jaxrot.simulate_batch(m, p, 0.01, 20, states0=s, save_every=5, block_size=3)
            assert len(a.states.R.sharding.device_set) == 2
            b = jaxrot.simulate_batch(m, p, 0.01, 20, states0=s, save_every=5, block_size=None,
                                      devices=jax.devices()[:1])
            assert a.states.R.shape == (B, 5, 3, 3)
            np.testing.assert_allclose(np.asarray(a.states.R), np.asarray(b.states.R), rtol=0, atol=1e-14)
            np.testing.assert_allclose(np.asarray(a.states.Pi), np.asarray(b.states.Pi), rtol=0, atol=1e-14)
            assert np.array_equal(np.asarray(a.ts), np.asarray(b.ts))
        # shard_map under a caller's jit and grad: the one-device values and gradient
        def loss(Pi, devices=None):
            return jnp.sum(jaxrot.simulate_batch("buss4", p, 0.01, 20, states0=jaxrot.State(s.R, Pi),
                                                 save_every=10, block_size=3, devices=devices).final.Pi ** 2)
        one = jax.devices()[:1]
        np.testing.assert_allclose(jax.jit(loss)(s.Pi), loss(s.Pi, one), rtol=1e-14)
        np.testing.assert_allclose(jax.grad(loss)(s.Pi), jax.grad(lambda P: loss(P, one))(s.Pi), rtol=1e-12, atol=1e-14)
        print("OK")
        """
    )
    env = subprocess_env(JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-3000:]
