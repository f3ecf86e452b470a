"""A pair's accepted step and its reverse-mode derivative, generated from its JAX code for the kernels'
backward pass (:mod:`jaxrot.kernels.adaptive_backward`; forward mode carries its tangents in the run
itself, :mod:`jaxrot.kernels.adaptive_tangents`).

The derivative of an error-controlled run is that of the steps it accepted (the controller's choice
of the next step carries none, :mod:`jaxrot.driver.adjoint`). One accepted step of a pair is the map ::

    (R, Pi, m, F) -> (R', Pi', m')    (R', Pi'), m' = step_with_error(system(F), t, (R, Pi), m, h)[:2]

where ``F`` holds the system's arrays raveled (the body's moments, the torque's parameters) and ``m``
the pair's memory raveled (Buss's world momentum), ``m_0 = init(system(F), t0, (R0, Pi0))``. A pair
that keeps no memory, or whose kernel takes every attempt from fresh memory, has ``m`` of one unused
number and takes ``init`` inside the step. The step's vector-Jacobian product (``jax.vjp``), with
those of ``init`` and the memory's update, are traced at one body's shapes and written out as Warp
functions by the same restatement as the forward kernels (:func:`jaxrot.kernels.jaxpr_warp.restate`)::

    vjp(R, Pi, m, t, h, F, cR, cPi, cm) -> (cR, cPi, cm, cF)      cF a vector of len(F)
    init_vjp(R, Pi, t, F, cm) -> (cR, cPi, cF)
    minit(R, Pi, t, F) -> m;  mstep(R, Pi, m, t, h, F) -> m'      the memory along the recorded steps
    fstep(R, Pi, m, t, h, F) -> (R', Pi', m')                    the step itself, where states are recomputed

so the backward pass, like the forward one, is generated from the pair's single definition. Each
source is compared once with JAX on a few random states (to 10^3 roundings of the largest term) before
a run uses it; what cannot be restated or does not agree is refused with the reason
(:class:`~jaxrot.kernels.jaxpr_warp.Unsupported`) and the run's derivatives come from the XLA loop.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from .generate_pieces import argument, write
from .jaxpr_inputs import jaxpr_of, source_key, structure_key, warp_functions
from .jaxpr_calls import counted_lines
from .jaxpr_warp import MAX_LINES, Source, Unsupported

__all__ = ["Unsupported", "LoweredVJP", "lower_vjp", "vjp_reason", "vjp_funcs", "flat_system", "carried", "recomputes",
           "keeps_memory"]


@dataclasses.dataclass(frozen=True)
class LoweredVJP:
    """A pair's step derivative restated for one system's structure and one dtype: ``key`` names the
    generated functions, ``n_flat`` the length of ``F`` (the system's arrays raveled), ``n_mem`` that of
    ``m`` (at least 1)."""

    key: str
    n_flat: int
    n_mem: int = 1


#: key -> (source, literals, len(F) (at least 1), len(m), whether the memory is carried, whether the step is kept)
_SOURCES: dict = {}
#: structure key -> LoweredVJP or the Unsupported
_LOWERED: dict = {}
#: (key, dtype name) -> None (agreed with JAX) or why not
_CHECKED: dict = {}


def flat_system(system, dtype):
    """``(F, unflatten)``: the system's array leaves raveled into one vector of ``dtype`` and the
    function taking such a vector back to the system (its other leaves as given)."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    arrays, static = eqx.partition(system, eqx.is_array)
    leaves, tdef = jax.tree_util.tree_flatten(arrays)
    shapes = [jnp.shape(x) for x in leaves]
    sizes = [int(np.prod(s, dtype=int)) for s in shapes]
    F = jnp.concatenate([jnp.ravel(x).astype(dtype) for x in leaves]) if leaves else jnp.zeros((0,), dtype)

    def unflatten(flat):
        parts, off = [], 0
        for shape, size, x in zip(shapes, sizes, leaves):
            parts.append(flat[off:off + size].reshape(shape).astype(x.dtype))
            off += size
        return eqx.combine(jax.tree_util.tree_unflatten(tdef, parts), static)

    return F, unflatten


def _pieces(pair, unflatten, carried: bool, dtype, F0):
    """``(minit, step, n_mem)``: the memory at the start, ``minit(R, Pi, t, F) -> m``, and one accepted
    step ``step(R, Pi, m, t, h, F) -> (R', Pi', m')`` of ``pair``, ``m`` raveled (one unused number
    where the memory is not carried); ``F0`` a value of ``F`` (its shape is what is read)."""
    import jax.numpy as jnp
    from jax.flatten_util import ravel_pytree

    from ..geometry.state import State

    def mem0(R, Pi, t, F, h):
        return pair.init(unflatten(F), t, State(R, Pi), h)

    z = jnp.zeros((), dtype)
    eye = jnp.eye(3, dtype=dtype)
    if carried:
        closed = jaxpr_of(lambda h: ravel_pytree(mem0(eye, jnp.ones(3, dtype), z, F0, h))[0], z)
        if any(closed.jaxpr.invars[0] in e.invars for e in closed.jaxpr.eqns) or closed.jaxpr.invars[0] in closed.jaxpr.outvars:
            raise Unsupported("a carried memory that depends on the first step's length")
        flat0, unravel = ravel_pytree(mem0(eye, jnp.ones(3, dtype), z, F0, z))
        n_mem = int(flat0.shape[0])
    else:
        n_mem = 1

    def minit(R, Pi, t, F):
        if not carried:
            return jnp.zeros((1,), dtype)
        return ravel_pytree(mem0(R, Pi, t, F, jnp.ones((), dtype)))[0].astype(dtype)

    # (a pair's accepted step, or a constant-step method's step: both return the new state and memory first)
    advance = getattr(pair, "step_with_error", None) or pair.step

    def step(R, Pi, m, t, h, F):
        system = unflatten(F)
        s = State(R, Pi)
        mem = unravel(m) if carried else pair.init(system, t, s, h)
        new, mem1 = advance(system, t, s, mem, h)[:2]
        return new.R, new.Pi, (ravel_pytree(mem1)[0].astype(dtype) if carried else m)

    return minit, step, n_mem


def keeps_memory(pair, system, dtype) -> bool:
    """Whether ``pair`` (or a constant-step method) carries a memory from step to step: an ``init`` that
    returns arrays (Buss's world momentum)."""
    import jax
    import jax.numpy as jnp

    from ..geometry.state import State

    s0 = State(jnp.eye(3, dtype=dtype), jnp.ones(3, dtype))
    return bool(jax.tree_util.tree_leaves(
        jax.eval_shape(lambda s: pair.init(system, jnp.zeros((), dtype), s, jnp.ones((), dtype)), s0)))


def _functions(minit, step, recompute: bool = False):
    """name -> (JAX function, its argument names and types, its outputs' types) of the source
    (``recompute``: with the step itself, for passes that recompute the states between checkpoints)."""
    import jax

    def vjp(R, Pi, m, t, h, F, cR, cPi, cm):
        _, pull = jax.vjp(lambda R, Pi, m, F: step(R, Pi, m, t, h, F), R, Pi, m, F)
        return pull((cR, cPi, cm))

    def init_vjp(R, Pi, t, F, cm):
        _, pull = jax.vjp(lambda R, Pi, F: minit(R, Pi, t, F), R, Pi, F)
        return pull(cm)

    def mstep(R, Pi, m, t, h, F):
        return (step(R, Pi, m, t, h, F)[2],)

    def minit1(R, Pi, t, F):
        return (minit(R, Pi, t, F),)

    state_args = "R M Pi V m MT t S h S F P"
    fns = {"minit": (minit1, "R M Pi V t S F P", ("MT",)), "mstep": (mstep, state_args, ("MT",))}
    if recompute:
        fns["fstep"] = (step, state_args, ("M", "V", "MT"))
    fns["vjp"] = (vjp, state_args + " cR M cPi V cm MT", ("M", "V", "MT", "F_T"))
    fns["init_vjp"] = (init_vjp, "R M Pi V t S F P cm MT", ("M", "V", "F_T"))
    return fns


def _generate(pair, system, dtype, carried: bool, recompute: bool):
    import jax
    import jax.numpy as jnp

    F, unflatten = flat_system(system, dtype)
    if any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(pair)):
        raise Unsupported("a pair with traced arrays of its own")
    n = int(F.shape[0])
    dt = jnp.dtype(dtype)
    sds = jax.ShapeDtypeStruct
    minit, step, n_mem = _pieces(pair, unflatten, carried, dt, jnp.zeros((n,), dt))
    shapes = {"M": (3, 3), "V": (3,), "S": (), "P": (n,), "MT": (n_mem,)}
    g = Source(dt == jnp.float64)
    parts = []
    for name, (fn, sig, outs_t) in _functions(minit, step, recompute).items():
        names, tys = sig.split()[::2], sig.split()[1::2]
        closed = jaxpr_of(fn, *(sds(shapes[ty], dt) for ty in tys), differentiates=name.endswith("vjp"))
        if any(isinstance(c, jax.core.Tracer) for c in closed.consts):
            raise Unsupported("a value closed over inside someone's trace")
        # (the system's arrays: a parameter array; the memory: a Warp vector of its length)
        ins = [argument(a, {"P": "array", "MT": "vector"}.get(ty, ty), {"P": n, "MT": n_mem}.get(ty, 0), dt)
               for a, ty in zip(names, tys)]
        types = {"M": "M", "V": "V", "S": "S", "P": "wp.array(dtype=S)", "MT": "MT"}
        head = ", ".join(f"{a}: {types[ty]}" for a, ty in zip(names, tys))
        parts.append(write(name, head, closed, ins, None, g=g, types=outs_t)[0])
    src = "\n\n".join(parts)
    if counted_lines(src)[1] >= MAX_LINES:  # (the compiler unrolls a short loop: as long to compile)
        raise Unsupported(f"a derivative longer than {MAX_LINES} lines, its loops counted at each pass (compiling "
                          "and checking it would take minutes)")
    key = source_key(src, g.lits)
    _SOURCES[key] = (src, tuple(g.lits), max(n, 1), n_mem, bool(carried), bool(recompute))
    return LoweredVJP(key, n, n_mem)


