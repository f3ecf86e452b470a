"""Bad inputs: messages that name the argument the user gave, and (``on_invalid=``) runs that return
non-finite results with a per-body ``RESULTS.invalid_input`` instead of raising."""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrot
from jaxrot import problems

jax.config.update("jax_enable_x64", True)
P = problems.get("t_handle")


# --- messages that name the argument ---------------------------------------------------------------------------
@pytest.mark.parametrize("dt", [-1e-3, 0.0, float("nan")])
def test_a_step_that_is_not_positive_is_named_with_t1_as_with_n_steps(dt):
    with pytest.raises(ValueError, match=r"^dt must be finite and > 0, got (-0.001|0.0|nan)$"):
        jaxrot.simulate("buss4", P, dt, t1=1.0)
    with pytest.raises(ValueError, match=r"^dt must be finite and > 0"):
        jaxrot.simulate("buss4", P, dt, 10)


def test_an_inertia_tensor_given_as_moments_names_from_tensor():
    J = jnp.array([2.5, 3.0, 4.0])
    for build in (lambda: jaxrot.RigidBody(jnp.diag(J)), lambda: jaxrot.RigidBody(np.diag(J))):
        with pytest.raises(ValueError) as e:
            build()
        text = str(e.value)
        assert text.startswith("three principal moments J = (J1, J2, J3) were expected, got a 3x3 matrix")
        assert "jaxrot.RigidBody.from_tensor(I)" in text and "diagonalises" in text
    body, Q = jaxrot.RigidBody.from_tensor(np.diag(J))  # the remedy works on what was given
    np.testing.assert_allclose(np.sort(body.J), J)
    # three bodies' moments, all good, stay a batch of three; a bad non-symmetric batch is not a tensor
    assert jaxrot.RigidBody(jnp.array([[1.0, 2.0, 2.5], [2.0, 2.0, 2.0], [2.5, 2.0, 4.0]])).J.shape == (3, 3)
    with pytest.raises(ValueError, match=r"^principal moments J of body 1 must be positive"):
        jaxrot.RigidBody(jnp.array([[1.0, 2.0, 2.5], [2.0, -2.0, 2.0], [1.0, 2.0, 2.5]]))


def test_an_inertia_tensor_put_into_a_traced_problem_is_named_from_its_shape():
    J = jnp.array([2.5, 3.0, 4.0])

    def energy(J):
        p = eqx.tree_at(lambda p: p.body.J, P, J)  # as a fit puts a trial point in
        return jaxrot.simulate("buss4", p, 0.01, 2, state0=P.state0).final.Pi.sum()

    with pytest.raises(ValueError, match=r"^three principal moments .* got a 3x3 matrix: .*from_tensor"):
        jax.block_until_ready(jax.jit(energy)(jnp.diag(J)))


# --- on_invalid="nan": results an optimiser can use ------------------------------------------------------------
BAD_J = jnp.array([jnp.nan, 1.0, 1.0])  # (NaN, not inf: a run on inf moments stays finite)


def _with_J(J):
    return eqx.tree_at(lambda p: p.body.J, P, J)


def test_an_invalid_inertia_under_jit_gives_nan_and_its_result_instead_of_an_error():
    run = jax.jit(lambda J: jaxrot.simulate("buss4", _with_J(J), 0.01, 20, on_invalid="nan"))
    bad = run(BAD_J)
    assert bad.result == jaxrot.RESULTS.invalid_input and int(bad.failed_step) == 0
    assert np.all(np.isnan(bad.states.R)) and np.all(np.isnan(bad.states.Pi)) and np.all(np.isfinite(bad.ts))
    good = run(P.body.J)  # a valid input: the run as without the option
    plain = jax.jit(lambda J: jaxrot.simulate("buss4", _with_J(J), 0.01, 20))(P.body.J)
    assert good.result == jaxrot.RESULTS.successful and int(good.failed_step) == -1
    np.testing.assert_allclose(good.states.R, plain.states.R, rtol=0, atol=1e-15)
    with pytest.raises(ValueError, match=r"principal moments J must be finite"), jaxrot.simulation_errors():
        jax.block_until_ready(jax.jit(lambda J: jaxrot.simulate("buss4", _with_J(J), 0.01, 20).final.R)(BAD_J))


