"""The errors every layer of jaxrot raises, and how an error found inside compiled code reaches the
caller as itself.

* :class:`UnknownNameError` and :func:`unknown_name`: a misspelt method or problem name, with the
  closest known names.
* :func:`run_time_check`: the plain call's check of values known only when a program runs (under
  ``jit``): a host callback raises the ``ValueError``; :func:`from_host` remembers it and
  :func:`host_error_in` finds it again in JAX's report, so that ``jaxrot.simulation_errors()`` can
  re-raise it as itself.

This module sits below the layers (it imports no other jaxrot module), so that a state's or a
problem's constructor can use the same checks as the driver.
"""

from __future__ import annotations

import difflib
import functools
import logging
import os
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from equinox.internal import unvmap_any
from jax import lax

__all__ = ["UnknownNameError", "unknown_name", "run_time_check", "from_host", "host_error_in"]


class UnknownNameError(KeyError, ValueError):
    """An unknown method or problem name. A ``KeyError`` (a lookup by name failed) and a ``ValueError``
    (a bad argument, as every other input check raises), whose text is the message itself: ``KeyError``
    would print it quoted, as the missing key."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def unknown_name(kind: str, name, known, listing: str) -> UnknownNameError:
    """The error for an unknown ``name`` of a ``kind`` ("method", "problem") among ``known``: the
    closest known names, if any, and where to see them all (``listing``), not the whole list."""
    if isinstance(name, str):
        folded = {k.lower(): k for k in known}  # "Buss4" and "BUSS4" find buss4
        close = [folded[c] for c in difflib.get_close_matches(name.lower(), list(folded), n=3, cutoff=0.6)]
        hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    else:
        hint = f" ({kind} names are strings, got {type(name).__name__})"
    return UnknownNameError(f"unknown {kind} {name!r}; known: {len(known)} {kind}s, listed by {listing}.{hint}")


#: copies of the exceptions raised by jaxrot's host callbacks, most recent last (copies: the raised
#: ones hold the callback's frames, and with them its arrays). JAX reports an exception raised in a
#: callback as its own error with the text inside (it cannot re-raise the exception itself out of
#: compiled code); simulation_errors() finds the original here.
_HOST_ERRORS: list = []


def _copy(err: Exception) -> Exception:
    new = type(err)(*err.args)
    new.__dict__.update(err.__dict__)  # e.g. a SimulationError's step, body and reason
    return new


def from_host(err: Exception) -> Exception:
    """``err``, to be raised by a host callback, remembered: :func:`simulation_errors` re-raises it
    as itself, and JAX's log of callback failures skips it (the caller gets the message already)."""
    _HOST_ERRORS.append(_copy(err))
    del _HOST_ERRORS[:-16]
    err.jaxrot_host_error = True
    return err


class _SkipOwnErrors(logging.Filter):
    """JAX logs every exception raised in a host callback, traceback included, before reporting it
    as its own error; for jaxrot's check and failure errors, whose message the caller gets in that
    error, the log would print it a second time."""

    def filter(self, record) -> bool:
        err = record.exc_info[1] if record.exc_info else None
        return not getattr(err, "jaxrot_host_error", False)


for _logger in ("jax._src.callback", "jax._src.debugging"):  # pure_callback/io_callback, debug.callback
    logging.getLogger(_logger).addFilter(_SkipOwnErrors())


def host_error_in(err: BaseException) -> Exception | None:
    """A fresh copy of the exception a jaxrot host callback raised, if ``err`` is JAX's report of it
    (its text holds the original's message and more), else None."""
    text = str(err)
    for e in reversed(_HOST_ERRORS):
        if str(e) and str(e) in text and text != str(e):
            return _copy(e)
    return None


