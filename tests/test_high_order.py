"""The high-order methods against the published codes and on the heavy top (their order and
invariants are in the generic tests of tests/test_integrators.py)."""

import json
import pathlib

import numpy as np
import pytest

import jaxrot
from jaxrot import analysis, problems, reference
from jaxrot.integrators import Compose

GOLDEN = json.loads((pathlib.Path(__file__).parent / "data" / "golden_external.json").read_text())


@pytest.mark.parametrize("order", [2, 4, 6, 8, 10])
def test_dmv_matches_hairer_vilmart_fortran(order):
    """50 steps of h = 0.1 on case A, against DMV10.f's subroutines DMV2 ... DMV10."""
    g = GOLDEN[f"dmv{order}_caseA"]
    p = problems.get("free_body_hlw")
    np.testing.assert_allclose(np.asarray(p.body.J), g["J"], rtol=1e-16)
    np.testing.assert_allclose(np.asarray(p.state0.Pi), g["Pi0"], rtol=1e-16)
    fin = jaxrot.simulate("dmv" if order == 2 else f"dmv{order}", p, g["h"], g["n_steps"]).final
    assert np.abs(np.asarray(fin.R) - np.array(g["R"])).max() <= 1e-12
    assert np.abs(np.asarray(fin.Pi) - np.array(g["Pi"])).max() <= 1e-12


@pytest.mark.parametrize("name,order,ns", [("exact_split", 2, [40, 80, 160, 320]),
                                           ("exact_split_tj4", 4, [20, 40, 80, 160]),
                                           ("exact_split_kl6", 6, [5, 10, 20, 40]),
                                           ("rkmk4", 4, [80, 160, 320, 640]),
                                           ("rkmk8", 8, [10, 20, 40, 80])])
def test_orders_on_the_heavy_top(name, order, ns):
    p = problems.get("fast_top")
    ref = reference.reference_solution(p, 1.0).final
    r = analysis.convergence_study(name, p, 1.0, ns, ref)
    assert abs(r["order"] - order) <= 0.3, r


def test_rkmk8_order_on_an_asymmetric_torqued_body():
    """Order 8 where no splitting is cheap: the asymmetric heavy top (DOP853 reference)."""
    p = problems.get("asymmetric_top")
    ref = reference.reference_solution(p, 1.0).final
    r = analysis.convergence_study("rkmk8", p, 1.0, [16, 32, 64, 128], ref)
    assert abs(r["order"] - 8) <= 0.3, r


def test_rkmk8_embedded_solution_is_of_order_five():
    """DOP853's fifth-order weights on RKMK8's stages, as a method of its own (the lower member of the
    pair ``rkmk8(5)``): order 5 on the asymmetric heavy top, R on SO(3)."""
    from jaxrot.integrators import RKMK8Embedded5

    p = problems.get("asymmetric_top")
    ref = reference.reference_solution(p, 1.0).final
    r = analysis.convergence_study(RKMK8Embedded5(), p, 1.0, [16, 32, 64, 128], ref)
    assert abs(r["order"] - 5) <= 0.3, r
    R = jaxrot.simulate(RKMK8Embedded5(), p, 1.0 / 16, 16).final.R
    np.testing.assert_allclose(np.asarray(R @ R.T), np.eye(3), atol=1e-14)


@pytest.mark.parametrize("name", ["exact_free", "exact_split", "exact_split_kl8"])
def test_exact_methods_are_exact_without_torque_at_any_step(name):
    p = problems.get("free_body_hlw")
    g = GOLDEN["exact_caseA_t100"]
    for n in (1, 7, 1000):
        fin = jaxrot.simulate(name, p, 100.0 / n, n).final
        assert np.abs(np.asarray(fin.R) - np.array(g["R"])).max() <= 1e-12 * max(1, n / 100)


def test_compose_refuses_a_non_symmetric_or_high_order_base():
    with pytest.raises(ValueError, match="symmetric second-order"):
        Compose(jaxrot.get("buss2p"), "triple4")
    with pytest.raises(ValueError, match="symmetric second-order"):
        Compose(jaxrot.get("dmv4"), "triple4")
    with pytest.raises(ValueError, match="unknown composition scheme"):
        Compose(jaxrot.get("liemid"), "nope")


@pytest.mark.parametrize("scheme,order", [("suzuki4", 4), ("yoshida6", 6), ("mclachlan8", 8)])
def test_unregistered_schemes_reach_their_order(scheme, order):
    """The schemes not registered under a name (split2 as the base: explicit, torque-free part exact)."""
    p = problems.get("free_body_mz")
    ref = reference.reference_solution(p, 10.0).final
    ns = {4: [20, 40, 80, 160], 6: [10, 20, 40, 80], 8: [12, 16, 24, 32]}[order]
    r = analysis.convergence_study(Compose(jaxrot.get("split2_231"), scheme), p, 10.0, ns, ref)
    assert abs(r["order"] - order) <= 0.3, r


@pytest.mark.parametrize("name,order,ns", [("dmv6", 6, [10, 20, 40, 80]), ("dmv8", 8, [36, 48, 72, 96]),
                                           ("liemid_ea_kl6", 6, [10, 20, 40, 80])])
def test_orders_of_the_representative_only_variants(name, order, ns):
    """The variants left out of the generic tests (tests/helpers.py): their free-body order."""
    p = problems.get("free_body_mz")
    r = analysis.convergence_study(name, p, 10.0, ns, reference.reference_solution(p, 10.0).final)
    assert abs(r["order"] - order) <= 0.3, r
