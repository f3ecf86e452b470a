"""Rotations in and out: quaternions (both orders), Euler angles (SciPy's 12 sequences, both cases),
State constructors and the Trajectory's per-frame views, checked against SciPy."""

import dataclasses
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.spatial.transform import Rotation

import jaxrot
from jaxrot import problems, so3

SEQS = [a + b + c for a in "xyz" for b in "xyz" for c in "xyz" if a != b and b != c]
ALL_SEQS = SEQS + [s.upper() for s in SEQS]
assert len(SEQS) == 12


def _rotations():
    """Random rotations plus the hard cases: identity, tiny angles, exactly and nearly pi."""
    rots = Rotation.random(300, random_state=7)
    n = np.array([0.6, 0.0, 0.8])
    special = [a * n for a in (0.0, 1e-12, 1e-7, np.pi - 1e-7, np.pi)] + [np.pi * e for e in np.eye(3)]
    return Rotation.concatenate([rots, Rotation.from_rotvec(np.array(special))])


def _wrapped(a, b):
    """|a - b| modulo 2 pi (+pi and -pi are the same angle)."""
    d = np.asarray(a) - np.asarray(b)
    return np.abs((d + np.pi) % (2 * np.pi) - np.pi)


@pytest.mark.parametrize("order", ["wxyz", "xyzw"])
def test_quaternion_matches_scipy_both_orders(order):
    rots = _rotations()
    R = rots.as_matrix()
    q = np.asarray(so3.to_quaternion(jnp.asarray(R), order))
    q_sp = rots.as_quat(scalar_first=order == "wxyz")
    same_sign = np.sign(np.sum(q * q_sp, axis=-1))[:, None]  # q and -q are one rotation
    np.testing.assert_allclose(q, same_sign * q_sp, rtol=0, atol=1e-15)
    w = q[:, 0] if order == "wxyz" else q[:, 3]
    assert np.all(w >= 0)
    np.testing.assert_allclose(np.linalg.norm(q, axis=-1), 1.0, rtol=0, atol=1e-15)
    # SciPy's quaternion back to the matrix, and our round trip R -> q -> R
    np.testing.assert_allclose(np.asarray(so3.from_quaternion(jnp.asarray(q_sp), order)), R, rtol=0, atol=1e-15)
    np.testing.assert_allclose(np.asarray(so3.from_quaternion(jnp.asarray(q), order)), R, rtol=0, atol=1e-15)


def test_quaternion_orders_are_a_permutation_and_need_naming():
    R = jnp.asarray(Rotation.from_rotvec([0.3, -1.2, 0.4]).as_matrix())
    q1, q2 = so3.to_quaternion(R, "wxyz"), so3.to_quaternion(R, "xyzw")
    np.testing.assert_array_equal(np.asarray(q2), np.asarray(q1)[[1, 2, 3, 0]])
    # the z-rotation by 90 degrees: w = x-less cos 45, z = sin 45
    qz = so3.to_quaternion(so3.exp(jnp.array([0.0, 0.0, jnp.pi / 2])), "wxyz")
    np.testing.assert_allclose(np.asarray(qz), [np.sqrt(0.5), 0, 0, np.sqrt(0.5)], atol=1e-16)
    with pytest.raises(TypeError):
        so3.to_quaternion(R)  # noqa: the order is required
    with pytest.raises(ValueError, match="order must be"):
        so3.to_quaternion(R, "xyz")
    with pytest.raises(ValueError, match="order must be"):
        so3.from_quaternion(q1, "wxzy")
    with pytest.raises(ValueError, match=r"shape \(\.\.\., 4\)"):
        so3.from_quaternion(jnp.ones(3), "wxyz")
    with pytest.raises(ValueError, match=r"shape \(\.\.\., 3, 3\)"):
        so3.to_quaternion(jnp.ones((3, 4)), "wxyz")


def test_from_quaternion_normalises():
    q = jnp.array([2.0, -0.4, 1.0, 0.2])
    np.testing.assert_allclose(np.asarray(so3.from_quaternion(q, "wxyz")),
                               np.asarray(so3.from_quaternion(q / jnp.linalg.norm(q), "wxyz")), atol=4e-16)


