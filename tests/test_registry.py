"""Method facts live on the classes: the registry, `jaxrot list`, the docs and the generic tests read
them from there; wrappers derive theirs; adding a method is one class plus one `register` line."""

import jax
import jax.numpy as jnp
import pytest

import jaxrot
from jaxrot import integrators, problems, so3
from jaxrot.integrators import REGISTRY, EnergyProjection, Reorthonormalize
from jaxrot import State, StepStats

FACTS = ("order", "free_order", "conserves", "implicit", "torque", "on_so3", "torque_evals", "reference", "family")


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_registry_reads_the_facts_of_the_class(name):
    info, m = REGISTRY[name], REGISTRY[name].factory()
    for f in FACTS:
        assert getattr(info, f) == (tuple(getattr(m, f)) if f == "conserves" else getattr(m, f)), f
    assert info.family and info.reference and info.order >= 1


def test_wrappers_derive_their_facts():
    base = integrators.Split4((2, 3, 1))
    ep = EnergyProjection(base)
    assert ep.order == base.order == 4 and ep.family == "splitting"
    assert ep.conserves == ("L", "|Pi|", "E") and not ep.torque
    assert EnergyProjection(integrators.Buss3()).conserves == ("L", "|Pi|", "E")
    rk = Reorthonormalize(integrators.RK4())
    assert not integrators.RK4().on_so3 and rk.on_so3 and rk.order == 4 and rk.torque_evals == "4"
    assert integrators.LieMidE().order == 1 and integrators.LieMidE().free_order == 2


def test_free_only_capability_is_checked_once_by_the_driver():
    with pytest.raises(ValueError, match="torque-free"):
        jaxrot.simulate("split2_231", problems.get("fast_top"), 0.01, 10)
    with pytest.raises(ValueError, match="torque-free"):
        batch = jax.tree_util.tree_map(lambda x: x[None], problems.get("fast_top").state0)
        jaxrot.simulate_batch("dmv", problems.get("fast_top"), 0.01, 10, states0=batch)


class _BodyFrameEuler(integrators.AbstractIntegrator):
    """A toy explicit method: Omega from Pi, R <- R exp(h Omega), Pi rotated along (free only)."""

    order = 1
    conserves = ("L", "|Pi|")
    torque = False
    torque_evals = "0 (free only)"
    reference = "test"
    family = "baseline"

    def step(self, problem, t, state, aux, dt):
        E = so3.exp(dt * state.Pi / problem.body.J)
        return State(state.R @ E, E.T @ state.Pi), aux, StepStats.explicit()


def test_a_new_method_is_one_class_and_one_line():
    try:
        info = integrators.register("toy_euler", _BodyFrameEuler, "a toy")
        assert (info.order, info.conserves, info.torque, info.family) == (1, ("L", "|Pi|"), False, "baseline")
        tr = jaxrot.simulate("toy_euler", problems.get("t_handle"), 1e-3, 50)
        L = tr.states.L
        assert float(jnp.abs(L[-1] - L[0]).max()) < 1e-13
        with pytest.raises(ValueError, match="already registered"):
            integrators.register("toy_euler", _BodyFrameEuler)
    finally:
        REGISTRY.pop("toy_euler", None)


def test_the_generic_tests_enrol_a_registered_method():
    """One class and one registry line (tests/toy_method.py, loaded as a pytest plugin) put a method
    into every generic test: order, invariants, jit/vmap, gradients, float32; and it passes them."""
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    # one process: -v lists every test it ran with its outcome
    cmd = [sys.executable, "-m", "pytest", "-o", "addopts=", "-p", "tests.toy_method", "-v", "-p", "no:cacheprovider",
           "-n", "0", "tests/test_integrators.py", "-k", "toy_euler"]
    ran = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0 and " passed" in ran.stdout, ran.stdout[-3000:]
    passed = [line for line in ran.stdout.splitlines() if "toy_euler" in line and "PASSED" in line]
    for generic in ("test_order_free_body", "test_invariants_torque_free", "test_jit_vmap_agree",
                    "test_gradients_finite", "test_float32"):
        assert any(f"{generic}[toy_euler]" in line for line in passed), (generic, ran.stdout[-2000:])
