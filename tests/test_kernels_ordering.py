"""Steps that reorder or decompose numbers known only when they run, restated in generated kernels
(jaxrot.kernels.jaxpr_ordering): a sort and an argsort, gathers by the resulting indices, a
scatter-multiply, a rounding, a reversed scan and a 3x3 SVD, each against the XLA executor (the same
method's JAX code) on states whose momentum components change order during the run."""

from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrot
from jaxrot import kernels
from jaxrot.geometry.state import State
from jaxrot.integrators.rk4 import RK4

pytestmark = pytest.mark.skipif(not kernels.have_warp(), reason="needs warp-lang (the fast extra)")


class ReorderedRK4(RK4):
    """RK4, then the momentum read in sorted order and put back (an identity), plus small terms from
    its sorted components, a rounding, a reversed scan's partial sums and a polar factor of R: what a
    wrong restatement of any of them changes, the comparison with XLA sees."""

    reference: ClassVar[str] = "a test of the restatement"

    def step(self, system, t, state, aux, dt):
        new, aux, stats = super().step(system, t, state, aux, dt)
        Pi = new.Pi
        order = jnp.argsort(Pi)                      # sort of (keys, iota): the permutation
        back = Pi[order][jnp.argsort(order)]         # gathers by state-dependent indices: Pi again
        s = jnp.sort(Pi)
        spread = (s[2] - s[0]) * jnp.round(s[1] * 8.0) / 8.0
        _, suffix = jax.lax.scan(lambda c, x: (c + x, c), jnp.zeros((), Pi.dtype), s, reverse=True)
        back = back.at[1].multiply(1.0 + 1e-9 * jnp.sign(s[1]))  # a scatter that multiplies
        U, _, Vt = jnp.linalg.svd(new.R)
        return State(U @ Vt, back + 1e-6 * dt * (spread + suffix)), aux, stats


def _states(p, n=4):
    rng = np.random.default_rng(5)
    R = jax.vmap(jaxrot.so3.exp)(jnp.asarray(rng.normal(size=(n, 3))))
    Pi = jnp.asarray(rng.normal(size=(n, 3)) * 3.0)
    return jaxrot.State(R, Pi)


def test_sort_gather_scatter_round_reversed_scan_and_svd_run_fused_as_on_xla():
    p = jaxrot.problems.get("free_body_mz")
    m = ReorderedRK4()
    assert kernels.why_not(m, p.system) is None
    s0 = _states(p)
    kw = dict(state0=s0, saveat=jaxrot.SaveAt(steps=50))
    fused = jaxrot.simulate(m, p, 2e-2, 200, executor=jaxrot.Fused(), **kw)
    xla = jaxrot.simulate(m, p, 2e-2, 200, executor=jaxrot.XLA(), **kw)
    assert dict(fused.provenance)["executor"].startswith("Fused")
    # the run does reorder: some body's momentum components change order between saved frames
    ranks = np.argsort(np.asarray(xla.states.Pi), axis=-1)
    assert np.any(ranks[:, 1:] != ranks[:, :-1])
    for a, b in ((fused.states.R, xla.states.R), (fused.states.Pi, xla.states.Pi)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=1e-12 * float(jnp.max(jnp.abs(b))))


def test_a_primitive_still_without_a_restatement_is_named():
    class EighRK4(RK4):
        reference: ClassVar[str] = "a test of the refusal"

        def step(self, system, t, state, aux, dt):
            new, aux, stats = super().step(system, t, state, aux, dt)
            w = jnp.linalg.eigh(new.R @ new.R.T)[0]
            return State(new.R, new.Pi * (w[0] / w[0])), aux, stats

    p = jaxrot.problems.get("free_body_mz")
    why = kernels.why_not(EighRK4(), p.system)
    assert why is not None and "eigh" in why, why
    with pytest.raises(ValueError, match="no fused kernel for the method EighRK4: .*'eigh'"):
        jaxrot.simulate(EighRK4(), p, 1e-3, 10, executor=jaxrot.Fused())
