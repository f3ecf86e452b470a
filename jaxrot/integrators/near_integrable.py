"""Splittings for near-integrable bodies on the exact free flow: Laskar & Robutel's SABA_n and SBAB_n,
and Blanes et al.'s ABA methods of generalised order (:class:`BlanesABA`, below).

A torqued body whose torque is small beside its free rotation (a fast top, a satellite in a weak
gradient) has the Hamiltonian ``H = A + eps B``: ``A`` the free body (flowed exactly by
:func:`jaxrot.exact.free_flow`), ``eps B`` the potential (flowed exactly by a kick of the body
momentum). Laskar & Robutel place the kicks at the nodes of a quadrature rule over the step, with its
weights:

    SABA_n:  drift c_1 h, kick d_1 h, drift c_2 h, ..., kick d_n h, drift c_{n+1} h
             the n kicks at the Gauss-Legendre nodes x_i (kick at time t + x_i h), weights d_i
    SBAB_n:  kick d_0 h, drift, kick d_1 h, ..., drift, kick d_n h
             the n + 1 kicks at the Gauss-Lobatto nodes (0 and 1 among them), weights d_j

(a drift is the exact free flow over the gap between two nodes). Every kick is exact for a torque
from a potential, every drift exact, so the methods are symplectic and symmetric; without torque
they are exact. The error is ``O(eps h^{2n} + eps^2 h^2)``: order 2 for a general torque (the
``order`` the generic tests check), order 2n in h for the terms linear in eps — the leading ones
when ``eps`` is small beside ``h^{2n-2}``. Cost per step: SABA_n n + 1 free flows and n torque
evaluations; SBAB_n n free flows and n torque evaluations (the end kick's torque is the next step's
first). SBAB_1 is ``exact_split`` (Strang), SABA_1 its drift-kick-drift twin.

Coefficients: SABA_2 c_1 = 1/2 - sqrt(3)/6, c_2 = sqrt(3)/3, d_1 = 1/2; SABA_3 c_1 = 1/2 -
sqrt(15)/10, c_2 = sqrt(15)/10, d_1 = 5/18, d_2 = 4/9; SBAB_2 c_2 = 1/2, d_1 = 1/6, d_2 = 2/3 (Simpson);
SBAB_3 c_2 = 1/2 - sqrt(5)/10, c_3 = sqrt(5)/5, d_1 = 1/12, d_2 = 5/12 (as Laskar & Robutel give them);
here computed from the quadrature rules, which gives the same numbers and every n.

For a torque that depends on Pi the kick freezes Pi at its start (still a consistent method, no longer
the exact sub-flow).

Blanes, Casas, Farres, Laskar, Makazaga & Murua choose drifts a_i and kicks b_i free of quadrature
nodes (some drifts negative: an exact free flow backwards) to cancel the eps^2 and eps^3 terms too:
ABA(s, n, m) has the error O(eps h^s + eps^2 h^n + eps^3 h^m), so ``aba864`` (8 free flows, 7 kicks a
step) and ``aba1064`` (9 and 8) are of order 4 for any torque where SABA_n is of order 2.

References: J. Laskar & P. Robutel, High order symplectic integrators for perturbed Hamiltonian
systems, Celest. Mech. Dyn. Astron. 80 (2001) 39-62. S. Blanes, F. Casas, A. Farres, J. Laskar,
J. Makazaga & A. Murua, New families of symplectic splitting methods for numerical integration in
dynamical astronomy, Appl. Numer. Math. 68 (2013) 58-72. The exact free flow: Celledoni, Fasso, Safstrom
& Zanna, SIAM J. Sci. Comput. 30 (2008) 2084.
"""

from __future__ import annotations

import math
from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..geometry.state import State
from ..physics import exact
from ..physics.torques import body_torque
from ._base import AbstractIntegrator
from .stats import StepStats


