"""A jaxpr restated as Warp source: one scalar local per array element (see :mod:`.transpile`).

:class:`Source` collects the generated lines and literals; :func:`restate` walks a jaxpr's equations
with every value held as a NumPy object array of :class:`Element` (an expression and its kind), so
that reshapes, slices, transposes and broadcasts move expressions without emitting code, and
element-wise primitives, contractions and reductions emit one line per output element (known operands
folded, :mod:`.jaxpr_algebra`; loops and indexing, :mod:`.jaxpr_control`). A primitive (or a form of
one) without a restatement raises :class:`Unsupported`."""

import contextlib
import dataclasses
import re

import numpy as np

__all__ = ["Unsupported", "Element", "Source", "kind_of", "convert", "restate", "BINARY"]


class Unsupported(Exception):
    """The function uses a primitive (or a form of one) that has no Warp restatement here."""


@dataclasses.dataclass(frozen=True)
class Element:
    """One scalar of the generated code: its expression (a local's name or a literal) and kind
    (``"f"`` floating, ``"b"`` bool, ``"i"`` integer); ``value`` for a known constant."""

    code: str
    kind: str
    value: object = None


_NAME = re.compile(r"\bv\d+\b")


def kind_of(dtype) -> str:
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise Unsupported(f"values of dtype {dtype}") from None
    if dt == np.bool_:
        return "b"
    if np.issubdtype(dt, np.integer):
        return "i"
    if np.issubdtype(dt, np.floating):
        return "f"
    raise Unsupported(f"values of dtype {dt}")


#: the longest function restated (lines): writing out, compiling and checking a longer one takes minutes
#: (docs/kernels.md, 'What is refused')
MAX_LINES = 50_000


class Source:
    """The generated source: one line per new scalar, and the literals it refers to."""

    def __init__(self, S64: bool = True):
        self.S64 = S64  # the run's scalar type is float64 (float32 otherwise)
        self.lines: list[str] = []
        self.lits: list[float] = []
        self.n = 0
        self.depth = 1  # the indentation of the lines emitted (loops nest it)
        self.cache: dict = {}  # (expression, kind) -> the local holding it
        # a local's name -> the cache's keys whose expression names it: a loop or block looks up those of
        # its carry to forget them, instead of reading every expression written so far
        self.uses: dict = {}
        self.known: dict = {}  # a bool local's code -> its value inside an if/else block on it
        self.scope: tuple = ()  # the blocks (if/else, loop bodies) the next line is written in
        self._blocks = 0
        self.externals: dict = {}  # primitive name -> (g, eqn, ins) -> outputs, for calls the caller writes
        # long called functions restated once each (:mod:`.jaxpr_calls`): their sources (None: written in
        # place), by callee and known inputs, and the lines they hold
        self.functions: list | None = None
        self.outlined: dict = {}
        self.called: dict = {}  # a callee's id -> its applications and length (:func:`.jaxpr_calls.calls`)
        self.elsewhere = 0

    def emit(self, expr: str, kind: str) -> Element:
        """A new local computing ``expr``, or the local that already holds the same expression
        (common subexpressions: a jaxpr repeats what XLA would merge, e.g. ``R^T L`` in each rate)."""
        hit = self.cache.get((expr, kind))
        if hit is not None:
            return hit
        name = f"v{self.n}"
        self.n += 1
        self.line(f"{name} = {expr}")
        el = Element(name, kind)
        self.cache[(expr, kind)] = el
        for used in set(_NAME.findall(expr)):
            self.uses.setdefault(used, set()).add((expr, kind))
        return el

    @contextlib.contextmanager
    def loop(self, carry: list):
        """The body of a loop over ``carry`` (locals assigned again in it): expressions of the carry
        computed before it are not reused inside or after it, nor those computed inside it after it."""
        names = {e.code for x in carry for e in np.asarray(x).reshape(-1)}
        outer = dict(self.cache)
        for name in names:
            for key in self.uses.get(name, ()):
                outer.pop(key, None)
        self.cache = dict(outer)
        self.depth += 1
        self._blocks += 1
        scope, self.scope = self.scope, self.scope + (self._blocks,)
        try:
            yield
        finally:
            self.depth -= 1
            self.cache = outer
            self.scope = scope

    def line(self, text: str):
        if len(self.lines) + self.elsewhere >= MAX_LINES:
            raise Unsupported(f"a function longer than {MAX_LINES} lines once restated (writing it out, "
                              "compiling and checking it would take minutes)")
        self.lines.append("    " * self.depth + text)

    def variable(self, x: Element) -> Element:
        """A fresh local holding ``x`` (a loop's carry: assigned again inside the loop)."""
        name = f"v{self.n}"
        self.n += 1
        init = {"f": f"S({x.code})" if x.value is not None else x.code,
                "i": f"int({x.code})" if x.value is not None else x.code,
                "b": f"bool({x.code})" if x.value is not None else x.code}[x.kind]
        self.line(f"{name} = {init}")
        return Element(name, x.kind)

    def literal(self, value, kind: str) -> Element:
        if kind == "b":
            return Element("True" if bool(value) else "False", "b", bool(value))
        if kind == "i":
            v = int(value)
            return Element(f"int({v})", "i", v)
        self.lits.append(float(value))
        # a literal rounded to S at compile time (exact in float64: LIT holds Python floats)
        return Element(f"S(wp.static(LIT[{len(self.lits) - 1}]))", "f", float(value))

    def array(self, value, kind: str | None = None) -> np.ndarray:
        a = np.asarray(value)
        k = kind or kind_of(a.dtype)
        out = np.empty(a.shape, dtype=object)
        for idx in np.ndindex(a.shape):
            out[idx] = self.literal(a[idx], k)
        return out