def test_quaternion_batched_jit_vmap_float32():
    R = jnp.asarray(Rotation.random(24, random_state=1).as_matrix()).reshape(2, 3, 4, 3, 3)
    q = so3.to_quaternion(R, "xyzw")
    assert q.shape == (2, 3, 4, 4)
    np.testing.assert_allclose(np.asarray(jax.jit(lambda R: so3.to_quaternion(R, "xyzw"))(R)), np.asarray(q),
                               atol=4e-16)
    np.testing.assert_allclose(np.asarray(jax.vmap(lambda R: so3.to_quaternion(R, "xyzw"))(R)), np.asarray(q),
                               atol=4e-16)
    np.testing.assert_allclose(np.asarray(jax.jit(jax.vmap(lambda q: so3.from_quaternion(q, "xyzw")))(q)),
                               np.asarray(R), atol=1e-15)
    R32 = R.astype(jnp.float32)
    q32 = so3.to_quaternion(R32, "wxyz")
    assert q32.dtype == jnp.float32 and so3.from_quaternion(q32, "wxyz").dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(so3.from_quaternion(q32, "wxyz")), np.asarray(R), atol=1e-6)


@pytest.mark.parametrize("angle", [0.0, 1e-9, 1e-4, 1.0, np.pi - 1e-4, np.pi - 1e-9, np.pi])
def test_quaternion_gradients_finite_near_0_and_pi(angle):
    n = jnp.array([0.6, 0.0, 0.8])
    w = jnp.array([0.3, -0.2, 0.5, 0.7])
    M = jnp.arange(9.0).reshape(3, 3)

    def f(v):
        return jnp.dot(w, so3.to_quaternion(so3.exp(v), "wxyz"))

    def g(q):
        return jnp.sum(M * so3.from_quaternion(q, "xyzw"))

    v = angle * n
    gf = jax.grad(f)(v)
    q = so3.to_quaternion(so3.exp(v), "xyzw")
    gg = jax.grad(g)(q)
    assert np.all(np.isfinite(gf)) and np.all(np.isfinite(gg))
    # against central differences (the w >= 0 branch is smooth away from w = 0, i.e. angle < pi)
    if angle < np.pi - 1e-3:
        e = 1e-6
        fd = np.array([(f(v + e * d) - f(v - e * d)) / (2 * e) for d in jnp.eye(3)])
        np.testing.assert_allclose(np.asarray(gf), fd, atol=1e-8)
    e = 1e-6
    fd = np.array([(g(q + e * d) - g(q - e * d)) / (2 * e) for d in jnp.eye(4)])
    np.testing.assert_allclose(np.asarray(gg), fd, atol=1e-7)


def test_quaternion_continuous():
    # three turns about a tilted axis in 0.3-rad frames: w = cos(theta/2) changes sign every turn
    axis = jnp.array([0.0, 0.6, 0.8])
    thetas = jnp.linspace(0.0, 6 * jnp.pi, 64)
    R = jax.vmap(lambda a: so3.exp(a * axis))(thetas)
    q = so3.to_quaternion(R, "wxyz")
    assert np.max(np.linalg.norm(np.diff(np.asarray(q), axis=0), axis=-1)) > 1.5  # w >= 0 jumps
    qc = so3.quaternion_continuous(q)
    steps = np.linalg.norm(np.diff(np.asarray(qc), axis=0), axis=-1)
    assert steps.max() < 0.31  # |dq| = 2 sin(dtheta / 4) ~ 0.15
    assert np.all(np.sum(np.asarray(qc[1:]) * np.asarray(qc[:-1]), axis=-1) > 0)
    # the exact continuous quaternion is (cos(theta/2), sin(theta/2) axis)
    exact = np.concatenate([np.cos(thetas / 2)[:, None], np.sin(thetas / 2)[:, None] * np.asarray(axis)], -1)
    np.testing.assert_allclose(np.asarray(qc), exact, atol=1e-14)
    # same rotations, the other order, another time axis, and jit
    np.testing.assert_allclose(np.asarray(so3.from_quaternion(qc, "wxyz")), np.asarray(R), atol=1e-15)
    q2 = so3.to_quaternion(jnp.stack([R, R]), "xyzw")  # (2, 64, 4): time is axis 1 (= -2)
    np.testing.assert_allclose(np.asarray(jax.jit(lambda q: so3.quaternion_continuous(q, axis=-2))(q2)),
                               np.asarray(jnp.stack([qc, qc])[..., [1, 2, 3, 0]]), atol=4e-16)
    with pytest.raises(ValueError, match="axis"):
        so3.quaternion_continuous(q, axis=-1)


