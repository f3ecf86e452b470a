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
max(|Pi/J|, 1e-12), ts[0] - t0)``, computed by JAX as the XLA run computes it.

Events (``event=jaxrot.Event(...)``): the condition is evaluated after every accepted step; at its
first sign change the crossing is located on the step's dense output (the cubic Hermite interpolant
on SO(3) of :func:`jaxrot.driver.dense.interpolate`) by 64 bisections of the step and one Newton
step, as :mod:`jaxrot.driver.events` does; the Newton step's derivative is a central difference of
the interpolated condition over ``sqrt(eps)`` of the step (the kernel does not differentiate; the
step only polishes a root the bisection has located to the last bits). A terminal event ends its
body's loop: later outputs hold the event state. The condition is a plain function restated from its
jaxpr (:mod:`jaxrot.kernels.event_restate`).

``ADAPTIVE_KERNELS`` enrols a pair with one line; :func:`supports_adaptive` says whether a run can
be fused; :func:`fused_adaptive` runs it. On a CPU a batch is cut into slices that a pool of one
thread per core takes in turn (:mod:`jaxrot.kernels.host_threads`' pool), the fastest bodies first.
"""

import concurrent.futures
import dataclasses
import functools
import math
import typing
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from . import KERNELS, method_name, torque_kind, torque_params
from . import event_restate
from . import host_threads
from ._common import FUSE_FP, so3_funcs, torque_funcs, warp

__all__ = ["ADAPTIVE_KERNELS", "AdaptiveEntry", "AdaptiveRun", "fused_adaptive", "supports_adaptive",
           "why_not_adaptive", "pair_name"]

#: how many halvings of the step locate an event (as :mod:`jaxrot.driver.events`)
BISECTIONS = 64


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


#: pair name (as :data:`jaxrot.PAIRS`) -> kernel entry; one line enrols a pair, and
#: ``tests/test_kernels_adaptive.py`` is generated from this table
ADAPTIVE_KERNELS: dict[str, AdaptiveEntry] = {
    "rkmk8(5)": AdaptiveEntry("rkmk8", "RKMK8Embedded5", "make_rkmk8_embedded", "per_attempt", "RKMK8Pair"),
    "buss4(3)": AdaptiveEntry("buss4", "buss3"),
}


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
    if name is None:
        return f"no fused adaptive kernel for the pair {pair!r} (kernels: {', '.join(ADAPTIVE_KERNELS)})"
    J = system.body.J
    if getattr(J, "shape", None) != (3,):
        return "the fused kernels share one body among the bodies of a batch (J of shape (3,))"
    dtype = J.dtype if jnp.issubdtype(getattr(J, "dtype", None), jnp.floating) else jnp.zeros(()).dtype
    kind = torque_kind(system.torque, dtype)
    if kind is None:
        return f"no fused kernel restates the torque {type(system.torque).__name__}"
    if kind.split(":", 1)[0] not in ADAPTIVE_KERNELS[name].torques:
        return (f"the adaptive kernel of {name} restates the torques {', '.join(ADAPTIVE_KERNELS[name].torques)}, "
                f"not {type(system.torque).__name__}")
    if event is not None:
        why = event_restate.reason(event.cond_fn, dtype)
        if why is not None:
            return f"the event condition cannot be restated in a kernel: {why}"
    return None


def supports_adaptive(pair, system, event=None) -> bool:
    """True if a fused adaptive kernel exists for this pair (a name of :data:`ADAPTIVE_KERNELS` or a
    ``(high, low)`` tuple of methods), this torque and, if given, this event's condition (Warp need
    not be installed)."""
    return why_not_adaptive(pair, system, event) is None


# --------------------------------------------------------------------------------------------------
# the kernel


@functools.lru_cache(maxsize=None)
def _dense_funcs(S, torque: str, K: int, event_key: str | None):
    """Warp functions of the dense output and the event's location (see the module docstring)."""
    wp = warp()
    c = so3_funcs(S)
    tq = torque_funcs(S, torque, K)
    V, M = c.V, c.M
    from ._common import SERIES_ANGLE2

    if event_key is not None:
        g = event_restate.event_g(S, event_key)
    else:
        @wp.func
        def g(t: S, R: M, Pi: V, Q: wp.array(dtype=S)):
            return S(0.0)

    eps = float(np.finfo(np.float32 if S == wp.float32 else np.float64).eps)
    tiny = float(np.finfo(np.float32 if S == wp.float32 else np.float64).tiny)
    root_eps = math.sqrt(eps)
    series = SERIES_ANGLE2
    L1, L2, L3 = 1.0 / 6.0, 3.0 / 40.0, 5.0 / 112.0  # theta / sin(theta) in sin^2, as so3.log

    @wp.func
    def log(R: M):
        """The rotation vector of ``R`` (:func:`jaxrot.so3.log`: the antisymmetric part below pi/2,
        the symmetric part's axis above)."""
        w = S(0.5) * V(R[2, 1] - R[1, 2], R[0, 2] - R[2, 0], R[1, 0] - R[0, 1])
        cth = wp.clamp(S(0.5) * (R[0, 0] + R[1, 1] + R[2, 2] - S(1.0)), S(-1.0), S(1.0))
        s2 = wp.dot(w, w)
        s = S(0.0)
        if s2 > S(0.0):
            s = wp.sqrt(s2)
        theta = wp.atan2(s, cth)
        out = V(S(0.0), S(0.0), S(0.0))
        if cth < S(0.0):
            B = S(0.5) * (R + wp.transpose(R)) - cth * wp.identity(n=3, dtype=S)
            k = int(0)
            if B[1, 1] > B[k, k]:
                k = int(1)
            if B[2, 2] > B[k, k]:
                k = int(2)
            col = V(B[0, k], B[1, k], B[2, k])
            n = col / wp.sqrt(wp.max(wp.dot(col, col), S(tiny)))
            if wp.dot(n, w) < S(0.0):
                n = -n
            out = theta * n
        else:
            f = S(0.0)
            if s2 < S(1e-12):
                f = ((S(L3) * s2 + S(L2)) * s2 + S(L1)) * s2 + S(1.0)
            else:
                f = theta / s
            out = f * w
        return out

    @wp.func
    def dexpinv(v: V, x: V):
        """``dexp^{-1}_v x = x - v x x / 2 + c(|v|) v x (v x x)`` (:func:`jaxrot.so3.dexpinv`)."""
        a2 = wp.dot(v, v)
        cc = S(0.0)
        if a2 < S(series):
            cc = c.dexpinv_series(a2)
        else:
            half = S(0.5) * wp.sqrt(a2)
            cc = (S(1.0) - half * wp.cos(half) / wp.sin(half)) / a2
        vx = wp.cross(v, x)
        return x - S(0.5) * vx + cc * wp.cross(v, vx)

    @wp.func
    def interp(R0: M, Pi0: V, w0: V, d0: V, Pi1: V, d1: V, xi1: V, m1: V, h: S, s: S):
        """The state at ``s`` into a step of length ``h`` (:func:`jaxrot.driver.dense.interpolate`)."""
        u = s / h
        u2 = u * u
        u3 = u * u * u
        a = S(2.0) * u3 - S(3.0) * u2 + S(1.0)
        b = u3 - S(2.0) * u2 + u
        cc = S(-2.0) * u3 + S(3.0) * u2
        d = u3 - u2
        xi = (b * h) * w0 + cc * xi1 + (d * h) * m1
        return R0 @ c.exp(xi), a * Pi0 + (b * h) * d0 + cc * Pi1 + (d * h) * d1

    @wp.func
    def g_at(tk: S, R0: M, Pi0: V, w0: V, d0: V, Pi1: V, d1: V, xi1: V, m1: V, h: S, s: S, Q: wp.array(dtype=S)):
        R, Pi = interp(R0, Pi0, w0, d0, Pi1, d1, xi1, m1, h, s)
        return g(tk + s, R, Pi, Q)

    @wp.func
    def sgn(x: S):
        r = x  # (0 stays 0, NaN stays NaN, as jnp.sign)
        if x > S(0.0):
            r = S(1.0)
        if x < S(0.0):
            r = S(-1.0)
        return r

    @wp.func
    def locate(tk: S, h: S, R0: M, Pi0: V, R1: M, Pi1: V, J: V, P: wp.array(dtype=S), Q: wp.array(dtype=S)):
        """``(t, R, Pi)`` of the condition's root within the step ``[tk, tk + h]`` from ``(R0, Pi0)`` to
        ``(R1, Pi1)``: bisection of the interpolated condition to the last bit, then one Newton step."""
        w0 = wp.cw_div(Pi0, J)
        w1 = wp.cw_div(Pi1, J)
        xi1 = log(wp.transpose(R0) @ R1)
        m1 = dexpinv(-xi1, w1)
        d0 = wp.cross(Pi0, w0) + wp.transpose(R0) @ tq.tau(tk, R0, Pi0, P)
        d1 = wp.cross(Pi1, w1) + wp.transpose(R1) @ tq.tau(tk + h, R1, Pi1, P)
        ga = g_at(tk, R0, Pi0, w0, d0, Pi1, d1, xi1, m1, h, S(0.0), Q)
        lo = S(0.0)
        hi = h
        for _k in range(BISECTIONS):
            mid = S(0.5) * (lo + hi)
            if sgn(g_at(tk, R0, Pi0, w0, d0, Pi1, d1, xi1, m1, h, mid, Q)) == sgn(ga):
                lo = mid
            else:
                hi = mid
        sb = S(0.5) * (lo + hi)
        gv = g_at(tk, R0, Pi0, w0, d0, Pi1, d1, xi1, m1, h, sb, Q)
        dl = h * S(root_eps)
        gs = (g_at(tk, R0, Pi0, w0, d0, Pi1, d1, xi1, m1, h, sb + dl, Q)
              - g_at(tk, R0, Pi0, w0, d0, Pi1, d1, xi1, m1, h, sb - dl, Q)) / (S(2.0) * dl)
        s = sb
        if gs != S(0.0) and wp.isfinite(gs):
            s = sb - gv / gs
        R, Pi = interp(R0, Pi0, w0, d0, Pi1, d1, xi1, m1, h, s)
        return tk + s, R, Pi

    return g, locate


