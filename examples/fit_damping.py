"""Fit the coefficient of a damping torque, written as a plain function, to noisy angular velocities
with optax (L-BFGS), differentiating through the simulator with respect to the torque's ``args``.

Model: a T-handle (J = (2.5, 1.4, 1.3)) tumbling under the world torque ``tau = -c omega_world =
-c R (Pi / J)``; the data are its body angular velocities at ``n_obs`` times with Gaussian noise.
The unknown is ``log c`` (so that every iterate has ``c > 0``).

Run: python examples/fit_damping.py
"""

import jax

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

import jaxrot  # noqa: E402

J = jnp.array([2.5, 1.4, 1.3])
DT, SAVE_EVERY = 0.01, 10  # observations every 0.1 time units


def damping(t, R, Pi, c):
    """World-frame damping torque ``-c omega_world`` (``c`` is the torque's ``args``)."""
    return -c * (R @ (Pi / J))


def body_rates(c, n_obs: int):
    """Body angular velocities at ``t = 0.1, 0.2, ..., 0.1 n_obs`` for the damping coefficient ``c``."""
    state0 = jaxrot.State(jnp.eye(3), J * jnp.array([0.3, 2.0, 0.2]))
    problem = jaxrot.Problem(jaxrot.RigidBody(J), jaxrot.Torque(damping, args=c), state0, t_end=DT * SAVE_EVERY * n_obs)
    traj = jaxrot.simulate("rk4", problem, DT, SAVE_EVERY * n_obs, saveat=jaxrot.SaveAt(steps=SAVE_EVERY))
    return traj.states.Pi[1:] / J  # Omega = Pi / J, body frame


def main(c_true: float = 0.3, n_obs: int = 40, sigma: float = 1e-2, max_iters: int = 30) -> dict:
    noise = sigma * jax.random.normal(jax.random.PRNGKey(0), (n_obs, 3))
    observed = body_rates(jnp.asarray(c_true), n_obs) + noise

    def residuals(log_c):
        return ((body_rates(jnp.exp(log_c), n_obs) - observed) / sigma).reshape(-1)

    def loss(log_c):
        r = residuals(log_c)
        return 0.5 * jnp.sum(r * r)

    opt = optax.lbfgs(linesearch=optax.scale_by_backtracking_linesearch(max_backtracking_steps=20, store_grad=True))
    value_and_grad = optax.value_and_grad_from_state(loss)

    @jax.jit  # one compiled program per iteration (the line search calls loss again inside it)
    def step(log_c, state):
        value, grad = value_and_grad(log_c, state=state)
        updates, state = opt.update(grad, state, log_c, value=value, grad=grad, value_fn=loss)
        return optax.apply_updates(log_c, updates), state, value, grad

    log_c = jnp.log(jnp.asarray(0.1))  # start a factor 3 off
    with jax.numpy_dtype_promotion("standard"):  # optax's line search mixes int32/int64 internally
        state = opt.init(log_c)
        for it in range(max_iters):
            log_c, state, value, grad = step(log_c, state)
            if abs(float(grad)) < 1e-8 * max(1.0, abs(float(value))):
                break
    c = float(jnp.exp(log_c))
    # 1-sigma uncertainty (Gauss-Newton: var(log c) = 1 / |d r / d log c|^2 for unit-variance residuals r)
    c_std = c / float(jnp.linalg.norm(jax.jit(jax.jacfwd(residuals))(log_c)))
    print(f"truth {c_true}, fitted c = {c:.5f} ± {c_std:.5f} ({it + 1} iterations, loss {float(value):.1f})")
    return {"c": c, "c_std": c_std, "c_true": c_true, "iterations": it + 1}


if __name__ == "__main__":
    main()
