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

What is hoisted: a Python function's closure cells, default and keyword-only default arguments, and,
inside them (in containers too), the functions they hold, in turn; ``functools.partial`` objects (their
function and arguments). Not hoisted: a value reached only through a function compiled with
``jax.jit``, a bound method of a class that is not a pytree, or a function that calls itself by its
own name (its recursive calls see the original); pass such values through a torque's ``args``.

This module sits below the layers (it imports no other jaxrot module).
"""

from __future__ import annotations

import functools
import inspect
import types
from typing import Any, Callable

import equinox as eqx
import jax

__all__ = ["Closure", "Partial", "hoist"]


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
    kwdefaults: dict | None

    def _function(self):
        cells = tuple(types.CellType() if v is _EMPTY else types.CellType(v) for v in self.cells)
        f = types.FunctionType(self.code.__code__, self.code.__globals__, self.code.__name__,
                               self.defaults or None, cells or None)
        f.__kwdefaults__ = self.kwdefaults
        return f

    def __call__(self, *args, **kwargs):
        return self._function()(*args, **kwargs)

    @property
    def __signature__(self):
        return inspect.signature(self._function())

    @property
    def __name__(self):
        return self.code.__name__


class Partial(eqx.Module):
    """``functools.partial(func, *args, **keywords)`` with its arguments as pytree leaves."""

    func: Any
    args: tuple
    keywords: dict

    def __call__(self, *args, **kwargs):
        return self.func(*self.args, *args, **{**self.keywords, **kwargs})

    @property
    def __signature__(self):
        return inspect.signature(functools.partial(self.func, *self.args, **self.keywords))

    @property
    def __name__(self):
        return getattr(self.func, "__name__", type(self.func).__name__)


def hoist(fn: Any, _seen=None) -> Any:
    """``fn`` itself, unless it is a Python function that closes over a JAX tracer (in a closure cell
    or a default argument, or in those of a function it closes over): then a :class:`Closure` of it,
    whose leaves hold those values, so that transformations see them as inputs."""
    seen = set() if _seen is None else _seen

    def inner(value):  # the functions inside a value (a cell's, an argument's), hoisted in turn
        return jax.tree_util.tree_map(lambda v: hoist(v, seen) if callable(v) else v, value)

    if isinstance(fn, functools.partial):
        func, args, keywords = hoist(fn.func, seen), inner(fn.args), inner(fn.keywords)
        if func is fn.func and not _has_tracer((args, keywords)):
            return fn
        return Partial(func, tuple(args), dict(keywords))
    if not isinstance(fn, types.FunctionType):
        return fn
    if id(fn) in seen:  # a function that reaches itself through its closure (see the module's limits)
        return fn
    seen.add(id(fn))
    values = [v if v is _EMPTY else inner(v) for v in _cell_values(fn)]
    defaults = inner(tuple(fn.__defaults__ or ()))
    kwdefaults = inner(fn.__kwdefaults__)
    if not _has_tracer([v for v in values if v is not _EMPTY]) and not _has_tracer((defaults, kwdefaults)):
        return fn
    code = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, None,
                              tuple(types.CellType() for _ in values) or None)
    code.__qualname__, code.__module__, code.__doc__ = fn.__qualname__, fn.__module__, fn.__doc__
    return Closure(code, tuple(values), tuple(defaults), kwdefaults)
