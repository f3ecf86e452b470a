"""The Groningen eight-particle spring book and its rigid-body counterpart."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrot
from jaxrot import analysis, particles

from jaxrot.experiments.groningen import spin_rate


@pytest.fixture(scope="module")
def book():
    return particles.SpringBook.cuboid(0.2, 1.0, 1.5, k_over_m=2000.0)


def test_printed_acceleration_and_pair_symmetry(book):
    X = book.X_rest * 1.01 + 0.001 * jnp.asarray(np.random.default_rng(0).normal(size=(8, 3)))
    a = particles.acceleration(book, X)
    # the slide's formula, written directly
    ref = np.zeros((8, 3))
    X0, Xn = np.asarray(book.X_rest), np.asarray(X)
    for i in range(8):
        for j in range(8):
            if i != j:
                d0, d = np.linalg.norm(X0[i] - X0[j]), np.linalg.norm(Xn[i] - Xn[j])
                ref[i] += 2000.0 * (d0 / d - 1.0) * (Xn[i] - Xn[j])
    np.testing.assert_allclose(a, ref, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(a.sum(0), 0.0, atol=1e-9)  # central pair forces


def test_rest_shape_with_rigid_spin_has_no_spring_force(book):
    s = particles.spin(book, jnp.array([0.0, 3.0, 0.03]))
    np.testing.assert_allclose(particles.acceleration(book, s.X), 0.0, atol=1e-12)
    L = particles.angular_momentum(book, s)
    body = book.rigid_body()
    np.testing.assert_allclose(L, body.J * jnp.array([0.0, 3.0, 0.03]), rtol=1e-12)  # I omega


@pytest.mark.parametrize("scheme", particles.SCHEMES)
def test_linear_momentum_is_exact(book, scheme):
    s0 = particles.spin(book, jnp.array([0.3, 3.0, 0.1]))
    s0 = particles.ParticleState(s0.X, s0.V + jnp.array([0.5, -0.2, 0.1]))
    tr = particles.simulate_particles(book, s0, 2e-4, 5000, save_every=500, scheme=scheme)
    P = particles.linear_momentum(book, tr.states)
    assert float(jnp.abs(P - P[0]).max()) <= 1e-12


def test_orders_of_the_schemes(book):
    """The printed Euler and symplectic Euler are first order, velocity Verlet second (error in the
    velocities, against a fine Verlet reference; symplectic Euler's positions are those of a
    leapfrog and come out second order, its velocities lag half a step)."""
    s0 = particles.spin(book, jnp.array([0.3, 3.0, 0.1]))
    T = 0.05
    ref = particles.simulate_particles(book, s0, T / 8192, 8192, save_every=8192, scheme="verlet").states.V[-1]

    def err(scheme, n):
        V = particles.simulate_particles(book, s0, T / n, n, save_every=n, scheme=scheme).states.V[-1]
        return float(jnp.abs(V - ref).max())

    ns = [64, 128, 256]
    for scheme, order in [("euler", 1), ("symplectic_euler", 1), ("verlet", 2)]:
        e = [err(scheme, n) for n in ns]
        slope = analysis.observed_order([T / n for n in ns], e)
        assert abs(slope - order) <= 0.15, (scheme, e, slope)


def test_normalisation_keeps_energy_and_drains_rotation(book):
    s0 = particles.spin(book, jnp.asarray(spin_rate(1)))
    tr = particles.simulate_particles(book, s0, 2e-4, 20000, save_every=1000, scheme="euler", normalize=True)
    E = particles.energy(book, tr.states)
    assert float(jnp.abs(E / E[0] - 1).max()) <= 1e-12
    L = jnp.linalg.norm(particles.angular_momentum(book, tr.states), axis=-1)
    assert float(L[-1] / L[0]) < 0.5  # "angular momentum is transformed into vibration"
    raw = particles.simulate_particles(book, s0, 2e-4, 20000, save_every=20000, scheme="euler")
    assert float(particles.energy(book, raw.states)[-1] / E[0]) > 10  # and without it, it explodes


def test_intermediate_axis_flip_matches_the_rigid_body(book):
    """Stiff springs: the particle book's first flip within 10% of the rigid body's (measured 0.3%)."""
    w = spin_rate(1)
    tr = particles.simulate_particles(book, particles.spin(book, jnp.asarray(w)), 2e-4, 25000, save_every=50,
                                      scheme="verlet")
    t_part = analysis.first_sign_change(np.asarray(tr.ts), np.asarray(particles.axis_momentum_cosine(book, tr.states.X, tr.states.V, 1)))
    body = book.rigid_body()
    p = jaxrot.Problem(body, jaxrot.torques.FreeTorque(), jaxrot.State(jnp.eye(3), body.J * jnp.asarray(w)), 5.0)
    trr = jaxrot.simulate("buss4", p, 1e-3, 5000, saveat=jaxrot.SaveAt(steps=5))
    t_rigid = analysis.first_sign_change(np.asarray(trr.ts), np.asarray(analysis.body_axis_momentum_cosine(trr.states, 1)))
    assert t_part is not None and t_rigid is not None
    assert abs(t_part / t_rigid - 1) <= 0.10
    for a in (0, 2):  # and the other two axes are stable
        w = spin_rate(a)
        tr = particles.simulate_particles(book, particles.spin(book, jnp.asarray(w)), 2e-4, 25000, save_every=50,
                                          scheme="verlet")
        assert np.asarray(particles.axis_momentum_cosine(book, tr.states.X, tr.states.V, a)).min() > 0.99


def test_vmap_over_spring_constants_and_gradient(book):
    s0 = particles.spin(book, jnp.array([0.0, 3.0, 0.03]))

    def final_energy(k):
        b = particles.SpringBook(book.X_rest, k_over_m=k)
        tr = particles.simulate_particles(b, s0, 2e-4, 200, save_every=200, scheme="verlet")
        return particles.energy(b, jax.tree_util.tree_map(lambda x: x[-1], tr.states))

    ks = jnp.array([500.0, 2000.0, 8000.0])
    Es = jax.vmap(final_energy)(ks)
    np.testing.assert_allclose(Es, [final_energy(k) for k in ks], rtol=1e-13)
    g = jax.grad(final_energy)(2000.0)
    e = 1.0
    fd = (final_energy(2000.0 + e) - final_energy(2000.0 - e)) / (2 * e)
    np.testing.assert_allclose(g, fd, rtol=1e-4, atol=1e-10)


def test_from_points_and_bad_input(book):
    body, Q = jaxrot.RigidBody.from_points(np.asarray(book.X_rest))
    np.testing.assert_allclose(sorted(np.asarray(body.J)), sorted(np.asarray(book.rigid_body().J)), rtol=1e-12)
    with pytest.raises(ValueError):
        particles.SpringBook(jnp.zeros((8, 3)))
    with pytest.raises(ValueError):
        particles.SpringBook.cuboid(k_over_m=-1.0)
    with pytest.raises(ValueError):
        particles.simulate_particles(book, particles.spin(book, jnp.zeros(3)), 0.0, 10)
    with pytest.raises(ValueError):
        particles.simulate_particles(book, particles.spin(book, jnp.zeros(3)), 1e-3, 10, scheme="rk4")
    with pytest.raises(ValueError):
        jaxrot.RigidBody.from_points(np.zeros((2, 3)))
