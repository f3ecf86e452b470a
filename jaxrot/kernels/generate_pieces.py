"""The fused loop's own pieces generated from their JAX code, as a method's step is from its own
(:mod:`jaxrot.kernels.generate`): the PI controller (:func:`controller`, from
:func:`jaxrot.integrators.pairs.adapt`), an event's crossing test (:func:`crossing`) and its location
(:func:`locator`), from :mod:`jaxrot.integrators.dense_output`. :func:`function` writes a JAX function
of one body's scalars, vectors, matrices and parameter arrays out as a Warp function
(:func:`jaxrot.kernels.jaxpr_warp.restate`); the loop template (:mod:`jaxrot.kernels.loop`) calls it.
Inside the location the method's step is not written out again: two primitives stand for it and its
derivative in the step's length, and the code calls their generated Warp functions.
"""

import functools
import types

import numpy as np

from .jaxpr_inputs import as_float, elements, jaxpr_of, named, source_key, warp_functions
from .jaxpr_warp import Element, Source, Unsupported, restate

__all__ = ["function", "write", "argument", "controller", "crossing", "locator"]

#: an argument's Warp annotation -> (its shape, its kind)
_TYPES = {"S": ((), "f"), "bool": ((), "b"), "int": ((), "i"), "V": ((3,), "f"), "M": ((3, 3), "f")}


def argument(name: str, annotation: str, size: int, dtype) -> np.ndarray:
    """The elements of the argument ``name`` of a generated function: ``annotation`` one of
    :data:`_TYPES`' (read as ``name``, ``name[i]``, ``name[i, j]``), ``"vector"`` (``size`` numbers, a Warp
    vector) or ``"array"`` (a parameter array of ``size`` numbers)."""
    if annotation == "array":
        return elements(name, (size,), 0, dtype)
    shape, kind = ((size,), "f") if annotation == "vector" else _TYPES[annotation]
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


def write(name: str, head: str, closed, inputs, S64: bool, externals=None, *, g: Source | None = None,
          types=None) -> tuple[str, tuple]:
    """``(source, literals)`` of the Warp function ``def name(head)`` computing the closed jaxpr ``closed``
    (its constants written in as literals) from ``inputs`` (elements), returning its outputs: scalars,
    ``V`` and ``M`` by their shapes, or each built by its type's name in ``types``. ``g``: a writer
    whose literals the function shares with others of one source (``S64`` is then its own)."""
    if g is None:
        g = Source(S64)
    g.lines, g.n, g.cache = [], 0, {}
    g.externals = dict(externals or {})
    outs = restate(g, closed.jaxpr, [g.array(np.asarray(c)) for c in closed.consts], inputs)
    if types is None:
        rets = [_output(g, x) for x in outs]
    else:
        rets = [f"{ty}({', '.join([as_float(g, e) for e in np.asarray(x).reshape(-1)] or ['S(0.0)'])})"
                for x, ty in zip(outs, types)]
    return f"def {name}({head}):\n" + "".join(x + "\n" for x in g.lines) + f"    return {', '.join(rets)}\n", tuple(g.lits)


def source(name: str, fn, args, S64: bool, sizes=None, externals=None) -> tuple[str, tuple]:
    """``(source, literals)`` of the Warp function ``name`` restating ``fn`` (see :func:`function`)."""
    import jax
    import jax.numpy as jnp

    dt = jnp.float64 if S64 else jnp.float32
    dtypes = {"f": dt, "b": jnp.bool_, "i": jnp.int32}
    sizes = sizes or {}
    specs = [jax.ShapeDtypeStruct((sizes[n],), dt) if a == "array" else
             jax.ShapeDtypeStruct(_TYPES[a][0], dtypes[_TYPES[a][1]]) for n, a in args]
    head = ", ".join(f"{n}: {'wp.array(dtype=S)' if a == 'array' else a}" for n, a in args)
    return write(name, head, jaxpr_of(fn, *specs), [argument(n, a, sizes.get(n, 0), dt) for n, a in args], S64,
                 externals)


def function(S, name: str, fn, args, sizes=None, externals=None, env=None):
    """The Warp function ``name`` of scalar type ``S`` restating the JAX function ``fn`` (what it closes
    over written in as literals); ``args``: its arguments as ``(name, annotation)``, the annotation
    ``"S"``, ``"bool"``, ``"int"``, ``"V"`` (3-vector), ``"M"`` (3x3) or ``"array"`` (a parameter array of
    ``sizes[name]`` numbers, read as ``name[k]``); ``externals``: primitive name -> the writer of its
    call (:class:`~jaxrot.kernels.jaxpr_warp.Source`), calling the Warp functions of ``env``."""
    from ._common import warp

    src, lits = source(name, fn, args, S == warp().float64, sizes, externals)
    return warp_functions(S, src, lits, f"{name}-{source_key(src, lits)}", [name], **(env or {}))[name]


@functools.lru_cache(maxsize=None)
def controller(S, order: int):
    """``control(err, err_prev, h, step, hit) -> (accepted, next step, err_prev)``: the PI controller of
    a pair of controller order ``order`` (:func:`jaxrot.integrators.pairs.adapt`)."""
    from ..integrators.pairs import adapt

    return function(S, "control", lambda err, err_prev, h, step, hit: adapt(order, err, err_prev, h, step, hit),
                    [("err", "S"), ("err_prev", "S"), ("h", "S"), ("step", "S"), ("hit", "bool")])


