"""jaxrot.driver.lean_jit.lean_jit: filter_jit's split of arguments (arrays traced, other leaves static)."""

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from jaxrot.driver.lean_jit import lean_jit


class Scale(eqx.Module):
    k: jnp.ndarray
    power: int  # a non-array leaf: static


def test_arrays_are_traced_and_other_leaves_static():
    traces = []

    @lean_jit
    def f(m, x, *, shift=0.0):
        traces.append(1)
        return m.k * x ** m.power + shift

    x = jnp.arange(3.0)
    np.testing.assert_allclose(f(Scale(jnp.asarray(2.0), 2), x), 2 * np.arange(3.0) ** 2)
    np.testing.assert_allclose(f(Scale(jnp.asarray(3.0), 2), np.ones(3)), 3 * np.ones(3))  # new values: no trace
    assert len(traces) == 1
    np.testing.assert_allclose(f(Scale(jnp.asarray(3.0), 3), x), 3 * np.arange(3.0) ** 3)  # new static: retrace
    np.testing.assert_allclose(f(Scale(jnp.asarray(3.0), 3), x, shift=1.5), 3 * np.arange(3.0) ** 3 + 1.5)
    assert len(traces) == 3
    assert f.__name__ == "f"
