"""RKMK8: Dormand and Prince's eighth-order Runge-Kutta method lifted to the rotation group.

The Runge-Kutta-Munthe-Kaas construction (as :mod:`.rkmk` for RK4) with the twelve stages of the
eighth-order solution of DOP853 and the inverse differential of the exponential in closed form, so
the lifted method keeps the order of its tableau for any torque. The attitude is
``R = R_n exp(hat(U))`` with ``U' = dexp^{-1}_{-U}(Omega)``; the momentum is a vector:

    U_i  = h sum_j a_ij K_j,           Pi_i = Pi_n + h sum_j a_ij F_j,
    Om_i = Pi_i / J,                   R_i = R_n exp(hat(U_i)),
    K_i  = Om_i + 1/2 U_i x Om_i + c(|U_i|) U_i x (U_i x Om_i),
    F_i  = Pi_i x Om_i + T(t_n + c_i h, R_i, Pi_i),
    R_{n+1} = R_n exp(h hat(sum_i b_i K_i)),   Pi_{n+1} = Pi_n + h sum_i b_i F_i,

with ``c(a) = (1 - (a/2) cot(a/2)) / a^2`` (its Taylor series for small ``a``; the series of RKMK4,
1/12 + ..., truncated, would cap the order at 4).

The same stages with DOP853's embedded fifth-order weights ``bhat`` give a fifth-order solution
(:class:`RKMK8Embedded5`): the pair ``rkmk8(5)`` (:class:`RKMK8Pair`) estimates each step's error from
it for adaptive steps at the cost of the eighth-order step alone (the lifted equation
for ``U`` lives in a vector space, where the embedded Runge-Kutta solution keeps its order). The pair
``rkmk8(5,3)`` (:class:`RKMK8DOP853Pair`) takes DOP853's own estimate instead, which combines the
fifth- and third-order solutions into one that behaves as an eighth-order error.

Order 8 with any torque, R on SO(3) to round-off, explicit, twelve torque evaluations per step;
nothing is conserved exactly (the energy error is of order h^8, not bounded over long times like
a symplectic method's). Its niche: high accuracy per step where a torque leaves no integrable
splitting cheap (asymmetric torqued bodies, time-dependent torques).

References: H. Munthe-Kaas, "High order Runge-Kutta methods on manifolds", Appl. Numer. Math. 29
(1999) 115-127; J. R. Dormand, P. J. Prince, "A family of embedded Runge-Kutta formulae",
J. Comput. Appl. Math. 6 (1980) 19-26 and Hairer, Norsett & Wanner, *Solving ODEs I*, II.10 (DOP853).
"""

from __future__ import annotations

import functools
from typing import ClassVar

import jax.numpy as jnp
from jax import lax

from ..geometry import so3
from ..geometry.state import State
from ..physics.torques import body_torque
from ._base import AbstractIntegrator
from .dop853_coefficients import A as _A
from .dop853_coefficients import B as _B
from .dop853_coefficients import C as _C
from .dop853_coefficients import E3 as _E3
from .dop853_coefficients import E5 as _E5
from ..physics.flow import pack_body
from .pairs import AbstractPair
from .stats import StepStats

_dot = functools.partial(jnp.matmul, precision=lax.Precision.HIGHEST)


