"""A heterogeneous batch of heavy tops under error control: each body at its own pace in the fused
adaptive kernel, against XLA's vmapped adaptive loop (every body iterates until the slowest is done),
the cheapest fixed-step run that is as accurate, and diffrax.

The batch: ``--bodies`` heavy tops (the ``fast_top`` problem's body and gravity, J = (5, 5, 1),
mgl = 20), spun about the symmetry axis at rates log-uniform over 5-100 rad/s, the axis tilted
0.05-1.2 rad from the vertical at a random azimuth; span ``--T`` (10); float64. For each tolerance
(rtol = atol, ``--tols``: 1e-8 and 1e-12):

- fused adaptive: ``jaxrot.kernels.adaptive.fused_adaptive`` of ``--pair`` (``rkmk8(5,3)``, RKMK8 under
  DOP853's own error estimate; ``rkmk8(5)`` for its fifth-order one), one thread per body;
- XLA's adaptive loop: ``jaxrot.simulate(pair, ..., stepsize=jaxrot.Adaptive(tol, tol), executor=jaxrot.XLA())``,
  the same steps (the same worst error);
- fixed steps: the fewest steps of fused ``rkmk8`` (5 % resolution) whose worst final error is at most
  the fused adaptive run's;
- fused adaptive with a terminal event at ``T/10`` (a clock condition, ``t - T/10``): each body
  stops there, the time a run that ends early costs against the full run;
- diffrax ``Dopri8`` and ``Tsit5`` vmapped over the batch, ``PIDController(rtol=tol, atol=tol)`` at its
  default coefficients, on the body-frame equations (12 numbers), at the loosest tolerance whose worst
  final error is at most the fused adaptive run's (searched as the precision suite searches, from ten
  times that error down by sqrt(10), refined once to 10^(1/4), on 64 search bodies: the 32 the
  fused run finds hardest and the 32 fastest spins; then confirmed on the batch).

The error is the largest final attitude error over the batch (the rotation angle to the reference:
fused fixed-step ``rkmk8``, brought back onto SO(3) every 4 096 steps, at doubling step counts until
two agree within 1e-14 rad on every body, or until doubling stops shrinking their difference). The
reference's change between its two finest runs (recorded) is largest on the slow tops (below the
20 rad/s at which this top can sleep upright, J3^2 w^2 > 4 J1 mgl) that start nearly upright and fall
away from that unstable position, amplifying round-off: measured 7.6e-12 rad at 131 072 steps, about
the worst error a run at rtol = 1e-12 reaches, so the comparisons at 1e-12 are at that floor.
Times: the median of ``--reps`` calls of each contender, the contenders' calls in turn (after one
untimed call each: compiled), per body. On this repository's 2-core CPU the targets are the fused
adaptive run at <= 0.2x XLA's loop and <= 0.1x the best diffrax entry per body, and the run
with a terminal event at T/10 at <= 0.15x the full run; on a GPU
(``--bodies 100000``), >= 10x XLA's loop.

    jaxrot bench heterogeneous [--quick] [--out DIR]   # 1000 bodies, T = 10, rtol = atol = 1e-8 and 1e-12
    python benchmarks/heterogeneous_batch.py [--bodies 1000] [--T 10] [--tols 1e-8,1e-12] [--reps 3] [--out figures]
    python benchmarks/heterogeneous_batch.py --bodies 100000 --vs-xla-only   # the GPU target's pair alone
    python benchmarks/heterogeneous_batch.py --quick   # a smoke test: 16 bodies, T = 0.5, one tolerance, Tsit5 only

The fused runs need Warp (``pip install 'jaxrot[fast]'``); without diffrax (``jaxrot[bench]``) its rows
are left out, with a note.

Writes ``heterogeneous_batch[_<device>][_quick].json`` and ``.md`` to ``--out`` (each atomically) and records them
in its ``provenance.json``.
"""

import argparse
import json
import math
import pathlib
import sys
import time

import importlib.util

import jax
import jax.numpy as jnp
import numpy as np

