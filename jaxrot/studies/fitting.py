"""Differentiable fitting of a body's inertia to observed motion, with uncertainty; sensitivities.

Parametrisation: the principal moments come from three positive second moments of the mass
distribution, ``J = (b + c, a + c, a + b)`` with ``(a, b, c) = exp(theta)``, so every iterate is
positive *and* physical (the triangle inequality holds by construction).

Identifiability. Torque-free motion is unchanged when J and the momentum are scaled together
(``J Om' = J Om x Om`` is homogeneous in J), so attitudes and angular velocities alone fix only
the *ratios* of the moments. The scale must come from something a user knows:

* ``Pi0`` known (initial body angular momentum, e.g. from a known impulse): J is fitted absolutely;
* ``omega0`` known (one measured angular velocity) together with ``trace`` (``J1 + J2 + J3 =
  2 sum m r^2``, e.g. from mass and dimensions): the ratios are fitted, the trace fixes the scale.

Optionally the orientation of the principal axes in the body's reference frame (a rotation vector
``q``, ``Q = exp(q)``) is fitted too: observed attitudes are ``R_pr(t) Q^T`` with ``R_pr(0) = R0 Q``.

The loss is ``1/2 sum |log(R_obs^T R_pred)|^2 / sigma^2`` (+ rate residuals if observed), minimised
by optax (L-BFGS by default) through :func:`jaxrot.simulate`; the uncertainty is the Gauss-Newton
covariance ``s^2 (Jr^T Jr)^-1`` at the optimum (``s^2`` = reduced chi-square), mapped to the
moments by the delta method.

A trial point the optimiser's line search tries and the simulation cannot take (moments that overflow
to inf, a step whose solve fails) gives a NaN loss, never an exception inside the compiled update:
the model runs ``simulate(..., on_invalid="nan", throw=False)`` and sets the residuals of a run with
a failed step to NaN, and the line search backs away from a non-finite loss.
"""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from ..geometry import so3
from ..geometry.body import RigidBody
from ..physics.problems import Problem
from ..driver.saveat import SaveAt
from ..driver.simulate import simulate
from ..geometry.state import State
from ..physics.torques import FreeTorque


@dataclasses.dataclass(frozen=True)
class Observations:
    """Attitudes ``R`` (n, 3, 3) at equally spaced times ``ts = dt_obs * (1..n)``, noise ``sigma`` (rad);
    optionally body angular velocities ``omega`` (n, 3) with noise ``sigma_omega``."""

    ts: np.ndarray
    R: np.ndarray
    sigma: float
    omega: np.ndarray | None = None
    sigma_omega: float | None = None

    def __post_init__(self):
        ts, R = np.asarray(self.ts, float), np.asarray(self.R, float)
        if ts.ndim != 1 or ts.size < 3:
            raise ValueError(f"need at least 3 observation times, got shape {ts.shape}")
        if R.shape != ts.shape + (3, 3):
            raise ValueError(f"R must have shape (n, 3, 3) matching ts, got {R.shape}")
        if not (np.all(np.isfinite(ts)) and np.all(np.isfinite(R))):
            raise ValueError("observations contain NaN or inf")
        step = ts[0]
        if not step > 0 or not np.allclose(ts, step * np.arange(1, ts.size + 1), rtol=1e-9, atol=0):
            raise ValueError("observation times must be ts = dt_obs * (1, 2, ..., n) with dt_obs > 0")
        if not self.sigma > 0:
            raise ValueError(f"sigma must be positive, got {self.sigma}")
        if np.abs(np.einsum("nij,nik->njk", R, R) - np.eye(3)).max() > 1e-6:
            raise ValueError("observed attitudes must be rotation matrices (orthonormal to 1e-6)")
        if self.omega is not None:
            om = np.asarray(self.omega, float)
            if om.shape != ts.shape + (3,) or not np.all(np.isfinite(om)):
                raise ValueError("omega must be finite with shape (n, 3)")
            if not (self.sigma_omega and self.sigma_omega > 0):
                raise ValueError("give sigma_omega > 0 with omega observations")


def moments_from_params(theta):
    a, b, c = jnp.exp(theta)
    return jnp.stack([b + c, a + c, a + b])


def params_from_moments(J):
    J = jnp.asarray(J)
    s = 0.5 * jnp.sum(J)
    return jnp.log(s - J)  # a = s - J1, b = s - J2, c = s - J3


