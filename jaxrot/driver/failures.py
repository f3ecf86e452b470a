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

from ..errors import from_host, host_error_in
from .sharding import gather


class RESULTS(eqx.Enumeration):
    """Why a trajectory stopped being trustworthy: the reason of its first failed step, per body.

    Compare items with ``==`` (``traj.result == jaxrot.RESULTS.successful``); ``RESULTS[item]`` is
    the message. An item prints as its name (``RESULTS.solve_failed``), a batch's as its counts per
    member (``RESULTS per body (3 bodies): 2 successful, 1 solve_failed``).
    """

    successful = ""
    solve_failed = "its nonlinear solve did not converge"
    nonfinite_state = "the state became non-finite"
    invariant_drift = "an invariant drifted beyond the monitor's tolerance"
    max_steps_reached = "the adaptive controller used up max_steps before the end of the span"
    invalid_input = ("an input was invalid (non-finite or non-physical moments, a non-finite or improper initial "
                     "state, a step that is not finite and > 0, a non-finite t0): its outputs are NaN "
                     "(simulate(..., on_invalid=\"nan\"))")


class _Item(type(RESULTS.successful)):  # equinox's item class (not exported by name)
    """A :class:`RESULTS` item that prints as its member's name (``RESULTS.successful``; equinox
    prints the message, empty for success), and a per-body item as its counts per member."""

    def __repr__(self) -> str:
        value = self._value
        if isinstance(value, jax.core.Tracer):
            return f"RESULTS<traced, shape {value.shape}>"
        try:
            codes = np.asarray(value)
            valid = np.issubdtype(codes.dtype, np.integer) and np.all((codes >= 0) & (codes < len(MEMBERS)))
        except (TypeError, ValueError):
            valid = False
        if not valid:  # a placeholder leaf (tree utilities, eval_shape) or not a code
            return f"RESULTS<{value!r}>"
        if codes.ndim == 0:
            return f"RESULTS.{name_of(codes)}"
        counts = np.bincount(codes.reshape(-1), minlength=len(MEMBERS))
        listed = ", ".join(f"{n} {name}" for n, (name, _) in zip(counts, MEMBERS) if n)
        bodies = codes.size if codes.ndim == 1 else "x".join(map(str, codes.shape))
        return f"RESULTS per body ({bodies} bodies): {listed}"

    __str__ = __repr__


for _name, _item in list(RESULTS._name_to_item.items()):
    RESULTS._name_to_item[_name] = _Item(_item._value, RESULTS)

#: the members in code order (the loop carries the integer code of an item)
MEMBERS = tuple(sorted(RESULTS._name_to_item.items(), key=lambda kv: int(kv[1]._value)))
SUCCESSFUL = int(RESULTS.successful._value)
SOLVE_FAILED = int(RESULTS.solve_failed._value)
NONFINITE_STATE = int(RESULTS.nonfinite_state._value)
INVARIANT_DRIFT = int(RESULTS.invariant_drift._value)
MAX_STEPS_REACHED = int(RESULTS.max_steps_reached._value)
INVALID_INPUT = int(RESULTS.invalid_input._value)


#: the structure of a RESULTS item, whose one leaf is its integer code(s)
_ITEM_TREEDEF = jax.tree_util.tree_structure(RESULTS.successful)


def result_of(codes) -> RESULTS:
    """The :class:`RESULTS` item holding integer ``codes`` (any shape: one per body of a batch)."""
    if not (isinstance(codes, jax.Array) and codes.dtype == jnp.int32):  # the loop's codes are already
        codes = jnp.asarray(codes, jnp.int32)
    return jax.tree_util.tree_unflatten(_ITEM_TREEDEF, [codes])


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