def elementwise(fn, *arrays):
    """``fn`` applied element-wise with NumPy broadcasting to object arrays of :class:`Element`."""
    arrays = np.broadcast_arrays(*[np.asarray(a, dtype=object) for a in arrays])
    out = np.empty(arrays[0].shape, dtype=object)
    for idx in np.ndindex(out.shape):
        out[idx] = fn(*[a[idx] for a in arrays])
    return out


# element-wise primitives: Warp expression templates (kind of the result: the operands' unless stated)
BINARY = {"add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "div": "({0} / {1})",
          "atan2": "wp.atan2({0}, {1})", "rem": "wp.mod({0}, {1})"}
_UNARY = {"neg": "(-{0})", "abs": "wp.abs({0})", "sin": "wp.sin({0})",
          "cos": "wp.cos({0})", "tan": "wp.tan({0})", "asin": "wp.asin({0})", "acos": "wp.acos({0})",
          "atan": "wp.atan({0})", "sinh": "wp.sinh({0})", "cosh": "wp.cosh({0})", "tanh": "wp.tanh({0})",
          "exp": "wp.exp({0})", "log": "wp.log({0})", "sqrt": "wp.sqrt({0})", "cbrt": "wp.cbrt({0})",
          "rsqrt": "(S(1.0) / wp.sqrt({0}))", "floor": "wp.floor({0})", "ceil": "wp.ceil({0})",
          "square": "({0} * {0})", "logistic": "(S(1.0) / (S(1.0) + wp.exp(-{0})))",
          "exp2": "wp.exp(S(wp.static(math.log(2.0))) * {0})", "erf": "wp.erf({0})", "is_finite": "wp.isfinite({0})"}
_COMPARE = {"gt": ">", "lt": "<", "ge": ">=", "le": "<=", "eq": "==", "ne": "!="}
_BOOL = {"and": "({0} and {1})", "or": "({0} or {1})"}
_INLINE = {"pjit": "jaxpr", "jit": "jaxpr", "closed_call": "call_jaxpr", "core_call": "call_jaxpr",
           "custom_jvp_call": "call_jaxpr", "custom_vjp_call": "call_jaxpr",
           "custom_vjp_call_jaxpr": "fun_jaxpr", "remat": "jaxpr", "remat2": "jaxpr", "checkpoint": "jaxpr"}
_IDENTITY = {"copy", "copy_p", "optimization_barrier", "stop_gradient"}


def convert(g: Source, x: Element, kind: str, dtype=None) -> Element:
    if x.kind == kind == "f" and dtype is not None and g.S64 and np.dtype(dtype) == np.float32:
        return g.emit(f"S(wp.float32({x.code}))", "f")  # rounded to float32 inside a float64 run
    if x.kind == kind:
        return x
    if x.value is not None:
        return g.literal(x.value, kind)
    if kind == "f":
        return g.emit(f"wp.where({x.code}, S(1.0), S(0.0))" if x.kind == "b" else f"S({x.code})", "f")
    if kind == "b":
        return g.emit(f"({x.code} != {'S(0.0)' if x.kind == 'f' else 'int(0)'})", "b")
    if x.kind == "b":
        return g.emit(f"wp.where({x.code}, int(1), int(0))", "i")
    raise Unsupported("a conversion of a floating-point value to an integer")


