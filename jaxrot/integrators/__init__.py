"""The integrator registry: every method under a stable short name, with its metadata.

``REGISTRY`` maps name -> :class:`MethodInfo`; ``get(name)`` returns a ready integrator.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from ..errors import UnknownNameError, unknown_name
from ._base import AbstractIntegrator, AbstractWrapper
from .akw import AKW
from .buss import Buss1, Buss2, Buss2Plus, Buss3, Buss3False, Buss4, buss_omega_derivatives
from .abm import ABM
from .kantorovich import KANTOROVICH_X, AdaptiveKantorovich
from .compose import SCHEMES, Compose
from .dmv import DMV, DMV4, DMV6, DMV8, DMV10
from .exact_flow import ExactFree, ExactSplit
from .energy_projection import EnergyProjection, project_energy
from .euler import EulerQuat, EulerSVD, EulerSVDPrinted
from .lie_taylor import LieTaylor, magnus_y, magnus_z
from .reorthonormalize import Reorthonormalize
from .rk4 import RK4
from .rkmk import RKMK4
from .rkmk8 import RKMK8, RKMK8DOP853Pair, RKMK8Embedded5, RKMK8Pair
from .pairs import AbstractPair, EmbeddedPair
from .splitting import Split2, Split4
from .exponential import MidpointExp, TrapezoidObject, TrapezoidWorld
from .midpoint_lie import LieMid, LieMidE, LieMidE1, LieMidE2, LieMidEA, LieMidI, solve_midpoint
from .near_integrable import BLANES_ABA, BlanesABA, LaskarRobutel
from .nmb import NMB
from .simo_wong import SimoWong, SimoWongExplicit


@dataclasses.dataclass(frozen=True)
class MethodInfo:
    """What a research user needs to know before choosing a method: the facts declared on the
    method's class (see :class:`AbstractIntegrator`), read from a fresh instance at registration."""

    name: str
    factory: Callable[[], AbstractIntegrator]
    order: int
    conserves: tuple[str, ...]  # exactly, without torque: "L" (world momentum), "|Pi|", "E"
    implicit: bool
    torque_evals: str  # per step
    reference: str
    family: str
    torque: bool = True  # False: torque-free problems only
    on_so3: bool = True  # False: R drifts off SO(3) (plain RK4)
    description: str = ""
    free_order: int | None = None  # order without torque (None: the same as ``order``)
    error_order: int | None = None  # an embedded pair's lower order (error-controlled steps), else None


REGISTRY: dict[str, MethodInfo] = {}


def register(name: str, factory: Callable[[], AbstractIntegrator], description: str = "") -> MethodInfo:
    """Add a method under a unique ``name``; its facts come from ``factory()``'s class."""
    if name in REGISTRY:
        raise ValueError(f"method {name!r} is already registered")
    m = factory()
    info = MethodInfo(name=name, factory=factory, order=m.order, conserves=tuple(m.conserves), implicit=m.implicit,
                      torque_evals=m.torque_evals, reference=m.reference, family=m.family, torque=m.torque,
                      on_so3=m.on_so3, description=description, free_order=m.free_order,
                      error_order=m.error_order() if isinstance(m, AbstractPair) else None)
    REGISTRY[name] = info
    return info


def get(name: str) -> AbstractIntegrator:
    """A fresh integrator by registered name (see ``jaxrot list``)."""
    try:
        return REGISTRY[name].factory()
    except (KeyError, TypeError):  # TypeError: an unhashable name
        raise unknown_name("method", name, REGISTRY, "`jaxrot list` (or sorted(jaxrot.REGISTRY))") from None


def info(name: str) -> MethodInfo:
    """Metadata of a registered method."""
    try:
        return REGISTRY[name]
    except (KeyError, TypeError):
        get(name)  # raises the helpful KeyError
        raise


# name, factory, description: one line per method (the facts live on the classes)
register("buss1", Buss1, "1st order, w_bar = w")
register("buss2", Buss2, "2nd order, w + h/2 w'")
register("buss3_false", Buss3False, "naive 3rd-order Taylor; really 2nd order")
register("buss2p", Buss2Plus, "augmented 2nd order (2+), + h^2/12 w' x w")
register("buss3", Buss3, "true 3rd order")
register("buss4", Buss4, "true 4th order")
register("liemid", LieMid, "Krysl's midpoint-Lie, free motion")
register("liemid_i", LieMidI, "implicit: torque at the midpoint attitude")
register("liemid_e", LieMidE, "explicit torque at the start (the 'no good' variant)")
register("liemid_e1", LieMidE1, "torque kick at the end")
register("liemid_e2", LieMidE2, "torque kick at the start")
register("liemid_ea", LieMidEA, "half E2 + half E1, symmetric")
register("akw", AKW, "almost-Lie-Poisson midpoint with the Cayley map")
register("simo_wong", SimoWong, "energy-momentum, implicit")
register("simo_wong_explicit", SimoWongExplicit, "explicit C2 variant")
register("nmb", NMB, "Newmark gamma=1/2, beta=0 in the body frame (A solved implicitly)")
register("dmv", DMV, "discrete Moser-Veselov")
for _p, _cls in ((4, DMV4), (6, DMV6), (8, DMV8), (10, DMV10)):
    register(f"dmv{_p}", _cls, f"Hairer-Vilmart: DMV with modified moments of inertia, order {_p}")
register("midpoint_exp", MidpointExp, "implicit midpoint in exponential coordinates (= liemid)")
register("trapezoid_object", TrapezoidObject, "object-space trapezoidal rule")
register("trapezoid_world", TrapezoidWorld, "world-space trapezoidal rule")
for _base in ("buss1", "buss2", "buss2p", "buss3", "buss4"):
    register(f"{_base}_ep", lambda _f=REGISTRY[_base].factory: EnergyProjection(_f()),
             f"{REGISTRY[_base].description} + energy projection")
