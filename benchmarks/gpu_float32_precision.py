"""float32 matrix products on a GPU at JAX's default precision against ``"highest"``.

First the relative error of float32 products of 10 000 random 3×3 matrices and vectors (batched
``@``, ``einsum``, a vmapped product, ``cross``) against float64. Then ``buss2p`` (T-handle, 1 000 steps
of 1e-3), ``rkmk8`` (asymmetric heavy top, 300 steps of 1e-2) and ``rk4`` (the same top, 1 000 steps of
1e-3) on 2 000 bodies with XLA in float32, traced once at the default precision and once inside
``jax.default_matmul_precision("highest")``: the final attitudes' distance from a float64 run
(median and maximum over the bodies), the orthogonality error and the time of a call (median of 5).
On a CPU both settings give the same numbers. ``jaxrot.simulate`` itself now traces at
``"highest"``, so the two runs differ only where a method's own step asks for nothing (``rkmk8``
asks for ``HIGHEST`` in its tableau products, so its rows agree too).

    python benchmarks/gpu_float32_precision.py
"""

import contextlib
import time

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import jaxrot  # noqa: E402
from jaxrot import problems  # noqa: E402


def _precision(p):
    return jax.default_matmul_precision(p) if p else contextlib.nullcontext()


def _states(B, dtype):
    r = np.random.default_rng(0)
    R = jax.vmap(jaxrot.so3.exp)(jnp.asarray(r.normal(size=(B, 3))))
    return jaxrot.State(jnp.asarray(R, dtype), jnp.asarray(r.normal(size=(B, 3)), dtype))


def main():
    print(jax.devices(), jax.__version__, flush=True)
    rng = np.random.default_rng(0)
    A, Bm, v = rng.normal(size=(10000, 3, 3)), rng.normal(size=(10000, 3, 3)), rng.normal(size=(10000, 3))
    products = {"(B,3,3)@(B,3,3)": (lambda a, b, v: a @ b, np.einsum("bij,bjk->bik", A, Bm)),
                "(B,3,3)@(B,3)": (lambda a, b, v: jnp.einsum("bij,bj->bi", a, v), np.einsum("bij,bj->bi", A, v)),
                "vmap(3x3 @ 3)": (lambda a, b, v: jax.vmap(lambda x, y: x @ y)(a, v), np.einsum("bij,bj->bi", A, v)),
                "cross": (lambda a, b, v: jnp.cross(a[:, 0], v), np.cross(A[:, 0], v))}
    for name, (f, exact) in products.items():
        for p in (None, "highest"):
            with _precision(p):
                got = np.asarray(jax.jit(f)(*(jnp.asarray(x, jnp.float32) for x in (A, Bm, v))))
            print(f"{name:18s} precision={p}: max rel err {np.max(np.abs(got - exact)) / np.max(np.abs(exact)):.2e}")
    for m, pname, dt, n in (("buss2p", "t_handle", 1e-3, 1000), ("rkmk8", "asymmetric_top", 1e-2, 300),
                            ("rk4", "asymmetric_top", 1e-3, 1000)):
        prob, B = problems.get(pname), 2000
        ref = np.asarray(jaxrot.simulate(m, prob, dt, n, saveat=jaxrot.SaveAt(steps=n), state0=_states(B, jnp.float64)).states.R[:, -1])
        for p in (None, "highest"):
            s = _states(B, jnp.float32)
            with _precision(p):
                def run():
                    return jaxrot.simulate(m, prob, jnp.float32(dt), n, saveat=jaxrot.SaveAt(steps=n), state0=s,
                                           executor=jaxrot.Sharded()).states.R.block_until_ready()
                R = np.asarray(run()[:, -1])
                times = []
                for _ in range(5):
                    t0 = time.perf_counter()
                    run()
                    times.append(time.perf_counter() - t0)
            orth = np.max(np.abs(np.einsum("bji,bjk->bik", R, R) - np.eye(3)))
            err = np.abs(R - ref).max(axis=(1, 2))
            print(f"{m} float32 precision={p}: |R - R64| median {np.median(err):.2e} max {err.max():.2e}, "
                  f"orthogonality {orth:.2e}, {1e3 * np.median(times):.1f} ms", flush=True)


if __name__ == "__main__":
    main()
