"""The measurements of the precision benchmark: a batch of perturbed bodies, its reference, and for
one method or peer the cheapest setting whose maximum final attitude error over the batch meets a
target, timed.

A setting is searched on the first ``SEARCH_BODIES`` bodies of the batch (fast), then confirmed on
the whole batch and tightened (5 % more steps, or the tolerance divided by 10^(1/4)) until the whole
batch meets the target: the reported setting and error are always those of the whole batch. Step
counts are searched from one step up (doubling, then bisection to 5 %); tolerances, jaxrot's pairs'
and the peers' alike, from ten times the target down in steps of sqrt(10), then bisected once
between the last failing and the first passing one (resolution 10^(1/4)): a solver whose error
stays well below its tolerance is not held to a tolerance tighter than it needs. A pair under local
control that meets the target at ten times it is first tried at looser tolerances, a decade at a
time up to ``PAIR_LOOSEST`` (an embedded pair keeps a result of much higher order than its estimate:
``rkmk8(5)`` ends far below its tolerance).
"""

from __future__ import annotations

import math
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxrot
from jaxrot import analysis, exact, reference
from jaxrot.driver.failures import codes_of
from jaxrot.studies.timing import median_seconds, median_seconds_interleaved
from jaxrot.physics.flow import body_vector_field, pack_body, unpack_body

SEARCH_BODIES = 100
PAIR_LOOSEST = 1e-2
SCIPY_BODIES = 5


def median_time(f):
    """The timing of every row, jaxrot's and the peers' alike: the median of at least 5 calls, more
    (up to 51) until they add up to half a second (runs of a few steps take about a millisecond)."""
    return median_seconds(f, reps=5, min_seconds=0.5)


def median_times(*fs):
    """:func:`median_time` of each of ``fs``, their calls in turn (for a ratio between them)."""
    return median_seconds_interleaved(fs, reps=5, min_seconds=0.5)


def perturbed_batch(p, B, seed=0):
    """``B`` copies of the problem's initial state: momentum x (1 + 0.01 N(0,1)) per component,
    attitude turned by 0.01 N(0,1) rad about each axis."""
    rng = np.random.default_rng(seed)
    R = jax.vmap(lambda v: p.state0.R @ jaxrot.so3.exp(v))(jnp.asarray(0.01 * rng.normal(size=(B, 3))))
    Pi = jnp.asarray(np.asarray(p.state0.Pi) * (1 + 0.01 * rng.normal(size=(B, 3))))
    return jaxrot.State(R, Pi)


def reference_states(p, S, T):
    """Final states of the batch: the exact flow without torque, else DOP853 at a quarter of its
    default step (float64)."""
    if p.torque.is_free:
        return jax.vmap(lambda s: exact.free_flow(p.body.J, s, T))(S)
    h = reference.default_step(p) / 4
    return jax.vmap(lambda s: reference.reference_solution(p, T, state0=s, max_step=h).final)(S)


def head(tree, k):
    return jax.tree_util.tree_map(lambda x: x[:k], tree)


def max_error(S, ref):
    """Maximum over the batch of the rotation angle between the final attitudes (inf if any failed)."""
    e = analysis.attitude_error(jnp.asarray(S.R, jnp.float64), ref.R)
    return float(jnp.max(jnp.where(jnp.isfinite(e), e, jnp.inf)))


def _confirm_count(passes_full, N, n_max):
    while N is not None and not passes_full(N):
        N = math.ceil(N * 1.05) if N < n_max else None
    return N


def _confirm_tolerance(passes_full, tol, floor=1e-15):
    while tol is not None and not passes_full(tol):
        tol = tol * 10 ** -0.25 if tol > floor else None
    return tol


def _search_tolerance(passes, eps, tries, loosest=None):
    """The loosest passing tolerance from ``10 eps`` down; with ``loosest``, from the loosest decade
    above ``10 eps`` that passes, up to it (see the module's docstring)."""
    start = 10 * eps
    if loosest is not None and passes(start):
        while start * 10 <= loosest * (1 + 1e-9) and passes(start * 10):
            start *= 10
        # from the decade above, which failed (or is past the bound): its bisection is the refinement
        start = start * 10 if start * 10 <= loosest * (1 + 1e-9) else start
    return analysis.loosest_passing_tolerance(passes, start, tries=tries + 2, refine=1)[0]


