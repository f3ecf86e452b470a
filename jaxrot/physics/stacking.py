"""Problems stacked along a batch axis: one run of many bodies that differ in their inertia, torque
parameters or initial state."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from .problems import Problem

__all__ = ["stack_problems"]


def stack_problems(problems: list[Problem]) -> Problem:
    """Stack problems with the same kind of torque (e.g. different J, torque parameters or initial
    states) along a batch axis. The span, name and description are not per body: the stack takes
    the longest span and joins the names."""
    if not problems:
        raise ValueError("stack_problems needs at least one problem")
    if isinstance(problems[0], Problem):
        first = problems[0]
        t_end = max(q.t_end for q in problems)
        name = "+".join(dict.fromkeys(q.name for q in problems))
        problems = [Problem(q.body, q.torque, q.state0, t_end, name, first.description) for q in problems]
    try:
        return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *problems)
    except ValueError as e:
        raise ValueError(f"stack_problems needs problems of the same structure: {_first_difference(problems) or e}") \
            from None


def _static(obj) -> dict:
    """The static (non-array) fields of a dataclass such as an equinox module, by name."""
    if not dataclasses.is_dataclass(obj):
        return {}
    return {f.name: getattr(obj, f.name, None) for f in dataclasses.fields(obj) if f.metadata.get("static")}


def _first_difference(problems) -> str | None:
    """Where the first problem that cannot be stacked with problem 0 differs from it: the part (body,
    torque, state) and its kind or static field, in words; None where that is not found."""
    first = problems[0]
    for k, q in enumerate(problems[1:], 1):
        for part in ("body", "torque", "state0"):
            a, b = getattr(first, part, None), getattr(q, part, None)
            if jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b):
                continue
            if type(a) is not type(b):
                return f"problem {k}'s {part} is a {type(b).__name__}, problem 0's a {type(a).__name__}"
            sa, sb = _static(a), _static(b)
            for name in sa:
                if sa[name] != sb.get(name):
                    return f"problem {k}'s {part} has {name}={sb.get(name)!r}, problem 0's {name}={sa[name]!r}"
            return f"problem {k}'s {part} differs from problem 0's in its structure"
    return None
