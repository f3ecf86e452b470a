"""Buss's energy preservation (EP) as a wrapper: restore the initial energy after every base step.

Torque-free only. Without torque the body momentum ``L_b = R^T L`` must stay on the *polhode*, the
intersection of the momentum sphere ``|L_b| = |L|`` and the energy ellipsoid ``sum L_b^2/J = 2 E0``.
A base step leaves ``L_b`` slightly off it; EP moves ``L_b`` back onto the polhode and then rotates
the body by the minimal rotation that makes ``R'^T L`` equal to the corrected ``L_b'``. World
momentum is never touched, so it stays exact; the energy is then ``E0`` to round-off.

Two rules choose the corrected point (``EnergyProjection(base, rule=...)``):

``rule="nearest"`` (default)
    The point of the polhode nearest to ``L_b`` (Lagrange condition of ``min |L_b' - L_b|^2``)::

        L_b' = L_b / (1 + lam + nu c / J)          (componentwise, c = |L|^2 / (2 E0))
        (lam, nu) such that  |L_b'|^2 = |L|^2  and  sum L_b'^2 / J = 2 E0

    solved by six Gauss-Newton iterations from ``lam = nu = 0`` (Jacobian from ``jax.jacfwd``,
    Levenberg-regularised so it stays finite where the 2x2 system degenerates; three reach
    round-off for the per-step energy errors of a converging method). If the iteration has not
    reached the polhode (relative residual above ~1e3 ulp: energy errors of 1e-4 and more within
    ~1e-4 rad of the intermediate axis, where the target polhode is far from ``L_b``), the step is
    counted in ``StepStats.clamped`` and its energy is not exact. The correction is
    normal to the polhode: this is the talk's "family of hyperboloids meeting every polhode at right
    angles", read in momentum space. It is smooth in ``L_b`` (no sign, no clamp), so it keeps the
    base method's order on long runs and ``jax.grad`` goes through it.

``rule="hyperboloid"``
    The squared-coordinate reconstruction: with ``rho = L_b / (J sqrt(2 E0))`` and ``u = rho^2`` the
    ellipsoids are planes and the polhode a line of direction ``a = J x J^2``; ``u`` moves along
    ``a x J^2`` onto the line, ``L_b' = sqrt(2 E0) J sign(rho) sqrt(u')``. If some ``u'_i < 0`` it is
    clamped to 0 and counted in ``StepStats.clamped``. Its weakness (measured, kept for comparison):
    ``sign(rho_i) sqrt(u_i')`` jumps by about ``sqrt(energy error)`` whenever a body-rate component
    crosses zero, which happens every period on a tumbling body, so the method loses its base order
    over long runs and the trajectory is discontinuous in its inputs there (``buss1`` + this rule
    does not converge at all).

Degenerate cases of the nearest rule: ``Pi = 0`` (no motion) is left unchanged; for a sphere
(``J1 = J2 = J3``) the energy is fixed by ``|L|`` and the two conditions coincide; for a spin
exactly about a principal axis, and at the crossing point of the separatrix (``L_b`` along the
intermediate axis with ``2 E0 J2 = |L|^2``), only ``1 + lam + nu c/J_k`` of the occupied axes
matters. In all three the 2x2 Jacobian is singular and the regularised step takes the
minimum-norm correction: values and gradients stay finite (tested). Anywhere else on the
separatrix the polhode is a smooth curve and the rule behaves as in the regular case.

Reference: S. R. Buss, "Accurate and efficient simulation of rigid-body rotations", J. Comput.
Phys. 164 (2000) and the 2011 talk (EP outlined there; both rules are reconstructions).
"""

from __future__ import annotations

from typing import ClassVar

import jax
import jax.numpy as jnp

from ..geometry import so3
from ..geometry.state import State
from .stats import StepStats
from ._base import AbstractWrapper

_RULES = ("nearest", "hyperboloid")
#: Gauss-Newton iterations of the nearest rule (the fused kernels run as many)
NEWTON_ITERS = 6
# relative residual above which the projection is reported as not exact (``StepStats.clamped``)
_RESIDUAL_TOL = 1e3


def _safe_div(a, b):
    ok = b != 0
    return jnp.where(ok, a / jnp.where(ok, b, 1.0), 0.0)


def _nearest_on_polhode(J, Lb, L2, E0):
    """``L_b'`` on ``|x|^2 = L2``, ``sum x^2/J = 2 E0`` nearest to ``Lb`` (see module docstring)."""
    dtype = Lb.dtype
    ok = (L2 > 0) & (E0 > 0)
    L2s = jnp.where(ok, L2, 1.0)
    E2s = jnp.where(ok, 2.0 * E0, 1.0)
    c = L2s / E2s  # an effective moment between min J and max J: keeps both unknowns O(1)

    def point(p):
        return Lb / (1.0 + p[0] + p[1] * c / J)

    def residual(p):
        x = point(p)
        return jnp.stack([jnp.sum(x * x) / L2s - 1.0, jnp.sum(x * x / J) / E2s - 1.0])

    eps = jnp.finfo(dtype).eps

    def gauss_newton(p, _):
        r = residual(p)
        A = jax.jacfwd(residual)(p)
        AtA = A.T @ A
        reg = eps * (jnp.trace(AtA) + 1.0)
        M = AtA + reg * jnp.eye(2, dtype=dtype)
        g = A.T @ r
        det = M[0, 0] * M[1, 1] - M[0, 1] * M[1, 0]
        step = jnp.stack([M[1, 1] * g[0] - M[0, 1] * g[1], M[0, 0] * g[1] - M[1, 0] * g[0]]) / det
        return p - step, None

    p, _ = jax.lax.scan(gauss_newton, jnp.zeros(2, dtype), None, length=NEWTON_ITERS)
    missed = ok & (jnp.max(jnp.abs(residual(p))) > _RESIDUAL_TOL * eps)
    return jnp.where(ok, point(p), Lb), missed


