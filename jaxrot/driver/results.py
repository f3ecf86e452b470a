"""Results of a run: :class:`Trajectory` (saved frames, statistics, per-body result, provenance), saved
and loaded as ``.npz``."""

from __future__ import annotations

import dataclasses
import json
import os

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..geometry.state import State
from ..integrators.stats import StepStats


class Trajectory(eqx.Module):
    """Saved frames of a simulation.

    ``ts`` has shape ``(n_frames + 1,)`` and ``states`` leading axis ``n_frames + 1`` (the initial
    state first); ``stats`` has leading axis ``n_frames``. ``failed_step`` is the index (1-based)
    of the first step whose solve failed or whose state became non-finite, or -1; ``result`` the
    reason, a :class:`jaxrot.RESULTS` code (0 = successful), per body in a batch.
    ``provenance`` records how it was made (method, problem, dt, steps, dtype, versions), as
    ``(key, value)`` string pairs; :attr:`info` gives it as a dict.
    """

    ts: jax.Array
    states: State
    stats: StepStats
    failed_step: jax.Array
    result: jax.Array | None = None
    provenance: tuple = eqx.field(static=True, default=())

    @property
    def info(self) -> dict:
        """The provenance as a dict of strings."""
        return dict(self.provenance)

    def with_provenance(self, **info) -> "Trajectory":
        """A copy with ``info`` added to the provenance (values stored as strings)."""
        merged = {**self.info, **{k: str(v) for k, v in info.items()}}
        return dataclasses.replace(self, provenance=tuple(sorted(merged.items())))

    def save(self, path) -> None:
        """Write the trajectory and its provenance to ``path`` (``.npz``, uncompressed, exact).

        Example::

            traj.save("run.npz"); same = jaxrot.load("run.npz")
        """
        if not str(path).endswith(".npz"):
            raise ValueError(f"trajectory files end in .npz, got {path!r}")
        arrays = {"ts": self.ts, "R": self.states.R, "Pi": self.states.Pi, "failed_step": self.failed_step}
        if self.result is not None:
            arrays["result"] = self.result
        arrays.update({f"stats.{f.name}": getattr(self.stats, f.name) for f in dataclasses.fields(self.stats)})
        np.savez(path, **{k: np.asarray(v) for k, v in arrays.items()},
                 provenance=np.asarray(json.dumps(self.info)))

    @property
    def final(self) -> State:
        """The last saved state."""
        return _last_frame(self.states)


@jax.jit
def _last_frame(states: State) -> State:
    # one dispatch; two eager index operations cost ~0.3 ms, a third of a small simulate call
    return State(states.R[..., -1, :, :], states.Pi[..., -1, :])


def load(path) -> Trajectory:
    """Read a trajectory written by :meth:`Trajectory.save` (arrays bit for bit, provenance kept)."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"no trajectory file {path!r}")
    with np.load(path, allow_pickle=False) as z:
        missing = {"ts", "R", "Pi", "failed_step", "provenance"} - set(z.files)
        if missing:
            raise ValueError(f"{path!r} is not a jaxrot trajectory file (missing {sorted(missing)})")
        stats = StepStats(**{f.name: jnp.asarray(z[f"stats.{f.name}"]) for f in dataclasses.fields(StepStats)})
        info = json.loads(str(z["provenance"]))
        result = jnp.asarray(z["result"]) if "result" in z.files else None
        return Trajectory(jnp.asarray(z["ts"]), State(jnp.asarray(z["R"]), jnp.asarray(z["Pi"])), stats,
                          jnp.asarray(z["failed_step"]), result, tuple(sorted(info.items())))
