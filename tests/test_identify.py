"""Identification of a thrown body from gyroscope traces: recovery and coverage on synthetic throws
(integrated by SciPy's DOP853, independently of the fit), the loss's derivatives against central
differences, the command line on a phyphox file, and every refusal of bad data."""

import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrot.geometry import so3 as jaxrot_so3
from jaxrot.present import cli
from jaxrot.studies import identify as idf
from jaxrot.studies import identify_model as im
from jaxrot.studies import sensors
from jaxrot.studies.identify_search import linearise_all, make_model, residuals_all
from jaxrot.studies.identify_synthetic import synthetic_throws

BOOK_CSV = pathlib.Path(__file__).resolve().parent / "data" / "phyphox_book_throws.csv"
BOOK = (0.3445, 0.6763, 1.0)
HEADER = '"Time (s)","Gyroscope x (rad/s)","Gyroscope y (rad/s)","Gyroscope z (rad/s)","Absolute (rad/s)"'
#: one search throw: the joint search and each throw's fit share one compiled program
OPTIONS = idf.IdentifyOptions(candidates=512, search_throws=1)
OBSERVE = idf.Gyroscope(bias="per_throw")


@pytest.fixture(scope="module")
def synthetic():
    throws, truth = synthetic_throws(BOOK, 4, seed=11, kappa=4e-4, duration=(0.7, 1.1))
    joint = idf.identify(throws, OBSERVE, options=OPTIONS)
    each = idf.identify_each(throws, OBSERVE, options=OPTIONS)
    return throws, truth, joint, each


def test_joint_fit_recovers_the_body(synthetic):
    throws, truth, joint, _ = synthetic
    r = np.asarray(truth["ratios"])
    assert np.all(np.abs(joint.ratios / r - 1) < 0.005), joint.ratios
    assert np.all(np.abs(joint.ratios - r) <= 4 * joint.ratios_std + 1e-12)
    q, q_std = joint.misalignment, joint.misalignment_std
    assert np.all(np.abs(q - np.asarray(truth["misalignment"])) <= 4 * q_std)
    assert abs(joint.drag_ratio - truth["drag_ratio"]) <= 4 * joint.drag_ratio_std
    assert np.all(np.abs(joint.bias - np.asarray(truth["bias"])) <= 4 * joint.bias_std)
    assert np.all(np.abs(joint.omega0 - np.asarray(truth["omega0"])) <= 4 * joint.omega0_std + 1e-9)
    assert joint.converged and 0.015 < joint.sigma_gyro < 0.025  # the noise is 0.02 rad/s


def test_per_throw_intervals_cover_the_truth(synthetic):
    """Each throw alone (no initial inertia): the right basin, and the stated intervals cover the
    truth about as often as they claim (8 intervals: at most two outside 2 sigma, at least three inside
    1 sigma), with a scatter across throws the stated errors explain."""
    _, truth, joint, each = synthetic
    r = np.asarray(truth["ratios"])
    R = np.asarray([f.ratios for f in each])
    S = np.asarray([f.ratios_std for f in each])
    assert np.all(np.abs(R / r - 1) < 0.02), R
    z = np.abs((R - r)[:, :2] / S[:, :2])
    assert np.sum(z > 2) <= 2 and np.sum(z <= 1) >= 3, z
    # the scatter of per-throw fits in the joint fit's basin (each started at its values)
    sc = idf.scatter(idf.identify_each(joint.throws, OBSERVE, options=OPTIONS, from_fit=joint), joint)
    assert sc.dof == 6 and sc.p_value > 1e-3, sc.sentence()


def test_quarter_turned_axes_are_renamed(synthetic):
    """A body with moments (a, b, c) turned a quarter turn about its second axis is the one with (c, b, a):
    the same residuals; the fit names the axes after the sensor's."""
    from jaxrot.studies.identify import _relabel

    _, _, joint, _ = synthetic
    layout, model = joint.model.layout, joint.model
    sb = layout.shared_blocks()
    P0 = np.array([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0], [-1.0, 0.0, 0.0]])  # a quarter turn about y
    Q = np.asarray(jaxrot_so3.exp(jnp.asarray(joint.misalignment)))
    turned_s, turned_o = joint.shared.copy(), joint.own.copy()
    turned_s[:2] = im.u_from_moments(np.abs(P0.T) @ joint.moments_trace1)
    turned_s[sb["misalignment"]] = np.asarray(jaxrot_so3.log(jnp.asarray(Q @ P0)))
    turned_o[:, :3] = joint.own[:, :3] @ P0
    data = im.pack(joint.throws)
    same = residuals_all(model, jnp.asarray(joint.shared), jnp.asarray(joint.own), data)
    other = residuals_all(model, jnp.asarray(turned_s), jnp.asarray(turned_o), data)
    assert np.allclose(same, other, atol=1e-9)
    back_s, back_o = _relabel(layout, im.QUADRATIC_DRAG, turned_s, turned_o)
    assert np.allclose(back_s, joint.shared, atol=1e-9) and np.allclose(back_o, joint.own, atol=1e-9)
    assert _relabel(layout, im.QUADRATIC_DRAG, joint.shared, joint.own) is None


