"""The loop's overheads, for one checkout or two alternated in one run.

    python benchmarks/one_loop.py                              # this checkout
    git worktree add /tmp/base <commit>
    python benchmarks/one_loop.py --base /tmp/base --rounds 3 --out figures/one_loop.json

Figures (float64, CPU), each a median over repetitions, each checkout measured in a fresh process per
round (A then B) so that load on a shared machine hits both alike:

- ``import``: seconds to ``import jaxrot`` in a fresh interpreter, and to import jax and equinox alone;
  whether optax, the studies or Warp's code generators were loaded;
- ``small_call_ms``: a compiled ``simulate("buss4", fast_top, 1e-3, 10)`` (one body), per call, the
  same call repeated, after a second of such calls; ``small_call_after_idle_ms``: the first 100 calls
  after two seconds idle (JAX runs a CPU program on a worker thread, parked after an idle spell:
  waking it costs about as much again); ``sync``: both for this checkout with JAX's asynchronous CPU
  dispatch off (``jax_cpu_enable_async_dispatch=False``: the program on the calling thread, no
  wake-up, no overlap of the Python work with the program either); ``small_call_new_ms``: the
  same run with a new ``SaveAt()`` object per call (a
  call not made before, so checked and set up again); ``small_call_steps_ms``: the same with
  ``saveat=SaveAt(steps=10)`` written in the call (an option object of numbers, matched by value);
- ``terminal_one`` / ``terminal_batch``: the time of a run with a terminal event at T/10 over the time
  of the same run without it (``rk4`` on the T-handle: one body of 400 000 steps; 1 000 bodies of
  4 000 steps), final state only, XLA's loop (``executor=None`` for the batch: the run without the event
  is then fused); ``terminal_batch_blocked``: the batch's ratio with ``executor=CPUBlocked()`` both ways;
- ``traces``: how many times a jitted function of trajectories is traced for three values of ``dt``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

_IMPORT = ("import time, sys; sys.path.insert(0, {repo!r}); t = time.perf_counter(); import jax, equinox; "
           "a = time.perf_counter() - t; import jaxrot; b = time.perf_counter() - t; "
           "print(a, b, 'optax' in sys.modules, 'jaxrot.studies.fitting' in sys.modules, "
           "'jaxrot.kernels.transpile' in sys.modules)")


def import_times(repo: str, n: int = 5) -> dict:
    rows = []
    for _ in range(n):
        out = subprocess.run([sys.executable, "-c", _IMPORT.format(repo=repo)], capture_output=True, text=True,
                             check=True).stdout.split()
        rows.append(out)
    return dict(jax_equinox_s=statistics.median(float(r[0]) for r in rows),
                jaxrot_s=statistics.median(float(r[1]) for r in rows),
                loads_optax=rows[-1][2] == "True", loads_studies=rows[-1][3] == "True",
                loads_transpiler=rows[-1][4] == "True")


def measure(repo: str, small_only: bool = False) -> dict:
    sys.path.insert(0, repo)
    import jax

    jax.config.update("jax_enable_x64", True)
    if small_only:  # JAX's asynchronous CPU dispatch off: the program runs on the calling thread
        jax.config.update("jax_cpu_enable_async_dispatch", False)
    import jax.numpy as jnp

    import jaxrot

    assert jaxrot.__file__.startswith(str(Path(repo).resolve())), jaxrot.__file__

    def median(f, k, warm_s=0.0):
        f()
        t = time.perf_counter()
        while time.perf_counter() - t < warm_s:
            jax.block_until_ready(f().states.R)
        xs = []
        for _ in range(k):
            t = time.perf_counter()
            jax.block_until_ready(f().states.R)
            xs.append(time.perf_counter() - t)
        return statistics.median(xs)

    p = jaxrot.problems.get("fast_top")
    # JAX runs a CPU program on a worker thread (asynchronous dispatch): after the process idled, that
    # thread is parked and waking it costs about as much as the call; after ~50 ms of calls it is not.
    # Both are reported, and (small_only) the same with that dispatch off
    small_call = lambda: jaxrot.simulate("buss4", p, 1e-3, 10)  # noqa: E731
    time.sleep(2.0)
    small_idle = median(small_call, 100)
    small = median(small_call, 300, warm_s=1.0)
    if small_only:
        return dict(small_call_ms=1e3 * small, small_call_after_idle_ms=1e3 * small_idle)
    # the same run, but a new SaveAt object each call: not the same call, so checked and set up again
    small_new = median(lambda: jaxrot.simulate("buss4", p, 1e-3, 10, saveat=jaxrot.SaveAt()), 300)
    # the same with a saving option that holds a number, written in the call (matched by value)
    small_steps = median(lambda: jaxrot.simulate("buss4", p, 1e-3, 10, saveat=jaxrot.SaveAt(steps=10)), 300,
                         warm_s=1.0)
    th = jaxrot.problems.get("t_handle")
    final = jaxrot.SaveAt(t0=False)
    n, dt = 400_000, 1e-4
    ev = jaxrot.Event(lambda t, s, a: t - n * dt / 10, direction=1, terminal=True)
    xla = jaxrot.XLA()
    full1 = median(lambda: jaxrot.simulate("rk4", th, dt, n, saveat=final, executor=xla), 5)
    cut1 = median(lambda: jaxrot.simulate("rk4", th, dt, n, saveat=final, event=ev, executor=xla), 5)
    B, n2, dt2 = 1000, 4000, 1e-3
    s0 = jaxrot.State(jnp.stack([th.state0.R] * B), th.state0.Pi * jnp.linspace(0.9, 1.1, B)[:, None])
    ev2 = jaxrot.Event(lambda t, s, a: t - n2 * dt2 / 10, direction=1, terminal=True)
    fullB = median(lambda: jaxrot.simulate("rk4", th, dt2, n2, state0=s0, saveat=final), 5)
    cutB = median(lambda: jaxrot.simulate("rk4", th, dt2, n2, state0=s0, saveat=final, event=ev2), 5)
    # the same on one executor both ways (the automatic choice runs the batch without the event fused)
    blocked = jaxrot.CPUBlocked()
    fullC = median(lambda: jaxrot.simulate("rk4", th, dt2, n2, state0=s0, saveat=final, executor=blocked), 5)
    cutC = median(lambda: jaxrot.simulate("rk4", th, dt2, n2, state0=s0, saveat=final, event=ev2, executor=blocked), 5)
    count = [0]

    @jax.jit
    def f(tr):
        count[0] += 1
        return tr.states.R.sum()

    for d in (1e-3, 2e-3, 5e-4):
        f(jaxrot.simulate("buss4", p, d, 10))
    return dict(small_call_ms=1e3 * small, small_call_after_idle_ms=1e3 * small_idle, small_call_new_ms=1e3 * small_new,
                small_call_steps_ms=1e3 * small_steps,
                terminal_one=cut1 / full1, terminal_one_s=(cut1, full1),
                terminal_batch=cutB / fullB, terminal_batch_s=(cutB, fullB), terminal_batch_blocked=cutC / fullC,
                terminal_batch_blocked_s=(cutC, fullC), traces=count[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", help="a second checkout, measured alternately with this one")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--small-only", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(measure(a.child, a.small_only)))
        return
    here = str(Path(__file__).resolve().parents[1])
    repos = {"this": here} if not a.base else {"base": str(Path(a.base).resolve()), "this": here}
    runs = {k: [] for k in repos}
    imports = {k: [] for k in repos}
    sync = []
    for r in range(a.rounds):
        for k, repo in repos.items():
            imports[k].append(import_times(repo))
            out = subprocess.run([sys.executable, __file__, "--child", repo], capture_output=True, text=True)
            if out.returncode:
                sys.exit(f"{k}: {out.stderr[-2000:]}")
            runs[k].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(f"round {r + 1} {k}: {runs[k][-1]}", flush=True)
        out = subprocess.run([sys.executable, __file__, "--child", here, "--small-only"], capture_output=True,
                             text=True)
        if out.returncode:
            sys.exit(f"sync: {out.stderr[-2000:]}")
        sync.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(f"round {r + 1} this, synchronous dispatch: {sync[-1]}", flush=True)
    summary = {}
    for k in repos:
        fields = ("small_call_ms", "small_call_after_idle_ms", "small_call_new_ms", "small_call_steps_ms", "terminal_one",
                  "terminal_batch_blocked", "terminal_batch", "traces")
        summary[k] = {f: statistics.median(x[f] for x in runs[k]) for f in fields}
        summary[k].update({f: statistics.median(x[f] for x in imports[k]) for f in ("jax_equinox_s", "jaxrot_s")})
        summary[k].update({f: imports[k][-1][f] for f in ("loads_optax", "loads_studies", "loads_transpiler")})
    summary["this_sync"] = {f: statistics.median(x[f] for x in sync)
                            for f in ("small_call_ms", "small_call_after_idle_ms")}
    print(json.dumps(summary, indent=1))
    if a.out:
        from jaxrot.present import output, provenance

        command = "python " + shlex.join(sys.argv)
        record = dict(summary=summary, runs=dict(runs, this_sync=sync), imports=imports, load=list(os.getloadavg()),
                      command=command)
        a.out.parent.mkdir(parents=True, exist_ok=True)
        with output.atomic(a.out) as tmp:  # whole or not at all
            tmp.write_text(json.dumps(record, indent=1))
        provenance.record(a.out.parent, [a.out], command=command, quick=False)


if __name__ == "__main__":
    main()
