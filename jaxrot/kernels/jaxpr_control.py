"""The parts of a jaxpr's restatement (:mod:`jaxrot.kernels.jaxpr_warp`) that are not element-wise:
loops (``while``, ``scan``) as Warp loops over locals, gathers and scatters with known indices, and
equations whose operands are all known, computed when the source is generated."""

import numpy as np

from .jaxpr_warp import Element, Source, Unsupported, elementwise, convert, kind_of, pick, restate


def reduce_precision(g: Source, a: Element, exponent_bits: int, mantissa_bits: int) -> Element:
    """Rounding to the run's own format is the identity; to float32 inside a float64 run, a conversion."""
    own = (11, 52) if g.S64 else (8, 23)
    if (exponent_bits, mantissa_bits) == own:
        return a
    if (exponent_bits, mantissa_bits) == (8, 23):
        return g.emit(f"S(wp.float32({a.code}))", "f")
    raise Unsupported(f"reduce_precision to {exponent_bits} exponent and {mantissa_bits} mantissa bits")


def _known(x: np.ndarray) -> bool:
    return all(e.value is not None for e in np.asarray(x).reshape(-1))


def _values(x: np.ndarray, dtype) -> np.ndarray:
    return np.asarray([e.value for e in np.asarray(x).reshape(-1)], dtype=dtype).reshape(np.shape(x))


def by_index(g: Source, eqn, ins: list) -> np.ndarray:
    """A gather or scatter (replace) with known indices: the primitive applied to the elements'
    positions tells where each output element comes from (no arithmetic is generated)."""
    import jax

    name = eqn.primitive.name
    operand, indices = ins[0], ins[1]
    if not _known(indices):
        raise Unsupported(f"a {name} whose indices depend on the state")
    idx = _values(indices, eqn.invars[1].aval.dtype)
    pool = list(np.asarray(operand).reshape(-1))
    ids = np.arange(1, operand.size + 1, dtype=np.int32).reshape(operand.shape)
    with jax.ensure_compile_time_eval():
        if name == "scatter":
            if eqn.params.get("update_jaxpr") is not None:
                raise Unsupported("a scatter that combines values")
            upd = ins[2]
            pool += list(np.asarray(upd).reshape(-1))
            upd_ids = np.arange(operand.size + 1, operand.size + upd.size + 1, dtype=np.int32).reshape(upd.shape)
            where = np.asarray(eqn.primitive.bind(ids, idx, upd_ids, **eqn.params))
        else:
            where = np.asarray(eqn.primitive.bind(ids, idx, **eqn.params))
    kind = kind_of(eqn.outvars[0].aval.dtype)
    out = np.empty(where.shape, dtype=object)
    for k in np.ndindex(where.shape):
        w = int(where[k])  # 0: a position filled (out of bounds)
        out[k] = pool[w - 1] if w > 0 else g.literal(float("nan") if kind == "f" else 0, kind)
    return out


def _carry(g: Source, xs: list) -> list:
    """Fresh locals for a loop's carry (object arrays of the same shapes)."""
    return [elementwise(g.variable, x) if np.ndim(x) else _scalar(g.variable(np.asarray(x).reshape(()).item()))
            for x in xs]


def _scalar(e: Element) -> np.ndarray:
    out = np.empty((), dtype=object)
    out[()] = e
    return out


def assign(g: Source, dst: list, src: list):
    """``dst``'s locals set to ``src``'s values: every value read (a local ``dst`` holds copied first,
    as in a carry's permutation) before any is written, and the expressions of what is written are
    not reused after."""
    pairs = [(a, b if a.kind == b.kind else convert(g, b, a.kind))
             for d, s in zip(dst, src) for a, b in zip(np.asarray(d).reshape(-1), np.asarray(s).reshape(-1))]
    names = {a.code for a, _ in pairs}
    pairs = [(a, g.variable(b) if b.code in names and b.code != a.code else b) for a, b in pairs]
    for a, b in pairs:
        g.line(f"{a.code} = {b.code}")
        for key in g.uses.get(a.code, ()):
            g.cache.pop(key, None)


def zeroed(g: Source, avals) -> list:
    """Locals holding zeros (False) of each of ``avals``' shapes: the outputs :func:`blocks` sets."""
    return [elementwise(g.variable, g.array(np.zeros(tuple(a.shape), a.dtype))) for a in avals]


