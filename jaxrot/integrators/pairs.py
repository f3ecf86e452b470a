"""Embedded pairs: a method whose step also returns an estimate of its local error.

An error-controlled run (:class:`jaxrot.Adaptive`) needs, for every attempted step, the step's
result and an estimate of its error. A pair's :meth:`AbstractPair.step_with_error` returns both: the
higher-order result (kept: local extrapolation) and the difference to a lower-order result from the
same state, packed as the 12 numbers of ``(R, Pi)`` (:func:`jaxrot.physics.flow.pack_body`). Its
plain :meth:`~AbstractPair.step` is the higher-order method's, so a pair also runs with fixed steps.

- :class:`EmbeddedPair` ``(high, low)``: two methods, each taking the step in full.
- :class:`jaxrot.integrators.RKMK8Pair` (``rkmk8(5)``): both solutions from one set of stages.
- :class:`jaxrot.integrators.RKMK8DOP853Pair` (``rkmk8(5,3)``): DOP853's own estimate, from its fifth-
  and third-order solutions combined (:meth:`AbstractPair.error_norm` overridden).

The controller measures an attempt by :meth:`AbstractPair.error_norm` of the pair: by default the
scaled RMS norm of the difference (:func:`scaled_rms`).

Reference: Hairer, Norsett & Wanner, *Solving ODEs I*, II.4 (embedded formulas, local extrapolation).
"""

from __future__ import annotations

import abc
from typing import Any

import jax
import jax.numpy as jnp

from ..geometry.state import State
from ..physics.flow import pack_body
from ._base import AbstractIntegrator
from .stats import StepStats


@jax.custom_jvp
def _sqrt_zero_safe(x):
    """``sqrt(x)`` with derivative 0 at 0: a finished body of a vmapped loop takes steps of length 0,
    whose error is 0, and sqrt's infinite derivative times a zero tangent gave NaN in reverse mode."""
    return jnp.sqrt(x)


@_sqrt_zero_safe.defjvp
def _sqrt_zero_safe_jvp(primals, tangents):
    (x,), (dx,) = primals, tangents
    y = jnp.sqrt(x)
    pos = x > 0
    return y, jnp.where(pos, 0.5 / jnp.where(pos, y, 1.0), 0.0) * dx


#: the PI controller's constants (Hairer & Wanner, Solving ODEs II, IV.2), for :func:`adapt`
SAFETY, FACTOR_MIN, FACTOR_MAX, P_COEFF, I_COEFF = 0.9, 0.2, 5.0, 0.7, 0.4
#: errors below this are taken as this (the step grows by at most FACTOR_MAX anyway)
ERROR_FLOOR = 1e-10
#: a step reaching within this (relative, at least absolute) of an output time is shortened to land on it
LANDING = 1e-12


def scaled_rms(y, y1, y_err, rtol, atol):
    """``sqrt(mean((y_err / (atol + rtol max(|y|, |y1|)))^2))`` over the packed numbers of a step from
    ``y`` to ``y1`` (non-finite: inf, so the step is rejected)."""
    sc = atol + rtol * jnp.maximum(jnp.abs(y), jnp.abs(y1))
    err = _sqrt_zero_safe(jnp.mean((y_err / sc) ** 2))
    return jnp.where(jnp.isfinite(err), err, jnp.inf)


def adapt(q: int, err, err_prev, h, step, hit):
    """The PI controller: ``(accepted, next step, err_prev for the next attempt)`` after an attempt of
    length ``step`` (``h`` shortened to land on an output time where ``hit``) with scaled error ``err``,

        fac = clip(SAFETY e^(-P/(q+1)) err_prev^(I/(q+1)), FACTOR_MIN, FACTOR_MAX)   (accepted)
        fac = clip(SAFETY e^(-P/(q+1)), FACTOR_MIN, FACTOR_MAX)                      (rejected)

    with ``e = max(err, ERROR_FLOOR)``; a non-finite ``err`` rejects the attempt and shrinks the step by
    ``FACTOR_MIN``; a step shortened to land on an output time does not shrink the next one. The XLA
    loop calls it; the fused kernels' loop is generated from it (:mod:`jaxrot.kernels.generate_pieces`).

    Example::

        ok, h_next, err_prev = adapt(4, err, err_prev, h, h, False)
    """
    alpha, beta = P_COEFF / (float(q) + 1.0), I_COEFF / (float(q) + 1.0)
    ok = err <= 1.0
    e = jnp.maximum(err, ERROR_FLOOR)
    fac = jnp.where(ok, SAFETY * e ** (-alpha) * err_prev ** beta, SAFETY * e ** (-alpha))
    # (a NaN error, which a pair's own norm may give, would otherwise make the next step NaN)
    fac = jnp.where(jnp.isfinite(err), jnp.clip(fac, FACTOR_MIN, FACTOR_MAX), FACTOR_MIN)
    # no derivative through the step-size choice (as diffrax's PIDController): an error estimate near
    # round-off has a derivative that is noise, and a reverse pass, which recomputes the loop from
    # checkpoints, may see other round-off; the run's derivative is that of its steps as taken
    fac = jax.lax.stop_gradient(fac)
    h_new = jax.lax.stop_gradient(jnp.where(ok & hit, jnp.maximum(h, step * fac), step * fac))
    return ok, h_new, jax.lax.stop_gradient(jnp.where(ok, e, err_prev))


