"""The ``jaxrot`` command: ``list``, ``run``, ``reproduce NAME``, ``bench``."""

from __future__ import annotations

import argparse
import importlib
import sys

EXPERIMENTS = {
    "buss": "experiments.buss_table",
    "buss_orders": "experiments.buss_orders",
    "dancing_pole": "experiments.dancing_pole",
    "dzhanibekov": "experiments.dzhanibekov",
    "groningen": "experiments.groningen",
    "fit": "experiments.fit_inertia",
    "krysl": "experiments.krysl",
    "roblox": "experiments.roblox",
}
BENCHMARKS = {"buss": "experiments.bench_buss"}


def _list(args) -> int:
    from jaxrot.integrators import REGISTRY

    rows = [
        (i.name, str(i.order), ",".join(i.conserves) or "-", "implicit" if i.implicit else "explicit",
         i.torque_evals, "yes" if i.torque else "free only", i.reference)
        for i in REGISTRY.values()
    ]
    head = ("method", "order", "exact (no torque)", "kind", "torque evals/step", "torque", "reference")
    if args.markdown:
        print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
        for r in rows:
            print("| " + " | ".join(c.replace("|", "\\|") for c in r) + " |")  # "|Pi|" inside a cell
        return 0
    w = [max(len(r[k]) for r in rows + [head]) for k in range(len(head))]
    for r in [head] + rows:
        print("  ".join(c.ljust(w[k]) for k, c in enumerate(r)).rstrip())
    print("\nexact: L = world angular momentum, |Pi| = body momentum norm, E = energy")
    return 0


