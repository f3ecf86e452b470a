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

The run's floating-point type bounds what any count reaches: round-off grows with the steps and the
angle turned (:func:`jaxrot.driver.tolerance.global_floor`), and more on problems that amplify
perturbations. Near that bound the suggestion measures the round-off of its own count and aims the
truncation error at what is left of the tolerance; where round-off takes more than half of it, it
says before the run, with a :class:`jaxrot.driver.tolerance.PrecisionWarning`, the error it will end
with (``Suggestion.expected_error``; docs/choosing.md, *What float32 can reach*).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
import numpy as np

from ..physics.problems import Problem


@dataclasses.dataclass(frozen=True)
class Suggestion:
    """A registered method, its constant step ``dt``, the executor to run it on (None: jaxrot's choice) and why;
    ``expected_error``: the final attitude error (rad) the run is expected to end with in ``dtype``, the
    floating-point type it was chosen for (the tolerance asked, or more where round-off in ``dtype``
    does not allow it); ``angle``: the angle (rad) the body was expected to turn through, from its
    initial spin (the scale of the run's round-off)."""

    method: str
    dt: float
    reason: str
    executor: Any = None
    expected_error: float | None = None
    dtype: Any = None
    angle: float | None = None

    def run(self, problem: Problem, **kw):
        """``jaxrot.simulate`` with this choice over ``[0, problem.t_end]`` in ``dtype`` (``kw`` passed on;
        an ``executor`` there replaces the suggested one). Where a torque spun the body up, so that it
        turned through more than ``angle`` and the round-off over the run takes the error well above
        ``expected_error``, a :class:`~jaxrot.driver.tolerance.PrecisionWarning` says so after the run."""
        from ..driver.simulate import simulate

        if self.executor is not None:
            kw.setdefault("executor", self.executor)
        if self.dtype is not None:
            problem, state0 = _in_dtype(problem, kw.get("state0"), self.dtype)
            if "state0" in kw:  # (else the problem's own, cast: a stacked problem stays one)
                kw["state0"] = state0
        traj = simulate(self.method, problem, self.dt, None, t1=problem.t_end, **kw)
        self._check_turned(problem, kw.get("state0"), traj)
        return traj

    def _check_turned(self, problem: Problem, state0, traj) -> None:
        """The round-off check of the suggestion made again with the angle the run's frames show."""
        from ..driver.checks import is_concrete
        from ..driver.tolerance import global_floor, turned_angle, warn_precision

        # float32 only, as the error-controlled run's check: float64's envelope is far above its round-off
        if (self.angle is None or self.expected_error is None or problem.torque.is_free
                or traj.states.R.dtype != jnp.float32 or not is_concrete(traj.states.Pi)):
            return
        s = problem.state0 if state0 is None else state0
        turned = float(np.max(np.asarray(turned_angle(problem.body.J, 0.0, s.Pi, traj.ts, traj.states.Pi))))
        if not turned > self.angle:
            return
        n = max(1, round(float(problem.t_end) / self.dt))
        dtype = jnp.dtype(traj.states.R.dtype)
        more = global_floor(dtype, n, angle=turned) - global_floor(dtype, n, angle=self.angle)
        if more > 0.25 * self.expected_error:
            warn_precision("Suggestion.run", f"the body turned through {turned:.3g} rad, more than the "
                           f"{self.angle:.3g} rad its initial spin foretold (a torque spun it up), and a {dtype.name} "
                           f"run accumulates round-off over that angle: expect a final error up to about "
                           f"{self.expected_error + more:.2g} rad, not {self.expected_error:.2g}")


def _in_dtype(problem: Problem, state0, dtype):
    """``(problem, state0)`` in ``dtype`` (state0 None: the problem's); an attitude cast up from a less
    precise type is projected onto SO(3) again, as it is orthogonal only to the precision it had."""
    from ..driver.checks import cast
    from ..geometry.so3 import nearest_rotation
    from ..geometry.state import State

    s = problem.state0 if state0 is None else state0
    up = jnp.finfo(s.R.dtype).eps > jnp.finfo(dtype).eps
    problem, s = cast(problem, dtype), cast(s, dtype)
    if up:
        s = State(nearest_rotation(s.R), s.Pi)
        if state0 is None:
            problem = Problem(problem.body, problem.torque, s, problem.t_end, problem.name)
    return problem, s


