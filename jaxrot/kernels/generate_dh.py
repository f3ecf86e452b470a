"""An event's location on a generated method's own steps (:func:`jaxrot.integrators.dense_output.locate`,
for a method of order above 4 or undeclared) takes the last polishing step's slope along the method's
step: ``step_dh``, the step of length ``h`` from fresh memory and its derivative in ``h`` (``jax.jvp``),
written from the method's JAX code like its step (:mod:`jaxrot.kernels.generate`). It is written only
where a kernel polishes an event, and may be refused where the step is not: the derivative's trace can
meet what the step's own did not (a ``jax.custom_jvp`` rule), :func:`dh_reason`."""

from __future__ import annotations

import functools

from .generate_pieces import write
from .jaxpr_inputs import jaxpr_of, warp_functions
from .jaxpr_warp import Unsupported

__all__ = ["register", "dh_reason", "step_dh"]


def register(key: str, rebuild, specs, dt, inputs) -> None:
    """Keep how to write ``step_dh`` for the generated method ``key``: ``rebuild(flat) -> (method,
    system)``, ``specs`` the shapes of ``flat``, ``dt`` the dtype, ``inputs`` the elements the generated
    function reads ``(t, R, Pi, h, *P)`` as."""
    _DH[key] = functools.partial(_dh_source, rebuild, specs, dt, inputs)


def _dh_source(rebuild, specs, dt, inputs):
    """The source of ``step_dh`` (:func:`step_dh`): the method's step from fresh memory with its
    derivative in the step's length (``jax.jvp``), its inputs ``inputs`` as
    :func:`jaxrot.kernels.generate.lower` reads them."""
    import jax
    import jax.numpy as jnp

    from ..geometry.state import State

    def dh_fn(t, R, Pi, h, flat):
        m, s = rebuild(flat)

        def advance(y):
            new = m.step(s, t, State(R, Pi), m.init(s, t, State(R, Pi), y), y)[0]
            return new.R, new.Pi

        (R1, Pi1), (dR, dPi) = jax.jvp(advance, (h,), (jnp.ones_like(h),))
        return R1, Pi1, dR, dPi

    sds = jax.ShapeDtypeStruct
    closed = jaxpr_of(dh_fn, sds((), dt), sds((3, 3), dt), sds((3,), dt), sds((), dt), specs, differentiates=True)
    if any(isinstance(c, jax.core.Tracer) for c in closed.consts):
        err = Unsupported("a step closing over a traced value (an event is polished on the method's own steps)")
        err.transient = True
        raise err
    return write("step_dh", "R: M, Pi: V, t: S, h: S, J: V, P: wp.array(dtype=S)", closed, inputs, dt == jnp.float64)


#: key -> the writer of its step_dh source (:func:`_dh_source`), called when a kernel polishes an event
_DH: dict = {}


#: key -> step_dh's (source, literals), or the Unsupported saying why it cannot be written
_DH_WRITTEN: dict = {}


def _dh(key: str):
    """``step_dh``'s source and literals for ``key``, or the :class:`Unsupported` saying why it cannot
    be written (the derivative's trace can meet what the step's own did not); kept but for a refusal
    that holds only inside someone's trace."""
    hit = _DH_WRITTEN.get(key)
    if hit is None:
        try:
            hit = _DH[key]()
        except Unsupported as err:
            hit = err
        except Exception as err:  # noqa: BLE001 - whatever stops it: the event is located by the XLA loop
            hit = Unsupported(f"{type(err).__name__}: {err}")
        if not getattr(hit, "transient", False):
            _DH_WRITTEN[key] = hit
    return hit


def dh_reason(key: str) -> str | None:
    """Why the generated method ``key``'s step cannot be written with its derivative in its length
    (:func:`step_dh`), which a kernel polishing an event on the method's own steps needs; None if it can."""
    hit = _dh(key)
    return str(hit) if isinstance(hit, Unsupported) else None


@functools.lru_cache(maxsize=None)
def step_dh(S, key: str):
    """``step_dh(R, Pi, t, h, J, P) -> (R, Pi, dR/dh, dPi/dh)``: the generated method ``key``'s step of
    length ``h`` from fresh memory and its derivative in ``h`` (what an event's last Newton step on the
    method's own steps takes its slope from, :func:`jaxrot.integrators.dense_output.locate`); raises
    :class:`Unsupported` where it cannot be written (:func:`dh_reason`)."""
    hit = _dh(key)
    if isinstance(hit, Unsupported):
        raise hit
    src, lits = hit
    return warp_functions(S, src, lits, f"method-dh-{key}", ["step_dh"])["step_dh"]
