"""Shared pieces of the fused kernels: the lazy Warp import, SO(3) functions and the time loop.

Everything here is built per scalar type ``S`` (``warp.float32`` or ``warp.float64``) by closures:
Warp compiles one module per closure, so a float32 and a float64 run get their own machine code.
Constants enter as Python floats captured by the closure and converted with ``S(c)`` inside the
kernel: a quotient written inside a kernel (``S(1.0 / 6.0)``) would be evaluated in float32.
"""


import contextlib
import functools
import os
import sys
import types
import typing

import numpy as np

from ..geometry import so3

_INSTALL = "the fused kernels need NVIDIA Warp: pip install 'jaxrot[fast]' (or pip install 'warp-lang>=1.19')"


@functools.lru_cache(maxsize=None)
def have_warp() -> bool:
    """Whether ``warp`` can be imported (without importing it)."""
    import importlib.util

    if "warp" in sys.modules:
        return sys.modules["warp"] is not None
    try:
        return importlib.util.find_spec("warp") is not None
    except (ImportError, ValueError):
        return False


def no_cpu_compiler() -> str | None:
    """Why a restated torque or event condition cannot be checked here (Warp's CPU compiler did not
    load: the restatement is compared with the function on the CPU before a kernel uses it, on a GPU
    machine too), or ``None``."""
    if warp().is_cpu_available():
        return None
    return ("Warp's CPU compiler (warp-clang, part of the warp-lang wheel) did not load, and a restated "
            "function is checked on the CPU before a kernel uses it; reinstall warp-lang")


@functools.lru_cache(maxsize=None)
def warp():
    """The ``warp`` module, imported and initialised once, quietly (an ``ImportError`` naming the extra
    to install when it is missing)."""
    try:
        import warp as wp
    except ImportError as err:  # pragma: no cover - exercised only without warp
        raise ImportError(_INSTALL) from err
    level = wp.config.log_level
    wp.config.log_level = wp.LOG_ERROR  # no banner
    try:
        with _quiet_stderr(_no_gpu()):  # Warp's native "CUDA driver not found" line on CPU-only machines
            wp.init()
    finally:
        wp.config.log_level = max(level, wp.LOG_WARNING)  # no "module ... load took ..." lines
    return wp


def _no_gpu() -> bool:
    import jax

    try:
        return not jax.devices("gpu")
    except RuntimeError:
        return True


@contextlib.contextmanager
def _quiet_stderr(active: bool):
    """Silence file descriptor 2 (native code's messages) while ``active``."""
    if not active:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


# the Taylor coefficients and threshold of jaxrot.so3 (one set of numbers for both codes)
_T1, _T2, _T3 = so3.RODRIGUES_TAYLOR
SMALL_ANGLE2 = so3.SMALL_ANGLE2
#: below the last of these squared angles (1.5 rad) rkmk8's kernel takes S1, S2 and dexp^{-1}'s
#: coefficient from their power series, truncated for each tier (``so3_funcs``), beyond it from sines
#: and cosines; the first tier is so3's own Taylor range
SERIES_TIERS = (SMALL_ANGLE2, 0.25, 1.0, 2.25)
SERIES_ANGLE2 = SERIES_TIERS[-1]


@functools.lru_cache(maxsize=None)
def _poly(S, coeffs: tuple):
    """A Warp function evaluating the polynomial with ``coeffs`` (lowest degree first) at ``x`` by
    Horner's rule, the coefficients as literals."""
    wp = warp()
    c = [float(v) for v in reversed(coeffs)]

    @wp.func
    def poly(x: S):
        r = S(wp.static(c[0]))
        for k in range(1, wp.static(len(c))):
            r = r * x + S(wp.static(c[k]))
        return r

    return poly


FUSE_FP = False


