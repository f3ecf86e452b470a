"""Generated kernels against hand-written ones: body-steps per second of the fixed-step loop kernel
built from a method's JAX code (:mod:`jaxrot.kernels.generate`, this checkout) and of the
hand-written Warp kernel of another checkout that still has them (``--hand``, e.g. a worktree of
``a9bc8fd``), on the same batch, timed in turn: a call of one, then a call of the other (run in a
worker process of that checkout), so that load on a shared machine hits both alike.

    git worktree add /tmp/base a9bc8fd
    python benchmarks/generated_kernels.py --out DIR --hand /tmp/base [--methods buss2p,rk4,rkmk8]
        [--bodies 1,10000] [--steps 1000] [--reps 7] [--dtype float64] [--problem fast_top] [--user-pair 10000]

A pair's name in ``--methods`` (``rkmk8(5)``, ``buss4(3)``) times its fused error-controlled run
(:func:`jaxrot.kernels.adaptive.fused_adaptive` inside ``jax.jit``, rtol = atol = ``--rtol``) on heavy
tops (``jaxrot.experiments.bench_heterogeneous.heavy_tops``: spins 5-100 rad/s, tilts 0.05-1.2 rad)
over ``--span`` seconds, in each checkout as it runs it (here the attempt generated from the pair's
JAX code; ``--hand`` a checkout whose fused adaptive kernel is written by hand); its body-steps are
the accepted steps of all bodies, the same in both where they take the same steps.

``--first-call`` also times each pair's first call in a fresh process with empty caches (Warp's
kernels in an empty ``WARP_CACHE_PATH``, JAX's compilation cache off): 16 heavy tops through
``jaxrot.simulate`` with ``executor=Fused()`` in this checkout (the attempt written out, checked and
compiled) and in ``--hand``'s, and with ``executor=XLA()`` (XLA compiling its loop); then the
generated side again in a next process with the same Warp folder (the kernels loaded from it), with
the generated sources' kept agreements with JAX read (``next``) and with ``JAXROT_KEEP_CHECKS=off``
(``next, checked again``: each source compared with JAX again); the import of jaxrot is not counted.

``--user-pair B`` also times the Crouch-Grossman 3(2) pair of examples/user_pair_fused.py (a method in a
user's file) on B heavy tops, error-controlled (rtol = atol = 1e-8) with a terminal event, through
``jaxrot.simulate`` with ``executor=Fused()`` (its generated kernel) and ``executor=XLA()``.

Writes ``generated_kernels.json`` and ``.md`` to DIR (``generated_pairs`` where every method is a
pair, ``generated_kernels_<problem>`` for another ``--problem``, e.g. ``free_body_mz`` for the torque-free methods: the splittings, DMV, the energy
projection): per method and batch size the median time of a
call (of ``reps``), body-steps/s, and the ratio generated / hand-written (above 1: the generated
kernel is faster).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile
import time


def _setup_pair(name, B, dtype_name, span, rtol):
    """``run``: the fused error-controlled run of pair ``name`` on ``B`` heavy tops inside ``jax.jit``,
    as the imported checkout runs it."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from jaxrot.experiments.bench_heterogeneous import heavy_tops
    from jaxrot.kernels import adaptive

    p, s0, _, _ = heavy_tops(B)
    dtype = jnp.dtype(dtype_name)
    s0 = jax.tree_util.tree_map(lambda x: jnp.asarray(x, dtype), s0)
    system = jax.tree_util.tree_map(lambda x: jnp.asarray(x, dtype) if hasattr(x, "dtype") else x, p.system)
    ts = np.array([span], dtype)
    f = jax.jit(lambda s: adaptive.fused_adaptive(name, system, s, 0.0, ts, rtol, rtol))
    return lambda: f(s0)