@pytest.mark.parametrize("seq", ALL_SEQS)
def test_euler_matches_scipy(seq):
    rots = Rotation.random(200, random_state=3)
    R = rots.as_matrix()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SciPy warns at gimbal lock
        ang_sp = rots.as_euler(seq)
    ang = np.asarray(so3.to_euler(jnp.asarray(R), seq))
    assert _wrapped(ang, ang_sp).max() < 1e-13
    np.testing.assert_allclose(np.asarray(so3.from_euler(jnp.asarray(ang_sp), seq)),
                               Rotation.from_euler(seq, ang_sp).as_matrix(), rtol=0, atol=1e-15)
    np.testing.assert_allclose(np.asarray(so3.from_euler(jnp.asarray(ang), seq)), R, rtol=0, atol=2e-15)
    # ranges: the second angle in [0, pi] (proper Euler) or [-pi/2, pi/2] (Tait-Bryan)
    lo, hi = (0.0, np.pi) if seq[0].lower() == seq[2].lower() else (-np.pi / 2, np.pi / 2)
    assert np.all((ang[:, 1] >= lo) & (ang[:, 1] <= hi)) and np.all(np.abs(ang) <= np.pi)
    deg = np.asarray(so3.to_euler(jnp.asarray(R), seq, degrees=True))
    np.testing.assert_allclose(deg, np.rad2deg(ang), atol=1e-12)
    np.testing.assert_allclose(np.asarray(so3.from_euler(jnp.asarray(deg), seq, degrees=True)), R, atol=2e-15)


def test_euler_conventions_extrinsic_and_intrinsic():
    a, b, c = 0.3, -0.7, 1.9
    Rx, Ry, Rz = (so3.exp(jnp.asarray(v) * e) for v, e in zip((a, b, c), jnp.eye(3)))
    np.testing.assert_allclose(np.asarray(so3.from_euler(jnp.array([a, b, c]), "xyz")), np.asarray(Rz @ Ry @ Rx),
                               atol=1e-15)
    np.testing.assert_allclose(np.asarray(so3.from_euler(jnp.array([a, b, c]), "XYZ")), np.asarray(Rx @ Ry @ Rz),
                               atol=1e-15)
    # intrinsic "ZYX" (yaw, pitch, roll) is extrinsic "xyz" with the angles reversed
    np.testing.assert_allclose(np.asarray(so3.to_euler(Rz @ Ry @ Rx, "ZYX")), [c, b, a], atol=1e-15)


@pytest.mark.parametrize("seq", ["xyz", "XYZ", "zyx", "ZYX", "zxz", "ZXZ", "yxy", "XZX"])
@pytest.mark.parametrize("lock", ["zero", "pi"])
def test_euler_at_gimbal_lock(seq, lock):
    proper = seq[0].lower() == seq[2].lower()
    mid = {"zero": 0.0, "pi": np.pi}[lock] if proper else {"zero": np.pi / 2, "pi": -np.pi / 2}[lock]
    R = Rotation.from_euler(seq, [0.4, mid, -1.1]).as_matrix()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ang_sp = Rotation.from_matrix(R).as_euler(seq)
    ang = np.asarray(so3.to_euler(jnp.asarray(R), seq))
    assert ang[2] == 0.0 or ang[0] == 0.0  # one angle is set to 0 (the third of the rotation order)
    assert _wrapped(ang, ang_sp).max() < 1e-7  # SciPy's choice, to the lock tolerance
    np.testing.assert_allclose(np.asarray(so3.from_euler(jnp.asarray(ang), seq)), R, atol=1e-14)
    g = jax.grad(lambda R: jnp.sum(so3.to_euler(R, seq)))(jnp.asarray(R))
    assert np.all(np.isfinite(np.asarray(g)))