@functools.lru_cache(maxsize=None)
def so3_funcs(S):
    """Warp functions on 3-vectors and 3x3 matrices of scalar type ``S`` (restating
    :mod:`jaxrot.geometry.so3`): ``exp`` (and its parts ``rodrigues12_half``, ``exp_of``),
    ``reorthogonalize``, ``world_increment``, ``inv_inertia``."""
    wp = warp()
    V = wp.types.vector(3, S)
    M = wp.types.matrix((3, 3), S)
    a0, a1, a2_, a3, a4 = _T1
    b0, b1, b2, b3, b4 = _T2
    small = SMALL_ANGLE2

    @wp.func
    def rodrigues12_half(a2: S):
        """(S1, S2, a/2, sin(a/2)) with (S1, S2) = (sin a / a, (1 - cos a) / a^2) of the squared angle,
        Taylor below 1e-2 (where the half angle and its sine are not formed: returned as zeros)."""
        s1 = S(0.0)
        s2 = S(0.0)
        half = S(0.0)
        h = S(0.0)
        if a2 < S(small):
            s1 = (((S(a4) * a2 + S(a3)) * a2 + S(a2_)) * a2 + S(a1)) * a2 + S(a0)
            s2 = (((S(b4) * a2 + S(b3)) * a2 + S(b2)) * a2 + S(b1)) * a2 + S(b0)
        else:
            a = wp.sqrt(a2)
            half = S(0.5) * a
            h = wp.sin(half)
            s1 = wp.sin(a) / a
            s2 = S(2.0) * h * h / a2
        return s1, s2, half, h

    # S1, S2 and dexp^{-1}'s c as polynomials in a^2 on the squared-angle tiers of SERIES_TIERS (each
    # series truncated at the dtype's rounding on its tier, so3.series_coefficients): a few
    # multiply-adds instead of a square root, two sines, a cosine and divisions; the tiers keep the
    # polynomials short where the angle is small (5 terms below 0.1 rad, up to 13 below 1.5 rad)
    eps = float(np.finfo(np.float32 if S == wp.float32 else np.float64).eps)
    P1, P2, PC = ([_poly(S, tuple(so3.series_coefficients(k, x, eps))) for x in SERIES_TIERS]
                  for k in ("s1", "s2", "dexpinv"))
    NT = len(SERIES_TIERS)

    @wp.func
    def rodrigues12_dexpinv_series(a2: S):
        """(S1, S2, c) of the squared angle ``a2 < SERIES_ANGLE2`` from their power series."""
        s1 = S(0.0)
        s2 = S(0.0)
        cc = S(0.0)
        done = False
        for k in range(wp.static(NT)):
            if not done and a2 < S(wp.static(SERIES_TIERS[k])):
                s1 = wp.static(P1[k])(a2)
                s2 = wp.static(P2[k])(a2)
                cc = wp.static(PC[k])(a2)
                done = True
        return s1, s2, cc

    @wp.func
    def dexpinv_series(a2: S):
        """dexp^{-1}'s c of the squared angle ``a2 < SERIES_ANGLE2`` from its power series."""
        cc = S(0.0)
        done = False
        for k in range(wp.static(NT)):
            if not done and a2 < S(wp.static(SERIES_TIERS[k])):
                cc = wp.static(PC[k])(a2)
                done = True
        return cc

    @wp.func
    def dexpinv_c(a2: S, half: S, sh: S):
        """dexp^{-1}'s ``c = (1 - (a/2) cot(a/2)) / a^2`` in closed form, from ``a^2``, ``a/2`` and ``sin(a/2)``."""
        return (S(1.0) - half * wp.cos(half) / sh) / a2

    @wp.func
    def dexpinv_with(v: V, x: V, cc: S):
        """``dexp^{-1}_v x = x - v x x / 2 + c v x (v x x)`` with its coefficient ``c`` given."""
        vx = wp.cross(v, x)
        return x - S(0.5) * vx + cc * wp.cross(v, vx)

    @wp.func
    def dexpinv(v: V, x: V):
        """``dexp^{-1}_v x`` (:func:`jaxrot.so3.dexpinv`): ``c`` from its power series below
        ``SERIES_ANGLE2``, in closed form above."""
        a2 = wp.dot(v, v)
        cc = S(0.0)
        if a2 < S(SERIES_ANGLE2):
            cc = dexpinv_series(a2)
        else:
            half = S(0.5) * wp.sqrt(a2)
            cc = dexpinv_c(a2, half, wp.sin(half))
        return dexpinv_with(v, x, cc)

    @wp.func
    def exp_of(v: V, a2: S, s1: S, s2: S):
        """``exp(hat v)`` (Rodrigues) from ``|v|^2`` and its coefficients: ``cos a 1 + S1 hat v + S2 v v^T``."""
        c = S(1.0) - s2 * a2
        return c * wp.identity(n=3, dtype=S) + s1 * wp.skew(v) + s2 * wp.outer(v, v)

    @wp.func
    def exp(v: V):
        """``exp(hat v)``."""
        a2 = wp.dot(v, v)
        s1, s2, half, h = rodrigues12_half(a2)
        return exp_of(v, a2, s1, s2)

    @wp.func
    def reorthogonalize(R: M):
        """One Bjorck step ``R + R (1 - R^T R) / 2``."""
        E = wp.identity(n=3, dtype=S) - wp.transpose(R) @ R
        return R + S(0.5) * (R @ E)

    @wp.func
    def world_increment(R: M, L1: V, hw: V):
        """``R1 = reorth(R exp(hat(R^T hw)))`` and ``Pi1 = R1^T L1`` (world_update.world_increment_step)."""
        R1 = reorthogonalize(R @ exp(wp.transpose(R) @ hw))
        return R1, wp.transpose(R1) @ L1

    @wp.func
    def inv_inertia(R: M, J: V, x: V):
        """``I_w^-1 x = R diag(1/J) R^T x``."""
        return R @ wp.cw_div(wp.transpose(R) @ x, J)

    return types.SimpleNamespace(V=V, M=M, exp=exp, exp_of=exp_of, rodrigues12_half=rodrigues12_half,
                                 rodrigues12_dexpinv_series=rodrigues12_dexpinv_series, dexpinv_series=dexpinv_series,
                                 dexpinv_c=dexpinv_c, dexpinv_with=dexpinv_with, dexpinv=dexpinv,
                                 reorthogonalize=reorthogonalize,
                                 world_increment=world_increment, inv_inertia=inv_inertia)


