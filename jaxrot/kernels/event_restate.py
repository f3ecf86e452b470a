"""An event condition written as a plain JAX function, restated as a Warp function for the fused
adaptive kernels (:mod:`jaxrot.kernels.adaptive`).

An event's ``cond_fn(t, state, args)`` (:class:`jaxrot.Event`; ``args`` is None) is traced at
``(t, R, Pi)`` to its jaxpr and written out by :func:`jaxrot.kernels.jaxpr_warp.restate`, as a
plain-function torque is (:mod:`jaxrot.kernels.transpile`), into a Warp function
``g(t, R, Pi, Q) -> S``: the function's closed-over arrays enter the kernel in the parameter array
``Q``, scalar literals are written into the source. What the torque restatement refuses (loops,
gathers by a traced index, scatters, random numbers, ...) is refused here the same way
(:class:`~jaxrot.kernels.jaxpr_warp.Unsupported`, and :func:`reason` names it); with Warp installed
each restatement is compiled once and compared with the function at six random points, and one that
differs by more than 1 000 roundings of the value's size is refused too.
"""

import functools

import numpy as np

from .generate_checks import reference_values, sample_points, verdict, within
from .jaxpr_inputs import as_float, elements, jaxpr_of, source_key, state, warp_functions
from .jaxpr_warp import Source, Unsupported, kind_of, restate

__all__ = ["Unsupported", "lower", "reason", "event_g", "evaluate"]

#: key -> (source, literals)
_SOURCES: dict[str, tuple[str, tuple]] = {}
#: (cond_fn, dtype name) -> (key, source, literals, constants)
_LOWERED: dict = {}
#: (key, dtype name) -> None (compiled and agreed) or why not
_CHECKED: dict = {}
#: (key, dtype name) -> the condition's jaxpr, its constants read from ``Q`` (what the event's generated
#: location evaluates, :mod:`jaxrot.kernels.generate_pieces`)
JAXPRS: dict = {}


def _call(cond_fn):
    from ..geometry.state import State

    def call(t, R, Pi):
        return cond_fn(t, State(R, Pi), None)

    return call


def _generate(cond_fn, dtype):
    import jax

    sds = jax.ShapeDtypeStruct
    closed = jaxpr_of(_call(cond_fn), sds((), dtype), sds((3, 3), dtype), sds((3,), dtype))
    jaxpr = closed.jaxpr
    g = Source(np.dtype(dtype) == np.float64)
    consts, offset = [], 0
    for v in jaxpr.constvars:
        if kind_of(v.aval.dtype) != "f":
            raise Unsupported("an integer or bool array constant")
        consts.append(elements("Q", v.aval.shape, offset, v.aval.dtype))
        offset += int(np.prod(v.aval.shape, dtype=int))
    t, R, Pi = state()
    (out,) = restate(g, jaxpr, consts, [t, R, Pi])
    if np.shape(out) != ():
        raise Unsupported(f"an event condition of shape {np.shape(out)} (it must return a scalar)")
    x = np.asarray(out, dtype=object)[()]
    body = "\n".join(g.lines)
    src = f"def g(t: S, R: M, Pi: V, Q: wp.array(dtype=S)):\n{body}\n    return {as_float(g, x)}\n"
    key = source_key(src, g.lits)
    JAXPRS[key, np.dtype(dtype).name] = jaxpr
    return key, src, tuple(g.lits), tuple(closed.consts)


def _params(consts, dtype):
    import jax.numpy as jnp

    parts = [jnp.ravel(jnp.asarray(c)).astype(dtype) for c in consts]
    return jnp.concatenate(parts) if parts else jnp.zeros((1,), dtype)  # (a kernel array is never empty)


def lower(cond_fn, dtype):
    """``(key, Q)``: the name of the Warp restatement of ``cond_fn(t, state, None)`` at ``dtype`` and
    its parameter array (the function's closed-over arrays, raveled, in ``dtype``). Raises
    :class:`Unsupported` (naming what stopped it) where there is none."""
    import jax

    ck = (cond_fn, np.dtype(dtype).name)
    try:
        hit = _LOWERED.get(ck)
    except TypeError:  # an unhashable callable: traced every time
        hit, ck = None, None
    if hit is None:
        try:
            hit = _generate(cond_fn, dtype)
        except Unsupported:
            raise
        except Exception as err:  # noqa: BLE001 - any other failure: the condition has no restatement
            raise Unsupported(f"{type(err).__name__}: {err}") from err
        _SOURCES[hit[0]] = hit[1:3]
        _check(cond_fn, dtype, hit)
        if ck is not None and not any(isinstance(c, jax.core.Tracer) for c in hit[3]):
            _LOWERED[ck] = hit
    return hit[0], _params(hit[3], dtype)


