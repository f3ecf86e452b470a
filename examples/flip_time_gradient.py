"""Differentiate through a whole trajectory: how the first Dzhanibekov flip of a T-handle moves
when its moments of inertia change, checked against finite differences.

Run: python examples/flip_time_gradient.py
"""

import jax

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402

import jaxrot  # noqa: E402
from jaxrot import fitting, problems  # noqa: E402


def flip_time(J, n_steps=600, dt=0.01):
    p = problems.t_handle(omega0=(0.1, 4.0, 0.1), t_end=n_steps * dt)
    q = jaxrot.Problem(jaxrot.RigidBody(J), p.torque, jaxrot.State(p.state0.R, J * jnp.array([0.1, 4.0, 0.1])),
                       p.t_end)
    return fitting.first_flip_time(jaxrot.simulate("buss4", q, dt, n_steps))


def main() -> dict:
    J = jnp.array([2.5, 1.4, 1.3])
    t = flip_time(J)
    g = jax.grad(flip_time)(J)
    eps = 1e-6
    fd = jnp.array([(flip_time(J.at[i].add(eps)) - flip_time(J.at[i].add(-eps))) / (2 * eps) for i in range(3)])
    print(f"first flip at t = {float(t):.4f}")
    print(f"d t_flip / dJ  (autodiff)           = {g}")
    print(f"d t_flip / dJ  (finite differences) = {fd}")
    return {"t_flip": float(t), "grad": g.tolist(), "fd": fd.tolist()}


if __name__ == "__main__":
    main()