#: a guess on the physical boundary (a flat body, J_i = J_j + J_k: a second moment is 0), or nearer it
#: than this fraction of the half-trace, starts this far inside it: the parametrisation needs every
#: second moment positive, and one that starts near zero has a gradient near zero in its logarithm, on
#: which the fit stalls at the boundary
BOUNDARY_MARGIN = 1e-2


def _start(J_guess) -> jax.Array:
    """The parameters of the fit's first iterate: those of ``J_guess``, checked (the message names the
    guess and what to give instead), moved inside the physical region where it lies on its boundary."""
    from ..geometry.body import inertia_message

    J = np.asarray(J_guess, np.float64)
    message = inertia_message(J) if J.shape == (3,) else f"principal moments J must have shape (3,), got {J.shape}"
    if message is not None:
        raise ValueError(f"fit_inertia: the guess J_guess = {J.tolist()} is not a body's moments ({message}); "
                         "give three positive moments with J_i <= J_j + J_k, e.g. the moments of a box of the "
                         "body's size (jaxrot.RigidBody.box(a, b, c, mass).J)")
    s = 0.5 * J.sum()
    return jnp.log(jnp.asarray(np.maximum(s - J, BOUNDARY_MARGIN * s), jnp.result_type(float)))


@dataclasses.dataclass
class FitResult:
    J: np.ndarray
    J_std: np.ndarray
    J_cov: np.ndarray
    axes: np.ndarray | None  # fitted rotation vector q of the principal axes (or None)
    loss_history: list
    iterations: int
    reduced_chi2: float


class _Model(eqx.Module):
    obs_R: jax.Array
    obs_omega: jax.Array | None
    sigma: float
    sigma_omega: float | None
    R0: jax.Array
    omega0: jax.Array | None
    Pi0: jax.Array | None
    trace: float | None
    method: object
    dt: float
    n_steps: int
    save_every: int
    fit_axes: bool

    def moments(self, p):
        J = moments_from_params(p["theta"])
        if self.trace is not None:
            J = J * (self.trace / jnp.sum(J))
        return J

    def predict(self, p):
        J = self.moments(p)
        Q = so3.exp(p["q"]) if self.fit_axes else jnp.eye(3, dtype=J.dtype)
        Pi0 = J * (Q.T @ self.omega0) if self.Pi0 is None else Q.T @ self.Pi0
        prob = Problem(RigidBody(J), FreeTorque(), State(self.R0 @ Q, Pi0), self.dt * self.n_steps)
        # an invalid trial point (or a failed step) gives NaN residuals, which the line search rejects
        tr = simulate(self.method, prob, self.dt, self.n_steps, saveat=SaveAt(steps=self.save_every), throw=False,
                      on_invalid="nan")
        states = tr.states
        failed = tr.failed_step >= 0
        R = jnp.where(failed, jnp.nan, states.R[1:]) @ Q.T
        return R, jnp.where(failed, jnp.nan, states.Pi[1:]) / J

    def residuals(self, p):
        R, om = self.predict(p)
        r = jax.vmap(lambda A, B: so3.log(A.T @ B))(self.obs_R, R) / self.sigma
        if self.obs_omega is not None:
            r = jnp.concatenate([r, (om - self.obs_omega) / self.sigma_omega])
        return r.reshape(-1)


def inertia_model(obs: Observations, R0, *, omega0=None, Pi0=None, trace=None, method="split4_231", substeps: int = 2,
                  fit_axes: bool = False) -> _Model:
    """The residual model ``fit_inertia`` minimises (validated); ``model.residuals(params)`` with
    ``params = {"theta": params_from_moments(J), "q": rotation vector}``."""
    if (omega0 is None) == (Pi0 is None):
        raise ValueError("give exactly one of omega0 (with trace) or Pi0 to fix the scale")
    if omega0 is not None and trace is None:
        raise ValueError("with omega0 only the ratios of J are observable: give trace = J1 + J2 + J3 "
                         "(e.g. from mass and dimensions) or Pi0 instead")
    if Pi0 is not None and trace is not None:
        raise ValueError("Pi0 already fixes the scale; do not also give trace")
    if trace is not None and not trace > 0:
        raise ValueError(f"trace must be positive, got {trace}")
    if substeps < 1:
        raise ValueError("substeps must be >= 1")
    for name, v in (("R0", R0), ("omega0", omega0), ("Pi0", Pi0)):
        if v is not None and not np.all(np.isfinite(np.asarray(v))):
            raise ValueError(f"{name} contains NaN or inf")
    n = len(obs.ts)
    return _Model(
        obs_R=jnp.asarray(obs.R), obs_omega=None if obs.omega is None else jnp.asarray(obs.omega),
        sigma=float(obs.sigma), sigma_omega=obs.sigma_omega, R0=jnp.asarray(R0),
        omega0=None if omega0 is None else jnp.asarray(omega0), Pi0=None if Pi0 is None else jnp.asarray(Pi0),
        trace=trace, method=method, dt=float(obs.ts[0]) / substeps, n_steps=n * substeps, save_every=substeps,
        fit_axes=fit_axes)


