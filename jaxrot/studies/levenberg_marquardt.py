"""Levenberg-Marquardt for least squares whose unknowns are a shared block and one block per group
(several throws of one body): the Jacobian is block-arrow, and the normal equations are solved by
the Schur complement on the shared block, at a cost linear in the number of groups.

With the residuals ``r_i`` of group ``i``, ``A_i = dr_i/dx_s`` (shared) and ``B_i = dr_i/dx_i``
(its own), the damped Gauss-Newton step solves

    [ sum A_i^T A_i + lam D_s     A_i^T B_i        ] [dx_s]     [ sum A_i^T r_i ]
    [ B_i^T A_i                  B_i^T B_i + lam D_i] [dx_i] = - [ B_i^T r_i     ],

eliminating each ``dx_i``: ``S dx_s = -(g_s - sum H_si H_ii^-1 g_i)`` with
``S = H_ss - sum H_si H_ii^-1 H_is``, then ``dx_i = -H_ii^-1 (g_i + H_is dx_s)``. ``D`` is the
diagonal of ``J^T J`` (Marquardt's scaling). A trial step is kept only if its cost is finite and
lower; otherwise the damping grows (Nielsen's rule, as in Madsen, Nielsen & Tingleff, *Methods for
non-linear least squares problems*, 2004, sec. 3.2), so a trial that leaves the physical region
or whose simulation fails is simply refused. The whole iteration is one ``lax.while_loop``: it
compiles once and can be ``vmap``-ped over starting points.

A robust loss ``rho`` (Huber, soft-L1, Cauchy; as SciPy's ``least_squares``) is minimised as
``1/2 sum c^2 rho(r^2 / c^2)`` by iteratively re-weighted Gauss-Newton: residuals and Jacobians
scaled by ``sqrt(rho'(r^2 / c^2))`` at the current point (the ``rho''`` term left out).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

LOSSES = ("linear", "huber", "soft_l1", "cauchy")


class Robust(eqx.Module):
    """The loss of the (weighted) residuals: ``kind`` one of :data:`LOSSES`, ``threshold`` the residual
    size ``c`` where it departs from the square."""

    kind: str = eqx.field(static=True, default="linear")
    threshold: float = 1.0

    def __check_init__(self):
        if self.kind not in LOSSES:
            raise ValueError(f"robust loss must be one of {LOSSES}, got {self.kind!r}")

    def rho(self, z):
        if self.kind == "huber":
            return jnp.where(z <= 1, z, 2 * jnp.sqrt(jnp.maximum(z, 1)) - 1)
        if self.kind == "soft_l1":
            return 2 * (jnp.sqrt(1 + z) - 1)
        if self.kind == "cauchy":
            return jnp.log1p(z)
        return z

    def drho(self, z):
        if self.kind == "huber":
            return jnp.where(z <= 1, 1.0, 1 / jnp.sqrt(jnp.maximum(z, 1)))
        if self.kind == "soft_l1":
            return 1 / jnp.sqrt(1 + z)
        if self.kind == "cauchy":
            return 1 / (1 + z)
        return jnp.ones_like(z)

    def cost(self, r):
        c2 = jnp.asarray(self.threshold, r.dtype) ** 2
        return 0.5 * c2 * jnp.sum(self.rho(r * r / c2))

    def weights(self, r):
        c2 = jnp.asarray(self.threshold, r.dtype) ** 2
        return jnp.sqrt(self.drho(r * r / c2))


class Blocks(NamedTuple):
    """The normal equations' blocks (``H = J^T J``, ``g = J^T r``)."""

    H_ss: jax.Array   # (P, P)
    H_sp: jax.Array   # (T, P, M)
    H_pp: jax.Array   # (T, M, M)
    g_s: jax.Array    # (P,)
    g_p: jax.Array    # (T, M)


class Solution(NamedTuple):
    """Where the iteration ended: unknowns, cost, blocks there (robust weights applied), iterations,
    ``converged`` (a tolerance met) and the damping."""

    shared: jax.Array
    own: jax.Array
    cost: jax.Array
    blocks: Blocks
    iterations: jax.Array
    converged: jax.Array
    damping: jax.Array


