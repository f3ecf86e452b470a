"""A repeated call replays its checked plan: the same :func:`jaxrot.simulate` call made again (the
same problem, state and option objects, the same numbers) skips the host checks, the executor's
choice and the setup, and goes straight to the compiled loop and the trajectory.

Only calls whose every input is immutable and concrete are remembered: JAX arrays (never NumPy
arrays, which can be changed in place, nor tracers), Python numbers and strings, and equinox modules
(frozen) holding them; objects are matched by identity, and the plan keeps a reference to each, so
no other object can take its id while the plan lives. A call with a progress meter or a deprecated
spelling (which warns) is always carried out in full.
"""

from __future__ import annotations

import collections

import jax

from .checks import is_concrete

__all__ = ["key", "lookup", "remember"]

#: plans remembered (the most recently used last); a loop over many configurations evicts the oldest
MAX_PLANS = 64
_PLANS: collections.OrderedDict = collections.OrderedDict()
_NUMBER = (int, float, bool, type(None))


def key(method, problem, dt, n_steps, t0, t1, state0, stepsize, saveat, event, adjoint, executor, progress, throw,
        monitor, unroll, save_every):
    """The call's key, or None where the call is not to be remembered. Cheap: type tests and ids;
    whether the objects' leaves are immutable is checked once, in :func:`remember`."""
    if progress is not None or save_every is not None:
        return None
    if type(dt) not in _NUMBER or type(t0) not in _NUMBER or type(t1) not in _NUMBER \
            or type(n_steps) not in _NUMBER or type(unroll) is not int or type(throw) is not bool:
        return None
    name = method if type(method) is str else id(method)
    objects = (problem, state0, stepsize, saveat, event, adjoint, executor, monitor)
    # the run's dtype follows the x64 switch when numbers are given as Python floats; its arrays are placed
    # on the default device
    config = (jax.config.jax_enable_x64, jax.config.jax_default_device)
    return (name, dt, n_steps, t0, t1, throw, unroll, config) + tuple(map(id, objects))


def lookup(k):
    """The remembered plan of key ``k`` (a function of no arguments that carries out the run), or None."""
    if k is None:
        return None
    hit = _PLANS.get(k)
    if hit is None:
        return None
    _PLANS.move_to_end(k)
    return hit[1]


def remember(k, plan, *objects) -> None:
    """Remember ``plan`` under key ``k`` if every array leaf of ``objects`` (the call's inputs, and the
    values the plan holds) is a concrete JAX array; the plan keeps the objects alive, so their ids stay
    theirs."""
    if k is None:
        return
    for x in jax.tree_util.tree_leaves(objects):
        if hasattr(x, "__array__") and not (isinstance(x, jax.Array) and is_concrete(x)):
            return  # NumPy arrays can change in place; tracers belong to someone's trace
    _PLANS[k] = (objects, plan)
    while len(_PLANS) > MAX_PLANS:
        _PLANS.popitem(last=False)


def forget() -> None:
    """Drop every remembered plan."""
    _PLANS.clear()
