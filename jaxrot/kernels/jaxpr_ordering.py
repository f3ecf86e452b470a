"""The parts of a jaxpr's restatement (:mod:`jaxrot.kernels.jaxpr_warp`) that reorder or decompose a
few numbers whose values are known only when the step runs: ``sort`` (a sorting network of
compare-exchanges), a ``gather`` by an index computed from the state (a selection among the positions
it can take) and the ``svd`` of a 3x3 matrix (Warp's ``svd3``).

They make the torque-free flow (which orders the principal moments, ``jnp.argsort(J)``, and reads the
momentum in that order) and the methods that restore orthogonality through an SVD restatable. Like
everything generated, a source that uses them is compared with JAX before a run uses it.

Differences from XLA, on inputs those methods never give: floats are ordered by ``<`` with NaNs last
(``-0.0`` and ``0.0`` compare equal, XLA puts ``-0.0`` first); an index outside the operand is clamped
(XLA's ``fill`` mode would give NaN); an SVD's singular vectors are those of Warp's Jacobi iteration,
which may differ from LAPACK's by the sign of a pair ``(u_k, v_k)`` or, for repeated singular values,
by a rotation within their space (products such as ``U V^T`` agree; a method that reads one singular
vector alone fails the comparison and stays on XLA).
"""

import itertools

import numpy as np

from .jaxpr_warp import Element, Source, Unsupported, elementwise, kind_of, pick

__all__ = ["ORDERING"]

#: the most positions a gather's index computed from the state may select among
MAX_CHOICES = 64


def _greater(g: Source, a: Element, b: Element) -> Element:
    """``a`` after ``b`` in the sort's order (NaNs last)."""
    if a.value is not None and b.value is not None:
        return g.literal(bool(a.value > b.value or (a.value != a.value and b.value == b.value)), "b")
    if a.kind == "f":
        return g.emit(f"(({a.code} > {b.code}) or (({a.code} != {a.code}) and ({b.code} == {b.code})))", "b")
    return g.emit(f"({a.code} > {b.code})", "b")


def _after(g: Source, keys_a: list, keys_b: list) -> Element:
    """Lexicographic order of several keys: ``a`` after ``b``."""
    out = _greater(g, keys_a[-1], keys_b[-1])
    for a, b in zip(reversed(keys_a[:-1]), reversed(keys_b[:-1])):
        tie = g.emit(f"(not {_greater(g, a, b).code} and not {_greater(g, b, a).code})", "b")
        out = g.emit(f"({_greater(g, a, b).code} or ({tie.code} and {out.code}))", "b")
    return out


def sort(g: Source, eqn, ins: list) -> list:
    """``lax.sort`` along one axis, stable: odd-even transposition (adjacent compare-exchanges that swap
    only when the first is strictly after the second; ``n`` rounds sort ``n`` numbers)."""
    p = eqn.params
    dim, n_keys = int(p["dimension"]), int(p["num_keys"])
    ops = [np.moveaxis(np.asarray(x), dim, -1).copy() for x in ins]
    n = ops[0].shape[-1]
    for lane in np.ndindex(ops[0].shape[:-1]):
        rows = [list(x[lane]) for x in ops]
        for r in range(n):
            for i in range(r % 2, n - 1, 2):
                swap = _after(g, [rows[k][i] for k in range(n_keys)], [rows[k][i + 1] for k in range(n_keys)])
                first = np.asarray([row[i] for row in rows], dtype=object)
                second = np.asarray([row[i + 1] for row in rows], dtype=object)
                lo, hi = pick(g, swap, [first, second]), pick(g, swap, [second, first])
                for k, row in enumerate(rows):
                    row[i], row[i + 1] = lo[k], hi[k]
        for x, row in zip(ops, rows):
            for i, e in enumerate(row):
                x[lane + (i,)] = e
    return [np.moveaxis(x, -1, dim) for x in ops]


def gather(g: Source, eqn, ins: list) -> list:
    """A ``gather`` whose indices are computed from the state: for each index vector, every start it
    can take (clamped into the operand) is gathered with the positions' ids, and each output element
    is selected among its candidates by the index."""
    import jax

    from .jaxpr_control import by_index

    operand, indices = np.asarray(ins[0]), np.asarray(ins[1])
    unknown = [k for k in np.ndindex(indices.shape) if indices[k].value is None]
    if not unknown:
        return [by_index(g, eqn, ins)]
    dn = eqn.params["dimension_numbers"]
    if dn.operand_batching_dims:
        raise Unsupported("a batched gather whose indices depend on the state")
    sizes = eqn.params["slice_sizes"]
    # the last axis of the indices holds an index vector (one component per start_index_map entry)
    limits = [operand.shape[d] - sizes[d] for d in dn.start_index_map]
    base = np.zeros(indices.shape, dtype=np.int64)
    for k in np.ndindex(indices.shape):
        if indices[k].value is not None:
            base[k] = int(indices[k].value)
    pool = list(operand.reshape(-1))
    ids = np.arange(1, operand.size + 1, dtype=np.int32).reshape(operand.shape)
    idx_dtype = eqn.invars[1].aval.dtype

    def where(idx):
        with jax.ensure_compile_time_eval():
            return np.asarray(eqn.primitive.bind(ids, idx.astype(idx_dtype), **eqn.params))

    out_ids = where(base)
    out = np.empty(out_ids.shape, dtype=object)
    for k in np.ndindex(out_ids.shape):
        out[k] = pool[int(out_ids[k]) - 1]
    for vec in sorted({k[:-1] for k in unknown}):
        comps = [j for j in range(indices.shape[-1]) if indices[vec + (j,)].value is None]
        ranges = [range(limits[j] + 1) for j in comps]
        choices = list(itertools.product(*ranges))
        if len(choices) > MAX_CHOICES:
            raise Unsupported(f"a gather by a state-dependent index with {len(choices)} possible positions")
        # the index vector's position among the choices, its components clamped as XLA clamps them
        which, stride = None, 1
        for j, r in reversed(list(zip(comps, ranges))):
            c = g.emit(f"wp.min(wp.max({indices[vec + (j,)].code}, int(0)), int({len(r) - 1}))", "i")
            term = c if stride == 1 else g.emit(f"({c.code} * int({stride}))", "i")
            which = term if which is None else g.emit(f"({which.code} + {term.code})", "i")
            stride *= len(r)
        cand = []
        for choice in choices:
            idx = base.copy()
            for j, v in zip(comps, choice):
                idx[vec + (j,)] = v
            cand.append(where(idx))
        moved = [k for k in np.ndindex(out_ids.shape) if len({int(c[k]) for c in cand}) > 1]
        cases = [np.asarray([pool[int(c[k]) - 1] for k in moved], dtype=object) for c in cand]
        for k, e in zip(moved, pick(g, which, cases) if moved else ()):
            out[k] = e
    return [out]