def test_gradient_of_the_loss_matches_central_differences():
    throws, truth = synthetic_throws(BOOK, 1, seed=5, duration=(0.5, 0.6))
    layout = im.Layout(1, True, True, "shared", True, False)
    model = make_model(throws, layout, im.QUADRATIC_DRAG, idf.IdentifyOptions())
    data = im.pack(throws)
    rng = np.random.default_rng(0)
    shared = jnp.asarray(np.concatenate([im.u_from_moments(truth["J"]) + 0.01, [4e-4], rng.normal(0, 0.02, 3),
                                         rng.normal(0, 0.01, 3), rng.normal(0, 0.02, 3)]))
    own = jnp.asarray(np.asarray(truth["omega0"]) + rng.normal(0, 0.05, (1, 3)))
    r, A, B = jax.jit(lambda s, o: linearise_all(model, s, o, data))(shared, own)
    res = jax.jit(lambda s, o: residuals_all(model, s, o, data))
    assert np.allclose(r, res(shared, own), rtol=0, atol=1e-14)
    h = 1e-6
    for j in range(shared.size):
        e = jnp.zeros(shared.size).at[j].set(h)
        fd = (res(shared + e, own) - res(shared - e, own)) / (2 * h)
        assert np.allclose(A[..., j], fd, rtol=1e-5, atol=1e-6 * np.abs(fd).max() + 1e-9), j
    for j in range(3):
        e = jnp.zeros((1, 3)).at[0, j].set(h)
        fd = (res(shared, own + e) - res(shared, own - e)) / (2 * h)
        assert np.allclose(B[..., j], fd, rtol=1e-5, atol=1e-6 * np.abs(fd).max() + 1e-9), j
    # and the loss's gradient as the solver forms it, J^T r
    loss = lambda s: 0.5 * jnp.sum(res(s, own) ** 2)  # noqa: E731
    g = np.einsum("tmp,tm->p", A, r)
    fd = np.asarray([(loss(shared + h * jnp.eye(shared.size)[j]) - loss(shared - h * jnp.eye(shared.size)[j])) / (2 * h)
                     for j in range(shared.size)])
    assert np.allclose(g, fd, rtol=1e-5, atol=1e-8 * np.abs(fd).max())


def test_absolute_moments_need_a_scale(synthetic):
    _, truth, joint, _ = synthetic
    with pytest.raises(ValueError, match="fix only the ratios"):
        joint.moments()
    J, J_std = joint.moments(trace=2.0)
    assert np.isclose(J.sum(), 2.0) and np.allclose(J / J.max(), joint.ratios)
    Jb, _ = joint.moments(mass=0.6, dimensions=(0.24, 0.17, 0.03))
    assert np.isclose(Jb.sum(), 0.6 * (0.24 ** 2 + 0.17 ** 2 + 0.03 ** 2) / 6)
    L = float(np.linalg.norm(J * joint.omega0[1]))  # the momentum of throw 1 for that trace
    assert np.allclose(joint.moments(momentum=(1, L))[0], J)
    with pytest.raises(ValueError, match="both mass= and dimensions="):
        joint.moments(mass=0.6)
    with pytest.raises(ValueError, match="one scale"):
        joint.moments(trace=1.0, momentum=(0, 1.0))


def test_cli_fits_the_phyphox_book(tmp_path, capsys):
    out = tmp_path / "report"
    rc = cli.main(["--quiet", "fit", str(BOOK_CSV), "--out", str(out), "--no-per-throw", "--trace", "0.00874"])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert {p.name for p in out.iterdir()} >= {"identification.md", "identification.json", "rates.png", "residuals.png",
                                                "polhode.png", "provenance.json"}
    rec = json.loads((out / "identification.json").read_text())
    assert np.allclose(rec["joint"]["ratios"], BOOK, atol=2e-3)
    assert np.allclose(rec["joint"]["misalignment_deg"], (1.5, -2.0, 1.0), atol=0.1)
    assert rec["comparison"]["supports_drag"] and "support the drag term" in text
    assert np.allclose(rec["absolute"]["J"], (0.001490, 0.002925, 0.004325), rtol=5e-3)


# --- refusals ---------------------------------------------------------------------------------------

ROWS = [f"{0.01 * k:.4f},{0.1:.3f},{9.0 if 20 <= k < 80 else 0.1:.3f},{0.2:.3f},1.0" for k in range(100)]


