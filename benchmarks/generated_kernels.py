"""Generated kernels against the hand-written ones: body-steps per second of the fixed-step loop kernel
built from a method's JAX code (:mod:`jaxrot.kernels.generate`) and of its hand-written Warp kernel
(:data:`jaxrot.kernels.KERNELS`), on the same batch in the same process, timed in turn.

    python benchmarks/generated_kernels.py --out DIR [--methods buss2p,rk4,rkmk8] [--bodies 1,10000]
        [--steps 1000] [--reps 7] [--dtype float64] [--user-pair 10000]

``--user-pair B`` also times the Crouch-Grossman 3(2) pair of examples/user_pair_fused.py (a method in a
user's file) on B heavy tops, error-controlled (rtol = atol = 1e-8) with a terminal event, through
``jaxrot.simulate`` with ``executor=Fused()`` (its generated kernel) and ``executor=XLA()``.

Writes ``generated_kernels.json`` and ``.md`` to DIR: per method and batch size the median time of a
call (of ``reps``), body-steps/s, and the ratio generated / hand-written (above 1: the generated
kernel is faster).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import platform
import statistics
import sys
import time


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--methods", default="buss2p,buss4,rk4,rkmk8")
    ap.add_argument("--bodies", default="1,10000")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--dtype", default="float64", choices=["float32", "float64"])
    ap.add_argument("--problem", default="fast_top")
    ap.add_argument("--user-pair", type=int, default=0)
    a = ap.parse_args(argv)
    import jax

    jax.config.update("jax_enable_x64", a.dtype == "float64")
    import jax.numpy as jnp
    import numpy as np

    import jaxrot
    from jaxrot import kernels
    from jaxrot.kernels import generate

    p = jaxrot.problems.get(a.problem)
    dtype = jnp.dtype(a.dtype)
    system = jax.tree_util.tree_map(lambda x: jnp.asarray(x, dtype) if hasattr(x, "dtype") else x, p.system)
    rows = []
    for name in a.methods.split(","):
        m = jaxrot.integrators.get(name)
        for B in (int(b) for b in a.bodies.split(",")):
            scale = jnp.linspace(0.9, 1.1, B, dtype=dtype)[:, None]
            s0 = jaxrot.State(jnp.broadcast_to(jnp.asarray(p.state0.R, dtype), (B, 3, 3)),
                              jnp.asarray(p.state0.Pi, dtype) * scale)
            dt, t0 = jnp.asarray(1e-3, dtype), jnp.asarray(0.0, dtype)
            low = generate.lower(m, system, dtype)
            hand_P = kernels.KERNELS[name].params(m, system, dtype)
            kind = kernels.torque_kind(system.torque, dtype)
            w = kernels.KERNELS[name].split_weight

            def gen():
                return kernels._launch((dtype.name, low.key), generate.loop, kernels._generated_ffi, w, s0, dt, t0,
                                       system, low.params, 1, a.steps)

            def hand():
                return kernels._launch((dtype.name, name, kind, 0), kernels._kernel, kernels._ffi, w, s0, dt, t0,
                                       system, hand_P, 1, a.steps)

            outs = {}
            for label, fn in (("generated", gen), ("hand", hand)):
                outs[label] = jax.block_until_ready(fn())  # compiled, and the answers kept to compare
            times = {"generated": [], "hand": []}
            for _ in range(a.reps):
                for label, fn in (("generated", gen), ("hand", hand)):
                    t = time.perf_counter()
                    jax.block_until_ready(fn())
                    times[label].append(time.perf_counter() - t)
            med = {k: statistics.median(v) for k, v in times.items()}
            diff = float(np.max(np.abs(np.asarray(outs["generated"][1]) - np.asarray(outs["hand"][1])))
                         / np.max(np.abs(np.asarray(outs["hand"][1]))))
            row = dict(method=name, bodies=B, steps=a.steps, dtype=a.dtype,
                       generated_s=med["generated"], hand_s=med["hand"],
                       generated_rate=B * a.steps / med["generated"], hand_rate=B * a.steps / med["hand"],
                       ratio=med["hand"] / med["generated"], max_rel_diff_Pi=diff)
            rows.append(row)
            print(f"{name:8s} B={B:7d}  generated {row['generated_rate']:.3e}  hand {row['hand_rate']:.3e} body-steps/s"
                  f"  generated/hand {row['ratio']:.2f}  (Pi differ by {diff:.1e})", flush=True)
    pair_rows = _user_pair(a.user_pair, a.reps) if a.user_pair else []
    meta = dict(command="python " + " ".join([os.path.relpath(__file__), *(argv or sys.argv[1:])]),
                machine=platform.processor() or platform.machine(), cores=os.cpu_count(), jax=jax.__version__,
                load=os.getloadavg(), reps=a.reps)
    lines = ["# Generated kernels against hand-written ones", "", f"`{meta['command']}`; {meta['cores']} cores, "
             f"jax {meta['jax']}, load {tuple(round(x, 1) for x in meta['load'])}; medians of {a.reps} calls, timed in turn.",
             "", "| method | bodies | steps | generated (body-steps/s) | hand-written | generated / hand | max rel. diff of Pi |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['method']} | {r['bodies']} | {r['steps']} | {r['generated_rate']:.3g} | {r['hand_rate']:.3g} "
                     f"| {r['ratio']:.2f} | {r['max_rel_diff_Pi']:.1e} |")
    for r in pair_rows:
        lines += ["", f"User's Crouch-Grossman 3(2) pair, {r['bodies']} bodies, rtol = atol = 1e-8, terminal event: "
                  f"fused {r['fused_s']:.3g} s, XLA {r['xla_s']:.3g} s (XLA / fused {r['ratio']:.2f}); "
                  f"event times differ by at most {r['max_event_time_diff']:.1e}, accepted steps equal: "
                  f"{r['same_steps']}."]
    from jaxrot.present import provenance

    provenance.write_record(a.out, "generated_kernels", dict(meta=meta, rows=rows, user_pair=pair_rows),
                            "\n".join(lines) + "\n", command=meta["command"])


def _user_pair(B: int, reps: int) -> list:
    import importlib.util

    import jax
    import jax.numpy as jnp
    import numpy as np

    import jaxrot

    path = pathlib.Path(__file__).resolve().parents[1] / "examples" / "user_pair_fused.py"
    spec = importlib.util.spec_from_file_location("user_pair_fused", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    p = jaxrot.problems.get("fast_top")
    m = mod.CrouchGrossman32()
    event = jaxrot.Event(lambda t, s, args: s.R[0, 0] - 0.5, direction=-1)
    kw = dict(state0=mod.batch(p, B), t1=0.5, stepsize=jaxrot.Adaptive(rtol=1e-8, atol=1e-8), event=event)
    runs = {name: (lambda ex=ex: jaxrot.simulate(m, p, executor=ex, **kw))
            for name, ex in (("fused", jaxrot.Fused()), ("xla", jaxrot.XLA()))}
    outs = {k: jax.block_until_ready(f()) for k, f in runs.items()}
    times = {k: [] for k in runs}
    for _ in range(max(1, reps // 2)):
        for k, f in runs.items():
            t = time.perf_counter()
            jax.block_until_ready(f())
            times[k].append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    row = dict(bodies=B, fused_s=med["fused"], xla_s=med["xla"], ratio=med["xla"] / med["fused"],
               max_event_time_diff=float(jnp.max(jnp.abs(outs["fused"].event_time - outs["xla"].event_time))),
               same_steps=bool(np.all(np.asarray(outs["fused"].controller.n_accepted)
                                      == np.asarray(outs["xla"].controller.n_accepted))))
    print(f"user pair B={B}: fused {row['fused_s']:.3f} s, XLA {row['xla_s']:.3f} s, XLA/fused {row['ratio']:.2f}",
          flush=True)
    return [row]


if __name__ == "__main__":
    main()
