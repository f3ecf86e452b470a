"""The McLachlan-Reich splittings ``split2_abc`` and ``split4_abc`` restated as Warp functions (see
:mod:`jaxrot.integrators.splitting`): a step is a fixed sequence of exact flows about body axes,

    theta = tau Pi_k / J_k,   columns (i, j) of R and components (i, j) of Pi turned by theta,

with ``(i, j)`` the axes after ``k`` cyclically and the sequence (axis, tau as a sum of multiples
of h, summed in the same order) taken from ``strang_flows``. Torque-free; no memory.
"""

import functools

from ..integrators import get as get_method
from ..integrators.splitting import strang_flows
from ._common import so3_funcs, warp

#: the registered splittings a kernel restates (their ``_ep`` variants: :mod:`.energy_projection`)
NAMES = tuple(f"split{o}_{a}" for o in (2, 4) for a in ("123", "132", "213", "231", "312", "321"))


class _Symbolic:
    """A step size ``h`` that records the multiples of it ``strang_flows`` adds up."""

    def __init__(self, terms=()):
        self.terms = tuple(terms)

    def __rmul__(self, c):
        assert not self.terms
        return _Symbolic(((float(c), 1),))

    def __add__(self, other):
        return _Symbolic(self.terms + other.terms)


def flow_table(name: str) -> list[tuple[int, tuple[float, ...]]]:
    """``[(axis 0-2, (c1, c2, ...)), ...]``: flow ``f`` turns about ``axis`` for ``c1 h + c2 h + ...``."""
    m = get_method(name)
    flows = strang_flows(m.axes, _Symbolic(), m.fractions)
    return [(k, tuple(c for c, _ in tau.terms)) for k, tau in flows]


@functools.lru_cache(maxsize=None)
def make_split(S, name: str, torque: str, K: int):
    """``(init, step)`` Warp functions of a splitting (torque-free)."""
    wp = warp()
    c = so3_funcs(S)
    V, M = c.V, c.M
    table = flow_table(name)
    nf = len(table)
    VF = wp.types.vector(nf, S)
    VI = wp.types.vector(nf, wp.int32)
    axes = VI(*[k for k, _ in table])
    # every tau is one or two multiples of h (merged flows about the same axis)
    assert all(len(cs) in (1, 2) for _, cs in table)
    c1 = VF(*[S(cs[0]) for _, cs in table])
    c2 = VF(*[S(cs[1]) if len(cs) == 2 else S(0.0) for _, cs in table])
    two = VI(*[1 if len(cs) == 2 else 0 for _, cs in table])

    @wp.func
    def init(R: M, Pi: V, J: V, P: wp.array(dtype=S), h: S):
        return V(S(0.0), S(0.0), S(0.0))

    @wp.func
    def step(R: M, Pi: V, A: V, t: S, h: S, J: V, P: wp.array(dtype=S)):
        Rn = R
        p = Pi
        for f in range(nf):
            k = wp.static(axes)[f]
            tau = wp.static(c1)[f] * h
            if wp.static(two)[f] == 1:
                tau = tau + wp.static(c2)[f] * h
            i = (k + 1) % 3
            j = (k + 2) % 3
            theta = tau * p[k] / J[k]
            cs = wp.cos(theta)
            sn = wp.sin(theta)
            for r in range(3):
                a = Rn[r, i]
                b = Rn[r, j]
                Rn[r, i] = cs * a + sn * b
                Rn[r, j] = cs * b - sn * a
            pa = p[i]
            pb = p[j]
            p[i] = cs * pa + sn * pb
            p[j] = cs * pb - sn * pa
        return Rn, p, A

    return init, step