def lower_vjp(pair, system, dtype, carried: bool = False, recompute: bool = False) -> LoweredVJP:
    """Restate the vector-Jacobian product of ``pair``'s accepted step for ``system`` at ``dtype``, its
    memory ``carried`` from step to step or fresh at each, with the step itself where the pass
    ``recompute``s the states between checkpoints (checked against JAX once, Warp installed); raises
    :class:`Unsupported` saying why it cannot be."""
    ck = structure_key((pair, system), np.dtype(dtype).name, bool(carried), bool(recompute))
    hit = _LOWERED.get(ck) if ck is not None else None
    if hit is None:
        try:
            hit = _generate(pair, system, dtype, carried, recompute)
            from .generate_checks import verdict

            verdict(_CHECKED, (hit.key, np.dtype(dtype).name),
                    lambda: _compare(pair, system, dtype, hit, carried, recompute),
                    "the generated step derivative")
        except Unsupported as err:
            hit = err
        except Exception as err:  # noqa: BLE001 - any other failure: the derivatives come from the XLA loop
            hit = Unsupported(f"{type(err).__name__}: {err}")
        if ck is not None and not getattr(hit, "transient", False):
            _LOWERED[ck] = hit
    if isinstance(hit, Unsupported):
        raise hit
    return hit


def vjp_reason(pair, system, dtype, carried: bool = False) -> str | None:
    """Why ``pair``'s step derivative cannot be generated for ``system`` at ``dtype`` (None if it can)."""
    try:
        lower_vjp(pair, system, dtype, carried)
    except Unsupported as err:
        return str(err)
    return None


