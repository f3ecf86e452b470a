"""Invariants, errors against a reference, observed orders and convergence studies.

All functions take arrays (with any leading axes) and return arrays; nothing here integrates
except :func:`convergence_study`, which calls :func:`jaxrot.simulate`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..geometry.body import kinetic_energy
from ..geometry import so3
from ..physics.problems import Problem
from ..geometry.state import State


def world_momentum(states: State) -> jax.Array:
    """``L = R @ Pi`` for every frame."""
    return states.L





def energy(problem: Problem, states: State, ts=None) -> jax.Array:
    """Hamiltonian ``kinetic + V(t, R)`` (kinetic only when the torque has no potential)."""
    ke = kinetic_energy(problem.body.J, states.Pi)
    t = jnp.zeros(states.R.shape[:-2], states.R.dtype) if ts is None else jnp.broadcast_to(ts, states.R.shape[:-2])
    if problem.torque.potential(t.reshape(-1)[0], states.R.reshape(-1, 3, 3)[0]) is None:
        return ke
    flat_R = states.R.reshape(-1, 3, 3)
    V = jax.vmap(problem.torque.potential)(t.reshape(-1), flat_R).reshape(ke.shape)
    return ke + V


def orthogonality_error(R) -> jax.Array:
    """``max |R^T R - 1|`` per attitude."""
    E = jnp.swapaxes(R, -1, -2) @ R - jnp.eye(3, dtype=R.dtype)
    return jnp.max(jnp.abs(E), axis=(-2, -1))


def attitude_error(R, R_ref) -> jax.Array:
    """Rotation angle (rad) between attitudes ``R`` and ``R_ref``."""
    f = so3.rotation_angle
    for _ in range(R.ndim - 2):
        f = jax.vmap(f)
    return f(R, R_ref)


def matrix_error(A, B) -> jax.Array:
    """Spectral norm ``||A - B||_2`` (Krysl's error measure; MATLAB's ``norm``)."""
    return jnp.linalg.norm(A - B, ord=2, axis=(-2, -1))


def observed_order(dts, errors) -> float:
    """Least-squares slope of ``log(error)`` against ``log(dt)``."""
    dts, errors = np.asarray(dts, np.float64), np.asarray(errors, np.float64)
    if dts.shape != errors.shape or dts.size < 2:
        raise ValueError("observed_order needs matching arrays of at least two step sizes and errors")
    if np.any(errors <= 0) or np.any(~np.isfinite(errors)):
        raise ValueError(f"errors must be positive and finite to fit an order, got {errors}")
    return float(np.polyfit(np.log(dts), np.log(errors), 1)[0])


def local_orders(dts, errors) -> np.ndarray:
    """Slopes between consecutive step sizes (to see an order change, e.g. E1/E2 falling to 1)."""
    dts, errors = np.asarray(dts, np.float64), np.asarray(errors, np.float64)
    return np.diff(np.log(errors)) / np.diff(np.log(dts))


def convergence_study(method, problem: Problem, t_end: float, ns, reference: State, metric: str = "angle",
                      floor: float = 0.0):
    """Final-time errors of ``method`` for each step count in ``ns`` over ``[0, t_end]``.

    ``metric``: ``"angle"`` (rotation angle of R), ``"R2"`` (spectral norm of R - R_ref),
    ``"Pi2"`` (norm of Pi - Pi_ref). Errors at or below ``floor`` (a round-off level) are kept in
    the output but left out of the fitted order. Returns ``dict(dts, errors, order)``.
    """
    from ..driver.saveat import SaveAt
    from ..driver.simulate import simulate

    errs, dts = [], []
    for n in ns:
        dt = t_end / n
        fin = simulate(method, problem, dt, int(n), saveat=SaveAt(t0=False)).final
        errs.append(float(final_error(fin, reference, metric)))
        dts.append(dt)
    fit = [(d, e) for d, e in zip(dts, errs) if e > floor]
    if len(fit) < 2:
        raise ValueError(f"fewer than two errors above the floor {floor:g}: {errs}; use larger steps")
    order = observed_order(*zip(*fit))
    return {"dts": dts, "errors": errs, "order": order, "fitted_points": len(fit)}


def final_error(state: State, reference: State, metric: str = "angle"):
    """Error of one state against a reference by ``metric`` (see :func:`convergence_study`)."""
    if metric == "angle":
        # rotation_angle reads the trace, which cannot see an R that left SO(3) (plain RK4 blown
        # up can score 0): add its departure from orthogonality (0 for a rotation)
        return attitude_error(state.R, reference.R) + orthogonality_error(state.R)
    if metric == "R2":
        return matrix_error(state.R, reference.R)
    if metric == "Pi2":
        return jnp.linalg.norm(state.Pi - reference.Pi, axis=-1)
    if metric == "Pi_rel":
        return jnp.linalg.norm(state.Pi - reference.Pi, axis=-1) / jnp.linalg.norm(reference.Pi, axis=-1)
    raise ValueError(f"unknown metric {metric!r}; use 'angle', 'R2', 'Pi2' or 'Pi_rel'")


def steps_to_accuracy(method, problem: Problem, eps: float, metric: str = "angle", *, t_end: float | None = None,
                      reference: State | None = None, n_min: int = 20, n_max: int = 20480) -> dict:
    """The smallest step count ``N`` whose final-time error over ``[0, t_end]`` is ``<= eps``.

    Buss's protocol as far as it is known: double ``N`` from ``n_min`` until the error is below
    ``eps`` (giving up above ``n_max``: ``N = None``, Buss's "> 20480"), then bisect between the
    last failing and the first passing count. The error is not always monotone in ``N`` (a final
    attitude can pass close to the reference by accident), so a bisection alone can stop in a dip:
    every candidate is then checked at ``N + 1``, ``N + 2`` and a geometric ladder of larger counts up
    to the passing doubling count, and if any of those fails the search resumes above it. The
    ``N`` returned passes at every count the search tried above it; ``dips`` lists the counts that
    passed below a failing larger one. One compilation serves every ``N``
    (``jaxrot.simulate(..., saveat=SaveAt(t0=False))``).

    Returns ``{"N", "theta_deg", "evaluations": [(N, error), ...], "dips": [...], "eps", "metric"}``,
    where ``theta_deg`` is the mean rotation angle per step in degrees, ``integral |omega| dt / N``
    (from the reference trajectory), Buss's theta-bar.
    """
    from .reference import reference_solution
    from ..driver.saveat import SaveAt
    from ..driver.simulate import simulate

    if not eps > 0:
        raise ValueError(f"eps must be positive, got {eps}")
    if not 1 <= n_min <= n_max:
        raise ValueError(f"need 1 <= n_min <= n_max, got n_min={n_min}, n_max={n_max}")
    T = float(problem.t_end if t_end is None else t_end)
    if reference is None:
        reference = reference_solution(problem, T).final
    evaluations: dict[int, float] = {}

    def err(n):
        if n not in evaluations:
            s = simulate(method, problem, T / n, n, saveat=SaveAt(t0=False), throw=False).final
            e = float(final_error(s, reference, metric))
            evaluations[n] = e if np.isfinite(e) else np.inf
        return evaluations[n]

    def result(N):
        theta = None if N is None else float(np.degrees(total_rotation_angle(problem, T)) / N)
        dips = sorted(n for n, e in evaluations.items() if e <= eps and N is not None and n < N)
        return {"N": N, "theta_deg": theta, "evaluations": sorted(evaluations.items()), "dips": dips,
                "eps": eps, "metric": metric}

    n = n_min
    while err(n) > eps:
        if n >= n_max:
            return result(None)
        n = min(2 * n, n_max)
    top = n  # passes; every count the search settles on is checked up to here
    lo, hi = (n // 2, n) if n > n_min else (0, n)
    while True:
        while hi - lo > 1 and lo > 0:
            mid = (lo + hi) // 2
            if err(mid) <= eps:
                hi = mid
            else:
                lo = mid
        ladder = sorted({m for m in [hi + 1, hi + 2] + [int(hi * f) for f in (1.02, 1.05, 1.1, 1.2, 1.35, 1.5, 1.75)]
                         if hi < m < top} | {m for m in evaluations if hi < m <= top})
        failing = [m for m in ladder if err(m) > eps]
        if not failing:
            return result(hi)
        lo = max(failing)
        hi = min(m for m in evaluations if m > lo and evaluations[m] <= eps)


def total_rotation_angle(problem: Problem, t_end: float, n_frames: int = 2000) -> float:
    """``integral_0^T |omega| dt`` along the reference trajectory (trapezoidal rule)."""
    from .reference import reference_solution

    tr = reference_solution(problem, t_end, n_frames=n_frames)
    w = np.linalg.norm(np.asarray(tr.states.Pi) / np.asarray(problem.body.J), axis=-1)
    return float(np.trapezoid(w, np.asarray(tr.ts)))


def time_for_rotation(problem: Problem, angle: float, n_frames: int = 20000) -> float:
    """The time ``T`` at which ``integral_0^T |omega| dt`` reaches ``angle`` (radians), from the reference.

    Buss's table fixes the span by the total rotation (``N * theta-bar`` is the same in every row),
    not by the time; for a body whose ``|omega|`` varies the two differ.
    """
    from .reference import reference_solution

    if not angle > 0:
        raise ValueError(f"angle must be positive, got {angle}")
    w0 = float(np.linalg.norm(np.asarray(problem.state0.Pi) / np.asarray(problem.body.J)))
    if not w0 > 0:
        raise ValueError("the body does not rotate: no time reaches a positive rotation angle")
    T = 1.2 * angle / w0
    for _ in range(8):
        tr = reference_solution(problem, T, n_frames=n_frames)
        w = np.linalg.norm(np.asarray(tr.states.Pi) / np.asarray(problem.body.J), axis=-1)
        ts = np.asarray(tr.ts)
        cum = np.concatenate([[0.0], np.cumsum(0.5 * (w[1:] + w[:-1]) * np.diff(ts))])
        if cum[-1] >= angle:
            return float(np.interp(angle, cum, ts))
        T *= 1.5 * angle / cum[-1]
    raise ValueError(f"no time reaches a rotation of {angle} rad")


def sign_change_times(ts, x) -> np.ndarray:
    """Times where the sampled signal ``x(t)`` changes sign (linear interpolation between frames).

    A body spun near its intermediate axis flips each time its intermediate body-momentum component
    changes sign: ``sign_change_times(tr.ts, tr.states.Pi[:, 1])`` are its flip times.
    """
    ts, x = np.asarray(ts, dtype=np.float64), np.asarray(x, dtype=np.float64)
    s = np.signbit(x)
    idx = np.nonzero(s[1:] != s[:-1])[0]
    return ts[idx] - x[idx] * (ts[idx + 1] - ts[idx]) / (x[idx + 1] - x[idx])


def first_sign_change(ts, x) -> float | None:
    """The first of :func:`sign_change_times`, or ``None`` when ``x`` never changes sign."""
    t = sign_change_times(ts, x)
    return float(t[0]) if len(t) else None


def body_axis_momentum_cosine(states: State, axis: int) -> jax.Array:
    """Signed cosine between body axis ``axis`` and the angular momentum (``Pi_axis / |Pi|``): it
    changes sign at each Dzhanibekov flip about that axis."""
    return states.Pi[..., axis] / jnp.linalg.norm(states.Pi, axis=-1)


def body_axis_momentum_angle(states: State, axis: int) -> jax.Array:
    """Angle (rad) between body axis ``axis`` (0, 1, 2) and the angular momentum, per state.

    In the body frame this is the angle between ``e_axis`` and ``Pi``: a precessing pole's axis
    keeps a constant angle to ``L``; an integrator that drives it to 0 has stopped the precession.
    """
    Pi = states.Pi
    return jnp.arccos(jnp.clip(jnp.abs(Pi[..., axis]) / jnp.linalg.norm(Pi, axis=-1), 0.0, 1.0))


def smallest_passing_count(passes, n_start: int = 4, n_max: int = 1 << 20, rel: float = 0.05):
    """The smallest step count (to a relative resolution ``rel``) for which ``passes(n)`` is True:
    double from ``n_start`` until it passes (``None`` past ``n_max``), then bisect geometrically
    between the last failing and the first passing count. Returns ``(N, evaluations)``, where
    ``evaluations`` maps every tried count to its ``passes`` result."""
    tried: dict[int, bool] = {}

    def ok(n):
        if n not in tried:
            tried[n] = bool(passes(n))
        return tried[n]

    n = max(1, int(n_start))
    while not ok(n):
        if n >= n_max:
            return None, tried
        n = min(2 * n, n_max)
    lo, hi = n // 2, n
    if lo < max(1, int(n_start)):
        return hi, tried
    while hi > lo * (1 + rel) and hi - lo > 1:
        mid = int(round(np.sqrt(lo * hi)))
        mid = min(max(mid, lo + 1), hi - 1)
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi, tried


def loosest_passing_tolerance(passes, start: float, factor: float = 10 ** -0.5, tries: int = 12, refine: int = 0):
    """The loosest of ``start, start*factor, start*factor^2, ...`` for which ``passes(tol)`` is True
    (``None`` after ``tries`` failures), then ``refine`` geometric bisections between it and the last
    failing tolerance (each halves the ratio's logarithm: ``refine=1`` with the default factor gives a
    resolution of 10^(1/4)). Returns ``(tol, evaluations)``."""
    tried = {}
    tol, failed = float(start), None
    for _ in range(tries):
        tried[tol] = bool(passes(tol))
        if tried[tol]:
            break
        tol, failed = tol * factor, tol
    else:
        return None, tried
    if failed is not None:  # a looser tolerance failed: bisect between the two
        for _ in range(refine):
            mid = float(np.sqrt(tol * failed))
            tried[mid] = bool(passes(mid))
            if tried[mid]:
                tol = mid
            else:
                failed = mid
    return tol, tried
