"""A pair's accepted step and its reverse-mode derivative, generated from its JAX code for the
kernels' backward pass (:mod:`jaxrot.kernels.adaptive_backward`).

The derivative of an error-controlled run is that of the steps it accepted (the controller's choice
of the next step carries none, :mod:`jaxrot.driver.adjoint`). One accepted step of a pair, from
fresh memory, is the map ::

    (R, Pi, F) -> (R', Pi')    R', Pi' = step_with_error(system(F), t, (R, Pi), init(...), h)[0]

where ``F`` holds the system's arrays raveled (the body's moments, the torque's parameters). Its
vector-Jacobian product is traced by ``jax.vjp`` at one body's shapes and written out as one Warp
function by the same restatement as the forward kernels (:func:`jaxrot.kernels.jaxpr_warp.restate`)::

    vjp(R, Pi, t, h, F, cR, cPi) -> (cR_in, cPi_in, cF)    cF a vector of len(F)

so the backward pass, like the forward one, is generated from the pair's single definition. It is
compared once with ``jax.vjp`` on a few random states (to 10^3 roundings of the largest term) before a
run uses it; what cannot be restated or does not agree is refused with the reason
(:class:`~jaxrot.kernels.jaxpr_warp.Unsupported`) and the run's derivatives come from the XLA loop.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from .jaxpr_inputs import as_float, elements, named, source_key, state, structure_key, warp_functions
from .jaxpr_warp import Source, Unsupported, restate

__all__ = ["Unsupported", "LoweredVJP", "lower_vjp", "vjp_reason", "vjp_func", "flat_system"]


@dataclasses.dataclass(frozen=True)
class LoweredVJP:
    """A pair's step derivative restated for one system's structure and one dtype: ``key`` names the
    generated function, ``n_flat`` the length of ``F`` (the system's arrays raveled)."""

    key: str
    n_flat: int


#: key -> (source, literals, len(F))
_SOURCES: dict = {}
#: structure key -> LoweredVJP or the Unsupported
_LOWERED: dict = {}
#: (key, dtype name) -> None (agreed with jax.vjp) or why not
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


def _accepted(pair, unflatten):
    """One accepted step of ``pair`` from fresh memory, as a function of ``(R, Pi, t, h, F)``."""
    from ..geometry.state import State

    def step(R, Pi, t, h, F):
        system = unflatten(F)
        s = State(R, Pi)
        new = pair.step_with_error(system, t, s, pair.init(system, t, s, h), h)[0]
        return new.R, new.Pi

    return step


def _generate(pair, system, dtype):
    import jax
    import jax.numpy as jnp

    F, unflatten = flat_system(system, dtype)
    if any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(pair)):
        raise Unsupported("a pair with traced arrays of its own")
    step = _accepted(pair, unflatten)

    def vjp_fn(R, Pi, t, h, F, cR, cPi):
        _, pull = jax.vjp(lambda R, Pi, F: step(R, Pi, t, h, F), R, Pi, F)
        return pull((cR, cPi))

    dt = jnp.dtype(dtype)
    sds = jax.ShapeDtypeStruct
    m, v, s = sds((3, 3), dt), sds((3,), dt), sds((), dt)
    n = int(F.shape[0])
    closed = jax.make_jaxpr(vjp_fn)(m, v, s, s, sds((n,), dt), m, v)
    g = Source(dt == jnp.float64)
    consts = []
    for c in closed.consts:
        if isinstance(c, jax.core.Tracer):
            raise Unsupported("a value closed over inside someone's trace")
        consts.append(g.array(np.asarray(c)))
    t, R, Pi = state()
    h = named(lambda i: "h", ())
    Fe = elements("F", (n,), 0, dt)
    cR = named(lambda i: f"cR[{i[0]}, {i[1]}]", (3, 3))
    cPi = named(lambda i: f"cPi[{i[0]}]", (3,))
    g.lines, g.n, g.cache = [], 0, {}
    outs = restate(g, closed.jaxpr, consts, [R, Pi, t, h, Fe, cR, cPi])
    ret_R = [as_float(g, e) for e in np.asarray(outs[0]).reshape(-1)]
    ret_Pi = [as_float(g, e) for e in np.asarray(outs[1]).reshape(-1)]
    ret_F = [as_float(g, e) for e in np.asarray(outs[2]).reshape(-1)] or ["S(0.0)"]
    src = ("def vjp(R: M, Pi: V, t: S, h: S, F: wp.array(dtype=S), cR: M, cPi: V):\n"
           + "".join(x + "\n" for x in g.lines)
           + f"    return M({', '.join(ret_R)}), V({', '.join(ret_Pi)}), F_T({', '.join(ret_F)})\n")
    key = source_key(src, g.lits)
    _SOURCES[key] = (src, tuple(g.lits), max(n, 1))
    return LoweredVJP(key, n)


