"""The fixed-step fused kernel against its hardware limits: body-steps per second of ``buss2p`` on the
torque-free T-handle for a large batch, as built and in variants of its compilation, float64 and float32.

Each row is one jitted :func:`jaxrot.kernels.fused_frames` call (the kernel alone, one launch, the
final state saved) of ``--steps`` steps for ``--bodies`` bodies, medians of ``--reps`` timed calls
after a compiling one, the variants timed in turn. Variants:

- ``as built``: the library's kernel (every operation rounded on its own, no fused multiply-adds;
  256 threads per block);
- ``fma``: Warp's ``fuse_fp`` option on (multiply-adds contracted into fused multiply-adds);
- ``block N``: the as-built kernel launched with ``N`` threads per block.

Beside the speed each row gives the largest difference of its final attitudes from the as-built
kernel's, so that a faster variant's change of rounding is seen next to its gain. The same call through
``jaxrot.simulate(..., executor=jaxrot.Fused())`` is timed too (what a user runs), with ``dt`` a
Python float and with ``dt`` a new device array every call.

    python benchmarks/gpu_roofline.py --out DIR [--bodies 1000000] [--steps 100] [--reps 5]

Writes ``gpu_roofline.json`` and ``gpu_roofline.md`` to ``DIR`` with their provenance. Run the
profiler on the as-built kernel with ``--profile`` (one compiled and one profiled call per dtype,
nothing timed), e.g. ``ncu -k regex:fused_buss2p --section SpeedOfLight ... python
benchmarks/gpu_roofline.py --profile``.
"""

import argparse
import functools
import json
import pathlib
import sys

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import jaxrot  # noqa: E402
from jaxrot import kernels, problems  # noqa: E402
from jaxrot.integrators import get as get_method  # noqa: E402
from jaxrot.kernels import _common, fixed_loop  # noqa: E402
from jaxrot.present import provenance  # noqa: E402
from jaxrot.studies.timing import median_seconds_interleaved  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from gpu_fused import random_states  # noqa: E402  (the same random batch as the GPU table)

METHOD, PROBLEM, DT = "buss2p", "t_handle", 1e-3
AS_BUILT_FFI, AS_BUILT_FUSE_FP = kernels._ffi, _common.FUSE_FP


def configure(fma: bool | None = None, block_dim: int | None = None):
    """Build the kernels of what follows with multiply-adds contracted or not (``fma``; None: as
    built) and launch them with ``block_dim`` threads per block (None: Warp's default)."""
    _common.FUSE_FP = AS_BUILT_FUSE_FP if fma is None else fma
    fixed_loop.kernel.cache_clear()
    AS_BUILT_FFI.cache_clear()
    if block_dim is None:
        kernels._ffi = AS_BUILT_FFI
    else:
        @functools.lru_cache(maxsize=None)
        def ffi(*key):
            return _common.warp().jax_kernel(fixed_loop.kernel(*key)[1], num_outputs=len(fixed_loop.OUTPUTS),
                                             block_dim=block_dim)

        kernels._ffi = ffi


VARIANTS = {"as built": {}, "fma": {"fma": True}, "block 128": {"block_dim": 128},
            "block 64": {"block_dim": 64}, "block 512": {"block_dim": 512}}


def kernel_call(s, n):
    method, system = get_method(METHOD), problems.get(PROBLEM).system
    # (the system in the run's dtype, as simulate casts it: the generated kernel is checked in that dtype)
    system = jax.tree_util.tree_map(lambda x: jnp.asarray(x, s.R.dtype) if eqx.is_inexact_array(x) else x, system)
    f = jax.jit(lambda R, Pi: kernels.fused_frames(method, system, jaxrot.State(R, Pi), DT, 0.0, 1, n)[0])
    return lambda: f(s.R, s.Pi).block_until_ready()


