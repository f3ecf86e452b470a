"""The Dzhanibekov effect and Poinsot's picture (Chern's lecture; the Roblox article's T-handle).

* The T-handle (J = (2.5, 1.4, 1.3)) spun near its intermediate (y) axis flips every half period of
  its body momentum. Flip times from simulations (sign changes of Pi_y) against the analytic
  half-period ``T/2 = 2 K(m) sqrt(...)`` from the complete elliptic integral (``jaxrot.exact``).
* Poinsot: the momentum sphere ``|Pi| = |L|`` with polhodes (its intersections with energy
  ellipsoids) for several energies, the separatrix, and the body-momentum paths of a few methods:
  ``buss1`` gains energy and drifts across polhodes, ``buss3_ep`` and ``dmv`` stay on theirs.

Writes ``dzhanibekov.{json,md,png}``, ``poinsot.png`` and ``t_handle.gif``.
"""

from __future__ import annotations

import numpy as np

from jaxrot import SaveAt, analysis, exact, problems, reference, simulate
from jaxrot.present.animation import animate_bodies
from jaxrot.present.plotting import flip_figure, poinsot_figure

from ._common import md_table, setup, write_json

METHODS = ["buss2p", "buss4", "buss3_ep", "dmv", "liemid_ea", "rk4", "euler_svd"]
POINSOT_METHODS = ["buss1", "buss3_ep", "dmv"]


def main(quick: bool = False, out_dir=None) -> dict:
    out = setup(out_dir, quick)
    p = problems.get("t_handle")
    J = np.asarray(p.body.J)
    T, m = (float(x) for x in exact.free_body_period(p.body.J, p.state0.Pi))
    half = T / 2
    span = (3.2 if quick else 8.2) * half
    dt = 0.01 if quick else 0.005
    n = int(round(span / dt))
    print(f"T-handle J = {J}, Pi0 = {np.asarray(p.state0.Pi)}: analytic period of Pi {T:.6f} "
          f"(m = {m:.6f}), flip every {half:.6f}", flush=True)

    ref = reference.reference_solution(p, n * dt, n_frames=n)
    flips = {"reference (DOP853)": analysis.sign_change_times(ref.ts, ref.states.Pi[:, 1])}
    series = {"reference (DOP853)": (np.asarray(ref.ts), np.asarray(ref.states.Pi[:, 1]))}
    frames = {}
    n_anim = int(2.2 * half / dt)  # two flips
    every = max(1, n_anim // (20 if quick else 110))
    for meth in METHODS:
        tr = simulate(meth, p, dt, n, saveat=SaveAt(steps=1), throw=False)
        frames[meth] = {"title": meth, "R": np.asarray(tr.states.R)[:n_anim:every],
                        "L": np.asarray(tr.states.L)[:n_anim:every], "shape": "t_handle"}
        flips[meth] = analysis.sign_change_times(tr.ts, tr.states.Pi[:, 1])
        series[meth] = (np.asarray(tr.ts), np.asarray(tr.states.Pi[:, 1]))

    rows, result_flips = [], {}
    for name, tf in flips.items():
        gaps = np.diff(tf)
        mean_gap = float(gaps.mean()) if len(gaps) else float("nan")
        err = abs(mean_gap / half - 1)
        result_flips[name] = {"flip_times": tf.tolist(), "mean_interval": mean_gap, "rel_error": err}
        rows.append([name, len(tf), f"{tf[0]:.4f}" if len(tf) else "-", f"{mean_gap:.5f}", f"{100 * err:.3f}%"])
    text = (f"T-handle, dt = {dt}, {n} steps. Analytic flip interval T/2 = {half:.5f} (complete elliptic "
            f"integral K(m), m = {m:.6f}).\n\n"
            + md_table(["method", "flips", "first flip", "mean interval", "error vs T/2"], rows) + "\n")
    print(text)
    (out / "dzhanibekov.md").write_text(text)
    fig = flip_figure(series, half, title=f"Dzhanibekov flips of the T-handle (dt = {dt}): "
                                          f"analytic interval T/2 = {half:.3f}")
    fig.savefig(out / "dzhanibekov.png", dpi=110)
    animate_bodies([frames["buss4"], frames["euler_svd"]], out / "t_handle.gif", dpi=80,
                   title="T-handle near its intermediate axis: two flips (red: angular momentum)")

    # Poinsot: polhodes on the momentum sphere, a few methods at a coarse step
    L = float(np.linalg.norm(np.asarray(p.state0.Pi)))
    energies = np.linspace(L**2 / (2 * J.max()), L**2 / (2 * J.min()), 11)[1:-1]
    polhodes = _polhodes(J, L, energies)
    n_p = 400 if quick else 2000
    paths = {}
    Pi_start = np.array([0.75, 1.4, 1.56])  # between the separatrix and the smallest-moment axis
    Pi_start *= L / np.linalg.norm(Pi_start)
    for meth in POINSOT_METHODS:
        q = problems.t_handle(omega0=tuple(Pi_start / J), t_end=40.0)
        tr = simulate(meth, q, 0.1, n_p, saveat=SaveAt(steps=1), throw=False)
        paths[meth] = np.asarray(tr.states.Pi)
    fig = poinsot_figure(J, L, polhodes, paths,
                         title="body momentum on the momentum sphere |Pi| = |L|: polhodes (grey), "
                               "separatrix (black), methods at dt = 0.1")
    fig.savefig(out / "poinsot.png", dpi=110)
    drift = {m_: float(abs(0.5 * np.sum(x[-1] ** 2 / J) / (0.5 * np.sum(x[0] ** 2 / J)) - 1)) for m_, x in paths.items()}

    result = {"quick": quick, "J": J.tolist(), "Pi0": np.asarray(p.state0.Pi).tolist(), "period": T, "m": m,
              "half_period": half, "dt": dt, "n_steps": n, "flips": result_flips,
              "poinsot_energy_drift": drift}
    write_json(out / "dzhanibekov.json", result)
    return result


def _polhodes(J, L, energies, n: int = 400):
    """Polhodes as point lists: reference trajectories over one period for each energy."""
    import jax.numpy as jnp

    from jaxrot import Problem, RigidBody, State, torques

    out = []
    body = RigidBody(jnp.asarray(J))
    for E in energies:
        # a start on the sphere with energy E, in the plane of the largest and smallest axes
        i_max, i_min = int(np.argmax(J)), int(np.argmin(J))
        # Pi = L (cos a e_max + sin a e_min): 2E = L^2 (cos^2/Jmax + sin^2/Jmin)
        s2 = (2 * E / L**2 - 1 / J[i_max]) / (1 / J[i_min] - 1 / J[i_max])
        a = np.arcsin(np.sqrt(np.clip(s2, 0.0, 1.0)))
        Pi0 = np.zeros(3)
        Pi0[i_max], Pi0[i_min] = L * np.cos(a), L * np.sin(a)
        T, _ = exact.free_body_period(J, Pi0)
        q = Problem(body, torques.FreeTorque(), State(jnp.eye(3), jnp.asarray(Pi0)), float(T))
        tr = reference.reference_solution(q, float(T), n_frames=n)
        x = np.asarray(tr.states.Pi)
        out += [x, -x]  # the polhode and its mirror image (the other branch)
    return out
