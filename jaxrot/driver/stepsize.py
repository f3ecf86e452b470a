"""How steps are chosen: :class:`Fixed` or :class:`Adaptive` (diffrax's ``stepsize_controller``)."""

from __future__ import annotations

import equinox as eqx
import numpy as np


class AbstractStepSize(eqx.Module):
    """Chooses the steps of a run."""


class Fixed(AbstractStepSize):
    """Constant steps ``dt`` (given here or as :func:`jaxrot.simulate`'s ``dt``).

    Example::

        jaxrot.simulate("buss4", problem, n_steps=1000, stepsize=jaxrot.Fixed(1e-3))
    """

    dt: float | None = None


class Adaptive(AbstractStepSize):
    """Error-controlled steps: an embedded pair of methods and a PI controller (Hairer & Wanner II, IV.2).

    Args:
      rtol, atol: tolerances of the mixed error norm over the 12 numbers of ``(R, Pi)``.
      error: ``"local"`` bounds each step's error (the usual control; the global error over a long
        span can be many times the tolerance); ``"global"`` targets the global error at every save
        time by tolerance calibration, the final run at the tolerance where the predicted error is
        ``aim`` times the asked one. A batch of at least 4 ``calibration_bodies`` bodies is calibrated
        on ``calibration_bodies`` of them (half spread over the batch, half the fastest) at 100, 10
        and 1 times the tolerance, which fix each one's law ``e = C tol^a`` (constant and exponent),
        and runs whole at the tolerance the worst of them needs (calibrated again a ratio and ratio^2
        above the coarsest run where every body could go looser than it, checked below the finest
        run where the law reaches more than a ratio below it); a body unlike every calibrated one
        can end above the aim. A smaller batch is calibrated body by body at 100 and 10 times the
        tolerance with the pair's exponent ``a = p/(q+1)``, each body then at its own tolerance. The
        final error against the tolerance, and the cost against the run at the right tolerance, as
        measured on the precision suite: docs/benchmarks.md.
      aim: the global error aimed at, as a fraction of the tolerance (``error="global"`` only). The
        default 1 is the middle, on a log scale, of half and twice the tolerance: the estimate's
        spread fits in that window when centred in it. A smaller aim buys a margin below the
        tolerance at the cost of more steps (about ``aim^(-1/p)`` times as many for a pair whose kept
        result has order ``p``).
      calibration_bodies: the size of the calibration subset of a batch of at least four times as
        many bodies (``error="global"``); None calibrates every body.
      measure: what the global error is measured on (``error="global"`` only): ``"state"``, the 12
        numbers of ``(R, Pi)`` in the mixed norm ``|dy| / (atol + rtol |y|)``, or ``"attitude"``, the
        rotation angle between the computed and the exact attitude against ``max(rtol, atol)``
        radians (an angle's scale is 1; the momentum may then be less accurate).
      dt0: first trial step (default from the tolerance and the initial angular velocity).
      max_steps: attempts allowed per body; a body that needs more ends with
        ``RESULTS.max_steps_reached``.

    The method of such a run is a pair: a name of :data:`jaxrot.PAIRS` (``"buss4(3)"``) or a
    ``(high, low)`` tuple of methods.

    Example::

        jaxrot.simulate("lie_taylor5(4)", problem, t1=10.0, stepsize=jaxrot.Adaptive(rtol=1e-8, atol=1e-8))
    """

    rtol: float = 1e-6
    atol: float = 1e-9
    error: str = "local"
    dt0: float | None = None
    max_steps: int = 100_000
    measure: str = "state"
    calibration_bodies: int | None = 64
    aim: float = 1.0

    def __check_init__(self):
        for name in ("rtol", "atol"):
            v = getattr(self, name)
            if isinstance(v, (int, float, np.floating)) and not (np.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        if self.error not in ("local", "global"):
            raise ValueError(f"error must be 'local' or 'global', got {self.error!r}")
        if self.measure not in ("state", "attitude"):
            raise ValueError(f"measure must be 'state' or 'attitude', got {self.measure!r}")
        if self.dt0 is not None and not (np.isfinite(self.dt0) and self.dt0 > 0):
            raise ValueError(f"dt0 must be a finite number > 0 or None, got {self.dt0!r}")
        if isinstance(self.aim, (int, float, np.floating)) and not (np.isfinite(self.aim) and self.aim > 0):
            raise ValueError(f"aim must be a finite number > 0, got {self.aim!r}")
        b = self.calibration_bodies
        if b is not None and (isinstance(b, bool) or not isinstance(b, (int, np.integer)) or b < 2):
            raise ValueError(f"calibration_bodies must be an integer >= 2 or None, got {b!r}")
        if isinstance(self.max_steps, bool) or not isinstance(self.max_steps, (int, np.integer)) or self.max_steps < 1:
            raise ValueError(f"max_steps must be a positive integer, got {self.max_steps!r}")