_LBFGS = optax.lbfgs()  # one instance, so the compiled update is reused across fits


def _loss(model, p):
    r = model.residuals(p)
    return 0.5 * jnp.sum(r * r)


@eqx.filter_jit
def _update(model, opt, params, state):
    loss = lambda p: _loss(model, p)  # noqa: E731
    value, grad = optax.value_and_grad_from_state(loss)(params, state=state)
    if not model.fit_axes:
        grad = {"theta": grad["theta"], "q": jnp.zeros_like(grad["q"])}
    updates, state = opt.update(grad, state, params, value=value, grad=grad, value_fn=loss)
    return optax.apply_updates(params, updates), state, value, optax.tree.norm(grad)


@eqx.filter_jit  # compiled: run eagerly, the forward-mode Jacobian of a whole simulation is op by op
def _residual_jacobian(model, x, q):
    """The residuals' Jacobian in the free parameters ``x`` (moments' parameters, then the axes' if
    fitted) and the residuals, at ``x``."""
    def flat_res(x):
        return model.residuals({"theta": x[:3], "q": x[3:] if model.fit_axes else q})

    return jax.jacfwd(flat_res)(x), flat_res(x)


def fit_inertia(obs: Observations, J_guess, R0, *, omega0=None, Pi0=None, trace=None, method="split4_231",
                substeps: int = 2, fit_axes: bool = False, optimizer=None, max_iters: int = 300,
                tol: float = 1e-9, verbose: bool = False) -> FitResult:
    """Fit the principal moments (and optionally the principal axes) to ``obs``; see the module doc.

    ``omega0`` (with ``trace``) or ``Pi0`` fixes the scale; ``method`` is any registered method
    (implicit ones differentiate by the implicit function theorem; the default is the 4th-order
    splitting ``split4_231``); ``substeps`` steps per observation interval. ``J_guess`` must be a
    body's moments (positive, ``J_i <= J_j + J_k``); one on the boundary of that region (a flat
    body, ``J3 = J1 + J2``) starts :data:`BOUNDARY_MARGIN` of the half-trace inside it (a guess whose
    largest moment is on another axis than the body's may end in another minimum). Stops when the loss changes by less than ``tol`` (relative)
    or after ``max_iters``. Returns moments, their standard deviations and covariance, the loss
    history and the reduced chi-square (about 1 when the noise model fits).
    """
    theta0 = _start(J_guess)
    if max_iters < 1:
        raise ValueError("max_iters must be >= 1")
    model = inertia_model(obs, R0, omega0=omega0, Pi0=Pi0, trace=trace, method=method, substeps=substeps,
                          fit_axes=fit_axes)
    params = {"theta": theta0, "q": jnp.zeros(3)}

    opt = optimizer if optimizer is not None else _LBFGS
    # optax's initial state holds weakly typed scalars that its update returns strongly typed: made
    # strong here, the update compiles once instead of twice
    state = jax.tree_util.tree_map(lambda x: jnp.asarray(x, x.dtype) if isinstance(x, jax.Array) else x,
                                   opt.init(params))
    history = []
    k = 0
    for k in range(1, max_iters + 1):
        with jax.numpy_dtype_promotion("standard"):  # optax's line search mixes int32/int64 internally
            params, state, value, gnorm = _update(model, opt, params, state)
        history.append(float(value))
        if verbose and (k % 10 == 0 or k == 1):
            print(f"  iteration {k:4d}: loss {float(value):.6e}, |grad| {float(gnorm):.2e}", flush=True)
        if not np.isfinite(history[-1]):
            raise FloatingPointError(
                f"fit_inertia: the loss is not finite at iteration {k} (moments {np.asarray(model.moments(params))}, "
                f"from J_guess = {np.asarray(J_guess).tolist()}): the simulation of every trial point the line "
                "search tried failed; start from a guess nearer the body's moments, or give more substeps")
        if k > 2 and abs(history[-2] - history[-1]) <= tol * max(1.0, abs(history[-1])):
            break

    # Gauss-Newton covariance at the optimum, in the free parameters
    x = jnp.concatenate([params["theta"], params["q"]]) if fit_axes else params["theta"]
    Jr, r = _residual_jacobian(model, x, params["q"])
    m, k_par = r.size, x.size - (1 if trace is not None else 0)  # the trace removes one direction
    chi2 = float(jnp.sum(r * r) / max(m - k_par, 1))
    cov_x = chi2 * jnp.linalg.pinv(Jr.T @ Jr, hermitian=True)
    G = jax.jacfwd(lambda x: model.moments({"theta": x[:3], "q": jnp.zeros(3)}))(x)
    cov_J = G @ cov_x @ G.T
    return FitResult(J=np.asarray(model.moments(params)), J_std=np.sqrt(np.clip(np.diag(np.asarray(cov_J)), 0, None)),
                     J_cov=np.asarray(cov_J), axes=np.asarray(params["q"]) if fit_axes else None,
                     loss_history=history, iterations=k, reduced_chi2=chi2)


