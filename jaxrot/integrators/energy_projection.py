"""Buss's energy preservation (EP) through the Poinsot ellipsoid, as a wrapper (SPEC 1.5).

Torque-free only. After the base step, with ``rho = (L_b / J) / sqrt(2 E0)`` (``L_b = R^T L``,
``E0`` the initial energy) and ``u = rho o rho``, the two ellipsoids are the planes ``J.u = 1`` and
``J^2.u = c`` (``c = |L|^2/(2 E0)``), every polhode is a line of direction ``a = J x J^2``, and the
orthogonal hyperboloid family is ``a.u = k``. The step (reconstruction [R] of the talk):

  1. ``k = a.u``; solve ``[J; J^2; a] u' = [1; c; k]`` (as ``u' = u + s (a x J^2)``, one scalar);
  2. if some ``u'_i < 0`` (near a separatrix/axis the hyperboloid misses the polhode) clamp
     ``u' <- max(u', 0)`` and count it in ``StepStats.clamped`` (energy is then not exact);
  3. ``L_b' = sqrt(2 E0) J o sign(rho) o sqrt(u')`` (``|L_b'| = |L|``);
  4. ``R <- R Q`` with Q the minimal rotation taking ``L_b'`` to ``L_b``, so ``R^T L = L_b'``.

Energy is then exactly ``E0`` after every unclamped step; world momentum is untouched.

Weak spot (measured, tests/test_energy_projection.py): near ``rho_i = 0`` the coordinate ``a.u`` is
quadratic in ``rho_i``, so the correction ``delta u_i = O(energy error)`` moves ``rho_i`` by
``O(err / rho_i)`` and ``sign(rho_i) sqrt(rho_i^2 + delta)`` jumps by ``2 sqrt(delta)`` as ``rho_i``
changes sign. For a 1st-order base (error O(h^2) per step) this stalls ``rho_i`` at O(h) and the
method stops converging; for higher orders it costs accuracy at each crossing and makes the
trajectory discontinuous in its inputs there (gradients are exact between crossings only).
"""

from __future__ import annotations

import jax.numpy as jnp

from .. import so3
from ..state import State, StepStats
from ._base import AbstractWrapper


def project_energy(J, R, L, E0):
    """EP correction of an attitude; returns ``(R', Pi', clamped)``."""
    Lb = so3.mtv(R, L)
    s = jnp.sqrt(2.0 * E0)
    rho = Lb / J / s
    u = rho * rho
    J2 = J * J
    a = jnp.cross(J, J2)
    # u' solves [J; J^2; a] u' = [1; c; a.u] (c = J^2.u holds already): written as the small
    # correction u' = u + s d along d = a x J^2, which is far better conditioned than the 3x3 solve
    d = jnp.cross(a, J2)
    u1 = u + ((1.0 - jnp.dot(J, u)) / jnp.dot(J, d)) * d
    clamped = jnp.any(u1 < 0)
    u1 = jnp.maximum(u1, 0.0)
    sign = jnp.where(rho >= 0, 1.0, -1.0)
    Lb1 = s * J * sign * jnp.sqrt(u1)
    # minimal rotation taking L_b' to L_b (axis L_b' x L_b)
    cr = jnp.cross(Lb1, Lb)
    n2 = jnp.dot(cr, cr)
    pos = n2 > 0
    nrm = jnp.where(pos, jnp.sqrt(jnp.where(pos, n2, 1.0)), 1.0)
    angle = jnp.arctan2(jnp.where(pos, nrm, 0.0), jnp.dot(Lb1, Lb))
    Q = so3.exp(jnp.where(pos, angle / nrm, 0.0) * cr)
    R1 = so3.mm(R, Q)
    # Pi' = L_b' (= R'^T L in exact arithmetic; recomputing R'^T L would multiply |L| by R'R'^T
    # every step, a systematic round-off drift), except after a clamp, where |L_b'| != |L|
    return R1, jnp.where(clamped, so3.mtv(R1, L), Lb1), clamped


class EnergyProjection(AbstractWrapper):
    """``base`` followed by Buss's EP correction (torque-free problems)."""

    def init(self, problem, t0, state0, dt):
        E0 = 0.5 * jnp.sum(state0.Pi * state0.Pi / problem.body.J)
        return self.base.init(problem, t0, state0, dt), E0

    def step(self, problem, t, state, aux, dt):
        if not problem.torque.is_free:
            raise ValueError("energy projection assumes no torque (Buss, SPEC 1.5); "
                             f"got {type(problem.torque).__name__}")
        base_aux, E0 = aux
        new, base_aux, st = self.base.step(problem, t, state, base_aux, dt)
        L = so3.mv(new.R, new.Pi)
        R1, Pi1, clamped = project_energy(problem.body.J, new.R, L, E0)
        st = StepStats(newton_iters=st.newton_iters, converged=st.converged,
                       clamped=st.clamped + clamped.astype(jnp.int32), substeps=st.substeps)
        return State(R1, Pi1), (base_aux, E0), st
