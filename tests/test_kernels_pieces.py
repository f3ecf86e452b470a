"""The fused loop's pieces generated from their JAX code (jaxrot.kernels.generate_pieces): the PI
controller is :func:`jaxrot.integrators.pairs.adapt` restated, the same bits at every kind of error
(small, accepted, rejected, infinite, NaN); a NaN error, which a pair's own ``error_norm`` may give,
rejects the attempt and shrinks the step by ``FACTOR_MIN`` on the XLA loop and in the kernel alike."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrot
from jaxrot import kernels
from jaxrot.integrators import EmbeddedPair
from jaxrot.integrators.pairs import FACTOR_MIN, adapt, scaled_rms

pytestmark = pytest.mark.skipif(not kernels.have_warp(), reason="needs warp-lang (the fast extra)")

ERRORS = [0.0, 1e-14, 3e-3, 0.7, 1.0, 1.0 + 1e-15, 4.0, 1e7, np.inf, np.nan]


def _controller_in_warp(order, err, err_prev, h, step, hit):
    from jaxrot.kernels._common import warp
    from jaxrot.kernels.generate_pieces import controller

    wp = warp()
    S = wp.float64
    control = controller(S, order)

    def run(err: wp.array(dtype=S), err_prev: wp.array(dtype=S), h: wp.array(dtype=S), step: wp.array(dtype=S),
            hit: wp.array(dtype=wp.int32), ok: wp.array(dtype=wp.int32), h_new: wp.array(dtype=S),
            e_new: wp.array(dtype=S)):
        i = wp.tid()
        a, b, c = control(err[i], err_prev[i], h[i], step[i], hit[i] != 0)
        ok[i] = wp.where(a, 1, 0)
        h_new[i] = b
        e_new[i] = c

    run.__name__ = run.__qualname__ = f"test_controller_{order}"
    kernel = wp.kernel(run, module="unique", enable_backward=False)
    n = len(err)
    arr = [wp.array(np.asarray(x, np.float64), dtype=S, device="cpu") for x in (err, err_prev, h, step)]
    outs = [wp.zeros(n, dtype=wp.int32, device="cpu"), wp.zeros(n, dtype=S, device="cpu"),
            wp.zeros(n, dtype=S, device="cpu")]
    wp.launch(kernel, dim=n, device="cpu", inputs=[*arr, wp.array(np.asarray(hit, np.int32), dtype=wp.int32,
                                                                    device="cpu"), *outs])
    return outs[0].numpy().astype(bool), outs[1].numpy(), outs[2].numpy()


@pytest.mark.parametrize("order", [3, 5])
def test_the_generated_controller_is_adapt(order):
    grid = np.array([(e, p, hit) for e in ERRORS for p in (1e-10, 0.37, 1.0) for hit in (0, 1)], np.float64)
    err, err_prev, hit = grid[:, 0], grid[:, 1], grid[:, 2].astype(bool)
    h = np.full(err.shape, 0.25)
    step = np.where(hit, 0.0625, h)
    got = _controller_in_warp(order, err, err_prev, h, step, hit)
    want = jax.vmap(lambda *a: adapt(order, *a))(*(jnp.asarray(x) for x in (err, err_prev, h, step, hit)))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, np.asarray(w))  # (the same bits: NaN where NaN)


def test_a_nonfinite_error_rejects_and_shrinks_the_step():
    for err in (np.inf, np.nan):
        ok, h_new, e = adapt(5, jnp.asarray(err), jnp.asarray(0.5), jnp.asarray(0.1), jnp.asarray(0.1),
                             jnp.asarray(False))
        assert not bool(ok) and float(h_new) == 0.1 * FACTOR_MIN and float(e) == 0.5


class NaNRejecting(EmbeddedPair):
    """buss4(3) whose error norm says NaN for every attempt it would reject."""

    def error_norm(self, y, y1, y_err, rtol, atol):
        err = scaled_rms(y, y1, y_err, rtol, atol)
        return jnp.where(err > 1.0, jnp.nan, err)


def test_a_pair_whose_norm_gives_nan_runs_on_both_loops_with_the_same_steps():
    """A too long first step (NaN error) is rejected and shrunk by FACTOR_MIN until one is accepted; the
    XLA loop and the kernel take the same steps."""
    p = jaxrot.problems.get("asymmetric_top")
    pair = NaNRejecting(jaxrot.get("buss4"), jaxrot.get("buss3"))
    runs = [jaxrot.simulate(pair, p, 0.5, t1=0.5, stepsize=jaxrot.Adaptive(1e-8, 1e-8), executor=ex,
                            saveat=jaxrot.SaveAt(t1=True), throw=False) for ex in (jaxrot.XLA(), jaxrot.Fused())]
    for tr in runs:
        assert tr.result == jaxrot.RESULTS.successful
        assert int(tr.controller.n_rejected) >= 1 and np.all(np.isfinite(np.asarray(tr.final.R)))
    assert int(runs[0].controller.n_accepted) == int(runs[1].controller.n_accepted)
    assert int(runs[0].controller.n_rejected) == int(runs[1].controller.n_rejected)
    np.testing.assert_allclose(np.asarray(runs[1].final.R), np.asarray(runs[0].final.R), rtol=0, atol=1e-12)
