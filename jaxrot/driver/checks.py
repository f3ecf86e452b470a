"""Input checks, one set for every entry point: concrete values raise a ``ValueError``/``TypeError``
naming the argument before anything runs; traced values (under ``jit``, ``grad``, ``vmap``) are checked
with ``eqx.error_if`` carrying the same messages.

The checks of a concrete initial state or inertia are remembered by identity (JAX arrays are immutable),
so a loop of calls on the same arrays pays each check once.
"""

from __future__ import annotations

import functools
import weakref

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..geometry.body import validate_inertia, violates_triangle
from ..geometry.state import State
from ..integrators import AbstractIntegrator
from ..integrators import get as get_method
from ..physics.problems import Problem


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


def check_counts(n_steps, save_every):
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
            f"n_steps ({n_steps}) must be a multiple of save_every ({save_every}); "
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


def check_state(state: State):
    """One body (``R`` of shape (3, 3)) or a batch (one leading axis): finite, orthogonal, det > 0."""
    R, Pi = state.R, state.Pi
    lead = R.shape[:-2]
    if R.shape[-2:] != (3, 3) or Pi.shape[-1:] != (3,) or Pi.shape[:-1] != lead:
        raise ValueError(f"state must have R of shape (..., 3, 3) and Pi (..., 3); got {R.shape}, {Pi.shape}")
    if len(lead) > 1:
        raise ValueError(f"state0 takes one body (R of shape (3, 3)) or one leading batch axis; got R of shape "
                         f"{R.shape} (flatten the batch axes)")
    if R.size == 0:
        raise ValueError("empty batch: state0 has no bodies")
    if is_concrete(R) and is_concrete(Pi):
        if _checked_before((R, Pi)):
            return
        with jax.ensure_compile_time_eval():  # concrete values inside someone's trace: evaluate now
            finite, err, det_min = np.asarray(_state_defects(R, Pi)).tolist()  # one compiled pass, one transfer
            tol = _orthogonality_tol(R.dtype)
            if not finite or err > tol or det_min <= 0:
                codes = np.asarray(_state_codes(R, Pi, tol))  # only on failure: which body, which defect
                idx = tuple(int(i) for i in np.argwhere(codes > 0)[0])
                _raise_bad_state(int(codes[idx]), idx if lead else None, tol, None if lead else err)
        _remember_checked((R, Pi))


_BAD_STATE = {
    1: "initial state{where} contains NaN or inf",
    2: "initial attitude R{where} is not orthogonal (max|R^T R - 1| {err}); project it with jaxrot.so3.nearest_rotation",
    3: "initial attitude R{where} has det <= 0: it is a reflection, not a rotation",
}


def _orthogonality_tol(dtype):
    return 1e-5 if dtype == jnp.float32 else 1e-8


def _raise_bad_state(code: int, body, tol, err=None):
    """The one message for a bad initial state (host check and traced batch check alike); ``body``:
    the index of the first bad body in a batch, else None."""
    where = "" if body is None else f" of body {body[0] if len(body) == 1 else body}"
    err = f"> {tol:g}" if err is None else f"= {err:.3g} > {tol:g}"
    raise ValueError(_BAD_STATE[code].format(where=where, err=err))


@functools.partial(jax.jit, static_argnums=2)
def _state_codes(R, Pi, tol):
    """Per body: 0 good, 1 non-finite, 2 not orthogonal, 3 a reflection (the first that applies)."""
    finite, err, det = _body_defects(R, Pi)
    return jnp.where(~finite, 1, jnp.where(err > tol, 2, jnp.where(det <= 0, 3, 0)))


def _raise_bad_body(codes, tol):
    """Host callback of a traced batch check: the same ValueError, naming the first bad body."""
    codes = np.asarray(codes)
    if np.any(codes > 0):
        idx = tuple(int(i) for i in np.argwhere(codes > 0)[0])
        _raise_bad_state(int(codes[idx]), idx, tol)


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


def _body_defects(R, Pi):
    """Per body: finite, max |R^T R - 1|, det R (3x3 closed form); the one formula of both checks."""
    finite = jnp.all(jnp.isfinite(R), axis=(-1, -2)) & jnp.all(jnp.isfinite(Pi), axis=-1)
    err = jnp.max(jnp.abs(jnp.swapaxes(R, -1, -2) @ R - jnp.eye(3, dtype=R.dtype)), axis=(-1, -2))
    det = jnp.sum(R[..., 0, :] * jnp.cross(R[..., 1, :], R[..., 2, :]), axis=-1)
    return finite, err, det