def blocks(g: Source, heads: list, outs: list, case, known=None) -> list:
    """One block per line of ``heads`` (an ``if``/``elif``/``else`` chain), the ``k``-th computing
    ``case(k)`` and setting ``outs``' locals to it: only the block taken runs when the step runs (a
    branch the processor predicts). ``known(k)``: values known inside the ``k``-th block."""
    for k, head in enumerate(heads):
        g.line(head)
        outer = g.known
        if known is not None:
            g.known = {**outer, **known(k)}
        with g.loop([]):
            assign(g, outs, [np.broadcast_to(np.asarray(r), np.shape(o)) for r, o in zip(case(k), outs)])
        g.known = outer
    return outs


def cond(g: Source, p, ins: list) -> list:
    """``lax.cond``: the branch the index picks, where it is known; else one ``if``/``elif`` block per
    branch, only the taken one computed when the step runs (the exact flow's elliptic branch is most of
    a splitting's step, and skipped for an axisymmetric body)."""
    branches = p["branches"]
    index, ops = np.asarray(ins[0]).reshape(()).item(), ins[1:]
    if index.value is not None or index.code in g.known or len(branches) == 1:
        k = 0 if len(branches) == 1 else int(index.value if index.value is not None else g.known[index.code])
        b = branches[min(max(k, 0), len(branches) - 1)]
        return restate(g, b.jaxpr, [g.array(c) for c in b.consts], ops)
    # (lax.cond clamps the index: below 0 the first branch, past the last the last)
    heads = [f"if {index.code} <= int(0):"] + [f"elif {index.code} == int({k}):" for k in range(1, len(branches) - 1)]
    return blocks(g, heads + ["else:"], zeroed(g, [v.aval for v in branches[0].jaxpr.outvars]),
                  lambda k: restate(g, branches[k].jaxpr, [g.array(c) for c in branches[k].consts], ops))


def while_loop(g: Source, p, ins: list) -> list:
    """``lax.while_loop``: the carry in locals, the condition computed before the loop and again at
    the end of each pass (Warp compiles a dynamic ``while``)."""
    cj, bj = p["cond_jaxpr"], p["body_jaxpr"]
    nc, nb = int(p["cond_nconsts"]), int(p["body_nconsts"])
    cconsts, bconsts, init = ins[:nc], ins[nc:nc + nb], ins[nc + nb:]
    carry = _carry(g, init)

    def condition():
        (c,) = restate(g, cj.jaxpr, [g.array(c) for c in cj.consts], [*cconsts, *carry])
        return np.asarray(c).reshape(()).item()

    flag = g.variable(condition())
    g.line(f"while {flag.code}:")
    with g.loop([*carry, _scalar(flag)]):
        new = restate(g, bj.jaxpr, [g.array(c) for c in bj.consts], [*bconsts, *carry])
        assign(g, carry, new)
        assign(g, [_scalar(flag)], [_scalar(condition())])
    return carry


#: a scan is unrolled up to this many equations in all (a loop with per-iteration outputs, or inputs
#: known only when the step runs, must be unrolled: the elements are locals, not arrays)
UNROLL_EQNS = 4000
#: a scan over its carry alone (a ``fori_loop``: the exact flow's elliptic integrals and AGM, 16
#: passes of a few equations each) is a loop from this many equations in all: unrolled, the flow
#: was four times as long, for no known operand to fold (the carry is the state's)
UNROLL_CARRY_EQNS = 64


def _snapshot(g: Source):
    """What :func:`_restore` needs to undo what ``g`` writes after this point."""
    return (len(g.lines), g.n, dict(g.cache), {k: set(v) for k, v in g.uses.items()}, dict(g.known), len(g.lits),
            g.elsewhere, dict(g.outlined), None if g.functions is None else len(g.functions))


def _restore(g: Source, saved) -> None:
    del g.lines[saved[0]:], g.lits[saved[5]:]
    g.n, g.cache, g.uses, g.known, g.elsewhere, g.outlined = saved[1:5] + saved[6:8]
    if g.functions is not None:
        del g.functions[saved[8]:]