def _run(args) -> int:
    import jax

    jax.config.update("jax_enable_x64", True)
    import numpy as np

    import jaxrot
    from jaxrot import analysis, problems, reference

    p = problems.get(args.problem)
    n = args.steps
    save = args.save_every or max(1, n // 200)
    if n % save:
        save = 1
    traj = jaxrot.simulate(args.method, p, args.dt, n, save_every=save, progress=args.progress)
    T = args.dt * n
    E = np.asarray(analysis.energy(p, traj.states, traj.ts))
    L = np.asarray(traj.states.L)
    ref = reference.reference_solution(p, T, n_frames=n // save)
    err = np.asarray(analysis.attitude_error(traj.states.R, ref.states.R))
    print(f"{args.method} on {p.name}: dt={args.dt}, {n} steps, t_end={T:g}")
    print(f"  relative energy drift   max|E-E0|/|E0| = {np.abs(E - E[0]).max() / abs(E[0]):.3e}")
    print(f"  world momentum drift    max|L-L0|/|L0| = {np.abs(L - L[0]).max() / np.linalg.norm(L[0]):.3e}"
          + ("   (a torque acts: L is not conserved)" if not p.torque.is_free else ""))
    print(f"  attitude error vs reference: final {err[-1]:.3e} rad, max {err.max():.3e} rad")
    print(f"  orthogonality error max|R^T R - 1| = {float(analysis.orthogonality_error(traj.states.R).max()):.2e}")
    if int(traj.stats.newton_iters.max()) > 0:
        print(f"  Newton iterations per step: max {int(traj.stats.newton_iters.max())}")
    if args.plot:
        from jaxrot.plotting import series_figure

        ts = np.asarray(traj.ts)
        fig = series_figure(ts, {"(E - E0)/|E0|": (E - E[0]) / abs(E[0]), "attitude error (rad)": err},
                            ylabel="value", title=f"{args.method} on {p.name}, dt={args.dt}", logy=True)
        fig.savefig(args.plot, dpi=120)
        print(f"  wrote {args.plot}")
    return 0


_PROTOCOL_ARGS = {"tilt": "tilt_deg", "towards": "towards", "eps": "eps", "metric": "metric",
                  "revolutions": "revolutions", "axis_map": "axis_map"}


def _reproduce(args) -> int:
    mod = importlib.import_module(EXPERIMENTS[args.name])
    given = {field: getattr(args, a) for a, field in _PROTOCOL_ARGS.items() if getattr(args, a) is not None}
    if args.name != "buss":
        if given:
            raise ValueError(f"--{', --'.join(a.replace('_', '-') for a, f in _PROTOCOL_ARGS.items() if f in given)}"
                             f" only apply to 'reproduce buss'")
        mod.main(quick=args.quick, out_dir=args.out)
        return 0
    from jaxrot.buss_benchmark import PrismProtocol

    mod.main(quick=args.quick, out_dir=args.out, protocol=PrismProtocol(**given))
    return 0


def _animate(args) -> int:
    import jax

    jax.config.update("jax_enable_x64", True)
    import numpy as np

    import jaxrot
    from jaxrot import problems
    from jaxrot.animation import animate_bodies, shape_for

    out = args.out
    if not out.lower().endswith(".gif"):
        raise ValueError(f"--out must end in .gif, got {out!r}")
    if args.frames < 2 or args.steps < 1 or args.dt <= 0:
        raise ValueError("need --frames >= 2, --steps >= 1 and --dt > 0")
    p = problems.get(args.problem)
    methods = [args.method] + (args.compare or [])
    for m in methods:
        jaxrot.integrators.info(m)  # unknown names fail before any computation
    save = max(1, args.steps // args.frames)
    n = save * (args.steps // save)
    panels = []
    for m in methods:
        tr = jaxrot.simulate(m, p, args.dt, n, save_every=save, throw=False)
        panels.append({"title": m, "R": np.asarray(tr.states.R), "L": np.asarray(tr.states.L),
                       "shape": shape_for(p.name)})
    animate_bodies(panels, out, fps=args.fps, title=f"{p.name}, dt = {args.dt:g}, {n} steps")
    print(f"wrote {out}")
    return 0


def _bench(args) -> int:
    mod = importlib.import_module(BENCHMARKS[args.name])
    mod.main(quick=args.quick, out_dir=args.out)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="jaxrot", description="Accurate rigid-body rotation integrators in JAX.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("list", help="the registered methods with their properties")
    p.add_argument("--markdown", action="store_true")
    p.set_defaults(fn=_list)
    p = sub.add_parser("run", help="simulate one method on one named problem and report drifts and errors")
    p.add_argument("method")
    p.add_argument("problem")
    p.add_argument("--dt", type=float, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--save-every", type=int, default=0)
    p.add_argument("--plot", metavar="PNG", help="write energy and attitude error over time")
    p.add_argument("--progress", action="store_true")
    p.set_defaults(fn=_run)
    p = sub.add_parser("reproduce", help="run an experiment that reproduces a source document's table/figure")
    p.add_argument("name", choices=sorted(EXPERIMENTS))
    p.add_argument("--quick", action="store_true", help="a small version (CI)")
    p.add_argument("--out", default=None,
                   help="output folder (default: ./figures; a --quick run writes to a new temporary folder)")
    g = p.add_argument_group("protocol of 'reproduce buss' (defaults: the inferred protocol, see README)")
    g.add_argument("--tilt", type=float, help="angle of the initial rate from the long axis, degrees (0.7)")
    g.add_argument("--towards", choices=["x", "y"], help="short axis the rate is tilted towards (x)")
    g.add_argument("--eps", type=float, help="accuracy threshold (1e-4; the talk says 1e-6)")
    g.add_argument("--metric", choices=["angle", "R2", "Pi2", "Pi_rel"], help="final-time error measure (angle)")
    g.add_argument("--revolutions", type=float, help="span as integral |omega| dt / 2 pi (45.25)")
    g.add_argument("--axis-map", dest="axis_map", help="our axes for Buss's body axes 1,2,3 (yzx)")
    p.set_defaults(fn=_reproduce)
    p = sub.add_parser("animate", help="an animated GIF of a body tumbling, several methods side by side")
    p.add_argument("method")
    p.add_argument("problem")
    p.add_argument("--compare", nargs="*", metavar="METHOD", help="more methods, drawn beside the first")
    p.add_argument("--dt", type=float, default=0.01)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--frames", type=int, default=80)
    p.add_argument("--fps", type=int, default=20)
    p.add_argument("--out", default="animation.gif", help="output .gif (default animation.gif)")
    p.set_defaults(fn=_animate)
    p = sub.add_parser("bench", help="throughput benchmarks")
    p.add_argument("name", nargs="?", default="buss", choices=sorted(BENCHMARKS))
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default=None)
    p.set_defaults(fn=_bench)
    args = ap.parse_args(argv)
    try:
        return args.fn(args)
    except (ValueError, KeyError) as e:
        print(f"jaxrot: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
