"""Adjoints: how a run whose number of steps is not known in advance is differentiated.

A run of constant steps without a terminal event is a ``lax.scan`` of known length: JAX
differentiates it in forward and reverse mode whatever the adjoint. Every other run (an
:class:`~jaxrot.Adaptive` controller, a terminal :class:`~jaxrot.Event`) is a bounded while loop, run
as the adjoint says (the names and meanings of diffrax's adjoints):

- :class:`RecursiveCheckpointAdjoint` (the default): ``jax.grad`` works; the backward pass keeps
  ``checkpoints`` copies of the loop state (default: about ``log(max_steps)``, treeverse) and
  recomputes the rest. Where a body's loop has at most :data:`~jaxrot.driver.forward_vjp.MOST`
  perturbed numbers (the moments: 3) and keeps no buffer of every step (``SaveAt(steps=...)``,
  ``SaveAt(dense=True)``), the derivative is taken by forward tangents carried along the run instead
  (:mod:`jaxrot.driver.forward_vjp`): the same derivative, one loop to compile and run rather than the
  loop, its replay and its transpose. Not forward-mode differentiable: with no adjoint given, a run
  traced by ``jax.jvp``/``jax.jacfwd`` takes :class:`ForwardMode` instead.
- :class:`ForwardMode`: a plain ``lax.while_loop``: ``jax.jvp``/``jax.jacfwd``, not ``jax.grad``.
- :class:`DirectAdjoint`: both modes, by storing the whole loop (memory and compile time grow
  with ``max_steps``): for runs that fit in memory.

The derivative is that of the steps the run took, in every mode: the controller's choice of the next
step carries none, and in reverse mode the run records its accepted steps and the backward pass
differentiates the loop that takes them again (``DirectAdjoint``: the tangent of that loop, in both
modes; :func:`jaxrot.driver.attempts._recorded`; why:
docs/user_guide/saveat_events.md, "Gradients of adaptive runs").

Reference: Griewank & Walther, Algorithm 799 (treeverse); equinox's ``while_loop``; diffrax's
``RecursiveCheckpointAdjoint``/``ForwardMode``/``DirectAdjoint``.
"""

from __future__ import annotations

import warnings
from typing import ClassVar

import equinox as eqx
import equinox.internal as eqxi
import jax

__all__ = ["AbstractAdjoint", "RecursiveCheckpointAdjoint", "ForwardMode", "DirectAdjoint", "adjoint_of", "adjoint_for",
           "mode", "reverse_only"]


class AbstractAdjoint(eqx.Module):
    """How the bounded while loop of a run is differentiated."""

    kind: ClassVar[str]

    def while_loop(self, cond, body, init, *, max_steps: int, buffers=None):
        """``init`` iterated by ``body`` while ``cond`` holds, at most ``max_steps`` times."""
        return eqxi.while_loop(cond, body, init, max_steps=max_steps, buffers=buffers, kind=self.kind,
                               **self._options())

    def _options(self) -> dict:
        return {}


def _check_checkpoints(owner: str, c) -> None:
    if c is not None and (isinstance(c, bool) or not isinstance(c, int) or c < 1):
        raise ValueError(f"{owner}.checkpoints must be a positive int or None, got {c!r}")


class RecursiveCheckpointAdjoint(AbstractAdjoint):
    """Reverse mode (``jax.grad``) by recursive checkpointing; the default.

    Args:
      checkpoints: copies of the loop state kept for the backward pass (None: chosen from
        ``max_steps``). More copies, less recomputation. A fused run (:class:`~jaxrot.Fused`, the
        automatic choice) keeps every accepted step's state by default; with ``checkpoints=C`` it keeps
        the state of every ``s = ceil(T / C)``-th step and each step's time and length, ``T``
        ``max_steps`` (or as many steps as the record's budget holds), and the backward pass recomputes
        each stretch of ``s`` states from its checkpoint: one more step evaluated per accepted step, for
        about ``12 C + 2 T + 13 s`` numbers a body instead of ``13 T`` (docs/kernels.md, "Derivatives").

    Example::

        jax.grad(lambda J: jaxrot.simulate("buss4(3)", problem_of(J), t1=1.0,
                                           stepsize=jaxrot.Adaptive(1e-8, 1e-8)).final.Pi[0])(J)
    """

    kind: ClassVar[str] = "checkpointed"
    checkpoints: int | None = None

    def __check_init__(self):
        _check_checkpoints("RecursiveCheckpointAdjoint", self.checkpoints)

    def _options(self) -> dict:
        return {"checkpoints": self.checkpoints}


class ForwardMode(AbstractAdjoint):
    """Forward mode (``jax.jvp``, ``jax.jacfwd``) through a plain ``lax.while_loop``; no ``jax.grad``.
    The tangents are carried beside the states, by the XLA loop and in a fused run's kernel alike:
    nothing is kept for them.

    Args:
      in_kernels: a fused run's tangents carried in its kernel (False: the XLA loop's, beside the
        kernel's run). A run differentiated inside another forward-mode derivative (``jax.jacfwd`` of
        a ``jax.jvp``) takes False by itself: the kernels' tangents have no derivative of their own.

    Example::

        jax.jacfwd(lambda x: jaxrot.simulate("rkmk8(5)", p, t1=1.0, state0=jaxrot.State(R0, x),
                                             stepsize=jaxrot.Adaptive(1e-10, 1e-10),
                                             adjoint=jaxrot.ForwardMode()).final.Pi)(Pi0)
    """

    kind: ClassVar[str] = "lax"
    in_kernels: bool = eqx.field(default=True, static=True)

    def __check_init__(self):
        if not isinstance(self.in_kernels, bool):
            raise TypeError(f"ForwardMode.in_kernels must be a bool, got {self.in_kernels!r}")


