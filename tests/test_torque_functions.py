"""Torques written as plain functions: jaxrot.Torque and a callable given to Problem."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jaxrot
from jaxrot import problems
from jaxrot.physics.torques import FreeTorque, GravityTorque, Torque

UP = jnp.array([0.0, 0.0, 1.0])


def gravity_world(t, R, Pi):
    """Krysl's heavy top as a plain function: -mgl (R e_z) x up, mgl = 20."""
    return -20.0 * jnp.cross(R[:, 2], UP)


def gravity_body(t, R, Pi, p):
    """The same torque in the body frame, R^T tau = -mgl e_z x (R^T up), mgl from args (dtype-generic)."""
    ez = jnp.asarray(UP, R.dtype)
    return -p["mgl"] * jnp.cross(ez, R.T @ ez)


def gravity_potential(t, R, p):
    return p["mgl"] * R[2, 2]


def test_exports():
    assert jaxrot.Torque is Torque and jaxrot.torques is jaxrot.physics.torques
    assert issubclass(Torque, jaxrot.torques.AbstractTorque)


@pytest.mark.parametrize("method", ["buss4", "lie_taylor5", "liemid_ea"])
def test_plain_function_gravity_matches_gravity_torque(method):
    p = problems.get("fast_top")
    q = jaxrot.Problem(p.body, gravity_world, p.state0, p.t_end)  # the callable is wrapped
    assert isinstance(q.torque, Torque) and q.torque.frame == "world" and q.torque.potential(0.0, jnp.eye(3)) is None
    a = jaxrot.simulate(method, p, 2e-3, 200, saveat=jaxrot.SaveAt(steps=20))
    b = jaxrot.simulate(method, q, 2e-3, 200, saveat=jaxrot.SaveAt(steps=20))
    assert float(jnp.max(jnp.abs(a.states.R - b.states.R))) <= 1e-13
    assert float(jnp.max(jnp.abs(a.states.Pi - b.states.Pi))) <= 1e-13 * float(jnp.max(jnp.abs(a.states.Pi)))
    # and in the body frame, with the parameter in args and the potential given
    tb = Torque(gravity_body, frame="body", args={"mgl": jnp.asarray(20.0)}, potential=gravity_potential)
    c = jaxrot.simulate(method, jaxrot.Problem(p.body, tb, p.state0, p.t_end), 2e-3, 200, saveat=jaxrot.SaveAt(steps=20))
    assert float(jnp.max(jnp.abs(a.states.R - c.states.R))) <= 1e-13
    assert float(jnp.max(jnp.abs(a.states.Pi - c.states.Pi))) <= 1e-13 * float(jnp.max(jnp.abs(a.states.Pi)))


def test_body_frame_and_potential_values():
    R = jaxrot.so3.exp(jnp.array([0.3, -0.7, 1.1]))
    Pi = jnp.array([0.4, -1.0, 2.0])
    g = GravityTorque(mgl=20.0)
    tb = Torque(gravity_body, frame="body", args={"mgl": jnp.asarray(20.0)}, potential=gravity_potential)
    np.testing.assert_allclose(np.asarray(tb(0.0, R, Pi)), np.asarray(g(0.0, R, Pi)), atol=1e-13)
    np.testing.assert_allclose(float(tb.potential(0.0, R)), float(g.potential(0.0, R)), rtol=1e-15)
    # the potential really is the torque's: tau = -d/de V(exp(hat e) R) at e = 0
    dV = jax.grad(lambda e: tb.potential(0.0, jaxrot.so3.exp(e) @ R))(jnp.zeros(3))
    np.testing.assert_allclose(np.asarray(-dV), np.asarray(tb(0.0, R, Pi)), atol=1e-13)
    # energies include it: the analysis energy of a run equals GravityTorque's
    p = problems.get("slow_top")
    q = jaxrot.Problem(p.body, tb, p.state0, p.t_end)
    tr = jaxrot.simulate("liemid_ea", q, 1e-2, 50, saveat=jaxrot.SaveAt(steps=10))
    np.testing.assert_allclose(np.asarray(jaxrot.analysis.energy(q, tr.states, tr.ts)),
                               np.asarray(jaxrot.analysis.energy(p, tr.states, tr.ts)), rtol=1e-14)