def test_vmap_and_grad_keep_the_valid_bodies_finite_and_unchanged():
    Js = jnp.stack([P.body.J, BAD_J, 1.5 * P.body.J, jnp.array([1.0, 1.0, 3.0])])  # the last: not physical

    def loss(J):
        tr = jaxrot.simulate("rk4", _with_J(J), 0.01, 20, on_invalid="nan")  # (rk4: its gradient compiles fast)
        return jnp.sum(tr.final.R[:, 0]), tr.result

    each = jax.vmap(jax.value_and_grad(loss, has_aux=True))
    (values, codes), grads = each(Js)
    assert str(codes) == "RESULTS per body (4 bodies): 2 successful, 2 invalid_input"
    assert np.all(np.isnan(np.asarray(values)[[1, 3]])) and np.all(np.isfinite(np.asarray(values)[[0, 2]]))
    assert np.all(np.isfinite(grads)) and np.all(np.asarray(grads)[[1, 3]] == 0)
    (values_valid, _), grads_valid = each(Js[jnp.array([0, 2])])  # the valid bodies alone
    assert np.all(np.abs(grads_valid) > 1e-6)
    np.testing.assert_allclose(grads[jnp.array([0, 2])], grads_valid, rtol=1e-12)
    np.testing.assert_allclose(values[jnp.array([0, 2])], values_valid, rtol=1e-14)


def test_a_batch_with_an_invalid_body_leaks_no_nan_into_a_shared_gradient():
    """One inertia shared by a batch whose third initial state is NaN: the loss over all bodies is NaN,
    and its gradient in the inertia is the gradient over the valid bodies alone."""
    R = jnp.stack([P.state0.R] * 3).at[2].set(jnp.nan)
    Pi = jnp.stack([P.state0.Pi, 0.5 * P.state0.Pi, P.state0.Pi])

    def loss(J, R, Pi):
        tr = jaxrot.simulate("rk4", _with_J(J), 0.01, 20, state0=jaxrot.State(R, Pi), on_invalid="nan")
        return jnp.sum(tr.final.R[:, :, 0]), tr

    (value, tr), g = jax.value_and_grad(loss, has_aux=True)(P.body.J, R, Pi)
    assert np.isnan(value) and np.all(np.isfinite(g))
    assert str(tr.result) == "RESULTS per body (3 bodies): 2 successful, 1 invalid_input"
    np.testing.assert_array_equal(tr.failed_step, [-1, -1, 0])
    g_valid = jax.grad(lambda J: loss(J, R[:2], Pi[:2])[0])(P.body.J)
    assert np.all(np.abs(g_valid) > 1e-6)
    np.testing.assert_allclose(g, g_valid, rtol=1e-12)


def test_a_concrete_bad_state_raises_by_default_and_is_marked_when_asked():
    R = jnp.stack([P.state0.R, 2.0 * jnp.eye(3)])
    state = jaxrot.State(R, jnp.stack([P.state0.Pi] * 2))
    with pytest.raises(ValueError, match="initial attitude R of body 1 is not orthogonal"):
        jaxrot.simulate("buss4", P, 0.01, 10, state0=state)
    tr = jaxrot.simulate("rk4", P, 0.01, 10, state0=state, on_invalid="nan",
                         saveat=jaxrot.SaveAt(dense=True))  # throw=True: the valid body's steps only
    assert np.all(np.isfinite(tr.states.R[0])) and np.all(np.isnan(tr.states.R[1]))
    mid = tr.evaluate(0.05)
    assert np.all(np.isfinite(mid.R[0])) and np.all(np.isnan(mid.R[1]))
    with pytest.raises(ValueError, match='on_invalid must be "raise" or "nan"'):
        jaxrot.simulate("buss4", P, 0.01, 10, on_invalid="ignore")


def test_a_traced_step_or_start_that_is_not_finite_marks_every_body_and_the_times():
    run = jax.jit(lambda dt, t0: jaxrot.simulate("buss4", P, dt, 10, t0=t0, on_invalid="nan"))
    for dt, t0 in ((jnp.nan, 0.0), (-0.01, 0.0), (0.01, jnp.inf)):
        tr = run(dt, t0)
        assert tr.result == jaxrot.RESULTS.invalid_input and np.all(np.isnan(tr.ts)) and np.all(np.isnan(tr.final.R))
    tr = run(0.01, 0.0)
    assert tr.result == jaxrot.RESULTS.successful and np.all(np.isfinite(tr.ts))


