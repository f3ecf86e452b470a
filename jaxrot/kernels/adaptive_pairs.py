"""Which embedded pairs have a fused adaptive kernel (:data:`ADAPTIVE_KERNELS`), and whether a run
can be fused (:func:`supports_adaptive`, :func:`why_not_adaptive`); what a fused run returns
(:class:`AdaptiveRun`). The kernel itself: :mod:`jaxrot.kernels.adaptive_kernel`; its launch:
:mod:`jaxrot.kernels.adaptive_launch`; the JAX-facing function: :mod:`jaxrot.kernels.adaptive`.
"""

import dataclasses
import typing
from typing import NamedTuple

import jax

from . import KERNELS, method_name, registered_name, run_dtype, torque_kind, torque_params, torque_refusal
from . import event_restate
from ._common import so3_funcs, warp

__all__ = ["ADAPTIVE_KERNELS", "AdaptiveEntry", "AdaptiveRun", "supports_adaptive", "why_not_adaptive", "pair_name",
           "RESULT_NONFINITE_STATE", "RESULT_MAX_STEPS_REACHED"]

#: the :class:`jaxrot.RESULTS` codes the kernel writes (the driver's, restated: the kernels sit below
#: the driver; ``tests/test_kernels_adaptive.py`` checks they are the same)
RESULT_NONFINITE_STATE = 2
RESULT_MAX_STEPS_REACHED = 4

@dataclasses.dataclass(frozen=True)
class AdaptiveEntry:
    """A pair's kernel: the higher method's kernel (``KERNELS[high]``) and the lower method, either its
    own kernel (``KERNELS[low]``; both take every attempted step) or, with ``embedded``, solutions from
    the higher method's stages (``KERNELS[high].family.<embedded>(S, high, torque, K) -> (init,
    step_pair)``). ``low`` names the lower JAX method (a registered name, or a class of
    :mod:`jaxrot.integrators`): its order sets the controller's exponents.

    ``memory``: ``"carried"``, the higher method's memory is initialised once and then carried from
    accepted step to accepted step (Buss's world momentum, as the XLA loop carries ``aux``; the lower
    method's memory is initialised at every attempt, as there); ``"per_attempt"``, initialised at every
    attempt with that attempt's step (RKMK8's memory for the gravity gradient depends on the step)."""

    high: str
    low: str
    embedded: str | None = None
    memory: str = "carried"
    #: the name of a pair class of :mod:`jaxrot.integrators` whose instances are this pair
    pair_class: str | None = None
    #: how an attempt's error is measured: ``"difference"``, the scaled RMS of the two solutions'
    #: difference (``step_pair`` returns the lower solution); ``"dop853"``, DOP853's combined estimate
    #: (``step_pair`` returns the estimates, :func:`jaxrot.kernels.rkmk.make_rkmk8_dop853`)
    estimator: str = "difference"
    #: the order the controller's exponents take, where it is not the lower method's
    error_order: int | None = None

    @property
    def torques(self) -> tuple[str, ...]:
        """The torque kinds both methods' kernels restate."""
        hi = KERNELS[self.high].torques
        return hi if self.embedded is not None else tuple(t for t in hi if t in KERNELS[self.low].torques)

    def low_method(self):
        from .. import integrators

        try:
            return integrators.get(self.low)
        except Exception:  # noqa: BLE001 - not a registered name: a class of the integrators package
            return getattr(integrators, self.low)()

    @property
    def low_order(self) -> int:
        return int(self.low_method().order)

    @property
    def high_order(self) -> int | None:
        """The order of the kept (higher-order) result."""
        from .. import integrators

        return getattr(integrators.get(self.high), "order", None)

    @property
    def controller_order(self) -> int:
        """``q`` of the PI controller's exponents (the JAX pair's ``error_order()``)."""
        return self.low_order if self.error_order is None else int(self.error_order)

    def make(self, S, torque: str, K: int):
        """``(init, step_pair)``: ``step_pair(R, Pi, A, t, h, J, P) -> (R_p, Pi_p, A_p, R_q, Pi_q)``."""
        if self.embedded is not None:
            return getattr(KERNELS[self.high].family, self.embedded)(S, self.high, torque, K)
        hi_init, hi_step = KERNELS[self.high].make(S, self.high, torque, K)[:2]
        lo_init, lo_step = KERNELS[self.low].make(S, self.low, torque, K)[:2]
        wp = warp()
        c = so3_funcs(S)
        V, M = c.V, c.M

        @wp.func
        def step_pair(R: M, Pi: V, A: typing.Any, t: S, h: S, J: V, P: wp.array(dtype=S)):
            Rp, Pip, Ap = hi_step(R, Pi, A, t, h, J, P)
            Rq, Piq, Aq = lo_step(R, Pi, lo_init(R, Pi, J, P, h), t, h, J, P)
            return Rp, Pip, Ap, Rq, Piq

        return hi_init, step_pair


