"""Executors: how a run is carried out on the hardware (see ``docs/architecture.md``).

- :class:`XLA`: the loop compiled by XLA on one device (a batch ``vmap`` ped).
- :class:`CPUBlocked`: a batch on one device in cache-sized blocks of bodies.
- :class:`Sharded`: a batch split over devices (and processes), blocked on CPUs.
- :class:`Fused`: the whole run in one compiled kernel per device (explicit methods; needs the
  ``fast`` extra).

``executor=None`` chooses: one body runs on :class:`XLA`, a batch on :class:`Sharded` over every
device. An executor that cannot run a method (:meth:`~AbstractExecutor.supports`) hands it to that
default; the trajectory's provenance names the executor that ran it.
"""

from __future__ import annotations

from .base import AbstractExecutor, RunSpec
from .fused import Fused
from .sharded import CPUBlocked, Sharded
from .xla import XLA

__all__ = ["AbstractExecutor", "RunSpec", "XLA", "CPUBlocked", "Sharded", "Fused", "choose_executor"]


_ONE, _MANY = XLA(), Sharded()  # immutable: built once, not per call


def _default(spec: RunSpec) -> AbstractExecutor:
    return _MANY if spec.batched else _ONE


def choose_executor(executor, spec: RunSpec) -> AbstractExecutor:
    """The executor that runs ``spec``: ``executor`` if it supports it, else the default."""
    if executor is None:
        return _default(spec)
    if not isinstance(executor, AbstractExecutor):
        raise TypeError(f"executor must be a jaxrot executor (XLA(), CPUBlocked(), Sharded(), Fused()) or None, "
                        f"got {executor!r}")
    return executor if type(executor).supports(executor, spec) else _default(spec)
