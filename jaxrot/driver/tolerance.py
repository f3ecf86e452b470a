"""What a floating-point type can reach: the smallest tolerances an error-controlled run can meet, the
smallest final error a run can count on, and the check that raises a tolerance below them.

Both limits are multiples of the type's machine epsilon ``eps`` (``jnp.finfo(dtype).eps``: 1.2e-7 for
float32, 2.2e-16 for float64), measured on the registered problems in both types; the measurements
and the commands that made them are in docs/choosing.md (*What float32 can reach*).

- **Per step** (:func:`local_floor`): an embedded pair's error estimate is the difference of two
  results that each carry round-off of a few ``eps`` (relative to the state's scale). Near that level
  the estimate no longer falls with the step: the controller shrinks the step without end and the run
  ends at ``max_steps``. The floor is where the step counts of every pair still follow their
  tolerance law.
- **Over a run** (:func:`global_floor`): round-off accumulates. A part grows with the steps taken and
  a part with the angle the body turns through (each step's rotation is rounded relative to its
  size, which shows as an error in phase). The floor is an upper envelope of the round-off measured
  on well-conditioned problems; a problem that amplifies perturbations (a top falling from near its
  vertical, a body near its intermediate axis) can end several times above it, which is why
  :func:`jaxrot.suggest` also measures the round-off of the runs it proposes.

:func:`reachable` applies the floors to a run's tolerances before it starts, with one
:class:`PrecisionWarning`. :func:`warn_over_span` says, before an error-controlled run starts, when the
round-off over its span (the global floor for the angle the body turns through) is above its
tolerances: the per-step tolerances are kept (a looser step would add truncation error to round-off
that may well be less than the envelope), and the warning states the final error to expect.
:func:`warn_turned` makes the same check after a float32 run with a torque, from the angle the saved
states show the bodies turned through (:func:`turned_angle`), for bodies whose spin grew beyond what
their initial spin foretold.
"""

from __future__ import annotations

import os
import sys
import warnings

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["PrecisionWarning", "local_floor", "global_floor", "reachable", "turning_angle", "warn_over_span",
           "turned_angle", "warn_turned",
           "warn_precision"]

#: the per-step floor in units of eps: the lowest tolerance at which every pair's step count still
#: followed its tolerance law, with a margin to where pairs stalled (docs/choosing.md)
LOCAL_FLOOR_EPS = 32.0
#: the global floor's growth per step and per radian turned, in units of eps: an upper envelope, with
#: margin, of the float32 round-off measured on well-conditioned problems (docs/choosing.md)
GLOBAL_FLOOR_EPS_PER_STEP = 2.0
GLOBAL_FLOOR_EPS_PER_RADIAN = 8.0
#: after a run, a body is announced again where its round-off floor over the angle it turned is this many
#: times the floor over the angle its initial spin foretold
GREW = 1.25

_X64_ADVICE = ('for less, run in float64: jax.config.update("jax_enable_x64", True) before any array is '
               'made, and a float64 initial state (jaxrot.cast(problem, jnp.float64))')


class PrecisionWarning(UserWarning):
    """A tolerance below what the run's floating-point type can reach was raised to the reachable floor
    (or a run is expected to end above the tolerance asked)."""


def _eps(dtype) -> float:
    dt = jnp.dtype(dtype)
    if not jnp.issubdtype(dt, jnp.floating):
        raise TypeError(f"a floating-point dtype is needed, got {dt}")
    return float(jnp.finfo(dt).eps)


def local_floor(dtype) -> float:
    """The smallest ``rtol`` and ``atol`` an error-controlled run in ``dtype`` can meet per step:
    ``32 eps`` (3.8e-6 in float32, 7.1e-15 in float64)."""
    return LOCAL_FLOOR_EPS * _eps(dtype)


def global_floor(dtype, n_steps, *, angle: float = 0.0) -> float:
    """The smallest final error (rad, or relative) a run of about ``n_steps`` steps in ``dtype`` can
    count on: ``eps (2 n_steps + 8 angle)``, with ``angle`` the total angle (rad) the body turns
    through over the run (``integral |omega| dt``; 0 counts only the steps).

    An upper envelope of the round-off measured on well-conditioned problems; problems that amplify
    perturbations end above it (see the module's documentation).
    """
    n = float(n_steps)
    a = float(angle)
    if not (np.isfinite(n) and n >= 0):
        raise ValueError(f"n_steps must be a finite number >= 0, got {n_steps!r}")
    if not (np.isfinite(a) and a >= 0):
        raise ValueError(f"angle must be a finite number >= 0, got {angle!r}")
    return float(_global(dtype, n, a))


