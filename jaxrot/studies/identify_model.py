"""What a thrown body's sensors measure, as functions of its unknowns: the residual model that
:func:`jaxrot.studies.identify.identify` minimises.

A throw is a stretch of free flight sampled at times ``t_k`` (irregular times are fine). The body
turns freely (or under a weak torque of the body rates, such as air drag); its principal axes are
the model's body frame. The sensor's axes are the principal axes turned by a small rotation
``Q = exp(hat q)``: a vector with principal components ``v`` has sensor components ``Q v``.

**Gyroscope** (:class:`Gyroscope`): the body rates in the sensor frame,

    omega_meas(t_k) = s * (Q omega(t_k)) + b + noise,

with a per-axis bias ``b`` (one for the whole recording, or one per throw) and an optional scale
factor ``s`` (per axis, ``s = 1 + sigma_s``). **Attitudes** (:class:`Attitudes`): the sensor's
attitude (sensor to world) ``R_s(t) = R_p(t) Q^T``, with ``R_p`` the principal frame's,
``R_p(0) = R_obs(0) Q exp(hat delta)`` (``delta``: a per-throw unknown, the first observation's
error), compared through ``log(R_obs^T R_s)``.

**Dynamics.** Euler's equations are homogeneous in ``J``: rates and attitudes fix only the ratios
of the moments. The moments are therefore parametrised up to scale, physical by construction (as
in :mod:`jaxrot.studies.fitting`): ``J = (b + c, a + c, a + b) / (2 (a + b + c))`` with
``(a, b, c) = (exp u1, exp u2, 1)``, which makes ``trace J = 1``. A torque model is a body-frame
torque of the body rates divided by the trace, ``tau / trace(J) = fn(t, omega, args)``; the built-in
air drag ``tau = -k |omega| omega`` therefore has the one parameter ``kappa = k / trace(J)``
(dimensionless), and ``k`` itself needs a scale. The rates and attitude of the principal frame
come from :func:`jaxrot.simulate` (constant steps of ``method``, every step kept) and the library's
dense output (:func:`jaxrot.driver.dense.interpolate`) at the sample times. Since the torque acts in
the body frame and depends on the rates only, a throw's attitude is ``R_p(0) R_sim(t)`` with
``R_sim`` the run from the identity: the initial attitude never enters the simulation.

Unknowns are two flat vectors: the **shared** ones (ratios ``u``, torque parameters, misalignment
``q``, scale, a shared bias) and each throw's own (initial rates ``omega0`` in the principal frame at
its first sample, a per-throw bias, the attitude correction ``delta``); :class:`Layout` says where
each lives.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..driver.dense import interpolate, interpolate_momentum
from ..driver.saveat import SaveAt
from ..driver.simulate import simulate
from ..geometry import so3
from ..geometry.body import RigidBody
from ..geometry.state import State
from ..physics.problems import Problem
from ..physics.torques import FreeTorque, Torque

#: the fewest samples a throw may have (it has at least 3 + 3 unknowns of its own)
MIN_SAMPLES = 10

#: |u| is kept below this: a moment ratio of exp(-30) is already a needle (and exp stays finite)
U_LIMIT = 30.0

BIAS_CHOICES = ("shared", "per_throw", "none")


class Throw:
    """One free flight: sample times ``ts`` (s, increasing; irregular is fine), gyroscope rates
    ``omega`` (n, 3) in the sensor frame (rad/s) and/or attitudes ``R`` (n, 3, 3), sensor to world.

    Example::

        throw = Throw(ts, omega=gyro_xyz, label="throw 1")
        throw = Throw.from_quaternions(ts, q_wxyz, "wxyz")
    """

    def __init__(self, ts, omega=None, R=None, label: str = ""):
        self.label = str(label)
        name = f"throw {self.label!r}" if self.label else "the throw"
        ts = np.asarray(ts, np.float64)
        if ts.ndim != 1:
            raise ValueError(f"{name}: ts must be one-dimensional, got shape {ts.shape}")
        if ts.size < MIN_SAMPLES:
            raise ValueError(f"{name} has {ts.size} samples; at least {MIN_SAMPLES} are needed (a longer window, "
                             "or a higher sample rate)")
        if not np.all(np.isfinite(ts)):
            raise ValueError(f"{name}: sample time {int(np.argmin(np.isfinite(ts)))} is not finite")
        bad = np.flatnonzero(np.diff(ts) <= 0)
        if bad.size:
            k = int(bad[0]) + 1
            raise ValueError(f"{name}: sample times must increase; sample {k} ({ts[k]!r}) is not after sample "
                             f"{k - 1} ({ts[k - 1]!r})")
        self.ts, self.omega, self.R = ts, None, None
        if omega is None and R is None:
            raise ValueError(f"{name} has no observations: give omega (gyroscope rates), R (attitudes) or both")
        if omega is not None:
            om = np.asarray(omega, np.float64)
            if om.shape != ts.shape + (3,):
                raise ValueError(f"{name}: omega must have shape ({ts.size}, 3), got {om.shape}")
            if not np.all(np.isfinite(om)):
                raise ValueError(f"{name}: omega of sample {int(np.argmin(np.isfinite(om).all(1)))} is not finite")
            self.omega = om
        if R is not None:
            R = np.asarray(R, np.float64)
            if R.shape != ts.shape + (3, 3):
                raise ValueError(f"{name}: R must have shape ({ts.size}, 3, 3), got {R.shape}")
            if not np.all(np.isfinite(R)):
                k = int(np.argmin(np.isfinite(R).all((1, 2))))
                raise ValueError(f"{name}: attitude of sample {k} is not finite")
            err = np.abs(np.einsum("nji,njk->nik", R, R) - np.eye(3)).max(axis=(1, 2))
            if err.max() > 1e-6 or np.any(np.linalg.det(R) < 0):
                k = int(np.argmax((err > 1e-6) | (np.linalg.det(R) < 0)))
                raise ValueError(f"{name}: attitude of sample {k} is not a rotation matrix")
            self.R = R

    def __repr__(self):
        what = [k for k, v in (("omega", self.omega), ("R", self.R)) if v is not None]
        return (f"Throw({len(self.ts)} samples, {self.ts[0]:g}-{self.ts[-1]:g} s, {'+'.join(what)}, "
                f"label={self.label!r})")

    @classmethod
    def from_quaternions(cls, ts, q, order: str, omega=None, label: str = "") -> "Throw":
        """Attitudes given as unit quaternions in ``order`` (``"wxyz"`` or SciPy's ``"xyzw"``)."""
        q = np.asarray(q, np.float64)
        if order not in ("wxyz", "xyzw"):
            raise ValueError(f"order must be 'wxyz' or 'xyzw', got {order!r}")
        if q.ndim != 2 or q.shape[1] != 4:
            raise ValueError(f"quaternions must have shape (n, 4), got {q.shape}")
        if order == "xyzw":
            q = q[:, [3, 0, 1, 2]]
        q = q / np.linalg.norm(q, axis=1, keepdims=True)
        R = np.asarray(jax.vmap(so3.quat_to_matrix)(jnp.asarray(q)))
        return cls(ts, omega=omega, R=R, label=label)

    @property
    def duration(self) -> float:
        return float(self.ts[-1] - self.ts[0])


@dataclasses.dataclass(frozen=True)
class Gyroscope:
    """Gyroscope rates: ``omega_meas = s * (Q omega) + b + noise``.

    Args:
      bias: ``"shared"`` (one bias for the whole recording: the default, right for throws cut from
        one recording), ``"per_throw"`` (each throw its own) or ``"none"``.
      scale: fit a per-axis scale factor ``s`` (shared).
      sigma: the rate noise (rad/s), or None: estimated from the residuals (the uncertainties are
        scaled by the residuals either way).
    """

    bias: str = "shared"
    scale: bool = False
    sigma: float | None = None

    def __post_init__(self):
        if self.bias not in BIAS_CHOICES:
            raise ValueError(f"Gyroscope(bias=...) must be one of {BIAS_CHOICES}, got {self.bias!r}")
        if self.sigma is not None and not (np.isfinite(self.sigma) and self.sigma > 0):
            raise ValueError(f"Gyroscope(sigma=...) must be positive, got {self.sigma}")


@dataclasses.dataclass(frozen=True)
class Attitudes:
    """Observed attitudes (sensor to world): residual ``log(R_obs^T R_model)``; ``sigma`` their noise
    (rad), or None: estimated from the residuals."""

    sigma: float | None = None

    def __post_init__(self):
        if self.sigma is not None and not (np.isfinite(self.sigma) and self.sigma > 0):
            raise ValueError(f"Attitudes(sigma=...) must be positive, got {self.sigma}")


@dataclasses.dataclass(frozen=True)
class TorqueModel:
    """A body-frame torque of the body rates with shared unknown parameters:
    ``tau_body / trace(J) = fn(t, omega, args)`` (``omega`` the principal-frame rates, ``args`` a
    1-D array of ``len(names)`` parameters, fitted from ``start``).

    Example::

        drag = TorqueModel(lambda t, w, a: -a[0] * jnp.sqrt(w @ w) * w, names=("kappa",), start=(0.0,))
    """

    fn: Callable
    names: tuple
    start: tuple
    description: str = ""

    def __post_init__(self):
        if len(self.names) != len(self.start) or not self.names:
            raise ValueError("TorqueModel needs one start value per parameter name (and at least one)")
        out = jax.eval_shape(self.fn, jax.ShapeDtypeStruct((), jnp.float64), jax.ShapeDtypeStruct((3,), jnp.float64),
                             jax.ShapeDtypeStruct((len(self.names),), jnp.float64))
        if out.shape != (3,):
            raise TypeError(f"TorqueModel.fn(t, omega, args) must return shape (3,), got {out.shape}")


def _drag(t, w, a):
    # |w| without a NaN derivative at w = 0 (never reached in flight, but a trial step may get there)
    return -a[0] * jnp.sqrt(jnp.dot(w, w) + 1e-300) * w


#: air drag ``tau = -k |omega| omega`` (body frame); fitted as ``kappa = k / trace(J)``
QUADRATIC_DRAG = TorqueModel(_drag, names=("kappa",), start=(0.0,),
                             description="air drag tau = -k |omega| omega (body frame), kappa = k / trace(J)")


def moments_from_u(u):
    """Principal moments with trace 1 from the two free parameters ``u``: always positive and physical."""
    a = jnp.exp(jnp.clip(u, -U_LIMIT, U_LIMIT))
    abc = jnp.concatenate([a, jnp.ones((1,), a.dtype)])
    s = jnp.sum(abc)
    return (s - abc) / (2 * s)


def u_from_moments(J):
    """The parameters ``u`` of moments ``J`` (any scale; physical, not on the triangle's edge)."""
    J = np.asarray(J, np.float64)
    abc = 0.5 * J.sum() - J  # a = s - J1, ... (fitting.params_from_moments)
    if np.any(abc <= 0):
        raise ValueError(f"moments {J} lie on or beyond the triangle inequality's edge")
    return np.log(abc[:2] / abc[2])


def ratios_to_largest(J):
    return J / jnp.max(J)


class Layout(eqx.Module):
    """Where each unknown lives in the shared vector and in a throw's own vector (static)."""

    n_torque: int = eqx.field(static=True)
    misalignment: bool = eqx.field(static=True)
    scale: bool = eqx.field(static=True)
    bias: str = eqx.field(static=True)
    gyro: bool = eqx.field(static=True)
    attitudes: bool = eqx.field(static=True)

    def shared_blocks(self) -> dict:
        sizes = {"ratios": 2, "torque": self.n_torque}
        if self.misalignment:
            sizes["misalignment"] = 3
        if self.gyro and self.scale:
            sizes["scale"] = 3
        if self.gyro and self.bias == "shared":
            sizes["bias"] = 3
        return _slices(sizes)

    def throw_blocks(self) -> dict:
        sizes = {"omega0": 3}
        if self.gyro and self.bias == "per_throw":
            sizes["bias"] = 3
        if self.attitudes:
            sizes["attitude0"] = 3
        return _slices(sizes)

    @property
    def n_shared(self) -> int:
        return sum(s.stop - s.start for s in self.shared_blocks().values())

    @property
    def n_throw(self) -> int:
        return sum(s.stop - s.start for s in self.throw_blocks().values())

    @property
    def n_dynamic_shared(self) -> int:
        """The shared unknowns the simulation depends on (ratios, torque): the first ones."""
        return 2 + self.n_torque


def _slices(sizes: dict) -> dict:
    out, k = {}, 0
    for name, n in sizes.items():
        if n:
            out[name] = slice(k, k + n)
            k += n
    return out


def _part(x, blocks, name, default):
    return x[blocks[name]] if name in blocks else default


class Data(eqx.Module):
    """Throws padded to one length: times from each throw's first sample, a mask of real samples,
    the observations and the weights ``1 / sigma`` (leading axis: throws)."""

    ts: jax.Array        # (T, n)
    mask: jax.Array      # (T, n) 1.0 for a sample, 0.0 for padding
    omega: jax.Array     # (T, n, 3)
    R: jax.Array         # (T, n, 3, 3)
    w_gyro: jax.Array    # ()
    w_att: jax.Array     # ()


def pack(throws, w_gyro: float = 1.0, w_att: float = 1.0, length: int | None = None,
         rows: int | None = None) -> Data:
    """The throws as one padded :class:`Data` (the last sample repeated, masked out); ``rows``: that
    many rows, those after the throws empty (every sample masked: no residual, no derivative)."""
    n = max(len(t.ts) for t in throws) if length is None else length
    T = len(throws) if rows is None else max(int(rows), len(throws))
    ts, mask = np.zeros((T, n)), np.zeros((T, n))
    om, R = np.zeros((T, n, 3)), np.tile(np.eye(3), (T, n, 1, 1))
    for i, t in enumerate(throws):
        k = len(t.ts)
        rel = t.ts - t.ts[0]
        ts[i, :k], ts[i, k:] = rel, rel[-1]
        mask[i, :k] = 1.0
        if t.omega is not None:
            om[i, :k], om[i, k:] = t.omega, t.omega[-1]
        if t.R is not None:
            R[i, :k], R[i, k:] = t.R, t.R[-1]
    return Data(jnp.asarray(ts), jnp.asarray(mask), jnp.asarray(om), jnp.asarray(R), jnp.asarray(float(w_gyro)),
                jnp.asarray(float(w_att)))


class Model(eqx.Module):
    """The residuals of one throw as a function of the shared and the throw's own unknowns.

    ``method``/``dt``/``n_steps``: the simulation (constant steps covering the longest throw)."""

    layout: Layout
    torque: Any = eqx.field(static=True)   # TorqueModel or None
    method: str = eqx.field(static=True)
    dt: float = eqx.field(static=True)
    n_steps: int = eqx.field(static=True)

    # --- dynamics -------------------------------------------------------------------------------
    def problem(self, dyn, omega0):
        """The simulated problem: ``dyn`` = (u, torque args), initial rates ``omega0`` (principal frame)."""
        J = moments_from_u(dyn[:2])
        if self.torque is None:
            torque = FreeTorque()
        else:
            fn = self.torque.fn

            def body_torque(t, R, Pi, args):
                Jm, a = args
                return fn(t, Pi / Jm, a)

            torque = Torque(body_torque, frame="body", args=(J, dyn[2:]))
        state0 = State(jnp.eye(3, dtype=omega0.dtype), J * omega0)
        return Problem(RigidBody(J), torque, state0, self.n_steps * self.dt)

    def dynamics(self, dyn, omega0, ts):
        """Principal-frame rates (n, 3) and the attitude from the identity (n, 3, 3) at times ``ts``; the
        attitude None where the layout observes none (its interpolation is most of what a fit of rates
        alone would trace and compile)."""
        prob = self.problem(dyn, omega0)
        # a trial point the solver should back away from gives NaN (a non-finite cost, refused), not an
        # error; and no check calling back into Python, so the fit's programs stay in the compilation cache
        tr = simulate(self.method, prob, self.dt, self.n_steps, saveat=SaveAt(steps=True), throw=False,
                      on_invalid="nan")
        dt = jnp.asarray(self.dt, ts.dtype)
        k = jnp.clip(jnp.floor(ts / dt).astype(jnp.int32), 0, self.n_steps - 1)
        s0 = jax.tree_util.tree_map(lambda x: x[k], tr.states)
        s1 = jax.tree_util.tree_map(lambda x: x[k + 1], tr.states)
        tk = k.astype(ts.dtype) * dt
        if not self.layout.attitudes:
            Pi = jax.vmap(lambda tk, a, b, s: interpolate_momentum(prob.system, tk, dt, a, b, s))(tk, s0, s1, ts - tk)
            return Pi / prob.body.J, None
        st = jax.vmap(lambda tk, a, b, s: interpolate(prob.system, tk, dt, a, b, s))(tk, s0, s1, ts - tk)
        return st.Pi / prob.body.J, st.R

    # --- observations ---------------------------------------------------------------------------
    def observe(self, shared, own, rates, R_sim, data_i):
        """Weighted residuals of one throw (flat; masked samples are zero) from its simulated rates and
        attitudes."""
        L = self.layout
        sb, tb = L.shared_blocks(), L.throw_blocks()
        dtype = shared.dtype
        Q = so3.exp(shared[sb["misalignment"]]) if L.misalignment else jnp.eye(3, dtype=dtype)
        m = data_i.mask[:, None]
        out = []
        if L.gyro:
            s = 1.0 + _part(shared, sb, "scale", jnp.zeros(3, dtype))
            b = _part(shared, sb, "bias", _part(own, tb, "bias", jnp.zeros(3, dtype)))
            pred = s * (rates @ Q.T) + b
            out.append(((pred - data_i.omega) * data_i.w_gyro * m).reshape(-1))
        if L.attitudes:
            R0 = data_i.R[0] @ Q @ so3.exp(own[tb["attitude0"]])
            pred = jnp.einsum("ij,njk,lk->nil", R0, R_sim, Q)
            err = jax.vmap(lambda A, B: so3.log(A.T @ B))(data_i.R, pred)
            out.append((err * data_i.w_att * m).reshape(-1))
        return jnp.concatenate(out)

    def residuals(self, shared, own, data_i):
        """Weighted residuals of one throw (flat)."""
        n = self.layout.n_dynamic_shared
        rates, R = self.dynamics(shared[:n], own[:3], data_i.ts)
        return self.observe(shared, own, rates, R, data_i)

    def linearise(self, shared, own, data_i):
        """Residuals of one throw and their Jacobians in the shared and the throw's own unknowns.

        Only the ratios, torque parameters and initial rates move the simulation: its forward-mode
        Jacobian is taken in those alone, and the observation's chain rule adds the rest."""
        n = self.layout.n_dynamic_shared
        dyn = jnp.concatenate([shared[:n], own[:3]])

        def sim(d):
            return self.dynamics(d[:n], d[n:], data_i.ts)

        (rates, R), (d_rates, d_R) = _value_and_jacfwd(sim, dyn)
        obs = lambda r, Rm, s, o: self.observe(s, o, r, Rm, data_i)  # noqa: E731
        res = obs(rates, R, shared, own)
        # through the simulation: one jvp of the observation per simulated direction
        through = jax.vmap(lambda dr, dR: jax.jvp(lambda r, Rm: obs(r, Rm, shared, own), (rates, R), (dr, dR))[1],
                           in_axes=(-1, -1), out_axes=-1)(d_rates, d_R)
        A, B = jax.jacfwd(obs, argnums=(2, 3))(rates, R, shared, own)
        A = A.at[:, :n].add(through[:, :n])
        B = B.at[:, :3].add(through[:, n:])
        return res, A, B


def _value_and_jacfwd(f, x):
    """``f(x)`` and its forward-mode Jacobian (trailing axis: the directions), in one pass."""
    basis = jnp.eye(x.size, dtype=x.dtype)
    out, tangents = jax.vmap(lambda v: jax.jvp(f, (x,), (v,)), out_axes=(None, -1))(basis)
    return out, tangents


def initial_rates(throw: Throw, bias=np.zeros(3), k: int = 5) -> np.ndarray:
    """A start for a throw's initial rates: a straight line through its first ``k`` gyroscope samples
    at its first time, less ``bias``; from the first attitudes where no rates are measured."""
    if throw.omega is not None:
        t = throw.ts[:k] - throw.ts[0]
        coef = np.polyfit(t, throw.omega[:k], 1)
        return coef[1] - np.asarray(bias)
    k = min(3, len(throw.ts) - 1)
    rel = np.asarray(so3.log(jnp.asarray(throw.R[0].T @ throw.R[k])))
    return rel / (throw.ts[k] - throw.ts[0])