def test_euler_batched_jit_vmap_and_gradient():
    R = jnp.asarray(Rotation.random(12, random_state=2).as_matrix()).reshape(3, 4, 3, 3)
    ang = so3.to_euler(R, "ZYX")
    assert ang.shape == (3, 4, 3)
    np.testing.assert_allclose(np.asarray(jax.jit(lambda R: so3.to_euler(R, "ZYX"))(R)), np.asarray(ang), atol=1e-15)
    np.testing.assert_allclose(np.asarray(jax.vmap(lambda R: so3.to_euler(R, "ZYX"))(R)), np.asarray(ang), atol=1e-15)
    np.testing.assert_allclose(np.asarray(jax.jit(lambda a: so3.from_euler(a, "ZYX"))(ang)), np.asarray(R), atol=2e-15)
    w = jnp.array([0.3, -0.5, 0.9])
    v = jnp.array([0.3, -1.1, 2.0])

    def f(v):
        return jnp.dot(w, so3.to_euler(so3.exp(v), "XZX"))

    e = 1e-6
    fd = np.array([(f(v + e * d) - f(v - e * d)) / (2 * e) for d in jnp.eye(3)])
    np.testing.assert_allclose(np.asarray(jax.grad(f)(v)), fd, atol=1e-8)
    for a in (0.0, 1e-9, np.pi):
        assert np.all(np.isfinite(np.asarray(jax.grad(f)(a * jnp.array([0.0, 0.0, 1.0])))))


def test_euler_bad_sequences():
    R = jnp.eye(3)
    for seq in ("xy", "xyzz", "xYz", "xxz", "abc", 3):
        with pytest.raises(ValueError, match="seq"):
            so3.to_euler(R, seq)
        with pytest.raises(ValueError, match="seq"):
            so3.from_euler(jnp.zeros(3), seq)


def test_state_constructors():
    Pi = jnp.array([1.0, -2.0, 0.5])
    rot = Rotation.from_rotvec([0.2, -0.4, 1.3])
    R = rot.as_matrix()
    s = jaxrot.State.from_quaternion(jnp.asarray(rot.as_quat()), Pi, order="xyzw")
    np.testing.assert_allclose(np.asarray(s.R), R, atol=1e-15)
    np.testing.assert_array_equal(np.asarray(s.Pi), np.asarray(Pi))
    s = jaxrot.State.from_quaternion(jnp.asarray(rot.as_quat(scalar_first=True)), Pi, order="wxyz")
    np.testing.assert_allclose(np.asarray(s.R), R, atol=1e-15)
    s = jaxrot.State.from_euler(jnp.asarray(rot.as_euler("ZYX", degrees=True)), "ZYX", Pi, degrees=True)
    np.testing.assert_allclose(np.asarray(s.R), R, atol=1e-14)
    s = jaxrot.State.from_scipy(rot, Pi)
    np.testing.assert_allclose(np.asarray(s.R), R, atol=1e-15)
    s = jaxrot.State.from_scipy(Rotation.random(5, random_state=0), jnp.tile(Pi, (5, 1)))
    assert s.R.shape == (5, 3, 3) and s.Pi.shape == (5, 3)
    with pytest.raises(TypeError):
        jaxrot.State.from_quaternion(jnp.asarray(rot.as_quat()), Pi)  # noqa: order is required
    with pytest.raises(TypeError, match="Rotation"):
        jaxrot.State.from_scipy(R, Pi)
    with pytest.raises(ValueError, match="Pi"):
        jaxrot.State.from_euler(jnp.zeros(3), "xyz", jnp.zeros(2))
    # a State made from a quaternion runs
    p = problems.get("fast_top")
    q0 = so3.to_quaternion(p.state0.R, "wxyz")
    s0 = jaxrot.State.from_quaternion(q0, p.state0.Pi, order="wxyz")
    a = jaxrot.simulate("liemid_ea", p, 1e-3, 20, state0=s0).final.R
    b = jaxrot.simulate("liemid_ea", p, 1e-3, 20).final.R
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-14)


