"""The gradient of a loss over the heterogeneous batch of heavy tops (benchmarks/heterogeneous_batch.py's
bodies: spins log-uniform 5-100 rad/s, tilts 0.05-1.2 rad), error-controlled ``rkmk8(5)`` at
rtol = atol = TOL, against the plain forward run, the XLA executor's gradient and diffrax's vmapped
gradient at equal final error.

    python benchmarks/heterogeneous_gradient.py --out DIR [--bodies 1000] [--T 2] [--tol 1e-8] [--reps 5]
        [--diffrax Dopri8] [--no-xla] [--checkpoints 256]

Contenders, timed in turn in one process (medians of ``reps`` calls after one untimed call):

- ``forward, plain``: ``jaxrot.simulate`` with the default executor (the fused adaptive kernel);
- ``forward, jit``: the same call inside ``jax.jit``;
- ``value_and_grad, jit``: ``jax.jit(jax.value_and_grad(loss))`` with respect to the moments J and
  the initial momenta, the default path (the kernels' backward pass);
- ``jvp in one direction of J, jit``: forward mode (``jax.jvp``, the default path: the tangents
  carried beside the states in the fused run, :mod:`jaxrot.kernels.adaptive_tangents`);
- the gradient's two parts: ``vjp's forward pass, jit`` (``jax.vjp``'s forward run, which keeps each
  body's record of accepted steps) and ``vjp's backward pass alone, jit`` (the pullback of that forward
  run called on its own: the kernels' backward sweep);
- ``value_and_grad, jit, checkpoints=C``: the default path with
  ``adjoint=jaxrot.RecursiveCheckpointAdjoint(checkpoints=C)`` (``--checkpoints``, 0: not timed): the
  record keeps every ``ceil(T / C)``-th state and the backward pass recomputes the others;
- ``value_and_grad, XLA executor``: the same with ``executor=jaxrot.XLA()`` (the XLA loop's
  checkpointed reverse mode; ``--no-xla`` skips it);
- ``diffrax <solver>, value_and_grad``: diffrax's solver with its PID controller on the body-frame
  equations, vmapped, its tolerance the loosest whose worst final attitude error on the batch is at
  most the fused run's (searched on 64 bodies, then checked on all), differentiated through
  diffrax's default ``RecursiveCheckpointAdjoint``.

The loss is ``sum(R_final[:, 2, :] . (1, 2, 3)) + 1e-3 |Pi_final|^2`` over the batch. After the timing,
one more call of each contender counts its minor page faults (``getrusage``: fresh memory the system
hands the process, such as the record of accepted steps a differentiated run writes). The gradients of
the default path and of the XLA executor are compared (largest difference over the largest entry).
Writes ``heterogeneous_gradient.json`` and ``.md`` to DIR.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--bodies", type=int, default=1000)
    ap.add_argument("--T", type=float, default=2.0)
    ap.add_argument("--tol", type=float, default=1e-8)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--diffrax", default="Dopri8", help="a diffrax solver, or '' for none")
    ap.add_argument("--no-xla", action="store_true")
    ap.add_argument("--checkpoints", type=int, default=256, help="states a body keeps in the timed "
                    "recomputing gradient (0: not timed)")
    a = ap.parse_args(argv)
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    import jaxrot
    from jaxrot.physics.flow import body_vector_field, pack_body, unpack_body
    from jaxrot.studies.timing import median_seconds_interleaved

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from experiments.bench_heterogeneous import heavy_tops, loosest_tolerance, reference, worst

    p, S, _, _ = heavy_tops(a.bodies)
    J0 = jnp.asarray(p.body.J, jnp.float64)
    T, tol = a.T, a.tol
    weights = jnp.array([1.0, 2.0, 3.0])

    def problem(J):
        return jaxrot.Problem(jaxrot.RigidBody(J), p.torque, p.state0, T)

    def run(J, Pi0, executor=None, adjoint=None):
        return jaxrot.simulate("rkmk8(5)", problem(J), t1=T, state0=jaxrot.State(S.R, Pi0),
                               stepsize=jaxrot.Adaptive(tol, tol), executor=executor, adjoint=adjoint).final

    def loss_of(final):
        return jnp.sum(final.R[:, 2, :] * weights) + 1e-3 * jnp.sum(final.Pi ** 2)

    forward_jit = jax.jit(lambda J, Pi: run(J, Pi).R)
    vg = jax.jit(jax.value_and_grad(lambda J, Pi: loss_of(run(J, Pi)), argnums=(0, 1)))
    vg_xla = jax.jit(jax.value_and_grad(lambda J, Pi: loss_of(run(J, Pi, jaxrot.XLA())), argnums=(0, 1)))
    dJ = jnp.array([1.0, 0.0, 0.0])
    jvp = jax.jit(lambda J, Pi: jax.jvp(lambda J: loss_of(run(J, Pi)), (J,), (dJ,)))
    loss = lambda J, Pi: loss_of(run(J, Pi))  # noqa: E731
    vjp_fwd = jax.jit(lambda J, Pi: jax.vjp(loss, J, Pi))  # (the pullback's residuals returned: all kept)
    pull = vjp_fwd(J0, S.Pi)[1]
    vjp_bwd = jax.jit(lambda pull: pull(jnp.ones((), jnp.float64)))
    contenders = [("forward, plain", lambda: run(J0, S.Pi).R), ("forward, jit", lambda: forward_jit(J0, S.Pi)),
                  ("value_and_grad, jit (default path)", lambda: vg(J0, S.Pi)),
                  ("jvp in one direction of J, jit (default path)", lambda: jvp(J0, S.Pi)),
                  ("vjp's forward pass, jit (keeps the record)", lambda: vjp_fwd(J0, S.Pi)),
                  ("vjp's backward pass alone, jit", lambda: vjp_bwd(pull))]
    vg_ck = None
    if a.checkpoints:
        kept = jaxrot.RecursiveCheckpointAdjoint(checkpoints=a.checkpoints)
        vg_ck = jax.jit(jax.value_and_grad(lambda J, Pi: loss_of(run(J, Pi, adjoint=kept)), argnums=(0, 1)))
        contenders.append((f"value_and_grad, jit, checkpoints={a.checkpoints} (recomputes)", lambda: vg_ck(J0, S.Pi)))
    if not a.no_xla:
        contenders.append(("value_and_grad, XLA executor", lambda: vg_xla(J0, S.Pi)))

    ref, n_ref, _ = reference(p.system, S, T, 4096, log=lambda m: print(m, flush=True))
    err_fused = worst(run(J0, S.Pi), ref)
    diffrax_tol = None
    if a.diffrax:
        import diffrax

        solver = getattr(diffrax, a.diffrax)()

        def diffrax_final(J, Pi0, tol_d):
            f = body_vector_field(problem(J))
            term = diffrax.ODETerm(lambda t, y, args: f(t, y))

            def one(R, Pi):
                sol = diffrax.diffeqsolve(term, solver, 0.0, T, None, pack_body(R, Pi),
                                          stepsize_controller=diffrax.PIDController(rtol=tol_d, atol=tol_d),
                                          saveat=diffrax.SaveAt(t1=True), max_steps=1 << 14)
                return sol.ys[-1]

            return jaxrot.State(*unpack_body(jax.vmap(one)(S.R, Pi0)))

        fwd_d = jax.jit(lambda sub, tol_d: jax.vmap(lambda R, Pi: unpack_body(diffrax.diffeqsolve(
            diffrax.ODETerm(lambda t, y, args: body_vector_field(problem(J0))(t, y)), solver, 0.0, T, None,
            pack_body(R, Pi), stepsize_controller=diffrax.PIDController(rtol=tol_d, atol=tol_d),
            saveat=diffrax.SaveAt(t1=True), max_steps=1 << 14).ys[-1]))(sub.R, sub.Pi))
        diffrax_tol = loosest_tolerance(lambda sub, t_: (jaxrot.State(*fwd_d(sub, t_)), None), S, ref,
                                        jnp.arange(min(64, a.bodies)), err_fused, lambda m: print(m, flush=True))
        if diffrax_tol is not None:
            vg_d = jax.jit(jax.value_and_grad(lambda J, Pi: loss_of(diffrax_final(J, Pi, diffrax_tol)), argnums=(0, 1)))
            contenders.append((f"diffrax {a.diffrax}, value_and_grad (tol {diffrax_tol:.2g})", lambda: vg_d(J0, S.Pi)))
    secs = median_seconds_interleaved([f for _, f in contenders], reps=a.reps)
    faults = [page_faults(f) for _, f in contenders]
    g, gx = vg(J0, S.Pi)[1], (None if a.no_xla else vg_xla(J0, S.Pi)[1])
    agree = None if gx is None else max(float(jnp.max(jnp.abs(u - v)) / jnp.max(jnp.abs(v))) for u, v in zip(g, gx))
    agree_ck = None if vg_ck is None else max(float(jnp.max(jnp.abs(u - v)) / jnp.max(jnp.abs(v)))
                                              for u, v in zip(vg_ck(J0, S.Pi)[1], g))
    base = secs[0]
    rows = [dict(contender=name, seconds=s, us_per_body=1e6 * s / a.bodies, x_forward=s / base, page_faults=n)
            for (name, _), s, n in zip(contenders, secs, faults)]
    meta = dict(command="python " + " ".join([os.path.relpath(__file__), *(argv if argv is not None else sys.argv[1:])]),
                machine=platform.processor() or platform.machine(), cores=os.cpu_count(), jax=jax.__version__,
                load=os.getloadavg(), reps=a.reps, bodies=a.bodies, T=T, tol=tol, worst_error_fused=err_fused,
                reference_steps=n_ref, diffrax_tol=diffrax_tol, grad_rel_diff_vs_xla=agree,
                checkpoints=a.checkpoints, grad_rel_diff_checkpoints_vs_default=agree_ck)
    for r in rows:
        print(f"{r['contender']:55s} {r['seconds']:.4f} s  {r['us_per_body']:9.1f} us/body  x forward {r['x_forward']:.2f}")
    lines = [f"# Gradient over a heterogeneous batch: {a.bodies} heavy tops, T = {T}, rkmk8(5) at rtol = atol = {tol:g}",
             "", f"`{meta['command']}`; {meta['cores']} cores, jax {meta['jax']}, load before/after "
             f"{tuple(round(x, 1) for x in meta['load'])}; medians of {a.reps} calls, contenders in turn. Worst final "
             f"attitude error of the fused run {err_fused:.2e} rad (reference: fused rkmk8, {n_ref} steps).", "",
             "| contender | s per call | us/body | x plain forward | page faults in a call |", "|---|---|---|---|---|"]
    lines += [f"| {r['contender']} | {r['seconds']:.4f} | {r['us_per_body']:.1f} | {r['x_forward']:.2f} | "
              f"{r['page_faults']} |" for r in rows]
    if agree is not None:
        lines += ["", f"Gradients of the default path and of the XLA executor differ by at most {agree:.1e} of the "
                  "largest entry."]
    if agree_ck is not None:
        lines += ["", f"With checkpoints={a.checkpoints} the gradient differs from the default path's (every state "
                  f"kept) by at most {agree_ck:.1e} of the largest entry."]
    from jaxrot.present import provenance

    provenance.write_record(a.out, "heterogeneous_gradient", dict(meta=meta, rows=rows), "\n".join(lines) + "\n",
                            command=meta["command"])


def page_faults(call) -> int:
    """The minor page faults (fresh memory the system hands the process) of one more call of ``call``."""
    import resource

    import jax

    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    jax.block_until_ready(call())
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


if __name__ == "__main__":
    main()
