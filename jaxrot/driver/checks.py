"""Input checks, one set for every entry point, with one message per defect.

* Everything known while tracing — shapes, dtypes, static fields, Python numbers, concrete arrays
  (also when closed over inside someone's ``jit``) — is checked at once: a ``ValueError``/``TypeError``
  naming the argument before anything runs.
* Traced values (:func:`traced_checks`, :func:`run_time_check`) get the same checks and messages.
  Under ``vmap`` or ``grad`` without ``jit`` their values are known underneath, so a bad one raises
  the same ``ValueError`` at once (under ``vmap`` naming the body by its index along the vmapped
  axes). Under ``jit`` the check runs with the program: a host callback raises the ``ValueError``,
  which JAX reports as its own error with the message inside (a ``jax.errors.JaxRuntimeError``, or
  a ``ValueError`` when a compiled function is called again through JAX's fast path); inside
  ``with jaxrot.simulation_errors():`` it is re-raised as the plain ``ValueError``.

The checks of a concrete initial state or inertia are remembered by identity (JAX arrays are
immutable), so a loop of calls on the same arrays pays each check once."""

from __future__ import annotations

import functools
import math
import os
import weakref
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from equinox.internal import unvmap_any
from jax import lax

from ..geometry.body import inertia_message, tensor_message, validate_inertia, violates_triangle
from ..geometry.state import State
from ..integrators import AbstractIntegrator
from ..integrators import get as get_method
from ..physics.problems import Problem
from ..errors import from_host, host_error_in, run_time_check


def is_concrete(x) -> bool:
    return not isinstance(x, jax.core.Tracer)


@functools.lru_cache(maxsize=None)
def _method_named(name: str) -> AbstractIntegrator:
    return get_method(name)  # integrators are immutable: one instance per name serves every call


def resolve_method(method) -> AbstractIntegrator:
    if isinstance(method, str):
        return _method_named(method)
    if not isinstance(method, AbstractIntegrator):
        raise TypeError(f"method must be a registered name or an AbstractIntegrator, got {method!r}")
    return method


def check_counts(n_steps, save_every, spelling="save_every={}"):
    """``spelling``: how the caller's user wrote the frame interval (``"SaveAt(steps={})"`` in simulate)."""
    if isinstance(n_steps, bool) or not isinstance(n_steps, (int, np.integer)):
        raise TypeError(f"n_steps must be an int, got {n_steps!r}")
    if isinstance(save_every, bool) or not isinstance(save_every, (int, np.integer)):
        raise TypeError(f"save_every must be an int, got {save_every!r}")
    if n_steps < 1:
        raise ValueError(f"n_steps must be >= 1, got {n_steps}")
    if save_every < 1:
        raise ValueError(f"save_every must be >= 1, got {save_every}")
    if n_steps % save_every:
        raise ValueError(
            f"n_steps ({n_steps}) must be a multiple of the steps between frames ({spelling.format(save_every)}); "
            f"e.g. n_steps={n_steps - n_steps % save_every or save_every}"
        )


def check_dt(dt):
    if isinstance(dt, (str, bytes)) or (is_concrete(dt) and not np.issubdtype(np.asarray(dt).dtype, np.number)):
        raise TypeError(f"dt must be a number, got {type(dt).__name__} {dt!r}")
    if jnp.ndim(dt) != 0:  # shapes are static: checked for traced values too
        raise ValueError(f"dt must be a scalar, got shape {jnp.shape(dt)}")
    if is_concrete(dt):
        d = np.asarray(dt)
        if not np.isfinite(d) or d <= 0:
            raise ValueError(f"dt must be finite and > 0, got {dt}")


def check_t0(t0):
    if jnp.ndim(t0) != 0 or (is_concrete(t0) and not np.isfinite(np.asarray(t0, np.float64))):
        raise ValueError(f"t0 must be a finite scalar, got {t0!r}")


