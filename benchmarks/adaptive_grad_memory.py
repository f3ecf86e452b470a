"""Memory and time of reverse-mode gradients through adaptive runs (the default adjoint, :class:`jaxrot.RecursiveCheckpointAdjoint`).

For runs of about 1e3, 1e4 and 1e5 accepted steps (free body, buss4(3), rtol = atol = 1e-10, span
scaled to the step count, ``max_steps`` = 1.25x the steps): the compiled gradient program's
temporary memory (XLA's memory analysis), the time of the forward run and of the gradient, and the
forward time of the :class:`jaxrot.ForwardMode` loop (a plain ``lax.while_loop``) for comparison.

    python benchmarks/adaptive_grad_memory.py [--sizes 1000 10000 100000] [--reps 3]
"""

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)
import jaxrot  # noqa: E402

P = jaxrot.problems.get("free_body_mz")
TOL = 1e-10


def make(t1, max_steps, adjoint):
    def loss(J):
        q = jaxrot.Problem(jaxrot.RigidBody(J), P.torque, P.state0, t1)
        tr = jaxrot.simulate("buss4(3)", q, t1=t1, stepsize=jaxrot.Adaptive(TOL, TOL, max_steps=max_steps),
                             saveat=jaxrot.SaveAt(t0=False), adjoint=adjoint, throw=False)
        return jnp.sum(tr.final.Pi) + jnp.sum(tr.final.R), tr.controller.n_accepted
    return loss


def median_time(f, x, reps):
    jax.block_until_ready(f(x))
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        jax.block_until_ready(f(x))
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000])
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    J = P.body.J
    n1 = int(jax.jit(make(1.0, 100_000, jaxrot.ForwardMode()))(J)[1])  # accepted steps per unit time
    print(f"{'steps':>8} {'max_steps':>9} {'grad temp MiB':>13} {'fwd lax s':>9} {'fwd ckpt s':>10} {'grad s':>8}")
    for n in a.sizes:
        t1 = n / n1
        ms = int(1.25 * n)
        fwd_lax = jax.jit(make(t1, ms, jaxrot.ForwardMode()))
        fwd_ck = jax.jit(make(t1, ms, jaxrot.RecursiveCheckpointAdjoint()))
        grad = jax.jit(jax.grad(lambda J: make(t1, ms, jaxrot.RecursiveCheckpointAdjoint())(J)[0]))
        mem = grad.lower(J).compile().memory_analysis()
        steps = int(fwd_ck(J)[1])
        tl, tc, tg = (median_time(f, J, a.reps) for f in (fwd_lax, fwd_ck, grad))
        print(f"{steps:>8} {ms:>9} {mem.temp_size_in_bytes / 2**20:>13.3f} {tl:>9.3f} {tc:>10.3f} {tg:>8.3f}",
              flush=True)


if __name__ == "__main__":
    main()
