"""A batch on one CPU device: the fused kernel against XLA's loop, and what the automatic choice runs.

For ``buss2p``, ``buss4`` and ``split4_231`` on the T-handle and ``rkmk8`` on the heavy top with gravity written as a
plain function, float64, several batch sizes, step counts and frame spacings: one ``jaxrot.simulate``
call with ``executor=jaxrot.Sharded()`` (XLA's loop over the one device), ``jaxrot.Fused()`` and
``None`` (the automatic choice, whose executor is recorded). Per executor: the first call with a step
count not run before (a warm-up call with another count first, so loading the kernel and tracing
the method are not counted; what is left is compiling for the new count), then, after one more
untimed call, the median of ``--reps`` calls. Run it on an otherwise idle machine; the ratios are within one run.

    python benchmarks/cpu_batch_choice.py --out DIR [--reps 5]

Writes ``cpu_batch_choice.json`` and ``cpu_batch_choice.md`` to ``DIR`` with their provenance.
"""

import argparse
import json
import pathlib
import sys
import time

import jax
import jax.numpy as jnp

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_platforms", "cpu")

import jaxrot  # noqa: E402
from jaxrot import problems  # noqa: E402
from jaxrot.experiments._common import md_table  # noqa: E402
from jaxrot.present import provenance  # noqa: E402
from jaxrot.studies.timing import median_seconds  # noqa: E402

from gpu_fused import gravity_as_function, random_states  # noqa: E402  (beside this script)

#: (bodies, steps, steps between frames)
SIZES = [(8, 10, 10), (64, 100, 100), (64, 100, 10), (1_000, 100, 100), (1_000, 100, 10), (10_000, 200, 200)]


def _cases():
    th, top_fn = problems.get("t_handle"), gravity_as_function(problems.get("asymmetric_top"))
    return [("buss2p", th, "T-handle", 1e-3), ("buss4", th, "T-handle", 1e-3), ("split4_231", th, "T-handle", 1e-3),
            ("rkmk8", top_fn, "heavy top, plain-function gravity", 1e-2)]


def measure(method, p, dt, B, n, every, reps):
    s = random_states(B, jnp.float64)
    row = {}
    for label, ex in (("XLA", jaxrot.Sharded()), ("fused", jaxrot.Fused()), ("auto", None)):
        def run(k, ex=ex):
            traj = jaxrot.simulate(method, p, jnp.asarray(dt), k, saveat=jaxrot.SaveAt(steps=every), state0=s, executor=ex)
            traj.states.R.block_until_ready()
            return dict(traj.provenance)["executor"]

        run(n + every)  # loads the kernel, traces the method
        t0 = time.perf_counter()
        chosen = run(n)
        row[f"first call {label} (s)"] = time.perf_counter() - t0
        row[f"{label} (ms)"] = 1e3 * median_seconds(lambda: run(n), reps)  # after one more untimed call
        if ex is None:
            row["automatic choice"] = chosen
    row["fused / XLA"] = row["XLA (ms)"] / row["fused (ms)"]
    row["auto / fused"] = row["fused (ms)"] / row["auto (ms)"]
    return row


COLUMNS = ["method", "bodies", "steps", "every", "XLA (ms)", "fused (ms)", "fused / XLA", "first call XLA (s)",
           "first call fused (s)", "automatic choice", "auto / fused"]


def markdown(res) -> str:
    head = f"device: {res['device']}, jax {res['jax']}, medians of {res['reps']}\n\n"
    return head + md_table(COLUMNS, [[r[c] for c in COLUMNS] for r in res["rows"]]) + "\n"


def main(out_dir, reps=5):
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    res = {"device": f"{jax.devices()[0]} ({len(jax.devices())} device)", "jax": jax.__version__, "reps": reps,
           "rows": []}
    for method, p, label, dt in _cases():
        for B, n, every in SIZES:
            row = {"method": method, "problem": label, "bodies": B, "steps": n, "every": every}
            row.update(measure(method, p, dt, B, n, every, reps))
            res["rows"].append(row)
            print(json.dumps(row), flush=True)
    provenance.write_record(out_dir, "cpu_batch_choice", res, markdown(res), command="python " + " ".join(sys.argv))
    print(markdown(res))
    return res


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="jaxrot-results")
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    main(a.out, a.reps)