def check_state(state: State, values: bool = True):
    """One body (``R`` of shape (3, 3)) or a batch (one leading axis): finite, orthogonal, det > 0
    (``values=False``: shapes and types only, the values left to :func:`invalid_inputs`)."""
    R, Pi = state.R, state.Pi
    lead = R.shape[:-2]
    if R.shape[-2:] != (3, 3) or Pi.shape[-1:] != (3,) or Pi.shape[:-1] != lead:
        raise ValueError(f"state must have R of shape (..., 3, 3) and Pi (..., 3); got {R.shape}, {Pi.shape}")
    if len(lead) > 1:
        raise ValueError(f"state0 takes one body (R of shape (3, 3)) or one leading batch axis; got R of shape "
                         f"{R.shape} (flatten the batch axes)")
    for name, x in (("R", R), ("Pi", Pi)):  # dtypes are static: checked for traced values too
        if not jnp.issubdtype(x.dtype, jnp.floating):
            raise TypeError(f"state0.{name} must be a floating-point array, got {x.dtype} (pass floats, e.g. "
                            f"jnp.asarray({name}, float))")
    if R.size == 0:
        raise ValueError("empty batch: state0 has no bodies")
    if values and is_concrete(R) and is_concrete(Pi):
        if _checked_before((R, Pi)):
            return
        with jax.ensure_compile_time_eval():  # concrete values inside someone's trace: evaluate now
            finite, err, det_min = np.asarray(_state_defects(R, Pi)).tolist()  # one compiled pass, one transfer
            tol = _orthogonality_tol(R.dtype)
            if not finite or err > tol or det_min <= 0:  # only on failure: which body, which defect
                code = 1 if not finite else 2 if err > tol else 3  # the device's, should the host round otherwise
                raise ValueError(state_message(np.asarray(R), np.asarray(Pi), tol)
                                 or _BAD_STATE[code].format(where="", err=err, tol=tol))
        _remember_checked((R, Pi))


_BAD_STATE = {
    1: "initial state{where} contains NaN or inf",
    2: "initial attitude R{where} is not orthogonal (max|R^T R - 1| = {err:.3g} > {tol:g}); project it with "
       "jaxrot.so3.nearest_rotation",
    3: "initial attitude R{where} has det <= 0: it is a reflection, not a rotation",
}


def _orthogonality_tol(dtype):
    return 1e-5 if dtype == jnp.float32 else 1e-8


def state_message(R: np.ndarray, Pi: np.ndarray, tol: float) -> str | None:
    """What is wrong with an initial state (NumPy arrays, any leading batch axes), or None: the one
    message of the host check and of the traced check's callback; a batch names the first bad body."""
    lead = np.broadcast_shapes(R.shape[:-2], Pi.shape[:-1])
    R, Pi = np.broadcast_to(R, lead + (3, 3)), np.broadcast_to(Pi, lead + (3,))
    with np.errstate(invalid="ignore", over="ignore"):
        finite, err, det = _body_defects(R, Pi, np)
    codes = np.where(~finite, 1, np.where(err > tol, 2, np.where(det <= 0, 3, 0)))
    if not np.any(codes > 0):
        return None
    idx = tuple(int(i) for i in np.argwhere(codes > 0)[0])
    where = "" if not idx else f" of body {idx[0] if len(idx) == 1 else idx}"
    return _BAD_STATE[int(codes[idx])].format(where=where, err=float(err[idx]), tol=tol)


#: the last inputs that passed the value checks, as ((weakrefs to arrays), static extra): JAX arrays
#: are immutable, so an initial state (R, Pi) or moments (J, physical) seen before need no new pass
#: (a loop of calls pays each check once)
_CHECKED: list = []


def _checked_before(arrays: tuple, extra=None) -> bool:
    return any(e == extra and all(r() is a for r, a in zip(refs, arrays)) for refs, e in _CHECKED
               if len(refs) == len(arrays))


def _remember_checked(arrays: tuple, extra=None):
    if all(isinstance(a, jax.Array) for a in arrays):  # NumPy arrays are mutable: never cached
        _CHECKED.insert(0, (tuple(weakref.ref(a) for a in arrays), extra))
        del _CHECKED[16:]