for _K in range(1, 6):
    register(f"lie_taylor{_K}", lambda _K=_K: LieTaylor(_K),
             f"Lie-group Taylor of order {_K} (= buss3/buss4 for K = 3/4)")
for _perm in ("123", "132", "213", "231", "312", "321"):
    _ax = tuple(int(c) for c in _perm)
    for _cls, _kind in ((Split2, "Strang"), (Split4, "Yoshida triple jump of Strang")):
        _n = f"split{_cls.order}_{_perm}"
        register(_n, lambda _c=_cls, _a=_ax: _c(_a), f"{_kind}, outer axis {_perm[0]}, centre axis {_perm[2]}")
        register(f"{_n}_ep", lambda _c=_cls, _a=_ax: EnergyProjection(_c(_a)), f"{_kind} {_perm} + energy projection")
register("rk4", RK4, "classical RK4 on (R, Pi), no re-orthonormalisation")
register("rk4_svd", lambda: Reorthonormalize(RK4()), "RK4 on (R, Pi) + nearest rotation after each step")
register("abm", lambda: Reorthonormalize(ABM()),
         "Adams-Bashforth-Moulton PECE order 4, RK4 start, + nearest rotation after each step")
register("euler_svd", EulerSVD, "forward Euler (world rate) + SVD re-orthonormalisation")
register("euler_quat", EulerQuat, "forward Euler on the quaternion, normalised")
register("midpoint_exp_adaptive", lambda: AdaptiveKantorovich(MidpointExp()),
         "implicit midpoint, Kantorovich-safe sub-steps (h|L|/J_min <= 0.8284)")

register("rkmk4", RKMK4, "classical RK4 lifted to SO(3) (Munthe-Kaas), any torque")
register("rkmk8", RKMK8, "Dormand-Prince 8 (DOP853) lifted to SO(3), exact dexpinv, any torque")
register("exact_free", ExactFree, "the exact free-body flow (elliptic functions)")
register("exact_split", ExactSplit, "half kick, exact free flow, half kick (Strang)")
for _kind, _ns, _rule in (("saba", (2, 3, 4), "Gauss"), ("sbab", (2, 3), "Lobatto")):
    for _n in _ns:
        register(f"{_kind}{_n}", lambda _k=_kind, _n=_n: LaskarRobutel(_k, _n),
                 f"Laskar-Robutel {_kind.upper()}_{_n}: exact free flows, kicks at {_rule} nodes, "
                 f"order ({2 * _n}, 2) for small torques")
for _name, (_s, _n, _m, *_) in BLANES_ABA.items():
    register(_name, lambda _name=_name: BlanesABA(_name),
             f"Blanes et al. ABA({_s},{_n},{_m}): exact free flows and kicks, order ({_s}, {_n}, {_m}) in the "
             f"torque's size")
# embedded pairs (error-controlled steps with jaxrot.Adaptive; with fixed steps, the higher method)
register("buss4(3)", lambda: EmbeddedPair(Buss4(), Buss3()), "buss4 with buss3's error estimate")
register("lie_taylor5(4)", lambda: EmbeddedPair(LieTaylor(5), LieTaylor(4)), "lie_taylor5 with lie_taylor4's error estimate")
register("exact_split_tj4(2)", lambda: EmbeddedPair(Compose(ExactSplit(), "triple4"), ExactSplit()),
         "the triple-jump composition of exact_split with exact_split's error estimate")
register("rkmk8(5)", RKMK8Pair, "rkmk8 with its embedded fifth-order solution's error estimate (shared stages)")
register("rkmk8(5,3)", RKMK8DOP853Pair, "rkmk8 with DOP853's combined fifth- and third-order error estimate (shared stages)")
for _base in ("liemid_ea", "exact_split"):
    for _s, _tag in (("triple4", "tj4"), ("kahan_li6", "kl6"), ("kahan_li8", "kl8")):
        register(f"{_base}_{_tag}", lambda _b=_base, _s=_s: Compose(REGISTRY[_b].factory(), _s),
                 f"{_base} composed by {_s} (order {SCHEMES[_s][0]})")

__all__ = [
    "AbstractIntegrator",
    "MethodInfo",
    "REGISTRY",
    "register",
    "get",
    "info",
    "UnknownNameError",
    "unknown_name",
    "Buss1",
    "Buss2",
    "Buss3False",
    "Buss2Plus",
    "Buss3",
    "Buss4",
    "buss_omega_derivatives",
    "LieMid", "LieMidI", "LieMidE", "LieMidE1", "LieMidE2", "LieMidEA", "solve_midpoint",
    "EnergyProjection", "project_energy", "LieTaylor", "magnus_y", "magnus_z", "Split2", "Split4",
    "AbstractWrapper", "AdaptiveKantorovich", "KANTOROVICH_X", "RK4", "ABM", "EulerSVD", "EulerSVDPrinted", "EulerQuat", "Reorthonormalize",
    "AKW", "SimoWong", "SimoWongExplicit", "NMB", "DMV", "MidpointExp", "TrapezoidObject", "TrapezoidWorld",
    "DMV4", "DMV6", "DMV8", "DMV10", "Compose", "SCHEMES", "ExactFree", "ExactSplit", "RKMK4", "RKMK8", "RKMK8Embedded5", "RKMK8Pair", "RKMK8DOP853Pair", "AbstractPair", "EmbeddedPair", "LaskarRobutel",
    "BlanesABA", "BLANES_ABA",
]
