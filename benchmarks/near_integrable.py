"""Laskar-Robutel's SABA_n / SBAB_n and Blanes et al.'s ABA(8,6,4) / ABA(10,6,4) beside the suite's best torqued methods and diffrax, measured in
one process (float64, CPU, the same batch and protocol as ``jaxrot bench precision``: the smallest
step count whose maximum final attitude error over the batch meets the target, its wall time per
body, median of 3; diffrax with its PID controller at the loosest tolerance meeting the target).

    python benchmarks/near_integrable.py [--bodies 100] [--out jaxrot-results/near_integrable]

Writes ``near_integrable.json`` and ``near_integrable.md`` into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import jax

jax.config.update("jax_enable_x64", True)

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from experiments.precision_runs import (diffrax_row, fixed_step_row, perturbed_batch,  # noqa: E402
                                        reference_states)
from jaxrot import problems  # noqa: E402
from jaxrot.present.output import atomic  # noqa: E402

PROBLEMS = {"asymmetric top, T = 1": ("asymmetric_top", 1.0),
            "fast top, T = 1": ("fast_top", 1.0),
            "Buss's time-dependent torque, T = 2": ("buss_torqued", 2.0),
            "gravity-gradient satellite, two orbits": ("gravity_gradient", 4 * 3.141592653589793)}
METHODS = ["saba2", "saba3", "saba4", "sbab2", "sbab3", "aba864", "aba1064", "exact_split", "exact_split_kl8", "rkmk8"]
PEERS = ["Tsit5", "Dopri8"]
TARGETS = (1e-6, 1e-10)
#: the search stops here ("N > 4096"): second-order behaviour at 1e-10 would need ~10^5 steps
N_MAX = 4096


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bodies", type=int, default=100)
    ap.add_argument("--out", default="jaxrot-results/near_integrable")
    args = ap.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for label, (name, T) in PROBLEMS.items():
        p = problems.get(name)
        S = perturbed_batch(p, args.bodies)
        ref = reference_states(p, S, T)
        for eps in TARGETS:
            for m in METHODS:
                rows.append(dict(fixed_step_row(m, p, T, S, ref, eps, n_max=N_MAX), case=label, target=eps))
                print(rows[-1], flush=True)
            for solver in PEERS:
                rows.append(dict(diffrax_row(solver, p, T, S, ref, eps), case=label, target=eps))
                print(rows[-1], flush=True)
    lines = ["| problem | target | method | setting | µs per body | × best peer |", "|---|---|---|---|---|---|"]
    for label in PROBLEMS:
        for eps in TARGETS:
            rs = [r for r in rows if r["case"] == label and r["target"] == eps]
            peer = min((r["us"] for r in rs if r["method"].startswith("diffrax") and r["us"]), default=None)
            for r in sorted(rs, key=lambda r: r["us"] or float("inf")):
                ratio = f"{r['us'] / peer:.2f}" if (peer and r["us"]) else "—"
                us = f"{r['us']:.3g}" if r["us"] else "—"
                lines.append(f"| {label} | {eps:g} | `{r['method']}` | {r['setting']} | {us} | {ratio} |")
    for path, text in ((out / "near_integrable.json", json.dumps(dict(bodies=args.bodies, rows=rows), indent=1)),
                       (out / "near_integrable.md", "\n".join(lines) + "\n")):
        with atomic(path) as tmp:  # nothing half-written on an interrupt
            tmp.write_text(text)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