#: pair name (as registered, :func:`jaxrot.integrators.get`) -> kernel entry; one line enrols a pair, and
#: ``tests/test_kernels_adaptive.py`` is generated from this table
ADAPTIVE_KERNELS: dict[str, AdaptiveEntry] = {
    "rkmk8(5)": AdaptiveEntry("rkmk8", "RKMK8Embedded5", "make_rkmk8_embedded", "per_attempt", "RKMK8Pair"),
    "rkmk8(5,3)": AdaptiveEntry("rkmk8", "RKMK8Embedded5", "make_rkmk8_dop853", "per_attempt", "RKMK8DOP853Pair",
                                estimator="dop853", error_order=7),
    "buss4(3)": AdaptiveEntry("buss4", "buss3"),
}


@dataclasses.dataclass(frozen=True)
class GeneratedPair:
    """A pair whose attempt is generated from its JAX code (:func:`jaxrot.kernels.generate.lower_pair`):
    ``key`` names the generated functions; the memory is carried from accepted step to accepted step
    (as the XLA loop carries ``aux``)."""

    key: str
    controller_order: int
    high_order: int | None
    memory: str = "carried"


#: generated pairs by name (``"gen:<key>"``), as the kernels' builders look them up
GENERATED_PAIRS: dict[str, GeneratedPair] = {}


def entry_of(name: str):
    """The kernel entry of a pair's name: an enrolled pair's, or a generated one's."""
    return ADAPTIVE_KERNELS[name] if name in ADAPTIVE_KERNELS else GENERATED_PAIRS[name]


def generated_pair(pair, system, dtype, offset: int = 0):
    """``(name, parameters)`` of ``pair``'s generated attempt for ``system`` at ``dtype`` (its parameters
    from ``P[offset]`` on), registered in :data:`GENERATED_PAIRS`; raises ``Unsupported`` where the pair
    cannot be restated."""
    from .generate import lower_pair

    low = lower_pair(pair, system, dtype, offset)
    name = f"gen:{low.key}"
    if name not in GENERATED_PAIRS:
        GENERATED_PAIRS[name] = GeneratedPair(low.key, int(pair.error_order()), getattr(pair, "order", None))
    return name, low.params


def _generated_refusal(pair, system, event) -> str | None:
    """Why no generated attempt runs ``pair`` (an :class:`jaxrot.integrators.AbstractPair` instance)
    with ``system`` and ``event``, or None."""
    from ..integrators import AbstractPair
    from .generate import pair_reason

    if not isinstance(pair, AbstractPair):
        return "it is not an embedded pair (jaxrot.integrators.AbstractPair)"
    dtype = run_dtype(system)
    offset = 0
    if event is not None:
        # the event is located on the dense output, whose interpolant restates the torque as the
        # hand-written kernels' torques do
        kind = torque_kind(system.torque, dtype)
        if kind is None:
            return f"an event is located with the torques the kernels restate, not {type(system.torque).__name__}"
        offset = int(torque_params(system.torque, dtype).shape[0])
    why = pair_reason(pair, system, dtype, offset)
    return None if why is None else f"its attempt cannot be restated in a kernel ({why})"


class AdaptiveRun(NamedTuple):
    """What :func:`fused_adaptive` returns, per body of a batch of B and for ``n`` output times.

    ``R`` (B, n, 3, 3) and ``Pi`` (B, n, 3): the states at the output times (a body that stopped
    early, at ``max_steps`` or at a terminal event, holds its last state, or its event state, in the
    rest); ``n_accepted``, ``n_rejected`` (B,) int32: the attempts kept and repeated;
    ``err_estimate`` (B,): the last accepted step's scaled error (1 before any); ``result`` (B,)
    int32: the :class:`jaxrot.RESULTS` code (0 successful, 4 ``max_steps_reached``, 2
    ``nonfinite_state`` for a body whose initial state is not finite); with an event ``event_time``
    (B,), ``event_R`` (B, 3, 3) and ``event_Pi`` (B, 3) (NaN where none was found), else None."""

    R: jax.Array
    Pi: jax.Array
    n_accepted: jax.Array
    n_rejected: jax.Array
    err_estimate: jax.Array
    result: jax.Array
    event_time: jax.Array | None = None
    event_R: jax.Array | None = None
    event_Pi: jax.Array | None = None

    @property
    def success(self) -> jax.Array:
        """Whether each body reached its last output time (or its terminal event)."""
        return self.result == 0