def _hyperboloid_point(J, Lb, E0):
    """The squared-coordinate reconstruction; returns ``(L_b', clamped)``."""
    s = jnp.sqrt(2.0 * E0)
    rho = _safe_div(Lb / J, s)
    u = rho * rho
    J2 = J * J
    a = jnp.cross(J, J2)
    # u' solves [J; J^2; a] u' = [1; c; a.u] (c = J^2.u holds already): written as the small
    # correction u' = u + s d along d = a x J^2, far better conditioned than the 3x3 solve
    d = jnp.cross(a, J2)
    u1 = u + _safe_div(1.0 - jnp.dot(J, u), jnp.dot(J, d)) * d
    clamped = jnp.any(u1 < 0)
    u1 = jnp.maximum(u1, 0.0)
    sign = jnp.where(rho >= 0, 1.0, -1.0)
    return s * J * sign * jnp.sqrt(u1), clamped


def _align(R, Lb1, Lb):
    """``R Q`` with Q the minimal rotation taking the direction of ``Lb1`` to that of ``Lb``."""
    cr = jnp.cross(Lb1, Lb)
    n2 = jnp.dot(cr, cr)
    d = jnp.dot(Lb1, Lb)
    # angle/|cr| = atan2(n, d)/n, with its Taylor series 1/d - n^2/(3 d^3) for tiny n so that the
    # value and gradient are smooth through an exactly aligned pair (n = 0)
    small = (n2 < (1e-4 * d) ** 2) & (d > 0)
    # (n = 0 with d <= 0: a zero vector, or an antiparallel pair no EP step produces: no rotation)
    zero = n2 == 0
    n = jnp.sqrt(jnp.where(small | zero, 1.0, n2))
    d_safe = jnp.where(small, d, 1.0)
    coef = jnp.where(small, 1.0 / d_safe - n2 / (3.0 * d_safe**3), jnp.where(zero, 0.0, jnp.arctan2(n, d) / n))
    return so3.reorthogonalize(so3.mm(R, so3.exp(coef * cr)))


def project_energy(J, R, Pi, L2, E0, rule: str = "nearest"):
    """EP correction of ``(R, Pi)`` to energy ``E0`` and ``|Pi|^2 = L2``; returns ``(R', Pi', clamped)``."""
    if rule == "nearest":
        Lb1, clamped = _nearest_on_polhode(J, Pi, L2, E0)
    elif rule == "hyperboloid":
        Lb1, clamped = _hyperboloid_point(J, Pi, E0)
    else:
        raise ValueError(f"EP rule must be one of {_RULES}, got {rule!r}")
    R1 = _align(R, Lb1, Pi)
    # Pi' = L_b' (= R'^T L in exact arithmetic; recomputing R'^T L would feed R's orthogonality
    # defect into |Pi| every step), except after a hyperboloid clamp, where |L_b'| != |L|
    if rule == "hyperboloid":
        Lb1 = jnp.where(clamped, so3.mtv(R1, so3.mv(R, Pi)), Lb1)
    return R1, Lb1, clamped


class EnergyProjection(AbstractWrapper):
    """``base`` followed by Buss's energy projection (torque-free problems); see the module docs.

    ``rule="nearest"`` (default): nearest point of the polhode, smooth, keeps the base order.
    ``rule="hyperboloid"``: the squared-coordinate reconstruction (jumps at zero crossings).
    """

    rule: str = "nearest"
    torque: ClassVar[bool] = False
    torque_evals: ClassVar[str] = "0 (free only)"

    @property
    def conserves(self):
        return tuple(q for q in ("L", "|Pi|", "E") if q in self.base.conserves or q in ("|Pi|", "E"))

    @property
    def reference(self):
        ep = "Buss, talk (2011), energy preservation via the Poinsot ellipsoid (reconstructed)"
        return ep if self.base.family == "buss" else f"{self.base.reference}; EP: Buss, talk (2011)"

    def __check_init__(self):
        if self.rule not in _RULES:
            raise ValueError(f"EP rule must be one of {_RULES}, got {self.rule!r}")

    def init(self, system, t0, state0, dt):
        Pi = state0.Pi
        E0 = 0.5 * jnp.sum(Pi * Pi / system.body.J)
        return self.base.init(system, t0, state0, dt), (E0, jnp.sum(Pi * Pi))

    def step(self, system, t, state, aux, dt):
        if not system.torque.is_free:
            raise ValueError("energy projection (Buss's EP, the *_ep methods) is for torque-free problems: it "
                             "restores the kinetic energy of free motion, which a torque changes; got "
                             f"{type(system.torque).__name__}; use a torque-capable method (e.g. liemid_ea or buss4)")
        base_aux, (E0, L2) = aux
        new, base_aux, st = self.base.step(system, t, state, base_aux, dt)
        R1, Pi1, clamped = project_energy(system.body.J, new.R, new.Pi, L2, E0, self.rule)
        st = StepStats(newton_iters=st.newton_iters, converged=st.converged,
                       clamped=st.clamped + clamped.astype(jnp.int32), substeps=st.substeps)
        return State(R1, Pi1), (base_aux, (E0, L2)), st
