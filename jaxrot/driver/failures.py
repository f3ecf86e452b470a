"""Failures: why a run stopped being trustworthy (:class:`RESULTS`), and how it is reported.

A step whose nonlinear solve fails, whose state becomes non-finite or whose invariants drift past an
:class:`~jaxrot.driver.loop.InvariantMonitor` marks its body: the first failed step (1-based, -1 for
none) and its reason travel through the time loop as integers and reach the
:class:`~jaxrot.Trajectory` as ``failed_step`` and ``result`` (a :class:`RESULTS` item, per body).
With ``throw=True`` the first failure raises :class:`SimulationError` naming the step, the body and
the reason — at once for a plain call, from a host callback inside someone's ``jit``.
"""

from __future__ import annotations

import contextlib
import functools
import re

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .sharding import gather


class RESULTS(eqx.Enumeration):
    """Why a trajectory stopped being trustworthy: the reason of its first failed step, per body.

    Compare items with ``==`` (``traj.result == jaxrot.RESULTS.successful``); ``RESULTS[item]`` is
    the message.
    """

    successful = ""
    solve_failed = "its nonlinear solve did not converge"
    nonfinite_state = "the state became non-finite"
    invariant_drift = "an invariant drifted beyond the monitor's tolerance"
    max_steps_reached = "the adaptive controller used up max_steps before the end of the span"


#: the members in code order (the loop carries the integer code of an item)
MEMBERS = tuple(sorted(RESULTS._name_to_item.items(), key=lambda kv: int(kv[1]._value)))
SUCCESSFUL = int(RESULTS.successful._value)
SOLVE_FAILED = int(RESULTS.solve_failed._value)
NONFINITE_STATE = int(RESULTS.nonfinite_state._value)
INVARIANT_DRIFT = int(RESULTS.invariant_drift._value)
MAX_STEPS_REACHED = int(RESULTS.max_steps_reached._value)


def result_of(codes) -> RESULTS:
    """The :class:`RESULTS` item holding integer ``codes`` (any shape: one per body of a batch)."""
    return eqx.tree_at(lambda r: r._value, RESULTS.successful, jnp.asarray(codes, jnp.int32))


def codes_of(result) -> jax.Array:
    """The integer codes of a :class:`RESULTS` item (or of integer codes)."""
    return getattr(result, "_value", result)


def name_of(code: int) -> str:
    """The member name of an integer code (``"solve_failed"``)."""
    return MEMBERS[int(code)][0]


def item_of(code: int) -> RESULTS:
    """The :class:`RESULTS` member of an integer code."""
    return MEMBERS[int(code)][1]


class SimulationError(RuntimeError):
    """A step's solve did not converge, the state became non-finite or an invariant drifted.

    ``step`` is the first failed step (1-based), ``body`` its index in a batch (None for one body)
    and ``reason`` a :class:`RESULTS` member.
    """

    def __init__(self, message: str, step: int | None = None, body: tuple | None = None, reason=None):
        super().__init__(message)
        self.step, self.body, self.reason = step, body, reason


_ADVICE = ("Reduce dt, use a safeguarded method (e.g. AdaptiveKantorovich), or pass throw=False to get the "
           "flags.")


def failure_error(failed: np.ndarray, result, where: str = "") -> SimulationError | None:
    """The :class:`SimulationError` for per-body first-failed steps ``failed`` (-1: none), or None."""
    f = np.asarray(failed)
    if not np.any(f >= 0):
        return None
    idx = np.argwhere(f >= 0)[0]
    step = int(f[tuple(idx)])
    body = tuple(int(i) for i in idx) if f.ndim else None
    code = int(np.asarray(codes_of(result))[tuple(idx)]) if result is not None else SOLVE_FAILED
    name = name_of(code)
    n_bad = int(np.sum(f >= 0))
    at = "" if body is None else f" (body {body}" + (f", and {n_bad - 1} more" if n_bad > 1 else "") + ")"
    return SimulationError(f"{where}step {step}{at} failed: {RESULTS[item_of(code)]} ({name}). {_ADVICE}",
                           step=step, body=body, reason=item_of(code))


#: the message of :func:`failure_error`, read back (a traced failure reaches the caller as text)
_MESSAGE = re.compile(r"step (?P<step>\d+)(?: \(body \((?P<body>[\d, ]+)\)[^)]*\))? failed: .*? \((?P<name>\w+)\)\. ")


def _raise_traced(failed, result, where):
    """Host callback of a traced run: raise the same :class:`SimulationError` as a plain call."""
    err = failure_error(np.asarray(failed), None if result is None else np.asarray(result), where)
    if err is not None:
        raise err


def raise_failures(failed, result, where: str = "") -> None:
    """Raise the :class:`SimulationError` of the first failed step, if any: at once for concrete
    flags, from a host callback when the run is traced (under jit/grad/vmap; same message)."""
    codes = None if result is None else codes_of(result)
    if not isinstance(failed, jax.core.Tracer):
        # every process sees every body's flag (a collective under jax.distributed)
        err = failure_error(gather(failed), None if codes is None else gather(codes), where)
        if err is not None:
            raise err
    else:
        jax.debug.callback(functools.partial(_raise_traced, where=where), failed, codes)


@contextlib.contextmanager
def simulation_errors():
    """Re-raise a failed step detected inside ``jax.jit`` (which JAX reports as its own runtime
    error, with the message inside) as a :class:`SimulationError` with ``.step``, ``.body`` and
    ``.reason``, read back from the message.

    Example::

        with jaxrot.simulation_errors():
            jax.jit(lambda s: jaxrot.simulate("liemid_ea", p, 0.5, 10, state0=s).final)(s0)
    """
    try:
        yield
    except jax.errors.JaxRuntimeError as e:
        m = _MESSAGE.search(str(e))
        if m is None or m["name"] not in RESULTS._name_to_item:
            raise
        body = tuple(int(i) for i in m["body"].replace(" ", "").split(",") if i) if m["body"] else None
        text = str(e)
        line = text[text.rfind("\n", 0, m.start()) + 1:].split("\n", 1)[0]
        message = line.split("SimulationError: ", 1)[-1]
        raise SimulationError(message, step=int(m["step"]), body=body,
                              reason=RESULTS._name_to_item[m["name"]]) from e
