"""Error-controlled runs in one fused kernel: the PI-controlled loop of an embedded pair, one thread
per body, each body at its own pace.

XLA's error-controlled loop over a batch is a ``lax.while_loop`` vmapped over the bodies: every body
iterates until the slowest is done (the others masked), and each iteration is a chain of small XLA
kernels. Here one Warp kernel runs the whole loop of every body, one thread per body with its state
in registers; a body that needs 50 steps stops after 50 while another takes 5 000.

The loop restates XLA's error-controlled loop (``jaxrot.simulate(pair, ..., stepsize=jaxrot.Adaptive(rtol,
atol))``) in the same order of operations, so that the same tolerances give the same accepted steps
to round-off (where round-off does not decide them: ``tests/test_kernels_adaptive.py``): per attempt the
step ``h``, shortened to land on the next output time (``hit = t + h >= target - 1e-12 max(1,
|target|)``); both solutions of the pair from the same state (an embedded pair's from one set of
stages); the error

    err = sqrt(mean(((y_p - y_q) / (atol + rtol max(|y|, |y_p|)))^2))

over the 12 numbers of ``(R, Pi)`` (non-finite: infinite); accepted where ``err <= 1``;
``fac = clip(0.9 e^-alpha err_prev^beta, 0.2, 5)`` (without ``err_prev^beta`` after a rejection),
``e = max(err, 1e-10)``, ``alpha = 0.7/(q+1)``, ``beta = 0.4/(q+1)``; the next step
``max(h, step fac)`` after an accepted step that landed on an output time, else ``step fac``; a
state saved at each output time reached; the loop ends at the last output time or after
``max_steps`` attempts. The first step, when not given, is ``min(0.1 max(rtol, 1e-16)^(1/(q+1)) /
max(|Pi/J|, 1e-12), t_1 - t0)`` (``t_1`` the first save time after ``t0``; save times at ``t0``
itself are the initial state), computed by JAX as the XLA run computes it.

Events (``event=jaxrot.Event(...)``): the condition is evaluated after every accepted step; at its
first sign change the crossing is located on the step's dense output by code generated from the XLA
loop's (:func:`jaxrot.integrators.dense_output.locate`: 64 bisections of the step, Newton steps,
polished on the pair's own steps above order 4). A terminal event ends its
body's loop: later outputs hold the event state. The condition is a plain function restated from its
jaxpr (:mod:`jaxrot.kernels.event_restate`).

The pair's attempt (its ``step_with_error`` and ``error_norm``) is generated from its own JAX code
(:func:`jaxrot.kernels.generate.lower_pair`), for a registered pair and a user's alike;
:func:`supports_adaptive` says whether a run can be fused (:mod:`jaxrot.kernels.adaptive_pairs`) and
:func:`fused_adaptive` runs it. The kernel is
built by :mod:`jaxrot.kernels.adaptive_kernel` (the dense output and event location:
:mod:`jaxrot.kernels.generate_pieces`) and launched by :mod:`jaxrot.kernels.adaptive_launch` (on a
CPU a batch is cut into slices that a pool of one thread per core takes in turn, the fastest bodies
first). :class:`jaxrot.Fused` runs ``jaxrot.simulate(pair, ..., stepsize=jaxrot.Adaptive(...))`` here.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..integrators.pairs import first_interval
from ..integrators.pairs import first_step as pair_first_step
from ._common import warp
from .adaptive_launch import launch
from .adaptive_pairs import (RESULT_MAX_STEPS_REACHED, RESULT_NONFINITE_STATE, AdaptiveRun,
                             generated_pair, pair_object, supports_adaptive, why_not_adaptive)

__all__ = ["AdaptiveRun", "fused_adaptive", "supports_adaptive", "why_not_adaptive", "first_step",
           "RESULT_NONFINITE_STATE", "RESULT_MAX_STEPS_REACHED"]


def _check(pair, system, states0, ts, max_steps, event):
    R, Pi = states0.R, states0.Pi
    if R.ndim != 3 or R.shape[1:] != (3, 3) or Pi.shape != (R.shape[0], 3):
        raise ValueError(f"states0 must be a batch of states: R (B, 3, 3) and Pi (B, 3), got R {R.shape}, "
                         f"Pi {Pi.shape}")
    if jnp.dtype(R.dtype) not in (jnp.dtype(jnp.float32), jnp.dtype(jnp.float64)):
        raise TypeError(f"states0 must be float32 or float64, got {R.dtype}")
    if isinstance(max_steps, bool) or not isinstance(max_steps, (int, np.integer)) or not 1 <= max_steps < 2 ** 31:
        raise ValueError(f"max_steps must be a positive int below 2^31, got {max_steps!r}")
    if jnp.ndim(ts) != 1 or jnp.shape(ts)[0] < 1:
        raise ValueError(f"ts must be a non-empty 1-d array of output times, got shape {jnp.shape(ts)}")
    why = why_not_adaptive(pair, system, event)
    if why is not None:
        raise ValueError(f"{why}; check jaxrot.kernels.adaptive.supports_adaptive(pair, system) first")


def first_step(q: int, system, states0, t0, ts, rtol):
    """The XLA run's first trial step per body (:func:`jaxrot.integrators.pairs.first_step`, the same
    function; ``rtol`` (B,) in the run's dtype)."""
    J = jnp.asarray(system.body.J, states0.Pi.dtype)
    return jax.vmap(lambda Pi, r: pair_first_step(q, J, Pi, r, first_interval(t0, ts)))(states0.Pi, rtol)