def adaptive_kernel(S, entry: AdaptiveEntry, torque: str, K: int, event_key: str | None = None,
                    direction: int | None = None, terminal: bool = True, *, key: str):
    """The Warp kernel of an enrolled pair's error-controlled loop, one thread per body (see the
    module docstring). Arguments: ``R0`` (B) 3x3, ``Pi0`` (B) 3-vectors, ``h0``, ``rtol``, ``atol``
    (B), ``t0`` (1), ``ts`` (n), ``J`` (1) 3-vector, ``P`` (the torque's parameters), ``Q`` (the
    event condition's), ``max_steps``, ``n_out``; outputs ``R_out`` (B, n), ``Pi_out`` (B, n),
    ``acc``, ``rej`` (int32), ``err``, ``result`` (int32), ``t_event``, ``R_event``, ``Pi_event`` (B)."""
    from ..driver.failures import MAX_STEPS_REACHED, NONFINITE_STATE

    wp = warp()
    c = so3_funcs(S)
    V, M = c.V, c.M
    init, step_pair = entry.make(S, torque, K)
    q1 = float(entry.low_order) + 1.0
    alpha, beta = 0.7 / q1, 0.4 / q1
    PER_ATTEMPT = entry.memory == "per_attempt"
    EVENT = event_key is not None
    TERMINAL = EVENT and bool(terminal)
    UP = direction in (None, 1)
    DOWN = direction in (None, -1)
    g, locate = _dense_funcs(S, torque, K, event_key)
    CODE_NONFINITE, CODE_MAX = int(NONFINITE_STATE), int(MAX_STEPS_REACHED)

    @wp.func
    def scaled_error(R: M, Pi: V, Rp: M, Pip: V, Rq: M, Piq: V, rt: S, at: S):
        """``sqrt(mean(((y_p - y_q) / (atol + rtol max(|y|, |y_p|)))^2))`` over ``(vec R, Pi)``."""
        acc = S(0.0)
        for r in range(3):
            for k in range(3):
                d = (Rp[r, k] - Rq[r, k]) / (at + rt * wp.max(wp.abs(R[r, k]), wp.abs(Rp[r, k])))
                acc = acc + d * d
        for k in range(3):
            d = (Pip[k] - Piq[k]) / (at + rt * wp.max(wp.abs(Pi[k]), wp.abs(Pip[k])))
            acc = acc + d * d
        return wp.sqrt(acc / S(12.0))

    def run(R0: wp.array(dtype=M), Pi0: wp.array(dtype=V), h0v: wp.array(dtype=S), rtolv: wp.array(dtype=S),
            atolv: wp.array(dtype=S), t0v: wp.array(dtype=S), ts: wp.array(dtype=S), Jv: wp.array(dtype=V),
            P: wp.array(dtype=S), Q: wp.array(dtype=S), max_steps: wp.int32, n_out: wp.int32,
            R_out: wp.array2d(dtype=M), Pi_out: wp.array2d(dtype=V), acc_out: wp.array(dtype=wp.int32),
            rej_out: wp.array(dtype=wp.int32), err_out: wp.array(dtype=S), result_out: wp.array(dtype=wp.int32),
            tev_out: wp.array(dtype=S), Rev_out: wp.array(dtype=M), Piev_out: wp.array(dtype=V)):
        b = wp.tid()
        R = R0[b]
        Pi = Pi0[b]
        h = h0v[b]
        rt = rtolv[b]
        at = atolv[b]
        t = t0v[0]
        J = Jv[0]
        A = init(R, Pi, J, P, h)
        err_prev = S(1.0)
        i = int(0)
        acc = int(0)
        rej = int(0)
        code = int(0)
        done = bool(False)
        nan = S(wp.nan)
        tev = nan
        Rev = M(nan, nan, nan, nan, nan, nan, nan, nan, nan)
        Piev = V(nan, nan, nan)
        found = bool(False)
        gprev = S(0.0)
        if not wp.isfinite(R[0, 0] + R[0, 1] + R[0, 2] + R[1, 0] + R[1, 1] + R[1, 2] + R[2, 0] + R[2, 1]
                            + R[2, 2] + Pi[0] + Pi[1] + Pi[2]):
            code = CODE_NONFINITE
            done = True
        if wp.static(EVENT):
            gprev = g(t, R, Pi, Q)
        while (not done) and i < n_out and acc + rej < max_steps:
            target = ts[i]
            hit = t + h >= target - S(1e-12) * wp.max(S(1.0), wp.abs(target))
            step = h
            if hit:
                step = target - t
            Aa = A
            if wp.static(PER_ATTEMPT):
                Aa = init(R, Pi, J, P, step)
            Rp, Pip, Ap, Rq, Piq = step_pair(R, Pi, Aa, t, step, J, P)
            err = scaled_error(R, Pi, Rp, Pip, Rq, Piq, rt, at)
            ok = err <= S(1.0)  # (False where err is NaN or infinite)
            e = wp.max(err, S(1e-10))
            fac = S(0.2)  # a non-finite error: 0.9 inf^-alpha = 0, clipped to 0.2
            if wp.isfinite(err):
                fac = S(0.9) * wp.pow(e, S(-alpha))
                if ok:
                    fac = fac * wp.pow(err_prev, S(beta))
                fac = wp.min(wp.max(fac, S(0.2)), S(5.0))
            # a step shortened to land on an output time does not shrink the next one
            h_new = step * fac
            if ok and hit:
                h_new = wp.max(h, step * fac)
            if ok:
                tk = t
                Rk = R
                Pik = Pi
                if hit:
                    t = target
                else:
                    t = t + step
                R = Rp
                Pi = Pip
                A = Ap
                err_prev = e
                acc = acc + 1
                save = hit
                if wp.static(EVENT):
                    if not found:
                        gb = g(t, R, Pi, Q)
                        crossed = bool(False)
                        if wp.static(UP):
                            if gprev < S(0.0) and gb >= S(0.0):
                                crossed = True
                        if wp.static(DOWN):
                            if gprev > S(0.0) and gb <= S(0.0):
                                crossed = True
                        if crossed:
                            found = True
                            tev, Rev, Piev = locate(tk, step, Rk, Pik, R, Pi, J, P, Q)
                            if wp.static(TERMINAL):
                                done = True
                                if target > tev:
                                    save = False
                        gprev = gb
                if save:
                    R_out[b, i] = R
                    Pi_out[b, i] = Pi
                    i = i + 1
            else:
                rej = rej + 1
            h = h_new
        # outputs not reached hold the last state (after a terminal event: the event state)
        Rf = R
        Pif = Pi
        stopped = bool(False)
        if wp.static(TERMINAL):
            if found:
                Rf = Rev
                Pif = Piev
                stopped = True
        for k in range(i, n_out):
            R_out[b, k] = Rf
            Pi_out[b, k] = Pif
        if code == 0 and i < n_out and not stopped:
            code = CODE_MAX
        acc_out[b] = acc
        rej_out[b] = rej
        err_out[b] = err_prev
        result_out[b] = code
        tev_out[b] = tev
        Rev_out[b] = Rev
        Piev_out[b] = Piev

    run.__name__ = run.__qualname__ = f"adaptive_{key}"
    # per-operation rounding, as the fixed-step kernels (no contraction into fused multiply-adds)
    return wp.kernel(run, module="unique", enable_backward=False, module_options={"fuse_fp": FUSE_FP})


