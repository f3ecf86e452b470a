"""Derivatives of fused constant-step runs: reverse mode (``jax.value_and_grad``) and forward mode
(``jax.jvp``) taken in the kernels, against the plain fused forward run and the XLA executor's gradient,
on a batch of heavy tops (``fast_top`` with initial momenta scaled 0.5-2).

    python benchmarks/fixed_gradient.py --out DIR [--methods rk4,buss2p,rkmk4,buss4] [--bodies 1000]
        [--steps 1000] [--reps 5] [--no-xla] [--record-bytes N]

Per method, contenders timed in turn in one process (medians of ``reps`` calls after one untimed call),
all inside ``jax.jit``, the loss ``sum(R[..., 2, :] . (1, 2, 3)) + 1e-3 |Pi|^2`` over ten saved frames:

- ``forward``: ``simulate(..., executor=jaxrot.Fused())``;
- ``value_and_grad, kernels``: with respect to the moments J and the initial momenta (the kernels'
  backward pass over the frames as checkpoints, or over every step's state for a method that carries a
  memory, :func:`jaxrot.kernels.adaptive_derivatives.fixed_in_kernels`);
- ``jvp in one direction of J, kernels``;
- the gradient's two parts: ``vjp's forward pass`` (``jax.vjp``'s forward run, which keeps the record)
  and ``vjp's backward pass alone`` (its pullback called on its own);
- ``value_and_grad, XLA executor`` (``--no-xla`` skips it).

After the timing, one more call of each contender counts its minor page faults (fresh memory the
system hands the process, such as the record a differentiated run writes).

The two gradients are compared (largest difference over the largest entry). ``--record-bytes N`` sets
the kernels' record budget (``adaptive_backward.RECORD_BYTES``) for the whole run: one that every
step's start does not fit makes the frames the checkpoints, from which the derivative passes step the
states again. Writes ``fixed_gradient.json`` and ``.md`` to DIR (``fixed_gradient_record_N`` with
``--record-bytes``).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--methods", default="rk4,buss2p,rkmk4,buss4")
    ap.add_argument("--bodies", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-xla", action="store_true")
    ap.add_argument("--record-bytes", type=int, default=None, help="the kernels' record budget for the run")
    a = ap.parse_args(argv)
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    import jaxrot
    from jaxrot.present import provenance
    from jaxrot.studies.timing import median_seconds_interleaved

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from heterogeneous_gradient import page_faults

    if a.record_bytes is not None:  # (read when a run is traced: set before any is)
        from jaxrot.kernels import adaptive_backward

        adaptive_backward.RECORD_BYTES = a.record_bytes
    if a.steps % 10:
        raise SystemExit("--steps must be a multiple of 10 (ten saved frames)")
    p = jaxrot.problems.get("fast_top")
    B, N = a.bodies, a.steps
    R0 = jnp.broadcast_to(p.state0.R, (B, 3, 3))
    Pi0 = p.state0.Pi * jnp.linspace(0.5, 2.0, B)[:, None]
    J0 = jnp.asarray(p.body.J)
    weights = jnp.array([1.0, 2.0, 3.0])
    rows = []
    for method in a.methods.split(","):
        def run(J, Pi, executor, method=method):
            prob = jaxrot.Problem(jaxrot.RigidBody(J), p.torque, p.state0, 1.0)
            return jaxrot.simulate(method, prob, 1e-3, N, state0=jaxrot.State(R0, Pi),
                                   saveat=jaxrot.SaveAt(steps=N // 10), executor=executor)

        def loss(J, Pi, executor, run=run):
            tr = run(J, Pi, executor)
            return jnp.sum(tr.states.R[..., 2, :] * weights) + 1e-3 * jnp.sum(tr.states.Pi ** 2)

        fwd = jax.jit(lambda J, Pi, run=run: run(J, Pi, jaxrot.Fused()).states.R)
        vg = jax.jit(jax.value_and_grad(lambda J, Pi, loss=loss: loss(J, Pi, jaxrot.Fused()), argnums=(0, 1)))
        jvp = jax.jit(lambda J, Pi, loss=loss: jax.jvp(lambda J: loss(J, Pi, jaxrot.Fused()), (J,),
                                                       (jnp.array([1.0, 0.0, 0.0]),)))
        vjp_fwd = jax.jit(lambda J, Pi, loss=loss: jax.vjp(lambda J, Pi: loss(J, Pi, jaxrot.Fused()), J, Pi))
        vjp_bwd = jax.jit(lambda pull: pull(jnp.ones((), jnp.float64)))
        pull = vjp_fwd(J0, Pi0)[1]
        contenders = [("forward", lambda: fwd(J0, Pi0)), ("value_and_grad, kernels", lambda: vg(J0, Pi0)),
                      ("jvp in one direction of J, kernels", lambda: jvp(J0, Pi0)),
                      ("vjp's forward pass", lambda: vjp_fwd(J0, Pi0)),
                      ("vjp's backward pass alone", lambda pull=pull: vjp_bwd(pull))]
        agree = None
        if not a.no_xla:
            vg_xla = jax.jit(jax.value_and_grad(lambda J, Pi, loss=loss: loss(J, Pi, jaxrot.XLA()), argnums=(0, 1)))
            contenders.append(("value_and_grad, XLA executor", lambda: vg_xla(J0, Pi0)))
            g, gx = vg(J0, Pi0)[1], vg_xla(J0, Pi0)[1]
            agree = max(float(jnp.max(jnp.abs(u - v)) / jnp.max(jnp.abs(v))) for u, v in zip(g, gx))
        from jaxrot.kernels.adaptive_derivatives import fixed_reason

        why = fixed_reason(jaxrot.integrators.get(method), p.system, jnp.float64, B, 10, N // 10, "vjp")
        if why is not None:  # (the rows would time the XLA loop's derivatives under the kernels' name)
            raise SystemExit(f"{method}: the kernels do not take this gradient: {why}")
        print(f"{method}: timing {len(contenders)} contenders", flush=True)
        secs = median_seconds_interleaved([f for _, f in contenders], reps=a.reps)
        for (name, f), s in zip(contenders, secs):
            faults = page_faults(f)
            rows.append(dict(method=method, contender=name, seconds=s, x_forward=s / secs[0], grad_rel_diff_vs_xla=agree,
                             page_faults=faults))
            print(f"  {name:40s} {s:.4f} s  x forward {s / secs[0]:.2f}  page faults {faults}", flush=True)
    meta = dict(command="python " + " ".join([os.path.relpath(__file__), *(argv if argv is not None else sys.argv[1:])]),
                machine=platform.processor() or platform.machine(), cores=os.cpu_count(), jax=jax.__version__,
                load=os.getloadavg(), reps=a.reps, bodies=B, steps=N, record_bytes=a.record_bytes)
    budget = "" if a.record_bytes is None else f", a record budget of {a.record_bytes} bytes"
    lines = [f"# Derivatives of fused constant-step runs: {B} heavy tops x {N} steps, ten saved frames{budget}", "",
             f"`{meta['command']}`; {meta['cores']} cores, jax {meta['jax']}, load "
             f"{tuple(round(x, 1) for x in meta['load'])}; medians of {a.reps} calls, contenders in turn, all inside "
             "`jax.jit`.", "", "| method | contender | s per call | x forward | page faults a call | gradient vs XLA's |",
             "|---|---|---|---|---|---|"]
    lines += [f"| `{r['method']}` | {r['contender']} | {r['seconds']:.4f} | {r['x_forward']:.2f} | {r['page_faults']} | "
              + ("" if r["grad_rel_diff_vs_xla"] is None else f"{r['grad_rel_diff_vs_xla']:.1e}") + " |" for r in rows]
    name = "fixed_gradient" if a.record_bytes is None else f"fixed_gradient_record_{a.record_bytes}"
    provenance.write_record(a.out, name, dict(meta=meta, rows=rows), "\n".join(lines) + "\n",
                            command=meta["command"])


if __name__ == "__main__":
    main()