def lower_vjp(pair, system, dtype) -> LoweredVJP:
    """Restate the derivative of ``pair``'s accepted step for ``system`` at ``dtype`` (checked against
    ``jax.vjp`` once, Warp installed); raises :class:`Unsupported` saying why it cannot be."""
    ck = structure_key((pair, system), np.dtype(dtype).name, "vjp")
    hit = _LOWERED.get(ck) if ck is not None else None
    if hit is None:
        try:
            hit = _generate(pair, system, dtype)
            from .generate_checks import verdict

            verdict(_CHECKED, (hit.key, np.dtype(dtype).name), lambda: _compare(pair, system, dtype, hit),
                    "the generated step derivative")
        except Unsupported as err:
            hit = err
        except Exception as err:  # noqa: BLE001 - any other failure: the derivatives come from the XLA loop
            hit = Unsupported(f"{type(err).__name__}: {err}")
        if ck is not None:
            _LOWERED[ck] = hit
    if isinstance(hit, Unsupported):
        raise hit
    return hit


def vjp_reason(pair, system, dtype) -> str | None:
    """Why ``pair``'s step derivative cannot be generated for ``system`` at ``dtype`` (None if it can)."""
    try:
        lower_vjp(pair, system, dtype)
    except Unsupported as err:
        return str(err)
    return None


@functools.lru_cache(maxsize=None)
def vjp_func(S, key: str):
    """``(vjp, F_T)``: the generated Warp function of ``key`` for scalar type ``S`` and the vector type
    of its parameters' cotangent."""
    from ._common import warp

    src, lits, n = _SOURCES[key]
    F_T = warp().types.vector(n, S)
    return warp_functions(S, src, lits, f"vjp-{key}", ["vjp"], F_T=F_T)["vjp"], F_T


@functools.lru_cache(maxsize=None)
def _check_kernel(S, key: str):
    from ._common import so3_funcs, warp

    wp = warp()
    c = so3_funcs(S)
    vjp, F_T = vjp_func(S, key)

    def one(R, Pi, cR, cPi, t, h, F, oR, oPi, oF):
        b = wp.tid()
        a, p, f = vjp(R[b], Pi[b], t, h, F, cR[b], cPi[b])
        oR[b] = a
        oPi[b] = p
        oF[b] = f

    # (annotations set here: this module's are strings, which Warp would look up among its globals)
    A = wp.array
    one.__annotations__ = dict(R=A(dtype=c.M), Pi=A(dtype=c.V), cR=A(dtype=c.M), cPi=A(dtype=c.V), t=S, h=S,
                               F=A(dtype=S), oR=A(dtype=c.M), oPi=A(dtype=c.V), oF=A(dtype=F_T))
    one.__name__ = one.__qualname__ = f"vjp_check_{key}_{S.__name__}"
    return wp.kernel(one, module="unique", enable_backward=False)


def _compare(pair, system, dtype, low: LoweredVJP):
    import jax
    import jax.numpy as jnp

    from ._common import so3_funcs, warp
    from .generate_checks import disagreement, sample_states

    wp = warp()
    S = {np.dtype(np.float32): wp.float32, np.dtype(np.float64): wp.float64}[np.dtype(dtype)]
    n = 4
    with jax.ensure_compile_time_eval():
        F, unflatten = flat_system(system, dtype)
        if isinstance(F, jax.core.Tracer):
            return None  # (the values are known only inside the trace: compiled when first used)
        _, R, Pi, h = sample_states(system, dtype, n)
        rng = np.random.default_rng(1)
        cR, cPi = rng.normal(size=(n, 3, 3)).astype(dtype), rng.normal(size=(n, 3)).astype(dtype)
        step = _accepted(pair, unflatten)
        t = jnp.asarray(0.25, dtype)

        def ref(R, Pi, cR, cPi):
            _, pull = jax.vjp(lambda R, Pi, F: step(R, Pi, t, jnp.asarray(h, dtype), F), R, Pi, F)
            return pull((cR, cPi))

        want = [np.asarray(x) for x in jax.vmap(ref)(*(jnp.asarray(x) for x in (R, Pi, cR, cPi)))]
        F = np.asarray(F)
    c = so3_funcs(S)
    _, F_T = vjp_func(S, low.key)
    kernel = _check_kernel(S, low.key)
    dev = "cpu"
    outs = [wp.zeros(n, dtype=c.M, device=dev), wp.zeros(n, dtype=c.V, device=dev), wp.zeros(n, dtype=F_T, device=dev)]
    ins = [wp.array(R, dtype=c.M, device=dev), wp.array(Pi, dtype=c.V, device=dev), wp.array(cR, dtype=c.M, device=dev),
           wp.array(cPi, dtype=c.V, device=dev), S(0.25), S(h), wp.array(np.concatenate([F, np.zeros(1, dtype)]),
                                                                        dtype=S, device=dev)]
    wp.launch(kernel, dim=n, inputs=ins + outs, device=dev)
    got = [o.numpy() for o in outs]
    got[2] = got[2][:, :low.n_flat]
    return disagreement("step derivative", ("R", "Pi", "F"), got, want, {}, n)
