"""Driver overhead and throughput (or the fused kernels' cost) of two checkouts of jaxrot, alternated
in one run.

    git worktree add /tmp/base <commit>
    python benchmarks/ab_checkouts.py /tmp/base . --rounds 3 [--what kernels]

Each round runs this script's measurement in a fresh process for each checkout (A, then B), so
load on a shared machine hits both alike; the summary gives per-figure medians and B/A ratios.
Figures (buss2p, fast top, float64, every CPU core a device): the wall time of a 10-step
``simulate`` call, one body's steps/s over 10^5 steps, and body-steps/s for 10^3 and 10^5 bodies.
``--what kernels``: CPU time per body-step of ``rkmk8``'s fused kernel (300 bodies, 200 steps,
median of 15 calls) on the asymmetric top, the gravity-gradient satellite, Buss's prescribed
momentum and the free body at h = 1e-2, and on these and the slow top at the step of the precision
suite's rkmk8 rows at 1e-6. ``--what flows``: the same for the exact flow and two splittings on it
(:data:`FLOWS`), with the seconds of their first fused run and the XLA executor's time. ``--what first-call``: the seconds of a first call (16 heavy tops)
in a process of its own with Warp's kernel folder empty and JAX's compilation cache off
(:data:`FIRST_CALLS`: a pair, a pair with an event, constant steps with an event, a suggestion and its
run, and on the XLA executor a gradient of constant steps and of error control, an implicit method's
run; the import not counted; ``--only TEXT``: the rows whose names hold ``TEXT``), and again in a
next process with the kernels on disk but the generated sources compared with JAX again
(``JAXROT_KEEP_CHECKS=off``, as the test suite runs). ``--what generation``: the seconds to write the
generated sources of a few methods (:data:`GENERATED`; a pair's with its derivatives), in
a process of its own, nothing compiled.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time


def measure(repo: str) -> dict:
    sys.path.insert(0, repo)
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import numpy as np

    import jaxrot

    jaxrot.use_cpu_cores()
    assert jaxrot.__file__.startswith(repo), jaxrot.__file__
    p = jaxrot.problems.get("fast_top")

    # its own timer, not jaxrot.studies.timing.median_seconds: the same code must time both
    # checkouts, including ones that predate that helper
    def median_time(f, reps):
        jax.block_until_ready(f())
        ts = []
        for _ in range(reps):
            t = time.perf_counter()
            jax.block_until_ready(f())
            ts.append(time.perf_counter() - t)
        return float(np.median(ts))

    out = {"small_call_us": 1e6 * median_time(lambda: jaxrot.simulate("buss2p", p, 1e-3, 10).states.R, 1000)}
    n = 100_000
    out["one_body_steps_per_s"] = n / median_time(
        lambda: jaxrot.simulate("buss2p", p, 1e-4, n, saveat=jaxrot.SaveAt(steps=n)).states.R, 3)
    for B, n in ((1000, 2000), (100_000, 40)):
        R = jax.vmap(jaxrot.so3.exp)(jax.random.normal(jax.random.PRNGKey(0), (B, 3)))
        S = jaxrot.State(R, jnp.broadcast_to(p.state0.Pi, (B, 3)))
        if hasattr(jaxrot, "SaveAt"):
            f = lambda: jaxrot.simulate("buss2p", p, 1e-3, n, state0=S, saveat=jaxrot.SaveAt(steps=n)).states.R  # noqa: E731
        else:  # the earlier API
            f = lambda: jaxrot.simulate_batch("buss2p", p, 1e-3, n, states0=S, save_every=n).states.R  # noqa: E731
        out[f"batch{B}_body_steps_per_s"] = B * n / median_time(f, 3)
    return out


def measure_kernels(repo: str) -> dict:
    sys.path.insert(0, repo)
    import jax

    jax.config.update("jax_enable_x64", True)
    import numpy as np

    import jaxrot
    from jaxrot import kernels

    assert jaxrot.__file__.startswith(repo), jaxrot.__file__
    sys.path.insert(0, f"{repo}/experiments")
    from precision_runs import perturbed_batch

    method, B, n = jaxrot.get("rkmk8"), 300, 200
    out = {}
    # h = 1e-2, and the step of the precision suite's rkmk8 row at 1e-6 (its span over its step count):
    # the step sets the rotation angles of the stages, and with them the branch of their exp and dexp^-1
    for name, suite_step in (("asymmetric_top", 1 / 35), ("gravity_gradient", 4 * np.pi / 14),
                             ("buss_torqued", 2 / 4), ("free_body_mz", 100 / 61), ("slow_top", 20 / 378)):
        p = jaxrot.problems.get(name)
        if not kernels.supports(method, p.system):
            continue
        S = perturbed_batch(p, B)
        for h, tag in ((1e-2, ""), (suite_step, f" h = {suite_step:.3g}")):
            if name == "slow_top" and not tag:
                continue
            run = jax.jit(lambda S, system=p.system, h=h: kernels.fused_frames(method, system, S, h, 0.0, 1, n)[0])
            run(S).block_until_ready()
            ts = []
            for _ in range(15):  # CPU time: steadier than wall time on a shared machine (one thread per body)
                t0 = time.process_time()
                run(S).block_until_ready()
                ts.append(time.process_time() - t0)
            out[f"rkmk8 {name}{tag} us/body-step"] = 1e6 * float(np.median(ts)) / (B * n)
    return out


#: the methods ``--what flows`` runs fused: compositions of the exact free flow, and an energy-projected
#: method, whose projection is a loop (name -> problem)
FLOWS = {"exact_free": "free_body_mz", "saba2": "fast_top", "sbab3": "fast_top", "buss4_ep": "free_body_mz"}


def measure_flows(repo: str) -> dict:
    """CPU time per body-step of the fused kernels of :data:`FLOWS` (300 bodies, 100 steps at h = 1e-2,
    median of 7 calls) and of the same run on the XLA executor, and the seconds of the first fused run
    in the process (the source written and checked; compiled where Warp's kernel folder does not hold
    it yet: the first round)."""
    sys.path.insert(0, repo)
    import jax

    jax.config.update("jax_enable_x64", True)
    import numpy as np

    import jaxrot
    from jaxrot import kernels

    assert jaxrot.__file__.startswith(repo), jaxrot.__file__
    sys.path.insert(0, f"{repo}/experiments")
    from precision_runs import perturbed_batch

    out, B, n = {}, 300, 100
    for name, problem in FLOWS.items():
        p, method = jaxrot.problems.get(problem), jaxrot.get(name)
        S = perturbed_batch(p, B)
        run = jax.jit(lambda S, system=p.system, method=method: kernels.fused_frames(method, system, S, 1e-2, 0.0, 1, n)[0])
        t = time.perf_counter()
        run(S).block_until_ready()
        out[f"{name} first run (s)"] = time.perf_counter() - t
        xla = jax.jit(lambda S, p=p, name=name: jaxrot.simulate(name, p, 1e-2, n, state0=S, executor=jaxrot.XLA(),
                                                                saveat=jaxrot.SaveAt(t0=False)).final.R)
        xla(S).block_until_ready()
        for label, f in (("", run), (" XLA", xla)):
            ts = []
            for _ in range(7):
                t0 = time.process_time()
                f(S).block_until_ready()
                ts.append(time.process_time() - t0)
            out[f"{name}{label} us/body-step"] = 1e6 * float(np.median(ts)) / (B * n)
    return out


#: the first calls ``--what first-call`` times: name -> the call (``p``, ``s0`` 16 heavy tops, ``ev`` an event)
FIRST_CALLS = {
    "rkmk8(5), error control": 'jaxrot.simulate("rkmk8(5)", p, t1=1.0, state0=s0, '
                               'stepsize=jaxrot.Adaptive(1e-8, 1e-8), executor=jaxrot.Fused())',
    "buss4(3), error control, event": 'jaxrot.simulate("buss4(3)", p, t1=1.0, state0=s0, '
                                      'stepsize=jaxrot.Adaptive(1e-8, 1e-8), event=ev, executor=jaxrot.Fused())',
    "rkmk8, constant steps, event": 'jaxrot.simulate("rkmk8", p, 1e-3, 1000, state0=s0, event=ev, '
                                    'executor=jaxrot.Fused())',
    "suggest(fast_top, 1e-8) and its run": 'jaxrot.suggest(p, 1e-8).run(p)',
    "XLA: jax.grad of rkmk8, constant steps": 'jax.grad(lambda Pi: jaxrot.simulate("rkmk8", p, 1e-3, 1000, '
                                              'state0=jaxrot.State(s0.R, Pi), executor=jaxrot.XLA()).final.Pi.sum())(s0.Pi)',
    "XLA: jax.grad of rkmk8(5), error control": 'jax.grad(lambda Pi: jaxrot.simulate("rkmk8(5)", p, t1=1.0, '
                                                'state0=jaxrot.State(s0.R, Pi), stepsize=jaxrot.Adaptive(1e-8, 1e-8), '
                                                'executor=jaxrot.XLA()).final.Pi.sum())(s0.Pi)',
    "XLA: liemid_ea, constant steps": 'jaxrot.simulate("liemid_ea", p, 1e-3, 1000, state0=s0, executor=jaxrot.XLA())',
}

_FIRST_CALL = """
import sys, time
import jax
jax.config.update("jax_enable_x64", True)
import jaxrot
from jaxrot.experiments.bench_heterogeneous import heavy_tops
assert jaxrot.__file__.startswith(sys.argv[1]), jaxrot.__file__
p, s0, _, _ = heavy_tops(16)
ev = jaxrot.Event(lambda t, s, a: s.R[2, 2] - 0.9)
t = time.perf_counter()
out = {call}
jax.block_until_ready(getattr(out, "states", out))
print(time.perf_counter() - t)
"""


def measure_first_call(repo: str, only: str = "") -> dict:
    import os
    import tempfile

    out = {}
    for name, call in FIRST_CALLS.items():
        if only not in name:
            continue
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, WARP_CACHE_PATH=cache, JAXROT_COMPILATION_CACHE="off", PYTHONPATH=repo)
            for label, keep in (("fresh", "on"), ("next, compared again", "off")):
                r = subprocess.run([sys.executable, "-c", _FIRST_CALL.format(call=call), repo], capture_output=True,
                                   text=True, check=True, cwd=repo, env=dict(env, JAXROT_KEEP_CHECKS=keep))
                out[f"{name}: {label} (s)"] = float(r.stdout.strip().splitlines()[-1])
    return out


#: the restatements ``--what generation`` times (the source written, not compiled): name -> pair or not
GENERATED = {"rkmk8": False, "liemid_ea": False, "exact_split_kl8": False, "rkmk8(5)": True, "saba2": False,
             "liemid_ea_kl8": False}

_GENERATION = """
import json, sys, time
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp
import jaxrot
from jaxrot.kernels import generate, generate_vjp
assert jaxrot.__file__.startswith(sys.argv[1]), jaxrot.__file__
p = jaxrot.problems.get("fast_top")
out = {{}}
for name, pair in {names}.items():
    m = jaxrot.integrators.get(name)
    t = time.perf_counter()
    try:
        generate._generate(m, p.system, jnp.float64, pair)
        if pair:  # (its derivatives too: reverse and forward mode)
            try:
                from jaxrot.kernels.adaptive_tangents import carried
            except ImportError:  # (an older checkout: the step's own generated JVP)
                for kind in ("vjp", "jvp"):
                    generate_vjp._generate(m, p.system, jnp.float64, kind, False, False)
            else:
                generate_vjp._generate(m, p.system, jnp.float64, generate_vjp.keeps_memory(m, p.system, jnp.float64),
                                       False)
                generate._generate(carried(m, p.system, jnp.float64), p.system, jnp.float64, True)
    except generate.Unsupported:  # (refused: a source longer than the longest restated)
        name += " (refused)"
    out[name + " (s)"] = time.perf_counter() - t