def _select(g: Source, which: Element, cases, kind: str) -> Element:
    """``cases[which]`` (lax's ``select_n``): a bool picks the second case when true, an integer its
    case by index."""
    if len(cases) == 1:
        return cases[0]
    if which.value is not None or which.code in g.known:  # (known, or inside a block on the same predicate)
        k = int(which.value if which.value is not None else g.known[which.code])
        return cases[min(max(k, 0), len(cases) - 1)]
    if which.kind == "b":
        return g.emit(f"wp.where({which.code}, {cases[1].code}, {cases[0].code})", kind)
    acc = cases[-1]
    for k in range(len(cases) - 2, -1, -1):
        acc = g.emit(f"wp.where({which.code} == int({k}), {cases[k].code}, {acc.code})", kind)
    return acc


def pick(g: Source, which: Element, cases: list) -> np.ndarray:
    """``cases[which]`` for arrays of the same shape: more than two cases by an integer known only when
    the step runs are one ``if``/``elif`` chain for all the elements (a branch the processor predicts,
    where nested selects would each wait for the index), else selects."""
    if len(cases) <= 2 or which.kind != "i" or which.value is not None or which.code in g.known:
        return elementwise(lambda *cs: _select(g, which, cs, cs[0].kind), *cases)
    from .jaxpr_control import blocks

    heads = [f"{'if' if k == 0 else 'elif'} {which.code} == int({k}):" for k in range(len(cases) - 1)]
    return blocks(g, heads, [elementwise(g.variable, cases[-1])], lambda k: [cases[k]])[0]