def test_potential_optional_means_kinetic_energy_only():
    p = problems.get("fast_top")
    q = jaxrot.Problem(p.body, Torque(gravity_world), p.state0, p.t_end)
    assert q.torque.potential(0.0, p.state0.R) is None
    tr = jaxrot.simulate("liemid_ea", q, 1e-3, 10, saveat=jaxrot.SaveAt(steps=5))
    ke = 0.5 * jnp.sum(tr.states.Pi ** 2 / p.body.J, axis=-1)
    np.testing.assert_array_equal(np.asarray(jaxrot.analysis.energy(q, tr.states, tr.ts)), np.asarray(ke))


def test_free_only_methods_refuse_a_function_torque_clearly():
    p = problems.get("free_body_mz")
    q = jaxrot.Problem(p.body, lambda t, R, Pi: jnp.zeros(3), p.state0, p.t_end)
    for method in ("buss4_ep", "split4_231"):
        with pytest.raises(ValueError, match="torque-free"):
            jaxrot.simulate(method, q, 1e-2, 10)


def test_grad_with_respect_to_args_through_simulate():
    p = problems.get("fast_top")

    def final_z(args, torque_of):
        q = jaxrot.Problem(p.body, torque_of(args), p.state0, p.t_end)
        tr = jaxrot.simulate("rk4", q, 2e-3, 50)
        return tr.final.R[0, 2] + 0.1 * tr.final.Pi[1]

    def fn(args):  # world frame: rk4 does not keep R orthogonal, so R^T up would differ from R^-1 up
        return Torque(lambda t, R, Pi, a: -a["mgl"] * jnp.cross(R[:, 2], UP), args=args)

    args = {"mgl": jnp.asarray(20.0)}
    g = jax.grad(final_z)(args, fn)["mgl"]
    # the same derivative through GravityTorque's own leaf, and by central differences
    g_ref = jax.grad(lambda m: final_z(m, lambda m: GravityTorque(mgl=m)))(jnp.asarray(20.0))
    e = 1e-5
    fd = (final_z({"mgl": jnp.asarray(20.0 + e)}, fn) - final_z({"mgl": jnp.asarray(20.0 - e)}, fn)) / (2 * e)
    np.testing.assert_allclose(float(g), float(g_ref), rtol=1e-12)
    np.testing.assert_allclose(float(g), float(fd), rtol=1e-6)
    assert abs(float(g)) > 1e-4  # a derivative that can fail


def test_args_batch_with_vmap():
    p = problems.get("slow_top")

    def final_R(c):
        torque = Torque(lambda t, R, Pi, c: -c * R @ (Pi / p.body.J), args=c)
        return jaxrot.simulate("liemid_ea", jaxrot.Problem(p.body, torque, p.state0, 1.0), 1e-2, 20).final.R

    cs = jnp.array([0.0, 0.5, 1.0])
    batched = jax.vmap(final_R)(cs)
    for k in range(3):
        np.testing.assert_allclose(np.asarray(batched[k]), np.asarray(final_R(cs[k])), atol=1e-14)
    assert float(jnp.max(jnp.abs(batched[0] - batched[2]))) > 1e-3


def test_damping_fit_recovers_c():
    """A damping torque written as a function, its coefficient fitted with optax (Adam) to noisy
    simulated body rates, through simulate: recovered to 1%."""
    J = jnp.array([2.5, 1.4, 1.3])
    state0 = jaxrot.State(jnp.eye(3), J * jnp.array([0.3, 2.0, 0.2]))
    c_true, sigma, n_obs = 0.3, 1e-2, 20

    def rates(c):
        torque = Torque(lambda t, R, Pi, c: -c * R @ (Pi / J), args=c)
        tr = jaxrot.simulate("rk4", jaxrot.Problem(jaxrot.RigidBody(J), torque, state0, 2.0), 0.02, 5 * n_obs,
                             saveat=jaxrot.SaveAt(steps=5))
        return tr.states.Pi[1:] / J

    observed = rates(jnp.asarray(c_true)) + sigma * jax.random.normal(jax.random.PRNGKey(1), (n_obs, 3))

    @jax.jit
    def loss(log_c):
        return 0.5 * jnp.sum(((rates(jnp.exp(log_c)) - observed) / sigma) ** 2)

    value_and_grad = jax.jit(jax.value_and_grad(loss))
    opt = optax.adam(0.1)
    log_c = jnp.log(jnp.asarray(0.1))
    with jax.numpy_dtype_promotion("standard"):  # optax's bias correction mixes a float and an int32 count
        state = opt.init(log_c)
        for _ in range(150):
            _, g = value_and_grad(log_c)
            updates, state = opt.update(g, state)
            log_c = optax.apply_updates(log_c, updates)
    c = float(jnp.exp(log_c))
    assert abs(c / c_true - 1) < 0.01, c
    # at the minimum of the loss to 0.1% in c (not merely near the truth by chance)
    assert float(loss(log_c)) <= min(float(loss(log_c + 1e-3)), float(loss(log_c - 1e-3)))


