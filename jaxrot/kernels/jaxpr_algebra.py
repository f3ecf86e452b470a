"""Arithmetic of a jaxpr's restatement (:mod:`jaxrot.kernels.jaxpr_warp`) on known operands:
computed when the source is generated, or an exact identity (``x + 0``, ``x * 1``, ``x * 0``; in
contractions and sums too, so that a product with a constant vector writes only the terms that
count), and the extrema, integer powers, contractions and reductions as lax computes them."""

import numpy as np

from .jaxpr_warp import Element, Source, Unsupported


_NP_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "atan2": np.arctan2}
_NP_UNARY = {"neg": np.negative, "abs": np.abs, "sin": np.sin, "cos": np.cos, "tan": np.tan, "exp": np.exp,
             "log": np.log, "sqrt": np.sqrt, "square": np.square, "floor": np.floor, "ceil": np.ceil,
             "is_finite": np.isfinite}


def _scalar_type(g: Source):
    return np.float64 if g.S64 else np.float32


def binary(g: Source, name: str, a: Element, b: Element, kind: str) -> Element | None:
    """``a name b`` computed now where both are known (in the run's precision), or an identity of a
    known operand (``x + 0``, ``x * 1``, ``x / 2^k`` as ``x * 2^-k``, exact; ``x * 0`` as ``0``: a
    derivative's zero tangents, which would otherwise be carried through every product), else None."""
    if kind != "f":
        return None
    av, bv = a.value, b.value
    if av is not None and bv is not None and name in _NP_BINARY:
        T = _scalar_type(g)
        with np.errstate(all="ignore"):
            return g.literal(float(_NP_BINARY[name](T(av), T(bv))), "f")
    if name == "add":
        if bv == 0.0 and a.kind == "f":
            return a
        if av == 0.0 and b.kind == "f":
            return b
    elif name == "sub":
        if bv == 0.0 and a.kind == "f":
            return a
        if av == 0.0 and b.kind == "f":
            return g.emit(f"(-{b.code})", "f")
    elif name == "mul":
        if bv == 1.0 and a.kind == "f":
            return a
        if av == 1.0 and b.kind == "f":
            return b
        if av == 0.0 or bv == 0.0:
            return g.literal(0.0, "f")
        if av == -1.0:
            return g.emit(f"(-{b.code})", "f")
        if bv == -1.0:
            return g.emit(f"(-{a.code})", "f")
    elif name == "div" and bv is not None and a.kind == "f":
        if bv == 1.0:
            return a
        m, e = np.frexp(bv)
        if np.isfinite(bv) and abs(m) == 0.5:  # a power of two: its reciprocal is exact
            return g.emit(f"({a.code} * {g.literal(1.0 / bv, 'f').code})", "f")
    return None


def unary(g: Source, name: str, a: Element, kind: str) -> Element | None:
    """``name(a)`` computed now where ``a`` is known (in the run's precision), else None."""
    if a.value is None or a.kind != "f" or name not in _NP_UNARY:
        return None
    T = _scalar_type(g)
    with np.errstate(all="ignore"):
        v = _NP_UNARY[name](T(a.value))
    return g.literal(bool(v), "b") if kind == "b" else g.literal(float(v), "f")


def extremum(g: Source, a: Element, b: Element, op: str, kind: str) -> Element:
    """``max`` or ``min`` (``op``) as lax computes it: a NaN operand gives NaN (``wp.max`` would return
    the other operand)."""
    if kind == "b":
        return g.emit(f"({a.code} {'or' if op == 'max' else 'and'} {b.code})", "b")
    m = g.emit(f"wp.{op}({a.code}, {b.code})", kind)
    if kind != "f":
        return m
    return g.emit(f"wp.where({a.code} != {a.code}, {a.code}, wp.where({b.code} != {b.code}, {b.code}, {m.code}))", "f")


def integer_pow(g: Source, x: Element, y: int) -> Element:
    k = x.kind
    if y == 0:
        return g.literal(1.0 if k == "f" else 1, k)
    n = abs(y)
    if k != "f" and y < 0:
        raise Unsupported("a negative integer power of an integer")
    if n > 16:
        if k != "f":
            raise Unsupported("a large integer power of an integer")
        return g.emit(f"wp.pow({x.code}, {g.literal(float(y), 'f').code})", "f")
    # square-and-multiply: one local per squaring
    result, base = None, x
    while n:
        if n & 1:
            result = base if result is None else g.emit(f"({result.code} * {base.code})", k)
        n >>= 1
        if n:
            base = g.emit(f"({base.code} * {base.code})", k)
    return g.emit(f"(S(1.0) / {result.code})", "f") if y < 0 else result


