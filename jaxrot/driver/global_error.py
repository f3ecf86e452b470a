"""The global-error driver (:class:`GlobalError`): the tolerance of an error-controlled run chosen by
calibration runs of the same loop, so that its *global* error lands at ``aim`` times the tolerance.

The pair's global error follows its tolerance as a power law ``e(tau) = C tau^a``; runs a factor
``ratio`` apart in tolerance give, from their differences, each calibrated body's constant and
exponent, and the run is made at the tolerance the law puts at the aim (see :func:`calibrate`).
The algorithm and its measured behaviour: docs/architecture.md ("The global-error driver").
Reference: Hairer, Norsett & Wanner, *Solving ODEs I*, II.4 (tolerance proportionality).
"""

from __future__ import annotations

import dataclasses
import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..geometry import so3
from ..geometry.state import State
from ..physics.flow import pack_body
from .attempts import attempts_frames_on
from .checks import is_concrete
from .controllers import AbstractController, Adaptive
from .failures import SUCCESSFUL
from .results import AdaptiveStats
from .tolerance import reachable, warn_expected


class GlobalError(AbstractController):
    """Error-controlled steps whose *global* error, at every output time, is aimed at ``aim`` times the
    tolerance of the wrapped controller, by calibration runs at looser tolerances.

    Args:
      controller: the :class:`~jaxrot.Adaptive` controller (its rtol, atol, max_steps; one rtol and one
        atol for the whole batch: the calibration chooses each body's tolerance).
      aim: the global error aimed at, as a fraction of the tolerance (1: the middle, on a log scale,
        of half and twice it; smaller buys a margin at the cost of about ``aim^(-1/p)`` times the
        steps of a pair of order ``p``).
      measure: ``"state"``, the 12 numbers of ``(R, Pi)`` in the mixed norm ``|dy| / (atol + rtol |y|)``,
        or ``"attitude"``, the rotation angle against ``max(rtol, atol)`` radians.
      calibration_bodies: a batch of at least four times this many bodies is calibrated on this many
        of them; None calibrates every body.

    The trajectory's ``controller`` reports the estimated global error, the tolerance used and the
    attempts spent calibrating. How it works and how well: docs/architecture.md.

    Example::

        jaxrot.simulate("buss4(3)", p, t1=10.0, stepsize=jaxrot.GlobalError(jaxrot.Adaptive(1e-8, 1e-8)))
    """

    adaptive = True

    controller: Adaptive
    aim: float = 1.0
    measure: str = eqx.field(static=True, default="state")
    calibration_bodies: int | None = eqx.field(static=True, default=64)

    def __check_init__(self):
        if not isinstance(self.controller, Adaptive):
            raise TypeError(f"GlobalError wraps a jaxrot.Adaptive controller, got {self.controller!r}")
        if self.measure not in ("state", "attitude"):
            raise ValueError(f"GlobalError.measure must be 'state' or 'attitude', got {self.measure!r}")
        if isinstance(self.aim, (int, float, np.floating)) and not (np.isfinite(self.aim) and self.aim > 0):
            raise ValueError(f"GlobalError.aim must be a finite number > 0, got {self.aim!r}")
        if np.ndim(self.controller.rtol) or np.ndim(self.controller.atol):
            raise ValueError("GlobalError takes one rtol and one atol (it chooses each body's local tolerance "
                             "itself); got per-body tolerances")
        b = self.calibration_bodies
        if b is not None and (isinstance(b, bool) or not isinstance(b, (int, np.integer)) or b < 2):
            raise ValueError(f"GlobalError.calibration_bodies must be an integer >= 2 or None, got {b!r}")

    @property
    def rtol(self):
        return self.controller.rtol

    @property
    def atol(self):
        return self.controller.atol

    @property
    def max_steps(self):
        return self.controller.max_steps


def run_pair(spec, state0, rtol, atol, executor):
    """One calibration run of ``spec`` (an AttemptSpec) from ``state0`` at ``rtol``, ``atol`` (scalars or
    per body), its bodies placed by ``executor``, nothing but the output times kept: ``(states at the
    output times, stats, AdaptiveStats, success)``."""
    sub = dataclasses.replace(spec, state0=state0, rtol=rtol, atol=atol, event=None, every=None, dense=False,
                              monitor=None)
    fr = attempts_frames_on(sub, executor)
    states = jax.tree_util.tree_map(lambda x: x[..., 1:, :] if x.ndim == fr.states.Pi.ndim else x[..., 1:, :, :],
                                    fr.states)
    acc, rej, err = fr.counts
    return states, fr.stats, AdaptiveStats(acc, rej, err), fr.reason == SUCCESSFUL


