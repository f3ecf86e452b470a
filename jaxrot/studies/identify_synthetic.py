"""Synthetic gyroscope throws of a known body, for checking an identification (tests, the
reproduction, a user's own setup): free flights through a Dzhanibekov flip with air drag, sampled
at a jittered rate, with noise, bias and a sensor misalignment.

The flights are integrated by an integrator independent of the fitted model's: SciPy's adaptive
DOP853 (``rtol = 1e-11``) where SciPy is installed, else jaxrot's reference DOP853
(:func:`jaxrot.studies.reference.reference_solution`, fixed steps at round-off accuracy) from sample
to sample. Euler's equations with the drag, in the principal frame, with ``J`` of trace 1 and
``kappa = k / trace(J)``:

    J omega' = (J omega) x omega - kappa |omega| omega.

Each throw spins about the intermediate axis at ``spin`` rad/s with a small tilt chosen (from the
linearised growth rate ``lambda = w sqrt((J2 - J1)(J3 - J2) / (J1 J3))``, calibrated once by a
simulation) to flip at a time drawn in the middle of its flight; a throw whose intermediate rate
does not change sign inside the window is drawn again.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from ..geometry import so3
from .identify_model import Throw


def _rhs(J, kappa):
    def f(t, w):
        return (np.cross(J * w, w) - kappa * np.linalg.norm(w) * w) / J

    return f


def integrate(J, kappa, w0, ts) -> tuple[np.ndarray, str]:
    """Principal-frame rates at the times ``ts`` (``ts[0]`` the start) from ``w0``; and which integrator."""
    J, w0, ts = (np.asarray(x, np.float64) for x in (J, w0, ts))
    try:
        from scipy.integrate import solve_ivp
    except ImportError:
        return _integrate_reference(J, kappa, w0, ts), "jaxrot.reference DOP853 (SciPy not installed)"
    sol = solve_ivp(_rhs(J, kappa), (ts[0], ts[-1]), w0, t_eval=ts, method="DOP853", rtol=1e-11, atol=1e-12)
    if not sol.success:  # pragma: no cover - smooth, short flights
        raise RuntimeError(f"DOP853 failed: {sol.message}")
    return sol.y.T, "SciPy DOP853, rtol 1e-11"


def _integrate_reference(J, kappa, w0, ts):
    from ..geometry.body import RigidBody
    from ..geometry.state import State
    from ..physics.problems import Problem
    from ..physics.torques import Torque
    from .reference import reference_solution

    def drag(t, R, Pi, k):
        w = Pi / jnp.asarray(J, Pi.dtype)
        return -k * jnp.sqrt(jnp.dot(w, w)) * w

    body = RigidBody(jnp.asarray(J))
    state = State(jnp.eye(3), jnp.asarray(J * w0))
    prob = Problem(body, Torque(drag, frame="body", args=jnp.asarray(kappa)), state, float(ts[-1]))
    out = [w0]
    for a, b in zip(ts[:-1], ts[1:]):
        tr = reference_solution(prob, float(b), t0=float(a), state0=state)
        state = State(tr.states.R[-1], tr.states.Pi[-1])
        out.append(np.asarray(state.Pi) / J)
    return np.asarray(out)


def synthetic_throws(ratios, n_throws: int, *, seed: int = 0, rate: float = 100.0, jitter: float = 4e-4,
                     noise: float = 0.02, bias=(0.01, 0.03), bias_per_throw: bool = True, misalignment_deg=None,
                     kappa: float = 4e-4, duration=(0.7, 1.5), spin=(8.0, 12.0)):
    """``n_throws`` throws of the body with moments proportional to ``ratios``, and the truth.

    Args:
      ratios: the principal moments up to scale (physical; the intermediate one is spun about).
      seed: the random generator's seed.
      rate, jitter: samples per second, and the standard deviation of each sample time (s).
      noise: white rate noise per axis (rad/s).
      bias: the range of each bias component's magnitude (rad/s; random sign); per throw or one for all.
      misalignment_deg: the sensor axes' rotation vector from the principal axes (degrees); None draws
        one of 1-2 degrees.
      kappa: drag ``k / trace(J)``.
      duration, spin: ranges of the flights' lengths (s) and rates (rad/s).

    Returns:
      ``(throws, truth)``: a list of :class:`~jaxrot.studies.identify.Throw` and a dict (``ratios``, ``J``
      (trace 1), ``kappa``, ``drag_ratio`` = k / J_max, ``misalignment`` (rad), ``bias`` (T, 3),
      ``omega0`` (T, 3), ``flip_times``, ``integrator``).

    Example::

        throws, truth = synthetic_throws((0.3445, 0.6763, 1.0), 10, seed=1)
    """
    J = np.asarray(ratios, np.float64)
    J = J / J.sum()
    if J.shape != (3,) or np.any(J <= 0) or np.any(2 * J >= J.sum()):
        raise ValueError(f"ratios must be three physical moments (not on the triangle's edge), got {ratios}")
    rng = np.random.default_rng(seed)
    order = np.argsort(J)
    lo, mid, hi = (int(i) for i in order)
    if misalignment_deg is None:
        d = rng.normal(size=3)
        misalignment_deg = d / np.linalg.norm(d) * rng.uniform(1.0, 2.0)
    q = np.radians(np.asarray(misalignment_deg, np.float64))
    # the library's exponential (checked against its series in tests/test_so3.py): only the flights'
    # integration needs to be independent of the fitted model's
    Q = np.asarray(so3.exp(jnp.asarray(q)))

    def draw_bias():
        return rng.uniform(*bias, 3) * rng.choice([-1.0, 1.0], 3)

    shared_bias = draw_bias()
    growth = math.sqrt((J[mid] - J[lo]) * (J[hi] - J[mid]) / (J[lo] * J[hi]))
    # calibrate ln(K w / eps) = lambda t_flip with one flight
    w_cal = np.zeros(3)
    w_cal[mid], w_cal[lo], w_cal[hi] = 10.0, 1e-2, 1e-2
    tt = np.linspace(0, 4.0, 4001)
    wc, integrator = integrate(J, 0.0, w_cal, tt)
    t_cal = tt[np.argmax(wc[:, mid] <= 0)]
    K = 1e-2 * math.sqrt(2) / 10.0 * math.exp(growth * 10.0 * t_cal)

    throws, w0s, biases, flips = [], [], [], []
    while len(throws) < n_throws:
        T = rng.uniform(*duration)
        w = rng.uniform(*spin)
        t_flip = rng.uniform(0.35, 0.7) * T
        eps = K * w * math.exp(-growth * w * t_flip)
        phi = rng.uniform(0, 2 * math.pi)
        w0 = np.zeros(3)
        w0[mid] = w * rng.choice([-1.0, 1.0])
        w0[lo], w0[hi] = eps * math.cos(phi), eps * math.sin(phi)
        n = int(T * rate)
        ts = np.arange(n) / rate + rng.normal(0, jitter, n)
        ts = ts - ts[0]
        omega, integrator = integrate(J, kappa, w0, ts)
        s = np.sign(omega[:, mid] * np.sign(w0[mid]))
        crossed = np.flatnonzero(s <= 0)
        if not crossed.size or not 0.15 * T < ts[crossed[0]] < 0.9 * T:
            continue  # no flip inside the flight: draw again
        b = draw_bias() if bias_per_throw else shared_bias
        meas = omega @ Q.T + b + rng.normal(0, noise, omega.shape)
        throws.append(Throw(ts + 3.0 * len(throws), omega=meas, label=f"synthetic {len(throws) + 1}"))
        w0s.append(w0)
        biases.append(b)
        flips.append(float(ts[crossed[0]]))
    truth = {"ratios": (J / J.max()).tolist(), "J": J.tolist(), "kappa": kappa, "drag_ratio": kappa / J.max(),
             "misalignment": q.tolist(), "bias": np.asarray(biases).tolist(), "omega0": np.asarray(w0s).tolist(),
             "flip_times": flips, "noise": noise, "integrator": integrator}
    return throws, truth