def check_capability(method, problem: Problem):
    """The one check of a free-only method's capability (a class fact), before anything is traced."""
    if not getattr(method, "torque", True) and not problem.torque.is_free:
        raise ValueError(f"{type(method).__name__} is for torque-free problems (no torque; it declares "
                         f"torque = False); use a torque-capable method (e.g. liemid_ea or buss4) for "
                         f"{type(problem.torque).__name__}")


def check_problem(problem: Problem):
    if not isinstance(problem, Problem):
        raise TypeError(f"problem must be a jaxrot Problem, got {type(problem).__name__}")
    J = problem.body.J
    physical = bool(problem.body.physical)
    if is_concrete(J) and not _checked_before((J,), physical):
        validate_inertia(J, physical)
        _remember_checked((J,), physical)


def traced_checks(problem: Problem, state0: State, dt, t0):
    """``eqx.error_if`` versions of the host checks, for values that are traced (under ``jit``,
    ``grad`` or ``vmap``), with the same messages; works for one body or a leading batch axis."""
    J = problem.body.J
    if not is_concrete(J):
        bad = jnp.any(J <= 0) | ~jnp.all(jnp.isfinite(J))
        if problem.body.physical:
            bad = bad | jnp.any(violates_triangle(J))
        J = eqx.error_if(J, bad, "principal moments J must be finite, positive and satisfy J_i <= J_j + J_k")
        problem = eqx.tree_at(lambda p: p.body.J, problem, J)
    if not is_concrete(dt):
        dt = eqx.error_if(dt, ~(jnp.isfinite(dt) & (dt > 0)), "dt must be finite and > 0")
    R, Pi = state0.R, state0.Pi
    if not is_concrete(t0):  # on Pi, which every output depends on (a free body's states do not on t0)
        Pi = eqx.error_if(Pi, ~jnp.isfinite(t0), "t0 must be a finite scalar")
        state0 = State(R, Pi)
    if (not is_concrete(Pi) or not is_concrete(R)) and R.ndim == 3:
        # a batch: a host callback names the first bad body (eqx.error_if's message is fixed)
        tol = _orthogonality_tol(R.dtype)
        jax.debug.callback(functools.partial(_raise_bad_body, tol=tol), _state_codes(R, Pi, tol))
    elif not is_concrete(Pi) or not is_concrete(R):
        finite, orth, det_min = _state_defects(R, Pi)  # the host check's computation, staged
        finite = finite > 0
        tol = _orthogonality_tol(R.dtype)
        msg = {c: m.format(where="", err=f"> {tol:g}") for c, m in _BAD_STATE.items()}
        Pi = eqx.error_if(Pi, ~finite, msg[1])
        R = eqx.error_if(R, finite & (orth > tol), msg[2])
        R = eqx.error_if(R, finite & (det_min <= 0), msg[3])
        state0 = State(R, Pi)
    return problem, state0, dt, t0


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
def _scalar_of_float(x: float, dtype) -> jax.Array:
    with jax.ensure_compile_time_eval():  # concrete even when first made inside someone's trace
        return jnp.asarray(x, dtype)


def scalar(x, dtype):
    """``jnp.asarray(x, dtype)``; a Python float's device array is reused (arrays are immutable;
    creating one is a noticeable part of a small simulate call)."""
    if type(x) in (float, int):
        return _scalar_of_float(x, jnp.dtype(dtype))
    return jnp.asarray(x, dtype)


def prepare(method, problem, state0, dt, t0, n_steps, save_every):
    """Every host check of a fixed-step run; returns ``(method, state0, dt, t0, system)`` with ``dt``,
    ``t0`` and the system in the dtype of the initial state."""
    method = resolve_method(method)
    check_problem(problem)
    check_capability(method, problem)
    check_counts(n_steps, save_every)
    check_dt(dt)
    state0 = problem.state0 if state0 is None else state0
    if not isinstance(state0, State):
        raise TypeError(f"state0 must be a jaxrot State, got {type(state0).__name__}")
    check_state(state0)
    check_t0(t0)
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


