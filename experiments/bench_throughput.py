"""Throughput: body-steps per second of ``buss2p`` from 1 to 10^6 bodies, float64 and float32,
cache-blocked and not, beside NumPy and a C implementation of the same update timed in the same
run; the cost of other families relative to ``buss2p``; and a roofline estimate for GPUs.

``jaxrot bench throughput`` first makes every core a JAX CPU device (:func:`jaxrot.use_cpu_cores`),
so the batched columns split the batch over the cores; the "1 device" column is the same run on
one CPU device (XLA then spreads each kernel over the cores), measured beside it.

The C file (``experiments/buss2p.c``) is compiled at run time with the system C compiler (skipped
with a note when there is none): ``-O2`` on one thread, ``-O2 -fopenmp`` on all cores,
``-O3 -march=native -ffast-math`` on one thread (all steps of one body before the next), and a
structure-of-arrays variant written for SIMD across bodies (``-O3 -march=native -ffast-math
-fopenmp``, blocks of 256 bodies). Every result is checked against jaxrot after the timed runs.
Timings are medians of several repetitions; compare ratios, not absolute numbers, across
machines. Writes ``bench_throughput.{json,md,png}``.
"""

from __future__ import annotations

import ctypes
import os
import pathlib
import shutil
import subprocess
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxrot
from jaxrot import problems
from jaxrot.studies.timing import median_seconds

from ._common import md_table, setup, write_json
from .bench_buss import numpy_step

H = 1e-3
C_SOURCE = pathlib.Path(__file__).with_name("buss2p.c")
#: name -> (compiler flags, function, structure-of-arrays layout)
C_VARIANTS = {"C, 1 thread": (["-O2"], "buss2p_run", False),
              "C, all threads": (["-O2", "-fopenmp"], "buss2p_run", False),
              "C -O3 -march=native -ffast-math": (["-O3", "-march=native", "-ffast-math"], "buss2p_run", False),
              "C SoA SIMD, all threads": (["-O3", "-march=native", "-ffast-math", "-fopenmp"], "buss2p_run_soa", True)}
OTHER_METHODS = ["buss4", "lie_taylor5", "split4_231", "liemid_ea"]


def compile_c(folder: pathlib.Path) -> dict:
    """The C variants as ctypes functions (an empty dict when no compiler works)."""
    cc = shutil.which(os.environ.get("CC", "cc"))
    libs = {}
    if cc is None:
        return libs
    for k, (name, (flags, symbol, soa)) in enumerate(C_VARIANTS.items()):
        so = folder / f"buss2p_{k}.so"
        r = subprocess.run([cc, *flags, "-shared", "-fPIC", str(C_SOURCE), "-o", str(so), "-lm"], capture_output=True)
        if r.returncode:
            continue
        fn = getattr(ctypes.CDLL(str(so)), symbol)
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_double, ctypes.c_long, ctypes.c_long]
        libs[name] = (fn, soa)
    return libs


def _bodies(B: int, dtype, rng):
    R0 = np.asarray(jax.vmap(jaxrot.so3.exp)(jnp.asarray(rng.normal(size=(B, 3)))))
    Pi0 = rng.normal(size=(B, 3))
    return jaxrot.State(jnp.asarray(R0, dtype), jnp.asarray(Pi0, dtype)), R0, np.einsum("bij,bj->bi", R0, Pi0)


def _jax_runner(method, p, states, n, block, devices=None, one_body=None):
    """``jaxrot.simulate`` on the batch (``Sharded``); one body with the executor ``one_body`` (default:
    the automatic choice)."""
    B = states.R.shape[0]
    if B == 1:
        s1 = jaxrot.State(states.R[0], states.Pi[0])
        return lambda: jaxrot.simulate(method, p, H, n, saveat=jaxrot.SaveAt(steps=n), state0=s1,
                                       executor=one_body).states.R.block_until_ready()
    run = jaxrot.Sharded(devices, block)
    return lambda: jaxrot.simulate(method, p, H, n, state0=states, saveat=jaxrot.SaveAt(steps=n),
                                   executor=run).states.R.block_until_ready()


def _cost_per_body_step(method, p, states) -> dict:
    """XLA's cost analysis of a 1-step batched call on one device, per body (includes the
    initialisation and the output copies, so it over-counts a steady-state step; on several devices
    the analysis would count one device's part)."""
    one_device = jaxrot.Sharded(jax.devices()[:1], None)
    f = jax.jit(lambda s: jaxrot.simulate(method, p, H, 1, state0=s, saveat=jaxrot.SaveAt(steps=1), executor=one_device).states.R)
    return _xla_cost(f, states)