def _with_system(traj, problem):
    """A trajectory carrying its system (the driver fills it in; set here so the test does not depend on it)."""
    return dataclasses.replace(traj, system=problem.system)


def test_trajectory_views():
    p = problems.get("fast_top")
    traj = _with_system(jaxrot.simulate("liemid_ea", p, 1e-3, 400, saveat=jaxrot.SaveAt(steps=10)), p)
    R, Pi = np.asarray(traj.states.R), np.asarray(traj.states.Pi)
    n = R.shape[0]
    for order in ("wxyz", "xyzw"):
        q = np.asarray(traj.quaternion(order))
        assert q.shape == (n, 4)
        assert np.all(np.sum(q[1:] * q[:-1], axis=-1) > 0)  # continuous: the top spins 50 rad/s
        np.testing.assert_allclose(np.asarray(so3.from_quaternion(jnp.asarray(q), order)), R, atol=1e-15)
    # w >= 0 alone would jump here: the fast top turns many times in 0.4 s
    assert not np.any(np.asarray(so3.to_quaternion(traj.states.R, "wxyz"))[:, 0] < 0)
    assert np.any(np.asarray(traj.quaternion())[:, 0] < 0)
    np.testing.assert_allclose(traj.to_scipy().as_matrix(), R, atol=1e-15)
    assert traj.to_scipy().as_quat().shape == (n, 4)
    np.testing.assert_allclose(np.asarray(traj.euler("ZXZ")), Rotation.from_matrix(R).as_euler("ZXZ"), atol=1e-12)
    np.testing.assert_allclose(np.asarray(traj.euler("xyz", degrees=True)),
                               Rotation.from_matrix(R).as_euler("xyz", degrees=True), atol=1e-10)
    J = np.asarray(p.body.J)
    np.testing.assert_allclose(np.asarray(traj.omega_body), Pi / J, rtol=1e-15)
    np.testing.assert_allclose(np.asarray(traj.omega_world), np.einsum("nij,nj->ni", R, Pi / J), rtol=1e-14,
                               atol=1e-13)
    np.testing.assert_allclose(np.asarray(traj.L_world), np.einsum("nij,nj->ni", R, Pi), atol=1e-13)
    # energy = kinetic + potential (mgl up . R e_z), equal to the analysis module's; conserved to the method's error
    E = np.asarray(traj.energy)
    expected = 0.5 * np.sum(Pi * Pi / J, axis=-1) + 20.0 * R[:, 2, 2]
    np.testing.assert_allclose(E, expected, rtol=1e-14)
    np.testing.assert_allclose(E, np.asarray(jaxrot.analysis.energy(p, traj.states, traj.ts)), rtol=1e-14)
    assert np.ptp(E) / abs(E[0]) < 1e-3


