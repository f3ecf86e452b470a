"""Postma & Nerbonne's "Books in space" (Groningen 2011): the eight-particle spring book beside
the rigid-body methods of the slides.

1. The book (0.2 x 1.0 x 1.5, unit masses; the slides give no size) spun near each principal axis:
   stable about the largest and smallest moments, flipping about the intermediate one, in the
   particle model (velocity Verlet, k/m = 2000) and with ``euler_svd``, ``euler_quat`` and
   ``buss2p`` on the rigid body of the same 8 point masses. The first flip times are compared.
2. The printed explicit Euler of the particle model: energy explodes; with the energy
   normalisation the energy is exact but the angular momentum drains into vibration.
3. The slides' question "what if you change the spring constant?": a sweep over k/m (vmapped),
   with the printed Euler + normalisation, measuring when the rotation has turned into vibration
   (|L| below half) and how much the shape distorts (largest spring strain) before then.
4. The slides' inertia convention ``R^T I_b R`` as printed: its error does not shrink with dt.

Writes ``groningen.{json,md}``, ``groningen_axes.png``, ``groningen_energy.png``,
``groningen_springs.png`` and ``book.gif``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxrot import Problem, RigidBody, SaveAt, analysis, particles, reference, simulate, torques
from jaxrot.present.animation import animate_bodies
from jaxrot.integrators import EulerSVDPrinted
from jaxrot.present.plotting import series_panels_figure

from ._common import md_table, setup, write_json

AXES = {"x (largest J, stable)": 0, "y (intermediate J, flips)": 1, "z (smallest J, stable)": 2}
RIGID = ["euler_svd", "euler_quat", "buss2p"]


def spin_rate(axis: int, rate: float = 3.0, wobble: float = 0.01) -> np.ndarray:
    w = np.zeros(3)
    w[axis] = rate
    w[(axis + 1) % 3] = wobble * rate
    return w


def main(quick: bool = False, out_dir=None) -> dict:
    out = setup(out_dir, quick)
    book = particles.SpringBook.cuboid(0.2, 1.0, 1.5, k_over_m=2000.0)
    body = book.rigid_body()
    T = 6.0 if quick else 12.0
    dt_p = 2e-4
    n_p = int(round(T / dt_p))
    save = 100
    result: dict = {"quick": quick, "J_rigid": np.asarray(body.J).tolist(), "k_over_m": 2000.0}

    # 1. stable / unstable axes, particle model beside the rigid-body methods
    panels, flips = {}, {}
    for label, a in AXES.items():
        w = spin_rate(a)
        s0 = particles.spin(book, jnp.asarray(w))
        tr = particles.simulate_particles(book, s0, dt_p, n_p, save_every=save, scheme="verlet")
        ts = np.asarray(tr.ts)
        curves = {"particles (Verlet)": np.asarray(particles.axis_momentum_cosine(book, tr.states.X, tr.states.V, a))}
        flips[label] = {"particles (Verlet)": analysis.first_sign_change(ts, curves["particles (Verlet)"])}
        p = Problem(body, torques.FreeTorque(), State0(body, w), T)
        dt_r = 1e-3
        for m in RIGID:
            trr = simulate(m, p, dt_r, int(round(T / dt_r)), saveat=SaveAt(steps=20))
            c = np.asarray(analysis.body_axis_momentum_cosine(trr.states, a))
            curves[m] = np.interp(ts, np.asarray(trr.ts), c)
            flips[label][m] = analysis.first_sign_change(np.asarray(trr.ts), c)
        panels[f"cos(body {label.split()[0]} axis, L): {label.split('(')[1].rstrip(')')}"] = curves
        if a == 1:  # the flip, animated: particle book beside the rigid body (buss2p)
            every = max(1, len(ts) // (20 if quick else 100))
            Lw = np.asarray(particles.angular_momentum(book, tr.states))[::every]
            anim = [{"title": "8 particles, 28 springs", "X": np.asarray(tr.states.X)[::every], "L": Lw,
                     "springs": particles.SPRINGS},
                    {"title": "rigid body (buss2p)", "R": _resample(trr, ts)[::every], "L": Lw, "shape": "box"}]
    mid = next(v for k, v in flips.items() if "intermediate" in k)
    first = ", ".join(f"{k.split(' ')[0]} {v:.2f} s" for k, v in mid.items() if v is not None)
    fig = series_panels_figure(ts, panels, xlabel="t (s)",
                               title="book spun about each principal axis: the intermediate axis flips\n"
                                     f"first flip: {first}; later flips drift apart (the springs vibrate)")
    fig.savefig(out / "groningen_axes.png", dpi=110)
    animate_bodies(anim, out / "book.gif", dpi=80, title="book spun about its intermediate axis (red: L)")
    result["first_flip"] = flips

    # 2. the printed Euler: explosion without normalisation, rotation draining into vibration with it
    w = spin_rate(1)
    s0 = particles.spin(book, jnp.asarray(w))
    T2 = 4.0 if quick else 10.0
    n2 = int(round(T2 / dt_p))
    E_curves, L_curves = {}, {}
    for name, scheme, norm in [("printed Euler", "euler", False), ("printed Euler + normalisation", "euler", True),
                               ("velocity Verlet", "verlet", False)]:
        tr = particles.simulate_particles(book, s0, dt_p, n2, save_every=save, scheme=scheme, normalize=norm)
        E = np.asarray(particles.energy(book, tr.states))
        L = np.linalg.norm(np.asarray(particles.angular_momentum(book, tr.states)), axis=-1)
        E_curves[name], L_curves[name] = E / E[0], L / L[0]
    ts2 = np.asarray(tr.ts)
    fig = series_panels_figure(ts2, {"energy E / E0": E_curves, "angular momentum |L| / |L0|": L_curves},
                               xlabel="t (s)", logy=("energy E / E0",),
                               title="particle book, dt = 2e-4: the printed Euler explodes; normalised, its "
                                     "rotation turns into vibration")
    fig.savefig(out / "groningen_energy.png", dpi=110)
    result["euler"] = {k: {"E_end": float(E_curves[k][-1]), "L_end": float(L_curves[k][-1])} for k in E_curves}

    # 3. spring constant sweep (vmapped over k/m), printed Euler + normalisation
    ks = np.array([2000.0, 4000.0, 8000.0]) if quick else np.array([250.0, 500.0, 1000.0, 2000.0, 4000.0, 8000.0])
    T3 = 4.0 if quick else 20.0
    n3 = int(round(T3 / dt_p))

    def run(k):
        b = particles.SpringBook(book.X_rest, k_over_m=k)
        tr = particles.simulate_particles(b, particles.spin(b, jnp.asarray(w)), dt_p, n3, save_every=save,
                                          scheme="euler", normalize=True)
        L = jnp.linalg.norm(particles.angular_momentum(b, tr.states), axis=-1)
        d = particles._pair_lengths(tr.states.X)
        strain = jnp.max(jnp.abs(d / b.rest_lengths() - 1.0), axis=-1)
        return tr.ts, L / L[0], strain

    ts3, Lk, strain = jax.vmap(run)(jnp.asarray(ks))
    ts3, Lk, strain = np.asarray(ts3[0]), np.asarray(Lk), np.asarray(strain)
    sweep = []
    for i, k in enumerate(ks):
        below = np.nonzero(Lk[i] < 0.5)[0]
        t_half = float(ts3[below[0]]) if len(below) else None
        upto = below[0] if len(below) else len(ts3)
        sweep.append({"k_over_m": float(k), "t_L_half": t_half, "max_strain": float(strain[i, :max(upto, 1)].max())})
    fig = series_panels_figure(ts3, {"angular momentum |L| / |L0|": {f"k/m = {k:g}": Lk[i] for i, k in enumerate(ks)},
                                     "largest spring strain |d/d0 - 1|": {f"k/m = {k:g}": strain[i]
                                                                          for i, k in enumerate(ks)}},
                               xlabel="t (s)", logy=("largest spring strain |d/d0 - 1|",),
                               title="spring constant sweep (printed Euler + energy normalisation)")
    fig.savefig(out / "groningen_springs.png", dpi=110)
    result["spring_sweep"] = sweep

    # 4. the printed inertia convention does not converge
    p = Problem(body, torques.FreeTorque(), State0(body, spin_rate(0, wobble=0.3)), 2.0)
    ref = reference.reference_solution(p, 2.0).final
    neg = []
    for n in (200, 400, 800, 1600):
        good = analysis.final_error(simulate("euler_svd", p, 2.0 / n, n, saveat=SaveAt(steps=n)).final, ref)
        bad = analysis.final_error(simulate(EulerSVDPrinted(), p, 2.0 / n, n, saveat=SaveAt(steps=n)).final, ref)
        neg.append({"n": n, "euler_svd": float(good), "printed_R^T I R": float(bad)})
    result["printed_inertia"] = neg

    text = ["Groningen book 0.2 x 1.0 x 1.5, unit masses, rigid counterpart J = "
            f"{np.round(np.asarray(body.J), 3).tolist()} (x, y, z).", "",
            "First flip time (s) of the body axis against L (spin 3 rad/s, 1% wobble; '-' = none):", "",
            md_table(["spin axis"] + list(next(iter(flips.values()))),
                     [[lab] + ["-" if v is None else f"{v:.3f}" for v in f.values()] for lab, f in flips.items()]),
            "", "Printed Euler of the particle model, intermediate-axis spin, end of run:", "",
            md_table(["scheme", "E_end / E0", "‖L‖_end / ‖L0‖"],
                     [[k, f"{v['E_end']:.3g}", f"{v['L_end']:.3g}"] for k, v in result["euler"].items()]),
            "", "Spring constant sweep (printed Euler + normalisation):", "",
            md_table(["k/m", "time until ‖L‖ < ‖L0‖/2 (s)", "largest strain before then"],
                     [[s["k_over_m"], "-" if s["t_L_half"] is None else f"{s['t_L_half']:.2f}",
                       f"{s['max_strain']:.3g}"] for s in sweep]),
            "", "The slides' inertia convention R^T I_b R (final attitude error, T = 2):", "",
            md_table(["N", "euler_svd", "printed R^T I_b R"],
                     [[r["n"], f"{r['euler_svd']:.3g}", f"{r['printed_R^T I R']:.3g}"] for r in neg]), ""]
    text = "\n".join(text)
    print(text)
    (out / "groningen.md").write_text(text)
    write_json(out / "groningen.json", result)
    return result


def _resample(trr, ts):
    """Attitudes of a rigid trajectory at the particle frames' times (nearest saved frame)."""
    idx = np.clip(np.searchsorted(np.asarray(trr.ts), ts), 0, len(trr.ts) - 1)
    return np.asarray(trr.states.R)[idx]


def State0(body, w):
    from jaxrot import State

    return State(jnp.eye(3, dtype=jnp.float64), body.J * jnp.asarray(w))
