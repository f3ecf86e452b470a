"""The fused loop's own pieces generated from their JAX code: the PI controller (:func:`controller`,
from :func:`jaxrot.integrators.pairs.adapt`), as a method's step is generated from its own
(:mod:`jaxrot.kernels.generate`).

:func:`function` traces a JAX function of scalars, 3-vectors and 3x3 matrices at one body's shapes
and writes its jaxpr out as a Warp function (:func:`jaxrot.kernels.jaxpr_warp.restate`, one local per
element); the loop template (:mod:`jaxrot.kernels.loop`) calls it as it calls the method's step.
"""

import functools

import numpy as np

from .jaxpr_inputs import as_float, named, source_key, warp_functions
from .jaxpr_warp import Element, Source, restate

__all__ = ["function", "controller"]

#: an argument's Warp annotation -> (its shape, its kind)
_TYPES = {"S": ((), "f"), "bool": ((), "b"), "int": ((), "i"), "V": ((3,), "f"), "M": ((3, 3), "f")}


def _input(name: str, annotation: str) -> np.ndarray:
    shape, kind = _TYPES[annotation]
    if kind != "f":
        out = np.empty((), dtype=object)
        out[()] = Element(name, kind)
        return out
    return named(lambda i: name + ("" if not i else "[" + ", ".join(map(str, i)) + "]"), shape)


def _output(g: Source, x) -> str:
    x = np.asarray(x, dtype=object)
    if x.shape == ():
        e = x[()]
        return e.code if e.kind != "f" else as_float(g, e)
    codes = ", ".join(as_float(g, e) for e in x.reshape(-1))
    return {(3,): "V", (3, 3): "M"}[x.shape] + f"({codes})"


def source(name: str, fn, args, S64: bool) -> tuple[str, tuple]:
    """``(source, literals)`` of the Warp function ``name`` restating ``fn`` (see :func:`function`)."""
    import jax
    import jax.numpy as jnp

    dt = jnp.float64 if S64 else jnp.float32
    dtypes = {"f": dt, "b": jnp.bool_, "i": jnp.int32}
    specs = [jax.ShapeDtypeStruct(_TYPES[a][0], dtypes[_TYPES[a][1]]) for _, a in args]
    closed = jax.make_jaxpr(fn)(*specs)
    g = Source(S64)
    outs = restate(g, closed.jaxpr, [g.array(np.asarray(c)) for c in closed.consts], [_input(n, a) for n, a in args])
    rets = [_output(g, x) for x in outs]
    head = ", ".join(f"{n}: {a}" for n, a in args)
    body = "".join(x + "\n" for x in g.lines)
    return f"def {name}({head}):\n{body}    return {', '.join(rets)}\n", tuple(g.lits)


def function(S, name: str, fn, args):
    """The Warp function ``name`` of scalar type ``S`` restating the JAX function ``fn`` (no array
    parameters: what it closes over is written in as literals); ``args``: its arguments as ``(name,
    annotation)``, the annotation ``"S"``, ``"bool"``, ``"int"``, ``"V"`` (3-vector) or ``"M"`` (3x3)."""
    from ._common import warp

    src, lits = source(name, fn, args, S == warp().float64)
    return warp_functions(S, src, lits, f"{name}-{source_key(src, lits)}", [name])[name]


@functools.lru_cache(maxsize=None)
def controller(S, order: int):
    """``control(err, err_prev, h, step, hit) -> (accepted, next step, err_prev)``: the PI controller of
    a pair of controller order ``order`` (:func:`jaxrot.integrators.pairs.adapt`)."""
    from ..integrators.pairs import adapt

    return function(S, "control", lambda err, err_prev, h, step, hit: adapt(order, err, err_prev, h, step, hit),
                     [("err", "S"), ("err_prev", "S"), ("h", "S"), ("step", "S"), ("hit", "bool")])