def reason(cond_fn, dtype) -> str | None:
    """Why ``cond_fn`` has no Warp restatement at ``dtype`` (None if it has one)."""
    try:
        lower(cond_fn, dtype)
    except Unsupported as err:
        return str(err)
    return None


def _check(cond_fn, dtype, hit):
    import jax

    concrete = not any(isinstance(c, jax.core.Tracer) for c in hit[3])
    verdict(_CHECKED, (hit[0], np.dtype(dtype).name), lambda: _compare(cond_fn, dtype, hit, concrete),
            "the restatement")


def _compare(cond_fn, dtype, hit, concrete: bool):
    import jax

    t, R, Pi = sample_points(dtype)
    if not concrete:
        n_params = sum(int(np.size(c)) for c in hit[3])
        _run(hit[0], dtype, t, R, Pi, np.zeros(max(n_params, 1), dtype))
        return None
    with jax.ensure_compile_time_eval():
        got = _run(hit[0], dtype, t, R, Pi, np.asarray(_params(hit[3], dtype)))
    want = np.asarray(reference_values(_call(cond_fn), t, R, Pi), np.float64)
    scale = np.maximum(np.max(np.abs(np.where(np.isfinite(want), want, 0.0))), 1e-300)
    same = within(got, want, 1000 * np.finfo(dtype).eps * scale)
    if not np.all(same):
        i = int(np.argmin(same))
        return f"the restatement differs from the function at a test point (t = {t[i]:.3g}: {got[i]} against {want[i]})"
    return None


@functools.lru_cache(maxsize=None)
def event_g(S, key: str):
    """The Warp function ``g(t, R, Pi, Q)`` of a lowered condition (by its ``key``), built once per
    scalar type."""
    src, lits = _SOURCES[key]
    return warp_functions(S, src, lits, f"event-{key}", ["g"])["g"]


def evaluate(cond_fn, t, R, Pi):
    """The restated condition at a batch of points ``t`` (B,), ``R`` (B, 3, 3), ``Pi`` (B, 3), all of
    one floating dtype, evaluated by Warp: a NumPy array (B,)."""
    t, R, Pi = (np.asarray(x) for x in (t, R, Pi))
    key, Q = lower(cond_fn, R.dtype)
    return _run(key, R.dtype, t, R, Pi, np.asarray(Q))


def _run(key: str, dtype, t, R, Pi, Q):
    from ._common import so3_funcs, warp

    wp = warp()
    S = {np.dtype(np.float32): wp.float32, np.dtype(np.float64): wp.float64}[np.dtype(dtype)]
    c = so3_funcs(S)
    out = wp.zeros(t.shape[0], dtype=S, device="cpu")
    wp.launch(_evaluator(S, key), dim=t.shape[0], device="cpu",
              inputs=[wp.array(t, dtype=S, device="cpu"), wp.array(R, dtype=c.M, device="cpu"),
                      wp.array(Pi, dtype=c.V, device="cpu"), wp.array(Q, dtype=S, device="cpu"), out])
    return out.numpy().astype(np.float64)


@functools.lru_cache(maxsize=None)
def _evaluator(S, key: str):
    from ._common import so3_funcs, warp

    wp = warp()
    c = so3_funcs(S)
    V, M = c.V, c.M
    g = event_g(S, key)

    def ev(t: wp.array(dtype=S), R: wp.array(dtype=M), Pi: wp.array(dtype=V), Q: wp.array(dtype=S),
           out: wp.array(dtype=S)):
        i = wp.tid()
        out[i] = g(t[i], R[i], Pi[i], Q)

    ev.__name__ = ev.__qualname__ = f"evaluate_event_{key}_{S.__name__}"
    return wp.kernel(ev, module="unique", enable_backward=False)
