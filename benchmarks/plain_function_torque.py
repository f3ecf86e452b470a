"""What a torque written as a plain function costs in rkmk8's fused kernel (float64, CPU).

Per body and step, medians of 7 calls of ``kernels.fused_frames`` (1 000 bodies of the fast top's
body, random attitudes and momenta, one frame of 100 steps): the hand-written ``GravityTorque``, the
same gravity written as a plain function (``jaxrot.Torque``, restated from its jaxpr), and the damped,
periodically forced torque of ``jaxrot bench unseen`` (a sine per stage), at a small step (1e-3 s)
and a large one (0.2 s, the rotation angle per step near the benchmarks'); two rounds. Then the
first restatement of a new function, timed: tracing and source generation, and its compilation by
Warp with the check against the function (``--fresh-cache`` compiles into an empty Warp cache).

    python benchmarks/plain_function_torque.py [--fresh-cache]
"""

import argparse
import os
import sys
import tempfile
import time

if "--fresh-cache" in sys.argv:  # before Warp is imported
    os.environ["WARP_CACHE_PATH"] = tempfile.mkdtemp(prefix="jaxrot-warp-")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jaxrot  # noqa: E402
from jaxrot import integrators, kernels, problems  # noqa: E402
from jaxrot.kernels import transpile  # noqa: E402
from jaxrot.physics.problems import System  # noqa: E402


def per_step(system, states, dt, steps=100, reps=7):
    method = integrators.get("rkmk8")
    run = jax.jit(lambda s: kernels.fused_frames(method, system, s, dt, 0.0, 1, steps)[0])
    run(states).block_until_ready()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        run(states).block_until_ready()
        times.append(time.perf_counter() - t0)
    return 1e6 * float(np.median(times)) / states.R.shape[0] / steps


def main():
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).add_argument("--fresh-cache", action="store_true")
    p = problems.get("fast_top")
    g = p.system.torque
    mgl, com, up = g.mgl, jnp.asarray(g.com), jnp.asarray(g.up)
    J, e = jnp.array([4.6, 4.3, 1.8]), jnp.array([0.0, 0.6, 0.8])

    def gravity(t, R, Pi):
        return -mgl * jnp.cross(R @ com, up)

    def damped_forced(t, R, Pi):
        return -0.1 * (R @ (Pi / J)) + 1.6 * jnp.sin(2.0 * t) * e

    rng = np.random.default_rng(0)
    B = 1000
    states = jaxrot.State(jax.vmap(jaxrot.so3.exp)(jnp.asarray(0.5 * rng.normal(size=(B, 3)))),
                          jnp.asarray(3.0 * rng.normal(size=(B, 3))))
    systems = {"GravityTorque (hand-written)": p.system,
               "gravity as a plain function": System(p.system.body, jaxrot.Torque(gravity)),
               "damped, forced (plain function)": System(jaxrot.RigidBody(J), jaxrot.Torque(damped_forced))}
    for rnd in range(2):
        for dt in (1e-3, 0.2):
            row = {k: per_step(s, states, dt) for k, s in systems.items()}
            base = row["GravityTorque (hand-written)"]
            print(f"round {rnd + 1}, dt = {dt:g}: " + "; ".join(f"{k} {v:.3f} us ({v / base:.2f}x)"
                                                               for k, v in row.items()), flush=True)

    def fresh(t, R, Pi):  # a function not restated before
        return -0.3 * (R @ (Pi / J)) + jnp.cos(t) * e

    torque = jaxrot.Torque(fresh)
    t0 = time.perf_counter()
    transpile._generate(torque, jnp.float64)
    traced = time.perf_counter() - t0
    t0 = time.perf_counter()
    transpile.key_of(torque, jnp.float64)  # traces again, then compiles and checks
    checked = time.perf_counter() - t0 - traced
    print(f"a new function: traced and written out in {1e3 * traced:.1f} ms; compiled by Warp and checked in "
          f"{checked:.2f} s ({'empty' if '--fresh-cache' in sys.argv else 'existing'} Warp cache)")


if __name__ == "__main__":
    main()