@functools.lru_cache(maxsize=None)
def nonfinite_reason(S):
    """A step's :class:`jaxrot.RESULTS` code where the method has no other: 2 (non-finite state)
    where ``Pi`` is not finite, else 0."""
    wp = warp()
    V = so3_funcs(S).V

    @wp.func
    def reason(Pi: V, A: typing.Any):
        code = int(0)
        if not wp.isfinite(Pi[0] + Pi[1] + Pi[2]):
            code = int(2)
        return code

    return reason


def checked_step(S, step, reason):
    """``advance(R, Pi, A, t0, dt, k, failed, code, J, P) -> (R, Pi, A, k, failed, code)``: step ``k``
    of ``step`` at ``t0 + k dt`` (no accumulated round-off in time), the step counted, and the first
    step whose ``reason`` is not 0 recorded (1-based) with its code; the loop kernels' step."""
    wp = warp()
    c = so3_funcs(S)
    V, M = c.V, c.M

    @wp.func
    def advance(R: M, Pi: V, A: typing.Any, t0: S, dt: S, k: int, failed: int, code: int, J: V,
                P: wp.array(dtype=S)):
        t = t0 + S(k) * dt
        R1, Pi1, A1 = step(R, Pi, A, t, dt, J, P)
        k1 = k + 1
        failed1 = failed
        code1 = code
        if failed < 0:
            r = reason(Pi1, A1)
            if r != 0:
                failed1 = k1
                code1 = r
        return R1, Pi1, A1, k1, failed1, code1

    return advance


def loop_kernel(S, init, step, reason=None, *, key: str):
    """The fused run: one thread per body, ``n_frames * save_every`` steps of ``step`` from ``init``'s
    memory, every ``save_every``-th state written, the first failed step flagged.

    ``init(R, Pi, J, P, h) -> A`` and ``step(R, Pi, A, t, h, J, P) -> (R, Pi, A)`` are Warp functions of
    one body (``A``: a vector of memory, e.g. Buss's world momentum). ``reason(Pi, A) -> int``, if
    given, is a step's :class:`jaxrot.RESULTS` code (default: 2, non-finite state, where ``Pi`` is not
    finite, else 0)."""
    wp = warp()
    c = so3_funcs(S)
    V, M = c.V, c.M
    advance = checked_step(S, step, nonfinite_reason(S) if reason is None else reason)

    def run(R0: wp.array(dtype=M), Pi0: wp.array(dtype=V), dtv: wp.array(dtype=S), t0v: wp.array(dtype=S),
            Jv: wp.array(dtype=V), P: wp.array(dtype=S), n_frames: wp.int32, save_every: wp.int32,
            R_out: wp.array2d(dtype=M), Pi_out: wp.array2d(dtype=V), failed_out: wp.array(dtype=wp.int32),
            result_out: wp.array(dtype=wp.int32)):
        b = wp.tid()
        R = R0[b]
        Pi = Pi0[b]
        dt = dtv[0]
        t0 = t0v[0]
        J = Jv[0]
        A = init(R, Pi, J, P, dt)
        k = int(0)
        failed = int(-1)
        code = int(0)
        for f in range(n_frames):
            for _s in range(save_every):
                R, Pi, A, k, failed, code = advance(R, Pi, A, t0, dt, k, failed, code, J, P)
            R_out[b, f] = R
            Pi_out[b, f] = Pi
        failed_out[b] = failed
        result_out[b] = code

    run.__name__ = run.__qualname__ = f"fused_{key}"
    return wp.kernel(run, module="unique", enable_backward=False, module_options={"fuse_fp": FUSE_FP})
