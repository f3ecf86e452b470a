"""Work-precision: wall time per body to reach a final attitude error over a batch of bodies.

A batch of perturbed bodies (momentum x (1 + 0.01 N(0,1)), attitude turned by 0.01 N(0,1) rad) per
problem; targets 1e-6 and 1e-10 (max over the batch of the rotation angle to the reference, rad),
and 1e-4 in float32 with ``--suite``. For every fixed-step method the smallest step count N reaching
the target (from one step up, 5 % resolution), for the error-controlled pairs and the peers the
loosest tolerance rtol = atol reaching it (from ten times the target down, resolution 10^(1/4);
a pair that passes there is first tried a decade at a time above it),
``Adaptive(error="global", measure="attitude")`` (the global-error driver) at rtol = atol = the
target itself with no search, timed in turn with the pair's local-control run, and the wall time of
that run per body (the median of at least 5
calls, up to 51 until they add up to 0.5 s; the whole batch on the default device, compiled
beforehand; fixed steps on XLA's loop, ``jaxrot.Sharded()``). Peers measured in the
same run on the same device: diffrax's Tsit5, Dopri5 and Dopri8 with its PID controller (vmapped;
the ``bench`` extra) and SciPy's DOP853 (a few bodies, one at a time). None of the problems is stiff,
so no implicit peer. References: the exact flow (no torque) and DOP853 at a quarter of its default
step (torques). Methods with a fused kernel (``executor=jaxrot.Fused()``, the ``fast`` extra) are
measured a second time in it (``method (Fused)``). Writes ``bench_precision.{json,md,png}`` (``--suite``:
``bench_precision_suite.{json,md,png}`` and ``bench_precision_suite_K.png``, one per problem).

``main()`` measures three problems (the free body, the fast and the asymmetric top) on 1 000
bodies; ``main(suite=True)`` (``jaxrot bench precision --suite``) the seven problems of ``SUITE`` on
``SUITE_BODIES`` bodies, with the best method of each family, diffrax's Tsit5 and Dopri8 and SciPy,
and float32 at 1e-4.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import jaxrot
from jaxrot import kernels, problems
from jaxrot.driver.checks import cast

from ._common import md_table, setup, write_json
from .precision_runs import (diffrax_row, fixed_step_row, max_error, pair_rows, perturbed_batch, reference_states,
                             scipy_row)

FREE = ["exact_free", "dmv10", "dmv8", "rkmk8", "lie_taylor5", "buss4"]
TORQUED = ["exact_split_kl8", "exact_split_kl6", "aba864", "rkmk8", "lie_taylor5", "buss4"]
#: the suite's lists: the best of each family (the others were slower on every problem above)
SUITE_FREE = ["exact_free", "dmv10", "rkmk8"]
SUITE_TORQUED = ["exact_split_kl8", "aba864", "rkmk8", "lie_taylor5", "buss4"]
#: label -> (problem, span, fixed-step methods)
CASES = {
    "free body, T = 100": ("free_body_mz", 100.0, FREE),
    "fast top, T = 1": ("fast_top", 1.0, TORQUED),
    # the fast top's body is axisymmetric, whose exact free flow is two rotations; this one is not
    "asymmetric top, T = 1": ("asymmetric_top", 1.0, TORQUED),
}
SUITE = {
    "free body, T = 100": ("free_body_mz", 100.0, SUITE_FREE),
    "fast top, T = 1": ("fast_top", 1.0, SUITE_TORQUED),
    "asymmetric top, T = 1": ("asymmetric_top", 1.0, SUITE_TORQUED),
    "slow top, T = 20": ("slow_top", 20.0, SUITE_TORQUED),
    "T-handle, flips near the separatrix, T = 20": ("t_handle", 20.0, SUITE_FREE),
    "Buss's time-dependent torque, T = 2": ("buss_torqued", 2.0, SUITE_TORQUED),
    "gravity-gradient satellite, two orbits": ("gravity_gradient", float(4 * np.pi), SUITE_TORQUED),
}
#: bodies per problem, 1 000 (the suite: seven problems and float32, about 30 minutes on two CPU cores)
BODIES, SUITE_BODIES = 1000, 1000
PAIRS = ["buss4(3)", "lie_taylor5(4)", "exact_split_tj4(2)"]
#: pairs measured on torque-free problems only: on the tops exact_split_tj4(2) took 50-1000x the
#: fixed-step runs (10 ms a body at 1e-10 on the fast top, the search over tolerances for minutes)
FREE_ONLY_PAIRS = ("exact_split_tj4(2)",)
#: (and it is left out of the suite)
SUITE_PAIRS = ["buss4(3)", "lie_taylor5(4)"]
PEERS = ["Tsit5", "Dopri5", "Dopri8"]
SUITE_PEERS = ["Tsit5", "Dopri8"]
TARGETS = (1e-6, 1e-10)
#: cases measured at fewer targets, and why (written under the tables)
NOT_MEASURED = {
    ("slow top, T = 20", 1e-10): "float64 round-off, amplified by the slow top's dynamics over T = 20, leaves "
    "two references (DOP853 at a quarter and a sixteenth of its default step) up to 2e-10 apart on bodies "
    "of the batch, and rkmk8 at 65 536 and 131 072 steps 3e-10 apart: 1e-10 is below what float64 resolves",
}
#: float32 (``--suite``): target, methods, pairs and peers
# (the exact-flow methods are left out: in float32 dmv10 on the free body and exact_split_kl8 on the
# asymmetric top did not reach 1e-4 over the batch at any step count up to 2^18)
F32 = (1e-4, ["buss4", "rkmk8"], [], ["Tsit5"])


def run_case(label, name, T, methods, pairs, B, targets, peers, scipy, log, dtype=jnp.float64):
    """Every row of one problem: fixed-step methods, pairs, diffrax peers and SciPy, per target."""
    p = problems.get(name)
    S = perturbed_batch(p, B)
    ref = reference_states(p, S, T)
    if dtype != jnp.float64:
        S = cast(S, dtype)
    pd = cast(p, dtype)
    fused = kernels.have_warp()
    usable = [m for m in methods if not (m.startswith("exact_free") or m.startswith("dmv")) or p.torque.is_free]
    rows = []

    def add(r, eps):
        if r is not None:
            rows.append(dict(r, case=label, target=eps, dtype=jnp.dtype(dtype).name))
            log(rows[-1])

    for eps in (e for e in targets if (label, e) not in NOT_MEASURED):
        for m in usable:
            # XLA's loop (the automatic choice would run a large batch fused: measured in the next row)
            add(fixed_step_row(m, p, T, S, ref, eps, executor=jaxrot.Sharded()), eps)
            if fused and kernels.supports(m, p.system):  # the same method in one compiled kernel
                add(fixed_step_row(m, p, T, S, ref, eps, executor=jaxrot.Fused()), eps)
        for pair in (q for q in pairs if p.torque.is_free or q not in FREE_ONLY_PAIRS):
            for r in pair_rows(pair, p, T, S, ref, eps):
                add(r, eps)
        for solver in peers:
            try:
                add(diffrax_row(solver, pd, T, S, ref, eps), eps)
            except ImportError:
                log({"note": "diffrax is not installed (pip install 'jaxrot[bench]'): its rows are skipped"})
                break
        if scipy:
            add(scipy_row(p, T, S, ref, eps), eps)
    return rows


def summary(rows):
    """Per case, precision and target: the best jaxrot entry (and the best time-stepping one, the
    exact flow and what is built on it excluded), the best peer (diffrax or SciPy) and the ratios."""
    out = []
    keys = dict.fromkeys((r["case"], r.get("dtype", "float64"), r["target"]) for r in rows)
    for case, dtype, eps in keys:
        rs = [r for r in rows if (r["case"], r.get("dtype", "float64"), r["target"]) == (case, dtype, eps)
              and r["us"] is not None]
        # (a "to tolerance" run aims at the target and may land just above it: it competes only if within)
        ours = [r for r in rs if not r["method"].startswith(("diffrax", "SciPy")) and r["err"] <= eps]
        stepping = [r for r in ours if "exact" not in r["method"]]
        theirs = [r for r in rs if r["method"].startswith(("diffrax", "SciPy"))]
        if not ours or not theirs:
            continue
        a, b = min(ours, key=lambda r: r["us"]), min(theirs, key=lambda r: r["us"])
        c = min(stepping, key=lambda r: r["us"]) if stepping else a
        out.append(dict(case=case, dtype=dtype, target=eps, best=a["method"], best_us=a["us"], stepping=c["method"],
                        stepping_us=c["us"], peer=b["method"], peer_us=b["us"], ratio=a["us"] / b["us"],
                        stepping_ratio=c["us"] / b["us"]))
    return out


def error_control(rows):
    """Per pair: the global-error driver's final error against the target and its cost against the
    same pair under local control at the searched tolerance (the run at the right step)."""
    out = []
    for g in (r for r in rows if r["method"].startswith("to tolerance") and r["us"] is not None):
        pair = g["method"].removeprefix("to tolerance ")
        loc = [r for r in rows if r["method"] == f"adaptive {pair}" and r["case"] == g["case"]
               and r["target"] == g["target"] and r.get("dtype") == g.get("dtype") and r["us"] is not None]
        out.append(dict(case=g["case"], dtype=g.get("dtype", "float64"), target=g["target"], pair=pair,
                        err_ratio=g["err"] / g["target"], us=g["us"],
                        cost_ratio=g["us"] / loc[0]["us"] if loc else None))
    return out


def main(quick: bool = False, out_dir=None, suite: bool = False):
    out = setup(out_dir, quick)
    f32 = None
    if quick:
        cases = {"fast top, T = 1": ("fast_top", 1.0, ["buss4"])}
        pairs, B, targets, peers, scipy = ["buss4(3)"], 16, (1e-6,), ["Tsit5"], False
        if suite:
            f32 = (1e-4, ["buss4"], [], ["Tsit5"])
    else:
        (cases, pairs), targets, scipy = ((SUITE, SUITE_PAIRS) if suite else (CASES, PAIRS)), TARGETS, True
        B, peers, f32 = (SUITE_BODIES, SUITE_PEERS, F32) if suite else (BODIES, PEERS, None)
    log = lambda r: print("  ", {k: (f"{v:.3g}" if isinstance(v, float) else v) for k, v in r.items()},  # noqa: E731
                          flush=True)
    rows = []
    for label, (name, T, methods) in cases.items():
        print(f"{label}: {B} bodies", flush=True)
        rows += run_case(label, name, T, methods, pairs, B, targets, peers, scipy, log)
        if f32 is not None:
            eps, m32, p32, peers32 = f32
            rows += run_case(label, name, T, [m for m in m32 if m in methods], p32, B, (eps,), peers32, False, log,
                             dtype=jnp.float32)
    data = {"bodies": B, "suite": suite, "rows": rows, "summary": summary(rows), "error_control": error_control(rows),
            "devices": [str(d) for d in jax.devices()]}
    write_json(out / f"{_stem(data)}.json", data)
    render(data, out)
    return data


def render(data, out):
    """The markdown tables and the figures from the JSON results (``render(json.load(f), folder)``)."""
    rows = data["rows"]
    summ, control = summary(rows), error_control(rows)  # derived from the rows: older JSON files render too
    table = md_table(["case", "precision", "target", "method", "setting", "steps/body", "µs/body", "max error"],
                     [[r["case"], r.get("dtype", "float64"), f"{r['target']:.0e}", r["method"], r["setting"],
                       "-" if r["steps"] is None else f"{r['steps']:.0f}",
                       "-" if r["us"] is None else f"{r['us']:.3g}", "-" if r["err"] is None else f"{r['err']:.1e}"]
                      for r in rows])
    stable = md_table(["case", "precision", "target", "best jaxrot", "µs/body", "best stepping method", "µs/body",
                       "best peer", "µs/body", "ratio", "stepping ratio"],
                      [[s["case"], s["dtype"], f"{s['target']:.0e}", s["best"], f"{s['best_us']:.3g}", s["stepping"],
                        f"{s['stepping_us']:.3g}", s["peer"], f"{s['peer_us']:.3g}", f"{s['ratio']:.2g}",
                        f"{s['stepping_ratio']:.2g}"] for s in summ])
    ctable = md_table(["case", "precision", "target", "pair", "final error / target", "µs/body",
                       "× local control at the searched tolerance"],
                      [[c["case"], c["dtype"], f"{c['target']:.0e}", c["pair"], f"{c['err_ratio']:.2f}", f"{c['us']:.3g}",
                        "-" if c["cost_ratio"] is None else f"{c['cost_ratio']:.2f}"]
                       for c in control])
    dev = data["devices"][0] if data.get("devices") else "?"
    stem = _stem(data)
    notes = "".join(f"Not measured: {case} at {eps:.0e}: {why}.\n\n" for (case, eps), why in NOT_MEASURED.items()
                    if case in {r["case"] for r in rows})
    (out / f"{stem}.md").write_text(
        f"Batch of {data['bodies']} bodies, {dev}; ratio: best jaxrot / best peer (diffrax or SciPy), "
        f"per-body wall time.\n\n{stable}\n\n{notes}The global-error driver at the target itself:\n\n{ctable}\n\n"
        f"Every row:\n\n{table}\n")
    cases = list(dict.fromkeys(r["case"] for r in rows))
    _figure(rows, cases, out / f"{stem}.png")
    if data.get("suite"):
        for k, case in enumerate(cases):
            _figure(rows, [case], out / f"{stem}_{k + 1}.png")


def _stem(data) -> str:
    """``bench_precision`` (three problems) or ``bench_precision_suite``: the two runs' files apart."""
    return "bench_precision_suite" if data.get("suite") else "bench_precision"