print(json.dumps(out))
"""


def measure_generation(repo: str) -> dict:
    """Seconds to write each of :data:`GENERATED`'s generated sources, in a process of its own."""
    import os

    r = subprocess.run([sys.executable, "-c", _GENERATION.format(names=repr(GENERATED)), repo], capture_output=True,
                       text=True, check=True, cwd=repo, env=dict(os.environ, PYTHONPATH=repo))
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a", help="checkout A (the baseline)")
    ap.add_argument("b", help="checkout B")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--what", choices=("driver", "kernels", "flows", "first-call", "generation"), default="driver")
    ap.add_argument("--only", default="", help="first-call: only the rows whose names hold this text")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: measure this checkout, print JSON
    args = ap.parse_args()
    if args.one:
        what = {"driver": measure, "kernels": measure_kernels, "flows": measure_flows, "generation": measure_generation,
                "first-call": lambda repo: measure_first_call(repo, args.only)}[args.what]
        print(json.dumps(what(args.one)))
        return
    rows = {"A": [], "B": []}
    for k in range(args.rounds):
        for tag, repo in (("A", args.a), ("B", args.b)):
            r = subprocess.run([sys.executable, __file__, args.a, args.b, "--one", repo, "--what", args.what,
                                "--only", args.only], capture_output=True, text=True, check=True)
            rows[tag].append(json.loads(r.stdout.strip().splitlines()[-1]))
            print(f"round {k + 1} {tag}: {rows[tag][-1]}", flush=True)
    print("\n| figure | A (median) | B (median) | B/A |\n|---|---|---|---|")
    for key in dict.fromkeys([*rows["A"][0], *rows["B"][0]]):  # (a row one checkout lacks: a dash there)
        a, b = (statistics.median(r[key] for r in rows[t]) if key in rows[t][0] else None for t in "AB")
        print(f"| {key} | {'—' if a is None else f'{a:.4g}'} | {'—' if b is None else f'{b:.4g}'} | "
              f"{'—' if None in (a, b) else f'{b / a:.2f}'} |")


if __name__ == "__main__":
    main()