class RKMK8(AbstractIntegrator):
    order: ClassVar[int] = 8
    torque_evals: ClassVar[str] = "12"
    reference: ClassVar[str] = "Munthe-Kaas 1999; Dormand-Prince 8 (DOP853)"
    family: ClassVar[str] = "high-order"

    def stages(self, system, t, state, dt):
        """The twelve stages ``(K_i, F_i)`` of a step, stacked ``(12, 3)`` each."""
        J, R0, P0 = system.body.J, state.R, state.Pi
        dtype = P0.dtype
        n = _B.shape[0]
        # the stages stacked in one array and combined by a product with the tableau's row (as
        # diffrax's Runge-Kutta solvers do): a chain of sums over the earlier stages, one term each,
        # gives XLA a larger and slower program (docs/benchmarks.md, "rkmk8"). Batched, these products
        # contract 13 stages, which XLA hands to the GPU's matrix units: at the default precision a
        # float32 run then rounds the stages to TF32 (10-bit mantissa), hence HIGHEST
        Ks = jnp.zeros((n, 3), dtype)
        Fs = jnp.zeros((n, 3), dtype)
        for i in range(n):
            a = jnp.asarray(_A[i], dtype)
            U, P = dt * _dot(a, Ks), P0 + dt * _dot(a, Fs)
            Om = P / J
            Ks = Ks.at[i].set(so3.dexpinv(-U, Om))  # dexp^{-1}_{-U}
            Fs = Fs.at[i].set(jnp.cross(P, Om) + body_torque(system, t + float(_C[i]) * dt, R0 @ so3.exp(U), P))
        return Ks, Fs

    @staticmethod
    def combine(state, Ks, Fs, weights, dt) -> State:
        """``R_n exp(h hat(sum_i w_i K_i))``, ``Pi_n + h sum_i w_i F_i``."""
        w = jnp.asarray(weights, state.Pi.dtype)
        return State(state.R @ so3.exp(dt * _dot(w, Ks)), state.Pi + dt * _dot(w, Fs))

    def step(self, system, t, state, aux, dt):
        Ks, Fs = self.stages(system, t, state, dt)
        return self.combine(state, Ks, Fs, _B, dt), aux, StepStats.explicit()

    def step_embedded(self, system, t, state, aux, dt):
        """``(the eighth-order step, aux, stats, the embedded fifth-order solution)`` from one set of
        stages."""
        Ks, Fs = self.stages(system, t, state, dt)
        return (self.combine(state, Ks, Fs, _B, dt), aux, StepStats.explicit(),
                self.combine(state, Ks, Fs, _B - _E5, dt))


class RKMK8Embedded5(AbstractIntegrator):
    """The fifth-order solution embedded in :class:`RKMK8`'s stages (DOP853's ``bhat``), as a method
    of its own. Order 5 with any torque, R on SO(3) to round-off, twelve torque evaluations per step.
    The error-controlled pair ``rkmk8(5)`` is :class:`RKMK8Pair`, which takes both solutions from
    one set of stages.

    Reference: Hairer, Norsett & Wanner, *Solving ODEs I*, II.10 (DOP853's error estimator).
    """

    order: ClassVar[int] = 5
    torque_evals: ClassVar[str] = "12"
    reference: ClassVar[str] = "Munthe-Kaas 1999; Dormand-Prince 8(5,3) (DOP853)"
    family: ClassVar[str] = "high-order"

    def step(self, system, t, state, aux, dt):
        return RKMK8().step_embedded(system, t, state, aux, dt)[3], aux, StepStats.explicit()


class RKMK8Pair(AbstractPair):
    """``rkmk8(5)``: RKMK8 with the error estimate of its embedded fifth-order solution, both from one
    set of twelve stages (an attempted step costs one RKMK8 step). Order 8; the estimate is of order 5.

    Reference: Hairer, Norsett & Wanner, *Solving ODEs I*, II.10 (DOP853).
    """

    order: ClassVar[int] = 8
    torque_evals: ClassVar[str] = "12"
    reference: ClassVar[str] = "Munthe-Kaas 1999; Dormand-Prince 8(5,3) (DOP853)"
    family: ClassVar[str] = "high-order"

    def error_order(self) -> int:
        return 5

    def step_with_error(self, system, t, state, aux, dt):
        yp, aux, stats, yq = RKMK8().step_embedded(system, t, state, aux, dt)
        return yp, aux, stats, pack_body(yp.R, yp.Pi) - pack_body(yq.R, yq.Pi)


