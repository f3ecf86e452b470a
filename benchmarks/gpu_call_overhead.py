"""Where the time of a large fused ``jaxrot.simulate`` call goes outside the kernel, on a GPU.

For ``buss2p`` on the torque-free T-handle (``--bodies`` bodies, ``--steps`` steps, the final state
saved), each row times one call, medians of ``--reps`` calls after a compiling one, the rows in turn:

- ``kernel alone``: the jitted :func:`jaxrot.kernels.fused_frames` call (Warp's Python launch callback
  runs on every call);
- ``simulate``: ``jaxrot.simulate(..., executor=jaxrot.Fused())`` as built: a repeated call goes straight
  to the compiled program bound on the first (XLA replays it as a CUDA graph, without Warp's callback),
  and the check for failed steps reads one number, reduced on the device into the host's pinned memory;
- ``simulate, throw=False``: no check for failed steps (nothing read back);
- ``simulate, previous path``: the program planned anew on every call and the reduction read back
  after it (``int`` of a device scalar);
- ``simulate, readback ...``: as built with the check's readback done otherwise: ``int`` of the device
  scalar, the copy queued as the reduction is dispatched (``copy_to_host_async``), ``block_until_ready``
  then ``int``, Warp's own device-to-host copy;
- ``python return``: the time until ``simulate(..., throw=False)`` returns, without waiting for the
  device (the host's own work).

    python benchmarks/gpu_call_overhead.py --out DIR [--bodies 1000000] [--steps 100] [--reps 7]

Writes ``gpu_call_overhead.json`` and ``gpu_call_overhead.md`` to ``DIR`` with their provenance.
"""

import contextlib
import json
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import jaxrot  # noqa: E402
from jaxrot import problems  # noqa: E402
from jaxrot.driver import failures  # noqa: E402
from jaxrot.driver.executors import base, fused  # noqa: E402
from jaxrot.studies.timing import median_seconds_interleaved  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from gpu_roofline import DT, METHOD, PROBLEM, arguments, kernel_call, write  # noqa: E402
from gpu_fused import random_states  # noqa: E402

AS_BUILT = failures.largest_flag


def read_int(f):
    return int(failures._max_flag(f))


def read_queued(f):
    m = failures._max_flag(f)
    m.copy_to_host_async()
    return int(m)


def read_blocked(f):
    m = failures._max_flag(f)
    m.block_until_ready()
    return int(m)


_max_one = jax.jit(lambda f: jnp.max(f).reshape(1))


def read_warp(f):
    import warp as wp

    m = _max_one(f)
    m.block_until_ready()  # Warp's copy runs on its own stream: the reduction must be done
    dev = next(iter(m.devices()))
    ptr = m.__cuda_array_interface__["data"][0]
    return int(wp.array(ptr=ptr, dtype=wp.int32, shape=(1,), device=f"cuda:{dev.local_hardware_id}").numpy()[0])


READBACKS = {"int of the device scalar": read_int, "copy queued at dispatch": read_queued,
             "block, then int": read_blocked, "Warp's copy": read_warp}


@contextlib.contextmanager
def readback(fn):
    failures.largest_flag = fn
    try:
        yield
    finally:
        failures.largest_flag = AS_BUILT


def simulate_call(s, n, throw=True, read=AS_BUILT, block=True):
    p = problems.get(PROBLEM)

    def run():
        with readback(read):
            traj = jaxrot.simulate(METHOD, p, DT, n, saveat=jaxrot.SaveAt(steps=n), state0=s, executor=jaxrot.Fused(),
                                   throw=throw)
        return traj.states.R.block_until_ready() if block else traj

    return run


def previous_path(s, n):
    """The call as it was: the fused executor's default plan (its ``run`` on every call), the readback
    an ``int`` of the device scalar; a copy of the states, so that this plan is remembered apart."""
    s = jax.tree_util.tree_map(lambda x: x + 0, s)
    bound = fused.Fused.plan
    fused.Fused.plan = base.AbstractExecutor.plan
    try:
        run = simulate_call(s, n, read=read_int)
        run()  # planned (and remembered) while the default plan is in place
    finally:
        fused.Fused.plan = bound
    return run


def measure(B, n, reps):
    rows = []
    for dtype in (jnp.float32, jnp.float64):
        s = random_states(B, dtype)
        calls = {"kernel alone": kernel_call(s, n), "simulate": simulate_call(s, n),
                 "simulate, throw=False": simulate_call(s, n, throw=False),
                 "simulate, previous path": previous_path(s, n)}
        for name, fn in READBACKS.items():
            calls[f"simulate, readback: {name}"] = simulate_call(s, n, read=fn)
        for c in calls.values():
            c()
        med = dict(zip(calls, median_seconds_interleaved(list(calls.values()), reps)))
        ret, py = simulate_call(s, n, throw=False, block=False), []
        for _ in range(reps):
            jax.block_until_ready(ret().states.R)
            t = time.perf_counter()
            traj = ret()
            py.append(time.perf_counter() - t)
            jax.block_until_ready(traj.states.R)
        med["python return (throw=False, not waiting)"] = float(np.median(py))
        for name, t in med.items():
            row = {"dtype": jnp.dtype(dtype).name, "call": name, "ms": 1e3 * t, "body-steps/s": B * n / t,
                   "x kernel alone": med["kernel alone"] / t}
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


COLUMNS = ["dtype", "call", "ms", "body-steps/s", "x kernel alone"]


def markdown(res) -> str:
    lines = [f"# A fused simulate call's time outside the kernel: buss2p, T-handle, {res['bodies']} bodies x "
             f"{res['steps']} steps", "",
             f"device: {res['device']} ({res['device_kind']}); jax {res['jax']}; medians of {res['reps']} calls, "
             "rows in turn", "", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in res["rows"]:
        lines.append("| " + " | ".join(f"{r[c]:.3g}" if isinstance(r[c], float) else str(r[c]) for c in COLUMNS) + " |")
    return "\n".join(lines) + "\n"


def main(out_dir, bodies, steps, reps):
    return write(out_dir, "gpu_call_overhead", measure(bodies, steps, reps), markdown, bodies=bodies, steps=steps,
                 reps=reps)


if __name__ == "__main__":
    args = arguments(__doc__, 7).parse_args()
    main(args.out, args.bodies, args.steps, args.reps)