def sum_of(g: Source, terms: list, kind: str) -> Element:
    """The sum of ``terms`` (elements, or ``(a, b)`` pairs of factors) in their order, known zero terms
    left out and factors of one dropped (exact: a 3x3 product with a constant axis or a zero block
    writes only the terms that count, and what they alone feed is then dead code)."""
    codes, known = [], []
    for t in terms:
        a, b = t if isinstance(t, tuple) else (t, None)
        if b is not None and a.value is not None and b.value is not None and kind == "f":
            T = _scalar_type(g)
            a, b = g.literal(float(T(a.value) * T(b.value)), "f"), None
        if b is None:
            if a.value is not None and kind == "f" and a.value == 0.0:
                continue
            codes.append(a.code)
            known.append(a)
            continue
        if (a.value is not None and a.value == 0.0) or (b.value is not None and b.value == 0.0):
            continue
        for x, y in ((a, b), (b, a)):
            if x.value is not None and x.value in (1.0, -1.0) and y.kind == kind:
                codes.append(y.code if x.value == 1.0 else f"(-{y.code})")
                known.append(y if x.value == 1.0 else None)
                break
        else:
            codes.append(f"{a.code} * {b.code}")
            known.append(None)
    if not codes:
        return g.literal(0.0 if kind == "f" else 0, kind)
    if len(codes) == 1 and known[0] is not None:
        return known[0]
    return g.emit("(" + " + ".join(codes) + ")" if len(codes) > 1 else codes[0], kind)


def dot_general(g: Source, lhs: np.ndarray, rhs: np.ndarray, params, kind: str) -> np.ndarray:
    (lc, rc), (lb, rb) = params["dimension_numbers"]
    lf = [d for d in range(lhs.ndim) if d not in lc and d not in lb]
    rf = [d for d in range(rhs.ndim) if d not in rc and d not in rb]
    L = np.transpose(lhs, [*lb, *lf, *lc])
    Rr = np.transpose(rhs, [*rb, *rf, *rc])
    nb, nlf, nrf = len(lb), len(lf), len(rf)
    out_shape = L.shape[:nb + nlf] + Rr.shape[nb:nb + nrf]
    out = np.empty(out_shape, dtype=object)
    for idx in np.ndindex(out_shape):
        b, i, j = idx[:nb], idx[nb:nb + nlf], idx[nb + nlf:]
        a_row = np.asarray(L[b + i]).reshape(-1)
        b_row = np.asarray(Rr[b + j]).reshape(-1)
        out[idx] = sum_of(g, list(zip(a_row, b_row)), kind)
    return out


def reduce(g: Source, x: np.ndarray, axes, op: str, kind: str) -> np.ndarray:
    axes = tuple(int(a) for a in axes)
    keep = [d for d in range(x.ndim) if d not in axes]
    moved = np.transpose(x, [*keep, *axes])
    shape = moved.shape[:len(keep)]
    flat = moved.reshape(shape + (-1,))
    out = np.empty(shape, dtype=object)
    for idx in np.ndindex(shape):
        terms = list(flat[idx])
        if op in ("and", "or"):
            out[idx] = (g.literal(op == "and", "b") if not terms
                        else g.emit("(" + f" {op} ".join(t.code for t in terms) + ")", "b"))
            continue
        if not terms:
            raise Unsupported(f"{op} over an empty axis")
        if op == "sum":
            out[idx] = sum_of(g, terms, kind)
        elif op == "prod":
            out[idx] = g.emit("(" + " * ".join(t.code for t in terms) + ")", kind)
        else:
            acc = terms[0]
            for t in terms[1:]:
                acc = extremum(g, acc, t, op, kind)
            out[idx] = acc
    return out


def arg_extremum(g: Source, x: np.ndarray, axes, op: str) -> np.ndarray:
    """argmax (``op`` ``">"``) or argmin (``"<"``) over one axis: the first extremal index."""
    (axis,) = (int(a) for a in axes)
    moved = np.moveaxis(x, axis, -1)
    out = np.empty(moved.shape[:-1], dtype=object)
    for idx in np.ndindex(out.shape):
        row = list(moved[idx])
        if all(e.value is not None for e in row):  # known values: the index itself
            vals = [e.value for e in row]
            out[idx] = g.literal(int(np.argmax(vals) if op == ">" else np.argmin(vals)), "i")
            continue
        best, where = row[0], g.literal(0, "i")
        for k, e in enumerate(row[1:], start=1):
            # a NaN is the extremum (the first one), as in lax
            nan = f" or (({e.code} != {e.code}) and ({best.code} == {best.code}))" if e.kind == "f" else ""
            better = g.emit(f"(({e.code} {op} {best.code}){nan})", "b")
            where = g.emit(f"wp.where({better.code}, int({k}), {where.code})", "i")
            best = g.emit(f"wp.where({better.code}, {e.code}, {best.code})", best.kind)
        out[idx] = where
    return out
