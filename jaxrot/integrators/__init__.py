"""The integrator registry: every method under a stable short name, with its metadata.

``REGISTRY`` maps name -> :class:`MethodInfo`; ``get(name)`` returns a ready integrator.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from ._base import AbstractIntegrator, AbstractWrapper
from .akw import AKW
from .buss import Buss1, Buss2, Buss2Plus, Buss3, Buss3False, Buss4, buss_omega_derivatives
from .abm import ABM
from .adaptive import KANTOROVICH_X, AdaptiveKantorovich
from .dmv import DMV
from .energy_projection import EnergyProjection, project_energy
from .euler import EulerQuat, EulerSVD, EulerSVDPrinted
from .lie_taylor import LieTaylor, magnus_y, magnus_z
from .reorthonormalize import Reorthonormalize
from .rk4 import RK4
from .splitting import Split2, Split4
from .exponential import MidpointExp, TrapezoidObject, TrapezoidWorld
from .midpoint_lie import LieMid, LieMidE, LieMidE1, LieMidE2, LieMidEA, LieMidI, solve_midpoint
from .nmb import NMB
from .simo_wong import SimoWong, SimoWongExplicit


@dataclasses.dataclass(frozen=True)
class MethodInfo:
    """What a research user needs to know before choosing a method."""

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


REGISTRY: dict[str, MethodInfo] = {}

_BUSS = "Buss, J. Comput. Phys. 164 (2000) 377-406"


def register(info: MethodInfo) -> None:
    """Add a method (names are unique)."""
    if info.name in REGISTRY:
        raise ValueError(f"method {info.name!r} is already registered")
    REGISTRY[info.name] = info


def get(name: str) -> AbstractIntegrator:
    """A fresh integrator by registered name (see ``jaxrot list``)."""
    try:
        return REGISTRY[name].factory()
    except KeyError:
        raise KeyError(f"unknown method {name!r}; known: {', '.join(sorted(REGISTRY))}") from None


def info(name: str) -> MethodInfo:
    """Metadata of a registered method."""
    if name not in REGISTRY:
        get(name)  # raises the helpful KeyError
    return REGISTRY[name]


for _name, _cls, _evals, _desc in [
    ("buss1", Buss1, "1", "1st order, w_bar = w"),
    ("buss2", Buss2, "1 + Taylor(1)", "2nd order, w + h/2 w'"),
    ("buss3_false", Buss3False, "1 + Taylor(2)", "naive 3rd-order Taylor; really 2nd order"),
    ("buss2p", Buss2Plus, "1 + Taylor(1)", "augmented 2nd order (2+), + h^2/12 w' x w"),
    ("buss3", Buss3, "1 + Taylor(2)", "true 3rd order"),
    ("buss4", Buss4, "1 + Taylor(3)", "true 4th order"),
]:
    register(
        MethodInfo(
            name=_name,
            factory=_cls,
            order=_cls.order,
            conserves=("L",),
            implicit=False,
            torque_evals=_evals,
            reference=_BUSS,
            family="buss",
            description=_desc,
        )
    )

_KRYSL = "Krysl, IJNME 63 (2005) 2171-2193"
_ROBLOX = "Mizerski, Motion of Spinning Bodies (Roblox, 2020)"
_LP = ("L", "|Pi|")
_LPE = ("L", "|Pi|", "E")
for _name, _cls, _order, _cons, _impl, _evals, _ref, _fam, _torque, _desc in [
    ("liemid", LieMid, 2, _LP, True, "0 (free only)", _KRYSL, "midpoint-lie", False, "Krysl's midpoint-Lie, free motion"),
    ("liemid_i", LieMidI, 2, _LP, True, "1 per Newton iteration", _KRYSL, "midpoint-lie", True,
     "implicit: torque at the midpoint attitude"),
    ("liemid_e", LieMidE, 1, _LP, True, "1", _KRYSL, "midpoint-lie", True,
     "explicit torque at the start (the 'no good' variant)"),
    ("liemid_e1", LieMidE1, 1, _LP, True, "1", _KRYSL, "midpoint-lie", True, "torque kick at the end"),
    ("liemid_e2", LieMidE2, 1, _LP, True, "1", _KRYSL, "midpoint-lie", True, "torque kick at the start"),
    ("liemid_ea", LieMidEA, 2, _LP, True, "1 (cached)", _KRYSL, "midpoint-lie", True, "half E2 + half E1, symmetric"),
    ("akw", AKW, 2, _LPE, True, "1 per Newton iteration", "Austin-Krishnaprasad-Wang 1993; Krysl appendix",
     "comparison", True, "almost-Lie-Poisson midpoint with the Cayley map"),
    ("simo_wong", SimoWong, 2, _LPE, True, "1 per Newton iteration", "Simo-Wong 1991 (port's algo C1)",
     "comparison", True, "energy-momentum, implicit"),
    ("simo_wong_explicit", SimoWongExplicit, 2, _LP, False, "1", "Simo-Wong explicit (port's algo C2)",
     "baseline", True, "explicit C2 variant"),
    ("nmb", NMB, 2, (), True, "1", "Krysl-Endres explicit Newmark", "comparison", True,
     "Newmark gamma=1/2, beta=0 in the body frame (A solved implicitly)"),
    ("dmv", DMV, 2, _LPE, True, "0 (free only)", "Moser-Veselov 1991", "comparison", False,
     "discrete Moser-Veselov"),
    ("midpoint_exp", MidpointExp, 2, _LP, True, "0 (free only)", _ROBLOX, "exponential", False,
     "implicit midpoint in exponential coordinates (= liemid)"),
    ("trapezoid_object", TrapezoidObject, 2, _LPE, True, "0 (free only)", _ROBLOX, "exponential", False,
     "object-space trapezoidal rule"),
    ("trapezoid_world", TrapezoidWorld, 2, _LP, True, "0 (free only)", _ROBLOX, "exponential", False,
     "world-space trapezoidal rule"),
]:
    register(MethodInfo(name=_name, factory=_cls, order=_order, conserves=_cons, implicit=_impl,
                        torque_evals=_evals, reference=_ref, family=_fam, torque=_torque, description=_desc))

_EP = "Buss, talk (2011), energy preservation via the Poinsot ellipsoid (reconstructed)"
for _base in ("buss1", "buss2", "buss2p", "buss3", "buss4"):
    _b = REGISTRY[_base]
    register(MethodInfo(name=f"{_base}_ep", factory=lambda _f=_b.factory: EnergyProjection(_f()), order=_b.order,
                        conserves=("L", "|Pi|", "E"), implicit=False, torque_evals="0 (free only)",
                        reference=_EP, family="buss", torque=False,
                        description=f"{_b.description} + energy projection"))

for _K in range(1, 6):
    register(MethodInfo(name=f"lie_taylor{_K}", factory=lambda _K=_K: LieTaylor(_K), order=_K, conserves=("L",),
                        implicit=False, torque_evals=f"1 + Taylor({_K})" if _K > 1 else "1 + Taylor(1)",
                        reference="Buss, talk (2011) Part II; Magnus/dexpinv series", family="lie-taylor",
                        description=f"Lie-group Taylor of order {_K} (= buss3/buss4 for K = 3/4)"))

_SPLIT = "McLachlan-Reich splitting (Buss's comparison); Yoshida 1990 for 4th order"
for _perm in ("123", "132", "213", "231", "312", "321"):
    _ax = tuple(int(c) for c in _perm)
    for _order, _cls in ((2, Split2), (4, Split4)):
        _n = f"split{_order}_{_perm}"
        _kind = "Strang" if _order == 2 else "Yoshida triple jump of Strang"
        register(MethodInfo(name=_n, factory=lambda _c=_cls, _a=_ax: _c(_a), order=_order,
                            conserves=("L", "|Pi|"), implicit=False, torque_evals="0 (free only)",
                            reference=_SPLIT, family="splitting", torque=False,
                            description=f"{_kind}, outer axis {_perm[0]}, centre axis {_perm[2]}"))
        register(MethodInfo(name=f"{_n}_ep", factory=lambda _c=_cls, _a=_ax: EnergyProjection(_c(_a)),
                            order=_order, conserves=("L", "|Pi|", "E"), implicit=False,
                            torque_evals="0 (free only)", reference=_SPLIT + "; EP: Buss, talk (2011)", family="splitting",
                            torque=False, description=f"{_kind} {_perm} + energy projection"))

_BASE = "Buss (2000) comparison baselines"
_GRON = "Postma & Nerbonne, Books in space (2011)"
for _name, _factory, _order, _cons, _evals, _ref, _desc in [
    ("rk4", RK4, 4, (), "4", _BASE, "classical RK4 on (R, Pi), no re-orthonormalisation"),
    ("rk4_svd", lambda: Reorthonormalize(RK4()), 4, (), "4", _BASE,
     "RK4 on (R, Pi) + nearest rotation after each step"),
    ("abm", lambda: Reorthonormalize(ABM()), 4, (), "2", _BASE,
     "Adams-Bashforth-Moulton PECE order 4, RK4 start, + nearest rotation after each step"),
    ("euler_svd", EulerSVD, 1, ("L", "|Pi|"), "1", _GRON, "forward Euler (world rate) + SVD re-orthonormalisation"),
    ("euler_quat", EulerQuat, 1, ("L", "|Pi|"), "1", _GRON, "forward Euler on the quaternion, normalised"),
]:
    register(MethodInfo(name=_name, factory=_factory, order=_order, conserves=_cons, on_so3=_name != "rk4",
                        implicit=False, torque_evals=_evals, reference=_ref, family="baseline", description=_desc))

register(MethodInfo(name="midpoint_exp_adaptive", factory=lambda: AdaptiveKantorovich(MidpointExp()), order=2,
                    conserves=("L", "|Pi|"), implicit=True, torque_evals="0 (free only)", reference=_ROBLOX,
                    family="exponential", torque=False,
                    description="implicit midpoint, Kantorovich-safe sub-steps (h|L|/J_min <= 0.8284)"))

__all__ = [
    "AbstractIntegrator",
    "MethodInfo",
    "REGISTRY",
    "register",
    "get",
    "info",
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
]