def svd(g: Source, eqn, ins: list) -> list:
    """The SVD of a 3x3 matrix (full, with the singular vectors): Warp's ``svd3``, its last singular
    value made non-negative (its left vector's sign moved instead) as LAPACK returns them."""
    p = eqn.params
    x = np.asarray(ins[0])
    if x.shape[-2:] != (3, 3) or p.get("subset_by_index") not in (None, (0, 3)):
        raise Unsupported(f"an svd of a {x.shape[-2:]} matrix (3x3 only)")
    shape = x.shape[:-2]
    s_out = np.empty(shape + (3,), dtype=object)
    u_out = np.empty(shape + (3, 3), dtype=object)
    vt_out = np.empty(shape + (3, 3), dtype=object)
    for b in np.ndindex(shape):
        A = g.emit("M(" + ", ".join(x[b + (i, j)].code for i in range(3) for j in range(3)) + ")", "m")
        name = f"v{g.n}"
        g.n += 1
        g.line(f"{name}_U, {name}_s, {name}_V = wp.svd3({A.code})")
        flip = g.emit(f"({name}_s[2] < S(0.0))", "b")
        sign = g.emit(f"wp.where({flip.code}, S(-1.0), S(1.0))", "f")
        for i in range(3):
            s_out[b + (i,)] = g.emit(f"wp.abs({name}_s[{i}])" if i == 2 else f"{name}_s[{i}]", "f")
            for j in range(3):
                u = f"{name}_U[{i}, {j}]"
                u_out[b + (i, j)] = g.emit(f"({sign.code} * {u})" if j == 2 else u, "f")
                vt_out[b + (i, j)] = g.emit(f"{name}_V[{j}, {i}]", "f")
    outs = {"s": s_out, "u": u_out, "vt": vt_out}
    if not p.get("compute_uv", True):
        return [outs["s"]]
    return [outs["s"], outs["u"], outs["vt"]]


def scatter_combining(g: Source, eqn, ins: list) -> list:
    """A ``scatter-add`` or ``scatter-mul`` (``x.at[i].add(u)``, ``.multiply(u)``) at indices known when
    the source is generated: where each update lands is found by scattering it alone (a one-hot update
    into zeros), and each position combines its operand with the updates landing on it, in order."""
    import jax

    operand, indices, updates = (np.asarray(x) for x in ins)
    if any(e.value is None for e in indices.reshape(-1)):
        raise Unsupported(f"a {eqn.primitive.name} whose indices depend on the state")
    idx = np.asarray([e.value for e in indices.reshape(-1)], dtype=eqn.invars[1].aval.dtype).reshape(indices.shape)
    params = {k: v for k, v in eqn.params.items() if k not in ("update_jaxpr", "update_consts")}
    kind = kind_of(eqn.outvars[0].aval.dtype)
    op = "*" if eqn.primitive.name == "scatter-mul" else "+"
    out = operand.copy()
    for j in np.ndindex(updates.shape):
        one = np.zeros(updates.shape, np.float64)
        one[j] = 1.0
        with jax.ensure_compile_time_eval():
            hit = np.asarray(jax.lax.scatter_add(np.zeros(operand.shape), idx, one, **params))
        for k in zip(*np.nonzero(hit)):
            a, b = out[k], updates[j]
            if a.value is not None and b.value is not None:
                out[k] = g.literal(a.value * b.value if op == "*" else a.value + b.value, kind)
            else:
                out[k] = g.emit(f"({a.code} {op} {b.code})", kind)
    return [out]


def round_(g: Source, eqn, ins: list) -> list:
    """``lax.round``: halfway cases away from zero (``wp.round``) or to the even neighbour (``wp.rint``)."""
    if kind_of(eqn.outvars[0].aval.dtype) != "f":
        raise Unsupported("round of a non-floating value")
    fn = "wp.rint" if int(eqn.params.get("rounding_method", 0)) == 1 else "wp.round"
    return [elementwise(lambda a: g.literal(float(np.rint(a.value) if fn == "wp.rint" else
                                                  np.sign(a.value) * np.floor(abs(a.value) + 0.5)), "f")
                        if a.value is not None else g.emit(f"{fn}({a.code})", "f"), ins[0])]


#: primitive name -> its restatement here
ORDERING = {"sort": sort, "gather": gather, "svd": svd, "scatter-add": scatter_combining,
            "scatter-mul": scatter_combining, "round": round_}