@functools.lru_cache(maxsize=None)
def _kernel(dtype_name: str, pair: str, torque: str, K: int, event_key, direction, terminal):
    """``(Warp scalar type, kernel)``, built once per (dtype, pair, torque, event)."""
    wp = warp()
    S = {"float32": wp.float32, "float64": wp.float64}[dtype_name]
    ev = "" if event_key is None else f"_ev{event_key}_{direction}_{int(terminal)}"
    key = f"{pair.replace('(', '_').replace(')', '')}_{torque.replace(':', '_')}{K}_{dtype_name}{ev}"
    return S, adaptive_kernel(S, ADAPTIVE_KERNELS[pair], torque, K, event_key, direction, terminal, key=key)


#: the kernel's outputs (name, per-body shape after B) in order
_OUTPUTS = ("R_out", "Pi_out", "acc_out", "rej_out", "err_out", "result_out", "tev_out", "Rev_out", "Piev_out")
_N_IN = 12  # 10 arrays, then max_steps and n_out
_SLICED_IN = (0, 1, 2, 3, 4)  # R0, Pi0, h0, rtol, atol: one row per body; t0, ts, J, P, Q shared


def _output_dims(B, n_out):
    return {"R_out": (B, n_out), "Pi_out": (B, n_out), **{k: (B,) for k in _OUTPUTS[2:]}}