def fixed_step_row(method, p, T, S, ref, eps, n_max=1 << 18, executor=None):
    """The smallest step count meeting ``eps`` (5 % resolution) and its time per body (run by
    ``executor``: None lets jaxrot choose)."""
    def final(n, S):
        return jaxrot.simulate(method, p, T / n, n, state0=S, saveat=jaxrot.SaveAt(t0=False), throw=False,
                               executor=executor).final

    k = min(SEARCH_BODIES, S.R.shape[0])
    Ss, rs = head(S, k), head(ref, k)
    N, _ = analysis.smallest_passing_count(lambda n: max_error(final(n, Ss), rs) <= eps, n_start=1, n_max=n_max)
    N = _confirm_count(lambda n: max_error(final(n, S), ref) <= eps, N, n_max)
    if N is None:
        return dict(method=_label(method, executor), setting=f"N > {n_max}", steps=None, us=None, err=None)
    return timed_fixed_steps(method, p, T, S, ref, N, executor)


def _label(method, executor):
    # the XLA loop (Sharded, or the automatic choice) under the method's name; the fused kernel marked
    return f"{method} (Fused)" if isinstance(executor, jaxrot.Fused) else method


def timed_fixed_steps(method, p, T, S, ref, N, executor=None):
    """The row of ``N`` fixed steps of ``method`` over ``[0, T]`` on the batch ``S``: its time per
    body (``median_time``, compiled beforehand) and its largest final attitude error against ``ref``."""
    def final():
        return jaxrot.simulate(method, p, T / N, N, state0=S, saveat=jaxrot.SaveAt(t0=False), throw=False,
                               executor=executor).final

    sec = median_time(lambda: final().R)
    return dict(method=_label(method, executor), setting=f"N = {N}", steps=N, us=1e6 * sec / S.R.shape[0], err=max_error(final(), ref))


def _tolerance_row(name, run, S, ref, eps, tries=10, beside=None, loosest=None):
    """The loosest tolerance (searched from ``10 eps``, see the module's docstring) meeting ``eps``;
    ``run(S, tol)`` returns ``(final states, steps per body)``. With ``beside`` (a function of no
    argument), the run is timed in turn with it and its seconds are returned too."""
    k = min(SEARCH_BODIES, S.R.shape[0])
    Ss, rs = head(S, k), head(ref, k)
    tol = _search_tolerance(lambda t: max_error(run(Ss, t)[0], rs) <= eps, eps, tries, loosest)
    tol = _confirm_tolerance(lambda t: max_error(run(S, t)[0], ref) <= eps, tol)
    if tol is None:
        row = dict(method=name, setting="tol < 1e-15", steps=None, us=None, err=None)
        return row if beside is None else (row, median_time(beside))
    if beside is None:
        sec = median_time(lambda: run(S, tol)[0].R)
    else:
        sec, other = median_times(lambda: run(S, tol)[0].R, beside)
    Sx, n = run(S, tol)
    row = dict(method=name, setting=f"tol = {tol:.1e}", steps=float(np.mean(n)), us=1e6 * sec / S.R.shape[0],
               err=max_error(Sx, ref), tol=tol)
    return row if beside is None else (row, other)


