"""Krysl's family, the implicit comparison methods and the Roblox rules: golden values, the
conservation table of Krysl (2005), E1/E2's falling order, and methods that refuse torques."""

import jax.numpy as jnp
import numpy as np
import pytest

import jaxrot
from jaxrot import analysis, problems, reference
from jaxrot.integrators import exponential as ex

from .golden import golden

FASTTOP = {"liemid_i": "LIEMID_I", "liemid_e": "LIEMID_E", "liemid_e1": "LIEMID_E1", "liemid_e2": "LIEMID_E2",
           "liemid_ea": "LIEMID_EA", "akw": "AKW", "simo_wong": "SW", "nmb": "NMB"}
FREE = {"liemid": "LIEMID", "dmv": "DMV", "akw": "AKW", "simo_wong": "SW",
        # the same maps under other names
        "midpoint_exp": "LIEMID", "trapezoid_object": "SW"}


GOLDEN = [("fast_top", 0.01, m, f"krysl_fasttop_{k}_dt0.01_n20", 50) for m, k in FASTTOP.items()] + [
    ("free_body_mz", 0.25, m, f"krysl_free_{k}_dt0.25_n20", 1) for m, k in FREE.items()]


@pytest.mark.parametrize("pname,dt,method,key,om_scale", GOLDEN)
def test_golden(pname, dt, method, key, om_scale):
    # om_scale: the fast top's body rate is ~50 rad/s, so its rounding is 50x larger
    g = golden()[key]
    p = problems.get(pname)
    fin = jaxrot.simulate(method, p, dt, 20).final
    np.testing.assert_allclose(fin.R, np.array(g["R"]), atol=1e-12)
    np.testing.assert_allclose(fin.Pi / p.body.J, np.array(g["Om"]), atol=1e-12 * om_scale)


@pytest.mark.parametrize("cls,key", [(ex.MidpointExp, "roblox_midpoint_v"), (ex.TrapezoidObject, "roblox_ostr_v"),
                                     (ex.TrapezoidWorld, "roblox_worldtrap_v")])
def test_golden_roblox_one_step(cls, key):
    v, st = cls().solve(jnp.array([2.5, 1.4, 1.3]), jnp.eye(3), jnp.array([3.0, 1.0, 0.0]))
    assert bool(st.converged)
    np.testing.assert_allclose(v, np.array(golden()[key]), atol=1e-12)


def test_midpoint_exp_equals_liemid_psi():
    # Roblox's implicit midpoint v is Krysl's Psi (in the world frame of the step)
    from jaxrot.integrators import solve_midpoint
    from jaxrot.integrators.newton import Newton

    J = jnp.array([2.5, 1.4, 1.3])
    psi, _ = solve_midpoint(J, 1.0, jnp.array([3.0, 1.0, 0.0]), Newton())
    np.testing.assert_allclose(psi, np.array(golden()["roblox_midpoint_v"]), atol=1e-14)


def _pi_z(states):
    return states.L[:, 2]


def _pi_chi(states):
    return states.Pi[:, 2]  # pi . chi = (R Pi) . (R e3) = Pi_3


def _rel_drift(x):
    x = np.asarray(x)
    return np.abs(x - x[0]).max() / max(np.abs(x[0]), 1e-300)


@pytest.mark.parametrize("method", ["liemid_i", "liemid_e", "liemid_e1", "liemid_e2", "liemid_ea", "simo_wong"])
def test_pi_z_exact_on_tops(method):
    # Krysl (2005): spatial momentum changes only by torque impulses, which are horizontal on the tops
    for name in ["fast_top", "slow_top"]:
        tr = jaxrot.simulate(method, problems.get(name), 0.01, 300, saveat=jaxrot.SaveAt(steps=10))
        assert _rel_drift(_pi_z(tr.states)) < 1e-12, name


@pytest.mark.parametrize("method", ["liemid_e1", "liemid_e2", "liemid_ea"])
def test_pi_chi_exact(method):
    tr = jaxrot.simulate(method, problems.get("fast_top"), 0.01, 300, saveat=jaxrot.SaveAt(steps=10))
    assert _rel_drift(_pi_chi(tr.states)) < 1e-12


def test_pi_chi_not_exact_for_liemid_i_and_nmb_pi_z_drifts():
    # the negative half of the table: these are *not* conserved (so the tests above can fail)
    tr = jaxrot.simulate("liemid_i", problems.get("fast_top"), 0.01, 300, saveat=jaxrot.SaveAt(steps=10))
    assert _rel_drift(_pi_chi(tr.states)) > 1e-8
    tr = jaxrot.simulate("nmb", problems.get("fast_top"), 0.01, 300, saveat=jaxrot.SaveAt(steps=10))
    assert _rel_drift(_pi_z(tr.states)) > 1e-6


@pytest.mark.parametrize("method", ["akw", "simo_wong", "dmv", "trapezoid_object"])
def test_energy_exact_free_body(method):
    p = problems.get("free_body_mz")
    tr = jaxrot.simulate(method, p, 0.5, 200, saveat=jaxrot.SaveAt(steps=10))
    assert _rel_drift(analysis.energy(p, tr.states)) < 1e-12


def test_liemid_energy_bounded_not_exact():
    p = problems.get("free_body_mz")
    tr = jaxrot.simulate("liemid", p, 0.5, 400, saveat=jaxrot.SaveAt(steps=4))
    d = _rel_drift(analysis.energy(p, tr.states))
    assert 1e-8 < d < 1e-2


def test_e1_e2_local_order_falls_toward_one_on_slow_top():
    # Krysl (2005): local slopes 1.98 -> 1.49 at dt = 2^-7 ... 2^-11 (slow top, t_end = 20)
    p = problems.get("slow_top")
    ref = reference.reference_solution(p, 20.0).final
    ns = [20 * 2**k for k in (7, 8, 9, 10, 11)]
    for m in ["liemid_e1", "liemid_e2"]:
        r = analysis.convergence_study(m, p, 20.0, ns, ref, metric="R2")
        lo = analysis.local_orders(r["dts"], r["errors"])
        assert lo[0] > lo[-1] + 0.2, (m, lo)
        assert lo[-1] < 1.8, (m, lo)


def test_ea_order_two_on_slow_top():
    p = problems.get("slow_top")
    ref = reference.reference_solution(p, 20.0).final
    r = analysis.convergence_study("liemid_ea", p, 20.0, [20 * 2**k for k in (7, 8, 9, 10)], ref, metric="R2")
    assert abs(r["order"] - 2) < 0.15


@pytest.mark.parametrize("method", ["liemid", "dmv", "midpoint_exp", "trapezoid_object", "trapezoid_world"])
def test_free_only_methods_refuse_torque(method):
    with pytest.raises(ValueError, match="torque-free"):
        jaxrot.simulate(method, problems.get("fast_top"), 0.01, 2)
