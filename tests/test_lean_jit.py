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


def test_a_bound_call_gives_the_outputs_or_their_leaves():
    """``f.bind(...)`` is the call as a function of no arguments; its leaves and the structure recorded
    while tracing rebuild the same outputs (None and static fields included)."""
    import jax

    class Tagged(eqx.Module):
        v: jnp.ndarray
        tag: str = eqx.field(static=True)

    @lean_jit
    def f(m, x):
        return {"scaled": Tagged(m.k * x, f"power {m.power}"), "none": None, "sum": jnp.sum(x)}

    bound = f.bind(Scale(jnp.asarray(2.0), 3), jnp.arange(3.0))
    out = bound()
    assert out["none"] is None and out["scaled"].tag == "power 3"
    np.testing.assert_allclose(out["scaled"].v, [0.0, 2.0, 4.0])
    leaves = bound.leaves()
    assert len(leaves) == 2
    plain = f.__wrapped__(Scale(jnp.asarray(2.0), 3), jnp.arange(3.0))  # the function itself, not compiled
    assert bound.structure() == jax.tree_util.tree_structure(plain)
    np.testing.assert_allclose(jax.tree_util.tree_unflatten(bound.structure(), leaves)["sum"], 3.0)


def test_an_output_structure_that_depends_on_a_dtype_follows_each_call():
    """Calls that differ only in their arrays' dtypes get the structure of their own trace (a static
    field recording the dtype), however the calls alternate."""

    class Typed(eqx.Module):
        v: jnp.ndarray
        kind: str = eqx.field(static=True)

    @lean_jit
    def f(x):
        return Typed(2 * x, str(x.dtype))

    for dtype in (jnp.float64, jnp.float32, jnp.float64, jnp.float32):
        out = f(jnp.ones(2, dtype))
        assert out.kind == jnp.dtype(dtype).name and out.v.dtype == dtype
