"""How many slices a CPU batch of the fused adaptive kernel is cut into: the call's fixed cost against
the balance of bodies that take very different numbers of steps.

For the heterogeneous heavy tops of ``jaxrot bench heterogeneous`` (256 bodies over T = 2 and 1 000
over T = 10, ``rkmk8(5,3)`` at rtol = atol = 1e-8 and 1e-12, float64) and each number of slices per
core in ``--per-core``: the full run, a run that a terminal event ends at T/10, and a run to
t = 1e-6 (one step: what a call costs beyond its bodies' steps), all through
``jaxrot.kernels.adaptive.fused_adaptive`` in one jitted call each, every setting's calls timed in turn
(medians of ``--reps``). Run it on an otherwise idle machine; compare within one run.

    python benchmarks/adaptive_slices.py --out DIR [--per-core 8,4,2] [--reps 7]

Writes ``adaptive_slices.json`` and ``adaptive_slices.md`` to ``DIR`` with their provenance.
"""

import argparse
import json
import sys

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_platforms", "cpu")

import jaxrot  # noqa: E402
from jaxrot.experiments import bench_heterogeneous as bh  # noqa: E402
from jaxrot.experiments._common import md_table  # noqa: E402
from jaxrot.kernels import adaptive as ka, adaptive_launch, host_threads  # noqa: E402
from jaxrot.present import provenance  # noqa: E402
from jaxrot.studies.timing import median_seconds_interleaved  # noqa: E402

CASES = [(256, 2.0), (1000, 10.0)]
TOLS = [1e-8, 1e-12]
PAIR = "rkmk8(5,3)"


def _calls(system, S, T, tol, per_core):
    """The three jitted calls with ``per_core`` slices per core (the count is read when a call is traced)."""
    adaptive_launch.SLICES_PER_CORE = per_core
    stop = jaxrot.Event(lambda t, s, args: t - 0.1 * T, terminal=True)

    def run(t_end, event=None):
        f = jax.jit(lambda S: ka.fused_adaptive(PAIR, system, S, 0.0, np.array([t_end]), tol, tol, max_steps=100_000,
                                                event=event).R)
        jax.block_until_ready(f(S))  # traced now, with this setting
        return lambda: f(S)

    return {"full": run(T), "event at T/10": run(T, stop), "one step": run(1e-6)}


def measure(per_core, reps):
    rows = []
    default = adaptive_launch.SLICES_PER_CORE
    try:
        for B, T in CASES:
            p, S, _, _ = bh.heavy_tops(B)
            system = bh._system(p)
            for tol in TOLS:
                calls = {k: _calls(system, S, T, tol, k) for k in per_core}
                flat = [(k, name, f) for k, fs in calls.items() for name, f in fs.items()]
                med = median_seconds_interleaved([f for _, _, f in flat], reps)
                t = {(k, name): m for (k, name, _), m in zip(flat, med)}
                for k in per_core:
                    adaptive_launch.SLICES_PER_CORE = k
                    row = {"bodies": B, "T": T, "tol": tol, "slices per core": k,
                           "slices": adaptive_launch.slices_for(B), "full (ms)": 1e3 * t[(k, "full")],
                           "event at T/10 (ms)": 1e3 * t[(k, "event at T/10")],
                           "one step (ms)": 1e3 * t[(k, "one step")],
                           "event / full": t[(k, "event at T/10")] / t[(k, "full")]}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    finally:
        adaptive_launch.SLICES_PER_CORE = default
    return rows


COLUMNS = ["bodies", "T", "tol", "slices per core", "slices", "full (ms)", "event at T/10 (ms)", "one step (ms)",
           "event / full"]


def markdown(res) -> str:
    return (f"# Slices of a CPU batch, fused adaptive {PAIR}\n\n{res['cores']} cores; jax {res['jax']}; medians of "
            f"{res['reps']} calls, settings in turn; the default is {res['default']} slices per core\n\n"
            + md_table(COLUMNS, [[r[c] for c in COLUMNS] for r in res["rows"]]) + "\n")


def main(out_dir, per_core, reps):
    res = {"cores": host_threads.cores(), "jax": jax.__version__, "reps": reps,
           "default": adaptive_launch.SLICES_PER_CORE, "rows": measure(per_core, reps)}
    provenance.write_record(out_dir, "adaptive_slices", res, markdown(res), command="python " + " ".join(sys.argv))
    print(markdown(res))
    return res


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="jaxrot-results")
    ap.add_argument("--per-core", default="8,4,2")
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    main(args.out, [int(k) for k in args.per_core.split(",") if k], args.reps)