def carried(key: str) -> bool:
    """Whether the generated functions of ``key`` carry the pair's memory from step to step."""
    return _SOURCES[key][4]


def recomputes(key: str) -> bool:
    """Whether the generated functions of ``key`` include the step itself (``fstep``)."""
    return _SOURCES[key][5]


@functools.lru_cache(maxsize=None)
def vjp_funcs(S, key: str):
    """``(functions by name, F_T, MT)``: the generated Warp functions of ``key`` for scalar type ``S``,
    the vector types of the parameters' cotangent and of the memory."""
    from ._common import warp

    src, lits, n, n_mem, _, recompute = _SOURCES[key]
    wp = warp()
    F_T, MT = wp.types.vector(n, S), wp.types.vector(n_mem, S)
    names = ["minit", "mstep", "vjp", "init_vjp"] + (["fstep"] if recompute else [])
    return warp_functions(S, src, lits, f"vjp-{key}", names, F_T=F_T, MT=MT), F_T, MT


@functools.lru_cache(maxsize=None)
def _check_kernel(S, key: str):
    """One call of each generated function per test state (:func:`_compare`)."""
    from ._common import so3_funcs, warp

    wp = warp()
    c = so3_funcs(S)
    fns, F_T, MT = vjp_funcs(S, key)
    RECOMPUTE = _SOURCES[key][5]
    main, init_d, minit, mstep = fns["vjp"], fns["init_vjp"], fns["minit"], fns["mstep"]
    fstep = fns.get("fstep", mstep)

    def one(R, Pi, m, u, w, um, t, h, F, oR, oPi, oM, oF, oM0, oM1, oIR, oIPi, oIF, oSR, oSPi, oSM):
        b = wp.tid()
        oM0[b] = minit(R[b], Pi[b], t, F)
        oM1[b] = mstep(R[b], Pi[b], m[b], t, h, F)
        if wp.static(RECOMPUTE):
            sR, sPi, sM = fstep(R[b], Pi[b], m[b], t, h, F)
            oSR[b] = sR
            oSPi[b] = sPi
            oSM[b] = sM
        a, p, q, f = main(R[b], Pi[b], m[b], t, h, F, u[b], w[b], um[b])
        oF[b] = f
        ia, ip, iF = init_d(R[b], Pi[b], t, F, um[b])
        oIR[b] = ia
        oIPi[b] = ip
        oIF[b] = iF
        oR[b] = a
        oPi[b] = p
        oM[b] = q

    # (annotations set here: this module's are strings, which Warp would look up among its globals)
    A = wp.array
    one.__annotations__ = dict(R=A(dtype=c.M), Pi=A(dtype=c.V), m=A(dtype=MT), u=A(dtype=c.M), w=A(dtype=c.V),
                               um=A(dtype=MT), t=S, h=S, F=A(dtype=S), oR=A(dtype=c.M), oPi=A(dtype=c.V),
                               oM=A(dtype=MT), oF=A(dtype=F_T), oM0=A(dtype=MT), oM1=A(dtype=MT), oIR=A(dtype=c.M),
                               oIPi=A(dtype=c.V), oIF=A(dtype=F_T), oSR=A(dtype=c.M), oSPi=A(dtype=c.V),
                               oSM=A(dtype=MT))
    one.__name__ = one.__qualname__ = f"vjp_check_{key}_{S.__name__}"
    # in the module of the kernels that use these functions, which are defined first: one compilation
    from .adaptive_backward import define_kernels, derivative_module

    dtype_name = "float64" if S is wp.float64 else "float32"
    check = wp.kernel(one, module=derivative_module(dtype_name, key), enable_backward=False)
    define_kernels(dtype_name, key)
    return check


