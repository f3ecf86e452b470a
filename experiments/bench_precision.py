"""Work-precision: wall time per body to reach a final attitude error over a batch of bodies.

For the McLachlan-Zanna free body over T = 100, the fast top over T = 1 (an axisymmetric body) and
an asymmetric variant of it (J = (5, 4, 1); no adaptive pairs or SciPy there), a batch of perturbed
bodies (momentum x (1 + 0.01 N(0,1)), attitude turned by 0.01 N(0,1) rad), targets 1e-6 and 1e-10
(max over the batch of the rotation angle to the reference, rad): for every fixed-step method the
smallest step count N reaching the target (``analysis.smallest_passing_count``, 5 % resolution), for
the error-controlled pairs and the baselines the loosest tolerance rtol = atol reaching it
(``analysis.loosest_passing_tolerance``, steps of sqrt(10)), ``Adaptive(error="global")`` (the
global-error driver) at rtol = atol = the target itself, and the wall time of that run per body
(median of 3, vmapped batch, compiled beforehand). Baselines measured in the same run: diffrax Tsit5
and Dopri8 with its PID controller (vmapped; the ``bench`` extra) and SciPy's DOP853 (a few bodies,
one at a time). References: the exact flow (free body) and jaxrot.reference's DOP853 at a small
fixed step (top). Writes ``bench_precision.{json,md,png}``.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxrot
from jaxrot import analysis, exact, problems, reference
from jaxrot.physics.flow import body_vector_field, pack_body, unpack_body

from ._common import md_table, setup, write_json

#: label -> (problem, span, fixed-step methods, with the adaptive pairs and SciPy)
CASES = {
    "free body, T = 100": ("free_body_mz", 100.0,
                           ["exact_free", "dmv10", "dmv8", "dmv6", "lie_taylor5", "buss4", "liemid_ea_kl8", "rkmk4",
                            "rk4"], True),
    "fast top, T = 1": ("fast_top", 1.0,
                        ["exact_split_kl8", "exact_split_kl6", "liemid_ea_kl8", "lie_taylor5", "buss4", "rkmk4",
                         "rk4"], True),
    # the fast top's body is axisymmetric, whose exact free flow is two rotations; this one is not
    # (a check of the torqued result: no adaptive pairs or SciPy)
    "asymmetric top, T = 1": ("asymmetric_top", 1.0, ["exact_split_kl8", "exact_split_kl6", "lie_taylor5", "buss4"],
                              False),
}
PAIRS = ["buss4(3)", "lie_taylor5(4)", "exact_split_tj4(2)"]
TARGETS = (1e-6, 1e-10)
SCIPY_BODIES = 5


def _median_time(f, reps=3):
    jax.block_until_ready(f())
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(f())
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def _batch(p, B, seed=0):
    rng = np.random.default_rng(seed)
    R = jax.vmap(lambda v: p.state0.R @ jaxrot.so3.exp(v))(jnp.asarray(0.01 * rng.normal(size=(B, 3))))
    Pi = jnp.asarray(np.asarray(p.state0.Pi) * (1 + 0.01 * rng.normal(size=(B, 3))))
    return jaxrot.State(R, Pi)


def _reference(p, S, T):
    if p.torque.is_free:
        return jax.vmap(lambda s: exact.free_flow(p.body.J, s, T))(S)
    h = reference.default_step(p) / 4
    return jax.vmap(lambda s: reference.reference_solution(p, T, state0=s, max_step=h).final)(S)


def _final(method, p, dt, n, S):
    """The final states of a fixed-step run of the batch S (failures flagged, not raised)."""
    return jaxrot.simulate(method, p, dt, n, state0=S, saveat=jaxrot.SaveAt(t0=False), throw=False).final


def _err(S, ref):
    e = analysis.attitude_error(S.R, ref.R)
    return float(jnp.max(jnp.where(jnp.isfinite(e), e, jnp.inf)))


def _diffrax_solver(p, T, solver_name):
    import diffrax

    f = body_vector_field(p)
    term = diffrax.ODETerm(lambda t, y, args: f(t, y))
    solver = getattr(diffrax, solver_name)()

    @jax.jit
    def run(S, tol):
        def one(R, Pi):
            sol = diffrax.diffeqsolve(term, solver, 0.0, T, None, pack_body(R, Pi),
                                      stepsize_controller=diffrax.PIDController(rtol=tol, atol=tol),
                                      saveat=diffrax.SaveAt(t1=True), max_steps=1_000_000)
            return sol.ys[-1], sol.stats["num_accepted_steps"]

        y, n = jax.vmap(one)(S.R, S.Pi)
        return jaxrot.State(*unpack_body(y)), n

    return run


def _scipy_run(p, T, S, tol):
    from scipy.integrate import solve_ivp

    f = jax.jit(body_vector_field(p))
    out = []
    for i in range(S.R.shape[0]):
        y0 = np.asarray(pack_body(S.R[i], S.Pi[i]))
        sol = solve_ivp(lambda t, y: np.asarray(f(t, jnp.asarray(y))), (0.0, T), y0, method="DOP853", rtol=tol,
                        atol=tol)
        out.append(sol.y[:, -1])
    return jaxrot.State(*unpack_body(jnp.asarray(np.array(out))))


def run_case(label, name, T, methods, pairs, B, targets, baselines, log):
    p = problems.get(name)
    S = _batch(p, B)
    ref = _reference(p, S, T)
    rows = []
    for m in methods:
        for eps in targets:
            def passes(n, m=m):
                return _err(_final(m, p, T / n, n, S), ref) <= eps
            N, _ = analysis.smallest_passing_count(passes, n_start=1 if m.startswith("exact_free") else 4,
                                                   n_max=1 << 18)
            if N is None:
                rows.append(dict(case=label, target=eps, method=m, setting="N > 262144", steps=None, us=None, err=None))
                continue
            sec = _median_time(lambda: _final(m, p, T / N, N, S))
            e = _err(_final(m, p, T / N, N, S), ref)
            rows.append(dict(case=label, target=eps, method=m, setting=f"N = {N}", steps=N, us=1e6 * sec / B, err=e))
            log(rows[-1])
    for pair in pairs:
        for eps in targets:
            def go(tol, pair=pair):
                return jaxrot.simulate(pair, p, t1=T, state0=S, saveat=jaxrot.SaveAt(t0=False),
                                       stepsize=jaxrot.Adaptive(tol, tol, max_steps=1 << 20))

            tol, _ = analysis.loosest_passing_tolerance(lambda t: _err(go(t).final, ref) <= eps, eps, tries=10)
            if tol is None:
                rows.append(dict(case=label, target=eps, method=f"adaptive {pair}", setting="tol < 1e-15", steps=None,
                                 us=None, err=None))
                continue
            sol = go(tol)
            sec = _median_time(lambda: go(tol).final.R)
            rows.append(dict(case=label, target=eps, method=f"adaptive {pair}", setting=f"tol = {tol:.1e}",
                             steps=float(np.mean(sol.controller.n_accepted + sol.controller.n_rejected)), us=1e6 * sec / B,
                             err=_err(sol.final, ref)))
            log(rows[-1])
            # the global-error driver at the target itself (its calibration runs in its cost and steps)
            def glob(pair=pair, eps=eps):
                return jaxrot.simulate(pair, p, t1=T, state0=S, saveat=jaxrot.SaveAt(t0=False),
                                       stepsize=jaxrot.Adaptive(eps, eps, error="global", max_steps=1 << 20))

            sol = glob()
            sec = _median_time(lambda: glob().final.R)
            rows.append(dict(case=label, target=eps, method=f"to tolerance {pair}", setting=f"tol = {eps:.0e}",
                             steps=float(np.mean(sol.controller.n_accepted + sol.controller.n_rejected
                                           + sol.controller.n_calibration)),
                             us=1e6 * sec / B, err=_err(sol.final, ref)))
            log(rows[-1])
    for solver in baselines.get("diffrax", []):
        try:
            run = _diffrax_solver(p, T, solver)
        except ImportError:
            log({"note": "diffrax is not installed (pip install 'jaxrot[bench]'): its baselines are skipped"})
            break
        for eps in targets:
            tol, _ = analysis.loosest_passing_tolerance(lambda t: _err(run(S, t)[0], ref) <= eps, eps, tries=10)
            if tol is None:
                continue
            sec = _median_time(lambda: run(S, tol)[0].R)
            Sx, n = run(S, tol)
            rows.append(dict(case=label, target=eps, method=f"diffrax {solver}", setting=f"tol = {tol:.1e}",
                             steps=float(np.mean(n)), us=1e6 * sec / B, err=_err(Sx, ref)))
            log(rows[-1])
    if baselines.get("scipy"):
        k = min(SCIPY_BODIES, B)
        sub = jax.tree_util.tree_map(lambda x: x[:k], S)
        rsub = jax.tree_util.tree_map(lambda x: x[:k], ref)
        for eps in targets:
            tol, _ = analysis.loosest_passing_tolerance(lambda t: _err(_scipy_run(p, T, sub, t), rsub) <= eps, eps,
                                                        tries=8)
            if tol is None:
                continue
            t0 = time.perf_counter()
            Sx = _scipy_run(p, T, sub, tol)
            rows.append(dict(case=label, target=eps, method="SciPy DOP853", setting=f"tol = {tol:.1e}", steps=None,
                             us=1e6 * (time.perf_counter() - t0) / k, err=_err(Sx, rsub)))
            log(rows[-1])
    return rows


def summary(rows):
    """Per case and target: the best jaxrot entry (and the best time-stepping one, the exact flow
    excluded), the best diffrax entry and their time ratios."""
    out = []
    for case in dict.fromkeys(r["case"] for r in rows):
        for eps in dict.fromkeys(r["target"] for r in rows if r["case"] == case):
            rs = [r for r in rows if r["case"] == case and r["target"] == eps and r["us"] is not None]
            # (a "to tolerance" run aims at the target and may land just above it: it competes only if within)
            ours = [r for r in rs if not r["method"].startswith(("diffrax", "SciPy")) and r["err"] <= eps]
            stepping = [r for r in ours if "exact" not in r["method"]]  # the exact flow and what is built on it
            theirs = [r for r in rs if r["method"].startswith("diffrax")]
            if not ours or not theirs:
                continue
            a, b = min(ours, key=lambda r: r["us"]), min(theirs, key=lambda r: r["us"])
            c = min(stepping, key=lambda r: r["us"]) if stepping else a
            out.append(dict(case=case, target=eps, best=a["method"], best_us=a["us"], stepping=c["method"],
                            stepping_us=c["us"], diffrax=b["method"], diffrax_us=b["us"], ratio=a["us"] / b["us"],
                            stepping_ratio=c["us"] / b["us"]))
    return out


def main(quick: bool = False, out_dir=None):
    out = setup(out_dir, quick)
    if quick:
        cases = {"fast top, T = 1": ("fast_top", 1.0, ["buss4"], True)}
        pairs, B, targets, baselines = ["buss4(3)"], 16, (1e-6,), {"diffrax": ["Tsit5"], "scipy": False}
    else:
        cases, pairs, B, targets = CASES, PAIRS, 1000, TARGETS
        baselines = {"diffrax": ["Tsit5", "Dopri8"], "scipy": True}
    rows = []
    for label, (name, T, methods, full) in cases.items():
        print(f"{label}: {B} bodies", flush=True)
        rows += run_case(label, name, T, methods, pairs if full else [], B, targets,
                         baselines if full else dict(baselines, scipy=False),
                         lambda r: print("  ", {k: (f"{v:.3g}" if isinstance(v, float) else v) for k, v in r.items()},
                                         flush=True))
    data = {"bodies": B, "rows": rows, "summary": summary(rows), "devices": [str(d) for d in jax.devices()]}
    write_json(out / "bench_precision.json", data)
    render(data, out)
    return data


def render(data, out):
    """The markdown table and the figure from the JSON results (``render(json.load(f), folder)``)."""
    rows, summ = data["rows"], data["summary"]
    table = md_table(["case", "target", "method", "setting", "steps/body", "µs/body", "max error"],
                     [[r["case"], f"{r['target']:.0e}", r["method"], r["setting"],
                       "-" if r["steps"] is None else f"{r['steps']:.0f}",
                       "-" if r["us"] is None else f"{r['us']:.3g}", "-" if r["err"] is None else f"{r['err']:.1e}"]
                      for r in rows])
    stable = md_table(["case", "target", "best jaxrot", "µs/body", "best stepping method", "µs/body",
                       "best diffrax", "µs/body", "ratio", "stepping ratio"],
                      [[s["case"], f"{s['target']:.0e}", s["best"], f"{s['best_us']:.3g}", s["stepping"],
                        f"{s['stepping_us']:.3g}", s["diffrax"], f"{s['diffrax_us']:.3g}", f"{s['ratio']:.2f}",
                        f"{s['stepping_ratio']:.2f}"] for s in summ])
    dev = data["devices"][0] if data.get("devices") else "?"
    (out / "bench_precision.md").write_text(f"Batch of {data['bodies']} bodies, {dev}.\n\n{stable}\n\n{table}\n")
    _figure(rows, out / "bench_precision.png")


def _figure(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = list(dict.fromkeys(r["case"] for r in rows))
    fig, axes = plt.subplots(1, len(cases), figsize=(6.5 * len(cases), 5), squeeze=False)
    for ax, case in zip(axes[0], cases):
        rs = [r for r in rows if r["case"] == case and r["us"] is not None]
        colors = plt.get_cmap("tab20").colors
        for i, m in enumerate(dict.fromkeys(r["method"] for r in rs)):
            pts = sorted((r["us"], r["err"]) for r in rs if r["method"] == m)
            base = m.startswith(("diffrax", "SciPy"))
            ax.loglog([x for x, _ in pts], [y for _, y in pts], "--" if base else "-", color="k" if base else
                      colors[i % 20], marker="osD^v<>ph*XP"[i % 12], lw=2.5 if base else 1.5, label=m)
        ax.set_xlabel("wall time per body (µs)")
        ax.set_ylabel("max final attitude error over the batch (rad)")
        ax.set_title(f"{case}: each method at the cost that meets 1e-6 and 1e-10 (dashed: baselines)",
                     fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
