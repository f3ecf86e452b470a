"""Fused kernels: the whole fixed-step run of an explicit method in one compiled kernel (NVIDIA Warp).

One launch runs every step of every body, one thread per body with its state in registers, and
writes only the saved frames and a per-body failure flag. The kernel's step is generated from the
method's own JAX ``init`` and ``step`` (:mod:`jaxrot.kernels.generate`), inside the one loop template
(:func:`jaxrot.kernels.loop.loop`, at constant steps, with an event or without), and
agrees with the XLA loop to round-off (``tests/test_kernels.py``: 1e-13 relative in float64 after
1000 steps). Derivatives: with ``reference=`` (the pure-JAX run) and ``derivative=`` (the mode the
caller takes, read from its inputs' tracers), :func:`fused_frames` takes the derivative through the
recorded steps in the kernels where the method's step derivative can be generated
(:mod:`jaxrot.kernels.adaptive_derivatives`), else it is a custom rule whose derivatives are the
reference's. See ``docs/kernels.md``.

``KERNELS`` enrols the registered methods the automatic executor choice fuses, with the torques their
agreement tests run; :func:`supports` says whether a run can be fused (any method whose step can be
generated). Warp is imported lazily: importing jaxrot never needs it, and a fused call without it
raises ``ImportError`` naming the ``fast`` extra.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp

from ._common import have_warp, jax_kernel, warp
from . import host_threads
from . import transpile as _transpile
from . import generate as _generate

__all__ = ["KERNELS", "KernelEntry", "fused_frames", "supports", "why_not", "keeps_stats", "have_warp", "torque_kind",
           "method_name", "registered_name"]

_TORQUED = ("free", "gravity", "poly")
#: a plain-function torque (``jaxrot.Torque``) restated from its jaxpr (:mod:`jaxrot.kernels.transpile`)
_CALLS_TAU = ("user",)


@dataclasses.dataclass(frozen=True)
class KernelEntry:
    """An enrolled method: the torque kinds its agreement tests (and the automatic executor choice)
    take, with the tolerances of those tests."""

    torques: tuple[str, ...]
    #: relative agreement with the JAX method after 1000 float64 steps (``tests/test_kernels.py``); above
    #: 1e-13 only where the method itself amplifies a one-rounding difference per step that much
    rtol64: float = 1e-13
    #: agreement after one float64 step, in units of eps: a few roundings, more where the method solves
    #: an ill-conditioned system (one rounding of its right-hand side moves the solution by cond * eps)
    step_eps: int = 4
    #: whether the JAX method's step statistics are all zero (a kernel writes none): where they are not
    #: (the energy projection counts projections that missed the polhode) the automatic executor choice
    #: keeps the XLA loop, and a run with ``executor=Fused()`` reports zeros
    zero_stats: bool = True


_SPLITS = [f"split{o}_{a}" for o in (2, 4) for a in ("123", "132", "213", "231", "312", "321")]

#: method name -> enrolled entry (one line enrols a method; the tests are generated from this table)
KERNELS: dict[str, KernelEntry] = {
    "buss2p": KernelEntry(_TORQUED),
    "buss4": KernelEntry(_TORQUED),
    "rk4": KernelEntry((*_TORQUED, *_CALLS_TAU)),
    "buss1": KernelEntry(_TORQUED),
    "buss2": KernelEntry(_TORQUED),
    "buss3": KernelEntry(_TORQUED),
    "buss3_false": KernelEntry(_TORQUED),
    # one step agrees to 1-2 roundings; R rebuilt from a renormalised quaternion every step amplifies
    # them to 3e-13 (free) - 3e-12 (gravity) relative after 1000 steps (the XLA reductions' order differs)
    "euler_quat": KernelEntry((*_TORQUED, *_CALLS_TAU), rtol64=5e-12),
    # and the satellite's gravity gradient (in the precision suite the best stepping method there)
    "rkmk8": KernelEntry((*_TORQUED, "gravity_gradient", *_CALLS_TAU)),
    **{name: KernelEntry(("free",)) for name in _SPLITS},
    # Buss's energy projection after any of the above (torque-free, rule "nearest"); its 2x2 Gauss-Newton
    # system has condition ~1e3 on the tested states (the momentum sphere and the energy ellipsoid are
    # nearly tangent along the polhode), so one step agrees to 4-15 eps rather than 4 (then 1e-13 on)
    **{f"{name}_ep": KernelEntry(("free",), step_eps=64, zero_stats=False)
       for name in ("buss1", "buss2", "buss2p", "buss3", "buss4", *_SPLITS)},
    # the discrete Moser-Veselov map and its modified-inertia versions (a Newton solve each step: the
    # iteration counts are not kept)
    **{name: KernelEntry(("free",), zero_stats=False) for name in ("dmv", "dmv4", "dmv6", "dmv8", "dmv10")},
}


def dense_torque(torque, dtype):
    """``(key, parameters)`` of ``torque`` restated from its JAX code for the dense output of a run with
    an event (:func:`jaxrot.kernels.transpile.lower`: its Warp function by ``key``; its array constants
    and leaves, which come first in the kernel's parameter array); raises ``Unsupported`` where it
    cannot be restated."""
    low = _transpile.lower(torque, dtype)
    return low.key, low.params


def event_parameters(system, event, dtype, method_params):
    """``(torque key, condition key, P, Q)`` of a fused run with ``event``: the restated torque of its
    dense output (:func:`dense_torque`) and condition (:func:`jaxrot.kernels.event_restate.lower`), the
    method's parameters ``P`` as they are without an event, and ``Q``: the condition's parameter array (one
    0 where it has none), then the torque's (so that a method's generated step, and the check of it, is
    the same with an event)."""
    from . import event_restate

    tkey, T = dense_torque(system.torque, dtype)
    ekey, Q = event_restate.lower(event.cond_fn, dtype)
    return tkey, ekey, jnp.asarray(method_params, dtype), jnp.concatenate([jnp.asarray(Q, dtype), T])


def event_launch(method, system, dtype, event, method_params):
    """``(ev, P, Q)``: the event's part of a constant-step kernel's key (:func:`jaxrot.kernels.fixed_loop.kernel`:
    the restated torque and condition, the direction, whether terminal, whether polished on the method's
    own steps) and the kernel's parameter arrays (:func:`event_parameters`)."""
    from ..integrators.dense_output import polishes

    tkey, ekey, P, Q = event_parameters(system, event, dtype, method_params)
    return (tkey, ekey, event.direction, bool(event.terminal), polishes(getattr(method, "order", None))), P, Q


