"""A torque written as a plain JAX function, restated as a Warp function for the fused kernels.

A :class:`jaxrot.Torque` holds a Python function ``fn(t, R, Pi[, args])``; no compiled kernel can call
Python. Its ``jaxpr`` (``jax.make_jaxpr``: the primitives it applies to ``t``, ``R`` and ``Pi``) is
small and straight-line for the usual torques (damping, forcing, springs, gravity fields), so it is
written out here as Warp source, one scalar local per array element (3-vectors and 3x3 matrices
unrolled: the compiler keeps them in registers)::

    jaxpr  f:f64[3] = div e a ; g:f64[3] = dot_general d f ; ...
    Warp   v0 = (Pi[0] / P[0]) ; ... ; v3 = ((R[0, 0] * v0 + R[0, 1] * v1) + R[0, 2] * v2) ; ...

The function's array constants (closed-over arrays) and the torque's ``args`` leaves enter the kernel
in its parameter array ``P`` (so they keep their full precision and may be traced: ``jax.grad``
with respect to ``args`` goes through the pure-JAX reference, see :func:`jaxrot.kernels.fused_frames`);
scalar literals are written into the source. Element-wise arithmetic, comparisons and selects, the
elementary functions, reshapes, slices, concatenations, transposes, broadcasts, contractions
(``dot_general``), reductions and arg-extrema are restated; nested calls (``jit``, ``custom_jvp``,
``custom_vjp``, ``checkpoint``) are inlined; ``lax.cond`` evaluates every branch and selects; loops,
sorts and picks by a state-dependent index as for a method's step (:mod:`.jaxpr_warp`). Anything else
(a scatter by a state-dependent index, random numbers, ...) is :class:`Unsupported`: the run then stays
on XLA, where the function is called as written (:func:`jaxrot.kernels.supports` is ``False``;
:func:`reason` says why).

Each generated function is compiled by Warp once per source text (cached on disk like the other
kernels); the same function object traced at another dtype gives another source.
"""


import dataclasses
import functools

import numpy as np

from .generate_checks import reference_values, sample_points, verdict, within
from .jaxpr_inputs import as_float, elements, jaxpr_of, source_key, state, structure_key, warp_functions
from .jaxpr_warp import Source, Unsupported, kind_of, restate

__all__ = ["Unsupported", "Lowered", "lower", "key_of", "reason", "user_tau", "evaluate"]


@dataclasses.dataclass(frozen=True)
class Lowered:
    """A torque restated: ``key`` names its Warp function (a hash of ``source``), ``params`` its part of
    the kernel's parameter array (the function's array constants, then the torque's array leaves, raveled,
    in the run's dtype; may be traced)."""

    key: str
    source: str
    lits: tuple
    params: object


def _trace(torque, dtype):
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    arrays, static = eqx.partition(torque, eqx.is_array)
    if any(not jnp.issubdtype(x.dtype, jnp.floating) for x in jax.tree_util.tree_leaves(arrays)):
        raise Unsupported("a torque parameter that is not floating-point")

    def call(t, R, Pi, arrays):
        return eqx.combine(arrays, static)(t, R, Pi)

    sds = jax.ShapeDtypeStruct
    return jaxpr_of(call, sds((), dtype), sds((3, 3), dtype), sds((3,), dtype),
                    jax.tree_util.tree_map(lambda x: sds(x.shape, x.dtype), arrays))


_SOURCES: dict[str, tuple[str, tuple]] = {}
#: (key, dtype name) -> the torque's jaxpr, its constants and array leaves read from ``P`` (what the
#: dense output's generated code evaluates, :mod:`jaxrot.kernels.generate_pieces`)
JAXPRS: dict = {}


def _cache_key(torque, dtype):
    """What the generated source depends on: the function, the frame, the shapes of the torque's
    array leaves (not their values) and the values of its other leaves (Python numbers in ``args`` are
    written into the source); ``None`` where some part cannot be hashed."""
    return structure_key(torque, type(torque), getattr(torque, "fn", None), getattr(torque, "frame", None),
                         getattr(torque, "fn_takes_args", None), np.dtype(dtype).name)


