"""The source documents' test problems, by name: ``jaxrot.problems.get("fast_top")``."""

from __future__ import annotations

from typing import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..errors import unknown_name
from ..geometry import so3
from ..geometry.body import RigidBody
from ..geometry.state import State
from .orbit import gravity_gradient_satellite
from .torques import (
    AbstractTorque,
    CoulombWallTorque,
    FreeTorque,
    GravityTorque,
    PolynomialMomentum,
    as_torque,
)


class System(eqx.Module):
    """The physics an integrator sees: a body and the torque acting on it (``method.step`` reads
    nothing else). The scenario (initial state, span, names) is the :class:`Problem`'s; the driver
    compiles against the system alone, so a new span or name never recompiles, and another kind of
    system (say, several bodies) is one new type of this shape."""

    body: RigidBody
    torque: AbstractTorque = eqx.field(converter=as_torque)


class Problem(eqx.Module):
    """A scenario: a :class:`System` (body, torque model), an initial state, the document's time
    span and names.

    ``torque`` is a torque model (:class:`~jaxrot.torques.AbstractTorque`, e.g. :class:`jaxrot.Torque`)
    or a plain function ``fn(t, R, Pi) -> world torque (3,)``, wrapped as ``Torque(fn)`` and checked
    at once (a ``TypeError`` naming ``fn`` if its signature or output shape is wrong)::

        p = jaxrot.Problem(body, lambda t, R, Pi: -0.1 * R @ (Pi / body.J), state0, t_end=5.0)
    """

    body: RigidBody
    torque: AbstractTorque = eqx.field(converter=as_torque)
    state0: State
    t_end: float = eqx.field(static=True)
    name: str = eqx.field(static=True, default="custom")
    description: str = eqx.field(static=True, default="")

    def __check_init__(self):
        _check_fields(self.body, self.state0, self.t_end, self.name, self.description)

    @property
    def system(self) -> System:
        """The physics alone (what integrators see)."""
        return System(self.body, self.torque)

    def with_state(self, state0: State) -> "Problem":
        """The same problem from another initial state."""
        return eqx.tree_at(lambda p: p.state0, self, state0)


def _check_fields(body, state0, t_end, name, description):
    """Each field of a :class:`Problem` of the right kind, named in the message (the torque is
    checked by its converter); runs on construction, not on the copies JAX's tree utilities make."""
    if not isinstance(body, RigidBody):
        hint = " (the moments go in a body: jaxrot.RigidBody(J))" if hasattr(body, "shape") else ""
        raise TypeError(f"Problem: body must be a jaxrot.RigidBody, got {type(body).__name__}{hint}")
    if not isinstance(state0, State):
        hint = " (jaxrot.State(R, Pi))" if isinstance(state0, (tuple, list)) else ""
        raise TypeError(f"Problem: state0 must be a jaxrot.State, got {type(state0).__name__}{hint}")
    R, Pi = state0.R, state0.Pi
    if hasattr(R, "shape") and hasattr(Pi, "shape") and (tuple(R.shape[-2:]) != (3, 3) or tuple(Pi.shape[-1:]) != (3,)):
        raise ValueError(f"Problem: state0 must have R of shape (..., 3, 3) and Pi (..., 3); got {tuple(R.shape)}, "
                         f"{tuple(Pi.shape)}")
    if isinstance(t_end, (bool, str, bytes)) or t_end is None or (
            not isinstance(t_end, jax.core.Tracer) and not np.issubdtype(np.asarray(t_end).dtype, np.number)):
        raise TypeError(f"Problem: t_end must be a number (the span's end time), got {t_end!r}")
    if not isinstance(t_end, jax.core.Tracer) and (np.ndim(t_end) != 0 or not np.isfinite(t_end) or t_end <= 0):
        raise ValueError(f"Problem: t_end must be a finite number > 0, got {t_end!r}")
    for field, value in (("name", name), ("description", description)):
        if not isinstance(value, str):
            raise TypeError(f"Problem: {field} must be a string, got {type(value).__name__} {value!r}")


def from_body_rate(body: RigidBody, R0, Omega0) -> State:
    """Initial state from an attitude and a **body** angular velocity."""
    R0 = jnp.asarray(R0)
    return State(R0, jnp.asarray(body.J) * jnp.asarray(Omega0, R0.dtype))


