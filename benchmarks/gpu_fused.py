"""Fused kernels against XLA on a GPU: agreement of the final states, and body-steps per second.

For each method with a kernel here (``buss2p``, ``buss4``, ``dmv10`` on the torque-free T-handle;
``rkmk8`` and ``rk4`` on the asymmetric heavy top, gravity written by hand and as a plain function), each
precision and each batch size: one ``jaxrot.simulate`` call of ``n`` steps saving the final state, with
``executor=jaxrot.Fused()`` and with XLA's ``lax.scan`` (``jaxrot.XLA()`` for one body,
``jaxrot.Sharded()`` over the one device for a batch), run in turn, medians of ``--reps`` timed calls
after a warm-up call (which compiles); and with ``executor=None``, recording which executor the
automatic choice ran and its speed against ``Fused()``. The largest difference of the final
attitudes between the fused and XLA runs is recorded beside the speed.

    python benchmarks/gpu_fused.py --out DIR [--quick] [--device gpu|cpu] [--methods rkmk8,...]

Writes ``gpu_fused.json`` and ``gpu_fused.md`` to ``DIR`` with their provenance; prints each row as it
is measured.
"""

import argparse
import dataclasses
import json
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import jaxrot  # noqa: E402
from jaxrot import problems  # noqa: E402
from jaxrot.present import output, provenance  # noqa: E402
from jaxrot.studies.timing import median_seconds_interleaved  # noqa: E402


def gravity_as_function(p):
    g = p.system.torque
    mgl, com, up = g.mgl, jnp.asarray(g.com), jnp.asarray(g.up)

    def gravity(t, R, Pi):
        return -mgl * jnp.cross(R @ com, up)

    return dataclasses.replace(p, torque=jaxrot.Torque(gravity))


def cases(quick: bool):
    th, top = problems.get("t_handle"), problems.get("asymmetric_top")
    top_fn = gravity_as_function(top)
    out = [("buss2p", th, "T-handle", 1e-3), ("buss4", th, "T-handle", 1e-3), ("dmv10", th, "T-handle", 1e-3),
           ("rkmk8", top, "heavy top, GravityTorque", 1e-2), ("rkmk8", top_fn, "heavy top, plain function", 1e-2),
           ("rk4", top_fn, "heavy top, plain function", 1e-3)]
    return out[:2] + out[4:5] if quick else out


def random_states(B, dtype, seed=0):
    rng = np.random.default_rng(seed)
    R = jax.vmap(jaxrot.so3.exp)(jnp.asarray(rng.normal(size=(B, 3))))
    return jaxrot.State(jnp.asarray(R, dtype), jnp.asarray(rng.normal(size=(B, 3)), dtype))


def _runner(method, p, s, dt, n, executor, chosen=None):
    one = s.R.shape[0] == 1
    s = jaxrot.State(s.R[0], s.Pi[0]) if one else s

    def run():
        traj = jaxrot.simulate(method, p, jnp.asarray(dt, s.R.dtype), n, saveat=jaxrot.SaveAt(steps=n), state0=s, executor=executor)
        if chosen is not None and not chosen:  # the first call's: the same on every call
            chosen.append(dict(traj.provenance)["executor"])
        return traj.states.R.block_until_ready()

    return run


def measure(method, p, dt, B, n, dtype, reps):
    s = random_states(B, dtype)
    xla = jaxrot.XLA() if B == 1 else jaxrot.Sharded()
    chosen = []  # the executor that the automatic choice (executor=None) ran
    fs = {"XLA": _runner(method, p, s, dt, n, xla), "fused": _runner(method, p, s, dt, n, jaxrot.Fused()),
          "auto": _runner(method, p, s, dt, n, None, chosen)}
    finals = {k: np.asarray(f()) for k, f in fs.items()}  # compile; the final states compared below
    med = dict(zip(fs, median_seconds_interleaved(list(fs.values()), reps)))  # timed in turn
    return {"body-steps/s XLA": B * n / med["XLA"], "body-steps/s fused": B * n / med["fused"],
            "fused / XLA": med["XLA"] / med["fused"], "automatic choice": chosen[0], "auto / fused": med["fused"] / med["auto"],
            "max abs difference of R, fused - XLA": float(np.max(np.abs(finals["fused"] - finals["XLA"])))}


def main(out_dir, quick=False, reps=3, methods=None):
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    dev = jax.devices()[0]
    # steps per call by batch size: a call of 0.02-2 s on an H100-class GPU for the cheapest method
    sizes = ((1, 500), (10_000, 200)) if quick else ((1, 2000), (10_000, 1000), (1_000_000, 100))
    res = {"device": str(dev), "device_kind": getattr(dev, "device_kind", ""), "jax": jax.__version__,
           "reps": reps, "rows": []}
    for name, p, label, dt in cases(quick):
        if methods and name not in methods:
            continue
        for dtype in (jnp.float64, jnp.float32):
            if dtype == jnp.float32 and name not in ("buss2p", "rkmk8"):
                continue
            for B, n in sizes:
                row = {"method": name, "problem": label, "dtype": jnp.dtype(dtype).name, "bodies": B, "steps": n,
                       "dt": dt}
                try:
                    row.update(measure(name, p, dt, B, n, dtype, reps))
                except Exception as err:  # noqa: BLE001 - a row that fails is recorded, the others still run
                    row["error"] = f"{type(err).__name__}: {str(err)[:300]}"
                res["rows"].append(row)
                print(json.dumps(row), flush=True)
                with output.atomic(out_dir / "gpu_fused.json") as tmp:  # the rows so far, never half a file
                    tmp.write_text(json.dumps(res, indent=1))
    with output.atomic(out_dir / "gpu_fused.md") as tmp:
        tmp.write_text(markdown(res))
    print(markdown(res))

    provenance.record(out_dir, [out_dir / "gpu_fused.json", out_dir / "gpu_fused.md"],
                      command="python " + " ".join(sys.argv), quick=quick)
    return res


COLUMNS = ["method", "problem", "dtype", "bodies", "steps", "body-steps/s XLA", "body-steps/s fused", "fused / XLA",
           "automatic choice", "auto / fused", "max abs difference of R, fused - XLA"]


def markdown(res) -> str:
    """The rows of a run (its JSON) as a Markdown table."""
    lines = [f"device: {res['device']} ({res['device_kind']}), jax {res['jax']}, medians of {res['reps']}", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in res["rows"]:
        cells = [r.get(c, r.get("error", "")) for c in COLUMNS]
        lines.append("| " + " | ".join(f"{c:.3g}" if isinstance(c, float) else str(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="jaxrot-results")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--device", choices=("gpu", "cpu"), default="gpu")
    ap.add_argument("--methods", default="", help="only these methods (comma-separated)")
    args = ap.parse_args()
    jax.config.update("jax_platforms", "cuda" if args.device == "gpu" else "cpu")
    main(args.out, args.quick, args.reps, [m for m in args.methods.split(",") if m])