def run_time_check(x, bad, message, values):
    """``x`` (a pytree of arrays or None) unchanged, after a check of traced values: where ``bad``
    (any element, any vmapped member) holds, ``message(*values)`` is computed on the host from the
    values as NumPy arrays and raised as a ``ValueError`` — the plain call's check and message, for
    values known only at run time. Under ``vmap`` each entry of ``values`` comes with the vmapped
    axes along which it is batched in front, so that the message can name the bad body.

    What JAX allows (JAX 0.10): an exception cannot leave compiled code as itself. Under
    ``vmap``/``grad`` without ``jit`` the values are concrete underneath, so the check runs now and
    the ``ValueError`` is raised here, as in a plain call. Under ``jit`` a host callback raises it
    while the program runs and JAX reports it as its own error whose text ends with
    ``ValueError: <message>`` (see the module docstring); :func:`jaxrot.simulation_errors`
    re-raises the ``ValueError``. The callback sees a vmapped batch whole (``pure_callback`` with
    ``vmap_method="expand_dims"``; equinox's ``error_if`` reduces the batch away first), and the
    good path runs no callback (a ``lax.cond``). ``EQX_ON_ERROR=off`` switches the check off, as it
    does equinox's. Use the returned value: an unused one is dead code and its check is dropped."""
    if os.environ.get("EQX_ON_ERROR") == "off":  # equinox's switch for every run-time check
        return x
    with jax.ensure_compile_time_eval():
        any_bad = unvmap_any(bad)
        try:
            known = bool(any_bad)
        except jax.errors.ConcretizationTypeError:  # under jit: decided when the program runs
            known = None
    if known is False:
        return x
    check = _Check(message, jnp.ndim(jax.tree_util.tree_leaves(x)[0]))
    if known is None:
        return _guarded(check, x, bad, values)
    try:  # a bad value under vmap/grad without jit: raise it now, as a plain call does
        out = jax.tree_util.tree_leaves(_guarded(check, x, bad, values))[0]
        with jax.ensure_compile_time_eval():  # wait for the check (a vmapped result cannot be blocked on)
            bool(unvmap_any(jnp.any(out != out)))
    except (jax.errors.JaxRuntimeError, ValueError) as e:  # JAX's report of the callback's error
        original = host_error_in(e)
        if original is None:
            raise
        raise original from None
    return x  # pragma: no cover - the device flagged a value the host check accepts


class _Check(NamedTuple):
    message: object  # (*NumPy values) -> str | None
    ndim: int  # the unbatched rank of the first array of x (the callback's count of vmapped axes)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _guarded(check: _Check, x, bad, values):
    struct = jax.eval_shape(lambda: x)

    def error():
        return jax.pure_callback(functools.partial(_on_host, check), struct, x, values, vmap_method="expand_dims")

    return lax.cond(unvmap_any(bad), error, lambda: x)


@_guarded.defjvp
def _guarded_jvp(check, primals, tangents):
    # the check is not differentiated: the tangents of x pass through (and no callback needs a JVP rule)
    x, bad, values = primals
    return _guarded(check, x, bad, values), tangents[0]


def _on_host(check: _Check, x, values):
    """The callback: the message from the NumPy values, raised; else ``x`` (broadcast to the vmapped
    shape). Under ``vmap`` every argument has the vmapped axes in front, of size 1 where it is not
    batched; each value (a top-level entry of ``values``) keeps the axes along which it is batched,
    so that its message names a body only where the value differs from body to body."""
    x, values = jax.tree_util.tree_map(np.asarray, (x, values))
    first = jax.tree_util.tree_leaves(x)[0]
    n = first.ndim - check.ndim  # the number of vmapped axes in front
    vshape = np.broadcast_shapes(*(v.shape[:n] for v in jax.tree_util.tree_leaves((x, values))))

    def batched_axes(value):
        parts = jax.tree_util.tree_leaves(value)
        if not parts:
            return value
        own = np.broadcast_shapes(*(v.shape[:n] for v in parts))
        drop = tuple(i for i, size in enumerate(own) if size == 1)
        return jax.tree_util.tree_map(lambda v: np.squeeze(np.broadcast_to(v, own + v.shape[n:]), axis=drop), value)

    message = check.message(*(batched_axes(v) for v in values))
    if message is not None:
        raise from_host(ValueError(message))
    return jax.tree_util.tree_map(lambda v: np.broadcast_to(v, vshape + v.shape[n:]), x)