def _as(x):
    return jnp.asarray(np.asarray(x, dtype=np.float64))


# --- Buss's torqued test problem (reconstructed; docs/problems.md) -----------------------------------------------
BUSS_TORQUED_COEFFS = np.array(
    [[1.0, -2.0, 1.5], [0.3, 0.1, -0.2], [-0.1, 0.2, 0.05], [0.02, -0.03, 0.01]]
)
BUSS_TORQUED_R0_VEC = np.array([0.3, -0.2, 0.5])


def buss_torqued() -> Problem:
    """Buss-style torqued test: J = (1, 2, 3.5) (not physical: 3.5 > 1 + 2), prescribed cubic world momentum L(t)."""
    body = RigidBody(_as([1.0, 2.0, 3.5]), physical=False)
    R0 = so3.exp(_as(BUSS_TORQUED_R0_VEC))
    L0 = _as(BUSS_TORQUED_COEFFS[0])
    return Problem(
        body,
        PolynomialMomentum(_as(BUSS_TORQUED_COEFFS)),
        State(R0, R0.T @ L0),
        t_end=2.0,
        name="buss_torqued",
        description="Buss-style torqued test: J=(1,2,3.5), R0=exp(0.3,-0.2,0.5), cubic prescribed L(t)",
    )


def buss_prism(omega0=(0.02, 0.01, 4.0), revolutions: float = 45.25) -> Problem:
    """Buss's 1x4x18 uniform prism, torque-free, for ~45 revolutions.

    The talk gives neither the initial rate nor the span; this default spins near the long axis
    and ends when ``|omega0| t = revolutions * 2 pi`` (see ``experiments`` for the protocol study).
    """
    body = RigidBody.box(1.0, 4.0, 18.0)
    body = RigidBody(_as(body.J))
    w0 = np.asarray(omega0, dtype=np.float64)
    t_end = revolutions * 2 * np.pi / np.linalg.norm(w0)
    return Problem(
        body,
        FreeTorque(),
        from_body_rate(body, _as(np.eye(3)), _as(w0)),
        t_end=float(t_end),
        name="buss_prism",
        description="1x4x18 box, J=(28.33,27.08,1.417), torque-free, ~45 revolutions",
    )


def free_body_mz() -> Problem:
    """Krysl (a), McLachlan-Zanna free body; R0 = identity (assumed)."""
    body = RigidBody(_as([0.9144, 1.098, 1.66]))
    return Problem(
        body,
        FreeTorque(),
        from_body_rate(body, _as(np.eye(3)), _as([0.45549, 0.82623, 0.03476])),
        t_end=100.0,
        name="free_body_mz",
        description="Krysl (a): J=(0.9144,1.098,1.66), Omega0=(0.45549,0.82623,0.03476)",
    )


def free_body_hlw() -> Problem:
    """Hairer-Lubich-Wanner's free body ("case A" of Hairer-Vilmart 2006 and Celledoni et al. 2008):
    J = (2, 1, 2/3) (not physical: 2 > 1 + 2/3), Pi0 = (cos 1.1, 0, sin 1.1), R0 = identity."""
    body = RigidBody(_as([2.0, 1.0, 2.0 / 3.0]), physical=False)
    return Problem(
        body,
        FreeTorque(),
        State(_as(np.eye(3)), _as([np.cos(1.1), 0.0, np.sin(1.1)])),
        t_end=100.0,
        name="free_body_hlw",
        description="Hairer-Lubich-Wanner: J=(2,1,2/3), Pi0=(cos 1.1, 0, sin 1.1)",
    )


def _top(tilt: float, spin: float, t_end: float, name: str, J=(5.0, 5.0, 1.0), kind: str = "Lagrangian") -> Problem:
    body = RigidBody(_as(J))
    return Problem(
        body,
        GravityTorque(mgl=20.0),
        from_body_rate(body, so3.exp(_as([tilt, 0.0, 0.0])), _as([0.0, 0.0, spin])),
        t_end=t_end,
        name=name,
        description=f"{kind} top J=({','.join(f'{j:g}' for j in J)}), mgl=20, tilt {tilt} rad, spin {spin} rad/s",
    )


