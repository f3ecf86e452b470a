"""Whether an error-controlled run can be fused (:func:`supports_adaptive`, :func:`why_not_adaptive`):
any embedded pair (:class:`jaxrot.integrators.AbstractPair`) whose attempt is generated from its own JAX
code (:func:`jaxrot.kernels.generate.lower_pair`); what a fused run returns (:class:`AdaptiveRun`). The
kernel itself: :mod:`jaxrot.kernels.adaptive_kernel`; its launch: :mod:`jaxrot.kernels.adaptive_launch`;
the JAX-facing function: :mod:`jaxrot.kernels.adaptive`.
"""

import dataclasses
from typing import NamedTuple

import jax

from . import dense_torque_refusal, registered_name, run_dtype
from . import event_restate

__all__ = ["AdaptiveRun", "Record", "GeneratedPair", "supports_adaptive", "why_not_adaptive", "pair_object", "generated_pair",
           "attempt_within", "event_refusal",
           "RESULT_NONFINITE_STATE", "RESULT_MAX_STEPS_REACHED"]

#: the :class:`jaxrot.RESULTS` codes the kernel writes (the driver's, restated: the kernels sit below
#: the driver; ``tests/test_kernels_adaptive.py`` checks they are the same)
RESULT_NONFINITE_STATE = 2
RESULT_MAX_STEPS_REACHED = 4


@dataclasses.dataclass(frozen=True)
class GeneratedPair:
    """A pair's attempt generated from its JAX code (:func:`jaxrot.kernels.generate.lower_pair`):
    ``key`` names the generated functions; ``controller_order`` is the pair's ``error_order()`` (the PI
    controller's exponents), ``high_order`` the kept result's order (whether events are polished). The
    pair's memory is carried from accepted step to accepted step, as the XLA loop carries ``aux``."""

    key: str
    controller_order: int
    high_order: int | None


#: generated pairs by name (``"gen:<key>"``), as the kernels' builders look them up
GENERATED_PAIRS: dict[str, GeneratedPair] = {}


def pair_object(pair):
    """The pair object of ``pair``: a registered name (:func:`jaxrot.integrators.get`), a ``(high,
    low)`` tuple of methods or names (an :class:`jaxrot.integrators.EmbeddedPair`, as
    :func:`jaxrot.simulate` takes it), or a pair object (itself)."""
    from .. import integrators

    if isinstance(pair, str):
        return integrators.get(pair)
    if isinstance(pair, tuple):
        return integrators.EmbeddedPair(*(integrators.get(m) if isinstance(m, str) else m for m in pair))
    return pair


def generated_pair(pair, system, dtype):
    """``(name, parameters)`` of ``pair``'s generated attempt for ``system`` at ``dtype``, registered in :data:`GENERATED_PAIRS`; raises ``Unsupported`` where the pair
    cannot be restated."""
    from .generate import lower_pair

    low = lower_pair(pair, system, dtype)
    # (the controller's and the kept result's orders in the name: two pairs may write out alike)
    entry = GeneratedPair(low.key, int(pair.error_order()), getattr(pair, "order", None))
    name = f"gen:{low.key}:q{entry.controller_order}:p{entry.high_order}"
    GENERATED_PAIRS.setdefault(name, entry)
    return name, low.params


def attempt_within(pair, system, event, lines: int) -> bool:
    """Whether the attempt generated for a run of ``pair`` with ``system`` (and ``event``) is at most
    ``lines`` lines long (:func:`jaxrot.kernels.generate.written_within`: written out no further, nothing
    compiled); False for what is no pair or cannot be restated."""
    from ..integrators import AbstractPair
    from .generate import written_within

    try:
        obj = pair_object(pair)
    except Exception:  # noqa: BLE001 - an unknown name, or methods that make no pair
        return False
    dtype = run_dtype(system)
    if not isinstance(obj, AbstractPair) or (event is not None and dense_torque_refusal(system.torque, dtype)):
        return False
    return written_within(obj, system, dtype, lines)


