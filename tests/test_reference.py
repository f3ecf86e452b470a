import jax
import numpy as np
import pytest
from scipy.integrate import solve_ivp

from jaxrot import problems, reference


@pytest.mark.parametrize("name,T", [("buss_torqued", 2.0), ("fast_top", 0.5), ("coulomb_wall_physical", 3.0)])
def test_reference_matches_scipy_dop853(name, T):
    p = problems.get(name)
    tr = reference.reference_solution(p, T, n_frames=4)
    f = jax.jit(reference.body_vector_field(p))
    y0 = np.concatenate([np.asarray(p.state0.R).ravel(), np.asarray(p.state0.Pi)])
    sol = solve_ivp(lambda t, y: np.asarray(f(t, y)), (0, T), y0, method="DOP853", rtol=1e-13, atol=1e-14,
                    t_eval=np.linspace(0, T, 5))
    ys = np.concatenate([np.asarray(tr.states.R).reshape(5, 9), np.asarray(tr.states.Pi)], axis=1)
    assert np.abs(ys - sol.y.T).max() < 1e-11
    np.testing.assert_allclose(tr.ts, np.linspace(0, T, 5), atol=1e-15)


def test_reference_stays_on_so3():
    p = problems.get("free_body_mz")
    R = reference.reference_solution(p, 20.0).final.R
    assert np.abs(np.asarray(R.T @ R) - np.eye(3)).max() < 1e-13


def test_reference_bad_span():
    with pytest.raises(ValueError, match="t_end"):
        reference.reference_solution(problems.get("fast_top"), 0.0)
