"""A method's kernel generated from its own JAX code: ``init`` and ``step`` restated as Warp functions.

A method is defined once, by its JAX ``init`` and ``step`` (:class:`jaxrot.AbstractIntegrator`). Their
jaxprs, traced at one body's shapes with the method's and the system's arrays as inputs, are written
out by :func:`jaxrot.kernels.jaxpr_warp.restate` (one scalar local per array element) into three Warp
functions of one body, the pieces the fused loop template (:func:`jaxrot.kernels.fixed_loop.loop_kernel`)
calls::

    init(R, Pi, J, P, h) -> A                  the method's memory, flattened into a vector A
    step(R, Pi, A, t, h, J, P) -> (R, Pi, A)   one step (torque, derivatives, loops, as in the jaxpr)
    reason(Pi, A) -> int                       the step's RESULTS code (non-finite state, failed solve)

``P`` holds the array leaves of the method and of the system (the body's moments, the torque's
parameters), raveled in the run's dtype: they may be traced, and a new value needs no new kernel.
``A`` holds the memory's leaves and one more number, the step's ``converged`` flag. Python numbers
in the method or the system, and the arrays the functions close over, are written into the source
as literals. Nothing here knows any method: a method a user writes in their own file is generated
the same way.

The generated source is compiled by Warp once per text (kept on disk by Warp's kernel cache) and,
before a run uses it, compared once with the JAX step on a few random states (one step from
``init``): a restatement that does not compile or does not agree to 10^3 roundings is refused, and
the run stays on XLA. What cannot be restated (a primitive with no Warp counterpart: an SVD, a sort,
gathers by a state-dependent index, ...) raises :class:`~jaxrot.kernels.jaxpr_warp.Unsupported`
naming it.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from .jaxpr_inputs import as_float, elements, jaxpr_of, named, source_key, state, structure_key, warp_functions
from .jaxpr_calls import calls, counted_lines, function_names
from .jaxpr_warp import Source, Unsupported, kind_of, restate
from . import generate_dh

__all__ = ["Unsupported", "Lowered", "lower", "reason", "funcs", "polish_reason", "written_within", "SOLVE_FAILED",
           "NONFINITE_STATE"]

#: the :class:`jaxrot.RESULTS` codes a generated ``reason`` writes (the driver's, restated below it;
#: ``tests/test_kernels_generated.py`` checks they are the same)
SOLVE_FAILED = 1
NONFINITE_STATE = 2


@dataclasses.dataclass(frozen=True)
class Lowered:
    """A method restated for one system's structure and one dtype: ``key`` names the generated
    functions (a hash of the source and of the method's class), ``n_memory`` the length of the memory vector ``A``, ``params``
    the kernel's parameter array ``P`` (may be traced)."""

    key: str
    n_memory: int
    params: object


#: a source of up to this many lines counts as the cheapest kernels' body-step (``buss2p``'s ~500) in
#: splitting a batch over the cores; ``rkmk8``'s twice (as it costs, docs/benchmarks.md "Fused kernels")
STEP_LINES = 1000

#: key -> (source, literals, memory length, whether the step statistics are constant)
_SOURCES: dict[str, tuple[str, tuple, int]] = {}
#: structure key (:func:`_cache_key`) -> (key, memory length, constants to P) or the Unsupported
_LOWERED: dict = {}


def parts(method, system):
    import equinox as eqx

    return eqx.partition((method, system), eqx.is_array)


def _cache_key(method, system, dtype, *extra):
    """What the generated source depends on (:func:`~jaxrot.kernels.jaxpr_inputs.structure_key` of the
    method and the system), or ``None``."""
    return structure_key((method, system), np.dtype(dtype).name, *extra)


def _uses(jaxpr, var) -> bool:
    return any(var in e.invars for e in jaxpr.eqns) or var in jaxpr.outvars


class _TooLong(Exception):
    """More lines written than :class:`_Bounded`'s limit."""


class _Bounded(Source):
    """A source that stops once it holds ``limit`` lines (:func:`written_within`; lines written and
    undone, a loop tried and written out instead, do not count)."""

    def __init__(self, S64: bool, limit: int):
        super().__init__(S64)
        self.limit = limit

    def line(self, text: str):
        if len(self.lines) + self.elsewhere >= self.limit:
            raise _TooLong
        super().line(text)


def _generate(method, system, dtype, pair: bool = False, limit: int | None = None):
    """``(key, memory length, closed-over tracers)``: the source of ``init``, ``step`` and ``reason``
    (registered in :data:`_SOURCES`); with ``pair``, of ``init`` and ``attempt`` (an embedded pair's
    step with its scaled error, :func:`attempt_funcs`), its parameters read from ``P``; with ``limit``, :class:`_TooLong` once more than that many lines are written."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    from ..geometry.state import State

    arrays, static = parts(method, system)
    leaves, tdef = jax.tree_util.tree_flatten(arrays)
    sds = jax.ShapeDtypeStruct
    dt = jnp.dtype(dtype)
    specs = [sds(x.shape, x.dtype) for x in leaves]
    J = system.body.J
    if getattr(J, "shape", None) != (3,):
        raise Unsupported("a batch of bodies (J of shape (3,) is shared by a kernel's bodies)")

    def rebuild(flat):
        return eqx.combine(jax.tree_util.tree_unflatten(tdef, list(flat)), static)

    def init_fn(R, Pi, h, t0, flat):
        m, s = rebuild(flat)
        return jax.tree_util.tree_leaves(m.init(s, t0, State(R, Pi), h))

    one = (sds((3, 3), dt), sds((3,), dt), sds((), dt), sds((), dt))
    closed_init = jaxpr_of(init_fn, *one, specs)
    memory = [sds(v.aval.shape, v.aval.dtype) for v in closed_init.jaxpr.outvars]
    for v in memory:
        kind_of(v.dtype)  # (a memory of another type: Unsupported)
    mem_tdef = jax.tree_util.tree_structure(jax.eval_shape(
        lambda R, Pi, h, t0, flat: rebuild(flat)[0].init(rebuild(flat)[1], t0, State(R, Pi), h), *one, specs))

    def step_fn(t, R, Pi, A, h, flat):
        m, s = rebuild(flat)
        new, aux, stats = m.step(s, t, State(R, Pi), jax.tree_util.tree_unflatten(mem_tdef, list(A)), h)
        return (new.R, new.Pi, jax.tree_util.tree_leaves(aux), jnp.asarray(stats.newton_iters),
                jnp.asarray(stats.clamped), jnp.asarray(stats.converged))

    def attempt_fn(t, R, Pi, A, h, flat, rt, at):
        from ..physics.flow import pack_body

        m, s = rebuild(flat)
        new, aux, stats, y_err = m.step_with_error(s, t, State(R, Pi), jax.tree_util.tree_unflatten(mem_tdef, list(A)), h)
        err = m.error_norm(pack_body(R, Pi), pack_body(new.R, new.Pi), y_err, rt, at)
        return new.R, new.Pi, jax.tree_util.tree_leaves(aux), err

    scalar = sds((), dt)
    if pair:
        closed_step = jaxpr_of(attempt_fn, scalar, sds((3, 3), dt), sds((3,), dt), memory, scalar, specs,
                               scalar, scalar)
    else:
        closed_step = jaxpr_of(step_fn, scalar, sds((3, 3), dt), sds((3,), dt), memory, scalar, specs)
    if _uses(closed_init.jaxpr, closed_init.jaxpr.invars[3]):
        raise Unsupported("a memory (init) that depends on the start time")

    g = Source(dt == jnp.float64) if limit is None else _Bounded(dt == jnp.float64, limit)
    # (a long function called more than once, a splitting's exact flow: one Warp function, :mod:`.jaxpr_calls`)
    g.functions, g.called = [], calls(closed_step.jaxpr, out=calls(closed_init.jaxpr))
    # P: the arrays of the method and the system, then the functions' closed-over tracers; the body's
    # moments read from the kernel's J (held in registers) instead
    P, off = [], 0
    for x in leaves:
        if x is J:
            P.append(named(lambda i: f"J[{i[0]}]", (3,)))
        else:
            P.append(elements("P", x.shape, off, x.dtype))
            off += int(np.size(x)) if hasattr(x, "size") else int(np.prod(x.shape, dtype=int))
    traced = []

    def consts(closed):
        nonlocal off
        out = []
        for c in closed.consts:
            if isinstance(c, jax.core.Tracer):  # a value closed over inside someone's trace: a parameter
                out.append(elements("P", c.shape, off, c.dtype))
                off += int(np.prod(c.shape, dtype=int))
                traced.append(c)
            else:
                out.append(g.array(np.asarray(c)))
        return out

    t, R, Pi = state()
    h = named(lambda i: "h", ())

    # init
    g.lines, g.n, g.cache = [], 0, {}
    outs = restate(g, closed_init.jaxpr, consts(closed_init), [R, Pi, h, named(lambda i: "S(0.0)", ()), *P])
    flat_mem = [e for o in outs for e in np.asarray(o).reshape(-1)]
    n_mem = len(flat_mem) + 1
    ret = [*(as_float(g, e) for e in flat_mem), "S(1.0)"]
    init_src = ("def init(R: M, Pi: V, J: V, P: wp.array(dtype=S), h: S):\n" + "".join(x + "\n" for x in g.lines)
                + f"    return A_T({', '.join(ret)})\n")

    # step (a function of its own: nothing of init's is reused)
    g.lines, g.cache = [], {}
    A, off_a = [], 0
    for v in memory:
        A.append(elements("A", v.shape, off_a, v.dtype))
        off_a += int(np.prod(v.shape, dtype=int))
    extra = [named(lambda i: "rt", ()), named(lambda i: "at", ())] if pair else []
    outs = restate(g, closed_step.jaxpr, consts(closed_step), [t, R, Pi, *A, h, *P, *extra])
    if pair:
        mem1 = [e for o in outs[2:-1] for e in np.asarray(o).reshape(-1)]
        ret_R = [as_float(g, e) for e in np.asarray(outs[0]).reshape(-1)]
        ret_Pi = [as_float(g, e) for e in np.asarray(outs[1]).reshape(-1)]
        ret_A = [as_float(g, e) for e in mem1] + ["S(1.0)"]
        err = as_float(g, np.asarray(outs[-1]).reshape(()).item())
        step_src = ("def attempt(R: M, Pi: V, A: A_T, t: S, h: S, J: V, P: wp.array(dtype=S), rt: S, at: S):\n"
                    + "".join(x + "\n" for x in g.lines)
                    + f"    return M({', '.join(ret_R)}), V({', '.join(ret_Pi)}), A_T({', '.join(ret_A)}), {err}\n")
        reason_src, constant_stats = "", False
    else:
        step_src, reason_src, constant_stats = _step_source(g, outs, n_mem)
    src = "".join(f + "\n\n" for f in g.functions) + init_src + "\n\n" + step_src + "\n\n" + reason_src
    # (the method's class is part of the key: two classes whose steps write out alike may still differ in
    # their orders or their derivatives' rules, which the kernels built under the key take from it)
    cls = type(method)
    key = source_key(src + f"\n# {cls.__module__}.{cls.__qualname__}", g.lits)
    _SOURCES[key] = (src, tuple(g.lits), n_mem, constant_stats)
    generate_dh.register(key, rebuild, specs, dt, [t, R, Pi, h, *P])
    return key, n_mem, tuple(traced)




def polish_reason(method, system, dtype, pair: bool = False) -> str | None:
    """Why a fused run of ``method`` (a pair's attempt with ``pair``) cannot locate an event: one polished on the method's own steps (:func:`jaxrot.integrators.
    dense_output.polishes`) needs :func:`jaxrot.kernels.generate_dh.step_dh`. None if it can, or if the method's step itself
    cannot be restated (its own refusal says so)."""
    from ..integrators.dense_output import polishes

    if not polishes(getattr(method, "order", None)):
        return None
    try:
        key = _lowered(method, system, dtype, pair)[0]
    except Unsupported:
        return None
    why = generate_dh.dh_reason(key)
    return None if why is None else ("an event located on the method's own steps needs the step's derivative in "
                                     f"its length, which cannot be restated in a kernel ({why})")


def _step_source(g, outs, n_mem):
    """The source of ``step`` and ``reason`` from the restated step's outputs, and whether its
    statistics are constant."""
    R1, Pi1, iters, clamped, conv = outs[0], outs[1], outs[-3], outs[-2], outs[-1]
    mem1 = [e for o in outs[2:-3] for e in np.asarray(o).reshape(-1)]
    # the kernel writes no step statistics: they are kept where every step's are the same constants
    # (no solve, nothing clamped), as the trajectory's zeros then say
    stats = [np.asarray(x).reshape(()).item() for x in (iters, clamped, conv)]
    constant_stats = [e.value for e in stats] == [0, 0, True]
    ok = stats[2]
    ret_R = [as_float(g, e) for e in np.asarray(R1).reshape(-1)]
    ret_Pi = [as_float(g, e) for e in np.asarray(Pi1).reshape(-1)]
    ret_A = [as_float(g, e) for e in mem1] + [as_float(g, ok)]
    step_src = ("def step(R: M, Pi: V, A: A_T, t: S, h: S, J: V, P: wp.array(dtype=S)):\n"
                + "".join(x + "\n" for x in g.lines)
                + f"    return M({', '.join(ret_R)}), V({', '.join(ret_Pi)}), A_T({', '.join(ret_A)})\n")
    reason_src = ("def reason(Pi: V, A: A_T):\n"
                  "    code = int(0)\n"
                  "    if not wp.isfinite(Pi[0] + Pi[1] + Pi[2]):\n"
                  f"        code = int({NONFINITE_STATE})\n"
                  f"    elif A[{n_mem - 1}] == S(0.0):\n"
                  f"        code = int({SOLVE_FAILED})\n"
                  "    return code\n")
    return step_src, reason_src, constant_stats


def _lowered(method, system, dtype, pair: bool = False, event=None, alone: bool = False):
    ck = _cache_key(method, system, dtype, pair)
    hit = _LOWERED.get(ck) if ck is not None else None
    if isinstance(hit, Unsupported):
        raise hit
    if hit is None:
        try:
            hit = _WRITTEN.pop(ck, None) if ck is not None else None
            hit = hit or _generate(method, system, dtype, pair)
            from .generate_checks import check

            check(method, system, dtype, hit, pair, event, alone)
        except Unsupported as err:
            if ck is not None and not getattr(err, "transient", False):
                _LOWERED[ck] = err
            raise
        except Exception as err:  # noqa: BLE001 - any other failure: the XLA path runs the method as written
            err = Unsupported(f"{type(err).__name__}: {err}")
            if ck is not None:
                _LOWERED[ck] = err
            raise err from None
        if ck is not None and not hit[2]:
            _LOWERED[ck] = hit
    return hit


def lower_pair(pair, system, dtype) -> Lowered:
    """Restate an embedded pair's ``init`` and one attempt (``step_with_error`` and ``error_norm``) for
    ``system`` at ``dtype``, its parameters read from ``P`` (:func:`attempt_funcs`); raises
    :class:`Unsupported` as :func:`lower`."""
    key, n_mem, traced = _lowered(pair, system, dtype, True)
    return Lowered(key, n_mem, params(pair, system, dtype, traced))


#: sources written by :func:`written_within` (structure key -> what :func:`_generate` returns; checked by
#: :func:`_lowered` when a run takes them), and the (structure key, limit) pairs found longer or refused
_WRITTEN: dict = {}
_NOT_WITHIN: set = set()


def written_within(method, system, dtype, lines: int, pair: bool = True) -> bool:
    """Whether ``method``'s generated source for ``system`` at ``dtype`` (a pair's attempt,
    :func:`lower_pair`, or with ``pair=False`` its step, :func:`lower`) is at most ``lines`` lines long,
    written out no further than that and not compiled (False where it cannot be restated): a measure of
    what a first fused run compiles, cheap to take once more (:func:`~jaxrot.kernels.jaxpr_calls.counted_lines`'s ``compiled``)."""
    ck = _cache_key(method, system, dtype, pair)
    hit = _LOWERED.get(ck) if ck is not None else None
    if hit is None and ck is not None:
        hit = _WRITTEN.get(ck)
    if hit is None:
        if ck is not None and (ck, lines) in _NOT_WITHIN:
            return False
        try:
            hit = _generate(method, system, dtype, pair, lines)
        except (_TooLong, Unsupported):
            if ck is not None:
                _NOT_WITHIN.add((ck, lines))
            return False
        except Exception:  # noqa: BLE001 - whatever stops the restatement: not fused by default
            return False
        if ck is not None and not hit[2]:
            _WRITTEN[ck] = hit
    return not isinstance(hit, Unsupported) and counted_lines(_SOURCES[hit[0]][0])[1] <= lines


def pair_reason(pair, system, dtype, alone: bool = False) -> str | None:
    """Why ``pair`` has no generated attempt for ``system`` at ``dtype`` (``None`` if it has one);
    ``alone``: its check compiled in a module of its own (a run that launches another kernel than the
    pair's plain one)."""
    try:
        _lowered(pair, system, dtype, True, alone=alone)
    except Unsupported as err:
        return str(err)
    return None


@functools.lru_cache(maxsize=None)
def attempt_funcs(S, key: str):
    """``(init, attempt)``: the Warp functions of a generated pair, ``attempt(R, Pi, A, t, h, J, P, rt,
    at) -> (R, Pi, A, err)``, the higher-order result and the scaled error the controller accepts at
    most 1."""
    env = _compiled_env(S, key)
    return env["init"], env["attempt"]


def memory_length(key: str) -> int:
    """The length of a generated method's memory vector ``A`` (:class:`Lowered`'s ``n_memory``)."""
    return _SOURCES[key][2]


def memory_row(tree, dtype):
    """A memory as a generated kernel holds it (``A``): its leaves raveled in order, then the step's
    ``converged`` flag (1)."""
    import jax
    import jax.numpy as jnp

    leaves = [jnp.ravel(x).astype(dtype) for x in jax.tree_util.tree_leaves(tree)]
    return jnp.concatenate(leaves + [jnp.ones((1,), dtype)])


@functools.lru_cache(maxsize=None)
def attempt_types(S, key: str):
    """The Warp vector type of a generated method's memory ``A`` (:func:`memory_length` numbers)."""
    from ._common import warp

    return warp().types.vector(memory_length(key), S)


def lower(method, system, dtype) -> Lowered:
    """Restate ``method``'s ``init`` and ``step`` for ``system`` at ``dtype`` (float32 or float64), its
    parameters read from ``P`` (with or without an event: the dense output's torque reads its own
    from ``Q``, :mod:`jaxrot.kernels.fixed_loop`); raises :class:`Unsupported` naming what cannot be
    restated (or, Warp installed, a restatement that does not compile or does not agree with the JAX
    step)."""
    key, n_mem, traced = _lowered(method, system, dtype, False)
    return Lowered(key, n_mem, params(method, system, dtype, traced))


def split_weight(key: str) -> float:
    """A generated step's cost relative to the cheapest kernels' (``buss2p``), by which a CPU batch's
    body-steps count towards splitting it over the cores (:func:`jaxrot.kernels.host_threads.threads_for`):
    its ``run`` lines (:func:`~jaxrot.kernels.jaxpr_calls.counted_lines`) over :data:`STEP_LINES`, at least 1 (a Newton loop's lines once,
    every case of an ``if``/``elif`` chain though one runs: an estimate)."""
    return max(1.0, counted_lines(_SOURCES[key][0])[0] / STEP_LINES)


def params(method, system, dtype, traced=()):
    """The kernel's parameter array ``P``: the method's and the system's arrays but the body's moments,
    raveled in ``dtype``, then the closed-over traced values (a kernel array is never empty)."""
    import jax
    import jax.numpy as jnp

    arrays, _ = parts(method, system)
    J = system.body.J
    flat = [jnp.ravel(jnp.asarray(x)).astype(dtype) for x in jax.tree_util.tree_leaves(arrays) if x is not J]
    flat += [jnp.ravel(jnp.asarray(c)).astype(dtype) for c in traced]
    return jnp.concatenate(flat) if flat else jnp.zeros((1,), dtype)


def constant_stats(key: str) -> bool:
    """Whether every step of the generated method reports the same statistics (no Newton iterations,
    converged, nothing clamped): a fused run's zero statistics then lose nothing."""
    return _SOURCES[key][3]


def reason(method, system, dtype, event=None) -> str | None:
    """Why ``method`` has no generated kernel for ``system`` at ``dtype`` (``None`` if it has one);
    ``event``: checked on the kernel of a constant-step run with it (:func:`jaxrot.kernels.generate_checks.check`)."""
    try:
        _lowered(method, system, dtype, event=event)
    except Unsupported as err:
        return str(err)
    return None


@functools.lru_cache(maxsize=None)
def _compiled_env(S, key: str) -> dict:
    """The generated source of ``key`` for scalar type ``S``: its functions as Warp functions."""
    src, lits, _, _ = _SOURCES[key]
    names = [n for n in ("init", "step", "reason", "attempt") if f"def {n}(" in src] + function_names(src)
    return warp_functions(S, src, lits, f"method-{key}", names, A_T=attempt_types(S, key))


@functools.lru_cache(maxsize=None)
def funcs(S, key: str):
    """``(init, step, reason)``: the Warp functions of a generated method (by its ``key``), compiled
    once per scalar type."""
    env = _compiled_env(S, key)
    return env["init"], env["step"], env["reason"]