def _generated_refusal(pair, system, event, alone: bool) -> str | None:
    """Why no generated attempt runs ``pair`` (an :class:`jaxrot.integrators.AbstractPair` instance)
    with ``system`` and ``event``, or None (``alone``: the attempt's check compiled in a module of its own)."""
    from ..integrators import AbstractPair
    from .generate import pair_reason

    if not isinstance(pair, AbstractPair):
        return "it is not an embedded pair (jaxrot.integrators.AbstractPair)"
    dtype = run_dtype(system)
    if event is not None and dense_torque_refusal(system.torque, dtype):
        return dense_torque_refusal(system.torque, dtype)
    why = pair_reason(pair, system, dtype, alone)
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


class Record(NamedTuple):
    """The record of a batch's steps that a fused run keeps for its derivatives and saved frames
    (:mod:`jaxrot.kernels.adaptive_backward`, :mod:`jaxrot.kernels.adaptive_saved`), rows in launch
    order (row ``k`` is body ``order[k]``; ``order`` None: the caller's order).

    ``R`` (B, C, 3, 3), ``Pi`` (B, C, 3): the state at each kept step's start, every step's or every
    ``ceil(steps / C)``-th (checkpoints); ``t``, ``h`` (B, steps): each step's start time and length, or
    one column each of ``t0`` and ``h`` for constant steps (step ``k`` at ``t0 + k h``), with ``steps``
    then given; ``out_k`` (B, n): the steps taken before each output. With ``start`` ``(R0, Pi0)``
    (B, 3, 3), (B, 3) the kept states are shifted by one: the first is ``start``, the ``c``-th ``R[:, c -
    1]``, the last of ``R`` unused (a constant-step run's frames, the ends of its stretches, kept as the
    run wrote them rather than copied behind its initial state)."""

    R: jax.Array
    Pi: jax.Array
    t: jax.Array
    h: jax.Array
    out_k: jax.Array
    order: jax.Array | None = None
    steps: int | None = None
    start: tuple | None = None

    @property
    def n_steps(self) -> int:
        """How many steps the record covers."""
        return self.t.shape[1] if self.steps is None else self.steps

    @property
    def stride(self) -> int:
        """Every how many steps a state is kept (1: every step's)."""
        return -(-self.n_steps // self.R.shape[1])


def why_not_adaptive(pair, system, event=None, *, record: bool = False) -> str | None:
    """Why :func:`supports_adaptive` is False (a sentence), or None. ``record``: the run keeps a record of
    its steps (a derivative, ``SaveAt(steps=k)``, ``SaveAt(dense=True)``), so it launches another kernel
    than the one whose module holds the attempt's check
    (:func:`jaxrot.kernels.adaptive_kernel.shares_check`)."""
    if getattr(system.body.J, "shape", None) != (3,):
        return "the fused kernels share one body among the bodies of a batch (J of shape (3,))"
    try:
        obj = pair_object(pair)
    except Exception as err:  # noqa: BLE001 - an unknown name, or methods that make no pair
        return f"no fused adaptive kernel for the pair {pair!r}: {err}"
    from .adaptive_kernel import shares_check

    why = _generated_refusal(obj, system, event, not shares_check(event, record))
    if why is not None:
        label = pair if isinstance(pair, (str, tuple)) else registered_name(pair)
        return f"no fused adaptive kernel for the pair {label}: {why}"
    return None if event is None else event_refusal(event, obj, system, run_dtype(system), pair=True)


def event_refusal(event, method, system, dtype, pair: bool = False) -> str | None:
    """Why a fused run of ``method`` (``pair``: an embedded pair's attempt) with ``system`` cannot check
    and locate ``event`` (a sentence), or None: its condition, the torque its dense output restates, or
    the step's derivative in its length where the event is polished on the method's own steps
    (:func:`jaxrot.kernels.generate.polish_reason`). Constant steps and error control alike."""
    from .generate import polish_reason

    why = event_restate.reason(event.cond_fn, dtype)
    if why is not None:
        return f"the event condition cannot be restated in a kernel: {why}"
    why = dense_torque_refusal(system.torque, run_dtype(system))
    if why is not None:
        return why
    return polish_reason(method, system, dtype, pair)


def supports_adaptive(pair, system, event=None) -> bool:
    """True if a fused adaptive kernel runs this pair (a registered name, a ``(high, low)`` tuple of
    methods or a pair object) with this torque and, if given, this event's condition: its attempt and
    the condition can be restated (Warp installed: they compile and agree with the JAX code)."""
    return why_not_adaptive(pair, system, event) is None