def normal_blocks(r, A, B) -> Blocks:
    """Blocks of ``J^T J`` and ``J^T r`` from residuals (T, m) and Jacobians (T, m, P), (T, m, M)."""
    return Blocks(jnp.einsum("tmp,tmq->pq", A, A), jnp.einsum("tmp,tmq->tpq", A, B), jnp.einsum("tmp,tmq->tpq", B, B),
                  jnp.einsum("tmp,tm->p", A, r), jnp.einsum("tmp,tm->tp", B, r))


def _diag(H):
    return jnp.diagonal(H, axis1=-2, axis2=-1)


def damped_step(blk: Blocks, lam):
    """The damped Gauss-Newton step ``(dx_s, dx_p)`` and the reduction of the quadratic model it predicts."""
    floor = 1e-12 * jnp.maximum(jnp.max(_diag(blk.H_ss), initial=0.0), jnp.max(_diag(blk.H_pp), initial=0.0)) + 1e-300
    Ds = jnp.maximum(_diag(blk.H_ss), floor)
    Dp = jnp.maximum(_diag(blk.H_pp), floor)
    Hp = blk.H_pp + lam * jax.vmap(jnp.diag)(Dp)
    Hp_Hps = jnp.linalg.solve(Hp, jnp.swapaxes(blk.H_sp, 1, 2))          # (T, M, P)
    Hp_gp = jnp.linalg.solve(Hp, blk.g_p[..., None])[..., 0]             # (T, M)
    S = blk.H_ss + lam * jnp.diag(Ds) - jnp.einsum("tpm,tmq->pq", blk.H_sp, Hp_Hps)
    rhs = blk.g_s - jnp.einsum("tpm,tm->p", blk.H_sp, Hp_gp)
    ds = -jnp.linalg.solve(S, rhs)
    dp = -(Hp_gp + jnp.einsum("tmp,p->tm", Hp_Hps, ds))
    gd = blk.g_s @ ds + jnp.sum(blk.g_p * dp)
    dDd = jnp.sum(Ds * ds * ds) + jnp.sum(Dp * dp * dp)
    return ds, dp, 0.5 * (lam * dDd - gd)