def equation(g: Source, eqn, ins: list) -> list:
    """The outputs (object arrays) of one equation from its inputs."""
    name = eqn.primitive.name
    p = eqn.params
    outs = eqn.outvars
    kind = kind_of(outs[0].aval.dtype) if outs else "f"
    if name in g.externals:  # a call of a Warp function the caller provides (e.g. the method's own step)
        return g.externals[name](g, eqn, ins)
    if name in _INLINE:
        sub = p.get(_INLINE[name])
        if sub is None:
            raise Unsupported(f"the call primitive {name!r} without a jaxpr")
        jaxpr, consts = (sub.jaxpr, sub.consts) if hasattr(sub, "consts") else (sub, ())
        if name in ("pjit", "jit") and outlines(g, jaxpr, consts, ins):
            return call(g, jaxpr, consts, ins)
        return restate(g, jaxpr, [g.array(c) for c in consts], ins)
    if name in _IDENTITY:
        return list(ins)
    if name == "cond":
        return cond(g, p, ins)
    if name == "sign":  # (wp.sign(0) is 1; lax.sign is 0 at 0, -0 at -0 and NaN at NaN: x * 0 there)
        z, o = ("S(0.0)", "S(1.0)") if kind == "f" else ("int(0)", "int(1)")
        rest = f"({{0}} * {z})" if kind == "f" else z
        return [elementwise(lambda a: g.emit(f"wp.where({a.code} > {z}, {o}, wp.where({a.code} < {z}, -{o}, "
                                      f"{rest.format(a.code)}))", kind), ins[0])]
    if name in ("max", "min"):
        return [elementwise(lambda a, b: extremum(g, a, b, name, kind), *ins)]
    if name == "pow":  # (an integer exponent: converted, as wp.pow takes two floats)
        if kind != "f":
            raise Unsupported("pow of integers")
        return [elementwise(lambda a, b: g.emit(f"wp.pow({a.code}, {convert(g, b, 'f').code})", "f"), *ins)]
    if name == "log1p":  # accurate for small x (Kahan: log(u) x / (u - 1), u = 1 + x)
        def log1p(a):
            u = g.emit(f"(S(1.0) + {a.code})", "f")
            return g.emit(f"wp.where({u.code} == S(1.0), {a.code}, wp.log({u.code}) * {a.code} / ({u.code} - S(1.0)))",
                          "f")
        return [elementwise(log1p, ins[0])]
    if name == "expm1":  # accurate for small x (Kahan: (u - 1) x / log u, u = exp x)
        def expm1(a):
            u = g.emit(f"wp.exp({a.code})", "f")
            return g.emit(f"wp.where({u.code} == S(1.0), {a.code}, wp.where({u.code} - S(1.0) == S(-1.0), S(-1.0), "
                          f"({u.code} - S(1.0)) * {a.code} / wp.log({u.code})))", "f")
        return [elementwise(expm1, ins[0])]
    if name in BINARY:
        t = BINARY[name]
        if name in ("add", "mul") and kind == "b":
            t = "({0} or {1})" if name == "add" else "({0} and {1})"
        # (a + b and b + a are the same number: one local for both)
        swap = name in ("add", "mul")
        return [elementwise(lambda a, b: binary(g, name, a, b, kind) or (swap and g.cache.get((t.format(b.code, a.code), kind)))
                            or g.emit(t.format(a.code, b.code), kind), *ins)]
    if name in _UNARY:
        if kind != "f" and name not in ("neg", "abs", "is_finite"):
            raise Unsupported(f"{name} of a {kind!r} value")
        k = "b" if name == "is_finite" else kind
        t = _UNARY[name]
        return [elementwise(lambda a: unary(g, name, a, k) or g.emit(t.format(a.code), k), ins[0])]
    if name in _COMPARE:
        op = _COMPARE[name]
        return [elementwise(lambda a, b: g.emit(f"({a.code} {op} {b.code})", "b"), *ins)]
    if name in _BOOL:
        if kind != "b":
            raise Unsupported(f"bitwise {name} of integers")
        return [elementwise(lambda a, b: g.emit(_BOOL[name].format(a.code, b.code), "b"), *ins)]
    if name == "not":
        if kind != "b":
            raise Unsupported("bitwise not of integers")
        return [elementwise(lambda a: g.emit(f"(not {a.code})", "b"), ins[0])]
    if name == "integer_pow":
        return [elementwise(lambda a: integer_pow(g, a, int(p["y"])), ins[0])]
    if name == "select_n":
        return [elementwise(lambda w, *cs: _select(g, w, cs, kind), ins[0], *ins[1:])]
    if name == "clamp":
        return [elementwise(lambda lo, x, hi: extremum(g, extremum(g, x, lo, "max", kind), hi, "min", kind), *ins)]
    if name == "convert_element_type":
        new = np.dtype(p["new_dtype"])
        if kind == "f" and new.itemsize < 4:
            raise Unsupported(f"a conversion to {new}")
        return [elementwise(lambda a: convert(g, a, kind, new), ins[0])]
    if name == "broadcast_in_dim":
        x = ins[0]
        shape = tuple(p["shape"])
        dims = tuple(p["broadcast_dimensions"])
        expanded = [1] * len(shape)
        for d, n in zip(dims, x.shape):
            expanded[d] = n
        return [np.broadcast_to(np.reshape(x, expanded), shape).copy()]
    if name == "reshape":
        if p.get("dimensions") not in (None, ()):
            raise Unsupported("reshape with dimensions")
        return [np.reshape(ins[0], tuple(p["new_sizes"]))]
    if name == "squeeze":
        return [np.squeeze(ins[0], axis=tuple(p["dimensions"]))]
    if name == "expand_dims":
        return [np.expand_dims(ins[0], tuple(p["dimensions"]))]
    if name == "transpose":
        return [np.transpose(ins[0], tuple(p["permutation"]))]
    if name == "rev":
        return [np.flip(ins[0], axis=tuple(p["dimensions"]))]
    if name == "slice":
        strides = p.get("strides") or (1,) * ins[0].ndim
        sl = tuple(slice(s, e, st) for s, e, st in zip(p["start_indices"], p["limit_indices"], strides))
        return [ins[0][sl]]
    if name == "concatenate":
        return [np.concatenate(ins, axis=int(p["dimension"]))]
    if name == "stack":
        return [np.stack(ins, axis=int(p["axis"]))]
    if name in ("argmax", "argmin"):
        return [arg_extremum(g, ins[0], p["axes"], ">" if name == "argmax" else "<")]
    if name == "split":
        cuts = np.cumsum(p["sizes"])[:-1]
        return list(np.split(ins[0], cuts, axis=int(p["axis"])))
    if name == "dynamic_slice":
        x, starts = ins[0], ins[1:]
        sizes = tuple(p["slice_sizes"])
        out = x
        for d, (s, n) in enumerate(zip(starts, sizes)):
            s = np.asarray(s).reshape(-1)[0]
            last = x.shape[d] - n
            if s.value is not None:
                s0 = min(max(int(s.value), 0), last)  # JAX clamps
                out = np.take(out, range(s0, s0 + n), axis=d)
                continue
            # a start known only when the step runs: every clamped start's slice, selected by it
            c = g.emit(f"wp.min(wp.max({s.code}, int(0)), int({last}))", "i")
            out = pick(g, c, [np.take(out, range(k, k + n), axis=d) for k in range(last + 1)])
        return [out]
    if name == "iota":
        shape, dim = tuple(p["shape"]), int(p["dimension"])
        vals = np.broadcast_to(np.arange(shape[dim]).reshape([-1 if d == dim else 1 for d in range(len(shape))]),
                               shape)
        return [g.array(vals, kind)]
    if name == "dot_general":
        return [dot_general(g, ins[0], ins[1], p, kind)]
    if name in ("reduce_sum", "reduce_max", "reduce_min", "reduce_prod"):
        op = {"reduce_sum": "sum", "reduce_max": "max", "reduce_min": "min", "reduce_prod": "prod"}[name]
        return [reduce(g, ins[0], p["axes"], op, kind)]
    if name == "add_any":  # (a linearisation's sum of cotangents)
        return [elementwise(lambda a, b: binary(g, "add", a, b, kind) or g.emit(f"({a.code} + {b.code})", kind), *ins)]
    if name in ("reduce_and", "reduce_or"):
        op = "and" if name == "reduce_and" else "or"
        return [reduce(g, ins[0], p["axes"], op, "b")]
    if name == "unstack":
        axis = int(p["axis"])
        return [np.take(ins[0], k, axis=axis) for k in range(ins[0].shape[axis])]
    if name == "reduce_precision":
        return [elementwise(lambda a: reduce_precision(g, a, int(p["exponent_bits"]), int(p["mantissa_bits"])), ins[0])]
    if name in ORDERING:  # (sort, svd, and gathers whose indices depend on the state)
        return ORDERING[name](g, eqn, ins)
    if name in ("scatter", "gather"):
        return [by_index(g, eqn, ins)]
    if name == "while":
        return while_loop(g, p, ins)
    if name == "scan":
        return scan_loop(g, p, ins)
    if name == "pad":  # (a slice's transpose, in reverse mode)
        return [pad(ins[0], ins[1], p["padding_config"])]
    raise Unsupported(f"the primitive {name!r}")


