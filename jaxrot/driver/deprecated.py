"""Older spellings of :func:`jaxrot.simulate`, kept working with a ``DeprecationWarning`` (not in
``jaxrot.__all__``)."""

from __future__ import annotations

import warnings

import jax.numpy as jnp

from ..physics.problems import Problem
from .controllers import Adaptive
from .executors.sharded import Sharded
from .global_error import GlobalError
from .saveat import SaveAt
from .simulate import simulate

__all__ = ["simulate_batch", "final_state", "simulate_adaptive", "simulate_to_tolerance", "pairs"]


def _deprecated(old: str, new: str):
    warnings.warn(f"jaxrot.{old} is deprecated: use {new}", DeprecationWarning, stacklevel=3)


def simulate_batch(method, problems, dt, n_steps, *, states0=None, save_every=1, t0=0.0, throw=True, devices=None,
                   unroll=1, block_size="auto", monitor=None):
    """Deprecated: ``simulate(method, problems, dt, n_steps, state0=states0, saveat=SaveAt(steps=k),
    executor=Sharded(devices, block_size))``."""
    _deprecated("simulate_batch", "jaxrot.simulate(..., state0=batch, executor=jaxrot.Sharded(devices, block_size))")
    if states0 is None and isinstance(problems, Problem) and jnp.ndim(problems.body.J) != 2:
        raise ValueError("without states0, problems must be stacked (leading batch axis): use stack_problems")
    if states0 is not None and jnp.ndim(states0.R) != 3:
        raise ValueError(f"states0 must have one leading batch axis, got R of shape {jnp.shape(states0.R)}")
    return simulate(method, problems, dt, n_steps, state0=states0, saveat=SaveAt(steps=save_every), t0=t0,
                    throw=throw, unroll=unroll, monitor=monitor, executor=Sharded(devices, block_size))


def final_state(method, problem, dt, n_steps, *, state0=None, t0=0.0, throw=True):
    """Deprecated: ``simulate(method, problem, dt, n_steps, state0=state0, saveat=SaveAt(t0=False)).final``."""
    _deprecated("final_state", "jaxrot.simulate(..., saveat=jaxrot.SaveAt(t0=False)).final")
    return simulate(method, problem, dt, n_steps, state0=state0, t0=t0, throw=throw, saveat=SaveAt(t0=False)).final


def simulate_adaptive(pair, problem, t1, *, rtol=1e-6, atol=1e-9, saveat=None, state0=None, t0=0.0, dt0=None,
                      max_steps=100_000):
    """Deprecated: ``simulate(pair, problem, t1=t1, stepsize=Adaptive(rtol, atol, max_steps=...), dt=dt0,
    saveat=SaveAt(t0=False, ts=saveat), throw=False)``."""
    _deprecated("simulate_adaptive", "jaxrot.simulate(pair, problem, t1=..., stepsize=jaxrot.Adaptive(rtol, atol))")
    return _alias(pair, problem, t1, Adaptive(rtol, atol, max_steps=max_steps), dt0, saveat, state0, t0)


def simulate_to_tolerance(pair, problem, t1, *, rtol=1e-6, atol=1e-9, saveat=None, state0=None, t0=0.0, dt0=None,
                          max_steps=100_000):
    """Deprecated: ``simulate(..., stepsize=GlobalError(Adaptive(rtol, atol)))``."""
    _deprecated("simulate_to_tolerance", "jaxrot.simulate(pair, problem, t1=..., "
                                         "stepsize=jaxrot.GlobalError(jaxrot.Adaptive(rtol, atol)))")
    return _alias(pair, problem, t1, GlobalError(Adaptive(rtol, atol, max_steps=max_steps)), dt0, saveat, state0, t0)


def _alias(pair, problem, t1, stepsize, dt0, saveat, state0, t0):
    at = SaveAt(t0=False, t1=saveat is None, ts=saveat)
    return simulate(pair, problem, dt0, t0=t0, t1=t1 if saveat is None else None, stepsize=stepsize, saveat=at,
                    state0=state0, throw=False)


def pairs() -> dict:
    """Deprecated ``jaxrot.PAIRS``: the registered embedded pairs (name -> (high, low))."""
    from ..integrators import REGISTRY, RKMK8Embedded5, EmbeddedPair

    out = {}
    for name, info in REGISTRY.items():
        if info.error_order is not None:
            m = info.factory()
            out[name] = (m.high, m.low) if isinstance(m, EmbeddedPair) else ("rkmk8", RKMK8Embedded5())
    return out
