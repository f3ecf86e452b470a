"""The ``jaxrot`` command: ``list``, ``run``, ``reproduce NAME``, ``bench``, ``fit FILE.csv``."""

from __future__ import annotations

import argparse
import importlib
import math
import os
import signal
import sys
import threading

from . import cache, fit_command, interrupts, output

EXPERIMENTS = {
    "buss": "jaxrot.experiments.buss_table",
    "buss_orders": "jaxrot.experiments.buss_orders",
    "dancing_pole": "jaxrot.experiments.dancing_pole",
    "dzhanibekov": "jaxrot.experiments.dzhanibekov",
    "groningen": "jaxrot.experiments.groningen",
    "fit": "jaxrot.experiments.fit_inertia", "identify": "jaxrot.experiments.identify",
    "krysl": "jaxrot.experiments.krysl",
    "roblox": "jaxrot.experiments.roblox",
}
BENCHMARKS = {"buss": "jaxrot.experiments.bench_buss", "throughput": "jaxrot.experiments.bench_throughput",
              "precision": "jaxrot.experiments.bench_precision", "unseen": "jaxrot.experiments.bench_unseen",
              "heterogeneous": "jaxrot.experiments.bench_heterogeneous"}


def _list(args) -> int:
    if args.what == "problems":
        from jaxrot import problems

        for name in problems.PROBLEMS:
            p = problems.get(name)
            print(f"{name:24s} {p.description} (t_end = {p.t_end:g}{', torque-free' if p.torque.is_free else ''})")
        return 0
    from jaxrot.integrators import REGISTRY
    from jaxrot.kernels import KERNELS  # (the tables only: Warp is not imported)

    rows = [
        (i.name, str(i.order), ",".join(i.conserves) or "-", "implicit" if i.implicit else "explicit",
         i.torque_evals, "yes" if i.torque else "free only", "yes" if i.name in KERNELS else "-",
         "yes" if i.error_order is not None else "-", i.reference)  # (a pair's attempt is generated)
        for i in REGISTRY.values()
    ]
    head = ("method", "order", "exact (no torque)", "kind", "torque evals/step", "torque", "fixed-step kernel",
            "adaptive kernel", "reference")
    if args.markdown:
        print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
        for r in rows:
            print("| " + " | ".join(c.replace("|", "\\|") for c in r) + " |")  # "|Pi|" inside a cell
        return 0
    w = [max(len(r[k]) for r in rows + [head]) for k in range(len(head))]
    for r in [head] + rows:
        print("  ".join(c.ljust(w[k]) for k, c in enumerate(r)).rstrip())
    print("\nexact: L = world angular momentum, |Pi| = body momentum norm, E = energy; kernels: run fused, "
          "with or without an event (executor=jaxrot.Fused(), pip install 'jaxrot[fast]'; docs/kernels.md)")
    return 0


def _check_out_path(path: str | None, option: str, suffixes: tuple[str, ...]) -> str | None:
    """Fail before any computation when an output file cannot be written; returns the path with
    ``~`` expanded (the one to write)."""
    if path is None:
        return None
    if not path.lower().endswith(suffixes):
        raise ValueError(f"{option} must end in {' or '.join(suffixes)}, got {path!r}")
    output.check_file(path, option)
    return os.path.expanduser(path)


def _check_run_args(args) -> int:
    """Every argument of ``run`` checked before anything is compiled; returns save_every."""
    from jaxrot import integrators, problems

    if args.problem not in problems.PROBLEMS:
        problems.get(args.problem)  # the helpful KeyError
    # the output paths before the suggestion's trial runs
    args.plot = _check_out_path(args.plot, "--plot", (".png", ".pdf", ".svg"))
    args.save = _check_out_path(args.save, "--save", (".npz",))
    if args.tol is not None or args.method == "auto":
        _choose(args, problems.get(args.problem))
    integrators.info(args.method)
    if args.steps is None or args.dt is None:
        raise ValueError("run needs --dt and --steps (or METHOD 'auto' with --tol)")
    if args.steps < 1:
        raise ValueError(f"--steps must be >= 1, got {args.steps}")
    if not math.isfinite(args.dt) or args.dt <= 0:
        raise ValueError(f"--dt must be finite and > 0, got {args.dt}")
    save = args.save_every if args.save_every is not None else _default_save_every(args.steps)
    if save < 1 or args.steps % save:
        raise ValueError(f"--save-every {save} does not divide --steps {args.steps} (it must be >= 1 and divide it)")
    if args.save_every is None and args.steps // save < 200 and args.steps > 200:
        print(f"note: keeping {args.steps // save + 1} frames (every {save} steps): {args.steps} has no divisor "
              f"giving 200-{MAX_FRAMES} frames; pass --save-every to choose", flush=True)
    return save