def dense_torque_refusal(torque, dtype) -> str | None:
    """Why the dense output on which an event is located cannot restate ``torque``, or None."""
    why = _transpile.reason(torque, dtype)
    return None if why is None else (f"an event is located on the dense output, which restates the torque from its "
                                     f"JAX code, and {type(torque).__name__} cannot be restated: {why}")


def torque_kind(torque, dtype=None) -> str | None:
    """The torque's family in :data:`KERNELS`' lists (what the automatic choice fuses and the agreement
    tests run): ``"free"``, ``"gravity"``, ``"poly"`` or ``"gravity_gradient"`` for those torque
    models, ``"user:<key>"`` for a :class:`jaxrot.Torque` whose function :mod:`~jaxrot.kernels.transpile`
    restates at ``dtype`` (default: the default floating dtype), else ``None`` (a kernel may still run
    it: every kernel evaluates the torque as its JAX code does)."""
    from ..physics.orbit import GravityGradientTorque
    from ..physics.torques import FreeTorque, GravityTorque, PolynomialMomentum, Torque

    if type(torque) is Torque:
        dtype = jnp.zeros(()).dtype if dtype is None else jnp.dtype(dtype)
        try:
            return "user:" + _transpile.key_of(torque, dtype)
        except _transpile.Unsupported:
            return None
    kinds = {FreeTorque: "free", GravityTorque: "gravity", PolynomialMomentum: "poly",
             GravityGradientTorque: "gravity_gradient"}
    return kinds.get(type(torque))


def _family(kind: str | None) -> str | None:
    """A torque kind without its key (``"user:<key>"`` -> ``"user"``)."""
    return None if kind is None else kind.split(":", 1)[0]


@functools.lru_cache(maxsize=None)
def _instances():
    from .. import integrators

    return {name: integrators.get(name) for name in KERNELS}


def method_name(method) -> str | None:
    """The registered name of ``method`` if a kernel restates it (same class and same fields)."""
    import equinox as eqx

    for name, ref in _instances().items():
        if type(method) is type(ref):
            try:
                if bool(eqx.tree_equal(method, ref)):
                    return name
            except Exception:  # noqa: BLE001 - traced fields: not a registered instance
                return None
    return None


def registered_name(method) -> str:
    """The name ``method`` is registered under (:func:`jaxrot.integrators.get`), for messages; its class
    name where it is no registered instance."""
    import equinox as eqx

    from .. import integrators

    for name in integrators.REGISTRY:
        try:
            ref = integrators.get(name)
            if type(method) is type(ref) and bool(eqx.tree_equal(method, ref)):
                return name
        except Exception:  # noqa: BLE001 - traced fields, or a method that cannot be built here
            continue
    return type(method).__name__