def _fused_if_available(method: str, problem: Problem):
    """``jaxrot.Fused()`` where Warp is installed and the method has a kernel for the torque of at most
    :data:`~jaxrot.driver.executors.FUSED_ADAPTIVE_MAX_LINES` lines, else None: in the precision suite's
    last two records (CPU, 1 000 bodies) rkmk8 ran 2.4-4.2 times faster in its kernel, and a longer
    kernel (a splitting on the exact flow) takes longer to compile on a first call than a suggestion's
    runs take on XLA (docs/benchmarks.md, "A called function written once")."""
    from .. import kernels
    from ..driver.executors import FUSED_ADAPTIVE_MAX_LINES, Fused
    from ..integrators import get
    from ..kernels.generate import written_within

    m, system = get(method), problem.system
    dtype = kernels.run_dtype(system)
    short = kernels.have_warp() and written_within(m, system, dtype, FUSED_ADAPTIVE_MAX_LINES, pair=False)
    return Fused() if short and kernels.supports(m, system) else None


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


#: below this many times the round-off floor, the round-off of the suggested run is measured too
_MEASURE_BELOW = 100.0
#: the measured round-off (the largest difference of runs from the initial state and from two
#: perturbed by 4 eps) times this bounds the run's own: docs/choosing.md, 'What float32 can reach'
_MEASURED_MARGIN = 3.0
#: a spread of the measuring runs above this many times the round-off floor is checked with twice the
#: steps (it may be truncation); the most steps that check doubles to
_SPREAD_OF_TRUNCATION = 10.0
_MAX_STEPS = 1 << 20


def _roundoff(method, problem, state, n: int, executor) -> float:
    """The largest final attitude difference of three runs of ``n`` steps, from ``state`` and from it
    turned by 4 eps about one axis with ``Pi`` scaled by 1 +- 4 eps: their truncation errors are the
    same, their round-off independent (with the perturbation carried by the flow, as a rounding of the
    data would be). The spread measures the round-off of the suggested run (its largest over a batch)."""
    import jax

    from ..driver.saveat import SaveAt
    from ..driver.simulate import simulate
    from ..geometry import so3
    from ..geometry.state import State
    from .analysis import attitude_error

    T = float(problem.t_end)
    dt = state.R.dtype
    e = float(jnp.finfo(dt).eps)

    def perturbed(k, axis):
        v = jnp.zeros(3, dt).at[axis].set(k * e)
        return State(state.R @ so3.exp(v), state.Pi * jnp.asarray(1 + k * e, dt))

    kw = {} if executor is None else {"executor": executor}
    wide = jax.dtypes.canonicalize_dtype(jnp.float64)  # compared in float64 where it is enabled
    R = [jnp.asarray(simulate(method, problem, T / n, n, state0=s, saveat=SaveAt(t0=False), throw=False,
                              **kw).final.R, wide) for s in (state, perturbed(4, 0), perturbed(-4, 1))]
    d = [np.asarray(attitude_error(R[i], R[j]), np.float64) for i, j in ((0, 1), (0, 2), (1, 2))]
    return float(np.max(np.where(np.isfinite(d), d, np.inf)))


