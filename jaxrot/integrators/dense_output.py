"""The dense output of one step and the root of an event condition on it, defined once in JAX: the
XLA loop calls these (:mod:`jaxrot.driver.dense`, :mod:`jaxrot.driver.events`), and the fused kernels'
crossing test and event location are generated from them (:mod:`jaxrot.kernels.generate_pieces`).

The dense output (:func:`interpolate`): between two step endpoints, ``R(s) = R0 exp(hat xi(s))`` with
``xi`` the cubic Hermite interpolant in the Lie algebra (``xi(0) = 0``, ``xi(h) = log(R0^T R1)``,
``xi'(0) = Omega0``, ``xi'(h) = dexp_r^{-1}(xi(h)) Omega1``) and ``Pi`` the cubic Hermite interpolant
with the derivatives of Euler's equations; O(h^4) locally. An event's root (:func:`locate`):
:data:`BISECTIONS` halvings of the crossing step on it and one Newton step, then, above
:data:`DENSE_ORDER`, :data:`POLISH` Newton steps on the method's own steps.

Reference: Hairer, Lubich & Wanner, Geometric Numerical Integration (2006), IV.8.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from ..geometry import so3
from ..geometry.state import State
from ..physics.torques import body_torque

__all__ = ["DENSE_ORDER", "BISECTIONS", "POLISH", "polishes", "method_step", "momentum_rate", "interpolate",
           "interpolate_momentum", "crossed", "locate", "moved"]

#: the interpolant's order: a method of higher order has its dense output, and its events, taken from
#: its own steps (up to order 4 the method's own error is at least the interpolant's, and its step
#: would only cost compile time)
DENSE_ORDER = 4


def polishes(order) -> bool:
    """Whether a method of this order (None: undeclared) has its dense output and its events taken from
    its own steps: above :data:`DENSE_ORDER`. The rule of the XLA loop and of the fused kernels alike."""
    return order is None or order > DENSE_ORDER


def method_step(method):
    """``advance(system, t, state, h) -> state``: one step of ``method`` (an integrator or an embedded
    pair) from fresh memory; None where the interpolant serves (:func:`polishes`) or no method is given."""
    if method is None or not polishes(getattr(method, "order", None)):
        return None

    def advance(system, t, state, h):
        return method.step(system, t, state, method.init(system, t, state, h), h)[0]

    return advance


def momentum_rate(system, t, state: State):
    """``dPi/dt = Pi x omega + tau_body``: Euler's equations for the body momentum at ``t``."""
    return jnp.cross(state.Pi, state.Pi / system.body.J) + body_torque(system, t, state.R, state.Pi)


def _hermite(u):
    u2, u3 = u * u, u * u * u
    return 2 * u3 - 3 * u2 + 1, u3 - 2 * u2 + u, -2 * u3 + 3 * u2, u3 - u2


def interpolate(system, t, h, s0: State, s1: State, s) -> State:
    """The state at ``t + s`` (``0 <= s <= h``) between the step endpoints ``s0`` (at ``t``) and ``s1``
    (at ``t + h``) of one body: cubic Hermite in the Lie algebra for ``R``, cubic Hermite for ``Pi``
    (see the module docstring); O(h^4) local error.

    Args:
      system: the body and torque (``system.body.J``, ``system.torque``).
      t, h: start of the step and its length.
      s0, s1: states at ``t`` and ``t + h``.
      s: offset into the step.

    Returns:
      the interpolated :class:`~jaxrot.State`.

    Example::

        mid = interpolate(problem.system, 0.0, dt, s0, s1, 0.5 * dt)
    """
    J = system.body.J
    w0, w1 = s0.Pi / J, s1.Pi / J
    xi1 = so3.log(so3.mtm(s0.R, s1.R))
    m1 = so3.dexpinv(-xi1, w1)
    _, b, c, d = _hermite(s / h)
    xi = (b * h) * w0 + c * xi1 + (d * h) * m1
    R = so3.mm(s0.R, so3.exp(xi))
    return State(R, interpolate_momentum(system, t, h, s0, s1, s))


def interpolate_momentum(system, t, h, s0: State, s1: State, s):
    """The body momentum ``Pi`` of :func:`interpolate` alone (cubic Hermite: no attitude computed)."""
    d0 = momentum_rate(system, t, s0)
    d1 = momentum_rate(system, t + h, s1)
    a, b, c, d = _hermite(s / h)
    return a * s0.Pi + (b * h) * d0 + c * s1.Pi + (d * h) * d1