def run_dtype(system):
    """The run's floating dtype: the body's moments', or the default one."""
    J = system.body.J
    return J.dtype if jnp.issubdtype(getattr(J, "dtype", None), jnp.floating) else jnp.zeros(()).dtype


def _instance(method):
    from .. import integrators

    return integrators.get(method) if isinstance(method, str) else method


def generated_refusal(method, system, event=None) -> str | None:
    """Why no kernel can be generated from ``method``'s JAX code for ``system``
    (:mod:`jaxrot.kernels.generate`), or None; ``event``: the run's, whose kernel the step is checked
    on where it can be built (the kernel the run launches, not another compiled only for the check)."""
    try:
        m = _instance(method)
    except Exception as err:  # noqa: BLE001 - an unknown name
        return str(err)
    return _generate.reason(m, system, run_dtype(system), event)


def hand_kernel(method, system) -> str | None:
    """The enrolled name (:data:`KERNELS`) of ``method`` where its tests take ``system``'s torque, or
    None: the runs the automatic executor choice fuses (nothing is generated to answer)."""
    name = method if isinstance(method, str) and method in KERNELS else method_name(method)
    if name is None or getattr(system.body.J, "shape", None) != (3,):
        return None
    return name if _family(torque_kind(system.torque, run_dtype(system))) in KERNELS[name].torques else None


def supports(method, system, event=None) -> bool:
    """True if a kernel can be generated from this method's JAX code (an integrator or a registered
    name) for this system (and a run with ``event``: see :func:`generated_refusal`)."""
    return why_not(method, system, event) is None


def why_not(method, system, event=None) -> str | None:
    """Why :func:`supports` is False for this method and system (a sentence), or None."""
    if getattr(system.body.J, "shape", None) != (3,):
        return "the fused kernels share one body among the bodies of a batch (J of shape (3,))"
    why = generated_refusal(method, system, event)
    if why is None:
        return None
    label = method if isinstance(method, str) else registered_name(method)
    return f"no fused kernel for the method {label}: its step cannot be restated in a kernel ({why})"


def keeps_stats(method, system=None) -> bool:
    """Whether a fused run of ``method`` (an integrator or a registered name) has the XLA run's step
    statistics (the kernel writes none): an enrolled method's where they are all zero, another's
    (``system`` given) where every step's statistics are the same constants."""
    name = method if isinstance(method, str) and method in KERNELS else method_name(method)
    if name is not None:
        return KERNELS[name].zero_stats
    if system is None or generated_refusal(method, system) is not None:
        return False
    return _generate.constant_stats(_generate.lower(_instance(method), system, run_dtype(system)).key)


def _check(method, system, states0, n_frames, save_every, event=None):
    for arg, v in (("n_frames", n_frames), ("save_every", save_every)):
        if isinstance(v, bool) or not isinstance(v, int) or v < (0 if arg == "n_frames" else 1):
            raise ValueError(f"{arg} must be a {'non-negative' if arg == 'n_frames' else 'positive'} int, "
                             f"got {v!r}")
    R, Pi = states0.R, states0.Pi
    if R.ndim != 3 or R.shape[1:] != (3, 3) or Pi.shape != (R.shape[0], 3):
        raise ValueError(f"states0 must be a batch of states: R (B, 3, 3) and Pi (B, 3), got R {R.shape}, "
                         f"Pi {Pi.shape}")
    if jnp.dtype(R.dtype) not in (jnp.dtype(jnp.float32), jnp.dtype(jnp.float64)):
        raise TypeError(f"states0 must be float32 or float64, got {R.dtype}")
    why = why_not(method, system, event)
    if why is not None:
        raise ValueError(why)
    if event is not None:
        from .adaptive_pairs import event_refusal

        why = event_refusal(event, _instance(method), system, R.dtype)
        if why is not None:
            raise ValueError(why)