@jax.jit
def _state_defects(R, Pi):
    """(all finite, max |R^T R - 1|, min det R) over any batch, on the device."""
    finite, err, det = _body_defects(R, Pi)
    return jnp.stack([jnp.all(finite).astype(R.dtype), jnp.max(err), jnp.min(det)])


def _body_defects(R, Pi, xp=jnp):
    """Per body: finite, max |R^T R - 1|, det R (3x3 closed form); the one formula of every check
    (``xp``: ``numpy`` on the host, in a callback that must not run JAX)."""
    finite = xp.all(xp.isfinite(R), axis=(-1, -2)) & xp.all(xp.isfinite(Pi), axis=-1)
    # (NumPy's identity: a constant, where jnp.eye would be computed apart under ensure_compile_time_eval)
    err = xp.max(xp.abs(xp.swapaxes(R, -1, -2) @ R - np.eye(3, dtype=R.dtype)), axis=(-1, -2))
    det = xp.sum(R[..., 0, :] * xp.cross(R[..., 1, :], R[..., 2, :]), axis=-1)
    return finite, err, det


def check_capability(method, problem: Problem):
    """The one check of a free-only method's capability (a class fact), before anything is traced."""
    if not getattr(method, "torque", True) and not problem.torque.is_free:
        raise ValueError(f"{type(method).__name__} is for torque-free problems (no torque; it declares "
                         f"torque = False); use a torque-capable method (e.g. liemid_ea or buss4) for "
                         f"{type(problem.torque).__name__}")


def check_problem(problem: Problem, values: bool = True):
    """A :class:`~jaxrot.Problem` whose moments have shape (..., 3); their values too, where concrete,
    unless ``values=False`` (left to :func:`invalid_inputs`)."""
    if not isinstance(problem, Problem):
        raise TypeError(f"problem must be a jaxrot Problem, got {type(problem).__name__}")
    J = problem.body.J
    physical = bool(problem.body.physical)
    if jnp.shape(J)[-1:] != (3,):  # shapes are static: checked for traced values too
        raise ValueError(f"principal moments J must have shape (..., 3), got {jnp.shape(J)}")
    if values and is_concrete(J) and not _checked_before((J,), physical):
        validate_inertia(J, physical)
        _remember_checked((J,), physical)


def traced_checks(problem: Problem, state0: State, dt, t0):
    """The host checks of the values that are traced (under ``jit``, ``grad`` or ``vmap``), with the
    plain call's messages (:func:`run_time_check`); works for one body or a leading batch axis.

    Under ``vmap`` or ``grad`` without ``jit`` the values are known: a bad one raises the plain
    ``ValueError`` at once, naming the body by its index along the vmapped axes. Under ``jit`` the
    check runs with the program and JAX reports its ``ValueError`` as a ``JaxRuntimeError`` (the
    message inside); ``jaxrot.simulation_errors()`` re-raises it as the ``ValueError``."""
    J, R, Pi = problem.body.J, state0.R, state0.Pi
    traced_J, traced_dt, traced_t0 = not is_concrete(J), not is_concrete(dt), not is_concrete(t0)
    traced_state = not (is_concrete(R) and is_concrete(Pi))
    if not (traced_J or traced_dt or traced_t0 or traced_state):
        return problem, state0, dt, t0
    physical, tol = bool(problem.body.physical), _orthogonality_tol(R.dtype)
    bad = _any_bad(J if traced_J else None, dt if traced_dt else None, (R, Pi) if traced_state else None,
                   t0 if traced_t0 else None, physical)
    # checked values travel through the check (a later use waits for it); only traced ones, so that
    # concrete values stay concrete for the trace-time decisions downstream. A traced t0 alone is
    # attached to Pi, which every output depends on (a free body's states do not depend on t0).
    x = (J if traced_J else None, R if traced_state else None,
         Pi if traced_state or not (traced_J or traced_dt) else None, dt if traced_dt else None)
    values = (J if traced_J else None, dt if traced_dt else None, (R, Pi) if traced_state else None,
              t0 if traced_t0 else None)
    J2, R2, Pi2, dt2 = run_time_check(x, bad, functools.partial(_inputs_message, physical, tol), values)
    if J2 is not None:
        problem = eqx.tree_at(lambda p: p.body.J, problem, J2)
    state0 = State(R if R2 is None else R2, Pi if Pi2 is None else Pi2)
    return problem, state0, dt if dt2 is None else dt2, t0