def levenberg_marquardt(linearise: Callable, residuals: Callable, shared0, own0, *, robust: Robust = Robust(),
                        fixed=None, max_iters: int = 100, ftol: float = 1e-10, xtol: float = 1e-10,
                        damping0: float = 1e-3) -> Solution:
    """Minimise ``robust.cost(residuals(shared, own))``.

    Args:
      linearise: ``(shared (P,), own (T, M)) -> (r (T, m), A (T, m, P), B (T, m, M))``.
      residuals: ``(shared, own) -> r (T, m)``.
      shared0, own0: the start.
      robust: the loss (:class:`Robust`; the default is the plain square).
      fixed: a (P,) mask of shared unknowns held at their start (None: none).
      max_iters: the most trial steps.
      ftol, xtol: stop when a kept step lowers the cost by less than ``ftol`` of it, or moves the unknowns
        by less than ``xtol`` of their size.
      damping0: the first damping ``lam``.

    Returns:
      a :class:`Solution` whose blocks are those at its unknowns (jit- and vmap-able: a pure function of
      its array arguments).

    Example::

        sol = levenberg_marquardt(lin, res, jnp.zeros(2), jnp.zeros((5, 3)))
    """
    dtype = shared0.dtype
    free = jnp.ones(shared0.shape, dtype) if fixed is None else 1.0 - jnp.asarray(fixed, dtype)

    def at(xs, xp):
        r, A, B = linearise(xs, xp)
        w = robust.weights(r)
        cost = robust.cost(r)
        blk = normal_blocks(w * r, w[..., None] * A * free, w[..., None] * B)
        return jnp.where(jnp.isfinite(cost), cost, jnp.inf), blk

    def cost_at(xs, xp):
        c = robust.cost(residuals(xs, xp))
        return jnp.where(jnp.isfinite(c), c, jnp.inf)

    # the linearisation and the residuals are each traced once, inside the loop (compile time): an
    # iteration first linearises where the last one moved to, and the loop ends with a linearisation
    # at its result
    blank = jax.tree_util.tree_map(lambda a: jnp.zeros(a.shape, a.dtype), jax.eval_shape(at, shared0, own0))
    f, t = jnp.asarray(False), jnp.asarray(True)
    state0 = (shared0, own0, blank[0], blank[1], jnp.asarray(damping0, dtype), jnp.asarray(2.0, dtype), jnp.asarray(0),
              f, t, f, f)

    def cond(s):
        return ~s[-1]

    def body(s):
        xs, xp, cost, blk, lam, nu, k, conv, need, ending, _ = s
        cost, blk = lax.cond(need, lambda: at(xs, xp), lambda: (cost, blk))
        ds, dp, pred = damped_step(blk, lam)
        xs_t, xp_t = xs + ds * free, xp + dp
        ok = jnp.isfinite(cost) & jnp.all(jnp.isfinite(ds)) & jnp.all(jnp.isfinite(dp)) & (pred > 0) & ~ending
        c_t = lax.cond(ok, lambda: cost_at(xs_t, xp_t), lambda: jnp.asarray(jnp.inf, dtype))
        accept = ok & (c_t < cost)
        rho = (cost - c_t) / jnp.where(pred > 0, pred, 1.0)
        lam_n = jnp.where(accept, lam * jnp.maximum(1 / 3, 1 - (2 * jnp.clip(rho, 0, 1) - 1) ** 3), lam * nu)
        nu_n = jnp.where(accept, 2.0, 2 * nu)
        size = jnp.sqrt(jnp.sum(xs * xs) + jnp.sum(xp * xp))
        step = jnp.sqrt(jnp.sum(ds * ds) + jnp.sum(dp * dp))
        gmax = jnp.maximum(jnp.max(jnp.abs(blk.g_s), initial=0.0), jnp.max(jnp.abs(blk.g_p), initial=0.0))
        conv_n = conv | (accept & (((cost - c_t) <= ftol * cost) | (step <= xtol * (size + xtol)))) | \
            (gmax <= 1e-14 * jnp.maximum(cost, 1e-300))
        k_n = k + jnp.where(ending, 0, 1)
        ending_n = ending | conv_n | (k_n >= max_iters) | (lam_n > 1e16) | ~jnp.isfinite(cost)
        # one more pass only to linearise at an accepted last step; otherwise the blocks are current
        stop = ending | (ending_n & ~accept)
        return (jnp.where(accept, xs_t, xs), jnp.where(accept, xp_t, xp), jnp.where(accept, c_t, cost), blk, lam_n,
                nu_n, k_n, conv_n, accept, ending_n, stop)

    xs, xp, cost, blk, lam, _, k, conv, _, _, _ = lax.while_loop(cond, body, state0)
    return Solution(xs, xp, cost, blk, k, conv, lam)


def inverse_psd(H, floor: float = 1e-14):
    """The inverse of a positive semi-definite ``H`` (or a stack of them), Jacobi-scaled first (unknowns of
    very different sizes do not make it ill-conditioned) and with the scaled eigenvalues floored at
    ``floor`` times the largest: a direction the data do not fix gets a huge variance, never a zero one."""
    d = jnp.sqrt(jnp.maximum(jnp.diagonal(H, axis1=-2, axis2=-1), 1e-300))
    Hs = H / (d[..., :, None] * d[..., None, :])
    w, V = jnp.linalg.eigh(Hs)
    w = jnp.maximum(w, floor * jnp.max(w, axis=-1, keepdims=True))
    inv = jnp.einsum("...ij,...j,...kj->...ik", V, 1 / w, V)
    return inv / (d[..., :, None] * d[..., None, :])


def covariance(blk: Blocks):
    """The blocks of ``(J^T J)^-1``: shared (P, P), each group's own (T, M, M) and the cross terms (T, P, M),
    by the Schur complement (:func:`inverse_psd`)."""
    Hp_inv = inverse_psd(blk.H_pp)
    S = blk.H_ss - jnp.einsum("tpm,tmn,tqn->pq", blk.H_sp, Hp_inv, blk.H_sp)
    C_ss = inverse_psd(0.5 * (S + S.T))
    C_sp = -jnp.einsum("pq,tqm,tmn->tpn", C_ss, blk.H_sp, Hp_inv)
    C_pp = Hp_inv - jnp.einsum("tnm,tpn,tpk->tmk", Hp_inv, blk.H_sp, C_sp)
    return C_ss, C_pp, C_sp