def _forward(method, system, states0, dt, t0, n_frames: int, save_every: int, event=None, tangents=None):
    """The constant-step kernel's run (:func:`fused_frames`' outputs); with ``tangents = (d_states0,
    d_arrays)`` (no event) the run carrying the tangents of its states
    (:mod:`jaxrot.kernels.adaptive_tangents`): ``(outputs, dR, dPi)`` at the frames."""
    dtype = states0.R.dtype
    B = states0.R.shape[0]
    if n_frames == 0 or B == 0:
        empty = (jnp.zeros((B, n_frames, 3, 3), dtype), jnp.zeros((B, n_frames, 3), dtype),
                 jnp.full((B,), -1, jnp.int32), jnp.zeros((B,), jnp.int32))
        if tangents is not None:  # (nothing to launch)
            return empty, jnp.zeros((B, n_frames, 3, 3), dtype), jnp.zeros((B, n_frames, 3), dtype)
        if event is None:
            return empty
        return empty + (jnp.full((B,), jnp.nan, dtype), jnp.full((B, 3, 3), jnp.nan, dtype),
                        jnp.full((B, 3), jnp.nan, dtype), jnp.zeros((B,), jnp.int32))
    if tangents is not None:
        from .adaptive_tangents import carrying_run

        def lowered(c):
            low = _generate.lower(c, system, dtype)
            return low.key, low.params

        def go(key, system, states0, dt, t0, P, A0):
            *out, A_out = _launch((jnp.dtype(dtype).name, key, None, True), states0, dt, t0, system, P, n_frames,
                                  save_every, memory0=A0)
            return tuple(out), A_out

        return carrying_run(method, system, t0, states0, tangents, jnp.broadcast_to(dt, (B,)), lowered, go, (dt, t0))
    low = _generate.lower(method, system, dtype)
    if event is None:
        return _launch((jnp.dtype(dtype).name, low.key, None, False), states0, dt, t0, system, low.params, n_frames,
                       save_every)
    ev, P, Q = event_launch(method, system, dtype, event, low.params)
    return _launch((jnp.dtype(dtype).name, low.key, ev, False), states0, dt, t0, system, P, n_frames, save_every, Q)


@functools.lru_cache(maxsize=None)
def _ffi(*key):
    """Warp's JAX custom call of a constant-step kernel (:func:`jaxrot.kernels.fixed_loop.kernel`), built once."""
    from .fixed_loop import OUTPUTS, kernel

    return jax_kernel(kernel(*key)[1], len(OUTPUTS))


def _launch(key, states0, dt, t0, system, P, n_frames, save_every, Q=None, memory0=None):
    """The constant-step kernel of ``key = (dtype name, generated method's key, event or None, memory
    given)`` (:func:`jaxrot.kernels.fixed_loop.kernel`) on a batch: one custom call, or a slice of the
    batch per core (:mod:`jaxrot.kernels.host_threads`); its outputs, the first four without an event,
    then with ``memory0`` (B, len(A)), each body's memory at the start, the memory at the frames."""
    from .fixed_loop import kernel, output_dims

    dtype = states0.R.dtype
    B = states0.R.shape[0]
    given = memory0 is not None
    A0 = jnp.asarray(memory0, dtype) if given else jnp.zeros((B, _generate.memory_length(key[1])), dtype)
    args = (jnp.asarray(states0.R, dtype), jnp.asarray(states0.Pi, dtype), A0, jnp.reshape(jnp.asarray(dt, dtype), (1,)),
            jnp.reshape(jnp.asarray(t0, dtype), (1,)), jnp.asarray(system.body.J, dtype).reshape(1, 3), P,
            jnp.zeros((1,), dtype) if Q is None else jnp.asarray(Q, dtype))
    threads = host_threads.threads_for(B, int(n_frames) * int(save_every), _generate.split_weight(key[1]))
    dims = output_dims(B, n_frames, given)
    if threads == 1 or jax.default_backend() != "cpu":  # (a machine with a GPU keeps Warp's custom call)
        out = _ffi(*key)(*args, int(n_frames), int(save_every), launch_dims=(B,), output_dims=dims)
    else:
        S, k = kernel(*key)
        out = host_threads.call(k, S, threads, int(n_frames), int(save_every), *args, dims=dims)
    out = tuple(out)
    return (out[:8] if key[2] is not None else out[:4]) + ((out[8],) if given else ())