class DirectAdjoint(AbstractAdjoint):
    """Forward and reverse mode by storing the whole loop (nested scans of ``max_steps``
    iterations): memory and compile time grow with ``max_steps``; for runs that fit in memory."""

    kind: ClassVar[str] = "bounded"


_NAMES = {"checkpointed": RecursiveCheckpointAdjoint, "forward": ForwardMode}


def _kind(x) -> str | None:
    name = type(x).__name__
    if name == "LinearizeTracer":
        return "reverse"
    if name == "JVPTracer":
        # JAX before 0.7 linearises for jax.grad by a JVP whose tangents are left to partial evaluation
        return "reverse" if type(getattr(x, "tangent", None)).__name__ == "JaxprTracer" else "forward"
    return None


def mode(leaves) -> str | None:
    """``"forward"`` if the run is being traced by ``jax.jvp``/``jax.jacfwd``, ``"reverse"`` by
    ``jax.grad``/``jax.vjp`` (JAX's linearisation), else None (read from the inputs' tracer types)."""
    kinds = {_kind(x) for x in leaves}
    # reverse first: under jax.grad some inputs may carry known tangents (a custom rule's explicit zeros)
    # beside those that depend on the variable; under jax.jvp none is left to partial evaluation
    return "reverse" if "reverse" in kinds else "forward" if "forward" in kinds else None


def reverse_only(leaves) -> bool:
    """Whether the run is being differentiated in reverse mode and in no forward mode around it (a
    derivative rule for reverse mode only may then serve: ``jax.hessian``'s forward pass over the
    reverse one would refuse it)."""
    if mode(leaves) != "reverse":
        return False
    return not any(type(t).__name__ == "JVPTracer" for x in leaves for t in _layers(x))


def differentiated_twice(leaves) -> bool:
    """Whether the run is being differentiated inside another derivative (``jax.jacfwd`` or ``jax.grad``
    around ``jax.jvp``, a Hessian, in the same inputs or in others): a derivative rule must then itself
    be differentiable."""
    return len({id(getattr(t, "_trace", t)) for x in leaves for t in _layers(x) if _kind(t) is not None}) > 1


def _layers(x):
    """``x`` and the tracers inside it: a derivative's primal, ``vmap``'s value."""
    while isinstance(x, jax.core.Tracer):
        yield x
        x = getattr(x, "primal", getattr(x, "val", None))


def adjoint_for(adjoint, leaves) -> AbstractAdjoint:
    """The adjoint of a run whose loop is a while loop, given the run's inputs: without one asked for,
    the default, or :class:`ForwardMode` under ``jax.jvp``/``jax.jacfwd``; one asked for that cannot
    differentiate the way the run is being differentiated is refused with the one that can."""
    how = mode(leaves)
    if how == "forward" and differentiated_twice(leaves) and isinstance(adjoint, (ForwardMode, type(None))):
        return ForwardMode(in_kernels=False)
    if adjoint is None:
        return ForwardMode() if how == "forward" else RecursiveCheckpointAdjoint()
    if how == "forward" and isinstance(adjoint, RecursiveCheckpointAdjoint):
        raise ValueError("jax.jvp / jax.jacfwd of a run whose loop is a while loop (error-controlled steps or a "
                         "terminal event) needs adjoint=jaxrot.ForwardMode() or jaxrot.DirectAdjoint(); "
                         "RecursiveCheckpointAdjoint differentiates in reverse mode only")
    if how == "reverse" and isinstance(adjoint, ForwardMode):
        raise ValueError("jax.grad of a run whose loop is a while loop (error-controlled steps or a terminal event) "
                         "needs adjoint=jaxrot.RecursiveCheckpointAdjoint() (the default) or jaxrot.DirectAdjoint(); "
                         "ForwardMode differentiates in forward mode only")
    return adjoint


def adjoint_of(adjoint) -> AbstractAdjoint | None:
    """``adjoint`` as an object (None: not chosen, see :func:`adjoint_for`); the old strings
    ``"forward"``/``"checkpointed"`` still work, with a DeprecationWarning."""
    if adjoint is None or isinstance(adjoint, AbstractAdjoint):
        return adjoint
    if isinstance(adjoint, str) and adjoint in _NAMES:
        new = _NAMES[adjoint]
        warnings.warn(f"adjoint={adjoint!r} is deprecated: use adjoint=jaxrot.{new.__name__}()", DeprecationWarning,
                      stacklevel=4)
        return new()
    kind = ValueError if isinstance(adjoint, str) else TypeError
    raise kind(f"adjoint must be jaxrot.RecursiveCheckpointAdjoint(), jaxrot.ForwardMode() or jaxrot.DirectAdjoint(), "
               f"got {adjoint!r}")