import jaxrot
from jaxrot import kernels, problems
from jaxrot.kernels import adaptive as ka
from jaxrot.studies import analysis
from jaxrot.studies.timing import median_seconds_interleaved

SEARCH_BODIES = 64
MAX_STEPS = 1 << 21


def heavy_tops(B: int, seed: int = 0):
    """``(problem, states)``: ``B`` heavy tops, spins log-uniform over 5-100 rad/s about the symmetry
    axis, tilts uniform over 0.05-1.2 rad at a uniform azimuth."""
    p = problems.get("fast_top")
    rng = np.random.default_rng(seed)
    spin = np.exp(rng.uniform(np.log(5.0), np.log(100.0), B))
    tilt = rng.uniform(0.05, 1.2, B)
    azim = rng.uniform(0.0, 2 * np.pi, B)
    ex, ez = np.eye(3)[0], np.eye(3)[2]
    R = jax.vmap(lambda a, t: jaxrot.so3.exp(a * jnp.asarray(ez)) @ jaxrot.so3.exp(t * jnp.asarray(ex)))(
        jnp.asarray(azim), jnp.asarray(tilt))
    J = np.asarray(p.body.J, np.float64)
    Pi = jnp.asarray(np.stack([np.zeros(B), np.zeros(B), J[2] * spin], axis=1))
    return p, jaxrot.State(R, Pi), spin, tilt


def _system(p):
    return jax.tree_util.tree_map(
        lambda x: x.astype(jnp.float64) if isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jnp.floating) else x,
        p.system)


def fixed_final(system, S, T, N):
    """Final states of ``N`` fused ``rkmk8`` steps over ``[0, T]``."""
    m = jaxrot.integrators.get("rkmk8")
    R, Pi, _, _ = kernels.fused_frames(m, system, S, jnp.asarray(T / N), jnp.asarray(0.0), 1, int(N))
    return jaxrot.State(R[:, 0], Pi[:, 0])


def _orthonormal(R):
    """Three Bjorck steps towards the nearest rotation."""
    for _ in range(3):
        R = R + 0.5 * R @ (jnp.eye(3, dtype=R.dtype) - jnp.swapaxes(R, -1, -2) @ R)
    return R


