"""The integrators under test: every registered method is enrolled in the generic tests.

A new method needs no new generic test: register it in ``jaxrot.integrators`` and it is picked up
here. ``EXPECTED_ORDER`` lists methods whose *observed* order on the generic problems differs from
their registered global order; ``SKIP`` names generic tests a method cannot take.
"""

from __future__ import annotations

import dataclasses
import math

from jaxrot.integrators import REGISTRY


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    order: int  # with torque
    order_free: int  # without torque
    conserves: tuple[str, ...]
    torque: bool  # can take a torque
    on_so3: bool = True


# Methods whose order falls with torque (free_order > order: Krysl's E, E1, E2 are LIEMID without
# torque) are first order only asymptotically (Krysl 2005: local slopes 1.98 -> 1.49 on the slow
# top), which the generic fixed sweep cannot show: tests/test_midpoint_lie.py checks their falling
# local slopes instead.
SKIP: dict[str, set[str]] = {n: {"order_torqued"} for n, i in REGISTRY.items()
                             if math.inf > (i.free_order or i.order) > i.order}

# buss1 + EP on the T-handle (a spin 0.2 deg from the unstable intermediate axis): the 2x2 projection
# there is conditioned like 1/tilt^2 and the first-order base leaves large energy errors to project,
# so float32 differs from float64 by 2.2e-4 after 100 steps, just over the generic 2e-4;
# tests/test_energy_projection.py checks EP in float32 on a regular problem.
SKIP["buss1_ep"] = {"float32"}
# exact_split_kl8 near the T-handle's separatrix in float32: 17 exact-flow stages per step (some
# backwards), each with float32 round-off amplified ~1e2 by the flow's sensitivity there, differ from
# float64 by 1.9e-3 after 100 steps; tests/test_exact.py checks the exact flow in float32.
SKIP["exact_split_kl8"] = {"float32"}
# exact_free / exact_split on the same problem: one float32 step of the flow carries up to 30 ulp
# (the attitude angle is a difference of elliptic integrals at nearby arguments), so 100 steps differ
# from float64 by 2.4e-5 on a CPU and 2.2e-4 on an H100 (its float32 sin/arcsin round differently and
# the errors add up instead of cancelling); tests/test_exact.py checks the flow in float32.
SKIP["exact_free"] = {"float32"}
SKIP["exact_split"] = {"float32"}
# compositions differentiate through the same exact flow and lax.scan of stages as exact_split_kl8
# (tested), exact_free/exact_split through the flow whose gradients tests/test_exact.py checks
# against finite differences; each gradient compile costs ~20 s
for _n in ("exact_split_tj4", "exact_split_kl6", "exact_free", "exact_split"):
    SKIP[_n] = {"gradients"}
# ABM's order-4 regime starts at smaller steps than the generic sweep (3.4 there, 3.9 below)
STEP_SCALE: dict[str, int] = {"abm": 4, "dmv8": 3}
# the exact flow and the splittings built on it are exact without torque: no free-body order to
# observe (tests/test_exact.py checks them against the published codes' values instead)
for _n, _i in REGISTRY.items():
    if (_i.free_order or _i.order) == math.inf:
        SKIP.setdefault(_n, set()).add("order_free")

# Splittings come in 6 orderings x (2nd, 4th) x (plain, EP) that differ only by a permutation of the
# axes: the generic tests (compile-bound, ~10 s per method) take the 2-3-1 family and split2_123_ep;
# tests/test_splitting_baselines.py checks order and momentum for every ordering.
REPRESENTATIVE_ONLY = {n for n in REGISTRY if n.startswith("split") and "_231" not in n and n != "split2_123_ep"}
# Kantorovich sub-stepping runs a data-dependent while_loop: forward-mode AD only (tests/test_maps.py)
SKIP["midpoint_exp_adaptive"] = {"gradients"}

# High-order variants whose generic tests (~25 s of compilation each) repeat a sibling's code path:
# dmv6/dmv8 (dmv4 and dmv10 enrolled), liemid_ea_kl6 (tj4 and kl8 enrolled), exact_split_tj4/kl6
# (kl8 enrolled). Their orders and golden values are checked in tests/test_high_order.py.
REPRESENTATIVE_ONLY |= {"dmv6", "dmv8", "liemid_ea_kl6", "exact_split_tj4", "exact_split_kl6"}
# Laskar-Robutel splittings: saba2 and sbab2 take the generic tests (the two kick placements);
# saba3/saba4/sbab3 differ only in their nodes, and tests/test_near_integrable.py checks each one's
# orders. Their gradients go through the exact flow, as exact_split's (see above).
REPRESENTATIVE_ONLY |= {"saba3", "saba4", "sbab3"}
for _n in ("saba2", "sbab2"):
    SKIP.setdefault(_n, set()).add("gradients")
