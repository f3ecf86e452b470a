"""A pair's accepted step and its derivatives, reverse and forward mode, generated from its JAX code for
the kernels' derivative passes (:mod:`jaxrot.kernels.adaptive_backward`).

The derivative of an error-controlled run is that of the steps it accepted (the controller's choice
of the next step carries none, :mod:`jaxrot.driver.adjoint`). One accepted step of a pair, from
fresh memory, is the map ::

    (R, Pi, F) -> (R', Pi')    R', Pi' = step_with_error(system(F), t, (R, Pi), init(...), h)[0]

where ``F`` holds the system's arrays raveled (the body's moments, the torque's parameters). Its
vector-Jacobian product (``jax.vjp``) and its Jacobian-vector product (``jax.jvp``) are traced at one
body's shapes and each written out as one Warp function by the same restatement as the forward
kernels (:func:`jaxrot.kernels.jaxpr_warp.restate`)::

    vjp(R, Pi, t, h, F, cR, cPi, X) -> (cR_in, cPi_in, cF)    cF a vector of len(F); X unused
    jvp(R, Pi, t, h, F, dR, dPi, dF) -> (dR_out, dPi_out, 0)  dF the tangent of F

so the derivative passes, like the forward one, are generated from the pair's single definition. Each
is compared once with ``jax.vjp``/``jax.jvp`` on a few random states (to 10^3 roundings of the largest term) before a
run uses it; what cannot be restated or does not agree is refused with the reason
(:class:`~jaxrot.kernels.jaxpr_warp.Unsupported`) and the run's derivatives come from the XLA loop.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from .jaxpr_inputs import as_float, elements, named, source_key, state, structure_key, warp_functions
from .jaxpr_warp import Source, Unsupported, restate

__all__ = ["Unsupported", "LoweredVJP", "lower_vjp", "vjp_reason", "vjp_func", "flat_system", "KINDS"]

#: the derivatives generated: reverse mode (``vjp``) and forward mode (``jvp``)
KINDS = ("vjp", "jvp")


@dataclasses.dataclass(frozen=True)
class LoweredVJP:
    """A pair's step derivative restated for one system's structure and one dtype: ``key`` names the
    generated function (``kind``: ``"vjp"`` or ``"jvp"``), ``n_flat`` the length of ``F`` (the system's
    arrays raveled)."""

    key: str
    n_flat: int
    kind: str = "vjp"


#: key -> (source, literals, len(F), kind)
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


def _derivative(step, kind: str):
    """The derivative of ``kind`` of ``step`` as a function of ``(R, Pi, t, h, F, u, w, X)``: ``u, w``
    the cotangents (``vjp``) or tangents (``jvp``) of ``R, Pi``; ``X`` the tangent of ``F`` (``jvp``)."""
    import jax
    import jax.numpy as jnp

    def vjp_fn(R, Pi, t, h, F, cR, cPi, X):
        _, pull = jax.vjp(lambda R, Pi, F: step(R, Pi, t, h, F), R, Pi, F)
        return pull((cR, cPi))

    def jvp_fn(R, Pi, t, h, F, dR, dPi, dF):
        _, (oR, oPi) = jax.jvp(lambda R, Pi, F: step(R, Pi, t, h, F), (R, Pi, F), (dR, dPi, dF))
        return oR, oPi, jnp.zeros_like(F)

    return vjp_fn if kind == "vjp" else jvp_fn


def _generate(pair, system, dtype, kind: str):
    import jax
    import jax.numpy as jnp

    F, unflatten = flat_system(system, dtype)
    if any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(pair)):
        raise Unsupported("a pair with traced arrays of its own")
    fn = _derivative(_accepted(pair, unflatten), kind)
    dt = jnp.dtype(dtype)
    sds = jax.ShapeDtypeStruct
    m, v, s = sds((3, 3), dt), sds((3,), dt), sds((), dt)
    n = int(F.shape[0])
    closed = jax.make_jaxpr(fn)(m, v, s, s, sds((n,), dt), m, v, sds((n,), dt))
    g = Source(dt == jnp.float64)
    consts = []
    for c in closed.consts:
        if isinstance(c, jax.core.Tracer):
            raise Unsupported("a value closed over inside someone's trace")
        consts.append(g.array(np.asarray(c)))
    t, R, Pi = state()
    h = named(lambda i: "h", ())
    Fe = elements("F", (n,), 0, dt)
    u = named(lambda i: f"u[{i[0]}, {i[1]}]", (3, 3))
    w = named(lambda i: f"w[{i[0]}]", (3,))
    X = elements("X", (n,), 0, dt)
    g.lines, g.n, g.cache = [], 0, {}
    outs = restate(g, closed.jaxpr, consts, [R, Pi, t, h, Fe, u, w, X])
    ret_R = [as_float(g, e) for e in np.asarray(outs[0]).reshape(-1)]
    ret_Pi = [as_float(g, e) for e in np.asarray(outs[1]).reshape(-1)]
    ret_F = [as_float(g, e) for e in np.asarray(outs[2]).reshape(-1)] or ["S(0.0)"]
    src = (f"def {kind}(R: M, Pi: V, t: S, h: S, F: wp.array(dtype=S), u: M, w: V, X: wp.array(dtype=S)):\n"
           + "".join(x + "\n" for x in g.lines)
           + f"    return M({', '.join(ret_R)}), V({', '.join(ret_Pi)}), F_T({', '.join(ret_F)})\n")
    key = source_key(src, g.lits)
    _SOURCES[key] = (src, tuple(g.lits), max(n, 1), kind)
    return LoweredVJP(key, n, kind)


def lower_vjp(pair, system, dtype, kind: str = "vjp") -> LoweredVJP:
    """Restate the derivative ``kind`` (``"vjp"`` or ``"jvp"``) of ``pair``'s accepted step for ``system``
    at ``dtype`` (checked against JAX's once, Warp installed); raises :class:`Unsupported` saying why it
    cannot be."""
    ck = structure_key((pair, system), np.dtype(dtype).name, kind)
    hit = _LOWERED.get(ck) if ck is not None else None
    if hit is None:
        try:
            hit = _generate(pair, system, dtype, kind)
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


def vjp_reason(pair, system, dtype, kind: str = "vjp") -> str | None:
    """Why ``pair``'s step derivative ``kind`` cannot be generated for ``system`` at ``dtype`` (None if it
    can)."""
    try:
        lower_vjp(pair, system, dtype, kind)
    except Unsupported as err:
        return str(err)
    return None


@functools.lru_cache(maxsize=None)
def vjp_func(S, key: str):
    """``(fn, F_T)``: the generated Warp function of ``key`` (``vjp`` or ``jvp``) for scalar type ``S`` and
    the vector type of its parameters' cotangent."""
    from ._common import warp

    src, lits, n, kind = _SOURCES[key]
    F_T = warp().types.vector(n, S)
    return warp_functions(S, src, lits, f"{kind}-{key}", [kind], F_T=F_T)[kind], F_T


