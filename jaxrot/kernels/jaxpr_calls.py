"""A long called function (a ``jax.jit`` call in the jaxpr, e.g. the exact free flow) restated once as a
Warp function of its own and called, instead of written out again at every call.

A splitting method applies the exact flow two to seventeen times per step; written out in place, each
flow's elliptic functions and rotations are thousands of lines again, and the step passes the
restatement's length limit (:data:`~jaxrot.kernels.jaxpr_warp.MAX_LINES`). Here the callee's jaxpr is
restated once per pattern of known inputs (known inputs are folded into it as in place; the others
are its parameters), and each call is one line ``v7, v8, ... = fn0(v1, v2, ...)``. Only a
:class:`~jaxrot.kernels.jaxpr_warp.Source` that collects functions (``functions`` a list: the
method's step and attempt) does this, and only for callees of at least :data:`OUTLINE_EQUATIONS`
equations applied more than once: SO(3)'s short coefficient functions, and a flow applied once per
step (``exact_free``), stay in place, where their known operands fold."""

import functools
import math
import re

import numpy as np

from .jaxpr_warp import Element, Source, restate

#: a called jaxpr of at least this many equations (counting those of its loops and branches) is
#: restated as a function of its own (SO(3)'s traced-once functions have at most a few hundred, kept in
#: place where their known operands fold; the exact flow about 1 800)
OUTLINE_EQUATIONS = 1000

_TYPE = {"f": "S", "i": "int", "b": "bool"}


def _inner(eqn):
    """The jaxprs in ``eqn``'s parameters (a call's, a loop's body and condition, a cond's branches)."""
    for v in eqn.params.values():
        for sub in (v if isinstance(v, (tuple, list)) else (v,)):
            inner = getattr(sub, "jaxpr", sub)
            if hasattr(inner, "eqns"):
                yield inner


def size(jaxpr) -> int:
    """The equations of ``jaxpr`` and of the jaxprs in its equations' parameters."""
    return sum(1 + sum(size(inner) for inner in _inner(eqn)) for eqn in jaxpr.eqns)


def calls(jaxpr, times: int = 1, out=None) -> dict:
    """``id -> [applications, equations]`` of each jaxpr called in ``jaxpr`` (:func:`size`): a loop's
    body counts at each pass of a scan (once for a while loop), every branch of a cond counts."""
    out = {} if out is None else out
    for eqn in jaxpr.eqns:
        n = times * (int(eqn.params["length"]) if eqn.primitive.name == "scan" else 1)
        for inner in _inner(eqn):
            if eqn.primitive.name in ("pjit", "jit"):
                out.setdefault(id(inner), [0, size(inner)])[0] += n
            calls(inner, n, out)
    return out


def outlines(g: Source, jaxpr, consts, ins) -> bool:
    """Whether a call of ``jaxpr`` on ``ins`` is restated as a function of its own in ``g``: a long one
    applied more than once (``g.called``, :func:`calls`; once, it is written in place, where it folds
    with what surrounds it) to inputs not all known."""
    import jax

    n, eqns = g.called.get(id(jaxpr), (0, 0))
    return (g.functions is not None and n > 1 and eqns >= OUTLINE_EQUATIONS
            and not any(isinstance(c, jax.core.Tracer) for c in consts)
            and any(e.value is None for x in ins for e in np.asarray(x, dtype=object).reshape(-1)))


def call(g: Source, jaxpr, consts, ins: list) -> list:
    """The outputs of a call of ``jaxpr`` (with ``consts``) on ``ins``: one line calling its function,
    written into ``g.functions`` at its first call with this pattern of known inputs."""
    flat = [e for x in ins for e in np.asarray(x, dtype=object).reshape(-1)]
    first: dict = {}  # an input's code -> its parameter (one parameter for an input passed twice)
    pattern = []  # (a literal's value by its exact text: -0.0 is not 0.0, a NaN matches itself)
    for e in flat:
        pattern.append(("lit", e.kind, float(e.value).hex() if e.kind == "f" else e.value) if e.value is not None
                       else ("arg", e.kind, first.setdefault(e.code, len(first))))
    key = (id(jaxpr), tuple(pattern))
    hit = g.outlined.get(key)
    if hit is None:
        hit = g.outlined[key] = _define(g, jaxpr, consts, ins, flat, pattern) + (jaxpr,)
    name, plan = hit[0], hit[1]
    unknown = _unknown(flat)
    returned = [k for k, (how, _) in enumerate(plan) if how == "ret"]
    locals_ = [Element(f"v{g.n + j}", plan[k][1]) for j, k in enumerate(returned)]
    g.n += len(locals_)
    if locals_:
        g.line(f"{', '.join(e.code for e in locals_)} = {name}({', '.join(e.code for e in unknown)})")
    got = iter(locals_)
    outs = [next(got) if how == "ret" else (what if how == "lit" else unknown[what]) for how, what in plan]
    shaped, k = [], 0
    for v in jaxpr.outvars:
        n = int(np.prod(v.aval.shape, dtype=int))
        arr = np.empty(n, dtype=object)
        arr[:] = outs[k:k + n]
        shaped.append(arr.reshape(tuple(v.aval.shape)))
        k += n
    return shaped


