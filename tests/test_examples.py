"""Every script in examples/ runs and gives the answer it claims (small sizes where it takes them)."""

import importlib.util
import pathlib

import numpy as np
import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"
SMALL = {"batch_of_bodies": {"n_bodies": 64, "n_steps": 100}, "fit_inertia": {"n_obs": 30, "max_iters": 30},
         "convergence_map": {"n": 21, "png": None}, "fit_damping": {"n_obs": 20, "max_iters": 20}}


def _load(name):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_example_is_covered():
    assert {p.stem for p in EXAMPLES.glob("*.py")} == {"batch_of_bodies", "flip_time_gradient", "fit_inertia",
                                                      "convergence_map", "fit_damping", "user_pair_fused"}


def test_batch_of_bodies():
    r = _load("batch_of_bodies").main(**SMALL["batch_of_bodies"])
    assert all(v["momentum"] < 1e-13 for v in r.values())  # every method listed conserves L
    assert r["buss3_ep"]["energy"] < 1e-13 and r["euler_svd"]["energy"] > 1e-3


@pytest.mark.slow  # the same gradient as tests/test_events.py, through the example script
def test_flip_time_gradient():
    r = _load("flip_time_gradient").main()
    np.testing.assert_allclose(r["grad"], r["fd"], rtol=1e-6)


@pytest.mark.slow  # the same fit as tests/test_fitting.py, through the example script
def test_fit_inertia():
    r = _load("fit_inertia").main(**SMALL["fit_inertia"])
    err = np.abs(np.array(r["J"]) / np.array(r["J_true"]) - 1)
    assert err.max() < 1e-3


def test_convergence_map(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = _load("convergence_map").main(n=21)
    assert r["inside_disc"] == 1.0 and 0.5 < r["converged"] < 1.0  # Kantorovich: guaranteed inside the disc
    assert (tmp_path / "convergence_map.png").stat().st_size > 0


def test_fit_damping():
    r = _load("fit_damping").main(**SMALL["fit_damping"])
    assert abs(r["c"] / r["c_true"] - 1) < 0.01 and abs(r["c"] - r["c_true"]) < 4 * r["c_std"]


@pytest.mark.slow  # the fused run and its agreement are tests/test_kernels_generated.py's; here the script
def test_user_pair_fused():
    r = _load("user_pair_fused").main(n=8)
    assert r["executor"].startswith("Fused") and r["same_accepted_steps"]
    assert r["max_event_time_difference"] < 1e-12 and abs(r["grad_event_time_J"][2]) > 0
