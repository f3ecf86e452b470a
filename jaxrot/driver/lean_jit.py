"""``lean_jit``: ``eqx.filter_jit``'s semantics at ``jax.jit``'s per-call cost.

Like ``filter_jit``, every array leaf of the arguments (JAX or NumPy) is traced and every other leaf
is static (hashed into the cache key). A call flattens the arguments once, looks the compiled
program up by (structure, non-array leaves) and hands the arrays to a plain ``jax.jit``, whose C++
path dispatches them; ``filter_jit``'s own per-call Python (signature binding, partitioning,
re-combining the outputs) is a large part of a small :func:`jaxrot.simulate` call.
Outputs must be JAX types (arrays, None, modules whose non-array fields are static); the compiled
program returns their leaves, and the structure recorded while tracing rebuilds them.
``f.bind(*args)`` is the call as a :class:`Bound` function of no arguments, for a call repeated as it is.
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax


class Bound:
    """A compiled call with its arguments bound: ``bound()`` is the output; ``bound.leaves()`` its
    leaves, whose structure is ``bound.structure()`` (known once the program has been traced), for a
    caller that rebuilds the output as something else (a repeated :func:`jaxrot.simulate` call builds
    its trajectory from them directly)."""

    __slots__ = ("_fn", "_arrays", "_tree")

    def __init__(self, fn, arrays, tree):
        self._fn, self._arrays, self._tree = fn, arrays, tree

    def leaves(self) -> list:
        return self._fn(self._arrays)

    def structure(self):
        return self._tree[0]

    def __call__(self):
        flat = self._fn(self._arrays)
        return jax.tree_util.tree_unflatten(self._tree[0], flat)


def lean_jit(f):
    cache: dict = {}

    def bind(*args, **kwargs) -> Bound:
        """The call with these arguments, as a function of no arguments: flattened and looked up once
        (a repeated call of the same run)."""
        leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
        mask = tuple(eqx.is_array(x) for x in leaves)
        statics = tuple(x for x, m in zip(leaves, mask) if not m)
        arrays = [x for x, m in zip(leaves, mask) if m]
        # the arrays' types too: one jitted function per input signature, traced once, so the output
        # structure it records is that signature's (a static field may depend on a dtype)
        types = tuple((x.shape, x.dtype, getattr(x, "weak_type", False)) for x in arrays)
        key = (treedef, mask, statics, types)
        entry = cache.get(key)
        if entry is None:
            tree = [None]  # the outputs' structure, recorded while tracing

            def run(arrays):
                dyn, st = iter(arrays), iter(statics)
                a, kw = jax.tree_util.tree_unflatten(treedef, [next(dyn) if m else next(st) for m in mask])
                flat, tree[0] = jax.tree_util.tree_flatten(f(*a, **kw))
                return flat

            run.__name__, run.__qualname__ = f.__name__, f.__qualname__  # for profiles and compile logs
            if len(cache) >= 256:
                cache.clear()
            entry = cache[key] = (jax.jit(run), tree)
        return Bound(entry[0], arrays, entry[1])

    @functools.wraps(f)
    def call(*args, **kwargs):
        return bind(*args, **kwargs)()

    call.bind = bind
    return call
