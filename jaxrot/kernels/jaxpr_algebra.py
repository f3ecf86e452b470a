"""Element-wise arithmetic of a jaxpr's restatement (:mod:`jaxrot.kernels.jaxpr_warp`) on known
operands: computed when the source is generated, or an exact identity (``x + 0``, ``x * 1``), and
the extrema and integer powers as lax computes them."""

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