_MAX_STEPS = "Raise jaxrot.Adaptive(max_steps=...) or loosen rtol/atol"
#: added for a run that is not float64 (or whose type is not known)
_MAX_STEPS_FLOAT32 = ("; float32 resolves relative errors of about 1e-6 at best, so a tighter tolerance cannot be "
                      "met in float32 (enable float64: jax.config.update(\"jax_enable_x64\", True))")
#: what to do about a failure, by reason, for fixed steps and for an error-controlled (adaptive) run;
#: one line each (simulation_errors() reads the message back line by line)
_ADVICE = {
    "solve_failed": (
        "The implicit method's solve needs a smaller step: reduce dt, or wrap the method in "
        "jaxrot.integrators.AdaptiveKantorovich(method), which sub-steps where the solve would not converge",
        "The implicit method's solve needs a smaller step: tighten rtol/atol, or wrap the methods in "
        "jaxrot.integrators.AdaptiveKantorovich(method)"),
    "nonfinite_state": (
        "The step is too large for the motion: reduce dt",
        "The steps are too large for the motion: tighten rtol/atol"),
    "invariant_drift": (
        "Loosen the InvariantMonitor's tolerance if this drift is acceptable, or reduce dt",
        "Loosen the InvariantMonitor's tolerance if this drift is acceptable, or tighten rtol/atol"),
    "max_steps_reached": (_MAX_STEPS, _MAX_STEPS),  # adaptive runs only
    "invalid_input": ("Run with on_invalid=\"raise\" (the default) for the message naming the argument and body",) * 2,
}
_QUIET = "; or pass throw=False to get the per-body flags."


def advice(name: str, adaptive: bool, dtype=None) -> str:
    """What to do about a failure of reason ``name`` (a :class:`RESULTS` member name) in a run of
    floating-point type ``dtype`` (None: not known)."""
    fixed, controlled = _ADVICE.get(name, ("Reduce dt", "Tighten rtol/atol"))
    more = _MAX_STEPS_FLOAT32 if name == "max_steps_reached" and (
        dtype is None or np.finfo(dtype).eps > np.finfo(np.float64).eps) else ""
    return (controlled if adaptive else fixed) + more + _QUIET


def failure_error(failed: np.ndarray, result, where: str = "", adaptive: bool | None = None,
                  dtype=None) -> SimulationError | None:
    """The :class:`SimulationError` for per-body first-failed steps ``failed`` (-1: none), or None.
    ``adaptive``: the run was error-controlled (None: an adaptive run's ``where`` says so), which
    changes the advice (tolerances, not dt)."""
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
    if adaptive is None:
        adaptive = where.startswith("adaptive")
    return SimulationError(f"{where}step {step}{at} failed: {RESULTS[item_of(code)]} ({name}). "
                           f"{advice(name, adaptive, dtype)}",
                           step=step, body=body, reason=item_of(code))


#: the message of :func:`failure_error`, read back (a traced failure reaches the caller as text)
_MESSAGE = re.compile(r"step (?P<step>\d+)(?: \(body \((?P<body>[\d, ]+)\)[^)]*\))? failed: .*? \((?P<name>\w+)\)\. ")


def _raise_traced(failed, result, where, dtype=None):
    """Host callback of a traced run: raise the same :class:`SimulationError` as a plain call."""
    err = failure_error(np.asarray(failed), None if result is None else np.asarray(result), where, dtype=dtype)
    if err is not None:
        raise from_host(err)


#: batches from this many bodies on an accelerator are checked by a reduction on the device first
ACCELERATOR_CHECK_MIN = 1 << 14


def _on_accelerator(failed) -> bool:
    """A large, fully addressable array of flags that lives on an accelerator (reading it to the host
    costs far more than reducing it there)."""
    if getattr(failed, "size", 0) < ACCELERATOR_CHECK_MIN or not getattr(failed, "is_fully_addressable", False):
        return False
    return all(d.platform != "cpu" for d in failed.devices())


@jax.jit
def _max_flag(failed):
    return jnp.max(failed)


