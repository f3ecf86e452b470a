"""What splitting a fused CPU batch over the cores costs and gains (``jaxrot.kernels.host_threads``).

For ``rkmk8`` (Buss's time-dependent torque) and ``buss2p`` (the T-handle), 64 and 1 000 bodies, 1 to
256 steps: one ``kernels.fused_frames`` call with the batch split over 2 threads against one launch
(``host_threads.cores`` set to 2 and to 1, and the body-step floor set to 1 so that every run is
split), medians of 25 alternated calls. The ratio one launch / split is the split's gain (below 1:
its fixed cost outweighs the parallel part).

    python benchmarks/fused_cpu_split.py
"""

import time

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import jaxrot  # noqa: E402
from jaxrot import integrators, kernels, problems  # noqa: E402
from jaxrot.kernels import host_threads  # noqa: E402


def main():
    rng = np.random.default_rng(0)
    host_threads.MIN_BODY_STEPS_PER_THREAD = 1  # every run split: the floor is what this measures
    for name, prob in (("rkmk8", "buss_torqued"), ("buss2p", "t_handle")):
        method, p = integrators.get(name), problems.get(prob)
        for B in (64, 1000):
            s = jaxrot.State(jax.vmap(jaxrot.so3.exp)(jnp.asarray(rng.normal(size=(B, 3)))),
                             jnp.asarray(rng.normal(size=(B, 3))))
            for steps in (1, 4, 16, 64, 256):
                runs = {}
                for threads in (1, 2):
                    host_threads.cores = lambda threads=threads: threads
                    f = jax.jit(lambda s: kernels.fused_frames(method, p.system, s, 1e-3, 0.0, 1, steps)[0])
                    f(s).block_until_ready()  # compile (one program per thread count)
                    runs[threads] = f
                times = {1: [], 2: []}
                for _ in range(25):
                    for threads, f in runs.items():
                        t0 = time.perf_counter()
                        f(s).block_until_ready()
                        times[threads].append(time.perf_counter() - t0)
                one, split = (1e3 * float(np.median(times[k])) for k in (1, 2))
                print(f"{name} {B} bodies, {steps} steps ({B * steps} body-steps): one launch {one:.3f} ms, "
                      f"split over 2 threads {split:.3f} ms, gain {one / split:.2f}", flush=True)


if __name__ == "__main__":
    main()
