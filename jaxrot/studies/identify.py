"""Identify a rigid body from what its sensors measured: inertia ratios, sensor misalignment, gyro
bias and a weak torque (air drag) from gyroscope traces (and/or attitudes) of one or many throws.

The residual model is :mod:`jaxrot.studies.identify_model` (read its docstring for the equations);
the solver is :mod:`jaxrot.studies.levenberg_marquardt`. The steps:

1. **Global search.** The loss is multimodal: the time of a flip moves with the inertia ratios, so a
   local fit from a rough guess may settle in the wrong basin. Candidate bodies covering every
   physical inertia (low-discrepancy points on the simplex ``(a, b, c) >= 0``, ``J = 1 - (a, b, c)``,
   in two rounds, the second around the first's best) are simulated as one batch with the other
   unknowns at their start (initial rates from each throw's first samples, no bias, no misalignment,
   no torque), together with the bodies whose kinetic energy is most nearly constant over each throw
   (a linear estimate from the rates alone). The best few, far enough apart, start short
   Levenberg-Marquardt refinements (one compiled program for all starts) on up to ``search_throws`` throws.
   A fit whose misalignment turned the axes by a quarter turn is the same body with its axes named
   otherwise: they are renamed after the sensor axes nearest them, and the fit repeated there.
2. **Local fit.** Levenberg-Marquardt through ``jax`` forward-mode derivatives of the simulation, on
   all throws, from the best refinement; the Jacobian is block-arrow (shared unknowns, each throw's
   own), so a step costs time linear in the number of throws. An optional robust loss (Huber,
   soft-L1, Cauchy) with its threshold in units of the noise estimated from a first plain fit.
3. **Uncertainties.** ``cov = s^2 (J^T J)^-1`` at the optimum, ``s^2 = 2 cost / (m - p)`` the
   reduced chi-square (so the stated errors follow the residuals, also where ``sigma`` was given),
   carried to the reported quantities by the delta method. Across throws (:func:`scatter`): each
   throw fitted alone, started at the joint fit's values with the sensor misalignment held there (one
   throw hardly fixes the rotation about its spin axis), its ratios ``x_i`` compared with the joint
   fit's ``x`` through their stated covariance, ``chi2 = sum_i (x_i - x)^T C_i^-1 (x_i - x)`` with
   ``2 (T - 1)`` degrees of freedom; throws whose own chi2 has p < 1e-4 are named; where
   ``chi2 / dof`` of the others exceeds 1 the model misses something the noise does not explain, and
   the joint uncertainties are widened by its square root (the Birge ratio).
4. **Model comparison** (:func:`compare`): the torque-free and the drag model, an F test on the
   residual sums of squares and the BIC difference.

Gyroscope-only data fix the **ratios** of the moments, never their scale (Euler's equations are
homogeneous in J); :meth:`Fit.moments` refuses absolute moments unless a scale is given (the
trace, mass and box dimensions, or the angular momentum of a throw).
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ..geometry import so3
from . import identify_model as im
from .identify_model import (QUADRATIC_DRAG, Attitudes, Gyroscope, Layout, Throw, TorqueModel,  # noqa: F401
                             pack)
from .identify_results import Comparison, Fit, Scatter, compare, fit_of, rms, scatter  # noqa: F401
from .identify_search import make_model, residuals_jit, search, solve, solve_starts
from .levenberg_marquardt import Robust

__all__ = ["Throw", "Gyroscope", "Attitudes", "TorqueModel", "QUADRATIC_DRAG", "IdentifyOptions", "Fit", "identify",
           "identify_each", "start_from", "scatter", "Scatter", "compare", "Comparison", "analyse", "Analysis"]


@dataclasses.dataclass(frozen=True)
class IdentifyOptions:
    """How :func:`identify` searches and fits.

    Args:
      method: the integrator of the simulations (a registered name with torque support; constant steps).
      dt: its step (s); the discretisation error must stay far below the noise (the reproduction measures it).
      candidates: candidate bodies per round of the global search (two rounds).
      starts: Levenberg-Marquardt refinements from the best candidates.
      search_throws: the most throws the global search simulates (spread over the recording).
      max_iters: the most trial steps of a Levenberg-Marquardt run.
      robust: ``"linear"`` (least squares), ``"huber"``, ``"soft_l1"`` or ``"cauchy"``.
      robust_threshold: where the robust loss departs from the square, in units of the noise.
      chunk: candidates simulated at once (memory).
    """

    method: str = "rk4"
    dt: float = 0.004
    candidates: int = 1024
    starts: int = 6
    search_throws: int = 6
    max_iters: int = 200
    robust: str = "linear"
    robust_threshold: float = 3.0
    chunk: int = 256

    def __post_init__(self):
        if not (math.isfinite(self.dt) and self.dt > 0):
            raise ValueError(f"IdentifyOptions(dt=...) must be positive, got {self.dt}")
        for name in ("candidates", "starts", "search_throws", "max_iters", "chunk"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"IdentifyOptions({name}=...) must be >= 1, got {getattr(self, name)}")
        Robust(self.robust)  # checks the name
        if not self.robust_threshold > 0:
            raise ValueError(f"IdentifyOptions(robust_threshold=...) must be positive, got {self.robust_threshold}")


def _check_throws(throws, observe):
    if isinstance(throws, Throw):
        throws = [throws]
    throws = list(throws)
    if not throws:
        raise ValueError("no throws to fit")
    for t in throws:
        if not isinstance(t, Throw):
            raise TypeError(f"throws must be jaxrot.studies.identify.Throw objects, got {type(t).__name__}")
    models = observe if isinstance(observe, (tuple, list)) else (observe,)
    gyro = [m for m in models if isinstance(m, Gyroscope)]
    att = [m for m in models if isinstance(m, Attitudes)]
    if len(gyro) + len(att) != len(models) or len(gyro) > 1 or len(att) > 1 or not models:
        raise TypeError("observe must be Gyroscope(...), Attitudes(...) or a tuple of one of each")
    g, a = (gyro[0] if gyro else None), (att[0] if att else None)
    for k, t in enumerate(throws):
        if g is not None and t.omega is None:
            raise ValueError(f"throw {k} has no gyroscope rates, but a Gyroscope model was given")
        if a is not None and t.R is None:
            raise ValueError(f"throw {k} has no attitudes, but an Attitudes model was given")
    return throws, g, a


def _torque_of(torque):
    if torque is None:
        return None
    if isinstance(torque, str):
        if torque != "drag":
            raise ValueError(f"torque must be None, 'drag' or a TorqueModel, got {torque!r}")
        return QUADRATIC_DRAG
    if not isinstance(torque, TorqueModel):
        raise TypeError(f"torque must be None, 'drag' or a TorqueModel, got {type(torque).__name__}")
    return torque


def identify(throws: Sequence[Throw] | Throw, observe=Gyroscope(), *, torque="drag", misalignment: bool = True,
             ratios=None, start: dict | None = None, options: IdentifyOptions | None = None, progress: bool = False,
             hold: tuple = (), _shape=None) -> Fit:
    """Fit the inertia ratios, sensor misalignment, gyro bias (and scale), torque parameters and each
    throw's initial rates to the throws jointly.

    Args:
      throws: :class:`Throw` objects (one body; each a free flight).
      observe: :class:`Gyroscope`, :class:`Attitudes`, or a tuple of both.
      torque: ``"drag"`` (air drag ``-k |w| w``; the default), None (torque-free) or a :class:`TorqueModel`.
      misalignment: fit the small rotation between the sensor's and the principal axes.
      ratios: a start for the moments (any scale); None runs the global search (no guess needed).
      start: other known starting values, by the names of :class:`Fit`'s attributes: ``"misalignment"``
        (rad), ``"bias"`` ((3,) shared or (T, 3)), ``"omega0"`` ((T, 3), principal frame), ``"torque"``,
        ``"scale"``; the rest start at zero (initial rates: from each throw's first samples).
      options: :class:`IdentifyOptions`.
      progress: print what each stage did.
      hold: names of shared unknowns held at their start (``"torque"``, ``"misalignment"``, ``"scale"``,
        ``"bias"``): e.g. ``hold=("torque",)`` with ``start={"torque": [0.0]}`` fits the torque-free
        model by the same compiled program, as :func:`analyse` does for :func:`compare`.

    Returns:
      a :class:`Fit`.

    Example::

        fit = identify(throws, Gyroscope(bias="shared"), torque="drag")
        print(fit.summary())
    """
    t_start = time.perf_counter()
    options = IdentifyOptions() if options is None else options
    throws, gyro, att = _check_throws(throws, observe)
    torque = _torque_of(torque)
    layout = Layout(n_torque=0 if torque is None else len(torque.names), misalignment=bool(misalignment),
                    scale=bool(gyro is not None and gyro.scale), bias="none" if gyro is None else gyro.bias,
                    gyro=gyro is not None, attitudes=att is not None)
    # _shape: (samples, span[, rows]) to pad to, so that fits of throws of several lengths compile once;
    # rows (with ratios given: no search): empty throws after these (no residuals; the unknowns of their
    # own stay at zero), so that a throw fitted alone runs the program of a joint fit of that many throws
    model = make_model(throws, layout, torque, options, None if _shape is None else _shape[1])
    length = None if _shape is None else _shape[0]
    padded = _shape is not None and len(_shape) > 2 and ratios is not None
    rows = max(int(_shape[2]), len(throws)) if padded else len(throws)
    # weights: 1/sigma where given; both kinds without sigma: the rms of a first fit sets them
    w_g = 1.0 / gyro.sigma if gyro is not None and gyro.sigma else 1.0
    w_a = 1.0 / att.sigma if att is not None and att.sigma else 1.0
    data = pack(throws, w_g, w_a, length, rows)
    P, M = layout.n_shared, layout.n_throw
    sb = layout.shared_blocks()
    shared0 = np.zeros(P)
    fixed = np.zeros(P)
    if torque is not None:
        shared0[sb["torque"]] = np.asarray(torque.start, np.float64)
    for name in hold:  # held at their start: a model with fewer unknowns, compiled once with the full one
        if name not in sb or name == "ratios":
            raise ValueError(f"hold={tuple(hold)!r}: {name!r} is not a shared unknown of this fit (it has "
                             f"{', '.join(k for k in sb if k != 'ratios')})")
        fixed[sb[name]] = 1.0
    own0 = np.zeros((rows, M))
    own0[:len(throws), :3] = np.stack([im.initial_rates(t) for t in throws])
    _apply_start(start, layout, shared0, own0[:len(throws)])  # (a view: the empty rows stay at zero)
    S = min(len(throws), int(options.search_throws))
    sub_idx = np.unique(np.round(np.linspace(0, len(throws) - 1, S)).astype(int))
    small = len(sub_idx) == len(throws)

    def fit_all(data, shared, own, robust):
        """One Levenberg-Marquardt run on all throws (through the compiled refinement where it serves)."""
        if small:  # the same program as the refinements, on copies of the start
            K = int(options.starts)
            sols = solve_starts(model, data, jnp.asarray(np.repeat(np.asarray(shared)[None], K, 0)),
                                 jnp.asarray(np.repeat(np.asarray(own)[None], K, 0)), robust, jnp.asarray(fixed),
                                 max_iters=options.max_iters)
            return _row(sols, 0)
        return solve(model, data, jnp.asarray(shared), jnp.asarray(own), robust, jnp.asarray(fixed),
                      max_iters=options.max_iters)

    record = {}
    t1 = time.perf_counter()
    if ratios is None:
        sub = pack([throws[i] for i in sub_idx], w_g, w_a, length=data.ts.shape[1])
        U, record = search(model, sub, [throws[i] for i in sub_idx], jnp.asarray(shared0), jnp.asarray(own0[sub_idx]),
                            options, progress)
        starts_s = np.repeat(shared0[None], len(U), 0)
        starts_s[:, :2] = U
        starts_o = np.repeat(own0[sub_idx][None], len(U), 0)
        sols = solve_starts(model, sub, jnp.asarray(starts_s), jnp.asarray(starts_o), Robust(), jnp.asarray(fixed),
                             max_iters=options.max_iters)
        costs = np.asarray(sols.cost)
        best = int(np.argmin(np.where(np.isfinite(costs), costs, np.inf)))
        record["refined_costs"] = costs.tolist()
        record["refine_seconds"] = time.perf_counter() - t1
        if progress:
            print(f"  {len(U)} refinements on {len(sub_idx)} throw(s) in {record['refine_seconds']:.1f} s; best cost "
                  f"{costs[best]:.4g}", flush=True)
        sol = _row(sols, best)
        if not small:  # from the subset's body, every throw
            shared0 = np.asarray(sol.shared)
            own0[sub_idx] = np.asarray(sol.own)
            sol = fit_all(data, shared0, own0, Robust())
    else:
        shared0[:2] = im.u_from_moments(ratios)
        sol = fit_all(data, shared0, own0, Robust())
    if gyro is not None and att is not None and (gyro.sigma is None or att.sigma is None):
        r = np.asarray(residuals_jit(model, sol.shared, sol.own, data))
        n_g = 3 * data.ts.shape[1]
        mask = np.asarray(data.mask)
        w_g = w_g if gyro.sigma else w_g / rms(r[:, :n_g], mask)
        w_a = w_a if att.sigma else w_a / rms(r[:, n_g:], mask)
        data = pack(throws, w_g, w_a, length, rows)
        sol = fit_all(data, sol.shared, sol.own, Robust())
    robust_used = Robust()
    if options.robust != "linear":
        r = np.asarray(residuals_jit(model, sol.shared, sol.own, data))
        sel = np.repeat(np.asarray(data.mask), r.shape[1] // data.ts.shape[1], axis=1) > 0
        noise = 1.4826 * float(np.median(np.abs(r[sel])))
        robust_used = Robust(options.robust, options.robust_threshold * noise)
        sol = fit_all(data, sol.shared, sol.own, robust_used)
    relabelled = _relabel(layout, torque, np.asarray(sol.shared), np.asarray(sol.own))
    if relabelled is not None:  # the same body with its axes named after the sensor's: refitted there
        sol = fit_all(data, *relabelled, robust_used)
        record["relabelled"] = True
    if progress:
        print(f"  fit of {len(throws)} throw(s): {int(sol.iterations)} iterations in {time.perf_counter() - t1:.1f} s",
              flush=True)
    return fit_of(model, data, sol, throws, (w_g, w_a), record, time.perf_counter() - t_start, fixed,
                  linear=robust_used.kind == "linear")


def _row(sols, k: int):
    """Start ``k``'s solution, on the host (one transfer; indexing each array on the device would
    compile a small program per array on a first call)."""
    return jax.tree_util.tree_map(lambda x: x[k], jax.device_get(sols))


_exp = jax.jit(so3.exp)  # one compiled program each, not one per operation run outside one
_log = jax.jit(so3.log)
_moments = jax.jit(im.moments_from_u)


def _relabel(layout, torque, shared, own):
    """The unknowns with the principal axes renamed after the sensor axes nearest them, where the
    fitted misalignment turned them by a quarter turn or more (the same body, the same residuals: a body
    with moments (a, b, c) is the one with (c, b, a) turned a quarter turn about its second axis);
    None where no axis is renamed or the torque model is not the built-in (isotropic) drag."""
    sb, tb = layout.shared_blocks(), layout.throw_blocks()
    if "misalignment" not in sb or torque not in (None, QUADRATIC_DRAG):
        return None
    Q = np.asarray(_exp(jnp.asarray(shared[sb["misalignment"]])))
    P = np.zeros((3, 3))  # the signed permutation nearest Q: principal axis j is sensor axis i
    for i, j in enumerate(np.argmax(np.abs(Q), axis=1)):
        P[i, j] = np.sign(Q[i, j])
    if np.allclose(P, np.eye(3)) or not np.isclose(abs(np.linalg.det(P)), 1.0) or np.linalg.det(P) < 0:
        return None
    J = np.asarray(_moments(jnp.asarray(shared[:2])))
    shared, own = shared.copy(), own.copy()
    shared[:2] = im.u_from_moments(np.abs(P) @ J)
    shared[sb["misalignment"]] = np.asarray(_log(jnp.asarray(Q @ P.T)))
    own[:, :3] = own[:, :3] @ P.T
    if "attitude0" in tb:
        own[:, tb["attitude0"]] = own[:, tb["attitude0"]] @ P.T
    return shared, own


def _apply_start(start, layout, shared0, own0) -> None:
    """Known starting values into the unknowns' vectors (in place)."""
    if not start:
        return
    sb, tb = layout.shared_blocks(), layout.throw_blocks()
    for name, value in start.items():
        v = np.asarray(value, np.float64)
        if name == "omega0":
            own0[:, :3] = np.broadcast_to(v, own0[:, :3].shape)
        elif name == "bias" and "bias" in tb:
            own0[:, tb["bias"]] = np.broadcast_to(v, own0[:, tb["bias"]].shape)
        elif name in sb and name != "ratios":
            shared0[sb[name]] = np.broadcast_to(v, shared0[sb[name]].shape)
        else:
            raise ValueError(f"start={{{name!r}: ...}}: not an unknown of this fit (it has "
                             f"{', '.join(k for k in [*sb, *tb] if k != 'ratios')})")


