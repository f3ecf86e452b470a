"""The global-error driver (``Adaptive(error="global", measure="attitude")``) on the precision suite's
problems and pairs, float64, 1 000 bodies: its final error against the target and its per-body wall
time against the same pair under local control at the loosest tolerance that meets the target (the
run at the right step), as in ``jaxrot bench precision --suite``, without the fixed-step methods and
the peers. Optionally the calibration subset's size (``--bodies``, 0: every body) and the driver's
aim (``--aim``, a fraction of the target).

``--law``: instead, the law the calibration rests on, on the calibration bodies of each case: the
largest final attitude error (against the reference) of local-control runs at 100, 31.6, ..., 0.01
times ``--eps``, and the exponent between runs a decade apart.

    python benchmarks/global_driver.py [--bodies 64] [--aim 1] [--fixed rkmk8] [--cases asym,satellite] [--pairs "buss4(3)"] [--out FILE.json]

``--out`` writes the rows and the summary (``error_control``) as JSON, with its provenance beside it
(the record: ``figures/global_driver.json``).
    python benchmarks/global_driver.py --law --cases T-handle --pairs "buss4(3)" --eps 1e-10
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shlex
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

from jaxrot.experiments import bench_precision as bp  # noqa: E402
from jaxrot.experiments.precision_runs import (fixed_step_row, pair_rows, perturbed_batch,  # noqa: E402
                                               reference_states)
import jaxrot  # noqa: E402
from jaxrot import problems, so3  # noqa: E402
from jaxrot.present import output, provenance  # noqa: E402
from jaxrot.driver.global_error import calibration_set  # noqa: E402


def law(p, T, S, pair, eps, bodies):
    """Errors of local-control runs of ``pair`` on the calibration bodies, tolerances 100 ... 0.01 eps."""
    idx = np.asarray(calibration_set(S, p.body.J, bodies))
    Ss = jaxrot.State(S.R[idx], S.Pi[idx])
    ref = reference_states(p, Ss, T)
    factors = 10.0 ** np.arange(2.0, -2.01, -0.5)
    errs = []
    for f in factors:
        sol = jaxrot.simulate(pair, p, t1=T, state0=Ss, saveat=jaxrot.SaveAt(t0=False), throw=False,
                              stepsize=jaxrot.Adaptive(eps * f, eps * f, max_steps=1 << 20))
        errs.append(float(jnp.max(jax.vmap(so3.rotation_angle)(sol.final.R, ref.R))))
        a = f"{np.log10(errs[-3] / errs[-1]):.2f}" if len(errs) >= 3 else "-"
        print(f"  {pair} tol = {f:g} eps: max error {errs[-1] / eps:.3g} eps, exponent over the decade above {a}",
              flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bodies", type=int, default=64, help="calibration subset (0: every body)")
    ap.add_argument("--cases", default="", help="comma-separated substrings of the suite's case labels")
    ap.add_argument("--batch", type=int, default=bp.SUITE_BODIES)
    ap.add_argument("--pairs", default=",".join(bp.SUITE_PAIRS), help="comma-separated pairs")
    ap.add_argument("--aim", type=float, default=1.0, help="the driver's aim, a fraction of the target")
    ap.add_argument("--fixed", default="", help="comma-separated methods also run at the fewest fixed steps "
                    "meeting the target (the automatic executor), for the cost of error control against them")
    ap.add_argument("--law", action="store_true", help="the error law on the calibration bodies instead")
    ap.add_argument("--eps", type=float, default=1e-6, help="--law: the tolerance unit")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    pairs = [q for q in a.pairs.split(",") if q]
    bodies = None if a.bodies == 0 else a.bodies
    want = [w for w in a.cases.split(",") if w]
    rows, t_start = [], time.perf_counter()
    for label, (name, T, _) in bp.SUITE.items():
        if want and not any(w in label for w in want):
            continue
        p = problems.get(name)
        S = perturbed_batch(p, a.batch)
        if a.law:
            print(label, flush=True)
            for pair in pairs:
                law(p, T, S, pair, a.eps, a.bodies or 64)
            continue
        ref = reference_states(p, S, T)
        for eps in (e for e in bp.TARGETS if (label, e) not in bp.NOT_MEASURED):
            for pair in (q for q in pairs if p.torque.is_free or q not in bp.FREE_ONLY_PAIRS):
                for r in pair_rows(pair, p, T, S, ref, eps, calibration_bodies=bodies, aim=a.aim):
                    rows.append(dict(r, case=label, target=eps, dtype="float64"))
            for m in (m for m in a.fixed.split(",") if m):
                r = fixed_step_row(m, p, T, S, ref, eps)
                rows.append(dict(r, case=label, target=eps, dtype="float64"))
                glob = [g for g in rows if g["case"] == label and g["target"] == eps
                        and g["method"].startswith("to tolerance") and g["us"] is not None and r["us"]]
                print(f"{label[:28]:28s} {eps:.0e} {r['method']} {r['setting']}: {r['us'] or float('nan'):.3g} us/body; "
                      + ", ".join(f"{g['method']} {g['us'] / r['us']:.2f}x it" for g in glob), flush=True)
        for c in bp.error_control([r for r in rows if r["case"] == label]):
            print(f"{label[:28]:28s} {c['target']:.0e} {c['pair']:16s} error/target {c['err_ratio']:5.2f}  "
                  f"cost {'-' if c['cost_ratio'] is None else format(c['cost_ratio'], '.2f')}", flush=True)
    if a.law:
        return
    control = bp.error_control(rows)
    errs = [c["err_ratio"] for c in control]
    costs = [c["cost_ratio"] for c in control if c["cost_ratio"] is not None]
    both = sum(1 for c in control if 0.5 <= c["err_ratio"] <= 2 and c["cost_ratio"] is not None
               and c["cost_ratio"] <= 1.5)
    print(f"error/target {min(errs):.2f}-{max(errs):.2f}, cost {min(costs):.2f}-{max(costs):.2f}; "
          f"{both} of {len(control)} within 0.5-2x and <= 1.5x ({(time.perf_counter() - t_start) / 60:.1f} min)")
    if a.out:
        out = pathlib.Path(a.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        with output.atomic(out) as tmp:  # never half a file
            tmp.write_text(json.dumps(dict(bodies=a.bodies, batch=a.batch, aim=a.aim, rows=rows, error_control=control), indent=1))
        provenance.record(out.parent, [out], command="python " + shlex.join(sys.argv), quick=False)


if __name__ == "__main__":
    main()