def _cost_of_one_step(method, p, states) -> dict:
    """XLA's cost analysis of one bare vmapped step, per body (the steady state of a run: no
    initialisation, no output copies; a loop's body is counted once by the analysis)."""
    m, system = jaxrot.get(method), p.system

    def one(s):
        return m.step(system, 0.0, s, m.init(system, 0.0, s, H), H)[0]

    return _xla_cost(jax.jit(jax.vmap(one)), states)


def _xla_cost(f, states) -> dict:
    ca = f.lower(states).compile().cost_analysis()
    ca = ca[0] if isinstance(ca, (list, tuple)) else ca
    B = states.R.shape[0]
    return {"flops": float(ca.get("flops", np.nan)) / B, "bytes": float(ca.get("bytes accessed", np.nan)) / B}


def call_overhead(p, n_steps: int = 10, calls: int = 300) -> dict:
    """Median µs of a repeated small call (1 body, ``n_steps`` buss2p steps, compiled beforehand), the
    three alternated: a plain ``jax.jit`` of the bare step loop (the floor: dispatch and XLA's own
    per-kernel cost on this machine), ``jaxrot.compile``'s executable, and ``jaxrot.simulate(...).final``."""
    m, system = jaxrot.get("buss2p"), p.system

    @jax.jit
    def plain(s):
        def body(c, _):
            s, aux = c
            s, aux, _ = m.step(system, 0.0, s, aux, H)
            return (s, aux), None
        return jax.lax.scan(body, (s, m.init(system, 0.0, s, H)), None, length=n_steps)[0][0]

    run = jaxrot.compile("buss2p", p, H, n_steps)
    fs = {"plain jit": lambda: plain(p.state0).R.block_until_ready(),
          "jaxrot.compile": lambda: run().states.R.block_until_ready(),
          "jaxrot.simulate": lambda: jaxrot.simulate("buss2p", p, H, n_steps).final.R.block_until_ready()}
    ts: dict = {k: [] for k in fs}
    for f in fs.values():
        for _ in range(20):
            f()
    for _ in range(calls):
        for k, f in fs.items():
            t0 = time.perf_counter()
            f()
            ts[k].append(time.perf_counter() - t0)
    out = {k: 1e6 * float(np.median(v)) for k, v in ts.items()}
    finals = [plain(p.state0).R, run().final.R, jaxrot.simulate("buss2p", p, H, n_steps).final.R]
    out["max diff"] = float(max(np.abs(np.asarray(a) - np.asarray(finals[0])).max() for a in finals))
    return out


def drift(method: str, p, n_steps: int, bodies: int = 16) -> dict:
    """Worst relative energy change, world-momentum change and orthogonality defect over a batch
    after ``n_steps`` torque-free steps, float32 and float64 (``SaveAt(t0=False)``: no frames stored)."""
    out = {"method": method, "steps": n_steps, "bodies": bodies}
    for dtype, tag in ((jnp.float32, "f32"), (jnp.float64, "f64")):
        s0, _, _ = _bodies(bodies, dtype, np.random.default_rng(1))
        q = jaxrot.cast(p, dtype)
        fin = jaxrot.simulate(method, q, H, n_steps, state0=s0, saveat=jaxrot.SaveAt(t0=False)).final
        E0, E1 = (np.asarray(jaxrot.analysis.kinetic_energy(q.body.J, x.Pi), np.float64) for x in (s0, fin))
        L0, L1 = (np.asarray(x.L, np.float64) for x in (s0, fin))
        out[f"energy {tag}"] = float(np.max(np.abs(E1 / E0 - 1)))
        out[f"momentum {tag}"] = float(np.max(np.linalg.norm(L1 - L0, axis=-1) / np.linalg.norm(L0, axis=-1)))
        out[f"orthogonality {tag}"] = float(np.max(np.asarray(jaxrot.analysis.orthogonality_error(fin.R))))
    return out


def _fused_runner(method, p, states, n, devices=None):
    """A fused-kernel run (:class:`jaxrot.Fused`) of the same call as :func:`_jax_runner`."""
    run = jaxrot.Fused(devices)
    s = jaxrot.State(states.R[0], states.Pi[0]) if states.R.shape[0] == 1 else states
    return lambda: jaxrot.simulate(method, p, H, n, saveat=jaxrot.SaveAt(steps=n), state0=s, executor=run).states.R.block_until_ready()


