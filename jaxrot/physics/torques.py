"""Torque models. Torques are **spatial** (world frame): ``t(time, R, Pi)``; body torque is ``R.T @ t``.

A model may also give its potential ``V(time, R)`` (for the Hamiltonian) and how the world momentum
advances over a step (``advance_momentum``): by default a Taylor polynomial along the exact flow, but
a prescribed momentum ``L(t)`` (Buss's setting) is advanced exactly.
"""

from __future__ import annotations

import abc
import inspect
from typing import Any, Callable, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp

from ..closures import hoist
from ..geometry import so3

_EZ = (0.0, 0.0, 1.0)


class AbstractTorque(eqx.Module):
    """Interface: ``__call__(time, R, Pi) -> world torque (3,)``."""

    #: True when the torque is identically zero (methods skip the Taylor machinery).
    is_free: ClassVar[bool] = False
    #: True when the torque depends on time only (then world momentum is known in closed form).
    time_only: ClassVar[bool] = False

    @abc.abstractmethod
    def __call__(self, t, R, Pi):
        """World-frame torque at time ``t``, attitude ``R``, body momentum ``Pi``."""

    def potential(self, t, R):
        """Potential energy ``V(t, R)``, or ``None`` for a non-conservative model."""
        return None

    def advance_momentum(self, t, h, L, L_derivs):
        """World momentum at ``t + h`` from ``L`` and its derivatives ``[L', L'', ...]`` at ``t``.

        The default is the Taylor polynomial ``L + sum_k h^k/k! L^(k)``, exact when the torque is
        zero; a method of order p passes p derivatives so that the momentum is advanced to order p.
        """
        out, fact = L, 1.0
        for k, d in enumerate(L_derivs, start=1):
            fact = fact * h / k
            out = out + fact * d
        return out


class FreeTorque(AbstractTorque):
    """No torque: world momentum is constant."""

    is_free: ClassVar[bool] = True

    def __call__(self, t, R, Pi):
        return jnp.zeros_like(Pi)

    def potential(self, t, R):
        return jnp.zeros((), R.dtype)


class GravityTorque(AbstractTorque):
    """Heavy top: ``t = -mgl (R c) x up``, potential ``V = mgl up . (R c)``.

    ``c`` is the body-frame unit vector from the fixed point to the centre of mass and ``up`` is the
    world unit vector against gravity. Krysl's tops use ``mgl = 20``, ``c = up = e_z`` (Krysl 2005, section 6;
    only ``mgl = 20`` makes the printed torque conserve the printed Hamiltonian).
    """

    mgl: float | jax.Array = 20.0
    com: tuple = _EZ
    up: tuple = _EZ

    def __call__(self, t, R, Pi):
        chi = R @ jnp.asarray(self.com, R.dtype)
        return -self.mgl * jnp.cross(chi, jnp.asarray(self.up, R.dtype))

    def potential(self, t, R):
        chi = R @ jnp.asarray(self.com, R.dtype)
        return self.mgl * jnp.dot(jnp.asarray(self.up, R.dtype), chi)


class CoulombWallTorque(AbstractTorque):
    """Krysl's problem (d): Coulomb potential with a soft wall in ``c = 1.1 + chi_z``, ``chi = R e_3``.

    ``t = f(c) (e_z x chi)`` with ``f = V'(c)``. ``sign = +1`` is the torque as printed in the paper,
    ``V = 1/c - 0.001 c^-10`` (repulsive Coulomb, attractive wall); ``sign = -1`` is the physically
    described model ``V = -1/c + 0.001 c^-10`` (attractive well, repulsive wall). See docs/problems.md (Krysl's problem d).
    """

    sign: float = 1.0

    def _c(self, R):
        return 1.1 + R[2, 2]

    def __call__(self, t, R, Pi):
        c = self._c(R)
        f = self.sign * (-(c**-2) + 0.01 * c**-11)
        chi = R[:, 2]
        return f * jnp.stack([-chi[1], chi[0], jnp.zeros_like(chi[0])])

    def potential(self, t, R):
        c = self._c(R)
        return self.sign * (1.0 / c - 0.001 * c**-10)


