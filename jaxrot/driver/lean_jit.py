"""``lean_jit``: ``eqx.filter_jit``'s semantics at ``jax.jit``'s per-call cost.

Like ``filter_jit``, every array leaf of the arguments (JAX or NumPy) is traced and every other leaf
is static (hashed into the cache key). A call flattens the arguments once, looks the compiled
program up by (structure, non-array leaves) and hands the arrays to a plain ``jax.jit``, whose C++
path dispatches them; ``filter_jit``'s own per-call Python (signature binding, partitioning,
re-combining the outputs) is a large part of a small :func:`jaxrot.simulate` call.
Outputs must be JAX types (arrays, None, modules whose non-array fields are static).
``f.bind(*args)`` is the call as a function of no arguments, for a call repeated as it is.
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax


def lean_jit(f):
    cache: dict = {}

    def bind(*args, **kwargs):
        """The call with these arguments, as a function of no arguments: flattened and looked up once
        (a repeated call of the same run)."""
        leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
        mask = tuple(eqx.is_array(x) for x in leaves)
        statics = tuple(x for x, m in zip(leaves, mask) if not m)
        key = (treedef, mask, statics)
        fn = cache.get(key)
        if fn is None:
            def run(arrays):
                dyn, st = iter(arrays), iter(statics)
                a, kw = jax.tree_util.tree_unflatten(treedef, [next(dyn) if m else next(st) for m in mask])
                return f(*a, **kw)

            run.__name__, run.__qualname__ = f.__name__, f.__qualname__  # for profiles and compile logs
            if len(cache) >= 256:
                cache.clear()
            fn = cache[key] = jax.jit(run)
        return functools.partial(fn, [x for x, m in zip(leaves, mask) if m])

    @functools.wraps(f)
    def call(*args, **kwargs):
        return bind(*args, **kwargs)()

    call.bind = bind
    return call
