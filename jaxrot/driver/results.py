"""Results of a run: :class:`Trajectory` (saved frames, statistics, per-body result, provenance), saved
and loaded as ``.npz``."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..geometry import so3
from ..geometry.state import State
from ..integrators.stats import StepStats
from .failures import codes_of, result_of


class Provenance:
    """How a trajectory was made, as ``(key, value)`` string pairs (``dict(p)`` gives them as a dict).

    Metadata, not data: any two are equal and hash alike, so a trajectory's pytree structure does not
    depend on them and a jitted function of trajectories made with different ``dt`` (or by different
    methods) is traced once."""

    __slots__ = ("pairs",)

    def __init__(self, pairs=()):
        self.pairs = tuple(sorted((str(k), str(v)) for k, v in dict(pairs).items()))

    def __iter__(self):
        return iter(self.pairs)

    def __len__(self):
        return len(self.pairs)

    def __eq__(self, other):
        return isinstance(other, Provenance)

    def __hash__(self):
        return hash(Provenance)

    def __repr__(self):
        return f"Provenance({dict(self.pairs)!r})"


class AdaptiveStats(eqx.Module):
    """The step counts of a run, per body: steps kept (``n_accepted``; with constant steps, the steps
    taken) and attempts repeated with a smaller step (``n_rejected``), the last accepted step's scaled
    error estimate (``err_estimate``, <= 1; None with constant steps, which estimate none); for a run aiming at the *global*
    error (:class:`~jaxrot.GlobalError`) also the estimated global error in units of the tolerance
    (``global_error``), the local tolerance of the returned run (``tolerance``) and the attempts spent
    in its calibration runs (``n_calibration``)."""

    n_accepted: jax.Array
    n_rejected: jax.Array
    err_estimate: jax.Array | None = None
    global_error: jax.Array | None = None
    tolerance: jax.Array | None = None
    n_calibration: jax.Array | None = None


class Trajectory(eqx.Module):
    """The result of every run: saved frames, statistics, the outcome per body and how it was made.

    ``ts`` has shape ``(n_saved,)`` and ``states`` leading axis ``n_saved`` (after a batch axis, if
    any); with ``SaveAt(t0=True)`` (the default) the initial state comes first. ``stats`` aggregates
    each saved interval's steps (leading axis: the frames after the first). ``failed_step`` is the
    first step (1-based) whose solve failed, whose state became non-finite or whose invariants
    drifted, or -1 (0 where an input was invalid, with ``simulate(..., on_invalid="nan")``); ``result``
    the reason, a :class:`jaxrot.RESULTS` item, per body in a batch.
    ``controller``: the step counts (:class:`AdaptiveStats`), per body.
    ``system``: the body and torque the run integrated (for energies and angular velocities).
    ``provenance`` records how it was made (method, problem, dt, steps, dtype, executor, versions) as
    ``(key, value)`` string pairs (:class:`Provenance`, outside the pytree's data); :attr:`info` gives
    it as a dict. ``dense``: what :meth:`evaluate` needs after a run with ``SaveAt(dense=True)``, else
    None. ``event_time``, ``event_state``: where a run with ``event=`` (:class:`~jaxrot.Event`) found
    its event, per body (NaN where none), else None.
    """

    ts: jax.Array
    states: State
    stats: StepStats
    failed_step: jax.Array
    result: Any = None
    controller: AdaptiveStats | None = None
    system: Any = None
    dense: Any = None
    event_time: jax.Array | None = None
    event_state: State | None = None
    provenance: Provenance = eqx.field(static=True, default=Provenance())

    def evaluate(self, t) -> State:
        """The state at time(s) ``t`` (a scalar or an array within the run's span) from the dense
        output: shape ``t.shape`` after the batch axis, if any; differentiable. Needs a run with
        ``SaveAt(dense=True)``.

        Example::

            traj = jaxrot.simulate("buss4", p, 1e-2, 100, saveat=jaxrot.SaveAt(dense=True))
            mid = traj.evaluate(0.505)
        """
        if self.dense is None:
            if self.info.get("dense_output") == "not stored":
                raise ValueError("this trajectory was read from a file, which keeps no dense output: run again "
                                 "with saveat=jaxrot.SaveAt(dense=True) to evaluate between its frames")
            raise ValueError("evaluate needs a run with saveat=jaxrot.SaveAt(dense=True)")
        try:
            return self.dense(t)
        except ValueError as e:
            failed = self.failed_step
            if isinstance(failed, jax.core.Tracer) or not np.any(np.asarray(failed) >= 0):
                raise
            raise ValueError(f"{e}; the run stopped before the end of its span: a step failed "
                             f"(traj.failed_step, traj.result)") from None

    @property
    def info(self) -> dict:
        """The provenance as a dict of strings."""
        return dict(self.provenance)

    def with_provenance(self, **info) -> "Trajectory":
        """A copy with ``info`` added to the provenance (values stored as strings)."""
        merged = {**self.info, **{k: str(v) for k, v in info.items()}}
        return dataclasses.replace(self, provenance=Provenance(merged))

    def save(self, path) -> None:
        """Write the trajectory and its provenance to ``path`` (``.npz``, uncompressed, exact): frames,
        statistics, outcome and an event's time and state. Of the system only the moments ``J`` are
        stored, and the whole system where it is torque-free (a torque may be a function: attach it
        again with ``dataclasses.replace(traj, system=problem.system)``); a dense output is not stored
        (its provenance says so, and :meth:`evaluate` of the loaded trajectory explains).

        Example::

            traj.save("run.npz"); same = jaxrot.load("run.npz")
        """
        if not str(path).endswith(".npz"):
            raise ValueError(f"trajectory files end in .npz, got {path!r}")
        from ..physics.torques import FreeTorque

        arrays = {"ts": self.ts, "R": self.states.R, "Pi": self.states.Pi, "failed_step": self.failed_step}
        info = dict(self.info)
        if self.event_time is not None:
            arrays.update({"event.time": self.event_time, "event.R": self.event_state.R,
                           "event.Pi": self.event_state.Pi})
        if self.dense is not None:
            info["dense_output"] = "not stored"
        if self.result is not None:
            arrays["result"] = codes_of(self.result)
        arrays.update({f"stats.{f.name}": getattr(self.stats, f.name) for f in dataclasses.fields(self.stats)})
        if self.controller is not None:
            arrays.update({f"controller.{f.name}": getattr(self.controller, f.name)
                           for f in dataclasses.fields(self.controller) if getattr(self.controller, f.name) is not None})
        if self.system is not None:
            arrays["system.J"] = self.system.body.J
            if isinstance(self.system.torque, FreeTorque):
                arrays["system.torque_free"] = np.asarray(self.system.body.physical)  # (RigidBody's flag)
        np.savez(path, **{k: np.asarray(v) for k, v in arrays.items()}, provenance=np.asarray(json.dumps(info)))

    @property
    def final(self) -> State:
        """The last saved state."""
        return _last_frame(self.states)

    # --- the attitude in other forms, and per-frame physics -------------------------------------------------------
    # Frames are ``states.R[..., k, :, :]``: the time axis is the one before the matrix (after any batch axes).

    def quaternion(self, order: str = "wxyz") -> jax.Array:
        """Unit quaternion of every frame, shape ``(..., n_saved, 4)``, **sign continuous** along the
        frames (:func:`jaxrot.so3.quaternion_continuous`: consecutive frames have ``q_k . q_{k-1} >= 0``,
        the first frame has ``w >= 0``), so curves of the components have no jumps.

        ``order="wxyz"`` (scalar first, the library's) or ``"xyzw"`` (scalar last, SciPy's).

        Example::

            q = traj.quaternion("xyzw")  # feed to a renderer, or Rotation.from_quat
        """
        if _is_static(order):
            return _quaternion(self.states.R, order)
        return so3.quaternion_continuous(so3.to_quaternion(self.states.R, order), axis=-2)

    def euler(self, seq: str, degrees: bool = False) -> jax.Array:
        """Euler angles of every frame, shape ``(..., n_saved, 3)``, with SciPy's meaning of ``seq``
        (``"xyz"`` extrinsic, ``"XYZ"`` intrinsic, all 12 sequences; :func:`jaxrot.so3.to_euler`).

        Example::

            yaw, pitch, roll = jnp.moveaxis(traj.euler("ZYX", degrees=True), -1, 0)
        """
        if _is_static(seq) and _is_static(degrees):
            return _euler(self.states.R, seq, degrees)
        return so3.to_euler(self.states.R, seq, degrees=degrees)

    def to_scipy(self):
        """The attitudes of all frames as one ``scipy.spatial.transform.Rotation`` of shape
        ``states.R.shape[:-2]`` (frames, after any batch axes; SciPy before 1.16 has only 1-D rotation
        arrays: there a batch is flattened to ``(batch * n_saved,)``), built from :meth:`quaternion`.
        SciPy is optional and imported here only.

        Example::

            traj.to_scipy().as_rotvec()  # every frame's rotation vector
        """
        try:
            from scipy.spatial.transform import Rotation
        except ImportError as err:  # pragma: no cover - SciPy is installed with the test extras
            raise ImportError("Trajectory.to_scipy needs SciPy (pip install scipy)") from err
        q = np.asarray(self.quaternion("xyzw"), np.float64)
        try:
            return Rotation.from_quat(q)
        except ValueError:  # SciPy < 1.16: one axis of rotations at most
            return Rotation.from_quat(q.reshape(-1, 4))

    def _moments(self, what: str) -> jax.Array:
        """The body's moments ``J`` (a ValueError naming ``what`` where the trajectory has no system)."""
        system = getattr(self, "system", None)
        if system is None:
            raise ValueError(f"Trajectory.{what} needs the body's moments of inertia, and this trajectory has no "
                             "system; attach one: dataclasses.replace(traj, system=problem.system)")
        return system.body.J

    @property
    def omega_body(self) -> jax.Array:
        """Body angular velocity ``Omega = Pi / J`` of every frame, shape ``(..., n_saved, 3)``.
        Needs :attr:`system` (a ValueError otherwise)."""
        return _omega(self._moments("omega_body"), self.states.R, self.states.Pi, False)

    @property
    def omega_world(self) -> jax.Array:
        """World angular velocity ``omega = R Omega = R (Pi / J)`` of every frame. Needs :attr:`system`."""
        return _omega(self._moments("omega_world"), self.states.R, self.states.Pi, True)

    @property
    def L_world(self) -> jax.Array:
        """World angular momentum ``L = R Pi`` of every frame (constant without torque)."""
        return self.states.L

    @property
    def energy(self) -> jax.Array:
        """Total energy of every frame, shape ``(..., n_saved)``: kinetic ``Pi . (Pi / J) / 2`` plus the
        torque's potential ``V(t, R)`` (:meth:`~jaxrot.torques.AbstractTorque.potential`). For a torque
        without a potential (a ``jaxrot.Torque`` given no ``potential``, a prescribed momentum, ...) it is
        the **kinetic energy only**. Needs :attr:`system` (a ValueError otherwise); a batched system
        (stacked problems: ``J`` of shape ``(batch, 3)``) is mapped over with the frames.
        """
        self._moments("energy")
        return _energy(self.system, self.ts, self.states)


# The per-frame quantities, each one compiled program per shape: run operation by operation, each of
# their dozens of small operations is compiled on its first call (most of a short script's printing).

def _is_static(x) -> bool:
    """Whether ``x`` can be a static argument of a compiled function (hashable); else it is computed
    operation by operation, where the functions below say what is wrong with it."""
    try:
        hash(x)
    except TypeError:
        return False
    return True


@functools.partial(jax.jit, static_argnums=1)
def _quaternion(R, order):
    return so3.quaternion_continuous(so3.to_quaternion(R, order), axis=-2)


@functools.partial(jax.jit, static_argnums=(1, 2))
def _euler(R, seq, degrees):
    return so3.to_euler(R, seq, degrees=degrees)


@functools.partial(jax.jit, static_argnums=3)
def _omega(J, R, Pi, world: bool):
    """``Pi / J`` (``world``: turned by ``R``), ``J`` of shape ``(3,)`` or, per body, ``(batch, 3)``
    (given a time axis to broadcast against ``Pi``)."""
    J = jnp.asarray(J, Pi.dtype)
    omega = Pi / (J if J.ndim == 1 else J[..., None, :])
    return jnp.einsum("...ij,...j->...i", R, omega) if world else omega


@eqx.filter_jit
def _energy(system, ts, states):
    """Kinetic energy plus the torque's potential, if any, of every frame (:attr:`Trajectory.energy`)."""
    Pi, R = states.Pi, states.R
    J = jnp.asarray(system.body.J, Pi.dtype)
    kinetic = 0.5 * jnp.sum(Pi * Pi / (J if J.ndim == 1 else J[..., None, :]), axis=-1)
    lead = R.shape[:-2]
    ts = jnp.broadcast_to(jnp.asarray(ts, R.dtype), lead)
    batched_system = jnp.ndim(system.body.J) > 1

    def one(sys, t, Rk):
        return sys.torque.potential(t, Rk)

    f = jax.vmap(one, in_axes=(None, 0, 0))  # frames
    for _ in range(len(lead) - 1):  # batch axes
        f = jax.vmap(f, in_axes=(0 if batched_system else None, 0, 0))
    V = f(system, ts, R)
    return kinetic if V is None else kinetic + V


@jax.jit
def _last_frame(states: State) -> State:
    # one dispatch instead of two eager index operations (each a separate dispatch)
    return State(states.R[..., -1, :, :], states.Pi[..., -1, :])


def load(path) -> Trajectory:
    """Read a trajectory written by :meth:`Trajectory.save` (arrays bit for bit, provenance kept; the
    system where it was torque-free, else None)."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"no trajectory file {path!r}")
    with np.load(path, allow_pickle=False) as z:
        missing = {"ts", "R", "Pi", "failed_step", "provenance"} - set(z.files)
        if missing:
            raise ValueError(f"{path!r} is not a jaxrot trajectory file (missing {sorted(missing)})")
        stats = StepStats(**{f.name: jnp.asarray(z[f"stats.{f.name}"]) for f in dataclasses.fields(StepStats)})
        info = json.loads(str(z["provenance"]))
        result = result_of(z["result"]) if "result" in z.files else None
        ctrl = {k.split(".", 1)[1]: jnp.asarray(z[k]) for k in z.files if k.startswith("controller.")}
        controller = AdaptiveStats(**ctrl) if ctrl else None
        event = {}
        if "event.time" in z.files:
            event = dict(event_time=jnp.asarray(z["event.time"]),
                         event_state=State(jnp.asarray(z["event.R"]), jnp.asarray(z["event.Pi"])))
        system = None
        if "system.torque_free" in z.files:
            from ..geometry.body import RigidBody
            from ..physics.problems import System
            from ..physics.torques import FreeTorque

            system = System(RigidBody(jnp.asarray(z["system.J"]), bool(z["system.torque_free"])), FreeTorque())
        return Trajectory(ts=jnp.asarray(z["ts"]), states=State(jnp.asarray(z["R"]), jnp.asarray(z["Pi"])),
                          stats=stats, failed_step=jnp.asarray(z["failed_step"]), result=result, controller=controller,
                          system=system, provenance=Provenance(info), **event)


#: (the static field, or None; the fields' structure) -> (that static value, the instance's structure)
_STRUCTURES: dict = {}


class _InvalidDense(eqx.Module):
    """A dense output whose invalid bodies (``bad``, one flag per body) evaluate to NaN."""

    dense: Any
    bad: jax.Array

    def __call__(self, t) -> State:
        return _nan_where(self.bad, self.dense(t))


def _nan_where(bad, tree):
    """``tree``'s floating-point leaves set to NaN where ``bad`` (one flag per body: the leaves' leading
    axes); a ``where``, so that the cotangent reaching the replaced values is zero."""
    def one(x):
        if x is None or not jnp.issubdtype(x.dtype, jnp.floating) or x.shape[:jnp.ndim(bad)] != jnp.shape(bad):
            return x  # (not a value per body: a count, or one number for the whole batch)
        b = jnp.reshape(bad, jnp.shape(bad) + (1,) * (x.ndim - jnp.ndim(bad)))
        return jnp.where(b, jnp.asarray(jnp.nan, x.dtype), x)

    return jax.tree_util.tree_map(one, tree)


def invalid_marked(traj: Trajectory, invalid) -> Trajectory:
    """``traj`` with the bodies of invalid inputs (``invalid``:
    :class:`~jaxrot.driver.checks.Invalid`) marked: states, event, dense output and the controller's
    error figures NaN, ``failed_step`` 0 and ``result`` :attr:`RESULTS.invalid_input <jaxrot.RESULTS>`;
    the times NaN where the step or the start time was invalid. Returned as it is where the flags are concrete and none is set."""
    from .failures import INVALID_INPUT

    bad, times = invalid
    if not isinstance(bad, jax.core.Tracer) and not isinstance(times, jax.core.Tracer) \
            and not np.any(np.asarray(bad)):
        return traj
    ts = jnp.where(times, jnp.asarray(jnp.nan, traj.ts.dtype), traj.ts)
    failed = jnp.where(bad, jnp.asarray(0, traj.failed_step.dtype), traj.failed_step)
    result = result_of(jnp.where(bad, INVALID_INPUT, codes_of(traj.result)))
    dense = None if traj.dense is None else _InvalidDense(traj.dense, bad)
    return dataclasses.replace(traj, ts=ts, states=_nan_where(bad, traj.states), failed_step=failed, result=result,
                               controller=_nan_where(bad, traj.controller), dense=dense,
                               event_time=_nan_where(bad, traj.event_time),
                               event_state=_nan_where(bad, traj.event_state))


def built(cls, static, *fields):
    """``cls(*fields, provenance=static)`` for :class:`Trajectory` (``cls(*fields)`` for a class
    without static fields, ``static=None``), by unflattening its structure, remembered per structure of
    the fields and static value: equinox's ``__init__`` is a noticeable part of a small
    :func:`jaxrot.simulate` call. The static value is matched by identity (a :class:`Provenance`
    compares equal to every other)."""
    leaves, structure = jax.tree_util.tree_flatten(fields)
    key = (cls, id(static), structure)
    try:
        hit = _STRUCTURES.get(key)
    except TypeError:  # a static field somewhere inside that cannot be hashed: built as usual
        return cls(*fields) if static is None else cls(*fields, provenance=static)
    if hit is not None and hit[0] is static:
        return jax.tree_util.tree_unflatten(hit[1], leaves)
    obj = cls(*fields) if static is None else cls(*fields, provenance=static)
    if len(_STRUCTURES) >= 256:
        _STRUCTURES.clear()
    _STRUCTURES[key] = (static, jax.tree_util.tree_structure(obj))
    return obj