def _unknown(flat) -> list:
    """The call's inputs not known in the source, each once, in the order of the function's parameters."""
    return list({e.code: e for e in flat if e.value is None}.values())


def _define(g: Source, jaxpr, consts, ins, flat, pattern):
    """Write the function of ``jaxpr`` for this pattern of known inputs into ``g.functions``:
    ``(name, plan)``, ``plan`` saying of each output element whether the function returns it
    (``("ret", kind)``), it is known (``("lit", element)``) or it is parameter ``j`` (``("arg", j)``)."""
    params = {}
    args, it = [], iter(zip(flat, pattern))
    for x in ins:
        arr = np.empty(np.shape(x), dtype=object)
        for idx in np.ndindex(arr.shape):
            e, (_, kind, p) = next(it)
            arr[idx] = e if e.value is not None else params.setdefault(p, Element(f"a{p}", kind))
        args.append(arr)
    saved = (g.lines, g.cache, g.uses, g.known, g.scope, g.depth)
    g.lines, g.cache, g.uses, g.known, g.scope, g.depth = [], {}, {}, {}, (), 1
    try:
        outs = restate(g, jaxpr, [g.array(c) for c in consts], args)
        body = g.lines
    finally:
        g.lines, g.cache, g.uses, g.known, g.scope, g.depth = saved
    names = {e.code: j for j, e in params.items()}
    plan, rets = [], []
    for e in (e for o in outs for e in np.asarray(o, dtype=object).reshape(-1)):
        if e.value is not None:
            plan.append(("lit", e))
        elif e.code in names:
            plan.append(("arg", names[e.code]))
        else:
            plan.append(("ret", e.kind))
            rets.append(e.code)
    name = f"fn{len(g.functions)}"
    if rets:  # (a function whose outputs are all known or its inputs is not written: nothing calls it)
        g.elsewhere += len(body)
        header = ", ".join(f"a{j}: {_TYPE[e.kind]}" for j, e in sorted(params.items()))
        g.functions.append(f"def {name}({header}):\n" + "".join(x + "\n" for x in body)
                           + f"    return {', '.join(rets)}\n")
    return name, plan


_CALLED = re.compile(r"^def (fn\d+)\(", re.M)
_LOOP = re.compile(r"\s*for \w+ in range\((\d+)\):")


#: a loop of a known count whose body is at most this many lines compiles as if unrolled (LLVM unrolls
#: the exact flow's loops, 8-300 lines a pass: they took as long to compile as written out); a longer
#: body, a composition's stage (3 000-5 000 lines), compiles once
SHORT_LOOP_LINES = 1000


@functools.lru_cache(maxsize=256)
def counted_lines(src: str) -> tuple:
    """``(run, compiled)``: a source's lines, ``run`` with one in a ``for`` loop of a known count at each
    pass and outside the called functions (``fnK``) with a function's lines at each call; ``compiled``
    with each function's once and a line at each pass of the loops around it whose bodies are short
    (:data:`SHORT_LOOP_LINES`). Kept per source: the executor's choice asks again at every call."""
    cost, run, compiled = {}, 0.0, 0.0
    for block in re.split(r"\n(?=def )", src.strip()):
        name, lines = block[4:block.index("(")], block.splitlines()[1:]
        depth = [len(line) - len(line.lstrip()) for line in lines]
        n, own, loops = 0.0, 0.0, []  # (indentation, passes, whether its body is short) around the line
        for at, line in enumerate(lines):
            while loops and depth[at] <= loops[-1][0]:
                loops.pop()
            called = sum(c for f, c in cost.items() if f[:2] == "fn" and f"{f}(" in line)
            n += math.prod(m for _, m, _ in loops) * (1 + called)
            own += math.prod(m for _, m, short in loops if short)
            m = _LOOP.match(line)
            if m:
                end = next((k for k in range(at + 1, len(lines)) if depth[k] <= depth[at]), len(lines))
                loops.append((depth[at], int(m.group(1)), end - at - 1 <= SHORT_LOOP_LINES))
        cost[name] = n
        run += 0 if _CALLED.match(block) else n
        compiled += own
    return run, compiled


def function_names(src: str) -> list:
    """The called functions (``fnK``) a generated source defines."""
    return _CALLED.findall(src)
