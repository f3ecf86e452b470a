"""Krysl's four test problems: convergence, Hamiltonian and conserved quantities.

For the free body, the slow and fast Lagrangian tops and the Coulomb soft-wall body (both sign
conventions), every method of Krysl's figures is run over a sweep of step sizes and compared at
t_end with ``jaxrot.reference`` (DOP853 at round-off accuracy, not a fine run of a method under
test) in Krysl's norms ``||R - R_ref||_2`` (spectral) and ``||Pi - Pi_ref||_2``. At one step size
per problem the Hamiltonian and the momenta pi_z, pi.chi, |Pi| are recorded over time, and the
scaled Hamiltonian error (H - H0)/dt^2 of LIEMID[EA] is followed over a 90x longer interval on the
slow top. Writes ``figures/krysl_*.png``, ``figures/krysl.json`` and ``figures/krysl.md``.
"""

from __future__ import annotations

import argparse

import numpy as np

import jaxrot
from jaxrot import analysis, problems, reference

from ._common import md_table, setup, write_json

TORQUED = ["liemid_i", "liemid_e", "liemid_e1", "liemid_e2", "liemid_ea", "akw", "simo_wong", "nmb"]
FREE = ["liemid", "liemid_ea", "akw", "simo_wong", "nmb", "dmv"]

# problem: (t_end, step exponents k in dt = 2^-k, methods, dt for the time series)
CASES = {
    "free_body_mz": (100.0, range(-1, 7), FREE, 1.0),
    "slow_top": (20.0, range(3, 11), TORQUED, 1 / 8),
    "fast_top": (10.0, range(6, 13), TORQUED, 1 / 128),
    "coulomb_wall": (50.0, range(2, 9), TORQUED, 0.2),
    "coulomb_wall_physical": (50.0, range(2, 9), TORQUED, 0.2),
}
QUICK = {"free_body_mz": (10.0, range(2, 5)), "slow_top": (2.0, range(5, 8)), "fast_top": (0.5, range(8, 11)),
         "coulomb_wall": (5.0, range(4, 7)), "coulomb_wall_physical": (5.0, range(4, 7))}
FIXED_DT = {"free_body_mz": 1 / 8, "slow_top": 1 / 128, "fast_top": 1 / 1024, "coulomb_wall": 1 / 32,
            "coulomb_wall_physical": 1 / 32}


def _conv(method, p, T, ks, ref):
    out = {"dts": [], "R2": [], "Pi2": []}
    for k in ks:
        n = int(round(T * 2**k))
        dt = T / n
        try:
            fin = jaxrot.simulate(method, p, dt, n, saveat=jaxrot.SaveAt(t0=False)).final
            eR = float(analysis.matrix_error(fin.R, ref.R))
            eP = float(np.linalg.norm(np.asarray(fin.Pi - ref.Pi)))
        except jaxrot.SimulationError:
            eR = eP = float("nan")  # diverged or a solve failed: shown as a gap
        out["dts"].append(dt)
        out["R2"].append(eR)
        out["Pi2"].append(eP)
    return out


def _fit(dts, errs, floor=1e-11):
    pts = [(d, e) for d, e in zip(dts, errs) if np.isfinite(e) and floor < e < 0.5]
    if len(pts) < 2:
        return float("nan")
    return analysis.observed_order(*zip(*pts))