def gauss_nodes(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The n Gauss-Legendre nodes and weights on [0, 1]."""
    x, w = np.polynomial.legendre.leggauss(n)
    return (x + 1.0) / 2.0, w / 2.0


def lobatto_nodes(m: int) -> tuple[np.ndarray, np.ndarray]:
    """The m Gauss-Lobatto nodes (0 and 1 included) and weights on [0, 1], m >= 2."""
    p = np.polynomial.legendre.Legendre.basis(m - 1)
    interior = np.sort(np.real(p.deriv().roots())) if m > 2 else np.zeros(0)
    x = np.concatenate([[-1.0], interior, [1.0]])
    w = 2.0 / (m * (m - 1) * p(x) ** 2)
    return (x + 1.0) / 2.0, w / 2.0


class LaskarRobutel(AbstractIntegrator):
    """SABA_n (``kind="saba"``, kicks at Gauss nodes) or SBAB_n (``kind="sbab"``, kicks at Lobatto
    nodes) on the exact free flow; see the module docstring."""

    kind: str = eqx.field(static=True, default="saba")
    n: int = eqx.field(static=True, default=2)

    order: ClassVar[int] = 2
    free_order: ClassVar[float] = math.inf
    conserves: ClassVar[tuple[str, ...]] = ("L", "|Pi|", "E")
    symmetric: ClassVar[bool] = True
    reference: ClassVar[str] = "Laskar-Robutel 2001; exact free flow: Celledoni-Fasso-Safstrom-Zanna 2008"
    family: ClassVar[str] = "high-order"

    def __check_init__(self):
        if self.kind not in ("saba", "sbab"):
            raise ValueError(f"kind must be 'saba' or 'sbab', not {self.kind!r}")
        if not (isinstance(self.n, int) and self.n >= 1):
            raise ValueError(f"n must be a positive integer, not {self.n!r}")

    #: the order of the terms linear in the perturbation (2n)
    perturbation_order = property(lambda self: 2 * self.n)
    torque_evals = property(lambda self: f"{self.n}" + (" (cached)" if self.kind == "sbab" else ""))

    def nodes(self) -> tuple[np.ndarray, np.ndarray]:
        """The kicks' times within the step (fractions of h) and their weights."""
        return gauss_nodes(self.n) if self.kind == "saba" else lobatto_nodes(self.n + 1)

    def init(self, system, t0, state0, dt):
        if self.kind == "saba":
            return None
        return body_torque(system, t0, state0.R, state0.Pi)

    def step(self, system, t, state, aux, dt):
        x, w = self.nodes()
        if self.kind == "saba":
            return _drifts_and_kicks(system, t, state, dt, x, w), None, StepStats.explicit()

        # SBAB: the first kick with the cached torque at the step's start (node 0), then the others
        state = State(state.R, state.Pi + jnp.asarray(w[0], state.Pi.dtype) * dt * aux)
        state, T1 = _kicks(system, t, state, aux, dt, x[1:], w[1:])
        return state, T1, StepStats.explicit()


def _kicks(system, t, state, T0, dt, nodes, weights):
    """From the step's start through the kicks at times ``t + nodes h`` (fractions of the step, not
    necessarily increasing: a negative gap is an exact free flow backwards), each drifting there and
    kicking by ``weight h T``; returns the state and the last kick's torque."""
    dtype = state.Pi.dtype

    def stage(carry, gxw):
        s, _ = carry
        gap, node, weight = gxw
        s = exact.free_flow(system.body.J, s, gap * dt)
        T = body_torque(system, t + node * dt, s.R, s.Pi)
        return (State(s.R, s.Pi + weight * dt * T), T), None

    gaps = np.diff(np.concatenate([[0.0], nodes]))
    return lax.scan(stage, (state, T0), tuple(jnp.asarray(a, dtype) for a in (gaps, nodes, weights)))[0]


def _drifts_and_kicks(system, t, state, dt, nodes, weights) -> State:
    """A symmetric drift-kick-...-kick-drift step: kicks at ``t + nodes h``, then the last drift to the
    end of the step (``1 - x_n = x_1`` by symmetry)."""
    state, _ = _kicks(system, t, state, jnp.zeros_like(state.Pi), dt, nodes, weights)
    return exact.free_flow(system.body.J, state, jnp.asarray(nodes[0], state.Pi.dtype) * dt)


def _palindrome(half, length: int) -> np.ndarray:
    """``half`` followed by its mirror image, ``length`` numbers (the middle one once if odd)."""
    full = list(half) + list(half[::-1] if length % 2 == 0 else half[-2::-1])
    if len(full) != length:
        raise ValueError(f"{len(half)} coefficients do not make a palindrome of {length}")
    return np.asarray(full, np.float64)


#: Blanes, Casas, Farres, Laskar, Makazaga & Murua (2013), the symmetric ABA methods of generalised
#: order (s, n, m): name -> (s, n, m, drifts a_1.. up to the middle, kicks b_1.. up to the middle,
#: number of kicks). The digits are the paper's (as tabulated in REBOUND's integrator_saba.c).
BLANES_ABA = {
    "aba864": (8, 6, 4,
               (0.0711334264982231177779387300061549964174, 0.241153427956640098736487795326289649618,
                0.521411761772814789212136078067994229991, -0.333698616227678005726562603400438876027),
               (0.183083687472197221961703757166430291072, 0.310782859898574869507522291054262796375,
                -0.0265646185119588006972121379164987592663, 0.0653961422823734184559721793911134363710), 7),
    "aba1064": (10, 6, 4,
                (0.03809449742241219545697532230863756534060, 0.1452987161169137492940200726606637497442,
                 0.2076276957255412507162056113249882065158, 0.4359097036515261592231548624010651844006,
                 -0.6538612258327867093807117373907094120024),
                (0.09585888083707521061077150377145884776921, 0.2044461531429987806805077839164344779763,
                 0.2170703479789911017143385924306336714532, -0.01737538195906509300561788011852699719871), 8),
}


class BlanesABA(AbstractIntegrator):
    """A symmetric ABA splitting of generalised order (s, n, m) for ``H = A + eps B`` (Blanes, Casas,
    Farres, Laskar, Makazaga & Murua 2013): drifts ``a_i h`` of the exact free flow and kicks ``b_i h``
    of the torque, ``a_1 b_1 a_2 b_2 ... b_k a_{k+1}`` (palindromic; some drifts are negative: an exact
    flow backwards). The local error is ``O(eps h^{s+1} + eps^2 h^{n+1} + eps^3 h^{m+1})``: order
    m = 4 for any torque (the ``order`` the generic tests check), order s in the terms linear in eps
    and n in the quadratic ones, where SABA_n is of order 2 beyond the linear terms. Tested: m and s
    (tests/test_near_integrable.py); n is the paper's.

    ``aba864``: 8 free flows and 7 torque evaluations per step; ``aba1064``: 9 and 8. As for the
    SABA family the kick freezes Pi for a torque that depends on it.

    Reference: S. Blanes, F. Casas, A. Farres, J. Laskar, J. Makazaga & A. Murua, New families of
    symplectic splitting methods for numerical integration in dynamical astronomy, Appl. Numer. Math.
    68 (2013) 58-72 (the methods ABA(8,6,4) and ABA(10,6,4)).
    """

    name: str = eqx.field(static=True, default="aba864")

    order: ClassVar[int] = 4
    free_order: ClassVar[float] = math.inf
    conserves: ClassVar[tuple[str, ...]] = ("L", "|Pi|", "E")
    symmetric: ClassVar[bool] = True
    reference: ClassVar[str] = ("Blanes-Casas-Farres-Laskar-Makazaga-Murua 2013; exact free flow: "
                                "Celledoni-Fasso-Safstrom-Zanna 2008")
    family: ClassVar[str] = "high-order"

    def __check_init__(self):
        if self.name not in BLANES_ABA:
            raise ValueError(f"name must be one of {sorted(BLANES_ABA)}, not {self.name!r}")

    #: the order s of the terms linear in the perturbation
    perturbation_order = property(lambda self: BLANES_ABA[self.name][0])
    torque_evals = property(lambda self: str(BLANES_ABA[self.name][5]))

    def coefficients(self) -> tuple[np.ndarray, np.ndarray]:
        """The drifts (one more than the kicks) and the kicks, fractions of the step."""
        *_, a, b, kicks = BLANES_ABA[self.name]
        return _palindrome(a, kicks + 1), _palindrome(b, kicks)

    def nodes(self) -> tuple[np.ndarray, np.ndarray]:
        """The kicks' times within the step (fractions of h, the drifts' partial sums) and weights."""
        a, b = self.coefficients()
        return np.cumsum(a[:-1]), b

    def init(self, system, t0, state0, dt):
        return None

    def step(self, system, t, state, aux, dt):
        x, w = self.nodes()
        return _drifts_and_kicks(system, t, state, dt, x, w), None, StepStats.explicit()
