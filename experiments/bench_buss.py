"""Throughput of Buss's methods: body-steps per second for batches of 1, 1 000 and 100 000 bodies.

Torque-free T-handle, float64, CPU (or whatever JAX's default device is). For each method and batch
size: compile time (first call) separately from the steady-state run, and a plain NumPy vectorised
implementation of the same update measured in the same run (the ratio is what to compare across
machines). Writes ``figures/bench_buss.{json,md,png}``.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxrot
from jaxrot import problems

from ._common import md_table, setup, write_json

METHODS = ["buss1", "buss2", "buss3_false", "buss2p", "buss3", "buss4"]


# --- the NumPy baseline: the same torque-free updates, vectorised over the batch ----------------
def _np_exp(v):
    a2 = np.einsum("bi,bi->b", v, v)
    a = np.sqrt(a2)
    small = a2 < 1e-2
    safe = np.where(small, 1.0, a)
    s1 = np.where(small, 1 - a2 / 6 + a2 * a2 / 120, np.sin(safe) / safe)
    s2 = np.where(small, 0.5 - a2 / 24 + a2 * a2 / 720, 2 * np.sin(safe / 2) ** 2 / safe**2)
    V = np.zeros(v.shape[:1] + (3, 3))
    V[:, 0, 1], V[:, 0, 2], V[:, 1, 2] = -v[:, 2], v[:, 1], -v[:, 0]
    V[:, 1, 0], V[:, 2, 0], V[:, 2, 1] = v[:, 2], -v[:, 1], v[:, 0]
    return (1 - s2 * a2)[:, None, None] * np.eye(3) + s1[:, None, None] * V + s2[:, None, None] * np.einsum(
        "bi,bj->bij", v, v)


def numpy_step(method: str, R, L, J, h):
    """One torque-free Buss step for a batch (R: (B,3,3), L: (B,3))."""
    cross = np.cross

    def inv(x):
        return np.einsum("bij,bj->bi", R, np.einsum("bji,bj->bi", R, x) / J)

    w = inv(L)
    if method == "buss1":
        wb = w
    else:
        w1 = inv(-cross(w, L))
        wb = w + 0.5 * h * w1
        if method in ("buss3_false", "buss3", "buss4"):
            w2 = cross(w, w1) + inv(-cross(w1, L) + cross(w, cross(w, L)))
            wb = wb + h * h / 6 * w2
        if method in ("buss2p", "buss3", "buss4"):
            wb = wb + h * h / 12 * cross(w1, w)
        if method == "buss4":
            wL = cross(w, L)
            w3 = 2 * cross(w, w2) - cross(w, cross(w, w1)) + inv(
                -cross(w2, L) + cross(w1, wL) + 2 * cross(w, cross(w1, L)) - cross(w, cross(w, wL)))
            wb = wb + h**3 / 24 * w3 + h**3 / 24 * cross(w2, w)
    return np.einsum("bij,bjk->bik", _np_exp(h * wb), R)


def _time(f, min_time=0.3):
    f()
    n, t = 0, 0.0
    start = time.perf_counter()
    while t < min_time:
        f()
        n += 1
        t = time.perf_counter() - start
    return t / n


def main(quick: bool = False, out_dir=None) -> list[dict]:
    out = setup(out_dir, quick)
    p = problems.get("t_handle")
    rng = np.random.default_rng(0)
    batches = [1, 1000] if quick else [1, 1000, 100_000]
    methods = ["buss2p"] if quick else METHODS
    h = 1e-3
    rows = []
    for B in batches:
        n_steps = {1: 20_000, 1000: 2000, 100_000: 20}[B] // (10 if quick else 1)
        R0 = np.asarray(jax.vmap(jaxrot.so3.exp)(jnp.asarray(rng.normal(size=(B, 3)))))
        Pi0 = rng.normal(size=(B, 3))
        L0 = np.einsum("bij,bj->bi", R0, Pi0)
        states = jaxrot.State(jnp.asarray(R0), jnp.asarray(Pi0))
        for m in methods:
            if B == 1:
                s1 = jaxrot.State(states.R[0], states.Pi[0])

                def run(n, s1=s1, m=m):
                    return jaxrot.simulate(m, p, h, n, saveat=jaxrot.SaveAt(steps=n), state0=s1).states.R.block_until_ready()
            else:
                def run(n, m=m):
                    return jaxrot.simulate(m, p, h, n, state0=states, saveat=jaxrot.SaveAt(steps=n)).states.R.block_until_ready()
            t0 = time.perf_counter()
            run(n_steps)
            first = time.perf_counter() - t0
            t_run = _time(lambda: run(n_steps))
            compile_s = max(first - t_run, 0.0)
            # compile time must not grow with the number of steps (scan): compile a 10x longer run
            t0 = time.perf_counter()
            run(10 * n_steps)
            first10 = time.perf_counter() - t0
            compile10 = max(first10 - 10 * t_run, 0.0)
            jax_rate = B * n_steps / t_run
            n_np = max(1, min(n_steps, int(2e6 / B)))
            R = R0.copy()

            def np_run(R=R, m=m):
                for _ in range(n_np):
                    R = numpy_step(m, R, L0, np.asarray(p.body.J), h)
                return R

            t_np = _time(np_run, 0.2)
            np_rate = B * n_np / t_np
            rows.append(dict(method=m, batch=B, steps=n_steps, compile_s=compile_s, compile_10x_steps_s=compile10,
                             jax_steps_per_s=jax_rate, numpy_steps_per_s=np_rate, speedup=jax_rate / np_rate))
            print(f"  {m:12s} B={B:6d}  jax {jax_rate:10.3g}/s  numpy {np_rate:10.3g}/s  x{jax_rate / np_rate:6.1f}"
                  f"  compile {compile_s:.2f}s (10x steps: {compile10:.2f}s)", flush=True)
    table = md_table(["method", "bodies", "jax body-steps/s", "numpy body-steps/s", "speed-up", "compile s",
                      "compile s, 10x steps"],
                     [[r["method"], r["batch"], f"{r['jax_steps_per_s']:.3g}", f"{r['numpy_steps_per_s']:.3g}",
                       f"{r['speedup']:.1f}", f"{r['compile_s']:.2f}", f"{r['compile_10x_steps_s']:.2f}"] for r in rows])
    print(table)
    dev = jax.devices()[0]
    header = f"device: {dev.platform} ({dev.device_kind}), float64, torque-free T-handle, dt={h}\n\n"
    (out / "bench_buss.md").write_text(header + table + "\n")
    write_json(out / "bench_buss.json", {"device": str(dev), "quick": quick, "rows": rows})
    from jaxrot.present.plotting import throughput_figure

    throughput_figure(rows).savefig(out / "bench_buss.png", dpi=120)
    return rows


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    main(quick=ap.parse_args().quick)