def _figure(rows, cases, path):
    """Work-precision panels, one per case: each method's runs at the cost that met each target
    (float32 rows hollow), peers dashed black."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ncol = min(3, len(cases))
    nrow = -(-len(cases) // ncol)
    # legends below the panels (up to 20 entries each: inside they covered the curves)
    fig, axes = plt.subplots(nrow, ncol, figsize=(6.5 * ncol, 7 * nrow), squeeze=False)
    colors = plt.get_cmap("tab20").colors
    for ax, case in zip(axes.flat, cases):
        rs = [r for r in rows if r["case"] == case and r["us"] is not None]
        for i, m in enumerate(dict.fromkeys(r["method"] for r in rs)):
            peer = m.startswith(("diffrax", "SciPy"))
            for dtype, fill in (("float64", True), ("float32", False)):
                pts = sorted((r["us"], max(r["err"], 1e-17)) for r in rs
                             if r["method"] == m and r.get("dtype", "float64") == dtype)
                if not pts:
                    continue
                ax.loglog([x for x, _ in pts], [y for _, y in pts], "--" if peer else "-",
                          color="k" if peer else colors[i % 20], marker="osD^v<>ph*XP"[i % 12],
                          mfc=None if fill else "none", lw=2.5 if peer else 1.5,
                          label=m if dtype == "float64" or not any(r["method"] == m and r.get("dtype", "float64")
                                                                    == "float64" for r in rs) else None)
        for eps in sorted({r["target"] for r in rs}):
            ax.axhline(eps, color="0.6", lw=0.8, ls=":")
        ax.set_xlabel("wall time per body (µs)")
        ax.set_ylabel("max final attitude error over the batch (rad)")
        ax.set_title(case, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3, frameon=False)
    for ax in list(axes.flat)[len(cases):]:
        ax.set_visible(False)
    fig.suptitle("Each method at the cheapest setting that meets each target (dotted)\n"
                 "dashed black: peers; hollow markers: float32", fontsize=10 if ncol > 1 else 9)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.6 / (7 * nrow)))  # the title's two lines clear of the top panels
    fig.savefig(path, dpi=110)
    plt.close(fig)