def fused_adaptive(pair, system, states0, t0, ts, rtol, atol, dt0=None, max_steps: int = 100_000, *,
                   event=None, reference=None, adjoint: str = "forward", stored_steps: int | None = None,
                   record: int = 0) -> AdaptiveRun:
    """Error-controlled runs of a batch of bodies, each body's whole PI-controlled loop in one thread
    of one fused kernel (see the module docstring): the same accepted steps as the XLA loop of
    :func:`jaxrot.simulate` with ``stepsize=jaxrot.Adaptive(rtol, atol)`` to round-off, each body
    stopping when it is done.

    Args:
      pair: an embedded pair whose attempt can be restated (:func:`supports_adaptive`): a registered
        name (``"rkmk8(5)"``, ``"buss4(3)"``), a ``(high, low)`` tuple of methods, or a pair object
        (a :class:`jaxrot.integrators.AbstractPair`, yours too).
      system: a :class:`jaxrot.physics.problems.System` (body ``J`` of shape (3,) and torque, shared by
        all bodies), cast to the states' dtype.
      states0: a :class:`jaxrot.State` with a leading batch axis B, float32 or float64 (the run's dtype).
      t0: start time (scalar); ts: the output times, increasing and after ``t0`` (n,).
      rtol, atol: scalars or one per body (B,).
      dt0: the first trial step (scalar or (B,)); None: from the tolerance and each body's initial
        angular velocity, as the XLA run.
      max_steps: attempts (accepted and rejected) allowed per body.
      event: a :class:`jaxrot.Event` whose condition the kernel restates (``supports_adaptive(pair,
        system, event)``), or None.
      reference: optional pure-JAX function ``reference(pair, system, states0, t0, ts, rtol, atol, dt0,
        max_steps[, event=event])`` with the same outputs (an :class:`AdaptiveRun` or a tuple of its
        fields), called with the arguments as given (Python numbers stay Python numbers); with it the
        result is differentiable with respect to ``states0``, the system's array leaves and whichever
        of ``t0``, ``ts``, ``rtol``, ``atol``, ``dt0`` are JAX arrays, the derivatives the reference's.
      adjoint: with ``reference``, ``"forward"``: a ``jax.custom_jvp`` (tangents ``jax.jvp(reference,
        ...)``'s: ``jax.jvp``, ``jax.jacfwd``; reverse mode too where the reference's tangent program
        transposes, which XLA's ``lax.while_loop`` does not); ``"reverse"``: a ``jax.custom_vjp`` whose
        backward pass is ``jax.vjp(reference, ...)`` (``jax.grad``; e.g. a reference run with
        ``simulate(..., adjoint="checkpointed")``). Without an event, for a pair that keeps no memory
        between steps, the backward pass runs in the kernels instead
        (:mod:`jaxrot.kernels.adaptive_backward`), the reference's derivatives only for ``t0`` and
        ``ts`` when they are differentiated. ``"tangents"``: forward mode only (a custom JVP that cannot
        be transposed), its tangents carried beside the states in the kernel's run where the pair
        allows it (:mod:`jaxrot.kernels.adaptive_tangents`), else ``"forward"``.
      stored_steps: the states per body the kernels' backward pass keeps (None: every accepted
        step's, :func:`~jaxrot.kernels.adaptive_backward.capacity_for`; fewer than the steps: the
        states between them recomputed, :func:`~jaxrot.kernels.adaptive_backward.record_layout`).
      record: without ``reference``, the accepted steps per body to record as well (the first
        ``record``): the result is then ``(run, record)``, the record as
        :func:`jaxrot.kernels.adaptive_launch.launch` returns it (:mod:`jaxrot.kernels.adaptive_saved`).

    Returns:
      an :class:`AdaptiveRun`: ``R`` (B, n, 3, 3), ``Pi`` (B, n, 3), ``n_accepted``, ``n_rejected`` (B,)
      int32, ``err_estimate`` (B,), ``result`` (B,) int32 (0 successful, 4 max_steps_reached, 2
      non-finite initial state), and with an event ``event_time`` (B,), ``event_R`` (B, 3, 3),
      ``event_Pi`` (B, 3) (NaN where none was found).

    Cost: one launch (on a CPU, one per slice of the batch, the slices spread over the cores); each
    body takes as many attempts as it needs.

    Example::

        p = jaxrot.problems.get("fast_top")
        S = jaxrot.State(jnp.broadcast_to(p.state0.R, (8, 3, 3)), p.state0.Pi * jnp.linspace(0.5, 2, 8)[:, None])
        run = fused_adaptive("rkmk8(5)", p.system, S, 0.0, jnp.array([5.0, 10.0]), 1e-8, 1e-8)
        run.n_accepted, run.R[:, -1]

    Raises ``ImportError`` without Warp (``pip install 'jaxrot[fast]'``) and ``ValueError`` for a pair,
    torque or event condition without a kernel.
    """
    _check(pair, system, states0, ts, max_steps, event)
    if adjoint not in ("forward", "reverse", "tangents"):
        raise ValueError(f"adjoint must be 'forward', 'reverse' or 'tangents', got {adjoint!r}")
    warp()  # the ImportError early, outside any trace
    dtype = states0.R.dtype
    B = states0.R.shape[0]
    pair_obj = pair_object(pair)
    q = int(pair_obj.error_order())
    max_steps = int(max_steps)

    def to_dtype(system):
        return jax.tree_util.tree_map(
            lambda x: x.astype(dtype) if eqx_float(x) else x, system)

    def forward(system, states0, t0, ts, rtol, atol, dt0, event=event, capacity=0, tangents=None):
        """The kernel's run; with ``tangents = (d_states0, d_arrays)`` (no event, no record) the run
        carrying the tangents of its states (:mod:`jaxrot.kernels.adaptive_tangents`): ``(run, dR, dPi)``."""
        system = to_dtype(system)
        t0 = jnp.asarray(t0, dtype)
        ts = jnp.asarray(ts, dtype).reshape(-1)
        rtol_b, atol_b = (jnp.broadcast_to(jnp.asarray(x, dtype), (B,)) for x in (rtol, atol))
        if dt0 is None:
            h0 = first_step(q, system, states0, t0, ts, rtol_b)
        else:
            h0 = jnp.broadcast_to(jnp.asarray(dt0, dtype), (B,))
        h0 = jnp.asarray(h0, dtype)
        if tangents is not None:
            from .adaptive_tangents import carrying_run

            def go(name, system, states0, t0, ts, rtol, atol, h0, P, A0):
                return launch(name, system, states0, t0, ts, rtol, atol, h0, max_steps, None, P, memory0=A0)

            return carrying_run(pair_obj, system, t0, states0, tangents, h0,
                                lambda c: generated_pair(c, system, dtype), go, (t0, ts, rtol_b, atol_b, h0))
        # the attempt generated from the pair's JAX code
        name, P = generated_pair(pair_obj, system, dtype)
        return launch(name, system, states0, t0, ts, rtol_b, atol_b, h0, max_steps, event, P, capacity=capacity)

    given = dict(t0=t0, ts=ts, rtol=rtol, atol=atol, dt0=dt0)
    if reference is None:
        return forward(system, states0, **given, capacity=int(record))

    # JAX arrays are the differentiable inputs; Python numbers and NumPy arrays stay as given
    dyn = {k: v for k, v in given.items() if isinstance(v, jax.Array)}
    const = {k: v for k, v in given.items() if k not in dyn}
    arrays, static = eqx.partition(system, eqx.is_array)
    # the event's arrays (values its condition closes over, traced where they are being differentiated)
    # are inputs too, not constants of the custom rule
    ev_arrays, ev_static = eqx.partition(event, eqx.is_array)

    def ref(arrays, states0, dyn, ev_arrays):
        g = {**const, **dyn}
        kw = {} if event is None else {"event": eqx.combine(ev_arrays, ev_static)}
        out = reference(pair, eqx.combine(arrays, static), states0, g["t0"], g["ts"], g["rtol"], g["atol"],
                        g["dt0"], max_steps, **kw)
        return out if isinstance(out, AdaptiveRun) else AdaptiveRun(*out)

    def fwd_run(arrays, states0, dyn, ev_arrays):
        ev = None if event is None else eqx.combine(ev_arrays, ev_static)
        return forward(eqx.combine(arrays, static), states0, **{**const, **dyn}, event=ev)

    from .adaptive_derivatives import in_kernels, in_kernels_jvp

    # (without an event: whether the kernels take the derivative is decided only when it is taken)
    if adjoint == "tangents" and B and event is None:
        return in_kernels_jvp(pair, to_dtype, forward, arrays, static, states0, dyn, const, ref, max_steps,
                              stored_steps)
    if adjoint in ("forward", "tangents"):
        # tangents from the reference: jax.jvp and jax.jacfwd, and reverse mode wherever the
        # reference's tangent program can be transposed
        run = jax.custom_jvp(fwd_run)

        @run.defjvp
        def run_jvp(primals, tangents):
            _, t_out = jax.jvp(ref, primals, tangents)
            return run(*primals), t_out

        return run(arrays, states0, dyn, ev_arrays)

    if B and event is None:
        return in_kernels(pair, to_dtype, forward, arrays, static, states0, dyn, const, ref, max_steps, stored_steps)
    run = jax.custom_vjp(fwd_run)

    def run_fwd(arrays, states0, dyn, ev_arrays):
        return fwd_run(arrays, states0, dyn, ev_arrays), (arrays, states0, dyn, ev_arrays)

    def run_bwd(res, ct):
        _, pullback = jax.vjp(ref, *res)
        return pullback(ct)

    run.defvjp(run_fwd, run_bwd)
    return run(arrays, states0, dyn, ev_arrays)


def integrators_get(pair):
    """The pair object of a name, a ``(high, low)`` tuple or a pair object (itself)."""
    return pair_object(pair)


def backward_reason(pair, system, dtype, event=None, kind: str = "vjp") -> str | None:
    """Why a fused error-controlled run of ``pair`` is not differentiated in the kernels, in reverse
    mode (``kind="vjp"``: :mod:`jaxrot.kernels.adaptive_backward`) or forward mode (``"jvp"``: the
    tangents carried in the run, :mod:`jaxrot.kernels.adaptive_tangents`) (its derivatives then come
    from the XLA loop), or None."""
    from .adaptive_backward import why_not_backward
    from .adaptive_tangents import carried_reason
    from .generate_vjp import keeps_memory

    p = integrators_get(pair)
    if kind == "jvp":
        return ("the kernels' tangents do not follow an event's location" if event is not None
                else carried_reason(p, system, dtype))
    return why_not_backward(p, system, dtype, keeps_memory(p, system, dtype), event)


def eqx_float(x) -> bool:
    return isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jnp.floating)