def _csv(tmp_path, lines, header=HEADER, name="rec.csv"):
    p = tmp_path / name
    p.write_text("\n".join([header] + lines) + "\n")
    return p


@pytest.mark.parametrize("edit, message", [
    (lambda h, r: (h.replace("Gyroscope y (rad/s)", "Gyro y"), r), "no column 'Gyroscope y (rad/s)'"),
    (lambda h, r: (h, r[:5] + ["0.05,0.1,abc,0.2,1"] + r[6:]),
     "line 7, column 'Gyroscope y (rad/s)': 'abc' is not a number"),
    (lambda h, r: (h, r[:5] + ["0.05,NaN,0.1,0.2,1"] + r[6:]), "line 7, column 'Gyroscope x (rad/s)': NaN"),
    (lambda h, r: (h, r[:5] + ["0.03,0.1,0.1,0.2,1"] + r[6:]), "line 7, column 'Time (s)': time 0.03 is not after"),
    (lambda h, r: (h, r[:5] + ["0.05,0.1"] + r[6:]), "line 7: 2 field"),
    (lambda h, r: (h, r[:4]), "4 sample(s); at least 10"),
    (lambda h, r: ("", []), "empty"),
])
def test_bad_files_are_refused_naming_the_line_and_column(tmp_path, edit, message):
    header, rows = edit(HEADER, list(ROWS))
    p = _csv(tmp_path, rows, header)
    with pytest.raises(sensors.SensorDataError) as e:
        sensors.read_csv(p)
    assert message in str(e.value) and str(p) in str(e.value)


def test_other_csvs_by_column_names_and_decimal_commas(tmp_path):
    p = _csv(tmp_path, [r.replace(",", ";").replace(".", ",") for r in ROWS], header="t;gx;gy;gz;abs")
    rec = sensors.read_csv(p, time="t", gyro=("gx", "gy", "gz"))
    assert len(rec) == 100 and np.isclose(rec.ts[1], 0.01) and np.isclose(rec.omega[30, 1], 9.0)
    assert sensors.find_flights(rec, trim=0.0) == [(0.2, 0.79)]


def test_windows_are_checked(tmp_path):
    rec = sensors.read_csv(_csv(tmp_path, ROWS))
    with pytest.raises(sensors.SensorDataError, match="window 0:0.15 has no free flight"):
        sensors.cut(rec, [(0.0, 0.15)])
    with pytest.raises(sensors.SensorDataError, match="holds 5 sample"):
        sensors.cut(rec, [(0.30, 0.345)])
    with pytest.raises(sensors.SensorDataError, match="lies outside"):
        sensors.cut(rec, [(5.0, 6.0)])
    with pytest.raises(sensors.SensorDataError, match="START:END"):
        sensors.parse_window("2.0-3.0")
    still = sensors.read_csv(_csv(tmp_path, [f"{0.01 * k:.3f},0.1,0.1,0.1,0.2" for k in range(50)], name="still.csv"))
    with pytest.raises(sensors.SensorDataError, match="no free flight found"):
        sensors.find_flights(still)


@pytest.mark.parametrize("argv, message", [
    (["--window", "0:0.15"], "has no free flight"),
    (["--window", "0.1"], "START:END"),
    (["--gyro-columns", "a,b"], "three names"),
    (["--trace", "1", "--mass", "1", "--dimensions", "1,1,1"], "one scale"),
    (["--mass", "1"], "both --mass and --dimensions"),
    (["--dt", "0"], "--dt must be a positive step"),
])
def test_cli_refuses_bad_input_with_exit_code_2_and_writes_nothing(tmp_path, capsys, argv, message):
    p = _csv(tmp_path, ROWS)
    out = tmp_path / "out"
    rc = cli.main(["fit", str(p), "--out", str(out)] + argv)
    err = capsys.readouterr().err
    assert rc == 2 and message in err and err.count("\n") == 1, err
    assert not out.exists()


