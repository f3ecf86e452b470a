"""What every restated function (a torque, an event condition, a method's step) starts from: its
inputs as arrays of :class:`~jaxrot.kernels.jaxpr_warp.Element` (the state ``t``, ``R``, ``Pi``, and
the parameters read from a kernel array), the key of its source, and the key of the structure the
source depends on."""

import hashlib

import numpy as np

from ..geometry.series import inlined, watched
from .jaxpr_warp import Element, Source, convert, kind_of


def jaxpr_of(fn, *specs, differentiates: bool = False):
    """``jax.make_jaxpr(fn)(*specs)`` as the kernels restate it: SO(3)'s traced-once functions kept as
    calls, which the restatement writes out in place, where nothing transforms them, and traced in
    place (:func:`~jaxrot.geometry.series.inlined`) where a derivative or a map goes through them: at
    once where ``fn`` ``differentiates``, else after a first trace given up where it met one
    (:func:`~jaxrot.geometry.series.watched`, which says what is seen and why). A transformation of a
    jaxpr already traced (a closure-converted function, a loop or branch function JAX keeps by
    identity, one's own ``jax.jit``-ed torque) is not seen and keeps that trace's calls: the same
    kernel values, a source that may be longer. ``benchmarks/generated_sources.py`` compares the
    sources of every registered method with another checkout's."""
    import jax

    def trace():  # (through a function of its own: make_jaxpr reuses the trace of a function it has seen)
        return jax.make_jaxpr(lambda *args: fn(*args))(*specs)

    if not differentiates:
        watch = None
        try:
            with watched() as watch:
                closed = trace()
        except Exception:  # (a handler on the way turned the give-up into another error: traced in place)
            if watch is None or not watch.seen:
                raise
        else:
            if not watch.seen:
                return closed
    with inlined():
        return trace()


def elements(prefix: str, shape, offset: int, dtype) -> np.ndarray:
    """The elements ``prefix[offset + k]`` of a raveled kernel array, read as the kind of ``dtype``."""
    kind = kind_of(dtype)
    n = int(np.prod(shape, dtype=int))
    out = np.empty(n, dtype=object)
    for k in range(n):
        ref = f"{prefix}[{offset + k}]"
        out[k] = Element({"f": ref, "i": f"int({ref})", "b": f"({ref} != S(0.0))"}[kind], kind)
    return out.reshape(tuple(shape))


def named(names, shape) -> np.ndarray:
    """Floating elements called ``names(index)``, e.g. ``named(lambda i: f"R[{i[0]}, {i[1]}]", (3, 3))``."""
    out = np.empty(shape, dtype=object)
    for idx in np.ndindex(shape):
        out[idx] = Element(names(idx), "f")
    return out


def state() -> tuple:
    """``(t, R, Pi)``: the Warp function's arguments of those names as elements."""
    return (named(lambda i: "t", ()), named(lambda i: f"R[{i[0]}, {i[1]}]", (3, 3)),
            named(lambda i: f"Pi[{i[0]}]", (3,)))


def as_float(g: Source, x: Element) -> str:
    """``x``'s code as a floating value."""
    return (x if x.kind == "f" else convert(g, x, "f")).code


def source_key(src: str, lits) -> str:
    """The name of a generated source: a hash of its text and literals."""
    return hashlib.sha1((src + repr(tuple(lits))).encode()).hexdigest()[:16]


def structure_key(tree, *extra):
    """What a source generated from ``tree`` depends on: its structure (classes, static fields), the
    shapes and dtypes of its arrays (not their values) and the values of its other leaves, with
    ``extra``; ``None`` where some part cannot be hashed."""
    import jax

    leaves, treedef = jax.tree_util.tree_flatten(tree)
    parts = tuple(("array", tuple(x.shape), np.dtype(x.dtype).name) if hasattr(x, "shape") and hasattr(x, "dtype")
                  else ("value", type(x).__name__, x) for x in leaves)
    key = (treedef, parts, *extra)
    try:
        hash(key)
    except TypeError:
        return None
    return key


def warp_functions(S, src: str, lits, label: str, names, **env) -> dict:
    """The functions ``names`` of a generated source as Warp functions for scalar type ``S`` (``V`` and
    ``M`` its 3-vector and 3x3 matrix, ``LIT`` the literals; ``env`` more names the source uses)."""
    import math

    from ._common import exec_source, so3_funcs, warp

    wp = warp()
    c = so3_funcs(S)
    ns = exec_source(src, f"jaxrot-{label}-{S.__name__}", {"S": S, "V": c.V, "M": c.M, "wp": wp, "LIT": list(lits),
                                                           "math": math, "__name__": f"jaxrot_{label}", **env})
    for n in names:  # (in the namespace too: a generated function calls another by its name)
        ns[n] = wp.func(ns[n])
    return {n: ns[n] for n in names}
