"""``jaxrot fit FILE.csv``: identify a thrown body from a gyroscope recording and write a report
(:mod:`jaxrot.studies.identify`, :mod:`jaxrot.studies.sensors`, :mod:`jaxrot.present.identify_report`).

Exit codes as the other commands: 2 for a bad file, window or option (one line naming the file,
line, column or option), nothing written then; the report's files appear together when all are
written (staged, then moved into place)."""

from __future__ import annotations

import os

from . import output


def add_parser(sub) -> None:
    """The ``fit`` subcommand's arguments."""
    p = sub.add_parser("fit", help="identify a thrown body from a gyroscope recording (phyphox CSV): inertia ratios, "
                                   "misalignment, bias, drag, with uncertainties and a report",
                       description="Read a gyroscope recording (phyphox's CSV export, or any CSV by column names), "
                                   "find its free flights (or take --window), fit the body to all of them jointly "
                                   "and write a report (estimates ± 1 sigma, plots) to --out. Gyroscope rates fix "
                                   "the inertia's ratios; --trace or --mass/--dimensions give absolute moments.")
    p.add_argument("file", help="the CSV file")
    p.add_argument("--window", action="append", metavar="START:END",
                   help="a free flight, in seconds of the recording (repeat for several; default: found)")
    p.add_argument("--out", default=None, help="report folder (default ./jaxrot-results/fit-<file name>)")
    p.add_argument("--time-column", default=None, help="time column's name (default phyphox's 'Time (s)')")
    p.add_argument("--gyro-columns", default=None, metavar="X,Y,Z",
                   help="the rate columns' names, separated by commas (default phyphox's 'Gyroscope x (rad/s)', ...)")
    p.add_argument("--bias", choices=["shared", "per_throw", "none"], default="shared",
                   help="gyro bias: one for the recording (default), one per throw, or none")
    p.add_argument("--scale", action="store_true", help="fit per-axis gyro scale factors too")
    p.add_argument("--no-drag", action="store_true", help="the torque-free model only (no air drag, no comparison)")
    p.add_argument("--no-misalignment", action="store_true", help="sensor axes taken as the principal axes")
    p.add_argument("--no-per-throw", action="store_true", help="skip the per-throw fits (and the scatter check)")
    p.add_argument("--robust", choices=["linear", "huber", "soft_l1", "cauchy"], default="linear",
                   help="loss for glitches (default linear: least squares)")
    p.add_argument("--trace", type=float, default=None, help="J1+J2+J3 in kg m^2: absolute moments")
    p.add_argument("--mass", type=float, default=None, help="mass in kg of a uniform box (with --dimensions)")
    p.add_argument("--dimensions", default=None, metavar="A,B,C", help="the box's edges in metres")
    p.add_argument("--dt", type=float, default=0.004, help="simulation step in seconds (default 0.004)")
    p.add_argument("--high", type=float, default=3.0, help="flight detection: rate that starts a flight (rad/s)")
    p.add_argument("--low", type=float, default=1.5, help="flight detection: rate below which it ends (rad/s)")
    p.add_argument("--min-duration", type=float, default=0.3, help="flight detection: shortest flight (s)")
    p.add_argument("--trim", type=float, default=0.02, help="flight detection: cut from each end (s)")
    p.set_defaults(fn=run)


def run(args) -> int:
    """``jaxrot fit FILE.csv``: identify the body from a gyroscope recording; a report in ``--out``."""
    import jax

    jax.config.update("jax_enable_x64", True)
    import numpy as np

    from jaxrot.studies import identify as idf
    from jaxrot.studies import sensors

    gyro = sensors.PHYPHOX_GYRO if args.gyro_columns is None else tuple(c.strip() for c in args.gyro_columns.split(","))
    if len(gyro) != 3:
        raise ValueError(f"--gyro-columns takes three names separated by commas (x,y,z), got {args.gyro_columns!r}")
    if args.trace is not None and (args.mass is not None or args.dimensions is not None):
        raise ValueError("give one scale: --trace, or --mass with --dimensions")
    if (args.mass is None) != (args.dimensions is None):
        raise ValueError("a box's scale needs both --mass and --dimensions A,B,C")
    dims = None
    if args.dimensions is not None:
        try:
            dims = [float(x) for x in args.dimensions.split(",")]
        except ValueError:
            dims = []
        if len(dims) != 3:
            raise ValueError(f"--dimensions takes three lengths in metres (A,B,C), got {args.dimensions!r}")
    if not args.dt > 0:
        raise ValueError(f"--dt must be a positive step in seconds, got {args.dt}")
    options = idf.IdentifyOptions(dt=args.dt, robust=args.robust)
    windows = [sensors.parse_window(w) for w in args.window or []]
    rec = sensors.read_csv(args.file, time=args.time_column or sensors.PHYPHOX_TIME, gyro=gyro)
    if not windows:
        windows = sensors.find_flights(rec, high=args.high, low=args.low, min_duration=args.min_duration,
                                       trim=args.trim)
        how = "found"
    else:
        how = "given"
    throws = sensors.cut(rec, windows)
    stem = os.path.splitext(os.path.basename(args.file))[0]
    folder = output.prepare(args.out if args.out is not None else os.path.join(output.DEFAULT_OUT, f"fit-{stem}"))
    print(f"{args.file}: {len(rec)} samples, {len(throws)} free flight(s) {how}: "
          + ", ".join(f"{t.ts[0]:.3f}-{t.ts[-1]:.3f} s" for t in throws), flush=True)
    print(f"writing the report to {folder}", flush=True)
    analysis = idf.analyse(throws, idf.Gyroscope(bias=args.bias, scale=args.scale),
                           torque=None if args.no_drag else "drag", misalignment=not args.no_misalignment,
                           options=options, per_throw=not args.no_per_throw, progress=not args.quiet)
    scale = None
    if args.trace is not None or args.mass is not None:
        kw = {"trace": args.trace} if args.trace is not None else {"mass": args.mass, "dimensions": dims}
        J, J_std = analysis.joint.moments(**kw)
        tr = float(np.sum(J))
        scale = {"J": J.tolist(), "J_std": J_std.tolist(), "trace": tr,
                 "from": f"trace {args.trace:g} kg m²" if args.trace is not None else
                 f"box of {args.mass:g} kg, {args.dimensions} m"}
        if analysis.joint.drag_ratio is not None:
            scale["k"] = float(analysis.joint.torque[0]) * tr
            scale["k_std"] = float(analysis.joint.torque_std[0]) * tr
    from .cli import run_staged
    from .identify_report import write_report

    args.quick = False
    run_staged(lambda out: write_report(analysis, out, recording=rec, source=os.path.basename(args.file),
                                         scale=scale), folder, args)
    print(analysis.summary())
    if scale:
        print("absolute moments (kg m^2): "
              + ", ".join(f"{v:.4e} ± {s:.1e}" for v, s in zip(scale["J"], scale["J_std"])))
    return 0