def pair_name(pair) -> str | None:
    """The name in :data:`ADAPTIVE_KERNELS` of ``pair``: a name, a ``(high, low)`` tuple of methods
    (instances or registered names), or a pair object (one with ``high`` and ``low`` methods, or of an
    entry's ``pair_class``) equal to an enrolled pair."""
    if isinstance(pair, str):
        return pair if pair in ADAPTIVE_KERNELS else None
    from .. import integrators

    for name, entry in ADAPTIVE_KERNELS.items():
        cls = getattr(integrators, entry.pair_class, None) if entry.pair_class else None
        if cls is not None and type(pair) is cls:
            return name
    if not isinstance(pair, tuple):
        if not (hasattr(pair, "high") and hasattr(pair, "low")):
            return None
        pair = (pair.high, pair.low)
    if len(pair) != 2:
        return None
    import equinox as eqx

    try:
        hi, lo = (integrators.get(m) if isinstance(m, str) else m for m in pair)
    except Exception:  # noqa: BLE001 - an unknown name: no kernel
        return None
    for name, entry in ADAPTIVE_KERNELS.items():
        if method_name(hi) != entry.high:
            continue
        ref = entry.low_method()
        try:
            if type(lo) is type(ref) and bool(eqx.tree_equal(lo, ref)):
                return name
        except Exception:  # noqa: BLE001 - traced fields: not the enrolled instance
            return None
    return None


def why_not_adaptive(pair, system, event=None) -> str | None:
    """Why :func:`supports_adaptive` is False (a sentence), or None."""
    name = pair_name(pair)
    J = system.body.J
    if getattr(J, "shape", None) != (3,):
        return "the fused kernels share one body among the bodies of a batch (J of shape (3,))"
    if name is None or not _enrolled_torque(name, system):
        if isinstance(pair, str):
            from .. import integrators

            pair = integrators.get(pair)
        why = _generated_refusal(pair, system, event) if not isinstance(pair, tuple) else "a tuple of methods"
        if why is None:
            return _event_refusal(event, run_dtype(system))
        if name is None:
            label = pair if isinstance(pair, (str, tuple)) else registered_name(pair)
            return f"no fused adaptive kernel for the pair {label}: {why}"
    dtype = run_dtype(system)
    kind = torque_kind(system.torque, dtype)
    if kind is None:
        return torque_refusal(system.torque, dtype)
    if kind.split(":", 1)[0] not in ADAPTIVE_KERNELS[name].torques:
        return (f"the adaptive kernel of {name} restates the torques {', '.join(ADAPTIVE_KERNELS[name].torques)}, "
                f"not {type(system.torque).__name__}")
    return _event_refusal(event, dtype)


def _enrolled_torque(name: str, system) -> bool:
    kind = torque_kind(system.torque, run_dtype(system))
    return kind is not None and kind.split(":", 1)[0] in ADAPTIVE_KERNELS[name].torques


def _event_refusal(event, dtype) -> str | None:
    if event is not None:
        why = event_restate.reason(event.cond_fn, dtype)
        if why is not None:
            return f"the event condition cannot be restated in a kernel: {why}"
    return None


def uses_generated(pair, system) -> bool:
    """Whether a fused run of ``pair`` takes its generated attempt (no enrolled kernel for the pair and
    the torque)."""
    name = pair_name(pair)
    return name is None or not _enrolled_torque(name, system)


def supports_adaptive(pair, system, event=None) -> bool:
    """True if a fused adaptive kernel exists for this pair (a name of :data:`ADAPTIVE_KERNELS` or a
    ``(high, low)`` tuple of methods), this torque and, if given, this event's condition (Warp need
    not be installed)."""
    return why_not_adaptive(pair, system, event) is None