def _global(dtype, n, angle):
    return _eps(dtype) * (GLOBAL_FLOOR_EPS_PER_STEP * max(n, 1.0) + GLOBAL_FLOOR_EPS_PER_RADIAN * angle)


def turning_angle(J, Pi, span) -> np.ndarray:
    """The angle (rad) each body turns through over a span at its initial angular speed,
    ``|Pi / J| span``: one number per body (shape ``Pi.shape[:-1]``), the scale of a run's phase
    round-off in :func:`global_floor`. Torques that spin a body up are not foreseen."""
    w = np.linalg.norm(np.asarray(Pi, np.float64) / np.asarray(J, np.float64), axis=-1)
    return w * abs(float(span))


def _is_traced(x) -> bool:
    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(x))


def _raised(x, floor: float):
    """``x`` raised to ``floor`` where it is below it (0 stays 0: no term of that kind, not a tolerance),
    and whether anything was raised."""
    v = np.asarray(x, np.float64)
    low = (v > 0) & (v < floor)
    if not np.any(low):
        return x, False
    new = np.where(low, floor, v)
    if isinstance(x, jax.Array):
        return jnp.asarray(new, x.dtype), True
    if isinstance(x, np.ndarray):
        return new.astype(x.dtype), True
    return float(new), True


def warn_precision(where: str, message: str, dtype=None) -> None:
    """One :class:`PrecisionWarning`: ``"{where}: {message} (<where the floors are measured>); <how to
    get more>"`` (how to run in float64, unless ``dtype`` is float64 already), attributed to the first
    caller outside jaxrot (the user's line, however deep inside the package the check runs: a first
    call and a replayed one reach it at different depths)."""
    more = "" if dtype is not None and _eps(dtype) <= _eps(jnp.float64) else f"; {_X64_ADVICE}"
    warnings.warn(f"{where}: {message} (docs/choosing.md, 'What float32 can reach'){more}",
                  PrecisionWarning, stacklevel=_outside_package())


def warn_expected(where: str, message: str) -> None:
    """One :class:`PrecisionWarning` that a run is expected to end above the tolerance asked for a
    reason other than the floating-point type (``"{where}: {message}"``), attributed as
    :func:`warn_precision`'s."""
    warnings.warn(f"{where}: {message}", PrecisionWarning, stacklevel=_outside_package())


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _outside_package() -> int:
    """``warnings.warn``'s stacklevel, called from :func:`warn_precision`, of the first frame whose code
    lies outside the jaxrot package."""
    frame, level = sys._getframe(2), 2  # warn_precision's caller
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level


def reachable(rtol, atol, dtype, *, where: str, n_steps=None, angle: float = 0.0, then: str = "") -> tuple:
    """``(rtol, atol)`` raised to what a run in ``dtype`` can reach, with one :class:`PrecisionWarning`
    naming ``where`` where either was below it; unchanged, without a warning, otherwise.

    Args:
      rtol, atol: the run's tolerances: numbers or arrays (one per body). Values inside a trace (jax
        tracers) are returned unchanged: they cannot be compared before the run. A 0 stays 0 (no
        relative, or no absolute, term).
      dtype: the run's floating-point type (its initial state's).
      where: what the tolerances belong to, for the message (``"Adaptive(rtol=1e-08, atol=1e-08)"``).
      n_steps: for tolerances on the *global* error of a run of about ``n_steps`` steps, the floor is
        also at least :func:`global_floor` (``angle`` as there); None: per-step tolerances, the floor
        is :func:`local_floor`.
      then: what the raise means for the run, appended to the warning (``"; expect ..."``), or a
        function of the raised ``(rtol, atol)`` that returns it (called only when something was raised).

    Returns:
      ``(rtol, atol)``, each a number where a number was given, else an array of the same kind.

    Example::

        rtol, atol = reachable(1e-8, 1e-8, jnp.float32, where="Adaptive(rtol=1e-08, atol=1e-08)")
        # PrecisionWarning; rtol == atol == 3.8e-06
    """
    type_name = jnp.dtype(dtype).name
    floor = local_floor(dtype)
    what = f"the smallest tolerance a {type_name} run can meet per step ({floor:.2g} = {LOCAL_FLOOR_EPS:g} eps)"
    if n_steps is not None:
        g = global_floor(dtype, n_steps, angle=angle)
        if g > floor:
            floor = g
            what = (f"the smallest final error a {type_name} run of about {int(n_steps)} steps can count on "
                    f"({g:.2g})")
    out, low = [], []
    for name, x in (("rtol", rtol), ("atol", atol)):
        if x is None or _is_traced(x):
            out.append(x)
            continue
        new, raised = _raised(x, floor)
        out.append(new)
        if raised:
            v = np.asarray(x, np.float64)
            low.append(f"{name}={float(v):g}" if v.ndim == 0 else f"{name} (down to {float(v[v > 0].min()):g})")
    if low:
        verb = "is" if len(low) == 1 else "are"
        then = then(out[0], out[1]) if callable(then) else then
        warn_precision(where, f"{' and '.join(low)} {verb} below {what}; raised to {floor:.2g}{then}", dtype)
    return out[0], out[1]