def observe(problem: Problem, n_obs: int, dt_obs: float, sigma: float, key, *, method="buss4", substeps: int = 8):
    """Synthetic noisy attitude observations of ``problem``: ``R exp(sigma * N(0, 1))`` at
    ``dt_obs * (1..n_obs)`` (a convenience for experiments and tests)."""
    tr = simulate(method, problem, dt_obs / substeps, n_obs * substeps, saveat=SaveAt(steps=substeps))
    noise = sigma * jax.random.normal(key, (n_obs, 3), dtype=problem.state0.Pi.dtype)
    R = jax.vmap(lambda R, e: R @ so3.exp(e))(tr.states.R[1:], noise)
    return Observations(ts=np.asarray(dt_obs * np.arange(1, n_obs + 1)), R=np.asarray(R), sigma=sigma)


def sensitivity(method, problem: Problem, dt: float, n_steps: int, observable=None, save_every: int | None = None):
    """Jacobians of ``observable(trajectory)`` with respect to J, Pi0 and dt (forward mode).

    ``observable`` defaults to the final state ``(vec R, Pi)`` (12 numbers); e.g.
    :func:`first_flip_time` gives the sensitivity of the first Dzhanibekov flip.
    Returns ``{"J": (m, 3), "Pi0": (m, 3), "dt": (m,)}``.
    """
    save_every = n_steps if save_every is None else save_every
    if observable is None:
        def observable(tr):
            return jnp.concatenate([tr.final.R.reshape(9), tr.final.Pi])

    def f(J, Pi0, h):
        p = Problem(RigidBody(J, physical=problem.body.physical), problem.torque,
                    State(problem.state0.R, Pi0), problem.t_end)
        return jnp.atleast_1d(observable(simulate(method, p, h, n_steps, saveat=SaveAt(steps=save_every))))

    dt = jnp.asarray(dt, problem.state0.Pi.dtype)
    jJ, jP, jh = jax.jacfwd(f, argnums=(0, 1, 2))(problem.body.J, problem.state0.Pi, dt)
    return {"J": jJ, "Pi0": jP, "dt": jh}


def first_flip_time(tr, axis: int = 1):
    """Time of the first sign change of the body momentum component ``axis`` (a Dzhanibekov flip
    when ``axis`` is the intermediate axis), linearly interpolated between saved frames, so it is
    differentiable; NaN if there is none."""
    s = tr.states.Pi[:, axis]
    s = s * jnp.sign(s[0])
    crossed = (s[:-1] > 0) & (s[1:] <= 0)
    k = jnp.argmax(crossed)
    w = s[k] / (s[k] - s[k + 1])
    t = tr.ts[k] + w * (tr.ts[k + 1] - tr.ts[k])
    return jnp.where(jnp.any(crossed), t, jnp.nan)