def first_step(q: int, J, Pi0, rtol, t_first):
    """The first trial step of a pair whose estimate has order ``q + 1``: a tenth of the time the
    body turns through ``rtol^(1/(q+1))`` radians, at most up to the first output time. The XLA loop
    and the fused adaptive kernels both take it from here (the same operations, the same steps); a
    choice of the controller, it carries no derivative."""
    w = jnp.linalg.norm(Pi0 / J)
    h0 = 0.1 * jnp.maximum(rtol, 1e-16) ** (1.0 / (float(q) + 1.0)) / jnp.maximum(w, 1e-12)
    return jax.lax.stop_gradient(jnp.minimum(h0, t_first))


def first_interval(t0, targets):
    """The time from ``t0`` to the first output time after it (``targets`` increasing; a traced
    ``SaveAt(ts)`` may begin at ``t0`` itself, whose frame is the initial state, written without a step)."""
    return targets[jnp.argmax(targets > t0)] - t0


class AbstractPair(AbstractIntegrator):
    """An integrator whose step also estimates its local error (see the module docstring).

    ``error_order`` is the order the PI controller's exponents take (``alpha = 0.7 / (q + 1)``): the
    order of the lower solution the estimate measures; ``error_norm`` turns a step's estimate into
    the scaled error the controller accepts at most 1.
    """

    def error_order(self) -> int:
        """The order of the lower-order solution (the estimate's order is this plus one)."""
        raise NotImplementedError

    def error_norm(self, y, y1, y_err, rtol, atol):
        """The scaled error of an attempt from the packed state ``y`` to ``y1`` with estimate ``y_err``
        (what :meth:`step_with_error` returns): :func:`scaled_rms` by default."""
        return scaled_rms(y, y1, y_err, rtol, atol)

    @abc.abstractmethod
    def step_with_error(self, system, t, state: State, aux: Any, dt) -> tuple[State, Any, StepStats, jax.Array]:
        """``(higher-order state, aux, stats, y_high - y_low)``, the difference packed as 12 numbers."""

    def step(self, system, t, state, aux, dt):
        return self.step_with_error(system, t, state, aux, dt)[:3]


class EmbeddedPair(AbstractPair):
    """Two methods of different orders taking every step from the same state; the higher one's
    result is kept, their difference estimates the lower one's local error.

    Args:
      high: the method whose result is kept (its order is the pair's).
      low: a method of lower order.

    Example::

        pair = EmbeddedPair(jaxrot.get("buss4"), jaxrot.get("buss3"))      # registered as "buss4(3)"
    """

    high: AbstractIntegrator
    low: AbstractIntegrator

    def __check_init__(self):
        if not self.high.order > self.low.order:
            raise ValueError(f"an embedded pair needs a higher-order first method; got orders {self.high.order} "
                             f"and {self.low.order}")

    order = property(lambda self: self.high.order)
    free_order = property(lambda self: self.high.free_order)
    conserves = property(lambda self: self.high.conserves)
    implicit = property(lambda self: self.high.implicit or self.low.implicit)
    torque = property(lambda self: self.high.torque and self.low.torque)
    on_so3 = property(lambda self: self.high.on_so3)
    torque_evals = property(lambda self: f"{self.high.torque_evals} + {self.low.torque_evals}")
    reference = property(lambda self: self.high.reference)
    family = property(lambda self: self.high.family)

    def error_order(self) -> int:
        return int(self.low.order)

    def init(self, system, t0, state0, dt):
        return self.high.init(system, t0, state0, dt)

    def step_with_error(self, system, t, state, aux, dt):
        yp, aux_p, stats = self.high.step(system, t, state, aux, dt)
        yq, _, _ = self.low.step(system, t, state, self.low.init(system, t, state, dt), dt)
        return yp, aux_p, stats, pack_body(yp.R, yp.Pi) - pack_body(yq.R, yq.Pi)
