"""A repeated call replays its checked plan: the same :func:`jaxrot.simulate` call made again (the
same problem, state and option objects, the same numbers) skips the host checks, the executor's
choice and the setup, and goes straight to the compiled loop and the trajectory.

Only calls whose every input is immutable and concrete are remembered: JAX arrays (never NumPy
arrays, which can be changed in place, nor tracers), Python numbers and strings, and equinox modules
(frozen) holding them; objects are matched by identity, and the plan keeps a reference to each, so
no other object can take its id while the plan lives. Option objects made anew for every call
(``saveat=jaxrot.SaveAt(t0=False)``, ``executor=jaxrot.Fused()`` written in the call) are matched by
value where they hold only Python numbers, strings and None (:func:`by_value`), and so are a step and
times given as NumPy scalars or JAX scalars (a JAX scalar's value read once a call, with its type and
placement). A call with a
progress meter or a deprecated spelling (which warns) is always carried out in full.
"""

from __future__ import annotations

import collections
import math

import jax
import numpy as np

from .checks import is_concrete

__all__ = ["key", "by_value", "lookup", "remember"]

#: plans remembered (the most recently used last); a loop over many configurations evicts the oldest
MAX_PLANS = 64
_PLANS: collections.OrderedDict = collections.OrderedDict()
#: the same plans under their :func:`by_value` keys
_ALIASES: collections.OrderedDict = collections.OrderedDict()
_NUMBER = (int, float, bool, type(None))


def key(method, problem, dt, n_steps, t0, t1, state0, stepsize, saveat, event, adjoint, executor, progress, throw,
        monitor, unroll, save_every):
    """The call's key, or None where the call is not to be remembered. Cheap: type tests and ids;
    whether the objects' leaves are immutable is checked once, in :func:`remember`."""
    if progress is not None or save_every is not None:
        return None
    if type(n_steps) not in _NUMBER or type(unroll) is not int or type(throw) is not bool:
        return None
    # typed: 20 and 20.0, 1.0 and True are equal keys otherwise, and a call the checks refuse would replay
    n_steps, dt, t0, t1 = (type(n_steps), n_steps), _number(dt), _number(t0), _number(t1)
    if _NOT_A_NUMBER in (dt, t0, t1):
        return None
    name = method if type(method) is str else id(method)
    # the options last, in by_value's order
    objects = (problem, state0, event, stepsize, saveat, adjoint, executor, monitor)
    # the run's dtype follows the x64 switch when numbers are given as Python floats; its arrays are placed
    # on the default device
    config = (jax.config.jax_enable_x64, jax.config.jax_default_device)
    return (name, dt, n_steps, t0, t1, throw, unroll, config) + tuple(map(id, objects))


_SCALAR = (int, float, bool, type(None), str)
_NOT_A_NUMBER = ("not a number",)


def _number(x):
    """A time or step as a key: a Python number itself; a real NumPy scalar (immutable) by its value
    and type; a concrete real scalar JAX array by its value, type and placement (a step given as a
    new device array on every call is the same call again; reading the value costs a transfer from the
    device, a small part of the checks it saves); anything else :data:`_NOT_A_NUMBER`. A number's type
    and a zero's sign are part of its key (1 == 1.0 == True and -0.0 == 0.0: a call the checks refuse
    would replay an accepted one, and a time's sign is kept in the frames)."""
    if type(x) in _NUMBER:
        return type(x), _signed(x)
    if isinstance(x, np.generic) and _real(x.dtype):
        return ("numpy", x.dtype.name, _signed(x.item()))
    if isinstance(x, jax.Array) and is_concrete(x) and x.ndim == 0 and not x.is_deleted() and _real(x.dtype):
        return ("array", x.dtype.name, x.weak_type, x.committed, x.sharding, _signed(x.item()))
    return _NOT_A_NUMBER


def _real(dtype) -> bool:
    """A real number's type (JAX's test: it knows its key and extended types too)."""
    return jax.numpy.issubdtype(dtype, jax.numpy.floating) or jax.numpy.issubdtype(dtype, jax.numpy.integer)


def _signed(v):
    return (v, math.copysign(1.0, v)) if isinstance(v, float) and v == 0.0 else v


def own(x):
    """A JAX scalar the call's plan may keep (:func:`key` matched it by value): a copy of ``x`` on its
    device, so that deleting or donating the caller's array leaves the plan whole; anything else as is."""
    if isinstance(x, jax.Array) and is_concrete(x) and x.ndim == 0:
        with jax.ensure_compile_time_eval():  # a concrete copy inside a caller's jit too, not a staged one
            return jax.numpy.array(x, copy=True)
    return x


def _value(obj):
    """An option object's value as a key: its type, tree structure (static fields included) and leaves
    with their types (1, 1.0 and True differ), or None where a leaf is anything else (an array, a
    function) or the structure cannot be hashed."""
    try:
        leaves, tree = jax.tree_util.tree_flatten(obj)
        hash(tree)
    except Exception:  # noqa: BLE001 - an unhashable static field: matched by identity only
        return None
    if not all(type(x) in _SCALAR for x in leaves):
        return None
    return (type(obj), tree, tuple((type(x), x) for x in leaves))


def by_value(k, stepsize, saveat, adjoint, executor, monitor):
    """Key ``k`` (:func:`key`) with the option objects matched by value instead of identity, or None
    where one of them holds more than Python numbers, strings and None."""
    if k is None:
        return None
    values = [_value(o) for o in (stepsize, saveat, adjoint, executor, monitor)]
    if any(v is None for v in values):
        return None
    return ("by value",) + tuple(k[:-len(values)]) + tuple(values)  # (the key ends with the options' ids)


def lookup(k):
    """The remembered plan of key ``k`` (a function of no arguments that carries out the run), or None."""
    if k is None:
        return None
    for plans in (_PLANS, _ALIASES):
        hit = plans.get(k)
        if hit is not None:
            plans.move_to_end(k)
            return hit[1]
    return None


def remember(k, plan, *objects, alias=None) -> None:
    """Remember ``plan`` under key ``k`` (and under ``alias``, its :func:`by_value` key, if given) if
    every array leaf of ``objects`` (the call's inputs, and the values the plan holds) is a concrete JAX
    array; the plan keeps the objects alive, so their ids stay theirs."""
    if k is None:
        return
    for x in jax.tree_util.tree_leaves(objects):
        if hasattr(x, "__array__") and not (isinstance(x, jax.Array) and is_concrete(x)):
            return  # NumPy arrays can change in place; tracers belong to someone's trace
    for plans, name in ((_PLANS, k), (_ALIASES, alias)):
        if name is not None:
            plans[name] = (objects, plan)
            while len(plans) > MAX_PLANS:
                plans.popitem(last=False)


def forget() -> None:
    """Drop every remembered plan."""
    _PLANS.clear()
    _ALIASES.clear()