def dop853_error(y, y1, d, rtol, atol):
    """DOP853's scaled error of an RKMK8 step from the packed state ``y`` (12 numbers) to ``y1``, with
    ``d`` (2, 6) the step's fifth- and third-order estimates in the lifted coordinates: rows
    ``(h sum_i e_i K_i, h sum_i e_i F_i)`` for ``e = E5``, ``E3``,

        e5 = mean((d_5 / sc)^2),   e3 = mean((d_3 / sc)^2),   err = e5 / sqrt(e5 + 0.01 e3),

    with the scale ``sc = atol + rtol`` for the three attitude numbers (radians of the step's rotation
    vector; the attitude's entries are at most 1) and ``atol + rtol max(|Pi|, |Pi_1|)`` for the
    momentum's; 0 where both estimates are 0, infinite where not finite (the step is rejected).
    Hairer, Norsett & Wanner's code DOP853 (and SciPy's) computes the same quantity with the 2-norm
    over the state's components."""
    n = y.shape[-1]
    sp = atol + rtol * jnp.maximum(jnp.abs(y[n - 3:]), jnp.abs(y1[n - 3:]))
    sc = jnp.concatenate([jnp.broadcast_to(atol + rtol, (3,)).astype(sp.dtype), sp])
    e5 = jnp.mean((d[0] / sc) ** 2)
    e3 = jnp.mean((d[1] / sc) ** 2)
    den = e5 + 0.01 * e3
    pos = den > 0
    # the safe denominator keeps the derivative finite at a zero estimate (a finished body's steps
    # of length 0 in a vmapped loop)
    err = jnp.where(pos, e5 / jnp.sqrt(jnp.where(pos, den, 1.0)), 0.0)
    return jnp.where(jnp.isfinite(err) & jnp.isfinite(den), err, jnp.inf)


class RKMK8DOP853Pair(AbstractPair):
    """``rkmk8(5,3)``: RKMK8 with DOP853's error estimate, from one set of twelve stages (an attempted
    step costs one RKMK8 step).

    DOP853 estimates a step's error from two embedded solutions, of orders five and three, combined
    (Hairer, Norsett & Wanner II.10):

        err = e5 / sqrt(e5 + 0.01 e3)

    where ``e5``, ``e3`` are the mean squared scaled differences of the step to its fifth- and
    third-order solutions (:func:`dop853_error`). For small steps ``e3`` dominates the root and
    ``err ~ e5 / (0.1 sqrt(e3)) = O(h^12 / h^4) = O(h^8)``: an estimate of the eighth-order error,
    taken with the controller's exponents of order 7 (``error_order``; DOP853's ``1/8``). The kept
    result is eighth order, so the error a run ends with follows the tolerance asked
    (``docs/user_guide/running.md``): ``rkmk8(5)``'s fifth-order estimate overestimates the
    eighth-order step's error more the tighter the tolerance, and spends steps on accuracy no one
    asked for. The differences are taken in the lifted coordinates of RKMK (the rotation vector
    ``U`` and the momentum), where the Runge-Kutta method runs: no exponential is formed for them.

    Order 8 with any torque, R on SO(3) to round-off, twelve torque evaluations per attempt.

    Reference: Hairer, Norsett & Wanner, *Solving ODEs I*, 2nd ed., II.10 (DOP853, its error
    estimator and step-size control); E3 and E5 as in SciPy's ``dop853_coefficients``.
    """

    order: ClassVar[int] = 8
    torque_evals: ClassVar[str] = "12"
    reference: ClassVar[str] = "Munthe-Kaas 1999; Dormand-Prince 8(5,3) (DOP853) with its combined error estimate"
    family: ClassVar[str] = "high-order"

    def error_order(self) -> int:
        return 7

    def step_with_error(self, system, t, state, aux, dt):
        m = RKMK8()
        Ks, Fs = m.stages(system, t, state, dt)
        dtype = state.Pi.dtype
        e5, e3 = jnp.asarray(_E5, dtype), jnp.asarray(_E3, dtype)
        d = jnp.stack([jnp.concatenate([dt * _dot(e5, Ks), dt * _dot(e5, Fs)]),
                       jnp.concatenate([dt * _dot(e3, Ks), dt * _dot(e3, Fs)])])
        return m.combine(state, Ks, Fs, _B, dt), aux, StepStats.explicit(), d

    def error_norm(self, y, y1, y_err, rtol, atol):
        return dop853_error(y, y1, y_err, rtol, atol)