@functools.lru_cache(maxsize=None)
def _ffi(*key):
    """Warp's JAX custom call of the kernel (CUDA, and a CPU batch too small to split)."""
    return warp().jax_kernel(_kernel(*key)[1], num_outputs=len(_OUTPUTS))


# --------------------------------------------------------------------------------------------------
# a CPU batch split over the cores (as host_threads does for fixed steps), in more slices than cores
# so that the pool's threads balance bodies that take very different numbers of steps

#: from this many bodies a batch is launched in order of its bodies' initial angular speed
SORT_MIN_BODIES = 64
#: the fewest bodies a slice is given
MIN_BODIES_PER_SLICE = 16
#: slices per core: a thread that finishes early takes the next slice
SLICES_PER_CORE = 8

_RECORDED: dict[tuple, list] = {}


def slices_for(bodies: int) -> int:
    """How many slices a CPU batch of ``bodies`` is cut into (1: one launch on the calling thread)."""
    n_cores = host_threads.cores()
    if n_cores < 2 or bodies < 2 * host_threads.MIN_BODIES_PER_THREAD:
        return 1
    return max(1, min(SLICES_PER_CORE * n_cores, bodies // MIN_BODIES_PER_SLICE))


def _record(kernel, cuts, max_steps, n_out, arrays):
    wp = warp()
    sets = []
    sliced = set(_SLICED_IN) | set(range(_N_IN, _N_IN + len(_OUTPUTS)))
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        args = {i: x[int(lo):int(hi)] if i in sliced else x for i, x in arrays.items()}
        inputs = [args[i] if i in args else (max_steps if i == 10 else n_out) for i in range(_N_IN + len(_OUTPUTS))]
        launch = wp.launch(kernel, dim=int(hi - lo), device="cpu", inputs=inputs, record_cmd=True)
        sets.append((int(lo), launch, {i: a.__ctype__() for i, a in args.items()}))
    return sets


def _launch_split(kernel, n_slices, max_steps, n_out, arrays):
    B = arrays[0].shape[0]
    key = (kernel, B, n_slices, max_steps, n_out)
    if key not in _RECORDED and len(_RECORDED) >= 256:
        _RECORDED.clear()
    free = _RECORDED.setdefault(key, [])
    sliced = set(_SLICED_IN) | set(range(_N_IN, _N_IN + len(_OUTPUTS)))
    try:
        sets = free.pop()
    except IndexError:
        sets = _record(kernel, np.linspace(0, B, n_slices + 1).astype(int), max_steps, n_out, arrays)
    try:
        for lo, launch, structs in sets:
            for i, t in structs.items():
                x = arrays[i]
                t.data = x.ptr + (lo * x.strides[0] if i in sliced else 0)
                launch.set_param_at_index_from_ctype(i, t)
        futures = [host_threads._pool().submit(launch.launch) for _, launch, _ in sets]
        concurrent.futures.wait(futures)  # every slice done before the buffers go back to XLA
        for f in futures:
            f.result()
    finally:
        free.append(sets)


@functools.lru_cache(maxsize=None)
def _callable(*key):
    """Warp's JAX callable (XLA's buffers handed over without a copy) that launches the kernel in
    slices from the pool's threads; one per kernel."""
    S, kernel = _kernel(*key)
    wp = warp()
    c = so3_funcs(S)

    def split(R0, Pi0, h0, rtol, atol, t0, ts, J, P, Q, max_steps, n_out, n_slices, R_out, Pi_out, acc_out,
              rej_out, err_out, result_out, tev_out, Rev_out, Piev_out):
        ins = (R0, Pi0, h0, rtol, atol, t0, ts, J, P, Q)
        outs = (R_out, Pi_out, acc_out, rej_out, err_out, result_out, tev_out, Rev_out, Piev_out)
        arrays = {**dict(enumerate(ins)), **{_N_IN + k: o for k, o in enumerate(outs)}}
        _launch_split(kernel, n_slices, max_steps, n_out, arrays)

    A = wp.array
    split.__annotations__ = dict(
        R0=A(dtype=c.M), Pi0=A(dtype=c.V), h0=A(dtype=S), rtol=A(dtype=S), atol=A(dtype=S), t0=A(dtype=S),
        ts=A(dtype=S), J=A(dtype=c.V), P=A(dtype=S), Q=A(dtype=S), max_steps=int, n_out=int, n_slices=int,
        R_out=wp.array2d(dtype=c.M), Pi_out=wp.array2d(dtype=c.V), acc_out=A(dtype=wp.int32),
        rej_out=A(dtype=wp.int32), err_out=A(dtype=S), result_out=A(dtype=wp.int32), tev_out=A(dtype=S),
        Rev_out=A(dtype=c.M), Piev_out=A(dtype=c.V), **{"return": None})
    split.__name__ = split.__qualname__ = f"split_{kernel.key}"
    return wp.jax_callable(split, num_outputs=len(_OUTPUTS), vmap_method="sequential")


# --------------------------------------------------------------------------------------------------
# the JAX-facing function


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
    """The XLA run's first trial step per body: ``min(0.1 max(rtol, 1e-16)^(1/(q+1)) / max(|Pi/J|,
    1e-12), ts[0] - t0)``, with the same operations (``rtol`` (B,) in the run's dtype)."""
    J = jnp.asarray(system.body.J, states0.Pi.dtype)

    def one(Pi, rtol):
        w = jnp.linalg.norm(Pi / J)
        h0 = 0.1 * jnp.maximum(rtol, 1e-16) ** (1.0 / (float(q) + 1.0)) / jnp.maximum(w, 1e-12)
        return jnp.minimum(h0, ts[0] - t0)

    return jax.vmap(one)(states0.Pi, rtol)


def _forward(name, system, states0, t0, ts, rtol, atol, h0, max_steps, event):
    dtype = states0.R.dtype
    B, n_out = states0.R.shape[0], ts.shape[0]
    kind = torque_kind(system.torque, dtype)
    P = torque_params(system.torque, dtype)
    K = int(P.shape[0] // 3) if kind == "poly" else 0
    if event is None:
        ekey, Q, direction, terminal = None, jnp.zeros((1,), dtype), None, True
    else:
        ekey, Q = event_restate.lower(event.cond_fn, dtype)
        direction, terminal = event.direction, bool(event.terminal)
    if B == 0:
        z = jnp.zeros((0,), dtype)
        zi = jnp.zeros((0,), jnp.int32)
        ev = (None, None, None) if event is None else (z, jnp.zeros((0, 3, 3), dtype), jnp.zeros((0, 3), dtype))
        return AdaptiveRun(jnp.zeros((0, n_out, 3, 3), dtype), jnp.zeros((0, n_out, 3), dtype), zi, zi, z, zi, *ev)
    key = (jnp.dtype(dtype).name, name, kind, K, ekey, direction, terminal)
    J = jnp.asarray(system.body.J, dtype)
    per_body = [jnp.asarray(states0.R, dtype), jnp.asarray(states0.Pi, dtype), h0, rtol, atol]
    inverse = None
    if B >= SORT_MIN_BODIES:
        # the bodies fastest first (initial angular speed): a GPU warp of 32 threads then holds bodies
        # of like cost instead of running as long as its slowest, and a CPU's pool starts the costliest
        # slices first; the outputs go back to the caller's order (the same arithmetic per body)
        order = jnp.argsort(-jnp.linalg.norm(per_body[1] / J, axis=-1))
        inverse = jnp.argsort(order)
        per_body = [x[order] for x in per_body]
    args = (*per_body, jnp.reshape(t0, (1,)), ts, J.reshape(1, 3), P, jnp.asarray(Q, dtype))
    n_slices = min(slices_for(B), B)
    if n_slices == 1 or jax.default_backend() != "cpu":  # (a machine with a GPU keeps Warp's custom call)
        out = _ffi(*key)(*args, int(max_steps), int(n_out), launch_dims=(B,), output_dims=_output_dims(B, n_out))
    else:
        out = _callable(*key)(*args, int(max_steps), int(n_out), int(n_slices), output_dims=_output_dims(B, n_out))
    out = tuple(out) if inverse is None else tuple(x[inverse] for x in out)
    if event is None:
        return AdaptiveRun(*out[:6])
    return AdaptiveRun(*out)


def fused_adaptive(pair, system, states0, t0, ts, rtol, atol, dt0=None, max_steps: int = 100_000, *,
                   event=None, reference=None, adjoint: str = "forward") -> AdaptiveRun:
    """Error-controlled runs of a batch of bodies, each body's whole PI-controlled loop in one thread
    of one fused kernel (see the module docstring): the same accepted steps as the XLA loop of
    :func:`jaxrot.simulate` with ``stepsize=jaxrot.Adaptive(rtol, atol)`` to round-off, each body
    stopping when it is done.

    Args:
      pair: a name of :data:`ADAPTIVE_KERNELS` (``"rkmk8(5)"``, ``"buss4(3)"``) or a ``(high, low)``
        tuple of methods equal to an enrolled pair's (:func:`supports_adaptive`).
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
        ``simulate(..., adjoint="checkpointed")``).

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
    if adjoint not in ("forward", "reverse"):
        raise ValueError(f"adjoint must be 'forward' or 'reverse', got {adjoint!r}")
    warp()  # the ImportError early, outside any trace
    name = pair_name(pair)
    dtype = states0.R.dtype
    B = states0.R.shape[0]
    q = ADAPTIVE_KERNELS[name].low_order
    max_steps = int(max_steps)

    def to_dtype(system):
        return jax.tree_util.tree_map(
            lambda x: x.astype(dtype) if eqx_float(x) else x, system)

    def forward(system, states0, t0, ts, rtol, atol, dt0):
        system = to_dtype(system)
        t0 = jnp.asarray(t0, dtype)
        ts = jnp.asarray(ts, dtype).reshape(-1)
        rtol_b, atol_b = (jnp.broadcast_to(jnp.asarray(x, dtype), (B,)) for x in (rtol, atol))
        if dt0 is None:
            h0 = first_step(q, system, states0, t0, ts, rtol_b)
        else:
            h0 = jnp.broadcast_to(jnp.asarray(dt0, dtype), (B,))
        return _forward(name, system, states0, t0, ts, rtol_b, atol_b, jnp.asarray(h0, dtype), max_steps, event)

    given = dict(t0=t0, ts=ts, rtol=rtol, atol=atol, dt0=dt0)
    if reference is None:
        return forward(system, states0, **given)

    import equinox as eqx

    # JAX arrays are the differentiable inputs; Python numbers and NumPy arrays stay as given
    dyn = {k: v for k, v in given.items() if isinstance(v, jax.Array)}
    const = {k: v for k, v in given.items() if k not in dyn}
    arrays, static = eqx.partition(system, eqx.is_array)
    kw = {} if event is None else {"event": event}

    def ref(arrays, states0, dyn):
        g = {**const, **dyn}
        out = reference(pair, eqx.combine(arrays, static), states0, g["t0"], g["ts"], g["rtol"], g["atol"],
                        g["dt0"], max_steps, **kw)
        return out if isinstance(out, AdaptiveRun) else AdaptiveRun(*out)

    def fwd_run(arrays, states0, dyn):
        return forward(eqx.combine(arrays, static), states0, **{**const, **dyn})

    if adjoint == "forward":
        # tangents from the reference: jax.jvp and jax.jacfwd, and reverse mode wherever the
        # reference's tangent program can be transposed
        run = jax.custom_jvp(fwd_run)

        @run.defjvp
        def run_jvp(primals, tangents):
            _, t_out = jax.jvp(ref, primals, tangents)
            return run(*primals), t_out

        return run(arrays, states0, dyn)

    run = jax.custom_vjp(fwd_run)

    def run_fwd(arrays, states0, dyn):
        return fwd_run(arrays, states0, dyn), (arrays, states0, dyn)

    def run_bwd(res, ct):
        _, pullback = jax.vjp(ref, *res)
        return pullback(ct)

    run.defvjp(run_fwd, run_bwd)
    return run(arrays, states0, dyn)


def eqx_float(x) -> bool:
    return isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jnp.floating)