@functools.partial(jax.jit, static_argnums=4)
def _any_bad(J, dt, state, t0, physical: bool):
    """Whether any of the values given (None: not checked) is bad, as one compiled program (under
    ``grad``/``vmap`` without ``jit`` each operation would otherwise compile on its own)."""
    checks = [(J, lambda x: _bad_moments(x, physical)), (dt, _bad_dt), (state, lambda s: _bad_state(*s)), (t0, _bad_t0)]
    return functools.reduce(jnp.logical_or, [jnp.any(f(x)) for x, f in checks if x is not None])


def _bad_moments(J, physical):
    """Per body: moments not finite and > 0, or (``physical``) breaking the triangle inequality."""
    bad = ~jnp.all(jnp.isfinite(J) & (J > 0), axis=-1)
    return bad | violates_triangle(J) if physical else bad


def _bad_state(R, Pi):
    """Per body: an initial state not finite, or an attitude not a rotation."""
    finite, err, det = _body_defects(R, Pi)
    return ~finite | (err > _orthogonality_tol(R.dtype)) | (det <= 0)


def _bad_dt(dt):
    return ~(jnp.isfinite(dt) & (dt > 0))


def _bad_t0(t0):
    return ~jnp.isfinite(t0)


def _inputs_message(physical, tol, J, dt, state, t0) -> str | None:
    """The plain call's message for the first bad one of the traced inputs (NumPy arrays; None: not
    traced), in the order of the host checks."""
    message = None
    if J is not None:
        message = inertia_message(J, physical)
    if message is None and dt is not None:
        message = _number_message("dt", dt, "must be finite and > 0", lambda d: np.isfinite(d) & (d > 0))
    if message is None and state is not None:
        message = state_message(*state, tol)
    if message is None and t0 is not None:
        message = _number_message("t0", t0, "must be a finite scalar", np.isfinite)
    return message


def _number_message(name, x, must, ok) -> str | None:
    """``"dt must be finite and > 0, got 0.0"``; with leading (vmapped) axes, naming the first bad body."""
    good = ok(x)
    if np.all(good):
        return None
    idx = tuple(int(i) for i in np.argwhere(~good)[0]) if x.ndim else ()
    where = "" if not idx else f" of body {idx[0] if len(idx) == 1 else idx}"
    return f"{name}{where} {must}, got {x[idx]}"


class Invalid(NamedTuple):
    """Which bodies of a run had invalid inputs (:func:`invalid_inputs`): ``bodies``, a boolean per body
    (shape () for one body, (n,) for a batch); ``times``, whether the step or the start time was (every
    body then)."""

    bodies: jax.Array
    times: jax.Array


#: the inputs an invalid body runs with instead (its outputs are set to NaN afterwards): a sphere
#: turning slowly, at rest at the identity, stepped by a small step from t = 0. Finite and valid for
#: every method, so the run and its gradients stay finite
_STAND_IN_J, _STAND_IN_PI, _STAND_IN_DT = 1.0, 0.1, 1e-3