def reference_final(system, S, T, N, segment=4096):
    """Final states of ``N`` fused ``rkmk8`` steps, in launches of ``segment`` steps with the attitude
    brought back onto SO(3) between them (over 10^5 steps the drift off SO(3) reaches ~1e-11)."""
    m = jaxrot.integrators.get("rkmk8")
    dt = T / N
    seg = min(segment, N)
    for k in range(N // seg):
        R, Pi, _, _ = kernels.fused_frames(m, system, S, jnp.asarray(dt), jnp.asarray(k * seg * dt), 1, seg)
        S = jaxrot.State(_orthonormal(R[:, 0]), Pi[:, 0])
    return S


def reference(system, S, T, n0, log=print):
    """Final states of the reference (:func:`reference_final`) at doubling step counts until two agree
    within 1e-14 rad, or until doubling no longer shrinks their difference fourfold (round-off,
    amplified by the slow tops that start near the unstable upright position): the finer one."""
    prev = reference_final(system, S, T, n0)
    n, d_prev = n0, math.inf
    while True:
        n *= 2
        cur = reference_final(system, S, T, n)
        d = float(jnp.max(analysis.attitude_error(cur.R, prev.R)))
        log(f"  reference: {n} steps, change from {n // 2}: {d:.2e} rad")
        if d <= 1e-14 or d > 0.25 * d_prev or n >= 1 << 22:
            return cur, n, d
        prev, d_prev = cur, d


def _e(x):
    return "-" if x is None else f"{x:.2e}"


def worst(S, ref):
    """The largest final attitude error over the batch (inf where a body is not finite)."""
    e = analysis.attitude_error(jnp.asarray(S.R, jnp.float64), ref.R)
    return float(jnp.max(jnp.where(jnp.isfinite(e), e, jnp.inf)))


def per_body_errors(S, ref):
    return np.asarray(analysis.attitude_error(jnp.asarray(S.R, jnp.float64), ref.R))


def take(S, idx):
    return jax.tree_util.tree_map(lambda x: x[idx], S)


def diffrax_runner(p, T, solver_name):
    """A jitted ``run(S, tol) -> (final states, steps per body)`` of diffrax's solver with its PID
    controller (rtol = atol = tol), vmapped over the batch: every step attempted counted, a body that
    runs out of steps left as it is (its error shows it)."""
    from .precision_runs import diffrax_batch

    return diffrax_batch(solver_name, p, T, max_steps=MAX_STEPS, throw=False, count="num_steps")


def loosest_tolerance(run, S, ref, idx, target, log, tries=12):
    """The loosest tolerance (from 10 target down by sqrt(10), refined once) whose worst error on the
    bodies ``idx`` is at most ``target``, then tightened by 10^(1/4) until the whole batch meets it."""
    Ss, rs = take(S, idx), take(ref, idx)

    def passes_sub(tol):
        e = worst(run(Ss, tol)[0], rs)
        log(f"    tol {tol:.2e}: worst error on the search bodies {e:.2e}")
        return e <= target

    tol, _ = analysis.loosest_passing_tolerance(passes_sub, 10 * target, tries=tries, refine=1)
    while tol is not None:
        e = worst(run(S, tol)[0], ref)
        log(f"    tol {tol:.2e}: worst error on the batch {e:.2e}")
        if e <= target:
            return tol
        tol = tol * 10 ** -0.25 if tol > 1e-16 else None
    return None


def fewest_steps(system, S, ref, T, idx, target, n_start, log):
    Ss, rs = take(S, idx), take(ref, idx)

    def passes_sub(n):
        e = worst(fixed_final(system, Ss, T, n), rs)
        log(f"    N {n}: worst error on the search bodies {e:.2e}")
        return e <= target

    N, _ = analysis.smallest_passing_count(passes_sub, n_start=n_start, n_max=1 << 23)
    while N is not None:
        e = worst(fixed_final(system, S, T, N), ref)
        log(f"    N {N}: worst error on the batch {e:.2e}")
        if e <= target:
            return N
        N = math.ceil(N * 1.05)
    return None


def run_tolerance(p, system, S, ref, T, tol, pair, reps, diffrax_solvers, diffrax_bodies, log):
    """The rows of one tolerance (``ref`` None: the fused run and XLA's loop only, errors unknown)."""
    B = S.R.shape[0]
    ts = np.array([T])
    fused = jax.jit(lambda S: ka.fused_adaptive(pair, system, S, 0.0, ts, tol, tol, max_steps=MAX_STEPS))

    def xla(S):
        return jaxrot.simulate(pair, p, t1=T, state0=S, stepsize=jaxrot.Adaptive(rtol=tol, atol=tol, max_steps=MAX_STEPS),
                               saveat=jaxrot.SaveAt(ts=ts, t0=False), executor=jaxrot.XLA(), throw=False)

    t0 = time.perf_counter()
    out = fused(S)
    attempts = np.asarray(out.n_accepted) + np.asarray(out.n_rejected)
    final = jaxrot.State(out.R[:, -1], out.Pi[:, -1])
    errs = per_body_errors(final, ref) if ref is not None else None
    target = float(np.max(errs)) if ref is not None else None
    log(f"  fused adaptive {pair} at {tol:g}: worst error {_e(target)} rad, attempts per body "
        f"{attempts.min()}-{attempts.max()} (mean {attempts.mean():.0f}), first call {time.perf_counter() - t0:.1f} s")
    assert np.all(np.asarray(out.result) == 0), "a body did not finish"
    xo = xla(S)
    x_att = np.asarray(xo.controller.n_accepted) + np.asarray(xo.controller.n_rejected)
    x_err = worst(jaxrot.State(xo.states.R[:, -1], xo.states.Pi[:, -1]), ref) if ref is not None else None
    log(f"  XLA's loop: worst error {_e(x_err)} rad, attempts equal on {np.mean(x_att == attempts):.1%} of the bodies")
    contenders = [("fused adaptive " + pair, lambda: fused(S).R, f"tol = {tol:.0e}", float(attempts.mean()),
                   target, B),
                  ("XLA adaptive loop " + pair, lambda: xla(S).states.R, f"tol = {tol:.0e}", float(x_att.mean()),
                   x_err, B)]
    # a terminal event at T/10 in the kernel: each body stops there (the event time from the clock)
    stop = jaxrot.Event(lambda t, s, args: t - 0.1 * T, terminal=True)
    fused_ev = jax.jit(lambda S: ka.fused_adaptive(pair, system, S, 0.0, ts, tol, tol, max_steps=MAX_STEPS,
                                                   event=stop))
    ev = fused_ev(S)
    ev_att = np.asarray(ev.n_accepted) + np.asarray(ev.n_rejected)
    log(f"  fused adaptive with a terminal event at T/10: event times {float(np.min(ev.event_time)):.6f}-"
        f"{float(np.max(ev.event_time)):.6f}, attempts per body {ev_att.mean():.0f}")
    contenders.append(("fused adaptive, terminal event at T/10", lambda: fused_ev(S).R, f"tol = {tol:.0e}",
                       float(ev_att.mean()), None, B))
    if ref is None:
        return _timed(contenders, tol, reps, log)
    # the search bodies: those the fused run finds hardest and the fastest spins (hardest for a fixed step)
    speed = np.linalg.norm(np.asarray(S.Pi) / np.asarray(system.body.J), axis=-1)
    k = min(SEARCH_BODIES, B) // 2
    hardest = np.unique(np.concatenate([np.argsort(errs)[::-1][:k], np.argsort(speed)[::-1][:k]]))
    # the fixed-step search doubles from an eighth of the most attempts any body took
    log("  fixed steps (fused rkmk8):")
    N = fewest_steps(system, S, ref, T, hardest, target, max(16, int(attempts.max()) // 8), log)
    if N is not None:
        fx = jax.jit(lambda S: fixed_final(system, S, T, N).R)
        contenders.append(("fixed steps rkmk8 (fused)", lambda: fx(S), f"N = {N}", float(N),
                           worst(fixed_final(system, S, T, N), ref), B))
    dsub = np.sort(np.argsort(speed)[::-1][:diffrax_bodies]) if diffrax_bodies else np.arange(B)
    Sd = take(S, dsub)
    for name in diffrax_solvers:
        log(f"  diffrax {name}:")
        run = diffrax_runner(p, T, name)
        dref = take(ref, dsub)
        sub = np.arange(len(dsub)) if diffrax_bodies else hardest
        dt = loosest_tolerance(run, Sd, dref, sub, target, log)
        if dt is None:
            log(f"    no tolerance down to 1e-16 meets {target:.2e}")
            continue
        y, n = run(Sd, dt)
        contenders.append((f"diffrax {name}", (lambda run=run, dt=dt: run(Sd, dt)[0].R), f"tol = {dt:.1e}",
                           float(np.mean(np.asarray(n))), worst(y, dref), len(dsub)))
    return _timed(contenders, tol, reps, log)


def _timed(contenders, tol, reps, log):
    log(f"  timing {len(contenders)} contenders, {reps} calls each in turn ...")
    secs = median_seconds_interleaved([c[1] for c in contenders], reps=reps)
    rows = []
    for (name, _, setting, steps, err, nb), s in zip(contenders, secs):
        rows.append(dict(tol=tol, contender=name, setting=setting, bodies=nb, steps_per_body=steps, worst_error=err,
                         seconds=s, us_per_body=1e6 * s / nb))
    f_us = rows[0]["us_per_body"]
    for r in rows:
        r["vs_fused"] = r["us_per_body"] / f_us
        log(f"    {r['contender']:32s} {r['setting']:14s} {r['us_per_body']:12.1f} us/body  {r['vs_fused']:7.2f}x  "
            f"worst error {_e(r['worst_error'])}")
    return rows


def summary(rows):
    out = []
    for tol in sorted({r["tol"] for r in rows}, reverse=True):
        rs = [r for r in rows if r["tol"] == tol]
        f = rs[0]
        x = next(r for r in rs if r["contender"].startswith("XLA"))
        d = [r for r in rs if r["contender"].startswith("diffrax")]
        fx = [r for r in rs if r["contender"].startswith("fixed")]
        e = [r for r in rs if r["contender"].startswith("fused adaptive, terminal event")]
        s = dict(tol=tol, fused_over_xla=f["us_per_body"] / x["us_per_body"],
                 event_over_full=(e[0]["us_per_body"] / f["us_per_body"]) if e else None,
                 fused_over_best_diffrax=(f["us_per_body"] / min(r["us_per_body"] for r in d)) if d else None,
                 fused_over_fixed=(f["us_per_body"] / fx[0]["us_per_body"]) if fx else None)
        out.append(s)
    return out


def markdown(res) -> str:
    ref = (f"reference: fused rkmk8, {res['reference_steps']} steps (change from half as many: "
           f"{res['reference_change']:.1e} rad)") if res["reference_steps"] else \
        "no reference (--vs-xla-only: the two take the same steps; errors not measured)"
    lines = [f"# Heterogeneous batch: {res['bodies']} heavy tops, T = {res['T']}, float64",
             "",
             f"device: {res['device']}; jax {res['jax']}, warp {res['warp']}; medians of {res['reps']} calls "
             f"(contenders in turn); spins {res['spins']}, tilts {res['tilts']}; {ref}"
             + (f"; diffrax run on the {res['diffrax_bodies']} fastest spins" if res["diffrax_bodies"] else "")
             + (f"; code: {res['code']}" if res.get("code") else ""),
             "",
             "| tol | contender | setting | bodies | steps/body | worst final error (rad) | us/body | x fused |",
             "|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        lines.append(f"| {r['tol']:.0e} | {r['contender']} | {r['setting']} | {r['bodies']} | {r['steps_per_body']:.0f} | "
                     f"{_e(r['worst_error'])} | {r['us_per_body']:.1f} | {r['vs_fused']:.2f} |")
    lines += ["", "| tol | fused / XLA loop | fused / best diffrax | fused / fixed steps | event at T/10 / full run |",
              "|---|---|---|---|---|"]
    fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    for s in res["summary"]:
        lines.append(f"| {s['tol']:.0e} | {fmt(s['fused_over_xla'])} | {fmt(s['fused_over_best_diffrax'])} | "
                     f"{fmt(s['fused_over_fixed'])} | {fmt(s.get('event_over_full'))} |")
    return "\n".join(lines) + "\n"


def _code():
    """``git describe --always --dirty`` of the checkout this script is in (None outside one)."""
    import subprocess

    try:
        r = subprocess.run(["git", "-C", str(pathlib.Path(__file__).resolve().parent), "describe", "--always",
                            "--dirty"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return (r.stdout.strip() or None) if r.returncode == 0 else None


def cli(argv=None):
    """``python benchmarks/heterogeneous_batch.py``: the benchmark with every setting on the command line."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bodies", type=int, default=1000)
    ap.add_argument("--T", type=float, default=10.0)
    ap.add_argument("--tols", default="1e-8,1e-12")
    ap.add_argument("--pair", default="rkmk8(5,3)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--diffrax", default="Dopri8,Tsit5", help="diffrax solvers ('' for none)")
    ap.add_argument("--diffrax-bodies", type=int, default=0,
                    help="run diffrax on this many of the fastest spins only (0: the whole batch)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vs-xla-only", action="store_true",
                    help="only the fused run and XLA's loop (the same steps: no reference, no error, no search)")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke test: 16 bodies, T = 0.5, tol 1e-8, diffrax Tsit5 only, one call each")
    ap.add_argument("--out", default="figures")
    a = ap.parse_args(argv)
    command = "python " + " ".join([sys.argv[0], *(argv or sys.argv[1:])])
    return run(a.bodies, a.T, [float(x) for x in a.tols.split(",") if x], a.pair, a.reps,
               [x for x in a.diffrax.split(",") if x], a.diffrax_bodies, a.seed, a.vs_xla_only, a.quick,
               pathlib.Path(a.out), command, record=True)


def main(quick: bool = False, out_dir=None):
    """``jaxrot bench heterogeneous``: 1 000 tops, T = 10, rtol = atol = 1e-8 and 1e-12, Dopri8 and
    Tsit5 (``quick``: the smoke test)."""
    from ._common import setup

    out = setup(out_dir, quick)
    return run(1000, 10.0, [1e-8, 1e-12], "rkmk8(5,3)", 3, ["Dopri8", "Tsit5"], 0, 0, False, quick, out,
               "jaxrot bench heterogeneous" + (" --quick" if quick else ""))


def run(bodies, T, tols, pair, reps, solvers, diffrax_bodies, seed, vs_xla_only, quick, out, command,
        record: bool = False):
    """The benchmark (see the module docstring); writes its records to the folder ``out`` (``record``:
    and enters them in its ``provenance.json``; ``jaxrot bench`` records what it moves into place)."""
    jax.config.update("jax_enable_x64", True)
    if quick:
        bodies, T, tols, reps, solvers = 16, 0.5, [1e-8], 1, ["Tsit5"]
    start = time.perf_counter()

    def log(msg):
        print(f"[{time.perf_counter() - start:7.1f} s] {msg}", flush=True)

    if importlib.util.find_spec("warp") is None:
        raise RuntimeError("the heterogeneous-batch benchmark times the fused kernels, which need Warp: "
                           "pip install 'jaxrot[fast]'")
    import warp

    if solvers and importlib.util.find_spec("diffrax") is None:
        log("diffrax is not installed (pip install 'jaxrot[bench]'): its rows are left out")
        solvers = []

    dev = jax.devices()[0]
    kind = "gpu" if dev.platform == "gpu" else "cpu"
    log(f"{bodies} heavy tops, T = {T}, tolerances {tols}, {dev} ({kind})")
    p, S, spin, tilt = heavy_tops(bodies, seed)
    system = _system(p)
    t0 = time.perf_counter()
    n0 = int(2 ** math.ceil(math.log2(max(64.0, T * float(spin.max()) / 0.05))))
    if vs_xla_only:
        ref, n_ref, d_ref, solvers = None, 0, None, []
    else:
        ref, n_ref, d_ref = reference(system, S, T, n0, log)
        log(f"  reference in {time.perf_counter() - t0:.1f} s")
    rows = []
    for tol in tols:
        rows += run_tolerance(p, system, S, ref, T, tol, pair, reps, solvers, diffrax_bodies, log)
    res = dict(bodies=bodies, T=T, pair=pair, code=_code(), reps=reps,
               device=f"{dev} ({kind}, {len(jax.devices())} device)",
               jax=jax.__version__, warp=warp.__version__, cores=kernels.host_threads.cores(),
               spins="log-uniform 5-100 rad/s", tilts="uniform 0.05-1.2 rad", reference_steps=n_ref,
               reference_change=d_ref, diffrax_bodies=diffrax_bodies, quick=quick, rows=rows,
               summary=summary(rows), command=command)
    text_md = markdown(res)
    log(text_md)
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stem = "heterogeneous_batch" + ("" if kind == "cpu" else f"_{kind}") + ("_quick" if quick else "")
    files = [out / f"{stem}.json", out / f"{stem}.md"]
    from jaxrot.present import output

    for path, text in zip(files, (json.dumps(res, indent=1) + "\n", text_md)):
        with output.atomic(path) as tmp:  # never half a file
            tmp.write_text(text)
    if record:
        try:
            from jaxrot.present import provenance

            provenance.record(out, files, command=res["command"], quick=quick)
        except Exception as err:  # noqa: BLE001 - the records stand without their manifest entry
            log(f"(provenance not recorded: {type(err).__name__}: {err})")
    return res


if __name__ == "__main__":
    cli()