def _setup(repo, name, B, steps, dtype_name, problem, span=0.0, rtol=0.0):
    """``run``: one call of ``name``'s kernel on ``B`` bodies inside ``jax.jit`` (as a run of
    ``jaxrot.simulate`` calls it: without the eager dispatch's milliseconds); the generated kernel of
    this checkout, or (``repo`` given) the hand-written kernel of the checkout at ``repo``."""
    if repo is not None:
        sys.path.insert(0, repo)
    import jax

    jax.config.update("jax_enable_x64", dtype_name == "float64")
    import jax.numpy as jnp

    import jaxrot
    from jaxrot import kernels

    if repo is not None:
        assert os.path.realpath(jaxrot.__file__).startswith(os.path.realpath(repo)), jaxrot.__file__
    if "(" in name:  # an error-controlled pair
        return _setup_pair(name, B, dtype_name, span, rtol)

    p = jaxrot.problems.get(problem)
    dtype = jnp.dtype(dtype_name)
    system = jax.tree_util.tree_map(lambda x: jnp.asarray(x, dtype) if hasattr(x, "dtype") else x, p.system)
    m = jaxrot.integrators.get(name)
    scale = jnp.linspace(0.9, 1.1, B, dtype=dtype)[:, None]
    s0 = jaxrot.State(jnp.broadcast_to(jnp.asarray(p.state0.R, dtype), (B, 3, 3)), jnp.asarray(p.state0.Pi, dtype) * scale)
    dt, t0 = jnp.asarray(1e-3, dtype), jnp.asarray(0.0, dtype)
    if repo is not None:  # (the hand-written kernels' entry points of a9bc8fd)
        e = kernels.KERNELS[name]
        P = e.params(m, system, dtype)
        kind = kernels.torque_kind(system.torque, dtype)
        K = int(kernels.torque_params(system.torque, dtype).shape[0] // 3) if kind == "poly" else 0
        f = jax.jit(lambda s: kernels._launch((dtype.name, name, kind, K), kernels._kernel, kernels._ffi, e.split_weight,
                                              s, dt, t0, system, P, 1, steps))
        return lambda: f(s0)
    from jaxrot.kernels import generate

    low = generate.lower(m, system, dtype)
    f = jax.jit(lambda s: kernels._launch((dtype.name, low.key, None, False), s, dt, t0, system, low.params, 1, steps))
    return lambda: f(s0)


def _worker(repo, name, B, steps, dtype_name, problem, out, span, rtol):
    """The hand-written kernel's side: compile, save the first call's ``Pi`` to ``out``, then one timed
    call per line read."""
    import jax
    import numpy as np

    run = _setup(repo, name, B, steps, dtype_name, problem, span, rtol)
    np.save(out, np.asarray(jax.block_until_ready(run())[1]))
    print("ready", flush=True)
    for _ in sys.stdin:
        t = time.perf_counter()
        jax.block_until_ready(run())
        print(time.perf_counter() - t, flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out")
    ap.add_argument("--hand", help="a checkout with the hand-written kernels (git worktree add /tmp/base a9bc8fd)")
    ap.add_argument("--methods", default="buss2p,buss4,rk4,rkmk8")
    ap.add_argument("--bodies", default="1,10000")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--dtype", default="float64", choices=["float32", "float64"])
    ap.add_argument("--problem", default="fast_top")
    ap.add_argument("--user-pair", type=int, default=0)
    ap.add_argument("--span", type=float, default=1.0, help="a pair's run: seconds of simulated time")
    ap.add_argument("--rtol", type=float, default=1e-8, help="a pair's run: rtol = atol")
    ap.add_argument("--first-call", action="store_true")
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)  # (method, bodies): the hand-written side
    a = ap.parse_args(argv)
    if a.worker:
        return _worker(a.hand, a.worker[0], int(a.worker[1]), a.steps, a.dtype, a.problem, a.out, a.span, a.rtol)
    if not a.out or not a.hand:
        ap.error("--out and --hand are required")
    import jax
    import numpy as np

    rows = []
    for name in a.methods.split(","):
        for B in (int(b) for b in a.bodies.split(",") if b):
            with tempfile.TemporaryDirectory() as tmp:
                ref = os.path.join(tmp, "Pi.npy")
                w = subprocess.Popen([sys.executable, __file__, "--worker", name, str(B), "--hand", a.hand, "--out", ref,
                                      "--steps", str(a.steps), "--dtype", a.dtype, "--problem", a.problem,
                                      "--span", str(a.span), "--rtol", str(a.rtol)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                gen = _setup(None, name, B, a.steps, a.dtype, a.problem, a.span, a.rtol)
                first = jax.block_until_ready(gen())  # compiled, and the answer kept to compare
                out = np.asarray(first[1])
                steps = int(np.sum(np.asarray(first[2]))) if "(" in name else B * a.steps
                assert w.stdout.readline().strip() == "ready"
                hand_Pi = np.load(ref)
                times = {"generated": [], "hand": []}
                for _ in range(a.reps):
                    t = time.perf_counter()
                    jax.block_until_ready(gen())
                    times["generated"].append(time.perf_counter() - t)
                    w.stdin.write("run\n")
                    w.stdin.flush()
                    times["hand"].append(float(w.stdout.readline()))
                w.stdin.close()
                w.wait()
            med = {k: statistics.median(v) for k, v in times.items()}
            diff = float(np.max(np.abs(out - hand_Pi)) / np.max(np.abs(hand_Pi)))
            row = dict(method=name, bodies=B, steps=steps // B, dtype=a.dtype,
                       problem=a.problem if "(" not in name else f"heavy tops, {a.span:g} s, rtol {a.rtol:g}",
                       generated_s=med["generated"], hand_s=med["hand"],
                       generated_rate=steps / med["generated"], hand_rate=steps / med["hand"],
                       ratio=med["hand"] / med["generated"], max_rel_diff_Pi=diff)
            rows.append(row)
            print(f"{name:8s} B={B:7d}  generated {row['generated_rate']:.3e}  hand {row['hand_rate']:.3e} body-steps/s"
                  f"  generated/hand {row['ratio']:.2f}  (Pi differ by {diff:.1e})", flush=True)
    pair_rows = _user_pair(a.user_pair, a.reps) if a.user_pair else []
    first_rows = _first_calls([m for m in a.methods.split(",") if "(" in m], a.hand, a.rtol) if a.first_call else []
    meta = dict(command="python " + " ".join([os.path.relpath(__file__), *(argv or sys.argv[1:])]),
                machine=platform.processor() or platform.machine(), cores=os.cpu_count(), jax=jax.__version__,
                load=os.getloadavg(), reps=a.reps, hand=_commit(a.hand))
    lines = ["# Generated kernels against hand-written ones", "", f"`{meta['command']}`; hand-written kernels of "
             f"{meta['hand']}; {meta['cores']} cores, jax {meta['jax']}, load "
             f"{tuple(round(x, 1) for x in meta['load'])}; medians of {a.reps} calls, timed in turn.",
             "", "| method | problem | bodies | steps | generated (body-steps/s) | hand-written | generated / hand "
             "| max rel. diff of Pi |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['method']} | {r['problem']} | {r['bodies']} | {r['steps']} | {r['generated_rate']:.3g} "
                     f"| {r['hand_rate']:.3g} | {r['ratio']:.2f} | {r['max_rel_diff_Pi']:.1e} |")
    for r in pair_rows:
        lines += ["", f"User's Crouch-Grossman 3(2) pair, {r['bodies']} bodies, rtol = atol = 1e-8, terminal event: "
                  f"fused {r['fused_s']:.3g} s, XLA {r['xla_s']:.3g} s (XLA / fused {r['ratio']:.2f}); "
                  f"event times differ by at most {r['max_event_time_diff']:.1e}, accepted steps equal: "
                  f"{r['same_steps']}."]
    from jaxrot.present import provenance

    pairs_only = all("(" in m for m in a.methods.split(","))
    name = "generated_pairs" if pairs_only else "generated_kernels" + ("" if a.problem == "fast_top" else f"_{a.problem}")
    if first_rows:
        lines += ["", "First call in a fresh process, empty caches (16 heavy tops, 1 s; seconds), and the generated "
                  "side's in a next process (Warp's kernels on disk; the sources' agreements with JAX read, or "
                  "compared again):", "",
                  "| pair | generated, Fused() | next process | next, compared again | hand-written, Fused() | XLA() |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {r['pair']} | {r['generated']:.1f} | {r['next']:.1f} | {r['next, checked again']:.1f} | "
                  f"{r['hand']:.1f} | {r['xla']:.1f} |" for r in first_rows]
    provenance.write_record(a.out, name, dict(meta=meta, rows=rows, user_pair=pair_rows, first_call=first_rows),
                            "\n".join(lines) + "\n", command=meta["command"])


_FIRST_CALL = """
import sys, time
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp
import jaxrot
from jaxrot.experiments.bench_heterogeneous import heavy_tops
assert jaxrot.__file__.startswith(sys.argv[3]), jaxrot.__file__
p, s0, _, _ = heavy_tops(16)
ex = jaxrot.Fused() if sys.argv[2] == "fused" else jaxrot.XLA()
tol = float(sys.argv[4])
t = time.perf_counter()
tr = jaxrot.simulate(sys.argv[1], p, t1=1.0, state0=s0, stepsize=jaxrot.Adaptive(tol, tol), executor=ex)
jax.block_until_ready(tr.states.Pi)
print(time.perf_counter() - t)
"""


def _first_calls(pairs, hand: str, rtol: float) -> list:
    """Seconds of each pair's first call in a fresh process with empty caches (the module docstring)."""
    here = str(pathlib.Path(__file__).resolve().parents[1])
    rows = []
    for pair in pairs:
        row = dict(pair=pair)
        for label, repo, ex in (("generated", here, "fused"), ("hand", os.path.realpath(hand), "fused"),
                                ("xla", here, "xla")):
            with tempfile.TemporaryDirectory() as cache:
                env = dict(os.environ, WARP_CACHE_PATH=cache, JAXROT_COMPILATION_CACHE="off", PYTHONPATH=repo,
                           JAXROT_KEEP_CHECKS="on")
                again = [(label, env)]
                if label == "generated":
                    again += [("next, checked again", dict(env, JAXROT_KEEP_CHECKS="off")), ("next", env)]
                for name, e in again:
                    out = subprocess.run([sys.executable, "-c", _FIRST_CALL, pair, ex, repo, str(rtol)], env=e,
                                         capture_output=True, text=True, check=True, cwd=repo)
                    row[name] = float(out.stdout.strip().splitlines()[-1])
        print(f"first call {pair}: generated {row['generated']:.1f} s (next process {row['next']:.1f} s, "
              f"checked again {row['next, checked again']:.1f} s), hand-written {row['hand']:.1f} s, "
              f"XLA {row['xla']:.1f} s", flush=True)
        rows.append(row)
    return rows


def _commit(repo: str) -> str:
    """The commit checked out at ``repo``; its path where ``repo`` is not the top of a git work tree (a
    folder exported by ``git archive`` inside another checkout would otherwise be named by that one's)."""
    try:
        def git(*args):
            return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, check=True).stdout.strip()

        if os.path.realpath(git("rev-parse", "--show-toplevel")) != os.path.realpath(repo):
            return repo
        return git("rev-parse", "--short", "HEAD")
    except (OSError, subprocess.CalledProcessError):
        return repo


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