@functools.lru_cache(maxsize=None)
def _check_kernel(S, key: str):
    from ._common import so3_funcs, warp

    wp = warp()
    c = so3_funcs(S)
    vjp, F_T = vjp_func(S, key)

    def one(R, Pi, cR, cPi, t, h, F, X, oR, oPi, oF):
        b = wp.tid()
        a, p, f = vjp(R[b], Pi[b], t, h, F, cR[b], cPi[b], X)
        oR[b] = a
        oPi[b] = p
        oF[b] = f

    # (annotations set here: this module's are strings, which Warp would look up among its globals)
    A = wp.array
    one.__annotations__ = dict(R=A(dtype=c.M), Pi=A(dtype=c.V), cR=A(dtype=c.M), cPi=A(dtype=c.V), t=S, h=S,
                               F=A(dtype=S), X=A(dtype=S), oR=A(dtype=c.M), oPi=A(dtype=c.V), oF=A(dtype=F_T))
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
        X = rng.normal(size=F.shape).astype(dtype)
        fn = _derivative(_accepted(pair, unflatten), low.kind)
        t = jnp.asarray(0.25, dtype)

        def ref(R, Pi, cR, cPi):
            return fn(R, Pi, t, jnp.asarray(h, dtype), F, cR, cPi, jnp.asarray(X))

        want = [np.asarray(x) for x in jax.vmap(ref)(*(jnp.asarray(x) for x in (R, Pi, cR, cPi)))]
        F = np.asarray(F)
    c = so3_funcs(S)
    _, F_T = vjp_func(S, low.key)
    kernel = _check_kernel(S, low.key)
    dev = "cpu"
    outs = [wp.zeros(n, dtype=c.M, device=dev), wp.zeros(n, dtype=c.V, device=dev), wp.zeros(n, dtype=F_T, device=dev)]
    ins = [wp.array(R, dtype=c.M, device=dev), wp.array(Pi, dtype=c.V, device=dev), wp.array(cR, dtype=c.M, device=dev),
           wp.array(cPi, dtype=c.V, device=dev), S(0.25), S(h), wp.array(np.concatenate([F, np.zeros(1, dtype)]),
                                                                        dtype=S, device=dev),
           wp.array(np.concatenate([X, np.zeros(1, dtype)]), dtype=S, device=dev)]
    wp.launch(kernel, dim=n, inputs=ins + outs, device=dev)
    got = [o.numpy() for o in outs]
    got[2] = got[2][:, :low.n_flat]
    names = ("R", "Pi", "F") if low.kind == "vjp" else ("R", "Pi")
    return disagreement(f"step derivative ({low.kind})", names, got[:len(names)], want[:len(names)], {}, n)