def fused_frames(method, system, states0, dt, t0, n_frames: int, save_every: int, *, event=None, reference=None,
                 derivative: str | None = None):
    """Run ``n_frames * save_every`` steps of every body in one fused kernel launch.

    Frame ``k`` (0-based) is the state after ``(k + 1) * save_every`` steps; step ``j`` starts at
    ``t0 + j dt`` (no accumulated round-off). The kernel runs on the device of the inputs (CPU
    through Warp's LLVM back end, CUDA through NVRTC), one thread per body; inside ``jax.jit`` it is one
    custom call (on a machine whose default backend is the CPU, a run of at least 64 bodies and 4 096
    body-steps is one call of a Python function instead that launches a slice of the batch per core,
    :mod:`jaxrot.kernels.host_threads`).
    Cost: one launch per device (or per core); memory: the saved frames only.

    Args:
      method: an integrator instance (``jaxrot.integrators.get(name)``) with a kernel (:func:`supports`).
      system: a :class:`jaxrot.physics.problems.System` (body ``J`` of shape (3,) and torque, shared by all
        bodies).
      states0: a :class:`jaxrot.State` with a leading batch axis B (``R`` (B, 3, 3), ``Pi`` (B, 3)),
        float32 or float64 (the run's dtype).
      dt, t0: step and start time (scalars, may be traced).
      n_frames, save_every: Python ints.
      event: a :class:`jaxrot.Event` whose condition the kernel restates (:func:`why_not` with the
        event), checked after every step (:mod:`jaxrot.kernels.fixed_loop`), or None.
      reference: optional pure-JAX function of the same signature and outputs (with ``event=event``
        where there is one); with it the result is
        differentiable in forward and reverse mode (``jax.custom_jvp``: tangents are
        ``jax.jvp(reference, ...)``'s, the values the kernel's) with respect to ``states0``, ``dt``,
        ``t0`` and the system's array leaves.
      derivative: with ``reference`` and without an event, ``"vjp"`` (the run is being differentiated in
        reverse mode only) or ``"jvp"`` (forward mode): that derivative runs in the kernels instead
        (:func:`jaxrot.kernels.adaptive_derivatives.fixed_in_kernels`): forward mode carries the
        tangents in the run (:mod:`jaxrot.kernels.adaptive_tangents`); reverse mode walks the
        method's step derivative generated from its JAX code back over a record (its frames as the
        checkpoints from which the backward pass steps the states again, wherever they fit in
        ``adaptive_backward.RECORD_BYTES``; for a method that carries a memory, every step's state
        where that fits); the step's and the start's own derivatives, and those of a step that cannot
        be restated, the reference's.

    Returns:
      ``(R_frames (B, n_frames, 3, 3), Pi_frames (B, n_frames, 3), failed_step (B,) int32, result (B,) int32)``:
      ``failed_step`` the 1-based first step whose ``Pi`` is non-finite (-1: none), ``result`` 0
      (successful) or 2 (non-finite state), the codes of :class:`jaxrot.RESULTS`; with an event also
      ``(t_event (B,), R_event (B, 3, 3), Pi_event (B, 3), steps (B,) int32)``: the first crossing
      (NaN where none) and the steps taken (fewer than all after a terminal event).

    Example::

        m, p = jaxrot.integrators.get("buss2p"), jaxrot.problems.get("fast_top")
        s0 = jax.tree_util.tree_map(lambda x: x[None], p.state0)
        R, Pi, failed, result = fused_frames(m, p.system, s0, 1e-3, 0.0, 10, 100)

    Raises ``ImportError`` without Warp (``pip install 'jaxrot[fast]'``) and ``ValueError`` for a method or
    torque without a kernel.
    """
    _check(method, system, states0, n_frames, save_every, event)
    warp()  # the ImportError early, outside any trace
    dtype = states0.R.dtype
    dt = jnp.asarray(dt, dtype)
    t0 = jnp.asarray(t0, dtype)
    if reference is None:
        return _forward(method, system, states0, dt, t0, n_frames, save_every, event)

    import equinox as eqx

    from .adaptive_derivatives import fixed_in_kernels, fixed_reason

    if fixed_reason(method, system, dtype, states0.R.shape[0], n_frames, save_every, derivative, event) is None:
        sys_static = eqx.partition(system, eqx.is_array)[1]

        def sys_ref(a, s, dt, t0):
            return reference(method, eqx.combine(a, sys_static), s, dt, t0, n_frames, save_every)

        return fixed_in_kernels(method, system, states0, dt, t0, n_frames, save_every, derivative, _forward, sys_ref)

    # the event's arrays (values its condition closes over) are inputs too, not constants of the rule
    arrays, static = eqx.partition((method, system, event), eqx.is_array)

    def ref(arrays, states0, dt, t0):
        m, s, ev = eqx.combine(arrays, static)
        return reference(m, s, states0, dt, t0, n_frames, save_every, **({} if ev is None else {"event": ev}))

    # a custom JVP rather than a custom VJP: forward mode (jax.jvp, jacfwd) then works too, and reverse
    # mode follows by JAX's linearisation and transposition of the reference's (linear) tangent program
    @jax.custom_jvp
    def run(arrays, states0, dt, t0):
        m, s, ev = eqx.combine(arrays, static)
        return _forward(m, s, states0, dt, t0, n_frames, save_every, ev)

    @run.defjvp
    def run_jvp(primals, tangents):
        _, t_out = jax.jvp(ref, primals, tangents)
        return run(*primals), t_out

    return run(arrays, states0, dt, t0)