def simulate_call(s, n, dt_array: bool = False):
    """``jaxrot.simulate`` of the same run with ``dt`` a Python float (the run's dtype is the state's) or,
    with ``dt_array``, a new device array every call."""
    p = problems.get(PROBLEM)

    def run():
        dt = jnp.asarray(DT, s.R.dtype) if dt_array else DT
        traj = jaxrot.simulate(METHOD, p, dt, n, saveat=jaxrot.SaveAt(steps=n), state0=s, executor=jaxrot.Fused())
        return traj.states.R.block_until_ready()

    return run


def measure(B, n, reps, variants):
    rows = []
    for dtype in (jnp.float64, jnp.float32):
        s = random_states(B, dtype)
        calls, finals = {}, {}
        for name in variants:
            configure(**VARIANTS[name])
            calls[name] = kernel_call(s, n)
            finals[name] = np.asarray(calls[name]())  # compiled with this variant's options
        configure()
        for name, dt_array in (("simulate, Fused()", False), ("simulate, Fused(), dt a new array", True)):
            calls[name] = simulate_call(s, n, dt_array)
            finals[name] = np.asarray(calls[name]())[:, -1]
        med = dict(zip(calls, median_seconds_interleaved(list(calls.values()), reps)))
        base = finals[variants[0]].reshape(B, -1)
        for name, t in med.items():
            row = {"dtype": jnp.dtype(dtype).name, "variant": name, "bodies": B, "steps": n, "seconds": t,
                   "body-steps/s": B * n / t, "x as built": med[variants[0]] / t,
                   "max abs R difference from as built": float(np.max(np.abs(finals[name].reshape(B, -1) - base)))}
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def profile(B, n):
    """One compiling and one further call of the as-built kernel per dtype (for a profiler's capture)."""
    for dtype in (jnp.float64, jnp.float32):
        f = kernel_call(random_states(B, dtype), n)
        f()
        f()


COLUMNS = ["dtype", "variant", "bodies", "steps", "body-steps/s", "x as built", "max abs R difference from as built"]


def markdown(res) -> str:
    lines = [f"# buss2p fused kernel, T-handle: {res['bodies']} bodies x {res['steps']} steps", "",
             f"device: {res['device']} ({res['device_kind']}); jax {res['jax']}, warp {res['warp']}; medians of "
             f"{res['reps']} calls, variants in turn", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in res["rows"]:
        lines.append("| " + " | ".join(f"{r[c]:.3g}" if isinstance(r[c], float) else str(r[c]) for c in COLUMNS) + " |")
    return "\n".join(lines) + "\n"


def write(out_dir, stem: str, rows, markdown, **fields):
    """The record ``stem`` of ``rows`` (with the device and versions, and ``fields``) written to
    ``out_dir`` with its provenance, and printed."""
    dev = jax.devices()[0]
    res = {"device": str(dev), "device_kind": getattr(dev, "device_kind", ""), "jax": jax.__version__,
           "warp": _common.warp().config.version, **fields, "rows": rows}
    provenance.write_record(out_dir, stem, res, markdown(res), command="python " + " ".join(sys.argv))
    print(markdown(res))
    return res


def main(out_dir, bodies, steps, reps, variants):
    return write(out_dir, "gpu_roofline", measure(bodies, steps, reps, variants), markdown, bodies=bodies, steps=steps,
                 reps=reps)


def arguments(doc: str, reps: int) -> argparse.ArgumentParser:
    """The command line shared by the GPU benchmarks of one batch: ``--out``, ``--bodies``, ``--steps``,
    ``--reps``."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--out", default="jaxrot-results")
    ap.add_argument("--bodies", type=int, default=1_000_000)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--reps", type=int, default=reps)
    return ap


if __name__ == "__main__":
    ap = arguments(__doc__, 5)
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, the first the baseline")
    ap.add_argument("--profile", action="store_true", help="only run the as-built kernel twice per dtype")
    ap.add_argument("--device", choices=("gpu", "cpu"), default="gpu")
    args = ap.parse_args()
    jax.config.update("jax_platforms", "cuda" if args.device == "gpu" else "cpu")
    if args.profile:
        profile(args.bodies, args.steps)
    else:
        main(args.out, args.bodies, args.steps, args.reps, [v for v in args.variants.split(",") if v])