@functools.lru_cache(maxsize=None)
def crossing(S, direction):
    """``crossed(ga, gb) -> bool``: whether an event condition's values at a step's two ends cross zero
    in ``direction`` (:func:`jaxrot.integrators.dense_output.crossed`)."""
    from ..integrators.dense_output import crossed

    return function(S, "crossed", lambda ga, gb: crossed(direction, ga, gb), [("ga", "S"), ("gb", "S")])


@functools.lru_cache(maxsize=None)
def _primitives():
    """``(step, step_dh)``: primitives standing for the method's step from fresh memory, ``(R, Pi, t, x)
    -> (R, Pi)`` after a step of length ``x``, and for it with its derivative in ``x``, ``-> (R, Pi, dR,
    dPi)`` (the first's JVP in ``x``), which the generated location calls as Warp functions."""
    from jax.extend.core import Primitive
    from jax.interpreters import ad

    step, dh = Primitive("jaxrot_method_step"), Primitive("jaxrot_method_step_dh")
    step.multiple_results = dh.multiple_results = True
    step.def_abstract_eval(lambda R, Pi, t, x: (R, Pi))
    dh.def_abstract_eval(lambda R, Pi, t, x: (R, Pi, R, Pi))

    def jvp(primals, tangents):
        if any(type(d) is not ad.Zero for d in tangents[:3]):
            raise Unsupported("a derivative of the method's step other than in its length")
        R1, Pi1, dR, dPi = dh.bind(*primals)
        return (R1, Pi1), (dR * tangents[3], dPi * tangents[3])

    ad.primitive_jvps[step] = jvp
    return step, dh


def _call(fname: str):
    """The writer of a call ``fname(R, Pi, t, x, J, P)`` of a generated Warp function (the method's step)."""
    def emit(g, eqn, ins):
        outs = [f"v{g.n + k}" for k in range(len(eqn.outvars))]
        g.n += len(outs)
        g.line(f"{', '.join(outs)} = {fname}({', '.join(_output(g, x) for x in ins)}, J, P)")
        return [named(lambda i, o=o: o + ("[" + ", ".join(map(str, i)) + "]" if i else ""), v.aval.shape)
                for o, v in zip(outs, eqn.outvars)]
    return emit


def _evaluate(jaxpr, flat, t, R, Pi):
    """``jaxpr`` (a restated torque's or condition's) at ``(t, R, Pi)``, its constants and further inputs
    read in order from the parameter vector ``flat``."""
    import jax

    vals, off = [], 0
    for v in [*jaxpr.constvars, *jaxpr.invars[3:]]:
        n = int(np.prod(v.aval.shape, dtype=int))
        vals.append(flat[off:off + n].reshape(v.aval.shape).astype(v.aval.dtype))
        off += n
    nc = len(jaxpr.constvars)
    return jax.core.eval_jaxpr(jaxpr, vals[:nc], t, R, Pi, *vals[nc:])[0]


def _size(jaxpr) -> int:
    return sum(int(np.prod(v.aval.shape, dtype=int)) for v in [*jaxpr.constvars, *jaxpr.invars[3:]])


@functools.lru_cache(maxsize=None)
def locator(S, torque_key: str, event_key: str, step=None, step_dh=None):
    """``locate(tk, h, R0, Pi0, R1, Pi1, J, P, Q) -> (t, R, Pi)``: the event's time and state in the
    crossing step ``[tk, tk + h]`` from ``(R0, Pi0)`` to ``(R1, Pi1)``, generated from
    :func:`jaxrot.integrators.dense_output.locate` with the condition and the torque of the restatements
    named by their keys, their parameters in that order in ``Q`` (``P``: the method's); with the method's generated ``step(R, Pi, t, x, J,
    P) -> (R, Pi)`` and ``step_dh`` (:func:`jaxrot.kernels.generate_dh.step_dh`), polished on its steps."""
    import jax.numpy as jnp

    from ..geometry.state import State
    from ..integrators import dense_output
    from ._common import warp
    from . import event_restate, transpile

    name = "float64" if S == warp().float64 else "float32"
    tj, ej = transpile.JAXPRS[torque_key, name], event_restate.JAXPRS[event_key, name]
    step_p, dh_p = _primitives()

    n_cond = max(_size(ej), 1)  # (the condition's parameter array is never empty: one 0 without parameters)

    def fn(tk, h, R0, Pi0, R1, Pi1, J, P, Q):
        torque = lambda t, R, Pi: _evaluate(tj, Q[n_cond:], t, R, Pi)  # noqa: E731
        system = types.SimpleNamespace(body=types.SimpleNamespace(J=J), torque=torque)
        cond = lambda t, s: _evaluate(ej, Q, t, s.R, s.Pi).astype(h.dtype)  # noqa: E731
        advance = None if step is None else (lambda system, t, s, x: State(*step_p.bind(s.R, s.Pi, t, x)))
        t_ev, st = dense_output.locate(cond, system, tk, h, State(R0, Pi0), State(R1, Pi1), jnp.asarray(True), advance)
        return t_ev, st.R, st.Pi

    args = [("tk", "S"), ("h", "S"), ("R0", "M"), ("Pi0", "V"), ("R1", "M"), ("Pi1", "V"), ("J", "V"), ("P", "array"),
            ("Q", "array")]
    return function(S, "locate", fn, args, {"P": 0, "Q": n_cond + _size(tj)},
                    {step_p.name: _call("one_step"), dh_p.name: _call("step_dh")},
                    {"one_step": step, "step_dh": step_dh})