def _compare(pair, system, dtype, low: LoweredVJP, carried: bool, recompute: bool = False):
    import jax
    import jax.numpy as jnp

    from ._common import so3_funcs, warp
    from .generate_checks import disagreement, reference_values, sample_states

    wp = warp()
    S = {np.dtype(np.float32): wp.float32, np.dtype(np.float64): wp.float64}[np.dtype(dtype)]
    n = 4
    with jax.ensure_compile_time_eval():
        F, unflatten = flat_system(system, dtype)
        if isinstance(F, jax.core.Tracer):
            return None  # (the values are known only inside the trace: compiled when first used)
        minit, step, n_mem = _pieces(pair, unflatten, carried, jnp.dtype(dtype), F)
        _, R, Pi, h = sample_states(system, dtype, n)
        rng = np.random.default_rng(1)
        u, w = rng.normal(size=(n, 3, 3)).astype(dtype), rng.normal(size=(n, 3)).astype(dtype)
        um = rng.normal(size=(n, n_mem)).astype(dtype)
        t, hh = jnp.asarray(0.25, dtype), jnp.asarray(h, dtype)
        m = reference_values(lambda R, Pi: minit(R, Pi, t, F), R, Pi)
        fns = {k: f for k, (f, _, _) in _functions(minit, step, recompute).items()}

        def ref(R, Pi, m, u, w, um):
            M0, = fns["minit"](R, Pi, t, F)
            M1, = fns["mstep"](R, Pi, m, t, hh, F)
            stepped = tuple(fns["fstep"](R, Pi, m, t, hh, F)) if recompute else ()
            return (*fns["vjp"](R, Pi, m, t, hh, F, u, w, um), M0, M1, *fns["init_vjp"](R, Pi, t, F, um), *stepped)

        want = list(reference_values(ref, R, Pi, m, u, w, um))
        F = np.asarray(F)
    c = so3_funcs(S)
    _, F_T, MT = vjp_funcs(S, low.key)
    kernel = _check_kernel(S, low.key)
    dev = "cpu"
    types = (c.M, c.V, MT, F_T, MT, MT, c.M, c.V, F_T, c.M, c.V, MT)
    outs = [wp.zeros(n, dtype=ty, device=dev) for ty in types]
    pad = np.zeros(1, dtype)
    ins = [wp.array(x, dtype=ty, device=dev) for x, ty in ((R, c.M), (Pi, c.V), (m, MT), (u, c.M), (w, c.V), (um, MT))]
    ins += [S(0.25), S(h), wp.array(np.concatenate([F, pad]), dtype=S, device=dev)]
    wp.launch(kernel, dim=n, inputs=ins + outs, device=dev)
    got = [o.numpy() for o in outs]
    stepped = got[9:] if recompute else []
    names = ("R", "Pi", "m", "F", "m0", "m1", "init R", "init Pi", "init F")
    got = got[:9]
    got[3], got[8] = got[3][:, :low.n_flat], got[8][:, :low.n_flat]
    if recompute:
        names, got = names + ("step R", "step Pi", "step m"), got + stepped
    return disagreement("step derivative", names, got, want, {}, n)