def suggest(problem: Problem, tol: float, *, state0=None, dtype=None) -> Suggestion:
    """The method and fixed step to reach a final attitude error of about ``tol`` on ``problem`` over
    ``[0, problem.t_end]`` in ``dtype``, with the error expected and the reason.

    Args:
      problem: a :class:`jaxrot.Problem` (its torque and body decide the method).
      tol: the final attitude error asked (rad), > 0.
      state0: a batch of initial states the step must serve (its largest error counts); default the
        problem's.
      dtype: the floating-point type of the run (default: the initial state's). Round-off bounds what
        a run in it can reach: a ``tol`` below that is raised to it, with a
        :class:`jaxrot.driver.tolerance.PrecisionWarning` that says so, before anything runs
        (``expected_error`` and the reason then say what the run reaches).

    Returns:
      a :class:`Suggestion`; ``suggestion.run(problem)`` runs it (in ``dtype``). With a torque, a few
      short trial runs estimate the step (see :func:`jaxrot.studies.step_count.steps_for_tolerance`);
      where the tolerance is within 100 times the round-off floor
      (:func:`jaxrot.driver.tolerance.global_floor`; float32 mostly), three runs of the suggested
      count from slightly perturbed initial states measure the problem's own round-off too.

    Example::

        s = jaxrot.suggest(jaxrot.problems.get("asymmetric_top"), 1e-8)
        print(s.method, s.dt, s.expected_error, s.reason)
        traj = s.run(jaxrot.problems.get("asymmetric_top"))
    """
    import jax

    from ..driver.tolerance import global_floor, warn_precision
    from .step_count import rotation_angle, steps_for_tolerance

    if not isinstance(problem, Problem):
        raise TypeError(f"suggest needs a jaxrot.Problem, got {type(problem).__name__}")
    tol = float(tol)
    if not np.isfinite(tol) or tol <= 0:
        raise ValueError(f"tol must be finite and > 0, got {tol}")
    given = (problem.state0 if state0 is None else state0).R.dtype
    # float64 without jax_enable_x64 is float32: the suggestion is for the type the run will have
    dtype = jnp.dtype(jax.dtypes.canonicalize_dtype(given if dtype is None else dtype))
    if not jnp.issubdtype(dtype, jnp.floating):
        raise TypeError(f"dtype must be a floating-point type, got {dtype}")
    problem, state = _in_dtype(problem, state0, dtype)
    state0 = None if state0 is None else state
    T = float(problem.t_end)
    angle = rotation_angle(problem, state, T)
    where = f"suggest(tol={tol:g})"

    def expected_line(expected, roundoff, measured):
        how = (f"the floor for the steps and the {angle:.3g} rad turned, or 3 times the spread of three runs from "
               "perturbed initial states if larger" if measured else f"the floor for the steps and the {angle:.3g} "
               "rad turned")
        return f"; expected final error {expected:.2g} rad in {dtype.name} (round-off up to {roundoff:.2g}: {how})"

    if problem.torque.is_free:
        roundoff = global_floor(dtype, 1, angle=angle)
        expected = max(tol, roundoff)
        if expected > tol:
            warn_precision(where, f"the exact flow in {dtype.name} ends about {expected:.2g} rad from the truth "
                           f"after turning {angle:.3g} rad (round-off), above the tolerance", dtype)
        return Suggestion("exact_free", float(T),
                          "no torque: the exact flow (elliptic functions) in one step, exact to round-off"
                          + expected_line(expected, roundoff, False), None, expected, dtype, angle)
    if _lagrange_top(problem):
        method, why = ("exact_split_kl8", "a Lagrange top (axisymmetric body, centre of mass on its axis): the "
                       "exact free flow is two rotations, so the splitting kick - exact flow - kick composed to "
                       "order 8 takes few, cheap steps")
    else:
        method, why = ("rkmk8", "a torque other than a Lagrange top's (an asymmetric body, a centre of mass off "
                       "the axis, a torque prescribed in time or written as a function): the eighth-order "
                       "Runge-Kutta-Munthe-Kaas method, the fewest steps per accuracy")
    executor = _fused_if_available(method, problem)
    # no run turns through the angle with less round-off than this: trial runs aimed below it would
    # only measure round-off
    aim = max(tol, global_floor(dtype, 1, angle=angle))
    n = steps_for_tolerance(method, problem, aim, state0=state0)
    N = n.n_steps
    roundoff = global_floor(dtype, N, angle=angle)
    measured = tol < _MEASURE_BELOW * roundoff
    if measured:
        spread = _roundoff(method, problem, state, N, executor)
        # runs from initial states a few roundings apart that fail, or end far apart, may say the steps
        # are too long for the motion though the trial runs happened to agree (a body spun up about an
        # axis of symmetry by its torque): the steps are doubled while that spread falls (truncation);
        # where it does not, it is round-off the problem amplifies, and more steps would not help
        while 2 * N <= _MAX_STEPS and not spread <= _SPREAD_OF_TRUNCATION * global_floor(dtype, N, angle=angle):
            wider = _roundoff(method, problem, state, 2 * N, executor)
            if np.isfinite(spread) and not wider < spread / 4:
                break
            N, spread = 2 * N, wider
        roundoff = max(global_floor(dtype, N, angle=angle), _MEASURED_MARGIN * spread)
    if n.roundoff_limited:
        # the trial runs reached round-off before the tolerance: the count's truncation error is at most
        # their last difference, and more steps do not lower it
        expected = roundoff + n.estimated_error
    elif roundoff <= tol / 2:
        # the truncation error aimed at what round-off leaves of the tolerance
        N, expected = max(N, n.steps_for(tol - roundoff)), tol
    else:
        # round-off alone takes most of the tolerance or more: the truncation error aimed at a tenth of
        # it (for an eighth-order method 1.33 times the steps of aiming at the round-off itself)
        target = max(tol, roundoff / 10)
        N = max(N, n.steps_for(target))  # (not fewer than the measuring runs found the motion needs)
        roundoff = max(roundoff, global_floor(dtype, N, angle=angle))
        expected = roundoff + target
    if expected > tol:
        warn_precision(where, f"a {dtype.name} run of {method} on this problem is expected to end about "
                       f"{expected:.2g} rad from the truth (round-off up to {roundoff:.2g} after turning "
                       f"{angle:.3g} rad), above the tolerance; suggested for that", dtype)
    else:
        expected = tol
    how = (f"estimated from trial runs of {n.trial_steps} steps in all, observed order {n.observed_order:.1f}"
           if n.observed_order is not None else f"from trial runs of {n.trial_steps} steps in all")
    on = "; run in its fused kernel (executor=jaxrot.Fused())" if executor is not None else ""
    return Suggestion(method, float(T / N),
                      f"{why}; {N} steps for {tol:g} ({how}){on}" + expected_line(expected, roundoff, measured),
                      executor, expected, dtype, angle)