class PotentialTorque(AbstractTorque):
    """Torque of a potential ``V(t, R)``: ``t = -d/de V(t, exp(hat e) R) at e = 0`` by ``jax.grad``."""

    V: Callable = eqx.field(static=True)

    def __call__(self, t, R, Pi):
        def v_of(eps):
            return self.V(t, so3.exp(eps) @ R)

        return -jax.grad(v_of)(jnp.zeros(3, R.dtype))

    def potential(self, t, R):
        return self.V(t, R)


class AbstractPrescribedMomentum(AbstractTorque):
    """Buss's setting: the world momentum ``L(t)`` is prescribed; the torque is ``L'(t)``."""

    time_only: ClassVar[bool] = True

    @abc.abstractmethod
    def momentum(self, t):
        """World momentum ``L(t)``."""

    def __call__(self, t, R, Pi):
        t = jnp.asarray(t, Pi.dtype)
        return jax.jvp(self.momentum, (t,), (jnp.ones_like(t),))[1]

    def advance_momentum(self, t, h, L, L_derivs):
        # the exact increment of the prescribed momentum, added to the body's own: a state whose
        # momentum is not L(t) (a perturbed body, a batch) follows L' = torque, as every other method
        return L + (self.momentum(t + h) - self.momentum(t))


class PolynomialMomentum(AbstractPrescribedMomentum):
    """``L(t) = sum_k t^k / k! * coeffs[k]`` (coeffs of shape (K, 3)) uses a cubic."""

    coeffs: jax.Array

    def momentum(self, t):
        out, fact = jnp.zeros_like(self.coeffs[0]), 1.0
        for k in range(self.coeffs.shape[0]):
            out = out + fact * self.coeffs[k]
            fact = fact * t / (k + 1)
        return out


class PrescribedMomentum(AbstractPrescribedMomentum):
    """``L(t)`` given as any JAX-traceable function of time."""

    fn: Callable = eqx.field(static=True)

    def momentum(self, t):
        return self.fn(t)


_FRAMES = ("world", "body")


def _name(fn) -> str:
    """A readable name of a user function for error messages."""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    return f"{name!r}" if name else repr(fn)