def _series(method, p, dt, T, n_frames=200):
    n = int(round(T / dt))
    save = max(1, n // n_frames)
    n -= n % save
    tr = jaxrot.simulate(method, p, dt, n, saveat=jaxrot.SaveAt(steps=save), throw=False)
    s = tr.states
    H = np.asarray(analysis.energy(p, s, tr.ts))
    return {
        "t": np.asarray(tr.ts).tolist(),
        "H": H.tolist(),
        "pi_z": np.asarray(s.L[:, 2]).tolist(),
        "pi_chi": np.asarray(s.Pi[:, 2]).tolist(),
        "Pi_norm": np.linalg.norm(np.asarray(s.Pi), axis=1).tolist(),
        "failed_step": int(tr.failed_step),
    }


def _drift(x):
    x = np.asarray(x, np.float64)
    if not np.all(np.isfinite(x)):
        return float("nan")
    return float(np.abs(x - x[0]).max() / max(abs(x[0]), 1e-300))


def main(quick: bool = False, out_dir=None) -> dict:
    out = setup(out_dir, quick)
    import matplotlib.pyplot as plt

    from jaxrot.present.plotting import conserved_drift_figure, convergence_figure

    res: dict = {"quick": quick, "problems": {}}
    rows = []
    for pname, (T, ks, methods, dt_series) in CASES.items():
        if quick:
            T, ks = QUICK[pname]
            methods = ["liemid_ea", "akw"] if pname != "free_body_mz" else ["liemid", "dmv"]
        p = problems.get(pname)
        print(f"{pname}: reference ...", flush=True)
        ref = reference.reference_solution(p, T).final
        conv, series = {}, {}
        for m in methods:
            conv[m] = _conv(m, p, T, ks, ref)
            conv[m]["order_R2"] = _fit(conv[m]["dts"], conv[m]["R2"])
            conv[m]["order_Pi2"] = _fit(conv[m]["dts"], conv[m]["Pi2"])
            series[m] = _series(m, p, dt_series, T)
            fixed = FIXED_DT[pname]
            i = int(np.argmin(np.abs(np.array(conv[m]["dts"]) - fixed)))
            rows.append([pname, m, f"{conv[m]['dts'][i]:.4g}", f"{conv[m]['R2'][i]:.2e}", f"{conv[m]['Pi2'][i]:.2e}",
                         f"{conv[m]['order_R2']:.2f}", f"{conv[m]['order_Pi2']:.2f}",
                         f"{_drift(series[m]['H']):.1e}", f"{_drift(series[m]['pi_z']):.1e}",
                         f"{_drift(series[m]['pi_chi']):.1e}", f"{_drift(series[m]['Pi_norm']):.1e}"])
            print(f"  {m:10s} order R {conv[m]['order_R2']:.2f}  Pi {conv[m]['order_Pi2']:.2f}", flush=True)
        res["problems"][pname] = {"t_end": T, "dt_series": dt_series, "convergence": conv, "series": series}
        for key in ("R2", "Pi2"):
            panel = {m: {"dts": c["dts"], "errors": c[key], "order": c[f"order_{key}"]} for m, c in conv.items()}
            panel = {m: {k: [v for v, e in zip(r[k], r["errors"]) if np.isfinite(e)] if k != "order" else r[k]
                         for k in r} for m, r in panel.items()}
            panel = {m: r for m, r in panel.items() if len(r["errors"]) >= 1}
            fig = convergence_figure({f"{pname}, t_end={T:g}": panel}, ylabel=f"||{key[:-1]} - ref||_2 at t_end")
            fig.savefig(out / f"krysl_{pname}_{key}.png", dpi=110)
            plt.close(fig)
        fig = conserved_drift_figure(series, {"H": "|H - H0| (energy)", "pi_z": "|pi_z - pi_z0| (vertical momentum)",
                                              "pi_chi": "|pi.chi - (pi.chi)0| (momentum along the axis)"},
                                     title=f"{pname}, dt = {dt_series:g}: change of the quantities the exact flow "
                                           "conserves (1e-17 = exact)")
        fig.savefig(out / f"krysl_{pname}_conserved.png", dpi=110)
        plt.close(fig)

    # LIEMID[EA]: scaled Hamiltonian error over a 90x longer interval (slow top)
    p = problems.get("slow_top")
    span = (1 if quick else 90) * p.t_end
    fig, ax = plt.subplots(figsize=(8, 4))
    long = {}
    for dt in ([1 / 8, 1 / 16] if quick else [1 / 8, 1 / 16, 1 / 32]):
        s = _series("liemid_ea", p, dt, span, n_frames=2000)
        scaled = ((np.asarray(s["H"]) - s["H"][0]) / dt**2).tolist()
        long[str(dt)] = {"t": s["t"], "scaled_H_error": scaled}
        ax.plot(s["t"], scaled, lw=0.6, label=f"dt = {dt:g}")
    ax.set_xlabel("t")
    ax.set_ylabel("(H - H0) / dt^2")
    ax.set_title(f"LIEMID[EA], slow top, t in [0, {span:g}]: bounded, second-order energy error")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "krysl_ea_long.png", dpi=110)
    plt.close(fig)
    res["ea_long"] = long

    header = ["problem", "method", "dt", "‖R−Rref‖", "‖Π−Πref‖", "order R", "order Pi",
              "max rel. dH", "max rel. d(pi_z)", "max rel. d(pi.chi)", "max rel. d‖Π‖"]
    table = md_table(header, rows)
    print(table)
    (out / "krysl.md").write_text(table + "\n")
    write_json(out / "krysl.json", res)
    return res


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    main(quick=ap.parse_args().quick)
