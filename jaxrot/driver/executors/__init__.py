"""Executors: how a run is carried out on the hardware (see ``docs/architecture.md``).

- :class:`XLA`: the loop compiled by XLA on one device (a batch ``vmap`` ped).
- :class:`CPUBlocked`: a batch on one device in cache-sized blocks of bodies.
- :class:`Sharded`: a batch split over devices (and processes), blocked on CPUs.
- :class:`Fused`: the whole run in one compiled kernel per device (explicit methods; needs the
  ``fast`` extra).

``executor=None`` chooses: one body runs on :class:`XLA`, a batch on :class:`Sharded` over every
device, except where :class:`Fused` was measured faster (Warp installed, a kernel for the method and
torque, a plain call or one inside ``jax.jit``/``jax.vmap``): on one CUDA GPU from :data:`FUSED_MIN_STEPS_GPU` steps, one body or a batch;
on a CPU one body saving frames from :data:`FUSED_MIN_STEPS` steps, and a batch on one CPU device from
:data:`FUSED_MIN_BODY_STEPS_CPU` body-steps. An error-controlled run (:class:`AttemptSpec`) that the
fused adaptive kernel can run goes there on one CPU device (one body or a batch), and on one CUDA GPU
from :data:`FUSED_ADAPTIVE_MIN_BODIES_GPU` bodies, where the pair's generated attempt is at most
:data:`FUSED_ADAPTIVE_MAX_LINES` lines long (docs/kernels.md, "Which runs are fused"). An
executor asked for explicitly that cannot run the job raises a ValueError saying why
(:meth:`~AbstractExecutor.refusal`); the trajectory's provenance names
the executor that ran it.
"""

from __future__ import annotations

import jax

from ..adjoint import ForwardMode, RecursiveCheckpointAdjoint, mode
from .base import AbstractExecutor, AttemptSpec, RunSpec
from .fused import Fused, kernel_derivative
from .sharded import CPUBlocked, Sharded
from .batch import inputs
from .xla import XLA

__all__ = ["AbstractExecutor", "RunSpec", "AttemptSpec", "XLA", "CPUBlocked", "Sharded", "Fused", "choose_executor"]


def _kernels():
    from ... import kernels  # Warp's code generators load only where a fused run is considered

    return kernels


_ONE, _MANY, _FUSED = XLA(), Sharded(), Fused()  # immutable: built once, not per call

#: the fewest steps for which one body runs fused by default on a CPU (below it XLA's chunked loop,
#: compiled once for any count, was faster; docs/benchmarks.md, "Fused kernels")
FUSED_MIN_STEPS = 100_000


#: the fewest body-steps (bodies x steps) for which a batch on one CPU device runs fused by default:
#: where a new step count's compilation was repaid within a few calls (docs/benchmarks.md, "Fused kernels")
FUSED_MIN_BODY_STEPS_CPU = 100_000


#: the fewest steps for which a run on a GPU runs fused by default: the fewest measured there
#: (docs/benchmarks.md, "Fused kernels on a GPU")
FUSED_MIN_STEPS_GPU = 100


#: the fewest bodies for which an error-controlled batch on one CUDA GPU runs fused by default: the
#: batch the fused adaptive kernel was measured on there (docs/benchmarks.md, "Heterogeneous batches")
FUSED_ADAPTIVE_MIN_BODIES_GPU = 100_000


#: the longest generated attempt (lines of Warp source) an error-controlled run is fused with by default:
#: up to it a first call writes out, checks and compiles the attempt in two to three times the time XLA takes to
#: compile its own loop (rkmk8(5), buss4(3), lie_taylor5(4); docs/benchmarks.md, "Generated
#: error-controlled kernels"); a longer one (a splitting on the exact flow: ten thousand lines, its
#: first call tens of seconds) runs fused when asked for with executor=Fused(). jaxrot.suggest fuses the
#: constant-step method it suggests up to the same length
FUSED_ADAPTIVE_MAX_LINES = 5_000


def _platform() -> str:
    return jax.devices()[0].platform


def _fused_wins(spec: RunSpec) -> bool:
    """Where the fused kernel was measured faster. On a CPU: one body, saved frames (a final-state run
    keeps XLA's one program for any count), at least :data:`FUSED_MIN_STEPS` steps; a batch on one
    CPU device (one process), at least :data:`FUSED_MIN_BODY_STEPS_CPU` body-steps (several devices
    keep :class:`Sharded` until measured). On one CUDA GPU in one process: one body or a batch, at
    least :data:`FUSED_MIN_STEPS_GPU` steps (XLA launches a step's ~25 kernels one after another, the
    fused run one kernel). Both: a plain call or one inside ``jax.jit``/``jax.vmap``, or a differentiated
    run whose derivative the kernels take (:func:`_kernels_differentiate`); no progress report (one
    launch has no chunks to report), no ``unroll``, Warp installed and a kernel for the method and
    torque that loses none of its step statistics; with an event (its condition restated) on a CPU
    only, where it was measured."""
    if isinstance(spec, AttemptSpec):
        return _fused_adaptive_wins(spec)
    if not isinstance(spec, RunSpec) or spec.monitor is not None:
        return False
    kernels = _kernels()
    platform = _platform()
    if spec.event is not None and platform != "cpu":  # the kernels' events are measured on a CPU only
        return False
    if platform == "cpu":
        if spec.batched:
            where = spec.state0.R.shape[0] * spec.n_steps >= FUSED_MIN_BODY_STEPS_CPU and _one_device()
        else:
            where = not spec.final_only and spec.n_steps >= FUSED_MIN_STEPS
    else:
        where = platform == "gpu" and spec.n_steps >= FUSED_MIN_STEPS_GPU and _one_cuda_gpu()
    # inside jax.jit / jax.vmap as in a plain call (shapes and options decide); a differentiated run where
    # the kernels take its derivative too (else the XLA loop, whose derivatives a fused run would borrow)
    return (where and spec.report is None and spec.unroll == 1 and kernels.have_warp()
            and kernels.hand_kernel(spec.method, spec.system) is not None
            and Fused.supports(_FUSED, spec) and kernels.keeps_stats(spec.method)
            and (mode(inputs(spec)) is None or _kernels_differentiate(spec)))


