"""Observed orders of Buss's 1st-4th order family (Buss 2000, table of orders), torqued and on the fast top.

Writes ``figures/buss_orders.{png,json,md}``. Problems: Buss's torqued prescribed-momentum body
(T = 2, N = 40...640) and Krysl's fast top (attitude-dependent
torque, T = 0.5). Error: rotation angle of R at T against ``jaxrot.reference``.
"""

from __future__ import annotations

import argparse

from jaxrot import analysis, problems, reference
from jaxrot.integrators import REGISTRY

from ._common import md_table, setup, write_json

METHODS = ["buss1", "buss2", "buss3_false", "buss2p", "buss3", "buss4"]
NUMPY_ORDERS = {"buss1": 1.00, "buss2": 2.00, "buss3_false": 1.96, "buss2p": 2.00, "buss3": 3.02, "buss4": 3.97}
CASES = {
    "buss_torqued": (2.0, [40, 80, 160, 320, 640]),
    "fast_top": (0.5, [50, 100, 200, 400, 800]),
}


def main(quick: bool = False, out_dir=None) -> dict:
    out = setup(out_dir, quick)
    results: dict[str, dict] = {}
    for pname, (T, ns) in CASES.items():
        if quick:
            ns = ns[:3]
        p = problems.get(pname)
        ref = reference.reference_solution(p, T).final
        results[pname] = {}
        for m in METHODS:
            print(f"  {pname:13s} {m:12s}", end="", flush=True)
            # errors below 1e-11 rad are round-off (reference and accumulation), not truncation
            r = analysis.convergence_study(m, p, T, ns, ref, floor=1e-11)
            r["local_orders"] = analysis.local_orders(r["dts"], r["errors"]).tolist()
            results[pname][m] = r
            print(f" slope {r['order']:.3f}")
    rows = [
        [m, REGISTRY[m].order, NUMPY_ORDERS[m]]
        + [round(results[p][m]["order"], 3) for p in CASES]
        + [f"{results['buss_torqued'][m]['errors'][-1]:.2e}"]
        for m in METHODS
    ]
    table = md_table(["method", "nominal order", "independent NumPy", "ours: torqued", "ours: fast top",
                      f"angle error, torqued, N={CASES['buss_torqued'][1][:3 if quick else 5][-1]}"], rows)
    table += "\n\nSlopes are least-squares fits over errors above 1e-11 rad (round-off floor)."
    print(table)
    (out / "buss_orders.md").write_text(table + "\n")
    write_json(out / "buss_orders.json", {"quick": quick, "cases": {k: v[0] for k, v in CASES.items()},
                                         "results": results})
    from jaxrot.present.plotting import convergence_figure

    fig = convergence_figure({f"{p} (T={CASES[p][0]})": results[p] for p in CASES},
                             ylabel="attitude error at T (rad)", title="Buss family: observed orders")
    fig.savefig(out / "buss_orders.png", dpi=120)
    return results


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    main(quick=ap.parse_args().quick)