def warn_over_span(rtol, atol, dtype, J, Pi, span, *, where: str) -> bool:
    """One :class:`PrecisionWarning` naming ``where`` if an error-controlled run's tolerances are below
    the round-off it will accumulate over ``span``: the :func:`global_floor` of one step and the angle
    each body turns through (:func:`turning_angle`). Returns whether it warned. Nothing is changed:
    the steps still meet the tolerances; the final error will be about the floor instead.

    Args:
      rtol, atol: the run's per-step tolerances (numbers, or one per body); traced values are skipped.
      dtype: the run's floating-point type.
      J, Pi: the body's principal moments and initial angular momentum (one body or a batch);
        traced values are skipped.
      span: ``t1 - t0``.
    """
    note = span_note(rtol, atol, dtype, J, Pi, span)
    if note is not None:
        warn_precision(where, note, dtype)
    return note is not None


def reachable_over_span(rtol, atol, dtype, J, Pi, span, *, where: str) -> tuple:
    """:func:`reachable` (per-step floor) then :func:`warn_over_span`, in one warning where both have
    something to say (tolerances raised to the floor and still below the span's round-off):
    ``(rtol, atol, whether anything was said)``."""
    said = []

    def then(r, a):
        said.append(span_note(r, a, dtype, J, Pi, span, subject="even so they are"))
        return "" if said[0] is None else "; " + said[0]

    rtol, atol = reachable(rtol, atol, dtype, where=where, then=then)
    return rtol, atol, bool(said) or warn_over_span(rtol, atol, dtype, J, Pi, span, where=where)


def span_note(rtol, atol, dtype, J, Pi, span, *, subject: str = "the tolerances are") -> str | None:
    """What :func:`warn_over_span` says (None: nothing to say), without saying it: for a warning that
    joins it to another (a tolerance raised to the floor and then still below the span's round-off)."""
    if any(x is None or _is_traced(x) for x in (rtol, atol, J, Pi, span)):
        return None
    return _note(rtol, atol, dtype, turning_angle(J, Pi, span),
                 subject + " below the round-off a {dtype} run accumulates turning through {turned} rad"
                 "{bodies}: expect a final error up to about {worst} (the global floor over the span; more on a "
                 "problem that amplifies perturbations, such as a body near its intermediate axis or a top falling "
                 "from near its vertical, which jaxrot.suggest measures), not the tolerance")


def _note(rtol, atol, dtype, angle, template: str) -> str | None:
    """``template`` (``{dtype}``, ``{turned}``, ``{bodies}``, ``{worst}``) filled in where the tolerances are
    below the global floor of one step and ``angle`` (per body), else None."""
    floor = _global(dtype, 1.0, angle)
    tol = np.maximum(np.asarray(rtol, np.float64), np.asarray(atol, np.float64))
    low = np.broadcast_to(tol < floor, np.broadcast_shapes(np.shape(tol), np.shape(floor)))
    if not np.any(low):
        return None
    worst = float(np.max(np.broadcast_to(floor, low.shape)[low]))
    bodies = "" if low.ndim == 0 else f" ({int(low.sum())} of {low.size} bodies)"
    turned = float(np.max(np.broadcast_to(angle, low.shape)[low]))
    return template.format(dtype=jnp.dtype(dtype).name, turned=f"{turned:.3g}", bodies=bodies, worst=f"{worst:.2g}")


