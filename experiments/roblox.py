"""The Roblox article's convergence and energy-change maps (Mizerski 2020).

Convergence maps: T-handle ``I = diag(2.5, 1.4, 1.3)``, ``dt = 1``, ``L = (x, y, 0)`` on
``[-15, 15]^2``, at most 10 iterations, converged when ``|dv| < 1e-6``, ``v0 = 0`` (the world
trapezoid from its explicit predictor ``v0 = I^-1 l``). Grey = iterations, yellow = not
converged; the red circle is the Kantorovich disc ``|L| <= 0.8284 J_min / dt``.
Energy-change map: relative energy change after total time 1 of the Kantorovich-sub-stepped
midpoint, ``L`` on ``[-50, 50]^2``. The full run also times a 1024 x 1024 Newton map.

Writes figures/roblox_convergence.png, figures/roblox_energy.png, figures/roblox.{json,md}.
"""

from __future__ import annotations

import time

import jax
import numpy as np

from jaxrot import RigidBody, maps
from jaxrot.integrators import KANTOROVICH_X
from jaxrot.present.plotting import convergence_maps_figure, scalar_map_figure

from ._common import md_table, setup, write_json

J = np.array([2.5, 1.4, 1.3])
CASES = [("midpoint, fixed point", "midpoint", "fixed_point", "zero"),
         ("midpoint, Newton", "midpoint", "newton", "zero"),
         ("object-space trapezoid, Newton", "trapezoid_object", "newton", "zero"),
         ("world-space trapezoid, Newton (v0 = I^-1 l)", "trapezoid_world", "newton", "explicit")]


def _plane(half: float, n: int):
    x = np.linspace(-half, half, n)
    X, Y = np.meshgrid(x, x)
    return x, np.stack([X, Y, np.zeros_like(X)], -1)


def main(quick: bool = False, out_dir=None) -> dict:
    out = setup(out_dir, quick)
    n_conv, n_energy = (31, 11) if quick else (121, 41)
    x, ells = _plane(15.0, n_conv)
    conv, rows = {}, []
    for label, rule, solver, guess in CASES:
        it = maps.convergence_map(rule, J, ells, solver=solver, guess=guess, tol=1e-6, max_iters=10)
        conv[label] = it
        ok = it >= 0
        rows.append([label, f"{100 * ok.mean():.1f}%", f"{it[ok].mean():.2f}" if ok.any() else "-"])
        print(f"  {label}: {rows[-1][1]} of the plane converged", flush=True)
    disc = KANTOROVICH_X * J.min()
    fig = convergence_maps_figure(x, conv, max_iters=10, disc_radius=disc)
    fig.savefig(out / "roblox_convergence.png", dpi=110)

    xe, Ls = _plane(50.0, n_energy)
    body = RigidBody(J)
    dE = maps.energy_change_map("midpoint_exp_adaptive", body, Ls, t_total=1.0, n_steps=1)
    dE_ostr = maps.energy_change_map("trapezoid_object", body, Ls, t_total=1.0, n_steps=1)
    fig = scalar_map_figure(xe, 100 * np.abs(dE), label="|energy change| after t = 1 (%)",
                            title="Kantorovich-sub-stepped implicit midpoint, T-handle")
    fig.savefig(out / "roblox_energy.png", dpi=110)
    result = {"quick": quick, "grid": n_conv, "converged_fraction": {k: float((v >= 0).mean()) for k, v in conv.items()},
              "mean_iterations": {k: float(v[v >= 0].mean()) for k, v in conv.items() if (v >= 0).any()},
              "kantorovich_disc_radius": disc,
              "energy_grid": n_energy, "energy_change_max_pct": float(np.nanmax(np.abs(dE)) * 100),
              "energy_change_median_pct": float(np.nanmedian(np.abs(dE)) * 100),
              "energy_change_failed_points": int(np.isnan(dE).sum()),
              "ostr_energy_change_max": float(np.nanmax(np.abs(dE_ostr)))}
    if not quick:
        _, big = _plane(15.0, 1024)
        maps.convergence_map("midpoint", J, big[:8], solver="newton")  # compile at the chunk size
        t0 = time.perf_counter()
        it = maps.convergence_map("midpoint", J, big, solver="newton")
        result["map_1024_seconds"] = time.perf_counter() - t0
        result["map_1024_converged_fraction"] = float((it >= 0).mean())
        result["devices"] = [str(d) for d in jax.local_devices()]
    text = md_table(["solver (T-handle, dt = 1, |L| <= 15)", "converged", "mean iterations"], rows)
    text += (f"\n\nKantorovich disc |L| <= {disc:.3f}. Energy change of the sub-stepped midpoint on "
             f"[-50, 50]^2 ({n_energy}^2): max {result['energy_change_max_pct']:.3f}%, median "
             f"{result['energy_change_median_pct']:.4f}%; object-space trapezoid: max "
             f"{result['ostr_energy_change_max']:.1e} (exact).\n")
    if "map_1024_seconds" in result:
        text += f"\n1024 x 1024 Newton map: {result['map_1024_seconds']:.1f} s on {result['devices']}.\n"
    print(text)
    (out / "roblox.md").write_text(text)
    write_json(out / "roblox.json", result)
    return result