def invalid_inputs(system, state0: State, dt, t0):
    """``simulate(..., on_invalid="nan")``: the checks of :func:`traced_checks` as a mask per body,
    for concrete and traced values alike, and the inputs with each invalid body's replaced by a valid
    stand-in. Returns ``(system, state0, dt, t0, Invalid)``; a concrete input stays concrete (and the
    same object where nothing in it is invalid), for the trace-time decisions downstream.

    The replacement is a ``where`` on the inputs (and :func:`~jaxrot.driver.results.invalid_marked`
    one on the outputs): the run of an invalid body is finite, the cotangent that reaches its inputs
    is zero, and no NaN enters the gradients of the valid bodies of a batch, whatever a loss makes of
    the invalid body's NaN outputs."""
    J, R, Pi = system.body.J, state0.R, state0.Pi
    dtype, physical = R.dtype, system.body.physical
    bad_J, (J,) = _stand_in(lambda J: _bad_moments(J, physical), (J,),
                            lambda b: (jnp.where(b[..., None], jnp.asarray(_STAND_IN_J, J.dtype), J),))
    bad_s, (R, Pi) = _stand_in(_bad_state, (R, Pi), lambda b: (
        jnp.where(b[..., None, None], jnp.eye(3, dtype=dtype), R),
        jnp.where(b[..., None], jnp.asarray(_STAND_IN_PI, dtype), Pi)))
    bad_dt, (dt,) = _stand_in(_bad_dt, (dt,), lambda b: (jnp.where(b, jnp.asarray(_STAND_IN_DT, dt.dtype), dt),))
    bad_t0, (t0,) = _stand_in(_bad_t0, (t0,), lambda b: (jnp.where(b, jnp.zeros((), t0.dtype), t0),))
    with jax.ensure_compile_time_eval():  # concrete masks stay concrete
        times = bad_dt | bad_t0
        bodies = bad_J | bad_s | times
    if J is not system.body.J:
        system = eqx.tree_at(lambda s: s.body.J, system, J)
    if R is not state0.R or Pi is not state0.Pi:
        state0 = State(R, Pi)
    return system, state0, dt, t0, Invalid(bodies, times)


def _stand_in(bad_of, xs: tuple, replaced):
    """``(bad, xs)``: the mask ``bad_of(*xs)`` and ``replaced(bad)`` where any is bad; concrete inputs are
    checked and replaced at once (and returned as they are when none is bad), traced ones in the program."""
    if all(is_concrete(x) for x in xs):
        with jax.ensure_compile_time_eval():  # concrete inside someone's trace too
            bad = bad_of(*xs)
            return (bad, replaced(bad)) if bool(jnp.any(bad)) else (bad, xs)
    bad = bad_of(*xs)
    return bad, replaced(bad)


def cast(tree, dtype):
    """``tree`` (a Problem, State, RigidBody, ...) with every floating-point array leaf cast to ``dtype``.

    ``simulate`` runs in the dtype of the initial state and casts the problem's data to it, so
    ``simulate(m, cast(problem, jnp.float32), ...)`` is a float32 run.
    """
    def one(x):
        if isinstance(x, (jax.Array, np.ndarray)) and jnp.issubdtype(x.dtype, jnp.floating) and x.dtype != dtype:
            return jnp.asarray(x, dtype)
        return x

    return jax.tree_util.tree_map(one, tree)


@functools.lru_cache(maxsize=64)
def _scalar_of_float(x: float, dtype, sign: float) -> jax.Array:
    with jax.ensure_compile_time_eval():  # concrete even when first made inside someone's trace
        return jnp.asarray(x, dtype)


def scalar(x, dtype):
    """``jnp.asarray(x, dtype)``; a Python float's device array is reused (arrays are immutable;
    creating one is a noticeable part of a small simulate call)."""
    if type(x) in (float, int):
        # the sign in the key too: -0.0 == 0.0 would share an entry (a time's sign shows in the frames)
        return _scalar_of_float(x, jnp.dtype(dtype), math.copysign(1.0, x))
    return jnp.asarray(x, dtype)


def checked_state0(problem, state0, t0, values: bool = True) -> State:
    """The run's initial state (``problem.state0`` for None), checked (its values unless ``values=False``),
    and ``t0`` checked."""
    state0 = problem.state0 if state0 is None else state0
    if not isinstance(state0, State):
        raise TypeError(f"state0 must be a jaxrot State, got {type(state0).__name__}")
    check_state(state0, values)
    check_bodies(problem.body.J, state0)
    check_t0(t0)
    return state0


