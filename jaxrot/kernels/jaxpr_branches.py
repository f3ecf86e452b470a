"""Branches of a ``select`` computed only where taken (:func:`jaxrot.kernels.jaxpr_warp.restate`).

``jnp.where(small, taylor(x), closed(x))`` computes both sides, as a vectorised XLA program must; a
thread of a kernel need not. :func:`plan` finds, for each ``select_n`` of a jaxpr, the equations whose
results only that case of that select uses (its *exclusive cone*: computed for nothing else, and not
an output); :func:`restate` defers them and, where the select's predicate is one scalar for all its
elements, writes them inside ``if``/``else`` blocks, so that a Rodrigues coefficient's Taylor branch
skips the sine, cosine, square root and division of the closed form. The later selects on the same
predicate whose inputs are already computed are written in the same blocks (a Rodrigues coefficient's
three values and their slopes share one square root and two sines). Where the predicate differs from
element to element, the deferred equations are written before the select as usual.
"""

import heapq
from collections import defaultdict

import numpy as np

from .jaxpr_warp import Source, equation


def select_positions(eqn):
    """``(pred, case 0, case 1)``: the operand positions of a two-case bool select, plain or wrapped in a
    ``jit`` of its own (``jnp.where``'s ``_where``), else None."""
    if eqn.primitive.name == "select_n":
        sel, pos = eqn, (0, 1, 2)
    elif eqn.primitive.name in ("pjit", "jit") and len(eqn.params["jaxpr"].jaxpr.eqns) == 1:
        inner = eqn.params["jaxpr"].jaxpr
        sel = inner.eqns[0]
        if (sel.primitive.name != "select_n" or list(inner.outvars) != list(sel.outvars)
                or any(hasattr(v, "val") or v not in inner.invars for v in sel.invars)):
            return None
        pos = tuple(inner.invars.index(v) for v in sel.invars)
    else:
        return None
    if len(sel.invars) != 3 or sel.invars[0].aval.dtype != bool:
        return None
    return pos


def plan(jaxpr):
    """``(cones, deferred)``: ``cones[i]`` the positions of the select at index ``i``, its case-by-case
    lists of equation indices (increasing) used only by that case, and the later selects on the same
    predicate that its blocks can compute too (:func:`_joined`); ``deferred`` all of those equations and
    the equations whose results nothing uses."""
    eqns = jaxpr.eqns
    producer, uses = {}, defaultdict(list)
    for i, e in enumerate(eqns):
        for v in e.outvars:
            producer[v] = i
        for pos, v in enumerate(e.invars):
            if not hasattr(v, "val"):
                uses[v].append((i, pos))
    outputs = {v for v in jaxpr.outvars if not hasattr(v, "val")}
    # each equation's producers, found once (a long step's jaxpr has thousands of selects to walk back from)
    preds = [[producer[v] for v in e.invars if not hasattr(v, "val") and v in producer] for e in eqns]
    # results nothing uses (a jnp.where's unused third coefficient, ...), consumers first
    dead = set()
    for j in range(len(eqns) - 1, -1, -1):
        if not _effects(eqns[j]) and all(v not in outputs and all(i in dead for i, _ in uses[v])
                                         for v in eqns[j].outvars):
            dead.add(j)
    cones, deferred = {}, set(dead)
    selects = {s: pos for s, e in enumerate(eqns) if s not in dead and (pos := select_positions(e)) is not None}
    # the selects with one predicate share what only their cases use (Rodrigues' S1 and S2 the angle's
    # square root): a case's cone is what only that case of those selects uses, computed again in each
    # block that needs it (once where the case is taken)
    joint = {}
    for s, pos in selects.items():
        pred = eqns[s].invars[pos[0]]
        for c in (1, 2):
            if (pred, c) not in joint:
                group = [(i, q[c]) for i, q in selects.items() if eqns[i].invars[q[0]] is pred]
                joint[pred, c] = _cone(eqns, producer, preds, uses, outputs, set(group) | dead,
                                       [eqns[i].invars[k] for i, k in group])
    for s, pos in selects.items():
        e = eqns[s]
        per_case = [sorted((_reach(producer, preds, [e.invars[pos[c]]]) & joint[e.invars[pos[0]], c]) - dead)
                    for c in (1, 2)]
        if any(per_case):
            cones[s] = (pos, per_case)
            deferred.update(*per_case)
    later = _joined(eqns, producer, cones, deferred)
    # a select inside a case's cone computes its own cases' equations in its own blocks: the outer
    # block leaves them to it (written once, where taken, instead of before it as well)
    nested = {}
    for s, (pos, per_case) in cones.items():
        own = []
        for js in per_case:
            inner = set().union(*(set(cones[t][1][0]) | set(cones[t][1][1]) for t in js if t in cones and t != s))
            own.append([j for j in js if j not in inner])
        nested[s] = (pos, own, later[s])
    return nested, deferred


