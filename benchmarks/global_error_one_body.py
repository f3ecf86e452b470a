"""The global-error driver on one body: the error it ends with against the error it reports.

For each problem, pair and tolerance, ``jaxrot.GlobalError(jaxrot.Adaptive(tol, tol))`` over ``[0, T]``
(T = 20 for the T-handle, 10 otherwise) saving at ten times, float64, XLA's loop. Each row has the
run's final global error (the largest over the ten times and the 12 numbers of the state, in units
of ``tol + tol |y|``) against ``rkmk8(5)`` at 1e-13, the error the trajectory reports
(``controller.global_error``), whether a ``PrecisionWarning`` said the aim was missed, and the
tolerance the calibration chose.

    python benchmarks/global_error_one_body.py [--pairs "buss4(3),rkmk8(5)"] [--tols 1e-3,1e-5] [--out DIR]

``--out`` writes ``global_error_one_body.{json,md}`` there with their provenance (the record:
``figures/global_error_one_body.*``).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import warnings

import jax

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402

import jaxrot  # noqa: E402
from jaxrot.driver.global_error import scaled_difference  # noqa: E402

PROBLEMS = ("t_handle", "slow_top", "asymmetric_top", "fast_top", "free_body_hlw")


def rows(pairs, tols, problems=PROBLEMS):
    for name in problems:
        p = jaxrot.problems.get(name)
        T = 20.0 if name == "t_handle" else 10.0
        saveat = jaxrot.SaveAt(ts=jnp.linspace(T / 10, T, 10), t0=False)

        def run(method, stepsize):
            return jaxrot.simulate(method, p, t1=T, stepsize=stepsize, saveat=saveat, executor=jaxrot.XLA())

        truth = run("rkmk8(5)", jaxrot.Adaptive(1e-13, 1e-13))
        for pair in pairs:
            for tol in tols:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    tr = run(pair, jaxrot.GlobalError(jaxrot.Adaptive(tol, tol)))
                warned = any(issubclass(w.category, jaxrot.PrecisionWarning) and "GlobalError" in str(w.message)
                             for w in caught)
                row = dict(problem=name, pair=pair, tol=tol,
                           error=float(scaled_difference(tr.states, truth.states, tol, tol)),
                           reported=float(tr.controller.global_error), warned=warned,
                           tolerance_used=float(tr.controller.tolerance))
                print(row, flush=True)
                yield row


def table(rs) -> str:
    lines = ["| problem | pair | tol | error / tol | reported | warned | error / reported |",
             "|---|---|---|---|---|---|---|"]
    for r in rs:
        lines.append(f"| {r['problem']} | {r['pair']} | {r['tol']:.0e} | {r['error']:.3g} | {r['reported']:.3g} | "
                     f"{'yes' if r['warned'] else ''} | {r['error'] / r['reported']:.2g} |")
    over = [r for r in rs if r["error"] > 2.0]
    caught = [r for r in over if r["warned"]]
    alarms = [r for r in rs if r["warned"] and r["error"] <= 2.0]
    lines += ["", f"Runs ending above twice the tolerance: {len(over)} of {len(rs)}, {len(caught)} of them with a "
              f"warning; warnings on runs within twice it: {len(alarms)}."]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", default="buss4(3),rkmk8(5)")
    ap.add_argument("--tols", default="1e-3,1e-4,1e-5,1e-6,1e-7,1e-9")
    ap.add_argument("--problems", default=",".join(PROBLEMS))
    ap.add_argument("--out")
    a = ap.parse_args()
    rs = list(rows(a.pairs.split(","), [float(t) for t in a.tols.split(",")], a.problems.split(",")))
    text = table(rs)
    print(text)
    if a.out:
        from jaxrot.present import provenance

        provenance.write_record(a.out, "global_error_one_body", dict(rows=rs), text,
                                command="python " + shlex.join(sys.argv))


if __name__ == "__main__":
    main()
