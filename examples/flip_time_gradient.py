"""Differentiate an event time: how the first Dzhanibekov flip of a T-handle moves when its moments
of inertia change. The flip is an event (the world-y component of the handle's spin axis crossing 0
downwards), located within a step on the dense output; its gradient comes from the implicit function
theorem, checked here against finite differences and the time against the exact elliptic solution.

Run: python examples/flip_time_gradient.py
"""

import jax

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
import scipy.optimize as so  # noqa: E402

import jaxrot  # noqa: E402
from jaxrot import exact, problems  # noqa: E402

FLIP = jaxrot.Event(lambda t, state, args: state.R[1, 1], direction=-1)
OMEGA0 = jnp.array([0.1, 4.0, 0.1])


def flip_time(J, n_steps=1000, dt=0.01):
    """First flip time of a T-handle of moments J spun at OMEGA0 about its intermediate axis."""
    state0 = jaxrot.State(jnp.eye(3, dtype=J.dtype), J * OMEGA0)
    q = jaxrot.Problem(jaxrot.RigidBody(J), problems.get("t_handle").torque, state0, n_steps * dt)
    return jaxrot.simulate("buss4", q, dt, n_steps, event=FLIP, saveat=jaxrot.SaveAt(t0=False)).event_time


def main() -> dict:
    J = jnp.array([2.5, 1.4, 1.3])
    t = flip_time(J)
    g = jax.grad(flip_time)(J)
    eps = 1e-6
    fd = jnp.array([(flip_time(J.at[i].add(eps)) - flip_time(J.at[i].add(-eps))) / (2 * eps) for i in range(3)])
    state0 = jaxrot.State(jnp.eye(3), J * OMEGA0)
    t_exact = so.brentq(lambda s: float(exact.free_flow(J, state0, s).R[1, 1]), float(t) - 0.05, float(t) + 0.05,
                        xtol=1e-14)
    print(f"first flip at t = {float(t):.8f} (exact {t_exact:.8f})")
    print(f"d t_flip / dJ  (autodiff)           = {g}")
    print(f"d t_flip / dJ  (finite differences) = {fd}")
    return {"t_flip": float(t), "t_exact": t_exact, "grad": g.tolist(), "fd": fd.tolist()}


if __name__ == "__main__":
    main()