@functools.lru_cache(maxsize=None)
def _max_flag_into_host(device):
    """``jnp.max`` of an array on ``device``, compiled to write its result into the host's pinned
    memory, or None where the device has none. The copy to the host is then part of the program, run
    as soon as the device is done, and reading the number waits for nothing more; a separate transfer
    asked for afterwards is dispatched only once the device has finished (measured in
    ``benchmarks/gpu_call_overhead.py``)."""
    if "pinned_host" not in {m.kind for m in device.addressable_memories()}:
        return None
    return jax.jit(jnp.max, out_shardings=jax.sharding.SingleDeviceSharding(device, memory_kind="pinned_host"))


def largest_flag(failed) -> int:
    """The largest of a batch's failed-step flags on an accelerator, reduced there (one number over
    the link instead of every body's flag)."""
    devices = failed.devices()
    reduce = _max_flag_into_host(next(iter(devices))) if len(devices) == 1 else None
    return int(_max_flag(failed) if reduce is None else reduce(failed))


def raise_failures(failed, result, where: str = "", dtype=None) -> None:
    """Raise the :class:`SimulationError` of the first failed step, if any: at once for concrete
    flags, from a host callback when the run is traced (under jit/grad/vmap; same message).
    ``dtype``: the run's floating-point type, for the advice (None: not known)."""
    codes = None if result is None else codes_of(result)
    # (under jax.grad a fused run's flags may come back concrete and its codes traced: both must be known)
    if not any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves((failed, codes))):
        if _on_accelerator(failed) and largest_flag(failed) < 0:
            return  # a large batch on a GPU: one number over the link instead of every body's flag
        # every process sees every body's flag (a collective under jax.distributed); the codes are
        # fetched only when a step failed (one transfer fewer on the common path)
        f = np.asarray(failed) if getattr(failed, "is_fully_addressable", False) else np.asarray(gather(failed))
        if (f.item() if f.size == 1 else f.max(initial=-1)) >= 0:
            raise failure_error(f, None if codes is None else gather(codes), where, dtype=dtype)
    else:
        jax.debug.callback(functools.partial(_raise_traced, where=where, dtype=dtype), failed, codes)


@contextlib.contextmanager
def simulation_errors():
    """Re-raise an error that JAX reports from inside ``jax.jit`` (as its own error, with the
    message inside) as the plain call's error: a failed step as a :class:`SimulationError` with
    ``.step``, ``.body`` and ``.reason``; a bad input found at run time (a traced ``dt``, inertia or
    initial state) as the plain call's ``ValueError``.

    JAX reports an exception raised by a host callback as a ``jax.errors.JaxRuntimeError`` when a
    call is dispatched from Python (a first call, a new signature) and as a ``ValueError`` carrying
    the same text when a compiled function is called again through its fast path; both are
    translated here. JAX runs a program asynchronously: block on its result inside the ``with`` (an
    error is raised where the result is first needed).

    Example::

        with jaxrot.simulation_errors():
            jax.jit(lambda s: jaxrot.simulate("liemid_ea", p, 0.5, 10, state0=s).final)(s)
    """
    try:
        yield
    except (jax.errors.JaxRuntimeError, ValueError) as e:
        original = host_error_in(e)
        if isinstance(original, SimulationError):
            raise original from e
        if original is not None:
            raise original from None  # the input's message is all there is to say
        # raised where this process did not see it (a callback of another process): read it back
        m = _MESSAGE.search(str(e))
        if m is None or m["name"] not in RESULTS._name_to_item:
            raise
        body = tuple(int(i) for i in m["body"].replace(" ", "").split(",") if i) if m["body"] else None
        text = str(e)
        line = text[text.rfind("\n", 0, m.start()) + 1:].split("\n", 1)[0]
        message = line.split("SimulationError: ", 1)[-1]
        raise SimulationError(message, step=int(m["step"]), body=body,
                              reason=RESULTS._name_to_item[m["name"]]) from e
