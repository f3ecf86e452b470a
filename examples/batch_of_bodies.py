"""A batch of 1 000 randomly tumbling T-handles in one compiled call, and what each method conserves.

Run: python examples/batch_of_bodies.py
"""

import jax

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402

import jaxrot  # noqa: E402
from jaxrot import analysis, problems, so3  # noqa: E402


def main(n_bodies: int = 1000, n_steps: int = 400) -> dict:
    p = problems.get("t_handle")
    k1, k2 = jax.random.split(jax.random.PRNGKey(0))
    R0 = jax.vmap(so3.exp)(jax.random.normal(k1, (n_bodies, 3)))
    Pi0 = p.body.J * 3.0 * jax.random.normal(k2, (n_bodies, 3))  # J * Omega, |Omega| ~ 3 rad/s
    states0 = jaxrot.State(R0, Pi0)
    out = {}
    for method in ["buss2p", "buss3_ep", "liemid_ea", "euler_svd"]:
        traj = jaxrot.simulate(method, p, 0.01, n_steps, state0=states0, saveat=jaxrot.SaveAt(steps=n_steps))
        E = analysis.energy(p, traj.states)  # (bodies, frames)
        L = traj.states.L
        out[method] = {
            "energy": float(jnp.max(jnp.abs(E[:, -1] / E[:, 0] - 1))),
            "momentum": float(jnp.max(jnp.linalg.norm(L[:, -1] - L[:, 0], axis=-1) / jnp.linalg.norm(L[:, 0], axis=-1))),
        }
        print(f"{method:10s} worst of {n_bodies} bodies after {n_steps} steps: "
              f"|E/E0 - 1| = {out[method]['energy']:.1e}, |L - L0|/|L0| = {out[method]['momentum']:.1e}")
    return out


if __name__ == "__main__":
    main()