def identify_each(throws, observe=Gyroscope(), *, from_fit: Fit | None = None, progress: bool = False,
                  **kw) -> list[Fit]:
    """Each throw fitted alone (its own bias, misalignment and torque parameters), as :func:`identify`
    (``**kw``: its options). ``from_fit``: start each throw at that fit's values (its ratios,
    misalignment, torque, scale and the throw's bias and initial rates; no global search), so that the
    per-throw fits stay in its basin, as :func:`scatter` needs."""
    throws, _, _ = _check_throws(throws, observe)
    # one shape for all: the fit compiles once; started from a joint fit of up to search_throws throws
    # (one program, of all of them), each throw is fitted by that program, the other rows empty
    shape = (max(len(t.ts) for t in throws), max(t.duration for t in throws))
    if from_fit is not None and len(throws) <= (kw.get("options") or IdentifyOptions()).search_throws:
        shape = shape + (len(throws),)
    from ..driver.progress import items

    if from_fit is not None:
        if len(from_fit.omega0) != len(throws):
            raise ValueError(f"from_fit has {len(from_fit.omega0)} throws, {len(throws)} were given")
        kw = {**kw, "ratios": from_fit.moments_trace1}
    seq = items(range(len(throws)), "throws fitted one by one", unit="throws") if progress else range(len(throws))
    return [identify([throws[k]], observe, _shape=shape, start=None if from_fit is None else start_from(from_fit, k),
                     **kw) for k in seq]


