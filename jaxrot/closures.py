"""User functions that close over traced values, made differentiable (:func:`hoist`).

A torque function or an event condition written inside a function that ``jax.grad``, ``jax.jvp`` or
``jax.jit`` transforms often closes over a traced value (``lambda t, s, args: s.R[1, 1] - c`` with
``c`` the argument being differentiated). Held as a plain Python function, that value is invisible to
the pytrees jaxrot passes through its loops, so a derivative through a ``custom_vjp`` (the adaptive
loop's, equinox's checkpointed while loop) fails with JAX's "closed-over value" error, and a run of
constant steps cannot tell that it is being differentiated. :func:`hoist` turns such a function into a
:class:`Closure`, an equinox module whose leaves are the values the function closes over (its
closure cells and default arguments, and those of the functions it closes over, in turn); calling it
calls the same code with those values. A function that closes over no traced value is returned as
it is (the same object), so nothing changes for it. (diffrax does the same for its vector fields
with ``equinox.filter_closure_convert``; this module keeps the Python function instead of a traced
jaxpr, so the module works at any dtype and shape.)

This module sits below the layers (it imports no other jaxrot module).
"""

from __future__ import annotations

import inspect
import types
from typing import Any, Callable

import equinox as eqx
import jax

__all__ = ["Closure", "hoist", "closes_over_tracers"]


def _has_tracer(value) -> bool:
    return any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(value))


def _cell_values(fn) -> list:
    out = []
    for cell in fn.__closure__ or ():
        try:
            out.append(cell.cell_contents)
        except ValueError:  # an empty cell (a name bound later in the enclosing scope)
            out.append(_EMPTY)
    return out


class _Empty:
    """An empty closure cell's place."""


_EMPTY = _Empty()


class Closure(eqx.Module):
    """A Python function with the values it closes over (closure cells, default arguments) held as
    pytree leaves; calling it calls the function's code with them. Made by :func:`hoist`."""

    code: Callable = eqx.field(static=True)  # the function with empty cells and no defaults
    cells: tuple
    defaults: tuple

    def _function(self):
        cells = tuple(types.CellType() if v is _EMPTY else types.CellType(v) for v in self.cells)
        f = types.FunctionType(self.code.__code__, self.code.__globals__, self.code.__name__,
                               self.defaults or None, cells or None)
        f.__kwdefaults__ = self.code.__kwdefaults__
        return f

    def __call__(self, *args, **kwargs):
        return self._function()(*args, **kwargs)

    @property
    def __signature__(self):
        return inspect.signature(self._function())

    @property
    def __wrapped__(self):
        return self.code


def closes_over_tracers(fn) -> bool:
    """Whether ``fn`` (a Python function) closes over a JAX tracer, directly or through a function it
    closes over (its closure cells and default arguments)."""
    return hoist(fn) is not fn


def hoist(fn: Any, _seen=None) -> Any:
    """``fn`` itself, unless it is a Python function that closes over a JAX tracer (in a closure cell
    or a default argument, or in those of a function it closes over): then a :class:`Closure` of it,
    whose leaves hold those values, so that transformations see them as inputs."""
    if not isinstance(fn, types.FunctionType):
        return fn
    seen = set() if _seen is None else _seen
    if id(fn) in seen:  # a function that reaches itself through its closure
        return fn
    seen.add(id(fn))
    values = [hoist(v, seen) if isinstance(v, types.FunctionType) else v for v in _cell_values(fn)]
    defaults = tuple(fn.__defaults__ or ())
    if not any(_has_tracer(v) for v in values if v is not _EMPTY) and not _has_tracer(defaults):
        return fn
    code = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, None,
                              tuple(types.CellType() for _ in values) or None)
    code.__qualname__, code.__module__, code.__doc__ = fn.__qualname__, fn.__module__, fn.__doc__
    code.__kwdefaults__ = fn.__kwdefaults__
    return Closure(code, tuple(values), defaults)