#: how many halvings of the crossing step locate an event on its dense output
BISECTIONS = 64
#: Newton steps on the method's own steps after the dense output's root (its O(h^4) error, times the
#: dense slope's relative error per step, falls below round-off in two)
POLISH = 2


def crossed(direction, ga, gb):
    """Whether a condition's values ``ga``, ``gb`` at a step's two ends cross zero in ``direction`` (+1:
    from < 0 to >= 0, -1: from > 0 to <= 0, None: either)."""
    up = (ga < 0) & (gb >= 0)
    down = (ga > 0) & (gb <= 0)
    return up if direction == 1 else down if direction == -1 else up | down


def locate(cond, system, tk, h, sa: State, sb: State, found, advance=None):
    """``(event time, event state)`` of one body (NaN where not ``found``): the root of ``cond(t, state)``
    in the step ``[tk, tk + h]`` from ``sa`` to ``sb`` across which it changed sign, by bisection on the
    step's dense output and one Newton step (implicit-function derivatives), then, with ``advance``
    (:func:`method_step`), :data:`POLISH` Newton steps on the method's own steps (see the module
    docstring). The XLA loop calls it (:func:`jaxrot.driver.events.locate`); the fused kernels'
    location is generated from it.

    Example::

        t_ev, s_ev = locate(lambda t, s: s.R[1, 1], system, t, h, s0, s1, True)
    """
    h_safe = jnp.where(found & (h > 0), h, jnp.ones_like(h))

    def g(s):
        return cond(tk + s, interpolate(system, tk, h_safe, sa, sb, s))

    ga = lax.stop_gradient(g(jnp.zeros_like(h)))

    def bisect(c, _):
        lo, hi = c
        mid = 0.5 * (lo + hi)
        same = jnp.sign(lax.stop_gradient(g(mid))) == jnp.sign(ga)
        return (jnp.where(same, mid, lo), jnp.where(same, hi, mid)), None

    hs = lax.stop_gradient(h_safe)
    (lo, hi), _ = lax.scan(bisect, (jnp.zeros_like(hs), hs), None, length=BISECTIONS)
    sb_ = lax.stop_gradient(0.5 * (lo + hi))
    gv, gs = jax.value_and_grad(g)(sb_)
    ok = found & (gs != 0) & jnp.isfinite(gs)
    s = sb_ - jnp.where(ok, gv, 0.0) / jnp.where(ok, gs, 1.0)
    if advance is None:
        st = interpolate(system, tk, h_safe, sa, sb, s)
    else:
        def newton(x, _):
            gx = cond(tk + x, advance(system, tk, sa, x))
            return x - jnp.where(ok, gx, 0.0) / jnp.where(ok, gs, 1.0), None

        # all but the last Newton step without derivatives (a scan: one traced step of the method);
        # no step where nothing was found
        x, _ = lax.scan(newton, lax.stop_gradient(jnp.where(found, s, 0.0)), None, length=POLISH - 1)
        x = lax.stop_gradient(x)
        sx = advance(system, tk, sa, x)
        # the last step's slope is the condition's along the method's own step (its derivative in the step's
        # length), not the interpolant's: it is the denominator of the time's implicit-function derivative,
        # which with the interpolant's would keep its O(h^4) error; this one makes it the derivative of the
        # root the method's steps have (its own derivative is multiplied by g, zero at the root: left out)
        slope = lax.stop_gradient(jax.jvp(lambda y: cond(tk + y, advance(system, tk, sa, y)),
                                          (x,), (jnp.ones_like(x),))[1])
        ok = ok & (slope != 0) & jnp.isfinite(slope)
        s = x - jnp.where(ok, cond(tk + x, sx), 0.0) / jnp.where(ok, slope, 1.0)
        # the state at the time found: the step's state moved along the equations of motion by
        # s - x (round-off in value), which gives it the time's derivative without a further step
        st = moved(system, tk + x, sx, s - x)
    t_ev = jnp.where(found, tk + s, jnp.nan)
    return t_ev, jax.tree_util.tree_map(lambda x: jnp.where(found, x, jnp.nan), st)


def moved(system, t, state: State, ds) -> State:
    """``state`` at ``t`` carried to ``t + ds`` to first order: ``R exp(ds omega)``, ``Pi + ds dPi/dt``."""
    return State(state.R @ so3.exp(ds * state.Pi / system.body.J),
                 state.Pi + ds * momentum_rate(system, t, state))