# Blanes et al.'s ABA(8,6,4) takes the generic tests, ABA(10,6,4) (the same code, other coefficients)
# not. On buss_torqued (a small torque) their eps h^8 / eps h^10 terms reach round-off within the
# generic sweep before the general order 4 shows: tests/test_near_integrable.py observes order 4 on
# the slow top and order 8 / 10 in the terms linear in the torque.
REPRESENTATIVE_ONLY |= {"aba1064"}
# In float32 near the T-handle's separatrix, as exact_split_kl8 below: 8 exact-flow stages per step
# (two backwards) differ from float64 by 4e-4 after 100 steps; tests/test_near_integrable.py checks
# float32 on the fast top.
SKIP.setdefault("aba864", set()).update({"gradients", "order_torqued", "float32"})

# The slow tier (`-m slow`) takes these generic tests of these methods; the default run keeps their
# orders. Energy-projected variants other than buss2p_ep and split2_123_ep: EnergyProjection wraps
# each base in the same code (its gradient, batch and float32 paths are those of the two kept), and
# tests/test_energy_projection.py checks every variant's invariants after every step. lie_taylor1-4:
# truncations of lie_taylor5's series (same code path for gradients). exact_split_kl8 and rkmk8: the
# two costliest reverse-mode compilations (20-30 s each); liemid_ea_kl8: liemid_ea_tj4's Compose path.
_EP_SLOW = {n for n in REGISTRY if n.endswith("_ep") and n not in ("buss2p_ep", "split2_123_ep")}
SLOW: dict[str, set[str]] = {n: {"gradients", "jit_vmap", "float32", "invariants"} for n in _EP_SLOW}
SLOW["liemid_ea_kl8"] = {"gradients", "jit_vmap", "float32", "invariants"}
for _n in ("lie_taylor1", "lie_taylor2", "lie_taylor3", "lie_taylor4", "exact_split_kl8", "rkmk8"):
    SLOW.setdefault(_n, set()).add("gradients")
# the embedded pairs: a constant step of a pair is its higher method's step (enrolled on its own);
# the pair's own contract, the error estimate, is tested in tests/test_adaptive.py
for _n, _i in REGISTRY.items():
    if _i.error_order is not None:
        SLOW.setdefault(_n, set()).update({"gradients", "jit_vmap", "float32", "invariants"})

# Laskar-Robutel SABA_2/SBAB_2 are order 2 for a general torque (an eps^2 h^2 term) and 4 in the
# terms linear in the torque; on buss_torqued (a small prescribed torque) the eps h^4 terms lead
# down to round-off over the generic sweep (observed 3.98 and 4.00).
EXPECTED_ORDER: dict[str, int] = {"saba2": 4, "sbab2": 4}

CASES = [
    Case(n, EXPECTED_ORDER.get(n, i.order), i.free_order or i.order, i.conserves, i.torque, i.on_so3) for n, i in sorted(REGISTRY.items())
]
CASES = [c for c in CASES if c.name not in REPRESENTATIVE_ONLY]
NAMES = [c.name for c in CASES]
TORQUE_NAMES = [c.name for c in CASES if c.torque and "order_torqued" not in SKIP.get(c.name, set())]
TORQUE_CAPABLE = [c.name for c in CASES if c.torque]


def case(name: str) -> Case:
    return next(c for c in CASES if c.name == name)


def skipped(name: str, test: str) -> bool:
    return test in SKIP.get(name, set())


# Three generic checks exercise a method's code path rather than its numerics: a reverse-mode gradient
# is finite, a batch equals its one-body runs, float32 follows float64. Each costs a compilation of
# 2-8 s per method (the largest part of the default run), so the default run gives every method one of
# them in turn (by its place in NAMES, the next one where a check is skipped or slow for it) and the
# slow tier all three. Every method's orders and invariants stay in the default run.
ROTATED = ("gradients", "jit_vmap", "float32")


def turn(name: str) -> str | None:
    """The rotated check ``name`` takes in the default run (None: all three are skipped or slow)."""
    i = NAMES.index(name)
    for k in range(len(ROTATED)):
        test = ROTATED[(i + k) % len(ROTATED)]
        if not skipped(name, test) and test not in SLOW.get(name, ()):
            return test
    return None


def params(names, test: str) -> list:
    """``names`` as pytest parameters, marked slow where ``test`` is in :data:`SLOW` for the method or
    is a :data:`ROTATED` check other than the method's :func:`turn`."""
    import pytest

    def slow(n):
        return test in SLOW.get(n, ()) or (test in ROTATED and turn(n) != test)

    return [pytest.param(n, marks=pytest.mark.slow) if slow(n) else n for n in names]


def subprocess_env(xla_flags: str = "", **extra) -> dict:
    """The environment of a test's Python subprocess: this process's, with the suite's fast-compile XLA
    flags kept (tests/conftest.py; without them a subprocess compiles at XLA's full optimisation) and ``xla_flags`` (e.g. a host device count) added; any device count inherited is
    dropped, so the subprocess gets the count it asks for or the default."""
    import os

    kept = [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith("--xla_force_host_platform_device_count")]
    env = dict(os.environ, **extra)
    env["XLA_FLAGS"] = " ".join(kept + xla_flags.split())
    return env


def user_pair():
    """The third-order Crouch-Grossman pair of examples/user_pair_fused.py: a method in a user's file,
    loaded as a user would (not part of the package)."""
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[1] / "examples" / "user_pair_fused.py"
    spec = importlib.util.spec_from_file_location("example_user_pair_fused", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.CrouchGrossman32()