def restate(g: Source, jaxpr, consts: list, args: list) -> list:
    """The outputs of ``jaxpr`` (object arrays of :class:`Element`) from its constants and inputs,
    emitting into ``g`` the lines that compute them."""
    env = {}

    def read(v):
        if hasattr(v, "val"):  # a Literal (jax.extend.core.Literal; Vars have no value)
            return g.array(v.val, kind_of(v.aval.dtype))
        return env[v]

    for v, x in zip(jaxpr.constvars, consts):
        env[v] = x
    for v, x in zip(jaxpr.invars, args):
        env[v] = x
    cones, deferred = plan(jaxpr)
    done = {}  # select -> the blocks in which an earlier select's blocks computed it

    def joined(i, outs):
        done[i] = g.scope
        for v, x in zip(jaxpr.eqns[i].outvars, outs):
            env[v] = x

    def ready(i):  # computed where this line can read it: in this block or one around it
        return i in done and g.scope[:len(done[i])] == done[i]

    def run(i):
        eqn = jaxpr.eqns[i]
        if ready(i):
            return
        if i in cones:
            pos, per_case, later = cones[i]
            planned = (pos, per_case, [(s2, jaxpr.eqns[s2], cones[s2][0], cones[s2][1]) for s2 in later if not ready(s2)])
            outs = branches(g, eqn, read, planned, run, joined)
        else:
            ins = [read(v) for v in eqn.invars]
            outs = fold(g, eqn, ins)
            if outs is None:
                outs = equation(g, eqn, ins)
        for v, x in zip(eqn.outvars, outs):
            if tuple(np.shape(x)) != tuple(v.aval.shape):
                raise Unsupported(f"{eqn.primitive.name}: shape {np.shape(x)} != {v.aval.shape}")
            env[v] = x

    for i in range(len(jaxpr.eqns)):
        if i not in deferred:
            run(i)
    return [read(v) for v in jaxpr.outvars]


# (imported last: these modules use this one's names)
from .jaxpr_algebra import arg_extremum, binary, dot_general, extremum, integer_pow, reduce, unary  # noqa: E402
from .jaxpr_branches import branches, plan  # noqa: E402
from .jaxpr_calls import call, outlines  # noqa: E402
from .jaxpr_control import by_index, cond, fold, pad, reduce_precision, scan_loop, while_loop  # noqa: E402
from .jaxpr_ordering import ORDERING  # noqa: E402