def scan_loop(g: Source, p, ins: list) -> list:
    """``lax.scan``: unrolled where it writes per-iteration slices, reads slices known only when the
    step runs, or is short; else a ``for`` loop over the carry (known slices picked by the pass). A loop
    whose body needs a value known that the loop leaves unknown (a slice or the pass's count converted
    to an index) is undone and unrolled."""
    jaxpr = p["jaxpr"]
    length, n_consts, n_carry = int(p["length"]), int(p["num_consts"]), int(p["num_carry"])
    consts, init, xs = ins[:n_consts], ins[n_consts:n_consts + n_carry], ins[n_consts + n_carry:]
    body_consts = [g.array(c) for c in jaxpr.consts]
    n_ys = len(jaxpr.jaxpr.outvars) - n_carry
    unrolled = length * len(jaxpr.jaxpr.eqns)
    looped = not n_ys and (unrolled > UNROLL_EQNS if xs else unrolled > UNROLL_CARRY_EQNS and length > 1)
    if looped and all(_known(x) and x.flat[0].kind == "f" for x in xs if x.size):
        # (known slices, a composition's coefficients: each picked by the pass's index)
        saved = _snapshot(g)
        try:
            carry, k = _carry(g, init), f"_k{g.n}"
            g.line(f"for {k} in range({length}):")
            with g.loop(carry):
                sliced = []
                if xs:
                    at = g.emit(f"(int({length - 1}) - {k})", "i") if p.get("reverse") else Element(k, "i")
                    sliced = [pick(g, at, [x[j] for j in range(length)]) for x in xs]
                assign(g, carry, restate(g, jaxpr.jaxpr, body_consts, [*consts, *carry, *sliced]))
            return carry
        except Unsupported:
            _restore(g, saved)
    carry, ys = list(init), [None] * length
    # (a reversed scan reads xs and writes ys from the last slice; the loop below never sees k)
    for k in (reversed(range(length)) if p.get("reverse") else range(length)):
        out = restate(g, jaxpr.jaxpr, body_consts, [*consts, *carry, *[x[k] for x in xs]])
        carry, ys[k] = out[:n_carry], out[n_carry:]
    stacked = [np.stack([y[j] for y in ys]) if ys else np.empty((0,), dtype=object) for j in range(n_ys)]
    return [*carry, *stacked]


_LAYOUT = {"broadcast_in_dim", "reshape", "squeeze", "expand_dims", "transpose", "rev", "slice", "concatenate",
           "stack", "split", "unstack", "iota", "copy", "copy_p", "stop_gradient", "optimization_barrier"}


def fold(g: Source, eqn, ins: list):
    """The outputs of an equation whose inputs are all known constants, computed now (as literals), or
    None where it is not to be folded."""
    import jax

    if eqn.primitive.name in _LAYOUT or not eqn.outvars:
        return None  # (moving known elements costs nothing; no program is run for it)
    if any(hasattr(v, "jaxpr") or hasattr(v, "eqns") for v in eqn.params.values()):
        return None
    if not all(_known(x) for x in ins):
        return None
    vals = [_values(x, v.aval.dtype) for x, v in zip(ins, eqn.invars)]
    try:
        with jax.ensure_compile_time_eval():
            out = eqn.primitive.bind(*vals, **eqn.params)
    except Exception:  # noqa: BLE001 - not foldable here: restated as usual
        return None
    outs = out if eqn.primitive.multiple_results else [out]
    return [g.array(np.asarray(o), kind_of(v.aval.dtype)) for o, v in zip(outs, eqn.outvars)]


def pad(x: np.ndarray, value, config) -> np.ndarray:
    """``lax.pad``: ``x`` with ``interior`` copies of ``value`` between its elements and ``lo``/``hi``
    copies before and after them on each axis (negative: that many cut off)."""
    fill = np.asarray(value).reshape(())[()]
    for axis, (lo, hi, interior) in enumerate(config):
        n = x.shape[axis]
        size = n + max(n - 1, 0) * interior
        shape = list(x.shape)
        shape[axis] = size
        out = np.full(shape, fill, dtype=object)
        idx = [slice(None)] * x.ndim
        idx[axis] = slice(0, size, interior + 1)
        out[tuple(idx)] = x
        before = [fill] * max(lo, 0)
        after = [fill] * max(hi, 0)
        out = np.moveaxis(out, axis, 0)
        rows = [np.full(out.shape[1:], fill, dtype=object) for _ in before] + list(out) + \
            [np.full(out.shape[1:], fill, dtype=object) for _ in after]
        rows = rows[max(-lo, 0):len(rows) - max(-hi, 0)]
        x = np.moveaxis(np.stack(rows) if rows else np.empty((0, *out.shape[1:]), dtype=object), 0, axis)
    return x
