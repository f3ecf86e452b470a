"""What a terminal event costs in the fused adaptive kernel, taken apart.

The heterogeneous batch of heavy tops of ``jaxrot bench heterogeneous`` (``--bodies`` tops, spins
5-100 rad/s, tilts 0.05-1.2 rad), ``rkmk8(5,3)`` at each tolerance of ``--tols``, each run one jitted call of
``jaxrot.kernels.adaptive.fused_adaptive``, timed in turn (medians of ``--reps`` after a compiling
call):

- ``full``: over ``[0, T]``, no event;
- ``to T/10``: over ``[0, T/10]``, no event (the steps a run that stops at ``T/10`` cannot avoid);
- ``event at T/10``: over ``[0, T]`` with a terminal event whose condition is the clock, ``t - T/10``;
- ``event never``: over ``[0, T]`` with a terminal event that never fires (``t - 2T``): the full run's
  steps in the event's kernel, i.e. what evaluating the condition after every step and keeping the
  step's dense output cost per attempt.

    python benchmarks/event_cost.py [--bodies 1000] [--T 10] [--tols 1e-8,1e-12] [--reps 5] [--out DIR]

Prints one row per run (attempts per body, microseconds per body, time over the full run's) and, with
``--out``, writes ``event_cost[_<device>].json`` and ``.md`` there with their provenance.
"""

import argparse
import sys

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

import jaxrot  # noqa: E402
from jaxrot.experiments import bench_heterogeneous as bh  # noqa: E402
from jaxrot.kernels import adaptive as ka  # noqa: E402
from jaxrot.present import provenance  # noqa: E402
from jaxrot.studies.timing import median_seconds_interleaved  # noqa: E402


def rows_for(p, S, T, tol, reps, pair="rkmk8(5,3)", log=print):
    bodies = S.R.shape[0]
    system = p.system

    def runner(t_end, cond):
        event = None if cond is None else jaxrot.Event(cond, terminal=True)
        ts = np.array([t_end])
        return jax.jit(lambda S: ka.fused_adaptive(pair, system, S, 0.0, ts, tol, tol, max_steps=bh.MAX_STEPS,
                                                   event=event))

    runs = [("full", runner(T, None)),
            ("to T/10", runner(0.1 * T, None)),
            ("event at T/10", runner(T, lambda t, s, args: t - 0.1 * T)),
            ("event never", runner(T, lambda t, s, args: t - 2.0 * T))]
    attempts = []
    for name, f in runs:
        out = f(S)
        if not np.all(np.asarray(out.result) == 0):
            raise RuntimeError(f"{name}: a body did not finish")
        attempts.append(float(np.mean(np.asarray(out.n_accepted) + np.asarray(out.n_rejected))))
    secs = median_seconds_interleaved([lambda f=f: f(S).R for _, f in runs], reps=reps)
    rows = []
    for (name, _), a, s in zip(runs, attempts, secs):
        rows.append(dict(tol=tol, run=name, attempts_per_body=a, attempts_over_full=a / attempts[0],
                         us_per_body=1e6 * s / bodies, time_over_full=s / secs[0],
                         us_per_attempt_over_full=(s / a) / (secs[0] / attempts[0])))
        log(f"  {name:14s} attempts/body {a:8.1f} ({a / attempts[0]:.3f})  {1e6 * s / bodies:9.2f} us/body  "
            f"time {s / secs[0]:.3f} of the full run")
    return rows


def markdown(res):
    lines = [f"# What a terminal event costs in the fused adaptive kernel ({res['device']})", "",
             f"{res['bodies']} heavy tops, T = {res['T']}, `{res['pair']}` at rtol = atol = tol, "
             f"medians of {res['reps']} calls.", "",
             "| tol | run | attempts per body | / full | µs per body | time / full | time per attempt / full's |",
             "|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        lines.append(f"| {r['tol']:g} | {r['run']} | {r['attempts_per_body']:.1f} | {r['attempts_over_full']:.3f} | "
                     f"{r['us_per_body']:.2f} | {r['time_over_full']:.3f} | {r['us_per_attempt_over_full']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bodies", type=int, default=1000)
    ap.add_argument("--T", type=float, default=10.0)
    ap.add_argument("--tols", default="1e-8,1e-12")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    device = jax.devices()[0].device_kind
    p, S, _, _ = bh.heavy_tops(a.bodies)
    rows = []
    for tol in [float(x) for x in a.tols.split(",")]:
        print(f"event_cost: {a.bodies} bodies, T = {a.T}, tol = {tol:g} on {device}", flush=True)
        rows += rows_for(p, S, a.T, tol, a.reps)
    if a.out:
        res = dict(device=device, bodies=a.bodies, T=a.T, reps=a.reps, pair="rkmk8(5,3)", rows=rows)
        stem = "event_cost" + ("" if jax.default_backend() == "cpu" else "_" + jax.default_backend())
        provenance.write_record(a.out, stem, res, markdown(res), command=" ".join(["python", *sys.argv]))


if __name__ == "__main__":
    main()