def test_cli_bad_file_exit_code_2(tmp_path, capsys):
    p = _csv(tmp_path, ROWS[:5] + ["0.05,nan,0.1,0.2,1"] + ROWS[6:])
    out = tmp_path / "out"
    assert cli.main(["fit", str(p), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "line 7" in err and "Gyroscope x (rad/s)" in err and not out.exists()
    assert cli.main(["fit", str(tmp_path / "missing.csv"), "--out", str(out)]) == 2
    assert "no such file" in capsys.readouterr().err and not out.exists()


def test_throws_and_options_are_checked():
    ts = np.arange(20) * 0.01
    with pytest.raises(ValueError, match="at least 10"):
        idf.Throw(ts[:5], omega=np.zeros((5, 3)))
    with pytest.raises(ValueError, match="sample 3 .* is not after sample 2"):
        idf.Throw(np.r_[ts[:3], ts[2], ts[4:]], omega=np.zeros((20, 3)))
    with pytest.raises(ValueError, match="omega of sample 4 is not finite"):
        idf.Throw(ts, omega=np.where(np.arange(20)[:, None] == 4, np.nan, 0.0) * np.ones((20, 3)))
    with pytest.raises(ValueError, match="no observations"):
        idf.Throw(ts)
    with pytest.raises(ValueError, match="bias"):
        idf.Gyroscope(bias="sometimes")
    with pytest.raises(ValueError, match="robust loss"):
        idf.IdentifyOptions(robust="l1")
    with pytest.raises(ValueError, match="has no attitudes"):
        idf.identify([idf.Throw(ts, omega=np.ones((20, 3)))], idf.Attitudes(0.01))
    with pytest.raises(ValueError, match="torque must be"):
        idf.identify([idf.Throw(ts, omega=np.ones((20, 3)))], torque="wind")


@pytest.mark.slow  # a --quick reproduction: the fits it makes are the tests' above
def test_identify_reproduction_quick(tmp_path):
    from jaxrot.experiments import identify as experiment

    res = experiment.main(quick=True, out_dir=tmp_path)
    assert {p.name for p in tmp_path.iterdir()} >= {"identify.json", "identify.md", "identify.png"}
    assert res["per_throw"]["right_basin"] == res["n_throws"] == 4
    assert max(abs(e) for e in res["joint"]["ratio_errors_pct"]) < 0.5
    assert res["discretisation_error"] < 1e-3 * res["truth"]["noise"]


def test_attitudes_alone_fix_the_ratios():
    """Attitudes (no gyroscope) of two torque-free flips from jaxrot's DOP853 reference, 1 mrad noise."""
    from jaxrot import reference, torques
    import jaxrot

    J = np.asarray(BOOK) / np.sum(BOOK)
    rng = np.random.default_rng(3)
    throws = []
    for w0 in ((0.05, 9.0, 0.08), (-0.1, -10.0, 0.06)):
        R0 = np.asarray(jaxrot_so3.exp(jnp.asarray(rng.normal(size=3))))
        prob = jaxrot.Problem(jaxrot.RigidBody(J), torques.FreeTorque(), jaxrot.State(R0, J * np.asarray(w0)), 1.0)
        tr = reference.reference_solution(prob, 1.0, n_frames=60)
        noise = jax.vmap(jaxrot_so3.exp)(jnp.asarray(rng.normal(0, 1e-3, (61, 3))))
        throws.append(idf.Throw(np.asarray(tr.ts), R=np.asarray(tr.states.R @ noise)))
    fit = idf.identify(throws, idf.Attitudes(sigma=1e-3), torque=None, misalignment=False,
                       options=idf.IdentifyOptions(candidates=256, search_throws=2))
    r = np.asarray(BOOK)
    assert np.all(np.abs(fit.ratios / r - 1) < 0.002) and np.all(np.abs(fit.ratios - r) <= 4 * fit.ratios_std + 1e-12)
    assert 0.7e-3 < fit.sigma_att < 1.3e-3


@pytest.mark.parametrize("kind", ["huber", "soft_l1", "cauchy"])
def test_robust_weights_give_the_loss_gradient(kind):
    """The re-weighted Gauss-Newton step uses J^T (w^2 r): w^2 r must be the robust cost's gradient in r."""
    from jaxrot.studies.levenberg_marquardt import Robust

    loss = Robust(kind, 0.7)
    r = jnp.linspace(-5.0, 5.0, 41)
    assert np.allclose(jax.grad(loss.cost)(r), loss.weights(r) ** 2 * r, rtol=1e-12, atol=1e-15)
    assert np.isclose(loss.cost(jnp.asarray([1e-4])), 0.5e-8, rtol=1e-6)  # the square near zero


@pytest.mark.slow  # one more compiled fit (the Huber loss is a program of its own)
def test_a_robust_loss_shrugs_off_glitches(synthetic):
    throws, truth, _, _ = synthetic
    rng = np.random.default_rng(4)
    glitched = []
    for t in throws:
        om = t.omega.copy()
        k = rng.choice(len(om), 4, replace=False)
        om[k] += rng.choice([-1.0, 1.0], (4, 3)) * 2.0  # 2 rad/s spikes: a hundred times the noise
        glitched.append(idf.Throw(t.ts, omega=om))
    r = np.asarray(truth["ratios"])
    plain = idf.identify(glitched, OBSERVE, options=OPTIONS)
    robust = idf.identify(glitched, OBSERVE, options=idf.IdentifyOptions(candidates=512, search_throws=1,
                                                                          robust="huber"))
    assert np.abs(robust.ratios / r - 1).max() < 0.5 * np.abs(plain.ratios / r - 1).max()
    assert np.all(np.abs(robust.ratios - r) <= 4 * robust.ratios_std + 1e-12)
