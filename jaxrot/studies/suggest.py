"""Which method for which problem: :func:`suggest` picks a method and a step-size setting from the
facts of a problem (torque or not, axisymmetric body or not, torque prescribed in time) and the
final accuracy asked, never from its name.

The rules follow the precision benchmark (``jaxrot bench precision``; docs/choosing.md):

- **no torque**: the exact flow (``exact_free``), one step of any length: exact to round-off.
- **torque, axisymmetric body** (two equal moments): the exact free flow is two rotations, so the
  splitting kick - exact flow - kick and its compositions are cheap and accurate
  (``exact_split_tj4(2)``, error-controlled).
- **torque prescribed in time** (Buss's ``L(t)``): the world momentum is advanced exactly; the
  Lie-group Taylor pair ``lie_taylor5(4)``.
- **any other torque**: the embedded pair ``buss4(3)`` down to about 1e-7, ``lie_taylor5(4)`` below.

Every suggestion controls the *global* error (``Adaptive(..., error="global")``) except the exact
flow, so the returned run meets the tolerance without a search over steps.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from ..driver.stepsize import Adaptive, Fixed
from ..physics.problems import Problem

#: below this final accuracy the 5th-order pair overtakes the 4th-order one on torqued bodies
HIGH_ORDER_BELOW = 1e-7


@dataclasses.dataclass(frozen=True)
class Suggestion:
    """A method (a registered name or an adaptive pair), its step-size setting and why."""

    method: str
    stepsize: Fixed | Adaptive
    reason: str

    def run(self, problem: Problem, **kw):
        """``jaxrot.simulate`` with this choice over ``[0, problem.t_end]`` (``kw`` passed on)."""
        from ..driver.simulate import simulate

        if isinstance(self.stepsize, Fixed):
            return simulate(self.method, problem, self.stepsize.dt, None, t1=problem.t_end, **kw)
        return simulate(self.method, problem, t1=problem.t_end, stepsize=self.stepsize, **kw)


def _axisymmetric(J, rtol: float = 1e-12) -> bool:
    J = np.asarray(J, np.float64).reshape(-1, 3)
    a, b, c = J[:, 0], J[:, 1], J[:, 2]
    close = lambda x, y: np.abs(x - y) <= rtol * np.maximum(np.abs(x), np.abs(y))  # noqa: E731
    return bool(np.all(close(a, b) | close(b, c) | close(a, c)))


def suggest(problem: Problem, tol: float) -> Suggestion:
    """The method and step-size setting to reach a final attitude error of about ``tol`` on
    ``problem``, with the reason.

    Args:
      problem: a :class:`jaxrot.Problem` (its torque and body decide).
      tol: the accuracy asked, > 0 (absolute and relative tolerance of the controller).

    Returns:
      a :class:`Suggestion`; ``suggestion.run(problem)`` runs it.

    Example::

        s = jaxrot.suggest(jaxrot.problems.get("fast_top"), 1e-8)
        print(s.method, s.reason)
        traj = s.run(jaxrot.problems.get("fast_top"))
    """
    if not isinstance(problem, Problem):
        raise TypeError(f"suggest needs a jaxrot.Problem, got {type(problem).__name__}")
    tol = float(tol)
    if not np.isfinite(tol) or tol <= 0:
        raise ValueError(f"tol must be finite and > 0, got {tol}")
    torque = problem.torque
    if torque.is_free:
        return Suggestion("exact_free", Fixed(float(problem.t_end)),
                          "no torque: the exact flow (elliptic functions) in one step, exact to round-off")
    adaptive = Adaptive(tol, tol, error="global", max_steps=1 << 20)
    if getattr(torque, "time_only", False):
        return Suggestion("lie_taylor5(4)", adaptive,
                          "the torque is prescribed in time: Lie-group Taylor methods advance the world momentum "
                          "exactly; 5th-order pair, global error controlled")
    if _axisymmetric(jnp.asarray(problem.body.J)):
        return Suggestion("exact_split_tj4(2)", adaptive,
                          "axisymmetric body: the exact free flow is two rotations, so kick - exact flow - kick "
                          "compositions are cheap; 4th-order pair, global error controlled")
    if tol >= HIGH_ORDER_BELOW:
        return Suggestion("buss4(3)", adaptive,
                          f"asymmetric body with a torque, tolerance >= {HIGH_ORDER_BELOW:g}: Buss's 4th-order pair "
                          "(the cheapest per step at this accuracy), global error controlled")
    return Suggestion("lie_taylor5(4)", adaptive,
                      f"asymmetric body with a torque, tolerance < {HIGH_ORDER_BELOW:g}: the 5th-order Lie-Taylor "
                      "pair (fewer steps at high accuracy), global error controlled")