def check_bodies(J, state0: State) -> None:
    """Moments of several bodies (``J`` of shape (n, 3)) go with one initial state per body (shapes are
    static: checked for traced values too). A 3x3 ``J`` beside one body is an inertia tensor given
    where the principal moments are expected, and is named as such."""
    shape, lead = jnp.shape(J), state0.R.shape[:-2]
    if len(shape) != 2 or shape[0] == 1 or lead == shape[:1]:
        return
    if shape == (3, 3) and not lead:
        raise ValueError(tensor_message("", "moments of 3 bodies need 3 initial states (state0 with a leading axis "
                                            "of 3)"))
    given = "one body" if not lead else f"a batch of {lead[0]}"
    raise ValueError(f"problem.body.J holds the moments of {shape[0]} bodies (shape {shape}) but state0 is {given} "
                     f"(R of shape {state0.R.shape}): give one initial state per body (a leading axis of {shape[0]})")


def prepare(method, problem, state0, dt, t0, n_steps, save_every, spelling="save_every={}", values: bool = True):
    """Every host check of a fixed-step run; returns ``(method, state0, dt, t0, system)`` with ``dt``,
    ``t0`` and the system in the dtype of the initial state. ``values=False``: the moments' and the
    initial state's values are left to :func:`invalid_inputs` (a concrete ``dt`` and ``t0`` are
    checked all the same)."""
    method = resolve_method(method)
    check_problem(problem, values)
    check_capability(method, problem)
    check_counts(n_steps, save_every, spelling)
    check_dt(dt)
    state0 = checked_state0(problem, state0, t0, values)
    dtype = state0.R.dtype
    if state0.Pi.dtype != dtype:
        raise TypeError(f"state0.R is {dtype} but state0.Pi is {state0.Pi.dtype}; pass both in one dtype "
                        "(jaxrot.cast(state0, dtype))")
    dt, t0 = scalar(dt, dtype), scalar(t0, dtype)
    return method, state0, dt, t0, system_of(problem, dtype)  # the run's dtype is the state's; the scenario stays out


#: (problem, dtype, its system cast to dtype), most recent first: a loop of calls on one problem
#: builds and casts its System once
_SYSTEMS: list = []


def system_of(problem: Problem, dtype):
    for p, d, system in _SYSTEMS:
        if p is problem and d == dtype:
            return system
    system = cast(problem.system, dtype)
    leaves = jax.tree_util.tree_leaves((problem.body, problem.torque))
    if not any(isinstance(x, np.ndarray) or not is_concrete(x) for x in leaves):  # NumPy is mutable, tracers local
        _SYSTEMS.insert(0, (problem, dtype, system))
        del _SYSTEMS[8:]
    return system


def checked_traced_times(ts, t0, t1):
    """Save times ``ts`` traced by someone's ``jit`` (1-D, in the run's type), checked as the run starts
    (:func:`~jaxrot.errors.run_time_check`): finite, not decreasing (a time may repeat), none before
    ``t0`` nor after ``t1`` (None: no end given) beyond round-off; a ``ValueError`` as for concrete
    times otherwise. Returns ``ts``."""
    t0 = jnp.asarray(t0, ts.dtype)
    slack = 1e-12 * jnp.maximum(1.0, jnp.abs(t0))
    bad = ~jnp.all(jnp.isfinite(ts)) | jnp.any(jnp.diff(ts) < 0) | (ts[0] < t0 - slack)
    if t1 is not None:
        end = jnp.asarray(t1, ts.dtype)
        bad = bad | (ts[-1] > end + 1e-12 * jnp.maximum(1.0, jnp.abs(end)))

    def message(times, start, end):  # (under vmap the values come batched)
        end = np.asarray(end)
        return (f"the save times must be finite, not decreasing and within the span [{start}, "
                f"{'...' if np.all(np.isnan(end)) else end}], got {np.asarray(times)}")

    return run_time_check(ts, bad, message, (ts, t0, jnp.asarray(jnp.nan if t1 is None else t1, ts.dtype)))

