"""What :func:`jaxrot.studies.identify.identify` returns (:class:`Fit`, estimates with standard
deviations from ``s^2 (J^T J)^-1`` by the delta method), and the checks across fits: the scatter of
per-throw estimates against their stated errors (:func:`scatter`) and the torque-free model against
a torque model (:func:`compare`)."""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ..geometry import so3
from .identify_model import QUADRATIC_DRAG, Model, moments_from_u
from .identify_search import covariance_of, residuals_jit

@jax.jit
def _dynamics(model, dyn, omega0, ts):
    """A throw's simulated rates and attitudes (compiled once per model and shape)."""
    return model.dynamics(dyn, omega0, ts)


@dataclasses.dataclass
class Fit:
    """One fit of the shared unknowns and each throw's own, with standard deviations.

    Attributes:
      ratios, ratios_std: the principal moments over the largest, in the sensor's axis order (x, y, z).
      moments_trace1, moments_cov: the moments scaled to trace 1 and their covariance (rank 2).
      torque, torque_std: the torque model's parameters (``kappa = k / trace(J)`` for the drag).
      drag_ratio, drag_ratio_std: ``k / J_max`` for the built-in drag (None otherwise).
      misalignment, misalignment_std: the rotation vector ``q`` (rad) from principal to sensor axes.
      bias, bias_std: gyro bias (3,) shared, or (T, 3) per throw; None without.
      scale, scale_std: gyro scale factors ``s`` (None unless fitted).
      omega0, omega0_std: each throw's initial rates in the principal frame (T, 3).
      reduced_chi2: ``s^2 = 2 cost / (m - p)``; ``sigma_gyro``/``sigma_att``: rms residuals (rad/s, rad).
      widened: the factor the stated uncertainties were multiplied by (1.0: none).
    """

    ratios: np.ndarray
    ratios_std: np.ndarray
    moments_trace1: np.ndarray
    moments_cov: np.ndarray
    torque_names: tuple
    torque: np.ndarray
    torque_std: np.ndarray
    drag_ratio: float | None
    drag_ratio_std: float | None
    misalignment: np.ndarray | None
    misalignment_std: np.ndarray | None
    bias: np.ndarray | None
    bias_std: np.ndarray | None
    scale: np.ndarray | None
    scale_std: np.ndarray | None
    omega0: np.ndarray
    omega0_std: np.ndarray
    cost: float
    ssr: float
    n_residuals: int
    n_params: int
    reduced_chi2: float
    sigma_gyro: float | None
    sigma_att: float | None
    iterations: int
    converged: bool
    seconds: float
    search: dict
    widened: float
    # what evaluating the fit again needs
    model: Any = dataclasses.field(repr=False)
    shared: np.ndarray = dataclasses.field(repr=False)
    own: np.ndarray = dataclasses.field(repr=False)
    throws: list = dataclasses.field(repr=False)
    weights: tuple = dataclasses.field(repr=False)
    shared_cov: np.ndarray = dataclasses.field(repr=False)

    @property
    def misalignment_deg(self):
        return None if self.misalignment is None else np.degrees(self.misalignment)

    @property
    def misalignment_std_deg(self):
        return None if self.misalignment_std is None else np.degrees(self.misalignment_std)

    def widen(self, factor: float) -> "Fit":
        """A copy with every stated uncertainty multiplied by ``factor`` (the scatter's Birge ratio)."""
        f = float(factor)

        def mul(x):
            return None if x is None else np.asarray(x) * f

        return dataclasses.replace(
            self, ratios_std=mul(self.ratios_std), moments_cov=self.moments_cov * f * f,
            torque_std=mul(self.torque_std),
            drag_ratio_std=None if self.drag_ratio_std is None else self.drag_ratio_std * f,
            misalignment_std=mul(self.misalignment_std), bias_std=mul(self.bias_std), scale_std=mul(self.scale_std),
            omega0_std=mul(self.omega0_std), shared_cov=self.shared_cov * f * f, widened=self.widened * f)

    def moments(self, *, trace: float | None = None, mass: float | None = None, dimensions=None,
                momentum: tuple | None = None):
        """Absolute principal moments (kg m^2) with their standard deviations, given a scale:

        - ``trace``: ``J1 + J2 + J3`` (kg m^2);
        - ``mass`` and ``dimensions`` ``(a, b, c)`` of a uniform box (kg, m): its trace ``m (a^2+b^2+c^2) / 6``;
        - ``momentum=(k, L)``: the magnitude ``L`` (kg m^2/s) of throw ``k``'s angular momentum at its start.

        Gyroscope rates (and attitudes) alone fix only the ratios: without one of these it raises.
        Returns ``(J, J_std)``.
        """
        given = sum(x is not None for x in (trace, mass if mass is not None or dimensions is not None else None,
                                             momentum))
        if given == 0:
            raise ValueError("gyroscope rates and attitudes fix only the ratios of the moments, not their scale "
                             "(Euler's equations are homogeneous in J): give trace=J1+J2+J3, or mass= and "
                             "dimensions= of a box, or momentum=(throw, |L|), or use .ratios")
        if given > 1:
            raise ValueError("give one scale: trace, mass with dimensions, or momentum")
        if mass is not None or dimensions is not None:
            if mass is None or dimensions is None:
                raise ValueError("a box's scale needs both mass= and dimensions=(a, b, c)")
            d = np.asarray(dimensions, np.float64)
            if d.shape != (3,) or not np.all(d > 0) or not mass > 0:
                raise ValueError(f"mass must be positive and dimensions three positive lengths, got {mass}, "
                                 f"{dimensions}")
            trace = mass * float(np.sum(d * d)) / 6.0
        if momentum is not None:
            k, L = momentum
            if not 0 <= int(k) < len(self.omega0) or not L > 0:
                raise ValueError(f"momentum=(throw, |L|) needs a throw in 0..{len(self.omega0) - 1} and |L| > 0")
            trace = float(L) / float(np.linalg.norm(self.moments_trace1 * self.omega0[int(k)]))
        if not (trace is not None and math.isfinite(trace) and trace > 0):
            raise ValueError(f"trace must be positive, got {trace}")
        J = trace * self.moments_trace1
        return J, trace * np.sqrt(np.clip(np.diag(self.moments_cov), 0, None))

    def rates(self, k: int, ts=None):
        """Throw ``k``'s fitted rates as the sensor would measure them (bias and scale included), at its
        sample times or at ``ts`` (s, the recording's clock, within the throw's window); returns
        ``(ts, omega (n, 3))``."""
        layout = self.model.layout
        if not layout.gyro:
            raise ValueError("this fit has no gyroscope model")
        ts, rates = self.principal_rates(k, ts)
        sb, tb = layout.shared_blocks(), layout.throw_blocks()
        Q = np.asarray(so3.exp(jnp.asarray(self.shared[sb["misalignment"]]))) if "misalignment" in sb else np.eye(3)
        s = 1.0 + (self.shared[sb["scale"]] if "scale" in sb else 0.0)
        b = self.shared[sb["bias"]] if "bias" in sb else (self.own[k, tb["bias"]] if "bias" in tb else 0.0)
        return ts, s * (np.asarray(rates) @ Q.T) + b

    def principal_rates(self, k: int, ts=None):
        """Throw ``k``'s fitted rates in the principal frame (no bias, scale or misalignment)."""
        throw = self.throws[k]
        ts = throw.ts if ts is None else np.asarray(ts, np.float64)
        n = self.model.layout.n_dynamic_shared
        rel = np.clip(ts - throw.ts[0], 0, None)
        size = 512 * -(-len(rel) // 512)  # padded: one compiled evaluation for every throw and plot
        rates, _ = _dynamics(self.model, jnp.asarray(self.shared[:n]), jnp.asarray(self.own[k, :3]),
                             jnp.asarray(np.pad(rel, (0, size - len(rel)), mode="edge")))
        return ts, np.asarray(rates)[:len(rel)]

    def residuals(self, k: int) -> np.ndarray:
        """Throw ``k``'s gyroscope residuals, measured less fitted (n, 3), rad/s."""
        throw = self.throws[k]
        return throw.omega - self.rates(k)[1]

    def summary(self) -> str:
        """The estimates with their standard deviations, in words."""
        lines = [f"inertia ratios J/J_max (x, y, z): " + ", ".join(f"{r:.4f} ± {s:.4f}" for r, s in
                                                                   zip(self.ratios, self.ratios_std))]
        if self.drag_ratio is not None:
            lines.append(f"air drag k/J_max: {self.drag_ratio:.3e} ± {self.drag_ratio_std:.1e} (tau = -k |w| w)")
        elif self.torque_names:
            lines.append("torque parameters: " + ", ".join(f"{n} = {v:.4g} ± {s:.2g}" for n, v, s in
                                                           zip(self.torque_names, self.torque, self.torque_std)))
        if self.misalignment is not None:
            lines.append("sensor misalignment (rotation vector, deg): " + ", ".join(
                f"{v:.2f} ± {s:.2f}" for v, s in zip(self.misalignment_deg, self.misalignment_std_deg)))
        if self.bias is not None and np.ndim(self.bias) == 1:
            lines.append("gyro bias (rad/s): " + ", ".join(f"{v:.4f} ± {s:.4f}"
                                                         for v, s in zip(self.bias, self.bias_std)))
        elif self.bias is not None:
            lines.append(f"gyro bias: per throw ({len(self.bias)} throws)")
        if self.scale is not None:
            lines.append("gyro scale factors: " + ", ".join(f"{1 + v:.4f} ± {s:.4f}" for v, s in zip(self.scale,
                                                                                                   self.scale_std)))
        if self.sigma_gyro is not None:
            lines.append(f"rms rate residual: {self.sigma_gyro:.4f} rad/s")
        if self.sigma_att is not None:
            lines.append(f"rms attitude residual: {self.sigma_att:.4f} rad")
        lines.append(f"{len(self.throws)} throw(s), {self.n_residuals} residuals, {self.n_params} unknowns, "
                     f"residual scale s = {math.sqrt(self.reduced_chi2):.3g} (s^2: the reduced chi-square of the "
                     f"residuals over the sigma given, else in rad/s), {self.iterations} iterations, "
                     f"{self.seconds:.1f} s")
        if self.widened != 1.0:
            lines.append(f"uncertainties widened by {self.widened:.2f} (scatter across throws)")
        return "\n".join(lines)


def rms(r, mask):
    k = r.shape[1] // mask.shape[1]
    m = np.repeat(mask, k, axis=1)
    return float(np.sqrt(np.sum(r * r * m) / max(np.sum(m), 1)))


@functools.partial(jax.jit, static_argnums=1)
def _derived(x, nt: int):
    """The moments (trace 1), the ratios to the largest and, with ``nt`` torque parameters, the first
    over the largest moment, from the shared unknowns ``x`` (ratios' ``u``, then the torque's), with
    their Jacobian in ``x`` (for the delta method)."""
    def derived(x):
        J = moments_from_u(x[:2])
        out = [J, J / jnp.max(J)]
        if nt:
            out.append(x[2:3] / jnp.max(J))
        return jnp.concatenate(out)

    return derived(x), jax.jacfwd(derived)(x)


def fit_of(model: Model, data, sol, throws, weights, search, seconds, fixed, linear: bool = False) -> Fit:
    """The :class:`Fit` of a solution ``sol``; ``linear``: its cost is the plain square (half the sum of
    the squared weighted residuals), from which the rms residual of a single kind of observation follows."""
    layout = model.layout
    sb, tb = layout.shared_blocks(), layout.throw_blocks()
    mask = np.asarray(data.mask)
    per_sample = (3 if layout.gyro else 0) + (3 if layout.attitudes else 0)
    m = int(mask.sum()) * per_sample
    T = len(throws)
    p = layout.n_shared - int(np.sum(fixed)) + T * layout.n_throw
    cost = float(sol.cost)
    s2 = 2 * cost / max(m - p, 1)
    # a held unknown has no column: a unit diagonal there keeps the inverse finite; its variance is zero
    held = np.asarray(fixed, bool)
    blocks = jax.device_get(sol.blocks)  # (on the host: no small program per operation)
    blocks = blocks._replace(H_ss=blocks.H_ss + np.diag(held.astype(blocks.H_ss.dtype)))
    if blocks.H_pp.shape[0] > T:  # empty rows after the throws (identify's _shape): a unit block keeps them apart
        H_pp = np.array(blocks.H_pp)
        H_pp[T:] = np.eye(H_pp.shape[-1])
        blocks = blocks._replace(H_pp=H_pp)
    C_ss, C_pp, _ = (np.asarray(x) * s2 for x in covariance_of(blocks))
    C_ss = np.where(held[:, None] | held[None, :], 0.0, C_ss)
    C_pp = C_pp[:T]
    shared, own = np.asarray(sol.shared), np.asarray(sol.own)[:T]

    def std(C, sl):
        return np.sqrt(np.clip(np.diagonal(C, axis1=-2, axis2=-1)[..., sl], 0, None))

    # the moments (trace 1), ratios and drag by the delta method
    nt = layout.n_torque
    d, G = (np.asarray(x) for x in _derived(jnp.asarray(shared[:2 + nt]), nt))
    Cd = G @ C_ss[:2 + nt, :2 + nt] @ G.T
    sd = np.sqrt(np.clip(np.diag(Cd), 0, None))
    if linear and not (layout.gyro and layout.attitudes):  # one kind: its rms is sqrt(2 cost / m)
        one = math.sqrt(2 * cost / max(m, 1))
        sig_g = one / weights[0] if layout.gyro else None
        sig_a = one / weights[1] if layout.attitudes else None
    else:
        r = np.asarray(residuals_jit(model, sol.shared, sol.own, data))
        n_g = 3 * data.ts.shape[1] if layout.gyro else 0
        sig_g = rms(r[:, :n_g], mask) / weights[0] if layout.gyro else None
        sig_a = rms(r[:, n_g:], mask) / weights[1] if layout.attitudes else None
    torque_held = "torque" in sb and bool(np.any(np.asarray(fixed)[sb["torque"]]))  # the torque-free model
    is_drag = model.torque is QUADRATIC_DRAG and not torque_held
    bias = bias_std = None
    if "bias" in sb:
        bias, bias_std = shared[sb["bias"]], std(C_ss, sb["bias"])
    elif "bias" in tb:
        bias, bias_std = own[:, tb["bias"]], std(C_pp, tb["bias"])
    return Fit(
        ratios=d[3:6], ratios_std=sd[3:6], moments_trace1=d[:3], moments_cov=Cd[:3, :3],
        torque_names=tuple(model.torque.names) if model.torque is not None and not torque_held else (),
        torque=shared[sb["torque"]] if "torque" in sb and not torque_held else np.zeros(0),
        torque_std=std(C_ss, sb["torque"]) if "torque" in sb and not torque_held else np.zeros(0),
        drag_ratio=float(d[6]) if is_drag else None, drag_ratio_std=float(sd[6]) if is_drag else None,
        misalignment=shared[sb["misalignment"]] if "misalignment" in sb else None,
        misalignment_std=std(C_ss, sb["misalignment"]) if "misalignment" in sb else None,
        bias=bias, bias_std=bias_std,
        scale=shared[sb["scale"]] if "scale" in sb else None,
        scale_std=std(C_ss, sb["scale"]) if "scale" in sb else None,
        omega0=own[:, :3], omega0_std=std(C_pp, slice(0, 3)),
        cost=cost, ssr=2 * cost, n_residuals=m, n_params=p, reduced_chi2=s2, sigma_gyro=sig_g, sigma_att=sig_a,
        iterations=int(sol.iterations), converged=bool(sol.converged), seconds=seconds, search=search, widened=1.0,
        model=model, shared=shared, own=own, throws=list(throws), weights=tuple(weights), shared_cov=C_ss)


# --------------------------------------------------------------------------------------------------
# across throws; torque-free against drag


#: a throw whose own chi2 (2 degrees of freedom) exceeds this (p < 1e-4) is named as disagreeing
OUTLIER_CHI2 = 18.42


@dataclasses.dataclass
class Scatter:
    """The per-throw ratio estimates against their stated covariances: ``chi2`` (of all throws) with
    ``dof`` degrees of freedom and its ``p_value``; ``outliers``: the throws whose own chi2 is beyond
    :data:`OUTLIER_CHI2` (p < 1e-4: a window with the hand in it, a fit the linearisation misjudges);
    ``birge`` = ``sqrt(chi2 / dof)`` of the others, the factor the joint uncertainties are widened by
    where it exceeds 1. ``reference``: the two ratios ``x`` (the moments other than ``largest`` over it)
    they are compared with, the joint fit's (else their weighted mean); ``contributions``: each throw's chi2."""

    chi2: float
    dof: int
    p_value: float
    birge: float
    largest: int
    reference: np.ndarray
    values: np.ndarray
    stds: np.ndarray
    contributions: np.ndarray
    outliers: list

    @property
    def misses(self) -> bool:
        return self.birge > 1.0

    def sentence(self) -> str:
        head = (f"scatter of the per-throw ratios: chi2 = {self.chi2:.1f} for {self.dof} degrees of freedom "
                f"(chi2/dof = {self.chi2 / self.dof:.2f}, p = {self.p_value:.2g})")
        if self.outliers:
            head += (f"; throw(s) {', '.join(str(k + 1) for k in self.outliers)} disagree beyond p < 1e-4 (look at "
                     f"their windows and residuals), chi2/dof of the others {self.birge ** 2:.2f}")
        if self.misses:
            return head + f": more than the stated errors explain; joint uncertainties widened by {self.birge:.2f}"
        return head + ": consistent with the stated errors"


def _ratio_pair(fit: Fit, largest: int):
    x, G = (np.asarray(v) for v in _pair_and_jacobian(jnp.asarray(fit.moments_trace1), largest))
    return x, G @ np.asarray(fit.moments_cov) @ G.T


@functools.partial(jax.jit, static_argnums=1)
def _pair_and_jacobian(J, largest: int):
    """The two moments other than ``largest`` over it, and their Jacobian in ``J``."""
    others = jnp.asarray([i for i in range(3) if i != largest])
    f = lambda J: J[others] / J[largest]  # noqa: E731
    return f(J), jax.jacfwd(f)(J)


def scatter(per_throw: Sequence[Fit], joint: Fit | None = None) -> Scatter:
    """The chi2-type statistic of the per-throw ratio estimates against the joint fit's (or their
    weighted mean), ``2 (T - 1)`` degrees of freedom; see :class:`Scatter`."""
    if len(per_throw) < 2:
        raise ValueError("the scatter across throws needs at least two per-throw fits")
    largest = int(np.argmax(joint.ratios if joint is not None else np.median([f.ratios for f in per_throw], axis=0)))
    xs, Cs = zip(*(_ratio_pair(f, largest) for f in per_throw))
    xs, Cs = np.asarray(xs), np.asarray(Cs)
    W = np.linalg.inv(Cs)
    ref = _ratio_pair(joint, largest)[0] if joint is not None else \
        np.linalg.solve(W.sum(0), np.einsum("tij,tj->i", W, xs))
    d = xs - ref
    each = np.einsum("ti,tij,tj->t", d, W, d)
    chi2 = float(each.sum())
    dof = 2 * (len(per_throw) - 1)
    p = chi2_survival(chi2, dof)
    out = [int(k) for k in np.flatnonzero(each > OUTLIER_CHI2)]
    kept = 2 * (len(per_throw) - len(out) - 1)
    birge = math.sqrt(float(each[each <= OUTLIER_CHI2].sum()) / kept) if kept > 0 else float("nan")
    return Scatter(chi2, dof, p, birge, largest, ref, xs, np.sqrt(np.diagonal(Cs, axis1=1, axis2=2)), each, out)


def chi2_survival(x: float, dof: int) -> float:
    """``P(chi2_dof > x)`` for an even ``dof = 2k``: ``exp(-x/2) sum_{j<k} (x/2)^j / j!`` (the upper
    incomplete gamma function ``Q(k, x/2)`` at an integer ``k``; on the host, each term by its logarithm)."""
    k, y = dof // 2, x / 2
    if dof < 2 or dof % 2 or not x >= 0:
        raise ValueError(f"chi2_survival needs an even dof >= 2 and x >= 0, got {dof}, {x}")
    if y == 0:
        return 1.0
    return min(1.0, math.fsum(math.exp(-y + j * math.log(y) - math.lgamma(j + 1)) for j in range(k)))


@dataclasses.dataclass
class Comparison:
    """Torque-free against a torque model: the F statistic of the extra parameters, its p-value, the
    BIC difference (drag less torque-free: negative favours drag) and whether the data support the torque."""

    f_stat: float
    p_value: float
    delta_bic: float
    extra: int
    supports: bool

    def sentence(self) -> str:
        verdict = "support" if self.supports else "do not support"
        return (f"the data {verdict} the drag term (F = {self.f_stat:.3g} for {self.extra} extra parameter(s), "
                f"p = {self.p_value:.2g}; BIC difference {self.delta_bic:+.1f}, negative favours drag)")


def compare(free: Fit, torqued: Fit, level: float = 0.01) -> Comparison:
    """Torque-free ``free`` against ``torqued`` (same throws and observations): an F test of the extra
    parameters on the residual sums of squares and the BIC difference; the torque is supported where
    ``p < level`` and the BIC falls."""
    k = torqued.n_params - free.n_params
    if k <= 0:
        raise ValueError("compare(free, torqued): the second fit must have more unknowns than the first")
    m = torqued.n_residuals
    d2 = m - torqued.n_params
    F = max((free.ssr - torqued.ssr) / k, 0.0) / (torqued.ssr / d2)
    x = d2 / (d2 + k * F)
    p = float(jax.scipy.special.betainc(d2 / 2, k / 2, x))
    bic = lambda f: m * math.log(f.ssr / m) + f.n_params * math.log(m)  # noqa: E731
    dbic = bic(torqued) - bic(free)
    return Comparison(F, p, dbic, k, bool(p < level and dbic < 0))