def _kernels_differentiate(spec: RunSpec) -> bool:
    """Whether the kernels take the derivative of a differentiated constant-step run
    (:func:`jaxrot.kernels.adaptive_derivatives.fixed_reason`): reverse mode alone or forward mode, read
    from the inputs' tracers at the call."""
    from ...kernels.adaptive_derivatives import fixed_reason

    bodies = spec.state0.R.shape[0] if spec.batched else 1
    return fixed_reason(spec.method, spec.system, spec.state0.R.dtype, bodies, spec.n_frames, spec.save_every,
                        kernel_derivative(spec), spec.event) is None


def _fused_adaptive_wins(spec: AttemptSpec) -> bool:
    """Where the fused adaptive kernel was measured faster than XLA's error-controlled loop: on one CPU
    device, one body or a batch of any size (each body stops when it is done); on one CUDA GPU,
    batches of at least :data:`FUSED_ADAPTIVE_MIN_BODIES_GPU` bodies. Both: an attempt generated from
    the pair's JAX code of at most :data:`FUSED_ADAPTIVE_MAX_LINES` lines (a registered pair or yours:
    the measure is written out before anything is compiled), a plain call or one inside ``jax.jit``/``jax.vmap``,
    or under ``jax.grad`` where the kernels run the backward pass too
    (:func:`jaxrot.kernels.adaptive.backward_reason`; other differentiated runs keep the XLA loop, whose
    derivatives a fused run would borrow), Warp installed and a run the kernel supports
    (:meth:`Fused.refusal`)."""
    platform = _platform()
    if platform == "cpu":
        where = _one_device()
    else:
        where = (platform == "gpu" and spec.batched and spec.state0.R.shape[0] >= FUSED_ADAPTIVE_MIN_BODIES_GPU
                 and _one_cuda_gpu())
    if not where or not _kernels().have_warp():
        return False
    from ...kernels import adaptive_pairs
    from ...kernels.adaptive import backward_reason as adaptive_backward_reason

    if (not adaptive_pairs.attempt_within(spec.method, spec.system, spec.event, FUSED_ADAPTIVE_MAX_LINES)
            or not Fused.supports(_FUSED, spec)):
        return False
    how = mode(jax.tree_util.tree_leaves((spec.method, spec.system, spec.state0, spec.t0, spec.targets, spec.rtol,
                                          spec.atol, spec.dt0, spec.event)))
    if how is None:  # a plain call, or inside jax.jit / jax.vmap: decided from shapes and options alone
        return True
    # differentiated: fused where the kernels run the derivative pass too, reverse or forward mode (else
    # the XLA loop's derivatives, without the fused forward run beside them)
    if how == "reverse" and isinstance(spec.adjoint, RecursiveCheckpointAdjoint):
        kind = "vjp"
    elif how == "forward" and isinstance(spec.adjoint, ForwardMode):
        kind = "jvp"
    else:
        return False
    return adaptive_backward_reason(spec.method, spec.system, spec.state0.R.dtype, spec.event, kind) is None


def _one_device() -> bool:
    return len(jax.devices()) == 1 and jax.process_count() == 1


def _one_cuda_gpu() -> bool:
    """One process with one GPU that Warp can launch on (an NVIDIA GPU with its driver): where the fused
    GPU runs were measured. Several GPUs or processes keep :class:`Sharded` until measured."""
    kernels = _kernels()
    return _one_device() and kernels.have_warp() and kernels.warp().is_cuda_available()


def _default(spec) -> AbstractExecutor:
    if _fused_wins(spec):
        return _FUSED
    return _MANY if spec.batched else _ONE


def choose_executor(executor, spec) -> AbstractExecutor:
    """The executor that runs ``spec``: the automatic choice for None; ``executor`` itself if it can run
    it, else a ValueError saying why (an explicit choice is never replaced silently)."""
    if executor is None:
        return _default(spec)
    if not isinstance(executor, AbstractExecutor):
        raise TypeError(f"executor must be a jaxrot executor (XLA(), CPUBlocked(), Sharded(), Fused()) or None, "
                        f"got {executor!r}")
    why = type(executor).refusal(executor, spec)
    if why is not None:
        raise ValueError(f"executor={type(executor).__name__}() cannot run this job: {why}. Pass executor=None to let "
                         "jaxrot choose.")
    return executor
