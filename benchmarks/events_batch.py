"""Time of a terminal event on 1000 T-handles (buss4, dt = 1e-3, 10 000 steps) against the same run without it.

    python benchmarks/events_batch.py
"""
import time, jax, jax.numpy as jnp, numpy as np, jaxrot
jax.config.update("jax_enable_x64", True)
P = jaxrot.problems.get("t_handle")
FLIP = jaxrot.Event(lambda t, s, args: s.R[1, 1], direction=-1)
B = 1000
Pi = P.state0.Pi * (1.0 + 0.2 * jax.random.uniform(jax.random.PRNGKey(0), (B, 1))) + 0.01 * jax.random.normal(jax.random.PRNGKey(1), (B, 3))
S = jaxrot.State(jnp.broadcast_to(P.state0.R, (B, 3, 3)), Pi)
def run():
    tr = jaxrot.simulate("buss4", P, 1e-3, 10000, state0=S, event=FLIP, saveat=jaxrot.SaveAt(t0=False))
    return tr.event_time
t = time.perf_counter(); et = jax.block_until_ready(run()); t1 = time.perf_counter() - t
t = time.perf_counter(); et = jax.block_until_ready(run()); t2 = time.perf_counter() - t
def plain():
    return jaxrot.simulate("buss4", P, 1e-3, 10000, state0=S, saveat=jaxrot.SaveAt(t0=False)).final.R
jax.block_until_ready(plain()); t = time.perf_counter(); jax.block_until_ready(plain()); t3 = time.perf_counter() - t
print(f"1000 bodies, 10000 steps dt=1e-3: first call {t1:.2f} s, second {t2:.2f} s, without event {t3:.2f} s; found {int(jnp.isfinite(et).sum())}, event times {float(jnp.nanmin(et)):.3f}..{float(jnp.nanmax(et)):.3f}")
