"""Step-size controllers: what decides the next step of the loop (diffrax's ``stepsize_controller``).

- :class:`Fixed`: constant steps of :func:`jaxrot.simulate`'s ``dt``; every step is accepted.
- :class:`Adaptive`: the PI controller of an embedded pair (:class:`jaxrot.integrators.AbstractPair`),
  each body of a batch with its own steps.

Both are used by the one loop (:mod:`jaxrot.driver.loop`): ``first_step`` gives the first trial
step, :func:`jaxrot.integrators.pairs.adapt` accepts or rejects an attempt and proposes the next step.
The controller's arithmetic is written there once, beside its constants; the fused kernels' loop is
generated from that JAX code (:mod:`jaxrot.kernels.generate_pieces`).
See docs/user_guide/running.md ("Steps") for the equations and their reference.
"""

from __future__ import annotations

import warnings
from typing import ClassVar

import equinox as eqx
import numpy as np

from ..integrators.pairs import scaled_rms

__all__ = ["AbstractController", "Fixed", "Adaptive", "error_norm"]


class AbstractController(eqx.Module):
    """Decides the steps of a run. ``adaptive``: attempts may be rejected (the loop is a bounded
    while loop and the method must be an embedded pair)."""

    adaptive: ClassVar[bool] = False


class Fixed(AbstractController):
    """Constant steps ``dt`` (:func:`jaxrot.simulate`'s ``dt``), every one accepted.

    Example::

        jaxrot.simulate("buss4", problem, 1e-3, 1000, stepsize=jaxrot.Fixed())
    """

    dt: float | None = None  # deprecated: the step is simulate's dt

    def __check_init__(self):
        if self.dt is not None:
            warnings.warn("jaxrot.Fixed(dt) is deprecated: pass the step as simulate's dt (stepsize=jaxrot.Fixed() "
                          "is the default)", DeprecationWarning, stacklevel=5)


class Adaptive(AbstractController):
    """Error-controlled steps: an embedded pair's error estimate and a PI controller, per body.

    Args:
      rtol, atol: relative and absolute tolerance of the scaled RMS error over the 12 numbers of
        ``(R, Pi)``; an attempt is accepted when it is at most 1.
      max_steps: attempts (accepted and rejected) allowed per body; a body that needs more ends with
        ``RESULTS.max_steps_reached``.

    The method must be an embedded pair (``"buss4(3)"``, ``"lie_taylor5(4)"``, ``"rkmk8(5)"``,
    ``"rkmk8(5,3)"``, ``"exact_split_tj4(2)"``, or :class:`jaxrot.integrators.EmbeddedPair`); ``simulate``'s ``dt``, if
    given, is the first trial step. The controller bounds each step's error; to aim the *global*
    error at the tolerance wrap it: ``jaxrot.GlobalError(jaxrot.Adaptive(rtol, atol))``. Equations
    and measured behaviour: docs/user_guide/running.md.

    Example::

        jaxrot.simulate("rkmk8(5)", problem, t1=10.0, stepsize=jaxrot.Adaptive(rtol=1e-10, atol=1e-10))
    """

    adaptive: ClassVar[bool] = True

    rtol: float = 1e-6
    atol: float = 1e-9
    max_steps: int = 100_000
    #: deprecated spellings, kept working with a warning (see :func:`legacy_global`)
    legacy: tuple = eqx.field(static=True, default=())

    def __init__(self, rtol=1e-6, atol=1e-9, *args, max_steps=100_000, error=None, dt0=None, measure=None,
                 calibration_bodies=None, aim=None):
        # the old positional order was (rtol, atol, error, dt0, max_steps, measure, calibration_bodies, aim)
        if args:
            if len(args) > 6:
                raise TypeError(f"Adaptive takes at most 8 positional arguments, got {2 + len(args)}")
            old = dict(zip(("error", "dt0", "max_steps", "measure", "calibration_bodies", "aim"), args))
            error, dt0, max_steps = old.get("error", error), old.get("dt0", dt0), old.get("max_steps", max_steps)
            measure = old.get("measure", measure)
            calibration_bodies, aim = old.get("calibration_bodies", calibration_bodies), old.get("aim", aim)
        self.rtol, self.atol, self.max_steps = rtol, atol, max_steps
        legacy = {k: v for k, v in (("error", error), ("dt0", dt0), ("measure", measure),
                                    ("calibration_bodies", calibration_bodies), ("aim", aim)) if v is not None}
        if legacy:
            warnings.warn(f"jaxrot.Adaptive({', '.join(legacy)}=...) is deprecated: the first trial step is "
                          "simulate's dt, and the global error is aimed at by "
                          "jaxrot.GlobalError(jaxrot.Adaptive(rtol, atol), aim=..., measure=..., calibration_bodies=...)",
                          DeprecationWarning, stacklevel=3)
        self.legacy = tuple(sorted(legacy.items()))

    def __check_init__(self):
        for name in ("rtol", "atol"):
            v = getattr(self, name)
            if isinstance(v, (int, float, np.floating)) and not (np.isfinite(v) and v >= 0):
                raise ValueError(f"Adaptive.{name} must be a finite number >= 0, got {v!r}")
        if all(isinstance(v, (int, float, np.floating)) for v in (self.rtol, self.atol)) and self.rtol == 0 \
                and self.atol == 0:
            raise ValueError("Adaptive: rtol and atol cannot both be 0")
        if isinstance(self.max_steps, bool) or not isinstance(self.max_steps, (int, np.integer)) or self.max_steps < 1:
            raise ValueError(f"Adaptive.max_steps must be a positive integer, got {self.max_steps!r}")
        d = dict(self.legacy)
        if d.get("error", "local") not in ("local", "global"):
            raise ValueError(f"error must be 'local' or 'global', got {d['error']!r}")
        if d.get("measure", "state") not in ("state", "attitude"):
            raise ValueError(f"measure must be 'state' or 'attitude', got {d['measure']!r}")
        dt0 = d.get("dt0")
        if dt0 is not None and not (np.isfinite(dt0) and dt0 > 0):
            raise ValueError(f"dt0 must be a finite number > 0 or None, got {dt0!r}")
        aim = d.get("aim")
        if aim is not None and not (np.isfinite(aim) and aim > 0):
            raise ValueError(f"aim must be a finite number > 0, got {aim!r}")
        b = d.get("calibration_bodies")
        if b is not None and (isinstance(b, bool) or not isinstance(b, (int, np.integer)) or b < 2):
            raise ValueError(f"calibration_bodies must be an integer >= 2 or None, got {b!r}")


#: the default scaled error of an attempt (a pair's ``error_norm`` may measure its estimate otherwise)
error_norm = scaled_rms