#: lowered torques by :func:`_cache_key`: (key, source, literals, the function's constants). As for
#: ``jax.jit``, a function is traced once: arrays it reads from globals are taken at that first trace
_LOWERED: dict = {}


def lower(torque, dtype) -> Lowered:
    """Restate ``torque(t, R, Pi)`` (a :class:`jaxrot.Torque`) at ``dtype`` (``float32`` or ``float64``)
    as the source of a Warp function ``tau(t, R, Pi, P)`` (the world torque); raises
    :class:`Unsupported` (naming the primitive) where it cannot, or where (Warp installed) the
    restatement does not compile or does not agree with the function at random points."""
    key, src, lits, consts = _lowered(torque, dtype)
    return Lowered(key, src, lits, _params(torque, dtype, consts))


def _params(torque, dtype, consts):
    """The kernel's parameter array: the function's constants, then the torque's array leaves."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    leaves = jax.tree_util.tree_leaves(eqx.filter(torque, eqx.is_array))
    params = [jnp.ravel(jnp.asarray(x)).astype(dtype) for x in [*consts, *leaves]]
    return jnp.concatenate(params) if params else jnp.zeros((1,), dtype)  # (a kernel array is never empty)


def key_of(torque, dtype) -> str:
    """The ``key`` of :func:`lower` alone (no parameter array is built: cheap after the first call)."""
    return _lowered(torque, dtype)[0]


def _lowered(torque, dtype):
    import jax

    ck = _cache_key(torque, dtype)
    hit = _LOWERED.get(ck) if ck is not None else None
    if hit is None:
        try:
            hit = _generate(torque, dtype)
        except Unsupported:
            raise
        except Exception as err:  # noqa: BLE001 - any other failure: the XLA path runs the function as written
            raise Unsupported(f"{type(err).__name__}: {err}") from err
        _SOURCES[hit[0]] = hit[1:3]
        _check_restatement(torque, dtype, hit)
        if ck is not None and not any(isinstance(c, jax.core.Tracer) for c in hit[3]):
            _LOWERED[ck] = hit
    return hit


#: (key, dtype name) -> None (the restatement compiled and agreed) or why not
_CHECKED: dict = {}


def _check_restatement(torque, dtype, hit):
    """Compile the restatement once (Warp installed) and compare it with the function at six random
    points (where the parameters are concrete): a failed compilation or a disagreement beyond 1 000
    roundings of the value's size is :class:`Unsupported`, so the run stays on XLA rather than failing
    or running another torque."""
    import jax

    concrete = not any(isinstance(x, jax.core.Tracer) for x in [*jax.tree_util.tree_leaves(torque), *hit[3]])
    verdict(_CHECKED, (hit[0], np.dtype(dtype).name), lambda: _compare(torque, dtype, hit, concrete),
            "the restatement")


def _compare(torque, dtype, hit, concrete: bool):
    import jax

    t, R, Pi = sample_points(dtype)
    if not concrete:  # compile only (the values are traced)
        n_params = sum(int(np.size(c)) for c in hit[3]) + sum(
            int(np.size(x)) for x in jax.tree_util.tree_leaves(torque) if hasattr(x, "shape"))
        _run_restatement(hit[0], dtype, t, R, Pi, np.zeros(max(n_params, 1), dtype))
        return None
    with jax.ensure_compile_time_eval():
        got = _run_restatement(hit[0], dtype, t, R, Pi, np.asarray(_params(torque, dtype, hit[3])))
    want = reference_values(torque, t, R, Pi)
    scale = np.maximum(np.max(np.abs(np.where(np.isfinite(want), want, 0.0)), axis=1, keepdims=True), 1e-300)
    same = within(got, want, 1000 * np.finfo(dtype).eps * scale)
    if not np.all(same):
        i = int(np.argmin(np.all(same, axis=1)))
        return (f"the restatement differs from the function at a test point (t = {t[i]:.3g}: {got[i].tolist()} "
                f"against {want[i].tolist()})")
    return None


def _generate(torque, dtype):
    """``(key, source, literals, constants)`` of ``torque`` at ``dtype`` (see :func:`lower`)."""
    closed = _trace(torque, dtype)
    jaxpr = closed.jaxpr
    g = Source(np.dtype(dtype) == np.float64)
    offset = 0
    inputs = []
    for v in [*jaxpr.constvars, *jaxpr.invars[3:]]:
        if kind_of(v.aval.dtype) != "f":
            raise Unsupported("an integer or bool array constant")
        inputs.append(elements("P", v.aval.shape, offset, v.aval.dtype))
        offset += int(np.prod(v.aval.shape, dtype=int))
    t, R, Pi = state()
    nc = len(jaxpr.constvars)
    (out,) = restate(g, jaxpr, inputs[:nc], [t, R, Pi, *inputs[nc:]])
    if np.shape(out) != (3,):
        raise Unsupported(f"an output of shape {np.shape(out)}")
    codes = [as_float(g, x) for x in out]
    body = "\n".join(g.lines)
    src = (f"def tau(t: S, R: M, Pi: V, P: wp.array(dtype=S)):\n{body}\n"
           f"    return V({codes[0]}, {codes[1]}, {codes[2]})\n")
    key = source_key(src, g.lits)
    JAXPRS[key, np.dtype(dtype).name] = jaxpr
    return key, src, tuple(g.lits), tuple(closed.consts)


def reason(torque, dtype) -> str | None:
    """Why ``torque`` has no Warp restatement at ``dtype`` (``None`` if it has one)."""
    try:
        key_of(torque, dtype)
    except Unsupported as err:
        return str(err)
    return None


@functools.lru_cache(maxsize=None)
def user_tau(S, key: str):
    """The Warp function ``tau(t, R, Pi, P)`` of a lowered torque (by its ``key``), compiled once per
    scalar type."""
    src, lits = _SOURCES[key]
    return warp_functions(S, src, lits, f"torque-{key}", ["tau"])["tau"]


def evaluate(torque, t, R, Pi):
    """The restated torque at a batch of points, evaluated by Warp (to check a restatement against
    ``torque`` itself, e.g. ``jax.vmap(torque)(t, R, Pi)``).

    Args:
      torque: a :class:`jaxrot.Torque` that :func:`lower` restates.
      t, R, Pi: arrays of shapes (B,), (B, 3, 3), (B, 3), all of one floating dtype.

    Returns:
      a NumPy array (B, 3): the world torque at each point, computed in that dtype.
    """
    t, R, Pi = (np.asarray(x) for x in (t, R, Pi))
    low = lower(torque, R.dtype)
    return _run_restatement(low.key, R.dtype, t, R, Pi, np.asarray(low.params))


def _run_restatement(key: str, dtype, t, R, Pi, P):
    from ._common import so3_funcs, warp

    wp = warp()
    S = {np.dtype(np.float32): wp.float32, np.dtype(np.float64): wp.float64}[np.dtype(dtype)]
    kernel = _evaluator(S, key)
    c = so3_funcs(S)
    out = wp.zeros(t.shape[0], dtype=c.V, device="cpu")
    wp.launch(kernel, dim=t.shape[0], device="cpu",
              inputs=[wp.array(t, dtype=S, device="cpu"), wp.array(R, dtype=c.M, device="cpu"),
                      wp.array(Pi, dtype=c.V, device="cpu"), wp.array(P, dtype=S, device="cpu"), out])
    return out.numpy()


@functools.lru_cache(maxsize=None)
def _evaluator(S, key: str):
    from ._common import so3_funcs, warp

    wp = warp()
    c = so3_funcs(S)
    V, M = c.V, c.M
    tau = user_tau(S, key)

    def ev(t: wp.array(dtype=S), R: wp.array(dtype=M), Pi: wp.array(dtype=V), P: wp.array(dtype=S),
           out: wp.array(dtype=V)):
        i = wp.tid()
        out[i] = tau(t[i], R[i], Pi[i], P)

    ev.__name__ = ev.__qualname__ = f"evaluate_torque_{key}_{S.__name__}"
    return wp.kernel(ev, module="unique", enable_backward=False)