def test_an_error_controlled_run_marks_its_invalid_bodies_too():
    def final(J):
        tr = jaxrot.simulate("buss4(3)", _with_J(J), t1=1.0, stepsize=jaxrot.Adaptive(1e-8, 1e-8), on_invalid="nan")
        return jnp.sum(tr.final.R[:, 0]), tr.result, tr.controller.err_estimate

    values, codes, errors = jax.vmap(final)(jnp.stack([P.body.J, BAD_J]))
    assert str(codes) == "RESULTS per body (2 bodies): 1 successful, 1 invalid_input"
    assert np.isfinite(values[0]) and np.isnan(values[1])
    assert 0 < errors[0] <= 1 and np.isnan(errors[1])  # the stand-in's steps are not reported as the body's


@pytest.mark.slow  # the reverse mode of an error-controlled loop compiles for seconds
def test_an_error_controlled_run_with_an_invalid_body_has_finite_gradients():
    def final(J):
        tr = jaxrot.simulate("buss4(3)", _with_J(J), t1=1.0, stepsize=jaxrot.Adaptive(1e-8, 1e-8), on_invalid="nan")
        return jnp.sum(tr.final.R[:, 0])

    values, grads = jax.vmap(jax.value_and_grad(final))(jnp.stack([P.body.J, BAD_J]))
    assert np.isfinite(values[0]) and np.isnan(values[1]) and np.all(np.isfinite(grads)) and np.all(grads[1] == 0)
    assert np.all(np.abs(grads[0]) > 1e-6)


# --- an optimiser whose line search steps outside the physical region -------------------------------------------
def test_lbfgs_fitting_the_moments_directly_backs_away_from_invalid_trial_points_and_reaches_the_optimum():
    """optax's L-BFGS fits the moments themselves (no parametrisation keeps them physical) to noise-free
    attitudes of a free body with known momentum: its zoom line search tries a point that is no body's
    moments, where the loss is NaN, backs away, and the fit reaches the moments. The same loss without
    ``on_invalid="nan"`` raises at that point, inside the compiled update."""
    import optax

    truth = problems.t_handle(omega0=(0.3, 2.0, 0.2), t_end=2.0)
    n_obs, sub, dt_obs = 20, 2, 0.1
    at = jaxrot.SaveAt(steps=sub, t0=False)
    observed = jaxrot.simulate("rk4", truth, dt_obs / sub, n_obs * sub, saveat=at).states.R
    tried = []

    def loss(J, on_invalid="nan"):
        tr = jaxrot.simulate("rk4", eqx.tree_at(lambda p: p.body.J, truth, J), dt_obs / sub, n_obs * sub, saveat=at,
                             on_invalid=on_invalid, throw=False)
        jax.debug.callback(lambda J, code: tried.append((np.asarray(J), int(code))), J, tr.result._value)
        r = jax.vmap(lambda A, B: jaxrot.so3.log(A.T @ B))(observed, tr.states.R)
        return 0.5 * jnp.sum(r * r) / 1e-6  # attitudes to 1e-3 rad

    opt = optax.lbfgs()

    @jax.jit
    def update(J, state):
        value, grad = optax.value_and_grad_from_state(loss)(J, state=state)
        updates, state = opt.update(grad, state, J, value=value, grad=grad, value_fn=loss)
        return optax.apply_updates(J, updates), state, optax.tree.norm(grad)

    J, state = jnp.array([2.0, 1.6, 1.2]), opt.init(jnp.array([2.0, 1.6, 1.2]))  # truth: (2.5, 1.4, 1.3)
    for _ in range(40):
        with jax.numpy_dtype_promotion("standard"):  # optax's line search mixes int32 and int64
            J, state, gnorm = update(J, state)
        if gnorm < 1e-5:
            break
    np.testing.assert_allclose(J, truth.body.J, rtol=1e-7)
    outside = [J for J, code in tried if code == int(jaxrot.RESULTS.invalid_input._value)]
    assert outside, "the line search never left the physical region: the test shows nothing"
    with pytest.raises(ValueError, match="principal moments J"):
        jaxrot.RigidBody(outside[0])
    with pytest.raises(ValueError, match="principal moments J"), jaxrot.simulation_errors():
        jax.block_until_ready(jax.jit(functools.partial(loss, on_invalid="raise"))(jnp.asarray(outside[0])))