def pair_rows(pair, p, T, S, ref, eps, calibration_bodies=64, aim=1.0):
    """An embedded pair under local error control at the loosest tolerance meeting ``eps``, and the
    global-error driver (``Adaptive(..., error="global", measure="attitude", aim=aim)``: the target
    is an attitude error) at ``eps`` itself, with no search."""
    def go(S, tol, error="local"):
        sol = jaxrot.simulate(pair, p, t1=T, state0=S, saveat=jaxrot.SaveAt(t0=False), throw=False,
                              stepsize=jaxrot.Adaptive(tol, tol, error=error, max_steps=1 << 20, measure="attitude",
                                                       calibration_bodies=calibration_bodies, aim=aim))
        c = sol.controller
        extra = c.n_calibration if error == "global" else 0
        failed = codes_of(sol.result) != 0  # (max_steps reached, non-finite): counts as an infinite error
        R = jnp.where(failed[:, None, None], jnp.nan, sol.final.R)
        return jaxrot.State(R, sol.final.Pi), c.n_accepted + c.n_rejected + extra

    # the two timed in turn: their ratio (the driver's cost) sees the same load of a shared machine
    local, sec = _tolerance_row(f"adaptive {pair}", go, S, ref, eps, beside=lambda: go(S, eps, "global")[0].R,
                                loosest=PAIR_LOOSEST)
    Sx, n = go(S, eps, "global")
    glob = dict(method=f"to tolerance {pair}", setting=f"tol = {eps:.0e}", steps=float(np.mean(n)),
                us=1e6 * sec / S.R.shape[0], err=max_error(Sx, ref))
    return [local, glob]


def diffrax_batch(solver_name, p, T, *, max_steps: int = 1_000_000, throw: bool = True,
                  count: str = "num_accepted_steps"):
    """A jitted ``run(S, tol) -> (final states, steps per body)``: diffrax's ``solver_name`` with its
    PID controller (rtol = atol = tol) on the body-frame equations, vmapped over the batch ``S``, in
    the states' dtype; ``count``: which of diffrax's step statistics is returned."""
    import diffrax

    f = body_vector_field(p)
    term = diffrax.ODETerm(lambda t, y, args: f(t, y))
    solver = getattr(diffrax, solver_name)()

    @jax.jit
    def run(S, tol):
        def one(R, Pi):
            # times in the state's dtype: float32 runs stay float32 throughout
            t0, t1 = jnp.asarray(0.0, R.dtype), jnp.asarray(T, R.dtype)
            sol = diffrax.diffeqsolve(term, solver, t0, t1, None, pack_body(R, Pi),
                                      stepsize_controller=diffrax.PIDController(rtol=tol, atol=tol),
                                      saveat=diffrax.SaveAt(t1=True), max_steps=max_steps, throw=throw)
            return sol.ys[-1], sol.stats[count]

        y, n = jax.vmap(one)(S.R, S.Pi)
        assert y.dtype == S.R.dtype, (y.dtype, S.R.dtype)
        return jaxrot.State(*unpack_body(y)), n

    return lambda S, tol: run(S, jnp.asarray(tol, S.R.dtype))


def diffrax_row(solver_name, p, T, S, ref, eps):
    """diffrax's ``solver_name`` with its PID controller (rtol = atol), vmapped over the batch."""
    return _tolerance_row(f"diffrax {solver_name}", diffrax_batch(solver_name, p, T), S, ref, eps)


def scipy_row(p, T, S, ref, eps):
    """SciPy's DOP853 (rtol = atol) on the first ``SCIPY_BODIES`` bodies, one at a time."""
    from scipy.integrate import solve_ivp

    f = jax.jit(body_vector_field(p))
    k = min(SCIPY_BODIES, S.R.shape[0])
    sub, rsub = head(S, k), head(ref, k)

    def run(S, tol):
        out = []
        for i in range(S.R.shape[0]):
            y0 = np.asarray(pack_body(S.R[i], S.Pi[i]))
            sol = solve_ivp(lambda t, y: np.asarray(f(t, jnp.asarray(y))), (0.0, T), y0, method="DOP853",
                            rtol=tol, atol=tol)
            out.append(sol.y[:, -1])
        return jaxrot.State(*unpack_body(jnp.asarray(np.array(out)))), None

    tol = _search_tolerance(lambda t: max_error(run(sub, t)[0], rsub) <= eps, eps, 8)
    if tol is None:
        return None
    t0 = time.perf_counter()
    Sx, _ = run(sub, tol)
    return dict(method="SciPy DOP853", setting=f"tol = {tol:.1e}", steps=None,
                us=1e6 * (time.perf_counter() - t0) / k, err=max_error(Sx, rsub))
