"""The command line explains itself: each defect a new user met has a test (exit code, a one-line
message, no traceback), and arguments are checked before anything is computed."""

import jax
import numpy as np
import pytest

import jaxrot
from jaxrot.present import cli


def _run(capsys, *argv):
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code == 0 and jaxrot.__version__ in capsys.readouterr().out


def test_list_problems(capsys):
    rc, out, _ = _run(capsys, "list", "problems")
    assert rc == 0
    for name in jaxrot.problems.PROBLEMS:
        assert name in out


def test_run_help_lists_problems(capsys):
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    out = capsys.readouterr().out
    assert "t_handle" in out and "Dzhanibekov" in out and "jaxrot list" in out


@pytest.mark.parametrize("argv, message", [
    (["run", "nope", "t_handle", "--dt", "0.1", "--steps", "10"], "unknown method 'nope'"),
    (["run", "buss2p", "nope", "--dt", "0.1", "--steps", "10"], "unknown problem 'nope'"),
    (["run", "buss2p", "t_handle", "--dt", "0.1", "--steps", "10", "--save-every", "3"], "--save-every"),
    (["run", "buss2p", "t_handle", "--dt", "0.1", "--steps", "10", "--save-every", "0"], "--save-every"),
    (["run", "buss2p", "t_handle", "--dt", "0", "--steps", "10"], "--dt"),
    (["run", "buss2p", "t_handle", "--dt", "nan", "--steps", "10"], "--dt"),
    (["run", "buss2p", "t_handle", "--dt", "0.1", "--steps", "0"], "--steps"),
    (["run", "buss2p", "t_handle", "--dt", "0.1", "--steps", "10", "--plot", "/no/such/dir/a.png"], "does not exist"),
    (["run", "buss2p", "t_handle", "--dt", "0.1", "--steps", "10", "--plot", "a.txt"], "--plot must end in"),
    (["run", "buss2p", "t_handle", "--dt", "0.1", "--steps", "10", "--save", "a.csv"], "--save must end in .npz"),
    (["bench", "buss", "--suite"], "--suite is an option of 'bench precision'"),
    (["bench", "precision", "--seed", "3"], "--seed is an option of 'bench unseen'"),
    (["bench", "precision", "--device", "cpu"], "--device is an option of 'bench throughput'"),
])
def test_bad_arguments_fail_before_computing(capsys, monkeypatch, argv, message):
    def no_simulation(*a, **k):
        raise AssertionError("simulate was called before the arguments were checked")

    monkeypatch.setattr(jaxrot, "simulate", no_simulation)
    rc, _, err = _run(capsys, *argv)
    assert rc == 2
    assert err.startswith("jaxrot: error: ") and message in err and "Traceback" not in err
    assert err.count("\n") == 1 and "\"'" not in err and not err.startswith("jaxrot: error: '")


def test_failed_simulation_is_one_line_with_an_actionable_hint(capsys):
    rc, _, err = _run(capsys, "run", "midpoint_exp", "t_handle", "--dt", "20", "--steps", "10")
    assert rc == 1
    assert err.count("\n") == 1 and "failed at step" in err and "--no-throw" in err and "throw=False" not in err


def test_a_failed_experiment_does_not_point_at_options_it_lacks(capsys, monkeypatch, tmp_path):
    import importlib

    from jaxrot import RESULTS
    from jaxrot.driver.failures import SimulationError

    def fails(**kw):
        raise SimulationError("x", step=7, reason=RESULTS.max_steps_reached)

    monkeypatch.setattr(importlib.import_module(cli.BENCHMARKS["precision"]), "main", fails)
    rc, _, err = _run(capsys, "bench", "precision", "--out", str(tmp_path / "b"))
    assert rc == 1 and err.count("\n") == 1
    assert "step 7: the adaptive controller used up max_steps" in err and "--dt" not in err


def test_no_throw_keeps_the_trajectory_and_saves_it(capsys, tmp_path):
    path = tmp_path / "run.npz"
    rc, out, _ = _run(capsys, "run", "midpoint_exp", "t_handle", "--dt", "20", "--steps", "10", "--no-throw",
                      "--save", str(path), "--plot", str(tmp_path / "run.png"))
    assert rc == 0 and "failed" in out and "statistics below cover" in out
    traj = jaxrot.load(path)
    assert traj.info["method"] == "midpoint_exp" and traj.info["problem"] == "t_handle"
    assert int(traj.failed_step) > 0 and (tmp_path / "run.png").stat().st_size > 0


