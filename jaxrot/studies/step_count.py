"""The fixed step count that reaches a final accuracy, from the asymptotic error of a few short runs.

A method of order ``p`` has, for small enough steps, the global error ``e(n) ~ C n^-p`` after ``n``
steps over a span. Runs with ``n, 2n, 4n, ...`` steps give the differences
``d_k = angle(R_{n_k}, R_{2 n_k})`` (maximum over a batch); once two successive differences shrink
by about ``2^p`` the runs are in that regime, the error of the finer run is
``e = d / (2^p - 1)`` (Richardson), and ``N = n (e / tol)^(1/p)`` steps reach ``tol``. Where the
estimate already meets ``tol`` before that regime, the observed rate ``q = log2(d_(k-1) / d_k)``
replaces ``p`` if it is lower (``e = d / (2^q - 1)``, ``N = n (e / tol)^(1/q)``): the error may still
be falling more slowly than ``h^p`` there. The short
runs cost about twice the largest of them, usually a fraction of the final run.

In a type with little precision (float32) the differences stop shrinking where the runs' round-off
takes over (:func:`jaxrot.driver.tolerance.global_floor`): a difference below that floor, or one that
no longer halves within 100 times it, ends the search at the coarser run, marked
``roundoff_limited``; no rate is taken from round-off, and no count can do better there.

Reference: Hairer, Nørsett, Wanner, *Solving ODEs I*, II.4 (global error estimation by
Richardson extrapolation).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from .analysis import attitude_error


#: the largest difference of two trial runs' final attitudes (rad) from which a convergence rate is taken
SMALL_DIFFERENCE = 0.1


#: differences within this factor of the round-off floor that no longer halve are round-off
ROUNDOFF_FACTOR = 100.0


@dataclasses.dataclass(frozen=True)
class StepCount:
    """``n_steps`` for the asked accuracy, the estimated error of the last trial run and how many
    steps the trial runs took in all (per body).

    ``rate`` and ``reference_steps``: the convergence rate the count was extrapolated with and the
    run whose error is ``estimated_error`` (None where the count was not extrapolated);
    ``roundoff_limited``: the trial runs' differences reached round-off before the tolerance, and
    ``n_steps`` is the coarsest run at that level."""

    n_steps: int
    estimated_error: float
    trial_steps: int
    observed_order: float | None
    rate: float | None = None
    reference_steps: int | None = None
    roundoff_limited: bool = False

    def steps_for(self, tol: float) -> int:
        """The count for another tolerance from the same estimate (``n_steps`` where there is no rate)."""
        if self.rate is None or self.reference_steps is None or not self.estimated_error > 0:
            return self.n_steps
        return max(1, math.ceil(self.reference_steps * (self.estimated_error / float(tol)) ** (1.0 / self.rate)))


def rotation_angle(problem, state0=None, t1: float | None = None) -> float:
    """The angle (rad) a body turns through over ``[0, t1]`` at its initial angular speed,
    ``|Pi0 / J| t1`` (the largest of a batch): the scale of a run's phase round-off
    (:func:`jaxrot.driver.tolerance.global_floor`), without a run."""
    from ..driver.tolerance import turning_angle

    s = problem.state0 if state0 is None else state0
    return float(np.max(turning_angle(problem.body.J, s.Pi, problem.t_end if t1 is None else t1)))


def steps_for_tolerance(method: str, problem, tol: float, *, t1: float | None = None, state0=None,
                        n0: int = 4, max_steps: int = 1 << 20) -> StepCount:
    """The number of fixed steps of ``method`` over ``[0, t1]`` whose final attitude error is about
    ``tol`` (the maximum over a batch ``state0``).

    Args:
      method: a registered method name of known order (not ``exact_free``'s infinite one).
      problem: a :class:`jaxrot.Problem`; ``t1`` defaults to its ``t_end``.
      tol: the final attitude error asked (rad), > 0.
      state0: one state or a batch (default: the problem's).
      n0: steps of the first trial run.
      max_steps: the largest trial run; past it a ``ValueError`` says the regime was not reached.

    Returns:
      a :class:`StepCount`.

    Example::

        n = jaxrot.studies.step_count.steps_for_tolerance("rkmk8", problems.get("asymmetric_top"), 1e-10, t1=1.0)
        traj = jaxrot.simulate("rkmk8", problem, 1.0 / n.n_steps, n.n_steps)
    """
    from ..driver.saveat import SaveAt
    from ..driver.simulate import simulate
    from ..driver.tolerance import global_floor
    from ..integrators import info

    tol = float(tol)
    if not np.isfinite(tol) or tol <= 0:
        raise ValueError(f"tol must be finite and > 0, got {tol}")
    p = info(method).order
    T = float(problem.t_end if t1 is None else t1)
    dtype = (problem.state0 if state0 is None else state0).R.dtype
    turned = rotation_angle(problem, state0, T)

    def final_R(n):
        return simulate(method, problem, T / n, n, state0=state0, saveat=SaveAt(t0=False), throw=False).final.R

    def angle(Ra, Rb):
        e = np.asarray(attitude_error(Ra, Rb), np.float64)
        return float(np.max(np.where(np.isfinite(e), e, np.inf)))

    n, R = n0, final_R(n0)
    trial, d_prev = n0, None
    while 2 * n <= max_steps:
        R2 = final_R(2 * n)
        trial += 2 * n
        d = angle(R, R2)
        # a difference within the round-off floor says nothing of the truncation error, and a rate
        # taken from it extrapolates round-off: the coarser run is as good as the trial runs can tell
        if d_prev is not None and d <= global_floor(dtype, 2 * n, angle=turned):
            return StepCount(n, d, trial, None, roundoff_limited=True)
        # a rate needs both differences small: near a difference of 1 rad the attitude error saturates
        # (it cannot exceed pi), and a ratio of two such differences says nothing of the order
        observed = (math.log2(d_prev / d) if d_prev is not None and 0 < d and 0 < d_prev < SMALL_DIFFERENCE
                    else None)
        asymptotic = observed is not None and p - 1.0 <= observed <= p + 1.5
        # before the asymptotic regime the error may still fall more slowly than h^p: the slower observed
        # rate then gives the (larger) estimate and the (larger) count
        q = observed if observed is not None and 1.0 <= observed < p else float(p)
        est = d / (2.0 ** q - 1.0)
        # a small difference counts only where the differences fall (at first order at least): two coarse
        # runs may land close by chance, and the next halving then shows the error growing
        if (np.isfinite(d) and est <= tol and observed is not None and observed >= 1.0) or asymptotic:
            N = max(1, math.ceil(2 * n * (est / tol) ** (1.0 / q))) if est > 0 else 1
            return StepCount(N, est, trial, observed, q, 2 * n)
        # differences that stop halving near the round-off floor are round-off: more steps add to it
        if (d_prev is not None and np.isfinite(d) and d > 0.5 * d_prev
                and d <= ROUNDOFF_FACTOR * global_floor(dtype, 2 * n, angle=turned)):
            return StepCount(n, d, trial, observed, roundoff_limited=True)
        n, R, d_prev = 2 * n, R2, d
    raise ValueError(f"{method}: the trial runs up to {n} steps did not reach the asymptotic regime "
                     f"(order {p}); the problem may need another method")
