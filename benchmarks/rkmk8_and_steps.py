"""rkmk8 and the step estimate, measured in one process (float64, CPU):

1. per body-step cost of rkmk8's XLA step with the stages stacked (the library's form) against a
   chain of per-stage sums, and against RKMK4 (asymmetric top, 1 000 bodies, 100 steps);
2. the fused kernel against the XLA executor: split4_231 (T-handle, 10^4 steps) and rkmk8
   (asymmetric top, 113 steps), one body and a batch;
3. ``steps_for_tolerance``: the final error of the estimated step count against the tolerance, and
   the trial runs' steps against the final run's, on four problems.

    python benchmarks/rkmk8_and_steps.py [--reps 3]
"""

from __future__ import annotations

import argparse

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402

import jaxrot  # noqa: E402
from jaxrot import analysis, problems, reference, so3  # noqa: E402
from jaxrot.integrators.dop853_coefficients import A, B, C  # noqa: E402
from jaxrot.physics.torques import body_torque  # noqa: E402
from jaxrot.studies.step_count import steps_for_tolerance  # noqa: E402
from jaxrot.studies.timing import median_seconds  # noqa: E402


def _batch(p, n, seed=0):
    k1, k2 = jax.random.split(jax.random.PRNGKey(seed))
    R = jax.vmap(lambda v: p.state0.R @ so3.exp(v))(0.01 * jax.random.normal(k1, (n, 3)))
    return jaxrot.State(R, p.state0.Pi * (1 + 0.01 * jax.random.normal(k2, (n, 3))))


def _chained_step(system, s, t, dt):
    """rkmk8's step with each stage a chain of sums over the earlier ones (the form not used)."""
    J, R0, P0 = system.body.J, s.R, s.Pi
    Ks, Fs = [], []
    for i in range(B.shape[0]):
        U, P = jnp.zeros(3), P0
        for j in range(i):
            if A[i, j] != 0.0:
                U, P = U + (dt * float(A[i, j])) * Ks[j], P + (dt * float(A[i, j])) * Fs[j]
        Om = P / J
        Ks.append(so3.dexpinv(-U, Om))
        Fs.append(jnp.cross(P, Om) + body_torque(system, t + float(C[i]) * dt, R0 @ so3.exp(U), P))
    K = sum(float(B[i]) * Ks[i] for i in range(len(Ks)))
    F = sum(float(B[i]) * Fs[i] for i in range(len(Fs)))
    return jaxrot.State(R0 @ so3.exp(dt * K), P0 + dt * F)


def _scan(step, n, dt):
    @jax.jit
    def run(S):
        def one(s):
            return jax.lax.scan(lambda s, k: (step(s, k * dt, dt), None), s, jnp.arange(n, dtype=jnp.float64))[0]
        return jax.vmap(one)(S)
    return run


def stacked_vs_chained(reps):
    p = problems.get("asymmetric_top")
    S, n, dt = _batch(p, 1000), 100, 0.01
    out = {}
    for name in ("rkmk8", "rkmk4"):
        m = jaxrot.get(name)
        run = _scan(lambda s, t, h, m=m: m.step(p.system, t, s, None, h)[0], n, dt)
        out[name] = median_seconds(lambda: run(S).R, reps) / (1000 * n)
    run = _scan(lambda s, t, h: _chained_step(p.system, s, t, h), n, dt)
    out["rkmk8, chained stages"] = median_seconds(lambda: run(S).R, reps) / (1000 * n)
    for k, v in out.items():
        print(f"  {k:24s} {1e6 * v:.3f} us per body-step")


def fused_vs_xla(reps):
    for method, name, n, dt in (("split4_231", "t_handle", 10_000, 1e-3), ("rkmk8", "asymmetric_top", 113, 1 / 113)):
        p = problems.get(name)
        for nb in (1, 300):
            S = _batch(p, nb)
            S = jaxrot.State(S.R[0], S.Pi[0]) if nb == 1 else S
            t = {}
            for ex in (jaxrot.XLA(), jaxrot.Fused()):
                t[type(ex).__name__] = median_seconds(
                    lambda ex=ex: jaxrot.simulate(method, p, dt, n, state0=S, saveat=jaxrot.SaveAt(t0=False),
                                                  executor=ex).final.R, reps)
            print(f"  {method:10s} {nb:4d} bodies: XLA {nb * n / t['XLA']:.3g}, fused {nb * n / t['Fused']:.3g} "
                  f"body-steps/s, fused/XLA {t['XLA'] / t['Fused']:.2f}x")


def step_estimates():
    for name, method, T in (("asymmetric_top", "rkmk8", 1.0), ("fast_top", "exact_split_kl8", 1.0),
                            ("gravity_gradient", "rkmk8", None), ("buss_torqued", "rkmk8", None)):
        p = problems.get(name)
        T = T or float(p.t_end)
        ref = reference.reference_solution(p, T).final
        for tol in (1e-6, 1e-10):
            s = steps_for_tolerance(method, p, tol, t1=T)
            fin = jaxrot.simulate(method, p, T / s.n_steps, s.n_steps, saveat=jaxrot.SaveAt(t0=False)).final
            e = float(analysis.attitude_error(fin.R, ref.R))
            print(f"  {name:17s} {method:16s} tol {tol:.0e}: N = {s.n_steps:4d}, error/tol {e / tol:.2f}, "
                  f"trial steps / N {s.trial_steps / s.n_steps:.2f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    reps = ap.parse_args().reps
    print("1. rkmk8 step forms (XLA):")
    stacked_vs_chained(reps)
    print("2. fused kernel against XLA:")
    fused_vs_xla(reps)
    print("3. steps_for_tolerance:")
    step_estimates()


if __name__ == "__main__":
    main()