#: ``jaxrot run`` reports progress from this many steps on (``--progress`` for any run)
LONG_RUN_STEPS = 100_000
#: the most frames ``jaxrot run`` keeps unless --save-every asks for more
MAX_FRAMES = 10_000


def _choose(args, problem) -> None:
    """``run auto PROBLEM --tol TOL``: the method and its steps from :func:`jaxrot.suggest`."""
    from jaxrot.studies.suggest import suggest

    if args.method != "auto" or args.tol is None:
        raise ValueError("--tol chooses the method: run it as 'jaxrot run auto PROBLEM --tol TOL'")
    if args.dt is not None or args.steps is not None:
        raise ValueError("--tol sets the steps itself: leave out --dt and --steps")
    s = suggest(problem, args.tol)
    print(f"suggested for tol {args.tol:g}: {s.method} ({s.reason})", flush=True)
    args.method, args.executor = s.method, s.executor
    T = float(problem.t_end)
    if s.method == "exact_free":  # exact at any step: 200 of them give the report its frames
        args.steps, args.dt = 200, T / 200
    else:
        args.steps = max(1, round(T / s.dt))
        args.dt = T / args.steps


def _default_save_every(n: int) -> int:
    """The largest divisor of n that leaves at least 200 frames (1 for short runs), or, where that
    would keep more than :data:`MAX_FRAMES` (a step count with no suitable divisor, e.g. a prime),
    the smallest divisor that keeps at most that many."""
    d = max(d for d in range(1, max(1, n // 200) + 1) if n % d == 0)
    if n // d <= MAX_FRAMES:
        return d
    return min(d for d in range(1, n + 1) if n % d == 0 and n // d <= MAX_FRAMES)


def _run(args) -> int:
    import jax

    jax.config.update("jax_enable_x64", True)  # before the checks: --tol's suggestion is sized for this type
    save = _check_run_args(args)
    import numpy as np

    import jaxrot
    from jaxrot import analysis, problems, reference
    from jaxrot.driver.failures import codes_of, name_of

    p = problems.get(args.problem)
    n = args.steps
    # a progress report splits the run into more calls: worth it for long runs only
    show = not args.quiet and (args.progress or n >= LONG_RUN_STEPS)
    traj = jaxrot.simulate(args.method, p, args.dt, n, saveat=jaxrot.SaveAt(steps=save), progress=show,
                           throw=not args.no_throw,
                           executor=getattr(args, "executor", None))
    failed = int(traj.failed_step)
    keep = len(traj.ts) if failed < 0 else max(1, (failed - 1) // save + 1)  # frames before the failure
    T = float(traj.ts[keep - 1])
    E = np.asarray(analysis.energy(p, traj.states, traj.ts))[:keep]
    L = np.asarray(traj.states.L)[:keep]
    ref = reference.reference_solution(p, args.dt * n, n_frames=n // save)
    err = np.asarray(analysis.attitude_error(traj.states.R, ref.states.R))[:keep]
    ts = np.asarray(traj.ts)[:keep]
    print(f"{args.method} on {p.name}: dt={args.dt}, {n} steps, t_end={args.dt * n:g}")
    if failed >= 0:
        print(f"  step {failed} failed ({name_of(codes_of(traj.result))}); "
              f"statistics below cover t <= {T:g}")
    print(f"  relative energy drift   max|E-E0|/|E0| = {np.abs(E - E[0]).max() / abs(E[0]):.3e}")
    print(f"  world momentum drift    max|L-L0|/|L0| = {np.abs(L - L[0]).max() / np.linalg.norm(L[0]):.3e}"
          + ("   (a torque acts: L is not conserved)" if not p.torque.is_free else ""))
    print(f"  attitude error vs reference: final {err[-1]:.3e} rad, max {err.max():.3e} rad")
    orth = np.asarray(analysis.orthogonality_error(traj.states.R))[:keep]
    print(f"  orthogonality error max|R^T R - 1| = {orth.max():.2e}")
    if int(traj.stats.newton_iters.max()) > 0:
        print(f"  Newton iterations per step: max {int(traj.stats.newton_iters.max())}")
    if args.plot:
        from jaxrot.present.plotting import series_panels_figure

        def positive(x):  # exact zeros (the first frame) have no place on a log axis: left out, not 1e-300
            return np.where(x > 0, x, np.nan)

        panels = {"relative energy error |E - E0| / |E0|": {args.method: positive(np.abs(E - E[0]) / abs(E[0]))},
                  "attitude error vs reference (rad)": {args.method: positive(err)}}
        fig = series_panels_figure(ts, panels, xlabel="t (time units of the problem)", logy=tuple(panels),
                                   title=f"{args.method} on {p.name}, dt = {args.dt:g}")
        with output.atomic(args.plot) as tmp:
            fig.savefig(tmp, dpi=120)
        print(f"  wrote {args.plot}")
    if args.save:
        with output.atomic(args.save) as tmp:
            traj.save(tmp)
        print(f"  wrote {args.save} (load with jaxrot.load)")
    return 0


def _results_folder(args):
    """The checked output folder of a ``reproduce``/``bench`` command (announced before the run):
    ``--out``, else :data:`~jaxrot.present.output.DEFAULT_OUT`, or a new temporary folder for a
    ``--quick`` run (never over the results of a full one). A folder it creates is removed again
    if the command ends without writing anything into it."""
    if args.out is not None:
        folder = output.prepare(args.out)
    elif args.quick:
        folder = output.temporary_folder(prefix="jaxrot-quick-")
        print(f"quick run: writing to {folder}", flush=True)
        return folder
    else:
        folder = output.prepare(output.DEFAULT_OUT)
    print(f"writing results to {folder}", flush=True)
    return folder


def run_staged(run, folder, args) -> int:
    """``run(out_dir)`` into a staging folder; its files appear in ``folder`` only when it finished,
    each recorded in the folder's ``provenance.json`` with the command that wrote it."""
    from . import provenance

    command = " ".join(["jaxrot", *args.argv])
    with output.staged(folder, lambda files: provenance.record(folder, files, command=command,
                                                                quick=args.quick)) as stage:
        run(stage)
    print(f"done: results in {folder}", flush=True)
    return 0


_PROTOCOL_ARGS = {"tilt": "tilt_deg", "towards": "towards", "eps": "eps", "metric": "metric",
                  "revolutions": "revolutions", "axis_map": "axis_map"}


def _reproduce(args) -> int:
    mod = importlib.import_module(EXPERIMENTS[args.name])
    given = {field: getattr(args, a) for a, field in _PROTOCOL_ARGS.items() if getattr(args, a) is not None}
    if args.name != "buss" and given:
        raise ValueError(f"--{', --'.join(a.replace('_', '-') for a, f in _PROTOCOL_ARGS.items() if f in given)}"
                         f" only apply to 'reproduce buss'")
    if args.name != "buss":
        return run_staged(lambda out: mod.main(quick=args.quick, out_dir=out), _results_folder(args), args)
    from jaxrot.studies.buss_protocol import PrismProtocol

    protocol = PrismProtocol(**given)  # a bad protocol fails before the output folder is made
    return run_staged(lambda out: mod.main(quick=args.quick, out_dir=out, protocol=protocol),
                       _results_folder(args), args)


def _animate(args) -> int:
    import jax

    jax.config.update("jax_enable_x64", True)
    import numpy as np

    import jaxrot
    from jaxrot import problems
    from jaxrot.present.animation import animate_bodies, shape_for

    out = _check_out_path(args.out, "--out", (".gif",))
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
        tr = jaxrot.simulate(m, p, args.dt, n, saveat=jaxrot.SaveAt(steps=save), throw=False)
        panels.append({"title": m, "R": np.asarray(tr.states.R), "L": np.asarray(tr.states.L),
                       "shape": shape_for(p.name)})
    with output.atomic(out) as tmp:
        animate_bodies(panels, tmp, fps=args.fps, title=f"{p.name}, dt = {args.dt:g}, {n} steps")
    print(f"wrote {out}")
    return 0


def _bench(args) -> int:
    kw = {}
    if args.suite:
        if args.name != "precision":
            raise ValueError("--suite is an option of 'bench precision'")
        kw["suite"] = True
    if args.seed is not None:
        if args.name != "unseen":
            raise ValueError("--seed is an option of 'bench unseen'")
        kw["seed"] = args.seed
    if args.device is not None:
        if args.name != "throughput":
            raise ValueError("--device is an option of 'bench throughput'")
        import jax

        if jax.devices()[0].platform != args.device:
            raise ValueError(f"--device {args.device}, but JAX's default device is {jax.devices()[0]}")
        kw["device"] = args.device
    mod = importlib.import_module(BENCHMARKS[args.name])
    return run_staged(lambda out: mod.main(quick=args.quick, out_dir=out, **kw), _results_folder(args), args)


def _problems_epilog() -> str:
    from jaxrot import problems

    lines = [f"  {n:22s} {problems.get(n).description}" for n in problems.PROBLEMS]
    return ("problems:\n" + "\n".join(lines) + "\n\nmethods: 'jaxrot list' prints all "
            "registered methods with order, conserved quantities and reference.")


def main(argv=None) -> int:
    """The ``jaxrot`` command; returns the exit code (130 after Ctrl-C, 143 after SIGTERM, 0 when the
    reader of its output went away, 2 for bad arguments, 1 for a failed simulation).

    Called as the process's command (no ``argv``), it keeps compiled programs in an on-disk cache
    (:mod:`jaxrot.present.cache`); called with ``argv``, JAX's settings are left as they are.

    The command runs in a worker thread (:func:`~jaxrot.present.interrupts.call_interruptibly`), so
    an interrupt is handled at once, also in the middle of a long compiled call. Called as the
    process's command (no ``argv``), an interrupted process ends there without waiting for that call.
    """
    if threading.current_thread() is threading.main_thread() and getattr(signal.getsignal(signal.SIGINT),
                                                                          "jaxrot_loading", False):
        # the handler of the loading time (jaxrot/__init__) ends here: Ctrl-C raises KeyboardInterrupt again
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        code = interrupts.call_interruptibly(_main, argv, argv is None)
        sys.stdout.flush()  # inside the try: a closed pipe shows here, not at exit
        if argv is None:  # done, files written: an interrupt now would only cut the interpreter's exit short
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        return code
    except KeyboardInterrupt as e:
        kept = ", ".join(str(p) for p in output.WRITTEN)
        what = "terminated" if isinstance(e, interrupts.Terminated) else "interrupted"
        print(f"jaxrot: {what}; {'kept ' + kept if kept else 'nothing was written'}", file=sys.stderr)
        code = getattr(e, "exit_code", 130)
        if argv is None:  # the computation may still run in its thread: end the process now
            sys.stdout.flush()
            sys.stderr.flush()
            output.sweep()  # (that thread may have made a staging folder anew since the interrupt)
            os._exit(code)
        return code
    except BrokenPipeError:  # e.g. `jaxrot list | head`: the reader has gone, so stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


def _main(argv=None, as_command: bool = False) -> int:
    from jaxrot import __version__, use_cpu_cores

    argv = list(sys.argv[1:] if argv is None else argv)
    words = [w for w in argv if not w.startswith("-")]
    if words[:2] == ["bench", "throughput"]:
        # every core a CPU device; before anything below (the problem list) starts JAX
        try:
            use_cpu_cores()
        except RuntimeError as e:
            print(f"note: {e}")

    ap = argparse.ArgumentParser(prog="jaxrot", description="Accurate rigid-body rotation integrators in JAX.")
    ap.add_argument("--version", action="version", version=f"jaxrot {__version__}")
    ap.add_argument("--quiet", action="store_true", help="no progress reports (they go to stderr)")
    ap.add_argument("--no-cache", action="store_true",
                    help=f"compile everything afresh: no on-disk cache of compiled programs (default "
                         f"~/.cache/jaxrot/jax, or $XDG_CACHE_HOME/jaxrot/jax; {cache.ENV}=off or a folder)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("list", help="the registered methods (default) or the named problems")
    p.add_argument("what", nargs="?", default="methods", choices=["methods", "problems"])
    p.add_argument("--markdown", action="store_true", help="methods as a markdown table")
    p.set_defaults(fn=_list)
    p = sub.add_parser("run", help="simulate one method on one named problem and report drifts and errors",
                       description="Simulate METHOD on PROBLEM and report energy/momentum drift, the attitude "
                                   "error against a DOP853 reference and orthogonality.",
                       epilog=_problems_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("method", help="a registered method name (see 'jaxrot list')")
    p.add_argument("problem", help="a named problem (listed below)")
    p.add_argument("--dt", type=float, help="step size (> 0)")
    p.add_argument("--steps", type=int, help="number of steps (>= 1)")
    p.add_argument("--tol", type=float, help="instead of --dt/--steps with METHOD 'auto': the final accuracy asked; "
                                             "jaxrot.suggest picks the method and steps and says why")
    p.add_argument("--save-every", type=int, default=None,
                   help="steps between saved frames; must divide --steps (default: about 200 frames)")
    p.add_argument("--plot", metavar="PNG", help="write energy and attitude error over time (.png/.pdf/.svg)")
    p.add_argument("--save", metavar="NPZ", help="save the trajectory with its provenance (.npz; jaxrot.load)")
    p.add_argument("--no-throw", action="store_true",
                   help="on a failed step keep the trajectory up to it and report, instead of stopping")
    p.add_argument("--progress", action="store_true", help="report compilation, then progress and time left (default for 10^5 steps or more)")
    p.set_defaults(fn=_run)
    p = sub.add_parser("reproduce", help="run an experiment that reproduces a source document's table/figure")
    p.add_argument("name", choices=sorted(EXPERIMENTS))
    p.add_argument("--quick", action="store_true", help="a small version (CI)")
    p.add_argument("--out", default=None,
                   help="output folder (default: ./jaxrot-results; a --quick run writes to a new temporary folder; "
                        "--out figures regenerates the committed figures)")
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
    p = sub.add_parser("bench", help="throughput and accuracy-per-second benchmarks")
    p.add_argument("name", nargs="?", default="buss", choices=sorted(BENCHMARKS))
    p.add_argument("--quick", action="store_true")
    p.add_argument("--suite", action="store_true",
                   help="precision: the whole suite (seven problems, float32 at 1e-4 as well)")
    p.add_argument("--seed", type=int, default=None,
                   help="unseen: the seed its problems are drawn from (default: the recorded one)")
    p.add_argument("--device", choices=["cpu", "gpu"], default=None,
                   help="throughput: the kind of JAX's default devices to measure on (default cpu)")
    p.add_argument("--out", default=None, help="output folder (default: ./jaxrot-results; --quick: a temporary one)")
    p.set_defaults(fn=_bench)
    fit_command.add_parser(sub)
    args = ap.parse_args(argv)
    args.argv = argv  # the command line, recorded with the files a run writes
    if as_command:  # the process is the command: a library caller's JAX settings are its own
        cache.enable(no_cache=args.no_cache)
    from jaxrot.driver import progress
    from jaxrot.driver.failures import SimulationError, codes_of, name_of

    quiet_before, progress.QUIET = progress.QUIET, args.quiet

    try:
        return args.fn(args)
    except SimulationError as e:
        why = {"solve_failed": "the nonlinear solve did not converge",
               "nonfinite_state": "the state became non-finite",
               "max_steps_reached": "the adaptive controller used up max_steps"}.get(
            "" if e.reason is None else name_of(codes_of(e.reason)), "it failed")
        if args.cmd == "run":
            todo = "Reduce --dt, or rerun with --no-throw to keep the trajectory up to it."
        else:  # a benchmark or an experiment chose its own steps: not the user's input
            todo = "The experiment's settings failed on this machine: please report it with the command line."
        print(f"jaxrot: simulation failed at step {e.step}: {why}. {todo}", file=sys.stderr)
        return 1
    except (ValueError, KeyError, TypeError, FileNotFoundError) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else e  # str(KeyError) adds quotes
        print(f"jaxrot: error: {msg}", file=sys.stderr)
        return 2
    finally:
        progress.QUIET = quiet_before  # main() called in a longer-lived process (tests, notebooks)
        output.remove_empty_created()  # a folder made for results that never came


if __name__ == "__main__":
    sys.exit(main())
