"""Executors: how a run is carried out on the hardware (see ``docs/architecture.md``).

- :class:`XLA`: the loop compiled by XLA on one device (a batch ``vmap`` ped).
- :class:`CPUBlocked`: a batch on one device in cache-sized blocks of bodies.
- :class:`Sharded`: a batch split over devices (and processes), blocked on CPUs.
- :class:`Fused`: the whole run in one compiled kernel per device (explicit methods; needs the
  ``fast`` extra).

``executor=None`` chooses: one body runs on :class:`XLA`, a batch on :class:`Sharded` over every
device, except where :class:`Fused` was measured faster (Warp installed, a kernel for the method and
torque, a plain call): on one CUDA GPU from :data:`FUSED_MIN_STEPS_GPU` steps, one body or a batch;
on a CPU one body saving frames from :data:`FUSED_MIN_STEPS` steps, and a batch on one CPU device from
:data:`FUSED_MIN_BODY_STEPS_CPU` body-steps. An executor that cannot run a method
(:meth:`~AbstractExecutor.supports`) hands it to that default; the trajectory's provenance names the
executor that ran it.
"""

from __future__ import annotations

import jax

from ... import kernels
from .base import AbstractExecutor, RunSpec
from .fused import Fused
from .sharded import CPUBlocked, Sharded
from .xla import XLA, traced

__all__ = ["AbstractExecutor", "RunSpec", "XLA", "CPUBlocked", "Sharded", "Fused", "choose_executor"]


_ONE, _MANY, _FUSED = XLA(), Sharded(), Fused()  # immutable: built once, not per call

#: the fewest steps for which one body runs fused by default. Measured on a CPU (docs/benchmarks.md,
#: "Fused kernels"): a 10-step call 1.15x slower than XLA, 1 000 steps 2.2x faster, 100 000 steps 5.9x
#: faster. Below this count the XLA loop is kept: its chunked programs are reused for any step count
#: (the fused program is compiled per frame count, ~80 ms, as XLA's output joining is)
FUSED_MIN_STEPS = 100_000


#: the fewest body-steps (bodies x steps) for which a batch on one CPU device runs fused by default.
#: The fused run was measured faster on every batch tried (docs/benchmarks.md, "Fused kernels",
#: figures/cpu_batch_choice.md), but its program is compiled for each step count, where XLA's loop
#: reuses its chunks, so a first call with a new count can be slower fused: from this count the
#: faster calls repaid that within a few calls of the same count, below it after up to hundreds
FUSED_MIN_BODY_STEPS_CPU = 100_000


#: the fewest steps for which a run on a GPU runs fused by default: the fewest measured there (one
#: H200, docs/benchmarks.md, "Fused kernels on a GPU": 4.5-35x XLA's speed at 100 steps of 10^6 bodies,
#: 1 000 of 10^4 and 2 000 of one body, final state saved; fewer steps were not measured)
FUSED_MIN_STEPS_GPU = 100


def _platform() -> str:
    return jax.devices()[0].platform


def _fused_wins(spec: RunSpec) -> bool:
    """Where the fused kernel was measured faster. On a CPU: one body, saved frames (a final-state run
    keeps XLA's one program for any count), at least :data:`FUSED_MIN_STEPS` steps; a batch on one
    CPU device (one process), at least :data:`FUSED_MIN_BODY_STEPS_CPU` body-steps (several devices
    keep :class:`Sharded` until measured). On one CUDA GPU in one process: one body or a batch, at
    least :data:`FUSED_MIN_STEPS_GPU` steps (XLA launches a step's ~25 kernels one after another, the
    fused run one kernel). Both: a plain call (traced runs keep XLA's
    forward-mode AD), no progress report (one launch has no chunks to report), no ``unroll``, Warp
    installed and a kernel for the method and torque that loses none of its step statistics."""
    platform = _platform()
    if platform == "cpu":
        if spec.batched:
            where = spec.state0.R.shape[0] * spec.n_steps >= FUSED_MIN_BODY_STEPS_CPU and _one_device()
        else:
            where = not spec.final_only and spec.n_steps >= FUSED_MIN_STEPS
    else:
        where = platform == "gpu" and spec.n_steps >= FUSED_MIN_STEPS_GPU and _one_cuda_gpu()
    return (where and spec.report is None and spec.unroll == 1 and kernels.have_warp() and not traced(spec)
            and Fused.supports(_FUSED, spec) and kernels.keeps_stats(spec.method))


def _one_device() -> bool:
    return len(jax.devices()) == 1 and jax.process_count() == 1


def _one_cuda_gpu() -> bool:
    """One process with one GPU that Warp can launch on (an NVIDIA GPU with its driver): where the fused
    GPU runs were measured. Several GPUs or processes keep :class:`Sharded` until measured."""
    return _one_device() and kernels.have_warp() and kernels.warp().is_cuda_available()


def _default(spec: RunSpec) -> AbstractExecutor:
    if _fused_wins(spec):
        return _FUSED
    return _MANY if spec.batched else _ONE


def choose_executor(executor, spec: RunSpec) -> AbstractExecutor:
    """The executor that runs ``spec``: ``executor`` if it supports it, else the default."""
    if executor is None:
        return _default(spec)
    if not isinstance(executor, AbstractExecutor):
        raise TypeError(f"executor must be a jaxrot executor (XLA(), CPUBlocked(), Sharded(), Fused()) or None, "
                        f"got {executor!r}")
    return executor if type(executor).supports(executor, spec) else _default(spec)