def _joined(eqns, producer, cones, deferred) -> dict:
    """``s -> [s2, ...]``: the later selects on select ``s``'s predicate whose cases need nothing computed
    after ``s`` but their own cones, so that ``s``'s blocks compute them as well (each select joined to
    the first one that can take it)."""
    later = {s: [] for s in cones}
    taken = set()
    # (which select's case computes an equation: a select is joined only to one written in the same place)
    place = defaultdict(set)
    for x, (_, per_case) in cones.items():
        for c, js in enumerate(per_case):
            for j in js:
                place[j].add((x, c))
    # selects outside every case first, then those inside them: a select's place is counted by the
    # select its enclosing one joined (the inner selects of joined outer ones share their block too)
    depth, leader = {}, {}

    def deep(x):
        if x not in depth:
            depth[x] = 1 + max((deep(y) for y, _ in place[x]), default=-1)
        return depth[x]

    def where(x):
        return {(leader.get(y, y), c) for y, c in place[x]}

    for s in sorted(cones, key=lambda x: (deep(x), x)):
        if s in taken:
            continue
        pred = eqns[s].invars[cones[s][0][0]]
        for s2 in sorted(cones):
            if (s2 <= s or s2 in taken or eqns[s2].invars[cones[s2][0][0]] is not pred
                    or deep(s2) != deep(s) or where(s2) != where(s)):
                continue
            (_, c0, c1), per_case = cones[s2]
            own = set(per_case[0]) | set(per_case[1])
            needs = [v for j in own for v in eqns[j].invars] + [eqns[s2].invars[c0], eqns[s2].invars[c1]]
            if all(hasattr(v, "val") or v not in producer or producer[v] in own
                   or (producer[v] < s and producer[v] not in deferred) for v in needs):
                later[s].append(s2)
                taken.add(s2)
                leader[s2] = s
    return later


def _reach(producer, preds, vars) -> set:
    """Every equation reachable backwards from ``vars`` (``preds[j]``: equation ``j``'s producers)."""
    reach, stack = set(), [producer[v] for v in vars if not hasattr(v, "val") and v in producer]
    while stack:
        j = stack.pop()
        if j in reach:
            continue
        reach.add(j)
        stack.extend(preds[j])
    return reach


def _cone(eqns, producer, preds, uses, outputs, allowed: set, vars) -> set:
    """The equations reachable from ``vars`` whose results only the cone itself and the ``allowed``
    uses (equation indices, or ``(equation, operand position)``) take. Walked consumers first (a
    jaxpr's consumers come after their producers) from the producers of ``vars`` through the cone's
    members only: an equation reached only through one outside the cone has a use outside it (the
    allowed operand positions are those of ``vars``, where the walk starts, and the allowed equations,
    whose results nothing uses, are never reached)."""
    cone, seen = set(), set()
    heap = [-producer[v] for v in vars if not hasattr(v, "val") and v in producer]
    heapq.heapify(heap)
    while heap:
        j = -heapq.heappop(heap)
        if j in seen:
            continue
        seen.add(j)
        e = eqns[j]
        if any(v in outputs for v in e.outvars) or _effects(e):
            continue
        if all(all((i in cone) or i in allowed or (i, pos) in allowed for i, pos in uses[v]) for v in e.outvars):
            cone.add(j)
            for k in preds[j]:
                heapq.heappush(heap, -k)
    return cone


def _effects(eqn) -> bool:
    return bool(getattr(eqn, "effects", None))


def branches(g: Source, eqn, read, planned, run, joined) -> list:
    """A select whose cases' exclusive equations were deferred (:func:`plan`): with one predicate for
    every element, each case's equations written in its own block (only the taken case's where the
    predicate is known), with those of the later selects joined to it, whose results go to
    ``joined(index, outputs)``; else all of them, then the select as usual."""
    (p, c0, c1), cones, later = planned
    pred = np.asarray(read(eqn.invars[p])).reshape(-1)
    one = all(e.code == pred[0].code for e in pred)
    if not one:
        for j in sorted(cones[0] + cones[1]):
            run(j)
        return equation(g, eqn, [read(v) for v in eqn.invars])
    # (index, select equation, its positions, its cones): this select's first
    sels = [(None, eqn, (c0, c1), cones)] + [(s2, e2, pos[1:], cs) for s2, e2, pos, cs in later]
    value = pred[0].value if pred[0].value is not None else g.known.get(pred[0].code)
    if value is not None:  # known (a literal, or inside a block on the same predicate): the other case is never computed
        k = int(bool(value))
        for j in sorted(set().union(*(cs[k] for _, _, _, cs in sels))):
            run(j)
        outs = [np.asarray(read(e.invars[pos[k]])) for _, e, pos, _ in sels]
    else:
        from .jaxpr_control import blocks, zeroed

        def case(j):  # (the first block is the true case's)
            for i in sorted(set().union(*(cs[1 - j] for _, _, _, cs in sels))):
                run(i)
            return [read(e.invars[pos[1 - j]]) for _, e, pos, _ in sels]

        outs = blocks(g, [f"if {pred[0].code}:", "else:"], zeroed(g, [e.outvars[0].aval for _, e, _, _ in sels]),
                      case, known=lambda j: {pred[0].code: j == 0})
    for (s2, _, _, _), out in zip(sels[1:], outs[1:]):
        joined(s2, [out])
    return [outs[0]]