def fused_table(batches=(1, 1000, 100_000), methods=("buss2p", "buss4", "dmv10"), budget: float = 4e6,
                reps: int = 5, c_libs=None) -> list[dict]:
    """Body-steps per second, float64, of the fused kernel (one device, and every device) against
    :func:`jaxrot.simulate` (one body: ``executor=jaxrot.XLA()``; a batch: :class:`jaxrot.Sharded`, the default)
    and, for ``buss2p``, single-thread C; every contender run in turn, ``reps`` times, medians."""
    p = problems.get("t_handle")
    J = np.asarray(p.body.J)
    rows = []
    for B in batches:
        n = int(max(10, min(2_000_000, budget // B)))
        states, R0, L0 = _bodies(B, jnp.float64, np.random.default_rng(0))
        for m in methods:
            fs = {"XLA": _jax_runner(m, p, states, n, "auto", one_body=jaxrot.XLA())}
            if jaxrot.kernels.supports(jaxrot.get(m), p.system):
                fs["fused, 1 device"] = _fused_runner(m, p, states, n, jax.devices()[:1])
                if len(jax.devices()) > 1 and B > 1:
                    fs["fused, all devices"] = _fused_runner(m, p, states, n, jax.devices())
            if m == "buss2p":
                for name, (fn, soa) in (c_libs or {}).items():
                    if name in ("C, 1 thread", "C -O3 -march=native -ffast-math"):
                        Rc, Lc = np.ascontiguousarray(R0.copy()), np.ascontiguousarray(L0)
                        fs[name] = (lambda fn=fn, Rc=Rc, Lc=Lc: fn(Rc.ctypes.data, Lc.ctypes.data, J.ctypes.data, H,
                                                                     B, n))
            for f in fs.values():
                f()  # compile, warm
            ts: dict = {k: [] for k in fs}
            for _ in range(reps):
                for k, f in fs.items():
                    t0 = time.perf_counter()
                    f()
                    ts[k].append(time.perf_counter() - t0)
            row = {"bodies": B, "method": m, "steps": n}
            row.update({k: B * n / float(np.median(v)) for k, v in ts.items()})
            rows.append(row)
            print({k: (f"{v:.3g}" if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
    return rows


def main(quick: bool = False, out_dir=None, batches=None, baselines: bool = True, device: str = "cpu",
         fused: bool | None = None) -> dict:
    """``batches`` overrides the batch sizes; ``baselines=False`` skips NumPy and C (a GPU run,
    where the host baselines would measure the host, not the device). ``device``: ``"cpu"`` or
    ``"gpu"`` (JAX's default devices must be of that kind: run with ``--device gpu`` on a GPU machine;
    the host baselines are then skipped). ``fused``: add the fused-kernel column (default: when Warp
    is installed)."""
    if device not in ("cpu", "gpu"):
        raise ValueError(f"device must be 'cpu' or 'gpu', got {device!r}")
    if jax.devices()[0].platform != device:
        raise ValueError(f"device={device!r} but JAX's default device is {jax.devices()[0]}")
    if device == "gpu":
        baselines = False
    fused = jaxrot.kernels.have_warp() if fused is None else fused
    out = setup(out_dir, quick)
    p = problems.get("t_handle")
    J = np.asarray(p.body.J)
    rng = np.random.default_rng(0)
    batches = batches or ([1000] if quick else [1, 1000, 10_000, 100_000, 1_000_000])
    budget = 5e5 if quick else 2e7  # body-steps per timed call
    ndev = len(jax.devices())
    res: dict = {"device": str(jax.devices()[0]), "devices": ndev, "quick": quick, "rows": [], "methods": [],
                 "notes": []}
    one_device = (("1 device", "auto", jax.devices()[:1]),) if ndev > 1 else ()
    with tempfile.TemporaryDirectory() as tmp:
        libs = compile_c(pathlib.Path(tmp)) if baselines else {}
        if baselines and not libs:
            res["notes"].append("no working C compiler: the C columns are skipped")
        for B in batches:
            n = int(max(100, min(200_000, budget // B)))  # >= 100 steps: per-call costs (checks, copies) amortised
            row = {"bodies": B, "steps": n}
            for dtype in (jnp.float64, jnp.float32):
                states, R0, L0 = _bodies(B, dtype, rng)
                tag = "f64" if dtype == jnp.float64 else "f32"
                variants = (("blocked", "auto", None),) + ((("unblocked", None, None),) if not quick else ()) + one_device
                for label, block, devs in variants:
                    if B == 1 and label != "blocked":
                        continue
                    run = _jax_runner("buss2p", p, states, n, block, devs)
                    t0 = time.perf_counter()
                    run()
                    first = time.perf_counter() - t0
                    t = median_seconds(run, 3 if B >= 100_000 else 5)
                    row[f"jaxrot {tag} {label}"] = B * n / t
                    row[f"compile s {tag} {label}"] = max(first - t, 0.0)
                if fused:
                    run = _fused_runner("buss2p", p, states, n)
                    run()
                    row[f"fused {tag}"] = B * n / median_seconds(run, 3 if B >= 100_000 else 5)
            _, R0, L0 = _bodies(B, jnp.float64, np.random.default_rng(0))
            if not baselines:
                res["rows"].append(row)
                print(row, flush=True)
                continue
            n_np = max(1, min(n, int(2e5 / B) + 1))

            def np_run(R0=R0, L0=L0, n_np=n_np):
                R = R0
                for _ in range(n_np):
                    R = numpy_step("buss2p", R, L0, J, H)
                return R

            row["NumPy f64"] = B * n_np / median_seconds(np_run, 3)
            ref = np.asarray(jaxrot.simulate("buss2p", p, H, 100, state0=jaxrot.State(
                jnp.asarray(R0), jnp.asarray(np.einsum("bji,bj->bi", R0, L0))), saveat=jaxrot.SaveAt(steps=100)).final.R) \
                if B > 1 else None
            for name, (fn, soa) in libs.items():
                # SoA: entry k of every body contiguous (R: 9 x B, L: 3 x B)
                def layout(R, L, soa=soa):
                    if soa:
                        return np.ascontiguousarray(R.reshape(B, 9).T), np.ascontiguousarray(L.T)
                    return np.ascontiguousarray(R.copy()), np.ascontiguousarray(L)

                Rc, Lc = layout(R0, L0)

                def c_run(Rc=Rc, Lc=Lc, fn=fn, n=n):
                    fn(Rc.ctypes.data, Lc.ctypes.data, J.ctypes.data, H, B, n)

                row[name] = B * n / median_seconds(c_run, 3)
                if ref is not None:  # correctness of the baseline: 100 steps from the same start
                    Rchk, Lchk = layout(R0, L0)
                    fn(Rchk.ctypes.data, Lchk.ctypes.data, J.ctypes.data, H, B, 100)
                    Rchk = Rchk.T.reshape(B, 3, 3) if soa else Rchk
                    row[f"{name} max diff"] = float(np.abs(Rchk - ref).max())
            res["rows"].append(row)
            print({k: (f"{v:.3g}" if isinstance(v, float) else v) for k, v in row.items()}, flush=True)

        # other families at 1 000 bodies, float64, relative to buss2p (same run)
        states, _, _ = _bodies(1000, jnp.float64, rng)
        n = 200 if quick else 1000
        base = None
        for m in ["buss2p"] + ([] if quick else OTHER_METHODS):
            run = _jax_runner(m, p, states, n, "auto")
            t0 = time.perf_counter()
            run()
            first = time.perf_counter() - t0
            t = median_seconds(run, 3)
            us = 1e6 * t / (1000 * n)
            base = base or us
            res["methods"].append({"method": m, "us_per_body_step": us, "relative_to_buss2p": us / base,
                                   "compile_s": max(first - t, 0.0)})
        res["call_overhead_us"] = call_overhead(p, calls=50 if quick else 300)
        res["drift"] = [drift(m, p, n_steps=2_000 if quick else 1_000_000)
                        for m in (("buss2p",) if quick else ("buss2p", "buss4"))]
        cost = _cost_per_body_step("buss2p", p, _bodies(1000, jnp.float64, rng)[0])
        res["xla_cost_buss2p_f64"] = cost
        step = res["xla_cost_buss2p_step_f64"] = _cost_of_one_step("buss2p", p, _bodies(1000, jnp.float64, rng)[0])
        # the roofline of a steady step (the 1-step call's count includes set-up and copies)
        res["h100_limits"] = {"memory_bound_body_steps_per_s": 3.35e12 / step["bytes"],
                              "compute_bound_body_steps_per_s": 60e12 / step["flops"]}

    cols = [f"jaxrot {t} {q}" for t in ("f64", "f32") for q in ("blocked", "unblocked", "1 device")
            if any(f"jaxrot {t} {q}" in r for r in res["rows"])]
    cols += [f"fused {t}" for t in ("f64", "f32") if any(f"fused {t}" in r for r in res["rows"])]
    cols += ["NumPy f64", *libs] if baselines else []
    rows = [[r["bodies"]] + [f"{r[c]:.3g}" if c in r else "-" for c in cols] for r in res["rows"]]
    devices = f" ({ndev} devices: the batched jaxrot columns split the batch over them)" if ndev > 1 else ""
    text = (f"device: {res['device']}{devices}; buss2p, torque-free T-handle, dt = {H}; body-steps per second "
            "(median)\n\n" + md_table(["bodies", *cols], rows))
    c1 = "C, 1 thread"
    if c1 in libs:
        text += "\n\nRatios to single-thread C (float64): " + ", ".join(
            f"{r['bodies']}: {r['jaxrot f64 blocked'] / r[c1]:.2f}" for r in res["rows"])
    text += "\n\n" + md_table(["method (1 000 bodies, f64)", "µs per body-step", "× buss2p", "compile s"],
                              [[m["method"], f"{m['us_per_body_step']:.3g}", f"{m['relative_to_buss2p']:.1f}",
                                f"{m['compile_s']:.1f}"] for m in res["methods"]])
    co = res["call_overhead_us"]
    text += ("\n\nA repeated small call (1 body, 10 steps, compiled; medians of alternated calls): "
             + ", ".join(f"{k} {v:.0f} µs ({v / co['plain jit']:.1f}x plain jit)" for k, v in co.items()
                        if k != "max diff") + ".")
    keys = [f"{q} {t}" for t in ("f32", "f64") for q in ("energy", "momentum", "orthogonality")]
    text += (f"\n\nDrift after {res['drift'][0]['steps']:,} torque-free steps (dt = {H}, {res['drift'][0]['bodies']} "
             "random bodies, worst body; relative energy and world-momentum change, max |R^T R - 1|):\n\n"
             + md_table(["method", *keys], [[d["method"]] + [f"{d[k]:.1e}" for k in keys] for d in res["drift"]]))
    c = res["xla_cost_buss2p_f64"]
    lim = res["h100_limits"]
    text += (f"\n\nXLA cost analysis of a 1-step buss2p call, per body (float64; includes initialisation and "
             f"output copies): {c['flops']:.0f} flops, {c['bytes']:.0f} bytes.")
    c = res["xla_cost_buss2p_step_f64"]
    text += (f" One bare step (vmapped, no loop, no copies): {c['flops']:.0f} flops, {c['bytes']:.0f} bytes "
             f"({c['bytes'] / 192:.1f}x the 192 bytes of reading and writing R and Pi once). Roofline of that step "
             f"on an H100 (3.35 TB/s, 60 TFLOP/s fp64): memory-bound {lim['memory_bound_body_steps_per_s']:.2g}, "
             f"compute-bound {lim['compute_bound_body_steps_per_s']:.2g} body-steps/s.\n")
    for note in res["notes"]:
        text += f"\n{note}\n"
    print(text)
    (out / "bench_throughput.md").write_text(text)
    write_json(out / "bench_throughput.json", res)
    from jaxrot.present.plotting import throughput_lines_figure

    series = {c: [r.get(c, np.nan) for r in res["rows"]] for c in cols}
    throughput_lines_figure([r["bodies"] for r in res["rows"]], series,
                            title=f"buss2p throughput on {res['device']} (higher is better)").savefig(
        out / "bench_throughput.png", dpi=110)
    return res


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="buss2p throughput: XLA, fused kernels, NumPy and C")
    ap.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None)
    ap.add_argument("--fused-only", action="store_true",
                    help="only the fused-kernel table (fused vs XLA vs single-thread C, alternated runs)")
    ap.add_argument("--methods", default="buss2p,buss4,dmv10", help="the fused-kernel table's methods, comma-separated")
    args = ap.parse_args()
    jax.config.update("jax_platforms", "cuda" if args.device == "gpu" else "cpu")
    if args.device == "cpu":
        jaxrot.use_cpu_cores()
    if args.fused_only:
        jax.config.update("jax_enable_x64", True)
        with tempfile.TemporaryDirectory() as tmp:
            libs = compile_c(pathlib.Path(tmp)) if args.device == "cpu" else {}
            rows = fused_table((1, 1000) if args.quick else (1, 1000, 100_000, 1_000_000),
                               methods=tuple(args.methods.split(",")), c_libs=libs)
        cols = ["XLA", "fused, 1 device", "fused, all devices", "C, 1 thread", "C -O3 -march=native -ffast-math"]
        print(md_table(["bodies", "method", *cols],
                       [[r["bodies"], r["method"]] + [f"{r[c]:.3g}" if c in r else "-" for c in cols] for r in rows]))
    else:
        main(quick=args.quick, out_dir=args.out, device=args.device)
