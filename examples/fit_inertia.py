"""Recover a T-handle's moments of inertia from 40 noisy attitude observations with optax (L-BFGS)
through the simulator.

Run: python examples/fit_inertia.py
"""

import jax

jax.config.update("jax_enable_x64", True)
import numpy as np  # noqa: E402

from jaxrot import fitting, problems  # noqa: E402


def main(n_obs: int = 40, max_iters: int = 40) -> dict:
    p = problems.t_handle(omega0=(0.3, 2.0, 0.2), t_end=0.1 * n_obs)
    J_true = np.asarray(p.body.J)
    omega0 = np.asarray(p.state0.Pi / p.body.J)
    obs = fitting.observe(p, n_obs, 0.1, 1e-3, jax.random.PRNGKey(0))  # attitudes + 1e-3 rad noise
    guess = J_true * np.array([0.9, 1.1, 0.9])
    # omega0 and the trace J1 + J2 + J3 fix the scale (attitudes alone only fix the ratios)
    res = fitting.fit_inertia(obs, guess, np.eye(3), omega0=omega0, trace=float(J_true.sum()),
                              method="split4_231", max_iters=max_iters)
    print(f"truth  {J_true}\nguess  {guess}\nfitted {np.round(res.J, 5)} ± {np.round(res.J_std, 5)} "
          f"({res.iterations} iterations, reduced chi2 {res.reduced_chi2:.2f})")
    return {"J": np.asarray(res.J).tolist(), "J_std": np.asarray(res.J_std).tolist(), "J_true": J_true.tolist()}


if __name__ == "__main__":
    main()