@functools.partial(jax.jit, static_argnames=("measure",))  # one dispatch, not one per operation
def scaled_difference(a: State, b: State, rtol: float, atol: float, measure: str = "state") -> jax.Array:
    """Per body, the largest difference over the save times in units of the tolerance: over the 12
    numbers of the state, |a - b| / (atol + rtol |b|) (``measure="state"``), or the rotation angle
    between the two attitudes over ``max(rtol, atol)`` (``"attitude"``)."""
    if measure == "attitude":
        angle = jnp.vectorize(so3.rotation_angle, signature="(3,3),(3,3)->()")(a.R, b.R)
        return jnp.max(angle, axis=-1) / jnp.maximum(rtol, atol)
    ya, yb = pack_body(a.R, a.Pi), pack_body(b.R, b.Pi)  # (..., save times, 12)
    return jnp.max(jnp.abs(ya - yb) / (atol + rtol * jnp.abs(yb)), axis=(-2, -1))


@functools.partial(jax.jit, static_argnames=("bodies",))
def calibration_set(state0: State, J: jax.Array, bodies: int) -> jax.Array:
    """Indices of ``bodies`` bodies of a batch to calibrate on: half spread evenly over the batch, half
    the fastest (largest initial angular speed, which usually take the most steps and carry the largest
    global error). Traceable; an index may appear twice."""
    B = state0.R.shape[0]
    even = jnp.asarray(np.linspace(0, B - 1, bodies - bodies // 2).round().astype(np.int32))
    speed = jnp.linalg.norm(state0.Pi / J, axis=-1)
    fastest = lax.top_k(speed, bodies // 2)[1].astype(jnp.int32)
    return jnp.concatenate([even, fastest])


#: calibrated bodies whose predicted error is checked where the prediction reaches far below the finest
#: calibration run (two runs of them, at the predicted tolerance and sqrt(ratio) times it)
CHECK_BODIES = 8


@eqx.filter_jit  # one dispatch for the calibration runs
def _on_subset(spec, executor, measure, bodies, ratio=10.0, aim=1.0, units=None):
    """:func:`calibrate` for a batch of at least ``4 bodies`` bodies: calibration on ``bodies`` of them
    (:func:`calibration_set`) at 100, 10 and 1 times the tolerance, each calibrated body's exponent
    of the law read from its two differences, ``a = log(d_1 / d_2) / log(ratio)`` (kept within 1-1.5
    times the law's ``alpha``: some pairs' attitude error falls faster than the law, e.g. ``buss4(3)``'s
    as ``tol^1.15`` to ``tol^1.4`` on the precision suite, ``benchmarks/global_driver.py --law``),
    its error at the tolerance ``e = d_2 / (ratio^a - 1)``, and the whole batch run once at the
    tolerance the calibrated body needing the tightest one needs. Where every calibrated body could
    go looser than the coarsest calibration run, two more runs a ratio and ratio^2 above it calibrate
    the law there first. Where that tolerance lies more than a ``ratio`` below the finest
    calibration run, the prediction is checked first: the ``CHECK_BODIES`` calibrated bodies
    predicted worst run at it and at ``sqrt(ratio)`` times it, their difference and their error at
    the finest calibration run give their error there and their exponent in between (within 1-2
    times ``alpha``), and the tolerance moves to put the largest at ``aim``. Returns ``(the tolerances'
    factor, the predicted global error, attempts spent per body)``; errors in units of ``units``
    (``(rtol, atol)``; None: the run's own tolerances)."""
    method, system, state0, rtol, atol = spec.method, spec.system, spec.state0, spec.rtol, spec.atol
    ur, ua = (rtol, atol) if units is None else units
    alpha = float(method.order) / (float(method.error_order()) + 1.0)
    idx = calibration_set(state0, system.body.J, bodies)
    cal = State(state0.R[idx], state0.Pi[idx])
    factors = (ratio * ratio, ratio, 1.0)

    def law(runs):
        # runs at base * ratio^2, base * ratio and base: per calibrated body, the law's exponent, the
        # error at base, and whether the three runs say anything (a run that failed, max_steps or
        # non-finite, does not: that body is left out; it fails again in the final run, and is
        # reported there)
        d1, d2 = (scaled_difference(a[0], b[0], ur, ua, measure) for a, b in zip(runs, runs[1:]))
        a = jnp.log(jnp.maximum(d1, tiny) / jnp.maximum(d2, tiny)) / float(np.log(ratio))
        # not below the law's alpha: a smaller ratio means the coarsest run is not yet asymptotic (the
        # error grows more slowly there), and extrapolating with it would give a needlessly tight run
        a = jnp.where((d1 > 0) & (d2 > 0), jnp.clip(a, alpha, 1.5 * alpha), alpha)
        est = d2 / (ratio ** a - 1.0)
        ok = runs[0][3] & runs[1][3] & runs[2][3] & jnp.isfinite(est)
        # the base's factor that puts each body at the aim, and the tightest over the valid bodies
        # (none valid: the base itself)
        want = (aim / jnp.maximum(est, tiny)) ** (1.0 / a)
        least = jnp.where(jnp.any(ok), jnp.min(jnp.where(ok, want, jnp.inf)), 1.0)
        steps = sum(jnp.sum(r[2].n_accepted + r[2].n_rejected) for r in runs)
        return a, est, ok, least, steps

    tiny = float(jnp.finfo(state0.R.dtype).tiny)  # a weak type: the differences are in the tolerances' type
    runs = [run_pair(spec, cal, rtol * f, atol * f, executor) for f in factors]
    a, est, valid, least, spent = law(runs)
    # no looser than the coarsest calibration run (unless calibrated again above it, below)
    scale = jnp.minimum(least, factors[0])
    predicted = jnp.max(jnp.where(valid, est * scale ** a, 0.0))
    spent = spent.astype(est.dtype)

    def looser(scale):
        # the law puts every calibrated body at the aim above the coarsest calibration run: a pair
        # whose kept result is of much higher order than its estimate (rkmk8(5) ends 1e-4 times its
        # tolerance on the tops). Two more runs a ratio and ratio^2 above it calibrate the law there
        # (the coarsest becoming the finest), and the run goes where that law puts the aim, no looser
        # than ratio^2 above the first coarsest
        top = factors[0]
        more = [run_pair(spec, cal, rtol * top * f, atol * top * f, executor) for f in (ratio * ratio, ratio)]
        a2, est2, ok2, least2, steps = law(more + [runs[0]])
        ok2 = ok2 & valid
        new = top * jnp.minimum(jnp.where(jnp.any(ok2), least2, 1.0), top)
        return new, jnp.max(jnp.where(ok2, est2 * (new / top) ** a2, 0.0)), steps.astype(est.dtype)

    def checked(scale):
        # more than a ratio below the finest calibration run the law's exponent may have drifted
        # (buss4(3) on the T-handle at 1e-10: tol^1.3 over the calibrated decades, steeper below, so
        # the extrapolation asked for 3 times too small an error). The calibrated bodies predicted
        # worst run at that tolerance s and at rho = sqrt(ratio) times it: the looser run's error
        # dominates their difference d, so d is not lost in round-off where s is near float64's
        # floor (as a run a ratio below s would be). Each body's error at s, e, and its exponent a
        # between the finest calibration run and s then follow from est = e s^-a and
        # d = e (rho^a - 1): log(est / d) = -a log(s) - log(rho^a - 1), increasing in a >= alpha
        # for s < 1 / ratio, solved by bisection within alpha and 2 alpha
        worst = lax.top_k(jnp.where(valid, est * scale ** a, -jnp.inf), min(CHECK_BODIES, bodies))[1]
        sub = State(cal.R[worst], cal.Pi[worst])
        rho = float(np.sqrt(ratio))
        pair = [run_pair(spec, sub, rtol * scale * f, atol * scale * f, executor) for f in (rho, 1.0)]
        d = scaled_difference(pair[0][0], pair[1][0], ur, ua, measure)
        good = valid[worst] & pair[0][3] & pair[1][3] & jnp.isfinite(d) & (d > 0)
        d = jnp.where(good, d, 1.0)
        target = jnp.log(jnp.maximum(est[worst], tiny) / d)
        a_lo, a_hi = jnp.full_like(d, alpha), jnp.full_like(d, 2.0 * alpha)
        for _ in range(40):
            mid = 0.5 * (a_lo + a_hi)
            above = -mid * jnp.log(scale) - jnp.log(rho ** mid - 1.0) > target
            a_lo, a_hi = jnp.where(above, a_lo, mid), jnp.where(above, mid, a_hi)
        a_here = 0.5 * (a_lo + a_hi)
        e = d / (rho ** a_here - 1.0)
        moved = jnp.min(jnp.where(good, scale * (aim / e) ** (1.0 / a_here), jnp.inf))
        new = jnp.where(jnp.isfinite(moved), jnp.minimum(moved, factors[0]), scale)
        steps = sum(jnp.sum(r[2].n_accepted + r[2].n_rejected) for r in pair).astype(est.dtype)
        # no checked body measured (their runs failed: a float32 check below the per-step floor stalls):
        # the calibration's own prediction stands
        checked_error = jnp.max(jnp.where(good, e * (new / scale) ** a_here, 0.0))
        return new, jnp.where(jnp.any(good), checked_error, predicted), steps

    branch = jnp.where(scale * ratio < 1.0, 1, jnp.where(least > factors[0], 2, 0))
    scale, predicted, more = lax.switch(branch, [lambda s: (s, predicted, jnp.zeros((), est.dtype)), checked, looser],
                                        scale)
    # the tolerance is a choice, not a function of the problem to differentiate: a derivative is that
    # of the final run at it (through the calibration, reverse mode gave NaN)
    B = state0.R.shape[0]
    return lax.stop_gradient(scale), predicted, (spent + more) / B  # the calibration's cost shared out


def raised_to_floor(rtol, atol, counts: dict, dtype, method):
    """The calibrated tolerances raised to what ``dtype`` can reach per step
    (:func:`~jaxrot.driver.tolerance.reachable`), with the global error the calibration's law predicts
    at them: ``e (raised / chosen)^alpha``, ``alpha = p / (q + 1)`` (the least growth of the exponents
    the calibration allows). The warning states it, and ``counts`` hold it and the tolerance used, so
    that a float32 run does not report the aim it can no longer reach. Returns ``(rtol, atol, counts)``."""
    where = "GlobalError: the local tolerance its calibration chose"
    if not all(is_concrete(x) for x in jax.tree_util.tree_leaves((rtol, atol, counts))):
        return reachable(rtol, atol, dtype, where=where) + (counts,)
    alpha = float(method.order) / (float(method.error_order()) + 1.0)
    predicted = np.asarray(counts["global_error"], np.float64)

    def then(raised_rtol, raised_atol):  # called by reachable where it raised either: the growth it made
        nonlocal predicted
        growth = 1.0
        for chosen, raised in ((rtol, raised_rtol), (atol, raised_atol)):
            chosen, raised = np.asarray(chosen, np.float64), np.asarray(raised, np.float64)
            growth = np.maximum(growth, np.where(chosen > 0, raised / np.where(chosen > 0, chosen, 1.0), 1.0))
        predicted = predicted * growth ** alpha
        return (f"; its calibration's law then puts the global error at about {float(np.max(predicted)):.2g} "
                f"times the tolerance asked, not the aim")

    rtol, atol = reachable(rtol, atol, dtype, where=where, then=then)
    like = jnp.asarray(counts["global_error"]).dtype
    counts = dict(counts, global_error=jnp.asarray(predicted, like),
                  tolerance=jnp.broadcast_to(jnp.asarray(rtol, like), jnp.shape(counts["tolerance"])))
    return rtol, atol, counts


def calibrate(spec, executor, controller: GlobalError, ratio=10.0, units=None):
    """The tolerances of the run whose *global* error is about ``aim`` times the tolerance, by tolerance
    calibration: ``(rtol, atol, AdaptiveStats fields (global_error, tolerance, n_calibration), check)``,
    ``check(final states at the output times, counts) -> counts`` (:func:`check_law`) for a calibration
    body by body, else None.

    The pair's global error follows its tolerance as ``e(tau) = C tau^alpha`` with ``alpha = p / (q + 1)``
    (steps ``h ~ tau^(1/(q+1))`` set by the order-q estimate, global error ``h^p`` of the order-p result
    kept). Two runs a factor ``ratio`` apart in tolerance give the finer one's error from their
    difference, ``e_2 = |y_1 - y_2| / (ratio^alpha - 1)``, and the returned tolerance is where the law
    puts ``e = aim``. Errors are in units of ``units``, the ``(rtol, atol)`` asked (None: the run's own;
    the two differ where the request was raised to the dtype's floor before the calibration, and the
    error is then still reported against the request). A batch of at least ``4 calibration_bodies``
    bodies: :func:`_on_subset`. A
    smaller batch (or ``calibration_bodies=None``) is calibrated body by body at 100 and 10 times the
    tolerance with the law's ``alpha``, each body then at its own tolerance."""
    if spec.stacked:
        raise ValueError("GlobalError calibrates bodies that share one system: stacked problems are not supported; "
                         "pass a batch of initial states (state0=) instead")
    rtol, atol, aim, measure, bodies = spec.rtol, spec.atol, controller.aim, controller.measure, \
        controller.calibration_bodies
    ur, ua = (rtol, atol) if units is None else units
    state0 = spec.state0
    dtype = state0.R.dtype
    if state0.R.ndim == 3 and bodies is not None and state0.R.shape[0] >= 4 * bodies:
        scale, predicted, spent = _on_subset(spec, executor, measure, bodies, ratio, aim, (ur, ua))
        B = state0.R.shape[0]
        return rtol * scale, atol * scale, dict(global_error=jnp.full((B,), predicted),
                                                tolerance=jnp.full((B,), rtol * scale),
                                                n_calibration=jnp.full((B,), spent)), None
    alpha = float(spec.method.order) / (float(spec.method.error_order()) + 1.0)
    runs = [run_pair(spec, state0, rtol * f, atol * f, executor) for f in (ratio * ratio, ratio)]
    est = scaled_difference(runs[0][0], runs[1][0], ur, ua, measure) / (ratio ** alpha - 1.0)
    spent = sum(r[2].n_accepted + r[2].n_rejected for r in runs)
    # per body: the tolerance whose predicted global error is `aim`; a body already within it runs at
    # the second calibration run's tolerance
    scale = ratio * jnp.where(est > aim, (aim / jnp.maximum(est, jnp.finfo(dtype).tiny)) ** (1.0 / alpha), 1.0)
    scale = lax.stop_gradient(scale)  # (as in _on_subset)
    counts = dict(global_error=jnp.minimum(est, aim), tolerance=rtol * scale, n_calibration=spent)
    check = functools.partial(check_law, runs[1][0], est, scale / ratio, alpha, ur, ua, measure, aim)
    return rtol * scale, atol * scale, counts, check


#: the factor by which the run's likely global error (the law's figure scaled by the calibration's miss)
#: may exceed the aim before a warning says so: the window, half to twice the aim, that the law's
#: estimate is documented to land in
LAW_MISS = 2.0


def check_law(states_fine, est, shrink, alpha, rtol, atol, measure, aim, final: State, counts: dict):
    """After a run calibrated body by body: the finer calibration run's error measured against the
    final run (which is ``1 / shrink`` times tighter, so its own error is small beside it) and set
    beside the law's estimate ``est`` there. Where the measured error is ``m > 1`` times the estimate
    the law underestimated the error, and the final run's likely error is the law's figure times ``m``
    (the measured error carried down by the law's exponent, ``measured shrink^alpha``): it is what
    ``counts["global_error"]`` then reports. Where that is more than ``LAW_MISS`` times the aim (the
    T-handle at loose tolerances, its flip time off by a large fraction, or a run whose error falls
    more slowly than the law; more than twice the figure already announced where the tolerance was
    raised to the dtype's floor) a :class:`~jaxrot.PrecisionWarning` says so. An estimate, not a
    bound: the error may fall more slowly still below the calibration runs, and where the law put the
    body within the aim at the finer calibration run's tolerance, the final run is that run and
    nothing is measured (docs/architecture.md). Returns the counts."""
    if not all(is_concrete(x) for x in jax.tree_util.tree_leaves((states_fine, est, final))):
        return counts
    measured = np.asarray(scaled_difference(states_fine, final, rtol, atol, measure), np.float64)
    est = np.asarray(est, np.float64)
    reported = np.asarray(counts["global_error"], np.float64)
    under = (est > 0) & (measured > est)
    likely = np.where(under, np.maximum(reported, measured * np.asarray(shrink, np.float64) ** alpha), reported)
    like = jnp.asarray(counts["global_error"]).dtype
    counts = dict(counts, global_error=jnp.asarray(likely, like))
    missed = under & (likely > LAW_MISS * np.maximum(aim, reported))
    if np.any(missed):
        worst = np.max(np.where(missed, measured / np.where(est > 0, est, 1.0), 0.0))
        warn_expected("GlobalError", f"the calibration runs did not follow its law: the finer one's error, "
                      f"measured against the final run, is {worst:.3g} times what the law put there, so the "
                      f"run's global error is likely about {float(np.max(likely)):.2g} times the tolerance "
                      f"asked, not {aim:g} (docs/architecture.md, 'The global-error driver'); ask a tighter "
                      f"tolerance, or check against a tighter run")
    return counts