def start_from(fit: Fit, k: int | None = None) -> dict:
    """``fit``'s values as a ``start`` for :func:`identify` (of throw ``k`` alone, or of all throws)."""
    sel = slice(None) if k is None else k
    out = {"omega0": fit.omega0[sel]}
    for name in ("misalignment", "scale"):
        if getattr(fit, name) is not None:
            out[name] = getattr(fit, name)
    if len(fit.torque):
        out["torque"] = fit.torque
    if fit.bias is not None:
        out["bias"] = fit.bias[sel] if np.ndim(fit.bias) == 2 else fit.bias
    return out


@dataclasses.dataclass
class Analysis:
    """Everything :func:`analyse` found: the joint fit (uncertainties widened where the scatter says so),
    the torque-free fit, the per-throw fits, the scatter and the comparison."""

    joint: Fit
    unwidened: Fit
    torque_free: Fit | None
    per_throw: list
    scatter: Scatter | None
    comparison: Comparison | None
    seconds: float

    def summary(self) -> str:
        out = [self.joint.summary()]
        if self.scatter is not None:
            out.append(self.scatter.sentence())
        if self.comparison is not None:
            out.append(self.comparison.sentence())
        return "\n".join(out)


def analyse(throws, observe=Gyroscope(), *, torque="drag", misalignment: bool = True, options=None,
            per_throw: bool = True, progress: bool = False) -> Analysis:
    """The joint fit; the torque-free fit (for :func:`compare`) and each throw alone (for :func:`scatter`),
    both started at the joint fit's values; and the joint uncertainties widened by the Birge ratio where
    the scatter exceeds the stated errors. Returns an :class:`Analysis`."""
    t0 = time.perf_counter()
    throws, _, _ = _check_throws(throws, observe)
    torque = _torque_of(torque)
    if progress:
        print(f"joint fit of {len(throws)} throw(s)", flush=True)
    joint = identify(throws, observe, torque=torque, misalignment=misalignment, options=options, progress=progress)
    free = comp = None
    if torque is not None:
        if progress:
            print("torque-free fit (for the comparison)", flush=True)
        free = identify(throws, observe, torque=torque, misalignment=misalignment, options=options,
                        ratios=joint.moments_trace1, start={**start_from(joint), "torque": np.zeros(len(joint.torque))},
                        hold=("torque",), progress=progress)
        comp = compare(free, joint)
    each, sc = [], None
    if per_throw and len(throws) >= 2:
        each = identify_each(throws, observe, torque=torque, misalignment=misalignment, options=options,
                             from_fit=joint, hold=("misalignment",) if misalignment else (), progress=progress)
        sc = scatter(each, joint)
    final = joint.widen(sc.birge) if sc is not None and sc.misses else joint
    return Analysis(final, joint, free, each, sc, comp, time.perf_counter() - t0)