def _positional_arity(fn) -> int | None:
    """How many positional arguments ``fn`` accepts (``None`` when unknown or unbounded)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    n = 0
    for prm in sig.parameters.values():
        if prm.kind == prm.VAR_POSITIONAL:
            return None
        if prm.kind in (prm.POSITIONAL_ONLY, prm.POSITIONAL_OR_KEYWORD):
            n += 1
    return n


def _takes_args(fn, n_base: int, args, what: str, signature: str) -> bool:
    """Whether ``fn`` is called with ``args`` appended (``n_base + 1`` positional arguments) or
    without (``n_base``), from its signature; a TypeError when neither fits."""
    if not callable(fn):
        raise TypeError(f"{what} must be a callable {signature}, got {type(fn).__name__}")
    n = _positional_arity(fn)
    if n is None:  # *args, a builtin, ...: pass args when some are given
        return args is not None
    if n >= n_base + 1:
        return True
    if n == n_base:
        if args is not None:
            raise TypeError(f"{what} {_name(fn)} takes {n_base} positional arguments but args were given; "
                            f"expected {signature}")
        return False
    raise TypeError(f"{what} {_name(fn)} takes {n} positional arguments; expected {signature}")


def _code_and_closure(fn):
    """``(the static part of fn, its Closure or None)``: where ``fn`` closes over traced values
    (:func:`jaxrot.closures.hoist`), its code alone is static and the closure, holding those values as
    leaves, is what is called."""
    hoisted = hoist(fn)
    return (fn, None) if hoisted is fn else (getattr(hoisted, "code", fn), hoisted)


def _dummy_inputs(dtype=None):
    dtype = jnp.zeros(()).dtype if dtype is None else dtype  # float64 under jax_enable_x64, else float32
    return (jax.ShapeDtypeStruct((), dtype), jax.ShapeDtypeStruct((3, 3), dtype), jax.ShapeDtypeStruct((3,), dtype))


def _check_output(out, fn, what: str, shape: tuple, signature: str):
    if not (hasattr(out, "shape") and hasattr(out, "dtype")):
        raise TypeError(f"{what} {_name(fn)} must return an array of shape {shape}, "
                        f"got {type(out).__name__}; expected {signature}")
    if tuple(out.shape) != shape or not jnp.issubdtype(out.dtype, jnp.floating):
        raise TypeError(f"{what} {_name(fn)} must return a floating-point array of shape {shape}, "
                        f"got {out.dtype}{list(out.shape)}; expected {signature}")


class Torque(AbstractTorque):
    """A torque given as a plain function ``fn(t, R, Pi, args) -> (3,)`` (or ``fn(t, R, Pi)``).

    ``t`` is the time (a scalar), ``R`` the attitude (3x3, body -> world), ``Pi`` the **body** angular
    momentum ``J * Omega``; ``args`` is any PyTree of parameters, passed through unchanged. Its
    array leaves are leaves of the torque (and so of the :class:`~jaxrot.Problem`): ``jax.grad``
    with respect to them works through :func:`jaxrot.simulate`, which also runs a batch of them
    (problems sharing one ``fn`` stacked by :func:`jaxrot.stack_problems`, or ``jax.vmap`` over them).
    ``fn`` itself is static (compiled into the program; a new function object compiles anew), except
    for values it closes over that a transformation traces (a parameter being differentiated,
    written inside the differentiated function): those become leaves of the torque
    (:func:`jaxrot.closures.hoist`), so ``jax.grad`` and ``jax.jvp`` reach them too.

    ``frame="world"`` (default): ``fn`` returns the spatial torque ``tau_w`` (the library's
    convention, ``dL/dt = tau_w`` with ``L = R Pi``). ``frame="body"``: ``fn`` returns the body torque
    ``tau_b`` and the world torque is ``tau_w = R tau_b``.

    ``potential(t, R, args)`` (or ``potential(t, R)``), optional, is the potential energy ``V`` with
    ``tau_w = -dV/d eps (exp(hat eps) R)`` at ``eps = 0``; it is not checked against ``fn``. With it
    :meth:`potential` returns ``V`` and energies (:func:`jaxrot.analysis.energy`,
    :attr:`jaxrot.Trajectory.energy`, ``InvariantMonitor(energy_rtol=...)``) include it; without it
    the torque is non-conservative, :meth:`potential` returns ``None`` and energies are kinetic only.

    ``fn`` and ``potential`` are checked once at construction with ``jax.eval_shape`` on
    ``t: ()``, ``R: (3, 3)``, ``Pi: (3,)`` (no computation): a wrong number of arguments or a wrong
    output shape is a ``TypeError`` naming the function. Cost: one ``fn`` call per torque
    evaluation (plus one 3x3 product for ``frame="body"``). The output is cast to ``Pi``'s dtype;
    for float32 runs write constants inside ``fn`` as ``jnp.asarray(c, R.dtype)``.

    Args:
      fn: the torque function.
      frame: ``"world"`` or ``"body"``, the frame of ``fn``'s output.
      args: parameters passed as ``fn``'s last argument (``None``: ``fn(t, R, Pi)`` is allowed).
      potential: optional ``V(t, R, args)`` (or ``V(t, R)``), a scalar.

    Example::

        J = jnp.array([5.0, 5.0, 1.0])
        damping = jaxrot.Torque(lambda t, R, Pi, c: -c * R @ (Pi / J), args=jnp.asarray(0.3))
        gravity = jaxrot.Torque(lambda t, R, Pi: -20.0 * jnp.cross(R[:, 2], jnp.array([0.0, 0.0, 1.0])),
                                potential=lambda t, R: 20.0 * R[2, 2])
        problem = jaxrot.Problem(jaxrot.RigidBody(J), damping, state0, t_end=10.0)
    """

    fn: Callable = eqx.field(static=True)
    frame: str = eqx.field(static=True)
    args: Any
    potential_fn: Callable | None = eqx.field(static=True)
    fn_takes_args: bool = eqx.field(static=True)
    potential_takes_args: bool = eqx.field(static=True)
    #: ``fn`` (``potential``) as a :class:`jaxrot.closures.Closure` where it closes over traced values
    #: (then ``fn`` holds its code alone), else None
    closed: Any
    closed_potential: Any

    def __init__(self, fn: Callable, frame: str = "world", args: Any = None, potential: Callable | None = None):
        if frame not in _FRAMES:
            raise ValueError(f"frame must be one of {_FRAMES}, got {frame!r}")
        sig = "fn(t, R, Pi, args) -> torque of shape (3,)" if args is not None else \
            "fn(t, R, Pi) or fn(t, R, Pi, args) -> torque of shape (3,)"
        self.fn_takes_args = _takes_args(fn, 3, args, "the torque function", sig)
        # a function closing over a value that jax.grad/jit traces: that value becomes a leaf
        self.fn, self.closed = _code_and_closure(fn)
        self.frame = frame
        self.args = args
        self.closed_potential = None
        if potential is None:
            self.potential_fn, self.potential_takes_args = None, False
        else:
            psig = "potential(t, R, args) -> scalar" if args is not None else \
                "potential(t, R) or potential(t, R, args) -> scalar"
            self.potential_takes_args = _takes_args(potential, 2, args, "the potential", psig)
            self.potential_fn, self.closed_potential = _code_and_closure(potential)
        self._check(None)

    def _check(self, dtype):
        """Evaluate ``fn`` (and the potential) once on abstract inputs; a TypeError if they do not fit."""
        t, R, Pi = _dummy_inputs(dtype)
        sig = "fn(t, R, Pi, args) -> (3,)" if self.fn_takes_args else "fn(t, R, Pi) -> (3,)"
        try:
            out = jax.eval_shape(lambda t, R, Pi, a: self._raw(t, R, Pi, a), t, R, Pi, self.args)
        except Exception as err:  # noqa: BLE001 - any failure here is a mismatch with the documented signature
            raise TypeError(f"the torque function {_name(self.fn)} failed on t: (), R: (3, 3), Pi: (3,)"
                            f"{', args' if self.fn_takes_args else ''}; expected {sig}. "
                            f"{type(err).__name__}: {err}") from err
        _check_output(out, self.fn, "the torque function", (3,), sig)
        if self.potential_fn is not None:
            psig = "potential(t, R, args) -> scalar" if self.potential_takes_args else "potential(t, R) -> scalar"
            try:
                v = jax.eval_shape(lambda t, R, a: self._raw_potential(t, R, a), t, R, self.args)
            except Exception as err:  # noqa: BLE001
                raise TypeError(f"the potential {_name(self.potential_fn)} failed on t: (), R: (3, 3); "
                                f"expected {psig}. {type(err).__name__}: {err}") from err
            _check_output(v, self.potential_fn, "the potential", (), psig)

    def _raw(self, t, R, Pi, args):
        fn = self.fn if self.closed is None else self.closed
        return fn(t, R, Pi, args) if self.fn_takes_args else fn(t, R, Pi)

    def _raw_potential(self, t, R, args):
        fn = self.potential_fn if self.closed_potential is None else self.closed_potential
        return fn(t, R, args) if self.potential_takes_args else fn(t, R)

    def __call__(self, t, R, Pi):
        tau = jnp.asarray(self._raw(t, R, Pi, self.args), Pi.dtype)
        return R @ tau if self.frame == "body" else tau  # (not so3.mv: its custom_jvp has no Taylor-mode rule)

    def potential(self, t, R):
        if self.potential_fn is None:
            return None
        return jnp.asarray(self._raw_potential(t, R, self.args), R.dtype)


def as_torque(torque) -> AbstractTorque:
    """``torque`` itself if it is an :class:`AbstractTorque`; a plain callable ``fn(t, R, Pi)`` is
    wrapped as a world-frame :class:`Torque` (checked at once: a ``TypeError`` naming ``fn`` when its
    signature or output shape is wrong)."""
    if isinstance(torque, AbstractTorque):
        return torque
    if torque is None:
        raise TypeError("torque is None: for a torque-free body pass jaxrot.torques.FreeTorque()")
    if not callable(torque):
        raise TypeError(f"torque must be a jaxrot torque (an AbstractTorque such as jaxrot.Torque) or a "
                        f"function fn(t, R, Pi) -> world torque of shape (3,), got {type(torque).__name__}")
    n = _positional_arity(torque)
    if n is not None and n != 3:
        extra = (" (a function with parameters: wrap it as jaxrot.Torque(fn, args=...))" if n == 4 else "")
        raise TypeError(f"the torque function {_name(torque)} takes {n} positional arguments; a plain function "
                        f"given as a torque must be fn(t, R, Pi) -> world torque of shape (3,){extra}")
    return Torque(torque)


def body_torque(problem, t, R, Pi):
    """The problem's torque in the body frame, ``R^T t(time, R, Pi)``."""
    if getattr(problem.torque, "is_free", False):
        return jnp.zeros_like(Pi)  # not R^T 0: XLA keeps that product (a transpose and a dot per call)
    return so3.mtv(R, problem.torque(t, R, Pi))