def test_bad_functions_fail_before_anything_runs():
    p = problems.get("fast_top")
    seen = []

    def recording(t, R, Pi):
        seen.append(type(R))
        return -0.1 * Pi

    jaxrot.Problem(p.body, recording, p.state0, 1.0)
    assert seen and all(issubclass(s, jax.core.Tracer) for s in seen)  # evaluated abstractly (eval_shape)

    def two_args(t, R):
        return R[0]

    def wrong_shape(t, R, Pi):
        return Pi[:2]

    def returns_matrix(t, R, Pi):
        return R

    def with_params(t, R, Pi, c):
        return -c * Pi

    def raises(t, R, Pi):
        return R @ jnp.ones(4)

    cases = [(two_args, "two_args.*2 positional"), (wrong_shape, r"wrong_shape.*shape \(3,\)"),
             (returns_matrix, r"returns_matrix.*shape \(3,\)"), (with_params, r"with_params.*Torque\(fn, args"),
             (raises, "raises.*failed"), (lambda t, R, Pi: 1.0, "<lambda>.*array of shape")]
    for fn, match in cases:
        with pytest.raises(TypeError, match=match):
            jaxrot.Problem(p.body, fn, p.state0, 1.0)
    with pytest.raises(TypeError, match="AbstractTorque"):
        jaxrot.Problem(p.body, 3.0, p.state0, 1.0)
    with pytest.raises(TypeError, match="with_params.*shape"):
        Torque(with_params, args=jnp.ones(2))  # -c * Pi with c of shape (2,) does not broadcast
    with pytest.raises(TypeError, match="args were given"):
        Torque(gravity_world, args=1.0)
    with pytest.raises(TypeError, match="potential.*scalar"):
        Torque(gravity_world, potential=lambda t, R: R[2])
    with pytest.raises(TypeError, match="potential"):
        Torque(gravity_world, potential=lambda t: 0.0)
    with pytest.raises(ValueError, match="frame"):
        Torque(gravity_world, frame="inertial")
    with pytest.raises(TypeError, match="callable"):
        Torque("gravity")


def test_float32_run():
    p = jaxrot.cast(problems.get("fast_top"), jnp.float32)
    q = jaxrot.Problem(p.body, Torque(gravity_body, frame="body", args={"mgl": jnp.asarray(20.0)}), p.state0, 1.0)
    q = jaxrot.cast(q, jnp.float32)
    tr = jaxrot.simulate("liemid_ea", q, 1e-3, 50)
    ref = jaxrot.simulate("liemid_ea", p, 1e-3, 50)
    assert tr.states.R.dtype == jnp.float32
    assert float(jnp.max(jnp.abs(tr.final.R - ref.final.R))) < 1e-4


def test_free_torque_unchanged():
    assert FreeTorque().is_free and not Torque(gravity_world).is_free


def test_torques_page_example_runs():
    import pathlib
    import re

    page = pathlib.Path(__file__).resolve().parents[1] / "docs" / "user_guide" / "torques.md"
    ns = {}
    exec(compile("\n".join(re.findall(r"```python\n(.*?)```", page.read_text(), re.S)), "torques.md", "exec"), ns)
    assert isinstance(ns["torque"], Torque) and ns["problem"].torque.frame == "world"


def test_energy_projection_step_refuses_a_function_torque_clearly():
    """Called directly (the driver refuses earlier), the EP step names what it needs."""
    p = problems.get("free_body_mz")
    system = jaxrot.System(p.body, lambda t, R, Pi: jnp.zeros(3))
    ep = jaxrot.get("buss4_ep")
    aux = ep.init(system, 0.0, p.state0, 1e-2)
    with pytest.raises(ValueError, match="torque-free problems.*got Torque; use a torque-capable method"):
        ep.step(system, 0.0, p.state0, aux, 1e-2)
