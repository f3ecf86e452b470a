""":func:`~jaxrot.simulate`'s arguments resolved: the number of constant steps from ``t1``, the
step-size controller (with the older spellings ``Fixed(dt)`` and ``Adaptive(dt0=..., error="global")``,
each deprecated) and what to save (``saveat``, or the deprecated ``save_every``)."""

from __future__ import annotations

import warnings

from .checks import check_dt, is_concrete
from .controllers import Adaptive, Fixed
from .global_error import GlobalError
from .saveat import SaveAt

__all__ = ["counts", "controller", "saveat_of"]

_DEFAULT_SAVEAT = SaveAt()


def counts(dt, n_steps, t0, t1):
    """``n_steps`` given, or from the span ``t1 - t0`` (an integer number of steps ``dt``)."""
    if n_steps is not None:
        if t1 is not None:
            raise ValueError("give n_steps or t1, not both")
        return n_steps
    if t1 is None:
        raise ValueError("a run of constant steps needs n_steps or t1")
    if not (is_concrete(t1) and is_concrete(dt) and is_concrete(t0)):
        raise ValueError("with a traced dt, t0 or t1 give n_steps (the number of steps is static)")
    check_dt(dt)  # a negative or zero step is named as itself, before the steps are counted from it
    span, h = float(t1) - float(t0), float(dt)
    if not span > 0:
        raise ValueError(f"t1 must be after t0 (runs go forward in time), got t0 = {float(t0)!r}, t1 = {float(t1)!r}")
    n = round(span / h)
    if n < 1 or abs(n * h - span) > 1e-9 * max(abs(span), h):
        raise ValueError(f"t1 - t0 = {span!r} is not a whole number of steps dt = {h!r} "
                         f"({span / h:.6g} steps); adjust dt or t1, or give n_steps")
    return n


def controller(stepsize, dt):
    """The controller object and the step: ``Fixed(dt)`` and ``Adaptive(dt0=..., error="global", ...)``
    are the older spellings (each warned about where it was made)."""
    if stepsize is None:
        return Fixed(), dt
    if isinstance(stepsize, Fixed):
        if stepsize.dt is not None:
            if dt is not None:
                raise ValueError("give dt or stepsize=Fixed(dt), not both (Fixed(dt) is deprecated: pass dt)")
            dt = stepsize.dt
        return stepsize, dt
    if isinstance(stepsize, GlobalError):
        return stepsize, dt
    if isinstance(stepsize, Adaptive):
        legacy = dict(stepsize.legacy)
        if legacy.get("dt0") is not None:
            if dt is not None:
                raise ValueError("give dt or Adaptive(dt0=...), not both (dt0 is deprecated: pass dt)")
            dt = legacy["dt0"]
        if legacy.get("error") == "global":
            plain = Adaptive(stepsize.rtol, stepsize.atol, max_steps=stepsize.max_steps)
            kw = {k: legacy[k] for k in ("aim", "measure", "calibration_bodies") if k in legacy}
            return GlobalError(plain, **kw), dt
        return stepsize, dt
    raise TypeError(f"stepsize must be jaxrot.Fixed(), jaxrot.Adaptive(rtol, atol) or jaxrot.GlobalError(...), "
                    f"got {stepsize!r}")


def saveat_of(saveat, save_every):
    if save_every is not None:
        warnings.warn("save_every=k is deprecated: use saveat=jaxrot.SaveAt(steps=k)", DeprecationWarning, stacklevel=4)
        if saveat is not None:
            raise ValueError("give saveat or save_every, not both (save_every=k is SaveAt(steps=k))")
        return SaveAt(steps=save_every)
    if saveat is None:
        return _DEFAULT_SAVEAT
    if not isinstance(saveat, SaveAt):
        raise TypeError(f"saveat must be a jaxrot.SaveAt, got {saveat!r}")
    return saveat
