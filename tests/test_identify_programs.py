"""The identification's shortcuts to fewer compiled programs give the fits they replace: a throw fitted
alone through the joint fit's program (empty rows after it) is the fit of that throw alone, the rates
of a fit without attitudes are those the attitude's interpolation gives, and the rms residual taken
from the cost is the one from the residuals."""

import numpy as np
import pytest

from jaxrot.studies import identify as idf
from jaxrot.studies import identify_model as im
from jaxrot.studies.identify_search import make_model
from jaxrot.studies.identify_synthetic import synthetic_throws

RATIOS = (0.3445, 0.6763, 1.0)
OPTIONS = idf.IdentifyOptions(starts=2)
OBSERVE = idf.Gyroscope(bias="shared")


@pytest.fixture(scope="module")
def two_throws():
    throws, truth = synthetic_throws(RATIOS, 2, seed=5, duration=(0.5, 0.6), bias_per_throw=False)
    return throws, truth


@pytest.mark.slow  # two fits' programs; the default run goes through the rows in test_identify.py's
# test_cli_fits_the_phyphox_book (jaxrot fit: analyse's per-throw fits)
def test_a_throw_fitted_through_the_joint_programs_rows_is_the_throw_fitted_alone(two_throws):
    throws, truth = two_throws
    shape = (max(len(t.ts) for t in throws), max(t.duration for t in throws))
    start = {"omega0": truth["omega0"][:1], "bias": truth["bias"][0]}
    kw = dict(torque=None, misalignment=False, ratios=np.asarray(RATIOS), start=start, options=OPTIONS)
    alone = idf.identify([throws[0]], OBSERVE, _shape=shape, **kw)
    rows = idf.identify([throws[0]], OBSERVE, _shape=shape + (len(throws),), **kw)
    assert rows.own.shape == alone.own.shape == (1, 3)
    assert rows.iterations == alone.iterations and rows.n_params == alone.n_params
    assert rows.n_residuals == alone.n_residuals
    for name in ("ratios", "ratios_std", "bias", "bias_std", "omega0", "omega0_std"):
        np.testing.assert_allclose(getattr(rows, name), getattr(alone, name), rtol=1e-9, atol=1e-14, err_msg=name)
    np.testing.assert_allclose(rows.cost, alone.cost, rtol=1e-12)
    np.testing.assert_allclose(rows.sigma_gyro, alone.sigma_gyro, rtol=1e-12)


def test_rates_without_the_attitude_are_the_interpolated_ones(two_throws):
    throws, _ = two_throws
    gyro = im.Layout(n_torque=1, misalignment=True, scale=False, bias="shared", gyro=True, attitudes=False)
    both = im.Layout(n_torque=1, misalignment=True, scale=False, bias="shared", gyro=True, attitudes=True)
    options = idf.IdentifyOptions()
    dyn = np.concatenate([im.u_from_moments(RATIOS), [4e-4]])
    ts = throws[0].ts - throws[0].ts[0]
    omega0 = im.initial_rates(throws[0])
    rates, R = make_model(throws, gyro, im.QUADRATIC_DRAG, options).dynamics(dyn, omega0, ts)
    rates_both, R_both = make_model(throws, both, im.QUADRATIC_DRAG, options).dynamics(dyn, omega0, ts)
    assert R is None and R_both.shape == (len(ts), 3, 3)
    np.testing.assert_array_equal(np.asarray(rates), np.asarray(rates_both))


def test_the_rms_residual_from_the_cost_is_the_one_from_the_residuals(two_throws):
    """A least-squares fit of rates alone takes its rms residual from the cost: the rms of the
    measured less the fitted rates (:meth:`Fit.residuals`, a program of its own) over every sample."""
    throws, truth = two_throws
    fit = idf.identify(throws, OBSERVE, torque=None, misalignment=False, ratios=np.asarray(RATIOS),
                       start={"omega0": truth["omega0"], "bias": truth["bias"][0]}, options=OPTIONS)
    r = np.concatenate([fit.residuals(k) for k in range(len(throws))])
    assert fit.sigma_gyro == pytest.approx(np.sqrt(np.mean(r * r)), rel=1e-9)


def test_the_scatter_s_p_value_is_the_upper_incomplete_gamma_function():
    """The chi2 survival function of an even dof in closed form, as the scatter check takes it (no
    compiled special function): against JAX's regularised upper incomplete gamma function."""
    import jax.scipy.special as sp

    from jaxrot.studies.identify_results import chi2_survival

    for dof in (2, 4, 10, 198):
        for x in (0.0, 1e-3, 2.2, 50.0, 175.3, 2000.0):
            want = float(sp.gammaincc(dof / 2, x / 2))
            assert chi2_survival(x, dof) == pytest.approx(want, rel=1e-12, abs=1e-300), (dof, x)
    with pytest.raises(ValueError, match="even dof"):
        chi2_survival(1.0, 3)