def slow_top() -> Problem:
    """Krysl (b): slow Lagrangian top."""
    return _top(0.05, 5.0, 20.0, "slow_top")


def fast_top() -> Problem:
    """Krysl (c): fast Lagrangian top (Simo-Wong data)."""
    return _top(0.3, 50.0, 10.0, "fast_top")


def asymmetric_top() -> Problem:
    """The fast top made asymmetric (J = (5, 4, 1)): its free part needs the elliptic-function flow
    (the symmetric top's is two rotations), a torqued benchmark without that shortcut."""
    return _top(0.3, 50.0, 10.0, "asymmetric_top", J=(5.0, 4.0, 1.0), kind="asymmetric heavy")


def coulomb_wall(sign: float = 1.0) -> Problem:
    """Krysl (d): Coulomb potential with a soft wall; ``sign=+1`` printed torque, -1 physical."""
    body = RigidBody(_as([2.0, 3.0, 4.5]))
    return Problem(
        body,
        CoulombWallTorque(sign=float(sign)),
        State(_as(np.eye(3)), _as([2.0, 2.0, 2.0])),
        t_end=50.0,
        name="coulomb_wall" if sign > 0 else "coulomb_wall_physical",
        description=f"Krysl (d): J=(2,3,4.5), pi0=(2,2,2), Coulomb + soft wall, sign {sign:+g}",
    )


def t_handle(omega0=(0.01, 4.0, 0.01), t_end: float = 20.0) -> Problem:
    """Roblox T-handle, J = (2.5, 1.4, 1.3), spun near its intermediate axis (Dzhanibekov flips)."""
    body = RigidBody(_as([2.5, 1.4, 1.3]))
    return Problem(
        body,
        FreeTorque(),
        from_body_rate(body, _as(np.eye(3)), _as(omega0)),
        t_end=t_end,
        name="t_handle",
        description="T-handle J=(2.5,1.4,1.3) near its intermediate axis (Dzhanibekov effect)",
    )


def dancing_pole(omega0=(0.5, 0.0, 10.0), t_end: float = 10.0) -> Problem:
    """The Roblox article's dancing pole (section 12): a thin rod (radius 0.05, length 2, unit mass),
    no gravity, spun at 10 rad/s about its long (smallest-moment) axis with a small transverse rate.

    Its angular momentum is then almost perpendicular to the rod (J_z is tiny), so the correct
    motion is a wide precession of the rod about L; an energy-gaining integrator (explicit Euler)
    drives the rod towards a pure spin about its own axis instead.
    """
    body = RigidBody.cylinder(0.05, 2.0)
    body = RigidBody(_as(body.J))
    return Problem(
        body,
        FreeTorque(),
        from_body_rate(body, _as(np.eye(3)), _as(omega0)),
        t_end=t_end,
        name="dancing_pole",
        description="thin rod r=0.05, l=2 spun about its long axis, omega0=(0.5,0,10), no gravity",
    )


PROBLEMS: dict[str, Callable[[], Problem]] = {
    "buss_torqued": buss_torqued,
    "buss_prism": buss_prism,
    "free_body_mz": free_body_mz,
    "slow_top": slow_top,
    "fast_top": fast_top,
    "asymmetric_top": asymmetric_top,
    "coulomb_wall": coulomb_wall,
    "coulomb_wall_physical": lambda: coulomb_wall(-1.0),
    "t_handle": t_handle,
    "dancing_pole": dancing_pole,
    "free_body_hlw": free_body_hlw,
    "gravity_gradient": lambda: gravity_gradient_satellite(),
}


def get(name: str) -> Problem:
    """A problem by name (float64 arrays when x64 is on; ``jaxrot.cast(problem, jnp.float32)`` gives
    float32, and ``simulate`` runs in the dtype of the initial state)."""
    try:
        make = PROBLEMS[name]
    except (KeyError, TypeError):  # TypeError: an unhashable name
        raise unknown_name("problem", name, PROBLEMS, "`jaxrot list problems` (or list(jaxrot.problems.PROBLEMS))") \
            from None
    return make()
