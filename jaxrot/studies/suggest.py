"""Which method for which problem: :func:`suggest` picks a method from the facts of a problem (torque
or not, a Lagrange top or not), never from its name, and the fixed step that reaches the final
accuracy asked.

The rules follow the precision suite (``jaxrot bench precision --suite``; docs/choosing.md):

- **no torque**: the exact flow (``exact_free``), one step of any length: exact to round-off.
- **a Lagrange top** (two equal moments, gravity, the centre of mass on the symmetry axis): the exact
  free flow is two rotations, so the splitting kick - exact flow - kick composed to order 8
  (``exact_split_kl8``) takes few, cheap steps.
- **any other torque** (asymmetric bodies, a centre of mass off the axis, torques prescribed in
  time, plain functions): the eighth-order Runge-Kutta-Munthe-Kaas method ``rkmk8``.

The step comes from :func:`jaxrot.studies.step_count.steps_for_tolerance`: short runs with 4, 8,
16, ... steps until their differences shrink at the method's order, then the count that meets the
tolerance (the estimate's trial runs are part of the suggestion's cost).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
import numpy as np

from ..driver.stepsize import Fixed
from ..physics.problems import Problem


@dataclasses.dataclass(frozen=True)
class Suggestion:
    """A registered method, its fixed step, the executor to run it on (None: jaxrot's choice) and why."""

    method: str
    stepsize: Fixed
    reason: str
    executor: Any = None

    def run(self, problem: Problem, **kw):
        """``jaxrot.simulate`` with this choice over ``[0, problem.t_end]`` (``kw`` passed on; an
        ``executor`` there replaces the suggested one)."""
        from ..driver.simulate import simulate

        if self.executor is not None:
            kw.setdefault("executor", self.executor)
        return simulate(self.method, problem, self.stepsize.dt, None, t1=problem.t_end, **kw)


def _fused_if_available(method: str, problem: Problem):
    """``jaxrot.Fused()`` where Warp is installed and the method has a kernel for the torque, else None:
    in the precision suite's last two records (CPU, 1 000 bodies) rkmk8 ran 2.4-4.2 times faster in
    its kernel."""
    from .. import kernels
    from ..driver.executors import Fused
    from ..integrators import get

    return Fused() if kernels.have_warp() and kernels.supports(get(method), problem.system) else None


def _lagrange_top(problem: Problem, rtol: float = 1e-12) -> bool:
    """An axisymmetric body under gravity with its centre of mass on the symmetry axis. With the centre
    of mass off the axis the kicks turn with the body's spin and the splitting's steps resonate with it
    (`jaxrot bench unseen`: 3.8 times the tolerance at the estimated step, 0.4 times Dopri8's time;
    docs/benchmarks.md, *Outside the suite*)."""
    from ..physics.torques import GravityTorque

    J = np.asarray(problem.body.J, np.float64).reshape(-1, 3)
    if J.shape[0] != 1 or not _axisymmetric(J) or not isinstance(problem.torque, GravityTorque):
        return False
    j = J[0]
    close = lambda x, y: abs(x - y) <= rtol * max(abs(x), abs(y))  # noqa: E731
    axis = next(k for k in range(3) if close(j[(k + 1) % 3], j[(k + 2) % 3]))  # the distinct moment's axis
    com = np.asarray(problem.torque.com, np.float64)
    return bool(np.linalg.norm(np.delete(com, axis)) <= rtol * max(np.linalg.norm(com), 1e-300))


def _axisymmetric(J, rtol: float = 1e-12) -> bool:
    J = np.asarray(J, np.float64).reshape(-1, 3)
    a, b, c = J[:, 0], J[:, 1], J[:, 2]
    close = lambda x, y: np.abs(x - y) <= rtol * np.maximum(np.abs(x), np.abs(y))  # noqa: E731
    return bool(np.all(close(a, b) | close(b, c) | close(a, c)))


def suggest(problem: Problem, tol: float, *, state0=None) -> Suggestion:
    """The method and fixed step to reach a final attitude error of about ``tol`` on ``problem`` over
    ``[0, problem.t_end]``, with the reason.

    Args:
      problem: a :class:`jaxrot.Problem` (its torque and body decide the method).
      tol: the final attitude error asked (rad), > 0.
      state0: a batch of initial states the step must serve (its largest error counts); default the
        problem's.

    Returns:
      a :class:`Suggestion`; ``suggestion.run(problem)`` runs it. With a torque, a few short trial
      runs estimate the step (see :func:`jaxrot.studies.step_count.steps_for_tolerance`).

    Example::

        s = jaxrot.suggest(jaxrot.problems.get("asymmetric_top"), 1e-8)
        print(s.method, s.stepsize, s.reason)
        traj = s.run(jaxrot.problems.get("asymmetric_top"))
    """
    from .step_count import steps_for_tolerance

    if not isinstance(problem, Problem):
        raise TypeError(f"suggest needs a jaxrot.Problem, got {type(problem).__name__}")
    tol = float(tol)
    if not np.isfinite(tol) or tol <= 0:
        raise ValueError(f"tol must be finite and > 0, got {tol}")
    T = float(problem.t_end)
    if problem.torque.is_free:
        return Suggestion("exact_free", Fixed(T),
                          "no torque: the exact flow (elliptic functions) in one step, exact to round-off")
    if _lagrange_top(problem):
        method, why = ("exact_split_kl8", "a Lagrange top (axisymmetric body, centre of mass on its axis): the "
                       "exact free flow is two rotations, so the splitting kick - exact flow - kick composed to "
                       "order 8 takes few, cheap steps")
    else:
        method, why = ("rkmk8", "a torque other than a Lagrange top's (an asymmetric body, a centre of mass off "
                       "the axis, a torque prescribed in time or written as a function): the eighth-order "
                       "Runge-Kutta-Munthe-Kaas method, the fewest steps per accuracy")
    n = steps_for_tolerance(method, problem, tol, state0=state0)
    executor = _fused_if_available(method, problem)
    where = "; run in its fused kernel (executor=jaxrot.Fused())" if executor is not None else ""
    return Suggestion(method, Fixed(T / n.n_steps),
                      f"{why}; {n.n_steps} steps for {tol:g} (estimated from trial runs of {n.trial_steps} steps "
                      f"in all, observed order {n.observed_order:.1f}){where}" if n.observed_order is not None else
                      f"{why}; {n.n_steps} steps for {tol:g} (from trial runs of {n.trial_steps} steps in all){where}",
                      executor)