def _announce(rtol, atol, dtype, angle, where: str, template: str) -> bool:
    """One warning from ``template`` (as :func:`_note`); whether it warned."""
    note = _note(rtol, atol, dtype, angle, template)
    if note is not None:
        warn_precision(where, note, dtype)
    return note is not None


def turned_angle(J, t0, Pi0, ts, Pi, t_stop=None):
    """The angle (rad) each body turned through, ``integral |Pi/J| dt`` by the trapezoid rule over ``t0``
    and the saved times: one number per body. A run that saves only its final state counts the spin at
    its two ends; with ``SaveAt(steps=k)``, up to its last saved step. Written with ``jax.numpy``, so it
    runs where the arrays are (and under ``jit``).

    Args:
      J: the principal moments, ``(3,)`` or one row per body.
      t0, Pi0: the initial time and angular momentum (``(3,)`` or ``(B, 3)``).
      ts, Pi: the saved times (``(F,)`` or ``(B, F)``) and angular momenta (``(F, 3)`` or
        ``(B, F, 3)``); non-finite entries (unused frames, a body that failed) are left out.
      t_stop: a time per body after which the saved states only repeat a terminal event's state
        (non-finite: no event); the times are capped there.
    """
    # in the run's type (a float32 run of a problem with float64 moments: no mixed types)
    J, Pi0, ts = (jnp.asarray(x, Pi.dtype) for x in (J, Pi0, ts))
    t_stop = None if t_stop is None else jnp.asarray(t_stop, Pi.dtype)
    speed = jnp.linalg.norm(Pi / (J[..., None, :] if J.ndim == 2 else J), axis=-1)  # (..., F)
    speed0 = jnp.linalg.norm(Pi0 / J, axis=-1)[..., None]
    speed = jnp.concatenate([jnp.broadcast_to(speed0, speed.shape[:-1] + (1,)), speed], axis=-1)
    ts = jnp.broadcast_to(ts, speed.shape[:-1] + (speed.shape[-1] - 1,))
    if t_stop is not None:
        ts = jnp.minimum(ts, jnp.where(jnp.isfinite(t_stop), t_stop, jnp.inf)[..., None])
    t = jnp.concatenate([jnp.full(ts.shape[:-1] + (1,), t0, ts.dtype), ts], axis=-1)
    dt = jnp.diff(t, axis=-1)
    mean = 0.5 * (speed[..., 1:] + speed[..., :-1])
    ok = jnp.isfinite(dt) & (dt > 0) & jnp.isfinite(mean)
    return jnp.sum(jnp.where(ok, mean * jnp.where(ok, dt, 0.0), 0.0), axis=-1)


def warn_turned(rtol, atol, dtype, angle, foretold, *, where: str) -> bool:
    """After an error-controlled run, one :class:`PrecisionWarning` naming ``where`` for the bodies whose
    spin grew past what the check before the run saw (``angle`` so far above ``foretold`` that the
    round-off floor is :data:`GREW` times the one foreseen, or more) and took the
    round-off over the run above its tolerances: the check of :func:`warn_over_span` with the angle the
    saved states show. Returns whether it warned.

    Args:
      rtol, atol: the run's per-step tolerances (numbers, or one per body).
      dtype: the run's floating-point type.
      angle: the angle each body turned through (:func:`turned_angle`).
      foretold: the angle the check before the run assumed (:func:`turning_angle`).
    """
    if any(x is None or _is_traced(x) for x in (rtol, atol, angle, foretold)):
        return False
    angle = np.asarray(angle, np.float64)
    # a floor a quarter above the one foreseen: a run that turned a little more than its initial spin
    # said is not announced again
    before = _global(dtype, 1.0, np.asarray(foretold, np.float64))
    grew = np.where(_global(dtype, 1.0, angle) > GREW * before, angle, 0.0)
    return _announce(rtol, atol, dtype, grew, where,
                     "the bodies turned through up to {turned} rad{bodies}, more than their initial spin foretold "
                     "(their spin grew during the run), and a {dtype} run accumulates round-off over that angle: "
                     "expect a final error up to about {worst}, not the tolerance")
