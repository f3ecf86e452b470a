"""Power series of SO(3)'s coefficients (:mod:`jaxrot.geometry.so3`): their exact terms truncated at a
precision's rounding (:func:`series_coefficients`), their evaluation (:func:`poly`), and the
coefficient functions traced once (:func:`traced_once`)."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math

import jax
import jax.numpy as jnp

__all__ = ["bernoulli", "series_coefficients", "poly", "slope_poly", "traced_once", "inlined", "inlining", "watched",
           "Watch"]

_INLINED = contextvars.ContextVar("jaxrot_inlined", default=False)


def traced_once(f):
    """``f`` as a ``jax.jit`` of its own: traced once per argument shape and dtype and reused as one
    call by every trace that applies it, where its body would otherwise be traced again at each use
    (a power series is tens of operations, a method's step applies it dozens of times, and a run traces
    the step for its loop, its tangents and its checks). XLA inlines the call: values and forward-mode
    derivatives are the same bits; a reverse-mode derivative is taken through the call and may round
    differently in the last bit (so may an op-by-op evaluation outside ``jit``, now one compiled call).
    Inside :func:`inlined` the body is traced in place; inside :func:`watched` it stays a call, and an
    application under a transformation is noted."""
    compiled = jax.jit(f)

    @functools.wraps(f)
    def call(*args, **kwargs):
        mode = _INLINED.get()
        if mode is True:
            return f(*args, **kwargs)
        if mode is not False and _transformed((args, kwargs)):
            mode.seen = True
            raise _Abandoned  # (the trace is made again in place: the rest of this one would be wasted)
        return compiled(*args, **kwargs)

    return call


@contextlib.contextmanager
def inlined():
    """Trace :func:`traced_once` functions in place: the kernel generator differentiates a step and
    restates its jaxpr, and a derivative taken through a call keeps the call's own split of what it
    computes and saves (a generated derivative ran up to a quarter longer)."""
    token = _INLINED.set(True)
    try:
        yield
    finally:
        _INLINED.reset(token)


def inlining() -> bool:
    """Whether :func:`traced_once` functions are traced in place here (inside :func:`inlined`)."""
    return _INLINED.get() is True


class Watch:
    """What :func:`watched` yields: ``seen``, whether a :func:`traced_once` function was applied under a
    transformation (``jax.jvp``, ``jax.vmap``, a linearization) in the trace made inside it."""

    seen: bool = False


class _Abandoned(Exception):
    """A trace inside :func:`watched` given up at its first transformed call (caught there)."""


def _transformed(tree) -> bool:
    # a tracer of a transformation, not one of the jaxpr being recorded (were JAX to rename that class,
    # every tracer would count: the generator would trace in place throughout, as it did before). A
    # transformation of an already traced jaxpr applies no Python function, and is not seen here
    return any(isinstance(x, jax.core.Tracer) and type(x).__name__ != "DynamicJaxprTracer"
               for x in jax.tree_util.tree_leaves(tree))


@contextlib.contextmanager
def watched():
    """Keep :func:`traced_once` functions as calls, noting in the :class:`Watch` yielded whether one was
    applied under a transformation; the trace inside is then given up at that call (the block ends
    there, its result unassigned). The kernel generator restates a call as its body in place, the same
    source at a fraction of the tracing, except where a transformation went through the call (its
    derivative is split and ordered otherwise than the body's), and there traces again
    :func:`inlined`."""
    watch = Watch()
    token = _INLINED.set(watch)
    try:
        yield watch
    except _Abandoned:
        pass
    finally:
        _INLINED.reset(token)


def bernoulli(n: int) -> list:
    """B_0 ... B_n as exact fractions (B_1 = -1/2), by the recurrence sum_k C(m+1, k) B_k = 0."""
    from fractions import Fraction

    B = [Fraction(1)]
    for m in range(1, n + 1):
        B.append(-sum(math.comb(m + 1, k) * B[k] for k in range(m)) / (m + 1))
    return B


def series_coefficients(kind: str, x_max: float, eps: float) -> list[float]:
    """Coefficients in ``x = a^2`` (lowest first) of the power series of ``"s1"`` = sin a / a,
    ``"s2"`` = (1 - cos a) / a^2, ``"s3"`` = (a - sin a) / a^3 or ``"dexpinv"`` = (1 - (a/2) cot(a/2)) /
    a^2, truncated where the remainder is below ``eps / 4`` of the function's value on
    ``0 <= x <= x_max`` (``x_max < 4 pi^2``).

    The terms are exact: (-1)^k / (2k+1)!, (-1)^k / (2k+2)!, (-1)^k / (2k+3)! and |B_(2k+2)| /
    (2k+2)! (Bernoulli numbers). The first three series alternate with decreasing terms (for
    x_max < 6), so the first term left out bounds the remainder; the last has positive terms whose
    ratio rises to 1 / (4 pi^2), bounding the remainder by the first term left out over
    1 - x_max / (4 pi^2)."""
    from fractions import Fraction

    factorial, pi = math.factorial, math.pi

    if not 0 < x_max < (6.0 if kind in ("s1", "s2", "s3") else 4 * pi ** 2):
        raise ValueError(f"x_max = {x_max} is outside the range where the {kind} bound holds")
    if kind == "s1":
        term, low, tail = (lambda k: Fraction((-1) ** k, factorial(2 * k + 1))), _sinc_at(x_max), 1.0
    elif kind == "s2":
        term, low, tail = (lambda k: Fraction((-1) ** k, factorial(2 * k + 2))), _versinc_at(x_max), 1.0
    elif kind == "s3":
        term, low, tail = (lambda k: Fraction((-1) ** k, factorial(2 * k + 3))), _s3_at(x_max), 1.0
    elif kind == "dexpinv":
        B = bernoulli(64)
        term, low, tail = (lambda k: abs(B[2 * k + 2]) / factorial(2 * k + 2)), 1 / 12, 1 / (1 - x_max / (4 * pi ** 2))
    else:
        raise ValueError(f"unknown series {kind!r}")
    coeffs = []
    for k in range(30):
        coeffs.append(term(k))
        if float(abs(term(k + 1))) * x_max ** (k + 1) * tail <= eps / 4 * low:
            return [float(c) for c in coeffs]
    raise ValueError(f"{kind}: more than 30 terms for x_max = {x_max}, eps = {eps}")


def _sinc_at(x: float) -> float:
    """sin a / a at a^2 = x (its least value on [0, x] for x < pi^2)."""
    a = math.sqrt(x)
    return math.sin(a) / a


def _versinc_at(x: float) -> float:
    """(1 - cos a) / a^2 at a^2 = x (its least value on [0, x] for x < 4 pi^2)."""
    a = math.sqrt(x)
    return 2 * math.sin(a / 2) ** 2 / x


def _s3_at(x: float) -> float:
    """(a - sin a) / a^3 at a^2 = x (its least value on [0, x] for x < 4 pi^2)."""
    a = math.sqrt(x)
    return (a - math.sin(a)) / (a * x)


def poly(a2, coeffs):
    """``sum_k coeffs[k] a2^k`` as ``E(a2^2) + a2 O(a2^2)``, its even and odd terms each by Horner's scheme:
    two independent chains of half the length, which a generated kernel's scalar thread runs side by side
    (``benchmarks/generated_kernels.py``); within 4 roundings of the exact sum below ``so3.SMALL_ANGLE2``
    (``tests/test_so3.py``)."""
    if len(coeffs) < 3:
        return _horner(a2, coeffs)
    x2 = a2 * a2
    return _horner(x2, coeffs[0::2]) + a2 * _horner(x2, coeffs[1::2])


def _horner(x, coeffs):
    out = jnp.zeros_like(x) + coeffs[-1]
    for c in coeffs[-2::-1]:
        out = out * x + c
    return out


def slope_poly(coeffs):
    """The coefficients of a power series in ``a2``'s derivative with respect to ``a2``."""
    return [k * c for k, c in enumerate(coeffs)][1:]