def test_default_save_every_divides_steps():
    for n in [1, 7, 199, 200, 1000, 1001, 12345]:
        s = cli._default_save_every(n)
        assert n % s == 0 and (n // s >= 200 or s == 1)


def test_save_load_round_trip_is_exact(tmp_path):
    jax.config.update("jax_enable_x64", True)
    p = jaxrot.problems.get("fast_top")
    for dtype in (np.float64, np.float32):
        q = jax.tree_util.tree_map(lambda x: x.astype(dtype) if hasattr(x, "astype") else x, p)
        traj = jaxrot.simulate("liemid_ea", q, 1e-2, 20, save_every=5)
        traj.save(tmp_path / "t.npz")
        back = jaxrot.load(tmp_path / "t.npz")
        for a, b in zip(jax.tree_util.tree_leaves(traj), jax.tree_util.tree_leaves(back)):
            assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(np.asarray(a), np.asarray(b))
        info = back.info
        assert info == traj.info
        assert info["method"] == "liemid_ea" and info["problem"] == "fast_top" and info["dt"] == "0.01"
        assert info["n_steps"] == "20" and info["dtype"] == np.dtype(dtype).name and info["jax"] == jax.__version__
    with pytest.raises(ValueError, match=".npz"):
        traj.save(tmp_path / "t.csv")
    with pytest.raises(FileNotFoundError):
        jaxrot.load(tmp_path / "missing.npz")


def test_quick_reproduce_leaves_the_checkout_clean(capsys, monkeypatch):
    """--quick writes to a fresh temporary folder, never over the committed figures."""
    import pathlib
    import shutil
    import subprocess

    root = pathlib.Path(__file__).resolve().parents[1]
    if shutil.which("git") is None or not (root / ".git").exists():
        pytest.skip("not a git checkout")

    def status():
        return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=root,
                              capture_output=True, text=True, check=True).stdout

    before = status()
    monkeypatch.chdir(root)
    assert cli.main(["reproduce", "dancing_pole", "--quick"]) == 0
    assert "quick run: writing to" in capsys.readouterr().out
    assert status() == before
    from jaxrot.experiments._common import setup

    out = setup(None, quick=True)
    assert root not in out.resolve().parents and out.resolve() != root / "figures"


def test_dt_as_string_is_a_clear_type_error():
    p = jaxrot.problems.get("t_handle")
    with pytest.raises(TypeError, match="dt must be a number"):
        jaxrot.simulate("buss2p", p, "0.01", 10)


def test_problems_build_without_x64_and_without_warnings():
    import subprocess
    import sys

    code = ("import warnings; warnings.simplefilter('error'); from jaxrot import problems\n"
            "for n in problems.PROBLEMS: assert str(problems.get(n).body.J.dtype) == 'float32', n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"JAX_ENABLE_X64": "0",
                       "PATH": "/usr/bin:/bin", "JAX_PLATFORMS": "cpu"})
    assert r.returncode == 0, r.stderr[-2000:]


def test_bench_throughput_makes_every_core_a_device_before_jax_starts():
    """`jaxrot bench throughput` calls use_cpu_cores before anything in the CLI starts JAX (building
    the problem list once did, and the bench silently ran on one device). The benchmark itself is
    replaced by a probe, in a fresh process."""
    import os
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        """
        import jax
        import jaxrot.experiments.bench_throughput as b
        b.main = lambda **kw: print("DEVICES", len(jax.devices()))
        from jaxrot.present.cli import main
        main(["bench", "throughput", "--quick"])
        """
    )
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert f"DEVICES {cores}" in out.stdout, out.stdout + out.stderr[-2000:]


def test_run_auto_with_a_tolerance_uses_the_suggestion(capsys):
    rc, out, _ = _run(capsys, "--quiet", "run", "auto", "free_body_hlw", "--tol", "1e-9")
    assert rc == 0 and "suggested for tol 1e-09: exact_free" in out
    err = float(out.split("attitude error vs reference: final")[1].split()[0])
    assert err < 1e-9
    # with a torque the suggested step count is the one run (not the report's 200 frames)
    rc, out, _ = _run(capsys, "--quiet", "run", "auto", "gravity_gradient", "--tol", "1e-6")
    n = int(out.split(" steps for 1e-06")[0].split()[-1])
    assert rc == 0 and f", {n} steps, t_end" in out and n != 200
    assert float(out.split("attitude error vs reference: final")[1].split()[0]) <= 3e-6
    rc, _, err = _run(capsys, "run", "buss4", "t_handle", "--tol", "1e-6")
    assert rc == 2 and "run auto PROBLEM --tol" in err
    rc, _, err = _run(capsys, "run", "buss4", "t_handle")
    assert rc == 2 and "--dt and --steps" in err