def test_trajectory_views_of_a_batch():
    p = problems.get("fast_top")
    other = jaxrot.Problem(jaxrot.RigidBody(jnp.array([4.0, 5.0, 1.5])), p.torque, problems.get("slow_top").state0,
                           p.t_end, p.name, p.description)  # stacked problems share the static fields
    ps = [p, other]
    batch = jaxrot.stack_problems(ps)
    traj = _with_system(jaxrot.simulate("liemid_ea", batch, 1e-3, 100, saveat=jaxrot.SaveAt(steps=10)), batch)
    assert traj.quaternion().shape == (2, 11, 4) and traj.euler("XYZ").shape == (2, 11, 3)
    assert traj.to_scipy().as_matrix().reshape(-1, 3, 3).shape == (22, 3, 3)
    for k, p in enumerate(ps):
        one = _with_system(jaxrot.simulate("liemid_ea", p, 1e-3, 100, saveat=jaxrot.SaveAt(steps=10)), p)
        np.testing.assert_allclose(np.asarray(traj.energy[k]), np.asarray(one.energy), rtol=1e-13)
        np.testing.assert_allclose(np.asarray(traj.omega_body[k]), np.asarray(one.omega_body), rtol=1e-13)
        np.testing.assert_allclose(np.asarray(traj.quaternion()[k]), np.asarray(one.quaternion()), atol=1e-14)
    # one problem, a batch of initial states: the system has no batch axis
    states = jaxrot.State(jnp.stack([p.state0.R, other.state0.R]), jnp.stack([p.state0.Pi, other.state0.Pi]))
    shared = _with_system(jaxrot.simulate("liemid_ea", p, 1e-3, 100, saveat=jaxrot.SaveAt(steps=10), state0=states), p)
    assert shared.energy.shape == (2, 11) and shared.omega_world.shape == (2, 11, 3)
    for k in range(2):
        one = _with_system(jaxrot.simulate("liemid_ea", p, 1e-3, 100, saveat=jaxrot.SaveAt(steps=10),
                                           state0=jaxrot.State(states.R[k], states.Pi[k])), p)
        np.testing.assert_allclose(np.asarray(shared.energy[k]), np.asarray(one.energy), rtol=1e-13)
        np.testing.assert_allclose(np.asarray(shared.omega_world[k]), np.asarray(one.omega_world), atol=1e-12)


def test_trajectory_energy_without_potential_is_kinetic_and_system_required():
    p = problems.get("fast_top")
    damp = jaxrot.Problem(p.body, lambda t, R, Pi: -0.5 * R @ (Pi / p.body.J), p.state0, 1.0)
    traj = _with_system(jaxrot.simulate("liemid_ea", damp, 1e-3, 100, saveat=jaxrot.SaveAt(steps=10)), damp)
    Pi = np.asarray(traj.states.Pi)
    np.testing.assert_allclose(np.asarray(traj.energy), 0.5 * np.sum(Pi * Pi / np.asarray(p.body.J), -1), rtol=1e-15)
    assert np.all(np.diff(np.asarray(traj.energy)) < 0)  # damping dissipates
    bare = dataclasses.replace(traj, system=None)
    for what in ("omega_body", "omega_world", "energy"):
        with pytest.raises(ValueError, match="system"):
            getattr(bare, what)
    np.testing.assert_array_equal(np.asarray(bare.L_world), np.asarray(traj.L_world))  # needs no system
    assert bare.quaternion().shape == (11, 4)


def test_trajectory_save_load_round_trip_with_system(tmp_path):
    p = problems.get("slow_top")
    traj = _with_system(jaxrot.simulate("liemid_ea", p, 1e-3, 50, saveat=jaxrot.SaveAt(steps=10)), p)
    path = str(tmp_path / "run.npz")
    traj.save(path)
    back = jaxrot.load(path)
    np.testing.assert_array_equal(np.asarray(back.states.R), np.asarray(traj.states.R))
    np.testing.assert_array_equal(np.asarray(back.states.Pi), np.asarray(traj.states.Pi))
    np.testing.assert_array_equal(np.asarray(back.quaternion("xyzw")), np.asarray(traj.quaternion("xyzw")))
    # the system is not stored (a torque may be a Python function): attach it again for energies
    again = _with_system(back, p)
    np.testing.assert_array_equal(np.asarray(again.energy), np.asarray(traj.energy))


def _doc_code(name):
    import pathlib
    import re

    page = pathlib.Path(__file__).resolve().parents[1] / "docs" / "user_guide" / name
    return "\n".join(re.findall(r"```python\n(.*?)```", page.read_text(), re.S))


def test_rotations_page_example_runs():
    ns = {}
    exec(compile(_doc_code("rotations.md"), "rotations.md", "exec"), ns)
    np.testing.assert_allclose(np.asarray(ns["angles"][0]), [30.0, 10.0, -5.0], atol=1e-12)
    assert ns["quats"].shape == (101, 4) and ns["omega"].shape == (101, 3)
